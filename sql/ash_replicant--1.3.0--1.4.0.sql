/* ash_replicant 1.3.0 -> 1.4.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.4.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Snapshots follow their target (docs/snapshots.md, "A target replaced").
------------------------------------------------------------------------------

/*
 * target: the destination table a snapshot copies the source table into,
 * recorded when the table is listed in the attempt.  A later start whose
 * mapping writes to another table (the target dropped and re-created, the
 * mapping re-pointed, a sink re-created over the kept checkpoint) copies the
 * source table again, into that table.  NULL on rows listed before 1.4.0:
 * the first start after the update records the target mapped then.
 */
ALTER TABLE ash_replicant.snapshot_tables ADD COLUMN target regclass;

-- stat_snapshot_tables shows it, after the columns it had
DROP VIEW ash_replicant.stat_snapshot_tables;
DROP FUNCTION ash_replicant._stat_snapshot_tables();
CREATE FUNCTION ash_replicant._stat_snapshot_tables()
RETURNS TABLE (sink_name text, source_schema text, source_table text,
	state text, rows_copied bigint, rows_estimate bigint, copied_at timestamptz,
	target regclass)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_stat_snapshot_tables';
COMMENT ON FUNCTION ash_replicant._stat_snapshot_tables()
	IS 'internal: backs the ash_replicant.stat_snapshot_tables view';

CREATE VIEW ash_replicant.stat_snapshot_tables AS
	SELECT * FROM ash_replicant._stat_snapshot_tables();
COMMENT ON VIEW ash_replicant.stat_snapshot_tables
	IS 'per source table of each sink''s snapshot: pending, copying or copied, rows copied, the source''s estimate and the table it is copied into';

REVOKE ALL ON FUNCTION ash_replicant._stat_snapshot_tables() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant._stat_snapshot_tables()
	TO ash_replicant_monitor, ash_replicant_admin;
REVOKE ALL ON ash_replicant.stat_snapshot_tables FROM PUBLIC;
GRANT SELECT ON ash_replicant.stat_snapshot_tables
	TO ash_replicant_monitor, ash_replicant_admin;

/*
 * published: how the publication held the source table when it was listed
 * (pgoutput: its pg_publication_rel rows, those of its schema and of its
 * partition ancestors, or FOR ALL TABLES; NULL for other decoders).  A table
 * that left the publication and came back is held by none of them any more:
 * its changes in between were never decoded, so it is copied again.
 */
ALTER TABLE ash_replicant.snapshot_tables ADD COLUMN published text;
