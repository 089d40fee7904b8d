/*-------------------------------------------------------------------------
 *
 * change.c
 *	  Helpers for the change record (change.h) shared by all decoders.
 *
 * This file is pure: it compiles both into the backend module and into the
 * frontend unit-test binary (FRONTEND defined).
 *
 *-------------------------------------------------------------------------
 */
#ifdef FRONTEND
#include "postgres_fe.h"
#else
#include "postgres.h"
#endif

#include "change.h"

/*
 * Stable, lower-case name of a change kind, for logs and events.  Never
 * returns NULL; an out-of-range value yields "unknown".
 */
const char *
ash_change_kind_name(AshChangeKind kind)
{
	switch (kind)
	{
		case ASH_CHANGE_BEGIN:
			return "begin";
		case ASH_CHANGE_COMMIT:
			return "commit";
		case ASH_CHANGE_ORIGIN:
			return "origin";
		case ASH_CHANGE_RELATION:
			return "relation";
		case ASH_CHANGE_TYPE:
			return "type";
		case ASH_CHANGE_INSERT:
			return "insert";
		case ASH_CHANGE_UPDATE:
			return "update";
		case ASH_CHANGE_DELETE:
			return "delete";
		case ASH_CHANGE_TRUNCATE:
			return "truncate";
		case ASH_CHANGE_MESSAGE:
			return "message";
		case ASH_CHANGE_STREAM_START:
			return "stream_start";
		case ASH_CHANGE_STREAM_STOP:
			return "stream_stop";
		case ASH_CHANGE_STREAM_COMMIT:
			return "stream_commit";
		case ASH_CHANGE_STREAM_ABORT:
			return "stream_abort";
	}
	return "unknown";
}
