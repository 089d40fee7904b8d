/* ash_replicant 1.1.0 -> 1.2.0: halts that explain themselves (docs/operations.md). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.2.0'" to load this file. \quit

------------------------------------------------------------------------------
-- Where a halt stopped: structure only, never a value.
------------------------------------------------------------------------------

/*
 * halt_lsn: the commit LSN of the source transaction the halt stopped at
 * (NULL when the halt was not on a change).  halt_target: the mapping's
 * target table as configured (schema-qualified, quoted; under context
 * tenancy the mapping's name, never a tenant's schema).
 */
ALTER TABLE ash_replicant.pipelines
	ADD COLUMN halt_lsn pg_lsn,
	ADD COLUMN halt_target text;

-- admins read them as they read the rest of the halt
GRANT SELECT (halt_lsn, halt_target) ON ash_replicant.pipelines TO ash_replicant_admin;

------------------------------------------------------------------------------
-- Completeness: source and mirror compared per mapping, values never shown
-- (docs/operations.md#verifying-completeness).
------------------------------------------------------------------------------

CREATE FUNCTION ash_replicant_verify(sink_name text, timeout interval DEFAULT '60s')
RETURNS TABLE (source_schema text, source_table text, target text,
	source_rows bigint, mirror_rows bigint, verdict text, reason text)
LANGUAGE C SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'ash_replicant_verify';
COMMENT ON FUNCTION ash_replicant_verify(text, interval)
	IS 'is the mirror complete? per mapping the source''s and the mirror''s row counts and match, mismatch or not_comparable, judged on the key sets at one source position the pipeline has applied; never prints a value or a digest';

REVOKE ALL ON FUNCTION ash_replicant_verify(text, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION ash_replicant_verify(text, interval)
	TO ash_replicant_monitor, ash_replicant_admin;
