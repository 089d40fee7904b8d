/*-------------------------------------------------------------------------
 *
 * api_crypto.c
 *	  SQL surface of the keyring and column encryption.
 *
 * NOTES
 *	  ash_replicant_decrypt(value, target, column_name) decrypts one value
 *	  of an extension-encrypted column.  It is SECURITY DEFINER (it reads
 *	  ash_replicant.resources) with EXECUTE granted to ash_replicant_decrypt
 *	  only.  It refuses any binding that the extension does not itself
 *	  encrypt into (decrypt_binding_invalid): the column must exist on the
 *	  target and be the destination of an `encrypted` source column of a
 *	  mapping of that target -- through column_map, or by name when
 *	  column_map does not list it.  Under context tenancy the rows live in
 *	  per-tenant tables of the template's name, so a table of the same name
 *	  as a context-tenancy target also qualifies.  The binding passed to
 *	  the cipher is the table's actual schema, table and column name, so a
 *	  value only decrypts where it was written.
 *
 *	  ash_replicant_keyring_status() reports, per family, the active
 *	  version and the versions present -- never a key, never the path.
 *
 *	  Test-only, superuser-only (also checked here), EXECUTE revoked from
 *	  PUBLIC and granted to nobody: ash_replicant._encrypt_for_test (the
 *	  encryption the apply path performs, for round-trip tests) and
 *	  ash_replicant._crypto_selftest (RFC 4231 vectors for the HMAC helper).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "crypto.h"
#include "errors.h"
#include "keyring.h"

PG_FUNCTION_INFO_V1(ash_replicant_decrypt);
PG_FUNCTION_INFO_V1(ash_replicant_keyring_status);
PG_FUNCTION_INFO_V1(ash_replicant_encrypt_for_test);
PG_FUNCTION_INFO_V1(ash_replicant_crypto_selftest);

#define STAGE_DECRYPT	"decrypt"

static char *
qrel(Oid nspid, const char *relname)
{
	return psprintf("%s.%s", ash_quoted_name(get_namespace_name(nspid)), ash_quoted_name(relname));
}

/*
 * Resolve (target, column) to the names of the cipher binding, refusing
 * unless the column is an extension-encrypted destination column.  *shown
 * names the column for errors: schema-qualified when the table is a
 * mapping's target, else by its table's name alone -- a tenant's table
 * under context tenancy lives in a schema the tenant value names.
 */
static void
resolve_binding(Oid relid, const char *column, const char *stage,
				char **schema, char **table, char **shown)
{
	char	   *relname = get_rel_name(relid);
	Oid			nspid;
	AttrNumber	attnum;
	Oid			argtypes[3] = {OIDOID, TEXTOID, TEXTOID};
	Datum		values[3];
	int			ret;
	bool		isnull;
	bool		direct;
	bool		found;
	char	   *where;

	if (relname == NULL)
		ash_reject(ERRCODE_UNDEFINED_TABLE, stage, "decrypt_binding_invalid",
				   "target table does not exist");
	nspid = get_rel_namespace(relid);

	values[0] = ObjectIdGetDatum(relid);
	values[1] = CStringGetTextDatum(column);
	values[2] = CStringGetTextDatum(relname);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	ret = SPI_execute_with_args(
		"SELECT pg_catalog.bool_or(r.target::pg_catalog.oid OPERATOR(pg_catalog.=) $1),"
		"       pg_catalog.bool_or(EXISTS ("
		"         SELECT 1 FROM pg_catalog.unnest(r.encrypted) AS e(source_column)"
		"          WHERE COALESCE(r.column_map OPERATOR(pg_catalog.->>) e.source_column,"
		"                         e.source_column) OPERATOR(pg_catalog.=) $2))"
		"  FROM ash_replicant.resources r"
		" WHERE r.target::pg_catalog.oid OPERATOR(pg_catalog.=) $1"
		"    OR (r.tenant_strategy OPERATOR(pg_catalog.=) 'context'"
		"        AND (SELECT c.relname::pg_catalog.text FROM pg_catalog.pg_class c"
		"              WHERE c.oid OPERATOR(pg_catalog.=) r.target::pg_catalog.oid)"
		"            OPERATOR(pg_catalog.=) $3)",
		3, argtypes, values, NULL, true, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "ash_replicant: could not read mappings");
	direct = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	direct = direct && !isnull;
	found = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	found = found && !isnull;
	SPI_finish();

	where = direct ? psprintf("target %s", qrel(nspid, relname)) :
		psprintf("table %s", ash_quoted_name(relname));
	attnum = get_attnum(relid, column);
	if (attnum == InvalidAttrNumber || attnum < 0)
		ash_reject(ERRCODE_UNDEFINED_COLUMN, stage, "decrypt_binding_invalid",
				   "column %s does not exist on %s", ash_quoted_name(column), where);
	if (!found)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, "decrypt_binding_invalid",
				   "column %s of %s is not an encrypted column of any mapping",
				   ash_quoted_name(column), where);

	*schema = get_namespace_name(nspid);
	*table = relname;
	*shown = direct ? ash_crypto_binding(*schema, relname, column) :
		psprintf("%s of table %s", ash_quoted_name(column), ash_quoted_name(relname));
}

/*
 * ash_replicant_decrypt(value bytea, target regclass, column_name text)
 * RETURNS text
 */
Datum
ash_replicant_decrypt(PG_FUNCTION_ARGS)
{
	bytea	   *value = PG_GETARG_BYTEA_PP(0);
	Oid			relid = PG_GETARG_OID(1);
	char	   *column = text_to_cstring(PG_GETARG_TEXT_PP(2));
	char	   *schema;
	char	   *table;
	char	   *shown;
	char	   *plain;
	int			len;
	text	   *result;

	ash_keyring_load();
	resolve_binding(relid, column, STAGE_DECRYPT, &schema, &table, &shown);
	plain = ash_decrypt_column(schema, table, column, shown, value, &len);
	if (!pg_verifymbstr(plain, len, true))
	{
		explicit_bzero(plain, len);
		ash_reject(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE, STAGE_DECRYPT, "ciphertext_invalid",
				   "the plaintext of column %s is not valid text in the database encoding",
				   shown);
	}
	result = cstring_to_text_with_len(plain, len);
	explicit_bzero(plain, len);
	pfree(plain);
	PG_RETURN_TEXT_P(result);
}

/*
 * ash_replicant_keyring_status()
 * RETURNS TABLE (family text, active_version int, versions int[])
 *
 * One row per known family, configured or not.
 */
Datum
ash_replicant_keyring_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	ash_keyring_load();

	for (int f = 0; f < ASH_KEY_FAMILY_COUNT; f++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};
		int32	   *versions;
		int			n = ash_keyring_versions(ash_key_families[f], &versions);
		Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

		for (int i = 0; i < n; i++)
			elems[i] = Int32GetDatum(versions[i]);
		values[0] = CStringGetTextDatum(ash_key_families[f]);
		if (n > 0)
			values[1] = Int32GetDatum(versions[n - 1]);
		else
			nulls[1] = true;
		values[2] = PointerGetDatum(construct_array(elems, n, INT4OID, sizeof(int32),
													true, TYPALIGN_INT));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* Refuse non-superusers (the test functions are also revoked). */
static void
require_superuser(const char *what)
{
	if (!superuser())
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("ash_replicant: %s is test-only and requires superuser", what)));
}

/*
 * ash_replicant._encrypt_for_test(plaintext text, target regclass,
 *								   column_name text) RETURNS bytea
 *
 * TEST-ONLY: encrypts as the apply path does, for an encrypted column of a
 * mapping (same binding rules as ash_replicant_decrypt).
 */
Datum
ash_replicant_encrypt_for_test(PG_FUNCTION_ARGS)
{
	text	   *plain = PG_GETARG_TEXT_PP(0);
	Oid			relid = PG_GETARG_OID(1);
	char	   *column = text_to_cstring(PG_GETARG_TEXT_PP(2));
	char	   *schema;
	char	   *table;
	char	   *shown;

	require_superuser("ash_replicant._encrypt_for_test");
	ash_keyring_load();
	resolve_binding(relid, column, "encrypt", &schema, &table, &shown);
	PG_RETURN_BYTEA_P(ash_encrypt_column(schema, table, column,
										 VARDATA_ANY(plain), VARSIZE_ANY_EXHDR(plain)));
}

/*
 * ash_replicant._crypto_selftest() RETURNS TABLE (test text, passed boolean)
 *
 * TEST-ONLY: known-answer tests of ash_hmac_sha256 (RFC 4231 cases 1, 2, 6)
 * and of ash_digest_equal.
 */
typedef struct HmacVector
{
	const char *name;
	const char *key_hex;
	const char *data;
	int			data_len;
	const char *mac_hex;
} HmacVector;

static const HmacVector hmac_vectors[] = {
	{"hmac_sha256_rfc4231_case1",
		"0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b",
		"Hi There", 8,
	"b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
	{"hmac_sha256_rfc4231_case2",
		"4a656665",
		"what do ya want for nothing?", 28,
	"5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
	{"hmac_sha256_rfc4231_case6",
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"Test Using Larger Than Block-Size Key - Hash Key First", 54,
	"60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
};

static int
unhex(const char *hex, uint8 *out, int cap)
{
	int			n = strlen(hex) / 2;

	if (n > cap)
		elog(ERROR, "bad test vector");
	for (int i = 0; i < n; i++)
	{
		unsigned int b;

		if (sscanf(hex + 2 * i, "%2x", &b) != 1)
			elog(ERROR, "bad test vector");
		out[i] = (uint8) b;
	}
	return n;
}

Datum
ash_replicant_crypto_selftest(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	require_superuser("ash_replicant._crypto_selftest");
	InitMaterializedSRF(fcinfo, 0);

	for (int i = 0; i < lengthof(hmac_vectors); i++)
	{
		const HmacVector *v = &hmac_vectors[i];
		uint8		keybuf[256];
		uint8		expect[ASH_HMAC_SHA256_LEN];
		uint8		mac[ASH_HMAC_SHA256_LEN];
		AshKey		key;
		Datum		values[2];
		bool		nulls[2] = {false, false};

		key.family = ASH_KEYS_MESSAGE_DIGEST;
		key.version = 1;
		key.len = unhex(v->key_hex, keybuf, sizeof(keybuf));
		key.bytes = keybuf;
		unhex(v->mac_hex, expect, sizeof(expect));
		ash_hmac_sha256(&key, v->data, v->data_len, mac);
		values[0] = CStringGetTextDatum(v->name);
		values[1] = BoolGetDatum(ash_digest_equal(mac, expect, sizeof(mac)));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);

		/* a one-bit change must be noticed */
		if (i == 0)
		{
			mac[31] ^= 1;
			values[0] = CStringGetTextDatum("digest_equal_detects_one_bit");
			values[1] = BoolGetDatum(!ash_digest_equal(mac, expect, sizeof(mac)));
			tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
		}
	}
	return (Datum) 0;
}
