/*-------------------------------------------------------------------------
 *
 * fuzz_decoder.c
 *	  libFuzzer target over the pure decoders (pgoutput, wal2json, pglogical).
 *
 * NOTES
 *	  The first input byte picks the decoder.  High bit clear: pgoutput;
 *	  the byte picks the protocol version (1..3) and whether the decoder is
 *	  inside a streamed block; the rest is one message.  High bit set:
 *	  wal2json; the rest is a run of messages separated by newlines (as
 *	  test/fixtures/wal2json/basic.jsonl holds them), decoded in order with
 *	  one state describing that fixture's tables, so that a mutated change
 *	  inside a transaction is reached (its low bit: include-origin
 *	  asked).  0x40 set (high bit clear):
 *	  pglogical_output; the low two bits pick the decoder state
 *	  (fuzz_pglogical), the rest is one message.  The
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
#include "decode_pglogical.h"
#include "decode_pgoutput.h"
#include "decode_wal2json.h"
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

/* The tables of test/fixtures/wal2json/basic.sql, as census.c describes them. */
static AshRelColumn t1_cols[] = {
	{true, "id", 23, -1, false}, {false, "n", 1700, 655366, true}, {false, "f", 701, -1, false},
	{false, "b", 16, -1, false}, {false, "by", 17, -1, true}, {false, "t", 25, -1, true},
	{false, "j", 3802, -1, true}, {false, "ts", 1184, -1, false}, {false, "arr", 1007, -1, true},
	{false, "big", 25, -1, true},
};
static AshRelColumn full1_cols[] = {{true, "id", 23, -1, false}, {true, "v", 25, -1, true}};
static AshRelColumn keyless_cols[] = {{false, "a", 23, -1, false}, {false, "b", 25, -1, true}};
static AshRelColumn weird_cols[] = {{true, "id", 23, -1, false}, {false, "co\"l", 25, -1, true}};
static AshRelation w2j_tables[] = {
	{1, "public", "t1", 'd', lengthof(t1_cols), t1_cols},
	{2, "public", "full1", 'f', lengthof(full1_cols), full1_cols},
	{3, "public", "keyless", 'd', lengthof(keyless_cols), keyless_cols},
	{4, "we.ird, \\sch", "ta ble*", 'd', lengthof(weird_cols), weird_cols},
};

static void
fuzz_wal2json(uint8_t flags, const uint8_t *data, size_t size)
{
	AshWal2jsonState state;
	size_t		start = 0;

	memset(&state, 0, sizeof(state));
	state.tables = w2j_tables;
	state.ntables = lengthof(w2j_tables);
	state.origins = (flags & 1) != 0;	/* include-origin asked */
	while (start <= size)
	{
		size_t		end = start;
		AshChange	change;
		const char *error = NULL;
		char	   *copy;

		while (end < size && data[end] != '\n')
			end++;
		/* an exact copy: a read past the message is an ASan report */
		copy = malloc(end - start + 1);
		memcpy(copy, data + start, end - start);
		if (ash_decode_wal2json(&state, copy, (int) (end - start), &change, &error))
			touch(&change);
		else if (error == NULL)
			abort();			/* failures must say why */
		free(copy);
		arena_reset();
		start = end + 1;
	}
}

/*
 * pglogical_output (selector 0x40): the low two bits say whether the
 * startup message was seen and whether pglogical.queue is known (relation
 * 16384 of 5 columns, message_type and message last, as pglogical 2.x
 * defines it); the rest is one message, copied exactly.
 */
static void
fuzz_pglogical(uint8_t selector, const uint8_t *data, size_t size)
{
	AshPglogicalState state;
	AshChange	change;
	const char *error = NULL;
	char	   *copy = malloc(size + 1);
	AshPglogicalResult r;

	memset(&state, 0, sizeof(state));
	state.expected_encoding = "UTF8";
	state.startup_seen = (selector & 1) != 0;
	if (selector & 2)
	{
		state.queue_relid = 16384;
		state.queue_natts = 5;
		state.queue_type_col = 3;
		state.queue_message_col = 4;
	}
	memcpy(copy, data, size);
	r = ash_decode_pglogical(&state, copy, (int) size, &change, &error);
	if (r == ASH_PGL_CHANGE)
		touch(&change);
	else if (r == ASH_PGL_QUEUED_TRUNCATE)
		sink += strlen(state.truncated_nspname) + strlen(state.truncated_relname);
	else if (r == ASH_PGL_ERROR && error == NULL)
		abort();				/* failures must say why */
	free(copy);
	arena_reset();
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
	if (data[0] & 0x80)
	{
		fuzz_wal2json(data[0], data + 1, size - 1);
		return 0;
	}
	if (data[0] & 0x40)
	{
		fuzz_pglogical(data[0], data + 1, size - 1);
		return 0;
	}
	state.proto_version = 1 + (data[0] & 3) % 3;
	state.in_stream = (data[0] & 4) != 0;

	if (ash_decode_pgoutput(&state, (const char *) data + 1, (int) (size - 1), &change, &error))
		touch(&change);
	else if (error == NULL)
		abort();				/* failures must say why */
	arena_reset();
	return 0;
}
