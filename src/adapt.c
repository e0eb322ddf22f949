/* adapt.c: warmup adaptation (see adapt.h); the formulas follow Stan's stepsize_adaptation,
 * windowed_adaptation and diag_e adaptation. */
#include "adapt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "exactsum.h"
#include "status.h"

enum { DA_MU = 0, DA_S_BAR, DA_X_BAR, DA_LOG_EPS, DA_FIELDS };
/* Scalars in the checkpoint's "adapt_scalars" global. */
enum { SC_DA_COUNTER = 0, SC_WINDOW_COUNTER, SC_WINDOW_SIZE, SC_NEXT_WINDOW, SC_WINDOW_SAMPLES, SC_POOLED_DA,
       SC_COUNT = SC_POOLED_DA + DA_FIELDS };

struct adapt {
  adapt_settings_t s;
  comm_ctx_t *comm;
  double gamma, kappa, t0;
  int64_t init_buffer, term_buffer, base_window; /* the window schedule */
  double scalars[SC_COUNT];
  double *dual;            /* per chain: [rows, DA_FIELDS]; pooled: scalars + SC_POOLED_DA */
  /* The window's estimate, per chain [rows, dim]: Welford's mean and M2 (per-chain mode), or
   * the plain sums of x and x^2 over the window's iterations, in iteration order (pooled mode:
   * combined over chains exactly at the window's end, so any rank split gives the same bits). */
  double *mean, *m2;
  exact_sum_t *sum_x, *sum_x2; /* pooled [dim]: the exact totals at a window's end */
  float *metric_scratch;   /* [dim] */
};

static void dual_restart(double *da, double step) {
  da[DA_MU] = log(10.0 * step);
  da[DA_S_BAR] = 0.0;
  da[DA_X_BAR] = 0.0;
  da[DA_LOG_EPS] = log(step);
}

/* One dual-averaging update with acceptance statistic `stat` at (restarted) count `counter`. */
static void dual_learn(adapt_t *a, double *da, double counter, double stat) {
  stat = stat > 1.0 ? 1.0 : stat;
  double eta = 1.0 / (counter + a->t0);
  da[DA_S_BAR] = (1.0 - eta) * da[DA_S_BAR] + eta * (a->s.target_accept - stat);
  double x = da[DA_MU] - da[DA_S_BAR] * sqrt(counter) / a->gamma;
  double x_eta = pow(counter, -a->kappa);
  da[DA_X_BAR] = (1.0 - x_eta) * da[DA_X_BAR] + x_eta * x;
  da[DA_LOG_EPS] = x;
}

int adapt_create(adapt_t **out, comm_ctx_t *comm, const adapt_settings_t *settings) {
  *out = NULL;
  adapt_t *a = calloc(1, sizeof *a);
  if (!a) return DS_FAIL_ALLOC("adaptation", sizeof *a);
  a->s = *settings;
  a->comm = comm;
  a->gamma = 0.05;
  a->kappa = 0.75;
  a->t0 = 10.0;
  const int64_t rows = settings->rows, dim = settings->dim, warmup = settings->warmup;
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
  a->scalars[SC_WINDOW_SIZE] = (double)a->base_window;
  a->scalars[SC_NEXT_WINDOW] = (double)(a->init_buffer + a->base_window - 1);
  const int pooled = settings->mode == ADAPT_POOLED;
  a->dual = pooled ? a->scalars + SC_POOLED_DA : malloc((size_t)(rows > 0 ? rows : 1) * DA_FIELDS * sizeof(double));
  a->metric_scratch = malloc((size_t)dim * sizeof(float));
  if (!a->dual || !a->metric_scratch) {
    adapt_free(a);
    return DS_FAIL_ALLOC("adaptation state", (size_t)rows * DA_FIELDS * sizeof(double));
  }
  for (int64_t c = 0; c < (pooled ? 1 : rows); ++c) dual_restart(a->dual + c * DA_FIELDS, settings->initial_step);
  if (a->s.diag_metric) {
    a->mean = calloc((size_t)(rows * dim + 1), sizeof(double));
    a->m2 = calloc((size_t)(rows * dim + 1), sizeof(double));
    if (!a->mean || !a->m2) {
      adapt_free(a);
      return DS_FAIL_ALLOC("metric estimates", (size_t)(rows * dim) * 2 * sizeof(double));
    }
  }
  if (a->s.diag_metric && pooled) {
    a->sum_x = calloc((size_t)dim, sizeof(exact_sum_t));
    a->sum_x2 = calloc((size_t)dim, sizeof(exact_sum_t));
    if (!a->sum_x || !a->sum_x2) {
      adapt_free(a);
      return DS_FAIL_ALLOC("metric totals", (size_t)dim * 2 * sizeof(exact_sum_t));
    }
  }
  *out = a;
  return DS_OK;
}

void adapt_free(adapt_t *a) {
  if (!a) return;
  if (a->s.mode != ADAPT_POOLED) free(a->dual);
  free(a->mean);
  free(a->m2);
  free(a->sum_x);
  free(a->sum_x2);
  free(a->metric_scratch);
  free(a);
}

/* Stan's windowed_adaptation: is `counter` inside a window, at a window's end; the next end. */
static int in_window(const adapt_t *a, int64_t counter) {
  return counter >= a->init_buffer && counter < a->s.warmup - a->term_buffer && counter != a->s.warmup;
}

static int window_ends(const adapt_t *a, int64_t counter) {
  return counter == (int64_t)a->scalars[SC_NEXT_WINDOW] && counter != a->s.warmup;
}

static void next_window(adapt_t *a) {
  const int64_t last = a->s.warmup - a->term_buffer - 1;
  int64_t next = (int64_t)a->scalars[SC_NEXT_WINDOW], size = (int64_t)a->scalars[SC_WINDOW_SIZE];
  const int64_t counter = (int64_t)a->scalars[SC_WINDOW_COUNTER];
  if (next == last) return;
  size *= 2;
  next = counter + size;
  if (next != last && next + 2 * size >= a->s.warmup - a->term_buffer) next = last;
  a->scalars[SC_WINDOW_SIZE] = (double)size;
  a->scalars[SC_NEXT_WINDOW] = (double)next;
}

/* Adds this iteration's positions to the window's estimate. */
static void add_sample(adapt_t *a, const float *q) {
  const int64_t count = a->s.rows * a->s.dim;
  a->scalars[SC_WINDOW_SAMPLES] += 1.0;
  if (a->s.mode == ADAPT_POOLED) {
    for (int64_t e = 0; e < count; ++e) {
      const double x = q[e];
      a->mean[e] += x;
      a->m2[e] += x * x;
    }
    return;
  }
  const double n = a->scalars[SC_WINDOW_SAMPLES];
  for (int64_t e = 0; e < count; ++e) {
    double delta = (double)q[e] - a->mean[e];
    a->mean[e] += delta / n;
    a->m2[e] += delta * ((double)q[e] - a->mean[e]);
  }
}

/* Ends a window: the regularised variances become the inverse metric; the estimate restarts. */
static int end_window(adapt_t *a, float *inv_metric) {
  const int64_t rows = a->s.rows, dim = a->s.dim;
  const double n_chain = a->scalars[SC_WINDOW_SAMPLES];
  if (a->s.mode == ADAPT_POOLED) {
    /* Each chain's sums in iteration order, then exactly over chains and ranks. */
    int status = DS_OK;
    for (int64_t c = 0; c < rows && status == DS_OK; ++c)
      for (int64_t k = 0; k < dim; ++k)
        if (exact_sum_add(&a->sum_x[k], a->mean[c * dim + k]) != 0 ||
            exact_sum_add(&a->sum_x2[k], a->m2[c * dim + k]) != 0) {
          status = ds_fail(DS_ERR_TARGET, "adaptation: chain %lld's positions in dimension %lld are out of range "
                                          "(sum %g)", (long long)c, (long long)k, a->mean[c * dim + k]);
          break;
        }
    DS_TRY(comm_agree(a->comm, status));
    DS_TRY(exact_sum_allreduce(a->comm, a->sum_x, dim));
    DS_TRY(exact_sum_allreduce(a->comm, a->sum_x2, dim));
    const double n = n_chain * (double)a->s.chains_total;
    for (int64_t k = 0; k < dim; ++k) {
      double sum = exact_sum_value(&a->sum_x[k]), sum2 = exact_sum_value(&a->sum_x2[k]);
      double var = n > 1 ? fmax(sum2 - sum * sum / n, 0.0) / (n - 1.0) : 1.0;
      var = (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0));
      a->metric_scratch[k] = (float)var;
      exact_sum_clear(&a->sum_x[k]);
      exact_sum_clear(&a->sum_x2[k]);
    }
    for (int64_t c = 0; c < rows; ++c) memcpy(inv_metric + c * dim, a->metric_scratch, (size_t)dim * sizeof(float));
    memset(a->mean, 0, (size_t)(rows * dim) * sizeof(double));
    memset(a->m2, 0, (size_t)(rows * dim) * sizeof(double));
  } else {
    const double n = n_chain;
    for (int64_t e = 0; e < rows * dim; ++e) {
      double var = n > 1 ? a->m2[e] / (n - 1.0) : 1.0;
      inv_metric[e] = (float)((n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0)));
      a->mean[e] = 0.0;
      a->m2[e] = 0.0;
    }
  }
  a->scalars[SC_WINDOW_SAMPLES] = 0.0;
  return DS_OK;
}

int adapt_after_iteration(adapt_t *a, int64_t iteration, const float *accept, const float *q, float *step_size,
                          float *inv_metric, int *metric_changed) {
  *metric_changed = 0;
  const int64_t rows = a->s.rows;
  const int pooled = a->s.mode == ADAPT_POOLED;
  if (a->s.mode == ADAPT_NONE) return DS_OK;

  /* 1. The step size, from this iteration's acceptance statistics. */
  a->scalars[SC_DA_COUNTER] += 1.0;
  const double counter = a->scalars[SC_DA_COUNTER];
  if (pooled) {
    exact_sum_t total;
    exact_sum_clear(&total);
    for (int64_t c = 0; c < rows; ++c) exact_sum_add(&total, accept[c] > 1.0f ? 1.0 : (double)accept[c]);
    DS_TRY(exact_sum_allreduce(a->comm, &total, 1));
    dual_learn(a, a->dual, counter, exact_sum_value(&total) / (double)a->s.chains_total);
  } else {
    for (int64_t c = 0; c < rows; ++c) dual_learn(a, a->dual + c * DA_FIELDS, counter, (double)accept[c]);
  }

  /* 2. The metric, in Stan's windows; a new metric restarts the step size's averaging. */
  if (a->s.diag_metric) {
    const int64_t window_counter = (int64_t)a->scalars[SC_WINDOW_COUNTER];
    /* Adding a sample is local and cannot fail; end_window agrees before its collectives. */
    if (in_window(a, window_counter)) add_sample(a, q);
    if (window_ends(a, window_counter)) {
      next_window(a);
      DS_TRY(end_window(a, inv_metric));
      *metric_changed = 1;
      for (int64_t c = 0; c < (pooled ? 1 : rows); ++c) {
        double *da = a->dual + c * DA_FIELDS;
        dual_restart(da, exp(da[DA_LOG_EPS]));
      }
      a->scalars[SC_DA_COUNTER] = 0.0;
    }
    a->scalars[SC_WINDOW_COUNTER] += 1.0;
  }

  /* 3. The next iteration's step sizes: the latest iterate, or the average once warmup ends. */
  const int last = iteration + 1 >= a->s.warmup;
  for (int64_t c = 0; c < rows; ++c) {
    const double *da = a->dual + (pooled ? 0 : c * DA_FIELDS);
    step_size[c] = (float)exp(last ? da[DA_X_BAR] : da[DA_LOG_EPS]);
  }
  return DS_OK;
}

int adapt_checkpoint_items(adapt_t *a, ckpt_array_t *arrays, int *n_arrays, ckpt_global_t *globals, int *n_globals) {
  *n_arrays = 0;
  *n_globals = 0;
  globals[(*n_globals)++] = (ckpt_global_t){"adapt_scalars", SC_COUNT, a->scalars};
  if (a->s.mode == ADAPT_PER_CHAIN) arrays[(*n_arrays)++] = (ckpt_array_t){"adapt_dual", CKPT_FLOAT64, DA_FIELDS, a->dual};
  if (a->mean) {
    arrays[(*n_arrays)++] = (ckpt_array_t){"adapt_mean", CKPT_FLOAT64, a->s.dim, a->mean};
    arrays[(*n_arrays)++] = (ckpt_array_t){"adapt_m2", CKPT_FLOAT64, a->s.dim, a->m2};
  }
  return DS_OK;
}
