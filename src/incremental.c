/*-------------------------------------------------------------------------
 *
 * incremental.c
 *	  Incremental snapshots: which streamed changes the mirror takes while
 *	  the tables are copied chunk by chunk (docs/snapshots.md).
 *
 * NOTES
 *	  Each table is copied in primary-key order, in chunks (several tables
 *	  at once with helpers, whose chunks the pipeline worker checks and
 *	  waits for: snapshot_incr.c, "Tables in parallel").
 *	  A chunk is read on a second source connection under a REPEATABLE READ
 *	  snapshot S and committed (rows, cursor and its window, one
 *	  destination transaction) between two source transactions of the
 *	  stream, once the source has flushed its WAL to where S was taken.
 *	  For a table of the attempt the stream then applies a change to key k
 *	  only when
 *
 *	  - k is at or below the table's cursor (copied: a key above it is left
 *		to the chunk that will copy it), and
 *	  - no chunk whose range holds k was read under a snapshot that shows
 *		the change's transaction (that chunk holds its effect already).
 *
 *	  Why this is exact (the argument in full: docs/snapshots.md):
 *
 *	  1. A source transaction's changes to one key are serialised by the
 *		 row lock or the unique-index check, held until the transaction is
 *		 visible to new snapshots.  So for each key the transactions that
 *		 touched it split, in commit order, into a prefix every snapshot S
 *		 shows and a suffix it does not; the chunk's row for k is the state
 *		 after the prefix.
 *	  2. A chunk is read only under a snapshot that shows every transaction
 *		 the stream delivered before it (and every transaction running when
 *		 the session started, which covers what an earlier session was
 *		 delivered): the changes the stream left to the chunk are in it.
 *	  3. After the chunk, a change to a key of its range is skipped when S
 *		 shows its transaction (prefix: in the chunk) and applied when it
 *		 does not (suffix: after the chunk, in commit order).
 *	  4. Every transaction S shows is durable at the source when the chunk
 *		 commits (an asynchronous commit is visible before it is flushed,
 *		 and a crash loses it): snapshot_incr.c, chunk_flushed.
 *
 *	  Visibility is decided by the transaction's xid against the snapshot's
 *	  xmin, xmax and in-progress list, never by LSN: a commit record can be
 *	  in the WAL (and decoded) before the transaction is visible.  A window
 *	  closes once the stream has delivered every commit below the WAL end
 *	  read when the snapshot was taken (every transaction S shows committed
 *	  below it); a closed window skips nothing more, an open one costs a
 *	  range comparison per change.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/typcache.h"

#include "errors.h"
#include "incremental.h"

typedef struct IncrKey
{
	char	   *name;			/* source column */
	Oid			typid;
	Oid			collation;
	FmgrInfo	cmp;
	FmgrInfo	input;
	Oid			ioparam;
	FmgrInfo	recv;
} IncrKey;

typedef struct IncrWindow
{
	int64		chunk;
	Datum	   *lo;				/* NULL: unbounded (exclusive bound) */
	Datum	   *hi;				/* NULL: unbounded (inclusive bound) */
	AshIncrSnapshot snap;
	XLogRecPtr	high_lsn;
} IncrWindow;

typedef struct IncrTable
{
	char	   *nspname;
	char	   *relname;
	int			nkeys;
	IncrKey    *keys;
	bool		started;		/* a chunk committed */
	bool		done;
	Datum	   *cursor;			/* started and not done */
	char	  **cursor_text;	/* the same, as recorded */
	List	   *windows;		/* IncrWindow *, open ones only */
	uint32		remote_relid;	/* key positions below are for this relid */
	int			remote_natts;
	int		   *remote_idx;		/* per key: index in the remote columns */
} IncrTable;

static MemoryContext incr_cxt = NULL;
static List *tables = NIL;
static bytea *attempt_id = NULL;

/* Transactions a chunk's snapshot must show. */
static TransactionId *noted = NULL;
static int	nnoted = 0;
static int	noted_cap = 0;
static XLogRecPtr windows_passed = InvalidXLogRecPtr;	/* closed below it */

/*
 * The snapshot of the last window closed (nxip -1: none yet).  A window
 * whose snapshot shows the same transactions -- the same xmax and
 * in-progress xids: none ended in between -- is closed with it, whatever
 * its WAL position: every transaction it shows was delivered.  (On a quiet
 * source whose reads write WAL, a page image when a read sets hint bits
 * under data checksums, that WAL is flushed and streamed only at the WAL
 * writer's next round: each window would wait for it.)
 */
static AshIncrSnapshot closed_snap = {InvalidTransactionId, InvalidTransactionId, -1, NULL};
static uint64 noted_adds = 0;	/* transactions noted, ever */
static uint64 noted_drops = 0;	/* checks that forgot some, ever */

void
ash_incr_reset(const bytea *attempt)
{
	if (incr_cxt == NULL)
		incr_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant incremental",
										 ALLOCSET_DEFAULT_SIZES);
	MemoryContextReset(incr_cxt);
	tables = NIL;
	noted = NULL;
	nnoted = noted_cap = 0;
	windows_passed = InvalidXLogRecPtr;
	closed_snap.nxip = -1;
	closed_snap.xip = NULL;		/* was in incr_cxt */
	attempt_id = NULL;
	if (attempt != NULL)
	{
		attempt_id = MemoryContextAlloc(incr_cxt, VARSIZE_ANY(attempt));
		memcpy(attempt_id, attempt, VARSIZE_ANY(attempt));
	}
}

bool
ash_incr_active(void)
{
	ListCell   *lc;

	foreach(lc, tables)
		if (!((IncrTable *) lfirst(lc))->done)
			return true;
	return false;
}

bool
ash_incr_judging(void)
{
	ListCell   *lc;

	foreach(lc, tables)
	{
		IncrTable  *t = lfirst(lc);

		if (!t->done || t->windows != NIL)
			return true;
	}
	return false;
}

const bytea *
ash_incr_attempt(void)
{
	return attempt_id;
}

static IncrTable *
find_table(const char *nspname, const char *relname)
{
	ListCell   *lc;

	foreach(lc, tables)
	{
		IncrTable  *t = lfirst(lc);

		if (strcmp(t->nspname, nspname) == 0 && strcmp(t->relname, relname) == 0)
			return t;
	}
	return NULL;
}

/* Key text (source text form) to datums of the key's types; NULL stays NULL. */
static char **
copy_text_key(IncrTable *t, char **text)
{
	char	  **c;

	if (text == NULL)
		return NULL;
	c = MemoryContextAlloc(incr_cxt, sizeof(char *) * t->nkeys);
	for (int i = 0; i < t->nkeys; i++)
		c[i] = text[i] == NULL ? NULL : MemoryContextStrdup(incr_cxt, text[i]);
	return c;
}

/*
 * The key's values from their text.  A chunk's bounds arrive once its
 * transaction committed: the input function of a container type (an
 * array, a range) reads the catalog, which needs a transaction, so one of
 * their own is opened when none is.
 */
static Datum *
parse_key(IncrTable *t, char **text)
{
	MemoryContext caller = CurrentMemoryContext;
	bool		own_xact = !IsTransactionState();
	Datum	   *d;

	if (text == NULL)
		return NULL;
	if (own_xact)
		StartTransactionCommand();
	d = MemoryContextAlloc(incr_cxt, sizeof(Datum) * t->nkeys);
	for (int i = 0; i < t->nkeys; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(incr_cxt);

		if (text[i] == NULL)
			ash_halt("snapshot_state_invalid", "a chunk bound of %s lacks a key column",
					 quote_qualified_identifier(t->nspname, t->relname));
		d[i] = InputFunctionCall(&t->keys[i].input, text[i], t->keys[i].ioparam, -1);
		MemoryContextSwitchTo(old);
	}
	if (own_xact)
	{
		CommitTransactionCommand();
		MemoryContextSwitchTo(caller);
	}
	return d;
}

void
ash_incr_add_table(const char *nspname, const char *relname, int nkeys, char **keynames,
				   Oid *keytypes, char **cursor, bool done)
{
	MemoryContext old = MemoryContextSwitchTo(incr_cxt);
	IncrTable  *t = palloc0(sizeof(IncrTable));

	t->nspname = pstrdup(nspname);
	t->relname = pstrdup(relname);
	t->nkeys = nkeys;
	t->keys = palloc0(sizeof(IncrKey) * nkeys);
	for (int i = 0; i < nkeys; i++)
	{
		IncrKey    *k = &t->keys[i];
		TypeCacheEntry *tc = lookup_type_cache(keytypes[i], TYPECACHE_CMP_PROC_FINFO);
		Oid			infn;
		Oid			recvfn;

		k->name = pstrdup(keynames[i]);
		k->typid = keytypes[i];
		if (!OidIsValid(tc->cmp_proc_finfo.fn_oid))
			ash_halt("snapshot_unsupported", "a primary key column of %s has no ordering",
					 quote_qualified_identifier(nspname, relname));
		fmgr_info_cxt(tc->cmp_proc_finfo.fn_oid, &k->cmp, incr_cxt);
		k->collation = type_is_collatable(k->typid) ? C_COLLATION_OID : InvalidOid;
		getTypeInputInfo(k->typid, &infn, &k->ioparam);
		fmgr_info_cxt(infn, &k->input, incr_cxt);
		getTypeBinaryInputInfo(k->typid, &recvfn, &k->ioparam);
		fmgr_info_cxt(recvfn, &k->recv, incr_cxt);
	}
	t->done = done;
	t->started = done || cursor != NULL;
	t->cursor = done ? NULL : parse_key(t, cursor);
	t->cursor_text = done ? NULL : copy_text_key(t, cursor);
	tables = lappend(tables, t);
	MemoryContextSwitchTo(old);
}

static void
copy_snapshot(AshIncrSnapshot *dst, const AshIncrSnapshot *src)
{
	dst->xmin = src->xmin;
	dst->xmax = src->xmax;
	dst->nxip = src->nxip;
	dst->xip = MemoryContextAlloc(incr_cxt, sizeof(TransactionId) * Max(src->nxip, 1));
	memcpy(dst->xip, src->xip, sizeof(TransactionId) * src->nxip);
}

bool
ash_incr_same_snapshot(const AshIncrSnapshot *a, const AshIncrSnapshot *b)
{
	return a->nxip == b->nxip && a->xmax == b->xmax &&
		(a->nxip == 0 || memcmp(a->xip, b->xip, sizeof(TransactionId) * a->nxip) == 0);
}

static int	xid_cmp(const void *a, const void *b);

static bool
in_progress(const AshIncrSnapshot *snap, TransactionId xid)
{
	return bsearch(&xid, snap->xip, snap->nxip, sizeof(TransactionId), xid_cmp) != NULL;
}

bool
ash_incr_shows_no_more(const AshIncrSnapshot *later, const AshIncrSnapshot *earlier)
{
	TransactionId xid;

	if (earlier->nxip < 0 || later->nxip < 0 ||
		TransactionIdPrecedes(later->xmax, earlier->xmax) ||
		later->xmax - earlier->xmax > (uint32) later->nxip)
		return false;
	/* none that earlier saw in progress has ended ... */
	for (int i = 0; i < earlier->nxip; i++)
		if (!in_progress(later, earlier->xip[i]))
			return false;
	/* ... nor any that began since */
	xid = earlier->xmax;
	while (TransactionIdPrecedes(xid, later->xmax))
	{
		if (!in_progress(later, xid))
			return false;
		TransactionIdAdvance(xid);
	}
	return true;
}

static void
add_window(IncrTable *t, int64 chunk, char **lo, char **hi, const AshIncrSnapshot *snap,
		   XLogRecPtr high_lsn)
{
	IncrWindow *w = MemoryContextAllocZero(incr_cxt, sizeof(IncrWindow));

	w->chunk = chunk;
	w->lo = parse_key(t, lo);
	w->hi = parse_key(t, hi);
	copy_snapshot(&w->snap, snap);
	w->high_lsn = high_lsn;
	t->windows = lappend(t->windows, w);
}

void
ash_incr_add_window(const char *nspname, const char *relname, int64 chunk, char **lo,
					char **hi, const AshIncrSnapshot *snap, XLogRecPtr high_lsn)
{
	IncrTable  *t = find_table(nspname, relname);
	MemoryContext old;

	if (t == NULL)
		return;					/* a table no longer in the attempt */
	old = MemoryContextSwitchTo(incr_cxt);
	add_window(t, chunk, lo, hi, snap, high_lsn);
	MemoryContextSwitchTo(old);
}

void
ash_incr_chunk_committed(const char *nspname, const char *relname, char **cursor, bool done,
						 int64 chunk, char **lo, char **hi, const AshIncrSnapshot *snap,
						 XLogRecPtr high_lsn)
{
	IncrTable  *t = find_table(nspname, relname);
	MemoryContext old;

	if (t == NULL)
		elog(ERROR, "ash_replicant: a chunk of a table outside the incremental attempt");
	old = MemoryContextSwitchTo(incr_cxt);
	/* a window the stream already passed is closed as it opens */
	if (high_lsn > windows_passed && !ash_incr_same_snapshot(snap, &closed_snap))
		add_window(t, chunk, lo, hi, snap, high_lsn);
	t->started = true;
	t->done = done;
	t->cursor = done ? NULL : parse_key(t, cursor);
	t->cursor_text = done ? NULL : copy_text_key(t, cursor);
	MemoryContextSwitchTo(old);
}

int
ash_incr_close_windows(XLogRecPtr passed)
{
	ListCell   *lc;
	int			open = 0;

	windows_passed = Max(windows_passed, passed);
	for (int pass = 0; pass < 2; pass++)
	{
		open = 0;
		foreach(lc, tables)
		{
			IncrTable  *t = lfirst(lc);
			ListCell   *wc;

			foreach(wc, t->windows)
			{
				IncrWindow *w = lfirst(wc);

				/*
				 * Closed: nothing it would skip can be delivered any more.
				 * First by position, then (pass 1) those showing what the
				 * last one closed showed.
				 */
				if (pass == 0 ? w->high_lsn <= passed : ash_incr_same_snapshot(&w->snap, &closed_snap))
				{
					t->windows = foreach_delete_current(t->windows, wc);
					if (w->lo)
						pfree(w->lo);
					if (w->hi)
						pfree(w->hi);
					if (pass == 0)
					{
						if (closed_snap.xip != NULL)
							pfree(closed_snap.xip);
						closed_snap = w->snap;	/* its xip kept */
					}
					else
						pfree(w->snap.xip);
					pfree(w);
					continue;
				}
				open++;
			}
		}
	}
	return open;
}

XLogRecPtr
ash_incr_windows_passed(void)
{
	return windows_passed;
}

int
ash_incr_open_windows(XLogRecPtr *lowest)
{
	ListCell   *lc;
	int			open = 0;

	*lowest = InvalidXLogRecPtr;
	foreach(lc, tables)
	{
		ListCell   *wc;

		foreach(wc, ((IncrTable *) lfirst(lc))->windows)
		{
			IncrWindow *w = lfirst(wc);

			open++;
			if (XLogRecPtrIsInvalid(*lowest) || w->high_lsn < *lowest)
				*lowest = w->high_lsn;
		}
	}
	return open;
}

/* ---------------------------------------------------------------------
 * Transactions a chunk's snapshot must show.
 * ---------------------------------------------------------------------
 */
void
ash_incr_note_xid(TransactionId xid)
{
	if (!TransactionIdIsNormal(xid))
		return;
	if (nnoted > 0 && noted[nnoted - 1] == xid)
		return;					/* the same transaction's next change */
	if (nnoted == noted_cap)
	{
		noted_cap = Max(64, noted_cap * 2);
		noted = noted == NULL ?
			MemoryContextAlloc(incr_cxt, sizeof(TransactionId) * noted_cap) :
			repalloc(noted, sizeof(TransactionId) * noted_cap);
	}
	noted[nnoted++] = xid;
	noted_adds++;
}

static int
xid_cmp(const void *a, const void *b)
{
	TransactionId x = *(const TransactionId *) a;
	TransactionId y = *(const TransactionId *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* Does snap show committed transaction xid? */
static bool
shows(const AshIncrSnapshot *snap, TransactionId xid)
{
	if (TransactionIdPrecedes(xid, snap->xmin))
		return true;
	if (!TransactionIdPrecedes(xid, snap->xmax))
		return false;
	return bsearch(&xid, snap->xip, snap->nxip, sizeof(TransactionId), xid_cmp) == NULL;
}

/*
 * The transactions a chunk's snapshot must show now, copied into xids;
 * -1 when there are more than max.
 */
int
ash_incr_noted_xids(TransactionId *xids, int max)
{
	if (nnoted > max)
		return -1;
	if (nnoted > 0)
		memcpy(xids, noted, sizeof(TransactionId) * nnoted);
	return nnoted;
}

/* How many transactions were noted, and how many checks forgot some, ever. */
void
ash_incr_noted_counts(uint64 *adds, uint64 *drops)
{
	*adds = noted_adds;
	*drops = noted_drops;
}

/* Does snap show every transaction of xids (a helper's chunk)? */
bool
ash_incr_snapshot_shows(const AshIncrSnapshot *snap, const TransactionId *xids, int n)
{
	for (int i = 0; i < n; i++)
		if (!shows(snap, xids[i]))
			return false;
	return true;
}

bool
ash_incr_snapshot_covers(const AshIncrSnapshot *snap)
{
	int			kept = 0;
	bool		covers = true;

	for (int i = 0; i < nnoted; i++)
	{
		if (shows(snap, noted[i]))
			continue;
		covers = false;
		noted[kept++] = noted[i];
	}
	if (kept < nnoted)
		noted_drops++;
	nnoted = kept;
	return covers;
}

/* ---------------------------------------------------------------------
 * The stream's side.
 * ---------------------------------------------------------------------
 */
static IncrTable *
table_of(AshApplyRel *rel)
{
	if (tables == NIL)
		return NULL;
	return find_table(rel->remote.nspname, rel->remote.relname);
}

/* Where each key column is among the relation's columns as last described. */
static void
locate_keys(IncrTable *t, AshApplyRel *rel)
{
	if (t->remote_idx != NULL && t->remote_relid == rel->remote.relid &&
		t->remote_natts == rel->remote.natts)
	{
		bool		same = true;

		for (int i = 0; i < t->nkeys && same; i++)
			same = strcmp(rel->remote.cols[t->remote_idx[i]].name, t->keys[i].name) == 0 &&
				rel->remote.cols[t->remote_idx[i]].type_oid == t->keys[i].typid;
		if (same)
			return;
	}
	if (t->remote_idx == NULL)
		t->remote_idx = MemoryContextAlloc(incr_cxt, sizeof(int) * t->nkeys);
	for (int i = 0; i < t->nkeys; i++)
	{
		t->remote_idx[i] = -1;
		for (int j = 0; j < rel->remote.natts; j++)
			if (strcmp(rel->remote.cols[j].name, t->keys[i].name) == 0 &&
				rel->remote.cols[j].type_oid == t->keys[i].typid)
				t->remote_idx[i] = j;
		if (t->remote_idx[i] < 0)
			ash_halt("snapshot_state_invalid",
					 "the primary key of %s changed during its incremental snapshot",
					 quote_qualified_identifier(t->nspname, t->relname));
	}
	t->remote_relid = rel->remote.relid;
	t->remote_natts = rel->remote.natts;
}

/*
 * The key of a tuple, as datums (in the caller's memory context).  old
 * (NULL: none) is the update's old key or row: a key column stored out of
 * line that the update left alone is "unchanged" in the new row, and its
 * value is the old one's (PostgreSQL logs the old key then).
 */
static Datum *
tuple_key(IncrTable *t, AshTuple *tup, AshTuple *old)
{
	Datum	   *d = palloc(sizeof(Datum) * t->nkeys);

	for (int i = 0; i < t->nkeys; i++)
	{
		AshColumnValue *v;

		if (t->remote_idx[i] >= tup->natts)
			ash_halt("protocol_violation", "a change of %s lacks a key column",
					 quote_qualified_identifier(t->nspname, t->relname));
		v = &tup->cols[t->remote_idx[i]];
		if (v->status == ASH_COL_UNCHANGED && old != NULL && t->remote_idx[i] < old->natts)
			v = &old->cols[t->remote_idx[i]];
		if (v->status == ASH_COL_TEXT)
			d[i] = InputFunctionCall(&t->keys[i].input, v->data, t->keys[i].ioparam, -1);
		else if (v->status == ASH_COL_BINARY)
		{
			StringInfoData buf;

			buf.data = v->data;
			buf.len = v->len;
			buf.maxlen = v->len;
			buf.cursor = 0;
			d[i] = ReceiveFunctionCall(&t->keys[i].recv, &buf, t->keys[i].ioparam, -1);
		}
		else
			ash_halt("unchanged_value_unavailable", "a change of %s lacks its primary key value",
					 quote_qualified_identifier(t->nspname, t->relname));
	}
	return d;
}

/* a <=> b in the source's primary-key order */
static int
key_cmp(IncrTable *t, Datum *a, Datum *b)
{
	for (int i = 0; i < t->nkeys; i++)
	{
		int32		r = DatumGetInt32(FunctionCall2Coll(&t->keys[i].cmp, t->keys[i].collation,
														a[i], b[i]));

		if (r != 0)
			return r;
	}
	return 0;
}

static bool
in_window(IncrTable *t, IncrWindow *w, Datum *k)
{
	return (w->lo == NULL || key_cmp(t, k, w->lo) > 0) &&
		(w->hi == NULL || key_cmp(t, k, w->hi) <= 0);
}

/* Does the stream apply xid's change to key k of t? */
static bool
applies(IncrTable *t, Datum *k, TransactionId xid)
{
	ListCell   *lc;

	if (!t->done && (!t->started || key_cmp(t, k, t->cursor) > 0))
	{
		/* not copied yet: the chunk that copies k must show xid */
		ash_incr_note_xid(xid);
		return false;
	}
	foreach(lc, t->windows)
	{
		IncrWindow *w = lfirst(lc);

		if (in_window(t, w, k))
			return !shows(&w->snap, xid);
	}
	return true;
}

void
ash_incr_judge(AshApplyRel *rel, AshChange *c, TransactionId xid, bool *apply_old,
			   bool *apply_new)
{
	IncrTable  *t = table_of(rel);
	AshTuple   *oldtup = NULL;
	AshTuple   *newtup = NULL;

	*apply_old = *apply_new = true;
	/* a table copied whole takes every change once its windows closed */
	if (t == NULL || (t->done && t->windows == NIL))
		return;
	if (!TransactionIdIsNormal(xid))
		ash_halt("protocol_violation", "a change of %s without its transaction id",
				 quote_qualified_identifier(t->nspname, t->relname));
	locate_keys(t, rel);
	switch (c->kind)
	{
		case ASH_CHANGE_INSERT:
			newtup = &c->u.insert.newtup;
			break;
		case ASH_CHANGE_UPDATE:
			newtup = &c->u.update.newtup;
			oldtup = c->u.update.oldkind != 0 ? &c->u.update.oldtup : newtup;
			break;
		case ASH_CHANGE_DELETE:
			oldtup = &c->u.delete.oldtup;
			break;
		default:
			return;
	}
	if (oldtup != NULL)
		*apply_old = applies(t, tuple_key(t, oldtup, NULL), xid);
	if (newtup == oldtup)
		*apply_new = *apply_old;
	else if (newtup != NULL)
		*apply_new = applies(t, tuple_key(t, newtup, oldtup), xid);
}

bool
ash_incr_marks_seen(AshApplyRel *rel)
{
	IncrTable  *t = table_of(rel);

	return t != NULL && !t->done && attempt_id != NULL;
}

bool
ash_incr_truncate_keep(AshApplyRel *rel, TransactionId xid, StringInfo keep, int *nargs,
					   Oid **types, Datum **values)
{
	IncrTable  *t = table_of(rel);
	ListCell   *lc;
	int		   *tcol;
	int			cap;

	*nargs = 0;
	if (t == NULL)
		return false;
	if (!t->done)
		ash_incr_note_xid(xid);
	foreach(lc, t->windows)
		if (shows(&((IncrWindow *) lfirst(lc))->snap, xid))
			break;
	if (lc == NULL)
		return false;

	/*
	 * Each key column as a target column of its own type, in the clear:
	 * only then do the target's rows say which window holds them.
	 */
	locate_keys(t, rel);
	tcol = palloc(sizeof(int) * t->nkeys);
	for (int i = 0; i < t->nkeys; i++)
	{
		tcol[i] = -1;
		for (int c = 0; c < rel->ncols; c++)
			if (rel->cols[c].remote_idx == t->remote_idx[i] &&
				rel->cols[c].typid == t->keys[i].typid && !rel->cols[c].encrypt)
				tcol[i] = c;
		if (tcol[i] < 0)
			ash_halt("snapshot_state_invalid",
					 "a TRUNCATE of %s that a chunk copied after, whose key column %s is not a target column of its type: reset the checkpoint to copy it again",
					 quote_qualified_identifier(t->nspname, t->relname),
					 quote_identifier(t->keys[i].name));
	}

	cap = 2 * t->nkeys * list_length(t->windows);
	*types = palloc(sizeof(Oid) * cap);
	*values = palloc(sizeof(Datum) * cap);
	foreach(lc, t->windows)
	{
		IncrWindow *w = lfirst(lc);
		Datum	   *bound[2] = {w->lo, w->hi};
		const char *op[2] = {">", "<="};
		bool		first = true;

		if (!shows(&w->snap, xid))
			continue;
		appendStringInfoString(keep, keep->len > 0 ? " OR (" : "(");
		for (int b = 0; b < 2; b++)
		{
			if (bound[b] == NULL)
				continue;		/* unbounded on this side */
			appendStringInfoString(keep, first ? "(" : " AND (");
			first = false;
			for (int i = 0; i < t->nkeys; i++)
			{
				AshTargetCol *col = &rel->cols[tcol[i]];

				appendStringInfo(keep, "%s%s%s", i ? ", " : "", quote_identifier(col->name),
								 type_is_collatable(col->typid) ? " COLLATE \"C\"" : "");
			}
			appendStringInfo(keep, ") %s (", op[b]);
			for (int i = 0; i < t->nkeys; i++)
			{
				(*types)[*nargs] = t->keys[i].typid;
				(*values)[*nargs] = bound[b][i];
				(*nargs)++;
				appendStringInfo(keep, "%s$%d", i ? ", " : "", *nargs);
			}
			appendStringInfoChar(keep, ')');
		}
		if (first)
			appendStringInfoString(keep, "true"); /* one window holds every key */
		appendStringInfoChar(keep, ')');
	}
	return true;
}

bool
ash_incr_next_table(char **nspname, char **relname, char ***cursor)
{
	return ash_incr_pending_table(0, nspname, relname, cursor);
}

bool
ash_incr_pending_table(int skip, char **nspname, char **relname, char ***cursor)
{
	ListCell   *lc;

	foreach(lc, tables)
	{
		IncrTable  *t = lfirst(lc);

		if (t->done || skip-- > 0)
			continue;
		*nspname = t->nspname;
		*relname = t->relname;
		*cursor = t->started ? t->cursor_text : NULL;
		return true;
	}
	return false;
}

bool
ash_incr_table_cursor(const char *nspname, const char *relname, char ***cursor)
{
	IncrTable  *t = find_table(nspname, relname);

	if (t == NULL || t->done)
		return false;
	*cursor = t->started ? t->cursor_text : NULL;
	return true;
}

int
ash_incr_remaining(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, tables)
		if (!((IncrTable *) lfirst(lc))->done)
			n++;
	return n;
}
