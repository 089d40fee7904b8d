/* ash_replicant 1.6.0 -> 1.7.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.7.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Source columns added while mirrored (docs/reasons.md#source_column_added).
------------------------------------------------------------------------------

/*
 * The source columns each mapped table of a checkpoint has fed its target,
 * as the last description the pipeline applied (or copied) named them.  A
 * column added at the source gives the rows that existed then a value (its
 * default, or none) that no change ever carries; a description naming a
 * written column these records lack is judged before anything of it is
 * applied: a target without rows takes it, one with rows halts
 * source_column_added.  Written in the destination transaction that applies
 * or copies under the description.
 */
CREATE TABLE ash_replicant.source_columns (
	source_system_id text NOT NULL,
	source_database text NOT NULL,
	slot_name text NOT NULL,
	source_schema text NOT NULL,
	source_table text NOT NULL,
	columns text[] NOT NULL,
	-- the operator made the rows agree: the next addition is taken
	added_acknowledged boolean NOT NULL DEFAULT false,
	recorded_at timestamptz NOT NULL,
	PRIMARY KEY (source_system_id, source_database, slot_name, source_schema, source_table),
	-- the records go with their checkpoint row, wherever it goes; checked at
	-- commit: a snapshot's copy writes a record in a transaction as long as
	-- the table's copy, and the row lock of an immediate check would hold
	-- back every helper copier that reads the attempt (FOR UPDATE) meanwhile
	FOREIGN KEY (source_system_id, source_database, slot_name)
		REFERENCES ash_replicant.checkpoints ON UPDATE CASCADE ON DELETE CASCADE
		DEFERRABLE INITIALLY DEFERRED
);
ALTER TABLE ash_replicant.source_columns ENABLE ROW LEVEL SECURITY;
REVOKE ALL ON ash_replicant.source_columns FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.source_columns', '');
COMMENT ON TABLE ash_replicant.source_columns
	IS 'the source columns each mapped table of a checkpoint feeds its target; a written column added at the source while the target holds rows halts source_column_added';

CREATE FUNCTION ash_replicant_acknowledge_column_added(
	sink_name text,
	source_system_identifier text,
	source_database text,
	source_schema text,
	source_table text)
RETURNS boolean
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_acknowledge_column_added';
COMMENT ON FUNCTION ash_replicant_acknowledge_column_added(text, text, text, text, text)
	IS 'offline recovery: accept that the target rows of a mapped table hold what the source columns added while they were mirrored hold at the source; the next description that adds columns to the table is taken as it is; true when the record was marked';

REVOKE ALL ON FUNCTION
	ash_replicant_acknowledge_column_added(text, text, text, text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
	ash_replicant_acknowledge_column_added(text, text, text, text, text) TO ash_replicant_admin;
