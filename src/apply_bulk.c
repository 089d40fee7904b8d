/*-------------------------------------------------------------------------
 *
 * apply_bulk.c
 *	  Gathered inserts written straight into the table: the rows of a run
 *	  go to the table access method in one multi-insert and then into each
 *	  index, as COPY FROM writes them, instead of through an INSERT
 *	  statement that unnests one array per column.
 *
 * NOTES
 *	  Used only where that is exactly what the plain INSERT would do:
 *	  - a plain table (not partitioned, not a partition, not foreign) whose
 *		rows cannot observe each other -- no trigger, rule, row security, or
 *		unique or exclusion index besides the identity (the caller's
 *		judgement, see apply_scd1.c);
 *	  - no stored generated column, and every column the run does not
 *		write has no default and is no identity column, so the INSERT would
 *		have stored NULL there too (a NOT NULL column fails the same way);
 *	  - every written column still has the type and type modifier the
 *		values were converted to (input and receive functions apply the
 *		modifier, as the INSERT's assignment coercion would).
 *	  Privileges are checked as the INSERT checks them (ExecCheckRTPerms on
 *	  the written columns, as the current user: the writing role), NOT
 *	  NULL and CHECK constraints by the executor's own ExecConstraints, and
 *	  unique indexes by index insertion, which raises the same unique
 *	  violation the caller catches to fall back to the upsert -- or, for a
 *	  run of one row, reports it from a speculative insertion, as INSERT
 *	  ... ON CONFLICT does, with nothing of the row left to roll back.
 *
 *	  The statement names its table, so the table written here must still be
 *	  the one its schema-qualified name resolves to.
 *
 *	  The judgement is made once per destination transaction, under the
 *	  RowExclusiveLock the writes take anyway: no rename, trigger, index,
 *	  default or column change can happen before that transaction ends.
 *
 *	  A snapshot's copy of a whole table into a table that was empty when
 *	  it began may leave the index entries out and build every index of
 *	  the table once its rows are in, as a restore does (sorting the keys
 *	  costs a fraction of inserting them one by one into a growing tree).
 *	  Only where the writing role owns the table -- the sink owner, or the
 *	  table's owner the write runs as (owner_scope.c) -- (the build is what
 *	  its owner's REINDEX does); the table is held in SHARE mode from the first
 *	  such write to the transaction's end, so no other session writes it
 *	  meanwhile and the indexes are never read incomplete: nothing of the
 *	  copy's transaction reads the table before the build, and a commit
 *	  with indexes still owed is refused.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/hio.h"
#include "access/sysattr.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "apply_bulk.h"
#include "owner_scope.h"

bool
ash_bulk_insert_usable(AshBulkTarget *bt, AshApplyRel *rel, AshApplyTarget *tgt,
					   int nextra, const char *const *extra)
{
	int			nwritten = rel->ncols + nextra;

	Relation	r;
	TupleDesc	desc;
	Oid			nsp;
	bool		ok;
	bool	   *written;
	uint64		epoch;

	if (bt->judged_lxid == MyProc->lxid)
		return bt->usable;
	epoch = ash_relmap_target_epoch(tgt->relid);
	bt->judged_lxid = MyProc->lxid;
	if (bt->judged_epoch == epoch)
		return bt->usable;

	/*
	 * The statement names the table; the table written here must be the one
	 * that name resolves to (a table renamed or dropped since the target was
	 * cached is the statement's error to raise).  Looked up under the lock,
	 * which keeps the name on it until the transaction ends.
	 */
	bt->judged_epoch = 0;
	bt->usable = false;
	r = try_table_open(tgt->relid, RowExclusiveLock);
	if (r == NULL)
		return false;
	nsp = get_namespace_oid(tgt->nspname, true);
	if (!OidIsValid(nsp) || get_relname_relid(tgt->relname, nsp) != tgt->relid)
	{
		table_close(r, NoLock);
		bt->judged_epoch = epoch;
		return false;
	}
	desc = RelationGetDescr(r);
	ok = r->rd_rel->relkind == RELKIND_RELATION && !r->rd_rel->relispartition &&
		!(desc->constr && desc->constr->has_generated_stored);
	if (bt->attnums == NULL)
		bt->attnums = MemoryContextAllocZero(tgt->cxt, sizeof(AttrNumber) * Max(nwritten, 1));
	written = palloc0(sizeof(bool) * Max(desc->natts, 1));
	for (int c = 0; ok && c < nwritten; c++)
	{
		AttrNumber	found = InvalidAttrNumber;
		const char *name = c < rel->ncols ? rel->cols[c].name : extra[c - rel->ncols];
		Oid			typid = c < rel->ncols ? rel->cols[c].typid : BYTEAOID;
		int32		typmod = c < rel->ncols ? rel->cols[c].typmod : -1;

		for (int a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			{
				found = att->attnum;
				ok = att->atttypid == typid && att->atttypmod == typmod && !written[a];
				written[a] = true;
				break;
			}
		}
		if (found == InvalidAttrNumber)
			ok = false;
		bt->attnums[c] = found;
	}
	for (int a = 0; ok && a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (!att->attisdropped && !written[a] &&
			(att->atthasdef || att->attidentity || att->attgenerated))
			ok = false;
	}
	pfree(written);
	table_close(r, NoLock);

	bt->usable = ok;
	bt->judged_epoch = epoch;
	return ok;
}

/*
 * The ring of a snapshot copy's writes, kept for the process (in
 * TopMemoryContext).  An incremental copy commits a transaction per chunk:
 * a ring made per transaction took other buffers each time, so over a
 * large table shared buffers filled with its dirty pages, and the worker
 * wrote them back itself, each after a WAL flush.  Kept, the same buffers
 * are written back and reused, as by one COPY FROM.  The ring's pin on its
 * current page is released before every commit; an abort releases it.
 */
static BulkInsertState bulk_state = NULL;
static LocalTransactionId bulk_state_lxid = InvalidLocalTransactionId; /* pinned in */

void
ash_bulk_release(void)
{
	/* after an abort the pin went with the transaction */
	if (bulk_state != NULL && bulk_state_lxid == MyProc->lxid)
		ReleaseBulkInsertStatePin(bulk_state);
	bulk_state_lxid = InvalidLocalTransactionId;
}

/*
 * The table whose rows this transaction wrote without their index entries
 * (at most one: a snapshot copies a table per transaction).
 */
static Oid	owed_relid = InvalidOid;
static LocalTransactionId owed_lxid = InvalidLocalTransactionId;
static bool owed_callback = false;

static bool
indexes_owed(void)
{
	return OidIsValid(owed_relid) && owed_lxid == MyProc->lxid;
}

/* Never a commit with a table's index entries missing. */
static void
owed_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_PRE_COMMIT && indexes_owed())
		elog(ERROR, "ash_replicant: a table's indexes were not built before its commit");
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_COMMIT)
		owed_relid = InvalidOid;
}

/* May the rows of r leave their index entries to ash_bulk_build_indexes? */
static bool
may_build_indexes_after(Relation r)
{
	if (indexes_owed())
		return owed_relid == RelationGetRelid(r);
	if (OidIsValid(owed_relid) && owed_lxid != MyProc->lxid)
		owed_relid = InvalidOid;	/* a transaction gone without its callback */
	if (!r->rd_rel->relhasindex || r->rd_rel->relowner != GetUserId())
		return false;
	if (!owed_callback)
	{
		RegisterXactCallback(owed_xact_callback, NULL);
		owed_callback = true;
	}
	/* held to the transaction's end: nobody else writes the table meanwhile */
	LockRelationOid(RelationGetRelid(r), ShareLock);
	owed_relid = RelationGetRelid(r);
	owed_lxid = MyProc->lxid;
	return true;
}

void
ash_bulk_build_indexes(void)
{
	ReindexParams params = {0};
	AshOwnerScope scope;
	int			nest;
	Oid			relid;

	if (!indexes_owed())
		return;
	relid = owed_relid;
	owed_relid = InvalidOid;

	/*
	 * The build evaluates the indexes' expressions and predicates, which may
	 * call functions that run SQL: they need an active snapshot, as REINDEX
	 * has its statement's, and run as REINDEX runs them -- as the table's
	 * owner (who wrote its rows: may_build_indexes_after), in a
	 * security-restricted operation -- never as the worker's superuser.
	 * An error leaves both to the transaction's abort.
	 */
	PushActiveSnapshot(GetTransactionSnapshot());
	ash_owner_scope_enter(&scope, ash_owner_of_table(relid), SECURITY_RESTRICTED_OPERATION);

	/*
	 * One process per build, as for the per-row insertion it replaces: a
	 * parallel build would take background worker slots the launcher may
	 * need for pipelines and snapshot copiers.
	 */
	nest = NewGUCNestLevel();
	(void) set_config_option("max_parallel_maintenance_workers", "0", PGC_SUSET,
							 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	(void) reindex_relation(relid, REINDEX_REL_CHECK_CONSTRAINTS, &params);
	AtEOXact_GUC(true, nest);
	ash_owner_scope_exit(&scope);
	PopActiveSnapshot();
	CommandCounterIncrement();
}

/*
 * The slots of the last table written, kept from one run to the next and
 * across transactions (in a context of their own, with their own copy of
 * the descriptor): making and dropping a slot per row cost as much as the
 * NOT NULL checks, and a snapshot chunk is a transaction of its own.
 * Only row values are stored in them, or a tuple the multi-insert
 * materialized in the slot's own memory (no buffer pin), each cleared
 * before it is filled again; another table or descriptor makes its own.
 */
static MemoryContext kept_cxt = NULL;
static TupleTableSlot **kept_slots = NULL;
static TupleDesc kept_desc = NULL;
static int	kept_nslots = 0;
static Oid	kept_relid = InvalidOid;

/* Do slots of descriptor a store the rows of b as they are? */
static bool
same_row_shape(TupleDesc a, TupleDesc b)
{
	if (a->natts != b->natts)
		return false;
	for (int i = 0; i < a->natts; i++)
	{
		Form_pg_attribute x = TupleDescAttr(a, i);
		Form_pg_attribute y = TupleDescAttr(b, i);

		if (x->atttypid != y->atttypid || x->atttypmod != y->atttypmod ||
			x->attlen != y->attlen || x->attbyval != y->attbyval ||
			x->attalign != y->attalign || x->attstorage != y->attstorage ||
			x->attisdropped != y->attisdropped)
			return false;
	}
	return true;
}

static TupleTableSlot **
run_slots(Relation r, int nrows)
{
	MemoryContext o;

	if (kept_cxt == NULL)
		kept_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant bulk insert slots",
										 ALLOCSET_DEFAULT_SIZES);
	if (kept_relid != RelationGetRelid(r) ||
		(kept_desc != NULL && !same_row_shape(kept_desc, RelationGetDescr(r))))
	{
		/* another table: its slots and their descriptor copy go */
		MemoryContextReset(kept_cxt);
		kept_slots = NULL;
		kept_desc = NULL;
		kept_nslots = 0;
		kept_relid = RelationGetRelid(r);
	}
	if (kept_nslots >= nrows)
		return kept_slots;
	o = MemoryContextSwitchTo(kept_cxt);
	if (kept_slots == NULL)
	{
		kept_slots = palloc(sizeof(TupleTableSlot *) * nrows);
		/* an unpinned copy: a thousand slots would pin the relcache's one */
		kept_desc = CreateTupleDescCopy(RelationGetDescr(r));
	}
	else
		kept_slots = repalloc(kept_slots, sizeof(TupleTableSlot *) * nrows);
	for (int i = kept_nslots; i < nrows; i++)
		kept_slots[i] = MakeSingleTupleTableSlot(kept_desc, table_slot_callbacks(r));
	kept_nslots = nrows;
	MemoryContextSwitchTo(o);
	return kept_slots;
}

/* The rows of slots in one multi-insert, then their index entries. */
static void
insert_multi(Relation r, ResultRelInfo *rri, TupleTableSlot **slots, int nrows,
			 EState *estate, CommandId cid, bool fresh)
{
	/*
	 * A snapshot's copy into a fresh table writes through a ring of buffers,
	 * as COPY FROM does: a large table does not flood shared buffers.
	 */
	if (fresh && bulk_state == NULL)
	{
		MemoryContext o = MemoryContextSwitchTo(TopMemoryContext);

		bulk_state = GetBulkInsertState();
		MemoryContextSwitchTo(o);
	}
	if (fresh && bulk_state_lxid != MyProc->lxid)
	{
		/* a page pinned by an earlier transaction was released with it */
		bulk_state->current_buf = InvalidBuffer;
		bulk_state_lxid = MyProc->lxid;
	}
	table_multi_insert(r, slots, nrows, cid, 0, fresh ? bulk_state : NULL);

	for (int i = 0; i < nrows; i++)
	{
		if (rri->ri_NumIndices > 0)
		{
			List	   *recheck = ExecInsertIndexTuples(rri, slots[i], estate, false, false,
														NULL, NIL);

			/* deferred uniqueness needs a trigger, which the judge refuses */
			if (recheck != NIL)
				elog(ERROR, "ash_replicant: a bulk insert met a deferred unique check");
		}
		ResetPerTupleExprContext(estate);
		ExecClearTuple(slots[i]);
	}
}

/*
 * One row, inserted as INSERT ... ON CONFLICT inserts (nodeModifyTable.c's
 * ExecInsert): the heap tuple carries a speculative token, and its index
 * entries are made reporting a conflicting identity instead of raising it.
 * Then the tuple is confirmed, or, on a conflict, killed in place (a
 * super-deletion: no transaction ever sees it, logical decoding drops it,
 * and a session waiting on the token goes on as if it never existed).  So
 * a conflict needs no subtransaction to take the row back: the caller
 * upserts it.  A conflict with a row being written by a transaction still
 * running is reported without waiting; the upsert then waits for it, as
 * the plain insert would have.  The judge admits only tables whose one
 * unique index is the identity, so every conflict is on the identity.
 */
static bool
insert_speculatively(Relation r, ResultRelInfo *rri, TupleTableSlot *slot, EState *estate,
					 CommandId cid)
{
	TransactionId xid = GetCurrentTransactionId();
	uint32		token = SpeculativeInsertionLockAcquire(xid);
	bool		conflict = false;
	List	   *recheck = NIL;

	table_tuple_insert_speculative(r, slot, cid, 0, NULL, token);
	if (rri->ri_NumIndices > 0)
		recheck = ExecInsertIndexTuples(rri, slot, estate, false, true, &conflict, NIL);
	table_tuple_complete_speculative(r, slot, token, !conflict);
	/* wakes anyone waiting for the decision */
	SpeculativeInsertionLockRelease(xid);
	/* deferred uniqueness needs a trigger, which the judge refuses */
	if (recheck != NIL && !conflict)
		elog(ERROR, "ash_replicant: a bulk insert met a deferred unique check");
	ResetPerTupleExprContext(estate);
	ExecClearTuple(slot);
	return !conflict;
}

bool
ash_bulk_insert(AshBulkTarget *bt, AshApplyTarget *tgt, int ncols, int nrows,
				Datum *const *values, bool *const *nulls, bool fresh, bool indexes_after,
				bool speculative)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext,
											  "ash_replicant bulk insert",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	Relation	r = table_open(tgt->relid, RowExclusiveLock);
	TupleDesc	desc = RelationGetDescr(r);
	EState	   *estate = CreateExecutorState();
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	ResultRelInfo *rri = makeNode(ResultRelInfo);
	TupleTableSlot **slots = run_slots(r, nrows);
	CommandId	cid;
	bool		index_rows;
	bool		inserted = true;

	Assert(bt->judged_lxid == MyProc->lxid && bt->usable);
	Assert(!speculative || (nrows == 1 && !fresh));

	/* the INSERT's privilege check: table, or else every written column */
	rte->rtekind = RTE_RELATION;
	rte->relid = tgt->relid;
	rte->relkind = r->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	rte->requiredPerms = ACL_INSERT;
	for (int c = 0; c < ncols; c++)
		rte->insertedCols = bms_add_member(rte->insertedCols,
										   bt->attnums[c] - FirstLowInvalidHeapAttributeNumber);
	ExecInitRangeTable(estate, list_make1(rte));
	(void) ExecCheckRTPerms(estate->es_range_table, true);

	InitResultRelInfo(rri, r, 1, NULL, 0);
	index_rows = !(fresh && indexes_after && may_build_indexes_after(r));
	if (index_rows)
		ExecOpenIndices(rri, false);
	cid = GetCurrentCommandId(true);
	estate->es_output_cid = cid;

	for (int i = 0; i < nrows; i++)
	{
		TupleTableSlot *slot = slots[i];

		ExecClearTuple(slot);
		memset(slot->tts_isnull, true, sizeof(bool) * desc->natts);
		for (int c = 0; c < ncols; c++)
		{
			int			a = bt->attnums[c] - 1;

			slot->tts_values[a] = values[c][i];
			slot->tts_isnull[a] = nulls[c][i];
		}
		ExecStoreVirtualTuple(slot);
		if (desc->constr)
			ExecConstraints(rri, slot, estate);
		ResetPerTupleExprContext(estate);
	}

	if (speculative)
		inserted = insert_speculatively(r, rri, slots[0], estate, cid);
	else
		insert_multi(r, rri, slots, nrows, estate, cid, fresh);

	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	table_close(r, NoLock);

	/* what the statement's end would do: later statements see the rows */
	CommandCounterIncrement();
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
	return inserted;
}
