/*-------------------------------------------------------------------------
 *
 * checkpoint.h
 *	  The checkpoint row (README.md#how-apply-works): binding, watermark,
 *	  halt tombstones, and every other write of ash_replicant.checkpoints.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CHECKPOINT_H
#define ASH_CHECKPOINT_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

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
	bool		acknowledged;	/* a slot of it was judged (acknowledged_lsn) */
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

/*
 * Parameters of a statement about the row of key: $1..$3 the key (text),
 * then nextra (at most ASH_CHECKPOINT_MAX_PARAMS - 3) more; nulls in SPI's
 * form, NUL-terminated (extra_nulls NULL: none null).  Returns the count.
 */
#define ASH_CHECKPOINT_MAX_PARAMS	16
extern int	ash_checkpoint_key_params(const AshCheckpointKey *key, int nextra,
									  const Oid *extra_types, const Datum *extra_values,
									  const char *extra_nulls, Oid *types, Datum *values,
									  char *nulls);

/*
 * The writes below run inside the caller's transaction, SPI connected,
 * and leave the caller's memory context current.
 */

/*
 * Move the watermark of a batch (apply.c, in the batch's transaction):
 * commit_lsn and end_lsn of its last source commit.  Halts
 * checkpoint_identity_conflict unless exactly our row moves forward.
 */
extern void ash_checkpoint_advance(const AshCheckpointKey *key, XLogRecPtr commit_lsn,
								   XLogRecPtr end_lsn);

/* The digest key witness (messages.c); halts as advance does. */
extern void ash_checkpoint_set_witness(const AshCheckpointKey *key, bytea *witness);

/* An append log's origin floor, written once (apply_append.c). */
extern void ash_checkpoint_set_origin_floor(const AshCheckpointKey *key,
											XLogRecPtr origin_floor);

/*
 * What the source was told (pipeline.c).  A slot only moves past what this
 * database applied (end_lsn) by the acknowledgements the pipeline sends
 * while nothing is to be applied, and each is recorded (acknowledged_lsn)
 * before it is sent.  judge_slot, after the slot step of an activation:
 * halts checkpoint_behind_slot when the slot's confirmed position is past
 * both -- the database restored from a backup, a standby promoted behind
 * it, the slot advanced by another client: the source will not deliver what
 * lies between again.  A checkpoint without an acknowledged position (of
 * an earlier version, or adopted: ash_checkpoint_adopt clears it) or a slot
 * created in this activation takes the slot's position (*armed: it did;
 * the record is flushed to disk before it returns).
 * Returns the position acknowledgements may go to without a new record.
 * record_acknowledged: records lsn and flushes it to disk.  Each runs in a
 * transaction of its own.
 */
extern XLogRecPtr ash_checkpoint_judge_slot(const AshCheckpointKey *key, XLogRecPtr confirmed,
											bool slot_created, bool *armed);
extern void ash_checkpoint_record_acknowledged(const AshCheckpointKey *key, XLogRecPtr lsn);

/*
 * The snapshot attempt (snapshot.c).  arm starts one (phase copying, its
 * position and id, no state yet); set_snapshot_state records its signed
 * state; reopen returns a complete attempt to copying (tables mapped
 * since); complete marks a copying attempt complete and lifts the
 * watermark to just below start_lsn.  arm and complete return false when
 * no row changed.
 */
extern bool ash_checkpoint_snapshot_arm(const AshCheckpointKey *key, XLogRecPtr start_lsn,
										bytea *attempt);
extern void ash_checkpoint_set_snapshot_state(const AshCheckpointKey *key, bytea *state);
extern void ash_checkpoint_snapshot_reopen(const AshCheckpointKey *key);
extern bool ash_checkpoint_snapshot_complete(const AshCheckpointKey *key,
											 XLogRecPtr start_lsn);

/*
 * The contract manifest (judged by contract.c, recorded here).  admit:
 * inside the binding transaction (SPI connected); a first manifest or a
 * pure addition is stored (the watermark is not touched), anything else
 * halts contract_incompatible, or decoder_contract_incompatible for a
 * decoder / table-set switch.  recheck: a census, in its own transaction;
 * additions (and target types widened) are admitted, anything else halts
 * census_drift; returns true when it admitted a change (the caller's
 * cached view of the targets is stale).
 */
extern void ash_contract_admit(const char *sink_name, const char *system_id,
							   const char *database, const char *slot_name);
extern bool ash_contract_recheck(const char *sink_name, const char *system_id,
								 const char *database, const char *slot_name);

/*
 * Recovery (api_recovery.c, the pipeline offline; each returns whether a
 * row changed): reset deletes the row; adopt sets the watermark of our
 * row to commit_lsn and clears its tombstone; create_adopted creates the
 * row at commit_lsn on timeline; acknowledge_timeline re-binds the
 * recorded timeline and clears a source_timeline_changed tombstone.
 */
extern bool ash_checkpoint_reset(const AshCheckpointKey *key);
extern bool ash_checkpoint_adopt(const AshCheckpointKey *key, XLogRecPtr commit_lsn);
extern bool ash_checkpoint_create_adopted(const AshCheckpointKey *key, XLogRecPtr commit_lsn,
										  int32 timeline);
extern bool ash_checkpoint_acknowledge_timeline(const AshCheckpointKey *key, int32 timeline);

#endif							/* ASH_CHECKPOINT_H */
