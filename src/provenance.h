/*-------------------------------------------------------------------------
 *
 * provenance.h
 *	  Snapshot provenance: fingerprints, seen-marks and retirement.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_PROVENANCE_H
#define ASH_PROVENANCE_H

#include "access/xlogdefs.h"

#include "apply_strategy.h"

/* Target columns of a provenance mapping. */
#define ASH_PROVENANCE_FINGERPRINT_COLUMN	"replica_fingerprint"
#define ASH_PROVENANCE_SEEN_COLUMN			"replica_seen_attempt"

/*
 * Format byte + key version, then the MAC: all 32 bytes of HMAC-SHA-256 in
 * the attempt's state and in a fingerprint of format 1 (earlier builds
 * wrote them; still compared), the first 16 in one of format 2.
 */
#define ASH_PROVENANCE_TAG_BYTES	5
#define ASH_PROVENANCE_BYTES		(ASH_PROVENANCE_TAG_BYTES + 32)
#define ASH_FINGERPRINT_BYTES		(ASH_PROVENANCE_TAG_BYTES + 16)

/* Does any mapping of cfg keep snapshot provenance? */
extern bool ash_provenance_in_use(AshPipelineConfig *cfg);

/*
 * The attempt (id, start position, checkpoint identity) authenticated with
 * the active snapshot_provenance key: checkpoints.snapshot_state.
 * verify halts snapshot_state_invalid when state does not authenticate
 * it, keyring_version_missing when its key version is gone.
 */
extern bytea *ash_provenance_sign_state(const AshCheckpointKey *key, const bytea *attempt,
										XLogRecPtr start_lsn);
extern void ash_provenance_verify_state(const AshCheckpointKey *key, const bytea *attempt,
										XLogRecPtr start_lsn, const bytea *state);

/*
 * A snapshot row of a provenance mapping (called by apply in place of the
 * strategy's insert, as the sink owner): written by the strategy unless the
 * target holds it with the same fingerprint; stamped (fingerprint and the
 * attempt) either way.  A row that needs a probe waits for the others of
 * its target (ash_provenance_resolve).  A written row carries its stamp
 * where the strategy can (insert_stamped); other stamps are queued and
 * written with triggers silenced, so an unchanged row is only marked seen.
 */
extern void ash_provenance_insert(AshApplyRel *rel, AshApplyTarget *tgt, AshRowImage *row,
								  const AshApplyStrategy *strategy);

/*
 * A streamed write of a row (insert, update) while an incremental snapshot
 * copies its table: stamped seen by the attempt, with no fingerprint (the
 * row is no longer what a chunk copied), so that the table's completion
 * does not retire it.  Queued like the snapshot's stamps.
 */
extern void ash_provenance_mark_streamed(AshApplyRel *rel, AshApplyTarget *tgt,
										 AshRowImage *row, const bytea *attempt);

/*
 * relid (InvalidOid: none) holds no fingerprint a snapshot row could match:
 * its rows are written without the probe.  The caller vouches for it.
 */
extern void ash_provenance_set_unfingerprinted(Oid relid);

/*
 * Probe the rows ash_provenance_insert holds (one statement per group of
 * a target) and hand them to the strategy: before apply's deferred writes
 * are executed, as the owner.
 */
extern void ash_provenance_resolve(void);

/* Write the queued stamps (after apply's deferred writes; as the owner). */
extern void ash_provenance_flush(void);

/* Forget queued stamps (after an abort). */
extern void ash_provenance_discard(void);

/*
 * The tables m writes, quoted and schema-qualified for SQL: its target, or
 * under context tenancy the table of every scope its tenant_scope_function
 * returns, each once (snapshot_scope_incomplete when the function is
 * missing, raises or returns a NULL or blank scope; tenant_scope_missing
 * for a scope without its table).  Runs the function as owner, restricted
 * (owner_scope.c).
 */
extern List *ash_provenance_tables(AshMapping *m, Oid owner);

/*
 * The same tables, each once (a scope returned twice names one table), and
 * in *scopes the scope (tenant) of each as the function returned it, NIL
 * without context tenancy.
 */
extern List *ash_provenance_scope_tables(AshMapping *m, Oid owner, List **scopes);

/*
 * Is tenant one of the scopes m's tenant_scope_function returns?  Run as
 * owner, restricted (snapshot_scope_incomplete when the function is
 * missing or raises).  In a transaction.
 */
extern bool ash_provenance_in_scope(AshMapping *m, Oid owner, const char *tenant);

/*
 * Halt keyring_version_missing when a fingerprint in a target of m names a
 * key version the keyring lacks (every scope of context tenancy).
 */
extern void ash_provenance_check_versions(AshMapping *m, Oid owner);

/*
 * Retire the rows of m's target(s) the attempt did not see: delete (SCD1)
 * or close at close_lsn (SCD2).  Context tenancy: every scope that
 * tenant_scope_function returns (snapshot_scope_incomplete when it raises
 * or returns a blank or NULL scope).  nothing_past (v1, whose stream has
 * not touched the table): an unseen SCD2 open version starting at or past
 * close_lsn halts snapshot_history_ahead.  As the sink owner (the current
 * user, who runs tenant_scope_function too); returns the rows retired.
 */
/*
 * Halts snapshot_history_ahead when an SCD2 target of m (every tenant scope
 * under context tenancy) holds a version starting or ending past position:
 * history an incremental copy positioned there could not be placed under.
 */
extern void ash_provenance_check_history(AshMapping *m, XLogRecPtr position, Oid owner);

extern int64 ash_provenance_retire(AshMapping *m, const bytea *attempt, XLogRecPtr close_lsn,
								   bool nothing_past);

/*
 * Forget the attempt's seen-marks in m's target(s) (no host write: run
 * with session_replication_role = replica): a table listed again in the
 * same attempt must see each of its rows anew, or a row its earlier copy
 * saw would never be retired.  In the caller's transaction.
 */
extern void ash_provenance_forget(AshMapping *m, const bytea *attempt);

#endif							/* ASH_PROVENANCE_H */
