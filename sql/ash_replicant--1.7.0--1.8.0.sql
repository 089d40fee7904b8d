/* ash_replicant 1.7.0 -> 1.8.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.8.0'" to load this file. \quit

------------------------------------------------------------------------------
-- A dump of the destination keeps the mappings' identity sequence.
------------------------------------------------------------------------------

/*
 * ash_replicant.resources is dumped (pg_extension_config_dump), its
 * identity sequence was not: a database restored from pg_dump held every
 * mapping and a sequence starting at 1 again, and the next
 * ash_replicant_map_table failed on the primary key (23505).  Marked, the
 * sequence's position is dumped with the rows.
 */
SELECT pg_catalog.pg_extension_config_dump('ash_replicant.resources_resource_id_seq', '');
