/*-------------------------------------------------------------------------
 *
 * unit_tap.h
 *	  Minimal TAP output for the frontend unit-test programs (test/unit):
 *	  ok() counts and prints a test line, diag() a comment.  Header-only:
 *	  each program is one translation unit of its own.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_UNIT_TAP_H
#define ASH_UNIT_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int	tap_count;
static int	tap_failed;

static inline bool ok(bool cond, const char *fmt,...) pg_attribute_printf(2, 3);

static inline bool
ok(bool cond, const char *fmt,...)
{
	va_list		ap;

	tap_count++;
	if (!cond)
		tap_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap_count);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return cond;
}

static inline void diag(const char *fmt,...) pg_attribute_printf(1, 2);

static inline void
diag(const char *fmt,...)
{
	va_list		ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

#endif							/* ASH_UNIT_TAP_H */
