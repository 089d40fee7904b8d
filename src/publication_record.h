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
 * Does a pipeline of cfg record how its table set holds its tables (no
 * snapshot; pgoutput's publication or pglogical's replication sets)?
 */
extern bool ash_publication_watched(AshPipelineConfig *cfg);
extern bool ash_publication_watched_by(const char *decoder, const char *publication,
									   const char *replication_sets, const char *snapshot);

/*
 * The mapped tables (mappings: AshMapping *) that key's records show out of
 * the publication and back, by res (ash_source_table_set_membership): their
 * qualified names, ", " between them, in into; NULL when none.  When
 * retyped_only is given, it says whether each of them only had columns
 * retyped (ASH_GAP_RETYPED).  SPI connected, read only: doctor and
 * preflight judge with it too.
 */
extern char *ash_publication_gaps(AshCheckpointKey *key, List *mappings, PGresult *res,
								  MemoryContext into, bool *retyped_only);

/*
 * Compare how the publication holds cfg's mapped tables now (read on conn)
 * with what key's checkpoint recorded.  A table held by none of the rows
 * that held it when recorded left the publication and came back: the
 * qualified names of every such table are returned (", " between them),
 * nothing recorded (*retyped_only as ash_publication_gaps says; may be
 * NULL).  Otherwise the memberships
 * of the tables published now are recorded (a table out now keeps its
 * record, so that its return is found) and NULL returned.
 *
 * Only for pipelines ash_publication_watched (a snapshot copies such a
 * table again, snapshot.c); for any other, starting says to forget the
 * records of an earlier configuration (conn may be NULL then: a later
 * watched session records afresh), and the census (starting = false) does
 * nothing.  Runs outside a transaction.
 */
extern char *ash_publication_record(AshPipelineConfig *cfg, AshCheckpointKey *key,
									AshConn *conn, bool starting, bool *retyped_only);

/*
 * A mapped table as a record holds it: the name it had, its OID, and the
 * source's WAL position once that was read.  pgoutput and pglogical
 * describe a table by its OID; one described from that position on under
 * another name was renamed since the record (relmap.c).
 */
typedef struct AshRecordedTable
{
	uint32		oid;
	char	   *nspname;
	char	   *relname;
	XLogRecPtr	read_at;
	char	   *published;		/* the record's tokens (source_catalog.h) */
} AshRecordedTable;

/*
 * key's records as AshRecordedTable, those with a position (since 1.10.0).
 * Outside a transaction; the list in CurrentMemoryContext.
 */
extern List *ash_publication_identities(AshCheckpointKey *key);

/*
 * The columns a record's tokens (published) hold, by their
 * "typ:<name>:<type>.<typmod>" tokens (the name's UTF-8 bytes in hex,
 * source_catalog.c): returns how many; *names in the database's encoding,
 * *types and *typmods (either NULL: not wanted) in CurrentMemoryContext.
 * In a transaction (the names are converted from UTF-8).
 */
extern int	ash_publication_record_columns(const char *published, char ***names,
										   uint32 **types, int32 **typmods);

#endif							/* ASH_PUBLICATION_RECORD_H */
