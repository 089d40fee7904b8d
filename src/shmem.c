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
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"

#include "ash_replicant.h"
#include "shmem.h"

AshShared  *AshShmem = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static Size
ash_shmem_size(void)
{
	return add_size(offsetof(AshShared, slots),
					mul_size(ash_max_pipelines, sizeof(AshPipelineSlot)));
}

static void
ash_shmem_request_hook(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(ash_shmem_size());
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
	LWLockRelease(AddinShmemInitLock);
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

bool
ash_pipeline_is_running(const char *sink_name)
{
	AshPipelineSlot *slot;
	bool		running = false;

	if (AshShmem == NULL)
		return false;
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	slot = ash_slot_find(MyDatabaseId, sink_name);
	if (slot != NULL && (slot->state == ASH_SLOT_STARTING ||
						 slot->state == ASH_SLOT_RUNNING))
		running = true;
	LWLockRelease(AshShmem->lock);
	return running;
}
