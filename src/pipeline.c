/*-------------------------------------------------------------------------
 *
 * pipeline.c
 *	  The pipeline background worker: one per running sink.
 *
 * NOTES
 *	  Life of a worker (started by the launcher for one start generation):
 *
 *	  attach to its shared-memory slot -> connect to the destination
 *	  database -> read the configuration -> sessions until a halt or a stop.
 *
 *	  A session: connect to the source (replication=database) ->
 *	  IDENTIFY_SYSTEM and verify the source identity -> judge source
 *	  coverage on a read-only probe connection, identity verified there too
 *	  (census.c; a source the probe cannot reach fails the session like any
 *	  source fault, so nothing is bound or applied before the verdict) ->
 *	  bind the checkpoint (checkpoint.c) -> check or create the slot -> START_REPLICATION from
 *	  the end of the last applied commit -> receive loop.
 *
 *	  The receive loop drains every message already received, applying each
 *	  (apply.c).  After a source COMMIT the open batch is committed when it is
 *	  full or when no further message is already here.  Feedback reports as
 *	  flushed only remote end LSNs whose local commit record is flushed
 *	  (synchronous_commit is off for apply, as in core); with nothing in
 *	  flight the keepalive position is acknowledged so quiet publications do
 *	  not pin WAL, once it is recorded on the checkpoint (acknowledged_lsn):
 *	  the slot never gets past what this database remembers, which the next
 *	  activation checks (checkpoint_behind_slot).  A receive timeout, with a
 *	  keepalive request at half of it, detects a silent source.
 *
 *	  Errors are classified at the session boundary:
 *	  - a halt (ash_halt): tombstone + clean exit; not restarted until the
 *		operator starts the pipeline again;
 *	  - a source/transport fault: reconnect with capped exponential
 *		back-off and resume from the durable watermark;
 *	  - a destination apply error: roll back, retry from the watermark up to
 *		max_command_retries times, then halt apply_failed; an error of a
 *		transient class (apply_error_transient) is retried with back-off
 *		for as long as it lasts, as a source fault is.
 *	  The error text is never logged: it can carry row values (constraint
 *	  DETAIL, input syntax errors).  Only SQLSTATE, command, relation and
 *	  LSN are.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "replication/syncrep.h"
#include "replication/walsender_private.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "catalog/namespace.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "apply.h"
#include "apply_append.h"
#include "ash_replicant.h"
#include "census.h"
#include "publication_record.h"
#include "relmap.h"
#include "checkpoint.h"
#include "decode_pgoutput.h"
#include "decode_wal2json.h"
#include "decoder.h"
#include "errors.h"
#include "incremental.h"
#include "keyring.h"
#include "libpq_conn.h"
#include "messages.h"
#include "origin.h"
#include "pipeline.h"
#include "pipeline_pglogical.h"
#include "shmem.h"
#include "snapshot.h"
#include "source_columns.h"
#include "source_slot.h"
#include "spi_util.h"
#include "syncrep.h"
#include "walproto.h"

/* Where a session is, to classify source errors. */
typedef enum SessionStep
{
	STEP_CONNECT,
	STEP_IDENTIFY,
	STEP_COVERAGE,
	STEP_BIND,
	STEP_SLOT,
	STEP_SNAPSHOT,
	STEP_START,
	STEP_STREAM
} SessionStep;

static const char *const step_names[] = {
	"connect", "identify", "coverage", "bind", "slot", "snapshot", "start", "stream"
};

typedef struct FlushPosition
{
	dlist_node	node;
	XLogRecPtr	local_end;
	XLogRecPtr	remote_end;
} FlushPosition;

static AshPipelineSlot *MySlot = NULL;
static int64 my_generation;
static AshPipelineConfig *cfg = NULL;
static MemoryContext pipeline_cxt = NULL;
static MemoryContext session_cxt = NULL;

static AshStream stream;
static bool stream_open = false;
static SessionStep step;
static AshCheckpointKey *ckey = NULL;

static dlist_head flush_positions = DLIST_STATIC_INIT(flush_positions);
static XLogRecPtr flushed_remote = InvalidXLogRecPtr;
static XLogRecPtr idle_lsn = InvalidXLogRecPtr;

/*
 * Received and not applied yet: the source commit time of the first
 * transaction since the last batch commit (0: none); and the commit LSN of
 * the last transaction begun, received as far as status is concerned.
 */
static TimestampTz open_since = 0;
static XLogRecPtr begun_lsn = InvalidXLogRecPtr;

/*
 * Where what is received ends, for status (lag_bytes): a transaction begun
 * ends past its commit record's start, which may be right where the
 * acknowledged position is.
 */
#define RECEIVED_END(write) \
	(XLogRecPtrIsInvalid(begun_lsn) ? (write) : Max((write), begun_lsn + 1))

/*
 * How far an acknowledgement may go without a new record: the checkpoint's
 * end_lsn and acknowledged_lsn (checkpoint.h).  A keepalive's position past
 * it (nothing to apply) is recorded before it is acknowledged -- at once
 * when the source waits for us, else at most every IDLE_RECORD_MS -- so a
 * slot never gets past what this database remembers.
 */
static XLogRecPtr ack_recorded = InvalidXLogRecPtr;
/* where our record of it ends in our WAL: told once durable (0: before) */
static XLogRecPtr ack_recorded_local = InvalidXLogRecPtr;
static TimestampTz last_idle_record = 0;
#define IDLE_RECORD_MS 1000
/*
 * After a streaming fallback, streaming stays off until the watermark passes
 * what the fallback had received and the retry delay has passed since it
 * (ash_replicant.streaming_retry_delay, doubled per further fallback in a
 * row, reset by a streamed commit); an idle session then reconnects to
 * stream again.
 */
static XLogRecPtr stream_fallback_lsn = InvalidXLogRecPtr;
static TimestampTz stream_fallback_at = 0;
static int	stream_fallbacks = 0;	/* in a row, without a streamed commit */
static bool session_streams = false;	/* this session requested streaming */

/* An incremental snapshot copies between the stream's transactions. */
static bool incremental_session = false;
static long incr_wait_ms = -1;	/* how long the loop may wait now; -1: no bound */
static TimestampTz incr_last_ping = 0;
static bool incr_ping_sent = false;	/* no keepalive since it */

#define STREAM_RETRY_MAX_MS (3600 * 1000)

/* The retry delay after the latest fallback (the setting may change). */
static int
stream_retry_ms(void)
{
	int64		ms = ash_streaming_retry_ms;

	for (int i = 1; i < stream_fallbacks && ms < STREAM_RETRY_MAX_MS; i++)
		ms *= 2;
	return (int) Min(ms, STREAM_RETRY_MAX_MS);
}

static int	apply_failures = 0;
static int	transient_failures = 0;	/* in a row, since the last commit */

/*
 * A transient destination error (apply_error_transient) is retried for as
 * long as it lasts.  From TRANSIENT_FAILURES_SAID in a row the status says so
 * (catching_up, destination_apply_retrying): between two attempts the
 * session streams and would read healthy while nothing is applied.  The next
 * commit clears it.
 */
#define TRANSIENT_FAILURES_SAID 3
static int	slot_busy_failures = 0;
static bool slot_holder_stale = false;	/* the last refusal: our own session */
static int	census_faults = 0;
/* the census ended the session so that the next one copies a table again */
static bool session_recopy = false;
static TimestampTz next_census = 0;
static long backoff = 0;

/*
 * Crash-loop guard.  An error is caught: retried, or a halt.  A crash -- the
 * worker process dying abnormally: a bug here or in what a target runs (a
 * trigger's C function), the kernel's OOM killer -- takes the whole server
 * through a crash restart, and the launcher would start the worker into the
 * same crash for ever.  Only such a death of the worker itself counts, and
 * only at a change:
 *
 * - The postmaster tells whether the worker died by itself (shmem.c
 *	 carries that across the crash restart) and which transaction it was
 *	 applying (applying_lsn, set in the slot at every BEGIN: healthy
 *	 streaming pays a store per transaction and nothing durable).  Source
 *	 and network faults are errors; a stop, a restart of the server, or a
 *	 crash of another process (the worker is told to quit) are not the
 *	 worker's death and never count.
 * - A death while applying the transaction that commits at L records L in
 *	 pipelines.crash_lsn and counts it in start_attempts: deaths in a row at
 *	 the same L.  MAX_CRASHES_AT_CHANGE of them halt apply_crash_loop with
 *	 halt_lsn L: a poisoned change.  A death at another L counts from one
 *	 again; the watermark passing L clears both (the change applied).
 * - Until the watermark passes L the worker applies carefully: one source
 *	 transaction per destination transaction and no streaming, so a death
 *	 at a batch's commit is charged to one commit LSN.  A death inside a
 *	 streamed transaction (its commit LSN is not known yet) counts nothing
 *	 but makes the next worker careful until that transaction arrives whole
 *	 (or the worker ends), so a second death there has its LSN.
 * - A death elsewhere (idle, copying a snapshot) counts nothing.  From the
 *	 second death in a row on, the next worker's first session waits:
 *	 reconnect_min_delay, doubling per further death, capped at
 *	 reconnect_max_delay; the streak ends once a session proves itself: the
 *	 watermark moved past where it started, or it streamed for
 *	 STABLE_AFTER_MS.  Everything else is retried for ever.
 */
#define MAX_CRASHES_AT_CHANGE 3
#define STABLE_AFTER_MS 60000

/*
 * A source that ends the stream with an error again and again, each time
 * before the session proved itself (as above), or a snapshot's reads each
 * time before another table or row of the copy committed
 * (snapshot_copied_at_fault), fails on something waiting
 * may or may not heal (a source error this worker does not know to be
 * final).  From STREAM_FAULTS_SAID such faults in a row the status says so
 * (catching_up, source_stream_failing) instead of healthy between two
 * attempts, and the reconnections back off as the connection's do; a
 * session that proves itself clears both.
 */
#define STREAM_FAULTS_SAID 3
static int	stream_faults = 0;
static uint64 snapshot_copied_at_fault = 0;
static AshCrashRecord last_crash;	/* how the previous worker died */
static bool crashed_before = false; /* ... if it died by itself */
static bool guard_started = false;	/* guard_start ran in this worker */
static bool streak_open = false;	/* a death streak to reset once proven */
static XLogRecPtr careful_lsn = InvalidXLogRecPtr;	/* careful until passed */
static TransactionId careful_xid = InvalidTransactionId;	/* ... until whole */
static bool crash_lsn_recorded = false; /* pipelines.crash_lsn = careful_lsn */
static int	saved_batch_max = 0;	/* batch size while careful, or 0 */
static bool streams_withheld = false;	/* careful: this session does not stream */
static XLogRecPtr session_start_watermark = InvalidXLogRecPtr;
static TimestampTz session_streaming_at = 0;
static XLogRecPtr halt_at_lsn = InvalidXLogRecPtr;	/* for the halt record */

/* Is the installed extension the version this library was built for? */
static bool catalogs_current = true;

static bool
extension_version_current(void)
{
	bool		current;
	bool		isnull;

	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'ash_replicant'",
					true, 1) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: could not read the extension version");
	current = SPI_processed == 1 &&
		strcmp(TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
												 1, &isnull)),
			   ASH_EXTENSION_VERSION) == 0;
	SPI_finish();
	PopActiveSnapshot();
	return current;
}

/* ---------------------------------------------------------------------
 * Slot attachment.
 * ---------------------------------------------------------------------
 */
static void
pipeline_detach(int code, Datum arg)
{
	if (MySlot == NULL || AshShmem == NULL)
		return;
	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	if (MySlot->generation == my_generation && MySlot->pid == MyProcPid)
	{
		MySlot->pid = 0;
		MySlot->state = ASH_SLOT_EXITED;
		SpinLockAcquire(&MySlot->mutex);
		MySlot->stats.streaming = false;
		SpinLockRelease(&MySlot->mutex);
	}
	LWLockRelease(AshShmem->lock);
}

static bool
attach_slot(int slotno)
{
	AshPipelineSlot *slot;

	if (AshShmem == NULL || slotno < 0 || slotno >= AshShmem->nslots)
		return false;
	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	slot = &AshShmem->slots[slotno];
	if (!slot->in_use || slot->generation != my_generation ||
		slot->state != ASH_SLOT_STARTING || slot->stop_requested)
	{
		LWLockRelease(AshShmem->lock);
		return false;
	}
	slot->pid = MyProcPid;
	slot->state = ASH_SLOT_RUNNING;
	slot->exit_clean = false;
	MySlot = slot;
	LWLockRelease(AshShmem->lock);
	before_shmem_exit(pipeline_detach, (Datum) 0);
	before_shmem_exit(ash_snapshot_helpers_exit, (Datum) 0);
	return true;
}

static void
leave_cleanly(void)
{
	if (MySlot)
	{
		LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
		MySlot->exit_clean = true;
		LWLockRelease(AshShmem->lock);
	}
	proc_exit(0);
}

/*
 * The resource the worker waits for (a reason code of class waiting), or
 * NULL once it has it: status shows it with catching_up.
 */
static void
set_wait_reason(const char *reason)
{
	SpinLockAcquire(&MySlot->mutex);
	strlcpy(MySlot->stats.wait_reason, reason ? reason : "", ASH_REASON_LEN);
	SpinLockRelease(&MySlot->mutex);
}

/* the reason status gives for failures in a row, or NULL */
static const char *
retry_reason(void)
{
	if (stream_faults >= STREAM_FAULTS_SAID)
		return "source_stream_failing";
	if (transient_failures >= TRANSIENT_FAILURES_SAID)
		return "destination_apply_retrying";
	return NULL;
}

/*
 * Does a helper copier of an earlier run of the sink (stopped, started
 * again at once) still hold its origin?  It exits on its own time, holding
 * its claim on a table of the attempt too: a helper of ours under its
 * number could not set its origin up, and the attempt could not complete.
 */
static bool
earlier_helpers_held(void)
{
	bool		held;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	held = ash_origin_held(cfg->sink_name, 1);
	CommitTransactionCommand();
	return held;
}

/*
 * Tag every write of this worker with the sink's replication origin
 * (origin.c).  A destination whose replication state slots are all taken
 * (max_replication_slots, shared with native subscriptions) is waited for
 * with back-off and the status reason destination_origin_limit; any other
 * failure (the origin still held by an exiting worker of the sink) is
 * retried the same way, and so is a helper copier of an earlier run still
 * holding its own (55006 too): waited for before anything is copied.
 */
/*
 * A reload (SIGHUP) pending takes effect now.  The receive loop looks at
 * every turn; a worker backing off looks before it reckons the next wait,
 * or a lowered reconnect_max_delay would wait out the old one (the reload
 * wakes it for one early retry, and the next fault's wait was reckoned
 * with the settings it had).
 */
static void
absorb_reload(void)
{
	if (!ConfigReloadPending)
		return;
	ConfigReloadPending = false;
	ProcessConfigFile(PGC_SIGHUP);
}

/* A back-off in the current bounds (a reload may have moved them). */
static long
backoff_bounded(long backoff)
{
	return Max(Min(backoff, ash_reconnect_max_ms), ash_reconnect_min_ms);
}

static void
attach_origin(void)
{
	volatile long delay = ash_reconnect_min_ms;

	for (;;)
	{
		MemoryContext cxt = CurrentMemoryContext;
		volatile int code = 0;

		PG_TRY();
		{
			if (earlier_helpers_held())
				code = ERRCODE_OBJECT_IN_USE;
			else
				ash_origin_attach(cfg->sink_name, 0);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			edata = ash_error_abort_transaction(cxt);
			code = edata->sqlerrcode;
			FreeErrorData(edata);
		}
		PG_END_TRY();
		if (code == 0)
		{
			set_wait_reason(NULL);
			return;
		}
		if (code == ERRCODE_CONFIGURATION_LIMIT_EXCEEDED)
			set_wait_reason("destination_origin_limit");
		absorb_reload();
		delay = backoff_bounded(delay);
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.origin_unavailable sink=%s sqlstate=%s retry_in_ms=%ld",
						cfg->sink_name, unpack_sql_state(code), delay),
				 code == ERRCODE_CONFIGURATION_LIMIT_EXCEEDED ?
				 errhint("Increase max_replication_slots on the destination: each sink that has run holds one replication origin until it is dropped.") : 0));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 delay, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		delay = Min(delay * 2, ash_reconnect_max_ms);
	}
}

/* ---------------------------------------------------------------------
 * Halts.
 * ---------------------------------------------------------------------
 */
/*
 * Where the error being handled happened (ash_apply_error_location, taken
 * before the apply state is rolled back): the halt records it.
 */
static XLogRecPtr error_lsn = InvalidXLogRecPtr;
static char *error_target = NULL;
static bool error_in_stream = false;	/* in a streamed transaction */

/* a target whose lock was waited for when the error struck (errors.h) */
static char opening_target[4 * NAMEDATALEN + 8];

/* the table a constraint's error names (ErrorData), resolved after it */
static char error_schema[NAMEDATALEN];
static char error_table[NAMEDATALEN];

static void
note_error_location(ErrorData *edata)
{
	XLogRecPtr	lsn;
	const char *target;

	error_schema[0] = error_table[0] = '\0';
	if (edata->schema_name != NULL && edata->table_name != NULL)
	{
		strlcpy(error_schema, edata->schema_name, sizeof(error_schema));
		strlcpy(error_table, edata->table_name, sizeof(error_table));
	}

	if (ash_opening_target != NULL)
	{
		strlcpy(opening_target, ash_opening_target, sizeof(opening_target));
		ash_apply_errctx.relation = opening_target;
		ash_opening_target = NULL;
	}
	if (error_target)
		pfree(error_target);
	error_target = NULL;
	error_lsn = InvalidXLogRecPtr;
	error_in_stream = ash_apply_in_streamed_xact();
	if (ash_apply_error_location(&lsn, &target))
	{
		error_lsn = lsn;
		if (target)
			error_target = MemoryContextStrdup(pipeline_cxt, target);
	}

	/*
	 * A halt that names its table (ash_halt_on) names the mapping's target
	 * even where apply holds none (a check while a snapshot arms), and in
	 * its place where apply's is a tenant's table under context tenancy.
	 */
	if (ash_pending_halt != NULL && ash_pending_halt_target != NULL)
	{
		if (error_target)
			pfree(error_target);
		error_target = MemoryContextStrdup(pipeline_cxt, ash_pending_halt_target);
	}
}

/*
 * An error raised at the commit (a deferred unique, exclusion or foreign
 * key constraint) comes with no change in hand; the table its error
 * names, when it is a target of this sink, is where it struck: the
 * apply.error lines and the halt name it (test 210).  Looked up in a
 * transaction of its own, the failed one being gone.  A tenant's table of
 * context tenancy is no mapping's target (its schema may carry the tenant):
 * never named.
 */
static void
locate_constraint_error(void)
{
	Oid			relid;
	ListCell   *lc;

	if (error_target != NULL || error_table[0] == '\0' || IsTransactionOrTransactionBlock())
		return;
	StartTransactionCommand();
	relid = get_relname_relid(error_table, get_namespace_oid(error_schema, true));
	foreach(lc, cfg->mappings)
	{
		AshMapping *m = lfirst(lc);

		if (OidIsValid(relid) && m->target_relid == relid)
		{
			error_target = MemoryContextStrdup(pipeline_cxt,
											   quote_qualified_identifier(error_schema, error_table));
			break;
		}
	}
	CommitTransactionCommand();
	if (error_target != NULL && ash_apply_errctx.relation == NULL)
		ash_apply_errctx.relation = error_target;
}

static void
do_halt_detail(const char *reason, const char *sqlstate, const char *detail)
{
	AshReasonClass rc = ash_reason_class(reason);
	const char *cls = (rc == ASH_REASON_MISCONFIGURED) ? "misconfigured" : "halted";
	AshHaltRecord h;

	/* a halt of the crash-loop guard stopped at the change it names */
	if (!XLogRecPtrIsInvalid(halt_at_lsn))
		error_lsn = halt_at_lsn;

	/* detail is an ash_halt message: structural by construction */
	ereport(LOG,
			(errmsg("ash_replicant event=pipeline.halt sink=%s reason=%s class=%s%s%s%s%s%s%s%s",
					cfg->sink_name, reason, cls,
					sqlstate ? " sqlstate=" : "", sqlstate ? sqlstate : "",
					error_target ? " table=" : "", error_target ? error_target : "",
					detail ? " context=\"" : "", detail ? detail : "", detail ? "\"" : ""),
			 !XLogRecPtrIsInvalid(error_lsn) ?
			 errdetail_internal("commit_lsn=%X/%X", LSN_FORMAT_ARGS(error_lsn)) : 0));

	/* in-memory leg first: it survives a failed catalog write */
	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	strlcpy(MySlot->halt_reason, reason, ASH_REASON_LEN);
	strlcpy(MySlot->halt_class, cls, sizeof(MySlot->halt_class));
	strlcpy(MySlot->halt_sqlstate, sqlstate ? sqlstate : "", sizeof(MySlot->halt_sqlstate));
	MySlot->halt_lsn = error_lsn;
	strlcpy(MySlot->halt_target, error_target ? error_target : "", ASH_HALT_TARGET_LEN);
	MySlot->halt_generation = my_generation;
	MySlot->halted_at = GetCurrentTimestamp();
	LWLockRelease(AshShmem->lock);

	h.reason = reason;
	h.cls = cls;
	h.sqlstate = sqlstate;
	h.lsn = error_lsn;
	h.target = error_target;
	h.located = catalogs_current;	/* 1.2.0's columns exist */
	(void) ash_checkpoint_record_halt(cfg->sink_name, my_generation, ckey, &h);
	if (stream_open)
		ash_stream_close(&stream);
	stream_open = false;
	leave_cleanly();
}

static void
do_halt(const char *reason, const char *sqlstate)
{
	do_halt_detail(reason, sqlstate, NULL);
}

/* ---------------------------------------------------------------------
 * Crash-loop guard (see above).
 * ---------------------------------------------------------------------
 */

/*
 * Did the previous worker of this sink die by itself?  Read once, before
 * anything else: the record is the postmaster's, kept across the crash
 * restart, and read by one worker only.
 */
static void
guard_take_crash(void)
{
	AshCrashRecord *rec;

	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	rec = ash_crash_find(MySlot->dboid, MySlot->sink_name);
	if (rec != NULL && rec->generation != my_generation)
	{
		/* the operator started the pipeline again since: a fresh start */
		memset(rec, 0, sizeof(*rec));
		rec = NULL;
	}
	if (rec != NULL && rec->pending)
	{
		last_crash = *rec;
		crashed_before = true;
		rec->pending = false;
	}
	streak_open = rec != NULL && rec->streak > 0;
	LWLockRelease(AshShmem->lock);
}

/* Before the first session after a death: back off, doubling per death. */
static void
guard_back_off(void)
{
	long		delay = 0;

	if (!crashed_before)
		return;
	if (last_crash.streak > 1)
	{
		delay = ash_reconnect_min_ms;
		for (int i = 2; i < last_crash.streak && delay < ash_reconnect_max_ms; i++)
			delay *= 2;
		delay = Min(delay, ash_reconnect_max_ms);
	}
	if (!XLogRecPtrIsInvalid(last_crash.applying_lsn))
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.worker_crashed sink=%s commit_lsn=%X/%X in_a_row=%d retry_in_ms=%ld",
						cfg->sink_name, LSN_FORMAT_ARGS(last_crash.applying_lsn),
						last_crash.streak, delay)));
	else
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.worker_crashed sink=%s commit_lsn=%s in_a_row=%d retry_in_ms=%ld",
						cfg->sink_name,
						TransactionIdIsValid(last_crash.applying_xid) ? "streamed" : "none",
						last_crash.streak, delay)));
	/* the whole delay: a latch set for another reason does not end it */
	if (delay > 0)
	{
		TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), delay);
		long		left;

		while ((left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), until)) > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 left, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
}

/*
 * pipelines.crash_lsn and start_attempts of this start generation: read
 * them (write false), or set them.  Their own transaction.
 */
static void
guard_catalog(bool write, XLogRecPtr *crash_lsn, int *crashes)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[4] = {TEXTOID, INT8OID, LSNOID, INT4OID};
	Datum		values[4];
	char		nulls[4] = {' ', ' ', ' ', ' '};
	bool		isnull;
	int			ret;

	values[0] = CStringGetTextDatum(cfg->sink_name);
	values[1] = Int64GetDatum(my_generation);
	values[2] = LSNGetDatum(*crash_lsn);
	if (XLogRecPtrIsInvalid(*crash_lsn))
		nulls[2] = 'n';
	values[3] = Int32GetDatum(*crashes);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (write)
		ret = SPI_execute_with_args(
			"UPDATE ash_replicant.pipelines SET crash_lsn = $3, start_attempts = $4"
			" WHERE sink_name = $1 AND start_generation = $2",
			4, types, values, nulls, false, 0);
	else
		ret = SPI_execute_with_args(
			"SELECT crash_lsn, start_attempts FROM ash_replicant.pipelines"
			" WHERE sink_name = $1 AND start_generation = $2",
			2, types, values, nulls, true, 1);
	if (ret != (write ? SPI_OK_UPDATE : SPI_OK_SELECT))
		elog(ERROR, "ash_replicant: crash-loop guard catalog access failed");
	if (!write)
	{
		*crash_lsn = InvalidXLogRecPtr;
		*crashes = 0;
		if (SPI_processed == 1)
		{
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);

			if (!isnull)
				*crash_lsn = DatumGetLSN(d);
			*crashes = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0],
												   SPI_tuptable->tupdesc, 2, &isnull));
		}
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}

static bool
guard_careful(void)
{
	return !XLogRecPtrIsInvalid(careful_lsn) || TransactionIdIsValid(careful_xid);
}

/*
 * Careful apply: one source transaction per destination transaction (the
 * driver reads the configuration it was given), and no streaming
 * (plugin_options).
 */
static void
guard_set_careful(bool on)
{
	if (on && saved_batch_max == 0)
	{
		saved_batch_max = cfg->batch_max_transactions;
		cfg->batch_max_transactions = 1;
	}
	else if (!on && saved_batch_max != 0)
	{
		cfg->batch_max_transactions = saved_batch_max;
		saved_batch_max = 0;
	}
}

/*
 * The first session of this worker, bound to its checkpoint: count a death
 * of the previous worker at a change not applied yet, halt when it is the
 * MAX_CRASHES_AT_CHANGE-th in a row there, and go careful until that
 * change is applied.
 */
static void
guard_start(XLogRecPtr watermark)
{
	XLogRecPtr	crash_lsn = InvalidXLogRecPtr;
	int			crashes = 0;

	session_start_watermark = watermark;
	guard_catalog(false, &crash_lsn, &crashes);

	if (crashed_before && !XLogRecPtrIsInvalid(last_crash.applying_lsn) &&
		last_crash.applying_lsn > watermark)
	{
		XLogRecPtr	at = last_crash.applying_lsn;

		/* ash_replicant_start zeroes the count: a fresh one then */
		crashes = (crash_lsn == at && crashes > 0) ? crashes + 1 : 1;
		crash_lsn = at;
		guard_catalog(true, &crash_lsn, &crashes);
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.crash_at_change sink=%s commit_lsn=%X/%X crashes=%d/%d",
						cfg->sink_name, LSN_FORMAT_ARGS(at), crashes, MAX_CRASHES_AT_CHANGE)));
		if (crashes >= MAX_CRASHES_AT_CHANGE)
		{
			halt_at_lsn = at;
			ash_halt("apply_crash_loop",
					 "the worker died %d times in a row applying the source transaction that commits at %X/%X",
					 crashes, LSN_FORMAT_ARGS(at));
		}
	}
	else if (crashed_before && TransactionIdIsValid(last_crash.applying_xid))
	{
		careful_xid = last_crash.applying_xid;
		/* rolled back, it never arrives: the census asks (below) */
		ash_census_watch_xact(careful_xid);
	}

	if (!XLogRecPtrIsInvalid(crash_lsn) && crashes > 0 && crash_lsn > watermark)
	{
		careful_lsn = crash_lsn;
		crash_lsn_recorded = true;
	}
	else if (!XLogRecPtrIsInvalid(crash_lsn) || crashes != 0)
	{
		/* applied since, or the count was zeroed by a start: forget it */
		crash_lsn = InvalidXLogRecPtr;
		crashes = 0;
		guard_catalog(true, &crash_lsn, &crashes);
	}
	if (!XLogRecPtrIsInvalid(careful_lsn))
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.careful sink=%s until_lsn=%X/%X",
						cfg->sink_name, LSN_FORMAT_ARGS(careful_lsn))));
	else if (TransactionIdIsValid(careful_xid))
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.careful sink=%s until_xid=%u",
						cfg->sink_name, careful_xid)));
	guard_set_careful(guard_careful());
	/* done: a failure before here (a catalog error) is retried next session */
	guard_started = true;
}

/* What the worker is applying, for the postmaster should it die now. */
static void
guard_note_change(AshChange *c)
{
	switch (c->kind)
	{
		case ASH_CHANGE_BEGIN:
			MySlot->applying_lsn = c->u.begin.final_lsn;
			if (TransactionIdIsValid(careful_xid) && c->u.begin.xid == careful_xid)
			{
				/* the streamed transaction arrives whole: careful through it */
				careful_lsn = Max(careful_lsn, c->u.begin.final_lsn);
				careful_xid = InvalidTransactionId;
				ash_census_watch_xact(InvalidTransactionId);
			}
			break;
		case ASH_CHANGE_STREAM_START:
			MySlot->applying_xid = c->u.stream_start.xid;
			break;
		case ASH_CHANGE_STREAM_COMMIT:
			MySlot->applying_lsn = c->u.stream_commit.commit_lsn;
			break;
		case ASH_CHANGE_STREAM_ABORT:
			if (c->u.stream_abort.subxid == c->u.stream_abort.xid)
				MySlot->applying_xid = InvalidTransactionId;
			break;
		case ASH_CHANGE_MESSAGE:
			if (!c->u.message.transactional)
				MySlot->applying_lsn = c->u.message.lsn;
			break;
		default:
			break;
	}
}

/* Nothing in apply: a batch committed, or a session ended. */
static void
guard_applied(void)
{
	MySlot->applying_lsn = InvalidXLogRecPtr;
	MySlot->applying_xid = InvalidTransactionId;
}

/*
 * Between batches: the change a death was charged to is applied (clear
 * the record, stop being careful); the session proved itself (reset the
 * death streak and the stream faults in a row).
 */
static void
guard_progress(void)
{
	XLogRecPtr	wm;
	bool		said;

	if (!guard_started || ash_apply_in_remote_xact() || ash_apply_batch_pending())
		return;
	wm = ash_apply_watermark();
	if (!XLogRecPtrIsInvalid(careful_lsn) && wm >= careful_lsn)
	{
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.crash_passed sink=%s commit_lsn=%X/%X",
						cfg->sink_name, LSN_FORMAT_ARGS(careful_lsn))));
		if (crash_lsn_recorded)
		{
			XLogRecPtr	none = InvalidXLogRecPtr;
			int			zero = 0;

			guard_catalog(true, &none, &zero);
			crash_lsn_recorded = false;
		}
		careful_lsn = InvalidXLogRecPtr;
		guard_set_careful(guard_careful());
	}
	if (!streak_open && stream_faults == 0)
		return;
	/* has the session proved itself? */
	if (wm <= session_start_watermark &&
		(session_streaming_at == 0 ||
		 !TimestampDifferenceExceeds(session_streaming_at, GetCurrentTimestamp(), STABLE_AFTER_MS)))
		return;
	said = stream_faults >= STREAM_FAULTS_SAID;
	stream_faults = 0;
	if (said)
		set_wait_reason(retry_reason());
	if (streak_open)
	{
		AshCrashRecord *rec;

		LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
		rec = ash_crash_find(MySlot->dboid, MySlot->sink_name);
		if (rec != NULL && rec->generation == my_generation)
			rec->streak = 0;
		LWLockRelease(AshShmem->lock);
		streak_open = false;
	}
}

/* ---------------------------------------------------------------------
 * Feedback.
 * ---------------------------------------------------------------------
 */
static void
record_flush_position(AshBatchResult *r)
{
	FlushPosition *fp = MemoryContextAlloc(pipeline_cxt, sizeof(FlushPosition));

	fp->local_end = r->local_end;
	fp->remote_end = r->remote_end;
	dlist_push_tail(&flush_positions, &fp->node);
}

#define FEEDBACK_WRITE_MS 100

/* Whether a keepalive's position may be acknowledged: nothing in flight. */
static bool
idle_ackable(void)
{
	return dlist_is_empty(&flush_positions) && !ash_apply_in_remote_xact() &&
		!ash_apply_batch_pending();
}

/*
 * A deferred acknowledgement and what followed it, as evidence that the
 * source waits for us after all (syncrep.c): BEGINs received, those at
 * the deferral, and when the deferred acknowledgement went out across a
 * silent stream (0: none pending).
 */
static uint64 begins_received = 0;
static bool ack_deferred = false;
static uint64 ack_deferred_begins = 0;
static TimestampTz reply_probe_at = 0;
static void deferred_ack_sent(void);

/*
 * How far our commits are durable: flushed here and, where the destination
 * has synchronous standbys (synchronous_standby_names), flushed by them as
 * well -- a standby promoted after a failover then holds everything the
 * source was told, and may forget (docs/operations.md, Moving a
 * destination).  Our commits do not wait for the standbys (they are
 * asynchronous): applying goes on, the acknowledgement waits.
 */
static XLogRecPtr
durable_local_end(void)
{
	XLogRecPtr	flush = GetFlushRecPtr(NULL);
	XLogRecPtr	synced = flush;

	LWLockAcquire(SyncRepLock, LW_SHARED);
#ifdef SYNC_STANDBY_DEFINED
	/* later minor releases keep flags there */
	if (WalSndCtl->sync_standbys_status & SYNC_STANDBY_DEFINED)
#else
	if (WalSndCtl->sync_standbys_defined)
#endif
		synced = WalSndCtl->lsn[SYNC_REP_WAIT_FLUSH];
	LWLockRelease(SyncRepLock);
	return Min(flush, synced);
}

static void
send_feedback(bool force, bool request_reply)
{
	XLogRecPtr	local_flush = durable_local_end();
	dlist_mutable_iter iter;
	XLogRecPtr	flush = flushed_remote;
	XLogRecPtr	write;
	TimestampTz now = GetCurrentTimestamp();
	bool		deferred_goes_out;

	dlist_foreach_modify(iter, &flush_positions)
	{
		FlushPosition *fp = dlist_container(FlushPosition, node, iter.cur);

		if (fp->local_end > local_flush)
			break;
		if (fp->remote_end > flush)
			flush = fp->remote_end;
		dlist_delete(iter.cur);
		pfree(fp);
	}

	/* nothing in flight: acknowledge the keepalive position, as recorded */
	if (idle_ackable() && idle_lsn > flush && ack_recorded_local <= local_flush)
		flush = Max(flush, Min(idle_lsn, ack_recorded));
	flushed_remote = flush;

	/* received: data, and what the source's keepalives say it has sent */
	write = Max(Max(stream.received_lsn, idle_lsn), flush);

	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.last_received_lsn = Max(write, begun_lsn);
	MySlot->stats.source_end_lsn = RECEIVED_END(write);
	MySlot->stats.flushed_lsn = flush;
	MySlot->stats.unapplied_commit_time = open_since;
	SpinLockRelease(&MySlot->mutex);

	/*
	 * A new flush position goes out at once (it lets the source release
	 * WAL); a position merely received, at most every FEEDBACK_WRITE_MS:
	 * every reply costs both ends a round of work, and the source needs
	 * none of them to keep sending.
	 */
	if (!force && flush == stream.last_flush_sent &&
		(write == stream.last_write_sent ||
		 !TimestampDifferenceExceeds(stream.last_send_time, now, FEEDBACK_WRITE_MS)) &&
		!TimestampDifferenceExceeds(stream.last_send_time, now, 10000))
		return;
	deferred_goes_out = ack_deferred && dlist_is_empty(&flush_positions) &&
		flush > stream.last_flush_sent;
	ash_stream_send_feedback(&stream, write, flush, request_reply);
	if (deferred_goes_out)
		deferred_ack_sent();
}

/*
 * Before a quiet wait: tell the source what was received since the last
 * reply.  A logical walsender whose client's write position trails what it
 * sent sends a keepalive each time it wakes (WalSndWaitForWal), before it
 * decodes the commit that woke it: on every transaction's path to the
 * mirror, and a wake-up of this worker for nothing.  Traced side by side
 * with native apply (bench/README.md, "Paired, with each step of the path
 * traced"): the keepalive put the walsender's first message 13-46 us
 * (medians) behind native's; with one reply per quiet moment, as native
 * apply replies, -43 to +3 us.  A backlog has no quiet moments, and pays
 * nothing for it.
 */
static void
report_received(void)
{
	if (Max(stream.received_lsn, idle_lsn) > stream.last_write_sent)
		send_feedback(true, false);
}

/* ---------------------------------------------------------------------
 * Session.
 * ---------------------------------------------------------------------
 */
/* No fallback pending, or what it concerned is applied and its delay over. */
static bool
streaming_allowed(void)
{
	return XLogRecPtrIsInvalid(stream_fallback_lsn) ||
		(ash_apply_watermark() >= stream_fallback_lsn &&
		 TimestampDifferenceExceeds(stream_fallback_at, GetCurrentTimestamp(),
									stream_retry_ms()));
}

static char *
pgoutput_options(AshConn *conn)
{
	StringInfoData o;
	int			proto;

	if (conn->server_version >= 150000)
		proto = 3;
	else if (conn->server_version >= 140000)
		proto = 2;
	else
		proto = 1;
	initStringInfo(&o);
	appendStringInfo(&o, "proto_version '%d', publication_names %s", proto,
					 ash_conn_quote_repl_literal(quote_identifier(cfg->publication)));
	if (conn->server_version >= 140000)
		appendStringInfoString(&o, ", messages 'true'");
	if (cfg->binary_transfer && conn->server_version >= 140000 && !ash_apply_binary_refused())
		appendStringInfoString(&o, ", binary 'true'");
	/* an incremental snapshot judges each change by its transaction, whole */
	session_streams = cfg->streaming && conn->server_version >= 140000 && streaming_allowed() &&
		!guard_careful() && !incremental_session;
	streams_withheld = cfg->streaming && conn->server_version >= 140000 && guard_careful();
	if (session_streams)
		appendStringInfoString(&o, ", streaming 'on'");
	return o.data;
}

/*
 * wal2json 2.5, format version 2: what decode_wal2json.c reads, for the
 * configured tables only.  No streaming (wal2json has none).  Not asked
 * for: include-pk and include-not-null (the catalogs describe keys),
 * include-unchanged-toast (2.5 refuses it), numeric-data-types-as-string
 * (2.6 on; 2.5 refuses an unknown option, so NaN stays ambiguous).
 *
 * Nor include-types (nor so include-typmod): it costs the walsender a
 * syscache lookup and format_type per column of every change (a tenth of
 * its W1 CPU, bench/README.md) and says nothing the decoder judges.  A
 * column's type is judged by its OID (include-type-oids, printed with
 * %d): ALTER COLUMN ... TYPE gives the column another OID, so a change
 * written after it and decoded before the next schema check carries an
 * OID the description lacks and is drift (re-described, then judged, or
 * halted decoder_schema_drift); it cannot be read as the old type.  A
 * typmod-only change (varchar(10) to varchar(20), numeric's precision)
 * keeps the OID; the value's text does not depend on the typmod (the
 * output function ignores it), and the typmod is judged as pgoutput's
 * Relation message is, from the description (same_relation compares
 * typmods), which the type name would not have told us earlier: the
 * decoder never read it.
 */
static char *
wal2json_options(AshConn *conn)
{
	StringInfoData o;
	StringInfoData tables;
	ListCell   *lc;

	initStringInfo(&tables);
	foreach(lc, cfg->tables)
	{
		List	   *t = lfirst(lc);
		char		buf[4 * NAMEDATALEN + 2];

		buf[0] = '\0';
		if (!ash_wal2json_table_option(buf, sizeof(buf), linitial(t), lsecond(t)))
			elog(ERROR, "ash_replicant: a table name does not fit the add-tables option");
		appendStringInfo(&tables, "%s%s", tables.len ? "," : "", buf);
	}
	initStringInfo(&o);
	appendStringInfo(&o,
					 "\"format-version\" '2', \"include-transaction\" 'true',"
					 " \"include-xids\" 'true', \"include-lsn\" 'true',"
					 " \"include-timestamp\" 'true', \"include-schemas\" 'true',"
					 " \"include-types\" 'false', \"include-type-oids\" 'true',"
					 " \"include-typmod\" 'false', \"include-domain-data-type\" 'false',"
					 " \"include-pk\" 'false', \"include-origin\" '%s',"
					 " \"include-not-null\" 'false', \"include-default\" 'false',"
					 " \"include-column-positions\" 'false', \"pretty-print\" 'false',"
					 " \"write-in-chunks\" 'false',"
					 " \"actions\" 'insert,update,delete,truncate',"
					 " \"add-tables\" %s",
					 cfg->origin_none ? "true" : "false",
					 ash_conn_quote_repl_literal(tables.data));
	session_streams = false;
	streams_withheld = false;
	return o.data;
}

static bool is_wal2json = false;	/* cfg->decoder, looked up once */

/*
 * The source database's encoding (its server_encoding at connection),
 * for wal2json, which writes values in it: pgoutput and pglogical send
 * them in our client_encoding, the source converting.
 */
static int	source_encoding = -1;

/* Its conversion into ours, looked up at connection (needs the catalogs). */
static FmgrInfo source_conversion;
static bool source_converts = false;
static bool is_pglogical = false;

/* pglogical_output (pipeline_pglogical.c): no streaming either. */
static char *
pglogical_options(AshConn *conn)
{
	session_streams = false;
	streams_withheld = false;
	return ash_pglogical_plugin_options(conn);
}

static char *
plugin_options(AshConn *conn)
{
	if (is_pglogical)
		return pglogical_options(conn);
	return is_wal2json ? wal2json_options(conn) : pgoutput_options(conn);
}

/* ---------------------------------------------------------------------
 * wal2json: the relations it does not send.
 *
 * The configured tables are described from the source's catalogs
 * (census.c) at every session's start, every schema_check_interval_ms,
 * and at once when a change does not fit its table's description.  A
 * description that differs from the last one goes to apply as a Relation
 * message would (pgoutput's path: relmap.c judges a type change, a dropped
 * mapped column, an added column), and replaces the decoder's.
 * ---------------------------------------------------------------------
 */
static MemoryContext w2j_cxt = NULL;	/* the current description */
static AshRelation *w2j_tables = NULL;
static int	w2j_ntables = 0;
static TimestampTz next_schema_check = 0;

static bool
same_relation(const AshRelation *a, const AshRelation *b)
{
	if (a->replident != b->replident || a->natts != b->natts ||
		strcmp(a->nspname, b->nspname) != 0 || strcmp(a->relname, b->relname) != 0)
		return false;
	for (int i = 0; i < a->natts; i++)
		if (a->cols[i].is_key != b->cols[i].is_key || a->cols[i].type_oid != b->cols[i].type_oid ||
			a->cols[i].typmod != b->cols[i].typmod || a->cols[i].toastable != b->cols[i].toastable ||
			strcmp(a->cols[i].name, b->cols[i].name) != 0)
			return false;
	return true;
}

static void
wal2json_describe(AshWal2jsonState *dstate)
{
	MemoryContext old;
	MemoryContext cxt;
	List	   *rels;
	ListCell   *lc;
	AshRelation *tables;
	int			n = 0;
	int			changed = 0;

	cxt = AllocSetContextCreate(pipeline_cxt, "ash_replicant wal2json relations",
								ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(cxt);
	rels = ash_census_describe_relations(cfg);
	tables = palloc0(sizeof(AshRelation) * Max(list_length(rels), 1));
	foreach(lc, rels)
	{
		AshDescribedRelation *d = lfirst(lc);
		AshRelation *prev = NULL;
		AshChange	c;

		tables[n] = d->rel;
		for (int i = 0; i < w2j_ntables && prev == NULL; i++)
			if (w2j_tables[i].relid == d->rel.relid)
				prev = &w2j_tables[i];
		if (prev == NULL || !same_relation(prev, &d->rel))
		{
			/* user types first, as pgoutput's Type messages (coverage.c) */
			for (int i = 0; i < d->rel.natts; i++)
			{
				if (d->rel.cols[i].type_oid < FirstGenbkiObjectId || d->type_names[i] == NULL)
					continue;
				memset(&c, 0, sizeof(c));
				c.kind = ASH_CHANGE_TYPE;
				c.u.type.type_oid = d->rel.cols[i].type_oid;
				c.u.type.nspname = "";
				c.u.type.typname = d->type_names[i];
				ash_apply_change(&c);
			}
			memset(&c, 0, sizeof(c));
			c.kind = ASH_CHANGE_RELATION;
			c.u.relation = d->rel;
			ash_apply_change(&c);
			changed++;
		}
		n++;
	}
	MemoryContextSwitchTo(old);
	if (w2j_cxt != NULL)
		MemoryContextDelete(w2j_cxt);
	w2j_cxt = cxt;
	w2j_tables = tables;
	w2j_ntables = n;
	dstate->tables = w2j_tables;
	dstate->ntables = w2j_ntables;
	next_schema_check = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													cfg->schema_check_interval_ms);
	if (changed > 0)
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.schema_described sink=%s tables=%d changed=%d",
						cfg->sink_name, n, changed)));
}

/* Every schema_check_interval_ms, between batches (as the census). */
static void
wal2json_check_if_due(AshWal2jsonState *dstate)
{
	if (!is_wal2json || GetCurrentTimestamp() < next_schema_check)
		return;
	if (ash_apply_in_remote_xact() || ash_apply_batch_pending())
		return;
	wal2json_describe(dstate);
}

/*
 * The slot is active: is its walsender an earlier session of this
 * pipeline whose client is gone (its worker ended, the network or the
 * walsender itself stalled)?  Same application name, no reply for a
 * receive_timeout: the refusal it caused is not counted towards
 * source_slot_in_use, and the worker waits for it to end (the source's
 * wal_sender_timeout, or the stalled process running again and finding
 * its client gone).  It is not ended here: a live consumer that replies
 * seldom could look the same.  One that replies is another consumer.
 * Sources before 12 report no reply time: never stale.
 */
static bool
stale_holder(AshConn *conn)
{
	StringInfoData q;
	PGresult   *res;
	const char *appname = PQparameterStatus(conn->conn, "application_name");
	bool		stale;

	if (conn->server_version < 120000 || appname == NULL)
		return false;
	/* a replication connection takes simple queries only */
	initStringInfo(&q);
	appendStringInfo(&q,
					 "SELECT pg_catalog.count(*) > 0"
					 "  FROM pg_catalog.pg_replication_slots s"
					 "  JOIN pg_catalog.pg_stat_replication r ON r.pid = s.active_pid"
					 " WHERE s.slot_name = %s AND r.application_name = %s"
					 "   AND COALESCE(r.reply_time, r.backend_start) <"
					 "       pg_catalog.now() - pg_catalog.make_interval(secs => %d)",
					 ash_conn_quote_literal(conn, cfg->slot_name),
					 ash_conn_quote_literal(conn, appname),
					 Max(ash_receive_timeout_ms / 1000, 1));
	res = ash_conn_exec(conn, q.data, true);	/* not visible: not known stale */
	stale = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		!PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	if (stale)
		ereport(LOG,
				(errmsg("ash_replicant event=slot.stale_session sink=%s", cfg->sink_name),
				 errdetail("The slot's walsender is an earlier session of this pipeline that has not heard from its client for receive_timeout; waiting for it to end.")));
	return stale;
}

/*
 * A step outside apply's writes, for its errors' reports: what apply left
 * (the last batch's command and table, its transaction) is not what the
 * step does.  A target the step waits to lock names itself (errors.h).
 */
static void
errctx_step(const char *command)
{
	ash_apply_errctx.command = command;
	ash_apply_errctx.relation = NULL;
	ash_apply_errctx.commit_lsn = InvalidXLogRecPtr;
	ash_apply_errctx.xid = InvalidTransactionId;
	ash_opening_target = NULL;	/* a wait's error some catch consumed */
}

static void
run_census_if_due(void)
{
	AshCensusVerdict v;
	TimestampTz now = GetCurrentTimestamp();

	if (!cfg->census.enabled || now < next_census)
		return;
	if (ash_apply_in_remote_xact() || ash_apply_batch_pending())
		return;

	/* nothing is pending: everything received was applied */
	errctx_step("census");
	v = ash_census_run(cfg, ckey, Max(stream.received_lsn, idle_lsn));
	if (ash_census_targets_changed())
		ash_relmap_invalidate_resolutions();	/* a target column added or widened */
	now = GetCurrentTimestamp();
	next_census = TimestampTzPlusMilliseconds(now, ash_census_next_delay(cfg));
	if (v == ASH_CENSUS_FAULT)
		census_faults++;
	else
		census_faults = 0;

	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.last_census_at = now;
	strlcpy(MySlot->stats.last_census_verdict, v == ASH_CENSUS_PASS ? "pass" : "fault",
			sizeof(MySlot->stats.last_census_verdict));
	SpinLockRelease(&MySlot->mutex);

	if (census_faults >= cfg->census.max_consecutive_faults)
		ash_halt("census_unverifiable", "%d consecutive census faults", census_faults);

	/* the streamed transaction a death was charged to rolled back */
	if (TransactionIdIsValid(careful_xid) && ash_census_watched_xact_aborted())
	{
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.crash_passed sink=%s xid=%u outcome=aborted",
						cfg->sink_name, careful_xid)));
		careful_xid = InvalidTransactionId;
		ash_census_watch_xact(InvalidTransactionId);
		guard_set_careful(guard_careful());
	}

	/* a table back in the publication after a gap: the next session copies it */
	if (ash_census_publication_gap() != NULL)
	{
		ash_conn_last_sqlstate[0] = '\0';
		session_recopy = true;
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: mapped table %s came back to the publication after a gap; the next session copies it again",
						ash_census_publication_gap())));
	}
}

/*
 * After a source COMMIT: is another transaction about to join the batch?
 * Yes when a message is already received.  Otherwise, while the walsender
 * is streaming a backlog, sleep BATCH_LINGER_MS and look again; a source
 * the walsender keeps up with never waits: what it will send next is not
 * committed yet, and every millisecond spent waiting for it is latency
 * (and, for a synchronous source, its sessions' commit time).
 *
 * The walsender is streaming a backlog when it sends a BEGIN or COMMIT more
 * than BATCH_LINGER_MS after the source committed the transaction (the
 * message's send time less the commit time, both read off the source's
 * clock), or streams a transaction in progress: then what comes next is
 * committed or written already, and a pause of that length delays nothing
 * that was not already later than it.
 *
 * The sleep is long on purpose, and does not watch the socket.  A worker
 * that reads every message as it arrives keeps the source's TCP window open,
 * and the walsender then pushes each logical decoding message through the
 * whole transmit path as a segment of its own (on loopback including our
 * socket's input processing): for many tiny transactions that made the
 * walsender, not the apply, the bottleneck -- 82,000 segments for 100,000
 * one-row transactions, twice the sender CPU native logical replication
 * costs it.  Sleeping longer than the receive buffer (walproto.c) takes to
 * fill lets the window close; the walsender then queues its messages
 * cheaply and sends them in large segments once we read, which is the
 * regime native apply runs in because it is slower than the source.  The
 * worker applies the burst faster than the walsender produces it, so the
 * pause costs no throughput.  (Ending the sleep early once the socket's
 * kernel queue stopped growing was measured: the walsender, sharing two
 * cores, pauses that long often enough that W2 lost ~5 % and its sender CPU
 * rose; not kept.)  Should keeping up with a live source cost the walsender
 * that much, it falls behind, and the pacing returns.
 */
#define BATCH_LINGER_MS 30

static bool sender_behind = false;

/* the quiet-moment flush when the source does not wait for us */
#define ACK_FLUSH_INTERVAL_MS 20
static TimestampTz last_ack_flush = 0;


/*
 * Note how far behind its source's commits the walsender sent this one (at
 * BEGIN, which carries the commit time, too: a large transaction is paced
 * from its start).
 */
static void
note_commit_sent(TimestampTz send_time, TimestampTz commit_time)
{
	sender_behind = send_time - commit_time > (TimestampTz) BATCH_LINGER_MS * 1000;
}

/*
 * The same reason paces reading inside a transaction: when the worker has
 * read everything the socket held and that was a backlog (at least
 * PACE_MIN_BYTES since it last found the socket empty, and the walsender
 * behind), it pauses BATCH_LINGER_MS instead of waking at the next
 * arriving segment.  A worker faster than the walsender would otherwise
 * keep the window open through a large transaction or a run of them, and
 * the walsender would send each change as a segment of its own --
 * measured: applying faster made the walsender slower and the whole no
 * faster (W1: ~250,000 segments unpaced, 15,000-50,000 paced, and the
 * walsender's CPU a quarter lower).  A trickle (less than that since the
 * socket was last empty) is read as it arrives.  The pause clamps the
 * window first (ash_stream_pause): without that, a sleeping reader's
 * buffer overflowed in some runs and the source's retransmissions stalled
 * them for seconds.
 */
#define PACE_MIN_BYTES (64 * 1024)

/*
 * How long such a pause may last while the walsender has not filled the
 * receive window yet (ash_stream_pause): the walsenders of many pipelines
 * sharing the source's cores fill it slowly.
 */
#define PACE_MAX_MS 100

static uint64 paced_from = 0;

static bool
more_coming(void)
{
	if (ash_stream_more_buffered(&stream))
		return true;
	if (sender_behind)
	{
		ash_stream_pause(&stream, BATCH_LINGER_MS, BATCH_LINGER_MS);
		if (ash_stream_more_buffered(&stream))
			return true;
	}
	return false;
}

/*
 * Commit the open batch and account for it (flush position, guard).
 *
 * A source that waits for us (syncrep.c) holds the sessions that committed
 * this batch until we acknowledge it: when no further transaction is here
 * already, the commit is made durable as it happens and acknowledged at
 * once, before anything else the loop does between messages.  With more
 * received, the flush of a later batch covers this one (wait_for_stream).
 * drained: the caller knows nothing more is received.
 */
static AshBatchResult
commit_batch(bool drained)
{
	bool		durable = ash_syncrep_source_waits() &&
		(drained || !ash_stream_more_buffered(&stream));
	AshBatchResult r = ash_apply_commit_batch(durable);
	bool		said;

	/* status learns it at the next BEGIN or feedback, with no lock of its own */
	open_since = 0;
	record_flush_position(&r);
	apply_failures = 0;
	said = transient_failures >= TRANSIENT_FAILURES_SAID;
	transient_failures = 0;
	if (said)
		set_wait_reason(retry_reason());
	guard_applied();
	if (durable)
	{
		send_feedback(false, false);
		last_ack_flush = GetCurrentTimestamp();
	}
	return r;
}

/*
 * A wal2json message as the source wrote it, in its database's encoding:
 * into ours, in place (msg_cxt), checked either way.  A byte sequence
 * invalid there (an SQL_ASCII source's high bytes), or a character ours
 * lacks, fails the same change at every attempt: halted, never echoed.
 * Not a logical message ("M", which wal2json writes "action" first in):
 * its prefix and content are bytes, passed on as pgoutput sends them (an
 * ignored one is no fault; a route to a text column checks the content,
 * messages.c).
 */
static void
wal2json_to_database_encoding(AshStreamMsg *msg)
{
	MemoryContext cxt = CurrentMemoryContext;
	char	   *volatile converted = NULL;
	static const char logical_message[] = "{\"action\":\"M\"";

	if (msg->len >= sizeof(logical_message) - 1 &&
		memcmp(msg->data, logical_message, sizeof(logical_message) - 1) == 0)
		return;
	if (source_encoding < 0)
		ash_halt("source_value_unrepresentable", "the source did not report its encoding");
	/* the source validated what its own encoding holds (not SQL_ASCII) */
	if ((source_encoding == GetDatabaseEncoding() && source_encoding != PG_SQL_ASCII) ||
		GetDatabaseEncoding() == PG_SQL_ASCII)
		return;
	PG_TRY();
	{
		if (source_converts)
		{
			/* as pg_do_encoding_conversion, with the function looked up */
			unsigned char *result = MemoryContextAllocHuge(CurrentMemoryContext,
														   (Size) msg->len * MAX_CONVERSION_GROWTH + 1);

			FunctionCall6(&source_conversion, Int32GetDatum(source_encoding),
						  Int32GetDatum(GetDatabaseEncoding()), CStringGetDatum(msg->data),
						  CStringGetDatum((char *) result), Int32GetDatum(msg->len),
						  BoolGetDatum(false));
			converted = (char *) result;
		}
		else
		{
			/* SQL_ASCII: bytes as they are, if ours can hold them */
			(void) pg_verify_mbstr(GetDatabaseEncoding(), msg->data, msg->len, false);
			converted = (char *) msg->data;
		}
	}
	PG_CATCH();
	{
		/* the message quotes the bytes: a value */
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		converted = NULL;
	}
	PG_END_TRY();
	if (converted == NULL)
		ash_halt("source_value_unrepresentable",
				 "a wal2json change holds a value the destination database's encoding cannot represent");
	if (converted != msg->data)
	{
		msg->data = converted;
		msg->len = strlen(converted);
	}
}

/* What the decoders keep across the messages of a session. */
typedef struct DecoderState
{
	AshPgoutputState pgoutput;
	AshWal2jsonState wal2json;
} DecoderState;

/*
 * The names the publication records hold the mapped tables' OIDs under,
 * for the stream's first descriptions of them (pgoutput and pglogical
 * describe a table by its OID; wal2json by its name only); under
 * pglogical, whose Relation message carries no types, the columns' types
 * they hold too.
 */
static void
note_recorded_names(AshCheckpointKey *ckey, bool is_pglogical)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "ash_replicant records",
											  ALLOCSET_SMALL_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	List	   *records = ash_publication_identities(ckey);
	ListCell   *lc;

	/* a transaction: a record's column names are converted to our encoding */
	StartTransactionCommand();
	MemoryContextSwitchTo(cxt);
	foreach(lc, records)
	{
		AshRecordedTable *t = lfirst(lc);

		ash_relmap_note_recorded(t->oid, t->nspname, t->relname, t->read_at,
								 t->published, !is_pglogical);
		if (is_pglogical)
			ash_pglogical_note_recorded(t->oid, t->published);
	}
	CommitTransactionCommand();
	MemoryContextSwitchTo(old);
	MemoryContextDelete(cxt);
}

/*
 * One message into change with the configured decoder; halts when it cannot.
 * Returns false when the message holds nothing to apply (pglogical's startup
 * message and queue rows but a TRUNCATE).
 */
static bool
decode_message(DecoderState *dstate, AshStreamMsg *msg, AshChange *change)
{
	const char *derr;

	if (is_pglogical)
		return ash_pglogical_decode(msg->data, msg->len, change);
	if (!is_wal2json)
	{
		if (!ash_decode_pgoutput(&dstate->pgoutput, msg->data, msg->len, change, &derr))
			ash_halt("protocol_violation", "undecodable pgoutput message: %s", derr);
		return true;
	}
	wal2json_to_database_encoding(msg);
	if (ash_decode_wal2json(&dstate->wal2json, msg->data, msg->len, change, &derr))
		return true;
	if (dstate->wal2json.drift)
	{
		/* the table changed since it was described: describe it again */
		wal2json_describe(&dstate->wal2json);
		if (ash_decode_wal2json(&dstate->wal2json, msg->data, msg->len, change, &derr))
			return true;
		if (dstate->wal2json.drift)
			ash_halt("decoder_schema_drift",
					 "a wal2json change does not fit the columns its source table has now");
	}
	if (derr == ash_wal2json_err_ambiguous)
		ash_halt("decoder_value_ambiguous", "%s", derr);
	ash_halt("protocol_violation", "undecodable wal2json message: %s", derr);
}

/*
 * A transaction begins: say it is received before applying it.  Applying
 * may wait (a lock on a target, a trigger) and send_feedback runs only
 * between messages: lag would read 0 meanwhile (test 202).  Counted to its
 * commit, which BEGIN names: its first change may lie below what is
 * acknowledged already (a transaction interleaved with others, or a
 * keepalive's position acknowledged while it was being decoded).  One
 * spinlock a transaction.
 */
static void
publish_received(XLogRecPtr final_lsn, TimestampTz commit_time)
{
	XLogRecPtr	write;

	if (open_since == 0)
		open_since = commit_time;
	begun_lsn = Max(begun_lsn, final_lsn);
	write = Max(Max(stream.received_lsn, idle_lsn), Max(flushed_remote, begun_lsn));
	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.last_received_lsn = write;
	MySlot->stats.source_end_lsn = RECEIVED_END(write);
	MySlot->stats.unapplied_commit_time = open_since;
	SpinLockRelease(&MySlot->mutex);
}

/*
 * One DATA message: decoded into msg_cxt (the caller frees it), applied,
 * and the batch committed where it ends.
 */
static void
apply_message_data(DecoderState *dstate, AshStreamMsg *msg)
{
	AshChange	change;
	bool		nontx_message;

	if (!decode_message(dstate, msg, &change))
		return;

	/*
	 * A non-transactional message commits in a batch of its own; a streamed
	 * transaction starts one (it may roll back alone).
	 */
	nontx_message = change.kind == ASH_CHANGE_MESSAGE && !change.u.message.transactional;
	if ((nontx_message || change.kind == ASH_CHANGE_STREAM_START) &&
		ash_apply_batch_pending())
		(void) commit_batch(false);
	if (change.kind == ASH_CHANGE_BEGIN)
		publish_received(change.u.begin.final_lsn, change.u.begin.commit_time);
	guard_note_change(&change);
	ash_apply_change(&change);
	/* a transaction skipped (applied before) with no batch to commit */
	if (change.kind == ASH_CHANGE_COMMIT && !ash_apply_batch_pending())
		open_since = 0;

	if (change.kind == ASH_CHANGE_STREAM_COMMIT)
	{
		stream_fallbacks = 0;
		note_commit_sent(msg->send_time, change.u.stream_commit.commit_time);
	}
	else if (change.kind == ASH_CHANGE_COMMIT)
		note_commit_sent(msg->send_time, change.u.commit.commit_time);
	else if (change.kind == ASH_CHANGE_BEGIN)
	{
		note_commit_sent(msg->send_time, change.u.begin.commit_time);
		begins_received++;
		if (reply_probe_at != 0)
		{
			ash_syncrep_note_reply(!TimestampDifferenceExceeds(reply_probe_at,
															   GetCurrentTimestamp(),
															   SYNCREP_REPLY_MS));
			reply_probe_at = 0;
		}
	}
	else if (change.kind == ASH_CHANGE_STREAM_START)
		sender_behind = true;	/* a transaction too large to wait for its commit */
	if ((change.kind == ASH_CHANGE_COMMIT || change.kind == ASH_CHANGE_STREAM_COMMIT ||
		 nontx_message) && ash_apply_batch_pending())
	{
		if (ash_apply_batch_full() || nontx_message)
			(void) commit_batch(false);
		else if (!more_coming())
			(void) commit_batch(true);
	}
}

/* A keepalive: the source's position, and an answer when it asks for one. */
static void
keepalive_received(const AshStreamMsg *msg)
{
	if (msg->wal_end > idle_lsn)
		idle_lsn = msg->wal_end;
	incr_ping_sent = false;
	if (msg->reply_requested)
		send_feedback(true, false);
}

/*
 * Everything received so far: keepalives answered, DATA applied.  Returns
 * when the socket has nothing more.
 */
static void
drain_stream(DecoderState *dstate, MemoryContext loop_cxt, MemoryContext msg_cxt)
{
	AshStreamMsg msg;

	for (;;)
	{
		ash_stream_receive(&stream, &msg);
		if (msg.kind == ASH_STREAM_NONE)
			return;
		if (msg.kind == ASH_STREAM_END)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("ash_replicant: the source ended the replication stream")));
		if (msg.kind == ASH_STREAM_KEEPALIVE)
		{
			keepalive_received(&msg);
			continue;
		}

		/* DATA: decoded into a per-message context, freed right after */
		ash_snapshot_incremental_join();	/* no helper copies under it */
		MemoryContextSwitchTo(msg_cxt);
		apply_message_data(dstate, &msg);
		MemoryContextSwitchTo(loop_cxt);
		MemoryContextReset(msg_cxt);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * Streaming was suspended by a fallback, or withheld while careful: when
 * idle, close the stream so that run_session starts over, streaming.
 * Returns whether it did.
 */
static bool
resume_streaming_if_idle(void)
{
	if (!cfg->streaming || session_streams ||
		(XLogRecPtrIsInvalid(stream_fallback_lsn) && !streams_withheld) ||
		ash_apply_in_remote_xact() || ash_apply_batch_pending() || !streaming_allowed() ||
		guard_careful())
		return false;
	ereport(LOG,
			(errmsg("ash_replicant event=apply.stream_resume sink=%s", cfg->sink_name)));
	stream_fallback_lsn = InvalidXLogRecPtr;
	streams_withheld = false;
	ash_stream_close(&stream);
	stream_open = false;
	return true;
}

/*
 * A source silent for half of receive_timeout is asked for a reply (due at
 * once); one that has not answered within the other half is gone.  The
 * silence is counted from the question: time the worker spent on work of
 * its own (a chunk, a census) before it could ask -- its messages unread
 * on the socket, or none sent because nothing was asked -- is not the
 * source's (a chunk that outlasted the timeout ended every session).
 */
static TimestampTz ping_sent_at = 0;

static void
check_silent_source(TimestampTz now)
{
	if (!stream.ping_sent)
	{
		if (TimestampDifferenceExceeds(stream.last_recv_time, now, ash_receive_timeout_ms / 2))
		{
			send_feedback(true, true);
			stream.ping_sent = true;
			ping_sent_at = now;
		}
		return;
	}
	if (TimestampDifferenceExceeds(stream.last_recv_time, now, ash_receive_timeout_ms) &&
		TimestampDifferenceExceeds(ping_sent_at, now, ash_receive_timeout_ms / 2))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: the source sent nothing within receive_timeout")));
}

/*
 * Incremental snapshot: copy chunks while the stream has nothing waiting
 * (for at most INCR_SLICE_MS at a time, so the stream's latency stays
 * bounded).  Each chunk committed asks the source for a keepalive (one at
 * a time), whose position closes the windows when the source is quiet.  A
 * chunk waits while max_pending_chunks windows are open -- the source is
 * asked again after INCR_PING_MS without an answer -- or while the source
 * does not show a transaction the stream delivered.
 */
#define INCR_SLICE_MS	200
#define INCR_PING_MS	100
#define INCR_RETRY_MS	20

/* Ask the walsender for its position: one ping at a time, again when overdue. */
static void
incremental_ping(void)
{
	if (!incr_ping_sent ||
		TimestampDifferenceExceeds(incr_last_ping, GetCurrentTimestamp(), INCR_PING_MS))
	{
		send_feedback(true, true);
		incr_last_ping = GetCurrentTimestamp();
		incr_ping_sent = true;
	}
	incr_wait_ms = INCR_PING_MS;
}

static void
incremental_work(void)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), INCR_SLICE_MS);
	XLogRecPtr	lowest;

	incr_wait_ms = -1;
	if (!incremental_session || ash_apply_in_remote_xact() || ash_apply_batch_pending())
		return;
	for (;;)
	{
		AshIncrStep step;

		/*
		 * Keepalives (the answers to our pings) are read here, the helpers
		 * copying on; anything else of the stream ends the slice.  Every
		 * commit below the watermark is delivered; a keepalive's position
		 * too.
		 */
		while (ash_stream_keepalive_next(&stream))
		{
			AshStreamMsg msg;

			ash_stream_receive(&stream, &msg);
			keepalive_received(&msg);
		}
		if (ash_stream_more_buffered(&stream))
		{
			ash_snapshot_incremental_join();
			incr_wait_ms = 0;
			return;
		}
		(void) ash_incr_close_windows(Max(ash_apply_watermark() + 1, idle_lsn));
		step = ash_snapshot_incremental_step();

		/*
		 * Ask for the position now rather than once the windows are full:
		 * the answer, there before the next chunk is written, closes this
		 * one's window (one ping at a time).
		 */
		if (step == ASH_INCR_STEP_CHUNK && !incr_ping_sent)
		{
			send_feedback(true, true);
			incr_last_ping = GetCurrentTimestamp();
			incr_ping_sent = true;
		}

		/*
		 * While helpers copy, the worker stays: it takes their chunks and
		 * lets them go on as windows close, waiting for them or the source
		 * when it cannot copy itself -- until the stream has more than
		 * keepalives or the slice ends.
		 */
		if (step != ASH_INCR_STEP_NONE && ash_snapshot_incremental_helping() &&
			GetCurrentTimestamp() < until)
		{
			if (step == ASH_INCR_STEP_WAIT_WINDOWS)
				incremental_ping();
			if (step != ASH_INCR_STEP_CHUNK)
				(void) ash_stream_wait(&stream, INCR_RETRY_MS);
			CHECK_FOR_INTERRUPTS();
			continue;
		}
		ash_snapshot_incremental_join();
		switch (step)
		{
			case ASH_INCR_STEP_NONE:
				/* copied: the last windows still judge until they close */
				if (ash_incr_open_windows(&lowest) == 0)
				{
					incremental_session = false;
					return;
				}
				incremental_ping();
				return;
			case ASH_INCR_STEP_CHUNK:
				if (GetCurrentTimestamp() >= until)
				{
					incr_wait_ms = 0;
					return;
				}
				CHECK_FOR_INTERRUPTS();
				continue;
			case ASH_INCR_STEP_WAIT_WINDOWS:
				incremental_ping();
				return;
			case ASH_INCR_STEP_WAIT_XIDS:
				incr_wait_ms = INCR_RETRY_MS;
				return;
			case ASH_INCR_STEP_WAIT_LOCK:
				incr_wait_ms = ash_snapshot_incremental_pause_ms();
				return;
		}
	}
}

/*
 * Flush our commits that are not yet flushed and report them, judging a
 * deferred acknowledgement by what followed it (syncrep.c).
 */
static void
flush_and_acknowledge(TimestampTz now)
{
	XLogFlush(dlist_tail_element(FlushPosition, node, &flush_positions)->local_end);
	send_feedback(false, false);
	last_ack_flush = now;
	if (ack_deferred)
		deferred_ack_sent();
}

/*
 * The deferred acknowledgement went out (by flush_and_acknowledge, or by
 * any reply that carried the position once the WAL writer had flushed it):
 * across a silent stream, the next BEGIN is timed from now.
 */
static void
deferred_ack_sent(void)
{
	bool		silent = begins_received == ack_deferred_begins;

	if (!silent)
		ash_syncrep_note_reply(false);	/* nobody was held */
	ack_deferred = false;
	reply_probe_at = silent ? GetCurrentTimestamp() : 0;
}

/* Until more arrives (or the next census): pace a backlog, or wait. */
static void
wait_for_stream(TimestampTz now)
{
	long		wait_ms = 1000;

	if (incr_wait_ms == 0)
		return;					/* chunks to copy: back to the loop at once */
	if (ash_syncrep_reread_wanted() && !IsTransactionOrTransactionBlock())
		ash_syncrep_reread(cfg->connection);
	if (incr_wait_ms > 0)
		wait_ms = Min(wait_ms, incr_wait_ms);

	if (cfg->census.enabled)
	{
		long		until = TimestampDifferenceMilliseconds(now, next_census);

		wait_ms = Min(wait_ms, Max(until, 1));
	}
	if (sender_behind && stream.received_bytes - paced_from >= PACE_MIN_BYTES)
	{
		/*
		 * A backlog is streaming: let the source's window close.  The pause
		 * is idle time, so our commits are made durable and reported in it
		 * (at most every ACK_FLUSH_INTERVAL_MS): at a backlog's end it runs
		 * its whole PACE_MAX_MS with nothing more to come, and the source
		 * learnt of the last commits only after it -- confirmed_flush_lsn
		 * 0.10 s behind the visible rows at the end of every burst.
		 */
		if (!dlist_is_empty(&flush_positions) &&
			TimestampDifferenceMilliseconds(last_ack_flush, now) >= ACK_FLUSH_INTERVAL_MS)
			flush_and_acknowledge(now);
		ash_stream_pause(&stream, BATCH_LINGER_MS, PACE_MAX_MS);
	}
	else
	{
		/*
		 * The stream is quiet: acknowledge what is applied now rather than
		 * when the WAL writer gets to our asynchronous commits and the next
		 * wake-up reports them (up to a second later).  A backlog does
		 * the same in its pauses (above).  A source that waits
		 * for us (syncrep.c) gets every commit acknowledged at once; any
		 * other gets a flush at most every ACK_FLUSH_INTERVAL_MS: on a
		 * trickle of small transactions a flush per quiet moment is a
		 * flush per transaction, which costs more than applying it and
		 * holds up the next one that arrives meanwhile.
		 */
		if (!dlist_is_empty(&flush_positions))
		{
			long		since = TimestampDifferenceMilliseconds(last_ack_flush, now);

			if (ash_syncrep_source_waits() || since >= ACK_FLUSH_INTERVAL_MS)
				flush_and_acknowledge(now);
			else
			{
				if (!ack_deferred)
				{
					ack_deferred = true;
					ack_deferred_begins = begins_received;
				}
				wait_ms = Min(wait_ms, Max(ACK_FLUSH_INTERVAL_MS - since, 1));
			}
		}
		if (idle_lsn > Max(ack_recorded, flushed_remote) && idle_ackable() &&
			!IsTransactionOrTransactionBlock())
		{
			long		since = TimestampDifferenceMilliseconds(last_idle_record, now);

			if (ash_syncrep_source_waits() || since >= IDLE_RECORD_MS)
			{
				ash_checkpoint_record_acknowledged(ckey, idle_lsn);
				ack_recorded = idle_lsn;
				ack_recorded_local = XactLastCommitEnd;
				last_idle_record = now;
				send_feedback(true, false);
			}
			else
				wait_ms = Min(wait_ms, Max(IDLE_RECORD_MS - since, 1));
		}
		report_received();
		(void) ash_stream_wait(&stream, wait_ms);
	}
	paced_from = stream.received_bytes;
}

static void
receive_loop(void)
{
	MemoryContext loop_cxt = CurrentMemoryContext;
	/*
	 * A first block (kept by every reset) that holds what a message and the
	 * batch commit it may close allocate -- the checkpoint row alone is
	 * over a kB, three copies of it are made -- where blocks grown past
	 * 8 kB were malloc'ed and freed again for every message, and the pages
	 * of each faulted in anew.
	 */
	MemoryContext msg_cxt = AllocSetContextCreate(loop_cxt, "ash_replicant message",
												  0, 64 * 1024, ALLOCSET_DEFAULT_MAXSIZE);
	DecoderState dstate;

	memset(&dstate, 0, sizeof(dstate));
	dstate.pgoutput.proto_version = stream.conn->server_version >= 150000 ? 3 :
		stream.conn->server_version >= 140000 ? 2 : 1;
	dstate.wal2json.tables = w2j_tables;
	dstate.wal2json.ntables = w2j_ntables;
	dstate.wal2json.origins = cfg->origin_none; /* include-origin asked */

	for (;;)
	{
		TimestampTz now;

		CHECK_FOR_INTERRUPTS();
		absorb_reload();

		drain_stream(&dstate, loop_cxt, msg_cxt);
		Assert(CurrentMemoryContext == loop_cxt);

		/* a batch may still wait for a skipped tail's COMMIT; close it */
		if (ash_apply_batch_pending())
			(void) commit_batch(true);
		else if (!ash_apply_in_remote_xact())
			ash_apply_publish_idle();
		else if (!sender_behind)
			ash_apply_write_gathered(stream.received_lsn);	/* the rest is not sent yet */

		send_feedback(false, false);

		/* right after reading everything there was (check_silent_source) */
		check_silent_source(GetCurrentTimestamp());
		guard_progress();
		run_census_if_due();
		incremental_work();
		wal2json_check_if_due(&dstate.wal2json);
		if (resume_streaming_if_idle())
			return;				/* run_session starts over, streaming */

		now = GetCurrentTimestamp();
		wait_for_stream(now);
	}
}

static bool
is_incremental(void)
{
	return cfg->snapshot != NULL && strcmp(cfg->snapshot, "incremental") == 0;
}

/*
 * Snapshot settings this version does not act on are refused, never
 * stored and ignored (ash_replicant_start refuses them too).
 */
static void
check_snapshot_settings(void)
{
	ListCell   *lc;

	bool		incremental = is_incremental();

	if (incremental && ash_config_is_append_log(cfg))
		ash_halt("snapshot_unsupported", "snapshot incremental does not copy into an append log");
	foreach(lc, cfg->mappings)
	{
		AshMapping *m = lfirst(lc);

		if (incremental && !m->snapshot_provenance)
			ash_halt("snapshot_unsupported",
					 "snapshot incremental needs snapshot_provenance on every mapping; %s has none",
					 quote_qualified_identifier(m->source_schema, m->source_table));

		if (!m->snapshot_provenance)
			continue;
		if (!ash_snapshot_configured(cfg))
			ash_halt("snapshot_provenance_invalid",
					 "snapshot_provenance of %s needs a snapshot mode",
					 quote_qualified_identifier(m->source_schema, m->source_table));
	}
}

/* Every key family the mappings need must be in the keyring. */
static void
check_key_families(void)
{
	ListCell   *lc;
	bool		encryption = false;
	bool		provenance = false;

	foreach(lc, cfg->mappings)
	{
		if (((AshMapping *) lfirst(lc))->encrypted != NIL)
			encryption = true;
		if (((AshMapping *) lfirst(lc))->snapshot_provenance)
			provenance = true;
	}
	if (!encryption && !provenance)
		return;
	ash_keyring_load();
	if (encryption && !ash_keyring_has_family(ASH_KEYS_COLUMN_ENCRYPTION))
		ash_halt("keyring_missing_family", "family %s", ASH_KEYS_COLUMN_ENCRYPTION);
	if (provenance && !ash_keyring_has_family(ASH_KEYS_SNAPSHOT_PROVENANCE))
		ash_halt("keyring_missing_family", "family %s", ASH_KEYS_SNAPSHOT_PROVENANCE);
}

/*
 * A go-forward slot was just created: the rows the mapped source tables
 * hold now will not be mirrored.  Say so once, as events and on the
 * checkpoint (doctor's existing_rows), so that healthy is never mistaken
 * for complete.
 */
static void
note_go_forward(void)
{
	List	   *tables = ash_census_tables_with_rows(cfg);
	ListCell   *lc;

	foreach(lc, tables)
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.go_forward_rows_not_copied sink=%s table=%s",
						cfg->sink_name, (char *) lfirst(lc)),
				 errhint("The table's existing rows are not mirrored; snapshot => 'v1' copies them (docs/snapshots.md).")));
	ash_checkpoint_note_uncopied(ckey, tables);
}

/*
 * The end of the WAL inserted so far, as XLogFlush accepts it: at a page
 * boundary the insert position points past the next page's header, which
 * nothing has been written to yet ("request to flush past end of
 * generated WAL"); every record inserted ends at or before the boundary.
 */
static XLogRecPtr
inserted_wal_end(void)
{
	XLogRecPtr	p = GetXLogInsertRecPtr();

	if (p % XLOG_BLCKSZ <= SizeOfXLogLongPHD)
		p -= p % XLOG_BLCKSZ;
	return p;
}

static void
run_session(void)
{
	AshConn    *conn;
	uint32		timeline;
	XLogRecPtr	xlogpos;
	AshBinding	binding;
	char		appname[NAMEDATALEN];
	bool		slot_created = false;
	AshSlotStart slot_start = {0};
	bool		slot_armed = false;
	bool		snapshot = ash_snapshot_configured(cfg);
	AshSnapshotPhase phase = ASH_SNAPSHOT_NONE;
	XLogRecPtr	append_frontier;

	MemoryContextReset(session_cxt);
	MemoryContextSwitchTo(session_cxt);

	check_key_families();
	{
		const AshDecoderInfo *dec = ash_decoder_info(cfg->decoder);

		if (dec == NULL || !dec->built)
			ash_halt("decoder_capability_unsupported", "decoder %s is not built into this version",
					 cfg->decoder);
		is_wal2json = strcmp(dec->name, "wal2json") == 0;
		is_pglogical = strcmp(dec->name, "pglogical") == 0;
		/* pgoutput's capabilities only (ash_replicant_start refuses them too) */
		if (strcmp(dec->name, "pgoutput") != 0 &&
			(cfg->streaming || cfg->failover || cfg->binary_transfer))
			ash_halt("decoder_capability_unsupported",
					 "streaming, failover and binary_transfer need decoder pgoutput");

		/*
		 * The route rules ash_replicant_start judges (route_rules.c), on
		 * the configuration as loaded: a route added since start (a
		 * decoder that cannot deliver it), a horizon changed past a
		 * route's retention, a routed prefix ignored.
		 */
		if (cfg->routes_reason != NULL)
			ash_halt(cfg->routes_reason, "%s", cfg->routes_context);
	}
	if (is_pglogical)
		ash_pglogical_session_begin(cfg);
	check_snapshot_settings();

	step = STEP_CONNECT;
	errctx_step(NULL);
	ash_conn_last_sqlstate[0] = '\0';
	ash_syncrep_appname(cfg->sink_name, appname);
	conn = ash_conn_open(cfg->connection, ASH_CONN_REPLICATION, appname);
	stream.conn = conn;
	stream_open = true;
	/* before it takes the slot: doctor tells it from another consumer */
	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.source_pid = PQbackendPID(conn->conn);
	SpinLockRelease(&MySlot->mutex);
	{
		const char *enc = PQparameterStatus(conn->conn, "server_encoding");

		source_encoding = enc != NULL ? pg_char_to_encoding(enc) : -1;
		ash_messages_set_source_encoding(source_encoding);
		source_converts = false;
		if (is_wal2json && source_encoding >= 0 && source_encoding != PG_SQL_ASCII &&
			source_encoding != GetDatabaseEncoding() && GetDatabaseEncoding() != PG_SQL_ASCII)
		{
			Oid			proc;
			bool		own = !IsTransactionState();
			MemoryContext cxt = CurrentMemoryContext;
			ResourceOwner owner = CurrentResourceOwner;

			if (own)
			{
				SetCurrentStatementStartTimestamp();
				StartTransactionCommand();
			}
			proc = FindDefaultConversionProc(source_encoding, GetDatabaseEncoding());
			if (OidIsValid(proc))
				fmgr_info_cxt(proc, &source_conversion, TopMemoryContext);
			if (own)
				CommitTransactionCommand();
			MemoryContextSwitchTo(cxt);
			CurrentResourceOwner = owner;
			if (!OidIsValid(proc))
				ash_halt("source_value_unrepresentable",
						 "no conversion from the source database's encoding into the destination's");
			source_converts = true;
		}
	}

	step = STEP_IDENTIFY;
	ash_source_identify(conn, cfg, &timeline, &xlogpos);

	step = STEP_COVERAGE;
	errctx_step("coverage");
	ash_census_activation(cfg);
	incremental_session = false;
	ash_incr_reset(NULL);		/* judged again from what begin installs */
	if (is_incremental())
	{
		/* a table it cannot copy halts before anything is recorded */
		step = STEP_SNAPSHOT;
		ash_snapshot_incremental_prepare(cfg);
	}

	step = STEP_BIND;
	ash_checkpoint_bind(cfg->sink_name, ckey, timeline, xlogpos, cfg->decoder, &binding);
	/* once per worker process: a crash ends the process */
	if (!guard_started)
		guard_start(binding.commit_lsn);

	step = STEP_SLOT;
	/* an attempt recorded under this checkpoint binds whatever is configured now */
	phase = ash_snapshot_phase(ckey);
	/*
	 * A go-forward mirror that applied nothing yet owes every commit since
	 * its slot was created (ash_replicant_wait_for_slot): a slot it
	 * acknowledged, gone, is as missing as one under a watermark.  (With a
	 * snapshot configured and none recorded, a new slot is copied under.)
	 */
	ash_source_ensure_slot(conn, cfg,
						   !XLogRecPtrIsInvalid(binding.commit_lsn) ? "a watermark exists" :
						   phase != ASH_SNAPSHOT_NONE ? "a snapshot attempt is recorded" :
						   binding.acknowledged && !snapshot ?
						   "the checkpoint acknowledged what the slot sent" : NULL,
						   snapshot && !is_incremental() && phase == ASH_SNAPSHOT_NONE &&
						   XLogRecPtrIsInvalid(binding.commit_lsn),
						   &slot_created, &slot_start, MySlot);
	/*
	 * A slot past what this database remembers: a restore, a promotion, an
	 * advance.  Not judged while another session streams from it (its
	 * position is still moving): that is the source's refusal of
	 * START_REPLICATION, retried and in the end source_slot_in_use.
	 */
	slot_holder_stale = false;
	if (slot_start.slot_active)
	{
		slot_holder_stale = stale_holder(conn);
		strlcpy(ash_conn_last_sqlstate, "55006", sizeof(ash_conn_last_sqlstate));
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: the replication slot is active for another session")));
	}
	ack_recorded = ash_checkpoint_judge_slot(ckey, slot_start.slot_position, slot_created,
											 &slot_armed);

	/*
	 * Only now may ash_replicant_wait_for_slot return: the acknowledgement
	 * judge_slot committed (and flushed) is what makes a later start owe
	 * this slot's commits (source_slot_missing, not a new slot, if it goes).
	 * Released at the slot's creation, a worker ending before that record
	 * left the next start to create a new slot past what was promised.
	 */
	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.slot_ready = true;
	SpinLockRelease(&MySlot->mutex);
	if (slot_created && !snapshot)
		note_go_forward();

	ash_apply_init(cfg, ckey, binding.commit_lsn, binding.end_lsn);
	/* events a snapshot appended sit at their copy's position - 1 */
	append_frontier = binding.commit_lsn;
	if (snapshot && ash_config_is_append_log(cfg))
		append_frontier = Max(append_frontier, ash_snapshot_frontier(ckey));
	/*
	 * The origin check compares the slot with what the log recorded; a
	 * checkpoint that just took the slot's position (of 1.5.0, when an append
	 * log acknowledged nothing past its events, or adopted) with its events
	 */
	ash_append_activate(cfg, ckey, append_frontier,
						slot_armed ? binding.end_lsn : Max(binding.end_lsn, ack_recorded),
						slot_created, slot_start.slot_position);

	/* existing rows first: the stream starts where the copy left off */
	if (is_incremental())
	{
		/* the stream starts now; chunks are copied between its transactions */
		step = STEP_SNAPSHOT;
		ash_snapshot_incremental_begin(cfg, ckey, &slot_start, &binding);
		incremental_session = ash_incr_judging();
		incr_last_ping = 0;
	}
	else if (snapshot || phase != ASH_SNAPSHOT_NONE)
	{
		step = STEP_SNAPSHOT;
		ash_snapshot_run(cfg, ckey, &slot_start, &binding);
	}
	ash_messages_activate(cfg, ckey);

	/* a table back in the publication after a gap, with no snapshot to fill it */
	step = STEP_COVERAGE;
	errctx_step("coverage");
	ash_census_record_publication(cfg, ckey);
	if (!is_wal2json && ash_publication_watched(cfg))
		note_recorded_names(ckey, is_pglogical);

	/* wal2json: the relations its changes refer to, before the first one */
	if (is_wal2json)
	{
		AshWal2jsonState first = {0};

		step = STEP_COVERAGE;
		w2j_ntables = 0;		/* apply's relation cache starts empty */
		wal2json_describe(&first);
	}

	/*
	 * The watermark we resume from may belong to an asynchronous commit of
	 * the previous session that is not on disk yet: flush before reporting
	 * it, or a crash here could lose what the source already forgot.
	 */
	XLogFlush(inserted_wal_end());
	flushed_remote = binding.end_lsn;
	ack_recorded = Max(ack_recorded, binding.end_lsn);
	idle_lsn = InvalidXLogRecPtr;
	open_since = 0;
	begun_lsn = InvalidXLogRecPtr;
	while (!dlist_is_empty(&flush_positions))
		pfree(dlist_container(FlushPosition, node, dlist_pop_head_node(&flush_positions)));

	ash_syncrep_start(conn, cfg->sink_name);
	last_ack_flush = 0;
	ack_deferred = false;
	reply_probe_at = 0;
	step = STEP_START;
	ash_stream_start(&stream, conn, cfg->slot_name, binding.end_lsn, plugin_options(conn));
	slot_busy_failures = 0;
	backoff = ash_reconnect_min_ms;

	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.streaming = true;
	/* a limit waited for is there now; failures in a row still count */
	strlcpy(MySlot->stats.wait_reason, retry_reason() ? retry_reason() : "",
			ASH_REASON_LEN);
	MySlot->stats.census_enabled = cfg->census.enabled;
	MySlot->stats.applied_lsn = binding.commit_lsn;
	MySlot->stats.unapplied_commit_time = 0;
	SpinLockRelease(&MySlot->mutex);
	ereport(LOG,
			(errmsg("ash_replicant event=pipeline.streaming sink=%s start_lsn=%X/%X",
					cfg->sink_name, LSN_FORMAT_ARGS(binding.end_lsn))));

	step = STEP_STREAM;
	session_streaming_at = GetCurrentTimestamp();
	next_census = GetCurrentTimestamp();	/* first census right away */
	paced_from = 0;
	sender_behind = false;
	receive_loop();
}

/*
 * A destination error that says "try again" rather than "this change is
 * wrong": a serialization failure or deadlock with another session, a lock
 * timeout, and, from what a target's trigger reaches (dblink, a foreign
 * table), a server out of connections or shutting down.  Applying the same
 * transaction again can succeed once the other party is gone, so these do
 * not count towards max_command_retries: they are retried with the
 * reconnect back-off while they last, like a source that is down.  Every
 * other class still halts apply_failed after the retries
 * (docs/reasons.md#apply_failed).
 */
static bool
apply_error_transient(int sqlerrcode)
{
	switch (sqlerrcode)
	{
		case ERRCODE_T_R_SERIALIZATION_FAILURE:
		case ERRCODE_T_R_DEADLOCK_DETECTED:
		case ERRCODE_LOCK_NOT_AVAILABLE:
		case ERRCODE_TOO_MANY_CONNECTIONS:
		case ERRCODE_ADMIN_SHUTDOWN:
			return true;
		default:
			return false;
	}
}

/*
 * Classify a caught error.  Returns the reconnect delay in ms; halts (and
 * exits) when the error is terminal.
 */
static long
handle_error(ErrorData *edata, long backoff)
{
	const char *halt = ash_pending_halt;
	char		sqlstate[6];

	ash_pending_halt = NULL;
	strlcpy(sqlstate, unpack_sql_state(edata->sqlerrcode), sizeof(sqlstate));
	locate_constraint_error();

	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.streaming = false;
	MySlot->stats.slot_ready = false;
	MySlot->stats.source_pid = 0;
	SpinLockRelease(&MySlot->mutex);

	/*
	 * A halt or an apply error inside a streamed transaction, which the
	 * source may still roll back: nothing of it may stop the pipeline or
	 * count against the retries yet (its commit LSN is not even known).
	 * Streamed again whole after its commit, it raises the same halt or
	 * error with its commit LSN; rolled back, it never arrives.  A lost
	 * connection streams it again anyway.
	 */
	if (error_in_stream && ash_apply_stream_fallback == NULL &&
		edata->sqlerrcode != ERRCODE_CONNECTION_FAILURE &&
		edata->sqlerrcode != ERRCODE_PROTOCOL_VIOLATION &&
		edata->sqlerrcode != ERRCODE_QUERY_CANCELED)
	{
		ereport(LOG,
				(errmsg("ash_replicant event=apply.stream_deferred sink=%s halt=%s sqlstate=%s",
						cfg->sink_name, halt != NULL ? halt : "none", sqlstate)));
		ash_apply_stream_fallback = halt != NULL ? "halt" : "error";
		halt = NULL;
	}

	/* a first description's addition leaves a record to acknowledge */
	ash_source_columns_halted(cfg, halt != NULL && strcmp(halt, "source_column_added") == 0);
	if (halt != NULL)
		do_halt_detail(halt, NULL, edata->message);

	/* a streamed transaction not applicable as it arrived: stream it whole */
	if (ash_apply_stream_fallback != NULL)
	{
		stream_fallback_lsn = stream.received_lsn;
		stream_fallback_at = GetCurrentTimestamp();
		stream_fallbacks++;
		ereport(LOG,
				(errmsg("ash_replicant event=apply.stream_fallback sink=%s reason=%s received_lsn=%X/%X retry_in_ms=%d",
						cfg->sink_name, ash_apply_stream_fallback,
						LSN_FORMAT_ARGS(stream_fallback_lsn), stream_retry_ms())));
		ash_apply_stream_fallback = NULL;
		return 0;
	}

	/* not a fault: the next session, at once, copies the table again */
	if (session_recopy)
	{
		session_recopy = false;
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.session_end sink=%s cause=snapshot.publication_gap retry_in_ms=0",
						cfg->sink_name)));
		return 0;
	}

	/*
	 * Not a fault either: a value of a type not built in came in binary,
	 * and the next session, at once, streams in text -- no retry of the
	 * transaction that showed it is spent on the switch.
	 */
	if (edata->sqlerrcode == ERRCODE_FEATURE_NOT_SUPPORTED && ash_apply_take_binary_refusal())
	{
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.session_end sink=%s cause=binary_transfer.off retry_in_ms=0",
						cfg->sink_name)));
		return 0;
	}

	/*
	 * A cancel (pg_cancel_backend; no statement_timeout applies to a
	 * worker's statements) asks the worker to give up what it is doing,
	 * not to stop: the session starts again and applies what it gave up,
	 * and no cancel counts towards max_command_retries -- cancels of an
	 * idle worker added up until the next source transaction committed,
	 * and four halted it apply_failed.
	 */
	if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED)
	{
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.session_end sink=%s cause=canceled step=%s retry_in_ms=%ld",
						cfg->sink_name, step_names[step], Min(backoff, 1000))));
		return Min(backoff, 1000);
	}

	if (edata->sqlerrcode == ERRCODE_CONNECTION_FAILURE ||
		edata->sqlerrcode == ERRCODE_PROTOCOL_VIOLATION)
	{
		const char *src = ash_conn_last_sqlstate;
		const char *final;
		const char *context;

		/* connection settings or credentials that waiting cannot fix */
		if (step == STEP_CONNECT && (final = ash_conn_final_failure(&context)) != NULL)
			do_halt_detail(final, src[0] != '\0' ? src : NULL, context);

		/* a source refusal that waiting cannot fix */
		if (src[0] != '\0')
		{
			/*
			 * Undefined object: while streaming, pgoutput's lookup of the
			 * publication.  At START_REPLICATION it is the slot, dropped
			 * since ensure_slot saw it: the next activation tells
			 * (source_slot_missing, or a slot created afresh).
			 */
			if (strcmp(src, "42704") == 0 && step == STEP_STREAM && !is_wal2json)
				do_halt_detail("source_publication_missing", src,
							   "the source has no publication of the configured name");
			/*
			 * A prerequisite of a logical slot the source lacks, as its
			 * settings name it (wal_level, max_replication_slots); one they
			 * do not explain is taken for not logical
			 */
			if (strcmp(src, "55000") == 0 && step == STEP_SLOT)
			{
				const char *refusal = ash_source_slot_refusal(&context);

				do_halt_detail(refusal ? refusal : "source_not_logical", src,
							   refusal ? context : "the source refused to create a logical slot");
			}
			if (strcmp(src, "55000") == 0 && step >= STEP_START)
				do_halt_detail("retention_lost", src,
							   "the source can no longer decode changes from the slot");
			/*
			 * 15.19+: the plugin is not in output_plugin_libraries; the
			 * source checks it whenever it loads the plugin, at the slot's
			 * creation and at every START_REPLICATION
			 */
			if (strcmp(src, "42501") == 0 && (step == STEP_SLOT || step == STEP_START))
				do_halt_detail("decoder_plugin_not_allowed", src,
							   "the source refused the decoder's output plugin to this role");
			/*
			 * pglogical_output refuses an expected_encoding (ours) other
			 * than the source database's: "encoding conversion ... not
			 * supported", at every start
			 */
			if (is_pglogical && strcmp(src, "0A000") == 0 && step == STEP_START)
				do_halt_detail("decoder_capability_unsupported", src,
							   "pglogical cannot send the source database's encoding as the destination's");
			/* the source cannot load the plugin's library (wal2json) */
			if (strcmp(src, "58P01") == 0 && (step == STEP_SLOT || step == STEP_START))
				do_halt_detail("decoder_extension_missing", src,
							   "the source has no library of the decoder's output plugin");
			/*
			 * The source converts every value it sends into the
			 * destination database's encoding (client_encoding): a
			 * character that encoding lacks (22P05), or bytes not valid
			 * in the source's own (22021), fail the same change at every
			 * attempt -- reconnecting would look healthy for ever.
			 */
			if ((strcmp(src, "22P05") == 0 || strcmp(src, "22021") == 0) &&
				(step == STEP_SNAPSHOT || step == STEP_STREAM))
				do_halt_detail("source_value_unrepresentable", src,
							   "the source cannot send a value in the destination database's encoding");
			if (strcmp(src, "42501") == 0 && step == STEP_SNAPSHOT)
				do_halt_detail("privilege_select_missing", src,
							   "the source refused the snapshot a read of a mapped table");
			if (strcmp(src, "42501") == 0 && step == STEP_COVERAGE)
				do_halt_detail("privilege_probe_missing", src,
							   "the source refused the probe connection for lack of privilege");
			if (strcmp(src, "42501") == 0 || strcmp(src, "28000") == 0)
				do_halt_detail("privilege_replication_missing", src,
							   "the source refused the replication connection for lack of privilege");
			if (strcmp(src, "55006") == 0 && !slot_holder_stale && ++slot_busy_failures > 10)
				do_halt_detail("source_slot_in_use", src,
							   "another consumer keeps the replication slot active");
		}
		/* a copy that got further since the last fault starts a new count */
		if (step == STEP_SNAPSHOT)
		{
			uint64		copied;

			SpinLockAcquire(&MySlot->mutex);
			copied = MySlot->stats.snapshot_tables_copied + MySlot->stats.snapshot_rows_committed;
			SpinLockRelease(&MySlot->mutex);
			if (copied != snapshot_copied_at_fault)
				stream_faults = 0;
			snapshot_copied_at_fault = copied;
		}
		if ((step == STEP_STREAM || step == STEP_SNAPSHOT) && ++stream_faults > 1)
		{
			long		delay = ash_reconnect_min_ms;

			for (int i = 1; i < stream_faults && delay < ash_reconnect_max_ms; i++)
				delay *= 2;
			backoff = Max(backoff, Min(delay, ash_reconnect_max_ms));
		}
		/* a source limit: retried, and said in status until it clears */
		if (strcmp(src, "53300") == 0)
			set_wait_reason("source_connection_limit");
		else if (strcmp(src, "53400") == 0)
			set_wait_reason("source_slot_limit");
		/* ... as is a slot another session holds, until the halt above */
		else if (strcmp(src, "55006") == 0 && (step == STEP_SLOT || step == STEP_START))
			set_wait_reason("source_slot_busy");
		else
			set_wait_reason(retry_reason());
		ereport(LOG,
				(errmsg("ash_replicant event=source.fault sink=%s step=%s source_sqlstate=%s retry_in_ms=%ld",
						cfg->sink_name, step_names[step], src[0] ? src : "none", backoff)));
		SpinLockAcquire(&MySlot->mutex);
		MySlot->stats.reconnects++;
		SpinLockRelease(&MySlot->mutex);
		return backoff;
	}

	/* a destination error while applying: never print its text */
	if (apply_error_transient(edata->sqlerrcode))
	{
		long		delay = ash_reconnect_min_ms;

		/* back-off doubling per failure in a row, up to the reconnect cap */
		for (int i = 0; i < transient_failures && delay < ash_reconnect_max_ms; i++)
			delay *= 2;
		delay = Min(delay, ash_reconnect_max_ms);
		transient_failures++;
		set_wait_reason(retry_reason());
		ereport(LOG,
				(errmsg("ash_replicant event=apply.error sink=%s sqlstate=%s step=%s command=%s table=%s commit_lsn=%X/%X xid=%u attempt=transient/%d retry_in_ms=%ld",
						cfg->sink_name, sqlstate, step_names[step],
						ash_apply_errctx.command ? ash_apply_errctx.command : "none",
						ash_apply_errctx.relation ? ash_apply_errctx.relation : "none",
						LSN_FORMAT_ARGS(ash_apply_errctx.commit_lsn),
						ash_apply_errctx.xid, transient_failures, delay)));
		SpinLockAcquire(&MySlot->mutex);
		MySlot->stats.reconnects++;
		SpinLockRelease(&MySlot->mutex);
		return delay;
	}
	apply_failures++;
	ereport(LOG,
			(errmsg("ash_replicant event=apply.error sink=%s sqlstate=%s step=%s command=%s table=%s commit_lsn=%X/%X xid=%u attempt=%d/%d",
					cfg->sink_name, sqlstate, step_names[step],
					ash_apply_errctx.command ? ash_apply_errctx.command : "none",
					ash_apply_errctx.relation ? ash_apply_errctx.relation : "none",
					LSN_FORMAT_ARGS(ash_apply_errctx.commit_lsn),
					ash_apply_errctx.xid,
					apply_failures, cfg->max_command_retries + 1),
			 edata->sqlerrcode == ERRCODE_INTERNAL_ERROR ?
			 errdetail_internal("at %s:%d", edata->filename ? edata->filename : "?", edata->lineno) : 0));
	if (apply_failures > cfg->max_command_retries)
		do_halt("apply_failed", sqlstate);
	SpinLockAcquire(&MySlot->mutex);
	MySlot->stats.reconnects++;
	SpinLockRelease(&MySlot->mutex);
	return Min(backoff, 1000);
}

/*
 * SIGQUIT: the postmaster orders every process to quit at once, because
 * another one crashed or for an immediate shutdown.  Say so in the slot
 * (the crash-loop guard must not charge the worker with that death), then
 * quit as any background worker does.
 */
static void
pipeline_quit(SIGNAL_ARGS)
{
	if (MySlot != NULL)
		MySlot->quit_signalled = true;
	SignalHandlerForCrashExit(postgres_signal_arg);
}

void
ash_pipeline_main(Datum main_arg)
{
	int			slotno = DatumGetInt32(main_arg);
	char	   *sink_name;

	memcpy(&my_generation, MyBgworkerEntry->bgw_extra, sizeof(int64));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	pqsignal(SIGQUIT, pipeline_quit);
	BackgroundWorkerUnblockSignals();

	if (!attach_slot(slotno))
		proc_exit(0);			/* superseded before we started */
	guard_take_crash();

	BackgroundWorkerInitializeConnectionByOid(MySlot->dboid, InvalidOid, 0);

	ash_worker_session_settings();

	pipeline_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant pipeline",
										 ALLOCSET_DEFAULT_SIZES);
	session_cxt = AllocSetContextCreate(pipeline_cxt, "ash_replicant session",
										ALLOCSET_DEFAULT_SIZES);

	sink_name = pstrdup(MySlot->sink_name);
	pgstat_report_appname(psprintf("ash_replicant %s", sink_name));

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	{
		MemoryContext old = MemoryContextSwitchTo(pipeline_cxt);

		cfg = ash_config_load(sink_name);
		MemoryContextSwitchTo(old);
	}
	catalogs_current = extension_version_current();
	CommitTransactionCommand();

	if (cfg->start_generation != my_generation)
		leave_cleanly();		/* a newer start is on its way */

	/*
	 * The checkpoint row this pipeline owns is keyed by the configured
	 * identity (a session verifies the source against it): a halt before
	 * the first connection still marks that row when it exists.
	 */
	{
		MemoryContext old = MemoryContextSwitchTo(pipeline_cxt);

		ckey = palloc(sizeof(AshCheckpointKey));
		ckey->system_id = pstrdup(cfg->source_system_identifier);
		ckey->database = pstrdup(cfg->source_database);
		ckey->slot_name = pstrdup(cfg->slot_name);
		MemoryContextSwitchTo(old);
	}

	ereport(LOG, (errmsg("ash_replicant event=pipeline.started sink=%s", cfg->sink_name)));
	guard_back_off();

	/* the catalogs must be the ones this library was built for */
	if (!catalogs_current)
		do_halt_detail("extension_version_mismatch", NULL,
					   "the installed extension is not this library's version: ALTER EXTENSION ash_replicant UPDATE");

	attach_origin();

	backoff = ash_reconnect_min_ms;
	for (;;)
	{
		long		delay;

		PG_TRY();
		{
			run_session();
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			HOLD_INTERRUPTS();
			MemoryContextSwitchTo(pipeline_cxt);
			edata = CopyErrorData();
			FlushErrorState();
			note_error_location(edata);
			ash_apply_abort();
			guard_applied();
			if (stream_open)
				ash_stream_close(&stream);
			stream_open = false;
			RESUME_INTERRUPTS();

			absorb_reload();
			backoff = backoff_bounded(backoff);
			delay = handle_error(edata, backoff);
			FreeErrorData(edata);
			backoff = Min(backoff * 2, ash_reconnect_max_ms);
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 delay, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		PG_END_TRY();
	}
}
