/*
 * ash_replicant 1.4.0 -> 1.3.0: rollback of the snapshot targets (and
 * their column of stat_snapshot_tables) and publication memberships
 * (docs/operations.md, "Upgrading from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).  The
 * recorded targets and memberships are dropped: 1.3.0 copies a table once
 * per attempt, whatever its mapping writes to or its publication did
 * later.  Messages carry counts and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.3.0'" to load this file. \quit

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
END
$guard$;

DROP VIEW ash_replicant.stat_snapshot_tables;
DROP FUNCTION ash_replicant._stat_snapshot_tables();
CREATE FUNCTION ash_replicant._stat_snapshot_tables()
RETURNS TABLE (sink_name text, source_schema text, source_table text,
	state text, rows_copied bigint, rows_estimate bigint, copied_at timestamptz)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_stat_snapshot_tables';
COMMENT ON FUNCTION ash_replicant._stat_snapshot_tables()
	IS 'internal: backs the ash_replicant.stat_snapshot_tables view';

CREATE VIEW ash_replicant.stat_snapshot_tables AS
	SELECT * FROM ash_replicant._stat_snapshot_tables();
COMMENT ON VIEW ash_replicant.stat_snapshot_tables
	IS 'per source table of each sink''s snapshot: pending, copying or copied, rows copied and the source''s estimate';

REVOKE ALL ON FUNCTION ash_replicant._stat_snapshot_tables() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant._stat_snapshot_tables()
	TO ash_replicant_monitor, ash_replicant_admin;
REVOKE ALL ON ash_replicant.stat_snapshot_tables FROM PUBLIC;
GRANT SELECT ON ash_replicant.stat_snapshot_tables
	TO ash_replicant_monitor, ash_replicant_admin;

LOCK TABLE ash_replicant.snapshot_tables IN ACCESS EXCLUSIVE MODE;
ALTER TABLE ash_replicant.snapshot_tables DROP COLUMN target, DROP COLUMN published;
