/*-------------------------------------------------------------------------
 *
 * decode_wal2json.c
 *	  Pure decoder of wal2json's format version 2, as wal2json 2.5 writes
 *	  it with the options the pipeline asks for (pipeline.c):
 *	  format-version 2, include-transaction, include-xids, include-lsn,
 *	  include-timestamp, include-schemas, include-type-oids (not
 *	  include-types: why in pipeline.c), add-tables, every action,
 *	  write-in-chunks off; include-origin under origin => 'none' (then
 *	  every message carries "origin", its transaction's replication origin
 *	  id, 0 for a local one, null on a non-transactional message; BEGIN
 *	  hands it over in begin.origin_id).
 *
 * NOTES
 *	  Framing.  One XLogData payload is one JSON object (write-in-chunks
 *	  off), one of:
 *		B  {action, xid, timestamp, lsn (commit LSN), nextlsn (end LSN)}
 *		C  {action, xid, timestamp, lsn (commit LSN), nextlsn (end LSN)}
 *		I  {action, xid, timestamp, lsn, schema, table, columns}
 *		U  {action, xid, timestamp, lsn, schema, table, columns[, identity]}
 *		D  {action, xid, timestamp, lsn, schema, table, identity}
 *		T  {action, xid, timestamp, lsn, schema, table}	(one per table)
 *		M  {action, xid|null, timestamp|null, lsn, transactional, prefix,
 *			content}
 *	  A column is {name, typeoid, value}; a "type" (include-types, not
 *	  asked for) is accepted and ignored: the type is judged by its OID
 *	  alone.  Any other key, a duplicate
 *	  key, a missing key or a value of the wrong JSON type is malformed.
 *
 *	  Relations.  wal2json sends none: the caller describes the table set
 *	  from the source's catalogs (AshWal2jsonState.tables) and a change is
 *	  placed by (schema, table) and column name into that description.
 *	  wal2json writes a row's columns in attribute order, skipping dropped
 *	  ones, as the description lists them: each column is first tried at
 *	  the position after the previous one (one name comparison), and only
 *	  a name that is not there is searched for (reordered input still
 *	  decodes; the name, not the position, decides).  A
 *	  change that does not fit it -- a column the description lacks or has
 *	  with another type OID, an insert or full old row without one of its
 *	  columns, an update without a column that cannot be stored out of
 *	  line, a key column missing from the identity of a keyed table --
 *	  is drift: state->drift is set and the caller re-describes and tries
 *	  again (pipeline.c).  A table outside the set is malformed (add-tables
 *	  names exactly the set).
 *
 *	  Values.  wal2json writes each value with its type's output function
 *	  and then: int2/4/8, oid, float4/8 and numeric as JSON numbers, bool as
 *	  true/false, bytea as hex without the leading \x, everything else as a
 *	  JSON string.  We invert exactly that, by the column's type OID, into
 *	  the text form pgoutput sends, and refuse anything else.  wal2json
 *	  writes NaN, Infinity and -Infinity of float4/8 and numeric as null,
 *	  which cannot be told from NULL: such a null fails with
 *	  ash_wal2json_err_ambiguous (docs/reasons.md#decoder_value_ambiguous).
 *	  An unchanged TOAST value is left out of "columns": the column is
 *	  ASH_COL_UNCHANGED, as pgoutput's 'u'; only a column the description
 *	  marks toastable (varlena, storage not plain) may be left out so --
 *	  any other missing from an update is drift (a dropped column).
 *
 *	  Old rows.  "identity" is the replica identity: the key columns (a
 *	  key tuple, 'K') or, under REPLICA IDENTITY FULL, the whole old row
 *	  ('O').  For an update that kept its key wal2json repeats the key
 *	  from the new row; as pgoutput sends no old key then, neither do we.
 *	  An update of a table without identity comes without one (oldkind 0);
 *	  such a table's deletes wal2json drops (see allow_keyless_tables).
 *
 *	  Transactions.  B opens, C closes; every change but a
 *	  non-transactional message must be inside, with B's xid.  The state
 *	  is updated only by a message that decoded completely.
 *
 *	  Invariants as decode_pgoutput.c: no ereport/elog, no catalog access;
 *	  every read is bounds-checked against [data, data + len); nesting,
 *	  members and elements are bounded, so allocation is a small multiple
 *	  of len; all output is palloc'd in CurrentMemoryContext; errors are
 *	  static strings that never contain a byte of the message.
 *
 *	  This file compiles both in the backend and, with FRONTEND defined, in
 *	  the unit-test and fuzz binaries.
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "access/transam.h"

#include "change.h"
#include "hex.h"
#include "decode_wal2json.h"

/* Type OIDs (pg_type_d.h values, stable across releases) */
#define W2J_BOOLOID		16
#define W2J_BYTEAOID	17
#define W2J_INT8OID		20
#define W2J_INT2OID		21
#define W2J_INT4OID		23
#define W2J_OIDOID		26
#define W2J_FLOAT4OID	700
#define W2J_FLOAT8OID	701
#define W2J_NUMERICOID	1700

#define W2J_MAX_DEPTH		4	/* object > array > object > value */
#define W2J_MAX_MEMBERS		16	/* keys of one object */
#define W2J_MAX_ELEMENTS	1664	/* MaxTupleAttributeNumber */
#define W2J_MAX_NAME		63	/* NAMEDATALEN - 1 */

/* Static, value-free errors. */
const char	ash_wal2json_err_drift[] = "wal2json change does not match its table's description";
const char	ash_wal2json_err_ambiguous[] = "wal2json wrote null for a float or numeric value (NULL, NaN and Infinity look alike)";

#define ERR_BAD_ARGS	"invalid arguments to wal2json decoder"
#define ERR_EMPTY		"empty wal2json message"
#define ERR_SYNTAX		"malformed JSON in wal2json message"
#define ERR_DEPTH		"JSON nested too deeply in wal2json message"
#define ERR_TOO_MANY	"too many JSON members or elements in wal2json message"
#define ERR_TRAILING	"trailing bytes after wal2json message"
#define ERR_STRING_NUL	"NUL character in wal2json string"
#define ERR_NOT_OBJECT	"wal2json message is not a JSON object"
#define ERR_DUP_KEY		"duplicate key in wal2json message"
#define ERR_UNKNOWN_KEY "unknown key in wal2json message"
#define ERR_MISSING_KEY "missing key in wal2json message"
#define ERR_KEY_TYPE	"wrong JSON type for a key of wal2json message"
#define ERR_ACTION		"unknown action in wal2json message"
#define ERR_XID			"invalid transaction id in wal2json message"
#define ERR_LSN			"invalid LSN in wal2json message"
#define ERR_ORIGIN		"invalid replication origin in wal2json message"
#define ERR_ORIGIN_MISMATCH "wal2json change of another origin than its transaction"
#define ERR_TIMESTAMP	"invalid timestamp in wal2json message"
#define ERR_NAME		"invalid name in wal2json message"
#define ERR_TABLE		"wal2json change of a table outside the table set"
#define ERR_TYPEOID		"invalid type id in wal2json column"
#define ERR_VALUE		"wal2json value does not fit its column's type"
#define ERR_DUP_COLUMN	"column repeated in wal2json change"
#define ERR_IN_XACT		"wal2json BEGIN inside a transaction"
#define ERR_NO_XACT		"wal2json change outside a transaction"
#define ERR_XID_MISMATCH "wal2json change of another transaction"
#define ERR_NO_IDENTITY "wal2json delete without identity"

/* ----------------------------------------------------------------
 * A small JSON parser into a tree.
 *
 * One message is parsed with two kinds of allocation, not one per value:
 * nodes come in blocks of W2J_NODE_BLOCK, and every string and number is
 * copied (unescaped, NUL-terminated) into one arena of len + 1 bytes.
 * The arena is large enough: a scalar token of n input bytes takes at
 * most n + 1 arena bytes (a string's unescaped text is no longer than its
 * escaped text, and its two quotes pay for a NUL and the two bytes kept
 * in front of it, see below; a number takes its token and a NUL; true
 * and false take "t" or "f" and a NUL), and each scalar token is preceded
 * by its own '{', '[', ':' or ',' that pays for the one more.  The bound
 * is checked all the same (arena_take), so a mistake in this argument
 * fails the message instead of writing past the arena.
 *
 * Every string has two spare arena bytes in front of it: a bytea value
 * arrives without its leading "\x" (see column_value), which is put back
 * there rather than into a new copy.
 * ----------------------------------------------------------------
 */
#define W2J_NODE_BLOCK	64

typedef enum JKind
{
	J_NULL,
	J_TRUE,
	J_FALSE,
	J_NUMBER,
	J_STRING,
	J_ARRAY,
	J_OBJECT
} JKind;

typedef struct JNode
{
	JKind		kind;
	int			klen;			/* member of an object: its key's length */
	char	   *key;			/* member of an object: its key, NUL-terminated */
	char	   *str;			/* string (unescaped), number token, or "t"/"f"
								 * for true/false: NUL-terminated */
	int			len;
	int			count;			/* members or elements */
	struct JNode *child;		/* first member or element */
	struct JNode *next;			/* next sibling */
} JNode;

typedef struct JParser
{
	const unsigned char *cur;
	const unsigned char *end;
	const char *error;
	char	   *arena;			/* next free byte of the arena */
	char	   *arena_end;
	JNode	   *nodes;			/* next free node of the current block */
	int			nfree;			/* free nodes left in it */
} JParser;

static bool
jfail(JParser *p, const char *error)
{
	if (p->error == NULL)
		p->error = error;
	return false;
}

/* n bytes of the arena, or NULL (see the bound above) */
static char *
arena_take(JParser *p, size_t n)
{
	char	   *s = p->arena;

	if ((size_t) (p->arena_end - p->arena) < n)
		return NULL;
	p->arena += n;
	return s;
}

static JNode *
new_node(JParser *p)
{
	JNode	   *n;

	if (p->nfree == 0)
	{
		p->nodes = palloc(sizeof(JNode) * W2J_NODE_BLOCK);
		p->nfree = W2J_NODE_BLOCK;
	}
	n = p->nodes++;
	p->nfree--;
	memset(n, 0, sizeof(JNode));
	return n;
}

static void
skip_ws_run(JParser *p)
{
	const unsigned char *c = p->cur;

	while (c < p->end && (*c == ' ' || *c == '\t' || *c == '\n' || *c == '\r'))
		c++;
	p->cur = c;
}

/* wal2json writes no whitespace: one comparison for the usual byte */
static inline void
skip_ws(JParser *p)
{
	if (p->cur < p->end && *p->cur <= ' ')
		skip_ws_run(p);
}

static bool
read_hex4(JParser *p, uint32 *v)
{
	*v = 0;
	if (p->end - p->cur < 4)
		return jfail(p, ERR_SYNTAX);
	for (int i = 0; i < 4; i++)
	{
		int			h = ash_hex_digit(p->cur[i]);

		if (h < 0)
			return jfail(p, ERR_SYNTAX);
		*v = (*v << 4) | (uint32) h;
	}
	p->cur += 4;
	return true;
}

/* A byte that stands for itself in a JSON string: not '"', '\\', < 0x20. */
#define JP16(x) x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x
static const bool json_plain[256] = {
	JP16(false), JP16(false),	/* control characters */
	true, true, false, true, true, true, true, true,	/* ' ' to '\'': not '"' */
	true, true, true, true, true, true, true, true,
	JP16(true), JP16(true),		/* '0' to '?', '@' to 'O' */
	true, true, true, true, true, true, true, true,	/* 'P' to '_': not '\\' */
	true, true, true, true, false, true, true, true,
	JP16(true), JP16(true),		/* '`' to DEL */
	JP16(true), JP16(true), JP16(true), JP16(true),	/* 0x80 to 0xFF */
	JP16(true), JP16(true), JP16(true), JP16(true)
};
#undef JP16

/*
 * A string at p->cur (the opening quote): unescaped into the arena,
 * NUL-terminated.  What wal2json writes mostly has no escape at all: that
 * run is found in one scan and copied with memcpy.
 */
static bool
parse_string(JParser *p, char **out, int *outlen)
{
	const unsigned char *start;
	const unsigned char *run_end;
	const unsigned char *c;
	const unsigned char *end = p->end;
	char	   *buf;
	int			n;

	if (p->cur >= end || *p->cur != '"')
		return jfail(p, ERR_SYNTAX);
	/* scanned through a local: a byte read could alias p->cur itself */
	c = start = p->cur + 1;
	/* the plain run: no quote, no escape, no raw control character */
	while (c < end && json_plain[*c])
		c++;
	run_end = c;
	/* bound the copy by the escaped length first */
	while (c < end && *c != '"')
	{
		if (*c == '\\')
		{
			if (end - c < 2)
			{
				p->cur = c;
				return jfail(p, ERR_SYNTAX);
			}
			c++;
		}
		c++;
	}
	p->cur = c;
	if (c >= end)
		return jfail(p, ERR_SYNTAX);
	buf = arena_take(p, (p->cur - start) + 3);
	if (buf == NULL)
		return jfail(p, ERR_SYNTAX);
	buf += 2;					/* room for a bytea's "\x" */
	n = (int) (run_end - start);
	memcpy(buf, start, n);
	p->cur = run_end;
	while (*p->cur != '"')
	{
		unsigned char c = *p->cur++;

		if (c < 0x20)
			return jfail(p, ERR_SYNTAX);	/* raw control character */
		if (c != '\\')
		{
			buf[n++] = (char) c;
			continue;
		}
		/* the closing-quote scan above guarantees a byte here */
		c = *p->cur++;
		switch (c)
		{
			case '"':
			case '\\':
			case '/':
				buf[n++] = (char) c;
				break;
			case 'b':
				buf[n++] = '\b';
				break;
			case 'f':
				buf[n++] = '\f';
				break;
			case 'n':
				buf[n++] = '\n';
				break;
			case 'r':
				buf[n++] = '\r';
				break;
			case 't':
				buf[n++] = '\t';
				break;
			case 'u':
				{
					uint32		cp;

					if (!read_hex4(p, &cp))
						return false;
					if (cp >= 0xD800 && cp <= 0xDBFF)
					{
						uint32		lo;

						if (p->end - p->cur < 2 || p->cur[0] != '\\' || p->cur[1] != 'u')
							return jfail(p, ERR_SYNTAX);
						p->cur += 2;
						if (!read_hex4(p, &lo))
							return false;
						if (lo < 0xDC00 || lo > 0xDFFF)
							return jfail(p, ERR_SYNTAX);
						cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					}
					else if (cp >= 0xDC00 && cp <= 0xDFFF)
						return jfail(p, ERR_SYNTAX);
					if (cp == 0)
						return jfail(p, ERR_STRING_NUL);
					/* UTF-8: at most 4 bytes for at least 6 escaped ones */
					if (cp < 0x80)
						buf[n++] = (char) cp;
					else if (cp < 0x800)
					{
						buf[n++] = (char) (0xC0 | (cp >> 6));
						buf[n++] = (char) (0x80 | (cp & 0x3F));
					}
					else if (cp < 0x10000)
					{
						buf[n++] = (char) (0xE0 | (cp >> 12));
						buf[n++] = (char) (0x80 | ((cp >> 6) & 0x3F));
						buf[n++] = (char) (0x80 | (cp & 0x3F));
					}
					else
					{
						buf[n++] = (char) (0xF0 | (cp >> 18));
						buf[n++] = (char) (0x80 | ((cp >> 12) & 0x3F));
						buf[n++] = (char) (0x80 | ((cp >> 6) & 0x3F));
						buf[n++] = (char) (0x80 | (cp & 0x3F));
					}
					break;
				}
			default:
				return jfail(p, ERR_SYNTAX);
		}
	}
	p->cur++;					/* the closing quote */
	buf[n] = '\0';
	*out = buf;
	*outlen = n;
	return true;
}

/* A number, by JSON's grammar, kept as its token. */
static bool
parse_number(JParser *p, JNode *node)
{
	const unsigned char *start = p->cur;
	const unsigned char *c = p->cur;
	const unsigned char *end = p->end;
	int			n;

#define DIGIT_AT(c) ((c) < end && *(c) >= '0' && *(c) <= '9')
	if (c < end && *c == '-')
		c++;
	if (!DIGIT_AT(c))
		return jfail(p, ERR_SYNTAX);
	if (*c == '0')
		c++;
	else
		while (DIGIT_AT(c))
			c++;
	if (c < end && *c == '.')
	{
		c++;
		if (!DIGIT_AT(c))
			return jfail(p, ERR_SYNTAX);
		while (DIGIT_AT(c))
			c++;
	}
	if (c < end && (*c == 'e' || *c == 'E'))
	{
		c++;
		if (c < end && (*c == '+' || *c == '-'))
			c++;
		if (!DIGIT_AT(c))
			return jfail(p, ERR_SYNTAX);
		while (DIGIT_AT(c))
			c++;
	}
#undef DIGIT_AT
	p->cur = c;
	n = (int) (c - start);
	node->kind = J_NUMBER;
	node->str = arena_take(p, n + 1);
	if (node->str == NULL)
		return jfail(p, ERR_SYNTAX);
	memcpy(node->str, start, n);
	node->str[n] = '\0';
	node->len = n;
	return true;
}

/* true, false (kept as "t", "f": bool's text form) or null */
static bool
parse_literal(JParser *p, const char *word, JKind kind, JNode *node)
{
	size_t		n = strlen(word);

	if ((size_t) (p->end - p->cur) < n || memcmp(p->cur, word, n) != 0)
		return jfail(p, ERR_SYNTAX);
	p->cur += n;
	node->kind = kind;
	if (kind == J_TRUE || kind == J_FALSE)
	{
		node->str = arena_take(p, 2);
		if (node->str == NULL)
			return jfail(p, ERR_SYNTAX);
		node->str[0] = kind == J_TRUE ? 't' : 'f';
		node->str[1] = '\0';
		node->len = 1;
	}
	return true;
}

static bool parse_value(JParser *p, JNode *node, int depth);

static bool
parse_container(JParser *p, JNode *node, int depth, bool object)
{
	JNode	   *last = NULL;
	char		close = object ? '}' : ']';

	if (depth >= W2J_MAX_DEPTH)
		return jfail(p, ERR_DEPTH);
	node->kind = object ? J_OBJECT : J_ARRAY;
	p->cur++;					/* the opening bracket */
	skip_ws(p);
	if (p->cur < p->end && *p->cur == close)
	{
		p->cur++;
		return true;
	}
	for (;;)
	{
		JNode	   *item;

		if (node->count >= (object ? W2J_MAX_MEMBERS : W2J_MAX_ELEMENTS))
			return jfail(p, ERR_TOO_MANY);
		item = new_node(p);
		skip_ws(p);
		if (object)
		{
			if (!parse_string(p, &item->key, &item->klen))
				return false;
			for (JNode *o = node->child; o != NULL; o = o->next)
				if (o->klen == item->klen && memcmp(o->key, item->key, item->klen) == 0)
					return jfail(p, ERR_DUP_KEY);
			skip_ws(p);
			if (p->cur >= p->end || *p->cur != ':')
				return jfail(p, ERR_SYNTAX);
			p->cur++;
			skip_ws(p);
		}
		if (!parse_value(p, item, depth + 1))
			return false;
		if (last)
			last->next = item;
		else
			node->child = item;
		last = item;
		node->count++;
		skip_ws(p);
		if (p->cur >= p->end)
			return jfail(p, ERR_SYNTAX);
		if (*p->cur == ',')
		{
			p->cur++;
			continue;
		}
		if (*p->cur == close)
		{
			p->cur++;
			return true;
		}
		return jfail(p, ERR_SYNTAX);
	}
}

static bool
parse_value(JParser *p, JNode *node, int depth)
{
	skip_ws(p);
	if (p->cur >= p->end)
		return jfail(p, ERR_SYNTAX);
	switch (*p->cur)
	{
		case '{':
			return parse_container(p, node, depth, true);
		case '[':
			return parse_container(p, node, depth, false);
		case '"':
			node->kind = J_STRING;
			return parse_string(p, &node->str, &node->len);
		case 't':
			return parse_literal(p, "true", J_TRUE, node);
		case 'f':
			return parse_literal(p, "false", J_FALSE, node);
		case 'n':
			return parse_literal(p, "null", J_NULL, node);
		default:
			return parse_number(p, node);
	}
}

/* ----------------------------------------------------------------
 * Reading the parsed message.
 * ----------------------------------------------------------------
 */
/*
 * The keys a message may have, found in one pass over its members
 * (index_keys) and then looked up by index; each decode_* says which of
 * them its action allows (a mask of KEY_ bits).
 */
typedef enum W2jKey
{
	K_ACTION,
	K_XID,
	K_TIMESTAMP,
	K_LSN,
	K_NEXTLSN,
	K_SCHEMA,
	K_TABLE,
	K_COLUMNS,
	K_IDENTITY,
	K_TRANSACTIONAL,
	K_PREFIX,
	K_CONTENT,
	K_ORIGIN,
	W2J_NKEYS
} W2jKey;

static const char *const w2j_key_names[W2J_NKEYS] = {
	"action", "xid", "timestamp", "lsn", "nextlsn", "schema", "table", "columns",
	"identity", "transactional", "prefix", "content", "origin"
};

#define KEY_(k) (1U << (k))

typedef struct W2jMsg
{
	JNode	   *root;
	const char *error;
	JNode	   *keys[W2J_NKEYS];	/* the member of each key, or NULL */
	uint32		present;		/* KEY_ bits of keys[] set */
	bool		unknown;		/* a member of no key above */
} W2jMsg;

static bool
mfail(W2jMsg *m, const char *error)
{
	if (m->error == NULL)
		m->error = error;
	return false;
}

/*
 * Is n's key the NUL-terminated key?  Inline, as keys are short and most
 * differ at their first byte (a key holds no NUL: the parser refuses
 * \u0000, so key's NUL ends the loop at the latest).
 */
static inline bool
key_is(const JNode *n, const char *key)
{
	int			i;

	for (i = 0; i < n->klen; i++)
		if (n->key[i] != key[i])
			return false;
	return key[i] == '\0';
}

/* The root's members by key (the parser refused duplicates). */
static void
index_keys(W2jMsg *m)
{
	memset(m->keys, 0, sizeof(m->keys));
	m->present = 0;
	m->unknown = false;
	for (JNode *n = m->root->child; n != NULL; n = n->next)
	{
		int			k;

		for (k = 0; k < W2J_NKEYS; k++)
			if (key_is(n, w2j_key_names[k]))
				break;
		if (k == W2J_NKEYS)
			m->unknown = true;
		else
		{
			m->keys[k] = n;
			m->present |= KEY_(k);
		}
	}
}

static inline JNode *
member(W2jMsg *m, W2jKey key)
{
	return m->keys[key];
}

/* Every key of the message is one of allowed (KEY_ bits). */
static bool
keys_allowed(W2jMsg *m, uint32 allowed)
{
	if (m->unknown || (m->present & ~allowed) != 0)
		return mfail(m, ERR_UNKNOWN_KEY);
	return true;
}

static JNode *
require(W2jMsg *m, W2jKey key, JKind kind)
{
	JNode	   *n = member(m, key);

	if (n == NULL)
	{
		mfail(m, ERR_MISSING_KEY);
		return NULL;
	}
	if (n->kind != kind)
	{
		mfail(m, ERR_KEY_TYPE);
		return NULL;
	}
	return n;
}

/* An unsigned decimal integer token of at most max. */
static bool
token_uint(const JNode *n, uint64 max, uint64 *v)
{
	uint64		x = 0;

	if (n->kind != J_NUMBER || n->len == 0 || n->len > 20)
		return false;
	for (int i = 0; i < n->len; i++)
	{
		if (n->str[i] < '0' || n->str[i] > '9')
			return false;
		if (x > (max - (uint64) (n->str[i] - '0')) / 10)
			return false;
		x = x * 10 + (uint64) (n->str[i] - '0');
	}
	*v = x;
	return true;
}

static bool
get_xid(W2jMsg *m, TransactionId *xid)
{
	JNode	   *n = member(m, K_XID);
	uint64		v;

	if (n == NULL)
		return mfail(m, ERR_MISSING_KEY);
	if (!token_uint(n, PG_UINT32_MAX, &v) || !TransactionIdIsNormal((TransactionId) v))
		return mfail(m, ERR_XID);
	*xid = (TransactionId) v;
	return true;
}

/*
 * "origin" (include-origin, asked for by a pipeline with origin =>
 * 'none'): the message's replication origin id, 0 when the transaction was
 * written locally; null on a non-transactional message.  Asked for, every
 * message carries it; not asked for, none may.
 */
static bool
get_origin(W2jMsg *m, const AshWal2jsonState *state, bool nullable, uint16 *origin)
{
	JNode	   *n = member(m, K_ORIGIN);
	uint64		v = 0;

	*origin = 0;
	if (!state->origins)
		return n == NULL || mfail(m, ERR_UNKNOWN_KEY);
	if (n == NULL)
		return mfail(m, ERR_MISSING_KEY);
	if (nullable && n->kind == J_NULL)
		return true;
	if (!token_uint(n, PG_UINT16_MAX, &v))
		return mfail(m, ERR_ORIGIN);
	*origin = (uint16) v;
	return true;
}

/* "X/Y", each 1 to 8 hex digits, as pg_lsn_out writes it. */
static bool
get_lsn(W2jMsg *m, W2jKey key, XLogRecPtr *lsn)
{
	JNode	   *n = require(m, key, J_STRING);
	uint64		hi = 0;
	uint64		lo = 0;
	int			i = 0;
	int			digits;

	if (n == NULL)
		return false;
	for (digits = 0; i < n->len && n->str[i] != '/'; i++, digits++)
	{
		int			h = ash_hex_digit(n->str[i]);

		if (h < 0 || digits >= 8)
			return mfail(m, ERR_LSN);
		hi = (hi << 4) | (uint64) h;
	}
	if (digits == 0 || i >= n->len)
		return mfail(m, ERR_LSN);
	for (i++, digits = 0; i < n->len; i++, digits++)
	{
		int			h = ash_hex_digit(n->str[i]);

		if (h < 0 || digits >= 8)
			return mfail(m, ERR_LSN);
		lo = (lo << 4) | (uint64) h;
	}
	if (digits == 0)
		return mfail(m, ERR_LSN);
	*lsn = (hi << 32) | lo;
	if (XLogRecPtrIsInvalid(*lsn))
		return mfail(m, ERR_LSN);
	return true;
}

/* Fixed-width decimal field s[0..n) into *v; false unless all digits. */
static bool
digits_at(const char *s, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++)
	{
		if (s[i] < '0' || s[i] > '9')
			return false;
		*v = *v * 10 + (s[i] - '0');
	}
	return true;
}

/* Days since 1970-01-01 of a proleptic Gregorian date. */
static int64
days_from_civil(int y, int m, int d)
{
	int64		era;
	int64		yoe;
	int64		doy;
	int64		doe;

	y -= m <= 2;
	era = (y >= 0 ? y : y - 399) / 400;
	yoe = y - era * 400;
	doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

/*
 * timestamptz_to_str's ISO form: "YYYY-MM-DD HH:MM:SS[.f{1,6}]+HH[:MM[:SS]]"
 * in the walsender's time zone (any offset).
 */
static bool
parse_timestamp(const char *s, int len, TimestampTz *out)
{
	static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	int			y,
				mo,
				d,
				h,
				mi,
				sec;
	int64		usec = 0;
	int			i = 19;
	int			sign;
	int			oh = 0,
				om = 0,
				os = 0;
	int64		days;

	if (len < 22 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':' || s[16] != ':' ||
		!digits_at(s, 4, &y) || !digits_at(s + 5, 2, &mo) || !digits_at(s + 8, 2, &d) ||
		!digits_at(s + 11, 2, &h) || !digits_at(s + 14, 2, &mi) || !digits_at(s + 17, 2, &sec))
		return false;
	if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 || mi > 59 || sec > 59)
		return false;
	if (mo == 2 && d == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0))
		return false;
	if (i < len && s[i] == '.')
	{
		int			nd = 0;

		for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++, nd++)
		{
			if (nd >= 6)
				return false;
			usec = usec * 10 + (s[i] - '0');
		}
		if (nd == 0)
			return false;
		for (; nd < 6; nd++)
			usec *= 10;
	}
	if (i >= len || (s[i] != '+' && s[i] != '-'))
		return false;
	sign = s[i] == '-' ? -1 : 1;
	i++;
	if (len - i < 2 || !digits_at(s + i, 2, &oh))
		return false;
	i += 2;
	if (i < len)
	{
		if (len - i < 3 || s[i] != ':' || !digits_at(s + i + 1, 2, &om))
			return false;
		i += 3;
	}
	if (i < len)
	{
		if (len - i != 3 || s[i] != ':' || !digits_at(s + i + 1, 2, &os))
			return false;
		i += 3;
	}
	if (oh > 15 || om > 59 || os > 59)
		return false;
	days = days_from_civil(y, mo, d) - 10957;	/* since 2000-01-01 */
	*out = ((days * 86400 + h * 3600 + mi * 60 + sec) -
			sign * (oh * 3600 + om * 60 + os)) * INT64CONST(1000000) + usec;
	return true;
}

static bool
get_timestamp(W2jMsg *m, TimestampTz *ts)
{
	JNode	   *n = require(m, K_TIMESTAMP, J_STRING);

	if (n == NULL)
		return false;
	if (!parse_timestamp(n->str, n->len, ts))
		return mfail(m, ERR_TIMESTAMP);
	return true;
}

static bool
valid_name(const JNode *n)
{
	return n != NULL && n->kind == J_STRING && n->len > 0 && n->len <= W2J_MAX_NAME;
}

/* ----------------------------------------------------------------
 * Tuples.
 * ----------------------------------------------------------------
 */
static bool
is_number_type(uint32 typoid)
{
	return typoid == W2J_INT2OID || typoid == W2J_INT4OID || typoid == W2J_INT8OID ||
		typoid == W2J_OIDOID || typoid == W2J_FLOAT4OID || typoid == W2J_FLOAT8OID ||
		typoid == W2J_NUMERICOID;
}

/* A JSON value of a column of type typoid, as pgoutput's text form. */
static bool
column_value(W2jMsg *m, const JNode *v, uint32 typoid, AshColumnValue *out)
{
	switch (v->kind)
	{
		case J_NULL:
			if (typoid == W2J_FLOAT4OID || typoid == W2J_FLOAT8OID || typoid == W2J_NUMERICOID)
				return mfail(m, ash_wal2json_err_ambiguous);
			out->status = ASH_COL_NULL;
			out->len = 0;
			out->data = NULL;
			return true;
		case J_TRUE:
		case J_FALSE:
			if (typoid != W2J_BOOLOID)
				return mfail(m, ERR_VALUE);
			/* the parser kept it as "t" or "f", bool's text form */
			out->status = ASH_COL_TEXT;
			out->len = v->len;
			out->data = v->str;
			return true;
		case J_NUMBER:
			if (!is_number_type(typoid))
				return mfail(m, ERR_VALUE);
			/* the token is the output function's text, NUL-terminated */
			out->status = ASH_COL_TEXT;
			out->len = v->len;
			out->data = v->str;
			return true;
		case J_STRING:
			if (is_number_type(typoid) || typoid == W2J_BOOLOID)
				return mfail(m, ERR_VALUE);
			if (typoid == W2J_BYTEAOID)
			{
				/* "\x" is cut off: put it back, in the parser's spare bytes */
				char	   *s = v->str - 2;

				s[0] = '\\';
				s[1] = 'x';
				out->status = ASH_COL_TEXT;
				out->len = v->len + 2;
				out->data = s;
				return true;
			}
			out->status = ASH_COL_TEXT;
			out->len = v->len;
			out->data = v->str;
			return true;
		default:
			return mfail(m, ERR_VALUE);
	}
}

static const AshRelation *
find_table(const AshWal2jsonState *state, const char *nsp, const char *rel)
{
	for (int i = 0; i < state->ntables; i++)
		if (strcmp(state->tables[i].nspname, nsp) == 0 &&
			strcmp(state->tables[i].relname, rel) == 0)
			return &state->tables[i];
	return NULL;
}

static bool
drift(W2jMsg *m, AshWal2jsonState *state)
{
	state->drift = true;
	return mfail(m, ash_wal2json_err_drift);
}

/*
 * A JSON array of columns into a tuple of rel's natts columns, each
 * initialised to fill; a column the array names is set from it.
 */
static bool
read_tuple(W2jMsg *m, AshWal2jsonState *state, const JNode *arr, const AshRelation *rel,
		   char fill, bool key_only, AshTuple *tup)
{
	int			hint = 0;

	tup->natts = rel->natts;
	tup->cols = palloc0(sizeof(AshColumnValue) * Max(rel->natts, 1));
	for (int i = 0; i < rel->natts; i++)
		tup->cols[i].status = fill;

	for (JNode *c = arr->child; c != NULL; c = c->next)
	{
		JNode	   *name = NULL;
		JNode	   *type = NULL;
		JNode	   *typeoid = NULL;
		JNode	   *value = NULL;
		uint64		oid;
		int			idx = -1;

		if (c->kind != J_OBJECT)
			return mfail(m, ERR_KEY_TYPE);
		/* one pass over the members (duplicates were refused by the parser) */
		for (JNode *k = c->child; k != NULL; k = k->next)
		{
			if (k->klen == 4 && memcmp(k->key, "name", 4) == 0)
				name = k;
			else if (k->klen == 5 && memcmp(k->key, "value", 5) == 0)
				value = k;
			else if (k->klen == 7 && memcmp(k->key, "typeoid", 7) == 0)
				typeoid = k;
			else if (k->klen == 4 && memcmp(k->key, "type", 4) == 0)
				type = k;
			else
				return mfail(m, ERR_UNKNOWN_KEY);
		}
		if (name == NULL || typeoid == NULL || value == NULL)
			return mfail(m, ERR_MISSING_KEY);
		if (name->kind != J_STRING || (type != NULL && type->kind != J_STRING))
			return mfail(m, ERR_KEY_TYPE);
		if (!valid_name(name))
			return mfail(m, ERR_NAME);
		if (!token_uint(typeoid, PG_UINT32_MAX, &oid) || oid == 0)
			return mfail(m, ERR_TYPEOID);

		/* wal2json writes columns in attribute order, as described */
		if (hint < rel->natts && strcmp(rel->cols[hint].name, name->str) == 0)
			idx = hint;
		else
			for (int i = 0; i < rel->natts && idx < 0; i++)
				if (strcmp(rel->cols[i].name, name->str) == 0)
					idx = i;
		if (idx < 0 || rel->cols[idx].type_oid != (uint32) oid)
			return drift(m, state);
		if (key_only && !rel->cols[idx].is_key)
			return drift(m, state);
		if (tup->cols[idx].status != fill)
			return mfail(m, ERR_DUP_COLUMN);
		if (!column_value(m, value, (uint32) oid, &tup->cols[idx]))
			return false;
		hint = idx + 1;
	}
	return true;
}

/* Is every column of tup that is key in rel present (not fill)? */
static bool
keys_present(const AshRelation *rel, const AshTuple *tup, char fill)
{
	for (int i = 0; i < rel->natts; i++)
		if (rel->cols[i].is_key && tup->cols[i].status == fill)
			return false;
	return true;
}

static bool
all_present(const AshTuple *tup, char fill)
{
	for (int i = 0; i < tup->natts; i++)
		if (tup->cols[i].status == fill)
			return false;
	return true;
}

/* Does the key tuple old repeat the key of the new row? */
static bool
same_key(const AshRelation *rel, const AshTuple *old, const AshTuple *new)
{
	for (int i = 0; i < rel->natts; i++)
	{
		const AshColumnValue *a = &old->cols[i];
		const AshColumnValue *b = &new->cols[i];

		if (!rel->cols[i].is_key)
			continue;
		if (a->status != b->status || a->len != b->len ||
			(a->len > 0 && memcmp(a->data, b->data, a->len) != 0))
			return false;
	}
	return true;
}

/*
 * The old row of an update or delete: a key tuple, or the whole old row
 * under REPLICA IDENTITY FULL.
 */
static bool
read_identity(W2jMsg *m, AshWal2jsonState *state, const JNode *arr, const AshRelation *rel,
			  char *oldkind, AshTuple *tup)
{
	if (rel->replident == 'f')
	{
		if (!read_tuple(m, state, arr, rel, ASH_COL_UNCHANGED, false, tup))
			return false;
		if (!all_present(tup, ASH_COL_UNCHANGED))
			return drift(m, state);
		*oldkind = 'O';
		return true;
	}
	/* a key tuple: the key columns, NULL elsewhere as pgoutput sends it */
	if (!read_tuple(m, state, arr, rel, ASH_COL_UNCHANGED, true, tup))
		return false;
	if (!keys_present(rel, tup, ASH_COL_UNCHANGED))
		return drift(m, state);
	for (int i = 0; i < tup->natts; i++)
		if (tup->cols[i].status == ASH_COL_UNCHANGED)
			tup->cols[i].status = ASH_COL_NULL;
	*oldkind = 'K';
	return true;
}

/* ----------------------------------------------------------------
 * Messages.
 * ----------------------------------------------------------------
 */
static bool
decode_xact(W2jMsg *m, AshWal2jsonState *state, const JNode *root, bool begin, AshChange *out)
{
	const uint32 keys = KEY_(K_ACTION) | KEY_(K_ORIGIN) | KEY_(K_XID) | KEY_(K_TIMESTAMP) | KEY_(K_LSN) |
		KEY_(K_NEXTLSN);
	TransactionId xid;
	TimestampTz ts;
	XLogRecPtr	lsn;
	XLogRecPtr	nextlsn;

	if (!keys_allowed(m, keys) || !get_xid(m, &xid) ||
		!get_timestamp(m, &ts) || !get_lsn(m, K_LSN, &lsn) ||
		!get_lsn(m, K_NEXTLSN, &nextlsn))
		return false;
	if (nextlsn <= lsn)
		return mfail(m, ERR_LSN);
	if (begin)
	{
		if (state->in_xact)
			return mfail(m, ERR_IN_XACT);
		out->kind = ASH_CHANGE_BEGIN;
		out->u.begin.final_lsn = lsn;
		out->u.begin.commit_time = ts;
		out->u.begin.xid = xid;
		state->in_xact = true;
		state->xid = xid;
	}
	else
	{
		if (!state->in_xact)
			return mfail(m, ERR_NO_XACT);
		if (xid != state->xid)
			return mfail(m, ERR_XID_MISMATCH);
		out->kind = ASH_CHANGE_COMMIT;
		out->u.commit.flags = 0;
		out->u.commit.commit_lsn = lsn;
		out->u.commit.end_lsn = nextlsn;
		out->u.commit.commit_time = ts;
		state->in_xact = false;
		state->xid = InvalidTransactionId;
	}
	return true;
}

/* The common head of a change: xid, timestamp, lsn, and its table. */
static bool
change_head(W2jMsg *m, AshWal2jsonState *state, const JNode *root, const AshRelation **rel)
{
	TransactionId xid;
	TimestampTz ts;
	XLogRecPtr	lsn;
	JNode	   *schema;
	JNode	   *table;

	if (!get_xid(m, &xid) || !get_timestamp(m, &ts) ||
		!get_lsn(m, K_LSN, &lsn))
		return false;
	if (!state->in_xact)
		return mfail(m, ERR_NO_XACT);
	if (xid != state->xid)
		return mfail(m, ERR_XID_MISMATCH);
	schema = require(m, K_SCHEMA, J_STRING);
	table = require(m, K_TABLE, J_STRING);
	if (schema == NULL || table == NULL)
		return false;
	if (!valid_name(schema) || !valid_name(table))
		return mfail(m, ERR_NAME);
	*rel = find_table(state, schema->str, table->str);
	if (*rel == NULL)
		return mfail(m, ERR_TABLE);
	return true;
}

static bool
decode_row(W2jMsg *m, AshWal2jsonState *state, const JNode *root, char action, AshChange *out)
{
	const uint32 keys = KEY_(K_ACTION) | KEY_(K_ORIGIN) | KEY_(K_XID) | KEY_(K_TIMESTAMP) | KEY_(K_LSN) |
		KEY_(K_SCHEMA) | KEY_(K_TABLE) | KEY_(K_COLUMNS) | KEY_(K_IDENTITY);
	const AshRelation *rel;
	JNode	   *columns;
	JNode	   *identity;

	if (!keys_allowed(m, keys) || !change_head(m, state, root, &rel))
		return false;
	columns = member(m, K_COLUMNS);
	identity = member(m, K_IDENTITY);
	if ((columns != NULL && columns->kind != J_ARRAY) ||
		(identity != NULL && identity->kind != J_ARRAY))
		return mfail(m, ERR_KEY_TYPE);

	switch (action)
	{
		case 'I':
			if (columns == NULL)
				return mfail(m, ERR_MISSING_KEY);
			if (identity != NULL)
				return mfail(m, ERR_UNKNOWN_KEY);
			out->kind = ASH_CHANGE_INSERT;
			out->u.insert.relid = rel->relid;
			if (!read_tuple(m, state, columns, rel, ASH_COL_UNCHANGED, false,
							&out->u.insert.newtup))
				return false;
			/* an insert carries every column */
			if (!all_present(&out->u.insert.newtup, ASH_COL_UNCHANGED))
				return drift(m, state);
			return true;
		case 'U':
			if (columns == NULL)
				return mfail(m, ERR_MISSING_KEY);
			out->kind = ASH_CHANGE_UPDATE;
			out->u.update.relid = rel->relid;
			out->u.update.oldkind = 0;
			if (!read_tuple(m, state, columns, rel, ASH_COL_UNCHANGED, false,
							&out->u.update.newtup))
				return false;
			/* only an out-of-line value goes unsent; any other was dropped */
			for (int i = 0; i < rel->natts; i++)
				if (out->u.update.newtup.cols[i].status == ASH_COL_UNCHANGED &&
					!rel->cols[i].toastable)
					return drift(m, state);
			if (identity == NULL)
				return true;	/* a table without identity */
			if (!read_identity(m, state, identity, rel, &out->u.update.oldkind,
							   &out->u.update.oldtup))
				return false;
			/* the key repeated from the new row: pgoutput sends none */
			if (out->u.update.oldkind == 'K' &&
				same_key(rel, &out->u.update.oldtup, &out->u.update.newtup))
			{
				out->u.update.oldkind = 0;
				memset(&out->u.update.oldtup, 0, sizeof(AshTuple));
			}
			return true;
		default:
			if (columns != NULL)
				return mfail(m, ERR_UNKNOWN_KEY);
			if (identity == NULL)
				return mfail(m, ERR_NO_IDENTITY);
			out->kind = ASH_CHANGE_DELETE;
			out->u.delete.relid = rel->relid;
			return read_identity(m, state, identity, rel, &out->u.delete.oldkind,
								 &out->u.delete.oldtup);
	}
}

static bool
decode_truncate(W2jMsg *m, AshWal2jsonState *state, const JNode *root, AshChange *out)
{
	const uint32 keys = KEY_(K_ACTION) | KEY_(K_ORIGIN) | KEY_(K_XID) | KEY_(K_TIMESTAMP) | KEY_(K_LSN) |
		KEY_(K_SCHEMA) | KEY_(K_TABLE);
	const AshRelation *rel;

	if (!keys_allowed(m, keys) || !change_head(m, state, root, &rel))
		return false;
	/* one message per table; wal2json says nothing of CASCADE or RESTART */
	out->kind = ASH_CHANGE_TRUNCATE;
	out->u.truncate.nrelids = 1;
	out->u.truncate.relids = palloc(sizeof(uint32));
	out->u.truncate.relids[0] = rel->relid;
	out->u.truncate.cascade = false;
	out->u.truncate.restart_seqs = false;
	return true;
}

static bool
decode_message(W2jMsg *m, AshWal2jsonState *state, const JNode *root, AshChange *out)
{
	const uint32 keys = KEY_(K_ACTION) | KEY_(K_ORIGIN) | KEY_(K_XID) | KEY_(K_TIMESTAMP) | KEY_(K_LSN) |
		KEY_(K_TRANSACTIONAL) | KEY_(K_PREFIX) | KEY_(K_CONTENT);
	JNode	   *tx;
	JNode	   *xidn;
	JNode	   *tsn;
	JNode	   *prefix;
	JNode	   *content;
	XLogRecPtr	lsn;
	bool		transactional;

	if (!keys_allowed(m, keys) || !get_lsn(m, K_LSN, &lsn))
		return false;
	tx = member(m, K_TRANSACTIONAL);
	if (tx == NULL)
		return mfail(m, ERR_MISSING_KEY);
	if (tx->kind != J_TRUE && tx->kind != J_FALSE)
		return mfail(m, ERR_KEY_TYPE);
	transactional = tx->kind == J_TRUE;
	xidn = member(m, K_XID);
	tsn = member(m, K_TIMESTAMP);
	if (xidn == NULL || tsn == NULL)
		return mfail(m, ERR_MISSING_KEY);
	if (transactional)
	{
		TransactionId xid;
		TimestampTz ts;

		if (!get_xid(m, &xid) || !get_timestamp(m, &ts))
			return false;
		if (!state->in_xact)
			return mfail(m, ERR_NO_XACT);
		if (xid != state->xid)
			return mfail(m, ERR_XID_MISMATCH);
	}
	else if (xidn->kind != J_NULL || tsn->kind != J_NULL)
		return mfail(m, ERR_KEY_TYPE);
	prefix = require(m, K_PREFIX, J_STRING);
	content = require(m, K_CONTENT, J_STRING);
	if (prefix == NULL || content == NULL)
		return false;
	out->kind = ASH_CHANGE_MESSAGE;
	out->u.message.transactional = transactional;
	out->u.message.lsn = lsn;
	out->u.message.prefix = prefix->str;
	out->u.message.content_len = content->len;
	out->u.message.content = content->str;
	return true;
}

bool
ash_decode_wal2json(AshWal2jsonState *state, const char *data, int len, AshChange *out,
					const char **error)
{
	JParser		p;
	W2jMsg		m;
	JNode	   *root;
	JNode	   *action;
	AshWal2jsonState next;
	uint16		origin;
	bool		ok;

	if (error)
		*error = NULL;
	if (state == NULL || out == NULL || error == NULL || len < 0 || (data == NULL && len > 0))
	{
		if (error)
			*error = ERR_BAD_ARGS;
		return false;
	}
	state->drift = false;
	memset(out, 0, sizeof(*out));
	out->xid = InvalidTransactionId;
	if (len == 0)
	{
		*error = ERR_EMPTY;
		return false;
	}

	p.cur = (const unsigned char *) data;
	p.end = p.cur + len;
	p.error = NULL;
	p.arena = palloc(len + 1);
	p.arena_end = p.arena + len + 1;
	p.nodes = NULL;
	p.nfree = 0;
	root = new_node(&p);
	skip_ws(&p);
	if (p.cur >= p.end || *p.cur != '{')
	{
		*error = ERR_NOT_OBJECT;
		return false;
	}
	if (!parse_value(&p, root, 0))
	{
		*error = p.error ? p.error : ERR_SYNTAX;
		return false;
	}
	skip_ws(&p);
	if (p.cur != p.end)
	{
		*error = ERR_TRAILING;
		return false;
	}

	m.root = root;
	m.error = NULL;
	index_keys(&m);
	action = require(&m, K_ACTION, J_STRING);
	if (action == NULL)
	{
		*error = m.error;
		return false;
	}
	if (action->len != 1)
	{
		*error = ERR_ACTION;
		return false;
	}

	if (!get_origin(&m, state, action->str[0] == 'M', &origin))
	{
		*error = m.error;
		return false;
	}

	/* the transaction state moves only when the whole message decoded */
	next = *state;
	switch (action->str[0])
	{
		case 'B':
			ok = decode_xact(&m, &next, root, true, out);
			break;
		case 'C':
			ok = decode_xact(&m, &next, root, false, out);
			break;
		case 'I':
		case 'U':
		case 'D':
			ok = decode_row(&m, &next, root, action->str[0], out);
			break;
		case 'T':
			ok = decode_truncate(&m, &next, root, out);
			break;
		case 'M':
			ok = decode_message(&m, &next, root, out);
			break;
		default:
			ok = mfail(&m, ERR_ACTION);
			break;
	}
	/* a change carries its transaction's origin, which B gave */
	if (ok && state->origins)
	{
		if (out->kind == ASH_CHANGE_BEGIN)
		{
			next.origin = origin;
			out->u.begin.origin_id = origin;
		}
		else if ((out->kind != ASH_CHANGE_MESSAGE || out->u.message.transactional) &&
				 origin != state->origin)
			ok = mfail(&m, ERR_ORIGIN_MISMATCH);
	}
	if (!ok)
	{
		state->drift = next.drift;
		*error = m.error ? m.error : ERR_SYNTAX;
		return false;
	}
	*state = next;
	return true;
}

bool
ash_wal2json_table_option(char *buf, int bufsize, const char *nspname, const char *relname)
{
	int			n = (int) strlen(buf);
	const char *parts[2] = {nspname, relname};

	for (int p = 0; p < 2; p++)
	{
		if (p == 1)
		{
			if (n + 1 >= bufsize)
				return false;
			buf[n++] = '.';
		}
		for (const char *s = parts[p]; *s; s++)
		{
			unsigned char c = (unsigned char) *s;
			bool		plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
				(c >= '0' && c <= '9') || c == '_' || c >= 0x80;

			/* wal2json reads a backslash as "the next byte is literal" */
			if (!plain)
			{
				if (n + 1 >= bufsize)
					return false;
				buf[n++] = '\\';
			}
			if (n + 1 >= bufsize)
				return false;
			buf[n++] = (char) c;
		}
	}
	buf[n] = '\0';
	return true;
}
