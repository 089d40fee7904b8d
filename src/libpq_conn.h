/*-------------------------------------------------------------------------
 *
 * libpq_conn.h
 *	  Latch-aware, asynchronous libpq for background workers.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_LIBPQ_CONN_H
#define ASH_LIBPQ_CONN_H

#include "libpq-fe.h"

typedef enum AshConnKind
{
	ASH_CONN_REPLICATION,		/* replication=database, streaming */
	ASH_CONN_PROBE,				/* ordinary, default_transaction_read_only */
	ASH_CONN_DATA				/* a probe whose statements take as long as
								 * they need: a snapshot's reads */
} AshConnKind;

#define ASH_CONN_KINDS 3

typedef struct AshConn
{
	PGconn	   *conn;
	AshConnKind kind;
	int			server_version;
	struct WaitEventSet *wait_set;	/* once connected: latch, postmaster, socket */
	int			wait_io;		/* the socket event's current flags */
	struct AshConnPlans *plans; /* ash_conn_keep_plans: statements kept */
} AshConn;

/*
 * Errors from the source are reported without any value: the libpq message
 * can carry host names, user names or row values, so callers get a class
 * (and the server's SQLSTATE when it sent one) instead.
 */
typedef enum AshConnFailure
{
	ASH_CONN_OK = 0,
	ASH_CONN_UNREACHABLE,		/* could not connect / connection lost */
	ASH_CONN_TIMEOUT,
	ASH_CONN_COMMAND_FAILED,	/* server returned an error; see sqlstate */
	ASH_CONN_INVALID_SETTINGS,	/* libpq cannot use the connection string */
	ASH_CONN_AUTH_FAILED,		/* the source rejected the credentials */
	ASH_CONN_DATABASE_MISSING,	/* the source has no such database (3D000) */
	ASH_CONN_NOT_PERMITTED,		/* pg_hba.conf or the role refused (28000) */
	ASH_CONN_PASSWORD_UNUSED	/* the source did not ask for the password
								 * the connection string carries */
} AshConnFailure;

/*
 * Set by every ash_conn_* call that fails; cleared by ash_conn_open.  A
 * connection the source refused sets the server's SQLSTATE too.
 */
extern char ash_conn_last_sqlstate[6];

/*
 * Does conninfo carry a (non-empty) password?  A connection string set by
 * a role without superuser must (ash_replicant_configure_pipeline), and a
 * connection whose string carries one is refused unless the source asked
 * for it (PQconnectionUsedPassword): else it would run under the
 * destination server's own identity -- trust or peer for its OS user, its
 * ~/.pgpass, its client certificate -- which such a role must not borrow
 * (docs/reasons.md#source_password_required).
 */
extern bool ash_conn_has_password(const char *conninfo);

/* Why the last ash_conn_open failed (ASH_CONN_OK after a success). */
extern AshConnFailure ash_conn_last_failure;

/*
 * When the last ash_conn_open failed for a reason that waiting cannot fix
 * (settings libpq cannot use, no such database, rejected credentials, a
 * connection pg_hba.conf or the role does not let in): its reason code,
 * with a value-free context in *context.  NULL otherwise.
 */
extern const char *ash_conn_final_failure(const char **context);

/*
 * Connect asynchronously, waiting on the latch so that SIGTERM is serviced.
 * On failure raises ERROR with ERRCODE_CONNECTION_FAILURE and a value-free
 * message.  The conninfo is never printed.  appname is the session's
 * application_name, whatever the conninfo says.
 */
extern AshConn *ash_conn_open(const char *conninfo, AshConnKind kind,
							  const char *appname);
extern void ash_conn_close(AshConn *c);

/*
 * For a probe connection kept open between uses: from now on every
 * ash_conn_exec_params(_binary) of a query text prepares it on the source
 * once and executes the statement after, planned once (generic plans).
 * The source's catalog queries take milliseconds to plan and well under
 * one to run; a connection used once gains nothing from it.
 */
extern void ash_conn_keep_plans(AshConn *c);

/*
 * Run one command (simple query protocol) and return its last result;
 * raises (value-free) when the command fails and !allow_error.  The caller
 * PQclear()s the result.
 */
extern PGresult *ash_conn_exec(AshConn *c, const char *query, bool allow_error);

/* Same, waiting up to timeout_ms (not connect_timeout) for the result. */
extern PGresult *ash_conn_exec_timeout(AshConn *c, const char *query, bool allow_error,
									   int timeout_ms);

/*
 * Same as ash_conn_exec (raising when the command fails), for a command the
 * source may make wait for a lock: every ASH_CONN_WAIT_ASK_MS without an
 * answer (or connect_timeout, if shorter) waits(c, arg) is asked whether the
 * source makes it wait; such time does not count towards connect_timeout.
 */
#define ASH_CONN_WAIT_ASK_MS 2000
extern PGresult *ash_conn_exec_waiting(AshConn *c, const char *query,
									   bool (*waits) (AshConn *c, void *arg), void *arg);

/* Same with out-of-line $n text parameters (probe connections only). */
extern PGresult *ash_conn_exec_params(AshConn *c, const char *query, int nparams,
									  const char *const *values, bool allow_error);

/* Same, the result's values in binary (each type's send format). */
extern PGresult *ash_conn_exec_params_binary(AshConn *c, const char *query, int nparams,
											 const char *const *values, bool allow_error);

/*
 * The same in two halves: send the command and return at once, then
 * collect its result (raising as above).  Nothing else may be sent on the
 * connection in between; the source runs the command meanwhile.
 */
extern void ash_conn_send_params(AshConn *c, const char *query, int nparams,
								 const char *const *values, bool binary);
extern PGresult *ash_conn_get_result(AshConn *c, bool allow_error);
extern bool ash_conn_busy(AshConn *c);
extern void ash_conn_cancel(AshConn *c);

/*
 * A statement prepared once and executed many times (probe connections
 * only): prepare waits for the source's answer; send_prepared is sent like
 * ash_conn_send_params, its result collected by ash_conn_get_result.
 */
extern PGresult *ash_conn_prepare(AshConn *c, const char *name, const char *query,
								  int nparams, bool allow_error);
extern void ash_conn_send_prepared(AshConn *c, const char *name, int nparams,
								   const char *const *values, bool binary);

/*
 * The next row of a COPY ... TO STDOUT that ash_conn_exec started: its
 * length, with *buf set (free it with PQfreemem); 0 once the data ended
 * and the command completed.  Raises (value-free) when the command fails,
 * the connection is lost or no data arrives for idle_ms.
 */
extern int	ash_conn_copy_row(AshConn *c, char **buf, long idle_ms);

/* Raise the value-free error for a failed command result. */
extern void ash_conn_report_result(PGresult *res, const char *what) pg_attribute_noreturn();

/*
 * In a PG_CATCH block, after the caller's own cleanup: the error raised,
 * copied into cxt (the current context when it returns) with the error
 * state flushed, when it is a connection failure -- the source unreachable,
 * gone, or refusing us; any other error is raised again.
 */
extern ErrorData *ash_conn_failure_caught(MemoryContext cxt);

/* Quote a string literal / identifier for SQL on c. */
extern char *ash_conn_quote_literal(AshConn *c, const char *s);
extern char *ash_conn_quote_ident(AshConn *c, const char *s);

/*
 * Quote a string literal for a replication command (START_REPLICATION's
 * plugin options): '...' with quotes doubled.  Its grammar has no E'...'
 * form, which PQescapeLiteral gives a string holding a backslash.
 */
extern char *ash_conn_quote_repl_literal(const char *s);

#endif							/* ASH_LIBPQ_CONN_H */
