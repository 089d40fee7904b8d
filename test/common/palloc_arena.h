/*-------------------------------------------------------------------------
 *
 * palloc_arena.h
 *	  palloc/palloc0 for the frontend decoder programs (unit test, fuzzer).
 *
 * NOTES
 *	  The decoder allocates only with palloc/palloc0 "in CurrentMemoryContext";
 *	  here every allocation is its own malloc (so AddressSanitizer sees the
 *	  exact bounds), remembered in an arena that arena_reset() frees, and
 *	  counted in arena_bytes so a test can bound what one message costs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_PALLOC_ARENA_H
#define ASH_PALLOC_ARENA_H

extern size_t arena_bytes;
extern void arena_reset(void);
extern void arena_free(void);

#endif							/* ASH_PALLOC_ARENA_H */
