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

#endif							/* ASH_QUALNAME_H */
