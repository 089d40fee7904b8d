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
 *	  A function the catalogs name is stored as its signature, rendered
 *	  under one pinned search_path (ash_function_signature), as the
 *	  1.9.0 -> 1.10.0 update converted the former regprocedure columns;
 *	  ash_function_resolve reads it back.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "parser/scansup.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

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

/* search_path pg_catalog, pg_temp until AtEOXact_GUC(true, <returned level>) */
static int
pin_function_path(void)
{
	int			nest = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nest;
}

char *
ash_function_signature(Oid fn)
{
	int			nest = pin_function_path();
	char	   *result = format_procedure(fn);	/* regprocedureout's text */

	AtEOXact_GUC(true, nest);
	return result;
}

Oid
ash_function_resolve(const char *signature)
{
	LOCAL_FCINFO(fcinfo, 1);
	Datum		d;

	if (signature == NULL)
		return InvalidOid;
	if (signature[0] != '\0' && strspn(signature, "0123456789") == strlen(signature))
	{
		/* a regprocedure that named no function prints as its number */
		Oid			fn = (Oid) strtoul(signature, NULL, 10);

		return SearchSysCacheExists1(PROCOID, ObjectIdGetDatum(fn)) ? fn : InvalidOid;
	}
	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = CStringGetTextDatum(signature);
	fcinfo->args[0].isnull = false;
	d = to_regprocedure(fcinfo);
	return fcinfo->isnull ? InvalidOid : DatumGetObjectId(d);
}

const char *
ash_function_column_cast(const char *table, const char *column)
{
	Oid			nsp = get_namespace_oid("ash_replicant", true);
	Oid			rel = OidIsValid(nsp) ? get_relname_relid(table, nsp) : InvalidOid;
	AttrNumber	att = OidIsValid(rel) ? get_attnum(rel, column) : InvalidAttrNumber;

	if (att != InvalidAttrNumber && get_atttype(rel, att) == REGPROCEDUREOID)
		return "::pg_catalog.regprocedure";
	return "";
}
