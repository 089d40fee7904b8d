/*-------------------------------------------------------------------------
 *
 * config.h
 *	  A pipeline's configuration as read from the catalogs at start.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CONFIG_H
#define ASH_CONFIG_H

#include "nodes/pg_list.h"

typedef struct AshColumnRename
{
	char	   *source;
	char	   *target;
} AshColumnRename;

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
	Oid			tenant_function;
	char	   *tenant_strategy;	/* NULL, "attribute", "context" */
	char	   *tenant_schema_format;
	char	   *on_truncate;
	char	   *on_schema_change;
	char	   *upsert_identity;	/* NULL = primary key */
	char	   *history_strategy;
	bool		append_log;
	bool		snapshot_provenance;
} AshMapping;

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
	bool		streaming;
	bool		binary_transfer;
	int64		max_inflight_lag;
	int			max_command_retries;
	AshCensusOptions census;

	List	   *mappings;		/* AshMapping * */
} AshPipelineConfig;

/* Load the configuration of one sink (in CurrentMemoryContext). */
extern AshPipelineConfig *ash_config_load(const char *sink_name);

/* The mapping of a source table, or NULL. */
extern AshMapping *ash_config_find_mapping(AshPipelineConfig *cfg,
										   const char *nspname, const char *relname);

/* Is schema.table listed in ignored_sources? */
extern bool ash_config_is_ignored(AshPipelineConfig *cfg,
								  const char *nspname, const char *relname);

/* Target column a source column maps to (after column_map), NULL if skipped. */
extern const char *ash_mapping_target_column(AshMapping *m, const char *source_col);

extern bool ash_list_contains_str(List *l, const char *s);

#endif							/* ASH_CONFIG_H */
