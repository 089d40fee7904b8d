/*-------------------------------------------------------------------------
 *
 * snapshot_int.h
 *	  Internal to the snapshot modules: what they share of the attempt,
 *	  its catalog rows, the source's reads and the copiers' progress.
 *
 * NOTES
 *	  snapshot.c (the driver and the 'v1' copy), snapshot_copier.c (v1's
 *	  helper copiers) and snapshot_incr.c (snapshot => 'incremental', its
 *	  chunks and helpers) include this header; no other module does: the
 *	  snapshot's interface is snapshot.h.  Everything here is implemented
 *	  in snapshot.c unless its comment names another module.  The ash_snap_
 *	  prefix keeps these names apart from the server's own symbols.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SNAPSHOT_INT_H
#define ASH_SNAPSHOT_INT_H

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"

#include "change.h"
#include "checkpoint.h"
#include "config.h"
#include "libpq_conn.h"
#include "shmem.h"
#include "snapshot.h"
#include "source_slot.h"

/*
 * An attempt's id: random, compared only for equality with the marks rows
 * carry (replica_seen_attempt), so 128 bits keep attempts apart; every
 * provenance row stores it.  Ids of attempts armed by earlier builds are
 * 256-bit and compare the same way.
 */
#define ASH_SNAPSHOT_ATTEMPT_BYTES	16

/* One table of the attempt. */
typedef struct SnapTable
{
	char	   *nspname;
	char	   *relname;
	bool		has_estimate;
	int64		estimate;
	bool		copied;
	int64		rows;
	XLogRecPtr	lsn;			/* copied: its snapshot's position */
	int64		chunks;			/* incremental: chunks committed */
	char	  **cursor;			/* incremental: key of the last row copied */
	Oid			target;			/* the table it is copied into (Invalid:
								 * listed before 1.4.0, not recorded) */
	char	   *published;		/* how the publication holds it (NULL:
								 * not known; ash_source_publication_gap) */
	TimestampTz lock_retry_at;	/* incremental: a read met a lock at the
								 * source; read again from then on (0: now) */
	int			lock_pause_ms;	/* ... after this pause (0: no lock met) */
} SnapTable;

/* The attempt as recorded on the checkpoint. */
typedef struct Attempt
{
	AshSnapshotPhase phase;
	XLogRecPtr	start_lsn;		/* where the stream resumes */
	bytea	   *id;
	bytea	   *state;			/* snapshot_state: authenticated (provenance) */
	List	   *tables;			/* SnapTable *, by schema and name */
} Attempt;

/*
 * The position of an incremental chunk's rows: just above the stream's
 * watermark, and never below the attempt's start - 1 (the watermark is
 * unset until the stream delivers its first commit).  Every commit the
 * stream delivers afterwards is above it; the versions a target held
 * before the slot's start are below it, as they are below v1's position.
 */
static inline XLogRecPtr
ash_snap_chunk_position(const Attempt *a, XLogRecPtr watermark)
{
	return Max(watermark + 1, a->start_lsn - 1);
}

/* The pipeline, its checkpoint and its slot in shared memory. */
extern AshPipelineConfig *ash_snap_cfg;
extern const AshCheckpointKey *ash_snap_key;
extern AshPipelineSlot *ash_snap_slot;
extern int	ash_snap_my_copier;	/* index in ash_snap_slot->copiers */

/* A helper copier: the pipeline worker it serves, to stop with it. */
extern int64 ash_snap_helper_generation;
extern pid_t ash_snap_helper_coordinator;

/* The source connection of a v1 copy: closed after an error too. */
extern AshConn *ash_snap_data_conn;

/* Catalog access: ash_replicant.checkpoints and snapshot_tables. */
extern uint64 ash_snap_key_exec(const char *sql, int nextra, Oid *extra_types,
								Datum *extra_values, const char *extra_nulls, int expected);
extern Attempt *ash_snap_read_attempt(void);

/* Source side. */
extern List *ash_snap_source_tables(AshConn *conn);
extern XLogRecPtr ash_snap_parse_lsn(const char *s);
extern void ash_snap_read_settings(AshConn *data);
extern void ash_snap_import_snapshot(AshConn *data, const char *snapshot);
extern void ash_snap_refuse_origins(const char *nspname, const char *relname);
extern void ash_snap_describe_table(AshConn *data, SnapTable *t, AshRelation *rel);
extern SnapTable *ash_snap_find_table(List *tables, const char *nspname, const char *relname);

/* Progress. */
extern AshPipelineSlot *ash_snap_find_slot(void);
extern void ash_snap_publish_attempt(Attempt *a, bool in_flight);
extern void ash_snap_publish_table_at(int copier, const char *nspname, const char *relname,
									  int64 rows, int64 estimate);
extern void ash_snap_publish_copied_at(int copier, int64 rows);
extern void ash_snap_publish_source_lock(int copier, bool waits);
extern bool ash_snap_source_lock_waits(AshConn *data, void *arg);

/* Copy. */
extern void ash_snap_check_coordinator(void);
extern bool ash_snap_target_is_empty(AshMapping *m);
extern bool ash_snap_copy_next(AshConn *data, XLogRecPtr lsn, bytea *attempt);

/* The attempt. */
extern Attempt *ash_snap_arm(List *source, const AshSlotStart *start,
							 const AshBinding *binding);
extern void ash_snap_install_floors(Attempt *a, XLogRecPtr watermark);
extern void ash_snap_read_watermark(AshBinding *binding);
extern void ash_snap_check_provenance_versions(Attempt *a);

/* Copiers: the pipeline worker and its helpers. */
extern void ash_snap_close_connections(void);
extern void ash_snap_raise_helper_end(AshCopier *c);

/*
 * A helper's start, its origin and its failure (snapshot_copier.c): for
 * v1's copiers and the incremental snapshot's helpers alike.
 */
extern AshPipelineSlot *ash_snap_helper_attach(Datum main_arg, char *sink_name, Oid *dboid);
extern void ash_snap_helper_connect(Oid dboid, const char *sink_name);
extern void ash_snap_helper_done(AshPipelineSlot *slot, int index);
extern AshCheckpointKey *ash_snap_helper_load(const char *sink_name);
extern bool ash_snap_copier_attach_origin(const char *sink_name, int index);
extern void ash_snap_copier_drop_origin(const char *sink_name, int index);
extern void ash_snap_drop_copier_origins(void);
extern void ash_snap_copier_failed(AshPipelineSlot *slot, int index, const char *sink_name);

/* Stop the incremental helpers of this session (snapshot_incr.c). */
extern void ash_snap_incr_helper_stop(bool wait);

/* Ask every incremental helper started to end, at once (snapshot_incr.c). */
extern void ash_snap_incr_helper_terminate(void);

/* Wait until the v1 helpers of a failed session are gone (snapshot.c). */
extern void ash_snap_helpers_wait_exited(void);

#endif							/* ASH_SNAPSHOT_INT_H */
