/* hmc_dispatch.cu: the extern "C" entry points of the HMC kernels (hmc_kernels.h) and the routing
 * behind them: the fused kernel's lanes (hmc_cuda_set_lanes), the dense metric's family by dim,
 * device and hmc_dense_family_setting (launch_dense_step, launch_dense_chees), the grids. The
 * families are the other files of cuda/hmc/:
 *   hmc_fused.cu          the built-in gaussian's whole iteration in one kernel
 *   hmc_generic.cu        the generic path: begin (momenta), kick-drift, finish
 *   hmc_dense_element.cu  the dense metric, one element a thread
 *   hmc_dense_tiled.cu    the dense metric, tiles in shared memory
 *   hmc_dense_wide.cu     the dense metric, register-tiled
 *   hmc_moments.cu        running moments and the dense metric's covariances
 *   hmc_adapt.cu          dual averaging, the metric from the moments, the step-size search
 *   hmc_draws.cu          stored draws, exact column sums, fill
 * hmc_stats_kernel, a template launched from hmc_launch_stats, is defined in this file: a
 * template kernel is launched only from the file that defines it (hmc_internal.cuh). Every file
 * of cuda/hmc/ is compiled with --fmad=false (hmc_internal.cuh). */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

namespace {

int hmc_lanes_setting = 0; /* 0: by dimension; else 4 or 16 lanes per chain */

/* Digits of exact sums, reduced over a block and added to the global totals with one atomic
 * per digit per block (integer additions: the total does not depend on their order). */
constexpr int STATS_THREADS = 256;

template <int SUMS>
__device__ void block_add_digits(int64_t (*digits)[EXACT_DIGITS], unsigned long long *total) {
  __shared__ int64_t warp_digits[STATS_THREADS / 32][EXACT_DIGITS];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int sum = 0; sum < SUMS; ++sum) {
    for (int d = 0; d < EXACT_DIGITS; ++d) {
      long long value = digits[sum][d];
      for (int width = 16; width >= 1; width /= 2) value += __shfl_down_sync(0xffffffffu, value, width);
      if (lane == 0) warp_digits[warp][d] = value;
    }
    __syncthreads();
    if (threadIdx.x < EXACT_DIGITS) {
      int64_t value = 0;
      for (int w = 0; w < STATS_THREADS / 32; ++w) value += warp_digits[w][threadIdx.x];
      if (value) atomicAdd(total + sum * EXACT_DIGITS + threadIdx.x, (unsigned long long)value);
    }
    __syncthreads();
  }
}

/* totals: [accept, step, ChEES slope, value, weight digits, divergent count, failures]; the
 * ChEES sums (backend.h's hmc_stats_t) only with CHEES. */
template <bool CHEES>
__global__ void __launch_bounds__(STATS_THREADS) hmc_stats_kernel(const hmc_batch_t b, unsigned long long *totals) {
  constexpr int SUMS = CHEES ? 5 : 2;
  int64_t digits[SUMS][EXACT_DIGITS];
  for (int sum = 0; sum < SUMS; ++sum)
    for (int d = 0; d < EXACT_DIGITS; ++d) digits[sum][d] = 0;
  unsigned long long divergent = 0, failed = 0;
  for (long long c = (long long)blockIdx.x * blockDim.x + threadIdx.x; c < b.n_chains;
       c += (long long)gridDim.x * blockDim.x) {
    const float a = b.accept_prob[c];
    failed += exact_digits_add(digits[0], (double)a) != 0;
    failed += exact_digits_add(digits[1], (double)b.step_size[c]) != 0;
    divergent += b.diverging[c];
    if (CHEES && !b.diverging[c] && a > 1e-4f && isfinite(b.chees[2 * c]) && isfinite(b.chees[2 * c + 1])) {
      const double change = (double)b.chees[2 * c], along = (double)b.chees[2 * c + 1];
      exact_digits_add(digits[CHEES ? 2 : 0], (double)a * (change * along));
      exact_digits_add(digits[CHEES ? 3 : 0], (double)a * (0.25 * change * change));
      exact_digits_add(digits[CHEES ? 4 : 0], (double)a);
    }
  }
  block_add_digits<SUMS>(digits, totals);
  for (int width = 16; width >= 1; width /= 2) {
    divergent += __shfl_down_sync(0xffffffffu, divergent, width);
    failed += __shfl_down_sync(0xffffffffu, failed, width);
  }
  if (threadIdx.x % 32 == 0 && divergent) atomicAdd(totals + 5 * EXACT_DIGITS, divergent);
  if (threadIdx.x % 32 == 0 && failed) atomicAdd(totals + 5 * EXACT_DIGITS + 1, failed);
}

unsigned grid_stride_blocks(long long count) {
  long long blocks = (count + 255) / 256;
  if (blocks > 65536) blocks = 65536;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

int check_batch(const hmc_batch_t *b, const char *who) {
  if (b->n_chains < 0 || b->dim < 1 || b->dim > INT32_MAX || b->n_leapfrog < 1 || b->chain_begin < 0)
    return ds_fail(DS_ERR_INTERNAL, "%s: bad sizes n_chains=%lld dim=%lld L=%d", who,
                   (long long)b->n_chains, (long long)b->dim, b->n_leapfrog);
  return DS_OK;
}

} /* namespace */

unsigned blocks_for(long long count, int threads) {
  long long blocks = (count + threads - 1) / threads;
  if (blocks > 0x7FFFFFFF) blocks = 0x7FFFFFFF;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

} /* namespace dsampler_hmc */

using namespace dsampler_hmc;

extern "C" int hmc_gaussian_fused_supported(int64_t dim) { return dim >= 1 && dim <= HMC_MAX_DIM_FUSED; }

extern "C" void hmc_cuda_set_lanes(int lanes) { hmc_lanes_setting = lanes == 4 || lanes == 16 ? lanes : 0; }

extern "C" int hmc_launch_gaussian_fused(const builtin_params_t *params, const hmc_batch_t *batch,
                                         cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_gaussian_fused"));
  if (!hmc_gaussian_fused_supported(batch->dim) || params->dim != batch->dim)
    return ds_fail(DS_ERR_INTERNAL, "hmc_launch_gaussian_fused: dim %lld not fused (target dim %lld)",
                   (long long)batch->dim, (long long)params->dim);
  if (batch->n_chains == 0) return DS_OK;
  if (batch->n_chains > (INT64_MAX / 16) / 2) return ds_fail(DS_ERR_INTERNAL, "hmc_launch_gaussian_fused: too many chains");
  const int64_t blocks = (batch->dim + 3) / 4; /* Philox blocks of momenta per chain */
  const int lanes = hmc_lanes_setting ? hmc_lanes_setting : (blocks <= 16 ? 4 : 16);
  if (lanes == 4) {
    if (blocks <= 4) return launch_gaussian<4, 1>(*params, *batch, stream);
    if (blocks <= 8) return launch_gaussian<4, 2>(*params, *batch, stream);
    if (blocks <= 16) return launch_gaussian<4, 4>(*params, *batch, stream);
  }
  if (blocks <= 16) return launch_gaussian<16, 1>(*params, *batch, stream);
  if (blocks <= 32) return launch_gaussian<16, 2>(*params, *batch, stream);
  return launch_gaussian<16, 4>(*params, *batch, stream);
}

extern "C" int hmc_launch_begin(const hmc_batch_t *batch, float *q_work, float *p_work, float *grad_work,
                                float *logp_work, float *uniform, double *h0, hmc_state_mode_t mode,
                                cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_begin"));
  if (batch->n_chains == 0) return DS_OK;
  const size_t bytes = (size_t)(batch->n_chains * batch->dim) * sizeof(float);
  if (mode != HMC_STATE_READ) {
    CUDA_CHECK(cudaMemcpyAsync(q_work, batch->q, bytes, cudaMemcpyDeviceToDevice, stream));
    CUDA_CHECK(cudaMemcpyAsync(grad_work, batch->grad, bytes, cudaMemcpyDeviceToDevice, stream));
  }
  hmc_begin_kernel<<<blocks_for(batch->n_chains * GENERIC_LANES, 128), 128, 0, stream>>>(
      *batch, p_work, uniform, h0, mode == HMC_STATE_IN_PLACE ? logp_work : NULL);
  CUDA_CHECK_LAUNCH("hmc_begin_kernel");
  return DS_OK;
}

extern "C" int hmc_launch_kick_drift(const hmc_batch_t *batch, int step, float *q_work, float *p_work,
                                     const float *grad_work, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_kick_drift"));
  if (step < 0 || step >= batch->n_leapfrog)
    return ds_fail(DS_ERR_INTERNAL, "hmc_launch_kick_drift: step %d outside [0, %d)", step, batch->n_leapfrog);
  if (batch->n_chains == 0 || batch->dim == 0) return DS_OK;
  /* 256 threads: columns a warp or more of a chain's coordinates (up to 256), rows the chains. */
  const int columns = batch->dim >= 256 ? 256 : batch->dim > 128 ? 256 : batch->dim > 64 ? 128 : batch->dim > 32 ? 64 : 32;
  const dim3 threads((unsigned)columns, (unsigned)(256 / columns));
  long long blocks = (batch->n_chains + threads.y - 1) / threads.y;
  if (blocks > 65536) blocks = 65536;
  hmc_kick_drift_kernel<<<(unsigned)blocks, threads, 0, stream>>>(*batch, step, q_work, p_work, grad_work);
  CUDA_CHECK_LAUNCH("hmc_kick_drift_kernel");
  return DS_OK;
}

static unsigned element_blocks(long long count) {
  unsigned blocks = blocks_for(count, 256);
  return blocks > 65536 ? 65536 : blocks;
}

/* The dense kernels by dim: the wide (register-tiled) ones while their shared memory fits the
 * device's, else the shared-memory tiled ones while L, L^T and a tile fit, else one element a
 * thread. Every family computes the same bits (the test compares them), so the choice may
 * depend on the device. hmc_dense_family_setting forces one (HMC_DENSE_*) where it applies. */
int hmc_dense_family_setting = 0;

static size_t dense_step_shared(long long dim) { return (size_t)(2 * dim * dim + 2 * DENSE_TILE * dim) * sizeof(float); }
static bool dense_step_tiled(long long dim) { return dim * DENSE_TILE <= DENSE_THREADS * DENSE_OUTPUTS; }
static size_t dense_chees_shared(long long dim) {
  return (size_t)(3 * DENSE_TILE * dim) * sizeof(double) + (size_t)(dim * dim + 3 * DENSE_TILE * dim + dim) * sizeof(float);
}

static size_t device_shared_limit() {
  static int limit = -1;
  if (limit < 0) {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
      (void)cudaGetLastError();
      limit = 48 * 1024;
    }
  }
  return (size_t)limit;
}

/* The wide and tiled families share one L among all chains; per-chain factors take the
 * element kernels. */
static bool dense_wide(const hmc_batch_t *batch, size_t shared) {
  const long long dim = batch->dim;
  if (batch->factor_per_chain) return false;
  if (hmc_dense_family_setting != 0 && hmc_dense_family_setting != HMC_DENSE_WIDE) return false;
  return wide_groups((int)dim) * wide_slabs((int)dim) <= WIDE_MAX_WARPS && shared <= device_shared_limit();
}

static bool dense_tiled(const hmc_batch_t *batch) {
  const long long dim = batch->dim;
  if (batch->factor_per_chain || hmc_dense_family_setting == HMC_DENSE_ELEMENT) return false;
  return dense_step_tiled(dim);
}

namespace dsampler_hmc {
/* Opts a kernel into more than 48 KiB of shared memory, once per size. */
int allow_shared(const void *kernel, size_t shared, size_t *opted) {
  if (shared > 48 * 1024 && shared > *opted) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    *opted = shared;
  }
  return DS_OK;
}
} /* namespace dsampler_hmc */

static int launch_dense_step(const hmc_batch_t *batch, float scale, int drift, float *q_work, float *p_work,
                             const float *grad_work, cudaStream_t stream) {
  const long long count = batch->n_chains * batch->dim;
  const int dim = (int)batch->dim;
  if (dense_wide(batch, wide_step_shared(dim))) {
    const bool aligned = ((reinterpret_cast<uintptr_t>(q_work) | reinterpret_cast<uintptr_t>(p_work) |
                           reinterpret_cast<uintptr_t>(grad_work)) & 15) == 0;
    if (dim % 4 == 0 && aligned) return launch_dense_wide<4>(batch, scale, drift, q_work, p_work, grad_work, stream);
    return launch_dense_wide<1>(batch, scale, drift, q_work, p_work, grad_work, stream);
  }
  if (dense_tiled(batch)) {
    static size_t opted = 0;
    const size_t shared = dense_step_shared(batch->dim);
    DS_TRY(allow_shared((const void *)hmc_dense_step_kernel, shared, &opted));
    const long long blocks = (batch->n_chains + DENSE_TILE - 1) / DENSE_TILE;
    hmc_dense_step_kernel<<<(unsigned)blocks, DENSE_THREADS, shared, stream>>>(*batch, scale, drift, q_work, p_work,
                                                                              grad_work);
    CUDA_CHECK_LAUNCH("hmc_dense_step_kernel");
    return DS_OK;
  }
  hmc_dense_kick_kernel<<<element_blocks(count), 256, 0, stream>>>(*batch, scale, p_work, grad_work);
  CUDA_CHECK_LAUNCH("hmc_dense_kick_kernel");
  if (drift) {
    hmc_dense_drift_kernel<<<element_blocks(count), 256, 0, stream>>>(*batch, q_work, p_work);
    CUDA_CHECK_LAUNCH("hmc_dense_drift_kernel");
  }
  return DS_OK;
}

static int launch_dense_chees(const hmc_batch_t *batch, const float *q_work, const float *p_work,
                              cudaStream_t stream) {
  const int dim = (int)batch->dim;
  if (dense_wide(batch, wide_chees_shared(dim))) {
    static size_t opted = 0;
    const size_t shared = wide_chees_shared(dim);
    DS_TRY(allow_shared((const void *)hmc_dense_chees_wide_kernel, shared, &opted));
    const long long blocks = (batch->n_chains + WIDE_CHEES_CHAINS - 1) / WIDE_CHEES_CHAINS;
    hmc_dense_chees_wide_kernel<<<(unsigned)blocks, 32 * wide_groups(dim), shared, stream>>>(*batch, q_work, p_work);
    CUDA_CHECK_LAUNCH("hmc_dense_chees_wide_kernel");
  } else if (dense_tiled(batch)) {
    static size_t opted = 0;
    const size_t shared = dense_chees_shared(batch->dim);
    DS_TRY(allow_shared((const void *)hmc_dense_chees_kernel, shared, &opted));
    const long long blocks = (batch->n_chains + DENSE_TILE - 1) / DENSE_TILE;
    hmc_dense_chees_kernel<<<(unsigned)blocks, DENSE_THREADS, shared, stream>>>(*batch, q_work, p_work);
    CUDA_CHECK_LAUNCH("hmc_dense_chees_kernel");
  } else {
    hmc_dense_chees_plain_kernel<<<blocks_for(batch->n_chains, 128), 128, 0, stream>>>(*batch, q_work, p_work);
    CUDA_CHECK_LAUNCH("hmc_dense_chees_plain_kernel");
  }
  return DS_OK;
}

extern "C" void hmc_cuda_set_dense_family(int family) {
  hmc_dense_family_setting = family == HMC_DENSE_WIDE || family == HMC_DENSE_TILED || family == HMC_DENSE_ELEMENT ? family : 0;
}

extern "C" int hmc_launch_dense_kick_drift(const hmc_batch_t *batch, int step, float *q_work, float *p_work,
                                           const float *grad_work, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_dense_kick_drift"));
  const long long count = batch->n_chains * batch->dim;
  if (count == 0) return DS_OK;
  return launch_dense_step(batch, step == 0 ? 0.5f : 1.0f, 1, q_work, p_work, grad_work, stream);
}

extern "C" int launch_covariance_add(const float *q, const float *mean, float *m2, int64_t rows, int64_t dim,
                                     double n, cudaStream_t stream) {
  if (rows == 0 || n <= 1.0) return DS_OK;
  const float weight = (float)(n / (n - 1.0));
  if (dim <= COV_TABLE_DIM) {
    const size_t shared = (size_t)(dim * (dim + 1)) * sizeof(unsigned short);
    covariance_add_kernel<<<(unsigned)((rows + COV_CHAINS - 1) / COV_CHAINS), 256, shared, stream>>>(q, mean, m2, rows,
                                                                                                     dim, weight);
    CUDA_CHECK_LAUNCH("covariance_add_kernel");
  } else {
    covariance_add_plain_kernel<<<element_blocks(rows * (dim * (dim + 1) / 2)), 256, 0, stream>>>(q, mean, m2, rows, dim,
                                                                                                 weight);
    CUDA_CHECK_LAUNCH("covariance_add_plain_kernel");
  }
  return DS_OK;
}

extern "C" int covariance_defer_capacity(int64_t dim) {
  if (dim < 1 || dim > COV_TABLE_DIM) return 1;
  const long long triangle = dim * (dim + 1) / 2;
  long long capacity = triangle / (2 * dim); /* the kept states at most half of m2 */
  const long long fit = (48 * 1024 - 4 * triangle) / ((long long)COV_CHAINS * dim * (long long)sizeof(float));
  if (capacity > fit) capacity = fit;
  if (capacity > COV_DEFER_MAX) capacity = COV_DEFER_MAX;
  return capacity < 2 ? 1 : (int)capacity;
}

extern "C" int launch_covariance_centre(const float *q, const float *mean, float *out, int64_t rows, int64_t dim,
                                        cudaStream_t stream) {
  if (rows == 0) return DS_OK;
  covariance_centre_kernel<<<element_blocks(rows * dim), 256, 0, stream>>>(q, mean, out, rows * dim);
  CUDA_CHECK_LAUNCH("covariance_centre_kernel");
  return DS_OK;
}

extern "C" int launch_covariance_fold(const float *centred, int updates, const float *weights, float *m2, int64_t rows,
                                      int64_t dim, cudaStream_t stream) {
  if (rows == 0 || updates == 0) return DS_OK;
  if (updates < 0 || updates > COV_DEFER_MAX || dim > COV_TABLE_DIM)
    return ds_fail(DS_ERR_INTERNAL, "launch_covariance_fold: %d updates at dim %lld", updates, (long long)dim);
  covariance_weights w;
  for (int t = 0; t < COV_DEFER_MAX; ++t) w.w[t] = t < updates ? weights[t] : 0.0f;
  const size_t shared = (size_t)updates * COV_CHAINS * dim * sizeof(float) + (size_t)(dim * (dim + 1)) * sizeof(unsigned short);
  static size_t opted = 0;
  DS_TRY(allow_shared((const void *)covariance_fold_kernel, shared, &opted));
  covariance_fold_kernel<<<(unsigned)((rows + COV_CHAINS - 1) / COV_CHAINS), 256, shared, stream>>>(centred, updates, w, m2,
                                                                                                   rows, dim);
  CUDA_CHECK_LAUNCH("covariance_fold_kernel");
  return DS_OK;
}

extern "C" int launch_running_moments(const float *x, float *mean, float *m2, int64_t rows, double n,
                                      cudaStream_t stream) {
  if (rows == 0) return DS_OK;
  running_moments_kernel<<<blocks_for(rows, 256), 256, 0, stream>>>(x, mean, m2, rows, (float)n);
  CUDA_CHECK_LAUNCH("running_moments_kernel");
  return DS_OK;
}

extern "C" int launch_key_histogram(const float *values, int64_t rows, int clamp_zero, uint32_t prefix,
                                    int prefix_bits, int shift, int bits, unsigned long long *bins, int sm_count,
                                    cudaStream_t stream) {
  if (bits < 1 || bits > ORDER_KEY_MAX_BITS || prefix_bits < 0 || prefix_bits + shift + bits > 32)
    return ds_fail(DS_ERR_INTERNAL, "launch_key_histogram: bits %d, prefix %d, shift %d", bits, prefix_bits, shift);
  CUDA_CHECK(cudaMemsetAsync(bins, 0, ((size_t)(1 << bits) + 1) * sizeof *bins, stream));
  if (rows == 0) return DS_OK;
  const long long wanted = (rows + 255) / 256, most = 4LL * (sm_count > 0 ? sm_count : 1);
  key_histogram_kernel<<<(unsigned)(wanted < most ? wanted : most), 256, 0, stream>>>(
      values, rows, clamp_zero, prefix, prefix_bits, shift, bits, bins);
  CUDA_CHECK_LAUNCH("key_histogram_kernel");
  return DS_OK;
}

extern "C" int hmc_launch_finish(const hmc_batch_t *batch, const float *q_work, float *p_work,
                                 const float *grad_work, const float *logp_work, const float *uniform,
                                 const double *h0, hmc_state_mode_t mode, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_finish"));
  if (batch->n_chains == 0) return DS_OK;
  if (mode == HMC_STATE_IN_PLACE && batch->metric_factor)
    return ds_fail(DS_ERR_INTERNAL, "hmc_launch_finish: a dense metric's trajectory does not run in place");
  if (batch->metric_factor) {
    DS_TRY(launch_dense_step(batch, 0.5f, 0, NULL, p_work, grad_work, stream));
    if (batch->chees_center) DS_TRY(launch_dense_chees(batch, q_work, p_work, stream));
  }
  hmc_finish_kernel<<<blocks_for(batch->n_chains * GENERIC_LANES, 128), 128, 0, stream>>>(
      *batch, q_work, p_work, grad_work, logp_work, uniform, h0, mode == HMC_STATE_IN_PLACE);
  CUDA_CHECK_LAUNCH("hmc_finish_kernel");
  return DS_OK;
}

extern "C" int hmc_launch_stats(const hmc_batch_t *batch, unsigned long long *totals, int sm_count, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_stats"));
  CUDA_CHECK(cudaMemsetAsync(totals, 0, (5 * EXACT_DIGITS + 2) * sizeof *totals, stream));
  if (batch->n_chains == 0) return DS_OK;
  long long blocks = (batch->n_chains + STATS_THREADS - 1) / STATS_THREADS;
  if (blocks > 2 * (long long)sm_count) blocks = 2 * (long long)sm_count;
  if (batch->chees_center)
    hmc_stats_kernel<true><<<(unsigned)blocks, STATS_THREADS, 0, stream>>>(*batch, totals);
  else
    hmc_stats_kernel<false><<<(unsigned)blocks, STATS_THREADS, 0, stream>>>(*batch, totals);
  CUDA_CHECK_LAUNCH("hmc_stats_kernel");
  return DS_OK;
}

extern "C" int launch_column_sums(const float *values, int64_t rows, int64_t cols, const double *center,
                                  unsigned long long *totals, cudaStream_t stream) {
  if (rows < 0 || cols < 1) return ds_fail(DS_ERR_INTERNAL, "launch_column_sums: bad sizes %lld x %lld",
                                           (long long)rows, (long long)cols);
  CUDA_CHECK(cudaMemsetAsync(totals, 0, ((size_t)cols * EXACT_DIGITS + 1) * sizeof *totals, stream));
  if (rows == 0) return DS_OK;
  long long y_blocks = (rows + 7) / 8;
  if (y_blocks > 256) y_blocks = 256;
  const dim3 grid((unsigned)((cols + 31) / 32), (unsigned)y_blocks), threads(32, 8);
  column_sums_kernel<<<grid, threads, 0, stream>>>(values, rows, cols, center, totals,
                                                   totals + (size_t)cols * EXACT_DIGITS);
  CUDA_CHECK_LAUNCH("column_sums_kernel");
  return DS_OK;
}

extern "C" int hmc_launch_record_draw(const hmc_batch_t *batch, const hmc_draw_block_t *block, int64_t slot,
                                      cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_record_draw"));
  if (slot < 0 || slot >= block->capacity || block->rows > batch->n_chains || block->dim != batch->dim)
    return ds_fail(DS_ERR_INTERNAL, "hmc_launch_record_draw: slot %lld of %lld, %lld of %lld chains",
                   (long long)slot, (long long)block->capacity, (long long)block->rows, (long long)batch->n_chains);
  if (block->rows == 0) return DS_OK;
  hmc_record_draw_kernel<<<grid_stride_blocks(block->rows * batch->dim), 256, 0, stream>>>(*batch, *block, slot);
  CUDA_CHECK_LAUNCH("hmc_record_draw_kernel");
  return DS_OK;
}

extern "C" int launch_fill(float *dst, float value, int64_t count, cudaStream_t stream) {
  if (count <= 0) return DS_OK;
  fill_kernel<<<grid_stride_blocks(count), 256, 0, stream>>>(dst, value, count);
  CUDA_CHECK_LAUNCH("fill_kernel");
  return DS_OK;
}

extern "C" int launch_dual_average(double *state, const float *accept, float *step_out, int64_t rows,
                                   const dual_average_step_t *step, cudaStream_t stream) {
  if (rows <= 0) return DS_OK;
  dual_average_kernel<<<blocks_for(rows, 256), 256, 0, stream>>>(state, accept, step_out, rows, *step);
  CUDA_CHECK_LAUNCH("dual_average_kernel");
  return DS_OK;
}

extern "C" int launch_moments_to_metric(float *mean, float *m2, int64_t rows, int64_t dim, double n,
                                        float *inv_metric, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0) return DS_OK;
  moments_to_metric_kernel<<<grid_stride_blocks(rows), 256, 0, stream>>>(mean, m2, rows, dim, n, inv_metric);
  CUDA_CHECK_LAUNCH("moments_to_metric_kernel");
  return DS_OK;
}

extern "C" int launch_step_search(const float *accept_prob, int8_t *direction, int8_t *exponent, float *step,
                                  int64_t rows, unsigned long long *counts, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(counts, 0, (STEP_SEARCH_BINS + 1) * sizeof *counts, stream));
  if (rows <= 0) return DS_OK;
  long long blocks = (rows + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  step_search_kernel<<<(unsigned)blocks, 256, 0, stream>>>(accept_prob, direction, exponent, step, rows, counts);
  CUDA_CHECK_LAUNCH("step_search_kernel");
  return DS_OK;
}
