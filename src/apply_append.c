/*-------------------------------------------------------------------------
 *
 * apply_append.c
 *	  Append-log apply strategy: one immutable row per source change.
 *
 * NOTES
 *	  An append target (docs/history-and-events.md) has structural columns -- the five
 *	  identity axes (source_system_id, source_database, slot_name,
 *	  commit_lsn bigint, ordinal int), operation, origin, snapshot_attempt,
 *	  message_prefix, message_content; names configurable per mapping --
 *	  and the mapped payload columns.  Every event is
 *
 *		INSERT ... ON CONFLICT (the five axes) DO NOTHING
 *
 *	  inside the checkpoint transaction, so a re-delivered position appends
 *	  once and a stored event is never overwritten.  The axes come from the
 *	  checkpoint identity and ash_apply_current(): commit LSN and ordinal
 *	  (row changes, truncates and transactional messages share the
 *	  ordinal; a non-transactional message has its own LSN and ordinal 0).
 *
 *	  Shapes: insert/update carry the complete new row; delete the complete
 *	  old row (the source has REPLICA IDENTITY FULL, checked by relmap.c);
 *	  truncate (on_truncate 'append') and message rows are structural only
 *	  (payload NULL).  A missing value (unchanged TOAST without a full old
 *	  row) halts unchanged_value_unavailable: an event is never invented.
 *
 *	  Activation (ash_append_activate, after the checkpoint binding and the
 *	  slot check, before streaming), in this order:
 *	  - frontier: an event of this identity above the durable watermark in
 *		any append target halts append_frontier_divergent (the checkpoint
 *		was moved back or the log was written by someone else: re-delivery
 *		would interleave two histories);
 *	  - origin floor: the first activation writes checkpoints.origin_floor
 *		once (the slot's consistent point); a slot created in this session
 *		on a log that already has a floor halts append_origin_gap (the
 *		events between the old slot's end and the new slot's start are
 *		lost), and so does a reused slot whose confirmed position is above
 *		both the durable watermark and the floor (someone acknowledged WAL
 *		this log never stored).
 *	  An append log never acknowledges past its durable watermark
 *	  (pipeline.c does not idle-advance append sinks), so the slot's
 *	  confirmed position stays at or below the watermark.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"

#include "apply_append.h"
#include "apply_strategy.h"
#include "errors.h"
#include "owner_scope.h"
#include "spi_util.h"

#define NSTRUCT	8				/* five axes, operation, origin, attempt */

typedef struct AppendPlans
{
	SPIPlanPtr	row;			/* axes, operation, origin, payload */
	SPIPlanPtr	structural;		/* axes, operation, origin, prefix, content */
} AppendPlans;

/* structural-event plans of message-route targets, by table */
typedef struct MessagePlan
{
	AshApplyTarget target;		/* relid, names, when last judged */
	SPIPlanPtr	plan;
} MessagePlan;

static List *message_plans = NIL;
static MemoryContext append_cxt = NULL;

static AppendPlans *
plans_of(AshApplyTarget *tgt)
{
	if (tgt->plans == NULL)
	{
		tgt->plans_owner = &ash_append_strategy;
		tgt->plans = MemoryContextAllocZero(tgt->cxt, sizeof(AppendPlans));
	}
	return (AppendPlans *) tgt->plans;
}

static const Oid struct_types[NSTRUCT] = {
	TEXTOID, TEXTOID, TEXTOID, INT8OID, INT4OID, TEXTOID, TEXTOID, BYTEAOID
};

/*
 * INSERT INTO t (axes, operation, origin <extra columns>) VALUES (...)
 * ON CONFLICT (axes) DO NOTHING.  extra: the payload columns of rel
 * (rel != NULL) or message prefix and content.
 */
static SPIPlanPtr
build_plan(AshMapping *m, const char *table, AshApplyRel *rel)
{
	StringInfoData sql;
	int			nextra = rel ? rel->ncols : 2;
	Oid		   *types = palloc(sizeof(Oid) * (NSTRUCT + nextra));
	int			n;

	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s (", table);
	for (int a = 0; a < NSTRUCT; a++)
	{
		appendStringInfo(&sql, "%s%s", a ? ", " : "", quote_identifier(m->append_columns[a]));
		types[a] = struct_types[a];
	}
	n = NSTRUCT;
	if (rel)
	{
		for (int c = 0; c < rel->ncols; c++)
		{
			appendStringInfo(&sql, ", %s", quote_identifier(rel->cols[c].name));
			types[n++] = rel->cols[c].typid;
		}
	}
	else
	{
		appendStringInfo(&sql, ", %s, %s",
						 quote_identifier(m->append_columns[ASH_APPEND_COL_MESSAGE_PREFIX]),
						 quote_identifier(m->append_columns[ASH_APPEND_COL_MESSAGE_CONTENT]));
		types[n++] = TEXTOID;
		types[n++] = BYTEAOID;
	}
	/* the source's values, into identity columns too (apply_scd1.c) */
	appendStringInfoString(&sql, ") OVERRIDING SYSTEM VALUE VALUES (");
	for (int i = 0; i < n; i++)
		appendStringInfo(&sql, "%s$%d", i ? ", " : "", i + 1);
	appendStringInfoString(&sql, ") ON CONFLICT (");
	for (int a = 0; a < ASH_APPEND_COL_NIDENTITY; a++)
		appendStringInfo(&sql, "%s%s", a ? ", " : "", quote_identifier(m->append_columns[a]));
	appendStringInfoString(&sql, ") DO NOTHING");
	return ash_spi_prepare_kept(sql.data, n, types);
}

/* The structural values of the current change. */
static void
struct_values(const char *operation, Datum *values, char *nulls)
{
	const AshCheckpointKey *key = ash_apply_checkpoint_key();
	const AshChangeMeta *meta = ash_apply_current();

	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	values[3] = Int64GetDatum((int64) meta->commit_lsn);
	values[4] = Int32GetDatum(meta->ordinal);
	values[5] = CStringGetTextDatum(operation);
	values[6] = CStringGetTextDatum(meta->origin ? meta->origin : "stream");
	memset(nulls, ' ', NSTRUCT);
	if (meta->snapshot_attempt != NULL)
		values[7] = PointerGetDatum(meta->snapshot_attempt);
	else
		nulls[7] = 'n';
}

static void
check_inserted(uint64 n)
{
	/* 0: this position is already in the log (re-delivery) */
	if (n > 1)
		elog(ERROR, "ash_replicant: an append affected more than one row");
}

static void
append_row(AshApplyRel *rel, AshApplyTarget *tgt, const char *operation, AshRowImage *img)
{
	AppendPlans *st = plans_of(tgt);
	Datum	   *values;
	char	   *nulls;

	if (!img->complete)
		ash_halt("unchanged_value_unavailable", "a %s event of %s lacks a column value",
				 operation, tgt->log_name);
	if (st->row == NULL)
		st->row = build_plan(rel->map, tgt->name, rel);
	values = palloc(sizeof(Datum) * (NSTRUCT + rel->ncols));
	nulls = palloc(NSTRUCT + rel->ncols + 1);
	struct_values(operation, values, nulls);
	for (int c = 0; c < rel->ncols; c++)
	{
		values[NSTRUCT + c] = img->values[c];
		nulls[NSTRUCT + c] = img->nulls[c] ? 'n' : ' ';
	}
	nulls[NSTRUCT + rel->ncols] = '\0';
	check_inserted(ash_spi_execute(st->row, values, nulls, SPI_OK_INSERT));
}

static void
append_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow)
{
	/* a row copied by a snapshot is a snapshot event, not an insert */
	append_row(rel, tgt, ash_apply_current()->snapshot_attempt != NULL ? "snapshot" : "insert",
			   newrow);
}

static void
append_update(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key, AshRowImage *newrow)
{
	append_row(rel, tgt, "update", newrow);
}

static void
append_delete(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *oldrow)
{
	/* the old row is written whole: its sensitive columns are sealed here */
	ash_apply_seal_image(rel, tgt, oldrow);
	append_row(rel, tgt, "delete", oldrow);
}

static void
write_structural(AshMapping *m, const char *table, SPIPlanPtr *planp, const char *operation,
				 const char *prefix, const char *content, int len)
{
	Datum		values[NSTRUCT + 2];
	char		nulls[NSTRUCT + 3];

	if (*planp == NULL)
		*planp = build_plan(m, table, NULL);
	struct_values(operation, values, nulls);
	if (prefix)
	{
		bytea	   *b = palloc(VARHDRSZ + len);

		SET_VARSIZE(b, VARHDRSZ + len);
		memcpy(VARDATA(b), content, len);
		values[NSTRUCT] = CStringGetTextDatum(prefix);
		values[NSTRUCT + 1] = PointerGetDatum(b);
		nulls[NSTRUCT] = nulls[NSTRUCT + 1] = ' ';
	}
	else
		nulls[NSTRUCT] = nulls[NSTRUCT + 1] = 'n';
	nulls[NSTRUCT + 2] = '\0';
	check_inserted(ash_spi_execute(*planp, values, nulls, SPI_OK_INSERT));
}

static void
append_truncate(AshApplyRel *rel, AshApplyTarget *tgt)
{
	if (strcmp(rel->map->on_truncate, "append") != 0)
		ash_halt("mapping_unsupported", "on_truncate %s on append target %s",
				 rel->map->on_truncate, rel->target_name);
	write_structural(rel->map, tgt->name, &plans_of(tgt)->structural, "truncate",
					 NULL, NULL, 0);
}

static void
append_release(AshApplyTarget *tgt)
{
	AppendPlans *st = tgt->plans;

	if (st == NULL)
		return;
	if (st->row)
		SPI_freeplan(st->row);
	if (st->structural)
		SPI_freeplan(st->structural);
	tgt->plans = NULL;
	tgt->plans_owner = NULL;
}

const AshApplyStrategy ash_append_strategy = {
	.name = "append_log",
	.insert = append_insert,
	.update = append_update,
	.delete = append_delete,
	.truncate = append_truncate,
	.release = append_release,
	.update_relocates = true,
};

/* ---------------------------------------------------------------------
 * Messages routed to an append log.
 * ---------------------------------------------------------------------
 */
static AshMapping *
append_mapping_of(AshPipelineConfig *cfg, Oid relid)
{
	ListCell   *lc;

	foreach(lc, cfg->mappings)
	{
		AshMapping *m = lfirst(lc);

		if (m->target_relid == relid && m->append_log)
			return m;
	}
	return NULL;
}

void
ash_append_message(AshPipelineConfig *cfg, Oid target, const char *prefix,
				   const char *content, int len)
{
	AshMapping *m = append_mapping_of(cfg, target);
	MessagePlan *mp = NULL;
	ListCell   *lc;
	AshOwnerScope owner_scope;
	AshOwnerScope table_scope;

	/* dropped: a mapping's target gone, as a row event's would be */
	if (!OidIsValid(get_rel_namespace(target)))
		ash_halt("destination_table_missing",
				 "the append log of a message route, oid %u", target);
	if (m == NULL)
		ash_halt("message_prefix_unmapped", "the route's append target is not an append-log mapping of the sink");

	foreach(lc, message_plans)
	{
		if (((MessagePlan *) lfirst(lc))->target.relid == target)
			mp = lfirst(lc);
	}
	if (mp == NULL)
	{
		MemoryContext old;
		char	   *nspname = get_namespace_name(get_rel_namespace(target));
		char	   *relname = get_rel_name(target);

		if (append_cxt == NULL)
			append_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant append messages",
											   ALLOCSET_SMALL_SIZES);
		old = MemoryContextSwitchTo(append_cxt);
		mp = palloc0(sizeof(MessagePlan));
		mp->target.relid = target;
		mp->target.name = quote_qualified_identifier(nspname, relname);
		mp->target.log_name = mp->target.name;
		mp->target.nspname = pstrdup(nspname);
		mp->target.relname = pstrdup(relname);
		mp->target.cxt = append_cxt;
		message_plans = lappend(message_plans, mp);
		MemoryContextSwitchTo(old);
	}
	ash_apply_errctx.relation = mp->target.name;

	/*
	 * Before anything is written, as for a row event: a renamed log, or one
	 * given a trigger or rule that keeps rows out, halts census_drift (the
	 * statement names the table; 0 rows would read as a re-delivery).  As
	 * the worker: the registration is its catalog.
	 */
	ash_relmap_check_event_target(m, &mp->target);

	/* the event is a write to the log, as its owner allows (owner_scope.c) */
	ash_owner_scope_enter(&owner_scope, cfg->owner, 0);
	ash_owner_write_enter(&table_scope, cfg->owner, target, mp->target.log_name);
	write_structural(m, mp->target.name, &mp->plan, "message", prefix, content, len);
	ash_owner_scope_exit(&table_scope);
	ash_owner_scope_exit(&owner_scope);
}

/* ---------------------------------------------------------------------
 * Activation: origin floor and frontier.
 * ---------------------------------------------------------------------
 */
void
ash_append_activate(AshPipelineConfig *cfg, AshCheckpointKey *key, XLogRecPtr watermark,
					XLogRecPtr watermark_end, bool slot_created, XLogRecPtr slot_position)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[3] = {TEXTOID, TEXTOID, TEXTOID};
	Datum		values[3];
	Oid			ftypes[4] = {TEXTOID, TEXTOID, TEXTOID, INT8OID};
	Datum		fvalues[4];
	int			ret;
	bool		isnull = true;
	bool		floor_missing;
	XLogRecPtr	floor = InvalidXLogRecPtr;
	ListCell   *lc;

	if (!ash_config_is_append_log(cfg))
		return;

	ash_spi_transaction_begin();

	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	memcpy(fvalues, values, sizeof(Datum) * 3);
	fvalues[3] = Int64GetDatum((int64) watermark);

	ret = SPI_execute_with_args("SELECT origin_floor FROM ash_replicant.checkpoints"
								" WHERE source_system_id = $1 AND source_database = $2"
								" AND slot_name = $3 FOR UPDATE",
								3, types, values, NULL, false, 0);
	MemoryContextSwitchTo(cxt);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "ash_replicant: the checkpoint row is missing at append activation");
	{
		Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			floor = DatumGetLSN(d);
	}

	floor_missing = isnull;

	/* frontier: no stored event of this identity above the watermark */
	foreach(lc, cfg->mappings)
	{
		AshMapping *m = lfirst(lc);
		StringInfoData sql;
		char	   *nspname;

		if (!m->append_log || !OidIsValid(get_rel_namespace(m->target_relid)))
			continue;
		nspname = get_namespace_name(get_rel_namespace(m->target_relid));
		initStringInfo(&sql);
		/* a non-transactional message at E is covered by a watermark E - 1 */
		appendStringInfo(&sql, "SELECT EXISTS (SELECT 1 FROM %s WHERE %s = $1 AND %s = $2 AND %s = $3"
						 " AND %s OPERATOR(pg_catalog.>) $4 AND NOT (%s OPERATOR(pg_catalog.=) 0"
						 " AND %s OPERATOR(pg_catalog.=) ($4 OPERATOR(pg_catalog.+) 1)))",
						 quote_qualified_identifier(nspname, get_rel_name(m->target_relid)),
						 quote_identifier(m->append_columns[ASH_APPEND_COL_SOURCE_SYSTEM_ID]),
						 quote_identifier(m->append_columns[ASH_APPEND_COL_SOURCE_DATABASE]),
						 quote_identifier(m->append_columns[ASH_APPEND_COL_SLOT_NAME]),
						 quote_identifier(m->append_columns[ASH_APPEND_COL_COMMIT_LSN]),
						 quote_identifier(m->append_columns[ASH_APPEND_COL_ORDINAL]),
						 quote_identifier(m->append_columns[ASH_APPEND_COL_COMMIT_LSN]));
		ret = SPI_execute_with_args(sql.data, 4, ftypes, fvalues, NULL, true, 1);
		MemoryContextSwitchTo(cxt);
		if (ret != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "ash_replicant: could not read an append frontier");
		if (DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)))
		{
			ereport(LOG,
					(errmsg("ash_replicant event=append.frontier_divergent sink=%s table=%s",
							cfg->sink_name,
							quote_qualified_identifier(nspname, get_rel_name(m->target_relid)))));
			ash_halt("append_frontier_divergent", "table %s holds events above the durable watermark",
					 quote_qualified_identifier(nspname, get_rel_name(m->target_relid)));
		}
	}

	/* origin: the slot must continue this log's history without a gap */
	if (!floor_missing && slot_created)
		ash_halt("append_origin_gap", "the slot was created anew for a log that already has an origin floor");
	if (!floor_missing && slot_position > Max(watermark_end, floor))
		ash_halt("append_origin_gap", "the slot's confirmed position is above the log's durable watermark");
	if (floor_missing)
	{
		/* first activation of this log: its history starts here */
		ash_checkpoint_set_origin_floor(key, slot_position);
		ereport(LOG,
				(errmsg("ash_replicant event=append.origin_floor sink=%s origin_floor=%X/%X",
						cfg->sink_name, LSN_FORMAT_ARGS(slot_position))));
	}

	ash_spi_transaction_end();
}
