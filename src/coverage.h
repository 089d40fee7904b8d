/*-------------------------------------------------------------------------
 *
 * coverage.h
 *	  Source coverage: does a sink's mapping cover what the source sends?
 *
 * NOTES
 *	  One judgement shared by activation preflight, the doctor, the census
 *	  and the apply-side relation cache (relmap.c judges every Relation
 *	  message with it).  Its inputs are plain descriptions, however they
 *	  were obtained: a probe query on the source's catalogs, or a pgoutput
 *	  Relation message.  It needs a transaction (it opens the target
 *	  relation and reads the syscache) but performs no writes and no SPI.
 *
 *	  Per table (ash_coverage_judge_table), the first problem wins, in this
 *	  order, and its context names EVERY offending column:
 *
 *	  1. source_column_unmapped: a column the source sends is neither
 *		 skipped nor mapped (column_map, else the same name) to an
 *		 existing, non-generated target column;
 *	  2. source_column_missing: a declared source column (column_map key,
 *		 skip, sensitive, encrypted, tenant_column, history business key)
 *		 the source does not send.  Under on_schema_change = 'ignore' a
 *		 dropped column_map/skip/sensitive/encrypted entry is tolerated; the
 *		 tenant column and the business key never are;
 *	  3. source_type_invalid: the source type does not read into the target
 *		 type (same type, text-category target, an implicit cast between
 *		 built-in types, or for a source user type the same type name), or
 *		 the target would change values without an error (a smaller numeric
 *		 scale, a lower time precision, an integer or numeric into a float,
 *		 a char(n) that pads); encrypted columns are exempt (their target
 *		 holds ciphertext);
 *	  4. source_replica_identity: REPLICA IDENTITY FULL on tenant-scoped
 *		 sources, append-log sources, and SCD2 sources whose business key is
 *		 not exactly the replica identity; otherwise (SCD1) every identity
 *		 column of the target (upsert_identity or primary key) must be fed
 *		 by a source column of the replica identity;
 *	  5. source_key_not_unique: the source columns the target tells rows
 *		 apart by (SCD1: those feeding its identity; SCD2: the business
 *		 key; with an attribute or context tenant its tenant column too)
 *		 hold no key the source keeps unique -- a valid, immediate,
 *		 non-partial unique index on plain columns.  Two source rows would
 *		 be one target row.  Judged when the description read the source's
 *		 indexes (a probe, not a Relation message); append logs are exempt.
 *
 *	  A mapping whose target is gone is destination_table_missing.
 *
 *	  Table set (ash_coverage_judge_table_set): every table of the table
 *	  set is mapped or ignored (source_table_unmapped); no ignore names a
 *	  mapped table (ignore_collides_with_mapping); warnings for an ignore
 *	  that matches nothing in the table set (ignore_never_matches) and for
 *	  a mapping whose source table is not in the table set
 *	  (mapping_never_matches: that table would silently never replicate).
 *
 *	  Publication contract (ash_coverage_judge_publication, pgoutput only),
 *	  publication_contract_incompatible when the mirror would silently
 *	  diverge from a mapped table of the set:
 *
 *	  - the publication does not publish insert, update or delete (those
 *		changes would never arrive), or truncate: every on_truncate mode
 *		needs to see a TRUNCATE (halt to halt, mirror/close/append to
 *		apply it), so an unpublished one would leave rows the source no
 *		longer has;
 *	  - a row filter on a mapped table (rows outside it, and rows an
 *		update moves out of it, would silently never reach the mirror);
 *	  - a column list withholding live columns of a mapped table (they
 *		would silently never be written; exclude columns with the
 *		mapping's skip instead);
 *	  - publish_via_partition_root with a mapped partitioned table (a
 *		TRUNCATE of one of its partitions is not published at all).
 *
 *	  Contexts are structural only: quoted schema, table and column names,
 *	  never a value (nor the publication's name).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_COVERAGE_H
#define ASH_COVERAGE_H

#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

#include "config.h"

/* mapping_validate.h is not included: its enums clash with relmap.h's. */
struct AshMappingSpec;

/* One column as the decoder sends it. */
typedef struct AshSourceColumn
{
	char	   *name;
	uint32		type_oid;		/* the SOURCE's type OID */
	uint32		base_type_oid;	/* its base type's (through domains), as
								 * the source's catalog says; 0: not known
								 * (a Relation message) */
	char	   *type_name;		/* pg_type.typname at the source; for a
								 * domain the base type's name, as pgoutput's
								 * Type message carries it */
	bool		in_identity;	/* part of the replica identity (every column
								 * under REPLICA IDENTITY FULL) */
	int32		typmod;			/* the source column's (a domain's own when
								 * the column has none); -1: unlimited */
	char	   *type_display;	/* format_type at the source, or NULL */
	bool		toastable;		/* its values may be stored out of line (a
								 * change may leave them unsent) */
	char	   *type_shape;		/* a composite type's fields (or an array's
								 * composite element's) at the source, as
								 * type_shape() in coverage.c writes them;
								 * NULL: not composite, or not known (a
								 * Relation message) */
	char	   *unique_in;		/* the source's unique keys it is a key
								 * column of, "index:nkeys" tokens joined by
								 * commas, or NULL */
} AshSourceColumn;

/*
 * What a pgoutput publication promises for every table of its set
 * (pg_publication).  known is false for the other decoders.
 */
typedef struct AshPublicationFacts
{
	bool		known;
	bool		insert;
	bool		update;
	bool		delete;
	bool		truncate;
	bool		via_root;		/* publish_via_partition_root */
} AshPublicationFacts;

/* One source table as the decoder describes it. */
typedef struct AshSourceTable
{
	char	   *nspname;
	char	   *relname;
	char		replident;		/* 'd' default, 'f' full, 'i' index, 'n' nothing */
	int			natts;
	AshSourceColumn *cols;		/* only the columns the decoder sends */
	char		relkind;		/* pg_class.relkind ('p': partitioned) */
	bool		row_filter;		/* the publication filters its rows (15+) */
	char	   *withheld;		/* live columns the publication's column list
								 * leaves out (quoted, comma-separated), or
								 * NULL */
	char	   *truncate_unqueued;	/* pglogical: why a TRUNCATE might
									 * queue nothing, or NULL */
	bool		unique_known;	/* the columns' unique_in were read (false
								 * for a table a decoder's Relation message
								 * describes) */
} AshSourceTable;

/* A table of the decoder's table set, by name. */
typedef struct AshSourceName
{
	char	   *nspname;
	char	   *relname;
} AshSourceName;

typedef struct AshCoverageVerdict
{
	const char *reason;			/* NULL: covered */
	bool		warning;		/* a warning, not a failure */
	char	   *context;		/* structural context, never a value */
} AshCoverageVerdict;

/*
 * Does a source column's retype (type and modifier, old to new) keep every
 * value's text as it was (a limit lifted or widened, an integer widened)?
 */
extern bool ash_coverage_retype_keeps_values(uint32 old_type, int32 old_typmod,
											 uint32 new_type, int32 new_typmod);

/*
 * The target columns of m that no column of src feeds and whose default
 * draws from a sequence owner may not use (nextval needs USAGE or UPDATE),
 * each with its sequences: "n (public.t_n_seq), ..."; NULL: none.  Every
 * insert of the pipeline would fail 42501 on them.
 */
extern char *ash_coverage_denied_defaults(const AshMapping *m, const AshSourceTable *src,
										  Oid owner);

/*
 * The target columns of a plain mirror mapping m (not SCD2, not an append
 * log) that no column of src feeds and that are NOT NULL without a default
 * (nor generated, an identity, the tenant column or a provenance column):
 * "a, b"; NULL: none, or a BEFORE INSERT trigger that may fill them.  Every
 * insert of the pipeline would fail 23502 on them.
 */
extern char *ash_coverage_unfed_required(const AshMapping *m, const AshSourceTable *src);

/*
 * Can text output of the source type be read by the target type?  A
 * built-in source type (OID below FirstGenbkiObjectId) is the same type
 * here; a user type is known by its name only.
 */
extern bool ash_coverage_types_compatible(uint32 source_oid, const char *source_typname,
										  Oid target_type);

/*
 * Judge one mapped source table.  business_key: the SCD2 business key
 * (source column names, char *), NIL otherwise.  Returns true when
 * covered; otherwise fills *out with the first problem (see NOTES).
 */
/*
 * Append to buf every column of src whose target column can hold less than
 * the source's ("col (text -> character varying(3))"): a shorter varchar or
 * char, a numeric with fewer integer digits or a smaller scale, a time or
 * timestamp of lower precision.  Not a failure: values that fit apply, the
 * first that does not halts apply_failed.  Returns whether any was found.
 */
/* Is source table nsp.rel mapped (AshMapping *)? */
extern bool ash_coverage_is_mapped(const List *mappings, const char *nsp, const char *rel);

extern bool ash_coverage_narrowing(const AshMapping *m, const AshSourceTable *src,
								   StringInfo buf);

extern bool ash_coverage_judge_table(const AshMapping *m, const List *business_key,
									 const AshSourceTable *src, AshCoverageVerdict *out);

/*
 * Judge the table set.  mappings: AshMapping *; ignored: as
 * AshPipelineConfig.ignored_sources (List of two-element Lists of char *);
 * table_set: AshSourceName *.  Returns true when nothing fails; the first
 * failure goes to *fail, every warning is appended to *warnings
 * (AshCoverageVerdict *).
 */
extern bool ash_coverage_judge_table_set(const List *mappings, const List *ignored,
										 const List *table_set, AshCoverageVerdict *fail,
										 List **warnings);

/*
 * Judge the publication contract: can the mirror honour what the
 * publication sends for the mapped tables of the set?  tables:
 * AshSourceTable * of the set (existing ones).  Returns true when it can
 * (or pub->known is false); otherwise publication_contract_incompatible in
 * *out, its context naming every problem (see NOTES).
 */
extern bool ash_coverage_judge_publication(const List *mappings,
										   const AshPublicationFacts *pub,
										   const List *tables, AshCoverageVerdict *out);

/*
 * Key columns (attnums) of a target's conflict identity: the index or
 * constraint named by upsert_identity, else the primary key; NIL when there
 * is none or it has an expression column.
 */
extern List *ash_target_identity_attnums(Relation target, const AshMapping *m);

/*
 * The AshMapping (config.h) equivalent of a stored mapping spec, for
 * callers that loaded mappings with ash_mapping_load_sink.
 */
extern AshMapping *ash_coverage_mapping_from_spec(const struct AshMappingSpec *spec);

/* Append a name to a ", "-separated list for a message. */
extern void ash_append_name_list(StringInfo buf, const char *name);

#endif							/* ASH_COVERAGE_H */
