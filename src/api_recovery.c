/*-------------------------------------------------------------------------
 *
 * api_recovery.c
 *	  Checkpoint recovery: reset, adopt, acknowledge a timeline or a
 *	  publication gap.
 *
 * NOTES
 *	  Each function is an explicit operator decision about ONE checkpoint
 *	  row: the row of the sink's slot name and its configured source
 *	  identity.  The caller restates that identity (source system
 *	  identifier and database); it must equal the pipeline's configured
 *	  identity, so nothing here can reach another sink's row or a row of a
 *	  foreign source.  Refusals raise ash_reject with a reason code, never
 *	  echo an identity value, and change nothing.
 *
 *	  Only for a caller with the privileges of the sink's owner
 *	  (ash_owner_check_caller): a recovery decides what the worker writes
 *	  next, as that owner.
 *
 *	  Offline only: the sink row is locked FOR UPDATE (serializing with
 *	  start, stop and configuration), and the function refuses while the
 *	  pipeline is enabled, while a worker for it is registered, while a
 *	  process (the worker at its very end, a snapshot's helper copier
 *	  still exiting) holds one of the sink's replication origins, or while
 *	  any session of this database holds the per-slot lock a worker keeps
 *	  for its life (pipeline_running).  Recover with: stop, recover, start.
 *
 *	  Idempotent: each returns true when it changed the row and false when
 *	  the row was already in the requested state (a second call).
 *
 *	  reset_checkpoint   delete the row (a missing row is not an error).
 *						 The next start binds afresh and streams from the
 *						 slot's confirmed position, which may re-deliver
 *						 transactions applied after the last confirmation:
 *						 harmless for upserts, not for SCD2 history (a
 *						 re-delivered update would close and open a version
 *						 twice).  So a sink with an SCD2 mapping is refused
 *						 (history_redelivery_unsafe) unless its pipeline has
 *						 a snapshot mode or accept_redelivery => true.
 *	  adopt_checkpoint   set the watermark to a preserved commit LSN.
 *						 end_lsn (the restart point) is set to the same
 *						 LSN: streaming then restarts at that commit
 *						 record, and the transaction it ends is skipped as
 *						 at-or-below the watermark.  An unchanged commit
 *						 LSN keeps the recorded end_lsn.  A missing row is
 *						 created; its timeline is read from the source on a
 *						 read-only probe that first verifies the source
 *						 identity.  Refused while a row of another identity
 *						 holds the slot name (checkpoint_identity_conflict).
 *	  acknowledge_checkpoint_timeline
 *						 re-bind the recorded timeline, watermark untouched;
 *						 the row must exist (checkpoint_missing).
 *	  acknowledge_publication_gap
 *						 forget how the publication held one mapped table,
 *						 or every one (publication_record.c): the operator
 *						 accepts that changes made while a table was out
 *						 are missing, and the next start records how it is
 *						 held now.  The checkpoint row must exist
 *						 (checkpoint_missing); watermark and tombstone
 *						 untouched.
 *	  acknowledge_column_added
 *						 mark the record of the source columns one mapped
 *						 table feeds (source_columns.c): the operator made
 *						 the target's rows agree with the source's in the
 *						 columns added while mirrored, and the next
 *						 description adding columns is taken as it is.
 *						 Same checks.
 *
 *	  Tombstones: reset removes the row with its tombstone; adopt clears
 *	  the tombstone (the operator has decided where the pipeline resumes);
 *	  acknowledge clears it only when its cause is source_timeline_changed
 *	  (any other halt stays for the operator to see).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlogdefs.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"

#include "checkpoint.h"
#include "errors.h"
#include "libpq_conn.h"
#include "origin.h"
#include "owner_scope.h"
#include "shmem.h"

PG_FUNCTION_INFO_V1(ash_replicant_reset_checkpoint);
PG_FUNCTION_INFO_V1(ash_replicant_adopt_checkpoint);
PG_FUNCTION_INFO_V1(ash_replicant_acknowledge_checkpoint_timeline);
PG_FUNCTION_INFO_V1(ash_replicant_acknowledge_publication_gap);
PG_FUNCTION_INFO_V1(ash_replicant_acknowledge_column_added);

#define STAGE_RECOVERY	"recovery"

/* The checkpoint key a recovery call acts on, and what it needs to know. */
typedef struct RecoveryTarget
{
	char	   *sink_name;
	char	   *slot_name;
	char	   *sysid;
	char	   *database;
	char	   *connection;		/* never shown */
	char	   *decoder;
	bool		snapshot_mode;	/* pipelines.snapshot <> 'off' */
	bool		scd2;			/* any mapping keeps SCD2 history */
} RecoveryTarget;

static char *
text_arg(FunctionCallInfo fcinfo, int n, const char *name)
{
	if (PG_ARGISNULL(n))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, STAGE_RECOVERY, "config_invalid",
				   "%s must not be NULL", name);
	return text_to_cstring(PG_GETARG_TEXT_PP(n));
}

static int
exec(const char *sql, int nargs, Oid *types, Datum *values, bool read_only)
{
	int			ret = SPI_execute_with_args(sql, nargs, types, values, NULL, read_only, 0);

	if (ret < 0)
		elog(ERROR, "ash_replicant: catalog statement failed: %s", SPI_result_code_string(ret));
	return ret;
}

static char *
getvalue(int col)
{
	bool		isnull;

	(void) SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, &isnull);
	return isnull ? NULL : SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col);
}

static bool
getbool(int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, col, &isnull);

	return !isnull && DatumGetBool(d);
}

/*
 * Validate the common arguments (sink, identity) and the offline state;
 * lock the sink row.  Leaves SPI connected (the caller finishes).
 */
static void
recovery_prepare(FunctionCallInfo fcinfo, RecoveryTarget *t)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	char	   *sysid;
	char	   *database;
	bool		enabled;
	bool		locked;
	bool		isnull;

	memset(t, 0, sizeof(*t));
	t->sink_name = text_arg(fcinfo, 0, "sink_name");
	sysid = text_arg(fcinfo, 1, "source_system_identifier");
	database = text_arg(fcinfo, 2, "source_database");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");

	values[0] = CStringGetTextDatum(t->sink_name);
	exec("SELECT s.slot_name, p.source_system_identifier, p.source_database,"
		 "  coalesce(p.enabled, false), p.connection, p.decoder,"
		 "  coalesce(p.snapshot <> 'off', false),"
		 "  EXISTS (SELECT 1 FROM ash_replicant.resources r"
		 "    WHERE r.sink_name = s.sink_name AND r.history_strategy = 'scd2'),"
		 "  s.owner::pg_catalog.oid"
		 " FROM ash_replicant.sinks s"
		 " LEFT JOIN ash_replicant.pipelines p ON p.sink_name = s.sink_name"
		 " WHERE s.sink_name = $1 FOR UPDATE OF s",
		 1, types, values, false);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("ash_replicant: sink \"%s\" does not exist", t->sink_name)));
	/* before any other judgement: nothing about the sink to one refused */
	ash_owner_check_caller(DatumGetObjectId(SPI_getbinval(SPI_tuptable->vals[0],
														  SPI_tuptable->tupdesc, 9,
														  &isnull)),
						   STAGE_RECOVERY, t->sink_name);
	t->slot_name = getvalue(1);
	t->sysid = getvalue(2);
	t->database = getvalue(3);
	enabled = getbool(4);
	t->connection = getvalue(5);
	t->decoder = getvalue(6);
	t->snapshot_mode = getbool(7);
	t->scd2 = getbool(8);

	if (t->sysid == NULL || t->sysid[0] == '\0' ||
		t->database == NULL || t->database[0] == '\0')
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY, "config_invalid",
				   "sink \"%s\" has no configured source identity", t->sink_name);
	/* the operator restates the identity: never echo either side */
	if (strcmp(sysid, t->sysid) != 0 || strcmp(database, t->database) != 0)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_RECOVERY, "source_identity_mismatch",
				   "the given source identity is not the configured identity of sink \"%s\"",
				   t->sink_name);

	if (enabled || ash_pipeline_is_running(t->sink_name))
		ash_reject(ERRCODE_OBJECT_IN_USE, STAGE_RECOVERY, "pipeline_running",
				   "sink \"%s\": stop its pipeline with ash_replicant_stop and let its worker exit first",
				   t->sink_name);

	/*
	 * The worker's slot says it left before the worker releases its origin,
	 * and knows nothing of a snapshot's helper copiers, which exit on their
	 * own time after it: one still holding an origin of the sink may write,
	 * and holds its claim's row lock (a reset would wait on it).
	 */
	if (ash_origin_held(t->sink_name, 0))
		ash_reject(ERRCODE_OBJECT_IN_USE, STAGE_RECOVERY, "pipeline_running",
				   "sink \"%s\": a process of its pipeline, stopped, has not exited yet;"
				   " try again once it has", t->sink_name);

	/* a worker keeps the per-slot lock for its life (checkpoint.c) */
	values[0] = CStringGetTextDatum(t->slot_name);
	exec("SELECT pg_catalog.pg_try_advisory_xact_lock("
		 "pg_catalog.hashtextextended('ash_replicant.slot:' OPERATOR(pg_catalog.||) $1, 0))",
		 1, types, values, false);
	locked = getbool(1);
	if (!locked)
		ash_reject(ERRCODE_OBJECT_IN_USE, STAGE_RECOVERY, "pipeline_running",
				   "sink \"%s\": a worker still holds its slot", t->sink_name);
}

/* The checkpoint key of the target. */
static AshCheckpointKey
key_of(RecoveryTarget *t)
{
	AshCheckpointKey key = {t->sysid, t->database, t->slot_name};

	return key;
}

/* Key parameters $1..$3 of the bound row. */
static void
key_values(RecoveryTarget *t, Oid *types, Datum *values)
{
	types[0] = types[1] = types[2] = TEXTOID;
	values[0] = CStringGetTextDatum(t->sysid);
	values[1] = CStringGetTextDatum(t->database);
	values[2] = CStringGetTextDatum(t->slot_name);
}

/*
 * Lock every checkpoint row of the slot name; report whether ours and a
 * foreign one exist.
 */
static void
lock_rows(RecoveryTarget *t, bool *ours, bool *foreign)
{
	Oid			types[3];
	Datum		values[3];

	key_values(t, types, values);
	exec("SELECT pg_catalog.bool_or(source_system_id = $1 AND source_database = $2),"
		 "  pg_catalog.bool_or(source_system_id <> $1 OR source_database <> $2)"
		 " FROM (SELECT source_system_id, source_database FROM ash_replicant.checkpoints"
		 "  WHERE slot_name = $3 FOR UPDATE) c",
		 3, types, values, false);
	*ours = getbool(1);
	*foreign = getbool(2);
}

/*
 * ash_replicant_reset_checkpoint(sink_name, source_system_identifier,
 * source_database, accept_redelivery DEFAULT false)
 */
Datum
ash_replicant_reset_checkpoint(PG_FUNCTION_ARGS)
{
	RecoveryTarget t;
	AshCheckpointKey key;
	bool		changed;
	bool		accept_redelivery;

	if (PG_ARGISNULL(3))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, STAGE_RECOVERY, "config_invalid",
				   "accept_redelivery must not be NULL");
	accept_redelivery = PG_GETARG_BOOL(3);
	recovery_prepare(fcinfo, &t);

	if (t.scd2 && !t.snapshot_mode && !accept_redelivery)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY,
				   "history_redelivery_unsafe",
				   "sink \"%s\" keeps SCD2 history and has no snapshot mode: a reset may re-deliver"
				   " transactions; pass accept_redelivery => true to accept that",
				   t.sink_name);

	key = key_of(&t);
	changed = ash_checkpoint_reset(&key);
	SPI_finish();
	if (changed)
		ereport(LOG,
				(errmsg("ash_replicant event=checkpoint.reset sink=%s", t.sink_name)));
	PG_RETURN_BOOL(changed);
}

/* Timeline of the configured source, read on a probe that verifies identity. */
static int32
probe_timeline(RecoveryTarget *t)
{
	MemoryContext cxt = CurrentMemoryContext;
	AshConn    *volatile conn = NULL;
	volatile int32 tli = 0;

	if (t->connection == NULL || t->connection[0] == '\0')
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY, "config_invalid",
				   "sink \"%s\" has no connection to read the source's timeline from",
				   t->sink_name);
	PG_TRY();
	{
		PGresult   *res;
		bool		same;

		conn = ash_conn_open(t->connection, ASH_CONN_PROBE, "ash_replicant recovery");
		res = ash_conn_exec(conn,
							"SELECT system_identifier::pg_catalog.text, pg_catalog.current_database(),"
							" pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_flush_lsn())"
							" FROM pg_catalog.pg_control_system()", false);
		same = PQntuples(res) == 1 &&
			strcmp(PQgetvalue(res, 0, 0), t->sysid) == 0 &&
			strcmp(PQgetvalue(res, 0, 1), t->database) == 0;
		if (same && strlen(PQgetvalue(res, 0, 2)) >= 8)
		{
			char		hex[9];

			memcpy(hex, PQgetvalue(res, 0, 2), 8);
			hex[8] = '\0';
			tli = (int32) strtoul(hex, NULL, 16);
		}
		PQclear(res);
		if (!same)
			ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY,
					   "source_identity_mismatch",
					   "the source reached through the connection of sink \"%s\" is not its configured source",
					   t->sink_name);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		if (conn != NULL)
			ash_conn_close(conn);
		/* the libpq layer's errors are value-free; give them a reason code */
		if (edata->sqlerrcode == ERRCODE_CONNECTION_FAILURE)
			ash_reject(ERRCODE_CONNECTION_FAILURE, STAGE_RECOVERY, "source_unreachable",
					   "could not probe the source of sink \"%s\" for its timeline",
					   t->sink_name);
		ReThrowError(edata);
	}
	PG_END_TRY();
	ash_conn_close(conn);
	if (tli <= 0)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY,
				   "source_probe_failed", "could not read the source's timeline");
	return tli;
}

/*
 * ash_replicant_adopt_checkpoint(sink_name, source_system_identifier,
 * source_database, commit_lsn)
 */
Datum
ash_replicant_adopt_checkpoint(PG_FUNCTION_ARGS)
{
	RecoveryTarget t;
	AshCheckpointKey key;
	bool		changed;
	XLogRecPtr	lsn;
	bool		ours;
	bool		foreign;

	if (PG_ARGISNULL(3))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, STAGE_RECOVERY, "config_invalid",
				   "commit_lsn must not be NULL");
	lsn = PG_GETARG_LSN(3);
	recovery_prepare(fcinfo, &t);

	lock_rows(&t, &ours, &foreign);
	if (foreign)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY,
				   "checkpoint_identity_conflict",
				   "the slot of sink \"%s\" is bound to another source identity", t.sink_name);

	key = key_of(&t);
	if (ours)
		changed = ash_checkpoint_adopt(&key, lsn);
	else
		changed = ash_checkpoint_create_adopted(&key, lsn, probe_timeline(&t));
	SPI_finish();
	if (changed)
		ereport(LOG,
				(errmsg("ash_replicant event=checkpoint.adopted sink=%s created=%s",
						t.sink_name, ours ? "false" : "true")));
	PG_RETURN_BOOL(changed);
}

/*
 * ash_replicant_acknowledge_checkpoint_timeline(sink_name,
 * source_system_identifier, source_database, timeline_id)
 */
Datum
ash_replicant_acknowledge_checkpoint_timeline(PG_FUNCTION_ARGS)
{
	RecoveryTarget t;
	AshCheckpointKey key;
	bool		changed;
	int32		tli;
	bool		ours;
	bool		foreign;

	if (PG_ARGISNULL(3))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, STAGE_RECOVERY, "config_invalid",
				   "timeline_id must not be NULL");
	tli = PG_GETARG_INT32(3);
	if (tli <= 0)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_RECOVERY, "config_invalid",
				   "timeline_id must be positive");
	recovery_prepare(fcinfo, &t);

	lock_rows(&t, &ours, &foreign);
	if (!ours)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY, "checkpoint_missing",
				   "sink \"%s\" has no checkpoint of its configured source identity", t.sink_name);

	key = key_of(&t);
	changed = ash_checkpoint_acknowledge_timeline(&key, tli);
	SPI_finish();
	if (changed)
		ereport(LOG,
				(errmsg("ash_replicant event=checkpoint.timeline_acknowledged sink=%s",
						t.sink_name)));
	PG_RETURN_BOOL(changed);
}

/*
 * Run sql on key's per-table records ($1-$3 the key, $4 and $5 the schema
 * and table, or NULL for every table unless table_required), logging
 * event when it changed any: the body of the acknowledge_* functions of
 * per-table records.
 */
static bool
table_records_exec(FunctionCallInfo fcinfo, const char *sql, int expected_ret,
				   bool table_required, const char *event)
{
	RecoveryTarget t;
	Oid			types[5];
	Datum		values[5];
	char	   *nspname = NULL;
	char	   *relname = NULL;
	bool		ours;
	bool		foreign;
	bool		changed;

	/* both, or neither: every table of the checkpoint */
	if (PG_ARGISNULL(3) != PG_ARGISNULL(4) || (table_required && PG_ARGISNULL(3)))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, STAGE_RECOVERY, "config_invalid",
				   table_required ? "source_schema and source_table are required"
				   : "source_schema and source_table are given together or not at all");
	if (!PG_ARGISNULL(3))
	{
		nspname = text_arg(fcinfo, 3, "source_schema");
		relname = text_arg(fcinfo, 4, "source_table");
	}
	recovery_prepare(fcinfo, &t);
	lock_rows(&t, &ours, &foreign);
	if (!ours)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_RECOVERY, "checkpoint_missing",
				   "sink \"%s\" has no checkpoint of its configured source identity", t.sink_name);

	key_values(&t, types, values);
	types[3] = types[4] = TEXTOID;
	values[3] = nspname ? CStringGetTextDatum(nspname) : (Datum) 0;
	values[4] = relname ? CStringGetTextDatum(relname) : (Datum) 0;
	if (SPI_execute_with_args(sql, 5, types, values, nspname ? "     " : "   nn", false, 0) != expected_ret)
		elog(ERROR, "ash_replicant: catalog statement failed");
	changed = SPI_processed > 0;
	SPI_finish();
	if (changed)
		ereport(LOG,
				(errmsg("ash_replicant event=%s sink=%s table=%s", event, t.sink_name,
						nspname ? quote_qualified_identifier(nspname, relname) : "*")));
	return changed;
}

/*
 * ash_replicant_acknowledge_publication_gap(sink_name,
 * source_system_identifier, source_database, source_schema, source_table):
 * forgets the records (no schema and table given: every table's).
 */
Datum
ash_replicant_acknowledge_publication_gap(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(table_records_exec(fcinfo,
									  "DELETE FROM ash_replicant.publication_members"
									  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
									  "   AND ($4 IS NULL OR (source_schema = $4 AND source_table = $5))",
									  SPI_OK_DELETE, false, "publication.gap_acknowledged"));
}

/*
 * ash_replicant_acknowledge_column_added(sink_name,
 * source_system_identifier, source_database, source_schema, source_table):
 * marks one table's record so that the next description adding columns
 * is taken as it is (source_columns.c).  Not every table at once: that
 * would take additions nobody has seen yet.
 */
Datum
ash_replicant_acknowledge_column_added(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(table_records_exec(fcinfo,
									  "UPDATE ash_replicant.source_columns SET added_acknowledged = true"
									  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
									  "   AND source_schema = $4 AND source_table = $5 AND NOT added_acknowledged",
									  SPI_OK_UPDATE, true, "columns.added_acknowledged"));
}
