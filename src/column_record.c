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
 *	  without a record is judged against the columns the session started
 *	  with, as the stream judges its first description.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "column_record.h"
#include "errors.h"
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

char *
ash_column_record_census(const AshPipelineConfig *cfg, const AshMapping *m,
						 const AshSourceTable *src, char *const *baseline, int nbaseline,
						 bool *unrecorded)
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
		return NULL;
	nspname = get_namespace_name(get_rel_namespace(m->target_relid));
	relname = get_rel_name(m->target_relid);
	if (nspname == NULL || relname == NULL)
		return NULL;			/* destination_table_missing, judged elsewhere */
	return ash_column_record_unfilled(quote_qualified_identifier(nspname, relname),
									  m->tenant_strategy != NULL &&
									  strcmp(m->tenant_strategy, "context") == 0,
									  written, added, nadded);
}
