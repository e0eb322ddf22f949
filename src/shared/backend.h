/* backend.h: the one interface the algorithms (svgd.c, hmc.c) are written against. The CPU
 * backend (backend_cpu.c) and the CUDA backend (cuda/backend_cuda.cu) implement it. Arrays
 * passed to the compute entries live in the backend's memory (host for the CPU, device for
 * CUDA) and are row-major float32; sizes are int64. Every entry returns a DS_* status. */
#ifndef DSAMPLER_BACKEND_H
#define DSAMPLER_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "dsampler_target.h"
#include "dual_average.h"
#include "exactsum_core.h"
#include "hmc_stats.h"
#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Passes of the exact median over the keys, the bit patterns of the squared distances (which
 * order as the values do). Radix select: PASS_HIGH counts each key's top 16 bits, PASS_LOW the
 * low 16 bits of the keys whose top 16 bits equal select_bits; SVGD_HIST_BINS counts each.
 * PASS_WINDOW serves a median guessed near the last one, select_bits = the window start w, and
 * writes SVGD_WINDOW_COUNTS counts in one pass (the entries between the fine bins and BELOW
 * stay 0; the count is at least SVGD_HIST_BINS, so one buffer serves every pass):
 *   [SVGD_WINDOW_FINE + b]  keys equal to w + b, b < SVGD_WINDOW_FINE_BINS (one per key);
 *   [SVGD_WINDOW_BELOW]     keys < w;
 *   [SVGD_WINDOW_ABOVE]     keys >= w + SVGD_WINDOW_FINE_BINS.
 * A median outside the window then takes PASS_HIGH and PASS_LOW. The window pass counts only
 * the few keys inside the window into shared memory: most pairs cost it two register adds. */
enum {
  SVGD_MEDIAN_PASS_HIGH = 1,
  SVGD_MEDIAN_PASS_LOW = 2,
  SVGD_MEDIAN_PASS_WINDOW = 3,
  SVGD_HIST_BINS = 65536,
  SVGD_WINDOW_FINE = 0,
  SVGD_WINDOW_FINE_BINS = 32768,
  SVGD_WINDOW_BELOW = 65536,
  SVGD_WINDOW_ABOVE = 65537,
  SVGD_WINDOW_COUNTS = 65538
};
/* The SVGD kernel of squared distance D, bandwidth h: rbf k = exp(-D / 2h); imq
 * k = (c2 + D / h)^beta (c2 = c^2, beta in (-1, 0)). The weight of phi's repulsive term, with
 * grad_{x_j} k(x_j, x_i) = w (x_i - x_j): rbf w = k / h, imq w = -2 beta (c2 + D / h)^(beta - 1) / h. */
typedef enum { SVGD_KERNEL_RBF = 0, SVGD_KERNEL_IMQ = 1 } svgd_kernel_kind_t;
typedef struct svgd_kernel {
  svgd_kernel_kind_t kind;
  float h, c2, beta;
} svgd_kernel_t;

typedef enum { SVGD_UPDATE_SGD = 0, SVGD_UPDATE_ADAGRAD = 1, SVGD_UPDATE_ADAM = 2 } svgd_update_t;

/* Floats of optimiser state per particle coordinate: adagrad's g, adam's m and v. */
static inline int svgd_update_state_floats(svgd_update_t kind) {
  return kind == SVGD_UPDATE_ADAM ? 2 : kind == SVGD_UPDATE_ADAGRAD ? 1 : 0;
}

/* Adam's bias corrections 1 - beta^t for step t = iteration + 1 (beta1 0.9, beta2 0.999), in
 * double then rounded; computed on the host for every backend, so they agree. */
static inline void svgd_adam_bias(int64_t iteration, float *correction1, float *correction2) {
  *correction1 = (float)(1.0 - pow(0.9, (double)(iteration + 1)));
  *correction2 = (float)(1.0 - pow(0.999, (double)(iteration + 1)));
}

/* One HMC iteration for a rank's chains: momenta, the accept uniform and the step's jitter come
 * from Philox keyed by (seed, chain_begin + c, iteration); see rng.h for the word layout. */
typedef int (*hmc_leapfrog_fn)(void *self, float *q, float *p, float *grad, float *logp, const float *step_size,
                              const float *inv_metric, int shared_metric, int n_steps, int64_t n, void *stream);

typedef struct hmc_batch {
  int64_t n_chains;        /* local chains */
  int64_t chain_begin;     /* global id of local chain 0 */
  int64_t dim;
  uint64_t seed;
  uint32_t iteration;      /* global iteration number: warmup and sampling counted together */
  int n_leapfrog;          /* L */
  float *q;                /* [n_chains, dim] position, updated on accept */
  float *logp;             /* [n_chains] log p(q), kept in step with q */
  float *grad;             /* [n_chains, dim] grad log p(q), kept in step with q */
  const float *step_nominal; /* [n_chains] the adapted (or given) step size */
  float jitter;            /* the step used is nominal * (1 + jitter * (2u - 1)), u its own word */
  const float *inv_metric; /* [n_chains, dim] diagonal of M^-1, or [dim] when shared_metric */
  int shared_metric;       /* 1: one metric for every chain (unit or pooled adaptation) */
  /* A dense metric when not NULL, shared by every chain: M^-1 = L L^T with L = metric_factor
   * [dim, dim] row-major, lower triangular, followed by L^T [dim, dim] (the same numbers, for
   * kernels that read L by columns; inv_metric is then unused). The momentum is kept
   * whitened, r = L^T p: r = z is drawn, the kinetic energy is |r|^2 / 2, a kick adds
   * kick (L^T grad) to r and a drift eps (L r) to q, each product summed with fmaf over the
   * triangle's entries in increasing index; ChEES whitens with u = L^-1 (x - m), u_i = sum_{k <= i}
   * metric_factor_inv_ik (x_k - m_k) in double, k increasing: D = |u'|^2 - |u|^2, B = u' . r'. */
  const float *metric_factor;
  const float *metric_factor_inv; /* L^-1 [dim, dim], lower triangular, with metric_factor */
  /* 1: each chain its own dense metric (per-chain adaptation): metric_factor is [n_chains, 2,
   * dim, dim] (each chain's L then L^T) and metric_factor_inv [n_chains, dim, dim]. */
  int factor_per_chain;
  /* [n_chains] out: the sample statistics computed by the transition (hmc_stats.h's OUTPUT
   * rows: accept_prob, step_size, diverging, energy, ...). */
  HMC_SAMPLE_STATS(HMC_STAT_BATCH_MEMBER)
  uint8_t *accepted;       /* [n_chains] out */
  /* When moment_mean is not NULL, the state kept is added to each chain's running moments
   * (Welford, float): with n = moment_count (this sample included), delta = q - mean,
   * mean += delta / n, m2 += delta * (q - mean). [n_chains, dim] each; only chains
   * [0, moment_rows) take part (pooled adaptation's windows keep a subset, adapt.h). */
  float *moment_mean, *moment_m2;
  int64_t moment_count, moment_rows;
  /* 1: a probe (the initial step-size search): the outputs are written, the state is not. */
  int probe;
  /* A probe's search directions (step_search's, [n_chains], backend memory) or NULL: a backend
   * may leave out the chains whose search is done (2), whose outputs the search no longer reads
   * (the CPU backend does: their gradients are not evaluated). */
  const int8_t *probe_direction;
  /* The target's own leapfrog trajectory on the device, or NULL (a JAX bundle's; dsampler's own,
   * not part of the plugin ABI). The CUDA backend then calls it, for a diagonal metric, instead
   * of logp_grad_cuda between its kick-drift kernels: for rows [n], n_steps times, with
   * eps = step_size[row] and m = inv_metric[row, k] (inv_metric[k] when shared_metric), kick
   * p += (first step ? eps / 2 : eps) grad, drift q += (eps m) p, then logp, grad at the new q;
   * q, p, grad [n, dim] in place, logp [n] at the last q. The final half kick, the energy and
   * the acceptance stay the backend's. */
  hmc_leapfrog_fn leapfrog_cuda;
  void *leapfrog_self;
  /* When chees_center ([dim], the mean of all chains' positions) is not NULL, each chain's
   * ChEES terms (adapt.h) go to chees [n_chains, 2]: with x the start, x' the proposal, p' its
   * momentum after the last half kick, m = chees_center and s2 = inv_metric, the change of the
   * whitened squared distance from the mean D = sum_k ((x'_k - m_k)^2 - (x_k - m_k)^2) / s2_k and
   * its half time derivative B = sum_k (x'_k - m_k) p'_k, each summed in double, rounded to float. */
  const float *chees_center;
  float *chees;
  /* [n_chains] log p(q) in double, kept in step with q, when the target gives float64 densities
   * (logp_grad_f64) and the backend keeps them (the CPU's): the acceptance test then uses it,
   * and logp holds its float rounding for the output. NULL otherwise. */
  double *logp_wide;
} hmc_batch_t;

/* Stan's initial step-size search (init_stepsize), one trial for every chain: after a probe at
 * each chain's step, a chain whose direction is undecided (0) takes +1 when its acceptance
 * probability is above 0.8, else -1; a chain going +1 doubles its step while the probability
 * stays above 0.8 and, when it drops, goes back to the last step that passed; one going -1
 * halves it while it stays below; a chain that stops (or reaches 2^+-STEP_SEARCH_LIMIT times
 * its first step) is done (2). */
enum { STEP_SEARCH_BINS = 2 * STEP_SEARCH_LIMIT + 1 };
typedef struct step_search_counts {
  int64_t open;                         /* chains not done */
  int64_t exponent[STEP_SEARCH_BINS];   /* chains whose step is 2^(b - STEP_SEARCH_LIMIT) times the first */
} step_search_counts_t;

/* Sums over a rank's chains of one transition's statistics, exact (rank-count independent). */
typedef struct hmc_stats {
  exact_sum_t accept;      /* sum of accept_prob */
  exact_sum_t step;        /* sum of the steps used */
  /* With chees_center: over chains not divergent whose accept_prob a > 1e-4 and whose ChEES
   * terms are finite, the sums of a D B (the criterion D^2 / 4's time derivative), a D^2 / 4
   * and a. */
  exact_sum_t chees_slope, chees_value, chees_weight;
  int64_t divergent;
} hmc_stats_t;

/* Draws kept on the backend until they are written: `capacity` slots of rows chains, laid out
 * as the output takes them, [rows, capacity(, dim)]: the position q and each sample statistic
 * of hmc_stats.h under its output name. */
typedef struct hmc_draw_block {
  int64_t rows, capacity, dim;
  float *q;
  HMC_SAMPLE_STATS(HMC_STAT_BLOCK_MEMBER)
} hmc_draw_block_t;

/* Marks a backend keeps for --timing (timing.h). */
#define BACKEND_TIMER_SLOTS 16

typedef struct backend backend_t;
struct backend {
  const char *name;        /* "cpu" or "cuda" */
  int on_device;           /* arrays live in GPU memory */
  int device;              /* GPU ordinal, -1 on the CPU */
  void *stream;            /* cudaStream_t of all compute, NULL on the CPU */
  void *impl;

  int (*alloc)(backend_t *b, void **ptr, size_t bytes);
  void (*release)(backend_t *b, void *ptr);
  /* Host memory the backend copies to and from fastest (pinned for CUDA). */
  int (*alloc_host)(backend_t *b, void **ptr, size_t bytes);
  void (*release_host)(backend_t *b, void *ptr);
  int (*upload)(backend_t *b, void *dst, const void *host_src, size_t bytes);
  int (*download)(backend_t *b, void *host_dst, const void *src, size_t bytes);
  int (*synchronize)(backend_t *b);
  /* --timing: mark `slot` (< BACKEND_TIMER_SLOTS) where the work queued so far ends (a CUDA event
   * on the stream; the clock on the CPU); the milliseconds from mark `from` to mark `to`, waiting
   * for `to`. */
  int (*timer_mark)(backend_t *b, int slot);
  int (*timer_elapsed)(backend_t *b, int from, int to, double *ms);

  /* logp [n], grad [n, dim] of the target at x [n, dim]. */
  int (*logp_grad)(backend_t *b, const dsampler_target *t, const float *x, int64_t n,
                   float *logp, float *grad);

  /* One median pass (above; added into hist, a host array of SVGD_HIST_BINS counts, or
   * SVGD_WINDOW_COUNTS for PASS_WINDOW) over this rank's share of the unordered pairs: each
   * local row i in [row_begin, row_end) with j = (i + k) mod n for k = 1 .. floor(n/2), except
   * k = n/2 for i >= n/2 when n is even. Each pair counts 2. D_ij as the backend computes it
   * (which form for which dimensions and GPUs, and how closely the backends agree, is stated
   * once, in README.md's "What is computed"; the CPU backend's forms are svgd_kernel_math.h's).
   * The median is exact for those D_ij. The n zeros of the diagonal are not counted here. */
  int (*svgd_pair_histogram)(backend_t *b, const float *x_all, int64_t n, int64_t dim,
                             int64_t row_begin, int64_t row_end, int pass, uint32_t select_bits,
                             uint64_t *hist);
  /* The same pass with its counts left where the backend computes them, so they can be summed
   * across ranks there (on the GPU by NCCL) and reach the host once: *counts points to this
   * rank's counts alone, from zero (zeros for a rank without rows, which still takes part in
   * the sum), SVGD_HIST_BINS or SVGD_WINDOW_COUNTS uint64 in backend memory, owned by the
   * backend and valid until its next pass. */
  int (*svgd_pair_counts)(backend_t *b, const float *x_all, int64_t n, int64_t dim, int64_t row_begin,
                          int64_t row_end, int pass, uint32_t select_bits, uint64_t **counts);
  /* phi [row_end - row_begin, dim] for local rows against all n columns, DESIGN.md's
   * phi_i = (1/n) sum_j (k_ij s_j + w_ij (x_i - x_j)) with w_ij the kernel's weight
   * (svgd_kernel_t), computed as (k_ii s_i + sum_{j != i} k_ij s_j - w_ij x_j + x_i sum_{j != i} w_ij) / n:
   * for rbf, (s_i + sum_{j != i} K_ij v_j + x_i sum_{j != i} K_ij / h) / n with v_j = s_j - x_j / h.
   * The j = i term is added exactly: through v it would cancel x_i / h against itself, which
   * loses all precision when h is small (N <= 2, or collapsed particles). No n x n array. */
  int (*svgd_phi)(backend_t *b, const float *x_all, const float *score_all, int64_t n,
                  int64_t dim, int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, float *phi);
  /* May be NULL. The next median pass keeps its squared distances for the next svgd_phi of the
   * same particles (x_all, n, dim, rows unchanged in between), which then forms K from them
   * instead of computing the distances again; where the backend keeps them is its rule, one
   * that depends on n and dim alone, so results stay the same on any number of ranks. svgd.c
   * calls it at the start of each step's bandwidth. */
  int (*svgd_keep_distances)(backend_t *b);
  /* The Stein kernel's sum for the kernel Stein discrepancy: *sum (host, cleared first) = the
   * exact sum over local rows i of u_ii + 2 sum_{k=1..span(i)} u(i, (i + k) mod n), the pairs of
   * svgd_pair_histogram (each unordered pair once), so the ranks' sums add up to
   * sum_ij u_p(x_i, x_j) (svgd_stein_pair). Each row's pairs are summed in double in an order
   * that depends on i and n alone, so the total is the same on any number of ranks. */
  int (*svgd_stein_sum)(backend_t *b, const float *x_all, const float *score_all, int64_t n, int64_t dim,
                        int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, exact_sum_t *sum);
  /* x += step * phi (sgd); adagrad with history g [count]: g = phi^2 on iteration 0, else
   * 0.9 g + 0.1 phi^2, x += step * phi / (1e-6 + sqrt(g)); adam with g = [m | v], [2 count]:
   * m = 0.9 m + 0.1 phi, v = 0.999 v + 0.001 phi^2 (m = v = 0 before iteration 0),
   * x += step * (m / c1) / (sqrt(v / c2) + 1e-8), c1, c2 from svgd_adam_bias. Float operations
   * in this order on every backend. count = rows * dim. */
  int (*svgd_update)(backend_t *b, float *x, const float *phi, float *g, int64_t count,
                     svgd_update_t kind, float step, int64_t iteration);

  int (*hmc_transition)(backend_t *b, const dsampler_target *t, hmc_batch_t *batch);
  /* The statistics of the batch's last transition, summed over its chains (host result). */
  int (*hmc_stats)(backend_t *b, const hmc_batch_t *batch, hmc_stats_t *stats);
  /* Copies the batch's first block->rows chains' state and statistics into slot `slot`. */
  int (*hmc_record_draw)(backend_t *b, const hmc_batch_t *batch, hmc_draw_block_t *block, int64_t slot);

  /* dst[0 .. count) = value. */
  int (*fill)(backend_t *b, float *dst, float value, int64_t count);
  /* sums[k] (host, cleared first) = exact sum over rows r of values[r, k] (rows x cols, backend
   * memory); with center (host, [cols]) the sum of ((double)values[r, k] - center[k])^2. */
  int (*column_sums)(backend_t *b, const float *values, int64_t rows, int64_t cols, const double *center,
                     exact_sum_t *sums);
  /* Per-chain dual averaging: for each row, state[row] (DUAL_FIELDS doubles) takes one
   * dual_apply with accept[row] (NULL with restart_only) and step_out[row] (read with
   * restart_only) receives the next step. */
  int (*dual_average)(backend_t *b, double *state, const float *accept, float *step_out, int64_t rows,
                      const dual_average_step_t *step);
  /* One trial of the step-size search (above) after a probe transition: updates direction,
   * exponent and step [rows]; counts (host) receives this rank's counts. */
  int (*step_search)(backend_t *b, const float *accept_prob, int8_t *direction, int8_t *exponent, float *step,
                     int64_t rows, step_search_counts_t *counts);
  /* Dense metric windows: each chain's running covariance m2 [rows, dim (dim + 1) / 2] (the
   * lower triangle row by row, (i, j <= i) at i (i + 1) / 2 + j) takes the chain's state q after
   * the transition added it to the running mean `mean` [rows, dim] as sample n: with
   * e = q - mean, m2_ij += (n / (n - 1)) e_i e_j in float (Welford's update; nothing for n = 1).
   * A backend may defer the additions (the CUDA backend folds several at once, with the same
   * bits): m2 is then current for every later entry of this backend that reads or writes it
   * (download, upload, fill, column_sums), not for direct access to its memory. */
  int (*covariance_add)(backend_t *b, const float *q, const float *mean, float *m2, int64_t rows, int64_t dim,
                        double n);
  /* Running moments of one value per row (Welford, float, as the transition's: n counts this
   * sample): delta = x - mean, mean += delta / n, m2 += delta (x - mean). [rows] each. */
  int (*running_moments_add)(backend_t *b, const float *x, float *mean, float *m2, int64_t rows, double n);
  /* Per chain (rows of [rows, dim]): inv_metric = dual_regularised_variance(m2, n, the row's
   * dual_variance_scale); then mean and m2 are zeroed. */
  int (*moments_to_metric)(backend_t *b, float *mean, float *m2, int64_t rows, int64_t dim, double n,
                           float *inv_metric);

  /* Order statistics (order_stats.h): among values [rows] whose key (order_key.h; of fmaxf(v, 0)
   * with clamp_zero, NaN counting as 0) has its top prefix_bits bits equal to prefix, bins[(key >>
   * shift) & (2^bits - 1)] counts them; bins[2^bits] counts the non-finite values (only with
   * prefix_bits 0). bins: 2^bits + 1 on the host (bits <= ORDER_KEY_MAX_BITS). */
  int (*key_histogram)(backend_t *b, const float *values, int64_t rows, int clamp_zero, uint32_t prefix,
                       int prefix_bits, int shift, int bits, uint64_t *bins);

  void (*destroy)(backend_t *b);
};

/* Creates the backend named "auto", "cpu" or "cuda" for this rank (device = GPU ordinal for
 * CUDA). "auto" picks CUDA where a GPU is visible. On failure *out is NULL. */
int backend_create(const char *name, int device, backend_t **out);
int backend_cpu_create(backend_t **out);
/* 1 when this build has the CUDA backend. */
int backend_cuda_built(void);
void backend_destroy(backend_t *b);

/* The batch's OUTPUT statistics (hmc_stats.h), [n_chains] each in backend memory. */
#define HMC_STAT_ALLOC_OUTPUT(type, member)                                                   \
  if (status == DS_OK) status = backend->alloc(backend, (void **)&batch->member, rows * sizeof(type));
#define HMC_STAT_ALLOC_STATE(type, member)
#define HMC_STAT_ALLOC_SCALAR(type, member)
#define HMC_STAT_ALLOC(name, type, dtype, source, member) HMC_STAT_ALLOC_##source(type, member)
static inline int hmc_batch_alloc_stats(backend_t *backend, hmc_batch_t *batch) {
  const size_t rows = (size_t)batch->n_chains;
  int status = DS_OK;
  HMC_SAMPLE_STATS(HMC_STAT_ALLOC)
  return status;
}
#define HMC_STAT_RELEASE_OUTPUT(member) backend->release(backend, batch->member);
#define HMC_STAT_RELEASE_STATE(member)
#define HMC_STAT_RELEASE_SCALAR(member)
#define HMC_STAT_RELEASE(name, type, dtype, source, member) HMC_STAT_RELEASE_##source(member)
static inline void hmc_batch_release_stats(backend_t *backend, hmc_batch_t *batch) {
  HMC_SAMPLE_STATS(HMC_STAT_RELEASE)
}
#define HMC_STAT_SHARE_OUTPUT(member) batch->member = from->member;
#define HMC_STAT_SHARE_STATE(member)
#define HMC_STAT_SHARE_SCALAR(member)
#define HMC_STAT_SHARE(name, type, dtype, source, member) HMC_STAT_SHARE_##source(member)
/* batch's OUTPUT statistics become those of `from` (another batch of the same chains). */
static inline void hmc_batch_share_stats(hmc_batch_t *batch, const hmc_batch_t *from) {
  HMC_SAMPLE_STATS(HMC_STAT_SHARE)
}

/* A draw block of `capacity` slots for max(rows, 1) chains, in backend memory, or (host) in
 * the host memory the backend copies to fastest. */
static inline int hmc_draw_block_alloc(backend_t *backend, hmc_draw_block_t *block, int host, int64_t rows,
                                       int64_t capacity, int64_t dim) {
  int (*alloc)(backend_t *, void **, size_t) = host ? backend->alloc_host : backend->alloc;
  const size_t cells = (size_t)((rows > 1 ? rows : 1) * capacity);
  block->rows = rows;
  block->capacity = capacity;
  block->dim = dim;
  int status = alloc(backend, (void **)&block->q, cells * (size_t)dim * sizeof(float));
#define HMC_STAT_BLOCK_ALLOC(name, type, dtype, source, member) \
  if (status == DS_OK) status = alloc(backend, (void **)&block->name, cells * sizeof(type));
  HMC_SAMPLE_STATS(HMC_STAT_BLOCK_ALLOC)
#undef HMC_STAT_BLOCK_ALLOC
  return status;
}

static inline void hmc_draw_block_release(backend_t *backend, hmc_draw_block_t *block, int host) {
  void (*release)(backend_t *, void *) = host ? backend->release_host : backend->release;
  release(backend, block->q);
#define HMC_STAT_BLOCK_RELEASE(name, type, dtype, source, member) release(backend, block->name);
  HMC_SAMPLE_STATS(HMC_STAT_BLOCK_RELEASE)
#undef HMC_STAT_BLOCK_RELEASE
}

/* The block's filled rows (all its slots) to host, a block of the same shape. */
static inline int hmc_draw_block_download(backend_t *backend, hmc_draw_block_t *host, const hmc_draw_block_t *block) {
  const size_t cells = (size_t)(block->rows * block->capacity);
  int status = backend->download(backend, host->q, block->q, cells * (size_t)block->dim * sizeof(float));
#define HMC_STAT_BLOCK_DOWNLOAD(name, type, dtype, source, member) \
  if (status == DS_OK) status = backend->download(backend, host->name, block->name, cells * sizeof(type));
  HMC_SAMPLE_STATS(HMC_STAT_BLOCK_DOWNLOAD)
#undef HMC_STAT_BLOCK_DOWNLOAD
  return status;
}

#ifdef __cplusplus
}
#endif
#endif
