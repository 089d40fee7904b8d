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
 * Judge the source columns that rel's description writes against those
 * recorded for its table (none recorded yet: against the columns known
 * before the description, rel->before_names), then record them; halts
 * source_column_added.
 * Called once per description, before its first change is applied, SPI
 * connected, in the destination transaction that applies it (the record
 * commits with the rows).  whole_copy: a snapshot copying the whole table
 * (v1), which writes every row, records without judging.
 */
extern void ash_source_columns_judge(AshApplyRel *rel, const AshPipelineConfig *cfg,
									 bool whole_copy);

/*
 * After an error: a description of a table with no record that halted
 * source_column_added leaves the table a record of the columns it was
 * judged against when record (the halt is that one), so that the halt can
 * be acknowledged and a restart halts again; forgotten either way.
 * Outside a transaction.
 */
extern void ash_source_columns_halted(const AshPipelineConfig *cfg, bool record);

#endif							/* ASH_SOURCE_COLUMNS_H */
