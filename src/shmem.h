/*-------------------------------------------------------------------------
 *
 * shmem.h
 *	  Shared-memory pipeline slots: liveness, counters and in-memory halts.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SHMEM_H
#define ASH_SHMEM_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/spin.h"

#define ASH_NAME_LEN		64	/* sink names are limited to 63 bytes */
#define ASH_REASON_LEN		64

/* Counters published by a pipeline worker (read by the stat view). */
typedef struct AshPipelineStats
{
	uint64		received_xacts;
	uint64		applied_xacts;
	uint64		skipped_xacts;
	uint64		received_changes;
	uint64		applied_changes;
	uint64		skipped_changes;
	uint64		missing_row_deletes;
	uint64		batches;
	uint64		reconnects;
	XLogRecPtr	last_received_lsn;
	XLogRecPtr	applied_lsn;	/* durable watermark (commit LSN) */
	XLogRecPtr	source_end_lsn; /* last wal position received from the source */
	XLogRecPtr	flushed_lsn;	/* last position acknowledged as flushed */
	TimestampTz last_commit_time;	/* source commit time of last applied */

	/*
	 * Source commit time of the oldest transaction received and not yet
	 * applied, or 0: lag_seconds counts from it
	 */
	TimestampTz unapplied_commit_time;
	TimestampTz last_census_at;
	char		last_census_verdict[16];	/* "", pass, drift, fault */
	bool		census_enabled;
	bool		slot_ready;		/* this session holds its slot */

	/* snapshot progress (snapshot.c); snapshot_in_flight while copying */
	bool		snapshot_in_flight;
	char		snapshot_phase[16]; /* "", "copying", "complete" */
	int32		snapshot_tables_total;
	int32		snapshot_tables_copied;
	uint64		snapshot_rows_committed;	/* rows of the copied tables */
	uint64		snapshot_rows_estimate;
	uint64		snapshot_flush_requests;	/* incremental: the source asked to
											 * flush, since the worker started */
	bool		streaming;		/* reached the streaming phase */

	/*
	 * A resource the worker waits for (a reason code of class waiting:
	 * destination_origin_limit, source_connection_limit, source_slot_limit),
	 * or "": status shows it with catching_up.
	 */
	char		wait_reason[ASH_REASON_LEN];

	/* since when the source has been creating a slot for it, or 0 */
	TimestampTz slot_wait_since;

	/*
	 * The source's backend of the session that streams (or connects to
	 * stream) the slot, or 0 between sessions: doctor tells it from
	 * another consumer of the slot
	 */
	int32		source_pid;
} AshPipelineStats;

/*
 * One copier of a snapshot (snapshot.c): the pipeline worker itself (index
 * 0) or a helper worker it started (snapshot_copier.c).  The table in
 * flight, and how a helper ended.  Protected by the slot's mutex.
 */
#define ASH_SNAPSHOT_COPIERS_MAX 8

typedef enum AshCopierEnd
{
	ASH_COPIER_RUNNING = 0,
	ASH_COPIER_DONE,			/* no table left to claim */
	ASH_COPIER_HALT,			/* halt: reason, context */
	ASH_COPIER_SOURCE_FAULT,	/* source/transport: source_sqlstate */
	ASH_COPIER_APPLY_ERROR		/* destination error: sqlerrcode */
} AshCopierEnd;

/* a quoted schema-qualified name: two quoted identifiers and a dot */
#define ASH_HALT_TARGET_LEN (4 * NAMEDATALEN + 8)

typedef struct AshCopier
{
	pid_t		pid;			/* 0: not running */
	char		schema[NAMEDATALEN];	/* the table in flight, or "" */
	char		table[NAMEDATALEN];
	uint64		rows;			/* its rows so far (not yet committed) */
	AshCopierEnd end;
	int			sqlerrcode;
	char		source_sqlstate[6];
	char		reason[ASH_REASON_LEN];
	char		context[128];	/* structural (table names) only */
	char		target[ASH_HALT_TARGET_LEN];	/* the halt's table, or "" */
	TimestampTz source_lock_since;	/* its COPY waits for a lock at the
									 * source since (0: not) */
} AshCopier;

/*
 * The helper of an incremental snapshot (snapshot_incr.c): a background
 * worker that writes the chunks of a second table while the pipeline
 * worker writes those of the first.  The pipeline worker asks for chunks
 * (READ) with the transactions the stream delivered that a chunk's
 * snapshot must show (noted) and how many chunks it may commit (granted,
 * which the worker raises while the helper copies); the helper reads each
 * chunk, commits it when its snapshot shows them and reports it in the
 * ring (its window and where the table stands), and goes IDLE when the
 * grant is used up, the worker revoked it, its table is copied or a chunk
 * could not be written (dropped, locked).  The pipeline worker applies
 * nothing from the stream while a helper is READ.  A helper's chunk costs
 * no wake-up while the worker keeps its grant ahead: in a virtual machine
 * a wake-up of a sleeping process costs up to a millisecond, a chunk of
 * 1,000 rows a few.  Protected by the slot's mutex.
 */
#define ASH_INCR_HELPER_XIP_MAX 1024
#define ASH_INCR_HELPER_NOTED_MAX 1024
#define ASH_INCR_HELPER_KEY_MAX 512
#define ASH_INCR_HELPER_RING 4

typedef enum AshIncrHelperState
{
	ASH_INCR_HELPER_OFF = 0,	/* no helper, or it is starting */
	ASH_INCR_HELPER_IDLE,		/* ready for chunks (the last grant ended) */
	ASH_INCR_HELPER_READ,		/* worker: copy chunks of the table */
	ASH_INCR_HELPER_STOP,		/* worker: no chunk left for it, exit */
	ASH_INCR_HELPER_ENDED		/* helper: gone (copiers[i].end says how) */
} AshIncrHelperState;

/* A chunk a helper committed: its window and where its table stands. */
typedef struct AshIncrReport
{
	/* its snapshot (every xid: a larger one is not written) */
	uint32		xmin;
	uint32		xmax;
	int			nxip;
	uint32		xip[ASH_INCR_HELPER_XIP_MAX];
	XLogRecPtr	high_lsn;
	bool		reread;			/* its read-ahead was read again */
	/* its rows, the table's last, its largest key */
	int64		nrows;
	bool		done;
	int			nkeys;			/* 0: the key did not fit, read the catalog */
	char		hi[ASH_INCR_HELPER_KEY_MAX];	/* the key's texts, each NUL-ended */
} AshIncrReport;

typedef struct AshIncrHelper
{
	AshIncrHelperState state;
	Latch	   *worker_latch;
	Latch	   *helper_latch;
	/* the request: the table, its chunks committed before, read-ahead ok */
	char		schema[NAMEDATALEN];
	char		table[NAMEDATALEN];
	int64		chunks;
	bool		ahead_ok;
	/* ... the transactions the chunks' snapshots must show, their rows' position */
	int			nnoted;
	uint32		noted[ASH_INCR_HELPER_NOTED_MAX];
	XLogRecPtr	position;
	/* ... how many chunks it may commit; stop before the next one */
	int			granted;
	bool		revoked;
	/* the chunks committed under the request ([n % ASH_INCR_HELPER_RING]) */
	int			committed;
	AshIncrReport reports[ASH_INCR_HELPER_RING];
	/* how the request ended: a chunk not written (its read-ahead read again) */
	int			rereads;
	bool		dropped;
	bool		locked;			/* ... its read met a lock at the source */
} AshIncrHelper;

typedef enum AshSlotState
{
	ASH_SLOT_FREE = 0,
	ASH_SLOT_STARTING,			/* registered by the launcher, not attached */
	ASH_SLOT_RUNNING,			/* worker attached */
	ASH_SLOT_EXITED				/* worker gone; slot kept for its halt leg */
} AshSlotState;

typedef struct AshPipelineSlot
{
	bool		in_use;
	char		sink_name[ASH_NAME_LEN];
	Oid			dboid;
	int64		generation;		/* pipelines.start_generation served */
	int64		config_version; /* sinks.config_version loaded */
	AshSlotState state;
	pid_t		pid;			/* 0 until the worker attached */
	bool		exit_clean;		/* worker left deliberately (halt/stop/restart) */
	bool		stop_requested;
	bool		register_failed;	/* no background worker slot was free */
	TimestampTz started_at;

	/* in-memory leg of a halt (survives a failed tombstone write) */
	char		halt_reason[ASH_REASON_LEN];
	char		halt_class[16];
	int64		halt_generation;
	TimestampTz halted_at;
	char		halt_sqlstate[6];	/* "" when the halt had none */
	XLogRecPtr	halt_lsn;		/* commit LSN it stopped at, or invalid */
	char		halt_target[ASH_HALT_TARGET_LEN];	/* mapping target, or "" */

	slock_t		mutex;			/* protects stats and the snapshot below */
	AshPipelineStats stats;

	/* the snapshot the copiers import, while one is copied */
	char		snapshot_name[64];
	XLogRecPtr	snapshot_lsn;
	AshCopier	copiers[ASH_SNAPSHOT_COPIERS_MAX];
	AshIncrHelper incr_helpers[ASH_SNAPSHOT_COPIERS_MAX];	/* [copier] */

	/*
	 * Crash-loop guard (pipeline.c): what the worker is applying.  Written
	 * by the worker alone, without a lock; read by the postmaster only once
	 * every process is gone (ash_crash_carry).
	 */
	XLogRecPtr	applying_lsn;	/* commit LSN of the transaction in apply */
	TransactionId applying_xid; /* a streamed transaction in apply */
	bool		quit_signalled; /* the postmaster told the worker to quit */
} AshPipelineSlot;

typedef struct AshShared
{
	LWLock	   *lock;			/* protects slots' identity fields */
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	bool		launcher_connecting;	/* still set at a launcher's start:
										 * the one before died connecting */
	int			nslots;
	AshPipelineSlot slots[FLEXIBLE_ARRAY_MEMBER];
} AshShared;

extern AshShared *AshShmem;

/*
 * A pipeline worker that died by itself (no exit of its own, no quit
 * order from the postmaster), as the postmaster found its slot before a
 * crash restart wiped shared memory.  The postmaster carries these
 * records across the restart (its own memory survives it) for the next
 * worker of the sink to read.  AshShmem->nslots entries, under
 * AshShmem->lock; dboid InvalidOid marks a free entry.
 */
typedef struct AshCrashRecord
{
	Oid			dboid;
	char		sink_name[ASH_NAME_LEN];
	int64		generation;		/* start generation of the dead worker */
	bool		pending;		/* no worker has read it yet */
	XLogRecPtr	applying_lsn;	/* commit LSN it was applying, or invalid */
	TransactionId applying_xid; /* streamed transaction it was applying */
	int			streak;			/* deaths in a row, until a session proves
								 * itself */
} AshCrashRecord;

extern AshCrashRecord *AshCrashes;

extern void ash_shmem_request(void);
extern void ash_shmem_startup(void);

/* Errors out unless the library was preloaded (shared memory exists). */
extern void ash_require_shmem(void);

/*
 * True when a pipeline worker for sink_name is registered and alive in this
 * database.  Callers need no lock.
 */
extern bool ash_pipeline_is_running(const char *sink_name);

/*
 * The same, and the source's backend of the worker's session (0 when it
 * has none: between sessions, or before it connected).
 */
extern bool ash_pipeline_source_pid(const char *sink_name, int32 *source_pid);

/*
 * Why no worker runs for a pipeline of this database, whatever its
 * configuration: library_not_preloaded, launcher_not_running (none at the
 * moment), launcher_database_mismatch (the launcher supervises the
 * database of ash_replicant.database); NULL when none of them holds.
 */
extern const char *ash_unsupervised_reason(void);

/* Find the slot of sink_name in database dboid (caller holds lock). */
extern AshPipelineSlot *ash_slot_find(Oid dboid, const char *sink_name);

/* The crash record of sink_name in database dboid, or NULL (caller holds lock). */
extern AshCrashRecord *ash_crash_find(Oid dboid, const char *sink_name);

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

#endif							/* ASH_SHMEM_H */
