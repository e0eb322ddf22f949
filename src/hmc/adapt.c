/* adapt.c: warmup adaptation (see adapt.h); the formulas follow Stan's stepsize_adaptation,
 * windowed_adaptation and diag_e adaptation. */
#include "adapt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dense_metric.h"
#include "exactsum.h"
#include "metric_dense.h"
#include "moments.h"
#include "status.h"

/* Scalars in the checkpoint's "adapt_scalars" global, in its order. */
enum { SC_DA_COUNTER = 0, SC_WINDOW_COUNTER, SC_WINDOW_SIZE, SC_NEXT_WINDOW, SC_WINDOW_SAMPLES, SC_SEARCHES,
       SC_TAIL_SAMPLES, SC_SEARCH_START, SC_STEP_REF, SC_CHEES_LOG_T, SC_CHEES_SQ, SC_CHEES_AVG_LOG_T,
       SC_CHEES_COUNT, SC_POOLED_DA, SC_COUNT = SC_POOLED_DA + DUAL_FIELDS };
/* That order, and the dual-averaging fields (dual_average.h) the per-chain "adapt_dual" rows and
 * SC_POOLED_DA hold, are part of the checkpoint format: a checkpoint of another layout must not
 * be read as this one. A change of either needs a new CKPT_FORMAT_VERSION (io/ckpt.h), with its
 * layout stated here. */
#if CKPT_FORMAT_VERSION == 5 || CKPT_FORMAT_VERSION == 6 /* 6 changed only how strings are stored */
_Static_assert(SC_DA_COUNTER == 0 && SC_WINDOW_COUNTER == 1 && SC_WINDOW_SIZE == 2 && SC_NEXT_WINDOW == 3 &&
                   SC_WINDOW_SAMPLES == 4 && SC_SEARCHES == 5 && SC_TAIL_SAMPLES == 6 && SC_SEARCH_START == 7 &&
                   SC_STEP_REF == 8 && SC_CHEES_LOG_T == 9 && SC_CHEES_SQ == 10 && SC_CHEES_AVG_LOG_T == 11 &&
                   SC_CHEES_COUNT == 12 && SC_POOLED_DA == 13 && SC_COUNT == 17,
               "adapt_scalars: a new layout needs a new CKPT_FORMAT_VERSION");
_Static_assert(DUAL_MU == 0 && DUAL_S_BAR == 1 && DUAL_X_BAR == 2 && DUAL_LOG_EPS == 3 && DUAL_FIELDS == 4,
               "dual-averaging state: a new layout needs a new CKPT_FORMAT_VERSION");
#else
#error "adapt.c: state the adapt_scalars layout of this CKPT_FORMAT_VERSION"
#endif
/* Pooled adaptation searches every chain's step again every POOLED_SEARCH_EVERY iterations
 * before the tail of warmup (as well as at each new metric). */
enum { ADAPT_MAX_ARRAYS = 7, POOLED_SEARCH_EVERY = 25 };
/* The checkpoint's global "adapt_dense": [DENSE_IN_USE] 1 when the last window chose the dense
 * metric, [DENSE_CONDITION] its correlation's condition number (NaN: not computed),
 * [DENSE_DROPPED] the iteration after which auto dropped the dense metric (0: it did not) and
 * [DENSE_DROP_RATE] that window's divergence rate, then L [dim, dim] from DENSE_FACTOR. */
enum { DENSE_IN_USE = 0, DENSE_CONDITION = 1, DENSE_DROPPED = 2, DENSE_DROP_RATE = 3, DENSE_FACTOR = 4 };
/* --metric auto drops the dense metric for the rest of warmup when, in its second half, a window
 * run with it diverged on more than this fraction of all transitions: a posterior whose curvature
 * varies (a funnel's, a Gaussian process's hyperparameters) has no one dense metric that fits it,
 * and the diagonal serves it better. */
#define ADAPT_DENSE_DROP_DIVERGENT 0.005
/* The checkpoint's global "adapt_accept": [ACC_TARGET] the acceptance rate dual averaging aims
 * at now, [ACC_WINDOW_DIVERGENT] and [ACC_WINDOW_ITERATIONS] the current window's divergent
 * transitions (all chains) and iterations, [ACC_RAISES] how often auto raised the target,
 * [ACC_RAISED_AT] the iteration after which it last did and [ACC_RAISE_RATE] that window's
 * divergence rate. */
enum { ACC_TARGET = 0, ACC_WINDOW_DIVERGENT, ACC_WINDOW_ITERATIONS, ACC_RAISES, ACC_RAISED_AT, ACC_RAISE_RATE,
       ACC_COUNT };
_Static_assert(ACC_COUNT == 6 && DENSE_FACTOR == 4, "adapt_accept, adapt_dense: a new layout needs a new CKPT_FORMAT_VERSION");

struct adapt {
  adapt_settings_t s;
  comm_ctx_t *comm;
  backend_t *backend;
  int64_t init_buffer, term_buffer, base_window; /* the window schedule */
  double scalars[SC_COUNT];     /* pooled: the one dual-averaging state is SC_POOLED_DA.. */
  double accept[ACC_COUNT];     /* the target acceptance and the windows' divergences */
  /* Backend arrays: per-chain dual averaging [rows, DUAL_FIELDS], the window's running
   * moments [rows, dim]. */
  double *dual;
  float *window_mean, *window_m2;
  float *grad_mean, *grad_m2;   /* fisher: the window's running moments of the gradient [rows, dim] */
  adapt_array_t arrays[ADAPT_MAX_ARRAYS];
  int n_arrays;
  float *metric_row;            /* pooled: [dim] */
  /* The dense metric: whether the windows keep each chain's running covariance, window_cov
   * [rows, dim (dim + 1) / 2] (backend); the factor (backend [2, dim, dim]: L, L^T) and its host
   * state. */
  int track_cov;
  /* The chains the windows keep (adapt.h's ADAPT_WINDOW_CHAINS): in all, and this rank's, which
   * are its first window_rows. */
  int64_t window_chains, window_rows;
  float *window_cov, *factor, *factor_inv, *factor_row;
  double *dense;                /* [DENSE_FACTOR + dim dim] */
  double *inverse;              /* [dim dim]: L^-1, made from dense's L */
  int factor_sent;              /* factor holds dense's L (after a resume: not yet) */
  /* Per-chain adaptation with --metric dense: each chain's L in double, [rows, dim dim] (the
   * host mirror of the checkpoint array "adapt_chain_factor"; the factor and factor_inv
   * backend arrays are then [rows, 2 dim dim] and [rows, dim dim]). */
  int per_chain_dense;
  double *chain_factor;
  void *chain_factor_copy;
  float *chees_center, *chees;  /* ChEES: [dim] and [rows] on the backend, remade each iteration */
  double *center_host;          /* [dim] */
  float *center_row;            /* [dim]: center_host in float, for the backend */
  int center_sent;              /* chees_center holds center_host (after a resume: not yet) */
};

static dual_average_step_t dual_settings(const adapt_t *a) {
  dual_average_step_t step;
  memset(&step, 0, sizeof step);
  step.target_accept = a->accept[ACC_TARGET];
  step.gamma = 0.05;
  step.kappa = 0.75;
  step.t0 = 10.0;
  return step;
}

/* A backend array and its host mirror, registered for checkpoints. */
static int add_array(adapt_t *a, const char *name, ckpt_dtype_t dtype, int64_t width, void **backend_copy) {
  const size_t element = dtype == CKPT_FLOAT64 ? sizeof(double) : sizeof(float);
  const size_t bytes = (size_t)(a->s.rows * width) * element;
  adapt_array_t *array = &a->arrays[a->n_arrays];
  DS_TRY(a->backend->alloc(a->backend, backend_copy, bytes));
  array->backend_copy = *backend_copy;
  array->bytes = bytes;
  array->array = (ckpt_array_t){name, dtype, width, malloc(bytes + element)};
  a->n_arrays++;
  if (!array->array.local) return DS_FAIL_ALLOC("adaptation state (host copy)", bytes);
  return DS_OK;
}

/* DSAMPLER_FISHER_FIRST=1 (opt-in, adapt.h): the Fisher fit for the first window only. */
static int fisher_first(void) {
  const char *v = getenv("DSAMPLER_FISHER_FIRST");
  return v && v[0] == '1';
}

int adapt_create(adapt_t **out, comm_ctx_t *comm, backend_t *backend, const adapt_settings_t *settings) {
  *out = NULL;
  adapt_t *a = calloc(1, sizeof *a);
  if (!a) return DS_FAIL_ALLOC("adaptation", sizeof *a);
  a->s = *settings;
  a->comm = comm;
  a->backend = backend;
  const int64_t rows = settings->rows, dim = settings->dim, warmup = settings->warmup;
  a->window_chains = settings->chains_total;
  a->window_rows = rows;
  if (settings->mode == ADAPT_POOLED && settings->chains_total > ADAPT_WINDOW_CHAINS) {
    a->window_chains = ADAPT_WINDOW_CHAINS;
    const int64_t mine = ADAPT_WINDOW_CHAINS - settings->chain_begin;
    a->window_rows = mine < 0 ? 0 : mine > rows ? rows : mine;
  }
  /* Stan's windows: 75 / 25 / 50, or 15 / 75 / 10 % when the warmup is too short for them,
   * none below 20 iterations. */
  a->init_buffer = 75;
  a->term_buffer = 50;
  a->base_window = 25;
  if (warmup < 20) {
    a->s.diag_metric = 0;
  } else if (a->init_buffer + a->base_window + a->term_buffer > warmup) {
    a->init_buffer = (int64_t)(0.15 * (double)warmup);
    a->term_buffer = (int64_t)(0.1 * (double)warmup);
    a->base_window = warmup - (a->init_buffer + a->term_buffer);
  }
  a->accept[ACC_TARGET] = settings->target_accept > 0.0 ? settings->target_accept : ADAPT_ACCEPT_AUTO_START;
  a->scalars[SC_WINDOW_SIZE] = (double)a->base_window;
  a->scalars[SC_NEXT_WINDOW] = (double)(a->init_buffer + a->base_window - 1);
  a->scalars[SC_SEARCH_START] = settings->initial_step;
  a->scalars[SC_STEP_REF] = settings->initial_step;
  /* ChEES starts from one leapfrog step's length (as BlackJAX's chees_adaptation). */
  a->scalars[SC_CHEES_LOG_T] = log(settings->initial_step);
  a->scalars[SC_CHEES_AVG_LOG_T] = a->scalars[SC_CHEES_LOG_T];
  *out = a;
  /* Pooled adaptation keeps both states: each chain's own until the tail of warmup, then one. */
  dual_restart(a->scalars + SC_POOLED_DA, settings->initial_step);
  int status = add_array(a, "adapt_dual", CKPT_FLOAT64, DUAL_FIELDS, (void **)&a->dual);
  /* Every chain starts from the same state: fill the host copy and send it. */
  double *host = a->arrays[0].array.local;
  for (int64_t r = 0; status == DS_OK && r < rows; ++r) dual_restart(host + r * DUAL_FIELDS, settings->initial_step);
  if (status == DS_OK) status = backend->upload(backend, a->dual, host, a->arrays[0].bytes);
  /* The window's moments serve the metric's windows and, after the last, the tail of warmup,
   * where they show which chains never move (adapt_tail_m2). */
  if (status == DS_OK) {
    status = add_array(a, "adapt_window_mean", CKPT_FLOAT32, dim, (void **)&a->window_mean);
    if (status == DS_OK) status = add_array(a, "adapt_window_m2", CKPT_FLOAT32, dim, (void **)&a->window_m2);
    if (status == DS_OK) status = backend->fill(backend, a->window_mean, 0.0f, rows * dim);
    if (status == DS_OK) status = backend->fill(backend, a->window_m2, 0.0f, rows * dim);
    if (status == DS_OK && (settings->fisher || fisher_first()) && settings->mode == ADAPT_POOLED && a->s.diag_metric) {
      status = add_array(a, "adapt_window_grad_mean", CKPT_FLOAT32, dim, (void **)&a->grad_mean);
      if (status == DS_OK) status = add_array(a, "adapt_window_grad_m2", CKPT_FLOAT32, dim, (void **)&a->grad_m2);
      if (status == DS_OK) status = backend->fill(backend, a->grad_mean, 0.0f, rows * dim);
      if (status == DS_OK) status = backend->fill(backend, a->grad_m2, 0.0f, rows * dim);
    }
    a->metric_row = malloc((size_t)dim * sizeof *a->metric_row);
    if (status == DS_OK && !a->metric_row) status = DS_FAIL_ALLOC("the metric", (size_t)dim * sizeof(float));
  }
  /* The dense metric: forced, or auto within its limits (adapt.h). */
  const int64_t triangle = dense_triangle(dim);
  const int pooled_windows = settings->mode == ADAPT_POOLED && a->s.diag_metric;
  a->per_chain_dense = settings->mode == ADAPT_PER_CHAIN && a->s.diag_metric && settings->metric == ADAPT_METRIC_DENSE;
  a->track_cov = a->per_chain_dense ||
                 (pooled_windows && (settings->metric == ADAPT_METRIC_DENSE ||
                                     (settings->metric == ADAPT_METRIC_AUTO && dim <= ADAPT_DENSE_AUTO_DIM &&
                                      settings->chains_total <= ADAPT_DENSE_AUTO_FLOATS / triangle)));
  /* The factors the backend reads: one, or one a chain. */
  const int64_t factors = a->per_chain_dense ? (rows > 0 ? rows : 1) : 1;
  if (status == DS_OK && a->track_cov) {
    status = add_array(a, "adapt_window_cov", CKPT_FLOAT32, triangle, (void **)&a->window_cov);
    if (status == DS_OK) status = backend->fill(backend, a->window_cov, 0.0f, rows * triangle);
    if (status == DS_OK && a->per_chain_dense) {
      status = add_array(a, "adapt_chain_factor", CKPT_FLOAT64, dim * dim, &a->chain_factor_copy);
      a->chain_factor = a->arrays[a->n_arrays - 1].array.local;
    }
    if (status == DS_OK)
      status = backend->alloc(backend, (void **)&a->factor, (size_t)(factors * 2 * dim * dim) * sizeof(float));
    if (status == DS_OK)
      status = backend->alloc(backend, (void **)&a->factor_inv, (size_t)(factors * dim * dim) * sizeof(float));
    a->dense = calloc((size_t)(DENSE_FACTOR + dim * dim), sizeof *a->dense);
    a->factor_row = malloc((size_t)(factors * 2 * dim * dim) * sizeof *a->factor_row);
    a->inverse = malloc((size_t)(dim * dim) * sizeof *a->inverse);
    if (status == DS_OK && !(a->dense && a->factor_row && a->inverse))
      status = DS_FAIL_ALLOC("the dense metric", (size_t)(dim * dim) * sizeof(double));
    if (a->dense) a->dense[DENSE_CONDITION] = NAN;
  }
  if (status == DS_OK && settings->chees) {
    status = backend->alloc(backend, (void **)&a->chees_center, (size_t)dim * sizeof(float));
    if (status == DS_OK) status = backend->alloc(backend, (void **)&a->chees, (size_t)(2 * (rows > 0 ? rows : 1)) * sizeof(float));
    a->center_host = calloc((size_t)dim, sizeof *a->center_host);
    a->center_row = malloc((size_t)dim * sizeof *a->center_row);
    if (status == DS_OK && !(a->center_host && a->center_row)) status = DS_FAIL_ALLOC("the ChEES centre", (size_t)dim * sizeof(double));
  }
  if (status != DS_OK) {
    adapt_free(a);
    *out = NULL;
  }
  return status;
}

void adapt_free(adapt_t *a) {
  if (!a) return;
  for (int i = 0; i < a->n_arrays; ++i) {
    a->backend->release(a->backend, a->arrays[i].backend_copy);
    free(a->arrays[i].array.local);
  }
  free(a->metric_row);
  if (a->factor) a->backend->release(a->backend, a->factor);
  if (a->factor_inv) a->backend->release(a->backend, a->factor_inv);
  free(a->factor_row);
  free(a->inverse);
  free(a->dense);
  if (a->chees_center) a->backend->release(a->backend, a->chees_center);
  if (a->chees) a->backend->release(a->backend, a->chees);
  free(a->center_host);
  free(a->center_row);
  free(a);
}

/* Stan's windowed_adaptation: is `counter` inside a window, at a window's end; the next end. */
static int in_window(const adapt_t *a, int64_t counter) {
  return counter >= a->init_buffer && counter < a->s.warmup - a->term_buffer && counter != a->s.warmup;
}

static int window_ends(const adapt_t *a, int64_t counter) {
  return counter == (int64_t)a->scalars[SC_NEXT_WINDOW] && counter != a->s.warmup;
}

/* Pooled adaptation caps the doubling: a window of w iterations holds w C draws of C chains, so
 * past POOLED_WINDOW_DRAWS draws (and at least POOLED_WINDOW_MIN iterations) a longer window
 * adds precision the metric does not need, and delays the metric of chains still converging: the
 * windows then stay at that size, the last one taking the remainder (up to twice the size). */
enum { POOLED_WINDOW_DRAWS = 6400, POOLED_WINDOW_MIN = 100 };

static int64_t window_cap(const adapt_t *a) {
  if (a->s.mode != ADAPT_POOLED) return INT64_MAX;
  const int64_t iterations = (POOLED_WINDOW_DRAWS + a->window_chains - 1) / a->window_chains;
  return iterations > POOLED_WINDOW_MIN ? iterations : POOLED_WINDOW_MIN;
}

static void next_window(adapt_t *a) {
  const int64_t last = a->s.warmup - a->term_buffer - 1;
  int64_t next = (int64_t)a->scalars[SC_NEXT_WINDOW], size = (int64_t)a->scalars[SC_WINDOW_SIZE];
  const int64_t counter = (int64_t)a->scalars[SC_WINDOW_COUNTER];
  if (next == last) return;
  size *= 2;
  const int capped = size >= window_cap(a);
  if (capped) size = window_cap(a);
  next = counter + size;
  /* Stan's rule: a window the next one's doubling would overrun takes the rest; at the cap, a
   * window whose successor would overrun. */
  if (next != last && next + (capped ? size : 2 * size) >= a->s.warmup - a->term_buffer) next = last;
  a->scalars[SC_WINDOW_SIZE] = (double)size;
  a->scalars[SC_NEXT_WINDOW] = (double)next;
}

/* The tail of warmup: its last term_buffer iterations (all of a short warmup's), after the
 * last window. */
static int in_tail(const adapt_t *a, int64_t iteration) { return iteration >= a->s.warmup - a->term_buffer; }

/* ---- ChEES ------------------------------------------------------------------------------ */

enum { CHEES_HALTON_BITS = 10, CHEES_CENTER_EVERY = 8 };

/* The base-2 Halton (van der Corput) number of i + 1 over 10 bits, in [0, 1). */
static double halton(int64_t i) {
  const int64_t n = i + 1;
  double h = 0.0, weight = 0.5;
  for (int bit = 0; bit < CHEES_HALTON_BITS; ++bit, weight *= 0.5)
    if ((n >> bit) & 1) h += weight;
  return h;
}

int adapt_chees(const adapt_t *a) { return a && a->s.chees; }

int adapt_leapfrog_steps(const adapt_t *a, int64_t iteration, int64_t warmup, int fixed) {
  if (!adapt_chees(a)) return fixed;
  const double length = iteration < warmup ? exp(a->scalars[SC_CHEES_LOG_T]) : exp(a->scalars[SC_CHEES_AVG_LOG_T]);
  const double steps = ceil(halton(iteration) * length / a->scalars[SC_STEP_REF]);
  if (!(steps >= 1.0)) return 1;
  return steps > (double)a->s.max_steps ? (int)a->s.max_steps : (int)steps;
}

int adapt_probe_steps(const adapt_t *a, int fixed) {
  if (!adapt_chees(a)) return fixed;
  /* At least two steps: one leapfrog step accepts steps past the integrator's stability limit,
   * where the jittered trajectories of two or more then diverge. */
  const double steps = ceil(exp(a->scalars[SC_CHEES_LOG_T]) / a->scalars[SC_SEARCH_START]);
  if (!(steps >= 2.0)) return 2;
  return steps > (double)a->s.max_steps ? (int)a->s.max_steps : (int)steps;
}

int adapt_chees_prepare(adapt_t *a, hmc_batch_t *batch, const float *q, int64_t iteration) {
  const int64_t dim = a->s.dim;
  batch->chees_center = a->chees_center;
  batch->chees = a->chees;
  /* The centre is remade every CHEES_CENTER_EVERY iterations (an exact pass over every chain's
   * position: at 2^20 chains it would cost more than the iteration), in between the last one. */
  if (iteration % CHEES_CENTER_EVERY != 0 && a->center_sent) return DS_OK;
  /* (A resumed run takes the centre its checkpoint carries.) */
  if (iteration % CHEES_CENTER_EVERY == 0)
    DS_TRY(moments_column_mean(a->comm, a->backend, q, a->window_rows, dim, a->window_chains, a->center_host));
  a->center_sent = 1;
  for (int64_t k = 0; k < dim; ++k) a->center_row[k] = (float)a->center_host[k];
  return comm_agree(a->comm, a->backend->upload(a->backend, a->chees_center, a->center_row, (size_t)dim * sizeof(float)));
}

/* One RMSProp step on log T up the criterion per gradient: ChEES / t, t = L eps the iteration's
 * trajectory time (as fun_mc's chees_per_grad_criterion; plain ChEES has maxima at trajectories
 * far longer than pay for themselves). With the acceptance-weighted means over all chains of
 * D B and D^2 / 4 (backend.h), d/dT (D^2 / 4) / t = h (D B - D^2 / (4 t)) / t, t moving with h T.
 * A new metric restarts the averages. */
static void chees_update(adapt_t *a, int64_t iteration, const hmc_stats_t *stats, int window_end) {
  exact_sum_t slope_sum = stats->chees_slope, value_sum = stats->chees_value, weight_sum = stats->chees_weight;
  const double total_weight = exact_sum_value(&weight_sum);
  double *sc = a->scalars;
  if (total_weight > 0.0) {
    const double slope = exact_sum_value(&slope_sum) / total_weight, value = exact_sum_value(&value_sum) / total_weight;
    const double t = (double)adapt_leapfrog_steps(a, iteration, a->s.warmup, 1) * sc[SC_STEP_REF];
    const double gradient = halton(iteration) * (slope - value / t) / t;
    sc[SC_CHEES_COUNT] += 1.0;
    const double k = sc[SC_CHEES_COUNT];
    sc[SC_CHEES_SQ] = 0.95 * sc[SC_CHEES_SQ] + 0.05 * gradient * gradient;
    const double rate = 0.025 / sqrt(sc[SC_CHEES_SQ] / (1.0 - pow(0.95, k)) + 1e-20);
    double update = rate * gradient;
    if (update > 0.35) update = 0.35;
    if (update < -0.35) update = -0.35;
    if (isfinite(update)) sc[SC_CHEES_LOG_T] += update;
    const double w = pow(k, -0.5);
    sc[SC_CHEES_AVG_LOG_T] = w * sc[SC_CHEES_LOG_T] + (1.0 - w) * sc[SC_CHEES_AVG_LOG_T];
  }
  if (window_end) {
    sc[SC_CHEES_COUNT] = 0.0;
    sc[SC_CHEES_SQ] = 0.0;
  }
}

/* T within [eps, max_steps eps] for the step the next iterations use. */
static void chees_clip(adapt_t *a) {
  double *sc = a->scalars;
  const double low = log(sc[SC_STEP_REF]), high = low + log((double)a->s.max_steps);
  if (sc[SC_CHEES_LOG_T] < low) sc[SC_CHEES_LOG_T] = low;
  if (sc[SC_CHEES_LOG_T] > high) sc[SC_CHEES_LOG_T] = high;
  if (sc[SC_CHEES_AVG_LOG_T] < low) sc[SC_CHEES_AVG_LOG_T] = low;
  if (sc[SC_CHEES_AVG_LOG_T] > high) sc[SC_CHEES_AVG_LOG_T] = high;
}

/* Pooled adaptation gives every chain one step size in the tail of warmup (and so in sampling);
 * before it each chain runs at its own searched step times a pooled factor, so chains still far
 * from the posterior at the start (where a step that suits the others would never move them)
 * find their way in. */
int adapt_steps_pooled(const adapt_t *a, int64_t iteration) { return a->s.mode == ADAPT_POOLED && in_tail(a, iteration); }

void adapt_before_iteration(adapt_t *a, hmc_batch_t *batch) {
  batch->moment_mean = batch->moment_m2 = NULL;
  batch->moment_count = 0;
  if (!a) return;
  if (in_tail(a, (int64_t)batch->iteration)) {
    batch->moment_count = (int64_t)a->scalars[SC_TAIL_SAMPLES] + 1;
    batch->moment_rows = a->s.rows;
  } else if (a->s.diag_metric && in_window(a, (int64_t)a->scalars[SC_WINDOW_COUNTER])) {
    batch->moment_count = (int64_t)a->scalars[SC_WINDOW_SAMPLES] + 1;
    batch->moment_rows = a->window_rows;
  } else {
    return;
  }
  batch->moment_mean = a->window_mean;
  batch->moment_m2 = a->window_m2;
}

const float *adapt_tail_m2(const adapt_t *a, double *samples) {
  *samples = a->scalars[SC_TAIL_SAMPLES];
  return a->window_m2;
}

/* The pooled window: the mean over chains of each chain's own variance in the window. A chain
 * that is stuck (never moved) adds nothing and cannot inflate the metric, as the total variance
 * over chains would (chains far apart at the start, or frozen far out). With fisher (the
 * option's, or DSAMPLER_FISHER_FIRST's first window), the same for the gradients, and the
 * diagonal sqrt(V_x / V_g) (adapt.h). */
static int pooled_metric(adapt_t *a, double n_chain, float *inv_metric, int fisher) {
  backend_t *b = a->backend;
  const int64_t dim = a->s.dim, rows = a->s.rows;
  double *totals = malloc((size_t)(4 * dim) * sizeof *totals);
  if (!totals) return comm_agree(a->comm, DS_FAIL_ALLOC("metric totals", (size_t)(4 * dim) * sizeof(double)));
  double *grand_mean = totals, *within = totals + dim, *between = totals + 2 * dim, *within_grad = totals + 3 * dim;
  int status = moments_pool(a->comm, b, a->window_mean, a->window_m2, a->window_rows, dim, a->window_chains,
                            grand_mean, within, between);
  if (status == DS_OK && a->grad_mean && fisher)
    status = moments_pool(a->comm, b, a->grad_mean, a->grad_m2, a->window_rows, dim, a->window_chains, grand_mean,
                          within_grad, between);
  const double chains = (double)a->window_chains;
  /* Stan's regularisation of a variance from n samples, with the window's samples over all
   * chains as n, applied to the mean within-chain variance sum_c m2_c / (C (n - 1)) (or the
   * Fisher diagonal), toward the geometric mean of those values (dual_variance_scale's). */
  const double n = n_chain * chains;
  for (int64_t k = 0; status == DS_OK && k < dim; ++k) {
    within[k] = n_chain > 1 ? within[k] / (chains * (n_chain - 1.0)) : 1.0;
    if (a->grad_mean && fisher && n_chain > 1) {
      const double v_grad = within_grad[k] / (chains * (n_chain - 1.0));
      if (v_grad > 0.0 && within[k] > 0.0) within[k] = sqrt(within[k] / v_grad);
    }
    a->metric_row[k] = (float)within[k];
  }
  const double scale = dual_variance_scale(a->metric_row, dim, 1.0);
  for (int64_t k = 0; status == DS_OK && k < dim; ++k)
    a->metric_row[k] = dual_regularised_variance(within[k] * (n - 1.0), n, scale);
  free(totals);
  DS_TRY(status);
  DS_TRY(b->upload(b, inv_metric, a->metric_row, (size_t)dim * sizeof(float)));
  DS_TRY(b->fill(b, a->window_mean, 0.0f, rows * dim));
  if (a->grad_mean) {
    DS_TRY(b->fill(b, a->grad_mean, 0.0f, rows * dim));
    DS_TRY(b->fill(b, a->grad_m2, 0.0f, rows * dim));
  }
  return b->fill(b, a->window_m2, 0.0f, rows * dim);
}

/* Stan's dense_e regularisation of a window covariance cov [dim, dim] from n samples, in place,
 * toward the window's typical variance times I (dual_variance_scale of its diagonal; diagonal:
 * [dim] floats of work), n/(n+5) cov + 1e-3 s 5/(n+5) I; then its Cholesky factor into L.
 * Returns dense_cholesky's status. */
static int regularised_factor(double *cov, int64_t dim, double n, float *diagonal, double *L) {
  for (int64_t k = 0; k < dim; ++k) diagonal[k] = (float)cov[k * dim + k];
  const double scale = dual_variance_scale(diagonal, dim, 1.0);
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < dim; ++j)
      cov[i * dim + j] = (n / (n + 5.0)) * cov[i * dim + j] + (i == j ? 1e-3 * scale * (5.0 / (n + 5.0)) : 0.0);
  return dense_cholesky(cov, dim, L);
}

/* The dense metric at a window's end, from the chains' running covariances (n samples each):
 * pooled exactly as the diagonal (the mean of the chains' own covariances), regularised as it
 * (Stan's dense_e shrinkage toward the window's typical variance times I), factored. Auto keeps
 * the diagonal unless the pooled correlation is ill-conditioned. Collective. */
static int pooled_dense_metric(adapt_t *a, double n_chain) {
  backend_t *b = a->backend;
  const int64_t dim = a->s.dim, rows = a->s.rows, triangle = dense_triangle(dim);
  double *sums = malloc((size_t)(triangle + 4 * dim * dim) * sizeof *sums);
  if (!sums) return comm_agree(a->comm, DS_FAIL_ALLOC("the dense metric", (size_t)(4 * dim * dim) * sizeof(double)));
  double *cov = sums + triangle, *L = cov + dim * dim, *work = L + dim * dim;
  int status = moments_column_mean(a->comm, b, a->window_cov, a->window_rows, triangle, 1, sums);
  const double chains = (double)a->window_chains, n = n_chain * chains;
  for (int64_t i = 0; status == DS_OK && i < dim; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const double within = n_chain > 1 ? sums[i * (i + 1) / 2 + j] / (chains * (n_chain - 1.0)) : (i == j);
      cov[i * dim + j] = cov[j * dim + i] = within;
    }
  double condition = NAN;
  if (status == DS_OK && dim <= ADAPT_DENSE_AUTO_DIM) condition = dense_correlation_condition(cov, dim, work);
  int dense = a->s.metric == ADAPT_METRIC_DENSE || (!(condition <= ADAPT_DENSE_CONDITION) && a->dense[DENSE_DROPPED] == 0.0);
  if (status == DS_OK && dense) {
    dense = regularised_factor(cov, dim, n, a->metric_row, L) == 0;
  }
  if (status == DS_OK) {
    a->dense[DENSE_IN_USE] = dense;
    a->dense[DENSE_CONDITION] = condition;
    if (dense) memcpy(a->dense + DENSE_FACTOR, L, (size_t)(dim * dim) * sizeof *L);
    a->factor_sent = 0;
  }
  free(sums);
  DS_TRY(status);
  return comm_agree(a->comm, b->fill(b, a->window_cov, 0.0f, rows * triangle));
}

/* Each chain's float L, L^T and L^-1 from its double L, into out [2 dim dim] and inverse [dim dim]. */
static void factor_floats(const double *L, int64_t dim, double *work, float *out, float *inverse) {
  dense_lower_inverse(L, dim, work);
  for (int64_t e = 0; e < dim * dim; ++e) out[e] = (float)L[e];
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t k = 0; k < dim; ++k) out[dim * dim + i * dim + k] = (float)L[k * dim + i];
  for (int64_t e = 0; e < dim * dim; ++e) inverse[e] = (float)work[e];
}

int adapt_metric_factor(adapt_t *a, const float **factor, const float **factor_inv) {
  *factor = *factor_inv = NULL;
  if (!a || !a->track_cov || a->dense[DENSE_IN_USE] == 0.0) return DS_OK;
  if (!a->factor_sent) {
    /* L, L^T and L^-1 in float, from the double L: the same on every rank. */
    const int64_t dim = a->s.dim, n = a->per_chain_dense ? a->s.rows : 1;
    const size_t square = (size_t)(dim * dim);
    float *inverse = malloc((size_t)n * square * sizeof *inverse);
    if (!inverse) return comm_agree(a->comm, DS_FAIL_ALLOC("the dense metric's inverse", (size_t)n * square * sizeof(float)));
    for (int64_t c = 0; c < n; ++c)
      factor_floats(a->per_chain_dense ? a->chain_factor + (size_t)c * square : a->dense + DENSE_FACTOR, dim,
                    a->inverse, a->factor_row + (size_t)c * 2 * square, inverse + (size_t)c * square);
    int status = a->backend->upload(a->backend, a->factor, a->factor_row, (size_t)n * 2 * square * sizeof(float));
    if (status == DS_OK) status = a->backend->upload(a->backend, a->factor_inv, inverse, (size_t)n * square * sizeof(float));
    free(inverse);
    /* Every rank is here or none (the metric and factor_sent are the same on every rank): the
     * agreement is made only when there was something to fail. */
    DS_TRY(comm_agree(a->comm, status));
    a->factor_sent = 1;
  }
  *factor = a->factor;
  *factor_inv = a->factor_inv;
  return DS_OK;
}

int adapt_factor_per_chain(const adapt_t *a) { return a && a->per_chain_dense; }

void adapt_factors_changed(adapt_t *a) {
  if (a) a->factor_sent = 0;
}

/* Per-chain adaptation's dense metric at a window's end: each chain's own covariance over the
 * window (n samples), regularised as the pooled one but with the chain's own typical variance,
 * factored in double. A chain whose covariance does not factor keeps its diagonal (L =
 * diag(sd)). The running covariances come to the host for it: the one place the host works per
 * chain, at a few window ends, for the chain counts per-chain adaptation serves. */
static int per_chain_dense_metric(adapt_t *a, double n) {
  backend_t *b = a->backend;
  const int64_t dim = a->s.dim, rows = a->s.rows, triangle = dense_triangle(dim);
  const size_t square = (size_t)(dim * dim);
  float *m2 = malloc((size_t)(rows * triangle + dim) * sizeof *m2);
  double *cov = malloc(square * sizeof *cov);
  int status = m2 && cov ? DS_OK : DS_FAIL_ALLOC("the chains' covariances", (size_t)(rows * triangle) * sizeof(float));
  if (status == DS_OK && rows > 0) status = b->download(b, m2, a->window_cov, (size_t)(rows * triangle) * sizeof(float));
  float *diagonal = m2 ? m2 + rows * triangle : NULL;
  for (int64_t c = 0; status == DS_OK && c < rows; ++c) {
    const float *row = m2 + c * triangle;
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const double value = n > 1 ? (double)row[i * (i + 1) / 2 + j] / (n - 1.0) : (i == j);
        cov[i * dim + j] = cov[j * dim + i] = value;
      }
    double *L = a->chain_factor + (size_t)c * square;
    if (regularised_factor(cov, dim, n, diagonal, L) != 0) {
      memset(L, 0, square * sizeof *L);
      for (int64_t k = 0; k < dim; ++k) L[k * dim + k] = sqrt(fmax(cov[k * dim + k], 1e-300));
    }
  }
  free(m2);
  free(cov);
  if (status == DS_OK && rows > 0) status = b->upload(b, a->chain_factor_copy, a->chain_factor, (size_t)rows * square * sizeof(double));
  if (status == DS_OK) {
    a->dense[DENSE_IN_USE] = 1.0;
    a->factor_sent = 0;
    status = b->fill(b, a->window_cov, 0.0f, rows * triangle);
  }
  return comm_agree(a->comm, status);
}

const char *adapt_metric_used(const adapt_t *a, double *condition, int64_t *dropped, double *drop_rate) {
  *condition = a && a->track_cov ? a->dense[DENSE_CONDITION] : NAN;
  *dropped = a && a->track_cov ? (int64_t)a->dense[DENSE_DROPPED] : 0;
  *drop_rate = a && a->track_cov ? a->dense[DENSE_DROP_RATE] : 0.0;
  if (!a || !a->s.diag_metric || a->s.mode == ADAPT_NONE) return "unit";
  if (a->track_cov && a->dense[DENSE_IN_USE] != 0.0) return "dense";
  return "diag";
}

/* --target-accept auto: at a window's end in warmup's second half, a window that diverged on more
 * than ADAPT_ACCEPT_DIVERGENT of its transitions halves 1 - target, and halves it once more for
 * each further factor of 4 in the rate (0.3%: 0.8 -> 0.9; 0.5%: 0.8 -> 0.95), up to
 * ADAPT_ACCEPT_AUTO_MAX. Divergences that persist late in warmup mark curvature the step does
 * not resolve (a Gaussian process's hyperparameters, a funnel's neck); a smaller step there
 * costs gradients but keeps the chains from skipping the region, where a higher target
 * everywhere costs posteriors that never diverge (adapt.h). The rule reads exact totals over all
 * chains, so it is the same on any rank count. */
static void raise_target(adapt_t *a, int64_t iteration, double rate) {
  double *acc = a->accept;
  if (!(rate > ADAPT_ACCEPT_DIVERGENT) || acc[ACC_TARGET] >= ADAPT_ACCEPT_AUTO_MAX) return;
  double miss = 1.0 - acc[ACC_TARGET];
  miss *= 0.5;
  for (double bound = 4.0 * ADAPT_ACCEPT_DIVERGENT; rate > bound; bound *= 4.0) miss *= 0.5;
  acc[ACC_TARGET] = fmin(ADAPT_ACCEPT_AUTO_MAX, 1.0 - miss);
  acc[ACC_RAISES] += 1.0;
  acc[ACC_RAISED_AT] = (double)(iteration + 1);
  acc[ACC_RAISE_RATE] = rate;
}

double adapt_target_accept(const adapt_t *a, int *raises, int64_t *raised_at, double *raise_rate) {
  *raises = a ? (int)a->accept[ACC_RAISES] : 0;
  *raised_at = a ? (int64_t)a->accept[ACC_RAISED_AT] : 0;
  *raise_rate = a ? a->accept[ACC_RAISE_RATE] : 0.0;
  return a ? a->accept[ACC_TARGET] : NAN;
}

int adapt_after_iteration(adapt_t *a, int64_t iteration, const hmc_stats_t *stats, const hmc_batch_t *batch,
                          float *step_nominal, float *inv_metric, int *search) {
  *search = 0;
  if (a->s.mode == ADAPT_NONE) return DS_OK;
  backend_t *b = a->backend;
  const int64_t rows = a->s.rows, dim = a->s.dim;
  const int pooled = a->s.mode == ADAPT_POOLED;

  if (in_tail(a, iteration)) a->scalars[SC_TAIL_SAMPLES] += 1.0;
  /* 1. The metric, in Stan's windows; a new metric restarts the step size's averaging. */
  int window_end = 0;
  if (a->s.diag_metric) {
    const int64_t window_counter = (int64_t)a->scalars[SC_WINDOW_COUNTER];
    /* The first window's draws are taken while the chains may still be climbing in, where a
     * variance is no guide to the posterior's and the Fisher fit still is (adapt.h). */
    const int first_window = window_counter < a->init_buffer + a->base_window;
    if (in_window(a, window_counter)) {
      a->scalars[SC_WINDOW_SAMPLES] += 1.0;
      a->accept[ACC_WINDOW_DIVERGENT] += (double)stats->divergent;
      a->accept[ACC_WINDOW_ITERATIONS] += 1.0;
      if (a->grad_mean && (a->s.fisher || first_window))
        DS_TRY(comm_agree(a->comm, b->running_moments_add(b, batch->grad, a->grad_mean, a->grad_m2,
                                                          a->window_rows * dim, a->scalars[SC_WINDOW_SAMPLES])));
      if (a->track_cov)
        DS_TRY(comm_agree(a->comm, b->covariance_add(b, batch->q, a->window_mean, a->window_cov, a->window_rows, dim,
                                                     a->scalars[SC_WINDOW_SAMPLES])));
    }
    if (window_ends(a, window_counter)) {
      next_window(a);
      const double n = a->scalars[SC_WINDOW_SAMPLES];
      double *acc = a->accept;
      const double rate = acc[ACC_WINDOW_ITERATIONS] > 0.0
                              ? acc[ACC_WINDOW_DIVERGENT] / (acc[ACC_WINDOW_ITERATIONS] * (double)a->s.chains_total)
                              : 0.0;
      acc[ACC_WINDOW_DIVERGENT] = acc[ACC_WINDOW_ITERATIONS] = 0.0;
      const int late = 2 * iteration >= a->s.warmup;
      if (a->s.target_accept == 0.0 && late) raise_target(a, iteration, rate);
      if (pooled && a->track_cov) {
        double *d = a->dense;
        if (a->s.metric == ADAPT_METRIC_AUTO && d[DENSE_IN_USE] != 0.0 && d[DENSE_DROPPED] == 0.0 && late &&
            rate > ADAPT_DENSE_DROP_DIVERGENT) {
          d[DENSE_DROPPED] = (double)(iteration + 1);
          d[DENSE_DROP_RATE] = rate;
        }
        DS_TRY(pooled_dense_metric(a, n));
      }
      if (a->per_chain_dense) DS_TRY(per_chain_dense_metric(a, n));
      if (pooled)
        DS_TRY(pooled_metric(a, n, inv_metric, a->s.fisher || first_window));
      else
        DS_TRY(comm_agree(a->comm, b->moments_to_metric(b, a->window_mean, a->window_m2, rows, dim, n, inv_metric)));
      a->scalars[SC_WINDOW_SAMPLES] = 0.0;
      window_end = 1;
    }
    a->scalars[SC_WINDOW_COUNTER] += 1.0;
  }

  /* 2. The trajectory length (ChEES), from this iteration's terms, at the T this iteration ran. */
  if (a->s.chees) chees_update(a, iteration, stats, window_end);

  /* 3. The step size, from this iteration's acceptance statistics: the latest iterate, or
   * the average once warmup ends. */
  a->scalars[SC_DA_COUNTER] += 1.0;
  dual_average_step_t step = dual_settings(a);
  step.counter = a->scalars[SC_DA_COUNTER];
  step.restart = window_end;
  step.final = iteration + 1 >= a->s.warmup;
  if (window_end) a->scalars[SC_DA_COUNTER] = 0.0;
  /* A new metric, or the switch to one pooled step: a new initial step for every chain. */
  *search = window_end || (iteration + 1 < a->s.warmup && adapt_steps_pooled(a, iteration + 1) &&
                           !adapt_steps_pooled(a, iteration));
  if (a->s.mode == ADAPT_POOLED && !adapt_steps_pooled(a, iteration + 1) && (iteration + 1) % POOLED_SEARCH_EVERY == 0)
    *search = 1;
  if (adapt_steps_pooled(a, iteration)) {
    exact_sum_t total = stats->accept;
    const float next = dual_iterate(a->scalars + SC_POOLED_DA, &step, exact_sum_value(&total) / (double)a->s.chains_total);
    a->scalars[SC_STEP_REF] = (double)next;
    if (a->s.chees) chees_clip(a);
    return b->fill(b, step_nominal, next, rows);
  }
  if (a->s.mode == ADAPT_POOLED) {
    /* Before the tail: each chain's searched step (searched again every POOLED_SEARCH_EVERY
     * iterations) times one factor of at most 1, dual-averaged on the mean acceptance of all
     * chains. Each chain's own dual averaging on its own acceptance, too noisy, tried steps past
     * where trajectories diverge; a factor above 1 took chains whose search ended at the
     * integrator's edge over it. */
    exact_sum_t total = stats->accept;
    dual_average_step_t scale = dual_settings(a);
    scale.scale_only = 1;
    scale.log_scale = fmin(0.0, log((double)dual_iterate(a->scalars + SC_POOLED_DA, &step,
                                                         exact_sum_value(&total) / (double)a->s.chains_total)));
    a->scalars[SC_STEP_REF] = a->scalars[SC_SEARCH_START] * exp(scale.log_scale);
    if (a->s.chees) chees_clip(a);
    return b->dual_average(b, a->dual, NULL, step_nominal, rows, &scale);
  }
  return b->dual_average(b, a->dual, batch->accept_prob, step_nominal, rows, &step);
}

int64_t adapt_next_search(adapt_t *a) {
  const int64_t round = (int64_t)a->scalars[SC_SEARCHES];
  a->scalars[SC_SEARCHES] += 1.0;
  return round;
}

int adapt_initial_metric(adapt_t *a, const float *q, const float *grad, float *inv_metric) {
  const char *init = getenv("DSAMPLER_METRIC_INIT");
  if (a->s.mode != ADAPT_POOLED || !a->s.diag_metric || !init || strcmp(init, "gradient") != 0) return DS_OK;
  const int64_t dim = a->s.dim;
  double *var_q = malloc((size_t)(2 * dim) * sizeof *var_q), *var_g = var_q + dim;
  int status = comm_agree(a->comm, var_q ? DS_OK : DS_FAIL_ALLOC("start totals", (size_t)(16 * dim)));
  if (status == DS_OK)
    status = moments_column_variance(a->comm, a->backend, q, a->s.rows, dim, a->s.chains_total, var_q);
  if (status == DS_OK)
    status = moments_column_variance(a->comm, a->backend, grad, a->s.rows, dim, a->s.chains_total, var_g);
  for (int64_t k = 0; status == DS_OK && k < dim; ++k) {
    const double fit = sqrt(var_q[k] / var_g[k]);
    a->metric_row[k] = isfinite(fit) && fit > 0.0 ? (float)fmin(fmax(fit, 1e-10), 1e10) : 1.0f;
  }
  free(var_q);
  if (status == DS_OK) status = a->backend->upload(a->backend, inv_metric, a->metric_row, (size_t)dim * sizeof(float));
  return comm_agree(a->comm, status);
}

int adapt_restart_steps(adapt_t *a, int64_t iteration, float *step_nominal, float pooled_step) {
  backend_t *b = a->backend;
  /* The switch to one pooled step (the tail of warmup) keeps the trajectory's step count: T
   * scales with the step. Before the tail the reference step (the searched median times the
   * shared factor) is not the step most chains take, and ChEES's T is tuned to it; in the tail
   * every chain takes the reference step. T, carried over unscaled, started the tail far from
   * the tail's optimum (eight schools: log T -0.2 to -0.9 at the switch, 0.45 +- 0.1 where the
   * tail settles), and the tail's 50 iterations of steps of at most ~0.025 in log T left the
   * sampling T short of it. */
  if (a->s.chees && iteration > 0 && adapt_steps_pooled(a, iteration) && !adapt_steps_pooled(a, iteration - 1) &&
      a->scalars[SC_STEP_REF] > 0.0) {
    const double shift = log((double)pooled_step / a->scalars[SC_STEP_REF]);
    a->scalars[SC_CHEES_LOG_T] += shift;
    a->scalars[SC_CHEES_AVG_LOG_T] += shift;
  }
  a->scalars[SC_SEARCH_START] = (double)pooled_step;
  a->scalars[SC_STEP_REF] = (double)pooled_step;
  if (a->s.chees) chees_clip(a);
  if (adapt_steps_pooled(a, iteration)) {
    dual_restart(a->scalars + SC_POOLED_DA, (double)pooled_step);
    return b->fill(b, step_nominal, pooled_step, a->s.rows);
  }
  /* Pooled before the tail: the shared factor on the chains' own steps starts at 1. */
  if (a->s.mode == ADAPT_POOLED) dual_restart(a->scalars + SC_POOLED_DA, 1.0);
  dual_average_step_t step = dual_settings(a);
  step.restart_only = 1;
  return b->dual_average(b, a->dual, NULL, step_nominal, a->s.rows, &step);
}

int adapt_window_ends_next(const adapt_t *a) {
  return a && a->s.mode != ADAPT_NONE && a->s.diag_metric && window_ends(a, (int64_t)a->scalars[SC_WINDOW_COUNTER]);
}

float adapt_search_start(const adapt_t *a) { return (float)a->scalars[SC_SEARCH_START]; }

int adapt_checkpoint_items(adapt_t *a, adapt_array_t *arrays, int *n_arrays, ckpt_global_t *globals, int *n_globals) {
  *n_globals = 0;
  globals[(*n_globals)++] = (ckpt_global_t){"adapt_scalars", SC_COUNT, a->scalars};
  globals[(*n_globals)++] = (ckpt_global_t){"adapt_accept", ACC_COUNT, a->accept};
  if (a->s.chees) globals[(*n_globals)++] = (ckpt_global_t){"adapt_chees_center", a->s.dim, a->center_host};
  if (a->track_cov) globals[(*n_globals)++] = (ckpt_global_t){"adapt_dense", DENSE_FACTOR + a->s.dim * a->s.dim, a->dense};
  for (int i = 0; i < a->n_arrays; ++i) arrays[i] = a->arrays[i];
  *n_arrays = a->n_arrays;
  return DS_OK;
}
