/*-------------------------------------------------------------------------
 *
 * api_mapping.c
 *	  SQL-callable ash_replicant_map_table / ash_replicant_unmap_table.
 *
 * NOTES
 *	  map_table builds an AshMappingSpec from its named arguments, locks the
 *	  sink row (FOR UPDATE: concurrent registrations of one sink serialize),
 *	  validates the mapping (mapping_validate.c) and only then writes: it
 *	  replaces the row of the same (sink, target) in place, keeping its
 *	  resource_id, or inserts a new one, and bumps sinks.config_version so
 *	  that a running pipeline notices.  Any refusal happens before the first
 *	  write, so a rejected call changes nothing.
 *
 *	  A NULL argument of an option that has a default means the default.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"

#include "errors.h"
#include "launcher.h"
#include "mapping_validate.h"
#include "owner_scope.h"
#include "qualname.h"

PG_FUNCTION_INFO_V1(ash_replicant_map_table);
PG_FUNCTION_INFO_V1(ash_replicant_unmap_table);

/* Argument positions of ash_replicant_map_table (see the install script). */
enum MapArg
{
	ARG_SINK_NAME,
	ARG_TARGET,
	ARG_SOURCE_TABLE,
	ARG_SOURCE_SCHEMA,
	ARG_COLUMN_MAP,
	ARG_TENANT_COLUMN,
	ARG_TENANT_FUNCTION,
	ARG_TENANT_STRATEGY,
	ARG_TENANT_SCHEMA_FORMAT,
	ARG_SENSITIVE,
	ARG_ENCRYPTED,
	ARG_SKIP,
	ARG_ON_TRUNCATE,
	ARG_ON_SCHEMA_CHANGE,
	ARG_UPSERT_IDENTITY,
	ARG_HISTORY_STRATEGY,
	ARG_HISTORY_BUSINESS_KEY,
	ARG_HISTORY_VALID_FROM_LSN,
	ARG_HISTORY_VALID_TO_LSN,
	ARG_HISTORY_VALID_FROM_TS,
	ARG_HISTORY_VALID_TO_TS,
	ARG_HISTORY_CURRENT,
	ARG_APPEND_LOG,
	ARG_APPEND_FIRST_COLUMN,	/* ASH_APPEND_NAXES consecutive text args */
	ARG_SNAPSHOT_PROVENANCE = ARG_APPEND_FIRST_COLUMN + ASH_APPEND_NAXES,
	ARG_TENANT_SCOPE_FUNCTION,
	MAP_NARGS
};

#define STORE_NPARAMS 27

static char *
text_arg(FunctionCallInfo fcinfo, int n)
{
	return PG_ARGISNULL(n) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(n));
}

static Oid
oid_arg(FunctionCallInfo fcinfo, int n)
{
	return PG_ARGISNULL(n) ? InvalidOid : PG_GETARG_OID(n);
}

static List *
names_arg(FunctionCallInfo fcinfo, int n, const char *option)
{
	return PG_ARGISNULL(n) ? NIL : ash_mapping_name_list(PG_GETARG_ARRAYTYPE_P(n), option);
}

/* text[] datum of a list of names. */
static Datum
names_datum(List *names)
{
	Datum	   *elems = palloc(sizeof(Datum) * (list_length(names) + 1));
	int			n = 0;
	ListCell   *lc;

	foreach(lc, names)
		elems[n++] = CStringGetTextDatum((char *) lfirst(lc));
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

static Datum
jsonb_from_cstring(const char *json)
{
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(json));
}

/* The effective structural column names of an append mapping, as jsonb. */
static Datum
append_columns_datum(const AshMappingSpec *m)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int i = 0; i < ASH_APPEND_NAXES; i++)
	{
		if (i > 0)
			appendStringInfoString(&buf, ", ");
		escape_json(&buf, ash_append_axis_default(i));
		appendStringInfoString(&buf, ": ");
		escape_json(&buf, ash_mapping_append_column(m, i));
	}
	appendStringInfoChar(&buf, '}');
	return jsonb_from_cstring(buf.data);
}

/* Build the mapping from the call's arguments (no validation yet). */
static AshMappingSpec *
mapping_from_args(FunctionCallInfo fcinfo)
{
	AshMappingSpec *m = ash_mapping_new();
	char	   *s;

	if (PG_ARGISNULL(ARG_SINK_NAME))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, "mapping", "config_invalid",
				   "sink_name is required");
	if (PG_ARGISNULL(ARG_TARGET))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, "mapping", "config_invalid",
				   "target is required");

	m->sink_name = text_arg(fcinfo, ARG_SINK_NAME);
	m->target = PG_GETARG_OID(ARG_TARGET);
	m->source_table = text_arg(fcinfo, ARG_SOURCE_TABLE);
	m->source_schema = text_arg(fcinfo, ARG_SOURCE_SCHEMA);
	ash_mapping_set_column_map(m, PG_ARGISNULL(ARG_COLUMN_MAP) ? NULL :
							   PG_GETARG_JSONB_P(ARG_COLUMN_MAP));

	m->tenant_column = text_arg(fcinfo, ARG_TENANT_COLUMN);
	m->tenant_function = oid_arg(fcinfo, ARG_TENANT_FUNCTION);
	m->tenant_strategy = ash_parse_tenant_strategy(text_arg(fcinfo, ARG_TENANT_STRATEGY));
	if ((s = text_arg(fcinfo, ARG_TENANT_SCHEMA_FORMAT)) != NULL)
		m->tenant_schema_format = s;
	m->tenant_scope_function = oid_arg(fcinfo, ARG_TENANT_SCOPE_FUNCTION);

	m->sensitive = names_arg(fcinfo, ARG_SENSITIVE, "sensitive");
	m->encrypted = names_arg(fcinfo, ARG_ENCRYPTED, "encrypted");
	m->skip = names_arg(fcinfo, ARG_SKIP, "skip");

	m->on_truncate = ash_parse_on_truncate(text_arg(fcinfo, ARG_ON_TRUNCATE));
	m->on_schema_change = ash_parse_on_schema_change(text_arg(fcinfo, ARG_ON_SCHEMA_CHANGE));
	m->upsert_identity = text_arg(fcinfo, ARG_UPSERT_IDENTITY);

	m->history_strategy = ash_parse_history_strategy(text_arg(fcinfo, ARG_HISTORY_STRATEGY));
	m->history_business_key = names_arg(fcinfo, ARG_HISTORY_BUSINESS_KEY,
										"history_business_key");
	if ((s = text_arg(fcinfo, ARG_HISTORY_VALID_FROM_LSN)) != NULL)
		m->history_valid_from_lsn_column = s;
	if ((s = text_arg(fcinfo, ARG_HISTORY_VALID_TO_LSN)) != NULL)
		m->history_valid_to_lsn_column = s;
	m->history_valid_from_ts_column = text_arg(fcinfo, ARG_HISTORY_VALID_FROM_TS);
	m->history_valid_to_ts_column = text_arg(fcinfo, ARG_HISTORY_VALID_TO_TS);
	m->history_current_column = text_arg(fcinfo, ARG_HISTORY_CURRENT);

	m->append_log = PG_ARGISNULL(ARG_APPEND_LOG) ? false : PG_GETARG_BOOL(ARG_APPEND_LOG);
	for (int i = 0; i < ASH_APPEND_NAXES; i++)
		m->append_columns[i] = text_arg(fcinfo, ARG_APPEND_FIRST_COLUMN + i);

	m->snapshot_provenance = PG_ARGISNULL(ARG_SNAPSHOT_PROVENANCE) ? false :
		PG_GETARG_BOOL(ARG_SNAPSHOT_PROVENANCE);

	ash_mapping_default_source(m);
	return m;
}

static void
set_param(Datum *values, char *nulls, Oid *types, int n, Oid type, Datum value, bool isnull)
{
	types[n] = type;
	values[n] = isnull ? (Datum) 0 : value;
	nulls[n] = isnull ? 'n' : ' ';
}

static void
set_text_param(Datum *values, char *nulls, Oid *types, int n, const char *s)
{
	set_param(values, nulls, types, n, TEXTOID, s ? CStringGetTextDatum(s) : (Datum) 0, s == NULL);
}

/*
 * What a resources row stores for a function (qualname.h): its signature,
 * or the one loaded with the mapping when that names no function now.
 */
static const char *
stored_signature(Oid fn, const char *loaded)
{
	return OidIsValid(fn) ? ash_function_signature(fn) : loaded;
}

/* Fill the 26 column parameters ($1..$26) of a resources row. */
static void
mapping_params(const AshMappingSpec *m, Datum *values, char *nulls, Oid *types)
{
	bool		scd2 = (m->history_strategy == ASH_HISTORY_SCD2);
	const char *strategy = ash_tenant_strategy_name(m->tenant_strategy);

	set_text_param(values, nulls, types, 0, m->sink_name);
	set_param(values, nulls, types, 1, OIDOID, ObjectIdGetDatum(m->target), false);
	set_text_param(values, nulls, types, 2, m->source_schema);
	set_text_param(values, nulls, types, 3, m->source_table);
	set_param(values, nulls, types, 4, JSONBOID,
			  m->column_map_jsonb ? JsonbPGetDatum(m->column_map_jsonb) : jsonb_from_cstring("{}"),
			  false);
	set_text_param(values, nulls, types, 5, m->tenant_column);
	set_text_param(values, nulls, types, 6,
				   stored_signature(m->tenant_function, m->tenant_function_sig));
	set_text_param(values, nulls, types, 7, strategy);
	set_text_param(values, nulls, types, 8, m->tenant_schema_format);
	set_text_param(values, nulls, types, 9,
				   stored_signature(m->tenant_scope_function, m->tenant_scope_function_sig));
	set_param(values, nulls, types, 10, TEXTARRAYOID, names_datum(m->sensitive), false);
	set_param(values, nulls, types, 11, TEXTARRAYOID, names_datum(m->encrypted), false);
	set_param(values, nulls, types, 12, TEXTARRAYOID, names_datum(m->skip), false);
	set_text_param(values, nulls, types, 13, ash_on_truncate_name(m->on_truncate));
	set_text_param(values, nulls, types, 14, ash_on_schema_change_name(m->on_schema_change));
	set_text_param(values, nulls, types, 15, m->upsert_identity);
	set_text_param(values, nulls, types, 16, ash_history_strategy_name(m->history_strategy));
	set_param(values, nulls, types, 17, TEXTARRAYOID,
			  scd2 ? names_datum(m->history_business_key) : (Datum) 0, !scd2);
	set_text_param(values, nulls, types, 18, scd2 ? m->history_valid_from_lsn_column : NULL);
	set_text_param(values, nulls, types, 19, scd2 ? m->history_valid_to_lsn_column : NULL);
	set_text_param(values, nulls, types, 20, scd2 ? m->history_valid_from_ts_column : NULL);
	set_text_param(values, nulls, types, 21, scd2 ? m->history_valid_to_ts_column : NULL);
	set_text_param(values, nulls, types, 22, scd2 ? m->history_current_column : NULL);
	set_param(values, nulls, types, 23, BOOLOID, BoolGetDatum(m->append_log), false);
	set_param(values, nulls, types, 24, JSONBOID,
			  m->append_log ? append_columns_datum(m) : (Datum) 0, !m->append_log);
	set_param(values, nulls, types, 25, BOOLOID, BoolGetDatum(m->snapshot_provenance), false);
}

/* $7 and $10 (%s each): ash_function_column_cast */
static const char *const insert_sql =
"INSERT INTO ash_replicant.resources (sink_name, target, source_schema, source_table, "
"column_map, tenant_column, tenant_function, tenant_strategy, tenant_schema_format, "
"tenant_scope_function, sensitive, encrypted, skip, on_truncate, on_schema_change, "
"upsert_identity, history_strategy, history_business_key, "
"history_valid_from_lsn_column, history_valid_to_lsn_column, "
"history_valid_from_ts_column, history_valid_to_ts_column, history_current_column, "
"append_log, append_columns, snapshot_provenance) "
"VALUES ($1, $2::pg_catalog.regclass, $3, $4, $5, $6, $7%s, $8, $9, "
"$10%s, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, "
"$22, $23, $24, $25, $26) RETURNING resource_id";

static const char *const update_sql =
"UPDATE ash_replicant.resources SET sink_name = $1, target = $2::pg_catalog.regclass, "
"source_schema = $3, source_table = $4, column_map = $5, tenant_column = $6, "
"tenant_function = $7%s, tenant_strategy = $8, "
"tenant_schema_format = $9, tenant_scope_function = $10%s, "
"sensitive = $11, encrypted = $12, skip = $13, on_truncate = $14, "
"on_schema_change = $15, upsert_identity = $16, history_strategy = $17, "
"history_business_key = $18, history_valid_from_lsn_column = $19, "
"history_valid_to_lsn_column = $20, history_valid_from_ts_column = $21, "
"history_valid_to_ts_column = $22, history_current_column = $23, append_log = $24, "
"append_columns = $25, snapshot_provenance = $26 "
"WHERE resource_id OPERATOR(pg_catalog.=) $27 RETURNING resource_id";

static void
bump_config_version(const char *sink_name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	int			rc;

	values[0] = CStringGetTextDatum(sink_name);
	rc = SPI_execute_with_args("UPDATE ash_replicant.sinks "
							   "SET config_version = config_version OPERATOR(pg_catalog.+) 1 "
							   "WHERE sink_name OPERATOR(pg_catalog.=) $1",
							   1, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_UPDATE || SPI_processed != 1)
		elog(ERROR, "ash_replicant: bumping config_version of a sink failed");
}

/*
 * Write the validated mapping; return its resource_id.  Caller is
 * connected to SPI and holds the sink row lock.
 */
static int64
store_mapping(AshMappingSpec *m)
{
	Oid			argtypes[STORE_NPARAMS];
	Datum		values[STORE_NPARAMS];
	char		nulls[STORE_NPARAMS + 1];
	int64		replace_id = 0;
	int			rc;
	bool		isnull;
	const char *fn_cast;
	const char *scope_cast;

	/* Existing rows of this sink with the same target or the same source. */
	argtypes[0] = TEXTOID;
	values[0] = CStringGetTextDatum(m->sink_name);
	argtypes[1] = OIDOID;
	values[1] = ObjectIdGetDatum(m->target);
	argtypes[2] = TEXTOID;
	values[2] = CStringGetTextDatum(m->source_schema);
	argtypes[3] = TEXTOID;
	values[3] = CStringGetTextDatum(m->source_table);
	rc = SPI_execute_with_args("SELECT resource_id, target::pg_catalog.oid "
							   "FROM ash_replicant.resources "
							   "WHERE sink_name OPERATOR(pg_catalog.=) $1 "
							   "AND (target::pg_catalog.oid OPERATOR(pg_catalog.=) $2 "
							   "OR (source_schema OPERATOR(pg_catalog.=) $3 "
							   "AND source_table OPERATOR(pg_catalog.=) $4))",
							   4, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading mappings failed: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		int64		id = DatumGetInt64(SPI_getbinval(tup, SPI_tuptable->tupdesc, 1, &isnull));
		Oid			target = DatumGetObjectId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));

		if (target == m->target)
			replace_id = id;
	}
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		Oid			target = DatumGetObjectId(SPI_getbinval(tup, SPI_tuptable->tupdesc, 2, &isnull));
		char	   *relname;

		if (target == m->target)
			continue;
		relname = ash_mapping_qualified_relname(target);
		ash_reject(ERRCODE_DUPLICATE_OBJECT, "mapping", "config_invalid",
				   "source table %s is already mapped to %s in this sink; unmap it first",
				   psprintf("%s.%s", ash_quoted_name(m->source_schema),
							ash_quoted_name(m->source_table)), relname);
	}

	ash_mapping_check_shared_target(m, true);

	memset(nulls, ' ', sizeof(nulls));
	nulls[STORE_NPARAMS] = '\0';
	mapping_params(m, values, nulls, argtypes);
	fn_cast = ash_function_column_cast("resources", "tenant_function");
	scope_cast = ash_function_column_cast("resources", "tenant_scope_function");
	if (replace_id != 0)
	{
		set_param(values, nulls, argtypes, 26, INT8OID, Int64GetDatum(replace_id), false);
		rc = SPI_execute_with_args(psprintf(update_sql, fn_cast, scope_cast), STORE_NPARAMS,
								   argtypes, values, nulls, false, 0);
		if (rc != SPI_OK_UPDATE_RETURNING || SPI_processed != 1)
			elog(ERROR, "ash_replicant: replacing mapping failed");
	}
	else
	{
		rc = SPI_execute_with_args(psprintf(insert_sql, fn_cast, scope_cast), STORE_NPARAMS - 1,
								   argtypes, values, nulls, false, 0);
		if (rc != SPI_OK_INSERT_RETURNING || SPI_processed != 1)
			elog(ERROR, "ash_replicant: storing mapping failed");
	}
	m->resource_id = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
												 SPI_tuptable->tupdesc, 1, &isnull));
	bump_config_version(m->sink_name);
	return m->resource_id;
}

Datum
ash_replicant_map_table(PG_FUNCTION_ARGS)
{
	AshMappingSpec *m;
	AshMappingSink *sink;
	int64		resource_id;

	if (PG_NARGS() != MAP_NARGS)
		elog(ERROR, "ash_replicant_map_table: expected %d arguments, got %d",
			 MAP_NARGS, PG_NARGS());

	m = mapping_from_args(fcinfo);
	sink = ash_mapping_sink_load(m->sink_name, false, true);
	ash_owner_check_caller(sink->owner, "mapping", m->sink_name);
	ash_mapping_validate(m, sink);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	resource_id = store_mapping(m);
	SPI_finish();

	ash_launcher_wake_at_commit();
	PG_RETURN_INT64(resource_id);
}

Datum
ash_replicant_unmap_table(PG_FUNCTION_ARGS)
{
	char	   *sink_name;
	AshMappingSink *sink;
	Oid			target;
	Oid			argtypes[2] = {TEXTOID, OIDOID};
	Datum		values[2];
	int			rc;

	if (PG_ARGISNULL(0))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, "unmap", "config_invalid",
				   "sink_name is required");
	if (PG_ARGISNULL(1))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, "unmap", "config_invalid",
				   "target is required");
	sink_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	target = PG_GETARG_OID(1);

	sink = ash_mapping_sink_load(sink_name, true, true);
	if (sink == NULL)
		ash_reject(ERRCODE_UNDEFINED_OBJECT, "unmap", "config_invalid",
				   "sink %s does not exist", ash_quoted_name(sink_name));
	ash_owner_check_caller(sink->owner, "unmap", sink_name);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	values[0] = CStringGetTextDatum(sink_name);
	values[1] = ObjectIdGetDatum(target);
	rc = SPI_execute_with_args("DELETE FROM ash_replicant.resources "
							   "WHERE sink_name OPERATOR(pg_catalog.=) $1 "
							   "AND target::pg_catalog.oid OPERATOR(pg_catalog.=) $2",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_DELETE)
		elog(ERROR, "ash_replicant: removing mapping failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
	{
		ash_reject(ERRCODE_UNDEFINED_OBJECT, "unmap", "config_invalid",
				   "%s is not mapped in sink %s", ash_mapping_qualified_relname(target),
				   ash_quoted_name(sink_name));
	}
	bump_config_version(sink_name);
	SPI_finish();

	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}
