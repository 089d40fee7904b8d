/*-------------------------------------------------------------------------
 *
 * pipeline.h
 *	  The pipeline background worker (one per running sink).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_PIPELINE_H
#define ASH_PIPELINE_H

PGDLLEXPORT void ash_pipeline_main(Datum main_arg);

#endif							/* ASH_PIPELINE_H */
