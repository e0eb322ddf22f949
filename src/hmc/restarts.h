/* restarts.h: HMC warmup's chain restarts (restarts.c). A stuck or strayed chain takes the whole
 * state of a healthy chain drawn for it, keyed by the seed and its id, so any rank count restarts
 * the same chains from the same donors. Collective. */
#ifndef DSAMPLER_HMC_RESTARTS_H
#define DSAMPLER_HMC_RESTARTS_H

#include "adapt.h"
#include "hmc_chains.h"
#include "run_context.h"

/* Warmup iterations between two checks for chains in minor modes (also made before each metric
 * window's end and at warmup's end). */
enum { MINOR_MODE_CHECK_EVERY = 25 };

/* After warmup: chains that never moved over its tail restart from healthy chains' states. */
int restart_stuck_chains(run_ctx_t *run, hmc_chains_t *chains, adapt_t *adapt);
/* Whether this run follows the chains' lp for minor modes (--stuck restart, enough chains). */
int minor_modes_followed(const run_ctx_t *run, const adapt_t *adapt);
/* The check after warmup iteration `iteration`: chains whose mean lp sits far below the others'
 * (lp_outliers.h) restart; the lp moments then start again. */
int restart_minor_modes(run_ctx_t *run, hmc_chains_t *chains, adapt_t *adapt, int64_t iteration);

#endif
