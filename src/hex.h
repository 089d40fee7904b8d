/*-------------------------------------------------------------------------
 *
 * hex.h
 *	  A hexadecimal digit's value: the text decoders' escapes, COPY text's
 *	  \x bytes and the key file's hex keys.  Pure C, so the decoders built
 *	  as frontend code (make unit, make fuzz) can use it too.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_HEX_H
#define ASH_HEX_H

/* c's value as a hexadecimal digit, or -1. */
static inline int
ash_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

#endif							/* ASH_HEX_H */
