/* ash_replicant 1.1.0 -> 1.2.0: halts that explain themselves (docs/operations.md). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.2.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Where a halt stopped: structure only, never a value.
------------------------------------------------------------------------------

/*
 * halt_lsn: the commit LSN of the source transaction the halt stopped at
 * (NULL when the halt was not on a change).  halt_target: the mapping's
 * target table as configured (schema-qualified, quoted; under context
 * tenancy the mapping's name, never a tenant's schema).
 */
ALTER TABLE ash_replicant.pipelines
	ADD COLUMN halt_lsn pg_lsn,
	ADD COLUMN halt_target text;

-- admins read them as they read the rest of the halt
GRANT SELECT (halt_lsn, halt_target) ON ash_replicant.pipelines TO ash_replicant_admin;

------------------------------------------------------------------------------
-- ash_replicant_status() says where a halt stopped.
------------------------------------------------------------------------------

DROP FUNCTION ash_replicant_status(text);
CREATE FUNCTION ash_replicant_status(sink_name text DEFAULT NULL)
RETURNS TABLE (sink_name text, state text, reason text, worker_pid integer,
	since timestamptz, halt_sqlstate text, halt_condition text, halt_target text,
	halt_lsn pg_lsn)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_status';
COMMENT ON FUNCTION ash_replicant_status(text)
	IS 'health of each pipeline: healthy, catching_up, halted, misconfigured or not_started, with a value-free reason code and, for a halt, its SQLSTATE, condition name, target table and commit LSN (runbook: docs/reasons.md)';
REVOKE ALL ON FUNCTION ash_replicant_status(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_status(text)
	TO ash_replicant_monitor, ash_replicant_admin;

------------------------------------------------------------------------------
-- preflight and doctor rows carry a structural detail.
------------------------------------------------------------------------------

DROP FUNCTION ash_replicant_preflight(text);
DROP FUNCTION ash_replicant_doctor(text);

CREATE FUNCTION ash_replicant_preflight(sink_name text)
RETURNS TABLE (check_name text, verdict text, reason text, detail text)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_preflight';
COMMENT ON FUNCTION ash_replicant_preflight(text)
	IS 'may this pipeline start? one row per check (pass, fail, warn, skipped) with a value-free reason code and structural detail (names of tables, columns, types); reads no checkpoint, writes nothing';

CREATE FUNCTION ash_replicant_doctor(sink_name text)
RETURNS TABLE (check_name text, verdict text, reason text, detail text)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_doctor';
COMMENT ON FUNCTION ash_replicant_doctor(text)
	IS 'every preflight check plus checkpoint state (a halt with its SQLSTATE, table and commit LSN), slot and WAL retention, timeline, watermark, contract and runtime readiness; writes nothing';

REVOKE ALL ON FUNCTION ash_replicant_preflight(text), ash_replicant_doctor(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_preflight(text), ash_replicant_doctor(text)
	TO ash_replicant_monitor, ash_replicant_admin;

------------------------------------------------------------------------------
-- Change a sink without rebuilding it.
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_alter_sink(
	sink_name text,
	ignored_sources text[] DEFAULT NULL,
	ignored_message_prefixes text[] DEFAULT NULL,
	recovery_horizon interval DEFAULT NULL,
	batch_max_transactions integer DEFAULT NULL,
	owner regrole DEFAULT NULL,
	reset_recovery_horizon boolean DEFAULT false)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_alter_sink';
COMMENT ON FUNCTION ash_replicant_alter_sink(text, text[], text[], interval, integer, regrole, boolean)
	IS 'change a sink''s ignores, message-prefix ignores, recovery horizon, batch size or owner, keeping mappings, pipeline and checkpoint (NULL keeps a setting); a running pipeline restarts on it, one halted misconfigured is started again';
REVOKE ALL ON FUNCTION ash_replicant_alter_sink(text, text[], text[], interval, integer, regrole, boolean)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_alter_sink(text, text[], text[], interval, integer, regrole, boolean)
	TO ash_replicant_admin;

------------------------------------------------------------------------------
-- What a go-forward start left out.
------------------------------------------------------------------------------

/*
 * go_forward_uncopied: the mapped source tables (quoted schema.table) that
 * held rows when a go-forward slot was created -- their older rows are not in
 * the mirror (doctor's existing_rows check).  NULL: not recorded (a snapshot
 * copied them, or the slot predates 1.2.0).
 */
ALTER TABLE ash_replicant.checkpoints ADD COLUMN go_forward_uncopied text[];

------------------------------------------------------------------------------
-- The rollback ledger of the update from 0.4 (docs/operations.md, "Upgrading
-- from 0.4.0"), for installs made before 1.0.0's script created it: the same
-- table, empty, default-deny.  Where it exists already nothing changes.
------------------------------------------------------------------------------

DO $ledger$
BEGIN
	IF pg_catalog.to_regclass('ash_replicant.upgrade_ledger') IS NULL THEN
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
		REVOKE ALL ON ash_replicant.upgrade_ledger FROM PUBLIC;
		PERFORM pg_catalog.pg_extension_config_dump('ash_replicant.upgrade_ledger', '');
	END IF;
END
$ledger$;

------------------------------------------------------------------------------
-- Crash-loop guard: the change a worker died applying.
------------------------------------------------------------------------------

/*
 * crash_lsn: the commit LSN of the source transaction the pipeline worker
 * was applying when it died by itself (the server crash-restarted); NULL
 * when none is pending.  start_attempts now counts such deaths in a row at
 * crash_lsn (docs/operations.md, "The crash-loop guard"); the
 * watermark passing crash_lsn clears both, ash_replicant_start zeroes the
 * count.
 */
ALTER TABLE ash_replicant.pipelines
	ADD COLUMN crash_lsn pg_lsn;

-- admins read it as they read start_attempts
GRANT SELECT (crash_lsn) ON ash_replicant.pipelines TO ash_replicant_admin;

------------------------------------------------------------------------------
-- Completeness: source and mirror compared per mapping, values never shown
-- (docs/operations.md#verifying-completeness).
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_verify(sink_name text, timeout interval DEFAULT '60s')
RETURNS TABLE (source_schema text, source_table text, target text,
	source_rows bigint, mirror_rows bigint, verdict text, reason text)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_verify';
COMMENT ON FUNCTION ash_replicant_verify(text, interval)
	IS 'is the mirror complete? per mapping the source''s and the mirror''s row counts and match, mismatch or not_comparable, judged on the key sets at one source position the pipeline has applied; never prints a value or a digest';

REVOKE ALL ON FUNCTION ash_replicant_verify(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_verify(text, interval)
	TO ash_replicant_monitor, ash_replicant_admin;
