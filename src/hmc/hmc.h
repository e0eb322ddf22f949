/* hmc.h: the HMC algorithm's entry point, called by the run driver (run.c). */
#ifndef DSAMPLER_HMC_H
#define DSAMPLER_HMC_H

#include "run_context.h"

/* Runs HMC end to end on the run's backend and target, or continues it from the run's
 * checkpoint. Collective. */
int hmc_run(run_ctx_t *run);

#endif
