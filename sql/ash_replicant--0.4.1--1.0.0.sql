/*
 * ash_replicant 0.4.1 -> 1.0.0: checkpoints keyed by source identity
 * (docs/operations.md, "Upgrading from 0.4.0").
 *
 * Each 0.4 checkpoint (keyed by slot name only) becomes the 1.0.0 row of
 * (source system identifier, source database, slot name) that its sink's
 * binding names, with the same timeline and watermark.  Refused, leaving
 * the catalogs as they were, unless:
 *
 *   - the session says ash_replicant.pipelines_stopped = on
 *     (pipelines_stopped_required);
 *   - no pipeline or snapshot worker runs on the server, and no session of
 *     this database holds a sink's slot lock (pipeline_running);
 *   - every legacy checkpoint is bound: one sink names its slot, that sink
 *     has exactly one binding, consistent with its pipeline's configured
 *     source (legacy_binding_shared, _missing, _ambiguous, _foreign; see
 *     ash_replicant_upgrade_dry_run()), no slot is named by two sinks
 *     (legacy_binding_shared) and no binding is left unused
 *     (legacy_binding_invalid).
 *
 * It holds an advisory lock against a concurrent update or rollback and
 * ACCESS EXCLUSIVE on the checkpoints, and converts in the transaction of
 * ALTER EXTENSION.  The 0.4 rows go into upgrade_ledger with their bindings
 * and a checksum over the whole ledger; the rollback (1.0.0 -> 0.4.0)
 * restores them from it.  The rest of the script creates what 1.0.0 has
 * and 0.4 had not, exactly as ash_replicant--1.0.0.sql does.
 *
 * Every message is value-free: counts and reason codes, never a slot name,
 * LSN or identity.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.0.0'" to load this file. \quit

------------------------------------------------------------------------------
-- May the update run?
------------------------------------------------------------------------------

DO $guard$
DECLARE
	v_stopped text := pg_catalog.current_setting('ash_replicant.pipelines_stopped', true);
	n bigint;
	r record;
BEGIN
	IF v_stopped IS NULL OR pg_catalog.lower(v_stopped) NOT IN ('on', 'true', 'yes', '1') THEN
		RAISE EXCEPTION 'ash_replicant: update rejected: pipelines_stopped_required (stop every pipeline, then SET ash_replicant.pipelines_stopped = on in this session)'
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;

	-- one update or rollback at a time
	PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('ash_replicant.upgrade', 0));

	SELECT pg_catalog.count(*) INTO n FROM pg_catalog.pg_stat_activity a
	 WHERE a.backend_type IN ('ash_replicant pipeline', 'ash_replicant snapshot');
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: update rejected: pipeline_running (% pipeline or snapshot workers run on this server)', n
			USING ERRCODE = 'object_in_use';
	END IF;

	LOCK TABLE ash_replicant.checkpoints IN ACCESS EXCLUSIVE MODE;
	LOCK TABLE ash_replicant.sinks, ash_replicant.pipelines, ash_replicant.legacy_bindings
		IN SHARE MODE;

	-- a pipeline worker holds its slot's advisory lock for its whole life
	SELECT pg_catalog.count(*) INTO n FROM ash_replicant.sinks s
	 WHERE NOT pg_catalog.pg_try_advisory_xact_lock(
		pg_catalog.hashtextextended('ash_replicant.slot:' OPERATOR(pg_catalog.||) s.slot_name, 0));
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: update rejected: pipeline_running (% sinks have their slot held by a session of this database)', n
			USING ERRCODE = 'object_in_use';
	END IF;

	-- every legacy checkpoint bound, the first failing state by precedence
	FOR r IN
		SELECT d.state, pg_catalog.count(*) AS n,
		       (SELECT pg_catalog.count(*) FROM @extschema@.ash_replicant_upgrade_dry_run()) AS total
		  FROM @extschema@.ash_replicant_upgrade_dry_run() d
		 WHERE d.state <> 'bound'
		 GROUP BY d.state
		 ORDER BY pg_catalog.array_position(ARRAY['shared', 'missing', 'ambiguous', 'foreign'], d.state)
		 LIMIT 1
	LOOP
		RAISE EXCEPTION 'ash_replicant: update rejected: legacy_binding_% (% of % legacy checkpoints; see ash_replicant_upgrade_dry_run())',
			r.state, r.n, r.total
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END LOOP;

	-- 1.0.0 gives every sink a slot of its own
	SELECT pg_catalog.count(*) INTO n FROM (
		SELECT s.slot_name FROM ash_replicant.sinks s
		 GROUP BY s.slot_name HAVING pg_catalog.count(*) > 1) x;
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: update rejected: legacy_binding_shared (% slot names are named by more than one sink)', n
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;

	-- a binding the conversion would not use was recorded for something else
	SELECT pg_catalog.count(*) INTO n FROM ash_replicant.legacy_bindings b
	  JOIN ash_replicant.sinks s ON s.sink_name = b.sink_name
	 WHERE NOT EXISTS (SELECT 1 FROM ash_replicant.checkpoints c WHERE c.slot_name = s.slot_name);
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: update rejected: legacy_binding_invalid (% bindings name a sink without a legacy checkpoint; see ash_replicant_unbind_legacy_checkpoint())', n
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
END
$guard$;

------------------------------------------------------------------------------
-- Checkpoints keyed by source identity, and the rollback ledger.
------------------------------------------------------------------------------

ALTER TABLE ash_replicant.checkpoints RENAME TO checkpoints_0_4;
ALTER TABLE ash_replicant.checkpoints_0_4 RENAME CONSTRAINT checkpoints_pkey TO checkpoints_0_4_pkey;

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

-- The watermark, timeline and times carry over; the contract, decoder and
-- the rest are recorded by the first session, as for any new checkpoint.
INSERT INTO ash_replicant.checkpoints (source_system_id, source_database, slot_name,
	timeline_id, commit_lsn, end_lsn, created_at, updated_at)
SELECT b.source_system_id, b.source_database, c.slot_name,
       c.timeline_id, c.commit_lsn, c.end_lsn, c.created_at, c.updated_at
  FROM ash_replicant.checkpoints_0_4 c
  JOIN ash_replicant.sinks s ON s.slot_name = c.slot_name
  JOIN ash_replicant.legacy_bindings b ON b.sink_name = s.sink_name;

/*
 * The ledger checksum: SHA-256 over every row's (slot_name, identity,
 * sink_name, legacy_row) as a JSON array, in slot-name order, one per line.
 * The rollback recomputes it with this very expression.
 */
WITH conv AS (
	SELECT c.slot_name, b.source_system_id, b.source_database, s.sink_name,
	       pg_catalog.to_jsonb(c) AS legacy_row
	  FROM ash_replicant.checkpoints_0_4 c
	  JOIN ash_replicant.sinks s ON s.slot_name = c.slot_name
	  JOIN ash_replicant.legacy_bindings b ON b.sink_name = s.sink_name),
seal AS (
	SELECT pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.string_agg(
	         pg_catalog.jsonb_build_array(l.slot_name, l.source_system_id, l.source_database,
	                                      l.sink_name, l.legacy_row)::text,
	         E'\n' ORDER BY l.slot_name), 'UTF8')) AS checksum
	  FROM conv l)
INSERT INTO ash_replicant.upgrade_ledger (slot_name, source_system_id, source_database,
	sink_name, legacy_row, ledger_checksum)
SELECT conv.slot_name, conv.source_system_id, conv.source_database, conv.sink_name,
       conv.legacy_row, seal.checksum
  FROM conv, seal;

-- the guard proved every row bound once; a miscount here is a bug: refuse
DO $count$
BEGIN
	IF (SELECT pg_catalog.count(*) FROM ash_replicant.checkpoints)
	   OPERATOR(pg_catalog.<>) (SELECT pg_catalog.count(*) FROM ash_replicant.checkpoints_0_4)
	   OR (SELECT pg_catalog.count(*) FROM ash_replicant.upgrade_ledger)
	   OPERATOR(pg_catalog.<>) (SELECT pg_catalog.count(*) FROM ash_replicant.checkpoints_0_4) THEN
		RAISE EXCEPTION 'ash_replicant: update rejected: legacy_binding_missing (a legacy checkpoint did not convert exactly once)'
			USING ERRCODE = 'internal_error';
	END IF;
END
$count$;

-- A dropped table stays in the extension's configuration list (pg_dump reads
-- it) unless it leaves the extension first.
ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.checkpoints_0_4;
DROP TABLE ash_replicant.checkpoints_0_4;
DROP FUNCTION ash_replicant_upgrade_dry_run();
DROP FUNCTION ash_replicant_bind_legacy_checkpoint(text, text, text);
DROP FUNCTION ash_replicant_unbind_legacy_checkpoint(text);
ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.legacy_bindings;
DROP TABLE ash_replicant.legacy_bindings;

------------------------------------------------------------------------------
-- Sinks of every kind, one slot each; SCD2 mappings.
------------------------------------------------------------------------------

ALTER TABLE ash_replicant.sinks
	DROP CONSTRAINT sinks_sink_kind_check,
	ADD CONSTRAINT sinks_sink_kind_check CHECK (sink_kind IN ('state_mirror', 'append_log')),
	ADD CONSTRAINT sinks_slot_name_key UNIQUE (slot_name);
ALTER TABLE ash_replicant.resources
	DROP CONSTRAINT resources_history_strategy_check,
	ADD CONSTRAINT resources_history_strategy_check CHECK (history_strategy IN ('scd1', 'scd2'));

------------------------------------------------------------------------------
-- Logical messages.
------------------------------------------------------------------------------

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

/* message_claims: idempotency claims of routed logical messages. */
CREATE TABLE ash_replicant.message_claims (
	operation_key bytea PRIMARY KEY,
	content_digest bytea NOT NULL,
	route text NOT NULL,
	claimed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
	expires_at timestamptz NOT NULL
);

REVOKE ALL ON ash_replicant.message_routes, ash_replicant.checkpoints,
	ash_replicant.message_claims, ash_replicant.upgrade_ledger FROM PUBLIC;
GRANT SELECT ON ash_replicant.message_routes TO ash_replicant_admin;

SELECT pg_catalog.pg_extension_config_dump('ash_replicant.message_routes', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.checkpoints', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.message_claims', '');
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.upgrade_ledger', '');

------------------------------------------------------------------------------
-- The SQL API of 1.0.0 (0.4 had status and doctor only), as
-- ash_replicant--1.0.0.sql creates it; grants repeated there for status and
-- doctor change nothing.
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
