/*-------------------------------------------------------------------------
 *
 * qualname.c
 *	  The stored form of a qualified source name ("schema.table"): one
 *	  parser and one printer for every reader and writer.
 *
 * NOTES
 *	  sinks.ignored_sources and pipelines.tables hold entries in the
 *	  canonical form quote_identifier(schema).quote_identifier(table),
 *	  written by the SQL surface (api_sink.c) after it parsed the caller's
 *	  text with the same parser; config.c, census.c and api_doctor.c read
 *	  them back with it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "lib/stringinfo.h"
#include "parser/scansup.h"
#include "utils/builtins.h"

#include "qualname.h"

static bool
ident_start_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
		IS_HIGHBIT_SET(c);
}

static bool
ident_cont_char(unsigned char c)
{
	return ident_start_char(c) || (c >= '0' && c <= '9') || c == '$';
}

/* Parse one identifier at *pp; advances *pp past it. */
static bool
parse_ident_part(const char **pp, char **out)
{
	const char *p = *pp;

	if (*p == '"')
	{
		StringInfoData buf;

		initStringInfo(&buf);
		p++;
		for (;;)
		{
			if (*p == '\0')
				return false;	/* unterminated quote */
			if (*p == '"')
			{
				if (p[1] == '"')
				{
					appendStringInfoChar(&buf, '"');
					p += 2;
					continue;
				}
				p++;
				break;
			}
			appendStringInfoChar(&buf, *p++);
		}
		if (buf.len == 0)
			return false;
		*out = buf.data;
	}
	else
	{
		const char *start = p;

		if (!ident_start_char((unsigned char) *p))
			return false;
		p++;
		while (ident_cont_char((unsigned char) *p))
			p++;
		*out = downcase_identifier(start, p - start, false, false);
	}
	if (strlen(*out) >= NAMEDATALEN)
		return false;
	*pp = p;
	return true;
}

bool
ash_parse_qualified_name(const char *str, char **schema, char **table)
{
	const char *p = str;

	if (!parse_ident_part(&p, schema))
		return false;
	if (*p != '.')
		return false;
	p++;
	if (!parse_ident_part(&p, table))
		return false;
	return *p == '\0';
}

char *
ash_canonical_qualified_name(const char *schema, const char *table)
{
	return psprintf("%s.%s", quote_identifier(schema), quote_identifier(table));
}
