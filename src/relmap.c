/*-------------------------------------------------------------------------
 *
 * relmap.c
 *	  Remote relation cache and its resolution against the destination.
 *
 * NOTES
 *	  Entries are keyed by the SOURCE relation OID of Relation messages.  A
 *	  Relation message (re)describes a relation; the first change of a
 *	  relation in a transaction resolves the entry:
 *
 *	  1. mapping: the resource mapping schema.table, or ignored_sources
 *		 (changes are then dropped, counted as skipped); neither halts
 *		 source_table_unmapped;
 *	  2. structure: a source column landing on a window/current or
 *		 structural column of the target, or on the column another source
 *		 column lands on, halts delivery_config_invalid;
 *	  3. coverage: the Relation message is judged by coverage.c exactly as
 *		 activation, the census and the doctor judge the source's catalogs
 *		 (columns mapped or skipped, declared columns sent, types, replica
 *		 identity; coverage.h has the rules and their order);
 *	  4. columns: each mapped column's conversion; an encrypted column
 *		 needs a bytea target (its text form is sealed into it);
 *	  5. identity: the target's primary key (or upsert_identity) columns;
 *		 SCD2 mappings take the business key instead (the target's primary
 *		 key is a surrogate no source column may write:
 *		 delivery_config_invalid); append-log mappings have none;
 *	  6. tenancy: the tenant source column (tenant_column) and, under the
 *		 attribute strategy, its target column (tenant_attribute_invalid).
 *
 *	  A later Relation message for a resolved entry is compared with the
 *	  columns it was resolved with: a type change always halts; a dropped
 *	  mapped column halts unless on_schema_change = 'ignore'; an added
 *	  column is judged by step 3 again.
 *
 *	  An incremental snapshot's chunks describe a table as the source's
 *	  catalog stands when the session first copies it: entries of their
 *	  own (chunk_relmap), never the stream's, which may still deliver
 *	  changes written before a column change the chunk sees.
 *
 *	  Nothing here writes.  Each destination table a relation writes to is an
 *	  AshApplyTarget on which apply strategies keep their prepared plans;
 *	  under context tenancy a relation has one target per tenant schema,
 *	  at most ASH_TENANT_TARGETS_MAX of them (least recently used evicted).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/index.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "parser/parse_coerce.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "coverage.h"
#include "errors.h"
#include "publication_record.h"
#include "relmap.h"

typedef struct RemoteType
{
	uint32		oid;			/* hash key */
	char		nspname[NAMEDATALEN];
	char		typname[NAMEDATALEN];
} RemoteType;

/* A mapped table as the publication records hold it (by its OID) */
typedef struct RecordedName
{
	uint32		oid;			/* hash key */
	char		nspname[NAMEDATALEN];
	char		relname[NAMEDATALEN];
	XLogRecPtr	read_at;
	/* the columns the record holds, with their types (0: none given) */
	bool		typed;			/* false: their names only are a baseline */
	int			ncols;
	char	  **names;
	uint32	   *types;
	int32	   *typmods;
} RecordedName;

static HTAB *relmap = NULL;

/*
 * The descriptions an incremental snapshot's chunks bring (read from the
 * source's catalog when a session first copies the table), apart from the
 * stream's: the stream may be behind a column change the chunk already
 * sees, and each tuple must be read by the description it came with.
 */
static HTAB *chunk_relmap = NULL;
static HTAB *remote_types = NULL;
static HTAB *recorded_names = NULL;
static MemoryContext relmap_cxt = NULL;
static AshPipelineConfig *relmap_cfg = NULL;
static AshRelReleaseHook release_hook = NULL;

/* A hash of the session by a source OID (uint32), in relmap_cxt */
static HTAB *
oid_hash(const char *name, Size entrysize, long nelem)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(uint32);
	ctl.entrysize = entrysize;
	ctl.hcxt = relmap_cxt;
	return hash_create(name, nelem, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

void
ash_relmap_init(AshPipelineConfig *cfg, AshRelReleaseHook release)
{
	relmap_cfg = cfg;
	release_hook = release;
	if (relmap_cxt == NULL)
		relmap_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant relmap",
										   ALLOCSET_DEFAULT_SIZES);
	else
	{
		ash_relmap_invalidate_all();
		MemoryContextReset(relmap_cxt);
	}
	relmap = oid_hash("ash_replicant remote relations", sizeof(AshApplyRel), 64);
	chunk_relmap = oid_hash("ash_replicant chunk relations", sizeof(AshApplyRel), 16);
	remote_types = oid_hash("ash_replicant remote types", sizeof(RemoteType), 16);
	recorded_names = oid_hash("ash_replicant recorded names", sizeof(RecordedName), 16);
}

/* The columns of a record's tokens as r's, in relmap_cxt. */
static void
record_columns(RecordedName *r, const char *published)
{
	MemoryContext old = MemoryContextSwitchTo(relmap_cxt);

	r->ncols = ash_publication_record_columns(published, &r->names, &r->types, &r->typmods);
	MemoryContextSwitchTo(old);
}

void
ash_relmap_note_recorded(uint32 oid, const char *nspname, const char *relname,
						 XLogRecPtr read_at, const char *published, bool typed)
{
	RecordedName *r = hash_search(recorded_names, &oid, HASH_ENTER, NULL);

	strlcpy(r->nspname, nspname, NAMEDATALEN);
	strlcpy(r->relname, relname, NAMEDATALEN);
	r->read_at = read_at;
	r->typed = typed;
	r->ncols = 0;
	if (published != NULL)
		record_columns(r, published);
}

static void
release_target(AshApplyTarget *t)
{
	if (t == NULL)
		return;
	if (release_hook && t->plans)
		release_hook(t);
	t->plans = NULL;
}

static void
release_resolution(AshApplyRel *rel)
{
	ListCell   *lc;

	release_target(rel->target_default);
	foreach(lc, rel->tenant_targets)
		release_target(lfirst(lc));
	rel->target_default = NULL;
	rel->tenant_targets = NIL;
	rel->tenant_mode = ASH_TENANT_NONE;
	rel->tenant_col = -1;
	rel->tenant_remote_idx = -1;
	rel->resolved = false;
	rel->columns_recorded = false;
	rel->ignored = false;
	rel->map = NULL;
	rel->cols = NULL;
	rel->keys = NULL;
	rel->textconv = NULL;
	rel->ncols = rel->nkeys = 0;
	rel->spec = NULL;
	rel->sink = NULL;
	if (rel->cxt)
		MemoryContextReset(rel->cxt);
}

/* Replace n columns' names, types and modifiers by copies in the current context. */
static void
copy_columns(int n, char ***names, uint32 **types, int32 **typmods)
{
	char	  **nn = palloc(sizeof(char *) * n);
	uint32	   *nt = palloc(sizeof(uint32) * n);
	int32	   *nm = palloc(sizeof(int32) * n);

	for (int i = 0; i < n; i++)
	{
		nn[i] = pstrdup((*names)[i]);
		nt[i] = (*types)[i];
		nm[i] = (*typmods)[i];
	}
	*names = nn;
	*types = nt;
	*typmods = nm;
}

/*
 * The description rel was resolved with becomes the baseline its next
 * description is judged against (judge_schema_change), in the current
 * memory context.
 */
static void
keep_baseline(AshApplyRel *rel)
{
	rel->prev_xid = rel->desc_xid;
	rel->prev_natts = rel->remote.natts;
	rel->prev_names = palloc(sizeof(char *) * Max(rel->remote.natts, 1));
	rel->prev_types = palloc(sizeof(uint32) * Max(rel->remote.natts, 1));
	rel->prev_typmods = palloc(sizeof(int32) * Max(rel->remote.natts, 1));
	for (int i = 0; i < rel->remote.natts; i++)
	{
		rel->prev_names[i] = pstrdup(rel->remote.cols[i].name);
		rel->prev_types[i] = rel->remote.cols[i].type_oid;
		rel->prev_typmods[i] = rel->remote.cols[i].typmod;
	}
}

/*
 * Drop every resolution; keep_baselines: the targets changed (a census
 * admitted a column added or widened) or the destination rolled back what
 * it resolved (a streamed transaction the source aborted), the source's
 * committed descriptions did not, so each stays the baseline of the next
 * one.  Dropped with the resolution, a column the source dropped since
 * went unjudged (the next description was compared with nothing), and the
 * mirror applied on.  A description that came in a streamed transaction
 * not committed may hold its DDL: no baseline.
 */
static void
invalidate(bool keep_baselines)
{
	HTAB	   *maps[2] = {relmap, chunk_relmap};

	for (int m = 0; m < lengthof(maps); m++)
	{
		HASH_SEQ_STATUS seq;
		AshApplyRel *rel;

		if (maps[m] == NULL)
			continue;
		hash_seq_init(&seq, maps[m]);
		while ((rel = hash_seq_search(&seq)) != NULL)
		{
			if (keep_baselines && rel->resolved && !rel->ignored && rel->desc_cxt != NULL &&
				!rel->desc_aborted && !TransactionIdIsValid(rel->desc_xid))
			{
				MemoryContext old = MemoryContextSwitchTo(rel->desc_cxt);

				keep_baseline(rel);
				MemoryContextSwitchTo(old);
			}
			release_resolution(rel);
		}
	}
}

void
ash_relmap_invalidate_resolutions(void)
{
	invalidate(true);
}

void
ash_relmap_stream_ended(TransactionId xid, bool committed)
{
	HASH_SEQ_STATUS seq;
	AshApplyRel *rel;

	if (relmap == NULL || !TransactionIdIsValid(xid))
		return;
	hash_seq_init(&seq, relmap);
	while ((rel = hash_seq_search(&seq)) != NULL)
	{
		if (rel->desc_xid != xid)
			continue;
		rel->desc_xid = InvalidTransactionId;
		rel->desc_aborted = !committed;
		/* rolled back: the next description is judged by the committed one */
		if (!committed && rel->stream_base_natts > 0 && rel->prev_natts == 0)
		{
			rel->prev_xid = InvalidTransactionId;
			rel->prev_natts = rel->stream_base_natts;
			rel->prev_names = rel->stream_base_names;
			rel->prev_types = rel->stream_base_types;
			rel->prev_typmods = rel->stream_base_typmods;
		}
		rel->stream_base_natts = 0;
		rel->stream_base_names = NULL;
		rel->stream_base_types = NULL;
		rel->stream_base_typmods = NULL;
	}
}

void
ash_relmap_invalidate_all(void)
{
	invalidate(false);
}

void
ash_relmap_update_type(uint32 type_oid, const char *nspname, const char *typname)
{
	RemoteType *t;
	bool		found;

	t = hash_search(remote_types, &type_oid, HASH_ENTER, &found);
	strlcpy(t->nspname, nspname, NAMEDATALEN);
	strlcpy(t->typname, typname, NAMEDATALEN);
}

/*
 * A mapped relation described again under another name was renamed.  A
 * mapping names its source table, so the table now feeds whatever mapping
 * its new name finds: another mapping's target (two tables swapping names
 * would each write into the other's mirror) or none, as an ignored table
 * (its changes dropped).  The mapping's own name now holds another table,
 * or none: replaced under its name (docs/reasons.md#publication_gap).  A
 * new name neither mapped nor ignored halts source_table_unmapped when the
 * relation is resolved.
 */
static void
judge_rename(const char *nspname, const char *relname, const AshRelation *in)
{
	if (relname == NULL ||
		(strcmp(nspname, in->nspname) == 0 && strcmp(relname, in->relname) == 0) ||
		ash_config_find_mapping(relmap_cfg, nspname, relname) == NULL)
		return;
	if (ash_config_find_mapping(relmap_cfg, in->nspname, in->relname) == NULL &&
		!ash_config_is_ignored(relmap_cfg, in->nspname, in->relname))
		return;
	ash_halt("publication_gap", "mapped table %s was renamed to %s, a name the pipeline %s",
			 quote_qualified_identifier(nspname, relname),
			 quote_qualified_identifier(in->nspname, in->relname),
			 ash_config_is_ignored(relmap_cfg, in->nspname, in->relname) ? "ignores" : "maps to another target");
}

/*
 * A table the session describes for the first time is judged against the
 * name the records hold its OID under: the session has no earlier name of
 * its own to compare (it started, or the tables swapped names while it was
 * stopped and back again, which leaves every name on its recorded OID at
 * the start while the changes in between carry the swapped names).  Only
 * in a transaction that committed after the record was read (at: its
 * commit position): one from before may show a name the table had before
 * a rename the operator accepted (an acknowledged gap's records are read
 * anew).  A later one that shows another name saw a rename made after the
 * read: a transaction that writes a table holds a lock that keeps renames
 * of it out until it commits, so the name it shows is the name the table
 * had when it committed.
 */
static RecordedName *
judge_recorded_name(const AshRelation *in, XLogRecPtr at)
{
	RecordedName *r;

	if (XLogRecPtrIsInvalid(at))
		return NULL;
	r = hash_search(recorded_names, &in->relid, HASH_FIND, NULL);
	if (r == NULL || at < r->read_at)
		return NULL;
	judge_rename(r->nspname, r->relname, in);
	if (strcmp(r->nspname, in->nspname) != 0 || strcmp(r->relname, in->relname) != 0)
		return NULL;
	return r;
}

/*
 * The record's columns become the baseline of the session's first
 * description of its table, as the previous description's would: a mapped
 * column retyped since the record was read in a way that rewrote its rows
 * halts source_type_invalid, one dropped since source_column_missing, at
 * the table's first change (judge_schema_change) -- not only at the next
 * census, or never with the census off.  In the current memory context.
 */
static void
seed_baseline(AshApplyRel *rel, const RecordedName *r)
{
	rel->prev_xid = InvalidTransactionId;
	rel->prev_natts = r->ncols;
	rel->prev_names = palloc(sizeof(char *) * Max(r->ncols, 1));
	rel->prev_types = palloc(sizeof(uint32) * Max(r->ncols, 1));
	rel->prev_typmods = palloc(sizeof(int32) * Max(r->ncols, 1));
	for (int i = 0; i < r->ncols; i++)
	{
		rel->prev_names[i] = pstrdup(r->names[i]);
		rel->prev_types[i] = r->types[i];
		rel->prev_typmods[i] = r->typmods[i];
	}
}

/*
 * The columns a description of a table with no record of the columns
 * feeding its target yet judges a column added by (source_columns.c), in
 * the current memory context: the previous description's when the source
 * committed it (wal2json describes a table from the catalog at the
 * session's start, before any change; one that came in a streamed
 * transaction rolled back, or still open, may hold DDL that never
 * committed: the earlier committed baseline carries over), else the
 * record's (the session's first description, judged only in a transaction
 * that committed after the record was read: a column added before is in
 * the record, one from a transaction older than the record may have been
 * dropped since).
 */
static void
note_columns_before(AshApplyRel *rel, bool found, const RecordedName *recorded)
{
	int			n = 0;
	char	  **names = NULL;
	bool		known = false;

	if (found && !TransactionIdIsValid(rel->desc_xid) && !rel->desc_aborted)
	{
		known = true;
		n = rel->remote.natts;
		names = palloc(sizeof(char *) * Max(n, 1));
		for (int i = 0; i < n; i++)
			names[i] = pstrdup(rel->remote.cols[i].name);
	}
	else if (found && rel->before_known)
	{
		known = true;
		n = rel->before_natts;
		names = palloc(sizeof(char *) * Max(n, 1));
		for (int i = 0; i < n; i++)
			names[i] = pstrdup(rel->before_names[i]);
	}
	else if (!found && recorded != NULL && recorded->ncols > 0)
	{
		known = true;
		n = recorded->ncols;
		names = palloc(sizeof(char *) * n);
		for (int i = 0; i < n; i++)
			names[i] = pstrdup(recorded->names[i]);
	}
	rel->before_known = known;
	rel->before_natts = n;
	rel->before_names = names;
}

/* A description into map: the stream's relations or the chunks' */
static void
update_relation(HTAB *map, const AshRelation *in, TransactionId stream_xid, XLogRecPtr at)
{
	AshApplyRel *rel;
	bool		found;
	MemoryContext old;
	MemoryContext desc_cxt;

	RecordedName *recorded = NULL;

	rel = hash_search(map, &in->relid, HASH_FIND, &found);
	if (!found)
		recorded = judge_recorded_name(in, at);
	rel = hash_search(map, &in->relid, HASH_ENTER, &found);
	if (!found)
	{
		memset(((char *) rel) + sizeof(uint32), 0, sizeof(AshApplyRel) - sizeof(uint32));
		rel->cxt = AllocSetContextCreate(relmap_cxt, "ash_replicant remote relation",
										 ALLOCSET_SMALL_SIZES);
	}

	/* each description lives in its own context, replaced as a whole */
	desc_cxt = AllocSetContextCreate(relmap_cxt, "ash_replicant relation description",
									 ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(desc_cxt);

	/* before the previous description goes */
	note_columns_before(rel, found, recorded);
	if (found)
	{
		judge_rename(rel->remote.nspname, rel->remote.relname, in);

		/* keep what it was resolved with, to judge the change */
		if (rel->resolved && !rel->ignored && !rel->desc_aborted)
			keep_baseline(rel);
		else if (rel->prev_natts > 0)
			/* not judged yet: carry the earlier baseline over */
			copy_columns(rel->prev_natts, &rel->prev_names, &rel->prev_types,
						 &rel->prev_typmods);
		/* kept aside for the open stream: into the new context too */
		if (rel->stream_base_natts > 0)
			copy_columns(rel->stream_base_natts, &rel->stream_base_names,
						 &rel->stream_base_types, &rel->stream_base_typmods);
		release_resolution(rel);
	}
	else if (recorded != NULL && recorded->typed && recorded->ncols > 0)
		seed_baseline(rel, recorded);

	rel->desc_xid = stream_xid;
	rel->desc_aborted = false;
	rel->remote.relid = in->relid;
	rel->remote.nspname = pstrdup(in->nspname);
	rel->remote.relname = pstrdup(in->relname);
	rel->remote.replident = in->replident;
	rel->remote.natts = in->natts;
	rel->remote.cols = palloc0(sizeof(AshRelColumn) * Max(in->natts, 1));
	for (int i = 0; i < in->natts; i++)
	{
		rel->remote.cols[i] = in->cols[i];
		rel->remote.cols[i].name = pstrdup(in->cols[i].name);
	}
	MemoryContextSwitchTo(old);
	if (rel->desc_cxt)
		MemoryContextDelete(rel->desc_cxt);
	rel->desc_cxt = desc_cxt;
}

void
ash_relmap_update_relation(const AshRelation *in, TransactionId stream_xid, XLogRecPtr at)
{
	update_relation(relmap, in, stream_xid, at);
}

void
ash_relmap_update_chunk_relation(const AshRelation *in)
{
	update_relation(chunk_relmap, in, InvalidTransactionId, InvalidXLogRecPtr);
}

AshApplyRel *
ash_relmap_get(uint32 relid, bool chunk)
{
	AshApplyRel *rel = hash_search(chunk ? chunk_relmap : relmap, &relid, HASH_FIND, NULL);

	if (rel == NULL)
		ash_halt("protocol_violation", "change for a relation the source never described");
	return rel;
}

/*
 * The name a Type message gave a user type of the source (coverage.c knows
 * a user type by its name only); NULL for a built-in or undescribed type.
 */
static char *
remote_type_name(uint32 remote_oid)
{
	RemoteType *rt = NULL;

	if (remote_oid >= FirstGenbkiObjectId)
		rt = hash_search(remote_types, &remote_oid, HASH_FIND, NULL);
	return rt ? rt->typname : NULL;
}

/* Judge a re-described relation against what it was resolved with. */
static void
judge_schema_change(AshApplyRel *rel)
{
	AshMapping *map = rel->map;
	StringInfoData dropped;

	initStringInfo(&dropped);
	for (int p = 0; p < rel->prev_natts; p++)
	{
		bool		still = false;

		for (int i = 0; i < rel->remote.natts; i++)
		{
			if (strcmp(rel->remote.cols[i].name, rel->prev_names[p]) == 0)
			{
				still = true;
				if (!ash_coverage_retype_keeps_values(rel->prev_types[p], rel->prev_typmods[p],
													  rel->remote.cols[i].type_oid,
													  rel->remote.cols[i].typmod))
					ash_halt("source_type_invalid",
							 "table %s.%s column %s changed type%s (its rows were rewritten under it)",
							 quote_identifier(rel->remote.nspname),
							 quote_identifier(rel->remote.relname),
							 quote_identifier(rel->prev_names[p]),
							 rel->remote.cols[i].type_oid == rel->prev_types[p] ? " modifier" : "");
				break;
			}
		}
		if (!still && ash_mapping_target_column(map, rel->prev_names[p]) != NULL)
			ash_append_name_list(&dropped, rel->prev_names[p]);
	}
	if (dropped.len > 0 && strcmp(map->on_schema_change, "ignore") != 0)
		ash_halt("source_column_missing", "table %s.%s dropped mapped columns: %s",
				 quote_identifier(rel->remote.nspname),
				 quote_identifier(rel->remote.relname), dropped.data);
	pfree(dropped.data);

	/*
	 * Judged: the baseline goes (a roll-back keeps a new one each time,
	 * until the next description replaces the context it lives in) -- but
	 * the committed one a description of an open streamed transaction was
	 * judged against is kept aside until that transaction ends.  One that
	 * came in that transaction itself (the table described twice in it) is
	 * not committed: the source may roll it back.
	 */
	if (TransactionIdIsValid(rel->desc_xid) && rel->stream_base_natts == 0 &&
		!TransactionIdIsValid(rel->prev_xid))
	{
		rel->stream_base_natts = rel->prev_natts;
		rel->stream_base_names = rel->prev_names;
		rel->stream_base_types = rel->prev_types;
		rel->stream_base_typmods = rel->prev_typmods;
	}
	else
	{
		for (int p = 0; p < rel->prev_natts; p++)
			pfree(rel->prev_names[p]);
		pfree(rel->prev_names);
		pfree(rel->prev_types);
		pfree(rel->prev_typmods);
	}
	rel->prev_names = NULL;
	rel->prev_types = NULL;
	rel->prev_typmods = NULL;
	rel->prev_natts = 0;
	rel->prev_xid = InvalidTransactionId;
}

static bool
is_scd2(AshMapping *map)
{
	return map->history_strategy != NULL && strcmp(map->history_strategy, "scd2") == 0;
}

/*
 * Step 3: judge the relation as the source described it with coverage.c's
 * rules, the judgement of activation, census and doctor; halts with its
 * verdict.  The caller holds target open (or NULL); it is closed before a
 * halt.
 */
static void
judge_coverage(AshApplyRel *rel, AshMapping *map, Relation target)
{
	AshSourceTable src;
	AshCoverageVerdict verdict;

	memset(&src, 0, sizeof(src));
	src.nspname = rel->remote.nspname;
	src.relname = rel->remote.relname;
	src.replident = rel->remote.replident;
	src.natts = rel->remote.natts;
	src.cols = palloc0(sizeof(AshSourceColumn) * Max(rel->remote.natts, 1));
	for (int i = 0; i < rel->remote.natts; i++)
	{
		src.cols[i].name = rel->remote.cols[i].name;
		src.cols[i].type_oid = rel->remote.cols[i].type_oid;
		src.cols[i].type_name = remote_type_name(rel->remote.cols[i].type_oid);
		src.cols[i].in_identity = rel->remote.cols[i].is_key;
		src.cols[i].typmod = rel->remote.cols[i].typmod;
	}
	if (!ash_coverage_judge_table(map, is_scd2(map) ? map->history_business_key : NIL,
								  &src, &verdict))
	{
		if (target != NULL)
			table_close(target, RowExclusiveLock);
		ash_halt(verdict.reason, "%s", verdict.context);
	}
}

static void
refuse_unsupported(AshApplyRel *rel, AshMapping *map)
{
	const char *what = NULL;

	if (map->history_strategy && strcmp(map->history_strategy, "scd1") != 0 && !is_scd2(map))
		what = "history_strategy";

	if (what)
		ash_halt("mapping_unsupported", "table %s: %s is not supported by this apply path yet",
				 rel->target_name, what);
}

/*
 * Is a target column one the strategy writes itself (SCD2 window/current
 * columns, append-log structural columns)?  A source column landing on one
 * would be ambiguous: delivery_config_invalid.
 */
static bool
is_structural_column(AshMapping *map, const char *tname)
{
	if (map->append_log)
	{
		for (int i = 0; i < ASH_APPEND_COL_COUNT; i++)
			if (map->append_columns[i] && strcmp(map->append_columns[i], tname) == 0)
				return true;
	}
	if (is_scd2(map))
	{
		const char *h[5] = {map->history_valid_from_lsn_column, map->history_valid_to_lsn_column,
			map->history_valid_from_ts_column, map->history_valid_to_ts_column,
		map->history_current_column};

		for (int i = 0; i < 5; i++)
			if (h[i] && strcmp(h[i], tname) == 0)
				return true;
	}
	return false;
}

/*
 * SCD2: the identity of a change is the business key (source columns); the
 * target's primary key is a surrogate no source column may write.  (That
 * the replica identity carries the business key is coverage.c's rule.)
 */
static void
resolve_history_identity(AshApplyRel *rel, AshMapping *map, List *pk_attnums)
{
	ListCell   *lc;
	MemoryContext old = MemoryContextSwitchTo(rel->cxt);

	rel->keys = palloc(sizeof(int) * Max(list_length(map->history_business_key), 1));
	rel->nkeys = 0;
	MemoryContextSwitchTo(old);
	foreach(lc, map->history_business_key)
	{
		const char *bk = lfirst(lc);
		int			found = -1;

		for (int c = 0; c < rel->ncols && found < 0; c++)
			if (strcmp(rel->remote.cols[rel->cols[c].remote_idx].name, bk) == 0)
				found = c;
		/* coverage saw it sent, the mapping never skips it */
		if (found < 0)
			elog(ERROR, "ash_replicant: a business key column of %s is not written",
				 rel->target_name);
		rel->cols[found].is_identity = true;
		rel->keys[rel->nkeys++] = found;
	}
	for (int c = 0; c < rel->ncols; c++)
	{
		if (list_member_int(pk_attnums, rel->cols[c].attnum))
			ash_halt("delivery_config_invalid",
					 "source column %s of %s.%s lands on the surrogate key of %s",
					 quote_identifier(rel->remote.cols[rel->cols[c].remote_idx].name),
					 quote_identifier(rel->remote.nspname),
					 quote_identifier(rel->remote.relname), rel->target_name);
	}
}

/*
 * Is a source column's type boolean?  A domain over boolean too: its Type
 * message (pgoutput's, or the one the other decoders' descriptions make)
 * carries the base type's name, and its false is no more a tenant than a
 * plain boolean's.
 */
static bool
remote_is_bool(uint32 type_oid)
{
	RemoteType *rt;

	if (type_oid == BOOLOID)
		return true;
	if (type_oid < FirstGenbkiObjectId)
		return false;
	rt = hash_search(remote_types, &type_oid, HASH_FIND, NULL);
	return rt != NULL && strcmp(rt->typname, "bool") == 0 &&
		(rt->nspname[0] == '\0' || strcmp(rt->nspname, "pg_catalog") == 0);
}

/*
 * Step 6: the tenant source column and, under the attribute strategy, the
 * column it is written to.
 */
static void
resolve_tenancy(AshApplyRel *rel, AshMapping *map)
{
	if (map->tenant_strategy == NULL)
		return;
	rel->tenant_mode = strcmp(map->tenant_strategy, "context") == 0 ?
		ASH_TENANT_CONTEXT : ASH_TENANT_ATTRIBUTE;

	/* coverage.c saw the tenant column sent and REPLICA IDENTITY FULL */
	if (map->tenant_column != NULL)
	{
		for (int i = 0; i < rel->remote.natts; i++)
		{
			if (strcmp(rel->remote.cols[i].name, map->tenant_column) == 0)
			{
				rel->tenant_remote_idx = i;
				rel->tenant_is_bool = remote_is_bool(rel->remote.cols[i].type_oid);
				break;
			}
		}
		if (rel->tenant_remote_idx < 0)
			elog(ERROR, "ash_replicant: the tenant column of %s is not sent", rel->target_name);
	}

	if (rel->tenant_mode == ASH_TENANT_ATTRIBUTE)
	{
		for (int c = 0; c < rel->ncols; c++)
		{
			if (rel->cols[c].remote_idx == rel->tenant_remote_idx)
				rel->tenant_col = c;
		}
		if (rel->tenant_col < 0)
			ash_halt("tenant_attribute_invalid", "the tenant column of %s is not written",
					 rel->target_name);
	}
}

/*
 * Can format(format, tenant) be nspname for some tenant?  The format holds
 * exactly one %s (registration); a tenant that gets this far is not blank,
 * so it stands for at least one character.
 */
static bool
format_produces(const char *format, const char *nspname)
{
	const char *fmt = format ? format : "%s";
	const char *p = strstr(fmt, "%s");
	size_t		plen;
	size_t		slen;
	size_t		len = strlen(nspname);

	if (p == NULL)
		return strcmp(fmt, nspname) == 0;
	plen = p - fmt;
	slen = strlen(p + 2);
	return len > plen + slen &&
		strncmp(nspname, fmt, plen) == 0 &&
		strcmp(nspname + len - slen, p + 2) == 0;
}

static char *
resource_text(HeapTuple tup, TupleDesc desc, AttrNumber att)
{
	bool		isnull;
	Datum		d = heap_getattr(tup, att, desc, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/*
 * Which mapping besides template's may write relid, the table of its
 * tenant in schema nspname?  "target": relid is the target of a mapping
 * (of any sink), another source table's mirror.  "tenant": another
 * context mapping (of any sink) whose template has relid's name could
 * resolve a tenant of its own to relid: two source tables' rows would meet
 * there under one key, each one's writes landing on the other's rows.
 * NULL: none.  Sinks mapping this very template share its tenant tables by
 * design (their tenant_scope_functions keep them apart).  Read past the
 * catalog's row security: the caller may be acting as the sink owner.
 */
static const char *
tenant_table_claimed(Oid template, Oid relid, const char *nspname)
{
	Oid			nsp = get_namespace_oid("ash_replicant", false);
	Relation	resources = table_open(get_relname_relid("resources", nsp), AccessShareLock);
	TupleDesc	desc = RelationGetDescr(resources);
	AttrNumber	att = get_attnum(RelationGetRelid(resources), "target");
	AttrNumber	strategy_att = get_attnum(RelationGetRelid(resources), "tenant_strategy");
	AttrNumber	format_att = get_attnum(RelationGetRelid(resources), "tenant_schema_format");
	char	   *relname = get_rel_name(relid);
	SysScanDesc scan = systable_beginscan(resources, InvalidOid, false, NULL, 0, NULL);
	HeapTuple	tup;
	const char *claimed = NULL;

	/* a mirror's target outranks a tenant table: read every mapping */
	while ((tup = systable_getnext(scan)) != NULL)
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, att, desc, &isnull);
		Oid			other;
		char	   *strategy;
		char	   *other_name;

		if (isnull)
			continue;
		other = DatumGetObjectId(d);
		if (other == relid)
		{
			claimed = "target";
			break;
		}
		if (other == template || claimed != NULL)
			continue;
		strategy = resource_text(tup, desc, strategy_att);
		if (strategy == NULL || strcmp(strategy, "context") != 0)
			continue;
		other_name = get_rel_name(other);
		if (other_name != NULL && relname != NULL && strcmp(other_name, relname) == 0 &&
			format_produces(resource_text(tup, desc, format_att), nspname))
			claimed = "tenant";
	}
	systable_endscan(scan);
	table_close(resources, AccessShareLock);
	return claimed;
}

/*
 * The table of one tenant under context tenancy: the template's name in
 * schema format(tenant_schema_format, tenant) (*schema set); InvalidOid
 * when it does not exist.  Source data chooses the schema: it must never
 * reach a system schema, the extension's catalogs or the template's own
 * schema, nor a table some mapping mirrors into -- another source table's
 * mirror, whose rows a tenant's would overwrite -- nor a table another
 * context mapping's tenants may resolve to (tenant_scope_invalid, naming
 * template_name, never the tenant).
 */
Oid
ash_tenant_relid(Oid template, const char *template_name, const char *format,
				 const char *tenant, char **schema)
{
	const char *fmt = format ? format : "%s";
	const char *p = strstr(fmt, "%s");
	StringInfoData buf;
	Oid			nspoid;
	Oid			relid;

	/* format(tenant_schema_format, tenant): the format holds exactly one %s */
	initStringInfo(&buf);
	if (p == NULL)
		appendStringInfoString(&buf, fmt);
	else
	{
		appendBinaryStringInfo(&buf, fmt, p - fmt);
		appendStringInfoString(&buf, tenant);
		appendStringInfoString(&buf, p + 2);
	}
	*schema = buf.data;
	nspoid = get_namespace_oid(buf.data, true);
	if (OidIsValid(nspoid) &&
		(IsCatalogNamespace(nspoid) || IsToastNamespace(nspoid) ||
		 isAnyTempNamespace(nspoid) ||
		 strcmp(buf.data, "information_schema") == 0 ||
		 strcmp(buf.data, "ash_replicant") == 0 ||
		 nspoid == get_rel_namespace(template)))
		ash_halt("tenant_scope_invalid", "a row of %s names a schema that is not a tenant scope",
				 template_name);
	relid = OidIsValid(nspoid) ? get_relname_relid(get_rel_name(template), nspoid) : InvalidOid;
	if (OidIsValid(relid))
	{
		const char *claimed = tenant_table_claimed(template, relid, buf.data);

		if (claimed != NULL && strcmp(claimed, "target") == 0)
			ash_halt("tenant_scope_invalid", "a row of %s names a schema whose table is the target of a mapping",
					 template_name);
		if (claimed != NULL)
			ash_halt("tenant_scope_invalid", "a row of %s names a schema whose table another context mapping's tenants may resolve to",
					 template_name);
	}
	return relid;
}

AshApplyTarget *
ash_relmap_tenant_target(AshApplyRel *rel, const char *tenant)
{
	ListCell   *lc;
	AshApplyTarget *t;
	char	   *schema;
	Oid			relid;
	char	   *relname;
	MemoryContext old;
	Relation	r;
	TupleDesc	desc;

	Assert(rel->tenant_mode == ASH_TENANT_CONTEXT);
	foreach(lc, rel->tenant_targets)
	{
		t = lfirst(lc);
		if (strcmp(t->tenant, tenant) == 0)
		{
			/* most recently used first */
			if (foreach_current_index(lc) != 0)
			{
				rel->tenant_targets = foreach_delete_current(rel->tenant_targets, lc);
				rel->tenant_targets = lcons(t, rel->tenant_targets);
			}
			ash_relmap_check_target(rel, t);
			return t;
		}
	}

	relid = ash_tenant_relid(rel->target, rel->target_name, rel->map->tenant_schema_format,
							 tenant, &schema);
	relname = get_rel_name(rel->target);
	/* the tenant names a schema: never print it */
	if (!OidIsValid(relid))
		ash_halt("tenant_scope_missing", "no tenant table for a row of %s", rel->target_name);

	/* same columns, same types as the mapping's target */
	r = table_open(relid, RowExclusiveLock);
	desc = RelationGetDescr(r);
	for (int c = 0; c < rel->ncols; c++)
	{
		bool		ok = false;

		for (int a = 0; a < desc->natts && !ok; a++)
		{
			Form_pg_attribute ta = TupleDescAttr(desc, a);

			ok = !ta->attisdropped && strcmp(NameStr(ta->attname), rel->cols[c].name) == 0 &&
				ta->atttypid == rel->cols[c].typid;
		}
		if (!ok)
		{
			table_close(r, RowExclusiveLock);
			ash_halt("tenant_scope_missing", "a tenant table of %s lacks column %s or its type differs",
					 rel->target_name, quote_identifier(rel->cols[c].name));
		}
	}
	table_close(r, RowExclusiveLock);

	if (list_length(rel->tenant_targets) >= ASH_TENANT_TARGETS_MAX)
	{
		AshApplyTarget *victim = llast(rel->tenant_targets);

		release_target(victim);
		rel->tenant_targets = list_delete_last(rel->tenant_targets);
		MemoryContextDelete(victim->cxt);
	}

	{
		MemoryContext tcxt = AllocSetContextCreate(rel->cxt, "ash_replicant tenant target",
												   ALLOCSET_SMALL_SIZES);

		old = MemoryContextSwitchTo(tcxt);
		t = palloc0(sizeof(AshApplyTarget));
		t->cxt = tcxt;
	}
	t->relid = relid;
	t->name = quote_qualified_identifier(schema, relname);
	t->log_name = pstrdup(rel->target_name);
	t->nspname = pstrdup(schema);
	t->relname = pstrdup(relname);
	t->tenant = pstrdup(tenant);
	MemoryContextSwitchTo(rel->cxt);
	rel->tenant_targets = lcons(t, rel->tenant_targets);
	MemoryContextSwitchTo(old);
	ash_relmap_check_target(rel, t);
	return t;
}

/*
 * Step 1: the mapping of the relation; NULL when it is ignored (the entry
 * is then resolved as such).  A relation neither mapped nor ignored halts.
 */
static AshMapping *
find_mapping(AshApplyRel *rel)
{
	AshMapping *map;

	map = ash_config_find_mapping(relmap_cfg, rel->remote.nspname, rel->remote.relname);
	if (map == NULL)
	{
		if (ash_config_is_ignored(relmap_cfg, rel->remote.nspname, rel->remote.relname))
		{
			rel->ignored = true;
			rel->resolved = true;
			return NULL;
		}
		ash_halt("source_table_unmapped", "table %s.%s",
				 quote_identifier(rel->remote.nspname),
				 quote_identifier(rel->remote.relname));
	}
	return map;
}

/* Open the mapping's target (RowExclusiveLock) and make it the default target. */
static Relation
open_target(AshApplyRel *rel, AshMapping *map)
{
	Relation	target;
	MemoryContext old;

	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(map->target_relid)))
		ash_halt("destination_table_missing", "mapping of %s.%s",
				 quote_identifier(rel->remote.nspname),
				 quote_identifier(rel->remote.relname));

	target = ash_open_target(map->target_relid, RowExclusiveLock, false);

	old = MemoryContextSwitchTo(rel->cxt);
	rel->target = map->target_relid;
	rel->target_name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(target)),
												  RelationGetRelationName(target));
	rel->target_default = palloc0(sizeof(AshApplyTarget));
	rel->target_default->relid = rel->target;
	rel->target_default->name = rel->target_name;
	rel->target_default->log_name = rel->target_name;
	rel->target_default->nspname = get_namespace_name(RelationGetNamespace(target));
	rel->target_default->relname = pstrdup(RelationGetRelationName(target));
	rel->target_default->cxt = rel->cxt;
	rel->tenant_col = -1;
	rel->tenant_remote_idx = -1;
	refuse_unsupported(rel, map);
	MemoryContextSwitchTo(old);
	return target;
}

/*
 * Step 2: a source column must not land on a column the strategy writes,
 * nor on one another source column lands on.
 */
static void
refuse_structural_columns(AshApplyRel *rel, AshMapping *map, Relation target)
{
	for (int i = 0; i < rel->remote.natts; i++)
	{
		AshRelColumn *rc = &rel->remote.cols[i];
		const char *tname = ash_mapping_target_column(map, rc->name);

		if (tname != NULL && is_structural_column(map, tname))
		{
			table_close(target, RowExclusiveLock);
			ash_halt("delivery_config_invalid",
					 "source column %s of %s.%s is named like a structural column of %s",
					 quote_identifier(rc->name), quote_identifier(rel->remote.nspname),
					 quote_identifier(rel->remote.relname), rel->target_name);
		}
		/* a column_map renaming one column onto another's name */
		for (int j = 0; tname != NULL && j < i; j++)
		{
			const char *other = ash_mapping_target_column(map, rel->remote.cols[j].name);

			if (other != NULL && strcmp(other, tname) == 0)
			{
				table_close(target, RowExclusiveLock);
				ash_halt("delivery_config_invalid",
						 "source columns %s and %s of %s.%s both land on column %s of %s",
						 quote_identifier(rel->remote.cols[j].name), quote_identifier(rc->name),
						 quote_identifier(rel->remote.nspname),
						 quote_identifier(rel->remote.relname), quote_identifier(tname),
						 rel->target_name);
			}
		}
	}
}

/* How one mapped column's values are read: input and receive functions. */
static void
resolve_column_io(AshApplyRel *rel, AshTargetCol *tc, Form_pg_attribute att)
{
	Oid			infunc;
	HeapTuple	typtup;
	int32		basemod = att->atttypmod;
	Oid			base = getBaseTypeAndTypmod(att->atttypid, &basemod);

	tc->typid = att->atttypid;
	tc->typmod = att->atttypmod;
	tc->identity_always = att->attidentity == ATTRIBUTE_IDENTITY_ALWAYS;
	tc->maxchars = base == VARCHAROID && basemod >= VARHDRSZ ? basemod - VARHDRSZ : -1;
	tc->elem_maxchars = get_element_type(base) == VARCHAROID && basemod >= VARHDRSZ ?
		basemod - VARHDRSZ : -1;
	tc->widen_float4 = base == FLOAT8OID &&
		rel->remote.cols[tc->remote_idx].type_oid == FLOAT4OID;
	getTypeInputInfo(att->atttypid, &infunc, &tc->ioparam);
	get_typlenbyvalalign(att->atttypid, &tc->typlen, &tc->typbyval, &tc->typalign);
	tc->recvfunc.fn_oid = InvalidOid;
	typtup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(att->atttypid));
	if (HeapTupleIsValid(typtup))
	{
		Form_pg_type typ = (Form_pg_type) GETSTRUCT(typtup);

		if (OidIsValid(typ->typreceive))
		{
			fmgr_info_cxt(typ->typreceive, &tc->recvfunc, rel->cxt);
			tc->recv_ioparam = getTypeIOParam(typtup);
		}
		ReleaseSysCache(typtup);
	}
	fmgr_info_cxt(infunc, &tc->infunc, rel->cxt);
}

/*
 * Step 4: the mapped columns, in remote order.  Coverage vouched that every
 * sent, unskipped column lands on a live target column of a fitting type;
 * an encrypted one needs a bytea target (its text form is sealed into it).
 */
static void
resolve_columns(AshApplyRel *rel, AshMapping *map, Relation target)
{
	TupleDesc	desc = RelationGetDescr(target);
	StringInfoData badtype;
	MemoryContext old = MemoryContextSwitchTo(rel->cxt);
	int			ncols = 0;

	initStringInfo(&badtype);
	rel->cols = palloc0(sizeof(AshTargetCol) * Max(rel->remote.natts, 1));

	for (int i = 0; i < rel->remote.natts; i++)
	{
		AshRelColumn *rc = &rel->remote.cols[i];
		const char *tname = ash_mapping_target_column(map, rc->name);
		AttrNumber	attnum;
		Form_pg_attribute att;
		AshTargetCol *tc;

		if (tname == NULL)
			continue;			/* skipped */
		attnum = InvalidAttrNumber;
		for (int a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute ta = TupleDescAttr(desc, a);

			if (!ta->attisdropped && strcmp(NameStr(ta->attname), tname) == 0)
			{
				attnum = ta->attnum;
				break;
			}
		}
		if (attnum == InvalidAttrNumber)
			elog(ERROR, "ash_replicant: a mapped column of %s vanished", rel->target_name);
		att = TupleDescAttr(desc, attnum - 1);
		/* any source type: its text form is sealed into bytea */
		if (ash_list_contains_str(map->encrypted, rc->name) && att->atttypid != BYTEAOID)
		{
			ash_append_name_list(&badtype, rc->name);
			continue;
		}
		tc = &rel->cols[ncols++];
		tc->encrypt = ash_list_contains_str(map->encrypted, rc->name);
		tc->name = pstrdup(tname);
		tc->attnum = attnum;
		tc->remote_idx = i;
		resolve_column_io(rel, tc, att);
	}
	rel->ncols = ncols;
	MemoryContextSwitchTo(old);

	if (badtype.len > 0)
	{
		table_close(target, RowExclusiveLock);
		ash_halt("source_type_invalid", "table %s.%s columns: %s",
				 quote_identifier(rel->remote.nspname),
				 quote_identifier(rel->remote.relname), badtype.data);
	}
}

/* SCD1: the target's identity (upsert_identity or primary key) columns. */
static void
resolve_mirror_identity(AshApplyRel *rel, List *idattnums)
{
	MemoryContext old = MemoryContextSwitchTo(rel->cxt);
	ListCell   *lc;

	rel->keys = palloc(sizeof(int) * Max(list_length(idattnums), 1));
	rel->nkeys = 0;
	foreach(lc, idattnums)
	{
		AttrNumber	attnum = lfirst_int(lc);
		int			found = -1;

		for (int c = 0; c < rel->ncols; c++)
		{
			if (rel->cols[c].attnum == attnum)
			{
				found = c;
				break;
			}
		}
		/* coverage saw each identity column fed from the old key */
		if (found < 0)
			elog(ERROR, "ash_replicant: an identity column of %s is not written",
				 rel->target_name);
		rel->cols[found].is_identity = true;
		rel->keys[rel->nkeys++] = found;
	}
	MemoryContextSwitchTo(old);
}

/*
 * Step 5: the identity of a change, by strategy; closes the target.  An
 * append log has none (its events have no source identity; every old row
 * is full); SCD2 takes the business key; SCD1 the target's identity.
 */
static void
resolve_identity(AshApplyRel *rel, AshMapping *map, Relation target)
{
	List	   *idattnums;

	if (map->append_log)
	{
		table_close(target, RowExclusiveLock);
		rel->nkeys = 0;
	}
	else if (is_scd2(map))
	{
		AshMapping	pkonly = *map;

		pkonly.upsert_identity = NULL;
		idattnums = ash_target_identity_attnums(target, &pkonly);
		table_close(target, RowExclusiveLock);
		resolve_history_identity(rel, map, idattnums);
	}
	else
	{
		idattnums = ash_target_identity_attnums(target, map);
		table_close(target, RowExclusiveLock);
		if (idattnums == NIL)
			elog(ERROR, "ash_replicant: the identity of %s vanished", rel->target_name);
		resolve_mirror_identity(rel, idattnums);
	}
}

void
ash_relmap_resolve(AshApplyRel *rel)
{
	AshMapping *map;
	Relation	target;

	if (rel->resolved)
		return;

	map = find_mapping(rel);
	if (map == NULL)
		return;					/* ignored */
	rel->map = map;
	if (rel->prev_natts > 0)
		judge_schema_change(rel);

	/*
	 * Resolved again with no new description since the source rolled back
	 * the transaction it came in: that transaction changed no catalog (its
	 * invalidations, executed at the abort, would have made the source
	 * describe the table anew), so the description is the committed one.
	 */
	rel->desc_aborted = false;

	target = open_target(rel, map);
	refuse_structural_columns(rel, map, target);
	judge_coverage(rel, map, target);
	resolve_columns(rel, map, target);
	resolve_identity(rel, map, target);
	resolve_tenancy(rel, map);
	rel->resolved = true;
}

/*
 * What a judgment depends on changes only with an invalidation: the
 * table's triggers, rules, row security, indexes, columns, name and
 * kind with one of its relcache entry; the name of its schema with a
 * pg_namespace one.  Any of them moves the epoch (judging again costs a
 * few catalog-cache lookups; judging every batch cost a one-row batch
 * about as much as its row's index insertion).
 */
static uint64 judge_epoch = 1;
static bool judge_callbacks = false;

static void
judge_relcache_changed(Datum arg, Oid relid)
{
	judge_epoch++;
}

static void
judge_syscache_changed(Datum arg, int cacheid, uint32 hashvalue)
{
	judge_epoch++;
}

uint64
ash_relmap_target_epoch(Oid relid)
{
	if (!judge_callbacks)
	{
		CacheRegisterRelcacheCallback(judge_relcache_changed, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, judge_syscache_changed, (Datum) 0);
		judge_callbacks = true;
	}
	/* a lock not yet held in this transaction processes the invalidations */
	LockRelationOid(relid, RowExclusiveLock);
	return judge_epoch;
}

static int
name_cmp(const ListCell *a, const ListCell *b)
{
	return strcmp(lfirst(a), lfirst(b));
}

/* The column names of an identity (attnums of relid), as a sorted list */
static List *
identity_names(Oid relid, List *attnums)
{
	List	   *names = NIL;
	ListCell   *lc;

	foreach(lc, attnums)
		names = lappend(names, get_attname(relid, (AttrNumber) lfirst_int(lc), false));
	list_sort(names, name_cmp);
	return names;
}

/*
 * A tenant's table is written with its template's identity (the upsert's
 * conflict target, the key of every update and delete), which coverage
 * judged against the keys the source keeps unique.  A tenant table keyed
 * by other columns cannot arbitrate that upsert (42P10 at the first write
 * needing it) or lets two source rows meet: halt census_drift before any
 * write, as for a tenant table that fails registration's rules.
 */
static void
judge_tenant_identity(AshApplyRel *rel, AshApplyTarget *t)
{
	AshMapping	m = *rel->map;
	Relation	template;
	Relation	tenant;
	List	   *want;
	List	   *have;
	bool		same;

	if (m.append_log)
		return;
	/* SCD2: the business key is the template's; its primary key compared */
	if (is_scd2(&m))
		m.upsert_identity = NULL;
	template = table_open(rel->target, AccessShareLock);
	tenant = table_open(t->relid, AccessShareLock);
	want = identity_names(rel->target, ash_target_identity_attnums(template, &m));
	have = identity_names(t->relid, ash_target_identity_attnums(tenant, &m));
	table_close(tenant, AccessShareLock);
	table_close(template, AccessShareLock);
	same = list_length(want) == list_length(have);
	for (int i = 0; same && i < list_length(want); i++)
		same = strcmp(list_nth(want, i), list_nth(have, i)) == 0;
	if (!same)
		ash_halt("census_drift", "a tenant table of %s is not keyed by its template's identity",
				 t->log_name);
}

/*
 * Registration judged the target once; DDL since may have made it one that
 * registration refuses, and some such targets take the writes without an
 * error and keep something else (a key compared case-blind, a trigger or
 * rule that drops rows), or a column retyped to one that rounds what the
 * source sends (coverage.c: a census would halt, after the writes).  Any
 * change to a table's definition comes with a relcache invalidation, which
 * moves ash_relmap_target_epoch; the lock taken there (the one the writes
 * take) keeps the definition until the transaction ends.  So judging again
 * when the epoch moved is exact, and costs a few cache lookups only after
 * some invalidation.
 */
/*
 * The statements name the target: renamed (or its schema), that name is
 * another table or none, and what a judgement passed is not what would be
 * written.
 */
static void
judge_target_name(AshApplyTarget *t)
{
	char	   *relname = get_rel_name(t->relid);
	Oid			nsp = get_rel_namespace(t->relid);
	char	   *nspname = OidIsValid(nsp) ? get_namespace_name(nsp) : NULL;

	if (relname == NULL || nspname == NULL ||
		strcmp(relname, t->relname) != 0 || strcmp(nspname, t->nspname) != 0)
	{
		/* a tenant's table: its schema is a value, never printed */
		if (t->tenant != NULL)
			ash_halt("tenant_scope_missing", "a tenant table of %s was renamed", t->log_name);
		ash_halt("census_drift", "the target %s was renamed: its name stands for another table, or none",
				 t->log_name);
	}
}

/*
 * Has t's definition possibly changed since it was last judged?  Once per
 * transaction; *epoch is what to record once it is judged again.
 */
static bool
target_needs_judging(AshApplyTarget *t, uint64 *epoch)
{
	if (t->checked_lxid == MyProc->lxid)
		return false;
	*epoch = ash_relmap_target_epoch(t->relid);
	t->checked_lxid = MyProc->lxid;
	return t->checked_epoch != *epoch;
}

/* The registration of map (read-only SPI under the active snapshot). */
static void
load_registration(AshMapping *map, MemoryContext cxt, const char *what,
				  AshMappingSpec **spec, AshMappingSink **sink)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	bool		snap = !ActiveSnapshotSet();

	if (snap)
		PushActiveSnapshot(GetTransactionSnapshot());
	*spec = ash_mapping_load(map->resource_id);
	*sink = ash_mapping_sink_load(relmap_cfg->sink_name, true, false);
	if (snap)
		PopActiveSnapshot();
	MemoryContextSwitchTo(old);
	if (*spec == NULL || *sink == NULL)
		ash_halt("census_drift", "the mapping of %s is no longer registered", what);
}

void
ash_relmap_check_target(AshApplyRel *rel, AshApplyTarget *t)
{
	uint64		epoch;

	if (!target_needs_judging(t, &epoch))
		return;
	if (rel->spec == NULL)
		load_registration(rel->map, rel->cxt,
						  psprintf("%s.%s", quote_identifier(rel->remote.nspname),
								   quote_identifier(rel->remote.relname)),
						  &rel->spec, &rel->sink);
	/* registration's rules, then the columns as coverage judges them */
	if (t->relid == rel->spec->target)
	{
		ash_mapping_recheck(rel->spec, rel->sink, false);
		judge_coverage(rel, rel->map, NULL);
	}
	else
	{
		/* a tenant's table, judged as the template was */
		AshMappingSpec tenant = *rel->spec;
		AshMapping tmap = *rel->map;

		tenant.target = t->relid;
		ash_mapping_recheck(&tenant, rel->sink, true);
		tmap.target_relid = t->relid;
		judge_coverage(rel, &tmap, NULL);
		judge_tenant_identity(rel, t);
	}
	judge_target_name(t);
	t->checked_epoch = epoch;
}

/*
 * A message event goes through the same guard as a row event's target,
 * less the columns coverage judges against a source description (a
 * message has none; it writes the structural columns, which registration's
 * rules cover).
 */
void
ash_relmap_check_event_target(AshMapping *map, AshApplyTarget *t)
{
	uint64		epoch;
	AshMappingSpec *spec;
	AshMappingSink *sink;

	if (!target_needs_judging(t, &epoch))
		return;
	/* read again after an invalidation only: no need to keep it */
	load_registration(map, CurrentMemoryContext, t->log_name, &spec, &sink);
	ash_mapping_recheck(spec, sink, false);
	judge_target_name(t);
	t->checked_epoch = epoch;
}
