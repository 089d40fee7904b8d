/*-------------------------------------------------------------------------
 *
 * contract.c
 *	  The contract manifest and its set-monotone transitions.
 *
 * NOTES
 *	  The manifest is a jsonb document built from the catalogs:
 *
 *	  { "version": 1, "decoder": ..., "table_set": {...}, "ignores": [...],
 *		"relations": { "<schema>.<table>": { "target", "strategy",
 *			"append_log", "tenant": null | {...}, "skips": [...],
 *			"columns": { "<source column>": { "target", "attnum", "type",
 *						 "protect": plain | encrypted | bytea } } } } }
 *
 *	  type: format_type's text, schema-qualified outside pg_catalog whatever
 *	  the search_path (TYPE_NAME_SQL); as earlier builds recorded it, a
 *	  visible type unqualified, it is still the same type (RENDERED_SQL).
 *
 *	  tenant.function: the function's regprocedure text as under
 *	  search_path pg_catalog, pg_temp, whatever the session's path
 *	  (FUNCTION_NAME_SQL); as earlier builds recorded it, a visible function
 *	  unqualified, it is still the same function (FUNCTION_RENDERED_SQL).
 *	  The manifest names no other function (tenant_scope_function and a
 *	  route's target_function are not part of the contract) and no other
 *	  object through a search_path-dependent cast: a target is
 *	  format('%I.%I') of its schema and name, a source or ignored name its
 *	  stored canonical text.
 *
 *	  attnum: a target column dropped and added again under its name is
 *	  another column, empty where the mirror had values.  (Manifests
 *	  recorded before it was kept are contained in one with it: admitted as
 *	  an addition.)
 *
 *	  Transitions are set-monotone, which is exactly jsonb containment:
 *	  the new manifest must contain the recorded one (new @> old).  Adding
 *	  a relation, a column (a new key) or an ignore / skip (a new array
 *	  element) keeps containment; re-targeting a column, changing a type, a
 *	  protection or the tenant source, un-skipping, or removing anything
 *	  breaks it -- except widening a target column's type (WIDENS_SQL), which
 *	  is admitted as the wider type, and a type or tenant function name as
 *	  recorded before it was qualified (RENDERED_SQL, FUNCTION_RENDERED_SQL),
 *	  admitted as the qualified name.  A
 *	  decoder or table-set change is reported with its own code.  The
 *	  census re-judges the manifest the same way while streaming:
 *	  an addition (say a target column added ahead of a source column) is
 *	  admitted, anything else halts census_drift.  The fingerprint is SHA-256 of the manifest's canonical text
 *	  (jsonb output is canonical: keys sorted, whitespace normalised).
 *
 *	  This file builds and judges; checkpoint.c records an admitted
 *	  manifest on the checkpoint row (ash_contract_admit,
 *	  ash_contract_recheck).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "nodes/parsenodes.h"
#include "utils/builtins.h"
#include "utils/guc.h"

#include "contract.h"
#include "errors.h"

/*
 * A type as the manifest names it (typ, typmod: expressions of the
 * enclosing query; a target column's a.atttypid, a.atttypmod, or a
 * function argument's type and NULL): format_type's text, its type (an array's
 * element type) schema-qualified unless in pg_catalog.  format_type alone
 * qualifies only a type not visible on the search_path, and the binding
 * (the database's path), the census and the doctor (pg_catalog, pg_temp)
 * would record and compare different names for one type: a domain of
 * public read as retyped by the doctor, a schema taken off the database's
 * path as retyped by the next binding.  A visible type's text is its
 * quoted name, typmod and []: the qualified text is that behind
 * quote_ident(schema) and a dot, as format_type renders an invisible one.
 * (Every caller searches pg_catalog first: its types are always visible.)
 */
#define TYPE_NAME_SQL(typ, typmod) \
"SELECT CASE WHEN tn.nspname OPERATOR(pg_catalog.<>) 'pg_catalog' AND pg_catalog.pg_type_is_visible(te.oid)" \
"         THEN pg_catalog.quote_ident(tn.nspname) OPERATOR(pg_catalog.||) '.'" \
"              OPERATOR(pg_catalog.||) pg_catalog.format_type(" typ ", " typmod ")" \
"         ELSE pg_catalog.format_type(" typ ", " typmod ") END AS name" \
"  FROM pg_catalog.pg_type t" \
"  JOIN pg_catalog.pg_type te ON te.oid OPERATOR(pg_catalog.=) CASE" \
"       WHEN t.typelem OPERATOR(pg_catalog.<>) 0" \
"        AND t.typsubscript OPERATOR(pg_catalog.=) 'pg_catalog.array_subscript_handler'::pg_catalog.regproc" \
"        AND t.typstorage OPERATOR(pg_catalog.<>) 'p' THEN t.typelem ELSE t.oid END" \
"  JOIN pg_catalog.pg_namespace tn ON tn.oid OPERATOR(pg_catalog.=) te.typnamespace" \
" WHERE t.oid OPERATOR(pg_catalog.=) " typ

/*
 * A function as the manifest names it (fn: an oid expression of the
 * enclosing query): its regprocedure text as ash_function_signature
 * (qualname.h) renders it under search_path pg_catalog, pg_temp -- the
 * name, then each argument's type (TYPE_NAME_SQL, no typmod), qualified
 * unless in pg_catalog -- whatever the session's path.  A regprocedure
 * cast to text qualifies only what is not visible on the session's path:
 * the binding (the database's path) recorded public.tenant_of(jsonb) as
 * tenant_of(jsonb), which the doctor (pg_catalog, pg_temp) read as another
 * function, as did the next binding after the database's path changed.
 * NULL when no function has that OID.
 */
#define FUNCTION_NAME_SQL(fn) \
"(SELECT CASE WHEN fpn.nspname OPERATOR(pg_catalog.=) 'pg_catalog' THEN ''" \
"        ELSE pg_catalog.quote_ident(fpn.nspname) OPERATOR(pg_catalog.||) '.' END" \
"        OPERATOR(pg_catalog.||) pg_catalog.quote_ident(fp.proname) OPERATOR(pg_catalog.||) '('" \
"        OPERATOR(pg_catalog.||) coalesce((SELECT pg_catalog.string_agg((" TYPE_NAME_SQL("fa.t", "NULL") "), ','" \
"                                            ORDER BY fa.o)" \
"                                   FROM pg_catalog.unnest(fp.proargtypes::pg_catalog.oid[]) WITH ORDINALITY fa(t, o)), '')" \
"        OPERATOR(pg_catalog.||) ')'" \
"   FROM pg_catalog.pg_proc fp" \
"   JOIN pg_catalog.pg_namespace fpn ON fpn.oid OPERATOR(pg_catalog.=) fp.pronamespace" \
"  WHERE fp.oid OPERATOR(pg_catalog.=) " fn ")"

/*
 * $1 = sink name; one row, one jsonb column.  A tenant_function is rendered
 * as FUNCTION_NAME_SQL of the function its stored text names now (a
 * signature since 1.10.0, qualname.h; before, a regprocedure, rendered
 * under the session's path and resolved under the same path): a function
 * that no longer exists, as the stored text (its number before 1.10.0, its
 * signature since).
 */
static const char *manifest_sql =
"SELECT pg_catalog.jsonb_build_object("
"  'version', 1,"
"  'decoder', p.decoder,"
"  'table_set', CASE p.decoder"
"     WHEN 'pgoutput' THEN pg_catalog.jsonb_build_object('publication', p.publication)"
"     WHEN 'wal2json' THEN pg_catalog.jsonb_build_object('tables', pg_catalog.to_jsonb(p.tables))"
"     ELSE pg_catalog.jsonb_build_object('replication_sets', pg_catalog.to_jsonb(p.replication_sets)) END,"
"  'ignores', pg_catalog.to_jsonb(s.ignored_sources),"
"  'relations', coalesce((SELECT pg_catalog.jsonb_object_agg("
"       pg_catalog.quote_ident(r.source_schema) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.source_table),"
"       pg_catalog.jsonb_build_object("
"         'target', pg_catalog.format('%I.%I', n.nspname, c.relname),"
"         'strategy', r.history_strategy,"
"         'append_log', r.append_log,"
"         'tenant', CASE WHEN r.tenant_strategy IS NULL THEN NULL ELSE pg_catalog.jsonb_build_object("
"              'strategy', r.tenant_strategy, 'column', r.tenant_column,"
"              'function', CASE WHEN r.tenant_function::pg_catalog.text OPERATOR(pg_catalog.~) '^[0-9]+$'"
"                THEN r.tenant_function::pg_catalog.text"
"                ELSE coalesce(" FUNCTION_NAME_SQL("pg_catalog.to_regprocedure(r.tenant_function::pg_catalog.text)") ","
"                              r.tenant_function::pg_catalog.text) END,"
"              'schema_format', r.tenant_schema_format) END,"
"         'skips', pg_catalog.to_jsonb(r.skip),"
"         'columns', coalesce((SELECT pg_catalog.jsonb_object_agg(m.src, pg_catalog.jsonb_build_object("
"              'target', a.attname,"
"              'attnum', a.attnum,"
"              'type', ty.name,"
"              'protect', CASE WHEN m.src OPERATOR(pg_catalog.=) ANY (r.encrypted) THEN 'encrypted'"
"                              WHEN m.src OPERATOR(pg_catalog.=) ANY (r.sensitive) THEN 'bytea'"
"                              ELSE 'plain' END))"
"            FROM pg_catalog.pg_attribute a,"
"            LATERAL (" TYPE_NAME_SQL("a.atttypid", "a.atttypmod") ") ty,"
"            LATERAL (SELECT coalesce((SELECT e.key FROM pg_catalog.jsonb_each_text(r.column_map) e"
"                                       WHERE e.value OPERATOR(pg_catalog.=) a.attname::pg_catalog.text"
"                                       ORDER BY e.key LIMIT 1),"
"                                     a.attname::pg_catalog.text) AS src) m"
"           WHERE a.attrelid OPERATOR(pg_catalog.=) r.target AND a.attnum OPERATOR(pg_catalog.>) 0"
"             AND NOT a.attisdropped AND a.attgenerated OPERATOR(pg_catalog.=) ''), '{}'::pg_catalog.jsonb)))"
"     FROM ash_replicant.resources r"
"     JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) r.target"
"     JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace"
"    WHERE r.sink_name OPERATOR(pg_catalog.=) s.sink_name), '{}'::pg_catalog.jsonb))"
" FROM ash_replicant.sinks s JOIN ash_replicant.pipelines p USING (sink_name)"
" WHERE s.sink_name OPERATOR(pg_catalog.=) $1";

/*
 * Is a target column's type change from o to n a widening: every value the
 * old type held is held by the new one, rendered the same (no scale or
 * padding change)?  varchar(n) to a longer varchar, varchar or text (also
 * as an array's elements); an
 * integer to a larger one or numeric; real to double precision; numeric(p,s)
 * to more integer digits at the same scale, or unconstrained; a time or
 * timestamp to a higher or unconstrained precision.  Anything else changes
 * the contract.  (SQL over format_type texts, o and n substituted; LIKE and
 * split_part, not regular expressions: a worker would keep every compiled
 * pattern cached for its lifetime, megabytes each.)
 */
#define WIDENS_SQL(o, n) \
"(" o " = " n \
" OR (" o " = 'character varying' AND " n " = 'text')" \
" OR CASE WHEN " o " LIKE 'character varying(%)' THEN " n " IN ('text', 'character varying')" \
"     OR (" n " LIKE 'character varying(%)' AND" \
"         pg_catalog.rtrim(pg_catalog.split_part(" n ", '(', 2), ')')::pg_catalog.int4" \
"           >= pg_catalog.rtrim(pg_catalog.split_part(" o ", '(', 2), ')')::pg_catalog.int4)" \
"   ELSE false END" \
" OR CASE WHEN " o " LIKE 'character varying(%)[]' THEN " n " IN ('text[]', 'character varying[]')" \
"     OR (" n " LIKE 'character varying(%)[]' AND" \
"         pg_catalog.split_part(pg_catalog.split_part(" n ", '(', 2), ')', 1)::pg_catalog.int4" \
"           >= pg_catalog.split_part(pg_catalog.split_part(" o ", '(', 2), ')', 1)::pg_catalog.int4)" \
"   ELSE false END" \
" OR (" o " = 'smallint' AND " n " IN ('integer', 'bigint', 'numeric'))" \
" OR (" o " = 'integer' AND " n " IN ('bigint', 'numeric'))" \
" OR (" o " = 'bigint' AND " n " = 'numeric')" \
" OR (" o " = 'real' AND " n " = 'double precision')" \
" OR CASE WHEN " o " LIKE 'numeric(%,%)' THEN " n " = 'numeric'" \
"     OR (" n " LIKE 'numeric(%,%)'" \
"         AND pg_catalog.rtrim(pg_catalog.split_part(" n ", ',', 2), ')')" \
"           = pg_catalog.rtrim(pg_catalog.split_part(" o ", ',', 2), ')')" \
"         AND pg_catalog.split_part(pg_catalog.split_part(" n ", '(', 2), ',', 1)::pg_catalog.int4" \
"           >= pg_catalog.split_part(pg_catalog.split_part(" o ", '(', 2), ',', 1)::pg_catalog.int4)" \
"   ELSE false END" \
" OR CASE WHEN " o " LIKE 'time%(_) with%time zone' THEN" \
"     pg_catalog.split_part(" o ", '(', 1) OPERATOR(pg_catalog.||) pg_catalog.split_part(" o ", ')', 2)" \
"       = CASE WHEN " n " LIKE 'time%(_) with%time zone'" \
"           THEN pg_catalog.split_part(" n ", '(', 1) OPERATOR(pg_catalog.||) pg_catalog.split_part(" n ", ')', 2)" \
"           ELSE " n " END" \
"     AND CASE WHEN " n " LIKE 'time%(_) with%time zone'" \
"           THEN pg_catalog.split_part(pg_catalog.split_part(" n ", '(', 2), ')', 1)::pg_catalog.int4" \
"           ELSE 6 END" \
"       >= pg_catalog.split_part(pg_catalog.split_part(" o ", '(', 2), ')', 1)::pg_catalog.int4" \
"   ELSE false END)"

/*
 * Is n, a target column's type as the manifest names it now
 * (TYPE_NAME_SQL), the type a manifest recorded by a build before
 * 2026-12-07 named o?  Those recorded format_type's text under the
 * binding's search_path: a type visible there unqualified.  So o is n
 * without its "schema." when o names a type of that schema by its quoted
 * name (then a typmod or []) and no other schema, pg_catalog included, has
 * a type of that name: o could mean no other.  A name two schemas hold
 * stays a change (a reset accepts it).
 */
#define RENDERED_SQL(o, n) \
"EXISTS (SELECT FROM pg_catalog.pg_type rt" \
"   JOIN pg_catalog.pg_namespace rn ON rn.oid OPERATOR(pg_catalog.=) rt.typnamespace" \
"  WHERE rn.nspname OPERATOR(pg_catalog.<>) 'pg_catalog'" \
"    AND " n " OPERATOR(pg_catalog.=) (pg_catalog.quote_ident(rn.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) " o ")" \
"    AND pg_catalog.left(" o ", pg_catalog.length(pg_catalog.quote_ident(rt.typname)))" \
"        OPERATOR(pg_catalog.=) pg_catalog.quote_ident(rt.typname)" \
"    AND pg_catalog.substr(" o ", pg_catalog.length(pg_catalog.quote_ident(rt.typname)) OPERATOR(pg_catalog.+) 1, 1)" \
"        IN ('', '(', '[')" \
"    AND NOT EXISTS (SELECT FROM pg_catalog.pg_type ru WHERE ru.typname OPERATOR(pg_catalog.=) rt.typname" \
"                       AND ru.oid OPERATOR(pg_catalog.<>) rt.oid))"

/*
 * Is n, a tenant function as the manifest names it now (FUNCTION_NAME_SQL),
 * the function a manifest recorded by a build before 2026-12-07 named o?
 * Those recorded its regprocedure text under the binding's search_path: a
 * function visible there unqualified.  So o is n without its "schema."
 * (its argument types as n has them: a tenant function takes jsonb) when
 * no other function, pg_catalog's included, has that name and those
 * argument types: o could mean no other.  A name two schemas hold stays a
 * change (a reset accepts it).
 */
#define FUNCTION_RENDERED_SQL(o, n) \
"EXISTS (SELECT FROM pg_catalog.pg_proc rp" \
"   JOIN pg_catalog.pg_namespace rpn ON rpn.oid OPERATOR(pg_catalog.=) rp.pronamespace" \
"  WHERE rp.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(" n ")" \
"    AND rpn.nspname OPERATOR(pg_catalog.<>) 'pg_catalog'" \
"    AND " n " OPERATOR(pg_catalog.=) (pg_catalog.quote_ident(rpn.nspname) OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) " o ")" \
"    AND NOT EXISTS (SELECT FROM pg_catalog.pg_proc ru WHERE ru.proname OPERATOR(pg_catalog.=) rp.proname" \
"                       AND ru.proargtypes OPERATOR(pg_catalog.=) rp.proargtypes" \
"                       AND ru.oid OPERATOR(pg_catalog.<>) rp.oid))"

/* a relation's recorded tenant function, and the rebuilt manifest's */
#define OLD_FUNCTION "(fv->'tenant'->>'function')"
#define NEW_FUNCTION "(m.doc->'relations'->fk->'tenant'->>'function')"

/*
 * The recorded manifest c with each tenant function that the rebuilt one
 * names as FUNCTION_RENDERED_SQL admits replaced by the rebuilt one's.
 */
#define FUNCTIONS_QUALIFIED_SQL(c) \
"pg_catalog.jsonb_set(" c ", '{relations}', coalesce((" \
"  SELECT pg_catalog.jsonb_object_agg(fk, CASE" \
"      WHEN pg_catalog.jsonb_typeof(fv->'tenant') OPERATOR(pg_catalog.=) 'object'" \
"       AND " OLD_FUNCTION " IS DISTINCT FROM " NEW_FUNCTION \
"       AND " FUNCTION_RENDERED_SQL(OLD_FUNCTION, NEW_FUNCTION) \
"      THEN pg_catalog.jsonb_set(fv, '{tenant,function}', m.doc->'relations'->fk->'tenant'->'function')" \
"      ELSE fv END)" \
"   FROM pg_catalog.jsonb_each(" c "->'relations') f(fk, fv)), '{}'::pg_catalog.jsonb))"

/* a column's recorded type, and its type in the rebuilt manifest */
#define OLD_TYPE "(cv->>'type')"
#define NEW_TYPE "(m.doc->'relations'->rk->'columns'->ck->>'type')"

/*
 * The recorded manifest with each target column type that the rebuilt one
 * is admitted for (pred of OLD_TYPE, NEW_TYPE) replaced by the rebuilt
 * one's: containment then admits widening a target column
 * (docs/operations.md "Target DDL while streaming") and a type named as
 * by builds before 2026-12-07.  An unchanged type is never judged again.
 */
#define RETYPED_SQL(pred) \
"pg_catalog.jsonb_set(cur.contract, '{relations}', coalesce((" \
"  SELECT pg_catalog.jsonb_object_agg(rk, CASE WHEN rv ? 'columns' THEN pg_catalog.jsonb_set(rv, '{columns}', coalesce((" \
"    SELECT pg_catalog.jsonb_object_agg(ck, CASE" \
"      WHEN " OLD_TYPE " IS NOT DISTINCT FROM " NEW_TYPE " THEN cv" \
"      WHEN " pred \
"      THEN pg_catalog.jsonb_set(cv, '{type}', m.doc->'relations'->rk->'columns'->ck->'type')" \
"      ELSE cv END)" \
"     FROM pg_catalog.jsonb_each(rv->'columns') c(ck, cv)), '{}'::pg_catalog.jsonb)) ELSE rv END)" \
"   FROM pg_catalog.jsonb_each(cur.contract->'relations') r(rk, rv)), '{}'::pg_catalog.jsonb))"

/*
 * Judge the rebuilt manifest against the stored one, in one statement:
 * returns (stored_present, same_fingerprint, decoder_switch, contained,
 * the manifest).
 */
static const char *judge_sql =
"WITH m AS (SELECT (%s) AS doc),"
" cur AS (SELECT contract, contract_fingerprint FROM ash_replicant.checkpoints"
"          WHERE source_system_id = $2 AND source_database = $3 AND slot_name = $4)"
" SELECT cur.contract IS NOT NULL,"
"        cur.contract_fingerprint IS NOT DISTINCT FROM pg_catalog.sha256(pg_catalog.convert_to(m.doc::pg_catalog.text, 'UTF8')),"
"        cur.contract IS NOT NULL AND (cur.contract->'decoder' IS DISTINCT FROM m.doc->'decoder'"
"             OR cur.contract->'table_set' IS DISTINCT FROM m.doc->'table_set'),"
"        cur.contract IS NULL OR m.doc OPERATOR(pg_catalog.@>) cur.contract,"
"        m.doc"
" FROM m LEFT JOIN cur ON true";

/*
 * Only when containment failed.  cur is the recorded manifest with tenant
 * function names qualified (FUNCTIONS_QUALIFIED_SQL): did that change it
 * (first column)?  Is the rebuilt manifest ($5) cur (second), cur with type
 * names qualified (RENDERED_SQL) (third), or also with target types
 * widened (fourth)?  (A statement of its own: the usual judgement, an
 * unchanged manifest, pays nothing for it.)
 */
static const char *retyped_sql =
"WITH m AS (SELECT $5::pg_catalog.jsonb AS doc),"
" rec AS (SELECT contract FROM ash_replicant.checkpoints"
"          WHERE source_system_id = $2 AND source_database = $3 AND slot_name = $4),"
" cur AS (SELECT " FUNCTIONS_QUALIFIED_SQL("rec.contract") " AS contract, rec.contract AS recorded"
"          FROM m, rec WHERE rec.contract IS NOT NULL)"
" SELECT cur.contract IS DISTINCT FROM cur.recorded,"
"        m.doc OPERATOR(pg_catalog.@>) cur.contract,"
"        m.doc OPERATOR(pg_catalog.@>) " RETYPED_SQL(RENDERED_SQL(OLD_TYPE, NEW_TYPE)) ","
"        m.doc OPERATOR(pg_catalog.@>) "
RETYPED_SQL("(" WIDENS_SQL(OLD_TYPE, NEW_TYPE) " OR " RENDERED_SQL(OLD_TYPE, NEW_TYPE) ")")
" FROM m JOIN cur ON true";

/*
 * The judgement's plan, made once per process: planning the statement (a
 * manifest built from five catalogs) took a census ~6 ms of the worker's
 * time, and the worker applies nothing while the census runs.  Generic:
 * its parameters are keys, and custom plans would plan it again each time.
 * Every name in it is qualified, and the plan cache replans after DDL on
 * what it reads.
 */
static SPIPlanPtr judge_plan = NULL;

static SPIPlanPtr
judge_prepared(Oid *types)
{
	if (judge_plan == NULL)
	{
		char	   *sql = psprintf(judge_sql, manifest_sql);
		SPIPlanPtr	plan = SPI_prepare_cursor(sql, 4, types, CURSOR_OPT_GENERIC_PLAN);

		if (plan == NULL || SPI_keepplan(plan) != 0)
			elog(ERROR, "ash_replicant: could not prepare the contract judgement");
		pfree(sql);
		judge_plan = plan;
	}
	return judge_plan;
}

/* a boolean column of a row: true, not false or NULL */
static bool
column_true(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return !isnull && DatumGetBool(d);
}

bool
ash_contract_judge(const char *sink_name, const char *system_id, const char *database,
				   const char *slot_name, const char *drift_reason, Datum *manifest,
				   bool *stored_out, const char **change_out)
{
	Oid			types[5] = {TEXTOID, TEXTOID, TEXTOID, TEXTOID, JSONBOID};
	Datum		values[5];
	int			ret;
	bool		isnull;
	bool		stored,
				same,
				decoder_switch,
				contained;
	HeapTuple	tup;
	TupleDesc	desc;

	values[0] = CStringGetTextDatum(sink_name);
	values[1] = CStringGetTextDatum(system_id);
	values[2] = CStringGetTextDatum(database);
	values[3] = CStringGetTextDatum(slot_name);

	ret = SPI_execute_plan(judge_prepared(types), values, NULL, false, 1);
	if (ret != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "ash_replicant: could not build the contract manifest");
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	stored = DatumGetBool(SPI_getbinval(tup, desc, 1, &isnull));
	same = DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull));
	decoder_switch = DatumGetBool(SPI_getbinval(tup, desc, 3, &isnull));
	contained = DatumGetBool(SPI_getbinval(tup, desc, 4, &isnull));
	*manifest = SPI_getbinval(tup, desc, 5, &isnull);
	*stored_out = stored;
	if (isnull)
		elog(ERROR, "ash_replicant: empty contract manifest");
	values[4] = *manifest;
	*change_out = NULL;
	if (!contained && !decoder_switch)
	{
		/*
		 * Without JIT: the planner's estimate (jsonb_each's 100 rows, nested,
		 * each with a subquery on pg_type) passes jit_above_cost, and
		 * compiling the statement took ~1.5 s where running it takes ms.
		 */
		int			nest = NewGUCNestLevel();

		(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		ret = SPI_execute_with_args(retyped_sql, 5, types, values, NULL, true, 1);
		AtEOXact_GUC(true, nest);
		if (ret != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: could not judge a widening of the contract");
		if (SPI_processed == 1)
		{
			bool		functions;

			tup = SPI_tuptable->vals[0];
			desc = SPI_tuptable->tupdesc;
			functions = DatumGetBool(SPI_getbinval(tup, desc, 1, &isnull)) && !isnull;
			if (functions && column_true(tup, desc, 2))
				*change_out = "function_names_qualified";
			else if (column_true(tup, desc, 3))
				*change_out = functions ? "function_names_qualified,type_names_qualified" :
					"type_names_qualified";
			else if (column_true(tup, desc, 4))
				*change_out = functions ? "function_names_qualified,type_widened" : "type_widened";
			contained = (*change_out != NULL);
		}
	}

	if (stored && same)
		return false;
	if (decoder_switch)
	{
		ereport(LOG,
				(errmsg("ash_replicant event=checkpoint.conflict sink=%s reason=decoder_contract_incompatible",
						sink_name)));
		ash_halt("decoder_contract_incompatible", "the decoder or table set differs from the recorded contract");
	}
	if (!stored && strcmp(drift_reason, "census_drift") == 0)
		ash_halt("census_drift", "the admitted contract vanished from the checkpoint");
	if (!contained)
	{
		ereport(LOG,
				(errmsg("ash_replicant event=checkpoint.conflict sink=%s reason=%s",
						sink_name, drift_reason)));
		ash_halt(drift_reason,
				 "the mapping changes or removes something the recorded contract holds; reset the checkpoint to accept it");
	}
	return true;
}
