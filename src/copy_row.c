/*-------------------------------------------------------------------------
 *
 * copy_row.c
 *	  One row of COPY's text format as column values.
 *
 * NOTES
 *	  The snapshot copy (snapshot.c) reads source tables with COPY ... TO
 *	  STDOUT in text format, the format native logical replication's table
 *	  synchronisation reads too.  Values are the types' text output, so
 *	  once un-escaped they are exactly what pgoutput sends for the same row
 *	  in text mode, and apply converts them the same way.  A pure function
 *	  of its input: no catalog, no allocation.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "copy_row.h"
#include "hex.h"

static inline int
octal_value(char c)
{
	return c - '0';
}


bool
ash_copy_text_split(char *line, int len, int ncols, AshColumnValue *cols, const char **err)
{
	char	   *end = line + len;
	char	   *p = line;
	int			col = 0;

	/* the row's newline ends its last value */
	if (len > 0 && end[-1] == '\n')
		end--;

	for (;;)
	{
		char	   *start = p;
		char	   *out = p;

		if (col >= ncols)
		{
			*err = "more columns than described";
			return false;
		}

		/* \N alone is NULL (an escaped value that reads N is "\\N") */
		if (end - p >= 2 && p[0] == '\\' && p[1] == 'N' && (p + 2 == end || p[2] == '\t'))
		{
			cols[col].status = ASH_COL_NULL;
			cols[col].len = 0;
			cols[col].data = NULL;
			p += 2;
			col++;
			if (p >= end)
				break;
			p++;
			continue;
		}

		while (p < end && *p != '\t')
		{
			char		c = *p++;

			if (c != '\\')
			{
				*out++ = c;
				continue;
			}
			if (p >= end)
			{
				*err = "unfinished escape";
				return false;
			}
			c = *p++;
			switch (c)
			{
				case 'b':
					*out++ = '\b';
					break;
				case 'f':
					*out++ = '\f';
					break;
				case 'n':
					*out++ = '\n';
					break;
				case 'r':
					*out++ = '\r';
					break;
				case 't':
					*out++ = '\t';
					break;
				case 'v':
					*out++ = '\v';
					break;
				case '0':
				case '1':
				case '2':
				case '3':
				case '4':
				case '5':
				case '6':
				case '7':
					{
						int			v = octal_value(c);

						if (p < end && *p >= '0' && *p <= '7')
						{
							v = (v << 3) + octal_value(*p++);
							if (p < end && *p >= '0' && *p <= '7')
								v = (v << 3) + octal_value(*p++);
						}
						*out++ = (char) (v & 0377);
					}
					break;
				case 'x':
					if (p < end && isxdigit((unsigned char) *p))
					{
						int			v = ash_hex_digit(*p++);

						if (p < end && isxdigit((unsigned char) *p))
							v = (v << 4) + ash_hex_digit(*p++);
						*out++ = (char) (v & 0xff);
					}
					else
						*out++ = 'x';
					break;
				default:
					/* \\ and any other escaped byte stand for themselves */
					*out++ = c;
					break;
			}
		}

		cols[col].status = ASH_COL_TEXT;
		cols[col].len = out - start;
		cols[col].data = start;

		col++;
		if (p >= end)
		{
			*out = '\0';
			break;
		}
		/* p is at the tab: the value's terminator may overwrite it */
		*out = '\0';
		p++;
	}

	if (col != ncols)
	{
		*err = "fewer columns than described";
		return false;
	}
	return true;
}

static const char binary_signature[11] = "PGCOPY\n\377\r\n\0";

static inline uint32
read_uint32(const char *p)
{
	return ((uint32) (unsigned char) p[0] << 24) | ((uint32) (unsigned char) p[1] << 16) |
		((uint32) (unsigned char) p[2] << 8) | (uint32) (unsigned char) p[3];
}

int
ash_copy_binary_split(char *msg, int len, int *state, int ncols, AshColumnValue *cols,
					  const char **err)
{
	char	   *p = msg;
	char	   *end = msg + len;
	int16		nfields;

	if (*state == 0)
	{
		uint32		ext;

		/* signature, flags, header extension */
		if (len < 19 || memcmp(p, binary_signature, 11) != 0)
		{
			*err = "no binary COPY header";
			return -1;
		}
		/* bits 16-31 are critical: OIDs (16) and any this reader does not know */
		if (read_uint32(p + 11) & (1U << 16))
		{
			*err = "binary COPY with OIDs";
			return -1;
		}
		if (read_uint32(p + 11) >> 17)
		{
			*err = "unknown critical flags in the binary COPY header";
			return -1;
		}
		ext = read_uint32(p + 15);
		p += 19;
		if (ext > (uint32) (end - p))
		{
			*err = "truncated binary COPY header";
			return -1;
		}
		p += ext;
		*state = 1;
	}

	if (end - p < 2)
	{
		*err = "truncated binary COPY row";
		return -1;
	}
	nfields = (int16) (((unsigned char) p[0] << 8) | (unsigned char) p[1]);
	p += 2;
	if (nfields == -1)
	{
		if (p != end)
		{
			*err = "data after the binary COPY trailer";
			return -1;
		}
		return 0;
	}
	if (nfields != ncols)
	{
		*err = "binary COPY row with another column count";
		return -1;
	}
	for (int c = 0; c < ncols; c++)
	{
		int32		flen;

		if (end - p < 4)
		{
			*err = "truncated binary COPY value";
			return -1;
		}
		flen = (int32) read_uint32(p);
		p += 4;
		if (flen == -1)
		{
			cols[c].status = ASH_COL_NULL;
			cols[c].len = 0;
			cols[c].data = NULL;
			continue;
		}
		if (flen < 0 || flen > end - p)
		{
			*err = "binary COPY value length out of range";
			return -1;
		}
		cols[c].status = ASH_COL_BINARY;
		cols[c].len = flen;
		cols[c].data = p;
		p += flen;
	}
	if (p != end)
	{
		*err = "data after the last binary COPY value";
		return -1;
	}
	/* terminate each value: what follows it was read already */
	for (int c = 0; c < ncols; c++)
		if (cols[c].status == ASH_COL_BINARY)
			cols[c].data[cols[c].len] = '\0';
	return 1;
}
