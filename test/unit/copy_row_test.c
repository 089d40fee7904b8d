/*-------------------------------------------------------------------------
 *
 * copy_row_test.c
 *	  Unit tests of the COPY row splitters (src/copy_row.c), emitting TAP.
 *
 *	  copy_row_test				run the tests (TAP on stdout)
 *
 * NOTES
 *	  ash_copy_text_split and ash_copy_binary_split are pure functions of
 *	  their input that un-escape or terminate values in place.  Every input
 *	  here is copied into a buffer malloc'd with exactly len + 1 bytes (the
 *	  room libpq's copy buffers have), so AddressSanitizer reports any read
 *	  or write past it; the byte at len is set to garbage first, so a value
 *	  found NUL-terminated was terminated by the splitter.
 *
 *	  Hand-written cases pin the formats down (PostgreSQL's COPY FROM is the
 *	  model for the text escapes, the documented file format for binary).
 *	  Then every prefix of the valid rows, and a fixed-seed random mutation
 *	  loop over them, are checked against reference splitters written here
 *	  (out of place, index-based): the result must agree, accepted values
 *	  must lie in the buffer, in order, NUL-terminated, and every error must
 *	  be one of a small set of static, value-free strings.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdarg.h>

#include "change.h"
#include "copy_row.h"

#define MAX_COLS	1600		/* a table's column limit */
#define FUZZ_ITERATIONS 200000	/* per format */

/* ----------------------------------------------------------------
 * TAP, with the reason of a failure kept until its "not ok" line.
 * ----------------------------------------------------------------
 */
static int	ntests;
static int	nfailed;
static char why[1024];

static void tap_line(const char *prefix, const char *fmt, va_list ap) pg_attribute_printf(2, 0);

static void
tap_line(const char *prefix, const char *fmt, va_list ap)
{
	char		text[1024];

	vsnprintf(text, sizeof(text), fmt, ap);
	printf("%s%s\n", prefix, text);
	fflush(stdout);
}

static void diag(const char *fmt,...) pg_attribute_printf(1, 2);

static void
diag(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	tap_line("# ", fmt, ap);
	va_end(ap);
}

/* Record why a check failed (the first reason wins); returns false. */
static bool because(const char *fmt,...) pg_attribute_printf(1, 2);

static bool
because(const char *fmt,...)
{
	va_list		ap;

	if (why[0] != '\0')
		return false;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	return false;
}

/* Add context to the reason just recorded. */
static void also(const char *fmt,...) pg_attribute_printf(1, 2);

static void
also(const char *fmt,...)
{
	size_t		used = strlen(why);
	va_list		ap;

	va_start(ap, fmt);
	vsnprintf(why + used, sizeof(why) - used, fmt, ap);
	va_end(ap);
}

static bool ok(bool cond, const char *fmt,...) pg_attribute_printf(2, 3);

static bool
ok(bool cond, const char *fmt,...)
{
	char		prefix[32];
	va_list		ap;

	ntests++;
	if (!cond)
		nfailed++;
	snprintf(prefix, sizeof(prefix), "%sok %d - ", cond ? "" : "not ", ntests);
	va_start(ap, fmt);
	tap_line(prefix, fmt, ap);
	va_end(ap);
	if (!cond && why[0] != '\0')
		diag("%s", why);
	why[0] = '\0';
	return cond;
}

/* Bytes for a diagnostic: printable ASCII as is, others as \xHH. */
static const char *
show(const char *p, int len)
{
	static char ring[4][200];
	static int	next;
	char	   *out = ring[next++ % 4];
	int			o = 0;

	if (p == NULL)
		return "(null pointer)";
	out[o++] = '"';
	for (int i = 0; i < len && o < 180; i++)
	{
		unsigned char c = (unsigned char) p[i];

		if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"')
			out[o++] = c;
		else
			o += snprintf(out + o, 200 - o, "\\x%02x", c);
	}
	if (o >= 180)
		o += snprintf(out + o, 200 - o, "...");
	out[o++] = '"';
	out[o] = '\0';
	return out;
}

/* ----------------------------------------------------------------
 * Deterministic random numbers (xorshift64*, fixed seed).
 * ----------------------------------------------------------------
 */
static uint64 rng_state = UINT64CONST(0x9e3779b97f4a7c15);

static uint32
rng_below(uint32 n)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32) ((rng_state * UINT64CONST(2685821657736338717)) >> 32) % n;
}

/* ----------------------------------------------------------------
 * Errors: a small set of static strings (pointer identity), printable
 * ASCII, never pointing into the message.
 * ----------------------------------------------------------------
 */
#define MAX_ERRORS 32
static const char *errors_seen[MAX_ERRORS];
static int	n_errors_seen;

static bool
error_valid(const char *err, const char *buf, int len)
{
	if (err == NULL || err[0] == '\0')
		return because("failure without an error string");
	if ((uintptr_t) err >= (uintptr_t) buf && (uintptr_t) err <= (uintptr_t) buf + len)
		return because("error string points into the message");
	for (const char *p = err; *p; p++)
		if (*p < 0x20 || *p > 0x7e)
			return because("error string is not printable: %s", show(err, strlen(err)));
	for (int i = 0; i < n_errors_seen; i++)
		if (errors_seen[i] == err)
			return true;
	if (n_errors_seen == MAX_ERRORS)
		return because("more than %d distinct error strings", MAX_ERRORS);
	errors_seen[n_errors_seen++] = err;
	return true;
}

/* ----------------------------------------------------------------
 * Expected values and the checks of split values.
 * ----------------------------------------------------------------
 */
typedef struct Expect
{
	const char *data;			/* NULL: SQL NULL */
	int			len;
} Expect;

/* a value from a string literal (which may hold NUL bytes), or NULL */
#define V(s)		{(s), (int) sizeof(s) - 1}
#define SQLNULL		{NULL, 0}
#define VALUES(...) ((const Expect[]) {__VA_ARGS__}), \
	(int) lengthof(((const Expect[]) {__VA_ARGS__}))
/* a row from a string literal: pointer and length */
#define ROW(s)		(s), (int) sizeof(s) - 1

static AshColumnValue cols[MAX_COLS + 2];

/*
 * Values of an accepted row: NULLs are NULL pointers of length 0; the
 * others have the format's status and lie in buf[0 .. len] in column order,
 * each with its NUL terminator after it and before the next value.
 */
static bool
values_sane(const char *buf, int len, int ncols, char status)
{
	uintptr_t	next = (uintptr_t) buf;
	uintptr_t	end = (uintptr_t) buf + len;

	for (int i = 0; i < ncols; i++)
	{
		const AshColumnValue *c = &cols[i];
		uintptr_t	d = (uintptr_t) c->data;

		if (c->status == ASH_COL_NULL)
		{
			if (c->data != NULL || c->len != 0)
				return because("column %d: NULL with data or a length", i + 1);
			continue;
		}
		if (c->status != status)
			return because("column %d: status '%c', expected '%c'", i + 1, c->status, status);
		if (c->data == NULL || c->len < 0 || d < next || d > end || (uintptr_t) c->len > end - d)
			return because("column %d: value (offset %ld, length %d) outside the message "
						   "of %d bytes or overlapping the previous one",
						   i + 1, (long) (d - (uintptr_t) buf), c->len, len);
		if (c->data[c->len] != '\0')
			return because("column %d: value not NUL-terminated", i + 1);
		next = d + c->len + 1;
	}
	return true;
}

static bool
values_equal(const Expect *exp, int ncols)
{
	for (int i = 0; i < ncols; i++)
	{
		const AshColumnValue *c = &cols[i];
		bool		isnull = c->status == ASH_COL_NULL;

		if (exp[i].data == NULL ? !isnull :
			(isnull || c->len != exp[i].len || memcmp(c->data, exp[i].data, c->len) != 0))
			return because("column %d: got %s, expected %s", i + 1,
						   isnull ? "NULL" : show(c->data, c->len),
						   exp[i].data ? show(exp[i].data, exp[i].len) : "NULL");
	}
	return true;
}

/* A copy of row in exactly len + 1 bytes, the last one garbage. */
static char *
exact_copy(const void *row, int len, char last)
{
	char	   *buf = malloc(len + 1);

	if (buf == NULL)
		abort();
	memcpy(buf, row, len);
	buf[len] = last;
	return buf;
}

/* ----------------------------------------------------------------
 * Text format: hand-written cases.
 * ----------------------------------------------------------------
 */
static void
text_accepts(const char *desc, const char *row, int len, const Expect *exp, int ncols)
{
	char	   *buf = exact_copy(row, len, '#');
	const char *err = NULL;
	bool		res;

	memset(cols, 0x7f, sizeof(AshColumnValue) * ncols);
	res = ash_copy_text_split(buf, len, ncols, cols, &err);
	if (!res)
		because("rejected: %s", err ? err : "(no error)");
	ok(res && values_sane(buf, len, ncols, ASH_COL_TEXT) && values_equal(exp, ncols),
	   "text: %s", desc);
	free(buf);
}

static void
text_rejects(const char *desc, const char *row, int len, int ncols, const char *errword)
{
	char	   *buf = exact_copy(row, len, '#');
	const char *err = NULL;
	bool		res;

	res = ash_copy_text_split(buf, len, ncols, cols, &err);
	if (res)
		because("accepted");
	else if (error_valid(err, buf, len) && strstr(err, errword) == NULL)
		because("error \"%s\" does not mention \"%s\"", err, errword);
	ok(!res && why[0] == '\0', "text: %s rejected", desc);
	free(buf);
}

static void
test_text_cases(void)
{
	char	   *big;
	char	   *p;
	bool		res;
	const char *err = NULL;
	int			len;

	/* plain values, with and without the row's newline */
	text_accepts("plain values", ROW("1\tabc\tx y z\n"), VALUES(V("1"), V("abc"), V("x y z")));
	text_accepts("plain values without the trailing newline", ROW("1\tabc\tx y z"),
				 VALUES(V("1"), V("abc"), V("x y z")));
	text_accepts("one value", ROW("hello\n"), VALUES(V("hello")));
	text_accepts("non-ASCII bytes pass through", ROW("caf\xc3\xa9\t\xff\n"),
				 VALUES(V("caf\xc3\xa9"), V("\xff")));

	/* empty strings against NULL */
	text_accepts("empty string, \\N, empty string", ROW("\t\\N\t\n"),
				 VALUES(V(""), SQLNULL, V("")));
	text_accepts("\\N alone is NULL", ROW("\\N\n"), VALUES(SQLNULL));
	text_accepts("\\N alone without newline is NULL", ROW("\\N"), VALUES(SQLNULL));
	text_accepts("all NULL", ROW("\\N\t\\N\t\\N\n"), VALUES(SQLNULL, SQLNULL, SQLNULL));
	text_accepts("NULL last, no newline", ROW("a\t\\N"), VALUES(V("a"), SQLNULL));
	text_accepts("empty last value", ROW("a\t\n"), VALUES(V("a"), V("")));
	text_accepts("empty last value, no newline", ROW("a\t"), VALUES(V("a"), V("")));
	text_accepts("all empty", ROW("\t\t\n"), VALUES(V(""), V(""), V("")));

	/* "\\N" is an escaped backslash then N: the two-byte text \N */
	text_accepts("\\\\N is the text \\N, not NULL", ROW("\\\\N\n"), VALUES(V("\\N")));
	text_accepts("\\\\N between values", ROW("a\t\\\\N\t\\N\n"),
				 VALUES(V("a"), V("\\N"), SQLNULL));
	text_accepts("\\N inside a value is N", ROW("a\\N\t\\Nb\n"), VALUES(V("aN"), V("Nb")));

	/* every escape */
	text_accepts("\\b \\f \\n \\r \\t \\v \\\\",
				 ROW("\\b\t\\f\t\\n\t\\r\t\\t\t\\v\t\\\\\n"),
				 VALUES(V("\b"), V("\f"), V("\n"), V("\r"), V("\t"), V("\v"), V("\\")));
	text_accepts("escapes run together", ROW("\\b\\f\\n\\r\\t\\v\\\\\n"),
				 VALUES(V("\b\f\n\r\t\v\\")));
	text_accepts("any other escaped byte stands for itself", ROW("\\q\\.\\ \\\"\\N\\8\n"),
				 VALUES(V("q. \"N8")));
	text_accepts("escaped raw tab joins (as COPY FROM reads it)", ROW("a\\\tb\n"),
				 VALUES(V("a\tb")));

	/* octal */
	text_accepts("octal \\101 \\60 \\7", ROW("\\101\t\\60\t\\7\n"),
				 VALUES(V("A"), V("0"), V("\007")));
	text_accepts("octal \\0 is a NUL byte", ROW("a\\0b\n"), VALUES(V("a\0b")));
	text_accepts("octal takes three digits at most", ROW("\\1012\n"), VALUES(V("A2")));
	text_accepts("octal stops at 8 and 9", ROW("\\18\t\\09\n"), VALUES(V("\0018"), V("\0009")));
	text_accepts("octal \\377 and \\777 (masked to a byte)", ROW("\\377\t\\777\t\\400\n"),
				 VALUES(V("\377"), V("\377"), V("\0")));
	text_accepts("octal at the end of the row", ROW("x\\12"), VALUES(V("x\n")));

	/* hex */
	text_accepts("hex \\x41 \\x4a \\x4A", ROW("\\x41\t\\x4a\t\\x4A\n"),
				 VALUES(V("A"), V("J"), V("J")));
	text_accepts("hex takes two digits at most", ROW("\\x414\n"), VALUES(V("A4")));
	text_accepts("hex with one digit", ROW("\\x4\t\\xfg\t\\xF\n"),
				 VALUES(V("\004"), V("\017g"), V("\017")));
	text_accepts("hex \\xff \\x00", ROW("\\xff\\x00\n"), VALUES(V("\377\0")));
	text_accepts("\\x without a hex digit is x", ROW("\\xg\t\\x\t\\x\\\\\n"),
				 VALUES(V("xg"), V("x"), V("x\\")));

	/* tabs and newlines inside values */
	text_accepts("escaped tab and newline inside values", ROW("a\\tb\tc\\nd\\r\\n\n"),
				 VALUES(V("a\tb"), V("c\nd\r\n")));
	text_accepts("value that is only a newline", ROW("\\n\n"), VALUES(V("\n")));
	text_accepts("escaped backslash before a tab", ROW("a\\\\\tb\n"), VALUES(V("a\\"), V("b")));

	/* the smallest rows */
	text_accepts("\"\\n\" with one column is one empty string", ROW("\n"), VALUES(V("")));
	text_accepts("\"\" with one column is one empty string", ROW(""), VALUES(V("")));

	/* column counts and unfinished escapes */
	text_rejects("too few columns", ROW("a\tb\n"), 3, "fewer");
	text_rejects("too few columns (empty row)", ROW("\n"), 2, "fewer");
	text_rejects("too many columns", ROW("a\tb\tc\n"), 2, "more");
	text_rejects("too many columns (trailing tab)", ROW("a\t\n"), 1, "more");
	text_rejects("too many columns (after a NULL)", ROW("\\N\t\\N\n"), 1, "more");
	text_rejects("unfinished escape at the end", ROW("a\\"), 1, "escape");
	text_rejects("unfinished escape before the newline", ROW("a\\\n"), 1, "escape");
	text_rejects("unfinished escape in the last column", ROW("a\tb\\"), 2, "escape");
	text_rejects("lone backslash", ROW("\\"), 1, "escape");

	/* in place: values start where their field starts */
	{
		char	   *buf = exact_copy(ROW("\\x41bc\t\\\\\tz\n"), '#');

		res = ash_copy_text_split(buf, 12, 3, cols, &err);
		ok(res && cols[0].data == buf && cols[1].data == buf + 7 && cols[2].data == buf + 10 &&
		   memcmp(buf, "Abc\0", 4) == 0 && memcmp(buf + 7, "\\\0", 2) == 0 &&
		   memcmp(buf + 10, "z\0", 2) == 0,
		   "text: un-escaped in place, each value at its field's start");
		free(buf);
	}

	/* the widest table, and a long value full of escapes */
	len = 0;
	big = malloc(MAX_COLS * 6 + 1);
	for (int i = 0; i < MAX_COLS; i++)
		len += sprintf(big + len, "%s%d", i ? "\t" : "", i);
	big[len++] = '\n';
	p = exact_copy(big, len, '#');
	res = ash_copy_text_split(p, len, MAX_COLS, cols, &err);
	if (res && values_sane(p, len, MAX_COLS, ASH_COL_TEXT))
		for (int i = 0; i < MAX_COLS; i++)
		{
			char		want[8];

			snprintf(want, sizeof(want), "%d", i);
			if (cols[i].len != (int) strlen(want) || strcmp(cols[i].data, want) != 0)
				because("column %d: got %s", i + 1, show(cols[i].data, cols[i].len));
		}
	ok(res && why[0] == '\0', "text: %d columns", MAX_COLS);
	free(p);
	free(big);

	len = 1 << 20;
	big = malloc(len);
	for (int i = 0; i < len; i += 4)
		memcpy(big + i, "\\x41", 4);
	p = exact_copy(big, len, '#');
	res = ash_copy_text_split(p, len, 1, cols, &err);
	if (res && values_sane(p, len, 1, ASH_COL_TEXT))
		for (int i = 0; i < cols[0].len; i++)
			if (cols[0].data[i] != 'A')
				because("byte %d is %s", i, show(cols[0].data + i, 1));
	ok(res && cols[0].len == len / 4 && why[0] == '\0',
	   "text: a 1 MiB row of \\x41 escapes un-escapes to %d bytes", len / 4);
	free(p);
	free(big);
}

/* a row of int4 42, text 'hello' and NULL */
static const Expect three[] = {V("\0\0\0\52"), V("hello"), SQLNULL};

/* ----------------------------------------------------------------
 * Binary format: message building.
 * ----------------------------------------------------------------
 */
typedef struct Msg
{
	unsigned char b[2 + MAX_COLS * 8];
	int			len;
	int			nvals;
	int			voff[MAX_COLS]; /* offset of each value put (-1 for NULL) */
} Msg;

static const char signature[11] = "PGCOPY\n\377\r\n\0";

static void
put(Msg *m, const void *p, int n)
{
	if (m->len + n > (int) sizeof(m->b))
		abort();
	memcpy(m->b + m->len, p, n);
	m->len += n;
}

static void
put16(Msg *m, int v)
{
	unsigned char b[2] = {(v >> 8) & 0xff, v & 0xff};

	put(m, b, 2);
}

static void
put32(Msg *m, uint32 v)
{
	unsigned char b[4] = {v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff};

	put(m, b, 4);
}

static void
put_header(Msg *m, uint32 flags, const char *ext, int extlen)
{
	put(m, signature, 11);
	put32(m, flags);
	put32(m, extlen);
	put(m, ext, extlen);
}

/* field count and values; a NULL Expect is written as length -1 */
static void
put_row(Msg *m, const Expect *vals, int n)
{
	put16(m, n);
	for (int i = 0; i < n; i++)
	{
		put32(m, vals[i].data ? (uint32) vals[i].len : 0xffffffff);
		m->voff[m->nvals++] = vals[i].data ? m->len : -1;
		if (vals[i].data)
			put(m, vals[i].data, vals[i].len);
	}
}

static Msg *msgs[1024];
static int	nmsgs;

static Msg *
new_msg(void)
{
	Msg		   *m = calloc(1, sizeof(Msg));

	if (m == NULL || nmsgs == (int) lengthof(msgs))
		abort();
	msgs[nmsgs++] = m;
	return m;
}

static void
free_msgs(void)
{
	while (nmsgs > 0)
		free(msgs[--nmsgs]);
}

static Msg *
header_row(const Expect *vals, int n)
{
	Msg		   *m = new_msg();

	put_header(m, 0, "", 0);
	put_row(m, vals, n);
	return m;
}

static Msg *
row_only(const Expect *vals, int n)
{
	Msg		   *m = new_msg();

	put_row(m, vals, n);
	return m;
}

/* ----------------------------------------------------------------
 * Binary format: hand-written cases.
 * ----------------------------------------------------------------
 */

/*
 * Split the first len bytes of m (in an exact copy) from state *state;
 * returns the result, the copy in *bufp (the caller frees it).
 */
static int
binary_call(const Msg *m, int len, int *state, int ncols, const char **err, char **bufp)
{
	*bufp = exact_copy(m->b, len, '#');
	*err = NULL;
	memset(cols, 0x7f, sizeof(AshColumnValue) * Max(ncols, 0));
	return ash_copy_binary_split(*bufp, len, state, ncols, cols, err);
}

/* m splits from state_in to result want (1 row, 0 trailer) with values exp */
static void
binary_accepts(const char *desc, const Msg *m, int state_in, int want, const Expect *exp,
			   int ncols)
{
	int			state = state_in;
	const char *err;
	char	   *buf;
	int			r = binary_call(m, m->len, &state, ncols, &err, &buf);

	if (r != want)
		because("returned %d (%s), expected %d", r, r < 0 && err ? err : "-", want);
	else if (state != 1)
		because("state %d after the split, expected 1", state);
	else if (want == 1 && values_sane(buf, m->len, ncols, ASH_COL_BINARY) &&
			 values_equal(exp, ncols))
	{
		for (int i = 0; i < ncols; i++)
			if (m->voff[i] >= 0 && cols[i].data != buf + m->voff[i])
				because("column %d: data at offset %ld, expected %d", i + 1,
						(long) (cols[i].data - buf), m->voff[i]);
	}
	ok(why[0] == '\0', "binary: %s", desc);
	free(buf);
}

static void
binary_rejects(const char *desc, const Msg *m, int state_in, int ncols, const char *errword)
{
	int			state = state_in;
	const char *err;
	char	   *buf;
	int			r = binary_call(m, m->len, &state, ncols, &err, &buf);

	if (r != -1)
		because("returned %d", r);
	else if (error_valid(err, buf, m->len) && strstr(err, errword) == NULL)
		because("error \"%s\" does not mention \"%s\"", err, errword);
	else if (state_in == 0 && strstr(errword, "header") && state != 0)
		because("state %d after a bad header, expected 0", state);
	ok(why[0] == '\0', "binary: %s rejected", desc);
	free(buf);
}

static bool binary_differential(const unsigned char *msg, int len, int state_in, int ncols,
								int *accepted, int *critical_skipped);

/*
 * Every strict prefix of m (the empty message too) is rejected, with the
 * error the reference splitter names.
 */
static void
binary_truncations(const char *desc, const Msg *m, int state_in, int ncols)
{
	int			accepted = 0;
	int			critical = 0;
	int			bad = 0;

	for (int cut = 0; cut < m->len; cut++)
		bad += !binary_differential(m->b, cut, state_in, ncols, &accepted, &critical);
	if (accepted > 0)
		because("%d of %d prefixes accepted", accepted, m->len);
	ok(bad == 0 && accepted == 0, "binary: %s cut at each of its %d lengths rejected", desc,
	   m->len);
}

/* m followed by 1, 2, 4 or 7 more bytes is rejected (as the reference says) */
static void
binary_trailing_garbage(const char *desc, const Msg *m, int state_in, int ncols)
{
	static const int extra[] = {1, 2, 4, 7};
	int			accepted = 0;
	int			critical = 0;
	int			bad = 0;

	for (int e = 0; e < (int) lengthof(extra); e++)
	{
		Msg		   *g = new_msg();

		*g = *m;
		for (int i = 0; i < extra[e]; i++)
			put(g, e % 2 ? "\377" : "", 1);
		bad += !binary_differential(g->b, g->len, state_in, ncols, &accepted, &critical);
	}
	if (accepted > 0)
		because("accepted with %d more bytes", accepted);
	ok(bad == 0 && accepted == 0, "binary: %s followed by 1, 2, 4, 7 bytes rejected", desc);
}

static void
test_binary_cases(void)
{
	static const Expect nulls[] = {SQLNULL, SQLNULL, SQLNULL};
	static const Expect empties[] = {V(""), V(""), V("")};
	static const Expect nul_bytes[] = {V("\0"), V("a\0b"), V("\0\0")};
	Msg		   *m;
	Msg		   *hr = header_row(three, 3);
	Msg		   *ro = row_only(three, 3);
	Msg		   *trailer = new_msg();
	Msg		   *ht = new_msg();
	Msg		   *hx = new_msg();

	put16(trailer, -1);
	put_header(ht, 0, "", 0);
	put16(ht, -1);
	put_header(hx, 0, "ext\0\1", 5);
	put_row(hx, three, 3);

	binary_accepts("header + row in one message", hr, 0, 1, three, 3);
	binary_accepts("a row alone", ro, 1, 1, three, 3);
	binary_accepts("all NULL", row_only(nulls, 3), 1, 1, nulls, 3);
	binary_accepts("zero-length values (the last at the message end)",
				   row_only(empties, 3), 1, 1, empties, 3);
	binary_accepts("values holding NUL bytes", row_only(nul_bytes, 3), 1, 1, nul_bytes, 3);
	binary_accepts("NULL between values", row_only(VALUES(V("a"), SQLNULL, V("b"))), 1, 1,
				   VALUES(V("a"), SQLNULL, V("b")));
	binary_accepts("the trailer alone", trailer, 1, 0, NULL, 3);
	binary_accepts("header + trailer (an empty table)", ht, 0, 0, NULL, 3);
	binary_accepts("header with a 5-byte extension area + row", hx, 0, 1, three, 3);
	binary_accepts("zero columns (a table without columns)", header_row(NULL, 0), 0, 1, NULL, 0);
	binary_accepts("one column", row_only(VALUES(V("x"))), 1, 1, VALUES(V("x")));

	/* the in-place terminators, byte by byte */
	{
		int			state = 1;
		const char *err;
		char	   *buf;
		int			r = binary_call(ro, ro->len, &state, 3, &err, &buf);

		/* 2 count, 4 len, 4 data, 4 len, 5 data, 4 len (-1) */
		ok(r == 1 && ro->len == 23 && cols[0].data == buf + 6 && cols[0].len == 4 &&
		   buf[10] == '\0' && cols[1].data == buf + 14 && cols[1].len == 5 &&
		   buf[19] == '\0' && memcmp(buf + 14, "hello", 5) == 0 && cols[2].data == NULL,
		   "binary: data[len] == '\\0' overwrites the next length, values point into the message");
		free(buf);
		m = row_only(VALUES(V("last")));
		state = 1;
		r = binary_call(m, m->len, &state, 1, &err, &buf);
		ok(r == 1 && cols[0].data == buf + 6 && buf[m->len] == '\0',
		   "binary: the last value is terminated at msg[len]");
		free(buf);
	}

	/* the header */
	for (int i = 0; i < 11; i++)
	{
		int			accepted = 0;

		for (int bit = 0; bit < 8; bit++)
		{
			int			state = 0;
			const char *err;
			char	   *buf;
			int			r;

			m = new_msg();
			*m = *hr;
			m->b[i] ^= 1 << bit;
			r = binary_call(m, m->len, &state, 3, &err, &buf);
			if (r != -1 || state != 0 || !error_valid(err, buf, m->len) ||
				strstr(err, "header") == NULL)
				accepted++;
			free(buf);
		}
		if (accepted)
			because("%d of 8 one-bit changes accepted", accepted);
		ok(accepted == 0, "binary: wrong signature byte %d rejected, header still expected", i);
	}
	binary_rejects("a row without the header", ro, 0, 3, "header");
	binary_rejects("the trailer without the header", trailer, 0, 3, "header");
	binary_rejects("a second header", hr, 1, 3, "column count");
	m = new_msg();
	put_header(m, 1 << 16, "", 0);
	put_row(m, three, 3);
	binary_rejects("OIDs flag", m, 0, 3, "OIDs");
	m = new_msg();
	put_header(m, 0xffff, "", 0);
	put_row(m, three, 3);
	binary_accepts("flag bits 0-15 ignored (backwards-compatible)", m, 0, 1, three, 3);
	{
		int			accepted = 0;

		/* the file format: "a reader should abort if it finds an unexpected bit set" */
		for (int bit = 17; bit < 32; bit++)
		{
			int			state = 0;
			const char *err;
			char	   *buf;

			m = new_msg();
			put_header(m, (uint32) 1 << bit, "", 0);
			put_row(m, three, 3);
			if (binary_call(m, m->len, &state, 3, &err, &buf) != -1)
				accepted++;
			free(buf);
		}
		if (accepted)
			because("%d of 15 headers with one critical bit (17-31) accepted: "
					"the flags are read for bit 16 only", accepted);
		ok(accepted == 0, "binary: unknown critical flag bits 17-31 rejected");
	}
	m = new_msg();
	put_header(m, 0, "abc", 3);
	m->b[18] = 8;				/* extension length 8, 3 bytes + a row follow */
	put16(m, -1);
	binary_rejects("extension length past the message end", m, 0, 3, "header");
	m = new_msg();
	put_header(m, 0, "", 0);
	m->b[15] = 0xff;			/* extension length 0xff000000 */
	put16(m, -1);
	binary_rejects("huge extension length", m, 0, 3, "header");
	m = new_msg();
	put_header(m, 0, "", 0);
	binary_rejects("the header alone", m, 0, 3, "truncated");

	/* field counts */
	binary_rejects("field count 2 for 3 columns", row_only(three, 2), 1, 3, "column count");
	binary_rejects("field count 3 for 4 columns", ro, 1, 4, "column count");
	binary_rejects("field count 3 for 2 columns", ro, 1, 2, "column count");
	binary_rejects("field count 0 for 3 columns", row_only(NULL, 0), 1, 3, "column count");
	binary_rejects("field count 1 for 0 columns", row_only(VALUES(V("x"))), 1, 0, "column count");
	{
		static const int counts[] = {-2, -32768, 32767, 0x100 + 3};

		for (int i = 0; i < (int) lengthof(counts); i++)
		{
			char		desc[64];

			m = new_msg();
			*m = *ro;
			m->b[0] = (counts[i] >> 8) & 0xff;
			m->b[1] = counts[i] & 0xff;
			snprintf(desc, sizeof(desc), "field count %d", counts[i]);
			binary_rejects(desc, m, 1, 3, "column count");
		}
	}

	/* value lengths */
	{
		static const uint32 lengths[] = {0xfffffffe, 0x80000000, 0x80000001, 0xffffff00,
		0x7fffffff, 5, 17};

		for (int i = 0; i < (int) lengthof(lengths); i++)
		{
			char		desc[64];

			/* the first value's length: 4 bytes at offset 2 (a 4-byte value) */
			m = new_msg();
			*m = *ro;
			m->b[2] = lengths[i] >> 24;
			m->b[3] = (lengths[i] >> 16) & 0xff;
			m->b[4] = (lengths[i] >> 8) & 0xff;
			m->b[5] = lengths[i] & 0xff;
			snprintf(desc, sizeof(desc), "value length %d", (int32) lengths[i]);
			binary_rejects(desc, m, 1, 3, lengths[i] == 17 ? "truncated" : "length");
		}
	}
	m = new_msg();
	put16(m, 1);
	put32(m, 4);
	put(m, "abc", 3);
	binary_rejects("value length past the message end", m, 1, 1, "length");

	/* truncations and trailing garbage */
	binary_truncations("header + row", hr, 0, 3);
	binary_truncations("header + extension + row", hx, 0, 3);
	binary_truncations("header + trailer", ht, 0, 3);
	binary_truncations("row", ro, 1, 3);
	binary_truncations("zero-length values", row_only(empties, 3), 1, 3);
	binary_truncations("trailer", trailer, 1, 3);
	binary_trailing_garbage("header + row", hr, 0, 3);
	binary_trailing_garbage("row", ro, 1, 3);
	binary_trailing_garbage("trailer", trailer, 1, 3);
	binary_trailing_garbage("header + trailer", ht, 0, 3);

	/* the widest table */
	{
		static Expect wide[MAX_COLS];
		static char digits[MAX_COLS][4];

		for (int i = 0; i < MAX_COLS; i++)
		{
			snprintf(digits[i], 4, "%03d", i % 1000);
			wide[i].data = i % 7 == 3 ? NULL : digits[i];
			wide[i].len = i % 7 == 3 ? 0 : 3;
		}
		binary_accepts("1600 columns, every seventh NULL", row_only(wide, MAX_COLS), 1, 1,
					   wide, MAX_COLS);
	}
}

/* ----------------------------------------------------------------
 * Reference splitters: out of place, by index.
 * ----------------------------------------------------------------
 */
typedef struct RefVal
{
	bool		isnull;
	int			off;			/* of the value's bytes in the reference output */
	int			len;
	int			at;				/* where the value starts in the message */
} RefVal;

static int
ascii_hex(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c |= 0x20;
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/*
 * The text row in[0 .. len) as PostgreSQL's COPY FROM reads a line
 * (CopyReadAttributesText): fields end at an unescaped tab, a field whose
 * raw bytes are \N is NULL.  Values go to out, the first maxvals described
 * in vals; returns the number of fields, *unfinished when the row ends in
 * the middle of an escape.
 */
static int
ref_text(const unsigned char *in, int len, int maxvals, RefVal *vals, char *out,
		 bool *unfinished)
{
	int			i = 0;
	int			o = 0;
	int			n = 0;

	*unfinished = false;
	if (len > 0 && in[len - 1] == '\n')
		len--;
	for (;;)
	{
		int			start = i;
		int			ostart = o;
		bool		delim = false;

		while (i < len)
		{
			int			c = in[i++];
			int			v;

			if (c == '\t')
			{
				delim = true;
				break;
			}
			if (c != '\\')
			{
				out[o++] = c;
				continue;
			}
			if (i == len)
			{
				*unfinished = true;
				break;
			}
			c = in[i++];
			if (c >= '0' && c <= '7')
			{
				v = c - '0';
				for (int d = 0; d < 2 && i < len && in[i] >= '0' && in[i] <= '7'; d++)
					v = v * 8 + in[i++] - '0';
				out[o++] = (char) (v & 0xff);
			}
			else if (c == 'x' && i < len && ascii_hex(in[i]) >= 0)
			{
				v = ascii_hex(in[i++]);
				if (i < len && ascii_hex(in[i]) >= 0)
					v = v * 16 + ascii_hex(in[i++]);
				out[o++] = (char) v;
			}
			else
				out[o++] = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' :
					c == 'r' ? '\r' : c == 't' ? '\t' : c == 'v' ? '\v' : c;
		}
		if (n < maxvals)
		{
			vals[n].isnull = (i - delim - start) == 2 && in[start] == '\\' &&
				in[start + 1] == 'N';
			vals[n].off = ostart;
			vals[n].len = o - ostart;
			vals[n].at = start;
		}
		n++;
		if (!delim)
			return n;
	}
}

static uint32
be32(const unsigned char *p)
{
	return (uint32) p[0] << 24 | (uint32) p[1] << 16 | (uint32) p[2] << 8 | p[3];
}

/*
 * The binary message m[0 .. len) as the file format describes it; offsets
 * are into m.  A rejection sets *reason to words its error must contain.
 * *critical is set when a flag bit 17-31 is set: a reader must abort then,
 * which is tested on its own above, so the caller does not compare those.
 */
static int
ref_binary(const unsigned char *m, int len, int *state, int ncols, RefVal *vals,
		   bool *critical, const char **reason)
{
	int64		pos = 0;
	int			nf;

	*critical = false;
	if (*state == 0)
	{
		*reason = "header";
		if (len < 19 || memcmp(m, signature, 11) != 0)
			return -1;
		*reason = "OIDs";
		if (be32(m + 11) & 0x10000)
			return -1;
		*critical = (be32(m + 11) >> 17) != 0;
		*reason = "header";
		pos = 19 + (int64) be32(m + 15);
		if (pos > len)
			return -1;
		*state = 1;
	}
	*reason = "truncated binary COPY row";
	if (len - pos < 2)
		return -1;
	nf = (int16) (m[pos] << 8 | m[pos + 1]);
	pos += 2;
	*reason = "trailer";
	if (nf == -1)
		return pos == len ? 0 : -1;
	*reason = "column count";
	if (nf != ncols)
		return -1;
	for (int c = 0; c < ncols; c++)
	{
		int64		flen;

		*reason = "truncated binary COPY value";
		if (len - pos < 4)
			return -1;
		flen = (int32) be32(m + pos);
		pos += 4;
		vals[c].isnull = flen == -1;
		vals[c].off = vals[c].at = pos;
		vals[c].len = flen == -1 ? 0 : flen;
		if (flen == -1)
			continue;
		*reason = "length";
		if (flen < 0 || flen > len - pos)
			return -1;
		pos += flen;
	}
	*reason = "after the last";
	return pos == len ? 1 : -1;
}

/* ----------------------------------------------------------------
 * Differential checks: every prefix, then random mutations.
 * ----------------------------------------------------------------
 */
static RefVal ref_vals[MAX_COLS + 2];
static char ref_out[8192];

/*
 * The values split from buf against the reference's: the same bytes (the
 * reference's are in base) at the same place in the message.
 */
static bool
values_match_ref(const char *buf, int ncols, const char *base)
{
	for (int i = 0; i < ncols; i++)
	{
		const RefVal *r = &ref_vals[i];

		if (r->isnull != (cols[i].status == ASH_COL_NULL))
			return because("column %d: NULL %d, the reference %d", i + 1,
						   cols[i].status == ASH_COL_NULL, r->isnull);
		if (r->isnull)
			continue;
		if (cols[i].len != r->len || memcmp(cols[i].data, base + r->off, r->len) != 0)
			return because("column %d: got %s, the reference %s", i + 1,
						   show(cols[i].data, cols[i].len), show(base + r->off, r->len));
		if (cols[i].data != buf + r->at)
			return because("column %d: at offset %ld, the reference %d", i + 1,
						   (long) (cols[i].data - buf), r->at);
	}
	return true;
}

/* one text row against the reference; false (with why) on disagreement */
static bool
text_differential(const unsigned char *row, int len, int ncols, int *accepted)
{
	char	   *buf = exact_copy(row, len, (char) rng_below(256));
	const char *err = NULL;
	bool		first = why[0] == '\0';
	bool		unfinished;
	int			refn = ref_text(row, len, lengthof(ref_vals), ref_vals, ref_out, &unfinished);
	bool		res = ash_copy_text_split(buf, len, ncols, cols, &err);
	bool		good;

	if (res != (!unfinished && refn == ncols))
		good = because("accepted %d, the reference found %d fields%s for %d columns", res, refn,
					   unfinished ? " and an unfinished escape" : "", ncols);
	else if (res)
		good = values_sane(buf, len, ncols, ASH_COL_TEXT) &&
			values_match_ref(buf, ncols, ref_out);
	else if (!error_valid(err, buf, len))
		good = false;
	else if (!((refn > ncols && strstr(err, "more")) || (refn < ncols && strstr(err, "fewer")) ||
			   (unfinished && strstr(err, "escape"))))
		good = because("error \"%s\" for %d fields%s and %d columns", err, refn,
					   unfinished ? " and an unfinished escape" : "", ncols);
	else
		good = true;
	if (!good && first)
		also("; %d columns, row %s", ncols, show((const char *) row, len));
	*accepted += res;
	free(buf);
	return good;
}

static bool
binary_differential(const unsigned char *msg, int len, int state_in, int ncols, int *accepted,
					int *critical_skipped)
{
	char	   *buf = exact_copy(msg, len, (char) rng_below(256));
	const char *err = NULL;
	const char *reason = NULL;
	bool		first = why[0] == '\0';
	int			state = state_in;
	int			ref_state = state_in;
	bool		critical;
	int			ref = ref_binary(msg, len, &ref_state, ncols, ref_vals, &critical, &reason);
	int			r = ash_copy_binary_split(buf, len, &state, ncols, cols, &err);
	bool		good;

	if (r == 1 && !values_sane(buf, len, ncols, ASH_COL_BINARY))
		good = false;
	else if (r < 0 && !error_valid(err, buf, len))
		good = false;
	else if (critical)
	{
		(*critical_skipped)++;
		good = true;
	}
	else if (r != ref)
		good = because("returned %d, the reference %d (%s)", r, ref, ref < 0 ? reason : "-");
	else if (r >= 0 && state != ref_state)
		good = because("state %d, the reference %d", state, ref_state);
	else if (r == 1)
		good = values_match_ref(buf, ncols, (const char *) msg);
	else if (r < 0 && strstr(err, reason) == NULL)
		good = because("error \"%s\", the reference's names \"%s\"", err, reason);
	else
		good = true;
	if (!good && first)
		also("; state %d, %d columns, message %s", state_in, ncols,
			 show((const char *) msg, len));
	*accepted += (r >= 0);
	free(buf);
	return good;
}

typedef struct Seed
{
	const char *row;
	int			len;
	int			ncols;
	int			state;			/* binary: the state it is split from */
} Seed;

static const Seed text_seeds[] = {
	{ROW("1\tabc\tx y z\n"), 3},
	{ROW("\t\\N\t\n"), 3},
	{ROW("\\\\N\t\\N\n"), 2},
	{ROW("\\b\\f\\n\\r\\t\\v\\\\\n"), 1},
	{ROW("\\101\\60\\7\t\\x41\\x4\\xg\t\\377\\0x\n"), 3},
	{ROW("a\\tb\tc\\nd\n"), 2},
	{ROW("\n"), 1},
	{ROW("42\t2024-01-01 00:00:00+00\t{1,2,3}\t\\\\x00ff\t\\N\tt\n"), 6},
};

/* bytes a text mutation favours */
static const char text_alphabet[] = "\\\t\nNxX0178fFg9abtnrv";

static void
mutate_text(unsigned char *b, int *len, int cap)
{
	int			nops = 1 + rng_below(4);

	for (int k = 0; k < nops; k++)
	{
		int			pos = *len ? rng_below(*len) : 0;
		unsigned char c = rng_below(4) ?
			(unsigned char) text_alphabet[rng_below(sizeof(text_alphabet) - 1)] :
			(unsigned char) rng_below(256);

		switch (rng_below(4))
		{
			case 0:				/* replace */
				if (*len)
					b[pos] = c;
				break;
			case 1:				/* insert */
				if (*len < cap)
				{
					memmove(b + pos + 1, b + pos, *len - pos);
					b[pos] = c;
					(*len)++;
				}
				break;
			case 2:				/* delete */
				if (*len)
				{
					memmove(b + pos, b + pos + 1, *len - pos - 1);
					(*len)--;
				}
				break;
			default:			/* truncate */
				if (rng_below(4) == 0)
					*len = pos;
				break;
		}
	}
}

static void
mutate_binary(unsigned char *b, int *len, int cap)
{
	int			nops = 1 + rng_below(4);

	for (int k = 0; k < nops; k++)
	{
		int			pos = *len ? rng_below(*len) : 0;

		switch (rng_below(6))
		{
			case 0:
				if (*len)
					b[pos] ^= 1 << rng_below(8);
				break;
			case 1:
				if (*len)
					b[pos] = rng_below(256);
				break;
			case 2:				/* large, negative or small counts and lengths */
				if (*len)
					b[pos] = rng_below(3) == 0 ? 0 : rng_below(2) ? 0xff : 0x7f;
				break;
			case 3:
				if (*len < cap)
				{
					memmove(b + pos + 1, b + pos, *len - pos);
					b[pos] = rng_below(256);
					(*len)++;
				}
				break;
			case 4:
				if (*len)
				{
					memmove(b + pos, b + pos + 1, *len - pos - 1);
					(*len)--;
				}
				break;
			default:
				if (rng_below(4) == 0)
					*len = pos;
				break;
		}
	}
}

static void
test_text_differential(void)
{
	unsigned char work[256];
	int			accepted = 0;
	int			bad = 0;
	int			checked = 0;

	for (int s = 0; s < (int) lengthof(text_seeds); s++)
		for (int cut = 0; cut <= text_seeds[s].len; cut++, checked++)
			if (!text_differential((const unsigned char *) text_seeds[s].row, cut,
								   text_seeds[s].ncols, &accepted))
				bad++;
	ok(bad == 0, "text: all %d prefixes of %d rows agree with the reference (%d accepted)",
	   checked, (int) lengthof(text_seeds), accepted);

	accepted = 0;
	for (int k = 0; k < FUZZ_ITERATIONS; k++)
	{
		const Seed *s = &text_seeds[rng_below(lengthof(text_seeds))];
		int			len = s->len;
		int			ncols = s->ncols;

		memcpy(work, s->row, len);
		mutate_text(work, &len, sizeof(work));
		if (rng_below(16) == 0)
			ncols = Max(0, ncols + (int) rng_below(3) - 1);
		bad += !text_differential(work, len, ncols, &accepted);
	}
	/* the first disagreement is in why */
	ok(bad == 0, "text: %d random mutations: no crash, result and values agree with the "
	   "reference, values in the buffer and NUL-terminated", FUZZ_ITERATIONS);
	diag("text: %d of %d mutated rows accepted", accepted, FUZZ_ITERATIONS);
}

static void
test_binary_differential(void)
{
	Seed		seeds[8];
	int			nseeds = 0;
	unsigned char work[256];
	int			accepted = 0;
	int			critical = 0;
	int			bad = 0;
	Msg		   *m;

	/* the valid messages: header + row, rows, trailers */
	m = header_row(three, 3);
	seeds[nseeds++] = (Seed) {(const char *) m->b, m->len, 3, 0};
	m = row_only(three, 3);
	seeds[nseeds++] = (Seed) {(const char *) m->b, m->len, 3, 1};
	m = row_only(VALUES(V(""), SQLNULL, V("\xff\xff\xff\xff")));
	seeds[nseeds++] = (Seed) {(const char *) m->b, m->len, 3, 1};
	m = row_only(VALUES(V("a")));
	seeds[nseeds++] = (Seed) {(const char *) m->b, m->len, 1, 1};
	m = new_msg();
	put_header(m, 0, "ext", 3);
	put_row(m, three, 3);
	seeds[nseeds++] = (Seed) {(const char *) m->b, m->len, 3, 0};
	m = new_msg();
	put_header(m, 0, "", 0);
	put16(m, -1);
	seeds[nseeds++] = (Seed) {(const char *) m->b, m->len, 3, 0};
	m = new_msg();
	put16(m, -1);
	seeds[nseeds++] = (Seed) {(const char *) m->b, m->len, 3, 1};

	for (int k = 0; k < FUZZ_ITERATIONS; k++)
	{
		const Seed *s = &seeds[rng_below(nseeds)];
		int			len = s->len;
		int			ncols = s->ncols;
		int			state = s->state;

		memcpy(work, s->row, len);
		mutate_binary(work, &len, sizeof(work));
		if (rng_below(16) == 0)
			ncols = Max(0, ncols + (int) rng_below(3) - 1);
		if (rng_below(32) == 0)
			state = !state;
		bad += !binary_differential(work, len, state, ncols, &accepted, &critical);
	}
	ok(bad == 0, "binary: %d random mutations: no crash, result and values agree with the "
	   "reference, values in the message and NUL-terminated", FUZZ_ITERATIONS);
	diag("binary: %d of %d mutated messages accepted (%d with critical flag bits not compared)",
		 accepted, FUZZ_ITERATIONS, critical);
}

/* ----------------------------------------------------------------
 * main
 * ----------------------------------------------------------------
 */
int
main(int argc, char **argv)
{
	test_text_cases();
	test_binary_cases();
	test_text_differential();
	test_binary_differential();

	ok(n_errors_seen > 0 && n_errors_seen <= 16,
	   "errors come from a small set of %d static, value-free strings", n_errors_seen);
	for (int i = 0; i < n_errors_seen; i++)
		diag("error: %s", errors_seen[i]);

	free_msgs();
	printf("1..%d\n", ntests);
	if (nfailed > 0)
		diag("%d of %d tests failed", nfailed, ntests);
	return nfailed > 0 ? 1 : 0;
}
