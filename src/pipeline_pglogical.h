/*-------------------------------------------------------------------------
 *
 * pipeline_pglogical.h
 *	  A pipeline session over pglogical_output (decoder pglogical).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_PIPELINE_PGLOGICAL_H
#define ASH_PIPELINE_PGLOGICAL_H

#include "change.h"
#include "config.h"
#include "libpq_conn.h"

/*
 * A new session: forget the previous one's decoder state and relation
 * descriptions, close its catalog connection, read the replication sets.
 * Outside a transaction.
 */
extern void ash_pglogical_session_begin(AshPipelineConfig *cfg);

/*
 * The publication record of a mapped table (its source OID; published: its
 * tokens, source_catalog.h), loaded at the start after the session began:
 * each description of the table is judged against the column types it
 * holds (docs/pglogical.md).
 */
extern void ash_pglogical_note_recorded(uint32 relid, const char *published);

/* The START_REPLICATION options the session sends (text transfer only). */
extern char *ash_pglogical_plugin_options(AshConn *conn);

/*
 * Decode one message into *change.  Returns false when there is nothing
 * to apply (the startup message, pglogical's queue but for a TRUNCATE);
 * halts on a malformed message (protocol_violation).  A Relation message
 * is completed from the source's catalog (types, replica identity) before
 * it is returned; a TRUNCATE pglogical queued is returned as a Truncate
 * change of the relation its name denotes (which may first hand apply that
 * relation's description).
 */
extern bool ash_pglogical_decode(const char *data, int len, AshChange *change);

#endif							/* ASH_PIPELINE_PGLOGICAL_H */
