/*
 * ash_replicant 0.4.0 — the catalogs of the 0.4 series, so that an install of
 * it can be updated (docs/operations.md, "Upgrading from 0.4.0").
 *
 * What 0.4.0 stored, and all this script reproduces of it:
 *
 *   - sinks, pipelines and resources with the columns 1.0.0 has, but 0.4.0
 *     kept only state mirrors (sink_kind 'state_mirror') mapped with SCD1
 *     (history_strategy 'scd1'), and did not require slot names to be
 *     unique: two sinks could name the same slot;
 *   - checkpoints keyed by slot_name ONLY: timeline, watermark (commit_lsn,
 *     end_lsn) and times, with no source system identifier or database.  A
 *     row cannot say which source its watermark belongs to, which is what
 *     the update to 1.0.0 needs the operator to tell it (bindings);
 *   - no message routes, no message claims;
 *   - of the SQL API only ash_replicant_status() and ash_replicant_doctor().
 *     With the catalogs of 0.4.x, the current library answers status with
 *     extension_version_mismatch for every sink, refuses doctor with the same
 *     code, and its launcher supervises nothing.
 *
 * Roles, schema, privileges and row-level security are as in 1.0.0.
 */

\echo Use "CREATE EXTENSION ash_replicant VERSION '0.4.0'" to load this file. \quit

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

/* sinks: one row per sink; slot_name not unique in 0.4.0. */
CREATE TABLE ash_replicant.sinks (
	sink_name text PRIMARY KEY,
	slot_name text NOT NULL,
	sink_kind text NOT NULL DEFAULT 'state_mirror'
		CHECK (sink_kind IN ('state_mirror')),
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

/* pipelines: start options of one sink (as in 1.0.0). */
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

/* resources: one mapped source table -> destination table; SCD1 only. */
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
		CHECK (history_strategy IN ('scd1')),
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

/*
 * checkpoints: one row per slot name — and so, wrongly, per every source
 * that ever used that slot name.  Default-deny: RLS enabled with no policy.
 */
CREATE TABLE ash_replicant.checkpoints (
	slot_name text PRIMARY KEY,
	timeline_id integer NOT NULL,
	commit_lsn pg_lsn NOT NULL DEFAULT '0/0',
	end_lsn pg_lsn NOT NULL DEFAULT '0/0',
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	updated_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER TABLE ash_replicant.checkpoints ENABLE ROW LEVEL SECURITY;

REVOKE ALL ON ash_replicant.sinks, ash_replicant.pipelines, ash_replicant.resources,
	ash_replicant.checkpoints FROM PUBLIC;

-- Admins may read configuration (not the conninfo column).
GRANT SELECT ON ash_replicant.sinks, ash_replicant.resources TO ash_replicant_admin;
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
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.checkpoints', '');

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

CREATE FUNCTION ash_replicant_doctor(sink_name text)
RETURNS TABLE (check_name text, verdict text, reason text)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_doctor';
COMMENT ON FUNCTION ash_replicant_doctor(text)
	IS 'every preflight check plus checkpoint state, slot and WAL retention, timeline, watermark, contract and runtime readiness; writes nothing';

REVOKE ALL ON FUNCTION ash_replicant_status(text), ash_replicant_doctor(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_status(text), ash_replicant_doctor(text)
	TO ash_replicant_monitor, ash_replicant_admin;
