/*-------------------------------------------------------------------------
 *
 * snapshot_incr.c
 *	  Incremental snapshots (snapshot => 'incremental'): the chunks, and
 *	  the helpers that copy several tables at once.
 *
 * NOTES
 *	  The attempt, its catalog rows and the source's table list are the
 *	  driver's (snapshot.c, through snapshot_int.h); what the stream
 *	  applies while the tables are copied is incremental.c's.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog_internal.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "ash_replicant.h"
#include "errors.h"
#include "incremental.h"
#include "messages.h"
#include "provenance.h"
#include "relmap.h"
#include "shmem.h"
#include "snapshot.h"
#include "snapshot_int.h"
#include "source_catalog.h"
#include "source_columns.h"
#include "spi_util.h"

/* ---------------------------------------------------------------------
 * Incremental snapshots (snapshot => 'incremental').
 *
 * The pipeline worker streams from the slot's position at once and, between
 * two source transactions of the stream, copies the tables in primary-key
 * order, chunk_rows rows per chunk (up to snapshot_workers tables at once,
 * with helpers: "Tables in parallel" below).  A chunk is read on a second
 * connection under a REPEATABLE READ snapshot (nothing is written on the
 * source) and committed, once the source has flushed what the snapshot
 * shows (chunk_flushed), in one destination transaction that holds
 * the checkpoint row locked: its rows (through apply, as snapshot rows of
 * a provenance mapping), the table's cursor and row count, and its window
 * (the key range, the snapshot's xmin, xmax and in-progress xids, and the
 * end of the source's WAL when the snapshot was taken).  incremental.c
 * decides from the cursors and windows what the stream applies, and why
 * the result is exact (docs/snapshots.md, "Why incremental is exact").
 * The table's last chunk also retires the rows of its target the attempt
 * did not see, as v1 does.
 * ---------------------------------------------------------------------
 */

/* One table's primary key, as the source describes it. */
typedef struct IncrKeyDesc
{
	char	   *nspname;
	char	   *relname;
	int			nkeys;
	char	  **names;
	Oid		   *types;
} IncrKeyDesc;

static AshConn *incr_conn = NULL;	/* the chunk reads' connection */
static List *incr_keys = NIL;	/* IncrKeyDesc *, in incr_cxt */
static Attempt *incr_attempt = NULL;
static MemoryContext incr_session_cxt = NULL;
static char *incr_described = NULL; /* table whose Relation was applied */
static AshRelation incr_rel;	/* ... and its description */
static bool incr_fresh = false; /* its target was empty at its first chunk */

/*
 * The next chunk's read, sent ahead: once a chunk's rows are here, the
 * read of the rows above them is sent before they are written, so the
 * source runs it while the destination writes.  Its result is used only
 * if, when its turn comes, its snapshot still shows every transaction the
 * stream delivered meanwhile (else it is read again): see the step.
 */
static bool incr_ahead = false;
static char *incr_ahead_table = NULL;	/* quoted name, in incr_session_cxt */
static char **incr_ahead_cursor = NULL; /* the key it reads above */
static int	incr_ahead_nkeys = 0;	/* ... of this many columns (0: the
									 * table's first chunk) */
static TimestampTz incr_ahead_sent_at = 0;	/* ... when it was sent */

/*
 * The worker's read sent again after it met a lock waits at the source
 * without lock_timeout (until a result is read); incr_probe asks the source
 * whether it waits for a lock once connect_timeout has passed without an
 * answer, every ASH_CONN_WAIT_ASK_MS (incr_asked_at).
 */
static bool incr_read_waits = false;
static AshConn *incr_probe = NULL;
static TimestampTz incr_asked_at = 0;
static int64 incr_rereads = 0;	/* this table's chunks read again */

/*
 * The read of a chunk above a cursor is prepared on the chunk connection
 * once per table (it was planned at every chunk): the statement's name,
 * and the table it reads (quoted, in incr_session_cxt; NULL: none).
 */
#define INCR_CHUNK_STATEMENT "ash_replicant_chunk"
/* the chunk's header: snapshot, WAL position, block size, origins, WAL flushed */
#define CHUNK_HEADER_COLS 5
static char *incr_prepared_for = NULL;
static bool incr_prepared = false;	/* the statement exists on incr_conn */

/*
 * Every window row kept in snapshot_windows has high_lsn at or above this
 * (0: not known): a chunk deletes the closed rows only when one can be.
 */
static XLogRecPtr incr_kept_low = InvalidXLogRecPtr;

/*
 * The worker deletes closed windows' rows once per this many of its chunks
 * that find one (a statement per chunk otherwise; the rows left meanwhile
 * are closed, and a later session reads them only to close them).
 */
#define INCR_PRUNE_CHUNKS 32
static int	incr_unpruned = 0;

/* The incremental helper (tables in parallel, below). */
static BackgroundWorkerHandle *incr_helpers[ASH_SNAPSHOT_COPIERS_MAX];	/* [1..]: started */
static bool incr_helper_gone[ASH_SNAPSHOT_COPIERS_MAX]; /* stopped this session */
static bool incr_helpers_refused = false;	/* no more helpers this session */
static int64 incr_helper_drops[ASH_SNAPSHOT_COPIERS_MAX];	/* chunks read, dropped */

/*
 * Helper i's request as the worker knows it: outstanding (its end not
 * taken yet), for which table, how many chunks it may commit and how many
 * of those the worker took; whether the last chunk it read was written,
 * and the transactions noted and forgotten then (its read-ahead's use,
 * incr_helper_request); the count noted at this request.
 */
static bool incr_helper_active[ASH_SNAPSHOT_COPIERS_MAX];
static SnapTable *incr_helper_asked[ASH_SNAPSHOT_COPIERS_MAX];
static int	incr_helper_granted[ASH_SNAPSHOT_COPIERS_MAX];
static int	incr_helper_taken[ASH_SNAPSHOT_COPIERS_MAX];
static bool incr_helper_written[ASH_SNAPSHOT_COPIERS_MAX];
static uint64 incr_helper_ref_adds[ASH_SNAPSHOT_COPIERS_MAX];
static uint64 incr_helper_ref_drops[ASH_SNAPSHOT_COPIERS_MAX];
static uint64 incr_helper_asked_adds[ASH_SNAPSHOT_COPIERS_MAX];
static bool incr_helper_dropped_now = false;	/* a request ended dropped */

/*
 * The table each copier copies (the worker's, helper i's): a copier keeps
 * its table until it is copied (a target found empty at a table's first
 * chunk is written without the upsert's fallback by the copier that found
 * it), then takes the first table nobody copies.
 */
static SnapTable *incr_own_table = NULL;
static SnapTable *incr_helper_table[ASH_SNAPSHOT_COPIERS_MAX];

/*
 * A read that meets a lock at the source gives up after INCR_LOCK_TIMEOUT_MS
 * (lock_timeout).  The worker sends it again at once, to wait for the lock,
 * and asks for its answer every INCR_LOCK_POLL_MS; a helper's table is read
 * again after a pause, doubled while the lock stays (SnapTable.lock_retry_at).
 */
#define INCR_LOCK_TIMEOUT_MS 200
#define INCR_LOCK_POLL_MS 50
#define INCR_LOCK_RETRY_MIN_MS 1000
#define INCR_LOCK_RETRY_MAX_MS 8000

/*
 * A chunk read before the source flushed what its snapshot shows has the
 * source flush (source_flush_now).  Where the source refuses that, it waits
 * (chunk_flushed), asking again after 1, 2, 4 ... ms, at most every
 * INCR_FLUSH_POLL_MAX_MS, for up to INCR_FLUSH_WAIT_MAX_MS (a source's WAL
 * writer flushes every wal_writer_delay, 200 ms by default; 25 times that
 * once it has been idle for a while): then it is dropped, the stream goes
 * on, and the worker reads its next chunk once the source has flushed past
 * the dropped one's position (incr_flush_awaited, asked between
 * transactions of the stream).
 */
#define INCR_FLUSH_POLL_MAX_MS 16
#define INCR_FLUSH_WAIT_MAX_MS 1000
static XLogRecPtr incr_flush_awaited = InvalidXLogRecPtr;
static bool incr_flush_refused = false; /* this session: wait instead */

/* xids begun between a chunk's snapshot and its flush request, at most */
#define INCR_FLUSH_XIDS_MAX 64

/*
 * The last snapshot read on incr_conn whose transactions were flushed at
 * the source (nxip -1: none since the connection opened): see
 * chunk_flushed.
 */
static AshIncrSnapshot incr_durable = {InvalidTransactionId, InvalidTransactionId, -1, NULL};
static int	incr_durable_cap = 0;	/* xip's room, in incr_session_cxt */

static void drop_ahead(void);

static IncrKeyDesc *
incr_key_desc(const char *nspname, const char *relname)
{
	ListCell   *lc;

	foreach(lc, incr_keys)
	{
		IncrKeyDesc *k = lfirst(lc);

		if (strcmp(k->nspname, nspname) == 0 && strcmp(k->relname, relname) == 0)
			return k;
	}
	return NULL;
}

/*
 * The primary key of a source table, in key order.  Halts
 * snapshot_unsupported for a table without one (keyless tables cannot be
 * copied in key order) and for a key column whose order the destination
 * cannot reproduce: a type that is not built in, or a collatable column
 * whose collation is not "C" or "POSIX".
 */
static IncrKeyDesc *
describe_key(AshConn *conn, const char *nspname, const char *relname)
{
	const char *params[2];
	PGresult   *res;
	IncrKeyDesc *k = palloc0(sizeof(IncrKeyDesc));
	char	   *qname = quote_qualified_identifier(nspname, relname);

	params[0] = nspname;
	params[1] = relname;
	res = ash_conn_exec_params(conn,
							   "SELECT a.attname::pg_catalog.text, a.atttypid::pg_catalog.int8,"
							   "  CASE WHEN co.collname = 'default'"
							   "       THEN (SELECT d.datcollate::pg_catalog.text FROM pg_catalog.pg_database d"
							   "              WHERE d.datname = pg_catalog.current_database())"
							   "       ELSE co.collname::pg_catalog.text END"
							   "  FROM pg_catalog.pg_class c"
							   "  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
							   "  JOIN pg_catalog.pg_index i ON i.indrelid = c.oid AND i.indisprimary"
							   "  CROSS JOIN LATERAL pg_catalog.unnest(i.indkey::pg_catalog.int2[])"
							   "       WITH ORDINALITY AS k(attnum, ord)"
							   "  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum"
							   "  LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation"
							   " WHERE n.nspname = $1 AND c.relname = $2"
							   " ORDER BY k.ord",
							   2, params, false);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "incremental snapshot key description");
	if (PQntuples(res) == 0)
	{
		PQclear(res);
		ash_halt("snapshot_unsupported",
				 "table %s has no primary key: snapshot incremental copies in primary-key order",
				 qname);
	}
	k->nspname = pstrdup(nspname);
	k->relname = pstrdup(relname);
	k->nkeys = PQntuples(res);
	k->names = palloc(sizeof(char *) * k->nkeys);
	k->types = palloc(sizeof(Oid) * k->nkeys);
	for (int i = 0; i < k->nkeys; i++)
	{
		k->names[i] = pstrdup(PQgetvalue(res, i, 0));
		k->types[i] = (Oid) strtoul(PQgetvalue(res, i, 1), NULL, 10);
		if (k->types[i] >= FirstGenbkiObjectId)
		{
			PQclear(res);
			ash_halt("snapshot_unsupported",
					 "a primary key column of %s has a type that is not built in", qname);
		}
		if (!PQgetisnull(res, i, 2) && strcmp(PQgetvalue(res, i, 2), "C") != 0 &&
			strcmp(PQgetvalue(res, i, 2), "POSIX") != 0)
		{
			PQclear(res);
			ash_halt("snapshot_unsupported",
					 "a primary key column of %s has a collation other than \"C\"", qname);
		}
	}
	PQclear(res);
	return k;
}

/*
 * The chunk reads' connection (incr_conn, in incr_session_cxt), the worker's
 * or a helper's.  A read waits at most INCR_LOCK_TIMEOUT_MS for a lock at
 * the source (read_met_lock), the stream going on meanwhile.  Waiting for
 * the lock instead, the worker would stream nothing until it is released
 * -- and a source whose lock holder's commit waits for the pipeline as its
 * synchronous standby would never release it.
 */
static void
open_chunk_conn(AshPipelineConfig *cfg)
{
	MemoryContext old = MemoryContextSwitchTo(incr_session_cxt);

	incr_conn = ash_conn_open(cfg->connection, ASH_CONN_DATA, "ash_replicant snapshot");
	MemoryContextSwitchTo(old);
	if (!ash_source_identity_matches(incr_conn, cfg->source_system_identifier,
									 cfg->source_database))
		ash_halt("source_identity_mismatch", "the snapshot connection reached another source");
	ash_snap_read_settings(incr_conn);
	PQclear(ash_conn_exec(incr_conn, "SET lock_timeout = '" CppAsString2(INCR_LOCK_TIMEOUT_MS) "ms'",
						  false));
}

/*
 * Every table copied: the chunk reads' connection goes (with the lock
 * probe's), rather than idling at the source for the rest of the session.
 * Nothing after needs it: the windows still open judge the stream from
 * what they recorded.  Again: nothing.
 */
static void
close_chunk_conn(void)
{
	drop_ahead();
	if (incr_probe != NULL)
		ash_conn_close(incr_probe);
	incr_probe = NULL;
	incr_read_waits = false;
	if (incr_conn != NULL)
		ash_conn_close(incr_conn);
	incr_conn = NULL;
	incr_prepared_for = NULL;	/* with the connection */
	incr_prepared = false;
	incr_durable.nxip = -1;
}

/*
 * Before the checkpoint is bound: the source connection of the chunk reads
 * and every mapped table's primary key (a table that cannot be copied in
 * key order halts here, with nothing recorded).
 */
void
ash_snapshot_incremental_prepare(AshPipelineConfig *cfg)
{
	List	   *tables;
	ListCell   *lc;
	MemoryContext old;

	ash_snap_cfg = cfg;

	/*
	 * The helper of the last session gone first: its chunk, committed or
	 * not, is then final when the attempt is read.
	 */
	ash_snap_incr_helper_stop(true);
	ash_snap_helpers_wait_exited();	/* a v1 session's, under the same numbers */
	incr_helpers_refused = false;
	memset(incr_helper_gone, 0, sizeof(incr_helper_gone));
	memset(incr_helper_drops, 0, sizeof(incr_helper_drops));
	memset(incr_helper_active, 0, sizeof(incr_helper_active));
	memset(incr_helper_written, 0, sizeof(incr_helper_written));
	incr_own_table = NULL;
	memset(incr_helper_table, 0, sizeof(incr_helper_table));
	if (incr_conn != NULL)
		ash_conn_close(incr_conn);
	incr_conn = NULL;
	if (incr_probe != NULL)
		ash_conn_close(incr_probe);
	incr_probe = NULL;
	incr_read_waits = false;
	incr_flush_awaited = InvalidXLogRecPtr;
	incr_flush_refused = false;
	incr_durable.nxip = -1;		/* with the connection */
	incr_durable.xip = NULL;	/* with the session's context, below */
	incr_durable_cap = 0;
	if (incr_session_cxt == NULL)
		incr_session_cxt = AllocSetContextCreate(TopMemoryContext,
												 "ash_replicant incremental session",
												 ALLOCSET_DEFAULT_SIZES);
	MemoryContextReset(incr_session_cxt);
	incr_keys = NIL;
	incr_attempt = NULL;
	incr_described = NULL;
	incr_fresh = false;
	incr_ahead = false;			/* its connection is closed here */
	incr_kept_low = InvalidXLogRecPtr;
	incr_unpruned = 0;
	incr_ahead_table = NULL;
	incr_ahead_cursor = NULL;
	incr_ahead_nkeys = 0;
	incr_prepared_for = NULL;	/* with the connection */
	incr_prepared = false;
	ash_incr_reset(NULL);
	ash_provenance_set_unfingerprinted(InvalidOid);

	/*
	 * In the session context of this module, which outlives the pipeline's
	 * session (reset when the next one starts, after an error too): the
	 * next session closes the connection before it opens its own.
	 */
	open_chunk_conn(cfg);

	old = MemoryContextSwitchTo(incr_session_cxt);
	tables = ash_snap_source_tables(incr_conn);
	foreach(lc, tables)
	{
		SnapTable  *t = lfirst(lc);

		incr_keys = lappend(incr_keys, describe_key(incr_conn, t->nspname, t->relname));
	}
	MemoryContextSwitchTo(old);
}

/*
 * The transactions running on the source now (their xid locks are held
 * until they are visible to new snapshots).  Read once the slot exists: a
 * transaction committed before the slot's position is not streamed, and
 * one an earlier session was delivered is not streamed again; either may
 * still be invisible to new snapshots, and no chunk is read under a
 * snapshot that does not show it ended.
 */
static void
note_running_xids(void)
{
	PGresult   *res;

	res = ash_conn_exec(incr_conn,
						"SELECT l.transactionid::pg_catalog.text FROM pg_catalog.pg_locks l"
						" WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted",
						false);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "incremental snapshot running transactions");
	for (int i = 0; i < PQntuples(res); i++)
		ash_incr_note_xid((TransactionId) strtoul(PQgetvalue(res, i, 0), NULL, 10));
	PQclear(res);
}

/* "xmin:xmax:xip,..." of txid_current_snapshot() (12+), as 32-bit xids. */
static void
parse_snapshot(const char *text, AshIncrSnapshot *snap)
{
	const char *p = text;
	char	   *end;
	int			cap = 16;

	snap->nxip = 0;
	snap->xip = palloc(sizeof(TransactionId) * cap);
	snap->xmin = (TransactionId) strtoull(p, &end, 10);
	if (*end != ':')
		ash_halt("protocol_violation", "a source snapshot could not be read");
	p = end + 1;
	snap->xmax = (TransactionId) strtoull(p, &end, 10);
	if (*end != ':')
		ash_halt("protocol_violation", "a source snapshot could not be read");
	p = end + 1;
	while (*p != '\0')
	{
		if (snap->nxip == cap)
		{
			cap *= 2;
			snap->xip = repalloc(snap->xip, sizeof(TransactionId) * cap);
		}
		snap->xip[snap->nxip++] = (TransactionId) strtoull(p, &end, 10);
		if (end == p || (*end != ',' && *end != '\0'))
			ash_halt("protocol_violation", "a source snapshot could not be read");
		p = *end == ',' ? end + 1 : end;
	}
	/* sorted for bsearch (incremental.c) */
	for (int i = 1; i < snap->nxip; i++)
		for (int j = i; j > 0 && snap->xip[j - 1] > snap->xip[j]; j--)
		{
			TransactionId x = snap->xip[j];

			snap->xip[j] = snap->xip[j - 1];
			snap->xip[j - 1] = x;
		}
}

/* text[] literal of a key (NULL: SQL NULL); values quoted for array input. */
static Datum
key_array(char **key, int nkeys)
{
	Datum	   *elems = palloc(sizeof(Datum) * nkeys);

	for (int i = 0; i < nkeys; i++)
		elems[i] = CStringGetTextDatum(key[i]);
	return PointerGetDatum(construct_array(elems, nkeys, TEXTOID, -1, false, TYPALIGN_INT));
}

/* A key as a text[] statement parameter; a missing key (NULL) as SQL NULL. */
static void
key_param(char **key, int nkeys, Datum *value, char *null)
{
	if (key != NULL)
		*value = key_array(key, nkeys);
	else
		*null = 'n';
}

static Datum
xip_array(const AshIncrSnapshot *snap)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(snap->nxip, 1));

	for (int i = 0; i < snap->nxip; i++)
		elems[i] = Int64GetDatum((int64) snap->xip[i]);
	return PointerGetDatum(construct_array(elems, snap->nxip, INT8OID, 8, FLOAT8PASSBYVAL,
										   TYPALIGN_DOUBLE));
}

/* Windows recorded by earlier sessions, for tables whose copy is under way. */
static void
load_windows(void)
{
	(void) ash_snap_key_exec("SELECT source_schema, source_table, chunk, lo, hi, snap_xmin, snap_xmax,"
							 "       snap_xip, high_lsn"
							 "  FROM ash_replicant.snapshot_windows"
							 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							 " ORDER BY source_schema, source_table, chunk",
							 0, NULL, NULL, NULL, SPI_OK_SELECT);
	for (uint64 r = 0; r < SPI_processed; r++)
	{
		HeapTuple	tup = SPI_tuptable->vals[r];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d;
		char	  **bound[2] = {NULL, NULL};
		AshIncrSnapshot snap;
		ArrayType  *xa;
		Datum	   *xe;
		int			nx;

		for (int b = 0; b < 2; b++)
		{
			d = SPI_getbinval(tup, desc, 4 + b, &isnull);
			if (!isnull)
			{
				List	   *l = ash_text_array_to_list(d, false);
				ListCell   *kc;
				int			i = 0;

				bound[b] = palloc0(sizeof(char *) * Max(list_length(l), 1));
				foreach(kc, l)
					bound[b][i++] = lfirst(kc);
			}
		}
		snap.xmin = (TransactionId) DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));
		snap.xmax = (TransactionId) DatumGetInt64(SPI_getbinval(tup, desc, 7, &isnull));
		xa = DatumGetArrayTypeP(SPI_getbinval(tup, desc, 8, &isnull));
		deconstruct_array(xa, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &xe, NULL, &nx);
		snap.nxip = nx;
		snap.xip = palloc(sizeof(TransactionId) * Max(nx, 1));
		for (int i = 0; i < nx; i++)
			snap.xip[i] = (TransactionId) DatumGetInt64(xe[i]);
		ash_incr_add_window(SPI_getvalue(tup, desc, 1), SPI_getvalue(tup, desc, 2),
							DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull)),
							bound[0], bound[1], &snap,
							DatumGetLSN(SPI_getbinval(tup, desc, 9, &isnull)));
	}
}

/*
 * Arm (first start) or resume the incremental attempt; the stream starts
 * at once afterwards.  Installs the cursors and windows apply judges by.
 */
void
ash_snapshot_incremental_begin(AshPipelineConfig *cfg, AshCheckpointKey *key,
							   const AshSlotStart *start, AshBinding *binding)
{
	Attempt    *a;
	ListCell   *lc;
	MemoryContext old;

	ash_snap_cfg = cfg;
	ash_snap_key = key;
	ash_snap_slot = ash_snap_find_slot();
	ash_snap_my_copier = 0;
	ash_snap_publish_source_lock(0, false); /* of the last session's read */

	drop_ahead();				/* the connection is used below */
	old = MemoryContextSwitchTo(incr_session_cxt);
	a = ash_snap_arm(ash_snap_source_tables(incr_conn), start, binding);
	MemoryContextSwitchTo(old);
	incr_attempt = a;
	ash_snap_check_provenance_versions(a);

	/*
	 * Every table of the attempt, copied or not, and the windows still
	 * open: a window outlives its table's copy (and the attempt) until the
	 * stream has passed it.
	 */
	ash_incr_reset(a->phase == ASH_SNAPSHOT_COMPLETE ? NULL : a->id);
	if (a->phase != ASH_SNAPSHOT_COMPLETE)
		note_running_xids();
	ash_spi_transaction_begin();			/* type lookups: in a transaction */
	foreach(lc, a->tables)
	{
		SnapTable  *t = lfirst(lc);
		IncrKeyDesc *k = incr_key_desc(t->nspname, t->relname);

		if (k == NULL)
		{
			if (t->copied)
				continue;		/* unmapped since: nothing to judge */
			/* no fault to retry: it is back only when the operator says so */
			ash_halt("snapshot_state_invalid",
					 "source table %s of the attempt is out of the publication (or the source) before its copy ended:"
					 " add it back and restart",
					 quote_qualified_identifier(t->nspname, t->relname));
		}
		ash_incr_add_table(t->nspname, t->relname, k->nkeys, k->names, k->types,
						   t->copied ? NULL : t->cursor, t->copied);
	}
	{
		Oid			types[1] = {LSNOID};
		Datum		values[1];

		/* the stream delivered every commit up to the watermark: closed */
		values[0] = LSNGetDatum(binding->commit_lsn + 1);
		(void) ash_snap_key_exec("DELETE FROM ash_replicant.snapshot_windows"
								 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
								 "   AND high_lsn <= $4",
								 1, types, values, NULL, SPI_OK_DELETE);
		incr_kept_low = binding->commit_lsn + 2;
	}
	load_windows();
	ash_spi_transaction_end();

	ash_snap_read_watermark(binding);
	ash_apply_set_watermark(binding->commit_lsn, binding->end_lsn);
	ash_snap_install_floors(a, binding->commit_lsn);
	(void) ash_incr_close_windows(binding->commit_lsn + 1);
	ash_snap_publish_attempt(a, ash_incr_active());
	if (ash_incr_active())
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.copying sink=%s tables=%d mode=incremental",
						ash_snap_cfg->sink_name, list_length(a->tables))));
	else
		close_chunk_conn();		/* nothing to copy this session */
}

/*
 * Can a row of m's target above the cursor hold a fingerprint a chunk row
 * could match?  Only a fingerprint stamped by another attempt: this
 * attempt's chunks stamp the keys they copied, and the stream stamps none.
 * When no row has one, the chunks skip the probe (a first load); asked
 * once a table and session.
 */
static void
incr_probe_needed(AshMapping *m)
{
	char	   *nsp;
	char	   *rel;
	Oid			types[1] = {BYTEAOID};
	Datum		values[1];
	bool		none = false;

	ash_provenance_set_unfingerprinted(InvalidOid);
	if (m->tenant_strategy != NULL && strcmp(m->tenant_strategy, "context") == 0)
		return;
	ash_spi_transaction_begin();
	nsp = get_namespace_name(get_rel_namespace(m->target_relid));
	rel = get_rel_name(m->target_relid);
	if (nsp != NULL && rel != NULL)
	{
		values[0] = PointerGetDatum(incr_attempt->id);
		if (ash_spi_execute_args(psprintf("SELECT 1 FROM %s WHERE %s IS NOT NULL"
										  "   AND %s IS DISTINCT FROM $1 LIMIT 1",
										  quote_qualified_identifier(nsp, rel),
										  ASH_PROVENANCE_FINGERPRINT_COLUMN,
										  ASH_PROVENANCE_SEEN_COLUMN),
								 1, types, values, NULL, SPI_OK_SELECT,
								 "incremental snapshot fingerprint check") == 0)
			none = true;
	}
	ash_spi_transaction_end();
	if (none)
		ash_provenance_set_unfingerprinted(m->target_relid);
}

/*
 * Is every column of k's key an integer (int2, int4, int8)?  Read in
 * binary, such a key's text form is its decimal digits whatever the
 * settings of either server, so the worker writes the cursor itself and
 * finds it as the largest key of the chunk, in any order of its rows: the
 * chunk's statement needs neither format() per row nor a second sort.
 */
static bool
integer_key(IncrKeyDesc *k)
{
	for (int i = 0; i < k->nkeys; i++)
		if (k->types[i] != INT2OID && k->types[i] != INT4OID && k->types[i] != INT8OID)
			return false;
	return true;
}

/*
 * The value of an integer key column in binary (its send format: 2, 4 or
 * 8 bytes, big-endian); false when the bytes are not of that type.
 */
static bool
integer_key_value(PGresult *res, int row, int col, Oid type, int64 *v)
{
	const unsigned char *p = (const unsigned char *) PQgetvalue(res, row, col);
	int			len = PQgetlength(res, row, col);
	uint64		u = 0;

	if (PQgetisnull(res, row, col) ||
		len != (type == INT2OID ? 2 : type == INT4OID ? 4 : 8))
		return false;
	for (int i = 0; i < len; i++)
		u = (u << 8) | p[i];
	if (type == INT2OID)
		*v = (int16) (uint16) u;
	else if (type == INT4OID)
		*v = (int32) (uint32) u;
	else
		*v = (int64) u;
	return true;
}

/*
 * The read of a chunk: one statement, so one snapshot and one round trip.
 * Its first branch is one header row: the snapshot, the end of the
 * source's WAL read after it (every transaction the snapshot shows
 * committed below that position), the WAL block size and, for a pipeline
 * with origin => 'none', whether the server holds a replication origin
 * (ash_snap_check_origins), its other columns NULL; the second is the chunk -- the next chunk_rows rows in
 * primary-key order above the cursor ($1..$n; none for a table's first
 * chunk) -- with NULL in the header's columns (a NULL costs a row four
 * bytes and no send function; the snapshot's text repeated in every row
 * cost the source a third more send calls on a table of nine columns).
 * UNION ALL gives each NULL the type of the other branch's column.
 *
 * In binary when every type is built in, as v1 reads (its send format is
 * known here); then the key follows in its text form, the cursor's, as
 * the source's output function writes it -- except for an integer key
 * (integer_key), whose text the worker writes, and whose rows need no
 * order: the inner ORDER BY ... LIMIT picks the chunk, its largest key is
 * the cursor, and the header is found by its snapshot (chunk_read).
 * Otherwise the header comes first and the rows after it in key order,
 * the last one's key the cursor.
 */
static char *
chunk_query(IncrKeyDesc *k, const AshRelation *rel, bool after_cursor, bool binary)
{
	StringInfoData sql;
	bool		intkey = binary && integer_key(k);
	int			nkeytext = binary && !intkey ? k->nkeys : 0;

	initStringInfo(&sql);
	appendStringInfoString(&sql,
						   "SELECT pg_catalog.txid_current_snapshot()::pg_catalog.text,"
						   " pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text,"
						   " pg_catalog.current_setting('wal_block_size'),");
	appendStringInfoString(&sql, ash_snap_cfg->origin_none ?
						   " (" ASH_SOURCE_ORIGINS_SQL ")::pg_catalog.text," : " NULL::pg_catalog.text,");
	appendStringInfoString(&sql, " pg_catalog.pg_current_wal_flush_lsn()::pg_catalog.text");
	for (int i = 0; i < rel->natts + nkeytext; i++)
		appendStringInfoString(&sql, ", NULL");
	appendStringInfoString(&sql, " UNION ALL (SELECT NULL, NULL, NULL, NULL, NULL");
	for (int i = 0; i < rel->natts; i++)
		appendStringInfo(&sql, ", %s", quote_identifier(rel->cols[i].name));
	for (int i = 0; i < nkeytext; i++)
		appendStringInfo(&sql, ", pg_catalog.format('%%s', %s)", quote_identifier(k->names[i]));
	appendStringInfo(&sql, " FROM ONLY %s", quote_qualified_identifier(k->nspname, k->relname));
	if (after_cursor)
	{
		appendStringInfoString(&sql, " WHERE (");
		for (int i = 0; i < k->nkeys; i++)
			appendStringInfo(&sql, "%s%s", i ? ", " : "", quote_identifier(k->names[i]));
		appendStringInfoString(&sql, ") > (");
		for (int i = 0; i < k->nkeys; i++)
			appendStringInfo(&sql, "%s$%d", i ? ", " : "", i + 1);
		appendStringInfoString(&sql, ")");
	}
	appendStringInfoString(&sql, " ORDER BY ");
	for (int i = 0; i < k->nkeys; i++)
		appendStringInfo(&sql, "%s%s", i ? ", " : "", quote_identifier(k->names[i]));
	appendStringInfo(&sql, " LIMIT %d)", ash_snap_cfg->chunk_rows);
	if (intkey)
		return sql.data;

	/* the header (the only row with a snapshot) first, then by key */
	appendStringInfoString(&sql, " ORDER BY 1 NULLS LAST");
	for (int i = 0; i < k->nkeys; i++)
		for (int j = 0; j < rel->natts; j++)
			if (strcmp(rel->cols[j].name, k->names[i]) == 0)
				appendStringInfo(&sql, ", %d", CHUNK_HEADER_COLS + 1 + j);
	return sql.data;
}

/*
 * Did the source give up on a lock for this statement (lock_timeout:
 * another session holds the table)?  Any other error is raised.
 */
static bool
met_lock(PGresult *res, const char *what)
{
	const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	if (PQresultStatus(res) == PGRES_FATAL_ERROR && sqlstate != NULL &&
		strcmp(sqlstate, "55P03") == 0)
	{
		PQclear(res);
		return true;
	}
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, what);
	return false;
}

/*
 * Send the read of the chunk above cursor (NULL: the table's first, read
 * once).  The read above a cursor is prepared at the table's first such
 * read, the previous table's statement deallocated (nothing is pending on
 * the connection when a read is sent).  Preparing it locks the table: false
 * when that met a lock, nothing sent.  Not prepared: the statement is sent
 * whole (a read that met a lock is sent again so, without waiting).
 */
static bool
send_chunk(IncrKeyDesc *k, const AshRelation *rel, char **cursor, bool binary, bool prepared)
{
	char	   *qname;

	if (cursor == NULL || !prepared)
	{
		ash_conn_send_params(incr_conn, chunk_query(k, rel, cursor != NULL, binary),
							 cursor != NULL ? k->nkeys : 0, (const char *const *) cursor, binary);
		return true;
	}
	qname = quote_qualified_identifier(k->nspname, k->relname);
	if (incr_prepared_for == NULL || strcmp(incr_prepared_for, qname) != 0)
	{
		PGresult   *res;

		if (incr_prepared)
			PQclear(ash_conn_exec(incr_conn, "DEALLOCATE " INCR_CHUNK_STATEMENT, false));
		incr_prepared = false;
		incr_prepared_for = NULL;
		res = ash_conn_prepare(incr_conn, INCR_CHUNK_STATEMENT, chunk_query(k, rel, true, binary),
							   k->nkeys, true);
		if (met_lock(res, "incremental snapshot chunk"))
			return false;
		PQclear(res);
		incr_prepared = true;
		incr_prepared_for = MemoryContextStrdup(incr_session_cxt, qname);
	}
	ash_conn_send_prepared(incr_conn, INCR_CHUNK_STATEMENT, k->nkeys,
						   (const char *const *) cursor, binary);
	return true;
}

/* Is the read sent ahead the one of this table's chunk above cursor? */
static bool
ahead_matches(IncrKeyDesc *k, char **cursor)
{
	const char *qname = quote_qualified_identifier(k->nspname, k->relname);

	if (!incr_ahead || strcmp(incr_ahead_table, qname) != 0)
		return false;
	if (cursor == NULL || incr_ahead_cursor == NULL)
		return cursor == NULL && incr_ahead_cursor == NULL;
	if (incr_ahead_nkeys != k->nkeys)
		return false;
	for (int i = 0; i < k->nkeys; i++)
		if (cursor[i] == NULL || incr_ahead_cursor[i] == NULL ||
			strcmp(cursor[i], incr_ahead_cursor[i]) != 0)
			return false;
	return true;
}

/*
 * The worker's read that waited for a lock is answered: later reads wait
 * at most lock_timeout again.
 */
static void
read_answered(void)
{
	if (!incr_read_waits)
		return;
	incr_read_waits = false;
	PQclear(ash_conn_exec(incr_conn, "SET lock_timeout = '" CppAsString2(INCR_LOCK_TIMEOUT_MS) "ms'",
						  false));
	if (incr_probe != NULL)
		ash_conn_close(incr_probe);
	incr_probe = NULL;
}

/*
 * Forget the read sent ahead (its result read and thrown away; one that
 * waits for a lock is cancelled first).
 */
static void
drop_ahead(void)
{
	if (!incr_ahead)
		return;
	incr_ahead = false;
	if (incr_read_waits && ash_conn_busy(incr_conn))
		ash_conn_cancel(incr_conn);
	PQclear(ash_conn_get_result(incr_conn, true));
	read_answered();
}

/* Mark the attempt complete (no watermark change: the stream owns it). */
static void
incr_complete(void)
{
	if (ash_snap_key_exec("UPDATE ash_replicant.checkpoints"
						  "   SET snapshot_phase = 'complete', go_forward_uncopied = NULL,"
						  "       updated_at = pg_catalog.now()"
						  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
						  "   AND snapshot_phase = 'copying'",
						  0, NULL, NULL, NULL, SPI_OK_UPDATE) != 1)
		ash_halt("snapshot_state_invalid", "the snapshot attempt changed under this pipeline");
}

/*
 * One chunk of a table: its read, what it holds, and where it ends.  The
 * pipeline worker and the helper (below) fill it the same way, each on
 * its own source connection.
 */
typedef struct IncrChunk
{
	char	   *nspname;
	char	   *relname;
	char	  **cursor;			/* the key it reads above (NULL: the first) */
	IncrKeyDesc *k;
	AshMapping *map;
	SnapTable  *st;
	AshRelation rel;
	bool		binary;
	bool		intkey;
	bool		ahead;			/* its read had been sent ahead */
	PGresult   *res;
	int			header;			/* the row of res with the snapshot */
	AshIncrSnapshot snap;
	XLogRecPtr	high_lsn;
	XLogRecPtr	flushed_lsn;	/* the source's WAL flushed, read with it */
	XLogRecPtr	position;		/* its rows' (chunk_write) */
	int			nrows;			/* the others: the chunk's rows */
	bool		done;			/* the table's last chunk */
	char	  **hi;				/* its largest key (NULL with done) */
	int64		chunk_no;
} IncrChunk;

/*
 * A mapped column dropped since the table's record of the columns feeding
 * its target (source_columns.c): halts before any chunk of the session is
 * written under the description that lacks it.
 */
static void
judge_dropped_columns(AshMapping *m, const AshRelation *desc)
{
	char	   *nsp;
	char	   *rel;

	ash_spi_transaction_begin();
	nsp = get_namespace_name(get_rel_namespace(m->target_relid));
	rel = get_rel_name(m->target_relid);
	ash_source_columns_judge_dropped(ash_snap_cfg, m, desc,
									 nsp != NULL && rel != NULL ?
									 quote_qualified_identifier(nsp, rel) : NULL);
	ash_spi_transaction_end();
}

/* The table of a chunk: checked, and described once a session and table. */
static void
chunk_setup(IncrChunk *c, char *nspname, char *relname, char **cursor, SnapTable *st)
{
	MemoryContext cxt = CurrentMemoryContext;

	memset(c, 0, sizeof(IncrChunk));
	c->nspname = nspname;
	c->relname = relname;
	c->cursor = cursor;
	c->st = st;
	c->k = incr_key_desc(nspname, relname);
	c->map = ash_config_find_mapping(ash_snap_cfg, nspname, relname);
	if (c->k == NULL || c->map == NULL || st == NULL)
		ash_halt("snapshot_state_invalid", "table %s of the attempt is no longer mapped",
				 quote_qualified_identifier(nspname, relname));

	/* the table as pgoutput describes it, once a session */
	if (incr_described == NULL ||
		strcmp(incr_described, quote_qualified_identifier(nspname, relname)) != 0)
	{
		SnapTable  *dt;

		drop_ahead();			/* of another table: the connection is used */
		MemoryContextSwitchTo(incr_session_cxt);
		dt = palloc0(sizeof(SnapTable));
		dt->nspname = pstrdup(nspname);
		dt->relname = pstrdup(relname);
		memset(&incr_rel, 0, sizeof(incr_rel));
		ash_snap_describe_table(incr_conn, dt, &incr_rel);
		MemoryContextSwitchTo(cxt);
		judge_dropped_columns(c->map, &incr_rel);
		MemoryContextSwitchTo(incr_session_cxt);
		/* not the stream's: it may still deliver rows of another shape */
		ash_relmap_update_chunk_relation(&incr_rel);
		incr_described = pstrdup(quote_qualified_identifier(nspname, relname));
		incr_prepared_for = NULL;	/* the statement reads the columns just described */
		MemoryContextSwitchTo(cxt);
		incr_probe_needed(c->map);
		incr_fresh = false;
		incr_rereads = 0;
	}

	c->rel = incr_rel;
	c->binary = true;
	for (int i = 0; i < c->rel.natts; i++)
		if (c->rel.cols[i].type_oid >= FirstGenbkiObjectId)
			c->binary = false;
	c->intkey = c->binary && integer_key(c->k);
}

/*
 * Send the read of c's table above cursor (NULL: its first chunk) ahead:
 * its result is collected when the chunk's turn comes (chunk_read).
 * prepared: through the table's prepared statement, which may have to be
 * prepared first -- a wait for the source's answer.
 */
static void
send_ahead(IncrChunk *c, char **cursor, bool prepared)
{
	MemoryContext old = MemoryContextSwitchTo(incr_session_cxt);

	if (incr_ahead_table != NULL)
		pfree(incr_ahead_table);
	if (incr_ahead_cursor != NULL)
	{
		for (int i = 0; i < incr_ahead_nkeys; i++)
			pfree(incr_ahead_cursor[i]);
		pfree(incr_ahead_cursor);
	}
	incr_ahead_table = pstrdup(quote_qualified_identifier(c->nspname, c->relname));
	incr_ahead_cursor = NULL;
	incr_ahead_nkeys = 0;
	if (cursor != NULL)
	{
		incr_ahead_cursor = palloc(sizeof(char *) * c->k->nkeys);
		incr_ahead_nkeys = c->k->nkeys;
		for (int i = 0; i < c->k->nkeys; i++)
			incr_ahead_cursor[i] = pstrdup(cursor[i]);
	}
	MemoryContextSwitchTo(old);
	incr_ahead = send_chunk(c->k, &c->rel, cursor, c->binary, prepared);
	incr_ahead_sent_at = GetCurrentTimestamp();
}

/*
 * c's read met a lock at the source (lock_timeout).  The worker sends it
 * again at once, whole, without lock_timeout, and does not wait for it: it
 * waits at the source for the lock while the stream goes on
 * (chunk_unanswered), and is answered as soon as the lock is released -- one
 * read queued at the source, one lock timeout in its log.  A helper drops
 * its chunk (the worker leaves the table alone for a while:
 * copier_met_lock).
 */
static bool
read_met_lock(IncrChunk *c)
{
	if (ash_snap_my_copier == 0)
	{
		if (!incr_read_waits)
			PQclear(ash_conn_exec(incr_conn, "SET lock_timeout = 0", false));
		incr_read_waits = true;
		incr_asked_at = 0;
		send_ahead(c, c->cursor, false);
	}
	return false;
}

/*
 * Is the worker's read of c, sent again after it met a lock, still
 * unanswered?  Asked without waiting.  After connect_timeout without an
 * answer, only while the source says the read waits for a lock (asked on a
 * probe connection every ASH_CONN_WAIT_ASK_MS); otherwise chunk_read waits
 * for it as for any read, and gives up after connect_timeout.
 */
static bool
chunk_unanswered(IncrChunk *c)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!ahead_matches(c->k, c->cursor) || !ash_conn_busy(incr_conn))
		return false;
	if (!TimestampDifferenceExceeds(incr_ahead_sent_at, now, ash_connect_timeout_ms) ||
		!TimestampDifferenceExceeds(incr_asked_at, now, ASH_CONN_WAIT_ASK_MS))
		return true;
	if (incr_read_waits)
	{
		MemoryContext old = MemoryContextSwitchTo(incr_session_cxt);
		bool		waits = ash_snap_source_lock_waits(incr_conn, (void *) &incr_probe);

		MemoryContextSwitchTo(old);
		incr_asked_at = now;
		if (waits)
			return true;
	}
	return false;
}

/*
 * The chunk's rows and snapshot: the read sent ahead when it is this
 * chunk's and may_ahead, else read now.  False when the read met a lock at
 * the source (nothing read).
 */
static bool
chunk_read(IncrChunk *c, bool may_ahead)
{
	PGresult   *res;
	uint64		blcksz;
	int			h;

	c->res = NULL;
	c->ahead = may_ahead && ahead_matches(c->k, c->cursor);
	if (!c->ahead)
	{
		drop_ahead();
		if (!send_chunk(c->k, &c->rel, c->cursor, c->binary, true))
			return read_met_lock(c);
	}
	incr_ahead = false;
	res = ash_conn_get_result(incr_conn, true);
	read_answered();
	if (met_lock(res, "incremental snapshot chunk"))
		return read_met_lock(c);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) < 1 ||
		PQnfields(res) != CHUNK_HEADER_COLS + c->rel.natts + (c->binary && !c->intkey ? c->k->nkeys : 0))
		ash_conn_report_result(res, "incremental snapshot chunk");

	/*
	 * Read in binary, every column must be of the type the session
	 * described: one retyped since (an ALTER the chunk waited for) sends
	 * another format, which would read as another value.  The session
	 * ends; the next describes the table again.
	 */
	if (c->binary)
		for (int i = 0; i < c->rel.natts; i++)
			if (PQftype(res, CHUNK_HEADER_COLS + i) != c->rel.cols[i].type_oid)
			{
				PQclear(res);
				ereport(LOG,
						(errmsg("ash_replicant event=snapshot.table_retyped sink=%s table=%s",
								ash_snap_cfg->sink_name,
								quote_qualified_identifier(c->nspname, c->relname)),
						 errdetail("A column of the table changed type at the source during the session; the next session describes the table again.")));
				ash_conn_last_sqlstate[0] = '\0';
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("ash_replicant: a column of source table %s changed type during the session",
								quote_qualified_identifier(c->nspname, c->relname))));
			}
	c->res = res;

	/* the header: first, or anywhere among an integer key's rows */
	c->header = -1;
	for (int r = 0; r < (c->intkey ? PQntuples(res) : 1); r++)
		if (!PQgetisnull(res, r, 0))
		{
			if (c->header >= 0)
				c->header = -2;
			else if (c->header == -1)
				c->header = r;
		}
	if (c->header < 0)
		ash_halt("protocol_violation", "a chunk of %s lacks its snapshot",
				 quote_qualified_identifier(c->nspname, c->relname));
	h = c->header;

	/* text values (in binary: their bytes), never a NUL inside */
	parse_snapshot(pnstrdup(PQgetvalue(res, h, 0), PQgetlength(res, h, 0)), &c->snap);
	c->high_lsn = ash_snap_parse_lsn(pnstrdup(PQgetvalue(res, h, 1), PQgetlength(res, h, 1)));

	/*
	 * At a page boundary the insert position points past the next page's
	 * header, which no record reaches yet (and the walsender's position
	 * never passes on a quiet source): every record inserted ends at or
	 * before the boundary.
	 */
	blcksz = strtoull(pnstrdup(PQgetvalue(res, h, 2), PQgetlength(res, h, 2)), NULL, 10);
	if (blcksz > 0 && c->high_lsn % blcksz <= SizeOfXLogLongPHD)
		c->high_lsn -= c->high_lsn % blcksz;
	c->flushed_lsn = ash_snap_parse_lsn(pnstrdup(PQgetvalue(res, h, 4), PQgetlength(res, h, 4)));

	/* origins read by the chunk's statement, under the chunk's snapshot */
	if (ash_snap_cfg->origin_none && PQntuples(res) > 1 &&
		(PQgetisnull(res, h, 3) || PQgetlength(res, h, 3) != 5 ||
		 memcmp(PQgetvalue(res, h, 3), "false", 5) != 0))
		ash_snap_refuse_origins(c->nspname, c->relname);
	return true;
}

/* Forget a chunk read but not written. */
static void
chunk_forget(IncrChunk *c)
{
	if (c->res != NULL)
		PQclear(c->res);
	c->res = NULL;
}

/* The source's WAL flush position, asked on the chunk connection. */
static XLogRecPtr
source_flush_position(void)
{
	PGresult   *res = ash_conn_exec(incr_conn,
									"SELECT pg_catalog.pg_current_wal_flush_lsn()::pg_catalog.text",
									false);
	XLogRecPtr	flushed;

	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0))
		ash_conn_report_result(res, "incremental snapshot flush position");
	flushed = ash_snap_parse_lsn(PQgetvalue(res, 0, 0));
	PQclear(res);
	return flushed;
}

/*
 * Have the source flush its WAL now, on the connection that read chunk c: a
 * transactional logical message (ASH_MESSAGE_PREFIX_FLUSH, no content)
 * committed with synchronous_commit = local, so that the commit returns only
 * once the source's WAL is flushed through it -- past everything c's
 * snapshot shows.  PostgreSQL allows it in a read-only transaction; it
 * writes no table, takes a transaction id, and every logical decoding
 * consumer of the database sees the message (ash_replicant's own acknowledge
 * it with no effect).  On a source whose commits are asynchronous its WAL
 * writer flushes every wal_writer_delay: a chunk waiting for that took
 * 200 ms, the copy of a busy source two orders of magnitude longer
 * (bench/README.md, "Initial load from a busy source").
 *
 * True when the source flushed: c's flushed position is raised, and *xid
 * is the message's transaction.  Refused (EXECUTE revoked, say), the
 * session waits for the source's own flushes from then on (logged once).
 * A crash of the source fails the connection: an error, as for the read.
 */
static bool
source_flush_now(IncrChunk *c, TransactionId *xid)
{
	PGresult   *res;
	XLogRecPtr	lsn;

	if (incr_flush_refused)
		return false;
	res = ash_conn_exec(incr_conn,
						"SET synchronous_commit = local;"
						" SELECT pg_catalog.pg_logical_emit_message(true, '"
						ASH_MESSAGE_PREFIX_FLUSH "', '')::pg_catalog.text,"
						" (pg_catalog.txid_current() % 4294967296)::pg_catalog.text",
						true);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 ||
		PQgetisnull(res, 0, 0) || PQgetisnull(res, 0, 1))
	{
		const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);

		if (PQstatus(incr_conn->conn) != CONNECTION_OK)
			ash_conn_report_result(res, "incremental snapshot flush request");
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.flush_request_refused sink=%s copier=%d sqlstate=%s",
						ash_snap_cfg->sink_name, ash_snap_my_copier,
						sqlstate != NULL ? sqlstate : "none"),
				 errdetail("Chunks wait for the source's own WAL flushes instead (pg_logical_emit_message)."),
				 errhint("Grant the source role EXECUTE on pg_logical_emit_message, or see docs/snapshots.md, \"Faults and restarts\".")));
		PQclear(res);
		incr_flush_refused = true;
		return false;
	}
	lsn = ash_snap_parse_lsn(PQgetvalue(res, 0, 0));
	*xid = (TransactionId) strtoul(PQgetvalue(res, 0, 1), NULL, 10);
	PQclear(res);
	SpinLockAcquire(&ash_snap_slot->mutex);
	ash_snap_slot->stats.snapshot_flush_requests++;
	SpinLockRelease(&ash_snap_slot->mutex);
	/* its commit record follows the message and was flushed with it */
	c->flushed_lsn = Max(c->flushed_lsn, lsn);
	return true;
}

/*
 * Has the source flushed its WAL up to the position read with c's snapshot?
 * A transaction committed with synchronous_commit = off is visible before
 * its commit record is flushed, and a crash of the source loses it: a chunk
 * that showed it, written here, would keep its effect for good (the stream
 * never delivers a lost transaction, nor anything undoing it).  Every commit
 * the snapshot shows is below that position, so a chunk is written only once
 * the source has flushed that far (docs/snapshots.md, "Why incremental is
 * exact", fact 4).  The flush position read with the snapshot usually covers
 * it already (a quiet source, or one whose commits are synchronous and
 * flushed); otherwise the source is asked again, on the connection that read
 * the chunk (idle: the next read is sent after this), until a commit or its
 * WAL writer has flushed that far.  A crash of the source in between ends
 * that connection -- an error: the chunk is not written, and read again by
 * the next session -- so a position reported after a crash, over WAL
 * written anew, is never taken for the one the snapshot saw.  False after
 * INCR_FLUSH_WAIT_MAX_MS (the chunk is dropped, the stream goes on).
 *
 * A snapshot with the same xmax and in-progress xids as one read earlier on
 * this connection and found flushed shows the same transactions (none
 * ended in between: an end either removes an xid from the in-progress list
 * or raises xmax), so it needs no wait.  On a source where nothing commits
 * while the copy runs, only the first chunk can wait -- for WAL its own
 * reads may write (a page image when a read sets hint bits, with data
 * checksums), which no commit needs.
 */
static bool
chunk_flushed(IncrChunk *c)
{
	TimestampTz began = 0;
	long		sleep_ms = 0;
	TransactionId flush_xid = InvalidTransactionId;
	bool		asked = false;

	if (c->flushed_lsn < c->high_lsn && ash_incr_shows_no_more(&c->snap, &incr_durable))
		return true;

	/*
	 * The source is asked to flush once a snapshot of this connection has
	 * passed: the first waits for the source's own flush, as a quiet
	 * source's does, whose stream then carries no request of ours.
	 */
	if (c->flushed_lsn < c->high_lsn && incr_durable.nxip >= 0)
		asked = source_flush_now(c, &flush_xid);
	while (c->flushed_lsn < c->high_lsn)
	{
		if (began == 0)
			began = GetCurrentTimestamp();
		else if (TimestampDifferenceExceeds(began, GetCurrentTimestamp(), INCR_FLUSH_WAIT_MAX_MS))
		{
			if (!asked && (asked = source_flush_now(c, &flush_xid)))
				continue;
			ereport(LOG,
					(errmsg("ash_replicant event=snapshot.flush_wait sink=%s table=%s copier=%d waited_ms=%d",
							ash_snap_cfg->sink_name,
							quote_qualified_identifier(c->nspname, c->relname),
							ash_snap_my_copier, INCR_FLUSH_WAIT_MAX_MS),
					 errdetail("The source has not flushed its WAL to where the chunk was read; it is read again once it has.")));
			if (ash_snap_my_copier == 0)
				incr_flush_awaited = c->high_lsn;
			return false;
		}
		if (sleep_ms > 0)
			pg_usleep(sleep_ms * 1000L);
		CHECK_FOR_INTERRUPTS();
		sleep_ms = Min(Max(sleep_ms * 2, 1), INCR_FLUSH_POLL_MAX_MS);
		c->flushed_lsn = source_flush_position();
	}
	if (incr_durable_cap < Max(c->snap.nxip, 1))
	{
		if (incr_durable.xip != NULL)
			pfree(incr_durable.xip);
		incr_durable_cap = Max(c->snap.nxip, 16);
		incr_durable.xip = MemoryContextAlloc(incr_session_cxt,
											  sizeof(TransactionId) * incr_durable_cap);
	}
	memcpy(incr_durable.xip, c->snap.xip, sizeof(TransactionId) * c->snap.nxip);
	incr_durable.nxip = c->snap.nxip;
	incr_durable.xmin = c->snap.xmin;
	incr_durable.xmax = c->snap.xmax;

	/*
	 * The flush request's own transaction is flushed too: taken as ended,
	 * with those begun between c's snapshot and it as in progress (nothing
	 * is claimed of them), the next snapshot of a source where nothing else
	 * ended shows no more and needs no request.
	 */
	if (TransactionIdIsNormal(flush_xid) && !TransactionIdPrecedes(flush_xid, c->snap.xmax) &&
		flush_xid - c->snap.xmax <= INCR_FLUSH_XIDS_MAX)
	{
		TransactionId x = c->snap.xmax;

		if (incr_durable_cap < c->snap.nxip + INCR_FLUSH_XIDS_MAX)
		{
			incr_durable_cap = c->snap.nxip + INCR_FLUSH_XIDS_MAX;
			incr_durable.xip = repalloc(incr_durable.xip, sizeof(TransactionId) * incr_durable_cap);
		}
		while (TransactionIdPrecedes(x, flush_xid))
		{
			incr_durable.xip[incr_durable.nxip++] = x;
			TransactionIdAdvance(x);
		}
		TransactionIdAdvance(flush_xid);
		incr_durable.xmax = flush_xid;
	}
	return true;
}

/*
 * Has the source flushed past the chunk the worker dropped at the flush
 * wait?  Asked only on an idle connection (a read sent ahead will wait at
 * the check anyway).
 */
static bool
flush_awaited_passed(void)
{
	if (XLogRecPtrIsInvalid(incr_flush_awaited) || ash_conn_busy(incr_conn) ||
		source_flush_position() >= incr_flush_awaited)
		incr_flush_awaited = InvalidXLogRecPtr;
	return XLogRecPtrIsInvalid(incr_flush_awaited);
}

/*
 * How many rows the chunk holds and its largest key (the next cursor);
 * then the next chunk's read is sent, so that the source runs it while
 * this one is written.  If this chunk does not commit, that read is
 * dropped with the connection (an error ends the session) or by its key
 * (ahead_matches).
 */
static void
chunk_bounds(IncrChunk *c)
{
	PGresult   *res = c->res;
	IncrKeyDesc *k = c->k;
	int		   *keycol = palloc(sizeof(int) * k->nkeys);
	int		   *keytext = palloc(sizeof(int) * k->nkeys);

	/*
	 * Where each key column is: its value, and its text form (in binary,
	 * format() after the values).
	 */
	for (int i = 0; i < k->nkeys; i++)
	{
		int			col = -1;

		for (int j = 0; j < c->rel.natts; j++)
			if (strcmp(c->rel.cols[j].name, k->names[i]) == 0)
				col = j;
		if (col < 0)
			ash_halt("protocol_violation", "a chunk of %s lacks its primary key",
					 quote_qualified_identifier(c->nspname, c->relname));
		keycol[i] = CHUNK_HEADER_COLS + col;
		keytext[i] = c->binary && !c->intkey ? CHUNK_HEADER_COLS + c->rel.natts + i : keycol[i];
	}
	c->nrows = PQntuples(res) - 1;
	c->done = c->nrows < ash_snap_cfg->chunk_rows;
	if (!c->done && c->intkey)
	{
		/* the largest key of the chunk, its rows in no particular order */
		int64	   *best = palloc(sizeof(int64) * k->nkeys);
		int64	   *cur = palloc(sizeof(int64) * k->nkeys);
		bool		first = true;

		for (int r = 0; r < PQntuples(res); r++)
		{
			int			cmp = 0;

			if (r == c->header)
				continue;
			for (int i = 0; i < k->nkeys; i++)
				if (!integer_key_value(res, r, keycol[i], k->types[i], &cur[i]))
					ash_halt("protocol_violation", "a chunk of %s lacks its primary key",
							 quote_qualified_identifier(c->nspname, c->relname));
			for (int i = 0; !first && cmp == 0 && i < k->nkeys; i++)
				cmp = cur[i] > best[i] ? 1 : cur[i] < best[i] ? -1 : 0;
			if (first || cmp > 0)
				memcpy(best, cur, sizeof(int64) * k->nkeys);
			first = false;
		}
		c->hi = palloc(sizeof(char *) * k->nkeys);
		for (int i = 0; i < k->nkeys; i++)
			c->hi[i] = psprintf(INT64_FORMAT, best[i]);
	}
	else if (!c->done)
	{
		c->hi = palloc(sizeof(char *) * k->nkeys);
		for (int i = 0; i < k->nkeys; i++)
		{
			/* the header first, the rows after it (chunk_read) */
			if (PQgetisnull(res, c->nrows, keycol[i]) ||
				PQgetisnull(res, c->nrows, keytext[i]))
				ash_halt("protocol_violation", "a chunk of %s lacks its primary key",
						 quote_qualified_identifier(c->nspname, c->relname));
			c->hi[i] = pnstrdup(PQgetvalue(res, c->nrows, keytext[i]),
								PQgetlength(res, c->nrows, keytext[i]));
		}
	}
	c->chunk_no = c->st->chunks + 1;

	if (!c->done)
		send_ahead(c, c->hi, true);
}

/*
 * Rows, progress, cursor and window: one destination transaction.  It
 * holds the checkpoint row FOR SHARE (the attempt cannot change under it;
 * the helper's chunk transaction holds it too, at the same time).  The
 * pipeline worker (worker) also deletes the windows the stream closed and,
 * at the attempt's last table, completes it; a helper checks, under that
 * lock, that the pipeline worker that asked for the chunk is still the
 * pipeline's (a later one reads the attempt FOR UPDATE, after this
 * transaction).
 */
static void
chunk_write(IncrChunk *c, bool worker)
{
	AshChange	change;
	IncrKeyDesc *k = c->k;

	/*
	 * The rows' position (ash_snap_chunk_position): every commit the stream
	 * delivers from now on is above it, every version in the target below
	 * it.  Not the snapshot's WAL position: a transaction the snapshot does
	 * not show can have committed below it, and its change to a key of this
	 * chunk, applied after the chunk, must land after the chunk's version
	 * (SCD2 takes a change below a version for one applied before).  A
	 * helper is given the worker's position with its request: the worker
	 * delivers nothing for this chunk's keys until it has judged the commit.
	 */
	if (worker)
		c->position = ash_snap_chunk_position(incr_attempt, ash_apply_watermark());
	Assert(!XLogRecPtrIsInvalid(c->position));
	ash_apply_snapshot_begin(c->position, 0, incr_attempt->id, false);
	if (ash_snap_key_exec("SELECT 1 FROM ash_replicant.checkpoints"
						  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
						  "   AND snapshot_phase = 'copying' FOR SHARE",
						  0, NULL, NULL, NULL, SPI_OK_SELECT) != 1)
		ash_halt("snapshot_state_invalid", "the snapshot attempt changed under this pipeline");
	if (!worker)
		ash_snap_check_coordinator();

	/*
	 * A target empty when its first chunk is copied stays empty above the
	 * cursor (the stream writes only keys at or below it): every row of
	 * this session's chunks is new, written without the upsert's fallback.
	 */
	if (c->cursor == NULL)
		incr_fresh = ash_snap_target_is_empty(c->map);
	if (incr_fresh)
		ash_apply_snapshot_fresh(c->map->target_relid, false);	/* stream reads between chunks */
	memset(&change, 0, sizeof(change));
	change.kind = ASH_CHANGE_INSERT;
	change.xid = InvalidTransactionId;
	change.u.insert.relid = c->rel.relid;
	change.u.insert.newtup.natts = c->rel.natts;
	change.u.insert.newtup.cols = palloc0(sizeof(AshColumnValue) * Max(c->rel.natts, 1));
	for (int r = 0; r < PQntuples(c->res); r++)
	{
		if (r == c->header)
			continue;
		for (int col = 0; col < c->rel.natts; col++)
		{
			AshColumnValue *v = &change.u.insert.newtup.cols[col];

			if (PQgetisnull(c->res, r, CHUNK_HEADER_COLS + col))
			{
				v->status = ASH_COL_NULL;
				v->len = 0;
				v->data = NULL;
			}
			else
			{
				v->status = c->binary ? ASH_COL_BINARY : ASH_COL_TEXT;
				v->data = PQgetvalue(c->res, r, CHUNK_HEADER_COLS + col);
				v->len = PQgetlength(c->res, r, CHUNK_HEADER_COLS + col);
			}
		}
		ash_apply_change(&change);
	}
	chunk_forget(c);
	(void) ash_apply_snapshot_flush();
	if (c->done && incr_fresh)
	{
		/*
		 * The target was empty at this table's first chunk: every row in it
		 * since is one the attempt wrote -- a chunk's, or the stream's at a
		 * key the copy had passed -- and each is marked seen.  Nothing is
		 * unseen, so the whole table is not scanned for it.  (Known only in
		 * the session that copied the first chunk: after a restart the
		 * table is scanned.)
		 */
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.retired sink=%s table=%s rows=0 scan=skipped",
						ash_snap_cfg->sink_name, quote_qualified_identifier(c->nspname, c->relname))));
	}
	else if (c->done)
	{
		int64		retired = ash_apply_snapshot_retire(c->map, c->position, false);

		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.retired sink=%s table=%s rows=" INT64_FORMAT,
						ash_snap_cfg->sink_name, quote_qualified_identifier(c->nspname, c->relname),
						retired)));
	}
	{
		Oid			types[10] = {TEXTOID, TEXTOID, INT8OID, TEXTARRAYOID, TEXTARRAYOID, LSNOID,
		INT8OID, INT8OID, INT8OID, INT8ARRAYOID};
		Datum		values[10];
		char		nulls[11] = "          ";

		/*
		 * The table's progress and the chunk's window in one statement (each
		 * statement is a fixed cost of every chunk): the window is written
		 * only when the progress row was where this chunk began.
		 */
		values[0] = CStringGetTextDatum(c->nspname);
		values[1] = CStringGetTextDatum(c->relname);
		values[2] = Int64GetDatum(c->nrows);
		key_param(c->hi, k->nkeys, &values[3], &nulls[3]);
		key_param(c->cursor, k->nkeys, &values[4], &nulls[4]);
		values[5] = LSNGetDatum(c->high_lsn);
		values[6] = Int64GetDatum(c->chunk_no);
		values[7] = Int64GetDatum((int64) c->snap.xmin);
		values[8] = Int64GetDatum((int64) c->snap.xmax);
		values[9] = xip_array(&c->snap);
		if (ash_snap_key_exec("WITH t AS ("
							  " UPDATE ash_replicant.snapshot_tables"
							  "    SET rows_copied = rows_copied + $6, chunks_copied = chunks_copied + 1,"
							  "        chunk_cursor = $7,"
							  "        state = CASE WHEN $7 IS NULL THEN 'copied' ELSE state END,"
							  "        snapshot_lsn = CASE WHEN $7 IS NULL THEN $9 END,"
							  "        copied_at = CASE WHEN $7 IS NULL THEN pg_catalog.clock_timestamp() END"
							  "  WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							  "    AND source_schema = $4 AND source_table = $5 AND state = 'pending'"
							  "    AND chunk_cursor IS NOT DISTINCT FROM $8"
							  "  RETURNING 1)"
							  " INSERT INTO ash_replicant.snapshot_windows"
							  " (source_system_id, source_database, slot_name, source_schema, source_table,"
							  "  chunk, lo, hi, snap_xmin, snap_xmax, snap_xip, high_lsn)"
							  " SELECT $1, $2, $3, $4, $5, $10, $8, $7, $11, $12, $13, $9 FROM t",
							  10, types, values, nulls, SPI_OK_INSERT) != 1)
			ash_halt("snapshot_state_invalid", "table %s is not where its incremental copy left it",
					 quote_qualified_identifier(c->nspname, c->relname));
	}
	if (worker)
	{
		Oid			ltypes[1] = {LSNOID};
		Datum		lvalues[1];

		lvalues[0] = LSNGetDatum(Max(ash_apply_watermark() + 1, ash_incr_windows_passed()));

		/*
		 * The stream delivered and applied every commit below the
		 * watermark, and below the position the windows were closed at (a
		 * quiet source's: the watermark stays where it is while nothing
		 * commits, and without it every chunk's row stayed): closed.  No
		 * later session is delivered a commit below it -- the batches that
		 * applied them precede this transaction.  Deleted only when a kept
		 * row can be (a scan of them per chunk would grow with them), every
		 * INCR_PRUNE_CHUNKS such chunks.  A helper's rows are above the
		 * watermark when they commit.
		 */
		if (XLogRecPtrIsInvalid(incr_kept_low) ||
			(Min(incr_kept_low, c->high_lsn) <= DatumGetLSN(lvalues[0]) &&
			 ++incr_unpruned >= INCR_PRUNE_CHUNKS))
		{
			(void) ash_snap_key_exec("DELETE FROM ash_replicant.snapshot_windows"
									 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
									 "   AND high_lsn <= $4",
									 1, ltypes, lvalues, NULL, SPI_OK_DELETE);
			/* every row left is above the bound */
			incr_kept_low = DatumGetLSN(lvalues[0]) + 1;
			incr_unpruned = 0;
		}
		else
			incr_kept_low = Min(incr_kept_low, c->high_lsn);
		if (c->done && ash_incr_remaining() == 1)
			incr_complete();	/* the attempt's last table */
	}
	(void) ash_apply_snapshot_commit();
}

/* A table's chunk committed (by the worker or a helper): into the totals. */
static void
table_progress(SnapTable *st, int copier, int64 chunk_no, int64 rows, bool done,
			   int64 rereads)
{
	st->chunks = chunk_no;
	st->rows = rows;
	if (done)
	{
		st->copied = true;
		ash_snap_publish_copied_at(copier, st->rows);
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.table_copied sink=%s table=%s copier=%d rows=" INT64_FORMAT " chunks=" INT64_FORMAT " rereads=" INT64_FORMAT,
						ash_snap_cfg->sink_name, quote_qualified_identifier(st->nspname, st->relname),
						copier, st->rows, chunk_no, rereads)));
	}
	else
		ash_snap_publish_table_at(copier, st->nspname, st->relname, st->rows,
								  st->has_estimate ? st->estimate : -1);
}

/*
 * Copier i's read of table st met a lock at the source (met), or read it:
 * when the table may be read again, and what status and the log say.  A
 * helper's chunk is waited for by the worker, so its table pauses, the
 * pause doubling while the lock stays: a lock held for long costs the
 * stream a lock_timeout's wait every INCR_LOCK_RETRY_MAX_MS at most.  The
 * worker's read waits at the source instead (read_met_lock).
 */
static void
copier_met_lock(int i, SnapTable *st, bool met)
{
	if (!met && st->lock_pause_ms == 0)
		return;
	if (!met || st->lock_pause_ms == 0)
		ereport(LOG,
				(errmsg("ash_replicant event=%s sink=%s table=%s copier=%d",
						met ? "snapshot.source_lock" : "snapshot.source_lock_released",
						ash_snap_cfg->sink_name, quote_qualified_identifier(st->nspname, st->relname),
						i)));
	if (!met)
	{
		st->lock_pause_ms = 0;
		st->lock_retry_at = 0;
	}
	else if (i == 0)
		st->lock_pause_ms = Max(st->lock_pause_ms, 1);
	else
	{
		st->lock_pause_ms = st->lock_pause_ms == 0 ? INCR_LOCK_RETRY_MIN_MS :
			Min(st->lock_pause_ms * 2, INCR_LOCK_RETRY_MAX_MS);
		st->lock_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), st->lock_pause_ms);
	}
	ash_snap_publish_source_lock(i, met);
}

/* Is table st left alone for now (a lock met at the source)? */
static bool
table_paused(SnapTable *st)
{
	return st->lock_retry_at != 0 && GetCurrentTimestamp() < st->lock_retry_at;
}

/*
 * How long until a table that met a lock at the source may be read again,
 * or the worker's read of one answered, in ms (0: now).
 */
long
ash_snapshot_incremental_pause_ms(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		ms = INCR_LOCK_RETRY_MAX_MS;
	ListCell   *lc;

	if (incr_attempt == NULL)
		return 0;
	foreach(lc, incr_attempt->tables)
	{
		SnapTable  *st = lfirst(lc);

		if (st->copied || st->lock_pause_ms == 0)
			continue;
		if (table_paused(st))
			ms = Min(ms, TimestampDifferenceMilliseconds(now, st->lock_retry_at));
		else
			ms = Min(ms, INCR_LOCK_POLL_MS);
	}
	return ms;
}

/*
 * Every table copied: the attempt is complete (recorded: by the last
 * table's chunk transaction; otherwise here, in its own transaction -- the
 * last tables' chunks were committed in one round, or a session ended
 * between the last chunk and completion).
 */
static void
incr_attempt_completed(bool recorded)
{
	uint64		requests;

	if (incr_attempt->phase == ASH_SNAPSHOT_COMPLETE)
		return;
	if (!recorded)
	{
		ash_spi_transaction_begin();
		(void) ash_snap_read_attempt();
		incr_complete();
		ash_spi_transaction_end();
	}
	incr_attempt->phase = ASH_SNAPSHOT_COMPLETE;
	ash_snap_publish_attempt(incr_attempt, false);
	ash_snap_drop_copier_origins();
	SpinLockAcquire(&ash_snap_slot->mutex);
	requests = ash_snap_slot->stats.snapshot_flush_requests;
	SpinLockRelease(&ash_snap_slot->mutex);
	ereport(LOG,
			(errmsg("ash_replicant event=snapshot.complete sink=%s tables=%d mode=incremental flush_requests=" UINT64_FORMAT,
					ash_snap_cfg->sink_name, list_length(incr_attempt->tables), requests)));
}

/* The worker's own chunk committed: now the stream judges by it. */
static void
chunk_committed(IncrChunk *c)
{
	ash_incr_chunk_committed(c->nspname, c->relname, c->hi, c->done, c->chunk_no, c->cursor,
							 c->hi, &c->snap, c->high_lsn);
	table_progress(c->st, 0, c->chunk_no, c->st->rows + c->nrows, c->done, incr_rereads);
}

/* ---------------------------------------------------------------------
 * Tables in parallel: the incremental helpers.
 *
 * With ash_replicant.snapshot_workers of N >= 2 and two tables or more left
 * to copy, the pipeline worker starts up to N - 1 helpers (background
 * workers with a source connection and a replication origin of their own,
 * as v1's helper copiers); each copier keeps a table until it is copied.
 * The worker asks a helper for chunks of its table, handing it what the
 * stream delivered that a chunk must show (fact 2 of docs/snapshots.md: the
 * noted transactions) and how many chunks it may commit; the helper reads
 * each chunk, judges its snapshot, commits it when it shows them and
 * reports it in shared memory (its window, where the table stands), then
 * reads the next -- while the worker copies chunks of its own table.  The
 * worker takes the helpers' reports between its own chunks and raises their
 * grants as windows close, so a helper copies on without waiting for the
 * worker (a wake-up of a sleeping process can cost most of a millisecond
 * in a virtual machine, a chunk of 1,000 rows a few).
 *
 * The worker applies nothing from the stream while a helper holds a
 * request: before it does, it revokes the requests and waits until each
 * helper ended its chunk (ash_snapshot_incremental_join), and takes every
 * chunk they committed.  So nothing is delivered between any chunk's check
 * and its commit, and the stream is judged with every committed chunk's
 * window known.  The chunks a helper may commit but the worker has not
 * taken count as open windows (max_pending_chunks).
 *
 * A noted transaction is forgotten by the worker's own check only; a helper
 * keeps the list of its request.  A helper's first chunk of a request may be
 * its read-ahead (sent after its last chunk arrived) only when that chunk
 * was written and, since its request, nothing was noted or, since that
 * request ended, nothing forgotten: a transaction noted after that list and
 * forgotten before the new one could be missing from the read-ahead and
 * from the new list alike.
 *
 * A helper that fails (or vanishes) fails the worker's session; the next
 * session waits until the helpers are gone before it reads where each
 * table stands, so no chunk is half-known: each table resumes from its
 * committed cursor.
 * ---------------------------------------------------------------------
 */
#define INCR_HELPER_WAIT_MS 100

/* Helper i's shared state (the slot's mutex held by the caller). */
#define HELPER(i) (&ash_snap_slot->incr_helpers[(i)])

static AshIncrHelperState
helper_state(int i)
{
	AshIncrHelperState s;

	SpinLockAcquire(&ash_snap_slot->mutex);
	s = HELPER(i)->state;
	SpinLockRelease(&ash_snap_slot->mutex);
	return s;
}

/* Move helper i's state and wake the other side. */
static void
helper_set_state(int i, AshIncrHelperState s, bool to_helper)
{
	Latch	   *latch;

	SpinLockAcquire(&ash_snap_slot->mutex);
	HELPER(i)->state = s;
	latch = to_helper ? HELPER(i)->helper_latch : HELPER(i)->worker_latch;
	SpinLockRelease(&ash_snap_slot->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Stop helper i (its table is no longer among those it would copy; it is
 * not started again this session).  Between requests it exits by itself,
 * dropping its origin; otherwise it is terminated.  wait: until it is
 * gone, so that its chunk, committed or not, is final.
 */
static void
incr_helper_stop_one(int i, bool wait)
{
	incr_helper_gone[i] = true;
	incr_helper_active[i] = false;
	if (incr_helpers[i] != NULL)
	{
		pid_t		pid;

		if (!wait && ash_snap_slot != NULL && helper_state(i) == ASH_INCR_HELPER_IDLE)
			helper_set_state(i, ASH_INCR_HELPER_STOP, true);
		else
			TerminateBackgroundWorker(incr_helpers[i]);
		if (!wait)
			return;
		if (GetBackgroundWorkerPid(incr_helpers[i], &pid) != BGWH_POSTMASTER_DIED)
			(void) WaitForBackgroundWorkerShutdown(incr_helpers[i]);
		pfree(incr_helpers[i]);
		incr_helpers[i] = NULL;
	}
	if (ash_snap_slot != NULL)
	{
		SpinLockAcquire(&ash_snap_slot->mutex);
		memset(HELPER(i), 0, sizeof(AshIncrHelper));
		memset(&ash_snap_slot->copiers[i], 0, sizeof(AshCopier));
		SpinLockRelease(&ash_snap_slot->mutex);
	}
	incr_helper_written[i] = false;
}

void
ash_snap_incr_helper_terminate(void)
{
	for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		if (incr_helpers[i] != NULL)
			TerminateBackgroundWorker(incr_helpers[i]);
}

/*
 * Stop every helper (a session ends or fails); none is started again this
 * session.  wait: until they are gone (the next session waits otherwise).
 */
void
ash_snap_incr_helper_stop(bool wait)
{
	incr_helpers_refused = true;
	for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		if (wait || (incr_helpers[i] != NULL && !incr_helper_gone[i]))
			incr_helper_stop_one(i, wait);
}

/* Start helper i, once a session. */
static void
incr_helper_start(int i)
{
	BackgroundWorker w;
	int			slotno;
	int64		generation;
	int32		index = i;
	pid_t		coordinator = MyProcPid;

	if (incr_helpers[i] != NULL || incr_helper_gone[i] || incr_helpers_refused ||
		ash_snap_slot == NULL)
		return;
	slotno = ash_snap_slot - AshShmem->slots;
	SpinLockAcquire(&ash_snap_slot->mutex);
	memset(&ash_snap_slot->copiers[i], 0, sizeof(AshCopier));
	memset(HELPER(i), 0, sizeof(AshIncrHelper));
	HELPER(i)->state = ASH_INCR_HELPER_OFF;
	HELPER(i)->worker_latch = MyLatch;
	SpinLockRelease(&ash_snap_slot->mutex);
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	generation = ash_snap_slot->generation;
	LWLockRelease(AshShmem->lock);

	ash_worker_prepare(&w, "ash_snapshot_incr_helper_main", "ash_replicant snapshot",
					   ash_snap_cfg->sink_name, slotno, generation);
	memcpy(w.bgw_extra + sizeof(int64), &index, sizeof(int32));
	memcpy(w.bgw_extra + sizeof(int64) + sizeof(int32), &coordinator, sizeof(pid_t));
	{
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		/* no worker slot free: the tables are copied by fewer */
		if (!RegisterDynamicBackgroundWorker(&w, &incr_helpers[i]))
		{
			incr_helpers[i] = NULL;
			incr_helpers_refused = true;
		}
		MemoryContextSwitchTo(old);
	}
}

/*
 * How helper i ended, raised as the worker's own error: never a hang,
 * never a chunk the worker is unsure of.  A helper that ended without a
 * failure (no replication origin free for it) leaves its share to the
 * others.
 */
static void
incr_helper_ended(int i)
{
	AshCopier	c;

	SpinLockAcquire(&ash_snap_slot->mutex);
	memcpy(&c, &ash_snap_slot->copiers[i], sizeof(AshCopier));
	SpinLockRelease(&ash_snap_slot->mutex);
	incr_helper_stop_one(i, true);
	if (c.end == ASH_COPIER_DONE)
		return;
	if (c.end == ASH_COPIER_RUNNING)
	{
		/* terminated (SIGTERM): retried as a shutdown, not an apply error */
		ash_apply_errctx.command = "snapshot";
		ash_apply_errctx.relation = NULL;
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("ash_replicant: an incremental snapshot helper was terminated")));
	}
	ash_snap_raise_helper_end(&c);
}

/* Is helper i there and waiting for a request? */
static bool
incr_helper_idle(int i)
{
	pid_t		pid;
	AshIncrHelperState s;

	if (incr_helpers[i] == NULL || incr_helper_gone[i] || incr_helpers_refused)
		return false;
	s = helper_state(i);
	if (s == ASH_INCR_HELPER_IDLE)
		return true;
	if (s == ASH_INCR_HELPER_ENDED)
		incr_helper_ended(i);
	else if (s == ASH_INCR_HELPER_OFF &&
			 GetBackgroundWorkerPid(incr_helpers[i], &pid) == BGWH_STOPPED)
		incr_helper_stop_one(i, true);	/* gone before it served */
	return false;
}

/* The target a table of the attempt is mapped to (InvalidOid: none). */
static Oid
table_target(SnapTable *st)
{
	AshMapping *m = ash_config_find_mapping(ash_snap_cfg, st->nspname, st->relname);

	return m != NULL ? m->target_relid : InvalidOid;
}

/*
 * Ask helper i for up to grant chunks of st, each committed only if its
 * snapshot shows the nnoted transactions of noted.
 */
static void
incr_helper_request(int i, SnapTable *st, const TransactionId *noted, int nnoted, int grant)
{
	uint64		adds;
	uint64		drops;
	bool		ahead_ok;

	Assert(nnoted <= ASH_INCR_HELPER_NOTED_MAX && grant >= 1 &&
		   grant <= ASH_INCR_HELPER_RING);
	ash_incr_noted_counts(&adds, &drops);
	ahead_ok = incr_helper_written[i] &&
		(adds == incr_helper_ref_adds[i] || drops == incr_helper_ref_drops[i]);
	SpinLockAcquire(&ash_snap_slot->mutex);
	strlcpy(HELPER(i)->schema, st->nspname, NAMEDATALEN);
	strlcpy(HELPER(i)->table, st->relname, NAMEDATALEN);
	HELPER(i)->chunks = st->chunks;
	HELPER(i)->ahead_ok = ahead_ok;
	HELPER(i)->nnoted = nnoted;
	memcpy(HELPER(i)->noted, noted, sizeof(TransactionId) * nnoted);
	HELPER(i)->position = ash_snap_chunk_position(incr_attempt, ash_apply_watermark());
	HELPER(i)->granted = grant;
	HELPER(i)->revoked = false;
	HELPER(i)->committed = 0;
	HELPER(i)->rereads = 0;
	HELPER(i)->dropped = false;
	HELPER(i)->locked = false;
	SpinLockRelease(&ash_snap_slot->mutex);
	incr_helper_active[i] = true;
	incr_helper_asked[i] = st;
	incr_helper_granted[i] = grant;
	incr_helper_taken[i] = 0;
	incr_helper_asked_adds[i] = adds;
	helper_set_state(i, ASH_INCR_HELPER_READ, true);
}

/* Let helper i commit more chunks of its request. */
static void
incr_helper_raise(int i, int more)
{
	Latch	   *latch;

	SpinLockAcquire(&ash_snap_slot->mutex);
	HELPER(i)->granted += more;
	latch = HELPER(i)->helper_latch;
	SpinLockRelease(&ash_snap_slot->mutex);
	incr_helper_granted[i] += more;
	if (latch != NULL)
		SetLatch(latch);
}

/* Chunks the helpers may commit that the worker has not taken: windows. */
static int
incr_helpers_outstanding(void)
{
	int			n = 0;

	for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		if (incr_helper_active[i])
			n += incr_helper_granted[i] - incr_helper_taken[i];
	return n;
}

/*
 * Where table nspname.relname stands in its committed catalog row: copied
 * or not, its rows and chunks copied, its cursor (NULL: none).
 */
static void
table_row(const char *nspname, const char *relname, bool *copied, int64 *rows,
		  int64 *chunks, char ***cursor)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	bool		isnull;
	HeapTuple	tup;
	TupleDesc	desc;
	Datum		d;

	values[0] = CStringGetTextDatum(nspname);
	values[1] = CStringGetTextDatum(relname);
	ash_spi_transaction_begin();
	if (ash_snap_key_exec("SELECT state, rows_copied, chunks_copied, chunk_cursor"
						  "  FROM ash_replicant.snapshot_tables"
						  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
						  "   AND source_schema = $4 AND source_table = $5",
						  2, types, values, NULL, SPI_OK_SELECT) != 1)
		ash_halt("snapshot_state_invalid", "table %s left the attempt during its copy",
				 quote_qualified_identifier(nspname, relname));
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	*copied = strcmp(SPI_getvalue(tup, desc, 1), "copied") == 0;
	*rows = DatumGetInt64(SPI_getbinval(tup, desc, 2, &isnull));
	*chunks = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
	*cursor = NULL;
	d = SPI_getbinval(tup, desc, 4, &isnull);
	if (!isnull)
	{
		List	   *l = ash_text_array_to_list(d, false);
		ListCell   *kc;
		int			k = 0;

		*cursor = palloc0(sizeof(char *) * Max(list_length(l), 1));
		foreach(kc, l)
			(*cursor)[k++] = lfirst(kc);
	}
	ash_spi_transaction_end();
}

/*
 * Helper i committed chunk r of st (the next after the worker's count):
 * where the table stands now, and the chunk's window, for the stream's
 * judgment.  A key too long for shared memory is read from the table's
 * catalog row (the helper ends its request after such a chunk).
 */
static void
incr_helper_committed(int i, SnapTable *st, const AshIncrReport *r)
{
	bool		done;
	int64		chunks;
	int64		rows;
	char	  **lo;
	char	  **hi = NULL;
	AshIncrSnapshot snap;

	if (!ash_incr_table_cursor(st->nspname, st->relname, &lo))
		ash_halt("snapshot_state_invalid", "table %s of the attempt is no longer mapped",
				 quote_qualified_identifier(st->nspname, st->relname));
	snap.xmin = r->xmin;
	snap.xmax = r->xmax;
	snap.nxip = r->nxip;
	snap.xip = palloc(sizeof(TransactionId) * Max(snap.nxip, 1));
	for (int j = 0; j < snap.nxip; j++)
		snap.xip[j] = r->xip[j];

	if (r->nkeys > 0 || r->done)
	{
		/* as the helper said it (its key fitted in shared memory) */
		const char *p = r->hi;

		done = r->done;
		rows = st->rows + r->nrows;
		chunks = st->chunks + 1;
		if (!done)
		{
			hi = palloc(sizeof(char *) * r->nkeys);
			for (int k = 0; k < r->nkeys; k++)
			{
				hi[k] = pstrdup(p);
				p += strlen(p) + 1;
			}
		}
	}
	else
	{
		table_row(st->nspname, st->relname, &done, &rows, &chunks, &hi);
		if (chunks != st->chunks + 1 || done != (hi == NULL))
			ash_halt("snapshot_state_invalid", "table %s is not where its incremental copy left it",
					 quote_qualified_identifier(st->nspname, st->relname));
	}
	if (r->reread)
		incr_helper_drops[i]++;
	ash_incr_chunk_committed(st->nspname, st->relname, hi, done, chunks, lo, hi, &snap,
							 r->high_lsn);
	/* its window row, kept in snapshot_windows too */
	if (!XLogRecPtrIsInvalid(incr_kept_low))
		incr_kept_low = Min(incr_kept_low, r->high_lsn);
	table_progress(st, i, chunks, rows, done, incr_helper_drops[i]);
	if (done)
		incr_helper_drops[i] = 0;
}

/*
 * Take the chunks helper i committed since the worker last looked (their
 * windows judge the stream from now on) and, once its request ended, how
 * it ended.  wait: revoke the request and wait until it ended.  A helper
 * that ended in a request raises.
 */
static void
incr_helper_collect(int i, bool wait)
{
	SnapTable  *st = incr_helper_asked[i];
	AshIncrReport *r = NULL;
	AshIncrHelperState s;
	int			committed;
	int			rereads;
	bool		dropped;
	bool		locked;
	uint64		adds;

	if (!incr_helper_active[i])
		return;
	if (wait)
	{
		Latch	   *latch;

		SpinLockAcquire(&ash_snap_slot->mutex);
		HELPER(i)->revoked = true;
		latch = HELPER(i)->helper_latch;
		SpinLockRelease(&ash_snap_slot->mutex);
		if (latch != NULL)
			SetLatch(latch);
	}
	for (;;)
	{
		pid_t		pid;
		bool		gone;

		gone = GetBackgroundWorkerPid(incr_helpers[i], &pid) == BGWH_STOPPED;
		SpinLockAcquire(&ash_snap_slot->mutex);
		s = HELPER(i)->state;
		committed = HELPER(i)->committed;
		SpinLockRelease(&ash_snap_slot->mutex);

		/*
		 * A report is written before committed counts it (under the mutex),
		 * and its slot is not written again before the worker raises the
		 * grant past it.
		 */
		while (incr_helper_taken[i] < committed)
		{
			if (r == NULL)
				r = palloc(sizeof(AshIncrReport));
			memcpy(r, &HELPER(i)->reports[incr_helper_taken[i] % ASH_INCR_HELPER_RING],
				   sizeof(AshIncrReport));
			incr_helper_committed(i, st, r);
			incr_helper_taken[i]++;
		}
		if (s != ASH_INCR_HELPER_READ || gone)
			break;
		if (!wait)
		{
			if (r != NULL)
				pfree(r);
			return;
		}
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 INCR_HELPER_WAIT_MS, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	if (r != NULL)
		pfree(r);
	if (s != ASH_INCR_HELPER_IDLE)
	{
		/* ended (or vanished) in the request: every chunk it committed taken */
		incr_helper_ended(i);
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("ash_replicant: an incremental snapshot helper ended in a chunk")));
	}

	SpinLockAcquire(&ash_snap_slot->mutex);
	rereads = HELPER(i)->rereads;
	dropped = HELPER(i)->dropped;
	locked = HELPER(i)->locked;
	SpinLockRelease(&ash_snap_slot->mutex);
	incr_helper_active[i] = false;
	incr_helper_drops[i] += rereads + (dropped ? 1 : 0);
	if (committed > 0 || dropped || locked)
	{
		/* a chunk was read: its read-ahead, and the lock it met or not */
		incr_helper_written[i] = !dropped && !locked;
		incr_helper_ref_adds[i] = incr_helper_asked_adds[i];
		ash_incr_noted_counts(&adds, &incr_helper_ref_drops[i]);
		copier_met_lock(i, st, locked);
	}
	if (dropped)
		incr_helper_dropped_now = true;
}

/*
 * Take what every helper committed; wait: after revoking their requests,
 * until each ended.  A helper's failure stops the others.
 */
static void
incr_helpers_collect(bool wait)
{
	int			nhelpers = Min(ash_snapshot_workers, ASH_SNAPSHOT_COPIERS_MAX) - 1;
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext rcxt = AllocSetContextCreate(cxt, "ash_replicant helper reports",
											   ALLOCSET_DEFAULT_SIZES);

	MemoryContextSwitchTo(rcxt);
	PG_TRY();
	{
		for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
			incr_helper_collect(i, wait || i > nhelpers || incr_helpers_refused);
	}
	PG_CATCH();
	{
		/* their chunks, committed or not, are read by the next session */
		ash_snap_incr_helper_stop(false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	MemoryContextDelete(rcxt);
}

/* Does a helper hold a request (the stream must not be applied)? */
bool
ash_snapshot_incremental_helping(void)
{
	for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		if (incr_helper_active[i])
			return true;
	return false;
}

/*
 * Before the stream is applied again: every helper's request revoked and
 * ended, every chunk committed taken.
 */
void
ash_snapshot_incremental_join(void)
{
	if (incr_attempt != NULL && ash_snapshot_incremental_helping())
		incr_helpers_collect(true);
}

static SnapTable *
attempt_table(const char *nspname, const char *relname)
{
	return ash_snap_find_table(incr_attempt->tables, nspname, relname);
}

/* Is t copied by a copier already? */
static bool
table_assigned(SnapTable *t)
{
	if (t == incr_own_table)
		return true;
	for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		if (incr_helper_table[i] == t)
			return true;
	return false;
}

/*
 * The first table not yet copied that no copier copies, one a source lock
 * does not keep waiting first (NULL: none; with only_ready, none of those).
 */
static SnapTable *
unassigned_table(bool only_ready)
{
	char	   *nspname;
	char	   *relname;
	char	  **cursor;
	SnapTable  *paused = NULL;

	for (int k = 0; ash_incr_pending_table(k, &nspname, &relname, &cursor); k++)
	{
		SnapTable  *t = attempt_table(nspname, relname);

		if (t == NULL || table_assigned(t))
			continue;
		if (t->lock_pause_ms == 0)
			return t;
		if (paused == NULL)
			paused = t;
	}
	return only_ready ? NULL : paused;
}

/*
 * Give helper i (idle) its table and, with room for a window and a target
 * no other copier writes, a request.  avail: windows left, less those it
 * is given.
 */
static void
incr_helper_assign(int i, int nhelpers, Oid own_target, const TransactionId *noted,
				   int nnoted, int cap, int *avail)
{
	SnapTable  *hst;
	Oid			target;
	char	  **cursor;

	if (i <= nhelpers && !incr_helper_gone[i] && !incr_helpers_refused &&
		incr_helper_table[i] == NULL)
		incr_helper_table[i] = unassigned_table(false);

	/*
	 * A helper whose table a source lock keeps waiting copies another
	 * meanwhile, if one is left (the waiting table goes back to the pool;
	 * its next copier writes it with the upsert, as any table it did not
	 * find empty).
	 */
	if (incr_helper_table[i] != NULL && table_paused(incr_helper_table[i]))
	{
		SnapTable  *ready = unassigned_table(true);

		if (ready != NULL)
		{
			ash_snap_publish_source_lock(i, false);
			incr_helper_table[i] = ready;
		}
	}
	if (incr_helper_table[i] == NULL)
	{
		ash_snap_publish_source_lock(i, false); /* it waits for no lock */
		if (incr_helpers[i] != NULL && !incr_helper_gone[i])
			incr_helper_stop_one(i, false);
		return;
	}
	incr_helper_start(i);
	if (incr_helpers_refused)
	{
		incr_helper_table[i] = NULL;
		ash_snap_publish_source_lock(i, false);
		return;
	}
	hst = incr_helper_table[i];
	target = table_target(hst);
	if (!incr_helper_idle(i))	/* one that ended is noticed here */
		return;
	if (*avail < 1 || nnoted < 0 || !OidIsValid(own_target) || !OidIsValid(target) ||
		target == own_target || table_paused(hst))
		return;
	for (int j = 1; j < ASH_SNAPSHOT_COPIERS_MAX; j++)
		if (j != i && incr_helper_active[j] && table_target(incr_helper_asked[j]) == target)
			return;
	if (!ash_incr_table_cursor(hst->nspname, hst->relname, &cursor))
		ash_halt("snapshot_state_invalid", "table %s of the attempt is no longer mapped",
				 quote_qualified_identifier(hst->nspname, hst->relname));
	incr_helper_request(i, hst, noted, nnoted, Min(*avail, cap));
	*avail -= incr_helper_granted[i];
}

/*
 * Copy the next chunk, when the configuration allows one now (with
 * helpers: the next chunks of several tables, the helpers' going on after
 * this returns, until ash_snapshot_incremental_join).  Runs between two
 * source transactions of the stream (no batch open).
 */
AshIncrStep
ash_snapshot_incremental_step(void)
{
	char	   *nspname;
	char	   *relname;
	char	  **cursor;
	XLogRecPtr	lowest;
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext tcxt;
	int			nhelpers;
	SnapTable  *st;
	TransactionId *noted;
	int			nnoted;
	IncrChunk	c;
	volatile AshIncrStep result = ASH_INCR_STEP_CHUNK;
	volatile bool written = false;
	volatile bool recorded = false;

	if (incr_attempt == NULL)
		return ASH_INCR_STEP_NONE;

	/* what the helpers committed since: their windows judge from now on */
	incr_helper_dropped_now = false;
	incr_helpers_collect(false);
	if (!ash_incr_next_table(&nspname, &relname, &cursor))
	{
		incr_helpers_collect(true);	/* each ended its request: stopped, not terminated */
		ash_snap_incr_helper_stop(false);
		incr_attempt_completed(false);
		close_chunk_conn();
		return ASH_INCR_STEP_NONE;
	}
	if (ash_incr_open_windows(&lowest) + incr_helpers_outstanding() >=
		ash_snap_cfg->max_pending_chunks)
		return ASH_INCR_STEP_WAIT_WINDOWS;

	tcxt = AllocSetContextCreate(cxt, "ash_replicant chunk", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(tcxt);
	PG_TRY();
	{
		AshMapping *m1 = NULL;
		int			avail;
		int			cap;

		/*
		 * Each copier keeps its table until it is copied.  A helper that
		 * cannot copy (not started, stopped, refused) keeps none; the worker
		 * takes a helper's table when none is left for it, once the helper
		 * ended its request.
		 */
		nhelpers = Min(ash_snapshot_workers, ASH_SNAPSHOT_COPIERS_MAX) - 1;
		if (incr_own_table != NULL && incr_own_table->copied)
			incr_own_table = NULL;
		for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
			if (!incr_helper_active[i] && incr_helper_table[i] != NULL &&
				(incr_helper_table[i]->copied || i > nhelpers || incr_helper_gone[i] ||
				 incr_helpers_refused))
				incr_helper_table[i] = NULL;
		if (incr_own_table == NULL)
			incr_own_table = unassigned_table(false);
		for (int i = 1; incr_own_table == NULL && i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		{
			if (incr_helper_table[i] == NULL)
				continue;
			incr_helper_collect(i, true);
			if (!incr_helper_table[i]->copied)
				incr_own_table = incr_helper_table[i];
			incr_helper_table[i] = NULL;
		}
		st = incr_own_table;
		if (st != NULL)
		{
			if (!ash_incr_table_cursor(st->nspname, st->relname, &cursor))
				ash_halt("snapshot_state_invalid", "table %s of the attempt is no longer mapped",
						 quote_qualified_identifier(st->nspname, st->relname));
			nspname = st->nspname;
			relname = st->relname;
			m1 = ash_config_find_mapping(ash_snap_cfg, nspname, relname);

			/* a helper writing the same target ends its request first */
			for (int i = 1; m1 != NULL && i < ASH_SNAPSHOT_COPIERS_MAX; i++)
				if (incr_helper_active[i] &&
					table_target(incr_helper_asked[i]) == m1->target_relid)
					incr_helper_collect(i, true);
		}

		/*
		 * What a helper's chunk must show, taken before the worker's own
		 * check below forgets what its snapshot shows.  More than a helper
		 * can hold: the helpers get no new request this time.
		 */
		noted = palloc(sizeof(TransactionId) * ASH_INCR_HELPER_NOTED_MAX);
		nnoted = ash_incr_noted_xids(noted, ASH_INCR_HELPER_NOTED_MAX);

		/*
		 * Windows left for the helpers: one kept for the worker's own chunk,
		 * each helper's share of the rest (at least one: none waits for
		 * another to finish its table).  A helper still copying may commit
		 * more; an idle one is asked again.
		 */
		avail = ash_snap_cfg->max_pending_chunks - ash_incr_open_windows(&lowest) -
			incr_helpers_outstanding() - (st != NULL ? 1 : 0);
		cap = nhelpers < 1 ? 1 :
			Min(Max((ash_snap_cfg->max_pending_chunks - 1 + nhelpers - 1) / nhelpers, 1),
				ASH_INCR_HELPER_RING);
		for (int i = 1; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		{
			if (incr_helper_active[i])
			{
				int			more = Min(avail, cap -
									   (incr_helper_granted[i] - incr_helper_taken[i]));

				if (more > 0)
				{
					incr_helper_raise(i, more);
					avail -= more;
				}
				continue;
			}
			incr_helper_assign(i, nhelpers, m1 != NULL ? m1->target_relid : InvalidOid,
							   noted, nnoted, cap, &avail);
		}

		/*
		 * The worker's own chunk: one read ahead may miss a transaction the
		 * stream delivered since (it changed a key of this chunk, above the
		 * cursor: the stream left it to the chunk and noted it); then it is
		 * read again, at once.  Either way the check is made now, with
		 * nothing delivered between it and this chunk's commit.  A read
		 * that meets a lock at the source leaves the table for a while.
		 */
		if (st == NULL)
			result = ASH_INCR_STEP_CHUNK;	/* the helpers' tables are the last */
		else if (table_paused(st))
			result = ASH_INCR_STEP_WAIT_LOCK;
		else
		{
			chunk_setup(&c, nspname, relname, cursor, st);
			if (st->lock_pause_ms > 0 && chunk_unanswered(&c))
				result = ASH_INCR_STEP_WAIT_LOCK;
			else if (!flush_awaited_passed())
				result = ASH_INCR_STEP_WAIT_XIDS;
		}
		for (bool again = false; st != NULL && result == ASH_INCR_STEP_CHUNK; again = true)
		{
			bool		met = !chunk_read(&c, !again);

			copier_met_lock(0, st, met);
			if (met)
			{
				result = ASH_INCR_STEP_WAIT_LOCK;
				break;
			}
			if (ash_incr_snapshot_covers(&c.snap))
			{
				if (!chunk_flushed(&c))
				{
					chunk_forget(&c);
					result = ASH_INCR_STEP_WAIT_XIDS;
					break;
				}
				chunk_bounds(&c);
				recorded = c.done && ash_incr_remaining() == 1;
				chunk_write(&c, true);
				written = true;
				break;
			}
			chunk_forget(&c);
			if (!c.ahead)
			{
				/* a transaction the stream delivered is not visible yet: later */
				result = ASH_INCR_STEP_WAIT_XIDS;
				break;
			}
			incr_rereads++;
		}

		/* committed: now the stream judges by it */
		if (written)
			chunk_committed(&c);

		/* a helper's chunk dropped: asked again soon, whatever the worker's table waits for */
		if (incr_helper_dropped_now && result == ASH_INCR_STEP_WAIT_LOCK)
			result = ASH_INCR_STEP_WAIT_XIDS;
		if (!ash_incr_active())
			incr_attempt_completed(recorded);
	}
	PG_CATCH();
	{
		/* their chunks, committed or not, are read by the next session */
		ash_snap_incr_helper_stop(false);
		PG_RE_THROW();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	MemoryContextDelete(tcxt);
	return result;
}

/* A helper's last chunk committed: its table and where it ended. */
static SnapTable *helper_last_table = NULL;
static MemoryContext helper_last_cxt = NULL;

/* Where table nspname.relname stands for the helper: chunks committed before. */
static SnapTable *
helper_table(const char *nspname, const char *relname, int64 chunks)
{
	SnapTable  *st;
	bool		copied;
	int64		rows;

	/* after its own chunk of this table, as it committed it */
	if (helper_last_table != NULL && strcmp(helper_last_table->nspname, nspname) == 0 &&
		strcmp(helper_last_table->relname, relname) == 0 &&
		helper_last_table->chunks == chunks)
		return helper_last_table;

	/* otherwise from the table's committed catalog row */
	st = palloc0(sizeof(SnapTable));
	st->nspname = pstrdup(nspname);
	st->relname = pstrdup(relname);
	table_row(nspname, relname, &copied, &rows, &st->chunks, &st->cursor);
	if (copied || st->chunks != chunks)
		ash_halt("snapshot_state_invalid", "table %s is not where its incremental copy left it",
				 quote_qualified_identifier(nspname, relname));
	return st;
}

/*
 * The helper's chunk c committed (reread: its read-ahead was read again):
 * reported to the worker in slot n of the ring (false: its key is too long
 * for it, the worker reads the catalog -- the request ends), and kept as where the table's next chunk starts (in a
 * context of its own: the chunk's names may be the last one's).
 */
static bool
helper_report(IncrChunk *c, int n, bool reread)
{
	AshIncrReport *r = &HELPER(ash_snap_my_copier)->reports[n % ASH_INCR_HELPER_RING];
	MemoryContext lcxt;
	SnapTable  *last;
	int			len = 0;

	/* the slot is the helper's until committed counts it (the worker's grant) */
	r->xmin = c->snap.xmin;
	r->xmax = c->snap.xmax;
	r->nxip = c->snap.nxip;
	for (int i = 0; i < c->snap.nxip; i++)
		r->xip[i] = c->snap.xip[i];
	r->high_lsn = c->high_lsn;
	r->reread = reread;
	r->nrows = c->nrows;
	r->done = c->done;
	r->nkeys = 0;
	for (int k = 0; !c->done && k < c->k->nkeys; k++)
		len += strlen(c->hi[k]) + 1;
	if (!c->done && len <= ASH_INCR_HELPER_KEY_MAX)
	{
		char	   *p = r->hi;

		for (int k = 0; k < c->k->nkeys; k++)
		{
			strcpy(p, c->hi[k]);
			p += strlen(c->hi[k]) + 1;
		}
		r->nkeys = c->k->nkeys;
	}
	SpinLockAcquire(&ash_snap_slot->mutex);
	HELPER(ash_snap_my_copier)->committed = n + 1;
	SpinLockRelease(&ash_snap_slot->mutex);

	lcxt = AllocSetContextCreate(incr_session_cxt, "ash_replicant helper position",
								 ALLOCSET_SMALL_SIZES);
	last = MemoryContextAllocZero(lcxt, sizeof(SnapTable));
	last->nspname = MemoryContextStrdup(lcxt, c->nspname);
	last->relname = MemoryContextStrdup(lcxt, c->relname);
	last->chunks = c->done ? -1 : c->chunk_no;
	if (!c->done)
	{
		last->cursor = MemoryContextAlloc(lcxt, sizeof(char *) * c->k->nkeys);
		for (int k = 0; k < c->k->nkeys; k++)
			last->cursor[k] = MemoryContextStrdup(lcxt, c->hi[k]);
	}
	if (helper_last_cxt != NULL)
		MemoryContextDelete(helper_last_cxt);
	helper_last_cxt = lcxt;
	helper_last_table = last;
	return c->done || r->nkeys > 0;
}

/*
 * The incremental helper (a background worker the pipeline worker
 * started): copy the chunks the worker grants, one after the other, until
 * it is stopped.
 */
static void
incr_helper_serve(void)
{
	for (;;)
	{
		AshIncrHelperState s;
		char		nspname[NAMEDATALEN];
		char		relname[NAMEDATALEN];
		int64		chunks;
		bool		ahead_ok;
		SnapTable  *st;
		TransactionId noted[ASH_INCR_HELPER_NOTED_MAX];
		int			nnoted;
		XLogRecPtr	position;
		int			rereads = 0;
		bool		dropped = false;
		bool		locked = false;
		MemoryContext cxt = CurrentMemoryContext;
		MemoryContext tcxt;
		MemoryContext ccxt;

		SpinLockAcquire(&ash_snap_slot->mutex);
		s = HELPER(ash_snap_my_copier)->state;
		strlcpy(nspname, HELPER(ash_snap_my_copier)->schema, NAMEDATALEN);
		strlcpy(relname, HELPER(ash_snap_my_copier)->table, NAMEDATALEN);
		chunks = HELPER(ash_snap_my_copier)->chunks;
		ahead_ok = HELPER(ash_snap_my_copier)->ahead_ok;
		nnoted = HELPER(ash_snap_my_copier)->nnoted;
		memcpy(noted, HELPER(ash_snap_my_copier)->noted, sizeof(TransactionId) * nnoted);
		position = HELPER(ash_snap_my_copier)->position;
		SpinLockRelease(&ash_snap_slot->mutex);
		if (s == ASH_INCR_HELPER_STOP)
			return;
		if (s != ASH_INCR_HELPER_READ)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 INCR_HELPER_WAIT_MS, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			ash_snap_check_coordinator();
			continue;
		}

		tcxt = AllocSetContextCreate(cxt, "ash_replicant chunks", ALLOCSET_DEFAULT_SIZES);
		ccxt = AllocSetContextCreate(tcxt, "ash_replicant chunk", ALLOCSET_DEFAULT_SIZES);
		MemoryContextSwitchTo(tcxt);
		st = helper_table(nspname, relname, chunks);
		if (incr_key_desc(nspname, relname) == NULL)
		{
			MemoryContext old;

			drop_ahead();		/* of another table: the connection is used */
			old = MemoryContextSwitchTo(incr_session_cxt);
			incr_keys = lappend(incr_keys, describe_key(incr_conn, nspname, relname));
			MemoryContextSwitchTo(old);
		}

		for (int n = 0;; n++)
		{
			IncrChunk	c;
			bool		write;
			bool		reread;
			bool		revoked;

			/* granted (the worker raises it as windows close), not revoked */
			for (;;)
			{
				int			granted;

				SpinLockAcquire(&ash_snap_slot->mutex);
				revoked = HELPER(ash_snap_my_copier)->revoked;
				granted = HELPER(ash_snap_my_copier)->granted;
				SpinLockRelease(&ash_snap_slot->mutex);
				if (revoked || n < granted)
					break;
				(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
								 INCR_HELPER_WAIT_MS, PG_WAIT_EXTENSION);
				ResetLatch(MyLatch);
				CHECK_FOR_INTERRUPTS();
				ash_snap_check_coordinator();
			}
			if (revoked)
				break;

			MemoryContextSwitchTo(ccxt);
			chunk_setup(&c, st->nspname, st->relname, st->cursor, st);
			locked = !chunk_read(&c, ahead_ok);

			/*
			 * Written only under a snapshot that shows what the stream
			 * delivered (the worker's list, noted): a read-ahead that does
			 * not is read again at once, a chunk that still does not is
			 * dropped.  Its snapshot goes to the worker whole, so it must
			 * fit.  A read that met a lock at the source is dropped too, the
			 * worker told why.
			 */
			c.position = position;
			write = !locked && ash_incr_snapshot_shows(&c.snap, noted, nnoted);
			reread = !locked && !write && c.ahead;
			if (reread)
			{
				chunk_forget(&c);
				locked = !chunk_read(&c, false);
				write = !locked && ash_incr_snapshot_shows(&c.snap, noted, nnoted);
			}
			write = write && c.snap.nxip <= ASH_INCR_HELPER_XIP_MAX && chunk_flushed(&c);
			if (!write)
			{
				chunk_forget(&c);
				rereads = reread ? 1 : 0;
				dropped = !locked;
				break;
			}
			chunk_bounds(&c);
			chunk_write(&c, false);
			if (!helper_report(&c, n, reread))
				break;
			SetLatch(HELPER(ash_snap_my_copier)->worker_latch);
			st = helper_last_table;
			ahead_ok = true;	/* sent after this chunk arrived */
			MemoryContextSwitchTo(tcxt);
			MemoryContextReset(ccxt);
			if (c.done)
				break;
		}
		SpinLockAcquire(&ash_snap_slot->mutex);
		HELPER(ash_snap_my_copier)->rereads = rereads;
		HELPER(ash_snap_my_copier)->dropped = dropped;
		HELPER(ash_snap_my_copier)->locked = locked;
		SpinLockRelease(&ash_snap_slot->mutex);
		helper_set_state(ash_snap_my_copier, ASH_INCR_HELPER_IDLE, false);
		MemoryContextSwitchTo(cxt);
		MemoryContextDelete(tcxt);
	}
}

void
ash_snapshot_incr_helper_main(Datum main_arg)
{
	Oid			dboid = InvalidOid;
	char		sink_name[ASH_NAME_LEN];
	AshPipelineSlot *slot = ash_snap_helper_attach(main_arg, sink_name, &dboid);
	int			index = ash_snap_my_copier;

	SpinLockAcquire(&slot->mutex);
	slot->incr_helpers[index].helper_latch = MyLatch;
	SpinLockRelease(&slot->mutex);
	ash_snap_helper_connect(dboid, sink_name);

	PG_TRY();
	{
		AshPipelineConfig *cfg;
		AshCheckpointKey *key;
		MemoryContext old;

		key = ash_snap_helper_load(sink_name);
		cfg = ash_snap_cfg;

		/* its chunks are mirrored writes too: tagged with an origin of its own */
		if (!ash_snap_copier_attach_origin(sink_name, index))
		{
			ash_snap_helper_done(slot, index);
			helper_set_state(ash_snap_my_copier, ASH_INCR_HELPER_ENDED, false);
			proc_exit(0);
		}
		ash_apply_init(cfg, key, InvalidXLogRecPtr, InvalidXLogRecPtr);

		incr_session_cxt = AllocSetContextCreate(TopMemoryContext,
												 "ash_replicant incremental session",
												 ALLOCSET_DEFAULT_SIZES);
		open_chunk_conn(cfg);
		ash_spi_transaction_begin();
		old = MemoryContextSwitchTo(incr_session_cxt);
		incr_attempt = palloc0(sizeof(Attempt));
		{
			Oid			types[1] = {TEXTOID};
			Datum		values[1];
			bool		isnull;

			/* the attempt's id, without locking the checkpoint row */
			values[0] = CStringGetTextDatum("copying");
			if (ash_snap_key_exec("SELECT snapshot_attempt FROM ash_replicant.checkpoints"
								  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
								  "   AND snapshot_phase = $4 AND snapshot_attempt IS NOT NULL",
								  1, types, values, NULL, SPI_OK_SELECT) != 1)
				ash_halt("snapshot_state_invalid", "the snapshot attempt changed under this pipeline");
			incr_attempt->id = DatumGetByteaPCopy(SPI_getbinval(SPI_tuptable->vals[0],
																SPI_tuptable->tupdesc, 1,
																&isnull));
		}
		MemoryContextSwitchTo(old);
		ash_spi_transaction_end();

		helper_set_state(ash_snap_my_copier, ASH_INCR_HELPER_IDLE, false);
		incr_helper_serve();
		ash_conn_close(incr_conn);
		incr_conn = NULL;
		ash_snap_copier_drop_origin(sink_name, index);
		ash_snap_helper_done(slot, index);
	}
	PG_CATCH();
	{
		ash_snap_copier_failed(slot, index, sink_name);
		helper_set_state(ash_snap_my_copier, ASH_INCR_HELPER_ENDED, false);
	}
	PG_END_TRY();
	proc_exit(0);
}
