/* ash_replicant 1.0.0 — catalogs, roles and SQL API. */

\echo Use "CREATE EXTENSION ash_replicant" to load this file. \quit

-- Roles are cluster-wide: create them only when absent, never alter existing ones.
DO $roles$
BEGIN
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ash_replicant_admin') THEN
		CREATE ROLE ash_replicant_admin NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ash_replicant_monitor') THEN
		CREATE ROLE ash_replicant_monitor NOLOGIN;
	END IF;
	IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'ash_replicant_decrypt') THEN
		CREATE ROLE ash_replicant_decrypt NOLOGIN;
	END IF;
END
$roles$;

CREATE SCHEMA ash_replicant;
REVOKE ALL ON SCHEMA ash_replicant FROM PUBLIC;
GRANT USAGE ON SCHEMA ash_replicant TO ash_replicant_admin, ash_replicant_monitor;

/*
 * sinks: one row per sink.  slot_name is the single source of truth for the
 * replication slot and the checkpoint key.
 */
CREATE TABLE ash_replicant.sinks (
	sink_name text PRIMARY KEY,
	slot_name text NOT NULL UNIQUE,
	sink_kind text NOT NULL DEFAULT 'state_mirror'
		CHECK (sink_kind IN ('state_mirror', 'append_log')),
	initial_state text CHECK (initial_state IN ('go_forward', 'snapshot')),
	ignored_sources text[] NOT NULL DEFAULT '{}',
	ignored_message_prefixes text[] NOT NULL DEFAULT '{}',
	recovery_horizon interval,
	batch_max_transactions integer NOT NULL DEFAULT 1000
		CHECK (batch_max_transactions >= 1),
	owner regrole NOT NULL,
	config_version bigint NOT NULL DEFAULT 1,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

/*
 * pipelines: start options of one sink.  "connection" is a libpq conninfo and
 * is never readable by non-admins nor printed.  start_generation counts
 * ash_replicant_start calls; a halt records the generation it happened in so
 * the launcher does not restart a halted pipeline until the next start.
 */
CREATE TABLE ash_replicant.pipelines (
	sink_name text PRIMARY KEY
		REFERENCES ash_replicant.sinks (sink_name) ON DELETE CASCADE,
	connection text,
	decoder text NOT NULL DEFAULT 'pgoutput'
		CHECK (decoder IN ('pgoutput', 'wal2json', 'pglogical')),
	publication text,
	replication_sets text[],
	tables text[],
	allow_keyless_tables boolean NOT NULL DEFAULT false,
	source_system_identifier text,
	source_database text,
	go_forward_only boolean NOT NULL DEFAULT true,
	snapshot text NOT NULL DEFAULT 'off'
		CHECK (snapshot IN ('off', 'v1', 'incremental')),
	chunk_rows integer NOT NULL DEFAULT 1000,
	max_pending_chunks integer NOT NULL DEFAULT 4,
	streaming boolean NOT NULL DEFAULT false,
	failover boolean NOT NULL DEFAULT false,
	binary_transfer boolean NOT NULL DEFAULT false,
	max_inflight_lag bigint NOT NULL DEFAULT 67108864,
	max_command_retries integer NOT NULL DEFAULT 3,
	schema_check_interval_ms integer NOT NULL DEFAULT 60000,
	census jsonb NOT NULL DEFAULT '{}',
	enabled boolean NOT NULL DEFAULT false,
	start_generation bigint NOT NULL DEFAULT 0,
	start_attempts integer NOT NULL DEFAULT 0,
	halt_generation bigint,
	halt_reason text,
	halt_class text CHECK (halt_class IN ('halted', 'misconfigured')),
	halt_sqlstate text,
	halted_at timestamptz,
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);

/* resources: one mapped source table -> destination table. */
CREATE TABLE ash_replicant.resources (
	resource_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	sink_name text NOT NULL
		REFERENCES ash_replicant.sinks (sink_name) ON DELETE CASCADE,
	target regclass NOT NULL,
	source_schema text NOT NULL,
	source_table text NOT NULL,
	column_map jsonb NOT NULL DEFAULT '{}',
	tenant_column text,
	tenant_function regprocedure,
	tenant_strategy text CHECK (tenant_strategy IN ('attribute', 'context')),
	tenant_schema_format text NOT NULL DEFAULT '%s',
	tenant_scope_function regprocedure,
	sensitive text[] NOT NULL DEFAULT '{}',
	encrypted text[] NOT NULL DEFAULT '{}',
	skip text[] NOT NULL DEFAULT '{}',
	on_truncate text NOT NULL DEFAULT 'halt'
		CHECK (on_truncate IN ('halt', 'mirror', 'close', 'append')),
	on_schema_change text NOT NULL DEFAULT 'halt_destructive'
		CHECK (on_schema_change IN ('halt_destructive', 'ignore')),
	upsert_identity text,
	history_strategy text NOT NULL DEFAULT 'scd1'
		CHECK (history_strategy IN ('scd1', 'scd2')),
	history_business_key text[],
	history_valid_from_lsn_column text,
	history_valid_to_lsn_column text,
	history_valid_from_ts_column text,
	history_valid_to_ts_column text,
	history_current_column text,
	append_log boolean NOT NULL DEFAULT false,
	append_columns jsonb,
	snapshot_provenance boolean NOT NULL DEFAULT false,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	UNIQUE (sink_name, target),
	UNIQUE (sink_name, source_schema, source_table)
);

/* message_routes: logical-message prefix -> destination table or function. */
CREATE TABLE ash_replicant.message_routes (
	sink_name text NOT NULL
		REFERENCES ash_replicant.sinks (sink_name) ON DELETE CASCADE,
	prefix text NOT NULL,
	target regclass,
	target_function regprocedure,
	retention interval NOT NULL,
	PRIMARY KEY (sink_name, prefix),
	CHECK ((target IS NULL) <> (target_function IS NULL))
);

/*
 * checkpoints: one row per replication SOURCE and slot.  commit_lsn is the
 * durable watermark; it moves only in the transaction that applied the rows.
 * Default-deny: RLS enabled with no policy.
 */
CREATE TABLE ash_replicant.checkpoints (
	source_system_id text NOT NULL,
	source_database text NOT NULL,
	slot_name text NOT NULL,
	timeline_id integer NOT NULL,
	commit_lsn pg_lsn NOT NULL DEFAULT '0/0',
	end_lsn pg_lsn NOT NULL DEFAULT '0/0',
	decoder text,
	contract jsonb,
	contract_fingerprint bytea,
	snapshot_state bytea,
	origin_floor pg_lsn,
	digest_key_witness bytea,
	terminal_cause text,
	terminal_class text,
	terminal_at timestamptz,
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (source_system_id, source_database, slot_name)
);
ALTER TABLE ash_replicant.checkpoints ENABLE ROW LEVEL SECURITY;

/* message_claims: idempotency claims of routed logical messages. */
CREATE TABLE ash_replicant.message_claims (
	operation_key bytea PRIMARY KEY,
	content_digest bytea NOT NULL,
	route text NOT NULL,
	claimed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	expires_at timestamptz NOT NULL
);

/*
 * upgrade_ledger: one row per checkpoint the update from 0.4 converted from
 * its slot-keyed form (docs/operations.md, "Upgrading from 0.4.0"): the 0.4
 * row as it was, the binding it was converted with, and a checksum over the
 * whole ledger (the same value in every row) that the rollback to 0.4.0
 * verifies.  Empty on a fresh install.  Default-deny like the checkpoints.
 */
CREATE TABLE ash_replicant.upgrade_ledger (
	slot_name text PRIMARY KEY,
	source_system_id text NOT NULL,
	source_database text NOT NULL,
	sink_name text NOT NULL,
	legacy_row jsonb NOT NULL,
	ledger_checksum bytea NOT NULL,
	converted_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER TABLE ash_replicant.upgrade_ledger ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON ash_replicant.sinks, ash_replicant.pipelines, ash_replicant.resources,
	ash_replicant.message_routes, ash_replicant.checkpoints,
	ash_replicant.message_claims, ash_replicant.upgrade_ledger FROM PUBLIC;

-- Admins may read configuration (not the conninfo column) and checkpoints.
GRANT SELECT ON ash_replicant.sinks, ash_replicant.resources,
	ash_replicant.message_routes TO ash_replicant_admin;
GRANT SELECT (sink_name, decoder, publication, replication_sets, tables,
	allow_keyless_tables, source_system_identifier, source_database,
	go_forward_only, snapshot, chunk_rows, max_pending_chunks, streaming,
	failover, binary_transfer, max_inflight_lag, max_command_retries,
	schema_check_interval_ms, census, enabled, start_generation,
	start_attempts, halt_generation, halt_reason, halt_class, halt_sqlstate, halted_at,
	updated_at) ON ash_replicant.pipelines TO ash_replicant_admin;

SELECT pg_catalog.pg_extension_config_dump('ash_replicant.sinks', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.pipelines', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.resources', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.message_routes', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.message_claims', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.upgrade_ledger', '');

------------------------------------------------------------------------------
-- Configuration API (admin).  Every function is SECURITY DEFINER with a
-- pinned search_path; EXECUTE is revoked from PUBLIC and granted by role.
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_create_sink(
	sink_name text,
	slot_name text DEFAULT NULL,
	sink_kind text DEFAULT 'state_mirror',
	initial_state text DEFAULT NULL,
	ignored_sources text[] DEFAULT '{}',
	ignored_message_prefixes text[] DEFAULT '{}',
	recovery_horizon interval DEFAULT NULL,
	batch_max_transactions integer DEFAULT 1000,
	owner regrole DEFAULT NULL)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_create_sink';
COMMENT ON FUNCTION ash_replicant_create_sink(text, text, text, text, text[], text[], interval, integer, regrole)
	IS 'create a sink (state mirror or append log) bound to one replication slot';

CREATE FUNCTION ash_replicant_drop_sink(sink_name text)
RETURNS void
LANGUAGE C STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_drop_sink';
COMMENT ON FUNCTION ash_replicant_drop_sink(text)
	IS 'drop a sink with its mappings, routes and pipeline configuration; refuses while it runs';

CREATE FUNCTION ash_replicant_map_table(
	sink_name text,
	target regclass,
	source_table text DEFAULT NULL,
	source_schema text DEFAULT NULL,
	column_map jsonb DEFAULT NULL,
	tenant_column text DEFAULT NULL,
	tenant_function regprocedure DEFAULT NULL,
	tenant_strategy text DEFAULT NULL,
	tenant_schema_format text DEFAULT '%s',
	sensitive text[] DEFAULT '{}',
	encrypted text[] DEFAULT '{}',
	skip text[] DEFAULT '{}',
	on_truncate text DEFAULT 'halt',
	on_schema_change text DEFAULT 'halt_destructive',
	upsert_identity text DEFAULT NULL,
	history_strategy text DEFAULT 'scd1',
	history_business_key text[] DEFAULT NULL,
	history_valid_from_lsn_column text DEFAULT 'valid_from_lsn',
	history_valid_to_lsn_column text DEFAULT 'valid_to_lsn',
	history_valid_from_ts_column text DEFAULT NULL,
	history_valid_to_ts_column text DEFAULT NULL,
	history_current_column text DEFAULT NULL,
	append_log boolean DEFAULT false,
	append_source_system_id_column text DEFAULT NULL,
	append_source_database_column text DEFAULT NULL,
	append_slot_name_column text DEFAULT NULL,
	append_commit_lsn_column text DEFAULT NULL,
	append_ordinal_column text DEFAULT NULL,
	append_operation_column text DEFAULT NULL,
	append_origin_column text DEFAULT NULL,
	append_snapshot_attempt_column text DEFAULT NULL,
	append_message_prefix_column text DEFAULT NULL,
	append_message_content_column text DEFAULT NULL,
	snapshot_provenance boolean DEFAULT false,
	tenant_scope_function regprocedure DEFAULT NULL)
RETURNS bigint
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_map_table';
COMMENT ON FUNCTION ash_replicant_map_table(text, regclass, text, text, jsonb, text, regprocedure, text, text, text[], text[], text[], text, text, text, text, text[], text, text, text, text, text, boolean, text, text, text, text, text, text, text, text, text, text, boolean, regprocedure)
	IS 'map a source table to a destination table after validating the mapping; returns the resource id';

CREATE FUNCTION ash_replicant_unmap_table(sink_name text, target regclass)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_unmap_table';
COMMENT ON FUNCTION ash_replicant_unmap_table(text, regclass)
	IS 'remove the mapping of a destination table from a sink';

CREATE FUNCTION ash_replicant_add_message_route(
	sink_name text, prefix text, target regclass, retention interval)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_add_message_route';
COMMENT ON FUNCTION ash_replicant_add_message_route(text, text, regclass, interval)
	IS 'route logical messages with this prefix into a destination table';

CREATE FUNCTION ash_replicant_add_message_route(
	sink_name text, prefix text, target regprocedure, retention interval)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_add_message_route';
COMMENT ON FUNCTION ash_replicant_add_message_route(text, text, regprocedure, interval)
	IS 'route logical messages with this prefix to a destination function';

CREATE FUNCTION ash_replicant_drop_message_route(sink_name text, prefix text)
RETURNS void
LANGUAGE C STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_drop_message_route';
COMMENT ON FUNCTION ash_replicant_drop_message_route(text, text)
	IS 'remove a logical-message route';

CREATE FUNCTION ash_replicant_configure_pipeline(
	sink_name text,
	connection text,
	publication text DEFAULT NULL,
	source_system_identifier text DEFAULT NULL,
	source_database text DEFAULT NULL,
	decoder text DEFAULT 'pgoutput',
	replication_sets text[] DEFAULT NULL,
	tables text[] DEFAULT NULL,
	allow_keyless_tables boolean DEFAULT false,
	go_forward_only boolean DEFAULT NULL,
	snapshot text DEFAULT 'off',
	chunk_rows integer DEFAULT 1000,
	max_pending_chunks integer DEFAULT 4,
	streaming boolean DEFAULT false,
	failover boolean DEFAULT false,
	max_inflight_lag bigint DEFAULT 67108864,
	max_command_retries integer DEFAULT 3,
	schema_check_interval_ms integer DEFAULT 60000,
	census jsonb DEFAULT '{}',
	binary_transfer boolean DEFAULT false)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The call carries a conninfo: an error raised while it runs (a refused
-- setting included) must not make the server log the failing statement.
-- Applied for the call only (a SUSET setting: the owner is a superuser).
SET log_min_error_statement = panic
AS 'MODULE_PATHNAME', 'ash_replicant_configure_pipeline';
COMMENT ON FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean)
	IS 'set (replace) the start options of a sink''s pipeline';

CREATE FUNCTION ash_replicant_start(sink_name text)
RETURNS void
LANGUAGE C STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_start';
COMMENT ON FUNCTION ash_replicant_start(text)
	IS 'enable a configured pipeline and wake the launcher; returns immediately';

CREATE FUNCTION ash_replicant_stop(sink_name text)
RETURNS void
LANGUAGE C STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_stop';
COMMENT ON FUNCTION ash_replicant_stop(text)
	IS 'deliberately stop a pipeline; status then reports not_started';

------------------------------------------------------------------------------
-- Operations (monitor/admin).
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_status(sink_name text DEFAULT NULL)
RETURNS TABLE (sink_name text, state text, reason text, worker_pid integer,
	since timestamptz)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_status';
COMMENT ON FUNCTION ash_replicant_status(text)
	IS 'health of each pipeline: healthy, catching_up, halted, misconfigured or not_started, with a value-free reason code';

CREATE FUNCTION ash_replicant._stat_pipelines()
RETURNS TABLE (sink_name text, worker_pid integer, state text, reason text,
	received_transactions bigint, applied_transactions bigint,
	skipped_transactions bigint, received_changes bigint,
	applied_changes bigint, skipped_changes bigint,
	missing_row_deletes bigint, batches bigint,
	last_received_lsn pg_lsn, applied_lsn pg_lsn, lag_bytes numeric,
	lag_seconds double precision, reconnects bigint,
	last_census_at timestamptz, last_census_verdict text,
	worker_started_at timestamptz)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_stat_pipelines';
COMMENT ON FUNCTION ash_replicant._stat_pipelines()
	IS 'internal: backs the ash_replicant.stat_pipelines view';

CREATE VIEW ash_replicant.stat_pipelines AS
	SELECT * FROM ash_replicant._stat_pipelines();
COMMENT ON VIEW ash_replicant.stat_pipelines
	IS 'per-pipeline counters, positions, lag and census state from shared memory';

------------------------------------------------------------------------------
-- Privileges.
------------------------------------------------------------------------------

REVOKE ALL ON FUNCTION
	ash_replicant_create_sink(text, text, text, text, text[], text[], interval, integer, regrole),
	ash_replicant_drop_sink(text),
	ash_replicant_map_table(text, regclass, text, text, jsonb, text, regprocedure, text, text, text[], text[], text[], text, text, text, text, text[], text, text, text, text, text, boolean, text, text, text, text, text, text, text, text, text, text, boolean, regprocedure),
	ash_replicant_unmap_table(text, regclass),
	ash_replicant_add_message_route(text, text, regclass, interval),
	ash_replicant_add_message_route(text, text, regprocedure, interval),
	ash_replicant_drop_message_route(text, text),
	ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean),
	ash_replicant_start(text),
	ash_replicant_stop(text),
	ash_replicant_status(text),
	ash_replicant._stat_pipelines()
	FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
	ash_replicant_create_sink(text, text, text, text, text[], text[], interval, integer, regrole),
	ash_replicant_drop_sink(text),
	ash_replicant_map_table(text, regclass, text, text, jsonb, text, regprocedure, text, text, text[], text[], text[], text, text, text, text, text[], text, text, text, text, text, boolean, text, text, text, text, text, text, text, text, text, text, boolean, regprocedure),
	ash_replicant_unmap_table(text, regclass),
	ash_replicant_add_message_route(text, text, regclass, interval),
	ash_replicant_add_message_route(text, text, regprocedure, interval),
	ash_replicant_drop_message_route(text, text),
	ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean),
	ash_replicant_start(text),
	ash_replicant_stop(text)
	TO ash_replicant_admin;

GRANT EXECUTE ON FUNCTION ash_replicant_status(text), ash_replicant._stat_pipelines()
	TO ash_replicant_monitor, ash_replicant_admin;
REVOKE ALL ON ash_replicant.stat_pipelines FROM PUBLIC;
GRANT SELECT ON ash_replicant.stat_pipelines TO ash_replicant_monitor, ash_replicant_admin;

------------------------------------------------------------------------------
-- Keys and sensitive data (docs/keys.md).
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_decrypt(value bytea, target regclass, column_name text)
RETURNS text
LANGUAGE C STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_decrypt';
COMMENT ON FUNCTION ash_replicant_decrypt(bytea, regclass, text)
	IS 'decrypt one value of an extension-encrypted column (the column must be an encrypted column of a mapping of the target); fails closed';

CREATE FUNCTION ash_replicant_keyring_status()
RETURNS TABLE (family text, active_version integer, versions integer[])
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_keyring_status';
COMMENT ON FUNCTION ash_replicant_keyring_status()
	IS 'per key family: the active version and the versions present in the keyring file (never keys, never the path)';

-- TEST-ONLY (superuser): encrypt as the apply path does, for round-trip tests.
-- Deliberately SECURITY INVOKER: the C code also checks superuser() of the
-- caller, which a definer's function would not see.
CREATE FUNCTION ash_replicant._encrypt_for_test(plaintext text, target regclass, column_name text)
RETURNS bytea
LANGUAGE C STRICT
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_encrypt_for_test';
COMMENT ON FUNCTION ash_replicant._encrypt_for_test(text, regclass, text)
	IS 'test-only, superuser-only: encrypt a value for an encrypted column of a mapping';

-- TEST-ONLY (superuser): known-answer tests of the HMAC-SHA-256 helper.
CREATE FUNCTION ash_replicant._crypto_selftest()
RETURNS TABLE (test text, passed boolean)
LANGUAGE C
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_crypto_selftest';
COMMENT ON FUNCTION ash_replicant._crypto_selftest()
	IS 'test-only, superuser-only: known-answer tests of the HMAC-SHA-256 helper';

REVOKE ALL ON FUNCTION
	ash_replicant_decrypt(bytea, regclass, text),
	ash_replicant_keyring_status(),
	ash_replicant._encrypt_for_test(text, regclass, text),
	ash_replicant._crypto_selftest()
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_decrypt(bytea, regclass, text)
	TO ash_replicant_decrypt;
GRANT EXECUTE ON FUNCTION ash_replicant_keyring_status()
	TO ash_replicant_monitor, ash_replicant_admin;

------------------------------------------------------------------------------
-- Preflight and doctor (monitor/admin), recovery (admin).
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_preflight(sink_name text)
RETURNS TABLE (check_name text, verdict text, reason text)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_preflight';
COMMENT ON FUNCTION ash_replicant_preflight(text)
	IS 'may this pipeline start? one row per check (pass, fail, warn, skipped) with a value-free reason code; reads no checkpoint, writes nothing';

CREATE FUNCTION ash_replicant_doctor(sink_name text)
RETURNS TABLE (check_name text, verdict text, reason text)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_doctor';
COMMENT ON FUNCTION ash_replicant_doctor(text)
	IS 'every preflight check plus checkpoint state, slot and WAL retention, timeline, watermark, contract and runtime readiness; writes nothing';

CREATE FUNCTION ash_replicant_reset_checkpoint(
	sink_name text,
	source_system_identifier text,
	source_database text,
	accept_redelivery boolean DEFAULT false)
RETURNS boolean
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_reset_checkpoint';
COMMENT ON FUNCTION ash_replicant_reset_checkpoint(text, text, text, boolean)
	IS 'offline recovery: delete the checkpoint row of the sink''s configured source identity; true when a row was deleted';

CREATE FUNCTION ash_replicant_adopt_checkpoint(
	sink_name text,
	source_system_identifier text,
	source_database text,
	commit_lsn pg_lsn)
RETURNS boolean
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_adopt_checkpoint';
COMMENT ON FUNCTION ash_replicant_adopt_checkpoint(text, text, text, pg_lsn)
	IS 'offline recovery: set (or create) the checkpoint watermark of the sink''s configured source identity; true when it changed';

CREATE FUNCTION ash_replicant_acknowledge_checkpoint_timeline(
	sink_name text,
	source_system_identifier text,
	source_database text,
	timeline_id integer)
RETURNS boolean
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_acknowledge_checkpoint_timeline';
COMMENT ON FUNCTION ash_replicant_acknowledge_checkpoint_timeline(text, text, text, integer)
	IS 'offline recovery: re-bind the recorded source timeline, watermark untouched; true when it changed';

REVOKE ALL ON FUNCTION
	ash_replicant_preflight(text),
	ash_replicant_doctor(text),
	ash_replicant_reset_checkpoint(text, text, text, boolean),
	ash_replicant_adopt_checkpoint(text, text, text, pg_lsn),
	ash_replicant_acknowledge_checkpoint_timeline(text, text, text, integer)
	FROM PUBLIC;

GRANT EXECUTE ON FUNCTION ash_replicant_preflight(text), ash_replicant_doctor(text)
	TO ash_replicant_monitor, ash_replicant_admin;

GRANT EXECUTE ON FUNCTION
	ash_replicant_reset_checkpoint(text, text, text, boolean),
	ash_replicant_adopt_checkpoint(text, text, text, pg_lsn),
	ash_replicant_acknowledge_checkpoint_timeline(text, text, text, integer)
	TO ash_replicant_admin;
