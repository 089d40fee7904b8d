#include "postgres.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "pipeline.h"
#include "shmem.h"

void
ash_pipeline_main(Datum main_arg)
{
	BackgroundWorkerUnblockSignals();
	proc_exit(0);
}
