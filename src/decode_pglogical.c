/*-------------------------------------------------------------------------
 *
 * decode_pglogical.c
 *	  Pure decoder of pglogical_output's native protocol, version 1 (the
 *	  only one pglogical 2.x speaks), with text transfer of every value.
 *
 * NOTES
 *	  Framing as for pgoutput: the payload of one XLogData frame is one
 *	  message; integers are big-endian; LSNs and timestamps are int64.
 *	  Messages (pglogical_proto_native.c), each after its tag byte and a
 *	  flags byte that must be 0:
 *		S  (no flags byte) format(=1), then NUL-terminated key and value
 *		   strings to the end: the startup message, sent once before the
 *		   first transaction of a session
 *		B  final_lsn, commit_time, xid
 *		C  commit_lsn, end_lsn, commit_time
 *		O  origin_lsn, length(uint8, with the NUL), name
 *		R  relid, length(uint8) nspname, length(uint8) relname, 'A',
 *		   natts(uint16), natts x ('C', flags(bit 0: replica identity), 'N',
 *		   length(uint16) name)
 *		I  relid, 'N', tuple
 *		U  relid, ['K' tuple], 'N', tuple
 *		D  relid, 'K', tuple
 *	  Every length of a name counts its terminating NUL.  A tuple is 'T',
 *	  natts(uint16), then per column 'n' (null), 'u' (unchanged TOAST
 *	  value), or 't' with an int32 length (counting a terminating NUL) and
 *	  the text.  'b' and 'i' (send/recv and internal binary) come only when
 *	  asked for; the session never asks, so they are refused.
 *
 *	  The startup message is checked against the session's request: text
 *	  transfer only (binary.internal_basetypes and binary.binary_basetypes
 *	  both false), the expected encoding, protocol 1 in range, and
 *	  transaction information present (no_txinfo false).  Nothing else is
 *	  accepted before it.
 *
 *	  The Relation message names columns but carries no types and no
 *	  replica identity: the caller completes both from the source's catalog
 *	  (pipeline_pglogical.c).  pglogical sends the whole old row under the
 *	  'K' marker when the table's replica identity is FULL; the decoder
 *	  reports what is on the wire and the caller, which knows the identity,
 *	  relabels it.
 *
 *	  pglogical.queue.  pglogical replicates TRUNCATE (and
 *	  replicate_ddl_command, sequence states, table syncs) as rows inserted
 *	  into its queue table, which reach the stream as an ordinary Relation
 *	  message and Inserts.  The decoder recognises the table by name, keeps
 *	  its relation id and the positions of message_type and message, and
 *	  reports a queued TRUNCATE ('T') as ASH_PGL_QUEUED_TRUNCATE with the
 *	  truncated table's schema and name, parsed from the message: exactly
 *	  the JSON object pglogical_finish_truncate() writes,
 *	  {"schema_name": "...","table_name": "..."} (each key once, strings
 *	  with JSON escapes, a \u escape only for a control character as
 *	  escape_json() writes them); anything else is malformed.  The other kinds
 *	  ('Q' SQL, 'S' sequence, 'A' table sync) change no row of a replicated
 *	  table and are consumed (a schema change still arrives as a new
 *	  Relation message).  Any other kind, or an update or delete of the
 *	  queue, is malformed.
 *
 *	  Invariants as in decode_pgoutput.c: a pure function of (state,
 *	  bytes); bounds-checked reads; counts checked against what remains
 *	  before allocating; static error strings that never contain a byte of
 *	  the message.
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
#include "hex.h"
#include "decode_pglogical.h"

#define PGL_MAX_ATTS		1664	/* MaxTupleAttributeNumber */
#define PGL_MAX_ALLOC		((Size) 0x3fffffff)	/* MaxAllocSize */
#define PGL_MAX_NAME		64		/* NAMEDATALEN, with the NUL */

#ifndef FRONTEND
StaticAssertDecl(PGL_MAX_ATTS == MaxTupleAttributeNumber,
				 "PGL_MAX_ATTS must match MaxTupleAttributeNumber");
StaticAssertDecl(PGL_MAX_ALLOC == MaxAllocSize,
				 "PGL_MAX_ALLOC must match MaxAllocSize");
StaticAssertDecl(PGL_MAX_NAME == NAMEDATALEN, "PGL_MAX_NAME must match NAMEDATALEN");
#endif

#define PGL_STARTUP_FORMAT_FLAT 1
#define PGL_PROTO_VERSION		1
#define PGL_RELCOL_IS_KEY		0x01
/* 'C' flags 'N' length(2) and a one-byte name with its NUL */
#define PGL_RELCOL_MIN_BYTES	7

#define ERR_EMPTY			"empty pglogical message"
#define ERR_BAD_ARGS		"invalid arguments to pglogical decoder"
#define ERR_TRUNCATED		"truncated pglogical message"
#define ERR_TRAILING		"trailing bytes after pglogical message"
#define ERR_UNKNOWN_TAG		"unknown pglogical message type"
#define ERR_FLAGS			"unknown flags in pglogical message"
#define ERR_BEFORE_STARTUP	"pglogical message before the startup message"
#define ERR_STARTUP_TWICE	"second pglogical startup message"
#define ERR_STARTUP_FORMAT	"unsupported pglogical startup message format"
#define ERR_STARTUP_PARAM	"unterminated parameter in pglogical startup message"
#define ERR_STARTUP_PROTO	"pglogical startup message: protocol version 1 not offered"
#define ERR_STARTUP_BINARY	"pglogical startup message: binary transfer not refused"
#define ERR_STARTUP_ENC		"pglogical startup message: encoding differs from the one asked for"
#define ERR_STARTUP_TXINFO	"pglogical startup message: transaction information withheld"
#define ERR_STARTUP_MISSING	"pglogical startup message lacks a required parameter"
#define ERR_XID				"invalid transaction id in pglogical message"
#define ERR_LSN				"invalid LSN in pglogical message"
#define ERR_RELID			"invalid relation id in pglogical message"
#define ERR_NAME			"invalid name in pglogical message"
#define ERR_MARKER			"unexpected marker in pglogical message"
#define ERR_NATTS			"column count out of range in pglogical message"
#define ERR_COLKIND			"unknown or unrequested column kind in pglogical tuple"
#define ERR_VALUE_LEN		"column value length out of range in pglogical tuple"
#define ERR_TEXT_NUL		"text value in pglogical tuple is not one NUL-terminated string"
#define ERR_UNCHANGED_INS	"unchanged TOAST marker in pglogical insert"
#define ERR_QUEUE			"malformed pglogical queue change"

typedef struct PglReader
{
	const unsigned char *cur;
	const unsigned char *end;
	const char *error;
} PglReader;

static inline bool
fail(PglReader *r, const char *error)
{
	if (r->error == NULL)
		r->error = error;
	return false;
}

static inline Size
remaining(const PglReader *r)
{
	return (Size) (r->end - r->cur);
}

static bool
read_byte(PglReader *r, uint8 *v)
{
	if (remaining(r) < 1)
		return fail(r, ERR_TRUNCATED);
	*v = r->cur[0];
	r->cur++;
	return true;
}

static bool
read_uint16(PglReader *r, uint16 *v)
{
	if (remaining(r) < 2)
		return fail(r, ERR_TRUNCATED);
	*v = (uint16) (((uint16) r->cur[0] << 8) | (uint16) r->cur[1]);
	r->cur += 2;
	return true;
}

static bool
read_uint32(PglReader *r, uint32 *v)
{
	if (remaining(r) < 4)
		return fail(r, ERR_TRUNCATED);
	*v = ((uint32) r->cur[0] << 24) | ((uint32) r->cur[1] << 16) |
		((uint32) r->cur[2] << 8) | (uint32) r->cur[3];
	r->cur += 4;
	return true;
}

static bool
read_uint64(PglReader *r, uint64 *v)
{
	uint32		hi;
	uint32		lo;

	if (remaining(r) < 8)
		return fail(r, ERR_TRUNCATED);
	(void) read_uint32(r, &hi);
	(void) read_uint32(r, &lo);
	*v = ((uint64) hi << 32) | (uint64) lo;
	return true;
}

static bool
read_flags(PglReader *r)
{
	uint8		f;

	if (!read_byte(r, &f))
		return false;
	return f == 0 ? true : fail(r, ERR_FLAGS);
}

static bool
read_marker(PglReader *r, char want)
{
	uint8		m;

	if (!read_byte(r, &m))
		return false;
	return m == (uint8) want ? true : fail(r, ERR_MARKER);
}

static bool
read_relid(PglReader *r, uint32 *relid)
{
	if (!read_uint32(r, relid))
		return false;
	return *relid != 0 ? true : fail(r, ERR_RELID);
}

/*
 * A name of n bytes counting its NUL: not empty, NUL exactly at its end,
 * short enough for NAMEDATALEN.
 */
static bool
read_name(PglReader *r, Size n, char **out)
{
	char	   *s;

	if (n > remaining(r))
		return fail(r, ERR_TRUNCATED);
	if (n < 2 || n > PGL_MAX_NAME || r->cur[n - 1] != '\0' ||
		memchr(r->cur, '\0', n - 1) != NULL)
		return fail(r, ERR_NAME);
	s = palloc(n);
	memcpy(s, r->cur, n);
	r->cur += n;
	*out = s;
	return true;
}

static bool
read_name8(PglReader *r, char **out)
{
	uint8		n;

	return read_byte(r, &n) && read_name(r, n, out);
}

static bool
read_tuple(PglReader *r, AshTuple *tup, bool is_insert)
{
	uint16		natts;

	if (!read_marker(r, 'T') || !read_uint16(r, &natts))
		return false;
	if (natts > PGL_MAX_ATTS || natts > remaining(r))
		return fail(r, ERR_NATTS);
	tup->natts = natts;
	tup->cols = palloc0(sizeof(AshColumnValue) * Max(natts, 1));
	for (int i = 0; i < natts; i++)
	{
		AshColumnValue *c = &tup->cols[i];
		uint8		kind;
		uint32		len;

		if (!read_byte(r, &kind))
			return false;
		switch (kind)
		{
			case 'n':
				c->status = ASH_COL_NULL;
				break;
			case 'u':
				if (is_insert)
					return fail(r, ERR_UNCHANGED_INS);
				c->status = ASH_COL_UNCHANGED;
				break;
			case 't':
				if (!read_uint32(r, &len))
					return false;
				if (len < 1 || len > remaining(r) || len > PGL_MAX_ALLOC)
					return fail(r, ERR_VALUE_LEN);
				if (r->cur[len - 1] != '\0' || memchr(r->cur, '\0', len - 1) != NULL)
					return fail(r, ERR_TEXT_NUL);
				c->status = ASH_COL_TEXT;
				c->len = (int) (len - 1);
				c->data = palloc(len);
				memcpy(c->data, r->cur, len);
				r->cur += len;
				break;
			default:
				return fail(r, ERR_COLKIND);
		}
	}
	return true;
}

/* The startup message: what the session asked for, confirmed. */
static bool
decode_startup(AshPglogicalState *state, PglReader *r)
{
	uint8		format;
	bool		have_internal = false,
				have_binary = false,
				have_encoding = false,
				proto_ok_min = false,
				proto_ok_max = false;

	if (state->startup_seen)
		return fail(r, ERR_STARTUP_TWICE);
	if (!read_byte(r, &format))
		return false;
	if (format != PGL_STARTUP_FORMAT_FLAT)
		return fail(r, ERR_STARTUP_FORMAT);
	while (remaining(r) > 0)
	{
		const char *key = (const char *) r->cur;
		const char *val;
		const unsigned char *nul = memchr(r->cur, '\0', remaining(r));

		if (nul == NULL)
			return fail(r, ERR_STARTUP_PARAM);
		r->cur = nul + 1;
		val = (const char *) r->cur;
		nul = memchr(r->cur, '\0', remaining(r));
		if (nul == NULL)
			return fail(r, ERR_STARTUP_PARAM);
		r->cur = nul + 1;

		if (strcmp(key, "min_proto_version") == 0)
		{
			if (strcmp(val, "1") != 0 && strcmp(val, "0") != 0)
				return fail(r, ERR_STARTUP_PROTO);
			proto_ok_min = true;
		}
		else if (strcmp(key, "max_proto_version") == 0)
		{
			if (strspn(val, "0123456789") != strlen(val) || strlen(val) == 0 ||
				strlen(val) > 4 || atoi(val) < PGL_PROTO_VERSION)
				return fail(r, ERR_STARTUP_PROTO);
			proto_ok_max = true;
		}
		else if (strcmp(key, "binary.internal_basetypes") == 0)
		{
			if (strcmp(val, "f") != 0)
				return fail(r, ERR_STARTUP_BINARY);
			have_internal = true;
		}
		else if (strcmp(key, "binary.binary_basetypes") == 0)
		{
			if (strcmp(val, "f") != 0)
				return fail(r, ERR_STARTUP_BINARY);
			have_binary = true;
		}
		else if (strcmp(key, "encoding") == 0)
		{
			if (state->expected_encoding == NULL ||
				pg_strcasecmp(val, state->expected_encoding) != 0)
				return fail(r, ERR_STARTUP_ENC);
			have_encoding = true;
		}
		else if (strcmp(key, "no_txinfo") == 0)
		{
			if (strcmp(val, "f") != 0)
				return fail(r, ERR_STARTUP_TXINFO);
		}
		/* everything else is information about the source */
	}
	if (!have_internal || !have_binary || !have_encoding || !proto_ok_min || !proto_ok_max)
		return fail(r, ERR_STARTUP_MISSING);
	state->startup_seen = true;
	return true;
}

static bool
decode_relation(AshPglogicalState *state, PglReader *r, AshChange *out, bool *is_queue)
{
	AshRelation *rel = &out->u.relation;
	uint16		natts;

	out->kind = ASH_CHANGE_RELATION;
	if (!read_flags(r) || !read_relid(r, &rel->relid) ||
		!read_name8(r, &rel->nspname) || !read_name8(r, &rel->relname) ||
		!read_marker(r, 'A') || !read_uint16(r, &natts))
		return false;
	if (natts > PGL_MAX_ATTS || (Size) natts * PGL_RELCOL_MIN_BYTES > remaining(r))
		return fail(r, ERR_NATTS);
	rel->replident = 0;
	rel->natts = natts;
	rel->cols = palloc0(sizeof(AshRelColumn) * Max(natts, 1));
	for (int i = 0; i < natts; i++)
	{
		AshRelColumn *c = &rel->cols[i];
		uint8		flags;
		uint16		len;

		if (!read_marker(r, 'C') || !read_byte(r, &flags))
			return false;
		if ((flags & ~PGL_RELCOL_IS_KEY) != 0)
			return fail(r, ERR_FLAGS);
		if (!read_marker(r, 'N') || !read_uint16(r, &len) || !read_name(r, len, &c->name))
			return false;
		c->is_key = (flags & PGL_RELCOL_IS_KEY) != 0;
		c->type_oid = 0;
		c->typmod = -1;
	}

	*is_queue = strcmp(rel->nspname, "pglogical") == 0 && strcmp(rel->relname, "queue") == 0;
	if (*is_queue)
	{
		state->queue_type_col = -1;
		state->queue_message_col = -1;
		for (int i = 0; i < natts; i++)
		{
			if (strcmp(rel->cols[i].name, "message_type") == 0)
				state->queue_type_col = i;
			if (strcmp(rel->cols[i].name, "message") == 0)
				state->queue_message_col = i;
		}
		if (state->queue_type_col < 0 || state->queue_message_col < 0)
			return fail(r, ERR_QUEUE);
		state->queue_relid = rel->relid;
		state->queue_natts = natts;
	}
	else if (rel->relid == state->queue_relid)
		state->queue_relid = 0;	/* an OID reused: no longer the queue */
	return true;
}

/* JSON whitespace */
static const char *
skip_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

/*
 * One JSON string at *pp into buf (at most PGL_MAX_NAME - 1 bytes, NUL
 * terminated); false when malformed, empty or too long.
 */
static bool
json_name(const char **pp, const char *end, char *buf)
{
	const char *p = *pp;
	int			n = 0;

	if (p >= end || *p != '"')
		return false;
	p++;
	while (p < end && *p != '"')
	{
		char		c = *p++;

		if ((unsigned char) c < 0x20)
			return false;
		if (c == '\\')
		{
			if (p >= end)
				return false;
			c = *p++;
			switch (c)
			{
				case '"':
				case '\\':
				case '/':
					break;
				case 'b':
					c = '\b';
					break;
				case 'f':
					c = '\f';
					break;
				case 'n':
					c = '\n';
					break;
				case 'r':
					c = '\r';
					break;
				case 't':
					c = '\t';
					break;
				case 'u':
					{
						int			v = 0;

						if (end - p < 4)
							return false;
						for (int i = 0; i < 4; i++)
						{
							int			h = ash_hex_digit(p[i]);

							if (h < 0)
								return false;
							v = v * 16 + h;
						}
						p += 4;
						/* escape_json writes \u only for control characters */
						if (v == 0 || v >= 0x20)
							return false;
						c = (char) v;
						break;
					}
				default:
					return false;
			}
		}
		if (n >= PGL_MAX_NAME - 1)
			return false;
		buf[n++] = c;
	}
	if (p >= end || n == 0)
		return false;
	buf[n] = '\0';
	*pp = p + 1;
	return true;
}

/* {"schema_name": "...","table_name": "..."}, each key exactly once. */
static bool
parse_truncate_message(const AshColumnValue *v, char **nspname, char **relname)
{
	const char *p = v->data;
	const char *end = v->data + v->len;
	char		key[PGL_MAX_NAME];
	char		nsp[PGL_MAX_NAME] = "";
	char		rel[PGL_MAX_NAME] = "";

	p = skip_ws(p, end);
	if (p >= end || *p++ != '{')
		return false;
	for (int i = 0; i < 2; i++)
	{
		char	   *dest;

		p = skip_ws(p, end);
		if (!json_name(&p, end, key))
			return false;
		if (strcmp(key, "schema_name") == 0 && nsp[0] == '\0')
			dest = nsp;
		else if (strcmp(key, "table_name") == 0 && rel[0] == '\0')
			dest = rel;
		else
			return false;
		p = skip_ws(p, end);
		if (p >= end || *p++ != ':')
			return false;
		p = skip_ws(p, end);
		if (!json_name(&p, end, dest))
			return false;
		p = skip_ws(p, end);
		if (p >= end || *p++ != (i == 0 ? ',' : '}'))
			return false;
	}
	if (skip_ws(p, end) != end)
		return false;
	*nspname = palloc(strlen(nsp) + 1);
	memcpy(*nspname, nsp, strlen(nsp) + 1);
	*relname = palloc(strlen(rel) + 1);
	memcpy(*relname, rel, strlen(rel) + 1);
	return true;
}

static AshPglogicalResult
queue_fail(PglReader *r)
{
	(void) fail(r, ERR_QUEUE);
	return ASH_PGL_ERROR;
}

/* An insert into pglogical.queue: which kind of message it queues. */
static AshPglogicalResult
queue_insert(AshPglogicalState *state, PglReader *r, const AshTuple *tup)
{
	const AshColumnValue *c;

	if (tup->natts != state->queue_natts)
		return queue_fail(r);
	c = &tup->cols[state->queue_type_col];
	if (c->status != ASH_COL_TEXT || c->len != 1)
		return queue_fail(r);
	switch (c->data[0])
	{
		case 'T':
			c = &tup->cols[state->queue_message_col];
			if (c->status != ASH_COL_TEXT ||
				!parse_truncate_message(c, &state->truncated_nspname,
										&state->truncated_relname))
				return queue_fail(r);
			return ASH_PGL_QUEUED_TRUNCATE;
		case 'Q':
		case 'S':
		case 'A':
			return ASH_PGL_NONE;
		default:
			return queue_fail(r);
	}
}

AshPglogicalResult
ash_decode_pglogical(AshPglogicalState *state, const char *data, int len, AshChange *out,
					 const char **error)
{
	PglReader	r;
	uint8		tag;
	uint8		marker;
	AshPglogicalResult result = ASH_PGL_CHANGE;
	bool		ok;

	if (error == NULL)
		return ASH_PGL_ERROR;
	*error = NULL;
	if (state == NULL || out == NULL || data == NULL || len < 0)
	{
		*error = ERR_BAD_ARGS;
		return ASH_PGL_ERROR;
	}
	if (len == 0)
	{
		*error = ERR_EMPTY;
		return ASH_PGL_ERROR;
	}
	memset(out, 0, sizeof(*out));
	out->xid = InvalidTransactionId;
	state->truncated_nspname = state->truncated_relname = NULL;
	r.cur = (const unsigned char *) data;
	r.end = r.cur + len;
	r.error = NULL;
	(void) read_byte(&r, &tag);

	if (tag != 'S' && !state->startup_seen)
	{
		*error = ERR_BEFORE_STARTUP;
		return ASH_PGL_ERROR;
	}

	switch (tag)
	{
		case 'S':
			ok = decode_startup(state, &r);
			result = ASH_PGL_NONE;
			break;
		case 'B':
			{
				uint64		v = 0;
				uint32		xid = 0;

				out->kind = ASH_CHANGE_BEGIN;
				ok = read_flags(&r) && read_uint64(&r, &v);
				if (ok && v == 0)
					ok = fail(&r, ERR_LSN);
				out->u.begin.final_lsn = (XLogRecPtr) v;
				if (ok)
					ok = read_uint64(&r, &v);
				out->u.begin.commit_time = (TimestampTz) v;
				if (ok)
					ok = read_uint32(&r, &xid);
				if (ok && xid == InvalidTransactionId)
					ok = fail(&r, ERR_XID);
				out->u.begin.xid = xid;
				break;
			}
		case 'C':
			{
				uint64		c = 0,
							e = 0,
							t = 0;

				out->kind = ASH_CHANGE_COMMIT;
				ok = read_flags(&r) && read_uint64(&r, &c) && read_uint64(&r, &e) &&
					read_uint64(&r, &t);
				if (ok && (c == 0 || e == 0))
					ok = fail(&r, ERR_LSN);
				if (ok)
				{
					out->u.commit.flags = 0;
					out->u.commit.commit_lsn = (XLogRecPtr) c;
					out->u.commit.end_lsn = (XLogRecPtr) e;
					out->u.commit.commit_time = (TimestampTz) t;
				}
				break;
			}
		case 'O':
			{
				uint64		v = 0;

				out->kind = ASH_CHANGE_ORIGIN;
				ok = read_flags(&r) && read_uint64(&r, &v) && read_name8(&r, &out->u.origin.name);
				out->u.origin.origin_lsn = (XLogRecPtr) v;
				break;
			}
		case 'R':
			{
				bool		is_queue = false;

				ok = decode_relation(state, &r, out, &is_queue);
				if (ok && is_queue)
					result = ASH_PGL_NONE;
				break;
			}
		case 'I':
			out->kind = ASH_CHANGE_INSERT;
			ok = read_flags(&r) && read_relid(&r, &out->u.insert.relid) &&
				read_marker(&r, 'N') && read_tuple(&r, &out->u.insert.newtup, true);
			/* (trailing bytes fail below) */
			if (ok && out->u.insert.relid == state->queue_relid && remaining(&r) == 0)
			{
				result = queue_insert(state, &r, &out->u.insert.newtup);
				ok = result != ASH_PGL_ERROR;
			}
			break;
		case 'U':
			out->kind = ASH_CHANGE_UPDATE;
			ok = read_flags(&r) && read_relid(&r, &out->u.update.relid) &&
				read_byte(&r, &marker);
			if (ok && (marker == 'K' || marker == 'O'))
			{
				out->u.update.oldkind = 'K';
				ok = read_tuple(&r, &out->u.update.oldtup, false) && read_byte(&r, &marker);
			}
			if (ok && marker != 'N')
				ok = fail(&r, ERR_MARKER);
			if (ok)
				ok = read_tuple(&r, &out->u.update.newtup, false);
			if (ok && out->u.update.relid == state->queue_relid)
				ok = fail(&r, ERR_QUEUE);
			break;
		case 'D':
			out->kind = ASH_CHANGE_DELETE;
			ok = read_flags(&r) && read_relid(&r, &out->u.delete.relid) &&
				read_byte(&r, &marker);
			if (ok && marker != 'K' && marker != 'O')
				ok = fail(&r, ERR_MARKER);
			if (ok)
			{
				out->u.delete.oldkind = 'K';
				ok = read_tuple(&r, &out->u.delete.oldtup, false);
			}
			if (ok && out->u.delete.relid == state->queue_relid)
				ok = fail(&r, ERR_QUEUE);
			break;
		default:
			ok = fail(&r, ERR_UNKNOWN_TAG);
			break;
	}

	if (ok && remaining(&r) > 0)
		ok = fail(&r, ERR_TRAILING);
	if (!ok)
	{
		*error = r.error ? r.error : ERR_TRUNCATED;
		return ASH_PGL_ERROR;
	}
	return result;
}
