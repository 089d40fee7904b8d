/*-------------------------------------------------------------------------
 *
 * api_verify.c
 *	  ash_replicant_verify(sink, timeout): does the mirror hold every row
 *	  of the source?
 *
 * NOTES
 *	  One row per mapping of the sink: the source table's row count, the
 *	  mirror's, and a verdict (docs/operations.md#verifying-completeness).
 *	  A mapping matches when the mirror has as many rows as the source, the
 *	  same set of keys, and the same values.  The key of a row is what the
 *	  mirror is keyed by: the target's conflict identity (upsert_identity or
 *	  primary key) with the source columns that feed it, or an SCD2
 *	  mapping's business key, whose open versions (valid_to NULL) are the
 *	  mirror's current rows.  The values are every other source column the
 *	  mapping writes, but an encrypted one (its ciphertext differs at every
 *	  write) and a tenant column a tenant_function fills.
 *
 *	  The digest of a key set is the sum, as numeric, of the first 64 bits
 *	  of md5 over the UTF-8 text of each row's key -- ROW(k1, ..., kn)::text,
 *	  each key column cast to the target column's type and then to text,
 *	  under fixed output settings -- computed by each server over its own
 *	  rows; the digest of the rows the same over ROW(k1, ..., kn, v1, ...,
 *	  vm)::text.  It does not depend on row order, and the digests of several
 *	  tables add up: the tenant tables of context tenancy, each read once,
 *	  where a row's values end with its scope (the source's: the text of
 *	  its tenant column as the stream sends it; the mirror's: the scope of
 *	  the table holding it), so a row in another tenant's table differs.
 *	  A source column of a domain is rendered as its base type.  Only "equal"
 *	  or "not equal" leaves this file: a digest of a small key space could
 *	  confirm a guessed key, so it is never returned, logged or put in an
 *	  error.
 *
 *	  A target another sink writes too: the mirror's rows compared are
 *	  those of the tenants the source's rows have (read in the same
 *	  snapshot, each rendered as its target column holds it, passed to the
 *	  mirror's statement as a parameter).
 *
 *	  Consistency.  The source is live: its counts and digests are read in
 *	  ONE REPEATABLE READ READ ONLY transaction of a probe connection whose
 *	  first statement reads pg_current_wal_insert_lsn() as L.  Every
 *	  transaction that snapshot sees has its commit record below L.  Then
 *	  we wait, until the deadline, for the pipeline to have applied
 *	  everything below L -- the checkpoint's end_lsn at or past L, or the
 *	  running worker's acknowledged flush position at or past L (it moves
 *	  past WAL without published changes with the source's keepalives) --
 *	  and read the mirror, one table at a time.  A source commit after the
 *	  snapshot that the mirror already has when it is read shows as a
 *	  mismatch: on a busy source repeat the call (it converges).
 *
 *	  Verdicts: match; mismatch (verify_rows_differ: the counts differ,
 *	  verify_keys_differ: same count, other keys, verify_values_differ:
 *	  the same keys, other values); not_comparable with a
 *	  reason code: verify_append_log (an append log is a change log, not
 *	  the table's state), verify_tenant_scopes_unknown (context tenancy
 *	  without a tenant_scope_function: the tenant tables are unknown; or
 *	  with a tenant_function: a row's scope is unknown to the source; a
 *	  target another sink writes too, without a tenant column), the
 *	  scope function's own failures (snapshot_scope_incomplete,
 *	  tenant_scope_missing, tenant_scope_invalid), destination_table_missing,
 *	  decoder_table_missing (no such source table), privilege_select_missing,
 *	  source_replica_identity (a target key column fed by no source column),
 *	  source_column_missing, config_invalid.  A verify that cannot judge at
 *	  all raises "ash_replicant: verify rejected: <reason>" (unknown sink,
 *	  pipeline not running, source unreachable or not the configured one,
 *	  timeout).
 *
 *	  Who runs what.  The function is SECURITY DEFINER; the mirror is read
 *	  as the sink owner, restricted (owner_scope.c), as the worker writes
 *	  it: a cast to text of a type a target's owner made (CREATE CAST ...
 *	  WITH FUNCTION) runs in that read, and as the definer it ran as a
 *	  superuser whenever a monitor verified.  row_security is off, as in
 *	  the worker: the owner owns the target or bypasses its policies
 *	  (registration's condition), so every row is judged; a target (or a
 *	  context mapping's tenant table) it may no longer read is
 *	  config_invalid.
 *
 *	  No values out: rows carry names, counts and codes; the conninfo,
 *	  libpq's and the source's error texts, a key and a digest never leave
 *	  this file.  A tenant scope function's error is dropped unread.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "access/relation.h"
#include "access/table.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "coverage.h"
#include "errors.h"
#include "libpq_conn.h"
#include "mapping_validate.h"
#include "owner_scope.h"
#include "provenance.h"
#include "qualname.h"
#include "shmem.h"
#include "source_catalog.h"
#include "spi_util.h"

PG_FUNCTION_INFO_V1(ash_replicant_verify);

#define VERDICT_MATCH			"match"
#define VERDICT_MISMATCH		"mismatch"
#define VERDICT_NOT_COMPARABLE	"not_comparable"

/* One mapping: what to compare and what was found. */
typedef struct VerifyTable
{
	AshMapping *m;
	char	   *target;			/* the mapping's target, quoted and
								 * qualified; NULL when it is gone */
	const char *reason;			/* not_comparable when set before judging */
	List	   *key_targets;	/* char *: target key columns */
	List	   *key_sources;	/* char *: the source columns feeding them */
	List	   *key_casts;		/* char *: SQL type of each target column
								 * (built-in base type) or NULL: text */
	List	   *val_targets;	/* char *: the other target columns written */
	List	   *val_sources;	/* char *: the source columns feeding them */
	List	   *val_casts;		/* char *: as key_casts */
	List	   *key_types;		/* Oid: each key target's base type, or
								 * InvalidOid where key_casts is NULL */
	List	   *val_types;		/* Oid: as key_types */
	List	   *key_shown;		/* int: 1 where the source renders the key */
	List	   *val_shown;		/* int: ... the value by its output function */
	char	   *filter;			/* mirror rows compared (SCD2) or NULL */
	bool		partitioned;	/* the source table is partitioned */
	char	   *tenant_source;	/* a target another sink writes too: the */
	char	   *tenant_target;	/* tenant column on either side, and the */
	char	   *tenants;		/* source's tenants (text[] text): the mirror
								 * rows compared are theirs */
	char	   *tenant_cast;	/* as key_casts, for tenant_target */
	Oid			tenant_type;	/* as key_types, for tenant_target */
	bool		tenant_shown;	/* as key_shown, for tenant_source */
	char	   *scope_source;	/* context tenancy: the source column whose
								 * text is a row's scope (its tenant) */
	List	   *scopes;			/* char *: the scope of each mirror table */

	bool		have_source;
	bool		source_unfit;	/* a source value its target cannot hold */
	int64		source_rows;
	char	   *source_digest;
	char	   *source_row_digest;
	bool		have_mirror;
	int64		mirror_rows;
	char	   *mirror_digest;
	char	   *mirror_row_digest;
} VerifyTable;

typedef struct Verify
{
	char	   *sink_name;
	TimestampTz deadline;
	AshPipelineConfig *cfg;		/* its connection is never printed */
	char	   *ext_schema;		/* where ash_replicant_status() is, quoted */
	List	   *tables;			/* VerifyTable * */
	AshConn    *conn;
	XLogRecPtr	source_lsn;		/* L: the source snapshot's insert position */
} Verify;

static bool
comparable(VerifyTable *t)
{
	return t->reason == NULL;
}

static void
not_comparable(VerifyTable *t, const char *reason)
{
	if (t->reason == NULL)
		t->reason = reason;
}

/* Milliseconds left until the deadline (0 when past). */
static int
remaining_ms(Verify *v)
{
	long		ms = TimestampDifferenceMilliseconds(GetCurrentTimestamp(), v->deadline);

	return (int) Min(Max(ms, 0), INT_MAX);
}

/* ---------------------------------------------------------------------
 * The sink, the pipeline and the mappings (destination).
 * ---------------------------------------------------------------------
 */

static char *
get_text(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;

	(void) SPI_getbinval(tup, desc, col, &isnull);
	return isnull ? NULL : SPI_getvalue(tup, desc, col);
}

/*
 * The sink must exist with a configured pipeline; then its configuration
 * as the worker reads it (config.c).
 */
static void
load_sink(Verify *v)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	bool		configured;
	bool		isnull;

	values[0] = CStringGetTextDatum(v->sink_name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	if (SPI_execute_with_args("SELECT p.connection IS NOT NULL"
							  "   AND p.source_system_identifier IS NOT NULL"
							  "   AND p.source_database IS NOT NULL,"
							  "  (SELECT pg_catalog.quote_ident(n.nspname)"
							  "    FROM pg_catalog.pg_extension e"
							  "    JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace"
							  "   WHERE e.extname = 'ash_replicant')"
							  " FROM ash_replicant.sinks s"
							  " LEFT JOIN ash_replicant.pipelines p USING (sink_name)"
							  " WHERE s.sink_name = $1",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the sink failed");
	if (SPI_processed != 1)
		ash_reject(ERRCODE_UNDEFINED_OBJECT, "verify", "config_invalid",
				   "sink \"%s\" does not exist", v->sink_name);
	configured = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
											&isnull)) && !isnull;
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		v->ext_schema = get_text(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	if (!configured)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "verify", "config_invalid",
				   "the pipeline of sink \"%s\" is not configured", v->sink_name);
	v->cfg = ash_config_load(v->sink_name);
}

/*
 * The pipeline must run (healthy or catching up): a halted or stopped one
 * never brings the mirror to the source's position.  Its state is what
 * ash_replicant_status() says.
 */
static void
check_running(Verify *v)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	char	   *state = NULL;
	char	   *reason = NULL;
	MemoryContext cxt = CurrentMemoryContext;

	values[0] = CStringGetTextDatum(v->sink_name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	/* a fresh snapshot at every call: the wait repeats this */
	if (SPI_execute_with_args(psprintf("SELECT state, reason FROM %s.ash_replicant_status($1)",
									   v->ext_schema),
							  1, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the pipeline's status failed");
	if (SPI_processed == 1)
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		state = get_text(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		reason = get_text(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	if (state != NULL && (strcmp(state, "healthy") == 0 || strcmp(state, "catching_up") == 0))
		return;
	if (reason != NULL)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "verify",
				   "verify_pipeline_not_running", "the pipeline of sink \"%s\" is %s: %s",
				   v->sink_name, state ? state : "unknown", reason);
	ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "verify",
			   "verify_pipeline_not_running", "the pipeline of sink \"%s\" is %s",
			   v->sink_name, state ? state : "unknown");
}

static bool
is_context(AshMapping *m)
{
	return m->tenant_strategy != NULL && strcmp(m->tenant_strategy, "context") == 0;
}

static bool
is_scd2(AshMapping *m)
{
	return m->history_strategy != NULL && strcmp(m->history_strategy, "scd2") == 0;
}

/*
 * How a value is cast on the source before it becomes text: to the target
 * column's type when that is built in (the mirror stores what the target
 * type's input made of the source's text: numeric scale, timestamp
 * precision, char padding), else to text alone (*base_type: the target's
 * built-in base type, or InvalidOid).  The cast leaves a length limit out
 * (varchar(n), bit(n)): an explicit cast to one cuts a longer source value
 * to fit without an error, which would hide the difference -- a key too
 * (a key 'abcd' cut to the mirror's 'abc' matched) -- and a bit string is
 * read as varbit (bit alone is bit(1)).
 */
static char *
target_cast(Relation rel, AttrNumber attnum, Oid *base_type)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), attnum - 1);
	int32		typmod = att->atttypmod;
	Oid			base = getBaseTypeAndTypmod(att->atttypid, &typmod);

	*base_type = InvalidOid;
	if (base >= FirstGenbkiObjectId)
		return NULL;
	*base_type = base;
	if (base == VARCHAROID || base == BITOID || base == VARBITOID ||
		get_element_type(base) == VARCHAROID)
	{
		/* a length limit would cut what it compares (spaces, silently) */
		base = base == BITOID ? VARBITOID : base;
		typmod = -1;
	}
	return format_type_extended(base, typmod,
								FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY);
}

/*
 * A source column of a type whose cast to text is not its output function
 * (bool gives 'true' for 't', inet adds '/32', bpchar drops its padding),
 * feeding a target of another type: the stream sends the output function's
 * text, which the target's input reads, so the source renders the column
 * the same way before the target's cast.  xml's cast to text keeps the
 * stored string, an XML declaration included, which its output function
 * (what the stream and the copy send) drops: rendered by the output
 * function into any target, xml too.
 */
static bool
shown_by_output(Oid source_type, Oid target_type)
{
	switch (source_type)
	{
		case BOOLOID:
		case INETOID:
		case CIDROID:
		case BPCHAROID:
			return source_type != target_type;
		case XMLOID:
			return true;
		default:
			return false;
	}
}

/*
 * A source column's type for shown_by_output: its base type, through
 * domains (a domain's output function is its base type's), as the
 * source's catalog says -- the source's OID of a domain means nothing
 * here, a built-in base type's is the same on both servers.
 */
static Oid
source_base_type(AshSourceColumn *c)
{
	return c->base_type_oid != 0 ? c->base_type_oid : c->type_oid;
}

/*
 * May the sink owner read every row of the target, as registration asks of
 * it (the mirror is read as the owner, read_mirror): USAGE on its schema,
 * SELECT on it or on every column, no policy of row-level security
 * applying to it.  Doctor's destination_mappings fails otherwise.
 */
static bool
owner_reads(Relation rel, Oid owner)
{
	Oid			relid = RelationGetRelid(rel);

	return pg_namespace_aclcheck(RelationGetNamespace(rel), owner, ACL_USAGE) == ACLCHECK_OK &&
		(pg_class_aclcheck(relid, owner, ACL_SELECT) == ACLCHECK_OK ||
		 pg_attribute_aclcheck_all(relid, owner, ACL_SELECT, ACLMASK_ALL) == ACLCHECK_OK) &&
		!ash_rls_applies_to_owner(rel, owner);
}

/*
 * May the owner read every table named (a context mapping's tenant tables,
 * quoted qualified names): as owner_reads, so that one it may no longer
 * read is not judged rather than raising its permission error out of
 * verify (test 209).  A table gone meanwhile fails the read as before.
 */
static bool
owner_reads_all(List *tables, Oid owner)
{
	ListCell   *lc;

	foreach(lc, tables)
	{
		char	   *schema;
		char	   *name;
		Oid			relid = InvalidOid;
		Relation	rel;
		bool		ok;

		if (ash_parse_qualified_name(lfirst(lc), &schema, &name))
			relid = get_relname_relid(name, get_namespace_oid(schema, true));
		if (!OidIsValid(relid) || (rel = try_relation_open(relid, AccessShareLock)) == NULL)
			continue;
		ok = owner_reads(rel, owner);
		relation_close(rel, AccessShareLock);
		if (!ok)
			return false;
	}
	return true;
}

/* What a mapping compares, as far as the destination knows it. */
static void
plan_table(Verify *v, VerifyTable *t)
{
	AshMapping *m = t->m;
	char	   *relname = OidIsValid(m->target_relid) ? get_rel_name(m->target_relid) : NULL;
	Relation	rel;
	ListCell   *lc;
	Oid			base;

	if (relname == NULL)
	{
		not_comparable(t, "destination_table_missing");
		return;
	}
	t->target = quote_qualified_identifier(get_namespace_name(get_rel_namespace(m->target_relid)),
										   relname);
	if (ash_config_is_append_log(v->cfg) || m->append_log)
	{
		not_comparable(t, "verify_append_log");
		return;
	}
	/* (a scope function named but dropped fails in scope_tables) */
	if (is_context(m) && !OidIsValid(m->tenant_scope_function) &&
		m->tenant_scope_function_sig == NULL)
	{
		not_comparable(t, "verify_tenant_scopes_unknown");
		return;
	}
	if (is_context(m))
	{
		/*
		 * Which scope's table a row belongs in is part of what is compared:
		 * a row in another tenant's table is a difference.  A
		 * tenant_function decides it here, from the row: the source cannot
		 * say it, and summing the tables would hide a misplaced row.
		 */
		if (m->tenant_column == NULL)
		{
			not_comparable(t, "verify_tenant_scopes_unknown");
			return;
		}
		t->scope_source = m->tenant_column;
	}
	if (m->shared_target && !is_context(m))
	{
		/*
		 * Another sink writes the target too: this sink's rows are those of
		 * the tenants its source has, known only from a tenant column.
		 */
		t->tenant_source = m->tenant_column;
		t->tenant_target = m->tenant_strategy != NULL && m->tenant_column != NULL ?
			(char *) ash_mapping_target_column(m, m->tenant_column) : NULL;
		if (t->tenant_target == NULL)
		{
			not_comparable(t, "verify_tenant_scopes_unknown");
			return;
		}
	}

	rel = table_open(m->target_relid, AccessShareLock);
	/* a context mapping's tables are its scopes' (scope_tables) */
	if (!is_context(m) && !owner_reads(rel, v->cfg->owner))
	{
		table_close(rel, AccessShareLock);
		not_comparable(t, "config_invalid");
		return;
	}
	if (t->tenant_target != NULL)
	{
		AttrNumber	attnum = get_attnum(m->target_relid, t->tenant_target);

		if (attnum == InvalidAttrNumber)
		{
			table_close(rel, AccessShareLock);
			not_comparable(t, "config_invalid");
			return;
		}
		t->tenant_cast = target_cast(rel, attnum, &t->tenant_type);
	}
	if (is_scd2(m))
	{
		/* the open versions, by business key */
		t->filter = psprintf("%s IS NULL", quote_identifier(m->history_valid_to_lsn_column));
		foreach(lc, m->history_business_key)
		{
			const char *src = lfirst(lc);
			const char *tgt = ash_mapping_target_column(m, src);
			AttrNumber	attnum = tgt ? get_attnum(m->target_relid, tgt) : InvalidAttrNumber;

			if (attnum == InvalidAttrNumber)
			{
				not_comparable(t, "config_invalid");
				break;
			}
			t->key_sources = lappend(t->key_sources, pstrdup(src));
			t->key_targets = lappend(t->key_targets, pstrdup(tgt));
			t->key_casts = lappend(t->key_casts, target_cast(rel, attnum, &base));
			t->key_types = lappend_oid(t->key_types, base);
		}
	}
	else
	{
		/* the conflict identity; its source columns are resolved later */
		List	   *attnums = ash_target_identity_attnums(rel, m);

		if (attnums == NIL)
			not_comparable(t, "destination_table_missing");
		foreach(lc, attnums)
		{
			AttrNumber	attnum = (AttrNumber) lfirst_int(lc);

			t->key_targets = lappend(t->key_targets,
									 pstrdup(NameStr(TupleDescAttr(RelationGetDescr(rel),
																   attnum - 1)->attname)));
			t->key_casts = lappend(t->key_casts, target_cast(rel, attnum, &base));
			t->key_types = lappend_oid(t->key_types, base);
		}
	}
	table_close(rel, AccessShareLock);
}

/* ---------------------------------------------------------------------
 * The source.
 * ---------------------------------------------------------------------
 */

/*
 * Raise the value-free refusal for an error of the source phase: the
 * deadline, or the failure's class.  Anything but a source failure is
 * re-raised as it is.
 */
static void
source_failed(Verify *v, ErrorData *e)
{
	if (e->sqlerrcode != ERRCODE_CONNECTION_FAILURE)
		ReThrowError(e);
	if (remaining_ms(v) == 0 || strcmp(ash_conn_last_sqlstate, "57014") == 0)
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "verify", "verify_timeout",
				   "the source was not read within the timeout");
	ash_reject(ERRCODE_CONNECTION_FAILURE, "verify", ash_source_probe_reason(),
			   "a read of the source failed");
}

static void
open_source(Verify *v)
{
	MemoryContext cxt = CurrentMemoryContext;

	PG_TRY();
	{
		v->conn = ash_conn_open(v->cfg->connection, ASH_CONN_PROBE, "ash_replicant verify");
	}
	PG_CATCH();
	{
		ErrorData  *e;
		const char *context;
		const char *reason;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		if (e->sqlerrcode != ERRCODE_CONNECTION_FAILURE)
			PG_RE_THROW();
		FlushErrorState();
		/* what waiting cannot fix is named as the pipeline names it */
		reason = ash_conn_final_failure(&context);
		ash_reject(ERRCODE_CONNECTION_FAILURE, "verify", reason ? reason : "source_unreachable",
				   "%s", context ? context : "the source cannot be reached");
	}
	PG_END_TRY();
}

/*
 * The other columns the mapping writes, and their casts: a mapped source
 * column but a key's, an encrypted one, or a tenant column a function
 * fills.
 */
static void
resolve_source_values(VerifyTable *t, AshSourceRel *r)
{
	AshMapping *m = t->m;
	Relation	rel = try_relation_open(m->target_relid, AccessShareLock);
	Oid			base;

	if (rel == NULL)
	{
		not_comparable(t, "destination_table_missing");
		return;
	}
	for (int i = 0; i < r->desc.natts; i++)
	{
		const char *src = r->desc.cols[i].name;
		const char *tgt = ash_mapping_target_column(m, src);
		AttrNumber	attnum;

		if (tgt == NULL || ash_list_contains_str(t->key_sources, src) ||
			ash_list_contains_str(m->encrypted, src) ||
			((OidIsValid(m->tenant_function) || m->tenant_function_sig != NULL) &&
			 m->tenant_column != NULL &&
			 strcmp(m->tenant_column, src) == 0))
			continue;
		attnum = get_attnum(m->target_relid, tgt);
		if (attnum == InvalidAttrNumber)
			continue;			/* coverage's to judge */
		t->val_sources = lappend(t->val_sources, pstrdup(src));
		t->val_targets = lappend(t->val_targets, pstrdup(tgt));
		t->val_casts = lappend(t->val_casts, target_cast(rel, attnum, &base));
		t->val_types = lappend_oid(t->val_types, base);
		t->val_shown = lappend_int(t->val_shown,
								   shown_by_output(source_base_type(&r->desc.cols[i]), base));
	}
	relation_close(rel, AccessShareLock);
}

/*
 * The source's tenant columns: a shared target's (rendered as its target
 * column holds it) and context tenancy's scope column (its text as the
 * stream sends it, the output function's: that text names the scope).
 */
static void
resolve_source_tenant(VerifyTable *t, AshSourceRel *r)
{
	bool		found_tenant = t->tenant_source == NULL;
	bool		found_scope = t->scope_source == NULL;

	for (int i = 0; i < r->desc.natts; i++)
	{
		const char *name = r->desc.cols[i].name;

		if (t->tenant_source != NULL && strcmp(name, t->tenant_source) == 0)
		{
			found_tenant = true;
			t->tenant_shown = shown_by_output(source_base_type(&r->desc.cols[i]),
											  t->tenant_type);
		}
		if (t->scope_source != NULL && strcmp(name, t->scope_source) == 0)
			found_scope = true;
	}
	if (!found_tenant || !found_scope)
		not_comparable(t, "source_column_missing");
}

/* The source columns feeding the key, now that the source table is known. */
static void
resolve_source_keys(VerifyTable *t, AshSourceRel *r)
{
	AshMapping *m = t->m;
	ListCell   *lc;

	if (!r->exists)
	{
		not_comparable(t, "decoder_table_missing");
		return;
	}
	if (!r->has_select)
	{
		not_comparable(t, "privilege_select_missing");
		return;
	}
	t->partitioned = r->desc.relkind == 'p';
	if (is_scd2(m))
	{
		foreach(lc, t->key_sources)
		{
			int			found = -1;

			for (int i = 0; i < r->desc.natts && found < 0; i++)
				if (strcmp(r->desc.cols[i].name, (char *) lfirst(lc)) == 0)
					found = i;
			if (found < 0)
			{
				not_comparable(t, "source_column_missing");
				return;
			}
			t->key_shown = lappend_int(t->key_shown,
									   shown_by_output(source_base_type(&r->desc.cols[found]),
													   list_nth_oid(t->key_types,
																	foreach_current_index(lc))));
		}
		return;
	}
	foreach(lc, t->key_targets)
	{
		const char *tgt = lfirst(lc);
		const char *src = NULL;
		Oid			src_type = InvalidOid;

		for (int i = 0; i < r->desc.natts && src == NULL; i++)
		{
			const char *written = ash_mapping_target_column(m, r->desc.cols[i].name);

			if (written != NULL && strcmp(written, tgt) == 0)
			{
				src = r->desc.cols[i].name;
				src_type = source_base_type(&r->desc.cols[i]);
			}
		}
		if (src == NULL)
		{
			not_comparable(t, "source_replica_identity");
			return;
		}
		/* a ciphertext never equals its plaintext (refused at registration) */
		if (ash_list_contains_str(m->encrypted, src))
		{
			not_comparable(t, "config_invalid");
			return;
		}
		t->key_sources = lappend(t->key_sources, pstrdup(src));
		t->key_shown = lappend_int(t->key_shown,
								   shown_by_output(src_type,
												   list_nth_oid(t->key_types,
																foreach_current_index(lc))));
	}
}

/* The digest of ROW(exprs...) over a table's rows, as SQL */
static void
append_digest(StringInfo sql, List *exprs)
{
	ListCell   *lc;

	appendStringInfoString(sql,
						   "COALESCE(pg_catalog.sum((('x' OPERATOR(pg_catalog.||)"
						   " pg_catalog.substr(pg_catalog.md5(pg_catalog.convert_to(ROW(");
	foreach(lc, exprs)
		appendStringInfo(sql, "%s%s", foreach_current_index(lc) > 0 ? ", " : "",
						 (char *) lfirst(lc));
	appendStringInfoString(sql,
						   ")::pg_catalog.text, 'UTF8')), 1, 16))::bit(64)::bigint)::numeric), 0)"
						   "::pg_catalog.text");
}

/*
 * SELECT count, key digest, row digest over one table.  key_exprs and
 * val_exprs: the SQL of each key and value column's text; from: the FROM
 * item; filter: a WHERE condition or NULL.  Every function and operator is
 * schema-qualified (the source's search_path is not ours), type names are
 * keywords or qualified.
 */
static char *
digest_query(List *key_exprs, List *val_exprs, const char *from, const char *filter)
{
	StringInfoData sql;

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT pg_catalog.count(*)::pg_catalog.text, ");
	append_digest(&sql, key_exprs);
	appendStringInfoString(&sql, ", ");
	append_digest(&sql, list_concat_copy(key_exprs, val_exprs));
	appendStringInfo(&sql, " FROM %s", from);
	if (filter != NULL)
		appendStringInfo(&sql, " WHERE %s", filter);
	return sql.data;
}

/* ONLY: the rows of this table, as pgoutput publishes them */
static char *
source_from(Verify *v, VerifyTable *t)
{
	return psprintf("%s%s.%s", t->partitioned ? "" : "ONLY ",
					ash_conn_quote_ident(v->conn, t->m->source_schema),
					ash_conn_quote_ident(v->conn, t->m->source_table));
}

/*
 * Each column's text, cast as the target column's type makes it (casts:
 * a type or NULL per column).  v: the source's, whose connection quotes
 * the names, and shown (int per column, see shown_by_output): the columns
 * rendered by their output function first; NULL, NIL: the mirror's.
 */
static List *
text_exprs(Verify *v, List *cols, List *casts, List *shown)
{
	List	   *exprs = NIL;
	ListCell   *lc;
	ListCell   *cc;

	forboth(lc, cols, cc, casts)
	{
		char	   *col = v != NULL ? ash_conn_quote_ident(v->conn, (char *) lfirst(lc)) :
			(char *) quote_identifier(lfirst(lc));

		/* format() renders by the output function, a NULL as '' */
		if (shown != NIL && list_nth_int(shown, foreach_current_index(lc)))
			col = psprintf("CASE WHEN %s IS NULL THEN NULL ELSE pg_catalog.format('%%s', %s) END",
						   col, col);
		if (lfirst(cc) != NULL)
			exprs = lappend(exprs, psprintf("(%s)::%s::pg_catalog.text", col, (char *) lfirst(cc)));
		else
			exprs = lappend(exprs, psprintf("(%s)::pg_catalog.text", col));
	}
	return exprs;
}

/*
 * The row digest of context tenancy ends with each row's scope: here the
 * text of its tenant column as the stream sends it (the output function's,
 * no cast: the apply names the tenant's schema with it), on the mirror the
 * scope of the table that holds the row.
 */
static char *
source_query(Verify *v, VerifyTable *t)
{
	List	   *vals = text_exprs(v, t->val_sources, t->val_casts, t->val_shown);

	if (t->scope_source != NULL)
		vals = list_concat(vals, text_exprs(v, list_make1(t->scope_source), list_make1(NULL),
											list_make1_int(1)));
	return digest_query(text_exprs(v, t->key_sources, t->key_casts, t->key_shown),
						vals, source_from(v, t), NULL);
}

/*
 * The tenants of the source's rows, as the text of a text[]: each rendered
 * as its target column holds it (as a key is), which the mirror's rows are
 * filtered by.
 */
static char *
source_tenants_query(Verify *v, VerifyTable *t)
{
	char	   *tenant = linitial(text_exprs(v, list_make1(t->tenant_source),
											 list_make1(t->tenant_cast),
											 list_make1_int(t->tenant_shown)));

	return psprintf("SELECT COALESCE(pg_catalog.array_agg(DISTINCT %s),"
					" '{}')::pg_catalog.text FROM %s", tenant, source_from(v, t));
}

static void
read_count_digest(PGresult *res, int64 *rows, char **digest, char **row_digest)
{
	if (PQntuples(res) != 1 || PQnfields(res) != 3 ||
		PQgetisnull(res, 0, 0) || PQgetisnull(res, 0, 1) || PQgetisnull(res, 0, 2))
	{
		PQclear(res);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: unexpected answer from the source")));
	}
	*rows = strtoi64(PQgetvalue(res, 0, 0), NULL, 10);
	*digest = pstrdup(PQgetvalue(res, 0, 1));
	*row_digest = pstrdup(PQgetvalue(res, 0, 2));
	PQclear(res);
}

/* Counts and digests of every comparable table in one source snapshot. */
/* The one value (not NULL) of a one-row, one-column query of the source. */
static char *
source_value(Verify *v, const char *sql)
{
	PGresult   *res = ash_conn_exec_timeout(v->conn, sql, false, Max(remaining_ms(v), 1));
	char	   *value;

	if (PQntuples(res) != 1 || PQnfields(res) != 1 || PQgetisnull(res, 0, 0))
	{
		PQclear(res);
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("ash_replicant: unexpected answer from the source")));
	}
	value = pstrdup(PQgetvalue(res, 0, 0));
	PQclear(res);
	return value;
}

/*
 * One table's count and digests, in the source transaction.  A source
 * value its target column's type cannot hold (a numeric past the target's
 * precision, say: the digest's cast fails with a data exception) is a
 * difference the mirror cannot lack: that table is verify_values_differ,
 * counted alone, and the others are read on (a savepoint keeps the
 * transaction).
 */
static void
read_source_digest(Verify *v, VerifyTable *t)
{
	AshConn    *conn = v->conn;
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool unfit = false;
	PGresult   *res;

	PQclear(ash_conn_exec(conn, "SAVEPOINT ash_replicant_verify", false));
	PG_TRY();
	{
		res = ash_conn_exec_timeout(conn, source_query(v, t), false, Max(remaining_ms(v), 1));
		read_count_digest(res, &t->source_rows, &t->source_digest, &t->source_row_digest);
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		if (e->sqlerrcode != ERRCODE_CONNECTION_FAILURE ||
			strncmp(ash_conn_last_sqlstate, "22", 2) != 0 ||
			PQtransactionStatus(conn->conn) != PQTRANS_INERROR)
			PG_RE_THROW();
		/* the error's text may quote the value: dropped unread */
		FlushErrorState();
		FreeErrorData(e);
		unfit = true;
	}
	PG_END_TRY();
	if (!unfit)
	{
		PQclear(ash_conn_exec(conn, "RELEASE SAVEPOINT ash_replicant_verify", false));
		return;
	}
	PQclear(ash_conn_exec(conn, "ROLLBACK TO SAVEPOINT ash_replicant_verify", false));
	t->source_rows = pg_strtoint64(source_value(v, psprintf("SELECT pg_catalog.count(*)::pg_catalog.text"
															" FROM %s", source_from(v, t))));
	t->source_unfit = true;
}

static void
read_source(Verify *v)
{
	AshConn    *conn = v->conn;
	ListCell   *lc;
	PGresult   *res;
	uint32		hi,
				lo;

	PQclear(ash_conn_exec(conn, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", false));
	PG_TRY();
	{
		/* the first statement takes the snapshot: L is read after it */
		res = ash_conn_exec(conn, "SELECT pg_catalog.pg_current_wal_insert_lsn()::pg_catalog.text",
							false);
		if (PQntuples(res) != 1 || sscanf(PQgetvalue(res, 0, 0), "%X/%X", &hi, &lo) != 2)
		{
			PQclear(res);
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("ash_replicant: unexpected answer from the source")));
		}
		PQclear(res);
		v->source_lsn = ((uint64) hi << 32) | lo;

		/*
		 * The session renders text as the mirror's is read below (its
		 * options: ash_text_form); the source stops at the deadline.
		 */
		PQclear(ash_conn_exec(conn,
							  psprintf("SET LOCAL statement_timeout = %d", Max(remaining_ms(v), 1)),
							  false));
		foreach(lc, v->tables)
		{
			VerifyTable *t = lfirst(lc);

			if (!comparable(t))
				continue;
			read_source_digest(v, t);
			/* an unfit table's tenants fail the same cast: it differs anyway */
			if (t->tenant_source != NULL && !t->source_unfit)
				t->tenants = source_value(v, source_tenants_query(v, t));
			t->have_source = true;
		}
	}
	PG_CATCH();
	{
		PGTransactionStatusType ts = PQtransactionStatus(conn->conn);

		if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR)
			PQclear(PQexec(conn->conn, "ROLLBACK"));
		PG_RE_THROW();
	}
	PG_END_TRY();
	PQclear(ash_conn_exec(conn, "COMMIT", false));
}

/* On the probe connection: identity, the mapped tables, their rows. */
static void
source_work(Verify *v)
{
	List	   *rels = NIL;
	ListCell   *lc;
	ListCell   *rc;

	/* judge nothing of a source that is not the configured one */
	if (!ash_source_identity_matches(v->conn, v->cfg->source_system_identifier,
									 v->cfg->source_database))
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "verify",
				   "source_identity_mismatch", "the source is not the configured source");
	foreach(lc, v->tables)
	{
		VerifyTable *t = lfirst(lc);
		AshSourceRel *r = palloc0(sizeof(AshSourceRel));

		r->name.nspname = t->m->source_schema;
		r->name.relname = t->m->source_table;
		rels = lappend(rels, r);
	}
	ash_source_describe_tables(v->conn, rels);
	forboth(lc, v->tables, rc, rels)
	{
		VerifyTable *t = lfirst(lc);

		if (comparable(t))
			resolve_source_keys(t, lfirst(rc));
		if (comparable(t))
			resolve_source_values(t, lfirst(rc));
		if (comparable(t))
			resolve_source_tenant(t, lfirst(rc));
	}
	read_source(v);
}

/*
 * Everything on the source: connect, make sure it is the configured
 * source, describe the mapped tables, read them.  The connection is
 * closed on every path; a failure is refused by its class only.
 */
static void
probe_source(Verify *v)
{
	MemoryContext cxt = CurrentMemoryContext;

	open_source(v);
	PG_TRY();
	{
		ErrorData  *volatile e = NULL;

		PG_TRY();
		{
			source_work(v);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(cxt);
			e = CopyErrorData();
			FlushErrorState();
		}
		PG_END_TRY();
		if (e != NULL)
			source_failed(v, e);
	}
	PG_FINALLY();
	{
		ash_conn_close(v->conn);
		v->conn = NULL;
	}
	PG_END_TRY();
}

/* ---------------------------------------------------------------------
 * Waiting for the mirror.
 * ---------------------------------------------------------------------
 */

/*
 * Has the pipeline applied every source transaction below L?  Either the
 * checkpoint says so (end_lsn at or past L, no snapshot copying), or the
 * running worker acknowledged a flush position at or past L while
 * streaming: it acknowledges only what is committed here, and moves past
 * WAL without published changes when the source's keepalives say so.
 */
static bool
mirror_reached(Verify *v)
{
	Oid			types[4] = {TEXTOID, TEXTOID, TEXTOID, LSNOID};
	Datum		values[4];
	bool		reached = false;

	values[0] = CStringGetTextDatum(v->cfg->slot_name);
	values[1] = CStringGetTextDatum(v->cfg->source_system_identifier);
	values[2] = CStringGetTextDatum(v->cfg->source_database);
	values[3] = LSNGetDatum(v->source_lsn);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	if (SPI_execute_with_args("SELECT end_lsn OPERATOR(pg_catalog.>=) $4"
							  "   AND snapshot_phase IS DISTINCT FROM 'copying'"
							  " FROM ash_replicant.checkpoints"
							  " WHERE slot_name = $1 AND source_system_id = $2"
							  "   AND source_database = $3",
							  4, types, values, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the checkpoint failed");
	if (SPI_processed == 1)
	{
		bool		isnull;

		reached = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1,
											 &isnull)) && !isnull;
	}
	SPI_finish();
	if (reached)
		return true;

	LWLockAcquire(AshShmem->lock, LW_SHARED);
	{
		AshPipelineSlot *slot = ash_slot_find(MyDatabaseId, v->sink_name);

		if (slot != NULL)
		{
			SpinLockAcquire(&slot->mutex);
			reached = slot->state == ASH_SLOT_RUNNING && slot->pid != 0 &&
				slot->stats.streaming && !slot->stats.snapshot_in_flight &&
				slot->stats.flushed_lsn >= v->source_lsn;
			SpinLockRelease(&slot->mutex);
		}
	}
	LWLockRelease(AshShmem->lock);
	return reached;
}

static void
wait_for_mirror(Verify *v)
{
	for (;;)
	{
		check_running(v);
		if (mirror_reached(v))
			return;
		if (remaining_ms(v) == 0)
			ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "verify", "verify_timeout",
					   "the mirror did not reach the source's position within the timeout");
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Min(100, Max(remaining_ms(v), 1)), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/* ---------------------------------------------------------------------
 * The mirror.
 * ---------------------------------------------------------------------
 */

/*
 * The tables of a context mapping: one per scope its tenant_scope_function
 * returns, each once, their scopes in t->scopes, resolved as the
 * snapshot's retirement resolves them
 * (provenance.c), with the function run as the sink owner in a
 * subtransaction, under row_security off as in the worker (a policy must
 * not hide a scope from the comparison: what it would filter fails).  NIL,
 * with the mapping marked not comparable, when that fails; the function's
 * error text is dropped unread.
 */
static List *
scope_tables(Verify *v, VerifyTable *t)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	List	   *volatile tables = NIL;
	Oid			save_userid;
	int			save_sec;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		AshOwnerScope scope;

		/* the owner's function sets nothing the definer's statements see */
		ash_owner_scope_enter(&scope, v->cfg->owner, SECURITY_RESTRICTED_OPERATION);
		(void) set_config_option("row_security", "off", PGC_SUSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "ash_replicant: SPI_connect failed");
		{
			List	   *scopes;
			List	   *found = ash_provenance_scope_tables(t->m, v->cfg->owner, &scopes);
			MemoryContext spi = MemoryContextSwitchTo(cxt);
			ListCell   *lc;

			/* made in SPI's memory, which SPI_finish frees */
			foreach(lc, found)
				tables = lappend(tables, pstrdup(lfirst(lc)));
			foreach(lc, scopes)
				t->scopes = lappend(t->scopes, pstrdup(lfirst(lc)));
			MemoryContextSwitchTo(spi);
		}
		SPI_finish();
		ash_owner_scope_exit(&scope);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		const char *reason = ash_pending_halt;

		MemoryContextSwitchTo(cxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		SetUserIdAndSecContext(save_userid, save_sec);
		ash_pending_halt = NULL;
		tables = NIL;
		t->scopes = NIL;
		not_comparable(t, ash_reason_class(reason) != ASH_REASON_UNKNOWN ?
					   reason : "snapshot_scope_incomplete");
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return tables;
}

/* The scopes as a text[], element i the scope of table i. */
static Datum
scopes_array(List *scopes)
{
	Datum	   *elems = palloc(sizeof(Datum) * Max(list_length(scopes), 1));
	ListCell   *lc;

	foreach(lc, scopes)
		elems[foreach_current_index(lc)] = CStringGetTextDatum(lfirst(lc));
	return PointerGetDatum(construct_array(elems, list_length(scopes), TEXTOID, -1, false,
										   TYPALIGN_INT));
}

/*
 * Count and digest the mirror rows of one mapping (every tenant table of
 * a context mapping, each row's digest ending with the scope of its table,
 * as the source's ends with its tenant), with the text of keys made as on
 * the source.  The source's tenants and the scopes are parameters, never
 * text of the statement.
 */
static void
read_mirror(Verify *v, VerifyTable *t)
{
	List	   *tables;
	List	   *exprs = NIL;
	List	   *vals;
	StringInfoData sql;
	ListCell   *lc;
	AshOwnerScope scope;
	bool		isnull;
	char	   *filter = t->filter;
	Oid			argtypes[2] = {TEXTOID, TEXTARRAYOID};
	Datum		args[2];
	int			nargs = 1;
	MemoryContext cxt = CurrentMemoryContext;

	tables = is_context(t->m) ? scope_tables(v, t) : list_make1(t->target);
	if (comparable(t) && is_context(t->m) && !owner_reads_all(tables, v->cfg->owner))
		not_comparable(t, "config_invalid");
	if (!comparable(t))
		return;
	foreach(lc, t->key_targets)
		exprs = lappend(exprs, psprintf("(%s)::pg_catalog.text", quote_identifier(lfirst(lc))));
	vals = text_exprs(NULL, t->val_targets, t->val_casts, NIL);
	/* the source's tenants, a parameter: never in the statement's text */
	if (t->tenant_target != NULL)
		filter = psprintf("%s%s(%s)::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.text[])",
						  filter != NULL ? filter : "", filter != NULL ? " AND " : "",
						  quote_identifier(t->tenant_target));

	initStringInfo(&sql);
	appendStringInfoString(&sql,
						   "SELECT COALESCE(pg_catalog.sum(n::pg_catalog.int8), 0)::pg_catalog.int8,"
						   " COALESCE(pg_catalog.sum(d::numeric), 0)::pg_catalog.text,"
						   " COALESCE(pg_catalog.sum(r::numeric), 0)::pg_catalog.text"
						   " FROM (");
	foreach(lc, tables)
	{
		List	   *row = vals;

		/* $2[i]: the scope of the i-th table */
		if (t->scope_source != NULL)
			row = lappend(list_copy(vals),
						  psprintf("($2::pg_catalog.text[])[%d]", foreach_current_index(lc) + 1));
		appendStringInfo(&sql, "%s%s", foreach_current_index(lc) > 0 ? " UNION ALL " : "",
						 digest_query(exprs, row, lfirst(lc), filter));
	}
	if (tables == NIL)
		appendStringInfoString(&sql, "SELECT '0'::pg_catalog.text, '0'::pg_catalog.text, '0'::pg_catalog.text");
	appendStringInfoString(&sql, ") AS x (n, d, r)");

	/*
	 * As the sink owner, restricted: a cast to text of a type the owner made
	 * (or a target converted to a view) is its code, never the definer's.
	 * row_security off as in the worker: a policy that would hide rows
	 * fails the read instead of shrinking the count.  The exit undoes what
	 * was set here and whatever the owner's code set.
	 */
	ash_owner_scope_enter(&scope, v->cfg->owner, SECURITY_RESTRICTED_OPERATION);
	(void) set_config_option("row_security", "off", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	/* the text forms the source session renders (ash_text_form) */
	for (int i = 0; i < ASH_TEXT_FORM_SETTINGS; i++)
		(void) set_config_option(ash_text_form[i][0], ash_text_form[i][1], PGC_USERSET,
								 PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	/* a fresh snapshot: the mirror as it is after the wait */
	args[0] = t->tenants != NULL ? CStringGetTextDatum(t->tenants) : CStringGetTextDatum("{}");
	if (t->scope_source != NULL)
		args[nargs++] = scopes_array(t->scopes);
	if (SPI_execute_with_args(sql.data, nargs, argtypes, args, NULL,
							  false, 0) != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "ash_replicant: reading the mirror failed");
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		t->mirror_rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
													 SPI_tuptable->tupdesc, 1, &isnull));
		t->mirror_digest = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);
		t->mirror_row_digest = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3);
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	ash_owner_scope_exit(&scope);
	t->have_mirror = true;
}

/* ---------------------------------------------------------------------
 * Entry point.
 * ---------------------------------------------------------------------
 */

static void
emit(ReturnSetInfo *rsinfo, VerifyTable *t)
{
	Datum		values[7];
	bool		nulls[7] = {false};
	const char *verdict;
	const char *reason = t->reason;

	if (reason != NULL)
		verdict = VERDICT_NOT_COMPARABLE;
	else if (t->source_unfit)
	{
		/* a value the mirror cannot hold (a shared target's rows unknown) */
		verdict = VERDICT_MISMATCH;
		reason = "verify_values_differ";
	}
	else if (t->source_rows != t->mirror_rows)
	{
		verdict = VERDICT_MISMATCH;
		reason = "verify_rows_differ";
	}
	else if (strcmp(t->source_digest, t->mirror_digest) != 0)
	{
		verdict = VERDICT_MISMATCH;
		reason = "verify_keys_differ";
	}
	else if (strcmp(t->source_row_digest, t->mirror_row_digest) != 0)
	{
		verdict = VERDICT_MISMATCH;
		reason = "verify_values_differ";
	}
	else
		verdict = VERDICT_MATCH;

	values[0] = CStringGetTextDatum(t->m->source_schema);
	values[1] = CStringGetTextDatum(t->m->source_table);
	if (t->target != NULL)
		values[2] = CStringGetTextDatum(t->target);
	else
		nulls[2] = true;
	if (t->have_source)
		values[3] = Int64GetDatum(t->source_rows);
	else
		nulls[3] = true;
	if (t->have_mirror)
		values[4] = Int64GetDatum(t->mirror_rows);
	else
		nulls[4] = true;
	values[5] = CStringGetTextDatum(verdict);
	if (reason != NULL)
		values[6] = CStringGetTextDatum(reason);
	else
		nulls[6] = true;
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

static int
compare_tables(const ListCell *a, const ListCell *b)
{
	VerifyTable *ta = lfirst(a);
	VerifyTable *tb = lfirst(b);
	int			c = strcmp(ta->m->source_schema, tb->m->source_schema);

	return c != 0 ? c : strcmp(ta->m->source_table, tb->m->source_table);
}

/*
 * ash_replicant_verify(sink_name, timeout) -- one row per mapping:
 * source_schema, source_table, target, source_rows, mirror_rows, verdict,
 * reason.
 */
Datum
ash_replicant_verify(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	MemoryContext cxt = CurrentMemoryContext;
	Verify	   *v;
	Interval   *timeout;
	int64		timeout_ms;
	ListCell   *lc;
	volatile bool any = false;
	int			nest;

	if (PG_ARGISNULL(0))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, "verify", "config_invalid",
				   "sink_name must not be NULL");
	if (PG_ARGISNULL(1))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, "verify", "config_invalid",
				   "timeout must not be NULL");
	timeout = PG_GETARG_INTERVAL_P(1);
	timeout_ms = (int64) (timeout->time / 1000) +
		((int64) timeout->day * 86400 + (int64) timeout->month * 30 * 86400) * 1000;
	if (timeout_ms < 0)
		ash_reject(ERRCODE_INVALID_PARAMETER_VALUE, "verify", "config_invalid",
				   "timeout must not be negative");
	/* the mirror is read after the wait: it needs a snapshot taken then */
	if (IsolationUsesXactSnapshot())
		ash_reject(ERRCODE_ACTIVE_SQL_TRANSACTION, "verify", "config_invalid",
				   "ash_replicant_verify needs a READ COMMITTED transaction");
	ash_require_shmem();

	InitMaterializedSRF(fcinfo, 0);
	v = palloc0(sizeof(Verify));
	v->sink_name = text_to_cstring(PG_GETARG_TEXT_PP(0));
	v->deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);

	load_sink(v);
	check_running(v);

	/* a target locked by someone else waits no longer than the timeout */
	nest = NewGUCNestLevel();
	(void) set_config_option("lock_timeout",
							 psprintf("%d", (int) Min(Max(timeout_ms, 1), INT_MAX)),
							 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
	PG_TRY();
	{
		foreach(lc, v->cfg->mappings)
		{
			VerifyTable *t = palloc0(sizeof(VerifyTable));

			t->m = lfirst(lc);
			plan_table(v, t);
			v->tables = lappend(v->tables, t);
			any |= comparable(t);
		}
		list_sort(v->tables, compare_tables);

		/* nothing to compare: no source read, no wait */
		if (any)
		{
			probe_source(v);
			any = false;
			foreach(lc, v->tables)
				any |= comparable((VerifyTable *) lfirst(lc));
		}
		if (any)
		{
			wait_for_mirror(v);
			foreach(lc, v->tables)
			{
				VerifyTable *t = lfirst(lc);

				/* a shared target's rows of an unfit table: tenants unknown */
				if (comparable(t) && !(t->source_unfit && t->tenant_source != NULL))
					read_mirror(v, t);
			}
		}
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		if (e->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			PG_RE_THROW();
		FlushErrorState();
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, "verify", "verify_timeout",
				   "a mirror table stayed locked past the timeout");
	}
	PG_END_TRY();
	AtEOXact_GUC(true, nest);

	foreach(lc, v->tables)
		emit(rsinfo, lfirst(lc));
	return (Datum) 0;
}
