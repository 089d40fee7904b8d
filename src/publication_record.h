/*-------------------------------------------------------------------------
 *
 * publication_record.h
 *	  How the publication held each mapped table of a pipeline streaming
 *	  without a snapshot, and the gap a table leaves when it goes out and
 *	  comes back (publication_record.c; docs/reasons.md#publication_gap).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_PUBLICATION_RECORD_H
#define ASH_PUBLICATION_RECORD_H

#include "checkpoint.h"
#include "config.h"
#include "libpq_conn.h"

/*
 * Compare how the publication holds cfg's mapped tables now (read on conn)
 * with what key's checkpoint recorded.  A table held by none of the rows
 * that held it when recorded left the publication and came back: its
 * qualified name is returned, nothing recorded.  Otherwise the memberships
 * of the tables published now are recorded (a table out now keeps its
 * record, so that its return is found) and NULL returned.
 *
 * Only for pgoutput pipelines without a snapshot (a snapshot copies such
 * a table again, snapshot.c): with one configured, starting says to forget
 * the records (a later go-forward session records afresh); the census
 * passes starting = false and nothing is done.  Runs outside a transaction.
 */
extern char *ash_publication_record(AshPipelineConfig *cfg, AshCheckpointKey *key,
									AshConn *conn, bool starting);

#endif							/* ASH_PUBLICATION_RECORD_H */
