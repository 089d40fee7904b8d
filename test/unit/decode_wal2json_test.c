/*-------------------------------------------------------------------------
 *
 * decode_wal2json_test.c
 *	  Unit tests of the pure wal2json decoder (src/decode_wal2json.c),
 *	  emitting TAP.
 *
 *	  decode_wal2json_test [fixture-dir]	run the tests (TAP on stdout)
 *
 * NOTES
 *	  The fixture is wal2json 2.5's real output, one message per line
 *	  (test/fixtures/wal2json/basic.jsonl, see capture.sh and basic.sql
 *	  there), decoded in order with one AshWal2jsonState that describes the
 *	  tables as the source's catalogs do (the pipeline gets them from
 *	  census.c).  The decoded changes are checked against basic.sql.  Then
 *	  hand-made messages cover drift, malformed and hostile JSON, and every
 *	  fixture message is cut at every length, extended and randomly
 *	  mutated (fixed seed): decoding must fail cleanly with a static,
 *	  value-free error, or succeed with a structurally valid change, never
 *	  crash (AddressSanitizer, UBSan), and allocate a bounded multiple of
 *	  the message length.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdarg.h>

#include "access/transam.h"

#include "change.h"
#include "decode_wal2json.h"
#include "palloc_arena.h"
#include "unit_tap.h"


/* ----------------------------------------------------------------
 * Errors seen: a small set of static strings without message bytes.
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
	if (error == NULL)
	{
		error_bad_text = true;
		return;
	}
	/* a value of the fixture would show here: none may */
	if (strstr(error, "he said") != NULL || strstr(error, "changed") != NULL ||
		strstr(error, "SECRET") != NULL || strstr(error, "tx content") != NULL)
		error_bad_text = true;
	for (int i = 0; i < n_seen_errors; i++)
		if (seen_errors[i] == error)
			return;
	if (n_seen_errors == MAX_ERRORS)
	{
		error_set_overflow = true;
		return;
	}
	seen_errors[n_seen_errors++] = error;
}

/* ----------------------------------------------------------------
 * The tables of basic.sql, as census.c describes them.
 * ----------------------------------------------------------------
 */
static AshRelColumn t1_cols[] = {
	{true, "id", 23, -1, false},
	{false, "n", 1700, 655366, true},
	{false, "f", 701, -1, false},
	{false, "b", 16, -1, false},
	{false, "by", 17, -1, true},
	{false, "t", 25, -1, true},
	{false, "j", 3802, -1, true},
	{false, "ts", 1184, -1, false},
	{false, "arr", 1007, -1, true},
	{false, "big", 25, -1, true},
};
static AshRelColumn full1_cols[] = {
	{true, "id", 23, -1, false},
	{true, "v", 25, -1, true},
};
static AshRelColumn keyless_cols[] = {
	{false, "a", 23, -1, false},
	{false, "b", 25, -1, true},
};
static AshRelColumn weird_cols[] = {
	{true, "id", 23, -1, false},
	{false, "co\"l", 25, -1, true},
};

static AshRelation tables[] = {
	{1, "public", "t1", 'd', lengthof(t1_cols), t1_cols},
	{2, "public", "full1", 'f', lengthof(full1_cols), full1_cols},
	{3, "public", "keyless", 'd', lengthof(keyless_cols), keyless_cols},
	{4, "we.ird, \\sch", "ta ble*", 'd', lengthof(weird_cols), weird_cols},
};

static void
init_state(AshWal2jsonState *st)
{
	memset(st, 0, sizeof(*st));
	st->tables = tables;
	st->ntables = lengthof(tables);
}

/* ----------------------------------------------------------------
 * Fixture.
 * ----------------------------------------------------------------
 */
#define MAX_LINES 256

typedef struct Fixture
{
	int			n;
	char	   *line[MAX_LINES];
	int			len[MAX_LINES];
	AshWal2jsonState before[MAX_LINES]; /* state each line was decoded in */
	bool		okv[MAX_LINES];
	const char *errv[MAX_LINES];
	AshChange	ch[MAX_LINES];
} Fixture;

static bool
load_fixture(const char *dir, const char *name, Fixture *fx)
{
	char		path[MAXPGPATH];
	FILE	   *f;
	char	   *buf = NULL;
	size_t		cap = 0;
	ssize_t		n;

	memset(fx, 0, sizeof(*fx));
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	while ((n = getline(&buf, &cap, f)) > 0 && fx->n < MAX_LINES)
	{
		if (buf[n - 1] == '\n')
			buf[--n] = '\0';
		if (n == 0)
			continue;
		/* an exact-size copy: ASan sees a read past the message */
		fx->line[fx->n] = malloc(n);
		memcpy(fx->line[fx->n], buf, n);
		fx->len[fx->n] = (int) n;
		fx->n++;
	}
	free(buf);
	fclose(f);
	return fx->n > 0;
}

static void
free_fixture(Fixture *fx)
{
	for (int i = 0; i < fx->n; i++)
		free(fx->line[i]);
}

/* Is a decoded change structurally valid? */
static bool
tuple_valid(const AshTuple *t, int natts)
{
	if (t->natts != natts || t->cols == NULL)
		return false;
	for (int i = 0; i < t->natts; i++)
	{
		const AshColumnValue *v = &t->cols[i];

		if (v->status == ASH_COL_TEXT)
		{
			if (v->data == NULL || v->len < 0 || v->data[v->len] != '\0' ||
				(int) strlen(v->data) != v->len)
				return false;
		}
		else if (v->status != ASH_COL_NULL && v->status != ASH_COL_UNCHANGED)
			return false;
	}
	return true;
}

static int
natts_of(uint32 relid)
{
	for (int i = 0; i < (int) lengthof(tables); i++)
		if (tables[i].relid == relid)
			return tables[i].natts;
	return -1;
}

static bool
change_valid(const AshChange *c)
{
	switch (c->kind)
	{
		case ASH_CHANGE_BEGIN:
			return TransactionIdIsNormal(c->u.begin.xid) && c->u.begin.final_lsn != 0;
		case ASH_CHANGE_COMMIT:
			return c->u.commit.end_lsn > c->u.commit.commit_lsn;
		case ASH_CHANGE_INSERT:
			return tuple_valid(&c->u.insert.newtup, natts_of(c->u.insert.relid));
		case ASH_CHANGE_UPDATE:
			return tuple_valid(&c->u.update.newtup, natts_of(c->u.update.relid)) &&
				(c->u.update.oldkind == 0 ||
				 tuple_valid(&c->u.update.oldtup, natts_of(c->u.update.relid)));
		case ASH_CHANGE_DELETE:
			return (c->u.delete.oldkind == 'K' || c->u.delete.oldkind == 'O') &&
				tuple_valid(&c->u.delete.oldtup, natts_of(c->u.delete.relid));
		case ASH_CHANGE_TRUNCATE:
			return c->u.truncate.nrelids == 1 && natts_of(c->u.truncate.relids[0]) > 0;
		case ASH_CHANGE_MESSAGE:
			return c->u.message.prefix != NULL && c->u.message.content != NULL &&
				c->u.message.content_len >= 0 &&
				c->u.message.content[c->u.message.content_len] == '\0';
		default:
			return false;
	}
}

static bool
decode_fixture(Fixture *fx, int *nfail, bool *valid)
{
	AshWal2jsonState st;

	init_state(&st);
	*nfail = 0;
	*valid = true;
	for (int i = 0; i < fx->n; i++)
	{
		fx->before[i] = st;
		fx->okv[i] = ash_decode_wal2json(&st, fx->line[i], fx->len[i], &fx->ch[i], &fx->errv[i]);
		if (!fx->okv[i])
		{
			(*nfail)++;
			note_error(fx->errv[i]);
		}
		else if (!change_valid(&fx->ch[i]))
			*valid = false;
	}
	return !st.in_xact;
}

static bool
text_is(const AshTuple *t, int col, const char *expect)
{
	return t->cols[col].status == ASH_COL_TEXT && strcmp(t->cols[col].data, expect) == 0 &&
		t->cols[col].len == (int) strlen(expect);
}

static AshChangeKind
kind_of(const Fixture *fx, int line)
{
	return fx->okv[line - 1] ? fx->ch[line - 1].kind : (AshChangeKind) -1;
}

/* The changes basic.sql makes (line numbers of basic.jsonl, from 1). */
static void
check_basic(Fixture *fx)
{
	const AshChange *c;
	static const AshChangeKind kinds[] = {
		ASH_CHANGE_BEGIN, ASH_CHANGE_INSERT, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_UPDATE, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_UPDATE, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_INSERT, ASH_CHANGE_INSERT, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_UPDATE, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_DELETE, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_DELETE, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_INSERT, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_MESSAGE, -1, ASH_CHANGE_COMMIT,
		ASH_CHANGE_MESSAGE,
		ASH_CHANGE_BEGIN, ASH_CHANGE_TRUNCATE, ASH_CHANGE_TRUNCATE, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_INSERT, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, -1, ASH_CHANGE_COMMIT,
		ASH_CHANGE_BEGIN, ASH_CHANGE_COMMIT,
	};
	bool		same = fx->n == (int) lengthof(kinds);
	bool		pairs = true;
	char		big[10001];

	for (int i = 0; same && i < fx->n; i++)
		if (kind_of(fx, i + 1) != kinds[i])
		{
			diag("line %d: kind %d, expected %d", i + 1, (int) kind_of(fx, i + 1), (int) kinds[i]);
			same = false;
		}
	if (!ok(same, "basic.jsonl: %d messages decode to basic.sql's changes", fx->n))
		return;

	/* every B and its C: one commit LSN, one time, the end after it */
	for (int i = 0; i < fx->n; i++)
	{
		const AshChange *b = &fx->ch[i];

		if (kind_of(fx, i + 1) != ASH_CHANGE_BEGIN)
			continue;
		for (int j = i + 1; j < fx->n; j++)
		{
			const AshChange *e = &fx->ch[j];

			if (kind_of(fx, j + 1) != ASH_CHANGE_COMMIT)
				continue;
			if (e->u.commit.commit_lsn != b->u.begin.final_lsn ||
				e->u.commit.commit_time != b->u.begin.commit_time)
				pairs = false;
			break;
		}
		/* 2026 in microseconds since 2000-01-01 */
		if (b->u.begin.commit_time < INT64CONST(820454400000000) ||
			b->u.begin.commit_time >= INT64CONST(852076800000000))
			pairs = false;
	}
	ok(pairs, "each BEGIN and COMMIT agree on commit LSN and time (2026, +05:30 offset read)");

	c = &fx->ch[1];
	memset(big, 'x', 10000);
	big[10000] = '\0';
	ok(c->u.insert.relid == 1 &&
	   text_is(&c->u.insert.newtup, 0, "1") && text_is(&c->u.insert.newtup, 1, "12.50") &&
	   text_is(&c->u.insert.newtup, 2, "1.5e+100") && text_is(&c->u.insert.newtup, 3, "t") &&
	   text_is(&c->u.insert.newtup, 4, "\\x00ff41") &&
	   text_is(&c->u.insert.newtup, 5, "he said \"hi\"\n\ttab \xc3\xa9 \\ back \x01") &&
	   text_is(&c->u.insert.newtup, 6, "{\"a\": [1, \"x\"]}") &&
	   text_is(&c->u.insert.newtup, 7, "2026-01-02 08:34:05.123456+05:30") &&
	   text_is(&c->u.insert.newtup, 8, "{1,2,NULL}") && text_is(&c->u.insert.newtup, 9, big),
	   "insert: numbers, bool, bytea (\\x restored), escapes, json, timestamptz, array, TOAST");

	c = &fx->ch[4];
	ok(c->u.update.relid == 1 && c->u.update.oldkind == 0 &&
	   text_is(&c->u.update.newtup, 5, "changed") &&
	   c->u.update.newtup.cols[9].status == ASH_COL_UNCHANGED,
	   "update keeping its key: no old key (as pgoutput), unchanged TOAST value marked 'u'");

	c = &fx->ch[7];
	ok(c->u.update.oldkind == 'K' && text_is(&c->u.update.oldtup, 0, "1") &&
	   c->u.update.oldtup.cols[5].status == ASH_COL_NULL &&
	   text_is(&c->u.update.newtup, 0, "2") &&
	   c->u.update.newtup.cols[9].status == ASH_COL_UNCHANGED,
	   "update of the key: old key tuple (other columns NULL), new key");

	c = &fx->ch[14];
	ok(c->u.update.relid == 2 && c->u.update.oldkind == 'O' &&
	   text_is(&c->u.update.oldtup, 1, "a") && text_is(&c->u.update.newtup, 1, "b"),
	   "REPLICA IDENTITY FULL update: the whole old row");

	c = &fx->ch[17];
	ok(c->u.delete.relid == 2 && c->u.delete.oldkind == 'O' &&
	   text_is(&c->u.delete.oldtup, 0, "2") && c->u.delete.oldtup.cols[1].status == ASH_COL_NULL,
	   "REPLICA IDENTITY FULL delete: the old row, NULL kept");

	c = &fx->ch[20];
	ok(c->u.delete.relid == 1 && c->u.delete.oldkind == 'K' && text_is(&c->u.delete.oldtup, 0, "2"),
	   "delete by key");

	c = &fx->ch[23];
	ok(c->u.insert.relid == 4 && text_is(&c->u.insert.newtup, 1, "q"),
	   "a table whose names need escaping in add-tables and JSON");

	c = &fx->ch[26];
	ok(c->u.message.transactional && strcmp(c->u.message.prefix, "pfx") == 0 &&
	   c->u.message.content_len == 10 && strcmp(c->u.message.content, "tx content") == 0,
	   "transactional message");

	ok(!fx->okv[27] && fx->errv[27] == ash_wal2json_err_ambiguous && !fx->before[28].drift,
	   "a null float or numeric is refused as ambiguous (NaN looks the same)");

	c = &fx->ch[29];
	ok(!c->u.message.transactional && strcmp(c->u.message.content, "non\ttx") == 0 &&
	   !fx->before[29].in_xact,
	   "non-transactional message outside a transaction");

	ok(fx->ch[31].u.truncate.relids[0] == 2 && fx->ch[32].u.truncate.relids[0] == 1 &&
	   !fx->ch[31].u.truncate.cascade,
	   "TRUNCATE of two tables: one change per table");

	ok(fx->ch[35].u.insert.relid == 3 && kind_of(fx, 38) == ASH_CHANGE_BEGIN &&
	   kind_of(fx, 39) == ASH_CHANGE_COMMIT,
	   "keyless table: insert decoded; wal2json sends no update or delete of it");

	ok(!fx->okv[42] && fx->errv[42] == ash_wal2json_err_ambiguous,
	   "NaN (written as null) is refused as ambiguous");
}

/* ----------------------------------------------------------------
 * Hand-made messages.
 * ----------------------------------------------------------------
 */
#define HDR "\"xid\":1000,\"timestamp\":\"2000-01-01 05:30:00+05:30\",\"lsn\":\"0/10\""
#define BEGIN_MSG "{\"action\":\"B\"," HDR ",\"nextlsn\":\"0/20\"}"

static bool
decode_str(AshWal2jsonState *st, const char *s, AshChange *c, const char **err)
{
	int			n = (int) strlen(s);
	char	   *copy = malloc(Max(n, 1));
	bool		r;

	memcpy(copy, s, n);
	r = ash_decode_wal2json(st, copy, n, c, err);
	free(copy);
	if (!r)
		note_error(*err);
	return r;
}

/* A state inside transaction 1000. */
static void
in_xact(AshWal2jsonState *st)
{
	AshChange	c;
	const char *err;

	init_state(st);
	if (!decode_str(st, BEGIN_MSG, &c, &err))
		diag("BEGIN fails: %s", err);
}

static const char *
fails_with(bool xact, const char *msg, bool *drift)
{
	AshWal2jsonState st;
	AshChange	c;
	const char *err = NULL;

	if (xact)
		in_xact(&st);
	else
		init_state(&st);
	if (decode_str(&st, msg, &c, &err))
		return NULL;
	if (drift)
		*drift = st.drift;
	return err ? err : "(null)";
}

#define T1(cols) "{\"action\":\"I\"," HDR ",\"schema\":\"public\",\"table\":\"full1\",\"columns\":[" cols "]}"
#define C_ID(v) "{\"name\":\"id\",\"type\":\"integer\",\"typeoid\":23,\"value\":" v "}"
#define C_V(v) "{\"name\":\"v\",\"type\":\"text\",\"typeoid\":25,\"value\":" v "}"

static void
test_handmade(void)
{
	AshWal2jsonState st;
	AshChange	c;
	const char *err;
	bool		drift;

	/* the timestamp and its offset, exactly */
	init_state(&st);
	ok(decode_str(&st, BEGIN_MSG, &c, &err) && c.u.begin.commit_time == 0 &&
	   c.u.begin.xid == 1000 && c.u.begin.final_lsn == 0x10,
	   "2000-01-01 05:30:00+05:30 is the epoch; xid and LSN read");
	init_state(&st);
	ok(decode_str(&st, "{\"action\":\"B\",\"xid\":7,\"timestamp\":\"1999-12-31 23:59:59.5-00:00:30\",\"lsn\":\"A/FFFFFFFF\",\"nextlsn\":\"B/0\"}", &c, &err) &&
	   c.u.begin.commit_time == INT64CONST(29500000) &&
	   c.u.begin.final_lsn == ((UINT64CONST(0xA) << 32) | 0xFFFFFFFF),
	   "fractional seconds, a negative offset with seconds, a high LSN");

	in_xact(&st);
	ok(decode_str(&st, T1(C_ID("1") "," C_V("\"x\"")), &c, &err) &&
	   c.kind == ASH_CHANGE_INSERT && c.u.insert.relid == 2,
	   "a hand-made insert decodes");

	/* drift: the caller re-describes */
	drift = false;
	ok(fails_with(true, T1(C_ID("1") "," C_V("\"x\"") ",{\"name\":\"new\",\"typeoid\":25,\"value\":\"z\"}"), &drift) == ash_wal2json_err_drift && drift,
	   "a column the description lacks is drift");
	drift = false;
	ok(fails_with(true, T1(C_ID("1") ",{\"name\":\"v\",\"typeoid\":1043,\"value\":\"x\"}"), &drift) == ash_wal2json_err_drift && drift,
	   "a column of another type is drift");
	drift = false;
	ok(fails_with(true, T1(C_ID("1")), &drift) == ash_wal2json_err_drift && drift,
	   "an insert without one of the columns is drift");
	drift = false;
	ok(fails_with(true, "{\"action\":\"U\"," HDR ",\"schema\":\"public\",\"table\":\"keyless\",\"columns\":[{\"name\":\"b\",\"typeoid\":25,\"value\":\"x\"}]}", &drift) == ash_wal2json_err_drift && drift,
	   "an update without a column that cannot be out of line (dropped) is drift");
	ok(fails_with(true, "{\"action\":\"U\"," HDR ",\"schema\":\"public\",\"table\":\"keyless\",\"columns\":[{\"name\":\"a\",\"typeoid\":23,\"value\":1}]}", NULL) == NULL,
	   "an update without a toastable column: unchanged TOAST");
	drift = true;
	ok(fails_with(true, "{\"action\":\"I\"," HDR ",\"schema\":\"public\",\"table\":\"other\",\"columns\":[]}", &drift) != NULL && !drift,
	   "a table outside the set is malformed, not drift");

	/* values of the wrong JSON type for the column's type */
	ok(fails_with(true, T1("{\"name\":\"id\",\"typeoid\":23,\"value\":\"1\"}," C_V("\"x\"")), NULL) != NULL,
	   "a string for an integer column is refused");
	ok(fails_with(true, T1(C_ID("1") "," C_V("1")), NULL) != NULL,
	   "a number for a text column is refused");
	ok(fails_with(true, T1(C_ID("true") "," C_V("\"x\"")), NULL) != NULL,
	   "a boolean for an integer column is refused");
	ok(fails_with(true, T1(C_ID("1") "," C_V("{\"SECRET\":1}")), NULL) != NULL,
	   "an object value is refused");
	ok(fails_with(true, T1(C_ID("1") "," C_V("\"a\\u0000b\"")), NULL) != NULL,
	   "a NUL inside a string is refused (an input function would cut it)");
	ok(fails_with(true, T1(C_ID("1") "," C_V("\"\\ud800\"")), NULL) != NULL,
	   "a lone surrogate is refused");
	ok(fails_with(true, T1(C_ID("1") "," C_V("\"\\ud83d\\ude00\"")), NULL) == NULL,
	   "a surrogate pair decodes");
	ok(fails_with(true, T1(C_ID("01") "," C_V("\"x\"")), NULL) != NULL,
	   "a number with a leading zero is not JSON");
	ok(fails_with(true, T1(C_ID("1") "," C_ID("2") "," C_V("\"x\"")), NULL) != NULL,
	   "a column named twice is refused");

	/* transactions */
	ok(fails_with(false, T1(C_ID("1") "," C_V("\"x\"")), NULL) != NULL,
	   "a change outside a transaction is refused");
	ok(fails_with(true, BEGIN_MSG, NULL) != NULL, "BEGIN inside a transaction is refused");
	ok(fails_with(false, "{\"action\":\"C\"," HDR ",\"nextlsn\":\"0/20\"}", NULL) != NULL,
	   "COMMIT without BEGIN is refused");
	ok(fails_with(true, "{\"action\":\"C\",\"xid\":1001,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}", NULL) != NULL,
	   "COMMIT of another xid is refused");
	ok(fails_with(true, "{\"action\":\"I\",\"xid\":1001,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"schema\":\"public\",\"table\":\"full1\",\"columns\":[" C_ID("1") "," C_V("\"x\"") "]}", NULL) != NULL,
	   "a change of another xid is refused");
	in_xact(&st);
	(void) decode_str(&st, "{\"action\":\"C\",\"xid\":1000,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/21\",\"nextlsn\":\"0/20\"}", &c, &err);
	ok(st.in_xact, "a failed decode leaves the state as it was");

	/* include-origin (origin => 'none'): the transaction's origin in BEGIN */
	init_state(&st);
	st.origins = true;
	ok(decode_str(&st, "{\"action\":\"B\",\"xid\":1000,\"timestamp\":\"2000-01-01 00:00:00+00\",\"origin\":3,\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}", &c, &err) &&
	   c.kind == ASH_CHANGE_BEGIN && c.u.begin.origin_id == 3 && st.origin == 3,
	   "origins asked: BEGIN's origin read");
	ok(decode_str(&st, "{\"action\":\"I\"," HDR ",\"origin\":3,\"schema\":\"public\",\"table\":\"full1\",\"columns\":[" C_ID("1") "," C_V("\"x\"") "]}", &c, &err) &&
	   c.kind == ASH_CHANGE_INSERT,
	   "origins asked: a change of the same origin decodes");
	ok(!decode_str(&st, "{\"action\":\"I\"," HDR ",\"origin\":0,\"schema\":\"public\",\"table\":\"full1\",\"columns\":[" C_ID("1") "," C_V("\"x\"") "]}", &c, &err),
	   "origins asked: a change of another origin than its BEGIN is refused");
	ok(!decode_str(&st, T1(C_ID("1") "," C_V("\"x\"")), &c, &err),
	   "origins asked: a change without origin is refused");
	ok(decode_str(&st, "{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"origin\":null,\"lsn\":\"0/10\",\"transactional\":false,\"prefix\":\"p\",\"content\":\"\"}", &c, &err) &&
	   c.kind == ASH_CHANGE_MESSAGE,
	   "origins asked: a non-transactional message's origin may be null");
	init_state(&st);
	st.origins = true;
	ok(decode_str(&st, "{\"action\":\"B\",\"xid\":1000,\"timestamp\":\"2000-01-01 00:00:00+00\",\"origin\":0,\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}", &c, &err) &&
	   c.u.begin.origin_id == 0, "origins asked: a local transaction's origin is 0");
	init_state(&st);
	st.origins = true;
	ok(!decode_str(&st, BEGIN_MSG, &c, &err) &&
	   !decode_str(&st, "{\"action\":\"B\",\"xid\":1000,\"timestamp\":\"2000-01-01 00:00:00+00\",\"origin\":65536,\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}", &c, &err) &&
	   !decode_str(&st, "{\"action\":\"B\",\"xid\":1000,\"timestamp\":\"2000-01-01 00:00:00+00\",\"origin\":null,\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}", &c, &err),
	   "origins asked: BEGIN without an origin, out of range or null is refused");
	init_state(&st);
	ok(!decode_str(&st, "{\"action\":\"B\",\"xid\":1000,\"timestamp\":\"2000-01-01 00:00:00+00\",\"origin\":0,\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}", &c, &err),
	   "origins not asked: an origin is an unknown key");

	/* hostile shapes */
	{
		static const char *const bad[] = {
			"", " ", "[]", "{", "}", "{}", "null", "{\"action\":\"B\"}",
			"{\"action\":\"X\"," HDR "}",
			"{\"action\":\"BB\"," HDR ",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"action\":\"B\"," HDR ",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\"," HDR ",\"nextlsn\":\"0/20\",\"SECRET\":1}",
			"{\"action\":\"B\"," HDR ",\"nextlsn\":\"0/20\"} x",
			"{\"action\":\"B\"," HDR ",\"nextlsn\":\"0/20\"",
			"{\"action\":\"B\",\"xid\":4294967296,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":-1,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":1.5,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":2,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2001-02-29 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 24:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 00:00:00.1234567+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 00:00:00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/0\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"123456789/10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/10\"}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0x10\",\"nextlsn\":\"0/20\"}",
			"{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"lsn\":\"0/10\",\"transactional\":true,\"prefix\":\"p\",\"content\":\"SECRET\"}",
			"{\"action\":\"M\",\"xid\":5,\"timestamp\":null,\"lsn\":\"0/10\",\"transactional\":false,\"prefix\":\"p\",\"content\":\"SECRET\"}",
			"{\"action\":\"M\",\"xid\":null,\"timestamp\":null,\"lsn\":\"0/10\",\"transactional\":false,\"prefix\":\"p\",\"content\":1}",
			"{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}",
			"{\"action\":\"B\",\"xid\":9,\"timestamp\":\"2000-01-01 00:00:00+00\",\"lsn\":\"0/10\",\"nextlsn\":\"0/20\",\"k1\":1,\"k2\":1,\"k3\":1,\"k4\":1,\"k5\":1,\"k6\":1,\"k7\":1,\"k8\":1,\"k9\":1,\"k10\":1,\"k11\":1,\"k12\":1}",
			"{\"action\":\"\\u0042\"," HDR ",\"nextlsn\":\"0/20\",}",
			"{\"action\":\"B\"," HDR ",\"nextlsn\":\"0/20\"}\x01",
			"{\"action\":\"B\"\x01," HDR ",\"nextlsn\":\"0/20\"}",
			"{\"action\":tru}",
			"{\"action\":\"\x01\"}",
		};
		int			refused = 0;

		for (int i = 0; i < (int) lengthof(bad); i++)
		{
			AshWal2jsonState s2;

			init_state(&s2);
			if (!decode_str(&s2, bad[i], &c, &err))
				refused++;
			else
				diag("accepted: hostile input %d", i);
		}
		ok(refused == (int) lengthof(bad), "%d hostile or malformed messages refused", refused);
	}
	{
		AshWal2jsonState s2;

		/* non-transactional message, escaped action letter decodes */
		init_state(&s2);
		ok(decode_str(&s2, "{\"action\":\"\\u004d\",\"xid\":null,\"timestamp\":null,\"lsn\":\"0/10\",\"transactional\":false,\"prefix\":\"p\",\"content\":\"\"}", &c, &err) &&
		   c.kind == ASH_CHANGE_MESSAGE && c.u.message.content_len == 0,
		   "an escaped action letter and an empty content decode");
	}

	/* add-tables escaping */
	{
		char		buf[64];

		buf[0] = '\0';
		ok(ash_wal2json_table_option(buf, sizeof(buf), "we.ird, \\sch", "ta ble*") &&
		   strcmp(buf, "we\\.ird\\,\\ \\\\sch.ta\\ ble\\*") == 0,
		   "add-tables escapes what wal2json reads as syntax");
		buf[0] = '\0';
		ok(!ash_wal2json_table_option(buf, 8, "public", "t1"), "add-tables: no overflow");
	}
	arena_reset();
}

/* ----------------------------------------------------------------
 * Mutation.
 * ----------------------------------------------------------------
 */
static uint64 rng_state = UINT64CONST(0x9E3779B97F4A7C15);

static uint32
rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32) rng_state;
}

static bool alloc_ok = true;
static bool mutants_valid = true;
static long mutants;

static void
try_mutant(const AshWal2jsonState *before, const char *buf, int len)
{
	AshWal2jsonState st = *before;
	AshChange	c;
	const char *err;
	char	   *copy = malloc(Max(len, 1));

	memcpy(copy, buf, len);
	if (ash_decode_wal2json(&st, copy, len, &c, &err))
	{
		if (!change_valid(&c))
			mutants_valid = false;
	}
	else
		note_error(err);
	if (arena_bytes > (size_t) 64 * (size_t) len + 4096)
		alloc_ok = false;
	free(copy);
	arena_reset();
	mutants++;
}

static void
mutate_fixture(Fixture *fx, int iterations)
{
	static const char alphabet[] = "{}[]\",:\\u0123456789-+.eEtrfalsnx \x01\x80";

	for (int i = 0; i < fx->n; i++)
	{
		char	   *buf = malloc(fx->len[i] + 8);

		/* every prefix, and one byte more */
		for (int n = 0; n <= fx->len[i]; n++)
			try_mutant(&fx->before[i], fx->line[i], n);
		memcpy(buf, fx->line[i], fx->len[i]);
		buf[fx->len[i]] = ' ';
		try_mutant(&fx->before[i], buf, fx->len[i] + 1);
		free(buf);
	}
	for (int k = 0; k < iterations; k++)
	{
		int			i = rng() % fx->n;
		int			len = fx->len[i];
		char	   *buf = malloc(len + 8);
		int			nmut = 1 + rng() % 4;

		memcpy(buf, fx->line[i], len);
		for (int m = 0; m < nmut; m++)
		{
			int			pos = rng() % len;

			switch (rng() % 3)
			{
				case 0:
					buf[pos] = alphabet[rng() % (sizeof(alphabet) - 1)];
					break;
				case 1:
					buf[pos] = (char) rng();
					break;
				default:
					/* cut here */
					len = pos;
					break;
			}
			if (len == 0)
				break;
		}
		try_mutant(&fx->before[i], buf, len);
		free(buf);
	}
	ok(alloc_ok, "mutants: allocation stays within 64 bytes per message byte");
	ok(mutants_valid, "mutants: %ld decoded, each accepted one structurally valid", mutants);
}

int
main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "test/fixtures/wal2json";
	Fixture    *fx = malloc(sizeof(Fixture));
	int			nfail;
	bool		valid;

	if (ok(load_fixture(dir, "basic.jsonl", fx), "basic.jsonl: fixture loads"))
	{
		ok(decode_fixture(fx, &nfail, &valid), "basic.jsonl: ends outside a transaction");
		ok(nfail == 2, "basic.jsonl: every message decodes but the two ambiguous nulls (%d failed)",
		   nfail);
		ok(valid, "basic.jsonl: every decoded change is structurally valid");
		check_basic(fx);
		arena_reset();
		mutate_fixture(fx, 200000);
		free_fixture(fx);
	}
	free(fx);

	test_handmade();

	ok(!error_set_overflow && n_seen_errors > 5 && !error_bad_text,
	   "errors come from a small set of %d static, value-free strings", n_seen_errors);

	arena_free();
	printf("1..%d\n", tap_count);
	if (tap_failed > 0)
		diag("%d of %d tests failed", tap_failed, tap_count);
	return tap_failed > 0 ? 1 : 0;
}
