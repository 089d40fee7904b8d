/*-------------------------------------------------------------------------
 *
 * decode_wal2json.h
 *	  Pure decoder of wal2json's format version 2 (one JSON object per
 *	  change), as wal2json 2.5 writes it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_DECODE_WAL2JSON_H
#define ASH_DECODE_WAL2JSON_H

#include "change.h"

/*
 * Decoder state that spans messages.  wal2json sends no Relation message:
 * the caller describes the table set (from the source's catalogs) in
 * tables, an array it owns, each entry with a distinct relid that the
 * changes then carry.  Replaced whenever the caller re-describes.
 */
typedef struct AshWal2jsonState
{
	int			ntables;
	const AshRelation *tables;
	bool		in_xact;		/* between B and C */
	TransactionId xid;			/* of the open transaction */

	/*
	 * include-origin was asked for (origin => 'none'): every message
	 * carries "origin", and the open transaction's is origin.
	 */
	bool		origins;
	uint16		origin;

	/*
	 * Set by a failed decode when the message is well-formed but does not
	 * match its table's description (a column unknown or of another type,
	 * a column missing from an insert): the caller re-describes the table
	 * set and decodes the message again.
	 */
	bool		drift;
} AshWal2jsonState;

/* Sentinel values of the decoder's static errors the caller acts on. */
extern const char ash_wal2json_err_drift[];
extern const char ash_wal2json_err_ambiguous[];

/*
 * Decode one wal2json message of len bytes into *out.  Returns true on
 * success.  On malformed input returns false and sets *error to a static,
 * value-free description (ash_wal2json_err_drift with state->drift set
 * for a description mismatch; ash_wal2json_err_ambiguous for a float or
 * numeric null, which wal2json also writes for NaN and Infinity); never
 * reads outside [data, data+len), never raises.  Allocates in
 * CurrentMemoryContext.
 */
extern bool ash_decode_wal2json(AshWal2jsonState *state, const char *data, int len,
								AshChange *out, const char **error);

/*
 * Append the add-tables value naming schema.table to buf (bufsize bytes,
 * NUL-terminated): every character wal2json would read as syntax is
 * escaped.  Returns false when it does not fit.
 */
extern bool ash_wal2json_table_option(char *buf, int bufsize, const char *nspname,
									  const char *relname);

#endif							/* ASH_DECODE_WAL2JSON_H */
