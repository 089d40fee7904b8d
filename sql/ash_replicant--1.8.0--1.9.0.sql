/* ash_replicant 1.8.0 -> 1.9.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.9.0'" to load this file. \quit

------------------------------------------------------------------------------
-- A restored destination does not start its pipelines by itself
-- (docs/reasons.md#destination_restored).
------------------------------------------------------------------------------

/*
 * This installation of the extension: one row, made by CREATE EXTENSION (or
 * this update) and never dumped (no pg_extension_config_dump), so a database
 * restored from pg_dump gets a new one, while pg_upgrade and a physical copy
 * (base backup, standby) keep it with the table's files.
 */
CREATE TABLE ash_replicant.installation (
	installation_id uuid NOT NULL DEFAULT pg_catalog.gen_random_uuid(),
	singleton boolean NOT NULL DEFAULT true PRIMARY KEY CHECK (singleton),
	created_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
ALTER TABLE ash_replicant.installation ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.installation FROM PUBLIC;
INSERT INTO ash_replicant.installation DEFAULT VALUES;
COMMENT ON TABLE ash_replicant.installation
	IS 'this installation of the extension (not dumped: a restore makes a new one); a pipeline runs only in the installation it was started in';

/*
 * The installation ash_replicant_start marked the pipeline enabled in.  The
 * pipelines table is dumped with its enabled flag: restored elsewhere, the
 * flag names another installation, and the launcher leaves the pipeline
 * alone (status not_started, destination_restored) until it is started
 * there -- the restored targets and checkpoint may not be complete yet.
 * Pipelines enabled now go on running.
 */
ALTER TABLE ash_replicant.pipelines ADD COLUMN started_in uuid;
UPDATE ash_replicant.pipelines
   SET started_in = (SELECT i.installation_id FROM ash_replicant.installation i)
 WHERE enabled;
-- admins read every column but the conninfo
GRANT SELECT (started_in) ON ash_replicant.pipelines TO ash_replicant_admin;
COMMENT ON COLUMN ash_replicant.pipelines.started_in
	IS 'the installation (ash_replicant.installation) ash_replicant_start enabled the pipeline in; another, or none: a restored pipeline, not started (destination_restored)';

------------------------------------------------------------------------------
-- What the membership records hold since 1.5.0's.
------------------------------------------------------------------------------

COMMENT ON TABLE ash_replicant.publication_members
	IS 'how the publication held each mapped table of a checkpoint, with the columns and types it sent; a table out of it since, a column replaced, or retyped so that values changed, is a gap: publication_gap, or a snapshot copies the table again';
