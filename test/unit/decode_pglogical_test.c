/*-------------------------------------------------------------------------
 *
 * decode_pglogical_test.c
 *	  Unit tests of the pure pglogical_output decoder
 *	  (src/decode_pglogical.c), emitting TAP.
 *
 *	  decode_pglogical_test [fixture-dir]
 *
 * NOTES
 *	  test/fixtures/pglogical/basic.hex holds captured native-protocol
 *	  messages, one hex-encoded message per line (capture.sh there, from
 *	  basic.sql).  They are decoded in order and checked against what
 *	  basic.sql did.  Then every message is cut at every length, extended
 *	  by one byte and randomly mutated (fixed seed): decoding must fail
 *	  with one of a small set of static, value-free errors, or succeed with
 *	  a structurally valid change, and never crash (the build runs this
 *	  under AddressSanitizer and UBSan).  Hand-made messages cover what the
 *	  capture cannot: refused startup parameters, binary values, a NUL in
 *	  a text value, hostile queue rows.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdarg.h>

#include "change.h"
#include "decode_pglogical.h"
#include "palloc_arena.h"
#include "unit_tap.h"


/* Every error is one of a few static strings: printable and value-free. */
#define MAX_ERRORS 64
static const char *seen_errors[MAX_ERRORS];
static int	n_seen_errors;
static bool error_bad;

static void
note_error(const char *error)
{
	if (error == NULL || error[0] == '\0')
	{
		error_bad = true;
		return;
	}
	for (int i = 0; i < n_seen_errors; i++)
		if (seen_errors[i] == error)
			return;
	if (n_seen_errors == MAX_ERRORS)
	{
		error_bad = true;
		return;
	}
	seen_errors[n_seen_errors++] = error;
	for (const char *p = error; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			error_bad = true;
	/* nothing of the fixture's values or names */
	if (strstr(error, "xxxx") || strstr(error, "t_key") ||
		strstr(error, "t_full") || strstr(error, "uno"))
		error_bad = true;
}

typedef struct Msg
{
	unsigned char *data;
	int			len;
} Msg;

static Msg	msgs[512];
static int	nmsgs;

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static bool
load_fixture(const char *path)
{
	FILE	   *f = fopen(path, "r");
	char	   *line = NULL;
	size_t		cap = 0;
	ssize_t		n;

	if (f == NULL)
		return false;
	while ((n = getline(&line, &cap, f)) >= 0 && nmsgs < (int) lengthof(msgs))
	{
		Msg		   *m;

		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0 || n % 2 != 0)
			continue;
		m = &msgs[nmsgs++];
		m->len = (int) (n / 2);
		m->data = malloc(m->len);
		for (int i = 0; i < m->len; i++)
		{
			int			hi = hexval(line[2 * i]);
			int			lo = hexval(line[2 * i + 1]);

			if (hi < 0 || lo < 0)
			{
				free(line);
				fclose(f);
				return false;
			}
			m->data[i] = (unsigned char) (hi * 16 + lo);
		}
	}
	free(line);
	fclose(f);
	return nmsgs > 0;
}

static bool
valid_tuple(const AshTuple *t, int msglen)
{
	if (t->natts < 0 || t->natts > 1664 || t->natts > msglen)
		return false;
	for (int i = 0; i < t->natts; i++)
	{
		const AshColumnValue *c = &t->cols[i];

		if (c->status == ASH_COL_NULL || c->status == ASH_COL_UNCHANGED)
		{
			if (c->data != NULL || c->len != 0)
				return false;
		}
		else if (c->status == ASH_COL_TEXT)
		{
			if (c->data == NULL || c->len < 0 || c->len >= msglen ||
				(int) strlen(c->data) != c->len)
				return false;
		}
		else
			return false;
	}
	return true;
}

static bool
valid_name(const char *s)
{
	return s != NULL && s[0] != '\0' && strlen(s) < 64;
}

static bool
valid_change(AshPglogicalResult r, const AshChange *c, int len)
{
	if (r != ASH_PGL_CHANGE)
		return true;
	switch (c->kind)
	{
		case ASH_CHANGE_BEGIN:
			return c->u.begin.final_lsn != 0 && c->u.begin.xid != 0;
		case ASH_CHANGE_COMMIT:
			return c->u.commit.commit_lsn != 0 && c->u.commit.end_lsn != 0;
		case ASH_CHANGE_ORIGIN:
			return valid_name(c->u.origin.name);
		case ASH_CHANGE_RELATION:
			if (!valid_name(c->u.relation.nspname) || !valid_name(c->u.relation.relname) ||
				c->u.relation.relid == 0 || c->u.relation.natts < 0 ||
				c->u.relation.natts > len)
				return false;
			for (int i = 0; i < c->u.relation.natts; i++)
				if (!valid_name(c->u.relation.cols[i].name) ||
					c->u.relation.cols[i].type_oid != 0)
					return false;
			return true;
		case ASH_CHANGE_INSERT:
			return c->u.insert.relid != 0 && valid_tuple(&c->u.insert.newtup, len);
		case ASH_CHANGE_UPDATE:
			return c->u.update.relid != 0 &&
				(c->u.update.oldkind == 0 ||
				 (c->u.update.oldkind == 'K' && valid_tuple(&c->u.update.oldtup, len))) &&
				valid_tuple(&c->u.update.newtup, len);
		case ASH_CHANGE_DELETE:
			return c->u.delete.relid != 0 && c->u.delete.oldkind == 'K' &&
				valid_tuple(&c->u.delete.oldtup, len);
		default:
			return false;
	}
}

static bool
col_is(const AshTuple *t, int i, const char *text)
{
	if (i >= t->natts)
		return false;
	if (text == NULL)
		return t->cols[i].status == ASH_COL_NULL;
	return t->cols[i].status == ASH_COL_TEXT && strcmp(t->cols[i].data, text) == 0;
}

static AshPglogicalResult
decode(AshPglogicalState *st, const unsigned char *data, int len, AshChange *c,
	   const char **err)
{
	AshPglogicalResult r = ash_decode_pglogical(st, (const char *) data, len, c, err);

	if (r == ASH_PGL_ERROR)
		note_error(*err);
	return r;
}

/* basic.sql, message by message. */
static void
check_basic(void)
{
	AshPglogicalState st = {0};
	AshChange	c;
	const char *err;
	AshPglogicalResult r[512];
	AshChange	ch[512];
	int			nfail = 0,
				invalid = 0;
	uint32		key_relid = 0,
				full_relid = 0;
	int			inserts = 0,
				truncates = 0,
				nones = 0,
				relations = 0;
	bool		saw_toast = false,
				saw_keychange = false,
				saw_full_old = false,
				saw_plain_update = false;

	st.expected_encoding = "UTF8";
	for (int i = 0; i < nmsgs; i++)
	{
		r[i] = decode(&st, msgs[i].data, msgs[i].len, &ch[i], &err);
		if (r[i] == ASH_PGL_ERROR)
			nfail++;
		if (r[i] == ASH_PGL_QUEUED_TRUNCATE)
			ok(st.truncated_nspname && strcmp(st.truncated_nspname, "public") == 0 &&
			   st.truncated_relname && strcmp(st.truncated_relname, "t_full") == 0,
			   "the queued TRUNCATE names public.t_full");
		if (!valid_change(r[i], &ch[i], msgs[i].len))
			invalid++;
	}
	ok(nfail == 0, "basic.hex: all %d messages decode", nmsgs);
	ok(invalid == 0, "basic.hex: every decoded change is structurally valid");
	ok(r[0] == ASH_PGL_NONE && st.startup_seen, "the first message is the startup message");

	for (int i = 1; i < nmsgs; i++)
	{
		AshChange  *x = &ch[i];

		if (r[i] == ASH_PGL_QUEUED_TRUNCATE)
			truncates++;
		if (r[i] == ASH_PGL_NONE)
			nones++;
		if (r[i] != ASH_PGL_CHANGE)
			continue;
		if (x->kind == ASH_CHANGE_RELATION)
		{
			relations++;
			if (strcmp(x->u.relation.relname, "t_key") == 0)
			{
				key_relid = x->u.relation.relid;
				ok(x->u.relation.natts == 4 &&
				   strcmp(x->u.relation.cols[0].name, "id") == 0 &&
				   x->u.relation.cols[0].is_key && !x->u.relation.cols[1].is_key &&
				   strcmp(x->u.relation.cols[2].name, "big") == 0 &&
				   strcmp(x->u.relation.nspname, "public") == 0,
				   "t_key: relation names its 4 columns, id the key");
			}
			if (strcmp(x->u.relation.relname, "t_full") == 0)
			{
				full_relid = x->u.relation.relid;
				/* REPLICA IDENTITY FULL: pglogical marks no key column */
				ok(x->u.relation.natts == 2 && !x->u.relation.cols[0].is_key &&
				   !x->u.relation.cols[1].is_key,
				   "t_full: relation under REPLICA IDENTITY FULL marks no key");
			}
		}
		if (x->kind == ASH_CHANGE_INSERT && x->u.insert.relid == key_relid)
		{
			const AshTuple *t = &x->u.insert.newtup;

			inserts++;
			if (col_is(t, 0, "1"))
			{
				ok(col_is(t, 1, "one") && col_is(t, 2, NULL) && col_is(t, 3, "1.50"),
				   "insert (1, 'one', NULL, 1.50) decodes value by value");
			}
			if (col_is(t, 0, "2"))
				ok(t->cols[2].status == ASH_COL_TEXT && t->cols[2].len == 100000 &&
				   t->cols[2].data[99999] == 'x' && col_is(t, 3, NULL),
				   "insert of a 100000-byte TOASTed value arrives whole");
		}
		if (x->kind == ASH_CHANGE_UPDATE && x->u.update.relid == key_relid)
		{
			const AshTuple *n = &x->u.update.newtup;

			if (x->u.update.oldkind == 'K' && col_is(&x->u.update.oldtup, 0, "1") &&
				col_is(n, 0, "3"))
				saw_keychange = true;
			/* pglogical sends the unchanged TOASTed value whole */
			if (col_is(n, 0, "2") && n->cols[2].status == ASH_COL_TEXT &&
				n->cols[2].len == 100000 && col_is(n, 3, "7.00"))
				saw_toast = true;
			if (col_is(n, 0, "1") && col_is(n, 1, "uno") && x->u.update.oldkind == 0)
				saw_plain_update = col_is(n, 3, "1.50");
		}
		if (x->kind == ASH_CHANGE_UPDATE && x->u.update.relid == full_relid &&
			x->u.update.oldkind == 'K' && col_is(&x->u.update.oldtup, 1, "a") &&
			col_is(&x->u.update.newtup, 1, "b"))
			saw_full_old = true;
	}
	ok(key_relid != 0 && full_relid != 0 && relations == 2,
	   "two relations described (the queue's description is consumed)");
	ok(inserts == 2, "two inserts into t_key");
	ok(saw_plain_update, "update without key change carries no old tuple");
	ok(saw_keychange, "key change carries the old key under 'K'");
	ok(saw_toast, "update leaving a TOASTed value unchanged carries it whole");
	ok(saw_full_old, "REPLICA IDENTITY FULL update carries the whole old row under 'K'");
	ok(truncates == 1, "the TRUNCATE queued through pglogical.queue is reported");
	ok(nones == 2, "queue relation and queued SQL command consumed (%d)", nones);
	ok(st.queue_relid != 0, "pglogical.queue recognised");

	/* a second startup message is refused */
	ok(decode(&st, msgs[0].data, msgs[0].len, &c, &err) == ASH_PGL_ERROR,
	   "a second startup message is refused");

	arena_reset();
}

/* Cut, extend, mutate every captured message; never crash. */
static uint64 rng = UINT64CONST(0x5eed5eed87654321);

static uint64
next_rand(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void
hostile(void)
{
	int			invalid = 0,
				cut_ok = 0,
				extended_ok = 0;
	unsigned char *buf = malloc(300000);

	for (int i = 0; i < nmsgs; i++)
	{
		/* state as it is before message i */
		AshPglogicalState base = {0};
		AshChange	c;
		const char *err;

		base.expected_encoding = "UTF8";
		for (int j = 0; j < i; j++)
			(void) decode(&base, msgs[j].data, msgs[j].len, &c, &err);
		arena_reset();

		for (int cut = 0; cut < msgs[i].len; cut += (msgs[i].len > 4000 ? 997 : 1))
		{
			AshPglogicalState st = base;
			AshPglogicalResult r = decode(&st, msgs[i].data, cut, &c, &err);

			/* a startup message cut between parameters is one */
			if (r != ASH_PGL_ERROR && i > 0)
				cut_ok++;
			if (!valid_change(r, &c, cut))
				invalid++;
			arena_reset();
		}
		{
			AshPglogicalState st = base;

			memcpy(buf, msgs[i].data, msgs[i].len);
			buf[msgs[i].len] = 'x';
			if (decode(&st, buf, msgs[i].len + 1, &c, &err) != ASH_PGL_ERROR && i > 0)
				extended_ok++;
			arena_reset();
		}
		for (int k = 0; k < 3000; k++)
		{
			AshPglogicalState st = base;
			int			len = msgs[i].len;
			int			flips = 1 + (int) (next_rand() % 4);
			AshPglogicalResult r;

			memcpy(buf, msgs[i].data, len);
			for (int f = 0; f < flips; f++)
				buf[next_rand() % len] = (unsigned char) next_rand();
			if (next_rand() % 4 == 0)
				len = (int) (next_rand() % (len + 1));
			r = decode(&st, buf, len, &c, &err);
			if (!valid_change(r, &c, len))
				invalid++;
			arena_reset();
		}
	}
	free(buf);
	ok(invalid == 0, "cut and mutated messages fail cleanly or decode validly");
	ok(cut_ok == 0, "no truncated message decodes (%d did)", cut_ok);
	ok(extended_ok == 0, "no message with a trailing byte decodes (%d did)", extended_ok);
}

/* ----------------------------------------------------------------
 * Hand-made messages.
 * ----------------------------------------------------------------
 */
typedef struct Buf
{
	unsigned char d[4096];
	int			len;
} Buf;

static void
put(Buf *b, const void *p, int n)
{
	memcpy(b->d + b->len, p, n);
	b->len += n;
}

static void
put8(Buf *b, int v)
{
	b->d[b->len++] = (unsigned char) v;
}

static void
put16(Buf *b, int v)
{
	put8(b, v >> 8);
	put8(b, v);
}

static void
put32(Buf *b, uint32 v)
{
	put16(b, (int) (v >> 16));
	put16(b, (int) (v & 0xffff));
}

static void
putstr(Buf *b, const char *s)
{
	put(b, s, (int) strlen(s) + 1);
}

static void
startup(Buf *b, const char *internal, const char *binary, const char *enc)
{
	b->len = 0;
	put8(b, 'S');
	put8(b, 1);
	putstr(b, "max_proto_version");
	putstr(b, "1");
	putstr(b, "min_proto_version");
	putstr(b, "1");
	putstr(b, "encoding");
	putstr(b, enc);
	putstr(b, "binary.internal_basetypes");
	putstr(b, internal);
	putstr(b, "binary.binary_basetypes");
	putstr(b, binary);
}

static void
relation(Buf *b, uint32 relid, const char *nsp, const char *rel, const char *col)
{
	b->len = 0;
	put8(b, 'R');
	put8(b, 0);
	put32(b, relid);
	put8(b, (int) strlen(nsp) + 1);
	putstr(b, nsp);
	put8(b, (int) strlen(rel) + 1);
	putstr(b, rel);
	put8(b, 'A');
	put16(b, 2);
	put8(b, 'C');
	put8(b, 1);
	put8(b, 'N');
	put16(b, 3);
	putstr(b, "id");
	put8(b, 'C');
	put8(b, 0);
	put8(b, 'N');
	put16(b, (int) strlen(col) + 1);
	putstr(b, col);
}

/* INSERT of two columns: "1" and a value of the given kind and bytes. */
static void
insert(Buf *b, uint32 relid, char kind, const char *val, int vlen)
{
	b->len = 0;
	put8(b, 'I');
	put8(b, 0);
	put32(b, relid);
	put8(b, 'N');
	put8(b, 'T');
	put16(b, 2);
	put8(b, 't');
	put32(b, 2);
	putstr(b, "1");
	put8(b, kind);
	if (kind != 'n' && kind != 'u')
	{
		put32(b, (uint32) vlen);
		put(b, val, vlen);
	}
}

/* pglogical.queue's relation: message_type and message */
static void
queue_relation(Buf *b, uint32 relid)
{
	b->len = 0;
	put8(b, 'R');
	put8(b, 0);
	put32(b, relid);
	put8(b, 10);
	putstr(b, "pglogical");
	put8(b, 6);
	putstr(b, "queue");
	put8(b, 'A');
	put16(b, 2);
	put8(b, 'C');
	put8(b, 0);
	put8(b, 'N');
	put16(b, 13);
	putstr(b, "message_type");
	put8(b, 'C');
	put8(b, 0);
	put8(b, 'N');
	put16(b, 8);
	putstr(b, "message");
}

static void
queue_insert(Buf *b, uint32 relid, const char *type, const char *message)
{
	b->len = 0;
	put8(b, 'I');
	put8(b, 0);
	put32(b, relid);
	put8(b, 'N');
	put8(b, 'T');
	put16(b, 2);
	put8(b, 't');
	put32(b, (uint32) strlen(type) + 1);
	putstr(b, type);
	put8(b, 't');
	put32(b, (uint32) strlen(message) + 1);
	putstr(b, message);
}

static AshPglogicalResult
run(AshPglogicalState *st, Buf *b, const char **err)
{
	AshChange	c;
	AshPglogicalResult r = decode(st, b->d, b->len, &c, err);

	arena_reset();
	return r;
}

static void
handmade(void)
{
	AshPglogicalState st = {0};
	Buf			b;
	const char *err;

	st.expected_encoding = "UTF8";
	relation(&b, 100, "public", "t", "v");
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "nothing is accepted before the startup message");

	startup(&b, "t", "f", "UTF8");
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "startup granting internal binary transfer refused");
	startup(&b, "f", "t", "UTF8");
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "startup granting send/recv transfer refused");
	startup(&b, "f", "f", "LATIN1");
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "startup in another encoding refused");
	startup(&b, "f", "f", "UTF8");
	b.len -= 2;					/* "f\0" of the last value */
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "startup without the binary answer refused");
	startup(&b, "f", "f", "utf8");
	ok(run(&st, &b, &err) == ASH_PGL_NONE, "startup as asked accepted");

	relation(&b, 100, "public", "t", "v");
	ok(run(&st, &b, &err) == ASH_PGL_CHANGE, "relation accepted");
	insert(&b, 100, 't', "abc", 4);
	ok(run(&st, &b, &err) == ASH_PGL_CHANGE, "text value accepted");
	insert(&b, 100, 't', "a\0c", 4);
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "text value with an inner NUL refused");
	insert(&b, 100, 't', "abc", 3);
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "text value without its NUL refused");
	insert(&b, 100, 't', "", 0);
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "zero-length text value refused");
	insert(&b, 100, 'b', "\0\0\0\1", 4);
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "send/recv binary value (never asked for) refused");
	insert(&b, 100, 'i', "\0\0\0\1", 4);
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "internal binary value (never asked for) refused");
	insert(&b, 100, 'u', NULL, 0);
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "unchanged TOAST marker in an insert refused");
	insert(&b, 100, 't', "abc", 4);
	b.d[1] = 1;
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "unknown flags refused");
	insert(&b, 100, 't', "abc", 4);
	b.d[2] = b.d[3] = b.d[4] = b.d[5] = 0;
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "relation id 0 refused");
	insert(&b, 100, 't', "abc", 4);
	b.d[10] = 0xff;				/* natts 0xff02 */
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "column count beyond the message refused");

	/* the queue: message_type, message */
	queue_relation(&b, 200);
	ok(run(&st, &b, &err) == ASH_PGL_NONE && st.queue_relid == 200,
	   "pglogical.queue's relation is consumed");
	{
		AshChange	c;

		queue_insert(&b, 200, "T", "{\"schema_name\": \"s\\\"q\\u0001\",\"table_name\": \"t\\\\x\"}");
		ok(decode(&st, b.d, b.len, &c, &err) == ASH_PGL_QUEUED_TRUNCATE &&
		   strcmp(st.truncated_nspname, "s\"q\001") == 0 &&
		   strcmp(st.truncated_relname, "t\\x") == 0,
		   "queued TRUNCATE reported with its unescaped names");
		arena_reset();
	}
	{
		static const char *const bad[] = {
			"", "{}", "{\"schema_name\": \"s\"}",
			"{\"schema_name\": \"s\",\"schema_name\": \"t\"}",
			"{\"schema_name\": \"s\",\"table_name\": \"t\"} x",
			"{\"schema_name\": \"s\",\"table_name\": \"t\",\"x\": \"y\"}",
			"{\"schema_name\": \"\",\"table_name\": \"t\"}",
			"{\"schema_name\": \"s\\u0041\",\"table_name\": \"t\"}",
			"{\"schema_name\": \"s\\u0000\",\"table_name\": \"t\"}",
			"{\"schema_name\": \"s\\q\",\"table_name\": \"t\"}",
			"{\"schema_name\": \"s\",\"table_name\": 1}",
			"{\"schema_name\": \"s\",\"table_name\": \"t",
			"{\"schema_name\": \"ssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssssss\",\"table_name\": \"t\"}",
		};
		int			accepted = 0;

		for (int i = 0; i < (int) lengthof(bad); i++)
		{
			queue_insert(&b, 200, "T", bad[i]);
			if (run(&st, &b, &err) != ASH_PGL_ERROR)
				accepted++;
		}
		ok(accepted == 0, "%d malformed truncate messages accepted", accepted);
	}
	queue_insert(&b, 200, "Q", "{}");
	ok(run(&st, &b, &err) == ASH_PGL_NONE, "queued SQL consumed");
	queue_insert(&b, 200, "Z", "{}");
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "unknown queue message type refused");
	queue_insert(&b, 200, "TT", "{}");
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "queue message type of two bytes refused");
	b.len = 0;
	put8(&b, 'I');
	put8(&b, 0);
	put32(&b, 200);
	put8(&b, 'N');
	put8(&b, 'T');
	put16(&b, 2);
	put8(&b, 'n');				/* the type column NULL */
	put8(&b, 'n');
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "NULL queue message type refused");
	b.len = 0;
	put8(&b, 'D');
	put8(&b, 0);
	put32(&b, 200);
	put8(&b, 'K');
	put8(&b, 'T');
	put16(&b, 0);
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "delete from the queue refused");
	relation(&b, 201, "pglogical", "queue", "other");
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "queue relation without message_type refused");

	b.len = 0;
	put8(&b, 'X');
	ok(run(&st, &b, &err) == ASH_PGL_ERROR, "unknown message type refused");
	b.len = 0;
	ok(ash_decode_pglogical(&st, (const char *) b.d, 0, NULL, &err) == ASH_PGL_ERROR,
	   "bad arguments refused");
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "test/fixtures/pglogical";
	char		path[1024];

	snprintf(path, sizeof(path), "%s/basic.hex", dir);
	if (ok(load_fixture(path), "basic.hex loads (%d messages)", nmsgs))
	{
		check_basic();
		hostile();
	}
	handmade();
	ok(!error_bad && n_seen_errors > 0,
	   "errors come from a small set of %d static, value-free strings", n_seen_errors);
	arena_free();
	printf("1..%d\n", tap_count);
	return tap_failed > 0 ? 1 : 0;
}
