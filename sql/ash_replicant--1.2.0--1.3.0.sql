/* ash_replicant 1.2.0 -> 1.3.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.3.0'" to load this file. \quit

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
