/* hmc_internal.cuh: what the HMC kernel families of cuda/hmc/ share, private to them: the
 * constants, structs and small device helpers used by more than one file, and the declarations
 * of what one file defines and another calls (launchers, kernels launched from hmc_dispatch.cu).
 * The extern "C" entry points are hmc_kernels.h's, all in hmc_dispatch.cu.
 *
 * Every file of cuda/hmc/ is compiled with --fmad=false (cuda/CMakeLists.txt): HMC draws momenta
 * with rng.h's transforms, which, uncontracted, round as the CPU backend's.
 *
 * A kernel that is a template is launched only from the file that defines it: nvcc's
 * whole-program mode (-rdc=false) gives a __global__ template's launch stub internal linkage
 * (-static-global-template-stub, on by default), so its launchers live beside it. */
#ifndef DSAMPLER_HMC_INTERNAL_CUH
#define DSAMPLER_HMC_INTERNAL_CUH

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "hmc_kernels.h"
#include "rng.h"
#include "dense_metric.h"
#include "dual_average.h"
#include "exactsum_core.h"
#include "order_key.h"

namespace dsampler_hmc {

/* The fused gaussian kernel (hmc_fused.cu): threads a block; the largest dim it takes. */
constexpr int HMC_THREADS = 256;
constexpr int HMC_MAX_DIM_FUSED = 256;

/* ----------- a chain's sums, verdict and moments (hmc_fused.cu, hmc_generic.cu, hmc_moments.cu) */

template <int LANES>
__device__ __forceinline__ double group_sum(double value) {
#pragma unroll
  for (int width = LANES / 2; width >= 1; width /= 2)
    value += __shfl_xor_sync(0xffffffffu, value, width, LANES);
  return value;
}

/* The per-iteration outputs of one chain, as backend_cpu.c's hmc_block writes them. */
struct hmc_verdict {
  bool accept, divergent;
  float accept_prob, energy;
};

__device__ __forceinline__ hmc_verdict hmc_decide(double h0, double h1, float uniform) {
  hmc_verdict v;
  const double log_uniform = log(fmax((double)uniform, 1e-10));
  v.divergent = !isfinite(h1) || h1 - h0 > 1000.0;
  v.accept = !v.divergent && log_uniform < h0 - h1;
  v.accept_prob = v.divergent ? 0.0f : (float)fmin(1.0, exp(h0 - h1));
  v.energy = (float)(v.accept ? h1 : h0);
  return v;
}

/* A chain's per-iteration outputs; on accept, its new log density. */
__device__ __forceinline__ void write_verdict(const hmc_batch_t &b, long long chain, const hmc_verdict &v,
                                              float logp_proposed) {
  b.diverging[chain] = (uint8_t)v.divergent;
  b.accepted[chain] = (uint8_t)v.accept;
  b.accept_prob[chain] = v.accept_prob;
  b.energy[chain] = v.energy;
  if (v.accept && !b.probe) b.logp[chain] = logp_proposed;
}

/* Welford's update of a chain's running moments (backend.h) with x, in float as the CPU. */
__device__ __forceinline__ void welford_add(float *mean, float *m2, float x, float n) {
  const float delta = __fsub_rn(x, *mean);
  *mean = __fadd_rn(*mean, __fdiv_rn(delta, n));
  *m2 = __fadd_rn(*m2, __fmul_rn(delta, __fsub_rn(x, *mean)));
}

/* The generic path's lanes per chain (hmc_generic.cu). */
constexpr int GENERIC_LANES = 8;

/* ------------------- dense metric (hmc_dense_element.cu, hmc_dense_tiled.cu, hmc_dense_wide.cu) */

/* A chain's ChEES terms from its per-coordinate u'^2, u^2 and u' r' (entry i at i * stride of each),
 * summed in increasing i: chees[2 chain] = |u'|^2 - |u|^2, chees[2 chain + 1] = u' . r'. */
__device__ __forceinline__ void chees_chain_sums(const hmc_batch_t &b, long long chain, const double *after,
                                                 const double *before, const double *along, int dim, int stride) {
  double norm1 = 0.0, norm0 = 0.0, dot = 0.0;
  for (int i = 0; i < dim; ++i) {
    norm1 += after[i * stride];
    norm0 += before[i * stride];
    dot += along[i * stride];
  }
  b.chees[2 * chain] = (float)(norm1 - norm0);
  b.chees[2 * chain + 1] = (float)dot;
}

/* The shared-memory tiled kernels (hmc_dense_tiled.cu): chains a block, threads, outputs a thread. */
constexpr int DENSE_TILE = 32, DENSE_THREADS = 256, DENSE_OUTPUTS = 16;

/* The register-tiled ("wide") kernels (hmc_dense_wide.cu): their shapes and shared memory. */
constexpr int WIDE_GROUP = 8, WIDE_CHAINS = 4, WIDE_SLAB = 32 * WIDE_CHAINS, WIDE_MAX_WARPS = 16;

__host__ __device__ inline int wide_groups(int dim) { return (dim + WIDE_GROUP - 1) / WIDE_GROUP; }
__host__ __device__ inline int wide_slabs(int dim) { return wide_groups(dim) >= 8 ? 1 : 8 / wide_groups(dim); }
__host__ __device__ inline int wide_padded(int dim) { return WIDE_GROUP * wide_groups(dim); }
__host__ __device__ inline int wide_tile(int dim) { return WIDE_SLAB * wide_slabs(dim); }

/* Shared memory: L and L^T [dim][padded], the tile [dim][tile + 1], the tile's steps [tile],
 * floats. */
__host__ __device__ inline size_t wide_step_shared(int dim) {
  return (size_t)(2 * dim * wide_padded(dim) + dim * (wide_tile(dim) + 1) + wide_tile(dim)) * sizeof(float);
}

constexpr int WIDE_CHEES_CHAINS = 32, WIDE_CHEES_STRIDE = WIDE_CHEES_CHAINS + 1;

__host__ __device__ inline size_t wide_chees_shared(int dim) {
  return (size_t)(3 * dim * WIDE_CHEES_STRIDE + dim * wide_padded(dim)) * sizeof(double) +
         (size_t)(dim * WIDE_CHEES_STRIDE) * sizeof(float);
}

/* ----------------------------------------------------------------- covariances (hmc_moments.cu) */

/* Chains a block of the covariance kernels. */
constexpr int COV_CHAINS = 8;

/* Past COV_TABLE_DIM the table would not fit: the index arithmetic per entry. */
constexpr long long COV_TABLE_DIM = 150;

struct covariance_weights {
  float w[COV_DEFER_MAX];
};

/* --------------------------------------------------------- defined in one file, used in another */

/* hmc_dispatch.cu */
unsigned blocks_for(long long count, int threads);
int allow_shared(const void *kernel, size_t shared, size_t *opted);

/* hmc_fused.cu: LANES 4 or 16, MB 1, 2 or 4. */
template <int LANES, int MB>
int launch_gaussian(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream);

/* hmc_generic.cu */
__global__ void hmc_begin_kernel(const hmc_batch_t b, float *p_work, float *uniform_out, double *h0_out,
                                 float *logp_save);
__global__ void hmc_kick_drift_kernel(const hmc_batch_t b, int step, float *q_work, float *p_work,
                                      const float *grad_work);
__global__ void hmc_finish_kernel(const hmc_batch_t b, const float *q_work, float *p_work,
                                  const float *grad_work, const float *logp_work,
                                  const float *uniform, const double *h0, int in_place);

/* hmc_dense_element.cu */
__global__ void hmc_dense_kick_kernel(const hmc_batch_t b, float scale, float *p_work, const float *grad_work);
__global__ void hmc_dense_drift_kernel(const hmc_batch_t b, float *q_work, const float *p_work);
__global__ void hmc_dense_chees_plain_kernel(const hmc_batch_t b, const float *q_work, const float *p_work);

/* hmc_dense_tiled.cu */
__global__ void hmc_dense_chees_kernel(const hmc_batch_t b, const float *q_work, const float *p_work);
__global__ void hmc_dense_step_kernel(const hmc_batch_t b, float scale, int drift, float *q_work, float *p_work,
                                      const float *grad_work);

/* hmc_dense_wide.cu: V 1 or 4. */
__global__ void hmc_dense_chees_wide_kernel(const hmc_batch_t b, const float *q_work, const float *p_work);
template <int V>
int launch_dense_wide(const hmc_batch_t *batch, float scale, int drift, float *q_work, float *p_work,
                      const float *grad_work, cudaStream_t stream);

/* hmc_moments.cu */
__global__ void covariance_add_kernel(const float *q, const float *mean, float *m2, long long rows, long long dim,
                                      float weight);
__global__ void covariance_add_plain_kernel(const float *q, const float *mean, float *m2, long long rows,
                                            long long dim, float weight);
__global__ void covariance_centre_kernel(const float *q, const float *mean, float *out, long long count);
__global__ void covariance_fold_kernel(const float *centred, int updates, const covariance_weights weights, float *m2,
                                       long long rows, long long dim);
__global__ void running_moments_kernel(const float *x, float *mean, float *m2, long long rows, float n);
__global__ void key_histogram_kernel(const float *values, long long rows, int clamp_zero, unsigned prefix,
                                     int prefix_bits, int shift, int bits, unsigned long long *bins);

/* hmc_adapt.cu */
__global__ void dual_average_kernel(double *state, const float *accept, float *step_out, long long rows,
                                    const dual_average_step_t step);
__global__ void moments_to_metric_kernel(float *mean, float *m2, long long rows, long long dim, double n,
                                         float *inv_metric);
__global__ void step_search_kernel(const float *accept_prob, int8_t *direction, int8_t *exponent, float *step,
                                   long long rows, unsigned long long *counts);

/* hmc_draws.cu */
__global__ void column_sums_kernel(const float *values, long long rows, long long cols, const double *center,
                                   unsigned long long *totals, unsigned long long *failures);
__global__ void hmc_record_draw_kernel(const hmc_batch_t b, hmc_draw_block_t block, long long slot);
__global__ void fill_kernel(float *dst, float value, long long count);

} /* namespace dsampler_hmc */

#endif
