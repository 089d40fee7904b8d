/* ash_replicant 1.5.0 -> 1.6.0 (docs/operations.md#updating-the-extension). */

\echo Use "ALTER EXTENSION ash_replicant UPDATE TO '1.6.0'" to load this file. \quit

------------------------------------------------------------------------------
-- What the destination acknowledged (docs/reasons.md#checkpoint_behind_slot).
------------------------------------------------------------------------------

/*
 * The furthest source position this checkpoint's pipeline told the source
 * it is done with while nothing of it was to be applied (a keepalive past
 * the last applied transaction), recorded durably before the source heard
 * it.  Together with end_lsn it bounds the slot's confirmed position: a slot
 * past both was moved on by something this database does not remember --
 * the database restored from a backup, a standby promoted behind it, the
 * slot advanced by another client -- and the transactions in between are
 * never delivered again, so the pipeline halts checkpoint_behind_slot.  NULL
 * until the first start of 1.6.0, which takes the slot's position then.
 */
ALTER TABLE ash_replicant.checkpoints ADD COLUMN acknowledged_lsn pg_lsn;
COMMENT ON COLUMN ash_replicant.checkpoints.acknowledged_lsn
	IS 'the furthest source position acknowledged with nothing to apply, recorded before the source heard it; a slot confirmed past it and end_lsn halts checkpoint_behind_slot';
