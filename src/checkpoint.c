/*-------------------------------------------------------------------------
 *
 * checkpoint.c
 *	  Checkpoint binding and halt tombstones.
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

#include "checkpoint.h"
#include "contract.h"
#include "errors.h"

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
		"SELECT source_system_id, source_database, timeline_id, commit_lsn, end_lsn, decoder"
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

		if (strcmp(sysid, key->system_id) != 0 || strcmp(db, key->database) != 0)
			conflict(sink_name, "checkpoint_identity_conflict",
					 "the slot name is bound to another source identity");
		found = true;
		tli = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
		commit_lsn = DatumGetLSN(SPI_getbinval(tup, desc, 4, &isnull));
		out->commit_lsn = commit_lsn;
		out->end_lsn = DatumGetLSN(SPI_getbinval(tup, desc, 5, &isnull));
		rec_decoder = SPI_getvalue(tup, desc, 6);
		if ((uint32) tli != timeline)
			conflict(sink_name, "source_timeline_changed",
					 "the source's timeline differs from the recorded one");
		if (commit_lsn > source_flush)
			conflict(sink_name, "checkpoint_ahead_of_source",
					 "the watermark is beyond the source's WAL");
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

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(cxt);
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
