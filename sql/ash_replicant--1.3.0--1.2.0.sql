/*
 * ash_replicant 1.3.0 -> 1.2.0: rollback of loop-safe origins, the
 * per-table statistics and incremental snapshots (docs/operations.md,
 * "Upgrading from 0.4.0": rollbacks).
 *
 * Refused, leaving the catalogs as they were, unless the session says
 * ash_replicant.pipelines_stopped = on (pipelines_stopped_required) and no
 * pipeline or snapshot worker runs on the server (pipeline_running).
 * Refused too when a pipeline skips transactions with an origin
 * (origin = 'none'): 1.2.0 would mirror them, and two servers mirroring
 * each other would loop (rollback_state_unrepresentable).  The statistics
 * are dropped; so are the sinks' replication origins, which 1.2.0 neither
 * sets nor drops.  Refused while an incremental snapshot attempt is
 * unfinished (rollback_state_unrepresentable).  Messages carry counts and
 * reason codes only.
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

	SELECT pg_catalog.count(*) INTO n FROM ash_replicant.pipelines p WHERE p.origin <> 'any';
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: rollback_state_unrepresentable (% pipelines skip transactions with an origin; configure them with origin => ''any'' first)', n
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;

	-- incremental snapshots: an unfinished attempt's chunks cannot be kept
	LOCK TABLE ash_replicant.snapshot_tables, ash_replicant.snapshot_windows IN ACCESS EXCLUSIVE MODE;
	SELECT pg_catalog.count(*) INTO n FROM ash_replicant.snapshot_tables t
	 WHERE t.state = 'pending' AND t.chunks_copied > 0;
	IF n > 0 THEN
		RAISE EXCEPTION 'ash_replicant: rollback rejected: rollback_state_unrepresentable (1.2.0 cannot represent: % tables of an unfinished incremental snapshot)', n
			USING ERRCODE = 'object_not_in_prerequisite_state';
	END IF;

	-- the origins the sinks' writes were tagged with (server-wide)
	PERFORM pg_catalog.pg_replication_origin_drop(o.roname)
	   FROM pg_catalog.pg_replication_origin o
	  WHERE o.roname OPERATOR(pg_catalog.=) ANY (
		SELECT 'ash_replicant_' OPERATOR(pg_catalog.||) s.sink_name
		  FROM ash_replicant.sinks s
		UNION ALL
		SELECT 'ash_replicant_' OPERATOR(pg_catalog.||) s.sink_name
			OPERATOR(pg_catalog.||) '_copier' OPERATOR(pg_catalog.||) c
		  FROM ash_replicant.sinks s, pg_catalog.generate_series(1, 7) c);
END
$guard$;

DROP FUNCTION ash_replicant_reset_table_stats(text);
DROP VIEW ash_replicant.stat_tables;
DROP TABLE ash_replicant.table_stats;

DROP FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean, text);
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
	binary_transfer boolean DEFAULT false)
RETURNS void
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- The call carries a conninfo: an error raised while it runs (a refused
-- setting included) must not make the server log the failing statement.
-- Applied for the call only (a SUSET setting: the owner is a superuser).
SET log_min_error_statement = panic
AS 'MODULE_PATHNAME', 'ash_replicant_configure_pipeline';
COMMENT ON FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean)
	IS 'set (replace) the start options of a sink''s pipeline';
REVOKE ALL ON FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean)
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_configure_pipeline(text, text, text, text, text, text, text[], text[], boolean, boolean, text, integer, integer, boolean, boolean, bigint, integer, integer, jsonb, boolean)
	TO ash_replicant_admin;

ALTER TABLE ash_replicant.pipelines DROP COLUMN origin;

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
