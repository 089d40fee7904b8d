/*-------------------------------------------------------------------------
 *
 * incremental.h
 *	  Incremental snapshots (snapshot => 'incremental'): what the stream
 *	  applies while the tables are copied chunk by chunk.
 *
 *	  snapshot_incr.c reads and commits the chunks and tells this module
 *	  where each table's copy stands (its cursor and the windows of its
 *	  chunks); apply.c asks it, for every row change of a table of the
 *	  attempt, which of the change's keys the stream applies
 *	  (docs/snapshots.md, "Why incremental is exact").
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_INCREMENTAL_H
#define ASH_INCREMENTAL_H

#include "access/xlogdefs.h"
#include "lib/stringinfo.h"

#include "apply_strategy.h"
#include "change.h"

/* A source snapshot: xmin, xmax and the in-progress xids (32-bit). */
typedef struct AshIncrSnapshot
{
	TransactionId xmin;
	TransactionId xmax;
	int			nxip;
	TransactionId *xip;			/* sorted */
} AshIncrSnapshot;

/*
 * Do two snapshots show the same transactions (the same xmax and
 * in-progress xids: none ended between them)?  nxip -1 matches none.
 */
extern bool ash_incr_same_snapshot(const AshIncrSnapshot *a, const AshIncrSnapshot *b);

/*
 * Does later show no transaction committed that earlier did not (none that
 * earlier saw in progress has ended, and every one begun since is in
 * progress in later)?  What holds of earlier's committed transactions then
 * holds of later's.  nxip -1 (unknown) on either side: false.
 */
extern bool ash_incr_shows_no_more(const AshIncrSnapshot *later, const AshIncrSnapshot *earlier);

/* Forget every table (no attempt, or a new session). */
extern void ash_incr_reset(const bytea *attempt);

/* Is an incremental attempt in progress (some table not yet copied)? */
extern bool ash_incr_active(void);

/*
 * Must apply ask ash_incr_judge: a table not yet copied, or a window still
 * open (also after the attempt completed)?
 */
extern bool ash_incr_judging(void);

/* The attempt's id (for the seen-marks of streamed rows). */
extern const bytea *ash_incr_attempt(void);

/*
 * A table of the attempt, in copy order: its primary key (source column
 * names and built-in type OIDs; collatable types compare in "C"), and
 * where its copy stands: cursor (key text of the last row copied, NULL
 * before the first chunk) and done (every chunk copied).
 */
extern void ash_incr_add_table(const char *nspname, const char *relname, int nkeys,
							   char **keynames, Oid *keytypes, char **cursor, bool done);

/* The table's chunk committed: its new cursor (NULL with done) and window. */
extern void ash_incr_chunk_committed(const char *nspname, const char *relname,
									 char **cursor, bool done, int64 chunk, char **lo,
									 char **hi, const AshIncrSnapshot *snap,
									 XLogRecPtr high_lsn);

/* A window recorded by an earlier session (lo, hi: NULL unbounded). */
extern void ash_incr_add_window(const char *nspname, const char *relname, int64 chunk,
								char **lo, char **hi, const AshIncrSnapshot *snap,
								XLogRecPtr high_lsn);

/*
 * The stream has delivered every source commit below passed: close the
 * windows whose snapshot ended there (and those of chunks committed from
 * now on that end there).  Returns how many are still open.
 */
extern int	ash_incr_close_windows(XLogRecPtr passed);

/*
 * The highest position ash_incr_close_windows was given this session:
 * every source commit below it delivered and applied.
 */
extern XLogRecPtr ash_incr_windows_passed(void);

/* Windows still open, the lowest high_lsn among them (Invalid: none). */
extern int	ash_incr_open_windows(XLogRecPtr *lowest);

/*
 * A transaction the source may not show yet to a new snapshot (delivered
 * by the stream, or running when the session started): a chunk is read
 * only under a snapshot that shows every one of them.
 */
extern void ash_incr_note_xid(TransactionId xid);

/*
 * Does snap show every transaction noted?  Those it shows are forgotten
 * (every later snapshot shows them too).
 */
extern bool ash_incr_snapshot_covers(const AshIncrSnapshot *snap);

/*
 * For a row change of rel in transaction xid: does the stream apply it to
 * the old key (update, delete) and to the new key (insert, update)?  A
 * key not yet copied, or in the range of a chunk whose snapshot already
 * shows xid, is not applied: a chunk holds (or will hold) its effect.
 * For a change of a table outside the attempt both are true.
 */
extern void ash_incr_judge(AshApplyRel *rel, AshChange *c, TransactionId xid,
						   bool *apply_old, bool *apply_new);

/*
 * Is rel a table whose copy is under way (its streamed writes are marked
 * seen, so that the table's completion does not retire them)?
 */
extern bool ash_incr_marks_seen(AshApplyRel *rel);

/*
 * A TRUNCATE of rel in transaction xid.  Does an open window's snapshot
 * already show it?  Then a chunk copied rows written after it, which the
 * truncate must leave: returns true with keep a condition on the target's
 * columns that holds for the keys of those windows ($1..$nargs, of types
 * and values), the rows the truncate keeps.  A key column that is no
 * target column of its own type (skipped, encrypted, converted) halts
 * snapshot_state_invalid: the rows cannot be told apart.
 */
extern bool ash_incr_truncate_keep(AshApplyRel *rel, TransactionId xid, StringInfo keep,
								   int *nargs, Oid **types, Datum **values);

/*
 * The transactions noted, for a helper to check its chunk's snapshot
 * against (-1: more than max), taken before the pipeline worker's own
 * check forgets any; and that check (docs/snapshots.md, "Tables in
 * parallel").
 */
extern int	ash_incr_noted_xids(TransactionId *xids, int max);
extern void ash_incr_noted_counts(uint64 *adds, uint64 *drops);
extern bool ash_incr_snapshot_shows(const AshIncrSnapshot *snap, const TransactionId *xids,
									int n);

/* Tables of the attempt not yet copied. */
extern int	ash_incr_remaining(void);

/* The next table to copy (NULL: none); its cursor (NULL: from the start). */
extern bool ash_incr_next_table(char **nspname, char **relname, char ***cursor);

/* Where a table not yet copied stands (false: copied, or not in the attempt). */
extern bool ash_incr_table_cursor(const char *nspname, const char *relname, char ***cursor);

/* The same as ash_incr_next_table, for the table after skip tables not yet copied. */
extern bool ash_incr_pending_table(int skip, char **nspname, char **relname,
								   char ***cursor);

#endif							/* ASH_INCREMENTAL_H */
