/*-------------------------------------------------------------------------
 *
 * api_sink.c
 *	  SQL surface for sinks, pipeline start options, logical-message routes,
 *	  and the start/stop switches.
 *
 * NOTES
 *	  Every function here validates its whole input before it writes
 *	  anything, and raises through ash_reject() with a reason code (README.md#reason-codes)
 *	  when it refuses, so a refusal changes nothing.  Messages may name
 *	  sinks, slots, tables, columns and settings; they never carry a row
 *	  value, a message prefix, a conninfo or an identity value.
 *
 *	  Catalog access goes through SPI with $n parameters only; the catalogs
 *	  are schema-qualified constants and every other identifier that reaches
 *	  SQL text is quoted.  The SQL functions are SECURITY DEFINER (they run
 *	  as the extension owner), so the calling role is GetOuterUserId().
 *	  It must have the privileges of the owner it gives a sink, and of the
 *	  current owner of a sink it configures, starts, stops or drops
 *	  (ash_owner_check_caller, in check_owner and lock_sink): the worker
 *	  writes the sink's targets, and runs their triggers, as that owner.
 *
 *	  Concurrency: each function first locks its sink row FOR UPDATE, which
 *	  serializes configuration changes, start and stop of one sink; creates
 *	  serialize on a lock of the sinks catalog (sink_check_unique).  start
 *	  bumps pipelines.start_generation in place (never read-modify-write),
 *	  so of two concurrent starts neither can clear the other's generation.
 *	  Configuration changes bump sinks.config_version so a running worker
 *	  notices them; start, stop and configuration changes wake the launcher
 *	  at COMMIT (never before: it must see the committed state).
 *
 *	  ignored_sources and pipelines.tables are stored in the canonical form
 *	  quote_identifier(schema).quote_identifier(table); readers parse them
 *	  with ash_parse_qualified_name() (qualname.c).  pipelines.census is stored normalised:
 *	  an object with every closed key present.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/htup_details.h"
#include "access/relation.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "libpq-fe.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "ash_replicant.h"
#include "errors.h"
#include "launcher.h"
#include "libpq_conn.h"
#include "mapping_validate.h"
#include "messages.h"
#include "origin.h"
#include "owner_scope.h"
#include "qualname.h"
#include "route_rules.h"
#include "shmem.h"
#include "syncrep.h"

PG_FUNCTION_INFO_V1(ash_replicant_create_sink);
PG_FUNCTION_INFO_V1(ash_replicant_drop_sink);
PG_FUNCTION_INFO_V1(ash_replicant_alter_sink);
PG_FUNCTION_INFO_V1(ash_replicant_add_message_route);
PG_FUNCTION_INFO_V1(ash_replicant_drop_message_route);
PG_FUNCTION_INFO_V1(ash_replicant_configure_pipeline);
PG_FUNCTION_INFO_V1(ash_replicant_start);
PG_FUNCTION_INFO_V1(ash_replicant_stop);

#define STAGE_SINK		"sink"
#define STAGE_ROUTE		"message route"
#define STAGE_PIPELINE	"pipeline"
#define STAGE_START		"start"

#define MIN_INFLIGHT_LAG	(1024 * 1024)
#define MIN_SCHEMA_CHECK_MS	50

/* The sink row as the functions here need it (SPI memory). */
typedef struct AshSinkInfo
{
	char	   *sink_name;
	char	   *slot_name;
	bool		append_log;		/* sink_kind = 'append_log' */
	char	   *initial_state;	/* NULL when not declared */
	ArrayType  *ignored_prefixes;	/* text[] */
	bool		has_horizon;
	Interval   *recovery_horizon;	/* valid when has_horizon */
	Oid			owner;
} AshSinkInfo;

/* ---------------------------------------------------------------------
 * Small helpers.
 * ---------------------------------------------------------------------
 */

static void check_owner_tables(const char *sink_name, Oid owner);

/* Run one parameterized catalog statement; errors out on SPI failure. */
static int
catalog_exec(const char *sql, int nargs, Oid *types, Datum *values,
			 const char *nulls, bool read_only)
{
	int			ret;

	ret = SPI_execute_with_args(sql, nargs, types, values, nulls, read_only, 0);
	if (ret < 0)
		elog(ERROR, "ash_replicant: catalog statement failed: %s",
			 SPI_result_code_string(ret));
	return ret;
}

/* The sink_name argument of a non-strict function (NULL is refused). */
static char *
sink_name_arg(FunctionCallInfo fcinfo, const char *stage)
{
	if (PG_ARGISNULL(0))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, stage, "config_invalid",
				   "sink_name must not be NULL");
	return text_to_cstring(PG_GETARG_TEXT_PP(0));
}

static void
reject_unknown_sink(const char *sink_name)
{
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("ash_replicant: sink \"%s\" does not exist", sink_name)));
}

/* Is this interval strictly greater than zero? */
static bool
interval_is_positive(Interval *iv)
{
	Interval   *zero = palloc0(sizeof(Interval));

	return DatumGetBool(DirectFunctionCall2(interval_gt,
											IntervalPGetDatum(iv),
											IntervalPGetDatum(zero)));
}

/* Deconstruct a text[] argument; multi-dimensional arrays are refused. */
static void
text_array_elems(ArrayType *arr, Datum **elems, bool **nulls, int *n,
				 const char *stage, const char *reason, const char *setting)
{
	if (ARR_NDIM(arr) > 1)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
				   "%s must be a one-dimensional array", setting);
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, elems, nulls, n);
}

static ArrayType *
text_array_from_cstrings(char **strs, int n)
{
	Datum	   *d;

	if (n == 0)
		return construct_empty_array(TEXTOID);
	d = palloc(sizeof(Datum) * n);
	for (int i = 0; i < n; i++)
		d[i] = CStringGetTextDatum(strs[i]);
	return construct_array(d, n, TEXTOID, -1, false, TYPALIGN_INT);
}

/* Schema-qualified, quoted name of a relation, or NULL when it is gone. */
static char *
relation_display_name(Oid relid)
{
	char	   *relname = get_rel_name(relid);
	char	   *nspname;

	if (relname == NULL)
		return NULL;
	nspname = get_namespace_name(get_rel_namespace(relid));
	return quote_qualified_identifier(nspname, relname);
}

/* A namespace no route target may live in (temporary ones are checked apart). */
static bool
namespace_is_reserved(Oid nspid)
{
	Oid			own = get_namespace_oid("ash_replicant", true);

	return IsCatalogNamespace(nspid) || IsToastNamespace(nspid) ||
		nspid == own;
}

static void
bump_config_version(const char *sink_name)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(sink_name)};

	catalog_exec("UPDATE ash_replicant.sinks"
				 "   SET config_version = config_version + 1"
				 " WHERE sink_name = $1",
				 1, types, values, NULL, false);
	if (SPI_processed != 1)
		elog(ERROR, "ash_replicant: sink \"%s\" vanished while being configured",
			 sink_name);
}

/*
 * Lock the sink row FOR UPDATE and load it; unknown sink is an error, and
 * so is a caller without the privileges of its owner (refused at stage):
 * every function here that takes an existing sink configures or operates it.
 */
static void
lock_sink(const char *sink_name, const char *stage, AshSinkInfo *info)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(sink_name)};
	HeapTuple	tup;
	TupleDesc	desc;
	Datum		d;
	bool		isnull;

	catalog_exec("SELECT slot_name, sink_kind, initial_state,"
				 "       ignored_message_prefixes, recovery_horizon,"
				 "       owner::pg_catalog.oid"
				 "  FROM ash_replicant.sinks WHERE sink_name = $1 FOR UPDATE",
				 1, types, values, NULL, false);
	if (SPI_processed != 1)
		reject_unknown_sink(sink_name);

	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	memset(info, 0, sizeof(*info));
	info->sink_name = pstrdup(sink_name);
	info->slot_name = SPI_getvalue(tup, desc, 1);
	info->append_log = strcmp(SPI_getvalue(tup, desc, 2), "append_log") == 0;
	info->initial_state = SPI_getvalue(tup, desc, 3);	/* NULL if null */
	d = SPI_getbinval(tup, desc, 4, &isnull);
	info->ignored_prefixes = isnull ? construct_empty_array(TEXTOID) :
		DatumGetArrayTypePCopy(d);
	d = SPI_getbinval(tup, desc, 5, &isnull);
	info->has_horizon = !isnull;
	if (!isnull)
	{
		info->recovery_horizon = palloc(sizeof(Interval));
		memcpy(info->recovery_horizon, DatumGetIntervalP(d), sizeof(Interval));
	}
	d = SPI_getbinval(tup, desc, 6, &isnull);
	info->owner = isnull ? InvalidOid : DatumGetObjectId(d);
	ash_owner_check_caller(info->owner, stage, sink_name);
}

/*
 * Validate and normalise a text[] of "schema.table" entries.  Every entry
 * must parse, none may be NULL, no two may name the same table.  Returns
 * the canonical array.  Entries are reported by position when malformed
 * and by canonical name when duplicated.
 */
static ArrayType *
normalise_table_list(ArrayType *arr, const char *stage, const char *reason,
					 const char *setting)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	  **canon;

	text_array_elems(arr, &elems, &nulls, &n, stage, reason, setting);
	canon = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		char	   *schema;
		char	   *table;

		if (nulls[i])
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
					   "%s element %d is NULL", setting, i + 1);
		if (!ash_parse_qualified_name(TextDatumGetCString(elems[i]),
									  &schema, &table))
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
					   "%s element %d is not strictly schema.table", setting, i + 1);
		canon[i] = ash_canonical_qualified_name(schema, table);
		for (int j = 0; j < i; j++)
		{
			if (strcmp(canon[j], canon[i]) == 0)
				ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
						   "%s lists %s twice", setting, canon[i]);
		}
	}
	return text_array_from_cstrings(canon, n);
}

/*
 * Validate a text[] of plain names or prefixes: no NULL, no empty string,
 * no duplicates, optionally at most NAMEDATALEN-1 bytes.  Elements are
 * reported by position only (prefixes must never be echoed).
 */
static void
check_string_list(ArrayType *arr, bool name_sized, const char *stage,
				  const char *reason, const char *setting)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	char	  **strs;

	text_array_elems(arr, &elems, &nulls, &n, stage, reason, setting);
	strs = palloc(sizeof(char *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		if (nulls[i])
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
					   "%s element %d is NULL", setting, i + 1);
		strs[i] = TextDatumGetCString(elems[i]);
		if (strs[i][0] == '\0')
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
					   "%s element %d is empty", setting, i + 1);
		if (name_sized && strlen(strs[i]) >= NAMEDATALEN)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
					   "%s element %d is longer than %d bytes", setting, i + 1,
					   NAMEDATALEN - 1);
		for (int j = 0; j < i; j++)
		{
			if (strcmp(strs[j], strs[i]) == 0)
				ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, stage, reason,
						   "%s element %d duplicates element %d", setting,
						   i + 1, j + 1);
		}
	}
}

/* ---------------------------------------------------------------------
 * Sinks.
 * ---------------------------------------------------------------------
 */

/* PostgreSQL's slot name rule: [a-z0-9_], 1..NAMEDATALEN-1 bytes. */
static bool
slot_name_is_valid(const char *name)
{
	size_t		len = strlen(name);

	if (len == 0 || len >= NAMEDATALEN)
		return false;
	for (const char *p = name; *p; p++)
	{
		if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_'))
			return false;
	}
	return true;
}

/* The arguments of ash_replicant_create_sink, validated. */
typedef struct SinkArgs
{
	char	   *sink_name;
	char	   *slot_name;
	char	   *sink_kind;
	bool		append_log;
	char	   *initial_state;	/* NULL: not declared */
	ArrayType  *ignored_sources;
	ArrayType  *ignored_prefixes;
	Interval   *horizon;		/* NULL: none */
	int32		batch_max;
	Oid			owner;
} SinkArgs;

/* The sink name, and the slot name: given, or derived from the sink name. */
static void
sink_arg_names(FunctionCallInfo fcinfo, SinkArgs *a)
{
	a->sink_name = sink_name_arg(fcinfo, STAGE_SINK);
	if (a->sink_name[0] == '\0' || strlen(a->sink_name) >= ASH_NAME_LEN)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
				   "sink_name must be 1 to %d bytes", ASH_NAME_LEN - 1);

	if (PG_ARGISNULL(1))
	{
		a->slot_name = a->sink_name;
		if (!slot_name_is_valid(a->slot_name))
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "slot_name_invalid",
					   "slot \"%s\" derived from the sink name; pass slot_name of [a-z0-9_], 1 to %d bytes",
					   a->slot_name, NAMEDATALEN - 1);
	}
	else
	{
		a->slot_name = text_to_cstring(PG_GETARG_TEXT_PP(1));
		if (!slot_name_is_valid(a->slot_name))
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "slot_name_invalid",
					   "slot \"%s\" must be [a-z0-9_], 1 to %d bytes",
					   a->slot_name, NAMEDATALEN - 1);
	}
}

/* The sink kind and its initial state. */
static void
sink_arg_kind(FunctionCallInfo fcinfo, SinkArgs *a)
{
	if (PG_ARGISNULL(2))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
				   "sink_kind must not be NULL");
	a->sink_kind = text_to_cstring(PG_GETARG_TEXT_PP(2));
	if (strcmp(a->sink_kind, "state_mirror") == 0)
		a->append_log = false;
	else if (strcmp(a->sink_kind, "append_log") == 0)
		a->append_log = true;
	else
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
				   "sink_kind must be state_mirror or append_log");

	a->initial_state = NULL;
	if (!PG_ARGISNULL(3))
	{
		a->initial_state = text_to_cstring(PG_GETARG_TEXT_PP(3));
		if (strcmp(a->initial_state, "go_forward") != 0 &&
			strcmp(a->initial_state, "snapshot") != 0)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
					   "initial_state must be go_forward or snapshot");
	}
	else if (a->append_log)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
				   "an append_log sink requires initial_state go_forward or snapshot");
}

/* Ignores, recovery horizon and batching. */
static void
sink_arg_limits(FunctionCallInfo fcinfo, SinkArgs *a)
{
	a->ignored_sources = PG_ARGISNULL(4) ? construct_empty_array(TEXTOID) :
		normalise_table_list(PG_GETARG_ARRAYTYPE_P(4), STAGE_SINK,
							 "ignore_invalid", "ignored_sources");
	if (PG_ARGISNULL(5))
		a->ignored_prefixes = construct_empty_array(TEXTOID);
	else
	{
		a->ignored_prefixes = PG_GETARG_ARRAYTYPE_P(5);
		check_string_list(a->ignored_prefixes, false, STAGE_SINK, "config_invalid",
						  "ignored_message_prefixes");
	}

	a->horizon = NULL;
	if (!PG_ARGISNULL(6))
	{
		a->horizon = PG_GETARG_INTERVAL_P(6);
		if (a->append_log)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK,
					   "recovery_horizon_invalid",
					   "recovery_horizon is not accepted on an append_log sink");
		if (!interval_is_positive(a->horizon))
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK,
					   "recovery_horizon_invalid", "recovery_horizon must be positive");
	}

	if (PG_ARGISNULL(7))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
				   "batch_max_transactions must not be NULL");
	a->batch_max = PG_GETARG_INT32(7);
	if (a->batch_max < 1)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
				   "batch_max_transactions must be at least 1");
}

/* A sink owner must exist, and the calling role must have its rights. */
static void
check_owner(Oid owner)
{
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(owner)))
		ash_reject(ERRCODE_UNDEFINED_OBJECT, STAGE_SINK, "config_invalid",
				   "owner role does not exist");
	ash_owner_check_caller(owner, STAGE_SINK, NULL);
}

/* The owner: the calling role, or a role the calling role has the rights of. */
static void
sink_arg_owner(FunctionCallInfo fcinfo, SinkArgs *a)
{
	if (PG_ARGISNULL(8))
		a->owner = GetOuterUserId();
	else
	{
		a->owner = PG_GETARG_OID(8);
		check_owner(a->owner);
	}
}

/*
 * SPI connected: refuse a sink name or slot already taken.
 *
 * Registrations serialize on a self-conflicting lock of the sinks catalog
 * (held to commit; ordinary reads and writes of the catalog do not wait
 * for it), and the checks read the rows committed by then, not the
 * transaction's snapshot: two creates at once of names that collide only
 * as the source or this server sees them (the unique index knows neither)
 * would each miss the other's row.
 */
static void
sink_check_unique(const SinkArgs *a)
{
	Oid			t1[1] = {TEXTOID};
	Datum		v1[1];

	(void) RangeVarGetRelid(makeRangeVar("ash_replicant", "sinks", -1),
							ShareUpdateExclusiveLock, false);
	PushActiveSnapshot(GetLatestSnapshot());

	v1[0] = CStringGetTextDatum(a->sink_name);
	catalog_exec("SELECT 1 FROM ash_replicant.sinks WHERE sink_name = $1",
				 1, t1, v1, NULL, true);
	if (SPI_processed > 0)
		ash_reject(ERRCODE_DUPLICATE_OBJECT, STAGE_SINK, "config_invalid",
				   "sink \"%s\" already exists", a->sink_name);

	/*
	 * Names the source or this server could not tell apart: the source
	 * knows a pipeline by its application name (a synchronous standby is
	 * listed by it: one sink would stand in for the other), this server a
	 * sink's writes by its replication origins (a helper copier of one
	 * would find the other's held, or drop it).
	 */
	catalog_exec("SELECT sink_name FROM ash_replicant.sinks", 0, NULL, NULL, NULL, true);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		char	   *other = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);

		if (ash_syncrep_appnames_collide(a->sink_name, other))
			ash_reject(ERRCODE_DUPLICATE_OBJECT, STAGE_SINK, "config_invalid",
					   "sink \"%s\" would be known to the source by sink \"%s\"'s application name"
					   " (compared case-blind, 63 bytes, a non-ASCII byte as '?'): choose a name"
					   " that differs from it there", a->sink_name, other);
		if (ash_origin_names_collide(a->sink_name, other))
			ash_reject(ERRCODE_DUPLICATE_OBJECT, STAGE_SINK, "config_invalid",
					   "sink \"%s\" would share a replication origin with sink \"%s\""
					   " (its snapshot helpers' are named <sink>_copier<n>): choose another name",
					   a->sink_name, other);
	}

	v1[0] = CStringGetTextDatum(a->slot_name);
	catalog_exec("SELECT sink_name FROM ash_replicant.sinks WHERE slot_name = $1",
				 1, t1, v1, NULL, true);
	if (SPI_processed > 0)
		ash_reject(ERRCODE_DUPLICATE_OBJECT, STAGE_SINK, "slot_name_invalid",
				   "slot \"%s\" is already used by sink \"%s\"", a->slot_name,
				   SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1));
	PopActiveSnapshot();
}

/* SPI connected: the sinks row. */
static void
sink_insert(const SinkArgs *a)
{
	Oid			types[9] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID,
	TEXTARRAYOID, INTERVALOID, INT4OID, REGROLEOID};
	Datum		values[9];
	char		nulls[9];

	memset(nulls, ' ', sizeof(nulls));
	values[0] = CStringGetTextDatum(a->sink_name);
	values[1] = CStringGetTextDatum(a->slot_name);
	values[2] = CStringGetTextDatum(a->sink_kind);
	if (a->initial_state)
		values[3] = CStringGetTextDatum(a->initial_state);
	else
	{
		values[3] = (Datum) 0;
		nulls[3] = 'n';
	}
	values[4] = PointerGetDatum(a->ignored_sources);
	values[5] = PointerGetDatum(a->ignored_prefixes);
	if (a->horizon)
		values[6] = IntervalPGetDatum(a->horizon);
	else
	{
		values[6] = (Datum) 0;
		nulls[6] = 'n';
	}
	values[7] = Int32GetDatum(a->batch_max);
	values[8] = ObjectIdGetDatum(a->owner);

	catalog_exec("INSERT INTO ash_replicant.sinks (sink_name, slot_name,"
				 "  sink_kind, initial_state, ignored_sources,"
				 "  ignored_message_prefixes, recovery_horizon,"
				 "  batch_max_transactions, owner)"
				 " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)"
				 " ON CONFLICT DO NOTHING",
				 9, types, values, nulls, false);
	if (SPI_processed != 1)
		ash_reject(ERRCODE_DUPLICATE_OBJECT, STAGE_SINK, "config_invalid",
				   "sink \"%s\" or slot \"%s\" was created concurrently",
				   a->sink_name, a->slot_name);
}

/*
 * ash_replicant_create_sink(sink_name, slot_name, sink_kind, initial_state,
 *		ignored_sources, ignored_message_prefixes, recovery_horizon,
 *		batch_max_transactions, owner)
 */
Datum
ash_replicant_create_sink(PG_FUNCTION_ARGS)
{
	SinkArgs	a;

	sink_arg_names(fcinfo, &a);
	sink_arg_kind(fcinfo, &a);
	sink_arg_limits(fcinfo, &a);
	sink_arg_owner(fcinfo, &a);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	sink_check_unique(&a);
	sink_insert(&a);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * ash_replicant_drop_sink(sink_name) — refuses while the pipeline is
 * enabled or a process of it (worker, helper copier) is alive.
 * Checkpoints are kept: they belong to the (source, slot) pair, and the
 * recovery functions manage them.
 */
Datum
ash_replicant_drop_sink(PG_FUNCTION_ARGS)
{
	char	   *sink_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	AshSinkInfo sink;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		enabled = false;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");

	lock_sink(sink_name, STAGE_SINK, &sink);
	values[0] = CStringGetTextDatum(sink_name);
	catalog_exec("SELECT enabled FROM ash_replicant.pipelines"
				 " WHERE sink_name = $1 FOR UPDATE",
				 1, types, values, NULL, false);
	if (SPI_processed == 1)
	{
		bool		isnull;

		enabled = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull));
	}
	if (enabled || ash_pipeline_is_running(sink_name))
		ash_reject(ERRCODE_OBJECT_IN_USE, STAGE_SINK, "pipeline_running",
				   "sink \"%s\": stop its pipeline with ash_replicant_stop first",
				   sink_name);

	catalog_exec("DELETE FROM ash_replicant.sinks WHERE sink_name = $1",
				 1, types, values, NULL, false);
	if (SPI_processed != 1)
		reject_unknown_sink(sink_name);
	/*
	 * The replication origins its writes were tagged with (origin.c).  The
	 * check above sees the pipeline worker's slot only: a worker past it,
	 * or a helper copier, may still be exiting with its origin.
	 */
	if (!ash_origin_drop_all(sink_name))
		ash_reject(ERRCODE_OBJECT_IN_USE, STAGE_SINK, "pipeline_running",
				   "sink \"%s\": a process of its pipeline, stopped, has not exited yet;"
				   " try again once it has", sink_name);

	SPI_finish();
	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}

/*
 * ash_replicant_alter_sink(sink_name, ignored_sources,
 *		ignored_message_prefixes, recovery_horizon, batch_max_transactions,
 *		owner, reset_recovery_horizon) -- change the settings a sink may
 * change while keeping its mappings, pipeline and checkpoint; NULL keeps a
 * setting.  The slot, kind and initial state are the checkpoint's identity
 * and contract: they are not among them.  Validated as create_sink does.
 * A running worker restarts on the new configuration (config_version); a
 * pipeline halted misconfigured is started again, through every check
 * ash_replicant_start makes, so status and doctor judge the new settings
 * at once.  A pipeline halted otherwise stays halted: that is a decision
 * about data, the operator's.
 */
Datum
ash_replicant_alter_sink(PG_FUNCTION_ARGS)
{
	char	   *sink_name = sink_name_arg(fcinfo, STAGE_SINK);
	AshSinkInfo sink;
	bool		reset_horizon = !PG_ARGISNULL(6) && PG_GETARG_BOOL(6);
	Oid			types[7] = {TEXTOID, TEXTARRAYOID, TEXTARRAYOID, INTERVALOID, INT4OID,
	REGROLEOID, BOOLOID};
	Datum		values[7];
	char		nulls[7];
	bool		restart;
	bool		isnull;

	memset(nulls, 'n', sizeof(nulls));
	values[0] = CStringGetTextDatum(sink_name);
	nulls[0] = ' ';
	if (!PG_ARGISNULL(1))
	{
		values[1] = PointerGetDatum(normalise_table_list(PG_GETARG_ARRAYTYPE_P(1), STAGE_SINK,
														 "ignore_invalid", "ignored_sources"));
		nulls[1] = ' ';
	}
	if (!PG_ARGISNULL(2))
	{
		check_string_list(PG_GETARG_ARRAYTYPE_P(2), false, STAGE_SINK, "config_invalid",
						  "ignored_message_prefixes");
		values[2] = PointerGetDatum(PG_GETARG_ARRAYTYPE_P(2));
		nulls[2] = ' ';
	}
	if (!PG_ARGISNULL(3))
	{
		if (reset_horizon)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "recovery_horizon_invalid",
					   "pass recovery_horizon or reset_recovery_horizon, not both");
		if (!interval_is_positive(PG_GETARG_INTERVAL_P(3)))
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK,
					   "recovery_horizon_invalid", "recovery_horizon must be positive");
		values[3] = IntervalPGetDatum(PG_GETARG_INTERVAL_P(3));
		nulls[3] = ' ';
	}
	if (!PG_ARGISNULL(4))
	{
		if (PG_GETARG_INT32(4) < 1)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "config_invalid",
					   "batch_max_transactions must be at least 1");
		values[4] = Int32GetDatum(PG_GETARG_INT32(4));
		nulls[4] = ' ';
	}
	if (!PG_ARGISNULL(5))
	{
		Oid			owner = PG_GETARG_OID(5);

		check_owner(owner);
		values[5] = ObjectIdGetDatum(owner);
		nulls[5] = ' ';
	}
	values[6] = BoolGetDatum(reset_horizon);
	nulls[6] = ' ';

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	lock_sink(sink_name, STAGE_SINK, &sink);
	if (sink.append_log && !PG_ARGISNULL(3))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_SINK, "recovery_horizon_invalid",
				   "recovery_horizon is not accepted on an append_log sink");
	if (!PG_ARGISNULL(5))
		check_owner_tables(sink_name, PG_GETARG_OID(5));

	catalog_exec("UPDATE ash_replicant.sinks SET"
				 "  ignored_sources = coalesce($2, ignored_sources),"
				 "  ignored_message_prefixes = coalesce($3, ignored_message_prefixes),"
				 "  recovery_horizon = CASE WHEN $7 THEN NULL"
				 "    ELSE coalesce($4, recovery_horizon) END,"
				 "  batch_max_transactions = coalesce($5, batch_max_transactions),"
				 "  owner = coalesce($6, owner)"
				 " WHERE sink_name = $1",
				 7, types, values, nulls, false);

	/*
	 * The routes against what is stored now (a horizon raised above a
	 * retention, reset, or a routed prefix ignored), as add_message_route
	 * keeps them; the error takes the UPDATE back.
	 */
	{
		AshRouteVerdict v;

		ash_route_rules_judge(sink_name, ASH_ROUTE_RULES_SINK, &v);
		if (v.reason != NULL)
			ash_reject(v.sqlerrcode, STAGE_SINK, v.reason, "%s", v.context);
	}
	bump_config_version(sink_name);

	catalog_exec("SELECT enabled AND halt_generation >= start_generation"
				 "   AND halt_class = 'misconfigured'"
				 "  FROM ash_replicant.pipelines WHERE sink_name = $1",
				 1, types, values, NULL, true);
	restart = SPI_processed == 1 &&
		DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
		!isnull;
	SPI_finish();

	if (restart)
		DirectFunctionCall1(ash_replicant_start, CStringGetTextDatum(sink_name));
	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}

/*
 * A new owner of a sink must be able to write every table the sink writes
 * (owner_scope.c): a registered target or route table whose owner neither
 * has the new owner's privileges nor gives the new owner its own is
 * refused target_owner_untrusted.  A tenant's table (context tenancy) is
 * judged when the pipeline writes it.
 */
static void
check_owner_tables(const char *sink_name, Oid owner)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	List	   *relids = NIL;
	ListCell   *lc;

	values[0] = CStringGetTextDatum(sink_name);
	catalog_exec("SELECT target::pg_catalog.oid FROM ash_replicant.resources WHERE sink_name = $1"
				 " UNION SELECT target::pg_catalog.oid FROM ash_replicant.message_routes"
				 " WHERE sink_name = $1 AND target IS NOT NULL",
				 1, types, values, NULL, true);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);

		if (!isnull)
			relids = lappend_oid(relids, DatumGetObjectId(d));
	}
	foreach(lc, relids)
	{
		Oid			relid = lfirst_oid(lc);
		char	   *nsp = get_namespace_name(get_rel_namespace(relid));
		char	   *rel = get_rel_name(relid);

		if (nsp == NULL || rel == NULL)
			continue;			/* gone: doctor reports it */
		ash_owner_check_table(owner, relid, STAGE_SINK,
							  psprintf("sink \"%s\": table %s.%s", sink_name,
									   ash_quoted_name(nsp), ash_quoted_name(rel)));
	}
}

/* ---------------------------------------------------------------------
 * Message routes.
 * ---------------------------------------------------------------------
 */

/* Does the sink owner hold INSERT on the table, or on each listed column? */
static bool
owner_can_insert(Oid relid, Oid owner, AttrNumber *attnums, int nattrs)
{
	if (pg_class_aclcheck(relid, owner, ACL_INSERT) == ACLCHECK_OK)
		return true;
	for (int i = 0; i < nattrs; i++)
	{
		if (pg_attribute_aclcheck(relid, attnums[i], owner, ACL_INSERT) != ACLCHECK_OK)
			return false;
	}
	return true;
}

/*
 * Table target of a state-mirror route: a local ordinary or partitioned
 * table with content (bytea or text), operation_key bytea, content_digest
 * bytea and optionally prefix text, none of them generated; every other
 * column nullable or defaulted; not a mapping target of this sink; INSERT
 * for the sink owner.
 */
static void
check_route_table_state_mirror(AshSinkInfo *sink, Oid relid, const char *relname)
{
	Relation	rel;
	TupleDesc	desc;
	AttrNumber	used[4];
	int			nused = 0;
	bool		have_content = false,
				have_key = false,
				have_digest = false;

	rel = try_relation_open(relid, AccessShareLock);
	if (rel == NULL)
		ash_reject(ERRCODE_UNDEFINED_TABLE, STAGE_ROUTE, "message_route_invalid",
				   "target relation does not exist");
	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ash_reject(ERRCODE_WRONG_OBJECT_TYPE, STAGE_ROUTE, "message_route_invalid",
				   "target %s is not an ordinary or partitioned table", relname);
	if (isAnyTempNamespace(RelationGetNamespace(rel)))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target %s is a temporary table",
				   quote_identifier(RelationGetRelationName(rel)));
	if (namespace_is_reserved(RelationGetNamespace(rel)))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target %s is in a system or extension schema", relname);

	desc = RelationGetDescr(rel);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		const char *col = NameStr(att->attname);
		bool		known = true;

		if (att->attisdropped)
			continue;
		if (strcmp(col, "content") == 0)
		{
			if (att->atttypid != BYTEAOID && att->atttypid != TEXTOID)
				ash_reject(ERRCODE_DATATYPE_MISMATCH, STAGE_ROUTE, "message_route_invalid",
						   "column \"content\" of target %s must be bytea or text", relname);
			have_content = true;
		}
		else if (strcmp(col, "operation_key") == 0)
		{
			if (att->atttypid != BYTEAOID)
				ash_reject(ERRCODE_DATATYPE_MISMATCH, STAGE_ROUTE, "message_route_invalid",
						   "column \"operation_key\" of target %s must be bytea", relname);
			have_key = true;
		}
		else if (strcmp(col, "content_digest") == 0)
		{
			if (att->atttypid != BYTEAOID)
				ash_reject(ERRCODE_DATATYPE_MISMATCH, STAGE_ROUTE, "message_route_invalid",
						   "column \"content_digest\" of target %s must be bytea", relname);
			have_digest = true;
		}
		else if (strcmp(col, "prefix") == 0)
		{
			if (att->atttypid != TEXTOID)
				ash_reject(ERRCODE_DATATYPE_MISMATCH, STAGE_ROUTE, "message_route_invalid",
						   "column \"prefix\" of target %s must be text", relname);
		}
		else
			known = false;

		if (known)
		{
			if (att->attgenerated)
				ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
						   "column \"%s\" of target %s is generated", col, relname);
			used[nused++] = att->attnum;
		}
		else if (att->attnotnull && !att->atthasdef && !att->attidentity &&
				 !att->attgenerated)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
					   "column \"%s\" of target %s is NOT NULL without a default",
					   col, relname);
	}
	if (!have_content)
		ash_reject(ERRCODE_UNDEFINED_COLUMN, STAGE_ROUTE, "message_route_invalid",
				   "target %s has no column \"content\"", relname);
	if (!have_key)
		ash_reject(ERRCODE_UNDEFINED_COLUMN, STAGE_ROUTE, "message_route_invalid",
				   "target %s has no column \"operation_key\"", relname);
	if (!have_digest)
		ash_reject(ERRCODE_UNDEFINED_COLUMN, STAGE_ROUTE, "message_route_invalid",
				   "target %s has no column \"content_digest\"", relname);

	/* the writes would run as neither role (owner_scope.c) */
	ash_owner_check_table(sink->owner, relid, STAGE_ROUTE, relname);
	if (!owner_can_insert(relid, sink->owner, used, nused))
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, STAGE_ROUTE, "message_route_invalid",
				   "the owner of sink \"%s\" may not INSERT into target %s",
				   sink->sink_name, relname);
	if (ash_rls_applies_to_owner(rel, sink->owner))
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, STAGE_ROUTE, "message_route_invalid",
				   "row-level security of target %s applies to the owner of sink \"%s\"",
				   relname, sink->sink_name);

	/* a mirrored table is not a message outbox */
	{
		Oid			types[2] = {TEXTOID, OIDOID};
		Datum		values[2] = {CStringGetTextDatum(sink->sink_name),
		ObjectIdGetDatum(relid)};

		catalog_exec("SELECT 1 FROM ash_replicant.resources"
					 " WHERE sink_name = $1 AND target::pg_catalog.oid = $2",
					 2, types, values, NULL, true);
		if (SPI_processed > 0)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
					   "target %s is a mapped table of sink \"%s\"", relname,
					   sink->sink_name);
	}

	relation_close(rel, NoLock);
}

/*
 * Table target of an append-log route: an append-log mapping of this sink
 * (ash_replicant_map_table(..., append_log => true) validated its shape,
 * including the message prefix/content columns) that is not tenant-scoped.
 */
static void
check_route_table_append_log(AshSinkInfo *sink, Oid relid, const char *relname)
{
	Oid			types[2] = {TEXTOID, OIDOID};
	Datum		values[2] = {CStringGetTextDatum(sink->sink_name),
	ObjectIdGetDatum(relid)};
	bool		isnull;

	catalog_exec("SELECT tenant_column IS NULL AND tenant_function IS NULL"
				 "       AND tenant_strategy IS NULL"
				 "  FROM ash_replicant.resources"
				 " WHERE sink_name = $1 AND target::pg_catalog.oid = $2"
				 "   AND append_log",
				 2, types, values, NULL, true);
	if (SPI_processed != 1)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target %s is not an append-log mapping of sink \"%s\"",
				   relname, sink->sink_name);
	if (!DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
									1, &isnull)))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target %s is a tenant-scoped mapping", relname);
}

/*
 * Function target of a state-mirror route: a plain, non-set-returning
 * function taking exactly (text, bytea) = (prefix, content) or
 * (text, bytea, bytea, bytea) = (prefix, content, operation_key,
 * content_digest), outside system schemas, executable by the sink owner.
 */
static void
check_route_function(AshSinkInfo *sink, Oid funcid)
{
	HeapTuple	tup;
	Form_pg_proc proc;
	char	   *fname;
	bool		shape_ok;

	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	if (!HeapTupleIsValid(tup))
		ash_reject(ERRCODE_UNDEFINED_FUNCTION, STAGE_ROUTE, "message_route_invalid",
				   "target function does not exist");
	proc = (Form_pg_proc) GETSTRUCT(tup);
	fname = format_procedure(funcid);

	if (sink->append_log)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "append_log sink \"%s\" records messages in an append-log mapping; function target %s is not accepted",
				   sink->sink_name, fname);
	if (proc->prokind != PROKIND_FUNCTION)
		ash_reject(ERRCODE_WRONG_OBJECT_TYPE, STAGE_ROUTE, "message_route_invalid",
				   "target %s is not a plain function", fname);
	if (proc->proretset)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target %s returns a set", fname);

	shape_ok = (proc->pronargs == 2 || proc->pronargs == 4) &&
		proc->proargtypes.values[0] == TEXTOID &&
		proc->proargtypes.values[1] == BYTEAOID;
	if (shape_ok && proc->pronargs == 4)
		shape_ok = proc->proargtypes.values[2] == BYTEAOID &&
			proc->proargtypes.values[3] == BYTEAOID;
	if (!shape_ok || OidIsValid(proc->provariadic))
		ash_reject(ERRCODE_DATATYPE_MISMATCH, STAGE_ROUTE, "message_route_invalid",
				   "target %s must take (text, bytea) or (text, bytea, bytea, bytea)",
				   fname);
	if (isAnyTempNamespace(proc->pronamespace))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target function %s is temporary",
				   quote_identifier(NameStr(proc->proname)));
	if (namespace_is_reserved(proc->pronamespace))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target %s is in a system or extension schema", fname);
#if PG_VERSION_NUM >= 160000
	if (object_aclcheck(ProcedureRelationId, funcid, sink->owner, ACL_EXECUTE) != ACLCHECK_OK)
#else
	if (pg_proc_aclcheck(funcid, sink->owner, ACL_EXECUTE) != ACLCHECK_OK)
#endif
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, STAGE_ROUTE, "message_route_invalid",
				   "the owner of sink \"%s\" may not EXECUTE target %s",
				   sink->sink_name, fname);
	ReleaseSysCache(tup);
}

/* Is this prefix one of the sink's ignored prefixes? */
static bool
prefix_is_ignored(AshSinkInfo *sink, const char *prefix)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;

	deconstruct_array(sink->ignored_prefixes, TEXTOID, -1, false, TYPALIGN_INT,
					  &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		if (!nulls[i] && strcmp(TextDatumGetCString(elems[i]), prefix) == 0)
			return true;
	}
	return false;
}

/*
 * ash_replicant_add_message_route(sink_name, prefix, target, retention)
 * where target is regclass or regprocedure: two SQL overloads, one symbol.
 */
Datum
ash_replicant_add_message_route(PG_FUNCTION_ARGS)
{
	Oid			target_type = get_fn_expr_argtype(fcinfo->flinfo, 2);
	char	   *sink_name;
	char	   *prefix;
	Oid			target;
	Interval   *retention;
	AshSinkInfo sink;
	bool		is_function;

	if (target_type == REGCLASSOID)
		is_function = false;
	else if (target_type == REGPROCEDUREOID)
		is_function = true;
	else
		elog(ERROR, "ash_replicant: add_message_route called with an unexpected target type");

	sink_name = sink_name_arg(fcinfo, STAGE_ROUTE);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	lock_sink(sink_name, STAGE_ROUTE, &sink);

	if (PG_ARGISNULL(1))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "prefix must not be NULL");
	prefix = text_to_cstring(PG_GETARG_TEXT_PP(1));
	if (prefix[0] == '\0')
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "prefix must not be empty");
	if (PG_ARGISNULL(2))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "target must not be NULL");
	target = PG_GETARG_OID(2);
	if (PG_ARGISNULL(3))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "retention must not be NULL");
	retention = PG_GETARG_INTERVAL_P(3);
	if (!interval_is_positive(retention))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "retention must be positive");

	if (strcmp(prefix, ASH_MESSAGE_PREFIX_FLUSH) == 0)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "the prefix is reserved: ash_replicant's own messages are never routed");
	if (prefix_is_ignored(&sink, prefix))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE, "message_route_invalid",
				   "the prefix is listed in ignored_message_prefixes of sink \"%s\"",
				   sink_name);
	{
		Oid			types[2] = {TEXTOID, TEXTOID};
		Datum		values[2] = {CStringGetTextDatum(sink_name),
		CStringGetTextDatum(prefix)};

		catalog_exec("SELECT 1 FROM ash_replicant.message_routes"
					 " WHERE sink_name = $1 AND prefix = $2",
					 2, types, values, NULL, true);
		if (SPI_processed > 0)
			ash_reject(ERRCODE_DUPLICATE_OBJECT, STAGE_ROUTE, "message_route_invalid",
					   "sink \"%s\" already routes this prefix", sink_name);
	}

	/* the recovery horizon covers the replay window of a state mirror */
	if (!sink.append_log)
	{
		if (!sink.has_horizon)
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE,
					   "recovery_horizon_invalid",
					   "state_mirror sink \"%s\" needs a recovery_horizon to route messages",
					   sink_name);
		if (DatumGetBool(DirectFunctionCall2(interval_lt,
											 IntervalPGetDatum(retention),
											 IntervalPGetDatum(sink.recovery_horizon))))
			ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_ROUTE,
					   "retention_below_recovery_horizon",
					   "retention is shorter than the recovery_horizon of sink \"%s\"",
					   sink_name);
	}

	/* target shape */
	if (is_function)
		check_route_function(&sink, target);
	else
	{
		char	   *relname = relation_display_name(target);

		if (relname == NULL)
			ash_reject(ERRCODE_UNDEFINED_TABLE, STAGE_ROUTE, "message_route_invalid",
					   "target relation does not exist");
		if (sink.append_log)
			check_route_table_append_log(&sink, target, relname);
		else
			check_route_table_state_mirror(&sink, target, relname);
	}

	{
		Oid			types[5] = {TEXTOID, TEXTOID, REGCLASSOID, TEXTOID, INTERVALOID};
		Datum		values[5];
		char		nulls[5];

		memset(nulls, ' ', sizeof(nulls));
		values[0] = CStringGetTextDatum(sink_name);
		values[1] = CStringGetTextDatum(prefix);
		values[2] = ObjectIdGetDatum(is_function ? InvalidOid : target);
		/* a function by its signature (qualname.h): pg_upgrade keeps no OID */
		values[3] = is_function ? CStringGetTextDatum(ash_function_signature(target)) : (Datum) 0;
		nulls[is_function ? 2 : 3] = 'n';
		values[4] = IntervalPGetDatum(retention);
		catalog_exec(psprintf("INSERT INTO ash_replicant.message_routes"
							  " (sink_name, prefix, target, target_function, retention)"
							  " VALUES ($1, $2, $3, $4%s, $5)",
							  ash_function_column_cast("message_routes", "target_function")),
					 5, types, values, nulls, false);
	}
	bump_config_version(sink_name);

	SPI_finish();
	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}

/* ash_replicant_drop_message_route(sink_name, prefix) */
Datum
ash_replicant_drop_message_route(PG_FUNCTION_ARGS)
{
	char	   *sink_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	char	   *prefix = text_to_cstring(PG_GETARG_TEXT_PP(1));
	AshSinkInfo sink;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	lock_sink(sink_name, STAGE_ROUTE, &sink);

	values[0] = CStringGetTextDatum(sink_name);
	values[1] = CStringGetTextDatum(prefix);
	catalog_exec("DELETE FROM ash_replicant.message_routes"
				 " WHERE sink_name = $1 AND prefix = $2",
				 2, types, values, NULL, false);
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("ash_replicant: sink \"%s\" has no message route for this prefix",
						sink_name)));
	bump_config_version(sink_name);

	SPI_finish();
	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}

/* ---------------------------------------------------------------------
 * Pipeline start options.
 * ---------------------------------------------------------------------
 */

#define CENSUS_REJECT(...) \
	ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_PIPELINE, \
			   "census_options_invalid", __VA_ARGS__)

static Numeric
numeric_from_cstring(const char *s)
{
	return DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(s),
											   ObjectIdGetDatum(InvalidOid),
											   Int32GetDatum(-1)));
}

static int
numeric_compare(Numeric a, Numeric b)
{
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp, NumericGetDatum(a),
											 NumericGetDatum(b)));
}

/* A census integer: a JSON number, integral, within [lo, hi]. */
static int64
census_int(JsonbValue *v, const char *key, int64 lo, int64 hi)
{
	Numeric		n;
	int64		i;

	if (v->type != jbvNumeric)
		CENSUS_REJECT("census key \"%s\" must be a JSON number", key);
	n = v->val.numeric;
	if (numeric_is_nan(n) || numeric_is_inf(n) ||
		numeric_compare(n, int64_to_numeric(lo)) < 0 ||
		numeric_compare(n, int64_to_numeric(hi)) > 0)
		CENSUS_REJECT("census key \"%s\" must be an integer from " INT64_FORMAT
					  " to " INT64_FORMAT, key, lo, hi);
	i = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(n)));
	if (numeric_compare(n, int64_to_numeric(i)) != 0)
		CENSUS_REJECT("census key \"%s\" must be an integer from " INT64_FORMAT
					  " to " INT64_FORMAT, key, lo, hi);
	return i;
}

/*
 * Validate the census options and return the normalised object with every
 * closed key present (README.md#status-statistics-and-events).
 */
static Jsonb *
normalise_census(Jsonb *jb)
{
	bool		enabled = true;
	int64		interval_ms = 60000;
	char	   *jitter = "0.1";
	int64		timeout_ms = 10000;
	int64		max_faults = 3;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	if (JB_ROOT_IS_SCALAR(jb) || !JB_ROOT_IS_OBJECT(jb))
		CENSUS_REJECT("census must be a JSON object");

	it = JsonbIteratorInit(&jb->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *key;

		if (tok != WJB_KEY)
			continue;
		key = pnstrdup(v.val.string.val, Min(v.val.string.len, NAMEDATALEN - 1));
		tok = JsonbIteratorNext(&it, &v, true);
		Assert(tok == WJB_VALUE);

		if (strcmp(key, "enabled") == 0)
		{
			if (v.type != jbvBool)
				CENSUS_REJECT("census key \"enabled\" must be a JSON boolean");
			enabled = v.val.boolean;
		}
		else if (strcmp(key, "interval_ms") == 0)
			interval_ms = census_int(&v, key, 50, 86400000);
		else if (strcmp(key, "timeout_ms") == 0)
			timeout_ms = census_int(&v, key, 1, 60000);
		else if (strcmp(key, "max_consecutive_faults") == 0)
			max_faults = census_int(&v, key, 1, 1000);
		else if (strcmp(key, "jitter_ratio") == 0)
		{
			Numeric		n;

			if (v.type != jbvNumeric)
				CENSUS_REJECT("census key \"jitter_ratio\" must be a JSON number");
			n = v.val.numeric;
			if (numeric_is_nan(n) || numeric_is_inf(n) ||
				numeric_compare(n, int64_to_numeric(0)) < 0 ||
				numeric_compare(n, numeric_from_cstring("0.5")) > 0)
				CENSUS_REJECT("census key \"jitter_ratio\" must be a number from 0.0 to 0.5");
			jitter = DatumGetCString(DirectFunctionCall1(numeric_out,
														 NumericGetDatum(n)));
		}
		else
			CENSUS_REJECT("unknown census key \"%s\"", key);
	}

	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(
		psprintf("{\"enabled\": %s, \"interval_ms\": " INT64_FORMAT
				 ", \"jitter_ratio\": %s, \"timeout_ms\": " INT64_FORMAT
				 ", \"max_consecutive_faults\": " INT64_FORMAT "}",
				 enabled ? "true" : "false", interval_ms, jitter,
				 timeout_ms, max_faults))));
}

/* A source system identifier: the decimal uint64 IDENTIFY_SYSTEM prints. */
static bool
system_identifier_is_valid(const char *s)
{
	size_t		len = strlen(s);
	char	   *end;
	unsigned long long v;

	if (len == 0 || len > 20)
		return false;
	for (const char *p = s; *p; p++)
	{
		if (*p < '0' || *p > '9')
			return false;
	}
	errno = 0;
	v = strtoull(s, &end, 10);
	(void) v;
	return errno == 0 && *end == '\0';
}

#define CONFIG_REJECT(...) \
	ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_PIPELINE, \
			   "config_invalid", __VA_ARGS__)

/* The pipeline-configuration argument positions (SQL declaration order). */
enum
{
	CP_SINK_NAME,
	CP_CONNECTION,
	CP_PUBLICATION,
	CP_SOURCE_SYSID,
	CP_SOURCE_DATABASE,
	CP_DECODER,
	CP_REPLICATION_SETS,
	CP_TABLES,
	CP_ALLOW_KEYLESS,
	CP_GO_FORWARD_ONLY,
	CP_SNAPSHOT,
	CP_CHUNK_ROWS,
	CP_MAX_PENDING_CHUNKS,
	CP_STREAMING,
	CP_FAILOVER,
	CP_MAX_INFLIGHT_LAG,
	CP_MAX_COMMAND_RETRIES,
	CP_SCHEMA_CHECK_MS,
	CP_CENSUS,
	CP_BINARY_TRANSFER,
	CP_NARGS
};

static const char *const cp_names[CP_NARGS] = {
	"sink_name", "connection", "publication", "source_system_identifier",
	"source_database", "decoder", "replication_sets", "tables",
	"allow_keyless_tables", "go_forward_only", "snapshot", "chunk_rows",
	"max_pending_chunks", "streaming", "failover", "max_inflight_lag",
	"max_command_retries", "schema_check_interval_ms", "census",
	"binary_transfer"
};

/* The pipeline-configuration arguments derived while validating them. */
typedef struct PipelineArgs
{
	char	   *decoder;
	bool		pgoutput;
	bool		wal2json;
	bool		pglogical;
	ArrayType  *tables;			/* wal2json: normalised; else NULL */
	char	   *snapshot;
	bool		go_forward_only;
	Jsonb	   *census;
} PipelineArgs;

/* Settings that have a default and no NULL meaning. */
static void
cp_require_settings(FunctionCallInfo fcinfo)
{
	static const int required[] = {
		CP_DECODER, CP_ALLOW_KEYLESS, CP_SNAPSHOT, CP_CHUNK_ROWS,
		CP_MAX_PENDING_CHUNKS, CP_STREAMING, CP_FAILOVER,
		CP_MAX_INFLIGHT_LAG, CP_MAX_COMMAND_RETRIES, CP_SCHEMA_CHECK_MS,
		CP_BINARY_TRANSFER
	};

	for (int i = 0; i < lengthof(required); i++)
	{
		if (PG_ARGISNULL(required[i]))
			CONFIG_REJECT("%s must not be NULL", cp_names[required[i]]);
	}
	if (PG_ARGISNULL(CP_CENSUS))
		CENSUS_REJECT("census must not be NULL");
}

/* Decoder grammar: each decoder's table set, nothing of the others. */
static void
cp_check_table_set(FunctionCallInfo fcinfo, PipelineArgs *pa)
{
	const char *decoder = pa->decoder;

	if (pa->pgoutput)
	{
		char	   *pub;

		if (PG_ARGISNULL(CP_PUBLICATION))
			CONFIG_REJECT("decoder pgoutput requires publication");
		pub = text_to_cstring(PG_GETARG_TEXT_PP(CP_PUBLICATION));
		if (pub[0] == '\0')
			CONFIG_REJECT("decoder pgoutput requires publication");
		if (strlen(pub) >= NAMEDATALEN)
			CONFIG_REJECT("publication must be at most %d bytes", NAMEDATALEN - 1);
	}
	else if (!PG_ARGISNULL(CP_PUBLICATION))
		CONFIG_REJECT("publication is a setting of decoder pgoutput, not %s", decoder);

	pa->tables = NULL;
	if (pa->wal2json)
	{
		if (PG_ARGISNULL(CP_TABLES) ||
			ArrayGetNItems(ARR_NDIM(PG_GETARG_ARRAYTYPE_P(CP_TABLES)),
						   ARR_DIMS(PG_GETARG_ARRAYTYPE_P(CP_TABLES))) == 0)
			CONFIG_REJECT("decoder wal2json requires tables");
		pa->tables = normalise_table_list(PG_GETARG_ARRAYTYPE_P(CP_TABLES),
										  STAGE_PIPELINE, "config_invalid", "tables");
	}
	else if (!PG_ARGISNULL(CP_TABLES))
		CONFIG_REJECT("tables is a setting of decoder wal2json, not %s", decoder);

	if (pa->pglogical)
	{
		ArrayType  *sets;

		if (PG_ARGISNULL(CP_REPLICATION_SETS))
			CONFIG_REJECT("decoder pglogical requires replication_sets");
		sets = PG_GETARG_ARRAYTYPE_P(CP_REPLICATION_SETS);
		if (ArrayGetNItems(ARR_NDIM(sets), ARR_DIMS(sets)) == 0)
			CONFIG_REJECT("decoder pglogical requires replication_sets");
		check_string_list(sets, true, STAGE_PIPELINE, "config_invalid",
						  "replication_sets");
	}
	else if (!PG_ARGISNULL(CP_REPLICATION_SETS))
		CONFIG_REJECT("replication_sets is a setting of decoder pglogical, not %s",
					  decoder);

	if (!pa->wal2json && PG_GETARG_BOOL(CP_ALLOW_KEYLESS))
		CONFIG_REJECT("allow_keyless_tables is a setting of decoder wal2json, not %s",
					  decoder);
}

/* The decoder, its table set, and the capabilities only pgoutput can express. */
static void
cp_check_decoder(FunctionCallInfo fcinfo, PipelineArgs *pa)
{
	static const int pgoutput_only[] = {CP_STREAMING, CP_FAILOVER, CP_BINARY_TRANSFER};
	const char *decoder;

	decoder = pa->decoder = text_to_cstring(PG_GETARG_TEXT_PP(CP_DECODER));
	pa->pgoutput = strcmp(decoder, "pgoutput") == 0;
	pa->wal2json = strcmp(decoder, "wal2json") == 0;
	pa->pglogical = strcmp(decoder, "pglogical") == 0;
	if (!pa->pgoutput && !pa->wal2json && !pa->pglogical)
		CONFIG_REJECT("decoder must be pgoutput, wal2json or pglogical");

	cp_check_table_set(fcinfo, pa);
	for (int i = 0; i < lengthof(pgoutput_only); i++)
	{
		if (!pa->pgoutput && PG_GETARG_BOOL(pgoutput_only[i]))
			ash_reject(ERRCODE_FEATURE_NOT_SUPPORTED, STAGE_PIPELINE,
					   "decoder_capability_unsupported",
					   "%s requires decoder pgoutput, not %s",
					   cp_names[pgoutput_only[i]], decoder);
	}
}

/* The snapshot mode and go_forward_only say one thing. */
static void
cp_check_snapshot(FunctionCallInfo fcinfo, PipelineArgs *pa)
{
	const char *snapshot;

	snapshot = pa->snapshot = text_to_cstring(PG_GETARG_TEXT_PP(CP_SNAPSHOT));
	if (strcmp(snapshot, "off") != 0 && strcmp(snapshot, "v1") != 0 &&
		strcmp(snapshot, "incremental") != 0)
		CONFIG_REJECT("snapshot must be off, v1 or incremental");
	pa->go_forward_only = PG_ARGISNULL(CP_GO_FORWARD_ONLY) ?
		strcmp(snapshot, "off") == 0 : PG_GETARG_BOOL(CP_GO_FORWARD_ONLY);
	if (strcmp(snapshot, "incremental") == 0 && pa->go_forward_only)
		CONFIG_REJECT("snapshot incremental requires go_forward_only = false");
	/* the two say one thing: a contradiction would be stored and ignored */
	if (strcmp(snapshot, "v1") == 0 && pa->go_forward_only)
		CONFIG_REJECT("snapshot v1 copies existing rows: go_forward_only must be false");
	if (strcmp(snapshot, "off") == 0 && !pa->go_forward_only)
		CONFIG_REJECT("go_forward_only = false needs a snapshot mode (v1) to copy existing rows");
}

/* Numeric bounds. */
static void
cp_check_bounds(FunctionCallInfo fcinfo)
{
	if (PG_GETARG_INT32(CP_CHUNK_ROWS) < 1)
		CONFIG_REJECT("chunk_rows must be at least 1");
	if (PG_GETARG_INT32(CP_MAX_PENDING_CHUNKS) < 1)
		CONFIG_REJECT("max_pending_chunks must be at least 1");
	if (PG_GETARG_INT64(CP_MAX_INFLIGHT_LAG) < MIN_INFLIGHT_LAG)
		CONFIG_REJECT("max_inflight_lag must be at least %d bytes", MIN_INFLIGHT_LAG);
	if (PG_GETARG_INT32(CP_MAX_COMMAND_RETRIES) < 0)
		CONFIG_REJECT("max_command_retries must not be negative");
	if (PG_GETARG_INT32(CP_SCHEMA_CHECK_MS) < MIN_SCHEMA_CHECK_MS)
		CONFIG_REJECT("schema_check_interval_ms must be at least %d", MIN_SCHEMA_CHECK_MS);
}

/* Connection and source identity: shape only, never echoed. */
static void
cp_check_source(FunctionCallInfo fcinfo)
{
	if (!PG_ARGISNULL(CP_CONNECTION))
	{
		char	   *conninfo = text_to_cstring(PG_GETARG_TEXT_PP(CP_CONNECTION));

		if (conninfo[0] != '\0')
		{
			char	   *err = NULL;
			PQconninfoOption *opts = PQconninfoParse(conninfo, &err);

			if (err)
				PQfreemem(err);	/* may quote the string: never shown */
			if (opts == NULL)
				CONFIG_REJECT("connection is not a valid libpq connection string");
			PQconninfoFree(opts);
			/* the server's own identity is not a non-superuser's to lend */
			if (!superuser_arg(GetOuterUserId()) && !ash_conn_has_password(conninfo))
				ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, STAGE_PIPELINE, "source_password_required",
						   "a connection set by a role without superuser must carry its password");
		}
	}
	if (!PG_ARGISNULL(CP_SOURCE_SYSID))
	{
		char	   *sysid = text_to_cstring(PG_GETARG_TEXT_PP(CP_SOURCE_SYSID));

		if (sysid[0] != '\0' && !system_identifier_is_valid(sysid))
			CONFIG_REJECT("source_system_identifier must be a decimal system identifier");
	}
	if (!PG_ARGISNULL(CP_SOURCE_DATABASE) &&
		VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(CP_SOURCE_DATABASE)) >= NAMEDATALEN)
		CONFIG_REJECT("source_database must be at most %d bytes", NAMEDATALEN - 1);
}

/* SPI connected: insert or update the pipelines row. */
static void
cp_upsert(FunctionCallInfo fcinfo, const char *sink_name, const PipelineArgs *pa)
{
	Oid			types[CP_NARGS] = {
		TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID,
		TEXTARRAYOID, BOOLOID, BOOLOID, TEXTOID, INT4OID, INT4OID, BOOLOID,
		BOOLOID, INT8OID, INT4OID, INT4OID, JSONBOID, BOOLOID
	};
	Datum		values[CP_NARGS];
	char		nulls[CP_NARGS];

	for (int i = 0; i < CP_NARGS; i++)
	{
		nulls[i] = PG_ARGISNULL(i) ? 'n' : ' ';
		values[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
	}
	values[CP_SINK_NAME] = CStringGetTextDatum(sink_name);
	nulls[CP_GO_FORWARD_ONLY] = ' ';
	values[CP_GO_FORWARD_ONLY] = BoolGetDatum(pa->go_forward_only);
	if (pa->tables)
		values[CP_TABLES] = PointerGetDatum(pa->tables);
	values[CP_CENSUS] = JsonbPGetDatum(pa->census);

	catalog_exec("INSERT INTO ash_replicant.pipelines AS p (sink_name,"
				 "  connection, publication, source_system_identifier,"
				 "  source_database, decoder, replication_sets, tables,"
				 "  allow_keyless_tables, go_forward_only, snapshot, chunk_rows,"
				 "  max_pending_chunks, streaming, failover, max_inflight_lag,"
				 "  max_command_retries, schema_check_interval_ms, census,"
				 "  binary_transfer, updated_at)"
				 " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12,"
				 "  $13, $14, $15, $16, $17, $18, $19, $20, pg_catalog.now())"
				 " ON CONFLICT (sink_name) DO UPDATE SET"
				 "  connection = EXCLUDED.connection,"
				 "  publication = EXCLUDED.publication,"
				 "  source_system_identifier = EXCLUDED.source_system_identifier,"
				 "  source_database = EXCLUDED.source_database,"
				 "  decoder = EXCLUDED.decoder,"
				 "  replication_sets = EXCLUDED.replication_sets,"
				 "  tables = EXCLUDED.tables,"
				 "  allow_keyless_tables = EXCLUDED.allow_keyless_tables,"
				 "  go_forward_only = EXCLUDED.go_forward_only,"
				 "  snapshot = EXCLUDED.snapshot,"
				 "  chunk_rows = EXCLUDED.chunk_rows,"
				 "  max_pending_chunks = EXCLUDED.max_pending_chunks,"
				 "  streaming = EXCLUDED.streaming,"
				 "  failover = EXCLUDED.failover,"
				 "  max_inflight_lag = EXCLUDED.max_inflight_lag,"
				 "  max_command_retries = EXCLUDED.max_command_retries,"
				 "  schema_check_interval_ms = EXCLUDED.schema_check_interval_ms,"
				 "  census = EXCLUDED.census,"
				 "  binary_transfer = EXCLUDED.binary_transfer,"
				 "  updated_at = EXCLUDED.updated_at",
				 CP_NARGS, types, values, nulls, false);
	if (SPI_processed != 1)
		elog(ERROR, "ash_replicant: pipeline configuration of sink \"%s\" was not written",
			 sink_name);
}

/*
 * origin (1.3.0, the argument after CP_NARGS): 'any' mirrors every source
 * transaction; 'none' skips those that carry a replication origin (apply.c),
 * as a PostgreSQL 16 subscription with origin = none does.  Called through
 * an older SQL declaration it is not there: the column keeps its default.
 */
#define CP_ORIGIN CP_NARGS

static void
cp_set_origin(FunctionCallInfo fcinfo, const char *sink_name)
{
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	char	   *origin = "any";

	if (PG_NARGS() <= CP_ORIGIN)
		return;
	if (!PG_ARGISNULL(CP_ORIGIN))
		origin = text_to_cstring(PG_GETARG_TEXT_PP(CP_ORIGIN));
	if (strcmp(origin, "any") != 0 && strcmp(origin, "none") != 0)
		CONFIG_REJECT("origin must be any or none");
	values[0] = CStringGetTextDatum(sink_name);
	values[1] = CStringGetTextDatum(origin);
	catalog_exec("UPDATE ash_replicant.pipelines SET origin = $2 WHERE sink_name = $1",
				 2, types, values, NULL, false);
}

/*
 * ash_replicant_configure_pipeline(...) — validate and upsert the start
 * options; enabled, start_generation and the halt columns are kept.
 */
Datum
ash_replicant_configure_pipeline(PG_FUNCTION_ARGS)
{
	char	   *sink_name;
	AshSinkInfo sink;
	PipelineArgs pa;

	sink_name = sink_name_arg(fcinfo, STAGE_PIPELINE);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	lock_sink(sink_name, STAGE_PIPELINE, &sink);

	cp_require_settings(fcinfo);
	cp_check_decoder(fcinfo, &pa);
	cp_check_snapshot(fcinfo, &pa);
	cp_check_bounds(fcinfo);
	cp_check_source(fcinfo);
	pa.census = normalise_census(PG_GETARG_JSONB_P(CP_CENSUS));

	/* the sink's declared initial state must agree with the snapshot mode */
	if (sink.initial_state != NULL &&
		(strcmp(sink.initial_state, "go_forward") == 0) !=
		(strcmp(pa.snapshot, "off") == 0))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_PIPELINE,
				   "initial_state_mismatch",
				   "sink \"%s\" declares initial_state %s, which snapshot %s contradicts",
				   sink_name, sink.initial_state, pa.snapshot);

	cp_upsert(fcinfo, sink_name, &pa);
	cp_set_origin(fcinfo, sink_name);
	bump_config_version(sink_name);

	SPI_finish();
	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}

/* ---------------------------------------------------------------------
 * Start and stop.
 * ---------------------------------------------------------------------
 */

/*
 * The pipeline settings start judges, locked FOR UPDATE (the conninfo
 * itself is never read here: only whether it is present).  Columns: 1
 * m_connection, 2 decoder, 3 m_publication, 4 m_tables, 5 m_sets, 6
 * m_sysid, 7 m_database, 8 snapshot, 9 streaming, 10 failover, 11
 * binary_transfer, 12 m_chunks, 13 m_inflight, 14 m_schema_check.
 */
static void
start_read_settings(const char *sink_name, HeapTuple *tup, TupleDesc *desc)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	values[0] = CStringGetTextDatum(sink_name);
	catalog_exec("SELECT (connection IS NULL OR connection = '') AS m_connection,"
				 "  decoder,"
				 "  (publication IS NULL OR publication = '') AS m_publication,"
				 "  (tables IS NULL OR pg_catalog.cardinality(tables) = 0) AS m_tables,"
				 "  (replication_sets IS NULL"
				 "    OR pg_catalog.cardinality(replication_sets) = 0) AS m_sets,"
				 "  (source_system_identifier IS NULL"
				 "    OR source_system_identifier = '') AS m_sysid,"
				 "  (source_database IS NULL OR source_database = '') AS m_database,"
				 "  snapshot, streaming, failover, binary_transfer,"
				 "  chunk_rows <> 1000 OR max_pending_chunks <> 4 AS m_chunks,"
				 "  max_inflight_lag <> 67108864 AS m_inflight,"
				 "  decoder <> 'wal2json' AND schema_check_interval_ms <> 60000 AS m_schema_check"
				 "  FROM ash_replicant.pipelines WHERE sink_name = $1 FOR UPDATE",
				 1, types, values, NULL, false);
	if (SPI_processed != 1)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_START,
				   "config_invalid",
				   "the pipeline of sink \"%s\" is not configured; call ash_replicant_configure_pipeline",
				   sink_name);
	*tup = SPI_tuptable->vals[0];
	*desc = SPI_tuptable->tupdesc;
}

/* Every missing setting at once, by name; then what the decoder cannot express. */
static void
start_check_settings(HeapTuple tup, TupleDesc desc, const char *decoder)
{
	const char *table_set;
	int			table_set_col;
	StringInfoData missing;
	bool		isnull;

	if (strcmp(decoder, "wal2json") == 0)
	{
		table_set = "tables";
		table_set_col = 4;
	}
	else if (strcmp(decoder, "pglogical") == 0)
	{
		table_set = "replication_sets";
		table_set_col = 5;
	}
	else
	{
		table_set = "publication";
		table_set_col = 3;
	}

	initStringInfo(&missing);
#define NOTE_MISSING(col, name) \
	do { \
		if (DatumGetBool(SPI_getbinval(tup, desc, (col), &isnull))) \
			appendStringInfo(&missing, "%s%s", missing.len ? ", " : "", (name)); \
	} while (0)
	NOTE_MISSING(1, "connection");
	NOTE_MISSING(table_set_col, table_set);
	NOTE_MISSING(6, "source_system_identifier");
	NOTE_MISSING(7, "source_database");
#undef NOTE_MISSING
	if (missing.len > 0)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, STAGE_START,
				   "config_invalid", "missing settings: %s", missing.data);

	/* capabilities the decoder cannot express */
	if (strcmp(decoder, "pgoutput") != 0)
	{
		static const char *const caps[] = {"streaming", "failover", "binary_transfer"};

		for (int i = 0; i < lengthof(caps); i++)
		{
			if (DatumGetBool(SPI_getbinval(tup, desc, 9 + i, &isnull)))
				ash_reject(ERRCODE_FEATURE_NOT_SUPPORTED, STAGE_START,
						   "decoder_capability_unsupported",
						   "%s requires decoder pgoutput, not %s", caps[i], decoder);
		}
	}
}

/*
 * The snapshot mode against the sink's initial state and its mappings;
 * settings nothing acts on are refused rather than stored and ignored.
 */
/*
 * snapshot incremental copies state mirrors (SCD1 or SCD2, any tenancy)
 * whose every mapping keeps provenance (its completion retires unseen
 * rows); anything else is refused with snapshot_unsupported.
 * (A source table without a primary key halts the worker, which alone
 * sees the source.)
 */
static void
start_check_incremental(const char *sink_name, const AshSinkInfo *sink)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;
	HeapTuple	row;
	TupleDesc	rdesc;

	if (sink->append_log)
		ash_reject(ERRCODE_FEATURE_NOT_SUPPORTED, STAGE_START, "snapshot_unsupported",
				   "sink \"%s\" is an append log: snapshot incremental copies state mirrors only",
				   sink_name);
	values[0] = CStringGetTextDatum(sink_name);
	catalog_exec("SELECT pg_catalog.count(*) FILTER (WHERE NOT snapshot_provenance)"
				 "  FROM ash_replicant.resources WHERE sink_name = $1",
				 1, types, values, NULL, true);
	row = SPI_tuptable->vals[0];
	rdesc = SPI_tuptable->tupdesc;
	if (DatumGetInt64(SPI_getbinval(row, rdesc, 1, &isnull)) > 0)
		ash_reject(ERRCODE_FEATURE_NOT_SUPPORTED, STAGE_START, "snapshot_unsupported",
				   "sink \"%s\": snapshot incremental needs snapshot_provenance on every mapping",
				   sink_name);
}

static void
start_check_snapshot(const char *sink_name, const AshSinkInfo *sink, HeapTuple tup,
					 TupleDesc desc, const char *snapshot)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		isnull;

	if (sink->initial_state != NULL &&
		(strcmp(sink->initial_state, "go_forward") == 0) !=
		(strcmp(snapshot, "off") == 0))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_START,
				   "initial_state_mismatch",
				   "sink \"%s\" declares initial_state %s, which snapshot %s contradicts",
				   sink_name, sink->initial_state, snapshot);

	/* what snapshot incremental copies (docs/snapshots.md) */
	if (strcmp(snapshot, "incremental") == 0)
		start_check_incremental(sink_name, sink);
	/* settings nothing acts on are refused rather than stored and ignored */
	else if (DatumGetBool(SPI_getbinval(tup, desc, 12, &isnull)))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_START, "config_invalid",
				   "chunk_rows and max_pending_chunks apply to snapshot incremental only; leave them at their defaults");
	if (DatumGetBool(SPI_getbinval(tup, desc, 13, &isnull)))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_START, "config_invalid",
				   "max_inflight_lag bounds nothing here (the worker holds no received changes); leave it at its default");
	if (DatumGetBool(SPI_getbinval(tup, desc, 14, &isnull)))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_START, "config_invalid",
				   "schema_check_interval_ms applies to decoder wal2json only; leave it at its default");
	values[0] = CStringGetTextDatum(sink_name);
	catalog_exec("SELECT pg_catalog.count(*) FROM ash_replicant.resources"
				 " WHERE sink_name = $1 AND snapshot_provenance",
				 1, types, values, NULL, true);
	if (DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) > 0 &&
		strcmp(snapshot, "off") == 0)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, STAGE_START, "snapshot_provenance_invalid",
				   "sink \"%s\" maps a table with snapshot_provenance but takes no snapshot", sink_name);
}

/* Message routes against the sink's settings and the decoder (route_rules.c). */
static void
start_check_routes(const char *sink_name)
{
	AshRouteVerdict v;

	ash_route_rules_judge(sink_name, ASH_ROUTE_RULES_START, &v);
	if (v.reason != NULL)
		ash_reject(v.sqlerrcode, STAGE_START, v.reason, "%s", v.context);
}

/*
 * ash_replicant_start(sink_name) — check that the configuration is
 * complete and coherent, then mark the pipeline enabled under a new start
 * generation and wake the launcher at commit.  Returns immediately.
 */
Datum
ash_replicant_start(PG_FUNCTION_ARGS)
{
	char	   *sink_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	AshSinkInfo sink;
	Oid			types[2] = {TEXTOID, TEXTOID};
	Datum		values[2];
	HeapTuple	tup;
	TupleDesc	desc;
	char	   *decoder;
	char	   *snapshot;
	char	   *installation;

	ash_require_shmem();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	lock_sink(sink_name, STAGE_START, &sink);

	start_read_settings(sink_name, &tup, &desc);
	decoder = SPI_getvalue(tup, desc, 2);
	snapshot = SPI_getvalue(tup, desc, 8);
	start_check_settings(tup, desc, decoder);
	start_check_snapshot(sink_name, &sink, tup, desc, snapshot);
	start_check_routes(sink_name);

	/* in this installation: a copy restored elsewhere waits for its own start */
	installation = ash_installation_id();
	values[0] = CStringGetTextDatum(sink_name);
	values[1] = installation != NULL ? CStringGetTextDatum(installation) : (Datum) 0;
	catalog_exec(psprintf("UPDATE ash_replicant.pipelines"
						  "   SET enabled = true, start_generation = start_generation + 1, start_attempts = 0,"
						  "       updated_at = pg_catalog.now()%s"
						  " WHERE sink_name = $1",
						  installation != NULL ? ", started_in = $2::pg_catalog.uuid" : ""),
				 installation != NULL ? 2 : 1, types, values, NULL, false);
	if (SPI_processed != 1)
		elog(ERROR, "ash_replicant: pipeline of sink \"%s\" vanished during start",
			 sink_name);

	SPI_finish();
	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}

/*
 * ash_replicant_stop(sink_name) — deliberate stop.  Stopping a stopped (or
 * never configured) pipeline changes nothing and is not an error.
 */
Datum
ash_replicant_stop(PG_FUNCTION_ARGS)
{
	char	   *sink_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	AshSinkInfo sink;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	lock_sink(sink_name, STAGE_SINK, &sink);

	values[0] = CStringGetTextDatum(sink_name);
	catalog_exec("UPDATE ash_replicant.pipelines"
				 "   SET enabled = false, updated_at = pg_catalog.now()"
				 " WHERE sink_name = $1 AND enabled",
				 1, types, values, NULL, false);

	SPI_finish();
	ash_launcher_wake_at_commit();
	PG_RETURN_VOID();
}
