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
 * SPI connected: build the manifest of sink_name and judge it against the
 * one stored on the checkpoint row of the key.  Returns false when the
 * stored manifest is current; true when *manifest (jsonb, in SPI memory)
 * is to be recorded: a first manifest, a pure addition, a target type
 * widened or type or tenant function names as builds before 2026-12-07
 * recorded them (*stored says whether one was stored; *change is
 * "type_widened", "type_names_qualified", "function_names_qualified", the
 * latter followed by ",type_names_qualified" or ",type_widened", or NULL).
 * Anything else halts drift_reason
 * (contract_incompatible at binding, census_drift at a census), or
 * decoder_contract_incompatible for a decoder / table-set switch.  The
 * checkpoint row is written by checkpoint.c (ash_contract_admit,
 * ash_contract_recheck in checkpoint.h).
 */
extern bool ash_contract_judge(const char *sink_name, const char *system_id,
							   const char *database, const char *slot_name,
							   const char *drift_reason, Datum *manifest, bool *stored,
							   const char **change);

#endif							/* ASH_CONTRACT_H */
