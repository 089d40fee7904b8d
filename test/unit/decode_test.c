/*-------------------------------------------------------------------------
 *
 * decode_test.c
 *	  Unit tests of the pure pgoutput decoder (src/decode_pgoutput.c),
 *	  emitting TAP.
 *
 *	  decode_test [fixture-dir]				run the tests (TAP on stdout)
 *	  decode_test --dump file proto_version	print what a fixture decodes to
 *
 * NOTES
 *	  Fixtures are captured pgoutput messages, one hex-encoded message per
 *	  line (test/fixtures/pgoutput/, see capture.sh there).  Each fixture is
 *	  decoded in order with one AshPgoutputState, and the decoded structure
 *	  is checked against expectations derived from the SQL that produced it
 *	  (basic.sql, stream.sql).  Then every message is cut at every length,
 *	  extended by one byte and randomly mutated (fixed seed): decoding must
 *	  fail cleanly, or succeed with a structurally valid change, and never
 *	  crash; the build runs this under AddressSanitizer and UBSan.
 *
 *	  This program provides its own palloc/palloc0 (so libpgcommon's
 *	  fe_memutils is not linked): each allocation is tracked like a memory
 *	  context, freed by arena_reset(), and its size is accounted so that we
 *	  can check that allocation stays bounded by the message length.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdarg.h>

#include "access/transam.h"

#include "change.h"
#include "decode_pgoutput.h"
#include "hex.h"
#include "palloc_arena.h"
#include "unit_tap.h"

/* ----------------------------------------------------------------
 * Allocation bound (the arena is test/common/palloc_arena.c).
 * ----------------------------------------------------------------
 */
/* Allocation allowed for one message of len bytes. */
static bool
alloc_within_bound(int len)
{
	return arena_bytes <= (size_t) 32 * (size_t) len + 256;
}

/* ----------------------------------------------------------------
 * Error-string bookkeeping: every error must be one of a small set of
 * static strings (pointer identity), printable, and value-free.
 * ----------------------------------------------------------------
 */
#define MAX_ERRORS 64
static const char *seen_errors[MAX_ERRORS];
static int	n_seen_errors;
static bool error_set_overflow;
static bool error_bad_text;

static void
note_error(const char *error)
{
	int			i;
	const char *p;

	if (error == NULL || error[0] == '\0')
	{
		error_bad_text = true;
		return;
	}
	for (i = 0; i < n_seen_errors; i++)
		if (seen_errors[i] == error)
			return;
	if (n_seen_errors == MAX_ERRORS)
	{
		error_set_overflow = true;
		return;
	}
	seen_errors[n_seen_errors++] = error;
	for (p = error; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			error_bad_text = true;
}

/* ----------------------------------------------------------------
 * Fixtures.
 * ----------------------------------------------------------------
 */
typedef struct Msg
{
	unsigned char *data;
	int			len;
} Msg;

typedef struct Fixture
{
	const char *name;
	int			proto;
	int			nmsgs;
	Msg		   *msgs;
	/* results of decoding in order */
	bool	   *okv;
	const char **errv;
	AshChange  *ch;
	AshPgoutputState *before;	/* state before each message */
} Fixture;


static bool
load_fixture(const char *dir, const char *name, int proto, Fixture *fx)
{
	char		path[1024];
	FILE	   *f;
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		n;
	int			alloc = 0;

	memset(fx, 0, sizeof(*fx));
	fx->name = name;
	fx->proto = proto;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	while ((n = getline(&line, &cap, f)) >= 0)
	{
		Msg		   *m;
		int			i;

		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0)
			continue;
		if (n % 2 != 0)
		{
			fclose(f);
			free(line);
			return false;
		}
		if (fx->nmsgs == alloc)
		{
			alloc = alloc ? alloc * 2 : 256;
			fx->msgs = realloc(fx->msgs, alloc * sizeof(Msg));
		}
		m = &fx->msgs[fx->nmsgs++];
		m->len = (int) (n / 2);
		m->data = malloc(m->len);
		for (i = 0; i < m->len; i++)
		{
			int			hi = ash_hex_digit(line[2 * i]);
			int			lo = ash_hex_digit(line[2 * i + 1]);

			if (hi < 0 || lo < 0)
			{
				fclose(f);
				free(line);
				return false;
			}
			m->data[i] = (unsigned char) (hi * 16 + lo);
		}
	}
	free(line);
	fclose(f);
	return fx->nmsgs > 0;
}

static void
free_fixture(Fixture *fx)
{
	int			i;

	for (i = 0; i < fx->nmsgs; i++)
		free(fx->msgs[i].data);
	free(fx->msgs);
	free(fx->okv);
	free(fx->errv);
	free(fx->ch);
	free(fx->before);
	memset(fx, 0, sizeof(*fx));
}

/* ----------------------------------------------------------------
 * Structural validation of a successfully decoded change.
 * ----------------------------------------------------------------
 */
static bool
valid_tuple(const AshTuple *t, int msglen)
{
	int			i;

	if (t->natts < 0 || t->natts > 1664 || t->natts > msglen)
		return false;
	if (t->natts > 0 && t->cols == NULL)
		return false;
	for (i = 0; i < t->natts; i++)
	{
		const AshColumnValue *c = &t->cols[i];

		switch (c->status)
		{
			case ASH_COL_NULL:
			case ASH_COL_UNCHANGED:
				if (c->data != NULL || c->len != 0)
					return false;
				break;
			case ASH_COL_TEXT:
			case ASH_COL_BINARY:
				if (c->data == NULL || c->len < 0 || c->len >= msglen)
					return false;
				if (c->data[c->len] != '\0')
					return false;
				if (c->status == ASH_COL_TEXT &&
					(int) strlen(c->data) != c->len)
					return false;
				break;
			default:
				return false;
		}
	}
	return true;
}

static bool
valid_name(const char *s)
{
	return s != NULL && s[0] != '\0' && strlen(s) < 64;
}

static bool
is_streamable_kind(AshChangeKind k)
{
	return k == ASH_CHANGE_RELATION || k == ASH_CHANGE_TYPE ||
		k == ASH_CHANGE_INSERT || k == ASH_CHANGE_UPDATE ||
		k == ASH_CHANGE_DELETE || k == ASH_CHANGE_TRUNCATE ||
		k == ASH_CHANGE_MESSAGE;
}

static bool
valid_change(const AshChange *c, const AshPgoutputState *before,
			 const AshPgoutputState *after, int msglen)
{
	int			i;

	/* xid set exactly for streamed changes */
	if (before->in_stream && is_streamable_kind(c->kind))
	{
		if (c->xid == InvalidTransactionId)
			return false;
	}
	else if (c->xid != InvalidTransactionId)
		return false;

	/* state moves only on stream start/stop */
	if (c->kind == ASH_CHANGE_STREAM_START)
	{
		if (before->in_stream || !after->in_stream)
			return false;
	}
	else if (c->kind == ASH_CHANGE_STREAM_STOP)
	{
		if (!before->in_stream || after->in_stream)
			return false;
	}
	else if (before->in_stream != after->in_stream)
		return false;

	switch (c->kind)
	{
		case ASH_CHANGE_BEGIN:
			return c->u.begin.final_lsn != InvalidXLogRecPtr &&
				c->u.begin.xid != InvalidTransactionId;
		case ASH_CHANGE_COMMIT:
			return c->u.commit.flags == 0;
		case ASH_CHANGE_ORIGIN:
			return c->u.origin.name != NULL;
		case ASH_CHANGE_RELATION:
			if (c->u.relation.relid == 0 ||
				c->u.relation.nspname == NULL ||
				strlen(c->u.relation.nspname) >= 64 ||
				!valid_name(c->u.relation.relname) ||
				strchr("dnfi", c->u.relation.replident) == NULL ||
				c->u.relation.replident == '\0' ||
				c->u.relation.natts < 0 || c->u.relation.natts > 1664 ||
				(c->u.relation.natts > 0 && c->u.relation.cols == NULL))
				return false;
			for (i = 0; i < c->u.relation.natts; i++)
				if (!valid_name(c->u.relation.cols[i].name) ||
					c->u.relation.cols[i].type_oid == 0)
					return false;
			return true;
		case ASH_CHANGE_TYPE:
			return c->u.type.type_oid != 0 && c->u.type.nspname != NULL &&
				valid_name(c->u.type.typname);
		case ASH_CHANGE_INSERT:
			if (c->u.insert.relid == 0 ||
				!valid_tuple(&c->u.insert.newtup, msglen))
				return false;
			for (i = 0; i < c->u.insert.newtup.natts; i++)
				if (c->u.insert.newtup.cols[i].status == ASH_COL_UNCHANGED)
					return false;
			return true;
		case ASH_CHANGE_UPDATE:
			if (c->u.update.relid == 0 ||
				!valid_tuple(&c->u.update.newtup, msglen))
				return false;
			if (c->u.update.oldkind == 0)
				return c->u.update.oldtup.natts == 0 &&
					c->u.update.oldtup.cols == NULL;
			return (c->u.update.oldkind == 'K' || c->u.update.oldkind == 'O') &&
				valid_tuple(&c->u.update.oldtup, msglen);
		case ASH_CHANGE_DELETE:
			return c->u.delete.relid != 0 &&
				(c->u.delete.oldkind == 'K' || c->u.delete.oldkind == 'O') &&
				valid_tuple(&c->u.delete.oldtup, msglen);
		case ASH_CHANGE_TRUNCATE:
			if (c->u.truncate.nrelids < 0 ||
				c->u.truncate.nrelids > msglen / 4 ||
				(c->u.truncate.nrelids > 0 && c->u.truncate.relids == NULL))
				return false;
			for (i = 0; i < c->u.truncate.nrelids; i++)
				if (c->u.truncate.relids[i] == 0)
					return false;
			return true;
		case ASH_CHANGE_MESSAGE:
			return c->u.message.prefix != NULL &&
				c->u.message.content != NULL &&
				c->u.message.content_len >= 0 &&
				c->u.message.content_len < msglen &&
				c->u.message.content[c->u.message.content_len] == '\0';
		case ASH_CHANGE_STREAM_START:
			return c->u.stream_start.xid != InvalidTransactionId;
		case ASH_CHANGE_STREAM_STOP:
			return true;
		case ASH_CHANGE_STREAM_COMMIT:
			return c->u.stream_commit.xid != InvalidTransactionId &&
				c->u.stream_commit.flags == 0;
		case ASH_CHANGE_STREAM_ABORT:
			return c->u.stream_abort.xid != InvalidTransactionId &&
				c->u.stream_abort.subxid != InvalidTransactionId;
	}
	return false;
}

/* One wire letter per change kind, for compact sequence checks. */
static char
kind_letter(AshChangeKind k)
{
	switch (k)
	{
		case ASH_CHANGE_BEGIN:
			return 'B';
		case ASH_CHANGE_COMMIT:
			return 'C';
		case ASH_CHANGE_ORIGIN:
			return 'O';
		case ASH_CHANGE_RELATION:
			return 'R';
		case ASH_CHANGE_TYPE:
			return 'Y';
		case ASH_CHANGE_INSERT:
			return 'I';
		case ASH_CHANGE_UPDATE:
			return 'U';
		case ASH_CHANGE_DELETE:
			return 'D';
		case ASH_CHANGE_TRUNCATE:
			return 'T';
		case ASH_CHANGE_MESSAGE:
			return 'M';
		case ASH_CHANGE_STREAM_START:
			return 'S';
		case ASH_CHANGE_STREAM_STOP:
			return 'E';
		case ASH_CHANGE_STREAM_COMMIT:
			return 'c';
		case ASH_CHANGE_STREAM_ABORT:
			return 'A';
	}
	return '?';
}

/*
 * Decode a whole fixture in order, keeping every result (the arena is not
 * reset until the fixture's checks are done).
 */
static bool
decode_fixture(Fixture *fx, int *nfail)
{
	AshPgoutputState state;
	int			i;
	bool		all_valid = true;

	state.proto_version = fx->proto;
	state.in_stream = false;
	fx->okv = calloc(fx->nmsgs, sizeof(bool));
	fx->errv = calloc(fx->nmsgs, sizeof(char *));
	fx->ch = calloc(fx->nmsgs, sizeof(AshChange));
	fx->before = calloc(fx->nmsgs, sizeof(AshPgoutputState));
	*nfail = 0;
	for (i = 0; i < fx->nmsgs; i++)
	{
		fx->before[i] = state;
		fx->okv[i] = ash_decode_pgoutput(&state, (const char *) fx->msgs[i].data,
										 fx->msgs[i].len, &fx->ch[i],
										 &fx->errv[i]);
		if (!fx->okv[i])
		{
			if (*nfail < 5)
				diag("%s line %d: %s", fx->name, i + 1, fx->errv[i]);
			(*nfail)++;
		}
		else if (!valid_change(&fx->ch[i], &fx->before[i], &state,
							   fx->msgs[i].len))
		{
			diag("%s line %d: structurally invalid change", fx->name, i + 1);
			all_valid = false;
		}
	}
	return all_valid;
}

/* "BRIC..." string of the decoded kinds (caller frees). */
static char *
kind_string(const Fixture *fx)
{
	char	   *s = malloc(fx->nmsgs + 1);
	int			i;

	for (i = 0; i < fx->nmsgs; i++)
		s[i] = fx->okv[i] ? kind_letter(fx->ch[i].kind) : '!';
	s[fx->nmsgs] = '\0';
	return s;
}

/* Run-length-compressed form ("B R I*469 E"), easier to read and compare. */
static char *
kind_runs(const Fixture *fx)
{
	char	   *ks = kind_string(fx);
	size_t		cap = 16 * fx->nmsgs + 16;
	char	   *out = malloc(cap);
	size_t		pos = 0;
	int			i = 0;

	out[0] = '\0';
	while (ks[i])
	{
		int			j = i;

		while (ks[j] == ks[i])
			j++;
		if (j - i > 1)
			pos += snprintf(out + pos, cap - pos, "%s%c*%d", pos ? " " : "",
							ks[i], j - i);
		else
			pos += snprintf(out + pos, cap - pos, "%s%c", pos ? " " : "",
							ks[i]);
		i = j;
	}
	free(ks);
	return out;
}

static const AshRelation *
find_relation(const Fixture *fx, const char *nspname, const char *relname,
			  int *index)
{
	int			i;

	for (i = 0; i < fx->nmsgs; i++)
	{
		const AshChange *c = &fx->ch[i];

		if (fx->okv[i] && c->kind == ASH_CHANGE_RELATION &&
			strcmp(c->u.relation.nspname, nspname) == 0 &&
			strcmp(c->u.relation.relname, relname) == 0)
		{
			if (index)
				*index = i;
			return &c->u.relation;
		}
	}
	return NULL;
}

/* Index of the nth (0-based) change of kind on relid, or -1. */
static int
find_change(const Fixture *fx, AshChangeKind kind, uint32 relid, int nth)
{
	int			i;

	for (i = 0; i < fx->nmsgs; i++)
	{
		const AshChange *c = &fx->ch[i];
		uint32		r = 0;

		if (!fx->okv[i] || c->kind != kind)
			continue;
		if (kind == ASH_CHANGE_INSERT)
			r = c->u.insert.relid;
		else if (kind == ASH_CHANGE_UPDATE)
			r = c->u.update.relid;
		else if (kind == ASH_CHANGE_DELETE)
			r = c->u.delete.relid;
		if (relid != 0 && r != relid)
			continue;
		if (nth-- == 0)
			return i;
	}
	return -1;
}

static int
count_kind(const Fixture *fx, AshChangeKind kind)
{
	int			i;
	int			n = 0;

	for (i = 0; i < fx->nmsgs; i++)
		if (fx->okv[i] && fx->ch[i].kind == kind)
			n++;
	return n;
}

/* Column i of t has status st and (for text/binary) exactly len bytes val. */
static bool
col_is(const AshTuple *t, int i, char st, const char *val, int len)
{
	const AshColumnValue *c;

	if (t == NULL || i < 0 || i >= t->natts)
		return false;
	c = &t->cols[i];
	if (c->status != st)
		return false;
	if (st != ASH_COL_TEXT && st != ASH_COL_BINARY)
		return true;
	if (len < 0)
		len = (int) strlen(val);
	return c->len == len && memcmp(c->data, val, len) == 0;
}

static bool
col_text(const AshTuple *t, int i, const char *val)
{
	return col_is(t, i, ASH_COL_TEXT, val, -1);
}

static bool
col_null(const AshTuple *t, int i)
{
	return col_is(t, i, ASH_COL_NULL, NULL, 0);
}

static bool
all_null_from(const AshTuple *t, int from)
{
	int			i;

	for (i = from; i < t->natts; i++)
		if (t->cols[i].status != ASH_COL_NULL)
			return false;
	return t->natts > from;
}

static uint64
be64(const char *p)
{
	const unsigned char *u = (const unsigned char *) p;
	uint64		v = 0;
	int			i;

	for (i = 0; i < 8; i++)
		v = (v << 8) | u[i];
	return v;
}

static uint32
be32(const char *p)
{
	const unsigned char *u = (const unsigned char *) p;

	return ((uint32) u[0] << 24) | ((uint32) u[1] << 16) |
		((uint32) u[2] << 8) | (uint32) u[3];
}

/* ----------------------------------------------------------------
 * Expectations for the basic workload (basic.sql): proto 1, text or
 * binary tuple data.
 * ----------------------------------------------------------------
 */
#define BASIC_KINDS \
	"BYRIIC" "BUC" "BUC" "BDC" \
	"BRIIC" "BUC" "BDC" \
	"BRIC" "BUC" \
	"BRIC" "BUC" "BUC" "BDC" \
	"BRIC" \
	"BRIMC" "M" \
	"BRIC" "BRIC" "BRRTC" "BRTC" \
	"BOIC"

static const char *const t_types_cols[] = {
	"id", "i8", "txt", "b", "num", "arr", "tarr", "j", "ts", "flag", "f8",
	"u", "m"
};

static const uint32 t_types_oids[] = {
	23, 20, 25, 17, 1700, 1007, 1009, 3802, 1184, 16, 701, 2950, 0 /* mood */
};

static void
check_basic(Fixture *fx, bool binary)
{
	const char *nm = fx->name;
	char	   *ks = kind_string(fx);
	const AshRelation *rel;
	const AshChange *c;
	uint32		mood_oid = 0;
	uint32		types_relid = 0;
	int			i;
	int			idx;
	bool		good;

	ok(strcmp(ks, BASIC_KINDS) == 0, "%s: kinds in order", nm);
	if (strcmp(ks, BASIC_KINDS) != 0)
	{
		diag("got      %s", ks);
		diag("expected %s", BASIC_KINDS);
	}
	free(ks);

	/* Type message for the enum */
	i = 1;
	good = fx->okv[i] && fx->ch[i].kind == ASH_CHANGE_TYPE &&
		strcmp(fx->ch[i].u.type.nspname, "public") == 0 &&
		strcmp(fx->ch[i].u.type.typname, "mood") == 0;
	if (good)
		mood_oid = fx->ch[i].u.type.type_oid;
	ok(good && mood_oid >= 16384, "%s: type message for enum public.mood", nm);

	/* Relation t_types */
	rel = find_relation(fx, "public", "t_types", NULL);
	good = rel != NULL && rel->natts == 13 && rel->replident == 'd';
	for (i = 0; good && i < 13; i++)
	{
		uint32		want = t_types_oids[i] ? t_types_oids[i] : mood_oid;

		good = strcmp(rel->cols[i].name, t_types_cols[i]) == 0 &&
			rel->cols[i].type_oid == want &&
			rel->cols[i].is_key == (i == 0);
	}
	ok(good, "%s: relation t_types: 13 columns, names, type oids, key flags", nm);
	if (rel)
	{
		types_relid = rel->relid;
		ok(rel->cols[4].typmod == ((12 << 16) | 3) + 4 &&
		   rel->cols[0].typmod == -1,
		   "%s: relation t_types: numeric(12,3) typmod", nm);
	}
	else
		ok(false, "%s: relation t_types: numeric(12,3) typmod", nm);

	/* First insert: all types */
	idx = find_change(fx, ASH_CHANGE_INSERT, types_relid, 0);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	if (!binary)
	{
		const AshTuple *t = c ? &c->u.insert.newtup : NULL;

		good = t != NULL && t->natts == 13 &&
			col_text(t, 0, "1") &&
			col_text(t, 1, "9223372036854775807") &&
			col_text(t, 2, "hello, world") &&
			col_text(t, 3, "\\xdeadbeef00") &&
			col_text(t, 4, "12345.678") &&
			col_text(t, 5, "{1,2,NULL}") &&
			col_text(t, 6, "{\"a b\",\"c\\\"d\"}") &&
			col_text(t, 7, "{\"k\": [1, 2, {\"n\": null}]}") &&
			col_text(t, 8, "2024-01-02 03:04:05.678+00") &&
			col_text(t, 9, "t") &&
			col_text(t, 10, "1.5") &&
			col_text(t, 11, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11") &&
			col_text(t, 12, "happy");
		ok(good, "%s: insert t_types: text values of int, bigint, text, bytea, "
		   "numeric, arrays, jsonb, timestamptz, bool, float8, uuid, enum", nm);
	}
	else
	{
		const AshTuple *t = c ? &c->u.insert.newtup : NULL;

		good = t != NULL && t->natts == 13 &&
			col_is(t, 0, ASH_COL_BINARY, "\0\0\0\1", 4) &&
			col_is(t, 1, ASH_COL_BINARY, "\x7f\xff\xff\xff\xff\xff\xff\xff", 8) &&
			col_is(t, 2, ASH_COL_BINARY, "hello, world", 12) &&
			col_is(t, 3, ASH_COL_BINARY, "\xde\xad\xbe\xef\x00", 5) &&
			col_is(t, 9, ASH_COL_BINARY, "\1", 1) &&
			col_is(t, 10, ASH_COL_BINARY, "\x3f\xf8\0\0\0\0\0\0", 8) &&
			col_is(t, 11, ASH_COL_BINARY,
				   "\xa0\xee\xbc\x99\x9c\x0b\x4e\xf8\xbb\x6d\x6b\xb9\xbd\x38\x0a\x11",
				   16) &&
			col_is(t, 12, ASH_COL_BINARY, "happy", 5) &&
			t->cols[8].status == ASH_COL_BINARY && t->cols[8].len == 8 &&
			be64(t->cols[8].data) == UINT64CONST(757479845678000) &&
			t->cols[7].status == ASH_COL_BINARY && t->cols[7].len > 1 &&
			t->cols[7].data[0] == 1 &&	/* jsonb binary format version */
			t->cols[5].status == ASH_COL_BINARY && t->cols[5].len > 12 &&
			be32(t->cols[5].data) == 1 &&	/* int[]: one dimension */
			be32(t->cols[5].data + 8) == 23;	/* element type int4 */
		ok(good, "%s: insert t_types: binary values (lengths kept, embedded NUL "
		   "in bytea, int8, float8, uuid, timestamptz, jsonb, int[])", nm);
	}

	/* Second insert: NULLs */
	idx = find_change(fx, ASH_CHANGE_INSERT, types_relid, 1);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->u.insert.newtup.natts == 13 &&
	   col_is(&c->u.insert.newtup, 0, binary ? ASH_COL_BINARY : ASH_COL_TEXT,
			  binary ? "\0\0\0\2" : "2", binary ? 4 : 1) &&
	   all_null_from(&c->u.insert.newtup, 1),
	   "%s: insert t_types: 12 NULL columns ('n')", nm);

	/* Update without key change: no old tuple */
	idx = find_change(fx, ASH_CHANGE_UPDATE, types_relid, 0);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->u.update.oldkind == 0 &&
	   c->u.update.oldtup.natts == 0 && c->u.update.newtup.natts == 13 &&
	   col_is(&c->u.update.newtup, 2, binary ? ASH_COL_BINARY : ASH_COL_TEXT,
			  "changed", 7),
	   "%s: update t_types without key change has no old tuple", nm);

	/* Primary key change: 'K' old tuple with the old key only */
	idx = find_change(fx, ASH_CHANGE_UPDATE, types_relid, 1);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->u.update.oldkind == 'K' &&
	   c->u.update.oldtup.natts == 13 &&
	   col_is(&c->u.update.oldtup, 0, binary ? ASH_COL_BINARY : ASH_COL_TEXT,
			  binary ? "\0\0\0\2" : "2", binary ? 4 : 1) &&
	   all_null_from(&c->u.update.oldtup, 1) &&
	   col_is(&c->u.update.newtup, 0, binary ? ASH_COL_BINARY : ASH_COL_TEXT,
			  binary ? "\0\0\0\x0a" : "10", binary ? 4 : 2),
	   "%s: update t_types changing the primary key carries a 'K' old tuple", nm);

	/* Delete under DEFAULT: 'K' */
	idx = find_change(fx, ASH_CHANGE_DELETE, types_relid, 0);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->u.delete.oldkind == 'K' &&
	   col_is(&c->u.delete.oldtup, 0, binary ? ASH_COL_BINARY : ASH_COL_TEXT,
			  binary ? "\0\0\0\x0a" : "10", binary ? 4 : 2) &&
	   all_null_from(&c->u.delete.oldtup, 1),
	   "%s: delete t_types carries a 'K' old key", nm);

	/* REPLICA IDENTITY FULL */
	rel = find_relation(fx, "public", "t_full", NULL);
	good = rel != NULL && rel->replident == 'f' && rel->natts == 3;
	for (i = 0; good && i < 3; i++)
		good = rel->cols[i].is_key;
	ok(good, "%s: relation t_full: replident 'f', every column flagged key", nm);
	if (rel && !binary)
	{
		uint32		relid = rel->relid;

		idx = find_change(fx, ASH_CHANGE_UPDATE, relid, 0);
		c = idx >= 0 ? &fx->ch[idx] : NULL;
		ok(c != NULL && c->u.update.oldkind == 'O' &&
		   col_text(&c->u.update.oldtup, 0, "1") &&
		   col_text(&c->u.update.oldtup, 1, "one") &&
		   col_null(&c->u.update.oldtup, 2) &&
		   col_text(&c->u.update.newtup, 1, "uno"),
		   "%s: update t_full carries the full 'O' old row", nm);
		idx = find_change(fx, ASH_CHANGE_DELETE, relid, 0);
		c = idx >= 0 ? &fx->ch[idx] : NULL;
		ok(c != NULL && c->u.delete.oldkind == 'O' &&
		   col_text(&c->u.delete.oldtup, 0, "2") &&
		   col_text(&c->u.delete.oldtup, 1, "two") &&
		   col_text(&c->u.delete.oldtup, 2, "x"),
		   "%s: delete t_full carries the full 'O' old row", nm);
	}

	/* TOAST: full value on insert, 'u' on the update that leaves it alone */
	rel = find_relation(fx, "public", "t_toast", NULL);
	if (rel)
	{
		uint32		relid = rel->relid;

		idx = find_change(fx, ASH_CHANGE_INSERT, relid, 0);
		c = idx >= 0 ? &fx->ch[idx] : NULL;
		ok(c != NULL && c->u.insert.newtup.natts == 3 &&
		   c->u.insert.newtup.cols[2].len == 3200 &&
		   memcmp(c->u.insert.newtup.cols[2].data,
				  "c4ca4238a0b923820dcc509a6f75849b", 32) == 0,
		   "%s: insert t_toast carries the 3200-byte TOASTed value", nm);
		idx = find_change(fx, ASH_CHANGE_UPDATE, relid, 0);
		c = idx >= 0 ? &fx->ch[idx] : NULL;
		ok(c != NULL && c->u.update.oldkind == 0 &&
		   c->u.update.newtup.natts == 3 &&
		   col_is(&c->u.update.newtup, 1, binary ? ASH_COL_BINARY : ASH_COL_TEXT,
				  binary ? "\0\0\0\1" : "1", binary ? 4 : 1) &&
		   col_is(&c->u.update.newtup, 2, ASH_COL_UNCHANGED, NULL, 0),
		   "%s: update t_toast: unchanged TOAST column is 'u'", nm);
	}
	else
	{
		ok(false, "%s: insert t_toast carries the 3200-byte TOASTed value", nm);
		ok(false, "%s: update t_toast: unchanged TOAST column is 'u'", nm);
	}

	/* REPLICA IDENTITY USING INDEX */
	rel = find_relation(fx, "public", "t_idx", NULL);
	ok(rel != NULL && rel->replident == 'i' && rel->natts == 3 &&
	   rel->cols[0].is_key && rel->cols[1].is_key && !rel->cols[2].is_key,
	   "%s: relation t_idx: replident 'i', key flags on (a, b)", nm);
	if (rel && !binary)
	{
		idx = find_change(fx, ASH_CHANGE_UPDATE, rel->relid, 1);
		c = idx >= 0 ? &fx->ch[idx] : NULL;
		ok(c != NULL && c->u.update.oldkind == 'K' &&
		   col_text(&c->u.update.oldtup, 0, "1") &&
		   col_text(&c->u.update.oldtup, 1, "2") &&
		   col_null(&c->u.update.oldtup, 2) &&
		   col_text(&c->u.update.newtup, 1, "3") &&
		   col_text(&c->u.update.newtup, 2, "m"),
		   "%s: update t_idx changing the index key carries 'K'", nm);
	}

	/* Dropped and generated columns are not sent */
	rel = find_relation(fx, "public", "t_drop", NULL);
	ok(rel != NULL && rel->natts == 2 &&
	   strcmp(rel->cols[0].name, "id") == 0 &&
	   strcmp(rel->cols[1].name, "kept") == 0,
	   "%s: relation t_drop: dropped and generated columns absent", nm);

	/* Quoted identifiers in another schema */
	rel = find_relation(fx, "other", "Mixed Case", NULL);
	ok(rel != NULL && rel->natts == 2,
	   "%s: relation other.\"Mixed Case\"", nm);

	/* Messages */
	idx = -1;
	for (i = 0; i < fx->nmsgs; i++)
		if (fx->okv[i] && fx->ch[i].kind == ASH_CHANGE_MESSAGE)
		{
			idx = i;
			break;
		}
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->u.message.transactional &&
	   strcmp(c->u.message.prefix, "ash.tx") == 0 &&
	   c->u.message.content_len == 21 &&
	   strcmp(c->u.message.content, "transactional payload") == 0 &&
	   c->u.message.lsn != InvalidXLogRecPtr &&
	   idx > 0 && fx->ch[idx - 1].kind == ASH_CHANGE_INSERT &&
	   fx->ch[idx + 1].kind == ASH_CHANGE_COMMIT,
	   "%s: transactional message inside its transaction", nm);
	c = (idx >= 0 && idx + 2 < fx->nmsgs) ? &fx->ch[idx + 2] : NULL;
	ok(c != NULL && c->kind == ASH_CHANGE_MESSAGE &&
	   !c->u.message.transactional &&
	   strcmp(c->u.message.prefix, "ash.nt") == 0 &&
	   c->u.message.content_len == 3 &&
	   memcmp(c->u.message.content, "\0\xff\x01", 3) == 0 &&
	   c->u.message.lsn != InvalidXLogRecPtr,
	   "%s: non-transactional message outside a transaction, binary content", nm);

	/* Truncates */
	{
		const AshRelation *ra = find_relation(fx, "public", "t_trunc_a", NULL);
		const AshRelation *rb = find_relation(fx, "public", "t_trunc_b", NULL);
		const AshRelation *rf = find_relation(fx, "public", "t_full", NULL);
		int			t1 = -1;
		int			t2 = -1;

		for (i = 0; i < fx->nmsgs; i++)
			if (fx->okv[i] && fx->ch[i].kind == ASH_CHANGE_TRUNCATE)
			{
				if (t1 < 0)
					t1 = i;
				else
					t2 = i;
			}
		c = t1 >= 0 ? &fx->ch[t1] : NULL;
		ok(c != NULL && ra != NULL && rb != NULL &&
		   c->u.truncate.nrelids == 2 &&
		   c->u.truncate.cascade && c->u.truncate.restart_seqs &&
		   ((c->u.truncate.relids[0] == ra->relid &&
			 c->u.truncate.relids[1] == rb->relid) ||
			(c->u.truncate.relids[0] == rb->relid &&
			 c->u.truncate.relids[1] == ra->relid)),
		   "%s: truncate of two tables, CASCADE and RESTART IDENTITY flags", nm);
		c = t2 >= 0 ? &fx->ch[t2] : NULL;
		ok(c != NULL && rf != NULL && c->u.truncate.nrelids == 1 &&
		   !c->u.truncate.cascade && !c->u.truncate.restart_seqs &&
		   c->u.truncate.relids[0] == rf->relid,
		   "%s: truncate of one table, no flags", nm);
	}

	/* Origin */
	idx = -1;
	for (i = 0; i < fx->nmsgs; i++)
		if (fx->okv[i] && fx->ch[i].kind == ASH_CHANGE_ORIGIN)
			idx = i;
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && idx > 0 && strcmp(c->u.origin.name, "ash_origin") == 0 &&
	   c->u.origin.origin_lsn == UINT64CONST(0xABCDEF) &&
	   fx->ch[idx - 1].kind == ASH_CHANGE_BEGIN,
	   "%s: origin message after begin: name and LSN", nm);

	/* Begin/commit pairing and LSNs */
	good = true;
	{
		XLogRecPtr	final_lsn = InvalidXLogRecPtr;
		TransactionId last_xid = InvalidTransactionId;

		for (i = 0; i < fx->nmsgs; i++)
		{
			c = &fx->ch[i];
			if (c->kind == ASH_CHANGE_BEGIN)
			{
				if (final_lsn != InvalidXLogRecPtr)
					good = false;
				final_lsn = c->u.begin.final_lsn;
				if (c->u.begin.xid <= last_xid || c->u.begin.commit_time <= 0)
					good = false;
				last_xid = c->u.begin.xid;
			}
			else if (c->kind == ASH_CHANGE_COMMIT)
			{
				if (c->u.commit.commit_lsn != final_lsn ||
					c->u.commit.end_lsn <= c->u.commit.commit_lsn)
					good = false;
				final_lsn = InvalidXLogRecPtr;
			}
		}
	}
	ok(good, "%s: begin/commit pairs: final_lsn = commit_lsn < end_lsn, "
	   "increasing xids", nm);
}

/* ----------------------------------------------------------------
 * Expectations for the streaming workload (stream.sql).
 * ----------------------------------------------------------------
 */
#define STREAM_KINDS \
	"S R I*469 E " \
	"S I*131 M U D R T E c " \
	"S R I*469 E A S R I E c " \
	"S R I*469 E A " \
	"B I C"

#define NOSTREAM_KINDS \
	"B R I*600 M U D R T C " \
	"B I*301 C " \
	"B I C"

static void
check_stream(Fixture *fx)
{
	const char *nm = fx->name;
	char	   *runs = kind_runs(fx);
	TransactionId cur = InvalidTransactionId;
	TransactionId xids[3] = {0, 0, 0};
	int			nxacts = 0;
	int			nstart = 0;
	int			nfirst = 0;
	bool		xid_match = true;
	bool		in_block = false;
	int			i;
	const AshChange *c;
	const AshRelation *rel;
	int			idx;

	ok(strcmp(runs, STREAM_KINDS) == 0, "%s: kinds in order", nm);
	if (strcmp(runs, STREAM_KINDS) != 0)
	{
		diag("got      %s", runs);
		diag("expected %s", STREAM_KINDS);
	}
	free(runs);

	/*
	 * Inside a block a change carries the xid of the transaction that made
	 * it: the streamed top-level xid, or a subtransaction's xid (pgoutput
	 * sends change->txn->xid).  Never another block's top-level xid.
	 */
	for (i = 0; i < fx->nmsgs; i++)
	{
		c = &fx->ch[i];
		if (fx->okv[i] && c->kind == ASH_CHANGE_STREAM_START &&
			c->u.stream_start.first_segment && nxacts < 3)
			xids[nxacts++] = c->u.stream_start.xid;
	}
	for (i = 0; i < fx->nmsgs; i++)
	{
		c = &fx->ch[i];
		if (!fx->okv[i])
			continue;
		switch (c->kind)
		{
			case ASH_CHANGE_STREAM_START:
				nstart++;
				in_block = true;
				cur = c->u.stream_start.xid;
				if (c->u.stream_start.first_segment)
					nfirst++;
				break;
			case ASH_CHANGE_STREAM_STOP:
				in_block = false;
				break;
			default:
				if (in_block)
				{
					int			j;

					if (c->xid == InvalidTransactionId)
						xid_match = false;
					for (j = 0; j < nxacts; j++)
						if (xids[j] != cur && c->xid == xids[j])
							xid_match = false;
				}
				else if (c->xid != InvalidTransactionId)
					xid_match = false;
				break;
		}
	}
	ok(nstart == 5 && nfirst == 3 && nxacts == 3,
	   "%s: five stream blocks, three first segments", nm);
	ok(xid_match, "%s: every change in a block carries its transaction's xid",
	   nm);
	ok(fx->before[0].in_stream == false && fx->before[1].in_stream == true,
	   "%s: stream start sets in_stream", nm);

	/* second transaction: 300 top-level rows, then 169 of the savepoint */
	{
		int			ntop = 0;
		int			nsub = 0;
		TransactionId subxid = InvalidTransactionId;

		for (i = 0; i < fx->nmsgs; i++)
			if (fx->ch[i].kind == ASH_CHANGE_STREAM_ABORT)
			{
				subxid = fx->ch[i].u.stream_abort.subxid;
				break;
			}
		for (i = 0; i < fx->nmsgs; i++)
		{
			c = &fx->ch[i];
			if (c->kind == ASH_CHANGE_INSERT && c->xid == xids[1])
				ntop++;
			if (c->kind == ASH_CHANGE_INSERT && c->xid == subxid)
				nsub++;
		}
		ok(ntop == 300 && nsub == 169 && subxid != xids[1],
		   "%s: subtransaction changes carry the subxid named by the stream "
		   "abort", nm);
	}

	rel = find_relation(fx, "public", "t_stream", &idx);
	ok(rel != NULL && fx->ch[idx].xid == xids[0] && rel->natts == 2 &&
	   rel->cols[0].is_key && !rel->cols[1].is_key,
	   "%s: relation message inside a stream carries the xid", nm);

	/* first insert of the first block: id 1, v NULL */
	idx = find_change(fx, ASH_CHANGE_INSERT, 0, 0);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->xid == xids[0] && col_text(&c->u.insert.newtup, 0, "1") &&
	   col_null(&c->u.insert.newtup, 1),
	   "%s: streamed insert values", nm);

	idx = -1;
	for (i = 0; i < fx->nmsgs; i++)
		if (fx->ch[i].kind == ASH_CHANGE_MESSAGE)
			idx = i;
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->xid == xids[0] && c->u.message.transactional &&
	   strcmp(c->u.message.prefix, "ash.big") == 0 &&
	   strcmp(c->u.message.content, "in stream") == 0,
	   "%s: transactional message inside a stream carries the xid", nm);

	idx = find_change(fx, ASH_CHANGE_UPDATE, 0, 0);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->xid == xids[0] && c->u.update.oldkind == 0 &&
	   col_text(&c->u.update.newtup, 1, "updated"),
	   "%s: streamed update", nm);
	idx = find_change(fx, ASH_CHANGE_DELETE, 0, 0);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && c->xid == xids[0] && c->u.delete.oldkind == 'K' &&
	   col_text(&c->u.delete.oldtup, 0, "2"),
	   "%s: streamed delete", nm);

	idx = -1;
	for (i = 0; i < fx->nmsgs; i++)
		if (fx->ch[i].kind == ASH_CHANGE_TRUNCATE)
			idx = i;
	rel = find_relation(fx, "public", "t_stream_aux", NULL);
	c = idx >= 0 ? &fx->ch[idx] : NULL;
	ok(c != NULL && rel != NULL && c->xid == xids[0] &&
	   c->u.truncate.nrelids == 1 && c->u.truncate.relids[0] == rel->relid,
	   "%s: streamed truncate carries the xid and relid", nm);

	/* stream commits and aborts */
	{
		int			ncommit = 0;
		int			nabort = 0;
		bool		good = true;

		for (i = 0; i < fx->nmsgs; i++)
		{
			c = &fx->ch[i];
			if (c->kind == ASH_CHANGE_STREAM_COMMIT)
			{
				if (c->u.stream_commit.xid != xids[ncommit] ||
					c->u.stream_commit.commit_lsn == InvalidXLogRecPtr ||
					c->u.stream_commit.end_lsn <= c->u.stream_commit.commit_lsn ||
					c->u.stream_commit.commit_time <= 0)
					good = false;
				ncommit++;
			}
			else if (c->kind == ASH_CHANGE_STREAM_ABORT)
			{
				/* first: subtransaction of xact 2; second: xact 3 itself */
				if (nabort == 0 &&
					(c->u.stream_abort.xid != xids[1] ||
					 c->u.stream_abort.subxid == xids[1]))
					good = false;
				if (nabort == 1 &&
					(c->u.stream_abort.xid != xids[2] ||
					 c->u.stream_abort.subxid != xids[2]))
					good = false;
				nabort++;
			}
		}
		ok(good && ncommit == 2 && nabort == 2,
		   "%s: stream commits (xid, LSNs) and stream aborts (subxact and "
		   "top-level)", nm);
	}

	ok(fx->ch[fx->nmsgs - 3].kind == ASH_CHANGE_BEGIN &&
	   fx->before[fx->nmsgs - 3].in_stream == false &&
	   fx->ch[fx->nmsgs - 2].xid == InvalidTransactionId &&
	   col_text(&fx->ch[fx->nmsgs - 2].u.insert.newtup, 0, "9999"),
	   "%s: ordinary transaction after the streams has no xid on changes", nm);
}

static void
check_nostream(Fixture *fx)
{
	const char *nm = fx->name;
	char	   *runs = kind_runs(fx);
	int			i;
	int			n = 0;
	bool		good = true;

	ok(strcmp(runs, NOSTREAM_KINDS) == 0, "%s: kinds in order", nm);
	if (strcmp(runs, NOSTREAM_KINDS) != 0)
	{
		diag("got      %s", runs);
		diag("expected %s", NOSTREAM_KINDS);
	}
	free(runs);

	/* the rolled-back subtransaction's rows (2001..2400) are absent */
	for (i = 0; i < fx->nmsgs; i++)
	{
		const AshChange *c = &fx->ch[i];

		if (c->kind == ASH_CHANGE_INSERT)
		{
			long		id = strtol(c->u.insert.newtup.cols[0].data, NULL, 10);

			if (id >= 2001 && id <= 2400)
				good = false;
			if (c->xid != InvalidTransactionId)
				good = false;
			n++;
		}
	}
	ok(good && n == 902, "%s: 902 inserts without xid, rolled-back "
	   "subtransaction absent", nm);
	ok(count_kind(fx, ASH_CHANGE_STREAM_START) == 0 &&
	   count_kind(fx, ASH_CHANGE_STREAM_ABORT) == 0 &&
	   count_kind(fx, ASH_CHANGE_COMMIT) == 3,
	   "%s: without streaming: no stream messages, three commits", nm);
}

/* ----------------------------------------------------------------
 * Mutation tests over a decoded fixture.
 * ----------------------------------------------------------------
 */
static uint64 rng_state = UINT64CONST(0x5eed5eed12345678);

static uint64
rng_next(void)
{
	/* xorshift64* */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * UINT64CONST(2685821657736338717);
}

static int
rng_below(int n)
{
	return (int) (rng_next() % (uint64) n);
}

/* Decode once from a copy of the given state; returns the result. */
static bool
decode_once(const AshPgoutputState *st, const unsigned char *data, int len,
			bool *valid, bool *bounded)
{
	AshPgoutputState state = *st;
	AshChange	ch;
	const char *error = NULL;
	bool		res;
	unsigned char *copy = NULL;

	/* exact-size heap copy so the sanitizer catches any overread */
	if (len > 0)
	{
		copy = malloc(len);
		memcpy(copy, data, len);
	}
	res = ash_decode_pgoutput(&state, (const char *) copy, len, &ch, &error);
	*bounded = alloc_within_bound(len);
	if (res)
	{
		*valid = error == NULL && valid_change(&ch, st, &state, len);
	}
	else
	{
		note_error(error);
		*valid = error != NULL &&
			state.in_stream == st->in_stream;	/* failure keeps state */
	}
	arena_reset();
	free(copy);
	return res;
}

static void
mutate_fixture(Fixture *fx, int iterations)
{
	const char *nm = fx->name;
	int			i;
	int			k;
	long		ntrunc = 0;
	long		trunc_accepted = 0;
	bool		all_valid = true;
	bool		all_bounded = true;
	int			ext_accepted = 0;
	int			fuzz_accepted = 0;
	unsigned char *buf;
	int			maxlen = 0;

	for (i = 0; i < fx->nmsgs; i++)
		if (fx->msgs[i].len > maxlen)
			maxlen = fx->msgs[i].len;
	buf = malloc(maxlen + 16);

	/* every strict prefix must be rejected */
	for (i = 0; i < fx->nmsgs; i++)
	{
		const Msg  *m = &fx->msgs[i];

		for (k = 0; k < m->len; k++)
		{
			bool		valid;
			bool		bounded;

			ntrunc++;
			if (decode_once(&fx->before[i], m->data, k, &valid, &bounded))
				trunc_accepted++;
			all_valid &= valid;
			all_bounded &= bounded;
		}
	}
	ok(trunc_accepted == 0 && ntrunc > 0,
	   "%s: all %ld truncations of %d messages rejected", nm, ntrunc,
	   fx->nmsgs);

	/* one extra byte after a complete message must be rejected */
	for (i = 0; i < fx->nmsgs; i++)
	{
		const Msg  *m = &fx->msgs[i];
		bool		valid;
		bool		bounded;

		memcpy(buf, m->data, m->len);
		buf[m->len] = (unsigned char) rng_below(256);
		if (decode_once(&fx->before[i], buf, m->len + 1, &valid, &bounded))
			ext_accepted++;
		all_valid &= valid;
		all_bounded &= bounded;
	}
	ok(ext_accepted == 0, "%s: trailing byte rejected on all %d messages",
	   nm, fx->nmsgs);

	/* random byte flips, sometimes with a truncation: never crash */
	for (k = 0; k < iterations; k++)
	{
		const Msg  *m;
		int			nflips;
		int			len;
		int			j;
		bool		valid;
		bool		bounded;

		i = rng_below(fx->nmsgs);
		m = &fx->msgs[i];
		memcpy(buf, m->data, m->len);
		len = m->len;
		nflips = 1 + rng_below(4);
		for (j = 0; j < nflips; j++)
		{
			int			pos = rng_below(len);

			switch (rng_below(4))
			{
				case 0:
					buf[pos] ^= (unsigned char) (1 << rng_below(8));
					break;
				case 1:
					buf[pos] = (unsigned char) rng_below(256);
					break;
				case 2:
					/* large or negative counts/lengths */
					buf[pos] = rng_below(2) ? 0xff : 0x7f;
					break;
				default:
					buf[pos] = 0;
					break;
			}
		}
		if (rng_below(8) == 0)
			len = rng_below(len + 1);
		if (decode_once(&fx->before[i], buf, len, &valid, &bounded))
			fuzz_accepted++;
		all_valid &= valid;
		all_bounded &= bounded;
	}
	ok(all_valid, "%s: %d random mutations: no crash, failures keep state, "
	   "successes structurally valid", nm, iterations);
	diag("%s: %d of %d mutated messages still decoded", nm, fuzz_accepted,
		 iterations);
	ok(all_bounded, "%s: allocation bounded by message length in every case",
	   nm);
	free(buf);
}

/* ----------------------------------------------------------------
 * Hand-built messages.
 * ----------------------------------------------------------------
 */
typedef struct Buf
{
	unsigned char d[4096];
	int			len;
} Buf;

static void
b_reset(Buf *b)
{
	b->len = 0;
}

static void
b_byte(Buf *b, int v)
{
	b->d[b->len++] = (unsigned char) v;
}

static void
b_i16(Buf *b, int v)
{
	b_byte(b, (v >> 8) & 0xff);
	b_byte(b, v & 0xff);
}

static void
b_i32(Buf *b, int64 v)
{
	uint32		u = (uint32) v;

	b_byte(b, (u >> 24) & 0xff);
	b_byte(b, (u >> 16) & 0xff);
	b_byte(b, (u >> 8) & 0xff);
	b_byte(b, u & 0xff);
}

static void
b_i64(Buf *b, uint64 v)
{
	b_i32(b, (int64) (v >> 32));
	b_i32(b, (int64) (v & 0xffffffff));
}

static void
b_str(Buf *b, const char *s)
{
	size_t		n = strlen(s) + 1;

	memcpy(b->d + b->len, s, n);
	b->len += (int) n;
}

static void
b_raw(Buf *b, const void *p, int n)
{
	memcpy(b->d + b->len, p, n);
	b->len += n;
}

typedef struct Result
{
	bool		ok;
	const char *error;
	AshChange	ch;
	AshPgoutputState after;
} Result;

/* Decode b (exact-size copy) with proto and in_stream; keeps the arena. */
static Result
run(const Buf *b, int proto, bool in_stream)
{
	Result		r;
	unsigned char *copy = malloc(b->len > 0 ? b->len : 1);

	memcpy(copy, b->d, b->len);
	r.after.proto_version = proto;
	r.after.in_stream = in_stream;
	r.error = NULL;
	r.ok = ash_decode_pgoutput(&r.after, (const char *) copy, b->len, &r.ch,
							   &r.error);
	if (!r.ok)
		note_error(r.error);
	free(copy);
	return r;
}

static bool
fails_with(const Buf *b, int proto, bool in_stream, const char *substr)
{
	Result		r = run(b, proto, in_stream);
	bool		res;

	res = !r.ok && r.error != NULL && strstr(r.error, substr) != NULL &&
		r.after.in_stream == in_stream;
	if (!res)
		diag("result %s, error \"%s\"", r.ok ? "true" : "false",
			 r.error ? r.error : "(null)");
	arena_reset();
	return res;
}

/* Relation message prefix: tag, [xid], relid, nsp, relname, replident */
static void
b_relation_head(Buf *b, bool stream, const char *nsp, const char *relname,
				int replident)
{
	b_reset(b);
	b_byte(b, 'R');
	if (stream)
		b_i32(b, 777);
	b_i32(b, 16400);
	b_str(b, nsp);
	b_str(b, relname);
	b_byte(b, replident);
}

static void
b_insert_head(Buf *b, bool stream)
{
	b_reset(b);
	b_byte(b, 'I');
	if (stream)
		b_i32(b, 777);
	b_i32(b, 16400);
	b_byte(b, 'N');
}

static void
test_handmade(void)
{
	Buf			b;
	Result		r;
	AshChange	ch;
	AshPgoutputState st;
	const char *error;
	char		longname[80];
	int			i;
	static const char two_phase[] = {'b', 'P', 'K', 'r', 'p'};

	/* --- arguments and framing --- */
	st.proto_version = 1;
	st.in_stream = false;
	error = NULL;
	ok(!ash_decode_pgoutput(&st, "", 0, &ch, &error) && error != NULL,
	   "empty message rejected");
	error = NULL;
	ok(!ash_decode_pgoutput(&st, NULL, 5, &ch, &error) && error != NULL,
	   "NULL data rejected");
	ok(!ash_decode_pgoutput(&st, "E", 1, &ch, NULL),
	   "NULL error pointer: returns false without crashing");
	ok(!ash_decode_pgoutput(NULL, "E", 1, &ch, &error) && error != NULL,
	   "NULL state rejected");
	arena_reset();

	b_reset(&b);
	b_byte(&b, 'Z');
	ok(fails_with(&b, 1, false, "unknown pgoutput message type"),
	   "unknown tag 'Z' is a protocol violation");
	b_reset(&b);
	b_byte(&b, 0);
	ok(fails_with(&b, 3, false, "unknown pgoutput message type"),
	   "tag NUL is a protocol violation");

	for (i = 0; i < (int) sizeof(two_phase); i++)
	{
		Result		r2;

		b_reset(&b);
		b_byte(&b, two_phase[i]);
		b_i64(&b, 0x1000);
		b_i64(&b, 0x2000);
		b_i64(&b, 1);
		b_i32(&b, 700);
		b_str(&b, "gid");
		r2 = run(&b, 3, false);
		ok(!r2.ok && r2.error != NULL &&
		   strcmp(r2.error, "two-phase messages are not supported") == 0,
		   "two-phase message '%c' refused with its own error", two_phase[i]);
		arena_reset();
	}

	/* --- protocol version --- */
	b_reset(&b);
	b_byte(&b, 'B');
	b_i64(&b, UINT64CONST(0x16B3748));
	b_i64(&b, 757479845678000);
	b_i32(&b, 735);
	for (i = 1; i <= 3; i++)
	{
		r = run(&b, i, false);
		ok(r.ok && r.ch.kind == ASH_CHANGE_BEGIN &&
		   r.ch.u.begin.final_lsn == UINT64CONST(0x16B3748) &&
		   r.ch.u.begin.commit_time == 757479845678000 &&
		   r.ch.u.begin.xid == 735 && r.ch.xid == InvalidTransactionId &&
		   r.error == NULL,
		   "begin decodes under protocol version %d", i);
		arena_reset();
	}
	ok(fails_with(&b, 0, false, "protocol version"),
	   "protocol version 0 rejected");
	ok(fails_with(&b, 4, false, "protocol version"),
	   "protocol version 4 rejected");
	ok(fails_with(&b, 2, true, "inside a streaming block"),
	   "begin inside a streaming block rejected");
	b_byte(&b, 0);
	ok(fails_with(&b, 1, false, "trailing"), "trailing garbage after begin rejected");
	b_reset(&b);
	b_byte(&b, 'B');
	b_i64(&b, 0);
	b_i64(&b, 1);
	b_i32(&b, 735);
	ok(fails_with(&b, 1, false, "LSN"), "begin with invalid final_lsn rejected");

	/* --- commit --- */
	b_reset(&b);
	b_byte(&b, 'C');
	b_byte(&b, 0);
	b_i64(&b, 0x100);
	b_i64(&b, 0x180);
	b_i64(&b, 42);
	r = run(&b, 1, false);
	ok(r.ok && r.ch.kind == ASH_CHANGE_COMMIT && r.ch.u.commit.commit_lsn == 0x100 &&
	   r.ch.u.commit.end_lsn == 0x180 && r.ch.u.commit.commit_time == 42,
	   "commit decodes");
	arena_reset();
	b.d[1] = 1;
	ok(fails_with(&b, 1, false, "flags"), "commit with unknown flags rejected");

	/* --- streaming control --- */
	b_reset(&b);
	b_byte(&b, 'S');
	b_i32(&b, 777);
	b_byte(&b, 1);
	ok(fails_with(&b, 1, false, "protocol version 2"),
	   "stream start under protocol 1 rejected");
	r = run(&b, 2, false);
	ok(r.ok && r.ch.kind == ASH_CHANGE_STREAM_START &&
	   r.ch.u.stream_start.xid == 777 && r.ch.u.stream_start.first_segment &&
	   r.after.in_stream && r.ch.xid == InvalidTransactionId,
	   "stream start decodes and sets in_stream");
	arena_reset();
	ok(fails_with(&b, 2, true, "inside a streaming block"),
	   "nested stream start rejected");
	b.d[5] = 2;
	ok(fails_with(&b, 2, false, "first-segment"),
	   "stream start with first_segment 2 rejected");
	b.len = 4;
	ok(fails_with(&b, 2, false, "truncated"),
	   "truncated stream start rejected, in_stream unchanged");
	b_reset(&b);
	b_byte(&b, 'S');
	b_i32(&b, 0);
	b_byte(&b, 0);
	ok(fails_with(&b, 2, false, "transaction id"),
	   "stream start with invalid xid rejected");

	b_reset(&b);
	b_byte(&b, 'E');
	r = run(&b, 3, true);
	ok(r.ok && r.ch.kind == ASH_CHANGE_STREAM_STOP && !r.after.in_stream,
	   "stream stop decodes and clears in_stream");
	arena_reset();
	ok(fails_with(&b, 2, false, "outside a streaming block"),
	   "stream stop outside a block rejected");

	b_reset(&b);
	b_byte(&b, 'c');
	b_i32(&b, 777);
	b_byte(&b, 0);
	b_i64(&b, 0x200);
	b_i64(&b, 0x280);
	b_i64(&b, 99);
	r = run(&b, 2, false);
	ok(r.ok && r.ch.kind == ASH_CHANGE_STREAM_COMMIT &&
	   r.ch.u.stream_commit.xid == 777 &&
	   r.ch.u.stream_commit.commit_lsn == 0x200 &&
	   r.ch.u.stream_commit.end_lsn == 0x280 &&
	   r.ch.u.stream_commit.commit_time == 99,
	   "stream commit decodes");
	arena_reset();
	ok(fails_with(&b, 2, true, "inside a streaming block"),
	   "stream commit inside a block rejected");
	b.d[5] = 4;
	ok(fails_with(&b, 2, false, "flags"), "stream commit with flags rejected");

	b_reset(&b);
	b_byte(&b, 'A');
	b_i32(&b, 777);
	b_i32(&b, 778);
	r = run(&b, 2, false);
	ok(r.ok && r.ch.kind == ASH_CHANGE_STREAM_ABORT &&
	   r.ch.u.stream_abort.xid == 777 && r.ch.u.stream_abort.subxid == 778,
	   "stream abort decodes");
	arena_reset();

	/* --- streamed changes carry an xid --- */
	b_insert_head(&b, true);
	b_i16(&b, 1);
	b_byte(&b, 't');
	b_i32(&b, 2);
	b_raw(&b, "42", 2);
	r = run(&b, 2, true);
	ok(r.ok && r.ch.kind == ASH_CHANGE_INSERT && r.ch.xid == 777 &&
	   r.ch.u.insert.relid == 16400 && r.after.in_stream &&
	   col_text(&r.ch.u.insert.newtup, 0, "42"),
	   "streamed insert: xid, relid, value");
	arena_reset();
	ok(fails_with(&b, 2, false, "marker"),
	   "the same bytes outside a stream are misframed and rejected");
	b.d[1] = b.d[2] = b.d[3] = b.d[4] = 0;
	ok(fails_with(&b, 2, true, "transaction id"),
	   "streamed insert with invalid xid rejected");

	/* --- relation --- */
	b_relation_head(&b, false, "", "rel", 'd');
	b_i16(&b, 1);
	b_byte(&b, 1);
	b_str(&b, "id");
	b_i32(&b, 23);
	b_i32(&b, -1);
	r = run(&b, 1, false);
	ok(r.ok && strcmp(r.ch.u.relation.nspname, "pg_catalog") == 0 &&
	   strcmp(r.ch.u.relation.relname, "rel") == 0 &&
	   r.ch.u.relation.natts == 1 && r.ch.u.relation.cols[0].is_key &&
	   r.ch.u.relation.cols[0].typmod == -1,
	   "relation: empty namespace means pg_catalog");
	arena_reset();

	b_relation_head(&b, false, "public", "rel", 'd');
	b_i16(&b, 0);
	r = run(&b, 1, false);
	ok(r.ok && r.ch.u.relation.natts == 0 && r.ch.u.relation.cols == NULL,
	   "relation with zero columns");
	arena_reset();

	b_relation_head(&b, false, "public", "rel", 'x');
	b_i16(&b, 0);
	ok(fails_with(&b, 1, false, "replica identity"),
	   "relation with unknown replica identity rejected");

	b_relation_head(&b, false, "public", "rel", 'd');
	b_i16(&b, 30000);
	ok(fails_with(&b, 1, false, "column count"),
	   "relation with natts 30000 rejected");
	b_relation_head(&b, false, "public", "rel", 'd');
	b_i16(&b, 0xffff);
	ok(fails_with(&b, 1, false, "column count"),
	   "relation with negative natts rejected");
	b_relation_head(&b, false, "public", "rel", 'd');
	b_i16(&b, 1665);
	for (i = 0; i < 1665 && b.len + 10 < (int) sizeof(b.d); i++)
		b_byte(&b, 0);
	ok(fails_with(&b, 1, false, "column count"),
	   "relation with natts 1665 (> MaxTupleAttributeNumber) rejected");
	b_relation_head(&b, false, "public", "rel", 'd');
	b_i16(&b, 2);
	b_byte(&b, 0);
	b_str(&b, "a");
	b_i32(&b, 23);
	b_i32(&b, -1);
	ok(fails_with(&b, 1, false, "column count"),
	   "relation with natts above the remaining bytes rejected");

	b_relation_head(&b, false, "public", "rel", 'd');
	b_i16(&b, 1);
	b_byte(&b, 2);
	b_str(&b, "id");
	b_i32(&b, 23);
	b_i32(&b, -1);
	ok(fails_with(&b, 1, false, "flags"), "relation column with unknown flags rejected");

	b_reset(&b);
	b_byte(&b, 'R');
	b_i32(&b, 16400);
	b_str(&b, "public");
	b_raw(&b, "rel", 3);
	ok(fails_with(&b, 1, false, "unterminated"),
	   "relation name without NUL terminator rejected");

	b_relation_head(&b, false, "public", "", 'd');
	b_i16(&b, 0);
	ok(fails_with(&b, 1, false, "empty name"), "empty relation name rejected");

	memset(longname, 'x', sizeof(longname));
	longname[63] = '\0';
	b_relation_head(&b, false, "public", longname, 'd');
	b_i16(&b, 0);
	r = run(&b, 1, false);
	ok(r.ok && strlen(r.ch.u.relation.relname) == 63,
	   "63-byte relation name accepted");
	arena_reset();
	longname[63] = 'x';
	longname[64] = '\0';
	b_relation_head(&b, false, "public", longname, 'd');
	b_i16(&b, 0);
	ok(fails_with(&b, 1, false, "too long"), "64-byte relation name rejected");

	b_relation_head(&b, true, "public", "rel", 'f');
	b_i16(&b, 0);
	r = run(&b, 2, true);
	ok(r.ok && r.ch.xid == 777 && r.ch.u.relation.relid == 16400 &&
	   r.ch.u.relation.replident == 'f',
	   "streamed relation carries xid");
	arena_reset();

	b_reset(&b);
	b_byte(&b, 'R');
	b_i32(&b, 0);
	b_str(&b, "public");
	b_str(&b, "rel");
	b_byte(&b, 'd');
	b_i16(&b, 0);
	ok(fails_with(&b, 1, false, "relation id"), "relation with relid 0 rejected");

	/* --- type --- */
	b_reset(&b);
	b_byte(&b, 'Y');
	b_i32(&b, 16385);
	b_str(&b, "");
	b_str(&b, "mood");
	r = run(&b, 1, false);
	ok(r.ok && r.ch.kind == ASH_CHANGE_TYPE && r.ch.u.type.type_oid == 16385 &&
	   strcmp(r.ch.u.type.nspname, "pg_catalog") == 0 &&
	   strcmp(r.ch.u.type.typname, "mood") == 0,
	   "type message decodes");
	arena_reset();

	/* --- tuples --- */
	b_insert_head(&b, false);
	b_i16(&b, 1665);
	for (i = 0; i < 1665; i++)
		b_byte(&b, 'n');
	ok(fails_with(&b, 1, false, "column count"),
	   "tuple with natts 1665 rejected");
	b_insert_head(&b, false);
	b_i16(&b, 1664);
	for (i = 0; i < 1664; i++)
		b_byte(&b, 'n');
	r = run(&b, 1, false);
	ok(r.ok && r.ch.u.insert.newtup.natts == 1664,
	   "tuple with natts 1664 of NULLs accepted");
	arena_reset();
	b_insert_head(&b, false);
	b_i16(&b, -5);
	ok(fails_with(&b, 1, false, "column count"), "tuple with natts -5 rejected");
	b_insert_head(&b, false);
	b_i16(&b, 3);
	b_byte(&b, 'n');
	b_byte(&b, 'n');
	ok(fails_with(&b, 1, false, "column count"),
	   "tuple with natts above the remaining bytes rejected");
	b_insert_head(&b, false);
	b_i16(&b, 2);
	b_byte(&b, 'n');
	b_byte(&b, 'x');
	ok(fails_with(&b, 1, false, "column kind"), "unknown column kind rejected");
	b_insert_head(&b, false);
	b_i16(&b, 1);
	b_byte(&b, 'u');
	ok(fails_with(&b, 1, false, "unchanged"), "'u' in an insert rejected");
	b_insert_head(&b, false);
	b_i16(&b, 1);
	b_byte(&b, 't');
	b_i32(&b, -1);
	ok(fails_with(&b, 1, false, "length"), "value length -1 rejected");
	b_insert_head(&b, false);
	b_i16(&b, 1);
	b_byte(&b, 'b');
	b_i32(&b, 0x7fffffff);
	b_raw(&b, "abc", 3);
	ok(fails_with(&b, 1, false, "length"), "value length 2^31-1 rejected");
	b_insert_head(&b, false);
	b_i16(&b, 1);
	b_byte(&b, 't');
	b_i32(&b, 4);
	b_raw(&b, "abc", 3);
	ok(fails_with(&b, 1, false, "length"), "value longer than the message rejected");
	b_insert_head(&b, false);
	b_i16(&b, 1);
	b_byte(&b, 't');
	b_i32(&b, 3);
	b_raw(&b, "a\0c", 3);
	ok(fails_with(&b, 1, false, "NUL"), "text value with embedded NUL rejected");
	b_insert_head(&b, false);
	b_i16(&b, 2);
	b_byte(&b, 'b');
	b_i32(&b, 3);
	b_raw(&b, "a\0c", 3);
	b_byte(&b, 't');
	b_i32(&b, 0);
	r = run(&b, 1, false);
	ok(r.ok && col_is(&r.ch.u.insert.newtup, 0, ASH_COL_BINARY, "a\0c", 3) &&
	   r.ch.u.insert.newtup.cols[0].data[3] == '\0' &&
	   col_text(&r.ch.u.insert.newtup, 1, ""),
	   "binary value keeps embedded NUL and length; empty text value");
	arena_reset();
	b_insert_head(&b, false);
	b.d[5] = 'K';
	b_i16(&b, 0);
	ok(fails_with(&b, 1, false, "marker"), "insert with 'K' marker rejected");

	/* update: 'K' old, then something other than 'N' */
	b_reset(&b);
	b_byte(&b, 'U');
	b_i32(&b, 16400);
	b_byte(&b, 'K');
	b_i16(&b, 1);
	b_byte(&b, 'n');
	b_byte(&b, 'K');
	b_i16(&b, 1);
	b_byte(&b, 'n');
	ok(fails_with(&b, 1, false, "marker"),
	   "update with two old tuples rejected");
	b.d[b.len - 4] = 'N';
	r = run(&b, 1, false);
	ok(r.ok && r.ch.u.update.oldkind == 'K' &&
	   r.ch.u.update.oldtup.natts == 1 && r.ch.u.update.newtup.natts == 1,
	   "update with 'K' old tuple decodes");
	arena_reset();
	b_reset(&b);
	b_byte(&b, 'U');
	b_i32(&b, 16400);
	b_byte(&b, 'X');
	ok(fails_with(&b, 1, false, "marker"), "update with marker 'X' rejected");

	b_reset(&b);
	b_byte(&b, 'D');
	b_i32(&b, 16400);
	b_byte(&b, 'N');
	b_i16(&b, 0);
	ok(fails_with(&b, 1, false, "marker"), "delete with 'N' marker rejected");

	/* --- truncate --- */
	b_reset(&b);
	b_byte(&b, 'T');
	b_i32(&b, -1);
	b_byte(&b, 0);
	ok(fails_with(&b, 1, false, "relation count"), "truncate nrelids -1 rejected");
	b_reset(&b);
	b_byte(&b, 'T');
	b_i32(&b, 0x7fffffff);
	b_byte(&b, 0);
	b_i32(&b, 16400);
	ok(fails_with(&b, 1, false, "relation count"),
	   "truncate nrelids 2^31-1 rejected");
	b_reset(&b);
	b_byte(&b, 'T');
	b_i32(&b, 3);
	b_byte(&b, 3);
	b_i32(&b, 16400);
	b_i32(&b, 16401);
	ok(fails_with(&b, 1, false, "relation count"),
	   "truncate nrelids 3 with two relids rejected");
	b.d[4] = 2;
	r = run(&b, 1, false);
	ok(r.ok && r.ch.u.truncate.nrelids == 2 && r.ch.u.truncate.cascade &&
	   r.ch.u.truncate.restart_seqs && r.ch.u.truncate.relids[1] == 16401,
	   "truncate with two relids decodes");
	arena_reset();
	b.d[5] = 4;
	ok(fails_with(&b, 1, false, "flags"), "truncate with unknown flags rejected");

	/* --- logical message --- */
	b_reset(&b);
	b_byte(&b, 'M');
	b_byte(&b, 1);
	b_i64(&b, 0x300);
	b_str(&b, "pfx");
	b_i32(&b, -1);
	ok(fails_with(&b, 1, false, "content length"), "message length -1 rejected");
	b_reset(&b);
	b_byte(&b, 'M');
	b_byte(&b, 0);
	b_i64(&b, 0x300);
	b_str(&b, "pfx");
	b_i32(&b, 0x7fffffff);
	b_raw(&b, "xy", 2);
	ok(fails_with(&b, 1, false, "content length"),
	   "message length 2^31-1 rejected");
	b_reset(&b);
	b_byte(&b, 'M');
	b_byte(&b, 0);
	b_i64(&b, 0x300);
	b_str(&b, "pfx");
	b_i32(&b, 0);
	r = run(&b, 1, false);
	ok(r.ok && !r.ch.u.message.transactional && r.ch.u.message.content_len == 0 &&
	   r.ch.u.message.content != NULL && r.ch.u.message.content[0] == '\0',
	   "empty non-transactional message decodes");
	arena_reset();
	b.d[1] = 2;
	ok(fails_with(&b, 1, false, "flags"), "message with unknown flags rejected");

	/* --- origin --- */
	b_reset(&b);
	b_byte(&b, 'O');
	b_i64(&b, 0x400);
	b_str(&b, "node_a");
	r = run(&b, 2, true);
	ok(r.ok && r.ch.kind == ASH_CHANGE_ORIGIN && r.ch.xid == InvalidTransactionId &&
	   r.ch.u.origin.origin_lsn == 0x400 &&
	   strcmp(r.ch.u.origin.name, "node_a") == 0 && r.after.in_stream,
	   "origin decodes (also inside a stream, without xid)");
	arena_reset();

	/* --- value-free errors --- */
	{
		const char *secret = "SECRET-4111111111111111";
		bool		clean = true;

		b_insert_head(&b, false);
		b_i16(&b, 2);
		b_byte(&b, 't');
		b_i32(&b, (int) strlen(secret));
		b_str(&b, secret);		/* NUL after the value: misframed */
		for (i = 1; i <= b.len; i++)
		{
			Buf			cut = b;

			cut.len = i;
			r = run(&cut, 1, false);
			if (r.ok || r.error == NULL || strstr(r.error, "SECRET") ||
				strstr(r.error, "4111"))
				clean = false;
			arena_reset();
		}
		ok(clean, "errors never contain message bytes");
	}
}

static void
test_kind_names(void)
{
	int			k;
	bool		good = true;

	for (k = ASH_CHANGE_BEGIN; k <= ASH_CHANGE_STREAM_ABORT; k++)
	{
		const char *n = ash_change_kind_name((AshChangeKind) k);
		int			j;

		if (n == NULL || strcmp(n, "unknown") == 0)
			good = false;
		for (j = ASH_CHANGE_BEGIN; j < k; j++)
			if (strcmp(n, ash_change_kind_name((AshChangeKind) j)) == 0)
				good = false;
	}
	ok(good, "ash_change_kind_name: distinct names for every kind");
	ok(strcmp(ash_change_kind_name(ASH_CHANGE_STREAM_COMMIT), "stream_commit") == 0 &&
	   strcmp(ash_change_kind_name(ASH_CHANGE_INSERT), "insert") == 0,
	   "ash_change_kind_name: insert, stream_commit");
	ok(strcmp(ash_change_kind_name((AshChangeKind) 99), "unknown") == 0,
	   "ash_change_kind_name: out of range is \"unknown\"");
}

/* ----------------------------------------------------------------
 * --dump: print a fixture's decoded changes (development aid).
 * ----------------------------------------------------------------
 */
static void
print_tuple(const char *label, const AshTuple *t)
{
	int			i;

	printf("  %s natts=%d:", label, t->natts);
	for (i = 0; i < t->natts; i++)
	{
		const AshColumnValue *c = &t->cols[i];

		if (c->status == ASH_COL_TEXT)
			printf(" t[%.40s%s]", c->data, c->len > 40 ? "..." : "");
		else if (c->status == ASH_COL_BINARY)
			printf(" b(%d)", c->len);
		else
			printf(" %c", c->status);
	}
	printf("\n");
}

static int
dump_fixture(const char *path, int proto)
{
	Fixture		fx;
	int			nfail;
	int			i;
	char	   *slash = strrchr(path, '/');
	char		dir[1024];

	snprintf(dir, sizeof(dir), "%.*s", slash ? (int) (slash - path) : 1,
			 slash ? path : ".");
	if (!load_fixture(dir, slash ? slash + 1 : path, proto, &fx))
	{
		fprintf(stderr, "cannot load %s\n", path);
		return 1;
	}
	decode_fixture(&fx, &nfail);
	for (i = 0; i < fx.nmsgs; i++)
	{
		const AshChange *c = &fx.ch[i];

		if (!fx.okv[i])
		{
			printf("%d: ERROR %s\n", i + 1, fx.errv[i]);
			continue;
		}
		printf("%d: %s xid=%u", i + 1, ash_change_kind_name(c->kind), c->xid);
		switch (c->kind)
		{
			case ASH_CHANGE_RELATION:
				printf(" %u %s.%s ident=%c natts=%d\n", c->u.relation.relid,
					   c->u.relation.nspname, c->u.relation.relname,
					   c->u.relation.replident, c->u.relation.natts);
				break;
			case ASH_CHANGE_INSERT:
				printf(" rel=%u\n", c->u.insert.relid);
				print_tuple("new", &c->u.insert.newtup);
				break;
			case ASH_CHANGE_UPDATE:
				printf(" rel=%u old=%c\n", c->u.update.relid,
					   c->u.update.oldkind ? c->u.update.oldkind : '-');
				if (c->u.update.oldkind)
					print_tuple("old", &c->u.update.oldtup);
				print_tuple("new", &c->u.update.newtup);
				break;
			case ASH_CHANGE_DELETE:
				printf(" rel=%u old=%c\n", c->u.delete.relid, c->u.delete.oldkind);
				print_tuple("old", &c->u.delete.oldtup);
				break;
			case ASH_CHANGE_STREAM_START:
				printf(" stream xid=%u first=%d\n", c->u.stream_start.xid,
					   c->u.stream_start.first_segment);
				break;
			case ASH_CHANGE_STREAM_ABORT:
				printf(" xid=%u subxid=%u\n", c->u.stream_abort.xid,
					   c->u.stream_abort.subxid);
				break;
			case ASH_CHANGE_MESSAGE:
				printf(" %s prefix=%s len=%d\n",
					   c->u.message.transactional ? "tx" : "non-tx",
					   c->u.message.prefix, c->u.message.content_len);
				break;
			default:
				printf("\n");
				break;
		}
	}
	arena_reset();
	free_fixture(&fx);
	return nfail == 0 ? 0 : 1;
}

/* ----------------------------------------------------------------
 * main
 * ----------------------------------------------------------------
 */
typedef struct FixtureSpec
{
	const char *file;
	int			proto;
	void		(*check) (Fixture *fx);
} FixtureSpec;

static void
check_basic_text(Fixture *fx)
{
	check_basic(fx, false);
}

static void
check_basic_binary(Fixture *fx)
{
	check_basic(fx, true);
}

static const FixtureSpec fixtures[] = {
	{"proto1_text.hex", 1, check_basic_text},
	{"proto1_binary.hex", 1, check_basic_binary},
	{"proto2_stream.hex", 2, check_stream},
	{"proto1_nostream.hex", 1, check_nostream},
};

#define FUZZ_ITERATIONS 100000

int
main(int argc, char **argv)
{
	const char *dir = "test/fixtures/pgoutput";
	int			f;

	if (argc == 4 && strcmp(argv[1], "--dump") == 0)
		return dump_fixture(argv[2], atoi(argv[3]));
	if (argc > 1)
		dir = argv[1];

	for (f = 0; f < (int) lengthof(fixtures); f++)
	{
		Fixture		fx;
		int			nfail;
		bool		valid;

		if (!ok(load_fixture(dir, fixtures[f].file, fixtures[f].proto, &fx),
				"%s: fixture loads", fixtures[f].file))
			continue;
		valid = decode_fixture(&fx, &nfail);
		ok(nfail == 0, "%s: all %d messages decode (protocol %d)",
		   fx.name, fx.nmsgs, fx.proto);
		ok(valid, "%s: every decoded change is structurally valid", fx.name);
		ok(!fx.before[fx.nmsgs - 1].in_stream,
		   "%s: fixture ends outside a streaming block", fx.name);
		fixtures[f].check(&fx);
		arena_reset();
		mutate_fixture(&fx, FUZZ_ITERATIONS);
		free_fixture(&fx);
	}

	test_handmade();
	test_kind_names();

	ok(!error_set_overflow && n_seen_errors > 0 && !error_bad_text,
	   "errors come from a small set of %d static, value-free strings",
	   n_seen_errors);

	arena_free();
	printf("1..%d\n", tap_count);
	if (tap_failed > 0)
		diag("%d of %d tests failed", tap_failed, tap_count);
	return tap_failed > 0 ? 1 : 0;
}
