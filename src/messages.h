/*-------------------------------------------------------------------------
 *
 * messages.h
 *	  Logical messages (pg_logical_emit_message): prefix routes, claims,
 *	  the digest key witness.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_MESSAGES_H
#define ASH_MESSAGES_H

#include "access/xlogdefs.h"

#include "checkpoint.h"
#include "config.h"

/*
 * The prefix of the transactional logical message with which an incremental
 * snapshot has the source flush its WAL (snapshot_incr.c, source_flush_now):
 * reserved, never routed, always acknowledged with no effect.
 */
#define ASH_MESSAGE_PREFIX_FLUSH	"ash_replicant.flush"

/* Format byte of operation keys, content digests and the key witness. */
#define ASH_MESSAGE_DIGEST_FORMAT_V1	1

/* The route of a prefix (exact match), NULL when unrouted. */
extern AshMessageRoute *ash_message_route(AshPipelineConfig *cfg, const char *prefix);

/*
 * Apply one message routed to a state mirror inside the open destination
 * transaction, at its position (commit_lsn, ordinal): the commit LSN and
 * shared ordinal of a transactional message; its own LSN and ordinal 0
 * otherwise.  The route's effect (table insert or function call, as the
 * sink owner) plus its claim in ash_replicant.message_claims; a claimed
 * position with the same content applies nothing, with other content
 * halts message_claim_conflict.  (A message routed to an append log is
 * an event the driver writes through apply_append.h.)
 */
extern void ash_message_apply(AshPipelineConfig *cfg, const AshCheckpointKey *key,
							  AshMessageRoute *route, const char *prefix,
							  const char *content, int len,
							  XLogRecPtr commit_lsn, int32 ordinal);

/*
 * Activation of a state mirror with routes (own transaction, after the
 * checkpoint binding): key families, the digest key witness, expired
 * claims.  No-op for other sinks.
 */
extern void ash_messages_activate(AshPipelineConfig *cfg, AshCheckpointKey *key);

/*
 * The source database's encoding (its server_encoding; -1 unknown), set at
 * each connection: a route to a text content column converts the content
 * from it, as the source converts row values into ours.
 */
extern void ash_messages_set_source_encoding(int encoding);

/* Must the keyring be (re)loaded at every batch? */
extern bool ash_messages_need_keys(AshPipelineConfig *cfg);

#endif							/* ASH_MESSAGES_H */
