/*-------------------------------------------------------------------------
 *
 * decoder.h
 *	  The decoders a pipeline can be configured with: the output plugin of
 *	  each one's slot, and whether this version streams it.
 *
 * NOTES
 *	  One entry per value of pipelines.decoder (decoder.c).  The slot's
 *	  plugin is what source_slot.c creates and checks and what the doctor
 *	  looks for in the source's output_plugin_libraries; a decoder that is
 *	  not built is refused by the worker (decoder_capability_unsupported).
 *	  Its options and decode step are dispatched in pipeline.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_DECODER_H
#define ASH_DECODER_H

typedef struct AshDecoderInfo
{
	const char *name;			/* pipelines.decoder */
	const char *plugin;			/* the output plugin of its slot */
	bool		built;			/* the worker streams it */
} AshDecoderInfo;

/* The entry of a decoder, or NULL for a name no entry has. */
extern const AshDecoderInfo *ash_decoder_info(const char *name);

#endif							/* ASH_DECODER_H */
