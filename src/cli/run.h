/* run.h: the run driver, the one entry point of a run (main and resume call it). */
#ifndef DSAMPLER_RUN_H
#define DSAMPLER_RUN_H

#include "ckpt.h"
#include "comm.h"
#include "config.h"

/* Runs the configured algorithm end to end, or continues it from a checkpoint (resume_path
 * and resume_meta, else NULL). Returns DS_INTERRUPTED after a checkpoint when a stop signal
 * arrived, DS_ERR_CHECKPOINT when the checkpoint proved unusable before anything was written.
 * Collective. */
int run_main(comm_ctx_t *comm, const config_t *cfg, const char *resume_path, const ckpt_meta_t *resume_meta);

#endif
