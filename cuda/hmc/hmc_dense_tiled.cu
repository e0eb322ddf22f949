/* hmc_dense_tiled.cu: the dense metric's tiled family (HMC_DENSE_TILED, hmc_kernels.h): the ChEES
 * terms and the kick and drift of DENSE_TILE chains a block, with L (or L^-1) in shared memory.
 * The family is chosen in hmc_dispatch.cu. */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

/* The dense metric's ChEES terms for DENSE_TILE chains a block (constants below): u = L^-1 (x - m)
 * at the proposal and at the start, each entry dense_whiten_one's sum (double, k increasing),
 * from L^-1 transposed, the tile's positions, the centre and the momenta in shared memory; each
 * chain's three sums (|u'|^2, |u|^2, u' . r') then over its entries in order by one thread.
 * Shared memory: dense_chees_shared(dim) bytes. */
__global__ void __launch_bounds__(DENSE_THREADS) hmc_dense_chees_kernel(const hmc_batch_t b, const float *q_work,
                                                                       const float *p_work) {
  extern __shared__ double shared_d[];
  const int dim = (int)b.dim;
  double *after = shared_d, *before = after + DENSE_TILE * dim, *along = before + DENSE_TILE * dim;
  float *LT = reinterpret_cast<float *>(along + DENSE_TILE * dim), *x1 = LT + dim * dim, *x0 = x1 + DENSE_TILE * dim;
  float *r = x0 + DENSE_TILE * dim, *m = r + DENSE_TILE * dim;
  for (int e = threadIdx.x; e < dim * dim; e += DENSE_THREADS) LT[(e % dim) * dim + e / dim] = b.metric_factor_inv[e];
  for (int k = threadIdx.x; k < dim; k += DENSE_THREADS) m[k] = b.chees_center[k];
  const long long first = (long long)blockIdx.x * DENSE_TILE;
  const int chains = b.n_chains - first < DENSE_TILE ? (int)(b.n_chains - first) : DENSE_TILE;
  const int outputs = chains * dim;
  for (int e = threadIdx.x; e < outputs; e += DENSE_THREADS) {
    x1[e] = q_work[first * dim + e];
    x0[e] = b.q[first * dim + e];
    r[e] = p_work[first * dim + e];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < outputs; e += DENSE_THREADS) {
    const int c = e / dim, i = e % dim;
    const float *a = x1 + c * dim, *z = x0 + c * dim;
    double u1 = 0.0, u0 = 0.0;
    for (int k = 0; k <= i; ++k) {
      const double w = (double)LT[k * dim + i], mk = (double)m[k];
      u1 += w * ((double)a[k] - mk);
      u0 += w * ((double)z[k] - mk);
    }
    after[e] = u1 * u1;
    before[e] = u0 * u0;
    along[e] = u1 * (double)r[e];
  }
  __syncthreads();
  if (threadIdx.x < chains) {
    const int c = threadIdx.x;
    chees_chain_sums(b, first + c, after + c * dim, before + c * dim, along + c * dim, dim, 1);
  }
}

/* A kick and (drift) a drift for DENSE_TILE chains a block of DENSE_THREADS, L and L^T in
 * shared memory with the tile's gradients and momenta; each thread keeps up to DENSE_OUTPUTS
 * outputs, (chain, coordinate) e = thread + m DENSE_THREADS, in registers, so an entry of L read
 * once serves several chains when DENSE_THREADS is a multiple of dim. Each output is the sum of
 * dense_lt_dot or dense_l_dot, in the same order. Shared memory: (2 dim^2 + 2 DENSE_TILE dim)
 * floats; dim <= DENSE_THREADS DENSE_OUTPUTS / DENSE_TILE. */
__global__ void __launch_bounds__(DENSE_THREADS) hmc_dense_step_kernel(const hmc_batch_t b, float scale, int drift,
                                                                      float *q_work, float *p_work,
                                                                      const float *grad_work) {
  extern __shared__ float shared[];
  const int dim = (int)b.dim;
  float *L = shared, *LT = L + dim * dim, *g = LT + dim * dim, *r = g + DENSE_TILE * dim;
  for (int e = threadIdx.x; e < dim * dim; e += DENSE_THREADS) {
    const float value = b.metric_factor[e];
    L[e] = value;
    LT[(e % dim) * dim + e / dim] = value;
  }
  const long long first = (long long)blockIdx.x * DENSE_TILE;
  const int chains = b.n_chains - first < DENSE_TILE ? (int)(b.n_chains - first) : DENSE_TILE;
  const int outputs = chains * dim;
  for (int e = threadIdx.x; e < outputs; e += DENSE_THREADS) {
    g[e] = grad_work[first * dim + e];
    r[e] = p_work[first * dim + e];
  }
  __syncthreads();
  float sum[DENSE_OUTPUTS];
  int coord[DENSE_OUTPUTS], base[DENSE_OUTPUTS]; /* each output's coordinate and its chain's row start */
#pragma unroll
  for (int m = 0; m < DENSE_OUTPUTS; ++m) {
    const int e = threadIdx.x + m * DENSE_THREADS;
    coord[m] = e < outputs ? e % dim : dim; /* dim: no output */
    base[m] = e < outputs ? (e / dim) * dim : 0;
    sum[m] = 0.0f;
  }
  /* r_k += kick (sum_{i >= k} L_ik g_i). */
  for (int i = 0; i < dim; ++i) {
#pragma unroll
    for (int m = 0; m < DENSE_OUTPUTS; ++m)
      if (i >= coord[m] && coord[m] < dim) sum[m] = fmaf(L[i * dim + coord[m]], g[base[m] + i], sum[m]);
  }
#pragma unroll
  for (int m = 0; m < DENSE_OUTPUTS; ++m) {
    const int e = threadIdx.x + m * DENSE_THREADS;
    if (e >= outputs) continue;
    const float kick = __fmul_rn(scale, b.step_size[first + e / dim]);
    r[e] = __fadd_rn(r[e], __fmul_rn(kick, sum[m]));
    p_work[first * dim + e] = r[e];
  }
  if (!drift) return;
  __syncthreads();
  /* q_i += eps (sum_{k <= i} L_ik r_k), L_ik = LT[k dim + i]. */
#pragma unroll
  for (int m = 0; m < DENSE_OUTPUTS; ++m) sum[m] = 0.0f;
  for (int k = 0; k < dim; ++k) {
#pragma unroll
    for (int m = 0; m < DENSE_OUTPUTS; ++m)
      if (k <= coord[m] && coord[m] < dim) sum[m] = fmaf(LT[k * dim + coord[m]], r[base[m] + k], sum[m]);
  }
#pragma unroll
  for (int m = 0; m < DENSE_OUTPUTS; ++m) {
    const int e = threadIdx.x + m * DENSE_THREADS;
    if (e >= outputs) continue;
    q_work[first * dim + e] = __fadd_rn(q_work[first * dim + e], __fmul_rn(b.step_size[first + e / dim], sum[m]));
  }
}

} /* namespace dsampler_hmc */
