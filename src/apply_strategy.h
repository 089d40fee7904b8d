/*-------------------------------------------------------------------------
 *
 * apply_strategy.h
 *	  The interface between the apply driver (apply.c) and what it
 *	  dispatches to: the strategies (apply_scd1.c, apply_scd2.c,
 *	  apply_append.c) and snapshot provenance (provenance.c).
 *
 * NOTES
 *	  They include this header, never apply.h: the driver includes theirs.
 *	  The services declared here are implemented by apply.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_APPLY_STRATEGY_H
#define ASH_APPLY_STRATEGY_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "lib/stringinfo.h"

#include "checkpoint.h"
#include "config.h"
#include "owner_scope.h"
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
	 * A snapshot row of a provenance mapping that must be written: written
	 * as insert writes it, with the two provenance columns (fingerprint,
	 * attempt: bytea) in the same row version, so no stamp follows it.
	 * Returns false when it cannot (the caller inserts, then stamps).  May
	 * be NULL.
	 */
	bool		(*insert_stamped) (AshApplyRel *rel, AshApplyTarget *tgt,
								   AshRowImage *newrow, Datum fingerprint, Datum attempt);

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

/* SCD1's truncate (on_truncate mirror), leaving the rows keep holds for. */
extern void ash_scd1_truncate_keeping(AshApplyRel *rel, AshApplyTarget *tgt, const char *keep,
									  int nargs, Oid *types, Datum *values);
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
	bool		snapshot_whole;	/* a snapshot copying whole tables (v1),
								 * not an incremental chunk */
} AshChangeMeta;

extern const AshChangeMeta *ash_apply_current(void);

/* Where apply is, for value-free error reports. */
typedef struct AshApplyErrorContext
{
	const char *command;		/* "insert", "update", ... */
	const char *relation;		/* quoted target name or NULL */
	XLogRecPtr	commit_lsn;		/* of the source transaction */
	TransactionId xid;
} AshApplyErrorContext;

extern AshApplyErrorContext ash_apply_errctx;

/* The checkpoint identity the driver applies under. */
extern const AshCheckpointKey *ash_apply_checkpoint_key(void);

/*
 * In the table's snapshot transaction: the target relid was empty when
 * its copy began, so every row is new (apply_scd1.c writes them without
 * the plain-insert-or-upsert subtransaction, through a buffer ring).
 */
extern bool ash_apply_fresh_target(Oid relid);

/* ... and its indexes may be built after its rows (apply_bulk.c). */
extern bool ash_apply_indexes_after(Oid relid);

/*
 * Run fn(arg), a write of a snapshot's rows to tgt, a fresh target: where
 * it violates the identity's index under attribute tenancy, halt
 * tenant_conflict (two tenants' rows hold one identity at the source); any
 * other error propagates.  Outside a snapshot, or without a tenant outside
 * the identity, just fn(arg).
 */
extern void ash_apply_copy_write(AshApplyRel *rel, AshApplyTarget *tgt,
								 void (*fn) (void *arg), void *arg);

/*
 * Every write to a table -- a strategy's, a provenance stamp's, a
 * retirement's -- runs between these, inside the sink owner's scope: as the
 * sink owner, or as the table's owner, security-restricted, where the sink
 * owner has that owner's privileges but not the reverse; neither halts
 * target_owner_untrusted (owner_scope.c).  A scope entered inside another
 * table's takes its own table's rights.  ash_apply_table_enter judges a
 * table by OID (log_name names it in a halt: the mapping's target).
 */
extern void ash_apply_target_enter(AshApplyTarget *tgt, AshOwnerScope *scope);
extern void ash_apply_table_enter(Oid relid, const char *log_name, AshOwnerScope *scope);
extern void ash_apply_target_exit(AshOwnerScope *scope);

/* Execute deferred writes (and their provenance stamps) now. */
extern void ash_apply_flush_deferred(void);

/* Called by strategies. */
extern void ash_apply_seal_image(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *img);
extern void ash_apply_count_missing_delete(AshApplyTarget *tgt);

/*
 * A write (what: "an insert", ...) that affected no row where it must have:
 * on a target with BEFORE ROW triggers one returned NULL for it, and the
 * pipeline halts destination_write_suppressed (state mirrors refuse rules
 * that could); on one without, it is an internal error (detail: what
 * happened).
 */
extern void ash_apply_write_lost(AshApplyTarget *tgt, const char *what,
								 const char *detail) pg_attribute_noreturn();

/*
 * An update or delete by key (what: "an update", "a multi-row delete", ...)
 * that met more rows of tgt than it named: a table inheriting from the
 * target holds a row under a mirrored key (the target's own identity is
 * unique).  Raises cardinality_violation (21000), naming the table only.
 */
extern void ash_apply_key_matched_many(AshApplyTarget *tgt, const char *what) pg_attribute_noreturn();

/* Identity (+ tenant) predicate and its parameter values, for strategies. */
extern int	ash_append_key_predicate(StringInfo sql, AshApplyRel *rel, int first,
									 Oid *types, bool with_tenant);
extern int	ash_key_values(AshApplyRel *rel, AshRowImage *img, Datum *values, char *nulls);

/* Are writes scoped by a tenant column that is not part of the identity? */
extern bool ash_tenant_scoped(AshApplyRel *rel);

#endif							/* ASH_APPLY_STRATEGY_H */
