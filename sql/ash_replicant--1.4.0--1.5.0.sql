/* ash_replicant 1.4.0 -> 1.5.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.5.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Publication gaps without a snapshot (docs/reasons.md#publication_gap).
------------------------------------------------------------------------------

/*
 * How the publication held each mapped source table of a checkpoint that
 * streams without a snapshot (pgoutput, pglogical; the same tokens as
 * snapshot_tables.published: its pg_publication_rel rows, those of its
 * schema and of its partition ancestors, or FOR ALL TABLES; pglogical: its
 * rows of pglogical.replication_set_table, by set and xmin).  Recorded at
 * every start and census; a table held by none of its recorded rows any
 * more left the publication and came back, and its changes in between were
 * never decoded: the pipeline halts publication_gap instead of mirroring
 * on top of the hole.
 */
CREATE TABLE ash_replicant.publication_members (
	source_system_id text NOT NULL,
	source_database text NOT NULL,
	slot_name text NOT NULL,
	source_schema text NOT NULL,
	source_table text NOT NULL,
	published text NOT NULL,
	recorded_at timestamptz NOT NULL,
	PRIMARY KEY (source_system_id, source_database, slot_name, source_schema, source_table),
	-- the records go with their checkpoint row, wherever it goes
	FOREIGN KEY (source_system_id, source_database, slot_name)
		REFERENCES ash_replicant.checkpoints ON UPDATE CASCADE ON DELETE CASCADE
);
ALTER TABLE ash_replicant.publication_members ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.publication_members FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.publication_members', '');
COMMENT ON TABLE ash_replicant.publication_members
	IS 'how the publication held each mapped table of a checkpoint streaming without a snapshot; a table held by none of them any more halts publication_gap';

CREATE FUNCTION ash_replicant_acknowledge_publication_gap(
	sink_name text,
	source_system_identifier text,
	source_database text,
	source_schema text DEFAULT NULL,
	source_table text DEFAULT NULL)
RETURNS boolean
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_acknowledge_publication_gap';
COMMENT ON FUNCTION ash_replicant_acknowledge_publication_gap(text, text, text, text, text)
	IS 'offline recovery: accept that a mapped table''s changes made while it was out of the publication are missing (NULL schema and table: every table of the sink); the next start records how the publication holds it now; true when a record was forgotten';

REVOKE ALL ON FUNCTION
	ash_replicant_acknowledge_publication_gap(text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	ash_replicant_acknowledge_publication_gap(text, text, text, text, text) TO ash_replicant_admin;
