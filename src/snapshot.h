/*-------------------------------------------------------------------------
 *
 * snapshot.h
 *	  Snapshots of existing rows (snapshot => 'v1').
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
 * Highest position of an event a snapshot wrote under this checkpoint
 * (copied tables' snapshot LSN - 1), InvalidXLogRecPtr when none: the
 * append-log frontier check must not count them as above the watermark.
 */
extern XLogRecPtr ash_snapshot_frontier(const AshCheckpointKey *key);

/* Entry point of a snapshot helper worker (snapshot.c). */
extern PGDLLEXPORT void ash_snapshot_copier_main(Datum main_arg);

#endif							/* ASH_SNAPSHOT_H */
