/*-------------------------------------------------------------------------
 *
 * mapping_validate.h
 *	  One mapping (a row of ash_replicant.resources) and its registration
 *	  validation against the destination catalogs.
 *
 * NOTES
 *	  The same module serves ash_replicant_map_table (registration) and the
 *	  census (re-validation of stored mappings inside a pipeline worker), so
 *	  that a mapping that would be refused today is also detected when it
 *	  drifts later.  Validation only looks at what is knowable on the
 *	  destination: the option grammar and the target table's shape.  Source
 *	  columns are judged at activation (coverage preflight).
 *
 *	  Names in an AshMappingSpec:
 *		- sensitive, encrypted, skip, tenant_column, history_business_key and
 *		  the keys of column_map are SOURCE column names;
 *		- the values of column_map, the history_* columns, the append_*
 *		  structural columns and upsert_identity are TARGET names.
 *	  A source column that column_map does not list maps to the target column
 *	  of the same name (ash_mapspec_target_column).
 *
 *	  ash_mapping_validate raises ash_reject(..., "mapping", <reason>, ...)
 *	  on the first violation; it performs no writes and uses only the
 *	  syscache/relcache (no SPI), so it runs in any transaction.  The loaders
 *	  use SPI and must run inside a transaction with an active snapshot.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_MAPPING_VALIDATE_H
#define ASH_MAPPING_VALIDATE_H

#include "nodes/pg_list.h"
#include "utils/array.h"
#include "utils/jsonb.h"
#include "utils/relcache.h"

typedef enum AshOnTruncate
{
	ASH_TRUNCATE_HALT,
	ASH_TRUNCATE_MIRROR,
	ASH_TRUNCATE_CLOSE,
	ASH_TRUNCATE_APPEND
} AshOnTruncate;

typedef enum AshOnSchemaChange
{
	ASH_SCHEMA_HALT_DESTRUCTIVE,
	ASH_SCHEMA_IGNORE
} AshOnSchemaChange;

typedef enum AshTenantStrategy
{
	ASH_TENANT_NONE,
	ASH_TENANT_ATTRIBUTE,
	ASH_TENANT_CONTEXT
} AshTenantStrategy;

typedef enum AshHistoryStrategy
{
	ASH_HISTORY_SCD1,
	ASH_HISTORY_SCD2
} AshHistoryStrategy;

/* The structural columns of an append-log target (docs/history-and-events.md). */
typedef enum AshAppendAxis
{
	ASH_APPEND_SOURCE_SYSTEM_ID,
	ASH_APPEND_SOURCE_DATABASE,
	ASH_APPEND_SLOT_NAME,
	ASH_APPEND_COMMIT_LSN,
	ASH_APPEND_ORDINAL,
	ASH_APPEND_OPERATION,
	ASH_APPEND_ORIGIN,
	ASH_APPEND_SNAPSHOT_ATTEMPT,
	ASH_APPEND_MESSAGE_PREFIX,
	ASH_APPEND_MESSAGE_CONTENT
} AshAppendAxis;

#define ASH_APPEND_NAXES		10
#define ASH_APPEND_NIDENTITY	5	/* the first five axes form the identity */

/* The names of the snapshot-provenance columns (docs/snapshots.md). */
#define ASH_PROVENANCE_FINGERPRINT_COLUMN	"replica_fingerprint"
#define ASH_PROVENANCE_SEEN_COLUMN			"replica_seen_attempt"

/* One source column -> target column pair of column_map. */
typedef struct AshColumnPair
{
	char	   *source;
	char	   *target;
} AshColumnPair;

/* What a mapping needs to know about its sink. */
typedef struct AshMappingSink
{
	char	   *sink_name;
	bool		append_log;		/* sink_kind = 'append_log' */
	char	   *initial_state;	/* 'go_forward', 'snapshot' or NULL */
	Oid			owner;			/* sinks.owner: the role that writes targets */
	int64		config_version;
} AshMappingSink;

/* One mapping, as stored in ash_replicant.resources. */
typedef struct AshMappingSpec
{
	int64		resource_id;	/* 0 until stored */
	char	   *sink_name;
	Oid			target;			/* InvalidOid: not given */
	char	   *source_schema;
	char	   *source_table;

	List	   *column_map;		/* of AshColumnPair *, explicit pairs only */
	Jsonb	   *column_map_jsonb;	/* as given (NULL: none) */

	char	   *tenant_column;	/* source column or NULL */
	Oid			tenant_function;	/* or InvalidOid */
	char	   *tenant_function_sig;	/* loaded: stored signature, or NULL */
	AshTenantStrategy tenant_strategy;
	char	   *tenant_schema_format;	/* never NULL; default "%s" */
	Oid			tenant_scope_function;	/* or InvalidOid */
	char	   *tenant_scope_function_sig;	/* loaded: stored signature, or NULL */

	List	   *sensitive;		/* of char *, source columns */
	List	   *encrypted;		/* of char *, source columns */
	List	   *skip;			/* of char *, source columns */

	AshOnTruncate on_truncate;
	AshOnSchemaChange on_schema_change;
	char	   *upsert_identity;	/* index/constraint name or NULL (PK) */

	AshHistoryStrategy history_strategy;
	List	   *history_business_key;	/* of char *, source columns */
	char	   *history_valid_from_lsn_column;
	char	   *history_valid_to_lsn_column;
	char	   *history_valid_from_ts_column;
	char	   *history_valid_to_ts_column;
	char	   *history_current_column;

	bool		append_log;
	char	   *append_columns[ASH_APPEND_NAXES];	/* renames; NULL = default */

	bool		snapshot_provenance;

	/* Filled by ash_mapping_validate. */
	Oid			identity_index; /* conflict target (PK, upsert_identity,
								 * SCD2 version index or append index) */
} AshMappingSpec;

/*
 * Names for messages: always double-quoted, embedded quotes doubled
 * ("pan", "Unit Price", "a""b"); a relation as "schema"."table" or
 * "relation with OID n" when it no longer exists.
 */
extern char *ash_mapping_qualified_relname(Oid relid);

/* Default structural column name of an append axis. */
extern const char *ash_append_axis_default(AshAppendAxis axis);

/* Effective structural column name of an axis in m (rename or default). */
extern const char *ash_mapping_append_column(const AshMappingSpec *m, AshAppendAxis axis);

/* Option grammar: text -> enum; raise config_invalid on anything else. */
extern AshOnTruncate ash_parse_on_truncate(const char *value);
extern AshOnSchemaChange ash_parse_on_schema_change(const char *value);
extern AshTenantStrategy ash_parse_tenant_strategy(const char *value);
extern AshHistoryStrategy ash_parse_history_strategy(const char *value);
extern const char *ash_on_truncate_name(AshOnTruncate v);
extern const char *ash_on_schema_change_name(AshOnSchemaChange v);
extern const char *ash_tenant_strategy_name(AshTenantStrategy v);	/* NULL for none */
extern const char *ash_history_strategy_name(AshHistoryStrategy v);

/*
 * A freshly zeroed mapping with every default of docs/sql-api-mapping.md applied
 * (source_schema/source_table stay NULL until the target is known).
 */
extern AshMappingSpec *ash_mapping_new(void);

/*
 * Parse column_map (a jsonb object of string values) into m->column_map;
 * raise config_invalid for any other shape.  NULL clears the map.
 */
extern void ash_mapping_set_column_map(AshMappingSpec *m, Jsonb *column_map);

/*
 * Convert a text[] option into a List of char *; NULL elements, empty
 * names and duplicates raise config_invalid naming the option.  A NULL
 * array yields NIL.
 */
extern List *ash_mapping_name_list(ArrayType *arr, const char *option);

/* Fill source_schema/source_table from the target where they are NULL. */
extern void ash_mapping_default_source(AshMappingSpec *m);

/*
 * Would row-level security of relid filter what owner reads and writes
 * there?  The worker writes as the sink owner with row_security off and
 * FORCE ROW LEVEL SECURITY not applied to a table's owner
 * (docs/sql-api-mapping.md, "Row-level security"): so only when the table
 * has it enabled and owner neither owns the table nor bypasses it
 * (BYPASSRLS, a superuser).
 */
extern bool ash_rls_applies_to_owner(Relation rel, Oid owner);

/*
 * Validate m against its sink and the destination catalogs: every rule of
 * docs/sql-api-mapping.md, docs/history-and-events.md, docs/snapshots.md that is knowable without the source.
 * Raises ash_reject on the first violation; on success sets
 * m->identity_index.
 */
extern void ash_mapping_validate(AshMappingSpec *m, const AshMappingSink *sink);

/*
 * The same rules judged again in a pipeline: a violation halts census_drift
 * ("mapping of <table>: <reason> (<context>)"); withhold: m's target is a
 * tenant's table, the context is left out (it would name the tenant).
 */
extern void ash_mapping_recheck(AshMappingSpec *m, const AshMappingSink *sink,
								bool withhold);

/*
 * What a mapping does to the rows of its target that no change of its own
 * sink wrote, by option name: "snapshot_provenance" (a snapshot retires
 * the rows it did not see; under context tenancy only in its own scopes'
 * tables, so not counted), "on_truncate" (mirror or close: every row), or
 * NULL.  A target of such a mapping is its sink's alone: another sink's
 * rows in it would be deleted or closed (docs/sql-api-mapping.md).
 */
extern const char *ash_mapping_target_claim(bool provenance, const char *tenant_strategy,
											const char *on_truncate);

/*
 * Refuse m (a mapping being registered, or one stored, for doctor) when
 * another sink maps its target and either mapping has a claim on it
 * (snapshot_provenance_invalid, or config_invalid for on_truncate); or
 * when m is a context mapping and another (of any sink) of another
 * template of the same table name has a tenant_schema_format that can name
 * a schema m's can (config_invalid: a tenant of each would resolve to one
 * table).  lock:
 * serialize registrations of one target (a transaction lock), as those of
 * one sink serialize on its row.  Needs SPI.
 */
extern void ash_mapping_check_shared_target(AshMappingSpec *m, bool lock);

/* Column resolution helpers (names are compared exactly). */
extern const char *ash_mapspec_target_column(const AshMappingSpec *m, const char *source_column);
extern bool ash_mapspec_is_skipped(const AshMappingSpec *m, const char *source_column);
extern bool ash_mapspec_is_sensitive(const AshMappingSpec *m, const char *source_column);
extern bool ash_mapspec_is_encrypted(const AshMappingSpec *m, const char *source_column);

/*
 * Loaders (SPI; results are allocated in the caller's memory context).
 *
 * ash_mapping_sink_load: the sink row; missing_ok decides between NULL and
 * an error for an unknown sink; lock takes FOR UPDATE on the row.
 * ash_mapping_load: one resources row by id (NULL if absent).
 * ash_mapping_load_sink: every mapping of a sink, ordered by resource_id.
 */
extern AshMappingSink *ash_mapping_sink_load(const char *sink_name, bool missing_ok, bool lock);
extern AshMappingSpec *ash_mapping_load(int64 resource_id);
extern List *ash_mapping_load_sink(const char *sink_name);

#endif							/* ASH_MAPPING_VALIDATE_H */
