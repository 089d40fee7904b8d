/*-------------------------------------------------------------------------
 *
 * change.h
 *	  The change record: what a decoder produces from protocol bytes and
 *	  what apply consumes.
 *
 * NOTES
 *	  A decoder turns one logical-decoding message (the payload of one
 *	  XLogData frame) into exactly one AshChange.  All pointers inside an
 *	  AshChange are palloc'd in the memory context that was current when the
 *	  decoder was called, so the caller frees a whole message by resetting
 *	  that context.  Nothing here refers to destination catalogs.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_CHANGE_H
#define ASH_CHANGE_H

#include "access/xlogdefs.h"
#include "datatype/timestamp.h"

typedef enum AshChangeKind
{
	ASH_CHANGE_BEGIN,
	ASH_CHANGE_COMMIT,
	ASH_CHANGE_ORIGIN,
	ASH_CHANGE_RELATION,
	ASH_CHANGE_TYPE,
	ASH_CHANGE_INSERT,
	ASH_CHANGE_UPDATE,
	ASH_CHANGE_DELETE,
	ASH_CHANGE_TRUNCATE,
	ASH_CHANGE_MESSAGE,
	ASH_CHANGE_STREAM_START,
	ASH_CHANGE_STREAM_STOP,
	ASH_CHANGE_STREAM_COMMIT,
	ASH_CHANGE_STREAM_ABORT
} AshChangeKind;

/* Per-column status inside a tuple, as on the wire (pgoutput letters). */
#define ASH_COL_NULL		'n'
#define ASH_COL_UNCHANGED	'u'		/* unchanged TOAST value: not sent */
#define ASH_COL_TEXT		't'
#define ASH_COL_BINARY		'b'

typedef struct AshColumnValue
{
	char		status;			/* ASH_COL_* */
	int			len;			/* length of data for TEXT/BINARY, else 0 */
	char	   *data;			/* NUL-terminated copy (TEXT/BINARY), else NULL */
} AshColumnValue;

typedef struct AshTuple
{
	int			natts;
	AshColumnValue *cols;		/* natts entries */
} AshTuple;

typedef struct AshRelColumn
{
	bool		is_key;			/* part of the source replica identity */
	char	   *name;
	uint32		type_oid;		/* source type OID (source catalog!) */
	int32		typmod;
	bool		toastable;		/* wal2json: may be left out as unchanged
								 * TOAST (described from the catalogs) */
} AshRelColumn;

typedef struct AshRelation
{
	uint32		relid;			/* source relation OID */
	char	   *nspname;
	char	   *relname;
	char		replident;		/* 'd', 'n', 'f', 'i' */
	int			natts;
	AshRelColumn *cols;
} AshRelation;

typedef struct AshChange
{
	AshChangeKind kind;

	/*
	 * Transaction id of a streamed (in-progress) change: set for changes
	 * between STREAM_START and STREAM_STOP (protocol >= 2), else
	 * InvalidTransactionId.
	 */
	TransactionId xid;

	union
	{
		struct
		{
			XLogRecPtr	final_lsn;	/* commit LSN of the transaction */
			TimestampTz commit_time;
			TransactionId xid;
			/* wal2json: the replication origin, 0 if local (see ORIGIN) */
			uint16		origin_id;
		}			begin;

		struct
		{
			uint8		flags;
			XLogRecPtr	commit_lsn;
			XLogRecPtr	end_lsn;
			TimestampTz commit_time;
		}			commit;

		struct
		{
			XLogRecPtr	origin_lsn;
			char	   *name;
		}			origin;

		AshRelation relation;

		struct
		{
			uint32		type_oid;
			char	   *nspname;
			char	   *typname;
		}			type;

		struct
		{
			uint32		relid;
			AshTuple	newtup;
		}			insert;

		struct
		{
			uint32		relid;
			char		oldkind;	/* 'K' key only, 'O' full old row, 0 none */
			AshTuple	oldtup;		/* valid when oldkind != 0 */
			AshTuple	newtup;
		}			update;

		struct
		{
			uint32		relid;
			char		oldkind;	/* 'K' or 'O' */
			AshTuple	oldtup;
		}			delete;

		struct
		{
			int			nrelids;
			uint32	   *relids;
			bool		cascade;
			bool		restart_seqs;
		}			truncate;

		struct
		{
			bool		transactional;
			XLogRecPtr	lsn;
			char	   *prefix;
			int			content_len;
			char	   *content;	/* content_len bytes (plus a NUL) */
		}			message;

		struct
		{
			TransactionId xid;
			bool		first_segment;
		}			stream_start;

		struct
		{
			TransactionId xid;
			uint8		flags;
			XLogRecPtr	commit_lsn;
			XLogRecPtr	end_lsn;
			TimestampTz commit_time;
		}			stream_commit;

		struct
		{
			TransactionId xid;
			TransactionId subxid;
		}			stream_abort;
	}			u;
} AshChange;

extern const char *ash_change_kind_name(AshChangeKind kind);

#endif							/* ASH_CHANGE_H */
