/* backend_cuda.cu: the CUDA backend: backend.h's interface over device memory, one compute
 * stream per backend. Kernels live in cuda/svgd/ and cuda/hmc/; this file owns the
 * device buffers (histogram, phi scratch, HMC work arrays, pinned staging) and chooses fused
 * kernels for the built-in gaussian, a target's own device gradient, or host staging. */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "cuda_check.h"
#include "hmc_kernels.h"
#include "order_key.h"
#include "status.h"
#include "svgd_kernels.h"
#include "targets_builtin.h"
#include "targets_builtin_cuda.h"

namespace {

struct cuda_impl {
  cudaStream_t stream;
  int sm_count;
  unsigned long long *hist_dev; /* SVGD_WINDOW_COUNTS: room for any median pass */
  uint64_t *hist_host;          /* pinned, SVGD_WINDOW_COUNTS */
  float *phi_scratch;
  size_t phi_scratch_floats;
  void *hmc_work;
  size_t hmc_work_bytes;
  void *stage;                  /* pinned host staging for targets with a host gradient only */
  size_t stage_bytes;
  void *sums_dev, *sums_host;   /* exact sums' digits (device, pinned), grow-only */
  size_t sums_dev_bytes, sums_host_bytes;
  void *center_dev;             /* column_sums' centre, grow-only */
  size_t center_bytes;
  /* Distances a median pass keeps for phi (backend.h's svgd_keep_distances), grow-only. */
  void *dist;
  size_t dist_bytes;
  int keep_pending;             /* the next median pass keeps its distances */
  int kept;                     /* dist holds them for kept_x, kept_n, kept_dim, the kept rows */
  const float *kept_x;
  int64_t kept_n, kept_dim, kept_begin, kept_end;
  /* covariance_add's updates not yet in m2 (cov_m2, cov_rows x triangle floats): their centred
   * states in cov_centred ([capacity][rows][dim], grow-only) and their weights. */
  int cov_defer_off;            /* backend_cuda_covariance_defer(b, 0): every update at once */
  float *cov_m2;
  int64_t cov_rows, cov_dim;
  int cov_pending;
  float cov_weight[COV_DEFER_MAX];
  void *cov_centred;
  size_t cov_centred_bytes, cov_refused_bytes; /* a size cudaMalloc refused: not asked again */
  void *key_bins_dev, *key_bins_host; /* key_histogram's bins (device, pinned), made at the first */
  cudaEvent_t timer[BACKEND_TIMER_SLOTS];          /* --timing's marks, made at the first */
  int timer_made;
  int builtin_trajectory_off;   /* backend_cuda_builtin_trajectory(b, 0): the step-by-step path (tests) */
  /* DSAMPLER_JAX_STATS=1: the GPU time of a target trajectory's transitions, by part (events;
   * each such transition then waits for its end): begin, the target's call, finish. */
  int split_on;
  cudaEvent_t split[4];
  double split_ms[3];
  int64_t split_count, split_seen;
};

cuda_impl *impl_of(backend_t *b) { return static_cast<cuda_impl *>(b->impl); }

/* The pending covariance updates into m2, in order. */
int covariance_flush(cuda_impl *impl) {
  if (impl->cov_pending == 0) return DS_OK;
  const int updates = impl->cov_pending;
  impl->cov_pending = 0;
  return launch_covariance_fold(static_cast<const float *>(impl->cov_centred), updates, impl->cov_weight, impl->cov_m2,
                                impl->cov_rows, impl->cov_dim, impl->stream);
}

/* Whether [ptr, ptr + bytes) meets the m2 with pending updates. */
bool covariance_touches(const cuda_impl *impl, const void *ptr, size_t bytes) {
  if (impl->cov_pending == 0 || !ptr) return false;
  const char *begin = static_cast<const char *>(ptr), *m2 = reinterpret_cast<const char *>(impl->cov_m2);
  const size_t m2_bytes = (size_t)(impl->cov_rows * (impl->cov_dim * (impl->cov_dim + 1) / 2)) * sizeof(float);
  return begin < m2 + m2_bytes && m2 < begin + bytes;
}

/* Before a read or write of device memory through the backend: the pending updates, where
 * they land in it. */
int covariance_settle(cuda_impl *impl, const void *ptr, size_t bytes) {
  return covariance_touches(impl, ptr, bytes) ? covariance_flush(impl) : DS_OK;
}

/* The built-in gaussian with one mean and scale for every coordinate: the form the fused
 * kernels take. Other built-ins (and per-coordinate gaussians) go through logp_grad_cuda. */
bool fused_gaussian(const dsampler_target *t, int64_t dim, builtin_params_t *params) {
  return builtin_target_params(t, params) && params->kind == BUILTIN_GAUSSIAN && params->dim == dim &&
         params->means == NULL && params->inv_scale2s == NULL;
}

/* Grow-only device buffer. */
int ensure_device(void **buf, size_t *have, size_t want, const char *what) {
  if (*have >= want) return DS_OK;
  if (*buf) CUDA_CHECK(cudaFree(*buf));
  *buf = NULL;
  *have = 0;
  if (cudaMalloc(buf, want) != cudaSuccess) {
    (void)cudaGetLastError();
    *buf = NULL;
    return DS_FAIL_ALLOC(what, want);
  }
  *have = want;
  return DS_OK;
}

int ensure_pinned(void **buf, size_t *have, size_t want) {
  if (*have >= want) return DS_OK;
  if (*buf) CUDA_CHECK(cudaFreeHost(*buf));
  *buf = NULL;
  *have = 0;
  CUDA_CHECK(cudaMallocHost(buf, want));
  *have = want;
  return DS_OK;
}

int cuda_alloc(backend_t *b, void **ptr, size_t bytes) {
  (void)b;
  *ptr = NULL;
  if (bytes == 0) return DS_OK;
  cudaError_t err = cudaMalloc(ptr, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    *ptr = NULL;
    if (err == cudaErrorMemoryAllocation) return DS_FAIL_ALLOC("a device array", bytes);
    return cuda_check_fail(err, __FILE__, __LINE__, "cudaMalloc(ptr, bytes)");
  }
  return DS_OK;
}

void cuda_release(backend_t *b, void *ptr) {
  cuda_impl *impl = impl_of(b);
  if (ptr && ptr == impl->cov_m2) impl->cov_pending = 0, impl->cov_m2 = NULL;
  if (ptr) CUDA_CHECK_NORETURN(cudaFree(ptr));
}

int cuda_upload(backend_t *b, void *dst, const void *host_src, size_t bytes) {
  if (bytes == 0) return DS_OK;
  DS_TRY(covariance_settle(impl_of(b), dst, bytes));
  cudaStream_t stream = impl_of(b)->stream;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return DS_OK;
}

int cuda_download(backend_t *b, void *host_dst, const void *src, size_t bytes) {
  if (bytes == 0) return DS_OK;
  DS_TRY(covariance_settle(impl_of(b), src, bytes));
  cudaStream_t stream = impl_of(b)->stream;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return DS_OK;
}

int cuda_synchronize(backend_t *b) {
  CUDA_CHECK(cudaStreamSynchronize(impl_of(b)->stream));
  return DS_OK;
}

int cuda_timer_mark(backend_t *b, int slot) {
  cuda_impl *impl = impl_of(b);
  if (slot < 0 || slot >= BACKEND_TIMER_SLOTS) return ds_fail(DS_ERR_INTERNAL, "timer slot %d", slot);
  for (; impl->timer_made < BACKEND_TIMER_SLOTS; ++impl->timer_made)
    CUDA_CHECK(cudaEventCreate(&impl->timer[impl->timer_made]));
  CUDA_CHECK(cudaEventRecord(impl->timer[slot], impl->stream));
  return DS_OK;
}

int cuda_timer_elapsed(backend_t *b, int from, int to, double *ms) {
  cuda_impl *impl = impl_of(b);
  if (from < 0 || to < 0 || from >= impl->timer_made || to >= impl->timer_made)
    return ds_fail(DS_ERR_INTERNAL, "timer slots %d, %d", from, to);
  CUDA_CHECK(cudaEventSynchronize(impl->timer[to]));
  float elapsed = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&elapsed, impl->timer[from], impl->timer[to]));
  *ms = (double)elapsed;
  return DS_OK;
}

int cuda_key_histogram(backend_t *b, const float *values, int64_t rows, int clamp_zero, uint32_t prefix,
                       int prefix_bits, int shift, int bits, uint64_t *bins) {
  cuda_impl *impl = impl_of(b);
  const size_t bytes = ((size_t)(1 << ORDER_KEY_MAX_BITS) + 1) * sizeof(unsigned long long);
  if (bits < 1 || bits > ORDER_KEY_MAX_BITS) return ds_fail(DS_ERR_INTERNAL, "key_histogram: %d bits", bits);
  if (!impl->key_bins_dev) CUDA_CHECK(cudaMalloc(&impl->key_bins_dev, bytes));
  if (!impl->key_bins_host) CUDA_CHECK(cudaMallocHost(&impl->key_bins_host, bytes));
  unsigned long long *device_bins = static_cast<unsigned long long *>(impl->key_bins_dev);
  DS_TRY(launch_key_histogram(values, rows, clamp_zero, prefix, prefix_bits, shift, bits, device_bins, impl->sm_count,
                              impl->stream));
  const size_t used = ((size_t)(1 << bits) + 1) * sizeof(unsigned long long);
  DS_TRY(cuda_download(b, impl->key_bins_host, device_bins, used));
  memcpy(bins, impl->key_bins_host, used);
  return DS_OK;
}

int cuda_logp_grad(backend_t *b, const dsampler_target *t, const float *x, int64_t n, float *logp,
                   float *grad) {
  cuda_impl *impl = impl_of(b);
  if (n == 0) return DS_OK;
  builtin_params_t params;
  if (fused_gaussian(t, t->dim, &params)) return gaussian_launch_logp_grad(&params, x, n, logp, grad, impl->stream);
  if (t->logp_grad_cuda) {
    int rc = t->logp_grad_cuda(t->self, x, n, logp, grad, impl->stream);
    if (rc != 0)
      return ds_fail(DS_ERR_TARGET, "target '%s': logp_grad_cuda failed (returned %d)", t->name, rc);
    CUDA_CHECK(cudaGetLastError());
    return DS_OK;
  }
  /* Host gradient only: through pinned memory. */
  const size_t x_bytes = (size_t)(n * t->dim) * sizeof(float), logp_bytes = (size_t)n * sizeof(float);
  DS_TRY(ensure_pinned(&impl->stage, &impl->stage_bytes, 2 * x_bytes + logp_bytes));
  float *x_host = static_cast<float *>(impl->stage);
  float *grad_host = x_host + (size_t)(n * t->dim), *logp_host = grad_host + (size_t)(n * t->dim);
  DS_TRY(cuda_download(b, x_host, x, x_bytes));
  int rc = t->logp_grad(t->self, x_host, n, logp_host, grad_host);
  if (rc != 0) return ds_fail(DS_ERR_TARGET, "target '%s': logp_grad failed (returned %d)", t->name, rc);
  CUDA_CHECK(cudaMemcpyAsync(logp, logp_host, logp_bytes, cudaMemcpyHostToDevice, impl->stream));
  CUDA_CHECK(cudaMemcpyAsync(grad, grad_host, x_bytes, cudaMemcpyHostToDevice, impl->stream));
  CUDA_CHECK(cudaStreamSynchronize(impl->stream)); /* the staging buffer is reused next call */
  return DS_OK;
}

/* The phi scratch (grow-only), which the median's centred rows and the KSD's row sums share. */
int ensure_phi_scratch(cuda_impl *impl, size_t floats, const char *what) {
  size_t have_bytes = impl->phi_scratch_floats * sizeof(float);
  void *scratch = impl->phi_scratch;
  DS_TRY(ensure_device(&scratch, &have_bytes, floats * sizeof(float), what));
  impl->phi_scratch = static_cast<float *>(scratch);
  impl->phi_scratch_floats = have_bytes / sizeof(float);
  return DS_OK;
}

int cuda_svgd_pair_counts(backend_t *b, const float *x_all, int64_t n, int64_t dim, int64_t row_begin,
                          int64_t row_end, int pass, uint32_t select_bits, uint64_t **counts_out) {
  cuda_impl *impl = impl_of(b);
  *counts_out = NULL;
  if (pass != SVGD_MEDIAN_PASS_HIGH && pass != SVGD_MEDIAN_PASS_LOW && pass != SVGD_MEDIAN_PASS_WINDOW)
    return ds_fail(DS_ERR_INTERNAL, "svgd_pair_counts: bad pass %d", pass);
  const int counts = pass == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_COUNTS : SVGD_HIST_BINS;
  /* Cleared on a rank without rows too: its zeros go into the sum across ranks. */
  CUDA_CHECK(cudaMemsetAsync(impl->hist_dev, 0, (size_t)counts * sizeof(unsigned long long), impl->stream));
  /* The first pass after svgd_keep_distances keeps them; later passes of the median (after a
   * window miss) count the same pairs and leave them as they are. */
  const bool keep = impl->keep_pending && svgd_keeps_distances(n, dim);
  impl->keep_pending = 0;
  float *dist = NULL;
  if (keep && row_end > row_begin) {
    const size_t bytes = (size_t)(row_end - row_begin) * (size_t)svgd_kept_distances_ld(n) * sizeof(float);
    DS_TRY(ensure_device(&impl->dist, &impl->dist_bytes, bytes, "the median's distances kept for phi"));
    dist = static_cast<float *>(impl->dist);
  }
  if (n >= 2 && row_end > row_begin) {
    /* The centred rows share the phi scratch: the two never run at once. */
    DS_TRY(ensure_phi_scratch(impl, svgd_pair_histogram_scratch_floats(n, dim), "the median's centred rows"));
    DS_TRY(svgd_launch_pair_histogram(x_all, n, dim, row_begin, row_end, pass, select_bits, impl->hist_dev,
                                      impl->phi_scratch, dist, impl->sm_count, impl->stream));
  }
  if (keep) {
    impl->kept = 1;
    impl->kept_x = x_all;
    impl->kept_n = n;
    impl->kept_dim = dim;
    impl->kept_begin = row_begin;
    impl->kept_end = row_end;
  }
  /* unsigned long long (the kernels' atomicAdd type) and uint64_t are both 64-bit unsigned. */
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t), "64-bit counts");
  *counts_out = reinterpret_cast<uint64_t *>(impl->hist_dev);
  return DS_OK;
}

int cuda_svgd_pair_histogram(backend_t *b, const float *x_all, int64_t n, int64_t dim, int64_t row_begin,
                             int64_t row_end, int pass, uint32_t select_bits, uint64_t *hist) {
  cuda_impl *impl = impl_of(b);
  if (pass != SVGD_MEDIAN_PASS_HIGH && pass != SVGD_MEDIAN_PASS_LOW && pass != SVGD_MEDIAN_PASS_WINDOW)
    return ds_fail(DS_ERR_INTERNAL, "svgd_pair_histogram: bad pass %d", pass);
  if (n < 2 || row_end <= row_begin) return DS_OK;
  const int counts = pass == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_COUNTS : SVGD_HIST_BINS;
  uint64_t *counts_dev = NULL;
  DS_TRY(cuda_svgd_pair_counts(b, x_all, n, dim, row_begin, row_end, pass, select_bits, &counts_dev));
  DS_TRY(cuda_download(b, impl->hist_host, counts_dev, (size_t)counts * sizeof(uint64_t)));
  for (int bin = 0; bin < counts; ++bin) hist[bin] += impl->hist_host[bin];
  return DS_OK;
}

int cuda_svgd_phi(backend_t *b, const float *x_all, const float *score_all, int64_t n, int64_t dim,
                  int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, float *phi) {
  cuda_impl *impl = impl_of(b);
  if (row_end <= row_begin) return DS_OK;
  DS_TRY(ensure_phi_scratch(impl, svgd_phi_scratch_floats(n, dim, row_end - row_begin), "SVGD phi scratch"));
  const bool kept = impl->kept && impl->kept_x == x_all && impl->kept_n == n && impl->kept_dim == dim &&
                    impl->kept_begin == row_begin && impl->kept_end == row_end;
  impl->kept = 0; /* used once: the particles move after phi */
  return svgd_launch_phi(x_all, score_all, n, dim, row_begin, row_end, kernel, phi, impl->phi_scratch,
                         kept ? static_cast<const float *>(impl->dist) : NULL, impl->stream);
}

int cuda_svgd_keep_distances(backend_t *b) {
  impl_of(b)->keep_pending = 1;
  impl_of(b)->kept = 0;
  return DS_OK;
}

int cuda_svgd_update(backend_t *b, float *x, const float *phi, float *g, int64_t count, svgd_update_t kind,
                     float step, int64_t iteration) {
  float correction1 = 1.0f, correction2 = 1.0f;
  if (kind == SVGD_UPDATE_ADAM) svgd_adam_bias(iteration, &correction1, &correction2);
  return svgd_launch_update(x, phi, g, count, (int)kind, step, iteration, correction1, correction2,
                            impl_of(b)->stream);
}

int cuda_hmc_transition(backend_t *b, const dsampler_target *t, hmc_batch_t *batch) {
  cuda_impl *impl = impl_of(b);
  if (batch->n_chains == 0) return DS_OK;
  builtin_params_t params;
  if (!batch->metric_factor && fused_gaussian(t, batch->dim, &params) && hmc_gaussian_fused_supported(batch->dim))
    return hmc_launch_gaussian_fused(&params, batch, impl->stream);

  /* Generic: L batched gradient evaluations between kick-drift kernels. */
  const size_t n = (size_t)batch->n_chains, elems = n * (size_t)batch->dim;
  const size_t bytes = 3 * elems * sizeof(float) + 2 * n * sizeof(float) + n * sizeof(double) + 64;
  DS_TRY(ensure_device(&impl->hmc_work, &impl->hmc_work_bytes, bytes, "HMC work arrays"));
  double *h0 = static_cast<double *>(impl->hmc_work); /* first: 8-byte aligned */
  /* q_work 16-byte aligned (the wide dense kernels read float4s); the 64 bytes spare cover it. */
  float *q_work = reinterpret_cast<float *>(h0 + n + (n & 1));
  float *p_work = q_work + elems, *grad_work = p_work + elems;
  float *logp_work = grad_work + elems, *uniform = logp_work + n;
  /* A row-walk built-in's trajectory in one kernel (targets_builtin_cuda.h): the same bits as the
   * step-by-step path below, in one pass over memory. */
  const int builtin_trajectory = !batch->metric_factor && !batch->leapfrog_cuda && batch->n_leapfrog > 0 &&
                                 !impl->builtin_trajectory_off && builtin_target_lookup(t) &&
                                 cuda_builtin_leapfrog_fits(builtin_target_lookup(t), batch->dim);
  /* The target's own trajectory (a JAX model's programs) runs on the batch's state, its start
   * kept in the work arrays: an accepted chain then moves nothing in finish. */
  const int own_trajectory = !batch->metric_factor && batch->leapfrog_cuda && batch->n_leapfrog > 0;
  /* The diagonal kick-drift's first step reads q and grad from the batch: no copy for it either. */
  const hmc_state_mode_t mode = own_trajectory ? HMC_STATE_IN_PLACE
                                : !builtin_trajectory && (batch->metric_factor || batch->n_leapfrog == 0) ? HMC_STATE_COPY
                                                                                                      : HMC_STATE_READ;
  if (impl->split_on) CUDA_CHECK(cudaEventRecord(impl->split[0], impl->stream));
  DS_TRY(hmc_launch_begin(batch, q_work, p_work, grad_work, logp_work, uniform, h0, mode, impl->stream));
  if (builtin_trajectory) {
    DS_TRY(cuda_builtin_leapfrog((void *)builtin_target_lookup(t), batch->q, batch->grad, q_work, p_work, grad_work, logp_work, batch->step_size,
                                 batch->inv_metric, batch->shared_metric, batch->n_leapfrog, batch->n_chains,
                                 impl->stream));
    return hmc_launch_finish(batch, q_work, p_work, grad_work, logp_work, uniform, h0, mode, impl->stream);
  }
  if (own_trajectory) {
    if (impl->split_on) CUDA_CHECK(cudaEventRecord(impl->split[1], impl->stream));
    /* The target's own trajectory: its kicks, drifts and gradients in one call, on the batch's
     * q, grad and logp (a failed call leaves them mid-trajectory; the run then stops without a
     * checkpoint from them). */
    int rc = batch->leapfrog_cuda(batch->leapfrog_self, batch->q, p_work, batch->grad, batch->logp,
                                  batch->step_size, batch->inv_metric, batch->shared_metric, batch->n_leapfrog,
                                  batch->n_chains, impl->stream);
    if (rc != 0) return ds_fail(DS_ERR_TARGET, "target '%s': leapfrog_cuda failed (returned %d)", t->name, rc);
    if (impl->split_on) CUDA_CHECK(cudaEventRecord(impl->split[2], impl->stream));
    DS_TRY(hmc_launch_finish(batch, q_work, p_work, grad_work, logp_work, uniform, h0, mode, impl->stream));
    if (impl->split_on) {
      CUDA_CHECK(cudaEventRecord(impl->split[3], impl->stream));
      CUDA_CHECK(cudaEventSynchronize(impl->split[3]));
      /* The first transition compiles the target's programs: left out. */
      for (int k = 0; k < 3 && impl->split_seen > 0; ++k) {
        float ms = 0.0f;
        CUDA_CHECK(cudaEventElapsedTime(&ms, impl->split[k], impl->split[k + 1]));
        impl->split_ms[k] += ms;
      }
      impl->split_count += impl->split_seen > 0;
      impl->split_seen++;
    }
    return DS_OK;
  }
  for (int step = 0; step < batch->n_leapfrog; ++step) {
    if (batch->metric_factor)
      DS_TRY(hmc_launch_dense_kick_drift(batch, step, q_work, p_work, grad_work, impl->stream));
    else
      DS_TRY(hmc_launch_kick_drift(batch, step, q_work, p_work, grad_work, impl->stream));
    DS_TRY(cuda_logp_grad(b, t, q_work, batch->n_chains, logp_work, grad_work));
  }
  return hmc_launch_finish(batch, q_work, p_work, grad_work, logp_work, uniform, h0, mode, impl->stream);
}

/* Device digits -> exact sums: digits[k * EXACT_DIGITS + d]. */
void digits_to_sums(const unsigned long long *digits, int64_t count, int64_t additions, exact_sum_t *sums) {
  for (int64_t k = 0; k < count; ++k) {
    for (int d = 0; d < EXACT_DIGITS; ++d) sums[k].digit[d] = (int64_t)digits[k * EXACT_DIGITS + d];
    sums[k].pending = additions;
  }
}

int ensure_sums(cuda_impl *impl, size_t count) {
  const size_t bytes = count * sizeof(unsigned long long);
  DS_TRY(ensure_device(&impl->sums_dev, &impl->sums_dev_bytes, bytes, "exact sums"));
  return ensure_pinned(&impl->sums_host, &impl->sums_host_bytes, bytes);
}

int cuda_hmc_stats(backend_t *b, const hmc_batch_t *batch, hmc_stats_t *stats) {
  cuda_impl *impl = impl_of(b);
  const size_t count = 5 * EXACT_DIGITS + 2;
  DS_TRY(ensure_sums(impl, count));
  unsigned long long *totals = static_cast<unsigned long long *>(impl->sums_dev);
  DS_TRY(hmc_launch_stats(batch, totals, impl->sm_count, impl->stream));
  unsigned long long *host = static_cast<unsigned long long *>(impl->sums_host);
  DS_TRY(cuda_download(b, host, totals, count * sizeof *host));
  digits_to_sums(host, 1, batch->n_chains, &stats->accept);
  digits_to_sums(host + EXACT_DIGITS, 1, batch->n_chains, &stats->step);
  digits_to_sums(host + 2 * EXACT_DIGITS, 1, batch->n_chains, &stats->chees_slope);
  digits_to_sums(host + 3 * EXACT_DIGITS, 1, batch->n_chains, &stats->chees_value);
  digits_to_sums(host + 4 * EXACT_DIGITS, 1, batch->n_chains, &stats->chees_weight);
  stats->divergent = (int64_t)host[5 * EXACT_DIGITS];
  if (host[5 * EXACT_DIGITS + 1]) return ds_fail(DS_ERR_TARGET, "HMC: a step size is not finite (adaptation diverged?)");
  return DS_OK;
}

int cuda_hmc_record_draw(backend_t *b, const hmc_batch_t *batch, hmc_draw_block_t *block, int64_t slot) {
  return hmc_launch_record_draw(batch, block, slot, impl_of(b)->stream);
}

/* backend.h's covariance_add, deferred: each update keeps the chains' centred states (one
 * [rows, dim] write) and every covariance_defer_capacity(dim) updates are folded into m2 at
 * once, the same bits as one update at a time; a read or write of m2 through the backend (or
 * an update of another m2) folds what is pending first. Where the states do not fit in device
 * memory, or at a dim without deferral, each update goes to m2 at once. */
int cuda_covariance_add(backend_t *b, const float *q, const float *mean, float *m2, int64_t rows, int64_t dim,
                        double n) {
  cuda_impl *impl = impl_of(b);
  if (rows == 0 || n <= 1.0) return DS_OK;
  if (impl->cov_pending && (impl->cov_m2 != m2 || impl->cov_rows != rows || impl->cov_dim != dim))
    DS_TRY(covariance_flush(impl));
  const int capacity = impl->cov_defer_off ? 1 : covariance_defer_capacity(dim);
  const size_t state_bytes = (size_t)(rows * dim) * sizeof(float);
  if (capacity > 1 && impl->cov_centred_bytes < (size_t)capacity * state_bytes &&
      impl->cov_refused_bytes != (size_t)capacity * state_bytes) {
    /* Grow-only; without the room, no deferral (the result is the same). */
    DS_TRY(covariance_flush(impl));
    if (impl->cov_centred) CUDA_CHECK(cudaFree(impl->cov_centred));
    impl->cov_centred = NULL;
    impl->cov_centred_bytes = 0;
    if (cudaMalloc(&impl->cov_centred, (size_t)capacity * state_bytes) == cudaSuccess)
      impl->cov_centred_bytes = (size_t)capacity * state_bytes;
    else {
      (void)cudaGetLastError();
      impl->cov_centred = NULL;
      impl->cov_refused_bytes = (size_t)capacity * state_bytes;
    }
  }
  if (capacity <= 1 || impl->cov_centred_bytes < (size_t)capacity * state_bytes) {
    DS_TRY(covariance_flush(impl));
    return launch_covariance_add(q, mean, m2, rows, dim, n, impl->stream);
  }
  impl->cov_m2 = m2;
  impl->cov_rows = rows;
  impl->cov_dim = dim;
  float *slot = static_cast<float *>(impl->cov_centred) + (size_t)impl->cov_pending * (size_t)(rows * dim);
  DS_TRY(launch_covariance_centre(q, mean, slot, rows, dim, impl->stream));
  impl->cov_weight[impl->cov_pending++] = (float)(n / (n - 1.0));
  return impl->cov_pending == capacity ? covariance_flush(impl) : DS_OK;
}

int cuda_running_moments_add(backend_t *b, const float *x, float *mean, float *m2, int64_t rows, double n) {
  return launch_running_moments(x, mean, m2, rows, n, impl_of(b)->stream);
}

int cuda_fill(backend_t *b, float *dst, float value, int64_t count) {
  DS_TRY(covariance_settle(impl_of(b), dst, (size_t)(count > 0 ? count : 0) * sizeof(float)));
  return launch_fill(dst, value, count, impl_of(b)->stream);
}

int cuda_column_sums(backend_t *b, const float *values, int64_t rows, int64_t cols, const double *center,
                     exact_sum_t *sums) {
  cuda_impl *impl = impl_of(b);
  DS_TRY(covariance_settle(impl, values, (size_t)(rows * cols) * sizeof(float)));
  const size_t count = (size_t)cols * EXACT_DIGITS + 1;
  DS_TRY(ensure_sums(impl, count));
  const double *center_dev = NULL;
  if (center) {
    DS_TRY(ensure_device(&impl->center_dev, &impl->center_bytes, (size_t)cols * sizeof(double), "column centres"));
    DS_TRY(cuda_upload(b, impl->center_dev, center, (size_t)cols * sizeof(double)));
    center_dev = static_cast<const double *>(impl->center_dev);
  }
  unsigned long long *totals = static_cast<unsigned long long *>(impl->sums_dev);
  DS_TRY(launch_column_sums(values, rows, cols, center_dev, totals, impl->stream));
  unsigned long long *host = static_cast<unsigned long long *>(impl->sums_host);
  DS_TRY(cuda_download(b, host, totals, count * sizeof *host));
  digits_to_sums(host, cols, rows, sums);
  if (host[(size_t)cols * EXACT_DIGITS])
    return ds_fail(DS_ERR_TARGET, "a chain's position or moment is out of range (not finite or > 1e111)");
  return DS_OK;
}

int cuda_svgd_stein_sum(backend_t *b, const float *x_all, const float *score_all, int64_t n, int64_t dim,
                        int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, exact_sum_t *sum) {
  cuda_impl *impl = impl_of(b);
  const int64_t rows = row_end - row_begin;
  /* The rows' sums take the phi scratch (grow-only), as doubles, and the tiles' inputs after them. */
  const size_t sum_floats = 2 * (size_t)(rows > 0 ? rows : 1) + 4;
  DS_TRY(ensure_phi_scratch(impl, sum_floats + svgd_stein_scratch_floats(n, dim, kernel), "KSD row sums"));
  DS_TRY(ensure_sums(impl, EXACT_DIGITS + 1));
  unsigned long long *totals = static_cast<unsigned long long *>(impl->sums_dev);
  DS_TRY(svgd_launch_stein_sum(x_all, score_all, n, dim, row_begin, row_end, kernel,
                               reinterpret_cast<double *>(impl->phi_scratch), impl->phi_scratch + sum_floats, totals,
                               impl->stream));
  unsigned long long *host = static_cast<unsigned long long *>(impl->sums_host);
  DS_TRY(cuda_download(b, host, totals, (EXACT_DIGITS + 1) * sizeof *host));
  digits_to_sums(host, 1, rows, sum);
  if (host[EXACT_DIGITS])
    return ds_fail(DS_ERR_TARGET, "kernel Stein discrepancy: a particle's Stein kernel sum is not finite "
                                  "(particles or scores out of range)");
  return DS_OK;
}

int cuda_dual_average(backend_t *b, double *state, const float *accept, float *step_out, int64_t rows,
                      const dual_average_step_t *step) {
  return launch_dual_average(state, accept, step_out, rows, step, impl_of(b)->stream);
}

int cuda_moments_to_metric(backend_t *b, float *mean, float *m2, int64_t rows, int64_t dim, double n,
                           float *inv_metric) {
  return launch_moments_to_metric(mean, m2, rows, dim, n, inv_metric, impl_of(b)->stream);
}

int cuda_step_search(backend_t *b, const float *accept_prob, int8_t *direction, int8_t *exponent, float *step,
                     int64_t rows, step_search_counts_t *counts) {
  cuda_impl *impl = impl_of(b);
  const size_t count = STEP_SEARCH_BINS + 1;
  DS_TRY(ensure_sums(impl, count));
  unsigned long long *totals = static_cast<unsigned long long *>(impl->sums_dev);
  DS_TRY(launch_step_search(accept_prob, direction, exponent, step, rows, totals, impl->stream));
  unsigned long long *host = static_cast<unsigned long long *>(impl->sums_host);
  DS_TRY(cuda_download(b, host, totals, count * sizeof *host));
  counts->open = (int64_t)host[0];
  for (int i = 0; i < STEP_SEARCH_BINS; ++i) counts->exponent[i] = (int64_t)host[1 + i];
  return DS_OK;
}

int cuda_alloc_host(backend_t *b, void **ptr, size_t bytes) {
  (void)b;
  *ptr = NULL;
  if (bytes == 0) return DS_OK;
  if (cudaMallocHost(ptr, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    *ptr = NULL;
    return DS_FAIL_ALLOC("pinned host memory", bytes);
  }
  return DS_OK;
}

void cuda_release_host(backend_t *b, void *ptr) {
  (void)b;
  if (ptr) CUDA_CHECK_NORETURN(cudaFreeHost(ptr));
}

void cuda_destroy(backend_t *b) {
  cuda_impl *impl = impl_of(b);
  if (impl) {
    if (impl->stream) CUDA_CHECK_NORETURN(cudaStreamSynchronize(impl->stream));
    if (impl->split_count > 0)
      fprintf(stderr, "cuda backend: %lld target-trajectory transitions, GPU ms each: begin %.3f, the target's call "
              "%.3f, finish %.3f\n", (long long)impl->split_count, impl->split_ms[0] / (double)impl->split_count,
              impl->split_ms[1] / (double)impl->split_count, impl->split_ms[2] / (double)impl->split_count);
    if (impl->split_on)
      for (int k = 0; k < 4; ++k) CUDA_CHECK_NORETURN(cudaEventDestroy(impl->split[k]));
    if (impl->hist_dev) CUDA_CHECK_NORETURN(cudaFree(impl->hist_dev));
    if (impl->hist_host) CUDA_CHECK_NORETURN(cudaFreeHost(impl->hist_host));
    if (impl->phi_scratch) CUDA_CHECK_NORETURN(cudaFree(impl->phi_scratch));
    if (impl->dist) CUDA_CHECK_NORETURN(cudaFree(impl->dist));
    if (impl->hmc_work) CUDA_CHECK_NORETURN(cudaFree(impl->hmc_work));
    if (impl->stage) CUDA_CHECK_NORETURN(cudaFreeHost(impl->stage));
    if (impl->sums_dev) CUDA_CHECK_NORETURN(cudaFree(impl->sums_dev));
    if (impl->sums_host) CUDA_CHECK_NORETURN(cudaFreeHost(impl->sums_host));
    if (impl->center_dev) CUDA_CHECK_NORETURN(cudaFree(impl->center_dev));
    if (impl->cov_centred) CUDA_CHECK_NORETURN(cudaFree(impl->cov_centred));
    if (impl->key_bins_dev) CUDA_CHECK_NORETURN(cudaFree(impl->key_bins_dev));
    if (impl->key_bins_host) CUDA_CHECK_NORETURN(cudaFreeHost(impl->key_bins_host));
    for (int k = 0; k < impl->timer_made; ++k) CUDA_CHECK_NORETURN(cudaEventDestroy(impl->timer[k]));
    if (impl->stream) CUDA_CHECK_NORETURN(cudaStreamDestroy(impl->stream));
    free(impl);
  }
  free(b);
}

int cuda_setup(int device, backend_t *b, cuda_impl *impl) {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  if (device < 0 || device >= devices)
    return ds_fail(DS_ERR_INPUT, "--backend cuda: GPU %d requested but %d visible", device, devices);
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaDeviceGetAttribute(&impl->sm_count, cudaDevAttrMultiProcessorCount, device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  const char *split = getenv("DSAMPLER_JAX_STATS");
  if (split && split[0] == '1') {
    for (int k = 0; k < 4; ++k) CUDA_CHECK(cudaEventCreate(&impl->split[k]));
    impl->split_on = 1;
  }
  CUDA_CHECK(cudaMalloc((void **)&impl->hist_dev, (size_t)SVGD_WINDOW_COUNTS * sizeof(unsigned long long)));
  CUDA_CHECK(cudaMallocHost((void **)&impl->hist_host, (size_t)SVGD_WINDOW_COUNTS * sizeof(uint64_t)));
  b->name = "cuda";
  b->on_device = 1;
  b->device = device;
  b->stream = impl->stream;
  return DS_OK;
}

} /* namespace */

extern "C" void backend_cuda_builtin_trajectory(backend_t *b, int on) { impl_of(b)->builtin_trajectory_off = !on; }

extern "C" void backend_cuda_covariance_defer(backend_t *b, int on) {
  cuda_impl *impl = impl_of(b);
  if (!on && covariance_flush(impl) != DS_OK) return;
  impl->cov_defer_off = !on;
}

extern "C" int backend_cuda_create(int device, backend_t **out) {
  *out = NULL;
  backend_t *b = static_cast<backend_t *>(calloc(1, sizeof *b));
  cuda_impl *impl = static_cast<cuda_impl *>(calloc(1, sizeof *impl));
  if (!b || !impl) {
    free(b);
    free(impl);
    return DS_FAIL_ALLOC("the CUDA backend", sizeof *b);
  }
  b->impl = impl;
  b->alloc = cuda_alloc;
  b->release = cuda_release;
  b->upload = cuda_upload;
  b->download = cuda_download;
  b->synchronize = cuda_synchronize;
  b->timer_mark = cuda_timer_mark;
  b->timer_elapsed = cuda_timer_elapsed;
  b->key_histogram = cuda_key_histogram;
  b->logp_grad = cuda_logp_grad;
  b->svgd_pair_histogram = cuda_svgd_pair_histogram;
  b->svgd_pair_counts = cuda_svgd_pair_counts;
  b->svgd_phi = cuda_svgd_phi;
  b->svgd_keep_distances = cuda_svgd_keep_distances;
  b->svgd_stein_sum = cuda_svgd_stein_sum;
  b->svgd_update = cuda_svgd_update;
  b->hmc_transition = cuda_hmc_transition;
  b->hmc_stats = cuda_hmc_stats;
  b->hmc_record_draw = cuda_hmc_record_draw;
  b->fill = cuda_fill;
  b->column_sums = cuda_column_sums;
  b->covariance_add = cuda_covariance_add;
  b->running_moments_add = cuda_running_moments_add;
  b->dual_average = cuda_dual_average;
  b->moments_to_metric = cuda_moments_to_metric;
  b->step_search = cuda_step_search;
  b->alloc_host = cuda_alloc_host;
  b->release_host = cuda_release_host;
  b->destroy = cuda_destroy;
  int status = cuda_setup(device, b, impl);
  if (status != DS_OK) {
    cuda_destroy(b);
    return status;
  }
  *out = b;
  return DS_OK;
}
