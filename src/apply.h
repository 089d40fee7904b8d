/*-------------------------------------------------------------------------
 *
 * apply.h
 *	  The transaction driver: change records in, destination transactions
 *	  (rows + checkpoint) out.  Its callers are pipeline.c and the snapshot's
 *	  modules (snapshot.c, snapshot_copier.c, snapshot_incr.c);
 *	  strategies see apply_strategy.h only.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_APPLY_H
#define ASH_APPLY_H

#include "access/xlogdefs.h"

#include "apply_strategy.h"
#include "change.h"
#include "checkpoint.h"
#include "config.h"

/* Result of committing a batch, for flush-aware feedback. */
typedef struct AshBatchResult
{
	bool		committed;
	XLogRecPtr	remote_end;		/* end LSN of the last source commit */
	XLogRecPtr	local_end;		/* our commit record's end */
	int			xacts;			/* source transactions in the batch */
} AshBatchResult;

/*
 * Where an error raised now happened, for the halt record: the commit LSN
 * of the source transaction being applied (invalid during a snapshot copy,
 * which has none) and the mapping's target (NULL when none).  False when
 * no change was being applied.  Call before ash_apply_abort.
 */
extern bool ash_apply_error_location(XLogRecPtr *commit_lsn, const char **target);

/*
 * Is a streamed transaction open (one the source has not committed yet)?
 * Call before ash_apply_abort.
 */
extern bool ash_apply_in_streamed_xact(void);

extern void ash_apply_init(AshPipelineConfig *cfg, AshCheckpointKey *key,
						   XLogRecPtr watermark, XLogRecPtr watermark_end);

/* Handle one decoded change. */
extern void ash_apply_change(AshChange *change);

/*
 * Is a source transaction open (BEGIN seen, COMMIT not yet; or a streamed
 * transaction begun and neither committed nor aborted)?
 */
extern bool ash_apply_in_remote_xact(void);

/*
 * The stream paused inside a source transaction, having received up to
 * WAL position received: write the rows gathered so far now, while the
 * rest of it (no more than its COMMIT, judged by received) is still on
 * its way.
 */
extern void ash_apply_write_gathered(XLogRecPtr received);

/*
 * Set when apply gave up applying a streamed (in-progress) transaction as
 * it arrives and raised an error to roll it back: the pipeline then
 * streams again from its checkpoint without streaming, so the transaction
 * arrives whole after its commit.  A value-free reason word.
 */
extern const char *ash_apply_stream_fallback;

/* Is a destination transaction open with complete source transactions? */
extern bool ash_apply_batch_pending(void);

/*
 * Commit the open batch (checkpoint row included); durable: its commit
 * record is flushed before this returns.
 */
extern AshBatchResult ash_apply_commit_batch(bool durable);

/* Should the batch be committed now (size limit reached)? */
extern bool ash_apply_batch_full(void);

/* Roll back whatever is open (after an error). */
extern void ash_apply_abort(void);

/* Did a value show that this pipeline must stream in text? */
extern bool ash_apply_binary_refused(void);

/*
 * Was the error being handled the one that turned binary transfer off
 * (a mode switch, not an apply failure)?  Once per refusal.
 */
extern bool ash_apply_take_binary_refusal(void);

/* The durable watermark. */
extern XLogRecPtr ash_apply_watermark(void);

/*
 * Snapshot copy (snapshot.c; an incremental chunk: snapshot_incr.c): one
 * table's rows, as inserts, in one destination transaction.  begin opens it (origin "snapshot", commit LSN
 * position, ordinals from ordinal_base + 1; whole: every row of the table,
 * not a chunk of them); row changes go
 * through ash_apply_change; flush executes deferred writes and returns
 * the last ordinal used, leaving the transaction and SPI open for the
 * caller's progress writes; commit commits and returns the local commit
 * record's end.
 */
extern void ash_apply_snapshot_begin(XLogRecPtr position, int32 ordinal_base,
									 bytea *attempt, bool whole);
extern int32 ash_apply_snapshot_flush(void);

/*
 * In the table's snapshot transaction, after flush: retire the rows of a
 * provenance mapping's target the attempt did not see (provenance.c).
 */
extern int64 ash_apply_snapshot_retire(AshMapping *m, XLogRecPtr close_lsn, bool nothing_past);

/*
 * In the caller's transaction, as the sink owner: forget the attempt's
 * seen-marks in m's target (a table listed again in the same attempt;
 * provenance.c).
 */
extern void ash_apply_snapshot_forget(AshMapping *m, const bytea *attempt);

/*
 * The target relid of the table's snapshot transaction was empty.
 * indexes_after: the transaction copies the whole table, so its indexes may
 * be built once its rows are in (apply_bulk.c; ash_apply_snapshot_flush
 * builds them).
 */
extern void ash_apply_snapshot_fresh(Oid relid, bool indexes_after);

extern XLogRecPtr ash_apply_snapshot_commit(void);

/* Set the durable watermark after a snapshot completed (no batch open). */
extern void ash_apply_set_watermark(XLogRecPtr wm, XLogRecPtr wm_end);

/*
 * Tables copied under a snapshot taken after the stream's start: their
 * changes committed before lsn are in the copy and are skipped.
 */
typedef struct AshTableFloor
{
	char		nspname[NAMEDATALEN];
	char		relname[NAMEDATALEN];
	XLogRecPtr	lsn;
} AshTableFloor;

extern void ash_apply_set_floors(List *floors);

/*
 * When no batch is open: publish counters of skipped work, and report the
 * writes PostgreSQL's statistics still hold back.
 */
extern void ash_apply_publish_idle(void);

#endif							/* ASH_APPLY_H */
