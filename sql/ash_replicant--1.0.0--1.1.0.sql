/* ash_replicant 1.0.0 -> 1.1.0: snapshots of existing rows (docs/snapshots.md). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.1.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Snapshot attempt on the checkpoint, per-table progress.
------------------------------------------------------------------------------

/*
 * snapshot_phase: NULL (no snapshot taken under this checkpoint), 'copying'
 * (an attempt is armed: its tables are listed in snapshot_tables) or
 * 'complete' (every table copied; the watermark starts at snapshot_lsn).
 * snapshot_lsn: the slot's consistent point the stream resumes from.
 * snapshot_attempt: 256 random bits naming the attempt (append-log events).
 */
ALTER TABLE ash_replicant.checkpoints
	ADD COLUMN snapshot_phase text CHECK (snapshot_phase IN ('copying', 'complete')),
	ADD COLUMN snapshot_lsn pg_lsn,
	ADD COLUMN snapshot_attempt bytea;

/*
 * One row per source table of a snapshot attempt.  A table is copied in ONE
 * destination transaction that also marks it copied here, under a source
 * snapshot taken at snapshot_lsn; the stream then applies only its changes
 * committed at or after snapshot_lsn.
 */
CREATE TABLE ash_replicant.snapshot_tables (
	source_system_id text NOT NULL,
	source_database text NOT NULL,
	slot_name text NOT NULL,
	source_schema text NOT NULL,
	source_table text NOT NULL,
	state text NOT NULL CHECK (state IN ('pending', 'copied')),
	rows_estimate bigint,
	rows_copied bigint NOT NULL DEFAULT 0,
	snapshot_lsn pg_lsn,
	copied_at timestamptz,
	PRIMARY KEY (source_system_id, source_database, slot_name, source_schema, source_table),
	FOREIGN KEY (source_system_id, source_database, slot_name)
		REFERENCES ash_replicant.checkpoints ON DELETE CASCADE
);
ALTER TABLE ash_replicant.snapshot_tables ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.snapshot_tables FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.snapshot_tables', '');

------------------------------------------------------------------------------
-- Statistics: snapshot progress.
------------------------------------------------------------------------------

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
	worker_started_at timestamptz,
	snapshot_phase text, snapshot_tables_total integer,
	snapshot_tables_copied integer, snapshot_rows_copied bigint,
	snapshot_rows_estimate bigint)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_stat_pipelines';
COMMENT ON FUNCTION ash_replicant._stat_pipelines()
	IS 'internal: backs the ash_replicant.stat_pipelines view';

CREATE VIEW ash_replicant.stat_pipelines AS
	SELECT * FROM ash_replicant._stat_pipelines();
COMMENT ON VIEW ash_replicant.stat_pipelines
	IS 'per-pipeline counters, positions, lag, census state and snapshot progress';

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

REVOKE ALL ON FUNCTION ash_replicant._stat_pipelines(), ash_replicant._stat_snapshot_tables()
	FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant._stat_pipelines(), ash_replicant._stat_snapshot_tables()
	TO ash_replicant_monitor, ash_replicant_admin;
REVOKE ALL ON ash_replicant.stat_pipelines, ash_replicant.stat_snapshot_tables FROM PUBLIC;
GRANT SELECT ON ash_replicant.stat_pipelines, ash_replicant.stat_snapshot_tables
	TO ash_replicant_monitor, ash_replicant_admin;

------------------------------------------------------------------------------
-- A known go-forward point.
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_wait_for_slot(sink_name text,
	timeout interval DEFAULT '1 min')
RETURNS void
LANGUAGE C STRICT SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_wait_for_slot';
COMMENT ON FUNCTION ash_replicant_wait_for_slot(text, interval)
	IS 'wait until the started pipeline holds its replication slot: every source commit after the return is mirrored (with a snapshot, every existing row too); raises on halt, stop or timeout';

REVOKE ALL ON FUNCTION ash_replicant_wait_for_slot(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_wait_for_slot(text, interval)
	TO ash_replicant_monitor, ash_replicant_admin;
