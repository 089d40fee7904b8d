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

#include "checkpoint.h"
#include "config.h"
#include "coverage.h"
#include "source_catalog.h"

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
 * At a session's start: the columns key's publication records hold now,
 * per mapped table, the baseline a table without a record is judged
 * against (watched false: none kept).
 */
extern void ash_column_record_note_session(AshCheckpointKey *key, bool watched);

/*
 * The census's judgement of the source's columns (described: AshSourceRel
 * *, as read on conn; mappings: AshMapping *, coverage passed) against each
 * mapped table's record, or its session baseline: a written column it
 * lacks, into a target holding rows, halts source_column_added -- once the
 * stream has passed (passed: the position it received and applied
 * everything before) the source position read after the catalog; until
 * then the finding waits, kept across runs.  A table without a record
 * whose columns match its baseline gets the baseline as its record once
 * the stream has passed that position.  Outside a transaction.
 */
extern void ash_column_record_census(AshPipelineConfig *cfg, AshConn *conn, List *described,
									 List *mappings, XLogRecPtr passed);

#endif							/* ASH_COLUMN_RECORD_H */
