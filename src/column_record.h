/*-------------------------------------------------------------------------
 *
 * column_record.h
 *	  The record of the source columns feeding each mapped target
 *	  (ash_replicant.source_columns): read, compared, judged.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_COLUMN_RECORD_H
#define ASH_COLUMN_RECORD_H

#include "config.h"
#include "coverage.h"

/*
 * The record of source table nspname.relname: returns whether there is
 * one; *rec, *nrec its column names, *acknowledged its mark (the operator
 * made the rows agree with an addition).  SPI connected.
 */
extern bool ash_column_record_read(const AshPipelineConfig *cfg, const char *nspname,
								   const char *relname, char ***rec, int *nrec,
								   bool *acknowledged);

/*
 * Write the record of source table nspname.relname: its columns
 * names[0..n), acknowledged its mark.  SPI connected, in the destination
 * transaction the record belongs with.
 */
extern void ash_column_record_write(const AshPipelineConfig *cfg, const char *nspname,
									const char *relname, const char *const *names, int n,
									bool acknowledged);

/*
 * The names[0..n) that known[0..nknown) lacks, as indexes into names in
 * *added (room for n); returns how many.
 */
extern int	ash_column_record_lacking(const char *const *names, int n, char *const *known,
									  int nknown, int *added);

/*
 * Did the columns names[added[0..nadded)] added at the source leave rows
 * of target_name (a quoted qualified name) without their value -- does it
 * hold a row?  Under context tenancy the rows live in the tenants' tables:
 * yes.  Returns the columns as a list for the halt, or NULL.  SPI
 * connected.
 */
extern char *ash_column_record_unfilled(const char *target_name, bool context_tenancy,
										const char *const *names, const int *added,
										int nadded);

/* Halt source_column_added for source table nspname.relname. */
extern void ash_column_record_halt_added(const char *nspname, const char *relname,
										 const char *columns) pg_attribute_noreturn();

/*
 * The census's judgement of mapped table m as the source's catalogs
 * describe it now (src: the columns the decoder sends), against its
 * record -- or, with none yet, against baseline[0..nbaseline) (the columns
 * the publication record held when the session started; NULL: not known),
 * *unrecorded set: the written columns it lacks when they leave rows of
 * the target without their value (ash_column_record_unfilled), else NULL.
 * An acknowledged record or an append log: NULL.  After coverage passed
 * for the table; SPI connected, in a destination transaction; writes
 * nothing.  The census halts only once the stream has passed the addition
 * (census.c).
 */
extern char *ash_column_record_census(const AshPipelineConfig *cfg, const AshMapping *m,
									  const AshSourceTable *src, char *const *baseline,
									  int nbaseline, bool *unrecorded);

#endif							/* ASH_COLUMN_RECORD_H */
