/*-------------------------------------------------------------------------
 *
 * apply_append.h
 *	  Append logs (apply_append.c): message events and activation.  The
 *	  row strategy itself is ash_append_strategy (apply.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_APPLY_APPEND_H
#define ASH_APPLY_APPEND_H

#include "access/xlogdefs.h"

#include "checkpoint.h"
#include "config.h"

/*
 * A logical message routed to an append log: an operation = 'message'
 * event in target, inside the open destination transaction, at the
 * driver's current position, written as the sink owner.  The log is
 * judged first as a row event's target is (relmap.h); a dropped one halts
 * destination_table_missing.
 */
extern void ash_append_message(AshPipelineConfig *cfg, Oid target, const char *prefix,
							   const char *content, int len);

/*
 * Activation of an append-log sink (own transaction, after the checkpoint
 * binding and the slot check): the frontier and the origin floor.  No-op
 * for other sinks.
 */
extern void ash_append_activate(AshPipelineConfig *cfg, AshCheckpointKey *key,
								XLogRecPtr watermark, XLogRecPtr watermark_end,
								bool slot_created, XLogRecPtr slot_position);

#endif							/* ASH_APPLY_APPEND_H */
