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
 *	  under the same identity and halts tenant_conflict (a snapshot row
 *	  with provenance replaces one its attempt has not seen: stale).
 *
 *	  Consecutive writes to one target are gathered and written by
 *	  multi-row statements (see "Gathered writes" below): inserts always,
 *	  and on a target whose rows cannot observe each other also deletes
 *	  and updates that carry the complete row under an unchanged identity.
 *	  A run may span the source transactions of one batch; anything that
 *	  cannot join it flushes it first, so each row sees its changes in
 *	  source order.  Gathered inserts try a plain insert first -- written
 *	  straight into the table where that is all the INSERT would do
 *	  (apply_bulk.c), else by a multi-row INSERT -- and fall back to the
 *	  upsert on a unique violation.
 *
 *	  Plans are prepared once per target table and operation (and per set
 *	  of sent columns for updates, since unchanged TOAST columns are left
 *	  out) and kept across transactions.  Row counts are checked exactly.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_index.h"
#include "executor/spi.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "storage/proc.h"
#include "lib/stringinfo.h"
#include "nodes/bitmapset.h"
#include "common/hashfn.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/memutils.h"

#include "apply_bulk.h"
#include "apply_strategy.h"
#include "errors.h"
#include "provenance.h"
#include "spi_util.h"

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
	SPIPlanPtr	update_many;	/* UPDATE ... FROM the same arrays; NULL when
								 * every column is an identity column */
	int			optimism_paused;	/* flushes left that go straight to upsert */
	int			update_optimism_paused; /* the same for a run's updates */
	bool		many_unsupported;	/* a column type has no array type */
	SPIPlanPtr	delete;
	SPIPlanPtr	key_probe;		/* does the row a write missed exist? */
	SPIPlanPtr	key_probe_any;	/* ... under any tenant? */
	SPIPlanPtr	run_probe;		/* how many rows of a run exist? */
	SPIPlanPtr	run_probe_any;	/* ... under any tenant? */
	SPIPlanPtr	delete_many;	/* gathered deletes */
	LocalTransactionId commutes_lxid;	/* transaction "commutes" was judged in */
	uint64		commutes_epoch; /* ash_relmap_target_epoch it holds for */
	bool		commutes;
	AshBulkTarget bulk;			/* gathered inserts without a statement */
	List	   *updates;		/* UpdatePlan * */

	/*
	 * Snapshot provenance: the same inserts with the fingerprint and the
	 * attempt as two more columns (NULL until a stamped run needs them).
	 */
	SPIPlanPtr	upsert_many_prov;
	SPIPlanPtr	insert_many_prov;
	bool		prov_checks_tenant;
	AshBulkTarget bulk_prov;
} Scd1Plans;

/* The provenance columns, written after the mapped ones. */
static const char *const prov_columns[2] = {
	ASH_PROVENANCE_FINGERPRINT_COLUMN, ASH_PROVENANCE_SEEN_COLUMN
};

static Scd1Plans *
plans_of(AshApplyTarget *tgt)
{
	if (tgt->plans == NULL)
		tgt->plans = MemoryContextAllocZero(tgt->cxt, sizeof(Scd1Plans));
	return (Scd1Plans *) tgt->plans;
}

/* " WHERE k1 = $n AND ... [AND tenant = $m]"; returns the parameter count */
static int
append_key_predicate(StringInfo sql, AshApplyRel *rel, int first_param, Oid *types)
{
	appendStringInfoString(sql, " WHERE ");
	return ash_append_key_predicate(sql, rel, first_param, types, true) - first_param;
}

/*
 * "SELECT unnest($1) AS c1, ..., unnest($n) AS cn": the rows of n
 * equal-length arrays.  Set-returning functions in the target list run in
 * lockstep, one row per call; in FROM (ROWS FROM) each would first be
 * materialised in a tuplestore, a seventh of the apply time of a wide
 * insert run.
 */
static void
append_unnest_select(StringInfo sql, int n)
{
	appendStringInfoString(sql, "SELECT ");
	for (int i = 0; i < n; i++)
		appendStringInfo(sql, "%spg_catalog.unnest($%d) AS c%d", i ? ", " : "", i + 1, i + 1);
}

/*
 * "INSERT INTO t AS t (cols) OVERRIDING SYSTEM VALUE <source>": the plain
 * insert; prov (multi-row only) adds the two provenance columns after the
 * mapped ones.  A mirror writes the source's values into a target column
 * GENERATED ALWAYS AS IDENTITY too (a target made with pg_dump
 * --schema-only has one wherever the source has), as native logical
 * replication does; the clause changes nothing for other columns.
 */
static void
build_insert(StringInfo sql, AshApplyRel *rel, AshApplyTarget *tgt, bool many, bool prov)
{
	Assert(many || !prov);
	appendStringInfo(sql, "INSERT INTO %s AS t (", tgt->name);
	for (int c = 0; c < rel->ncols; c++)
		appendStringInfo(sql, "%s%s", c ? ", " : "", quote_identifier(rel->cols[c].name));
	if (prov)
		appendStringInfo(sql, ", %s, %s", prov_columns[0], prov_columns[1]);
	appendStringInfoString(sql, ") OVERRIDING SYSTEM VALUE ");
	if (many)
	{
		append_unnest_select(sql, rel->ncols + (prov ? 2 : 0));
		return;
	}
	appendStringInfoString(sql, "VALUES (");
	for (int c = 0; c < rel->ncols; c++)
		appendStringInfo(sql, "%s$%d", c ? ", " : "", c + 1);
	appendStringInfoChar(sql, ')');
}

/*
 * "INSERT INTO t AS t (cols) <source> ON CONFLICT (identity) DO UPDATE SET
 * ... [WHERE t.tenant = EXCLUDED.tenant]"; source is "VALUES ($1, ...)" or
 * the multi-row "SELECT unnest($1), ...".  Returns
 * whether the statement checks the tenant (affects no row on a conflict
 * with another tenant).
 */
static bool
build_upsert(StringInfo sql, AshApplyRel *rel, AshApplyTarget *tgt, bool many, bool prov)
{
	bool		any_set = false;

	build_insert(sql, rel, tgt, many, prov);
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
	for (int i = 0; prov && i < 2; i++)
	{
		appendStringInfo(sql, "%s%s = EXCLUDED.%s", any_set ? ", " : " DO UPDATE SET ",
						 prov_columns[i], prov_columns[i]);
		any_set = true;
	}
	if (!any_set)
	{
		appendStringInfoString(sql, " DO NOTHING");
		return false;
	}

	/*
	 * The identity too: the row found is equal under the index's operators,
	 * not necessarily the same value (numeric 1.0 and 1.00, float 0 and -0,
	 * interval '1 day' and '24 hours'), and the mirror holds the source's.
	 * (Not a GENERATED ALWAYS identity column, which only DEFAULT may
	 * update: an integer, whose equal values are the same.)
	 */
	for (int k = 0; k < rel->nkeys; k++)
	{
		const char *n = quote_identifier(rel->cols[rel->keys[k]].name);

		if (!rel->cols[rel->keys[k]].identity_always)
			appendStringInfo(sql, ", %s = EXCLUDED.%s", n, n);
	}
	if (ash_tenant_scoped(rel))
	{
		const char *n = quote_identifier(rel->cols[rel->tenant_col].name);

		appendStringInfo(sql, " WHERE t.%s OPERATOR(pg_catalog.=) EXCLUDED.%s", n, n);

		/*
		 * A snapshot row is the source's at the snapshot, where its
		 * identity names one row: another tenant's row this attempt has not
		 * seen is a stale one (the key moved while nothing streamed), which
		 * retirement would delete anyway.  One it has seen was copied from
		 * another source row under the same identity: tenant_conflict.
		 */
		if (prov)
			appendStringInfo(sql, " OR t.%s IS DISTINCT FROM EXCLUDED.%s",
							 prov_columns[1], prov_columns[1]);
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
	st->upsert_checks_tenant = build_upsert(&sql, rel, tgt, false, false);
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
 * Gathered writes.
 *
 * Consecutive writes to one target are gathered and written by multi-row
 * statements: inserts as one INSERT ... SELECT unnest($1), ...
 * per run.  Every gathered write touches a different identity (a write to
 * an identity already gathered flushes first), so writes of one run touch
 * different rows.  On a target where rows cannot observe each other --
 * no trigger, rule or row security, no unique or exclusion index besides
 * the identity -- such writes commute, and the run also gathers deletes and
 * updates that carry the complete new row under an unchanged identity.
 * A flush writes the run's updates as one UPDATE ... FROM, then its
 * inserts; an update of a row the mirror lacks makes the run the upsert,
 * which is what such an update means here.  A flush writes the deletes, then the rest.  Anything
 * else flushes the run first, so each row sees its changes in source order.
 * ---------------------------------------------------------------------
 */
#define GATHER_MAX_ROWS 1000

/*
 * A run's values, all columns together, up to about this many bytes: one
 * column's array of a run holds at most 1 GB (MaxAllocSize; beyond, every
 * attempt of the transaction failed 54000, for good), and the run's working
 * set is a few times its values.
 */
#define GATHER_MAX_BYTES (64 * 1024 * 1024)

/*
 * One column of a run: its values, copied into the run's context, become
 * one array parameter at the flush (built once; accumulating an array
 * element by element cost twice as much).
 */
typedef struct GatherCol
{
	Oid			typid;
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *values;
	bool	   *nulls;
} GatherCol;

static void
gcol_init(GatherCol *g, Oid typid)
{
	g->typid = typid;
	get_typlenbyvalalign(typid, &g->typlen, &g->typbyval, &g->typalign);
	g->values = palloc(sizeof(Datum) * GATHER_MAX_ROWS);
	g->nulls = palloc(sizeof(bool) * GATHER_MAX_ROWS);
}

/* gcol_init for a mapped column: its type's properties are known (relmap.c) */
static void
gcol_init_col(GatherCol *g, AshTargetCol *col)
{
	g->typid = col->typid;
	g->typlen = col->typlen;
	g->typbyval = col->typbyval;
	g->typalign = col->typalign;
	g->values = palloc(sizeof(Datum) * GATHER_MAX_ROWS);
	g->nulls = palloc(sizeof(bool) * GATHER_MAX_ROWS);
}

/* in the run's memory context */
/* Returns the bytes it took (the run's budget: GATHER_MAX_BYTES). */
static Size
gcol_put(GatherCol *g, int i, Datum value, bool isnull)
{
	Assert(i < GATHER_MAX_ROWS);
	g->nulls[i] = isnull;
	g->values[i] = isnull || g->typbyval ? value : datumCopy(value, false, g->typlen);
	return isnull ? 0 : datumGetSize(value, g->typbyval, g->typlen);
}

static Datum
gcol_array(GatherCol *g, int off, int n)
{
	int			lb = 1;

	return PointerGetDatum(construct_md_array(g->values + off, g->nulls + off, 1, &n, &lb, g->typid,
											  g->typlen, g->typbyval, g->typalign));
}

typedef struct Gathered
{
	AshApplyRel *rel;			/* NULL when empty */
	AshApplyTarget *tgt;
	int			nrows;			/* upserted rows */
	bool		has_updates;	/* some rows exist already: skip the plain
								 * INSERT attempt */
	int			nupdates;		/* of them, updates (is_update[i]) */
	bool	   *is_update;
	GatherCol  *cols;
	bool		stamped;		/* snapshot inserts with their provenance */
	GatherCol  *prov;			/* stamped: fingerprint, attempt */
	int			ndeletes;
	GatherCol  *dkeys;			/* identity (+ tenant) values of deletes */
	uint32	   *key_hashes;		/* open-addressing set of identity hashes */
	XLogRecPtr	first_commit_lsn;	/* source transaction of the first write */
	TransactionId first_xid;
	Size		bytes;			/* of the values gathered (gcol_put) */
	MemoryContext cxt;
} Gathered;

static Gathered gbuf;

/* 2 x GATHER_MAX_ROWS slots, power of two; 0 marks an empty slot */
#define KEY_SET_SIZE 2048

static bool
hash_set_contains(uint32 h)
{
	h = h ? h : 1;
	for (uint32 i = h & (KEY_SET_SIZE - 1);; i = (i + 1) & (KEY_SET_SIZE - 1))
	{
		if (gbuf.key_hashes[i] == 0)
			return false;
		if (gbuf.key_hashes[i] == h)
			return true;
	}
}

static void
hash_set_add(uint32 h)
{
	h = h ? h : 1;
	for (uint32 i = h & (KEY_SET_SIZE - 1);; i = (i + 1) & (KEY_SET_SIZE - 1))
	{
		if (gbuf.key_hashes[i] == 0 || gbuf.key_hashes[i] == h)
		{
			gbuf.key_hashes[i] = h;
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

/* Same identity values, compared as stored images (as the hash is). */
static bool
same_identity(AshApplyRel *rel, AshRowImage *a, AshRowImage *b)
{
	for (int k = 0; k < rel->nkeys; k++)
	{
		int			c = rel->keys[k];

		if (!a->present[c] || !b->present[c] || a->nulls[c] || b->nulls[c] ||
			!datum_image_eq(a->values[c], b->values[c], rel->cols[c].typbyval,
							rel->cols[c].typlen))
			return false;
	}
	return true;
}

/*
 * Does every column written identify the row?  Its upsert is ON CONFLICT
 * DO NOTHING (build_upsert), which counts no row that is there already:
 * a row kept out by a trigger looks the same (key_only_kept_out tells
 * them apart).
 */
static bool
key_only(AshApplyRel *rel)
{
	for (int c = 0; c < rel->ncols; c++)
		if (!rel->cols[c].is_identity)
			return false;
	return true;
}

/* "<head> <target> <identity predicate><tail>", kept; $n: the key values. */
static SPIPlanPtr
key_plan(AshApplyRel *rel, AshApplyTarget *tgt, const char *head, const char *tail)
{
	StringInfoData sql;
	Oid		   *types = palloc(sizeof(Oid) * (rel->nkeys + 1));
	int			nkey;

	initStringInfo(&sql);
	appendStringInfo(&sql, "%s %s", head, tgt->name);
	nkey = append_key_predicate(&sql, rel, 1, types);
	appendStringInfoString(&sql, tail);
	return ash_spi_prepare_kept(sql.data, nkey, types);
}

/*
 * Can rows of this target observe each other's writes?  Only triggers,
 * rules, row security and further unique or exclusion indexes let them.
 * Judged when a run starts, under the lock the writes take anyway, so no
 * trigger or index can appear before the run is written; and again only
 * after an invalidation that may have changed them (relmap.h).
 */
static bool
target_commutes(AshApplyTarget *tgt)
{
	Scd1Plans  *st = plans_of(tgt);
	Relation	r;
	bool		ok;
	uint64		epoch;

	/* the lock below is held to the end of the transaction: judge once */
	if (st->commutes_lxid == MyProc->lxid)
		return st->commutes;
	epoch = ash_relmap_target_epoch(tgt->relid);
	st->commutes_lxid = MyProc->lxid;
	if (st->commutes_epoch == epoch)
		return st->commutes;
	st->commutes_epoch = 0;
	r = table_open(tgt->relid, RowExclusiveLock);

	ok = !r->rd_rel->relhastriggers && !r->rd_rel->relhasrules &&
		!r->rd_rel->relrowsecurity;
	if (ok)
	{
		List	   *indexes = RelationGetIndexList(r);
		ListCell   *lc;
		int			unique = 0;

		foreach(lc, indexes)
		{
			HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
			Form_pg_index idx;

			if (!HeapTupleIsValid(tup))
				elog(ERROR, "cache lookup failed for index %u", lfirst_oid(lc));
			idx = (Form_pg_index) GETSTRUCT(tup);
			if (idx->indisunique || idx->indisexclusion)
				unique++;
			ReleaseSysCache(tup);
		}
		list_free(indexes);
		ok = unique == 1;		/* the identity alone */
	}
	table_close(r, NoLock);
	st->commutes = ok;
	st->commutes_epoch = epoch;
	return ok;
}

/* Is the row with key's identity in the target? */
static bool
row_present(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key)
{
	Scd1Plans  *st = plans_of(tgt);
	Datum	   *values = palloc(sizeof(Datum) * (rel->nkeys + 1));
	char	   *nulls = palloc(rel->nkeys + 2);
	int			nparams;

	if (st->key_probe == NULL)
		st->key_probe = key_plan(rel, tgt, "SELECT 1 FROM", " LIMIT 1");
	nparams = ash_key_values(rel, key, values, nulls);
	nulls[nparams] = '\0';
	return ash_spi_execute(st->key_probe, values, nulls, SPI_OK_SELECT) > 0;
}

/*
 * Does a row of any tenant hold key's identity?  (row_present: of key's
 * tenant, under tenancy.)
 */
static bool
identity_held(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key)
{
	Scd1Plans  *st = plans_of(tgt);
	Datum	   *values = palloc(sizeof(Datum) * (rel->nkeys + 1));
	char	   *nulls = palloc(rel->nkeys + 2);

	if (st->key_probe_any == NULL)
	{
		StringInfoData sql;
		Oid		   *types = palloc(sizeof(Oid) * (rel->nkeys + 1));
		int			nkey;

		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT 1 FROM %s WHERE ", tgt->name);
		nkey = ash_append_key_predicate(&sql, rel, 1, types, false) - 1;
		appendStringInfoString(&sql, " LIMIT 1");
		st->key_probe_any = ash_spi_prepare_kept(sql.data, nkey, types);
	}
	(void) ash_key_values(rel, key, values, nulls);
	nulls[rel->nkeys] = '\0';
	return ash_spi_execute(st->key_probe_any, values, nulls, SPI_OK_SELECT) > 0;
}

/*
 * An update or delete of key affected no row: is the row there all the
 * same (a trigger returned NULL)?  Only a target with triggers, rules or
 * row security can keep a row that way (target_commutes).
 */
static bool
kept_by_trigger(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key)
{
	return !target_commutes(tgt) && row_present(rel, tgt, key);
}

/*
 * A key-only row's upsert counted no row: kept out (a trigger returned
 * NULL) rather than there already?
 */
static bool
key_only_kept_out(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *row)
{
	return !target_commutes(tgt) && !row_present(rel, tgt, row);
}

/*
 * "(SELECT unnest($1) AS c1, ...) AS u WHERE t.k = u.cK ...": each target
 * row t whose identity is a run row u's.
 */
static void
append_run_match(StringInfo sql, AshApplyRel *rel, bool any_tenant)
{
	appendStringInfoChar(sql, '(');
	append_unnest_select(sql, rel->ncols);
	appendStringInfoString(sql, ") AS u WHERE ");
	for (int k = 0; k < rel->nkeys; k++)
		appendStringInfo(sql, "%st.%s OPERATOR(pg_catalog.=) u.c%d", k ? " AND " : "",
						 quote_identifier(rel->cols[rel->keys[k]].name), rel->keys[k] + 1);
	if (ash_tenant_scoped(rel) && !any_tenant)
		appendStringInfo(sql, " AND t.%s OPERATOR(pg_catalog.=) u.c%d",
						 quote_identifier(rel->cols[rel->tenant_col].name), rel->tenant_col + 1);
}

/*
 * "UPDATE t AS t SET c = u.cN, ... FROM (SELECT unnest($1) AS c1, ...) AS u
 * WHERE t.k = u.cK [AND t.tenant = u.cT]": a run's updates of complete
 * rows under unchanged identities, one target row each (the run's
 * identities are distinct).  False when there is nothing to set (every
 * column is an identity column).
 */
static bool
build_update_many(StringInfo sql, AshApplyRel *rel, AshApplyTarget *tgt)
{
	bool		any_set = false;

	appendStringInfo(sql, "UPDATE %s AS t", tgt->name);
	for (int c = 0; c < rel->ncols; c++)
	{
		if (rel->cols[c].is_identity)
			continue;
		appendStringInfo(sql, "%s%s = u.c%d", any_set ? ", " : " SET ",
						 quote_identifier(rel->cols[c].name), c + 1);
		any_set = true;
	}
	if (!any_set)
		return false;
	appendStringInfoString(sql, " FROM ");
	append_run_match(sql, rel, false);
	return true;
}

/*
 * How many target rows hold the identities of a run (values: its column
 * arrays) -- under the run's tenants, or any_tenant under any?
 */
static uint64
run_present(AshApplyRel *rel, AshApplyTarget *tgt, Datum *values, bool any_tenant)
{
	Scd1Plans  *st = plans_of(tgt);
	SPIPlanPtr *plan = any_tenant ? &st->run_probe_any : &st->run_probe;
	bool		isnull;

	if (*plan == NULL)
	{
		StringInfoData sql;
		Oid		   *types = palloc(sizeof(Oid) * rel->ncols);

		/* the types of the upsert's arrays (upsert_many_plan) */
		for (int c = 0; c < rel->ncols; c++)
			types[c] = get_array_type(rel->cols[c].typid);
		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT pg_catalog.count(*) FROM %s AS t, ", tgt->name);
		append_run_match(&sql, rel, any_tenant);
		*plan = ash_spi_prepare_kept(sql.data, rel->ncols, types);
	}
	if (ash_spi_execute(*plan, values, NULL, SPI_OK_SELECT) != 1)
		elog(ERROR, "ash_replicant: a run's probe returned no count");
	return (uint64) DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
												&isnull));
}

/*
 * A key-only run's upsert counted fewer rows than it wrote: were rows kept
 * out rather than there already?
 */
static bool
run_kept_out(AshApplyRel *rel, AshApplyTarget *tgt, Datum *values, uint64 nw)
{
	return !target_commutes(tgt) && run_present(rel, tgt, values, false) < nw;
}

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
	(void) build_upsert(&sql, rel, tgt, true, false);
	st->upsert_many = ash_spi_prepare_kept(sql.data, rel->ncols, types);
	resetStringInfo(&sql);
	build_insert(&sql, rel, tgt, true, false);
	st->insert_many = ash_spi_prepare_kept(sql.data, rel->ncols, types);
	resetStringInfo(&sql);
	if (build_update_many(&sql, rel, tgt))
		st->update_many = ash_spi_prepare_kept(sql.data, rel->ncols, types);
	return st->upsert_many;
}

/*
 * The multi-row insert and upsert of a stamped run: the mapped columns,
 * then the fingerprint and the attempt.  Prepared when a target first
 * gets one (only provenance targets have the columns).
 */
static void
prov_plans(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd1Plans  *st = plans_of(tgt);
	StringInfoData sql;
	Oid		   *types;

	if (st->upsert_many_prov)
		return;
	types = palloc(sizeof(Oid) * (rel->ncols + 2));
	for (int c = 0; c < rel->ncols; c++)
		types[c] = get_array_type(rel->cols[c].typid);
	types[rel->ncols] = BYTEAARRAYOID;
	types[rel->ncols + 1] = BYTEAARRAYOID;
	initStringInfo(&sql);
	build_insert(&sql, rel, tgt, true, true);
	st->insert_many_prov = ash_spi_prepare_kept(sql.data, rel->ncols + 2, types);
	resetStringInfo(&sql);
	st->prov_checks_tenant = build_upsert(&sql, rel, tgt, true, true);
	st->upsert_many_prov = ash_spi_prepare_kept(sql.data, rel->ncols + 2, types);
}

/*
 * "DELETE FROM t WHERE k = ANY ($1)", or for several identity columns (or
 * a tenant) "DELETE FROM t USING (SELECT unnest($1) AS c1, ...) AS u
 * WHERE t.k1 = u.c1 AND ...".  The identities are distinct, so each row
 * matches at most one.
 */
static SPIPlanPtr
delete_many_plan(AshApplyRel *rel, AshApplyTarget *tgt)
{
	Scd1Plans  *st = plans_of(tgt);
	StringInfoData sql;
	Oid			types[INDEX_MAX_KEYS + 1];
	int			n = 0;

	if (st->delete_many)
		return st->delete_many;
	for (int k = 0; k < rel->nkeys; k++)
		types[n++] = get_array_type(rel->cols[rel->keys[k]].typid);
	if (ash_tenant_scoped(rel))
		types[n++] = get_array_type(rel->cols[rel->tenant_col].typid);
	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s AS t", tgt->name);
	if (n == 1)
		appendStringInfo(&sql, " WHERE t.%s OPERATOR(pg_catalog.=) ANY ($1)",
						 quote_identifier(rel->cols[rel->keys[0]].name));
	else
	{
		appendStringInfoString(&sql, " USING (");
		append_unnest_select(&sql, n);
		appendStringInfoString(&sql, ") AS u WHERE ");
		for (int i = 0; i < n; i++)
		{
			int			c = i < rel->nkeys ? rel->keys[i] : rel->tenant_col;

			appendStringInfo(&sql, "%st.%s OPERATOR(pg_catalog.=) u.c%d", i ? " AND " : "",
							 quote_identifier(rel->cols[c].name), i + 1);
		}
	}
	st->delete_many = ash_spi_prepare_kept(sql.data, n, types);
	return st->delete_many;
}

static void
scd1_discard(void)
{
	memset(&gbuf, 0, offsetof(Gathered, cxt));
	if (gbuf.cxt)
		MemoryContextReset(gbuf.cxt);
}

/*
 * One array parameter per column of rows [off, off + n) of the run (and
 * per provenance column of a stamped run).
 */
static Datum *
column_arrays(AshApplyRel *rel, int off, int n)
{
	Datum	   *values = palloc(sizeof(Datum) * (rel->ncols + 2));

	for (int c = 0; c < rel->ncols; c++)
		values[c] = gcol_array(&gbuf.cols[c], off, n);
	for (int i = 0; gbuf.stamped && i < 2; i++)
		values[rel->ncols + i] = gcol_array(&gbuf.prov[i], off, n);
	return values;
}

/*
 * Reorder the run's rows, updates first (stably): the rows of a run touch
 * different identities of a target whose rows commute, so their order does
 * not matter, and each kind becomes one slice of the column arrays.
 */
static void
updates_first(AshApplyRel *rel)
{
	int		   *order = palloc(sizeof(int) * gbuf.nrows);
	Datum	   *v = palloc(sizeof(Datum) * gbuf.nrows);
	bool	   *nl = palloc(sizeof(bool) * gbuf.nrows);
	int			k = 0;

	for (int i = 0; i < gbuf.nrows; i++)
		if (gbuf.is_update[i])
			order[k++] = i;
	for (int i = 0; i < gbuf.nrows; i++)
		if (!gbuf.is_update[i])
			order[k++] = i;
	for (int c = 0; c < rel->ncols; c++)
	{
		GatherCol  *g = &gbuf.cols[c];

		for (int i = 0; i < gbuf.nrows; i++)
		{
			v[i] = g->values[order[i]];
			nl[i] = g->nulls[order[i]];
		}
		memcpy(g->values, v, sizeof(Datum) * gbuf.nrows);
		memcpy(g->nulls, nl, sizeof(bool) * gbuf.nrows);
	}
	for (int i = 0; i < gbuf.nrows; i++)
		gbuf.is_update[i] = i < gbuf.nupdates;
}

/*
 * Rows [off, nrows) of the run straight into its table (see apply_bulk.c).
 * speculative: one row, false when its identity is taken (nothing of it
 * stays).
 */
static bool
bulk_write(int off, bool speculative)
{
	int			ncols = gbuf.rel->ncols;
	int			nwritten = ncols + (gbuf.stamped ? 2 : 0);
	Datum	  **values = palloc(sizeof(Datum *) * nwritten);
	bool	  **nulls = palloc(sizeof(bool *) * nwritten);
	Scd1Plans  *st = plans_of(gbuf.tgt);

	for (int c = 0; c < nwritten; c++)
	{
		GatherCol  *g = c < ncols ? &gbuf.cols[c] : &gbuf.prov[c - ncols];

		values[c] = g->values + off;
		nulls[c] = g->nulls + off;
	}
	return ash_bulk_insert(gbuf.stamped ? &st->bulk_prov : &st->bulk, gbuf.tgt, nwritten,
						   gbuf.nrows - off, values, nulls,
						   ash_apply_fresh_target(gbuf.tgt->relid),
						   ash_apply_indexes_after(gbuf.tgt->relid), speculative);
}

/* bulk_write of rows [*arg, nrows), for ash_run_catching */
static void
bulk_insert(void *arg)
{
	(void) bulk_write(*(int *) arg, false);
}

/* Can the run's rows go straight into its table (apply_bulk.c)? */
static bool
bulk_usable(Scd1Plans *st, AshApplyRel *rel, AshApplyTarget *tgt)
{
	if (!target_commutes(tgt))
		return false;
	if (gbuf.stamped)
		return ash_bulk_insert_usable(&st->bulk_prov, rel, tgt, 2, prov_columns);
	return ash_bulk_insert_usable(&st->bulk, rel, tgt, 0, NULL);
}

/*
 * Most gathered inserts are new rows, so a plain insert is tried first: it
 * skips what ON CONFLICT costs per row (an identity-index probe, a
 * speculative insertion lock, a second index pass).  It runs in a
 * subtransaction; a unique violation rolls it back whole (rows and trigger
 * effects) and the rows go again as the upsert.  After a conflict the
 * target skips the attempt for a while: a mirror being refilled would
 * conflict every time.
 *
 * A run of one row written straight into its table (a trickle of one-row
 * transactions, a synchronous standby's every commit) is inserted
 * speculatively instead (apply_bulk.c): a taken identity leaves nothing
 * behind, so the subtransaction, its second transaction id and its
 * commit are not needed; the row then goes as the upsert as well.
 */
#define OPTIMISM_PAUSE_FLUSHES 64

static void
scd1_flush(void)
{
	AshApplyRel *rel = gbuf.rel;
	AshApplyTarget *tgt = gbuf.tgt;
	Scd1Plans  *st;
	uint64		n = 0;
	int			nrows = gbuf.nrows;
	int			ndeletes = gbuf.ndeletes;
	AshApplyErrorContext saved = ash_apply_errctx;
	AshOwnerScope scope;

	if (rel == NULL || (nrows == 0 && ndeletes == 0))
	{
		scd1_discard();
		return;
	}
	st = plans_of(tgt);

	/* the writes may come from several source transactions: name the first */
	ash_apply_errctx.relation = tgt->log_name;
	ash_apply_errctx.commit_lsn = gbuf.first_commit_lsn;
	ash_apply_errctx.xid = gbuf.first_xid;
	/* the run's own table's scope, also when another table's write flushes it */
	ash_apply_target_enter(tgt, &scope);
	PushActiveSnapshot(GetTransactionSnapshot());

	if (ndeletes > 0)
	{
		int			nk = rel->nkeys + (ash_tenant_scoped(rel) ? 1 : 0);
		Datum	   *keys = palloc(sizeof(Datum) * nk);

		for (int i = 0; i < nk; i++)
			keys[i] = gcol_array(&gbuf.dkeys[i], 0, ndeletes);
		ash_apply_errctx.command = "delete";
		n = ash_spi_execute(delete_many_plan(rel, tgt), keys, NULL, SPI_OK_DELETE);
		if (n > ndeletes)
			ash_apply_key_matched_many(tgt, "a multi-row delete");
		for (uint64 i = n; i < ndeletes; i++)
			ash_apply_count_missing_delete(tgt);
	}

	if (nrows > 0)
	{
		Datum	   *values = NULL;
		bool		inserted = false;
		int			off = 0;	/* rows [off, nrows) are left to write */
		bool		updates_left = gbuf.has_updates;
		int			nw;

		/*
		 * The run's updates first, as one UPDATE ... FROM: each row found by
		 * one identity probe, where the upsert pays a conflict check and then
		 * the update.  A short count means rows the mirror lacks (or that
		 * another tenant holds): then every row goes to the upsert below,
		 * which inserts the missing ones and, on this target where rows
		 * commute (no trigger, rule or row security), rewrites the others
		 * with the values they already hold.  After a miss the target skips
		 * the attempt for a while (a mirror being refilled).
		 */
		if (gbuf.nupdates > 0 && st->update_many != NULL)
		{
			if (st->update_optimism_paused > 0)
				st->update_optimism_paused--;
			else
			{
				uint64		nu;

				if (gbuf.nupdates < nrows)
					updates_first(rel);
				ash_apply_errctx.command = "update";
				nu = ash_spi_execute(st->update_many, column_arrays(rel, 0, gbuf.nupdates),
									 NULL, SPI_OK_UPDATE);
				if (nu > gbuf.nupdates)
					ash_apply_key_matched_many(tgt, "a multi-row update");
				if (nu == gbuf.nupdates)
				{
					off = gbuf.nupdates;
					updates_left = false;
				}
				else
					st->update_optimism_paused = OPTIMISM_PAUSE_FLUSHES;
			}
		}

		nw = nrows - off;
		n = 0;
		ash_apply_errctx.command = updates_left ? "update" : "insert";
		if (nw == 0)
			inserted = true;
		else if (!updates_left && ash_apply_fresh_target(tgt->relid))
		{
			/*
			 * A snapshot copy into a table that was empty when it began:
			 * each key comes once, no row can conflict, no subtransaction
			 * is needed (a host's own row would fail the copy, which then
			 * starts again on a table no longer fresh).
			 */
			if (bulk_usable(st, rel, tgt))
			{
				ash_apply_copy_write(rel, tgt, bulk_insert, &off);
				n = nw;
			}
			else
			{
				AshSpiCall	call = {gbuf.stamped ? st->insert_many_prov : st->insert_many,
				column_arrays(rel, off, nw), NULL, SPI_OK_INSERT, 0};

				ash_apply_copy_write(rel, tgt, ash_spi_call, &call);
				/* a trigger may keep rows out (checked below) */
				n = call.processed;
			}
			inserted = true;
		}
		else if (st->optimism_paused > 0)
			st->optimism_paused--;
		else if (updates_left)
			;					/* existing rows: the plain INSERT would fail */
		else
		{
			/* no statement where it would only store the rows */
			if (bulk_usable(st, rel, tgt))
			{
				if (nw == 1)
					inserted = bulk_write(off, true);
				else
					inserted = ash_run_catching(bulk_insert, &off, ERRCODE_UNIQUE_VIOLATION);
				n = inserted ? nw : 0;	/* no trigger can skip a row here */
			}
			else
			{
				values = column_arrays(rel, off, nw);
				inserted = ash_spi_execute_or_catch(gbuf.stamped ? st->insert_many_prov :
													st->insert_many, values, NULL,
													SPI_OK_INSERT, ERRCODE_UNIQUE_VIOLATION,
													&n);
			}
			if (!inserted)
				st->optimism_paused = OPTIMISM_PAUSE_FLUSHES;
		}
		if (!inserted)
		{
			if (values == NULL)
				values = column_arrays(rel, off, nw);
			n = ash_spi_execute(gbuf.stamped ? st->upsert_many_prov : st->upsert_many, values,
								NULL, SPI_OK_INSERT);
		}
		if (values == NULL && n < nw)
			values = column_arrays(rel, off, nw);

		/*
		 * Only the upsert meets rows (a plain insert that met one failed);
		 * a row it did not count met another tenant's row under its
		 * identity, or a trigger kept it out (its insert, or its update of
		 * the same tenant's row).  The run's identities are distinct and
		 * each names one target row: some row is another tenant's when
		 * more of them are held under any tenant than under the run's.
		 */
		if (!inserted && n < nw &&
			(gbuf.stamped ? st->prov_checks_tenant : st->upsert_checks_tenant) &&
			run_present(rel, tgt, values, true) > run_present(rel, tgt, values, false))
			ash_halt("tenant_conflict", "a row of another tenant holds an identity in %s",
					 tgt->log_name);
		if (n > nw)
			elog(ERROR, "ash_replicant: multi-row upsert affected more rows than it wrote");

		/*
		 * Each row is inserted or updates the one it conflicts with: a row
		 * not counted was kept out by a trigger (a snapshot row of a
		 * stamped run would be neither written nor marked).
		 */
		if (n < nw && (gbuf.stamped || !key_only(rel) || run_kept_out(rel, tgt, values, nw)))
			ash_apply_write_lost(tgt, "an insert or update",
								 "a multi-row upsert affected fewer rows than it wrote");
	}

	PopActiveSnapshot();
	ash_apply_target_exit(&scope);
	ash_apply_errctx = saved;
	scd1_discard();
}

/*
 * Make room in the run for a write to tgt with identity hash h: a run of
 * another target, or one that already has this identity, is written first.
 * False when this target cannot gather (a column type without an array
 * type).
 */
static bool
gather_begin(AshApplyRel *rel, AshApplyTarget *tgt, uint32 h, bool stamped)
{
	MemoryContext old;

	/* a run of this target has its plans: a release writes the run first */
	if (gbuf.rel == rel && gbuf.tgt == tgt && !hash_set_contains(h))
		return true;

	/* the first statement of a target tells whether its types allow it */
	(void) upsert_plan(rel, tgt);
	if (upsert_many_plan(rel, tgt) == NULL)
		return false;
	if (stamped)
		prov_plans(rel, tgt);

	if (gbuf.rel != NULL && (gbuf.rel != rel || gbuf.tgt != tgt || gbuf.stamped != stamped ||
							 hash_set_contains(h)))
		scd1_flush();
	if (gbuf.rel != NULL)
		return true;

	/*
	 * A run's arrays (GATHER_MAX_ROWS rows a column, the key set) take
	 * ~10 kB a column: a first block that holds those of a table of a dozen
	 * columns is kept by every reset, where blocks grown from 8 kB were
	 * malloc'ed and freed again for every run -- for every one-row batch.
	 */
	if (gbuf.cxt == NULL)
		gbuf.cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant gathered writes",
										 0, 128 * 1024, ALLOCSET_DEFAULT_MAXSIZE);
	old = MemoryContextSwitchTo(gbuf.cxt);
	gbuf.rel = rel;
	gbuf.tgt = tgt;
	gbuf.cols = palloc(sizeof(GatherCol) * rel->ncols);
	for (int c = 0; c < rel->ncols; c++)
		gcol_init_col(&gbuf.cols[c], &rel->cols[c]);
	gbuf.stamped = stamped;
	if (stamped)
	{
		gbuf.prov = palloc(sizeof(GatherCol) * 2);
		gcol_init(&gbuf.prov[0], BYTEAOID);
		gcol_init(&gbuf.prov[1], BYTEAOID);
	}
	gbuf.key_hashes = palloc0(sizeof(uint32) * KEY_SET_SIZE);
	gbuf.is_update = palloc(sizeof(bool) * GATHER_MAX_ROWS);
	gbuf.first_commit_lsn = ash_apply_errctx.commit_lsn;
	gbuf.first_xid = ash_apply_errctx.xid;
	MemoryContextSwitchTo(old);
	return true;
}

static void
gather_end(uint32 h)
{
	hash_set_add(h);
	if (gbuf.nrows + gbuf.ndeletes >= GATHER_MAX_ROWS || gbuf.bytes >= GATHER_MAX_BYTES)
		scd1_flush();
}

/* stamp: the provenance columns of a stamped run's row, else NULL */
static void
gather_row(AshApplyRel *rel, AshRowImage *row, bool update, uint32 h, const Datum *stamp)
{
	MemoryContext old = MemoryContextSwitchTo(gbuf.cxt);

	Assert(gbuf.stamped == (stamp != NULL));
	for (int c = 0; c < rel->ncols; c++)
		gbuf.bytes += gcol_put(&gbuf.cols[c], gbuf.nrows, row->values[c], row->nulls[c]);
	for (int i = 0; stamp != NULL && i < 2; i++)
		gbuf.bytes += gcol_put(&gbuf.prov[i], gbuf.nrows, stamp[i], false);
	gbuf.is_update[gbuf.nrows] = update;
	gbuf.nupdates += update ? 1 : 0;
	gbuf.nrows++;
	gbuf.has_updates |= update;
	MemoryContextSwitchTo(old);
	gather_end(h);
}

static void
scd1_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow)
{
	SPIPlanPtr	plan;
	uint64		n;
	uint32		h;

	if (!newrow->complete)
		ash_halt("unchanged_value_unavailable", "insert into %s lacks a column value",
				 tgt->log_name);
	h = identity_hash(rel, newrow);
	if (gather_begin(rel, tgt, h, false))
	{
		gather_row(rel, newrow, false, h, NULL);
		return;
	}
	plan = upsert_plan(rel, tgt);
	n = ash_spi_execute(plan, newrow->values, nulls_of(rel, newrow), SPI_OK_INSERT);
	/* as a gathered run's (scd1_flush): else a trigger kept it out */
	if (n == 0 && plans_of(tgt)->upsert_checks_tenant &&
		(target_commutes(tgt) || (identity_held(rel, tgt, newrow) &&
								  !row_present(rel, tgt, newrow))))
		ash_halt("tenant_conflict", "a row of another tenant holds the identity in %s",
				 tgt->log_name);
	if (n == 0 && (!key_only(rel) || key_only_kept_out(rel, tgt, newrow)))
		ash_apply_write_lost(tgt, "an insert or update", "an upsert affected no row");
	if (n > 1)
		elog(ERROR, "ash_replicant: upsert affected more than one row");
}

/*
 * A snapshot row with its provenance: gathered into a stamped run, written
 * by the same multi-row insert or upsert with the two provenance columns.
 * False when the target cannot gather (a column type without an array
 * type): the caller inserts and stamps.
 */
static bool
scd1_insert_stamped(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow,
					Datum fingerprint, Datum attempt)
{
	Datum		stamp[2];
	uint32		h;

	if (!newrow->complete)
		ash_halt("unchanged_value_unavailable", "insert into %s lacks a column value",
				 tgt->log_name);
	h = identity_hash(rel, newrow);
	if (!gather_begin(rel, tgt, h, true))
		return false;
	stamp[0] = fingerprint;
	stamp[1] = attempt;
	gather_row(rel, newrow, false, h, stamp);
	return true;
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
	bool		same;
	int			nset;
	Datum	   *values;
	char	   *nulls;
	int			i = 0;
	int			c = -1;
	uint64		n;

	/* a complete row under the same identity: gathered where rows commute */
	if (newrow->complete && same_identity(rel, key, newrow))
	{
		uint32		h = identity_hash(rel, newrow);

		if (target_commutes(tgt) && gather_begin(rel, tgt, h, false))
		{
			gather_row(rel, newrow, true, h, NULL);
			return;
		}
	}
	scd1_flush();

	/*
	 * Under an unchanged identity its columns are not set: they keep their
	 * values, and one GENERATED ALWAYS AS IDENTITY could not be set at all
	 * (only to DEFAULT).  A row of identity columns only sets them, so that
	 * a row the mirror lacks is still found missing and inserted.
	 */
	same = same_identity(rel, key, newrow);
	for (int pass = 0; pass < 2 && present == NULL; pass++)
		for (int j = 0; j < rel->ncols; j++)
			if (newrow->present[j] && (pass == 1 || !same || !rel->cols[j].is_identity))
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
	i += ash_key_values(rel, key, values + i, nulls + i);
	nulls[i] = '\0';

	n = ash_spi_execute(update_plan(rel, tgt, present), values, nulls, SPI_OK_UPDATE);
	if (n == 1)
		return;
	if (n > 1)
		ash_apply_key_matched_many(tgt, "an update");
	if (kept_by_trigger(rel, tgt, key))
		ash_apply_write_lost(tgt, "an update", "an update missed a row that is there");

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
	uint32		h = identity_hash(rel, key);

	nparams = ash_key_values(rel, key, values, nulls);
	if ((!ash_tenant_scoped(rel) || nulls[nparams - 1] == ' ') &&
		target_commutes(tgt) && gather_begin(rel, tgt, h, false))
	{
		MemoryContext old = MemoryContextSwitchTo(gbuf.cxt);

		if (gbuf.dkeys == NULL)
		{
			gbuf.dkeys = palloc(sizeof(GatherCol) * nparams);
			for (int i = 0; i < nparams; i++)
			{
				int			c = i < rel->nkeys ? rel->keys[i] : rel->tenant_col;

				gcol_init_col(&gbuf.dkeys[i], &rel->cols[c]);
			}
		}
		for (int i = 0; i < nparams; i++)
			gbuf.bytes += gcol_put(&gbuf.dkeys[i], gbuf.ndeletes, values[i], false);
		gbuf.ndeletes++;
		MemoryContextSwitchTo(old);
		gather_end(h);
		return;
	}
	scd1_flush();

	if (st->delete == NULL)
		st->delete = key_plan(rel, tgt, "DELETE FROM", "");
	nulls[nparams] = '\0';
	n = ash_spi_execute(st->delete, values, nulls, SPI_OK_DELETE);
	if (n == 0 && kept_by_trigger(rel, tgt, key))
		ash_apply_write_lost(tgt, "a delete", "a delete missed a row that is there");
	if (n == 0)
		ash_apply_count_missing_delete(tgt);
	else if (n > 1)
		ash_apply_key_matched_many(tgt, "a delete");
}

static void
scd1_truncate(AshApplyRel *rel, AshApplyTarget *tgt)
{
	ash_scd1_truncate_keeping(rel, tgt, NULL, 0, NULL, NULL);
}

/*
 * The truncate's DELETE, leaving the rows for which keep holds (NULL: none
 * left) -- its values are parameters, never statement text.
 */
void
ash_scd1_truncate_keeping(AshApplyRel *rel, AshApplyTarget *tgt, const char *keep,
						  int nargs, Oid *types, Datum *values)
{
	StringInfoData sql;
	int			ret;
	MemoryContext cxt = CurrentMemoryContext;

	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s", tgt->name);
	if (keep != NULL)
		appendStringInfo(&sql, " WHERE NOT (%s)", keep);
	ret = SPI_execute_with_args(sql.data, nargs, types, values, NULL, false, 0);
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
	/* on abort the driver discarded the run first; otherwise write it */
	if (gbuf.tgt == tgt)
		scd1_flush();
	if (st->upsert)
		SPI_freeplan(st->upsert);
	if (st->upsert_many)
		SPI_freeplan(st->upsert_many);
	if (st->insert_many)
		SPI_freeplan(st->insert_many);
	if (st->update_many)
		SPI_freeplan(st->update_many);
	if (st->upsert_many_prov)
		SPI_freeplan(st->upsert_many_prov);
	if (st->insert_many_prov)
		SPI_freeplan(st->insert_many_prov);
	if (st->delete)
		SPI_freeplan(st->delete);
	if (st->key_probe)
		SPI_freeplan(st->key_probe);
	if (st->key_probe_any)
		SPI_freeplan(st->key_probe_any);
	if (st->run_probe)
		SPI_freeplan(st->run_probe);
	if (st->run_probe_any)
		SPI_freeplan(st->run_probe_any);
	if (st->delete_many)
		SPI_freeplan(st->delete_many);
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
	.insert_stamped = scd1_insert_stamped,
	.flush = scd1_flush,
	.discard = scd1_discard,
};
