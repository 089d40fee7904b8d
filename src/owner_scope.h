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
