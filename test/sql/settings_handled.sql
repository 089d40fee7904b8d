-- Every configuration column is acted on or refused (never stored and
-- ignored): each column of the configuration catalogs is listed here with
-- where it is handled.  A new column fails this test until it is listed,
-- and so until someone decides what the product does with it.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS ash_replicant;
RESET client_min_messages;

CREATE TEMP TABLE handled (tbl text, col text, how text);
INSERT INTO handled VALUES
  ('sinks', 'sink_name', 'key'),
  ('sinks', 'slot_name', 'the slot and the checkpoint key'),
  ('sinks', 'sink_kind', 'state mirror or append log'),
  ('sinks', 'initial_state', 'must agree with snapshot (initial_state_mismatch)'),
  ('sinks', 'ignored_sources', 'coverage, census, apply'),
  ('sinks', 'ignored_message_prefixes', 'message routing'),
  ('sinks', 'recovery_horizon', 'message claims; refused without routes'),
  ('sinks', 'batch_max_transactions', 'batching'),
  ('sinks', 'owner', 'the role writes run as'),
  ('sinks', 'config_version', 'bookkeeping: restarts a worker on change'),
  ('sinks', 'created_at', 'bookkeeping'),
  ('pipelines', 'sink_name', 'key'),
  ('pipelines', 'connection', 'the source connection'),
  ('pipelines', 'decoder', 'pgoutput, wal2json, pglogical (src/decoder.c); a decoder not built is refused by the worker'),
  ('pipelines', 'publication', 'table set (pgoutput)'),
  ('pipelines', 'replication_sets', 'table set (pglogical); refused with the other decoders'),
  ('pipelines', 'tables', 'wal2json: add-tables and the described table set; refused with pgoutput'),
  ('pipelines', 'allow_keyless_tables', 'wal2json: decoder_table_keyless unless set; refused with pgoutput'),
  ('pipelines', 'source_system_identifier', 'identity checks'),
  ('pipelines', 'source_database', 'identity checks'),
  ('pipelines', 'go_forward_only', 'must agree with snapshot (config_invalid)'),
  ('pipelines', 'snapshot', 'off, v1, incremental (needs provenance mappings, else snapshot_unsupported)'),
  ('pipelines', 'chunk_rows', 'incremental: rows per chunk; non-default refused at start otherwise'),
  ('pipelines', 'max_pending_chunks', 'incremental: chunk windows open at once; non-default refused at start otherwise'),
  ('pipelines', 'streaming', 'pgoutput streaming'),
  ('pipelines', 'failover', 'FAILOVER slot on 17+, halt below'),
  ('pipelines', 'binary_transfer', 'pgoutput binary'),
  ('pipelines', 'origin', 'any, or none: transactions with a replication origin skipped (apply)'),
  ('pipelines', 'max_inflight_lag', 'non-default refused at start'),
  ('pipelines', 'max_command_retries', 'apply retries before apply_failed'),
  ('pipelines', 'schema_check_interval_ms', 'wal2json: the schema check interval; non-default refused at start otherwise'),
  ('pipelines', 'census', 'census options'),
  ('pipelines', 'enabled', 'start and stop'),
  ('pipelines', 'start_generation', 'bookkeeping'),
  ('pipelines', 'started_in', 'start: the installation it runs in (launcher, status)'),
  ('pipelines', 'start_attempts', 'crash-loop guard: deaths in a row at crash_lsn'),
  ('pipelines', 'crash_lsn', 'crash-loop guard: the change a worker died applying'),
  ('pipelines', 'halt_generation', 'bookkeeping'),
  ('pipelines', 'halt_reason', 'status'),
  ('pipelines', 'halt_class', 'status'),
  ('pipelines', 'halt_sqlstate', 'status'),
  ('pipelines', 'halted_at', 'status'),
  ('pipelines', 'halt_lsn', 'status'),
  ('pipelines', 'halt_target', 'status'),
  ('pipelines', 'updated_at', 'bookkeeping'),
  ('resources', 'resource_id', 'key'),
  ('resources', 'sink_name', 'key'),
  ('resources', 'target', 'apply'),
  ('resources', 'source_schema', 'apply'),
  ('resources', 'source_table', 'apply'),
  ('resources', 'column_map', 'apply'),
  ('resources', 'tenant_column', 'tenancy'),
  ('resources', 'tenant_function', 'tenancy'),
  ('resources', 'tenant_strategy', 'tenancy'),
  ('resources', 'tenant_schema_format', 'context tenancy'),
  ('resources', 'tenant_scope_function', 'provenance under context tenancy'),
  ('resources', 'sensitive', 'validation (sensitive_unprotected)'),
  ('resources', 'encrypted', 'column encryption'),
  ('resources', 'skip', 'apply'),
  ('resources', 'on_truncate', 'apply'),
  ('resources', 'on_schema_change', 'relation changes'),
  ('resources', 'upsert_identity', 'apply'),
  ('resources', 'history_strategy', 'SCD2'),
  ('resources', 'history_business_key', 'SCD2'),
  ('resources', 'history_valid_from_lsn_column', 'SCD2'),
  ('resources', 'history_valid_to_lsn_column', 'SCD2'),
  ('resources', 'history_valid_from_ts_column', 'SCD2'),
  ('resources', 'history_valid_to_ts_column', 'SCD2'),
  ('resources', 'history_current_column', 'SCD2'),
  ('resources', 'append_log', 'append log'),
  ('resources', 'append_columns', 'append log'),
  ('resources', 'snapshot_provenance', 'snapshot provenance'),
  ('resources', 'created_at', 'bookkeeping');

-- columns nobody decided about (must be none)
SELECT c.table_name, c.column_name
  FROM information_schema.columns c
 WHERE c.table_schema = 'ash_replicant'
   AND c.table_name IN ('sinks', 'pipelines', 'resources')
   AND NOT EXISTS (SELECT 1 FROM handled h WHERE h.tbl = c.table_name AND h.col = c.column_name)
 ORDER BY 1, 2;
-- listed columns that no longer exist (must be none)
SELECT h.tbl, h.col FROM handled h
 WHERE NOT EXISTS (SELECT 1 FROM information_schema.columns c
                    WHERE c.table_schema = 'ash_replicant' AND c.table_name = h.tbl
                      AND c.column_name = h.col)
 ORDER BY 1, 2;
-- contradictions of snapshot and go_forward_only are refused
\set VERBOSITY terse
SELECT ash_replicant_create_sink('sh');
SELECT ash_replicant_configure_pipeline('sh', NULL, publication => 'p', snapshot => 'v1', go_forward_only => true);
SELECT ash_replicant_configure_pipeline('sh', NULL, publication => 'p', snapshot => 'off', go_forward_only => false);
SELECT count(*) AS stored FROM ash_replicant.pipelines WHERE sink_name = 'sh';
SELECT ash_replicant_drop_sink('sh');
