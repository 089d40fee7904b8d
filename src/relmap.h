/*-------------------------------------------------------------------------
 *
 * relmap.h
 *	  Remote relation cache: source relation (by the source's OID, as sent
 *	  in Relation messages) -> mapping, target table and column plan; the
 *	  stream's descriptions and an incremental snapshot's chunks' apart.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_RELMAP_H
#define ASH_RELMAP_H

#include "access/attnum.h"
#include "fmgr.h"

#include "change.h"
#include "config.h"
#include "mapping_validate.h"

typedef struct AshTargetCol
{
	char	   *name;			/* target column name */
	AttrNumber	attnum;
	int			remote_idx;		/* index in the remote relation's columns */
	Oid			typid;
	int32		typmod;
	FmgrInfo	infunc;
	Oid			ioparam;
	FmgrInfo	recvfunc;		/* binary input; fn_oid InvalidOid if none */
	Oid			recv_ioparam;
	int16		typlen;			/* for hashing and copying values */
	bool		typbyval;
	char		typalign;		/* for arrays of them */
	bool		is_identity;
	bool		identity_always;	/* GENERATED ALWAYS AS IDENTITY: an
									 * UPDATE may set it only to DEFAULT */
	bool		encrypt;		/* sealed with column encryption (bytea) */
	int32		maxchars;		/* a varchar(n) target's n, else -1: its input
								 * cuts an excess of spaces without an error */
	int32		elem_maxchars;	/* a varchar(n)[] target's n, else -1: read
								 * without the typmod, each element counted */
	bool		widen_float4;	/* a real into a double precision target:
								 * widened as the cast does, not via text */
} AshTargetCol;

/*
 * One destination table a relation's rows are written to: the mapping's
 * target, or under context tenancy the same-named table of one tenant's
 * schema.  Strategies keep their prepared plans here.
 */
typedef struct AshApplyTarget
{
	Oid			relid;
	char	   *name;			/* quoted schema-qualified name: SQL only */
	char	   *log_name;		/* the mapping's target: for messages, since
								 * a tenant table's schema names the tenant */
	char	   *nspname;		/* unquoted, for encryption bindings */
	char	   *relname;
	char	   *tenant;			/* context tenancy: the tenant served */
	bool		scope_checked;	/* among its tenant_scope_function's */
	void	   *plans;			/* owned by the apply strategy */
	const void *plans_owner;	/* its AshApplyStrategy; NULL: SCD1 */
	uint64		checked_epoch;	/* ash_relmap_check_target: rules held */
	LocalTransactionId checked_lxid;
	Oid			writer;			/* ash_apply_target_enter: the role writes
								 * run as, InvalidOid for the sink owner */
	LocalTransactionId writer_lxid; /* ... judged in this transaction */
	MemoryContext cxt;
} AshApplyTarget;

/*
 * attribute: the tenant column is written and scopes the writes; context:
 * a schema per tenant.
 */
typedef AshTenantStrategy AshTenantMode;

/* Text form of a binary-sent source column: looked up once per resolution */
typedef struct AshTextConv
{
	bool		ready;
	FmgrInfo	recv;
	Oid			ioparam;
	FmgrInfo	out;
} AshTextConv;

typedef struct AshApplyRel
{
	uint32		remote_relid;	/* hash key */
	AshRelation remote;			/* latest Relation message (deep copy) */
	bool		resolved;
	bool		columns_recorded;	/* source_columns.c judged this description */
	bool		ignored;		/* listed in ignored_sources */
	AshMapping *map;
	Oid			target;
	char	   *target_name;	/* quoted schema-qualified name */
	int			ncols;			/* mapped, non-skipped columns */
	AshTargetCol *cols;
	int			nkeys;
	int		   *keys;			/* indexes into cols of the identity */
	AshApplyTarget *target_default; /* the mapping's target table */
	AshTextConv *textconv;		/* per remote column; NULL until needed */

	/* tenancy */
	AshTenantMode tenant_mode;
	int			tenant_remote_idx;	/* source column of tenant_column, or -1 */
	bool		tenant_is_bool;
	int			tenant_col;		/* attribute: index into cols, else -1 */
	List	   *tenant_targets; /* context: AshApplyTarget *, most recent first */

	MemoryContext cxt;			/* resolution products */
	MemoryContext desc_cxt;		/* remote description and prev_* below */

	/* ash_relmap_check_target: the registration */
	AshMappingSpec *spec;
	AshMappingSink *sink;

	/*
	 * The streamed transaction the description came in, until it commits
	 * (InvalidTransactionId: outside one, or committed); desc_aborted: the
	 * source rolled that transaction back, and the description may hold
	 * its DDL: it is no baseline.
	 */
	TransactionId desc_xid;
	bool		desc_aborted;

	/*
	 * While desc_xid's transaction is open: the committed description's
	 * baseline, judged against the one it brought, kept aside to judge the
	 * next description against should the source roll it back.
	 */
	int			stream_base_natts;
	char	  **stream_base_names;
	uint32	   *stream_base_types;
	int32	   *stream_base_typmods;

	/* the remote columns at last resolution, to judge schema changes */
	TransactionId prev_xid;		/* the streamed transaction their description
								 * came in (invalid: committed) */
	int			prev_natts;
	char	  **prev_names;
	uint32	   *prev_types;
	int32	   *prev_typmods;

	/*
	 * The source's columns at a committed point before this description:
	 * the previous description's, or the publication record's for a
	 * session's first one in a transaction committed after the record was
	 * read.  A table with no record of the columns feeding its target yet
	 * (no change of it applied) judges the columns added since by them
	 * (source_columns.c).  before_known false: none known.
	 */
	bool		before_known;
	int			before_natts;
	char	  **before_names;
} AshApplyRel;

/* Called before a target's plans are discarded. */
typedef void (*AshRelReleaseHook) (AshApplyTarget *target);

extern void ash_relmap_init(AshPipelineConfig *cfg, AshRelReleaseHook release);
/*
 * A Relation message; stream_xid: the streamed transaction it came in; at:
 * the commit position of the transaction it came in (InvalidXLogRecPtr:
 * not known yet, streamed, or outside one).
 */
extern void ash_relmap_update_relation(const AshRelation *rel, TransactionId stream_xid,
									   XLogRecPtr at);

/*
 * A mapped table as the publication records hold it: its OID, the name it
 * had, and the source's position once that was read (ash_publication_
 * identities).  A session's first description of that OID from that
 * position on under another name is a rename, judged as one described
 * before (docs/reasons.md#publication_gap); under its name, the record's
 * columns and types ("typ:" tokens of published; NULL: none) are the
 * baseline it is judged against, as a previous description would be.
 * pgoutput and pglogical only, which describe a table by its OID.  typed
 * false (pglogical: its descriptions take their types from the catalog,
 * judged in pipeline_pglogical.c): the record's column names only, which
 * judge a column added since (AshApplyRel.before_names), not its types
 * (nor a column dropped since).  After ash_relmap_init, in a
 * transaction (the names are converted to the database's encoding).
 */
extern void ash_relmap_note_recorded(uint32 oid, const char *nspname, const char *relname,
									 XLogRecPtr read_at, const char *published,
									 bool typed);

/*
 * A description an incremental snapshot's chunk brings (the source's
 * catalog when the session first copies the table): kept apart from the
 * stream's, which may be behind a column change the chunk already sees
 * (or ahead of it), so that each side's tuples are read by the description
 * they came with.  Judged as a session's first description of the table.
 */
extern void ash_relmap_update_chunk_relation(const AshRelation *rel);

/* A streamed transaction committed, or the source rolled it back. */
extern void ash_relmap_stream_ended(TransactionId xid, bool committed);
extern void ash_relmap_update_type(uint32 type_oid, const char *nspname,
								   const char *typname);

/*
 * Entry for a remote relid, as the stream described it or (chunk) as the
 * incremental snapshot's chunk did; halts if none did.
 */
extern AshApplyRel *ash_relmap_get(uint32 relid, bool chunk);

/*
 * Resolve mapping, target and columns (needs a transaction).  Halts with
 * the reason code of the first problem, naming every offending column.
 */
extern void ash_relmap_resolve(AshApplyRel *rel);

/*
 * Judgments about a destination table hold until an invalidation that may
 * change them.  Takes relid's RowExclusiveLock (which the writes take
 * anyway) and returns the current epoch: a judgment made under an equal
 * epoch still holds, for every invalidation committed before the lock was
 * taken has been processed, and the lock keeps out any DDL on the table
 * until the transaction ends.
 */
extern uint64 ash_relmap_target_epoch(Oid relid);

/*
 * Before the first write of a transaction to a table of rel (its target,
 * or a tenant's table, which ash_relmap_tenant_target checks): judge it
 * again with registration's rules (halts census_drift) and coverage's
 * (source_type_invalid, ...) if its definition may have changed.  Needs a
 * transaction.
 */
extern void ash_relmap_check_target(AshApplyRel *rel, AshApplyTarget *t);

/*
 * The same before a message event is written to t, the append log of map
 * (no source relation: registration's rules and the name only).
 */
extern void ash_relmap_check_event_target(AshMapping *map, AshApplyTarget *t);

/*
 * Context tenancy: the table of this tenant (halts tenant_scope_missing).
 * At most ASH_TENANT_TARGETS_MAX tables per relation keep their plans.
 */
#define ASH_TENANT_TARGETS_MAX 64
extern AshApplyTarget *ash_relmap_tenant_target(AshApplyRel *rel, const char *tenant);

/*
 * Context tenancy: the OID of the tenant's table (InvalidOid when absent),
 * *schema its schema; halts tenant_scope_invalid for a forbidden schema.
 */
extern Oid	ash_tenant_relid(Oid template, const char *template_name, const char *format,
							 const char *tenant, char **schema);

/* Drop every resolution and every description's baseline. */
extern void ash_relmap_invalidate_all(void);

/*
 * Drop every resolution (the targets changed, or the destination rolled
 * back what it resolved), keeping each description the source committed
 * as the baseline its next description is judged against.
 */
extern void ash_relmap_invalidate_resolutions(void);

#endif							/* ASH_RELMAP_H */
