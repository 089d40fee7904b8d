/*-------------------------------------------------------------------------
 *
 * syncrep.c
 *	  Whether the source waits for this pipeline's acknowledgements.
 *
 *	  The pipeline acknowledges a durably applied commit at the next quiet
 *	  moment of the stream.  Each acknowledgement costs a WAL flush here,
 *	  so when nobody waits for it the worker flushes at most every
 *	  ACK_FLUSH_INTERVAL_MS (pipeline.c) -- the source only learns a little
 *	  later that it may release WAL.  A source whose
 *	  synchronous_standby_names lists us holds every commit until we
 *	  acknowledge it, so then each one is acknowledged at once.  The
 *	  setting is read at every session's start on the replication
 *	  connection, again at every census on its probe connection, and on a
 *	  probe connection of its own when the stream suggests that the source
 *	  waits for us although the last reading said it does not.
 *
 *	  Nothing read here is logged: the setting names other standbys.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "syncrep.h"

/*
 * Evidence that the source waits for us although its setting did not say
 * so when last read (it was changed since, or names us in a way we do not
 * read): SYNCREP_REPLIES deferred acknowledgements in a row, each after a
 * stream silent for the whole deferral, each answered by a new
 * transaction within SYNCREP_REPLY_MS -- the source's sessions were held
 * until we acknowledged.  A source that does not wait for us answers so
 * by chance only rarely (a trickle of 50 transactions per second: about
 * 0.15 per acknowledgement, eight in a row once in months); a wrong guess
 * costs a flush per commit until the next census reads the setting again.
 */
#define SYNCREP_REPLIES 8

/*
 * The first such answer has the setting read again at once (a probe
 * connection, ash_syncrep_reread), so that a pipeline listed after its
 * session began holds a commit or two, each up to the deferral, not
 * SYNCREP_REPLIES of them.  At most every SYNCREP_REREAD_MS: a source that
 * does not wait for us answers so now and then by chance, and each reading
 * is a connection (the readings at a session's start and at each census
 * do not count: the setting may have changed since).  The replies still
 * decide where the reading cannot.
 */
#define SYNCREP_REREAD_MS 30000

static char source_appname[NAMEDATALEN];
static char syncrep_sink[NAMEDATALEN];
static bool source_waits = false;
static bool known = false;
static int	replies_in_a_row = 0;
static TimestampTz last_reread = 0;
static bool reread_wanted = false;

/*
 * One standby name of the setting, as the source's own parser reads it:
 * a double-quoted name ("" for a quote) or a run of other characters.
 * Keywords (ANY, FIRST) and numbers come out as names too: a false match
 * only makes acknowledgements prompt.
 */
static const char *
next_name(const char *p, char *buf, size_t bufsize, bool *found)
{
	size_t		n = 0;

	*found = false;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' ||
		   *p == '\v' || *p == ',' || *p == '(' || *p == ')')
		p++;
	if (*p == '\0')
		return p;
	*found = true;
	if (*p == '"')
	{
		p++;
		for (; *p != '\0'; p++)
		{
			if (*p == '"')
			{
				if (p[1] != '"')
				{
					p++;
					break;
				}
				p++;
			}
			if (n + 1 < bufsize)
				buf[n] = *p;
			n++;
		}
	}
	else
	{
		for (; *p != '\0' && strchr(" \t\n\r\f\v,()\"", *p) == NULL; p++)
		{
			if (n + 1 < bufsize)
				buf[n] = *p;
			n++;
		}
	}
	/* a name longer than the buffer cannot equal ours: no match */
	if (n + 1 >= bufsize)
		n = 0, buf[0] = '\1', buf[1] = '\0';
	else
		buf[n] = '\0';
	return p;
}

bool
ash_syncrep_lists(const char *setting, const char *appname)
{
	const char *p = setting;
	char		name[NAMEDATALEN + 1];
	bool		found;

	if (setting == NULL)
		return true;
	for (;;)
	{
		p = next_name(p, name, sizeof(name), &found);
		if (!found)
			return false;
		if (strcmp(name, "*") == 0 || pg_strcasecmp(name, appname) == 0)
			return true;
	}
}

static void
set_mode(bool waits, const char *by)
{
	if (!known || waits != source_waits)
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.acknowledgement sink=%s mode=%s by=%s",
						syncrep_sink, waits ? "per_commit" : "grouped", by)));
	known = true;
	source_waits = waits;
	replies_in_a_row = 0;
}

void
ash_syncrep_appname(const char *sink_name, char *buf)
{
	snprintf(buf, NAMEDATALEN, "ash_replicant %s", sink_name);
}

/* The application name as the source's synchronous_standby_names sees it. */
static void
appname_as_seen(const char *sink_name, char *buf)
{
	ash_syncrep_appname(sink_name, buf);
	for (char *p = buf; *p; p++)
		*p = (*p < 32 || *p > 126) ? '?' : pg_tolower((unsigned char) *p);
}

bool
ash_syncrep_appnames_collide(const char *sink_a, const char *sink_b)
{
	char		a[NAMEDATALEN];
	char		b[NAMEDATALEN];

	appname_as_seen(sink_a, a);
	appname_as_seen(sink_b, b);
	return strcmp(a, b) == 0;
}

static void
judge(AshConn *conn)
{
	PGresult   *res = ash_conn_exec(conn, "SHOW synchronous_standby_names", true);
	bool		waits = true;	/* unreadable: acknowledge promptly */

	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		PQnfields(res) == 1 && !PQgetisnull(res, 0, 0))
		waits = ash_syncrep_lists(PQgetvalue(res, 0, 0), source_appname);
	PQclear(res);
	set_mode(waits, "setting");
	reread_wanted = false;
}

void
ash_syncrep_start(AshConn *repl, const char *sink_name)
{
	const char *appname = PQparameterStatus(repl->conn, "application_name");

	strlcpy(syncrep_sink, sink_name, sizeof(syncrep_sink));
	strlcpy(source_appname, appname ? appname : "", sizeof(source_appname));
	judge(repl);
}

void
ash_syncrep_observe(AshConn *conn)
{
	if (syncrep_sink[0] != '\0')
		judge(conn);
}

bool
ash_syncrep_source_waits(void)
{
	return !known || source_waits;
}

void
ash_syncrep_note_reply(bool prompt)
{
	if (source_waits)
		return;
	replies_in_a_row = prompt ? replies_in_a_row + 1 : 0;
	if (replies_in_a_row >= SYNCREP_REPLIES)
		set_mode(true, "replies");
	else if (prompt && TimestampDifferenceExceeds(last_reread, GetCurrentTimestamp(),
												  SYNCREP_REREAD_MS))
		reread_wanted = true;
}

bool
ash_syncrep_reread_wanted(void)
{
	return reread_wanted && !source_waits;
}

void
ash_syncrep_reread(const char *conninfo)
{
	MemoryContext cxt = CurrentMemoryContext;
	AshConn    *volatile conn = NULL;

	reread_wanted = false;
	last_reread = GetCurrentTimestamp();	/* a refused probe waits as long */
	PG_TRY();
	{
		conn = ash_conn_open(conninfo, ASH_CONN_PROBE, "ash_replicant acknowledgement");
		judge(conn);
	}
	PG_CATCH();
	{
		if (conn)
			ash_conn_close(conn);
		conn = NULL;
		FreeErrorData(ash_conn_failure_caught(cxt));
		/* only a guess failed: the replies go on deciding */
		ereport(LOG,
				(errmsg("ash_replicant event=pipeline.acknowledgement_probe sink=%s result=failed source_sqlstate=%s",
						syncrep_sink, ash_conn_last_sqlstate[0] ? ash_conn_last_sqlstate : "none")));
		ash_conn_last_sqlstate[0] = '\0';
	}
	PG_END_TRY();
	if (conn)
		ash_conn_close(conn);
}
