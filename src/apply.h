/*-------------------------------------------------------------------------
 *
 * apply.h
 *	  The transaction driver: change records in, destination transactions
 *	  (rows + checkpoint) out.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_APPLY_H
#define ASH_APPLY_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"

#include "change.h"
#include "config.h"
#include "relmap.h"

/* One row image in target-column order (rel->ncols entries). */
typedef struct AshRowImage
{
	Datum	   *values;
	bool	   *nulls;
	bool	   *present;		/* false: unchanged TOAST, value not sent */
	char	  **plain;			/* encrypted columns: text before sealing */
	bool		complete;		/* every column present */
} AshRowImage;

/*
 * An apply strategy: how one mapped relation's changes become SQL.  SCD1
 * (apply_scd1.c) is the default; history and append-log strategies plug in
 * here with the same driver, batching and checkpoint.
 *
 * Under attribute tenancy (rel->tenant_col >= 0) every update and delete is
 * scoped by the tenant value in the key image, and an upsert that meets a
 * row of another tenant halts tenant_conflict.  Relocation across tenants
 * is the driver's: delete under the old target, insert under the new.
 */
typedef struct AshApplyStrategy
{
	const char *name;
	void		(*insert) (AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *newrow);
	void		(*update) (AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key,
						   AshRowImage *newrow);
	void		(*delete) (AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *key);
	void		(*truncate) (AshApplyRel *rel, AshApplyTarget *tgt);
	void		(*release) (AshApplyTarget *tgt);

	/*
	 * A tenant change within ONE destination table is an update for this
	 * strategy (append log: one event per change), not delete + insert.
	 */
	bool		update_relocates;

	/*
	 * A strategy may defer writes (e.g. gather consecutive inserts into one
	 * multi-row statement).  flush executes what is deferred; the driver
	 * calls it before any other kind of change, message or truncate, and
	 * before the batch commits.  discard drops it after an abort.  Either
	 * may be NULL.
	 */
	void		(*flush) (void);
	void		(*discard) (void);
} AshApplyStrategy;

extern const AshApplyStrategy ash_scd1_strategy;
extern const AshApplyStrategy ash_scd2_strategy;	/* apply_scd2.c */
extern const AshApplyStrategy ash_append_strategy;	/* apply_append.c */

/*
 * Where the change being applied sits in the source's history.  Ordinals
 * count every row change, truncate and transactional message of the source
 * transaction from 1, mapped or not, so re-delivery yields the same
 * ordinals; a non-transactional message has its own LSN and ordinal 0.
 */
typedef struct AshChangeMeta
{
	XLogRecPtr	commit_lsn;
	TimestampTz commit_time;
	TransactionId xid;
	int32		ordinal;
	const char *origin;			/* "stream" (or "snapshot") */
	bytea	   *snapshot_attempt;	/* the snapshot's attempt id, or NULL */
} AshChangeMeta;

extern const AshChangeMeta *ash_apply_current(void);

/* Identity of the checkpoint row this pipeline writes. */
typedef struct AshCheckpointKey
{
	char	   *system_id;
	char	   *database;
	char	   *slot_name;
} AshCheckpointKey;

/* Result of committing a batch, for flush-aware feedback. */
typedef struct AshBatchResult
{
	bool		committed;
	XLogRecPtr	remote_end;		/* end LSN of the last source commit */
	XLogRecPtr	local_end;		/* our commit record's end */
	int			xacts;			/* source transactions in the batch */
} AshBatchResult;

/* Where apply is, for value-free error reports. */
typedef struct AshApplyErrorContext
{
	const char *command;		/* "insert", "update", ... */
	const char *relation;		/* quoted target name or NULL */
	XLogRecPtr	commit_lsn;		/* of the source transaction */
	TransactionId xid;
} AshApplyErrorContext;

extern AshApplyErrorContext ash_apply_errctx;

/*
 * Where an error raised now happened, for the halt record: the commit LSN
 * of the source transaction being applied (invalid during a snapshot copy,
 * which has none) and the mapping's target (NULL when none).  False when
 * no change was being applied.  Call before ash_apply_abort.
 */
extern bool ash_apply_error_location(XLogRecPtr *commit_lsn, const char **target);

extern void ash_apply_init(AshPipelineConfig *cfg, AshCheckpointKey *key,
						   XLogRecPtr watermark, XLogRecPtr watermark_end);

/* The checkpoint identity and configuration the driver applies under. */
extern const AshCheckpointKey *ash_apply_checkpoint_key(void);
extern AshPipelineConfig *ash_apply_config(void);

/* Handle one decoded change. */
extern void ash_apply_change(AshChange *change);

/*
 * Is a source transaction open (BEGIN seen, COMMIT not yet; or a streamed
 * transaction begun and neither committed nor aborted)?
 */
extern bool ash_apply_in_remote_xact(void);

/*
 * Set when apply gave up applying a streamed (in-progress) transaction as
 * it arrives and raised an error to roll it back: the pipeline then
 * streams again from its checkpoint without streaming, so the transaction
 * arrives whole after its commit.  A value-free reason word.
 */
extern const char *ash_apply_stream_fallback;

/* Is a destination transaction open with complete source transactions? */
extern bool ash_apply_batch_pending(void);

/* Commit the open batch (checkpoint row included). */
extern AshBatchResult ash_apply_commit_batch(void);

/* Should the batch be committed now (size limit reached)? */
extern bool ash_apply_batch_full(void);

/* Roll back whatever is open (after an error). */
extern void ash_apply_abort(void);

/* Did a value show that this pipeline must stream in text? */
extern bool ash_apply_binary_refused(void);

/* The durable watermark. */
extern XLogRecPtr ash_apply_watermark(void);

/*
 * Snapshot copy (snapshot.c): one table's rows, as inserts, in one
 * destination transaction.  begin opens it (origin "snapshot", commit LSN
 * snapshot_lsn - 1, ordinals from ordinal_base + 1); row changes go
 * through ash_apply_change; flush executes deferred writes and returns
 * the last ordinal used, leaving the transaction and SPI open for the
 * caller's progress writes; commit commits and returns the local commit
 * record's end.
 */
extern void ash_apply_snapshot_begin(XLogRecPtr snapshot_lsn, int32 ordinal_base,
									 bytea *attempt);
extern int32 ash_apply_snapshot_flush(void);

/*
 * In the table's snapshot transaction, after flush: retire the rows of a
 * provenance mapping's target the attempt did not see (provenance.c).
 */
extern int64 ash_apply_snapshot_retire(AshMapping *m, XLogRecPtr close_lsn);

/*
 * In the table's snapshot transaction: the target relid was empty when
 * its copy began, so every row is new (apply_scd1.c writes them without
 * the plain-insert-or-upsert subtransaction, through a buffer ring).
 */
extern void ash_apply_snapshot_fresh(Oid relid);
extern bool ash_apply_fresh_target(Oid relid);

/* Execute deferred writes (and their provenance stamps) now. */
extern void ash_apply_flush_deferred(void);
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

/* Publish counters of skipped work when no batch is open. */
extern void ash_apply_publish_idle(void);

/* Append logs (apply_append.c). */
extern void ash_append_message(AshPipelineConfig *cfg, Oid target, const char *prefix,
							   const char *content, int len);
extern void ash_append_activate(AshPipelineConfig *cfg, AshCheckpointKey *key,
								XLogRecPtr watermark, XLogRecPtr watermark_end,
								bool slot_created, XLogRecPtr slot_position);

/* Called by strategies. */
extern void ash_apply_seal_image(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *img);
extern void ash_apply_count_missing_delete(AshApplyTarget *tgt);
extern uint64 ash_spi_execute(SPIPlanPtr plan, Datum *values, const char *nulls,
							  int expected_ret);
extern bool ash_run_catching(void (*fn) (void *arg), void *arg, int catch_code);
extern bool ash_spi_execute_or_catch(SPIPlanPtr plan, Datum *values, const char *nulls,
									 int expected_ret, int catch_code, uint64 *processed);

/* SPI_prepare + SPI_keepplan, leaving the caller's memory context current. */
extern SPIPlanPtr ash_spi_prepare_kept(const char *sql, int nargs, Oid *types);

/* Identity (+ tenant) predicate and its parameter values, for strategies. */
extern int	ash_append_key_predicate(StringInfo sql, AshApplyRel *rel, int first,
									 Oid *types, bool with_tenant);
extern int	ash_key_values(AshApplyRel *rel, AshRowImage *img, Datum *values, char *nulls);

/* Are writes scoped by a tenant column that is not part of the identity? */
extern bool ash_tenant_scoped(AshApplyRel *rel);

#endif							/* ASH_APPLY_H */
