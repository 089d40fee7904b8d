/*-------------------------------------------------------------------------
 *
 * origin.h
 *	  The replication origins mirrored writes are tagged with.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_ORIGIN_H
#define ASH_ORIGIN_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

/* "ash_replicant_" + a sink name (< 64 bytes) + "_copier" + an index */
#define ASH_ORIGIN_NAME_LEN 96

/*
 * The origin of sink_name's writes: copier 0 is the pipeline worker, 1..n
 * a snapshot's helper copiers (an origin is active in one process at a
 * time).
 */
extern void ash_origin_name(const char *sink_name, int copier, char *buf);

/*
 * Would sinks named a and b share an origin (a pipeline's or a helper
 * copier's: sink "s_copier1" and sink "s"'s first helper)?
 */
extern bool ash_origin_names_collide(const char *sink_a, const char *sink_b);

/*
 * Create the origin if it does not exist and make it this process's
 * session origin: every transaction committed from here on carries it.
 * Once per process; runs its own transaction (none may be open).
 */
extern void ash_origin_attach(const char *sink_name, int copier);

/* Is a session origin set up in this process? */
extern bool ash_origin_attached(void);

/*
 * The source position and commit time the next commit records as the
 * origin's progress (InvalidXLogRecPtr, 0: none).  Informational: the
 * checkpoint row is what a pipeline resumes from.
 */
extern void ash_origin_set_progress(XLogRecPtr source_end, TimestampTz source_commit_time);

/*
 * A snapshot helper copier at its end: release its origin and drop it, so
 * that its replication state slot serves the next one (a copy's progress
 * needs no keeping).  Runs its own transaction; nothing if none is set up.
 */
extern void ash_origin_release_and_drop(const char *sink_name, int copier);

/*
 * Drop every origin of sink_name that exists, in the caller's transaction
 * (ash_replicant_drop_sink).  false, nothing dropped, when a process holds
 * one of them (a worker or helper copier of the sink still exiting).
 */
extern bool ash_origin_drop_all(const char *sink_name);

/*
 * Does a process hold one of sink_name's origins, from copier first_copier
 * on (0: the pipeline worker's too)?  Such a process (a worker at its very
 * end, a helper copier told to stop) may still write.  In the caller's
 * transaction, which keeps the origins found free from being dropped until
 * it ends; raises when this session has an origin of its own set up.
 */
extern bool ash_origin_held(const char *sink_name, int first_copier);

/*
 * A snapshot complete: drop every helper copier origin of sink_name that
 * exists and no process holds (left by a helper that was killed), each in
 * its own transaction (none may be open).  Returns how many were dropped.
 */
extern int	ash_origin_drop_copiers(const char *sink_name);

/*
 * With the extension gone (DROP EXTENSION, which runs no code of ours):
 * drop every origin of this naming that no process holds, each in its own
 * transaction (none may be open).  Returns how many are left, held by a
 * process (a worker still leaving): the caller tries again later.
 */
extern int	ash_origin_drop_orphans(void);

#endif							/* ASH_ORIGIN_H */
