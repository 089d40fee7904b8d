/*-------------------------------------------------------------------------
 *
 * config.c
 *	  Read a pipeline's configuration from the ash_replicant catalogs.
 *
 * NOTES
 *	  The worker reads its configuration once, at start, inside a
 *	  transaction; any later change bumps sinks.config_version and the
 *	  launcher restarts the worker, so a running worker never sees a
 *	  half-changed configuration.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "config.h"
#include "mapping_validate.h"
#include "qualname.h"
#include "route_rules.h"

StaticAssertDecl(ASH_APPEND_COL_COUNT == ASH_APPEND_NAXES &&
				 ASH_APPEND_COL_NIDENTITY == ASH_APPEND_NIDENTITY &&
				 ASH_APPEND_COL_COMMIT_LSN == ASH_APPEND_COMMIT_LSN &&
				 ASH_APPEND_COL_ORDINAL == ASH_APPEND_ORDINAL &&
				 ASH_APPEND_COL_OPERATION == ASH_APPEND_OPERATION &&
				 ASH_APPEND_COL_MESSAGE_CONTENT == ASH_APPEND_MESSAGE_CONTENT,
				 "append column indexes must follow AshAppendAxis");

bool
ash_list_contains_str(List *l, const char *s)
{
	ListCell   *lc;

	foreach(lc, l)
	{
		if (strcmp((const char *) lfirst(lc), s) == 0)
			return true;
	}
	return false;
}

/* text[] datum -> List of char * (NULL elements left out) */
List *
ash_text_array_to_list(Datum d, bool isnull)
{
	List	   *result = NIL;
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	if (isnull)
		return NIL;
	deconstruct_array(DatumGetArrayTypeP(d), TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		if (!nulls[i])
			result = lappend(result, TextDatumGetCString(elems[i]));
	}
	return result;
}

static Datum get_datum(HeapTuple tup, TupleDesc desc, const char *col, bool *isnull);

/* text[] column -> List of char * (NIL when NULL) */
static List *
get_text_list(HeapTuple tup, TupleDesc desc, const char *col)
{
	bool		isnull;
	Datum		d = get_datum(tup, desc, col, &isnull);

	return ash_text_array_to_list(d, isnull);
}

static char *
get_text(HeapTuple tup, TupleDesc desc, const char *col)
{
	int			attno = SPI_fnumber(desc, col);
	bool		isnull;

	if (attno <= 0)
		elog(ERROR, "ash_replicant: catalog column \"%s\" missing", col);
	(void) SPI_getbinval(tup, desc, attno, &isnull);
	if (isnull)
		return NULL;
	return SPI_getvalue(tup, desc, attno);
}

static Datum
get_datum(HeapTuple tup, TupleDesc desc, const char *col, bool *isnull)
{
	int			attno = SPI_fnumber(desc, col);

	if (attno <= 0)
		elog(ERROR, "ash_replicant: catalog column \"%s\" missing", col);
	return SPI_getbinval(tup, desc, attno, isnull);
}

/* Census options from the normalised jsonb (missing keys: defaults). */
static void
parse_census(AshCensusOptions *c, const char *json)
{
	c->enabled = true;
	c->interval_ms = 60000;
	c->jitter_ratio = 0.1;
	c->timeout_ms = 10000;
	c->max_consecutive_faults = 3;
	if (json == NULL)
		return;

	/* the catalog holds a validated, normalised object; read it via SPI */
	{
		Oid			argtypes[1] = {JSONBOID};
		Datum		values[1];
		int			ret;

		values[0] = DirectFunctionCall1(jsonb_in, CStringGetDatum(json));
		ret = SPI_execute_with_args(
			"SELECT coalesce(($1->>'enabled')::boolean, true),"
			" coalesce(($1->>'interval_ms')::int, 60000),"
			" coalesce(($1->>'jitter_ratio')::float8, 0.1),"
			" coalesce(($1->>'timeout_ms')::int, 10000),"
			" coalesce(($1->>'max_consecutive_faults')::int, 3)",
			1, argtypes, values, NULL, true, 1);
		if (ret == SPI_OK_SELECT && SPI_processed == 1)
		{
			HeapTuple	t = SPI_tuptable->vals[0];
			TupleDesc	d = SPI_tuptable->tupdesc;
			bool		isnull;

			c->enabled = DatumGetBool(SPI_getbinval(t, d, 1, &isnull));
			c->interval_ms = DatumGetInt32(SPI_getbinval(t, d, 2, &isnull));
			c->jitter_ratio = DatumGetFloat8(SPI_getbinval(t, d, 3, &isnull));
			c->timeout_ms = DatumGetInt32(SPI_getbinval(t, d, 4, &isnull));
			c->max_consecutive_faults = DatumGetInt32(SPI_getbinval(t, d, 5, &isnull));
		}
	}
}

/*
 * The sink and pipeline rows of the sink ($1 of values), allocated in
 * caller; *census_json gets the pipeline's census options as jsonb text.
 */
static AshPipelineConfig *
read_pipeline(const char *sink_name, Oid *argtypes, Datum *values, MemoryContext caller,
			  char **census_json)
{
	AshPipelineConfig *cfg;
	int			ret;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	List	   *ignored;
	ListCell   *lc;
	MemoryContext old;

	ret = SPI_execute_with_args(
		"SELECT s.sink_name, s.slot_name, s.sink_kind, s.initial_state, s.ignored_sources,"
		" s.ignored_message_prefixes, s.batch_max_transactions, s.owner::oid AS owner,"
		" s.config_version, p.connection, p.decoder, p.publication,"
		" p.source_system_identifier, p.source_database, p.streaming,"
		" p.binary_transfer, p.failover, p.max_inflight_lag, p.max_command_retries,"
		" p.census::text AS census, p.start_generation, p.snapshot,"
		" p.chunk_rows, p.max_pending_chunks,"
		" p.tables, p.allow_keyless_tables, p.schema_check_interval_ms,"
		" p.replication_sets::pg_catalog.text AS replication_sets,"
		/* through jsonb: catalogs older than 1.3.0 have no origin column */
		" pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'origin' AS origin"
		" FROM ash_replicant.sinks s JOIN ash_replicant.pipelines p USING (sink_name)"
		" WHERE s.sink_name = $1",
		1, argtypes, values, NULL, true, 0);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("ash_replicant: pipeline of sink \"%s\" is not configured", sink_name)));

	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;

	old = MemoryContextSwitchTo(caller);
	cfg = palloc0(sizeof(AshPipelineConfig));
	cfg->sink_name = get_text(tup, desc, "sink_name");
	cfg->slot_name = get_text(tup, desc, "slot_name");
	cfg->sink_kind = get_text(tup, desc, "sink_kind");
	cfg->initial_state = get_text(tup, desc, "initial_state");
	ignored = get_text_list(tup, desc, "ignored_sources");
	cfg->ignored_prefixes = get_text_list(tup, desc, "ignored_message_prefixes");
	cfg->batch_max_transactions = DatumGetInt32(get_datum(tup, desc, "batch_max_transactions", &isnull));
	cfg->owner = DatumGetObjectId(get_datum(tup, desc, "owner", &isnull));
	cfg->config_version = DatumGetInt64(get_datum(tup, desc, "config_version", &isnull));
	cfg->connection = get_text(tup, desc, "connection");
	cfg->decoder = get_text(tup, desc, "decoder");
	cfg->publication = get_text(tup, desc, "publication");
	cfg->source_system_identifier = get_text(tup, desc, "source_system_identifier");
	cfg->source_database = get_text(tup, desc, "source_database");
	cfg->streaming = DatumGetBool(get_datum(tup, desc, "streaming", &isnull));
	cfg->binary_transfer = DatumGetBool(get_datum(tup, desc, "binary_transfer", &isnull));
	cfg->failover = DatumGetBool(get_datum(tup, desc, "failover", &isnull));
	cfg->max_inflight_lag = DatumGetInt64(get_datum(tup, desc, "max_inflight_lag", &isnull));
	cfg->max_command_retries = DatumGetInt32(get_datum(tup, desc, "max_command_retries", &isnull));
	cfg->start_generation = DatumGetInt64(get_datum(tup, desc, "start_generation", &isnull));
	cfg->snapshot = get_text(tup, desc, "snapshot");
	cfg->chunk_rows = DatumGetInt32(get_datum(tup, desc, "chunk_rows", &isnull));
	cfg->max_pending_chunks = DatumGetInt32(get_datum(tup, desc, "max_pending_chunks", &isnull));
	{
		char	   *origin = get_text(tup, desc, "origin");

		cfg->origin_none = origin != NULL && strcmp(origin, "none") == 0;
	}
	cfg->replication_sets = get_text(tup, desc, "replication_sets");
	*census_json = get_text(tup, desc, "census");
	cfg->allow_keyless_tables = DatumGetBool(get_datum(tup, desc, "allow_keyless_tables", &isnull));
	cfg->schema_check_interval_ms = DatumGetInt32(get_datum(tup, desc, "schema_check_interval_ms",
															 &isnull));

	/* wal2json's tables: stored canonical "schema"."table" (qualname.c) */
	foreach(lc, get_text_list(tup, desc, "tables"))
	{
		char	   *schema;
		char	   *table;

		if (ash_parse_qualified_name((char *) lfirst(lc), &schema, &table))
			cfg->tables = lappend(cfg->tables, list_make2(schema, table));
	}

	/* ignored sources: stored canonical "schema.table" (qualname.c) */
	foreach(lc, ignored)
	{
		char	   *schema;
		char	   *table;

		if (ash_parse_qualified_name((char *) lfirst(lc), &schema, &table))
			cfg->ignored_sources = lappend(cfg->ignored_sources,
										   list_make2(schema, table));
	}
	MemoryContextSwitchTo(old);
	return cfg;
}

/* The mappings of sink $1, with the effective name of every append axis. */
static char *
mappings_query(void)
{
	StringInfoData q;

	initStringInfo(&q);
	appendStringInfoString(&q,
						   "SELECT resource_id, target::oid AS target_oid, source_schema, source_table,"
						   " column_map::text AS column_map, skip, sensitive, encrypted, tenant_column,"
						   " tenant_function::pg_catalog.text AS tenant_function,"
						   " tenant_strategy, tenant_schema_format,"
						   " tenant_scope_function::pg_catalog.text AS tenant_scope_function,"
						   " on_truncate, on_schema_change, upsert_identity, history_strategy,"
						   " append_log, snapshot_provenance, history_business_key,"
						   " coalesce(history_valid_from_lsn_column, 'valid_from_lsn') AS h_from_lsn,"
						   " coalesce(history_valid_to_lsn_column, 'valid_to_lsn') AS h_to_lsn,"
						   " history_valid_from_ts_column AS h_from_ts,"
						   " history_valid_to_ts_column AS h_to_ts,"
						   " history_current_column AS h_current,"
						   " EXISTS (SELECT 1 FROM ash_replicant.resources o"
						   "  WHERE o.target::pg_catalog.oid OPERATOR(pg_catalog.=) r.target::pg_catalog.oid"
						   "    AND o.sink_name OPERATOR(pg_catalog.<>) r.sink_name) AS shared_target");
	/* append_columns holds the effective name of every axis */
	for (int i = 0; i < ASH_APPEND_NAXES; i++)
		appendStringInfo(&q, ", coalesce(append_columns OPERATOR(pg_catalog.->>) %s, %s) AS ac%d",
						 quote_literal_cstr(ash_append_axis_default(i)),
						 quote_literal_cstr(ash_append_axis_default(i)), i);
	appendStringInfoString(&q, " FROM ash_replicant.resources r WHERE r.sink_name = $1 ORDER BY resource_id");
	return q.data;
}

/* One row of mappings_query() as an AshMapping in caller, its column map aside. */
static AshMapping *
mapping_from_row(HeapTuple tup, TupleDesc desc, MemoryContext caller)
{
	MemoryContext old = MemoryContextSwitchTo(caller);
	AshMapping *m;
	bool		isnull;

	m = palloc0(sizeof(AshMapping));
	m->resource_id = DatumGetInt64(get_datum(tup, desc, "resource_id", &isnull));
	m->target_relid = DatumGetObjectId(get_datum(tup, desc, "target_oid", &isnull));
	m->source_schema = get_text(tup, desc, "source_schema");
	m->source_table = get_text(tup, desc, "source_table");
	m->skip = get_text_list(tup, desc, "skip");
	m->sensitive = get_text_list(tup, desc, "sensitive");
	m->encrypted = get_text_list(tup, desc, "encrypted");
	m->tenant_column = get_text(tup, desc, "tenant_column");
	m->tenant_function_sig = get_text(tup, desc, "tenant_function");
	m->tenant_function = ash_function_resolve(m->tenant_function_sig);
	m->tenant_strategy = get_text(tup, desc, "tenant_strategy");
	m->tenant_schema_format = get_text(tup, desc, "tenant_schema_format");
	m->tenant_scope_function_sig = get_text(tup, desc, "tenant_scope_function");
	m->tenant_scope_function = ash_function_resolve(m->tenant_scope_function_sig);
	m->on_truncate = get_text(tup, desc, "on_truncate");
	m->on_schema_change = get_text(tup, desc, "on_schema_change");
	m->upsert_identity = get_text(tup, desc, "upsert_identity");
	m->history_strategy = get_text(tup, desc, "history_strategy");
	m->append_log = DatumGetBool(get_datum(tup, desc, "append_log", &isnull));
	m->snapshot_provenance = DatumGetBool(get_datum(tup, desc, "snapshot_provenance", &isnull));
	m->shared_target = DatumGetBool(get_datum(tup, desc, "shared_target", &isnull));
	{
		/* (isnull must be read after get_datum set it) */
		Datum		bk = get_datum(tup, desc, "history_business_key", &isnull);

		m->history_business_key = ash_text_array_to_list(bk, isnull);
	}
	m->history_valid_from_lsn_column = get_text(tup, desc, "h_from_lsn");
	m->history_valid_to_lsn_column = get_text(tup, desc, "h_to_lsn");
	m->history_valid_from_ts_column = get_text(tup, desc, "h_from_ts");
	m->history_valid_to_ts_column = get_text(tup, desc, "h_to_ts");
	m->history_current_column = get_text(tup, desc, "h_current");
	for (int a = 0; a < ASH_APPEND_COL_COUNT; a++)
	{
		char		col[16];

		snprintf(col, sizeof(col), "ac%d", a);
		m->append_columns[a] = get_text(tup, desc, col);
	}
	MemoryContextSwitchTo(old);
	return m;
}

/* column_map: {"source": "target"} of the row, as m->renames (in caller). */
static void
read_column_map(AshMapping *m, HeapTuple tup, TupleDesc desc, MemoryContext caller)
{
	char	   *cm = get_text(tup, desc, "column_map");
	Oid			jt[1] = {JSONBOID};
	Datum		jv[1];
	int			ret;

	if (cm == NULL || strcmp(cm, "{}") == 0)
		return;
	jv[0] = DirectFunctionCall1(jsonb_in, CStringGetDatum(cm));
	ret = SPI_execute_with_args("SELECT key, value FROM jsonb_each_text($1)",
								1, jt, jv, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: could not read a column map");
	for (uint64 j = 0; j < SPI_processed; j++)
	{
		MemoryContext old = MemoryContextSwitchTo(caller);
		AshColumnRename *r;

		r = palloc(sizeof(AshColumnRename));
		r->source = SPI_getvalue(SPI_tuptable->vals[j], SPI_tuptable->tupdesc, 1);
		r->target = SPI_getvalue(SPI_tuptable->vals[j], SPI_tuptable->tupdesc, 2);
		m->renames = lappend(m->renames, r);
		MemoryContextSwitchTo(old);
	}
	SPI_freetuptable(SPI_tuptable);
}

/* The sink's mappings (sink $1 of values), in resource order. */
static void
read_mappings(AshPipelineConfig *cfg, Oid *argtypes, Datum *values, MemoryContext caller)
{
	int			ret;
	uint64		nmappings;
	SPITupleTable *mappings_tt;

	ret = SPI_execute_with_args(mappings_query(), 1, argtypes, values, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: could not read mappings");

	/* reading a column map replaces SPI_tuptable */
	nmappings = SPI_processed;
	mappings_tt = SPI_tuptable;
	for (uint64 i = 0; i < nmappings; i++)
	{
		HeapTuple	tup = mappings_tt->vals[i];
		TupleDesc	desc = mappings_tt->tupdesc;
		AshMapping *m = mapping_from_row(tup, desc, caller);
		MemoryContext old;

		read_column_map(m, tup, desc, caller);
		old = MemoryContextSwitchTo(caller);
		cfg->mappings = lappend(cfg->mappings, m);
		MemoryContextSwitchTo(old);
	}
}

/* The sink's message routes (sink $1 of values), by prefix. */
static void
read_message_routes(AshPipelineConfig *cfg, Oid *argtypes, Datum *values, MemoryContext caller)
{
	int			ret;

	ret = SPI_execute_with_args(
		"SELECT prefix, target::oid AS target_oid, target_function::pg_catalog.text AS target_function,"
		" retention, (extract(epoch FROM retention) * 1000000)::int8 AS retention_us"
		" FROM ash_replicant.message_routes WHERE sink_name = $1 ORDER BY prefix",
		1, argtypes, values, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: could not read message routes");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(caller);
		AshMessageRoute *r = palloc0(sizeof(AshMessageRoute));
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Datum		d;

		r->prefix = get_text(tup, desc, "prefix");
		d = get_datum(tup, desc, "target_oid", &isnull);
		r->target = isnull ? InvalidOid : DatumGetObjectId(d);
		r->function_sig = get_text(tup, desc, "target_function");
		r->function = ash_function_resolve(r->function_sig);
		d = get_datum(tup, desc, "retention", &isnull);
		r->retention = *DatumGetIntervalP(d);
		r->retention_us = DatumGetInt64(get_datum(tup, desc, "retention_us", &isnull));
		cfg->message_routes = lappend(cfg->message_routes, r);
		MemoryContextSwitchTo(old);
	}
}

AshPipelineConfig *
ash_config_load(const char *sink_name)
{
	MemoryContext caller = CurrentMemoryContext;
	AshPipelineConfig *cfg;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	char	   *census_json;

	values[0] = CStringGetTextDatum(sink_name);
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	cfg = read_pipeline(sink_name, argtypes, values, caller, &census_json);
	parse_census(&cfg->census, census_json);
	read_mappings(cfg, argtypes, values, caller);
	read_message_routes(cfg, argtypes, values, caller);
	{
		AshRouteVerdict rv;

		/*
		 * Judged at every load, and a change to routes or sink settings
		 * reloads (config_version): a configuration stored before a rule
		 * was enforced, or changed by hand, is never run on.
		 */
		ash_route_rules_judge(sink_name, ASH_ROUTE_RULES_WORKER, &rv);
		cfg->routes_reason = rv.reason;
		cfg->routes_context = rv.context;	/* literals */
	}

	SPI_finish();
	PopActiveSnapshot();
	return cfg;
}

bool
ash_config_is_append_log(AshPipelineConfig *cfg)
{
	return cfg->sink_kind != NULL && strcmp(cfg->sink_kind, "append_log") == 0;
}

bool
ash_config_retires_shared(const AshMapping *m)
{
	return m->shared_target &&
		ash_mapping_target_claim(m->snapshot_provenance, m->tenant_strategy, NULL) != NULL;
}

bool
ash_config_truncates_shared(const AshMapping *m)
{
	return m->shared_target && ash_mapping_target_claim(false, NULL, m->on_truncate) != NULL;
}

AshMapping *
ash_config_find_mapping(AshPipelineConfig *cfg, const char *nspname, const char *relname)
{
	return ash_mappings_find(cfg->mappings, nspname, relname);
}

AshMapping *
ash_mappings_find(List *mappings, const char *nspname, const char *relname)
{
	ListCell   *lc;

	foreach(lc, mappings)
	{
		AshMapping *m = lfirst(lc);

		if (strcmp(m->source_schema, nspname) == 0 &&
			strcmp(m->source_table, relname) == 0)
			return m;
	}
	return NULL;
}

bool
ash_config_is_ignored(AshPipelineConfig *cfg, const char *nspname, const char *relname)
{
	ListCell   *lc;

	foreach(lc, cfg->ignored_sources)
	{
		List	   *parts = lfirst(lc);

		if (strcmp(linitial(parts), nspname) == 0 &&
			strcmp(lsecond(parts), relname) == 0)
			return true;
	}
	return false;
}

const char *
ash_mapping_target_column(AshMapping *m, const char *source_col)
{
	ListCell   *lc;

	if (ash_list_contains_str(m->skip, source_col))
		return NULL;
	foreach(lc, m->renames)
	{
		AshColumnRename *r = lfirst(lc);

		if (strcmp(r->source, source_col) == 0)
			return r->target;
	}
	return source_col;
}
