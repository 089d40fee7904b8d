/*-------------------------------------------------------------------------
 *
 * origin.c
 *	  The replication origins mirrored writes are tagged with.
 *
 * NOTES
 *	  Every destination transaction a pipeline commits carries the
 *	  replication origin named for its sink ("ash_replicant_<sink>"), as
 *	  native logical replication tags the changes its apply workers make.
 *	  Downstream, a logical decoding consumer then tells mirrored changes
 *	  from local ones: PostgreSQL 16+ subscriptions with origin = none skip
 *	  them, and a pipeline of ours configured with origin => 'none' skips
 *	  them too (apply.c), so two servers may mirror each other's tables
 *	  without sending each change around for ever.
 *
 *	  PostgreSQL 15 lets one process at a time hold an origin, so a
 *	  snapshot's helper copiers (snapshot_copier.c) tag their copies with
 *	  origins of their own, "ash_replicant_<sink>_copier<n>", which they
 *	  drop when they end: an origin keeps its replication state slot until
 *	  dropped, and a sink's copiers would otherwise keep several for good.
 *	  A helper stopped by a signal drops it on its way out; one killed
 *	  (SIGKILL, a crash) cannot, so the pipeline worker drops those no
 *	  process holds once its snapshot is complete.  A helper told to stop
 *	  exits on its own time, after its worker: while one of the sink's
 *	  origins is held (ash_origin_held), the recovery functions refuse and a
 *	  worker started again waits before it copies (its helpers would need
 *	  those origins, and the tables the old helper still claims).
 *
 *	  The origin's progress (the source end LSN of the last batch, set at
 *	  each batch commit in apply.c) is informational: the checkpoint row
 *	  stays the only record the pipeline resumes from.  Origins are created
 *	  on first use, so an install updated from 1.2.0 gets them when its
 *	  workers start, and are dropped with the sink (ash_replicant_drop_sink)
 *	  and by the rollback to 1.2.0; DROP EXTENSION runs no code of ours, so
 *	  the launcher drops those left once it finds the extension gone.
 *
 *	  A destination holds at most max_replication_slots origins with
 *	  progress (shared with native subscriptions): a worker that cannot set
 *	  one up waits with status reason destination_origin_limit
 *	  (pipeline.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_replication_origin.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "replication/origin.h"
#include "replication/slot.h"
#include "storage/lmgr.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "origin.h"
#include "shmem.h"
#include "spi_util.h"

/* the most helper copiers a snapshot runs (shmem.h) */
#define MAX_COPIER (ASH_SNAPSHOT_COPIERS_MAX - 1)

void
ash_origin_name(const char *sink_name, int copier, char *buf)
{
	if (copier == 0)
		snprintf(buf, ASH_ORIGIN_NAME_LEN, "ash_replicant_%s", sink_name);
	else
		snprintf(buf, ASH_ORIGIN_NAME_LEN, "ash_replicant_%s_copier%d", sink_name, copier);
}

bool
ash_origin_names_collide(const char *sink_a, const char *sink_b)
{
	char		a[ASH_ORIGIN_NAME_LEN];
	char		b[ASH_ORIGIN_NAME_LEN];

	for (int ca = 0; ca <= MAX_COPIER; ca++)
	{
		ash_origin_name(sink_a, ca, a);
		for (int cb = 0; cb <= MAX_COPIER; cb++)
		{
			ash_origin_name(sink_b, cb, b);
			if (strcmp(a, b) == 0)
				return true;
		}
	}
	return false;
}

bool
ash_origin_attached(void)
{
	return replorigin_session_origin != InvalidRepOriginId;
}

void
ash_origin_attach(const char *sink_name, int copier)
{
	char		name[ASH_ORIGIN_NAME_LEN];
	RepOriginId id;

	if (ash_origin_attached())
		return;
	ash_origin_name(sink_name, copier, name);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	id = replorigin_by_name(name, true);
	if (id == InvalidRepOriginId)
		id = replorigin_create(name);
	/* raises 53400 when every replication state slot is taken */
	replorigin_session_setup(id);
	replorigin_session_origin = id;
	CommitTransactionCommand();
}

/* Every origin of the sink (arg: its name), held or not. */
static void
drop_sink_origins(void *arg)
{
	char		name[ASH_ORIGIN_NAME_LEN];

	for (int c = 0; c <= MAX_COPIER; c++)
	{
		ash_origin_name((const char *) arg, c, name);
		replorigin_drop_by_name(name, true, true);
	}
}

bool
ash_origin_drop_all(const char *sink_name)
{
	if (max_replication_slots == 0)
		return true;			/* no origin could have been created */

	/*
	 * A process of the sink may hold one after its slot says it left (a
	 * worker's origin is released at its very end; a helper copier, told
	 * to stop, exits on its own time): replorigin_drop_by_name then raises.
	 * Dropped in a subtransaction, that is a refusal of the caller's,
	 * every origin kept.
	 */
	return ash_run_catching(drop_sink_origins, (void *) sink_name, ERRCODE_OBJECT_IN_USE);
}

/*
 * Set the origin (arg: its id) up in this session and release it at once:
 * PostgreSQL 15 says which process holds an origin only by refusing it
 * (55006).  One without a replication state slot, none free (53400), is
 * held by nobody.
 */
static void
probe_origin(void *arg)
{
	RepOriginId id = *(RepOriginId *) arg;

	replorigin_session_setup(id);
	replorigin_session_reset();
}

static void
probe_origin_slotted(void *arg)
{
	(void) ash_run_catching(probe_origin, arg, ERRCODE_CONFIGURATION_LIMIT_EXCEEDED);
}

bool
ash_origin_held(const char *sink_name, int first_copier)
{
	char		name[ASH_ORIGIN_NAME_LEN];

	if (max_replication_slots == 0)
		return false;			/* no origin could have been created */
	if (replorigin_session_origin != InvalidRepOriginId)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ash_replicant: this session has a replication origin set up"),
				 errhint("Reset it with pg_replication_origin_session_reset() first.")));

	for (int c = first_copier; c <= MAX_COPIER; c++)
	{
		RepOriginId id;

		ash_origin_name(sink_name, c, name);
		id = replorigin_by_name(name, true);
		if (id == InvalidRepOriginId)
			continue;

		/*
		 * Locked as replorigin_drop_by_name locks it: a helper dropping its
		 * origin on its way out waits until the caller's transaction ends,
		 * so the probe never sets up an origin just dropped (its state slot
		 * would stay taken by an origin that no longer exists).
		 */
		LockSharedObject(ReplicationOriginRelationId, id, 0, AccessShareLock);
		if (replorigin_by_name(name, true) != id)
			continue;
		if (!ash_run_catching(probe_origin_slotted, &id, ERRCODE_OBJECT_IN_USE))
			return true;
	}
	return false;
}

void
ash_origin_set_progress(XLogRecPtr source_end, TimestampTz source_commit_time)
{
	if (!ash_origin_attached())
		return;
	replorigin_session_origin_lsn = source_end;
	replorigin_session_origin_timestamp = source_commit_time;
}

void
ash_origin_release_and_drop(const char *sink_name, int copier)
{
	char		name[ASH_ORIGIN_NAME_LEN];

	if (!ash_origin_attached())
		return;
	ash_origin_name(sink_name, copier, name);
	replorigin_session_reset();
	replorigin_session_origin = InvalidRepOriginId;
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	replorigin_drop_by_name(name, true, true);
	CommitTransactionCommand();
}

/* Drop origin name unless a process holds it (then false). */
static bool
drop_unheld(const char *name)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool dropped = true;

	PG_TRY();
	{
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		replorigin_drop_by_name(name, true, true);
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		/* held by a process (nowait): tried again later */
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		AbortCurrentTransaction();
		dropped = false;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	return dropped;
}

int
ash_origin_drop_copiers(const char *sink_name)
{
	MemoryContext cxt = CurrentMemoryContext;
	char		name[ASH_ORIGIN_NAME_LEN];
	int			dropped = 0;

	if (max_replication_slots == 0)
		return 0;				/* no origin could have been created */
	for (int c = 1; c <= MAX_COPIER; c++)
	{
		bool		exists;

		ash_origin_name(sink_name, c, name);
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		exists = replorigin_by_name(name, true) != InvalidRepOriginId;
		CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
		if (exists && drop_unheld(name))
			dropped++;
	}
	return dropped;
}

int
ash_origin_drop_orphans(void)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *names = NIL;
	ListCell   *lc;
	int			left = 0;
	int			dropped = 0;

	if (max_replication_slots == 0)
		return 0;				/* no origin could have been created */
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	if (SPI_execute("SELECT roname FROM pg_catalog.pg_replication_origin"
					" WHERE roname LIKE 'ash\\_replicant\\_%'", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the replication origins failed");
	/* the list too outlives SPI_finish, which frees SPI's memory */
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext spi = MemoryContextSwitchTo(cxt);

		names = lappend(names, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	foreach(lc, names)
	{
		if (drop_unheld(lfirst(lc)))
			dropped++;
		else
			left++;
	}
	if (dropped > 0)
		ereport(LOG,
				(errmsg("ash_replicant event=launcher.origins_dropped count=%d held=%d",
						dropped, left),
				 errdetail("The extension is not installed: its replication origins are dropped with it.")));
	list_free_deep(names);
	return left;
}
