/* adapt.h: HMC warmup adaptation as in Stan: dual averaging of the step size (delta, gamma
 * 0.05, kappa 0.75, t0 10, mu = log(eps) of the step searched, restarted at each metric update) and a windowed
 * diagonal metric (75 / 25 doubling / 50 iterations, 15/75/10 % for short warmups; Stan's
 * shrinkage n/(n+5) var + 1e-3 s 5/(n+5), s the window's typical variance where Stan has 1).
 * Per chain, or pooled over all chains of all ranks.
 *
 * The state lives where the chains do (the backend's memory): each transition adds the
 * chains' positions to per-chain running moments (Welford, hmc_batch_t), and per-chain step
 * sizes and metrics are computed by backend entries. Pooled adaptation combines the chains
 * with exact sums once per iteration (the acceptance) and once per window (the moments), so
 * the result is the same bits on any rank count; its metric is the mean of the chains' own
 * window variances. Before warmup and after each metric update (pooled: also every 25
 * iterations before the tail), hmc.c searches each chain's initial step as Stan's
 * init_stepsize (the pooled step: the median of the chains'). The host does no per-chain work. */
#ifndef DSAMPLER_ADAPT_H
#define DSAMPLER_ADAPT_H

#include <stdint.h>

#include "backend.h"
#include "ckpt.h"
#include "comm.h"

typedef enum { ADAPT_NONE = 0, ADAPT_PER_CHAIN = 1, ADAPT_POOLED = 2 } adapt_mode_t;

typedef struct adapt adapt_t;

/* The metric adapted in the windows (with pooled adaptation): the diagonal, the dense one, or
 * (auto) at each window's end the dense one when the chains' pooled covariance has a correlation
 * matrix of condition number above ADAPT_DENSE_CONDITION, else the diagonal. Auto considers dense
 * for dim <= ADAPT_DENSE_AUTO_DIM and chains x dim (dim + 1) / 2 <= ADAPT_DENSE_AUTO_FLOATS
 * (the running covariances' size): a rule on the run's totals, the same on any rank count. In the
 * second half of warmup auto drops the dense metric for good when a window run with it diverged
 * on more than 0.5% of transitions (adapt.c). */
typedef enum { ADAPT_METRIC_DIAG = 0, ADAPT_METRIC_DENSE = 1, ADAPT_METRIC_AUTO = 2 } adapt_metric_t;
#define ADAPT_DENSE_CONDITION 10.0
#define ADAPT_DENSE_AUTO_DIM 100
#define ADAPT_DENSE_AUTO_FLOATS ((int64_t)1 << 27)

/* --target-accept auto (target_accept 0) starts at ADAPT_ACCEPT_AUTO_START and raises it where
 * divergences persist: at a window's end in warmup's second half, a window whose transitions
 * (all chains) diverged more often than ADAPT_ACCEPT_DIVERGENT halves 1 - target, once more per
 * further factor of 4 in that rate, up to ADAPT_ACCEPT_AUTO_MAX. A given target never changes. */
#define ADAPT_ACCEPT_AUTO_START 0.8
#define ADAPT_ACCEPT_DIVERGENT 0.001
#define ADAPT_ACCEPT_AUTO_MAX 0.95

typedef struct adapt_settings {
  adapt_mode_t mode;
  int diag_metric;        /* adapt the metric (else the step size only) */
  int64_t warmup;
  double target_accept;   /* delta; 0: auto (below) */
  double initial_step;
  int64_t rows, dim, chains_total;
  int chees;              /* adapt the trajectory length (ChEES) */
  int64_t max_steps;      /* ChEES: at most this many leapfrog steps an iteration */
  adapt_metric_t metric;  /* with diag_metric and pooled adaptation */
  int fisher;             /* pooled: the diagonal metric sqrt(Var x / Var grad) (ADAPT_FISHER) */
  int64_t chain_begin;    /* the global index of this rank's first chain */
} adapt_settings_t;

/* Pooled adaptation keeps its windows' running moments (and the dense metric's covariances, the
 * Fisher fit's gradient moments, ChEES's centre) over the chains of global index below
 * ADAPT_WINDOW_CHAINS only. A window of 25 or more iterations of that many chains holds 400000 or
 * more draws, far more than a metric needs, and what an iteration costs no longer grows with the
 * chain count past it: at 2^20 chains and d = 64 every chain's Welford update cost about 0.16 ms
 * an iteration (a quarter of the sampling iteration), the dense metric's covariances several ms.
 * A rule on global indices: the same chains, so the same bits, on any rank count. The tail's
 * moments (its stuck-chain check) and per-chain adaptation keep every chain. */
#define ADAPT_WINDOW_CHAINS ((int64_t)1 << 14)

/* The Fisher-divergence diagonal (nutpie's; Seyboldt, Carlson and Carpenter 2026): with fisher
 * set, the windows also keep each chain's running moments of the gradient at its kept draws, and
 * at a window's end the diagonal inverse metric is sqrt(V_x / V_g) per coordinate, V_x and V_g the
 * mean over all chains of their own window variances of the position and of the gradient (pooled
 * exactly, as the variance fit's), then regularised as Stan's (the window's samples over all
 * chains as n). For a Gaussian it is the variance; where the curvature varies it minimises the
 * Fisher divergence between a Gaussian of that diagonal and the draws. A coordinate whose V_g is
 * 0 (the chains never moved there) takes V_x.
 * DSAMPLER_FISHER_FIRST=1 (opt-in, measured on posteriordb, not yet a default): the Fisher fit for
 * the first window only, the variance fit after it. The first window's draws are taken while the
 * chains may still be climbing in: their variance is the climb's, while for a Gaussian the Fisher
 * fit is exact from any spread of points. The dense metric's windows are unchanged. */

/* A backend array that checkpoints carry: its host mirror is what ckpt reads and writes. */
typedef struct adapt_array {
  ckpt_array_t array;     /* array.local: the host mirror */
  void *backend_copy;
  size_t bytes;
} adapt_array_t;

int adapt_create(adapt_t **out, comm_ctx_t *comm, backend_t *backend, const adapt_settings_t *settings);
void adapt_free(adapt_t *a);

/* Before warmup iteration `iteration`: asks the transition for the window's moments when
 * this iteration's state belongs to the current window. */
void adapt_before_iteration(adapt_t *a, hmc_batch_t *batch);

/* After warmup iteration `iteration` (0-based), with stats summed over all chains of all ranks:
 * writes the next iteration's step sizes into step_nominal [rows] and, at a window's end, the
 * inverse metric (inv_metric: [dim] when shared, else [rows, dim]). *search = 1 when a new
 * initial step is to be searched before the next iteration (a new metric; pooled: every 25
 * iterations before the tail and the switch to one step for all chains). After the last warmup iteration the step sizes are the final,
 * averaged ones. Collective. */
int adapt_after_iteration(adapt_t *a, int64_t iteration, const hmc_stats_t *stats, const hmc_batch_t *batch,
                          float *step_nominal, float *inv_metric, int *search);

/* The dense metric's factor L and its inverse (backend memory, backend.h's metric_factor and
 * metric_factor_inv) when the last window chose it, else NULL (the diagonal inv_metric serves).
 * Uploads them first after a new metric or a resume. Collective (an agreement) only when it
 * uploads, which every rank does at the same call. */
int adapt_metric_factor(adapt_t *a, const float **factor, const float **factor_inv);
/* Whether those factors are one a chain (per-chain adaptation with --metric dense: backend.h's
 * factor_per_chain), and the note that the chains' states were moved (a restart from healthy
 * chains): the next adapt_metric_factor sends every chain's factor again. */
int adapt_factor_per_chain(const adapt_t *a);
void adapt_factors_changed(adapt_t *a);
/* The metric the last window chose ("dense", "diag"; "unit" before any), the condition number
 * of its correlation matrix (NaN when not computed), and where auto dropped the dense metric for
 * its divergences (the iteration after which, 0 when it did not; that window's divergence rate). */
const char *adapt_metric_used(const adapt_t *a, double *condition, int64_t *dropped, double *drop_rate);

/* The target acceptance dual averaging aims at now; how often auto raised it, the iteration after
 * which it last did (0: never) and that window's divergence rate. */
double adapt_target_accept(const adapt_t *a, int *raises, int64_t *raised_at, double *raise_rate);

/* Whether the next adapt_after_iteration ends a metric window. */
int adapt_window_ends_next(const adapt_t *a);

/* Stan's initial step-size search runs (in hmc.c) before warmup and whenever *search asks;
 * each run is numbered for its random draws. Returns this run's number. */
int64_t adapt_next_search(adapt_t *a);
/* Where every chain's search starts: the last search's median (at first, --step-size). */
float adapt_search_start(const adapt_t *a);
/* Whether warmup iteration `iteration` gives all chains one step (pooled adaptation, from the
 * tail of warmup on) or each chain its own (per-chain adaptation: dual averaging of its own;
 * pooled before the tail: its searched step times one dual-averaged factor <= 1). */
int adapt_steps_pooled(const adapt_t *a, int64_t iteration);
/* Before warmup (a fresh run; DSAMPLER_METRIC_INIT=gradient, pooled adaptation of a metric): the
 * first diagonal from the starts, the Fisher fit over the chains' starts: inverse metric
 * sqrt(Var_c q_k / Var_c g_k), the variances over all chains of all ranks of the starts q and
 * their gradients g ([rows, dim] on the backend), clamped to [1e-10, 1e10], 1 where that is not
 * finite (every chain from one start). For a Gaussian g = -Sigma^-1 (q - mu), so a diagonal
 * Sigma comes out exactly whatever the starts' spread and mu. Elsewhere the unit metric stays.
 * Collective. */
int adapt_initial_metric(adapt_t *a, const float *q, const float *grad, float *inv_metric);
/* After a search before iteration `iteration`: the dual averaging restarts from the steps found,
 * each chain's own (step_nominal, [rows] on the backend) or, when steps are pooled, the median
 * pooled_step for all (written to step_nominal). pooled_step is the next search's start. */
int adapt_restart_steps(adapt_t *a, int64_t iteration, float *step_nominal, float pooled_step);
/* The chains' moments over the tail of warmup (its last iterations, after the last metric
 * window), [rows, dim] on the backend, and how many samples they hold: m2 = 0 in every
 * coordinate marks a chain that never moved there. */
const float *adapt_tail_m2(const adapt_t *a, double *samples);

/* ChEES trajectory lengths (Hoffman, Radul and Sountsov, AISTATS 2021), pooled over all chains:
 * iteration i runs L = ceil(h_i T / eps) leapfrog steps (1 <= L <= max_steps), where h_i in
 * (0, 1) is the base-2 Halton number of i + 1 (10 bits), T the trajectory length and eps the
 * step all chains share (before the tail of pooled warmup: the last search's median). In warmup
 * T follows the acceptance-weighted mean of the chains' ChEES terms (backend.h) times h_i, by
 * RMSProp on log T (rate 0.025, updates clipped to +-0.35, as TensorFlow Probability's
 * GradientBasedTrajectoryLengthAdaptation), with T in [eps, max_steps eps]; sampling uses the
 * iterate average of log T (weights k^-1/2, restarted with each metric). Without ChEES,
 * `fixed` steps every iteration. */
int adapt_leapfrog_steps(const adapt_t *a, int64_t iteration, int64_t warmup, int fixed);
/* Before warmup iteration `iteration` with ChEES: the batch's chees_center and chees buffer;
 * every 8th iteration (0, 8, ...) the centre is remade, the mean of all chains' positions q
 * ([rows, dim], backend). Collective. */
int adapt_chees_prepare(adapt_t *a, hmc_batch_t *batch, const float *q, int64_t iteration);
int adapt_chees(const adapt_t *a);
/* The leapfrog steps of the step-size search's probes: ChEES's T over the search's start, at
 * least 2, or `fixed`. */
int adapt_probe_steps(const adapt_t *a, int fixed);

/* The adaptation's state for a checkpoint: per-chain arrays (with backend copies) and globals
 * (host). Pointers stay valid until adapt_free. */
int adapt_checkpoint_items(adapt_t *a, adapt_array_t *arrays, int *n_arrays, ckpt_global_t *globals, int *n_globals);

#endif
