/*-------------------------------------------------------------------------
 *
 * launcher.c
 *	  The launcher background worker: one per server, supervises pipelines.
 *
 * NOTES
 *	  The launcher connects to ash_replicant.database and, every naptime or
 *	  when woken, reconciles the enabled pipelines in the catalogs with the
 *	  pipeline workers it has started:
 *
 *	  - enabled, not halted in this start generation, no live worker:
 *		claim a shared-memory slot and register a dynamic worker;
 *	  - a live worker whose sink configuration version changed, or whose
 *		pipeline was disabled: ask it to leave (SIGTERM; it exits cleanly);
 *	  - a worker that vanished without a clean exit: record owner_lost in
 *		the slot (in-memory halt leg) and do not restart it until the next
 *		ash_replicant_start (which bumps start_generation).  A worker that
 *		crashed never gets here: the crash restart wipes shared memory, the
 *		new launcher starts a new worker, and the crash-loop guard
 *		(pipeline.c) judges the death.
 *
 *	  With no extension installed, or no enabled pipeline, it supervises
 *	  nothing: it logs that once and sleeps.  A database of that name that
 *	  does not exist kills the launcher connecting to it; the next one
 *	  waits for it without one (wait_for_database), and logs that once.
 *	  Slots of a database dropped since (DROP DATABASE ... WITH (FORCE) of
 *	  this one) are freed once their workers are gone
 *	  (release_gone_databases).
 *	  Errors while reading the catalogs (a lock held past its lock_timeout
 *	  among them) are logged once a minute at most, never crash-loop, and
 *	  change nothing: the running workers go on.
 *
 *	  A launcher terminated (pg_terminate_backend) exits with code 1, so the
 *	  postmaster starts it again; the new one adopts the workers its
 *	  predecessor left running (see LauncherWorker).
 *	  On 0.4.x catalogs (checkpoints keyed by slot only) it supervises
 *	  nothing either and logs once that they need ALTER EXTENSION ... UPDATE:
 *	  a worker started on them could not tell which source a watermark
 *	  belongs to, nor even record its halt.
 *
 *	  SQL functions wake the launcher from an XactCallback at COMMIT, so it
 *	  always reads committed configuration.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/pmsignal.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/pidfile.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "ash_replicant.h"
#include "launcher.h"
#include "origin.h"
#include "pipeline.h"
#include "shmem.h"

/*
 * Launcher-local view of the workers it started, and of those it found
 * running when it started (adopted: a launcher terminated and restarted
 * leaves the pipeline workers of its predecessor running, without their
 * handles).
 */
typedef struct LauncherWorker
{
	BackgroundWorkerHandle *handle;
	bool		adopted;
	TimestampTz last_start;
} LauncherWorker;

static LauncherWorker *workers = NULL;

/* how long the catalog read waits for a lock (lock_timeout) */
#define LAUNCHER_LOCK_TIMEOUT "1s"
/* a catalog read failing the same way is logged at most this often */
#define READ_ERROR_LOG_INTERVAL_MS 60000
static bool wake_registered = false;
static bool wake_pending = false;

/* One enabled pipeline as read from the catalogs. */
typedef struct EnabledPipeline
{
	char		sink_name[ASH_NAME_LEN];
	int64		start_generation;
	int64		halt_generation;	/* -1 when none */
	int64		config_version;
} EnabledPipeline;

void
ash_launcher_register(void)
{
	BackgroundWorker worker;

	/*
	 * Nothing runs inside pg_upgrade's own server starts: a pipeline would
	 * apply and acknowledge there with transaction ids the new cluster does
	 * not have yet, and a launcher connected to a database would keep
	 * pg_upgrade from recreating it.
	 */
	if (IsBinaryUpgrade)
		return;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	/*
	 * A launcher that exits (terminated, or an error it could not handle)
	 * comes back, as PostgreSQL's own logical replication launcher does;
	 * the postmaster starts none while the server shuts down.
	 */
	worker.bgw_restart_time = 5;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "ash_replicant");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "ash_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "ash_replicant launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "ash_replicant launcher");
	RegisterBackgroundWorker(&worker);
}

/* ---------------------------------------------------------------------
 * Waking the launcher at commit.
 * ---------------------------------------------------------------------
 */
static void
launcher_wake_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			if (wake_pending && AshShmem != NULL)
			{
				pid_t		pid;

				LWLockAcquire(AshShmem->lock, LW_SHARED);
				pid = AshShmem->launcher_pid;
				if (pid != 0 && AshShmem->launcher_latch != NULL)
					SetLatch(AshShmem->launcher_latch);
				LWLockRelease(AshShmem->lock);
			}
			wake_pending = false;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			wake_pending = false;
			break;
		default:
			break;
	}
}

void
ash_launcher_wake_at_commit(void)
{
	if (!wake_registered)
	{
		RegisterXactCallback(launcher_wake_xact_callback, NULL);
		wake_registered = true;
	}
	wake_pending = true;
}

/* ---------------------------------------------------------------------
 * Catalog reading.
 * ---------------------------------------------------------------------
 */

/* read_enabled_pipelines: the extension is not installed here */
#define PIPES_ABSENT		(-1)
/* read_enabled_pipelines: the catalogs are 0.4.x's and need an update */
#define PIPES_UPDATE_NEEDED	(-2)
/* the catalog read failed: nothing is known, nothing is changed */
#define PIPES_READ_FAILED	(-3)

/*
 * Read the enabled pipelines into a palloc'd array (in the caller's
 * context).  Returns PIPES_ABSENT or PIPES_UPDATE_NEEDED instead of a count
 * when there is nothing this library may supervise.
 */
static int
read_enabled_pipelines(EnabledPipeline **out)
{
	MemoryContext caller = CurrentMemoryContext;
	int			n = PIPES_ABSENT;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());

	if (!OidIsValid(get_extension_oid("ash_replicant", true)))
		n = PIPES_ABSENT;
	else if (ash_catalogs_slot_only())
		n = PIPES_UPDATE_NEEDED;
	else
	{
		int			ret;

		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		pgstat_report_activity(STATE_RUNNING, "ash_replicant launcher: reading pipelines");
		/*
		 * Enabled in this installation: a pipeline restored from a dump is
		 * enabled in another, and waits for ash_replicant_start here
		 * (destination_restored)
		 */
		ret = SPI_execute(psprintf("SELECT p.sink_name, p.start_generation,"
								   " coalesce(p.halt_generation, -1), s.config_version"
								   " FROM ash_replicant.pipelines p"
								   " JOIN ash_replicant.sinks s USING (sink_name)"
								   " WHERE p.enabled%s ORDER BY p.sink_name",
								   ash_catalogs_bind_installation() ?
								   " AND p.started_in = (SELECT i.installation_id"
								   " FROM ash_replicant.installation i)" : ""),
						  true, 0);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant launcher: pipeline query failed");
		n = (int) SPI_processed;
		*out = MemoryContextAllocZero(caller, sizeof(EnabledPipeline) * Max(n, 1));
		for (int i = 0; i < n; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;
			char	   *name = TextDatumGetCString(SPI_getbinval(tup, desc, 1, &isnull));

			strlcpy((*out)[i].sink_name, name, ASH_NAME_LEN);
			(*out)[i].start_generation = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
			(*out)[i].halt_generation = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
			(*out)[i].config_version = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
		}
		SPI_finish();
	}

	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	return n;
}

/* ---------------------------------------------------------------------
 * Reconciliation.
 * ---------------------------------------------------------------------
 */

/*
 * A pipeline that waits for a free worker or slot is retried at every
 * round (each second or so): a wait is logged when it begins and then once
 * a minute at most (status says it all along), not at every try.
 */
#define WAIT_LOG_INTERVAL_MS 60000

typedef struct WaitLogged
{
	char		key[NAMEDATALEN + 2];	/* event letter, sink name */
	TimestampTz at;
} WaitLogged;

static HTAB *wait_logged = NULL;

/* The wait (event 'w': a worker, 's': a slot) of sink_name: ended is true */
static bool
wait_log_due(char event, const char *sink_name, bool ended)
{
	char		key[NAMEDATALEN + 2] = {0};
	WaitLogged *w;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	key[0] = event;
	strlcpy(key + 1, sink_name, NAMEDATALEN);
	if (ended)
	{
		if (wait_logged != NULL)
			(void) hash_search(wait_logged, key, HASH_REMOVE, NULL);
		return false;
	}
	if (wait_logged == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(key);
		ctl.entrysize = sizeof(WaitLogged);
		wait_logged = hash_create("ash_replicant launcher waits logged", 16, &ctl,
								  HASH_ELEM | HASH_BLOBS);
	}
	w = hash_search(wait_logged, key, HASH_ENTER, &found);
	if (found && !TimestampDifferenceExceeds(w->at, now, WAIT_LOG_INTERVAL_MS))
		return false;
	w->at = now;
	return true;
}

static bool
start_worker(int slotno)
{
	BackgroundWorker worker;
	AshPipelineSlot *slot = &AshShmem->slots[slotno];

	ash_worker_prepare(&worker, "ash_pipeline_main", "ash_replicant pipeline",
					   slot->sink_name, slotno, slot->generation);

	workers[slotno].adopted = false;
	workers[slotno].handle = NULL;
	if (!RegisterDynamicBackgroundWorker(&worker, &workers[slotno].handle))
	{
		if (wait_log_due('w', slot->sink_name, false))
			ereport(LOG,
					(errmsg("ash_replicant event=launcher.worker_register_failed sink=%s reason=worker_processes_exhausted",
							slot->sink_name),
					 errhint("Increase max_worker_processes.")));
		return false;
	}
	(void) wait_log_due('w', slot->sink_name, true);
	workers[slotno].last_start = GetCurrentTimestamp();
	return true;
}

/*
 * Is the worker of this slot gone?  An adopted worker has no handle: its
 * exit callback (pipeline_detach) says it left; a worker that dies without
 * it takes the server through a crash restart, which wipes the slots.
 */
static bool
worker_gone(int slotno)
{
	pid_t		pid;

	if (workers[slotno].handle == NULL)
		return !workers[slotno].adopted || AshShmem->slots[slotno].pid == 0;
	return GetBackgroundWorkerPid(workers[slotno].handle, &pid) == BGWH_STOPPED;
}

/* Under the lock: clear a slot, keeping its spinlock. */
static void
slot_reset(AshPipelineSlot *slot)
{
	slock_t		mutex = slot->mutex;

	memset(slot, 0, sizeof(AshPipelineSlot));
	slot->mutex = mutex;
}

/* Under the lock: ask a live worker to stop (once). */
static void
slot_request_stop(AshPipelineSlot *slot, int slotno)
{
	if (slot->stop_requested)
		return;
	slot->stop_requested = true;
	if (workers[slotno].handle)
		TerminateBackgroundWorker(workers[slotno].handle);
	else if (workers[slotno].adopted && slot->pid != 0)
	{
		/*
		 * Under the lock a worker clears its pid before it exits, so this
		 * pid is that worker's.
		 */
		(void) kill(slot->pid, SIGTERM);
	}
}

/*
 * Is the server shutting down?  This launcher's own SIGTERM says so, and
 * before it, postmaster.pid: the postmaster writes "stopping" there before
 * it signals its children, one after the other -- a postmaster preempted
 * between two of them (a busy machine) let the worker die and this
 * launcher, woken by a lock its terminated holder released, see it gone
 * before its own signal came.  Read only when a worker is gone unsaid.
 */
static bool
server_stopping(void)
{
	FILE	   *f;
	char		line[MAXPGPATH];
	bool		stopping = false;

	if (ShutdownRequestPending)
		return true;
	f = AllocateFile("postmaster.pid", "r");	/* in the data directory */
	if (f == NULL)
		return false;
	for (int n = 1; fgets(line, sizeof(line), f) != NULL; n++)
		if (n == LOCK_FILE_LINE_PM_STATUS)
		{
			stopping = strncmp(line, PM_STATUS_STOPPING, strlen(PM_STATUS_STOPPING)) == 0;
			break;
		}
	FreeFile(f);
	return stopping;
}

/*
 * First pass: settle slots of this database whose worker is gone.  A worker
 * that detached (its exit callback marks the slot EXITED) is settled now,
 * even before the postmaster has reaped it: otherwise the second pass would
 * see an exited slot and restart a worker that was terminated, instead of
 * recording owner_lost.
 */
static void
settle_gone_workers(TimestampTz now)
{
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshPipelineSlot *slot = &AshShmem->slots[i];

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		if ((workers[i].handle == NULL && !workers[i].adopted) ||
			(slot->state != ASH_SLOT_EXITED && !worker_gone(i)))
			continue;

		/*
		 * The worker vanished.  If it did not say it left on purpose it is
		 * owner_lost: remember that in memory for this generation.  Not
		 * while the server shuts down: the postmaster terminates its
		 * background workers all at once, and this launcher, signalled with
		 * them, may see the worker gone before it gets to its own exit.  Nor
		 * when the postmaster died (killed): its workers leave on noticing
		 * it, maybe before this launcher does, and shared memory goes with
		 * the crash restart anyway.
		 */
		if (!slot->exit_clean && !slot->stop_requested &&
			slot->halt_reason[0] == '\0' && !server_stopping() &&
			PostmasterIsAlive())
		{
			strlcpy(slot->halt_reason, "owner_lost", ASH_REASON_LEN);
			strlcpy(slot->halt_class, "halted", sizeof(slot->halt_class));
			slot->halt_generation = slot->generation;
			slot->halted_at = now;
			ereport(LOG,
					(errmsg("ash_replicant event=pipeline.halt sink=%s reason=owner_lost",
							slot->sink_name)));
		}
		slot->state = ASH_SLOT_EXITED;
		slot->pid = 0;
		workers[i].handle = NULL;
		workers[i].adopted = false;
	}
}

/*
 * Second pass, one enabled pipeline: the slot number to (re)start it in, or
 * -1 when it runs (restarted on a configuration or generation change),
 * halted in this generation, backs off, or no slot is free.
 */
static int
slot_to_start(EnabledPipeline *ep, TimestampTz now)
{
	AshPipelineSlot *slot = ash_slot_find(MyDatabaseId, ep->sink_name);
	int			slotno;

	if (ep->halt_generation >= ep->start_generation)
		return -1;				/* halted durably in this generation */

	if (slot == NULL)
	{
		for (int i = 0; i < AshShmem->nslots; i++)
		{
			if (!AshShmem->slots[i].in_use)
			{
				(void) wait_log_due('s', ep->sink_name, true);
				return i;
			}
		}
		if (wait_log_due('s', ep->sink_name, false))
			ereport(LOG,
					(errmsg("ash_replicant event=launcher.no_free_slot sink=%s reason=pipeline_slots_exhausted",
							ep->sink_name),
					 errhint("Increase ash_replicant.max_pipelines.")));
		return -1;
	}

	slotno = slot - AshShmem->slots;
	if (slot->state == ASH_SLOT_STARTING || slot->state == ASH_SLOT_RUNNING)
	{
		/* live: restart on a configuration or generation change */
		if (slot->config_version != ep->config_version ||
			slot->generation != ep->start_generation)
			slot_request_stop(slot, slotno);
		return -1;
	}

	/* exited: halted in memory for this generation? */
	if (slot->halt_reason[0] != '\0' && slot->halt_generation >= ep->start_generation)
		return -1;

	/* back off restarts of a worker that left cleanly */
	if (!TimestampDifferenceExceeds(workers[slotno].last_start, now, ash_reconnect_min_ms))
		return -1;
	return slotno;
}

/* Second pass: start every enabled pipeline that should run and does not. */
static void
start_enabled(EnabledPipeline *pipes, int npipes, TimestampTz now)
{
	for (int p = 0; p < npipes; p++)
	{
		EnabledPipeline *ep = &pipes[p];
		int			slotno = slot_to_start(ep, now);
		AshPipelineSlot *slot;

		if (slotno < 0)
			continue;

		/* (Re)initialise the slot for this generation. */
		slot = &AshShmem->slots[slotno];
		slot_reset(slot);
		slot->in_use = true;
		strlcpy(slot->sink_name, ep->sink_name, ASH_NAME_LEN);
		slot->dboid = MyDatabaseId;
		slot->generation = ep->start_generation;
		slot->config_version = ep->config_version;
		slot->state = ASH_SLOT_STARTING;
		slot->started_at = now;
		if (!start_worker(slotno))
		{
			/* status: worker_processes_exhausted until a start succeeds */
			slot->state = ASH_SLOT_EXITED;
			slot->register_failed = true;
		}
	}
}

/* Third pass: slots whose pipeline is no longer enabled. */
static void
release_disabled(EnabledPipeline *pipes, int npipes)
{
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshPipelineSlot *slot = &AshShmem->slots[i];
		bool		enabled = false;

		if (!slot->in_use || slot->dboid != MyDatabaseId)
			continue;
		for (int p = 0; p < npipes && !enabled; p++)
			enabled = strcmp(pipes[p].sink_name, slot->sink_name) == 0;
		if (enabled)
			continue;
		if (slot->state == ASH_SLOT_STARTING || slot->state == ASH_SLOT_RUNNING)
			slot_request_stop(slot, i);
		else
			slot_reset(slot);	/* stopped deliberately: forget everything, halts too */
	}
}

/*
 * Slots of a database that is gone.  DROP DATABASE ... WITH (FORCE) of
 * ash_replicant.database terminates its pipeline workers and the launcher
 * with them: the slots, keyed by the dropped database's OID, stay taken,
 * and no launcher of the database created again under the name would ever
 * free them (it looks at its own OID only) -- its pipelines waited
 * pipeline_slots_exhausted until a server restart.  A slot is freed only
 * when its worker detached (pid 0, exited) and pg_database no longer holds
 * its OID: no process can be connected to a database that DROP DATABASE
 * removed, so none uses the slot any more.
 */
static void
release_gone_databases(void)
{
	Oid		   *candidates = palloc(sizeof(Oid) * AshShmem->nslots);
	Oid		   *gone = palloc(sizeof(Oid) * AshShmem->nslots);
	int			ncand = 0;
	int			ngone = 0;
	int			nfreed = 0;

	LWLockAcquire(AshShmem->lock, LW_SHARED);
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshPipelineSlot *slot = &AshShmem->slots[i];
		bool		seen = false;

		if (!slot->in_use || slot->dboid == MyDatabaseId ||
			slot->state != ASH_SLOT_EXITED || slot->pid != 0)
			continue;
		for (int c = 0; c < ncand && !seen; c++)
			seen = candidates[c] == slot->dboid;
		if (!seen)
			candidates[ncand++] = slot->dboid;
	}
	LWLockRelease(AshShmem->lock);
	if (ncand == 0)
		return;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	for (int c = 0; c < ncand; c++)
		if (!SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(candidates[c])))
			gone[ngone++] = candidates[c];
	CommitTransactionCommand();
	if (ngone == 0)
		return;

	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshPipelineSlot *slot = &AshShmem->slots[i];

		if (!slot->in_use || slot->state != ASH_SLOT_EXITED || slot->pid != 0)
			continue;
		for (int g = 0; g < ngone; g++)
			if (slot->dboid == gone[g])
			{
				slot_reset(slot);
				workers[i].handle = NULL;
				workers[i].adopted = false;
				nfreed++;
				break;
			}
	}
	LWLockRelease(AshShmem->lock);
	if (nfreed > 0)
		ereport(LOG,
				(errmsg("ash_replicant launcher: freed %d pipeline slots of a dropped database", nfreed)));
}

static void
reconcile(EnabledPipeline *pipes, int npipes)
{
	TimestampTz now = GetCurrentTimestamp();

	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	settle_gone_workers(now);
	start_enabled(pipes, npipes, now);
	release_disabled(pipes, npipes);
	LWLockRelease(AshShmem->lock);
}

static void
launcher_on_exit(int code, Datum arg)
{
	if (AshShmem == NULL)
		return;
	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	AshShmem->launcher_pid = 0;
	AshShmem->launcher_latch = NULL;
	LWLockRelease(AshShmem->lock);
}

/*
 * Does pg_database hold this name?  Read as the autovacuum launcher reads
 * it without a database: a plain scan (an index needs pg_class).
 */
static bool
database_exists(const char *name)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	if (name == NULL)
		return false;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	(void) GetTransactionSnapshot();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while (!found && HeapTupleIsValid(tup = heap_getnext(scan, ForwardScanDirection)))
		found = strcmp(NameStr(((Form_pg_database) GETSTRUCT(tup))->datname), name) == 0;
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return found;
}

/*
 * The launcher before this one died connecting to ash_replicant.database:
 * most likely it does not exist, and every launcher would die of it again,
 * a FATAL line every bgw_restart_time for ever.  Connected to no database,
 * this one says so once and looks for the database every naptime; once it
 * exists, it exits to be started again (a process connects only once).
 */
static void
wait_for_database(void)
{
	bool		logged = false;

	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	for (;;)
	{
		bool		exists;

		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			proc_exit(0);
		exists = database_exists(ash_database);
		if (exists)
		{
			AshShmem->launcher_connecting = false;
			ereport(LOG,
					(errmsg("ash_replicant launcher: database \"%s\" exists now; starting again to connect to it",
							ash_database)));
			proc_exit(1);
		}
		if (!logged)
			ereport(LOG,
					(errmsg("ash_replicant launcher: database \"%s\" (ash_replicant.database) does not exist; supervising nothing until it is created",
							ash_database ? ash_database : "")));
		logged = true;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 ash_naptime_ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

void
ash_launcher_main(Datum main_arg)
{
	volatile bool logged_idle = false;
	volatile bool logged_absent = false;
	volatile bool origins_to_sweep = true;
	volatile bool logged_update = false;
	volatile int last_read_error = 0;
	volatile TimestampTz last_read_error_logged = 0;
	MemoryContext loop_cxt;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	/* a shutdown request is serviced at the top of the loop */
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	if (AshShmem == NULL)
		ereport(FATAL, (errmsg("ash_replicant launcher: shared memory not initialised")));

	/* only launchers write it, one at a time */
	if (AshShmem->launcher_connecting)
		wait_for_database();
	AshShmem->launcher_connecting = true;
	BackgroundWorkerInitializeConnection(ash_database, NULL, 0);
	AshShmem->launcher_connecting = false;

	/*
	 * The catalog read waits for a lock at most this long, then the loop
	 * goes round: a lock held by a prepared transaction (never released by
	 * a shutdown) or a long VACUUM FULL would otherwise keep the launcher
	 * from its shutdown request and from its supervision.
	 */
	SetConfigOption("lock_timeout", LAUNCHER_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);

	LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
	if (AshShmem->launcher_pid != 0)
	{
		LWLockRelease(AshShmem->lock);
		ereport(LOG, (errmsg("ash_replicant launcher already running; exiting")));
		proc_exit(0);
	}
	AshShmem->launcher_pid = MyProcPid;
	AshShmem->launcher_latch = &MyProc->procLatch;

	/*
	 * Slots outlive a launcher restart as memory of halts, and with the
	 * workers a terminated launcher left running: those are adopted (asked
	 * to stop by their pid, known gone by their exit callback).  A worker
	 * registered but not yet attached finds its slot taken back and leaves;
	 * it is started again.
	 */
	workers = MemoryContextAllocZero(TopMemoryContext,
									 sizeof(LauncherWorker) * AshShmem->nslots);
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshPipelineSlot *slot = &AshShmem->slots[i];

		if (slot->in_use && slot->state != ASH_SLOT_EXITED && slot->pid == 0)
			slot->state = ASH_SLOT_EXITED;
		workers[i].adopted = slot->in_use && slot->state == ASH_SLOT_RUNNING &&
			slot->pid != 0;
	}
	LWLockRelease(AshShmem->lock);
	before_shmem_exit(launcher_on_exit, (Datum) 0);
	loop_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant launcher loop",
									 ALLOCSET_DEFAULT_SIZES);

	ereport(LOG, (errmsg("ash_replicant launcher started")));

	for (;;)
	{
		EnabledPipeline *pipes = NULL;
		int			npipes = 0;
		MemoryContext old;

		CHECK_FOR_INTERRUPTS();

		/*
		 * Exit code 1: the postmaster starts a terminated launcher again
		 * (bgw_restart_time), never one stopped by its shutdown.
		 */
		if (ShutdownRequestPending)
			proc_exit(1);
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}

		MemoryContextReset(loop_cxt);
		old = MemoryContextSwitchTo(loop_cxt);

		PG_TRY();
		{
			npipes = read_enabled_pipelines(&pipes);
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			/* log once per nap; never crash-loop on a catalog problem */
			MemoryContextSwitchTo(loop_cxt);
			edata = CopyErrorData();
			FlushErrorState();
			AbortCurrentTransaction();
			MemoryContextSwitchTo(loop_cxt);
			npipes = PIPES_READ_FAILED;
			pipes = NULL;

			/*
			 * DROP EXTENSION between our existence check and the query is
			 * not an error: the extension is simply gone.
			 */
			if (edata->sqlerrcode == ERRCODE_UNDEFINED_TABLE ||
				edata->sqlerrcode == ERRCODE_INVALID_SCHEMA_NAME ||
				edata->sqlerrcode == ERRCODE_UNDEFINED_OBJECT)
				npipes = PIPES_ABSENT;
			else if (edata->sqlerrcode != last_read_error ||
					 TimestampDifferenceExceeds(last_read_error_logged, GetCurrentTimestamp(),
												READ_ERROR_LOG_INTERVAL_MS))
			{
				/* a lock held for minutes says so once a minute, not per try */
				ereport(LOG,
						(errmsg("ash_replicant launcher: could not read the pipelines (sqlstate %s); retrying",
								unpack_sql_state(edata->sqlerrcode))));
				last_read_error = edata->sqlerrcode;
				last_read_error_logged = GetCurrentTimestamp();
			}
			FreeErrorData(edata);
		}
		PG_END_TRY();

		if (npipes == PIPES_ABSENT)
		{
			if (!logged_absent)
				ereport(LOG,
						(errmsg("ash_replicant launcher: extension not installed in database \"%s\"; supervising nothing",
								ash_database)));
			logged_absent = true;
			/* DROP EXTENSION left the sinks' origins (each holds a slot) */
			if (origins_to_sweep)
				origins_to_sweep = ash_origin_drop_orphans() > 0;
		}
		else
		{
			logged_absent = false;
			origins_to_sweep = true;
		}

		if (npipes == PIPES_UPDATE_NEEDED)
		{
			if (!logged_update)
				ereport(LOG,
						(errmsg("ash_replicant event=launcher.update_required reason=extension_version_mismatch"),
						 errdetail("The installed catalogs key checkpoints by slot name only (version 0.4); this library supervises nothing on them."),
						 errhint("Record the bindings and run ALTER EXTENSION ash_replicant UPDATE, see docs/operations.md, \"Upgrading from 0.4.0\".")));
			logged_update = true;
		}
		else
			logged_update = false;

		/*
		 * A failed read knows nothing of which pipelines are enabled: the
		 * running ones are left alone (reconciling with none would stop
		 * them all), gone workers are still settled.
		 */
		if (npipes != PIPES_READ_FAILED)
			last_read_error = 0;
		if (npipes == PIPES_READ_FAILED)
		{
			LWLockAcquire(AshShmem->lock, LW_EXCLUSIVE);
			settle_gone_workers(GetCurrentTimestamp());
			LWLockRelease(AshShmem->lock);
			MemoryContextSwitchTo(old);
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(ash_naptime_ms, ash_reconnect_min_ms), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			continue;
		}
		if (npipes < 0)
			npipes = 0;

		/* one line says why nothing is supervised, not two */
		if (npipes == 0 && !logged_idle && !logged_absent && !logged_update)
		{
			ereport(LOG, (errmsg("ash_replicant launcher: no enabled pipeline; supervising nothing")));
			logged_idle = true;
		}
		else if (npipes > 0)
			logged_idle = false;

		release_gone_databases();
		reconcile(pipes, npipes);
		MemoryContextSwitchTo(old);

		(void) WaitLatch(MyLatch,
						 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 npipes > 0 ? Min(ash_naptime_ms, ash_reconnect_min_ms) : ash_naptime_ms,
						 PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
