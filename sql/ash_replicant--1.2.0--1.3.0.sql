/* ash_replicant 1.2.0 -> 1.3.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.3.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Loop-safe origins: every mirrored write carries the replication origin
-- named for its sink ("ash_replicant_<sink>", created by the worker on first
-- use, dropped with the sink); a pipeline may skip source transactions that
-- carry an origin (docs/operations.md#replication-origins).
------------------------------------------------------------------------------

/*
 * origin: 'any' mirrors every source transaction (cascades: a source that is
 * itself a mirror); 'none' skips those the source received by replication
 * (an origin is set), as a PostgreSQL 16 subscription with origin = none
 * does, so two servers may mirror each other's tables without a loop.
 */
ALTER TABLE ash_replicant.pipelines
	ADD COLUMN origin text NOT NULL DEFAULT 'any' CHECK (origin IN ('any', 'none'));

-- admins read it as they read the other start options
GRANT SELECT (origin) ON ash_replicant.pipelines TO ash_replicant_admin;

DROP FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean);
CREATE FUNCTION ash_replicant_configure_pipeline(
	sink_name text,
	connection text,
	publication text DEFAULT NULL,
	source_system_identifier text DEFAULT NULL,
	source_database text DEFAULT NULL,
	decoder text DEFAULT 'pgoutput',
	replication_sets text[] DEFAULT NULL,
	tables text[] DEFAULT NULL,
	allow_keyless_tables boolean DEFAULT false,
	go_forward_only boolean DEFAULT NULL,
	snapshot text DEFAULT 'off',
	chunk_rows integer DEFAULT 1000,
	max_pending_chunks integer DEFAULT 4,
	streaming boolean DEFAULT false,
	failover boolean DEFAULT false,
	max_inflight_lag bigint DEFAULT 67108864,
	max_command_retries integer DEFAULT 3,
	schema_check_interval_ms integer DEFAULT 60000,
	census jsonb DEFAULT '{}',
	binary_transfer boolean DEFAULT false,
	origin text DEFAULT 'any')
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The call carries a conninfo: an error raised while it runs (a refused
-- setting included) must not make the server log the failing statement.
-- Applied for the call only (a SUSET setting: the owner is a superuser).
SET log_min_error_statement = panic
AS 'MODULE_PATHNAME', 'ash_replicant_configure_pipeline';
COMMENT ON FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean, text)
	IS 'set (replace) the start options of a sink''s pipeline';
REVOKE ALL ON FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean, text)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean, text)
	TO ash_replicant_admin;

------------------------------------------------------------------------------
-- Per-table and per-tenant statistics (docs/operations.md#per-table-statistics).
------------------------------------------------------------------------------

/*
 * One row per sink, target and (tenant-scoped mappings only) tenant: the
 * row changes the pipeline applied, written in the same destination
 * transaction as the rows and the checkpoint (exact, and kept across
 * restarts).  tenant is a value: default-deny, read only through the view
 * stat_tables, which shows it to roles that may read that tenant's rows.
 * target_table is the table written (under context tenancy the tenant's).
 */
CREATE TABLE ash_replicant.table_stats (
	sink_name text NOT NULL REFERENCES ash_replicant.sinks ON DELETE CASCADE,
	target text NOT NULL,
	tenant text,
	target_table oid,
	inserted bigint NOT NULL DEFAULT 0,
	updated bigint NOT NULL DEFAULT 0,
	deleted bigint NOT NULL DEFAULT 0,
	truncated bigint NOT NULL DEFAULT 0,
	last_commit_time timestamptz,
	last_applied_at timestamptz,
	counting_since timestamptz NOT NULL DEFAULT pg_catalog.now(),
	UNIQUE NULLS NOT DISTINCT (sink_name, target, tenant)
);
ALTER TABLE ash_replicant.table_stats ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.table_stats FROM PUBLIC;

/*
 * Per sink and target, all tenants together (tenant NULL); then, for a
 * tenant-scoped mapping, one row per tenant -- only where the querying role
 * may SELECT the table that tenant's rows are written to.  A caller's own
 * function in WHERE never sees a row the filter hides: the view is a
 * security barrier, and the filtered rows come from a subquery no condition
 * is pushed into (OFFSET 0: the UNION ALL is flattened into its branches,
 * which would otherwise let a cheap caller function run before the check).
 */
CREATE VIEW ash_replicant.stat_tables WITH (security_barrier) AS
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
REVOKE ALL ON ash_replicant.stat_tables FROM PUBLIC;
GRANT SELECT ON ash_replicant.stat_tables TO ash_replicant_monitor, ash_replicant_admin;

CREATE FUNCTION ash_replicant_reset_table_stats(sink_name text DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $reset$
DECLARE
	n bigint;
BEGIN
	IF sink_name IS NOT NULL
	   AND NOT EXISTS (SELECT FROM ash_replicant.sinks s WHERE s.sink_name = $1) THEN
		RAISE EXCEPTION 'ash_replicant: sink "%" does not exist', sink_name
			USING ERRCODE = 'undefined_object';
	END IF;
	DELETE FROM ash_replicant.table_stats t WHERE $1 IS NULL OR t.sink_name = $1;
	GET DIAGNOSTICS n = ROW_COUNT;
	RETURN n;
END
$reset$;
COMMENT ON FUNCTION ash_replicant_reset_table_stats(text)
	IS 'reset the per-table statistics of one sink (or of every sink): the counters start again from zero; returns the rows removed';
REVOKE ALL ON FUNCTION ash_replicant_reset_table_stats(text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_reset_table_stats(text) TO ash_replicant_admin;

------------------------------------------------------------------------------
-- Incremental snapshots (snapshot => 'incremental', docs/snapshots.md).
------------------------------------------------------------------------------

/*
 * chunk_cursor: the primary key (source column text, in key order) of the
 * last row of the last chunk committed for the table; NULL before its first
 * chunk.  chunks_copied counts its chunks.  Both move in the chunk's own
 * destination transaction, with its rows.
 */
ALTER TABLE ash_replicant.snapshot_tables
	ADD COLUMN chunk_cursor text[],
	ADD COLUMN chunks_copied bigint NOT NULL DEFAULT 0;

/*
 * One row per chunk whose window may still be open: the key range it
 * copied (lo exclusive, hi inclusive; NULL unbounded), the source snapshot
 * it was read under (xmin, xmax and in-progress xids, as xid8 values) and
 * the end of the source's WAL when that snapshot was taken.  The stream
 * skips a change to a key in the range whose transaction the snapshot saw
 * (the chunk holds it).  Written with the chunk; dropped once the applied
 * watermark is past high_lsn.
 */
CREATE TABLE ash_replicant.snapshot_windows (
	source_system_id text NOT NULL,
	source_database text NOT NULL,
	slot_name text NOT NULL,
	source_schema text NOT NULL,
	source_table text NOT NULL,
	chunk bigint NOT NULL,
	lo text[],
	hi text[],
	snap_xmin bigint NOT NULL,
	snap_xmax bigint NOT NULL,
	snap_xip bigint[] NOT NULL,
	high_lsn pg_lsn NOT NULL,
	PRIMARY KEY (source_system_id, source_database, slot_name, source_schema, source_table, chunk),
	FOREIGN KEY (source_system_id, source_database, slot_name, source_schema, source_table)
		REFERENCES ash_replicant.snapshot_tables ON DELETE CASCADE
);
ALTER TABLE ash_replicant.snapshot_windows ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.snapshot_windows FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.snapshot_windows', '');
