/*-------------------------------------------------------------------------
 *
 * provenance.c
 *	  Snapshot provenance: fingerprints, seen-marks and retirement.
 *
 * NOTES
 *	  A mapping with snapshot_provenance => true lets a snapshot tell apart
 *	  the rows its target already holds unchanged, the rows it must write,
 *	  and the rows the source no longer has (docs/snapshots.md):
 *
 *	  - each copied row's fingerprint is HMAC-SHA-256 of the values given
 *		to the write (every mapped target column: NULL, or its type's send
 *		format; the plaintext of an encrypted column, whose ciphertext
 *		differs at every write), tagged with a format byte and the key
 *		version: replica_fingerprint.  Format 2 keys the HMAC per target
 *		shape -- a key derived from the active key of family
 *		snapshot_provenance and the columns' names and kinds -- so a row's
 *		message holds only its values, and keeps the first 16 bytes of the
 *		MAC: fewer hash blocks per row, and 16 bytes less in every target
 *		row.  Format 1 (earlier builds: the names in every row's message,
 *		the whole MAC) is still compared, by computing it for the row;
 *	  - a target row with the same fingerprint (the open version under
 *		SCD2) -- or, without an encrypted column, whose stored values
 *		fingerprint the same (a row the stream wrote has none, or an old
 *		one) -- is not written: no host effect, no trigger; a new or
 *		different row is written by the mapping's strategy as any insert;
 *		either way the row is stamped with its fingerprint and the attempt
 *		(replica_seen_attempt): with the write itself where the strategy
 *		can (SCD1: the two columns are part of the insert or upsert, one
 *		row version), else by an UPDATE run with
 *		session_replication_role = replica, so ordinary triggers do not
 *		fire for the stamp;
 *	  - the stored fingerprints are probed, and the remaining stamps
 *		written, one statement per group of rows of a target (arrays of
 *		keys), not per row;
 *	  - in the transaction that copies a table, once its rows are written,
 *		the rows of its target whose seen-mark is not this attempt are
 *		retired: deleted under SCD1, closed under SCD2 -- rows the source
 *		lacks at the table's snapshot.  A snapshot (v1) streams nothing
 *		while it copies, so no streamed row can be mistaken for unseen; an
 *		incremental snapshot streams while it copies, so every row the
 *		stream writes to a table being copied is marked seen (with no
 *		fingerprint) before the table's last chunk retires the rest.
 *
 *	  The attempt recorded on the checkpoint is authenticated with the
 *	  same key family (snapshot_state), so a hand-edited attempt cannot
 *	  retire rows.  A fingerprint or state naming a key version the keyring
 *	  lacks fails closed (keyring_version_missing), never "changed".
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "crypto.h"
#include "errors.h"
#include "keyring.h"
#include "owner_scope.h"
#include "provenance.h"
#include "spi_util.h"

#define STATE_FORMAT		1	/* the attempt's state */
#define FP_FORMAT_1			1	/* fingerprints of earlier builds */
#define FP_FORMAT_2			2	/* fingerprints written now */
#define STAMP_QUEUE_MAX		1000
#define PROBE_BATCH_MAX		1000
#define FP_BUFFER_KEEP		(64 * 1024)	/* a fingerprint's message buffer kept */

/* Plans and send functions of one target (rel's shape at first use). */
typedef struct ProvTarget
{
	MemoryContext cxt;			/* all of it but the plans */
	Oid			relid;
	AshApplyRel *rel;			/* the resolution the plans were made for */
	AshTargetCol *cols;
	bool		scd2;
	bool		by_content;		/* no encrypted column: a row stored without
								 * a fingerprint is fingerprinted from its
								 * stored values (the probes return them) */
	int			nkeyparams;
	SPIPlanPtr	probe;			/* the stored fingerprint of a key */
	SPIPlanPtr	probe_many;		/* ordinal and fingerprint of arrays of keys;
								 * NULL when a key type has no array type */
	SPIPlanPtr	stamp;			/* fingerprint + attempt of a key */
	SPIPlanPtr	stamp_many;		/* the same for arrays of keys; NULL when a
								 * key type has no array type */
	Oid		   *keytypes;		/* per key parameter */
	int16	   *keylen;
	bool	   *keybyval;
	char	   *keyalign;
	FmgrInfo   *send;			/* per column; fn_oid InvalidOid: output */
	uint8	   *kind;			/* per column: FpKind */
	char	  **head;			/* per column: its name's length and bytes */
	int		   *headlen;
	StringInfoData fp;			/* the fingerprint's message, built per row */
	bool		tkey_valid;		/* format 2: the target's key, derived ... */
	int32		tkey_version;	/* ... from this version of the family */
	uint8		tkey[ASH_HMAC_SHA256_LEN];
} ProvTarget;

/*
 * How a column's value goes into a fingerprint: the bytes its send
 * function would write, put directly for the commonest built-in types
 * (put_value), else by calling it.
 */
typedef enum FpKind
{
	FP_CALL,					/* the send function */
	FP_TEXT,					/* text, varchar, bpchar: pq_sendtext */
	FP_BYTEA,
	FP_INT2,
	FP_INT4,					/* int4, date */
	FP_OID,
	FP_INT8,					/* int8, timestamp, timestamptz */
	FP_NUMERIC,
	FP_PLAIN					/* an encrypted column: its plaintext */
} FpKind;

/*
 * A snapshot row waiting for its probe (a deep copy: the change's memory
 * is reset after it).
 */
typedef struct Pending
{
	AshApplyRel *rel;
	AshApplyTarget *tgt;
	const AshApplyStrategy *strategy;
	AshRowImage row;
	bytea	   *fp;
	bytea	   *attempt;
	Datum	   *values;			/* key params */
	char	   *nulls;
	int			n;
} Pending;

/* A queued stamp. */
typedef struct Stamp
{
	ProvTarget *pt;
	Datum	   *values;			/* key params, fingerprint, attempt */
	char	   *nulls;
	bool		streamed;		/* a streamed row: it may be gone by the flush */
} Stamp;

static uint8 value_kind(Oid sendfn);
static void stamp_singly(List *group);
static bool stamp_group(ProvTarget *pt, List *group, bool streamed);
static void queue_stamp(ProvTarget *pt, AshApplyRel *rel, Datum *values, char *nulls, int n,
						bytea *fp, const bytea *attempt, bool streamed);

static Oid	unfingerprinted = InvalidOid;	/* a target no probe can match */

static MemoryContext prov_cxt = NULL;	/* plans, send functions */
static MemoryContext queue_cxt = NULL;	/* stamps until flushed */
static MemoryContext pending_cxt = NULL;	/* rows until probed */
static List *targets = NIL;
static List *retired = NIL;		/* replaced targets, freed once nothing
								 * queued or pending can point at them */
static List *queue = NIL;
static List *pending = NIL;		/* Pending *, all of pending_pt */
static ProvTarget *pending_pt = NULL;

bool
ash_provenance_in_use(AshPipelineConfig *cfg)
{
	ListCell   *lc;

	foreach(lc, cfg->mappings)
		if (((AshMapping *) lfirst(lc))->snapshot_provenance)
			return true;
	return false;
}

static void
ensure_contexts(void)
{
	if (prov_cxt == NULL)
	{
		prov_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant provenance",
										 ALLOCSET_SMALL_SIZES);
		queue_cxt = AllocSetContextCreate(prov_cxt, "ash_replicant provenance stamps",
										  ALLOCSET_DEFAULT_SIZES);
		pending_cxt = AllocSetContextCreate(prov_cxt, "ash_replicant provenance probes",
											ALLOCSET_DEFAULT_SIZES);
	}
}

static const AshKey *
active_key(void)
{
	const AshKey *key = ash_keyring_active(ASH_KEYS_SNAPSHOT_PROVENANCE);

	if (key == NULL)
		ash_halt("keyring_missing_family", "family %s", ASH_KEYS_SNAPSHOT_PROVENANCE);
	return key;
}

/* v big-endian at p[0..3] */
static inline void
put_uint32_at(char *p, uint32 v)
{
	p[0] = (char) (v >> 24);
	p[1] = (char) (v >> 16);
	p[2] = (char) (v >> 8);
	p[3] = (char) v;
}

static void
put_uint32(StringInfo buf, uint32 v)
{
	char		b[4];

	put_uint32_at(b, v);
	appendBinaryStringInfo(buf, b, 4);
}

static void
put_bytes(StringInfo buf, const char *data, int len)
{
	put_uint32(buf, (uint32) len);
	appendBinaryStringInfo(buf, data, len);
}

/*
 * Format byte, the family's key version, the first maclen bytes of the
 * HMAC of data with key (that version's key, or one derived from it).
 */
static bytea *
tagged_mac(uint8 format, int32 version, const AshKey *key, const char *data, int len,
		   int maclen)
{
	bytea	   *out = palloc(VARHDRSZ + ASH_PROVENANCE_TAG_BYTES + maclen);
	uint8	   *p = (uint8 *) VARDATA(out);
	uint8		mac[ASH_HMAC_SHA256_LEN];

	Assert(maclen <= ASH_HMAC_SHA256_LEN);
	SET_VARSIZE(out, VARHDRSZ + ASH_PROVENANCE_TAG_BYTES + maclen);
	p[0] = format;
	p[1] = (uint8) ((uint32) version >> 24);
	p[2] = (uint8) ((uint32) version >> 16);
	p[3] = (uint8) ((uint32) version >> 8);
	p[4] = (uint8) version;
	ash_hmac_sha256(key, data, len, mac);
	memcpy(p + ASH_PROVENANCE_TAG_BYTES, mac, maclen);
	return out;
}

/* The key version a tagged MAC names, or -1 when it is not one. */
static int32
tagged_version(const bytea *mac)
{
	const uint8 *p = (const uint8 *) VARDATA_ANY(mac);

	if (VARSIZE_ANY_EXHDR(mac) != ASH_PROVENANCE_BYTES || p[0] != STATE_FORMAT)
		return -1;
	return (int32) (((uint32) p[1] << 24) | ((uint32) p[2] << 16) | ((uint32) p[3] << 8) | p[4]);
}

/* ---------------------------------------------------------------------
 * The attempt's state.
 * ---------------------------------------------------------------------
 */
static void
state_message(StringInfo buf, const AshCheckpointKey *key, const bytea *attempt,
			  XLogRecPtr start_lsn)
{
	initStringInfo(buf);
	put_bytes(buf, "ash_replicant snapshot_state", 28);
	put_bytes(buf, key->system_id, strlen(key->system_id));
	put_bytes(buf, key->database, strlen(key->database));
	put_bytes(buf, key->slot_name, strlen(key->slot_name));
	put_bytes(buf, VARDATA_ANY(attempt), VARSIZE_ANY_EXHDR(attempt));
	put_uint32(buf, (uint32) (start_lsn >> 32));
	put_uint32(buf, (uint32) start_lsn);
}

bytea *
ash_provenance_sign_state(const AshCheckpointKey *key, const bytea *attempt, XLogRecPtr start_lsn)
{
	StringInfoData buf;
	const AshKey *k;

	ash_keyring_load();
	state_message(&buf, key, attempt, start_lsn);
	k = active_key();
	return tagged_mac(STATE_FORMAT, k->version, k, buf.data, buf.len, ASH_HMAC_SHA256_LEN);
}

void
ash_provenance_verify_state(const AshCheckpointKey *key, const bytea *attempt,
							XLogRecPtr start_lsn, const bytea *state)
{
	StringInfoData buf;
	int32		version;
	const AshKey *k;
	bytea	   *expected;

	ash_keyring_load();
	version = state == NULL ? -1 : tagged_version(state);
	if (version <= 0)
		ash_halt("snapshot_state_invalid", "the snapshot attempt's state is missing or malformed");
	k = ash_keyring_get(ASH_KEYS_SNAPSHOT_PROVENANCE, version);
	if (k == NULL)
		ash_halt("keyring_version_missing", "family %s lacks the version the snapshot state names",
				 ASH_KEYS_SNAPSHOT_PROVENANCE);
	state_message(&buf, key, attempt, start_lsn);
	expected = tagged_mac(STATE_FORMAT, k->version, k, buf.data, buf.len, ASH_HMAC_SHA256_LEN);
	if (!ash_digest_equal((const uint8 *) VARDATA(expected), (const uint8 *) VARDATA_ANY(state),
						  ASH_PROVENANCE_BYTES))
		ash_halt("snapshot_state_invalid", "the snapshot attempt's state does not authenticate");
}

/* ---------------------------------------------------------------------
 * Copy: fingerprint, probe, stamp.
 * ---------------------------------------------------------------------
 */
static bool
is_scd2(AshMapping *m)
{
	return m->history_strategy != NULL && strcmp(m->history_strategy, "scd2") == 0;
}

/*
 * "t.key1 = u.k1 AND ..." over the key (and tenant) columns, and the open
 * version only under SCD2: how the batched stamp and probe statements
 * match their unnested keys.
 */
static void
append_key_match(StringInfo sql, AshApplyRel *rel, ProvTarget *pt)
{
	for (int i = 0; i < pt->nkeyparams; i++)
	{
		int			c = i < rel->nkeys ? rel->keys[i] : rel->tenant_col;

		appendStringInfo(sql, "%st.%s OPERATOR(pg_catalog.=) u.k%d", i ? " AND " : "",
						 quote_identifier(rel->cols[c].name), i + 1);
	}
	if (pt->scd2)
		appendStringInfo(sql, " AND t.%s IS NULL",
						 quote_identifier(rel->map->history_valid_to_lsn_column));
}

/*
 * Copies of a row's key (and tenant) parameters into the current memory
 * context, with room after them for the fingerprint and the attempt.
 */
static void
copy_key_params(AshApplyRel *rel, Datum *values, char *nulls, int n,
				Datum **values_out, char **nulls_out)
{
	Datum	   *v = palloc(sizeof(Datum) * (n + 2));
	char	   *nl = palloc(n + 3);

	for (int i = 0; i < n; i++)
	{
		int			c = i < rel->nkeys ? rel->keys[i] : rel->tenant_col;

		v[i] = nulls[i] == 'n' ? (Datum) 0 :
			datumCopy(values[i], rel->cols[c].typbyval, rel->cols[c].typlen);
		nl[i] = nulls[i];
	}
	*values_out = v;
	*nulls_out = nl;
}

/*
 * Parameter p of a batched statement as an array of nrows values: a key
 * (or tenant) column's type, else other (the ordinals, or the fingerprints
 * and attempts).
 */
static Datum
param_array(ProvTarget *pt, int p, Datum *v, bool *nl, int nrows, Oid other)
{
	int			lb = 1;
	int16		len;
	bool		byval;
	char		align;

	if (p < pt->nkeyparams)
		return PointerGetDatum(construct_md_array(v, nl, 1, &nrows, &lb, pt->keytypes[p],
												  pt->keylen[p], pt->keybyval[p],
												  pt->keyalign[p]));
	get_typlenbyvalalign(other, &len, &byval, &align);
	return PointerGetDatum(construct_md_array(v, nl, 1, &nrows, &lb, other, len, byval, align));
}

static ProvTarget *
target_of(AshApplyRel *rel, AshApplyTarget *tgt)
{
	ListCell   *lc;
	ProvTarget *pt;
	MemoryContext old;
	StringInfoData where;
	StringInfoData sql;
	StringInfoData cols;
	Oid		   *types;
	int			next;

	ensure_contexts();
	foreach(lc, targets)
	{
		pt = lfirst(lc);
		if (pt->relid == tgt->relid && pt->rel == rel && pt->cols == rel->cols)
			return pt;
		if (pt->relid == tgt->relid)
		{
			/* a new resolution of the relation: plans again */
			explicit_bzero(pt->tkey, sizeof(pt->tkey));
			old = MemoryContextSwitchTo(prov_cxt);
			retired = lappend(retired, pt);
			MemoryContextSwitchTo(old);
			targets = foreach_delete_current(targets, lc);
			break;
		}
	}

	{
		MemoryContext cxt = AllocSetContextCreate(prov_cxt, "ash_replicant provenance target",
												  ALLOCSET_SMALL_SIZES);

		old = MemoryContextSwitchTo(cxt);
		pt = palloc0(sizeof(ProvTarget));
		pt->cxt = cxt;
	}
	pt->relid = tgt->relid;
	pt->rel = rel;
	pt->cols = rel->cols;
	pt->scd2 = is_scd2(rel->map);
	pt->send = palloc0(sizeof(FmgrInfo) * Max(rel->ncols, 1));
	pt->kind = palloc(sizeof(uint8) * Max(rel->ncols, 1));
	pt->head = palloc(sizeof(char *) * Max(rel->ncols, 1));
	pt->headlen = palloc(sizeof(int) * Max(rel->ncols, 1));
	for (int c = 0; c < rel->ncols; c++)
	{
		Oid			sendfn;
		bool		varlena;
		int			len = strlen(rel->cols[c].name);

		pt->headlen[c] = 4 + len;
		pt->head[c] = palloc(4 + len);
		put_uint32_at(pt->head[c], (uint32) len);
		memcpy(pt->head[c] + 4, rel->cols[c].name, len);
		if (rel->cols[c].encrypt)
		{
			pt->kind[c] = FP_PLAIN; /* its plaintext is fingerprinted */
			continue;
		}
		getTypeBinaryOutputInfo(rel->cols[c].typid, &sendfn, &varlena);
		fmgr_info_cxt(sendfn, &pt->send[c], pt->cxt);
		pt->kind[c] = value_kind(sendfn);
	}
	initStringInfo(&pt->fp);
	MemoryContextSwitchTo(old);
	pt->by_content = true;
	for (int c = 0; c < rel->ncols; c++)
		pt->by_content &= pt->kind[c] != FP_PLAIN;
	initStringInfo(&cols);
	if (pt->by_content)
		for (int c = 0; c < rel->ncols; c++)
			appendStringInfo(&cols, ", t.%s", quote_identifier(rel->cols[c].name));

	types = palloc(sizeof(Oid) * (rel->nkeys + 3));
	initStringInfo(&where);
	next = ash_append_key_predicate(&where, rel, 1, types, true);
	pt->nkeyparams = next - 1;
	if (pt->scd2)
		appendStringInfo(&where, " AND %s IS NULL",
						 quote_identifier(rel->map->history_valid_to_lsn_column));

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT t.%s%s FROM %s AS t WHERE %s",
					 ASH_PROVENANCE_FINGERPRINT_COLUMN, cols.data, tgt->name, where.data);
	pt->probe = ash_spi_prepare_kept(sql.data, pt->nkeyparams, types);

	types[next - 1] = BYTEAOID;
	types[next] = BYTEAOID;
	resetStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s SET %s = $%d, %s = $%d WHERE %s", tgt->name,
					 ASH_PROVENANCE_FINGERPRINT_COLUMN, next,
					 ASH_PROVENANCE_SEEN_COLUMN, next + 1, where.data);
	pt->stamp = ash_spi_prepare_kept(sql.data, pt->nkeyparams + 2, types);

	/*
	 * "UPDATE t AS t SET fp = u.f, seen = u.s FROM (SELECT unnest($1) AS
	 * k1, ..., unnest($n + 1) AS f, unnest($n + 2) AS s) AS u WHERE t.key1
	 * = u.k1 AND ...": a group of stamps in one statement.
	 */
	old = MemoryContextSwitchTo(pt->cxt);
	pt->keytypes = palloc(sizeof(Oid) * Max(pt->nkeyparams, 1));
	pt->keylen = palloc(sizeof(int16) * Max(pt->nkeyparams, 1));
	pt->keybyval = palloc(sizeof(bool) * Max(pt->nkeyparams, 1));
	pt->keyalign = palloc(sizeof(char) * Max(pt->nkeyparams, 1));
	MemoryContextSwitchTo(old);
	resetStringInfo(&sql);
	appendStringInfo(&sql, "UPDATE %s AS t SET %s = u.f, %s = u.s FROM (SELECT ", tgt->name,
					 ASH_PROVENANCE_FINGERPRINT_COLUMN, ASH_PROVENANCE_SEEN_COLUMN);
	for (int i = 0; i < pt->nkeyparams; i++)
	{
		pt->keytypes[i] = types[i];
		get_typlenbyvalalign(types[i], &pt->keylen[i], &pt->keybyval[i], &pt->keyalign[i]);
		types[i] = get_array_type(types[i]);
		appendStringInfo(&sql, "pg_catalog.unnest($%d) AS k%d, ", i + 1, i + 1);
	}
	appendStringInfo(&sql, "pg_catalog.unnest($%d) AS f, pg_catalog.unnest($%d) AS s) AS u WHERE ",
					 next, next + 1);
	append_key_match(&sql, rel, pt);
	types[next - 1] = BYTEAARRAYOID;
	types[next] = BYTEAARRAYOID;
	pt->stamp_many = NULL;
	pt->probe_many = NULL;
	{
		bool		arrays = true;

		for (int i = 0; i < pt->nkeyparams; i++)
			arrays &= OidIsValid(types[i]);
		if (arrays)
		{
			pt->stamp_many = ash_spi_prepare_kept(sql.data, pt->nkeyparams + 2, types);

			/*
			 * "SELECT u.o, t.fp FROM (SELECT unnest($1) AS k1, ...,
			 * unnest($n + 1) AS o) AS u JOIN t ON t.key1 = u.k1 AND ...": the
			 * stored fingerprints of a group of keys, by their ordinals.
			 */
			resetStringInfo(&sql);
			appendStringInfoString(&sql, "SELECT u.o, t.");
			appendStringInfoString(&sql, ASH_PROVENANCE_FINGERPRINT_COLUMN);
			appendStringInfoString(&sql, cols.data);
			appendStringInfoString(&sql, " FROM (SELECT ");
			for (int i = 0; i < pt->nkeyparams; i++)
				appendStringInfo(&sql, "pg_catalog.unnest($%d) AS k%d, ", i + 1, i + 1);
			appendStringInfo(&sql, "pg_catalog.unnest($%d) AS o) AS u JOIN %s AS t ON ", next,
							 tgt->name);
			append_key_match(&sql, rel, pt);
			types[next - 1] = INT4ARRAYOID;
			pt->probe_many = ash_spi_prepare_kept(sql.data, pt->nkeyparams + 1, types);
		}
	}

	old = MemoryContextSwitchTo(prov_cxt);
	targets = lappend(targets, pt);
	MemoryContextSwitchTo(old);
	return pt;
}

/*
 * The columns whose send function's bytes put_value writes itself,
 * without the StringInfo and bytea a send call makes per value.
 * Integer-like types: pq_sendint16/32/64, big-endian.  text, varchar and
 * bpchar: pq_sendtext, the value's bytes unconverted when the client
 * encoding is the database's or SQL_ASCII (a background worker's;
 * pg_server_to_any; checked per row); bytea: its bytes; numeric: its
 * stored form's fields (put_numeric).
 */
static uint8
value_kind(Oid sendfn)
{
	switch (sendfn)
	{
		case F_TEXTSEND:
		case F_VARCHARSEND:
		case F_BPCHARSEND:
			return FP_TEXT;
		case F_BYTEASEND:
			return FP_BYTEA;
		case F_INT2SEND:
			return FP_INT2;
		case F_INT4SEND:
		case F_DATE_SEND:
			return FP_INT4;
		case F_OIDSEND:
			return FP_OID;
		case F_INT8SEND:
		case F_TIMESTAMP_SEND:
		case F_TIMESTAMPTZ_SEND:
			return FP_INT8;
		case F_NUMERIC_SEND:
			return FP_NUMERIC;
		default:
			return FP_CALL;
	}
}

/* n bytes at the end of buf, for the caller to fill. */
static inline char *
reserve(StringInfo buf, int n)
{
	char	   *p;

	if (buf->len + n >= buf->maxlen)
		enlargeStringInfo(buf, n);
	p = buf->data + buf->len;
	buf->len += n;
	return p;
}

/*
 * A value's length before its bytes: a uint32, big-endian (format 1), or
 * in 7-bit groups, least significant first, the high bit set on all but
 * the last (format 2: one byte below 128).
 */
static inline int
len_bytes(uint32 len, bool v2)
{
	if (!v2)
		return 4;
	return len < (1U << 7) ? 1 : len < (1U << 14) ? 2 : len < (1U << 21) ? 3 :
		len < (1U << 28) ? 4 : 5;
}

/* len at p (in len_bytes(len, v2) bytes); returns the byte after it */
static inline char *
put_len_at(char *p, uint32 len, bool v2)
{
	if (!v2)
	{
		put_uint32_at(p, len);
		return p + 4;
	}
	while (len >= 0x80)
	{
		*p++ = (char) (len | 0x80);
		len >>= 7;
	}
	*p++ = (char) len;
	return p;
}

/* A length-prefixed byte string. */
static inline void
put_counted(StringInfo buf, const char *data, int len, bool v2)
{
	char	   *p = reserve(buf, len_bytes((uint32) len, v2) + len);

	memcpy(put_len_at(p, (uint32) len, v2), data, len);
}

/*
 * numeric_send's bytes -- ndigits, weight, sign, display scale, then each
 * base-10000 digit, every one an int16, big-endian -- read from the
 * value's stored form (numeric.c, NumericData): a 2-byte header for short
 * and special values (NaN, infinities: sign in its top four bits, the
 * rest zero), else sign and display scale, then the weight; the digits
 * after it.  The stored form is fixed within a major version, and test
 * 106 checks these bytes against the source's own numeric_send.
 */
static void
put_numeric(StringInfo buf, Datum d, bool v2)
{
	struct varlena *n = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(d));
	const char *data = VARDATA_ANY(n);
	int			size = VARSIZE_ANY_EXHDR(n);
	uint16		h;
	uint16		field[4];
	int			hdr;
	int			ndigits;
	char	   *p;

	memcpy(&h, data, sizeof(h));
	if (h & 0x8000)
	{
		/* short (10xx) or special (11xx) */
		hdr = sizeof(uint16);
		field[1] = (h & 0x0040) ? (uint16) (~0x003F | (h & 0x003F)) : (h & 0x003F);
		field[2] = (h & 0xC000) == 0xC000 ? (h & 0xF000) : (h & 0x2000) ? 0x4000 : 0;
		field[3] = (h & 0x1F80) >> 7;
	}
	else
	{
		int16		weight;

		hdr = sizeof(uint16) + sizeof(int16);
		memcpy(&weight, data + sizeof(uint16), sizeof(weight));
		field[1] = (uint16) weight;
		field[2] = h & 0xC000;
		field[3] = h & 0x3FFF;
	}
	ndigits = (size - hdr) / (int) sizeof(int16);
	field[0] = (uint16) ndigits;
	p = reserve(buf, len_bytes(8 + 2 * ndigits, v2) + 8 + 2 * ndigits);
	p = put_len_at(p, 8 + 2 * ndigits, v2);
	for (int i = 0; i < 4; i++)
	{
		*p++ = (char) (field[i] >> 8);
		*p++ = (char) field[i];
	}
	for (int i = 0; i < ndigits; i++)
	{
		int16		digit;

		memcpy(&digit, data + hdr + i * sizeof(int16), sizeof(digit));
		*p++ = (char) ((uint16) digit >> 8);
		*p++ = (char) digit;
	}
}

/* The value of a column of kind FP_TEXT .. FP_NUMERIC: false if not put. */
static inline bool
put_value(StringInfo buf, uint8 kind, Datum d, bool text_as_is, bool v2)
{
	uint64		v;
	int			len;
	char	   *p;

	switch (kind)
	{
		case FP_TEXT:
			if (!text_as_is)
				return false;
			/* FALLTHROUGH */
		case FP_BYTEA:
			{
				struct varlena *t = pg_detoast_datum_packed((struct varlena *) DatumGetPointer(d));

				put_counted(buf, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), v2);
				return true;
			}
		case FP_INT2:
			v = (uint16) DatumGetInt16(d);
			len = 2;
			break;
		case FP_INT4:
			v = (uint32) DatumGetInt32(d);
			len = 4;
			break;
		case FP_OID:
			v = DatumGetObjectId(d);
			len = 4;
			break;
		case FP_INT8:
			v = (uint64) DatumGetInt64(d);
			len = 8;
			break;
		case FP_NUMERIC:
			put_numeric(buf, d, v2);
			return true;
		default:
			return false;
	}
	p = put_len_at(reserve(buf, len_bytes(len, v2) + len), len, v2);
	for (int i = 0; i < len; i++)
		p[i] = (char) (v >> (8 * (len - 1 - i)));
	return true;
}

/* The family's active key, as fingerprint last found it. */
static const AshKey *fp_active = NULL;

/* Every target's format-2 key, wiped with the keyring. */
static void
forget_target_keys(void)
{
	ListCell   *lc;

	fp_active = NULL;
	foreach(lc, targets)
	{
		ProvTarget *pt = lfirst(lc);

		explicit_bzero(pt->tkey, sizeof(pt->tkey));
		pt->tkey_valid = false;
	}
}

/*
 * The key format 2 fingerprints pt's rows with: HMAC-SHA-256, with the
 * family's key, of a label and, per mapped column in order, its name
 * (after its length) and kind ('V' a value, 'P' an encrypted column's
 * plaintext) -- what format 1 hashes again in every row's message.
 * Derived once per key version (and after the keyring is reloaded).
 */
static AshKey
target_key(ProvTarget *pt, AshApplyRel *rel, const AshKey *key)
{
	AshKey		tk;

	if (!pt->tkey_valid || pt->tkey_version != key->version)
	{
		static const char label[] = "ash_replicant fingerprint 2";
		StringInfoData msg;

		ash_keyring_on_reset(forget_target_keys);
		initStringInfo(&msg);
		put_counted(&msg, label, sizeof(label) - 1, false);
		for (int c = 0; c < rel->ncols; c++)
		{
			appendBinaryStringInfo(&msg, pt->head[c], pt->headlen[c]);
			appendStringInfoChar(&msg, pt->kind[c] == FP_PLAIN ? 'P' : 'V');
		}
		ash_hmac_sha256(key, msg.data, msg.len, pt->tkey);
		pfree(msg.data);
		pt->tkey_version = key->version;
		pt->tkey_valid = true;
	}
	tk.family = key->family;
	tk.version = key->version;
	tk.len = sizeof(pt->tkey);
	tk.bytes = pt->tkey;
	return tk;
}

/*
 * The values given to the write, in the target's column order.  Format 2
 * (written): a bitmap of the NULL columns (bit c % 8 of byte c / 8), then
 * each other column's plaintext (an encrypted column) or send function's
 * bytes, after its length (len_bytes), MACed with the target's key.
 * Format 1 (compared only): for each column its name, then 'N' (NULL), 'P'
 * and the plaintext or 'V' and the send bytes, each byte string after its
 * 4-byte length, MACed with the family's key.
 */
static bytea *
fingerprint(ProvTarget *pt, AshApplyRel *rel, AshRowImage *row, uint8 format)
{
	StringInfo	buf = &pt->fp;
	bytea	   *mac;
	bool		v2 = format == FP_FORMAT_2;
	const AshKey *key;
	int			enc = pg_get_client_encoding();
	bool		text_as_is = enc == GetDatabaseEncoding() || enc == PG_SQL_ASCII;

	resetStringInfo(buf);
	if (v2)
		memset(reserve(buf, (rel->ncols + 7) / 8), 0, (rel->ncols + 7) / 8);
	for (int c = 0; c < rel->ncols; c++)
	{
		uint8		kind = pt->kind[c];

		if (!row->present[c])
			ash_halt("unchanged_value_unavailable", "a snapshot row of %s lacks a column value",
					 rel->target_name);
		if (v2 && row->nulls[c])
		{
			buf->data[c / 8] |= (char) (1 << (c % 8));
			continue;
		}
		if (!v2)
		{
			char	   *p = reserve(buf, pt->headlen[c] + 1);

			memcpy(p, pt->head[c], pt->headlen[c]);
			p[pt->headlen[c]] = row->nulls[c] ? 'N' : kind == FP_PLAIN ? 'P' : 'V';
			if (row->nulls[c])
				continue;
		}
		if (kind == FP_PLAIN)
			put_counted(buf, row->plain[c], strlen(row->plain[c]), v2);
		else if (!put_value(buf, kind, row->values[c], text_as_is, v2))
		{
			bytea	   *b = SendFunctionCall(&pt->send[c], row->values[c]);

			put_counted(buf, VARDATA(b), VARSIZE(b) - VARHDRSZ, v2);
		}
	}
	/* looked up once per keyring load (forget_target_keys forgets it) */
	if (fp_active == NULL)
	{
		ash_keyring_on_reset(forget_target_keys);
		fp_active = active_key();
	}
	key = fp_active;
	if (v2)
	{
		AshKey		tk = target_key(pt, rel, key);

		mac = tagged_mac(FP_FORMAT_2, key->version, &tk, buf->data, buf->len,
						 ASH_FINGERPRINT_BYTES - ASH_PROVENANCE_TAG_BYTES);
	}
	else
		mac = tagged_mac(FP_FORMAT_1, key->version, key, buf->data, buf->len,
						 ASH_HMAC_SHA256_LEN);

	/* kept for the next row, unless a large value grew it */
	if (buf->maxlen > FP_BUFFER_KEEP)
	{
		MemoryContext old = MemoryContextSwitchTo(pt->cxt);

		pfree(buf->data);
		initStringInfo(buf);
		MemoryContextSwitchTo(old);
	}
	return mac;
}

/*
 * Does the fingerprint stored for r's key (NULL: none) equal r's?  r->fp
 * is of format 2; one stored in format 1 (an earlier build copied the
 * row) is compared with r's of format 1, computed for it.
 */
static bool
stored_matches(ProvTarget *pt, Pending *r, bytea *stored)
{
	const uint8 *p;
	int			len;

	if (stored == NULL)
		return false;
	p = (const uint8 *) VARDATA_ANY(stored);
	len = VARSIZE_ANY_EXHDR(stored);
	if (len == ASH_FINGERPRINT_BYTES && p[0] == FP_FORMAT_2)
		return ash_digest_equal(p, (const uint8 *) VARDATA_ANY(r->fp), ASH_FINGERPRINT_BYTES);
	if (len == ASH_PROVENANCE_BYTES && p[0] == FP_FORMAT_1)
	{
		bytea	   *fp1 = fingerprint(pt, r->rel, &r->row, FP_FORMAT_1);
		bool		same = ash_digest_equal(p, (const uint8 *) VARDATA(fp1), ASH_PROVENANCE_BYTES);

		pfree(fp1);
		return same;
	}
	return false;
}

/*
 * Does the target's row, as a probe returned it (the stored fingerprint in
 * column fpcol, the mapped columns after it when pt->by_content), hold r?
 * A row whose stored fingerprint is missing or another -- written by the
 * stream (an insert or an SCD2 version carries none, an SCD1 update keeps
 * the one of the row it changed), or before the mapping had provenance --
 * is fingerprinted from its stored values: one the source has unchanged is
 * then only marked seen, not written again (under SCD2 a new version with
 * the same content would mark a change the source never made).  With an
 * encrypted column (its ciphertext differs from the plaintext
 * fingerprinted) it counts as changed.
 */
static bool
probed_matches(ProvTarget *pt, Pending *r, HeapTuple tup, TupleDesc desc, int fpcol)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, fpcol, &isnull);
	AshApplyRel *rel = r->rel;
	AshRowImage stored;
	bytea	   *fp;
	bool		same;

	if (!isnull && stored_matches(pt, r, DatumGetByteaPP(d)))
		return true;
	if (!pt->by_content || desc->natts < fpcol + rel->ncols)
		return false;
	stored.values = palloc(sizeof(Datum) * Max(rel->ncols, 1));
	stored.nulls = palloc(sizeof(bool) * Max(rel->ncols, 1));
	stored.present = palloc(sizeof(bool) * Max(rel->ncols, 1));
	stored.plain = NULL;
	stored.complete = true;
	for (int c = 0; c < rel->ncols; c++)
	{
		stored.values[c] = SPI_getbinval(tup, desc, fpcol + 1 + c, &stored.nulls[c]);
		stored.present[c] = true;
	}
	fp = fingerprint(pt, rel, &stored, FP_FORMAT_2);
	same = ash_digest_equal((const uint8 *) VARDATA_ANY(fp), (const uint8 *) VARDATA_ANY(r->fp),
							ASH_FINGERPRINT_BYTES);
	pfree(fp);
	pfree(stored.values);
	pfree(stored.nulls);
	pfree(stored.present);
	return same;
}

/*
 * A snapshot row judged: written (with its stamp, or then stamped) unless
 * unchanged, then only marked seen.
 */
static void
write_judged(ProvTarget *pt, AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *row,
			 const AshApplyStrategy *strategy, bytea *fp, bytea *attempt,
			 Datum *values, char *nulls, int n, bool unchanged)
{
	/* a row written anyway carries its stamp: no second version */
	if (!unchanged && strategy->insert_stamped != NULL &&
		strategy->insert_stamped(rel, tgt, row, PointerGetDatum(fp), PointerGetDatum(attempt)))
		return;
	if (!unchanged)
		strategy->insert(rel, tgt, row);
	queue_stamp(pt, rel, values, nulls, n, fp, attempt, false);
}

/* A deep copy of a row image, in the current memory context. */
static void
copy_image(AshApplyRel *rel, AshRowImage *from, AshRowImage *to)
{
	to->values = palloc(sizeof(Datum) * Max(rel->ncols, 1));
	to->nulls = palloc(sizeof(bool) * Max(rel->ncols, 1));
	to->present = palloc(sizeof(bool) * Max(rel->ncols, 1));
	to->plain = from->plain == NULL ? NULL : palloc0(sizeof(char *) * Max(rel->ncols, 1));
	to->complete = from->complete;
	for (int c = 0; c < rel->ncols; c++)
	{
		to->nulls[c] = from->nulls[c];
		to->present[c] = from->present[c];
		to->values[c] = !from->present[c] || from->nulls[c] ? (Datum) 0 :
			datumCopy(from->values[c], rel->cols[c].typbyval, rel->cols[c].typlen);
		if (from->plain != NULL && from->plain[c] != NULL)
			to->plain[c] = pstrdup(from->plain[c]);
	}
}

void
ash_provenance_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *row,
					  const AshApplyStrategy *strategy)
{
	ProvTarget *pt = target_of(rel, tgt);
	const AshChangeMeta *meta = ash_apply_current();
	bytea	   *fp = fingerprint(pt, rel, row, FP_FORMAT_2);
	Datum	   *values = palloc(sizeof(Datum) * (pt->nkeyparams + 2));
	char	   *nulls = palloc(pt->nkeyparams + 3);
	int			n;

	if (meta->snapshot_attempt == NULL)
		elog(ERROR, "ash_replicant: a provenance row without its snapshot attempt");

	n = ash_key_values(rel, row, values, nulls);
	nulls[n] = '\0';

	/* rows waiting for a probe of another target go first, in order */
	if (pending != NIL && pending_pt != pt)
		ash_provenance_resolve();

	/*
	 * No probe where no row can match: a target that was empty when this
	 * table's copy began in this transaction (its rows so far are this
	 * copy's, each key once), or one the caller vouches for.
	 */
	if (tgt->relid == unfingerprinted || ash_apply_fresh_target(tgt->relid))
	{
		if (pending != NIL)
			ash_provenance_resolve();
		write_judged(pt, rel, tgt, row, strategy, fp, meta->snapshot_attempt,
					 values, nulls, n, false);
	}
	else
	{
		/* probed with the rows around it: one statement per group */
		MemoryContext old = MemoryContextSwitchTo(pending_cxt);
		Pending    *p = palloc(sizeof(Pending));

		p->rel = rel;
		p->tgt = tgt;
		p->strategy = strategy;
		copy_image(rel, row, &p->row);
		p->fp = (bytea *) DatumGetPointer(datumCopy(PointerGetDatum(fp), false, -1));
		p->attempt = (bytea *) DatumGetPointer(datumCopy(PointerGetDatum(meta->snapshot_attempt),
														 false, -1));
		p->n = n;
		copy_key_params(rel, values, nulls, n, &p->values, &p->nulls);
		p->nulls[n] = '\0';
		pending = lappend(pending, p);
		pending_pt = pt;
		MemoryContextSwitchTo(old);
		if (list_length(pending) >= PROBE_BATCH_MAX)
			ash_provenance_resolve();
	}
	if (list_length(queue) >= STAMP_QUEUE_MAX)
		ash_apply_flush_deferred();		/* writes first, then their stamps */
}

/*
 * The stored fingerprints of the pending rows' keys by one statement;
 * false when the target's key types have no array types.
 */
static bool
probe_group(ProvTarget *pt, List *rows, bool *unchanged)
{
	int			nrows = list_length(rows);
	int			nparams = pt->nkeyparams + 1;
	Datum	   *params;
	Datum	   *v;
	bool	   *nl;
	uint64		n;

	if (pt->probe_many == NULL)
		return false;
	params = palloc(sizeof(Datum) * nparams);
	v = palloc(sizeof(Datum) * nrows);
	nl = palloc(sizeof(bool) * nrows);
	for (int p = 0; p < nparams; p++)
	{
		int			i = 0;
		ListCell   *lc;

		foreach(lc, rows)
		{
			Pending    *r = lfirst(lc);

			v[i] = p < pt->nkeyparams ? r->values[p] : Int32GetDatum(i + 1);
			nl[i] = p < pt->nkeyparams && r->nulls[p] == 'n';
			i++;
		}
		params[p] = param_array(pt, p, v, nl, nrows, INT4OID);
	}
	n = ash_spi_execute(pt->probe_many, params, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < n; i++)
	{
		bool		isnull;
		int32		o = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc,
												   1, &isnull));
		Pending    *r;

		if (o < 1 || o > nrows)
			elog(ERROR, "ash_replicant: a provenance probe returned a row it was not asked for");
		r = list_nth(rows, o - 1);
		unchanged[o - 1] = probed_matches(pt, r, SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
	}
	return true;
}

void
ash_provenance_resolve(void)
{
	List	   *rows = pending;
	ProvTarget *pt = pending_pt;
	bool	   *unchanged;
	ListCell   *lc;
	int			i = 0;
	AshOwnerScope scope;

	if (rows == NIL)
		return;
	/* taken first: writing them may flush, which calls here again */
	pending = NIL;
	pending_pt = NULL;
	unchanged = palloc0(sizeof(bool) * list_length(rows));

	/* the rows are of one table (pending_pt): its writer probes and writes */
	ash_apply_target_enter(((Pending *) linitial(rows))->tgt, &scope);
	PushActiveSnapshot(GetTransactionSnapshot());
	if (list_length(rows) == 1 || !probe_group(pt, rows, unchanged))
	{
		foreach(lc, rows)
		{
			Pending    *r = lfirst(lc);

			if (ash_spi_execute(pt->probe, r->values, r->nulls, SPI_OK_SELECT) > 0)
				unchanged[i] = probed_matches(pt, r, SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			i++;
		}
	}
	i = 0;
	foreach(lc, rows)
	{
		Pending    *r = lfirst(lc);

		write_judged(pt, r->rel, r->tgt, &r->row, r->strategy, r->fp, r->attempt,
					 r->values, r->nulls, r->n, unchanged[i++]);
	}
	PopActiveSnapshot();
	ash_apply_target_exit(&scope);
	/* the writes copied what they keep (gathered runs, stamps) */
	list_free(rows);
	if (pending == NIL)
		MemoryContextReset(pending_cxt);
}

/*
 * Queue the stamp of a row: its n key values (copied: the change's memory
 * is reset after it), fingerprint (NULL: none) and the attempt.
 */
static void
queue_stamp(ProvTarget *pt, AshApplyRel *rel, Datum *values, char *nulls, int n,
			bytea *fp, const bytea *attempt, bool streamed)
{
	MemoryContext old = MemoryContextSwitchTo(queue_cxt);
	Stamp	   *s = palloc(sizeof(Stamp));

	s->pt = pt;
	s->streamed = streamed;
	copy_key_params(rel, values, nulls, n, &s->values, &s->nulls);
	s->values[n] = fp == NULL ? (Datum) 0 :
		PointerGetDatum(datumCopy(PointerGetDatum(fp), false, -1));
	s->values[n + 1] = PointerGetDatum(datumCopy(PointerGetDatum(attempt), false, -1));
	s->nulls[n] = fp == NULL ? 'n' : ' ';
	s->nulls[n + 1] = ' ';
	s->nulls[n + 2] = '\0';
	queue = lappend(queue, s);
	MemoryContextSwitchTo(old);
}

void
ash_provenance_mark_streamed(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *row,
							 const bytea *attempt)
{
	ProvTarget *pt = target_of(rel, tgt);
	Datum	   *values = palloc(sizeof(Datum) * (pt->nkeyparams + 2));
	char	   *nulls = palloc(pt->nkeyparams + 3);
	int			n;

	n = ash_key_values(rel, row, values, nulls);
	nulls[n] = '\0';
	queue_stamp(pt, rel, values, nulls, n, NULL, attempt, true);
	if (list_length(queue) >= STAMP_QUEUE_MAX)
		ash_apply_flush_deferred();
}

void
ash_provenance_set_unfingerprinted(Oid relid)
{
	unfingerprinted = relid;
}

/* Each stamp of group by a statement of its own. */
static void
stamp_singly(List *group)
{
	ListCell   *lc;

	foreach(lc, group)
	{
		Stamp	   *s = lfirst(lc);
		uint64		n = ash_spi_execute(s->pt->stamp, s->values, s->nulls, SPI_OK_UPDATE);

		/* a streamed row may have been deleted later in the batch */
		if (n > 1 || (n == 0 && !s->streamed))
			elog(ERROR, "ash_replicant: a snapshot row to stamp is not in its target");
	}
}

/*
 * The stamps of group (one target, one kind) by one UPDATE ... FROM
 * arrays.  False when the row count does not prove each stamp met exactly
 * its row (a snapshot row missing, or a key twice in the group): the
 * caller stamps them singly, which raises where a stamp is wrong (the
 * stamps are idempotent, so writing one twice changes nothing).
 */
static bool
stamp_group(ProvTarget *pt, List *group, bool streamed)
{
	int			nrows = list_length(group);
	int			nparams = pt->nkeyparams + 2;
	Datum	   *params = palloc(sizeof(Datum) * nparams);
	Datum	   *v = palloc(sizeof(Datum) * nrows);
	bool	   *nl = palloc(sizeof(bool) * nrows);
	uint64		n;

	for (int p = 0; p < nparams; p++)
	{
		int			i = 0;
		ListCell   *lc;

		foreach(lc, group)
		{
			Stamp	   *s = lfirst(lc);

			v[i] = s->values[p];
			nl[i] = s->nulls[p] == 'n';
			i++;
		}
		params[p] = param_array(pt, p, v, nl, nrows, BYTEAOID);
	}
	n = ash_spi_execute(pt->stamp_many, params, NULL, SPI_OK_UPDATE);

	/*
	 * Streamed rows may have been deleted later in the batch, or written
	 * twice (one mark each time): fewer rows are fine, more are not.
	 */
	if (streamed)
	{
		if (n > (uint64) nrows)
			elog(ERROR, "ash_replicant: a streamed row's seen-mark met more rows than it named");
		return true;
	}
	return n == (uint64) nrows;
}

/*
 * Targets replaced by a new resolution of their relation, once no queued
 * stamp or pending probe can use their plans: freed.  Before, each kept
 * its plans for the life of the worker -- a few kilobytes a table every
 * time the source described it again (an ANALYZE).
 */
static void
free_retired(void)
{
	ListCell   *lc;

	if (queue != NIL || pending != NIL)
		return;
	foreach(lc, retired)
	{
		ProvTarget *pt = lfirst(lc);
		SPIPlanPtr	plans[4] = {pt->probe, pt->probe_many, pt->stamp, pt->stamp_many};

		for (int i = 0; i < lengthof(plans); i++)
			if (plans[i] != NULL)
				SPI_freeplan(plans[i]);
		MemoryContextDelete(pt->cxt);
	}
	list_free(retired);
	retired = NIL;
}

void
ash_provenance_flush(void)
{
	ListCell   *lc;
	int			nestlevel;
	AshOwnerScope scope;

	if (queue == NIL)
	{
		free_retired();
		return;
	}

	/* stamps are no host write: ordinary triggers stay silent */
	nestlevel = NewGUCNestLevel();
	(void) set_config_option("session_replication_role", "replica", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	PushActiveSnapshot(GetTransactionSnapshot());
	lc = list_head(queue);
	while (lc != NULL)
	{
		Stamp	   *first = lfirst(lc);
		List	   *group = NIL;

		/* consecutive stamps of one target and kind: one statement */
		for (; lc != NULL; lc = lnext(queue, lc))
		{
			Stamp	   *s = lfirst(lc);

			if (s->pt != first->pt || s->streamed != first->streamed)
				break;
			group = lappend(group, s);
		}
		/* ENABLE ALWAYS triggers and index expressions: the table's writer */
		ash_apply_table_enter(first->pt->relid, first->pt->rel->target_name, &scope);
		if (!(list_length(group) > 1 && first->pt->stamp_many != NULL &&
			  stamp_group(first->pt, group, first->streamed)))
			stamp_singly(group);
		ash_apply_target_exit(&scope);
	}
	PopActiveSnapshot();
	AtEOXact_GUC(true, nestlevel);
	ash_provenance_discard();
}

void
ash_provenance_discard(void)
{
	queue = NIL;
	if (queue_cxt != NULL)
		MemoryContextReset(queue_cxt);
	pending = NIL;
	pending_pt = NULL;
	if (pending_cxt != NULL)
		MemoryContextReset(pending_cxt);
	free_retired();
}

/* ---------------------------------------------------------------------
 * Key versions and retirement.
 * ---------------------------------------------------------------------
 */
static bool
is_context(AshMapping *m)
{
	return m->tenant_strategy != NULL && strcmp(m->tenant_strategy, "context") == 0;
}

static char *
qualified_name(Oid relid)
{
	char	   *nsp = get_namespace_name(get_rel_namespace(relid));
	char	   *rel = get_rel_name(relid);

	if (nsp == NULL || rel == NULL)
		ash_halt("destination_table_missing", "a provenance target is gone");
	return quote_qualified_identifier(nsp, rel);
}

/*
 * The tenants tenant_scope_function returns: run as owner, restricted, in
 * a subtransaction (owner_scope.c).
 */
static List *
scope_tenants(AshMapping *m, Oid owner)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner resowner = CurrentResourceOwner;
	List	   *volatile tenants = NIL;
	char	   *fn;

	if (!OidIsValid(m->tenant_scope_function) || get_func_name(m->tenant_scope_function) == NULL)
		ash_halt_on(qualified_name(m->target_relid), "snapshot_scope_incomplete",
					"the tenant_scope_function of %s is missing",
				 qualified_name(m->target_relid));
	fn = quote_qualified_identifier(get_namespace_name(get_func_namespace(m->tenant_scope_function)),
									get_func_name(m->tenant_scope_function));

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		AshOwnerScope scope;
		int			ret;

		PushActiveSnapshot(GetTransactionSnapshot());
		ash_owner_scope_enter(&scope, owner, SECURITY_RESTRICTED_OPERATION);
		ret = SPI_execute(psprintf("SELECT s::pg_catalog.text FROM %s() AS s", fn), true, 0);
		ash_owner_scope_exit(&scope);
		PopActiveSnapshot();
		MemoryContextSwitchTo(cxt);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: tenant_scope_function failed");
		for (uint64 i = 0; i < SPI_processed; i++)
			tenants = lappend(tenants, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = resowner;
	}
	PG_CATCH();
	{
		/* never the function's error text: it may carry a tenant */
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = resowner;
		tenants = NIL;
		ash_halt_on(qualified_name(m->target_relid), "snapshot_scope_incomplete",
					"the tenant_scope_function of %s raised",
				 qualified_name(m->target_relid));
	}
	PG_END_TRY();
	return tenants;
}

/*
 * The tables a provenance mapping writes: its target, or under context
 * tenancy the table of every tenant scope tenant_scope_function returns
 * (a NULL or blank scope: snapshot_scope_incomplete; a scope without its
 * table: tenant_scope_missing), each once: a scope returned twice names
 * one table, which every caller reads or writes once.  *scopes, when not
 * NULL: the scope (tenant) of each table, as the function returned it, or
 * NIL for a mapping without context tenancy.  *oids: the tables' OIDs,
 * in the same order (a retirement writes each as its owner allows).
 */
static List *
scope_tables(AshMapping *m, Oid owner, List **scopes, List **oids)
{
	List	   *tables = NIL;
	List	   *relids = NIL;
	ListCell   *lc;

	if (scopes != NULL)
		*scopes = NIL;
	if (!is_context(m))
	{
		*oids = list_make1_oid(m->target_relid);
		return list_make1(qualified_name(m->target_relid));
	}
	foreach(lc, scope_tenants(m, owner))
	{
		char	   *tenant = lfirst(lc);
		char	   *schema;
		Oid			relid;

		if (tenant == NULL || tenant[strspn(tenant, " \t\r\n")] == '\0')
			ash_halt_on(qualified_name(m->target_relid), "snapshot_scope_incomplete",
						"the tenant_scope_function of %s returned a blank scope",
					 qualified_name(m->target_relid));
		relid = ash_tenant_relid(m->target_relid, qualified_name(m->target_relid),
								 m->tenant_schema_format, tenant, &schema);
		if (!OidIsValid(relid))
			ash_halt_on(qualified_name(m->target_relid), "tenant_scope_missing",
						"a tenant scope of %s has no table",
					 qualified_name(m->target_relid));
		if (list_member_oid(relids, relid))
			continue;
		relids = lappend_oid(relids, relid);
		tables = lappend(tables, qualified_name(relid));
		if (scopes != NULL)
			*scopes = lappend(*scopes, tenant);
	}
	*oids = relids;
	return tables;
}

bool
ash_provenance_in_scope(AshMapping *m, Oid owner, const char *tenant)
{
	bool		found = false;
	ListCell   *lc;

	/* the caller may be inside SPI or not: a level of its own */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	foreach(lc, scope_tenants(m, owner))
	{
		const char *scope = lfirst(lc);

		if (scope != NULL && strcmp(scope, tenant) == 0)
		{
			found = true;
			break;
		}
	}
	SPI_finish();
	return found;
}

List *
ash_provenance_scope_tables(AshMapping *m, Oid owner, List **scopes)
{
	List	   *relids;

	return scope_tables(m, owner, scopes, &relids);
}

List *
ash_provenance_tables(AshMapping *m, Oid owner)
{
	return ash_provenance_scope_tables(m, owner, NULL);
}

void
ash_provenance_check_versions(AshMapping *m, Oid owner)
{
	StringInfoData sql;
	MemoryContext cxt = CurrentMemoryContext;
	ListCell   *lc;
	int			ret;

	ash_keyring_load();
	initStringInfo(&sql);
	foreach(lc, ash_provenance_tables(m, owner))
		appendStringInfo(&sql, "%sSELECT pg_catalog.substr(%s, 1, %d) FROM %s WHERE %s IS NOT NULL",
						 sql.len > 0 ? " UNION " : "",
						 ASH_PROVENANCE_FINGERPRINT_COLUMN, ASH_PROVENANCE_TAG_BYTES,
						 (char *) lfirst(lc), ASH_PROVENANCE_FINGERPRINT_COLUMN);
	if (sql.len == 0)
		return;
	PushActiveSnapshot(GetTransactionSnapshot());
	ret = SPI_execute(sql.data, true, 0);
	PopActiveSnapshot();
	MemoryContextSwitchTo(cxt);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: could not read the fingerprints' key versions");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		bytea	   *tag = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[i],
														 SPI_tuptable->tupdesc, 1, &isnull));
		const uint8 *p = (const uint8 *) VARDATA_ANY(tag);
		int32		version;

		/* not one of ours: compared as different, rewritten */
		if (VARSIZE_ANY_EXHDR(tag) != ASH_PROVENANCE_TAG_BYTES ||
			(p[0] != FP_FORMAT_1 && p[0] != FP_FORMAT_2))
			continue;
		version = (int32) (((uint32) p[1] << 24) | ((uint32) p[2] << 16) | ((uint32) p[3] << 8) | p[4]);
		if (ash_keyring_get(ASH_KEYS_SNAPSHOT_PROVENANCE, version) == NULL)
		{
			char	   *target = qualified_name(m->target_relid);

			ash_halt_on(target, "keyring_version_missing",
						"a fingerprint in a target of %s names a version family %s lacks",
						target, ASH_KEYS_SNAPSHOT_PROVENANCE);
		}
	}
}

/*
 * Halt snapshot_history_ahead when sql (SELECT 1 ... LIMIT 1 over one
 * target table of m) finds a row: history a snapshot cannot be placed
 * under.  what says which, for the log.
 */
static void
halt_if_history_ahead(AshMapping *m, const char *sql, int nargs, Oid *types, Datum *values,
					  const char *what)
{
	if (ash_spi_execute_args(sql, nargs, types, values, NULL, SPI_OK_SELECT,
							 "could not look for history past a snapshot") > 0)
	{
		char	   *target = qualified_name(m->target_relid);

		ash_halt_on(target, "snapshot_history_ahead", "%s in %s", what, target);
	}
}

/*
 * Under SCD2 with nothing_past: does table hold an open version the
 * attempt did not see that starts at or past close_lsn?  Only a version
 * of history beyond the source's position can (another source's later
 * WAL, or written by hand): retirement cannot close it before it begins,
 * and leaving it open would keep a row the source lacks.
 */
static void
check_nothing_past(AshMapping *m, const char *table, Oid *types, Datum *values)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT 1 FROM %s WHERE %s IS NULL AND %s OPERATOR(pg_catalog.>=) $2"
					 " AND %s IS DISTINCT FROM $1 LIMIT 1", table,
					 quote_identifier(m->history_valid_to_lsn_column),
					 quote_identifier(m->history_valid_from_lsn_column),
					 ASH_PROVENANCE_SEEN_COLUMN);
	halt_if_history_ahead(m, sql.data, 2, types, values,
						  "an open version the snapshot did not see starts past its position");
}

void
ash_provenance_check_history(AshMapping *m, XLogRecPtr position, Oid owner)
{
	Oid			types[1] = {INT8OID};
	Datum		values[1];
	ListCell   *lc;

	if (!is_scd2(m))
		return;
	values[0] = Int64GetDatum((int64) position);
	foreach(lc, ash_provenance_tables(m, owner))
	{
		StringInfoData sql;

		initStringInfo(&sql);
		appendStringInfo(&sql, "SELECT 1 FROM %s WHERE %s OPERATOR(pg_catalog.>) $1"
						 " OR %s OPERATOR(pg_catalog.>) $1 LIMIT 1", (char *) lfirst(lc),
						 quote_identifier(m->history_valid_from_lsn_column),
						 quote_identifier(m->history_valid_to_lsn_column));
		halt_if_history_ahead(m, sql.data, 1, types, values,
							  "a version is past the incremental copy's position");
	}
}

/*
 * Under SCD2 and context tenancy, where an unseen open version of table
 * (aliased t) ends: at close_lsn, or earlier where a version of its
 * business key that this attempt wrote ($1) begins in another scope's
 * table, if that is after the unseen version's start.  A key the source
 * moved to another tenant is copied into the new tenant's table at its
 * chunk's position, while the old tenant's version, unseen, is retired
 * only at the table's last chunk (incremental): closing it there would
 * have the key belong to both tenants in between.  A tenant change closes
 * the old version where the new one opens (as the stream does).  Under v1
 * every copied version begins at close_lsn: the same end as before.
 * Appends nothing and returns false when a key column has no target.
 */
static bool
append_close_at(StringInfo sql, AshMapping *m, const char *table, List *tables)
{
	const char *from = quote_identifier(m->history_valid_from_lsn_column);
	StringInfoData key;
	ListCell   *lc;

	initStringInfo(&key);
	foreach(lc, m->history_business_key)
	{
		const char *col = ash_mapping_target_column(m, lfirst(lc));

		/* registration requires every key column in the target */
		if (col == NULL)
			return false;
		col = quote_identifier(col);
		/* business keys are never NULL (apply_scd2.c): = can use an index */
		appendStringInfo(&key, " AND o.%s OPERATOR(pg_catalog.=) t.%s", col, col);
	}
	/* LEAST is SQL syntax, not a function: no search_path to pin */
	appendStringInfoString(sql, "LEAST($2");
	foreach(lc, tables)
	{
		const char *other = lfirst(lc);

		if (strcmp(other, table) == 0)
			continue;
		appendStringInfo(sql, ", (SELECT pg_catalog.min(o.%s) FROM %s o WHERE o.%s OPERATOR(pg_catalog.=) $1"
						 " AND o.%s OPERATOR(pg_catalog.>) t.%s%s)",
						 from, other, ASH_PROVENANCE_SEEN_COLUMN, from, from, key.data);
	}
	appendStringInfoChar(sql, ')');
	return true;
}

/*
 * Retire in one table (of tables, every scope's); returns the rows
 * retired.
 */
static int64
retire_in(AshMapping *m, const char *table, List *tables, const bytea *attempt,
		  XLogRecPtr close_lsn, bool nothing_past)
{
	StringInfoData sql;
	Oid			types[2] = {BYTEAOID, INT8OID};
	Datum		values[2];
	int			ret;
	MemoryContext cxt = CurrentMemoryContext;

	values[0] = PointerGetDatum(attempt);
	values[1] = Int64GetDatum((int64) close_lsn);
	if (nothing_past && is_scd2(m))
		check_nothing_past(m, table, types, values);

	initStringInfo(&sql);
	if (is_scd2(m))
	{
		appendStringInfo(&sql, "UPDATE %s t SET %s = ", table,
						 quote_identifier(m->history_valid_to_lsn_column));
		if (!is_context(m) || list_length(tables) < 2 ||
			!append_close_at(&sql, m, table, tables))
			appendStringInfoString(&sql, "$2");
		if (m->history_valid_to_ts_column)
			appendStringInfo(&sql, ", %s = pg_catalog.now()",
							 quote_identifier(m->history_valid_to_ts_column));
		if (m->history_current_column)
			appendStringInfo(&sql, ", %s = false", quote_identifier(m->history_current_column));
		appendStringInfo(&sql, " WHERE %s IS NULL AND %s OPERATOR(pg_catalog.<) $2"
						 " AND %s IS DISTINCT FROM $1",
						 quote_identifier(m->history_valid_to_lsn_column),
						 quote_identifier(m->history_valid_from_lsn_column),
						 ASH_PROVENANCE_SEEN_COLUMN);
	}
	else
		appendStringInfo(&sql, "DELETE FROM %s WHERE %s IS DISTINCT FROM $1 AND $2 IS NOT NULL",
						 table, ASH_PROVENANCE_SEEN_COLUMN);
	PushActiveSnapshot(GetTransactionSnapshot());
	ret = SPI_execute_with_args(sql.data, 2, types, values, NULL, false, 0);
	PopActiveSnapshot();
	MemoryContextSwitchTo(cxt);
	if (ret != SPI_OK_DELETE && ret != SPI_OK_UPDATE)
		elog(ERROR, "ash_replicant: could not retire the rows a snapshot did not see");
	return (int64) SPI_processed;
}

int64
ash_provenance_retire(AshMapping *m, const bytea *attempt, XLogRecPtr close_lsn,
					  bool nothing_past)
{
	List	   *relids;
	List	   *tables = scope_tables(m, GetUserId(), NULL, &relids);
	ListCell   *lc;
	int64		rows = 0;
	char	   *log_name = qualified_name(m->target_relid);

	foreach(lc, tables)
	{
		AshOwnerScope scope;

		/* a tenant's table is named by its mapping's target */
		ash_apply_table_enter(list_nth_oid(relids, foreach_current_index(lc)), log_name, &scope);
		rows += retire_in(m, lfirst(lc), tables, attempt, close_lsn, nothing_past);
		ash_apply_target_exit(&scope);
	}
	return rows;
}

void
ash_provenance_forget(AshMapping *m, const bytea *attempt)
{
	Oid			types[1] = {BYTEAOID};
	Datum		values[1];
	ListCell   *lc;
	int			nestlevel;
	MemoryContext cxt = CurrentMemoryContext;
	List	   *tables;
	List	   *relids;

	values[0] = PointerGetDatum(attempt);
	nestlevel = NewGUCNestLevel();
	(void) set_config_option("session_replication_role", "replica", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	tables = scope_tables(m, GetUserId(), NULL, &relids);
	PushActiveSnapshot(GetTransactionSnapshot());
	foreach(lc, tables)
	{
		AshOwnerScope scope;

		ash_apply_table_enter(list_nth_oid(relids, foreach_current_index(lc)),
							  qualified_name(m->target_relid), &scope);
		if (SPI_execute_with_args(psprintf("UPDATE %s SET %s = NULL WHERE %s = $1",
										   (char *) lfirst(lc), ASH_PROVENANCE_SEEN_COLUMN,
										   ASH_PROVENANCE_SEEN_COLUMN),
								  1, types, values, NULL, false, 0) != SPI_OK_UPDATE)
			elog(ERROR, "ash_replicant: could not forget a snapshot attempt's seen-marks");
		MemoryContextSwitchTo(cxt);
		ash_apply_target_exit(&scope);
	}
	PopActiveSnapshot();
	AtEOXact_GUC(true, nestlevel);
}
