/*-------------------------------------------------------------------------
 *
 * snapshot_copier.c
 *	  The helper copiers of a 'v1' snapshot (snapshot => 'v1').
 *
 * NOTES
 *	  The pipeline worker (snapshot.c, "Copiers") starts up to
 *	  ash_replicant.snapshot_workers - 1 of these background workers; each
 *	  imports the attempt's snapshot on a connection of its own and claims
 *	  pending tables one at a time, as the pipeline worker does, with a
 *	  replication origin of its own.  It reports how it ended in shared
 *	  memory, never an error's text.
 *
 *	  The incremental snapshot's helpers (snapshot_incr.c) take and drop
 *	  their origin, and report a failure, the same way.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "errors.h"
#include "origin.h"
#include "shmem.h"
#include "snapshot.h"
#include "snapshot_int.h"
#include "source_catalog.h"
#include "spi_util.h"

/* The helper's sink and number, for copier_exit (its origin's name). */
static char exit_sink_name[ASH_NAME_LEN];
static int	exit_index = 0;

/*
 * A helper stopped with SIGTERM (die) or failing with another FATAL error
 * leaves through proc_exit, past its PG_CATCH: its origin is dropped on
 * the way out, as at its ordinary end.  Nothing when that dropped it.
 */
static void
copier_exit(int code, Datum arg)
{
	if (!ash_origin_attached())
		return;
	AbortOutOfAnyTransaction();
	ash_snap_copier_drop_origin(exit_sink_name, exit_index);
}

/*
 * Set up the copier's origin (origin.c).  false, logged, when every
 * replication state slot of the destination is taken; any other failure
 * raises.
 */
bool
ash_snap_copier_attach_origin(const char *sink_name, int index)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = true;

	PG_TRY();
	{
		ash_origin_attach(sink_name, index);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (edata->sqlerrcode != ERRCODE_CONFIGURATION_LIMIT_EXCEEDED)
			PG_RE_THROW();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(cxt);
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	if (ok)
	{
		strlcpy(exit_sink_name, sink_name, sizeof(exit_sink_name));
		exit_index = index;
		before_shmem_exit(copier_exit, (Datum) 0);
	}
	else
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.copier_no_origin sink=%s copier=%d reason=destination_origin_limit",
						sink_name, index),
				 errhint("Increase max_replication_slots on the destination: each snapshot helper copier holds one replication origin while it copies.")));
	return ok;
}

/*
 * At the copier's end, before it says so in the slot (a helper started
 * next under the same index must find the origin gone, not still held):
 * drop its origin.  Best effort: one left behind is reused by the next
 * copier of that index and dropped with the sink.
 */
void
ash_snap_copier_drop_origin(const char *sink_name, int index)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		ash_origin_release_and_drop(sink_name, index);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = ash_error_abort_transaction(cxt);
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.copier_origin_kept sink=%s copier=%d sqlstate=%s",
						sink_name, index, unpack_sql_state(edata->sqlerrcode))));
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/*
 * The attempt complete (the pipeline worker, outside a transaction): the
 * copier origins of helpers that could not drop their own (killed) go, so
 * that they do not hold replication state slots for good.
 */
void
ash_snap_drop_copier_origins(void)
{
	int			dropped = ash_origin_drop_copiers(ash_snap_cfg->sink_name);

	if (dropped > 0)
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.copier_origins_dropped sink=%s count=%d",
						ash_snap_cfg->sink_name, dropped)));
}

/*
 * A helper copier failed: in its slot, how (never the error's text: it
 * can carry values), its connections closed and its origin dropped.
 */
void
ash_snap_copier_failed(AshPipelineSlot *slot, int index, const char *sink_name)
{
	ErrorData  *edata;
	AshCopier  *me = &slot->copiers[index];

	HOLD_INTERRUPTS();
	MemoryContextSwitchTo(TopMemoryContext);
	edata = CopyErrorData();
	FlushErrorState();
	ash_apply_abort();
	ash_snap_close_connections();
	RESUME_INTERRUPTS();
	ash_snap_copier_drop_origin(sink_name, index);

	/* never the error's text: it can carry values */
	SpinLockAcquire(&slot->mutex);
	me->sqlerrcode = edata->sqlerrcode;
	if (ash_pending_halt != NULL)
	{
		me->end = ASH_COPIER_HALT;
		strlcpy(me->reason, ash_pending_halt, sizeof(me->reason));
		strlcpy(me->context, ash_pending_halt_context, sizeof(me->context));
		strlcpy(me->target, ash_pending_halt_target ? ash_pending_halt_target : "",
				sizeof(me->target));
	}
	else if (edata->sqlerrcode == ERRCODE_CONNECTION_FAILURE ||
			 edata->sqlerrcode == ERRCODE_PROTOCOL_VIOLATION)
	{
		me->end = ASH_COPIER_SOURCE_FAULT;
		strlcpy(me->source_sqlstate, ash_conn_last_sqlstate, sizeof(me->source_sqlstate));
	}
	else
	{
		me->end = ASH_COPIER_APPLY_ERROR;
		strlcpy(me->context, me->table[0] ? quote_qualified_identifier(me->schema, me->table) : "none",
				sizeof(me->context));
	}
	me->schema[0] = me->table[0] = '\0';
	me->rows = 0;
	SpinLockRelease(&slot->mutex);
	ereport(LOG,
			(errmsg("ash_replicant event=snapshot.copier_failed sink=%s copier=%d sqlstate=%s",
					sink_name, index, unpack_sql_state(edata->sqlerrcode))));
}

/*
 * The start of a helper, v1's or incremental's: main_arg is its pipeline's
 * slot, bgw_extra the slot's generation, the helper's copier index and the
 * pipeline worker's pid.  A helper whose pipeline worker is gone (or whose
 * arguments make no sense) exits at once.  Else its pid is published, it is
 * set up as that worker's copier (also for what reports its failure), and
 * the slot, the sink's name and the database to connect to are returned;
 * the caller reads what it needs of the slot before it connects
 * (ash_snap_helper_connect).
 */
AshPipelineSlot *
ash_snap_helper_attach(Datum main_arg, char *sink_name, Oid *dboid)
{
	int			slotno = DatumGetInt32(main_arg);
	int64		generation;
	int32		index;
	pid_t		coordinator;
	AshPipelineSlot *slot;
	bool		ok = false;

	memcpy(&generation, MyBgworkerEntry->bgw_extra, sizeof(int64));
	memcpy(&index, MyBgworkerEntry->bgw_extra + sizeof(int64), sizeof(int32));
	memcpy(&coordinator, MyBgworkerEntry->bgw_extra + sizeof(int64) + sizeof(int32), sizeof(pid_t));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (AshShmem == NULL || slotno < 0 || slotno >= AshShmem->nslots ||
		index < 1 || index >= ASH_SNAPSHOT_COPIERS_MAX)
		proc_exit(0);
	slot = &AshShmem->slots[slotno];
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	if (slot->in_use && slot->generation == generation && slot->pid == coordinator)
	{
		ok = true;
		*dboid = slot->dboid;
		strlcpy(sink_name, slot->sink_name, ASH_NAME_LEN);
	}
	LWLockRelease(AshShmem->lock);
	if (!ok)
		proc_exit(0);			/* the pipeline worker is gone */

	SpinLockAcquire(&slot->mutex);
	slot->copiers[index].pid = MyProcPid;
	SpinLockRelease(&slot->mutex);
	ash_snap_slot = slot;
	ash_snap_my_copier = index;
	ash_snap_helper_generation = generation;
	ash_snap_helper_coordinator = coordinator;
	return slot;
}

/* A helper that ends without a failure says so. */
void
ash_snap_helper_done(AshPipelineSlot *slot, int index)
{
	SpinLockAcquire(&slot->mutex);
	slot->copiers[index].end = ASH_COPIER_DONE;
	SpinLockRelease(&slot->mutex);
}

/* Connect a helper to its pipeline's database. */
void
ash_snap_helper_connect(Oid dboid, const char *sink_name)
{
	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);
	ash_worker_session_settings();
	pgstat_report_appname(psprintf("ash_replicant snapshot %s", sink_name));
}

/* A helper's configuration and checkpoint key, kept for its session. */
AshCheckpointKey *
ash_snap_helper_load(const char *sink_name)
{
	MemoryContext old;
	AshCheckpointKey *key;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	old = MemoryContextSwitchTo(TopMemoryContext);
	ash_snap_cfg = ash_config_load(sink_name);
	MemoryContextSwitchTo(old);
	CommitTransactionCommand();
	key = MemoryContextAlloc(TopMemoryContext, sizeof(AshCheckpointKey));
	key->system_id = MemoryContextStrdup(TopMemoryContext, ash_snap_cfg->source_system_identifier);
	key->database = MemoryContextStrdup(TopMemoryContext, ash_snap_cfg->source_database);
	key->slot_name = MemoryContextStrdup(TopMemoryContext, ash_snap_cfg->slot_name);
	ash_snap_key = key;
	return key;
}

/*
 * A helper copier (a background worker started by the pipeline worker):
 * copy pending tables of the attempt under the pipeline's snapshot until
 * none is left, then report how it ended.
 */
void
ash_snapshot_copier_main(Datum main_arg)
{
	Oid			dboid = InvalidOid;
	char		sink_name[ASH_NAME_LEN];
	char		snapshot[64];
	XLogRecPtr	snapshot_lsn;
	AshPipelineSlot *slot = ash_snap_helper_attach(main_arg, sink_name, &dboid);
	int			index = ash_snap_my_copier;

	SpinLockAcquire(&slot->mutex);
	strlcpy(snapshot, slot->snapshot_name, sizeof(snapshot));
	snapshot_lsn = slot->snapshot_lsn;
	SpinLockRelease(&slot->mutex);
	ash_snap_helper_connect(dboid, sink_name);

	PG_TRY();
	{
		AshPipelineConfig *cfg;
		AshCheckpointKey *key;
		bytea	   *attempt;

		key = ash_snap_helper_load(sink_name);
		cfg = ash_snap_cfg;
		Assert(!ash_config_is_append_log(cfg));

		/*
		 * Its copies are mirrored writes too: tagged with an origin of its
		 * own.  Without a free replication state slot it does not help: the
		 * other copiers (the pipeline worker at least) copy its share.
		 */
		if (!ash_snap_copier_attach_origin(sink_name, index))
		{
			ash_snap_helper_done(slot, index);
			proc_exit(0);
		}
		ash_apply_init(cfg, key, InvalidXLogRecPtr, InvalidXLogRecPtr);
		ash_snap_data_conn = ash_conn_open(cfg->connection, ASH_CONN_DATA, "ash_replicant snapshot");
		if (!ash_source_identity_matches(ash_snap_data_conn, cfg->source_system_identifier,
										 cfg->source_database))
			ash_halt("source_identity_mismatch", "the snapshot connection reached another source");
		ash_snap_import_snapshot(ash_snap_data_conn, snapshot);
		ash_spi_transaction_begin();
		attempt = ash_snap_read_attempt()->id;
		ash_spi_transaction_end();

		do
			ash_snap_check_coordinator();
		while (ash_snap_copy_next(ash_snap_data_conn, snapshot_lsn, attempt));
		PQclear(ash_conn_exec(ash_snap_data_conn, "COMMIT", false));
		ash_snap_close_connections();
		ash_snap_copier_drop_origin(sink_name, index);
		ash_snap_helper_done(slot, index);
	}
	PG_CATCH();
	{
		ash_snap_copier_failed(slot, index, sink_name);
	}
	PG_END_TRY();
	proc_exit(0);
}
