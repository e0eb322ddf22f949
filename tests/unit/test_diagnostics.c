/* test_diagnostics.c: src/summary/diagnostics.c one column at a time against references written
 * here in double from ArviZ 0.22's definitions and the papers (Vehtari et al. 2021, Margossian et
 * al. 2024), not from diagnostics.c's code: autocovariances as direct O(n^2) sums where the library
 * uses FFTW, average ranks from a comparison sort where it uses a radix sort, the normal quantile
 * by Newton's method on libm's erfc where it uses Wichura's AS 241, sums compensated in long
 * double where it follows numpy's pairwise summation. Seeded synthetic chains: iid normal, AR(1)
 * with rho 0.9, chains with different means, heavy ties, constant parameters, an odd draw count
 * (the split drops the middle draw), too few draws, NaN, and superchains. Run under mpirun, one
 * rank (the library links MPI; the diagnostics use none). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diagnostics.h"
#include "status.h"

static int failures, checks;

#define EXPECT(cond, ...)           \
  do {                              \
    ++checks;                       \
    if (!(cond)) {                  \
      printf("FAIL: " __VA_ARGS__); \
      printf("\n");                 \
      ++failures;                   \
    }                               \
  } while (0)

/* |got - want| <= abs_tol + |want| * rel_tol, NaN only against NaN, infinities only against
 * the same infinity. */
static int close_to(double got, double want, double abs_tol, double rel_tol) {
  if (isnan(want) || isnan(got)) return isnan(want) && isnan(got);
  if (isinf(want) || isinf(got)) return got == want;
  return fabs(got - want) <= abs_tol + fabs(want) * rel_tol;
}

/* --- seeded inputs (splitmix64 and Box-Muller, independent of src/shared/rng.h) --------------- */

static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double uniform_open(uint64_t *state) { return ((double)(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; }

static double normal(uint64_t *state) {
  const double u = uniform_open(state), v = uniform_open(state);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* --- references ------------------------------------------------------------------------------ */

/* Compensated (long double) sums, so the references' own rounding is far below the tolerances. */
static double ref_mean(const double *a, int64_t n) {
  long double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i];
  return (double)(sum / n);
}

static double ref_var(const double *a, int64_t n, int ddof) {
  const double mean = ref_mean(a, n);
  long double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += ((long double)a[i] - mean) * ((long double)a[i] - mean);
  return (double)(sum / (n - ddof));
}

static int compare_double(const void *pa, const void *pb) {
  const double a = *(const double *)pa, b = *(const double *)pb;
  return (a > b) - (a < b);
}

static double *sorted_copy(const double *a, int64_t n) {
  double *s = malloc((size_t)n * sizeof *s);
  memcpy(s, a, (size_t)n * sizeof *s);
  qsort(s, (size_t)n, sizeof *s, compare_double);
  return s;
}

/* The standard normal CDF from libm's erfc (accurate far into the lower tail). */
static double phi_lower(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }
static double phi_density(double x) { return exp(-0.5 * x * x) / sqrt(2.0 * 3.141592653589793); }

/* Phi^{-1}(p) by bisection to a bracket, then Newton on log Phi (lower half; the upper half by
 * symmetry on 1 - p, which is exact for p >= 0.5). */
static double ref_normal_quantile(double p) {
  if (isnan(p) || p < 0.0 || p > 1.0) return NAN;
  if (p == 0.0) return -INFINITY;
  if (p == 1.0) return INFINITY;
  if (p == 0.5) return 0.0;
  const int upper = p > 0.5;
  const double tail = upper ? 1.0 - p : p; /* solve phi_lower(x) = tail, x < 0 */
  double lo = -40.0, hi = 0.0;
  for (int i = 0; i < 200 && hi - lo > 1e-3; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (phi_lower(mid) < tail) lo = mid;
    else hi = mid;
  }
  double x = 0.5 * (lo + hi);
  for (int i = 0; i < 100; ++i) {
    const double cdf = phi_lower(x);
    const double step = (log(cdf) - log(tail)) * cdf / phi_density(x);
    x -= step;
    if (fabs(step) <= 1e-17 * fabs(x)) break;
  }
  return upper ? -x : x;
}

/* numpy.quantile's default ("linear", R type 7) of sorted values: h = (n - 1) q. */
static double ref_quantile_linear(const double *sorted, int64_t n, double q) {
  const double h = (double)(n - 1) * q;
  int64_t below = (int64_t)floor(h);
  if (below < 0) below = 0;
  if (below > n - 1) below = n - 1;
  const int64_t above = below + 1 < n ? below + 1 : n - 1;
  return sorted[below] + (h - (double)below) * (sorted[above] - sorted[below]);
}

/* The tail ESS's thresholds as ArviZ finds them: scipy.stats.mstats.mquantiles(x, p, alphap=1,
 * betap=1), Q = (1 - g) x[j-1] + g x[j] with j = floor(n p + 1 - p) clipped to [1, n - 1] (1-based),
 * g = n p + 1 - p - j clipped to [0, 1]. scipy's rounding, not numpy's lerp, decides which side
 * a draw equal to the threshold falls on. */
static double ref_quantile_mstats(const double *sorted, int64_t n, double p) {
  if (n == 1) return sorted[0];
  const double position = (double)n * p + (1.0 - p);
  double clipped = position;
  if (clipped < 1.0) clipped = 1.0;
  if (clipped > (double)(n - 1)) clipped = (double)(n - 1);
  const int64_t j = (int64_t)floor(clipped);
  double g = position - (double)j;
  if (g < 0.0) g = 0.0;
  if (g > 1.0) g = 1.0;
  return (1.0 - g) * sorted[j - 1] + g * sorted[j];
}

/* ArviZ's _split_chains: rows c (first floor(draws/2) draws of chain c) and chains + c (its last
 * floor(draws/2)); an odd middle draw is dropped. */
static double *ref_split(const double *draws, int64_t chains, int64_t n_draws) {
  const int64_t half = n_draws / 2;
  double *split = malloc((size_t)(2 * chains * half) * sizeof *split);
  for (int64_t c = 0; c < chains; ++c)
    for (int64_t i = 0; i < half; ++i) {
      split[c * half + i] = draws[c * n_draws + i];
      split[(chains + c) * half + i] = draws[c * n_draws + n_draws - half + i];
    }
  return split;
}

typedef struct ranked {
  double value;
  int64_t index;
} ranked_t;

static int compare_ranked(const void *pa, const void *pb) {
  const ranked_t *a = pa, *b = pb;
  if (a->value != b->value) return (a->value > b->value) - (a->value < b->value);
  return (a->index > b->index) - (a->index < b->index);
}

/* ArviZ's _z_scale: scipy's rankdata(method="average") over all n values (ties share the mean of
 * their 1-based ranks), Blom's (r - 3/8) / (n + 1/4), the normal quantile. */
static void ref_z_scale(const double *values, int64_t n, double *z) {
  ranked_t *r = malloc((size_t)n * sizeof *r);
  for (int64_t i = 0; i < n; ++i) r[i] = (ranked_t){values[i], i};
  qsort(r, (size_t)n, sizeof *r, compare_ranked);
  for (int64_t first = 0; first < n;) {
    int64_t last = first; /* the tie group is [first, last] */
    while (last + 1 < n && r[last + 1].value == r[first].value) ++last;
    const double average_rank = ((double)(first + 1) + (double)(last + 1)) / 2.0;
    const double score = ref_normal_quantile((average_rank - 0.375) / ((double)n + 0.25));
    for (int64_t i = first; i <= last; ++i) z[r[i].index] = score;
    first = last + 1;
  }
  free(r);
}

/* Classic R-hat (ArviZ's _rhat) of rows [rows][n]. */
static double ref_rhat(const double *a, int64_t rows, int64_t n) {
  double *means = malloc((size_t)rows * sizeof *means);
  long double within = 0;
  for (int64_t r = 0; r < rows; ++r) {
    means[r] = ref_mean(a + r * n, n);
    within += ref_var(a + r * n, n, 1);
  }
  const double between = (double)n * ref_var(means, rows, 1);
  free(means);
  return sqrt((between / (double)(within / rows) + (double)n - 1.0) / (double)n);
}

/* The ESS of rows [rows][n] as Vehtari et al. (2021) define it and ArviZ's _ess computes it:
 * autocovariances acov_r(t) = 1/n sum_{i < n - t} (x_i - mean)(x_{i+t} - mean) as direct sums,
 * rho(t) = 1 - (W - mean_r acov_r(t)) / var_plus with W the mean within-row variance (ddof 1) and
 * var_plus = W (n - 1) / n + var(row means); Geyer's pairs P_k = rho(2k) + rho(2k+1): pair k >= 1
 * is looked at while the previous pair's sum is positive and 2k - 1 < n - 3 (ArviZ's bound);
 * pairs 0..L-1 before the last one looked at (L) are summed after the monotone correction
 * P_k <- min(P_k, P_{k-1}); ArviZ adds rho(2L) when it is positive (or when pair L was kept with
 * a sum >= 0). tau = max(-1 + 2 sum P + that, 1 / log10(rows n)), ESS = rows n / tau. Rows whose
 * range is below 1e-15 give rows n (ArviZ's shortcut for constant input). */
static double ref_ess(const double *a, int64_t rows, int64_t n) {
  const int64_t total = rows * n;
  double lo = a[0], hi = a[0];
  for (int64_t i = 0; i < total; ++i) {
    if (isnan(a[i])) return NAN;
    lo = a[i] < lo ? a[i] : lo;
    hi = a[i] > hi ? a[i] : hi;
  }
  if (hi - lo < 1e-15) return (double)total;
  double *acov = calloc((size_t)n, sizeof *acov); /* mean over rows, per lag */
  double *means = malloc((size_t)rows * sizeof *means);
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = a + r * n;
    means[r] = ref_mean(row, n);
    for (int64_t t = 0; t < n; ++t) {
      long double sum = 0;
      for (int64_t i = 0; i + t < n; ++i) sum += ((long double)row[i] - means[r]) * ((long double)row[i + t] - means[r]);
      acov[t] += (double)(sum / n) / (double)rows;
    }
  }
  const double within = acov[0] * (double)n / ((double)n - 1.0);
  const double var_plus = within * ((double)n - 1.0) / (double)n + (rows > 1 ? ref_var(means, rows, 1) : 0.0);
#define RHO(t) ((t) == 0 ? 1.0 : 1.0 - (within - acov[t]) / var_plus)
  double *pair = malloc((size_t)(n / 2 + 2) * sizeof *pair);
  pair[0] = RHO(0) + RHO(1);
  int64_t last = 0; /* L: the last pair looked at */
  while (pair[last] > 0.0 && 2 * (last + 1) - 1 < n - 3) {
    ++last;
    pair[last] = RHO(2 * last) + RHO(2 * last + 1);
  }
  const double rho_last_even = RHO(2 * last);
  double extra = 0.0;
  if (last == 0 || rho_last_even > 0.0 || pair[last] >= 0.0) extra = rho_last_even;
  long double sum = 0;
  double previous = pair[0];
  for (int64_t k = 0; k < last; ++k) {
    const double corrected = (k > 0 && pair[k] > previous) ? previous : pair[k];
    sum += corrected;
    previous = corrected;
  }
#undef RHO
  double tau = -1.0 + 2.0 * (double)sum + extra;
  const double floor_tau = 1.0 / log10((double)total);
  if (tau < floor_tau) tau = floor_tau;
  free(pair);
  free(means);
  free(acov);
  return (double)total / tau;
}

/* The summary's columns from the references above, as ArviZ's summary defines them. */
static void ref_summarize(const double *draws, int64_t chains, int64_t n_draws, int64_t superchain_size,
                          diag_stats_t *out) {
  const int64_t n_all = chains * n_draws;
  for (int64_t i = 0; i < n_all; ++i)
    if (isnan(draws[i])) {
      *out = (diag_stats_t){NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
      return;
    }
  out->mean = ref_mean(draws, n_all);
  out->sd = n_all > 1 ? sqrt(ref_var(draws, n_all, 1)) : NAN;
  double *sorted = sorted_copy(draws, n_all);
  out->q5 = ref_quantile_linear(sorted, n_all, 0.05);
  out->q50 = ref_quantile_linear(sorted, n_all, 0.50);
  out->q95 = ref_quantile_linear(sorted, n_all, 0.95);

  /* Nested R-hat, Margossian et al. (2024) eqs. 4-8: K superchains of M chains. */
  out->r_hat_nested = NAN;
  if (superchain_size > 0 && chains / superchain_size >= 2) {
    const int64_t m_per = superchain_size, k_count = chains / superchain_size;
    double *super_mean = malloc((size_t)k_count * sizeof *super_mean);
    long double within_sum = 0;
    for (int64_t k = 0; k < k_count; ++k) {
      long double s = 0;
      double *chain_mean = malloc((size_t)m_per * sizeof *chain_mean);
      long double w = 0;
      for (int64_t m = 0; m < m_per; ++m) {
        const double *chain = draws + (k * m_per + m) * n_draws;
        chain_mean[m] = ref_mean(chain, n_draws);
        s += chain_mean[m];
        w += n_draws > 1 ? ref_var(chain, n_draws, 1) : 0.0;
      }
      super_mean[k] = (double)(s / m_per);
      long double b = 0;
      for (int64_t m = 0; m < m_per; ++m) b += ((long double)chain_mean[m] - super_mean[k]) * (chain_mean[m] - super_mean[k]);
      within_sum += (m_per > 1 ? b / (m_per - 1) : 0) + w / m_per;
      free(chain_mean);
    }
    const double between = ref_var(super_mean, k_count, 1);
    out->r_hat_nested = sqrt(1.0 + between / (double)(within_sum / k_count));
    free(super_mean);
  }

  out->mcse_mean = out->mcse_sd = out->ess_bulk = out->ess_tail = out->r_hat = NAN;
  if (n_draws < 4) {
    free(sorted);
    return;
  }
  const int64_t half = n_draws / 2, rows = 2 * chains, n_split = rows * half;
  double *split = ref_split(draws, chains, n_draws);
  double *z = malloc((size_t)n_split * sizeof *z);
  /* Bulk ESS: the split, rank-normalised draws. */
  ref_z_scale(split, n_split, z);
  out->ess_bulk = ref_ess(z, rows, half);
  /* R-hat: max of the rank-normalised split R-hat and the same of |x - median| (folded). */
  if (chains >= 2) {
    const double bulk = ref_rhat(z, rows, half);
    double *split_sorted = sorted_copy(split, n_split);
    const double median = (split_sorted[n_split / 2 - 1] + split_sorted[n_split / 2]) / 2.0;
    free(split_sorted);
    double *folded = malloc((size_t)n_split * sizeof *folded);
    for (int64_t i = 0; i < n_split; ++i) folded[i] = fabs(split[i] - median);
    ref_z_scale(folded, n_split, folded);
    const double tail = ref_rhat(folded, rows, half);
    out->r_hat = tail > bulk ? tail : bulk; /* Python's max(): the first argument unless the second is larger */
    free(folded);
  }
  /* MCSE of the mean: sd over all draws / sqrt(ESS of the split raw draws). */
  out->mcse_mean = sqrt(ref_var(draws, n_all, 1)) / sqrt(ref_ess(split, rows, half));
  /* MCSE of the sd (ArviZ's _mcse_sd): delta method on s = (x - mean)^2. */
  double *squared = calloc((size_t)n_all, sizeof *squared);
  for (int64_t i = 0; i < n_all; ++i) squared[i] = (draws[i] - out->mean) * (draws[i] - out->mean);
  double *squared_split = ref_split(squared, chains, n_draws);
  const double ess_squared = ref_ess(squared_split, rows, half);
  const double evar = ref_mean(squared, n_all);
  long double fourth = 0;
  for (int64_t i = 0; i < n_all; ++i) fourth += (long double)squared[i] * squared[i];
  const double varvar = ((double)(fourth / n_all) - evar * evar) / ess_squared;
  out->mcse_sd = sqrt(varvar / evar / 4.0);
  free(squared_split);
  free(squared);
  /* Tail ESS: min of the split ESS of the indicators x <= q(0.05) and x <= q(0.95). */
  double ess_side[2];
  const double prob[2] = {0.05, 0.95};
  double *indicator = malloc((size_t)n_split * sizeof *indicator);
  for (int side = 0; side < 2; ++side) {
    const double threshold = ref_quantile_mstats(sorted, n_all, prob[side]);
    for (int64_t i = 0; i < n_split; ++i) indicator[i] = split[i] <= threshold ? 1.0 : 0.0;
    ess_side[side] = ref_ess(indicator, rows, half);
  }
  out->ess_tail = ess_side[1] < ess_side[0] ? ess_side[1] : ess_side[0];
  free(indicator);
  free(z);
  free(split);
  free(sorted);
}

/* --- the cases -------------------------------------------------------------------------------- */

/* Tolerances, per column (`abs + |ref| rel`):
 * - mean: numpy's pairwise sum against a long-double sum: 1e-13 of the mean |x| (rounding of a
 *   few thousand terms is ~1e-15 relative).
 * - sd, quantiles: 1e-12 relative / 1e-15 of the scale (same formulas; quantiles differ only in
 *   how the interpolation is rounded, numpy's lerp against a + g (b - a)).
 * - R-hat, nested R-hat: 1e-12 relative (z-scores from AS 241 against erfc-Newton agree to
 *   ~1e-15; the rest is sums).
 * - ESS, MCSE: 1e-11 relative: FFT autocovariances against direct sums differ by ~1e-15 of
 *   acov(0) per lag (times log of the FFT length), and tau sums up to a few hundred rho(t); seen
 *   here: ~1e-15. A different Geyer truncation point, a wrong tie rule or a lost draw changes an
 *   ESS by far more than that. */
#define TOL_MEAN 1e-13
#define TOL_SD 1e-12
#define TOL_RHAT 1e-12
#define TOL_ESS 1e-11

/* The largest |got - ref| / tolerance seen per column, for the log: how much room is left. */
static double worst_ratio[DIAG_N_STATS];

typedef struct chains_case {
  const char *name;
  int64_t chains, draws, superchain_size;
  double *values;
} chains_case_t;

static void check_against_reference(const chains_case_t *c, diag_stats_t *got_out) {
  diag_workspace_t *ws = NULL;
  if (diag_workspace_create(&ws, c->chains, c->draws, c->superchain_size) != DS_OK) {
    EXPECT(0, "%s: diag_workspace_create: %s", c->name, ds_error_message());
    return;
  }
  diag_stats_t got, want;
  diag_summarize(ws, c->values, &got);
  ref_summarize(c->values, c->chains, c->draws, c->superchain_size, &want);
  diag_workspace_free(ws);
  const int64_t n_all = c->chains * c->draws;
  long double abs_sum = 0;
  for (int64_t i = 0; i < n_all; ++i) abs_sum += fabs(c->values[i]);
  const double scale = (double)(abs_sum / n_all) + 1e-300;
  const struct {
    const char *column;
    double got, want, abs_tol, rel_tol;
  } rows[] = {
      /* In diag_stat_names' order. */
      {"mean", got.mean, want.mean, TOL_MEAN * scale, 0},
      {"sd", got.sd, want.sd, 1e-15 * scale, TOL_SD},
      {"mcse_mean", got.mcse_mean, want.mcse_mean, 1e-15 * scale, TOL_ESS},
      {"mcse_sd", got.mcse_sd, want.mcse_sd, 1e-15 * scale, TOL_ESS},
      {"q5", got.q5, want.q5, 1e-15 * scale, TOL_SD},
      {"q50", got.q50, want.q50, 1e-15 * scale, TOL_SD},
      {"q95", got.q95, want.q95, 1e-15 * scale, TOL_SD},
      {"ess_bulk", got.ess_bulk, want.ess_bulk, 0, TOL_ESS},
      {"ess_tail", got.ess_tail, want.ess_tail, 0, TOL_ESS},
      {"r_hat", got.r_hat, want.r_hat, 0, TOL_RHAT},
      {"r_hat_nested", got.r_hat_nested, want.r_hat_nested, 0, TOL_RHAT},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; ++i) {
    const double tolerance = rows[i].abs_tol + fabs(rows[i].want) * rows[i].rel_tol;
    if (isfinite(rows[i].want) && isfinite(rows[i].got) && tolerance > 0)
      worst_ratio[i] = fmax(worst_ratio[i], fabs(rows[i].got - rows[i].want) / tolerance);
    EXPECT(close_to(rows[i].got, rows[i].want, rows[i].abs_tol, rows[i].rel_tol),
           "%s: %s = %.17g, reference %.17g (tolerance %.1e + |ref| %.1e)", c->name, rows[i].column, rows[i].got,
           rows[i].want, rows[i].abs_tol, rows[i].rel_tol);
  }
  printf("%-28s mean %+.4f sd %.4f ess_bulk %8.1f ess_tail %8.1f r_hat %.5f mcse_mean %.2e nested %.4f\n", c->name,
         got.mean, got.sd, got.ess_bulk, got.ess_tail, got.r_hat, got.mcse_mean, got.r_hat_nested);
  if (got_out) *got_out = got;
}

static double *make_iid(uint64_t seed, int64_t chains, int64_t draws, double loc, double scale) {
  double *x = malloc((size_t)(chains * draws) * sizeof *x);
  uint64_t state = seed;
  for (int64_t i = 0; i < chains * draws; ++i) x[i] = loc + scale * normal(&state);
  return x;
}

/* AR(1), x_t = rho x_{t-1} + sqrt(1 - rho^2) e_t, started from the stationary law; chain c is
 * shifted by offsets[c] (NULL: none). */
static double *make_ar1(uint64_t seed, int64_t chains, int64_t draws, double rho, const double *offsets) {
  double *x = malloc((size_t)(chains * draws) * sizeof *x);
  uint64_t state = seed;
  for (int64_t c = 0; c < chains; ++c) {
    double value = normal(&state);
    for (int64_t i = 0; i < draws; ++i) {
      if (i > 0) value = rho * value + sqrt(1.0 - rho * rho) * normal(&state);
      x[c * draws + i] = value + (offsets ? offsets[c] : 0.0);
    }
  }
  return x;
}

static void test_normal_quantile(void) {
  /* The reference itself against Phi^{-1}(0.975) = 1.959963984540054 (Abramowitz & Stegun). */
  EXPECT(close_to(ref_normal_quantile(0.975), 1.959963984540054, 0, 1e-14), "reference quantile(0.975) = %.17g",
         ref_normal_quantile(0.975));
  /* Both branches of AS 241 (|p - 0.5| <= 0.425, r <= 5, r > 5) and their edges. */
  const double ps[] = {1e-300, 1e-100, 1e-20, 1.3887943864964e-11, 1.3887943864965e-11, 1e-6, 0.001, 0.02,
                       0.074999, 0.075, 0.075001, 0.1, 0.25, 0.4, 0.49, 0.4999999, 0.5, 0.5000001, 0.51, 0.6,
                       0.9, 0.925, 0.925001, 0.975, 0.999, 1.0 - 1e-6, 1.0 - 1e-12, 1.0 - 0x1.0p-53};
  double worst = 0;
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; ++i) {
    const double got = diag_normal_quantile(ps[i]), want = ref_normal_quantile(ps[i]);
    /* AS 241 is good to ~1e-16 relative; erfc-Newton to ~1e-15 absolute near 0. */
    EXPECT(close_to(got, want, 1e-15, 1e-13), "normal quantile(%.17g) = %.17g, reference %.17g", ps[i], got, want);
    if (isfinite(want)) worst = fmax(worst, fabs(got - want) / (1e-15 + 1e-13 * fabs(want)));
  }
  EXPECT(diag_normal_quantile(0.0) == -INFINITY, "normal quantile(0) = %g, want -inf", diag_normal_quantile(0.0));
  EXPECT(diag_normal_quantile(1.0) == INFINITY, "normal quantile(1) = %g, want +inf", diag_normal_quantile(1.0));
  EXPECT(isnan(diag_normal_quantile(-0.1)) && isnan(diag_normal_quantile(1.1)) && isnan(diag_normal_quantile(NAN)),
         "normal quantile outside [0, 1] or of NaN is not NaN");
  printf("normal quantile: %zu points, largest |difference| / tolerance %.2g against erfc-Newton\n", sizeof ps / sizeof ps[0],
         worst);
}

static void test_quantile_sorted(void) {
  uint64_t state = 11;
  const int64_t sizes[] = {1, 2, 3, 5, 20, 101, 4000};
  const double qs[] = {0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0, 0.333};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    const int64_t n = sizes[s];
    double *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; ++i) x[i] = 3.0 + 2.0 * normal(&state);
    if (n >= 20)
      for (int64_t i = 0; i < n; i += 3) x[i] = round(x[i]); /* ties */
    qsort(x, (size_t)n, sizeof *x, compare_double);
    for (size_t k = 0; k < sizeof qs / sizeof qs[0]; ++k) {
      const double got = diag_quantile_sorted(x, n, qs[k]), want = ref_quantile_linear(x, n, qs[k]);
      /* Same interpolation, rounded differently (numpy's _lerp from the nearer end). */
      EXPECT(close_to(got, want, 1e-15 * (fabs(x[0]) + fabs(x[n - 1])), 0),
             "quantile_sorted(n %lld, q %g) = %.17g, reference %.17g", (long long)n, qs[k], got, want);
    }
    free(x);
  }
  /* By hand: [1, 2, 4, 8], q 0.5 -> 3 (h = 1.5), q 0.9 -> 4 + 0.7 * 4 = 6.8. */
  const double small[] = {1, 2, 4, 8};
  EXPECT(close_to(diag_quantile_sorted(small, 4, 0.5), 3.0, 1e-15, 0), "quantile([1 2 4 8], 0.5) = %.17g",
         diag_quantile_sorted(small, 4, 0.5));
  EXPECT(close_to(diag_quantile_sorted(small, 4, 0.9), 6.8, 1e-14, 0), "quantile([1 2 4 8], 0.9) = %.17g",
         diag_quantile_sorted(small, 4, 0.9));
}

static void test_workspace_refusals(void) {
  diag_workspace_t *ws = (diag_workspace_t *)1;
  ds_error_clear();
  EXPECT(diag_workspace_create(&ws, 0, 10, 0) != DS_OK && ws == NULL, "0 chains accepted");
  ds_error_clear();
  EXPECT(diag_workspace_create(&ws, 4, 0, 0) != DS_OK && ws == NULL, "0 draws accepted");
  ds_error_clear();
  EXPECT(diag_workspace_create(&ws, 4, 10, 3) != DS_OK && ws == NULL, "superchains of 3 over 4 chains accepted");
  ds_error_clear();
  EXPECT(diag_workspace_create(&ws, 4, 10, -1) != DS_OK && ws == NULL, "negative superchain size accepted");
  ds_error_clear();
}

static void test_cases(void) {
  /* iid N(0, 1), 4 x 1000: ESS near the draw count, R-hat near 1. */
  {
    chains_case_t c = {"iid normal 4x1000", 4, 1000, 0, make_iid(101, 4, 1000, 0.0, 1.0)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(got.ess_bulk > 0.8 * 4000 && got.ess_bulk < 1.25 * 4000, "iid: ess_bulk %.1f not near 4000", got.ess_bulk);
    EXPECT(got.r_hat < 1.01, "iid: r_hat %.5f >= 1.01", got.r_hat);
    free(c.values);
  }
  /* iid, odd draw count: the split drops each chain's middle draw. */
  {
    chains_case_t c = {"iid normal 3x1001 (odd)", 3, 1001, 0, make_iid(102, 3, 1001, 5.0, 0.25)};
    check_against_reference(&c, NULL);
    free(c.values);
  }
  /* AR(1), rho 0.9: tau = (1 + rho) / (1 - rho) = 19, so ESS near 4000 / 19 = 210. */
  {
    chains_case_t c = {"AR(1) rho 0.9 4x1000", 4, 1000, 0, make_ar1(103, 4, 1000, 0.9, NULL)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(got.ess_bulk > 4000.0 / 19 / 2 && got.ess_bulk < 4000.0 / 19 * 2, "AR(1): ess_bulk %.1f not near 210",
           got.ess_bulk);
    EXPECT(got.ess_bulk < 0.2 * 4000, "AR(1): ess_bulk %.1f not far below 4000", got.ess_bulk);
    free(c.values);
  }
  /* AR(1), rho 0.99, an odd draw count whose split (1501) pads to a 5-smooth FFT length (3072)
   * unlike 2n: tau near 199, so Geyer's sums run over hundreds of lags. */
  {
    chains_case_t c = {"AR(1) rho 0.99 4x3003", 4, 3003, 0, make_ar1(117, 4, 3003, 0.99, NULL)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(got.ess_bulk < 0.05 * 4 * 3003, "AR(1) rho 0.99: ess_bulk %.1f not far below %d", got.ess_bulk, 4 * 3003);
    free(c.values);
  }
  /* AR(1) with chains at different means: R-hat far above 1. */
  {
    const double offsets[4] = {0.0, 0.0, 1.5, -1.5};
    chains_case_t c = {"AR(1) shifted chains 4x800", 4, 800, 0, make_ar1(104, 4, 800, 0.9, offsets)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(got.r_hat > 1.1, "shifted chains: r_hat %.5f not > 1.1", got.r_hat);
    free(c.values);
  }
  /* iid chains with different scales (same mean): the folded R-hat sees them. */
  {
    chains_case_t c = {"iid scales 1 and 3, 2x1000", 2, 1000, 0, make_iid(105, 2, 1000, 0.0, 1.0)};
    for (int64_t i = 1000; i < 2000; ++i) c.values[i] *= 3.0;
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(got.r_hat > 1.05, "different scales: r_hat %.5f not > 1.05 (folded R-hat)", got.r_hat);
    free(c.values);
  }
  /* Heavy ties (values on a grid of 0.5, -0.0 among them): average ranks, thresholds on ties. */
  {
    chains_case_t c = {"ties (grid 0.5) 4x500", 4, 500, 0, make_ar1(106, 4, 500, 0.5, NULL)};
    for (int64_t i = 0; i < 2000; ++i) c.values[i] = round(c.values[i] * 2.0) / 2.0;
    check_against_reference(&c, NULL);
    free(c.values);
  }
  /* Two values only (a Bernoulli parameter). */
  {
    chains_case_t c = {"two values 4x400", 4, 400, 0, make_iid(107, 4, 400, 0.0, 1.0)};
    for (int64_t i = 0; i < 1600; ++i) c.values[i] = c.values[i] > 0.8 ? 1.0 : 0.0;
    check_against_reference(&c, NULL);
    free(c.values);
  }
  /* A constant parameter: sd 0, MCSE of the mean 0, ESS the split draw count (ArviZ's shortcut),
   * MCSE of the sd and R-hat NaN (0 / 0). */
  {
    chains_case_t c = {"constant 2.5, 4x100", 4, 100, 0, malloc(400 * sizeof(double))};
    for (int64_t i = 0; i < 400; ++i) c.values[i] = 2.5;
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(got.mean == 2.5 && got.sd == 0.0 && got.q5 == 2.5 && got.q50 == 2.5 && got.q95 == 2.5,
           "constant: mean %g sd %g q %g %g %g", got.mean, got.sd, got.q5, got.q50, got.q95);
    EXPECT(got.ess_bulk == 400 && got.ess_tail == 400 && got.mcse_mean == 0.0,
           "constant: ess_bulk %g ess_tail %g (want 400), mcse_mean %g (want 0)", got.ess_bulk, got.ess_tail,
           got.mcse_mean);
    EXPECT(isnan(got.r_hat) && isnan(got.mcse_sd), "constant: r_hat %g, mcse_sd %g, want NaN", got.r_hat, got.mcse_sd);
    free(c.values);
  }
  /* Each chain constant, at its own level: within-chain variance 0, R-hat +inf. */
  {
    chains_case_t c = {"constant per chain 3x50", 3, 50, 0, malloc(150 * sizeof(double))};
    for (int64_t i = 0; i < 150; ++i) c.values[i] = (double)(i / 50) - 1.0;
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(isinf(got.r_hat) && got.r_hat > 0, "constant per chain: r_hat %g, want +inf", got.r_hat);
    free(c.values);
  }
  /* One chain: no R-hat; ESS still defined. */
  {
    chains_case_t c = {"one chain AR(1) 1x2000", 1, 2000, 0, make_ar1(108, 1, 2000, 0.9, NULL)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(isnan(got.r_hat) && !isnan(got.ess_bulk), "one chain: r_hat %g (want NaN), ess_bulk %g", got.r_hat,
           got.ess_bulk);
    free(c.values);
  }
  /* Too few draws (3 < 4): mean, sd and quantiles only. */
  {
    chains_case_t c = {"3 draws 4x3", 4, 3, 0, make_iid(109, 4, 3, 1.0, 1.0)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(isnan(got.ess_bulk) && isnan(got.ess_tail) && isnan(got.r_hat) && isnan(got.mcse_mean) &&
               !isnan(got.mean) && !isnan(got.q50),
           "3 draws: ess %g %g r_hat %g mcse %g should be NaN, mean %g q50 %g not", got.ess_bulk, got.ess_tail,
           got.r_hat, got.mcse_mean, got.mean, got.q50);
    free(c.values);
  }
  /* A single draw: the mean and quantiles are that draw, the sd (ddof 1) NaN. */
  {
    chains_case_t c = {"one draw 1x1", 1, 1, 0, malloc(sizeof(double))};
    c.values[0] = -1.75;
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(got.mean == -1.75 && got.q5 == -1.75 && got.q95 == -1.75 && isnan(got.sd) && isnan(got.ess_bulk),
           "one draw: mean %g q5 %g q95 %g sd %g ess %g", got.mean, got.q5, got.q95, got.sd, got.ess_bulk);
    free(c.values);
  }
  /* The smallest valid split (4 draws, 2 per half). */
  {
    chains_case_t c = {"4 draws 3x4", 3, 4, 0, make_iid(110, 3, 4, 0.0, 1.0)};
    check_against_reference(&c, NULL);
    free(c.values);
  }
  /* A NaN: every column NaN. */
  {
    chains_case_t c = {"one NaN 2x100", 2, 100, 0, make_iid(111, 2, 100, 0.0, 1.0)};
    c.values[137] = NAN;
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(isnan(got.mean) && isnan(got.sd) && isnan(got.q50) && isnan(got.ess_bulk) && isnan(got.r_hat),
           "NaN draw: columns not NaN");
    free(c.values);
  }
  /* Superchains: 8 chains in 4 superchains of 2 (starts shared within a superchain); then one
   * superchain shifted, which nested R-hat must see. */
  {
    const double offsets[8] = {0.3, 0.3, -0.2, -0.2, 0.1, 0.1, 0.0, 0.0};
    chains_case_t c = {"superchains 4 of 2, 8x60", 8, 60, 2, make_ar1(112, 8, 60, 0.7, offsets)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    for (int64_t i = 6 * 60; i < 8 * 60; ++i) c.values[i] += 4.0;
    c.name = "superchains, one shifted";
    diag_stats_t shifted;
    check_against_reference(&c, &shifted);
    EXPECT(shifted.r_hat_nested > 1.5 && shifted.r_hat_nested > got.r_hat_nested,
           "nested R-hat %.4f for a shifted superchain (unshifted %.4f)", shifted.r_hat_nested, got.r_hat_nested);
    free(c.values);
  }
  /* Superchains of one chain each (M = 1) and one draw per chain (N = 1; nested R-hat only). */
  {
    chains_case_t c = {"superchains of 1, 4x50", 4, 50, 1, make_iid(113, 4, 50, 0.0, 1.0)};
    check_against_reference(&c, NULL);
    free(c.values);
    chains_case_t d = {"superchains of 16, 64x1", 64, 1, 16, make_iid(114, 64, 1, 0.0, 1.0)};
    for (int64_t i = 0; i < 16; ++i) d.values[i] += 2.0;
    diag_stats_t got;
    check_against_reference(&d, &got);
    EXPECT(!isnan(got.r_hat_nested) && isnan(got.ess_bulk), "one draw per chain: nested %g (want a value), ess %g",
           got.r_hat_nested, got.ess_bulk);
    free(d.values);
  }
  /* One superchain only: nested R-hat undefined. */
  {
    chains_case_t c = {"one superchain 4x20", 4, 20, 4, make_iid(115, 4, 20, 0.0, 1.0)};
    diag_stats_t got;
    check_against_reference(&c, &got);
    EXPECT(isnan(got.r_hat_nested), "one superchain: nested R-hat %g, want NaN", got.r_hat_nested);
    free(c.values);
  }
  /* A larger location and scale (1e6 + 1e-3 x): the sums' rounding relative to the spread. */
  {
    chains_case_t c = {"offset 1e6 scale 1e-3 4x500", 4, 500, 0, make_ar1(116, 4, 500, 0.3, NULL)};
    for (int64_t i = 0; i < 2000; ++i) c.values[i] = 1e6 + 1e-3 * c.values[i];
    check_against_reference(&c, NULL);
    free(c.values);
  }
}

int main(void) {
  test_normal_quantile();
  test_quantile_sorted();
  test_workspace_refusals();
  test_cases();
  printf("largest |difference| / tolerance per column:");
  for (int i = 0; i < DIAG_N_STATS; ++i) printf(" %s %.2g", diag_stat_names[i], worst_ratio[i]);
  printf("\n");
  printf("diagnostics: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
