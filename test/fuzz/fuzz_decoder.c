/*-------------------------------------------------------------------------
 *
 * fuzz_decoder.c
 *	  libFuzzer target over the pure pgoutput decoder.
 *
 * NOTES
 *	  The first input byte picks the protocol version (1..3) and whether the
 *	  decoder is inside a streamed block; the rest is one message.  The
 *	  decoder must return true or false, never crash, read out of bounds or
 *	  trip UBSan.  A successful decode is walked completely so a structure
 *	  pointing outside its allocations is caught too.  Allocation goes
 *	  through a per-input arena (palloc/palloc0 are the only allocators the
 *	  decoder uses), freed after each input.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include <stdint.h>

#include "change.h"
#include "decode_pgoutput.h"
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
		case ASH_CHANGE_TYPE:
			sink += strlen(c->u.type.nspname) + strlen(c->u.type.typname);
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
		case ASH_CHANGE_TRUNCATE:
			for (int i = 0; i < c->u.truncate.nrelids; i++)
				sink += c->u.truncate.relids[i];
			break;
		case ASH_CHANGE_MESSAGE:
			sink += strlen(c->u.message.prefix);
			if (c->u.message.content_len > 0)
				sink += (unsigned char) c->u.message.content[c->u.message.content_len - 1];
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
	AshPgoutputState state;
	AshChange	change;
	const char *error = NULL;

	if (size < 1)
		return 0;
	state.proto_version = 1 + (data[0] & 3) % 3;
	state.in_stream = (data[0] & 4) != 0;

	if (ash_decode_pgoutput(&state, (const char *) data + 1, (int) (size - 1), &change, &error))
		touch(&change);
	else if (error == NULL)
		abort();				/* failures must say why */
	arena_reset();
	return 0;
}
