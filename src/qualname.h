/*-------------------------------------------------------------------------
 *
 * qualname.h
 *	  The stored form of a qualified source name (qualname.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_QUALNAME_H
#define ASH_QUALNAME_H

/*
 * Parse a strictly qualified "schema.table" name as stored in
 * sinks.ignored_sources and pipelines.tables.  Each part is an identifier
 * with PostgreSQL's rules: an unquoted part is folded to lower case, a
 * double-quoted part is taken verbatim ("" is a quote).  Exactly one
 * separating dot, no whitespace outside quotes, both parts non-empty and at
 * most NAMEDATALEN-1 bytes.  On success sets *schema and *table (palloc'd)
 * and returns true; returns false on any deviation.
 *
 * The configuration functions store entries in the canonical form
 * quote_identifier(schema) || '.' || quote_identifier(table), which this
 * function parses back.
 */
extern bool ash_parse_qualified_name(const char *str, char **schema, char **table);

/* Canonical stored form of a (schema, table) pair, palloc'd. */
extern char *ash_canonical_qualified_name(const char *schema, const char *table);

/*
 * The stored form of a function the catalogs name
 * (resources.tenant_function, resources.tenant_scope_function,
 * message_routes.target_function): its regprocedure text under search_path
 * pg_catalog, pg_temp -- every name outside pg_catalog qualified, e.g.
 * public.my_scope(text).  A name, not an OID, because pg_upgrade keeps no
 * function's OID.  palloc'd.
 */
extern char *ash_function_signature(Oid fn);

/*
 * The function a stored signature names now, or InvalidOid when none does:
 * dropped, renamed or moved, as a dangling OID was before 1.10.0.  NULL
 * names none.  Readers select the column as text, so catalogs before 1.10.0
 * (regprocedure, rendered under the session's search_path; a dangling OID
 * as its number) resolve too: under the session's path (every caller pins
 * pg_catalog first), a bare number as that OID when a function has it.
 */
extern Oid	ash_function_resolve(const char *signature);

/*
 * What a writer appends to a signature parameter ($n%s) for
 * ash_replicant.<table>.<column>: nothing for a text column, a cast for the
 * regprocedure column of catalogs before 1.10.0.
 */
extern const char *ash_function_column_cast(const char *table, const char *column);

#endif							/* ASH_QUALNAME_H */
