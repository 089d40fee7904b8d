/*-------------------------------------------------------------------------
 *
 * table_stats.h
 *	  Adding a batch's per-table counts to their ash_replicant.table_stats
 *	  rows in place.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_TABLE_STATS_H
#define ASH_TABLE_STATS_H

#include "datatype/timestamp.h"

/*
 * Add counts (inserted, updated, deleted, truncated) to the existing row of
 * (sink_name, target, tenant), in the caller's transaction.  False when
 * there is no such row, or it cannot be updated in place: the caller
 * writes it through SQL.
 */
extern bool ash_table_stats_add(const char *sink_name, const char *target,
								const char *tenant, Oid target_table,
								const int64 counts[4], TimestampTz commit_time,
								TimestampTz applied_at);

#endif							/* ASH_TABLE_STATS_H */
