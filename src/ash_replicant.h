/*-------------------------------------------------------------------------
 *
 * ash_replicant.h
 *	  Configuration variables shared by the modules.
 *
 *-------------------------------------------------------------------------
 */
#ifndef ASH_REPLICANT_H
#define ASH_REPLICANT_H

#define ASH_EXTENSION_VERSION "1.10.0"

extern char *ash_database;
extern char *ash_keyring_file;
extern int	ash_naptime_ms;
extern int	ash_reconnect_min_ms;
extern int	ash_reconnect_max_ms;
extern int	ash_max_pipelines;
extern int	ash_receive_timeout_ms;
extern int	ash_connect_timeout_ms;
extern int	ash_streaming_retry_ms;
extern int	ash_snapshot_workers;
extern bool ash_pipelines_stopped;

/* The installed catalogs are 0.4.x's (checkpoints keyed by slot only). */
extern bool ash_catalogs_slot_only(void);

/*
 * Pipelines run only in the installation they were started in (1.9.0+,
 * docs/reasons.md#destination_restored): do the catalogs say which, and
 * this installation's id (text; NULL before 1.9.0, needs SPI).
 */
extern bool ash_catalogs_bind_installation(void);
extern char *ash_installation_id(void);

#endif							/* ASH_REPLICANT_H */
