/*-------------------------------------------------------------------------
 *
 * ash_replicant.c
 *	  Module entry point: GUCs, shared memory request, launcher registration.
 *
 * NOTES
 *	  The library must be listed in shared_preload_libraries: the launcher
 *	  is a static background worker and pipeline slots live in shared
 *	  memory.  Loaded any other way (e.g. by CREATE EXTENSION in a server
 *	  that did not preload it) only the SQL functions work, and those that
 *	  need shared memory say so.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"

#include "ash_replicant.h"
#include "errors.h"
#include "launcher.h"
#include "shmem.h"

PG_MODULE_MAGIC;

char	   *ash_database = NULL;
char	   *ash_keyring_file = NULL;
int			ash_naptime_ms = 10000;
int			ash_reconnect_min_ms = 1000;
int			ash_reconnect_max_ms = 60000;
int			ash_max_pipelines = 16;
int			ash_receive_timeout_ms = 60000;
int			ash_connect_timeout_ms = 30000;
int			ash_streaming_retry_ms = 60000;
int			ash_snapshot_workers = 2;
bool		ash_pipelines_stopped = false;

void		_PG_init(void);

void
_PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		return;

	DefineCustomStringVariable("ash_replicant.database",
							   "Database in which the launcher reads pipeline catalogs.",
							   NULL,
							   &ash_database,
							   "postgres",
							   PGC_POSTMASTER,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("ash_replicant.keyring_file",
							   "Path of the key file (families of versioned keys).",
							   "Must be owned by the server user with mode 0600 or stricter.",
							   &ash_keyring_file,
							   "",
							   PGC_SIGHUP,
							   GUC_SUPERUSER_ONLY,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.naptime",
							"Launcher poll interval when nothing wakes it.",
							NULL,
							&ash_naptime_ms,
							10000, 100, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.reconnect_min_delay",
							"Initial back-off before reconnecting after a transient fault.",
							NULL,
							&ash_reconnect_min_ms,
							1000, 10, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.reconnect_max_delay",
							"Cap of the exponential reconnect back-off.",
							NULL,
							&ash_reconnect_max_ms,
							60000, 10, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.streaming_retry_delay",
							"After a streamed transaction fell back to whole delivery, wait this long (doubling up to an hour while it keeps happening) before streaming again.",
							NULL,
							&ash_streaming_retry_ms,
							60000, 100, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.receive_timeout",
							"Reconnect when the source sends nothing for this long (a keepalive is requested at half of it).",
							NULL,
							&ash_receive_timeout_ms,
							60000, 1000, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.connect_timeout",
							"Give up a source connection or command after this long.",
							NULL,
							&ash_connect_timeout_ms,
							30000, 1000, 3600000,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.snapshot_workers",
							"Tables a pipeline's snapshot copies at once (the pipeline worker and helper workers).",
							"Each helper is a background worker of its own (max_worker_processes) with a source connection.",
							&ash_snapshot_workers,
							2, 1, ASH_SNAPSHOT_COPIERS_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("ash_replicant.max_pipelines",
							"Maximum number of concurrently running pipelines (shared memory slots).",
							NULL,
							&ash_max_pipelines,
							16, 1, 1024,
							PGC_POSTMASTER,
							0,
							NULL, NULL, NULL);

	/*
	 * Read by the update scripts only (docs/operations.md, "Upgrading from
	 * 0.4.0"): the operator's word that every pipeline is stopped.  The
	 * scripts also check that no pipeline worker runs.
	 */
	DefineCustomBoolVariable("ash_replicant.pipelines_stopped",
							 "Confirms that every pipeline is stopped, as the 0.4.0 upgrade and the rollbacks require.",
							 "Set it in the session that runs ALTER EXTENSION ash_replicant UPDATE.",
							 &ash_pipelines_stopped,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	MarkGUCPrefixReserved("ash_replicant");

	ash_shmem_request();
	ash_launcher_register();
	ash_errors_install_log_hook();
}

/*
 * Are the installed catalogs those of 0.4.x, whose checkpoints are keyed by
 * slot name only?  Nothing of this library may read them as its own: the
 * launcher supervises nothing, status answers extension_version_mismatch and
 * doctor refuses, until ALTER EXTENSION ash_replicant UPDATE converts them.
 * Judged by the shape of the checkpoint table (syscache only, no SPI); needs
 * a transaction.
 */
bool
ash_catalogs_slot_only(void)
{
	Oid			nsp = get_namespace_oid("ash_replicant", true);
	Oid			rel;

	if (!OidIsValid(nsp))
		return false;
	rel = get_relname_relid("checkpoints", nsp);
	if (!OidIsValid(rel))
		return false;
	return get_attnum(rel, "source_system_id") == InvalidAttrNumber;
}

/*
 * Do the catalogs record the installation each pipeline was started in
 * (1.9.0 and later)?  Syscache only; needs a transaction.
 */
bool
ash_catalogs_bind_installation(void)
{
	Oid			nsp = get_namespace_oid("ash_replicant", true);

	return OidIsValid(nsp) && OidIsValid(get_relname_relid("installation", nsp));
}

/*
 * This installation's id as text (in the current memory context), or NULL
 * when the catalogs predate it.  Needs SPI connected.
 */
char *
ash_installation_id(void)
{
	if (!ash_catalogs_bind_installation())
		return NULL;
	if (SPI_execute("SELECT installation_id::pg_catalog.text FROM ash_replicant.installation",
					true, 2) != SPI_OK_SELECT)
		elog(ERROR, "ash_replicant: reading the installation failed");
	/* one row by its key; none when deleted by hand */
	if (SPI_processed != 1)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("ash_replicant: the installation table holds no row"),
				 errhint("INSERT INTO ash_replicant.installation DEFAULT VALUES, then ash_replicant_start each pipeline that should run.")));
	return SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
}
