/*-------------------------------------------------------------------------
 *
 * copy_text.h
 *	  One row of COPY's text format as column values.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_COPY_TEXT_H
#define ASH_COPY_TEXT_H

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

#endif							/* ASH_COPY_TEXT_H */
