/*-------------------------------------------------------------------------
 *
 * crypto.c
 *	  AES-256-GCM column encryption and HMAC-SHA-256 (OpenSSL).
 *
 * NOTES
 *	  The ciphertext format and the authenticated data are described in
 *	  crypto.h (and docs/keys.md).  Invariants:
 *
 *	  - a fresh 96-bit random nonce (RAND_bytes) for every value; the key is the
 *		ACTIVE column_encryption key and its version is written in the
 *		header, so rotation needs no re-encryption: older values name the
 *		retained version they were written with;
 *	  - the header is part of the authenticated data, so no header byte
 *		can be changed without failing the tag;
 *	  - decryption fails closed: an unknown format, a truncated value, an
 *		absent key version (keyring_version_missing, never "changed") and a
 *		tag mismatch (tampering or another binding) each raise; no partial
 *		plaintext escapes (the buffer is wiped before raising);
 *	  - messages name the format problem and the destination column, never
 *		a byte of the value or of a key.
 *
 *	  OpenSSL contexts are freed before anything is raised, so no handle
 *	  leaks on an error path.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

/* SHA256_CTX for HMAC (see ash_hmac_sha256): deprecated in OpenSSL 3.0 */
#define OPENSSL_SUPPRESS_DEPRECATED

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "crypto.h"
#include "errors.h"
#include "keyring.h"

/*
 * AES-256-GCM, looked up once: with OpenSSL 3 every implicit lookup
 * (EVP_aes_256_gcm() in an Init call) searches the provider's algorithm
 * table by name, a measurable share of the cost of sealing one value.
 */
static const EVP_CIPHER *
aes_256_gcm(void)
{
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	static EVP_CIPHER *cipher = NULL;

	if (cipher == NULL)
		cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
	if (cipher == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("ash_replicant: AES-256-GCM is not available from OpenSSL")));
	return cipher;
#else
	return EVP_aes_256_gcm();
#endif
}

#define STAGE_ENCRYPT	"encrypt"
#define STAGE_DECRYPT	"decrypt"

char *
ash_crypto_binding(const char *schema, const char *table, const char *column)
{
	StringInfoData buf;

	initStringInfo(&buf);
	ash_append_quoted_name(&buf, schema);
	appendStringInfoChar(&buf, '.');
	ash_append_quoted_name(&buf, table);
	appendStringInfoChar(&buf, '.');
	ash_append_quoted_name(&buf, column);
	return buf.data;
}

/*
 * The bindings of the last few columns sealed, so a value does not rebuild
 * its column's quoted name.  Entries are compared by content: a caller's
 * strings may be freed and their addresses reused.
 */
#define BINDING_CACHE_SIZE 8

typedef struct BindingEntry
{
	char	   *schema;
	char	   *table;
	char	   *column;
	char	   *binding;
	int			len;
} BindingEntry;

static BindingEntry binding_cache[BINDING_CACHE_SIZE];
static int	binding_next = 0;

static const BindingEntry *
cached_binding(const char *schema, const char *table, const char *column)
{
	BindingEntry *e;
	MemoryContext old;

	for (int i = 0; i < BINDING_CACHE_SIZE; i++)
	{
		e = &binding_cache[i];
		if (e->binding != NULL && strcmp(e->column, column) == 0 &&
			strcmp(e->table, table) == 0 && strcmp(e->schema, schema) == 0)
			return e;
	}
	e = &binding_cache[binding_next];
	binding_next = (binding_next + 1) % BINDING_CACHE_SIZE;
	if (e->binding != NULL)
	{
		pfree(e->schema);
		pfree(e->table);
		pfree(e->column);
		pfree(e->binding);
		e->binding = NULL;
	}
	old = MemoryContextSwitchTo(TopMemoryContext);
	e->schema = pstrdup(schema);
	e->table = pstrdup(table);
	e->column = pstrdup(column);
	e->binding = ash_crypto_binding(schema, table, column);
	e->len = strlen(e->binding);
	MemoryContextSwitchTo(old);
	return e;
}

/* AAD = header || binding, palloc'd; *len set. */
static uint8 *
build_aad(const uint8 *header, const char *schema, const char *table,
		  const char *column, int *len)
{
	const BindingEntry *b = cached_binding(schema, table, column);
	uint8	   *aad = palloc(ASH_CIPHER_HEADER_LEN + b->len);

	memcpy(aad, header, ASH_CIPHER_HEADER_LEN);
	memcpy(aad + ASH_CIPHER_HEADER_LEN, b->binding, b->len);
	*len = ASH_CIPHER_HEADER_LEN + b->len;
	return aad;
}

static void
put_be32(uint8 *p, uint32 v)
{
	p[0] = (uint8) (v >> 24);
	p[1] = (uint8) (v >> 16);
	p[2] = (uint8) (v >> 8);
	p[3] = (uint8) v;
}

static uint32
get_be32(const uint8 *p)
{
	return ((uint32) p[0] << 24) | ((uint32) p[1] << 16) |
		((uint32) p[2] << 8) | (uint32) p[3];
}

/*
 * Random nonces, drawn from RAND_bytes a few hundred at a time: every
 * RAND_bytes call costs a provider lookup and a getpid() in OpenSSL 3, more
 * than the encryption of a short value.  Each nonce is used once; the pool
 * belongs to the process that filled it.
 */
#define NONCE_POOL_NONCES 512

static uint8 nonce_pool[NONCE_POOL_NONCES * ASH_CIPHER_NONCE_LEN];
static int	nonce_next = NONCE_POOL_NONCES;
static pid_t nonce_pid = 0;

static void
next_nonce(uint8 *nonce)
{
	if (nonce_next >= NONCE_POOL_NONCES || nonce_pid != MyProcPid)
	{
		if (RAND_bytes(nonce_pool, sizeof(nonce_pool)) != 1)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("ash_replicant: could not generate a random nonce")));
		nonce_next = 0;
		nonce_pid = MyProcPid;
	}
	memcpy(nonce, nonce_pool + nonce_next * ASH_CIPHER_NONCE_LEN, ASH_CIPHER_NONCE_LEN);
	nonce_next++;
}

/*
 * One encryption context, keyed once: expanding the AES key schedule for
 * every value is most of what sealing a short value costs.  Each value
 * still gets its own random nonce (EVP_EncryptInit_ex with only an IV
 * keeps the key).  The context follows the active key (version and bytes
 * compared on every use) and is wiped with the keyring (forget_keys is
 * its reset hook, registered before the first key is copied).
 */
static EVP_CIPHER_CTX *enc_ctx = NULL;
static uint8 enc_key[ASH_KEY_AES256_BYTES];
static int32 enc_version;
static bool enc_keyed = false;

static void forget_hmac_states(void);

static void
forget_keys(void)
{
	if (enc_ctx != NULL)
		EVP_CIPHER_CTX_free(enc_ctx);
	enc_ctx = NULL;
	explicit_bzero(enc_key, sizeof(enc_key));
	enc_keyed = false;
	forget_hmac_states();
}

static EVP_CIPHER_CTX *
encrypt_context(const AshKey *key)
{
	if (enc_keyed && enc_version == key->version &&
		CRYPTO_memcmp(enc_key, key->bytes, ASH_KEY_AES256_BYTES) == 0)
		return enc_ctx;
	forget_keys();
	ash_keyring_on_reset(forget_keys);
	enc_ctx = EVP_CIPHER_CTX_new();
	if (enc_ctx == NULL ||
		EVP_EncryptInit_ex(enc_ctx, aes_256_gcm(), NULL, NULL, NULL) != 1 ||
		EVP_CIPHER_CTX_ctrl(enc_ctx, EVP_CTRL_GCM_SET_IVLEN, ASH_CIPHER_NONCE_LEN, NULL) != 1 ||
		EVP_EncryptInit_ex(enc_ctx, NULL, NULL, key->bytes, NULL) != 1)
	{
		forget_keys();
		return NULL;
	}
	memcpy(enc_key, key->bytes, ASH_KEY_AES256_BYTES);
	enc_version = key->version;
	enc_keyed = true;
	return enc_ctx;
}

/*
 * The versions encrypted with in the current transaction: one, but for a
 * rotation in its course.
 */
static int32 *used_versions = NULL;
static int	n_used_versions = 0;
static int	max_used_versions = 0;

static void
note_version(int32 version)
{
	for (int i = 0; i < n_used_versions; i++)
		if (used_versions[i] == version)
			return;
	if (n_used_versions == max_used_versions)
	{
		max_used_versions = Max(4, max_used_versions * 2);
		used_versions = used_versions == NULL ?
			MemoryContextAlloc(TopMemoryContext, sizeof(int32) * max_used_versions) :
			repalloc(used_versions, sizeof(int32) * max_used_versions);
	}
	used_versions[n_used_versions++] = version;
}

void
ash_encrypt_versions_forget(void)
{
	n_used_versions = 0;
}

void
ash_encrypt_versions_check(void)
{
	if (n_used_versions == 0)
		return;
	ash_keyring_load();
	for (int i = 0; i < n_used_versions; i++)
		if (ash_keyring_get(ASH_KEYS_COLUMN_ENCRYPTION, used_versions[i]) == NULL)
			ash_halt("keyring_version_missing",
					 "family %s: a version this transaction encrypted with left the keyring before it committed",
					 ASH_KEYS_COLUMN_ENCRYPTION);
}

bytea *
ash_encrypt_column(const char *schema, const char *table, const char *column,
				   const char *plaintext, int len)
{
	const AshKey *key;
	bytea	   *result;
	uint8	   *out;
	uint8	   *aad;
	int			aadlen;
	EVP_CIPHER_CTX *ctx;
	int			outl = 0;
	int			finl = 0;
	bool		ok;

	if (len < 0 || (Size) len > MaxAllocSize - VARHDRSZ - ASH_CIPHER_OVERHEAD)
		ash_refuse(ERRCODE_PROGRAM_LIMIT_EXCEEDED, STAGE_ENCRYPT, "ciphertext_invalid",
					"value too long to encrypt for column %s",
					quote_identifier(column));	/* the schema may name a tenant */

	/* a long transaction (a table's copy) sees a rotated or refused file */
	ash_keyring_recheck();
	key = ash_keyring_active(ASH_KEYS_COLUMN_ENCRYPTION);
	if (key == NULL)
		ash_refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_ENCRYPT,
					"keyring_missing_family", "family %s has no key",
					ASH_KEYS_COLUMN_ENCRYPTION);
	note_version(key->version);
	if (key->len != ASH_KEY_AES256_BYTES)	/* the keyring guarantees it */
		elog(ERROR, "ash_replicant: column encryption key has the wrong length");

	result = palloc(VARHDRSZ + ASH_CIPHER_OVERHEAD + len);
	SET_VARSIZE(result, VARHDRSZ + ASH_CIPHER_OVERHEAD + len);
	out = (uint8 *) VARDATA(result);
	out[0] = ASH_CIPHER_FORMAT_V1;
	put_be32(out + 1, (uint32) key->version);
	next_nonce(out + ASH_CIPHER_HEADER_LEN);
	aad = build_aad(out, schema, table, column, &aadlen);

	ctx = encrypt_context(key);
	ok = ctx != NULL &&
		EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, out + ASH_CIPHER_HEADER_LEN) == 1 &&
		EVP_EncryptUpdate(ctx, NULL, &outl, aad, aadlen) == 1;
	if (ok && len > 0)
		ok = EVP_EncryptUpdate(ctx, out + ASH_CIPHER_HEADER_LEN + ASH_CIPHER_NONCE_LEN,
							   &outl, (const uint8 *) plaintext, len) == 1 &&
			outl == len;
	ok = ok &&
		EVP_EncryptFinal_ex(ctx, out + ASH_CIPHER_HEADER_LEN + ASH_CIPHER_NONCE_LEN + len,
							&finl) == 1 &&
		finl == 0 &&
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, ASH_CIPHER_TAG_LEN,
							out + ASH_CIPHER_HEADER_LEN + ASH_CIPHER_NONCE_LEN + len) == 1;
	pfree(aad);

	if (!ok)
	{
		forget_keys();
		pfree(result);
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("ash_replicant: encryption failed in OpenSSL")));
	}
	return result;
}

char *
ash_decrypt_column(const char *schema, const char *table, const char *column,
				   const char *shown, const bytea *value, int *len)
{
	const uint8 *in = (const uint8 *) VARDATA_ANY(value);
	int			inlen = VARSIZE_ANY_EXHDR(value);
	int			ctlen;
	uint32		version;
	const AshKey *key;
	uint8	   *aad;
	int			aadlen;
	char	   *plain;
	EVP_CIPHER_CTX *ctx;
	int			outl = 0;
	int			finl = 0;
	bool		ok;
	bool		authentic;

	Assert(!VARATT_IS_COMPRESSED(value) && !VARATT_IS_EXTERNAL(value));

	if (inlen < 1)
		ash_refuse(ERRCODE_DATA_CORRUPTED, STAGE_DECRYPT, "ciphertext_invalid",
					"empty value for column %s", shown);
	if (in[0] != ASH_CIPHER_FORMAT_V1)
		ash_refuse(ERRCODE_DATA_CORRUPTED, STAGE_DECRYPT, "ciphertext_invalid",
					"unknown ciphertext format for column %s",
					shown);
	if (inlen < ASH_CIPHER_OVERHEAD)
		ash_refuse(ERRCODE_DATA_CORRUPTED, STAGE_DECRYPT, "ciphertext_invalid",
					"truncated value for column %s", shown);
	version = get_be32(in + 1);
	if (version == 0 || version > PG_INT32_MAX)
		ash_refuse(ERRCODE_DATA_CORRUPTED, STAGE_DECRYPT, "ciphertext_invalid",
					"invalid key version in the value for column %s",
					shown);
	key = ash_keyring_get(ASH_KEYS_COLUMN_ENCRYPTION, (int) version);
	if (key == NULL)
		ash_refuse(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_DECRYPT,
					"keyring_version_missing", "family %s has no version %u",
					ASH_KEYS_COLUMN_ENCRYPTION, version);
	if (key->len != ASH_KEY_AES256_BYTES)	/* the keyring guarantees it */
		elog(ERROR, "ash_replicant: column encryption key has the wrong length");

	ctlen = inlen - ASH_CIPHER_OVERHEAD;
	plain = palloc0(ctlen + 1);
	aad = build_aad(in, schema, table, column, &aadlen);

	ctx = EVP_CIPHER_CTX_new();
	ok = ctx != NULL &&
		EVP_DecryptInit_ex(ctx, aes_256_gcm(), NULL, NULL, NULL) == 1 &&
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, ASH_CIPHER_NONCE_LEN, NULL) == 1 &&
		EVP_DecryptInit_ex(ctx, NULL, NULL, key->bytes, in + ASH_CIPHER_HEADER_LEN) == 1 &&
		EVP_DecryptUpdate(ctx, NULL, &outl, aad, aadlen) == 1;
	if (ok && ctlen > 0)
		ok = EVP_DecryptUpdate(ctx, (uint8 *) plain,
							   &outl, in + ASH_CIPHER_HEADER_LEN + ASH_CIPHER_NONCE_LEN,
							   ctlen) == 1 &&
			outl == ctlen;
	ok = ok &&
		EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, ASH_CIPHER_TAG_LEN,
							(void *) (in + inlen - ASH_CIPHER_TAG_LEN)) == 1;
	/* the tag verdict: only a completed, matching Final is authentic */
	authentic = ok &&
		EVP_DecryptFinal_ex(ctx, (uint8 *) plain + ctlen, &finl) == 1 &&
		finl == 0;
	EVP_CIPHER_CTX_free(ctx);
	pfree(aad);

	if (!authentic)
	{
		explicit_bzero(plain, ctlen + 1);
		pfree(plain);
		if (!ok)
			ereport(ERROR,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("ash_replicant: decryption failed in OpenSSL")));
		ash_refuse(ERRCODE_DATA_CORRUPTED, STAGE_DECRYPT, "ciphertext_invalid",
					"authentication failed: the value was altered or does not belong to column %s",
					shown);
	}
	*len = ctlen;
	return plain;
}

/*
 * HMAC-SHA-256 (RFC 2104) with the key's padded blocks absorbed once: the
 * inner and outer SHA-256 states after K0 ^ ipad and K0 ^ opad, kept for
 * the last key used.  Each MAC then copies them.  They are SHA256_CTX
 * values (OpenSSL's low-level interface, deprecated in 3.0 but kept):
 * copying an EVP_MD_CTX of a provider's digest allocates and frees a
 * context each time, and a snapshot fingerprints every row it copies --
 * with EVP, the calls around the two hashes cost as much as the hashes.
 */
#define HMAC_BLOCK	64

static SHA256_CTX hmac_inner;
static SHA256_CTX hmac_outer;
static uint8 *hmac_key = NULL;	/* the key the states are of */
static int	hmac_key_len = -1;

/*
 * The key copy and the states derived from it, wiped with the keyring
 * (forget_keys) and whenever they are rebuilt.
 */
static void
forget_hmac_states(void)
{
	if (hmac_key != NULL)
	{
		explicit_bzero(hmac_key, hmac_key_len);
		pfree(hmac_key);
	}
	hmac_key = NULL;
	hmac_key_len = -1;
	explicit_bzero(&hmac_inner, sizeof(hmac_inner));
	explicit_bzero(&hmac_outer, sizeof(hmac_outer));
}

static void
hmac_failed(void)
{
	/* the states may be half built: built again next time */
	forget_hmac_states();
	ereport(ERROR,
			(errcode(ERRCODE_INTERNAL_ERROR),
			 errmsg("ash_replicant: HMAC-SHA-256 failed in OpenSSL")));
}

/* The inner and outer states of key (when not those of the last key). */
static void
hmac_prepare(const AshKey *key)
{
	uint8		k0[HMAC_BLOCK];
	uint8		pad[HMAC_BLOCK];
	bool		ok = true;

	/*
	 * Not a constant-time comparison: both sides are this process's key
	 * material, nothing a caller chose, so how long it takes tells nobody
	 * anything; it runs for every row a snapshot fingerprints.
	 */
	if (hmac_key != NULL && hmac_key_len == key->len &&
		memcmp(hmac_key, key->bytes, key->len) == 0)
		return;
	forget_hmac_states();
	ash_keyring_on_reset(forget_keys);

	/* K0: the key, or its digest when longer than a block; zero-padded */
	memset(k0, 0, sizeof(k0));
	if (key->len > HMAC_BLOCK)
		ok = SHA256((const unsigned char *) key->bytes, key->len, k0) != NULL;
	else
		memcpy(k0, key->bytes, key->len);
	for (int i = 0; i < HMAC_BLOCK; i++)
		pad[i] = k0[i] ^ 0x36;
	ok = ok && SHA256_Init(&hmac_inner) == 1 && SHA256_Update(&hmac_inner, pad, HMAC_BLOCK) == 1;
	for (int i = 0; i < HMAC_BLOCK; i++)
		pad[i] = k0[i] ^ 0x5c;
	ok = ok && SHA256_Init(&hmac_outer) == 1 && SHA256_Update(&hmac_outer, pad, HMAC_BLOCK) == 1;
	explicit_bzero(k0, sizeof(k0));
	explicit_bzero(pad, sizeof(pad));
	if (!ok)
		hmac_failed();
	hmac_key = MemoryContextAlloc(TopMemoryContext, Max(key->len, 1));
	memcpy(hmac_key, key->bytes, key->len);
	hmac_key_len = key->len;
}

void
ash_hmac_sha256(const AshKey *key, const char *data, int len,
				uint8 out[ASH_HMAC_SHA256_LEN])
{
	uint8		inner[ASH_HMAC_SHA256_LEN];
	SHA256_CTX	work;
	bool		ok;

	if (key == NULL || key->bytes == NULL || key->len <= 0 || len < 0)
		elog(ERROR, "ash_replicant: HMAC needs a key and data");
	hmac_prepare(key);
	work = hmac_inner;
	ok = (len == 0 || SHA256_Update(&work, data, (size_t) len) == 1) &&
		SHA256_Final(inner, &work) == 1;
	work = hmac_outer;
	ok = ok && SHA256_Update(&work, inner, sizeof(inner)) == 1 &&
		SHA256_Final(out, &work) == 1;
	explicit_bzero(inner, sizeof(inner));
	explicit_bzero(&work, sizeof(work));
	if (!ok)
		hmac_failed();
}

bool
ash_digest_equal(const uint8 *a, const uint8 *b, size_t len)
{
	return CRYPTO_memcmp(a, b, len) == 0;
}
