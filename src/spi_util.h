/*-------------------------------------------------------------------------
 *
 * spi_util.h
 *	  SPI helpers shared by apply, its strategies, messages and the
 *	  checkpoint (spi_util.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SPI_UTIL_H
#define ASH_SPI_UTIL_H

#include "executor/spi.h"

/* SPI_execute_plan; elog(ERROR) unless it returns expected_ret. */
extern uint64 ash_spi_execute(SPIPlanPtr plan, Datum *values, const char *nulls,
							  int expected_ret);

/*
 * fn(arg) in a subtransaction; an error with SQLSTATE catch_code rolls back
 * only that subtransaction and returns false, any other is re-thrown.
 */
extern bool ash_run_catching(void (*fn) (void *arg), void *arg, int catch_code);

/* An ash_spi_execute for a runner taking fn(arg): ash_spi_call(&call). */
typedef struct AshSpiCall
{
	SPIPlanPtr	plan;
	Datum	   *values;
	const char *nulls;
	int			expected_ret;
	uint64		processed;		/* out */
} AshSpiCall;

extern void ash_spi_call(void *call);

/* ash_spi_execute in a subtransaction, see ash_run_catching. */
extern bool ash_spi_execute_or_catch(SPIPlanPtr plan, Datum *values, const char *nulls,
									 int expected_ret, int catch_code, uint64 *processed);

/*
 * SPI_execute_with_args (not read-only) under a fresh active snapshot,
 * leaving the caller's memory context current; elog(ERROR, "ash_replicant:
 * <what>") unless SPI returns expected_ret.  Returns SPI_processed.
 */
extern uint64 ash_spi_execute_args(const char *sql, int nargs, Oid *types, Datum *values,
								   const char *nulls, int expected_ret, const char *what);

/* SPI_prepare + SPI_keepplan, leaving the caller's memory context current. */
extern SPIPlanPtr ash_spi_prepare_kept(const char *sql, int nargs, Oid *types);

/* The session settings every worker that writes mirrored rows runs under. */
extern void ash_worker_session_settings(void);

/*
 * The settings that decide a value's text form, the same in the worker's
 * session (it renders values it received in binary) and in every source
 * session (a walsender renders the values it streams), and how the worker
 * reads that text back (array_nulls: an unquoted NULL element is NULL;
 * xmloption: an XML value may be content, as any the source stores):
 * name, value.
 */
#define ASH_TEXT_FORM_SETTINGS 8
extern const char *const ash_text_form[ASH_TEXT_FORM_SETTINGS][2];

/*
 * In a PG_CATCH of a worker's own transaction: copy the error into cxt,
 * clear it, abort the transaction and return to cxt.  The caller decides
 * what the error means (and frees it).
 */
struct ErrorData;
extern struct ErrorData *ash_error_abort_transaction(MemoryContext cxt);

/*
 * Begin and commit a transaction of its own (a snapshot, SPI connected)
 * around a worker's catalog statements; the caller's memory context stays
 * current across both.
 */
extern void ash_spi_transaction_begin(void);
extern void ash_spi_transaction_end(void);

#endif							/* ASH_SPI_UTIL_H */
