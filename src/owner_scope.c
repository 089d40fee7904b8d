/*-------------------------------------------------------------------------
 *
 * owner_scope.c
 *	  Running what the sink owner controls inside a worker.
 *
 * NOTES
 *	  A pipeline's worker and its snapshot helpers connect as the bootstrap
 *	  superuser and run two kinds of SQL: their own statements on the
 *	  ash_replicant catalogs, and writes to the targets, done as the sink
 *	  owner or a target's owner (below) -- during which code they control
 *	  runs: triggers, a tenant_function, a tenant_scope_function, a message
 *	  route's function, a column default.  Such code can change the
 *	  session's settings (set_config('search_path', 'evil, pg_catalog',
 *	  false) in a trigger), and the worker's own statements, parsed after
 *	  it as the superuser, would then resolve an unqualified "=" to an
 *	  operator of the owner's schema: its function run as the superuser.
 *	  So the owner's code runs in a GUC nest level of its own, rolled back
 *	  like an aborted transaction's at the exit (as REFRESH MATERIALIZED
 *	  VIEW does around a view owner's functions): whatever it set is
 *	  undone before the worker's next statement.
 *
 *	  What the owner's code leaves behind would run later, as the worker:
 *	  deferred triggers and a WITH HOLD cursor's query at the commit (so
 *	  the apply fires the one and closes the other inside a scope before
 *	  each commit: apply.c), a temporary type shadowing an unqualified type
 *	  name in the worker's own statements (pg_temp is searched first unless
 *	  the path names it: the worker's path names it last).  Scopes that
 *	  only read (verify, a tenant_scope_function) are security-restricted
 *	  besides; the sink owner's own writes cannot be -- PostgreSQL refuses
 *	  to queue a deferred trigger in a restricted operation, and a target
 *	  may have a deferred foreign key.
 *
 *	  Whose rights a write to a table runs with (ash_owner_table_writer,
 *	  as PostgreSQL 16's apply worker with run_as_owner = false): a table
 *	  owned by the sink owner, or by a role with its privileges, is written
 *	  as the sink owner -- that owner's code run as the sink owner gains it
 *	  nothing.  Any other table's triggers, defaults, CHECK and index
 *	  expressions are code of a role that must not get the sink owner's
 *	  rights (a tenant's role owning its schema's table, a target's owner
 *	  adding a trigger after registration): where the sink owner has that
 *	  owner's privileges (a superuser has every role's) the write runs as
 *	  the table's owner, security-restricted, in a nest level of its own;
 *	  a deferred trigger on such a table is refused (42501), which is what
 *	  keeps the deferred triggers fired before the commit, as the sink
 *	  owner, to tables of the first kind.  Where neither role has the
 *	  other's privileges, no one may write: target_owner_untrusted.  A
 *	  table scope is entered inside the sink owner's scope and derives its
 *	  security context from it, also when entered inside another table's
 *	  scope (gathered rows of that other table written first).
 *
 *	  The other way to put a schema before pg_catalog is a setting of the
 *	  database or the role (ALTER DATABASE ... SET search_path, open to the
 *	  database's owner).  pg_catalog searched first is what PostgreSQL does
 *	  when the path does not name it, so a worker pins it first: nothing
 *	  changes for a path that does not name it, and one that names it later
 *	  cannot shadow a built-in operator in the worker's statements (PostgreSQL's
 *	  own apply worker empties its search_path; the owner's code here keeps
 *	  the database's path otherwise, unqualified table names and all).
 *
 *	  A sink owner's role dropped (DROP ROLE checks no dependency of ours)
 *	  would leave its OID acting with PUBLIC's rights: entering a scope
 *	  for it halts destination_owner_invalid.
 *
 *	  Who may choose what runs as the owner: the SQL API (SECURITY DEFINER)
 *	  lets a call name a sink's owner, and configure, start, stop, drop or
 *	  recover an existing sink, only when the calling role has the
 *	  privileges of that owner (ash_owner_check_caller).  Otherwise a
 *	  member of ash_replicant_admin could map a table of its choice, or its
 *	  own trigger, into a sink of another role or of a superuser, and the
 *	  worker would write it, or run the trigger, with that role's rights.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

#include "errors.h"
#include "owner_scope.h"

/*
 * The security context of the innermost sink owner's scope, which a
 * table's write scope derives from, and how many table scopes are open in
 * it: a sink owner's scope entered inside a table's (gathered writes
 * flushed first) derives from the enclosing sink owner's, never from the
 * table owner's restricted one.
 */
static int	owner_scope_sec = 0;
static int	table_scope_depth = 0;

void
ash_owner_scope_enter(AshOwnerScope *scope, Oid owner, int sec_flags)
{
	/* a dropped role's OID would still act, with PUBLIC's rights */
	if (!SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(owner)))
		ash_halt("destination_owner_invalid", "the sink owner role no longer exists");
	GetUserIdAndSecContext(&scope->save_userid, &scope->save_sec);
	scope->outer_sec = owner_scope_sec;
	scope->outer_depth = table_scope_depth;
	owner_scope_sec = (table_scope_depth > 0 ? owner_scope_sec : scope->save_sec) |
		SECURITY_LOCAL_USERID_CHANGE | SECURITY_NOFORCE_RLS | sec_flags;
	table_scope_depth = 0;
	SetUserIdAndSecContext(owner, owner_scope_sec);
	scope->nest = NewGUCNestLevel();
}

AshTableWriter
ash_owner_table_writer(Oid sink_owner, Oid table_owner)
{
	/* the table owner's code as the sink owner gains it nothing */
	if (table_owner == sink_owner || has_privs_of_role(table_owner, sink_owner))
		return ASH_WRITER_SINK_OWNER;
	if (has_privs_of_role(sink_owner, table_owner))
		return ASH_WRITER_TABLE_OWNER;
	return ASH_WRITER_UNTRUSTED;
}

Oid
ash_owner_of_table(Oid relid)
{
	HeapTuple	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tup))
		return InvalidOid;
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	return owner;
}

void
ash_owner_table_enter(AshOwnerScope *scope, Oid sink_owner, Oid writer)
{
	int			base_sec = owner_scope_sec;

	GetUserIdAndSecContext(&scope->save_userid, &scope->save_sec);
	scope->outer_sec = owner_scope_sec;
	scope->outer_depth = table_scope_depth;
	table_scope_depth++;
	if (!OidIsValid(writer))
	{
		/* the sink owner's role: its scope (owner_scope_enter) checked it */
		SetUserIdAndSecContext(sink_owner, base_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_NOFORCE_RLS);
	}
	else
	{
		/*
		 * The table owner's code never runs with the sink owner's rights:
		 * restricted, as PostgreSQL runs a table owner's code in VACUUM or
		 * REINDEX -- no SET ROLE, no deferred trigger, no WITH HOLD cursor
		 * left to run at the commit as the worker.
		 */
		SetUserIdAndSecContext(writer, base_sec | SECURITY_LOCAL_USERID_CHANGE |
							   SECURITY_NOFORCE_RLS | SECURITY_RESTRICTED_OPERATION);
	}
	scope->nest = NewGUCNestLevel();
}

Oid
ash_owner_writer_of(Oid sink_owner, Oid relid, const char *log_name)
{
	Oid			owner;

	/* a lock not yet held processes the invalidations: the owner is current */
	LockRelationOid(relid, RowExclusiveLock);
	owner = ash_owner_of_table(relid);
	if (!OidIsValid(owner))
		return InvalidOid;
	switch (ash_owner_table_writer(sink_owner, owner))
	{
		case ASH_WRITER_SINK_OWNER:
			return InvalidOid;
		case ASH_WRITER_TABLE_OWNER:
			return owner;
		default:
			break;
	}
	if (log_name == NULL)
		log_name = psprintf("%s.%s",
							ash_quoted_name(get_namespace_name(get_rel_namespace(relid))),
							ash_quoted_name(get_rel_name(relid)));
	ash_halt_on(log_name, "target_owner_untrusted",
				"the owner of %s does not have the privileges of the sink owner, nor the sink owner its owner's",
				log_name);
}

void
ash_owner_write_enter(AshOwnerScope *scope, Oid sink_owner, Oid relid, const char *log_name)
{
	ash_owner_table_enter(scope, sink_owner, ash_owner_writer_of(sink_owner, relid, log_name));
}

void
ash_owner_check_table(Oid sink_owner, Oid relid, const char *stage, const char *what)
{
	Oid			owner = ash_owner_of_table(relid);

	if (!OidIsValid(owner) ||
		ash_owner_table_writer(sink_owner, owner) != ASH_WRITER_UNTRUSTED)
		return;
	ash_refuse(ERRCODE_INSUFFICIENT_PRIVILEGE, stage, "target_owner_untrusted",
			   "%s: its owner does not have the privileges of the sink owner, nor the sink owner its owner's",
			   what);
}

void
ash_owner_scope_exit(AshOwnerScope *scope)
{
	/* false: undo every change made at the level, a session-wide SET too */
	AtEOXact_GUC(false, scope->nest);
	SetUserIdAndSecContext(scope->save_userid, scope->save_sec);
	owner_scope_sec = scope->outer_sec;
	table_scope_depth = scope->outer_depth;
}

void
ash_owner_scope_reset(void)
{
	owner_scope_sec = 0;
	table_scope_depth = 0;
}

void
ash_owner_scope_pin_catalog(void)
{
	const char *path = GetConfigOption("search_path", false, false);
	char	   *copy = pstrdup(path != NULL ? path : "");
	List	   *names;
	ListCell   *lc;
	StringInfoData pinned;

	/* the database's path between pg_catalog and pg_temp, in its order */
	initStringInfo(&pinned);
	appendStringInfoString(&pinned, "pg_catalog");
	if (SplitIdentifierString(copy, ',', &names))
	{
		foreach(lc, names)
		{
			const char *name = lfirst(lc);

			if (strcmp(name, "pg_catalog") == 0 || strcmp(name, "pg_temp") == 0)
				continue;
			appendStringInfo(&pinned, ", %s", quote_identifier(name));
		}
	}
	appendStringInfoString(&pinned, ", pg_temp");
	SetConfigOption("search_path", pinned.data, PGC_SUSET, PGC_S_OVERRIDE);
}

void
ash_owner_check_caller(Oid role, const char *stage, const char *sink_name)
{
	char	   *name;

	/* a superuser has every role's privileges; a dropped role has no member */
	if (has_privs_of_role(GetOuterUserId(), role))
		return;
	name = GetUserNameFromId(role, true);
	if (name == NULL)
		name = psprintf("with OID %u (dropped)", role);
	else
		name = psprintf("\"%s\"", name);
	if (sink_name == NULL)
		ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, stage, "config_invalid",
				   "owner: the calling role does not have the privileges of role %s", name);
	ash_reject(ERRCODE_INSUFFICIENT_PRIVILEGE, stage, "config_invalid",
			   "sink \"%s\": the calling role does not have the privileges of its owner, role %s",
			   sink_name, name);
}
