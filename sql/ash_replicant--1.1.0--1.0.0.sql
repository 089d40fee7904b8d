/*
 * ash_replicant 1.1.0 -> 1.0.0: rollback of snapshots (docs/snapshots.md),
 * on the way back to 0.4.0 (docs/operations.md, "Upgrading from 0.4.0").
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required), no
 * pipeline or snapshot worker runs on the server (pipeline_running) and no
 * snapshot state exists, which 1.0.0 cannot represent
 * (rollback_state_unrepresentable): a row of snapshot_tables, or a
 * checkpoint with snapshot_phase, snapshot_lsn or snapshot_attempt set.
 * Messages carry counts and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.0.0'" to load this file. \quit

DO $guard$
DECLARE
	v_stopped text := pg_catalog.current_setting('ash_replicant.pipelines_stopped', true);
	n bigint;
	n_tables bigint;
	n_checkpoints bigint;
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

	LOCK TABLE ash_replicant.checkpoints, ash_replicant.snapshot_tables IN ACCESS EXCLUSIVE MODE;

	SELECT pg_catalog.count(*) INTO n_tables FROM ash_replicant.snapshot_tables;
	SELECT pg_catalog.count(*) INTO n_checkpoints FROM ash_replicant.checkpoints c
	 WHERE c.snapshot_phase IS NOT NULL OR c.snapshot_lsn IS NOT NULL
	    OR c.snapshot_attempt IS NOT NULL;
	IF n_tables + n_checkpoints > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: rollback_state_unrepresentable (1.0.0 cannot represent: % snapshot table rows, % checkpoints with snapshot state)',
			n_tables, n_checkpoints
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
END
$guard$;

DROP FUNCTION ash_replicant_wait_for_slot(text, interval);

DROP VIEW ash_replicant.stat_snapshot_tables;
DROP FUNCTION ash_replicant._stat_snapshot_tables();
DROP VIEW ash_replicant.stat_pipelines;
DROP FUNCTION ash_replicant._stat_pipelines();

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

REVOKE ALL ON FUNCTION ash_replicant._stat_pipelines() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant._stat_pipelines()
	TO ash_replicant_monitor, ash_replicant_admin;
REVOKE ALL ON ash_replicant.stat_pipelines FROM PUBLIC;
GRANT SELECT ON ash_replicant.stat_pipelines TO ash_replicant_monitor, ash_replicant_admin;

-- A dropped table stays in the extension's configuration list (pg_dump reads
-- it) unless it leaves the extension first.
ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.snapshot_tables;
DROP TABLE ash_replicant.snapshot_tables;
ALTER TABLE ash_replicant.checkpoints
	DROP COLUMN snapshot_phase,
	DROP COLUMN snapshot_lsn,
	DROP COLUMN snapshot_attempt;
