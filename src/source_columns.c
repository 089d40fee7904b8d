/*-------------------------------------------------------------------------
 *
 * source_columns.c
 *	  Source columns added while a table is mirrored.
 *
 * NOTES
 *	  ALTER TABLE ... ADD COLUMN gives the rows that exist then a value --
 *	  the column's default, computed once (a volatile one by rewriting the
 *	  table), or NULL -- and writes no change any decoder sends.  A mirror
 *	  that maps the column (its target column added after a halt
 *	  source_column_unmapped, or ahead of the source) gets the values of
 *	  rows changed later from their changes, and keeps for every other row
 *	  whatever its target column held: the target's default, or NULL.
 *	  Nothing would ever say so but verify.
 *
 *	  So each mapped table's record in ash_replicant.source_columns names
 *	  the source columns its target is fed, as the last description
 *	  applied (or copied) named them.  A later description naming a
 *	  written column the record lacks is judged before its first change is
 *	  applied: a target without rows takes it (no row predates the
 *	  column); one with rows halts source_column_added, naming the
 *	  columns.  Which value those rows hold at the source cannot be told
 *	  from here: not from the source's rows now (changes made since the
 *	  column was added are there, and are still to come down the stream),
 *	  nor from its catalogs (a volatile default fills the rows by a rewrite
 *	  and leaves no trace once the default is dropped).  The operator, who
 *	  knows, makes the target's rows agree (nothing to do for a column
 *	  added without a default) or copies the table again, and acknowledges
 *	  (ash_replicant_acknowledge_column_added, docs/reasons.md): that marks
 *	  the record, and the next description adding columns to it is taken
 *	  as it is (one with fewer, delivered first -- a change of the table
 *	  from before the addition, re-delivered -- leaves the mark).
 *
 *	  The census judges the source's columns as its catalog holds them
 *	  against the record by the same rules (column_record.c): a table that
 *	  sees no change after the addition brings no description, and would
 *	  stay mirrored wrong, healthy, for as long as it is idle.
 *
 *	  The record moves in the transaction that applies the description, so
 *	  it is exactly as far as the rows.  A v1 snapshot's copy writes every
 *	  row of the table: it records what it copied without judging.  An
 *	  incremental chunk writes some rows only, and is judged like the
 *	  stream (the rows of earlier chunks lack the column).  A session's
 *	  first description of a table it copies in chunks is the source's
 *	  catalog then: a mapped column the record names and it lacks was
 *	  dropped since the record's description -- maybe in a session that
 *	  ended before anything described the table again (its chunk read,
 *	  naming the column, failed), so no description of this session knew
 *	  it, and the publication record read at its start does not either.
 *	  The rows of the earlier chunks hold the column's values, the next
 *	  chunks would not: that halts source_column_missing
 *	  (ash_source_columns_judge_dropped), and until the table is copied
 *	  the stream leaves such a column in the record (its description may
 *	  come first).  The stream's descriptions are not judged so: a chunk
 *	  may have recorded columns of the catalog ahead of the stream.  An
 *	  append log is history -- an event keeps the columns it had -- and is
 *	  not judged.
 *	  A table with no record yet (no change of it applied: mapped since,
 *	  or recorded first after the update to 1.7.0) has its first recorded
 *	  description judged against the source's columns at a committed point
 *	  before it (relmap.c, AshApplyRel.before_names): the previous
 *	  description's, or the publication record's when the description came
 *	  in a transaction committed after the record was read.  A column added
 *	  after that point gave the rows the target already holds (a go-forward
 *	  target agrees with the source when the pipeline starts) a value no
 *	  change carries, as one added after a recorded description did.  One
 *	  in the record (added before the pipeline started) is not judged; with
 *	  no such point known (a transaction from before the record, wal2json's
 *	  first description) the description is taken as the record.  Such a
 *	  halt gives the table a record of the columns it was judged against,
 *	  once its transaction is rolled back (ash_source_columns_halted):
 *	  without one the record read at the next start would hold the column,
 *	  and a restart would take the change unjudged.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "column_record.h"
#include "coverage.h"
#include "errors.h"
#include "source_columns.h"
#include "spi_util.h"

/* The source column written into rel->cols[c]. */
static const char *
written_name(AshApplyRel *rel, int c)
{
	return rel->remote.cols[rel->cols[c].remote_idx].name;
}

/*
 * A table with no record whose description halted: the record it gets once
 * the halted transaction is rolled back (ash_source_columns_halted), in
 * TopMemoryContext.
 */
static char *halted_nspname = NULL;
static char *halted_relname = NULL;
static char **halted_columns = NULL;
static int	halted_ncolumns = 0;

static void
note_halted(AshApplyRel *rel)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

	halted_nspname = pstrdup(rel->remote.nspname);
	halted_relname = pstrdup(rel->remote.relname);
	halted_columns = palloc(sizeof(char *) * Max(rel->before_natts, 1));
	halted_ncolumns = 0;
	for (int b = 0; b < rel->before_natts; b++)
		if (ash_mapping_target_column(rel->map, rel->before_names[b]) != NULL)
			halted_columns[halted_ncolumns++] = pstrdup(rel->before_names[b]);
	MemoryContextSwitchTo(old);
}

void
ash_source_columns_halted(const AshPipelineConfig *cfg, bool record)
{
	char	  **rec;
	int			nrec;
	bool		acknowledged;

	if (halted_nspname == NULL)
		return;
	if (record)
	{
		ash_spi_transaction_begin();
		if (!ash_column_record_read(cfg, halted_nspname, halted_relname, &rec, &nrec,
									&acknowledged))
			ash_column_record_write(cfg, halted_nspname, halted_relname,
									(const char *const *) halted_columns, halted_ncolumns,
									false);
		ash_spi_transaction_end();
	}
	for (int c = 0; c < halted_ncolumns; c++)
		pfree(halted_columns[c]);
	pfree(halted_columns);
	pfree(halted_nspname);
	pfree(halted_relname);
	halted_nspname = halted_relname = NULL;
	halted_columns = NULL;
	halted_ncolumns = 0;
}

void
ash_source_columns_judge_dropped(const AshPipelineConfig *cfg, AshMapping *map,
								 const AshRelation *desc, const char *target_name)
{
	StringInfoData dropped;
	char	  **rec;
	int			nrec;
	bool		acknowledged;

	if (map->append_log || strcmp(map->on_schema_change, "ignore") == 0)
		return;
	if (!ash_column_record_read(cfg, desc->nspname, desc->relname, &rec, &nrec, &acknowledged))
		return;
	initStringInfo(&dropped);
	for (int r = 0; r < nrec; r++)
	{
		bool		still = false;

		for (int i = 0; i < desc->natts && !still; i++)
			still = strcmp(desc->cols[i].name, rec[r]) == 0;
		if (!still && ash_mapping_target_column(map, rec[r]) != NULL)
			ash_append_name_list(&dropped, rec[r]);
	}
	if (dropped.len > 0)
		ash_halt_on(target_name, "source_column_missing",
					"table %s.%s dropped mapped columns: %s",
					quote_identifier(desc->nspname), quote_identifier(desc->relname),
					dropped.data);
	pfree(dropped.data);
}

void
ash_source_columns_judge(AshApplyRel *rel, const AshPipelineConfig *cfg, AshColumnsFrom from)
{
	const char **written;
	int		   *added;
	int			nadded = 0;
	int			nwritten = rel->ncols;
	char	  **rec;
	int			nrec;
	bool		found;
	bool		acknowledged = false;

	if (rel->map->append_log)
	{
		rel->columns_recorded = true;
		return;
	}
	found = ash_column_record_read(cfg, rel->remote.nspname, rel->remote.relname, &rec, &nrec,
								   &acknowledged);

	written = palloc(sizeof(char *) * Max(rel->ncols + (found ? nrec : 0), 1));
	added = palloc(sizeof(int) * Max(rel->ncols, 1));
	for (int c = 0; c < rel->ncols; c++)
		written[c] = written_name(rel, c);
	if (found)
	{
		nadded = ash_column_record_lacking(written, rel->ncols, rec, nrec, added);

		/*
		 * The stream does not take a mapped column out of the record of a
		 * table still being copied: the session's first chunk judges a drop
		 * by the record (NOTES).
		 */
		if (from == ASH_COLUMNS_STREAM_COPYING)
		{
			for (int r = 0; r < nrec; r++)
			{
				bool		kept = false;

				for (int c = 0; c < rel->ncols && !kept; c++)
					kept = strcmp(written[c], rec[r]) == 0;
				if (!kept && ash_mapping_target_column(rel->map, rec[r]) != NULL)
					written[nwritten++] = rec[r];
			}
		}
		/* the same columns (a description repeated): nothing to write */
		if (nadded == 0 && nrec == nwritten)
		{
			rel->columns_recorded = true;
			return;
		}
	}
	else if (rel->before_known)
	{
		/* no record yet: the columns known before the description (NOTES) */
		nadded = ash_column_record_lacking(written, rel->ncols, rel->before_names,
										   rel->before_natts, added);
	}
	/* acknowledged: the operator made the rows agree (module NOTES) */
	if (nadded > 0 && from != ASH_COLUMNS_WHOLE_COPY && !acknowledged)
	{
		char	   *unfilled = ash_column_record_unfilled(rel->target_name,
														  rel->tenant_mode == ASH_TENANT_CONTEXT,
														  written, added, nadded);

		if (unfilled != NULL)
		{
			if (!found)
				note_halted(rel);
			ash_column_record_halt_added(rel->remote.nspname, rel->remote.relname, unfilled);
		}
	}

	/* an addition taken uses the acknowledgement up; a removal keeps it */
	ash_column_record_write(cfg, rel->remote.nspname, rel->remote.relname, written, nwritten,
							acknowledged && nadded == 0);
	rel->columns_recorded = true;
}
