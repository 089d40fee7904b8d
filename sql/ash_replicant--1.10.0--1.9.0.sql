/*
 * ash_replicant 1.10.0 -> 1.9.0: rollback of the records' source position and
 * the per-tenant stat_tables rows under row-level security
 * (docs/operations.md, "Upgrading from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).
 * publication_members.recorded_lsn is dropped: 1.9.0 judges a session's
 * renames by the names the session itself described.  The functions named
 * by signature are named by OID again (regprocedure); refused
 * (rollback_state_unrepresentable) while a signature names no function.
 * Messages carry counts and reason codes only.
 */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.9.0'" to load this file. \quit

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

	-- 1.9.0 names a function by OID: a signature that names none has none
	PERFORM pg_catalog.set_config('search_path', 'pg_catalog, pg_temp', true);
	SELECT pg_catalog.count(*) INTO n FROM (
		SELECT f.sig FROM ash_replicant.resources r,
			LATERAL (VALUES (r.tenant_function), (r.tenant_scope_function)) f(sig)
		UNION ALL
		SELECT m.target_function FROM ash_replicant.message_routes m) x
	 WHERE x.sig IS NOT NULL
	   AND x.sig !~ '^pg_catalog\."[0-9]+"\(\)$'
	   AND pg_catalog.to_regprocedure(x.sig) IS NULL;
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: rollback_state_unrepresentable (1.9.0 cannot represent: % functions named by mappings or message routes that no longer exist; unmap or drop them, or create the functions)', n
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;
END
$guard$;

ALTER TABLE ash_replicant.publication_members DROP COLUMN recorded_lsn;

-- stat_tables as 1.3.0 defined it
CREATE OR REPLACE VIEW ash_replicant.stat_tables WITH (security_barrier) AS
	SELECT s.sink_name, s.target, NULL::text AS tenant,
		pg_catalog.sum(s.inserted)::bigint AS inserted,
		pg_catalog.sum(s.updated)::bigint AS updated,
		pg_catalog.sum(s.deleted)::bigint AS deleted,
		pg_catalog.sum(s.truncated)::bigint AS truncated,
		pg_catalog.max(s.last_commit_time) AS last_commit_time,
		pg_catalog.max(s.last_applied_at) AS last_applied_at,
		(pg_catalog.array_agg(pg_catalog.date_part('epoch', s.last_applied_at OPERATOR(pg_catalog.-) s.last_commit_time)
			ORDER BY s.last_applied_at DESC NULLS LAST))[1] AS lag_seconds,
		pg_catalog.min(s.counting_since) AS counting_since
	  FROM ash_replicant.table_stats s
	 GROUP BY s.sink_name, s.target
	UNION ALL
	SELECT g.sink_name, g.target, g.tenant, g.inserted, g.updated, g.deleted,
		g.truncated, g.last_commit_time, g.last_applied_at,
		pg_catalog.date_part('epoch', g.last_applied_at OPERATOR(pg_catalog.-) g.last_commit_time),
		g.counting_since
	  FROM (SELECT s.* FROM ash_replicant.table_stats s
			 WHERE s.tenant IS NOT NULL
			   AND pg_catalog.has_table_privilege(s.target_table, 'SELECT')
			OFFSET 0) g;
COMMENT ON VIEW ash_replicant.stat_tables
	IS 'per sink and target table (and per tenant, to roles that may read that tenant''s rows): rows inserted, updated, deleted, truncations, last applied source commit time and its apply lag; no row value';

-- functions by OID again (regprocedure), as 1.9.0 names them; the path is
-- pinned for the rest of this script
SET LOCAL search_path = pg_catalog, pg_temp;

COMMENT ON COLUMN ash_replicant.resources.tenant_function IS NULL;
COMMENT ON COLUMN ash_replicant.resources.tenant_scope_function IS NULL;
COMMENT ON COLUMN ash_replicant.message_routes.target_function IS NULL;
ALTER TABLE ash_replicant.resources
	ALTER COLUMN tenant_function TYPE regprocedure
		USING CASE WHEN tenant_function ~ '^pg_catalog\."[0-9]+"\(\)$'
			THEN pg_catalog.substring(tenant_function, '"([0-9]+)"')::oid::regprocedure
			ELSE tenant_function::regprocedure END,
	ALTER COLUMN tenant_scope_function TYPE regprocedure
		USING CASE WHEN tenant_scope_function ~ '^pg_catalog\."[0-9]+"\(\)$'
			THEN pg_catalog.substring(tenant_scope_function, '"([0-9]+)"')::oid::regprocedure
			ELSE tenant_scope_function::regprocedure END;
ALTER TABLE ash_replicant.message_routes
	ALTER COLUMN target_function TYPE regprocedure
		USING CASE WHEN target_function ~ '^pg_catalog\."[0-9]+"\(\)$'
			THEN pg_catalog.substring(target_function, '"([0-9]+)"')::oid::regprocedure
			ELSE target_function::regprocedure END;
