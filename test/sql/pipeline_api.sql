-- ash_replicant_configure_pipeline: decoder grammar, bounds, census
-- normalisation, initial-state agreement, replace semantics.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

SELECT ash_replicant_create_sink('pipe');
SELECT ash_replicant_create_sink('pipe_fwd', initial_state => 'go_forward');
SELECT ash_replicant_create_sink('pipe_snap', initial_state => 'snapshot');
SELECT ash_replicant_create_sink('pipe_log', sink_kind => 'append_log', initial_state => 'go_forward');

CREATE VIEW regress_pipelines AS
  SELECT p.sink_name, p.connection IS NOT NULL AS has_connection, p.decoder,
         p.publication, p.replication_sets, p.tables, p.allow_keyless_tables,
         p.source_system_identifier, p.source_database, p.go_forward_only,
         p.snapshot, p.chunk_rows, p.max_pending_chunks, p.streaming,
         p.failover, p.binary_transfer, p.max_inflight_lag,
         p.max_command_retries, p.schema_check_interval_ms, p.census,
         p.enabled, p.start_generation, s.config_version
    FROM ash_replicant.pipelines p JOIN ash_replicant.sinks s USING (sink_name);

-- happy paths -----------------------------------------------------------------
-- pgoutput with defaults; connection may be left out until start
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'pub_all');
SELECT * FROM regress_pipelines WHERE sink_name = 'pipe';
-- calling again replaces the whole configuration (and bumps config_version)
SELECT ash_replicant_configure_pipeline('pipe', 'host=src.invalid dbname=app',
    publication => 'pub_orders', source_system_identifier => '7301234567890123456',
    source_database => 'app', snapshot => 'v1', chunk_rows => 1, max_pending_chunks => 1,
    streaming => true, failover => true, binary_transfer => true,
    max_inflight_lag => 1048576, max_command_retries => 0,
    schema_check_interval_ms => 50,
    census => '{"enabled": false, "interval_ms": 50, "jitter_ratio": 0.0, "timeout_ms": 1, "max_consecutive_faults": 1}');
SELECT * FROM regress_pipelines WHERE sink_name = 'pipe';
-- upper census bounds; a key given twice keeps the last value (jsonb)
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'pub_orders',
    snapshot => 'incremental', go_forward_only => false,
    census => '{"interval_ms": 1, "interval_ms": 86400000, "jitter_ratio": 0.5, "timeout_ms": 60000, "max_consecutive_faults": 1000}');
SELECT go_forward_only, snapshot, census FROM regress_pipelines WHERE sink_name = 'pipe';
-- census numbers may be written in any JSON notation
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'pub_orders',
    census => '{"interval_ms": 6e4, "timeout_ms": 1000.000, "jitter_ratio": 2.5e-1}');
SELECT go_forward_only, census FROM regress_pipelines WHERE sink_name = 'pipe';
-- go_forward_only left NULL is derived: false for a snapshot mode
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'pub_orders', snapshot => 'incremental');
SELECT go_forward_only, snapshot FROM regress_pipelines WHERE sink_name = 'pipe';
-- wal2json: tables normalised like ignored_sources
SELECT ash_replicant_configure_pipeline('pipe_fwd', NULL, decoder => 'wal2json',
    tables => ARRAY['public.orders', 'Sales."Line Items"'], allow_keyless_tables => true);
SELECT * FROM regress_pipelines WHERE sink_name = 'pipe_fwd';
-- pglogical: replication sets
SELECT ash_replicant_configure_pipeline('pipe_snap', NULL, decoder => 'pglogical',
    replication_sets => ARRAY['default', 'ddl_sql'], snapshot => 'v1');
SELECT * FROM regress_pipelines WHERE sink_name = 'pipe_snap';
-- append log: its initial state agrees with the snapshot mode
SELECT ash_replicant_configure_pipeline('pipe_log', NULL, publication => 'pub_events');
SELECT sink_name, snapshot, go_forward_only FROM regress_pipelines WHERE sink_name = 'pipe_log';
-- replacing keeps enabled, start_generation and the halt record
UPDATE ash_replicant.pipelines SET enabled = true, start_generation = 7,
    halt_generation = 7, halt_reason = 'census_drift', halt_class = 'halted'
  WHERE sink_name = 'pipe_log';
SELECT ash_replicant_configure_pipeline('pipe_log', NULL, publication => 'pub_events2');
SELECT sink_name, publication, enabled, start_generation, halt_generation, halt_reason, halt_class, config_version
  FROM ash_replicant.pipelines JOIN ash_replicant.sinks USING (sink_name) WHERE sink_name = 'pipe_log';
UPDATE ash_replicant.pipelines SET enabled = false WHERE sink_name = 'pipe_log';

-- rejections: each changes nothing --------------------------------------------
CREATE TEMP TABLE regress_before AS SELECT * FROM regress_pipelines;
-- sink
SELECT ash_replicant_configure_pipeline(NULL, NULL, publication => 'p');
SELECT ash_replicant_configure_pipeline('no_such_sink', NULL, publication => 'p');
-- decoder grammar
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', decoder => 'test_decoding');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', decoder => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => '');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => repeat('p', 64));
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', replication_sets => ARRAY['default']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', tables => ARRAY['public.t']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', tables => '{}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', allow_keyless_tables => true);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json');
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => '{}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => ARRAY['orders']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => ARRAY['public.t', NULL]);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => ARRAY['public.t', 'Public.T']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => ARRAY['public.t'], publication => 'p');
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => ARRAY['public.t'], replication_sets => ARRAY['default']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical');
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => '{}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY['default', NULL]);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY['default', '']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY['default', 'default']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY[repeat('r', 64)]);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY['default'], publication => 'p');
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY['default'], tables => ARRAY['public.t']);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY['default'], allow_keyless_tables => true);
-- capabilities only pgoutput expresses
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => ARRAY['public.t'], streaming => true);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'pglogical', replication_sets => ARRAY['default'], failover => true);
SELECT ash_replicant_configure_pipeline('pipe', NULL, decoder => 'wal2json', tables => ARRAY['public.t'], binary_transfer => true);
-- snapshot mode
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', snapshot => 'full');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', snapshot => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', snapshot => 'incremental', go_forward_only => true);
-- bounds and NULLs
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', chunk_rows => 0);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', max_pending_chunks => 0);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', max_inflight_lag => 1048575);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', max_command_retries => -1);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', schema_check_interval_ms => 49);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', chunk_rows => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', max_pending_chunks => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', max_inflight_lag => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', max_command_retries => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', schema_check_interval_ms => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', allow_keyless_tables => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', streaming => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', failover => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', binary_transfer => NULL);
-- connection and source identity are shape-checked and never echoed
SELECT ash_replicant_configure_pipeline('pipe', 'host=src.invalid password=hunter2 oops',
    publication => 'p');
SELECT ash_replicant_configure_pipeline('pipe', 'postgresql://u:hunter2@src.invalid:notaport/db?bogus=1',
    publication => 'p');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', source_system_identifier => 'sys-7301');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', source_system_identifier => '-7301');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', source_system_identifier => '18446744073709551616');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', source_database => repeat('d', 64));
-- census: closed keys, JSON types, bounds
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => NULL);
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '[]');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '60000');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"interval": 60000}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"enabled?": true}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"enabled": "true"}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"enabled": null}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"interval_ms": "60000"}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"interval_ms": 49}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"interval_ms": 86400001}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"interval_ms": 60000.5}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"interval_ms": 1e30}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"interval_ms": {"ms": 50}}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"jitter_ratio": -0.01}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"jitter_ratio": 0.51}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"jitter_ratio": "0.1"}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"timeout_ms": 0}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"timeout_ms": 60001}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"timeout_ms": true}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"max_consecutive_faults": 0}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"max_consecutive_faults": 1001}');
SELECT ash_replicant_configure_pipeline('pipe', NULL, publication => 'p', census => '{"max_consecutive_faults": [3]}');
-- the sink's initial state must agree with the snapshot mode
SELECT ash_replicant_configure_pipeline('pipe_fwd', NULL, publication => 'p', snapshot => 'v1');
SELECT ash_replicant_configure_pipeline('pipe_snap', NULL, publication => 'p');
SELECT ash_replicant_configure_pipeline('pipe_log', NULL, publication => 'p', snapshot => 'v1');
-- nothing changed
SELECT count(*) AS changed_rows FROM (
  SELECT * FROM regress_pipelines EXCEPT SELECT * FROM regress_before) d;
SELECT count(*) AS pipelines FROM ash_replicant.pipelines;

-- cleanup ---------------------------------------------------------------------
DROP TABLE regress_before;
DROP VIEW regress_pipelines;
SELECT ash_replicant_drop_sink(s) FROM unnest(ARRAY['pipe', 'pipe_fwd', 'pipe_snap', 'pipe_log']) s;
SELECT count(*) AS sinks_left FROM ash_replicant.sinks;
