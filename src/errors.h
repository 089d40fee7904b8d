/*-------------------------------------------------------------------------
 *
 * errors.h
 *	  Reason codes and value-free error reporting.
 *
 * NOTES
 *	  Every refusal and every halt carries a reason code from README.md#reason-codes, a
 *	  stable snake_case string.  Messages may name columns, tables and
 *	  options, never row values, tenants, keys, conninfo or LSN tokens from
 *	  a source row.  Use these helpers rather than a bare ereport so that the
 *	  message shape stays uniform:
 *
 *		ash_replicant: <stage> rejected: <reason> (<context>)
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_ERRORS_H
#define ASH_ERRORS_H

#include "lib/stringinfo.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"

/* Classes of reason codes, as reported by ash_replicant_status(). */
typedef enum AshReasonClass
{
	ASH_REASON_HALTED,			/* state "halted" */
	ASH_REASON_MISCONFIGURED,	/* state "misconfigured" */
	ASH_REASON_REGISTRATION,	/* refused by a configuration function */
	ASH_REASON_DOCTOR,			/* doctor/preflight only */
	ASH_REASON_WAITING,			/* "catching_up": waits for a resource */
	ASH_REASON_NOT_STARTED,		/* "not_started": waits for a start */
	ASH_REASON_UNKNOWN
} AshReasonClass;

/* Class of a reason code; ASH_REASON_UNKNOWN for a code this version lacks. */
extern AshReasonClass ash_reason_class(const char *reason);
extern const char *ash_reason_class_name(AshReasonClass cls);

/* PL/pgSQL's condition name of a SQLSTATE ("unique_violation"), or NULL. */
extern const char *ash_sqlstate_condition(const char *sqlstate);

/*
 * Raise ERROR: "ash_replicant: <stage> rejected: <reason>" followed by
 * " (<context>)" when ctxfmt is not NULL.  sqlerrcode is a full SQLSTATE
 * (ERRCODE_*).  The context must be structural only (names of columns,
 * options, tables) — never a value.
 */
extern void ash_reject(int sqlerrcode, const char *stage, const char *reason,
					   const char *ctxfmt,...) pg_attribute_printf(4, 5) pg_attribute_noreturn();

/*
 * Raise a pipeline halt: records the reason in ash_pending_halt (and the
 * formatted context in ash_pending_halt_context, both copies) and raises
 * ERROR; the pipeline's top-level handler turns it into a tombstone and a
 * clean exit.  The context is structural only.
 */
extern const char *ash_pending_halt;
extern const char *ash_pending_halt_context;
extern void ash_halt(const char *reason, const char *ctxfmt,...) pg_attribute_printf(2, 3) pg_attribute_noreturn();

/*
 * ash_halt naming the table it is about (a mapping's target, quoted and
 * qualified): recorded as the halt's target (status halt_target, the
 * pipeline.halt line's table=) where apply has no table of its own at hand
 * -- a check run while a snapshot arms its tables, or a helper's.
 */
extern const char *ash_pending_halt_target;
extern void ash_halt_on(const char *target, const char *reason, const char *ctxfmt,...) pg_attribute_printf(3, 4) pg_attribute_noreturn();

/*
 * Open a mapping's target (try_relation_open when missing_ok, else
 * table_open) in a check outside apply's writes -- coverage, the census,
 * the relation cache: while the lock is waited for, ash_opening_target
 * names the table (quoted and qualified, as apply's reports name it), so
 * that a wait ended by an error (lock_timeout) is reported naming the table
 * whose lock holder to look for.  NULL again once the lock is held.  Never
 * for a tenant's table (its schema names the tenant).
 */
extern const char *ash_opening_target;
extern Relation ash_open_target(Oid relid, LOCKMODE lockmode, bool missing_ok);

/*
 * A name always double-quoted, embedded quotes doubled (messages, and the
 * binding of a ciphertext): unlike quote_identifier, the same for every name.
 */
extern void ash_append_quoted_name(StringInfo buf, const char *name);
extern char *ash_quoted_name(const char *name);

/*
 * Until called again with NULL, ash_reject raises ash_halt(halt_reason,
 * "<subject>: <reason> (<context>)") instead, without the context when
 * withhold: a registration rule judged again in a pipeline
 * (ash_mapping_recheck).  The caller clears it in PG_FINALLY.
 */
extern void ash_reject_as_halt(const char *halt_reason, const char *subject,
							   bool withhold);

/* Is this one of the extension's own background workers? */
extern bool ash_in_extension_worker(void);

/*
 * A refusal raised where the caller may run in a backend or in a pipeline:
 * a halt in the extension's workers (a pipeline must stop with the reason,
 * not retry), a rejection (ash_reject) elsewhere.  Context structural only.
 */
extern void ash_refuse(int sqlerrcode, const char *stage, const char *reason,
					   const char *ctxfmt,...) pg_attribute_printf(4, 5) pg_attribute_noreturn();

/*
 * In our background workers, the text of an SPI statement PostgreSQL adds
 * to a logged message's context (a lock wait, a trigger's warning) is
 * withheld: it can name a tenant's schema.  From _PG_init.
 */
extern void ash_errors_install_log_hook(void);

#endif							/* ASH_ERRORS_H */
