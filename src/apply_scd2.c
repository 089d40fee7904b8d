/*-------------------------------------------------------------------------
 *
 * apply_scd2.c
 *	  SCD2 apply strategy: the mirror keeps every version of each row.
 *
 * NOTES
 *	  A version is a target row with a window [valid_from, valid_to) of
 *	  source commit LSNs (bigint), optionally the commit times of both ends
 *	  and a "current" flag.  The identity of a change is the business key
 *	  (relmap.c); the target's primary key is a surrogate the table fills.
 *	  At most one version per business key is open (valid_to IS NULL): the
 *	  partial unique index registration demands.  With L the commit LSN of
 *	  the source transaction (ash_apply_current()):
 *
 *	  insert   -> open a version (valid_from = L, current = true);
 *	  update   -> close the open version (valid_to = L, current = false)
 *				  and open a new one with the complete new row; a changed
 *				  business key closes the old key's version and opens the
 *				  new key's;
 *	  delete   -> close the open version (history is never erased);
 *	  truncate -> on_truncate 'close': close every open version;
 *				  'mirror': delete the history rows.
 *	  A tenant change is the driver's relocation: delete (close under the
 *	  old tenant) then insert (open under the new one).
 *
 *	  Idempotent by LSN.  Each statement only acts on the state a first
 *	  delivery would meet, so a re-delivered change (already applied, e.g.
 *	  after a checkpoint was moved back) never double-closes or
 *	  double-opens:
 *
 *	  close = UPDATE ... WHERE key AND valid_to IS NULL AND valid_from < L
 *	  open  = INSERT ... SELECT ... WHERE NOT EXISTS (a version of the key
 *			  that is open or starts at or after L)
 *			  ON CONFLICT (business key, valid_from) DO NOTHING
 *
 *	  When a close finds nothing, one probe of the key tells the cases
 *	  apart: a version starting or closed after L, closed at L, or starting
 *	  at L but written by an earlier destination transaction, means this
 *	  change was applied before (nothing to do); an open version starting
 *	  at L written by THIS destination transaction was opened by an earlier
 *	  change of the same source transaction.
 *
 *	  Such evidence also marks the whole source transaction as re-delivered
 *	  for the target (transactions are applied in commit order).  Its later
 *	  changes may then meet keys whose versions at L the first delivery
 *	  opened and removed again within the transaction (a key renamed and
 *	  deleted, say): a version that cannot be completed is left out instead
 *	  of halting, and a delete that finds nothing is not a missing row.  A
 *	  version that can be opened again is one the first delivery removed
 *	  later in the same transaction (otherwise it, or later history, stops
 *	  the open), so the replay removes it again too.
 *
 *	  Several changes of one key in one source transaction: versions are
 *	  kept at commit granularity.  A version opened at L and changed again
 *	  at L never existed at any commit boundary: it is replaced (update) or
 *	  removed (delete, truncate close) rather than left as an empty window
 *	  [L, L).  So insert+update at L leaves one version from L; update+delete
 *	  at L leaves the previous version closed at L.
 *
 *	  Full images.  A new version needs every column.  Unchanged-TOAST
 *	  columns come from the old tuple under REPLICA IDENTITY FULL (the
 *	  driver merges them), else from the version being closed (the close
 *	  RETURNs the mapped columns), else the pipeline halts
 *	  unchanged_value_unavailable.
 *
 *	  Attribute tenancy scopes the close by the tenant (as SCD1 scopes its
 *	  writes); an open version of another tenant under the same business
 *	  key halts tenant_conflict -- but for a snapshot row of a provenance
 *	  mapping, where such a version the attempt has not seen is stale (the
 *	  row moved while nothing streamed; the source's key names one row): it
 *	  is closed at the row's position, as retirement would close it, and the
 *	  row's version opened (apply_scd1.c replaces such a row).  A closed
 *	  one does not halt: it is history (a relocation closes the old
 *	  tenant's version at L, and a later change of the key in the same
 *	  source transaction meets it beside the new tenant's version opened
 *	  at L) -- unless it lies past L, where only another sink writing the
 *	  same target can have put it.
 *
 *	  Plans are prepared once per target and kept; row counts are checked.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "apply_strategy.h"
#include "errors.h"
#include "provenance.h"
#include "spi_util.h"

typedef struct Scd2Plans
{
	SPIPlanPtr	close;			/* close the open version */
	SPIPlanPtr	close_returning;	/* same, RETURNING the mapped columns */
	SPIPlanPtr	open;			/* guarded insert of a version */
	SPIPlanPtr	probe;			/* versions of a key that are open or >= L */
	SPIPlanPtr	erase;			/* remove the version opened at L */
	SPIPlanPtr	erase_returning;
	SPIPlanPtr	truncate_close;
	SPIPlanPtr	truncate_transient;
	SPIPlanPtr	truncate_erase;
	SPIPlanPtr	close_stale;	/* close another tenant's stale open version */
	int			nkeyparams;		/* business key (+ tenant) parameters */
	XLogRecPtr	replay_lsn;		/* this target already holds the source
								 * transaction of that commit LSN */
} Scd2Plans;

/* What a probe found for one key. */
typedef enum Scd2State
{
	SCD2_NONE,					/* no version of the key is open */
	SCD2_OPEN_EARLIER,			/* open since before L (another tenant's) */
	SCD2_TRANSIENT,				/* open since L, opened by this transaction */
	SCD2_REPLAYED				/* history already past this change */
} Scd2State;

static Scd2Plans *
plans_of(AshApplyTarget *tgt)
{
	if (tgt->plans == NULL)
	{
		tgt->plans_owner = &ash_scd2_strategy;
		tgt->plans = MemoryContextAllocZero(tgt->cxt, sizeof(Scd2Plans));
	}
	return (Scd2Plans *) tgt->plans;
}

static const char *
qcol(const char *name)
{
	return quote_identifier(name);
}

static void
append_returning(StringInfo sql, AshApplyRel *rel)
{
	appendStringInfoString(sql, " RETURNING ");
	for (int c = 0; c < rel->ncols; c++)
		appendStringInfo(sql, "%s%s", c ? ", " : "", qcol(rel->cols[c].name));
}

/*
 * "UPDATE t SET valid_to = $lsn[, valid_to_ts = $lsn+1][, current = false]":
 * what closes a version, at the change's commit LSN and time.
 */
static void
append_close_update(StringInfo sql, AshApplyTarget *tgt, AshMapping *m, int lsn_param)
{
	appendStringInfo(sql, "UPDATE %s SET %s = $%d", tgt->name,
					 qcol(m->history_valid_to_lsn_column), lsn_param);
	if (m->history_valid_to_ts_column)
		appendStringInfo(sql, ", %s = $%d", qcol(m->history_valid_to_ts_column), lsn_param + 1);
	if (m->history_current_column)
		appendStringInfo(sql, ", %s = false", qcol(m->history_current_column));
}

/*
 * UPDATE t SET valid_to = $L[, valid_to_ts = $ts][, current = false]
 * WHERE key [AND tenant] AND valid_to IS NULL AND valid_from < $L
 * Parameters: key..., [tenant], L, ts (declared even when unused).
 */
static SPIPlanPtr
close_plan(AshApplyRel *rel, AshApplyTarget *tgt, bool returning)
{
	Scd2Plans  *st = plans_of(tgt);
	AshMapping *m = rel->map;
	StringInfoData sql;
	StringInfoData where;
	Oid		   *types;
	int			lsn_param;
	SPIPlanPtr	plan;

	if (returning ? st->close_returning : st->close)
		return returning ? st->close_returning : st->close;

	types = palloc(sizeof(Oid) * (rel->nkeys + 3));
	initStringInfo(&where);
	lsn_param = ash_append_key_predicate(&where, rel, 1, types, true);
	st->nkeyparams = lsn_param - 1;
	types[lsn_param - 1] = INT8OID;
	types[lsn_param] = TIMESTAMPTZOID;

	initStringInfo(&sql);
	append_close_update(&sql, tgt, m, lsn_param);
	appendStringInfo(&sql, " WHERE %s AND %s IS NULL AND %s OPERATOR(pg_catalog.<) $%d",
					 where.data, qcol(m->history_valid_to_lsn_column),
					 qcol(m->history_valid_from_lsn_column), lsn_param);
	if (returning)
		append_returning(&sql, rel);
	plan = ash_spi_prepare_kept(sql.data, lsn_param + 1, types);
	if (returning)
		st->close_returning = plan;
	else
		st->close = plan;
	return plan;
}

/*
 * INSERT INTO t (cols, valid_from[, valid_from_ts][, current])
 * SELECT $1.., $L[, $ts][, true]
 * WHERE NOT EXISTS (a version of the key open or starting at/after L)
 * ON CONFLICT (business key, valid_from) DO NOTHING
 */
static SPIPlanPtr
open_plan(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd2Plans  *st = plans_of(tgt);
	AshMapping *m = rel->map;
	StringInfoData sql;
	Oid		   *types;
	int			lsn_param = rel->ncols + 1;

	if (st->open)
		return st->open;
	types = palloc(sizeof(Oid) * (rel->ncols + 2));
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s (", tgt->name);
	for (int c = 0; c < rel->ncols; c++)
		appendStringInfo(&sql, "%s, ", qcol(rel->cols[c].name));
	appendStringInfoString(&sql, qcol(m->history_valid_from_lsn_column));
	if (m->history_valid_from_ts_column)
		appendStringInfo(&sql, ", %s", qcol(m->history_valid_from_ts_column));
	if (m->history_current_column)
		appendStringInfo(&sql, ", %s", qcol(m->history_current_column));
	/* the source's values, into identity columns too (apply_scd1.c) */
	appendStringInfoString(&sql, ") OVERRIDING SYSTEM VALUE SELECT ");
	for (int c = 0; c < rel->ncols; c++)
	{
		appendStringInfo(&sql, "$%d, ", c + 1);
		types[c] = rel->cols[c].typid;
	}
	types[lsn_param - 1] = INT8OID;
	types[lsn_param] = TIMESTAMPTZOID;
	appendStringInfo(&sql, "$%d", lsn_param);
	if (m->history_valid_from_ts_column)
		appendStringInfo(&sql, ", $%d", lsn_param + 1);
	if (m->history_current_column)
		appendStringInfoString(&sql, ", true");
	appendStringInfo(&sql, " WHERE NOT EXISTS (SELECT 1 FROM %s v WHERE ", tgt->name);
	for (int k = 0; k < rel->nkeys; k++)
	{
		int			c = rel->keys[k];

		appendStringInfo(&sql, "v.%s OPERATOR(pg_catalog.=) $%d AND ", qcol(rel->cols[c].name), c + 1);
	}
	appendStringInfo(&sql, "(v.%s IS NULL OR v.%s OPERATOR(pg_catalog.>=) $%d))",
					 qcol(m->history_valid_to_lsn_column),
					 qcol(m->history_valid_from_lsn_column), lsn_param);
	appendStringInfoString(&sql, " ON CONFLICT (");
	for (int k = 0; k < rel->nkeys; k++)
		appendStringInfo(&sql, "%s, ", qcol(rel->cols[rel->keys[k]].name));
	appendStringInfo(&sql, "%s) DO NOTHING", qcol(m->history_valid_from_lsn_column));
	st->open = ash_spi_prepare_kept(sql.data, lsn_param + 1, types);
	return st->open;
}

/*
 * SELECT valid_from, valid_to, xmin, same tenant[, seen attempt]
 * FROM t WHERE business key
 *   AND (valid_to IS NULL OR valid_to >= $L OR valid_from >= $L)
 */
static SPIPlanPtr
probe_plan(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd2Plans  *st = plans_of(tgt);
	AshMapping *m = rel->map;
	StringInfoData sql;
	StringInfoData where;
	Oid		   *types;
	int			next;

	if (st->probe)
		return st->probe;
	types = palloc(sizeof(Oid) * (rel->nkeys + 2));
	initStringInfo(&where);
	next = ash_append_key_predicate(&where, rel, 1, types, false);
	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s, %s, xmin, ",
					 qcol(m->history_valid_from_lsn_column), qcol(m->history_valid_to_lsn_column));
	if (ash_tenant_scoped(rel))
	{
		appendStringInfo(&sql, "%s IS NOT DISTINCT FROM $%d", qcol(rel->cols[rel->tenant_col].name),
						 next + 1);
		types[next] = rel->cols[rel->tenant_col].typid;
	}
	else
		appendStringInfoString(&sql, "true");
	/* which snapshot attempt saw the version (provenance.c) */
	if (m->snapshot_provenance)
		appendStringInfo(&sql, ", %s", qcol(ASH_PROVENANCE_SEEN_COLUMN));
	appendStringInfo(&sql, " FROM %s WHERE %s AND (%s IS NULL OR %s OPERATOR(pg_catalog.>=) $%d"
					 " OR %s OPERATOR(pg_catalog.>=) $%d)",
					 tgt->name, where.data, qcol(m->history_valid_to_lsn_column),
					 qcol(m->history_valid_to_lsn_column), next,
					 qcol(m->history_valid_from_lsn_column), next);
	types[next - 1] = INT8OID;
	st->probe = ash_spi_prepare_kept(sql.data, ash_tenant_scoped(rel) ? next + 1 : next, types);
	return st->probe;
}

/* DELETE the version of a key opened at L [RETURNING the mapped columns] */
static SPIPlanPtr
erase_plan(AshApplyRel *rel, AshApplyTarget *tgt, bool returning)
{
	Scd2Plans  *st = plans_of(tgt);
	AshMapping *m = rel->map;
	StringInfoData sql;
	Oid		   *types;
	int			next;

	if (returning ? st->erase_returning : st->erase)
		return returning ? st->erase_returning : st->erase;
	types = palloc(sizeof(Oid) * (rel->nkeys + 1));
	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s WHERE ", tgt->name);
	next = ash_append_key_predicate(&sql, rel, 1, types, false);
	appendStringInfo(&sql, " AND %s IS NULL AND %s OPERATOR(pg_catalog.=) $%d",
					 qcol(m->history_valid_to_lsn_column),
					 qcol(m->history_valid_from_lsn_column), next);
	types[next - 1] = INT8OID;
	if (returning)
		append_returning(&sql, rel);
	if (returning)
		st->erase_returning = ash_spi_prepare_kept(sql.data, next, types);
	else
		st->erase = ash_spi_prepare_kept(sql.data, next, types);
	return returning ? st->erase_returning : st->erase;
}

/* Commit LSN and time of the change, as statement parameters. */
static void
window_values(Datum *values, char *nulls)
{
	const AshChangeMeta *meta = ash_apply_current();

	values[0] = Int64GetDatum((int64) meta->commit_lsn);
	nulls[0] = ' ';
	values[1] = TimestampTzGetDatum(meta->commit_time);
	nulls[1] = ' ';
}

/* Fill the columns an image lacks (unchanged TOAST) from a returned row. */
static void
fill_from_returned(AshApplyRel *rel, AshRowImage *img)
{
	HeapTuple	tup;
	TupleDesc	desc;

	if (SPI_processed != 1 || SPI_tuptable == NULL)
		return;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	img->complete = true;
	for (int c = 0; c < rel->ncols; c++)
	{
		bool		isnull;
		Datum		d;
		int16		typlen;
		bool		typbyval;

		if (img->present[c])
			continue;
		d = SPI_getbinval(tup, desc, c + 1, &isnull);
		get_typlenbyval(rel->cols[c].typid, &typlen, &typbyval);
		img->values[c] = isnull ? (Datum) 0 : datumCopy(d, typbyval, typlen);
		img->nulls[c] = isnull;
		img->present[c] = true;
	}
}

/* Is the business key of the new row the one of the old key image? */
static bool
same_business_key(AshApplyRel *rel, AshRowImage *key, AshRowImage *newrow)
{
	for (int k = 0; k < rel->nkeys; k++)
	{
		int			c = rel->keys[k];
		int16		typlen;
		bool		typbyval;

		if (!newrow->present[c])
			continue;			/* an unchanged key column */
		if (newrow->nulls[c] != key->nulls[c])
			return false;
		if (newrow->nulls[c])
			continue;
		get_typlenbyval(rel->cols[c].typid, &typlen, &typbyval);
		if (!datumIsEqual(newrow->values[c], key->values[c], typbyval, typlen))
			return false;
	}
	return true;
}

/*
 * UPDATE t SET valid_to = $L[, valid_to_ts = $ts][, current = false]
 * WHERE business key AND tenant IS DISTINCT FROM $tenant
 *   AND valid_to IS NULL AND valid_from < $L AND seen IS DISTINCT FROM $attempt
 * Parameters: key..., L, ts, tenant, attempt.
 */
static SPIPlanPtr
close_stale_plan(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd2Plans  *st = plans_of(tgt);
	AshMapping *m = rel->map;
	StringInfoData sql;
	StringInfoData where;
	Oid		   *types;
	int			lsn_param;

	if (st->close_stale)
		return st->close_stale;
	types = palloc(sizeof(Oid) * (rel->nkeys + 4));
	initStringInfo(&where);
	lsn_param = ash_append_key_predicate(&where, rel, 1, types, false);
	types[lsn_param - 1] = INT8OID;
	types[lsn_param] = TIMESTAMPTZOID;
	types[lsn_param + 1] = rel->cols[rel->tenant_col].typid;
	types[lsn_param + 2] = BYTEAOID;
	initStringInfo(&sql);
	append_close_update(&sql, tgt, m, lsn_param);
	appendStringInfo(&sql, " WHERE %s AND %s IS DISTINCT FROM $%d AND %s IS NULL"
					 " AND %s OPERATOR(pg_catalog.<) $%d AND %s IS DISTINCT FROM $%d",
					 where.data, qcol(rel->cols[rel->tenant_col].name), lsn_param + 2,
					 qcol(m->history_valid_to_lsn_column),
					 qcol(m->history_valid_from_lsn_column), lsn_param,
					 qcol(ASH_PROVENANCE_SEEN_COLUMN), lsn_param + 3);
	st->close_stale = ash_spi_prepare_kept(sql.data, lsn_param + 3, types);
	return st->close_stale;
}

/*
 * Close, at the snapshot row's position, the open version of another
 * tenant under key that the attempt has not seen (probe_key found it).
 */
static void
close_stale(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key)
{
	SPIPlanPtr	plan = close_stale_plan(rel, tgt);
	Datum	   *values = palloc(sizeof(Datum) * (rel->nkeys + 4));
	char	   *nulls = palloc(rel->nkeys + 5);
	int			n = 0;

	/* the business key alone (ash_key_values adds the tenant's equality) */
	for (int k = 0; k < rel->nkeys; k++)
	{
		values[n] = key->values[rel->keys[k]];
		nulls[n++] = ' ';
	}
	window_values(values + n, nulls + n);
	values[n + 2] = key->values[rel->tenant_col];
	nulls[n + 2] = key->nulls[rel->tenant_col] ? 'n' : ' ';
	values[n + 3] = PointerGetDatum(ash_apply_current()->snapshot_attempt);
	nulls[n + 3] = ' ';
	nulls[n + 4] = '\0';
	if (ash_spi_execute(plan, values, nulls, SPI_OK_UPDATE) != 1)
		ash_apply_write_lost(tgt, "a snapshot row", "a stale version of another tenant escaped its close");
}

/* Is a probed version's seen-mark (column col) the attempt's id? */
static bool
seen_by(HeapTuple tup, TupleDesc desc, int col, const bytea *attempt)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);
	bytea	   *seen;

	if (isnull)
		return false;
	seen = DatumGetByteaPP(d);
	return VARSIZE_ANY_EXHDR(seen) == VARSIZE_ANY_EXHDR(attempt) &&
		memcmp(VARDATA_ANY(seen), VARDATA_ANY(attempt), VARSIZE_ANY_EXHDR(attempt)) == 0;
}

/* What the mirror holds for a key, when a close found nothing. */
static Scd2State
probe_key(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key)
{
	const AshChangeMeta *meta = ash_apply_current();
	SPIPlanPtr	plan = probe_plan(rel, tgt);
	Datum	   *values = palloc(sizeof(Datum) * (rel->nkeys + 2));
	char	   *nulls = palloc(rel->nkeys + 3);
	int			n = 0;
	Scd2State	state = SCD2_NONE;
	bool		other_tenant = false;
	bool		other_past = false;
	bool		later = false;
	bool		past = false;
	bool		transient = false;
	bool		closed_at_lsn = false;
	bool		open_earlier = false;
	int64		lsn = (int64) meta->commit_lsn;
	bool		snapshot_row = meta->origin != NULL && strcmp(meta->origin, "snapshot") == 0;
	bool		stale_other = false;
	uint64		rows;

	/*
	 * A snapshot row of a provenance mapping: another tenant's open version
	 * its attempt has not seen is stale (see the header), not a conflict.
	 */
	bool		judge_stale = snapshot_row && rel->map->snapshot_provenance &&
		ash_tenant_scoped(rel) && meta->snapshot_attempt != NULL;

	for (int k = 0; k < rel->nkeys; k++)
	{
		values[n] = key->values[rel->keys[k]];
		nulls[n++] = ' ';
	}
	values[n] = Int64GetDatum((int64) meta->commit_lsn);
	nulls[n++] = ' ';
	if (ash_tenant_scoped(rel))
	{
		values[n] = key->values[rel->tenant_col];
		nulls[n++] = key->nulls[rel->tenant_col] ? 'n' : ' ';
	}
	nulls[n] = '\0';

	rows = ash_spi_execute(plan, values, nulls, SPI_OK_SELECT);
	for (uint64 i = 0; i < rows; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		int64		from = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
		Datum		to_d = SPI_getbinval(tup, desc, 2, &isnull);
		bool		open = isnull;
		int64		to = open ? 0 : DatumGetInt64(to_d);
		TransactionId xmin = DatumGetTransactionId(SPI_getbinval(tup, desc, 3, &isnull));
		bool		same_tenant = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));

		if (judge_stale && open && !same_tenant && from < lsn &&
			!seen_by(tup, desc, 5, meta->snapshot_attempt))
		{
			stale_other = true;
			continue;
		}

		/*
		 * Only an open version holds the key; one of another tenant closed at
		 * L is history, e.g. closed by a relocation earlier in this source
		 * transaction.
		 */
		if (open && !same_tenant)
			other_tenant = true;
		if ((from > lsn || (!open && to > lsn)) && !same_tenant && !snapshot_row &&
			rel->map->shared_target)
			other_past = true;	/* see below */
		else if (from > lsn || (!open && to > lsn))
			later = past = true;	/* history past this change */
		else if (from == lsn && open && TransactionIdIsCurrentTransactionId(xmin))
			transient = true;	/* opened by this source transaction */
		else if (from == lsn)
			later = true;		/* written at L by an earlier delivery */
		else if (!open)
			closed_at_lsn = true;
		else
			open_earlier = true;
	}

	/*
	 * A snapshot row is no re-delivery of a change: history past its
	 * position is history the copy cannot be placed under (versions from
	 * beyond the source's position, another source's, or hand-written).
	 * Skipping the row would keep a version the source does not have.
	 */
	if (past && snapshot_row)
		ash_halt("snapshot_history_ahead",
				 "a business key of %s has history past the snapshot's position",
				 tgt->log_name);

	/*
	 * A version closed at L with nothing opened at L by this transaction:
	 * the change was applied before (a first delivery updates or deletes
	 * only rows the source has, whose version is open or transient).
	 */
	if (later)
		state = SCD2_REPLAYED;
	else if (transient)
		state = SCD2_TRANSIENT;
	else if (closed_at_lsn)
		state = SCD2_REPLAYED;
	else if (open_earlier)
		state = SCD2_OPEN_EARLIER;
	if (other_tenant && state != SCD2_REPLAYED)
		ash_halt("tenant_conflict", "a version of another tenant holds the business key in %s",
				 tgt->log_name);

	/*
	 * In a target another sink writes too, another tenant's history past L
	 * that this tenant's own versions do not explain as a re-delivery (a
	 * relocation after L leaves this tenant's version closed at it) may be
	 * that sink's, whose LSNs order nothing of this source's: skipping the
	 * change would lose it.  (In a target of this sink alone it is this
	 * source's own later history: a re-delivered insert and delete of a key
	 * in one transaction leaves no trace under its tenant.)
	 */
	if (other_past && state != SCD2_REPLAYED)
		ash_halt("tenant_conflict",
				 "a version of another tenant past this change holds the business key in %s",
				 tgt->log_name);
	if (state == SCD2_REPLAYED)
		plans_of(tgt)->replay_lsn = meta->commit_lsn;
	else if (stale_other)
		close_stale(rel, tgt, key);
	return state;
}

/*
 * Is the current source transaction a re-delivery for this target?  Some
 * change of it found history at or past its commit LSN that an earlier
 * destination transaction wrote; since transactions are applied in commit
 * order, the whole source transaction was applied before.
 */
static bool
in_replay(AshApplyTarget *tgt)
{
	return plans_of(tgt)->replay_lsn == ash_apply_current()->commit_lsn;
}

/* Close the open version of key at L; RETURNED columns fill *fill. */
static uint64
close_version(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key, AshRowImage *fill)
{
	bool		returning = fill != NULL && !fill->complete;
	SPIPlanPtr	plan = close_plan(rel, tgt, returning);
	Scd2Plans  *st = plans_of(tgt);
	Datum	   *values = palloc(sizeof(Datum) * (st->nkeyparams + 2));
	char	   *nulls = palloc(st->nkeyparams + 3);
	int			n;
	uint64		rows;

	n = ash_key_values(rel, key, values, nulls);
	window_values(values + n, nulls + n);
	nulls[n + 2] = '\0';
	rows = ash_spi_execute(plan, values, nulls, returning ? SPI_OK_UPDATE_RETURNING : SPI_OK_UPDATE);
	if (rows > 1)
		elog(ERROR, "ash_replicant: more than one open version of a business key");
	if (rows == 1 && returning)
		fill_from_returned(rel, fill);
	return rows;
}

/* Remove the version of key this source transaction opened at L. */
static void
erase_transient(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key, AshRowImage *fill)
{
	bool		returning = fill != NULL && !fill->complete;
	SPIPlanPtr	plan = erase_plan(rel, tgt, returning);
	Datum	   *values = palloc(sizeof(Datum) * (rel->nkeys + 1));
	char	   *nulls = palloc(rel->nkeys + 2);
	uint64		rows;

	for (int k = 0; k < rel->nkeys; k++)
	{
		values[k] = key->values[rel->keys[k]];
		nulls[k] = ' ';
	}
	values[rel->nkeys] = Int64GetDatum((int64) ash_apply_current()->commit_lsn);
	nulls[rel->nkeys] = ' ';
	nulls[rel->nkeys + 1] = '\0';
	rows = ash_spi_execute(plan, values, nulls, returning ? SPI_OK_DELETE_RETURNING : SPI_OK_DELETE);
	if (rows != 1)
		ash_apply_write_lost(tgt, "a delete",
							 "the version opened by this transaction vanished");
	if (returning)
		fill_from_returned(rel, fill);
}

/* Open a version with a complete image; false when history is past L. */
static bool
open_version(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *img)
{
	SPIPlanPtr	plan;
	Datum	   *values;
	char	   *nulls;
	uint64		rows;

	if (!img->complete)
		ash_halt("unchanged_value_unavailable", "a new version of %s lacks a column value",
				 tgt->log_name);
	for (int k = 0; k < rel->nkeys; k++)
		if (img->nulls[rel->keys[k]])
			ash_halt("source_replica_identity", "business key column %s of %s is NULL",
					 qcol(rel->cols[rel->keys[k]].name), rel->target_name);
	plan = open_plan(rel, tgt);
	values = palloc(sizeof(Datum) * (rel->ncols + 2));
	nulls = palloc(rel->ncols + 3);
	for (int c = 0; c < rel->ncols; c++)
	{
		values[c] = img->values[c];
		nulls[c] = img->nulls[c] ? 'n' : ' ';
	}
	window_values(values + rel->ncols, nulls + rel->ncols);
	nulls[rel->ncols + 2] = '\0';
	rows = ash_spi_execute(plan, values, nulls, SPI_OK_INSERT);
	if (rows > 1)
		elog(ERROR, "ash_replicant: a version insert affected more than one row");
	return rows == 1;
}

/*
 * Retire the open version of a key at L: close it, or remove the one this
 * source transaction opened.  Returns the probe state when nothing was
 * closed (SCD2_NONE: the mirror lacks the row), else SCD2_OPEN_EARLIER.
 */
static Scd2State
retire(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key, AshRowImage *fill)
{
	Scd2State	state;

	if (close_version(rel, tgt, key, fill) == 1)
		return SCD2_OPEN_EARLIER;
	state = probe_key(rel, tgt, key);
	if (state == SCD2_TRANSIENT)
		erase_transient(rel, tgt, key, fill);
	else if (state == SCD2_OPEN_EARLIER)
		ash_apply_write_lost(tgt, "an update", "an open version escaped its close");
	return state;
}

static void
scd2_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow)
{
	Scd2State	state;

	if (open_version(rel, tgt, newrow))
		return;
	/* the key has a version open or at/after L: what is it? */
	state = probe_key(rel, tgt, newrow);
	switch (state)
	{
		case SCD2_REPLAYED:
			return;
		case SCD2_OPEN_EARLIER:
			/* the mirror holds a row the source inserts again: supersede it */
			if (close_version(rel, tgt, newrow, NULL) != 1)
				ash_apply_write_lost(tgt, "an update", "an open version escaped its close");
			break;
		case SCD2_TRANSIENT:
			erase_transient(rel, tgt, newrow, NULL);
			break;
		case SCD2_NONE:
			break;
	}
	if (!open_version(rel, tgt, newrow))
		ash_apply_write_lost(tgt, "an insert", "a version could not be opened");
}

static void
scd2_update(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key, AshRowImage *newrow)
{
	bool		same_key = same_business_key(rel, key, newrow);
	Scd2State	state;

	/* an unchanged key column keeps the old key's value */
	for (int k = 0; k < rel->nkeys; k++)
	{
		int			c = rel->keys[k];

		if (!newrow->present[c])
		{
			newrow->values[c] = key->values[c];
			newrow->nulls[c] = key->nulls[c];
			newrow->present[c] = true;
		}
	}
	newrow->complete = true;
	for (int c = 0; c < rel->ncols; c++)
		if (!newrow->present[c])
			newrow->complete = false;

	state = retire(rel, tgt, key, newrow);
	if (state == SCD2_REPLAYED && same_key)
		return;
	if (!newrow->complete)
	{
		/*
		 * Re-delivered: a version this change would open can only be one the
		 * first delivery removed again within the same source transaction
		 * (else it, or later history, would stop the open).  Its image does
		 * not matter; leave it out.
		 */
		if (in_replay(tgt))
			return;
		if (state == SCD2_NONE)
			ash_halt("unchanged_value_unavailable",
					 "update of a row %s has no open version of, with unchanged TOAST columns",
					 tgt->log_name);
	}
	if (same_key)
	{
		if (!open_version(rel, tgt, newrow) && !in_replay(tgt))
			ash_apply_write_lost(tgt, "an insert", "a version could not be opened");
	}
	else
		scd2_insert(rel, tgt, newrow);
}

static void
scd2_delete(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key)
{
	if (retire(rel, tgt, key, NULL) == SCD2_NONE && !in_replay(tgt))
		ash_apply_count_missing_delete(tgt);
}

static void
scd2_truncate(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd2Plans  *st = plans_of(tgt);
	AshMapping *m = rel->map;
	Datum		values[2];
	char		nulls[3] = "  ";
	uint64		rows;

	if (strcmp(m->on_truncate, "mirror") == 0)
	{
		StringInfoData sql;
		MemoryContext cxt = CurrentMemoryContext;
		int			ret;

		initStringInfo(&sql);
		appendStringInfo(&sql, "DELETE FROM %s", tgt->name);
		ret = SPI_execute(sql.data, false, 0);
		MemoryContextSwitchTo(cxt);
		if (ret != SPI_OK_DELETE)
			elog(ERROR, "ash_replicant: truncate mirror failed");
		return;
	}
	if (strcmp(m->on_truncate, "close") != 0)
		ash_halt("mapping_unsupported", "on_truncate %s on SCD2 table %s", m->on_truncate,
				 rel->target_name);

	if (st->truncate_close == NULL)
	{
		StringInfoData sql;
		Oid			types[2] = {INT8OID, TIMESTAMPTZOID};

		initStringInfo(&sql);
		append_close_update(&sql, tgt, m, 1);
		appendStringInfo(&sql, " WHERE %s IS NULL AND %s OPERATOR(pg_catalog.<) $1",
						 qcol(m->history_valid_to_lsn_column), qcol(m->history_valid_from_lsn_column));
		st->truncate_close = ash_spi_prepare_kept(sql.data, 2, types);

		resetStringInfo(&sql);
		appendStringInfo(&sql, "SELECT ctid, xmin FROM %s WHERE %s IS NULL AND %s OPERATOR(pg_catalog.=) $1",
						 tgt->name, qcol(m->history_valid_to_lsn_column),
						 qcol(m->history_valid_from_lsn_column));
		st->truncate_transient = ash_spi_prepare_kept(sql.data, 1, types);

		resetStringInfo(&sql);
		appendStringInfo(&sql, "DELETE FROM %s WHERE ctid OPERATOR(pg_catalog.=) $1", tgt->name);
		types[0] = TIDOID;
		st->truncate_erase = ash_spi_prepare_kept(sql.data, 1, types);
	}
	window_values(values, nulls);
	(void) ash_spi_execute(st->truncate_close, values, nulls, SPI_OK_UPDATE);

	/* versions opened earlier in this source transaction never existed */
	rows = ash_spi_execute(st->truncate_transient, values, nulls, SPI_OK_SELECT);
	if (rows > 0)
	{
		SPITupleTable *tt = SPI_tuptable;
		List	   *tids = NIL;
		ListCell   *lc;

		for (uint64 i = 0; i < rows; i++)
		{
			bool		isnull;
			ItemPointer tid = (ItemPointer) DatumGetPointer(SPI_getbinval(tt->vals[i], tt->tupdesc, 1, &isnull));
			TransactionId xmin = DatumGetTransactionId(SPI_getbinval(tt->vals[i], tt->tupdesc, 2, &isnull));

			if (TransactionIdIsCurrentTransactionId(xmin))
			{
				ItemPointer copy = palloc(sizeof(ItemPointerData));

				ItemPointerCopy(tid, copy);
				tids = lappend(tids, copy);
			}
		}
		foreach(lc, tids)
		{
			Datum		v[1] = {PointerGetDatum(lfirst(lc))};

			if (ash_spi_execute(st->truncate_erase, v, NULL, SPI_OK_DELETE) != 1)
				elog(ERROR, "ash_replicant: a version opened by this transaction vanished");
		}
	}
}

static void
scd2_release(AshApplyTarget *tgt)
{
	Scd2Plans  *st = tgt->plans;
	SPIPlanPtr	plans[9];

	if (st == NULL)
		return;
	plans[0] = st->close;
	plans[1] = st->close_returning;
	plans[2] = st->open;
	plans[3] = st->probe;
	plans[4] = st->erase;
	plans[5] = st->erase_returning;
	plans[6] = st->truncate_close;
	plans[7] = st->truncate_transient;
	plans[8] = st->truncate_erase;
	for (int i = 0; i < lengthof(plans); i++)
		if (plans[i])
			SPI_freeplan(plans[i]);
	tgt->plans = NULL;
	tgt->plans_owner = NULL;
}

const AshApplyStrategy ash_scd2_strategy = {
	.name = "scd2",
	.insert = scd2_insert,
	.update = scd2_update,
	.delete = scd2_delete,
	.truncate = scd2_truncate,
	.release = scd2_release,
	.update_relocates = false,
};
