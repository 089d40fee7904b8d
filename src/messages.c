/*-------------------------------------------------------------------------
 *
 * messages.c
 *	  Logical messages: prefix routes, idempotency claims and the digest
 *	  key witness (docs/history-and-events.md).
 *
 * NOTES
 *	  Position.  A transactional message rides its transaction: commit LSN
 *	  and an ordinal shared with the row changes.  A non-transactional one
 *	  has its own LSN (the end of its WAL record, pgoutput's message LSN)
 *	  and ordinal 0; the driver applies it in a destination transaction of
 *	  its own whose watermark is that LSN (apply.c).  An ignored prefix is
 *	  acknowledged with no effect; an unrouted one halts
 *	  message_prefix_unmapped (the driver's; prefixes are never printed).
 *
 *	  State-mirror routes.  The effect (INSERT into the route's table, or
 *	  a call of its function, as the sink owner) and a claim row commit in
 *	  the same destination transaction as the watermark:
 *
 *		operation_key  = F || V || HMAC_V("ash_replicant/message_operation/v1"
 *						 || 0 || len+system id || len+database || len+slot
 *						 || LSN (8 bytes) || ordinal (4 bytes))
 *		content_digest = F || V || HMAC_V("ash_replicant/message_content/v1"
 *						 || 0 || len+prefix || len+content)
 *
 *	  F is the format byte (1), V the message_digest key version (4 bytes,
 *	  big-endian), len a 4-byte big-endian length.  New claims use the
 *	  active version.  A replay (after a checkpoint was moved back, within
 *	  the recovery horizon) must find the claim made under ANY retained
 *	  version: the lookup computes the operation key under every version of
 *	  the family and asks for any of them.  A found claim is verified with
 *	  the version recorded in ITS content digest (absent version: halt
 *	  keyring_version_missing): equal -> the message was applied, nothing
 *	  happens; different -> halt message_claim_conflict (the same source
 *	  position carries other content: the source is not the one that was
 *	  claimed).  claimed_at = now(), expires_at = now() + the route's
 *	  retention; expired claims of the sink's routes are deleted at
 *	  activation.  claims.route is "<sink>:<target>" (never the prefix).
 *
 *	  Digest key witness (checkpoints.digest_key_witness).  A
 *	  message_digest version may be removed from the keyring only after
 *	  max(route retention) has passed since it was last used for claims:
 *	  until then some claim may need it.  The witness records, per version
 *	  used, a "seen until" time (now + a lease, renewed while the version is
 *	  active and claims are made), authenticated with HMAC-SHA-256 under the
 *	  horizon_provenance family and bound to the checkpoint identity:
 *
 *		F || V_hp (4) || n (4) || n x (version (4) || seen_until (8))
 *		  || HMAC_{V_hp}(the preceding bytes || 0 || system id || 0 ||
 *						  database || 0 || slot)
 *
 *	  At activation and before every claim, each recorded version missing
 *	  from the keyring is judged: seen_until + max retention still in the
 *	  future halts digest_key_horizon_violated; otherwise it was retired
 *	  lawfully and leaves the witness.  A witness that does not verify
 *	  halts digest_key_witness_invalid; one naming an absent
 *	  horizon_provenance version halts keyring_version_missing.
 *
 *	  Append-log routes record operation = 'message' events instead: the
 *	  driver (apply.c) hands them to apply_append.c, never here; they need
 *	  no claim (the five axes deduplicate).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "crypto.h"
#include "errors.h"
#include "keyring.h"
#include "messages.h"
#include "owner_scope.h"
#include "qualname.h"
#include "relmap.h"
#include "spi_util.h"

#define DIGEST_LEN		(1 + 4 + ASH_HMAC_SHA256_LEN)

/* The lease of a witness entry: renewed at half-life while in use. */
#define WITNESS_LEASE_MAX_US	((int64) 600 * USECS_PER_SEC)

typedef struct RoutePlan
{
	AshMessageRoute *route;
	SPIPlanPtr	effect;
	char	   *sql;			/* the effect's text: names the target */
	int			nargs;
	bool		content_text;	/* table target with a text content column */
	char	   *label;			/* claims.route: "<sink>:<target>" */
	uint64		epoch;			/* table target: ash_relmap_target_epoch
								 * the statement was checked under */
} RoutePlan;

typedef struct WitnessEntry
{
	int32		version;
	TimestampTz seen_until;
} WitnessEntry;

static MemoryContext messages_cxt = NULL;
static List *route_plans = NIL;
static SPIPlanPtr claim_lookup_plan = NULL;
static SPIPlanPtr claim_insert_plan = NULL;

static WitnessEntry *witness = NULL;
static int	nwitness = 0;

/* The source database's encoding (ash_messages_set_source_encoding). */
static int	source_encoding = -1;

static MemoryContext
cxt(void)
{
	if (messages_cxt == NULL)
		messages_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant messages",
											 ALLOCSET_SMALL_SIZES);
	return messages_cxt;
}

static bool
sink_is_append(AshPipelineConfig *cfg)
{
	return ash_config_is_append_log(cfg);
}

AshMessageRoute *
ash_message_route(AshPipelineConfig *cfg, const char *prefix)
{
	ListCell   *lc;

	foreach(lc, cfg->message_routes)
	{
		AshMessageRoute *r = lfirst(lc);

		if (strcmp(r->prefix, prefix) == 0)
			return r;
	}
	return NULL;
}

void
ash_messages_set_source_encoding(int encoding)
{
	source_encoding = encoding;
}

bool
ash_messages_need_keys(AshPipelineConfig *cfg)
{
	return cfg->message_routes != NIL && !sink_is_append(cfg);
}

static int64
max_retention_us(AshPipelineConfig *cfg)
{
	ListCell   *lc;
	int64		m = 0;

	foreach(lc, cfg->message_routes)
		m = Max(m, ((AshMessageRoute *) lfirst(lc))->retention_us);
	return m;
}

static int64
lease_us(AshPipelineConfig *cfg)
{
	return Max(Min(WITNESS_LEASE_MAX_US, max_retention_us(cfg)), USECS_PER_SEC);
}

/* ---------------------------------------------------------------------
 * Encodings.
 * ---------------------------------------------------------------------
 */
static void
put_u32(StringInfo buf, uint32 v)
{
	uint32		be = pg_hton32(v);

	appendBinaryStringInfo(buf, (char *) &be, 4);
}

static void
put_u64(StringInfo buf, uint64 v)
{
	uint64		be = pg_hton64(v);

	appendBinaryStringInfo(buf, (char *) &be, 8);
}

static void
put_str(StringInfo buf, const char *s, int len)
{
	put_u32(buf, (uint32) len);
	appendBinaryStringInfo(buf, s, len);
}

static uint32
get_u32(const uint8 *p)
{
	uint32		v;

	memcpy(&v, p, 4);
	return pg_ntoh32(v);
}

static uint64
get_u64(const uint8 *p)
{
	uint64		v;

	memcpy(&v, p, 8);
	return pg_ntoh64(v);
}

/* F || V || HMAC_V(data) as bytea */
static bytea *
versioned_mac(const AshKey *key, StringInfo data)
{
	bytea	   *out = palloc(VARHDRSZ + DIGEST_LEN);
	uint8	   *p = (uint8 *) VARDATA(out);
	uint32		be = pg_hton32((uint32) key->version);

	SET_VARSIZE(out, VARHDRSZ + DIGEST_LEN);
	p[0] = ASH_MESSAGE_DIGEST_FORMAT_V1;
	memcpy(p + 1, &be, 4);
	ash_hmac_sha256(key, data->data, data->len, p + 5);
	return out;
}

static void
operation_input(StringInfo buf, const AshCheckpointKey *ck, XLogRecPtr commit_lsn,
				int32 ordinal)
{
	initStringInfo(buf);
	appendStringInfoString(buf, "ash_replicant/message_operation/v1");
	appendStringInfoChar(buf, '\0');
	put_str(buf, ck->system_id, strlen(ck->system_id));
	put_str(buf, ck->database, strlen(ck->database));
	put_str(buf, ck->slot_name, strlen(ck->slot_name));
	put_u64(buf, (uint64) commit_lsn);
	put_u32(buf, (uint32) ordinal);
}

static void
content_input(StringInfo buf, const char *prefix, const char *content, int len)
{
	initStringInfo(buf);
	appendStringInfoString(buf, "ash_replicant/message_content/v1");
	appendStringInfoChar(buf, '\0');
	put_str(buf, prefix, strlen(prefix));
	put_str(buf, content, len);
}

/* ---------------------------------------------------------------------
 * Digest key witness.
 * ---------------------------------------------------------------------
 */
static void
witness_binding(StringInfo buf, const AshCheckpointKey *ck)
{
	appendStringInfoChar(buf, '\0');
	appendStringInfoString(buf, ck->system_id);
	appendStringInfoChar(buf, '\0');
	appendStringInfoString(buf, ck->database);
	appendStringInfoChar(buf, '\0');
	appendStringInfoString(buf, ck->slot_name);
}

/* Parse and verify a stored witness into witness/nwitness. */
static void
witness_decode(const AshCheckpointKey *ck, bytea *stored)
{
	const uint8 *p = (const uint8 *) VARDATA_ANY(stored);
	int			len = VARSIZE_ANY_EXHDR(stored);
	int32		hp_version;
	uint32		n;
	const AshKey *hp;
	StringInfoData data;
	uint8		mac[ASH_HMAC_SHA256_LEN];
	MemoryContext old;

	if (len < 9 + ASH_HMAC_SHA256_LEN || p[0] != ASH_MESSAGE_DIGEST_FORMAT_V1)
		ash_halt("digest_key_witness_invalid", "the digest key witness is not decodable");
	hp_version = (int32) get_u32(p + 1);
	n = get_u32(p + 5);
	if (n > 100000 || len != 9 + (int) n * 12 + ASH_HMAC_SHA256_LEN)
		ash_halt("digest_key_witness_invalid", "the digest key witness is not decodable");
	hp = ash_keyring_get(ASH_KEYS_HORIZON_PROVENANCE, hp_version);
	if (hp == NULL)
		ash_halt("keyring_version_missing", "family %s: the version that authenticated the digest key witness",
				 ASH_KEYS_HORIZON_PROVENANCE);
	initStringInfo(&data);
	appendBinaryStringInfo(&data, (const char *) p, len - ASH_HMAC_SHA256_LEN);
	witness_binding(&data, ck);
	ash_hmac_sha256(hp, data.data, data.len, mac);
	if (!ash_digest_equal(mac, p + len - ASH_HMAC_SHA256_LEN, ASH_HMAC_SHA256_LEN))
		ash_halt("digest_key_witness_invalid", "the digest key witness does not verify");

	old = MemoryContextSwitchTo(cxt());
	if (witness)
		pfree(witness);
	witness = palloc(sizeof(WitnessEntry) * Max(n, 1) + sizeof(WitnessEntry));
	nwitness = n;
	for (uint32 i = 0; i < n; i++)
	{
		witness[i].version = (int32) get_u32(p + 9 + i * 12);
		witness[i].seen_until = (TimestampTz) get_u64(p + 13 + i * 12);
	}
	MemoryContextSwitchTo(old);
}

static bytea *
witness_encode(const AshCheckpointKey *ck)
{
	const AshKey *hp = ash_keyring_active(ASH_KEYS_HORIZON_PROVENANCE);
	StringInfoData data;
	bytea	   *out;
	int			body;

	if (hp == NULL)
		ash_halt("keyring_missing_family", "family %s", ASH_KEYS_HORIZON_PROVENANCE);
	initStringInfo(&data);
	appendStringInfoChar(&data, ASH_MESSAGE_DIGEST_FORMAT_V1);
	put_u32(&data, (uint32) hp->version);
	put_u32(&data, (uint32) nwitness);
	for (int i = 0; i < nwitness; i++)
	{
		put_u32(&data, (uint32) witness[i].version);
		put_u64(&data, (uint64) witness[i].seen_until);
	}
	body = data.len;
	out = palloc(VARHDRSZ + body + ASH_HMAC_SHA256_LEN);
	SET_VARSIZE(out, VARHDRSZ + body + ASH_HMAC_SHA256_LEN);
	memcpy(VARDATA(out), data.data, body);
	witness_binding(&data, ck);
	ash_hmac_sha256(hp, data.data, data.len, (uint8 *) VARDATA(out) + body);
	return out;
}

/*
 * Judge the witness against the keyring now loaded: a recorded version
 * that is gone must have been unused for max(route retention).  Drops
 * lawfully retired entries; returns whether the witness changed.
 */
static bool
witness_judge(AshPipelineConfig *cfg)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		horizon = max_retention_us(cfg);
	int			kept = 0;
	bool		changed = false;

	for (int i = 0; i < nwitness; i++)
	{
		if (ash_keyring_get(ASH_KEYS_MESSAGE_DIGEST, witness[i].version) == NULL)
		{
			if (now < witness[i].seen_until + horizon)
				ash_halt("digest_key_horizon_violated",
						 "a %s version was removed before the longest route retention passed since its last use",
						 ASH_KEYS_MESSAGE_DIGEST);
			ereport(LOG,
					(errmsg("ash_replicant event=keys.digest_version_retired sink=%s version=%d",
							cfg->sink_name, witness[i].version)));
			changed = true;
			continue;
		}
		witness[kept++] = witness[i];
	}
	nwitness = kept;
	return changed;
}

/*
 * Make sure the active version is leased until at least now + lease/2;
 * returns whether the witness changed (and must be written).
 */
static bool
witness_touch(AshPipelineConfig *cfg, int32 active)
{
	TimestampTz now = GetCurrentTimestamp();
	int64		lease = lease_us(cfg);
	int			i;

	for (i = 0; i < nwitness; i++)
		if (witness[i].version == active)
			break;
	if (i < nwitness && witness[i].seen_until >= now + lease / 2)
		return false;
	if (i == nwitness)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt());
		WitnessEntry *w = palloc(sizeof(WitnessEntry) * (nwitness + 1));

		if (nwitness > 0)
			memcpy(w, witness, sizeof(WitnessEntry) * nwitness);
		if (witness)
			pfree(witness);
		witness = w;
		nwitness++;
		witness[i].version = active;
		MemoryContextSwitchTo(old);
	}
	witness[i].seen_until = now + lease;
	return true;
}

static void
witness_write(const AshCheckpointKey *ck)
{
	ash_checkpoint_set_witness(ck, witness_encode(ck));
}

static void
require_families(void)
{
	if (!ash_keyring_has_family(ASH_KEYS_MESSAGE_DIGEST))
		ash_halt("keyring_missing_family", "family %s", ASH_KEYS_MESSAGE_DIGEST);
	if (!ash_keyring_has_family(ASH_KEYS_HORIZON_PROVENANCE))
		ash_halt("keyring_missing_family", "family %s", ASH_KEYS_HORIZON_PROVENANCE);
}

/*
 * A route's table or function must still exist: message_routes keeps a bare
 * OID with no dependency, so either can be dropped under the route, and its
 * name is gone with it.  Halts destination_table_missing (the prefix is
 * message content: never printed).  With lock, the target is locked first,
 * as the effect will use it, so that it cannot be dropped between this
 * check and the effect.
 */
static void
require_route_target(AshMessageRoute *route, bool lock)
{
	if (OidIsValid(route->target))
	{
		if (lock)
			LockRelationOid(route->target, RowExclusiveLock);
		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(route->target)))
			ash_halt("destination_table_missing",
					 "table of a message route, oid %u", route->target);
	}
	else
	{
		/* its signature named no function at load: dropped */
		if (!OidIsValid(route->function))
			ash_halt("destination_table_missing",
					 "function %s of a message route does not exist", route->function_sig);
		if (lock)
			LockDatabaseObject(ProcedureRelationId, route->function, 0, AccessShareLock);
		if (!SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(route->function)))
			ash_halt("destination_table_missing",
					 "function of a message route, oid %u", route->function);

		/*
		 * The route holds its function by signature and the call names it:
		 * renamed or moved since the load, the signature names another
		 * function or none, and the call would fail or reach that one.
		 */
		if (ash_function_resolve(route->function_sig) != route->function)
			ash_halt("destination_table_missing",
					 "function %s of a message route does not exist", route->function_sig);
	}
}

/* "<sink>:<target>"; the target exists (require_route_target) */
static char *
route_label(AshPipelineConfig *cfg, AshMessageRoute *route)
{
	char	   *target;

	if (OidIsValid(route->target))
		target = quote_qualified_identifier(get_namespace_name(get_rel_namespace(route->target)),
											get_rel_name(route->target));
	else
		target = quote_qualified_identifier(get_namespace_name(get_func_namespace(route->function)),
											get_func_name(route->function));
	return psprintf("%s:%s", cfg->sink_name, target);
}

void
ash_messages_activate(AshPipelineConfig *cfg, AshCheckpointKey *key)
{
	MemoryContext caller = CurrentMemoryContext;
	Oid			types[4] = {TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID};
	Datum		values[4];
	int			ret;
	bool		isnull;
	Datum		d;
	ListCell   *lc;
	Datum	   *labels;
	int			nlabels = 0;

	if (!ash_messages_need_keys(cfg))
		return;

	ash_keyring_load();
	require_families();

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	MemoryContextSwitchTo(caller);

	/* before anything is written: every start judges the targets */
	foreach(lc, cfg->message_routes)
		require_route_target(lfirst(lc), false);

	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	ret = SPI_execute_with_args("SELECT digest_key_witness FROM ash_replicant.checkpoints"
								" WHERE source_system_id = $1 AND source_database = $2"
								" AND slot_name = $3 FOR UPDATE",
								3, types, values, NULL, false, 0);
	MemoryContextSwitchTo(caller);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "ash_replicant: the checkpoint row is missing at message activation");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	nwitness = 0;
	if (!isnull)
		witness_decode(key, DatumGetByteaPP(d));

	(void) witness_judge(cfg);
	(void) witness_touch(cfg, ash_keyring_active(ASH_KEYS_MESSAGE_DIGEST)->version);
	witness_write(key);

	/* expired claims of this sink's routes */
	labels = palloc(sizeof(Datum) * Max(list_length(cfg->message_routes), 1));
	foreach(lc, cfg->message_routes)
		labels[nlabels++] = CStringGetTextDatum(route_label(cfg, lfirst(lc)));
	values[3] = PointerGetDatum(construct_array(labels, nlabels, TEXTOID, -1, false, TYPALIGN_INT));
	ret = SPI_execute_with_args("DELETE FROM ash_replicant.message_claims"
								" WHERE route = ANY ($4) AND expires_at < pg_catalog.now()",
								4, types, values, NULL, false, 0);
	MemoryContextSwitchTo(caller);
	if (ret != SPI_OK_DELETE)
		elog(ERROR, "ash_replicant: could not delete expired claims");
	if (SPI_processed > 0)
		ereport(LOG,
				(errmsg("ash_replicant event=message.claims_expired sink=%s count=" UINT64_FORMAT,
						cfg->sink_name, SPI_processed)));

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(caller);
}

/* ---------------------------------------------------------------------
 * Applying a message.
 * ---------------------------------------------------------------------
 */
/*
 * Is the route table's column of this name there and of this type
 * (InvalidOid: bytea or text)?  Registration required these types exactly;
 * PostgreSQL would coerce bytea into any other string type through its
 * text form without an error.
 */
static Oid
route_column_type(Oid relid, const char *name, Oid want, bool required)
{
	AttrNumber	att = get_attnum(relid, name);
	Oid			typid;

	if (att == InvalidAttrNumber)
	{
		if (required)
			ash_halt("delivery_config_invalid", "a message route's table lost its %s column", name);
		return InvalidOid;
	}
	typid = getBaseType(get_atttype(relid, att));
	if (OidIsValid(want) ? typid != want : (typid != BYTEAOID && typid != TEXTOID))
		ash_halt("delivery_config_invalid", "the %s column of a message route's table was retyped", name);
	return typid;
}

/*
 * The effect's statement.  A table route holds its table by OID while the
 * statement names it, and its parameter types follow the content column's:
 * after any invalidation that may have renamed the table (or its schema)
 * or retyped a column (ash_relmap_target_epoch) the statement is made
 * again from the catalogs, and prepared again if it differs.
 */
static RoutePlan *
route_plan(AshPipelineConfig *cfg, AshMessageRoute *route)
{
	ListCell   *lc;
	RoutePlan  *rp = NULL;
	StringInfoData sql;
	Oid			types[4] = {TEXTOID, BYTEAOID, BYTEAOID, BYTEAOID};
	bool		content_text = false;
	uint64		epoch = 0;
	SPIPlanPtr	effect;
	MemoryContext old;

	foreach(lc, route_plans)
	{
		if (((RoutePlan *) lfirst(lc))->route == route)
			rp = lfirst(lc);
	}
	if (OidIsValid(route->target))
	{
		epoch = ash_relmap_target_epoch(route->target);
		if (rp != NULL && rp->epoch == epoch)
			return rp;
	}
	else if (rp != NULL)
		return rp;				/* require_route_target checked the name */

	initStringInfo(&sql);
	if (OidIsValid(route->target))
	{
		bool		has_prefix;

		content_text = route_column_type(route->target, "content", InvalidOid, true) == TEXTOID;
		(void) route_column_type(route->target, "operation_key", BYTEAOID, true);
		(void) route_column_type(route->target, "content_digest", BYTEAOID, true);
		has_prefix = OidIsValid(route_column_type(route->target, "prefix", TEXTOID, false));
		/* $1 content, $2 operation_key, $3 content_digest, $4 prefix */
		types[0] = content_text ? TEXTOID : BYTEAOID;
		types[1] = BYTEAOID;
		types[2] = BYTEAOID;
		types[3] = TEXTOID;
		appendStringInfo(&sql, "INSERT INTO %s (content, operation_key, content_digest%s)"
						 " VALUES ($1, $2, $3%s)",
						 quote_qualified_identifier(get_namespace_name(get_rel_namespace(route->target)),
													get_rel_name(route->target)),
						 has_prefix ? ", prefix" : "", has_prefix ? ", $4" : "");
	}
	else
	{
		int			nargs = get_func_nargs(route->function);

		/* (prefix, content[, operation_key, content_digest]) */
		appendStringInfo(&sql, "SELECT %s($1, $2%s)",
						 quote_qualified_identifier(get_namespace_name(get_func_namespace(route->function)),
													get_func_name(route->function)),
						 nargs == 4 ? ", $3, $4" : "");
	}

	if (rp != NULL && strcmp(rp->sql, sql.data) == 0 && rp->content_text == content_text)
	{
		rp->epoch = epoch;
		return rp;
	}

	/* prepared before the entry changes: a failure leaves it as it was */
	effect = ash_spi_prepare_kept(sql.data, 4, types);
	old = MemoryContextSwitchTo(cxt());
	if (rp == NULL)
	{
		rp = palloc0(sizeof(RoutePlan));
		rp->route = route;
		route_plans = lappend(route_plans, rp);
	}
	else
	{
		SPI_freeplan(rp->effect);
		pfree(rp->sql);
		pfree(rp->label);
	}
	rp->effect = effect;
	rp->label = route_label(cfg, route);
	rp->sql = pstrdup(sql.data);
	rp->content_text = content_text;
	rp->nargs = 4;
	rp->epoch = epoch;
	MemoryContextSwitchTo(old);
	return rp;
}

/*
 * Text content as the destination's text.  pg_logical_emit_message(text)
 * stores the source database's encoding: converted as the source converts
 * row values (client_encoding), checked when both are the same or either
 * is SQL_ASCII (no conversion).  Not convertible: message_content_invalid.
 */
static text *
content_as_text(const char *content, int len)
{
	int			dst = GetDatabaseEncoding();
	int			src = source_encoding;
	const char *invalid = "a message routed to a text content column is not valid text in the database encoding";
	Oid			proc;
	unsigned char *buf;
	Size		buflen;

	if (src < 0)
		ash_halt("message_content_invalid",
				 "a message routed to a text content column: the source's encoding is unknown");
	if (src == dst || src == PG_SQL_ASCII || dst == PG_SQL_ASCII)
	{
		if (!pg_verifymbstr(content, len, true))
			ash_halt("message_content_invalid", "%s", invalid);
		return cstring_to_text_with_len(content, len);
	}
	if (!pg_verify_mbstr(src, content, len, true))
		ash_halt("message_content_invalid",
				 "a message routed to a text content column is not valid text in the source's encoding");
	proc = FindDefaultConversionProc(src, dst);
	if (!OidIsValid(proc))
		ash_halt("message_content_invalid",
				 "a message routed to a text content column: no conversion from the source's encoding into the destination's");
	if ((Size) len >= (MaxAllocSize - 1) / MAX_CONVERSION_GROWTH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("ash_replicant: a message routed to a text content column is too long to convert")));
	buflen = (Size) len * MAX_CONVERSION_GROWTH + 1;
	buf = palloc(buflen);
	/* noError: stops at the first character the destination lacks */
	if (pg_do_encoding_conversion_buf(proc, src, dst, (unsigned char *) content, len,
									  buf, (int) buflen, true) != len)
		ash_halt("message_content_invalid",
				 "a message routed to a text content column holds a character the destination's encoding lacks");
	return cstring_to_text((char *) buf);
}

/*
 * A route table's insert that wrote no row: a BEFORE ROW trigger kept it
 * out (registration refuses no trigger here), and the claim would record
 * an effect that never happened.  Halts as a mirror target's would.
 */
static void
write_lost(RoutePlan *rp, uint64 n)
{
	Relation	r;
	bool		before;

	if (n > 1)
		elog(ERROR, "ash_replicant: a message route's insert affected more than one row");
	r = table_open(rp->route->target, NoLock);
	before = r->trigdesc != NULL && r->trigdesc->trig_insert_before_row;
	table_close(r, NoLock);
	if (before)
		ash_halt("destination_write_suppressed",
				 "the insert of a message into %s affected no row: a trigger on it kept the write out",
				 rp->label);
	elog(ERROR, "ash_replicant: a message route's insert affected no row");
}

static void
run_effect(AshPipelineConfig *cfg, RoutePlan *rp, const char *prefix, const char *content,
		   int len, bytea *opkey, bytea *digest)
{
	Datum		values[4];
	char		nulls[5] = "    ";
	bytea	   *raw;
	AshOwnerScope owner_scope;
	AshOwnerScope table_scope;
	uint64		n;

	raw = palloc(VARHDRSZ + len);
	SET_VARSIZE(raw, VARHDRSZ + len);
	memcpy(VARDATA(raw), content, len);

	if (OidIsValid(rp->route->target))
	{
		if (rp->content_text)
			values[0] = PointerGetDatum(content_as_text(content, len));
		else
			values[0] = PointerGetDatum(raw);
		values[1] = PointerGetDatum(opkey);
		values[2] = PointerGetDatum(digest);
		values[3] = CStringGetTextDatum(prefix);
	}
	else
	{
		values[0] = CStringGetTextDatum(prefix);
		values[1] = PointerGetDatum(raw);
		values[2] = PointerGetDatum(opkey);
		values[3] = PointerGetDatum(digest);
	}

	/*
	 * The effect is the sink owner's function, or a write to a table, as
	 * its owner allows (owner_scope.c).
	 */
	ash_owner_scope_enter(&owner_scope, cfg->owner, 0);
	if (OidIsValid(rp->route->target))
		ash_owner_write_enter(&table_scope, cfg->owner, rp->route->target, NULL);
	n = ash_spi_execute(rp->effect, values, nulls,
						OidIsValid(rp->route->target) ? SPI_OK_INSERT : SPI_OK_SELECT);
	if (OidIsValid(rp->route->target))
		ash_owner_scope_exit(&table_scope);
	ash_owner_scope_exit(&owner_scope);
	if (OidIsValid(rp->route->target) && n != 1)
		write_lost(rp, n);
}

/* Look up a claim under every retained version; NULL digest when none. */
static bytea *
find_claim(const AshCheckpointKey *ck, XLogRecPtr commit_lsn, int32 ordinal)
{
	int32	   *versions;
	int			nv = ash_keyring_versions(ASH_KEYS_MESSAGE_DIGEST, &versions);
	Datum	   *keys = palloc(sizeof(Datum) * Max(nv, 1));
	StringInfoData input;
	Datum		values[1];
	uint64		n;
	bool		isnull;
	Datum		d;
	int16		typlen;
	bool		typbyval;
	char		typalign;

	operation_input(&input, ck, commit_lsn, ordinal);
	for (int i = 0; i < nv; i++)
		keys[i] = PointerGetDatum(versioned_mac(ash_keyring_get(ASH_KEYS_MESSAGE_DIGEST, versions[i]),
												&input));
	get_typlenbyvalalign(BYTEAOID, &typlen, &typbyval, &typalign);
	values[0] = PointerGetDatum(construct_array(keys, nv, BYTEAOID, typlen, typbyval, typalign));

	if (claim_lookup_plan == NULL)
	{
		Oid			types[1] = {BYTEAARRAYOID};

		claim_lookup_plan = ash_spi_prepare_kept("SELECT content_digest FROM ash_replicant.message_claims"
										 " WHERE operation_key = ANY ($1)", 1, types);
	}
	n = ash_spi_execute(claim_lookup_plan, values, NULL, SPI_OK_SELECT);
	if (n == 0)
		return NULL;
	if (n > 1)
		ash_halt("message_claim_conflict", "one source position holds claims under several key versions");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	return isnull ? NULL : DatumGetByteaPCopy(d);
}

static void
insert_claim(RoutePlan *rp, bytea *opkey, bytea *digest)
{
	Datum		values[4];

	if (claim_insert_plan == NULL)
	{
		Oid			types[4] = {BYTEAOID, BYTEAOID, TEXTOID, INTERVALOID};

		claim_insert_plan = ash_spi_prepare_kept("INSERT INTO ash_replicant.message_claims"
										 " (operation_key, content_digest, route, claimed_at, expires_at)"
										 " VALUES ($1, $2, $3, pg_catalog.now(), pg_catalog.now() OPERATOR(pg_catalog.+) $4)",
										 4, types);
	}
	values[0] = PointerGetDatum(opkey);
	values[1] = PointerGetDatum(digest);
	values[2] = CStringGetTextDatum(rp->label);
	values[3] = IntervalPGetDatum(&rp->route->retention);
	if (ash_spi_execute(claim_insert_plan, values, NULL, SPI_OK_INSERT) != 1)
		elog(ERROR, "ash_replicant: claim insert affected no row");
}

void
ash_message_apply(AshPipelineConfig *cfg, const AshCheckpointKey *ck, AshMessageRoute *route,
				  const char *prefix, const char *content, int len,
				  XLogRecPtr commit_lsn, int32 ordinal)
{
	const AshKey *active;
	StringInfoData input;
	bytea	   *claimed;
	bytea	   *opkey;
	bytea	   *digest;
	RoutePlan  *rp;

	Assert(!sink_is_append(cfg));
	PushActiveSnapshot(GetTransactionSnapshot());
	require_families();
	active = ash_keyring_active(ASH_KEYS_MESSAGE_DIGEST);
	/* dropped while streaming: the kept plan would fail, the label crash */
	require_route_target(route, true);

	/* a version removed too early, or the active one's lease to renew */
	{
		bool		retired = witness_judge(cfg);
		bool		renewed = witness_touch(cfg, active->version);

		if (retired || renewed)
			witness_write(ck);
	}

	rp = route_plan(cfg, route);

	claimed = find_claim(ck, commit_lsn, ordinal);
	if (claimed != NULL)
	{
		const uint8 *p = (const uint8 *) VARDATA_ANY(claimed);
		const AshKey *k;
		bytea	   *again;

		if (VARSIZE_ANY_EXHDR(claimed) != DIGEST_LEN || p[0] != ASH_MESSAGE_DIGEST_FORMAT_V1)
			ash_halt("message_claim_conflict", "a claim's content digest is not decodable");
		k = ash_keyring_get(ASH_KEYS_MESSAGE_DIGEST, (int32) get_u32(p + 1));
		if (k == NULL)
			ash_halt("keyring_version_missing", "family %s: the version of a message claim",
					 ASH_KEYS_MESSAGE_DIGEST);
		content_input(&input, prefix, content, len);
		again = versioned_mac(k, &input);
		if (!ash_digest_equal((const uint8 *) VARDATA(again), p, DIGEST_LEN))
			ash_halt("message_claim_conflict",
					 "a claimed source position carries other message content");
		ereport(LOG,
				(errmsg("ash_replicant event=message.replayed sink=%s commit_lsn=%X/%X ordinal=%d",
						cfg->sink_name, LSN_FORMAT_ARGS(commit_lsn), ordinal)));
		PopActiveSnapshot();
		return;
	}

	operation_input(&input, ck, commit_lsn, ordinal);
	opkey = versioned_mac(active, &input);
	content_input(&input, prefix, content, len);
	digest = versioned_mac(active, &input);

	run_effect(cfg, rp, prefix, content, len, opkey, digest);
	insert_claim(rp, opkey, digest);
	PopActiveSnapshot();
}
