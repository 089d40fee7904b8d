/*-------------------------------------------------------------------------
 *
 * source_slot.h
 *	  The pipeline's replication connection to the source: identity and slot.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_SOURCE_SLOT_H
#define ASH_SOURCE_SLOT_H

#include "access/xlogdefs.h"

#include "config.h"
#include "libpq_conn.h"

struct AshPipelineSlot;

/*
 * How the session reached its slot: the snapshot exported by creating it in
 * this session (exported, at exported_lsn; the replication connection must
 * stay idle until ash_snapshot_run returns) or NULL, and the slot's
 * confirmed position.
 */
typedef struct AshSlotStart
{
	const char *exported;
	XLogRecPtr	exported_lsn;
	XLogRecPtr	slot_position;
	bool		slot_active;	/* another session streams from it now */
} AshSlotStart;

/*
 * IDENTIFY_SYSTEM: halts source_identity_mismatch unless the connection
 * reaches the configured system and database; the source's timeline and
 * position; halts on a release that cannot serve the configuration.
 */
extern void ash_source_identify(AshConn *conn, const AshPipelineConfig *cfg,
								uint32 *timeline, XLogRecPtr *xlogpos);

/*
 * Check or create the slot.  must_exist: why it may not be created (NULL:
 * it may): the checkpoint has a watermark, or acknowledged what a slot
 * sent, or a snapshot attempt is recorded against it -- a new slot would
 * skip what was committed since; missing, it halts source_slot_missing
 * with that context.  export: create it exporting a snapshot
 * (start->exported; the connection must then stay idle until the snapshot
 * is imported).
 */
extern void ash_source_ensure_slot(AshConn *conn, const AshPipelineConfig *cfg,
								   const char *must_exist, bool export,
								   bool *created, AshSlotStart *start,
								   struct AshPipelineSlot *slot);

/*
 * After ensure_slot's CREATE_REPLICATION_SLOT was refused with 55000 (a
 * prerequisite the source lacks): the reason code the source's settings
 * name -- source_not_logical (wal_level), source_slots_disabled
 * (max_replication_slots = 0) -- with a value-free context; NULL when
 * they name neither.
 */
extern const char *ash_source_slot_refusal(const char **context);

/*
 * Send a CREATE_REPLICATION_SLOT and wait for its result, saying in slot's
 * statistics (slot_wait_since) that the source is creating it.  A refusal
 * is returned, not raised: the caller judges it.
 */
extern PGresult *ash_source_create_slot(AshConn *conn, const char *command,
										struct AshPipelineSlot *slot);

#endif							/* ASH_SOURCE_SLOT_H */
