/*-------------------------------------------------------------------------
 *
 * walproto.h
 *	  CopyBoth framing of a logical replication stream: XLogData and
 *	  keepalive messages in, standby status updates out.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_WALPROTO_H
#define ASH_WALPROTO_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

#include "libpq_conn.h"

typedef struct AshStream
{
	AshConn    *conn;
	char	   *buf;			/* current message (libpq-owned) */
	char	   *peeked;			/* a message read ahead, not yet consumed */
	int			peeked_len;
	XLogRecPtr	received_lsn;	/* highest walEnd / dataStart seen */
	XLogRecPtr	last_write_sent;
	XLogRecPtr	last_flush_sent;
	TimestampTz last_recv_time;
	TimestampTz last_send_time;
	uint64		received_bytes; /* CopyData bytes received so far */
	int			window_clamp;	/* TCP_WINDOW_CLAMP while pausing; 0 none */
	bool		ping_sent;
	bool		ended;			/* the source ended the COPY */
	struct WaitEventSet *wait_set;	/* latch + socket, made on first wait */
} AshStream;

typedef enum AshStreamMsgKind
{
	ASH_STREAM_NONE,			/* nothing available right now */
	ASH_STREAM_DATA,			/* a logical decoding message */
	ASH_STREAM_KEEPALIVE,
	ASH_STREAM_END				/* the source ended the stream */
} AshStreamMsgKind;

typedef struct AshStreamMsg
{
	AshStreamMsgKind kind;
	XLogRecPtr	data_start;		/* DATA: WAL position of the message */
	XLogRecPtr	wal_end;		/* DATA/KEEPALIVE: sender's end of WAL */
	TimestampTz send_time;
	bool		reply_requested;	/* KEEPALIVE */
	const char *data;			/* DATA payload (valid until next receive) */
	int			len;
} AshStreamMsg;

/* Issue START_REPLICATION ... LOGICAL; the connection then streams. */
extern void ash_stream_start(AshStream *s, AshConn *conn, const char *slot_name,
							 XLogRecPtr startpoint, const char *plugin_options);

/* Next message without blocking (ASH_STREAM_NONE when none is buffered). */
extern void ash_stream_receive(AshStream *s, AshStreamMsg *msg);

/* Is a further complete message already received (not blocking)? */
extern bool ash_stream_more_buffered(AshStream *s);

/* ... and is it a keepalive? */
extern bool ash_stream_keepalive_next(AshStream *s);

/* Send a standby status update. */
extern void ash_stream_send_feedback(AshStream *s, XLogRecPtr write,
									 XLogRecPtr flush, bool request_reply);

/* Wait for socket data or latch or timeout (ms).  Services interrupts. */
extern bool ash_stream_wait(AshStream *s, long timeout_ms);

/*
 * Sleep without reading, the window clamped, so the source's window may
 * close: min_ms, then on up to max_ms while the source could still send.
 */
extern void ash_stream_pause(AshStream *s, long min_ms, long max_ms);

/* End the stream politely (best effort) and close the connection. */
extern void ash_stream_close(AshStream *s);

#endif							/* ASH_WALPROTO_H */
