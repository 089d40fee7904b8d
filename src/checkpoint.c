/*-------------------------------------------------------------------------
 *
 * checkpoint.c
 *	  The checkpoint row: binding, watermark, halt tombstones, and every
 *	  other write of ash_replicant.checkpoints.
 *
 * NOTES
 *	  One checkpoint row per (source system id, source database, slot name).
 *	  Binding runs at every activation, before any apply:
 *
 *	  - the per-slot advisory lock (session level, held for the worker's
 *		life) serialises two starts of the same slot in this database: the
 *		second waits and never overwrites the first's row;
 *	  - a row with our slot name but another source identity is a foreign
 *		owner: checkpoint_identity_conflict;
 *	  - our row with another timeline: source_timeline_changed (the
 *		operator acknowledges a same-primary restart explicitly);
 *	  - our watermark beyond the source's flush position:
 *		checkpoint_ahead_of_source (the source was restored or replaced);
 *	  - another decoder recorded: decoder_contract_incompatible.
 *
 *	  - the contract manifest must be the recorded one or a pure addition
 *		(contract.c).
 *
 *	  Each conflict logs one checkpoint.conflict event.  An admitted binding
 *	  clears an earlier tombstone; the whole binding is one transaction, so
 *	  a halt leaves the row as it was.
 *
 *	  Every statement that changes the row is in this file, so what moves
 *	  the watermark (or anything else recorded on it) can be read in one
 *	  place: the driver's batch commit (ash_checkpoint_advance), the digest
 *	  key witness (messages.c), the append log's origin floor
 *	  (apply_append.c), the contract manifest (contract.c judges it), the
 *	  snapshot attempt (snapshot.c) and the operator's recovery functions
 *	  (api_recovery.c).  Each runs inside its caller's transaction, SPI
 *	  connected, and leaves the caller's memory context current.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "catalog_row.h"
#include "checkpoint.h"
#include "contract.h"
#include "errors.h"
#include "spi_util.h"

static SPIPlanPtr advance_plan = NULL;

/* the checkpoint row, for the batch's in-place advance (catalog_row.c) */
static AshCatalogRowSpec checkpoint_row = {
	.table = "checkpoints",
	.nkeys = 3,
	.keys = {"source_system_id", "source_database", "slot_name"},
	.ncols = 4,
	.cols = {"commit_lsn", "end_lsn", "updated_at", "contract"},
};
static ItemPointerData checkpoint_hint;	/* where it was last written */

/*
 * updated_at is refreshed by a batch only once it is this old.  The row
 * carries the contract (often near a kilobyte plain, two thirds of that or
 * less compressed) between commit_lsn and updated_at, and at wal_level
 * replica a HOT update logs the new version from its first changed byte to
 * its last: a batch that moves only the watermark logs 16 bytes of it, one
 * that moves updated_at too the whole span (docs/operations.md, Apply
 * speed: WAL per batch).
 */
#define CHECKPOINT_TOUCH_MS 1000

/*
 * A contract stored plain from this size on is compressed by the next
 * advance: JSON of repeated keys, it takes a half to two thirds of the
 * room, and a logical destination logs the whole row at every batch.
 */
#define CONTRACT_COMPRESS_MIN 256
static Size contract_failed_size = 0;
static SPIPlanPtr witness_plan = NULL;

static void
conflict(const char *sink_name, const char *reason, const char *what)
{
	ereport(LOG,
			(errmsg("ash_replicant event=checkpoint.conflict sink=%s reason=%s",
					sink_name, reason)));
	ash_halt(reason, "%s", what);
}

void
ash_checkpoint_bind(const char *sink_name, AshCheckpointKey *key, uint32 timeline,
					XLogRecPtr source_flush, const char *decoder, AshBinding *out)
{
	Oid			types[6] = {TEXTOID, TEXTOID, TEXTOID, INT4OID, TEXTOID, INT8OID};
	Datum		values[6];
	int			ret;
	bool		found = false;
	bool		locked = false;
	MemoryContext cxt = CurrentMemoryContext;

	memset(out, 0, sizeof(*out));
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	values[3] = Int32GetDatum((int32) timeline);
	values[4] = CStringGetTextDatum(decoder);

	/* per-slot lock, held for the life of this worker */
	for (int attempt = 0; attempt < 50 && !locked; attempt++)
	{
		bool		isnull;

		ret = SPI_execute_with_args(
			"SELECT pg_catalog.pg_try_advisory_lock("
			"pg_catalog.hashtextextended('ash_replicant.slot:' OPERATOR(pg_catalog.||) $3, 0))",
			3, types, values, NULL, false, 1);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: slot lock query failed");
		locked = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (!locked)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 100, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
	if (!locked)
		conflict(sink_name, "checkpoint_identity_conflict",
				 "another pipeline of this database holds the slot");

	ret = SPI_execute_with_args(
		"SELECT source_system_id, source_database, timeline_id, commit_lsn, end_lsn, decoder,"
		"       acknowledged_lsn IS NOT NULL, terminal_cause"
		" FROM ash_replicant.checkpoints WHERE slot_name = $3 FOR UPDATE",
		3, types, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: checkpoint query failed");

	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *sysid = SPI_getvalue(tup, desc, 1);
		char	   *db = SPI_getvalue(tup, desc, 2);
		int32		tli;
		XLogRecPtr	commit_lsn;
		char	   *rec_decoder;
		char	   *cause;

		if (strcmp(sysid, key->system_id) != 0 || strcmp(db, key->database) != 0)
			conflict(sink_name, "checkpoint_identity_conflict",
					 "the slot name is bound to another source identity");
		found = true;
		tli = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		commit_lsn = DatumGetLSN(SPI_getbinval(tup, desc, 4, &isnull));
		out->commit_lsn = commit_lsn;
		out->end_lsn = DatumGetLSN(SPI_getbinval(tup, desc, 5, &isnull));
		rec_decoder = SPI_getvalue(tup, desc, 6);
		out->acknowledged = DatumGetBool(SPI_getbinval(tup, desc, 7, &isnull));
		if ((uint32) tli != timeline)
			conflict(sink_name, "source_timeline_changed",
					 "the source's timeline differs from the recorded one");
		if (commit_lsn > source_flush)
			conflict(sink_name, "checkpoint_ahead_of_source",
					 "the watermark is beyond the source's WAL");

		/*
		 * Once seen behind the watermark, the source lost WAL the mirror
		 * applied (a restore, a replacement): the WAL it writes since is
		 * another history, and passing the watermark again proves nothing
		 * -- streaming from there would skip the new history's commits
		 * below it.  Only a reset or an adoption (which clears the
		 * tombstone) ends it.
		 */
		cause = SPI_getvalue(tup, desc, 8);
		if (cause != NULL && strcmp(cause, "checkpoint_ahead_of_source") == 0)
			conflict(sink_name, "checkpoint_ahead_of_source",
					 "the source was behind the watermark at an earlier start: the WAL it wrote since is another history");
		if (rec_decoder != NULL && strcmp(rec_decoder, decoder) != 0)
			conflict(sink_name, "decoder_contract_incompatible",
					 "the checkpoint was written by another decoder");
	}

	if (found)
		ret = SPI_execute_with_args(
			"UPDATE ash_replicant.checkpoints SET terminal_cause = NULL, terminal_class = NULL,"
			" terminal_at = NULL, decoder = $5, updated_at = pg_catalog.now()"
			" WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
			5, types, values, NULL, false, 0);
	else
	{
		ret = SPI_execute_with_args(
			"INSERT INTO ash_replicant.checkpoints"
			" (source_system_id, source_database, slot_name, timeline_id, decoder)"
			" VALUES ($1, $2, $3, $4, $5)",
			5, types, values, NULL, false, 0);
		out->created = true;
	}
	if (ret != SPI_OK_UPDATE && ret != SPI_OK_INSERT)
		elog(ERROR, "ash_replicant: checkpoint binding write failed");

	/* the contract manifest: first, unchanged, or a pure addition */
	ash_contract_admit(sink_name, key->system_id, key->database, key->slot_name);

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}

void
ash_checkpoint_note_uncopied(AshCheckpointKey *key, List *tables)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[4] = {TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID};
	Datum		values[4];
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(tables), 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, tables)
		elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	values[3] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("UPDATE ash_replicant.checkpoints SET go_forward_uncopied = $4"
							  " WHERE source_system_id = $1 AND source_database = $2"
							  " AND slot_name = $3",
							  4, types, values, NULL, false, 0) != SPI_OK_UPDATE)
		elog(ERROR, "ash_replicant: recording the go-forward tables failed");
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}

bool
ash_checkpoint_record_halt(const char *sink_name, int64 generation, AshCheckpointKey *key,
						   const AshHaltRecord *halt)
{
	volatile bool ok = true;
	MemoryContext cxt = CurrentMemoryContext;
	const char *reason = halt->reason;

	ereport(LOG,
			(errmsg("ash_replicant event=status.tombstone_write_attempted sink=%s reason=%s",
					sink_name, reason)));
	PG_TRY();
	{
		Oid			types[10] = {TEXTOID, INT8OID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID,
		TEXTOID, LSNOID, TEXTOID};
		Datum		values[10];
		char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
		int			ret;

		values[0] = CStringGetTextDatum(sink_name);
		values[1] = Int64GetDatum(generation);
		values[2] = CStringGetTextDatum(reason);
		values[3] = CStringGetTextDatum(halt->cls);
		if (halt->sqlstate)
			values[4] = CStringGetTextDatum(halt->sqlstate);
		else
			nulls[4] = 'n';
		if (key)
		{
			values[5] = CStringGetTextDatum(key->system_id);
			values[6] = CStringGetTextDatum(key->database);
			values[7] = CStringGetTextDatum(key->slot_name);
		}
		else
			nulls[5] = nulls[6] = nulls[7] = 'n';
		values[8] = LSNGetDatum(halt->lsn);
		nulls[8] = XLogRecPtrIsInvalid(halt->lsn) ? 'n' : ' ';
		if (halt->target)
			values[9] = CStringGetTextDatum(halt->target);
		else
			nulls[9] = 'n';

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		/* catalogs older than the library (a halt saying so) lack the location */
		ret = SPI_execute_with_args(halt->located ?
									"UPDATE ash_replicant.pipelines SET halt_generation = $2, halt_reason = $3,"
									" halt_class = $4, halt_sqlstate = $5, halted_at = pg_catalog.now(),"
									" halt_lsn = $9, halt_target = $10"
									" WHERE sink_name = $1 AND start_generation = $2" :
									"UPDATE ash_replicant.pipelines SET halt_generation = $2, halt_reason = $3,"
									" halt_class = $4, halt_sqlstate = $5, halted_at = pg_catalog.now()"
									" WHERE sink_name = $1 AND start_generation = $2",
									10, types, values, nulls, false, 0);
		if (ret != SPI_OK_UPDATE)
			elog(ERROR, "ash_replicant: halt record failed");
		/* with no checkpoint row the skip is lawful: nothing to mark */
		ret = SPI_execute_with_args(
			"UPDATE ash_replicant.checkpoints SET terminal_cause = $3, terminal_class = $4,"
			" terminal_at = pg_catalog.now()"
			" WHERE $6 IS NOT NULL AND source_system_id = $6 AND source_database = $7"
			" AND slot_name = $8",
			10, types, values, nulls, false, 0);
		if (ret != SPI_OK_UPDATE)
			elog(ERROR, "ash_replicant: tombstone write failed");
		SPI_finish();
		PopActiveSnapshot();
		CommitTransactionCommand();
		MemoryContextSwitchTo(cxt);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = ash_error_abort_transaction(cxt);
		ereport(LOG,
				(errmsg("ash_replicant event=status.tombstone_write_failed sink=%s reason=%s cause=%s sqlstate=%s",
						sink_name, reason,
						edata->sqlerrcode == ERRCODE_CONNECTION_FAILURE ||
						edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ?
						"destination_unavailable" : "destination_write_failed",
						unpack_sql_state(edata->sqlerrcode))));
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

/* ---------------------------------------------------------------------
 * Writes inside a caller's transaction.
 * ---------------------------------------------------------------------
 */

int
ash_checkpoint_key_params(const AshCheckpointKey *key, int nextra, const Oid *extra_types,
						  const Datum *extra_values, const char *extra_nulls, Oid *types,
						  Datum *values, char *nulls)
{
	Assert(nextra <= ASH_CHECKPOINT_MAX_PARAMS - 3);
	types[0] = types[1] = types[2] = TEXTOID;
	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	nulls[0] = nulls[1] = nulls[2] = ' ';
	for (int i = 0; i < nextra; i++)
	{
		types[3 + i] = extra_types[i];
		values[3 + i] = extra_values[i];
		nulls[3 + i] = extra_nulls ? extra_nulls[i] : ' ';
	}
	nulls[3 + nextra] = '\0';
	return 3 + nextra;
}

/* One statement about the row of key, see ash_spi_execute_args. */
static uint64
key_write(const AshCheckpointKey *key, const char *sql, int nextra, const Oid *extra_types,
		  const Datum *extra_values, int expected, const char *what)
{
	Oid			types[ASH_CHECKPOINT_MAX_PARAMS];
	Datum		values[ASH_CHECKPOINT_MAX_PARAMS];
	char		nulls[ASH_CHECKPOINT_MAX_PARAMS + 1];
	int			n = ash_checkpoint_key_params(key, nextra, extra_types, extra_values, NULL,
											  types, values, nulls);

	return ash_spi_execute_args(sql, n, types, values, nulls, expected, what);
}

void
ash_checkpoint_advance(const AshCheckpointKey *key, XLogRecPtr commit_lsn, XLogRecPtr end_lsn)
{
	Datum		values[5];
	uint64		n;
	const char *keys[3] = {key->system_id, key->database, key->slot_name};
	AshCatalogRow row;

	/*
	 * In place when the row is there and behind and nobody changed it
	 * meanwhile (every batch but a conflict); otherwise the statement below
	 * decides, as it always did.
	 */
	if (ash_catalog_row_find(&checkpoint_row, keys, &checkpoint_hint, &row))
	{
		bool		isnull;
		XLogRecPtr	at = DatumGetLSN(ash_catalog_row_get(&row, 0, &isnull));

		if (!isnull && at < commit_lsn)
		{
			TimestampTz now = GetCurrentTransactionStartTimestamp();
			bool		tnull;
			TimestampTz touched = DatumGetTimestampTz(ash_catalog_row_get(&row, 2, &tnull));

			ash_catalog_row_set(&row, 0, LSNGetDatum(commit_lsn), false);
			ash_catalog_row_set(&row, 1, LSNGetDatum(end_lsn), false);
			if (tnull || touched > now ||
				TimestampDifferenceExceeds(touched, now, CHECKPOINT_TOUCH_MS))
				ash_catalog_row_set(&row, 2, TimestampTzGetDatum(now), false);
			/* once, after each write of the contract (catalog_row.c) */
			ash_catalog_row_compress(&row, 3, CONTRACT_COMPRESS_MIN, &contract_failed_size);
			if (ash_catalog_row_update(&row))
				return;
		}
		else
			ash_catalog_row_release(&row);
	}

	if (advance_plan == NULL)
	{
		Oid			types[5] = {TEXTOID, TEXTOID, TEXTOID, LSNOID, LSNOID};
		SPIPlanPtr	p;

		p = SPI_prepare("UPDATE ash_replicant.checkpoints"
						" SET commit_lsn = $4, end_lsn = $5, updated_at = pg_catalog.now()"
						" WHERE source_system_id = $1 AND source_database = $2"
						" AND slot_name = $3 AND commit_lsn OPERATOR(pg_catalog.<) $4",
						5, types);
		if (p == NULL || SPI_keepplan(p) != 0)
			elog(ERROR, "ash_replicant: could not prepare the checkpoint update");
		advance_plan = p;
	}
	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	values[3] = LSNGetDatum(commit_lsn);
	values[4] = LSNGetDatum(end_lsn);
	PushActiveSnapshot(GetTransactionSnapshot());
	n = ash_spi_execute(advance_plan, values, NULL, SPI_OK_UPDATE);
	PopActiveSnapshot();
	if (n != 1)
		ash_halt("checkpoint_identity_conflict", "the checkpoint row moved or vanished under this pipeline");
}

/*
 * An UPDATE of the row with the key as $1..$3 and one value as $4, through a
 * plan kept in *plan (prepared at first use); returns SPI_processed.
 */
static uint64
key_plan_update(SPIPlanPtr *plan, const char *sql, const AshCheckpointKey *key,
				Oid type, Datum value)
{
	Datum		values[4];

	if (*plan == NULL)
	{
		Oid			types[4] = {TEXTOID, TEXTOID, TEXTOID, type};

		*plan = ash_spi_prepare_kept(sql, 4, types);
	}
	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	values[3] = value;
	return ash_spi_execute(*plan, values, NULL, SPI_OK_UPDATE);
}

void
ash_checkpoint_set_witness(const AshCheckpointKey *key, bytea *witness)
{
	if (key_plan_update(&witness_plan,
						"UPDATE ash_replicant.checkpoints SET digest_key_witness = $4"
						" WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
						key, BYTEAOID, PointerGetDatum(witness)) != 1)
		ash_halt("checkpoint_identity_conflict", "the checkpoint row moved or vanished under this pipeline");
}

void
ash_checkpoint_set_origin_floor(const AshCheckpointKey *key, XLogRecPtr origin_floor)
{
	Oid			types[1] = {LSNOID};
	Datum		values[1];

	values[0] = LSNGetDatum(origin_floor);
	if (key_write(key, "UPDATE ash_replicant.checkpoints SET origin_floor = $4"
				  " WHERE source_system_id = $1 AND source_database = $2"
				  " AND slot_name = $3 AND origin_floor IS NULL",
				  1, types, values, SPI_OK_UPDATE, "could not write the origin floor") != 1)
		elog(ERROR, "ash_replicant: could not write the origin floor");
}

/* ---------------------------------------------------------------------
 * What the source was told (docs/reasons.md#checkpoint_behind_slot).
 * ---------------------------------------------------------------------
 */

XLogRecPtr
ash_checkpoint_judge_slot(const AshCheckpointKey *key, XLogRecPtr confirmed, bool slot_created,
						  bool *armed)
{
	Oid			types[1] = {LSNOID};
	Datum		values[1];
	XLogRecPtr	end_lsn;
	XLogRecPtr	acknowledged;
	bool		isnull;

	ash_spi_transaction_begin();
	if (key_write(key, "SELECT end_lsn, acknowledged_lsn FROM ash_replicant.checkpoints"
				  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
				  " FOR UPDATE", 0, NULL, NULL, SPI_OK_SELECT,
				  "could not read the acknowledged position") != 1)
		ash_halt("checkpoint_identity_conflict", "the checkpoint row moved or vanished under this pipeline");
	end_lsn = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	acknowledged = DatumGetLSN(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));

	if (!isnull && !slot_created && confirmed > Max(end_lsn, acknowledged))
		ash_halt("checkpoint_behind_slot",
				 "the slot's confirmed position %X/%X is past what this database recorded applying"
				 " or acknowledging (%X/%X): the transactions in between are not delivered again",
				 LSN_FORMAT_ARGS(confirmed), LSN_FORMAT_ARGS(Max(end_lsn, acknowledged)));
	*armed = isnull || slot_created;
	if (*armed)
	{
		/*
		 * Nothing to judge by: a checkpoint of an earlier version, one the
		 * operator adopted (streaming restarts at the slot's position), or
		 * a new slot (created only while nothing was applied).  What the
		 * slot says now is the start.
		 */
		acknowledged = Max(confirmed, end_lsn);
		values[0] = LSNGetDatum(acknowledged);
		(void) key_write(key, "UPDATE ash_replicant.checkpoints SET acknowledged_lsn = $4"
						 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
						 1, types, values, SPI_OK_UPDATE, "could not record the acknowledged position");
	}
	ash_spi_transaction_end();
	/*
	 * On disk before ash_replicant_wait_for_slot returns (the worker commits
	 * asynchronously): the record is what makes a start owe this slot
	 */
	if (*armed)
		XLogFlush(XactLastCommitEnd);
	return Max(end_lsn, acknowledged);
}

void
ash_checkpoint_record_acknowledged(const AshCheckpointKey *key, XLogRecPtr lsn)
{
	/* kept: a source that waits for us has one per commit of an unmapped table */
	static SPIPlanPtr plan = NULL;

	ash_spi_transaction_begin();
	(void) key_plan_update(&plan,
						   "UPDATE ash_replicant.checkpoints SET acknowledged_lsn = $4"
						   " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
						   " AND (acknowledged_lsn IS NULL OR acknowledged_lsn OPERATOR(pg_catalog.<) $4)",
						   key, LSNOID, LSNGetDatum(lsn));
	ash_spi_transaction_end();
	/* on disk before the source hears of it (the worker commits asynchronously) */
	XLogFlush(XactLastCommitEnd);
}

bool
ash_checkpoint_snapshot_arm(const AshCheckpointKey *key, XLogRecPtr start_lsn, bytea *attempt)
{
	Oid			types[2] = {LSNOID, BYTEAOID};
	Datum		values[2];

	values[0] = LSNGetDatum(start_lsn);
	values[1] = PointerGetDatum(attempt);
	return key_write(key, "UPDATE ash_replicant.checkpoints"
					 "   SET snapshot_phase = 'copying', snapshot_lsn = $4, snapshot_attempt = $5,"
					 "       snapshot_state = NULL, updated_at = pg_catalog.now()"
					 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
					 2, types, values, SPI_OK_UPDATE, "snapshot catalog statement failed") == 1;
}

void
ash_checkpoint_set_snapshot_state(const AshCheckpointKey *key, bytea *state)
{
	Oid			types[1] = {BYTEAOID};
	Datum		values[1];

	values[0] = PointerGetDatum(state);
	(void) key_write(key, "UPDATE ash_replicant.checkpoints SET snapshot_state = $4"
					 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
					 1, types, values, SPI_OK_UPDATE, "snapshot catalog statement failed");
}

void
ash_checkpoint_snapshot_reopen(const AshCheckpointKey *key)
{
	(void) key_write(key, "UPDATE ash_replicant.checkpoints SET snapshot_phase = 'copying'"
					 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
					 0, NULL, NULL, SPI_OK_UPDATE, "snapshot catalog statement failed");
}

bool
ash_checkpoint_snapshot_complete(const AshCheckpointKey *key, XLogRecPtr start_lsn)
{
	Oid			types[2] = {LSNOID, LSNOID};
	Datum		values[2];

	values[0] = LSNGetDatum(start_lsn - 1);
	values[1] = LSNGetDatum(start_lsn);
	return key_write(key, "UPDATE ash_replicant.checkpoints"
					 "   SET snapshot_phase = 'complete', go_forward_uncopied = NULL,"
					 "       commit_lsn = GREATEST(commit_lsn, $4),"
					 "       end_lsn = GREATEST(end_lsn, $5),"
					 "       updated_at = pg_catalog.now()"
					 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
					 "   AND snapshot_phase = 'copying'",
					 2, types, values, SPI_OK_UPDATE, "snapshot catalog statement failed") == 1;
}

/* ---------------------------------------------------------------------
 * The contract manifest on the row (contract.c builds and judges it).
 * ---------------------------------------------------------------------
 */
static bool
contract_admit(const char *sink_name, const AshCheckpointKey *key, const char *drift_reason)
{
	Oid			types[1] = {JSONBOID};
	Datum		manifest;
	bool		stored;
	const char *change;

	if (!ash_contract_judge(sink_name, key->system_id, key->database, key->slot_name,
							drift_reason, &manifest, &stored, &change))
		return false;
	if (key_write(key, "UPDATE ash_replicant.checkpoints SET contract = $4,"
				  " contract_fingerprint = pg_catalog.sha256(pg_catalog.convert_to($4::pg_catalog.text, 'UTF8')),"
				  " updated_at = pg_catalog.now()"
				  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
				  1, types, &manifest, SPI_OK_UPDATE,
				  "could not record the contract manifest") != 1)
		elog(ERROR, "ash_replicant: could not record the contract manifest");
	ereport(LOG,
			(errmsg("ash_replicant event=contract.%s sink=%s%s%s", stored ? "extended" : "recorded",
					sink_name, change ? " change=" : "", change ? change : "")));
	return stored;
}

void
ash_contract_admit(const char *sink_name, const char *system_id,
				   const char *database, const char *slot_name)
{
	AshCheckpointKey key = {unconstify(char *, system_id), unconstify(char *, database),
	unconstify(char *, slot_name)};

	(void) contract_admit(sink_name, &key, "contract_incompatible");
}

bool
ash_contract_recheck(const char *sink_name, const char *system_id,
					 const char *database, const char *slot_name)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		extended;
	AshCheckpointKey key = {unconstify(char *, system_id), unconstify(char *, database),
	unconstify(char *, slot_name)};

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	extended = contract_admit(sink_name, &key, "census_drift");
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return extended;
}

/* ---------------------------------------------------------------------
 * Recovery (api_recovery.c: the operator's decisions, pipeline offline).
 * ---------------------------------------------------------------------
 */
bool
ash_checkpoint_reset(const AshCheckpointKey *key)
{
	return key_write(key, "DELETE FROM ash_replicant.checkpoints"
					 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
					 0, NULL, NULL, SPI_OK_DELETE, "could not reset the checkpoint") > 0;
}

/*
 * Adopting a commit LSN skips every source transaction committed at or
 * below it.  The restart point is the position just past it, so that the
 * source does not decode and send that commit again either: the worker
 * would skip it, but a transaction the source cannot send at all
 * (source_value_unrepresentable) must not be sent to be skipped.
 */
bool
ash_checkpoint_adopt(const AshCheckpointKey *key, XLogRecPtr commit_lsn)
{
	Oid			types[1] = {LSNOID};
	Datum		values[1];

	values[0] = LSNGetDatum(commit_lsn);
	return key_write(key, "UPDATE ash_replicant.checkpoints"
					 "   SET end_lsn = CASE WHEN commit_lsn = $4 THEN end_lsn ELSE $4 OPERATOR(pg_catalog.+) 1 END,"
					 "       acknowledged_lsn = CASE WHEN commit_lsn = $4 THEN acknowledged_lsn END,"
					 "       commit_lsn = $4, terminal_cause = NULL, terminal_class = NULL,"
					 "       terminal_at = NULL, updated_at = pg_catalog.now()"
					 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
					 "   AND (commit_lsn <> $4 OR terminal_cause IS NOT NULL)",
					 1, types, values, SPI_OK_UPDATE, "could not adopt the checkpoint") > 0;
}

bool
ash_checkpoint_create_adopted(const AshCheckpointKey *key, XLogRecPtr commit_lsn,
							  int32 timeline)
{
	Oid			types[2] = {LSNOID, INT4OID};
	Datum		values[2];

	values[0] = LSNGetDatum(commit_lsn);
	values[1] = Int32GetDatum(timeline);
	return key_write(key, "INSERT INTO ash_replicant.checkpoints"
					 " (source_system_id, source_database, slot_name, timeline_id, commit_lsn, end_lsn)"
					 " VALUES ($1, $2, $3, $5, $4, $4 OPERATOR(pg_catalog.+) 1)",
					 2, types, values, SPI_OK_INSERT, "could not create the checkpoint") > 0;
}

bool
ash_checkpoint_acknowledge_timeline(const AshCheckpointKey *key, int32 timeline)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1];

	values[0] = Int32GetDatum(timeline);
	return key_write(key, "UPDATE ash_replicant.checkpoints"
					 "   SET timeline_id = $4,"
					 "       terminal_class = CASE WHEN terminal_cause = 'source_timeline_changed'"
					 "                        THEN NULL ELSE terminal_class END,"
					 "       terminal_at = CASE WHEN terminal_cause = 'source_timeline_changed'"
					 "                     THEN NULL ELSE terminal_at END,"
					 "       terminal_cause = CASE WHEN terminal_cause = 'source_timeline_changed'"
					 "                        THEN NULL ELSE terminal_cause END,"
					 "       updated_at = pg_catalog.now()"
					 " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
					 "   AND (timeline_id <> $4 OR terminal_cause = 'source_timeline_changed')",
					 1, types, values, SPI_OK_UPDATE, "could not acknowledge the timeline") > 0;
}
