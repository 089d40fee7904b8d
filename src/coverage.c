/*-------------------------------------------------------------------------
 *
 * coverage.c
 *	  Source coverage: does a sink's mapping cover what the source sends?
 *
 * NOTES
 *	  See coverage.h for the rules and their order.  Everything here is a
 *	  judgement over descriptions: no SPI, no libpq, no writes.  Names are
 *	  compared exactly (they are catalog names, not SQL input).
 *
 *	  Collect-then-report: each rule gathers every offender before the
 *	  verdict is formed, so an operator fixes a table in one round.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/relation.h"
#include "access/genam.h"
#include "access/table.h"
#include "access/transam.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/pg_attrdef.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_class.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "parser/parse_coerce.h"
#include "utils/builtins.h"
#include "utils/acl.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "coverage.h"
#include "errors.h"
#include "mapping_validate.h"

/* ---------------------------------------------------------------------
 * Helpers.
 * ---------------------------------------------------------------------
 */

static bool
name_in(const List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, (List *) names)
	{
		if (strcmp((const char *) lfirst(lc), name) == 0)
			return true;
	}
	return false;
}

/* Append a name to a ", "-separated list for a message. */
void
ash_append_name_list(StringInfo buf, const char *name)
{
	if (buf->len > 0)
		appendStringInfoString(buf, ", ");
	appendStringInfoString(buf, quote_identifier(name));
}

/* Append a name only once (a column can be declared by several options). */
static void
append_name_once(StringInfo buf, List **seen, const char *name)
{
	if (name_in(*seen, name))
		return;
	*seen = lappend(*seen, (char *) name);
	ash_append_name_list(buf, name);
}

static char *
qualified(const char *nsp, const char *rel)
{
	return psprintf("%s.%s", quote_identifier(nsp), quote_identifier(rel));
}

static int
source_column(const AshSourceTable *src, const char *name)
{
	for (int i = 0; i < src->natts; i++)
	{
		if (strcmp(src->cols[i].name, name) == 0)
			return i;
	}
	return -1;
}

/* Target column a source column is written to, NULL when skipped. */
static const char *
target_column_of(const AshMapping *m, const char *source)
{
	return ash_mapping_target_column((AshMapping *) m, source);
}

/* The live, non-dropped attribute of the target named so, or NULL. */
static Form_pg_attribute
target_attribute(TupleDesc desc, const char *name)
{
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att;
	}
	return NULL;
}

static bool
fail(AshCoverageVerdict *out, const char *reason, char *context)
{
	out->reason = reason;
	out->warning = false;
	out->context = context;
	return false;
}

/*
 * Key columns (attnums) of the target's conflict identity: the index or
 * constraint named by upsert_identity, else the primary key.  NIL when
 * there is none (or it has an expression column).
 */
List *
ash_target_identity_attnums(Relation target, const AshMapping *m)
{
	List	   *indexes = RelationGetIndexList(target);
	ListCell   *lc;
	Oid			chosen = InvalidOid;
	List	   *attnums = NIL;

	foreach(lc, indexes)
	{
		Oid			idx = lfirst_oid(lc);

		if (m->upsert_identity != NULL)
		{
			char	   *idxname = get_rel_name(idx);
			Oid			conoid = get_index_constraint(idx);
			char	   *conname = OidIsValid(conoid) ? get_constraint_name(conoid) : NULL;

			if ((idxname && strcmp(idxname, m->upsert_identity) == 0) ||
				(conname && strcmp(conname, m->upsert_identity) == 0))
			{
				chosen = idx;
				break;
			}
		}
		else
		{
			HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(idx));
			bool		isprimary = false;

			if (HeapTupleIsValid(tup))
			{
				isprimary = ((Form_pg_index) GETSTRUCT(tup))->indisprimary;
				ReleaseSysCache(tup);
			}
			if (isprimary)
			{
				chosen = idx;
				break;
			}
		}
	}
	list_free(indexes);

	if (OidIsValid(chosen))
	{
		HeapTuple	tup = SearchSysCache1(INDEXRELID, ObjectIdGetDatum(chosen));
		Form_pg_index ind;

		if (!HeapTupleIsValid(tup))
			return NIL;
		ind = (Form_pg_index) GETSTRUCT(tup);
		for (int i = 0; i < ind->indnkeyatts; i++)
		{
			if (ind->indkey.values[i] <= 0)
			{
				list_free(attnums);
				attnums = NIL;
				break;
			}
			attnums = lappend_int(attnums, ind->indkey.values[i]);
		}
		ReleaseSysCache(tup);
	}
	return attnums;
}

/* ---------------------------------------------------------------------
 * Types.
 * ---------------------------------------------------------------------
 */

/* A source user type is known by its name only: the target's, or its base's. */
static bool
user_type_named(const char *source_typname, Oid target_type)
{
	Oid			target_base = getBaseType(target_type);

	if (source_typname == NULL)
		return false;
	for (int pass = 0; pass < 2; pass++)
	{
		Oid			t = pass == 0 ? target_type : target_base;
		HeapTuple	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(t));
		bool		match;

		if (!HeapTupleIsValid(tup))
			continue;
		match = strcmp(NameStr(((Form_pg_type) GETSTRUCT(tup))->typname), source_typname) == 0;
		ReleaseSysCache(tup);
		if (match)
			return true;
	}
	return false;
}

/*
 * An OID alias type (regclass, regtype, ...) or an array of one: its value
 * is an object of the source's catalog.  Streamed as text it is the
 * object's name there, copied in binary the bare OID, which names another
 * object at the destination, or none: no target reads it the same way.
 */
static bool
oid_alias_type(Oid type)
{
	Oid			elem = get_element_type(type);

	switch (OidIsValid(elem) ? elem : type)
	{
		case REGCLASSOID:
		case REGTYPEOID:
		case REGPROCOID:
		case REGPROCEDUREOID:
		case REGOPEROID:
		case REGOPERATOROID:
		case REGCONFIGOID:
		case REGDICTIONARYOID:
		case REGNAMESPACEOID:
		case REGROLEOID:
		case REGCOLLATIONOID:
			return true;
		default:
			return false;
	}
}

/*
 * A source column's type changed from (old_type, old_typmod) to (new_type,
 * new_typmod): does the rewrite ALTER TABLE made of its rows keep every
 * value as its text was?  Only a limit lifted or widened does: numeric's
 * precision with the same scale, a time precision, a varying string's
 * length, an integer widened, varchar to text.  A smaller scale or
 * precision rounded values (numeric(10,2) to (10,0), timestamp(6) to (0)),
 * a larger scale rewrote them (1.5 became 1.50), another type read them
 * anew (timestamp to timestamptz in the session's time zone): none of it
 * is in any stream, and the mirror would keep the old values.
 */
bool
ash_coverage_retype_keeps_values(uint32 old_type, int32 old_typmod,
								 uint32 new_type, int32 new_typmod)
{
	if (old_type != new_type)
	{
		switch (new_type)
		{
			case INT4OID:
				return old_type == INT2OID;
			case INT8OID:
				return old_type == INT2OID || old_type == INT4OID;
			case TEXTOID:
				return old_type == VARCHAROID;
			case VARCHAROID:
				return old_type == TEXTOID && new_typmod == -1;
			default:
				return false;
		}
	}
	if (new_typmod == old_typmod || new_typmod == -1)
		return true;
	switch (new_type)
	{
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case TIMEOID:
		case TIMETZOID:
			/* no modifier: microseconds, the most there is */
			return new_typmod >= (old_typmod == -1 ? 6 : old_typmod);
		case NUMERICOID:
			return old_typmod != -1 &&
				((old_typmod - VARHDRSZ) & 0xffff) == ((new_typmod - VARHDRSZ) & 0xffff) &&
				((new_typmod - VARHDRSZ) >> 16) >= ((old_typmod - VARHDRSZ) >> 16);
		case VARCHAROID:
		case VARBITOID:
			return old_typmod != -1 && new_typmod > old_typmod;
		default:
			return false;
	}
}

bool
ash_coverage_types_compatible(uint32 source_oid, const char *source_typname,
							  Oid target_type)
{
	Oid			target_base = getBaseType(target_type);
	bool		builtin = source_oid < FirstGenbkiObjectId;
	char		tcat;
	bool		tpref;

	if (builtin && oid_alias_type((Oid) source_oid))
		return false;
	if (builtin && (source_oid == target_type || source_oid == target_base))
		return true;

	/* any value renders as text */
	get_type_category_preferred(target_base, &tcat, &tpref);
	if (tcat == TYPCATEGORY_STRING)
		return true;

	if (builtin)
	{
		Oid			src = (Oid) source_oid;

		/* a built-in OID this server does not know (a newer source) */
		if (!SearchSysCacheExists1(TYPEOID, ObjectIdGetDatum(src)))
			return false;
		/* arrays only as the same type: element casts do not apply to text */
		if (OidIsValid(get_base_element_type(src)) ||
			OidIsValid(get_base_element_type(target_base)))
			return false;
		return can_coerce_type(1, &src, &target_base, COERCION_IMPLICIT);
	}

	return user_type_named(source_typname, target_type);
}

/*
 * Does the target type tell apart every two keys the source type tells
 * apart?  A key column that compares coarser makes two source rows one
 * target row (text into citext: 'A' and 'a'; numeric into double
 * precision: 0.1 and 0.1000000000000000001), and the second's write lands
 * on the first's without a word.  Kept apart: the same type (a user type
 * by name, as above), text and varchar (the text forms of two values the
 * source tells apart differ; their collation is judged at registration),
 * and the widenings below.
 */
static bool
key_type_keeps_keys_apart(const AshSourceColumn *sc, Oid target_type)
{
	static const struct
	{
		Oid			from;
		Oid			to;
	}			widenings[] = {
		{INT2OID, INT4OID}, {INT2OID, INT8OID}, {INT2OID, NUMERICOID},
		{INT4OID, INT8OID}, {INT4OID, NUMERICOID}, {INT8OID, NUMERICOID},
		{FLOAT4OID, FLOAT8OID}, {DATEOID, TIMESTAMPOID},
	};
	Oid			target_base = getBaseType(target_type);

	if (target_base == TEXTOID || target_base == VARCHAROID)
		return true;
	if (sc->type_oid >= FirstGenbkiObjectId)
		return user_type_named(sc->type_name, target_type);
	if (sc->type_oid == target_type || sc->type_oid == target_base)
		return true;
	for (int i = 0; i < lengthof(widenings); i++)
		if (sc->type_oid == widenings[i].from && target_base == widenings[i].to)
			return true;
	return false;
}

/* The target column a source column lands on, appended to keys (if live). */
static List *
append_target_attnum(List *keys, const AshMapping *m, Relation target, const char *source)
{
	const char *tname = target_column_of(m, source);
	Form_pg_attribute att = tname ? target_attribute(RelationGetDescr(target), tname) : NULL;

	return att != NULL ? lappend_int(keys, att->attnum) : keys;
}

/*
 * The target columns that tell rows apart: the conflict identity (an SCD2
 * business key's columns), and an attribute tenant's column, by which
 * every write of a tenant is scoped.  An append log's identity axes are
 * written by the worker, not from the source.
 */
static List *
key_attnums(const AshMapping *m, const List *business_key, Relation target)
{
	List	   *keys = NIL;
	ListCell   *lc;

	if (m->append_log)
		return NIL;
	if (m->history_strategy != NULL && strcmp(m->history_strategy, "scd2") == 0)
	{
		foreach(lc, (List *) business_key)
			keys = append_target_attnum(keys, m, target, lfirst(lc));
	}
	else
		keys = ash_target_identity_attnums(target, m);
	if (m->tenant_strategy != NULL && strcmp(m->tenant_strategy, "attribute") == 0 &&
		m->tenant_column != NULL)
		keys = append_target_attnum(keys, m, target, m->tenant_column);
	return keys;
}

/* " (source type -> target type)" after a column's name */
static void
append_types(StringInfo buf, const AshSourceColumn *sc, Form_pg_attribute att)
{
	appendStringInfo(buf, " (%s -> %s)",
					 sc->type_display ? sc->type_display :
					 sc->type_name ? sc->type_name : "?",
					 format_type_with_typemod(att->atttypid, att->atttypmod));
}

/*
 * The source type's name: a built-in type is the same type here (a
 * Relation message names none: pgoutput sends Type messages for other
 * types only).
 */
static const char *
source_typname(const AshSourceColumn *sc)
{
	HeapTuple	tup;
	char	   *name;

	if (sc->type_oid >= FirstGenbkiObjectId)
		return sc->type_name;
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum((Oid) sc->type_oid));
	if (!HeapTupleIsValid(tup))
		return sc->type_name;
	name = pstrdup(NameStr(((Form_pg_type) GETSTRUCT(tup))->typname));
	ReleaseSysCache(tup);
	return name;
}

/* A source column and its target column's type, base types and typmods. */
typedef struct TypeFit
{
	Oid			tbase;			/* the target's base type */
	int32		tmod;			/* its typmod (a domain's own when it has one) */
	const char *s;				/* the source type's name */
	int32		smod;
} TypeFit;

/* Fill f; false when the source type's name is unknown (not judged). */
static bool
type_fit(const AshSourceColumn *sc, Form_pg_attribute att, TypeFit *f)
{
	f->tmod = att->atttypmod;
	f->tbase = getBaseTypeAndTypmod(att->atttypid, &f->tmod);
	f->s = source_typname(sc);
	f->smod = sc->typmod;
	return f->s != NULL;
}

/* A time type's precision from its typmod: none is the maximum, 6. */
static int
time_precision(int32 typmod)
{
	return typmod < 0 ? 6 : typmod;
}

/*
 * The fields of a composite type (or of an array's composite element), as
 * the source's describe query writes them (SHAPE_SQL, source_catalog.c):
 * "name type, ..." in order, a built-in field type by format_type, any
 * other by its name.  NULL when the type is neither.  A composite value
 * travels as text, its fields by position: a target type of the same name
 * whose fields are in another order or of other types reads each field
 * into another one without an error.
 */
static char *
type_shape(Oid type)
{
	Oid			base = getBaseType(type);
	Oid			elem = get_element_type(base);
	Oid			comp = InvalidOid;
	TupleDesc	desc;
	StringInfoData buf;

	if (get_typtype(base) == TYPTYPE_COMPOSITE)
		comp = base;
	else if (OidIsValid(elem) && get_typtype(elem) == TYPTYPE_COMPOSITE)
		comp = elem;
	if (!OidIsValid(comp))
		return NULL;
	desc = lookup_rowtype_tupdesc(comp, -1);
	initStringInfo(&buf);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute f = TupleDescAttr(desc, i);

		if (f->attisdropped)
			continue;
		appendStringInfo(&buf, "%s%s ", buf.len > 0 ? ", " : "",
						 quote_identifier(NameStr(f->attname)));
		if (f->atttypid < FirstGenbkiObjectId)
			appendStringInfoString(&buf, format_type_with_typemod(f->atttypid, f->atttypmod));
		else
		{
			HeapTuple	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(f->atttypid));

			if (HeapTupleIsValid(tup))
			{
				appendStringInfoString(&buf, NameStr(((Form_pg_type) GETSTRUCT(tup))->typname));
				ReleaseSysCache(tup);
			}
		}
	}
	ReleaseTupleDesc(desc);
	return buf.data;
}

/*
 * Does a composite source column land on a composite target type of other
 * fields?  (Into a string target it is the text it renders as.)
 */
static bool
reshapes(const AshSourceColumn *sc, Form_pg_attribute att)
{
	char	   *target;

	if (sc->type_shape == NULL)
		return false;
	target = type_shape(att->atttypid);
	return target != NULL && strcmp(sc->type_shape, target) != 0;
}

/* What a target column does to the values it takes without an error. */
typedef enum Rewrite
{
	KEEPS,						/* every value as the source has it */
	ROUNDS,						/* rounds, pads or cuts some */
	ZONED						/* reads them in the destination's time zone */
} Rewrite;

/*
 * Does the target column change values without an error?  A numeric of a
 * smaller scale, a time type of a lower precision or an interval of other
 * fields or precision round (1.2345 into numeric(10,2) is 1.23); a
 * floating-point target rounds the integers and numerics it takes
 * implicitly; a char(n) pads what it takes to its length (and drops
 * trailing spaces past it); a name cuts text at 63 bytes; an oid reads an
 * integer unsigned; a time into an interval of fewer fields or digits
 * loses some.  A timetz takes
 * a time, and a timestamptz a timestamp or a date, as a local time of the
 * destination's TimeZone: an instant that moves when that setting does,
 * and under daylight saving time a local time in the spring-forward gap
 * becomes the hour after it.  The mirror would be healthy and not equal.
 * An array is judged as its elements.  A source domain's typmod is not in
 * a Relation message: unknown, not judged there.
 */
static Rewrite
rewrites(const AshSourceColumn *sc, Form_pg_attribute att)
{
	TypeFit		f;

	if (!type_fit(sc, att, &f) || (sc->type_oid >= FirstGenbkiObjectId && f.smod < 0))
		return KEEPS;
	if (OidIsValid(get_element_type(f.tbase)))
	{
		/* an array's typmod is its elements': judged as theirs */
		if (f.s[0] != '_')
			return KEEPS;
		f.tbase = get_element_type(f.tbase);
		f.s++;
	}
	switch (f.tbase)
	{
		case NUMERICOID:
			if (f.tmod < 0 || strcmp(f.s, "numeric") != 0)
				return KEEPS;	/* integers fit any scale */
			return f.smod < 0 ||
				(int16) ((f.smod - VARHDRSZ) & 0xffff) > (int16) ((f.tmod - VARHDRSZ) & 0xffff) ?
				ROUNDS : KEEPS;
		case TIMETZOID:
			if (strcmp(f.s, "time") == 0)
				return ZONED;
			break;
		case TIMESTAMPTZOID:
			if (strcmp(f.s, "timestamp") == 0 || strcmp(f.s, "date") == 0)
				return ZONED;
			break;
		case INTERVALOID:
			if (f.tmod < 0)
				return KEEPS;
			if (strcmp(f.s, "interval") == 0)
				return f.smod != f.tmod ? ROUNDS : KEEPS;
			if (strcmp(f.s, "time") == 0)
			{
				/* hours to seconds: a range without seconds drops some */
				int			range = INTERVAL_RANGE(f.tmod);
				int			precision = INTERVAL_PRECISION(f.tmod);

				return (range != INTERVAL_FULL_RANGE && !(range & INTERVAL_MASK(SECOND))) ||
					(precision != INTERVAL_FULL_PRECISION &&
					 precision < time_precision(f.smod)) ? ROUNDS : KEEPS;
			}
			return KEEPS;
		case FLOAT4OID:
			return strcmp(f.s, "int4") == 0 || strcmp(f.s, "int8") == 0 ||
				strcmp(f.s, "numeric") == 0 ? ROUNDS : KEEPS;
		case FLOAT8OID:
			return strcmp(f.s, "int8") == 0 || strcmp(f.s, "numeric") == 0 ? ROUNDS : KEEPS;
		case BPCHAROID:
			return strcmp(f.s, "bpchar") != 0 || f.smod != f.tmod ? ROUNDS : KEEPS;
		case NAMEOID:
			return strcmp(f.s, "name") != 0 ? ROUNDS : KEEPS;	/* cut at 63 bytes */
		case OIDOID:
			/* an unsigned reading: -1 of an integer is 4294967295 */
			return strcmp(f.s, "oid") != 0 ? ROUNDS : KEEPS;
		case TIMESTAMPOID:
		case TIMEOID:
			break;
		default:
			return KEEPS;
	}
	/* a time type of a lower precision rounds */
	if (f.tmod < 0 || (strcmp(f.s, "timestamp") != 0 && strcmp(f.s, "timestamptz") != 0 &&
					   strcmp(f.s, "time") != 0 && strcmp(f.s, "timetz") != 0))
		return KEEPS;
	return time_precision(f.smod) > time_precision(f.tmod) ? ROUNDS : KEEPS;
}

/*
 * Can the target column hold less than the source column (a value too
 * long or too large fails its write: 22001, 22003)?
 */
static bool
narrower(const AshSourceColumn *sc, Form_pg_attribute att)
{
	TypeFit		f;

	if (!type_fit(sc, att, &f) || f.tmod < 0)
		return false;			/* an unlimited target holds anything */
	if (OidIsValid(get_element_type(f.tbase)))
	{
		/* an array's typmod is its elements': judged as theirs */
		if (f.s[0] != '_')
			return false;
		f.tbase = get_element_type(f.tbase);
		f.s++;
	}
	switch (f.tbase)
	{
		case VARCHAROID:
			if (strcmp(f.s, "text") == 0)
				return true;
			if (strcmp(f.s, "varchar") == 0 || strcmp(f.s, "bpchar") == 0)
				return f.smod < 0 || f.smod > f.tmod;
			return false;
		case NUMERICOID:
			{
				int			tp = ((f.tmod - VARHDRSZ) >> 16) & 0xffff;
				int			ts = (int16) ((f.tmod - VARHDRSZ) & 0xffff);
				int			sp,
							ss;

				if (strcmp(f.s, "int2") == 0 || strcmp(f.s, "int4") == 0 || strcmp(f.s, "int8") == 0)
				{
					int			digits = f.s[3] == '2' ? 5 : f.s[3] == '4' ? 10 : 19;

					return tp - ts < digits;
				}
				if (strcmp(f.s, "numeric") != 0 || f.smod < 0)
					return false;	/* rewrites() refuses an unconstrained one */
				sp = ((f.smod - VARHDRSZ) >> 16) & 0xffff;
				ss = (int16) ((f.smod - VARHDRSZ) & 0xffff);
				return tp - ts < sp - ss;
			}
		case BITOID:
		case VARBITOID:
			if (strcmp(f.s, "bit") != 0 && strcmp(f.s, "varbit") != 0)
				return false;
			return f.smod < 0 || f.smod > f.tmod;
		default:
			return false;
	}
}

bool
ash_coverage_narrowing(const AshMapping *m, const AshSourceTable *src, StringInfo buf)
{
	Relation	target = ash_open_target(m->target_relid, AccessShareLock, true);
	TupleDesc	desc;
	bool		found = false;

	if (target == NULL)
		return false;
	desc = RelationGetDescr(target);
	for (int i = 0; i < src->natts; i++)
	{
		const AshSourceColumn *sc = &src->cols[i];
		const char *tname = target_column_of(m, sc->name);
		Form_pg_attribute att;

		if (tname == NULL || name_in(m->encrypted, sc->name))
			continue;			/* skipped, or written as ciphertext */
		att = target_attribute(desc, tname);
		if (att == NULL || !narrower(sc, att))
			continue;
		if (!found)
			appendStringInfo(buf, "%stable %s columns: ", buf->len ? "; " : "",
							 qualified(src->nspname, src->relname));
		else
			appendStringInfoString(buf, ", ");
		appendStringInfoString(buf, quote_identifier(sc->name));
		append_types(buf, sc, att);
		found = true;
	}
	relation_close(target, AccessShareLock);
	return found;
}

/* ---------------------------------------------------------------------
 * One table.
 * ---------------------------------------------------------------------
 */

/* Rule 4: replica identity. */
static bool
judge_identity(const AshMapping *m, const List *business_key, const AshSourceTable *src,
			   Relation target, const char *qname, AshCoverageVerdict *out)
{
	bool		full = src->replident == 'f';
	bool		scd2 = m->history_strategy != NULL && strcmp(m->history_strategy, "scd2") == 0;
	StringInfoData bad;
	StringInfoData unfed;
	List	   *idattnums;
	ListCell   *lc;

	if (m->tenant_strategy != NULL && !full)
		return fail(out, "source_replica_identity",
					psprintf("tenant-scoped source %s needs REPLICA IDENTITY FULL", qname));
	if (m->append_log && !full)
		return fail(out, "source_replica_identity",
					psprintf("append-log source %s needs REPLICA IDENTITY FULL", qname));
	if (m->append_log || (scd2 && full))
		return true;			/* FULL carries every column of the old row */
	if (scd2)
	{
		/* the old key must carry exactly the business key */
		bool		same = list_length(business_key) > 0;
		int			nident = 0;

		for (int i = 0; i < src->natts; i++)
		{
			if (!src->cols[i].in_identity)
				continue;
			nident++;
			if (!name_in(business_key, src->cols[i].name))
				same = false;
		}
		foreach(lc, (List *) business_key)
		{
			int			i = source_column(src, lfirst(lc));

			if (i < 0 || !src->cols[i].in_identity)
				same = false;
		}
		if (!same || nident != list_length(business_key))
			return fail(out, "source_replica_identity",
						psprintf("SCD2 source %s needs REPLICA IDENTITY FULL: its business key is not its replica identity",
								 qname));
		return true;
	}

	/* SCD1: every identity column of the target comes from the old key */
	idattnums = ash_target_identity_attnums(target, m);
	if (idattnums == NIL)
		return fail(out, "destination_table_missing",
					psprintf("the target of %s has no usable identity (primary key or upsert_identity)",
							 qname));
	initStringInfo(&bad);
	initStringInfo(&unfed);
	foreach(lc, idattnums)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(target), lfirst_int(lc) - 1);
		const char *tname = NameStr(att->attname);
		int			fed = -1;

		for (int i = 0; i < src->natts && fed < 0; i++)
		{
			const char *t = target_column_of(m, src->cols[i].name);

			if (t != NULL && strcmp(t, tname) == 0)
				fed = i;
		}
		if (fed < 0)
			ash_append_name_list(&unfed, tname);
		else if (!full && !src->cols[fed].in_identity)
			ash_append_name_list(&bad, src->cols[fed].name);
	}
	if (unfed.len > 0)
		return fail(out, "source_replica_identity",
					psprintf("table %s target identity columns fed by no source column: %s",
							 qname, unfed.data));
	if (bad.len > 0)
		return fail(out, "source_replica_identity",
					psprintf("table %s identity columns not in the source's replica identity: %s",
							 qname, bad.data));
	return true;
}

/*
 * Rule 5: the source columns the target tells rows apart by hold a key the
 * source keeps unique.  Each column's unique_in names the unique keys it
 * is a key column of; a key all of whose columns are among them is held.
 */
static bool
judge_source_key(const AshMapping *m, const List *business_key, const AshSourceTable *src,
				 Relation target, const char *qname, AshCoverageVerdict *out)
{
	bool		scd2 = m->history_strategy != NULL && strcmp(m->history_strategy, "scd2") == 0;
	List	   *cols = NIL;		/* indexes into src->cols */
	List	   *tokens = NIL;	/* their unique keys, "index:nkeys" */
	StringInfoData names;
	ListCell   *lc;

	if (!src->unique_known || m->append_log)
		return true;
	if (scd2)
	{
		foreach(lc, (List *) business_key)
		{
			int			i = source_column(src, lfirst(lc));

			if (i >= 0)
				cols = list_append_unique_int(cols, i);
		}
	}
	else
	{
		List	   *idattnums = ash_target_identity_attnums(target, m);

		foreach(lc, idattnums)
		{
			Form_pg_attribute att = TupleDescAttr(RelationGetDescr(target), lfirst_int(lc) - 1);

			for (int i = 0; i < src->natts; i++)
			{
				const char *t = target_column_of(m, src->cols[i].name);

				if (t != NULL && strcmp(t, NameStr(att->attname)) == 0)
					cols = list_append_unique_int(cols, i);
			}
		}
	}
	if (m->tenant_strategy != NULL && m->tenant_column != NULL)
	{
		/* rows of two tenants are never one target row (tenant_conflict) */
		int			i = source_column(src, m->tenant_column);

		if (i >= 0)
			cols = list_append_unique_int(cols, i);
	}

	/* every column names each key once: a key named n times is held */
	foreach(lc, cols)
	{
		const char *in = src->cols[lfirst_int(lc)].unique_in;
		char	   *save = NULL;

		if (in == NULL)
			continue;
		for (char *tok = strtok_r(pstrdup(in), ",", &save); tok != NULL;
			 tok = strtok_r(NULL, ",", &save))
			tokens = lappend(tokens, tok);
	}
	foreach(lc, tokens)
	{
		const char *colon = strchr(lfirst(lc), ':');
		int			needed = colon != NULL ? atoi(colon + 1) : 0;
		int			named = 0;
		ListCell   *tc;

		foreach(tc, tokens)
			named += strcmp(lfirst(tc), lfirst(lc)) == 0;
		if (needed > 0 && named == needed)
			return true;
	}

	initStringInfo(&names);
	foreach(lc, cols)
		ash_append_name_list(&names, src->cols[lfirst_int(lc)].name);
	return fail(out, "source_key_not_unique",
				psprintf("table %s: the source keeps no unique key among the columns the target tells its rows apart by (%s); two source rows would be one target row",
						 qname, names.data));
}

/* Is a column of src written to target column tname? */
static bool
fed(const AshMapping *m, const AshSourceTable *src, const char *tname)
{
	for (int i = 0; i < src->natts; i++)
	{
		const char *t = target_column_of(m, src->cols[i].name);

		if (t != NULL && strcmp(t, tname) == 0)
			return true;
	}
	return false;
}

/* Append the sequences attrdef's expression draws from that owner may not use. */
static void
append_denied_sequences(StringInfo buf, Oid attrdef, Oid owner)
{
	Relation	dep = table_open(DependRelationId, AccessShareLock);
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tup;

	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(AttrDefaultRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(attrdef));
	scan = systable_beginscan(dep, DependDependerIndexId, true, NULL, 2, key);
	while (HeapTupleIsValid(tup = systable_getnext(scan)))
	{
		Form_pg_depend d = (Form_pg_depend) GETSTRUCT(tup);

		if (d->refclassid != RelationRelationId || get_rel_relkind(d->refobjid) != RELKIND_SEQUENCE)
			continue;
		/* nextval() takes USAGE or UPDATE */
		if (pg_class_aclmask(d->refobjid, owner, ACL_USAGE | ACL_UPDATE, ACLMASK_ANY) != 0)
			continue;
		appendStringInfo(buf, " (%s)",
						 quote_qualified_identifier(get_namespace_name(get_rel_namespace(d->refobjid)),
													get_rel_name(d->refobjid)));
	}
	systable_endscan(scan);
	table_close(dep, AccessShareLock);
}

char *
ash_coverage_denied_defaults(const AshMapping *m, const AshSourceTable *src, Oid owner)
{
	Relation	target = ash_open_target(m->target_relid, AccessShareLock, true);
	TupleDesc	desc;
	StringInfoData out;

	if (target == NULL)
		return NULL;			/* destination_table_missing, judged elsewhere */
	desc = RelationGetDescr(target);
	initStringInfo(&out);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		StringInfoData seqs;
		Oid			attrdef;

		if (att->attisdropped || att->attgenerated || !att->atthasdef ||
			fed(m, src, NameStr(att->attname)))
			continue;
		attrdef = GetAttrDefaultOid(RelationGetRelid(target), att->attnum);
		if (!OidIsValid(attrdef))
			continue;
		initStringInfo(&seqs);
		append_denied_sequences(&seqs, attrdef, owner);
		if (seqs.len > 0)
			appendStringInfo(&out, "%s%s%s", out.len > 0 ? ", " : "",
							 quote_identifier(NameStr(att->attname)), seqs.data);
		pfree(seqs.data);
	}
	relation_close(target, AccessShareLock);
	return out.len > 0 ? out.data : NULL;
}

char *
ash_coverage_unfed_required(const AshMapping *m, const AshSourceTable *src)
{
	Relation	target;
	TupleDesc	desc;
	StringInfoData out;
	const char *tenant;

	/* history and event targets: their structural columns are ours */
	if ((m->history_strategy != NULL && strcmp(m->history_strategy, "scd2") == 0) ||
		m->append_log)
		return NULL;
	target = ash_open_target(m->target_relid, AccessShareLock, true);
	if (target == NULL)
		return NULL;			/* destination_table_missing, judged elsewhere */
	/* a BEFORE trigger may fill the column: not judged */
	if (target->trigdesc != NULL && target->trigdesc->trig_insert_before_row)
	{
		relation_close(target, AccessShareLock);
		return NULL;
	}
	tenant = m->tenant_column != NULL ? target_column_of(m, m->tenant_column) : NULL;
	desc = RelationGetDescr(target);
	initStringInfo(&out);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		const char *name = NameStr(att->attname);

		if (att->attisdropped || !att->attnotnull || att->atthasdef || att->attgenerated ||
			att->attidentity || fed(m, src, name) ||
			(tenant != NULL && strcmp(name, tenant) == 0) ||
			strcmp(name, ASH_PROVENANCE_FINGERPRINT_COLUMN) == 0 ||
			strcmp(name, ASH_PROVENANCE_SEEN_COLUMN) == 0)
			continue;
		appendStringInfo(&out, "%s%s", out.len > 0 ? ", " : "", quote_identifier(name));
	}
	relation_close(target, AccessShareLock);
	return out.len > 0 ? out.data : NULL;
}

bool
ash_coverage_judge_table(const AshMapping *m, const List *business_key,
						 const AshSourceTable *src, AshCoverageVerdict *out)
{
	bool		ignore_drops = m->on_schema_change != NULL &&
		strcmp(m->on_schema_change, "ignore") == 0;
	char	   *qname = qualified(src->nspname, src->relname);
	Relation	target;
	TupleDesc	desc;
	StringInfoData unmapped;
	StringInfoData missing;
	StringInfoData badtype;
	StringInfoData badkey;
	StringInfoData rewritten;
	StringInfoData zoned;
	StringInfoData reshaped;
	List	   *seen = NIL;
	List	   *keys;
	ListCell   *lc;
	bool		ok;

	memset(out, 0, sizeof(*out));
	target = ash_open_target(m->target_relid, AccessShareLock, true);
	if (target == NULL)
		return fail(out, "destination_table_missing", psprintf("mapping of %s", qname));
	desc = RelationGetDescr(target);

	initStringInfo(&unmapped);
	initStringInfo(&missing);
	initStringInfo(&badtype);
	initStringInfo(&badkey);
	initStringInfo(&rewritten);
	initStringInfo(&zoned);
	initStringInfo(&reshaped);
	keys = key_attnums(m, business_key, target);

	/* 1 and 3: every sent column lands on a live target column of a fitting type */
	for (int i = 0; i < src->natts; i++)
	{
		const AshSourceColumn *sc = &src->cols[i];
		const char *tname = target_column_of(m, sc->name);
		Form_pg_attribute att;

		if (tname == NULL)
			continue;			/* skipped */
		att = target_attribute(desc, tname);
		if (att == NULL || att->attgenerated)
		{
			ash_append_name_list(&unmapped, sc->name);
			continue;
		}
		if (name_in(m->encrypted, sc->name))
			continue;			/* written as ciphertext */
		if (!ash_coverage_types_compatible(sc->type_oid, sc->type_name, att->atttypid))
		{
			ash_append_name_list(&badtype, sc->name);
			append_types(&badtype, sc, att);
		}
		else if (list_member_int(keys, att->attnum) &&
				 !key_type_keeps_keys_apart(sc, att->atttypid))
		{
			ash_append_name_list(&badkey, sc->name);
			append_types(&badkey, sc, att);
		}
		else if (reshapes(sc, att))
		{
			ash_append_name_list(&reshaped, sc->name);
			appendStringInfo(&reshaped, " (%s)", sc->type_name ? sc->type_name : "?");
		}
		else
		{
			Rewrite		r = rewrites(sc, att);
			StringInfo	list = r == ROUNDS ? &rewritten : r == ZONED ? &zoned : NULL;

			if (list != NULL)
			{
				ash_append_name_list(list, sc->name);
				append_types(list, sc, att);
			}
		}
	}

	/* 2: declared source columns the source does not send */
#define DECLARED(name, tolerated) \
	do { \
		if (source_column(src, (name)) < 0 && !((tolerated) && ignore_drops)) \
			append_name_once(&missing, &seen, (name)); \
	} while (0)
	foreach(lc, m->renames)
		DECLARED(((AshColumnRename *) lfirst(lc))->source, true);
	foreach(lc, m->skip)
		DECLARED((char *) lfirst(lc), true);
	foreach(lc, m->sensitive)
		DECLARED((char *) lfirst(lc), true);
	foreach(lc, m->encrypted)
		DECLARED((char *) lfirst(lc), true);
	if (m->tenant_column != NULL)
		DECLARED(m->tenant_column, false);
	foreach(lc, (List *) business_key)
		DECLARED((char *) lfirst(lc), false);
#undef DECLARED

	if (unmapped.len > 0)
		ok = fail(out, "source_column_unmapped",
				  psprintf("table %s columns: %s", qname, unmapped.data));
	else if (missing.len > 0)
		ok = fail(out, "source_column_missing",
				  psprintf("table %s columns: %s", qname, missing.data));
	else if (badtype.len > 0)
		ok = fail(out, "source_type_invalid",
				  psprintf("table %s columns: %s", qname, badtype.data));
	else if (badkey.len > 0)
		ok = fail(out, "source_type_invalid",
				  psprintf("table %s key columns whose target type could make two source keys one row: %s",
						   qname, badkey.data));
	else if (reshaped.len > 0)
		ok = fail(out, "source_type_invalid",
				  psprintf("table %s columns whose composite type has other fields at the destination: %s",
						   qname, reshaped.data));
	else if (rewritten.len > 0 || zoned.len > 0)
	{
		StringInfoData what;

		initStringInfo(&what);
		if (rewritten.len > 0)
			appendStringInfo(&what, "columns whose target type would round or pad their values: %s",
							 rewritten.data);
		if (zoned.len > 0)
			appendStringInfo(&what, "%scolumns whose target type would read their values in the destination's time zone: %s",
							 rewritten.len > 0 ? "; " : "", zoned.data);
		ok = fail(out, "source_type_invalid", psprintf("table %s %s", qname, what.data));
	}
	else
		ok = judge_identity(m, business_key, src, target, qname, out) &&
			judge_source_key(m, business_key, src, target, qname, out);

	relation_close(target, AccessShareLock);
	return ok;
}

/* ---------------------------------------------------------------------
 * The table set.
 * ---------------------------------------------------------------------
 */

bool
ash_coverage_is_mapped(const List *mappings, const char *nsp, const char *rel)
{
	ListCell   *lc;

	foreach(lc, (List *) mappings)
	{
		AshMapping *m = lfirst(lc);

		if (strcmp(m->source_schema, nsp) == 0 && strcmp(m->source_table, rel) == 0)
			return true;
	}
	return false;
}

static bool
is_ignored(const List *ignored, const char *nsp, const char *rel)
{
	ListCell   *lc;

	foreach(lc, (List *) ignored)
	{
		List	   *parts = lfirst(lc);

		if (strcmp(linitial(parts), nsp) == 0 && strcmp(lsecond(parts), rel) == 0)
			return true;
	}
	return false;
}

static bool
in_table_set(const List *table_set, const char *nsp, const char *rel)
{
	ListCell   *lc;

	foreach(lc, (List *) table_set)
	{
		AshSourceName *t = lfirst(lc);

		if (strcmp(t->nspname, nsp) == 0 && strcmp(t->relname, rel) == 0)
			return true;
	}
	return false;
}

static void
append_qualified(StringInfo buf, const char *nsp, const char *rel)
{
	if (buf->len > 0)
		appendStringInfoString(buf, ", ");
	appendStringInfoString(buf, qualified(nsp, rel));
}

static AshCoverageVerdict *
warning(const char *reason, char *context)
{
	AshCoverageVerdict *w = palloc0(sizeof(AshCoverageVerdict));

	w->reason = reason;
	w->warning = true;
	w->context = context;
	return w;
}

bool
ash_coverage_judge_table_set(const List *mappings, const List *ignored,
							 const List *table_set, AshCoverageVerdict *fail_out,
							 List **warnings)
{
	StringInfoData unmapped;
	StringInfoData collides;
	StringInfoData never;
	StringInfoData unpublished;
	ListCell   *lc;

	memset(fail_out, 0, sizeof(*fail_out));
	initStringInfo(&unmapped);
	initStringInfo(&collides);
	initStringInfo(&never);
	initStringInfo(&unpublished);

	foreach(lc, (List *) table_set)
	{
		AshSourceName *t = lfirst(lc);

		if (!ash_coverage_is_mapped(mappings, t->nspname, t->relname) &&
			!is_ignored(ignored, t->nspname, t->relname))
			append_qualified(&unmapped, t->nspname, t->relname);
	}
	foreach(lc, (List *) ignored)
	{
		List	   *parts = lfirst(lc);
		const char *nsp = linitial(parts);
		const char *rel = lsecond(parts);

		if (ash_coverage_is_mapped(mappings, nsp, rel))
			append_qualified(&collides, nsp, rel);
		else if (!in_table_set(table_set, nsp, rel))
			append_qualified(&never, nsp, rel);
	}
	foreach(lc, (List *) mappings)
	{
		AshMapping *m = lfirst(lc);

		if (!in_table_set(table_set, m->source_schema, m->source_table))
			append_qualified(&unpublished, m->source_schema, m->source_table);
	}

	if (never.len > 0)
		*warnings = lappend(*warnings,
							warning("ignore_never_matches",
									psprintf("ignored sources not in the table set: %s", never.data)));
	if (unpublished.len > 0)
		*warnings = lappend(*warnings,
							warning("mapping_never_matches",
									psprintf("mapped sources not in the table set: %s", unpublished.data)));

	if (unmapped.len > 0)
		return fail(fail_out, "source_table_unmapped",
					psprintf("tables neither mapped nor ignored: %s", unmapped.data));
	if (collides.len > 0)
		return fail(fail_out, "ignore_collides_with_mapping",
					psprintf("ignored sources that are mapped: %s", collides.data));
	return true;
}

/* ---------------------------------------------------------------------
 * The publication contract.
 * ---------------------------------------------------------------------
 */

static void
append_sep(StringInfo buf, const char *sep, const char *text)
{
	if (buf->len > 0)
		appendStringInfoString(buf, sep);
	appendStringInfoString(buf, text);
}

#define append_problem(buf, text) append_sep((buf), "; ", (text))

bool
ash_coverage_judge_publication(const List *mappings, const AshPublicationFacts *pub,
							   const List *tables, AshCoverageVerdict *out)
{
	StringInfoData problems;
	StringInfoData actions;
	StringInfoData filtered;
	StringInfoData partitioned;
	bool		any_mapped = false;
	ListCell   *lc;

	memset(out, 0, sizeof(*out));
	if (!pub->known)
		return true;

	initStringInfo(&problems);
	initStringInfo(&actions);
	initStringInfo(&filtered);
	initStringInfo(&partitioned);

	foreach(lc, (List *) tables)
	{
		const AshSourceTable *t = lfirst(lc);

		if (!ash_coverage_is_mapped(mappings, t->nspname, t->relname))
			continue;			/* an ignored table may be filtered at will */
		any_mapped = true;
		if (t->row_filter)
			append_qualified(&filtered, t->nspname, t->relname);
		if (t->truncate_unqueued != NULL)
			append_problem(&problems, t->truncate_unqueued);
		if (t->withheld != NULL)
			append_problem(&problems,
						   psprintf("the column list of %s withholds columns: %s (publish every column; exclude columns with the mapping's skip)",
									qualified(t->nspname, t->relname), t->withheld));
		if (pub->via_root && t->relkind == RELKIND_PARTITIONED_TABLE)
			append_qualified(&partitioned, t->nspname, t->relname);
	}
	if (!any_mapped)
		return true;			/* nothing mapped could diverge */

	/* every mapped table needs every action: no on_truncate mode ignores one */
	if (!pub->insert)
		append_sep(&actions, ", ", "insert");
	if (!pub->update)
		append_sep(&actions, ", ", "update");
	if (!pub->delete)
		append_sep(&actions, ", ", "delete");
	if (!pub->truncate)
		append_sep(&actions, ", ", "truncate");
	if (actions.len > 0)
	{
		StringInfoData all;

		initStringInfo(&all);
		appendStringInfo(&all, "the publication does not publish %s: the mirror would silently miss those changes%s",
						 actions.data,
						 pub->truncate ? "" : " (every on_truncate mode needs to see a truncate)");
		if (problems.len > 0)
			appendStringInfo(&all, "; %s", problems.data);
		resetStringInfo(&problems);
		appendStringInfoString(&problems, all.data);
	}
	if (filtered.len > 0)
		append_problem(&problems,
					   psprintf("row filter on %s: rows outside it would silently never reach the mirror",
								filtered.data));
	if (partitioned.len > 0)
		append_problem(&problems,
					   psprintf("publish_via_partition_root with partitioned %s: a truncate of one partition would not be published",
								partitioned.data));
	if (problems.len > 0)
		return fail(out, "publication_contract_incompatible", problems.data);
	return true;
}

/* ---------------------------------------------------------------------
 * Adapter.
 * ---------------------------------------------------------------------
 */

AshMapping *
ash_coverage_mapping_from_spec(const AshMappingSpec *spec)
{
	AshMapping *m = palloc0(sizeof(AshMapping));
	ListCell   *lc;

	m->resource_id = spec->resource_id;
	m->target_relid = spec->target;
	m->source_schema = spec->source_schema;
	m->source_table = spec->source_table;
	foreach(lc, spec->column_map)
	{
		AshColumnPair *p = lfirst(lc);
		AshColumnRename *r = palloc(sizeof(AshColumnRename));

		r->source = p->source;
		r->target = p->target;
		m->renames = lappend(m->renames, r);
	}
	m->skip = list_copy(spec->skip);
	m->sensitive = list_copy(spec->sensitive);
	m->encrypted = list_copy(spec->encrypted);
	m->tenant_column = spec->tenant_column;
	m->tenant_function = spec->tenant_function;
	m->tenant_function_sig = spec->tenant_function_sig;
	m->tenant_strategy = (char *) ash_tenant_strategy_name(spec->tenant_strategy);
	m->tenant_schema_format = spec->tenant_schema_format;
	m->on_truncate = (char *) ash_on_truncate_name(spec->on_truncate);
	m->on_schema_change = (char *) ash_on_schema_change_name(spec->on_schema_change);
	m->upsert_identity = spec->upsert_identity;
	m->history_strategy = (char *) ash_history_strategy_name(spec->history_strategy);
	m->append_log = spec->append_log;
	m->snapshot_provenance = spec->snapshot_provenance;
	return m;
}
