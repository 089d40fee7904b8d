/*-------------------------------------------------------------------------
 *
 * libpq_conn.c
 *	  Latch-aware, asynchronous libpq for background workers.
 *
 * NOTES
 *	  Every wait has WL_EXIT_ON_PM_DEATH (once connected, on a wait set the
 *	  connection keeps: conn_wait), and the latch path runs
 *	  CHECK_FOR_INTERRUPTS, so SIGTERM is serviced while connecting or
 *	  waiting for a result (modelled on core's libpqwalreceiver, which is
 *	  not used directly because its API cannot pass pgoutput's messages
 *	  option or other plugins' options).
 *
 *	  Sessions are set up so that text values parse identically on the
 *	  destination and read as the worker renders a value it received in
 *	  binary (ash_worker_session_settings): DateStyle ISO, IntervalStyle
 *	  postgres, extra_float_digits 3, TimeZone UTC, bytea_output hex,
 *	  lc_monetary C, and the destination database's encoding as client
 *	  encoding.
 *
 *	  No error raised here carries the conninfo or any server message text:
 *	  libpq messages contain host and user names, and server messages can
 *	  quote values.  The SQLSTATE is kept in ash_conn_last_sqlstate for the
 *	  caller to classify.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "ash_replicant.h"
#include "libpq_conn.h"
#include "spi_util.h"

char		ash_conn_last_sqlstate[6] = "";
AshConnFailure ash_conn_last_failure = ASH_CONN_OK;

const char *
ash_conn_final_failure(const char **context)
{
	switch (ash_conn_last_failure)
	{
		case ASH_CONN_INVALID_SETTINGS:
			*context = "libpq cannot use the connection settings";
			return "source_connection_invalid";
		case ASH_CONN_DATABASE_MISSING:
			*context = "the source has no database of the configured name";
			return "source_connection_invalid";
		case ASH_CONN_AUTH_FAILED:
			*context = "the source rejected the authentication of the connection";
			return "source_authentication_failed";
		case ASH_CONN_NOT_PERMITTED:
			*context = "the source's pg_hba.conf or the role does not let the connection in";
			return "privilege_replication_missing";
		case ASH_CONN_PASSWORD_UNUSED:
			*context = "the source let the connection in without the password it carries";
			return "source_password_required";
		default:
			*context = NULL;
			return NULL;
	}
}

bool
ash_conn_has_password(const char *conninfo)
{
	PQconninfoOption *opts = PQconninfoParse(conninfo, NULL);
	bool		has = false;

	if (opts == NULL)
		return false;
	for (PQconninfoOption *o = opts; o->keyword != NULL; o++)
		if (strcmp(o->keyword, "password") == 0 && o->val != NULL && o->val[0] != '\0')
			has = true;
	PQconninfoFree(opts);
	return has;
}

static void
set_sqlstate(const char *s)
{
	if (s != NULL && strlen(s) == 5)
		memcpy(ash_conn_last_sqlstate, s, 6);
	else
		ash_conn_last_sqlstate[0] = '\0';
}

/*
 * The SQLSTATE of a refused connection attempt.  libpq keeps no result for
 * a failed connection, but with PQERRORS_SQLSTATE verbosity every server
 * error it appends to the message reads "<severity>:  <SQLSTATE>", with no
 * message text: take the last one.  NULL when the server sent none (the
 * failure happened on the client side or on the way).
 */
static const char *
connect_sqlstate(const char *msg, char *buf)
{
	const char *found = NULL;
	const char *p;

	for (p = strstr(msg, ":  "); p != NULL; p = strstr(p + 1, ":  "))
	{
		const char *c = p + 3;
		int			n = 0;

		while (n < 5 && ((c[n] >= '0' && c[n] <= '9') || (c[n] >= 'A' && c[n] <= 'Z')))
			n++;
		if (n == 5 && (c[5] == '\n' || c[5] == '\0'))
			found = c;
	}
	if (found == NULL)
		return NULL;
	memcpy(buf, found, 5);
	buf[5] = '\0';
	return buf;
}

/*
 * The options of a source session: the text form the worker reads
 * (ash_text_form); for a probe, read-only statements with a timeout.
 *
 * A snapshot's reads and the replication session that exported their
 * snapshot set the source's own timeouts aside, as pg_dump does: a COPY of
 * a large table runs for as long as the destination takes to write it, and
 * the exporting walsender stays idle in its transaction meanwhile.  A
 * statement_timeout or idle_in_transaction_session_timeout of the source's
 * role or database would end them at the same point of every attempt: the
 * copy of a table that outlasts it would never complete.  (Options given at
 * connection take precedence over the role's and database's settings.)
 * Built once per process.
 */
static const char *
session_options(AshConnKind kind)
{
	static char *opts[ASH_CONN_KINDS];

	if (opts[kind] == NULL)
	{
		StringInfoData buf;
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

		initStringInfo(&buf);
		for (int i = 0; i < ASH_TEXT_FORM_SETTINGS; i++)
			appendStringInfo(&buf, "%s-c %s=%s", i ? " " : "",
							 ash_text_form[i][0], ash_text_form[i][1]);
		/*
		 * A read of a table under a policy of row-level security fails
		 * rather than seeing some of the rows (the stream carries them all).
		 */
		if (kind != ASH_CONN_REPLICATION)
			appendStringInfoString(&buf, " -c default_transaction_read_only=on -c row_security=off");

		/*
		 * Each statement outside an explicit transaction sees what was
		 * committed when it runs, after the locks it waited for: under a
		 * source's default repeatable read, a read that waited behind a
		 * table rewrite (which is not MVCC-safe) would see the table empty
		 * -- an incremental chunk taken for the table's last.  A copy
		 * asks for its isolation explicitly.
		 */
		if (kind != ASH_CONN_REPLICATION)
			appendStringInfoString(&buf, " -c default_transaction_isolation=read\\ committed");
		if (kind == ASH_CONN_PROBE)
			appendStringInfoString(&buf, " -c statement_timeout=60000");
		else
			appendStringInfoString(&buf, " -c statement_timeout=0 -c idle_in_transaction_session_timeout=0");
		opts[kind] = buf.data;
		MemoryContextSwitchTo(old);
	}
	return opts[kind];
}

/* Wait for the socket (or latch / timeout).  Returns false on timeout. */
static bool
wait_socket(PGconn *conn, int io_events, TimestampTz deadline)
{
	for (;;)
	{
		long		timeout;
		int			rc;

		timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);
		if (timeout <= 0)
			return false;
		rc = WaitLatchOrSocket(MyLatch,
							   WL_EXIT_ON_PM_DEATH | WL_LATCH_SET | WL_TIMEOUT | io_events,
							   PQsocket(conn), timeout, PG_WAIT_EXTENSION);
		if (rc & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (rc & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE))
			return true;
	}
}

/*
 * wait_socket on a connection made: with a wait set kept for the
 * connection, as the stream's (ash_stream_wait), where WaitLatchOrSocket
 * builds and closes an epoll set per call -- an incremental snapshot waits
 * for each chunk's read.  (While connecting, libpq may move to another
 * socket: wait_socket.)
 */
static bool
conn_wait(AshConn *c, int io_events, TimestampTz deadline)
{
	WaitEvent	event;

	if (c->wait_set == NULL)
	{
		c->wait_set = CreateWaitEventSet(TopMemoryContext, 3);
		AddWaitEventToSet(c->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(c->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		AddWaitEventToSet(c->wait_set, io_events, PQsocket(c->conn), NULL, NULL);
		c->wait_io = io_events;
	}
	else if (c->wait_io != io_events)
	{
		ModifyWaitEvent(c->wait_set, 2, io_events, NULL);
		c->wait_io = io_events;
	}
	for (;;)
	{
		long		timeout = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), deadline);

		if (timeout <= 0)
			return false;
		if (WaitEventSetWait(c->wait_set, timeout, &event, 1, PG_WAIT_EXTENSION) != 1)
			continue;
		if (event.events & WL_LATCH_SET)
		{
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
		if (event.events & (WL_SOCKET_READABLE | WL_SOCKET_WRITEABLE))
			return true;
	}
}

AshConn *
ash_conn_open(const char *conninfo, AshConnKind kind, const char *appname)
{
	const char *keys[8];
	const char *vals[8];
	int			i = 0;
	PGconn	   *conn;
	PostgresPollingStatusType status = PGRES_POLLING_WRITING;
	TimestampTz deadline;
	AshConn    *c;

	set_sqlstate(NULL);
	ash_conn_last_failure = ASH_CONN_OK;

	keys[i] = "dbname";
	vals[i++] = conninfo;
	if (kind == ASH_CONN_REPLICATION)
	{
		keys[i] = "replication";
		vals[i++] = "database";
	}
	/*
	 * After the conninfo, so that an application_name there does not win:
	 * the source knows the pipeline by this name (synchronous_standby_names,
	 * ash_syncrep_appname), and the operator finds its sessions by it.
	 */
	keys[i] = "application_name";
	vals[i++] = appname;
	keys[i] = "client_encoding";
	vals[i++] = GetDatabaseEncodingName();
	keys[i] = "options";
	vals[i++] = session_options(kind);
	keys[i] = NULL;
	vals[i] = NULL;

	conn = PQconnectStartParams(keys, vals, true);
	if (conn == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("ash_replicant: could not allocate a source connection")));
	if (PQstatus(conn) == CONNECTION_BAD)
	{
		/*
		 * libpq fails at once on settings it cannot use ("invalid port
		 * number", "invalid sslmode value", ...), and also when a first
		 * connect() is refused synchronously: only the former is fixed by
		 * nothing but the operator.
		 */
		bool		invalid = strncmp(PQerrorMessage(conn), "invalid ", 8) == 0;

		PQfinish(conn);
		ash_conn_last_failure = invalid ? ASH_CONN_INVALID_SETTINGS : ASH_CONN_UNREACHABLE;
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 invalid ?
				 errmsg("ash_replicant: source connection rejected: invalid connection settings") :
				 errmsg("ash_replicant: could not connect to the source: unreachable")));
	}
	/* server errors while connecting: severity and SQLSTATE only */
	PQsetErrorVerbosity(conn, PQERRORS_SQLSTATE);

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ash_connect_timeout_ms);
	while (status != PGRES_POLLING_OK && status != PGRES_POLLING_FAILED)
	{
		int			events = (status == PGRES_POLLING_READING) ?
			WL_SOCKET_READABLE : WL_SOCKET_WRITEABLE;

		if (!wait_socket(conn, events, deadline))
		{
			PQfinish(conn);
			ash_conn_last_failure = ASH_CONN_TIMEOUT;
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("ash_replicant: source connection timed out")));
		}
		status = PQconnectPoll(conn);
	}

	if (PQstatus(conn) != CONNECTION_OK)
	{
		/*
		 * Tell the common classes apart without echoing the message: by the
		 * server's SQLSTATE when it refused us, else by libpq's own text
		 * (client-side failures such as a missing password carry none).
		 */
		const char *msg = PQerrorMessage(conn);
		char		buf[6];
		const char *sqlstate = connect_sqlstate(msg, buf);
		const char *cls = "unreachable";

		ash_conn_last_failure = ASH_CONN_UNREACHABLE;
		set_sqlstate(sqlstate);
		if (sqlstate == NULL)
		{
			if (strstr(msg, "password") != NULL || strstr(msg, "authentication") != NULL)
			{
				cls = "authentication failed";
				ash_conn_last_failure = ASH_CONN_AUTH_FAILED;
			}
		}
		else if (strcmp(sqlstate, "28P01") == 0)
		{
			cls = "authentication failed";
			ash_conn_last_failure = ASH_CONN_AUTH_FAILED;
		}
		else if (strcmp(sqlstate, "28000") == 0)
		{
			cls = "not permitted by the source's pg_hba.conf or role";
			ash_conn_last_failure = ASH_CONN_NOT_PERMITTED;
		}
		else if (strcmp(sqlstate, "3D000") == 0)
		{
			cls = "database does not exist";
			ash_conn_last_failure = ASH_CONN_DATABASE_MISSING;
		}
		else if (strcmp(sqlstate, "42501") == 0)
			cls = "insufficient privilege";
		else if (strcmp(sqlstate, "53300") == 0)
			cls = "too many connections";
		else if (strcmp(sqlstate, "57P03") == 0)
			cls = "the source is starting up or shutting down";
		else
			cls = "refused by the source";
		PQfinish(conn);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: could not connect to the source: %s", cls)));
	}

	if (ash_conn_has_password(conninfo) && !PQconnectionUsedPassword(conn))
	{
		PQfinish(conn);
		ash_conn_last_failure = ASH_CONN_PASSWORD_UNUSED;
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: source connection refused: the source did not ask for its password")));
	}

	c = palloc0(sizeof(AshConn));
	c->conn = conn;
	c->kind = kind;
	c->server_version = PQserverVersion(conn);
	return c;
}

/*
 * The statements ash_conn_keep_plans keeps, by query text (a query built
 * per table is prepared per table: ASH_CONN_PLANS_MAX bounds them, and
 * further texts go unprepared).
 */
#define ASH_CONN_PLANS_MAX 64

typedef struct AshConnPlans
{
	int			n;
	char	   *query[ASH_CONN_PLANS_MAX];
	int			nparams[ASH_CONN_PLANS_MAX];
} AshConnPlans;

void
ash_conn_keep_plans(AshConn *c)
{
	/* planned once, not again at each of a statement's first executions */
	PQclear(ash_conn_exec(c, "SET plan_cache_mode = force_generic_plan", false));
	c->plans = MemoryContextAllocZero(GetMemoryChunkContext(c), sizeof(AshConnPlans));
}

static void
free_plans(AshConnPlans *plans)
{
	if (plans == NULL)
		return;
	for (int i = 0; i < plans->n; i++)
		pfree(plans->query[i]);
	pfree(plans);
}

void
ash_conn_close(AshConn *c)
{
	if (c == NULL)
		return;
	free_plans(c->plans);
	c->plans = NULL;
	if (c->wait_set != NULL)
		FreeWaitEventSet(c->wait_set);
	c->wait_set = NULL;
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	pfree(c);
}

ErrorData *
ash_conn_failure_caught(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	if (edata->sqlerrcode != ERRCODE_CONNECTION_FAILURE)
		ReThrowError(edata);
	return edata;
}

void
ash_conn_report_result(PGresult *res, const char *what)
{
	const char *sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	set_sqlstate(sqlstate);
	if (res)
		PQclear(res);
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("ash_replicant: source command failed: %s (source sqlstate %s)",
					what, ash_conn_last_sqlstate[0] ? ash_conn_last_sqlstate : "none")));
	pg_unreachable();
}

/*
 * Collect the results of a sent command, waiting at most timeout_ms for
 * them; returns the last one.  With idle non-NULL, a wait that ends before
 * any result arrived sets *idle and returns NULL: the caller may wait on.
 */
static PGresult *
collect_result_idle(AshConn *c, const char *what, int timeout_ms, bool *idle)
{
	PGresult   *last = NULL;
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   timeout_ms);

	for (;;)
	{
		PGresult   *res;

		/*
		 * What the socket already holds needs no wait (a wait event set
		 * made and closed per read of a large result): read first, wait
		 * only when that was not enough.
		 */
		while (PQisBusy(c->conn))
		{
			if (PQconsumeInput(c->conn) == 0)
			{
				if (last)
					PQclear(last);
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("ash_replicant: source connection lost during %s", what)));
			}
			if (!PQisBusy(c->conn))
				break;
			if (!conn_wait(c, WL_SOCKET_READABLE, deadline))
			{
				if (idle != NULL && last == NULL)
				{
					*idle = true;
					return NULL;
				}
				if (last)
					PQclear(last);
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("ash_replicant: source command timed out: %s", what)));
			}
		}
		res = PQgetResult(c->conn);
		if (res == NULL)
			break;
		if (last)
			PQclear(last);
		last = res;
		/* COPY states end the command from the client's point of view */
		if (PQresultStatus(res) == PGRES_COPY_BOTH ||
			PQresultStatus(res) == PGRES_COPY_OUT ||
			PQresultStatus(res) == PGRES_COPY_IN)
			break;
		if (PQstatus(c->conn) == CONNECTION_BAD)
			break;
	}
	return last;
}

static PGresult *
collect_result(AshConn *c, const char *what, int timeout_ms)
{
	return collect_result_idle(c, what, timeout_ms, NULL);
}

static PGresult *
finish_exec(AshConn *c, PGresult *res, const char *what, bool allow_error)
{
	ExecStatusType st;

	if (res == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: source connection lost during %s", what)));
	st = PQresultStatus(res);
	if (st == PGRES_FATAL_ERROR || st == PGRES_BAD_RESPONSE || st == PGRES_NONFATAL_ERROR)
	{
		set_sqlstate(PQresultErrorField(res, PG_DIAG_SQLSTATE));
		if (!allow_error)
			ash_conn_report_result(res, what);
	}
	return res;
}

PGresult *
ash_conn_exec(AshConn *c, const char *query, bool allow_error)
{
	return ash_conn_exec_timeout(c, query, allow_error, ash_connect_timeout_ms);
}

PGresult *
ash_conn_exec_timeout(AshConn *c, const char *query, bool allow_error, int timeout_ms)
{
	set_sqlstate(NULL);
	if (!PQsendQuery(c->conn, query))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: could not send a command to the source")));
	return finish_exec(c, collect_result(c, "command", timeout_ms), "command", allow_error);
}

PGresult *
ash_conn_exec_waiting(AshConn *c, const char *query, bool (*waits) (AshConn *c, void *arg),
					  void *arg)
{
	int			slice = Min(ASH_CONN_WAIT_ASK_MS, ash_connect_timeout_ms);
	long		idle_ms = 0;

	set_sqlstate(NULL);
	if (!PQsendQuery(c->conn, query))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: could not send a command to the source")));
	for (;;)
	{
		bool		idle = false;
		PGresult   *res = collect_result_idle(c, "command", slice, &idle);

		if (!idle)
			return finish_exec(c, res, "command", false);
		/* a wait the source says it makes does not count */
		if (waits(c, arg))
			idle_ms = 0;
		else if ((idle_ms += slice) >= ash_connect_timeout_ms)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("ash_replicant: source command timed out: command")));
	}
}

void
ash_conn_send_params(AshConn *c, const char *query, int nparams, const char *const *values,
					 bool binary)
{
	set_sqlstate(NULL);
	if (!PQsendQueryParams(c->conn, query, nparams, NULL, values, NULL, NULL, binary ? 1 : 0))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: could not send a probe to the source")));
}

/*
 * Prepare query as the named statement name (its $n parameters in text,
 * their types inferred by the source), waiting for the source's answer;
 * returned as ash_conn_get_result does.
 */
PGresult *
ash_conn_prepare(AshConn *c, const char *name, const char *query, int nparams,
				 bool allow_error)
{
	set_sqlstate(NULL);
	if (!PQsendPrepare(c->conn, name, query, nparams, NULL))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: could not send a probe to the source")));
	return ash_conn_get_result(c, allow_error);
}

/* Send the execution of a prepared statement, as ash_conn_send_params. */
void
ash_conn_send_prepared(AshConn *c, const char *name, int nparams, const char *const *values,
					   bool binary)
{
	set_sqlstate(NULL);
	if (!PQsendQueryPrepared(c->conn, name, nparams, values, NULL, NULL, binary ? 1 : 0))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: could not send a probe to the source")));
}

/* Ask the source to cancel the command running on c (its result follows). */
void
ash_conn_cancel(AshConn *c)
{
	PGcancel   *cancel = PQgetCancel(c->conn);
	char		errbuf[256];

	if (cancel == NULL)
		return;
	(void) PQcancel(cancel, errbuf, sizeof(errbuf));
	PQfreeCancel(cancel);
}

/* Is a command sent on c still unanswered?  Asked without waiting. */
bool
ash_conn_busy(AshConn *c)
{
	if (PQconsumeInput(c->conn) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: source connection lost during probe")));
	return PQisBusy(c->conn);
}

PGresult *
ash_conn_get_result(AshConn *c, bool allow_error)
{
	return finish_exec(c, collect_result(c, "probe", ash_connect_timeout_ms), "probe",
					   allow_error);
}

/*
 * On a connection that keeps plans: the name of query's statement, prepared
 * now if it was not yet, in name; NULL when it goes unprepared, or when
 * preparing it failed (and allow_error): then *failed is that result.
 */
static const char *
kept_statement(AshConn *c, const char *query, int nparams, bool allow_error,
			   char *name, PGresult **failed)
{
	AshConnPlans *plans = c->plans;
	int			i;

	*failed = NULL;
	if (plans == NULL)
		return NULL;
	for (i = 0; i < plans->n; i++)
		if (plans->nparams[i] == nparams && strcmp(plans->query[i], query) == 0)
			break;
	if (i == ASH_CONN_PLANS_MAX)
		return NULL;
	snprintf(name, NAMEDATALEN, "ash_replicant_%d", i);
	if (i == plans->n)
	{
		PGresult   *res = ash_conn_prepare(c, name, query, nparams, allow_error);

		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			*failed = res;
			return NULL;
		}
		PQclear(res);
		plans->query[i] = MemoryContextStrdup(GetMemoryChunkContext(plans), query);
		plans->nparams[i] = nparams;
		plans->n++;
	}
	return name;
}

static PGresult *
exec_params(AshConn *c, const char *query, int nparams, const char *const *values,
			bool allow_error, int result_format)
{
	char		name[NAMEDATALEN];
	PGresult   *failed;
	const char *stmt = kept_statement(c, query, nparams, allow_error, name, &failed);

	if (failed != NULL)
		return failed;
	if (stmt != NULL)
		ash_conn_send_prepared(c, stmt, nparams, values, result_format == 1);
	else
		ash_conn_send_params(c, query, nparams, values, result_format == 1);
	return ash_conn_get_result(c, allow_error);
}

PGresult *
ash_conn_exec_params(AshConn *c, const char *query, int nparams,
					 const char *const *values, bool allow_error)
{
	return exec_params(c, query, nparams, values, allow_error, 0);
}

PGresult *
ash_conn_exec_params_binary(AshConn *c, const char *query, int nparams,
							const char *const *values, bool allow_error)
{
	return exec_params(c, query, nparams, values, allow_error, 1);
}

char *
ash_conn_quote_literal(AshConn *c, const char *s)
{
	char	   *q = PQescapeLiteral(c->conn, s, strlen(s));
	char	   *r;

	if (q == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ash_replicant: could not quote a setting for the source")));
	r = pstrdup(q);
	PQfreemem(q);
	return r;
}

char *
ash_conn_quote_repl_literal(const char *s)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '\'');
	for (; *s; s++)
	{
		if (*s == '\'')
			appendStringInfoChar(&buf, '\'');
		appendStringInfoChar(&buf, *s);
	}
	appendStringInfoChar(&buf, '\'');
	return buf.data;
}

char *
ash_conn_quote_ident(AshConn *c, const char *s)
{
	char	   *q = PQescapeIdentifier(c->conn, s, strlen(s));
	char	   *r;

	if (q == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ash_replicant: could not quote a name for the source")));
	r = pstrdup(q);
	PQfreemem(q);
	return r;
}

int
ash_conn_copy_row(AshConn *c, char **buf, long idle_ms)
{
	bool		read_first = true;

	for (;;)
	{
		int			n = PQgetCopyData(c->conn, buf, 1);

		if (n > 0)
			return n;
		if (n == 0)
		{
			TimestampTz deadline;

			/*
			 * What the socket already holds needs no wait: a copier slower
			 * than its source finds data there nearly every time, and a
			 * wait (a wait event set made and closed) would cost more than
			 * the read.
			 */
			if (read_first)
			{
				read_first = false;
				if (PQconsumeInput(c->conn) == 0)
					ereport(ERROR,
							(errcode(ERRCODE_CONNECTION_FAILURE),
							 errmsg("ash_replicant: source connection lost during a copy")));
				continue;
			}
			deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), idle_ms);
			if (!conn_wait(c, WL_SOCKET_READABLE, deadline))
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("ash_replicant: the source sent no copy data within receive_timeout")));
			if (PQconsumeInput(c->conn) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_CONNECTION_FAILURE),
						 errmsg("ash_replicant: source connection lost during a copy")));
			continue;
		}
		if (n == -1)
		{
			/* end of the data: the command's own result says how it ended */
			PQclear(finish_exec(c, collect_result(c, "copy", ash_connect_timeout_ms), "copy",
								false));
			return 0;
		}
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: source connection lost during a copy")));
	}
}
