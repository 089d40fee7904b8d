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


#endif							/* ASH_LAUNCHER_H */
