/*-------------------------------------------------------------------------
 *
 * census.c
 *	  Periodic re-verification of mapping and source coverage.
 *
 * NOTES
 *	  The census is what lets status claim "healthy": every interval_ms
 *	  (with jitter, scheduled only after the previous run ended) the
 *	  pipeline re-checks, writing nothing but an admitted contract addition:
 *
 *	  - destination: every mapped target still exists and passes the
 *		rules of registration (ash_mapping_recheck), and the contract
 *		manifest rebuilt now has the fingerprint recorded at admission
 *		(a target column retyped or dropped is drift);
 *	  - source, on a read-only probe connection: the judgement activation
 *		renders before binding (ash_census_activation) and preflight
 *		renders as its publication/coverage/columns checks -- one
 *		implementation, source_catalog.c + coverage.c:
 *		1. the probe's system identifier and database are the configured
 *		   ones (source_identity_mismatch);
 *		2. the decoder's table set exists (source_publication_missing,
 *		   decoder_extension_missing) and every configured table is there
 *		   (decoder_table_missing);
 *		3. every table of the set is mapped or ignored, no ignore names a
 *		   mapped table (source_table_unmapped,
 *		   ignore_collides_with_mapping);
 *		3a. the publication's contract can be honoured for every mapped
 *		   table: it publishes insert, update, delete and truncate, no row
 *		   filter, no column list withholding columns, no
 *		   publish_via_partition_root over a partitioned table
 *		   (publication_contract_incompatible; coverage.h);
 *		4. every mapped table of the set: columns, types and replica
 *		   identity (source_column_unmapped, source_column_missing,
 *		   source_type_invalid, source_replica_identity,
 *		   destination_table_missing).
 *		Warnings (ignore_never_matches, mapping_never_matches) are logged
 *		as coverage.warning events: at every activation, then whenever they
 *		change.
 *		5. (census, with a snapshot configured) no table of the attempt
 *		   left the publication and came back since it was listed
 *		   (find_publication_gap): one that did ends the session, and the
 *		   next one copies it again (snapshot.c).
 *		6. (census, no gap found) every mapped table: a written column its
 *		   record of the source columns feeding its target lacks (none yet:
 *		   the columns its publication record held at the session's start),
 *		   into a target holding rows, halts source_column_added as the
 *		   stream would at the table's next change (column_record.c),
 *		   which an idle table never brings -- once the stream has passed
 *		   the source position the census read the catalog at (before it,
 *		   a change from before the addition may still come and be judged
 *		   by the stream first).
 *
 *	  Drift halts with the specific reason (census_drift where none fits).
 *	  A source that cannot be probed (unreachable, timeout, a refused
 *	  probe) is a fault: at activation the session fails and reconnects
 *	  with back-off before anything is bound or applied; in the census the
 *	  caller counts consecutive faults and halts census_unverifiable at the
 *	  bound.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/pg_prng.h"
#include "executor/spi.h"
#include "storage/ipc.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "ash_replicant.h"
#include "census.h"
#include "change.h"
#include "column_record.h"
#include "coverage.h"
#include "errors.h"
#include "libpq_conn.h"
#include "mapping_validate.h"
#include "publication_record.h"
#include "qualname.h"
#include "source_catalog.h"
#include "syncrep.h"

long
ash_census_next_delay(AshPipelineConfig *cfg)
{
	double		j = cfg->census.jitter_ratio;
	double		r = pg_prng_double(&pg_global_prng_state) * 2.0 - 1.0;	/* [-1, 1) */

	return (long) (cfg->census.interval_ms * (1.0 + j * r));
}

/* ash_census_targets_changed() */
static bool targets_changed = false;

/* ash_census_watch_xact(): the transaction, and whether it aborted */
static TransactionId watched_xid = InvalidTransactionId;
static bool watched_aborted = false;

void
ash_census_watch_xact(TransactionId xid)
{
	watched_xid = xid;
	watched_aborted = false;
}

bool
ash_census_watched_xact_aborted(void)
{
	return watched_aborted;
}

/*
 * Has the watched transaction aborted at the source?  Its full id from
 * the 32-bit one and the source's next id (the same epoch, or the one
 * before when the low half is above the next's); a status the source no
 * longer keeps (NULL) is not an abort.
 */
static void
observe_watched_xact(AshConn *conn)
{
	char		xid[16];
	const char *params[1] = {xid};
	PGresult   *res;

	if (!TransactionIdIsValid(watched_xid) || watched_aborted)
		return;
	snprintf(xid, sizeof(xid), "%u", watched_xid);
	res = ash_conn_exec_params(conn, conn->server_version >= 130000 ?
							   "SELECT pg_catalog.pg_xact_status(((n / 4294967296 - (CASE WHEN $1::pg_catalog.int8 > n % 4294967296 THEN 1 ELSE 0 END))"
							   " * 4294967296 + $1::pg_catalog.int8)::pg_catalog.text::pg_catalog.xid8)"
							   " FROM (SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::pg_catalog.text::pg_catalog.int8 AS n) s" :
							   "SELECT pg_catalog.txid_status((n / 4294967296 - (CASE WHEN $1::pg_catalog.int8 > n % 4294967296 THEN 1 ELSE 0 END))"
							   " * 4294967296 + $1::pg_catalog.int8)"
							   " FROM (SELECT pg_catalog.txid_snapshot_xmax(pg_catalog.txid_current_snapshot()) AS n) s",
							   1, params, true);
	watched_aborted = PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		!PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), "aborted") == 0;
	PQclear(res);
}

/* ash_census_publication_gap(): malloc'd, NULL when none */
static char *publication_gap = NULL;

const char *
ash_census_publication_gap(void)
{
	return publication_gap;
}

bool
ash_census_targets_changed(void)
{
	return targets_changed;
}

static void
check_destination(AshPipelineConfig *cfg, AshCheckpointKey *key)
{
	ListCell   *lc;
	MemoryContext cxt = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	/* a pipeline with nothing to write finds it here, not at its next write */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(cfg->owner)))
		ash_halt("destination_owner_invalid", "the sink owner role no longer exists");
	foreach(lc, cfg->mappings)
	{
		AshMapping *m = lfirst(lc);

		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(m->target_relid)))
			ash_halt("census_drift", "the target of mapped source table %s.%s no longer exists",
					 quote_identifier(m->source_schema), quote_identifier(m->source_table));
	}

	/*
	 * Every registration judged again, written to or not (the apply judges
	 * a target again before writing to it after a change).
	 */
	{
		AshMappingSink *sink = ash_mapping_sink_load(cfg->sink_name, false, false);

		foreach(lc, ash_mapping_load_sink(cfg->sink_name))
			ash_mapping_recheck(lfirst(lc), sink, false);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	/*
	 * The mapping as admitted: rebuilt contract vs recorded fingerprint.  A
	 * change admitted (a target column added or widened) leaves the apply
	 * layer's cached targets stale (the pipeline rebuilds them).
	 */
	if (key != NULL &&
		ash_contract_recheck(cfg->sink_name, key->system_id, key->database, key->slot_name))
		targets_changed = true;
}

/* ---------------------------------------------------------------------
 * Source coverage: the judgement of activation and of every census.
 * ---------------------------------------------------------------------
 */

/* Warnings last logged (malloc'd "reason(context);..."), to log changes only. */
static char *logged_warnings = NULL;

/* What the judgement needs from the destination catalogs. */
typedef struct CoverageInputs
{
	List	   *specs;			/* AshMappingSpec * */
	List	   *mappings;		/* AshMapping *, same order */
	AshTableSetSpec tableset;
} CoverageInputs;

/*
 * Read the mappings as stored (the same loader preflight uses, so the
 * SCD2 business key is known) and the table-set settings of the decoder.
 * The worker restarts on any configuration change (config_version), so
 * these are the mappings it applies.
 */
static void
load_inputs(AshPipelineConfig *cfg, CoverageInputs *in)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	memset(in, 0, sizeof(*in));
	in->tableset.decoder = cfg->decoder;
	in->tableset.publication = cfg->publication;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	MemoryContextSwitchTo(cxt);
	PushActiveSnapshot(GetTransactionSnapshot());
	ash_source_load_mappings(cfg->sink_name, &in->specs, &in->mappings);

	if (cfg->decoder != NULL && strcmp(cfg->decoder, "pgoutput") != 0)
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "ash_replicant: SPI_connect failed");
		values[0] = CStringGetTextDatum(cfg->sink_name);
		if (SPI_execute_with_args("SELECT replication_sets::pg_catalog.text, tables,"
								  " allow_keyless_tables"
								  " FROM ash_replicant.pipelines WHERE sink_name = $1",
								  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: reading the table-set settings failed");
		if (SPI_processed == 1)
		{
			HeapTuple	tup = SPI_tuptable->vals[0];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			bool		isnull;
			Datum		tables;
			MemoryContext old = MemoryContextSwitchTo(cxt);

			in->tableset.replication_sets = SPI_getvalue(tup, desc, 1);
			in->tableset.allow_keyless = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull)) &&
				!isnull;
			tables = SPI_getbinval(tup, desc, 2, &isnull);
			if (!isnull)
			{
				Datum	   *elems;
				bool	   *nulls;
				int			n;
				List	   *names = NIL;

				deconstruct_array(DatumGetArrayTypeP(tables), TEXTOID, -1, false,
								  TYPALIGN_INT, &elems, &nulls, &n);
				/* stored canonical: "schema"."table" (qualname.c) */
				for (int i = 0; i < n; i++)
				{
					char	   *schema;
					char	   *table;
					AshSourceName *nm;

					if (nulls[i] ||
						!ash_parse_qualified_name(TextDatumGetCString(elems[i]), &schema, &table))
						continue;
					nm = palloc(sizeof(AshSourceName));
					nm->nspname = schema;
					nm->relname = table;
					names = lappend(names, nm);
				}
				in->tableset.tables = names;
			}
			MemoryContextSwitchTo(old);
		}
		SPI_finish();
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}

/* Log the coverage warnings as events, when they differ from the last ones. */
static void
log_warnings(AshPipelineConfig *cfg, List *warnings)
{
	StringInfoData sig;
	ListCell   *lc;

	initStringInfo(&sig);
	foreach(lc, warnings)
	{
		AshCoverageVerdict *w = lfirst(lc);

		appendStringInfo(&sig, "%s(%s);", w->reason, w->context ? w->context : "");
	}
	if (logged_warnings != NULL && strcmp(logged_warnings, sig.data) == 0)
		return;
	if (logged_warnings != NULL)
		free(logged_warnings);
	logged_warnings = strdup(sig.data);

	foreach(lc, warnings)
	{
		AshCoverageVerdict *w = lfirst(lc);

		/* the context names tables only: structural */
		ereport(LOG,
				(errmsg("ash_replicant event=coverage.warning sink=%s reason=%s",
						cfg->sink_name, w->reason),
				 w->context ? errdetail_internal("%s", w->context) : 0));
	}
}

/*
 * On an open probe connection: verify the source identity, fetch and
 * describe the decoder's table set (source_catalog.c) and judge its
 * coverage (coverage.c) -- exactly what preflight judges.  A failure halts
 * with its reason; warnings are logged as events.  A probe that fails
 * raises ERRCODE_CONNECTION_FAILURE (the caller's fault to count).  No
 * destination transaction is open while the source is probed.
 * described (NULL: not wanted) is set to the table set as read
 * (AshSourceRel *), *mappings to the mappings judged, both in a child of
 * the caller's memory context.
 */
static void
judge_source(AshPipelineConfig *cfg, AshConn *conn, const char *when, List **described,
			 List **mappings)
{
	MemoryContext cxt = AllocSetContextCreate(CurrentMemoryContext, "ash_replicant coverage",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	CoverageInputs in;
	AshSourceCoverage cov;
	AshPublicationFacts pub;
	List	   *rels = NIL;
	const char *absent;
	char	   *missing;

	/* identity first: judge nothing of a foreign source */
	if (!ash_source_identity_matches(conn, cfg->source_system_identifier, cfg->source_database))
		ash_halt("source_identity_mismatch", "%s probe: the source is not the configured system and database",
				 when);

	load_inputs(cfg, &in);

	absent = ash_source_read_table_set(conn, &in.tableset, &rels, &pub);
	if (absent != NULL)
		ash_halt(absent, "%s probe: the table set is absent", when);
	missing = ash_source_missing_tables(&in.tableset, &rels);
	if (missing != NULL)
		ash_halt("decoder_table_missing", "%s", missing);
	missing = ash_source_keyless_tables(&in.tableset, rels);
	if (missing != NULL)
		ash_halt("decoder_table_keyless", "%s", missing);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	MemoryContextSwitchTo(cxt);
	ash_source_judge_coverage(in.specs, in.mappings, cfg->ignored_sources, rels, &pub, &cov);
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	if (cov.table_set.reason != NULL)
		ash_halt(cov.table_set.reason, "%s", cov.table_set.context ? cov.table_set.context : when);
	if (cov.publication.reason != NULL)
		ash_halt(cov.publication.reason, "%s", cov.publication.context);
	if (cov.columns.reason != NULL)
		ash_halt(cov.columns.reason, "%s", cov.columns.context ? cov.columns.context : when);
	log_warnings(cfg, cov.warnings);

	MemoryContextSwitchTo(old);
	if (described != NULL)
	{
		*described = rels;
		*mappings = in.mappings;
	}
	else
		MemoryContextDelete(cxt);
}

/*
 * Run fn on an activation probe connection to the source, closed whatever
 * happens (a failure re-raised as it came).
 */
static void
with_activation_probe(AshPipelineConfig *cfg, void (*fn) (AshPipelineConfig *, AshConn *, void *),
					  void *arg)
{
	AshConn    *volatile conn = NULL;

	PG_TRY();
	{
		conn = ash_conn_open(cfg->connection, ASH_CONN_PROBE, "ash_replicant activation");
		fn(cfg, conn, arg);
	}
	PG_CATCH();
	{
		if (conn)
			ash_conn_close(conn);
		PG_RE_THROW();
	}
	PG_END_TRY();
	ash_conn_close(conn);
}

static void
judge_at_activation(AshPipelineConfig *cfg, AshConn *conn, void *arg)
{
	judge_source(cfg, conn, "activation", NULL, NULL);
}

void
ash_census_activation(AshPipelineConfig *cfg)
{
	if (logged_warnings != NULL)
		free(logged_warnings);
	logged_warnings = NULL;		/* every activation logs its warnings */

	with_activation_probe(cfg, judge_at_activation, NULL);
	ereport(LOG,
			(errmsg("ash_replicant event=coverage.pass sink=%s stage=activation", cfg->sink_name)));
}

static void
find_tables_with_rows(AshPipelineConfig *cfg, AshConn *conn, void *arg)
{
	CoverageInputs in;
	List	   *rels = NIL;

	if (!ash_source_identity_matches(conn, cfg->source_system_identifier, cfg->source_database))
		ash_halt("source_identity_mismatch", "the source is not the configured system and database");
	load_inputs(cfg, &in);
	if (ash_source_read_table_set(conn, &in.tableset, &rels, NULL) == NULL)
		*(List **) arg = ash_source_tables_with_rows(conn, in.mappings, rels);
}

List *
ash_census_tables_with_rows(AshPipelineConfig *cfg)
{
	List	   *tables = NIL;

	with_activation_probe(cfg, find_tables_with_rows, &tables);
	return tables;
}

/*
 * The configured tables as AshRelations (relid: position in tables + 1),
 * from one snapshot of the source's catalogs, with the halts of
 * judge_source for a foreign source and an absent or keyless table.
 */
static void
describe_relations(AshPipelineConfig *cfg, AshConn *conn, void *arg)
{
	AshTableSetSpec spec;
	List	   *rels = NIL;
	List	   *out = NIL;
	const char *absent;
	char	   *missing;
	ListCell   *lc;
	uint32		relid = 0;

	if (!ash_source_identity_matches(conn, cfg->source_system_identifier, cfg->source_database))
		ash_halt("source_identity_mismatch", "schema check probe: the source is not the configured system and database");

	/*
	 * The table set as configured (the worker restarts on a change), read
	 * without a destination transaction: this runs inside the apply's
	 * when a change does not fit its description
	 */
	ash_source_table_set_of(cfg, &spec);

	absent = ash_source_read_table_set(conn, &spec, &rels, NULL);
	if (absent != NULL)
		ash_halt(absent, "schema check probe: the table set is absent");
	missing = ash_source_missing_tables(&spec, &rels);
	if (missing != NULL)
		ash_halt("decoder_table_missing", "%s", missing);
	missing = ash_source_keyless_tables(&spec, rels);
	if (missing != NULL)
		ash_halt("decoder_table_keyless", "%s", missing);

	foreach(lc, rels)
	{
		AshSourceRel *r = lfirst(lc);
		AshDescribedRelation *d = palloc0(sizeof(AshDescribedRelation));
		AshRelation *rel = &d->rel;

		d->type_names = palloc0(sizeof(char *) * Max(r->desc.natts, 1));
		rel->relid = ++relid;
		rel->nspname = r->name.nspname;
		rel->relname = r->name.relname;
		rel->replident = r->desc.replident;
		rel->natts = r->desc.natts;
		rel->cols = palloc0(sizeof(AshRelColumn) * Max(r->desc.natts, 1));
		for (int i = 0; i < r->desc.natts; i++)
		{
			rel->cols[i].is_key = r->desc.cols[i].in_identity;
			rel->cols[i].name = r->desc.cols[i].name;
			rel->cols[i].type_oid = r->desc.cols[i].type_oid;
			rel->cols[i].typmod = r->desc.cols[i].typmod;
			rel->cols[i].toastable = r->desc.cols[i].toastable;
			d->type_names[i] = r->desc.cols[i].type_name;
		}
		out = lappend(out, d);
	}
	*(List **) arg = out;
}

List *
ash_census_describe_relations(AshPipelineConfig *cfg)
{
	List	   *rels = NIL;

	with_activation_probe(cfg, describe_relations, &rels);
	return rels;
}

/*
 * With a snapshot configured (pgoutput, pglogical): a table of the attempt
 * that left the publication (the replication sets) and came back since the
 * attempt recorded how it was held (snapshot_tables.published,
 * ash_source_publication_gap).
 * Returns its qualified name (NULL: none), *retyped whether it only had
 * columns retyped; the pipeline ends the session and the next one copies
 * the table again.
 */
static char *
find_publication_gap(AshPipelineConfig *cfg, AshCheckpointKey *key, AshConn *conn,
					 bool *retyped)
{
	MemoryContext cxt = CurrentMemoryContext;
	PGresult   *res;
	Oid			types[3] = {TEXTOID, TEXTOID, TEXTOID};
	Datum		values[3];
	uint64		n;
	char	  **recorded;
	char	   *gap = NULL;
	AshTableSetSpec spec;

	if (cfg->snapshot == NULL || strcmp(cfg->snapshot, "off") == 0 || key == NULL)
		return NULL;

	/* what the attempt recorded: schema, table, membership, by threes */
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
	if (SPI_execute_with_args("SELECT source_schema, source_table, published FROM ash_replicant.snapshot_tables"
							  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							  "   AND published IS NOT NULL",
							  3, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the snapshot's tables failed");
	n = SPI_processed;
	recorded = MemoryContextAlloc(cxt, sizeof(char *) * 3 * Max(n, 1));
	for (uint64 i = 0; i < n; i++)
		for (int c = 0; c < 3; c++)
			recorded[i * 3 + c] = MemoryContextStrdup(cxt, SPI_getvalue(SPI_tuptable->vals[i],
																		SPI_tuptable->tupdesc, c + 1));
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	if (n == 0)
		return NULL;

	/* how the publication (the replication sets, the tables) holds them now */
	ash_source_table_set_of(cfg, &spec);
	res = ash_source_table_set_membership(conn, &spec);
	if (res == NULL)
		return NULL;
	for (uint64 i = 0; i < n && gap == NULL; i++)
		for (int r = 0; r < PQntuples(res) && gap == NULL; r++)
		{
			AshTableGap g;

			if (strcmp(PQgetvalue(res, r, 0), recorded[i * 3]) != 0 ||
				strcmp(PQgetvalue(res, r, 1), recorded[i * 3 + 1]) != 0 ||
				PQgetisnull(res, r, 3))
				continue;
			g = ash_source_publication_gap(recorded[i * 3 + 2], PQgetvalue(res, r, 3),
										   ash_config_find_mapping(cfg, recorded[i * 3],
																   recorded[i * 3 + 1]));
			if (g != ASH_GAP_NONE)
			{
				gap = quote_qualified_identifier(recorded[i * 3], recorded[i * 3 + 1]);
				*retyped = g == ASH_GAP_RETYPED;
			}
		}
	PQclear(res);
	return gap;
}

/*
 * Mapped columns retyped while streaming, found by the census before any
 * change of their table was decoded under the new type: the halt the
 * stream makes then (relmap.c), whatever finds it first.  The record
 * keeps the old type: the next start finds the rewrite a gap (or copies
 * the table again, with a snapshot configured).
 */
static void
halt_retyped(const char *tables)
{
	ash_halt("source_type_invalid",
			 "mapped columns were retyped while streaming, which rewrote their rows at the source: %s",
			 tables);
}

/* A pipeline without a snapshot cannot fill what the gap lost: it halts. */
static void
halt_publication_gap(const char *tables)
{
	ash_halt("publication_gap",
			 "mapped tables left the publication and came back, or they or columns of theirs were replaced or retyped, since they were recorded: %s",
			 tables);
}

static void
record_publication(AshPipelineConfig *cfg, AshConn *conn, void *arg)
{
	char	   *gap = ash_publication_record(cfg, (AshCheckpointKey *) arg, conn, true, NULL);

	if (gap != NULL)
		halt_publication_gap(gap);
}

void
ash_census_record_publication(AshPipelineConfig *cfg, AshCheckpointKey *key)
{
	bool		watched = ash_publication_watched(cfg);

	if (watched)
		with_activation_probe(cfg, record_publication, key);
	else
		(void) ash_publication_record(cfg, key, NULL, true, NULL);
	ash_column_record_note_session(key, watched);
}

/*
 * The census's connection to the source, kept open from one run to the
 * next.  A fresh connection each run cost the run (during which the worker
 * applies nothing, and a source waiting on it as a synchronous standby
 * waits too) a connection's start-up and a new backend's cold catalog
 * caches: about two thirds of its time.  A kept connection is idle between
 * runs, outside any transaction; it is tried with a round trip first, and
 * opened again when that fails (the source restarted, or ended an idle
 * session).  Any error during a run closes it.
 */
static AshConn *census_conn = NULL;
static bool exit_registered = false;

static void
census_conn_drop(void)
{
	ash_conn_close(census_conn);
	census_conn = NULL;
}

/* at the worker's exit: a clean goodbye, not a connection reset */
static void
census_conn_exit(int code, Datum arg)
{
	if (census_conn != NULL && census_conn->conn != NULL)
		PQfinish(census_conn->conn);
	census_conn = NULL;
}

static AshConn *
census_connection(AshPipelineConfig *cfg)
{
	MemoryContext cxt = CurrentMemoryContext;

	if (census_conn != NULL)
	{
		volatile bool alive = true;

		PG_TRY();
		{
			PQclear(ash_conn_exec(census_conn, "SELECT", false));
		}
		PG_CATCH();
		{
			FreeErrorData(ash_conn_failure_caught(cxt));
			alive = false;
		}
		PG_END_TRY();
		if (alive)
			return census_conn;
		/* not the source's verdict: the connection is opened again */
		ash_conn_last_sqlstate[0] = '\0';
		census_conn_drop();
	}
	if (!exit_registered)
	{
		on_proc_exit(census_conn_exit, (Datum) 0);
		exit_registered = true;
	}
	MemoryContextSwitchTo(TopMemoryContext);
	census_conn = ash_conn_open(cfg->connection, ASH_CONN_PROBE, "ash_replicant census");
	MemoryContextSwitchTo(cxt);
	/* its catalog queries planned once, not at every run */
	ash_conn_keep_plans(census_conn);
	return census_conn;
}

AshCensusVerdict
ash_census_run(AshPipelineConfig *cfg, AshCheckpointKey *key, XLogRecPtr passed)
{
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext run_cxt;
	volatile AshCensusVerdict verdict = ASH_CENSUS_PASS;
	AshConn    *volatile conn = NULL;
	int			saved_timeout = ash_connect_timeout_ms;

	targets_changed = false;
	free(publication_gap);
	publication_gap = NULL;
	check_destination(cfg, key);

	/* everything of one run, freed whatever its verdict */
	run_cxt = AllocSetContextCreate(cxt, "ash_replicant census", ALLOCSET_DEFAULT_SIZES);
	ash_connect_timeout_ms = cfg->census.timeout_ms;
	PG_TRY();
	{
		MemoryContextSwitchTo(run_cxt);
		conn = census_connection(cfg);
		{
			List	   *described = NIL;
			List	   *mappings = NIL;
			bool		retyped = false;
			char	   *gap;

			judge_source(cfg, conn, "census", &described, &mappings);
			gap = find_publication_gap(cfg, key, conn, &retyped);

			if (gap != NULL && retyped)
				halt_retyped(gap);
			else if (gap != NULL)
			{
				ereport(LOG,
						(errmsg("ash_replicant event=snapshot.publication_gap sink=%s table=%s",
								cfg->sink_name, gap),
						 errdetail("The table left the publication and came back, or it or a column of it was replaced, while the pipeline streamed; the next session copies it again.")));
				publication_gap = strdup(gap);
			}
			else if ((gap = ash_publication_record(cfg, key, conn, false, &retyped)) != NULL)
			{
				/*
				 * The publication changed since judge_source read it (one
				 * run reads it twice, not under one snapshot): judged again
				 * as it is now, a definition the mirror cannot honour halts
				 * with that reason, which the operator must fix first.
				 */
				judge_source(cfg, conn, "census", NULL, NULL);
				if (retyped)
					halt_retyped(gap);
				halt_publication_gap(gap);
			}
			else
				ash_column_record_census(cfg, conn, described, mappings, passed);
		}
		ash_syncrep_observe(conn);
		observe_watched_xact(conn);
	}
	PG_CATCH();
	{
		ash_connect_timeout_ms = saved_timeout;
		census_conn_drop();
		conn = NULL;
		if (ash_pending_halt != NULL)
			PG_RE_THROW();
		/* a failure on our side is not a source fault: raised again */
		FreeErrorData(ash_conn_failure_caught(cxt));
		verdict = ASH_CENSUS_FAULT;
		ereport(LOG,
				(errmsg("ash_replicant event=census.fault sink=%s source_sqlstate=%s",
						cfg->sink_name,
						ash_conn_last_sqlstate[0] ? ash_conn_last_sqlstate : "none")));
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	ash_connect_timeout_ms = saved_timeout;
	/* kept only idle, outside any transaction */
	if (census_conn != NULL && PQtransactionStatus(census_conn->conn) != PQTRANS_IDLE)
		census_conn_drop();
	MemoryContextDelete(run_cxt);
	return verdict;
}
