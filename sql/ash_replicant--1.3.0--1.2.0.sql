/*
 * ash_replicant 1.3.0 -> 1.2.0: rollback (docs/operations.md, "Upgrading
 * from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).
 * Messages carry counts and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.2.0'" to load this file. \quit

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

	-- incremental snapshots: an unfinished attempt's chunks cannot be kept
	LOCK TABLE ash_replicant.snapshot_tables, ash_replicant.snapshot_windows IN ACCESS EXCLUSIVE MODE;
	SELECT pg_catalog.count(*) INTO n FROM ash_replicant.snapshot_tables t
	 WHERE t.state = 'pending' AND t.chunks_copied > 0;
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: rollback_state_unrepresentable (1.2.0 cannot represent: % tables of an unfinished incremental snapshot)', n
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
END
$guard$;

------------------------------------------------------------------------------
-- Incremental snapshots: refused above while an attempt is unfinished
-- (rollback_state_unrepresentable); a finished attempt's chunk counts and
-- windows are dropped (1.2.0 refuses snapshot => 'incremental' at start).
------------------------------------------------------------------------------

ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.snapshot_windows;
DROP TABLE ash_replicant.snapshot_windows;
ALTER TABLE ash_replicant.snapshot_tables
	DROP COLUMN chunk_cursor,
	DROP COLUMN chunks_copied;
