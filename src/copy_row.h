/*-------------------------------------------------------------------------
 *
 * copy_row.h
 *	  One row of COPY's text format as column values.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_COPY_ROW_H
#define ASH_COPY_ROW_H

#include "change.h"

/*
 * Split one row of COPY ... TO STDOUT text output (tab-separated, \N for
 * NULL, backslash escapes, a trailing newline) into exactly ncols values,
 * un-escaping in place: cols[i].data points into line and is
 * NUL-terminated (line must have room for len + 1 bytes, as libpq's
 * copy buffers do).  Returns false with a value-free *err when the row is
 * malformed (wrong column count, an unfinished escape).
 */
extern bool ash_copy_text_split(char *line, int len, int ncols, AshColumnValue *cols,
								const char **err);

/*
 * Binary format (COPY ... (FORMAT binary)): the first message starts with
 * the file header, a tuple is a field count and length-prefixed values, the
 * last message is the trailer.  *state starts at 0 (header expected) and is
 * kept between calls.  Returns 1 for a row (cols[i].data points into msg
 * and is NUL-terminated: the byte after a value belongs to the next
 * value's length, already read, or is libpq's terminator), 0 for the
 * trailer, -1 with a value-free *err when the message is malformed.
 */
extern int	ash_copy_binary_split(char *msg, int len, int *state, int ncols,
								  AshColumnValue *cols, const char **err);

#endif							/* ASH_COPY_ROW_H */
