/*-------------------------------------------------------------------------
 *
 * syncrep.h
 *	  Whether the source waits for this pipeline's acknowledgements: its
 *	  synchronous_standby_names lists the replication connection's
 *	  application_name (docs/operations.md, "Acknowledgement and
 *	  synchronous standby").
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SYNCREP_H
#define ASH_SYNCREP_H

#include "libpq_conn.h"

/*
 * The application_name a pipeline's replication connection gives the
 * source: "ash_replicant <sink>", cut to fit buf (NAMEDATALEN bytes).
 */
extern void ash_syncrep_appname(const char *sink_name, char *buf);

/*
 * Would the source take the pipelines of sinks a and b for one standby?
 * It compares application names case-blind, and PostgreSQL 15 turns every
 * byte outside printable ASCII into '?'.
 */
extern bool ash_syncrep_appnames_collide(const char *sink_a, const char *sink_b);

/*
 * True when setting (a synchronous_standby_names value) names appname or
 * "*".  Pure; errs towards true on anything it cannot read.
 */
extern bool ash_syncrep_lists(const char *setting, const char *appname);

/*
 * At a session's start, on its replication connection (before
 * START_REPLICATION): remember the application_name the source sees and
 * read synchronous_standby_names.
 */
extern void ash_syncrep_start(AshConn *repl, const char *sink_name);

/* Read synchronous_standby_names again on any source connection. */
extern void ash_syncrep_observe(AshConn *conn);

/* Whether the source may be waiting for our acknowledgements. */
extern bool ash_syncrep_source_waits(void);

/*
 * After an acknowledgement deferred across a silent stream: whether a new
 * transaction followed it within SYNCREP_REPLY_MS.
 */
#define SYNCREP_REPLY_MS 10
extern void ash_syncrep_note_reply(bool prompt);

/*
 * Does such an answer want the setting read again?  Then read it on a
 * probe connection of conninfo, outside any transaction; a connection
 * failure is logged value-free and leaves the mode as it was.
 */
extern bool ash_syncrep_reread_wanted(void);
extern void ash_syncrep_reread(const char *conninfo);

#endif							/* ASH_SYNCREP_H */
