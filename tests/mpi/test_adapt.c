/* test_adapt.c: warmup adaptation's concerns one at a time, as Stan's unit tests take them, on the
 * CPU backend: the metric windows against Stan's windowed_adaptation schedule (written out here
 * from its rules) for warmups from 20 to 5000, and pooled adaptation's capped windows; dual
 * averaging against Stan's stepsize_adaptation formulas in double, and its convergence to the
 * step whose acceptance is the target; the initial step search against a brute-force scan; the
 * regularised window variance against a two-pass float64 variance; the pooled Fisher diagonal
 * (--metric-fit fisher) against the same formula in double from the draws and gradients fed.
 * Run under mpirun, one rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "backend.h"
#include "comm.h"
#include "dual_average.h"
#include "exactsum.h"
#include "rng.h"
#include "status.h"

static int failures;

#define EXPECT(cond, ...)                 \
  do {                                    \
    if (!(cond)) {                        \
      printf("FAIL: " __VA_ARGS__);       \
      printf("\n");                       \
      ++failures;                         \
    }                                     \
  } while (0)

/* Stan's windowed_adaptation (stan/mcmc/windowed_adaptation.hpp): the counters at which a
 * metric window ends, for num_warmup iterations with the default buffers. */
static int stan_window_ends(int64_t warmup, int64_t *ends, int max_ends) {
  int64_t init = 75, term = 50, base = 25;
  if (warmup < 20) return 0;
  if (init + base + term > warmup) {
    init = (int64_t)(0.15 * (double)warmup);
    term = (int64_t)(0.1 * (double)warmup);
    base = warmup - (init + term);
  }
  int64_t size = base, next = init + size - 1;
  int n = 0;
  for (int64_t counter = 0; counter < warmup; ++counter) {
    if (counter == next && counter != warmup && n < max_ends) {
      ends[n++] = counter;
      /* compute_next_window */
      if (next != warmup - term - 1) {
        size *= 2;
        next = counter + size;
        if (next != warmup - term - 1 && next + 2 * size >= warmup - term) next = warmup - term - 1;
      }
    }
  }
  return n;
}

typedef struct driver {
  backend_t *b;
  adapt_t *a;
  float *accept, *step, *inv_metric, *q, *logp, *grad;
  hmc_batch_t batch;
} driver_t;

static void driver_make(driver_t *d, comm_ctx_t *comm, backend_t *b, adapt_mode_t mode, int64_t warmup,
                        int64_t chains, int64_t dim) {
  memset(d, 0, sizeof *d);
  d->b = b;
  adapt_settings_t s = {mode, 1, warmup, 0.8, 0.5, chains, dim, chains, 0, 1024, ADAPT_METRIC_DIAG};
  if (adapt_create(&d->a, comm, b, &s) != DS_OK) {
    printf("FAIL: adapt_create: %s\n", ds_error_message());
    exit(1);
  }
  d->accept = calloc((size_t)chains, sizeof(float));
  d->step = calloc((size_t)chains, sizeof(float));
  d->inv_metric = calloc((size_t)(chains * dim), sizeof(float));
  d->q = calloc((size_t)(chains * dim), sizeof(float));
  for (int64_t c = 0; c < chains; ++c) d->step[c] = 0.5f;
  d->batch = (hmc_batch_t){.n_chains = chains, .dim = dim, .q = d->q, .accept_prob = d->accept,
                           .step_nominal = d->step, .inv_metric = d->inv_metric};
}

static void driver_free(driver_t *d) {
  adapt_free(d->a);
  free(d->accept);
  free(d->step);
  free(d->inv_metric);
  free(d->q);
}

/* Warmup with moving positions; the iterations at whose end a window closed. */
static int run_windows(driver_t *d, int64_t warmup, int64_t *ends, int max_ends) {
  int n = 0;
  uint64_t key = 7;
  for (int64_t it = 0; it < warmup; ++it) {
    for (int64_t e = 0; e < d->batch.n_chains * d->batch.dim; ++e)
      d->q[e] = rng_uniform(rng_block(key, (uint64_t)e, (uint32_t)it, 0).v[0]);
    for (int64_t c = 0; c < d->batch.n_chains; ++c) d->accept[c] = 0.8f;
    const int closing = adapt_window_ends_next(d->a);
    d->batch.iteration = (uint32_t)it;
    adapt_before_iteration(d->a, &d->batch);
    /* The transition's part: the window's moments from the kept positions. */
    if (d->batch.moment_mean)
      for (int64_t e = 0; e < d->batch.n_chains * d->batch.dim; ++e) {
        const float delta = d->q[e] - d->batch.moment_mean[e];
        d->batch.moment_mean[e] += delta / (float)d->batch.moment_count;
        d->batch.moment_m2[e] += delta * (d->q[e] - d->batch.moment_mean[e]);
      }
    hmc_stats_t stats;
    memset(&stats, 0, sizeof stats);
    for (int64_t c = 0; c < d->batch.n_chains; ++c) exact_sum_add(&stats.accept, 0.8);
    int search = 0;
    if (adapt_after_iteration(d->a, it, &stats, &d->batch, d->step, d->inv_metric, &search) != DS_OK) {
      printf("FAIL: adapt_after_iteration: %s\n", ds_error_message());
      return -1;
    }
    if (closing && n < max_ends) ends[n++] = it;
  }
  return n;
}

static void test_windows(comm_ctx_t *comm, backend_t *cpu) {
  const int64_t warmups[] = {20, 21, 37, 50, 100, 149, 150, 151, 175, 200, 300, 500, 1000, 1001, 2000, 5000};
  int checked = 0;
  for (size_t w = 0; w < sizeof warmups / sizeof warmups[0]; ++w) {
    const int64_t warmup = warmups[w];
    int64_t want[64], got[64];
    const int n_want = stan_window_ends(warmup, want, 64);
    driver_t d;
    driver_make(&d, comm, cpu, ADAPT_PER_CHAIN, warmup, 3, 2);
    const int n_got = run_windows(&d, warmup, got, 64);
    int same = n_got == n_want;
    for (int i = 0; same && i < n_got; ++i) same = got[i] == want[i];
    EXPECT(same, "per-chain windows, warmup %lld: %d ends, Stan's schedule %d (first %lld vs %lld, last %lld vs %lld)",
           (long long)warmup, n_got, n_want, n_got ? (long long)got[0] : -1LL, n_want ? (long long)want[0] : -1LL,
           n_got ? (long long)got[n_got - 1] : -1LL, n_want ? (long long)want[n_want - 1] : -1LL);
    driver_free(&d);
    ++checked;
  }
  /* Pooled over many chains: windows of at least 100 iterations stop doubling at the cap (6400
   * draws); they stay contiguous and the last still ends where Stan's does. */
  const int64_t pooled[][2] = {{1000, 4}, {1000, 1000}, {2000, 64}, {5000, 16}};
  for (size_t p = 0; p < sizeof pooled / sizeof pooled[0]; ++p) {
    const int64_t warmup = pooled[p][0], chains = pooled[p][1];
    int64_t want[64], got[64];
    const int n_want = stan_window_ends(warmup, want, 64);
    driver_t d;
    driver_make(&d, comm, cpu, ADAPT_POOLED, warmup, chains, 1);
    const int n_got = run_windows(&d, warmup, got, 64);
    int64_t cap = (6400 + chains - 1) / chains;
    if (cap < 100) cap = 100;
    int ok = n_got > 0 && n_want > 0 && got[0] == want[0] && got[n_got - 1] == want[n_want - 1];
    for (int i = 1; ok && i < n_got; ++i) {
      const int64_t size = got[i] - got[i - 1], before = i > 1 ? got[i - 1] - got[i - 2] : got[0] - 74;
      /* doubling until the cap, the last taking the rest (under 3 windows' worth) */
      const int regular = size == 2 * before || size == cap || (before == cap && size == cap);
      ok = regular || (i == n_got - 1 && size < 3 * (before > cap ? before : cap) + 1);
    }
    EXPECT(ok, "pooled windows, warmup %lld over %lld chains: %d ends (last %lld, Stan's %lld)", (long long)warmup,
           (long long)chains, n_got, n_got ? (long long)got[n_got - 1] : -1LL, n_want ? (long long)want[n_want - 1] : -1LL);
    driver_free(&d);
    ++checked;
  }
  printf("windows: %d warmups checked\n", checked);
}

/* Stan's stepsize_adaptation::learn_stepsize, in double, mu given. */
typedef struct { double mu, s_bar, x_bar, counter; } stan_da_t;
static double stan_learn(stan_da_t *s, double delta, double gamma, double kappa, double t0, double stat) {
  s->counter += 1.0;
  stat = stat > 1.0 ? 1.0 : stat;
  const double eta = 1.0 / (s->counter + t0);
  s->s_bar = (1.0 - eta) * s->s_bar + eta * (delta - stat);
  const double x = s->mu - s->s_bar * sqrt(s->counter) / gamma;
  const double x_eta = pow(s->counter, -kappa);
  s->x_bar = (1.0 - x_eta) * s->x_bar + x_eta * x;
  return exp(x);
}

static void test_dual_averaging(void) {
  const double delta = 0.8, gamma = 0.05, kappa = 0.75, t0 = 10.0;
  double state[DUAL_FIELDS];
  dual_restart(state, 0.3);
  stan_da_t stan = {log(0.3), 0.0, 0.0, 0.0};
  double worst = 0.0;
  uint64_t key = 11;
  for (int it = 1; it <= 500; ++it) {
    const double stat = 1.3 * rng_uniform(rng_block(key, (uint64_t)it, 0, 0).v[0]); /* past 1 too */
    dual_average_step_t step = {delta, gamma, kappa, t0, (double)it, 0, 0, 0, 0, 0.0};
    const float got = dual_iterate(state, &step, stat);
    const double want = stan_learn(&stan, delta, gamma, kappa, t0, stat);
    worst = fmax(worst, fabs((double)got - want) / want);
  }
  /* dual_iterate rounds exp(x) to float: 6e-8 relative. */
  EXPECT(worst <= 1.2e-7, "dual averaging: %.3g relative from Stan's formulas", worst);
  dual_average_step_t last = {delta, gamma, kappa, t0, 501.0, 0, 1, 0, 0, 0.0};
  const double final_step = (double)dual_iterate(state, &last, 0.8);
  stan_learn(&stan, delta, gamma, kappa, t0, 0.8);
  EXPECT(fabs(final_step - exp(stan.x_bar)) <= 1.2e-7 * exp(stan.x_bar), "dual averaging: the final step %.9g, Stan's %.9g",
         final_step, exp(stan.x_bar));
  /* Convergence: acceptance exp(-eps^2) reaches 0.8 at eps = sqrt(-log 0.8) = 0.4724. */
  dual_restart(state, 2.0);
  float eps = 2.0f;
  for (int it = 1; it <= 2000; ++it) {
    dual_average_step_t step = {delta, gamma, kappa, t0, (double)it, 0, it == 2000, 0, 0, 0.0};
    eps = dual_iterate(state, &step, exp(-(double)eps * (double)eps));
  }
  const double target = sqrt(-log(0.8));
  EXPECT(fabs((double)eps - target) <= 0.02 * target, "dual averaging converges to %.4f, not %.4f", (double)eps, target);
  printf("dual averaging: %.2e from Stan's formulas over 500 iterations; converged step %.4f (exact %.4f)\n", worst,
         (double)eps, target);
}

/* The search on acceptance exp(-(eps / s)^2): from eps0 it doubles while above 0.8 and keeps the
 * last step that passed, or halves until it passes; the brute-force scan over the powers of two. */
static void test_step_search(void) {
  const double scales[] = {1e-6, 0.01, 0.3, 1.0, 7.0, 1e5};
  const float starts[] = {0.1f, 1.0f, 1e-3f, 50.0f};
  int checked = 0;
  for (size_t s = 0; s < sizeof scales / sizeof scales[0]; ++s)
    for (size_t t = 0; t < sizeof starts / sizeof starts[0]; ++t) {
      signed char direction = 0, exponent = 0;
      float step = starts[t];
      for (int trial = 0; trial < STEP_SEARCH_LIMIT + 2 && direction != 2; ++trial) {
        const float accept = (float)exp(-pow((double)step / scales[s], 2.0));
        step_search_trial(accept, &direction, &exponent, &step);
      }
      /* The largest eps0 2^k (|k| <= limit) that passes, where eps0 passes; else the first that passes below it. */
      const int passes0 = (float)exp(-pow((double)starts[t] / scales[s], 2.0)) > 0.8f;
      int want = 0;
      if (passes0) {
        while (want < STEP_SEARCH_LIMIT && (float)exp(-pow(ldexp(starts[t], want + 1) / scales[s], 2.0)) > 0.8f) ++want;
      } else {
        while (want > -STEP_SEARCH_LIMIT && !((float)exp(-pow(ldexp(starts[t], want) / scales[s], 2.0)) >= 0.8f)) --want;
      }
      EXPECT(direction == 2 && exponent == want && step == ldexpf(starts[t], want),
             "step search from %g at scale %g: exponent %d (step %g), brute force %d", (double)starts[t], scales[s],
             exponent, (double)step, want);
      ++checked;
    }
  printf("step search: %d cases against the brute-force scan\n", checked);
}

/* A standard normal that counts the rows it evaluates. */
static int64_t probe_rows;
static int counting_normal(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const int64_t dim = *(const int64_t *)self;
  probe_rows += n;
  for (int64_t r = 0; r < n; ++r) {
    double lp = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      lp -= 0.5 * (double)x[r * dim + k] * (double)x[r * dim + k];
      grad[r * dim + k] = -x[r * dim + k];
    }
    logp[r] = (float)lp;
  }
  return 0;
}

/* A probe transition given the step search's directions evaluates only the chains still
 * searching (2: done), and gives those chains the same bits as a probe of every chain; the done
 * chains' outputs are left as they were. 150 chains: two whole blocks of 64 and a part. */
static void test_probe_skips_done_chains(backend_t *cpu) {
  enum { N = 150, DIM = 3, STEPS = 5 };
  int64_t dim = DIM;
  dsampler_target target = {.abi_version = 1, .name = "counting", .dim = DIM, .self = &dim,
                            .logp_grad = counting_normal};
  static float q[N * DIM], grad[N * DIM], logp[N], step[N], inv_metric[DIM] = {1.0f, 1.0f, 1.0f};
  static float accept[2][N], used[2][N], energy[2][N];
  static uint8_t diverging[2][N], accepted[2][N];
  static int8_t direction[N];
  int64_t open = 0;
  for (int64_t c = 0; c < N; ++c) {
    for (int64_t k = 0; k < DIM; ++k) q[c * DIM + k] = (float)(0.01 * (double)((c * 7 + k * 3) % 23) - 0.1);
    counting_normal(&dim, q + c * DIM, 1, logp + c, grad + c * DIM);
    step[c] = 0.2f + 0.01f * (float)(c % 9);
    /* Every third chain done, and all of the second block but two. */
    direction[c] = (int8_t)(c % 3 == 0 || (c >= 64 && c < 126) ? 2 : c % 2 ? 1 : -1);
    open += direction[c] != 2;
  }
  int64_t rows[2];
  for (int with = 0; with < 2; ++with) {
    for (int64_t c = 0; c < N; ++c) accept[with][c] = used[with][c] = energy[with][c] = -7.0f;
    hmc_batch_t batch = {.n_chains = N, .chain_begin = 40, .dim = DIM, .seed = 99, .iteration = 0x80000005u,
                         .n_leapfrog = STEPS, .q = q, .logp = logp, .grad = grad, .step_nominal = step,
                         .jitter = 0.2f, .inv_metric = inv_metric, .shared_metric = 1,
                         .accept_prob = accept[with], .step_size = used[with], .diverging = diverging[with],
                         .energy = energy[with], .accepted = accepted[with], .probe = 1,
                         .probe_direction = with ? direction : NULL};
    probe_rows = 0;
    EXPECT(cpu->hmc_transition(cpu, &target, &batch) == DS_OK, "probe transition %d failed", with);
    rows[with] = probe_rows;
  }
  int same = 1, untouched = 1;
  for (int64_t c = 0; c < N; ++c) {
    if (direction[c] == 2) {
      untouched &= accept[1][c] == -7.0f && used[1][c] == -7.0f && energy[1][c] == -7.0f;
      continue;
    }
    same &= memcmp(&accept[0][c], &accept[1][c], sizeof(float)) == 0 && memcmp(&used[0][c], &used[1][c], 4) == 0 &&
            memcmp(&energy[0][c], &energy[1][c], sizeof(float)) == 0 && diverging[0][c] == diverging[1][c];
  }
  EXPECT(rows[0] == (int64_t)N * STEPS && rows[1] == open * STEPS,
         "probe rows evaluated: %lld of all chains (want %d), %lld given the directions (want %lld open x %d)",
         (long long)rows[0], N * STEPS, (long long)rows[1], (long long)open, STEPS);
  EXPECT(same, "a searching chain's probe differs when the done chains are left out");
  EXPECT(untouched, "a done chain's probe outputs were written");
  printf("probes: %lld rows for %lld searching chains of %d (all: %lld)\n", (long long)rows[1], (long long)open, N,
         (long long)rows[0]);
}

static void test_window_variance(backend_t *cpu) {
  const int64_t rows = 5, dim = 7, n = 40;
  float *mean = calloc((size_t)(rows * dim), sizeof(float)), *m2 = calloc((size_t)(rows * dim), sizeof(float));
  float *metric = calloc((size_t)(rows * dim), sizeof(float));
  double *x = calloc((size_t)(n * rows * dim), sizeof(double));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t e = 0; e < rows * dim; ++e) {
      const double sd = pow(10.0, (double)(e % dim) - 3.0); /* 1e-3 .. 1e3 */
      const float v = (float)(5.0 + sd * (2.0 * rng_uniform(rng_block(3, (uint64_t)e, (uint32_t)t, 0).v[0]) - 1.0));
      x[t * rows * dim + e] = v;
      const float delta = v - mean[e];
      mean[e] += delta / (float)(t + 1);
      m2[e] += delta * (v - mean[e]);
    }
  if (cpu->moments_to_metric(cpu, mean, m2, rows, dim, (double)n, metric) != DS_OK) {
    printf("FAIL: moments_to_metric: %s\n", ds_error_message());
    ++failures;
    return;
  }
  double worst = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double var[64], log_sum = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      double mu = 0.0, ss = 0.0;
      for (int64_t t = 0; t < n; ++t) mu += x[(t * rows + r) * dim + k];
      mu /= (double)n;
      for (int64_t t = 0; t < n; ++t) ss += pow(x[(t * rows + r) * dim + k] - mu, 2.0);
      var[k] = ss / (double)(n - 1);
      log_sum += log(var[k]);
    }
    const double scale = exp(log_sum / (double)dim); /* the window's typical variance */
    for (int64_t k = 0; k < dim; ++k) {
      const double want = ((double)n / (n + 5.0)) * var[k] + 1e-3 * scale * (5.0 / (n + 5.0));
      worst = fmax(worst, fabs((double)metric[r * dim + k] - want) / want);
    }
  }
  /* Welford in float over 40 values of spread up to 1e3 about 5: 1e-4 relative. */
  EXPECT(worst <= 1e-4, "window variance: %.3g relative from two-pass float64", worst);
  printf("window variance: %.2e relative from two-pass float64 (variances 1e-6 to 1e6)\n", worst);
  free(mean); free(m2); free(metric); free(x);
}

/* --metric-fit fisher, pooled: at the first window's end (warmup 200: iterations 75..99) the
 * shared inverse metric is, per coordinate, sqrt(V_x / V_g) with V_x, V_g the mean over chains of
 * each chain's two-pass variance of the positions and gradients fed in those iterations, then
 * Stan's regularisation with n = 25 chains draws toward the geometric mean of those values. */
static void test_fisher_metric(comm_ctx_t *comm, backend_t *cpu) {
  enum { CHAINS = 6, DIM = 5, WARMUP = 200, FIRST = 75, LAST = 99 };
  adapt_t *a = NULL;
  adapt_settings_t s = {ADAPT_POOLED, 1, WARMUP, 0.8, 0.5, CHAINS, DIM, CHAINS, 0, 1024, ADAPT_METRIC_DIAG, 1};
  if (adapt_create(&a, comm, cpu, &s) != DS_OK) {
    printf("FAIL: adapt_create (fisher): %s\n", ds_error_message());
    ++failures;
    return;
  }
  float q[CHAINS * DIM], grad[CHAINS * DIM], accept[CHAINS], step[CHAINS], inv_metric[DIM];
  static double xs[LAST - FIRST + 1][CHAINS * DIM], gs[LAST - FIRST + 1][CHAINS * DIM];
  for (int c = 0; c < CHAINS; ++c) step[c] = 0.5f;
  hmc_batch_t batch = {.n_chains = CHAINS, .dim = DIM, .q = q, .grad = grad, .accept_prob = accept,
                       .step_nominal = step, .inv_metric = inv_metric};
  int ok = 1;
  for (int it = 0; it <= LAST && ok; ++it) {
    for (int e = 0; e < CHAINS * DIM; ++e) {
      const int k = e % DIM, c = e / DIM;
      const double u = 2.0 * rng_uniform(rng_block(21, (uint64_t)e, (uint32_t)it, 0).v[0]) - 1.0;
      const double v = 2.0 * rng_uniform(rng_block(22, (uint64_t)e, (uint32_t)it, 0).v[0]) - 1.0;
      q[e] = (float)(c + pow(10.0, k - 2.0) * u);      /* sds 1e-2 .. 1e2, chains apart */
      grad[e] = (float)(-0.3 * c + pow(3.0, 1.0 - k) * v); /* independent of q: V_g its own */
      if (it >= FIRST) xs[it - FIRST][e] = q[e], gs[it - FIRST][e] = grad[e];
    }
    for (int c = 0; c < CHAINS; ++c) accept[c] = 0.8f;
    batch.iteration = (uint32_t)it;
    adapt_before_iteration(a, &batch);
    if (batch.moment_mean)
      for (int e = 0; e < CHAINS * DIM; ++e) {
        const float delta = q[e] - batch.moment_mean[e];
        batch.moment_mean[e] += delta / (float)batch.moment_count;
        batch.moment_m2[e] += delta * (q[e] - batch.moment_mean[e]);
      }
    hmc_stats_t stats;
    memset(&stats, 0, sizeof stats);
    for (int c = 0; c < CHAINS; ++c) exact_sum_add(&stats.accept, 0.8);
    int search = 0;
    ok = adapt_after_iteration(a, it, &stats, &batch, step, inv_metric, &search) == DS_OK;
  }
  EXPECT(ok, "adapt_after_iteration (fisher): %s", ds_error_message());
  const int n = LAST - FIRST + 1;
  double fisher[DIM], log_sum = 0.0;
  for (int k = 0; k < DIM; ++k) {
    double vx = 0.0, vg = 0.0;
    for (int c = 0; c < CHAINS; ++c) {
      double mx = 0.0, mg = 0.0, sx = 0.0, sg = 0.0;
      for (int t = 0; t < n; ++t) mx += xs[t][c * DIM + k], mg += gs[t][c * DIM + k];
      mx /= n, mg /= n;
      for (int t = 0; t < n; ++t) sx += pow(xs[t][c * DIM + k] - mx, 2.0), sg += pow(gs[t][c * DIM + k] - mg, 2.0);
      vx += sx / (n - 1.0) / CHAINS, vg += sg / (n - 1.0) / CHAINS;
    }
    fisher[k] = sqrt(vx / vg);
    log_sum += log(fisher[k]);
  }
  const double scale = exp(log_sum / DIM), total = (double)n * CHAINS;
  double worst = 0.0;
  for (int k = 0; k < DIM; ++k) {
    const double want = (total / (total + 5.0)) * fisher[k] + 1e-3 * scale * (5.0 / (total + 5.0));
    worst = fmax(worst, fabs((double)inv_metric[k] - want) / want);
  }
  /* Welford in float over 25 values, a square root: 1e-4 relative. */
  EXPECT(ok && worst <= 1e-4, "fisher metric: %.3g relative from the double-precision formula", worst);
  printf("fisher metric: %.2e relative from the double-precision formula (values %.3g .. %.3g)\n", worst,
         fisher[0], fisher[DIM - 1]);
  adapt_free(a);
}

int main(int argc, char **argv) {
  comm_ctx_t comm;
  if (comm_init(&comm, &argc, &argv) != DS_OK) return 1;
  backend_t *cpu = NULL;
  if (backend_cpu_create(&cpu) != DS_OK) return 1;
  test_windows(&comm, cpu);
  test_dual_averaging();
  test_step_search();
  test_probe_skips_done_chains(cpu);
  test_window_variance(cpu);
  test_fisher_metric(&comm, cpu);
  printf("adaptation: %d failures\n", failures);
  backend_destroy(cpu);
  comm_free(&comm);
  return failures ? 1 : 0;
}
