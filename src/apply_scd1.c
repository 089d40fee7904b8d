/*-------------------------------------------------------------------------
 *
 * apply_scd1.c
 *	  SCD1 apply strategy: the mirror holds the current state of each row.
 *
 * NOTES
 *	  insert  -> INSERT ... ON CONFLICT (identity) DO UPDATE (upsert)
 *	  update  -> UPDATE ... SET <sent columns> WHERE identity = old key;
 *				 no row: insert the new image when every column is known,
 *				 else halt unchanged_value_unavailable (a value would have
 *				 to be invented).  A changed identity is covered by the
 *				 same statement: the key columns are in the SET list.
 *	  delete  -> DELETE ... WHERE identity = old key; no row: counted and
 *				 reported as an event, never silently.
 *	  truncate (on_truncate mirror) -> DELETE of every row, in-transaction.
 *
 *	  Attribute tenancy adds "AND tenant = old tenant" to updates and
 *	  deletes, and "WHERE t.tenant = EXCLUDED.tenant" to the upsert's
 *	  DO UPDATE: an upsert that affects no row met another tenant's row
 *	  under the same identity and halts tenant_conflict.
 *
 *	  Consecutive inserts into one target are gathered (up to
 *	  INSERT_BUFFER_ROWS) and written by one statement,
 *	  INSERT ... SELECT * FROM ROWS FROM (unnest($1), ...) ON CONFLICT ..., with one
 *	  array parameter per column: one executor run instead of one per row.
 *	  Anything else that is applied first flushes the buffer (the driver
 *	  calls flush), so the order of effects is the source's.  A second row
 *	  with the same identity in one statement is impossible for ON CONFLICT,
 *	  so a row whose identity may already be buffered flushes first.
 *
 *	  Plans are prepared once per target table and operation (and per set
 *	  of sent columns for updates, since unchanged TOAST columns are left
 *	  out) and kept across transactions.  Row counts are checked exactly.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"
#include "common/hashfn.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/memutils.h"

#include "apply.h"
#include "errors.h"

typedef struct UpdatePlan
{
	Bitmapset  *present;		/* target-column indexes in the SET list */
	SPIPlanPtr	plan;
} UpdatePlan;

typedef struct Scd1Plans
{
	SPIPlanPtr	upsert;
	bool		upsert_checks_tenant;
	SPIPlanPtr	upsert_many;	/* unnest form; NULL until first needed */
	SPIPlanPtr	insert_many;	/* the same without ON CONFLICT */
	int			optimism_paused;	/* flushes left that go straight to upsert */
	bool		many_unsupported;	/* a column type has no array type */
	SPIPlanPtr	delete;
	List	   *updates;		/* UpdatePlan * */
} Scd1Plans;

static Scd1Plans *
plans_of(AshApplyTarget *tgt)
{
	if (tgt->plans == NULL)
		tgt->plans = MemoryContextAllocZero(tgt->cxt, sizeof(Scd1Plans));
	return (Scd1Plans *) tgt->plans;
}

/* "WHERE k1 = $n AND ... [AND tenant = $m]"; returns the parameter count */
static int
append_key_predicate(StringInfo sql, AshApplyRel *rel, int first_param, Oid *types)
{
	int			n = 0;

	appendStringInfoString(sql, " WHERE ");
	for (int k = 0; k < rel->nkeys; k++)
	{
		AshTargetCol *col = &rel->cols[rel->keys[k]];

		if (k > 0)
			appendStringInfoString(sql, " AND ");
		appendStringInfo(sql, "%s OPERATOR(pg_catalog.=) $%d",
						 quote_identifier(col->name), first_param + n);
		types[first_param - 1 + n] = col->typid;
		n++;
	}
	if (ash_tenant_scoped(rel))
	{
		AshTargetCol *col = &rel->cols[rel->tenant_col];

		appendStringInfo(sql, " AND %s OPERATOR(pg_catalog.=) $%d",
						 quote_identifier(col->name), first_param + n);
		types[first_param - 1 + n] = col->typid;
		n++;
	}
	return n;
}

/* Key (and tenant) parameter values from a key image. */
static int
key_values(AshApplyRel *rel, AshRowImage *key, Datum *values, char *nulls)
{
	int			n = 0;

	for (int k = 0; k < rel->nkeys; k++)
	{
		values[n] = key->values[rel->keys[k]];
		nulls[n++] = ' ';
	}
	if (ash_tenant_scoped(rel))
	{
		values[n] = key->values[rel->tenant_col];
		nulls[n++] = key->nulls[rel->tenant_col] ? 'n' : ' ';
	}
	return n;
}

/* "INSERT INTO t AS t (cols) <source>": the plain insert */
static void
build_insert(StringInfo sql, AshApplyRel *rel, AshApplyTarget *tgt, bool many)
{
	appendStringInfo(sql, "INSERT INTO %s AS t (", tgt->name);
	for (int c = 0; c < rel->ncols; c++)
		appendStringInfo(sql, "%s%s", c ? ", " : "", quote_identifier(rel->cols[c].name));
	appendStringInfoString(sql, many ? ") SELECT * FROM ROWS FROM (" : ") VALUES (");
	for (int c = 0; c < rel->ncols; c++)
		appendStringInfo(sql, many ? "%spg_catalog.unnest($%d)" : "%s$%d", c ? ", " : "", c + 1);
	appendStringInfoChar(sql, ')');
}

/*
 * "INSERT INTO t AS t (cols) <source> ON CONFLICT (identity) DO UPDATE SET
 * ... [WHERE t.tenant = EXCLUDED.tenant]"; source is "VALUES ($1, ...)" or
 * the multi-row "SELECT * FROM ROWS FROM (unnest($1), ...)".  Returns
 * whether the statement checks the tenant (affects no row on a conflict
 * with another tenant).
 */
static bool
build_upsert(StringInfo sql, AshApplyRel *rel, AshApplyTarget *tgt, bool many)
{
	bool		any_set = false;

	build_insert(sql, rel, tgt, many);
	appendStringInfoString(sql, " ON CONFLICT (");
	for (int k = 0; k < rel->nkeys; k++)
		appendStringInfo(sql, "%s%s", k ? ", " : "",
						 quote_identifier(rel->cols[rel->keys[k]].name));
	appendStringInfoChar(sql, ')');
	for (int c = 0; c < rel->ncols; c++)
	{
		const char *n;

		if (rel->cols[c].is_identity)
			continue;
		n = quote_identifier(rel->cols[c].name);
		appendStringInfo(sql, "%s%s = EXCLUDED.%s", any_set ? ", " : " DO UPDATE SET ", n, n);
		any_set = true;
	}
	if (!any_set)
	{
		appendStringInfoString(sql, " DO NOTHING");
		return false;
	}
	if (ash_tenant_scoped(rel))
	{
		const char *n = quote_identifier(rel->cols[rel->tenant_col].name);

		appendStringInfo(sql, " WHERE t.%s OPERATOR(pg_catalog.=) EXCLUDED.%s", n, n);
		return true;
	}
	return false;
}

static SPIPlanPtr
upsert_plan(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd1Plans  *st = plans_of(tgt);
	StringInfoData sql;
	Oid		   *types;

	if (st->upsert)
		return st->upsert;
	types = palloc(sizeof(Oid) * rel->ncols);
	for (int c = 0; c < rel->ncols; c++)
		types[c] = rel->cols[c].typid;
	initStringInfo(&sql);
	st->upsert_checks_tenant = build_upsert(&sql, rel, tgt, false);
	st->upsert = ash_spi_prepare_kept(sql.data, rel->ncols, types);
	return st->upsert;
}

static char *
nulls_of(AshApplyRel *rel, AshRowImage *img)
{
	char	   *nulls = palloc(rel->ncols + 1);

	for (int c = 0; c < rel->ncols; c++)
		nulls[c] = img->nulls[c] ? 'n' : ' ';
	nulls[rel->ncols] = '\0';
	return nulls;
}

/* ---------------------------------------------------------------------
 * Multi-row inserts.
 * ---------------------------------------------------------------------
 */
#define INSERT_BUFFER_ROWS 1000

typedef struct InsertBuffer
{
	AshApplyRel *rel;			/* NULL when empty */
	AshApplyTarget *tgt;
	int			nrows;
	ArrayBuildState **cols;
	uint32	   *key_hashes;		/* open-addressing set of identity hashes */
	XLogRecPtr	first_commit_lsn;	/* source transaction of the first row */
	TransactionId first_xid;
	MemoryContext cxt;
} InsertBuffer;

static InsertBuffer ibuf;

static SPIPlanPtr
upsert_many_plan(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd1Plans  *st = plans_of(tgt);
	StringInfoData sql;
	Oid		   *types;

	if (st->upsert_many || st->many_unsupported)
		return st->upsert_many;
	types = palloc(sizeof(Oid) * rel->ncols);
	for (int c = 0; c < rel->ncols; c++)
	{
		types[c] = get_array_type(rel->cols[c].typid);
		if (!OidIsValid(types[c]))
		{
			st->many_unsupported = true;
			return NULL;
		}
	}
	initStringInfo(&sql);
	(void) build_upsert(&sql, rel, tgt, true);
	st->upsert_many = ash_spi_prepare_kept(sql.data, rel->ncols, types);
	resetStringInfo(&sql);
	build_insert(&sql, rel, tgt, true);
	st->insert_many = ash_spi_prepare_kept(sql.data, rel->ncols, types);
	return st->upsert_many;
}

/* 2 x INSERT_BUFFER_ROWS slots, power of two; 0 marks an empty slot */
#define KEY_SET_SIZE 2048

static bool
hash_set_contains(uint32 h)
{
	h = h ? h : 1;
	for (uint32 i = h & (KEY_SET_SIZE - 1);; i = (i + 1) & (KEY_SET_SIZE - 1))
	{
		if (ibuf.key_hashes[i] == 0)
			return false;
		if (ibuf.key_hashes[i] == h)
			return true;
	}
}

static void
hash_set_add(uint32 h)
{
	h = h ? h : 1;
	for (uint32 i = h & (KEY_SET_SIZE - 1);; i = (i + 1) & (KEY_SET_SIZE - 1))
	{
		if (ibuf.key_hashes[i] == 0 || ibuf.key_hashes[i] == h)
		{
			ibuf.key_hashes[i] = h;
			return;
		}
	}
}

static uint32
identity_hash(AshApplyRel *rel, AshRowImage *row)
{
	uint32		h = 0;

	for (int k = 0; k < rel->nkeys; k++)
	{
		AshTargetCol *col = &rel->cols[rel->keys[k]];

		h = hash_combine(h, row->nulls[rel->keys[k]] ? 0 :
						 datum_image_hash(row->values[rel->keys[k]], col->typbyval, col->typlen));
	}
	return h;
}

static void
scd1_discard(void)
{
	ibuf.rel = NULL;
	ibuf.tgt = NULL;
	ibuf.nrows = 0;
	ibuf.cols = NULL;
	ibuf.key_hashes = NULL;
	if (ibuf.cxt)
		MemoryContextReset(ibuf.cxt);
}

/*
 * Most buffered rows are new, so a plain INSERT is tried first: it skips
 * what ON CONFLICT costs per row (an identity-index probe, a speculative
 * insertion lock, a second index pass).  It runs in a subtransaction; a
 * unique violation rolls it back whole (rows and trigger effects) and the
 * rows go again as the upsert.  After a conflict the target skips the
 * attempt for a while: a mirror being refilled would conflict every time.
 */
#define OPTIMISM_PAUSE_FLUSHES 64

static void
scd1_flush(void)
{
	AshApplyRel *rel = ibuf.rel;
	AshApplyTarget *tgt = ibuf.tgt;
	Scd1Plans  *st;
	Datum	   *values;
	uint64		n = 0;
	bool		inserted = false;
	int			nrows = ibuf.nrows;
	AshApplyErrorContext saved = ash_apply_errctx;

	if (rel == NULL || nrows == 0)
	{
		scd1_discard();
		return;
	}
	st = plans_of(tgt);
	values = palloc(sizeof(Datum) * rel->ncols);
	for (int c = 0; c < rel->ncols; c++)
		values[c] = makeArrayResult(ibuf.cols[c], CurrentMemoryContext);

	/* the rows may come from several source transactions: name the first */
	ash_apply_errctx.command = "insert";
	ash_apply_errctx.relation = tgt->log_name;
	ash_apply_errctx.commit_lsn = ibuf.first_commit_lsn;
	ash_apply_errctx.xid = ibuf.first_xid;
	PushActiveSnapshot(GetTransactionSnapshot());
	if (st->optimism_paused > 0)
		st->optimism_paused--;
	else if (ash_spi_execute_or_catch(st->insert_many, values, NULL, SPI_OK_INSERT,
									  ERRCODE_UNIQUE_VIOLATION, &n))
		inserted = true;
	else
		st->optimism_paused = OPTIMISM_PAUSE_FLUSHES;
	if (!inserted)
		n = ash_spi_execute(st->upsert_many, values, NULL, SPI_OK_INSERT);
	PopActiveSnapshot();
	ash_apply_errctx = saved;

	if (n < nrows && st->upsert_checks_tenant)
		ash_halt("tenant_conflict", "a row of another tenant holds an identity in %s", tgt->log_name);
	if (n > nrows)
		elog(ERROR, "ash_replicant: multi-row upsert affected more rows than it wrote");
	scd1_discard();
}

/* Gather the row for a multi-row insert; false when it cannot be. */
static bool
buffer_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow)
{
	uint32		h;
	MemoryContext old;

	/* the first statement of a target tells whether its types allow it */
	(void) upsert_plan(rel, tgt);
	if (upsert_many_plan(rel, tgt) == NULL)
		return false;

	if (ibuf.rel != NULL && (ibuf.rel != rel || ibuf.tgt != tgt))
		scd1_flush();
	h = identity_hash(rel, newrow);
	if (ibuf.rel != NULL && hash_set_contains(h))
		scd1_flush();

	if (ibuf.cxt == NULL)
		ibuf.cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant insert buffer",
										 ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(ibuf.cxt);
	if (ibuf.rel == NULL)
	{
		ibuf.rel = rel;
		ibuf.tgt = tgt;
		ibuf.nrows = 0;
		ibuf.cols = palloc0(sizeof(ArrayBuildState *) * rel->ncols);
		for (int c = 0; c < rel->ncols; c++)
			ibuf.cols[c] = initArrayResult(rel->cols[c].typid, ibuf.cxt, false);
		ibuf.key_hashes = palloc0(sizeof(uint32) * KEY_SET_SIZE);
		ibuf.first_commit_lsn = ash_apply_errctx.commit_lsn;
		ibuf.first_xid = ash_apply_errctx.xid;
	}
	for (int c = 0; c < rel->ncols; c++)
		accumArrayResult(ibuf.cols[c], newrow->values[c], newrow->nulls[c],
						 rel->cols[c].typid, ibuf.cxt);
	hash_set_add(h);
	ibuf.nrows++;
	MemoryContextSwitchTo(old);

	if (ibuf.nrows >= INSERT_BUFFER_ROWS)
		scd1_flush();
	return true;
}

static void
scd1_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow)
{
	SPIPlanPtr	plan;
	uint64		n;

	if (!newrow->complete)
		ash_halt("unchanged_value_unavailable", "insert into %s lacks a column value",
				 tgt->log_name);
	if (buffer_insert(rel, tgt, newrow))
		return;
	plan = upsert_plan(rel, tgt);
	n = ash_spi_execute(plan, newrow->values, nulls_of(rel, newrow), SPI_OK_INSERT);
	if (n == 0 && plans_of(tgt)->upsert_checks_tenant)
		ash_halt("tenant_conflict", "a row of another tenant holds the identity in %s",
				 tgt->log_name);
	if (n > 1)
		elog(ERROR, "ash_replicant: upsert affected more than one row");
}

static SPIPlanPtr
update_plan(AshApplyRel *rel, AshApplyTarget *tgt, Bitmapset *present)
{
	Scd1Plans  *st = plans_of(tgt);
	ListCell   *lc;
	StringInfoData sql;
	Oid		   *types;
	int			nset = bms_num_members(present);
	int			nkey;
	int			c = -1;
	int			i = 0;
	UpdatePlan *up;
	MemoryContext old;

	foreach(lc, st->updates)
	{
		up = lfirst(lc);
		if (bms_equal(up->present, present))
			return up->plan;
	}

	types = palloc(sizeof(Oid) * (nset + rel->nkeys + 1));
	initStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s SET ", tgt->name);
	while ((c = bms_next_member(present, c)) >= 0)
	{
		appendStringInfo(&sql, "%s%s = $%d", i ? ", " : "",
						 quote_identifier(rel->cols[c].name), i + 1);
		types[i] = rel->cols[c].typid;
		i++;
	}
	nkey = append_key_predicate(&sql, rel, nset + 1, types);

	old = MemoryContextSwitchTo(tgt->cxt);
	up = palloc(sizeof(UpdatePlan));
	up->present = bms_copy(present);
	up->plan = ash_spi_prepare_kept(sql.data, nset + nkey, types);
	st->updates = lappend(st->updates, up);
	MemoryContextSwitchTo(old);
	return up->plan;
}

static void
scd1_update(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key, AshRowImage *newrow)
{
	Bitmapset  *present = NULL;
	int			nset;
	Datum	   *values;
	char	   *nulls;
	int			i = 0;
	int			c = -1;
	uint64		n;

	for (int j = 0; j < rel->ncols; j++)
		if (newrow->present[j])
			present = bms_add_member(present, j);
	if (present == NULL)
		return;					/* nothing sent that we map */

	nset = bms_num_members(present);
	values = palloc(sizeof(Datum) * (nset + rel->nkeys + 1));
	nulls = palloc(nset + rel->nkeys + 2);
	while ((c = bms_next_member(present, c)) >= 0)
	{
		values[i] = newrow->values[c];
		nulls[i] = newrow->nulls[c] ? 'n' : ' ';
		i++;
	}
	i += key_values(rel, key, values + i, nulls + i);
	nulls[i] = '\0';

	n = ash_spi_execute(update_plan(rel, tgt, present), values, nulls, SPI_OK_UPDATE);
	if (n == 1)
		return;
	if (n > 1)
		elog(ERROR, "ash_replicant: update affected more than one row");

	/* the mirror lacks the row (go-forward mirror): insert when complete */
	if (!newrow->complete)
		ash_halt("unchanged_value_unavailable",
				 "update of a row %s does not have, with unchanged TOAST columns",
				 tgt->log_name);
	scd1_insert(rel, tgt, newrow);
}

static void
scd1_delete(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key)
{
	Scd1Plans  *st = plans_of(tgt);
	Datum	   *values = palloc(sizeof(Datum) * (rel->nkeys + 1));
	char	   *nulls = palloc(rel->nkeys + 2);
	int			nparams;
	uint64		n;

	if (st->delete == NULL)
	{
		StringInfoData sql;
		Oid		   *types = palloc(sizeof(Oid) * (rel->nkeys + 1));
		int			nkey;

		initStringInfo(&sql);
		appendStringInfo(&sql, "DELETE FROM %s", tgt->name);
		nkey = append_key_predicate(&sql, rel, 1, types);
		st->delete = ash_spi_prepare_kept(sql.data, nkey, types);
	}
	nparams = key_values(rel, key, values, nulls);
	nulls[nparams] = '\0';
	n = ash_spi_execute(st->delete, values, nulls, SPI_OK_DELETE);
	if (n == 0)
		ash_apply_count_missing_delete(tgt);
	else if (n > 1)
		elog(ERROR, "ash_replicant: delete affected more than one row");
}

static void
scd1_truncate(AshApplyRel *rel, AshApplyTarget *tgt)
{
	StringInfoData sql;
	int			ret;
	MemoryContext cxt = CurrentMemoryContext;

	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s", tgt->name);
	ret = SPI_execute(sql.data, false, 0);
	MemoryContextSwitchTo(cxt);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "ash_replicant: truncate mirror failed");
}

static void
scd1_release(AshApplyTarget *tgt)
{
	Scd1Plans  *st = tgt->plans;
	ListCell   *lc;

	if (st == NULL)
		return;
	/* on abort the driver discarded the buffer first; otherwise write it */
	if (ibuf.tgt == tgt)
		scd1_flush();
	if (st->upsert)
		SPI_freeplan(st->upsert);
	if (st->upsert_many)
		SPI_freeplan(st->upsert_many);
	if (st->delete)
		SPI_freeplan(st->delete);
	foreach(lc, st->updates)
		SPI_freeplan(((UpdatePlan *) lfirst(lc))->plan);
	tgt->plans = NULL;
}

const AshApplyStrategy ash_scd1_strategy = {
	.name = "scd1",
	.insert = scd1_insert,
	.update = scd1_update,
	.delete = scd1_delete,
	.truncate = scd1_truncate,
	.release = scd1_release,
	.flush = scd1_flush,
	.discard = scd1_discard,
};
