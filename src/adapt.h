/* adapt.h: HMC warmup adaptation as in Stan: dual averaging of the step size (delta, gamma
 * 0.05, kappa 0.75, t0 10, mu = log(10 eps), restarted at each metric update) and a windowed
 * diagonal metric (75 / 25 doubling / 50 iterations, 15/75/10 % for short warmups; Welford
 * variance with Stan's shrinkage n/(n+5) var + 1e-3 * 5/(n+5)). Per chain, or pooled over all
 * chains of all ranks; pooled totals over chains are exact sums, so the result is the same bits
 * on any rank count. Runs on the host for either backend. */
#ifndef DSAMPLER_ADAPT_H
#define DSAMPLER_ADAPT_H

#include <stdint.h>

#include "ckpt.h"
#include "comm.h"

typedef enum { ADAPT_NONE = 0, ADAPT_PER_CHAIN = 1, ADAPT_POOLED = 2 } adapt_mode_t;

typedef struct adapt adapt_t;

typedef struct adapt_settings {
  adapt_mode_t mode;
  int diag_metric;        /* adapt the diagonal metric (else the step size only) */
  int64_t warmup;
  double target_accept;   /* delta */
  double initial_step;
  int64_t rows, dim, chains_total;
} adapt_settings_t;

int adapt_create(adapt_t **out, comm_ctx_t *comm, const adapt_settings_t *settings);
void adapt_free(adapt_t *a);

/* After warmup iteration `iteration` (0-based): learns from the chains' acceptance statistics
 * accept [rows] and positions q [rows, dim] (host), and writes the step sizes [rows] and, when
 * *metric_changed, the inverse metric [rows, dim] for the next iteration; after the last
 * warmup iteration the step sizes are the final, averaged ones. Collective. */
int adapt_after_iteration(adapt_t *a, int64_t iteration, const float *accept, const float *q, float *step_size,
                          float *inv_metric, int *metric_changed);

/* The adaptation's state for a checkpoint: arrays (per-chain rows) and globals, read back in
 * place by ckpt_read. The pointers stay valid until adapt_free. */
int adapt_checkpoint_items(adapt_t *a, ckpt_array_t *arrays, int *n_arrays, ckpt_global_t *globals, int *n_globals);

#endif
