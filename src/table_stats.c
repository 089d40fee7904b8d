/*-------------------------------------------------------------------------
 *
 * table_stats.c
 *	  Adding a batch's per-table counts to their ash_replicant.table_stats
 *	  rows in place.
 *
 *	  Every batch writes its counts in its own transaction (apply.c), so on
 *	  a trickle of one-transaction batches the statement doing it cost
 *	  about as much as applying the rows: planning checks, executor start,
 *	  the upsert's speculative insertion.  A row that exists -- every batch
 *	  after a table's first -- is found through its unique index, locked,
 *	  and updated the way PostgreSQL updates its own catalog rows (a HOT
 *	  update when the page has room, index entries otherwise).  Its keys
 *	  never change, so nothing else needs checking: the catalog has no
 *	  triggers, the sink's foreign key is untouched, and row-level security
 *	  does not apply to the worker.  A missing row, and a row a concurrent
 *	  ash_replicant_reset_table_stats deleted, go through SQL instead,
 *	  which checks the foreign key on insert.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_index.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "table_stats.h"

#define NKEYS 3

/* the columns written, by name: the catalog's layout is the update scripts' */
static const char *const key_names[NKEYS] = {"sink_name", "target", "tenant"};
static const char *const count_names[4] = {"inserted", "updated", "deleted", "truncated"};

/* The unique index on exactly (sink_name, target, tenant), or InvalidOid. */
static Oid
key_index(Relation rel, const AttrNumber *keys)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index ix = idx->rd_index;
		bool		match = ix->indisunique && ix->indimmediate && ix->indisvalid &&
			ix->indnkeyatts == NKEYS && ix->indnatts == NKEYS &&
			RelationGetIndexExpressions(idx) == NIL &&
			RelationGetIndexPredicate(idx) == NIL;

		for (int k = 0; match && k < NKEYS; k++)
			match = ix->indkey.values[k] == keys[k];
		index_close(idx, AccessShareLock);
		if (match)
		{
			found = lfirst_oid(lc);
			break;
		}
	}
	list_free(indexes);
	return found;
}

/*
 * Where things are, found once per session and again after any relcache
 * invalidation of the catalog (an extension update, DROP/CREATE).
 */
typedef struct StatsLayout
{
	bool		valid;
	Oid			relid;
	Oid			indexoid;		/* InvalidOid: no in-place update */
	AttrNumber	keys[NKEYS];
	AttrNumber	counts[4];
	AttrNumber	target_table;
	AttrNumber	commit_time;
	AttrNumber	applied_at;
} StatsLayout;

static StatsLayout layout;
static bool callback_registered = false;

static void
layout_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == layout.relid)
		layout.valid = false;
}

static bool
layout_load(void)
{
	Oid			nsp;
	Relation	rel;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(layout_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (layout.valid)
		return OidIsValid(layout.indexoid);
	memset(&layout, 0, sizeof(layout));
	nsp = get_namespace_oid("ash_replicant", true);
	layout.relid = OidIsValid(nsp) ? get_relname_relid("table_stats", nsp) : InvalidOid;
	if (!OidIsValid(layout.relid))
		return false;			/* not remembered: look again next time */
	for (int k = 0; k < NKEYS; k++)
		layout.keys[k] = get_attnum(layout.relid, key_names[k]);
	for (int k = 0; k < 4; k++)
		layout.counts[k] = get_attnum(layout.relid, count_names[k]);
	layout.target_table = get_attnum(layout.relid, "target_table");
	layout.commit_time = get_attnum(layout.relid, "last_commit_time");
	layout.applied_at = get_attnum(layout.relid, "last_applied_at");
	rel = table_open(layout.relid, AccessShareLock);
	layout.indexoid = key_index(rel, layout.keys);
	table_close(rel, AccessShareLock);
	if (layout.target_table <= 0 || layout.commit_time <= 0 || layout.applied_at <= 0 ||
		layout.counts[0] <= 0 || layout.counts[1] <= 0 || layout.counts[2] <= 0 ||
		layout.counts[3] <= 0)
		layout.indexoid = InvalidOid;
	layout.valid = true;
	return OidIsValid(layout.indexoid);
}

bool
ash_table_stats_add(const char *sink_name, const char *target, const char *tenant,
					Oid target_table, const int64 counts[4], TimestampTz commit_time,
					TimestampTz applied_at)
{
	Relation	rel;
	TupleDesc	desc;
	ScanKeyData skey[NKEYS];
	Relation	idx;
	Snapshot	snap;
	SysScanDesc scan;
	HeapTuple	tup;
	HeapTuple	old = NULL;
	bool		done = false;

	if (!layout_load())
		return false;
	rel = table_open(layout.relid, RowExclusiveLock);
	desc = RelationGetDescr(rel);

	/* the index orders by its columns' collations: compare under them */
	idx = index_open(layout.indexoid, AccessShareLock);
	for (int k = 0; k < NKEYS; k++)
	{
		const char *v = k == 0 ? sink_name : k == 1 ? target : tenant;

		if (v == NULL)
			ScanKeyEntryInitialize(&skey[k], SK_ISNULL | SK_SEARCHNULL, layout.keys[k],
								   InvalidStrategy, InvalidOid, InvalidOid,
								   InvalidOid, (Datum) 0);
		else
			ScanKeyEntryInitialize(&skey[k], 0, layout.keys[k], BTEqualStrategyNumber,
								   InvalidOid, idx->rd_indcollation[k], F_TEXTEQ,
								   CStringGetTextDatum(v));
	}
	index_close(idx, AccessShareLock);

	snap = RegisterSnapshot(GetLatestSnapshot());
	scan = systable_beginscan(rel, layout.indexoid, true, snap, NKEYS, skey);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		old = heap_copytuple(tup);
	systable_endscan(scan);
	UnregisterSnapshot(snap);

	if (old != NULL)
	{
		HeapTupleData locked;
		Buffer		buf;
		TM_FailureData tmfd;
		TM_Result	res;

		/* a concurrent reset's DELETE waits for us, or we for it */
		locked.t_self = old->t_self;
		res = heap_lock_tuple(rel, &locked, GetCurrentCommandId(true),
							  LockTupleNoKeyExclusive, LockWaitBlock, false, &buf, &tmfd);
		ReleaseBuffer(buf);
		if (res == TM_Ok)
		{
			Datum	   *values = palloc(sizeof(Datum) * desc->natts);
			bool	   *nulls = palloc(sizeof(bool) * desc->natts);
			bool	   *repl = palloc0(sizeof(bool) * desc->natts);
			HeapTuple	newtup;

			heap_deform_tuple(old, desc, values, nulls);
			for (int k = 0; k < 4; k++)
			{
				int			i = layout.counts[k] - 1;

				values[i] = Int64GetDatum((nulls[i] ? 0 : DatumGetInt64(values[i])) + counts[k]);
				nulls[i] = false;
				repl[i] = true;
			}
			if (OidIsValid(target_table))
			{
				values[layout.target_table - 1] = ObjectIdGetDatum(target_table);
				nulls[layout.target_table - 1] = false;
				repl[layout.target_table - 1] = true;
			}
			values[layout.commit_time - 1] = TimestampTzGetDatum(commit_time);
			nulls[layout.commit_time - 1] = false;
			repl[layout.commit_time - 1] = true;
			values[layout.applied_at - 1] = TimestampTzGetDatum(applied_at);
			nulls[layout.applied_at - 1] = false;
			repl[layout.applied_at - 1] = true;
			newtup = heap_modify_tuple(old, desc, values, nulls, repl);
			CatalogTupleUpdate(rel, &old->t_self, newtup);
			/* a later statement of this transaction sees the new version */
			CommandCounterIncrement();
			done = true;
		}
	}
	table_close(rel, RowExclusiveLock);
	return done;
}
