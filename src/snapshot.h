/*-------------------------------------------------------------------------
 *
 * snapshot.h
 *	  Snapshots of existing rows (snapshot => 'v1' and 'incremental').
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SNAPSHOT_H
#define ASH_SNAPSHOT_H

#include "access/xlogdefs.h"

#include "apply.h"
#include "checkpoint.h"
#include "config.h"
#include "libpq_conn.h"
#include "source_slot.h"

typedef enum AshSnapshotPhase
{
	ASH_SNAPSHOT_NONE,			/* no snapshot under this checkpoint */
	ASH_SNAPSHOT_COPYING,		/* an attempt is armed, tables remain */
	ASH_SNAPSHOT_COMPLETE
} AshSnapshotPhase;

/* Does this pipeline take a snapshot of existing rows? */
extern bool ash_snapshot_configured(AshPipelineConfig *cfg);

/* The snapshot phase recorded on the checkpoint (own transaction). */
extern AshSnapshotPhase ash_snapshot_phase(const AshCheckpointKey *key);

/*
 * Arm (on the first start) or resume the snapshot attempt and copy every
 * table it still lacks; on completion the watermark starts at the slot's
 * position.  Updates *binding to where the stream resumes, and installs
 * the per-table floors apply needs (also when the snapshot completed in an
 * earlier session, or snapshot is off now; an unfinished attempt with
 * snapshot off halts snapshot_state_invalid).  Needs ash_apply_init; runs
 * its own transactions.
 */
extern void ash_snapshot_run(AshPipelineConfig *cfg, AshCheckpointKey *key,
							 const AshSlotStart *start, AshBinding *binding);

/*
 * At the pipeline worker's exit: end the snapshot helpers it started.  A
 * stop ends the worker by SIGTERM, with FATAL, past every error handler; a
 * helper waiting on a lock would otherwise outlive it with its transaction
 * open (the offline recovery functions wait for its locks).
 */
extern void ash_snapshot_helpers_exit(int code, Datum arg);

/*
 * Highest position of an event a snapshot wrote under this checkpoint
 * (copied tables' snapshot LSN - 1), InvalidXLogRecPtr when none: the
 * append-log frontier check must not count them as above the watermark.
 */
extern XLogRecPtr ash_snapshot_frontier(const AshCheckpointKey *key);


/*
 * Incremental snapshots (snapshot => 'incremental'): prepare runs before
 * the checkpoint is bound (a table without a primary key, or with a key
 * the destination cannot order like the source, halts snapshot_unsupported
 * with nothing recorded); begin arms or resumes the attempt and installs
 * what apply judges by; step copies the next chunk when one may be copied
 * now (between source transactions, no batch open).  Helpers may go on
 * copying after step returns (helping): join ends their requests, and must
 * come before anything more of the stream is applied.  The chunk connection
 * lives until the next session's prepare (or the worker's exit).
 */
typedef enum AshIncrStep
{
	ASH_INCR_STEP_NONE,			/* no attempt in progress */
	ASH_INCR_STEP_CHUNK,		/* a chunk committed */
	ASH_INCR_STEP_WAIT_WINDOWS, /* max_pending_chunks windows are open */
	ASH_INCR_STEP_WAIT_XIDS,	/* the source does not show a delivered
								 * transaction yet */
	ASH_INCR_STEP_WAIT_LOCK		/* the tables being copied are locked at the
								 * source (ash_snapshot_incremental_pause_ms) */
} AshIncrStep;

extern void ash_snapshot_incremental_prepare(AshPipelineConfig *cfg);
extern void ash_snapshot_incremental_begin(AshPipelineConfig *cfg, AshCheckpointKey *key,
										   const AshSlotStart *start, AshBinding *binding);
extern AshIncrStep ash_snapshot_incremental_step(void);
extern long ash_snapshot_incremental_pause_ms(void);
extern bool ash_snapshot_incremental_helping(void);
extern void ash_snapshot_incremental_join(void);

/* Entry point of a snapshot helper worker (snapshot_copier.c). */
extern PGDLLEXPORT void ash_snapshot_copier_main(Datum main_arg);

/* Entry point of an incremental snapshot's helper (snapshot_incr.c). */
extern PGDLLEXPORT void ash_snapshot_incr_helper_main(Datum main_arg);

#endif							/* ASH_SNAPSHOT_H */
