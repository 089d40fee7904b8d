/*-------------------------------------------------------------------------
 *
 * spi_util.c
 *	  SPI helpers shared by the apply driver, its strategies, messages and
 *	  the checkpoint: execute a kept plan, catch one SQLSTATE in a
 *	  subtransaction, prepare and keep a plan.
 *
 * NOTES
 *	  SPI switches to its own procedure context; every helper returns in the
 *	  caller's memory context, so per-change work never lands in SPI's
 *	  (which lives until SPI_finish, i.e. the batch).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "access/xact.h"
#include "executor/spi.h"
#include "mb/pg_wchar.h"
#include "utils/guc.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

#include "owner_scope.h"
#include "spi_util.h"

uint64
ash_spi_execute(SPIPlanPtr plan, Datum *values, const char *nulls, int expected_ret)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			ret = SPI_execute_plan(plan, values, nulls, false, 0);

	/* SPI returns in its procedure context: per-change work stays ours */
	MemoryContextSwitchTo(cxt);

	if (ret != expected_ret)
		elog(ERROR, "ash_replicant: unexpected SPI result %d", ret);
	return SPI_processed;
}

/*
 * Run fn(arg) inside a subtransaction; when it fails with the SQLSTATE
 * catch_code, roll back only that subtransaction (nothing of it stays:
 * rows, trigger effects) and return false.  Any other error is re-thrown.
 * The caught error's text is dropped unread: constraint errors carry row
 * values.
 */
bool
ash_run_catching(void (*fn) (void *arg), void *arg, int catch_code)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		if (edata->sqlerrcode != catch_code)
			ReThrowError(edata);
		FreeErrorData(edata);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

void
ash_spi_call(void *arg)
{
	AshSpiCall *call = (AshSpiCall *) arg;

	call->processed = ash_spi_execute(call->plan, call->values, call->nulls,
									  call->expected_ret);
}

/* ash_spi_execute in a subtransaction, see ash_run_catching */
bool
ash_spi_execute_or_catch(SPIPlanPtr plan, Datum *values, const char *nulls,
						 int expected_ret, int catch_code, uint64 *processed)
{
	AshSpiCall	call = {plan, values, nulls, expected_ret, 0};
	bool		ok = ash_run_catching(ash_spi_call, &call, catch_code);

	*processed = call.processed;
	return ok;
}

/*
 * SPI returns in its own procedure context; keep the caller's context so
 * nothing of ours lands there (it lives until SPI_finish, i.e. the batch).
 */
SPIPlanPtr
ash_spi_prepare_kept(const char *sql, int nargs, Oid *types)
{
	MemoryContext cxt = CurrentMemoryContext;
	SPIPlanPtr	plan = SPI_prepare(sql, nargs, types);

	if (plan == NULL)
		elog(ERROR, "ash_replicant: could not prepare an apply statement (%s)",
			 SPI_result_code_string(SPI_result));
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "ash_replicant: could not keep an apply plan");
	MemoryContextSwitchTo(cxt);
	return plan;
}

uint64
ash_spi_execute_args(const char *sql, int nargs, Oid *types, Datum *values,
					 const char *nulls, int expected_ret, const char *what)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			ret;

	PushActiveSnapshot(GetTransactionSnapshot());
	ret = SPI_execute_with_args(sql, nargs, types, values, nulls, false, 0);
	PopActiveSnapshot();
	MemoryContextSwitchTo(cxt);
	if (ret != expected_ret)
		elog(ERROR, "ash_replicant: %s", what);
	return SPI_processed;
}

const char *const ash_text_form[ASH_TEXT_FORM_SETTINGS][2] = {
	{"DateStyle", "ISO"},
	{"IntervalStyle", "postgres"},
	{"extra_float_digits", "3"},
	{"TimeZone", "UTC"},
	{"bytea_output", "hex"},
	{"lc_monetary", "C"},
	{"array_nulls", "on"},
	{"xmloption", "content"},
};

/*
 * A worker's process settings (the pipeline worker's and its snapshot
 * helpers'): freed memory is kept for the next transaction (below); mirrored
 * writes commit asynchronously (feedback waits for the local
 * flush), fire ordinary triggers as the origin, are never filtered by a
 * row-level security policy (row_security off: a statement a policy would
 * filter fails instead, docs/sql-api-mapping.md, "Row-level security"), and
 * never JIT-compile: a
 * worker's statements are short and its catalog queries (the census's
 * contract recheck) cost more than jit_above_cost, and compiling one took
 * about a second of the worker's time in which nothing was applied
 * (docs/operations.md, *Lag and latency*).  A value the worker renders as
 * text (a copied value bound for a string column or an encrypted one) reads
 * as the source renders a streamed one (ash_text_form): under the
 * destination's own settings a copied date could read '10/03/2024' and a
 * streamed one '2024-03-10', or a copied double lose digits
 * (docs/operations.md, "Values as text").
 */
void
ash_worker_session_settings(void)
{
#ifdef __GLIBC__

	/*
	 * Keep freed memory for the next transaction.  glibc returned a copy's
	 * per-chunk memory (its transaction context, the chunk's PGresult) to
	 * the kernel at every commit and faulted it in again, zeroed, for the
	 * next chunk: a tenth of an incremental copy's CPU (bench/README.md).
	 * What is kept is bounded by these two settings, whatever the table's
	 * size; larger allocations are still mapped and returned at once.
	 */
	(void) mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
	(void) mallopt(M_TRIM_THRESHOLD, 64 * 1024 * 1024);
#endif
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("session_replication_role", "origin", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("jit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("row_security", "off", PGC_SUSET, PGC_S_OVERRIDE);

	/*
	 * The source sends text in this database's encoding (its
	 * client_encoding is ours), and so does a copy: read as such.  A
	 * client_encoding from the configuration would have every value's text
	 * converted a second time ('café' stored as 'cafÃ©').
	 */
	SetConfigOption("client_encoding", GetDatabaseEncodingName(), PGC_SUSET, PGC_S_OVERRIDE);
	for (int i = 0; i < ASH_TEXT_FORM_SETTINGS; i++)
		SetConfigOption(ash_text_form[i][0], ash_text_form[i][1], PGC_SUSET, PGC_S_OVERRIDE);
	ash_owner_scope_pin_catalog();
}

ErrorData *
ash_error_abort_transaction(MemoryContext cxt)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(cxt);
	edata = CopyErrorData();
	FlushErrorState();
	AbortCurrentTransaction();
	MemoryContextSwitchTo(cxt);
	return edata;
}

/*
 * A transaction of its own for a worker's catalog statements, with a
 * snapshot and SPI connected; the caller's memory context stays current.
 */
void
ash_spi_transaction_begin(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	MemoryContextSwitchTo(cxt);
}

void
ash_spi_transaction_end(void)
{
	MemoryContext cxt = CurrentMemoryContext;

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(cxt);
}
