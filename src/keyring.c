/*-------------------------------------------------------------------------
 *
 * keyring.c
 *	  The key file named by ash_replicant.keyring_file (docs/keys.md).
 *
 * NOTES
 *	  File format (docs/keys.md is the operator's copy):
 *
 *		# comment
 *		column_encryption   1  <64 hex digits>
 *		message_digest      1  base64:<standard base64 with padding>
 *
 *	  One key per line: three fields separated by spaces or tabs -- family,
 *	  version, key.  A line whose first non-blank character is '#' is a
 *	  comment; blank lines are ignored; a trailing CR is ignored.  There are
 *	  no inline comments.  The key is hexadecimal (upper or lower case, even
 *	  length) or, with the prefix "base64:", RFC 4648 base64 with padding.
 *
 *	  Checks -- any failure refuses the WHOLE file:
 *	  - the file (after following symlinks) is a regular file owned by the
 *		server's effective user with no group or other permission bits
 *		(mode 0600 or stricter), at most ASH_KEYRING_MAX_BYTES long;
 *	  - family is one of the four known families;
 *	  - version is a positive decimal integer that fits int32;
 *	  - the key decodes; it is at least 16 bytes long, exactly 32 for
 *		column_encryption (AES-256);
 *	  - a version appears at most once per family.
 *	  The highest version of a family is its active key; lower versions are
 *	  kept for reading (rotate by adding a line).
 *
 *	  Error messages carry the line NUMBER and what is wrong, never the
 *	  line's text: a mis-ordered line could put a key where a family or a
 *	  version is expected.  Neither the path nor key bytes are printed.
 *
 *	  Reload: ash_keyring_load() stat()s the file and re-reads it only when
 *	  the GUC value or the file's identity (device, inode, size, mtime,
 *	  ctime, mode, owner) changed, so after an edit (and, for a changed path,
 *	  SIGHUP) the next load sees the new file.  A refused file wipes the old
 *	  keys too (fail closed: the operator's current file is what counts), and
 *	  every following load retries and refuses again until it is fixed.
 *
 *	  Memory: keys live in a dedicated memory context under
 *	  TopMemoryContext; the raw file text lives in a scratch context.  Both
 *	  are zeroed with explicit_bzero before they are freed -- on success, on
 *	  reload and on every error path (PG_TRY around the parse).
 *
 *	  Errors raise keyring_invalid (SQLSTATE F0000) through ash_reject, or
 *	  through ash_halt inside one of the extension's background workers, so
 *	  a pipeline halts with the reason rather than retrying.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base64.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "ash_replicant.h"
#include "errors.h"
#include "hex.h"
#include "keyring.h"

#define ASH_KEYRING_MAX_BYTES	(1024 * 1024)
#define BASE64_PREFIX			"base64:"

const char *const ash_key_families[ASH_KEY_FAMILY_COUNT] = {
	ASH_KEYS_COLUMN_ENCRYPTION,
	ASH_KEYS_MESSAGE_DIGEST,
	ASH_KEYS_HORIZON_PROVENANCE,
	ASH_KEYS_SNAPSHOT_PROVENANCE,
};

/* Keys of one family, ascending by version once loaded. */
typedef struct KeyFamily
{
	AshKey	   *keys;
	int		   *linenos;		/* line of each key (parse only) */
	int			nkeys;
	int			cap;
} KeyFamily;

typedef struct Keyring
{
	MemoryContext cxt;			/* owns keys and their bytes; NULL if none */
	KeyFamily	families[ASH_KEY_FAMILY_COUNT];
} Keyring;

/* The loaded keyring and what it was loaded from. */
static Keyring current;
static Keyring pending;			/* under construction (static: survives longjmp) */
static bool loaded = false;		/* last load succeeded */
static char *loaded_path = NULL;	/* NULL: no keyring configured */
static struct stat loaded_stat;

/* ---------------------------------------------------------------------
 * Errors.
 * ---------------------------------------------------------------------
 */

/* Raise keyring_invalid with a structural context (never line text). */
#define keyring_fail(...) \
	ash_refuse(ERRCODE_CONFIG_FILE_ERROR, "keyring", "keyring_invalid", __VA_ARGS__)

/* ---------------------------------------------------------------------
 * Keyring storage.
 * ---------------------------------------------------------------------
 */

static int
family_index(const char *family, size_t len)
{
	for (int i = 0; i < ASH_KEY_FAMILY_COUNT; i++)
	{
		if (strlen(ash_key_families[i]) == len &&
			memcmp(ash_key_families[i], family, len) == 0)
			return i;
	}
	return -1;
}

/* Index of a family named by a caller; an unknown name is a coding error. */
static int
caller_family(const char *family)
{
	int			i = family != NULL ? family_index(family, strlen(family)) : -1;

	if (i < 0)
		elog(ERROR, "ash_replicant: unknown key family requested");
	return i;
}

/* Zero every key's bytes, then free the keyring's memory. */
static void
keyring_wipe(Keyring *kr)
{
	for (int f = 0; f < ASH_KEY_FAMILY_COUNT; f++)
	{
		KeyFamily  *fam = &kr->families[f];

		for (int k = 0; k < fam->nkeys; k++)
		{
			if (fam->keys[k].bytes != NULL)
				explicit_bzero((void *) fam->keys[k].bytes, fam->keys[k].len);
		}
	}
	if (kr->cxt != NULL)
		MemoryContextDelete(kr->cxt);
	memset(kr, 0, sizeof(*kr));
}

/* Wipers of copies of key material kept outside the keyring. */
#define MAX_RESET_HOOKS 4
static AshKeyringResetHook reset_hooks[MAX_RESET_HOOKS];
static int	nreset_hooks = 0;

void
ash_keyring_on_reset(AshKeyringResetHook hook)
{
	for (int i = 0; i < nreset_hooks; i++)
		if (reset_hooks[i] == hook)
			return;
	if (nreset_hooks == MAX_RESET_HOOKS)
		elog(ERROR, "ash_replicant: too many keyring reset hooks");
	reset_hooks[nreset_hooks++] = hook;
}

void
ash_keyring_reset(void)
{
	for (int i = 0; i < nreset_hooks; i++)
		reset_hooks[i] ();
	keyring_wipe(&current);
	loaded = false;
	if (loaded_path != NULL)
		pfree(loaded_path);
	loaded_path = NULL;
	memset(&loaded_stat, 0, sizeof(loaded_stat));
}

static int
key_version_cmp(const void *a, const void *b)
{
	const AshKey *ka = a;
	const AshKey *kb = b;

	return (ka->version > kb->version) - (ka->version < kb->version);
}

/* ---------------------------------------------------------------------
 * Decoding (no error may echo input: these return false instead).
 * ---------------------------------------------------------------------
 */

/* Decode hex into dst (len/2 bytes); false on odd length or a non-digit. */
static bool
decode_hex(const char *src, int len, uint8 *dst)
{
	if (len == 0 || len % 2 != 0)
		return false;
	for (int i = 0; i < len; i += 2)
	{
		int			hi = ash_hex_digit(src[i]);
		int			lo = ash_hex_digit(src[i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		dst[i / 2] = (uint8) ((hi << 4) | lo);
	}
	return true;
}

/* Strict RFC 4648 base64 with padding: alphabet, length, '=' only at end. */
static bool
base64_is_wellformed(const char *src, int len)
{
	int			pad = 0;

	if (len == 0 || len % 4 != 0)
		return false;
	for (int i = 0; i < len; i++)
	{
		char		c = src[i];

		if (c == '=')
		{
			if (i < len - 2)
				return false;
			pad++;
		}
		else if (pad > 0)
			return false;
		else if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
				   (c >= '0' && c <= '9') || c == '+' || c == '/'))
			return false;
	}
	return true;
}

/* Positive decimal int32; false otherwise. */
static bool
parse_version(const char *src, int len, int32 *version)
{
	int64		v = 0;

	if (len == 0 || len > 10)
		return false;
	for (int i = 0; i < len; i++)
	{
		if (src[i] < '0' || src[i] > '9')
			return false;
		v = v * 10 + (src[i] - '0');
	}
	if (v < 1 || v > PG_INT32_MAX)
		return false;
	*version = (int32) v;
	return true;
}

/* ---------------------------------------------------------------------
 * Parsing.
 * ---------------------------------------------------------------------
 */

typedef struct Token
{
	const char *p;
	int			len;
} Token;

static bool
is_blank(char c)
{
	return c == ' ' || c == '\t';
}

/* Add one parsed line to the keyring under construction. */
static void
add_key(Keyring *kr, int lineno, const Token *tok)
{
	int			f;
	int32		version;
	KeyFamily  *fam;
	AshKey	   *key;
	uint8	   *bytes;
	int			len;
	bool		base64;
	const char *enc = tok[2].p;
	int			enclen = tok[2].len;

	f = family_index(tok[0].p, tok[0].len);
	if (f < 0)
		keyring_fail("line %d: unknown key family", lineno);
	if (!parse_version(tok[1].p, tok[1].len, &version))
		keyring_fail("line %d: key version must be a positive integer below 2^31", lineno);

	/* decode straight into the keyring context */
	base64 = enclen >= (int) strlen(BASE64_PREFIX) &&
		memcmp(enc, BASE64_PREFIX, strlen(BASE64_PREFIX)) == 0;
	if (base64)
	{
		int			cap;

		enc += strlen(BASE64_PREFIX);
		enclen -= strlen(BASE64_PREFIX);
		if (!base64_is_wellformed(enc, enclen))
			keyring_fail("line %d: key is not valid base64", lineno);
		cap = pg_b64_dec_len(enclen);
		bytes = MemoryContextAllocZero(kr->cxt, cap);
		len = pg_b64_decode(enc, enclen, (char *) bytes, cap);
		if (len < 0)
		{
			explicit_bzero(bytes, cap);
			keyring_fail("line %d: key is not valid base64", lineno);
		}
	}
	else
	{
		bytes = MemoryContextAllocZero(kr->cxt, enclen / 2 + 1);
		if (!decode_hex(enc, enclen, bytes))
		{
			explicit_bzero(bytes, enclen / 2 + 1);
			keyring_fail("line %d: key is not valid hexadecimal (or base64 without the \"base64:\" prefix)",
						 lineno);
		}
		len = enclen / 2;
	}

	fam = &kr->families[f];
	/* record the bytes first so that every error below wipes them */
	if (fam->nkeys == fam->cap)
	{
		fam->cap = fam->cap == 0 ? 4 : fam->cap * 2;
		if (fam->keys == NULL)
		{
			fam->keys = MemoryContextAllocZero(kr->cxt, fam->cap * sizeof(AshKey));
			fam->linenos = MemoryContextAllocZero(kr->cxt, fam->cap * sizeof(int));
		}
		else
		{
			fam->keys = repalloc(fam->keys, fam->cap * sizeof(AshKey));
			fam->linenos = repalloc(fam->linenos, fam->cap * sizeof(int));
		}
	}
	key = &fam->keys[fam->nkeys];
	key->family = ash_key_families[f];
	key->version = version;
	key->len = len;
	key->bytes = bytes;
	fam->linenos[fam->nkeys] = lineno;
	fam->nkeys++;

	if (f == 0 && len != ASH_KEY_AES256_BYTES)
		keyring_fail("line %d: a %s key must be exactly %d bytes (AES-256)",
					 lineno, ASH_KEYS_COLUMN_ENCRYPTION, ASH_KEY_AES256_BYTES);
	if (len < ASH_KEY_MIN_BYTES)
		keyring_fail("line %d: key is shorter than %d bytes", lineno, ASH_KEY_MIN_BYTES);
	for (int k = 0; k < fam->nkeys - 1; k++)
	{
		if (fam->keys[k].version == version)
			keyring_fail("line %d: duplicate version of family %s (first on line %d)",
						 lineno, ash_key_families[f], fam->linenos[k]);
	}
}

/* Parse the whole file text into kr (whose cxt is set). */
static void
parse_keyring(Keyring *kr, const char *buf, size_t size)
{
	size_t		pos = 0;
	int			lineno = 0;

	while (pos < size)
	{
		size_t		end = pos;
		size_t		i;
		Token		tok[3];
		int			ntok = 0;

		lineno++;
		while (end < size && buf[end] != '\n')
			end++;
		/* [pos, end) is the line; drop one trailing CR */
		i = end;
		if (i > pos && buf[i - 1] == '\r')
			i--;

		{
			size_t		p = pos;
			size_t		lend = i;

			while (p < lend && is_blank(buf[p]))
				p++;
			if (p < lend && buf[p] != '#')
			{
				while (p < lend)
				{
					size_t		start = p;

					while (p < lend && !is_blank(buf[p]))
						p++;
					if (ntok < 3)
					{
						tok[ntok].p = buf + start;
						tok[ntok].len = (int) (p - start);
					}
					ntok++;
					while (p < lend && is_blank(buf[p]))
						p++;
				}
				if (ntok != 3)
					keyring_fail("line %d: expected three fields \"family version key\", found %d",
								 lineno, ntok);
				add_key(kr, lineno, tok);
			}
		}
		pos = end + 1;
	}

	for (int f = 0; f < ASH_KEY_FAMILY_COUNT; f++)
	{
		KeyFamily  *fam = &kr->families[f];

		if (fam->nkeys > 1)
			qsort(fam->keys, fam->nkeys, sizeof(AshKey), key_version_cmp);
		/* line numbers are only for messages; they no longer match */
		if (fam->linenos != NULL)
			pfree(fam->linenos);
		fam->linenos = NULL;
	}
}

/* ---------------------------------------------------------------------
 * Reading the file.
 * ---------------------------------------------------------------------
 */

/* NULL when the file may hold keys, else what is wrong (no path). */
static const char *
file_stat_problem(const struct stat *st)
{
	if (!S_ISREG(st->st_mode))
		return "the keyring file is not a regular file";
	if (st->st_uid != geteuid())
		return "the keyring file must be owned by the database server user";
	if ((st->st_mode & (S_IRWXG | S_IRWXO)) != 0)
		return "the keyring file must not be accessible by group or others (mode 0600 or stricter)";
	if (st->st_size > ASH_KEYRING_MAX_BYTES)
		return "the keyring file is larger than 1 MB";
	return NULL;
}

static bool
same_file_state(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev &&
		a->st_ino == b->st_ino &&
		a->st_size == b->st_size &&
		a->st_mode == b->st_mode &&
		a->st_uid == b->st_uid &&
		a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
		a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
		a->st_ctim.tv_sec == b->st_ctim.tv_sec &&
		a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/*
 * Read the file into a zeroed buffer allocated in scratch.  Returns NULL
 * and sets *problem (plus *err_no for a system call) on failure; the
 * descriptor is closed on every path before anything is raised.
 */
static char *
read_file(const char *path, MemoryContext scratch, struct stat *st,
		  size_t *size, const char **problem, int *err_no)
{
	int			fd;
	char	   *buf;
	size_t		cap;
	size_t		n = 0;

	*problem = NULL;
	*err_no = 0;

	/* stat first: a precise message even for a file we cannot open */
	if (stat(path, st) != 0)
	{
		*err_no = errno;
		*problem = "could not find the keyring file";
		return NULL;
	}
	if ((*problem = file_stat_problem(st)) != NULL)
		return NULL;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
	{
		*err_no = errno;
		*problem = "could not open the keyring file";
		return NULL;
	}
	/* the checks that count are on what was opened */
	if (fstat(fd, st) != 0)
	{
		*err_no = errno;
		close(fd);
		*problem = "could not stat the keyring file";
		return NULL;
	}
	if ((*problem = file_stat_problem(st)) != NULL)
	{
		close(fd);
		return NULL;
	}

	cap = (size_t) st->st_size + 1;
	buf = MemoryContextAllocZero(scratch, cap);
	for (;;)
	{
		ssize_t		r = read(fd, buf + n, cap - n);

		if (r < 0)
		{
			if (errno == EINTR)
				continue;
			*err_no = errno;
			close(fd);
			explicit_bzero(buf, cap);
			*problem = "could not read the keyring file";
			return NULL;
		}
		if (r == 0)
			break;
		n += r;
		if (n == cap)
		{
			/* grew while we read it: refuse rather than read half a file */
			close(fd);
			explicit_bzero(buf, cap);
			*problem = "the keyring file changed while it was read";
			return NULL;
		}
	}
	close(fd);
	*size = n;
	return buf;
}

/* Load path into a fresh keyring; on success it replaces "current". */
static void
read_keyring_file(const char *path)
{
	MemoryContext scratch;
	struct stat st;
	char	   *volatile buf = NULL;
	volatile size_t size = 0;
	const char *problem;
	int			err_no;

	keyring_wipe(&pending);
	scratch = AllocSetContextCreate(TopMemoryContext, "ash_replicant keyring file",
									ALLOCSET_SMALL_SIZES);
	{
		size_t		n = 0;
		char	   *b = read_file(path, scratch, &st, &n, &problem, &err_no);

		if (b == NULL)
		{
			MemoryContextDelete(scratch);
			if (err_no != 0)
				keyring_fail("%s: %s", problem, strerror(err_no));
			keyring_fail("%s", problem);
		}
		buf = b;
		size = n;
	}

	pending.cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant keyring",
										ALLOCSET_SMALL_SIZES);
	PG_TRY();
	{
		parse_keyring(&pending, buf, size);
	}
	PG_CATCH();
	{
		explicit_bzero(buf, size);
		MemoryContextDelete(scratch);
		keyring_wipe(&pending);
		PG_RE_THROW();
	}
	PG_END_TRY();
	explicit_bzero(buf, size);
	MemoryContextDelete(scratch);

	current = pending;
	memset(&pending, 0, sizeof(pending));
	loaded_path = MemoryContextStrdup(TopMemoryContext, path);
	loaded_stat = st;
	loaded = true;
}

void
ash_keyring_load(void)
{
	const char *path = ash_keyring_file;
	struct stat st;

	if (path == NULL || path[0] == '\0')
	{
		/* no keyring configured: every family is absent */
		if (!loaded || loaded_path != NULL)
		{
			ash_keyring_reset();
			loaded = true;
		}
		return;
	}

	if (loaded && loaded_path != NULL && strcmp(loaded_path, path) == 0 &&
		stat(path, &st) == 0 && same_file_state(&st, &loaded_stat))
		return;

	/* anything else: drop what we had, then read the file as it is now */
	ash_keyring_reset();
	read_keyring_file(path);
}

#define KEYRING_RECHECK_MS 1000

void
ash_keyring_recheck(void)
{
	static TimestampTz last = 0;
	TimestampTz now = GetCurrentTimestamp();

	if (!TimestampDifferenceExceeds(last, now, KEYRING_RECHECK_MS))
		return;
	last = now;
	ash_keyring_load();
}

/* ---------------------------------------------------------------------
 * Lookups (never reload once something is loaded: see keyring.h).
 * ---------------------------------------------------------------------
 */

static KeyFamily *
lookup_family(const char *family)
{
	int			f = caller_family(family);

	if (!loaded)
		ash_keyring_load();
	return &current.families[f];
}

const AshKey *
ash_keyring_active(const char *family)
{
	KeyFamily  *fam = lookup_family(family);

	return fam->nkeys > 0 ? &fam->keys[fam->nkeys - 1] : NULL;
}

const AshKey *
ash_keyring_get(const char *family, int version)
{
	KeyFamily  *fam = lookup_family(family);

	for (int k = 0; k < fam->nkeys; k++)
	{
		if (fam->keys[k].version == version)
			return &fam->keys[k];
	}
	return NULL;
}

bool
ash_keyring_has_family(const char *family)
{
	return lookup_family(family)->nkeys > 0;
}

int
ash_keyring_versions(const char *family, int32 **versions)
{
	KeyFamily  *fam = lookup_family(family);

	*versions = palloc(sizeof(int32) * Max(fam->nkeys, 1));
	for (int k = 0; k < fam->nkeys; k++)
		(*versions)[k] = fam->keys[k].version;
	return fam->nkeys;
}
