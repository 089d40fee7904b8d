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
