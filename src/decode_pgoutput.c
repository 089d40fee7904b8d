/*-------------------------------------------------------------------------
 *
 * decode_pgoutput.c
 *	  Pure decoder of the pgoutput logical replication protocol, versions 1
 *	  to 3 as spoken by PostgreSQL 15 sources.
 *
 * NOTES
 *	  Framing.  The transport hands us the payload of one XLogData ('w')
 *	  frame: exactly one pgoutput message, len bytes.  Its first byte is the
 *	  message tag; all integers after it are big-endian (network order);
 *	  LSNs and timestamps (TimestampTz, microseconds since 2000-01-01) are
 *	  int64; xids, OIDs and lengths are int32; column counts are int16;
 *	  strings are NUL-terminated.  The message must be consumed exactly:
 *	  leftover bytes are a protocol violation, as is running out of bytes.
 *
 *	  Messages (PostgreSQL 15, src/backend/replication/logical/proto.c):
 *		B  final_lsn, commit_time, xid
 *		C  flags(=0), commit_lsn, end_lsn, commit_time
 *		O  origin_lsn, name
 *		R  [xid] relid, nspname ("" = pg_catalog), relname, replident,
 *		   natts, natts x (flags, name, type oid, typmod)
 *		Y  [xid] type oid, nspname ("" = pg_catalog), typname
 *		I  [xid] relid, 'N', tuple
 *		U  [xid] relid, ['K' tuple | 'O' tuple], 'N', tuple
 *		D  [xid] relid, 'K' | 'O', tuple
 *		T  [xid] nrelids, flags, nrelids x relid
 *		M  [xid] flags, lsn, prefix, content length, content
 *		S  xid, first_segment (0/1)		(protocol >= 2)
 *		E  (nothing)					(protocol >= 2)
 *		c  xid, flags(=0), commit_lsn, end_lsn, commit_time (protocol >= 2)
 *		A  xid, subxid					(protocol >= 2)
 *	  A tuple is natts, then per column a kind byte: 'n' null, 'u' unchanged
 *	  TOAST value (not sent), 't' text or 'b' binary followed by an int32
 *	  length and that many bytes.  "[xid]" is present only inside a
 *	  streaming block, i.e. between S and E; the caller's AshPgoutputState
 *	  carries that flag across messages and we flip it only when an S or E
 *	  message decoded completely.  AshChange.xid is set exactly for the
 *	  changes that carried that leading xid (it may be a subtransaction's:
 *	  pgoutput sends the xid of the (sub)transaction that made the change);
 *	  stream control messages report theirs in u.stream_*, and an Origin
 *	  message inside a block carries none.
 *
 *	  The two-phase messages of protocol 3 ('b', 'P', 'K', 'r', 'p') are
 *	  recognised and refused: we never ask for two_phase, so seeing one
 *	  means the session is not what we set up.
 *
 *	  Invariants.  The decoder is a pure function of (state, bytes): no
 *	  ereport/elog, no catalog access, no pq_getmsg* (they raise).  Every
 *	  read goes through the bounds-checked PgoReader below, so nothing is
 *	  read outside [data, data + len).  Counts are checked against both
 *	  their protocol maximum and the bytes that remain before anything is
 *	  allocated, so allocation is bounded by a small multiple of len.  All
 *	  output is palloc'd in CurrentMemoryContext (strings and values are
 *	  copied and NUL-terminated; binary values keep their length); the
 *	  caller frees a message by resetting that context, also after a
 *	  failure, which may leave partial allocations behind.  Errors are
 *	  static strings that never contain a byte of the message: row values
 *	  must not leak into logs (README.md#status-statistics-and-events).
 *
 *	  We are stricter than core where strictness costs nothing: unknown flag
 *	  bits, replica identity letters, invalid xids/relids, names too long
 *	  for NAMEDATALEN, a NUL inside a text value (it would be truncated
 *	  silently by an input function) and an unchanged-TOAST marker in an
 *	  INSERT (pgoutput always sends full new rows there) are rejected.
 *	  Streaming control messages out of order with respect to in_stream are
 *	  rejected too; finer sequencing (Begin/Commit pairing, xid matching)
 *	  belongs to the apply layer.
 *
 *	  This file compiles both in the backend and, with FRONTEND defined, in
 *	  the unit-test binary (test/unit/decode_test.c).
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "access/transam.h"
#ifndef FRONTEND
#include "access/htup_details.h"
#include "utils/memutils.h"
#endif

#include "change.h"
#include "decode_pgoutput.h"

/*
 * Limits.  The backend headers that define these are not usable in frontend
 * code, so keep local copies and check them when compiled in the backend.
 */
#define PGO_MAX_ATTS		1664	/* MaxTupleAttributeNumber */
#define PGO_MAX_ALLOC		((Size) 0x3fffffff)	/* MaxAllocSize */

#ifndef FRONTEND
StaticAssertDecl(PGO_MAX_ATTS == MaxTupleAttributeNumber,
				 "PGO_MAX_ATTS must match MaxTupleAttributeNumber");
StaticAssertDecl(PGO_MAX_ALLOC == MaxAllocSize,
				 "PGO_MAX_ALLOC must match MaxAllocSize");
#endif

/* Smallest wire size of one column description in a Relation message. */
#define PGO_RELCOL_MIN_BYTES	(1 + 1 + 4 + 4)

/* Flag bits on the wire. */
#define PGO_COMMIT_FLAGS_KNOWN		0x00
#define PGO_MESSAGE_TRANSACTIONAL	0x01
#define PGO_TRUNCATE_CASCADE		0x01
#define PGO_TRUNCATE_RESTART_SEQS	0x02
#define PGO_RELCOL_IS_KEY			0x01

/* Message tags (the first byte of each message). */
typedef enum PgoutputMsgType
{
	PGO_MSG_BEGIN = 'B',
	PGO_MSG_COMMIT = 'C',
	PGO_MSG_ORIGIN = 'O',
	PGO_MSG_RELATION = 'R',
	PGO_MSG_TYPE = 'Y',
	PGO_MSG_INSERT = 'I',
	PGO_MSG_UPDATE = 'U',
	PGO_MSG_DELETE = 'D',
	PGO_MSG_TRUNCATE = 'T',
	PGO_MSG_MESSAGE = 'M',
	PGO_MSG_STREAM_START = 'S',
	PGO_MSG_STREAM_STOP = 'E',
	PGO_MSG_STREAM_COMMIT = 'c',
	PGO_MSG_STREAM_ABORT = 'A',
	/* protocol 3, two-phase: recognised and refused */
	PGO_MSG_BEGIN_PREPARE = 'b',
	PGO_MSG_PREPARE = 'P',
	PGO_MSG_COMMIT_PREPARED = 'K',
	PGO_MSG_ROLLBACK_PREPARED = 'r',
	PGO_MSG_STREAM_PREPARE = 'p'
} PgoutputMsgType;

/* Tuple markers inside Insert/Update/Delete. */
#define PGO_TUPLE_NEW		'N'
#define PGO_TUPLE_KEY		'K'
#define PGO_TUPLE_OLD		'O'

/*
 * Error messages.  Static and value-free by construction: nothing from the
 * message is ever formatted into them.
 */
#define ERR_EMPTY			"empty pgoutput message"
#define ERR_BAD_ARGS		"invalid arguments to pgoutput decoder"
#define ERR_PROTO_VERSION	"unsupported pgoutput protocol version"
#define ERR_TRUNCATED		"truncated pgoutput message"
#define ERR_TRAILING		"trailing bytes after pgoutput message"
#define ERR_UNKNOWN_TAG		"unknown pgoutput message type"
#define ERR_TWO_PHASE		"two-phase messages are not supported"
#define ERR_STREAM_PROTO	"streaming message requires protocol version 2 or later"
#define ERR_IN_STREAM		"message not allowed inside a streaming block"
#define ERR_NOT_IN_STREAM	"stream stop outside a streaming block"
#define ERR_STRING_NUL		"unterminated string in pgoutput message"
#define ERR_NAME_EMPTY		"empty name in pgoutput message"
#define ERR_NAME_LONG		"name too long in pgoutput message"
#define ERR_FLAGS			"unknown flags in pgoutput message"
#define ERR_XID				"invalid transaction id in pgoutput message"
#define ERR_LSN				"invalid LSN in pgoutput message"
#define ERR_RELID			"invalid relation id in pgoutput message"
#define ERR_TYPEOID			"invalid type id in pgoutput message"
#define ERR_REPLIDENT		"unknown replica identity in relation message"
#define ERR_NATTS			"column count out of range in pgoutput message"
#define ERR_COLKIND			"unknown column kind in tuple data"
#define ERR_VALUE_LEN		"column value length out of range in tuple data"
#define ERR_TEXT_NUL		"text column value contains a NUL byte"
#define ERR_UNCHANGED_INS	"unchanged TOAST marker in insert"
#define ERR_TUPLE_MARKER	"unexpected tuple marker in pgoutput message"
#define ERR_NRELIDS			"relation count out of range in truncate message"
#define ERR_MSG_LEN			"content length out of range in logical message"
#define ERR_SEGMENT			"invalid first-segment flag in stream start message"

/*
 * Bounds-checked cursor over one message.  Every read helper returns false
 * (after recording a static error) instead of reading past end.
 */
typedef struct PgoReader
{
	const unsigned char *cur;
	const unsigned char *end;
	const char *error;
} PgoReader;

static inline bool
reader_fail(PgoReader *r, const char *error)
{
	/* Keep the first error: it is the most precise one. */
	if (r->error == NULL)
		r->error = error;
	return false;
}

static inline Size
reader_remaining(const PgoReader *r)
{
	return (Size) (r->end - r->cur);
}

static bool
read_byte(PgoReader *r, uint8 *v)
{
	if (reader_remaining(r) < 1)
		return reader_fail(r, ERR_TRUNCATED);
	*v = r->cur[0];
	r->cur += 1;
	return true;
}

static bool
read_int16(PgoReader *r, int16 *v)
{
	uint16		u;

	if (reader_remaining(r) < 2)
		return reader_fail(r, ERR_TRUNCATED);
	u = (uint16) (((uint16) r->cur[0] << 8) | (uint16) r->cur[1]);
	*v = (int16) u;
	r->cur += 2;
	return true;
}

static bool
read_uint32(PgoReader *r, uint32 *v)
{
	if (reader_remaining(r) < 4)
		return reader_fail(r, ERR_TRUNCATED);
	*v = ((uint32) r->cur[0] << 24) |
		((uint32) r->cur[1] << 16) |
		((uint32) r->cur[2] << 8) |
		(uint32) r->cur[3];
	r->cur += 4;
	return true;
}

static bool
read_int32(PgoReader *r, int32 *v)
{
	uint32		u;

	if (!read_uint32(r, &u))
		return false;
	*v = (int32) u;
	return true;
}

static bool
read_uint64(PgoReader *r, uint64 *v)
{
	uint32		hi;
	uint32		lo;

	if (reader_remaining(r) < 8)
		return reader_fail(r, ERR_TRUNCATED);
	if (!read_uint32(r, &hi) || !read_uint32(r, &lo))
		return false;
	*v = ((uint64) hi << 32) | (uint64) lo;
	return true;
}

static bool
read_int64(PgoReader *r, int64 *v)
{
	uint64		u;

	if (!read_uint64(r, &u))
		return false;
	*v = (int64) u;
	return true;
}

static bool
read_lsn(PgoReader *r, XLogRecPtr *lsn)
{
	uint64		u;

	if (!read_uint64(r, &u))
		return false;
	*lsn = (XLogRecPtr) u;
	return true;
}

/* A transaction id that must be valid (streamed changes, stream control). */
static bool
read_valid_xid(PgoReader *r, TransactionId *xid)
{
	uint32		u;

	if (!read_uint32(r, &u))
		return false;
	if (u == InvalidTransactionId)
		return reader_fail(r, ERR_XID);
	*xid = (TransactionId) u;
	return true;
}

static bool
read_relid(PgoReader *r, uint32 *relid)
{
	if (!read_uint32(r, relid))
		return false;
	if (*relid == 0)
		return reader_fail(r, ERR_RELID);
	return true;
}

/*
 * Copy n bytes into a fresh palloc'd, NUL-terminated buffer.
 */
static bool
read_bytes_copy(PgoReader *r, Size n, char **out)
{
	char	   *buf;

	if (n > reader_remaining(r))
		return reader_fail(r, ERR_TRUNCATED);
	if (n + 1 > PGO_MAX_ALLOC)
		return reader_fail(r, ERR_VALUE_LEN);
	buf = palloc(n + 1);
	if (n > 0)
		memcpy(buf, r->cur, n);
	buf[n] = '\0';
	r->cur += n;
	*out = buf;
	return true;
}

/*
 * Read a NUL-terminated string and return a palloc'd copy.  maxlen > 0
 * bounds its length (names: NAMEDATALEN - 1); 0 means unbounded.
 */
static bool
read_string(PgoReader *r, Size maxlen, char **out)
{
	const unsigned char *nul;
	Size		n;

	nul = memchr(r->cur, '\0', reader_remaining(r));
	if (nul == NULL)
		return reader_fail(r, ERR_STRING_NUL);
	n = (Size) (nul - r->cur);
	if (maxlen > 0 && n > maxlen)
		return reader_fail(r, ERR_NAME_LONG);
	if (!read_bytes_copy(r, n, out))
		return false;
	r->cur += 1;				/* the terminator */
	return true;
}

/* An identifier: non-empty, shorter than NAMEDATALEN. */
static bool
read_name(PgoReader *r, char **out)
{
	if (!read_string(r, NAMEDATALEN - 1, out))
		return false;
	if ((*out)[0] == '\0')
		return reader_fail(r, ERR_NAME_EMPTY);
	return true;
}

/* A namespace name; the empty string stands for pg_catalog on the wire. */
static bool
read_namespace(PgoReader *r, char **out)
{
	if (!read_string(r, NAMEDATALEN - 1, out))
		return false;
	if ((*out)[0] == '\0')
	{
		const char *catalog = "pg_catalog";
		Size		n = strlen(catalog);

		*out = palloc(n + 1);
		memcpy(*out, catalog, n + 1);
	}
	return true;
}

/*
 * Leading xid of a change inside a streaming block; outside one there is
 * none and out->xid stays invalid.
 */
static bool
read_stream_xid(PgoReader *r, const AshPgoutputState *state, AshChange *out)
{
	if (!state->in_stream)
		return true;
	return read_valid_xid(r, &out->xid);
}

/*
 * TupleData: int16 natts, then natts columns.  allow_unchanged is false
 * for the new row of an INSERT.
 */
static bool
read_tuple(PgoReader *r, AshTuple *tup, bool allow_unchanged)
{
	int16		natts;
	int			i;

	if (!read_int16(r, &natts))
		return false;
	/* every column takes at least its kind byte */
	if (natts < 0 || natts > PGO_MAX_ATTS ||
		(Size) natts > reader_remaining(r))
		return reader_fail(r, ERR_NATTS);

	tup->natts = natts;
	tup->cols = NULL;
	if (natts > 0)
		tup->cols = palloc0(sizeof(AshColumnValue) * natts);

	for (i = 0; i < natts; i++)
	{
		AshColumnValue *col = &tup->cols[i];
		uint8		kind;
		int32		len;

		if (!read_byte(r, &kind))
			return false;

		switch (kind)
		{
			case ASH_COL_NULL:
				break;
			case ASH_COL_UNCHANGED:
				if (!allow_unchanged)
					return reader_fail(r, ERR_UNCHANGED_INS);
				break;
			case ASH_COL_TEXT:
			case ASH_COL_BINARY:
				if (!read_int32(r, &len))
					return false;
				if (len < 0 || (Size) len > reader_remaining(r))
					return reader_fail(r, ERR_VALUE_LEN);
				if (!read_bytes_copy(r, (Size) len, &col->data))
					return false;
				if (kind == ASH_COL_TEXT && len > 0 &&
					memchr(col->data, '\0', len) != NULL)
					return reader_fail(r, ERR_TEXT_NUL);
				col->len = len;
				break;
			default:
				return reader_fail(r, ERR_COLKIND);
		}
		col->status = (char) kind;
	}
	return true;
}

/* 'K' or 'O' marker followed by the old tuple. */
static bool
read_old_tuple(PgoReader *r, uint8 marker, char *oldkind, AshTuple *oldtup)
{
	if (marker != PGO_TUPLE_KEY && marker != PGO_TUPLE_OLD)
		return reader_fail(r, ERR_TUPLE_MARKER);
	*oldkind = (char) marker;
	return read_tuple(r, oldtup, true);
}

/* Streaming messages exist from protocol version 2 on. */
static bool
streaming_allowed(PgoReader *r, const AshPgoutputState *state)
{
	if (state->proto_version < 2)
		return reader_fail(r, ERR_STREAM_PROTO);
	return true;
}

/* ----------------------------------------------------------------
 * Message handlers.  Each reads the message after its tag byte.
 * ----------------------------------------------------------------
 */

static bool
decode_begin(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	out->kind = ASH_CHANGE_BEGIN;
	if (state->in_stream)
		return reader_fail(r, ERR_IN_STREAM);
	if (!read_lsn(r, &out->u.begin.final_lsn) ||
		!read_int64(r, &out->u.begin.commit_time) ||
		!read_valid_xid(r, &out->u.begin.xid))
		return false;
	if (out->u.begin.final_lsn == InvalidXLogRecPtr)
		return reader_fail(r, ERR_LSN);
	return true;
}

static bool
decode_commit(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	out->kind = ASH_CHANGE_COMMIT;
	if (state->in_stream)
		return reader_fail(r, ERR_IN_STREAM);
	if (!read_byte(r, &out->u.commit.flags))
		return false;
	if (out->u.commit.flags != PGO_COMMIT_FLAGS_KNOWN)
		return reader_fail(r, ERR_FLAGS);
	if (!read_lsn(r, &out->u.commit.commit_lsn) ||
		!read_lsn(r, &out->u.commit.end_lsn) ||
		!read_int64(r, &out->u.commit.commit_time))
		return false;
	if (out->u.commit.commit_lsn == InvalidXLogRecPtr ||
		out->u.commit.end_lsn == InvalidXLogRecPtr)
		return reader_fail(r, ERR_LSN);
	return true;
}

static bool
decode_origin(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	/* no xid even inside a streaming block: pgoutput sends it after S */
	out->kind = ASH_CHANGE_ORIGIN;
	return read_lsn(r, &out->u.origin.origin_lsn) &&
		read_string(r, 0, &out->u.origin.name);
}

static bool
decode_relation(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	AshRelation *rel = &out->u.relation;
	uint8		replident;
	int16		natts;
	int			i;

	out->kind = ASH_CHANGE_RELATION;
	if (!read_stream_xid(r, state, out) ||
		!read_relid(r, &rel->relid) ||
		!read_namespace(r, &rel->nspname) ||
		!read_name(r, &rel->relname) ||
		!read_byte(r, &replident))
		return false;

	switch (replident)
	{
		case 'd':				/* REPLICA_IDENTITY_DEFAULT */
		case 'n':				/* REPLICA_IDENTITY_NOTHING */
		case 'f':				/* REPLICA_IDENTITY_FULL */
		case 'i':				/* REPLICA_IDENTITY_INDEX */
			rel->replident = (char) replident;
			break;
		default:
			return reader_fail(r, ERR_REPLIDENT);
	}

	if (!read_int16(r, &natts))
		return false;
	if (natts < 0 || natts > PGO_MAX_ATTS ||
		(Size) natts * PGO_RELCOL_MIN_BYTES > reader_remaining(r))
		return reader_fail(r, ERR_NATTS);

	rel->natts = natts;
	rel->cols = NULL;
	if (natts > 0)
		rel->cols = palloc0(sizeof(AshRelColumn) * natts);

	for (i = 0; i < natts; i++)
	{
		AshRelColumn *col = &rel->cols[i];
		uint8		flags;

		if (!read_byte(r, &flags))
			return false;
		if ((flags & ~PGO_RELCOL_IS_KEY) != 0)
			return reader_fail(r, ERR_FLAGS);
		col->is_key = (flags & PGO_RELCOL_IS_KEY) != 0;
		if (!read_name(r, &col->name) ||
			!read_uint32(r, &col->type_oid) ||
			!read_int32(r, &col->typmod))
			return false;
		if (col->type_oid == 0)
			return reader_fail(r, ERR_TYPEOID);
	}
	return true;
}

static bool
decode_type(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	out->kind = ASH_CHANGE_TYPE;
	if (!read_stream_xid(r, state, out) ||
		!read_uint32(r, &out->u.type.type_oid) ||
		!read_namespace(r, &out->u.type.nspname) ||
		!read_name(r, &out->u.type.typname))
		return false;
	if (out->u.type.type_oid == 0)
		return reader_fail(r, ERR_TYPEOID);
	return true;
}

static bool
decode_insert(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	uint8		marker;

	out->kind = ASH_CHANGE_INSERT;
	if (!read_stream_xid(r, state, out) ||
		!read_relid(r, &out->u.insert.relid) ||
		!read_byte(r, &marker))
		return false;
	if (marker != PGO_TUPLE_NEW)
		return reader_fail(r, ERR_TUPLE_MARKER);
	return read_tuple(r, &out->u.insert.newtup, false);
}

static bool
decode_update(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	uint8		marker;

	out->kind = ASH_CHANGE_UPDATE;
	out->u.update.oldkind = 0;
	if (!read_stream_xid(r, state, out) ||
		!read_relid(r, &out->u.update.relid) ||
		!read_byte(r, &marker))
		return false;

	if (marker != PGO_TUPLE_NEW)
	{
		if (!read_old_tuple(r, marker, &out->u.update.oldkind,
							&out->u.update.oldtup) ||
			!read_byte(r, &marker))
			return false;
	}
	if (marker != PGO_TUPLE_NEW)
		return reader_fail(r, ERR_TUPLE_MARKER);
	return read_tuple(r, &out->u.update.newtup, true);
}

static bool
decode_delete(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	uint8		marker;

	out->kind = ASH_CHANGE_DELETE;
	if (!read_stream_xid(r, state, out) ||
		!read_relid(r, &out->u.delete.relid) ||
		!read_byte(r, &marker))
		return false;
	return read_old_tuple(r, marker, &out->u.delete.oldkind,
						  &out->u.delete.oldtup);
}

static bool
decode_truncate(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	int32		nrelids;
	uint8		flags;
	int			i;

	out->kind = ASH_CHANGE_TRUNCATE;
	if (!read_stream_xid(r, state, out) ||
		!read_int32(r, &nrelids) ||
		!read_byte(r, &flags))
		return false;
	if ((flags & ~(PGO_TRUNCATE_CASCADE | PGO_TRUNCATE_RESTART_SEQS)) != 0)
		return reader_fail(r, ERR_FLAGS);
	if (nrelids < 0 || (Size) nrelids > reader_remaining(r) / 4)
		return reader_fail(r, ERR_NRELIDS);

	out->u.truncate.cascade = (flags & PGO_TRUNCATE_CASCADE) != 0;
	out->u.truncate.restart_seqs = (flags & PGO_TRUNCATE_RESTART_SEQS) != 0;
	out->u.truncate.nrelids = nrelids;
	out->u.truncate.relids = NULL;
	if (nrelids > 0)
		out->u.truncate.relids = palloc(sizeof(uint32) * nrelids);

	for (i = 0; i < nrelids; i++)
	{
		if (!read_relid(r, &out->u.truncate.relids[i]))
			return false;
	}
	return true;
}

static bool
decode_message(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	uint8		flags;
	int32		len;

	out->kind = ASH_CHANGE_MESSAGE;
	if (!read_stream_xid(r, state, out) ||
		!read_byte(r, &flags))
		return false;
	if ((flags & ~PGO_MESSAGE_TRANSACTIONAL) != 0)
		return reader_fail(r, ERR_FLAGS);
	out->u.message.transactional = (flags & PGO_MESSAGE_TRANSACTIONAL) != 0;

	if (!read_lsn(r, &out->u.message.lsn) ||
		!read_string(r, 0, &out->u.message.prefix) ||
		!read_int32(r, &len))
		return false;
	if (len < 0 || (Size) len > reader_remaining(r))
		return reader_fail(r, ERR_MSG_LEN);
	out->u.message.content_len = len;
	return read_bytes_copy(r, (Size) len, &out->u.message.content);
}

static bool
decode_stream_start(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	uint8		first;

	out->kind = ASH_CHANGE_STREAM_START;
	if (state->in_stream)
		return reader_fail(r, ERR_IN_STREAM);
	if (!read_valid_xid(r, &out->u.stream_start.xid) ||
		!read_byte(r, &first))
		return false;
	if (first > 1)
		return reader_fail(r, ERR_SEGMENT);
	out->u.stream_start.first_segment = (first == 1);
	return true;
}

static bool
decode_stream_stop(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	out->kind = ASH_CHANGE_STREAM_STOP;
	if (!state->in_stream)
		return reader_fail(r, ERR_NOT_IN_STREAM);
	return true;
}

static bool
decode_stream_commit(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	out->kind = ASH_CHANGE_STREAM_COMMIT;
	if (state->in_stream)
		return reader_fail(r, ERR_IN_STREAM);
	if (!read_valid_xid(r, &out->u.stream_commit.xid) ||
		!read_byte(r, &out->u.stream_commit.flags))
		return false;
	if (out->u.stream_commit.flags != PGO_COMMIT_FLAGS_KNOWN)
		return reader_fail(r, ERR_FLAGS);
	if (!read_lsn(r, &out->u.stream_commit.commit_lsn) ||
		!read_lsn(r, &out->u.stream_commit.end_lsn) ||
		!read_int64(r, &out->u.stream_commit.commit_time))
		return false;
	if (out->u.stream_commit.commit_lsn == InvalidXLogRecPtr ||
		out->u.stream_commit.end_lsn == InvalidXLogRecPtr)
		return reader_fail(r, ERR_LSN);
	return true;
}

static bool
decode_stream_abort(PgoReader *r, AshPgoutputState *state, AshChange *out)
{
	out->kind = ASH_CHANGE_STREAM_ABORT;
	if (state->in_stream)
		return reader_fail(r, ERR_IN_STREAM);
	return read_valid_xid(r, &out->u.stream_abort.xid) &&
		read_valid_xid(r, &out->u.stream_abort.subxid);
}

/*
 * Decode one pgoutput message; see decode_pgoutput.h.
 */
bool
ash_decode_pgoutput(AshPgoutputState *state, const char *data, int len,
					AshChange *out, const char **error)
{
	PgoReader	reader;
	uint8		tag;
	bool		ok;

	if (error == NULL)
		return false;
	*error = NULL;
	if (state == NULL || out == NULL)
	{
		*error = ERR_BAD_ARGS;
		return false;
	}

	memset(out, 0, sizeof(AshChange));
	out->xid = InvalidTransactionId;

	if (data == NULL || len <= 0)
	{
		*error = ERR_EMPTY;
		return false;
	}
	if (state->proto_version < 1 || state->proto_version > 3)
	{
		*error = ERR_PROTO_VERSION;
		return false;
	}

	reader.cur = (const unsigned char *) data;
	reader.end = reader.cur + len;
	reader.error = NULL;

	(void) read_byte(&reader, &tag);	/* len > 0: cannot fail */

	switch (tag)
	{
		case PGO_MSG_BEGIN:
			ok = decode_begin(&reader, state, out);
			break;
		case PGO_MSG_COMMIT:
			ok = decode_commit(&reader, state, out);
			break;
		case PGO_MSG_ORIGIN:
			ok = decode_origin(&reader, state, out);
			break;
		case PGO_MSG_RELATION:
			ok = decode_relation(&reader, state, out);
			break;
		case PGO_MSG_TYPE:
			ok = decode_type(&reader, state, out);
			break;
		case PGO_MSG_INSERT:
			ok = decode_insert(&reader, state, out);
			break;
		case PGO_MSG_UPDATE:
			ok = decode_update(&reader, state, out);
			break;
		case PGO_MSG_DELETE:
			ok = decode_delete(&reader, state, out);
			break;
		case PGO_MSG_TRUNCATE:
			ok = decode_truncate(&reader, state, out);
			break;
		case PGO_MSG_MESSAGE:
			ok = decode_message(&reader, state, out);
			break;
		case PGO_MSG_STREAM_START:
			ok = streaming_allowed(&reader, state) &&
				decode_stream_start(&reader, state, out);
			break;
		case PGO_MSG_STREAM_STOP:
			ok = streaming_allowed(&reader, state) &&
				decode_stream_stop(&reader, state, out);
			break;
		case PGO_MSG_STREAM_COMMIT:
			ok = streaming_allowed(&reader, state) &&
				decode_stream_commit(&reader, state, out);
			break;
		case PGO_MSG_STREAM_ABORT:
			ok = streaming_allowed(&reader, state) &&
				decode_stream_abort(&reader, state, out);
			break;
		case PGO_MSG_BEGIN_PREPARE:
		case PGO_MSG_PREPARE:
		case PGO_MSG_COMMIT_PREPARED:
		case PGO_MSG_ROLLBACK_PREPARED:
		case PGO_MSG_STREAM_PREPARE:
			ok = reader_fail(&reader, ERR_TWO_PHASE);
			break;
		default:
			/* protocol violation */
			ok = reader_fail(&reader, ERR_UNKNOWN_TAG);
			break;
	}

	if (ok && reader.cur != reader.end)
		ok = reader_fail(&reader, ERR_TRAILING);

	if (!ok)
	{
		*error = reader.error != NULL ? reader.error : ERR_TRUNCATED;
		return false;
	}

	/* Only a fully decoded S or E moves the streaming-block state. */
	if (out->kind == ASH_CHANGE_STREAM_START)
		state->in_stream = true;
	else if (out->kind == ASH_CHANGE_STREAM_STOP)
		state->in_stream = false;

	return true;
}
