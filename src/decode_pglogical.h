/*-------------------------------------------------------------------------
 *
 * decode_pglogical.h
 *	  Pure decoder of pglogical_output's native protocol (version 1).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_DECODE_PGLOGICAL_H
#define ASH_DECODE_PGLOGICAL_H

#include "change.h"

/*
 * Decoder state that spans messages: whether the startup message was seen
 * and accepted, and pglogical.queue's relation id and the position of its
 * message_type column once its Relation message arrived.  Set
 * expected_encoding (the encoding the session asked for) before the first
 * call; the rest starts zeroed.
 */
typedef struct AshPglogicalState
{
	const char *expected_encoding;
	bool		startup_seen;
	uint32		queue_relid;	/* 0 until described */
	int			queue_natts;
	int			queue_type_col;
	int			queue_message_col;
	/* ASH_PGL_QUEUED_TRUNCATE: the table, palloc'd with the message */
	char	   *truncated_nspname;
	char	   *truncated_relname;
} AshPglogicalState;

typedef enum AshPglogicalResult
{
	ASH_PGL_ERROR,				/* malformed or not what the session asked for */
	ASH_PGL_CHANGE,				/* *out holds one change */
	ASH_PGL_NONE,				/* consumed, nothing to apply: the startup
								 * message, pglogical.queue's description, a
								 * queued SQL command, sequence or table-sync
								 * message */
	ASH_PGL_QUEUED_TRUNCATE		/* a TRUNCATE queued by pglogical: the table's
								 * names are in the state's truncated_* */
} AshPglogicalResult;

/*
 * Decode one pglogical_output native message of len bytes.  On
 * ASH_PGL_ERROR sets *error to a static, value-free description; never
 * reads outside [data, data+len), never raises.  A Relation message's
 * columns carry no type: type_oid is 0, typmod -1, replident 0, for the
 * caller to complete from the source's catalog.  An old tuple is always
 * reported as oldkind 'K' (pglogical sends the whole old row under the
 * same marker when the table's replica identity is FULL).  Allocates in
 * CurrentMemoryContext.
 */
extern AshPglogicalResult ash_decode_pglogical(AshPglogicalState *state, const char *data,
											   int len, AshChange *out,
											   const char **error);

#endif							/* ASH_DECODE_PGLOGICAL_H */
