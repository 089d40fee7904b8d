/*
 * ash_replicant 1.2.0 -> 1.1.0: rollback of halt details, doctor's detail
 * column, alter_sink, verify, the go-forward note and the crash-loop guard's
 * change (docs/operations.md, "Upgrading from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).  What
 * 1.2.0 adds is diagnostic only -- where a halt stopped, the commit LSN a
 * worker died at, which tables a go-forward slot left out -- and is dropped:
 * 1.1.0 neither records nor reads it.  The rollback ledger stays (1.1.0 has
 * it too).  Messages carry counts and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.1.0'" to load this file. \quit

DO $guard$
DECLARE
	v_stopped text := pg_catalog.current_setting('ash_replicant.pipelines_stopped', true);
	n bigint;
BEGIN
	IF v_stopped IS NULL OR pg_catalog.lower(v_stopped) NOT IN ('on', 'true', 'yes', '1') THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: pipelines_stopped_required (stop every pipeline, then SET ash_replicant.pipelines_stopped = on in this session)'
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;

	-- one update or rollback at a time
	PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('ash_replicant.upgrade', 0));

	SELECT pg_catalog.count(*) INTO n FROM pg_catalog.pg_stat_activity a
	 WHERE a.backend_type IN ('ash_replicant pipeline', 'ash_replicant snapshot');
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: pipeline_running (% pipeline or snapshot workers run on this server)', n
			USING ERRCODE = 'object_in_use';
	END IF;

	LOCK TABLE ash_replicant.pipelines, ash_replicant.checkpoints IN ACCESS EXCLUSIVE MODE;
END
$guard$;

DROP FUNCTION ash_replicant_verify(text, interval);
DROP FUNCTION ash_replicant_alter_sink(text, text[], text[], interval, integer, regrole, boolean);

DROP FUNCTION ash_replicant_status(text);
CREATE FUNCTION ash_replicant_status(sink_name text DEFAULT NULL)
RETURNS TABLE (sink_name text, state text, reason text, worker_pid integer,
	since timestamptz)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_status';
COMMENT ON FUNCTION ash_replicant_status(text)
	IS 'health of each pipeline: healthy, catching_up, halted, misconfigured or not_started, with a value-free reason code';
REVOKE ALL ON FUNCTION ash_replicant_status(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_status(text)
	TO ash_replicant_monitor, ash_replicant_admin;

DROP FUNCTION ash_replicant_preflight(text);
DROP FUNCTION ash_replicant_doctor(text);
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
REVOKE ALL ON FUNCTION ash_replicant_preflight(text), ash_replicant_doctor(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_preflight(text), ash_replicant_doctor(text)
	TO ash_replicant_monitor, ash_replicant_admin;

ALTER TABLE ash_replicant.checkpoints DROP COLUMN go_forward_uncopied;
ALTER TABLE ash_replicant.pipelines
	DROP COLUMN halt_lsn,
	DROP COLUMN halt_target,
	DROP COLUMN crash_lsn;
