/*-------------------------------------------------------------------------
 *
 * keyring.h
 *	  Versioned key families read from ash_replicant.keyring_file.
 *
 * NOTES
 *	  See keyring.c for the file format and the checks.  Key bytes never
 *	  leave this module except through an AshKey, and must never be logged,
 *	  printed or stored in a catalog.
 *
 *	  Lifetime: an AshKey pointer stays valid until the next call of
 *	  ash_keyring_load() (which may re-read the file and wipe the old keys).
 *	  The lookups never reload by themselves (they only load once, lazily,
 *	  when nothing was loaded yet), so a caller may hold several keys at
 *	  once.  Call ash_keyring_load() where no key is held: at the start of a
 *	  SQL function, at the start of each pipeline transaction.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_KEYRING_H
#define ASH_KEYRING_H

/* The key families (docs/keys.md). */
#define ASH_KEYS_COLUMN_ENCRYPTION		"column_encryption"
#define ASH_KEYS_MESSAGE_DIGEST			"message_digest"
#define ASH_KEYS_HORIZON_PROVENANCE		"horizon_provenance"
#define ASH_KEYS_SNAPSHOT_PROVENANCE	"snapshot_provenance"

#define ASH_KEY_FAMILY_COUNT	4

/* Minimum key length of every family; column_encryption is exactly 32. */
#define ASH_KEY_MIN_BYTES		16
#define ASH_KEY_AES256_BYTES	32

typedef struct AshKey
{
	const char *family;			/* one of the ASH_KEYS_* strings */
	int32		version;		/* positive */
	int			len;			/* bytes */
	const uint8 *bytes;			/* in the keyring's own memory context */
} AshKey;

/* Family names in a fixed order (for reporting). */
extern const char *const ash_key_families[ASH_KEY_FAMILY_COUNT];

/*
 * (Re)load the keyring if the GUC or the file (inode, size, mtime, ctime,
 * mode, owner) changed since the last successful load; otherwise a single
 * stat().  An empty GUC means "no keyring": every family is absent.  Any
 * problem refuses the whole file, wipes the previously loaded keys (fail
 * closed) and raises keyring_invalid (a halt in a background worker).
 */
extern void ash_keyring_load(void);

/*
 * ash_keyring_load() at most once a second: for work that encrypts within
 * one long transaction (a table's copy), so that a rotated, shrunk or
 * refused file counts from then on, not only at the next transaction.
 */
extern void ash_keyring_recheck(void);

/* Wipe every loaded key (zeroed, then freed); the next lookup reloads. */
extern void ash_keyring_reset(void);

/*
 * A module that keeps a copy of key material of its own (crypto.c keeps a
 * keyed cipher context) registers a hook that wipes it: ash_keyring_reset()
 * calls every hook before it wipes the keys, so no copy outlives the
 * keyring.  Registering the same hook again is a no-op.
 */
typedef void (*AshKeyringResetHook) (void);
extern void ash_keyring_on_reset(AshKeyringResetHook hook);

/* The highest version of the family, or NULL when it has no key. */
extern const AshKey *ash_keyring_active(const char *family);

/* The given version of the family, or NULL when absent. */
extern const AshKey *ash_keyring_get(const char *family, int version);

/* Whether the family has at least one key. */
extern bool ash_keyring_has_family(const char *family);

/*
 * Versions of the family in ascending order (palloc'd in the current
 * context); returns their count, 0 when the family is absent.
 */
extern int	ash_keyring_versions(const char *family, int32 **versions);

/*
 * Whether this process is one of the extension's background workers (where
 * keyring and crypto refusals are raised as pipeline halts).
 */

#endif							/* ASH_KEYRING_H */
