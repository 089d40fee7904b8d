/*-------------------------------------------------------------------------
 *
 * apply.c
 *	  The transaction driver: decoded changes -> destination transactions.
 *
 * NOTES
 *	  Effect-once rests on three rules enforced here:
 *
 *	  1. A source transaction whose commit LSN is at or below the watermark
 *		 (durable, or already part of the open batch) is skipped whole: its
 *		 Begin carries the commit LSN (final_lsn), so we know before the
 *		 first change.
 *	  2. The rows of a source transaction and the checkpoint row that
 *		 advances the watermark past it commit in the SAME destination
 *		 transaction.  Several source transactions may share one
 *		 destination transaction (a batch); the checkpoint is written once,
 *		 at the end, with the last commit LSN of the batch.
 *	  3. Any error rolls back the whole destination transaction; nothing of
 *		 it is visible and the checkpoint is unchanged.  The caller decides
 *		 whether to retry (reconnect and re-stream from the watermark) or
 *		 halt.
 *
 *	  The caller (pipeline.c) decides when to close a batch: when the batch
 *	  is full (batch_max_transactions) or when no further message is already
 *	  received — so batching adds no latency.  It reports the batch's remote
 *	  end LSN as flushed only after our commit record is flushed locally.
 *
 *	  Rows are written as the sink owner (SetUserIdAndSecContext), so grants
 *	  and triggers apply as for any ordinary write by that role; the
 *	  checkpoint is written as the extension owner.  Each change is
 *	  converted in a per-change memory context reset after the change.
 *
 *	  Strategies (SCD1 apply_scd1.c, SCD2 apply_scd2.c, append log
 *	  apply_append.c) only see mapped, resolved relations and row images;
 *	  they never see protocol records.  Logical messages go to messages.c
 *	  (state mirrors) or apply_append.c (append logs).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/catalog.h"
#include "catalog/pg_type.h"
#include "commands/portalcmds.h"
#include "commands/trigger.h"
#include "common/hashfn.h"
#include "common/shortest_dec.h"
#include "libpq/pqformat.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/proc.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "apply.h"
#include "apply_append.h"
#include "apply_bulk.h"
#include "catalog_row.h"
#include "crypto.h"
#include "keyring.h"
#include "errors.h"
#include "messages.h"
#include "incremental.h"
#include "origin.h"
#include "provenance.h"
#include "shmem.h"
#include "spi_util.h"
#include "owner_scope.h"
#include "source_columns.h"

AshApplyErrorContext ash_apply_errctx;

static AshPipelineConfig *apply_cfg;
static AshCheckpointKey *apply_key;
static AshPipelineSlot *apply_slot;

static XLogRecPtr watermark;		/* durable commit LSN */
static XLogRecPtr watermark_end;

static bool apply_needs_keys = false;
static bool batch_open = false;
static int	batch_xacts = 0;
static int64 batch_changes = 0;
static XLogRecPtr batch_commit_lsn;
static XLogRecPtr batch_end_lsn;
static TimestampTz batch_commit_time;

static bool in_remote_xact = false;
static bool skip_xact = false;

/*
 * The source transaction carries a replication origin and the pipeline
 * skips those (origin => 'none'): its changes have no effect, but it
 * commits like any other, so the watermark passes it.
 */
static bool origin_skipped = false;
static XLogRecPtr xact_final_lsn;

/*
 * A streamed transaction applied as it arrives: its top-level xid, and the
 * subtransactions whose changes were applied (a subtransaction abort of one
 * of them cannot be undone in place).
 */
static TransactionId stream_xid = InvalidTransactionId;
static TransactionId *stream_subxids = NULL;
static int	stream_nsubxids = 0;
static int	stream_maxsubxids = 0;
const char *ash_apply_stream_fallback = NULL;

static void stream_fall_back(const char *reason) pg_attribute_noreturn();
static void stream_note_change(bool mirror_target, TransactionId xid);

static MemoryContext change_cxt = NULL;

/*
 * The table a snapshot copies in this transaction was empty when the copy
 * began (the snapshot looked): its rows are all new.
 */
static Oid	fresh_relid = InvalidOid;
static LocalTransactionId fresh_lxid = InvalidLocalTransactionId;
static bool fresh_indexes_after = false;	/* its indexes built after its rows */
static AshChangeMeta meta;

/* counters published at batch end */
static AshPipelineStats pending;

/* deletes of rows the mirror does not have, per target, in this batch */
typedef struct MissingDelete
{
	char	   *relation;
	uint64		count;
} MissingDelete;
static List *missing_deletes = NIL;

/*
 * Streamed transactions of the open batch, logged (event=apply.streamed)
 * once it has committed: until then a failure may still roll them back.
 * In TopMemoryContext; emptied by the commit and by every roll-back.
 */
typedef struct StreamedNote
{
	XLogRecPtr	commit_lsn;
	int64		changes;
} StreamedNote;
static List *streamed_notes = NIL;

static void
forget_streamed_notes(void)
{
	list_free_deep(streamed_notes);
	streamed_notes = NIL;
}

static void
release_target(AshApplyTarget *tgt)
{
	if (tgt->plans_owner != NULL)
		((const AshApplyStrategy *) tgt->plans_owner)->release(tgt);
	else
		ash_scd1_strategy.release(tgt);
}

void
ash_apply_init(AshPipelineConfig *cfg, AshCheckpointKey *key,
			   XLogRecPtr wm, XLogRecPtr wm_end)
{
	apply_cfg = cfg;
	apply_key = key;
	watermark = wm;
	watermark_end = wm_end;
	batch_open = false;
	batch_xacts = 0;
	in_remote_xact = false;
	skip_xact = false;
	memset(&pending, 0, sizeof(pending));
	if (change_cxt == NULL)
		change_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant change",
										   ALLOCSET_DEFAULT_SIZES);
	ash_relmap_init(cfg, release_target);

	apply_needs_keys = false;
	{
		ListCell   *lc;

		foreach(lc, cfg->mappings)
			if (((AshMapping *) lfirst(lc))->encrypted != NIL ||
				((AshMapping *) lfirst(lc))->snapshot_provenance)
				apply_needs_keys = true;
		/* claims use the message_digest keys of the moment */
		if (ash_messages_need_keys(cfg))
			apply_needs_keys = true;
	}

	/* the slot of this worker, to publish counters */
	apply_slot = NULL;
	if (AshShmem)
	{
		LWLockAcquire(AshShmem->lock, LW_SHARED);
		apply_slot = ash_slot_find(MyDatabaseId, cfg->sink_name);
		LWLockRelease(AshShmem->lock);
	}
}

const AshChangeMeta *
ash_apply_current(void)
{
	return &meta;
}

const AshCheckpointKey *
ash_apply_checkpoint_key(void)
{
	return apply_key;
}

XLogRecPtr
ash_apply_watermark(void)
{
	return watermark;
}

bool
ash_apply_in_remote_xact(void)
{
	return in_remote_xact || TransactionIdIsValid(stream_xid);
}

bool
ash_apply_in_streamed_xact(void)
{
	return TransactionIdIsValid(stream_xid);
}

bool
ash_apply_batch_pending(void)
{
	return batch_open && batch_xacts > 0 && !in_remote_xact;
}

/*
 * A batch also closes after BATCH_MAX_CHANGES applied changes (at the next
 * transaction boundary), so a backlog does not become one huge destination
 * transaction that a fault would throw away whole; and once it has been open
 * BATCH_MAX_MS, so a source that commits steadily (each transaction arriving
 * within the linger of the last) sees its rows within that time rather than
 * after batch_max_transactions of them.
 */
#define BATCH_MAX_CHANGES 20000
#define BATCH_MAX_MS 100

static TimestampTz batch_started;

bool
ash_apply_batch_full(void)
{
	return batch_xacts >= apply_cfg->batch_max_transactions ||
		batch_changes >= BATCH_MAX_CHANGES ||
		TimestampDifferenceExceeds(batch_started, GetCurrentTimestamp(), BATCH_MAX_MS);
}

static void
begin_batch(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	Assert(!batch_open);
	SetCurrentStatementStartTimestamp();
	batch_started = GetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* transaction and SPI switch contexts: per-change work stays ours */
	MemoryContextSwitchTo(cxt);
	batch_open = true;
	batch_xacts = 0;
	batch_changes = 0;
	missing_deletes = NIL;
	forget_streamed_notes();

	/* no key is held between batches: a rotated keyring is seen here */
	if (apply_needs_keys)
		ash_keyring_load();
	ash_encrypt_versions_forget();
}

bool
ash_tenant_scoped(AshApplyRel *rel)
{
	return rel->tenant_col >= 0 && !rel->cols[rel->tenant_col].is_identity;
}

/*
 * "k1 = $first AND ..." over the identity (the business key of a history
 * mapping), then " AND tenant = $n" under attribute tenancy.  types (may be
 * NULL) receives the parameter types; returns the next parameter number.
 */
int
ash_append_key_predicate(StringInfo sql, AshApplyRel *rel, int first, Oid *types,
						 bool with_tenant)
{
	for (int k = 0; k < rel->nkeys; k++)
	{
		AshTargetCol *col = &rel->cols[rel->keys[k]];

		appendStringInfo(sql, "%s%s OPERATOR(pg_catalog.=) $%d", k ? " AND " : "",
						 quote_identifier(col->name), first);
		if (types)
			types[first - 1] = col->typid;
		first++;
	}
	if (with_tenant && ash_tenant_scoped(rel))
	{
		AshTargetCol *col = &rel->cols[rel->tenant_col];

		appendStringInfo(sql, " AND %s OPERATOR(pg_catalog.=) $%d",
						 quote_identifier(col->name), first);
		if (types)
			types[first - 1] = col->typid;
		first++;
	}
	return first;
}

/* The predicate's parameter values from an image; returns their count. */
int
ash_key_values(AshApplyRel *rel, AshRowImage *img, Datum *values, char *nulls)
{
	int			n = 0;

	for (int k = 0; k < rel->nkeys; k++)
	{
		int			c = rel->keys[k];

		if (!img->present[c] || img->nulls[c])
			ash_halt("source_replica_identity", "identity column %s of %s is NULL or not sent",
					 quote_identifier(rel->cols[c].name), rel->target_name);
		values[n] = img->values[c];
		nulls[n++] = ' ';
	}
	if (ash_tenant_scoped(rel))
	{
		values[n] = img->values[rel->tenant_col];
		nulls[n++] = img->nulls[rel->tenant_col] ? 'n' : ' ';
	}
	return n;
}

void
ash_apply_write_lost(AshApplyTarget *tgt, const char *what, const char *detail)
{
	Relation	r = table_open(tgt->relid, NoLock);
	TriggerDesc *td = r->trigdesc;
	bool		before = td != NULL && (td->trig_insert_before_row ||
										td->trig_update_before_row ||
										td->trig_delete_before_row);

	table_close(r, NoLock);
	if (before)
		ash_halt("destination_write_suppressed",
				 "%s of a row of %s affected no row: a trigger on it kept the write out",
				 what, tgt->log_name);
	elog(ERROR, "ash_replicant: %s", detail);
}

void
ash_apply_key_matched_many(AshApplyTarget *tgt, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_CARDINALITY_VIOLATION),
			 errmsg("ash_replicant: %s of %s met more rows than the keys it names", what, tgt->log_name),
			 errdetail("A table inheriting from the target holds a row under a mirrored key (docs/scale-out.md, Inheritance children).")));
}

void
ash_apply_count_missing_delete(AshApplyTarget *tgt)
{
	ListCell   *lc;
	MissingDelete *md;
	MemoryContext old;

	pending.missing_row_deletes++;
	foreach(lc, missing_deletes)
	{
		md = lfirst(lc);
		if (strcmp(md->relation, tgt->log_name) == 0)
		{
			md->count++;
			return;
		}
	}
	old = MemoryContextSwitchTo(TopTransactionContext);
	md = palloc(sizeof(MissingDelete));
	md->relation = pstrdup(tgt->log_name);
	md->count = 1;
	missing_deletes = lappend(missing_deletes, md);
	MemoryContextSwitchTo(old);
}

static void flush_deferred(void);

/* ---------------------------------------------------------------------
 * Per-table counters (ash_replicant.stat_tables).
 *
 * Each batch counts its row changes per target and, for a tenant-scoped
 * mapping, per tenant, and writes them to ash_replicant.table_stats in
 * the batch's own transaction, right before the checkpoint: the counters
 * move with the rows, exactly once, survive restarts and crashes, and a
 * rolled-back batch counts nothing.  Existing rows are updated in place
 * (catalog_row.c), new ones by one statement.  The tenant
 * value is stored in that default-deny catalog only; the view shows it to
 * roles that may read the tenant's rows (docs/operations.md).
 * ---------------------------------------------------------------------
 */
typedef struct TableStatKey
{
	const char *target;			/* the mapping's target (quoted name) */
	const char *tenant;			/* NULL unless tenant-scoped */
} TableStatKey;

typedef struct TableStatEntry
{
	TableStatKey key;
	Oid			relid;			/* the table written (context tenancy: the
								 * tenant's) */
	int64		counts[4];		/* inserted, updated, deleted, truncated */
	TimestampTz commit_time;	/* of the last source transaction counted */
} TableStatEntry;

enum
{
	STAT_INSERTED, STAT_UPDATED, STAT_DELETED, STAT_TRUNCATED
};

static MemoryContext stats_cxt = NULL;
static MemoryContext stats_flush_cxt = NULL;	/* what one flush allocates */
static HTAB *table_stats = NULL;
static TableStatEntry *last_stat = NULL;	/* of the last untenanted count */
static SPIPlanPtr table_stats_plan = NULL;
static SPIPlanPtr table_stats_one_plan = NULL;

static uint32
table_stat_hash(const void *key, Size keysize)
{
	const TableStatKey *k = key;
	uint32		h = string_hash(k->target, strlen(k->target) + 1);

	if (k->tenant != NULL)
		h = hash_combine(h, string_hash(k->tenant, strlen(k->tenant) + 1));
	return h;
}

static int
table_stat_match(const void *key1, const void *key2, Size keysize)
{
	const TableStatKey *a = key1;
	const TableStatKey *b = key2;

	if (strcmp(a->target, b->target) != 0)
		return 1;
	if (a->tenant == NULL || b->tenant == NULL)
		return a->tenant == b->tenant ? 0 : 1;
	return strcmp(a->tenant, b->tenant);
}

static void
table_stats_discard(void)
{
	table_stats = NULL;
	last_stat = NULL;
	if (stats_cxt != NULL)
		MemoryContextReset(stats_cxt);
}

/*
 * After a flush that only updated rows in place: keep the table and its
 * entries, counts zeroed, for the next batch -- making and dropping the
 * table (a memory context of its own) cost a one-row batch about as much
 * as counting its row.  Only a few entries are kept: tenant keys may be
 * many.  An entry counted nothing in this batch when its counts are zero.
 */
#define TABLE_STATS_KEPT 16

static void
table_stat_zero(TableStatEntry *e)
{
	memset(e->counts, 0, sizeof(e->counts));
	e->relid = InvalidOid;
	e->commit_time = 0;
}

static bool
table_stat_counted(TableStatEntry *e)
{
	for (int k = 0; k < 4; k++)
		if (e->counts[k] != 0)
			return true;
	return false;
}

static void
table_stats_count(AshApplyRel *rel, AshApplyTarget *tgt, const char *tenant, int what)
{
	TableStatKey key;
	TableStatEntry *e;
	bool		found;

	if (table_stats == NULL)
	{
		HASHCTL		ctl;

		if (stats_cxt == NULL)
			stats_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant table stats",
											  ALLOCSET_SMALL_SIZES);
		ctl.keysize = sizeof(TableStatKey);
		ctl.entrysize = sizeof(TableStatEntry);
		ctl.hash = table_stat_hash;
		ctl.match = table_stat_match;
		ctl.hcxt = stats_cxt;
		table_stats = hash_create("ash_replicant table stats", 16, &ctl,
								  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	}
	key.target = rel->target_name;
	key.tenant = (rel->tenant_mode != ASH_TENANT_NONE) ? tenant : NULL;

	/* runs of one table (a snapshot copy above all) skip the hashing */
	if (key.tenant == NULL && last_stat != NULL &&
		strcmp(last_stat->key.target, key.target) == 0)
	{
		e = last_stat;
		found = true;
	}
	else
		e = hash_search(table_stats, &key, HASH_ENTER, &found);
	if (!found)
	{
		/* the key points into per-change memory: keep copies */
		e->key.target = MemoryContextStrdup(stats_cxt, key.target);
		e->key.tenant = key.tenant ? MemoryContextStrdup(stats_cxt, key.tenant) : NULL;
		memset(e->counts, 0, sizeof(e->counts));
		e->relid = InvalidOid;
	}
	last_stat = e->key.tenant == NULL ? e : NULL;
	if (tgt != NULL)
		e->relid = tgt->relid;
	e->counts[what]++;
	e->commit_time = meta.commit_time;
}

static Datum
stats_array(Datum *elems, int n, Oid type, bool *nulls)
{
	int16		typlen;
	bool		typbyval;
	char		typalign;
	int			dims[1] = {n};
	int			lbs[1] = {1};

	get_typlenbyvalalign(type, &typlen, &typbyval, &typalign);
	return PointerGetDatum(construct_md_array(elems, nulls, 1, dims, lbs, type,
											  typlen, typbyval, typalign));
}

#define TABLE_STATS_UPSERT \
	"INSERT INTO ash_replicant.table_stats AS t (sink_name, target, tenant," \
	"  target_table, inserted, updated, deleted, truncated, last_commit_time," \
	"  last_applied_at)"
#define TABLE_STATS_ON_CONFLICT \
	" ON CONFLICT (sink_name, target, tenant) DO UPDATE SET" \
	"  target_table = coalesce(EXCLUDED.target_table, t.target_table)," \
	"  inserted = t.inserted OPERATOR(pg_catalog.+) EXCLUDED.inserted," \
	"  updated = t.updated OPERATOR(pg_catalog.+) EXCLUDED.updated," \
	"  deleted = t.deleted OPERATOR(pg_catalog.+) EXCLUDED.deleted," \
	"  truncated = t.truncated OPERATOR(pg_catalog.+) EXCLUDED.truncated," \
	"  last_commit_time = EXCLUDED.last_commit_time," \
	"  last_applied_at = EXCLUDED.last_applied_at"

static SPIPlanPtr
table_stats_prepare(const char *sql, const Oid *types)
{
	SPIPlanPtr	plan = SPI_prepare(sql, 9, (Oid *) types);

	if (plan == NULL)
		elog(ERROR, "ash_replicant: could not prepare the table statistics statement");
	SPI_keepplan(plan);
	return plan;
}

/* a streamed transaction's commit time is known at its end */
static Datum
table_stat_commit_time(TableStatEntry *e)
{
	return TimestampTzGetDatum(e->commit_time != 0 ? e->commit_time : batch_commit_time);
}

/* ash_replicant.table_stats, for in-place updates (catalog_row.c) */
static AshCatalogRowSpec stats_row = {
	.table = "table_stats",
	.nkeys = 3,
	.keys = {"sink_name", "target", "tenant"},
	.ncols = 7,
	.cols = {"inserted", "updated", "deleted", "truncated", "target_table",
	"last_commit_time", "last_applied_at"},
};

/*
 * Where an untenanted table's row was last written, to find it there next
 * time (catalog_row.c).  Bounded: a worker writes one row per mapped
 * table; tenant rows, which may be many, are found through the index.
 */
typedef struct TableStatHint
{
	char	   *target;
	ItemPointerData tid;
} TableStatHint;

#define TABLE_STAT_HINTS 256
static List *table_stat_hints = NIL;

static ItemPointer
table_stat_hint(TableStatEntry *e)
{
	ListCell   *lc;
	TableStatHint *h;
	MemoryContext old;

	if (e->key.tenant != NULL)
		return NULL;
	foreach(lc, table_stat_hints)
	{
		h = lfirst(lc);
		if (strcmp(h->target, e->key.target) == 0)
			return &h->tid;
	}
	if (list_length(table_stat_hints) >= TABLE_STAT_HINTS)
		return NULL;
	old = MemoryContextSwitchTo(TopMemoryContext);
	h = palloc(sizeof(TableStatHint));
	h->target = pstrdup(e->key.target);
	ItemPointerSetInvalid(&h->tid);
	table_stat_hints = lappend(table_stat_hints, h);
	MemoryContextSwitchTo(old);
	return &h->tid;
}

/* Add an entry's counts to its existing row; false when there is none. */
static bool
table_stats_add_in_place(TableStatEntry *e, TimestampTz applied_at)
{
	const char *keys[3] = {apply_cfg->sink_name, e->key.target, e->key.tenant};
	AshCatalogRow row;

	if (!ash_catalog_row_find(&stats_row, keys, table_stat_hint(e), &row))
		return false;
	for (int k = 0; k < 4; k++)
	{
		bool		isnull;
		int64		n = DatumGetInt64(ash_catalog_row_get(&row, k, &isnull));

		ash_catalog_row_set(&row, k, Int64GetDatum((isnull ? 0 : n) + e->counts[k]), false);
	}
	if (OidIsValid(e->relid))
		ash_catalog_row_set(&row, 4, ObjectIdGetDatum(e->relid), false);
	ash_catalog_row_set(&row, 5, table_stat_commit_time(e), false);
	ash_catalog_row_set(&row, 6, TimestampTzGetDatum(applied_at), false);
	/* changed meanwhile (a reset): nothing written, the statement adds */
	return ash_catalog_row_update(&row);
}

/*
 * In the batch's transaction, before the checkpoint: write the counts.  A
 * table's row, once it exists, is updated in place (catalog_row.c); the
 * rows that do not exist yet are inserted by one statement, binding
 * scalars when there is one (a batch that touched one table).
 */
static void
table_stats_flush(void)
{
	HASH_SEQ_STATUS seq;
	TableStatEntry *e;
	TableStatEntry **missing;
	long		n = 0;
	Datum		values[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	static const Oid one_types[9] = {
		TEXTOID, TEXTOID, TEXTOID, OIDOID, INT8OID, INT8OID, INT8OID, INT8OID,
		TIMESTAMPTZOID
	};
	static const Oid types[9] = {
		TEXTOID, TEXTARRAYOID, TEXTARRAYOID, OIDARRAYOID, INT8ARRAYOID,
		INT8ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID
	};
	TimestampTz applied_at = GetCurrentTimestamp();
	SPIPlanPtr	plan;
	MemoryContext old;

	if (table_stats == NULL || hash_get_num_entries(table_stats) == 0)
		return;
	ash_apply_errctx.command = "table_stats";
	ash_apply_errctx.relation = NULL;
	if (stats_flush_cxt == NULL)
		stats_flush_cxt = AllocSetContextCreate(TopMemoryContext,
												"ash_replicant table stats flush",
												ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(stats_flush_cxt);
	missing = palloc(sizeof(TableStatEntry *) * hash_get_num_entries(table_stats));
	hash_seq_init(&seq, table_stats);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (!table_stat_counted(e))
			continue;
		/* kept for the next batch, counts zeroed (below) */
		if (table_stats_add_in_place(e, applied_at))
			table_stat_zero(e);
		else
			missing[n++] = e;
	}
	if (n == 0)
		goto done;

	values[0] = CStringGetTextDatum(apply_cfg->sink_name);
	if (n == 1)
	{
		e = missing[0];
		values[1] = CStringGetTextDatum(e->key.target);
		nulls[2] = e->key.tenant == NULL ? 'n' : ' ';
		values[2] = e->key.tenant ? CStringGetTextDatum(e->key.tenant) : (Datum) 0;
		nulls[3] = OidIsValid(e->relid) ? ' ' : 'n';
		values[3] = ObjectIdGetDatum(e->relid);
		for (int k = 0; k < 4; k++)
			values[4 + k] = Int64GetDatum(e->counts[k]);
		values[8] = table_stat_commit_time(e);
		if (table_stats_one_plan == NULL)
			table_stats_one_plan = table_stats_prepare(TABLE_STATS_UPSERT
													   " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9,"
													   "  pg_catalog.clock_timestamp())"
													   TABLE_STATS_ON_CONFLICT, one_types);
		plan = table_stats_one_plan;
	}
	else
	{
		Datum	   *cols[9];
		bool	   *tenant_nulls = palloc0(sizeof(bool) * n);
		bool	   *relid_nulls = palloc0(sizeof(bool) * n);

		for (int c = 1; c < 9; c++)
			cols[c] = palloc(sizeof(Datum) * n);
		for (int i = 0; i < n; i++)
		{
			e = missing[i];
			cols[1][i] = CStringGetTextDatum(e->key.target);
			tenant_nulls[i] = e->key.tenant == NULL;
			cols[2][i] = e->key.tenant ? CStringGetTextDatum(e->key.tenant) : (Datum) 0;
			relid_nulls[i] = !OidIsValid(e->relid);
			cols[3][i] = ObjectIdGetDatum(e->relid);
			for (int k = 0; k < 4; k++)
				cols[4 + k][i] = Int64GetDatum(e->counts[k]);
			cols[8][i] = table_stat_commit_time(e);
		}
		values[1] = stats_array(cols[1], n, TEXTOID, NULL);
		values[2] = stats_array(cols[2], n, TEXTOID, tenant_nulls);
		values[3] = stats_array(cols[3], n, OIDOID, relid_nulls);
		for (int c = 4; c < 9; c++)
			values[c] = stats_array(cols[c], n, c == 8 ? TIMESTAMPTZOID : INT8OID, NULL);
		if (table_stats_plan == NULL)
			table_stats_plan = table_stats_prepare(TABLE_STATS_UPSERT
												   " SELECT $1, u.target, u.tenant, u.relid, u.i, u.u, u.d, u.t, u.ct,"
												   "  pg_catalog.clock_timestamp()"
												   "  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($3),"
												   "    pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6),"
												   "    pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9))"
												   "    AS u(target, tenant, relid, i, u, d, t, ct)"
												   TABLE_STATS_ON_CONFLICT, types);
		plan = table_stats_plan;
	}
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_execute_plan(plan, values, nulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "ash_replicant: table statistics were not written");
	PopActiveSnapshot();
done:
	MemoryContextSwitchTo(old);
	MemoryContextReset(stats_flush_cxt);
	if (n > 0 || hash_get_num_entries(table_stats) > TABLE_STATS_KEPT)
		table_stats_discard();
	ash_origin_set_progress(InvalidXLogRecPtr, 0);
}

/* ---------------------------------------------------------------------
 * Row images.
 * ---------------------------------------------------------------------
 */
/* n decimal digits at s into *v */
static inline bool
fixed_digits(const char *s, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		*v = *v * 10 + (s[i] - '0');
	}
	return true;
}

/*
 * What timestamptz_in (with_tz) and timestamp_in compute for the text their
 * output functions write under DateStyle ISO -- "YYYY-MM-DD HH:MM:SS", up
 * to six fraction digits, and for timestamptz the offset as +HH, +HH:MM or
 * +HH:MM:SS -- without the general date parser, which took most of a
 * one-row transaction's conversion.  The arithmetic is tm2timestamp's with
 * the offset given (the destination's TimeZone plays no part, as it plays
 * none in timestamptz_in when the text has an offset); the checks are
 * those of ValidateDate, DecodeTime and DecodeTimezone for these fields,
 * and IS_VALID_TIMESTAMP.  Anything else -- another DateStyle, a year
 * beyond four digits or BC, infinity, a leap second, 24:00:00, seven or
 * more fraction digits, a type modifier (rounding) -- returns false and
 * goes to the input function itself, which raises its own error for a bad
 * value.
 */
static bool
fast_timestamp_in(const char *s, bool with_tz, Datum *result)
{
	int			year,
				mon,
				mday,
				hour,
				min,
				sec;
	int64		fsec = 0;
	int			tz = 0;			/* seconds west of UTC, as DecodeTimezone */
	const char *p;
	int			date;
	Timestamp	ts;

	if (!fixed_digits(s, 4, &year) || s[4] != '-' || !fixed_digits(s + 5, 2, &mon) ||
		s[7] != '-' || !fixed_digits(s + 8, 2, &mday) || s[10] != ' ' ||
		!fixed_digits(s + 11, 2, &hour) || s[13] != ':' || !fixed_digits(s + 14, 2, &min) ||
		s[16] != ':' || !fixed_digits(s + 17, 2, &sec))
		return false;
	p = s + 19;
	if (*p == '.')
	{
		int			n = 0;

		for (p++; n < 6 && *p >= '0' && *p <= '9'; p++, n++)
			fsec = fsec * 10 + (*p - '0');
		if (n == 0 || (*p >= '0' && *p <= '9'))
			return false;
		for (; n < 6; n++)
			fsec *= 10;
	}
	if (with_tz)
	{
		int			sign = *p == '+' ? 1 : *p == '-' ? -1 : 0;
		int			th,
					tm = 0,
					tsec = 0;

		if (sign == 0 || !fixed_digits(p + 1, 2, &th))
			return false;
		p += 3;
		if (*p == ':')
		{
			if (!fixed_digits(p + 1, 2, &tm))
				return false;
			p += 3;
			if (*p == ':')
			{
				if (!fixed_digits(p + 1, 2, &tsec))
					return false;
				p += 3;
			}
		}
		if (th > MAX_TZDISP_HOUR || tm >= MINS_PER_HOUR || tsec >= SECS_PER_MINUTE)
			return false;
		tz = -sign * ((th * MINS_PER_HOUR + tm) * SECS_PER_MINUTE + tsec);
	}
	if (*p != '\0')
		return false;
	if (year < 1 || mon < 1 || mon > MONTHS_PER_YEAR || mday < 1 ||
		mday > day_tab[isleap(year)][mon - 1] ||
		hour >= HOURS_PER_DAY || min >= MINS_PER_HOUR || sec >= SECS_PER_MINUTE)
		return false;

	date = date2j(year, mon, mday) - POSTGRES_EPOCH_JDATE;
	ts = (int64) date * USECS_PER_DAY +
		(((int64) hour * MINS_PER_HOUR + min) * SECS_PER_MINUTE + sec) * USECS_PER_SEC + fsec;
	/* dt2local(ts, -tz) */
	ts += (int64) tz * USECS_PER_SEC;
	if (!IS_VALID_TIMESTAMP(ts))
		return false;
	*result = TimestampGetDatum(ts);
	return true;
}

/*
 * The typmod a value is read with: a varchar(n)[] target's elements are
 * read whole and counted (check_elements_fit), since its input would cut
 * an excess of spaces without an error.
 */
static inline int32
read_typmod(AshTargetCol *col)
{
	return col->elem_maxchars >= 0 ? -1 : col->typmod;
}

static Datum
convert_value(AshTargetCol *col, AshColumnValue *v)
{
	Datum		d;

	if ((col->infunc.fn_oid == F_TIMESTAMPTZ_IN || col->infunc.fn_oid == F_TIMESTAMP_IN) &&
		col->typmod == -1 &&
		fast_timestamp_in(v->data, col->infunc.fn_oid == F_TIMESTAMPTZ_IN, &d))
		return d;
	return InputFunctionCall(&col->infunc, v->data, col->ioparam, read_typmod(col));
}

/*
 * Binary transfer (pipelines.binary_transfer) sends each value in its
 * source type's send format.  Only a built-in type (an OID below
 * FirstGenbkiObjectId, identical on every PostgreSQL) is read as such; a
 * value of any other source type cannot be, so the pipeline stops asking
 * for binary and the session starts over in text.
 */
static bool binary_refused = false;
static bool binary_refusal_raised = false;

bool
ash_apply_binary_refused(void)
{
	return binary_refused;
}

bool
ash_apply_take_binary_refusal(void)
{
	bool		raised = binary_refusal_raised;

	binary_refusal_raised = false;
	return raised;
}

static pg_noinline void
refuse_binary(AshApplyRel *rel)
{
	binary_refused = true;
	binary_refusal_raised = true;
	ereport(LOG,
			(errmsg("ash_replicant event=binary_transfer.off sink=%s table=%s reason=source_type_not_builtin",
					apply_cfg->sink_name, rel->target_name)));
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("ash_replicant: a binary value of %s has a source type that is not built in; streaming again in text",
					rel->target_name)));
}

static StringInfoData
binary_buffer(AshColumnValue *v)
{
	StringInfoData buf;

	/* the decoder's copy is NUL-terminated, as receive functions expect */
	buf.data = v->data;
	buf.len = v->len;
	buf.maxlen = v->len + 1;
	buf.cursor = 0;
	return buf;
}

/* The text form of a sent value (text as sent, binary through its type). */
static char *
value_text(AshApplyRel *rel, int remote_idx, AshColumnValue *v)
{
	AshTextConv *tc;
	StringInfoData buf;
	Datum		d;

	if (v->status != ASH_COL_BINARY)
		return v->data;
	if (rel->remote.cols[remote_idx].type_oid == TEXTOID ||
		rel->remote.cols[remote_idx].type_oid == VARCHAROID)
	{
		/* their binary form is the text itself: what textrecv reads */
		int			n;

		buf = binary_buffer(v);
		return pq_getmsgtext(&buf, buf.len, &n);
	}
	if (rel->textconv == NULL)
		rel->textconv = MemoryContextAllocZero(rel->cxt,
											   sizeof(AshTextConv) * Max(rel->remote.natts, 1));
	tc = &rel->textconv[remote_idx];
	if (!tc->ready)
	{
		Oid			type = rel->remote.cols[remote_idx].type_oid;
		Oid			recv;
		Oid			out;
		bool		varlena;

		if (type >= FirstGenbkiObjectId)
			refuse_binary(rel);
		getTypeBinaryInputInfo(type, &recv, &tc->ioparam);
		getTypeOutputInfo(type, &out, &varlena);
		fmgr_info_cxt(recv, &tc->recv, rel->cxt);
		fmgr_info_cxt(out, &tc->out, rel->cxt);
		tc->ready = true;
	}
	buf = binary_buffer(v);
	d = ReceiveFunctionCall(&tc->recv, &buf, tc->ioparam, -1);
	/* a value of another type (8 bytes read as a 4-byte integer) is no value */
	if (buf.cursor != buf.len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("ash_replicant: incorrect binary data format in a column of %s",
						rel->target_name)));
	return OutputFunctionCall(&tc->out, d);
}

/*
 * What the receive functions of the commonest types of a snapshot's rows
 * compute, without their costliest step; false when the value is not one
 * of the cases handled here, and then the receive function itself runs
 * (raising its own error for a bad value).
 *
 * timestamp_recv and timestamptz_recv read an int64 and accept it when it
 * is not finite or when timestamp2tm() succeeds and IS_VALID_TIMESTAMP
 * holds.  timestamp2tm() fails only for a Julian day below 0 or above
 * INT_MAX, which IS_VALID_TIMESTAMP already excludes (MIN_TIMESTAMP is
 * Julian day 0, END_TIMESTAMP far below INT_MAX days): the range check
 * alone is the same test, without the calendar and time zone arithmetic
 * that made these two almost half of the conversion cost.  A type modifier
 * (rounding) is left to the function.
 *
 * textrecv validates the bytes in the server encoding when the client
 * encoding is that encoding or SQL_ASCII (a background worker's), then
 * copies them twice; one copy here, after the same validation.
 */
static bool
fast_receive(AshTargetCol *col, AshColumnValue *v, Datum *result)
{
	switch (col->recvfunc.fn_oid)
	{
		case F_TIMESTAMP_RECV:
		case F_TIMESTAMPTZ_RECV:
			{
				uint64		n;
				int64		ts;

				if (v->len != sizeof(int64) || col->typmod != -1)
					return false;
				memcpy(&n, v->data, sizeof(n));
				ts = (int64) pg_ntoh64(n);
				if (!TIMESTAMP_NOT_FINITE(ts) && !IS_VALID_TIMESTAMP(ts))
					return false;
				*result = Int64GetDatum(ts);
				return true;
			}
		case F_TEXTRECV:
			{
				int			enc = pg_get_client_encoding();
				text	   *t;

				if (enc != GetDatabaseEncoding() && enc != PG_SQL_ASCII)
					return false;
				(void) pg_verify_mbstr(GetDatabaseEncoding(), v->data, v->len, false);
				t = (text *) palloc(v->len + VARHDRSZ);
				SET_VARSIZE(t, v->len + VARHDRSZ);
				memcpy(VARDATA(t), v->data, v->len);
				*result = PointerGetDatum(t);
				return true;
			}
		default:
			return false;
	}
}

static Datum
binary_value(AshApplyRel *rel, AshTargetCol *col, AshColumnValue *v)
{
	Oid			type = rel->remote.cols[col->remote_idx].type_oid;
	StringInfoData buf;
	Datum		d;

	if (type != col->typid || type >= FirstGenbkiObjectId || !OidIsValid(col->recvfunc.fn_oid))
		return InputFunctionCall(&col->infunc, value_text(rel, col->remote_idx, v),
								 col->ioparam, read_typmod(col));
	if (fast_receive(col, v, &d))
		return d;
	buf = binary_buffer(v);
	d = ReceiveFunctionCall(&col->recvfunc, &buf, col->recv_ioparam, read_typmod(col));
	if (buf.cursor != buf.len)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("ash_replicant: incorrect binary data format in a column of %s",
						rel->target_name)));
	return d;
}

/*
 * A real into a double precision column: the real's own value, as the cast
 * gives it.  Through text the column would hold the double nearest to the
 * real's digits instead (1.1::real is 1.10000002384185791015625; its text,
 * '1.1' here or '1.10000002' as the source sends it, reads as another
 * double), and a copied row and a streamed one would not agree.  A domain
 * takes the value's exact text through its input function (its checks).
 */
static Datum
widened_float4(AshApplyRel *rel, AshTargetCol *col, AshColumnValue *v)
{
	float4		f;
	char		buf[DOUBLE_SHORTEST_DECIMAL_LEN];

	if (v->status == ASH_COL_BINARY)
	{
		uint32		n;

		if (v->len != sizeof(n))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
					 errmsg("ash_replicant: incorrect binary data format in a column of %s",
							rel->target_name)));
		memcpy(&n, v->data, sizeof(n));
		n = pg_ntoh32(n);
		memcpy(&f, &n, sizeof(f));
	}
	else
		f = DatumGetFloat4(DirectFunctionCall1(float4in, CStringGetDatum(v->data)));
	if (col->typid == FLOAT8OID)
		return Float8GetDatum((float8) f);
	double_to_shortest_decimal_buf((double) f, buf);
	return InputFunctionCall(&col->infunc, buf, col->ioparam, col->typmod);
}

/*
 * A varchar(n) column's input cuts an excess of spaces to n characters
 * without an error ('ab    ' into varchar(3) is 'ab '): the mirror would
 * hold another value than the source.  Such a value fails as any longer
 * one does.  Checked on the text the column reads: a value's own bytes for
 * the string types, else its text form.
 */
static void
check_fits(AshApplyRel *rel, AshTargetCol *col, AshColumnValue *v)
{
	const char *s = v->data;
	int			len = v->len;

	if (v->status == ASH_COL_BINARY)
	{
		Oid			type = rel->remote.cols[col->remote_idx].type_oid;

		if (type != TEXTOID && type != VARCHAROID && type != BPCHAROID && type != NAMEOID)
		{
			s = value_text(rel, col->remote_idx, v);
			len = strlen(s);
		}
	}
	/* no more characters than bytes */
	if (len > col->maxchars && pg_mbstrlen_with_len(s, len) > col->maxchars)
		ereport(ERROR,
				(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
				 errmsg("ash_replicant: a value too long for type character varying(%d) in a column of %s",
						col->maxchars, rel->target_name)));
}

/* Every element of a varchar(n)[] value read whole: within n characters? */
static void
check_elements_fit(AshApplyRel *rel, AshTargetCol *col, Datum value)
{
	ArrayType  *arr = DatumGetArrayTypeP(value);
	ArrayIterator it = array_create_iterator(arr, 0, NULL);
	Datum		elem;
	bool		isnull;

	while (array_iterate(it, &elem, &isnull))
	{
		text	   *t;

		if (isnull)
			continue;
		t = DatumGetTextPP(elem);
		if (VARSIZE_ANY_EXHDR(t) > col->elem_maxchars &&
			pg_mbstrlen_with_len(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)) > col->elem_maxchars)
			ereport(ERROR,
					(errcode(ERRCODE_STRING_DATA_RIGHT_TRUNCATION),
					 errmsg("ash_replicant: a value too long for type character varying(%d)[] in a column of %s",
							col->elem_maxchars, rel->target_name)));
	}
	array_free_iterator(it);
}

static void
build_image(AshApplyRel *rel, AshTuple *tup, AshRowImage *img)
{
	img->values = palloc0(sizeof(Datum) * Max(rel->ncols, 1));
	img->nulls = palloc0(sizeof(bool) * Max(rel->ncols, 1));
	img->present = palloc0(sizeof(bool) * Max(rel->ncols, 1));
	img->plain = NULL;
	img->complete = true;

	if (tup->natts != rel->remote.natts)
		ash_halt("protocol_violation", "tuple of %s does not match its relation description",
				 rel->target_name);

	for (int c = 0; c < rel->ncols; c++)
	{
		AshTargetCol *col = &rel->cols[c];
		AshColumnValue *v = &tup->cols[col->remote_idx];

		ash_apply_errctx.relation = rel->target_name;
		switch (v->status)
		{
			case ASH_COL_NULL:
				img->nulls[c] = true;
				img->present[c] = true;
				break;
			case ASH_COL_UNCHANGED:
				img->present[c] = false;
				img->complete = false;
				break;
			case ASH_COL_TEXT:
			case ASH_COL_BINARY:
				if (col->encrypt)
				{
					/* sealed (as text) once the destination table is known */
					if (img->plain == NULL)
						img->plain = palloc0(sizeof(char *) * rel->ncols);
					img->plain[c] = value_text(rel, col->remote_idx, v);
				}
				else
				{
					if (col->maxchars >= 0)
						check_fits(rel, col, v);
					if (col->widen_float4)
						img->values[c] = widened_float4(rel, col, v);
					else if (v->status == ASH_COL_TEXT)
						img->values[c] = convert_value(col, v);
					else
						img->values[c] = binary_value(rel, col, v);
					if (col->elem_maxchars >= 0)
						check_elements_fit(rel, col, img->values[c]);
				}
				img->present[c] = true;
				break;
			default:
				ash_halt("protocol_violation", "unsupported tuple data format for %s",
						 rel->target_name);
		}
	}
}

/* Key image: identity columns from the old tuple (or the new one). */
static void
build_key(AshApplyRel *rel, AshTuple *tup, AshRowImage *key)
{
	build_image(rel, tup, key);
	for (int k = 0; k < rel->nkeys; k++)
	{
		int			c = rel->keys[k];

		if (!key->present[c])
			ash_halt("unchanged_value_unavailable", "identity column %s of %s not sent",
					 quote_identifier(rel->cols[c].name), rel->target_name);
		if (key->nulls[c])
			ash_halt("source_replica_identity", "identity column %s of %s is NULL in the change",
					 quote_identifier(rel->cols[c].name), rel->target_name);
	}
}

/* ---------------------------------------------------------------------
 * Dispatch.
 * ---------------------------------------------------------------------
 */
static const AshApplyStrategy *
strategy_for(AshApplyRel *rel)
{
	/* relmap refuses mappings whose strategy this version lacks */
	if (rel->map->append_log)
		return &ash_append_strategy;
	if (rel->map->history_strategy != NULL &&
		strcmp(rel->map->history_strategy, "scd2") == 0)
		return &ash_scd2_strategy;
	return &ash_scd1_strategy;
}

/*
 * Resolve the relation of a row change; NULL when it is ignored.  A row of
 * an incremental chunk is read by the chunk's description, a streamed one
 * by the stream's: they differ while the stream is behind a column change.
 */
static AshApplyRel *
rel_for_change(uint32 relid)
{
	AshApplyRel *rel = ash_relmap_get(relid, meta.snapshot_attempt != NULL && !meta.snapshot_whole);

	ash_relmap_resolve(rel);
	if (rel->ignored)
		return NULL;
	ash_apply_errctx.relation = rel->target_name;
	ash_relmap_check_target(rel, rel->target_default);
	return rel;
}

/* ---------------------------------------------------------------------
 * Snapshot floors.
 *
 * A table copied by a snapshot under a source snapshot taken at LSN F
 * already holds the effect of every transaction committed before F: the
 * stream applies its changes only from commits at or after F.  Tables
 * copied at the slot's own consistent point need no floor (the stream
 * starts there); a table copied later (after a restart of the copy, under
 * a snapshot of its own) does, until the watermark passes F.
 * ---------------------------------------------------------------------
 */
static List *floors = NIL;		/* AshTableFloor * in TopMemoryContext */

void
ash_apply_set_floors(List *new_floors)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	ListCell   *lc;

	list_free_deep(floors);
	floors = NIL;
	foreach(lc, new_floors)
	{
		AshTableFloor *in = lfirst(lc);
		AshTableFloor *f = palloc(sizeof(AshTableFloor));

		strlcpy(f->nspname, in->nspname, NAMEDATALEN);
		strlcpy(f->relname, in->relname, NAMEDATALEN);
		f->lsn = in->lsn;
		floors = lappend(floors, f);
	}
	MemoryContextSwitchTo(old);
}

/* Forget floors no commit after the watermark can be below. */
static void
prune_floors(void)
{
	ListCell   *lc;

	foreach(lc, floors)
	{
		AshTableFloor *f = lfirst(lc);

		if (f->lsn <= watermark + 1)
		{
			floors = foreach_delete_current(floors, lc);
			pfree(f);
		}
	}
}

static bool
below_floor(AshApplyRel *rel)
{
	ListCell   *lc;

	if (floors == NIL || meta.origin == NULL || strcmp(meta.origin, "snapshot") == 0)
		return false;
	foreach(lc, floors)
	{
		AshTableFloor *f = lfirst(lc);

		if (strcmp(f->nspname, rel->remote.nspname) != 0 ||
			strcmp(f->relname, rel->remote.relname) != 0)
			continue;
		/* a streamed transaction's commit LSN is not known yet */
		if (XLogRecPtrIsInvalid(meta.commit_lsn))
			stream_fall_back("snapshot_floor");
		return meta.commit_lsn < f->lsn;
	}
	return false;
}

static void
require_xact(const char *what)
{
	if (!in_remote_xact)
		ash_halt("protocol_violation", "%s outside a transaction", what);
}

/*
 * The sink owner's scope, in which each write to a table enters the scope
 * its owner allows (ash_apply_target_enter): as the sink owner, or as the
 * table's owner.  FORCE ROW LEVEL SECURITY does not apply to the
 * owner of a table here (as in a foreign key's check): the owner's writes
 * are not re-gated by policies (docs/sql-api-mapping.md, "Row-level
 * security").  What the owner's code (a trigger, the tenant function) sets
 * is undone at the end (owner_scope.c).
 */
static void
as_owner_begin(AshOwnerScope *scope)
{
	ash_owner_scope_enter(scope, apply_cfg->owner, 0);
}

/*
 * Write to tgt in the scope its owner allows (owner_scope.c,
 * ash_owner_table_writer): as the sink owner, or as the table's owner,
 * restricted, so that a table owner's trigger, default, CHECK or index
 * expression never runs with the sink owner's rights.  Judged once per
 * destination transaction: the lock taken then keeps the owner until the
 * transaction ends (ALTER TABLE OWNER waits for it), and a role
 * membership granted or revoked since (no relcache event) is seen by the
 * next transaction -- the judgement is two membership lookups, cached by
 * PostgreSQL until pg_auth_members changes.
 */
void
ash_apply_target_enter(AshApplyTarget *tgt, AshOwnerScope *scope)
{
	if (tgt->writer_lxid != MyProc->lxid)
	{
		tgt->writer = ash_owner_writer_of(apply_cfg->owner, tgt->relid, tgt->log_name);
		tgt->writer_lxid = MyProc->lxid;
	}
	ash_owner_table_enter(scope, apply_cfg->owner, tgt->writer);
}

void
ash_apply_table_enter(Oid relid, const char *log_name, AshOwnerScope *scope)
{
	ash_owner_write_enter(scope, apply_cfg->owner, relid, log_name);
}

void
ash_apply_target_exit(AshOwnerScope *scope)
{
	ash_owner_scope_exit(scope);
}

/*
 * Fill unchanged-TOAST columns of a new tuple from a full old tuple (REPLICA
 * IDENTITY FULL logs the old row detoasted), so the new image is complete.
 * key_only: the old tuple is the old key ('K'), the other columns NULL:
 * only its values are taken -- a key column stored out of line that the
 * update left alone comes unchanged, and PostgreSQL logs the old key then.
 */
static void
merge_unchanged(AshTuple *newtup, AshTuple *oldtup, bool key_only)
{
	if (newtup->natts != oldtup->natts)
		return;
	for (int i = 0; i < newtup->natts; i++)
	{
		if (newtup->cols[i].status == ASH_COL_UNCHANGED &&
			oldtup->cols[i].status != ASH_COL_UNCHANGED &&
			(!key_only || oldtup->cols[i].status == ASH_COL_TEXT ||
			 oldtup->cols[i].status == ASH_COL_BINARY))
			newtup->cols[i] = oldtup->cols[i];
	}
}

/*
 * The row as jsonb {"source column": "text value" | null}, for tenant
 * functions: only the columns written to the target in clear.  A skipped
 * column never reaches SQL, and an encrypted one reaches it sealed: the
 * function is the owner's code, which may log what it is handed.
 */
static Datum
row_as_jsonb(AshApplyRel *rel, AshTuple *tup)
{
	StringInfoData buf;
	bool		first = true;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int c = 0; c < rel->ncols; c++)
	{
		int			i = rel->cols[c].remote_idx;
		AshColumnValue *v;

		if (rel->cols[c].encrypt || i >= tup->natts)
			continue;
		v = &tup->cols[i];
		if (v->status == ASH_COL_UNCHANGED)
			continue;
		if (!first)
			appendStringInfoChar(&buf, ',');
		first = false;
		escape_json(&buf, rel->remote.cols[i].name);
		appendStringInfoChar(&buf, ':');
		if (v->status == ASH_COL_NULL)
			appendStringInfoString(&buf, "null");
		else
			escape_json(&buf, value_text(rel, i, v));
	}
	appendStringInfoChar(&buf, '}');
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

static pg_noinline bool
is_blank(const char *s)
{
	for (; *s; s++)
		if (!isspace((unsigned char) *s))
			return false;
	return true;
}

/*
 * The tenant of one side of a change.  NULL, blank, boolean false or an
 * unchanged-TOAST tenant halt tenant_required; a raising tenant function
 * halts tenant_resolution_failed.  The tenant itself is never printed.
 */
static pg_noinline char *
resolve_tenant(AshApplyRel *rel, AshTuple *tup, const char *side)
{
	char	   *volatile tenant = NULL;

	if (rel->tenant_remote_idx >= 0)
	{
		AshColumnValue *v;

		if (rel->tenant_remote_idx >= tup->natts)
			ash_halt("protocol_violation", "tuple of %s is shorter than its relation", rel->target_name);
		v = &tup->cols[rel->tenant_remote_idx];
		if (v->status == ASH_COL_TEXT || v->status == ASH_COL_BINARY)
		{
			tenant = value_text(rel, rel->tenant_remote_idx, v);
			if (rel->tenant_is_bool && strcmp(tenant, "f") == 0)
				tenant = NULL;
		}
	}
	else
	{
		MemoryContext cxt = CurrentMemoryContext;
		Datum		arg = row_as_jsonb(rel, tup);
		volatile bool failed = false;
		volatile Datum result = (Datum) 0;
		volatile bool isnull = true;

		PG_TRY();
		{
			LOCAL_FCINFO(fcinfo, 1);
			FmgrInfo	flinfo;

			fmgr_info(rel->map->tenant_function, &flinfo);
			InitFunctionCallInfoData(*fcinfo, &flinfo, 1, InvalidOid, NULL, NULL);
			fcinfo->args[0].value = arg;
			fcinfo->args[0].isnull = false;
			result = FunctionCallInvoke(fcinfo);
			isnull = fcinfo->isnull;
		}
		PG_CATCH();
		{
			/* the transaction is aborted by the halt that follows */
			MemoryContextSwitchTo(cxt);
			FlushErrorState();
			failed = true;
		}
		PG_END_TRY();
		if (failed)
			ash_halt("tenant_resolution_failed", "tenant function of %s raised (side=%s)",
					 rel->target_name, side);
		if (!isnull)
			tenant = TextDatumGetCString(result);
	}

	if (tenant == NULL || is_blank(tenant))
		ash_halt("tenant_required", "side=%s table %s", side, rel->target_name);
	return tenant;
}

/*
 * Encrypt the sensitive columns of an image for the table it is written
 * to: the ciphertext is bound to that table's schema.table.column.
 */
static void
seal_image(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *img)
{
	if (img->plain == NULL)
		return;
	for (int c = 0; c < rel->ncols; c++)
	{
		const char *plain = img->plain[c];

		if (plain == NULL)
			continue;
		img->values[c] = PointerGetDatum(ash_encrypt_column(tgt->nspname, tgt->relname,
															rel->cols[c].name,
															plain, strlen(plain)));
	}
}

void
ash_apply_seal_image(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *img)
{
	seal_image(rel, tgt, img);
}

/*
 * The table a row of this tenant is written to.  Under context tenancy
 * with a tenant_scope_function, the function declares the only tenants
 * the mapping writes (sinks sharing a template keep apart by it, and a
 * snapshot retires rows in those scopes only): a row of another tenant
 * would land in a table another sink owns, so it halts
 * tenant_scope_invalid.  Judged once per tenant table kept (its plans'
 * life), so the function runs once per tenant, not per row.
 */
static AshApplyTarget *
target_for(AshApplyRel *rel, const char *tenant)
{
	AshApplyTarget *t;

	if (rel->tenant_mode != ASH_TENANT_CONTEXT)
		return rel->target_default;
	t = ash_relmap_tenant_target(rel, tenant);
	if (!t->scope_checked)
	{
		if ((OidIsValid(rel->map->tenant_scope_function) ||
			 rel->map->tenant_scope_function_sig != NULL) &&
			!ash_provenance_in_scope(rel->map, apply_cfg->owner, tenant))
			ash_halt("tenant_scope_invalid", "a row of %s names a tenant outside its tenant_scope_function's scopes",
					 rel->target_name);
		t->scope_checked = true;
	}
	return t;
}

/* The source relation of a row change; names its command for errors. */
static uint32
row_change_relid(AshChange *c)
{
	switch (c->kind)
	{
		case ASH_CHANGE_INSERT:
			ash_apply_errctx.command = "insert";
			return c->u.insert.relid;
		case ASH_CHANGE_UPDATE:
			ash_apply_errctx.command = "update";
			return c->u.update.relid;
		default:
			ash_apply_errctx.command = "delete";
			return c->u.delete.relid;
	}
}

/* Both tenants of a change are resolved before any write. */
static void
resolve_change_tenants(AshApplyRel *rel, AshChange *c, char **told, char **tnew)
{
	switch (c->kind)
	{
		case ASH_CHANGE_INSERT:
			*tnew = resolve_tenant(rel, &c->u.insert.newtup, "new");
			break;
		case ASH_CHANGE_UPDATE:
			if (c->u.update.oldkind != 'O')
				ash_halt("tenant_required", "side=old table %s (no old row in the change)",
						 rel->target_name);
			*told = resolve_tenant(rel, &c->u.update.oldtup, "old");
			*tnew = resolve_tenant(rel, &c->u.update.newtup, "new");
			break;
		default:
			if (c->u.delete.oldkind != 'O')
				ash_halt("tenant_required", "side=old table %s (no old row in the change)",
						 rel->target_name);
			*told = resolve_tenant(rel, &c->u.delete.oldtup, "old");
			break;
	}
}

/*
 * A streamed write to a table whose incremental snapshot is under way:
 * marked seen by the attempt, so that the table's completion does not
 * retire it (provenance.c).
 */
static void
mark_streamed(AshApplyRel *rel, AshApplyTarget *to, AshRowImage *row)
{
	if (meta.snapshot_attempt == NULL && rel->map->snapshot_provenance &&
		ash_incr_marks_seen(rel))
		ash_provenance_mark_streamed(rel, to, row, ash_incr_attempt());
}

static void
apply_insert(AshApplyRel *rel, const AshApplyStrategy *strategy, AshChange *c,
			 const char *tnew)
{
	AshApplyTarget *to = target_for(rel, tnew);
	AshRowImage newrow;
	AshOwnerScope scope;

	build_image(rel, &c->u.insert.newtup, &newrow);
	seal_image(rel, to, &newrow);
	ash_apply_target_enter(to, &scope);
	if (rel->map->snapshot_provenance && meta.snapshot_attempt != NULL)
		ash_provenance_insert(rel, to, &newrow, strategy);
	else
	{
		strategy->insert(rel, to, &newrow);
		mark_streamed(rel, to, &newrow);
	}
	ash_apply_target_exit(&scope);
}

static void
apply_update(AshApplyRel *rel, const AshApplyStrategy *strategy, AshChange *c,
			 const char *told, const char *tnew)
{
	AshRowImage newrow;
	AshRowImage key;
	AshOwnerScope scope;

	build_image(rel, &c->u.update.newtup, &newrow);
	if (c->u.update.oldkind != 0)
		build_key(rel, &c->u.update.oldtup, &key);
	else
		build_key(rel, &c->u.update.newtup, &key);
	if (told != NULL && strcmp(told, tnew) != 0 &&
		!(strategy->update_relocates && target_for(rel, told) == target_for(rel, tnew)))
	{
		/* relocation across tenants: delete under old, insert under new */
		AshApplyTarget *from = target_for(rel, told);
		AshApplyTarget *to = target_for(rel, tnew);

		if (!newrow.complete)
			ash_halt("unchanged_value_unavailable", "relocated row of %s lacks a value",
					 rel->target_name);
		seal_image(rel, to, &newrow);
		ash_apply_target_enter(from, &scope);
		strategy->delete(rel, from, &key);
		ash_apply_target_exit(&scope);
		ash_apply_target_enter(to, &scope);
		strategy->insert(rel, to, &newrow);
		mark_streamed(rel, to, &newrow);
		ash_apply_target_exit(&scope);
	}
	else
	{
		AshApplyTarget *to = target_for(rel, tnew);

		seal_image(rel, to, &newrow);
		ash_apply_target_enter(to, &scope);
		strategy->update(rel, to, &key, &newrow);
		mark_streamed(rel, to, &newrow);
		ash_apply_target_exit(&scope);
	}
}

static void
apply_delete(AshApplyRel *rel, const AshApplyStrategy *strategy, AshChange *c,
			 const char *told)
{
	AshRowImage key;
	AshApplyTarget *from = target_for(rel, told);
	AshOwnerScope scope;

	build_key(rel, &c->u.delete.oldtup, &key);
	ash_apply_target_enter(from, &scope);
	strategy->delete(rel, from, &key);
	ash_apply_target_exit(&scope);
}

/*
 * The part of a row change the stream applies while an incremental
 * snapshot copies its table (incremental.c): all of it, none (NULL), or
 * of an update whose keys fall on both sides, the delete of the old key or
 * the insert of the new row (built in *part).
 */
static AshChange *
incremental_part(AshApplyRel *rel, AshChange *c, AshChange *part)
{
	bool		apply_old;
	bool		apply_new;

	ash_incr_judge(rel, c, meta.xid, &apply_old, &apply_new);
	if (c->kind == ASH_CHANGE_INSERT)
		return apply_new ? c : NULL;
	if (c->kind == ASH_CHANGE_DELETE)
		return apply_old ? c : NULL;
	if (apply_old == apply_new)
		return apply_old ? c : NULL;
	memset(part, 0, sizeof(AshChange));
	part->xid = c->xid;
	if (apply_old)
	{
		/*
		 * The row leaves the copied keys: its new key is copied later.  The
		 * whole old row when the change has it: a tenant-scoped mapping
		 * finds the row's tenant there (tenant_required without it).
		 */
		part->kind = ASH_CHANGE_DELETE;
		part->u.delete.relid = c->u.update.relid;
		part->u.delete.oldkind = c->u.update.oldkind == 'O' ? 'O' : 'K';
		part->u.delete.oldtup = c->u.update.oldkind != 0 ? c->u.update.oldtup : c->u.update.newtup;
	}
	else
	{
		/* the row enters the copied keys: inserted whole */
		part->kind = ASH_CHANGE_INSERT;
		part->u.insert.relid = c->u.update.relid;
		part->u.insert.newtup = c->u.update.newtup;
		if (c->u.update.oldkind == 'O')
			merge_unchanged(&part->u.insert.newtup, &c->u.update.oldtup, false);
	}
	return part;
}

static void
apply_row_change(AshChange *c)
{
	AshChange	part;
	AshApplyRel *rel;
	const AshApplyStrategy *strategy;
	AshOwnerScope owner_scope;
	uint32		relid;
	char	   *told = NULL;
	char	   *tnew = NULL;

	relid = row_change_relid(c);
	require_xact(ash_apply_errctx.command);
	meta.ordinal++;
	pending.received_changes++;
	if (skip_xact || origin_skipped)
	{
		pending.skipped_changes++;
		return;
	}
	rel = rel_for_change(relid);
	if (rel == NULL || below_floor(rel))
	{
		pending.skipped_changes++;
		return;
	}
	/* the new row's key, where the update left it unchanged: the old key's */
	if (c->kind == ASH_CHANGE_UPDATE && c->u.update.oldkind == 'K')
		merge_unchanged(&c->u.update.newtup, &c->u.update.oldtup, true);
	if (meta.snapshot_attempt == NULL && ash_incr_judging())
	{
		c = incremental_part(rel, c, &part);
		if (c == NULL)
		{
			pending.skipped_changes++;
			return;
		}
	}
	/* a description's columns, before the first change applied under it */
	if (!rel->columns_recorded)
		ash_source_columns_judge(rel, apply_cfg,
								 meta.snapshot_attempt == NULL ?
								 (ash_incr_judging() && ash_incr_marks_seen(rel) ?
								  ASH_COLUMNS_STREAM_COPYING : ASH_COLUMNS_STREAM) :
								 meta.snapshot_whole ? ASH_COLUMNS_WHOLE_COPY : ASH_COLUMNS_CHUNK);
	ash_apply_errctx.relation = rel->target_name;
	strategy = strategy_for(rel);
	if (TransactionIdIsValid(stream_xid))
		stream_note_change(strategy == &ash_scd1_strategy, c->xid);
	/* only SCD1 defers inserts: anything else keeps the source's order */
	if (strategy != &ash_scd1_strategy)
		flush_deferred();

	if (c->kind == ASH_CHANGE_UPDATE && c->u.update.oldkind == 'O')
		merge_unchanged(&c->u.update.newtup, &c->u.update.oldtup, false);
	if (c->kind == ASH_CHANGE_DELETE && c->u.delete.oldkind == 0)
		ash_halt("protocol_violation", "delete without an old key");

	PushActiveSnapshot(GetTransactionSnapshot());
	as_owner_begin(&owner_scope);
	if (rel->tenant_mode != ASH_TENANT_NONE)
		resolve_change_tenants(rel, c, &told, &tnew);
	switch (c->kind)
	{
		case ASH_CHANGE_INSERT:
			apply_insert(rel, strategy, c, tnew);
			table_stats_count(rel, target_for(rel, tnew), tnew, STAT_INSERTED);
			break;
		case ASH_CHANGE_UPDATE:
			apply_update(rel, strategy, c, told, tnew);
			table_stats_count(rel, target_for(rel, tnew), tnew, STAT_UPDATED);
			break;
		default:
			apply_delete(rel, strategy, c, told);
			table_stats_count(rel, target_for(rel, told), told, STAT_DELETED);
			break;
	}
	ash_owner_scope_exit(&owner_scope);
	PopActiveSnapshot();
	pending.applied_changes++;
	batch_changes++;
}

static void
apply_truncate(AshChange *c)
{
	AshOwnerScope owner_scope;

	require_xact("truncate");
	meta.ordinal++;
	ash_apply_errctx.command = "truncate";
	pending.received_changes++;
	if (skip_xact || origin_skipped)
	{
		pending.skipped_changes++;
		return;
	}
	for (int i = 0; i < c->u.truncate.nrelids; i++)
	{
		AshApplyRel *rel = rel_for_change(c->u.truncate.relids[i]);
		StringInfoData keep;
		int			nkeep = 0;
		Oid		   *keep_types = NULL;
		Datum	   *keep_values = NULL;
		bool		keeps = false;

		if (rel == NULL)
			continue;			/* ignored source: truncate ignored too */
		ash_apply_errctx.relation = rel->target_name;
		if (!below_floor(rel) && meta.snapshot_attempt == NULL && ash_incr_judging())
		{
			initStringInfo(&keep);
			keeps = ash_incr_truncate_keep(rel, meta.xid, &keep, &nkeep, &keep_types,
										   &keep_values);
		}
		if (below_floor(rel))
			continue;			/* its copy was taken after this truncate */

		/*
		 * An incremental chunk copied rows written after the truncate: a
		 * mirror keeps them (the truncate removes every other row);
		 * closing versions cannot keep a chunk's version apart from the
		 * history it closed.
		 */
		if (keeps && strcmp(rel->map->on_truncate, "halt") != 0 &&
			!(strcmp(rel->map->on_truncate, "mirror") == 0 &&
			  strategy_for(rel) == &ash_scd1_strategy))
			ash_halt("snapshot_state_invalid",
					 "a TRUNCATE of %s that a chunk copied after, under on_truncate %s of a history: reset the checkpoint to copy it again",
					 rel->target_name, rel->map->on_truncate);
		if (TransactionIdIsValid(stream_xid))
			stream_note_change(strategy_for(rel) == &ash_scd1_strategy, c->xid);
		if (strcmp(rel->map->on_truncate, "halt") != 0 &&
			rel->tenant_mode == ASH_TENANT_CONTEXT)
			ash_halt("mapping_unsupported",
					 "on_truncate %s of %s under context tenancy (tenant tables are not enumerable)",
					 rel->map->on_truncate, rel->target_name);
		/* a registration from before such sharing was refused, or racing */
		if (ash_config_truncates_shared(rel->map))
			ash_halt("mapping_unsupported",
					 "on_truncate %s of %s, which another sink maps too (its rows would go)",
					 rel->map->on_truncate, rel->target_name);
		/* mirror (SCD1, SCD2), close (SCD2), append (append log) */
		if ((strcmp(rel->map->on_truncate, "mirror") == 0 &&
			 strategy_for(rel) != &ash_append_strategy) ||
			(strcmp(rel->map->on_truncate, "close") == 0 &&
			 strategy_for(rel) == &ash_scd2_strategy) ||
			(strcmp(rel->map->on_truncate, "append") == 0 &&
			 strategy_for(rel) == &ash_append_strategy))
		{
			AshOwnerScope table_scope;

			PushActiveSnapshot(GetTransactionSnapshot());
			as_owner_begin(&owner_scope);
			ash_apply_target_enter(rel->target_default, &table_scope);
			if (keeps)
			{
				ash_scd1_truncate_keeping(rel, rel->target_default, keep.data, nkeep,
										  keep_types, keep_values);
				ereport(LOG,
						(errmsg("ash_replicant event=snapshot.truncate_kept_chunks sink=%s table=%s",
								apply_cfg->sink_name,
								quote_qualified_identifier(rel->remote.nspname, rel->remote.relname))));
			}
			else
				strategy_for(rel)->truncate(rel, rel->target_default);
			ash_apply_target_exit(&table_scope);
			ash_owner_scope_exit(&owner_scope);
			PopActiveSnapshot();
			table_stats_count(rel, rel->target_default, NULL, STAT_TRUNCATED);
		}
		else if (strcmp(rel->map->on_truncate, "halt") == 0)
			ash_halt("source_truncate", "table %s has on_truncate halt", rel->target_name);
		else
			ash_halt("mapping_unsupported", "on_truncate %s on %s",
					 rel->map->on_truncate, rel->target_name);
	}
	pending.applied_changes++;
}

/*
 * A logical message (messages.c).  A transactional one rides its
 * transaction (commit LSN, shared ordinal).  A non-transactional one
 * arrives between transactions and is applied at its own position (its
 * LSN, ordinal 0) in a batch of its own: effect, claim and watermark
 * commit together (pipeline.c commits the batch right after it).
 *
 * Its LSN is the END of its WAL record, which is also where the next
 * record starts -- possibly the commit record of a transaction that is
 * delivered next and whose commit LSN is then equal.  So the watermark of
 * a message at LSN E is E - 1: below every later commit, above every
 * earlier one; a message with E - 1 at or below the watermark was applied
 * before.
 */
static void
apply_message(AshChange *c)
{
	const char *prefix = c->u.message.prefix;
	bool		transactional = c->u.message.transactional;
	AshMessageRoute *route;
	bool		ignored = ash_list_contains_str(apply_cfg->ignored_prefixes, prefix) ||
		strcmp(prefix, ASH_MESSAGE_PREFIX_FLUSH) == 0;

	ash_apply_errctx.command = "message";
	ash_apply_errctx.relation = NULL;

	/*
	 * A message needs its commit LSN; between blocks it would commit them.
	 * One without effect (an ignored prefix: a tool's heartbeat) needs
	 * neither.
	 */
	if (TransactionIdIsValid(stream_xid) && !ignored)
		stream_fall_back("message");
	if (transactional)
	{
		require_xact("transactional message");
		meta.ordinal++;
		if (skip_xact || origin_skipped)
			return;
	}
	else
	{
		if (in_remote_xact)
			ash_halt("protocol_violation", "non-transactional message inside a transaction");
		if (c->u.message.lsn - 1 <= watermark ||
			(batch_open && batch_xacts > 0 && c->u.message.lsn - 1 <= batch_commit_lsn))
			return;				/* applied before */
	}
	if (ignored)
		return;					/* acknowledged, no effect */
	route = ash_message_route(apply_cfg, prefix);
	/* the prefix itself is message content: never printed */
	if (route == NULL)
		ash_halt("message_prefix_unmapped", "a logical message with an unrouted prefix");

	if (!transactional)
	{
		if (!batch_open)
			begin_batch();
		meta.commit_lsn = c->u.message.lsn;
		meta.commit_time = GetCurrentTimestamp();
		meta.xid = InvalidTransactionId;
		meta.ordinal = 0;
		meta.origin = "stream";
		ash_apply_errctx.commit_lsn = c->u.message.lsn;
		ash_apply_errctx.xid = InvalidTransactionId;
		pending.received_xacts++;
		pending.received_changes++;
	}
	if (ash_config_is_append_log(apply_cfg))
	{
		/* an event of the append log, written as the sink owner */
		PushActiveSnapshot(GetTransactionSnapshot());
		ash_append_message(apply_cfg, route->target, prefix,
						   c->u.message.content, c->u.message.content_len);
		PopActiveSnapshot();
	}
	else
		ash_message_apply(apply_cfg, apply_key, route, prefix,
						  c->u.message.content, c->u.message.content_len,
						  meta.commit_lsn, meta.ordinal);
	pending.applied_changes++;
	if (!transactional)
	{
		batch_commit_lsn = c->u.message.lsn - 1;
		batch_end_lsn = c->u.message.lsn - 1;
		batch_commit_time = meta.commit_time;
		batch_xacts++;
	}
}

/* ---------------------------------------------------------------------
 * Streamed (in-progress) transactions.
 *
 * With pipelines.streaming the source sends a large transaction in blocks
 * while it is still running (STREAM START ... STREAM STOP), then STREAM
 * COMMIT or STREAM ABORT.  Each block is applied as it arrives, in one
 * destination transaction that the STREAM COMMIT commits with the
 * watermark like any other; nothing is acknowledged before that.  So the
 * apply overlaps the source's decoding instead of waiting for the whole
 * transaction, and no spool is written.
 *
 * That holds while the streamed transaction is the only one in flight and
 * only mirrors (SCD1) see it.  Whatever breaks it -- a transaction that
 * commits in between (it must land first), a second streamed transaction,
 * an aborted subtransaction whose changes were applied, a history or
 * append-log target or a message (they record the commit LSN, unknown
 * until the end) -- rolls the destination transaction back and the
 * pipeline streams again from its checkpoint without streaming
 * (stream_fall_back): the transaction then arrives whole, after its
 * commit.  Nothing was committed, so nothing is applied twice.
 * ---------------------------------------------------------------------
 */
static void
stream_fall_back(const char *reason)
{
	ash_apply_stream_fallback = reason;
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("ash_replicant: a streamed transaction cannot be applied as it arrives (%s)",
					reason)));
}

/* A change of the streamed transaction (or of one of its subtransactions). */
static void
stream_note_change(bool mirror_target, TransactionId xid)
{
	if (!mirror_target)
		stream_fall_back("history_target");
	if (xid == stream_xid || !TransactionIdIsValid(xid))
		return;
	if (stream_nsubxids > 0 && stream_subxids[stream_nsubxids - 1] == xid)
		return;					/* changes of one subtransaction come together */
	for (int i = 0; i < stream_nsubxids; i++)
		if (stream_subxids[i] == xid)
			return;
	if (stream_nsubxids == stream_maxsubxids)
	{
		stream_maxsubxids = Max(16, stream_maxsubxids * 2);
		stream_subxids = stream_subxids == NULL ?
			MemoryContextAlloc(TopMemoryContext, stream_maxsubxids * sizeof(TransactionId)) :
			repalloc(stream_subxids, stream_maxsubxids * sizeof(TransactionId));
	}
	stream_subxids[stream_nsubxids++] = xid;
}

static void
stream_start(AshChange *c)
{
	TransactionId xid = c->u.stream_start.xid;

	if (in_remote_xact)
		ash_halt("protocol_violation", "stream start inside a transaction");
	if (TransactionIdIsValid(stream_xid))
	{
		if (xid != stream_xid)
			stream_fall_back("interleaved");
		in_remote_xact = true;	/* the next block of the same transaction */
		return;
	}
	/* a later block of a transaction whose start this session did not see */
	if (!c->u.stream_start.first_segment)
		stream_fall_back("resumed");

	/* the pipeline commits a pending batch first: this one may roll back */
	Assert(!ash_apply_batch_pending());
	stream_xid = xid;
	stream_nsubxids = 0;
	in_remote_xact = true;
	skip_xact = false;
	origin_skipped = false;
	xact_final_lsn = InvalidXLogRecPtr;
	meta.commit_lsn = InvalidXLogRecPtr;	/* known at STREAM COMMIT */
	meta.commit_time = 0;
	meta.xid = xid;
	meta.ordinal = 0;
	meta.origin = "stream";
	ash_apply_errctx.commit_lsn = InvalidXLogRecPtr;
	ash_apply_errctx.xid = xid;
	ash_apply_errctx.relation = NULL;
	ash_apply_errctx.command = "stream";
	pending.received_xacts++;
	if (!batch_open)
		begin_batch();
}

/*
 * Roll back the open destination transaction (if any) and forget the
 * source transaction it held: after an error, or a streamed transaction
 * the source aborted or had already delivered.
 */
static void
roll_back(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	if (ash_scd1_strategy.discard)
		ash_scd1_strategy.discard();
	AbortCurrentTransaction();
	ash_owner_scope_reset();
	MemoryContextSwitchTo(cxt);
	batch_open = false;
	batch_xacts = 0;
	in_remote_xact = false;
	skip_xact = false;
	origin_skipped = false;
	stream_xid = InvalidTransactionId;
	stream_nsubxids = 0;
	missing_deletes = NIL;
	forget_streamed_notes();
	table_stats_discard();
	meta.origin = "stream";
	meta.snapshot_attempt = NULL;
	ash_provenance_discard();
	ash_bulk_release();
	fresh_relid = InvalidOid;
	/* what the rolled-back transaction resolved may not exist any more */
	ash_relmap_invalidate_resolutions();
}

static void
stream_commit(AshChange *c)
{
	StreamedNote *note;
	MemoryContext old;

	if (in_remote_xact)
		ash_halt("protocol_violation", "stream commit inside a streaming block");
	if (!TransactionIdIsValid(stream_xid) || c->u.stream_commit.xid != stream_xid)
		stream_fall_back("unseen");
	ash_apply_errctx.commit_lsn = c->u.stream_commit.commit_lsn;
	ash_relmap_stream_ended(c->u.stream_commit.xid, true);
	if (c->u.stream_commit.commit_lsn <= watermark)
	{
		/* applied before this session (redelivered after a restart) */
		roll_back();
		pending.skipped_xacts++;
		return;
	}
	stream_xid = InvalidTransactionId;
	batch_commit_lsn = c->u.stream_commit.commit_lsn;
	batch_end_lsn = c->u.stream_commit.end_lsn;
	batch_commit_time = c->u.stream_commit.commit_time;
	batch_xacts++;
	/* one line per large transaction once its batch commits (commit_batch) */
	old = MemoryContextSwitchTo(TopMemoryContext);
	note = palloc(sizeof(StreamedNote));
	note->commit_lsn = batch_commit_lsn;
	note->changes = batch_changes;
	streamed_notes = lappend(streamed_notes, note);
	MemoryContextSwitchTo(old);
}

static void
stream_abort(AshChange *c)
{
	TransactionId xid = c->u.stream_abort.xid;
	TransactionId subxid = c->u.stream_abort.subxid;

	if (in_remote_xact)
		ash_halt("protocol_violation", "stream abort inside a streaming block");
	if (subxid == xid)
		ash_relmap_stream_ended(xid, false);
	if (!TransactionIdIsValid(stream_xid))
		return;					/* nothing of it was applied */
	if (xid != stream_xid)
		stream_fall_back("interleaved");
	if (subxid == xid)
	{
		roll_back();
		pending.skipped_xacts++;
		return;
	}
	for (int i = 0; i < stream_nsubxids; i++)
		if (stream_subxids[i] == subxid)
			stream_fall_back("subtransaction_abort");
	/* an aborted subtransaction none of whose changes was applied */
}

/*
 * Execute what strategies deferred (multi-row inserts), inside the sink
 * owner's scope; each run is written in its table's (scd1_flush).
 */
static void
flush_deferred(void)
{
	AshOwnerScope owner_scope;

	if (!batch_open || !ash_scd1_strategy.flush)
		return;
	as_owner_begin(&owner_scope);
	ash_provenance_resolve();	/* snapshot rows waiting for their probe */
	ash_scd1_strategy.flush();
	ash_owner_scope_exit(&owner_scope);
}

/*
 * Gathered rows wait for their batch's end, to be written together.  A
 * source that commits one small transaction at a time sends its messages
 * one by one (each of the walsender's writes is a send of its own), so the
 * worker often reads a transaction's BEGIN and rows some tens of
 * microseconds before its COMMIT is even sent, and then waits for it.
 * Written in that wait, the rows are off the path from the COMMIT to the
 * commit here -- where the source's sessions wait, when it waits for us,
 * and where its rows become visible.  Not inside a streamed (in-progress)
 * transaction, which applies as it arrives anyway.  The rows' provenance
 * stamps, if any, still follow at the batch's end.
 *
 * Only in a small transaction (at most EARLY_WRITE_MAX_CHANGES changes so
 * far) once what was received reaches within EARLY_WRITE_TAIL bytes of WAL
 * of its commit record (a message's WAL position is its change's record):
 * a large transaction pauses whenever the walsender is still decoding it,
 * and writing at each of those pauses cut its runs into many small ones
 * (test 017 saw a 1,000-row transaction written in 114 pieces, 29 of one
 * row).  Near a small transaction's end, the write is the one its COMMIT
 * would have made, only sooner.
 */
#define EARLY_WRITE_MAX_CHANGES 16
#define EARLY_WRITE_TAIL 1024

void
ash_apply_write_gathered(XLogRecPtr received)
{
	MemoryContext old;

	if (!in_remote_xact || TransactionIdIsValid(stream_xid) || !batch_open ||
		meta.ordinal > EARLY_WRITE_MAX_CHANGES || XLogRecPtrIsInvalid(xact_final_lsn) ||
		received + EARLY_WRITE_TAIL < xact_final_lsn)
		return;
	old = MemoryContextSwitchTo(change_cxt);
	flush_deferred();
	MemoryContextSwitchTo(old);
	MemoryContextReset(change_cxt);
}

/* Deferred writes, then the provenance stamps of their rows. */
void
ash_apply_flush_deferred(void)
{
	AshOwnerScope owner_scope;

	flush_deferred();
	as_owner_begin(&owner_scope);
	ash_provenance_flush();
	ash_owner_scope_exit(&owner_scope);
}

void
ash_apply_change(AshChange *c)
{
	MemoryContext old = MemoryContextSwitchTo(change_cxt);

	/*
	 * Gathered row writes (apply_scd1.c) may span source transactions of
	 * one batch: they commit together, and the batch commit flushes them.
	 * Row changes decide themselves (the strategy flushes what it cannot
	 * gather); anything else with an effect, or a relation or type change
	 * that may redefine what is gathered, flushes first.
	 */
	if (c->kind != ASH_CHANGE_INSERT && c->kind != ASH_CHANGE_UPDATE &&
		c->kind != ASH_CHANGE_DELETE && c->kind != ASH_CHANGE_BEGIN &&
		c->kind != ASH_CHANGE_COMMIT && c->kind != ASH_CHANGE_ORIGIN &&
		c->kind != ASH_CHANGE_STREAM_START && c->kind != ASH_CHANGE_STREAM_STOP &&
		c->kind != ASH_CHANGE_STREAM_ABORT)
		flush_deferred();

	switch (c->kind)
	{
		case ASH_CHANGE_BEGIN:
			if (in_remote_xact)
				ash_halt("protocol_violation", "BEGIN inside a transaction");
			/* it commits before the streamed one, which holds the batch */
			if (TransactionIdIsValid(stream_xid))
				stream_fall_back("interleaved");
			in_remote_xact = true;
			origin_skipped = false;
			/* wal2json says the origin in BEGIN, the others in ORIGIN */
			if (c->u.begin.origin_id != 0 && apply_cfg->origin_none)
				origin_skipped = true;
			xact_final_lsn = c->u.begin.final_lsn;
			meta.commit_lsn = c->u.begin.final_lsn;
			meta.commit_time = c->u.begin.commit_time;
			meta.xid = c->u.begin.xid;
			meta.ordinal = 0;
			meta.origin = "stream";
			ash_apply_errctx.commit_lsn = xact_final_lsn;
			ash_apply_errctx.xid = c->u.begin.xid;
			ash_apply_errctx.relation = NULL;
			ash_apply_errctx.command = "begin";
			pending.received_xacts++;
			skip_xact = (xact_final_lsn <= watermark ||
						 (batch_open && batch_xacts > 0 && xact_final_lsn <= batch_commit_lsn));
			if (!skip_xact && !batch_open)
				begin_batch();
			break;

		case ASH_CHANGE_COMMIT:
			require_xact("COMMIT");
			if (c->u.commit.commit_lsn != xact_final_lsn)
				ash_halt("protocol_violation", "COMMIT does not match its BEGIN");
			in_remote_xact = false;
			if (skip_xact)
			{
				pending.skipped_xacts++;
				skip_xact = false;
				break;
			}
			batch_commit_lsn = c->u.commit.commit_lsn;
			batch_end_lsn = c->u.commit.end_lsn;
			batch_commit_time = c->u.commit.commit_time;
			batch_xacts++;
			break;

		case ASH_CHANGE_RELATION:
			/* a streamed transaction's commit position is not known yet */
			ash_relmap_update_relation(&c->u.relation, c->xid,
									   in_remote_xact && !TransactionIdIsValid(c->xid) ?
									   xact_final_lsn : InvalidXLogRecPtr);
			break;

		case ASH_CHANGE_TYPE:
			ash_relmap_update_type(c->u.type.type_oid, c->u.type.nspname, c->u.type.typname);
			break;

		case ASH_CHANGE_ORIGIN:

			/*
			 * The source's change was itself replicated (by a pipeline of
			 * ours or a subscription): with origin => 'none' it is not
			 * mirrored, so servers mirroring each other never send a change
			 * around for ever.
			 */
			require_xact("origin");
			if (apply_cfg->origin_none)
				origin_skipped = true;
			break;

		case ASH_CHANGE_INSERT:
		case ASH_CHANGE_UPDATE:
		case ASH_CHANGE_DELETE:
			apply_row_change(c);
			break;

		case ASH_CHANGE_TRUNCATE:
			apply_truncate(c);
			break;

		case ASH_CHANGE_MESSAGE:
			apply_message(c);
			break;

		case ASH_CHANGE_STREAM_START:
			stream_start(c);
			break;

		case ASH_CHANGE_STREAM_STOP:
			if (!TransactionIdIsValid(stream_xid) || !in_remote_xact)
				ash_halt("protocol_violation", "stream stop outside a streamed transaction");
			in_remote_xact = false;
			break;

		case ASH_CHANGE_STREAM_COMMIT:
			stream_commit(c);
			break;

		case ASH_CHANGE_STREAM_ABORT:
			stream_abort(c);
			break;
	}

	MemoryContextSwitchTo(old);
	MemoryContextReset(change_cxt);
}

/* ---------------------------------------------------------------------
 * Batch end.
 * ---------------------------------------------------------------------
 */
/*
 * What the owner's code left for the commit would run there, after the
 * owner's scope, as the worker's superuser: deferred triggers its writes
 * queued (a DEFERRABLE constraint trigger on a target, a deferred foreign
 * key) fire at commit, and a WITH HOLD cursor it declared runs the rest of
 * its query there.  So, inside the scope, the deferred triggers fire (their
 * failures are the transaction's, as at the commit) and every cursor is
 * closed (CLOSE ALL: the worker keeps none of its own across statements).
 * The scope is not security-restricted: that would refuse the deferred
 * triggers themselves.
 *
 * They fire as the sink owner, whatever table queued them.  That is safe
 * only because the one kind of table whose owner's code must not run as
 * the sink owner -- one written as its own owner (ash_apply_target_enter:
 * the owner lacks the sink owner's privileges) -- cannot queue any: its
 * writes are security-restricted, and PostgreSQL refuses a deferred
 * trigger there (42501, apply_failed; test 212).  Every event queued here
 * is of a table whose owner has the sink owner's privileges.
 */
static void
fire_deferred_as_owner(void)
{
	AshOwnerScope owner_scope;

	ash_apply_errctx.command = "commit";
	ash_apply_errctx.relation = NULL;
	as_owner_begin(&owner_scope);
	AfterTriggerFireDeferred();
	PerformPortalClose(NULL);
	ash_owner_scope_exit(&owner_scope);
}

static void
advance_checkpoint(void)
{
	ash_apply_errctx.command = "checkpoint";
	ash_apply_errctx.relation = NULL;
	ash_checkpoint_advance(apply_key, batch_commit_lsn, batch_end_lsn);
}

/*
 * The committed writes, into PostgreSQL's cumulative statistics.  A client
 * backend's main loop reports them; a background worker must, or
 * autovacuum and autoanalyze never learn that a mirrored table changed
 * (pg_stat_user_tables stays at zero until the worker exits).  PostgreSQL
 * flushes at most once a second; what that holds back goes out with a later
 * commit or, once the stream is quiet for a second, from the idle loop.
 */
static TimestampTz pgstat_held_since = 0;

static void
report_pgstat(bool idle)
{
	if (idle)
	{
		if (pgstat_held_since == 0 ||
			!TimestampDifferenceExceeds(pgstat_held_since, GetCurrentTimestamp(), 1000))
			return;
		(void) pgstat_report_stat(true);
		pgstat_held_since = 0;
	}
	else if (pgstat_report_stat(false) == 0)
		pgstat_held_since = 0;
	else if (pgstat_held_since == 0)
		pgstat_held_since = GetCurrentTimestamp();
}

static void
publish_stats(void)
{
	if (apply_slot == NULL)
		return;
	SpinLockAcquire(&apply_slot->mutex);
	apply_slot->stats.received_xacts += pending.received_xacts;
	apply_slot->stats.applied_xacts += pending.applied_xacts;
	apply_slot->stats.skipped_xacts += pending.skipped_xacts;
	apply_slot->stats.received_changes += pending.received_changes;
	apply_slot->stats.applied_changes += pending.applied_changes;
	apply_slot->stats.skipped_changes += pending.skipped_changes;
	apply_slot->stats.missing_row_deletes += pending.missing_row_deletes;
	apply_slot->stats.batches += pending.batches;
	apply_slot->stats.applied_lsn = watermark;
	if (pending.last_commit_time)
		apply_slot->stats.last_commit_time = pending.last_commit_time;
	SpinLockRelease(&apply_slot->mutex);
	memset(&pending, 0, sizeof(pending));
}

AshBatchResult
ash_apply_commit_batch(bool durable)
{
	AshBatchResult r = {0};
	ListCell   *lc;
	MemoryContext cxt = CurrentMemoryContext;

	Assert(ash_apply_batch_pending());
	ash_apply_flush_deferred();	/* and seen-marks of streamed rows */
	ash_encrypt_versions_check();
	table_stats_flush();
	advance_checkpoint();
	fire_deferred_as_owner();

	foreach(lc, missing_deletes)
	{
		MissingDelete *md = lfirst(lc);

		ereport(LOG,
				(errmsg("ash_replicant event=apply.delete_missing sink=%s table=%s count=" UINT64_FORMAT " commit_lsn=%X/%X",
						apply_cfg->sink_name, md->relation, md->count,
						LSN_FORMAT_ARGS(batch_commit_lsn))));
	}

	SPI_finish();
	/* the origin's progress: informational, the checkpoint row rules */
	ash_origin_set_progress(batch_end_lsn, batch_commit_time);

	/*
	 * Flushed by the commit itself, as a synchronous commit is: an
	 * asynchronous one would wake the WAL writer to write what a flush
	 * right after it writes again.
	 */
	if (durable)
		ForceSyncCommit();
	CommitTransactionCommand();
	ash_origin_set_progress(InvalidXLogRecPtr, 0);
	MemoryContextSwitchTo(cxt);
	report_pgstat(false);
	batch_open = false;
	missing_deletes = NIL;

	/* what streaming did, for operators: only what is now committed */
	foreach(lc, streamed_notes)
	{
		StreamedNote *note = lfirst(lc);

		ereport(LOG,
				(errmsg("ash_replicant event=apply.streamed sink=%s commit_lsn=%X/%X changes=" INT64_FORMAT,
						apply_cfg->sink_name, LSN_FORMAT_ARGS(note->commit_lsn), note->changes)));
	}
	forget_streamed_notes();

	r.committed = true;
	r.remote_end = batch_end_lsn;
	r.local_end = XactLastCommitEnd;
	watermark = batch_commit_lsn;
	watermark_end = batch_end_lsn;
	if (floors != NIL)
		prune_floors();
	r.xacts = batch_xacts;
	pending.applied_xacts += batch_xacts;
	pending.batches++;
	pending.last_commit_time = batch_commit_time;
	batch_xacts = 0;
	publish_stats();
	return r;
}

/* ---------------------------------------------------------------------
 * Snapshot copy (snapshot.c; an incremental chunk: snapshot_incr.c).
 *
 * A table's copied rows are inserts of one pseudo-transaction that
 * commits at a position below every commit the stream may still deliver
 * for that table and above every version the target holds, so SCD2
 * versions opened by the copy are closed by later stream changes, never
 * taken for history past them: v1, LSN - 1 of the source snapshot's
 * position; an incremental chunk, the stream's watermark + 1
 * (snapshot_incr.c).  Neither is ever a commit record's (they start
 * 8-byte aligned), so append-log events (operation snapshot, origin
 * snapshot) never share an identity with a streamed event.  Ordinals
 * continue across the tables copied at one LSN.
 * The copy owns the destination transaction from begin to commit; the
 * caller records its progress in it between flush and commit.
 * ---------------------------------------------------------------------
 */
void
ash_apply_snapshot_begin(XLogRecPtr position, int32 ordinal_base, bytea *attempt, bool whole)
{
	Assert(!batch_open && !in_remote_xact);
	begin_batch();
	in_remote_xact = true;
	skip_xact = false;
	meta.commit_lsn = position;
	meta.commit_time = GetCurrentTimestamp();
	meta.xid = InvalidTransactionId;
	meta.ordinal = ordinal_base;
	meta.origin = "snapshot";
	meta.snapshot_attempt = attempt;
	meta.snapshot_whole = whole;
	ash_apply_errctx.commit_lsn = meta.commit_lsn;
	ash_apply_errctx.xid = InvalidTransactionId;
	ash_apply_errctx.relation = NULL;
	ash_apply_errctx.command = "snapshot";
}

/*
 * A snapshot writes each source row once, and the source's key names one
 * target identity with the tenant column (coverage.c).  So under attribute
 * tenancy with the tenant outside the identity, a copy into a fresh target
 * (rows written without the upsert, which would tell: apply_scd1.c) that
 * violates the identity's unique index -- as a row goes in, or when the
 * index is built after the rows -- copied one identity that rows of two
 * tenants hold at the source: tenant_conflict, whose advice fits, not
 * apply_failed.  (Only a session writing the mirror's table during its
 * copy could cause the same.)  The index and target are looked up before
 * the write: the catch reads only the error.
 */
static char *copy_guard_index = NULL;
static char *copy_guard_schema = NULL;
static char *copy_guard_table = NULL;
static char *copy_guard_target = NULL;
static LocalTransactionId copy_guard_lxid = InvalidLocalTransactionId;

static bool
copy_guard_armed(void)
{
	return copy_guard_target != NULL && copy_guard_lxid == MyProc->lxid;
}

static void
copy_guard_arm(AshApplyRel *rel, AshApplyTarget *tgt)
{
	MemoryContext old;
	Oid			index = rel->spec != NULL ? rel->spec->identity_index : InvalidOid;

	if (copy_guard_armed() && strcmp(copy_guard_table, tgt->relname) == 0 &&
		strcmp(copy_guard_schema, tgt->nspname) == 0)
		return;
	old = MemoryContextSwitchTo(TopTransactionContext);
	copy_guard_index = OidIsValid(index) ? get_rel_name(index) : NULL;
	copy_guard_schema = pstrdup(tgt->nspname);
	copy_guard_table = pstrdup(tgt->relname);
	copy_guard_target = pstrdup(tgt->log_name);
	copy_guard_lxid = MyProc->lxid;
	MemoryContextSwitchTo(old);
}

/* In PG_CATCH, the error's data copied: halt if it is the copy's own identity. */
static void
copy_guard_judge(ErrorData *edata)
{
	if (edata->sqlerrcode != ERRCODE_UNIQUE_VIOLATION || copy_guard_index == NULL ||
		edata->constraint_name == NULL || edata->schema_name == NULL ||
		edata->table_name == NULL ||
		strcmp(edata->constraint_name, copy_guard_index) != 0 ||
		strcmp(edata->schema_name, copy_guard_schema) != 0 ||
		strcmp(edata->table_name, copy_guard_table) != 0)
		return;
	FlushErrorState();
	ash_halt("tenant_conflict", "rows of two tenants hold one identity in %s", copy_guard_target);
}

static void
copy_guarded(void (*fn) (void *arg), void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		fn(arg);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		copy_guard_judge(edata);
		FreeErrorData(edata);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

void
ash_apply_copy_write(AshApplyRel *rel, AshApplyTarget *tgt, void (*fn) (void *arg), void *arg)
{
	if (meta.snapshot_attempt == NULL || !ash_tenant_scoped(rel))
	{
		fn(arg);
		return;
	}
	copy_guard_arm(rel, tgt);
	copy_guarded(fn, arg);
}

static void
build_indexes(void *arg)
{
	ash_bulk_build_indexes();
}

int32
ash_apply_snapshot_flush(void)
{
	Assert(batch_open && in_remote_xact);
	ash_apply_flush_deferred();
	ash_bulk_release();
	/* the fresh target's index build judges what its rows' writes did not */
	if (copy_guard_armed())
		copy_guarded(build_indexes, NULL);
	else
		ash_bulk_build_indexes();
	return meta.ordinal;
}

void
ash_apply_snapshot_fresh(Oid relid, bool indexes_after)
{
	Assert(batch_open && meta.snapshot_attempt != NULL);
	fresh_relid = relid;
	fresh_lxid = MyProc->lxid;
	fresh_indexes_after = indexes_after;
}

bool
ash_apply_fresh_target(Oid relid)
{
	return OidIsValid(relid) && relid == fresh_relid && fresh_lxid == MyProc->lxid;
}

bool
ash_apply_indexes_after(Oid relid)
{
	return fresh_indexes_after && ash_apply_fresh_target(relid);
}

/*
 * Retire what the snapshot of m did not see, inside the sink owner's scope
 * (each table as its owner allows: ash_provenance_retire).
 * nothing_past: no version of an SCD2 target can be past close_lsn but the
 * snapshot's own (ash_provenance_retire).
 */
int64
ash_apply_snapshot_retire(AshMapping *m, XLogRecPtr close_lsn, bool nothing_past)
{
	AshOwnerScope owner_scope;
	int64		rows;
	MemoryContext cxt = CurrentMemoryContext;

	Assert(batch_open && meta.snapshot_attempt != NULL);
	ash_apply_errctx.command = "retire";
	as_owner_begin(&owner_scope);
	rows = ash_provenance_retire(m, meta.snapshot_attempt, close_lsn, nothing_past);
	ash_owner_scope_exit(&owner_scope);
	MemoryContextSwitchTo(cxt);
	return rows;
}

void
ash_apply_snapshot_forget(AshMapping *m, const bytea *attempt)
{
	AshOwnerScope owner_scope;

	ash_apply_errctx.command = "forget";
	as_owner_begin(&owner_scope);
	ash_provenance_forget(m, attempt);
	ash_owner_scope_exit(&owner_scope);
}

XLogRecPtr
ash_apply_snapshot_commit(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	Assert(batch_open && in_remote_xact);
	flush_deferred();
	ash_encrypt_versions_check();
	table_stats_flush();		/* copied rows count as inserted */
	fire_deferred_as_owner();
	SPI_finish();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	report_pgstat(false);
	batch_open = false;
	in_remote_xact = false;
	meta.origin = "stream";
	meta.snapshot_attempt = NULL;
	fresh_relid = InvalidOid;
	missing_deletes = NIL;
	pending.batches++;
	publish_stats();
	return XactLastCommitEnd;
}

void
ash_apply_set_watermark(XLogRecPtr wm, XLogRecPtr wm_end)
{
	Assert(!batch_open);
	watermark = wm;
	watermark_end = wm_end;
	prune_floors();
	publish_stats();
}

bool
ash_apply_error_location(XLogRecPtr *commit_lsn, const char **target)
{
	*commit_lsn = InvalidXLogRecPtr;
	*target = NULL;
	if (!batch_open && !in_remote_xact && !TransactionIdIsValid(stream_xid))
		return false;
	/* a snapshot copy commits at a pseudo LSN: not a source commit */
	if (meta.snapshot_attempt == NULL)
		*commit_lsn = ash_apply_errctx.commit_lsn;
	*target = ash_apply_errctx.relation;
	return true;
}

void
ash_apply_abort(void)
{
	roll_back();
	memset(&pending, 0, sizeof(pending));
	if (change_cxt)				/* a halt may come before ash_apply_init */
		MemoryContextReset(change_cxt);
}

void
ash_apply_publish_idle(void)
{
	if (!batch_open)
	{
		publish_stats();
		report_pgstat(true);
	}
}
