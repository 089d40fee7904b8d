/*
 * floor_reader.c -- the walsender's floor: a logical replication reader that
 * applies nothing and paces its reads the way ash_replicant's worker does.
 *
 *	  floor_reader CONNINFO SLOT OPTIONS END_LSN [PAUSE_MS [RCVBUF_BYTES]]
 *
 * It streams SLOT (pgoutput, OPTIONS as in START_REPLICATION) and stops at the
 * first COMMIT ending at or after END_LSN, or at a keepalive past it.  Reads
 * are paced as in src/pipeline.c and src/walproto.c: a 256 kB receive buffer;
 * whenever the socket is found empty after at least 64 kB of backlog, or at a
 * COMMIT while a backlog streams (the last "batch" -- transactions read
 * without finding the socket empty -- held several), the window is clamped to
 * half the buffer and the reader sleeps PAUSE_MS (default 30; 0 = read every
 * message as it arrives).  RCVBUF_BYTES changes the buffer (the clamp is half
 * of it), for measuring other pacings.  With no apply behind
 * it, its wall clock is what the source's walsender needs to decode and send
 * the workload to such a reader -- the bound no consumer reading through a
 * walsender this way can pass, to compare ash_replicant's seconds with.
 *
 * Prints one JSON object: seconds, messages, bytes, pauses.
 * Build: cc -O2 -I$(pg_config --includedir) floor_reader.c -lpq
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include <libpq-fe.h>

#define RCVBUF_BYTES (256 * 1024)
#define PACE_MIN_BYTES (64 * 1024)
#define STATUS_EVERY_S 1.0

typedef struct Msg
{
	char	   *buf;			/* NULL: none */
	int			len;
} Msg;

static PGconn *conn;
static int	sock;
static int	clamp = RCVBUF_BYTES / 2;
static long pause_ms = 30;
static long pauses = 0;
static unsigned long long bytes = 0;
static Msg	peeked;
static bool busy = false;		/* the last batch held several transactions */

static void
die(const char *what)
{
	fprintf(stderr, "floor_reader: %s: %s", what, conn ? PQerrorMessage(conn) : "\n");
	exit(1);
}

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t
get64(const char *p)
{
	uint64_t	v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | (unsigned char) p[i];
	return v;
}

static void
put64(char *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (char) (v & 0xff);
}

/* Standby status update: written = flushed = the received position. */
static void
send_status(uint64_t lsn)
{
	char		msg[1 + 8 * 4 + 1];

	msg[0] = 'r';
	put64(msg + 1, lsn);
	put64(msg + 9, lsn);
	put64(msg + 17, lsn);
	put64(msg + 25, 0);
	msg[33] = 0;
	if (PQputCopyData(conn, msg, sizeof(msg)) <= 0 || PQflush(conn) != 0)
		die("sending status");
}

/* What the socket holds now, without waiting (as walproto.c's raw_receive). */
static Msg
receive(void)
{
	Msg			m = {NULL, 0};

	m.len = PQgetCopyData(conn, &m.buf, 1);
	if (m.len == 0)
	{
		if (PQconsumeInput(conn) == 0)
			die("reading");
		m.len = PQgetCopyData(conn, &m.buf, 1);
	}
	if (m.len < 0)
		die("the stream ended before END_LSN");
	if (m.len == 0)
		m.buf = NULL;
	bytes += m.len;
	return m;
}

/* The next message (one peeked by more_coming() first); buf NULL: none. */
static Msg
next_message(void)
{
	Msg			m = peeked;

	if (m.buf == NULL)
		return receive();
	peeked.buf = NULL;
	return m;
}

/* Clamp the window and sleep, as walproto.c's ash_stream_pause(). */
static void
pause_reading(void)
{
	struct timespec ts = {pause_ms / 1000, (pause_ms % 1000) * 1000000L};

	(void) setsockopt(sock, IPPROTO_TCP, TCP_WINDOW_CLAMP, &clamp, sizeof(clamp));
	nanosleep(&ts, NULL);
	pauses++;
}

/*
 * After a COMMIT, as pipeline.c's more_coming(): is another transaction
 * already here?  While a backlog streams (the last batch held several
 * transactions), pause first and look again.
 */
static bool
more_coming(void)
{
	if (peeked.buf == NULL)
		peeked = receive();
	if (peeked.buf == NULL && busy && pause_ms > 0)
	{
		pause_reading();
		peeked = receive();
	}
	if (peeked.buf != NULL)
		return true;
	busy = false;
	return false;
}

int
main(int argc, char **argv)
{
	unsigned	hi,
				lo;
	uint64_t	end_lsn,
				received = 0;
	char		cmd[4096];
	PGresult   *res;
	int			size = RCVBUF_BYTES;
	long		messages = 0;
	long		batch_xacts = 0;
	unsigned long long paced_from = 0;
	double		t0,
				last_status;
	bool		done = false;

	if (argc < 5 || sscanf(argv[4], "%X/%X", &hi, &lo) != 2)
	{
		fprintf(stderr, "usage: floor_reader CONNINFO SLOT OPTIONS END_LSN [PAUSE_MS [RCVBUF_BYTES]]\n");
		return 2;
	}
	end_lsn = ((uint64_t) hi << 32) | lo;
	if (argc > 5)
		pause_ms = atol(argv[5]);
	if (argc > 6)
	{
		size = atoi(argv[6]);
		clamp = size / 2;
	}

	t0 = now_s();
	conn = PQconnectdb(argv[1]);
	if (PQstatus(conn) != CONNECTION_OK)
		die("connecting");
	sock = PQsocket(conn);
	(void) setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	snprintf(cmd, sizeof(cmd), "START_REPLICATION SLOT \"%s\" LOGICAL 0/0 (%s)", argv[2], argv[3]);
	res = PQexec(conn, cmd);
	if (PQresultStatus(res) != PGRES_COPY_BOTH)
		die("START_REPLICATION");
	PQclear(res);
	last_status = now_s();

	while (!done)
	{
		Msg			m = next_message();

		if (m.buf == NULL)
		{
			struct pollfd pfd = {.fd = sock,.events = POLLIN};

			if (now_s() - last_status >= STATUS_EVERY_S)
			{
				send_status(received);
				last_status = now_s();
			}
			/* a backlog was drained: let the source's window close */
			if (pause_ms > 0 && bytes - paced_from >= PACE_MIN_BYTES)
				pause_reading();
			else if (poll(&pfd, 1, 1000) < 0 && errno != EINTR)
				die("poll");
			paced_from = bytes;
			continue;
		}
		if (m.buf[0] == 'w' && m.len >= 26)
		{
			uint64_t	start = get64(m.buf + 1);

			messages++;
			if (start > received)
				received = start;
			/* pgoutput COMMIT: flags, commit LSN, end LSN, time */
			if (m.buf[25] == 'C' && m.len >= 26 + 1 + 16)
			{
				done = get64(m.buf + 26 + 1 + 8) >= end_lsn;
				batch_xacts++;
				/* the worker's batch ends where nothing more is coming */
				if (!done && !more_coming())
				{
					busy = batch_xacts > 1;
					batch_xacts = 0;
				}
			}
		}
		else if (m.buf[0] == 'k' && m.len >= 18)
		{
			if (get64(m.buf + 1) >= end_lsn)
				done = true;
			else if (m.buf[17])
				send_status(received);
		}
		PQfreemem(m.buf);
	}
	printf("{\"seconds\": %.3f, \"messages\": %ld, \"bytes\": %llu, \"pauses\": %ld}\n",
		   now_s() - t0, messages, bytes, pauses);
	PQfinish(conn);
	return 0;
}
