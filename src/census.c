/*-------------------------------------------------------------------------
 *
 * census.c
 *	  Periodic re-verification of mapping and source coverage.
 *
 * NOTES
 *	  The census is what lets status claim "healthy": every interval_ms
 *	  (with jitter, scheduled only after the previous run ended) the
 *	  pipeline re-checks, without writing anywhere:
 *
 *	  - destination: every mapped target still exists, and the contract
 *		manifest rebuilt now has the fingerprint recorded at admission
 *		(a target column retyped or dropped is drift);
 *	  - source (read-only probe connection, default_transaction_read_only):
 *		the source identity, the publication exists, and every table of the
 *		publication is mapped or ignored.
 *
 *	  Drift halts (source_table_unmapped, census_drift, ...).  A source that
 *	  cannot be probed (unreachable, timeout) is a fault; the caller counts
 *	  consecutive faults and halts census_unverifiable at the bound.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/pg_prng.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "ash_replicant.h"
#include "census.h"
#include "contract.h"
#include "errors.h"
#include "libpq_conn.h"

long
ash_census_next_delay(AshPipelineConfig *cfg)
{
	double		j = cfg->census.jitter_ratio;
	double		r = pg_prng_double(&pg_global_prng_state) * 2.0 - 1.0;	/* [-1, 1) */

	return (long) (cfg->census.interval_ms * (1.0 + j * r));
}

static void
check_destination(AshPipelineConfig *cfg, AshCheckpointKey *key)
{
	ListCell   *lc;
	MemoryContext cxt = CurrentMemoryContext;

	StartTransactionCommand();
	foreach(lc, cfg->mappings)
	{
		AshMapping *m = lfirst(lc);

		if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(m->target_relid)))
			ash_halt("census_drift", "the target of mapped source table %s.%s no longer exists",
					 quote_identifier(m->source_schema), quote_identifier(m->source_table));
	}
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);

	/* the mapping as admitted: rebuilt contract vs recorded fingerprint */
	if (key != NULL)
		ash_contract_recheck(cfg->sink_name, key->system_id, key->database, key->slot_name);
}

static void
check_source(AshPipelineConfig *cfg, AshConn *c)
{
	PGresult   *res;
	const char *params[1];

	/* identity first: judge nothing of a foreign source */
	res = ash_conn_exec(c, "SELECT current_database()", false);
	if (PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 0), cfg->source_database) != 0)
	{
		PQclear(res);
		ash_halt("source_identity_mismatch", "census probe");
	}
	PQclear(res);
	res = ash_conn_exec(c, "SELECT system_identifier::text FROM pg_catalog.pg_control_system()", true);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1 &&
		strcmp(PQgetvalue(res, 0, 0), cfg->source_system_identifier) != 0)
	{
		PQclear(res);
		ash_halt("source_identity_mismatch", "census probe");
	}
	PQclear(res);

	params[0] = cfg->publication;
	res = ash_conn_exec_params(c, "SELECT 1 FROM pg_catalog.pg_publication WHERE pubname = $1",
							   1, params, false);
	if (PQntuples(res) != 1)
	{
		PQclear(res);
		ash_halt("source_publication_missing", "census probe");
	}
	PQclear(res);

	res = ash_conn_exec_params(c, "SELECT schemaname, tablename FROM pg_catalog.pg_publication_tables"
							   " WHERE pubname = $1 ORDER BY 1, 2",
							   1, params, false);
	for (int i = 0; i < PQntuples(res); i++)
	{
		const char *nsp = PQgetvalue(res, i, 0);
		const char *rel = PQgetvalue(res, i, 1);

		if (ash_config_find_mapping(cfg, nsp, rel) == NULL &&
			!ash_config_is_ignored(cfg, nsp, rel))
		{
			char	   *qn = psprintf("%s.%s", quote_identifier(nsp), quote_identifier(rel));

			PQclear(res);
			ash_halt("source_table_unmapped", "table %s (census)", qn);
		}
	}
	PQclear(res);
}

AshCensusVerdict
ash_census_run(AshPipelineConfig *cfg, AshCheckpointKey *key)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile AshCensusVerdict verdict = ASH_CENSUS_PASS;
	AshConn    *volatile conn = NULL;
	int			saved_timeout = ash_connect_timeout_ms;

	check_destination(cfg, key);

	ash_connect_timeout_ms = cfg->census.timeout_ms;
	PG_TRY();
	{
		conn = ash_conn_open(cfg->connection, ASH_CONN_PROBE, "ash_replicant census");
		check_source(cfg, conn);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		ash_connect_timeout_ms = saved_timeout;
		if (conn)
			ash_conn_close(conn);
		if (ash_pending_halt != NULL)
			PG_RE_THROW();
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		if (edata->sqlerrcode != ERRCODE_CONNECTION_FAILURE)
		{
			/* a failure on our side is not a source fault */
			ReThrowError(edata);
		}
		FreeErrorData(edata);
		verdict = ASH_CENSUS_FAULT;
		conn = NULL;
	}
	PG_END_TRY();
	ash_connect_timeout_ms = saved_timeout;
	if (conn)
		ash_conn_close(conn);
	return verdict;
}
