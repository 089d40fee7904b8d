/*-------------------------------------------------------------------------
 *
 * apply_bulk.h
 *	  Gathered inserts written straight into the table (multi-insert and
 *	  index insertion), where that is exactly what a plain INSERT would do.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_APPLY_BULK_H
#define ASH_APPLY_BULK_H

#include "relmap.h"

/* Per destination table; zeroed with the strategy's plans. */
typedef struct AshBulkTarget
{
	LocalTransactionId judged_lxid; /* transaction "usable" was judged in */
	uint64		judged_epoch;	/* ash_relmap_target_epoch it holds for */
	bool		usable;
	AttrNumber *attnums;		/* per mapped column: the table's attribute */
} AshBulkTarget;

/*
 * Can the gathered columns of rel, then the nextra bytea columns named
 * extra (snapshot provenance), be written to tgt this way?  Judged again
 * when ash_relmap_target_epoch moved (takes the table's RowExclusiveLock).
 * The caller has judged that rows of tgt cannot observe each other.
 */
extern bool ash_bulk_insert_usable(AshBulkTarget *bt, AshApplyRel *rel,
								   AshApplyTarget *tgt, int nextra,
								   const char *const *extra);

/*
 * Insert nrows rows; values[c][i] / nulls[c][i] is written column c of
 * row i (the mapped columns, then the extra ones).  Raises what the INSERT
 * would (privileges, constraints, unique violations); the caller runs it in
 * a subtransaction to catch the latter, except into a fresh table.  Returns
 * true.
 *
 * indexes_after (with fresh): the table's index entries may be left to
 * ash_bulk_build_indexes, which must then run before anything reads the
 * table (the commit refuses otherwise); where they are, the table is held
 * in SHARE mode until the transaction ends.
 *
 * speculative (one row, not fresh): a taken identity is not raised but
 * reported (false), with nothing of the row left, as INSERT ... ON
 * CONFLICT's speculative insertion leaves nothing; no subtransaction is
 * needed.
 */
extern bool ash_bulk_insert(AshBulkTarget *bt, AshApplyTarget *tgt, int ncols, int nrows,
							Datum *const *values, bool *const *nulls, bool fresh,
							bool indexes_after, bool speculative);

/*
 * Build every index of the table whose rows this transaction wrote without
 * their index entries, if any (a unique violation raises as REINDEX's).
 * The indexes' functions run as the table's owner -- who wrote its rows --
 * restricted, with an active snapshot.
 */
extern void ash_bulk_build_indexes(void);

/*
 * fresh: a snapshot copy into a table that was empty when it began; the
 * rows go through a buffer ring kept for the process, whose pin on its
 * current page ash_bulk_release drops before each commit (an abort drops
 * it too).
 */
extern void ash_bulk_release(void);

#endif							/* ASH_APPLY_BULK_H */
