/*-------------------------------------------------------------------------
 *
 * walproto.c
 *	  CopyBoth framing of a logical replication stream.
 *
 * NOTES
 *	  After START_REPLICATION the connection is in CopyBoth mode.  The source
 *	  sends 'w' (XLogData: dataStart, walEnd, sendTime, payload) and 'k'
 *	  (keepalive: walEnd, sendTime, replyRequested); we send 'r' (standby
 *	  status update: write, flush, apply, sendTime, replyRequested).
 *
 *	  Reads never block: PQgetCopyData in async mode after PQconsumeInput.
 *	  One message may be read ahead (ash_stream_more_buffered) so the apply
 *	  loop can tell whether another complete transaction is already here —
 *	  that is what closes a batch without adding latency.
 *
 *	  This module knows nothing of what the payload means or of durability:
 *	  the caller decides which positions are safe to report as flushed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/ioctl.h>
#include <sys/socket.h>
#include <netinet/in.h>
#ifdef __linux__
#include <linux/sockios.h>		/* SIOCINQ */
#include <linux/tcp.h>			/* tcpi_min_rtt: newer than glibc's tcp_info */
#endif

#include "access/xlog.h"
#include "libpq/pqformat.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "walproto.h"

static int64
get_int64(const char *p)
{
	uint64		v = 0;

	for (int i = 0; i < 8; i++)
		v = (v << 8) | (unsigned char) p[i];
	return (int64) v;
}

static void
put_int64(char *p, int64 v)
{
	uint64		u = (uint64) v;

	for (int i = 7; i >= 0; i--)
	{
		p[i] = (char) (u & 0xff);
		u >>= 8;
	}
}

/*
 * Size the receive buffer of a stream from a nearby source.
 *
 * Left to autotuning, a receive buffer grows to megabytes when the worker
 * reads quickly, the source's window never closes, and its walsender sends
 * every logical decoding message as a TCP segment of its own: each send runs
 * the whole transmit path, and on a shared machine that CPU is taken from the
 * worker.  With a window that fills while the worker pauses (see pipeline.c),
 * the walsender queues messages and sends them in large segments (seen on
 * loopback: 42,705 segments for 1,000,000 rows against 811).  The buffer is
 * sized for 1 GB/s at the connection's smallest round-trip time, at least
 * 256 kB (so the window clamp of a pause, half of it, is two loopback
 * segments: clamps of one segment or less, 64 kB and 32 kB, stalled every
 * run on delayed acknowledgements, W1 taking 14-30 s), and left to
 * autotuning when that would exceed 4 MB: a distant source keeps a window
 * that covers its bandwidth-delay product.  Returns the clamp for pauses,
 * 0 when the buffer was left alone.
 */
#define RCVBUF_BYTES_PER_USEC 1000
#define RCVBUF_MIN (256 * 1024)
#define RCVBUF_MAX (4 * 1024 * 1024)

static int
size_receive_buffer(int sock)
{
#if defined(TCP_INFO) && defined(__linux__)
	struct tcp_info ti;
	socklen_t	len = sizeof(ti);
	long		want;
	int			size;

	memset(&ti, 0, sizeof(ti));
	if (getsockopt(sock, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 || ti.tcpi_rtt == 0)
		return 0;				/* not TCP (a Unix socket), or no sample yet */
	want = (long) (ti.tcpi_min_rtt ? ti.tcpi_min_rtt : ti.tcpi_rtt) * RCVBUF_BYTES_PER_USEC;
	if (want > RCVBUF_MAX)
		return 0;
	size = (int) Max(want, RCVBUF_MIN);
	(void) setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	return size / 2;
#else
	return 0;
#endif
}

void
ash_stream_start(AshStream *s, AshConn *conn, const char *slot_name,
				 XLogRecPtr startpoint, const char *plugin_options)
{
	StringInfoData cmd;
	PGresult   *res;

	memset(s, 0, sizeof(*s));
	s->conn = conn;
	initStringInfo(&cmd);
	appendStringInfo(&cmd, "START_REPLICATION SLOT %s LOGICAL %X/%X (%s)",
					 ash_conn_quote_ident(conn, slot_name),
					 LSN_FORMAT_ARGS(startpoint), plugin_options);
	s->window_clamp = size_receive_buffer(PQsocket(conn->conn));
	res = ash_conn_exec(conn, cmd.data, false);
	if (PQresultStatus(res) != PGRES_COPY_BOTH)
		ash_conn_report_result(res, "START_REPLICATION");
	PQclear(res);
	pfree(cmd.data);
	s->received_lsn = startpoint;
	s->last_recv_time = GetCurrentTimestamp();
	s->last_send_time = 0;
}

/* Raw read of one CopyData message; returns its length, 0 none, -1 end. */
static int
raw_receive(AshStream *s, char **buf)
{
	int			len;

	*buf = NULL;
	len = PQgetCopyData(s->conn->conn, buf, 1);
	if (len == 0)
	{
		if (PQconsumeInput(s->conn->conn) == 0)
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("ash_replicant: source connection lost")));
		len = PQgetCopyData(s->conn->conn, buf, 1);
	}
	if (len == -1)
	{
		PGresult   *res = PQgetResult(s->conn->conn);

		/* the server ended the COPY: end of stream (e.g. shutdown) */
		if (res)
		{
			if (PQresultStatus(res) == PGRES_FATAL_ERROR)
				ash_conn_report_result(res, "replication stream");
			PQclear(res);
		}
		return -1;
	}
	if (len < -1)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: source connection lost while streaming")));
	return len;
}

void
ash_stream_receive(AshStream *s, AshStreamMsg *msg)
{
	char	   *buf;
	int			len;

	memset(msg, 0, sizeof(*msg));
	if (s->buf)
	{
		PQfreemem(s->buf);
		s->buf = NULL;
	}
	if (s->ended)
		len = -1;
	else if (s->peeked)
	{
		buf = s->peeked;
		len = s->peeked_len;
		s->peeked = NULL;
	}
	else
		len = raw_receive(s, &buf);

	if (len == 0)
	{
		msg->kind = ASH_STREAM_NONE;
		return;
	}
	if (len < 0)
	{
		s->ended = true;
		msg->kind = ASH_STREAM_END;
		return;
	}
	s->buf = buf;
	s->received_bytes += len;
	s->last_recv_time = GetCurrentTimestamp();
	s->ping_sent = false;

	switch (buf[0])
	{
		case 'w':
			if (len < 1 + 24)
				ereport(ERROR,
						(errcode(ERRCODE_PROTOCOL_VIOLATION),
						 errmsg("ash_replicant: short XLogData message from the source")));
			msg->kind = ASH_STREAM_DATA;
			msg->data_start = (XLogRecPtr) get_int64(buf + 1);
			msg->wal_end = (XLogRecPtr) get_int64(buf + 9);
			msg->send_time = (TimestampTz) get_int64(buf + 17);
			msg->data = buf + 25;
			msg->len = len - 25;
			if (msg->data_start > s->received_lsn)
				s->received_lsn = msg->data_start;
			break;
		case 'k':
			if (len < 1 + 17)
				ereport(ERROR,
						(errcode(ERRCODE_PROTOCOL_VIOLATION),
						 errmsg("ash_replicant: short keepalive message from the source")));
			msg->kind = ASH_STREAM_KEEPALIVE;
			msg->wal_end = (XLogRecPtr) get_int64(buf + 1);
			msg->send_time = (TimestampTz) get_int64(buf + 9);
			msg->reply_requested = buf[17] != 0;
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_PROTOCOL_VIOLATION),
					 errmsg("ash_replicant: unexpected streaming message type 0x%02x from the source",
							(unsigned char) buf[0])));
	}
}

bool
ash_stream_more_buffered(AshStream *s)
{
	if (s->peeked)
		return true;
	if (s->ended)
		return false;
	s->peeked_len = raw_receive(s, &s->peeked);
	if (s->peeked_len < 0)
		s->ended = true;	/* reported by the next receive */
	if (s->peeked_len <= 0)
	{
		s->peeked = NULL;
		return false;
	}
	return true;
}

/* Is the next message received a keepalive (one is buffered)? */
bool
ash_stream_keepalive_next(AshStream *s)
{
	return ash_stream_more_buffered(s) && s->peeked_len > 0 && s->peeked[0] == 'k';
}

void
ash_stream_send_feedback(AshStream *s, XLogRecPtr write, XLogRecPtr flush,
						 bool request_reply)
{
	char		reply[1 + 8 * 4 + 1];
	TimestampTz now = GetCurrentTimestamp();

	reply[0] = 'r';
	put_int64(reply + 1, (int64) write);
	put_int64(reply + 9, (int64) flush);
	put_int64(reply + 17, (int64) flush);	/* applied == durably applied */
	put_int64(reply + 25, (int64) now);
	reply[33] = request_reply ? 1 : 0;

	if (PQputCopyData(s->conn->conn, reply, sizeof(reply)) <= 0 ||
		PQflush(s->conn->conn) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: could not send feedback to the source")));
	s->last_write_sent = write;
	s->last_flush_sent = flush;
	s->last_send_time = now;
}

/*
 * Wait for the source (or our latch); true when the socket is readable.
 * The wait set lives as long as the stream: WaitLatchOrSocket would build
 * and tear down an epoll set per call, four system calls that cost a
 * quarter of the worker's time when it keeps up with many tiny source
 * transactions.
 */
bool
ash_stream_wait(AshStream *s, long timeout_ms)
{
	WaitEvent	event;
	int			n;

	if (s->wait_set == NULL)
	{
		s->wait_set = CreateWaitEventSet(TopMemoryContext, 3);
		AddWaitEventToSet(s->wait_set, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
		AddWaitEventToSet(s->wait_set, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
		AddWaitEventToSet(s->wait_set, WL_SOCKET_READABLE, PQsocket(s->conn->conn),
						  NULL, NULL);
	}
	n = WaitEventSetWait(s->wait_set, Max(timeout_ms, 1), &event, 1, PG_WAIT_EXTENSION);
	if (n == 1 && (event.events & WL_LATCH_SET))
	{
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
	return n == 1 && (event.events & WL_SOCKET_READABLE) != 0;
}

/*
 * Sleep up to timeout_ms without reading, so that the source's TCP window
 * can close (see pipeline.c), without letting the kernel drop what the
 * source sends meanwhile.  The kernel advertises a window worth nearly the
 * whole free buffer, judged by the payload-to-memory ratio of the large
 * segments it has seen (on loopback ~0.98), and re-derives the window clamp
 * from the buffer when it first measures that ratio.  A sleeping reader's
 * buffer fills with small one-change segments costing several times their
 * payload; collapsing them could not always make that promise fit, segments
 * were dropped, and in some runs the source's retransmission timeouts
 * stalled W1 for seconds (TcpExtTCPRcvQDrop; 1 run in 4).  Re-clamping the
 * window to half the buffer before each pause bounds each promise well
 * below what fits once collapsed: the drops that remain are rare, and fast
 * retransmission repairs them (none of 66 W1 runs stalled since).
 */
#define PAUSE_STEP_MS 10

void
ash_stream_pause(AshStream *s, long min_ms, long max_ms)
{
	TimestampTz start = GetCurrentTimestamp();
	long		step = min_ms;

	if (s->window_clamp > 0)
		(void) setsockopt(PQsocket(s->conn->conn), IPPROTO_TCP, TCP_WINDOW_CLAMP,
						  &s->window_clamp, sizeof(s->window_clamp));
	for (;;)
	{
#ifdef SIOCINQ
		int			queued = 0;
#endif

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 step, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		step = PAUSE_STEP_MS;

		/*
		 * On, while the source can still send: its window is open until
		 * what we hold reaches the clamp.  A walsender that fills it within
		 * min_ms (one walsender, cores to spare) never sees the extension;
		 * one that does not -- several walsenders sharing the source's
		 * cores -- gets to send its backlog in a few large segments
		 * instead of in the many small ones an early read invites (eight
		 * pipelines of one source: the walsenders' CPU 1.08-1.40x
		 * native's with a fixed 30 ms, about even with the extension).
		 */
		if (s->window_clamp <= 0 ||
			TimestampDifferenceExceeds(start, GetCurrentTimestamp(), max_ms))
			break;
#ifdef SIOCINQ
		if (ioctl(PQsocket(s->conn->conn), SIOCINQ, &queued) != 0 ||
			queued >= s->window_clamp / 4 * 3)
			break;
#else
		break;
#endif
	}
}

void
ash_stream_close(AshStream *s)
{
	if (s->buf)
		PQfreemem(s->buf);
	if (s->peeked)
		PQfreemem(s->peeked);
	s->buf = s->peeked = NULL;
	if (s->wait_set)
		FreeWaitEventSet(s->wait_set);
	s->wait_set = NULL;
	if (s->conn)
	{
		/* best effort: tell the source we are done */
		if (PQstatus(s->conn->conn) == CONNECTION_OK)
			(void) PQputCopyEnd(s->conn->conn, NULL);
		ash_conn_close(s->conn);
	}
	s->conn = NULL;
}
