/*
 * ash_replicant 1.8.0 -> 1.7.0: rollback of the mappings' sequence in dumps
 * (docs/operations.md, "Upgrading from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).  The
 * sequence of ash_replicant.resources is no longer dumped (1.7.0 dumps the
 * rows only: after a restore, ash_replicant_map_table fails until the
 * sequence is set past them).  The recorded contract manifests lose each
 * target column's number (attnum, recorded by builds since 2026-12-06):
 * 1.7.0 builds rebuild manifests without it, and one that holds it is not
 * contained in theirs (contract_incompatible at every start).  The
 * publication membership records lose the kinds of token only 1.8.0 builds
 * write (a pglogical TRUNCATE trigger, a partition's inheritance, a
 * table's row type, a column's type): 1.7.0 builds take a "def:" token
 * they do not find now for a redefinition (publication_gap at every
 * start).  Messages carry counts and reason codes only.
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

-- the manifests as 1.7.0 builds record them: without "attnum" in a column,
-- the fingerprint taken as checkpoint.c takes it (a build with the numbers
-- admits their absence as an addition and records them again)
UPDATE ash_replicant.checkpoints c
   SET contract = s.doc,
	   contract_fingerprint = pg_catalog.sha256(pg_catalog.convert_to(s.doc::pg_catalog.text, 'UTF8'))
  FROM (SELECT k.source_system_id, k.source_database, k.slot_name,
			   pg_catalog.jsonb_set(k.contract, '{relations}', coalesce((
				 SELECT pg_catalog.jsonb_object_agg(rk, CASE
						  WHEN pg_catalog.jsonb_typeof(rv->'columns') OPERATOR(pg_catalog.=) 'object'
						  THEN pg_catalog.jsonb_set(rv, '{columns}', coalesce((
								 SELECT pg_catalog.jsonb_object_agg(ck, CASE
										  WHEN pg_catalog.jsonb_typeof(cv) OPERATOR(pg_catalog.=) 'object'
										  THEN cv OPERATOR(pg_catalog.-) 'attnum'::pg_catalog.text
										  ELSE cv END)
								   FROM pg_catalog.jsonb_each(rv->'columns') col(ck, cv)),
								 '{}'::pg_catalog.jsonb))
						  ELSE rv END)
				   FROM pg_catalog.jsonb_each(k.contract->'relations') r(rk, rv)), k.contract->'relations')) AS doc
		  FROM ash_replicant.checkpoints k
		 WHERE pg_catalog.jsonb_path_exists(k.contract, '$.relations.*.columns.*.attnum')) s
 WHERE c.source_system_id OPERATOR(pg_catalog.=) s.source_system_id
   AND c.source_database OPERATOR(pg_catalog.=) s.source_database
   AND c.slot_name OPERATOR(pg_catalog.=) s.slot_name;

-- the membership records as 1.7.0 builds write them: without the tokens of
-- 1.8.0 builds (a build that writes them records them again at its next
-- start or census)
UPDATE ash_replicant.publication_members
   SET published = coalesce((
		 SELECT pg_catalog.string_agg(u.t, ',' ORDER BY u.o)
		   FROM pg_catalog.unnest(pg_catalog.string_to_array(published, ',')) WITH ORDINALITY u(t, o)
		  WHERE NOT (u.t LIKE 'def:trg:%' OR u.t LIKE 'def:inh:%' OR u.t LIKE 'def:row:%' OR u.t LIKE 'typ:%')), '')
 WHERE published OPERATOR(pg_catalog.~) '(^|,)(def:trg:|def:inh:|def:row:|typ:)';
