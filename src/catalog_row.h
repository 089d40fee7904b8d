/*-------------------------------------------------------------------------
 *
 * catalog_row.h
 *	  Updating one row of the extension's own catalogs in place, as
 *	  PostgreSQL updates its system catalogs: for the writes every batch
 *	  makes (checkpoint, per-table statistics).
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CATALOG_ROW_H
#define ASH_CATALOG_ROW_H

#include "access/htup.h"
#include "storage/buf.h"
#include "utils/relcache.h"

#define ASH_CATALOG_ROW_KEYS 3
#define ASH_CATALOG_ROW_COLS 8

/*
 * A catalog of schema ash_replicant, a unique index on text key columns,
 * and the columns a caller reads or writes, by name.  Static in the caller;
 * catalog_row.c fills in where they are, once per session and again after
 * a relcache invalidation of the table.
 */
typedef struct AshCatalogRowSpec
{
	const char *table;
	int			nkeys;
	const char *keys[ASH_CATALOG_ROW_KEYS];
	int			ncols;
	const char *cols[ASH_CATALOG_ROW_COLS];

	/* catalog_row.c's */
	bool		valid;
	Oid			relid;
	Oid			indexoid;		/* InvalidOid: no in-place update */
	AttrNumber	keyatt[ASH_CATALOG_ROW_KEYS];
	AttrNumber	colatt[ASH_CATALOG_ROW_COLS];
	Buffer		recent_buffer;	/* held a hinted block last time: a guess */
} AshCatalogRowSpec;

/* A row found, deformed for reading and changing. */
typedef struct AshCatalogRow
{
	AshCatalogRowSpec *spec;
	ItemPointer hint;			/* the caller's, or NULL */
	Relation	rel;
	HeapTuple	old;
	Buffer		pin;			/* old's page, pinned until the update */
	Datum	   *values;
	bool	   *nulls;
} AshCatalogRow;

/*
 * Find the row whose keys equal keys[] (NULL: IS NULL) under a fresh
 * snapshot.  False, holding nothing, when there is no such row: the caller
 * writes through SQL instead.
 *
 * hint (may be NULL): where the caller last wrote this row, kept by the
 * caller across transactions and set by ash_catalog_row_update; tried
 * before the index, and only taken for a visible row with these keys.
 */
extern bool ash_catalog_row_find(AshCatalogRowSpec *spec, const char *const *keys,
								 ItemPointer hint, AshCatalogRow *row);

/* Column i of spec->cols, as read (or as set). */
extern Datum ash_catalog_row_get(AshCatalogRow *row, int col, bool *isnull);
extern void ash_catalog_row_set(AshCatalogRow *row, int col, Datum value, bool isnull);

/*
 * Store column col compressed if it is plain and at least min_size bytes;
 * *failed_size: the caller's memory of a size that did not compress.
 */
extern void ash_catalog_row_compress(AshCatalogRow *row, int col, Size min_size,
									 Size *failed_size);

/*
 * Write the changed row (the next command sees it) and release it.  False,
 * with nothing written, when the version read was updated or deleted
 * concurrently (waited for, then committed): the caller writes through SQL
 * instead.  Or leave the row as is with ash_catalog_row_release.
 */
extern bool ash_catalog_row_update(AshCatalogRow *row);
extern void ash_catalog_row_release(AshCatalogRow *row);

#endif							/* ASH_CATALOG_ROW_H */
