/*-------------------------------------------------------------------------
 *
 * launcher.h
 *	  The launcher background worker and how SQL functions wake it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_LAUNCHER_H
#define ASH_LAUNCHER_H

extern void ash_launcher_register(void);

/*
 * Wake the launcher when the current transaction commits (never before: it
 * must see the committed configuration).  Safe to call many times.
 */
extern void ash_launcher_wake_at_commit(void);

PGDLLEXPORT void ash_launcher_main(Datum main_arg);

/*
 * A dynamic worker of a pipeline's slot (pipeline worker, snapshot copier):
 * database connection, never restarted, named "<type> <sink>", the slot as
 * main argument and its generation first in bgw_extra, this process
 * notified.
 */
struct BackgroundWorker;
extern void ash_worker_prepare(struct BackgroundWorker *w, const char *function,
							   const char *type, const char *sink_name, int slotno,
							   int64 generation);

#endif							/* ASH_LAUNCHER_H */
