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
#include "executor/spi.h"

#include "change.h"
#include "config.h"
#include "relmap.h"

/* One row image in target-column order (rel->ncols entries). */
typedef struct AshRowImage
{
	Datum	   *values;
	bool	   *nulls;
	bool	   *present;		/* false: unchanged TOAST, value not sent */
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
} AshApplyStrategy;

extern const AshApplyStrategy ash_scd1_strategy;

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

extern void ash_apply_init(AshPipelineConfig *cfg, AshCheckpointKey *key,
						   XLogRecPtr watermark, XLogRecPtr watermark_end);

/* Handle one decoded change. */
extern void ash_apply_change(AshChange *change);

/* Is a source transaction open (BEGIN seen, COMMIT not yet)? */
extern bool ash_apply_in_remote_xact(void);

/* Is a destination transaction open with complete source transactions? */
extern bool ash_apply_batch_pending(void);

/* Commit the open batch (checkpoint row included). */
extern AshBatchResult ash_apply_commit_batch(void);

/* Should the batch be committed now (size limit reached)? */
extern bool ash_apply_batch_full(void);

/* Roll back whatever is open (after an error). */
extern void ash_apply_abort(void);

/* The durable watermark. */
extern XLogRecPtr ash_apply_watermark(void);

/* Publish counters of skipped work when no batch is open. */
extern void ash_apply_publish_idle(void);

/* Called by strategies. */
extern void ash_apply_count_missing_delete(AshApplyTarget *tgt);
extern uint64 ash_spi_execute(SPIPlanPtr plan, Datum *values, const char *nulls,
							  int expected_ret);

#endif							/* ASH_APPLY_H */
