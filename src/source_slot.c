/*-------------------------------------------------------------------------
 *
 * source_slot.c
 *	  The pipeline's replication connection to the source: who it is, and
 *	  its logical slot.
 *
 * NOTES
 *	  IDENTIFY_SYSTEM and the slot's lookup and creation, on the
 *	  replication connection a session streams on.  Everything that would
 *	  let the mirror skip or mix changes halts with its reason: another
 *	  source, a slot gone under a watermark, a slot of another plugin or
 *	  database, WAL the source removed.  Nothing here is printed but reason
 *	  codes and structural context.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "libpq-fe.h"
#include "utils/fmgrprotos.h"
#include "utils/pg_lsn.h"
#include "utils/timestamp.h"

#include "decoder.h"
#include "errors.h"
#include "shmem.h"
#include "source_slot.h"

void
ash_source_identify(AshConn *conn, const AshPipelineConfig *cfg, uint32 *timeline,
					XLogRecPtr *xlogpos)
{
	PGresult   *res = ash_conn_exec(conn, "IDENTIFY_SYSTEM", false);
	uint32		hi,
				lo;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1 || PQnfields(res) < 4)
		ash_conn_report_result(res, "IDENTIFY_SYSTEM");

	if (strcmp(PQgetvalue(res, 0, 0), cfg->source_system_identifier) != 0 ||
		PQgetisnull(res, 0, 3) ||
		strcmp(PQgetvalue(res, 0, 3), cfg->source_database) != 0)
	{
		PQclear(res);
		ash_halt("source_identity_mismatch", "the source is not the configured system and database");
	}
	*timeline = (uint32) strtoul(PQgetvalue(res, 0, 1), NULL, 10);
	if (sscanf(PQgetvalue(res, 0, 2), "%X/%X", &hi, &lo) != 2)
	{
		PQclear(res);
		ash_halt("protocol_violation", "IDENTIFY_SYSTEM position");
	}
	*xlogpos = ((uint64) hi << 32) | lo;
	PQclear(res);

	/* pgoutput's floor; wal2json's: the slot commands of 10 */
	if (conn->server_version < (strcmp(cfg->decoder, "pgoutput") == 0 ? 120000 : 100000))
		ash_halt("source_release_unsupported", "the decoder needs a newer source release");
	if (cfg->failover && conn->server_version < 170000)
		ash_halt("decoder_capability_unsupported",
				 "failover slots need a source of PostgreSQL 17 or later");

	/*
	 * A standby before 16 decodes nothing: a connection pointed at one (by
	 * mistake, or ahead of a promotion) is told so, rather than finding no
	 * slot there (source_slot_missing, whose way out is a re-seed) or being
	 * refused START_REPLICATION for ever.
	 */
	if (conn->server_version < 160000)
	{
		res = ash_conn_exec(conn, "SELECT pg_catalog.pg_is_in_recovery()", false);
		if (PQntuples(res) == 1 && strcmp(PQgetvalue(res, 0, 0), "t") == 0)
		{
			PQclear(res);
			ash_halt("source_not_logical",
					 "the source is a standby in recovery: before PostgreSQL 16 only a primary decodes");
		}
		PQclear(res);
	}
}

/*
 * The source creates a logical slot only once every transaction that was
 * running when it began has ended: as long as a transaction left open there
 * lasts.  That wait is bounded by an hour, not by connect_timeout: a shorter
 * bound ends it at the same point every time, and while transactions longer
 * than it keep overlapping no attempt would ever get its slot.  Status says
 * what the worker waits for (source_slot_wait, api_status.c).
 */
#define SLOT_CREATE_TIMEOUT_MS (60 * 60 * 1000)

PGresult *
ash_source_create_slot(AshConn *conn, const char *command, AshPipelineSlot *slot)
{
	PGresult   *volatile res = NULL;

	if (slot == NULL)
		return ash_conn_exec_timeout(conn, command, true, SLOT_CREATE_TIMEOUT_MS);
	SpinLockAcquire(&slot->mutex);
	slot->stats.slot_wait_since = GetCurrentTimestamp();
	SpinLockRelease(&slot->mutex);
	PG_TRY();
	{
		res = ash_conn_exec_timeout(conn, command, true, SLOT_CREATE_TIMEOUT_MS);
	}
	PG_FINALLY();
	{
		SpinLockAcquire(&slot->mutex);
		slot->stats.slot_wait_since = 0;
		SpinLockRelease(&slot->mutex);
	}
	PG_END_TRY();
	return res;
}

/* What judge_slot_refusal found of the last refusal (NULL: nothing) */
static const char *refusal_reason = NULL;
static const char *refusal_context = NULL;

/*
 * The source refused to create a logical slot for a prerequisite it lacks
 * (55000): which one, from its settings rather than the error's text (which
 * is never printed).  wal_level not logical is source_not_logical;
 * max_replication_slots 0 is source_slots_disabled (all of them in use is
 * 53400, source_slot_limit, retried).  Both take a source restart: waiting
 * cannot heal them.  Neither (or the settings unreadable): NULL.
 */
static void
judge_slot_refusal(AshConn *conn)
{
	PGresult   *res;

	refusal_reason = NULL;
	refusal_context = NULL;
	res = ash_conn_exec(conn, "SELECT pg_catalog.current_setting('wal_level') <> 'logical',"
						" pg_catalog.current_setting('max_replication_slots')::pg_catalog.int4 = 0",
						true);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 && PQnfields(res) == 2 &&
		!PQgetisnull(res, 0, 0) && !PQgetisnull(res, 0, 1))
	{
		if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
		{
			refusal_reason = "source_not_logical";
			refusal_context = "the source cannot create a logical slot (wal_level is not logical)";
		}
		else if (strcmp(PQgetvalue(res, 0, 1), "t") == 0)
		{
			refusal_reason = "source_slots_disabled";
			refusal_context = "the source cannot create a replication slot (max_replication_slots is 0)";
		}
	}
	PQclear(res);
}

const char *
ash_source_slot_refusal(const char **context)
{
	*context = refusal_context;
	return refusal_reason;
}

void
ash_source_ensure_slot(AshConn *conn, const AshPipelineConfig *cfg, const char *must_exist,
					   bool export, bool *created, AshSlotStart *start,
					   AshPipelineSlot *slot)
{
	XLogRecPtr *position = &start->slot_position;
	const AshDecoderInfo *dec = ash_decoder_info(cfg->decoder);
	StringInfoData q;
	PGresult   *res;

	if (dec == NULL || !dec->built)
		ash_halt("decoder_capability_unsupported", "the decoder is not built into this version");
	refusal_reason = NULL;		/* judged again at a refusal of this session */

	initStringInfo(&q);
	appendStringInfo(&q,
					 "SELECT plugin, slot_type, database, %s, confirmed_flush_lsn, active"
					 " FROM pg_catalog.pg_replication_slots"
					 " WHERE slot_name = %s",
					 conn->server_version >= 130000 ? "wal_status" : "NULL::text",
					 ash_conn_quote_literal(conn, cfg->slot_name));
	res = ash_conn_exec(conn, q.data, false);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "slot lookup");

	if (PQntuples(res) == 0)
	{
		PQclear(res);
		/* recreating it would skip what was committed since */
		if (must_exist != NULL)
			ash_halt("source_slot_missing", "the slot is gone from the source while %s",
					 must_exist);
		resetStringInfo(&q);
		appendStringInfo(&q, "CREATE_REPLICATION_SLOT %s LOGICAL %s %s",
						 ash_conn_quote_ident(conn, cfg->slot_name),
						 ash_conn_quote_ident(conn, dec->plugin),
						 conn->server_version >= 150000 ?
						 (export ? "(SNAPSHOT 'export'" : "(SNAPSHOT 'nothing'") :
						 (export ? "EXPORT_SNAPSHOT" : "NOEXPORT_SNAPSHOT"));
		/* failover: checked >= 17 by ash_source_identify */
		if (conn->server_version >= 150000)
			appendStringInfoString(&q, cfg->failover ? ", FAILOVER)" : ")");
		res = ash_source_create_slot(conn, q.data, slot);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			const char *sqlstate = PQresultErrorField(res, PG_DIAG_SQLSTATE);

			if (sqlstate != NULL && strcmp(sqlstate, "55000") == 0)
			{
				PQclear(res);
				/* handle_error halts with what it finds, and the SQLSTATE */
				judge_slot_refusal(conn);
				strlcpy(ash_conn_last_sqlstate, "55000", sizeof(ash_conn_last_sqlstate));
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("ash_replicant: source command failed: CREATE_REPLICATION_SLOT (source sqlstate 55000)")));
			}
			ash_conn_report_result(res, "CREATE_REPLICATION_SLOT");
		}
		*created = true;
		*position = PQntuples(res) == 1 && !PQgetisnull(res, 0, 1) ?
			DatumGetLSN(DirectFunctionCall1(pg_lsn_in, CStringGetDatum(PQgetvalue(res, 0, 1)))) :
			InvalidXLogRecPtr;
		if (export)
		{
			if (PQntuples(res) != 1 || PQnfields(res) < 3 || PQgetisnull(res, 0, 2) ||
				XLogRecPtrIsInvalid(*position))
			{
				PQclear(res);
				ash_halt("protocol_violation", "CREATE_REPLICATION_SLOT exported no snapshot");
			}
			start->exported = pstrdup(PQgetvalue(res, 0, 2));
			start->exported_lsn = *position;
		}
		PQclear(res);
		ereport(LOG,
				(errmsg("ash_replicant event=slot.created sink=%s", cfg->sink_name)));
		return;
	}

	if (strcmp(PQgetvalue(res, 0, 1), "logical") != 0 ||
		strcmp(PQgetvalue(res, 0, 0), dec->plugin) != 0)
	{
		PQclear(res);
		ash_halt("decoder_contract_incompatible", "the slot exists with another type or plugin");
	}
	if (strcmp(PQgetvalue(res, 0, 2), cfg->source_database) != 0)
	{
		PQclear(res);
		ash_halt("checkpoint_identity_conflict", "the slot belongs to another source database");
	}
	if (!PQgetisnull(res, 0, 3) && strcmp(PQgetvalue(res, 0, 3), "lost") == 0)
	{
		PQclear(res);
		ash_halt("retention_lost", "the slot's WAL was removed");
	}
	*created = false;
	start->slot_active = strcmp(PQgetvalue(res, 0, 5), "t") == 0;
	*position = PQgetisnull(res, 0, 4) ? InvalidXLogRecPtr :
		DatumGetLSN(DirectFunctionCall1(pg_lsn_in, CStringGetDatum(PQgetvalue(res, 0, 4))));
	PQclear(res);
}
