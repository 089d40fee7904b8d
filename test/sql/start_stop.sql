-- ash_replicant_start / ash_replicant_stop, and drop_sink while enabled.
-- The regression database is not the one the launcher supervises
-- (ash_replicant.database = 'postgres'), so start and stop only flip
-- catalog state here.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;
\set VERBOSITY terse

CREATE VIEW regress_state AS
  SELECT sink_name, enabled, start_generation, halt_generation, halt_reason
    FROM ash_replicant.pipelines;

SELECT ash_replicant_create_sink('ss');
SELECT ash_replicant_create_sink('ss_bare');

-- start refusals --------------------------------------------------------------
SELECT ash_replicant_start('no_such_sink');
SELECT ash_replicant_start(NULL) IS NULL AS strict_null;
-- a sink without pipeline configuration
SELECT ash_replicant_start('ss_bare');
-- every missing setting is named at once, never a value
SELECT ash_replicant_configure_pipeline('ss', NULL, publication => 'pub_ss');
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', '', publication => 'pub_ss',
    source_system_identifier => '', source_database => '');
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid password=hunter2',
    publication => 'pub_ss', source_database => 'app');
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', NULL, publication => 'pub_ss',
    source_system_identifier => '7301234567890123456', source_database => 'app');
SELECT ash_replicant_start('ss');
-- settings nothing acts on are refused, never stored and ignored
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', publication => 'pub_ss',
    source_system_identifier => '7301234567890123456', source_database => 'app',
    snapshot => 'v1', chunk_rows => 5000);
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', publication => 'pub_ss',
    source_system_identifier => '7301234567890123456', source_database => 'app',
    max_inflight_lag => 1048576);
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', publication => 'pub_ss',
    source_system_identifier => '7301234567890123456', source_database => 'app',
    schema_check_interval_ms => 1000);
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', publication => 'pub_ss',
    source_system_identifier => '7301234567890123456', source_database => 'app',
    snapshot => 'v1', max_pending_chunks => 8);
SELECT ash_replicant_start('ss');
SELECT enabled FROM ash_replicant.pipelines WHERE sink_name = 'ss';
-- a table set emptied behind the API's back is missing too (per decoder)
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', publication => 'pub_ss',
    source_system_identifier => '7301234567890123456', source_database => 'app');
UPDATE ash_replicant.pipelines SET publication = '' WHERE sink_name = 'ss';
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', decoder => 'wal2json',
    tables => ARRAY['public.t'], source_system_identifier => '7301234567890123456',
    source_database => 'app');
UPDATE ash_replicant.pipelines SET tables = '{}' WHERE sink_name = 'ss';
SELECT ash_replicant_start('ss');
UPDATE ash_replicant.pipelines SET tables = ARRAY['public.t'], streaming = true WHERE sink_name = 'ss';
SELECT ash_replicant_start('ss');
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', decoder => 'pglogical',
    replication_sets => ARRAY['default'], source_system_identifier => '7301234567890123456',
    source_database => 'app');
UPDATE ash_replicant.pipelines SET replication_sets = NULL, failover = true WHERE sink_name = 'ss';
SELECT ash_replicant_start('ss');
UPDATE ash_replicant.pipelines SET replication_sets = ARRAY['default'] WHERE sink_name = 'ss';
SELECT ash_replicant_start('ss');
-- recovery horizon and routes
CREATE TABLE regress_ss_outbox (content bytea, operation_key bytea, content_digest bytea);
SELECT ash_replicant_create_sink('ss_mail', recovery_horizon => '1 day');
SELECT ash_replicant_configure_pipeline('ss_mail', 'host=src.invalid', publication => 'pub_mail',
    source_system_identifier => '7301234567890123456', source_database => 'app');
SELECT ash_replicant_start('ss_mail');
SELECT ash_replicant_add_message_route('ss_mail', 'mail', 'regress_ss_outbox'::regclass, '2 days');
UPDATE ash_replicant.message_routes SET retention = '1 hour' WHERE sink_name = 'ss_mail';
SELECT ash_replicant_start('ss_mail');
UPDATE ash_replicant.message_routes SET retention = '2 days' WHERE sink_name = 'ss_mail';
UPDATE ash_replicant.sinks SET recovery_horizon = NULL WHERE sink_name = 'ss_mail';
SELECT ash_replicant_start('ss_mail');
UPDATE ash_replicant.sinks SET recovery_horizon = '1 day' WHERE sink_name = 'ss_mail';
-- pglogical cannot deliver the logical messages a routed sink needs
SELECT ash_replicant_configure_pipeline('ss_mail', 'host=src.invalid', decoder => 'pglogical',
    replication_sets => ARRAY['default'], source_system_identifier => '7301234567890123456',
    source_database => 'app');
SELECT ash_replicant_start('ss_mail');
-- initial state changed behind the API's back
SELECT ash_replicant_create_sink('ss_fwd', initial_state => 'go_forward');
SELECT ash_replicant_configure_pipeline('ss_fwd', 'host=src.invalid', publication => 'pub_fwd',
    source_system_identifier => '7301234567890123456', source_database => 'app');
UPDATE ash_replicant.pipelines SET snapshot = 'v1' WHERE sink_name = 'ss_fwd';
SELECT ash_replicant_start('ss_fwd');
UPDATE ash_replicant.pipelines SET snapshot = 'off' WHERE sink_name = 'ss_fwd';
-- refusals changed nothing
SELECT * FROM regress_state ORDER BY sink_name;

-- start and stop --------------------------------------------------------------
SELECT ash_replicant_configure_pipeline('ss', 'host=src.invalid', publication => 'pub_ss',
    source_system_identifier => '7301234567890123456', source_database => 'app');
SELECT ash_replicant_start('ss');
SELECT * FROM regress_state WHERE sink_name = 'ss';
-- a second start opens a new generation
SELECT ash_replicant_start('ss');
SELECT * FROM regress_state WHERE sink_name = 'ss';
SELECT ash_replicant_start('ss_fwd');
SELECT ash_replicant_configure_pipeline('ss_mail', 'host=src.invalid', publication => 'pub_mail',
    source_system_identifier => '7301234567890123456', source_database => 'app');
SELECT ash_replicant_start('ss_mail');
SELECT * FROM regress_state ORDER BY sink_name;
-- stop keeps the generation; stopping again changes nothing
SELECT ash_replicant_stop('ss');
SELECT * FROM regress_state WHERE sink_name = 'ss';
CREATE TEMP TABLE regress_stopped AS
  SELECT updated_at FROM ash_replicant.pipelines WHERE sink_name = 'ss';
SELECT ash_replicant_stop('ss');
SELECT p.updated_at = s.updated_at AS untouched, p.enabled
  FROM ash_replicant.pipelines p, regress_stopped s WHERE p.sink_name = 'ss';
-- stopping a sink that has no pipeline is a no-op too; an unknown sink is an error
SELECT ash_replicant_stop('ss_bare');
SELECT ash_replicant_stop('no_such_sink');
SELECT ash_replicant_stop(NULL) IS NULL AS strict_null;
-- a deliberately stopped pipeline reports not_started
SELECT sink_name, state FROM ash_replicant_status('ss');
-- start after stop resumes under a new generation
SELECT ash_replicant_start('ss');
SELECT * FROM regress_state WHERE sink_name = 'ss';

-- drop_sink refuses while the pipeline is enabled -------------------------------
SELECT ash_replicant_drop_sink('ss');
SELECT ash_replicant_drop_sink('ss_mail');
SELECT count(*) AS sinks FROM ash_replicant.sinks;
SELECT ash_replicant_stop('ss');
SELECT ash_replicant_drop_sink('ss');
SELECT ash_replicant_stop('ss_mail');
SELECT ash_replicant_stop('ss_fwd');

-- start and stop take effect at commit only ----------------------------------------
BEGIN;
SELECT ash_replicant_start('ss_fwd');
ROLLBACK;
SELECT * FROM regress_state WHERE sink_name = 'ss_fwd';

-- cleanup ---------------------------------------------------------------------
DROP TABLE regress_stopped;
DROP VIEW regress_state;
SELECT ash_replicant_drop_sink(s) FROM unnest(ARRAY['ss_bare', 'ss_mail', 'ss_fwd']) s;
DROP TABLE regress_ss_outbox;
SELECT count(*) AS sinks_left FROM ash_replicant.sinks;
