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
