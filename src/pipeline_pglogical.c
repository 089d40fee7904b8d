/*-------------------------------------------------------------------------
 *
 * pipeline_pglogical.c
 *	  A pipeline session over pglogical_output: its start options, its
 *	  decoder, and the completion of what pglogical's protocol omits.
 *
 * NOTES
 *	  Options (pglogical.c, pglogical_start_replication, is what a
 *	  pglogical subscriber sends): startup parameter format 1, protocol 1,
 *	  the destination database's encoding as expected_encoding (pglogical
 *	  refuses to start when the source database's differs: its native
 *	  protocol cannot convert), binary transfer of every kind refused (text
 *	  only: the apply parses text with the target's input functions, as for
 *	  pgoutput), pglogical.forward_origins 'all' (pglogical's default, an
 *	  empty list, drops every transaction that arrived at the source
 *	  through replication; pgoutput forwards them, and so does the mirror),
 *	  the configured replication sets, and an unbounded relation metadata
 *	  cache.  hooks.setup_function is sent as pglogical's own subscriber
 *	  sends it (pglogical 1.x required it; 2.x ignores it).
 *
 *	  Completion.  A pglogical Relation message names the columns and marks
 *	  the replica-identity key, nothing more.  Each one is completed from
 *	  the source's catalog, on a probe connection of this session, by the
 *	  description coverage uses (source_catalog.c): every column's type and
 *	  typmod, and the table's replica identity.  What the catalog says must
 *	  agree with what the stream said, or the session halts: a column the
 *	  catalog does not describe (dropped since; generated columns, which
 *	  pglogical sends, are described) halts source_type_invalid, a key that
 *	  differs source_replica_identity, a table gone decoder_table_missing.
 *	  The catalog is read as it is now, not as of the change: a type
 *	  changed since is judged by coverage (the text is parsed with the
 *	  target's input function either way), and against the table's
 *	  publication record (loaded at the start): a column retyped since in a
 *	  way that rewrote its rows halts source_type_invalid, as pgoutput's
 *	  next Relation message would (a session's first description has no
 *	  earlier one to compare).  Under REPLICA IDENTITY FULL
 *	  pglogical marks no key column and sends the whole old row as 'K';
 *	  the completed relation marks every column, as pgoutput does, and the
 *	  old row is relabelled 'O'.
 *
 *	  Withheld changes.  Under REPLICA IDENTITY NOTHING (or no key)
 *	  pglogical drops a DELETE, which has no old row, and sends an UPDATE
 *	  with its new row only; its Relation message marks no key column then,
 *	  as under FULL, so the description cannot tell.  The stream can:
 *	  pglogical sends a Relation message right before a change of its
 *	  table, so one of a mapped table followed by anything else preceded a
 *	  dropped DELETE; and under FULL every UPDATE carries its old row, so
 *	  one without it, of a table described with no key column, was made
 *	  without an identity.  Both halt source_replica_identity before the
 *	  transaction is applied (skipped whole at or below the watermark): the
 *	  change is gone from the source for good (docs/pglogical.md).
 *
 *	  A relation no mapping names is passed on
 *	  as the stream described it: apply ignores an ignored table's changes
 *	  and halts source_table_unmapped on any other, as for pgoutput, and
 *	  neither needs its types (nor a table dropped since to still exist).
 *
 *	  TRUNCATE.  pglogical does not decode TRUNCATE: a trigger queues it in
 *	  pglogical.queue, whose row reaches the stream, right after the
 *	  truncate in its transaction, as an insert naming the table by schema
 *	  and name.  It is applied as pgoutput's Truncate message would be
 *	  (apply_truncate: the mapping's on_truncate; an ignored table's is
 *	  ignored), for the relation that name denotes: the one the stream
 *	  described this session under that name, which the source's catalog
 *	  must still give that name (else the name was reused or the table
 *	  dropped since: decoder_table_missing); or, when the stream has not
 *	  described it, the catalog's, completed as above and handed to apply
 *	  as a Relation message first.  A table no mapping names needs
 *	  neither: apply is handed a Relation message of its name alone (no
 *	  columns) and judges it as pgoutput's (ignored, or unmapped).  A
 *	  transaction at or below the watermark (delivered again, or skipped by
 *	  recovery) is not resolved: apply skips it whole.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "apply.h"
#include "coverage.h"
#include "decode_pglogical.h"
#include "errors.h"
#include "pipeline_pglogical.h"
#include "relmap.h"
#include "source_catalog.h"

static MemoryContext pgl_cxt = NULL;
static AshPipelineConfig *pgl_cfg;
static AshPglogicalState pgl_state;
static AshConn *pgl_probe = NULL;
static char *pgl_set_names;		/* comma-separated quoted identifiers */
static XLogRecPtr pgl_final_lsn = InvalidXLogRecPtr;

/*
 * The relations completed this session: id, replica identity, names;
 * whether a mapping names it, and whether the stream's last Relation
 * message of it marked no key column (REPLICA IDENTITY FULL, NOTHING, or
 * no key: see the file header).
 */
typedef struct PglRel
{
	uint32		relid;
	char		replident;
	bool		mapped;
	bool		keyless;
	char	   *nspname;
	char	   *relname;
} PglRel;

static PglRel *pgl_rels;
static int	pgl_nrels;
static int	pgl_maxrels;

/*
 * A mapped relation the stream just described: pglogical sends a Relation
 * message right before a change of it, so the next message must be one;
 * 0: none pending.
 */
static uint32 pgl_described = 0;

/* The publication records of the mapped tables (by source OID) */
typedef struct PglRecord
{
	uint32		relid;
	char	   *published;
} PglRecord;

static List *pgl_records = NIL;

/*
 * Ids for relations known by name only (a queued TRUNCATE of a table no
 * mapping names, not described this session), counted down from the top
 * of the OID space, which a source relation does not reach in practice;
 * should one ever collide, its Relation message replaces the name-only
 * description (same names, or the table is judged by its new ones).
 */
static uint32 pgl_next_synthetic;

void
ash_pglogical_session_begin(AshPipelineConfig *cfg)
{
	MemoryContext old = CurrentMemoryContext;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	Datum		d;

	if (pgl_probe != NULL)
		ash_conn_close(pgl_probe);
	pgl_probe = NULL;
	if (pgl_cxt == NULL)
		pgl_cxt = AllocSetContextCreate(TopMemoryContext, "ash_replicant pglogical",
										ALLOCSET_SMALL_SIZES);
	MemoryContextReset(pgl_cxt);
	memset(&pgl_state, 0, sizeof(pgl_state));
	pgl_state.expected_encoding = GetDatabaseEncodingName();
	pgl_cfg = cfg;
	pgl_final_lsn = InvalidXLogRecPtr;
	pgl_described = 0;
	pgl_records = NIL;
	pgl_nrels = 0;
	pgl_next_synthetic = PG_UINT32_MAX;
	pgl_maxrels = 16;
	pgl_rels = MemoryContextAlloc(pgl_cxt, sizeof(PglRel) * pgl_maxrels);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	values[0] = CStringGetTextDatum(cfg->sink_name);
	if (SPI_execute_with_args("SELECT pg_catalog.string_agg(pg_catalog.quote_ident(s), ',')"
							  "  FROM ash_replicant.pipelines p,"
							  "       pg_catalog.unnest(p.replication_sets) s"
							  " WHERE p.sink_name = $1",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		elog(ERROR, "ash_replicant: reading the replication sets failed");
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	pgl_set_names = isnull ? NULL : MemoryContextStrdup(pgl_cxt, TextDatumGetCString(d));
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(old);
	if (pgl_set_names == NULL)
		ash_halt("config_invalid", "decoder pglogical requires replication_sets");
}

void
ash_pglogical_note_recorded(uint32 relid, const char *published)
{
	PglRecord  *r = MemoryContextAlloc(pgl_cxt, sizeof(PglRecord));
	MemoryContext old = MemoryContextSwitchTo(pgl_cxt);

	r->relid = relid;
	r->published = pstrdup(published);
	pgl_records = lappend(pgl_records, r);
	MemoryContextSwitchTo(old);
}

char *
ash_pglogical_plugin_options(AshConn *conn)
{
	StringInfoData o;

	initStringInfo(&o);
	appendStringInfo(&o,
					 "startup_params_format '1', min_proto_version '1', max_proto_version '1',"
					 " expected_encoding %s,"
					 " \"binary.want_internal_basetypes\" '0',"
					 " \"binary.want_binary_basetypes\" '0',"
					 " \"hooks.setup_function\" 'pglogical.pglogical_hooks_setup',"
					 " \"pglogical.forward_origins\" 'all',"
					 " \"pglogical.replication_set_names\" %s,"
					 " relmeta_cache_size '-1'",
					 ash_conn_quote_repl_literal(GetDatabaseEncodingName()),
					 ash_conn_quote_repl_literal(pgl_set_names));
	return o.data;
}

static PglRel *
rel_by_id(uint32 relid)
{
	for (int i = 0; i < pgl_nrels; i++)
		if (pgl_rels[i].relid == relid)
			return &pgl_rels[i];
	return NULL;
}

static char
replident_of(uint32 relid)
{
	PglRel	   *r = rel_by_id(relid);

	return r ? r->replident : 0;
}

static PglRel *
remember(const AshRelation *rel, bool mapped, bool keyless)
{
	PglRel	   *r = rel_by_id(rel->relid);

	if (r == NULL)
	{
		if (pgl_nrels == pgl_maxrels)
		{
			pgl_maxrels *= 2;
			pgl_rels = repalloc(pgl_rels, sizeof(PglRel) * pgl_maxrels);
		}
		r = &pgl_rels[pgl_nrels++];
		r->relid = rel->relid;
	}
	else
	{
		pfree(r->nspname);
		pfree(r->relname);
	}
	r->replident = rel->replident;
	r->mapped = mapped;
	r->keyless = keyless;
	r->nspname = MemoryContextStrdup(pgl_cxt, rel->nspname);
	r->relname = MemoryContextStrdup(pgl_cxt, rel->relname);
	return r;
}

/* The session's catalog connection, to the configured source only. */
static AshConn *
probe(void)
{
	if (pgl_probe == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(pgl_cxt);

		pgl_probe = ash_conn_open(pgl_cfg->connection, ASH_CONN_PROBE,
								  "ash_replicant pglogical");
		MemoryContextSwitchTo(old);
		if (!ash_source_identity_matches(pgl_probe, pgl_cfg->source_system_identifier,
										 pgl_cfg->source_database))
			ash_halt("source_identity_mismatch",
					 "the source is not the configured system and database");
	}
	return pgl_probe;
}

/*
 * The catalog's types now, which complete a Relation message, may be newer
 * than the change it describes: a mapped column retyped since the table's
 * publication record was read (at the start, or by the census) in a way
 * that rewrote its rows at the source halts source_type_invalid, as
 * pgoutput's next Relation message does (and the census would): whether
 * the change came before the retype or after, its values are not the
 * mirror's.  An acknowledged gap's records are read anew.
 */
static void
judge_recorded_types(const AshRelation *rel, const char *qname)
{
	ListCell   *lc;

	foreach(lc, pgl_records)
	{
		PglRecord  *r = lfirst(lc);

		if (r->relid == rel->relid &&
			ash_source_retyped_since(probe(), rel->relid, r->published,
									 ash_config_find_mapping(pgl_cfg, rel->nspname, rel->relname)))
			ash_halt("source_type_invalid",
					 "table %s: mapped columns were retyped since the pipeline recorded them, which rewrote their rows at the source",
					 qname);
	}
}

/* Types and replica identity of a described relation, from the catalog. */
static void
complete_relation(AshRelation *rel)
{
	AshSourceRel *r = palloc0(sizeof(AshSourceRel));
	const char *qname = quote_qualified_identifier(rel->nspname, rel->relname);
	bool		keyless = true;

	/* apply ignores it or halts source_table_unmapped: no types needed */
	if (!ash_coverage_is_mapped(pgl_cfg->mappings, rel->nspname, rel->relname))
	{
		rel->replident = 'd';
		remember(rel, false, false);
		return;
	}
	r->name.nspname = rel->nspname;
	r->name.relname = rel->relname;
	r->generated = true;		/* pglogical sends generated columns */
	ash_source_describe_tables(probe(), list_make1(r));
	if (!r->exists)
		ash_halt("decoder_table_missing", "table %s is not in the source's catalog", qname);
	judge_recorded_types(rel, qname);
	rel->replident = r->desc.replident;
	for (int i = 0; i < rel->natts; i++)
	{
		AshRelColumn *c = &rel->cols[i];
		AshSourceColumn *sc = NULL;
		bool		key;

		for (int j = 0; j < r->desc.natts && sc == NULL; j++)
			if (strcmp(r->desc.cols[j].name, c->name) == 0)
				sc = &r->desc.cols[j];
		if (sc == NULL)
			ash_halt("source_type_invalid",
					 "table %s column %s: the source's catalog gives no type for it",
					 qname, quote_identifier(c->name));
		key = rel->replident == 'f' ? false : sc->in_identity;
		keyless &= !c->is_key;
		if (key != c->is_key)
			ash_halt("source_replica_identity",
					 "table %s: the replica identity changed while its changes were in flight",
					 qname);
		c->type_oid = sc->type_oid;
		c->typmod = sc->typmod;
		c->is_key = sc->in_identity;
		/* a user type is known by its name (coverage.c) */
		if (c->type_oid >= FirstGenbkiObjectId && sc->type_name != NULL)
			ash_relmap_update_type(c->type_oid, "", sc->type_name);
	}
	remember(rel, true, keyless);
	pgl_described = rel->relid;
}

/*
 * The relation a queued TRUNCATE names, as this session's stream knows it
 * (see the file header); the catalog's, handed to apply first, when the
 * stream has not described it.
 */
static uint32
truncated_relid(const char *nspname, const char *relname)
{
	const char *params[2] = {nspname, relname};
	const char *qname = quote_qualified_identifier(nspname, relname);
	PGresult   *res;
	uint32		oid = 0;
	uint32		known = 0;
	AshSourceRel *r;
	AshChange	c;
	AshRelation *rel;

	for (int i = 0; i < pgl_nrels && known == 0; i++)
		if (strcmp(pgl_rels[i].nspname, nspname) == 0 &&
			strcmp(pgl_rels[i].relname, relname) == 0)
			known = pgl_rels[i].relid;

	/* no mapping names it: apply judges the name alone (ignored, unmapped) */
	if (!ash_coverage_is_mapped(pgl_cfg->mappings, nspname, relname))
	{
		if (known != 0)
			return known;
		/* an id no relation of this session has: the names stand for it */
		oid = pgl_next_synthetic--;
		memset(&c, 0, sizeof(c));
		c.kind = ASH_CHANGE_RELATION;
		c.xid = InvalidTransactionId;
		rel = &c.u.relation;
		rel->relid = oid;
		rel->nspname = (char *) nspname;
		rel->relname = (char *) relname;
		rel->replident = 'd';
		rel->natts = 0;
		rel->cols = palloc0(sizeof(AshRelColumn));
		remember(rel, false, false);
		ash_apply_change(&c);
		return oid;
	}

	res = ash_conn_exec_params(probe(),
							   "SELECT c.oid::pg_catalog.int8 FROM pg_catalog.pg_class c"
							   " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
							   " WHERE n.nspname = $1 AND c.relname = $2",
							   2, params, true);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "probe");
	if (PQntuples(res) == 1)
		oid = (uint32) strtoul(PQgetvalue(res, 0, 0), NULL, 10);
	PQclear(res);
	if (oid == 0 || (known != 0 && known != oid))
		ash_halt("decoder_table_missing",
				 "the table %s a queued TRUNCATE names is no longer the relation the stream described",
				 qname);
	if (known != 0)
		return known;

	/* described from the catalog, as a Relation message would be */
	r = palloc0(sizeof(AshSourceRel));
	r->name.nspname = (char *) nspname;
	r->name.relname = (char *) relname;
	r->generated = true;
	ash_source_describe_tables(probe(), list_make1(r));
	if (!r->exists)
		ash_halt("decoder_table_missing", "table %s is not in the source's catalog", qname);
	memset(&c, 0, sizeof(c));
	c.kind = ASH_CHANGE_RELATION;
	c.xid = InvalidTransactionId;
	rel = &c.u.relation;
	rel->relid = oid;
	rel->nspname = (char *) nspname;
	rel->relname = (char *) relname;
	rel->replident = r->desc.replident;
	rel->natts = r->desc.natts;
	rel->cols = palloc0(sizeof(AshRelColumn) * Max(r->desc.natts, 1));
	for (int i = 0; i < r->desc.natts; i++)
	{
		AshSourceColumn *sc = &r->desc.cols[i];

		rel->cols[i].name = sc->name;
		rel->cols[i].type_oid = sc->type_oid;
		rel->cols[i].typmod = sc->typmod;
		rel->cols[i].is_key = sc->in_identity;
		if (sc->type_oid >= FirstGenbkiObjectId && sc->type_name != NULL)
			ash_relmap_update_type(sc->type_oid, "", sc->type_name);
	}
	remember(rel, true, false);
	ash_apply_change(&c);
	return oid;
}

/* A transaction apply skips whole: at or below the watermark */
static bool
skipped_whole(void)
{
	return !XLogRecPtrIsInvalid(pgl_final_lsn) && pgl_final_lsn <= ash_apply_watermark();
}

/*
 * What pglogical withholds of a table without a replica identity (see the
 * file header): a Relation message of a mapped table not followed by a
 * change of it (the delete it preceded was dropped), or an update without
 * its old row of a table described with no key column.
 */
static void
judge_withheld(const AshChange *change)
{
	uint32		described = pgl_described;
	uint32		relid = 0;
	PglRel	   *r;

	pgl_described = 0;
	if (change->kind == ASH_CHANGE_INSERT)
		relid = change->u.insert.relid;
	else if (change->kind == ASH_CHANGE_UPDATE)
		relid = change->u.update.relid;
	else if (change->kind == ASH_CHANGE_DELETE)
		relid = change->u.delete.relid;
	if (skipped_whole())
		return;
	if (described != 0 && relid != described)
	{
		r = rel_by_id(described);
		ash_halt("source_replica_identity",
				 "table %s: a delete pglogical did not send (made without a replica identity, it has no old row)",
				 quote_qualified_identifier(r->nspname, r->relname));
	}
	if (relid != 0 && change->kind == ASH_CHANGE_UPDATE && change->u.update.oldkind == 0 &&
		(r = rel_by_id(relid)) != NULL && r->mapped && r->keyless)
		ash_halt("source_replica_identity",
				 "table %s: an update sent without its old row (made without a replica identity): its old key, and the deletes of that time, are lost",
				 quote_qualified_identifier(r->nspname, r->relname));
}

bool
ash_pglogical_decode(const char *data, int len, AshChange *change)
{
	const char *err = NULL;
	AshPglogicalResult res = ash_decode_pglogical(&pgl_state, data, len, change, &err);

	if (res != ASH_PGL_ERROR)
		judge_withheld(change);
	switch (res)
	{
		case ASH_PGL_ERROR:
			ash_halt("protocol_violation", "undecodable pglogical message: %s", err);
		case ASH_PGL_NONE:
			return false;
		case ASH_PGL_QUEUED_TRUNCATE:
			{
				char	   *nspname = pgl_state.truncated_nspname;
				char	   *relname = pgl_state.truncated_relname;

				/* a transaction the watermark covers is skipped whole */
				if (skipped_whole())
					return false;
				memset(change, 0, sizeof(*change));
				change->kind = ASH_CHANGE_TRUNCATE;
				change->xid = InvalidTransactionId;
				change->u.truncate.nrelids = 1;
				change->u.truncate.relids = palloc(sizeof(uint32));
				change->u.truncate.relids[0] = truncated_relid(nspname, relname);
				return true;
			}
		case ASH_PGL_CHANGE:
			break;
	}
	switch (change->kind)
	{
		case ASH_CHANGE_BEGIN:
			pgl_final_lsn = change->u.begin.final_lsn;
			break;
		case ASH_CHANGE_RELATION:
			complete_relation(&change->u.relation);
			break;
		case ASH_CHANGE_UPDATE:
			if (change->u.update.oldkind == 'K' && replident_of(change->u.update.relid) == 'f')
				change->u.update.oldkind = 'O';
			break;
		case ASH_CHANGE_DELETE:
			if (replident_of(change->u.delete.relid) == 'f')
				change->u.delete.oldkind = 'O';
			break;
		default:
			break;
	}
	return true;
}
