/*-------------------------------------------------------------------------
 *
 * source_columns.h
 *	  Source columns added while a table is mirrored (source_columns.c;
 *	  docs/reasons.md#source_column_added).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SOURCE_COLUMNS_H
#define ASH_SOURCE_COLUMNS_H

#include "config.h"
#include "relmap.h"

/*
 * What a description judged by ash_source_columns_judge came with: the
 * stream; the stream, for a table an incremental snapshot still copies (a
 * mapped column recorded and not sent stays in the record, for the
 * chunks: ash_source_columns_judge_dropped); an incremental chunk; a
 * snapshot copying the whole table (v1), which writes every row (recorded
 * without judging).
 */
typedef enum AshColumnsFrom
{
	ASH_COLUMNS_STREAM,
	ASH_COLUMNS_STREAM_COPYING,
	ASH_COLUMNS_CHUNK,
	ASH_COLUMNS_WHOLE_COPY
} AshColumnsFrom;

/*
 * Judge the source columns that rel's description writes against those
 * recorded for its table (none recorded yet: against the columns known
 * before the description, rel->before_names), then record them; halts
 * source_column_added.
 * Called once per description, before its first change is applied, SPI
 * connected, in the destination transaction that applies it (the record
 * commits with the rows).  from: what the description came with (above).
 */
extern void ash_source_columns_judge(AshApplyRel *rel, const AshPipelineConfig *cfg,
									 AshColumnsFrom from);

/*
 * A session's first description of a table an incremental snapshot copies
 * (desc: the source's catalog now) against the table's record: a mapped
 * column recorded and missing from it was dropped since, and halts
 * source_column_missing naming target_name (a quoted qualified name),
 * unless the mapping has on_schema_change = 'ignore'.  SPI connected;
 * writes nothing.
 */
extern void ash_source_columns_judge_dropped(const AshPipelineConfig *cfg, AshMapping *map,
											 const AshRelation *desc,
											 const char *target_name);

/*
 * After an error: a description of a table with no record that halted
 * source_column_added leaves the table a record of the columns it was
 * judged against when record (the halt is that one), so that the halt can
 * be acknowledged and a restart halts again; forgotten either way.
 * Outside a transaction.
 */
extern void ash_source_columns_halted(const AshPipelineConfig *cfg, bool record);

#endif							/* ASH_SOURCE_COLUMNS_H */
