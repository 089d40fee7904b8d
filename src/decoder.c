/*-------------------------------------------------------------------------
 *
 * decoder.c
 *	  The decoders a pipeline can be configured with (decoder.h).
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "decoder.h"

static const AshDecoderInfo decoders[] = {
	{"pgoutput", "pgoutput", true},
	{"wal2json", "wal2json", true},
	{"pglogical", "pglogical_output", true},
};

const AshDecoderInfo *
ash_decoder_info(const char *name)
{
	if (name == NULL)
		return NULL;
	for (int i = 0; i < lengthof(decoders); i++)
		if (strcmp(decoders[i].name, name) == 0)
			return &decoders[i];
	return NULL;
}
