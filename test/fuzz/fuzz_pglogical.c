/*-------------------------------------------------------------------------
 *
 * fuzz_pglogical.c
 *	  libFuzzer target over the pure pglogical_output decoder.
 *
 * NOTES
 *	  The first input byte picks the decoder state: bit 0 whether the
 *	  startup message was seen, bit 1 whether pglogical.queue is known (as
 *	  relation 16384 of 5 columns, message_type and message last, as pglogical 2.x
 *	  defines it); the rest is one message.  The decoder must return a
 *	  result, never crash, read out of bounds or trip UBSan; an error must
 *	  say why.  A decoded change is walked completely.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdint.h>

#include "change.h"
#include "decode_pglogical.h"
#include "palloc_arena.h"

static volatile size_t sink;

static void
touch_tuple(const AshTuple *t)
{
	for (int i = 0; i < t->natts; i++)
	{
		sink += t->cols[i].status;
		if (t->cols[i].data)
			sink += (unsigned char) t->cols[i].data[t->cols[i].len];	/* the NUL */
	}
}

static void
touch(const AshChange *c)
{
	switch (c->kind)
	{
		case ASH_CHANGE_RELATION:
			sink += strlen(c->u.relation.nspname) + strlen(c->u.relation.relname);
			for (int i = 0; i < c->u.relation.natts; i++)
				sink += strlen(c->u.relation.cols[i].name);
			break;
		case ASH_CHANGE_INSERT:
			touch_tuple(&c->u.insert.newtup);
			break;
		case ASH_CHANGE_UPDATE:
			if (c->u.update.oldkind)
				touch_tuple(&c->u.update.oldtup);
			touch_tuple(&c->u.update.newtup);
			break;
		case ASH_CHANGE_DELETE:
			touch_tuple(&c->u.delete.oldtup);
			break;
		case ASH_CHANGE_ORIGIN:
			sink += strlen(c->u.origin.name);
			break;
		default:
			break;
	}
}

int			LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	AshPglogicalState state = {0};
	AshChange	change;
	const char *error = NULL;
	AshPglogicalResult r;

	if (size < 1)
		return 0;
	state.expected_encoding = "UTF8";
	state.startup_seen = (data[0] & 1) != 0;
	if (data[0] & 2)
	{
		state.queue_relid = 16384;
		state.queue_natts = 5;
		state.queue_type_col = 3;
		state.queue_message_col = 4;
	}
	r = ash_decode_pglogical(&state, (const char *) data + 1, (int) (size - 1), &change, &error);
	if (r == ASH_PGL_CHANGE)
		touch(&change);
	else if (r == ASH_PGL_ERROR && error == NULL)
		abort();				/* failures must say why */
	arena_reset();
	return 0;
}
