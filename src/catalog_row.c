/*-------------------------------------------------------------------------
 *
 * catalog_row.c
 *	  Updating one row of the extension's own catalogs in place.
 *
 *	  Every batch writes its checkpoint and its per-table counts in its own
 *	  transaction.  On a trickle of one-transaction batches the two SQL
 *	  statements doing it cost about as much as applying the rows (planning
 *	  checks, executor start, the upsert's speculative insertion).  A row
 *	  that exists is found here at the caller's hint or through its unique
 *	  index and updated with heap_update, as PostgreSQL updates its own
 *	  catalog rows: a HOT update when the page has room, index entries
 *	  otherwise.  The callers change no key column, and these catalogs have
 *	  no triggers, no foreign key a changed column takes part in, and
 *	  row-level security that does not apply to the worker, so nothing else
 *	  is owed.  Anything unusual -- no such row, a row deleted or updated
 *	  concurrently, a layout without the expected unique index -- makes the
 *	  caller fall back to its SQL statement, which handles it as before.
 *
 * NOTES
 *	  No row lock is taken before the update: heap_update itself waits for
 *	  a concurrent writer of the version read and reports it when that
 *	  writer committed (TM_Updated, TM_Deleted), before it writes anything;
 *	  the caller then goes to its statement.  A version that heap_update
 *	  accepts is the one read -- a row version's content never changes --
 *	  so values computed from it (the counters) are exact.  The version is
 *	  kept pinned from the read to the update: pruning needs the only pin
 *	  on its page, so its line pointer cannot be reused for another row in
 *	  between.  A row lock first (heap_lock_tuple) would add a WAL record
 *	  and dirty the page, twice a batch, for nothing heap_update does not
 *	  do itself.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/toast_compression.h"
#include "access/toast_internals.h"
#include "access/xact.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
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
 * kernel for the file's length (an lseek) twice a batch.  The buffer that
 * held the block last time is tried first (ReadRecentBuffer checks that it
 * still does), which spares the buffer table's lookup.  Below the first
 * segment's end the lookup cannot fail (the first segment exists as long
 * as the relation does); elsewhere, or when the block is not buffered, the
 * length decides.
 */
static bool
pin_hinted_block(Relation rel, AshCatalogRowSpec *spec, BlockNumber blk, Buffer *buf)
{
	if (BufferIsValid(spec->recent_buffer) &&
		ReadRecentBuffer(rel->rd_node, MAIN_FORKNUM, blk, spec->recent_buffer))
	{
		*buf = spec->recent_buffer;
		return true;
	}
	if (blk < RELSEG_SIZE)
	{
		PrefetchBufferResult pr = PrefetchBuffer(rel, MAIN_FORKNUM, blk);

		if (BufferIsValid(pr.recent_buffer) &&
			ReadRecentBuffer(rel->rd_node, MAIN_FORKNUM, blk, pr.recent_buffer))
		{
			*buf = spec->recent_buffer = pr.recent_buffer;
			return true;
		}
	}
	if (blk >= RelationGetNumberOfBlocks(rel))
		return false;
	*buf = spec->recent_buffer = ReadBuffer(rel, blk);
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

	/*
	 * heap_page_prune_opt's own test, made first: before it gets there it
	 * asks whether the page's newest dead version is removable, which for
	 * a row updated by the previous batch recomputes the horizons (a scan
	 * of the process array), twice a batch, to prune nothing.
	 */
	if (PageIsFull(p) ||
		PageGetHeapFreeSpace(p) < Max(RelationGetTargetPageFreeSpace(rel, HEAP_DEFAULT_FILLFACTOR),
									  BLCKSZ / 10))
		heap_page_prune_opt(rel, buf);
}

/* Do tuple's key columns hold keys[] (NULL: IS NULL)? */
static bool
keys_match(HeapTuple tuple, TupleDesc desc, AshCatalogRowSpec *spec, const char *const *keys)
{
	bool		match = true;

	for (int k = 0; match && k < spec->nkeys; k++)
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, spec->keyatt[k], desc, &isnull);

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
	return match;
}

/*
 * The row version at the caller's hint, when it is visible to snap and has
 * these keys -- then it is the row the unique index would find -- with its
 * page left pinned in *pin.  Each update leaves a new version, and the
 * index leads to the oldest of a chain of them (HOT) until the page is
 * pruned: for a row updated once per batch, walking that chain was most of
 * finding it.  Read under the page's share lock as heap_fetch reads, on
 * the pin already taken (heap_fetch would look the page up again).
 */
static HeapTuple
fetch_hinted(Relation rel, AshCatalogRowSpec *spec, const char *const *keys,
			 ItemPointer hint, Snapshot snap, Buffer *pin)
{
	HeapTupleData tuple;
	HeapTuple	found = NULL;
	Buffer		buf;
	Page		page;
	OffsetNumber off = ItemPointerGetOffsetNumberNoCheck(hint);

	if (!ItemPointerIsValid(hint) ||
		!pin_hinted_block(rel, spec, ItemPointerGetBlockNumber(hint), &buf))
		return NULL;

	prune_for_update(rel, buf, off);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	page = BufferGetPage(buf);
	if (off >= FirstOffsetNumber && off <= PageGetMaxOffsetNumber(page))
	{
		ItemId		lp = PageGetItemId(page, off);

		if (ItemIdIsNormal(lp))
		{
			tuple.t_data = (HeapTupleHeader) PageGetItem(page, lp);
			tuple.t_len = ItemIdGetLength(lp);
			tuple.t_tableOid = RelationGetRelid(rel);
			tuple.t_self = *hint;
			if (HeapTupleSatisfiesVisibility(&tuple, snap, buf))
				found = heap_copytuple(&tuple);
		}
	}
	LockBuffer(buf, BUFFER_LOCK_UNLOCK);

	/* compared on the copy: a key may need detoasting */
	if (found != NULL && !keys_match(found, RelationGetDescr(rel), spec, keys))
	{
		heap_freetuple(found);
		found = NULL;
	}
	if (found != NULL)
		*pin = buf;
	else
		ReleaseBuffer(buf);
	return found;
}

bool
ash_catalog_row_find(AshCatalogRowSpec *spec, const char *const *keys, ItemPointer hint,
					 AshCatalogRow *row)
{
	ScanKeyData skey[ASH_CATALOG_ROW_KEYS];
	Relation	idx;
	Snapshot	snap;
	SysScanDesc scan;
	HeapTuple	tup;
	TupleDesc	desc;

	memset(row, 0, sizeof(*row));
	row->pin = InvalidBuffer;
	if (!load(spec))
		return false;
	row->spec = spec;
	row->hint = hint;
	row->rel = table_open(spec->relid, RowExclusiveLock);
	snap = RegisterSnapshot(GetLatestSnapshot());

	/*
	 * A serializable transaction's reads take predicate locks, which the
	 * index scan takes and the read at the hint would not.
	 */
	if (hint != NULL && !IsolationIsSerializable())
		row->old = fetch_hinted(row->rel, spec, keys, hint, snap, &row->pin);
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
	{
		row->old = heap_copytuple(tup);
		/* pinned while the scan still pins it: it cannot be pruned between */
		row->pin = ReadBuffer(row->rel, ItemPointerGetBlockNumber(&tup->t_self));
	}
	systable_endscan(scan);
found:
	UnregisterSnapshot(snap);
	if (row->old == NULL)
	{
		ash_catalog_row_release(row);
		return false;
	}
	desc = RelationGetDescr(row->rel);
	row->values = palloc(sizeof(Datum) * desc->natts);
	row->nulls = palloc(sizeof(bool) * desc->natts);
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
}

/*
 * Column col compressed, as the toaster would store it were the row over
 * its threshold (about 2 kB).  Below it a value stays plain however well it
 * compresses, and at wal_level logical each update logs the new version
 * whole: the checkpoint's contract, near a kilobyte of JSON, is most of
 * what a batch writes to the WAL there.  A value stored compressed stays so
 * through later in-place updates (heap_form_tuple copies it as it is).
 * Nothing happens to a value below min_size, already compressed or out of
 * line, of a column whose storage forbids compression, or that does not
 * compress: then its size is left in *failed_size, and a value of that size
 * is not tried again (compressing costs more than the update).
 */
void
ash_catalog_row_compress(AshCatalogRow *row, int col, Size min_size, Size *failed_size)
{
	int			i = row->spec->colatt[col] - 1;
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(row->rel), i);
	struct varlena *v;
	char		method;
	Datum		z;

	if (row->nulls[i] || att->attlen != -1 ||
		(att->attstorage != TYPSTORAGE_EXTENDED && att->attstorage != TYPSTORAGE_MAIN))
		return;
	v = (struct varlena *) DatumGetPointer(row->values[i]);
	if (VARATT_IS_EXTENDED(v) || VARSIZE(v) < min_size || VARSIZE(v) == *failed_size)
		return;
	method = CompressionMethodIsValid(att->attcompression) ? att->attcompression :
		(char) default_toast_compression;
	z = toast_compress_datum(row->values[i], method);
	if (DatumGetPointer(z) != NULL)
		row->values[i] = z;
	else
		*failed_size = VARSIZE(v);
}

/*
 * The index entries of a version that left its page (no HOT update), as
 * CatalogTupleUpdate makes them.  Rare: the page is pruned before it fills
 * (prune_for_update).
 */
static void
insert_index_entries(Relation rel, HeapTuple tup)
{
	EState	   *estate = CreateExecutorState();
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	TupleTableSlot *slot;

	InitResultRelInfo(rri, rel, 1, NULL, 0);
	ExecOpenIndices(rri, false);
	slot = MakeSingleTupleTableSlot(RelationGetDescr(rel), &TTSOpsHeapTuple);
	ExecStoreHeapTuple(tup, slot, false);
	(void) ExecInsertIndexTuples(rri, slot, estate, false, false, NULL, NIL);
	ExecDropSingleTupleTableSlot(slot);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
}

bool
ash_catalog_row_update(AshCatalogRow *row)
{
	HeapTuple	newtup;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	TM_Result	res;

	/*
	 * The version read, deformed once, with the columns set: what
	 * heap_modify_tuple would build, without deforming it again.
	 */
	newtup = heap_form_tuple(RelationGetDescr(row->rel), row->values, row->nulls);
	newtup->t_data->t_ctid = row->old->t_data->t_ctid;
	newtup->t_self = row->old->t_self;
	newtup->t_tableOid = row->old->t_tableOid;

	/* waits for a concurrent writer; writes nothing unless TM_Ok */
	res = heap_update(row->rel, &row->old->t_self, newtup, GetCurrentCommandId(true),
					  InvalidSnapshot, true, &tmfd, &lockmode);
	if (res == TM_Ok)
	{
		if (!HeapTupleIsHeapOnly(newtup))
			insert_index_entries(row->rel, newtup);
		if (row->hint != NULL)
			*row->hint = newtup->t_self;
		/* a later command of this transaction sees the new version */
		CommandCounterIncrement();
	}
	heap_freetuple(newtup);
	ash_catalog_row_release(row);
	return res == TM_Ok;
}

void
ash_catalog_row_release(AshCatalogRow *row)
{
	if (BufferIsValid(row->pin))
		ReleaseBuffer(row->pin);
	row->pin = InvalidBuffer;
	if (row->rel != NULL)
		table_close(row->rel, RowExclusiveLock);
	row->rel = NULL;
	if (row->old != NULL)
		heap_freetuple(row->old);
	row->old = NULL;
}
