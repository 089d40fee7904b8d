/*
 * ash_replicant 1.7.0 -> 1.6.0: rollback of the source column records
 * (docs/operations.md, "Upgrading from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).  The
 * table and the function are dropped: 1.6.0 mirrors a source column added
 * while the target holds rows without a word (those rows keep what the
 * target gave them).  The publication membership records lose the kinds
 * of token only 1.7.0 builds write (a table's own OID, its columns'
 * numbers): 1.6.0 builds take a "def:" token they do not find now for a
 * redefinition (publication_gap at every start).  Messages carry counts
 * and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.6.0'" to load this file. \quit

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

DROP FUNCTION ash_replicant_acknowledge_column_added(text, text, text, text, text);
ALTER EXTENSION ash_replicant DROP TABLE ash_replicant.source_columns;
DROP TABLE ash_replicant.source_columns;

-- the membership records as 1.6.0 builds write them: without the tokens of
-- 1.7.0 builds (a build that writes them records them again at its next
-- start or census)
UPDATE ash_replicant.publication_members
   SET published = coalesce((
		 SELECT pg_catalog.string_agg(u.t, ',' ORDER BY u.o)
		   FROM pg_catalog.unnest(pg_catalog.string_to_array(published, ',')) WITH ORDINALITY u(t, o)
		  WHERE NOT (u.t LIKE 'def:tbl:%' OR u.t LIKE 'col:%')), '')
 WHERE published OPERATOR(pg_catalog.~) '(^|,)(def:tbl:|col:)';
