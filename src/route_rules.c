/*-------------------------------------------------------------------------
 *
 * route_rules.c
 *	  The rules binding a sink's message routes to its settings and its
 *	  decoder, in one place: ash_replicant_start, alter_sink, preflight and
 *	  doctor refuse with the verdict, the worker halts with it at every
 *	  load of its configuration (a restart after each change), so none of
 *	  them runs on a configuration the others refuse as unsafe.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "route_rules.h"

static void
set_verdict(AshRouteVerdict *v, const char *reason, int sqlerrcode, const char *context)
{
	v->reason = reason;
	v->sqlerrcode = sqlerrcode;
	v->context = context;
}

void
ash_route_rules_judge(const char *sink_name, AshRouteRuleScope scope,
					  AshRouteVerdict *verdict)
{
	Oid			types[1] = {TEXTOID};
	Datum		values[1];
	HeapTuple	tup;
	TupleDesc	desc;
	bool		isnull;
	int			ret;
	bool		append_log;
	bool		has_horizon;
	char	   *decoder;
	int64		nroutes;
	int64		nbelow;
	int64		nignored;
	bool		start = scope == ASH_ROUTE_RULES_START;
	bool		running = scope != ASH_ROUTE_RULES_SINK;

	set_verdict(verdict, NULL, 0, NULL);
	values[0] = CStringGetTextDatum(sink_name);

	/* not read-only: alter_sink judges what its own UPDATE stored */
	ret = SPI_execute_with_args(
		"SELECT s.sink_kind OPERATOR(pg_catalog.=) 'append_log',"
		"  s.recovery_horizon IS NOT NULL,"
		"  coalesce(p.decoder, 'pgoutput'),"
		"  (SELECT pg_catalog.count(*) FROM ash_replicant.message_routes r"
		"    WHERE r.sink_name OPERATOR(pg_catalog.=) s.sink_name),"
		"  (SELECT pg_catalog.count(*) FROM ash_replicant.message_routes r"
		"    WHERE r.sink_name OPERATOR(pg_catalog.=) s.sink_name"
		"      AND r.retention OPERATOR(pg_catalog.<) s.recovery_horizon),"
		"  (SELECT pg_catalog.count(*) FROM ash_replicant.message_routes r"
		"    WHERE r.sink_name OPERATOR(pg_catalog.=) s.sink_name"
		"      AND r.prefix OPERATOR(pg_catalog.=) ANY (s.ignored_message_prefixes))"
		" FROM ash_replicant.sinks s"
		" LEFT JOIN ash_replicant.pipelines p"
		"   ON p.sink_name OPERATOR(pg_catalog.=) s.sink_name"
		" WHERE s.sink_name OPERATOR(pg_catalog.=) $1",
		1, types, values, NULL, false, 0);
	if (ret != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the message routes of a sink failed");
	if (SPI_processed != 1)
		return;

	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	append_log = DatumGetBool(SPI_getbinval(tup, desc, 1, &isnull)) && !isnull;
	has_horizon = DatumGetBool(SPI_getbinval(tup, desc, 2, &isnull));
	decoder = SPI_getvalue(tup, desc, 3);
	nroutes = DatumGetInt64(SPI_getbinval(tup, desc, 4, &isnull));
	nbelow = DatumGetInt64(SPI_getbinval(tup, desc, 5, &isnull));
	nignored = DatumGetInt64(SPI_getbinval(tup, desc, 6, &isnull));

	/* the order ash_replicant_start has always judged them in */
	if (start && has_horizon && nroutes == 0)
		set_verdict(verdict, "recovery_horizon_invalid", ERRCODE_INVALID_PARAMETER_VALUE,
					"the sink has a recovery_horizon but no message routes");
	else if (!append_log && nroutes > 0 && !has_horizon)
		set_verdict(verdict, "recovery_horizon_invalid", ERRCODE_INVALID_PARAMETER_VALUE,
					"a state_mirror sink that routes messages needs a recovery_horizon");
	else if (nbelow > 0)
		set_verdict(verdict, "retention_below_recovery_horizon", ERRCODE_INVALID_PARAMETER_VALUE,
					"a message route retains less than the sink's recovery_horizon");

	/*
	 * An ignored prefix is acknowledged before routes are looked at: a
	 * routed one listed there would be dropped without effect or claim.
	 */
	else if (nignored > 0)
		set_verdict(verdict, "message_route_invalid", ERRCODE_INVALID_PARAMETER_VALUE,
					"a routed prefix is listed in ignored_message_prefixes");
	else if (running && nroutes > 0 && strcmp(decoder, "pglogical") == 0)
		set_verdict(verdict, "decoder_capability_unsupported", ERRCODE_FEATURE_NOT_SUPPORTED,
					"decoder pglogical cannot deliver the logical messages the sink routes");

	/*
	 * wal2json 2.5 writes a message's content up to its first zero byte and
	 * no length, so "ab" and "ab\0cd" arrive alike; no route is safe (see
	 * docs/sql-api-sinks.md#decoders): a bytea target would store the cut
	 * content, a text one would store it where pgoutput halts (a zero byte
	 * is not text), and the digest and function targets see the cut bytes.
	 */
	else if (running && nroutes > 0 && strcmp(decoder, "wal2json") == 0)
		set_verdict(verdict, "decoder_capability_unsupported", ERRCODE_FEATURE_NOT_SUPPORTED,
					"decoder wal2json cannot carry the whole content of the logical messages the sink routes");
}
