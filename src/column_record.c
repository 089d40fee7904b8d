/*-------------------------------------------------------------------------
 *
 * column_record.c
 *	  The record of the source columns feeding each mapped target.
 *
 * NOTES
 *	  ash_replicant.source_columns names, per mapped source table, the
 *	  source columns its target is fed, as the last description applied
 *	  (or copied) named them; source_columns.c keeps it with the stream
 *	  and judges each description against it.  Here: reading it, the
 *	  columns it lacks, whether an addition left rows of the target
 *	  without their value (the source_column_added halt), and the census's
 *	  judgement of the source's catalog against it -- a table that sees no
 *	  change after an addition brings no description to judge, and would
 *	  stay mirrored wrong, healthy, for as long as it is idle.  A table
 *	  without a record is judged against the columns its publication
 *	  record held when the session started, as the stream judges its first
 *	  description, and gets them as its record when it halts (so that the
 *	  halt can be acknowledged, and a restart does not take the column);
 *	  a baseline the census finds holding is kept as the record once the
 *	  stream has passed it, so that a column added while the pipeline is
 *	  stopped is judged at the next start.
 *	  The census halts only once the stream has passed the source position
 *	  read after the catalog: a change from before the addition may still
 *	  come, and the stream judges what it brings first.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "column_record.h"
#include "errors.h"
#include "publication_record.h"
#include "spi_util.h"

#define RECORD_KEY \
	" WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3" \
	"   AND source_schema = $4 AND source_table = $5"

/*
 * The record of the table's columns: returns whether there is one; *rec,
 * *nrec its column names, *acknowledged its mark.  SPI connected.
 */
bool
ash_column_record_read(const AshPipelineConfig *cfg, const char *nspname, const char *relname,
					   char ***rec, int *nrec, bool *acknowledged)
{
	Oid			types[5] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};
	Datum		values[5];
	Datum	   *elems;
	bool		isnull;

	values[0] = CStringGetTextDatum(cfg->source_system_identifier);
	values[1] = CStringGetTextDatum(cfg->source_database);
	values[2] = CStringGetTextDatum(cfg->slot_name);
	values[3] = CStringGetTextDatum(nspname);
	values[4] = CStringGetTextDatum(relname);
	if (ash_spi_execute_args("SELECT columns, added_acknowledged FROM ash_replicant.source_columns"
							 RECORD_KEY,
							 5, types, values, NULL, SPI_OK_SELECT,
							 "reading the source column records failed") != 1)
		return false;
	deconstruct_array(DatumGetArrayTypeP(SPI_getbinval(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 1, &isnull)),
					  TEXTOID, -1, false, TYPALIGN_INT, &elems, NULL, nrec);
	*rec = palloc(sizeof(char *) * Max(*nrec, 1));
	for (int r = 0; r < *nrec; r++)
		(*rec)[r] = TextDatumGetCString(elems[r]);
	*acknowledged = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0],
											   SPI_tuptable->tupdesc, 2, &isnull));
	return true;
}

void
ash_column_record_write(const AshPipelineConfig *cfg, const char *nspname, const char *relname,
						const char *const *names, int n, bool acknowledged)
{
	Oid			types[7] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTARRAYOID, BOOLOID};
	Datum		values[7];
	Datum	   *elems = palloc(sizeof(Datum) * Max(n, 1));

	for (int c = 0; c < n; c++)
		elems[c] = CStringGetTextDatum(names[c]);
	values[0] = CStringGetTextDatum(cfg->source_system_identifier);
	values[1] = CStringGetTextDatum(cfg->source_database);
	values[2] = CStringGetTextDatum(cfg->slot_name);
	values[3] = CStringGetTextDatum(nspname);
	values[4] = CStringGetTextDatum(relname);
	values[5] = PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
	values[6] = BoolGetDatum(acknowledged);
	(void) ash_spi_execute_args("INSERT INTO ash_replicant.source_columns"
								"  (source_system_id, source_database, slot_name, source_schema, source_table,"
								"   columns, added_acknowledged, recorded_at)"
								" VALUES ($1, $2, $3, $4, $5, $6, $7, pg_catalog.clock_timestamp())"
								" ON CONFLICT (source_system_id, source_database, slot_name,"
								"              source_schema, source_table)"
								" DO UPDATE SET columns = EXCLUDED.columns,"
								"   added_acknowledged = EXCLUDED.added_acknowledged,"
								"   recorded_at = EXCLUDED.recorded_at",
								7, types, values, NULL, SPI_OK_INSERT,
								"writing the source column records failed");
}

/*
 * The written columns (names[0..n)) that known[0..nknown) lacks, as
 * indexes into names; returns how many.
 */
int
ash_column_record_lacking(const char *const *names, int n, char *const *known, int nknown,
						  int *added)
{
	int			nadded = 0;

	for (int c = 0; c < n; c++)
	{
		bool		found = false;

		for (int k = 0; k < nknown && !found; k++)
			found = strcmp(known[k], names[c]) == 0;
		if (!found)
			added[nadded++] = c;
	}
	return nadded;
}

/*
 * Do the added columns (names[added[0..nadded)]) leave rows wrong -- is
 * there a row in target_name (a quoted qualified name) the addition gave
 * no value?  Under context tenancy the rows live in the tenants' tables:
 * yes.  Returns the added columns' list for the halt, NULL when none.
 * SPI connected.
 */
char *
ash_column_record_unfilled(const char *target_name, bool context_tenancy,
						   const char *const *names, const int *added, int nadded)
{
	StringInfoData list;

	if (!context_tenancy &&
		ash_spi_execute_args(psprintf("SELECT 1 FROM %s LIMIT 1", target_name),
							 0, NULL, NULL, NULL, SPI_OK_SELECT,
							 "reading the target of a new source column failed") == 0)
		return NULL;
	initStringInfo(&list);
	for (int i = 0; i < nadded; i++)
		ash_append_name_list(&list, names[added[i]]);
	return list.data;
}

void
ash_column_record_halt_added(const char *nspname, const char *relname, const char *columns)
{
	ash_halt("source_column_added",
			 "table %s.%s: source columns %s were added while its target held rows",
			 quote_identifier(nspname), quote_identifier(relname), columns);
}

/*
 * Mapped table m as the source's catalogs describe it now (src: the columns
 * the decoder sends), against its record -- or, with none yet, against
 * baseline[0..nbaseline) (NULL: not known), *unrecorded set: the written
 * columns it lacks when they leave rows of the target without their value
 * (ash_column_record_unfilled), else NULL.  An acknowledged record or an
 * append log: NULL.  After coverage passed for the table; SPI connected.
 */
static char *
judge_table(const AshPipelineConfig *cfg, const AshMapping *m, const AshSourceTable *src,
			char *const *baseline, int nbaseline, bool *unrecorded,
			const char ***keep, int *nkeep)
{
	const char **written;
	int		   *added;
	int			nwritten = 0;
	int			nadded;
	char	  **rec;
	int			nrec;
	bool		acknowledged = false;
	char	   *nspname;
	char	   *relname;

	*unrecorded = false;
	*keep = NULL;
	*nkeep = 0;
	/* an append log keeps the columns each event had: never judged */
	if (m->append_log)
		return NULL;
	if (!ash_column_record_read(cfg, src->nspname, src->relname, &rec, &nrec, &acknowledged))
	{
		/* no record yet: the columns the session started with, if known */
		if (baseline == NULL)
			return NULL;
		*unrecorded = true;
		rec = (char **) baseline;
		nrec = nbaseline;
	}
	if (acknowledged)
		return NULL;

	/*
	 * The columns the stream would write: sent and not skipped.  Coverage
	 * passed just before, so each lands on a live target column (one that
	 * does not is source_column_unmapped, judged there first).
	 */
	written = palloc(sizeof(char *) * Max(src->natts, 1));
	added = palloc(sizeof(int) * Max(src->natts, 1));
	for (int i = 0; i < src->natts; i++)
		if (ash_mapping_target_column((AshMapping *) m, src->cols[i].name) != NULL)
			written[nwritten++] = src->cols[i].name;
	nadded = ash_column_record_lacking(written, nwritten, rec, nrec, added);
	if (nadded == 0)
	{
		/* the baseline holds: worth keeping as the table's record */
		if (*unrecorded)
		{
			*keep = written;
			*nkeep = nwritten;
		}
		return NULL;
	}
	nspname = get_namespace_name(get_rel_namespace(m->target_relid));
	relname = get_rel_name(m->target_relid);
	if (nspname == NULL || relname == NULL)
		return NULL;			/* destination_table_missing, judged elsewhere */
	return ash_column_record_unfilled(quote_qualified_identifier(nspname, relname),
									  m->tenant_strategy != NULL &&
									  strcmp(m->tenant_strategy, "context") == 0,
									  written, added, nadded);
}

/*
 * Added columns a census found leaving rows without their value, each with
 * the source position read after the catalog that showed them (in
 * TopMemoryContext).  The census halts for one only once the stream has
 * passed that position: before it, a change of the table from before the
 * addition may still come, and the stream judges that first (a decoder's
 * schema drift, a description with fewer columns); past it, every change
 * from before the addition was applied, and the table has had none since
 * that could bring the addition (the stream judges such a change itself).
 */
typedef struct PendingAddition
{
	char	   *nspname;
	char	   *relname;
	char	   *columns;
	XLogRecPtr	since;
	const AshMapping *m;		/* found in this run only */
	bool		unrecorded;		/* this run only: judged against a baseline */
} PendingAddition;

static List *pending_additions = NIL;

/*
 * A table without a record whose columns the census found as its session
 * baseline names them (in TopMemoryContext): the baseline is kept as its
 * record once the stream has passed the source position read after the
 * catalog, when every change from before is applied.  Until then a
 * description from before a column was dropped may still come, and would
 * read as an addition against the newer record.  Kept, the baseline
 * outlives the session: a column added while the pipeline is stopped is
 * judged at the next start (its publication record, read then, holds the
 * column and would take it unjudged).
 */
typedef struct PendingRecord
{
	char	   *nspname;
	char	   *relname;
	int			ncols;
	char	  **names;
	XLogRecPtr	since;
} PendingRecord;

static List *pending_records = NIL;

/*
 * The columns the publication records held when the session started, per
 * mapped table (in TopMemoryContext): a table with no record of the columns
 * feeding its target yet (no change of it applied) is judged against them,
 * as the stream judges its first description (source_columns.c).
 */
typedef struct SessionBaseline
{
	char	   *nspname;
	char	   *relname;
	int			ncols;
	char	  **names;
} SessionBaseline;

static List *session_baselines = NIL;

static void
free_pending_additions(List *list)
{
	ListCell   *lc;

	foreach(lc, list)
	{
		PendingAddition *p = lfirst(lc);

		pfree(p->nspname);
		pfree(p->relname);
		pfree(p->columns);
		pfree(p);
	}
	list_free(list);
}

static void
free_pending_records(List *list)
{
	ListCell   *lc;

	foreach(lc, list)
	{
		PendingRecord *p = lfirst(lc);

		pfree(p->nspname);
		pfree(p->relname);
		for (int c = 0; c < p->ncols; c++)
			pfree(p->names[c]);
		pfree(p->names);
		pfree(p);
	}
	list_free(list);
}

static bool
same_columns(const PendingRecord *a, const PendingRecord *b)
{
	if (strcmp(a->nspname, b->nspname) != 0 || strcmp(a->relname, b->relname) != 0 ||
		a->ncols != b->ncols)
		return false;
	for (int c = 0; c < a->ncols; c++)
		if (strcmp(a->names[c], b->names[c]) != 0)
			return false;
	return true;
}

/*
 * Keep the baselines found this run (PendingRecord *, in the caller's
 * context) as records where the stream has passed the position each was
 * first found at (an earlier run's, when it found the same columns);
 * the others wait, kept across runs.  A record the stream wrote in the
 * meantime stays.
 */
static void
keep_baselines(AshPipelineConfig *cfg, List *found, XLogRecPtr read_at, XLogRecPtr passed)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *pending = NIL;
	List	   *due = NIL;
	ListCell   *lc;

	foreach(lc, found)
	{
		PendingRecord *f = lfirst(lc);
		ListCell   *pc;

		f->since = read_at;
		foreach(pc, pending_records)
		{
			PendingRecord *earlier = lfirst(pc);

			if (same_columns(earlier, f))
				f->since = earlier->since;
		}
		if (passed >= f->since)
		{
			due = lappend(due, f);
			continue;
		}
		MemoryContextSwitchTo(TopMemoryContext);
		{
			PendingRecord *p = palloc(sizeof(PendingRecord));

			p->nspname = pstrdup(f->nspname);
			p->relname = pstrdup(f->relname);
			p->ncols = f->ncols;
			p->names = palloc(sizeof(char *) * Max(f->ncols, 1));
			for (int c = 0; c < f->ncols; c++)
				p->names[c] = pstrdup(f->names[c]);
			p->since = f->since;
			pending = lappend(pending, p);
		}
		MemoryContextSwitchTo(cxt);
	}
	free_pending_records(pending_records);
	pending_records = pending;
	if (due == NIL)
		return;

	ash_spi_transaction_begin();
	foreach(lc, due)
	{
		PendingRecord *f = lfirst(lc);
		char	  **rec;
		int			nrec;
		bool		acknowledged;

		if (!ash_column_record_read(cfg, f->nspname, f->relname, &rec, &nrec, &acknowledged))
			ash_column_record_write(cfg, f->nspname, f->relname,
									(const char *const *) f->names, f->ncols, false);
	}
	ash_spi_transaction_end();
}

void
ash_column_record_note_session(AshCheckpointKey *key, bool watched)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *records;
	ListCell   *lc;

	foreach(lc, session_baselines)
	{
		SessionBaseline *b = lfirst(lc);

		pfree(b->nspname);
		pfree(b->relname);
		for (int c = 0; c < b->ncols; c++)
			pfree(b->names[c]);
		pfree(b->names);
		pfree(b);
	}
	list_free(session_baselines);
	session_baselines = NIL;
	if (!watched || key == NULL)
		return;

	records = ash_publication_identities(key);
	/* a transaction: the names are converted to the database's encoding */
	StartTransactionCommand();
	MemoryContextSwitchTo(TopMemoryContext);
	foreach(lc, records)
	{
		AshRecordedTable *t = lfirst(lc);
		SessionBaseline *b = palloc(sizeof(SessionBaseline));

		b->nspname = pstrdup(t->nspname);
		b->relname = pstrdup(t->relname);
		b->ncols = ash_publication_record_columns(t->published, &b->names, NULL, NULL);
		session_baselines = lappend(session_baselines, b);
	}
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}

static SessionBaseline *
session_baseline(const char *nspname, const char *relname)
{
	ListCell   *lc;

	foreach(lc, session_baselines)
	{
		SessionBaseline *b = lfirst(lc);

		if (b->ncols > 0 && strcmp(b->nspname, nspname) == 0 &&
			strcmp(b->relname, relname) == 0)
			return b;
	}
	return NULL;
}

/*
 * Halt for addition f.  A table judged against its session baseline gets
 * that baseline (the columns it writes) as its record first, committed: the
 * halt can be acknowledged, and the next session judges the addition again
 * rather than take the column with its next start's record.
 */
static void
halt_addition(AshPipelineConfig *cfg, PendingAddition *f)
{
	if (f->unrecorded)
	{
		SessionBaseline *b = session_baseline(f->nspname, f->relname);
		const char **written = palloc(sizeof(char *) * Max(b->ncols, 1));
		int			n = 0;
		char	  **rec;
		int			nrec;
		bool		acknowledged;

		for (int c = 0; c < b->ncols; c++)
			if (ash_mapping_target_column((AshMapping *) f->m, b->names[c]) != NULL)
				written[n++] = b->names[c];
		ash_spi_transaction_begin();
		if (!ash_column_record_read(cfg, f->nspname, f->relname, &rec, &nrec, &acknowledged))
			ash_column_record_write(cfg, f->nspname, f->relname, written, n, false);
		ash_spi_transaction_end();
	}
	ash_column_record_halt_added(f->nspname, f->relname, f->columns);
}

/*
 * Source columns added to a mapped table since its record: judged as the
 * stream judges a description (source_columns.c), since a table that sees
 * no change after the addition sends none -- its rows would hold the
 * column's default at the source and what the target gave them here, with
 * nothing to say so.  After the publication gap checks: a table replaced
 * or gone from the publication and back is theirs (copied again, or
 * halted publication_gap), whatever columns it came back with.  passed:
 * the source position the stream has received and applied everything
 * before.
 */
void
ash_column_record_census(AshPipelineConfig *cfg, AshConn *conn, List *described,
						 List *mappings, XLogRecPtr passed)
{
	MemoryContext cxt = CurrentMemoryContext;
	List	   *found = NIL;
	List	   *kept = NIL;
	List	   *pending = NIL;
	XLogRecPtr	read_at;
	ListCell   *lc;

	ash_spi_transaction_begin();
	foreach(lc, described)
	{
		AshSourceRel *r = lfirst(lc);
		SessionBaseline *b;
		ListCell   *mc;

		if (!r->exists)
			continue;
		b = session_baseline(r->name.nspname, r->name.relname);
		foreach(mc, mappings)
		{
			AshMapping *m = lfirst(mc);
			PendingAddition *p;
			char	   *columns;
			bool		unrecorded;
			const char **keep;
			int			nkeep;

			if (strcmp(m->source_schema, r->name.nspname) != 0 ||
				strcmp(m->source_table, r->name.relname) != 0)
				continue;
			columns = judge_table(cfg, m, &r->desc, b ? b->names : NULL, b ? b->ncols : 0,
								  &unrecorded, &keep, &nkeep);
			if (columns == NULL)
			{
				if (keep != NULL)
				{
					PendingRecord *k = palloc0(sizeof(PendingRecord));

					k->nspname = r->name.nspname;
					k->relname = r->name.relname;
					k->ncols = nkeep;
					k->names = (char **) keep;
					kept = lappend(kept, k);
				}
				continue;
			}
			p = palloc0(sizeof(PendingAddition));
			p->nspname = r->name.nspname;
			p->relname = r->name.relname;
			p->columns = columns;
			p->m = m;
			p->unrecorded = unrecorded;
			found = lappend(found, p);
		}
	}
	ash_spi_transaction_end();

	if (found == NIL && kept == NIL)
	{
		free_pending_additions(pending_additions);
		pending_additions = NIL;
		free_pending_records(pending_records);
		pending_records = NIL;
		return;
	}
	/* read after the catalog: every addition it showed committed before */
	read_at = ash_source_wal_position(conn);
	keep_baselines(cfg, kept, read_at, passed);
	foreach(lc, found)
	{
		PendingAddition *f = lfirst(lc);
		PendingAddition *p;
		ListCell   *pc;

		f->since = read_at;
		foreach(pc, pending_additions)
		{
			PendingAddition *earlier = lfirst(pc);

			if (strcmp(earlier->nspname, f->nspname) == 0 &&
				strcmp(earlier->relname, f->relname) == 0 &&
				strcmp(earlier->columns, f->columns) == 0)
				f->since = earlier->since;
		}
		if (passed >= f->since)
			halt_addition(cfg, f);
		MemoryContextSwitchTo(TopMemoryContext);
		p = palloc0(sizeof(PendingAddition));
		p->nspname = pstrdup(f->nspname);
		p->relname = pstrdup(f->relname);
		p->columns = pstrdup(f->columns);
		p->since = f->since;
		pending = lappend(pending, p);
		MemoryContextSwitchTo(cxt);
	}
	free_pending_additions(pending_additions);
	pending_additions = pending;
}
