/* backend_cpu.c: the CPU backend: the reference implementation of every backend entry,
 * tiled for cache and parallel over local rows (or chains) with OpenMP. Results do not
 * depend on the thread count: each row's sums run over j in one fixed order. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "exactsum.h"
#include "rng.h"
#include "status.h"
#include "dense_metric.h"
#include "svgd_kernel_math.h"
#include "order_key.h"

/* Columns processed together: their distances vectorise across lanes, each lane summing
 * over k in the fixed order, so the rounding is that of the scalar loop. */
#define CPU_COLUMN_BLOCK 16
/* Chains stepped together in one target call. */
#define CPU_HMC_CHAIN_BLOCK 64
/* Element counts below which a loop runs on one thread: a parallel region costs more. */
#define CPU_PARALLEL_MIN 65536

typedef struct cpu_impl {
  float *columns_t;       /* x_all transposed, [dim, n]: a block's k-th coordinates adjacent */
  size_t columns_t_floats;
  float *v_all;           /* v_j = s_j - x_j / h, [n, dim] */
  size_t v_all_floats;
  uint64_t *pair_counts;  /* SVGD_WINDOW_COUNTS: svgd_pair_counts' result */
  float *centred;         /* the GEMM identity's rows y = x - x_0, [n, dim], then |y_j|^2, [n] */
  size_t centred_floats;
  double marks[BACKEND_TIMER_SLOTS]; /* --timing's marks: the clock, in seconds */
} cpu_impl_t;

static int cpu_alloc(backend_t *b, void **ptr, size_t bytes) {
  (void)b;
  *ptr = NULL;
  if (bytes == 0) return DS_OK;
  if (posix_memalign(ptr, 64, bytes) != 0) {
    *ptr = NULL;
    return DS_FAIL_ALLOC("a host array", bytes);
  }
  return DS_OK;
}

static void cpu_release(backend_t *b, void *ptr) {
  (void)b;
  free(ptr);
}

static int cpu_copy(backend_t *b, void *dst, const void *src, size_t bytes) {
  (void)b;
  if (bytes) memmove(dst, src, bytes);
  return DS_OK;
}

static int cpu_synchronize(backend_t *b) {
  (void)b;
  return DS_OK;
}

static int cpu_timer_mark(backend_t *b, int slot) {
  if (slot < 0 || slot >= BACKEND_TIMER_SLOTS) return ds_fail(DS_ERR_INTERNAL, "timer slot %d", slot);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ((cpu_impl_t *)b->impl)->marks[slot] = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
  return DS_OK;
}

static int cpu_timer_elapsed(backend_t *b, int from, int to, double *ms) {
  if (from < 0 || to < 0 || from >= BACKEND_TIMER_SLOTS || to >= BACKEND_TIMER_SLOTS)
    return ds_fail(DS_ERR_INTERNAL, "timer slots %d, %d", from, to);
  const double *marks = ((cpu_impl_t *)b->impl)->marks;
  *ms = 1e3 * (marks[to] - marks[from]);
  return DS_OK;
}

static int cpu_key_histogram(backend_t *b, const float *values, int64_t rows, int clamp_zero, uint32_t prefix,
                             int prefix_bits, int shift, int bits, uint64_t *bins) {
  (void)b;
  const uint32_t mask = (1u << bits) - 1u;
  memset(bins, 0, ((size_t)mask + 2) * sizeof *bins);
  for (int64_t r = 0; r < rows; ++r) {
    const float v = clamp_zero ? fmaxf(values[r], 0.0f) : values[r];
    const uint32_t u = order_float_bits(v);
    if (!order_bits_finite(u)) {
      if (prefix_bits == 0) bins[mask + 1] += 1;
      continue;
    }
    const uint32_t key = order_key_of_bits(u);
    if (prefix_bits > 0 && (key >> (32 - prefix_bits)) != prefix) continue;
    bins[(key >> shift) & mask] += 1;
  }
  return DS_OK;
}

static int cpu_logp_grad(backend_t *b, const dsampler_target *t, const float *x, int64_t n,
                         float *logp, float *grad) {
  (void)b;
  if (n == 0) return DS_OK;
  int rc = t->logp_grad(t->self, x, n, logp, grad);
  if (rc != 0) return ds_fail(DS_ERR_TARGET, "target '%s': logp_grad failed (returned %d)", t->name, rc);
  return DS_OK;
}

static int ensure_scratch(float **buf, size_t *have, size_t want) {
  if (*have >= want) return DS_OK;
  free(*buf);
  *buf = NULL;
  *have = 0;
  if (posix_memalign((void **)buf, 64, want * sizeof(float)) != 0) {
    *buf = NULL;
    return DS_FAIL_ALLOC("SVGD scratch", want * sizeof(float));
  }
  *have = want;
  return DS_OK;
}

static void transpose_columns(const float *x_all, int64_t n, int64_t dim, float *columns_t) {
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < dim; ++k)
    for (int64_t j = 0; j < n; ++j) columns_t[k * n + j] = x_all[j * dim + k];
}

/* The rows of the median's distances: x itself (direct differences), or, for the GEMM
 * identity (svgd_kernel_math.h), y = x - x_0 with squares[j] = |y_j|^2. columns_t is the same
 * rows transposed. */
typedef struct pair_rows {
  const float *rows, *columns_t, *squares;
  int64_t n, dim;
} pair_rows_t;

/* Squared distances from row i to columns [j0, j0 + CPU_COLUMN_BLOCK). */
static inline void distance_block(const pair_rows_t *p, int64_t i, int64_t j0, float *dist) {
  const float *x_i = p->rows + i * p->dim;
  float acc[CPU_COLUMN_BLOCK] = {0};
  if (p->squares) {
    for (int64_t k = 0; k < p->dim; ++k) {
      const float xik = x_i[k];
      const float *col = p->columns_t + k * p->n + j0;
      for (int c = 0; c < CPU_COLUMN_BLOCK; ++c) acc[c] = fmaf(xik, col[c], acc[c]);
    }
    for (int c = 0; c < CPU_COLUMN_BLOCK; ++c) acc[c] = svgd_gemm_distance(p->squares[i], p->squares[j0 + c], acc[c]);
  } else {
    for (int64_t k = 0; k < p->dim; ++k) {
      const float xik = x_i[k];
      const float *col = p->columns_t + k * p->n + j0;
      for (int c = 0; c < CPU_COLUMN_BLOCK; ++c) {
        float diff = xik - col[c];
        acc[c] = fmaf(diff, diff, acc[c]);
      }
    }
  }
  memcpy(dist, acc, sizeof acc);
}

/* The same, one column: the rounding is identical, lane for lane. */
static inline float distance_one(const pair_rows_t *p, int64_t i, int64_t j) {
  const float *x_i = p->rows + i * p->dim;
  float acc = 0.0f;
  if (p->squares) {
    for (int64_t k = 0; k < p->dim; ++k) acc = fmaf(x_i[k], p->columns_t[k * p->n + j], acc);
    return svgd_gemm_distance(p->squares[i], p->squares[j], acc);
  }
  for (int64_t k = 0; k < p->dim; ++k) {
    float diff = x_i[k] - p->columns_t[k * p->n + j];
    acc = fmaf(diff, diff, acc);
  }
  return acc;
}

/* Distances from row i to the next block of columns from j (CPU_COLUMN_BLOCK, fewer at the end);
 * returns how many. */
static inline int distance_columns(const pair_rows_t *p, int64_t i, int64_t j, float *dist) {
  const int width = p->n - j < CPU_COLUMN_BLOCK ? (int)(p->n - j) : CPU_COLUMN_BLOCK;
  if (width == CPU_COLUMN_BLOCK)
    distance_block(p, i, j, dist);
  else
    for (int c = 0; c < width; ++c) dist[c] = distance_one(p, i, j + c);
  return width;
}

static inline uint32_t float_bits(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

/* select_bits: PASS_LOW's top 16 bits, PASS_WINDOW's window start (backend.h). */
static inline void count_distance(float dist, int pass, uint32_t select_bits, uint64_t *hist) {
  uint32_t bits = float_bits(dist);
  if (pass == SVGD_MEDIAN_PASS_HIGH) {
    hist[bits >> 16] += 2;
  } else if (pass == SVGD_MEDIAN_PASS_LOW) {
    if ((bits >> 16) == select_bits) hist[bits & 0xFFFFu] += 2;
  } else {
    const uint32_t offset = bits - select_bits; /* wraps for keys below the window */
    if (offset < SVGD_WINDOW_FINE_BINS)
      hist[SVGD_WINDOW_FINE + offset] += 2;
    else
      hist[bits < select_bits ? SVGD_WINDOW_BELOW : SVGD_WINDOW_ABOVE] += 2;
  }
}

/* Counts pairs (i, j) for j in the contiguous column range [j_begin, j_end). */
static void count_segment(const pair_rows_t *p, int64_t i, int64_t j_begin, int64_t j_end, int pass,
                          uint32_t select_bits, uint64_t *hist) {
  float dist[CPU_COLUMN_BLOCK];
  int64_t j = j_begin;
  for (; j + CPU_COLUMN_BLOCK <= j_end; j += CPU_COLUMN_BLOCK) {
    distance_block(p, i, j, dist);
    for (int c = 0; c < CPU_COLUMN_BLOCK; ++c) count_distance(dist[c], pass, select_bits, hist);
  }
  for (; j < j_end; ++j) count_distance(distance_one(p, i, j), pass, select_bits, hist);
}

/* y = x - x_0 and squares[j] = |y_j|^2 (svgd_kernel_math.h), into rows (n x dim) and squares. */
static void centre_rows(const float *x_all, int64_t n, int64_t dim, float *rows, float *squares) {
#pragma omp parallel for schedule(static) if (n * dim > CPU_PARALLEL_MIN)
  for (int64_t j = 0; j < n; ++j) {
    float sum = 0.0f;
    for (int64_t k = 0; k < dim; ++k) {
      const float y = x_all[j * dim + k] - x_all[k];
      rows[j * dim + k] = y;
      sum = fmaf(y, y, sum);
    }
    squares[j] = sum;
  }
}

static int cpu_svgd_pair_histogram(backend_t *b, const float *x_all, int64_t n, int64_t dim,
                                   int64_t row_begin, int64_t row_end, int pass,
                                   uint32_t select_bits, uint64_t *hist) {
  cpu_impl_t *impl = b->impl;
  if (pass != SVGD_MEDIAN_PASS_HIGH && pass != SVGD_MEDIAN_PASS_LOW && pass != SVGD_MEDIAN_PASS_WINDOW)
    return ds_fail(DS_ERR_INTERNAL, "svgd_pair_histogram: bad pass %d", pass);
  if (n < 2 || row_end <= row_begin) return DS_OK;
  const int counts = pass == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_COUNTS : SVGD_HIST_BINS;
  pair_rows_t p = {x_all, NULL, NULL, n, dim};
  if (svgd_median_by_gemm(dim)) {
    DS_TRY(ensure_scratch(&impl->centred, &impl->centred_floats, (size_t)(n * dim + n)));
    centre_rows(x_all, n, dim, impl->centred, impl->centred + n * dim);
    p.rows = impl->centred;
    p.squares = impl->centred + n * dim;
  }
  DS_TRY(ensure_scratch(&impl->columns_t, &impl->columns_t_floats, (size_t)(n * dim)));
  transpose_columns(p.rows, n, dim, impl->columns_t);
  p.columns_t = impl->columns_t;
  const int64_t half = n / 2;
  int failed = 0;
#pragma omp parallel
  {
    uint64_t *local = calloc((size_t)counts, sizeof *local);
    if (!local) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic, 8)
    for (int64_t i = row_begin; i < row_end; ++i) {
      if (!local) continue;
      int64_t span = half;
      if (n % 2 == 0 && i >= half) span = half - 1; /* the pair at distance n/2 counted once */
      int64_t first = i + 1, last = i + span; /* j in [first, last] modulo n */
      int64_t end_direct = last < n ? last + 1 : n;
      count_segment(&p, i, first, end_direct, pass, select_bits, local);
      if (last >= n) count_segment(&p, i, 0, last - n + 1, pass, select_bits, local);
    }
    if (local) {
#pragma omp critical
      for (int bin = 0; bin < counts; ++bin) hist[bin] += local[bin];
      free(local);
    }
  }
  if (failed) return DS_FAIL_ALLOC("a histogram", (size_t)counts * sizeof(uint64_t));
  return DS_OK;
}

static int cpu_svgd_pair_counts(backend_t *b, const float *x_all, int64_t n, int64_t dim, int64_t row_begin,
                                int64_t row_end, int pass, uint32_t select_bits, uint64_t **counts) {
  cpu_impl_t *impl = b->impl;
  *counts = NULL;
  if (!impl->pair_counts) {
    impl->pair_counts = malloc(SVGD_WINDOW_COUNTS * sizeof *impl->pair_counts);
    if (!impl->pair_counts) return DS_FAIL_ALLOC("the median's counts", SVGD_WINDOW_COUNTS * sizeof(uint64_t));
  }
  const int used = pass == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_COUNTS : SVGD_HIST_BINS;
  memset(impl->pair_counts, 0, (size_t)used * sizeof *impl->pair_counts);
  DS_TRY(cpu_svgd_pair_histogram(b, x_all, n, dim, row_begin, row_end, pass, select_bits, impl->pair_counts));
  *counts = impl->pair_counts;
  return DS_OK;
}

/* IMQ phi of row i into phi_i: k_ii s_i + sum_{j != i} (k_ij s_j - w_ij x_j) + x_i sum_{j != i} w_ij, over n. */
static void imq_phi_row(const pair_rows_t *p, const float *score_all, int64_t i, const svgd_kernel_t *kernel,
                        float *sum_ks, float *sum_wx, float *phi_i) {
  const float *x_all = p->rows;
  const int64_t n = p->n, dim = p->dim;
  const float *x_i = x_all + i * dim;
  float sum_w = 0.0f, dist[CPU_COLUMN_BLOCK];
  for (int64_t k = 0; k < dim; ++k) sum_ks[k] = sum_wx[k] = 0.0f;
  for (int64_t j = 0; j < n; j += CPU_COLUMN_BLOCK) {
    const int width = distance_columns(p, i, j, dist);
    for (int c = 0; c < width; ++c) {
      if (j + c == i) continue;
      float value, weight;
      svgd_kernel_pair(kernel, dist[c], &value, &weight);
      const float *s_j = score_all + (j + c) * dim, *x_j = x_all + (j + c) * dim;
      sum_w += weight;
      for (int64_t k = 0; k < dim; ++k) {
        sum_ks[k] = fmaf(value, s_j[k], sum_ks[k]);
        sum_wx[k] = fmaf(weight, x_j[k], sum_wx[k]);
      }
    }
  }
  const float diagonal = svgd_kernel_diagonal(kernel), inv_n = 1.0f / (float)n;
  const float *s_i = score_all + i * dim;
  for (int64_t k = 0; k < dim; ++k)
    phi_i[k] = (diagonal * s_i[k] + (sum_ks[k] - sum_wx[k]) + x_i[k] * sum_w) * inv_n;
}

static int cpu_svgd_phi(backend_t *b, const float *x_all, const float *score_all, int64_t n,
                        int64_t dim, int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, float *phi) {
  cpu_impl_t *impl = b->impl;
  if (row_end <= row_begin) return DS_OK;
  const float h = kernel->h;
  DS_TRY(ensure_scratch(&impl->columns_t, &impl->columns_t_floats, (size_t)(n * dim)));
  transpose_columns(x_all, n, dim, impl->columns_t);
  const pair_rows_t pairs = {x_all, impl->columns_t, NULL, n, dim};
  const int rbf = kernel->kind == SVGD_KERNEL_RBF;
  float *v_all = NULL; /* rbf only: s_j - x_j / h */
  if (rbf) {
    DS_TRY(ensure_scratch(&impl->v_all, &impl->v_all_floats, (size_t)(n * dim)));
    v_all = impl->v_all;
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < n * dim; ++e) v_all[e] = score_all[e] - x_all[e] / h;
  }

  const float neg_half_inv_h = -0.5f / h;
  int failed = 0;
#pragma omp parallel
  {
    float *sum_kv = malloc((size_t)(2 * dim) * sizeof *sum_kv);
    if (!sum_kv) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic, 4)
    for (int64_t i = row_begin; i < row_end; ++i) {
      if (!sum_kv) continue;
      float *phi_i = phi + (i - row_begin) * dim;
      if (!rbf) {
        imq_phi_row(&pairs, score_all, i, kernel, sum_kv, sum_kv + dim, phi_i);
        continue;
      }
      const float *x_i = x_all + i * dim;
      float sum_k = 0.0f;
      for (int64_t k = 0; k < dim; ++k) sum_kv[k] = 0.0f;
      float dist[CPU_COLUMN_BLOCK];
      for (int64_t j = 0; j < n; j += CPU_COLUMN_BLOCK) {
        const int width = distance_columns(&pairs, i, j, dist);
        for (int c = 0; c < width; ++c) {
          /* j = i adds s_i exactly, below; through v it would cancel x_i / h against itself. */
          if (j + c == i) continue;
          float kernel_value = expf(dist[c] * neg_half_inv_h);
          const float *v_j = v_all + (j + c) * dim;
          sum_k += kernel_value;
          for (int64_t k = 0; k < dim; ++k) sum_kv[k] = fmaf(kernel_value, v_j[k], sum_kv[k]);
        }
      }
      const float inv_n = 1.0f / (float)n;
      const float *s_i = score_all + i * dim;
      for (int64_t k = 0; k < dim; ++k) phi_i[k] = (s_i[k] + sum_kv[k] + x_i[k] * sum_k / h) * inv_n;
    }
    free(sum_kv);
  }
  if (failed) return DS_FAIL_ALLOC("phi accumulators", (size_t)dim * sizeof(float));
  return DS_OK;
}

/* Row i's Stein sum (backend.h's svgd_stein_sum): u_ii + 2 sum over its pairs, k ascending,
 * each pair's D, A and S summed over coordinates in order with fmaf, the pairs in double. */
static double stein_row(const float *x_all, const float *score_all, int64_t n, int64_t dim, int64_t i,
                        const svgd_kernel_t *kernel) {
  const int64_t half = n / 2;
  const int64_t span = (n % 2 == 0 && i >= half) ? half - 1 : half;
  const float *x_i = x_all + i * dim, *s_i = score_all + i * dim;
  double row = 0.0;
  for (int64_t offset = 1; offset <= span; ++offset) {
    int64_t j = i + offset;
    if (j >= n) j -= n;
    const float *x_j = x_all + j * dim, *s_j = score_all + j * dim;
    float distance = 0.0f, along = 0.0f, scores = 0.0f;
    for (int64_t k = 0; k < dim; ++k) {
      const float r = x_i[k] - x_j[k], t = s_i[k] - s_j[k];
      distance = fmaf(r, r, distance);
      along = fmaf(t, r, along);
      scores = fmaf(s_i[k], s_j[k], scores);
    }
    row += svgd_stein_pair(kernel, (double)dim, distance, along, scores);
  }
  float square = 0.0f;
  for (int64_t k = 0; k < dim; ++k) square = fmaf(s_i[k], s_i[k], square);
  return svgd_stein_diagonal(kernel, (double)dim, square) + 2.0 * row;
}

static int cpu_svgd_stein_sum(backend_t *b, const float *x_all, const float *score_all, int64_t n, int64_t dim,
                              int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, exact_sum_t *sum) {
  (void)b;
  exact_sum_clear(sum);
  int failed = 0;
#pragma omp parallel
  {
    exact_sum_t mine;
    exact_sum_clear(&mine);
#pragma omp for schedule(dynamic, 4) reduction(| : failed)
    for (int64_t i = row_begin; i < row_end; ++i)
    {
      double row = stein_row(x_all, score_all, n, dim, i, kernel);
      if (fabs(row) < 1e-300) row = 0.0; /* below the exact sum's range, and of no weight */
      failed |= exact_sum_add(&mine, row) != 0;
    }
#pragma omp critical
    exact_sum_merge(sum, &mine);
  }
  if (failed)
    return ds_fail(DS_ERR_TARGET, "kernel Stein discrepancy: a particle's Stein kernel sum is not finite "
                                  "(particles or scores out of range)");
  return DS_OK;
}

static int cpu_svgd_update(backend_t *b, float *x, const float *phi, float *g, int64_t count,
                           svgd_update_t kind, float step, int64_t iteration) {
  (void)b;
  if (kind == SVGD_UPDATE_SGD) {
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < count; ++e) x[e] += step * phi[e];
    return DS_OK;
  }
  if (kind == SVGD_UPDATE_ADAM) {
    float correction1, correction2;
    svgd_adam_bias(iteration, &correction1, &correction2);
    float *m = g, *v = g + count;
#pragma omp parallel for schedule(static)
    for (int64_t e = 0; e < count; ++e) {
      const float m_old = iteration == 0 ? 0.0f : m[e], v_old = iteration == 0 ? 0.0f : v[e];
      m[e] = 0.9f * m_old + 0.1f * phi[e];
      v[e] = 0.999f * v_old + 0.001f * (phi[e] * phi[e]);
      x[e] += step * (m[e] / correction1) / (sqrtf(v[e] / correction2) + 1e-8f);
    }
    return DS_OK;
  }
  const int first_iteration = iteration == 0;
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < count; ++e) {
    float phi2 = phi[e] * phi[e];
    g[e] = first_iteration ? phi2 : 0.9f * g[e] + 0.1f * phi2;
    x[e] += step * phi[e] / (1e-6f + sqrtf(g[e]));
  }
  return DS_OK;
}

/* Draws the momentum p = z / sqrt(m_inv) (z itself without inv_metric: a dense metric's
 * whitened momentum) and the accept uniform of one chain. */
static void hmc_draw(uint64_t seed, uint64_t chain, uint32_t iteration, int64_t dim,
                     const float *inv_metric, float *p, float *uniform) {
  rng_words_t block = {{0, 0, 0, 0}};
  const uint32_t uniform_word = rng_hmc_uniform_word(dim);
  for (uint32_t word = 0; word <= uniform_word; word += 2) {
    if (word % 4 == 0) block = rng_block(seed, chain, iteration, word / 4);
    uint32_t w0 = block.v[word % 4], w1 = block.v[word % 4 + 1];
    if (word == uniform_word) {
      *uniform = rng_uniform(w0);
      break;
    }
    float z0, z1;
    rng_normal_pair(w0, w1, &z0, &z1);
    int64_t k = word;
    p[k] = inv_metric ? z0 / sqrtf(inv_metric[k]) : z0;
    if (k + 1 < dim) p[k + 1] = inv_metric ? z1 / sqrtf(inv_metric[k + 1]) : z1;
  }
}

/* p' M^-1 p / 2; with inv_metric NULL (a dense metric's whitened momentum) |p|^2 / 2. */
static double kinetic_energy(const float *p, const float *inv_metric, int64_t dim) {
  double sum = 0.0;
  for (int64_t k = 0; k < dim; ++k) sum += (inv_metric ? (double)inv_metric[k] : 1.0) * (double)p[k] * (double)p[k];
  return 0.5 * sum;
}

/* A dense metric's kick and drift for one chain (backend.h): r += kick L^T g, q += eps L r;
 * scratch [dim]. */
static void dense_kick_drift(const float *L, int64_t dim, float kick, float eps, const float *g, float *r, float *q,
                             float *scratch) {
  for (int64_t k = 0; k < dim; ++k) scratch[k] = dense_lt_dot(L, dim, g, k);
  for (int64_t k = 0; k < dim; ++k) r[k] += kick * scratch[k];
  for (int64_t i = 0; i < dim; ++i) scratch[i] = dense_l_dot(L, dim, r, i);
  for (int64_t i = 0; i < dim; ++i) q[i] += eps * scratch[i];
}

/* Adds the chain's state to its running moments (backend.h's formula, in float). */
static void hmc_add_moments(hmc_batch_t *batch, int64_t chain) {
  const int64_t dim = batch->dim;
  const float n = (float)batch->moment_count;
  const float *q = batch->q + chain * dim;
  float *mean = batch->moment_mean + chain * dim, *m2 = batch->moment_m2 + chain * dim;
  for (int64_t k = 0; k < dim; ++k) {
    const float delta = q[k] - mean[k];
    mean[k] += delta / n;
    m2[k] += delta * (q[k] - mean[k]);
  }
}

/* The target at the block's positions q [count, dim]: the float entry, or with wide scratch
 * (batch->logp_wide set) the float64 one, whose log p stays in wide_logp [count] and whose
 * gradient is rounded to float as the state keeps it. */
static int block_logp_grad(const dsampler_target *t, const float *q, int64_t count, int64_t dim, float *logp,
                           float *grad, double *wide) {
  int rc;
  if (wide) {
    double *x = wide + count, *g = x + count * dim;
    for (int64_t e = 0; e < count * dim; ++e) x[e] = (double)q[e];
    rc = t->logp_grad_f64(t->self, x, count, wide, g);
    for (int64_t e = 0; rc == 0 && e < count * dim; ++e) grad[e] = (float)g[e];
    for (int64_t c = 0; rc == 0 && c < count; ++c) logp[c] = (float)wide[c];
  } else {
    rc = t->logp_grad(t->self, q, count, logp, grad);
  }
  if (rc != 0) return ds_fail(DS_ERR_TARGET, "target '%s': logp_grad failed (returned %d)", t->name, rc);
  return DS_OK;
}

/* One iteration for the chains list [count] of the batch, with scratch for `count` chains
 * (wide: [count (2 dim + 1)] doubles when batch->logp_wide is set, else NULL). */
static int hmc_block(const dsampler_target *t, hmc_batch_t *batch, const int64_t *list, int64_t count,
                     float *q, float *p, float *grad, float *logp, float *uniform, double *h0, double *wide,
                     float *scratch) {
  const int64_t dim = batch->dim;
  const float *factors = batch->metric_factor;
  /* Chain c's factor: the one shared, or its own (backend.h's factor_per_chain). */
  const int64_t factor_stride = batch->factor_per_chain ? 2 * dim * dim : 0;
  const int64_t inverse_stride = batch->factor_per_chain ? dim * dim : 0;
  const float *L = factors;
  for (int64_t c = 0; c < count; ++c) {
    const int64_t chain = list[c];
    const float *inv_metric = L ? NULL : batch->inv_metric + (batch->shared_metric ? 0 : chain * dim);
    batch->step_size[chain] = rng_hmc_jittered_step(batch->seed, (uint64_t)(batch->chain_begin + chain),
                                                    batch->iteration, dim, batch->step_nominal[chain], batch->jitter);
    hmc_draw(batch->seed, (uint64_t)(batch->chain_begin + chain), batch->iteration, dim,
             inv_metric, p + c * dim, uniform + c);
    const double logp_start = wide ? batch->logp_wide[chain] : (double)batch->logp[chain];
    h0[c] = -logp_start + kinetic_energy(p + c * dim, inv_metric, dim);
  }
  for (int64_t c = 0; c < count; ++c) {
    memcpy(q + c * dim, batch->q + list[c] * dim, (size_t)dim * sizeof *q);
    memcpy(grad + c * dim, batch->grad + list[c] * dim, (size_t)dim * sizeof *grad);
  }

  for (int step = 0; step < batch->n_leapfrog; ++step) {
    for (int64_t c = 0; c < count; ++c) {
      const float eps = batch->step_size[list[c]];
      const float *inv_metric = batch->inv_metric + (batch->shared_metric ? 0 : list[c] * dim);
      float *p_c = p + c * dim, *q_c = q + c * dim;
      const float *g_c = grad + c * dim;
      /* The first half kick; later kicks are whole, the last is halved below. */
      const float kick = step == 0 ? 0.5f * eps : eps;
      if (L) {
        dense_kick_drift(factors + list[c] * factor_stride, dim, kick, eps, g_c, p_c, q_c, scratch);
        continue;
      }
      for (int64_t k = 0; k < dim; ++k) p_c[k] += kick * g_c[k];
      for (int64_t k = 0; k < dim; ++k) q_c[k] += eps * inv_metric[k] * p_c[k];
    }
    DS_TRY(block_logp_grad(t, q, count, dim, logp, grad, wide));
  }
  for (int64_t c = 0; c < count; ++c) {
    const int64_t chain = list[c];
    const float eps = batch->step_size[chain];
    const float *inv_metric = L ? NULL : batch->inv_metric + (batch->shared_metric ? 0 : chain * dim);
    float *p_c = p + c * dim;
    if (L) {
      const float *L_c = factors + chain * factor_stride;
      for (int64_t k = 0; k < dim; ++k) scratch[k] = dense_lt_dot(L_c, dim, grad + c * dim, k);
      for (int64_t k = 0; k < dim; ++k) p_c[k] += 0.5f * eps * scratch[k];
    } else {
      for (int64_t k = 0; k < dim; ++k) p_c[k] += 0.5f * eps * grad[c * dim + k];
    }
    double h1 = -(wide ? wide[c] : (double)logp[c]) + kinetic_energy(p_c, inv_metric, dim);
    double log_uniform = log(fmax((double)uniform[c], 1e-10));
    int divergent = !isfinite(h1) || h1 - h0[c] > 1000.0;
    int accept = !divergent && log_uniform < h0[c] - h1;
    batch->diverging[chain] = (uint8_t)divergent;
    batch->accepted[chain] = (uint8_t)accept;
    batch->accept_prob[chain] = divergent ? 0.0f : (float)fmin(1.0, exp(h0[c] - h1));
    batch->energy[chain] = (float)(accept ? h1 : h0[c]);
    if (batch->chees_center && L) {
      const float *m = batch->chees_center, *Linv = batch->metric_factor_inv + chain * inverse_stride;
      double along = 0.0;
      const double after = dense_whiten(Linv, dim, q + c * dim, m, p_c, &along);
      const double before = dense_whiten(Linv, dim, batch->q + chain * dim, m, NULL, NULL);
      batch->chees[2 * chain] = (float)(after - before);
      batch->chees[2 * chain + 1] = (float)along;
    } else if (batch->chees_center) {
      const float *m = batch->chees_center, *x = batch->q + chain * dim, *x1 = q + c * dim;
      double change = 0.0, along = 0.0;
      for (int64_t k = 0; k < dim; ++k) {
        const double d1 = (double)x1[k] - (double)m[k], d0 = (double)x[k] - (double)m[k];
        change += (d1 * d1 - d0 * d0) / (double)inv_metric[k];
        along += d1 * (double)p_c[k];
      }
      batch->chees[2 * chain] = (float)change;
      batch->chees[2 * chain + 1] = (float)along;
    }
    if (accept && !batch->probe) {
      memcpy(batch->q + chain * dim, q + c * dim, (size_t)dim * sizeof *q);
      memcpy(batch->grad + chain * dim, grad + c * dim, (size_t)dim * sizeof *grad);
      batch->logp[chain] = logp[c];
      if (wide) batch->logp_wide[chain] = wide[c];
    }
    if (batch->moment_mean && chain < batch->moment_rows) hmc_add_moments(batch, chain);
  }
  return DS_OK;
}

static int cpu_hmc_transition(backend_t *b, const dsampler_target *t, hmc_batch_t *batch) {
  (void)b;
  const int64_t dim = batch->dim, n = batch->n_chains;
  if (n == 0) return DS_OK;
  const int64_t block = CPU_HMC_CHAIN_BLOCK;
  int status = DS_OK;
#pragma omp parallel if (n > CPU_HMC_CHAIN_BLOCK)
  {
    size_t floats = (size_t)(block * dim);
    float *q = malloc(floats * sizeof *q), *p = malloc(floats * sizeof *p);
    float *grad = malloc(floats * sizeof *grad), *logp = malloc((size_t)block * sizeof *logp);
    float *uniform = malloc((size_t)block * sizeof *uniform);
    double *h0 = malloc((size_t)block * sizeof *h0);
    const int use_wide = batch->logp_wide && t->abi_version >= 2 && t->logp_grad_f64;
    double *wide = use_wide ? malloc((size_t)block * (size_t)(2 * dim + 1) * sizeof *wide) : NULL;
    /* The dense metric's products: [dim] floats. */
    float *scratch = malloc((size_t)dim * sizeof(float));
    /* The block's chains; a probe's only those whose search is still open (probe_direction). */
    int64_t *list = malloc((size_t)block * sizeof *list);
    int local_status = (q && p && grad && logp && uniform && h0 && scratch && list && (wide || !use_wide))
                           ? DS_OK : DS_FAIL_ALLOC("HMC scratch", floats * 3 * sizeof(float));
#pragma omp for schedule(dynamic, 1)
    for (int64_t c0 = 0; c0 < n; c0 += block) {
      if (local_status != DS_OK) continue;
      const int64_t end = n - c0 < block ? n : c0 + block;
      int64_t count = 0;
      for (int64_t c = c0; c < end; ++c)
        if (!batch->probe_direction || batch->probe_direction[c] != 2) list[count++] = c;
      if (count > 0) local_status = hmc_block(t, batch, list, count, q, p, grad, logp, uniform, h0, wide, scratch);
    }
    if (local_status != DS_OK) {
#pragma omp critical
      if (status == DS_OK) status = local_status;
    }
    free(q); free(p); free(grad); free(logp); free(uniform); free(h0); free(wide); free(scratch); free(list);
  }
  return status;
}

static int cpu_hmc_stats(backend_t *b, const hmc_batch_t *batch, hmc_stats_t *stats) {
  (void)b;
  memset(stats, 0, sizeof *stats);
  int failed = 0;
  /* Per-thread digits, combined by integer addition: the same total for any thread count. */
#pragma omp parallel if (batch->n_chains > CPU_PARALLEL_MIN)
  {
    hmc_stats_t local;
    memset(&local, 0, sizeof local);
    int local_failed = 0;
#pragma omp for schedule(static)
    for (int64_t c = 0; c < batch->n_chains; ++c) {
      local_failed |= exact_digits_add(local.accept.digit, (double)batch->accept_prob[c]) != 0;
      local_failed |= exact_digits_add(local.step.digit, (double)batch->step_size[c]) != 0;
      local.divergent += batch->diverging[c];
      const float a = batch->accept_prob[c];
      if (batch->chees_center && !batch->diverging[c] && a > 1e-4f && isfinite(batch->chees[2 * c]) &&
          isfinite(batch->chees[2 * c + 1])) {
        const double change = (double)batch->chees[2 * c], along = (double)batch->chees[2 * c + 1];
        exact_digits_add(local.chees_slope.digit, (double)a * (change * along));
        exact_digits_add(local.chees_value.digit, (double)a * (0.25 * change * change));
        exact_digits_add(local.chees_weight.digit, (double)a);
      }
    }
#pragma omp critical
    {
      for (int i = 0; i < EXACT_DIGITS; ++i) {
        stats->accept.digit[i] += local.accept.digit[i];
        stats->step.digit[i] += local.step.digit[i];
        stats->chees_slope.digit[i] += local.chees_slope.digit[i];
        stats->chees_value.digit[i] += local.chees_value.digit[i];
        stats->chees_weight.digit[i] += local.chees_weight.digit[i];
      }
      stats->divergent += local.divergent;
      failed |= local_failed;
    }
  }
  stats->accept.pending = stats->step.pending = batch->n_chains;
  stats->chees_slope.pending = stats->chees_value.pending = stats->chees_weight.pending = batch->n_chains;
  if (failed) return ds_fail(DS_ERR_TARGET, "HMC: a step size is not finite (adaptation diverged?)");
  return DS_OK;
}

static int cpu_hmc_record_draw(backend_t *b, const hmc_batch_t *batch, hmc_draw_block_t *block, int64_t slot) {
  (void)b;
  const int64_t dim = batch->dim, cap = block->capacity;
#pragma omp parallel for schedule(static) if (block->rows * dim > CPU_PARALLEL_MIN)
  for (int64_t c = 0; c < block->rows; ++c) {
    const int64_t cell = c * cap + slot;
    memcpy(block->q + cell * dim, batch->q + c * dim, (size_t)dim * sizeof(float));
#define RECORD_STAT(name, type, dtype, source, member) block->name[cell] = (type)HMC_STAT_READ(source, *batch, member, c);
    HMC_SAMPLE_STATS(RECORD_STAT)
#undef RECORD_STAT
  }
  return DS_OK;
}

static int cpu_fill(backend_t *b, float *dst, float value, int64_t count) {
  (void)b;
#pragma omp parallel for schedule(static) if (count > CPU_PARALLEL_MIN)
  for (int64_t e = 0; e < count; ++e) dst[e] = value;
  return DS_OK;
}

static int cpu_column_sums(backend_t *b, const float *values, int64_t rows, int64_t cols, const double *center,
                           exact_sum_t *sums) {
  (void)b;
  memset(sums, 0, (size_t)cols * sizeof *sums);
  int failed = 0;
  /* Rows in parallel, each thread its own digits, added together: integer sums, any order. */
#pragma omp parallel if (rows * cols > CPU_PARALLEL_MIN)
  {
    int64_t *digits = calloc((size_t)cols * EXACT_DIGITS, sizeof *digits);
    int local_failed = digits == NULL;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; digits && k < cols; ++k) {
        double v = values[r * cols + k];
        if (center) v = (v - center[k]) * (v - center[k]);
        local_failed |= exact_digits_add(digits + k * EXACT_DIGITS, v) != 0;
      }
    }
#pragma omp critical
    {
      for (int64_t k = 0; digits && k < cols; ++k)
        for (int i = 0; i < EXACT_DIGITS; ++i) sums[k].digit[i] += digits[k * EXACT_DIGITS + i];
      failed |= local_failed;
    }
    free(digits);
  }
  for (int64_t k = 0; k < cols; ++k) sums[k].pending = rows;
  if (failed) return ds_fail(DS_ERR_TARGET, "a chain's position or moment is out of range (not finite or > 1e111)");
  return DS_OK;
}

static int cpu_covariance_add(backend_t *b, const float *q, const float *mean, float *m2, int64_t rows, int64_t dim,
                              double n) {
  (void)b;
  if (n <= 1.0) return DS_OK;
  const float weight = (float)(n / (n - 1.0));
  const int64_t triangle = dense_triangle(dim);
#pragma omp parallel for schedule(static) if (rows * triangle > CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < rows; ++r) {
    const float *x = q + r * dim, *mu = mean + r * dim;
    float *row = m2 + r * triangle;
    for (int64_t i = 0; i < dim; ++i) {
      const float e_i = weight * (x[i] - mu[i]);
      for (int64_t j = 0; j <= i; ++j) row[i * (i + 1) / 2 + j] += e_i * (x[j] - mu[j]);
    }
  }
  return DS_OK;
}

static int cpu_running_moments_add(backend_t *b, const float *x, float *mean, float *m2, int64_t rows, double n) {
  (void)b;
  const float count = (float)n;
  for (int64_t r = 0; r < rows; ++r) {
    const float delta = x[r] - mean[r];
    mean[r] += delta / count;
    m2[r] += delta * (x[r] - mean[r]);
  }
  return DS_OK;
}

static int cpu_dual_average(backend_t *b, double *state, const float *accept, float *step_out, int64_t rows,
                            const dual_average_step_t *step) {
  (void)b;
#pragma omp parallel for schedule(static) if (rows > CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < rows; ++r)
    step_out[r] = dual_apply(state + r * DUAL_FIELDS, step, accept ? (double)accept[r] : 0.0, step_out[r]);
  return DS_OK;
}

static int cpu_step_search(backend_t *b, const float *accept_prob, int8_t *direction, int8_t *exponent, float *step,
                           int64_t rows, step_search_counts_t *counts) {
  (void)b;
  memset(counts, 0, sizeof *counts);
  for (int64_t r = 0; r < rows; ++r) {
    step_search_trial(accept_prob[r], (signed char *)&direction[r], (signed char *)&exponent[r], &step[r]);
    counts->open += direction[r] != 2;
    counts->exponent[exponent[r] + STEP_SEARCH_LIMIT]++;
  }
  return DS_OK;
}

static int cpu_moments_to_metric(backend_t *b, float *mean, float *m2, int64_t rows, int64_t dim, double n,
                                 float *inv_metric) {
  (void)b;
#pragma omp parallel for schedule(static) if (rows * dim > CPU_PARALLEL_MIN)
  for (int64_t r = 0; r < rows; ++r) {
    const size_t row = (size_t)(r * dim);
    const double scale = dual_variance_scale(m2 + row, dim, n - 1.0);
    for (int64_t k = 0; k < dim; ++k) {
      inv_metric[row + k] = dual_regularised_variance((double)m2[row + k], n, scale);
      mean[row + k] = 0.0f;
      m2[row + k] = 0.0f;
    }
  }
  return DS_OK;
}

static void cpu_destroy(backend_t *b) {
  cpu_impl_t *impl = b->impl;
  if (impl) {
    free(impl->columns_t);
    free(impl->v_all);
    free(impl->pair_counts);
    free(impl->centred);
    free(impl);
  }
  free(b);
}

int backend_cpu_create(backend_t **out) {
  *out = NULL;
  backend_t *b = calloc(1, sizeof *b);
  cpu_impl_t *impl = calloc(1, sizeof *impl);
  if (!b || !impl) {
    free(b);
    free(impl);
    return DS_FAIL_ALLOC("the CPU backend", sizeof *b);
  }
  b->name = "cpu";
  b->on_device = 0;
  b->device = -1;
  b->impl = impl;
  b->alloc = cpu_alloc;
  b->release = cpu_release;
  b->alloc_host = cpu_alloc;
  b->release_host = cpu_release;
  b->upload = cpu_copy;
  b->download = cpu_copy;
  b->synchronize = cpu_synchronize;
  b->timer_mark = cpu_timer_mark;
  b->timer_elapsed = cpu_timer_elapsed;
  b->key_histogram = cpu_key_histogram;
  b->logp_grad = cpu_logp_grad;
  b->svgd_pair_histogram = cpu_svgd_pair_histogram;
  b->svgd_pair_counts = cpu_svgd_pair_counts;
  b->svgd_phi = cpu_svgd_phi;
  b->svgd_stein_sum = cpu_svgd_stein_sum;
  b->svgd_update = cpu_svgd_update;
  b->hmc_transition = cpu_hmc_transition;
  b->hmc_stats = cpu_hmc_stats;
  b->hmc_record_draw = cpu_hmc_record_draw;
  b->fill = cpu_fill;
  b->column_sums = cpu_column_sums;
  b->covariance_add = cpu_covariance_add;
  b->running_moments_add = cpu_running_moments_add;
  b->dual_average = cpu_dual_average;
  b->moments_to_metric = cpu_moments_to_metric;
  b->step_search = cpu_step_search;
  b->destroy = cpu_destroy;
  *out = b;
  return DS_OK;
}
