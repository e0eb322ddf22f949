/* diagnostics.c: ArviZ 0.22's diagnostics (arviz/stats/diagnostics.py, stats_utils.py) in C.
 *
 * The code follows ArviZ step by step rather than the papers, because users compare the two:
 * the same split (first and last floor(draws/2) draws of each chain, the middle one dropped),
 * the same rank normalisation (scipy's rankdata 'average' ties, Blom's (r - 3/8) / (S + 1/4),
 * the normal quantile), the same zero-padded FFT length (the next 5-smooth number >= 2n), the
 * same Geyer truncation and monotone correction, numpy's pairwise summation, numpy's linear
 * quantiles, and, for the tail ESS, scipy's mquantiles (type 7) to find the thresholds, so that
 * draws equal to a threshold fall on the same side. Python's max()/min() with NaN keep their
 * first argument; so do ours. */
#include "diagnostics.h"

#include <fftw3.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

const char *const diag_stat_names[DIAG_N_STATS] = {"mean", "sd", "mcse_mean", "mcse_sd", "q5",
                                                   "q50", "q95", "ess_bulk", "ess_tail", "r_hat",
                                                   "r_hat_nested"};

/* ArviZ refuses fewer draws than this (and fewer than 2 chains for R-hat) with NaN. */
enum { DIAG_MIN_DRAWS = 4, DIAG_MIN_CHAINS_RHAT = 2 };

struct diag_workspace {
  int64_t chains, draws;
  int64_t half;        /* draws per split chain */
  int64_t rows;        /* split chains: 2 * chains */
  int64_t n_all;       /* chains * draws */
  int64_t n_split;     /* rows * half */
  double *sorted_all;  /* n_all */
  double *centered_sq; /* n_all: (x - mean)^2 */
  double *split;       /* n_split */
  double *z;           /* n_split: rank-normalised values */
  double *scratch;     /* n_split */
  uint64_t *keys;      /* n_all: sort keys (radix sort), */
  uint64_t *keys_tmp;  /* n_all: and their second buffer */
  int64_t *order;      /* n_split: the positions the sorted keys came from, */
  int64_t *order_tmp;  /* n_split: and their second buffer */
  int64_t radix_counts[8][256];
  double *row_stat;    /* rows */
  double *row_var;     /* rows */
  double *acov_sum;    /* half: autocovariance summed over rows, per lag */
  double *rho;         /* half */
  int64_t fft_len;
  double *fft_real;
  fftw_complex *fft_complex;
  fftw_plan forward, backward;
  int64_t superchain_size;   /* chains per superchain; 0: none */
  double *chain_mean;        /* chains, then chain_var [superchain_size], */
  double *chain_var;         /* superchain_mean [superchains] and */
  double *superchain_mean;   /* superchain_within [superchains], all in chain_mean's block */
  double *superchain_within;
};

/* --- numpy's summation ----------------------------------------------------------------------- */

/* numpy's pairwise summation (8 accumulators, blocks of 128), of a[i] or (a[i] - center)^2. */
static double pairwise_sum(const double *a, int64_t n, double center, int squared) {
#define DIAG_TERM(i) (squared ? (a[i] - center) * (a[i] - center) : a[i])
  if (n < 8) {
    double sum = -0.0;
    for (int64_t i = 0; i < n; ++i) sum += DIAG_TERM(i);
    return sum;
  }
  if (n <= 128) {
    double acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = DIAG_TERM(j);
    int64_t i;
    for (i = 8; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += DIAG_TERM(i + j);
    double sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) sum += DIAG_TERM(i);
    return sum;
  }
#undef DIAG_TERM
  int64_t first = n / 2;
  first -= first % 8;
  return pairwise_sum(a, first, center, squared) + pairwise_sum(a + first, n - first, center, squared);
}

static double mean_of(const double *a, int64_t n) { return pairwise_sum(a, n, 0.0, 0) / (double)n; }

/* np.var(a, ddof=ddof): the mean first, then the sum of squared deviations. */
static double var_of(const double *a, int64_t n, int ddof) {
  double mean = mean_of(a, n);
  return pairwise_sum(a, n, mean, 1) / (double)(n - ddof);
}

static int has_nan(const double *a, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (isnan(a[i])) return 1;
  return 0;
}

/* --- sorting ------------------------------------------------------------------------------ */

/* Doubles as unsigned integers in the same order (NaN excluded by the callers; -0.0 sorts just
 * before +0.0, so equal values still sit side by side). */
static uint64_t sort_key(double value) {
  uint64_t bits;
  memcpy(&bits, &value, sizeof bits);
  return (bits >> 63) ? ~bits : bits | ((uint64_t)1 << 63);
}

static double key_value(uint64_t key) {
  uint64_t bits = (key >> 63) ? key & ~((uint64_t)1 << 63) : ~key;
  double value;
  memcpy(&value, &bits, sizeof value);
  return value;
}

/* LSD radix sort of keys[n], carrying order[n] along when it is not NULL: a parameter's draws
 * are sorted three times, and millions of draws per parameter are common, so a comparison sort
 * would dominate the summary. Bytes that all keys share are skipped. */
static void radix_sort(int64_t (*counts)[256], uint64_t *keys, int64_t *order, uint64_t *keys_tmp, int64_t *order_tmp,
                       int64_t n) {
  if (n < 2) return;
  memset(counts, 0, 8 * sizeof *counts);
  for (int64_t i = 0; i < n; ++i)
    for (int digit = 0; digit < 8; ++digit) ++counts[digit][(keys[i] >> (8 * digit)) & 255];
  uint64_t *keys_in = keys, *keys_out = keys_tmp;
  int64_t *order_in = order, *order_out = order_tmp;
  for (int digit = 0; digit < 8; ++digit) {
    int shift = 8 * digit;
    if (counts[digit][(keys_in[0] >> shift) & 255] == n) continue;
    int64_t offset[256], running = 0;
    for (int b = 0; b < 256; ++b) {
      offset[b] = running;
      running += counts[digit][b];
    }
    for (int64_t i = 0; i < n; ++i) {
      int64_t to = offset[(keys_in[i] >> shift) & 255]++;
      keys_out[to] = keys_in[i];
      if (order) order_out[to] = order_in[i];
    }
    uint64_t *swap_keys = keys_in;
    keys_in = keys_out;
    keys_out = swap_keys;
    int64_t *swap_order = order_in;
    order_in = order_out;
    order_out = swap_order;
  }
  if (keys_in != keys) {
    memcpy(keys, keys_in, (size_t)n * sizeof *keys);
    if (order) memcpy(order, order_in, (size_t)n * sizeof *order);
  }
}

/* ws->sorted_all: all draws, ascending. */
static void sort_all(diag_workspace_t *ws, const double *draws) {
  for (int64_t i = 0; i < ws->n_all; ++i) ws->keys[i] = sort_key(draws[i]);
  radix_sort(ws->radix_counts, ws->keys, NULL, ws->keys_tmp, NULL, ws->n_all);
  for (int64_t i = 0; i < ws->n_all; ++i) ws->sorted_all[i] = key_value(ws->keys[i]);
}

/* --- quantiles and the normal quantile function ------------------------------------------- */

double diag_quantile_sorted(const double *sorted, int64_t n, double q) {
  /* numpy: virtual index (n - 1) q, neighbours floor and floor + 1 (clamped), then _lerp,
   * which interpolates from the nearer end. */
  double virtual_index = (double)(n - 1) * q;
  double previous_floor = floor(virtual_index);
  int64_t previous, next;
  double gamma;
  if (virtual_index >= (double)(n - 1)) {
    previous = next = n - 1;
    gamma = 0.0;
  } else if (virtual_index < 0) {
    previous = next = 0;
    gamma = 0.0;
  } else {
    previous = (int64_t)previous_floor;
    next = previous + 1;
    gamma = virtual_index - previous_floor;
  }
  double a = sorted[previous], b = sorted[next];
  double diff_b_a = b - a;
  return gamma >= 0.5 ? b - diff_b_a * (1 - gamma) : a + diff_b_a * gamma;
}

/* scipy.stats.mstats.mquantiles(x, p, alphap=1, betap=1), ArviZ's quantile for the tail ESS. */
static double mquantile_type7(const double *sorted, int64_t n, double p) {
  if (n == 1) return sorted[0];
  double m = 1.0 + p * (1.0 - 1.0 - 1.0);
  double aleph = (double)n * p + m;
  double clipped = aleph < 1.0 ? 1.0 : (aleph > (double)(n - 1) ? (double)(n - 1) : aleph);
  int64_t k = (int64_t)floor(clipped);
  double gamma = aleph - (double)k;
  gamma = gamma < 0.0 ? 0.0 : (gamma > 1.0 ? 1.0 : gamma);
  return (1.0 - gamma) * sorted[k - 1] + gamma * sorted[k];
}

double diag_normal_quantile(double p) {
  /* Wichura, M. J. (1988) Algorithm AS 241 (PPND16), Applied Statistics 37, 477-484. */
  if (isnan(p) || p < 0.0 || p > 1.0) return NAN;
  if (p == 0.0) return -INFINITY;
  if (p == 1.0) return INFINITY;
  double q = p - 0.5;
  if (fabs(q) <= 0.425) {
    double r = 0.180625 - q * q;
    return q *
           (((((((2509.0809287301226727 * r + 33430.575583588128105) * r + 67265.770927008700853) * r +
                45921.953931549871457) * r + 13731.693765509461125) * r + 1971.5909503065514427) * r +
             133.14166789178437745) * r + 3.387132872796366608) /
           (((((((5226.495278852545925 * r + 28729.085735721942674) * r + 39307.89580009271061) * r +
                21213.794301586595867) * r + 5394.1960214247511077) * r + 687.1870074920579083) * r +
             42.313330701600911252) * r + 1.0);
  }
  double r = sqrt(-log(q < 0.0 ? p : 1.0 - p));
  double value;
  if (r <= 5.0) {
    r -= 1.6;
    value = (((((((7.7454501427834140764e-4 * r + 0.0227238449892691845833) * r + 0.24178072517745061177) * r +
                 1.27045825245236838258) * r + 3.64784832476320460504) * r + 5.7694972214606914055) * r +
              4.6303378461565452959) * r + 1.42343711074968357734) /
            (((((((1.05075007164441684324e-9 * r + 5.475938084995344946e-4) * r + 0.0151986665636164571966) * r +
                 0.14810397642748007459) * r + 0.68976733498510000455) * r + 1.6763848301838038494) * r +
              2.05319162663775882187) * r + 1.0);
  } else {
    r -= 5.0;
    value = (((((((2.01033439929228813265e-7 * r + 2.71155556874348757815e-5) * r + 0.0012426609473880784386) * r +
                 0.026532189526576123093) * r + 0.29656057182850489123) * r + 1.7848265399172913358) * r +
              5.4637849111641143699) * r + 6.6579046435011037772) /
            (((((((2.04426310338993978564e-15 * r + 1.4215117583164458887e-7) * r + 1.8463183175100546818e-5) * r +
                 7.868691311456132591e-4) * r + 0.0148753612908506148525) * r + 0.13692988092273580531) * r +
              0.59983220655588793769) * r + 1.0);
  }
  return q < 0.0 ? -value : value;
}

/* --- workspace --------------------------------------------------------------------------- */

/* scipy.fftpack.next_fast_len: the smallest 2^a 3^b 5^c >= target. */
static int64_t next_fast_len(int64_t target) {
  for (int64_t n = target > 1 ? target : 1;; ++n) {
    int64_t rest = n;
    while (rest % 2 == 0) rest /= 2;
    while (rest % 3 == 0) rest /= 3;
    while (rest % 5 == 0) rest /= 5;
    if (rest == 1) return n;
  }
}

int diag_workspace_create(diag_workspace_t **out, int64_t chains, int64_t draws, int64_t superchain_size) {
  *out = NULL;
  if (chains < 1 || draws < 1) return ds_fail(DS_ERR_INTERNAL, "diagnostics: %lld chains x %lld draws",
                                              (long long)chains, (long long)draws);
  if (superchain_size < 0 || (superchain_size > 0 && chains % superchain_size != 0))
    return ds_fail(DS_ERR_INTERNAL, "diagnostics: superchains of %lld chains do not divide %lld chains",
                   (long long)superchain_size, (long long)chains);
  diag_workspace_t *ws = calloc(1, sizeof *ws);
  if (!ws) return DS_FAIL_ALLOC("diagnostics workspace", sizeof *ws);
  ws->chains = chains;
  ws->draws = draws;
  ws->half = draws / 2;
  ws->rows = 2 * chains;
  ws->n_all = chains * draws;
  ws->n_split = ws->rows * ws->half;
  size_t n_all = (size_t)ws->n_all, n_split = (size_t)(ws->n_split > 0 ? ws->n_split : 1);
  size_t half = (size_t)(ws->half > 0 ? ws->half : 1);
  ws->sorted_all = malloc(n_all * sizeof(double));
  ws->centered_sq = malloc(n_all * sizeof(double));
  ws->split = malloc(n_split * sizeof(double));
  ws->z = malloc(n_split * sizeof(double));
  ws->scratch = malloc(n_split * sizeof(double));
  ws->keys = malloc(n_all * sizeof(uint64_t));
  ws->keys_tmp = malloc(n_all * sizeof(uint64_t));
  ws->order = malloc(n_split * sizeof(int64_t));
  ws->order_tmp = malloc(n_split * sizeof(int64_t));
  ws->row_stat = malloc((size_t)ws->rows * sizeof(double));
  ws->row_var = malloc((size_t)ws->rows * sizeof(double));
  ws->acov_sum = malloc(half * sizeof(double));
  ws->rho = malloc(half * sizeof(double));
  int ok = ws->sorted_all && ws->centered_sq && ws->split && ws->z && ws->scratch && ws->keys &&
           ws->keys_tmp && ws->order && ws->order_tmp &&
           ws->row_stat && ws->row_var && ws->acov_sum && ws->rho;
  if (ok && superchain_size > 0) {
    const int64_t superchains = chains / superchain_size;
    ws->superchain_size = superchain_size;
    ws->chain_mean = malloc((size_t)(chains + superchain_size + 2 * superchains) * sizeof(double));
    ok = ws->chain_mean != NULL;
    if (ok) {
      ws->chain_var = ws->chain_mean + chains;
      ws->superchain_mean = ws->chain_var + superchain_size;
      ws->superchain_within = ws->superchain_mean + superchains;
    }
  }
  if (ok && draws >= DIAG_MIN_DRAWS) {
    ws->fft_len = next_fast_len(2 * ws->half);
    ws->fft_real = fftw_malloc((size_t)ws->fft_len * sizeof(double));
    ws->fft_complex = fftw_malloc((size_t)(ws->fft_len / 2 + 1) * sizeof(fftw_complex));
    ok = ws->fft_real && ws->fft_complex;
    if (ok) {
      ws->forward = fftw_plan_dft_r2c_1d((int)ws->fft_len, ws->fft_real, ws->fft_complex, FFTW_ESTIMATE);
      ws->backward = fftw_plan_dft_c2r_1d((int)ws->fft_len, ws->fft_complex, ws->fft_real, FFTW_ESTIMATE);
      ok = ws->forward && ws->backward;
    }
  }
  if (!ok) {
    diag_workspace_free(ws);
    return DS_FAIL_ALLOC("diagnostics workspace", (size_t)(10 * n_all + 4 * half) * sizeof(double));
  }
  *out = ws;
  return DS_OK;
}

void diag_workspace_free(diag_workspace_t *ws) {
  if (!ws) return;
  if (ws->forward) fftw_destroy_plan(ws->forward);
  if (ws->backward) fftw_destroy_plan(ws->backward);
  fftw_free(ws->fft_real);
  fftw_free(ws->fft_complex);
  free(ws->sorted_all);
  free(ws->centered_sq);
  free(ws->split);
  free(ws->z);
  free(ws->scratch);
  free(ws->keys);
  free(ws->keys_tmp);
  free(ws->order);
  free(ws->order_tmp);
  free(ws->row_stat);
  free(ws->row_var);
  free(ws->acov_sum);
  free(ws->rho);
  free(ws->chain_mean);
  free(ws);
}

/* --- building blocks, each as its ArviZ function ------------------------------------------ */

/* _split_chains: row c holds chain c's first `half` draws, row chains + c its last `half`. */
static void split_chains(const diag_workspace_t *ws, const double *draws, double *split) {
  for (int64_t c = 0; c < ws->chains; ++c) {
    const double *chain = draws + c * ws->draws;
    memcpy(split + c * ws->half, chain, (size_t)ws->half * sizeof(double));
    memcpy(split + (ws->chains + c) * ws->half, chain + ws->draws - ws->half, (size_t)ws->half * sizeof(double));
  }
}

/* _z_scale: normal scores of the average ranks over all n values. Leaves ws->keys holding
 * the values' sort keys, ascending. */
static void z_scale(diag_workspace_t *ws, const double *values, int64_t n, double *z) {
  uint64_t *keys = ws->keys;
  int64_t *order = ws->order;
  for (int64_t i = 0; i < n; ++i) {
    keys[i] = sort_key(values[i]);
    order[i] = i;
  }
  radix_sort(ws->radix_counts, keys, order, ws->keys_tmp, ws->order_tmp, n);
  double denominator = (double)n - 2 * 0.375 + 1;
  for (int64_t begin = 0; begin < n;) {
    double value = key_value(keys[begin]);
    int64_t end = begin + 1;
    while (end < n && key_value(keys[end]) == value) ++end;
    /* scipy: 0.5 * (count[dense] + count[dense - 1] + 1), the mean 1-based rank of the ties. */
    double rank = 0.5 * (double)(end + begin + 1);
    double score = diag_normal_quantile((rank - 0.375) / denominator);
    for (int64_t i = begin; i < end; ++i) z[order[i]] = score;
    begin = end;
  }
}

/* _rhat of a [rows][n] array. */
static double rhat_basic(diag_workspace_t *ws, const double *a, int64_t rows, int64_t n) {
  if (has_nan(a, rows * n)) return NAN;
  for (int64_t r = 0; r < rows; ++r) {
    ws->row_stat[r] = mean_of(a + r * n, n);
    ws->row_var[r] = var_of(a + r * n, n, 1);
  }
  double between = (double)n * var_of(ws->row_stat, rows, 1);
  double within = mean_of(ws->row_var, rows);
  return sqrt((between / within + (double)n - 1) / (double)n);
}

/* _ess of a [rows][n] array (n >= 2): autocovariance by FFT, Geyer's initial positive and
 * initial monotone sequences. */
static double ess_basic(diag_workspace_t *ws, const double *a, int64_t rows, int64_t n) {
  int64_t total = rows * n;
  if (has_nan(a, total)) return NAN;
  double lo = a[0], hi = a[0];
  for (int64_t i = 1; i < total; ++i) {
    if (a[i] < lo) lo = a[i];
    if (a[i] > hi) hi = a[i];
  }
  if (hi - lo < 1e-15) return (double)total; /* np.finfo(float).resolution */

  /* autocov: demeaned rows, zero-padded to fft_len, |F|^2, inverse; FFTW leaves out the
   * 1/fft_len that numpy's irfft applies. */
  int64_t m = ws->fft_len;
  memset(ws->acov_sum, 0, (size_t)n * sizeof(double));
  for (int64_t r = 0; r < rows; ++r) {
    const double *row = a + r * n;
    double row_mean = mean_of(row, n);
    ws->row_stat[r] = row_mean;
    for (int64_t i = 0; i < n; ++i) ws->fft_real[i] = row[i] - row_mean;
    for (int64_t i = n; i < m; ++i) ws->fft_real[i] = 0.0;
    fftw_execute(ws->forward);
    for (int64_t k = 0; k < m / 2 + 1; ++k) {
      double re = ws->fft_complex[k][0], im = ws->fft_complex[k][1];
      ws->fft_complex[k][0] = re * re + im * im;
      ws->fft_complex[k][1] = 0.0;
    }
    fftw_execute(ws->backward);
    for (int64_t t = 0; t < n; ++t) ws->acov_sum[t] += ws->fft_real[t] / (double)m / (double)n;
  }
  const double *acov_sum = ws->acov_sum;
#define DIAG_ACOV_MEAN(t) (acov_sum[t] / (double)rows)
  double mean_var = DIAG_ACOV_MEAN(0) * (double)n / ((double)n - 1.0);
  double var_plus = mean_var * ((double)n - 1.0) / (double)n;
  if (rows > 1) var_plus += var_of(ws->row_stat, rows, 1);

  double *rho = ws->rho;
  memset(rho, 0, (size_t)n * sizeof(double));
  double rho_even = 1.0;
  rho[0] = rho_even;
  double rho_odd = 1.0 - (mean_var - DIAG_ACOV_MEAN(1)) / var_plus;
  rho[1] = rho_odd;

  int64_t t = 1;
  while (t < n - 3 && (rho_even + rho_odd) > 0.0) {
    rho_even = 1.0 - (mean_var - DIAG_ACOV_MEAN(t + 1)) / var_plus;
    rho_odd = 1.0 - (mean_var - DIAG_ACOV_MEAN(t + 2)) / var_plus;
    if ((rho_even + rho_odd) >= 0) {
      rho[t + 1] = rho_even;
      rho[t + 2] = rho_odd;
    }
    t += 2;
  }
#undef DIAG_ACOV_MEAN
  int64_t max_t = t - 2;
  if (rho_even > 0) rho[max_t + 1] = rho_even;
  for (t = 1; t <= max_t - 2; t += 2) {
    if ((rho[t + 1] + rho[t + 2]) > (rho[t - 1] + rho[t])) {
      rho[t + 1] = (rho[t - 1] + rho[t]) / 2.0;
      rho[t + 2] = rho[t + 1];
    }
  }
  double ess = (double)total;
  double tau_hat = -1.0 + 2.0 * pairwise_sum(rho, max_t + 1, 0.0, 0) + pairwise_sum(rho + max_t + 1, 1, 0.0, 0);
  double tau_floor = 1 / log10(ess);
  if (tau_floor > tau_hat) tau_hat = tau_floor;
  ess = ess / tau_hat;
  if (has_nan(rho, n)) ess = NAN;
  return ess;
}

/* Each diagnostic on ws->split, already filled by split_chains. */
static double ess_bulk_split(diag_workspace_t *ws) {
  z_scale(ws, ws->split, ws->n_split, ws->z);
  return ess_basic(ws, ws->z, ws->rows, ws->half);
}

static double rhat_rank_split(diag_workspace_t *ws, int z_ready) {
  if (!z_ready) z_scale(ws, ws->split, ws->n_split, ws->z);
  double rhat_bulk = rhat_basic(ws, ws->z, ws->rows, ws->half);
  /* z_scale left the split values' keys sorted; n_split is even. */
  int64_t mid = ws->n_split / 2;
  double median = (key_value(ws->keys[mid - 1]) + key_value(ws->keys[mid])) / 2;
  for (int64_t i = 0; i < ws->n_split; ++i) ws->scratch[i] = fabs(ws->split[i] - median);
  z_scale(ws, ws->scratch, ws->n_split, ws->scratch);
  double rhat_tail = rhat_basic(ws, ws->scratch, ws->rows, ws->half);
  return rhat_tail > rhat_bulk ? rhat_tail : rhat_bulk;
}

/* _ess_tail from the sorted draws: the split ESS of the indicators x <= q05 and x <= q95. */
static double ess_tail_sorted(diag_workspace_t *ws, const double *draws) {
  double ess_at[2];
  const double prob[2] = {0.05, 0.95};
  for (int side = 0; side < 2; ++side) {
    double threshold = mquantile_type7(ws->sorted_all, ws->n_all, prob[side]);
    split_chains(ws, draws, ws->scratch);
    for (int64_t i = 0; i < ws->n_split; ++i) ws->scratch[i] = ws->scratch[i] <= threshold ? 1.0 : 0.0;
    ess_at[side] = ess_basic(ws, ws->scratch, ws->rows, ws->half);
  }
  return ess_at[1] < ess_at[0] ? ess_at[1] : ess_at[0];
}

/* _mcse_mean with ws->split filled. */
static double mcse_mean_split(diag_workspace_t *ws, const double *draws) {
  double ess = ess_basic(ws, ws->split, ws->rows, ws->half);
  double sd = sqrt(var_of(draws, ws->n_all, 1));
  return sd / sqrt(ess);
}

/* _mcse_sd: the delta method on the ESS of the squared deviations. */
static double mcse_sd_all(diag_workspace_t *ws, const double *draws) {
  double mean = mean_of(draws, ws->n_all);
  for (int64_t i = 0; i < ws->n_all; ++i) ws->centered_sq[i] = (draws[i] - mean) * (draws[i] - mean);
  split_chains(ws, ws->centered_sq, ws->scratch);
  double ess = ess_basic(ws, ws->scratch, ws->rows, ws->half);
  double evar = mean_of(ws->centered_sq, ws->n_all);
  double mean_sq_sq = pairwise_sum(ws->centered_sq, ws->n_all, 0.0, 1) / (double)ws->n_all;
  double varvar = (mean_sq_sq - evar * evar) / ess;
  double varsd = varvar / evar / 4;
  return sqrt(varsd);
}

/* Nested R-hat of Margossian, Hoffman, Sountsov, Riou-Durand, Vehtari and Gelman, "Nested R-hat:
 * assessing the convergence of Markov chain Monte Carlo when running many short chains",
 * Bayesian Analysis (2024), equations 4 to 8: K superchains of M chains of N draws,
 *   B_nu = 1/(K-1) sum_k (mean_k - mean)^2                  (between superchains)
 *   B~_k = 1/(M-1) sum_m (mean_mk - mean_k)^2, 0 if M = 1   (between chains of superchain k)
 *   W~_k = 1/M sum_m s_mk^2, s^2 with ddof 1, 0 if N = 1     (within those chains)
 *   W_nu = 1/K sum_k (B~_k + W~_k),  R_nu = sqrt(1 + B_nu / W_nu).
 * Unlike classic R-hat there is no (N-1)/N factor, so R_nu >= 1 always, and with M = 1 it is
 * not quite classic R-hat (footnote 3 of the paper, as stan-dev/posterior's rhat_nested notes; it
 * computes the same formulas, and so does this). Plain, as the paper defines it: not split,
 * not rank-normalised. A superchain's chains are contiguous in [chain][draw] order, so its mean
 * is that of one block. W_nu = 0 (every chain constant and in agreement within its superchain)
 * gives IEEE's answer: inf when superchains differ, NaN when nothing varies at all. */
static double rhat_nested(diag_workspace_t *ws, const double *draws) {
  const int64_t per_superchain = ws->superchain_size, superchains = ws->chains / per_superchain, n = ws->draws;
  for (int64_t k = 0; k < superchains; ++k) {
    const double *block = draws + k * per_superchain * n;
    double *chain_mean = ws->chain_mean + k * per_superchain;
    ws->superchain_mean[k] = mean_of(block, per_superchain * n);
    for (int64_t m = 0; m < per_superchain; ++m) {
      chain_mean[m] = mean_of(block + m * n, n);
      ws->chain_var[m] = n > 1 ? pairwise_sum(block + m * n, n, chain_mean[m], 1) / (double)(n - 1) : 0.0;
    }
    const double between_chains =
        per_superchain > 1
            ? pairwise_sum(chain_mean, per_superchain, ws->superchain_mean[k], 1) / (double)(per_superchain - 1)
            : 0.0;
    ws->superchain_within[k] = between_chains + mean_of(ws->chain_var, per_superchain);
  }
  const double overall_mean = mean_of(ws->superchain_mean, superchains);
  const double between = pairwise_sum(ws->superchain_mean, superchains, overall_mean, 1) / (double)(superchains - 1);
  const double within = mean_of(ws->superchain_within, superchains);
  return sqrt(1.0 + between / within);
}

static int nested_valid(const diag_workspace_t *ws, const double *draws) {
  return ws->superchain_size > 0 && ws->chains / ws->superchain_size >= 2 && !has_nan(draws, ws->n_all);
}

/* --- public ------------------------------------------------------------------------------ */

void diag_summarize(diag_workspace_t *ws, const double *draws, diag_stats_t *out) {
  if (has_nan(draws, ws->n_all)) {
    /* As numpy and ArviZ: one NaN makes every column NaN. */
    *out = (diag_stats_t){NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    return;
  }
  /* Before the check on draws below: nested R-hat is made for many short chains, one draw each
   * included. */
  out->r_hat_nested = nested_valid(ws, draws) ? rhat_nested(ws, draws) : NAN;
  out->mean = mean_of(draws, ws->n_all);
  out->sd = ws->n_all > 1 ? sqrt(var_of(draws, ws->n_all, 1)) : NAN;
  sort_all(ws, draws);
  out->q5 = diag_quantile_sorted(ws->sorted_all, ws->n_all, 0.05);
  out->q50 = diag_quantile_sorted(ws->sorted_all, ws->n_all, 0.50);
  out->q95 = diag_quantile_sorted(ws->sorted_all, ws->n_all, 0.95);
  out->mcse_mean = out->mcse_sd = out->ess_bulk = out->ess_tail = out->r_hat = NAN;
  if (ws->draws < DIAG_MIN_DRAWS) return;

  split_chains(ws, draws, ws->split);
  out->ess_bulk = ess_bulk_split(ws);
  if (ws->chains >= DIAG_MIN_CHAINS_RHAT) out->r_hat = rhat_rank_split(ws, 1);
  out->mcse_mean = mcse_mean_split(ws, draws);
  out->mcse_sd = mcse_sd_all(ws, draws);
  out->ess_tail = ess_tail_sorted(ws, draws);
}
