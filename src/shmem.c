/*-------------------------------------------------------------------------
 *
 * shmem.c
 *	  Shared-memory pipeline slots.
 *
 * NOTES
 *	  One slot per running (or recently halted) pipeline, claimed by the
 *	  launcher before it registers the worker and released by the launcher
 *	  once the worker is gone and nothing needs remembering.  The slot
 *	  identity fields (in_use, names, generation, pid, stop_requested, halt
 *	  leg) are protected by AshShmem->lock; the statistics by the slot's
 *	  spinlock so the worker can publish them cheaply.
 *
 *	  A slot whose worker died without writing a halt (pid == 0 after it had
 *	  attached, not stop_requested) is how status tells owner_lost.
 *
 *	  A crash restart (a backend died abnormally) wipes shared memory, and
 *	  with it what the crash-loop guard (pipeline.c) needs to know: did the
 *	  pipeline worker itself die, and while applying which transaction?  The
 *	  postmaster reads that from the old segment just before it is
 *	  detached (an on_shmem_exit callback, which runs once every child is
 *	  gone) and puts it into the new one.  The postmaster's own memory is
 *	  all that survives a crash restart, and nothing else: a restart of the
 *	  whole server forgets it, which is the point -- only a crash of the
 *	  worker under the same postmaster is the worker's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/memutils.h"

#include "ash_replicant.h"
#include "shmem.h"

AshShared  *AshShmem = NULL;
AshCrashRecord *AshCrashes = NULL;

/* postmaster only: the crash records carried across a crash restart */
static AshCrashRecord *carried = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
ash_shmem_size(void)
{
	return add_size(offsetof(AshShared, slots),
					mul_size(ash_max_pipelines, sizeof(AshPipelineSlot)));
}

static Size
ash_crashes_size(void)
{
	return mul_size(ash_max_pipelines, sizeof(AshCrashRecord));
}

/*
 * Postmaster, shared memory about to go (a crash restart, or the
 * postmaster's exit): keep the crash records, adding one for every
 * pipeline worker that died by itself -- attached and running, never
 * detached (every exit of its own detaches, pipeline.c), and not told to
 * quit by the postmaster (the quit order of a crash restart or an
 * immediate shutdown is what every other process gets).  No child runs
 * now, so no lock; nothing here may fail.
 */
/*
 * With every entry pending: one whose sink no worker runs for now (it died
 * and waits for a pipeline slot, or was stopped since, and its next start
 * is a fresh one).  Its next worker starts without the record -- without
 * its back-off -- while the dying workers' records are kept: at most one
 * per slot, as many as there are entries.  Before, a crash found no entry
 * and was not counted at all: a change that killed the worker would have
 * restarted the whole server for ever.
 */
static AshCrashRecord *
evictable_record(void)
{
	for (int j = 0; j < AshShmem->nslots; j++)
	{
		AshCrashRecord *r = &carried[j];
		bool		running = false;

		for (int i = 0; i < AshShmem->nslots && !running; i++)
		{
			AshPipelineSlot *slot = &AshShmem->slots[i];

			running = slot->in_use && slot->state == ASH_SLOT_RUNNING && slot->pid != 0 &&
				slot->dboid == r->dboid && strcmp(slot->sink_name, r->sink_name) == 0;
		}
		if (!running)
			return r;
	}
	return NULL;
}

static void
ash_crash_carry(int code, Datum arg)
{
	if (AshShmem == NULL || AshCrashes == NULL || carried == NULL)
		return;
	memcpy(carried, AshCrashes, ash_crashes_size());
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshPipelineSlot *slot = &AshShmem->slots[i];
		AshCrashRecord *rec = NULL;
		AshCrashRecord *spare = NULL;

		if (!slot->in_use || slot->state != ASH_SLOT_RUNNING || slot->pid == 0 ||
			slot->quit_signalled)
			continue;
		for (int j = 0; j < AshShmem->nslots; j++)
		{
			AshCrashRecord *r = &carried[j];

			if (r->dboid == slot->dboid && strcmp(r->sink_name, slot->sink_name) == 0)
			{
				rec = r;
				break;
			}
			if (spare == NULL && (r->dboid == InvalidOid || !r->pending))
				spare = r;
		}
		if (rec == NULL)
		{
			if (spare == NULL)
				spare = evictable_record();
			if (spare == NULL)
				continue;		/* cannot happen: one entry per slot */
			rec = spare;
			memset(rec, 0, sizeof(*rec));
			rec->dboid = slot->dboid;
			strlcpy(rec->sink_name, slot->sink_name, ASH_NAME_LEN);
		}
		if (rec->generation != slot->generation)
			rec->streak = 0;
		rec->generation = slot->generation;
		rec->pending = true;
		rec->applying_lsn = slot->applying_lsn;
		rec->applying_xid = slot->applying_xid;
		rec->streak++;
	}
	AshShmem = NULL;
	AshCrashes = NULL;
}

static void
ash_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(ash_shmem_size(), ash_crashes_size()));
	RequestNamedLWLockTranche("ash_replicant", 1);
}

static void
ash_shmem_startup_hook(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	AshShmem = ShmemInitStruct("ash_replicant", ash_shmem_size(), &found);
	if (!found)
	{
		memset(AshShmem, 0, ash_shmem_size());
		AshShmem->lock = &(GetNamedLWLockTranche("ash_replicant"))->lock;
		AshShmem->nslots = ash_max_pipelines;
		for (int i = 0; i < AshShmem->nslots; i++)
			SpinLockInit(&AshShmem->slots[i].mutex);
	}
	AshCrashes = ShmemInitStruct("ash_replicant crashes", ash_crashes_size(), &found);
	if (!found)
	{
		if (carried != NULL)
			memcpy(AshCrashes, carried, ash_crashes_size());
		else
			memset(AshCrashes, 0, ash_crashes_size());
	}
	LWLockRelease(AddinShmemInitLock);

	/* the postmaster carries the crash records across a crash restart */
	if (!IsUnderPostmaster)
	{
		if (carried == NULL)
			carried = MemoryContextAllocZero(TopMemoryContext, ash_crashes_size());
		on_shmem_exit(ash_crash_carry, (Datum) 0);
	}
}

void
ash_shmem_request(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = ash_shmem_request_hook;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = ash_shmem_startup_hook;
}

void
ash_shmem_startup(void)
{
	ash_shmem_startup_hook();
}

void
ash_require_shmem(void)
{
	if (AshShmem == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ash_replicant: the library is not loaded through shared_preload_libraries"),
				 errhint("Add ash_replicant to shared_preload_libraries and restart the server.")));
}

AshPipelineSlot *
ash_slot_find(Oid dboid, const char *sink_name)
{
	Assert(AshShmem != NULL);
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshPipelineSlot *slot = &AshShmem->slots[i];

		if (slot->in_use && slot->dboid == dboid &&
			strcmp(slot->sink_name, sink_name) == 0)
			return slot;
	}
	return NULL;
}

AshCrashRecord *
ash_crash_find(Oid dboid, const char *sink_name)
{
	Assert(AshCrashes != NULL);
	for (int i = 0; i < AshShmem->nslots; i++)
	{
		AshCrashRecord *rec = &AshCrashes[i];

		if (rec->dboid == dboid && strcmp(rec->sink_name, sink_name) == 0)
			return rec;
	}
	return NULL;
}

bool
ash_pipeline_is_running(const char *sink_name)
{
	int32		source_pid;

	return ash_pipeline_source_pid(sink_name, &source_pid);
}

bool
ash_pipeline_source_pid(const char *sink_name, int32 *source_pid)
{
	AshPipelineSlot *slot;
	bool		running = false;

	*source_pid = 0;
	if (AshShmem == NULL)
		return false;
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	slot = ash_slot_find(MyDatabaseId, sink_name);
	if (slot != NULL && (slot->state == ASH_SLOT_STARTING ||
						 slot->state == ASH_SLOT_RUNNING))
	{
		running = true;
		SpinLockAcquire(&slot->mutex);
		*source_pid = slot->stats.source_pid;
		SpinLockRelease(&slot->mutex);
	}
	LWLockRelease(AshShmem->lock);
	return running;
}

void
ash_worker_prepare(BackgroundWorker *w, const char *function, const char *type,
				   const char *sink_name, int slotno, int64 generation)
{
	memset(w, 0, sizeof(*w));
	w->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w->bgw_start_time = BgWorkerStart_RecoveryFinished;
	w->bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(w->bgw_library_name, BGW_MAXLEN, "ash_replicant");
	snprintf(w->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(w->bgw_name, BGW_MAXLEN, "%s %s", type, sink_name);
	snprintf(w->bgw_type, BGW_MAXLEN, "%s", type);
	w->bgw_main_arg = Int32GetDatum(slotno);
	memcpy(w->bgw_extra, &generation, sizeof(int64));
	w->bgw_notify_pid = MyProcPid;
}

const char *
ash_unsupervised_reason(void)
{
	char	   *here;

	if (AshShmem == NULL)
		return "library_not_preloaded";
	if (AshShmem->launcher_pid == 0)
		return "launcher_not_running";
	here = get_database_name(MyDatabaseId);
	if (ash_database == NULL || here == NULL || strcmp(ash_database, here) != 0)
		return "launcher_database_mismatch";
	return NULL;
}
