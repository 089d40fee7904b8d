/*-------------------------------------------------------------------------
 *
 * crypto.h
 *	  Column encryption (AES-256-GCM) and HMAC-SHA-256 over keyring keys.
 *
 * NOTES
 *	  Ciphertext format 1 (bytea, big-endian integers):
 *
 *		offset  len  field
 *		     0    1  format version = 1
 *		     1    4  key version (column_encryption family), > 0
 *		     5   12  nonce (random, 96 bits)
 *		    17    n  ciphertext (n = plaintext length)
 *		17 + n   16  GCM tag
 *
 *	  Additional authenticated data = the 5 header bytes followed by the
 *	  binding string  "schema"."table"."column"  -- each part of the
 *	  DESTINATION column always double-quoted, embedded double quotes
 *	  doubled, no other escaping, in the database encoding.  A value copied
 *	  to another column or table, or with a changed header, fails the tag.
 *
 *	  Crypto knows nothing of catalogs: callers pass the names.  Failures
 *	  are value-free and fail closed: a ciphertext_invalid or
 *	  keyring_version_missing rejection (a halt in a background worker).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CRYPTO_H
#define ASH_CRYPTO_H

#include "keyring.h"

#define ASH_CIPHER_FORMAT_V1	1
#define ASH_CIPHER_HEADER_LEN	5
#define ASH_CIPHER_NONCE_LEN	12
#define ASH_CIPHER_TAG_LEN		16
#define ASH_CIPHER_OVERHEAD		(ASH_CIPHER_HEADER_LEN + ASH_CIPHER_NONCE_LEN + ASH_CIPHER_TAG_LEN)

#define ASH_HMAC_SHA256_LEN		32

/*
 * Encrypt len bytes of plaintext for the destination column
 * schema.table.column with the active column_encryption key.  Refuses
 * with keyring_missing_family when that family has no key.
 */
extern bytea *ash_encrypt_column(const char *schema, const char *table,
								 const char *column, const char *plaintext,
								 int len);

/*
 * The column_encryption versions ash_encrypt_column used since the last
 * forget: at the end of a transaction that encrypted, each must still be
 * in the keyring (re-read now), or the transaction would commit values no
 * key opens -- halts keyring_version_missing (a restart applies it again
 * with the active version).  Forget at the start of each transaction.
 */
extern void ash_encrypt_versions_forget(void);
extern void ash_encrypt_versions_check(void);

/*
 * Decrypt a format-1 value bound to schema.table.column.  Returns a
 * palloc'd, NUL-terminated buffer of *len bytes (the plaintext may itself
 * contain NULs).  value may have a short header, not a compressed or
 * external one (detoast first).  shown names the column in errors: the
 * caller's choice, since a tenant's table lives in a schema the tenant
 * names.
 */
extern char *ash_decrypt_column(const char *schema, const char *table,
								const char *column, const char *shown,
								const bytea *value, int *len);

/* The binding string "schema"."table"."column" (palloc'd). */
extern char *ash_crypto_binding(const char *schema, const char *table,
								const char *column);

/* HMAC-SHA-256 of data under key. */
extern void ash_hmac_sha256(const AshKey *key, const char *data, int len,
							uint8 out[ASH_HMAC_SHA256_LEN]);

/* Constant-time equality of two digests. */
extern bool ash_digest_equal(const uint8 *a, const uint8 *b, size_t len);

#endif							/* ASH_CRYPTO_H */
