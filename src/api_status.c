/*-------------------------------------------------------------------------
 *
 * api_status.c
 *	  ash_replicant_status() and the stat_pipelines view.
 *
 * NOTES
 *	  Status is derived, never stored: from the pipeline's enabled flag and
 *	  start generation, the halt recorded for that generation (catalog row,
 *	  or the in-memory leg in shared memory when the catalog write failed),
 *	  the checkpoint tombstone, and the live worker's facts (attached,
 *	  streaming, census verdict, snapshot in flight).
 *
 *	  healthy      live worker, streaming, enabled census whose last run
 *	               passed, no snapshot in flight
 *	  catching_up  enabled and alive (or about to start) but not all of the
 *	               above
 *	  halted / misconfigured   a halt in the current start generation
 *	  not_started  not configured, not enabled, or stopped deliberately
 *
 *	  On 0.4.x catalogs (checkpoints keyed by slot only) every sink reads
 *	  misconfigured / extension_version_mismatch: nothing runs on them until
 *	  ALTER EXTENSION ash_replicant UPDATE (docs/operations.md).
 *
 *	  Nothing printed here carries a value: reason codes, pids and times.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "catalog/namespace.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "ash_replicant.h"
#include "errors.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(ash_replicant_status);
PG_FUNCTION_INFO_V1(ash_replicant_stat_pipelines);
PG_FUNCTION_INFO_V1(ash_replicant_stat_snapshot_tables);
PG_FUNCTION_INFO_V1(ash_replicant_wait_for_slot);

typedef struct StatusRow
{
	const char *state;
	const char *reason;			/* NULL or a reason code */
	int			pid;
	TimestampTz since;			/* 0 when unknown */
	/* where a halt stopped (structure, never a value): NULL/invalid if not */
	const char *sqlstate;
	XLogRecPtr	lsn;
	const char *target;
} StatusRow;

/* What the catalogs say about one sink. */
typedef struct CatalogFacts
{
	char	   *sink_name;
	bool		legacy;			/* 0.4.x catalogs: an update is needed */
	bool		configured;
	bool		enabled;
	bool		restored;		/* enabled in another installation */
	int64		start_generation;
	int64		halt_generation;	/* -1 none */
	char	   *halt_reason;
	char	   *halt_class;
	TimestampTz halted_at;
	char	   *halt_sqlstate;
	XLogRecPtr	halt_lsn;
	char	   *halt_target;
	char	   *terminal_cause; /* checkpoint tombstone, may be NULL */
	char	   *terminal_class;

	/* the snapshot recorded on the checkpoint (used when no worker runs) */
	char	   *snapshot_phase; /* NULL, "copying", "complete" */
	int32		snapshot_tables_total;
	int32		snapshot_tables_copied;
	int64		snapshot_rows_copied;
	int64		snapshot_rows_estimate;
} CatalogFacts;

static const char *
intern_reason(const char *reason, const char **cls)
{
	AshReasonClass rc = ash_reason_class(reason);

	if (rc == ASH_REASON_UNKNOWN)
	{
		/* a stored cause this version does not know */
		*cls = "halted";
		return "tombstone_unknown";
	}
	if (*cls == NULL || (strcmp(*cls, "halted") != 0 && strcmp(*cls, "misconfigured") != 0))
		*cls = (rc == ASH_REASON_MISCONFIGURED) ? "misconfigured" : "halted";
	return reason;
}

/* A consistent copy of the sink's shared-memory slot; zeroes if none. */
static bool
snapshot_slot(const char *sink_name, AshPipelineSlot *snap)
{
	bool		found = false;

	memset(snap, 0, sizeof(*snap));
	if (AshShmem == NULL)
		return false;
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	{
		AshPipelineSlot *slot = ash_slot_find(MyDatabaseId, sink_name);

		if (slot != NULL)
		{
			SpinLockAcquire(&slot->mutex);
			memcpy(snap, slot, sizeof(AshPipelineSlot));
			SpinLockRelease(&slot->mutex);
			found = true;
		}
	}
	LWLockRelease(AshShmem->lock);
	return found;
}

/*
 * Has the worker pid waited on a heavyweight lock for LOCK_WAIT_SAID_MS or
 * longer?  A session holding a lock on a target (a LOCK TABLE, a long
 * ALTER, an open transaction that wrote its rows) stops the apply without
 * an error: status says so rather than healthy.  Read from the worker's
 * PGPROC (its wait event and when its lock wait began), as pg_locks does.
 */
#define LOCK_WAIT_SAID_MS 5000
/* ... and the source creating the worker's slot as long (source_slot.c) */
#define SLOT_WAIT_SAID_MS 5000

static bool
waits_on_lock(int pid)
{
	PGPROC	   *proc;
	TimestampTz since = 0;

	if (pid == 0)
		return false;
	LWLockAcquire(ProcArrayLock, LW_SHARED);
	proc = BackendPidGetProcWithLock(pid);
	if (proc != NULL && (proc->wait_event_info & 0xFF000000) == PG_WAIT_LOCK)
		since = (TimestampTz) pg_atomic_read_u64(&proc->waitStart);
	LWLockRelease(ProcArrayLock);
	return since != 0 &&
		TimestampDifferenceExceeds(since, GetCurrentTimestamp(), LOCK_WAIT_SAID_MS);
}

/* ... the worker or a helper copying a table of its snapshot */
static bool
pipeline_waits_on_lock(const AshPipelineSlot *snap)
{
	if (waits_on_lock(snap->pid))
		return true;
	for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		if (snap->copiers[i].pid != 0 && snap->copiers[i].pid != snap->pid &&
			snap->copiers[i].end == ASH_COPIER_RUNNING && waits_on_lock(snap->copiers[i].pid))
			return true;
	return false;
}

/*
 * Does a copier of the pipeline's snapshot wait for a lock at the source
 * (snapshot.c: its COPY, for SOURCE_LOCK_SAID_MS)?
 */
#define SOURCE_LOCK_SAID_MS 1000

static bool
pipeline_waits_on_source_lock(const AshPipelineSlot *snap)
{
	for (int i = 0; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		if (snap->copiers[i].source_lock_since != 0 &&
			TimestampDifferenceExceeds(snap->copiers[i].source_lock_since,
									   GetCurrentTimestamp(), SOURCE_LOCK_SAID_MS))
			return true;
	return false;
}

/*
 * Is every shared-memory slot taken (ash_replicant.max_pipelines)?  A slot
 * stays taken by a halted pipeline until it is stopped: the slot keeps the
 * halt's in-memory leg.
 */
static bool
all_slots_taken(void)
{
	bool		taken = true;

	if (AshShmem == NULL)
		return false;
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	for (int i = 0; i < AshShmem->nslots && taken; i++)
		taken = AshShmem->slots[i].in_use;
	LWLockRelease(AshShmem->lock);
	return taken;
}

static void
derive_status(CatalogFacts *f, StatusRow *row)
{
	AshPipelineSlot snap;
	bool		have_slot = snapshot_slot(f->sink_name, &snap);

	memset(row, 0, sizeof(*row));
	row->state = "not_started";

	if (f->legacy)
	{
		row->state = "misconfigured";
		row->reason = "extension_version_mismatch";
		return;
	}

	if (!f->configured || !f->enabled)
		return;

	/* a dump restored here: nothing runs it until it is started here */
	if (f->restored)
	{
		row->reason = "destination_restored";
		return;
	}

	/* a halt of the current start generation wins */
	if (f->halt_generation >= f->start_generation && f->halt_reason != NULL)
	{
		const char *cls = f->halt_class;

		row->reason = intern_reason(f->halt_reason, &cls);
		row->state = cls;
		row->since = f->halted_at;
		row->sqlstate = f->halt_sqlstate;
		row->lsn = f->halt_lsn;
		row->target = f->halt_target;
		return;
	}
	if (have_slot && snap.generation == f->start_generation &&
		snap.halt_reason[0] != '\0' && snap.halt_generation >= f->start_generation)
	{
		const char *cls = snap.halt_class;

		row->reason = intern_reason(pstrdup(snap.halt_reason), &cls);
		row->state = pstrdup(cls);
		row->since = snap.halted_at;
		row->sqlstate = snap.halt_sqlstate[0] ? pstrdup(snap.halt_sqlstate) : NULL;
		row->lsn = snap.halt_lsn;
		row->target = snap.halt_target[0] ? pstrdup(snap.halt_target) : NULL;
		return;
	}

	if (have_slot && snap.generation == f->start_generation &&
		snap.state == ASH_SLOT_RUNNING && snap.pid != 0)
	{
		AshPipelineStats *st = &snap.stats;

		row->pid = snap.pid;
		row->since = snap.started_at;
		if (st->streaming && st->census_enabled &&
			strcmp(st->last_census_verdict, "pass") == 0 &&
			!st->snapshot_in_flight)
			row->state = "healthy";
		else
			row->state = "catching_up";
		/* a resource the worker waits for, never a silent wait */
		if (st->wait_reason[0] != '\0')
		{
			row->state = "catching_up";
			row->reason = pstrdup(st->wait_reason);
		}
		else if (pipeline_waits_on_lock(&snap))
		{
			row->state = "catching_up";
			row->reason = "destination_lock_wait";
		}
		else if (pipeline_waits_on_source_lock(&snap))
		{
			row->state = "catching_up";
			row->reason = "source_lock_wait";
		}
		else if (st->slot_wait_since != 0 &&
				 TimestampDifferenceExceeds(st->slot_wait_since, GetCurrentTimestamp(),
											SLOT_WAIT_SAID_MS))
		{
			row->state = "catching_up";
			row->reason = "source_slot_wait";
		}
		return;
	}

	/* enabled, starting or between restarts */
	row->state = "catching_up";
	if (have_slot)
	{
		row->since = snap.started_at;
		if (snap.generation == f->start_generation && snap.register_failed)
			row->reason = "worker_processes_exhausted";
	}
	else if ((row->reason = ash_unsupervised_reason()) != NULL)
		;						/* nothing will start it here */
	else if (all_slots_taken())
		row->reason = "pipeline_slots_exhausted";
}

/*
 * Where the halt stopped: read through jsonb so that catalogs older than
 * 1.2.0 (library updated, ALTER EXTENSION not yet run) answer NULL.
 */
#define LOCATION_COLUMNS \
" p.halt_sqlstate, (pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'halt_lsn')::pg_catalog.pg_lsn," \
" pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'halt_target'"

/* The installation it was started in: NULL before 1.9.0 */
#define STARTED_IN_COLUMN \
", pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'started_in'"

static const char *facts_sql =
"SELECT s.sink_name, p.sink_name IS NOT NULL, coalesce(p.enabled, false),"
" coalesce(p.start_generation, 0), coalesce(p.halt_generation, -1),"
" p.halt_reason, p.halt_class, p.halted_at,"
" c.terminal_cause, c.terminal_class, c.snapshot_phase,"
" coalesce(st.total, 0)::int4, coalesce(st.copied, 0)::int4,"
" coalesce(st.rows_copied, 0)::int8, coalesce(st.rows_estimate, 0)::int8,"
LOCATION_COLUMNS
STARTED_IN_COLUMN
" FROM ash_replicant.sinks s"
" LEFT JOIN ash_replicant.pipelines p USING (sink_name)"
" LEFT JOIN ash_replicant.checkpoints c"
"   ON c.slot_name = s.slot_name"
"  AND c.source_system_id = p.source_system_identifier"
"  AND c.source_database = p.source_database"
" LEFT JOIN LATERAL (SELECT pg_catalog.count(*) AS total,"
"     pg_catalog.count(*) FILTER (WHERE t.state = 'copied') AS copied,"
"     pg_catalog.sum(t.rows_copied) AS rows_copied,"
"     pg_catalog.sum(CASE WHEN t.state = 'copied'"
"       THEN GREATEST(t.rows_copied, coalesce(t.rows_estimate, 0))"
"       ELSE coalesce(t.rows_estimate, 0) END) AS rows_estimate"
"   FROM ash_replicant.snapshot_tables t"
"  WHERE t.source_system_id = c.source_system_id"
"    AND t.source_database = c.source_database AND t.slot_name = c.slot_name) st ON true"
" WHERE $1 IS NULL OR s.sink_name = $1"
" ORDER BY s.sink_name";

static const char *facts_sql_1_0 =
"SELECT s.sink_name, p.sink_name IS NOT NULL, coalesce(p.enabled, false),"
" coalesce(p.start_generation, 0), coalesce(p.halt_generation, -1),"
" p.halt_reason, p.halt_class, p.halted_at,"
" c.terminal_cause, c.terminal_class, NULL::text, 0, 0, 0::int8, 0::int8,"
LOCATION_COLUMNS
STARTED_IN_COLUMN
" FROM ash_replicant.sinks s"
" LEFT JOIN ash_replicant.pipelines p USING (sink_name)"
" LEFT JOIN ash_replicant.checkpoints c"
"   ON c.slot_name = s.slot_name"
"  AND c.source_system_id = p.source_system_identifier"
"  AND c.source_database = p.source_database"
" WHERE $1 IS NULL OR s.sink_name = $1"
" ORDER BY s.sink_name";

/* 0.4.x catalogs: the sinks and nothing else */
static const char *facts_sql_0_4 =
"SELECT s.sink_name, false, false, 0::int8, -1::int8, NULL::text, NULL::text,"
" NULL::timestamptz, NULL::text, NULL::text, NULL::text, 0, 0, 0::int8, 0::int8"
" FROM ash_replicant.sinks s"
" WHERE $1 IS NULL OR s.sink_name = $1"
" ORDER BY s.sink_name";

/*
 * Read the catalog facts of every sink (or one).  Returns a List of
 * CatalogFacts in the caller's memory context.
 */
static List *
read_catalog_facts(text *sink_filter)
{
	MemoryContext caller = CurrentMemoryContext;
	List	   *result = NIL;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	char		nulls[1] = {' '};
	int			ret;
	bool		have_snapshots;
	bool		legacy = ash_catalogs_slot_only();
	char	   *installation;

	values[0] = sink_filter ? PointerGetDatum(sink_filter) : (Datum) 0;
	if (sink_filter == NULL)
		nulls[0] = 'n';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/*
	 * Catalogs of 1.0.0 (library updated, ALTER EXTENSION not yet run) have
	 * no snapshot columns: status must still answer, so the operator sees
	 * the extension_version_mismatch halt.
	 */
	have_snapshots = OidIsValid(get_relname_relid("snapshot_tables",
												  get_namespace_oid("ash_replicant", true)));
	installation = ash_installation_id();
	ret = SPI_execute_with_args(legacy ? facts_sql_0_4 :
								have_snapshots ? facts_sql : facts_sql_1_0,
								1, argtypes, values, nulls, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: status query failed");

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext old = MemoryContextSwitchTo(caller);
		CatalogFacts *f = palloc0(sizeof(CatalogFacts));
		bool		isnull;
		char	   *s;

		f->sink_name = SPI_getvalue(tup, desc, 1);
		f->legacy = legacy;
		f->configured = DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull));
		f->enabled = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
		f->start_generation = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
		f->halt_generation = DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
		f->halt_reason = SPI_getvalue(tup, desc, 6);
		f->halt_class = SPI_getvalue(tup, desc, 7);
		f->halted_at = DatumGetTimestampTz(SPI_getbinval(tup, desc, 8, &isnull));
		if (isnull)
			f->halted_at = 0;
		s = SPI_getvalue(tup, desc, 9);
		f->terminal_cause = s;
		f->terminal_class = SPI_getvalue(tup, desc, 10);
		f->snapshot_phase = SPI_getvalue(tup, desc, 11);
		f->snapshot_tables_total = DatumGetInt32(SPI_getbinval(tup, desc, 12, &isnull));
		f->snapshot_tables_copied = DatumGetInt32(SPI_getbinval(tup, desc, 13, &isnull));
		f->snapshot_rows_copied = DatumGetInt64(SPI_getbinval(tup, desc, 14, &isnull));
		f->snapshot_rows_estimate = DatumGetInt64(SPI_getbinval(tup, desc, 15, &isnull));
		f->halt_sqlstate = SPI_getvalue(tup, desc, 16);
		f->halt_lsn = DatumGetLSN(SPI_getbinval(tup, desc, 17, &isnull));
		if (isnull)
			f->halt_lsn = InvalidXLogRecPtr;
		f->halt_target = SPI_getvalue(tup, desc, 18);
		s = SPI_getvalue(tup, desc, 19);
		f->restored = f->enabled && installation != NULL &&
			(s == NULL || strcmp(s, installation) != 0);
		result = lappend(result, f);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	return result;
}

/* columns of ash_replicant_status() since 1.2.0; 1.0.0's first 5 are a prefix */
#define STATUS_COLUMNS 9

Datum
ash_replicant_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	text	   *filter = PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0);
	List	   *facts;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	facts = read_catalog_facts(filter);
	/* a name no sink has is a mistake, not "nothing to report" */
	if (filter != NULL && facts == NIL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("ash_replicant: sink \"%s\" does not exist", text_to_cstring(filter))));

	foreach(lc, facts)
	{
		CatalogFacts *f = lfirst(lc);
		StatusRow	row;
		Datum		values[STATUS_COLUMNS];
		bool		nulls[STATUS_COLUMNS] = {false};
		const char *condition;

		derive_status(f, &row);
		values[0] = CStringGetTextDatum(f->sink_name);
		values[1] = CStringGetTextDatum(row.state);
		if (row.reason)
			values[2] = CStringGetTextDatum(row.reason);
		else
			nulls[2] = true;
		if (row.pid != 0)
			values[3] = Int32GetDatum(row.pid);
		else
			nulls[3] = true;
		if (row.since != 0)
			values[4] = TimestampTzGetDatum(row.since);
		else
			nulls[4] = true;
		/* where a halt stopped; the columns exist from 1.2.0 on */
		condition = ash_sqlstate_condition(row.sqlstate);
		nulls[5] = (row.sqlstate == NULL);
		if (!nulls[5])
			values[5] = CStringGetTextDatum(row.sqlstate);
		nulls[6] = (condition == NULL);
		if (!nulls[6])
			values[6] = CStringGetTextDatum(condition);
		nulls[7] = (row.target == NULL);
		if (!nulls[7])
			values[7] = CStringGetTextDatum(row.target);
		nulls[8] = XLogRecPtrIsInvalid(row.lsn);
		if (!nulls[8])
			values[8] = LSNGetDatum(row.lsn);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* Rows of the copied tables and of the tables in flight. */
static uint64
copied_rows(AshPipelineSlot *snap)
{
	uint64		rows = snap->stats.snapshot_rows_committed;

	for (int i = 0; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		rows += snap->copiers[i].rows;
	return rows;
}

Datum
ash_replicant_stat_pipelines(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	List	   *facts;
	ListCell   *lc;

	InitMaterializedSRF(fcinfo, 0);
	facts = read_catalog_facts(NULL);

	foreach(lc, facts)
	{
		CatalogFacts *f = lfirst(lc);
		StatusRow	row;
		AshPipelineSlot snap;
		bool		have_slot = false;
		Datum		values[25];
		bool		nulls[25] = {false};
		AshPipelineStats *st = &snap.stats;

		if (!f->configured)
			continue;
		derive_status(f, &row);

		have_slot = snapshot_slot(f->sink_name, &snap);

		values[0] = CStringGetTextDatum(f->sink_name);
		if (row.pid)
			values[1] = Int32GetDatum(row.pid);
		else
			nulls[1] = true;
		values[2] = CStringGetTextDatum(row.state);
		if (row.reason)
			values[3] = CStringGetTextDatum(row.reason);
		else
			nulls[3] = true;
		values[4] = Int64GetDatum((int64) st->received_xacts);
		values[5] = Int64GetDatum((int64) st->applied_xacts);
		values[6] = Int64GetDatum((int64) st->skipped_xacts);
		values[7] = Int64GetDatum((int64) st->received_changes);
		values[8] = Int64GetDatum((int64) st->applied_changes);
		values[9] = Int64GetDatum((int64) st->skipped_changes);
		values[10] = Int64GetDatum((int64) st->missing_row_deletes);
		values[11] = Int64GetDatum((int64) st->batches);
		if (st->last_received_lsn != InvalidXLogRecPtr)
			values[12] = LSNGetDatum(st->last_received_lsn);
		else
			nulls[12] = true;
		if (st->applied_lsn != InvalidXLogRecPtr)
			values[13] = LSNGetDatum(st->applied_lsn);
		else
			nulls[13] = true;
		if (have_slot && snap.state == ASH_SLOT_RUNNING && st->streaming)
		{
			/* received but not yet durably applied and acknowledged */
			int64		lag = (st->source_end_lsn > st->flushed_lsn) ?
				(int64) (st->source_end_lsn - st->flushed_lsn) : 0;

			/*
			 * since the oldest transaction received and not applied
			 * committed (the last applied one may be long before it: an
			 * idle source), else since the last applied one did.  A clock
			 * behind the source's reads 0.
			 */
			TimestampTz since = st->unapplied_commit_time != 0 ?
				st->unapplied_commit_time : st->last_commit_time;

			values[14] = DirectFunctionCall1(int8_numeric, Int64GetDatum(lag));
			if (lag > 0 && since != 0)
			{
				long		secs;
				int			usecs;

				TimestampDifference(since, GetCurrentTimestamp(), &secs, &usecs);
				values[15] = Float8GetDatum(secs + usecs / 1000000.0);
			}
			else
				values[15] = Float8GetDatum(0.0);
		}
		else
		{
			nulls[14] = true;
			nulls[15] = true;
		}
		values[16] = Int64GetDatum((int64) st->reconnects);
		if (st->last_census_at != 0)
			values[17] = TimestampTzGetDatum(st->last_census_at);
		else
			nulls[17] = true;
		if (st->last_census_verdict[0] != '\0')
			values[18] = CStringGetTextDatum(st->last_census_verdict);
		else
			nulls[18] = true;
		if (have_slot && snap.started_at != 0)
			values[19] = TimestampTzGetDatum(snap.started_at);
		else
			nulls[19] = true;

		/* snapshot progress: live from the worker, else as recorded */
		if (have_slot && snap.state == ASH_SLOT_RUNNING && st->snapshot_phase[0] != '\0')
		{
			values[20] = CStringGetTextDatum(st->snapshot_phase);
			values[21] = Int32GetDatum(st->snapshot_tables_total);
			values[22] = Int32GetDatum(st->snapshot_tables_copied);
			values[23] = Int64GetDatum((int64) copied_rows(&snap));
			values[24] = Int64GetDatum((int64) st->snapshot_rows_estimate);
		}
		else if (f->snapshot_phase != NULL)
		{
			values[20] = CStringGetTextDatum(f->snapshot_phase);
			values[21] = Int32GetDatum(f->snapshot_tables_total);
			values[22] = Int32GetDatum(f->snapshot_tables_copied);
			values[23] = Int64GetDatum(f->snapshot_rows_copied);
			values[24] = Int64GetDatum(f->snapshot_rows_estimate);
		}
		else
		{
			for (int i = 20; i < 25; i++)
				nulls[i] = true;
		}
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Per source table of each sink's snapshot attempt: the catalog's record,
 * with the live row count of the table the worker is copying.
 */
Datum
ash_replicant_stat_snapshot_tables(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext caller = CurrentMemoryContext;
	int			ret;
	bool		with_target;

	InitMaterializedSRF(fcinfo, 0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* the view's target column came with the catalog's (1.4.0) */
	with_target = rsinfo->setDesc->natts >= 8;
	ret = SPI_execute(psprintf("SELECT s.sink_name, t.source_schema, t.source_table, t.state,"
							   "  t.rows_copied, t.rows_estimate, t.copied_at%s"
							   "  FROM ash_replicant.sinks s"
							   "  JOIN ash_replicant.pipelines p USING (sink_name)"
							   "  JOIN ash_replicant.snapshot_tables t"
							   "    ON t.slot_name = s.slot_name"
							   "   AND t.source_system_id = p.source_system_identifier"
							   "   AND t.source_database = p.source_database"
							   " ORDER BY 1, 2, 3", with_target ? ", t.target" : ""),
					  true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: snapshot table query failed");

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext old = MemoryContextSwitchTo(caller);
		Datum		values[8];
		bool		nulls[8] = {false};
		char	   *sink = SPI_getvalue(tup, desc, 1);
		char	   *nsp = SPI_getvalue(tup, desc, 2);
		char	   *rel = SPI_getvalue(tup, desc, 3);
		char	   *state = SPI_getvalue(tup, desc, 4);
		AshPipelineSlot snap;
		bool		isnull;

		values[4] = SPI_getbinval(tup, desc, 5, &isnull);
		values[5] = SPI_getbinval(tup, desc, 6, &nulls[5]);
		values[6] = SPI_getbinval(tup, desc, 7, &nulls[6]);
		if (with_target)
			values[7] = SPI_getbinval(tup, desc, 8, &nulls[7]);
		if (strcmp(state, "pending") == 0 && snapshot_slot(sink, &snap) &&
			snap.state == ASH_SLOT_RUNNING && snap.stats.snapshot_in_flight)
		{
			for (int c = 0; c < ASH_SNAPSHOT_COPIERS_MAX; c++)
			{
				if (strcmp(snap.copiers[c].schema, nsp) == 0 &&
					strcmp(snap.copiers[c].table, rel) == 0)
				{
					state = "copying";
					values[4] = Int64GetDatum((int64) snap.copiers[c].rows);
				}
			}
		}
		values[0] = CStringGetTextDatum(sink);
		values[1] = CStringGetTextDatum(nsp);
		values[2] = CStringGetTextDatum(rel);
		values[3] = CStringGetTextDatum(state);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	return (Datum) 0;
}

/*
 * Wait until the started pipeline holds its replication slot: from then on
 * every source commit is mirrored.  Raises when the pipeline is not
 * started, halts, or does not get there within the timeout.
 */
Datum
ash_replicant_wait_for_slot(PG_FUNCTION_ARGS)
{
	text	   *sink = PG_GETARG_TEXT_PP(0);
	Interval   *timeout = PG_GETARG_INTERVAL_P(1);
	char	   *sink_name = text_to_cstring(sink);
	int64		timeout_ms;
	TimestampTz deadline;

	ash_require_shmem();
	timeout_ms = (int64) (timeout->time / 1000) +
		((int64) timeout->day * 86400 + (int64) timeout->month * 30 * 86400) * 1000;
	if (timeout_ms < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ash_replicant: the timeout must not be negative")));
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	for (;;)
	{
		List	   *facts = read_catalog_facts(sink);
		CatalogFacts *f;
		StatusRow	row;
		AshPipelineSlot snap;

		if (facts == NIL)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_OBJECT),
					 errmsg("ash_replicant: sink \"%s\" does not exist", sink_name)));
		f = linitial(facts);
		derive_status(f, &row);
		if (strcmp(row.state, "halted") == 0 || strcmp(row.state, "misconfigured") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("ash_replicant: pipeline of sink \"%s\" is %s: %s",
							sink_name, row.state, row.reason ? row.reason : "unknown"),
					 errhint("SELECT * FROM ash_replicant_doctor(%s) says more.",
							 quote_literal_cstr(sink_name))));
		if (strcmp(row.state, "not_started") == 0)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("ash_replicant: pipeline of sink \"%s\" is not started", sink_name),
					 row.reason != NULL ?
					 errdetail("Its reason: %s (docs/reasons.md#%s).", row.reason, row.reason) : 0,
					 errhint("Call ash_replicant_start first.")));
		if (snapshot_slot(f->sink_name, &snap) && snap.generation == f->start_generation &&
			snap.state == ASH_SLOT_RUNNING && snap.stats.slot_ready)
			PG_RETURN_VOID();
		/* what it waits for, when status knows (a reason code, no value) */
		if (GetCurrentTimestamp() >= deadline)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("ash_replicant: pipeline of sink \"%s\" did not reach its replication slot within the timeout",
							sink_name),
					 row.reason != NULL ?
					 errdetail("It is %s: %s (docs/reasons.md#%s).", row.state, row.reason, row.reason) : 0,
					 errhint("ash_replicant_status() and the server log (event=source.fault) say why.")));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 100,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}
