/* hmc_chains.h: HMC's chains on the backend and what a checkpoint carries of them, shared by the
 * algorithm (hmc.c) and its chain restarts (restarts.c). Private to src/hmc/. */
#ifndef DSAMPLER_HMC_CHAINS_H
#define DSAMPLER_HMC_CHAINS_H

#include <stdint.h>

#include "adapt.h"
#include "backend.h"
#include "ckpt.h"

enum { HMC_MAX_STATE = 16, HMC_FROZEN_NAMED = 8, HMC_TOTALS = 5, HMC_MAX_GLOBALS = 6 };

/* Counts over all chains, kept in doubles: the checkpoint's global "totals" is values[]. */
typedef union hmc_totals {
  struct {
    double divergent_warmup;          /* divergent transitions in warmup */
    double divergent_sampling;        /* divergent transitions in sampling */
    double moment_draws;              /* draws added to the running moments */
    double lp_samples;                /* warmup iterations in the chains' lp moments since the last check */
    double minor_checks;              /* checks for chains in minor modes so far */
  };
  double values[HMC_TOTALS];
} hmc_totals_t;
_Static_assert(sizeof(hmc_totals_t) == HMC_TOTALS * sizeof(double), "hmc_totals_t: the checkpoint's totals");

/* The chains on the backend, and what a checkpoint carries of them. */
typedef struct hmc_chains {
  hmc_batch_t batch;
  float *step_nominal, *inv_metric;   /* the batch's, writable */
  float *moment_mean, *moment_m2;     /* [rows, dim]: over the kept draws of sampling */
  float *moment_mean_host, *moment_m2_host; /* their checkpoint mirrors */
  float *lp_mean, *lp_m2;             /* [rows]: each chain's lp over warmup since the last minor-mode check */
  int8_t *search;                     /* [2 rows, rounded up to 4]: the step search's directions, exponents */
  adapt_array_t state[HMC_MAX_STATE]; /* backend arrays and their host mirrors */
  int n_state, n_owned;               /* all of them; the first n_owned are the chains' own */
  ckpt_global_t globals[HMC_MAX_GLOBALS];
  int n_globals;
  hmc_totals_t totals;
  int64_t frozen;                     /* chains that never moved over their kept draws (all ranks) */
  int64_t frozen_ids[HMC_FROZEN_NAMED]; /* the first of them, -1 past the count */
} hmc_chains_t;

/* The chains' state arrays between the backend and their host mirrors (to_host: download), for
 * a checkpoint or a restart. */
int hmc_chains_sync(hmc_chains_t *chains, backend_t *b, int64_t rows, int to_host);

#endif
