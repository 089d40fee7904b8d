/*-------------------------------------------------------------------------
 *
 * decode_pgoutput.h
 *	  Pure decoder of the pgoutput logical replication protocol (v1..v3).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_DECODE_PGOUTPUT_H
#define ASH_DECODE_PGOUTPUT_H

#include "change.h"

/* Decoder state that spans messages (only the streaming block flag). */
typedef struct AshPgoutputState
{
	int			proto_version;	/* negotiated protocol version, 1..3 */
	bool		in_stream;		/* between STREAM_START and STREAM_STOP */
} AshPgoutputState;

/*
 * Decode one pgoutput message of len bytes into *out.  Returns true on
 * success.  On malformed input returns false and sets *error to a static,
 * value-free description; never reads outside [data, data+len), never
 * raises.  Allocates in CurrentMemoryContext.
 */
extern bool ash_decode_pgoutput(AshPgoutputState *state, const char *data,
								int len, AshChange *out, const char **error);

#endif							/* ASH_DECODE_PGOUTPUT_H */
