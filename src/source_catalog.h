/*-------------------------------------------------------------------------
 *
 * source_catalog.h
 *	  What the source's catalogs say about the decoder's table set.
 *
 * NOTES
 *	  The probe queries shared by preflight/doctor (a backend) and by the
 *	  pipeline's activation and census (the bgworker), on a read-only probe
 *	  connection (ASH_CONN_PROBE):
 *
 *	  1. ash_source_identity_matches: the probe is the configured source
 *		 (system identifier and database) -- judge nothing before it;
 *	  2. ash_source_fetch_table_set: the decoder's table set by name --
 *		 the publication's tables (with the PG 15 column list and row
 *		 filter) and what the publication publishes, wal2json's configured
 *		 tables, or the tables of pglogical's replication sets;
 *	  3. ash_source_describe_tables: every table of the set as an
 *		 AshSourceTable (coverage.h): replica identity, the columns the
 *		 decoder sends with their source type OIDs and names and their
 *		 replica-identity membership, plus existence and SELECT privilege;
 *	  4. ash_source_judge_coverage: coverage.c's judgement over the result
 *		 (the table set, then every mapped table of the set).
 *
 *	  A probe that fails raises ERROR with ERRCODE_CONNECTION_FAILURE and a
 *	  value-free message (libpq_conn.c); ash_conn_last_sqlstate keeps the
 *	  source's SQLSTATE (empty for a transport failure) and
 *	  ash_source_probe_reason() names the failure's class.  Callers decide
 *	  what a failure means: the doctor fails its check, activation retries
 *	  with back-off, the census counts a fault.  Everything returned is
 *	  allocated in CurrentMemoryContext; no destination transaction is
 *	  needed except by ash_source_judge_coverage.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SOURCE_CATALOG_H
#define ASH_SOURCE_CATALOG_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

#include "coverage.h"
#include "libpq_conn.h"

/*
 * SQL fragments shared by the describing probes (aliases c: pg_class, a:
 * pg_attribute): whether a column is in the replica identity as pgoutput
 * marks it, and the base type of a column (through domains) as bt with
 * its oid, typname and typnamespace, the name pgoutput's Type message
 * carries.
 */
#define ASH_SQL_IN_REPLICA_IDENTITY \
"  CASE c.relreplident WHEN 'f' THEN true" \
"   WHEN 'd' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i" \
"     WHERE i.indrelid = c.oid AND i.indisprimary AND a.attnum = ANY (i.indkey))" \
"   WHEN 'i' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_index i" \
"     WHERE i.indrelid = c.oid AND i.indisreplident AND a.attnum = ANY (i.indkey))" \
"   ELSE false END"

#define ASH_SQL_BASE_TYPE_LATERAL \
" LEFT JOIN LATERAL (WITH RECURSIVE b(oid, typname, typnamespace, typtype, typbasetype, typrelid, typelem) AS (" \
"    SELECT t.oid, t.typname, t.typnamespace, t.typtype, t.typbasetype, t.typrelid, t.typelem" \
"      FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid" \
"    UNION ALL" \
"    SELECT t.oid, t.typname, t.typnamespace, t.typtype, t.typbasetype, t.typrelid, t.typelem" \
"      FROM pg_catalog.pg_type t, b WHERE b.typtype = 'd' AND t.oid = b.typbasetype)" \
"   SELECT oid, typname, typnamespace, typrelid, typelem FROM b WHERE typtype <> 'd') bt ON true"

/* The decoder's table-set setting (as configured; never logged). */
typedef struct AshTableSetSpec
{
	const char *decoder;		/* "pgoutput" (also NULL), "wal2json",
								 * "pglogical" */
	const char *publication;	/* pgoutput */
	const char *replication_sets;	/* pglogical: a text[] literal */
	const List *tables;			/* wal2json: AshSourceName * */
	bool		allow_keyless;	/* wal2json: allow_keyless_tables */
} AshTableSetSpec;

/* One table of the table set, as the source describes it. */
typedef struct AshSourceRel
{
	AshSourceName name;
	char	   *attnames;		/* publication column list (text[] literal),
								 * NULL: every column */
	bool		row_filter;		/* the publication filters its rows (15+) */
	bool		generated;		/* the decoder sends generated columns
								 * (wal2json, pglogical) */
	AshPublicationFacts set_actions;	/* pglogical: what the named sets that
										 * hold it replicate of it (known:
										 * false for the other decoders) */
	char	   *truncate_unqueued;	/* pglogical: why its TRUNCATE trigger
									 * would not queue every TRUNCATE, or
									 * NULL */
	bool		exists;			/* set by ash_source_describe_tables */
	bool		has_select;		/* the probe role may SELECT it */
	AshSourceTable desc;		/* only when exists */
} AshSourceRel;

/* The coverage verdicts over a described table set. */
typedef struct AshSourceCoverage
{
	AshCoverageVerdict table_set;	/* reason NULL: every table covered */
	AshCoverageVerdict publication; /* reason NULL: the publication contract
									 * can be honoured */
	List	   *warnings;		/* AshCoverageVerdict *, warnings only */
	AshCoverageVerdict columns; /* reason NULL: every mapped table covered */
	AshCoverageVerdict narrowing;	/* warning target_column_narrower, or
									 * reason NULL */
} AshSourceCoverage;

/* The failure class of the last failed probe: privilege_probe_missing or
 * source_probe_failed. */
extern const char *ash_source_probe_reason(void);

/* Is the probe connected to system sysid, database database? */
extern bool ash_source_identity_matches(AshConn *conn, const char *sysid,
										const char *database);

/*
 * Does the source server hold a replication origin?  A session with one
 * (a subscription, a pipeline of ours writing there) tags what it writes,
 * and the stream of a pipeline with origin => 'none' skips such
 * transactions; a table read cannot tell their rows from local ones, so
 * such a pipeline copies nothing from a server that holds one
 * (docs/snapshots.md#origins).  ASH_SOURCE_ORIGINS_SQL is the expression,
 * for a statement that must read it under its own snapshot.
 */
#define ASH_SOURCE_ORIGINS_SQL \
	"EXISTS (SELECT 1 FROM pg_catalog.pg_replication_origin)"
extern bool ash_source_has_origins(AshConn *conn);

/*
 * Fetch the names of the decoder's table set into *rels (AshSourceRel *,
 * ordered by schema and name) and, for pgoutput, what the publication
 * promises into *pub (may be NULL; known = false for wal2json).  For
 * pglogical each rel's set_actions says what the named sets holding it
 * replicate of it (pglogical ORs them), and *pub, known, promises every
 * action: ash_source_judge_coverage narrows it to what the sets promise
 * for the mapped tables.
 * Returns NULL, or the reason why the table set itself is absent:
 * source_publication_missing (a publication or replication set),
 * decoder_extension_missing (pglogical not installed).
 */
extern const char *ash_source_fetch_table_set(AshConn *conn, const AshTableSetSpec *spec,
											  List **rels, AshPublicationFacts *pub);

/* Describe every table of rels in place (one probe per table). */
extern void ash_source_describe_tables(AshConn *conn, List *rels);

/*
 * The source's WAL position now (a standby's: what it replayed): every
 * catalog change a read before it saw committed before it.  A failed probe
 * raises ERRCODE_CONNECTION_FAILURE.
 */
extern XLogRecPtr ash_source_wal_position(AshConn *conn);

/*
 * Steps 2 and 3 in one REPEATABLE READ snapshot of the source: a column
 * added between the two reads would look withheld by a column list.
 * Returns what ash_source_fetch_table_set returns (rels described only
 * when NULL).  A failure rolls the snapshot back before it is re-raised.
 */
extern const char *ash_source_read_table_set(AshConn *conn, const AshTableSetSpec *spec,
											 List **rels, AshPublicationFacts *pub);

/*
 * After describing: tables of the set the source does not have.  A
 * configured table (wal2json) that is absent is returned as a structural
 * context ("tables: ..."); a publication or replication-set table that
 * vanished between the two probes simply left the set and is removed
 * from *rels.  NULL when nothing is missing.
 */
/*
 * The mapped tables of a described table set that hold rows at the source
 * (quoted "schema"."table" strings), in set order: what a go-forward start
 * leaves out of the mirror.  Reads one row of each (SELECT), or the
 * planner's estimate where the role may not read the table or another
 * session holds it locked (one never estimated counts as one with rows).
 */
extern List *ash_source_tables_with_rows(AshConn *conn, const List *mappings,
										 const List *rels);

extern char *ash_source_missing_tables(const AshTableSetSpec *spec, List **rels);

/*
 * After describing: wal2json tables of the set without replica identity
 * (no primary key, no identity index, not FULL): wal2json drops their
 * deletes and sends their updates without a key.  Unless allow_keyless
 * is set, returned as a structural context ("tables: ..."); else NULL.
 */
extern char *ash_source_keyless_tables(const AshTableSetSpec *spec, const List *rels);

/* The AshSourceName of every rel (pointers into rels). */
extern List *ash_source_rel_names(const List *rels);

/*
 * The tables of a publication ($1), pgoutput's table set: schema, name,
 * the row estimate (NULL: never analysed) and how the publication holds
 * each table -- a token per catalog row that puts it in: "rel:<oid>" of
 * pg_publication_rel for the table or a partition ancestor of it,
 * "ns:<oid>" of pg_publication_namespace for its schema or an ancestor's
 * (PostgreSQL 15+), "all:<oid>" for FOR ALL TABLES; and the publication's
 * own row as "def:<oid>:<xmin>", which ALTER PUBLICATION ... SET (publish,
 * publish_via_partition_root), OWNER TO and RENAME rewrite (ADD and DROP
 * TABLE do not); and the table's own OID as "def:tbl:<oid>": a table
 * dropped and created again under its name, or another renamed into it, is
 * another table, whose predecessor's rows the mirror holds without any
 * change that deleted them (under a schema's or FOR ALL TABLES membership
 * no catalog row of the publication changes); and each column the decoder
 * sends as "col:<name>:<attnum>" (the name's UTF-8 bytes in hex): a column
 * dropped and added again under its name keeps the name, not the number;
 * and as "typ:<name>:<type>.<typmod>": a retype rewrote its rows.
 * Sorted, comma-separated; then the source's WAL position once the read was
 * made (text: every catalog change it saw committed before).  In schema and
 * name order.
 */
extern char *ash_source_publication_tables_sql(AshConn *conn);

/*
 * The same for pglogical's replication sets ($1, a text[] literal): the
 * tables of the sets, each held by "set:<set_id>:<xmin>" of its rows of
 * pglogical.replication_set_table (which have no OID; a row removed and
 * added again, or replaced, is written by another transaction), with
 * "def:set:<set_id>:<xmin>" of each of those sets' own rows (alter_
 * replication_set rewrites them), "def:tbl:<oid>", the "col:" and "typ:"
 * tokens as above (generated columns too: pglogical sends them).
 */
extern const char *ash_source_replication_set_tables_sql(void);

/*
 * How the decoder's table set holds each of its tables now, in the shape
 * above: pgoutput's publication, pglogical's replication sets, or
 * wal2json's configured tables (which it holds whatever happens: only
 * "def:tbl:", the "col:" and "typ:" tokens); NULL when none is configured.
 */
extern PGresult *ash_source_table_set_membership(AshConn *conn, const AshTableSetSpec *spec);

/*
 * The table-set setting of cfg (its tables as AshSourceName *, pointing
 * into cfg).
 */
extern void ash_source_table_set_of(const AshPipelineConfig *cfg, AshTableSetSpec *spec);

/*
 * Did a table held by the publication as "then" say (the tokens above)
 * leave it before being held as "now" says?  A catalog row, once dropped,
 * never comes back with the same OID: held now by none of the rows that
 * held it then, it was out in between, and pgoutput decoded none of its
 * changes of that time (it reads membership as of each change).  So with
 * a "def:" token of then missing now: the publication (a set) was
 * redefined since, and what it withheld meanwhile is unknown, or the table
 * was replaced by another of its name.  A "col:" token of then whose
 * column name stands now for another column number: the column was
 * replaced (dropped and added again, or another renamed into its name),
 * and the rows that existed then hold at the source what no change
 * carried -- unless map (NULL: every column) skips the column or is an
 * append log.  A "typ:" token of then whose column has another type or
 * modifier now that does not keep every value (a narrowed numeric, a
 * timestamp read as timestamptz): its rows were rewritten at the source,
 * outside any stream; the same columns are judged (ASH_GAP_RETYPED when
 * that is all).  Not known (NULL: another decoder, or recorded before
 * 1.4.0): ASH_GAP_NONE.
 */
typedef enum AshTableGap
{
	ASH_GAP_NONE = 0,
	ASH_GAP_RETYPED,			/* "typ:" tokens only */
	ASH_GAP_OUT					/* out and back, redefined, replaced */
} AshTableGap;

extern AshTableGap ash_source_publication_gap(const char *then, const char *now,
											  const AshMapping *map);

/*
 * Was a column of the source table relid retyped since then (a record's
 * tokens, as above) in a way that rewrote its rows?  Its "typ:" tokens
 * judged against the table's columns in the source's catalog now, as
 * ash_source_publication_gap judges them (map as there).  For pglogical,
 * whose Relation message carries no types.
 */
extern bool ash_source_retyped_since(AshConn *conn, uint32 relid, const char *then,
									 const AshMapping *map);

/*
 * Every mapping of a sink as stored (ash_mapping_load_sink: *specs,
 * AshMappingSpec *) and the AshMapping equivalent of each (*mappings, same
 * order).  Needs a transaction with an active snapshot.
 */
extern void ash_source_load_mappings(const char *sink_name, List **specs, List **mappings);

/*
 * Judge coverage (coverage.c) over described rels: the table set
 * (ash_coverage_judge_table_set), the publication contract
 * (ash_coverage_judge_publication over pub, when not NULL; for pglogical
 * narrowed to what the sets replicate of every mapped table, the rels'
 * set_actions) and every mapped
 * table of the set that exists (ash_coverage_judge_table, the first failure
 * wins).  specs:
 * AshMappingSpec * (mapping_validate.h) and mappings: their AshMapping *
 * equivalents, in the same order; ignored: as
 * AshPipelineConfig.ignored_sources.  Needs a transaction.
 */
extern void ash_source_judge_coverage(const List *specs, const List *mappings,
									  const List *ignored, const List *rels,
									  const AshPublicationFacts *pub,
									  AshSourceCoverage *out);

#endif							/* ASH_SOURCE_CATALOG_H */
