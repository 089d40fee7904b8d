/*-------------------------------------------------------------------------
 *
 * api_weak_stubs.c
 *	  TEMPORARY weak definitions of SQL entry points under construction in
 *	  parallel branches; each real definition overrides its stub.  Removed
 *	  once every branch has landed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fmgr.h"

#define ASH_WEAK_STUB(name) \
	PG_FUNCTION_INFO_V1(name); \
	PGDLLEXPORT Datum name(PG_FUNCTION_ARGS) __attribute__((weak)); \
	Datum name(PG_FUNCTION_ARGS) \
	{ \
		ereport(ERROR, (errcode(ERRCODE_FEATURE_NOT_SUPPORTED), \
						errmsg("ash_replicant: %s is not built yet", #name))); \
		PG_RETURN_VOID(); \
	}

ASH_WEAK_STUB(ash_replicant_map_table)
ASH_WEAK_STUB(ash_replicant_unmap_table)
