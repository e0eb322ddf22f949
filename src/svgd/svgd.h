/* svgd.h: the SVGD algorithm's entry point, called by the run driver (run.c). */
#ifndef DSAMPLER_SVGD_H
#define DSAMPLER_SVGD_H

#include "run_context.h"

/* Runs SVGD end to end on the run's backend and target, or continues it from the run's
 * checkpoint. Collective. */
int svgd_run(run_ctx_t *run);

#endif
