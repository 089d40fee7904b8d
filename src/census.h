/*-------------------------------------------------------------------------
 *
 * census.h
 *	  Periodic re-verification of mapping and source coverage.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CENSUS_H
#define ASH_CENSUS_H

#include "change.h"
#include "checkpoint.h"
#include "config.h"

typedef enum AshCensusVerdict
{
	ASH_CENSUS_PASS,
	ASH_CENSUS_FAULT			/* could not verify (source unreachable...) */
	/* drift never returns: it halts */
} AshCensusVerdict;

/*
 * Run one census: destination mapping and source coverage on a short-lived
 * read-only probe connection.  Halts on drift.  Must run outside a
 * destination transaction.  passed: the source position the stream has
 * received and applied everything before (a source column added before it
 * to a table that had no change since is judged: census.c).
 */
extern AshCensusVerdict ash_census_run(AshPipelineConfig *cfg, AshCheckpointKey *key,
									   XLogRecPtr passed);

/*
 * Did the last ash_census_run admit a change of the contract (a target
 * column added or widened)?  Then the apply layer's cached view of the
 * targets is stale: the caller rebuilds it.
 */
extern bool ash_census_targets_changed(void);

/*
 * A source transaction the caller waits for whole (the crash guard's:
 * streamed when the worker died): each ash_census_run asks the source
 * whether it aborted, which ash_census_watched_xact_aborted then answers
 * (such a transaction never arrives).  InvalidTransactionId: none.
 */
extern void ash_census_watch_xact(TransactionId xid);
extern bool ash_census_watched_xact_aborted(void);

/*
 * A mapped table the last ash_census_run found back in the publication
 * after it left it (with a snapshot configured; qualified name, NULL when
 * none): the caller ends the session, the next one copies it again.
 */
extern const char *ash_census_publication_gap(void);

/*
 * Activation: open a read-only probe connection, verify the source
 * identity on it, and judge source coverage exactly as the census does.
 * Halts on a failure; raises ERRCODE_CONNECTION_FAILURE when the source
 * cannot be probed (the session's transient fault).  Must run outside a
 * destination transaction, before the checkpoint binding.
 */
extern void ash_census_activation(AshPipelineConfig *cfg);

/*
 * At a session's start, once the checkpoint is bound: record how the
 * publication holds the mapped tables (publication_record.c); a table that
 * left it and came back under a pipeline without a snapshot halts
 * publication_gap.  The census does the same while streaming.
 */
extern void ash_census_record_publication(AshPipelineConfig *cfg, AshCheckpointKey *key);

/*
 * The mapped source tables (quoted "schema"."table") that hold rows now, on
 * a probe connection of its own: what a go-forward slot created now leaves
 * out of the mirror.  Raises ERRCODE_CONNECTION_FAILURE when the source
 * cannot be probed.  Outside a destination transaction.
 */
extern List *ash_census_tables_with_rows(AshPipelineConfig *cfg);

/* A table as the source's catalogs describe it, for a decoder without
 * Relation messages. */
typedef struct AshDescribedRelation
{
	AshRelation rel;
	char	  **type_names;		/* per column: its (base) type's name */
} AshDescribedRelation;

/*
 * wal2json sends no Relation messages: the configured tables as the
 * source's catalogs describe them now (AshDescribedRelation *, relid =
 * position in the configured tables + 1), on a probe connection of its own.  Halts for
 * a foreign source, an absent table (decoder_table_missing) or a keyless
 * one (decoder_table_keyless); raises ERRCODE_CONNECTION_FAILURE when the
 * source cannot be probed.  Outside a destination transaction.
 */
extern List *ash_census_describe_relations(AshPipelineConfig *cfg);

/* Milliseconds until the next run: interval_ms +- jitter_ratio. */
extern long ash_census_next_delay(AshPipelineConfig *cfg);

#endif							/* ASH_CENSUS_H */
