/*-------------------------------------------------------------------------
 *
 * snapshot.c
 *	  Snapshots of existing rows (snapshot => 'v1' and 'incremental').
 *
 * NOTES
 *	  A snapshot copies every mapped table of the decoder's table set (the
 *	  publication, wal2json's tables, pglogical's replication sets) into
 *	  the mirror, then the stream applies what was committed after each
 *	  copy.
 *
 *	  First start: the slot is created exporting a snapshot (pipeline.c),
 *	  its consistent point S is recorded as the attempt's snapshot_lsn and
 *	  every mapped table of the publication is listed as pending
 *	  (ash_replicant.snapshot_tables) -- "armed", one destination
 *	  transaction.  Then, on a second, read-only connection importing the
 *	  snapshot (SET TRANSACTION SNAPSHOT), each table is read with COPY and
 *	  its rows go through apply exactly as streamed inserts do (mapping,
 *	  skips, tenancy, encryption, SCD2 versions, append-log events of
 *	  origin snapshot), in ONE destination transaction per table that
 *	  also marks the table copied.  The last table's transaction marks the
 *	  attempt complete and sets the watermark to S - 1, so the stream
 *	  starts at S and applies every transaction committed at or after it.
 *
 *	  Restart: a crash or fault rolls back the table in flight, nothing of
 *	  it stays; tables already copied stay copied.  The exported snapshot
 *	  died with the session, so the next session copies the remaining
 *	  tables under a snapshot of its own, exported by a TEMPORARY slot
 *	  created for the purpose at a later position F.  Such a table has a
 *	  floor: the stream skips its changes committed before F (they are in
 *	  its copy) and applies those at or after F -- native logical
 *	  replication's table synchronisation does the same.  A table is never
 *	  streamed on top of a partial copy and never copied from two
 *	  snapshots; every host effect of a copied row happens once.
 *
 *	  A mapped table of the publication that the attempt does not list
 *	  (mapped after the snapshot, with the pipeline stopped) is copied the
 *	  same way at the next start, with a floor.  Without provenance, rows
 *	  the mirror holds that the source lacks are kept (docs/snapshots.md).
 *
 *	  Progress is published in shared memory for the stat views and logged
 *	  as event=snapshot.progress at most every 10 seconds; table names and
 *	  counts only, never a value.
 *
 *	  snapshot => 'incremental' copies in chunks while the stream runs: see
 *	  snapshot_incr.c and incremental.c.  v1's helper copiers live in
 *	  snapshot_copier.c; what the three modules share, in snapshot_int.h.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "ash_replicant.h"
#include "copy_row.h"
#include "errors.h"
#include "provenance.h"
#include "shmem.h"
#include "snapshot.h"
#include "snapshot_int.h"
#include "source_catalog.h"
#include "source_slot.h"
#include "spi_util.h"

#define PROGRESS_LOG_MS 10000
#define PROGRESS_ROWS	1024

AshPipelineConfig *ash_snap_cfg;
const AshCheckpointKey *ash_snap_key;
static TimestampTz last_progress_log = 0;
static char *row_buf = NULL;	/* libpq's row in flight, freed after an error */

bool
ash_snapshot_configured(AshPipelineConfig *cfg)
{
	return cfg->snapshot != NULL && strcmp(cfg->snapshot, "off") != 0;
}

/* ---------------------------------------------------------------------
 * Catalog access.
 * ---------------------------------------------------------------------
 */
/*
 * One statement with the checkpoint key as $1..$3 and extra parameters
 * after it; returns SPI_processed.  The caller's memory context stays
 * current.
 */
#define KEY_PLANS_MAX	32

/* The catalog statements' plans, kept: an incremental copy runs them per chunk. */
typedef struct KeyPlan
{
	char	   *sql;
	int			nargs;
	Oid			types[ASH_CHECKPOINT_MAX_PARAMS];
	SPIPlanPtr	plan;
} KeyPlan;

static KeyPlan key_plans[KEY_PLANS_MAX];
static int	nkey_plans = 0;

/* The kept plan of sql with these parameter types (NULL: none left). */
static SPIPlanPtr
key_plan(const char *sql, int nargs, Oid *types)
{
	KeyPlan    *kp;

	for (int i = 0; i < nkey_plans; i++)
	{
		kp = &key_plans[i];
		if (kp->nargs == nargs && strcmp(kp->sql, sql) == 0 &&
			memcmp(kp->types, types, sizeof(Oid) * nargs) == 0)
			return kp->plan;
	}
	if (nkey_plans == KEY_PLANS_MAX || nargs > ASH_CHECKPOINT_MAX_PARAMS)
		return NULL;
	kp = &key_plans[nkey_plans];
	kp->plan = ash_spi_prepare_kept(sql, nargs, types);
	kp->sql = MemoryContextStrdup(TopMemoryContext, sql);
	kp->nargs = nargs;
	memcpy(kp->types, types, sizeof(Oid) * nargs);
	nkey_plans++;
	return kp->plan;
}

uint64
ash_snap_key_exec(const char *sql, int nextra, Oid *extra_types, Datum *extra_values,
				  const char *extra_nulls, int expected)
{
	Oid			types[ASH_CHECKPOINT_MAX_PARAMS];
	Datum		values[ASH_CHECKPOINT_MAX_PARAMS];
	char		nulls[ASH_CHECKPOINT_MAX_PARAMS + 1];
	int			n = ash_checkpoint_key_params(ash_snap_key, nextra, extra_types, extra_values,
											  extra_nulls, types, values, nulls);
	SPIPlanPtr	plan = key_plan(sql, n, types);
	MemoryContext cxt = CurrentMemoryContext;
	int			ret;

	if (plan == NULL)
		return ash_spi_execute_args(sql, n, types, values, nulls, expected,
									"snapshot catalog statement failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	ret = SPI_execute_plan(plan, values, nulls, false, 0);
	PopActiveSnapshot();
	MemoryContextSwitchTo(cxt);
	if (ret != expected)
		elog(ERROR, "ash_replicant: snapshot catalog statement failed");
	return SPI_processed;
}

Attempt *
ash_snap_read_attempt(void)
{
	Attempt    *a = palloc0(sizeof(Attempt));
	bool		isnull;
	uint64		n;

	n = ash_snap_key_exec("SELECT snapshot_phase, snapshot_lsn, snapshot_attempt, snapshot_state"
						  "  FROM ash_replicant.checkpoints"
						  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
						  "   FOR UPDATE",
						  0, NULL, NULL, NULL, SPI_OK_SELECT);
	if (n != 1)
		ash_halt("checkpoint_identity_conflict", "the checkpoint row vanished under this pipeline");
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *phase = SPI_getvalue(tup, desc, 1);
		Datum		d;

		a->phase = phase == NULL ? ASH_SNAPSHOT_NONE :
			strcmp(phase, "complete") == 0 ? ASH_SNAPSHOT_COMPLETE : ASH_SNAPSHOT_COPYING;
		d = SPI_getbinval(tup, desc, 2, &isnull);
		a->start_lsn = isnull ? InvalidXLogRecPtr : DatumGetLSN(d);
		d = SPI_getbinval(tup, desc, 3, &isnull);
		a->id = isnull ? NULL : DatumGetByteaPCopy(d);
		d = SPI_getbinval(tup, desc, 4, &isnull);
		a->state = isnull ? NULL : DatumGetByteaPCopy(d);
		if (a->phase != ASH_SNAPSHOT_NONE && (XLogRecPtrIsInvalid(a->start_lsn) || a->id == NULL))
			ash_halt("snapshot_state_invalid", "the snapshot attempt lacks its position or id");
	}

	n = ash_snap_key_exec("SELECT source_schema, source_table, state, rows_estimate, rows_copied, snapshot_lsn,"
						  "       chunks_copied, chunk_cursor, target, published"
						  "  FROM ash_replicant.snapshot_tables"
						  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
						  " ORDER BY source_schema, source_table",
						  0, NULL, NULL, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		SnapTable  *t = palloc0(sizeof(SnapTable));
		Datum		d;

		t->nspname = SPI_getvalue(tup, desc, 1);
		t->relname = SPI_getvalue(tup, desc, 2);
		t->copied = strcmp(SPI_getvalue(tup, desc, 3), "copied") == 0;
		d = SPI_getbinval(tup, desc, 4, &isnull);
		t->has_estimate = !isnull;
		t->estimate = isnull ? 0 : DatumGetInt64(d);
		t->rows = DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
		d = SPI_getbinval(tup, desc, 6, &isnull);
		t->lsn = isnull ? InvalidXLogRecPtr : DatumGetLSN(d);
		t->chunks = DatumGetInt64(SPI_getbinval(tup, desc, 7, &isnull));
		d = SPI_getbinval(tup, desc, 8, &isnull);
		if (!isnull)
		{
			List	   *l = ash_text_array_to_list(d, false);
			int			i = 0;
			ListCell   *kc;

			t->cursor = palloc0(sizeof(char *) * Max(list_length(l), 1));
			foreach(kc, l)
				t->cursor[i++] = lfirst(kc);
		}
		d = SPI_getbinval(tup, desc, 9, &isnull);
		t->target = isnull ? InvalidOid : DatumGetObjectId(d);
		t->published = SPI_getvalue(tup, desc, 10);
		if (t->copied && XLogRecPtrIsInvalid(t->lsn))
			ash_halt("snapshot_state_invalid", "copied table %s lacks its snapshot position",
					 quote_qualified_identifier(t->nspname, t->relname));
		a->tables = lappend(a->tables, t);
	}
	return a;
}

AshSnapshotPhase
ash_snapshot_phase(const AshCheckpointKey *key)
{
	AshSnapshotPhase phase;

	ash_snap_key = key;
	ash_spi_transaction_begin();
	phase = ash_snap_read_attempt()->phase;
	ash_spi_transaction_end();
	return phase;
}

XLogRecPtr
ash_snapshot_frontier(const AshCheckpointKey *key)
{
	XLogRecPtr	frontier = InvalidXLogRecPtr;
	bool		isnull;
	Datum		d;

	ash_snap_key = key;
	ash_spi_transaction_begin();
	(void) ash_snap_key_exec("SELECT max(snapshot_lsn) FROM ash_replicant.snapshot_tables"
							 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							 "   AND state = 'copied'",
							 0, NULL, NULL, NULL, SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (!isnull)
		frontier = DatumGetLSN(d) - 1;
	ash_spi_transaction_end();
	return frontier;
}

/* The table of tables named nspname.relname (NULL: none). */
SnapTable *
ash_snap_find_table(List *tables, const char *nspname, const char *relname)
{
	ListCell   *lc;

	foreach(lc, tables)
	{
		SnapTable  *t = lfirst(lc);

		if (strcmp(t->nspname, nspname) == 0 && strcmp(t->relname, relname) == 0)
			return t;
	}
	return NULL;
}

static void
insert_pending(SnapTable *t)
{
	Oid			types[5] = {TEXTOID, TEXTOID, INT8OID, REGCLASSOID, TEXTOID};
	Datum		values[5];
	char		nulls[5] = "    ";

	values[0] = CStringGetTextDatum(t->nspname);
	values[1] = CStringGetTextDatum(t->relname);
	values[2] = Int64GetDatum(t->estimate);
	if (!t->has_estimate)
		nulls[2] = 'n';
	values[3] = ObjectIdGetDatum(t->target);
	if (!OidIsValid(t->target))
		nulls[3] = 'n';
	values[4] = t->published ? CStringGetTextDatum(t->published) : (Datum) 0;
	if (t->published == NULL)
		nulls[4] = 'n';
	(void) ash_snap_key_exec("INSERT INTO ash_replicant.snapshot_tables"
							 " (source_system_id, source_database, slot_name, source_schema, source_table,"
							 "  state, rows_estimate, target, published)"
							 " VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7, $8)",
							 5, types, values, nulls, SPI_OK_INSERT);
}

/* The table the mapping of nspname.relname writes to now (Invalid: none). */
static Oid
mapped_target(const char *nspname, const char *relname)
{
	AshMapping *m = ash_config_find_mapping(ash_snap_cfg, nspname, relname);

	return m != NULL ? m->target_relid : InvalidOid;
}

/*
 * Does the attempt's row of a table (known) still stand for the table as
 * mapped and published now (now)?  It does not when the mapping writes to
 * another table than the one copied into -- the target dropped and
 * re-created, the mapping re-pointed, a sink re-created over the kept
 * checkpoint: that table holds none of the copy -- or when the table left
 * the publication and came back (ash_source_publication_gap).  Then the
 * row is deleted (its windows with it) and the caller lists the table
 * again, to be copied anew, its target's seen-marks of this attempt
 * forgotten (a provenance mapping).  Otherwise what the row does not
 * record yet is recorded (a row listed before 1.4.0 takes the current
 * target, as 1.3.0 assumed; a membership held by more or other rows too is
 * kept current).
 */
static bool
known_row_stands(SnapTable *known, const SnapTable *now, const bytea *attempt)
{
	Oid			types[4] = {TEXTOID, TEXTOID, REGCLASSOID, TEXTOID};
	Datum		values[4];
	char		nulls[4] = "   ";
	bool		replaced;
	bool		gap;

	replaced = OidIsValid(known->target) && OidIsValid(now->target) &&
		known->target != now->target;
	gap = !replaced && ash_source_publication_gap(known->published, now->published,
												  ash_config_find_mapping(ash_snap_cfg, known->nspname,
																		  known->relname)) != ASH_GAP_NONE;
	values[0] = CStringGetTextDatum(known->nspname);
	values[1] = CStringGetTextDatum(known->relname);
	if (!replaced && !gap)
	{
		bool		target_new = OidIsValid(now->target) && known->target != now->target;
		bool		published_new = now->published != NULL &&
			(known->published == NULL || strcmp(known->published, now->published) != 0);

		if (!target_new && !published_new)
			return true;
		values[2] = ObjectIdGetDatum(now->target);
		nulls[2] = target_new ? ' ' : 'n';
		values[3] = published_new ? CStringGetTextDatum(now->published) : (Datum) 0;
		nulls[3] = published_new ? ' ' : 'n';
		(void) ash_snap_key_exec("UPDATE ash_replicant.snapshot_tables"
								 "   SET target = coalesce($6, target), published = coalesce($7, published)"
								 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
								 "   AND source_schema = $4 AND source_table = $5",
								 4, types, values, nulls, SPI_OK_UPDATE);
		if (target_new)
			known->target = now->target;
		if (published_new)
			known->published = now->published;
		return true;
	}
	(void) ash_snap_key_exec("DELETE FROM ash_replicant.snapshot_tables"
							 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							 "   AND source_schema = $4 AND source_table = $5",
							 2, types, values, NULL, SPI_OK_DELETE);
	{
		AshMapping *m = ash_config_find_mapping(ash_snap_cfg, known->nspname, known->relname);

		/* an earlier copy's seen-marks would keep what the source dropped */
		if (m != NULL && m->snapshot_provenance && attempt != NULL)
			ash_apply_snapshot_forget(m, attempt);
	}
	if (replaced)
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.target_replaced sink=%s table=%s",
						ash_snap_cfg->sink_name, quote_qualified_identifier(known->nspname, known->relname)),
				 errdetail("The table was copied into another target; it is copied again into the one mapped now.")));
	else
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.publication_gap sink=%s table=%s",
						ash_snap_cfg->sink_name, quote_qualified_identifier(known->nspname, known->relname)),
				 errdetail("The table left the publication and came back, or it or a column of it was replaced: what happened meanwhile was not decoded, so it is copied again.")));
	return false;
}

/*
 * The watermark a completed attempt starts from: just below its start, or
 * the watermark it had before (a go-forward checkpoint switched to v1).
 */
static void
mark_complete(XLogRecPtr start_lsn)
{
	if (!ash_checkpoint_snapshot_complete(ash_snap_key, start_lsn))
		ash_halt("snapshot_state_invalid", "the snapshot attempt changed under this pipeline");
}

/* ---------------------------------------------------------------------
 * Source side.
 * ---------------------------------------------------------------------
 */

/*
 * pglogical: the replication sets must exist (fetched as coverage fetches
 * them, source_catalog.c); their tables come with the membership query.
 */
static void
pglogical_sets_exist(AshConn *conn)
{
	AshTableSetSpec spec = {0};
	List	   *rels = NIL;
	const char *absent;

	spec.decoder = ash_snap_cfg->decoder;
	spec.replication_sets = ash_snap_cfg->replication_sets;
	absent = ash_source_fetch_table_set(conn, &spec, &rels, NULL);
	if (absent != NULL)
		ash_halt(absent, "the replication sets are not at the source");
}

/*
 * The mapped tables of the table set (the publication, wal2json's tables,
 * pglogical's replication sets), with the source's row estimate.  Tables
 * the configuration ignores are not copied.
 */
List *
ash_snap_source_tables(AshConn *conn)
{
	AshTableSetSpec spec;
	PGresult   *res;
	List	   *tables = NIL;

	/*
	 * How the table set holds each table ("A table out of the publication
	 * and back"; wal2json's: the table and its columns)
	 */
	if (strcmp(ash_snap_cfg->decoder, "pglogical") == 0)
		pglogical_sets_exist(conn);
	ash_source_table_set_of(ash_snap_cfg, &spec);
	res = ash_source_table_set_membership(conn, &spec);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "snapshot table list");
	for (int i = 0; i < PQntuples(res); i++)
	{
		SnapTable  *t;

		if (ash_config_find_mapping(ash_snap_cfg, PQgetvalue(res, i, 0), PQgetvalue(res, i, 1)) == NULL)
			continue;
		t = palloc0(sizeof(SnapTable));
		t->nspname = pstrdup(PQgetvalue(res, i, 0));
		t->relname = pstrdup(PQgetvalue(res, i, 1));
		t->has_estimate = !PQgetisnull(res, i, 2);
		if (t->has_estimate)
			t->estimate = strtoll(PQgetvalue(res, i, 2), NULL, 10);
		if (PQnfields(res) > 3 && !PQgetisnull(res, i, 3))
			t->published = pstrdup(PQgetvalue(res, i, 3));
		tables = lappend(tables, t);
	}
	PQclear(res);
	return tables;
}

XLogRecPtr
ash_snap_parse_lsn(const char *s)
{
	uint32		hi,
				lo;

	if (s == NULL || sscanf(s, "%X/%X", &hi, &lo) != 2)
		ash_halt("protocol_violation", "a slot position could not be read");
	return ((uint64) hi << 32) | lo;
}

/*
 * A snapshot of the source now: a temporary slot (gone with its
 * connection) exporting one.  *repl must stay open, idle, until the
 * snapshot is imported.
 */
static char *
temporary_snapshot(AshConn **repl, XLogRecPtr *lsn)
{
	AshConn    *c;
	PGresult   *res;
	char		name[NAMEDATALEN];
	char	   *cmd;
	char	   *snapshot;

	c = ash_conn_open(ash_snap_cfg->connection, ASH_CONN_REPLICATION, "ash_replicant snapshot");
	*repl = c;
	snprintf(name, sizeof(name), "%.40s_snap_%d", ash_snap_cfg->slot_name, MyProcPid);
	cmd = psprintf("CREATE_REPLICATION_SLOT %s TEMPORARY LOGICAL pgoutput %s",
				   ash_conn_quote_ident(c, name),
				   c->server_version >= 150000 ? "(SNAPSHOT 'export')" : "EXPORT_SNAPSHOT");
	res = ash_source_create_slot(c, cmd, ash_snap_slot);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) < 3 ||
		PQgetisnull(res, 0, 2))
		ash_conn_report_result(res, "CREATE_REPLICATION_SLOT TEMPORARY");
	*lsn = ash_snap_parse_lsn(PQgetvalue(res, 0, 1));
	snapshot = pstrdup(PQgetvalue(res, 0, 2));
	PQclear(res);
	return snapshot;
}

/*
 * The settings of a connection that reads tables for a snapshot.  Row
 * security must not thin the copy out silently: with it off, a table whose
 * policies would filter rows for the source role fails the read (42501:
 * privilege_select_missing) instead.  And where the source has it
 * (PostgreSQL 14 and later), its session checks every second that this
 * side is still there: a read left waiting for a lock by a session that
 * ended goes away then, rather than when the lock is released.
 */
void
ash_snap_read_settings(AshConn *data)
{
	PQclear(ash_conn_exec(data, data->server_version >= 140000 ?
						  "SET row_security = off; SET client_connection_check_interval = '1s'" :
						  "SET row_security = off", false));
}

/* Start the data connection's transaction under the snapshot. */
void
ash_snap_import_snapshot(AshConn *data, const char *snapshot)
{
	PGresult   *res;

	ash_snap_read_settings(data);
	res = ash_conn_exec(data, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", false);
	PQclear(res);
	res = ash_conn_exec(data, psprintf("SET TRANSACTION SNAPSHOT %s",
									   ash_conn_quote_literal(data, snapshot)), false);
	PQclear(res);
}

/*
 * origin => 'none' skips the stream's transactions that carry a
 * replication origin, but a copy reads every row: where the source server
 * holds an origin, a row mirrored into it from elsewhere (our own rows
 * echoed back, in a pair of servers mirroring each other) would be copied,
 * over a newer local change.  So, under the copy's snapshot, a table with
 * rows is not copied from a server that holds an origin (an empty one
 * is: nothing to tell apart).
 */
void
ash_snap_refuse_origins(const char *nspname, const char *relname)
{
	ash_halt("snapshot_unsupported",
			 "origin none: the source server holds replication origins, and a snapshot of %s cannot tell the rows they wrote from local ones",
			 quote_qualified_identifier(nspname, relname));
}

/* v1: every table left to copy, before the first (docs/snapshots.md#origins). */
static void
check_origins(Attempt *a)
{
	ListCell   *lc;

	if (!ash_snap_cfg->origin_none || !ash_source_has_origins(ash_snap_data_conn))
		return;
	foreach(lc, a->tables)
	{
		SnapTable  *t = lfirst(lc);
		PGresult   *res;
		bool		rows;

		if (t->copied)
			continue;
		res = ash_conn_exec(ash_snap_data_conn,
							psprintf("SELECT EXISTS (SELECT 1 FROM ONLY %s)",
									 quote_qualified_identifier(t->nspname, t->relname)),
							false);
		if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
			ash_conn_report_result(res, "snapshot origins");
		rows = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		PQclear(res);
		if (rows)
			ash_snap_refuse_origins(t->nspname, t->relname);
	}
}

/* The table as pgoutput would describe it (Type messages first). */
void
ash_snap_describe_table(AshConn *data, SnapTable *t, AshRelation *rel)
{
	const char *params[2];
	PGresult   *res;

	params[0] = t->nspname;
	params[1] = t->relname;
	/* as the decoder sends it: wal2json and pglogical send generated columns */
	res = ash_conn_exec_params(data, psprintf(
							   "SELECT c.oid::pg_catalog.int8, c.relreplident, a.attname::pg_catalog.text,"
							   "  a.atttypid::pg_catalog.int8, a.atttypmod,"
							   ASH_SQL_IN_REPLICA_IDENTITY ","
							   "  bn.nspname::pg_catalog.text, bt.typname::pg_catalog.text"
							   "  FROM pg_catalog.pg_class c"
							   "  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
							   "  JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
							   "   AND NOT a.attisdropped%s"
							   ASH_SQL_BASE_TYPE_LATERAL
							   "  LEFT JOIN pg_catalog.pg_namespace bn ON bn.oid = bt.typnamespace"
							   " WHERE n.nspname = $1 AND c.relname = $2"
							   " ORDER BY a.attnum",
							   strcmp(ash_snap_cfg->decoder, "wal2json") == 0 ||
							   strcmp(ash_snap_cfg->decoder, "pglogical") == 0 ? "" :
							   " AND a.attgenerated = ''"),
							   2, params, false);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "snapshot table description");
	if (PQntuples(res) == 0)
	{
		PQclear(res);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: source table %s vanished during the snapshot",
						quote_qualified_identifier(t->nspname, t->relname))));
	}

	rel->relid = (uint32) strtoul(PQgetvalue(res, 0, 0), NULL, 10);
	rel->nspname = t->nspname;
	rel->relname = t->relname;
	rel->replident = PQgetvalue(res, 0, 1)[0];
	rel->natts = PQntuples(res);
	rel->cols = palloc0(sizeof(AshRelColumn) * rel->natts);
	for (int i = 0; i < rel->natts; i++)
	{
		AshRelColumn *col = &rel->cols[i];

		col->name = pstrdup(PQgetvalue(res, i, 2));
		col->type_oid = (uint32) strtoul(PQgetvalue(res, i, 3), NULL, 10);
		col->typmod = (int32) strtol(PQgetvalue(res, i, 4), NULL, 10);
		col->is_key = PQgetvalue(res, i, 5)[0] == 't';

		/* as pgoutput: a Type message for every non-built-in type */
		if (col->type_oid >= FirstGenbkiObjectId && !PQgetisnull(res, i, 7))
		{
			AshChange	tc;

			memset(&tc, 0, sizeof(tc));
			tc.kind = ASH_CHANGE_TYPE;
			tc.u.type.type_oid = col->type_oid;
			tc.u.type.nspname = PQgetvalue(res, i, 6);
			tc.u.type.typname = PQgetvalue(res, i, 7);
			ash_apply_change(&tc);
		}
	}
	PQclear(res);
}

/* ---------------------------------------------------------------------
 * Progress.
 * ---------------------------------------------------------------------
 */
AshPipelineSlot *ash_snap_slot = NULL;
int			ash_snap_my_copier = 0;	/* index in ash_snap_slot->copiers */

AshPipelineSlot *
ash_snap_find_slot(void)
{
	AshPipelineSlot *slot;

	if (AshShmem == NULL)
		return NULL;
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	slot = ash_slot_find(MyDatabaseId, ash_snap_cfg->sink_name);
	LWLockRelease(AshShmem->lock);
	return slot;
}

/* The attempt's totals, before copying (or after it, in_flight false). */
void
ash_snap_publish_attempt(Attempt *a, bool in_flight)
{
	int			ncopied = 0;
	uint64		rows = 0;
	uint64		estimate = 0;
	ListCell   *lc;

	if (ash_snap_slot == NULL)
		return;
	foreach(lc, a->tables)
	{
		SnapTable  *t = lfirst(lc);

		if (t->copied)
		{
			ncopied++;
			rows += t->rows;
			estimate += Max(t->rows, t->estimate);
		}
		else
			estimate += t->has_estimate ? t->estimate : 0;
	}
	SpinLockAcquire(&ash_snap_slot->mutex);
	ash_snap_slot->stats.snapshot_in_flight = in_flight;
	strlcpy(ash_snap_slot->stats.snapshot_phase, in_flight ? "copying" : "complete",
			sizeof(ash_snap_slot->stats.snapshot_phase));
	ash_snap_slot->stats.snapshot_tables_total = list_length(a->tables);
	ash_snap_slot->stats.snapshot_tables_copied = ncopied;
	ash_snap_slot->stats.snapshot_rows_committed = rows;
	ash_snap_slot->stats.snapshot_rows_estimate = estimate;
	SpinLockRelease(&ash_snap_slot->mutex);
}

/*
 * A copier's table in flight (NULL: none) and its rows so far.  The
 * pipeline worker also publishes for the incremental helper (copier 1);
 * a table the worker takes over from it leaves the helper's entry.
 */
void
ash_snap_publish_table_at(int copier, const char *nspname, const char *relname, int64 rows,
						  int64 estimate)
{
	AshCopier  *me;

	if (ash_snap_slot == NULL)
		return;
	me = &ash_snap_slot->copiers[copier];
	SpinLockAcquire(&ash_snap_slot->mutex);
	strlcpy(me->schema, nspname ? nspname : "", NAMEDATALEN);
	strlcpy(me->table, relname ? relname : "", NAMEDATALEN);
	me->rows = rows;
	for (int i = 0; copier == 0 && relname != NULL && i < ASH_SNAPSHOT_COPIERS_MAX; i++)
	{
		AshCopier  *other = &ash_snap_slot->copiers[i];

		if (i != copier && strcmp(other->schema, me->schema) == 0 &&
			strcmp(other->table, me->table) == 0)
		{
			other->schema[0] = other->table[0] = '\0';
			other->rows = 0;
		}
	}
	SpinLockRelease(&ash_snap_slot->mutex);

	if (relname != NULL &&
		TimestampDifferenceExceeds(last_progress_log, GetCurrentTimestamp(), PROGRESS_LOG_MS))
	{
		int			ncopied;
		int			ntotal;

		SpinLockAcquire(&ash_snap_slot->mutex);
		ncopied = ash_snap_slot->stats.snapshot_tables_copied;
		ntotal = ash_snap_slot->stats.snapshot_tables_total;
		SpinLockRelease(&ash_snap_slot->mutex);
		last_progress_log = GetCurrentTimestamp();
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.progress sink=%s table=%s rows=" INT64_FORMAT
						" estimate=" INT64_FORMAT " tables_copied=%d/%d",
						ash_snap_cfg->sink_name, quote_qualified_identifier(nspname, relname),
						rows, estimate, ncopied, ntotal)));
	}
}

static void
publish_table(const char *nspname, const char *relname, int64 rows, int64 estimate)
{
	ash_snap_publish_table_at(ash_snap_my_copier, nspname, relname, rows, estimate);
}

/* A table committed: into the totals, out of its copier's slot. */
void
ash_snap_publish_copied_at(int copier, int64 rows)
{
	if (ash_snap_slot == NULL)
		return;
	SpinLockAcquire(&ash_snap_slot->mutex);
	ash_snap_slot->stats.snapshot_tables_copied++;
	ash_snap_slot->stats.snapshot_rows_committed += rows;
	ash_snap_slot->copiers[copier].schema[0] = '\0';
	ash_snap_slot->copiers[copier].table[0] = '\0';
	ash_snap_slot->copiers[copier].rows = 0;
	SpinLockRelease(&ash_snap_slot->mutex);
}

static void
publish_copied(int64 rows)
{
	ash_snap_publish_copied_at(ash_snap_my_copier, rows);
}

/* ---------------------------------------------------------------------
 * Copy.
 * ---------------------------------------------------------------------
 */

/* A helper copier: the pipeline worker it serves, to stop with it. */
int64		ash_snap_helper_generation = 0;
pid_t		ash_snap_helper_coordinator = 0;

void
ash_snap_check_coordinator(void)
{
	bool		alive;

	if (ash_snap_my_copier == 0 || ash_snap_slot == NULL)
		return;
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	alive = ash_snap_slot->in_use && ash_snap_slot->generation == ash_snap_helper_generation &&
		ash_snap_slot->pid == ash_snap_helper_coordinator && !ash_snap_slot->stop_requested &&
		ash_snap_slot->state == ASH_SLOT_RUNNING;
	LWLockRelease(AshShmem->lock);
	/* a worker that exited before the launcher noticed */
	if (alive && kill(ash_snap_helper_coordinator, 0) != 0 && errno == ESRCH)
		alive = false;
	if (!alive)
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("ash_replicant: the pipeline worker of this snapshot is gone")));
}

/*
 * Rows already copied at this position: append-log ordinals continue from
 * them (append logs are copied by one copier, so this is exact).
 */
static int32
ordinal_base(XLogRecPtr lsn)
{
	Oid			types[1] = {LSNOID};
	Datum		values[1];
	bool		isnull;
	int64		base;

	values[0] = LSNGetDatum(lsn);
	ash_spi_transaction_begin();
	(void) ash_snap_key_exec("SELECT coalesce(pg_catalog.sum(rows_copied), 0)::int8"
							 "  FROM ash_replicant.snapshot_tables"
							 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							 "   AND state = 'copied' AND snapshot_lsn = $4",
							 1, types, values, NULL, SPI_OK_SELECT);
	base = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	ash_spi_transaction_end();
	if (base > PG_INT32_MAX)
		ash_halt("snapshot_state_invalid", "more rows at one snapshot position than ordinals can number");
	return (int32) base;
}

/*
 * Is the mapping's own target empty?  Then every row the copy writes is new
 * (apply writes them without an upsert's fallback).  Not under context
 * tenancy, whose rows go to other tables.
 */
bool
ash_snap_target_is_empty(AshMapping *m)
{
	char	   *nsp;
	char	   *rel;
	int			ret;
	MemoryContext cxt = CurrentMemoryContext;

	if (m->tenant_strategy != NULL && strcmp(m->tenant_strategy, "context") == 0)
		return false;
	nsp = get_namespace_name(get_rel_namespace(m->target_relid));
	rel = get_rel_name(m->target_relid);
	if (nsp == NULL || rel == NULL)
		return false;
	PushActiveSnapshot(GetTransactionSnapshot());
	ret = SPI_execute(psprintf("SELECT 1 FROM %s LIMIT 1", quote_qualified_identifier(nsp, rel)),
					  true, 1);
	PopActiveSnapshot();
	MemoryContextSwitchTo(cxt);
	return ret == SPI_OK_SELECT && SPI_processed == 0;
}

/*
 * Say in copier's slot whether its read of a table waits for a source lock
 * (a v1 COPY, an incremental chunk); status reads source_lock_wait.
 */
void
ash_snap_publish_source_lock(int copier, bool waits)
{
	AshCopier  *me;

	if (ash_snap_slot == NULL)
		return;
	me = &ash_snap_slot->copiers[copier];
	SpinLockAcquire(&ash_snap_slot->mutex);
	if (!waits)
		me->source_lock_since = 0;
	else if (me->source_lock_since == 0)
		me->source_lock_since = GetCurrentTimestamp();
	SpinLockRelease(&ash_snap_slot->mutex);
}

/*
 * Does the source make the COPY (or the incremental chunk read) on data
 * wait for a lock (another session's ALTER TABLE, VACUUM FULL, LOCK TABLE,
 * ...)?  Asked on a probe connection (*arg, opened on first use, in the
 * current memory context); status says source_lock_wait meanwhile.  The
 * copy waits as long as the lock is held, as pg_dump does: a copy given up
 * and started again would queue behind the same lock, one more session each
 * time.
 */
bool
ash_snap_source_lock_waits(AshConn *data, void *arg)
{
	static bool syncrep_said = false;	/* in this wait (probe opened) */
	AshConn   **probe = (AshConn **) arg;
	char		pid[16];
	const char *params[1];
	PGresult   *res;
	bool		waits;
	bool		syncrep;

	if (*probe == NULL)
	{
		/* a wait's first question */
		*probe = ash_conn_open(ash_snap_cfg->connection, ASH_CONN_PROBE, "ash_replicant snapshot");
		syncrep_said = false;
	}
	snprintf(pid, sizeof(pid), "%d", PQbackendPID(data->conn));
	params[0] = pid;
	res = ash_conn_exec_params(*probe,
							   "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks"
							   " WHERE pid = $1::pg_catalog.int4 AND NOT granted),"
							   " EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity"
							   " WHERE pid OPERATOR(pg_catalog.=) ANY (pg_catalog.pg_blocking_pids($1::pg_catalog.int4))"
							   " AND wait_event = 'SyncRep')",
							   1, params, false);
	waits = PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	syncrep = waits && strcmp(PQgetvalue(res, 0, 1), "t") == 0;
	PQclear(res);
	ash_snap_publish_source_lock(ash_snap_my_copier, waits);

	/*
	 * A holder whose commit waits for a synchronous standby may wait for
	 * this pipeline, which acknowledges nothing until a v1 copy is done:
	 * neither would move.  Said once a wait (the source role sees other
	 * sessions' wait events with pg_read_all_stats; otherwise not at all).
	 */
	if (syncrep && !syncrep_said)
	{
		syncrep_said = true;
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.source_lock_syncrep sink=%s copier=%d",
						ash_snap_cfg->sink_name, ash_snap_my_copier),
				 errhint("A session holding the lock waits for a synchronous standby; if that is this pipeline, which does not stream while a v1 snapshot copies, end the wait (pg_cancel_backend) or take the pipeline out of synchronous_standby_names (docs/reasons.md#source_lock_wait).")));
	}
	return waits;
}

/* Run sql (a COPY, a LOCK) on data, waiting out a source lock (above). */
static PGresult *
exec_waiting_locks(AshConn *data, const char *sql)
{
	AshConn    *volatile probe = NULL;
	PGresult   *res;

	PG_TRY();
	{
		res = ash_conn_exec_waiting(data, sql, ash_snap_source_lock_waits, (void *) &probe);
	}
	PG_CATCH();
	{
		ash_snap_publish_source_lock(ash_snap_my_copier, false);
		if (probe != NULL)
			ash_conn_close(probe);
		PG_RE_THROW();
	}
	PG_END_TRY();
	ash_snap_publish_source_lock(ash_snap_my_copier, false);
	if (probe != NULL)
		ash_conn_close(probe);
	return res;
}

/*
 * Lock table t for its copy (ACCESS SHARE, to the end of the copy's
 * transaction, waiting out another session's lock as the COPY would) and
 * make sure the snapshot sees its rows.  A rewrite committed after the
 * snapshot was taken (ALTER TABLE ... TYPE, a volatile default, SET ACCESS
 * METHOD, TRUNCATE) moved them into a new file under the rewriting
 * transaction's id, which the snapshot does not see -- PostgreSQL's
 * rewrites are not MVCC-safe: a COPY would read the table empty, and the
 * stream would never bring its rows.  Such a table ends the session: the
 * next copies it, with the tables still pending, under a snapshot of its
 * own (NOTES, Restart).  Locked, it cannot be rewritten until the copy
 * ends.
 */
static void
lock_for_copy(AshConn *data, const SnapTable *t)
{
	const char *qualified = quote_qualified_identifier(t->nspname, t->relname);
	PGresult   *res;
	bool		seen;

	res = exec_waiting_locks(data, psprintf("LOCK TABLE ONLY %s IN ACCESS SHARE MODE", qualified));
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		ash_conn_report_result(res, "snapshot table lock");
	PQclear(res);

	/* its file under the snapshot, and its file now (the relation cache's) */
	res = ash_conn_exec(data,
						psprintf("SELECT pg_catalog.count(*) FROM pg_catalog.pg_class c"
								 " WHERE c.oid = %s::pg_catalog.regclass"
								 "   AND c.relfilenode IN (0, pg_catalog.pg_relation_filenode(c.oid))",
								 ash_conn_quote_literal(data, qualified)),
						false);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		ash_conn_report_result(res, "snapshot table file");
	seen = strcmp(PQgetvalue(res, 0, 0), "1") == 0;
	PQclear(res);
	if (seen)
		return;
	ereport(LOG,
			(errmsg("ash_replicant event=snapshot.table_rewritten sink=%s table=%s",
					ash_snap_cfg->sink_name, qualified),
			 errdetail("The table was rewritten or replaced at the source after the snapshot was taken; the next session copies it under a snapshot of its own.")));
	ash_conn_last_sqlstate[0] = '\0';
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("ash_replicant: source table %s was rewritten after the snapshot; the next session copies it",
					qualified)));
}

/*
 * Claim a pending table and copy it: one destination transaction that
 * holds the table's catalog row locked (other copiers skip it), writes its
 * rows and marks it copied.  Returns false when no table is left to claim.
 */
bool
ash_snap_copy_next(AshConn *data, XLogRecPtr lsn, bytea *attempt)
{
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext tcxt;
	SnapTable	t;
	AshRelation rel;
	AshChange	change;
	StringInfoData sql;
	PGresult   *res;
	int64		rows = 0;
	int			len;
	int32		base = 0;
	int32		last_ordinal;
	bool		append_log = ash_config_is_append_log(ash_snap_cfg);
	bool		binary = true;
	int			binary_state = 0;
	AshMapping *map;

	if (append_log)
		base = ordinal_base(lsn);

	tcxt = AllocSetContextCreate(cxt, "ash_replicant snapshot table", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(tcxt);
	ash_apply_snapshot_begin(lsn - 1, base, attempt, true);

	/* the largest table first: copiers finish closer together */
	memset(&t, 0, sizeof(t));
	if (ash_snap_key_exec("SELECT source_schema, source_table, rows_estimate"
						  "  FROM ash_replicant.snapshot_tables"
						  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
						  "   AND state = 'pending'"
						  " ORDER BY coalesce(rows_estimate, 0) DESC, source_schema, source_table"
						  "   FOR UPDATE SKIP LOCKED LIMIT 1",
						  0, NULL, NULL, NULL, SPI_OK_SELECT) == 0)
	{
		(void) ash_apply_snapshot_commit();
		MemoryContextSwitchTo(cxt);
		MemoryContextDelete(tcxt);
		return false;
	}
	{
		bool		isnull;
		Datum		d;

		t.nspname = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		t.relname = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
		t.has_estimate = !isnull;
		t.estimate = isnull ? -1 : DatumGetInt64(d);
	}

	map = ash_config_find_mapping(ash_snap_cfg, t.nspname, t.relname);
	if (map != NULL && ash_snap_target_is_empty(map))
		ash_apply_snapshot_fresh(map->target_relid, true);

	lock_for_copy(data, &t);
	memset(&rel, 0, sizeof(rel));
	ash_snap_describe_table(data, &t, &rel);
	memset(&change, 0, sizeof(change));
	change.kind = ASH_CHANGE_RELATION;
	change.u.relation = rel;
	ash_apply_change(&change);

	/* binary when every type is built in (its send format is known here) */
	for (int i = 0; i < rel.natts; i++)
		if (rel.cols[i].type_oid >= FirstGenbkiObjectId)
			binary = false;
	initStringInfo(&sql);
	appendStringInfoString(&sql, "COPY (SELECT ");
	for (int i = 0; i < rel.natts; i++)
		appendStringInfo(&sql, "%s%s", i ? ", " : "", quote_identifier(rel.cols[i].name));
	appendStringInfo(&sql, " FROM ONLY %s) TO STDOUT%s",
					 quote_qualified_identifier(t.nspname, t.relname),
					 binary ? " (FORMAT binary)" : "");
	res = exec_waiting_locks(data, sql.data);
	if (PQresultStatus(res) != PGRES_COPY_OUT)
		ash_conn_report_result(res, "snapshot COPY");
	PQclear(res);

	memset(&change, 0, sizeof(change));
	change.kind = ASH_CHANGE_INSERT;
	change.xid = InvalidTransactionId;
	change.u.insert.relid = rel.relid;
	change.u.insert.newtup.natts = rel.natts;
	change.u.insert.newtup.cols = palloc0(sizeof(AshColumnValue) * Max(rel.natts, 1));

	publish_table(t.nspname, t.relname, 0, t.estimate);
	while ((len = ash_conn_copy_row(data, &row_buf, ash_receive_timeout_ms)) > 0)
	{
		const char *err = NULL;
		int			r;

		if (binary)
			r = ash_copy_binary_split(row_buf, len, &binary_state, rel.natts,
									  change.u.insert.newtup.cols, &err);
		else
			r = ash_copy_text_split(row_buf, len, rel.natts, change.u.insert.newtup.cols, &err) ? 1 : -1;
		if (r < 0)
			ash_halt("protocol_violation", "undecodable COPY row of %s: %s",
					 quote_qualified_identifier(t.nspname, t.relname), err);
		if (r == 0)
		{
			/* the binary trailer */
			PQfreemem(row_buf);
			row_buf = NULL;
			continue;
		}
		ash_apply_change(&change);
		PQfreemem(row_buf);
		row_buf = NULL;
		if (++rows % PROGRESS_ROWS == 0)
		{
			CHECK_FOR_INTERRUPTS();
			ash_snap_check_coordinator();
			publish_table(t.nspname, t.relname, rows, t.estimate);
		}
	}

	/* the table's rows, what it no longer has, its progress: one commit */
	last_ordinal = ash_apply_snapshot_flush();
	if (append_log && (int64) base + rows != last_ordinal)
		elog(ERROR, "ash_replicant: snapshot ordinals diverged from the rows copied");
	if (map != NULL && map->snapshot_provenance)
	{
		int64		retired = ash_apply_snapshot_retire(map, lsn - 1, true);

		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.retired sink=%s table=%s rows=" INT64_FORMAT,
						ash_snap_cfg->sink_name, quote_qualified_identifier(t.nspname, t.relname),
						retired)));
	}
	{
		Oid			types[4] = {TEXTOID, TEXTOID, INT8OID, LSNOID};
		Datum		values[4];

		values[0] = CStringGetTextDatum(t.nspname);
		values[1] = CStringGetTextDatum(t.relname);
		values[2] = Int64GetDatum(rows);
		values[3] = LSNGetDatum(lsn);
		if (ash_snap_key_exec("UPDATE ash_replicant.snapshot_tables"
							  "   SET state = 'copied', rows_copied = $6, snapshot_lsn = $7,"
							  "       copied_at = pg_catalog.clock_timestamp()"
							  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							  "   AND source_schema = $4 AND source_table = $5 AND state = 'pending'",
							  4, types, values, NULL, SPI_OK_UPDATE) != 1)
			ash_halt("snapshot_state_invalid", "table %s is no longer pending in the attempt",
					 quote_qualified_identifier(t.nspname, t.relname));
	}
	(void) ash_apply_snapshot_commit();
	publish_copied(rows);
	ereport(LOG,
			(errmsg("ash_replicant event=snapshot.table_copied sink=%s table=%s rows=" INT64_FORMAT,
					ash_snap_cfg->sink_name, quote_qualified_identifier(t.nspname, t.relname), rows)));
	MemoryContextSwitchTo(cxt);
	MemoryContextDelete(tcxt);
	return true;
}

/* ---------------------------------------------------------------------
 * The attempt.
 * ---------------------------------------------------------------------
 */

/*
 * Arm a new attempt or extend the recorded one with tables mapped since;
 * returns it with every table (one transaction).
 */
Attempt *
ash_snap_arm(List *source, const AshSlotStart *start, const AshBinding *binding)
{
	Attempt    *a;
	ListCell   *lc;
	int			added = 0;
	bool		incremental = ash_snap_cfg->snapshot != NULL &&
		strcmp(ash_snap_cfg->snapshot, "incremental") == 0;

	ash_spi_transaction_begin();
	a = ash_snap_read_attempt();
	if (a->phase == ASH_SNAPSHOT_NONE)
	{
		bytea	   *id = palloc(VARHDRSZ + ASH_SNAPSHOT_ATTEMPT_BYTES);

		/* the stream resumes at the slot's position, or the watermark's */
		if (start->exported != NULL)
			a->start_lsn = start->exported_lsn;
		else if (!XLogRecPtrIsInvalid(binding->commit_lsn))
			a->start_lsn = binding->end_lsn;
		else
			a->start_lsn = start->slot_position;
		if (XLogRecPtrIsInvalid(a->start_lsn))
			ash_halt("snapshot_state_invalid", "the slot has no position to start the snapshot from");

		SET_VARSIZE(id, VARHDRSZ + ASH_SNAPSHOT_ATTEMPT_BYTES);
		if (!pg_strong_random(VARDATA(id), ASH_SNAPSHOT_ATTEMPT_BYTES))
			elog(ERROR, "ash_replicant: could not generate a snapshot attempt id");
		a->id = id;
		(void) ash_snap_key_exec("DELETE FROM ash_replicant.snapshot_tables"
								 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
								 0, NULL, NULL, NULL, SPI_OK_DELETE);
		if (!ash_checkpoint_snapshot_arm(ash_snap_key, a->start_lsn, id))
			ash_halt("checkpoint_identity_conflict", "the checkpoint row vanished under this pipeline");
		a->phase = ASH_SNAPSHOT_COPYING;
		a->state = NULL;
		a->tables = NIL;
	}

	/* provenance: the attempt is authenticated, a tampered one never retires */
	if (ash_provenance_in_use(ash_snap_cfg))
	{
		if (a->state != NULL)
			ash_provenance_verify_state(ash_snap_key, a->id, a->start_lsn, a->state);
		else
		{
			a->state = ash_provenance_sign_state(ash_snap_key, a->id, a->start_lsn);
			ash_checkpoint_set_snapshot_state(ash_snap_key, a->state);
		}
	}

	foreach(lc, source)
	{
		SnapTable  *t = lfirst(lc);
		SnapTable  *known = ash_snap_find_table(a->tables, t->nspname, t->relname);

		t->target = mapped_target(t->nspname, t->relname);
		if (known != NULL)
		{
			if (known_row_stands(known, t, a->id))
				continue;
			a->tables = list_delete_ptr(a->tables, known);
		}
		insert_pending(t);
		a->tables = lappend(a->tables, t);
		added++;
		if (incremental)
		{
			AshMapping *m = ash_config_find_mapping(ash_snap_cfg, t->nspname, t->relname);

			/*
			 * Nothing of this attempt is in the target yet, and what the
			 * stream wrote is at or below the watermark: history past the
			 * first chunk's position is not this pipeline's.  Checked in
			 * the arming transaction: a halt leaves the table unarmed.
			 */
			if (m != NULL)
				ash_provenance_check_history(m, ash_snap_chunk_position(a, binding->commit_lsn),
											 ash_snap_cfg->owner);
		}
	}

	if (added > 0 && a->phase == ASH_SNAPSHOT_COMPLETE)
	{
		/* tables mapped after the snapshot: copy them too, with floors */
		ash_checkpoint_snapshot_reopen(ash_snap_key);
		a->phase = ASH_SNAPSHOT_COPYING;
	}
	if (a->phase == ASH_SNAPSHOT_COPYING && list_length(a->tables) == 0)
	{
		/* nothing to copy: the attempt is complete as armed */
		mark_complete(a->start_lsn);
		a->phase = ASH_SNAPSHOT_COMPLETE;
	}
	if (added > 0 || a->phase != ASH_SNAPSHOT_COMPLETE)
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.armed sink=%s tables=%d new_tables=%d",
						ash_snap_cfg->sink_name, list_length(a->tables), added)));
	ash_spi_transaction_end();
	return a;
}

/* Tables whose copy is newer than where the stream resumes. */
void
ash_snap_install_floors(Attempt *a, XLogRecPtr watermark)
{
	List	   *floors = NIL;
	ListCell   *lc;

	foreach(lc, a->tables)
	{
		SnapTable  *t = lfirst(lc);
		AshTableFloor *f;

		/* an incremental copy has windows, never a floor */
		if (!t->copied || t->lsn <= watermark + 1 || t->chunks > 0)
			continue;
		f = palloc(sizeof(AshTableFloor));
		strlcpy(f->nspname, t->nspname, NAMEDATALEN);
		strlcpy(f->relname, t->relname, NAMEDATALEN);
		f->lsn = t->lsn;
		floors = lappend(floors, f);
	}
	ash_apply_set_floors(floors);
}

void
ash_snap_read_watermark(AshBinding *binding)
{
	bool		isnull;

	ash_spi_transaction_begin();
	(void) ash_snap_key_exec("SELECT commit_lsn, end_lsn FROM ash_replicant.checkpoints"
							 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
							 0, NULL, NULL, NULL, SPI_OK_SELECT);
	if (SPI_processed != 1)
		ash_halt("checkpoint_identity_conflict", "the checkpoint row vanished under this pipeline");
	binding->commit_lsn = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0],
													SPI_tuptable->tupdesc, 1, &isnull));
	binding->end_lsn = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 2, &isnull));
	ash_spi_transaction_end();
}

/* ---------------------------------------------------------------------
 * Copiers: the pipeline worker and its helpers.
 *
 * Tables are copied by up to ash_replicant.snapshot_workers copiers at
 * once: the pipeline worker (copier 0) and helper background workers it
 * starts (snapshot_copier.c).  Every copier imports the same snapshot on
 * a connection of its own and claims pending tables one at a time (FOR
 * UPDATE SKIP LOCKED on the table's catalog row, held by the table's copy
 * transaction), so a table is copied by exactly one of them and one that
 * dies leaves its table pending.  Append logs are copied by the pipeline worker alone:
 * their ordinals continue across the tables of one position.  A helper
 * reports how it ended in shared memory, never an error's text; the
 * pipeline worker waits for every helper, then raises what one reported
 * as its own error (halt, source fault or destination error).
 * ---------------------------------------------------------------------
 */

/* Connections of the attempt in progress: closed after an error too. */
AshConn    *ash_snap_data_conn = NULL;
static AshConn *temp_repl = NULL;

void
ash_snap_close_connections(void)
{
	if (temp_repl != NULL)
		ash_conn_close(temp_repl);
	temp_repl = NULL;
	if (ash_snap_data_conn != NULL)
		ash_conn_close(ash_snap_data_conn);
	ash_snap_data_conn = NULL;
}

static BackgroundWorkerHandle *helpers[ASH_SNAPSHOT_COPIERS_MAX];
static int	nhelpers = 0;

/*
 * Helpers of a failed session of this worker: terminated, perhaps not gone
 * yet.  Each holds its origin and its claimed table until it is, so the
 * next session waits for them before it starts helpers under their numbers.
 */
static BackgroundWorkerHandle *exiting[ASH_SNAPSHOT_COPIERS_MAX];
static int	nexiting = 0;

static void
start_helpers(int n)
{
	int			slotno = ash_snap_slot - AshShmem->slots;
	int64		generation;
	pid_t		coordinator = MyProcPid;
	MemoryContext old;
	bool		registered;

	SpinLockAcquire(&ash_snap_slot->mutex);
	for (int i = 0; i < ASH_SNAPSHOT_COPIERS_MAX; i++)
		memset(&ash_snap_slot->copiers[i], 0, sizeof(AshCopier));
	SpinLockRelease(&ash_snap_slot->mutex);
	LWLockAcquire(AshShmem->lock, LW_SHARED);
	generation = ash_snap_slot->generation;
	LWLockRelease(AshShmem->lock);

	nhelpers = 0;
	for (int i = 1; i <= n && i < ASH_SNAPSHOT_COPIERS_MAX; i++)
	{
		BackgroundWorker w;
		int32		index = i;

		ash_worker_prepare(&w, "ash_snapshot_copier_main", "ash_replicant snapshot",
						   ash_snap_cfg->sink_name, slotno, generation);
		memcpy(w.bgw_extra + sizeof(int64), &index, sizeof(int32));
		memcpy(w.bgw_extra + sizeof(int64) + sizeof(int32), &coordinator, sizeof(pid_t));
		/* no worker slot free: copy with fewer copiers */
		old = MemoryContextSwitchTo(TopMemoryContext);	/* outlives the session */
		registered = RegisterDynamicBackgroundWorker(&w, &helpers[nhelpers]);
		MemoryContextSwitchTo(old);
		if (!registered)
			break;
		nhelpers++;
	}
}

/* Terminate the session's helpers; their handles are kept until they are gone. */
static void
stop_helpers(void)
{
	for (int i = 0; i < nhelpers; i++)
	{
		TerminateBackgroundWorker(helpers[i]);
		if (nexiting < ASH_SNAPSHOT_COPIERS_MAX)
			exiting[nexiting++] = helpers[i];
	}
	nhelpers = 0;
}

/*
 * Wait until the helpers of this worker's failed session are gone: one
 * still exiting would keep a helper of ours from setting up its origin and
 * the table it claims from being copied, each an apply failure.  The wait
 * ends on the worker's own SIGTERM too (die, in CHECK_FOR_INTERRUPTS).
 */
void
ash_snap_helpers_wait_exited(void)
{
	int			running = 0;

	for (int i = 0; i < nexiting; i++)
	{
		pid_t		pid;

		if (GetBackgroundWorkerPid(exiting[i], &pid) == BGWH_STARTED)
			running++;
	}
	if (running > 0)
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.helpers_exiting sink=%s helpers=%d",
						ash_snap_cfg->sink_name, running)));
	while (nexiting > 0)
	{
		BackgroundWorkerHandle *h = exiting[nexiting - 1];
		pid_t		pid;

		if (GetBackgroundWorkerPid(h, &pid) != BGWH_POSTMASTER_DIED)
			(void) WaitForBackgroundWorkerShutdown(h);
		nexiting--;
		pfree(h);
	}
}

void
ash_snapshot_helpers_exit(int code, Datum arg)
{
	stop_helpers();
	ash_snap_incr_helper_terminate();
}

/* How a helper ended, raised as the pipeline worker's own error. */
void
ash_snap_raise_helper_end(AshCopier *c)
{
	switch (c->end)
	{
		case ASH_COPIER_DONE:
			return;
		case ASH_COPIER_HALT:
			/* the pipeline's halt names the table the helper's named */
			if (c->target[0] != '\0')
				ash_halt_on(c->target, c->reason, "%s", c->context);
			ash_halt(c->reason, "%s", c->context);
			break;
		case ASH_COPIER_SOURCE_FAULT:
			strlcpy(ash_conn_last_sqlstate, c->source_sqlstate, sizeof(ash_conn_last_sqlstate));
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("ash_replicant: a snapshot copier lost its source connection")));
			break;
		case ASH_COPIER_APPLY_ERROR:
			ash_apply_errctx.command = "snapshot";
			ash_apply_errctx.relation = pstrdup(c->context);
			ereport(ERROR,
					(errcode(c->sqlerrcode),
					 errmsg("ash_replicant: a snapshot copier's write failed")));
			break;
		case ASH_COPIER_RUNNING:
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("ash_replicant: a snapshot copier ended without a word")));
			break;
	}
}

/* Did a helper end with a failure? (The pipeline worker then stops claiming.) */
static AshCopier *
failed_helper(AshCopier *copy)
{
	bool		failed = false;

	SpinLockAcquire(&ash_snap_slot->mutex);
	for (int i = 1; i <= nhelpers; i++)
	{
		if (ash_snap_slot->copiers[i].end != ASH_COPIER_RUNNING &&
			ash_snap_slot->copiers[i].end != ASH_COPIER_DONE)
		{
			memcpy(copy, &ash_snap_slot->copiers[i], sizeof(AshCopier));
			failed = true;
			break;
		}
	}
	SpinLockRelease(&ash_snap_slot->mutex);
	return failed ? copy : NULL;
}

static void
wait_helpers(void)
{
	AshCopier	c;
	int			n;

	for (int i = 0; i < nhelpers; i++)
	{
		pid_t		pid;

		if (GetBackgroundWorkerPid(helpers[i], &pid) != BGWH_POSTMASTER_DIED)
			(void) WaitForBackgroundWorkerShutdown(helpers[i]);
	}
	/* all gone: nothing left for stop_helpers */
	n = nhelpers;
	for (int i = 0; i < n; i++)
		pfree(helpers[i]);
	nhelpers = 0;
	for (int i = 1; i <= n; i++)
	{
		SpinLockAcquire(&ash_snap_slot->mutex);
		memcpy(&c, &ash_snap_slot->copiers[i], sizeof(AshCopier));
		SpinLockRelease(&ash_snap_slot->mutex);
		if (c.end != ASH_COPIER_DONE)
			ash_snap_raise_helper_end(&c);
	}
}

/* Every table copied: the attempt is complete (its own transaction). */
static void
complete_attempt(Attempt *a)
{
	bool		isnull;
	int64		remaining;

	ash_spi_transaction_begin();
	(void) ash_snap_key_exec("SELECT pg_catalog.count(*) FROM ash_replicant.snapshot_tables"
							 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							 "   AND state = 'pending'",
							 0, NULL, NULL, NULL, SPI_OK_SELECT);
	remaining = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (remaining > 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_IN_USE),
				 errmsg("ash_replicant: %d snapshot tables are still being copied by an earlier session",
						(int) remaining)));
	mark_complete(a->start_lsn);
	ash_spi_transaction_end();
	a->phase = ASH_SNAPSHOT_COMPLETE;
}

/*
 * The provenance targets of the pending tables: each its sink's alone,
 * every key version known.
 */
void
ash_snap_check_provenance_versions(Attempt *a)
{
	ListCell   *lc;
	bool		begun = false;

	foreach(lc, a->tables)
	{
		SnapTable  *t = lfirst(lc);
		AshMapping *m = ash_config_find_mapping(ash_snap_cfg, t->nspname, t->relname);

		if (t->copied || m == NULL || !m->snapshot_provenance)
			continue;
		/* a registration from before such sharing was refused, or racing */
		if (ash_config_retires_shared(m))
			ash_halt("snapshot_provenance_invalid",
					 "the target of %s is mapped by another sink too: retiring the rows this snapshot did not see would retire that sink's",
					 quote_qualified_identifier(m->source_schema, m->source_table));
		if (!begun)
			ash_spi_transaction_begin();
		begun = true;
		ash_provenance_check_versions(m, ash_snap_cfg->owner);
	}
	if (begun)
		ash_spi_transaction_end();
}

static Attempt *
run_attempt(const AshSlotStart *start, const AshBinding *binding)
{
	Attempt    *a;
	List	   *source;
	ListCell   *lc;
	char	   *snapshot;
	XLogRecPtr	snapshot_lsn;
	int			npending = 0;

	ash_snap_data_conn = ash_conn_open(ash_snap_cfg->connection, ASH_CONN_DATA, "ash_replicant snapshot");
	if (!ash_source_identity_matches(ash_snap_data_conn, ash_snap_cfg->source_system_identifier,
									 ash_snap_cfg->source_database))
		ash_halt("source_identity_mismatch", "the snapshot connection reached another source");

	source = ash_snap_source_tables(ash_snap_data_conn);
	a = ash_snap_arm(source, start, binding);
	foreach(lc, a->tables)
	{
		SnapTable  *t = lfirst(lc);

		if (!t->copied && t->chunks > 0)
			ash_halt("snapshot_state_invalid",
					 "an incremental snapshot is in progress under this checkpoint: configure snapshot incremental to finish it, or reset the checkpoint");

		/*
		 * A mapped table left to copy that the source's table set lacks
		 * now: every session would fail to read it.  No fault to retry: it
		 * is back only when the operator says so (as incremental's).
		 */
		if (!t->copied && ash_snap_find_table(source, t->nspname, t->relname) == NULL &&
			ash_config_find_mapping(ash_snap_cfg, t->nspname, t->relname) != NULL)
			ash_halt("snapshot_state_invalid",
					 "source table %s of the attempt is out of the publication (or the source) before its copy ended:"
					 " add it back and restart",
					 quote_qualified_identifier(t->nspname, t->relname));
		if (!t->copied)
			npending++;
	}
	ash_snap_publish_attempt(a, a->phase != ASH_SNAPSHOT_COMPLETE);

	if (npending > 0)
	{
		AshCopier	failed;
		int64		rows_before;

		/*
		 * A fingerprint of a key version the keyring lacks fails closed
		 * before any table is copied, so nothing of the attempt moves.
		 */
		ash_snap_check_provenance_versions(a);

		/* the slot's own snapshot only when the attempt starts with it */
		if (start->exported != NULL && a->start_lsn == start->exported_lsn)
		{
			snapshot = pstrdup(start->exported);
			snapshot_lsn = start->exported_lsn;
		}
		else
			snapshot = temporary_snapshot(&temp_repl, &snapshot_lsn);
		ash_snap_import_snapshot(ash_snap_data_conn, snapshot);
		check_origins(a);
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.copying sink=%s tables=%d pending=%d",
						ash_snap_cfg->sink_name, list_length(a->tables), npending)));

		/* helpers import the same snapshot: the exporter stays idle until they end */
		if (ash_snap_slot != NULL)
		{
			SpinLockAcquire(&ash_snap_slot->mutex);
			strlcpy(ash_snap_slot->snapshot_name, snapshot, sizeof(ash_snap_slot->snapshot_name));
			ash_snap_slot->snapshot_lsn = snapshot_lsn;
			rows_before = ash_snap_slot->stats.snapshot_rows_committed;
			SpinLockRelease(&ash_snap_slot->mutex);
			if (!ash_config_is_append_log(ash_snap_cfg))
				start_helpers(Min(ash_snapshot_workers, npending) - 1);
		}
		else
			rows_before = 0;

		while (!(nhelpers > 0 && failed_helper(&failed)) &&
			   ash_snap_copy_next(ash_snap_data_conn, snapshot_lsn, a->id))
			;
		PQclear(ash_conn_exec(ash_snap_data_conn, "COMMIT", false));
		wait_helpers();
		if (temp_repl != NULL)
		{
			ash_conn_close(temp_repl);
			temp_repl = NULL;
		}
		complete_attempt(a);
		ash_snap_drop_copier_origins();
		if (ash_snap_slot != NULL)
		{
			SpinLockAcquire(&ash_snap_slot->mutex);
			rows_before = ash_snap_slot->stats.snapshot_rows_committed - rows_before;
			SpinLockRelease(&ash_snap_slot->mutex);
		}
		ereport(LOG,
				(errmsg("ash_replicant event=snapshot.complete sink=%s tables=%d rows=" INT64_FORMAT,
						ash_snap_cfg->sink_name, list_length(a->tables), rows_before)));
	}
	else if (a->phase != ASH_SNAPSHOT_COMPLETE)
	{
		complete_attempt(a);	/* the last table committed, the session ended */
		ash_snap_drop_copier_origins();
	}
	return a;
}

void
ash_snapshot_run(AshPipelineConfig *cfg, AshCheckpointKey *key, const AshSlotStart *start,
				 AshBinding *binding)
{
	Attempt    *a;

	ash_snap_cfg = cfg;
	ash_snap_key = key;
	ash_snap_slot = ash_snap_find_slot();
	ash_snap_my_copier = 0;
	ash_snap_incr_helper_stop(true);		/* of an incremental session before */
	ash_snap_helpers_wait_exited();	/* of a failed session before */
	ash_provenance_set_unfingerprinted(InvalidOid);
	if (row_buf != NULL)
	{
		PQfreemem(row_buf);
		row_buf = NULL;
	}
	ash_snap_close_connections();

	if (!ash_snapshot_configured(cfg))
	{
		/*
		 * snapshot is off now, but an attempt is recorded: a half-copied
		 * one cannot simply stream (its tables would miss or repeat
		 * changes); a complete one still needs its floors.
		 */
		ash_spi_transaction_begin();
		a = ash_snap_read_attempt();
		ash_spi_transaction_end();
		if (a->phase == ASH_SNAPSHOT_COPYING)
			ash_halt("snapshot_state_invalid",
					 "a snapshot attempt is in progress under this checkpoint: configure snapshot v1 to finish it, or reset the checkpoint");
		ash_snap_install_floors(a, binding->commit_lsn);
		return;
	}

	PG_TRY();
	{
		(void) run_attempt(start, binding);
	}
	PG_CATCH();
	{
		stop_helpers();
		ash_snap_close_connections();
		PG_RE_THROW();
	}
	PG_END_TRY();
	ash_snap_close_connections();

	ash_snap_read_watermark(binding);
	ash_apply_set_watermark(binding->commit_lsn, binding->end_lsn);
	/* the tables as committed (helpers copied some): floors and totals */
	ash_spi_transaction_begin();
	a = ash_snap_read_attempt();
	ash_spi_transaction_end();
	ash_snap_install_floors(a, binding->commit_lsn);
	ash_snap_publish_attempt(a, false);
}
