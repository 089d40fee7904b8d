/*-------------------------------------------------------------------------
 *
 * api_doctor.c
 *	  ash_replicant_preflight(sink) and ash_replicant_doctor(sink).
 *
 * NOTES
 *	  preflight answers "may this pipeline start?" without reading a
 *	  checkpoint (it works on a fresh install); doctor adds the state a
 *	  running or halted pipeline depends on.  Both return one row per check,
 *	  always the same checks in the same order:
 *
 *		configuration_complete, destination_mappings, keyring_families,
 *		source_reachable, source_identity, source_release, source_wal_level,
 *		privilege_replication, output_plugin, publication, privilege_select,
 *		coverage, columns, existing_rows
 *		[doctor:] checkpoint_state, slot, timeline, watermark, contract,
 *		runtime
 *
 *	  verdict is pass, fail, warn or skipped; reason is a reason code, README.md#reason-codes (for
 *	  skipped: the code of the failure that made the check impossible).
 *	  skipped is never pass.  Gating: the source checks need a complete
 *	  configuration and a reachable source, and the probe verifies the
 *	  source identity before anything else is judged on it; a failed gate
 *	  skips every later check that depends on it.
 *
 *	  No writes anywhere: the source is read on a probe connection with
 *	  default_transaction_read_only = on, the catalogs (checkpoint included)
 *	  with plain SELECTs.  Checks that may raise (mapping validation, the
 *	  probe, the checkpoint read) run in subtransactions, which take no
 *	  transaction id because they write nothing.  The contract check reuses
 *	  the binding's own judgement (contract.c), which would record an
 *	  admissible manifest: it runs read-only and is always rolled back (see
 *	  check_contract).
 *
 *	  The source's table set is fetched, described and judged by
 *	  source_catalog.c and coverage.c, the very code the pipeline runs at
 *	  activation and in every census: preflight's verdict is the worker's.
 *
 *	  Rows are value-free: check names, reason codes and a structural
 *	  detail -- names of tables, columns and types, a halt's SQLSTATE,
 *	  target and commit LSN -- never the conninfo, publication, identity,
 *	  slot name or a row value.  The detail of a failure also goes to a
 *	  NOTICE (catalogs before 1.2.0 have no detail column).
 *	  Error messages of failed probes are never shown: only their class.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "access/xact.h"
#include "access/xlogdefs.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/pg_lsn.h"
#include "utils/resowner.h"
#include "utils/syscache.h"

#include "ash_replicant.h"
#include "checkpoint.h"
#include "coverage.h"
#include "decoder.h"
#include "errors.h"
#include "keyring.h"
#include "libpq_conn.h"
#include "mapping_validate.h"
#include "publication_record.h"
#include "qualname.h"
#include "route_rules.h"
#include "shmem.h"
#include "source_catalog.h"


PG_FUNCTION_INFO_V1(ash_replicant_preflight);
PG_FUNCTION_INFO_V1(ash_replicant_doctor);

#define V_PASS		"pass"
#define V_FAIL		"fail"
#define V_WARN		"warn"
#define V_SKIPPED	"skipped"

/* What the catalogs say about the sink (conninfo included: never shown). */
typedef struct SinkFacts
{
	char	   *slot_name;
	bool		append_log;
	char	   *initial_state;
	List	   *ignored;		/* List of (schema, table) Lists */
	bool		has_horizon;
	bool		configured;		/* a pipelines row exists */
	char	   *connection;
	char	   *decoder;
	char	   *publication;
	char	   *replication_sets;	/* text[] literal or NULL */
	List	   *tables;			/* wal2json: AshSourceName * */
	bool		allow_keyless;	/* wal2json: allow_keyless_tables */
	char	   *sysid;
	char	   *database;
	char	   *snapshot;
	bool		origin_none;	/* origin => 'none' */
	bool		streaming;
	bool		failover;
	bool		binary_transfer;
	int64		nroutes;
	const char *routes_reason;	/* the route rules' verdict (route_rules.c) */
	int64		nroutes_dangling;	/* the target table or function is gone */
	char	   *halt_sqlstate;	/* the current halt's, or NULL */
	char	   *halt_target;
	char	   *halt_lsn;		/* text of a pg_lsn */
} SinkFacts;

/* The checkpoint rows under the sink's slot name. */
typedef struct CheckpointFacts
{
	bool		read;			/* the read succeeded */
	bool		ours;			/* a row of the configured identity exists */
	bool		foreign;		/* a row of another identity exists */
	int32		timeline;
	XLogRecPtr	commit_lsn;
	XLogRecPtr	recorded;		/* end_lsn or acknowledged_lsn, the further */
	bool		recorded_known; /* acknowledged_lsn set (1.6.0, once started) */
	bool		snapshot_recorded;	/* a snapshot attempt (snapshot_phase) */
	char	   *terminal_cause;
	char	   *decoder;
	bool		has_contract;
} CheckpointFacts;

typedef struct Doctor
{
	ReturnSetInfo *rsinfo;
	MemoryContext cxt;
	char	   *sink_name;
	SinkFacts	f;
	bool		mappings_known;
	List	   *specs;			/* AshMappingSpec * */
	List	   *mappings;		/* AshMapping *, same order */
	AshMappingSink *sink;

	/* the source */
	AshConn    *conn;
	const char *source_skip;	/* why source checks are skipped, NULL: go */
	const char *tableset_skip;	/* why table-set checks are skipped */
	AshTableSetSpec tableset;	/* the decoder's table-set setting */
	List	   *rels;			/* AshSourceRel * */
	bool		coverage_judged;	/* d->coverage is set */
	AshSourceCoverage coverage;
	AshPublicationFacts pub;	/* what the publication publishes */

	CheckpointFacts cp;
	bool		contract_unchanged; /* set by contract_fn */
	bool		catalogs_current;	/* the installed version is the library's */
} Doctor;

/* ---------------------------------------------------------------------
 * Rows, errors and subtransactions.
 * ---------------------------------------------------------------------
 */

/*
 * One row.  detail (1.2.0 on; catalogs before declare three columns) is
 * structure only: names of tables, columns and types, a SQLSTATE, an LSN.
 */
static void
emit_detail(Doctor *d, const char *check, const char *verdict, const char *reason,
			const char *detail)
{
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};

	values[0] = CStringGetTextDatum(check);
	values[1] = CStringGetTextDatum(verdict);
	if (reason != NULL)
		values[2] = CStringGetTextDatum(reason);
	else
		nulls[2] = true;
	if (detail != NULL && detail[0] != '\0')
		values[3] = CStringGetTextDatum(detail);
	else
		nulls[3] = true;
	tuplestore_putvalues(d->rsinfo->setResult, d->rsinfo->setDesc, values, nulls);
}

static void
emit(Doctor *d, const char *check, const char *verdict, const char *reason)
{
	emit_detail(d, check, verdict, reason, NULL);
}

/* A failure or warning with its structural context (names only). */
static void
emit_judged(Doctor *d, const char *check, const char *verdict, const char *reason,
			const char *context)
{
	if (context != NULL && context[0] != '\0')
		ereport(NOTICE,
				(errmsg("ash_replicant: %s %s: %s (%s)", check, verdict, reason, context)));
	emit_detail(d, check, verdict, reason, context);
}

/* "sqlstate 23505 (unique_violation), table t, commit LSN 0/1" of a halt */
static char *
halt_detail(SinkFacts *f)
{
	StringInfoData buf;
	const char *condition = ash_sqlstate_condition(f->halt_sqlstate);

	initStringInfo(&buf);
	if (f->halt_sqlstate)
		appendStringInfo(&buf, "sqlstate %s%s%s%s", f->halt_sqlstate,
						 condition ? " (" : "", condition ? condition : "",
						 condition ? ")" : "");
	if (f->halt_target)
		appendStringInfo(&buf, "%stable %s", buf.len ? ", " : "", f->halt_target);
	if (f->halt_lsn)
		appendStringInfo(&buf, "%scommit LSN %s", buf.len ? ", " : "", f->halt_lsn);
	if (buf.len)
		appendStringInfoString(&buf, "; ");
	return buf.data;
}

/*
 * The reason code of an error raised by ash_reject or ash_halt (their
 * messages read "ash_replicant: <stage> rejected: <reason> ..." and
 * "ash_replicant: pipeline halted: <reason> ..."), else the fallback.
 */
static const char *
reason_of(ErrorData *edata, const char *fallback)
{
	static const char *const markers[] = {" rejected: ", " halted: "};
	const char *msg = edata->message;

	if (msg == NULL || strncmp(msg, "ash_replicant: ", 15) != 0)
		return fallback;
	for (int i = 0; i < lengthof(markers); i++)
	{
		const char *p = strstr(msg, markers[i]);
		size_t		n;
		char	   *code;

		if (p == NULL)
			continue;
		p += strlen(markers[i]);
		n = strspn(p, "abcdefghijklmnopqrstuvwxyz0123456789_");
		code = pnstrdup(p, n);
		if (ash_reason_class(code) != ASH_REASON_UNKNOWN)
			return code;
	}
	return fallback;
}

/* The structural context of an ash_reject/ash_halt message, or NULL. */
static const char *
context_of(ErrorData *edata)
{
	const char *msg = edata->message;
	const char *open;
	size_t		len;

	if (msg == NULL || strncmp(msg, "ash_replicant: ", 15) != 0)
		return NULL;
	open = strchr(msg, '(');
	len = strlen(msg);
	if (open == NULL || len == 0 || msg[len - 1] != ')')
		return NULL;
	return pnstrdup(open + 1, msg + len - 1 - (open + 1));
}

typedef void (*GuardedFn) (Doctor *d, void *arg);

/*
 * Run fn in a subtransaction.  Returns NULL on success, else the error
 * (copied, flushed, rolled back).  Cancels and shutdowns are re-raised.
 */
static ErrorData *
guarded(Doctor *d, GuardedFn fn, void *arg)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(d, arg);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	ash_pending_halt = NULL;

	if (edata != NULL &&
		(edata->sqlerrcode == ERRCODE_QUERY_CANCELED ||
		 edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN ||
		 edata->sqlerrcode == ERRCODE_OUT_OF_MEMORY))
		ReThrowError(edata);
	return edata;
}

/* ---------------------------------------------------------------------
 * Catalog facts.
 * ---------------------------------------------------------------------
 */

static bool
empty(const char *s)
{
	return s == NULL || s[0] == '\0';
}

/* text[] of canonical "schema"."table" -> List of (schema, table) Lists */
static List *
qualified_list(Datum d, bool isnull, bool as_names)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, ash_text_array_to_list(d, isnull))
	{
		char	   *schema;
		char	   *table;

		if (!ash_parse_qualified_name((char *) lfirst(lc), &schema, &table))
			continue;			/* the API stores only well-formed entries */
		if (as_names)
		{
			AshSourceName *nm = palloc(sizeof(AshSourceName));

			nm->nspname = schema;
			nm->relname = table;
			result = lappend(result, nm);
		}
		else
			result = lappend(result, list_make2(schema, table));
	}
	return result;
}

static char *
copy_text(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;

	(void) SPI_getbinval(tup, desc, col, &isnull);
	return isnull ? NULL : SPI_getvalue(tup, desc, col);
}

static bool
get_bool(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		v = SPI_getbinval(tup, desc, col, &isnull);

	return !isnull && DatumGetBool(v);
}

/* Load the sink and pipeline rows; an unknown sink is an error. */
static void
load_sink_facts(Doctor *d)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	HeapTuple	tup;
	TupleDesc	desc;
	SinkFacts  *f = &d->f;
	MemoryContext old;
	bool		isnull;
	Datum		v;
	int			ret;

	values[0] = CStringGetTextDatum(d->sink_name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	ret = SPI_execute_with_args(
		"SELECT s.slot_name, s.sink_kind = 'append_log', s.initial_state,"
		"  s.ignored_sources, s.recovery_horizon IS NOT NULL,"
		"  p.sink_name IS NOT NULL, p.connection, p.decoder, p.publication,"
		"  p.replication_sets, p.tables, p.source_system_identifier,"
		"  p.source_database, p.snapshot, coalesce(p.streaming, false),"
		"  coalesce(p.failover, false), coalesce(p.binary_transfer, false),"
		"  (SELECT pg_catalog.count(*) FROM ash_replicant.message_routes r"
		"    WHERE r.sink_name = s.sink_name),"
		/* where the current generation's halt stopped (NULL before 1.2.0) */
		"  CASE WHEN p.halt_generation >= p.start_generation THEN p.halt_sqlstate END,"
		"  CASE WHEN p.halt_generation >= p.start_generation"
		"   THEN pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'halt_target' END,"
		"  CASE WHEN p.halt_generation >= p.start_generation"
		"   THEN pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'halt_lsn' END,"
		"  coalesce(p.allow_keyless_tables, false),"
		/* catalogs before 1.3.0 have no origin column */
		"  pg_catalog.to_jsonb(p) OPERATOR(pg_catalog.->>) 'origin' IS NOT DISTINCT FROM 'none',"
		/*
		 * a route keeps a bare OID or a function's signature: its target
		 * can be dropped under it (before 1.10.0 a function's OID too,
		 * which prints as its number when it names none)
		 */
		"  (SELECT pg_catalog.count(*) FROM ash_replicant.message_routes r"
		"    WHERE r.sink_name = s.sink_name"
		"      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
		"                       WHERE c.oid OPERATOR(pg_catalog.=) r.target::pg_catalog.oid)"
		"      AND (r.target_function IS NULL"
		"           OR r.target_function::pg_catalog.text OPERATOR(pg_catalog.~) '^[0-9]+$'"
		"           OR pg_catalog.to_regprocedure(r.target_function::pg_catalog.text) IS NULL))"
		" FROM ash_replicant.sinks s"
		" LEFT JOIN ash_replicant.pipelines p ON p.sink_name = s.sink_name"
		" WHERE s.sink_name = $1",
		1, types, values, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the sink failed");
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("ash_replicant: sink \"%s\" does not exist", d->sink_name)));

	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	old = MemoryContextSwitchTo(d->cxt);
	f->slot_name = copy_text(tup, desc, 1);
	f->append_log = get_bool(tup, desc, 2);
	f->initial_state = copy_text(tup, desc, 3);
	v = SPI_getbinval(tup, desc, 4, &isnull);
	f->ignored = qualified_list(v, isnull, false);
	f->has_horizon = get_bool(tup, desc, 5);
	f->configured = get_bool(tup, desc, 6);
	f->connection = copy_text(tup, desc, 7);
	f->decoder = copy_text(tup, desc, 8);
	f->publication = copy_text(tup, desc, 9);
	f->replication_sets = copy_text(tup, desc, 10);
	v = SPI_getbinval(tup, desc, 11, &isnull);
	f->tables = qualified_list(v, isnull, true);
	f->sysid = copy_text(tup, desc, 12);
	f->database = copy_text(tup, desc, 13);
	f->snapshot = copy_text(tup, desc, 14);
	f->streaming = get_bool(tup, desc, 15);
	f->failover = get_bool(tup, desc, 16);
	f->binary_transfer = get_bool(tup, desc, 17);
	f->nroutes = DatumGetInt64(SPI_getbinval(tup, desc, 18, &isnull));
	f->halt_sqlstate = copy_text(tup, desc, 19);
	f->halt_target = copy_text(tup, desc, 20);
	f->halt_lsn = copy_text(tup, desc, 21);
	f->allow_keyless = get_bool(tup, desc, 22);
	f->origin_none = get_bool(tup, desc, 23);
	f->nroutes_dangling = DatumGetInt64(SPI_getbinval(tup, desc, 24, &isnull));
	if (f->decoder == NULL)
		f->decoder = "pgoutput";
	if (f->snapshot == NULL)
		f->snapshot = "off";
	MemoryContextSwitchTo(old);
	{
		AshRouteVerdict rv;

		/* what ash_replicant_start and the worker judge, as they judge it */
		ash_route_rules_judge(d->sink_name, ASH_ROUTE_RULES_START, &rv);
		f->routes_reason = rv.reason;	/* a literal */
	}
	SPI_finish();
}

static bool
table_set_present(SinkFacts *f)
{
	if (strcmp(f->decoder, "wal2json") == 0)
		return f->tables != NIL;
	if (strcmp(f->decoder, "pglogical") == 0)
		return !empty(f->replication_sets) && strcmp(f->replication_sets, "{}") != 0;
	return !empty(f->publication);
}

/* The output plugin a decoder's slot uses (decoder.h). */
static const char *
decoder_plugin(const char *decoder)
{
	const AshDecoderInfo *info = ash_decoder_info(decoder);

	return info ? info->plugin : "pgoutput";
}

/* ---------------------------------------------------------------------
 * Destination checks.
 * ---------------------------------------------------------------------
 */

/* The rules of ash_replicant_start, read-only. */
static void
check_configuration(Doctor *d)
{
	SinkFacts  *f = &d->f;
	const char *reason = NULL;
	const char *context = NULL;

	if (!f->configured)
	{
		reason = "config_invalid";
		context = "the pipeline is not configured";
	}
	else if (empty(f->connection) || !table_set_present(f) ||
			 empty(f->sysid) || empty(f->database))
	{
		StringInfoData missing;

		/* by name, as ash_replicant_start says it; never a value */
		initStringInfo(&missing);
		if (empty(f->connection))
			appendStringInfoString(&missing, "connection");
		if (!table_set_present(f))
			appendStringInfo(&missing, "%s%s", missing.len ? ", " : "",
							 strcmp(f->decoder, "wal2json") == 0 ? "tables" :
							 strcmp(f->decoder, "pglogical") == 0 ? "replication_sets" :
							 "publication");
		if (empty(f->sysid))
			appendStringInfo(&missing, "%s%s", missing.len ? ", " : "", "source_system_identifier");
		if (empty(f->database))
			appendStringInfo(&missing, "%s%s", missing.len ? ", " : "", "source_database");
		reason = "config_invalid";
		context = psprintf("missing settings: %s", missing.data);
	}
	else if (strcmp(f->decoder, "pgoutput") != 0 &&
			 (f->streaming || f->failover || f->binary_transfer))
		reason = "decoder_capability_unsupported";
	else if (f->initial_state != NULL &&
			 (strcmp(f->initial_state, "go_forward") == 0) != (strcmp(f->snapshot, "off") == 0))
		reason = "initial_state_mismatch";
	else if (f->routes_reason != NULL)
		reason = f->routes_reason;	/* as ash_replicant_start */
	else if (f->nroutes_dangling > 0)
	{
		/* as the worker's activation (messages.c) */
		reason = "destination_table_missing";
		context = psprintf("message routes whose table or function is gone: " INT64_FORMAT,
						   f->nroutes_dangling);
	}

	if (reason != NULL)
		emit_judged(d, "configuration_complete", V_FAIL, reason, context);
	else
		emit(d, "configuration_complete", V_PASS, NULL);

	/* what the source checks need */
	if (!f->configured || empty(f->connection) || !table_set_present(f) ||
		empty(f->sysid) || empty(f->database))
		d->source_skip = "config_invalid";
}

static void
load_mappings_fn(Doctor *d, void *arg)
{
	d->sink = ash_mapping_sink_load(d->sink_name, false, false);
	ash_source_load_mappings(d->sink_name, &d->specs, &d->mappings);
}

/*
 * The BEFORE ROW INSERT or UPDATE triggers of state mirrors' targets, as
 * "<target>: <trigger>, ..." per target in arg (a StringInfo): such a
 * trigger can change the values the pipeline writes, and nothing would say
 * so (one that keeps a write out halts destination_write_suppressed).
 * Context tenancy's tenant tables are not looked at.
 */
static void
before_triggers_fn(Doctor *d, void *arg)
{
	StringInfo	out = (StringInfo) arg;
	ListCell   *lc;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	foreach(lc, d->specs)
	{
		AshMappingSpec *m = lfirst(lc);
		Oid			types[1] = {OIDOID};
		Datum		values[1];
		char	   *names;

		if (m->append_log || !OidIsValid(m->target))
			continue;
		values[0] = ObjectIdGetDatum(m->target);
		/* tgtype: ROW 1, BEFORE 2, INSERT 4, UPDATE 16 */
		if (SPI_execute_with_args("SELECT pg_catalog.string_agg(pg_catalog.quote_ident(tgname), ', '"
								  "                             ORDER BY tgname)"
								  "  FROM pg_catalog.pg_trigger"
								  " WHERE tgrelid OPERATOR(pg_catalog.=) $1 AND NOT tgisinternal"
								  "   AND tgenabled OPERATOR(pg_catalog.<>) 'D'"
								  "   AND (tgtype OPERATOR(pg_catalog.&) 3) OPERATOR(pg_catalog.=) 3"
								  "   AND (tgtype OPERATOR(pg_catalog.&) 20) OPERATOR(pg_catalog.<>) 0",
								  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: reading the targets' triggers failed");
		names = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		if (names != NULL)
			appendStringInfo(out, "%s%s: %s", out->len > 0 ? "; " : "",
							 quote_qualified_identifier(get_namespace_name(get_rel_namespace(m->target)),
														get_rel_name(m->target)),
							 names);
	}
	SPI_finish();
}

static void
validate_fn(Doctor *d, void *arg)
{
	ash_mapping_validate((AshMappingSpec *) arg, d->sink);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	ash_mapping_check_shared_target((AshMappingSpec *) arg, false);
	SPI_finish();
}

static void
check_destination_mappings(Doctor *d)
{
	ErrorData  *e;
	ListCell   *lc;

	e = guarded(d, load_mappings_fn, NULL);
	if (e != NULL)
	{
		d->specs = NIL;
		d->mappings = NIL;
		emit_judged(d, "destination_mappings", V_FAIL, reason_of(e, "config_invalid"),
					context_of(e));
		return;
	}
	d->mappings_known = true;
	foreach(lc, d->specs)
	{
		e = guarded(d, validate_fn, lfirst(lc));
		if (e != NULL)
		{
			emit_judged(d, "destination_mappings", V_FAIL, reason_of(e, "config_invalid"),
						context_of(e));
			return;
		}
	}
	{
		StringInfoData triggers;

		initStringInfo(&triggers);
		e = guarded(d, before_triggers_fn, &triggers);
		if (e != NULL)
		{
			emit_judged(d, "destination_mappings", V_FAIL, reason_of(e, "config_invalid"),
						context_of(e));
			return;
		}
		if (triggers.len > 0)
		{
			emit_judged(d, "destination_mappings", V_WARN, "target_before_row_trigger",
						triggers.data);
			return;
		}
	}
	emit(d, "destination_mappings", V_PASS, NULL);
}

static void
keyring_load_fn(Doctor *d, void *arg)
{
	ash_keyring_load();
}

static void
check_keyring(Doctor *d)
{
	const char *needed[4];
	int			nneeded = 0;
	bool		encryption = false;
	bool		provenance = false;
	ListCell   *lc;

	foreach(lc, d->specs)
	{
		AshMappingSpec *m = lfirst(lc);

		encryption |= m->encrypted != NIL;
		provenance |= m->snapshot_provenance;
	}
	if (encryption)
		needed[nneeded++] = ASH_KEYS_COLUMN_ENCRYPTION;
	if (provenance)
		needed[nneeded++] = ASH_KEYS_SNAPSHOT_PROVENANCE;
	if (!d->f.append_log && d->f.nroutes > 0)
	{
		needed[nneeded++] = ASH_KEYS_MESSAGE_DIGEST;
		needed[nneeded++] = ASH_KEYS_HORIZON_PROVENANCE;
	}

	if (nneeded == 0)
	{
		emit(d, "keyring_families", V_PASS, NULL);
		return;
	}
	{
		ErrorData  *e = guarded(d, keyring_load_fn, NULL);
		StringInfoData missing;

		if (e != NULL)
		{
			/* the context may describe the file: only the reason is shown */
			emit(d, "keyring_families", V_FAIL, reason_of(e, "keyring_invalid"));
			return;
		}
		initStringInfo(&missing);
		for (int i = 0; i < nneeded; i++)
		{
			if (!ash_keyring_has_family(needed[i]))
				appendStringInfo(&missing, "%s%s", missing.len ? ", " : "", needed[i]);
		}
		if (missing.len > 0)
			emit_judged(d, "keyring_families", V_FAIL, "keyring_missing_family",
						psprintf("families: %s", missing.data));
		else
			emit(d, "keyring_families", V_PASS, NULL);
	}
}

/* ---------------------------------------------------------------------
 * The source.
 * ---------------------------------------------------------------------
 */

static void
open_probe_fn(Doctor *d, void *arg)
{
	MemoryContext old = MemoryContextSwitchTo(d->cxt);

	d->conn = ash_conn_open(d->f.connection, ASH_CONN_PROBE, "ash_replicant doctor");
	MemoryContextSwitchTo(old);
}

/* Arguments and result of one probe query. */
typedef struct Probe
{
	const char *query;
	int			nparams;
	const char *params[3];
	PGresult   *res;			/* TUPLES_OK only */
} Probe;

static void
probe_fn(Doctor *d, void *arg)
{
	Probe	   *p = arg;
	PGresult   *res;

	res = ash_conn_exec_params(d->conn, p->query, p->nparams, p->params, true);
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		ash_conn_report_result(res, "probe");
	p->res = res;
}

/*
 * The reason of a failed probe (an error raised by libpq_conn.c or
 * source_catalog.c; anything else is re-raised): privilege_probe_missing
 * when the source refused for lack of privilege, else source_probe_failed.
 * A broken connection also skips every later source check.
 */
static const char *
probe_failure(Doctor *d, ErrorData *e)
{
	if (e->sqlerrcode != ERRCODE_CONNECTION_FAILURE)
		ReThrowError(e);
	if (ash_conn_last_sqlstate[0] == '\0' || d->conn == NULL ||
		PQstatus(d->conn->conn) != CONNECTION_OK)
	{
		/* transport failure: the connection is unusable */
		if (d->conn != NULL)
			ash_conn_close(d->conn);
		d->conn = NULL;
		d->source_skip = "source_probe_failed";
	}
	return ash_source_probe_reason();
}

/*
 * Run a probe query.  On failure returns NULL and the reason of the
 * failure: privilege_probe_missing when the source refused for lack of
 * privilege, else source_probe_failed; a broken connection also skips
 * every later source check.
 */
static PGresult *
probe(Doctor *d, const char *query, int nparams, const char *p1, const char *p2,
	  const char **why)
{
	Probe		p;
	ErrorData  *e;

	memset(&p, 0, sizeof(p));
	p.query = query;
	p.nparams = nparams;
	p.params[0] = p1;
	p.params[1] = p2;
	e = guarded(d, probe_fn, &p);
	if (e == NULL)
		return p.res;
	*why = probe_failure(d, e);
	return NULL;
}

static bool
skip_source(Doctor *d, const char *check)
{
	if (d->source_skip == NULL)
		return false;
	emit(d, check, V_SKIPPED, d->source_skip);
	return true;
}

static void
check_reachable(Doctor *d)
{
	ErrorData  *e;

	if (skip_source(d, "source_reachable"))
		return;
	e = guarded(d, open_probe_fn, NULL);
	if (e != NULL)
	{
		const char *reason;
		const char *context;

		if (e->sqlerrcode != ERRCODE_CONNECTION_FAILURE)
			ReThrowError(e);
		/* what waiting cannot fix is named as the pipeline names it */
		reason = ash_conn_final_failure(&context);
		if (reason == NULL)
			reason = "source_unreachable";
		d->conn = NULL;
		emit(d, "source_reachable", V_FAIL, reason);
		d->source_skip = reason;
		return;
	}
	emit(d, "source_reachable", V_PASS, NULL);
}

/* Fail a source check with a reason; a failed probe may skip the rest. */
static void
probe_failed(Doctor *d, const char *check, const char *why)
{
	emit(d, check, V_FAIL, why);
}

static void
identity_fn(Doctor *d, void *arg)
{
	*(bool *) arg = ash_source_identity_matches(d->conn, d->f.sysid, d->f.database);
}

static void
check_identity(Doctor *d)
{
	ErrorData  *e;
	bool		same = false;

	if (skip_source(d, "source_identity"))
		return;
	e = guarded(d, identity_fn, &same);
	if (e != NULL)
	{
		const char *why = probe_failure(d, e);

		probe_failed(d, "source_identity", why);
		/* judge nothing of a source whose identity is unknown */
		d->source_skip = why;
		return;
	}
	if (!same)
	{
		emit(d, "source_identity", V_FAIL, "source_identity_mismatch");
		d->source_skip = "source_identity_mismatch";
		return;
	}
	emit(d, "source_identity", V_PASS, NULL);
}

static void
check_release(Doctor *d)
{
	/* the worker's floors (source_slot.c): wal2json's slot needs 10's syntax */
	int			floor = strcmp(d->f.decoder, "pgoutput") == 0 ? 120000 :
		strcmp(d->f.decoder, "wal2json") == 0 ? 100000 : 90600;

	if (skip_source(d, "source_release"))
		return;
	if (d->conn->server_version < floor)
	{
		emit(d, "source_release", V_FAIL, "source_release_unsupported");
		d->source_skip = "source_release_unsupported";
		return;
	}
	emit(d, "source_release", V_PASS, NULL);
}

/* A probe returning one boolean: pass when true, else fail with reason. */
static void
check_boolean(Doctor *d, const char *check, const char *query, const char *param,
			  const char *reason)
{
	PGresult   *res;
	const char *why = NULL;
	bool		ok;

	if (skip_source(d, check))
		return;
	res = probe(d, query, param ? 1 : 0, param, NULL, &why);
	if (res == NULL)
	{
		probe_failed(d, check, why);
		return;
	}
	ok = PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) && strcmp(PQgetvalue(res, 0, 0), "t") == 0;
	PQclear(res);
	emit(d, check, ok ? V_PASS : V_FAIL, ok ? NULL : reason);
}

/*
 * Can the source create and decode a logical slot?  As the worker judges
 * its refusal (source_slot.c): wal_level logical, a primary before 16
 * (a standby then decodes nothing), and max_replication_slots above 0.
 */
static void
check_logical(Doctor *d)
{
	PGresult   *res;
	const char *why = NULL;
	const char *reason = NULL;

	if (skip_source(d, "source_wal_level"))
		return;
	res = probe(d,
				"SELECT pg_catalog.current_setting('wal_level') = 'logical'"
				" AND (NOT pg_catalog.pg_is_in_recovery()"
				"  OR pg_catalog.current_setting('server_version_num')::pg_catalog.int4 >= 160000),"
				" pg_catalog.current_setting('max_replication_slots')::pg_catalog.int4 > 0",
				0, NULL, NULL, &why);
	if (res == NULL)
	{
		probe_failed(d, "source_wal_level", why);
		return;
	}
	if (PQntuples(res) != 1 || PQgetisnull(res, 0, 0) || strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		reason = "source_not_logical";
	else if (PQgetisnull(res, 0, 1) || strcmp(PQgetvalue(res, 0, 1), "t") != 0)
		reason = "source_slots_disabled";
	PQclear(res);
	emit(d, "source_wal_level", reason ? V_FAIL : V_PASS, reason);
}

/* Is name listed in a comma-separated list of (possibly quoted) names? */
static bool
listed(const char *list, const char *name)
{
	const char *p = list;

	while (*p)
	{
		const char *start;
		const char *end;

		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		start = p;
		while (*p && *p != ',')
			p++;
		end = p;
		while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
			end--;
		if (end - start >= 2 && *start == '"' && end[-1] == '"')
		{
			start++;
			end--;
		}
		if ((size_t) (end - start) == strlen(name) && strncmp(start, name, end - start) == 0)
			return true;
	}
	return false;
}

static void
check_output_plugin(Doctor *d)
{
	PGresult   *res;
	const char *why = NULL;
	bool		ok = true;

	if (skip_source(d, "output_plugin"))
		return;
	/* output_plugin_libraries exists from 15.19 on; absent means unrestricted */
	res = probe(d, "SELECT pg_catalog.current_setting('output_plugin_libraries', true)",
				0, NULL, NULL, &why);
	if (res == NULL)
	{
		/* a superuser-only setting: unreadable is unverifiable, not failed */
		if (strcmp(why, "privilege_probe_missing") == 0)
		{
			ereport(NOTICE,
					(errmsg("ash_replicant: output_plugin skipped: the source role cannot read output_plugin_libraries"),
					 errhint("Grant pg_read_all_settings to the source role to let the doctor verify it.")));
			emit_detail(d, "output_plugin", V_SKIPPED, why,
						"grant pg_read_all_settings to the source role to let doctor read output_plugin_libraries");
		}
		else
			probe_failed(d, "output_plugin", why);
		return;
	}
	if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0))
		ok = listed(PQgetvalue(res, 0, 0), decoder_plugin(d->f.decoder));
	PQclear(res);
	emit(d, "output_plugin", ok ? V_PASS : V_FAIL, ok ? NULL : "decoder_plugin_not_allowed");
}

/* ---------------------------------------------------------------------
 * The table set.
 * ---------------------------------------------------------------------
 */

/* The table set and its columns, in one snapshot of the source. */
static void
read_table_set_fn(Doctor *d, void *arg)
{
	MemoryContext old = MemoryContextSwitchTo(d->cxt);

	*(const char **) arg = ash_source_read_table_set(d->conn, &d->tableset, &d->rels, &d->pub);
	MemoryContextSwitchTo(old);
}

static AshSourceCoverage *judged_coverage(Doctor *d);

/* The mapped tables out of the publication and back since recorded. */
static void
publication_gaps_fn(Doctor *d, void *arg)
{
	AshCheckpointKey key = {d->f.sysid, d->f.database, d->f.slot_name};
	Oid			nsp = get_namespace_oid("ash_replicant", true);
	PGresult   *res;

	/* catalogs older than the library (check runtime says so): none recorded */
	if (!OidIsValid(nsp) || !OidIsValid(get_relname_relid("publication_members", nsp)))
		return;
	res = ash_source_table_set_membership(d->conn, &d->tableset);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	*(char **) arg = ash_publication_gaps(&key, d->mappings, res, d->cxt, NULL);
	SPI_finish();
	PQclear(res);
}

/*
 * The decoder's table set, described (source_catalog.c): a missing
 * publication, replication set or decoder extension, or a configured table
 * the source does not have, fails; so does a failed probe, and a publication
 * whose contract the mirror cannot honour (publication_contract_incompatible:
 * an action it does not publish, a row filter, a column list withholding
 * columns or publish_via_partition_root over a partitioned mapped table).  Every later
 * table-set check is then skipped with the same reason.
 */
static void
check_publication(Doctor *d)
{
	ErrorData  *e;
	const char *absent = NULL;
	char	   *missing;
	MemoryContext old;

	if (skip_source(d, "publication"))
		return;
	d->tableset.decoder = d->f.decoder;
	d->tableset.publication = d->f.publication;
	d->tableset.replication_sets = d->f.replication_sets;
	d->tableset.tables = d->f.tables;
	d->tableset.allow_keyless = d->f.allow_keyless;

	e = guarded(d, read_table_set_fn, &absent);
	if (e != NULL)
		absent = probe_failure(d, e);
	if (absent != NULL)
	{
		d->rels = NIL;
		emit(d, "publication", V_FAIL, absent);
		d->tableset_skip = absent;
		return;
	}

	old = MemoryContextSwitchTo(d->cxt);
	missing = ash_source_missing_tables(&d->tableset, &d->rels);
	MemoryContextSwitchTo(old);
	if (missing != NULL)
	{
		emit_judged(d, "publication", V_FAIL, "decoder_table_missing", missing);
		return;
	}
	/* wal2json drops the updates and deletes of a table without identity */
	old = MemoryContextSwitchTo(d->cxt);
	missing = ash_source_keyless_tables(&d->tableset, d->rels);
	MemoryContextSwitchTo(old);
	if (missing != NULL)
	{
		emit_judged(d, "publication", V_FAIL, "decoder_table_keyless", missing);
		return;
	}
	/* what it publishes must let the mirror stay exact (coverage.h) */
	if (d->mappings_known)
	{
		AshSourceCoverage *cov = judged_coverage(d);

		if (cov->publication.reason != NULL)
		{
			emit_judged(d, "publication", V_FAIL, cov->publication.reason,
						cov->publication.context);
			return;
		}
	}
	/* a mapped table out of the publication and back halts the next start */
	if (d->mappings_known &&
		ash_publication_watched_by(d->f.decoder, d->f.publication, d->f.replication_sets,
								   d->f.snapshot))
	{
		char	   *gaps = NULL;

		e = guarded(d, publication_gaps_fn, &gaps);
		if (e != NULL)
		{
			emit(d, "publication", V_FAIL, probe_failure(d, e));
			return;
		}
		if (gaps != NULL)
		{
			emit_judged(d, "publication", V_FAIL, "publication_gap", gaps);
			return;
		}
	}
	emit(d, "publication", V_PASS, NULL);
}

static bool
skip_table_set(Doctor *d, const char *check)
{
	if (skip_source(d, check))
		return true;
	if (d->tableset_skip != NULL)
	{
		emit(d, check, V_SKIPPED, d->tableset_skip);
		return true;
	}
	return false;
}

static void
check_privilege_select(Doctor *d)
{
	ListCell   *lc;
	StringInfoData denied;

	if (skip_table_set(d, "privilege_select"))
		return;
	initStringInfo(&denied);
	foreach(lc, d->rels)
	{
		AshSourceRel *r = lfirst(lc);

		if (r->exists && !r->has_select)
			appendStringInfo(&denied, "%s%s.%s", denied.len ? ", " : "",
							 quote_identifier(r->name.nspname), quote_identifier(r->name.relname));
	}
	if (denied.len > 0)
		emit_judged(d, "privilege_select", V_FAIL, "privilege_select_missing",
					psprintf("tables: %s", denied.data));
	else
		emit(d, "privilege_select", V_PASS, NULL);
}

/*
 * The coverage judgement (source_catalog.c, the same the pipeline renders
 * at activation and in every census), once for both rows: "coverage" is
 * its table-set part, "columns" its per-table part.
 */
static AshSourceCoverage *
judged_coverage(Doctor *d)
{
	if (!d->coverage_judged)
	{
		ash_source_judge_coverage(d->specs, d->mappings, d->f.ignored, d->rels, &d->pub,
								  &d->coverage);
		d->coverage_judged = true;
	}
	return &d->coverage;
}

static void
check_coverage(Doctor *d)
{
	AshSourceCoverage *cov;
	ListCell   *lc;

	if (skip_table_set(d, "coverage"))
		return;
	if (!d->mappings_known)
	{
		emit(d, "coverage", V_SKIPPED, "config_invalid");
		return;
	}
	cov = judged_coverage(d);
	if (cov->table_set.reason != NULL)
	{
		emit_judged(d, "coverage", V_FAIL, cov->table_set.reason, cov->table_set.context);
		return;
	}
	if (cov->warnings != NIL)
	{
		AshCoverageVerdict *w = linitial(cov->warnings);

		foreach(lc, cov->warnings)
		{
			AshCoverageVerdict *v = lfirst(lc);

			if (v->context)
				ereport(NOTICE,
						(errmsg("ash_replicant: coverage warn: %s (%s)", v->reason, v->context)));
		}
		emit_detail(d, "coverage", V_WARN, w->reason, w->context);
		return;
	}
	emit(d, "coverage", V_PASS, NULL);
}

/* A judgement of a mapping's target columns against its source table. */
typedef char *(*TargetColumnsJudge) (const AshMapping *m, const AshSourceTable *src, Oid owner);

/*
 * The judge's findings over every mapping whose source table exists:
 * "target t: <what judge says>; ..." or NULL.
 */
static char *
judge_target_columns(Doctor *d, TargetColumnsJudge judge, Oid owner)
{
	StringInfoData out;
	ListCell   *lc;

	initStringInfo(&out);
	foreach(lc, d->mappings)
	{
		AshMapping *m = lfirst(lc);
		ListCell   *rc;

		foreach(rc, d->rels)
		{
			AshSourceRel *r = lfirst(rc);
			char	   *cols;

			if (!r->exists || strcmp(r->name.nspname, m->source_schema) != 0 ||
				strcmp(r->name.relname, m->source_table) != 0)
				continue;
			cols = judge(m, &r->desc, owner);
			if (cols != NULL)
				appendStringInfo(&out, "%starget %s: %s", out.len > 0 ? "; " : "",
								 quote_qualified_identifier(get_namespace_name(get_rel_namespace(m->target_relid)),
															get_rel_name(m->target_relid)),
								 cols);
		}
	}
	return out.len > 0 ? out.data : NULL;
}

/*
 * Target columns every insert would fail on (42501): fed by no source
 * column, their default draws from a sequence the sink owner may not use.
 * Mapping validation cannot tell them (which columns the source feeds is
 * known here only).  "target t: n (public.t_n_seq); ..." or NULL.
 */
static char *
denied_defaults(Doctor *d)
{
	AshMappingSink *sink = ash_mapping_sink_load(d->sink_name, true, false);
	char	   *found;

	if (sink == NULL || !SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(sink->owner)))
		return NULL;			/* destination_owner_invalid: its own check */
	found = judge_target_columns(d, ash_coverage_denied_defaults, sink->owner);
	if (found == NULL)
		return NULL;
	return psprintf("sink owner %s lacks USAGE on the sequences behind the defaults of target columns no source column feeds: %s",
					quote_identifier(GetUserNameFromId(sink->owner, false)), found);
}

static char *
unfed_required_judge(const AshMapping *m, const AshSourceTable *src, Oid owner)
{
	return ash_coverage_unfed_required(m, src);
}

/*
 * Target columns every insert would fail on (23502): fed by no source
 * column, NOT NULL, without a default.  "target t: c; ..." or NULL.
 */
static char *
unfed_required(Doctor *d)
{
	char	   *found = judge_target_columns(d, unfed_required_judge, InvalidOid);

	return found == NULL ? NULL :
		psprintf("target columns no source column feeds are NOT NULL without a default: %s", found);
}

static void
check_columns(Doctor *d)
{
	AshSourceCoverage *cov;
	char	   *denied;

	if (skip_table_set(d, "columns"))
		return;
	if (!d->mappings_known)
	{
		emit(d, "columns", V_SKIPPED, "config_invalid");
		return;
	}
	cov = judged_coverage(d);
	if (cov->columns.reason != NULL)
		emit_judged(d, "columns", V_FAIL, cov->columns.reason, cov->columns.context);
	else if ((denied = denied_defaults(d)) != NULL)
		emit_judged(d, "columns", V_FAIL, "config_invalid", denied);
	else if ((denied = unfed_required(d)) != NULL)
		emit_judged(d, "columns", V_FAIL, "config_invalid", denied);
	else if (cov->narrowing.reason != NULL)
		emit_judged(d, "columns", V_WARN, cov->narrowing.reason, cov->narrowing.context);
	else
		emit(d, "columns", V_PASS, NULL);
}

/*
 * Rows a go-forward start leaves behind: with snapshot off, a mapped source
 * table that already has rows is mirrored from the slot on only -- say so,
 * and louder when its target has a foreign key, which the first change to
 * an old row's children will trip (apply_failed).  A snapshot copies them.
 */
static void
rows_fn(Doctor *d, void *arg)
{
	MemoryContext old = MemoryContextSwitchTo(d->cxt);

	*(List **) arg = ash_source_tables_with_rows(d->conn, d->mappings, d->rels);
	MemoryContextSwitchTo(old);
}

/* Types of checkpoint_key's values. */
static Oid	checkpoint_key_types[3] = {TEXTOID, TEXTOID, TEXTOID};

/*
 * The sink's checkpoint key as statement parameters ($1..$3), then an SPI
 * connection to run them on (the caller calls SPI_finish).  False, with
 * nothing connected, while the pipeline names no source yet.
 */
static bool
checkpoint_key(Doctor *d, Datum values[3])
{
	if (empty(d->f.sysid) || empty(d->f.database))
		return false;
	values[0] = CStringGetTextDatum(d->f.sysid);
	values[1] = CStringGetTextDatum(d->f.database);
	values[2] = CStringGetTextDatum(d->f.slot_name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	return true;
}

/* The mapped tables with rows, where the source server holds an origin. */
static void
origins_fn(Doctor *d, void *arg)
{
	if (ash_source_has_origins(d->conn))
		rows_fn(d, arg);
}

/*
 * A snapshot of a pipeline with origin => 'none' copies no table with rows
 * from a source server that holds a replication origin: it halts
 * snapshot_unsupported (snapshot.c, ash_snap_refuse_origins).  Fail while
 * the checkpoint records no completed snapshot, warn after one (only a
 * table mapped later is copied then).
 */
static void
check_snapshot_origins(Doctor *d)
{
	List	   *tables = NIL;
	bool		complete = false;
	Datum		values[3];
	ErrorData  *e = guarded(d, origins_fn, &tables);
	StringInfoData detail;
	ListCell   *lc;

	if (e != NULL)
	{
		probe_failed(d, "existing_rows", probe_failure(d, e));
		return;
	}
	if (tables == NIL)
	{
		emit(d, "existing_rows", V_PASS, NULL);	/* the snapshot copies them */
		return;
	}
	if (checkpoint_key(d, values))
	{
		if (SPI_execute_with_args("SELECT 1 FROM ash_replicant.checkpoints c"
								  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
								  "   AND pg_catalog.to_jsonb(c) OPERATOR(pg_catalog.->>) 'snapshot_phase' = 'complete'",
								  3, checkpoint_key_types, values, NULL, true, 0) != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: checkpoint read failed");
		complete = SPI_processed > 0;
		SPI_finish();
	}
	initStringInfo(&detail);
	appendStringInfoString(&detail,
						   "origin => 'none' and the source server holds replication origins: a snapshot cannot tell the rows they wrote from local ones in ");
	foreach(lc, tables)
		appendStringInfo(&detail, "%s%s", lc == list_head(tables) ? "" : ", ", (char *) lfirst(lc));
	appendStringInfoString(&detail, complete ?
						   " (copied already; a table mapped from now on is not copied if it has rows)" :
						   " (docs/snapshots.md#origins)");
	emit_detail(d, "existing_rows", complete ? V_WARN : V_FAIL, "snapshot_unsupported", detail.data);
}

/*
 * What the go-forward slot left out, as the worker recorded it when it
 * created the slot (checkpoints.go_forward_uncopied, 1.2.0 on; preflight
 * reads this one note of the checkpoint too: once a slot exists, what the
 * tables hold now says nothing about what the mirror lacks).  Returns
 * false when there is no such record (no checkpoint yet, a snapshot took
 * over, or a slot older than the record): then the source is asked.
 */
static bool
recorded_uncopied(Doctor *d, List **tables)
{
	Oid		   *types = checkpoint_key_types;
	Datum		values[3];
	bool		found = false;

	*tables = NIL;
	if (!checkpoint_key(d, values))
		return false;
	if (SPI_execute_with_args("SELECT u FROM ash_replicant.checkpoints c,"
							  " LATERAL pg_catalog.jsonb_array_elements_text("
							  "   pg_catalog.to_jsonb(c) OPERATOR(pg_catalog.->) 'go_forward_uncopied') u"
							  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3"
							  "   AND pg_catalog.jsonb_typeof(pg_catalog.to_jsonb(c)"
							  "       OPERATOR(pg_catalog.->) 'go_forward_uncopied') = 'array'",
							  3, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: checkpoint read failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		MemoryContext old = MemoryContextSwitchTo(d->cxt);

		*tables = lappend(*tables, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1));
		MemoryContextSwitchTo(old);
	}
	if (SPI_execute_with_args("SELECT pg_catalog.jsonb_typeof(pg_catalog.to_jsonb(c)"
							  "   OPERATOR(pg_catalog.->) 'go_forward_uncopied') = 'array'"
							  " FROM ash_replicant.checkpoints c"
							  " WHERE source_system_id = $1 AND source_database = $2 AND slot_name = $3",
							  3, types, values, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		bool		isnull;

		found = DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull)) &&
			!isnull;
	}
	SPI_finish();
	return found;
}

static bool
name_listed(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
	{
		if (strcmp((char *) lfirst(lc), name) == 0)
			return true;
	}
	return false;
}

static void
check_existing_rows(Doctor *d)
{
	List	   *tables = NIL;
	ErrorData  *e;
	ListCell   *lc;
	StringInfoData fks;

	if (skip_table_set(d, "existing_rows"))
		return;
	if (!d->mappings_known)
	{
		emit(d, "existing_rows", V_SKIPPED, "config_invalid");
		return;
	}
	if (strcmp(d->f.snapshot, "off") != 0 && d->f.origin_none)
	{
		check_snapshot_origins(d);
		return;
	}
	if (strcmp(d->f.snapshot, "off") != 0)
	{
		emit(d, "existing_rows", V_PASS, NULL);	/* the snapshot copies them */
		return;
	}
	if (!recorded_uncopied(d, &tables))
	{
		e = guarded(d, rows_fn, &tables);
		if (e != NULL)
		{
			probe_failed(d, "existing_rows", probe_failure(d, e));
			return;
		}
	}
	if (tables == NIL)
	{
		emit(d, "existing_rows", V_PASS, NULL);
		return;
	}

	/* foreign keys of the targets of those tables */
	initStringInfo(&fks);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	foreach(lc, d->mappings)
	{
		AshMapping *m = lfirst(lc);
		Oid			types[1] = {OIDOID};
		Datum		values[1] = {ObjectIdGetDatum(m->target_relid)};
		char	   *qname = quote_qualified_identifier(m->source_schema, m->source_table);

		if (!name_listed(tables, qname) ||
			SPI_execute_with_args("SELECT pg_catalog.string_agg(pg_catalog.quote_ident(conname), ', ' ORDER BY conname)"
								  " FROM pg_catalog.pg_constraint"
								  " WHERE conrelid = $1 AND contype = 'f'",
								  1, types, values, NULL, true, 1) != SPI_OK_SELECT ||
			SPI_processed != 1)
			continue;
		{
			char	   *names = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			MemoryContext old = MemoryContextSwitchTo(d->cxt);

			if (names != NULL)
				appendStringInfo(&fks, "%s%s (%s)", fks.len ? ", " : "", qname, names);
			MemoryContextSwitchTo(old);
		}
	}
	SPI_finish();

	{
		StringInfoData detail;

		initStringInfo(&detail);
		foreach(lc, tables)
			appendStringInfo(&detail, "%s%s", lc == list_head(tables) ? "tables with rows that a go-forward start does not copy: " : ", ",
							 (char *) lfirst(lc));
		if (fks.len > 0)
			appendStringInfo(&detail, "; their targets have foreign keys that changes to those rows will trip: %s",
							 fks.data);
		appendStringInfoString(&detail, "; snapshot => 'v1' copies them (docs/snapshots.md)");
		emit_detail(d, "existing_rows", V_WARN,
					fks.len > 0 ? "go_forward_foreign_key" : "go_forward_rows_not_copied", detail.data);
	}
}

/* ---------------------------------------------------------------------
 * Doctor: checkpoint, slot, timeline, watermark, contract, runtime.
 * ---------------------------------------------------------------------
 */

static void
read_checkpoint_fn(Doctor *d, void *arg)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	int			ret;
	CheckpointFacts *cp = &d->cp;

	values[0] = CStringGetTextDatum(d->f.slot_name);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	/* a plain read: no lock, no write */
	ret = SPI_execute_with_args(
		"SELECT source_system_id, source_database, timeline_id, commit_lsn,"
		"  terminal_cause, decoder, contract IS NOT NULL,"
		"  GREATEST(end_lsn, acknowledged_lsn), acknowledged_lsn IS NOT NULL,"
		"  snapshot_phase IS NOT NULL"
		" FROM ash_replicant.checkpoints WHERE slot_name = $1",
		1, types, values, NULL, true, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: checkpoint read failed");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext old = MemoryContextSwitchTo(d->cxt);
		char	   *sysid = SPI_getvalue(tup, desc, 1);
		char	   *db = SPI_getvalue(tup, desc, 2);
		bool		isnull;

		if (strcmp(sysid, d->f.sysid) != 0 || strcmp(db, d->f.database) != 0)
			cp->foreign = true;
		else
		{
			cp->ours = true;
			cp->timeline = DatumGetInt32(SPI_getbinval(tup, desc, 3, &isnull));
			cp->commit_lsn = DatumGetLSN(SPI_getbinval(tup, desc, 4, &isnull));
			cp->terminal_cause = copy_text(tup, desc, 5);
			cp->decoder = copy_text(tup, desc, 6);
			cp->has_contract = get_bool(tup, desc, 7);
			cp->recorded = DatumGetLSN(SPI_getbinval(tup, desc, 8, &isnull));
			cp->recorded_known = get_bool(tup, desc, 9);
			cp->snapshot_recorded = get_bool(tup, desc, 10);
		}
		MemoryContextSwitchTo(old);
	}
	SPI_finish();
	cp->read = true;
}

static void
check_checkpoint(Doctor *d)
{
	CheckpointFacts *cp = &d->cp;
	ErrorData  *e;

	memset(cp, 0, sizeof(*cp));
	if (empty(d->f.sysid) || empty(d->f.database))
	{
		emit(d, "checkpoint_state", V_SKIPPED, "config_invalid");
		return;
	}
	if (!d->catalogs_current)
	{
		emit(d, "checkpoint_state", V_SKIPPED, "extension_version_mismatch");
		return;
	}
	e = guarded(d, read_checkpoint_fn, NULL);
	if (e != NULL)
	{
		memset(cp, 0, sizeof(*cp));
		emit(d, "checkpoint_state", V_FAIL, "checkpoint_state_unknown");
		return;
	}
	if (cp->foreign)
		emit(d, "checkpoint_state", V_FAIL, "checkpoint_identity_conflict");
	else if (cp->ours && cp->terminal_cause != NULL)
	{
		const char *reason = ash_reason_class(cp->terminal_cause) == ASH_REASON_UNKNOWN ?
		"tombstone_unknown" : cp->terminal_cause;

		emit_detail(d, "checkpoint_state", V_FAIL, reason,
					psprintf("%ssee docs/reasons.md#%s", halt_detail(&d->f), reason));
	}
	else if (cp->ours && cp->decoder != NULL && strcmp(cp->decoder, d->f.decoder) != 0)
		emit(d, "checkpoint_state", V_FAIL, "decoder_contract_incompatible");
	else
		emit(d, "checkpoint_state", V_PASS, NULL);	/* a missing row is lawful */
}

/* skipped when the checkpoint could not be read or its identity is unknown */
static bool
skip_checkpoint(Doctor *d, const char *check)
{
	if (d->cp.read)
		return false;
	emit(d, check, V_SKIPPED,
		 (empty(d->f.sysid) || empty(d->f.database)) ? "config_invalid" :
		 !d->catalogs_current ? "extension_version_mismatch" : "checkpoint_state_unknown");
	return true;
}

static void
check_slot(Doctor *d)
{
	PGresult   *res;
	const char *why = NULL;
	bool		watermark;
	const char *fail_reason = NULL;
	const char *warn_reason = NULL;
	int32		ours_before;
	int32		ours_after;
	bool		running;
	bool		foreign = false;

	if (skip_source(d, "slot") || skip_checkpoint(d, "slot"))
		return;
	/*
	 * As the slot check of a session (pipeline.c): a watermark, a snapshot
	 * attempt recorded (a copy unfinished has none yet), or a go-forward
	 * acknowledgement
	 */
	watermark = d->cp.ours && (d->cp.commit_lsn != InvalidXLogRecPtr ||
							   d->cp.snapshot_recorded ||
							   (d->cp.recorded_known && strcmp(d->f.snapshot, "off") == 0));
	/*
	 * The worker's session before and after the probe: one that began or
	 * ended meanwhile is still known as ours
	 */
	running = ash_pipeline_source_pid(d->sink_name, &ours_before);
	res = probe(d, d->conn->server_version >= 130000 ?
				"SELECT plugin::pg_catalog.text, slot_type, database::pg_catalog.text, wal_status, active,"
				" confirmed_flush_lsn::pg_catalog.text, active_pid"
				" FROM pg_catalog.pg_replication_slots WHERE slot_name = $1" :
				"SELECT plugin::pg_catalog.text, slot_type, database::pg_catalog.text, NULL, active,"
				" confirmed_flush_lsn::pg_catalog.text, active_pid"
				" FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
				1, d->f.slot_name, NULL, &why);
	running = ash_pipeline_source_pid(d->sink_name, &ours_after) || running;
	if (res == NULL)
	{
		probe_failed(d, "slot", why);
		return;
	}
	if (PQntuples(res) == 0)
	{
		/*
		 * created at activation; recreating it under a watermark, a
		 * snapshot attempt, or after a go-forward checkpoint acknowledged
		 * it, skips changes
		 */
		if (watermark)
			fail_reason = "source_slot_missing";
	}
	else
	{
		const char *wal_status = PQgetisnull(res, 0, 3) ? NULL : PQgetvalue(res, 0, 3);

		/*
		 * Active for a session that is not the worker's: another consumer
		 * (a pg_recvlogical, a pipeline of another destination under the
		 * same application name), or a session of an earlier worker still
		 * ending.  The worker cannot stream meanwhile.
		 */
		if (strcmp(PQgetvalue(res, 0, 4), "t") == 0)
		{
			int32		holder = PQgetisnull(res, 0, 6) ? 0 : atoi(PQgetvalue(res, 0, 6));

			foreign = !running ||
				(holder != ours_before && holder != ours_after) || holder == 0;
		}

		if (strcmp(PQgetvalue(res, 0, 1), "logical") != 0 ||
			PQgetisnull(res, 0, 0) ||
			strcmp(PQgetvalue(res, 0, 0), decoder_plugin(d->f.decoder)) != 0)
			fail_reason = "decoder_contract_incompatible";
		else if (PQgetisnull(res, 0, 2) || strcmp(PQgetvalue(res, 0, 2), d->f.database) != 0)
			fail_reason = "checkpoint_identity_conflict";
		else if (wal_status != NULL && strcmp(wal_status, "lost") == 0)
			fail_reason = "retention_lost";
		else if (d->cp.ours && d->cp.recorded_known && !PQgetisnull(res, 0, 5) &&
				 (!running || foreign) &&
				 DatumGetLSN(DirectFunctionCall1(pg_lsn_in,
												 CStringGetDatum(PQgetvalue(res, 0, 5)))) > d->cp.recorded)
		{
			/*
			 * Past what this database recorded (a slot the worker streams
			 * moves with its records: its start judged it; one another
			 * consumer holds does not)
			 */
			fail_reason = "checkpoint_behind_slot";
		}
		else if (wal_status != NULL &&
				 (strcmp(wal_status, "extended") == 0 || strcmp(wal_status, "unreserved") == 0))
			warn_reason = "retention_at_risk";
		else if (foreign)
			warn_reason = "source_slot_in_use";
	}
	PQclear(res);
	if (fail_reason)
		emit(d, "slot", V_FAIL, fail_reason);
	else if (warn_reason)
		emit(d, "slot", V_WARN, warn_reason);
	else
		emit(d, "slot", V_PASS, NULL);
}

static void
check_timeline(Doctor *d)
{
	PGresult   *res;
	const char *why = NULL;
	uint32		tli = 0;

	if (skip_source(d, "timeline") || skip_checkpoint(d, "timeline"))
		return;
	if (!d->cp.ours)
	{
		emit(d, "timeline", V_PASS, NULL);	/* nothing recorded to differ from */
		return;
	}
	/* the insert timeline, as IDENTIFY_SYSTEM reports it, is in the WAL file name */
	res = probe(d, "SELECT pg_catalog.pg_walfile_name(pg_catalog.pg_current_wal_flush_lsn())",
				0, NULL, NULL, &why);
	if (res != NULL && PQntuples(res) == 1 && strlen(PQgetvalue(res, 0, 0)) >= 8)
	{
		char		hex[9];

		memcpy(hex, PQgetvalue(res, 0, 0), 8);
		hex[8] = '\0';
		tli = (uint32) strtoul(hex, NULL, 16);
	}
	if (res != NULL)
		PQclear(res);
	if (tli == 0 && d->conn != NULL)
	{
		res = probe(d, "SELECT timeline_id FROM pg_catalog.pg_control_checkpoint()",
					0, NULL, NULL, &why);
		if (res != NULL && PQntuples(res) == 1)
			tli = (uint32) strtoul(PQgetvalue(res, 0, 0), NULL, 10);
		if (res != NULL)
			PQclear(res);
	}
	if (tli == 0)
	{
		probe_failed(d, "timeline", why ? why : "source_probe_failed");
		return;
	}
	if ((uint32) d->cp.timeline != tli)
		emit(d, "timeline", V_FAIL, "source_timeline_changed");
	else
		emit(d, "timeline", V_PASS, NULL);
}

static void
check_watermark(Doctor *d)
{
	PGresult   *res;
	const char *why = NULL;
	uint32		hi,
				lo;
	XLogRecPtr	flush;

	if (skip_source(d, "watermark") || skip_checkpoint(d, "watermark"))
		return;
	if (!d->cp.ours || d->cp.commit_lsn == InvalidXLogRecPtr)
	{
		emit(d, "watermark", V_PASS, NULL);
		return;
	}
	res = probe(d, "SELECT pg_catalog.pg_current_wal_flush_lsn()::pg_catalog.text",
				0, NULL, NULL, &why);
	if (res == NULL)
	{
		probe_failed(d, "watermark", why);
		return;
	}
	if (PQntuples(res) != 1 || sscanf(PQgetvalue(res, 0, 0), "%X/%X", &hi, &lo) != 2)
	{
		PQclear(res);
		emit(d, "watermark", V_FAIL, "source_probe_failed");
		return;
	}
	PQclear(res);
	flush = ((uint64) hi << 32) | lo;
	/* once behind, for good: the binding keeps the halt (checkpoint.c) */
	if (d->cp.commit_lsn > flush ||
		(d->cp.terminal_cause != NULL &&
		 strcmp(d->cp.terminal_cause, "checkpoint_ahead_of_source") == 0))
		emit(d, "watermark", V_FAIL, "checkpoint_ahead_of_source");
	else
		emit(d, "watermark", V_PASS, NULL);
}

/*
 * The contract manifest is judged by contract.c exactly as the next binding
 * would judge it, but under a guard that makes the judgement read-only:
 * in a subtransaction that is always rolled back, with
 * transaction_read_only on (an admission's write fails before it can take
 * a transaction id) and log_min_messages at PANIC (the binding's
 * checkpoint.conflict event is the worker's to log, not the doctor's).
 *
 *	 returns normally             the recorded manifest is unchanged: pass
 *	 read-only write refused      a first manifest or a pure addition, which
 *								  the next binding admits: pass
 *	 a halt                       contract_incompatible or
 *								  decoder_contract_incompatible: fail
 */
static void
contract_fn(Doctor *d, void *arg)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("transaction_read_only", "on", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("log_min_messages", "panic", PGC_SUSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	ash_contract_admit(d->sink_name, d->f.sysid, d->f.database, d->f.slot_name);
	SPI_finish();
	AtEOXact_GUC(false, nest);
	/* never keep anything: roll the subtransaction back */
	d->contract_unchanged = true;
	elog(ERROR, "ash_replicant: contract judgement rolled back");
}

static void
check_contract(Doctor *d)
{
	ErrorData  *e;

	if (skip_checkpoint(d, "contract"))
		return;
	if (!d->f.configured)
	{
		emit(d, "contract", V_SKIPPED, "config_invalid");
		return;
	}
	d->contract_unchanged = false;
	e = guarded(d, contract_fn, NULL);
	if (e == NULL || d->contract_unchanged ||
		e->sqlerrcode == ERRCODE_READ_ONLY_SQL_TRANSACTION)
		emit(d, "contract", V_PASS, NULL);
	else
	{
		const char *reason = reason_of(e, NULL);

		if (reason != NULL)
			emit_judged(d, "contract", V_FAIL, reason, context_of(e));
		else
			emit(d, "contract", V_SKIPPED, NULL);	/* could not be judged */
	}
}

/*
 * Are the installed catalogs the library's version?  Older ones (the
 * library updated, ALTER EXTENSION not yet run) cannot be read as the
 * checks read them: the checks that read the checkpoint say so instead of
 * failing as unreadable.
 */
static bool
catalogs_current(void)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1] = {CStringGetTextDatum(ASH_EXTENSION_VERSION)};
	bool		current;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	if (SPI_execute_with_args("SELECT 1 FROM pg_catalog.pg_extension"
							  " WHERE extname = 'ash_replicant' AND extversion = $1",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the extension version failed");
	current = SPI_processed == 1;
	SPI_finish();
	return current;
}

static void
check_runtime(Doctor *d)
{
	bool		restored;
	const char *unsupervised;

	if ((unsupervised = ash_unsupervised_reason()) != NULL)
	{
		emit(d, "runtime", V_FAIL, unsupervised);
		return;
	}
	if (!d->catalogs_current)
	{
		emit(d, "runtime", V_FAIL, "extension_version_mismatch");
		return;
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "ash_replicant: SPI_connect failed");
	{
		char	   *installation = ash_installation_id();
		Oid			types[2] = {TEXTOID, TEXTOID};
		Datum		values[2];

		values[0] = CStringGetTextDatum(d->sink_name);
		values[1] = CStringGetTextDatum(installation);
		if (SPI_execute_with_args("SELECT 1 FROM ash_replicant.pipelines"
								  " WHERE sink_name = $1 AND enabled"
								  "   AND started_in IS DISTINCT FROM $2::pg_catalog.uuid",
								  2, types, values, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "ash_replicant: reading the pipeline failed");
		restored = SPI_processed == 1;
	}
	SPI_finish();
	if (restored)
		emit_judged(d, "runtime", V_FAIL, "destination_restored",
					"the pipeline is enabled in another installation of the extension (a restored dump): ash_replicant_start runs it here");
	else
		emit(d, "runtime", V_PASS, NULL);
}

/* ---------------------------------------------------------------------
 * Entry points.
 * ---------------------------------------------------------------------
 */

static void
run_checks(FunctionCallInfo fcinfo, bool doctor)
{
	Doctor	   *d;

	if (PG_ARGISNULL(0))
		ash_reject(ERRCODE_NULL_VALUE_NOT_ALLOWED, doctor ? "doctor" : "preflight",
				   "config_invalid", "sink_name must not be NULL");

	/*
	 * 0.4.x catalogs cannot be judged by these checks (their checkpoints do
	 * not say which source they belong to): refuse, naming the update.
	 */
	if (ash_catalogs_slot_only())
		ash_reject(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE, doctor ? "doctor" : "preflight",
				   "extension_version_mismatch",
				   "the installed catalogs key checkpoints by slot name only: run ALTER EXTENSION ash_replicant UPDATE, see docs/operations.md");

	InitMaterializedSRF(fcinfo, 0);
	d = palloc0(sizeof(Doctor));
	d->rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	d->cxt = CurrentMemoryContext;
	d->sink_name = text_to_cstring(PG_GETARG_TEXT_PP(0));

	load_sink_facts(d);
	d->catalogs_current = catalogs_current();

	PG_TRY();
	{
		check_configuration(d);
		check_destination_mappings(d);
		check_keyring(d);
		check_reachable(d);
		check_identity(d);
		check_release(d);
		check_logical(d);
		check_boolean(d, "privilege_replication",
					  "SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles"
					  " WHERE rolname = current_user",
					  NULL, "privilege_replication_missing");
		check_output_plugin(d);
		check_publication(d);
		check_privilege_select(d);
		check_coverage(d);
		check_columns(d);
		check_existing_rows(d);
		if (doctor)
		{
			check_checkpoint(d);
			check_slot(d);
			check_timeline(d);
			check_watermark(d);
			check_contract(d);
			check_runtime(d);
		}
	}
	PG_FINALLY();
	{
		if (d->conn != NULL)
			ash_conn_close(d->conn);
		d->conn = NULL;
	}
	PG_END_TRY();
}

/*
 * ash_replicant_preflight(sink_name) — may this pipeline start?  Reads no
 * checkpoint.
 */
Datum
ash_replicant_preflight(PG_FUNCTION_ARGS)
{
	run_checks(fcinfo, false);
	return (Datum) 0;
}

/*
 * ash_replicant_doctor(sink_name) — every preflight check plus checkpoint,
 * slot, timeline, watermark, contract and runtime.
 */
Datum
ash_replicant_doctor(PG_FUNCTION_ARGS)
{
	run_checks(fcinfo, true);
	return (Datum) 0;
}
