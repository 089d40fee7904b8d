/*-------------------------------------------------------------------------
 *
 * catalog_row.c
 *	  Updating one row of the extension's own catalogs in place.
 *
 *	  Every batch writes its checkpoint and its per-table counts in its own
 *	  transaction.  On a trickle of one-transaction batches the two SQL
 *	  statements doing it cost about as much as applying the rows (planning
 *	  checks, executor start, the upsert's speculative insertion).  A row
 *	  that exists is found here through its unique index, locked, and
 *	  updated the way PostgreSQL updates its own catalog rows
 *	  (CatalogTupleUpdate: a HOT update when the page has room, index
 *	  entries otherwise).  The callers change no key column, and these
 *	  catalogs have no triggers, no foreign key a changed column takes part
 *	  in, and row-level security that does not apply to the worker, so
 *	  nothing else is owed.  Anything unusual -- no such row, a row deleted
 *	  or updated concurrently, a layout without the expected unique index --
 *	  makes the caller fall back to its SQL statement, which handles it as
 *	  before.
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
#include "catalog/pg_type.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "catalog_row.h"

/* the specs seen this session, for the invalidation callback */
#define MAX_SPECS 4
static AshCatalogRowSpec *specs[MAX_SPECS];
static int	nspecs = 0;
static bool callback_registered = false;

static void
invalidate(Datum arg, Oid relid)
{
	for (int i = 0; i < nspecs; i++)
		if (!OidIsValid(relid) || relid == specs[i]->relid)
			specs[i]->valid = false;
}

/* The valid, immediate unique index on exactly the key columns, or InvalidOid. */
static Oid
key_index(Relation rel, AshCatalogRowSpec *spec)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	Oid			found = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index ix = idx->rd_index;
		bool		match = ix->indisunique && ix->indimmediate && ix->indisvalid &&
			ix->indnkeyatts == spec->nkeys && ix->indnatts == spec->nkeys &&
			RelationGetIndexExpressions(idx) == NIL &&
			RelationGetIndexPredicate(idx) == NIL;

		for (int k = 0; match && k < spec->nkeys; k++)
			match = ix->indkey.values[k] == spec->keyatt[k];
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

static bool
load(AshCatalogRowSpec *spec)
{
	Oid			nsp;
	Relation	rel;
	bool		known = false;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(invalidate, (Datum) 0);
		callback_registered = true;
	}
	for (int i = 0; i < nspecs; i++)
		known |= specs[i] == spec;
	if (!known)
	{
		if (nspecs == MAX_SPECS)
			return false;		/* could not follow its invalidations */
		specs[nspecs++] = spec;
	}
	if (spec->valid)
		return OidIsValid(spec->indexoid);

	spec->indexoid = InvalidOid;
	nsp = get_namespace_oid("ash_replicant", true);
	spec->relid = OidIsValid(nsp) ? get_relname_relid(spec->table, nsp) : InvalidOid;
	if (!OidIsValid(spec->relid))
		return false;			/* not remembered: looked up again next time */
	for (int k = 0; k < spec->nkeys; k++)
		spec->keyatt[k] = get_attnum(spec->relid, spec->keys[k]);
	for (int c = 0; c < spec->ncols; c++)
		spec->colatt[c] = get_attnum(spec->relid, spec->cols[c]);
	rel = table_open(spec->relid, AccessShareLock);
	spec->indexoid = key_index(rel, spec);
	for (int k = 0; k < spec->nkeys; k++)
		if (spec->keyatt[k] <= 0 ||
			TupleDescAttr(RelationGetDescr(rel), spec->keyatt[k] - 1)->atttypid != TEXTOID)
			spec->indexoid = InvalidOid;
	for (int c = 0; c < spec->ncols; c++)
		if (spec->colatt[c] <= 0)
			spec->indexoid = InvalidOid;
	table_close(rel, AccessShareLock);
	spec->valid = true;
	return OidIsValid(spec->indexoid);
}

/*
 * Pin block blk of rel when it exists.  A block in shared buffers exists:
 * a truncation drops a relation's buffers before it shortens the file, and
 * the lock the caller holds keeps a truncation (VACUUM's takes an
 * exclusive lock) out until the transaction ends.  That spares asking the
 * kernel for the file's length (an lseek) twice a batch.  Below the first
 * segment's end the lookup cannot fail (the first segment exists as long
 * as the relation does); elsewhere, or when the block is not buffered, the
 * length decides.
 */
static bool
pin_hinted_block(Relation rel, BlockNumber blk, Buffer *buf)
{
	if (blk < RELSEG_SIZE)
	{
		PrefetchBufferResult pr = PrefetchBuffer(rel, MAIN_FORKNUM, blk);

		if (BufferIsValid(pr.recent_buffer) &&
			ReadRecentBuffer(rel->rd_node, MAIN_FORKNUM, blk, pr.recent_buffer))
		{
			*buf = pr.recent_buffer;
			return true;
		}
	}
	if (blk >= RelationGetNumberOfBlocks(rel))
		return false;
	*buf = ReadBuffer(rel, blk);
	return true;
}

/*
 * Make room on the hinted page for the version the caller is about to
 * write.  Each update leaves a dead version behind; heap_fetch prunes
 * nothing, and PostgreSQL's opportunistic pruning (which an index scan
 * reaching the page would do) waits until less than a tenth of the page
 * is free -- less than one checkpoint row, which carries the contract.
 * Either way the next update left the page: no HOT, index entries, and
 * the table grew by a page every few batches.  So when the row's next
 * version would not fit, the page is marked full, as heap_update marks a
 * page it had to leave, and the pruning reclaims the dead versions that
 * no snapshot can see any more.  Read unlocked as heap_page_prune_opt
 * reads: the caller's pin keeps the line pointer where it is (moving it
 * takes a cleanup lock).
 */
static void
prune_for_update(Relation rel, Buffer buf, OffsetNumber off)
{
	Page		p = BufferGetPage(buf);
	ItemId		lp;
	Size		need;

	if (off < FirstOffsetNumber || off > PageGetMaxOffsetNumber(p))
		return;
	lp = PageGetItemId(p, off);
	if (!ItemIdIsNormal(lp))
		return;
	need = MAXALIGN(ItemIdGetLength(lp));
	if (!PageIsFull(p) && PageGetHeapFreeSpace(p) < need)
	{
		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		if (PageGetHeapFreeSpace(p) < need)
		{
			PageSetFull(p);
			MarkBufferDirtyHint(buf, true);
		}
		LockBuffer(buf, BUFFER_LOCK_UNLOCK);
	}
	heap_page_prune_opt(rel, buf);
}

/*
 * The row version at the caller's hint, when it is visible to snap and has
 * these keys -- then it is the row the unique index would find.  Each
 * update leaves a new version, and the index leads to the oldest of a
 * chain of them (HOT) until the page is pruned: for a row updated once
 * per batch, walking that chain was most of finding it.
 */
static HeapTuple
fetch_hinted(Relation rel, AshCatalogRowSpec *spec, const char *const *keys,
			 ItemPointer hint, Snapshot snap)
{
	HeapTupleData tuple;
	Buffer		buf;
	HeapTuple	found = NULL;
	TupleDesc	desc = RelationGetDescr(rel);
	bool		match = true;
	Buffer		page;
	bool		fetched;

	if (!ItemPointerIsValid(hint) ||
		!pin_hinted_block(rel, ItemPointerGetBlockNumber(hint), &page))
		return NULL;

	prune_for_update(rel, page, ItemPointerGetOffsetNumber(hint));
	tuple.t_self = *hint;
	fetched = heap_fetch(rel, snap, &tuple, &buf, false);
	ReleaseBuffer(page);
	if (!fetched)
		return NULL;
	for (int k = 0; match && k < spec->nkeys; k++)
	{
		bool		isnull;
		Datum		d = heap_getattr(&tuple, spec->keyatt[k], desc, &isnull);

		if (keys[k] == NULL || isnull)
			match = keys[k] == NULL && isnull;
		else
		{
			text	   *t = DatumGetTextPP(d);

			match = VARSIZE_ANY_EXHDR(t) == strlen(keys[k]) &&
				memcmp(VARDATA_ANY(t), keys[k], VARSIZE_ANY_EXHDR(t)) == 0;
			if ((Pointer) t != DatumGetPointer(d))
				pfree(t);
		}
	}
	if (match)
		found = heap_copytuple(&tuple);
	ReleaseBuffer(buf);
	return found;
}

bool
ash_catalog_row_lock(AshCatalogRowSpec *spec, const char *const *keys, ItemPointer hint,
					 AshCatalogRow *row)
{
	ScanKeyData skey[ASH_CATALOG_ROW_KEYS];
	Relation	idx;
	Snapshot	snap;
	SysScanDesc scan;
	HeapTuple	tup;
	HeapTupleData locked;
	Buffer		buf;
	TM_FailureData tmfd;
	TM_Result	res;
	TupleDesc	desc;

	memset(row, 0, sizeof(*row));
	if (!load(spec))
		return false;
	row->spec = spec;
	row->hint = hint;
	row->rel = table_open(spec->relid, RowExclusiveLock);
	snap = RegisterSnapshot(GetLatestSnapshot());
	if (hint != NULL)
		row->old = fetch_hinted(row->rel, spec, keys, hint, snap);
	if (row->old != NULL)
		goto found;

	/* the index orders by its columns' collations: compare under them */
	idx = index_open(spec->indexoid, AccessShareLock);
	for (int k = 0; k < spec->nkeys; k++)
	{
		if (keys[k] == NULL)
			ScanKeyEntryInitialize(&skey[k], SK_ISNULL | SK_SEARCHNULL, spec->keyatt[k],
								   InvalidStrategy, InvalidOid, InvalidOid,
								   InvalidOid, (Datum) 0);
		else
			ScanKeyEntryInitialize(&skey[k], 0, spec->keyatt[k], BTEqualStrategyNumber,
								   InvalidOid, idx->rd_indcollation[k], F_TEXTEQ,
								   CStringGetTextDatum(keys[k]));
	}
	index_close(idx, AccessShareLock);

	scan = systable_beginscan(row->rel, spec->indexoid, true, snap, spec->nkeys, skey);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		row->old = heap_copytuple(tup);
	systable_endscan(scan);
found:
	UnregisterSnapshot(snap);
	if (row->old == NULL)
	{
		ash_catalog_row_release(row);
		return false;
	}

	/* a concurrent writer waits for us, or we for it */
	locked.t_self = row->old->t_self;
	res = heap_lock_tuple(row->rel, &locked, GetCurrentCommandId(true),
						  LockTupleNoKeyExclusive, LockWaitBlock, false, &buf, &tmfd);
	ReleaseBuffer(buf);
	if (res != TM_Ok)
	{
		ash_catalog_row_release(row);
		return false;
	}
	desc = RelationGetDescr(row->rel);
	row->values = palloc(sizeof(Datum) * desc->natts);
	row->nulls = palloc(sizeof(bool) * desc->natts);
	row->repl = palloc0(sizeof(bool) * desc->natts);
	heap_deform_tuple(row->old, desc, row->values, row->nulls);
	return true;
}

Datum
ash_catalog_row_get(AshCatalogRow *row, int col, bool *isnull)
{
	int			i = row->spec->colatt[col] - 1;

	*isnull = row->nulls[i];
	return row->values[i];
}

void
ash_catalog_row_set(AshCatalogRow *row, int col, Datum value, bool isnull)
{
	int			i = row->spec->colatt[col] - 1;

	row->values[i] = value;
	row->nulls[i] = isnull;
	row->repl[i] = true;
}

void
ash_catalog_row_update(AshCatalogRow *row)
{
	HeapTuple	newtup = heap_modify_tuple(row->old, RelationGetDescr(row->rel),
										   row->values, row->nulls, row->repl);

	CatalogTupleUpdate(row->rel, &row->old->t_self, newtup);
	if (row->hint != NULL)
		*row->hint = newtup->t_self;
	/* a later command of this transaction sees the new version */
	CommandCounterIncrement();
	heap_freetuple(newtup);
	ash_catalog_row_release(row);
}

void
ash_catalog_row_release(AshCatalogRow *row)
{
	/* the row lock, if taken, lasts until the transaction ends */
	if (row->rel != NULL)
		table_close(row->rel, RowExclusiveLock);
	row->rel = NULL;
	if (row->old != NULL)
		heap_freetuple(row->old);
	row->old = NULL;
}
