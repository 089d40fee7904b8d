/*-------------------------------------------------------------------------
 *
 * owner_scope.h
 *	  Running what the sink owner controls inside a worker (owner_scope.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_OWNER_SCOPE_H
#define ASH_OWNER_SCOPE_H

/* What ash_owner_scope_enter saved; on the caller's stack. */
typedef struct AshOwnerScope
{
	Oid			save_userid;
	int			save_sec;
	int			nest;			/* the GUC nest level entered */
	int			outer_sec;		/* the enclosing owner scope's context */
	int			outer_depth;	/* table scopes open in it */
} AshOwnerScope;

/*
 * Act as owner until ash_owner_scope_exit: its privileges, row security
 * not forced on it, and sec_flags besides (SECURITY_RESTRICTED_OPERATION
 * for a function that must leave nothing behind).  Every setting the code
 * run meanwhile changes -- SET, set_config, a function's SET clause -- is
 * undone at the exit, so the worker's own statements never run under a
 * search_path the owner chose.  An error before the exit is cleaned up by
 * the (sub)transaction's abort.
 */
extern void ash_owner_scope_enter(AshOwnerScope *scope, Oid owner, int sec_flags);
extern void ash_owner_scope_exit(AshOwnerScope *scope);

/* After an abort that left scopes unexited (the abort restored the user). */
extern void ash_owner_scope_reset(void);

/*
 * Whose privileges a write to a table owned by table_owner runs with, for a
 * sink owned by sink_owner (as PostgreSQL 16's apply worker decides):
 *	 ASH_WRITER_SINK_OWNER: the same role, or one with the sink owner's
 *		privileges -- its code run as the sink owner gains nothing;
 *	 ASH_WRITER_TABLE_OWNER: the sink owner has the table owner's privileges
 *		(a superuser has every role's): the write runs as the table owner,
 *		restricted (ash_owner_table_enter), so the table's triggers,
 *		defaults, CHECK and index expressions run with its owner's rights;
 *	 ASH_WRITER_UNTRUSTED: neither has the other's privileges -- no role
 *		may write it: target_owner_untrusted.
 */
typedef enum AshTableWriter
{
	ASH_WRITER_SINK_OWNER,
	ASH_WRITER_TABLE_OWNER,
	ASH_WRITER_UNTRUSTED
} AshTableWriter;

extern AshTableWriter ash_owner_table_writer(Oid sink_owner, Oid table_owner);

/*
 * The owner of relid under its current definition (take the lock first),
 * or InvalidOid when the table is gone.
 */
extern Oid	ash_owner_of_table(Oid relid);

/*
 * Inside the sink owner's scope, enter the scope of a write to a table: as
 * the sink owner (writer InvalidOid) or as the table's owner writer,
 * security-restricted then, each with a GUC nest level of its own.  Its
 * security context derives from the enclosing ash_owner_scope_enter's,
 * not the current one, so that a write entered inside another table's
 * scope (a run of gathered rows written first) takes its own table's
 * rights, not the other's.  Leave it with ash_owner_scope_exit.
 */
extern void ash_owner_table_enter(AshOwnerScope *scope, Oid sink_owner, Oid writer);

/*
 * The writer of relid for sink_owner, judged under the RowExclusiveLock
 * the write takes anyway (no owner change until the transaction ends):
 * InvalidOid for the sink owner (or a table gone: the write reports it),
 * else the table's owner.  Neither: halts target_owner_untrusted naming
 * log_name (the mapping's target, never a tenant's table; NULL: relid's
 * own name, a registered table's).
 */
extern Oid	ash_owner_writer_of(Oid sink_owner, Oid relid, const char *log_name);

/* ash_owner_writer_of, then ash_owner_table_enter. */
extern void ash_owner_write_enter(AshOwnerScope *scope, Oid sink_owner, Oid relid,
								  const char *log_name);

/*
 * Registration's rule for a table the sink owner's pipeline will write
 * (ash_owner_table_writer): ASH_WRITER_UNTRUSTED is refused
 * target_owner_untrusted (42501) at stage, naming what (a quoted table
 * name); a halt in a pipeline (ash_refuse).
 */
extern void ash_owner_check_table(Oid sink_owner, Oid relid, const char *stage,
								  const char *what);

/*
 * At a worker's start: pg_catalog first and pg_temp last in its
 * search_path, whatever the database's or role's setting puts before or
 * after (module NOTES).
 */
extern void ash_owner_scope_pin_catalog(void);

/*
 * The SQL API's rule for whom the worker writes as: the calling role (the
 * role before SECURITY DEFINER, GetOuterUserId()) must have the privileges
 * of role -- the owner a call gives a sink (sink_name NULL), or the owner
 * of the existing sink sink_name a call configures or operates -- else the
 * call is refused config_invalid (42501) at stage, before anything else.
 */
extern void ash_owner_check_caller(Oid role, const char *stage, const char *sink_name);

#endif							/* ASH_OWNER_SCOPE_H */
