/*-------------------------------------------------------------------------
 *
 * mapping_validate.c
 *	  Registration validation of one mapping (docs/sql-api-mapping.md, docs/history-and-events.md, docs/snapshots.md)
 *	  and loaders that rebuild a mapping from ash_replicant.resources.
 *
 * NOTES
 *	  ash_mapping_validate runs in two phases and stops at the first
 *	  violation:
 *
 *	  1. Option grammar (no target needed): sink kind, tenancy options,
 *		 the relations between column_map/sensitive/encrypted/skip, and the
 *		 mode-specific options of append-log, SCD2 and snapshot provenance,
 *		 plus the shape of named functions.
 *	  2. Destination shape: the target is a local table, the sink owner may
 *		 write it, every target column the options name exists with the
 *		 right type and nullability, and the conflict-target index exists.
 *
 *	  Everything here reads the syscache and relcache only (no SPI, no
 *	  writes), so it is safe to call from the census inside a pipeline
 *	  worker.  The target is locked AccessShareLock until the end of the
 *	  transaction, so it cannot change between validation and the write of
 *	  the resources row.
 *
 *	  Names in messages are always double-quoted (embedded quotes doubled,
 *	  as quote_identifier would) so that `column "pan"` is unambiguous;
 *	  messages never carry a row value.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/catalog.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_rewrite.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/primnodes.h"
#include "rewrite/prs2lock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/reltrigger.h"
#include "utils/syscache.h"

#include "errors.h"
#include "mapping_validate.h"
#include "owner_scope.h"
#include "qualname.h"

#define MAPPING_STAGE "mapping"

#define qname(n) ash_quoted_name(n)

#define REJECT(reason, ...) \
	ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, MAPPING_STAGE, (reason), __VA_ARGS__)

static const char *const append_axis_names[ASH_APPEND_NAXES] = {
	"source_system_id",
	"source_database",
	"slot_name",
	"commit_lsn",
	"ordinal",
	"operation",
	"origin",
	"snapshot_attempt",
	"message_prefix",
	"message_content",
};

/* Base type each structural column must have. */
static const Oid append_axis_types[ASH_APPEND_NAXES] = {
	TEXTOID, TEXTOID, TEXTOID, INT8OID, INT4OID, TEXTOID, TEXTOID,
	BYTEAOID, TEXTOID, BYTEAOID,
};

#define DEFAULT_VALID_FROM_LSN	"valid_from_lsn"
#define DEFAULT_VALID_TO_LSN	"valid_to_lsn"

/* State of one validation run. */
typedef struct ValidateCtx
{
	AshMappingSpec *m;
	const AshMappingSink *sink;
	Relation	rel;			/* target, AccessShareLock */
	TupleDesc	desc;
	char	   *relname;		/* quoted, qualified: for messages */
} ValidateCtx;

/* ------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------
 */

char *
ash_mapping_qualified_relname(Oid relid)
{
	char	   *rel = get_rel_name(relid);
	char	   *nsp;

	if (rel == NULL)
		return psprintf("relation with OID %u", relid);
	nsp = get_namespace_name(get_rel_namespace(relid));
	return psprintf("%s.%s", qname(nsp ? nsp : "?"), qname(rel));
}

static bool
name_in_list(List *names, const char *name)
{
	ListCell   *lc;

	if (name == NULL)
		return false;
	foreach(lc, names)
	{
		if (strcmp((const char *) lfirst(lc), name) == 0)
			return true;
	}
	return false;
}

static bool
str_eq(const char *a, const char *b)
{
	return a != NULL && b != NULL && strcmp(a, b) == 0;
}

/* A non-dropped user column of desc called name, or NULL. */
static Form_pg_attribute
find_column(TupleDesc desc, const char *name)
{
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att;
	}
	return NULL;
}

static bool
column_has_base_type(Form_pg_attribute att, Oid typid)
{
	return getBaseType(att->atttypid) == typid;
}

/* Check a name option: NULL allowed; empty or over-long rejected. */
static void
check_name_option(const char *value, const char *option, const char *reason)
{
	if (value == NULL)
		return;
	if (value[0] == '\0')
		REJECT(reason, "%s must not be empty", option);
	if (strlen(value) >= NAMEDATALEN)
		REJECT(reason, "%s is longer than %d bytes", option, NAMEDATALEN - 1);
}

/* ------------------------------------------------------------------------
 * Option grammar
 * ------------------------------------------------------------------------
 */

const char *
ash_append_axis_default(AshAppendAxis axis)
{
	Assert(axis >= 0 && axis < ASH_APPEND_NAXES);
	return append_axis_names[axis];
}

const char *
ash_mapping_append_column(const AshMappingSpec *m, AshAppendAxis axis)
{
	Assert(axis >= 0 && axis < ASH_APPEND_NAXES);
	return m->append_columns[axis] ? m->append_columns[axis] : append_axis_names[axis];
}

AshOnTruncate
ash_parse_on_truncate(const char *value)
{
	if (value == NULL || strcmp(value, "halt") == 0)
		return ASH_TRUNCATE_HALT;
	if (strcmp(value, "mirror") == 0)
		return ASH_TRUNCATE_MIRROR;
	if (strcmp(value, "close") == 0)
		return ASH_TRUNCATE_CLOSE;
	if (strcmp(value, "append") == 0)
		return ASH_TRUNCATE_APPEND;
	REJECT("config_invalid", "on_truncate must be halt, mirror, close or append");
}

AshOnSchemaChange
ash_parse_on_schema_change(const char *value)
{
	if (value == NULL || strcmp(value, "halt_destructive") == 0)
		return ASH_SCHEMA_HALT_DESTRUCTIVE;
	if (strcmp(value, "ignore") == 0)
		return ASH_SCHEMA_IGNORE;
	REJECT("config_invalid", "on_schema_change must be halt_destructive or ignore");
}

AshTenantStrategy
ash_parse_tenant_strategy(const char *value)
{
	if (value == NULL)
		return ASH_TENANT_NONE;
	if (strcmp(value, "attribute") == 0)
		return ASH_TENANT_ATTRIBUTE;
	if (strcmp(value, "context") == 0)
		return ASH_TENANT_CONTEXT;
	REJECT("config_invalid", "tenant_strategy must be attribute or context");
}

AshHistoryStrategy
ash_parse_history_strategy(const char *value)
{
	if (value == NULL || strcmp(value, "scd1") == 0)
		return ASH_HISTORY_SCD1;
	if (strcmp(value, "scd2") == 0)
		return ASH_HISTORY_SCD2;
	REJECT("config_invalid", "history_strategy must be scd1 or scd2");
}

const char *
ash_on_truncate_name(AshOnTruncate v)
{
	switch (v)
	{
		case ASH_TRUNCATE_HALT:
			return "halt";
		case ASH_TRUNCATE_MIRROR:
			return "mirror";
		case ASH_TRUNCATE_CLOSE:
			return "close";
		case ASH_TRUNCATE_APPEND:
			return "append";
	}
	return "halt";
}

const char *
ash_on_schema_change_name(AshOnSchemaChange v)
{
	return v == ASH_SCHEMA_IGNORE ? "ignore" : "halt_destructive";
}

const char *
ash_tenant_strategy_name(AshTenantStrategy v)
{
	switch (v)
	{
		case ASH_TENANT_NONE:
			return NULL;
		case ASH_TENANT_ATTRIBUTE:
			return "attribute";
		case ASH_TENANT_CONTEXT:
			return "context";
	}
	return NULL;
}

const char *
ash_history_strategy_name(AshHistoryStrategy v)
{
	return v == ASH_HISTORY_SCD2 ? "scd2" : "scd1";
}

AshMappingSpec *
ash_mapping_new(void)
{
	AshMappingSpec *m = palloc0(sizeof(AshMappingSpec));

	m->target = InvalidOid;
	m->tenant_function = InvalidOid;
	m->tenant_strategy = ASH_TENANT_NONE;
	m->tenant_schema_format = pstrdup("%s");
	m->tenant_scope_function = InvalidOid;
	m->on_truncate = ASH_TRUNCATE_HALT;
	m->on_schema_change = ASH_SCHEMA_HALT_DESTRUCTIVE;
	m->history_strategy = ASH_HISTORY_SCD1;
	m->history_valid_from_lsn_column = pstrdup(DEFAULT_VALID_FROM_LSN);
	m->history_valid_to_lsn_column = pstrdup(DEFAULT_VALID_TO_LSN);
	m->identity_index = InvalidOid;
	return m;
}

void
ash_mapping_set_column_map(AshMappingSpec *m, Jsonb *column_map)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *key = NULL;

	m->column_map = NIL;
	m->column_map_jsonb = column_map;
	if (column_map == NULL)
		return;

	if (JB_ROOT_IS_SCALAR(column_map) || !JB_ROOT_IS_OBJECT(column_map))
		REJECT("config_invalid", "column_map must be a jsonb object of \"source\": \"target\" names");

	it = JsonbIteratorInit(&column_map->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			key = pnstrdup(v.val.string.val, v.val.string.len);
			check_name_option(key, "a column_map source column", "config_invalid");
		}
		else if (tok == WJB_VALUE)
		{
			AshColumnPair *pair;
			char	   *target;

			Assert(key != NULL);
			if (v.type != jbvString)
				REJECT("config_invalid", "column_map entry %s must map to a target column name",
					   qname(key));
			target = pnstrdup(v.val.string.val, v.val.string.len);
			if (target[0] == '\0' || strlen(target) >= NAMEDATALEN)
				REJECT("config_invalid", "column_map entry %s maps to an invalid column name",
					   qname(key));
			pair = palloc(sizeof(AshColumnPair));
			pair->source = key;
			pair->target = target;
			m->column_map = lappend(m->column_map, pair);
			key = NULL;
		}
	}
}

List *
ash_mapping_name_list(ArrayType *arr, const char *option)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	List	   *result = NIL;

	if (arr == NULL)
		return NIL;
	if (ARR_NDIM(arr) > 1)
		REJECT("config_invalid", "%s must be a one-dimensional array", option);
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
	{
		char	   *name;

		if (nulls[i])
			REJECT("config_invalid", "%s contains NULL", option);
		name = TextDatumGetCString(elems[i]);
		if (name[0] == '\0')
			REJECT("config_invalid", "%s contains an empty name", option);
		if (strlen(name) >= NAMEDATALEN)
			REJECT("config_invalid", "%s entry %s is longer than %d bytes",
				   option, qname(name), NAMEDATALEN - 1);
		if (name_in_list(result, name))
			REJECT("config_invalid", "%s lists column %s twice", option, qname(name));
		result = lappend(result, name);
	}
	return result;
}

void
ash_mapping_default_source(AshMappingSpec *m)
{
	if (!OidIsValid(m->target))
		return;
	if (m->source_table == NULL)
	{
		char	   *rel = get_rel_name(m->target);

		if (rel != NULL)
			m->source_table = rel;
	}
	if (m->source_schema == NULL)
	{
		Oid			nsp = get_rel_namespace(m->target);

		if (OidIsValid(nsp))
			m->source_schema = get_namespace_name(nsp);
	}
}

/* ------------------------------------------------------------------------
 * Column resolution
 * ------------------------------------------------------------------------
 */

const char *
ash_mapspec_target_column(const AshMappingSpec *m, const char *source_column)
{
	ListCell   *lc;

	foreach(lc, m->column_map)
	{
		AshColumnPair *pair = lfirst(lc);

		if (strcmp(pair->source, source_column) == 0)
			return pair->target;
	}
	return source_column;
}

bool
ash_mapspec_is_skipped(const AshMappingSpec *m, const char *source_column)
{
	return name_in_list(m->skip, source_column);
}

bool
ash_mapspec_is_sensitive(const AshMappingSpec *m, const char *source_column)
{
	return name_in_list(m->sensitive, source_column);
}

bool
ash_mapspec_is_encrypted(const AshMappingSpec *m, const char *source_column)
{
	return name_in_list(m->encrypted, source_column);
}

/*
 * The source column known (from the options alone) to be written into
 * target column "target", or NULL.  Known writers are column_map pairs and
 * the identity targets of every declared source column that is not
 * skipped.  Undeclared source columns are judged at activation.
 */
static const char *
source_feeding(const AshMappingSpec *m, const char *target)
{
	ListCell   *lc;
	List	   *declared[3];

	foreach(lc, m->column_map)
	{
		AshColumnPair *pair = lfirst(lc);

		if (strcmp(pair->target, target) == 0)
			return pair->source;
	}

	if (m->tenant_column && !ash_mapspec_is_skipped(m, m->tenant_column) &&
		strcmp(ash_mapspec_target_column(m, m->tenant_column), target) == 0)
		return m->tenant_column;

	declared[0] = m->sensitive;
	declared[1] = m->encrypted;
	declared[2] = m->history_business_key;
	for (int i = 0; i < lengthof(declared); i++)
	{
		foreach(lc, declared[i])
		{
			const char *src = lfirst(lc);

			if (!ash_mapspec_is_skipped(m, src) &&
				strcmp(ash_mapspec_target_column(m, src), target) == 0)
				return src;
		}
	}
	return NULL;
}

/* A sensitive or encrypted source column whose name or target is "name". */
static const char *
sensitive_naming(const AshMappingSpec *m, const char *name)
{
	List	   *lists[2] = {m->sensitive, m->encrypted};
	ListCell   *lc;

	for (int i = 0; i < lengthof(lists); i++)
	{
		foreach(lc, lists[i])
		{
			const char *src = lfirst(lc);

			if (strcmp(src, name) == 0 ||
				strcmp(ash_mapspec_target_column(m, src), name) == 0)
				return src;
		}
	}
	return NULL;
}

/* ------------------------------------------------------------------------
 * Functions named by the mapping
 * ------------------------------------------------------------------------
 */

/*
 * A function the mapping names: by OID (the caller's argument), or by the
 * signature a loaded mapping stores (qualname.h) -- a signature that names
 * no function now is a dropped function, as a dangling OID was.
 */
#define NAMES_FUNCTION(oid, sig) (OidIsValid(oid) || (sig) != NULL)
#define HAS_TENANT_FUNCTION(m) NAMES_FUNCTION((m)->tenant_function, (m)->tenant_function_sig)
#define HAS_TENANT_SCOPE_FUNCTION(m) \
	NAMES_FUNCTION((m)->tenant_scope_function, (m)->tenant_scope_function_sig)

static void
check_tenant_function(Oid fn, const char *sig, Oid owner)
{
	HeapTuple	tup;
	Form_pg_proc p;
	char	   *name;

	if (!OidIsValid(fn))
		REJECT("config_invalid", "tenant_function %s does not exist", sig);
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tup))
		REJECT("config_invalid", "tenant_function with OID %u does not exist", fn);
	p = (Form_pg_proc) GETSTRUCT(tup);
	name = format_procedure(fn);

	if (p->prokind != PROKIND_FUNCTION || p->proretset || p->pronargs != 1 ||
		p->proargtypes.values[0] != JSONBOID || p->prorettype != TEXTOID)
		REJECT("config_invalid", "tenant_function %s must take one jsonb argument and return text",
			   name);
	if (p->provolatile != PROVOLATILE_IMMUTABLE)
		REJECT("config_invalid", "tenant_function %s must be IMMUTABLE", name);
	ReleaseSysCache(tup);

	if (OidIsValid(owner) && pg_proc_aclcheck(fn, owner, ACL_EXECUTE) != ACLCHECK_OK)
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, MAPPING_STAGE, "config_invalid",
				   "sink owner may not execute tenant_function %s", name);
}

static void
check_tenant_scope_function(Oid fn, const char *sig, Oid owner)
{
	HeapTuple	tup;
	Form_pg_proc p;
	char	   *name;

	if (!OidIsValid(fn))
		REJECT("snapshot_provenance_invalid", "tenant_scope_function %s does not exist", sig);
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	if (!HeapTupleIsValid(tup))
		REJECT("snapshot_provenance_invalid",
			   "tenant_scope_function with OID %u does not exist", fn);
	p = (Form_pg_proc) GETSTRUCT(tup);
	name = format_procedure(fn);

	if (p->prokind != PROKIND_FUNCTION || !p->proretset || p->prorettype != TEXTOID ||
		p->pronargs != p->pronargdefaults)
		REJECT("snapshot_provenance_invalid",
			   "tenant_scope_function %s must be callable without arguments and return setof text",
			   name);
	ReleaseSysCache(tup);

	if (OidIsValid(owner) && pg_proc_aclcheck(fn, owner, ACL_EXECUTE) != ACLCHECK_OK)
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, MAPPING_STAGE, "snapshot_provenance_invalid",
				   "sink owner may not execute tenant_scope_function %s", name);
}

/*
 * tenant_schema_format goes through format() with the tenant as its only
 * argument: it must contain exactly one %s and no other conversion
 * (%I, %L, %%, %1$s, widths ...).
 */
static void
check_schema_format(const char *fmt)
{
	int			conversions = 0;

	for (const char *p = fmt; *p; p++)
	{
		if (*p != '%')
			continue;
		if (p[1] != 's')
			REJECT("config_invalid",
				   "tenant_schema_format may contain only one %%s and no other %% sequence");
		conversions++;
		p++;
	}
	if (conversions != 1)
		REJECT("config_invalid", "tenant_schema_format must contain exactly one %%s");
	if (strlen(fmt) - 2 >= NAMEDATALEN - 1)
		REJECT("config_invalid", "tenant_schema_format is too long for a schema name");
}

/* ------------------------------------------------------------------------
 * Phase 1: option grammar
 * ------------------------------------------------------------------------
 */

static void
check_basics(AshMappingSpec *m, const AshMappingSink *sink)
{
	if (m->sink_name == NULL || m->sink_name[0] == '\0')
		REJECT("config_invalid", "sink_name is required");
	if (!OidIsValid(m->target))
		REJECT("config_invalid", "target is required");
	if (sink == NULL || strcmp(sink->sink_name, m->sink_name) != 0)
		elog(ERROR, "ash_replicant: mapping validated against the wrong sink");

	check_name_option(m->source_schema, "source_schema", "config_invalid");
	check_name_option(m->source_table, "source_table", "config_invalid");
	check_name_option(m->tenant_column, "tenant_column", "config_invalid");
	check_name_option(m->upsert_identity, "upsert_identity", "config_invalid");
	if (m->tenant_schema_format == NULL)
		REJECT("config_invalid", "tenant_schema_format must not be NULL");
}

static void
check_column_lists(AshMappingSpec *m)
{
	ListCell   *lc;

	/* column_map: distinct targets, no mapped-and-skipped column */
	foreach(lc, m->column_map)
	{
		AshColumnPair *pair = lfirst(lc);
		ListCell   *lc2;

		if (ash_mapspec_is_skipped(m, pair->source))
			REJECT("config_invalid", "column %s is both mapped in column_map and skipped",
				   qname(pair->source));
		for_each_cell(lc2, m->column_map, lnext(m->column_map, lc))
		{
			AshColumnPair *other = lfirst(lc2);

			if (strcmp(pair->target, other->target) == 0)
				REJECT("config_invalid", "columns %s and %s both map to target column %s",
					   qname(pair->source), qname(other->source), qname(pair->target));
		}
	}

	foreach(lc, m->encrypted)
	{
		const char *col = lfirst(lc);

		if (ash_mapspec_is_skipped(m, col))
			REJECT("config_invalid", "column %s is both skipped and encrypted", qname(col));
		if (!ash_mapspec_is_sensitive(m, col))
			REJECT("config_invalid", "encrypted column %s is not listed in sensitive", qname(col));
	}
}

static void
check_tenancy_options(AshMappingSpec *m, const AshMappingSink *sink)
{
	bool		has_source = (m->tenant_column != NULL || HAS_TENANT_FUNCTION(m));

	if (m->tenant_column != NULL && HAS_TENANT_FUNCTION(m))
		REJECT("config_invalid", "tenant_column and tenant_function are mutually exclusive");
	if (has_source && m->tenant_strategy == ASH_TENANT_NONE)
		REJECT("multitenancy_required",
			   "tenant_strategy attribute or context is required with a tenant source");
	if (!has_source && m->tenant_strategy != ASH_TENANT_NONE)
		REJECT("multitenancy_required",
			   "tenant_strategy %s needs tenant_column or tenant_function",
			   ash_tenant_strategy_name(m->tenant_strategy));

	if (m->tenant_strategy == ASH_TENANT_CONTEXT)
		check_schema_format(m->tenant_schema_format);
	else if (strcmp(m->tenant_schema_format, "%s") != 0)
		REJECT("config_invalid", "tenant_schema_format requires tenant_strategy context");

	if (m->tenant_column != NULL)
	{
		if (ash_mapspec_is_sensitive(m, m->tenant_column) ||
			ash_mapspec_is_encrypted(m, m->tenant_column))
			REJECT("tenant_attribute_invalid", "tenant column %s is listed in sensitive",
				   qname(m->tenant_column));
	}

	if (m->tenant_strategy == ASH_TENANT_ATTRIBUTE)
	{
		if (m->tenant_column == NULL)
			REJECT("tenant_attribute_invalid",
				   "tenant_strategy attribute needs tenant_column: a tenant_function names no target column to scope by");
		if (ash_mapspec_is_skipped(m, m->tenant_column))
			REJECT("tenant_attribute_invalid", "tenant column %s is skipped",
				   qname(m->tenant_column));
	}

	if (HAS_TENANT_FUNCTION(m))
		check_tenant_function(m->tenant_function, m->tenant_function_sig, sink->owner);
}

static void
check_append_options(AshMappingSpec *m, const AshMappingSink *sink)
{
	const char *names[ASH_APPEND_NAXES];
	ListCell   *lc;

	if (!m->append_log)
	{
		if (m->on_truncate == ASH_TRUNCATE_APPEND)
			REJECT("append_log_invalid", "on_truncate append requires an append-log mapping");
		for (int i = 0; i < ASH_APPEND_NAXES; i++)
		{
			if (m->append_columns[i] != NULL)
				REJECT("append_log_invalid", "append_%s_column requires append_log",
					   append_axis_names[i]);
		}
		return;
	}

	if (m->history_strategy == ASH_HISTORY_SCD2)
		REJECT("append_log_invalid", "history_strategy scd2 is not allowed on an append-log target");
	if (m->snapshot_provenance)
		REJECT("append_log_invalid", "snapshot_provenance is not allowed on an append-log target");
	if (m->on_truncate == ASH_TRUNCATE_MIRROR || m->on_truncate == ASH_TRUNCATE_CLOSE)
		REJECT("append_log_invalid", "on_truncate %s is not allowed on an append-log target",
			   ash_on_truncate_name(m->on_truncate));
	if (m->on_truncate == ASH_TRUNCATE_APPEND &&
		(m->tenant_column != NULL || HAS_TENANT_FUNCTION(m)))
		REJECT("append_log_invalid", "on_truncate append is not allowed with a tenant source");

	for (int i = 0; i < ASH_APPEND_NAXES; i++)
	{
		char		option[64];

		snprintf(option, sizeof(option), "append_%s_column", append_axis_names[i]);
		check_name_option(m->append_columns[i], option, "append_log_invalid");
		names[i] = ash_mapping_append_column(m, i);
		for (int j = 0; j < i; j++)
		{
			if (strcmp(names[i], names[j]) == 0)
				REJECT("append_log_invalid", "structural columns %s and %s share column %s",
					   append_axis_names[j], append_axis_names[i], qname(names[i]));
		}
	}

	for (int i = 0; i < ASH_APPEND_NAXES; i++)
	{
		const char *src;

		if ((src = sensitive_naming(m, names[i])) != NULL)
			REJECT("append_log_invalid", "structural column %s is listed in sensitive (column %s)",
				   qname(names[i]), qname(src));
		if ((src = source_feeding(m, names[i])) != NULL)
			REJECT("append_log_invalid", "structural column %s is mapped from source column %s",
				   qname(names[i]), qname(src));
	}
	foreach(lc, m->column_map)
	{
		AshColumnPair *pair = lfirst(lc);

		for (int i = 0; i < ASH_APPEND_NAXES; i++)
		{
			if (strcmp(pair->target, names[i]) == 0)
				REJECT("append_log_invalid", "structural column %s is mapped from source column %s",
					   qname(names[i]), qname(pair->source));
		}
	}

	if (m->tenant_strategy == ASH_TENANT_CONTEXT && !str_eq(sink->initial_state, "snapshot"))
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, MAPPING_STAGE, "append_frontier_unavailable",
				   "context tenancy on an append-log target of a go_forward sink");
}

static void
check_history_options(AshMappingSpec *m)
{
	const char *cols[5];
	const char *labels[5] = {
		"history_valid_from_lsn_column", "history_valid_to_lsn_column",
		"history_valid_from_ts_column", "history_valid_to_ts_column",
		"history_current_column"
	};
	ListCell   *lc;

	cols[0] = m->history_valid_from_lsn_column;
	cols[1] = m->history_valid_to_lsn_column;
	cols[2] = m->history_valid_from_ts_column;
	cols[3] = m->history_valid_to_ts_column;
	cols[4] = m->history_current_column;

	if (m->history_strategy != ASH_HISTORY_SCD2)
	{
		if (m->on_truncate == ASH_TRUNCATE_CLOSE)
			REJECT("history_invalid", "on_truncate close requires history_strategy scd2");
		if (m->history_business_key != NIL)
			REJECT("history_invalid", "history_business_key requires history_strategy scd2");
		if ((cols[0] && strcmp(cols[0], DEFAULT_VALID_FROM_LSN) != 0) ||
			(cols[1] && strcmp(cols[1], DEFAULT_VALID_TO_LSN) != 0))
			REJECT("history_invalid", "history window columns require history_strategy scd2");
		for (int i = 2; i < 5; i++)
		{
			if (cols[i] != NULL)
				REJECT("history_invalid", "%s requires history_strategy scd2", labels[i]);
		}
		return;
	}

	if (m->history_business_key == NIL)
		REJECT("history_invalid", "history_strategy scd2 requires history_business_key");
	if (cols[0] == NULL || cols[1] == NULL)
		REJECT("history_invalid", "history_strategy scd2 requires both lsn window columns");

	for (int i = 0; i < 5; i++)
	{
		const char *src;

		if (cols[i] == NULL)
			continue;
		check_name_option(cols[i], labels[i], "history_invalid");
		for (int j = 0; j < i; j++)
		{
			if (cols[j] != NULL && strcmp(cols[i], cols[j]) == 0)
				REJECT("history_invalid", "%s and %s name the same column %s",
					   labels[j], labels[i], qname(cols[i]));
		}
		if ((src = source_feeding(m, cols[i])) != NULL)
			REJECT("history_invalid", "window column %s is mapped from source column %s",
				   qname(cols[i]), qname(src));
	}

	foreach(lc, m->history_business_key)
	{
		const char *bk = lfirst(lc);

		if (ash_mapspec_is_skipped(m, bk))
			REJECT("history_invalid", "business key column %s is skipped", qname(bk));
		if (ash_mapspec_is_encrypted(m, bk))
			REJECT("history_invalid", "business key column %s is encrypted", qname(bk));
	}
}

static void
check_provenance_options(AshMappingSpec *m, const AshMappingSink *sink)
{
	const char *cols[2] = {ASH_PROVENANCE_FINGERPRINT_COLUMN, ASH_PROVENANCE_SEEN_COLUMN};

	if (!m->snapshot_provenance)
	{
		if (HAS_TENANT_SCOPE_FUNCTION(m))
			REJECT("config_invalid",
				   "tenant_scope_function requires snapshot_provenance and tenant_strategy context");
		return;
	}

	for (int i = 0; i < 2; i++)
	{
		const char *src;

		if ((src = sensitive_naming(m, cols[i])) != NULL)
			REJECT("snapshot_provenance_invalid",
				   "provenance column %s is listed in sensitive (column %s)",
				   qname(cols[i]), qname(src));
		if ((src = source_feeding(m, cols[i])) != NULL)
			REJECT("snapshot_provenance_invalid",
				   "provenance column %s is mapped from source column %s",
				   qname(cols[i]), qname(src));
	}

	if (m->tenant_strategy == ASH_TENANT_CONTEXT)
	{
		if (!HAS_TENANT_SCOPE_FUNCTION(m))
			REJECT("snapshot_provenance_invalid",
				   "context tenancy with snapshot_provenance requires tenant_scope_function");
		check_tenant_scope_function(m->tenant_scope_function, m->tenant_scope_function_sig,
									sink->owner);
	}
	else if (HAS_TENANT_SCOPE_FUNCTION(m))
		REJECT("config_invalid",
			   "tenant_scope_function requires snapshot_provenance and tenant_strategy context");
}

/* ------------------------------------------------------------------------
 * Phase 2: destination shape
 * ------------------------------------------------------------------------
 */

static void
open_target(ValidateCtx *cx)
{
	Relation	rel;
	char		relkind;
	char	   *nspname;

	rel = ash_open_target(cx->m->target, AccessShareLock, true);
	if (rel == NULL)
		REJECT("config_invalid", "target relation with OID %u does not exist", cx->m->target);
	cx->rel = rel;
	cx->desc = RelationGetDescr(rel);
	nspname = get_namespace_name(RelationGetNamespace(rel));
	cx->relname = psprintf("%s.%s", qname(nspname), qname(RelationGetRelationName(rel)));

	relkind = rel->rd_rel->relkind;
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
	{
		const char *what;

		switch (relkind)
		{
			case RELKIND_VIEW:
				what = "a view";
				break;
			case RELKIND_MATVIEW:
				what = "a materialized view";
				break;
			case RELKIND_FOREIGN_TABLE:
				what = "a foreign table";
				break;
			case RELKIND_SEQUENCE:
				what = "a sequence";
				break;
			case RELKIND_INDEX:
			case RELKIND_PARTITIONED_INDEX:
				what = "an index";
				break;
			case RELKIND_COMPOSITE_TYPE:
				what = "a composite type";
				break;
			case RELKIND_TOASTVALUE:
				what = "a TOAST table";
				break;
			default:
				what = "not a table";
				break;
		}
		ash_reject(ERRCODE_WRONG_OBJECT_TYPE, MAPPING_STAGE, "destination_not_local",
				   "target %s is %s, not a local table", cx->relname, what);
	}
	if (rel->rd_rel->relpersistence == RELPERSISTENCE_TEMP)
		ash_reject(ERRCODE_WRONG_OBJECT_TYPE, MAPPING_STAGE, "destination_not_local",
				   "target %s is a temporary table", qname(RelationGetRelationName(rel)));

	if (IsCatalogRelation(rel) || IsToastNamespace(RelationGetNamespace(rel)) ||
		strcmp(nspname, "information_schema") == 0 ||
		strcmp(nspname, "ash_replicant") == 0)
		REJECT("config_invalid", "target %s is a system or extension catalog", cx->relname);
}

/*
 * Every row must be written here, durably, in the transaction that moves
 * the checkpoint.  A crash (or a failover to a standby) empties an unlogged
 * table while the checkpoint, in a logged catalog, stays: the mirror would
 * go on short of every row it held, healthy.  A foreign partition writes
 * elsewhere, committed apart from the checkpoint.  A partitioned target's
 * partitions are judged one by one.
 */
static void
check_durable_here(ValidateCtx *cx)
{
	List	   *rels;
	ListCell   *lc;

	if (cx->rel->rd_rel->relpersistence == RELPERSISTENCE_UNLOGGED)
		REJECT("config_invalid",
			   "target %s is unlogged: a crash of the destination would empty it while the checkpoint stays",
			   cx->relname);
	if (cx->rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		return;
	rels = find_all_inheritors(RelationGetRelid(cx->rel), AccessShareLock, NULL);
	foreach(lc, rels)
	{
		Oid			part = lfirst_oid(lc);

		if (get_rel_relkind(part) == RELKIND_FOREIGN_TABLE)
			ash_reject(ERRCODE_WRONG_OBJECT_TYPE, MAPPING_STAGE, "destination_not_local",
					   "partition %s of target %s is a foreign table, not a local table",
					   ash_mapping_qualified_relname(part), cx->relname);
		if (get_rel_persistence(part) == RELPERSISTENCE_UNLOGGED)
			REJECT("config_invalid",
				   "partition %s of target %s is unlogged: a crash of the destination would empty it while the checkpoint stays",
				   ash_mapping_qualified_relname(part), cx->relname);
	}
}

static void
check_owner_privileges(ValidateCtx *cx)
{
	Oid			owner = cx->sink->owner;
	Oid			relid = RelationGetRelid(cx->rel);
	char	   *rolname;
	static const struct
	{
		AclMode		mode;
		const char *name;
		bool		append_needs;
	}			privs[] = {
		{ACL_SELECT, "SELECT", true},
		{ACL_INSERT, "INSERT", true},
		{ACL_UPDATE, "UPDATE", false},
		{ACL_DELETE, "DELETE", false},
	};

	if (!OidIsValid(owner) || !SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(owner)))
		REJECT("config_invalid", "the sink owner role does not exist");
	rolname = qname(GetUserNameFromId(owner, false));

	/* the writes would run as neither role (owner_scope.c) */
	if (ash_owner_table_writer(owner, cx->rel->rd_rel->relowner) == ASH_WRITER_UNTRUSTED)
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, MAPPING_STAGE, "target_owner_untrusted",
				   "the owner of target %s does not have the privileges of sink owner %s, nor %s the table owner's: give the table to the sink owner, or grant one role to the other",
				   cx->relname, rolname, rolname);

	if (pg_namespace_aclcheck(RelationGetNamespace(cx->rel), owner, ACL_USAGE) != ACLCHECK_OK)
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, MAPPING_STAGE, "config_invalid",
				   "sink owner %s lacks USAGE on the schema of target %s", rolname, cx->relname);

	for (int i = 0; i < lengthof(privs); i++)
	{
		if (cx->m->append_log && !privs[i].append_needs)
			continue;
		if (pg_class_aclcheck(relid, owner, privs[i].mode) == ACLCHECK_OK)
			continue;
		if (privs[i].mode != ACL_DELETE &&
			pg_attribute_aclcheck_all(relid, owner, privs[i].mode, ACLMASK_ALL) == ACLCHECK_OK)
			continue;
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, MAPPING_STAGE, "config_invalid",
				   "sink owner %s lacks %s on target %s", rolname, privs[i].name, cx->relname);
	}

	/*
	 * A policy would hide rows from the owner's deletes, a TRUNCATE's
	 * delete and a snapshot's retirement, which would pass over them without
	 * a word; the worker's row_security = off turns that into an error at
	 * the first write, this into a refusal before it.
	 */
	if (ash_rls_applies_to_owner(cx->rel, owner))
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, MAPPING_STAGE, "config_invalid",
				   "row-level security of target %s applies to sink owner %s: make the owner own the table, or give it BYPASSRLS, or disable row-level security on the table",
				   cx->relname, rolname);
}

bool
ash_rls_applies_to_owner(Relation rel, Oid owner)
{
	return rel->rd_rel->relrowsecurity && !has_bypassrls_privilege(owner) &&
		!pg_class_ownercheck(RelationGetRelid(rel), owner);
}

/* A target column written from the source must exist and be writable. */
static Form_pg_attribute
require_written_column(ValidateCtx *cx, const char *target, const char *source,
					   const char *reason)
{
	Form_pg_attribute att = find_column(cx->desc, target);

	if (att == NULL)
		REJECT(reason, "column %s maps to target column %s, which does not exist",
			   qname(source), qname(target));
	if (att->attgenerated)
		REJECT(reason, "column %s maps to generated target column %s",
			   qname(source), qname(target));
	return att;
}

static void
check_column_map_targets(ValidateCtx *cx)
{
	ListCell   *lc;

	foreach(lc, cx->m->column_map)
	{
		AshColumnPair *pair = lfirst(lc);

		require_written_column(cx, pair->target, pair->source, "config_invalid");
	}
}

static void
check_tenant_target(ValidateCtx *cx)
{
	AshMappingSpec *m = cx->m;
	const char *target;
	Form_pg_attribute att;
	const char *src;

	if (m->tenant_strategy != ASH_TENANT_ATTRIBUTE)
		return;

	target = ash_mapspec_target_column(m, m->tenant_column);
	att = find_column(cx->desc, target);
	if (att == NULL)
		REJECT("tenant_attribute_invalid", "tenant column %s maps to target column %s, which does not exist",
			   qname(m->tenant_column), qname(target));
	if (att->attgenerated)
		REJECT("tenant_attribute_invalid", "tenant column %s maps to generated target column %s",
			   qname(m->tenant_column), qname(target));
	if (column_has_base_type(att, BYTEAOID))
		REJECT("tenant_attribute_invalid", "tenant target column %s is bytea, not plaintext",
			   qname(target));
	if ((src = sensitive_naming(m, target)) != NULL)
		REJECT("tenant_attribute_invalid", "tenant target column %s is sensitive (column %s)",
			   qname(target), qname(src));
}

static void
check_sensitive_targets(ValidateCtx *cx)
{
	AshMappingSpec *m = cx->m;
	ListCell   *lc;

	foreach(lc, m->encrypted)
	{
		const char *col = lfirst(lc);
		const char *target = ash_mapspec_target_column(m, col);
		Form_pg_attribute att = find_column(cx->desc, target);

		if (att == NULL)
			REJECT("sensitive_unprotected",
				   "encrypted column %s maps to target column %s, which does not exist",
				   qname(col), qname(target));
		if (!column_has_base_type(att, BYTEAOID))
			REJECT("sensitive_unprotected",
				   "encrypted column %s needs a bytea target, target column %s is not bytea",
				   qname(col), qname(target));
		if (att->attgenerated)
			REJECT("config_invalid", "column %s maps to generated target column %s",
				   qname(col), qname(target));
	}

	foreach(lc, m->sensitive)
	{
		const char *col = lfirst(lc);
		const char *target;
		Form_pg_attribute att;

		if (ash_mapspec_is_skipped(m, col) || ash_mapspec_is_encrypted(m, col))
			continue;
		target = ash_mapspec_target_column(m, col);
		att = find_column(cx->desc, target);
		if (att == NULL)
			REJECT("sensitive_unprotected",
				   "column %s maps to target column %s, which does not exist",
				   qname(col), qname(target));
		if (!column_has_base_type(att, BYTEAOID))
			REJECT("sensitive_unprotected", "column %s", qname(col));
		if (att->attgenerated)
			REJECT("config_invalid", "column %s maps to generated target column %s",
				   qname(col), qname(target));
	}
}

/* --- indexes --------------------------------------------------------- */

/*
 * The primary key index of rel, deferrable or not (the relcache's
 * RelationGetPrimaryKeyIndex ignores a deferrable one), or InvalidOid.
 */
static Oid
primary_key_index(Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;

	foreach(lc, indexes)
	{
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(lfirst_oid(lc)));
		bool		primary;

		if (!HeapTupleIsValid(tup))
			continue;
		primary = ((Form_pg_index) GETSTRUCT(tup))->indisprimary;
		ReleaseSysCache(tup);
		if (primary)
			return lfirst_oid(lc);
	}
	return InvalidOid;
}

/* Why index idx cannot be an ON CONFLICT arbiter, or NULL if it can. */
static const char *
arbiter_defect(Relation idx)
{
	Form_pg_index ix = idx->rd_index;

	if (!ix->indisunique)
		return "is not unique";
	if (!ix->indimmediate)
		return "is deferrable";
	if (!ix->indisvalid || !ix->indisready)
		return "is not valid";
	if (RelationGetIndexPredicate(idx) != NIL)
		return "is partial";
	if (RelationGetIndexExpressions(idx) != NIL)
		return "has expression columns";
	return NULL;
}

/* True when the key columns of idx are exactly the set want[0..nwant-1]. */
static bool
index_keys_are(Relation idx, const AttrNumber *want, int nwant)
{
	Form_pg_index ix = idx->rd_index;

	if (ix->indnkeyatts != nwant)
		return false;
	for (int i = 0; i < nwant; i++)
	{
		bool		found = false;

		for (int k = 0; k < ix->indnkeyatts; k++)
		{
			if (ix->indkey.values[k] == want[i])
				found = true;
		}
		if (!found)
			return false;
	}
	return true;
}

/*
 * The index named "name" (index name or name of its constraint) of the
 * target; raise config_invalid when there is none or it cannot serve as
 * the conflict target.  The returned index is open with AccessShareLock.
 */
static Relation
open_named_identity(ValidateCtx *cx, const char *name)
{
	List	   *indexes = RelationGetIndexList(cx->rel);
	ListCell   *lc;

	foreach(lc, indexes)
	{
		Oid			indexoid = lfirst_oid(lc);
		char	   *idxname = get_rel_name(indexoid);
		Oid			conoid = get_index_constraint(indexoid);
		char	   *conname = OidIsValid(conoid) ? get_constraint_name(conoid) : NULL;
		Relation	idx;
		const char *defect;

		if (!str_eq(idxname, name) && !str_eq(conname, name))
			continue;
		idx = index_open(indexoid, AccessShareLock);
		if ((defect = arbiter_defect(idx)) != NULL)
			REJECT("config_invalid", "upsert_identity %s %s", qname(name), defect);
		return idx;
	}
	REJECT("config_invalid", "upsert_identity %s is not a unique index or constraint of target %s",
		   qname(name), cx->relname);
}

/* Any usable arbiter index of the target whose keys are exactly want. */
static Oid
find_identity_index(ValidateCtx *cx, const AttrNumber *want, int nwant)
{
	List	   *indexes = RelationGetIndexList(cx->rel);
	ListCell   *lc;
	Oid			result = InvalidOid;

	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);
		bool		ok = (arbiter_defect(idx) == NULL && index_keys_are(idx, want, nwant));

		index_close(idx, AccessShareLock);
		if (ok)
		{
			result = lfirst_oid(lc);
			break;
		}
	}
	return result;
}

/*
 * Resolve the conflict target with the given exact key set: the named
 * upsert_identity (its keys must be want, else "reason") or any matching
 * unique index (none: "reason" with "missing").
 */
static Oid
resolve_identity(ValidateCtx *cx, const AttrNumber *want, int nwant,
				 const char *reason, const char *what)
{
	Oid			result;

	if (cx->m->upsert_identity != NULL)
	{
		Relation	idx = open_named_identity(cx, cx->m->upsert_identity);
		bool		ok = index_keys_are(idx, want, nwant);

		result = RelationGetRelid(idx);
		index_close(idx, AccessShareLock);
		if (!ok)
			REJECT(reason, "upsert_identity %s must be a unique index on exactly %s",
				   qname(cx->m->upsert_identity), what);
		return result;
	}
	result = find_identity_index(cx, want, nwant);
	if (!OidIsValid(result))
		REJECT(reason, "target %s needs a unique index on exactly %s", cx->relname, what);
	return result;
}

/* Encrypted values are randomized: they can never be a conflict key. */
static void
check_identity_not_encrypted(ValidateCtx *cx, Oid indexoid)
{
	Relation	idx = index_open(indexoid, AccessShareLock);
	Form_pg_index ix = idx->rd_index;
	ListCell   *lc;

	foreach(lc, cx->m->encrypted)
	{
		const char *col = lfirst(lc);
		Form_pg_attribute att = find_column(cx->desc, ash_mapspec_target_column(cx->m, col));

		if (att == NULL)
			continue;
		for (int k = 0; k < ix->indnkeyatts; k++)
		{
			if (ix->indkey.values[k] == att->attnum)
				REJECT("config_invalid",
					   "encrypted column %s is part of the upsert identity of target %s",
					   qname(col), cx->relname);
		}
	}
	index_close(idx, AccessShareLock);
}

static void
check_scd1_identity(ValidateCtx *cx)
{
	AshMappingSpec *m = cx->m;

	if (m->upsert_identity != NULL)
	{
		Relation	idx = open_named_identity(cx, m->upsert_identity);

		m->identity_index = RelationGetRelid(idx);
		index_close(idx, AccessShareLock);
	}
	else
	{
		Oid			pk = primary_key_index(cx->rel);
		Relation	idx;
		const char *defect;

		if (!OidIsValid(pk))
			REJECT("config_invalid",
				   "target %s has no primary key and no upsert_identity (keyless target)",
				   cx->relname);
		idx = index_open(pk, AccessShareLock);
		defect = arbiter_defect(idx);
		index_close(idx, AccessShareLock);
		if (defect != NULL)
			REJECT("config_invalid", "primary key of target %s %s", cx->relname, defect);
		m->identity_index = pk;
	}
	check_identity_not_encrypted(cx, m->identity_index);
}

/* --- append log ------------------------------------------------------ */

static void
check_no_before_row_triggers(ValidateCtx *cx, Relation rel)
{
	TriggerDesc *td = rel->trigdesc;

	if (td == NULL)
		return;
	for (int i = 0; i < td->numtriggers; i++)
	{
		Trigger    *tg = &td->triggers[i];

		if (TRIGGER_FOR_ROW(tg->tgtype) && TRIGGER_FOR_BEFORE(tg->tgtype))
		{
			if (RelationGetRelid(rel) == RelationGetRelid(cx->rel))
				REJECT("append_log_invalid", "target %s has BEFORE ROW trigger %s",
					   cx->relname, qname(tg->tgname));
			REJECT("append_log_invalid", "partition %s of target %s has BEFORE ROW trigger %s",
				   ash_mapping_qualified_relname(RelationGetRelid(rel)), cx->relname, qname(tg->tgname));
		}
	}
}

static void
check_append_target(ValidateCtx *cx)
{
	AshMappingSpec *m = cx->m;
	AttrNumber	axes[ASH_APPEND_NIDENTITY];
	RuleLock   *rules = cx->rel->rd_rules;

	for (int i = 0; i < ASH_APPEND_NAXES; i++)
	{
		const char *name = ash_mapping_append_column(m, i);
		Form_pg_attribute att = find_column(cx->desc, name);
		char	   *label = m->append_columns[i] ?
			psprintf("%s (%s)", qname(name), append_axis_names[i]) : qname(name);

		if (att == NULL)
			REJECT("append_log_invalid", "structural column %s is missing", label);
		if (!column_has_base_type(att, append_axis_types[i]))
			REJECT("append_log_invalid", "structural column %s must be of type %s",
				   label, format_type_be(append_axis_types[i]));
		if (att->attgenerated)
			REJECT("append_log_invalid", "structural column %s is generated", label);
		if (i <= ASH_APPEND_ORIGIN && !att->attnotnull)
			REJECT("append_log_invalid", "structural column %s must be NOT NULL", label);
		if (i == ASH_APPEND_SNAPSHOT_ATTEMPT && att->attnotnull)
			REJECT("append_log_invalid", "structural column %s must be nullable", label);
		if (i < ASH_APPEND_NIDENTITY)
			axes[i] = att->attnum;
	}

	m->identity_index = resolve_identity(cx, axes, ASH_APPEND_NIDENTITY, "append_log_invalid",
										 "the five identity axes (source_system_id, source_database, slot_name, commit_lsn, ordinal)");

	if (rules != NULL)
	{
		for (int i = 0; i < rules->numLocks; i++)
		{
			if (rules->rules[i]->event == CMD_INSERT)
				REJECT("append_log_invalid", "target %s has an ON INSERT rule", cx->relname);
		}
	}

	check_no_before_row_triggers(cx, cx->rel);
	if (cx->rel->rd_rel->relkind == RELKIND_PARTITIONED_TABLE)
	{
		List	   *parts = find_all_inheritors(RelationGetRelid(cx->rel), AccessShareLock, NULL);
		ListCell   *lc;

		foreach(lc, parts)
		{
			Relation	part;

			if (lfirst_oid(lc) == RelationGetRelid(cx->rel))
				continue;
			part = relation_open(lfirst_oid(lc), NoLock);
			check_no_before_row_triggers(cx, part);
			relation_close(part, NoLock);
		}
	}
}

/* --- state mirrors -------------------------------------------------- */

/* pg_rewrite has no cache by OID: one index lookup (rules are rare). */
static char *
rule_name(Oid ruleid)
{
	Relation	rewrite = table_open(RewriteRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	char	   *name = NULL;

	ScanKeyInit(&key, Anum_pg_rewrite_oid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(ruleid));
	scan = systable_beginscan(rewrite, RewriteOidIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	if (HeapTupleIsValid(tup))
		name = pstrdup(NameStr(((Form_pg_rewrite) GETSTRUCT(tup))->rulename));
	systable_endscan(scan);
	table_close(rewrite, AccessShareLock);
	return name;
}

/*
 * A rule rewrites the statement the mirror runs: a DO INSTEAD rule replaces
 * the write (a delete that deletes nothing passes for a missing row), and an
 * ON INSERT or ON UPDATE rule refuses INSERT ... ON CONFLICT.  Only ON DELETE
 * ... DO ALSO leaves the mirror's write as it is.
 */
static void
check_state_rules(ValidateCtx *cx, const char *reason)
{
	RuleLock   *rules = cx->rel->rd_rules;

	if (rules == NULL)
		return;
	for (int i = 0; i < rules->numLocks; i++)
	{
		RewriteRule *rule = rules->rules[i];
		char	   *name;

		if (rule->event == CMD_DELETE && !rule->isInstead)
			continue;
		if (rule->event != CMD_INSERT && rule->event != CMD_UPDATE &&
			rule->event != CMD_DELETE)
			continue;
		name = rule_name(rule->ruleId);
		REJECT(reason, "target %s has rule %s: only ON DELETE ... DO ALSO rules leave the mirror's writes as they are",
			   cx->relname, qname(name ? name : "?"));
	}
}

/* --- SCD2 ------------------------------------------------------------ */

static Form_pg_attribute
require_history_column(ValidateCtx *cx, const char *name, const char *label,
					   Oid typid, bool must_be_nullable)
{
	Form_pg_attribute att = find_column(cx->desc, name);

	if (att == NULL)
		REJECT("history_invalid", "%s %s does not exist on target %s",
			   label, qname(name), cx->relname);
	if (!column_has_base_type(att, typid))
		REJECT("history_invalid", "%s %s must be of type %s",
			   label, qname(name), format_type_be(typid));
	if (must_be_nullable && att->attnotnull)
		REJECT("history_invalid", "%s %s must be nullable", label, qname(name));
	if (att->attgenerated)
		REJECT("history_invalid", "%s %s is generated", label, qname(name));
	return att;
}

/* Is idx the partial unique index "one open version per business key"? */
static bool
is_open_version_index(Relation idx, const AttrNumber *bk, int nbk, AttrNumber valid_to)
{
	Form_pg_index ix = idx->rd_index;
	List	   *pred;
	Node	   *expr;
	NullTest   *nt;

	if (!ix->indisunique || !ix->indisvalid || !ix->indisready)
		return false;
	if (RelationGetIndexExpressions(idx) != NIL)
		return false;
	if (!index_keys_are(idx, bk, nbk))
		return false;
	pred = RelationGetIndexPredicate(idx);
	if (list_length(pred) != 1)
		return false;
	expr = linitial(pred);
	if (!IsA(expr, NullTest))
		return false;
	nt = (NullTest *) expr;
	if (nt->nulltesttype != IS_NULL || nt->argisrow || !IsA(nt->arg, Var))
		return false;
	return ((Var *) nt->arg)->varattno == valid_to;
}

static void
check_history_target(ValidateCtx *cx)
{
	AshMappingSpec *m = cx->m;
	int			nbk = list_length(m->history_business_key);
	AttrNumber *bk = palloc((nbk + 1) * sizeof(AttrNumber));
	Form_pg_attribute from_att;
	Form_pg_attribute to_att;
	Oid			pk;
	List	   *indexes;
	ListCell   *lc;
	bool		open_index = false;
	StringInfoData what;
	int			i = 0;

	initStringInfo(&what);
	foreach(lc, m->history_business_key)
	{
		const char *src = lfirst(lc);
		const char *target = ash_mapspec_target_column(m, src);
		Form_pg_attribute att = find_column(cx->desc, target);

		if (att == NULL)
			REJECT("history_invalid",
				   "business key column %s maps to target column %s, which does not exist",
				   qname(src), qname(target));
		if (att->attgenerated)
			REJECT("history_invalid", "business key column %s maps to generated target column %s",
				   qname(src), qname(target));
		for (int j = 0; j < i; j++)
		{
			if (bk[j] == att->attnum)
				REJECT("history_invalid", "business key columns share target column %s",
					   qname(target));
		}
		bk[i++] = att->attnum;
		appendStringInfo(&what, "%s, ", qname(target));
	}

	/* a surrogate primary key disjoint from the business key */
	pk = primary_key_index(cx->rel);
	if (!OidIsValid(pk))
		REJECT("history_invalid", "target %s needs a surrogate primary key", cx->relname);
	else
	{
		Relation	idx = index_open(pk, AccessShareLock);

		for (int k = 0; k < idx->rd_index->indnkeyatts; k++)
		{
			for (int j = 0; j < nbk; j++)
			{
				if (idx->rd_index->indkey.values[k] == bk[j])
					REJECT("history_invalid",
						   "primary key of target %s must be a surrogate key disjoint from the business key (column %s)",
						   cx->relname,
						   qname(NameStr(TupleDescAttr(cx->desc, bk[j] - 1)->attname)));
			}
		}
		index_close(idx, AccessShareLock);
	}

	/* window columns */
	from_att = require_history_column(cx, m->history_valid_from_lsn_column,
									  "valid_from lsn column", INT8OID, false);
	to_att = require_history_column(cx, m->history_valid_to_lsn_column,
									"valid_to lsn column", INT8OID, true);
	for (int j = 0; j < nbk; j++)
	{
		if (bk[j] == from_att->attnum || bk[j] == to_att->attnum)
			REJECT("history_invalid", "window column %s is part of the business key",
				   qname(NameStr(TupleDescAttr(cx->desc, bk[j] - 1)->attname)));
	}
	if (m->history_valid_from_ts_column)
		require_history_column(cx, m->history_valid_from_ts_column,
							   "valid_from timestamp column", TIMESTAMPTZOID, false);
	if (m->history_valid_to_ts_column)
		require_history_column(cx, m->history_valid_to_ts_column,
							   "valid_to timestamp column", TIMESTAMPTZOID, true);
	if (m->history_current_column)
		require_history_column(cx, m->history_current_column,
							   "current column", BOOLOID, false);

	/* version identity: exactly business key + valid_from */
	bk[nbk] = from_att->attnum;
	appendStringInfo(&what, "%s", qname(NameStr(from_att->attname)));
	m->identity_index = resolve_identity(cx, bk, nbk + 1, "history_invalid",
										 psprintf("the business key and valid_from (%s)", what.data));

	/* one open version per business key */
	indexes = RelationGetIndexList(cx->rel);
	foreach(lc, indexes)
	{
		Relation	idx = index_open(lfirst_oid(lc), AccessShareLock);

		open_index = is_open_version_index(idx, bk, nbk, to_att->attnum);
		index_close(idx, AccessShareLock);
		if (open_index)
			break;
	}
	if (!open_index)
		REJECT("history_invalid",
			   "target %s needs a partial unique index on the business key WHERE %s IS NULL (one open version)",
			   cx->relname, qname(NameStr(to_att->attname)));
}

/* --- snapshot provenance -------------------------------------------- */

static void
check_provenance_target(ValidateCtx *cx)
{
	const char *cols[2] = {ASH_PROVENANCE_FINGERPRINT_COLUMN, ASH_PROVENANCE_SEEN_COLUMN};

	for (int i = 0; i < 2; i++)
	{
		Form_pg_attribute att = find_column(cx->desc, cols[i]);

		if (att == NULL)
			REJECT("snapshot_provenance_invalid", "target %s needs column %s bytea",
				   cx->relname, qname(cols[i]));
		if (!column_has_base_type(att, BYTEAOID))
			REJECT("snapshot_provenance_invalid", "provenance column %s must be bytea",
				   qname(cols[i]));
		if (att->attnotnull)
			REJECT("snapshot_provenance_invalid", "provenance column %s must be nullable",
				   qname(cols[i]));
		if (att->attgenerated)
			REJECT("snapshot_provenance_invalid", "provenance column %s is generated",
				   qname(cols[i]));
	}
}

/* ------------------------------------------------------------------------
 * Entry point
 * ------------------------------------------------------------------------
 */

const char *
ash_mapping_target_claim(bool provenance, const char *tenant_strategy, const char *on_truncate)
{
	if (provenance && !str_eq(tenant_strategy, "context"))
		return "snapshot_provenance";
	if (str_eq(on_truncate, "mirror") || str_eq(on_truncate, "close"))
		return "on_truncate";
	return NULL;
}

/*
 * Can some schema name be both format(a, t1) and format(b, t2)?  Each
 * format holds exactly one %s and the tenants are arbitrary: exactly when
 * one prefix is a prefix of the other and one suffix a suffix of the
 * other (the longer part's excess is then taken from the other's tenant).
 */
static bool
formats_meet(const char *a, const char *b)
{
	const char *pa = strstr(a, "%s");
	const char *pb = strstr(b, "%s");
	size_t		plen;
	size_t		sa;
	size_t		sb;

	if (pa == NULL || pb == NULL)
		return strcmp(a, b) == 0;
	plen = Min(pa - a, pb - b);
	sa = strlen(pa + 2);
	sb = strlen(pb + 2);
	return strncmp(a, b, plen) == 0 &&
		strcmp(pa + 2 + (sa - Min(sa, sb)), pb + 2 + (sb - Min(sa, sb))) == 0;
}

/*
 * Two context mappings of templates of one table name whose formats can
 * name one schema would resolve a tenant of each to one table, where two
 * source tables' rows meet under one key (the worker halts
 * tenant_scope_invalid there: relmap.c).  Mappings of the same template
 * share its tenant tables by design.
 */
static void
check_tenant_tables_apart(AshMappingSpec *m, bool lock)
{
	Oid			argtypes[2] = {TEXTOID, OIDOID};
	Datum		values[2];
	char	   *relname = get_rel_name(m->target);
	int			rc;

	if (m->tenant_strategy != ASH_TENANT_CONTEXT || relname == NULL)
		return;
	values[0] = CStringGetTextDatum(relname);
	values[1] = ObjectIdGetDatum(m->target);
	if (lock)
	{
		rc = SPI_execute_with_args("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended("
								   "'ash_replicant.tenant_table:' OPERATOR(pg_catalog.||) $1, 0))",
								   2, argtypes, values, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: locking the template name's registrations failed");
	}
	rc = SPI_execute_with_args("SELECT r.sink_name, r.target::pg_catalog.oid, r.tenant_schema_format"
							   "  FROM ash_replicant.resources r"
							   "  JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.target::pg_catalog.oid"
							   " WHERE r.tenant_strategy OPERATOR(pg_catalog.=) 'context'"
							   "   AND c.relname OPERATOR(pg_catalog.=) $1::pg_catalog.name"
							   "   AND r.target::pg_catalog.oid OPERATOR(pg_catalog.<>) $2"
							   " ORDER BY r.sink_name, c.oid",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading mappings failed: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		Oid			other = DatumGetObjectId(SPI_getbinval(tup, desc, 2, &isnull));
		char	   *format = SPI_getvalue(tup, desc, 3);

		if (!formats_meet(m->tenant_schema_format, format ? format : "%s"))
			continue;
		ash_reject(ERRCODE_DUPLICATE_OBJECT, "mapping", "config_invalid",
				   "the tenant tables of %s and of %s (sink %s) can be one table: their "
				   "tenant_schema_formats can name one schema",
				   ash_mapping_qualified_relname(m->target), ash_mapping_qualified_relname(other),
				   ash_quoted_name(SPI_getvalue(tup, desc, 1)));
	}
}

void
ash_mapping_check_shared_target(AshMappingSpec *m, bool lock)
{
	Oid			argtypes[2] = {TEXTOID, OIDOID};
	Datum		values[2];
	const char *mine = ash_mapping_target_claim(m->snapshot_provenance,
												ash_tenant_strategy_name(m->tenant_strategy),
												ash_on_truncate_name(m->on_truncate));
	int			rc;

	values[0] = CStringGetTextDatum(m->sink_name);
	values[1] = ObjectIdGetDatum(m->target);
	if (lock)
	{
		rc = SPI_execute_with_args("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended("
								   "'ash_replicant.target:' OPERATOR(pg_catalog.||) $2::pg_catalog.text, 0))",
								   2, argtypes, values, NULL, false, 0);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: locking the target's registrations failed");
	}
	rc = SPI_execute_with_args("SELECT sink_name, snapshot_provenance, tenant_strategy, on_truncate"
							   "  FROM ash_replicant.resources"
							   " WHERE target::pg_catalog.oid OPERATOR(pg_catalog.=) $2"
							   "   AND sink_name OPERATOR(pg_catalog.<>) $1"
							   " ORDER BY sink_name",
							   2, argtypes, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading mappings failed: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		isnull;
		char	   *other = SPI_getvalue(tup, desc, 1);
		const char *theirs = ash_mapping_target_claim(DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull)),
													  SPI_getvalue(tup, desc, 3),
													  SPI_getvalue(tup, desc, 4));
		const char *claim = mine != NULL ? mine : theirs;

		if (claim == NULL)
			continue;
		ash_reject(ERRCODE_DUPLICATE_OBJECT, "mapping",
				   strcmp(claim, "snapshot_provenance") == 0 ? "snapshot_provenance_invalid" : "config_invalid",
				   "%s is mapped by sink %s too, and %s's %s acts on rows the other sink wrote",
				   ash_mapping_qualified_relname(m->target), ash_quoted_name(other),
				   mine != NULL ? "this mapping" : "that mapping", claim);
	}
	check_tenant_tables_apart(m, lock);
}

/*
 * Keys compare as the source compares them.  Under a nondeterministic
 * collation two keys the source tells apart ('A' and 'a' under a
 * case-insensitive one) are one target row: the second key's write lands
 * on the first's row, and a tenant's scope takes in another tenant's rows,
 * without a word.  So no column of the identity (in its index or as a
 * column compared by the apply's statements) and no tenant column may
 * compare under one.
 */
static bool
nondeterministic(Oid collation)
{
	return OidIsValid(collation) && !get_collation_isdeterministic(collation);
}

static void
check_key_collations(ValidateCtx *cx)
{
	AshMappingSpec *m = cx->m;
	const char *reason = m->append_log ? "append_log_invalid" :
		m->history_strategy == ASH_HISTORY_SCD2 ? "history_invalid" : "config_invalid";

	if (OidIsValid(m->identity_index))
	{
		Relation	idx = index_open(m->identity_index, AccessShareLock);

		for (int k = 0; k < idx->rd_index->indnkeyatts; k++)
		{
			AttrNumber	attnum = idx->rd_index->indkey.values[k];
			Form_pg_attribute att;

			if (attnum <= 0)
				continue;
			att = TupleDescAttr(cx->desc, attnum - 1);
			if (nondeterministic(idx->rd_indcollation[k]) ||
				nondeterministic(att->attcollation))
				REJECT(reason,
					   "column %s of the identity of target %s compares under a nondeterministic collation: keys the source tells apart would be one row",
					   qname(NameStr(att->attname)), cx->relname);
		}
		index_close(idx, AccessShareLock);
	}
	if (m->tenant_strategy == ASH_TENANT_ATTRIBUTE)
	{
		Form_pg_attribute att = find_column(cx->desc,
											ash_mapspec_target_column(m, m->tenant_column));

		if (att != NULL && nondeterministic(att->attcollation))
			REJECT("tenant_attribute_invalid",
				   "tenant target column %s compares under a nondeterministic collation: tenants the source tells apart would share rows",
				   qname(NameStr(att->attname)));
	}
}

/*
 * recheck: judged again in a pipeline, without the sink owner's privileges
 * (a write it may not make fails 42501, apply_failed; and column grants on
 * the columns it writes are enough there, which registration cannot know).
 */
static void
validate(AshMappingSpec *m, const AshMappingSink *sink, bool recheck)
{
	ValidateCtx cx;

	memset(&cx, 0, sizeof(cx));
	cx.m = m;
	cx.sink = sink;
	m->identity_index = InvalidOid;

	/* Phase 1: option grammar. */
	check_basics(m, sink);
	if (m->append_log != sink->append_log)
		REJECT("sink_kind_mixed",
			   sink->append_log ? "sink %s is an append log: the mapping needs append_log => true"
			   : "sink %s is a state mirror: append_log => true is not allowed",
			   qname(sink->sink_name));
	check_column_lists(m);
	check_tenancy_options(m, sink);
	check_append_options(m, sink);
	check_history_options(m);
	check_provenance_options(m, sink);

	/* Phase 2: destination shape. */
	open_target(&cx);
	check_durable_here(&cx);
	if (!recheck)
		check_owner_privileges(&cx);
	check_column_map_targets(&cx);
	check_tenant_target(&cx);
	check_sensitive_targets(&cx);
	if (m->append_log)
		check_append_target(&cx);
	else if (m->history_strategy == ASH_HISTORY_SCD2)
	{
		check_history_target(&cx);
		check_state_rules(&cx, "history_invalid");
	}
	else
	{
		check_scd1_identity(&cx);
		check_state_rules(&cx, "config_invalid");
	}
	check_key_collations(&cx);
	if (m->snapshot_provenance)
		check_provenance_target(&cx);

	/* keep the lock until the end of the transaction */
	relation_close(cx.rel, NoLock);
}

void
ash_mapping_validate(AshMappingSpec *m, const AshMappingSink *sink)
{
	validate(m, sink, false);
}

/*
 * Registration's rules judged again in a pipeline, for a target whose
 * definition may have changed since it was registered: a rule it fails
 * halts census_drift naming the registration code and its context
 * (docs/operations.md, "Target DDL while streaming").  withhold: m's
 * target is a tenant's table, whose schema names the tenant -- the context
 * names the mapping and the code only.  The sink owner's privileges are
 * not judged here (validate()).
 */
void
ash_mapping_recheck(AshMappingSpec *m, const AshMappingSink *sink, bool withhold)
{
	char	   *subject = psprintf(withhold ? "mapping of %s.%s, a tenant's table" : "mapping of %s.%s",
								   quote_identifier(m->source_schema),
								   quote_identifier(m->source_table));
	AshMappingSink unprivileged = *sink;

	/* InvalidOid: phase 1 judges no EXECUTE privilege either */
	unprivileged.owner = InvalidOid;
	ash_reject_as_halt("census_drift", subject, withhold);
	PG_TRY();
	{
		validate(m, &unprivileged, true);
	}
	PG_FINALLY();
	{
		ash_reject_as_halt(NULL, NULL, false);
	}
	PG_END_TRY();
	pfree(subject);
}

/* ------------------------------------------------------------------------
 * Loaders
 * ------------------------------------------------------------------------
 */

#define RESOURCE_COLUMNS \
	"resource_id, sink_name, target, source_schema, source_table, column_map, " \
	"tenant_column, tenant_function::pg_catalog.text, tenant_strategy, tenant_schema_format, " \
	"tenant_scope_function::pg_catalog.text, sensitive, encrypted, skip, on_truncate, " \
	"on_schema_change, upsert_identity, history_strategy, history_business_key, " \
	"history_valid_from_lsn_column, history_valid_to_lsn_column, " \
	"history_valid_from_ts_column, history_valid_to_ts_column, " \
	"history_current_column, append_log, append_columns, snapshot_provenance"

static char *
get_text(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

static Oid
get_oid(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? InvalidOid : DatumGetObjectId(d);
}

static bool
get_bool(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? false : DatumGetBool(d);
}

static List *
get_names(HeapTuple tup, TupleDesc desc, int col, const char *option)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? NIL : ash_mapping_name_list(DatumGetArrayTypePCopy(d), option);
}

/* Build a mapping from one resources row (in CurrentMemoryContext). */
static AshMappingSpec *
mapping_from_row(HeapTuple tup, TupleDesc desc)
{
	AshMappingSpec *m = ash_mapping_new();
	bool		isnull;
	Datum		d;
	char	   *s;

	m->resource_id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
	m->sink_name = get_text(tup, desc, 2);
	m->target = get_oid(tup, desc, 3);
	m->source_schema = get_text(tup, desc, 4);
	m->source_table = get_text(tup, desc, 5);
	d = SPI_getbinval(tup, desc, 6, &isnull);
	ash_mapping_set_column_map(m, isnull ? NULL : DatumGetJsonbPCopy(d));
	m->tenant_column = get_text(tup, desc, 7);
	m->tenant_function_sig = get_text(tup, desc, 8);
	m->tenant_function = ash_function_resolve(m->tenant_function_sig);
	m->tenant_strategy = ash_parse_tenant_strategy(get_text(tup, desc, 9));
	if ((s = get_text(tup, desc, 10)) != NULL)
		m->tenant_schema_format = s;
	m->tenant_scope_function_sig = get_text(tup, desc, 11);
	m->tenant_scope_function = ash_function_resolve(m->tenant_scope_function_sig);
	m->sensitive = get_names(tup, desc, 12, "sensitive");
	m->encrypted = get_names(tup, desc, 13, "encrypted");
	m->skip = get_names(tup, desc, 14, "skip");
	m->on_truncate = ash_parse_on_truncate(get_text(tup, desc, 15));
	m->on_schema_change = ash_parse_on_schema_change(get_text(tup, desc, 16));
	m->upsert_identity = get_text(tup, desc, 17);
	m->history_strategy = ash_parse_history_strategy(get_text(tup, desc, 18));
	m->history_business_key = get_names(tup, desc, 19, "history_business_key");
	if ((s = get_text(tup, desc, 20)) != NULL)
		m->history_valid_from_lsn_column = s;
	if ((s = get_text(tup, desc, 21)) != NULL)
		m->history_valid_to_lsn_column = s;
	m->history_valid_from_ts_column = get_text(tup, desc, 22);
	m->history_valid_to_ts_column = get_text(tup, desc, 23);
	m->history_current_column = get_text(tup, desc, 24);
	m->append_log = get_bool(tup, desc, 25);
	d = SPI_getbinval(tup, desc, 26, &isnull);
	if (!isnull)
	{
		Jsonb	   *jb = DatumGetJsonbP(d);

		for (int i = 0; i < ASH_APPEND_NAXES; i++)
		{
			JsonbValue	key;
			JsonbValue *v;

			key.type = jbvString;
			key.val.string.val = (char *) append_axis_names[i];
			key.val.string.len = strlen(append_axis_names[i]);
			v = findJsonbValueFromContainer(&jb->root, JB_FOBJECT, &key);
			if (v != NULL && v->type == jbvString &&
				(v->val.string.len != key.val.string.len ||
				 strncmp(v->val.string.val, key.val.string.val, key.val.string.len) != 0))
				m->append_columns[i] = pnstrdup(v->val.string.val, v->val.string.len);
		}
	}
	m->snapshot_provenance = get_bool(tup, desc, 27);
	return m;
}

AshMappingSink *
ash_mapping_sink_load(const char *sink_name, bool missing_ok, bool lock)
{
	MemoryContext outer = CurrentMemoryContext;
	AshMappingSink *sink = NULL;
	Oid			argtypes[1] = {TEXTOID};
	Datum		values[1];
	int			rc;

	values[0] = CStringGetTextDatum(sink_name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	rc = SPI_execute_with_args(lock ?
							   "SELECT sink_name, sink_kind, initial_state, owner::pg_catalog.oid, config_version "
							   "FROM ash_replicant.sinks WHERE sink_name OPERATOR(pg_catalog.=) $1 FOR UPDATE" :
							   "SELECT sink_name, sink_kind, initial_state, owner::pg_catalog.oid, config_version "
							   "FROM ash_replicant.sinks WHERE sink_name OPERATOR(pg_catalog.=) $1",
							   1, argtypes, values, NULL, !lock, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading sink failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 1)
	{
		HeapTuple	tup = SPI_tuptable->vals[0];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext old = MemoryContextSwitchTo(outer);
		char	   *kind;
		bool		isnull;

		sink = palloc0(sizeof(AshMappingSink));
		sink->sink_name = get_text(tup, desc, 1);
		kind = get_text(tup, desc, 2);
		sink->append_log = str_eq(kind, "append_log");
		sink->initial_state = get_text(tup, desc, 3);
		sink->owner = get_oid(tup, desc, 4);
		sink->config_version = DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
		MemoryContextSwitchTo(old);
	}
	SPI_finish();

	if (sink == NULL && !missing_ok)
		ash_reject(ERRCODE_UNDEFINED_OBJECT, MAPPING_STAGE, "config_invalid",
				   "sink %s does not exist", qname(sink_name));
	return sink;
}

static List *
load_mappings(const char *where, Oid argtype, Datum arg)
{
	MemoryContext outer = CurrentMemoryContext;
	List	   *result = NIL;
	int			rc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	rc = SPI_execute_with_args(psprintf("SELECT " RESOURCE_COLUMNS
										" FROM ash_replicant.resources WHERE %s"
										" ORDER BY resource_id", where),
							   1, &argtype, &arg, NULL, true, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading mappings failed: %s", SPI_result_code_string(rc));
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(outer);

		result = lappend(result, mapping_from_row(SPI_tuptable->vals[i], SPI_tuptable->tupdesc));
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	return result;
}

AshMappingSpec *
ash_mapping_load(int64 resource_id)
{
	List	   *l = load_mappings("resource_id OPERATOR(pg_catalog.=) $1", INT8OID,
								  Int64GetDatum(resource_id));

	return l == NIL ? NULL : (AshMappingSpec *) linitial(l);
}

List *
ash_mapping_load_sink(const char *sink_name)
{
	return load_mappings("sink_name OPERATOR(pg_catalog.=) $1", TEXTOID,
						 CStringGetTextDatum(sink_name));
}
