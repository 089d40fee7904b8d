/*-------------------------------------------------------------------------
 *
 * contract.h
 *	  The contract manifest: the canonical description of what a sink maps,
 *	  recorded on the checkpoint with a SHA-256 fingerprint (README.md#how-apply-works).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CONTRACT_H
#define ASH_CONTRACT_H

/*
 * Inside the binding transaction (SPI connected): build the manifest of
 * sink_name and judge it against the one stored on the checkpoint row.
 * A first manifest or a pure addition is stored (the watermark is not
 * touched); anything else halts contract_incompatible, or
 * decoder_contract_incompatible for a decoder / table-set switch.
 */
extern void ash_contract_admit(const char *sink_name, const char *system_id,
							   const char *database, const char *slot_name);

/*
 * Census: rebuild the manifest and judge it again in its own transaction;
 * additions (and target types widened) are admitted, anything else halts
 * census_drift.  Returns true when it admitted a change: the caller's
 * cached view of the targets is stale.
 */
extern bool ash_contract_recheck(const char *sink_name, const char *system_id,
								 const char *database, const char *slot_name);

#endif							/* ASH_CONTRACT_H */
