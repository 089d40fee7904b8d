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
#include "utils/builtins.h"
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

static SPIPlanPtr
prepare_kept(const char *sql, int nargs, Oid *types)
{
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

	if (plan == NULL)
		elog(ERROR, "ash_replicant: could not prepare an apply statement (%s)",
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "ash_replicant: could not keep an apply plan");
	return plan;
}

/* Is the write scoped by a tenant column that is not part of the key? */
static bool
tenant_scoped(AshApplyRel *rel)
{
	return rel->tenant_col >= 0 && !rel->cols[rel->tenant_col].is_identity;
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
	if (tenant_scoped(rel))
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
	if (tenant_scoped(rel))
	{
		values[n] = key->values[rel->tenant_col];
		nulls[n++] = key->nulls[rel->tenant_col] ? 'n' : ' ';
	}
	return n;
}

static SPIPlanPtr
upsert_plan(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd1Plans  *st = plans_of(tgt);
	StringInfoData sql;
	Oid		   *types;
	bool		any_set = false;

	if (st->upsert)
		return st->upsert;
	types = palloc(sizeof(Oid) * rel->ncols);
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s AS t (", tgt->name);
	for (int c = 0; c < rel->ncols; c++)
		appendStringInfo(&sql, "%s%s", c ? ", " : "", quote_identifier(rel->cols[c].name));
	appendStringInfoString(&sql, ") VALUES (");
	for (int c = 0; c < rel->ncols; c++)
	{
		appendStringInfo(&sql, "%s$%d", c ? ", " : "", c + 1);
		types[c] = rel->cols[c].typid;
	}
	appendStringInfoString(&sql, ") ON CONFLICT (");
	for (int k = 0; k < rel->nkeys; k++)
		appendStringInfo(&sql, "%s%s", k ? ", " : "",
						 quote_identifier(rel->cols[rel->keys[k]].name));
	appendStringInfoChar(&sql, ')');
	for (int c = 0; c < rel->ncols; c++)
	{
		const char *n;

		if (rel->cols[c].is_identity)
			continue;
		n = quote_identifier(rel->cols[c].name);
		appendStringInfo(&sql, "%s%s = EXCLUDED.%s", any_set ? ", " : " DO UPDATE SET ", n, n);
		any_set = true;
	}
	if (!any_set)
		appendStringInfoString(&sql, " DO NOTHING");
	else if (tenant_scoped(rel))
	{
		const char *n = quote_identifier(rel->cols[rel->tenant_col].name);

		appendStringInfo(&sql, " WHERE t.%s OPERATOR(pg_catalog.=) EXCLUDED.%s", n, n);
		st->upsert_checks_tenant = true;
	}
	st->upsert = prepare_kept(sql.data, rel->ncols, types);
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

static void
scd1_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow)
{
	SPIPlanPtr	plan;
	uint64		n;

	if (!newrow->complete)
		ash_halt("unchanged_value_unavailable", "insert into %s lacks a column value",
				 tgt->name);
	plan = upsert_plan(rel, tgt);
	n = ash_spi_execute(plan, newrow->values, nulls_of(rel, newrow), SPI_OK_INSERT);
	if (n == 0 && plans_of(tgt)->upsert_checks_tenant)
		ash_halt("tenant_conflict", "a row of another tenant holds the identity in %s",
				 tgt->name);
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
	up->plan = prepare_kept(sql.data, nset + nkey, types);
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
				 tgt->name);
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
		st->delete = prepare_kept(sql.data, nkey, types);
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

	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s", tgt->name);
	ret = SPI_execute(sql.data, false, 0);
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
	if (st->upsert)
		SPI_freeplan(st->upsert);
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
};
