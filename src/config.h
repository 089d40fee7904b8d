/*-------------------------------------------------------------------------
 *
 * config.h
 *	  A pipeline's configuration as read from the catalogs at start.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CONFIG_H
#define ASH_CONFIG_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

typedef struct AshColumnRename
{
	char	   *source;
	char	   *target;
} AshColumnRename;

/*
 * Append-log structural columns, indexed in the order of AshAppendAxis
 * (mapping_validate.h; config.c asserts the correspondence).  The first
 * ASH_APPEND_COL_NIDENTITY form the identity of an event.
 */
#define ASH_APPEND_COL_SOURCE_SYSTEM_ID	0
#define ASH_APPEND_COL_SOURCE_DATABASE	1
#define ASH_APPEND_COL_SLOT_NAME		2
#define ASH_APPEND_COL_COMMIT_LSN		3
#define ASH_APPEND_COL_ORDINAL			4
#define ASH_APPEND_COL_OPERATION		5
#define ASH_APPEND_COL_ORIGIN			6
#define ASH_APPEND_COL_SNAPSHOT_ATTEMPT	7
#define ASH_APPEND_COL_MESSAGE_PREFIX	8
#define ASH_APPEND_COL_MESSAGE_CONTENT	9
#define ASH_APPEND_COL_COUNT			10
#define ASH_APPEND_COL_NIDENTITY		5

typedef struct AshMapping
{
	int64		resource_id;
	Oid			target_relid;
	char	   *source_schema;
	char	   *source_table;
	List	   *renames;		/* AshColumnRename * (column_map) */
	List	   *skip;			/* char * source column names */
	List	   *sensitive;
	List	   *encrypted;
	char	   *tenant_column;
	/*
	 * The functions by their stored signatures (qualname.h), resolved at
	 * load: an OID is InvalidOid where the signature is NULL or names no
	 * function now (dropped: the *_sig is set).
	 */
	Oid			tenant_function;
	char	   *tenant_function_sig;
	char	   *tenant_strategy;	/* NULL, "attribute", "context" */
	char	   *tenant_schema_format;
	Oid			tenant_scope_function;	/* setof text: every tenant scope */
	char	   *tenant_scope_function_sig;
	char	   *on_truncate;
	char	   *on_schema_change;
	char	   *upsert_identity;	/* NULL = primary key */
	char	   *history_strategy;
	bool		append_log;
	bool		snapshot_provenance;
	bool		shared_target;	/* another sink maps the target too (at load) */

	/* SCD2 (history_strategy = 'scd2'); target column names, defaults applied */
	List	   *history_business_key;	/* char *, SOURCE column names */
	char	   *history_valid_from_lsn_column;
	char	   *history_valid_to_lsn_column;
	char	   *history_valid_from_ts_column;	/* NULL: none */
	char	   *history_valid_to_ts_column; /* NULL: none */
	char	   *history_current_column; /* NULL: none */

	/* append log: effective structural column names (ASH_APPEND_COL_*) */
	char	   *append_columns[ASH_APPEND_COL_COUNT];
} AshMapping;

/* A logical-message route (ash_replicant.message_routes). */
typedef struct AshMessageRoute
{
	char	   *prefix;			/* never logged */
	Oid			target;			/* table target, or InvalidOid */
	Oid			function;		/* function target, or InvalidOid */
	char	   *function_sig;	/* its stored signature; set, function invalid: dropped */
	Interval	retention;
	int64		retention_us;	/* approximate, for horizon arithmetic */
} AshMessageRoute;

typedef struct AshCensusOptions
{
	bool		enabled;
	int			interval_ms;
	double		jitter_ratio;
	int			timeout_ms;
	int			max_consecutive_faults;
} AshCensusOptions;

typedef struct AshPipelineConfig
{
	char	   *sink_name;
	char	   *slot_name;
	char	   *sink_kind;
	char	   *initial_state;	/* NULL, "go_forward", "snapshot" */
	List	   *ignored_sources;	/* List of List of char* (schema, table) */
	List	   *ignored_prefixes;	/* char * */
	int			batch_max_transactions;
	Oid			owner;
	int64		config_version;
	int64		start_generation;

	char	   *connection;		/* never logged */
	char	   *decoder;
	char	   *publication;
	char	   *source_system_identifier;
	char	   *source_database;
	char	   *snapshot;		/* "off", "v1", "incremental" */
	int			chunk_rows;		/* incremental: rows per chunk */
	int			max_pending_chunks; /* incremental: chunk windows open at once */
	bool		streaming;
	bool		binary_transfer;
	bool		failover;		/* FAILOVER slot (source 17+) */
	bool		origin_none;	/* skip source transactions with an origin */
	int64		max_inflight_lag;
	int			max_command_retries;
	AshCensusOptions census;

	/* wal2json */
	List	   *tables;			/* List of List of char* (schema, table), as
								 * configured */
	bool		allow_keyless_tables;
	int			schema_check_interval_ms;

	/* pglogical */
	char	   *replication_sets;	/* text[] literal, as configured */

	List	   *mappings;		/* AshMapping * */
	List	   *message_routes; /* AshMessageRoute *, by prefix */

	/*
	 * The first route rule the loaded configuration breaks (route_rules.h,
	 * ASH_ROUTE_RULES_WORKER), NULL if none: the worker halts with it
	 * before streaming.
	 */
	const char *routes_reason;
	const char *routes_context;
} AshPipelineConfig;

/* Load the configuration of one sink (in CurrentMemoryContext). */
extern AshPipelineConfig *ash_config_load(const char *sink_name);

/*
 * Would a snapshot of m retire, or a TRUNCATE under m delete or close, rows
 * of a target another sink writes too (shared_target as loaded;
 * ash_mapping_target_claim in mapping_validate.h)?
 */
extern bool ash_config_retires_shared(const AshMapping *m);
extern bool ash_config_truncates_shared(const AshMapping *m);

/* The mapping of a source table, or NULL. */
extern AshMapping *ash_config_find_mapping(AshPipelineConfig *cfg,
										   const char *nspname, const char *relname);
/* The same in a list of AshMapping * (a doctor's, a pipeline's). */
extern AshMapping *ash_mappings_find(List *mappings, const char *nspname,
									 const char *relname);

/* Is schema.table listed in ignored_sources? */
extern bool ash_config_is_ignored(AshPipelineConfig *cfg,
								  const char *nspname, const char *relname);

/* Target column a source column maps to (after column_map), NULL if skipped. */
extern const char *ash_mapping_target_column(AshMapping *m, const char *source_col);

/* text[] datum -> List of char * (NULL elements left out) */
extern List *ash_text_array_to_list(Datum d, bool isnull);

extern bool ash_list_contains_str(List *l, const char *s);

/* sink_kind = 'append_log'? */
extern bool ash_config_is_append_log(AshPipelineConfig *cfg);

#endif							/* ASH_CONFIG_H */
