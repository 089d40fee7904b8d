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

#include "apply.h"

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
 * Record, once, the mapped source tables that held rows when a go-forward
 * slot was created (quoted names; NIL: none): doctor's existing_rows reads
 * it.  Its own transaction.  Catalogs before 1.2.0 have no place for it.
 */
extern void ash_checkpoint_note_uncopied(AshCheckpointKey *key, List *tables);

/* A halt, as recorded: structure only, never a value. */
typedef struct AshHaltRecord
{
	const char *reason;
	const char *cls;			/* "halted" or "misconfigured" */
	const char *sqlstate;		/* NULL when the halt had none */
	XLogRecPtr	lsn;			/* commit LSN it stopped at, or invalid */
	const char *target;			/* the mapping's target, or NULL */
	bool		located;		/* the catalogs have halt_lsn/halt_target */
} AshHaltRecord;

/*
 * Record a halt: the pipelines row (halt generation, reason, class,
 * SQLSTATE and, when located, where it stopped) and, when the checkpoint
 * row exists, its tombstone.  Its own transaction; returns false (after
 * logging status.tombstone_write_failed) on failure.  key may be NULL when
 * the source identity is not known yet.
 */
extern bool ash_checkpoint_record_halt(const char *sink_name, int64 generation,
									   AshCheckpointKey *key, const AshHaltRecord *halt);

#endif							/* ASH_CHECKPOINT_H */
