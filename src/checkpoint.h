/*-------------------------------------------------------------------------
 *
 * checkpoint.h
 *	  Checkpoint binding (README.md#how-apply-works) and halt tombstones (README.md#how-apply-works).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CHECKPOINT_H
#define ASH_CHECKPOINT_H

#include "access/xlogdefs.h"

/* Identity of the checkpoint row a pipeline writes. */
typedef struct AshCheckpointKey
{
	char	   *system_id;
	char	   *database;
	char	   *slot_name;
} AshCheckpointKey;

typedef struct AshBinding
{
	XLogRecPtr	commit_lsn;		/* durable watermark */
	XLogRecPtr	end_lsn;		/* end of that commit: the restart point */
	bool		created;		/* no checkpoint existed before */
} AshBinding;

/*
 * Bind this pipeline to its checkpoint row under the per-slot lock: create
 * it, or check identity, timeline and watermark against the source.  Halts
 * with the conflict's reason.  Runs its own destination transaction.
 */
extern void ash_checkpoint_bind(const char *sink_name, AshCheckpointKey *key,
								uint32 timeline, XLogRecPtr source_flush,
								const char *decoder, AshBinding *out);

/*
 * Record a halt: the pipelines row (halt generation, reason, class) and,
 * when the checkpoint row exists, its tombstone.  Its own transaction;
 * returns false (after logging status.tombstone_write_failed) on failure.
 * key may be NULL when the source identity is not known yet.
 */
extern bool ash_checkpoint_record_halt(const char *sink_name, int64 generation,
									   AshCheckpointKey *key, const char *reason,
									   const char *cls, const char *sqlstate);

#endif							/* ASH_CHECKPOINT_H */
