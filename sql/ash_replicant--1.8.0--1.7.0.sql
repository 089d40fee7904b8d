/*
 * ash_replicant 1.8.0 -> 1.7.0: rollback of the mappings' sequence in dumps
 * (docs/operations.md, "Upgrading from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).  The
 * sequence of ash_replicant.resources is no longer dumped (1.7.0 dumps the
 * rows only: after a restore, ash_replicant_map_table fails until the
 * sequence is set past them).  Messages carry counts and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.7.0'" to load this file. \quit

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

-- leaving the extension drops its configuration entry; it is a member again
ALTER EXTENSION ash_replicant DROP SEQUENCE ash_replicant.resources_resource_id_seq;
ALTER EXTENSION ash_replicant ADD SEQUENCE ash_replicant.resources_resource_id_seq;
