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
