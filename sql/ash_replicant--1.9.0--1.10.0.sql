/* ash_replicant 1.9.0 -> 1.10.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.10.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Two mapped tables that swap names where the session never described them
-- under their old names (docs/reasons.md#publication_gap).
------------------------------------------------------------------------------

/*
 * The source's WAL position once a record was read.  pgoutput and
 * pglogical describe a table by its OID: a session's first description of
 * a recorded OID from that position on, under a name the pipeline maps to
 * another target or ignores, is a rename the stream must not follow.
 * Records of earlier releases have none; the next start or census writes it.
 */
ALTER TABLE ash_replicant.publication_members ADD COLUMN recorded_lsn pg_lsn;
COMMENT ON COLUMN ash_replicant.publication_members.recorded_lsn
	IS 'the source''s WAL position once the record was read: from there on, a mapped table described under another mapped or ignored name was renamed since (publication_gap); NULL for a record of an earlier release';

------------------------------------------------------------------------------
-- A tenant's counts only to roles that may read every row of its table.
------------------------------------------------------------------------------

/*
 * As in 1.3.0, but a role a policy of row-level security applies to on the
 * table is shown no tenant's row of it: the policy may hide other tenants'
 * rows from it, and their names and counts with them.
 */
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
			   AND NOT pg_catalog.row_security_active(s.target_table)
			OFFSET 0) g;
COMMENT ON VIEW ash_replicant.stat_tables
	IS 'per sink and target table (and per tenant, to roles that may read every row of that tenant''s table: SELECT, and no row-level security policy applying to them): rows inserted, updated, deleted, truncations, last applied source commit time and its apply lag; no row value';

------------------------------------------------------------------------------
-- Functions by name: pg_upgrade keeps no function's OID.
------------------------------------------------------------------------------

/*
 * pg_upgrade refuses a cluster with a regprocedure column in a user table
 * ("Checking for reg* data types in user tables"): it does not keep
 * function OIDs.  The three columns that named a function by OID hold its
 * signature now, the regprocedure text under search_path pg_catalog, pg_temp
 * (every name outside pg_catalog qualified: public.my_scope(text)), which
 * the library resolves when it uses it (to_regprocedure; none: the function
 * was dropped).  An OID that named no function any more (its text is the
 * bare number) becomes pg_catalog."<oid>"(), a signature that names none,
 * which the rollback turns back into that OID.
 *
 * The path is pinned for the rest of this script (the script's own setting
 * is restored when it ends).
 */
SET LOCAL search_path = pg_catalog, pg_temp;

ALTER TABLE ash_replicant.resources
	ALTER COLUMN tenant_function TYPE text
		USING CASE WHEN tenant_function::text ~ '^[0-9]+$'
			THEN 'pg_catalog."' || tenant_function::text || '"()'
			ELSE tenant_function::text END,
	ALTER COLUMN tenant_scope_function TYPE text
		USING CASE WHEN tenant_scope_function::text ~ '^[0-9]+$'
			THEN 'pg_catalog."' || tenant_scope_function::text || '"()'
			ELSE tenant_scope_function::text END;
ALTER TABLE ash_replicant.message_routes
	ALTER COLUMN target_function TYPE text
		USING CASE WHEN target_function::text ~ '^[0-9]+$'
			THEN 'pg_catalog."' || target_function::text || '"()'
			ELSE target_function::text END;
COMMENT ON COLUMN ash_replicant.resources.tenant_function
	IS 'the tenant function''s signature, every name outside pg_catalog qualified (as regprocedure prints it under search_path pg_catalog, pg_temp); resolved when used';
COMMENT ON COLUMN ash_replicant.resources.tenant_scope_function
	IS 'the tenant scope function''s signature, every name outside pg_catalog qualified (as regprocedure prints it under search_path pg_catalog, pg_temp); resolved when used';
COMMENT ON COLUMN ash_replicant.message_routes.target_function
	IS 'the target function''s signature, every name outside pg_catalog qualified (as regprocedure prints it under search_path pg_catalog, pg_temp); resolved when used';
