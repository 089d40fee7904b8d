/*-------------------------------------------------------------------------
 *
 * palloc_arena.c
 *	  palloc/palloc0 for the frontend decoder programs (see palloc_arena.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres_fe.h"

#include "palloc_arena.h"

static void **arena_ptrs;
static size_t arena_n;
static size_t arena_cap;
size_t		arena_bytes;

void *
palloc(Size size)
{
	void	   *p;

	if (arena_n == arena_cap)
	{
		arena_cap = arena_cap ? arena_cap * 2 : 1024;
		arena_ptrs = realloc(arena_ptrs, arena_cap * sizeof(void *));
		if (arena_ptrs == NULL)
			abort();
	}
	/* one malloc per chunk: the sanitizer sees the exact bounds */
	p = malloc(size > 0 ? size : 1);
	if (p == NULL)
		abort();
	arena_ptrs[arena_n++] = p;
	arena_bytes += size;
	return p;
}

void *
palloc0(Size size)
{
	void	   *p = palloc(size);

	memset(p, 0, size);
	return p;
}

void
arena_reset(void)
{
	for (size_t i = 0; i < arena_n; i++)
		free(arena_ptrs[i]);
	arena_n = 0;
	arena_bytes = 0;
}

void
arena_free(void)
{
	arena_reset();
	free(arena_ptrs);
	arena_ptrs = NULL;
	arena_cap = 0;
}
