/*-------------------------------------------------------------------------
 *
 * publication_record.c
 *	  Publication gaps of pipelines streaming without a snapshot.
 *
 *	  pgoutput sends a change of a table only if the publication held the
 *	  table when the change was made.  A mapped table dropped from the
 *	  publication and added back had changes in between that no consumer
 *	  will ever receive (one whose publication row was replaced, by SET
 *	  TABLE with another row filter or column list, had them decoded under
 *	  a definition we never saw): mirroring on from there leaves a hole
 *	  nobody sees.
 *	  With a snapshot configured the table is copied again (snapshot.c).
 *	  Without one nothing can fill the hole, so the pipeline halts
 *	  publication_gap and the operator decides: re-seed with a snapshot, or
 *	  acknowledge the gap (docs/reasons.md#publication_gap).
 *
 *	  Detection compares tokens (ash_source_publication_gap): the OIDs of
 *	  the catalog rows through which the publication holds the table.  A
 *	  dropped row never comes back with its OID, so a table held by none of
 *	  the rows recorded for it was out in between, however briefly -- while
 *	  the pipeline was stopped too.  pglogical's replication sets hold their
 *	  tables by rows without OIDs: their tokens are the set and the row's
 *	  xmin, which a row removed and added again does not keep either.  The
 *	  table's own OID is recorded too: a table replaced under its name (dropped
 *	  and created again, or another renamed into it) leaves the mirror with
 *	  rows no change deleted, while a schema's or FOR ALL TABLES membership
 *	  holds both tables.  So are its columns' numbers by name: a written
 *	  column dropped and added again under its name gave every row a value
 *	  no change carried, and the decoder describes it as before; and their
 *	  types: a retype rewrote the rows outside the stream.  The
 *	  records live in
 *	  ash_replicant.publication_members, one row per mapped table of the
 *	  checkpoint, written at every start and census.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/pg_lsn.h"
#include "utils/snapmgr.h"

#include "publication_record.h"
#include "source_catalog.h"

#define KEY_WHERE \
	" WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"

static void
key_values(AshCheckpointKey *key, Datum *values)
{
	values[0] = CStringGetTextDatum(key->system_id);
	values[1] = CStringGetTextDatum(key->database);
	values[2] = CStringGetTextDatum(key->slot_name);
}

static Oid	text_types[7] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID};

static void
exec(const char *sql, int nargs, Datum *values, int expected)
{
	if (SPI_execute_with_args(sql, nargs, text_types, values, NULL, false, 0) != expected)
		elog(ERROR, "ash_replicant: writing the publication records failed");
}

/* The key's records (schema, table, published) in SPI_tuptable. */
static void
read_records(Datum *values)
{
	if (SPI_execute_with_args("SELECT source_schema, source_table, published"
							  "  FROM ash_replicant.publication_members" KEY_WHERE,
							  3, text_types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the publication records failed");
}

/* The row of res for schema.table, or -1 (the table is not published). */
static int
published_row(PGresult *res, const char *nspname, const char *relname)
{
	for (int r = 0; r < PQntuples(res); r++)
		if (strcmp(PQgetvalue(res, r, 0), nspname) == 0 &&
			strcmp(PQgetvalue(res, r, 1), relname) == 0 && !PQgetisnull(res, r, 3))
			return r;
	return -1;
}

bool
ash_publication_watched_by(const char *decoder, const char *publication,
						   const char *replication_sets, const char *snapshot)
{
	if (snapshot != NULL && strcmp(snapshot, "off") != 0)
		return false;
	if (decoder == NULL)
		return false;
	return (strcmp(decoder, "pgoutput") == 0 && publication != NULL) ||
		(strcmp(decoder, "pglogical") == 0 && replication_sets != NULL) ||
		strcmp(decoder, "wal2json") == 0;
}

bool
ash_publication_watched(AshPipelineConfig *cfg)
{
	return ash_publication_watched_by(cfg->decoder, cfg->publication, cfg->replication_sets,
									  cfg->snapshot);
}

char *
ash_publication_gaps(AshCheckpointKey *key, List *mappings, PGresult *res, MemoryContext into,
					 bool *retyped_only)
{
	Datum		values[3];
	SPITupleTable *tt;
	StringInfoData gaps;
	bool		out = false;

	key_values(key, values);
	read_records(values);
	tt = SPI_tuptable;
	initStringInfo(&gaps);
	for (uint64 i = 0, n = SPI_processed; i < n; i++)
	{
		char	   *nspname = SPI_getvalue(tt->vals[i], tt->tupdesc, 1);
		char	   *relname = SPI_getvalue(tt->vals[i], tt->tupdesc, 2);
		int			r = published_row(res, nspname, relname);
		AshMapping *m = ash_mappings_find(mappings, nspname, relname);
		AshTableGap gap;

		if (r < 0 || m == NULL)
			continue;
		gap = ash_source_publication_gap(SPI_getvalue(tt->vals[i], tt->tupdesc, 3),
										 PQgetvalue(res, r, 3), m);
		if (gap == ASH_GAP_NONE)
			continue;
		out |= gap == ASH_GAP_OUT;
		appendStringInfo(&gaps, "%s%s", gaps.len > 0 ? ", " : "",
						 quote_qualified_identifier(nspname, relname));
	}
	if (retyped_only != NULL)
		*retyped_only = !out;
	return gaps.len > 0 ? MemoryContextStrdup(into, gaps.data) : NULL;
}

char *
ash_publication_record(AshPipelineConfig *cfg, AshCheckpointKey *key, AshConn *conn,
					   bool starting, bool *retyped_only)
{
	MemoryContext cxt = CurrentMemoryContext;
	bool		watched = ash_publication_watched(cfg);
	PGresult   *res = NULL;
	Datum		values[7];
	SPITupleTable *tt;
	uint64		n;
	char	   *gap = NULL;
	ListCell   *lc;

	/* not watched: a start forgets what an earlier configuration recorded */
	if (key == NULL || (!watched && !starting))
		return NULL;
	if (watched)
	{
		AshTableSetSpec spec;

		ash_source_table_set_of(cfg, &spec);
		res = ash_source_table_set_membership(conn, &spec);
	}

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	key_values(key, values);
	if (!watched)
	{
		exec("DELETE FROM ash_replicant.publication_members" KEY_WHERE, 3, values, SPI_OK_DELETE);
		goto done;
	}

	/* the records, compared first: a gap leaves them as they are */
	gap = ash_publication_gaps(key, cfg->mappings, res, cxt, retyped_only);
	if (gap != NULL)
		goto done;

	/*
	 * Every mapped table published now, as it is held now: written only
	 * where that differs from its record, or the record has no position yet
	 * (a census finds nothing to write mostly, and takes no transaction id
	 * then).  A table no longer mapped is no longer watched.
	 */
	if (SPI_execute_with_args("SELECT source_schema, source_table, published, recorded_lsn IS NOT NULL"
							  "  FROM ash_replicant.publication_members" KEY_WHERE,
							  3, text_types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the publication records failed");
	tt = SPI_tuptable;
	n = SPI_processed;
	foreach(lc, cfg->mappings)
	{
		AshMapping *m = lfirst(lc);
		int			r = published_row(res, m->source_schema, m->source_table);
		const char *now;
		bool		same = false;

		if (r < 0)
			continue;			/* out: its record stays, its return is found */
		now = PQgetvalue(res, r, 3);
		for (uint64 i = 0; i < n && !same; i++)
			same = strcmp(SPI_getvalue(tt->vals[i], tt->tupdesc, 1), m->source_schema) == 0 &&
				strcmp(SPI_getvalue(tt->vals[i], tt->tupdesc, 2), m->source_table) == 0 &&
				strcmp(SPI_getvalue(tt->vals[i], tt->tupdesc, 3), now) == 0 &&
				strcmp(SPI_getvalue(tt->vals[i], tt->tupdesc, 4), "t") == 0;
		if (same)
			continue;
		values[3] = CStringGetTextDatum(m->source_schema);
		values[4] = CStringGetTextDatum(m->source_table);
		values[5] = CStringGetTextDatum(now);
		values[6] = CStringGetTextDatum(PQgetvalue(res, r, 4));
		exec("INSERT INTO ash_replicant.publication_members AS p"
			 " (source_system_id, source_database, slot_name, source_schema, source_table,"
			 "  published, recorded_at, recorded_lsn)"
			 " SELECT $1, $2, $3, $4, $5, $6, pg_catalog.now(), $7::pg_catalog.pg_lsn"
			 "   FROM ash_replicant.checkpoints" KEY_WHERE
			 " ON CONFLICT (source_system_id, source_database, slot_name, source_schema, source_table)"
			 " DO UPDATE SET published = EXCLUDED.published, recorded_at = EXCLUDED.recorded_at,"
			 "   recorded_lsn = EXCLUDED.recorded_lsn",
			 7, values, SPI_OK_INSERT);
	}
	for (uint64 i = 0; i < n; i++)
	{
		char	   *nspname = SPI_getvalue(tt->vals[i], tt->tupdesc, 1);
		char	   *relname = SPI_getvalue(tt->vals[i], tt->tupdesc, 2);

		if (ash_config_find_mapping(cfg, nspname, relname) != NULL)
			continue;
		values[3] = CStringGetTextDatum(nspname);
		values[4] = CStringGetTextDatum(relname);
		exec("DELETE FROM ash_replicant.publication_members" KEY_WHERE
			 "   AND source_schema = $4 AND source_table = $5",
			 5, values, SPI_OK_DELETE);
	}

done:
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	if (res != NULL)
		PQclear(res);
	return gap;
}

int
ash_publication_record_columns(const char *published, char ***names, uint32 **types,
							   int32 **typmods)
{
	char	   *copy = pstrdup(published);
	char	   *save = NULL;
	int			max = 0;
	int			n = 0;

	for (const char *p = published; (p = strstr(p, "typ:")) != NULL; p++)
		max++;
	*names = palloc(sizeof(char *) * Max(max, 1));
	if (types != NULL)
		*types = palloc(sizeof(uint32) * Max(max, 1));
	if (typmods != NULL)
		*typmods = palloc(sizeof(int32) * Max(max, 1));
	for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
	{
		char	   *sep = strrchr(tok, ':');
		int			hexlen;
		char	   *raw;
		unsigned int type;
		int			typmod;

		if (strncmp(tok, "typ:", 4) != 0 || sep == NULL || sep < tok + 4 ||
			sscanf(sep + 1, "%u.%d", &type, &typmod) != 2)
			continue;
		hexlen = sep - (tok + 4);
		raw = palloc(hexlen / 2 + 1);
		raw[hex_decode(tok + 4, hexlen, raw)] = '\0';
		(*names)[n] = pg_any_to_server(raw, strlen(raw), PG_UTF8);
		if (types != NULL)
			(*types)[n] = type;
		if (typmods != NULL)
			(*typmods)[n] = typmod;
		n++;
	}
	pfree(copy);
	return n;
}

/*
 * The OID each of key's records holds its table by ("def:tbl:<oid>"), with
 * the source's position when that was read; records without one (written
 * before 1.10.0, or never read with it) are left out.  Outside a
 * transaction; the list (AshRecordedTable *) in CurrentMemoryContext.
 */
List *
ash_publication_identities(AshCheckpointKey *key)
{
	MemoryContext cxt = CurrentMemoryContext;
	MemoryContext spi_cxt;
	Datum		values[3];
	List	   *out = NIL;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	spi_cxt = CurrentMemoryContext;
	key_values(key, values);
	if (SPI_execute_with_args("SELECT source_schema, source_table, published, recorded_lsn::pg_catalog.text"
							  "  FROM ash_replicant.publication_members" KEY_WHERE
							  "   AND recorded_lsn IS NOT NULL",
							  3, text_types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the publication records failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		char	   *published = SPI_getvalue(tup, desc, 3);
		char	   *tok = strstr(published, "def:tbl:");
		AshRecordedTable *t;
		unsigned int oid;

		/* the token starts the list or follows a comma */
		while (tok != NULL && tok != published && tok[-1] != ',')
			tok = strstr(tok + 1, "def:tbl:");
		if (tok == NULL || sscanf(tok + 8, "%u", &oid) != 1)
			continue;
		t = MemoryContextAllocZero(cxt, sizeof(AshRecordedTable));
		t->oid = oid;
		t->nspname = MemoryContextStrdup(cxt, SPI_getvalue(tup, desc, 1));
		t->relname = MemoryContextStrdup(cxt, SPI_getvalue(tup, desc, 2));
		t->published = MemoryContextStrdup(cxt, published);
		t->read_at = DatumGetLSN(DirectFunctionCall1(pg_lsn_in,
													 CStringGetDatum(SPI_getvalue(tup, desc, 4))));
		MemoryContextSwitchTo(cxt);
		out = lappend(out, t);
		MemoryContextSwitchTo(spi_cxt);
	}
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
	return out;
}
