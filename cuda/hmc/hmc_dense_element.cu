/* hmc_dense_element.cu: the dense metric's element family (HMC_DENSE_ELEMENT, hmc_kernels.h): a
 * kick, a drift and the ChEES terms with one (chain, coordinate), or one chain, a thread, for any
 * dim and for per-chain factors. The family is chosen in hmc_dispatch.cu. */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

namespace {

/* Chain `chain`'s L and L^-1: the shared ones, or its own (backend.h's factor_per_chain). */
__device__ __forceinline__ const float *chain_factor(const hmc_batch_t &b, long long chain) {
  return b.factor_per_chain ? b.metric_factor + chain * 2 * b.dim * b.dim : b.metric_factor;
}
__device__ __forceinline__ const float *chain_factor_inv(const hmc_batch_t &b, long long chain) {
  return b.factor_per_chain ? b.metric_factor_inv + chain * b.dim * b.dim : b.metric_factor_inv;
}

} /* namespace */

/* The dense metric (backend.h's metric_factor): a kick r += kick (L^T g) and a drift
 * q += eps (L r), one (chain, coordinate) a thread, as backend_cpu.c's dense_kick_drift. */
__global__ void hmc_dense_kick_kernel(const hmc_batch_t b, float scale, float *p_work, const float *grad_work) {
  const long long count = b.n_chains * b.dim;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long chain = e / b.dim, k = e % b.dim;
    const float kick = __fmul_rn(scale, b.step_size[chain]);
    p_work[e] = __fadd_rn(p_work[e], __fmul_rn(kick, dense_lt_dot(chain_factor(b, chain), b.dim, grad_work + chain * b.dim, k)));
  }
}

__global__ void hmc_dense_drift_kernel(const hmc_batch_t b, float *q_work, const float *p_work) {
  const long long count = b.n_chains * b.dim;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long chain = e / b.dim, i = e % b.dim;
    const float eps = b.step_size[chain];
    q_work[e] = __fadd_rn(q_work[e], __fmul_rn(eps, dense_l_dot(chain_factor(b, chain), b.dim, p_work + chain * b.dim, i)));
  }
}

/* The one-chain-a-thread form for a dim past the tiled kernels' (dense_whiten). */
__global__ void hmc_dense_chees_plain_kernel(const hmc_batch_t b, const float *q_work, const float *p_work) {
  const long long chain = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (chain >= b.n_chains) return;
  const long long row = chain * b.dim;
  double along = 0.0;
  const float *inverse = chain_factor_inv(b, chain);
  const double after = dense_whiten(inverse, b.dim, q_work + row, b.chees_center, p_work + row, &along);
  const double before = dense_whiten(inverse, b.dim, b.q + row, b.chees_center, NULL, NULL);
  b.chees[2 * chain] = (float)(after - before);
  b.chees[2 * chain + 1] = (float)along;
}

} /* namespace dsampler_hmc */
