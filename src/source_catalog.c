/*-------------------------------------------------------------------------
 *
 * source_catalog.c
 *	  What the source's catalogs say about the decoder's table set.
 *
 * NOTES
 *	  See source_catalog.h for the protocol.  Every query runs with $n text
 *	  parameters (names and settings are never spliced into SQL) and reads
 *	  pg_catalog only, except pglogical's own catalog.  A result is copied
 *	  into palloc'd memory and cleared before anything else can raise, so
 *	  an error never leaks a PGresult.
 *
 *	  What the decoder sends is described exactly as the decoder does:
 *	  live, non-generated columns (pgoutput sends no generated column), and
 *	  of those only the publication's column list where there is one (PG
 *	  15+).  A column's type name is its base type's for a domain, as
 *	  pgoutput's Type message carries it.  Replica-identity membership:
 *	  every column under FULL, the primary key's under DEFAULT, the replica
 *	  identity index's under USING INDEX, none under NOTHING.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_class.h"
#include "commands/trigger.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"

#include "coverage.h"
#include "libpq_conn.h"
#include "mapping_validate.h"
#include "source_catalog.h"

/*
 * Describe one table: $1 schema, $2 name, $3 column list (text[] or NULL).
 * Every live column the decoder sends (pgoutput: no generated column;
 * wal2json: every one), with whether the column list sends it.
 */
/*
 * The unique keys a column is a key column of, as relcache picks a replica
 * identity index: valid, immediate (a deferrable one admits duplicates in
 * the middle of a transaction), non-partial, on plain columns.  "oid:n"
 * tokens, n the key's column count.  The probe for PG 10 and 11 counts
 * every indexed column (PG 10 has no indnkeyatts): a key with INCLUDE
 * columns then needs them too, stricter, never looser.
 */
#define UNIQUE_IN_SQL(keycols, nkeys) \
"  (SELECT pg_catalog.string_agg(i.indexrelid::pg_catalog.text || ':' || " nkeys "::pg_catalog.text, ',')" \
"    FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid AND i.indisunique AND i.indisvalid" \
"     AND i.indimmediate AND i.indislive AND i.indpred IS NULL AND i.indexprs IS NULL" \
"     AND a.attnum = ANY (" keycols "))"

/*
 * The fields of a composite column type (or of an array's composite
 * element), as type_shape() in coverage.c writes them on the destination:
 * "name type, ..." in order, a built-in field type by format_type, any
 * other by its name (its schema is the two servers' own business).
 */
#define SHAPE_SQL(type) \
"  (SELECT pg_catalog.string_agg(pg_catalog.quote_ident(f.attname) || ' ' ||" \
"     CASE WHEN f.atttypid < 10000 THEN pg_catalog.format_type(f.atttypid, f.atttypmod)" \
"      ELSE (SELECT ft.typname::pg_catalog.text FROM pg_catalog.pg_type ft WHERE ft.oid = f.atttypid) END," \
"     ', ' ORDER BY f.attnum)" \
"    FROM pg_catalog.pg_attribute f" \
"   WHERE f.attrelid = COALESCE(NULLIF(" type ".typrelid, 0)," \
"      (SELECT e.typrelid FROM pg_catalog.pg_type e WHERE e.oid = " type ".typelem))" \
"     AND f.attnum > 0 AND NOT f.attisdropped)"

/*
 * May the probe role read every row of the table?  Not where a policy of
 * row-level security applies to it: the stream carries every row, a read
 * would see those the policy lets through (verify's counts, the existing
 * rows' question) -- under row_security = off (libpq_conn.c) it fails.
 */
#define READS_EVERY_ROW_SQL \
"pg_catalog.has_table_privilege(c.oid, 'SELECT') AND NOT pg_catalog.row_security_active(c.oid)"

#define DESCRIBE_SQL(generated) \
"SELECT c.relreplident, " READS_EVERY_ROW_SQL "," \
"  a.attname::pg_catalog.text, a.atttypid::pg_catalog.int8, bt.typname::pg_catalog.text," \
ASH_SQL_IN_REPLICA_IDENTITY "," \
"  $3::pg_catalog.text[] IS NULL OR a.attname::pg_catalog.text = ANY ($3::pg_catalog.text[])," \
"  c.relkind," \
"  CASE WHEN a.atttypmod <> -1 THEN a.atttypmod" \
"   ELSE (SELECT t.typtypmod FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) END," \
"  pg_catalog.format_type(a.atttypid, a.atttypmod)," \
"  a.attlen = -1 AND a.attstorage <> 'p'," \
UNIQUE_IN_SQL("(i.indkey::pg_catalog.int2[])[0:i.indnkeyatts - 1]", "i.indnkeyatts") "," \
SHAPE_SQL("bt") "," \
"  COALESCE(bt.oid, a.atttypid)::pg_catalog.int8" \
" FROM pg_catalog.pg_class c" \
" JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace" \
" LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0" \
"  AND NOT a.attisdropped" generated \
ASH_SQL_BASE_TYPE_LATERAL \
" WHERE n.nspname = $1 AND c.relname = $2" \
" ORDER BY a.attnum"

static const char *describe_sql = DESCRIBE_SQL(" AND a.attgenerated = ''");
static const char *describe_sql_generated = DESCRIBE_SQL("");

/* Before PG 12 (no attgenerated; pglogical and wal2json sources). */
static const char *describe_sql_pre12 =
"SELECT c.relreplident, " READS_EVERY_ROW_SQL ","
"  a.attname::pg_catalog.text, a.atttypid::pg_catalog.int8, t.typname::pg_catalog.text,"
"  c.relreplident = 'f' OR EXISTS (SELECT 1 FROM pg_catalog.pg_index i"
"     WHERE i.indrelid = c.oid AND a.attnum = ANY (i.indkey) AND"
"     ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))),"
"  true, c.relkind, a.atttypmod, pg_catalog.format_type(a.atttypid, a.atttypmod),"
"  a.attlen = -1 AND a.attstorage <> 'p',"
UNIQUE_IN_SQL("i.indkey", "i.indnatts") ","
SHAPE_SQL("t") ","
"  COALESCE(NULLIF(t.typbasetype, 0), a.atttypid)::pg_catalog.int8"
" FROM pg_catalog.pg_class c"
" JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
" LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0"
"  AND NOT a.attisdropped AND ($3::pg_catalog.text[] IS NULL OR true)"
" LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid"
" WHERE n.nspname = $1 AND c.relname = $2"
" ORDER BY a.attnum";

/* Run one probe; raise (value-free) unless it returned rows. */
static PGresult *
probe(AshConn *conn, const char *query, int nparams, const char *p1, const char *p2,
	  const char *p3)
{
	const char *params[3] = {p1, p2, p3};
	PGresult   *res = ash_conn_exec_params(conn, query, nparams, params, true);

	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "probe");
	return res;
}

/* A one-row boolean probe. */
static bool
probe_bool(AshConn *conn, const char *query, int nparams, const char *p1)
{
	PGresult   *res = probe(conn, query, nparams, p1, NULL, NULL);
	bool		v = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) &&
		strcmp(PQgetvalue(res, 0, 0), "t") == 0;

	PQclear(res);
	return v;
}

const char *
ash_source_probe_reason(void)
{
	return strcmp(ash_conn_last_sqlstate, "42501") == 0 ?
		"privilege_probe_missing" : "source_probe_failed";
}

bool
ash_source_identity_matches(AshConn *conn, const char *sysid, const char *database)
{
	PGresult   *res;
	bool		same;

	res = probe(conn, "SELECT system_identifier::pg_catalog.text, pg_catalog.current_database()"
				" FROM pg_catalog.pg_control_system()", 0, NULL, NULL, NULL);
	same = PQntuples(res) == 1 && sysid != NULL && database != NULL &&
		strcmp(PQgetvalue(res, 0, 0), sysid) == 0 &&
		strcmp(PQgetvalue(res, 0, 1), database) == 0;
	PQclear(res);
	return same;
}

bool
ash_source_has_origins(AshConn *conn)
{
	return probe_bool(conn, "SELECT " ASH_SOURCE_ORIGINS_SQL, 0, NULL);
}

static AshSourceRel *
new_rel(const char *nsp, const char *rel, const char *attnames)
{
	AshSourceRel *r = palloc0(sizeof(AshSourceRel));

	r->name.nspname = pstrdup(nsp);
	r->name.relname = pstrdup(rel);
	r->attnames = attnames ? pstrdup(attnames) : NULL;
	return r;
}

/* pglogical's TRUNCATE trigger tg on relation rel (from pg_trigger tg) */
#define ASH_PGL_QUEUE_TRUNCATE_OF(rel) \
	" JOIN pg_catalog.pg_proc qp ON qp.oid = tg.tgfoid" \
	" JOIN pg_catalog.pg_namespace qn ON qn.oid = qp.pronamespace" \
	" WHERE tg.tgrelid = " rel " AND qp.proname = 'queue_truncate' AND qn.nspname = 'pglogical'"

/*
 * pglogical queues a TRUNCATE from a trigger (queue_truncate_trigger_<oid>):
 * the coverage problem when the table's would not queue every one (trigger:
 * its tgenabled followed by its name, NULL when it has none), or NULL.  An
 * ordinary trigger ('O') does not fire under session_replication_role =
 * replica, the role in which a source that is itself a subscriber applies
 * what it receives: a source holding replication origins is taken for one.
 */
static char *
truncate_unqueued(const char *nsp, const char *rel, const char *trigger, bool origins)
{
	const char *table = quote_qualified_identifier(nsp, rel);
	const char *why;

	if (trigger == NULL)
		return psprintf("%s has no pglogical TRUNCATE trigger: a TRUNCATE would queue nothing"
						" and the mirror would silently keep the rows", table);
	switch (trigger[0])
	{
		case TRIGGER_FIRES_ALWAYS:
			return NULL;
		case TRIGGER_DISABLED:
			why = "is disabled";
			break;
		case TRIGGER_FIRES_ON_REPLICA:
			why = "fires only in replica sessions";
			break;
		default:
			if (!origins)
				return NULL;
			why = "does not fire in replica sessions, and the source holds replication origins";
			break;
	}
	return psprintf("pglogical's TRUNCATE trigger on %s %s: a TRUNCATE would queue nothing"
					" and the mirror would silently keep the rows (ALTER TABLE %s ENABLE ALWAYS TRIGGER %s)",
					table, why, table, quote_identifier(trigger + 1));
}

const char *
ash_source_fetch_table_set(AshConn *conn, const AshTableSetSpec *spec, List **rels,
						   AshPublicationFacts *pub)
{
	const char *decoder = spec->decoder ? spec->decoder : "pgoutput";
	PGresult   *res;

	*rels = NIL;
	if (pub != NULL)
		memset(pub, 0, sizeof(*pub));
	if (strcmp(decoder, "wal2json") == 0)
	{
		ListCell   *lc;

		/* the configured tables are the set; describing finds the absent */
		foreach(lc, (List *) spec->tables)
		{
			AshSourceName *n = lfirst(lc);
			AshSourceRel *r = new_rel(n->nspname, n->relname, NULL);

			r->generated = true;	/* wal2json skips dropped columns only */
			*rels = lappend(*rels, r);
		}
		return NULL;
	}

	if (strcmp(decoder, "pglogical") == 0)
	{
		if (!probe_bool(conn, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'pglogical')",
						0, NULL))
			return "decoder_extension_missing";
		if (!probe_bool(conn, "SELECT pg_catalog.count(*) = pg_catalog.cardinality($1::pg_catalog.text[])"
						" FROM pglogical.replication_set WHERE set_name::pg_catalog.text = ANY ($1::pg_catalog.text[])",
						1, spec->replication_sets))
			return "source_publication_missing";

		/*
		 * Per table, as pglogical_output decides (pglogical_repset.c): a
		 * change kind is sent when any named set holding the table
		 * replicates it, and a TRUNCATE is queued for it through such a
		 * set with replicate_truncate; the columns sent are the union of
		 * those sets' column lists where any has one; rows pass only when
		 * every set's row filter passes.  Judged as a publication's
		 * actions, column list and row filter (ash_source_judge_coverage).
		 */
		if (pub != NULL)
		{
			pub->known = true;
			pub->insert = pub->update = pub->delete = pub->truncate = true;
		}
		res = probe(conn, "SELECT t.nspname::pg_catalog.text, t.relname::pg_catalog.text,"
					" (SELECT pg_catalog.array_agg(DISTINCT a ORDER BY a)"
					"   FROM pglogical.replication_set_table st2"
					"   JOIN pglogical.replication_set s2 ON s2.set_id = st2.set_id,"
					"   pg_catalog.unnest(st2.set_att_list) a"
					"  WHERE st2.set_reloid = t.relid"
					"    AND s2.set_name::pg_catalog.text = ANY ($1::pg_catalog.text[]))::pg_catalog.text,"
					" pg_catalog.bool_or(st.set_row_filter IS NOT NULL),"
					" pg_catalog.bool_or(s.replicate_insert), pg_catalog.bool_or(s.replicate_update),"
					" pg_catalog.bool_or(s.replicate_delete), pg_catalog.bool_or(s.replicate_truncate),"
					" (SELECT tg.tgenabled::pg_catalog.text || tg.tgname::pg_catalog.text"
					"   FROM pg_catalog.pg_trigger tg" ASH_PGL_QUEUE_TRUNCATE_OF("t.relid")
					"  ORDER BY tg.tgenabled = 'A' DESC, tg.oid LIMIT 1),"
					" " ASH_SOURCE_ORIGINS_SQL
					" FROM pglogical.tables t"
					" JOIN pglogical.local_node n ON true"
					" JOIN pglogical.replication_set s"
					"   ON s.set_name = t.set_name AND s.set_nodeid = n.node_id"
					" JOIN pglogical.replication_set_table st"
					"   ON st.set_id = s.set_id AND st.set_reloid = t.relid"
					" WHERE t.set_name::pg_catalog.text = ANY ($1::pg_catalog.text[])"
					" GROUP BY t.relid, 1, 2 ORDER BY 1, 2",
					1, spec->replication_sets, NULL, NULL);
	}
	else
	{
		/* what the publication promises (publish_via_partition_root: 13+) */
		res = probe(conn, conn->server_version >= 130000 ?
					"SELECT pubinsert, pubupdate, pubdelete, pubtruncate, pubviaroot"
					" FROM pg_catalog.pg_publication WHERE pubname = $1" :
					"SELECT pubinsert, pubupdate, pubdelete, pubtruncate, false"
					" FROM pg_catalog.pg_publication WHERE pubname = $1",
					1, spec->publication, NULL, NULL);
		if (PQntuples(res) != 1)
		{
			PQclear(res);
			return "source_publication_missing";
		}
		if (pub != NULL)
		{
			pub->known = true;
			pub->insert = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
			pub->update = strcmp(PQgetvalue(res, 0, 1), "t") == 0;
			pub->delete = strcmp(PQgetvalue(res, 0, 2), "t") == 0;
			pub->truncate = strcmp(PQgetvalue(res, 0, 3), "t") == 0;
			pub->via_root = strcmp(PQgetvalue(res, 0, 4), "t") == 0;
		}
		PQclear(res);

		/*
		 * pgoutput sends only the publication's column list and only rows
		 * its row filter passes (15+; the view resolves a partition's
		 * filter and list through publish_via_partition_root).
		 */
		res = probe(conn, conn->server_version >= 150000 ?
					"SELECT schemaname::pg_catalog.text, tablename::pg_catalog.text,"
					" attnames::pg_catalog.text[]::pg_catalog.text, rowfilter IS NOT NULL"
					" FROM pg_catalog.pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2" :
					"SELECT schemaname::pg_catalog.text, tablename::pg_catalog.text, NULL, false"
					" FROM pg_catalog.pg_publication_tables WHERE pubname = $1 ORDER BY 1, 2",
					1, spec->publication, NULL, NULL);
	}

	for (int i = 0; i < PQntuples(res); i++)
	{
		AshSourceRel *r = new_rel(PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
								  PQgetisnull(res, i, 2) ? NULL : PQgetvalue(res, i, 2));

		r->row_filter = PQnfields(res) > 3 && strcmp(PQgetvalue(res, i, 3), "t") == 0;
		if (PQnfields(res) > 7)
		{
			/* pglogical: sends generated columns too, skips dropped ones */
			r->generated = true;
			r->set_actions.known = true;
			r->set_actions.insert = strcmp(PQgetvalue(res, i, 4), "t") == 0;
			r->set_actions.update = strcmp(PQgetvalue(res, i, 5), "t") == 0;
			r->set_actions.delete = strcmp(PQgetvalue(res, i, 6), "t") == 0;
			r->set_actions.truncate = strcmp(PQgetvalue(res, i, 7), "t") == 0;
			if (r->set_actions.truncate)
				r->truncate_unqueued =
					truncate_unqueued(r->name.nspname, r->name.relname,
									  PQgetisnull(res, i, 8) ? NULL : PQgetvalue(res, i, 8),
									  strcmp(PQgetvalue(res, i, 9), "t") == 0);
		}
		*rels = lappend(*rels, r);
	}
	PQclear(res);

	/*
	 * pglogical.tables leaves out a partitioned table a set holds; listed,
	 * it is judged (ash_source_judge_coverage: its partitions stream, it
	 * never does).
	 */
	if (strcmp(decoder, "pglogical") == 0)
	{
		res = probe(conn, "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text"
					" FROM pglogical.replication_set_table st"
					" JOIN pglogical.replication_set s ON s.set_id = st.set_id"
					" JOIN pg_catalog.pg_class c ON c.oid = st.set_reloid"
					" JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
					" WHERE c.relkind = 'p' AND s.set_name::pg_catalog.text = ANY ($1::pg_catalog.text[])"
					" GROUP BY 1, 2 ORDER BY 1, 2",
					1, spec->replication_sets, NULL, NULL);
		for (int i = 0; i < PQntuples(res); i++)
		{
			AshSourceRel *r = new_rel(PQgetvalue(res, i, 0), PQgetvalue(res, i, 1), NULL);

			r->generated = true;
			*rels = lappend(*rels, r);
		}
		PQclear(res);
	}
	return NULL;
}

/*
 * The mapped tables with rows.  A table read under a lock another session
 * holds (ALTER TABLE, VACUUM FULL, ...) is judged by the source's estimate
 * after a second, one never estimated counting as one with rows: the
 * question is asked at a go-forward start and by doctor, neither of which
 * may wait for the lock's end.  Without SELECT on it, by its estimate too.
 */
List *
ash_source_tables_with_rows(AshConn *conn, const List *mappings, const List *rels)
{
	List	   *out = NIL;
	ListCell   *lc;

	PQclear(ash_conn_exec(conn, "SET lock_timeout = '1s'", false));
	foreach(lc, (List *) rels)
	{
		AshSourceRel *r = lfirst(lc);
		char	   *qname;
		PGresult   *res;
		bool		rows;
		bool		locked = false;

		if (!r->exists || !ash_coverage_is_mapped(mappings, r->name.nspname, r->name.relname))
			continue;
		qname = quote_qualified_identifier(r->name.nspname, r->name.relname);
		res = NULL;
		if (r->has_select)
		{
			/* an inheritance parent's own rows: its children are their own */
			res = ash_conn_exec_params(conn, psprintf("SELECT EXISTS (SELECT 1 FROM %s%s)",
													  r->desc.relkind == RELKIND_PARTITIONED_TABLE ?
													  "" : "ONLY ", qname),
									   0, NULL, true);
			if (strcmp(ash_conn_last_sqlstate, "55P03") == 0)
			{
				PQclear(res);
				res = NULL;
				locked = true;
			}
			else if (PQresultStatus(res) != PGRES_TUPLES_OK)
				ash_conn_report_result(res, "probe");
		}
		if (res == NULL)
			res = probe(conn, psprintf("SELECT c.reltuples %s 0 FROM pg_catalog.pg_class c"
									   " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
									   " WHERE n.nspname = $1 AND c.relname = $2",
									   locked ? "<>" : ">"),
						2, r->name.nspname, r->name.relname, NULL);
		rows = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) &&
			strcmp(PQgetvalue(res, 0, 0), "t") == 0;
		PQclear(res);
		if (rows)
			out = lappend(out, qname);
	}
	PQclear(ash_conn_exec(conn, "RESET lock_timeout", false));
	return out;
}

void
ash_source_describe_tables(AshConn *conn, List *rels)
{
	ListCell   *lc;

	foreach(lc, rels)
	{
		AshSourceRel *r = lfirst(lc);
		const char *query = conn->server_version < 120000 ? describe_sql_pre12 :
		r->generated ? describe_sql_generated : describe_sql;
		PGresult   *res;
		StringInfoData withheld;
		int			n;

		res = probe(conn, query, 3, r->name.nspname, r->name.relname, r->attnames);
		n = PQntuples(res);
		r->exists = n > 0;
		r->has_select = false;
		r->desc.nspname = r->name.nspname;
		r->desc.relname = r->name.relname;
		r->desc.replident = 'd';
		r->desc.natts = 0;
		r->desc.cols = palloc0(sizeof(AshSourceColumn) * Max(n, 1));
		r->desc.row_filter = r->row_filter;
		r->desc.truncate_unqueued = r->truncate_unqueued;
		r->desc.withheld = NULL;
		r->desc.unique_known = true;
		initStringInfo(&withheld);
		for (int i = 0; i < n; i++)
		{
			AshSourceColumn *c;

			r->desc.replident = PQgetvalue(res, i, 0)[0];
			r->has_select = strcmp(PQgetvalue(res, i, 1), "t") == 0;
			r->desc.relkind = PQgetvalue(res, i, 7)[0];
			if (PQgetisnull(res, i, 2))
				continue;		/* a table without live columns */
			if (strcmp(PQgetvalue(res, i, 6), "t") != 0)
			{
				/* left out by the publication's column list */
				appendStringInfo(&withheld, "%s%s", withheld.len ? ", " : "",
								 quote_identifier(PQgetvalue(res, i, 2)));
				continue;
			}
			c = &r->desc.cols[r->desc.natts++];
			c->name = pstrdup(PQgetvalue(res, i, 2));
			c->type_oid = (uint32) strtoul(PQgetvalue(res, i, 3), NULL, 10);
			c->type_name = PQgetisnull(res, i, 4) ? NULL : pstrdup(PQgetvalue(res, i, 4));
			c->in_identity = strcmp(PQgetvalue(res, i, 5), "t") == 0;
			c->typmod = PQgetisnull(res, i, 8) ? -1 : (int32) strtol(PQgetvalue(res, i, 8), NULL, 10);
			c->type_display = PQgetisnull(res, i, 9) ? NULL : pstrdup(PQgetvalue(res, i, 9));
			c->toastable = strcmp(PQgetvalue(res, i, 10), "t") == 0;
			c->unique_in = PQgetisnull(res, i, 11) ? NULL : pstrdup(PQgetvalue(res, i, 11));
			c->type_shape = PQgetisnull(res, i, 12) ? NULL : pstrdup(PQgetvalue(res, i, 12));
			c->base_type_oid = PQgetisnull(res, i, 13) ? c->type_oid :
				(uint32) strtoul(PQgetvalue(res, i, 13), NULL, 10);
		}
		PQclear(res);
		if (withheld.len > 0)
			r->desc.withheld = withheld.data;
		else
			pfree(withheld.data);
	}
}

const char *
ash_source_read_table_set(AshConn *conn, const AshTableSetSpec *spec,
						  List **rels, AshPublicationFacts *pub)
{
	const char *volatile absent = NULL;

	PQclear(ash_conn_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", false));
	PG_TRY();
	{
		absent = ash_source_fetch_table_set(conn, spec, rels, pub);
		if (absent == NULL)
			ash_source_describe_tables(conn, *rels);
	}
	PG_CATCH();
	{
		/*
		 * Best effort, and only when the source is idle in the snapshot (a
		 * lost connection or an interrupted query is the caller's to handle):
		 * the doctor goes on probing on this connection.
		 */
		PGTransactionStatusType ts = PQtransactionStatus(conn->conn);

		if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)
			PQclear(PQexec(conn->conn, "ROLLBACK"));
		PG_RE_THROW();
	}
	PG_END_TRY();
	PQclear(ash_conn_exec(conn, absent == NULL ? "COMMIT" : "ROLLBACK", false));
	return absent;
}

char *
ash_source_missing_tables(const AshTableSetSpec *spec, List **rels)
{
	bool		configured = spec->decoder != NULL && strcmp(spec->decoder, "wal2json") == 0;
	StringInfoData missing;
	List	   *kept = NIL;
	ListCell   *lc;

	initStringInfo(&missing);
	foreach(lc, *rels)
	{
		AshSourceRel *r = lfirst(lc);

		if (r->exists)
			kept = lappend(kept, r);
		else if (configured)
		{
			appendStringInfo(&missing, "%s%s.%s", missing.len ? ", " : "",
							 quote_identifier(r->name.nspname),
							 quote_identifier(r->name.relname));
			kept = lappend(kept, r);
		}
		/* else: dropped between the two probes, so no longer in the set */
	}
	list_free(*rels);
	*rels = kept;
	return missing.len > 0 ? psprintf("tables: %s", missing.data) : NULL;
}

char *
ash_source_keyless_tables(const AshTableSetSpec *spec, const List *rels)
{
	StringInfoData keyless;
	ListCell   *lc;

	if (spec->decoder == NULL || strcmp(spec->decoder, "wal2json") != 0 || spec->allow_keyless)
		return NULL;
	initStringInfo(&keyless);
	foreach(lc, (List *) rels)
	{
		AshSourceRel *r = lfirst(lc);
		bool		keyed = false;

		if (!r->exists)
			continue;
		for (int i = 0; i < r->desc.natts && !keyed; i++)
			keyed = r->desc.cols[i].in_identity;
		if (!keyed)
			appendStringInfo(&keyless, "%s%s.%s", keyless.len ? ", " : "",
							 quote_identifier(r->name.nspname),
							 quote_identifier(r->name.relname));
	}
	return keyless.len > 0 ? psprintf("tables: %s", keyless.data) : NULL;
}

List *
ash_source_rel_names(const List *rels)
{
	List	   *names = NIL;
	ListCell   *lc;

	foreach(lc, (List *) rels)
		names = lappend(names, &((AshSourceRel *) lfirst(lc))->name);
	return names;
}

void
ash_source_load_mappings(const char *sink_name, List **specs, List **mappings)
{
	ListCell   *lc;

	*specs = ash_mapping_load_sink(sink_name);
	*mappings = NIL;
	foreach(lc, *specs)
		*mappings = lappend(*mappings, ash_coverage_mapping_from_spec(lfirst(lc)));
}

void
ash_source_judge_coverage(const List *specs, const List *mappings, const List *ignored,
						  const List *rels, const AshPublicationFacts *pub,
						  AshSourceCoverage *out)
{
	List	   *names = ash_source_rel_names(rels);
	List	   *tables = NIL;
	ListCell   *lc;
	ListCell   *sc;
	StringInfoData narrow;
	AshPublicationFacts sets;

	memset(out, 0, sizeof(*out));
	initStringInfo(&narrow);
	(void) ash_coverage_judge_table_set(mappings, ignored, names, &out->table_set,
										&out->warnings);
	list_free(names);

	foreach(lc, (List *) rels)
	{
		AshSourceRel *r = lfirst(lc);

		if (r->exists)
			tables = lappend(tables, &r->desc);
	}
	if (pub != NULL)
	{
		/* pglogical: what the sets replicate of every mapped table */
		sets = *pub;
		foreach(lc, (List *) rels)
		{
			AshSourceRel *r = lfirst(lc);

			if (!r->set_actions.known ||
				!ash_coverage_is_mapped(mappings, r->name.nspname, r->name.relname))
				continue;
			sets.insert &= r->set_actions.insert;
			sets.update &= r->set_actions.update;
			sets.delete &= r->set_actions.delete;
			sets.truncate &= r->set_actions.truncate;
		}
		(void) ash_coverage_judge_publication(mappings, &sets, tables, &out->publication);
	}
	list_free(tables);

	/*
	 * A partitioned table listed itself: pgoutput lists one only under
	 * publish_via_partition_root (judged above); wal2json and pglogical
	 * decode its partitions under their own names, so nothing of it would
	 * ever stream, and COPY ... FROM ONLY of it reads no row.
	 */
	if (out->publication.reason == NULL)
	{
		StringInfoData parents;

		initStringInfo(&parents);
		foreach(lc, (List *) rels)
		{
			AshSourceRel *r = lfirst(lc);

			if (r->exists && r->desc.relkind == RELKIND_PARTITIONED_TABLE &&
				!(pub != NULL && pub->known && pub->via_root) &&
				ash_coverage_is_mapped(mappings, r->name.nspname, r->name.relname))
				appendStringInfo(&parents, "%s%s", parents.len > 0 ? ", " : "",
								 quote_qualified_identifier(r->name.nspname, r->name.relname));
		}
		if (parents.len > 0)
		{
			out->publication.reason = "decoder_capability_unsupported";
			out->publication.context =
				psprintf("partitioned %s: the decoder streams its partitions, each under its own name; list and map the partitions",
						 parents.data);
		}
	}

	forboth(lc, (List *) mappings, sc, (List *) specs)
	{
		AshMapping *m = lfirst(lc);
		AshMappingSpec *spec = lfirst(sc);
		ListCell   *rc;

		foreach(rc, (List *) rels)
		{
			AshSourceRel *r = lfirst(rc);

			if (!r->exists || strcmp(r->name.nspname, m->source_schema) != 0 ||
				strcmp(r->name.relname, m->source_table) != 0)
				continue;
			if (!ash_coverage_judge_table(m, spec->history_business_key, &r->desc,
										  &out->columns))
				return;
			if (ash_coverage_narrowing(m, &r->desc, &narrow))
				out->narrowing.reason = "target_column_narrower";
		}
	}
	memset(&out->columns, 0, sizeof(out->columns));
	if (out->narrowing.reason != NULL)
		out->narrowing.context = narrow.data;
}

/*
 * "col:<name>:<attnum>" and "typ:<name>:<type>.<typmod>" of each live
 * column of table c the decoder sends, the name's UTF-8 bytes in hex (a
 * name may hold the separators).
 */
#define COLUMN_HEXNAME_SQL \
"pg_catalog.encode(pg_catalog.convert_to(a.attname::pg_catalog.text, 'UTF8'), 'hex')"
#define COLUMN_TOKENS_SQL(sent) \
"    UNION ALL" \
"    SELECT 'col:' || " COLUMN_HEXNAME_SQL \
"      || ':' || a.attnum::pg_catalog.text FROM pg_catalog.pg_attribute a" \
"     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped" sent \
"    UNION ALL" \
"    SELECT 'typ:' || " COLUMN_HEXNAME_SQL \
"      || ':' || a.atttypid::pg_catalog.text || '.' || a.atttypmod::pg_catalog.text" \
"      FROM pg_catalog.pg_attribute a" \
"     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped" sent

/*
 * A table a publication holds only through a partitioned ancestor leaves
 * it when detached (and is back when attached again), which changes no row
 * of the publication: its pg_inherits rows up the chain (by the
 * transaction that wrote each) hold it.  Not judged for a table the
 * publication holds itself, or through its own schema (held_own: another
 * condition on p and c), or FOR ALL TABLES.
 */
#define HELD_BY_ANCESTOR_TOKENS_SQL(held_own) \
"    UNION ALL" \
"    SELECT 'def:inh:' || i.inhrelid::pg_catalog.text || ':' || i.xmin::pg_catalog.text" \
"      FROM pg_catalog.pg_partition_ancestors(c.oid) pa" \
"      JOIN pg_catalog.pg_inherits i ON i.inhrelid = pa.relid" \
"     WHERE NOT p.puballtables AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r" \
"       WHERE r.prpubid = p.oid AND r.prrelid = c.oid)" held_own

#define HELD_BY_OWN_SCHEMA_SQL \
" AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace s" \
"   WHERE s.pnpubid = p.oid AND s.pnnspid = c.relnamespace)"

/*
 * A table a publication holds only through its schema leaves it when moved
 * to another schema (and is back when moved again), which changes no row of
 * the publication: its row type's pg_type row, by the transaction that last
 * wrote it, holds it (SET SCHEMA and RENAME rewrite it, and OWNER TO, which
 * the catalog cannot tell apart; ADD COLUMN, GRANT, ANALYZE do not).
 */
#define HELD_BY_SCHEMA_TOKENS_SQL \
"    UNION ALL" \
"    SELECT 'def:row:' || ty.oid::pg_catalog.text || ':' || ty.xmin::pg_catalog.text" \
"      FROM pg_catalog.pg_type ty WHERE ty.oid = c.reltype AND NOT p.puballtables" \
"       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_publication_rel r" \
"        WHERE r.prpubid = p.oid AND r.prrelid = c.oid)" \
"       AND EXISTS (SELECT 1 FROM pg_catalog.pg_publication_namespace s" \
"        WHERE s.pnpubid = p.oid AND s.pnnspid = c.relnamespace)"

/*
 * The source's WAL position once the membership was read (column 5): every
 * catalog change the read saw committed before it, so a description
 * decoded from there on shows the tables under the names read, unless they
 * were renamed since (relmap.c).  A standby's: what it replayed.
 */
#define SOURCE_WAL_POSITION_SQL \
"(CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn()" \
"   ELSE pg_catalog.pg_current_wal_lsn() END)::pg_catalog.text"
#define MEMBERSHIP_READ_LSN_SQL ", " SOURCE_WAL_POSITION_SQL

XLogRecPtr
ash_source_wal_position(AshConn *conn)
{
	PGresult   *res = ash_conn_exec(conn, "SELECT " SOURCE_WAL_POSITION_SQL, false);
	uint32		hi,
				lo;

	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0) ||
		sscanf(PQgetvalue(res, 0, 0), "%X/%X", &hi, &lo) != 2)
	{
		PQclear(res);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: unexpected answer from the source")));
	}
	PQclear(res);
	return ((uint64) hi << 32) | lo;
}

char *
ash_source_publication_tables_sql(AshConn *conn)
{
	/* pgoutput sends no generated column (before 12 there is none) */
	return psprintf("SELECT pt.schemaname::pg_catalog.text, pt.tablename::pg_catalog.text,"
					"  CASE WHEN c.reltuples >= 0 THEN c.reltuples::pg_catalog.int8 END,"
					"  (SELECT pg_catalog.string_agg(m.tok, ',' ORDER BY m.tok) FROM ("
					"    SELECT 'def:' || p.oid::pg_catalog.text || ':' || p.xmin::pg_catalog.text"
					"    UNION ALL"
					"    SELECT 'def:tbl:' || c.oid::pg_catalog.text"
					COLUMN_TOKENS_SQL("%s")
					"%s"
					"    UNION ALL"
					"    SELECT 'all:' || p.oid::pg_catalog.text WHERE p.puballtables"
					"    UNION ALL"
					"    SELECT 'rel:' || r.oid::pg_catalog.text FROM pg_catalog.pg_publication_rel r"
					"     WHERE r.prpubid = p.oid AND (r.prrelid = c.oid OR r.prrelid IN"
					"      (SELECT a.relid FROM pg_catalog.pg_partition_ancestors(c.oid) a))"
					"%s) m(tok))"
					MEMBERSHIP_READ_LSN_SQL
					"  FROM pg_catalog.pg_publication_tables pt"
					"  JOIN pg_catalog.pg_publication p ON p.pubname = pt.pubname"
					"  JOIN pg_catalog.pg_namespace n ON n.nspname = pt.schemaname"
					"  JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename"
					" WHERE pt.pubname = $1 ORDER BY 1, 2",
					conn->server_version < 120000 ? "" : " AND a.attgenerated = ''",
					conn->server_version < 120000 ? "" : " AND a.attgenerated = ''",
					conn->server_version < 120000 ? "" : conn->server_version < 150000 ?
					HELD_BY_ANCESTOR_TOKENS_SQL("") :
					HELD_BY_ANCESTOR_TOKENS_SQL(HELD_BY_OWN_SCHEMA_SQL) HELD_BY_SCHEMA_TOKENS_SQL,
					conn->server_version < 150000 ? "" :
					"    UNION ALL"
					"    SELECT 'ns:' || s.oid::pg_catalog.text FROM pg_catalog.pg_publication_namespace s"
					"     WHERE s.pnpubid = p.oid AND (s.pnnspid = c.relnamespace OR s.pnnspid IN"
					"      (SELECT ac.relnamespace FROM pg_catalog.pg_partition_ancestors(c.oid) a"
					"        JOIN pg_catalog.pg_class ac ON ac.oid = a.relid))");
}

/*
 * A pglogical table is held by its sets' rows and each set's own row (the
 * transactions that wrote them: the rows have no OID), its OID and columns,
 * and its TRUNCATE trigger by the transaction that last wrote it (disabled
 * and enabled again since, a TRUNCATE in between may have queued nothing).
 */
const char *
ash_source_replication_set_tables_sql(void)
{
#define ASH_SETS_OF_C \
	" FROM pglogical.replication_set_table rst" \
	" JOIN pglogical.replication_set rs ON rs.set_id = rst.set_id" \
	" WHERE rst.set_reloid = c.oid AND rs.set_name::pg_catalog.text = ANY ($1::pg_catalog.text[])"
	return "SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text,"
		"  CASE WHEN c.reltuples >= 0 THEN c.reltuples::pg_catalog.int8 END,"
		"  (SELECT pg_catalog.string_agg(m.tok, ',' ORDER BY m.tok) FROM ("
		"    SELECT 'set:' || rst.set_id::pg_catalog.text || ':' || rst.xmin::pg_catalog.text"
		ASH_SETS_OF_C
		"    UNION ALL"
		"    SELECT 'def:set:' || rs.set_id::pg_catalog.text || ':' || rs.xmin::pg_catalog.text"
		ASH_SETS_OF_C
		"    UNION ALL"
		"    SELECT 'def:tbl:' || c.oid::pg_catalog.text"
		COLUMN_TOKENS_SQL("")
		"    UNION ALL"
		"    SELECT 'def:trg:' || tg.oid::pg_catalog.text || ':' || tg.xmin::pg_catalog.text"
		"      FROM pg_catalog.pg_trigger tg" ASH_PGL_QUEUE_TRUNCATE_OF("c.oid")
		"    ) m(tok))"
		MEMBERSHIP_READ_LSN_SQL
		"  FROM pg_catalog.pg_class c"
		"  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
		" WHERE EXISTS (SELECT 1" ASH_SETS_OF_C ")"
		" ORDER BY 1, 2";
#undef ASH_SETS_OF_C
}

/* One element of a text[] literal: quoted, backslash and quote escaped. */
static void
append_array_element(StringInfo buf, const char *s)
{
	appendStringInfoString(buf, buf->len > 1 ? ",\"" : "\"");
	for (; *s; s++)
	{
		if (*s == '"' || *s == '\\')
			appendStringInfoChar(buf, '\\');
		appendStringInfoChar(buf, *s);
	}
	appendStringInfoChar(buf, '"');
}

/*
 * wal2json's table set, the configured tables ($1 schemas, $2 names, text[]
 * literals in step): it has no membership, each table is held by its OID
 * and its columns (generated ones too: wal2json sends them), and by its
 * row type's pg_type row: wal2json selects tables by name as it decodes,
 * so a table renamed away and back (RENAME or SET SCHEMA, which rewrite
 * that row) had changes it never sent.
 */
static const char *wal2json_tables_sql =
"SELECT n.nspname::pg_catalog.text, c.relname::pg_catalog.text,"
"  CASE WHEN c.reltuples >= 0 THEN c.reltuples::pg_catalog.int8 END,"
"  (SELECT pg_catalog.string_agg(m.tok, ',' ORDER BY m.tok) FROM ("
"    SELECT 'def:tbl:' || c.oid::pg_catalog.text"
COLUMN_TOKENS_SQL("")
"    UNION ALL"
"    SELECT 'def:row:' || ty.oid::pg_catalog.text || ':' || ty.xmin::pg_catalog.text"
"      FROM pg_catalog.pg_type ty WHERE ty.oid = c.reltype"
"    ) m(tok))"
MEMBERSHIP_READ_LSN_SQL
"  FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]),"
"   pg_catalog.unnest($2::pg_catalog.text[])) AS s(nsp, rel)"
"  JOIN pg_catalog.pg_namespace n ON n.nspname = s.nsp"
"  JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = s.rel"
" ORDER BY 1, 2";

PGresult *
ash_source_table_set_membership(AshConn *conn, const AshTableSetSpec *spec)
{
	PGresult   *res;
	const char *params[2];
	const char *decoder = spec->decoder;

	if (decoder != NULL && strcmp(decoder, "pgoutput") == 0 && spec->publication != NULL)
	{
		params[0] = spec->publication;
		res = ash_conn_exec_params(conn, ash_source_publication_tables_sql(conn), 1, params, false);
	}
	else if (decoder != NULL && strcmp(decoder, "pglogical") == 0 && spec->replication_sets != NULL)
	{
		params[0] = spec->replication_sets;
		res = ash_conn_exec_params(conn, ash_source_replication_set_tables_sql(), 1, params, false);
	}
	else if (decoder != NULL && strcmp(decoder, "wal2json") == 0 && spec->tables != NIL)
	{
		StringInfoData nsps;
		StringInfoData rels;
		ListCell   *lc;

		initStringInfo(&nsps);
		initStringInfo(&rels);
		appendStringInfoChar(&nsps, '{');
		appendStringInfoChar(&rels, '{');
		foreach(lc, (List *) spec->tables)
		{
			AshSourceName *n = lfirst(lc);

			append_array_element(&nsps, n->nspname);
			append_array_element(&rels, n->relname);
		}
		appendStringInfoChar(&nsps, '}');
		appendStringInfoChar(&rels, '}');
		params[0] = nsps.data;
		params[1] = rels.data;
		res = ash_conn_exec_params(conn, wal2json_tables_sql, 2, params, false);
	}
	else
		return NULL;
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "table set membership");
	return res;
}

void
ash_source_table_set_of(const AshPipelineConfig *cfg, AshTableSetSpec *spec)
{
	ListCell   *lc;
	List	   *names = NIL;

	/* stored as (schema, table) Lists: the worker restarts on a change */
	foreach(lc, cfg->tables)
	{
		AshSourceName *n = palloc(sizeof(AshSourceName));

		n->nspname = linitial((List *) lfirst(lc));
		n->relname = lsecond((List *) lfirst(lc));
		names = lappend(names, n);
	}
	memset(spec, 0, sizeof(*spec));
	spec->decoder = cfg->decoder;
	spec->publication = cfg->publication;
	spec->replication_sets = cfg->replication_sets;
	spec->tables = names;
	spec->allow_keyless = cfg->allow_keyless_tables;
}

/* Is tok one of the comma-separated tokens of list? */
static bool
has_token(const char *list, const char *tok)
{
	size_t		len = strlen(tok);

	for (const char *p = strstr(list, tok); p != NULL; p = strstr(p + 1, tok))
		if ((p == list || p[-1] == ',') && (p[len] == ',' || p[len] == '\0'))
			return true;
	return false;
}

/* Does the mapping leave the column out (hexname: its UTF-8 name in hex)? */
static bool
column_skipped(const char *hexname, size_t len, const AshMapping *map)
{
	ListCell   *lc;

	foreach(lc, map->skip)
	{
		const char *name = lfirst(lc);
		char	   *utf8 = pg_server_to_any(name, strlen(name), PG_UTF8);
		size_t		n = strlen(utf8);
		char	   *hex = palloc(n * 2 + 1);
		bool		same;

		hex[hex_encode(utf8, n, hex)] = '\0';
		same = strlen(hex) == len && strncmp(hex, hexname, len) == 0;
		pfree(hex);
		if (same)
			return true;
	}
	return false;
}

/*
 * The token of now that begins as tok does, up to its last ':' (NULL:
 * none); *toklen its length.
 */
static const char *
token_like(const char *tok, const char *now, size_t *toklen)
{
	size_t		prefix = strrchr(tok, ':') - tok + 1;
	const char *p = now;

	while (*p != '\0')
	{
		*toklen = strcspn(p, ",");
		if (*toklen >= prefix && strncmp(p, tok, prefix) == 0)
			return p;
		p += *toklen;
		if (*p == ',')
			p++;
	}
	return NULL;
}

/* Does now hold tok changed, after its last ':'?  (None: false.) */
static bool
token_changed(const char *tok, const char *now)
{
	size_t		toklen;
	const char *p = token_like(tok, now, &toklen);

	return p != NULL && (toklen != strlen(tok) || strncmp(p, tok, toklen) != 0);
}

/*
 * A "col:<hexname>:<attnum>" token of then: does its name stand now for
 * another column (dropped and added again, or another renamed into the
 * name)?  A column gone now is not judged here: the coverage judges a
 * declared one (source_column_missing), the stream one it sees dropped;
 * one dropped while stopped leaves the mirror's values as they were
 * (docs/reasons.md#source_column_missing).  One the mapping skips is not
 * written, and an append log's events keep what they held: neither is
 * judged.
 */
static bool
column_replaced(const char *tok, const char *now, const AshMapping *map)
{
	const char *num = strrchr(tok, ':');

	if (num == NULL || num < tok + 4)
		return false;
	if (map != NULL && (map->append_log || column_skipped(tok + 4, num - tok - 4, map)))
		return false;
	return token_changed(tok, now);
}

/*
 * A "typ:<hexname>:<type>.<typmod>" token of then: was the column retyped
 * since in a way that rewrote its values at the source (numeric(10,2) to
 * (10,1) rounded them, timestamp to timestamptz read them anew), outside
 * any stream?  A widening keeps them (ash_coverage_retype_keeps_values).
 * Columns are judged as column_replaced judges them; a token recorded
 * recorded by an earlier release has none to compare.
 */
static bool
column_retyped(const char *tok, const char *now, const AshMapping *map)
{
	const char *sep = strrchr(tok, ':');
	const char *p;
	size_t		toklen;
	unsigned int old_type,
				new_type;
	int			old_typmod,
				new_typmod;

	if (sep == NULL || sep < tok + 4)
		return false;
	if (map != NULL && (map->append_log || column_skipped(tok + 4, sep - tok - 4, map)))
		return false;
	p = token_like(tok, now, &toklen);
	if (p == NULL)
		return false;
	if (sscanf(sep + 1, "%u.%d", &old_type, &old_typmod) != 2 ||
		sscanf(p + (sep + 1 - tok), "%u.%d", &new_type, &new_typmod) != 2)
		return true;			/* unreadable: not proven the same */
	return !ash_coverage_retype_keeps_values(old_type, old_typmod, new_type, new_typmod);
}

bool
ash_source_retyped_since(AshConn *conn, uint32 relid, const char *then, const AshMapping *map)
{
	char		oid[16];
	const char *params[1] = {oid};
	PGresult   *res;
	char	   *now;
	char	   *copy;
	char	   *tok;
	char	   *save = NULL;
	bool		retyped = false;

	if (then == NULL || strstr(then, "typ:") == NULL)
		return false;
	snprintf(oid, sizeof(oid), "%u", relid);
	res = ash_conn_exec_params(conn,
							   "SELECT pg_catalog.string_agg('typ:' || " COLUMN_HEXNAME_SQL
							   "   || ':' || a.atttypid::pg_catalog.text || '.'"
							   "   || a.atttypmod::pg_catalog.text, ',')"
							   "  FROM pg_catalog.pg_attribute a"
							   " WHERE a.attrelid = $1::pg_catalog.oid AND a.attnum > 0"
							   "   AND NOT a.attisdropped",
							   1, params, true);
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		ash_conn_report_result(res, "probe");
	now = pstrdup(PQgetisnull(res, 0, 0) ? "" : PQgetvalue(res, 0, 0));
	PQclear(res);
	copy = pstrdup(then);
	for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
		if (strncmp(tok, "typ:", 4) == 0)
			retyped |= column_retyped(tok, now, map);
	pfree(copy);
	pfree(now);
	return retyped;
}

AshTableGap
ash_source_publication_gap(const char *then, const char *now, const AshMapping *map)
{
	char	   *copy;
	char	   *tok;
	char	   *save = NULL;
	bool		held = false;
	bool		members = false;
	bool		redefined = false;
	bool		retyped = false;

	if (then == NULL || now == NULL || then[0] == '\0')
		return ASH_GAP_NONE;
	copy = pstrdup(then);
	for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
	{
		/*
		 * "def:inh:<oid>:<xmin>", "def:row:<oid>:<xmin>": the row written
		 * since; absent now, the table is held some other way (its own
		 * publication row, say), or out, which its other tokens judge.
		 */
		if (strncmp(tok, "def:inh:", 8) == 0 || strncmp(tok, "def:row:", 8) == 0)
			redefined |= token_changed(tok, now);
		else if (strncmp(tok, "def:", 4) == 0)
			redefined |= !has_token(now, tok);
		else if (strncmp(tok, "col:", 4) == 0)
			redefined |= column_replaced(tok, now, map);
		else if (strncmp(tok, "typ:", 4) == 0)
			retyped |= column_retyped(tok, now, map);
		else
		{
			members = true;
			held |= has_token(now, tok);
		}
	}
	pfree(copy);
	if (redefined || (members && !held))
		return ASH_GAP_OUT;
	return retyped ? ASH_GAP_RETYPED : ASH_GAP_NONE;
}
