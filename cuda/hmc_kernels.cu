/* hmc_kernels.cu: HMC on the GPU.
 *
 * hmc_gaussian_kernel runs a whole iteration of the built-in gaussian with 4 (dim <= 64) or
 * 16 lanes per chain: momenta drawn in-kernel from the chain's Philox blocks with rng.h's
 * transforms, L leapfrog steps with the gradient fused in, the two sums of the Hamiltonian
 * as shuffle trees in double, the accept, and the writes on accept.
 *
 * The generic path (any target) follows backend_cpu.c step for step, with the target's
 * batched gradient between kernels. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda_check.h"
#include "hmc_kernels.h"
#include "rng.h"
#include "dense_metric.h"
#include "dual_average.h"
#include "exactsum_core.h"

namespace {

constexpr int HMC_THREADS = 256;
constexpr int HMC_MAX_DIM_FUSED = 256;

int hmc_lanes_setting = 0; /* 0: by dimension; else 4 or 16 lanes per chain */

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

/* A lane's coordinates of the state kept, into the chain's moments: coordinates
 * first + stride m + 0..3 for m < MB. */
template <int MB, bool VEC4>
__device__ __forceinline__ void add_moments(const hmc_batch_t &b, long long row, int first, int stride,
                                            const float *q, const bool *valid) {
  const float n = (float)b.moment_count;
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    const int base = first + stride * m;
    if (VEC4 && base < b.dim) {
      float4 mean = *reinterpret_cast<const float4 *>(b.moment_mean + row + base);
      float4 m2 = *reinterpret_cast<const float4 *>(b.moment_m2 + row + base);
      welford_add(&mean.x, &m2.x, q[4 * m], n);
      welford_add(&mean.y, &m2.y, q[4 * m + 1], n);
      welford_add(&mean.z, &m2.z, q[4 * m + 2], n);
      welford_add(&mean.w, &m2.w, q[4 * m + 3], n);
      *reinterpret_cast<float4 *>(b.moment_mean + row + base) = mean;
      *reinterpret_cast<float4 *>(b.moment_m2 + row + base) = m2;
    } else if (!VEC4) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (valid[4 * m + e]) welford_add(b.moment_mean + row + base + e, b.moment_m2 + row + base + e, q[4 * m + e], n);
    }
  }
}

/* LANES lanes per chain; lane g owns Philox blocks g, g + LANES, ... (MB of them), i.e.
 * coordinates 4 block .. 4 block + 3: each lane draws its momenta from whole blocks and a
 * chain's lanes read contiguous 16-byte pieces. Fewer lanes per chain spread the per-chain
 * work (accept uniform, log and exp in double, shuffles) over more chains per warp.
 *
 * The leapfrog for the gaussian, g = (q - mean) (-1/scale^2), is fused as
 * p = fma(kick (-1/scale^2), q - mean, p) and q = fma(eps m_inv, p, q): three operations per
 * coordinate per step. This rounds differently from the CPU's separate multiply and add
 * (within float rounding: the tests hold positions to 1e-5 relative). */
/* MOMENTS: the state kept is added to the chains' running moments (a variant of its own: the
 * extra registers would halve the occupancy of the plain kernel). Two blocks per SM: at most
 * 128 registers a thread. */
/* CHEES: each chain's ChEES term when the batch asks for it (warmup; a variant of its own, as
 * MOMENTS, which then adds the moments only when the batch has them). */
template <int LANES, int MB, bool VEC4, bool MOMENTS, bool CHEES>
__global__ void __launch_bounds__(HMC_THREADS, 2)
hmc_gaussian_kernel(const builtin_params_t params, const hmc_batch_t b) {
  constexpr int PER = 4 * MB;
  const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long chain = thread / LANES;
  const int lane = threadIdx.x % LANES;
  const bool active = chain < b.n_chains;
  if (!active) chain = b.n_chains - 1; /* idle lanes still take part in the shuffles */
  const int dim = (int)b.dim;
  const long long row = chain * b.dim;
  const long long metric_row = b.shared_metric ? 0 : row; /* a shared metric is one row */
  const uint64_t item = (uint64_t)(b.chain_begin + chain);
  /* The accept uniform and the step's jitter: one Philox block, drawn by lane 0. */
  float uniform = 0.0f, eps = 0.0f;
  if (lane == 0) {
    const uint32_t word = rng_hmc_uniform_word(b.dim);
    const rng_words_t words = rng_block(b.seed, item, b.iteration, word / 4);
    uniform = rng_uniform(word % 4 == 0 ? words.v[0] : words.v[2]); /* the word is even */
    eps = rng_jitter_step(b.step_nominal[chain], b.jitter, word % 4 == 0 ? words.v[1] : words.v[3]);
  }
  uniform = __shfl_sync(0xffffffffu, uniform, 0, LANES);
  eps = __shfl_sync(0xffffffffu, eps, 0, LANES);
  const float mean = params.mean, neg_inv_scale2 = -params.inv_scale2;

  float q[PER], p[PER], inv_metric[PER];
  bool valid[PER];
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    const int base = 4 * (lane + LANES * m);
    if (VEC4 && base < dim) {
      const float4 q4 = *reinterpret_cast<const float4 *>(b.q + row + base);
      const float4 m4 = *reinterpret_cast<const float4 *>(b.inv_metric + metric_row + base);
      q[4 * m] = q4.x; q[4 * m + 1] = q4.y; q[4 * m + 2] = q4.z; q[4 * m + 3] = q4.w;
      inv_metric[4 * m] = m4.x; inv_metric[4 * m + 1] = m4.y;
      inv_metric[4 * m + 2] = m4.z; inv_metric[4 * m + 3] = m4.w;
#pragma unroll
      for (int e = 0; e < 4; ++e) valid[4 * m + e] = true;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int k = base + e;
        valid[4 * m + e] = k < dim;
        q[4 * m + e] = k < dim ? b.q[row + k] : 0.0f;
        inv_metric[4 * m + e] = k < dim ? b.inv_metric[metric_row + k] : 0.0f;
      }
    }
  }

  /* Momenta p = z / sqrt(m_inv): block `block` of the chain's Philox stream gives
   * coordinates 4 block .. + 3. */
  double kinetic = 0.0;
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    const int block = lane + LANES * m;
    float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (4 * block < dim) {
      const rng_words_t words = rng_block(b.seed, item, b.iteration, (uint32_t)block);
      rng_normal_pair(words.v[0], words.v[1], &z[0], &z[1]);
      if (4 * block + 2 < dim) rng_normal_pair(words.v[2], words.v[3], &z[2], &z[3]);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = 4 * m + e;
      p[r] = valid[r] ? __fmul_rn(z[e], rsqrtf(inv_metric[r])) : 0.0f;
      kinetic = __dadd_rn(kinetic, __dmul_rn(__dmul_rn((double)inv_metric[r], (double)p[r]), (double)p[r]));
    }
  }
  const double h0 = -(double)b.logp[chain] + 0.5 * group_sum<LANES>(kinetic);

  float eps_metric[PER], centred[PER];
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    eps_metric[r] = __fmul_rn(eps, inv_metric[r]);
    centred[r] = __fsub_rn(q[r], mean);
  }
  const float half_kick = __fmul_rn(0.5f * eps, neg_inv_scale2), kick = __fmul_rn(eps, neg_inv_scale2);
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    p[r] = __fmaf_rn(half_kick, centred[r], p[r]);
    q[r] = __fmaf_rn(eps_metric[r], p[r], q[r]);
  }
  for (int step = 1; step < b.n_leapfrog; ++step) {
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      p[r] = __fmaf_rn(kick, __fsub_rn(q[r], mean), p[r]);
      q[r] = __fmaf_rn(eps_metric[r], p[r], q[r]);
    }
  }
  double centred_sq = 0.0;
  kinetic = 0.0;
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    centred[r] = __fsub_rn(q[r], mean);
    p[r] = __fmaf_rn(half_kick, centred[r], p[r]);
    if (!valid[r]) continue;
    centred_sq = __dadd_rn(centred_sq, __dmul_rn((double)centred[r], (double)centred[r]));
    kinetic = __dadd_rn(kinetic, __dmul_rn(__dmul_rn((double)inv_metric[r], (double)p[r]), (double)p[r]));
  }
  const float logp1 = (float)(-0.5 * group_sum<LANES>(centred_sq) * (double)params.inv_scale2);
  const double h1 = -(double)logp1 + 0.5 * group_sum<LANES>(kinetic);

  const hmc_verdict v = hmc_decide(h0, h1, uniform);
  if (CHEES && b.chees_center) {
    /* backend.h's ChEES term, the start read again (it is written only below). */
    double change = 0.0, along = 0.0;
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      if (!valid[r]) continue;
      const int k = 4 * (lane + LANES * (r / 4)) + r % 4;
      const double m = (double)b.chees_center[k], d1 = __dsub_rn((double)q[r], m),
                   d0 = __dsub_rn((double)b.q[row + k], m);
      change = __dadd_rn(change, __ddiv_rn(__dsub_rn(__dmul_rn(d1, d1), __dmul_rn(d0, d0)), (double)inv_metric[r]));
      along = __dadd_rn(along, __dmul_rn(d1, (double)p[r]));
    }
    change = group_sum<LANES>(change);
    along = group_sum<LANES>(along);
    if (active && lane == 0) {
      b.chees[2 * chain] = (float)change;
      b.chees[2 * chain + 1] = (float)along;
    }
  }
  if (!active) return;

  if (lane == 0) {
    write_verdict(b, chain, v, logp1);
    b.step_size[chain] = eps;
  }
  if (MOMENTS && (!CHEES || b.moment_mean)) {
    /* The state kept: the proposal, or the start read again. */
    if (!v.accept) {
#pragma unroll
      for (int r = 0; r < PER; ++r) {
        const int k = 4 * (lane + LANES * (r / 4)) + r % 4;
        q[r] = valid[r] ? b.q[row + k] : 0.0f;
      }
    }
    add_moments<MB, VEC4>(b, row, lane * 4, LANES * 4, q, valid);
  }
  if (!v.accept || b.probe) return;
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    const int base = 4 * (lane + LANES * m);
    float grad[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) grad[e] = __fmul_rn(-centred[4 * m + e], params.inv_scale2);
    if (VEC4 && base < dim) {
      *reinterpret_cast<float4 *>(b.q + row + base) = make_float4(q[4 * m], q[4 * m + 1], q[4 * m + 2], q[4 * m + 3]);
      *reinterpret_cast<float4 *>(b.grad + row + base) = make_float4(grad[0], grad[1], grad[2], grad[3]);
    } else if (!VEC4) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (valid[4 * m + e]) {
          b.q[row + base + e] = q[4 * m + e];
          b.grad[row + base + e] = grad[e];
        }
    }
  }
}

/* Generic path, GENERIC_LANES lanes per chain so a chain's coordinates are read and written
 * together (coalesced): momenta, the step, the uniform and H0, as backend_cpu.c's hmc_draw;
 * lane g draws Philox blocks g, g + GENERIC_LANES, ... (coordinates 4 block .. + 3). */
constexpr int GENERIC_LANES = 8;

__global__ void hmc_begin_kernel(const hmc_batch_t b, float *p_work, float *uniform_out, double *h0_out) {
  const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long chain = thread / GENERIC_LANES;
  const int lane = threadIdx.x % GENERIC_LANES;
  const bool active = chain < b.n_chains;
  if (!active) chain = b.n_chains - 1; /* idle lanes still take part in the shuffles */
  const long long dim = b.dim;
  const float *inv_metric = b.inv_metric + (b.shared_metric ? 0 : chain * dim);
  float *p = p_work + chain * dim;
  const uint64_t item = (uint64_t)(b.chain_begin + chain);
  double kinetic = 0.0;
  for (long long block = lane; 4 * block < dim; block += GENERIC_LANES) {
    const rng_words_t words = rng_block(b.seed, item, b.iteration, (uint32_t)block);
    float z[4];
    rng_normal_pair(words.v[0], words.v[1], &z[0], &z[1]);
    rng_normal_pair(words.v[2], words.v[3], &z[2], &z[3]);
    for (int e = 0; e < 4 && 4 * block + e < dim; ++e) {
      const long long k = 4 * block + e;
      /* A dense metric keeps the whitened momentum: z itself, kinetic |z|^2 / 2. */
      const float m_inv = b.metric_factor ? 1.0f : inv_metric[k];
      const float value = b.metric_factor ? z[e] : __fdiv_rn(z[e], __fsqrt_rn(m_inv));
      if (active) p[k] = value;
      kinetic = __dadd_rn(kinetic, __dmul_rn(__dmul_rn((double)m_inv, (double)value), (double)value));
    }
  }
  kinetic = group_sum<GENERIC_LANES>(kinetic);
  if (!active || lane != 0) return;
  const uint32_t word = rng_hmc_uniform_word(dim);
  const rng_words_t words = rng_block(b.seed, item, b.iteration, word / 4);
  uniform_out[chain] = rng_uniform(word % 4 == 0 ? words.v[0] : words.v[2]);
  b.step_size[chain] = rng_jitter_step(b.step_nominal[chain], b.jitter, word % 4 == 0 ? words.v[1] : words.v[3]);
  h0_out[chain] = -(double)b.logp[chain] + 0.5 * kinetic;
}

__global__ void hmc_kick_drift_kernel(const hmc_batch_t b, int step, float *q_work, float *p_work,
                                      const float *grad_work) {
  const long long count = b.n_chains * b.dim;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const float eps = b.step_size[e / b.dim];
    const float kick = step == 0 ? 0.5f * eps : eps;
    const float p = __fadd_rn(p_work[e], __fmul_rn(kick, grad_work[e]));
    p_work[e] = p;
    const float m_inv = b.inv_metric[b.shared_metric ? e % b.dim : e];
    q_work[e] = __fadd_rn(q_work[e], __fmul_rn(__fmul_rn(eps, m_inv), p));
  }
}

/* Chain `chain`'s L and L^-1: the shared ones, or its own (backend.h's factor_per_chain). */
__device__ __forceinline__ const float *chain_factor(const hmc_batch_t &b, long long chain) {
  return b.factor_per_chain ? b.metric_factor + chain * 2 * b.dim * b.dim : b.metric_factor;
}
__device__ __forceinline__ const float *chain_factor_inv(const hmc_batch_t &b, long long chain) {
  return b.factor_per_chain ? b.metric_factor_inv + chain * b.dim * b.dim : b.metric_factor_inv;
}

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

/* The dense metric's ChEES terms for DENSE_TILE chains a block (constants below): u = L^-1 (x - m)
 * at the proposal and at the start, each entry dense_whiten_one's sum (double, k increasing),
 * from L^-1 transposed, the tile's positions, the centre and the momenta in shared memory; each
 * chain's three sums (|u'|^2, |u|^2, u' . r') then over its entries in order by one thread.
 * Shared memory: dense_chees_shared(dim) bytes. */
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

constexpr int DENSE_TILE = 32, DENSE_THREADS = 256, DENSE_OUTPUTS = 16;

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

/* The register-tiled dense kick and drift (the "wide" kernels), for the dims whose L, L^T and a
 * tile of chains fit in shared memory (wide_step_shared). A warp computes one group of
 * WIDE_GROUP consecutive coordinates for WIDE_SLAB chains: each lane 4 chains (lane + 32 j) x 8
 * coordinates in registers, and per term it reads the 4 chains' values (the tile transposed with
 * an odd stride: no bank conflicts) and 8 entries of L (one address for the warp), for 32
 * multiply-adds. A block is wide_groups(dim) x wide_slabs(dim) warps.
 *
 * Each output is the sum of dense_lt_dot (the kick: terms i >= k) or dense_l_dot (the drift:
 * terms k <= i), fmaf in the same increasing order from 0, so the results are those of the
 * kernels below bit for bit: a warp's loop starts (kick) or stops (drift) at its group, and the
 * 8 x 8 block on the diagonal takes only the terms its outputs include. The updates (r += kick
 * sum, q += eps sum) go through the tile, so that global memory is read and written coalesced. */
constexpr int WIDE_GROUP = 8, WIDE_CHAINS = 4, WIDE_SLAB = 32 * WIDE_CHAINS, WIDE_MAX_WARPS = 16;

__host__ __device__ inline int wide_groups(int dim) { return (dim + WIDE_GROUP - 1) / WIDE_GROUP; }
__host__ __device__ inline int wide_slabs(int dim) { return wide_groups(dim) >= 8 ? 1 : 8 / wide_groups(dim); }
__host__ __device__ inline int wide_padded(int dim) { return WIDE_GROUP * wide_groups(dim); }
__host__ __device__ inline int wide_tile(int dim) { return WIDE_SLAB * wide_slabs(dim); }

/* A thread's walk over the (chain, coordinate) cells of a tile in row-major order, from cell
 * `start` in steps of `step` cells: one division at the start, none per cell. */
struct tile_cursor {
  int c, k, step_c, step_k, dim;
  __device__ __forceinline__ tile_cursor(int dim_, int start, int step) : dim(dim_) {
    c = start / dim;
    k = start % dim;
    step_c = step / dim;
    step_k = step % dim;
  }
  __device__ __forceinline__ explicit tile_cursor(int dim_) : tile_cursor(dim_, (int)threadIdx.x, (int)blockDim.x) {}
  __device__ __forceinline__ void next() {
    c += step_c;
    k += step_k;
    if (k >= dim) {
      k -= dim;
      ++c;
    }
  }
};

/* A tile's cells are one contiguous run of global memory (its chains' rows): cell e of the tile
 * is src[e], chain e / dim, coordinate e % dim. A thread takes V consecutive cells at a time (V
 * = 4, one float4, when dim is a multiple of 4, so that the 4 share a chain), WIDE_STAGE such
 * groups loaded before any is handed on, so that that many loads are in flight per thread (a
 * loop of load then use waits for each). Cells at or past `cells` (past the tile's chains) read
 * as 0; visit(c, k, x, e) is called for the groups below `limit`. */
constexpr int WIDE_STAGE = 4;

template <int V>
struct cells_t {
  float v[V];
};

template <int V>
__device__ __forceinline__ cells_t<V> load_cells(const float *src, int e) {
  cells_t<V> out;
  if constexpr (V == 4) {
    const float4 x = *reinterpret_cast<const float4 *>(src + e);
    out.v[0] = x.x, out.v[1] = x.y, out.v[2] = x.z, out.v[3] = x.w;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = src[e + j];
  }
  return out;
}

template <int V>
__device__ __forceinline__ void store_cells(float *dst, int e, const cells_t<V> &x) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4 *>(dst + e) = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) dst[e + j] = x.v[j];
  }
}

template <int V, typename Visit>
__device__ __forceinline__ void tile_cells(const float *src, int dim, int cells, int limit, Visit visit) {
  const int step = V * (int)blockDim.x;
  tile_cursor at(dim, V * (int)threadIdx.x, step);
  for (int e0 = V * (int)threadIdx.x; e0 < limit; e0 += WIDE_STAGE * step) {
    cells_t<V> x[WIDE_STAGE];
    int c[WIDE_STAGE], k[WIDE_STAGE];
#pragma unroll
    for (int u = 0; u < WIDE_STAGE; ++u) {
      const int e = e0 + u * step;
      c[u] = at.c;
      k[u] = at.k;
      if (e < cells) {
        x[u] = load_cells<V>(src, e);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) x[u].v[j] = 0.0f;
      }
      at.next();
    }
#pragma unroll
    for (int u = 0; u < WIDE_STAGE; ++u)
      if (e0 + u * step < limit) visit(c[u], k[u], x[u], e0 + u * step);
  }
}

/* One term for the warp's outputs m in [lo, hi]: acc[j][m] = fmaf(row[m], T_col[c + 32 j], acc). */
__device__ __forceinline__ void wide_term(float (&acc)[WIDE_CHAINS][WIDE_GROUP], const float *row,
                                          const float *column, int c, int lo, int hi) {
  const float4 a = *reinterpret_cast<const float4 *>(row), z = *reinterpret_cast<const float4 *>(row + 4);
  const float l[WIDE_GROUP] = {a.x, a.y, a.z, a.w, z.x, z.y, z.z, z.w};
  float v[WIDE_CHAINS];
#pragma unroll
  for (int j = 0; j < WIDE_CHAINS; ++j) v[j] = column[c + 32 * j];
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m)
#pragma unroll
    for (int j = 0; j < WIDE_CHAINS; ++j)
      if (m >= lo && m <= hi) acc[j][m] = fmaf(l[m], v[j], acc[j][m]);
}

/* The warp's sums into the tile, T[k0 + m][c + 32 j], for the coordinates below dim. */
__device__ __forceinline__ void wide_store(float *T, int stride, int c, int k0, int dim,
                                           const float (&acc)[WIDE_CHAINS][WIDE_GROUP]) {
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m)
    if (k0 + m < dim)
#pragma unroll
      for (int j = 0; j < WIDE_CHAINS; ++j) T[(k0 + m) * stride + c + 32 * j] = acc[j][m];
}

__device__ __forceinline__ void wide_zero(float (&acc)[WIDE_CHAINS][WIDE_GROUP]) {
#pragma unroll
  for (int j = 0; j < WIDE_CHAINS; ++j)
#pragma unroll
    for (int m = 0; m < WIDE_GROUP; ++m) acc[j][m] = 0.0f;
}

/* Shared memory: L and L^T [dim][padded], the tile [dim][tile + 1], the tile's steps [tile],
 * floats. */
__host__ __device__ inline size_t wide_step_shared(int dim) {
  return (size_t)(2 * dim * wide_padded(dim) + dim * (wide_tile(dim) + 1) + wide_tile(dim)) * sizeof(float);
}

/* Persistent: a block loads L and L^T once and takes tiles blockIdx.x, + gridDim.x, ... */
template <int V>
__global__ void __launch_bounds__(32 * WIDE_MAX_WARPS) hmc_dense_wide_kernel(const hmc_batch_t b, float scale,
                                                                            int drift, float *q_work,
                                                                            float *p_work, const float *grad_work) {
  extern __shared__ float shared[];
  const int dim = (int)b.dim, padded = wide_padded(dim), groups = wide_groups(dim), tile = wide_tile(dim);
  const int stride = tile + 1;
  float *L = shared, *LT = L + dim * padded, *T = LT + dim * padded, *eps = T + dim * stride;
  /* L and L^T (backend.h: metric_factor holds both), rows padded with zeros, read coalesced. */
  const float *factor_t = b.metric_factor + dim * dim;
  for (int e = threadIdx.x; e < dim * padded; e += blockDim.x) {
    const int i = e / padded, k = e % padded;
    L[e] = k < dim ? b.metric_factor[i * dim + k] : 0.0f; /* L[i][k] */
    LT[e] = k < dim ? factor_t[i * dim + k] : 0.0f;      /* LT[i][k] = L[k][i] */
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = WIDE_GROUP * (warp % groups), c = WIDE_SLAB * (warp / groups) + lane;
  const int block_end = k0 + WIDE_GROUP < dim ? k0 + WIDE_GROUP : dim;
  const long long tiles = (b.n_chains + tile - 1) / tile;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const long long first = t * tile;
    const int chains = b.n_chains - first < tile ? (int)(b.n_chains - first) : tile, cells = chains * dim;
    float *p_tile = p_work + first * dim, *q_tile = q_work + first * dim;
    __syncthreads(); /* the last tile's T and eps are read */
    for (int cc = threadIdx.x; cc < chains; cc += blockDim.x) eps[cc] = b.step_size[first + cc];
    tile_cells<V>(grad_work + first * dim, dim, cells, tile * dim, [&](int cc, int k, const cells_t<V> &g, int) {
#pragma unroll
      for (int j = 0; j < V; ++j) T[(k + j) * stride + cc] = g.v[j];
    });
    __syncthreads();
    float acc[WIDE_CHAINS][WIDE_GROUP];
    wide_zero(acc);
    /* The kick: output k0 + m takes the terms i >= k0 + m. */
    for (int i = k0; i < block_end; ++i) wide_term(acc, L + i * padded + k0, T + i * stride, c, 0, i - k0);
    for (int i = block_end; i < dim; ++i) wide_term(acc, L + i * padded + k0, T + i * stride, c, 0, WIDE_GROUP - 1);
    __syncthreads();
    wide_store(T, stride, c, k0, dim, acc);
    __syncthreads();
    /* r += kick sum through the tile: its cells past the chains become 0. */
    tile_cells<V>(p_tile, dim, cells, tile * dim, [&](int cc, int k, const cells_t<V> &p, int e) {
      cells_t<V> r;
#pragma unroll
      for (int j = 0; j < V; ++j)
        r.v[j] = e < cells ? __fadd_rn(p.v[j], __fmul_rn(__fmul_rn(scale, eps[cc]), T[(k + j) * stride + cc])) : 0.0f;
      if (e < cells) store_cells<V>(p_tile, e, r);
#pragma unroll
      for (int j = 0; j < V; ++j) T[(k + j) * stride + cc] = r.v[j];
    });
    if (!drift) continue;
    __syncthreads();
    /* The drift: output k0 + m takes the terms k <= k0 + m, L_ik = LT[k][i]. */
    wide_zero(acc);
    for (int k = 0; k < k0; ++k) wide_term(acc, LT + k * padded + k0, T + k * stride, c, 0, WIDE_GROUP - 1);
    for (int k = k0; k < block_end; ++k) wide_term(acc, LT + k * padded + k0, T + k * stride, c, k - k0, WIDE_GROUP - 1);
    __syncthreads();
    wide_store(T, stride, c, k0, dim, acc);
    __syncthreads();
    tile_cells<V>(q_tile, dim, cells, cells, [&](int cc, int k, const cells_t<V> &q, int e) {
      cells_t<V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = __fadd_rn(q.v[j], __fmul_rn(eps[cc], T[(k + j) * stride + cc]));
      store_cells<V>(q_tile, e, out);
    });
  }
}

/* The dense ChEES terms, register-tiled as the wide kernels: a block of WIDE_CHEES_CHAINS (32)
 * chains, a warp per group of 8 coordinates, a lane per chain: u' and u (proposal, start) for
 * its 8 coordinates in double registers, each the sum of dense_whiten_one (k increasing, the
 * same expression), from the centred positions (double) and L^-1 transposed (double) in shared
 * memory. Then u'^2, u^2 and u' r' per entry into shared memory (over the positions) and one
 * thread per chain sums them over the coordinates in order, as hmc_dense_chees_kernel: the same
 * bits. */
constexpr int WIDE_CHEES_CHAINS = 32, WIDE_CHEES_STRIDE = WIDE_CHEES_CHAINS + 1;

__host__ __device__ inline size_t wide_chees_shared(int dim) {
  return (size_t)(3 * dim * WIDE_CHEES_STRIDE + dim * wide_padded(dim)) * sizeof(double) +
         (size_t)(dim * WIDE_CHEES_STRIDE) * sizeof(float);
}

__global__ void __launch_bounds__(32 * WIDE_MAX_WARPS) hmc_dense_chees_wide_kernel(const hmc_batch_t b,
                                                                                  const float *q_work,
                                                                                  const float *p_work) {
  extern __shared__ double shared_d[];
  const int dim = (int)b.dim, padded = wide_padded(dim), S = WIDE_CHEES_STRIDE;
  double *X1 = shared_d, *X0 = X1 + dim * S, *X2 = X0 + dim * S, *W = X2 + dim * S;
  float *R = reinterpret_cast<float *>(W + dim * padded);
  for (int e = threadIdx.x; e < dim * padded; e += blockDim.x) {
    const int k = e / padded, i = e % padded;
    W[e] = i < dim ? (double)b.metric_factor_inv[i * dim + k] : 0.0; /* W[k][i] = Linv[i][k] */
  }
  const long long first = (long long)blockIdx.x * WIDE_CHEES_CHAINS;
  const int chains = b.n_chains - first < WIDE_CHEES_CHAINS ? (int)(b.n_chains - first) : WIDE_CHEES_CHAINS;
  for (tile_cursor cell(dim); cell.c < WIDE_CHEES_CHAINS; cell.next()) {
    const int c = cell.c, k = cell.k;
    const bool in = c < chains;
    const long long at = (first + c) * dim + k;
    const double mk = (double)b.chees_center[k];
    X1[k * S + c] = in ? (double)q_work[at] - mk : 0.0;
    X0[k * S + c] = in ? (double)b.q[at] - mk : 0.0;
    R[k * S + c] = in ? p_work[at] : 0.0f;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, c = threadIdx.x % 32, i0 = WIDE_GROUP * warp;
  const int block_end = i0 + WIDE_GROUP < dim ? i0 + WIDE_GROUP : dim;
  double u1[WIDE_GROUP], u0[WIDE_GROUP];
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m) u1[m] = u0[m] = 0.0;
  for (int k = 0; k < block_end; ++k) {
    const double a = X1[k * S + c], z = X0[k * S + c];
    const double *w = W + k * padded + i0;
    const int lo = k - i0;
#pragma unroll
    for (int m = 0; m < WIDE_GROUP; ++m)
      if (m >= lo) {
        u1[m] += w[m] * a;
        u0[m] += w[m] * z;
      }
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m)
    if (i0 + m < dim) {
      const int at = (i0 + m) * S + c;
      X2[at] = u1[m] * (double)R[at];
      X1[at] = u1[m] * u1[m];
      X0[at] = u0[m] * u0[m];
    }
  __syncthreads();
  if (threadIdx.x < chains) chees_chain_sums(b, first + c, X1 + c, X0 + c, X2 + c, dim, S);
}

/* COV_CHAINS chains a block, one lower-triangle entry (i, j) a thread, consecutive entries in
 * consecutive threads, (i, j) from a table in shared memory: m2_ij += (weight (x_i - mu_i))
 * (x_j - mu_j), as backend_cpu.c. Shared memory: dim (dim + 1) / 2 pairs of uint16. */
constexpr int COV_CHAINS = 8;

__global__ void covariance_add_kernel(const float *q, const float *mean, float *m2, long long rows, long long dim,
                                      float weight) {
  extern __shared__ unsigned short pairs[];
  const long long triangle = dim * (dim + 1) / 2;
  for (long long i = threadIdx.x; i < dim; i += blockDim.x)
    for (long long j = 0; j <= i; ++j) {
      pairs[2 * (i * (i + 1) / 2 + j)] = (unsigned short)i;
      pairs[2 * (i * (i + 1) / 2 + j) + 1] = (unsigned short)j;
    }
  __syncthreads();
  const long long first = (long long)blockIdx.x * COV_CHAINS;
  const long long chains = rows - first < COV_CHAINS ? rows - first : COV_CHAINS;
  for (long long e = threadIdx.x; e < chains * triangle; e += blockDim.x) {
    const long long r = first + e / triangle, p = e % triangle;
    const int i = pairs[2 * p], j = pairs[2 * p + 1];
    const float *x = q + r * dim, *mu = mean + r * dim;
    const float e_i = __fmul_rn(weight, __fsub_rn(x[i], mu[i]));
    float *out = m2 + r * triangle + p;
    *out = __fadd_rn(*out, __fmul_rn(e_i, __fsub_rn(x[j], mu[j])));
  }
}

/* Past COV_TABLE_DIM the table would not fit: the index arithmetic per entry. */
constexpr long long COV_TABLE_DIM = 150;

__global__ void covariance_add_plain_kernel(const float *q, const float *mean, float *m2, long long rows,
                                            long long dim, float weight) {
  const long long triangle = dim * (dim + 1) / 2, count = rows * triangle;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long r = e / triangle, p = e % triangle;
    long long i = (long long)((sqrt(8.0 * (double)p + 1.0) - 1.0) / 2.0);
    while (i * (i + 1) / 2 > p) --i;
    while ((i + 1) * (i + 2) / 2 <= p) ++i;
    const long long j = p - i * (i + 1) / 2;
    const float *x = q + r * dim, *mu = mean + r * dim;
    const float e_i = __fmul_rn(weight, __fsub_rn(x[i], mu[i]));
    m2[e] = __fadd_rn(m2[e], __fmul_rn(e_i, __fsub_rn(x[j], mu[j])));
  }
}

/* Deferred covariance updates (backend_cuda.cu): a window's updates are kept as the chains'
 * centred states e = x - mean, COV_DEFER_MAX at most, and folded into m2 together, so that the
 * [rows, dim (dim + 1) / 2] running covariances are read and written once per fold instead of
 * once per iteration. The fold does, entry by entry and update by update in order, what
 * covariance_add_kernel does: the same bits. */
__global__ void covariance_centre_kernel(const float *q, const float *mean, float *out, long long count) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (long long)gridDim.x * blockDim.x)
    out[e] = __fsub_rn(q[e], mean[e]);
}

struct covariance_weights {
  float w[COV_DEFER_MAX];
};

/* COV_CHAINS chains a block; the block's centred states (updates x chains x dim) and the (i, j)
 * table in shared memory. centred: [updates][rows][dim]. */
__global__ void covariance_fold_kernel(const float *centred, int updates, const covariance_weights weights, float *m2,
                                       long long rows, long long dim) {
  extern __shared__ float fold_shared[];
  const long long triangle = dim * (dim + 1) / 2;
  float *e_all = fold_shared;
  unsigned short *pairs = reinterpret_cast<unsigned short *>(e_all + (size_t)updates * COV_CHAINS * dim);
  for (long long i = threadIdx.x; i < dim; i += blockDim.x)
    for (long long j = 0; j <= i; ++j) {
      pairs[2 * (i * (i + 1) / 2 + j)] = (unsigned short)i;
      pairs[2 * (i * (i + 1) / 2 + j) + 1] = (unsigned short)j;
    }
  const long long first = (long long)blockIdx.x * COV_CHAINS;
  const long long chains = rows - first < COV_CHAINS ? rows - first : COV_CHAINS;
  __shared__ float w[COV_DEFER_MAX];
  if (threadIdx.x < COV_DEFER_MAX) w[threadIdx.x] = weights.w[threadIdx.x];
  const int width = (int)(chains * dim), n_dim = (int)dim, tri = (int)triangle; /* < 2^31: dim <= COV_TABLE_DIM */
  for (int t = 0; t < updates; ++t)
    for (int e = threadIdx.x; e < width; e += blockDim.x)
      e_all[t * COV_CHAINS * n_dim + e] = centred[((long long)t * rows + first) * dim + e];
  __syncthreads();
  float *block_m2 = m2 + first * triangle;
  for (int r = 0; r < (int)chains; ++r)
    for (int p = threadIdx.x; p < tri; p += blockDim.x) {
      const int i = pairs[2 * p], j = pairs[2 * p + 1];
      float *out = block_m2 + (long long)r * tri + p;
      float value = *out;
      const float *x = e_all + r * n_dim;
      for (int t = 0; t < updates; ++t, x += COV_CHAINS * n_dim)
        value = __fadd_rn(value, __fmul_rn(__fmul_rn(w[t], x[i]), x[j]));
      *out = value;
    }
}

__global__ void running_moments_kernel(const float *x, float *mean, float *m2, long long rows, float n) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) welford_add(mean + r, m2 + r, x[r], n);
}

__global__ void hmc_finish_kernel(const hmc_batch_t b, const float *q_work, float *p_work,
                                  const float *grad_work, const float *logp_work,
                                  const float *uniform, const double *h0) {
  const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long chain = thread / GENERIC_LANES;
  const int lane = threadIdx.x % GENERIC_LANES;
  const bool active = chain < b.n_chains;
  if (!active) chain = b.n_chains - 1;
  const long long dim = b.dim, row = chain * dim;
  const float half_eps = 0.5f * b.step_size[chain];
  double kinetic = 0.0, change = 0.0, along = 0.0;
  /* A dense metric's last half kick and ChEES terms come from their own kernels. */
  const bool dense = b.metric_factor != NULL;
  for (long long k = lane; k < dim; k += GENERIC_LANES) {
    const float p = dense ? p_work[row + k] : __fadd_rn(p_work[row + k], __fmul_rn(half_eps, grad_work[row + k]));
    const double m_inv = dense ? 1.0 : (double)b.inv_metric[(b.shared_metric ? 0 : row) + k];
    kinetic = __dadd_rn(kinetic, __dmul_rn(__dmul_rn(m_inv, (double)p), (double)p));
    if (b.chees_center && !dense) {
      const double m = (double)b.chees_center[k], d1 = __dsub_rn((double)q_work[row + k], m),
                   d0 = __dsub_rn((double)b.q[row + k], m);
      change = __dadd_rn(change, __ddiv_rn(__dsub_rn(__dmul_rn(d1, d1), __dmul_rn(d0, d0)), m_inv));
      along = __dadd_rn(along, __dmul_rn(d1, (double)p));
    }
  }
  kinetic = group_sum<GENERIC_LANES>(kinetic);
  if (b.chees_center && !dense) {
    change = group_sum<GENERIC_LANES>(change);
    along = group_sum<GENERIC_LANES>(along);
    if (active && lane == 0) {
      b.chees[2 * chain] = (float)change;
      b.chees[2 * chain + 1] = (float)along;
    }
  }
  const double h1 = -(double)logp_work[chain] + 0.5 * kinetic;
  const hmc_verdict v = hmc_decide(h0[chain], h1, uniform[chain]);
  if (!active) return;
  if (lane == 0) write_verdict(b, chain, v, logp_work[chain]);
  const float n = (float)b.moment_count;
  for (long long k = lane; k < dim; k += GENERIC_LANES) {
    float q = b.q[row + k];
    if (v.accept && !b.probe) {
      q = q_work[row + k];
      b.q[row + k] = q;
      b.grad[row + k] = grad_work[row + k];
    }
    if (b.moment_mean) welford_add(b.moment_mean + row + k, b.moment_m2 + row + k, q, n);
  }
}

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

/* Column k of values [rows, cols]: 32 columns by 8 row lanes per block; blocks along y take
 * rows y, y + gridDim.y, ... in steps of 8. */
__global__ void column_sums_kernel(const float *values, long long rows, long long cols, const double *center,
                                   unsigned long long *totals, unsigned long long *failures) {
  __shared__ int64_t partial[8][32];
  const long long k = (long long)blockIdx.x * 32 + threadIdx.x;
  int64_t digits[EXACT_DIGITS];
  for (int d = 0; d < EXACT_DIGITS; ++d) digits[d] = 0;
  unsigned long long failed = 0;
  if (k < cols)
    for (long long r = (long long)blockIdx.y * 8 + threadIdx.y; r < rows; r += (long long)gridDim.y * 8) {
      double v = values[r * cols + k];
      if (center) v = __dmul_rn(__dsub_rn(v, center[k]), __dsub_rn(v, center[k]));
      failed += exact_digits_add(digits, v) != 0;
    }
  if (failed) atomicAdd(failures, failed);
  for (int d = 0; d < EXACT_DIGITS; ++d) {
    partial[threadIdx.y][threadIdx.x] = digits[d];
    __syncthreads();
    if (threadIdx.y == 0 && k < cols) {
      int64_t value = 0;
      for (int y = 0; y < 8; ++y) value += partial[y][threadIdx.x];
      if (value) atomicAdd(totals + k * EXACT_DIGITS + d, (unsigned long long)value);
    }
    __syncthreads();
  }
}

__global__ void hmc_record_draw_kernel(const hmc_batch_t b, hmc_draw_block_t block, long long slot) {
  const long long count = block.rows * b.dim;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long c = e / b.dim, k = e % b.dim, cell = c * block.capacity + slot;
    block.q[cell * b.dim + k] = b.q[e];
    if (k == 0) {
#define RECORD_STAT(name, type, dtype, source, member) block.name[cell] = (type)HMC_STAT_READ(source, b, member, c);
      HMC_SAMPLE_STATS(RECORD_STAT)
#undef RECORD_STAT
    }
  }
}

__global__ void fill_kernel(float *dst, float value, long long count) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (long long)gridDim.x * blockDim.x)
    dst[e] = value;
}

__global__ void dual_average_kernel(double *state, const float *accept, float *step_out, long long rows,
                                    const dual_average_step_t step) {
  const long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (r < rows) step_out[r] = dual_apply(state + r * DUAL_FIELDS, &step, accept ? (double)accept[r] : 0.0, step_out[r]);
}

/* A thread per chain (once per metric window: its reads need not coalesce). */
__global__ void moments_to_metric_kernel(float *mean, float *m2, long long rows, long long dim, double n,
                                         float *inv_metric) {
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (long long)gridDim.x * blockDim.x) {
    const long long row = r * dim;
    const double scale = dual_variance_scale(m2 + row, dim, n - 1.0);
    for (long long k = 0; k < dim; ++k) {
      inv_metric[row + k] = dual_regularised_variance((double)m2[row + k], n, scale);
      mean[row + k] = 0.0f;
      m2[row + k] = 0.0f;
    }
  }
}

__global__ void step_search_kernel(const float *accept_prob, int8_t *direction, int8_t *exponent, float *step,
                                   long long rows, unsigned long long *counts) {
  __shared__ unsigned long long local[STEP_SEARCH_BINS + 1];
  for (int i = threadIdx.x; i <= STEP_SEARCH_BINS; i += blockDim.x) local[i] = 0;
  __syncthreads();
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (long long)gridDim.x * blockDim.x) {
    signed char d = direction[r], e = exponent[r];
    float s = step[r];
    step_search_trial(accept_prob[r], &d, &e, &s);
    direction[r] = d;
    exponent[r] = e;
    step[r] = s;
    if (d != 2) atomicAdd(&local[0], 1ull);
    atomicAdd(&local[1 + e + STEP_SEARCH_LIMIT], 1ull);
  }
  __syncthreads();
  for (int i = threadIdx.x; i <= STEP_SEARCH_BINS; i += blockDim.x)
    if (local[i]) atomicAdd(&counts[i], local[i]);
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

unsigned blocks_for(long long count, int threads) {
  long long blocks = (count + threads - 1) / threads;
  if (blocks > 0x7FFFFFFF) blocks = 0x7FFFFFFF;
  return blocks < 1 ? 1u : (unsigned)blocks;
}

template <int LANES, int MB>
int launch_gaussian(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream) {
  const unsigned blocks = blocks_for(b.n_chains * LANES, HMC_THREADS);
  const bool vec4 = b.dim % 4 == 0 && ((uintptr_t)b.q % 16 == 0) && ((uintptr_t)b.grad % 16 == 0) &&
                    ((uintptr_t)b.inv_metric % 16 == 0);
  const bool moments = b.moment_mean != NULL, chees = b.chees_center != NULL;
  if (vec4 && chees)
    hmc_gaussian_kernel<LANES, MB, true, true, true><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
  else if (vec4 && moments)
    hmc_gaussian_kernel<LANES, MB, true, true, false><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
  else if (vec4)
    hmc_gaussian_kernel<LANES, MB, true, false, false><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
  else if (chees)
    hmc_gaussian_kernel<LANES, MB, false, true, true><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
  else if (moments)
    hmc_gaussian_kernel<LANES, MB, false, true, false><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
  else
    hmc_gaussian_kernel<LANES, MB, false, false, false><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
  CUDA_CHECK_LAUNCH("hmc_gaussian_kernel");
  return DS_OK;
}

} /* namespace */

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
                                float *uniform, double *h0, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_begin"));
  if (batch->n_chains == 0) return DS_OK;
  const size_t bytes = (size_t)(batch->n_chains * batch->dim) * sizeof(float);
  CUDA_CHECK(cudaMemcpyAsync(q_work, batch->q, bytes, cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaMemcpyAsync(grad_work, batch->grad, bytes, cudaMemcpyDeviceToDevice, stream));
  hmc_begin_kernel<<<blocks_for(batch->n_chains * GENERIC_LANES, 128), 128, 0, stream>>>(*batch, p_work, uniform, h0);
  CUDA_CHECK_LAUNCH("hmc_begin_kernel");
  return DS_OK;
}

extern "C" int hmc_launch_kick_drift(const hmc_batch_t *batch, int step, float *q_work, float *p_work,
                                     const float *grad_work, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_kick_drift"));
  if (step < 0 || step >= batch->n_leapfrog)
    return ds_fail(DS_ERR_INTERNAL, "hmc_launch_kick_drift: step %d outside [0, %d)", step, batch->n_leapfrog);
  const long long count = batch->n_chains * batch->dim;
  if (count == 0) return DS_OK;
  unsigned blocks = blocks_for(count, 256);
  if (blocks > 65536) blocks = 65536;
  hmc_kick_drift_kernel<<<blocks, 256, 0, stream>>>(*batch, step, q_work, p_work, grad_work);
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

/* Opts a kernel into more than 48 KiB of shared memory, once per size. */
static int allow_shared(const void *kernel, size_t shared, size_t *opted) {
  if (shared > 48 * 1024 && shared > *opted) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)shared));
    *opted = shared;
  }
  return DS_OK;
}

/* The persistent wide kernel: as many blocks as the device holds at once, at most a tile each. */
template <int V>
static int launch_dense_wide(const hmc_batch_t *batch, float scale, int drift, float *q_work, float *p_work,
                             const float *grad_work, cudaStream_t stream) {
  static size_t opted = 0;
  static int resident_dim = -1, resident = 0;
  const int dim = (int)batch->dim, threads = 32 * wide_groups(dim) * wide_slabs(dim);
  const size_t shared = wide_step_shared(dim);
  DS_TRY(allow_shared((const void *)hmc_dense_wide_kernel<V>, shared, &opted));
  if (resident_dim != dim) {
    int device = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hmc_dense_wide_kernel<V>, threads, shared));
    resident = (per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
    resident_dim = dim;
  }
  const long long tiles = (batch->n_chains + wide_tile(dim) - 1) / wide_tile(dim);
  const long long blocks = tiles < resident ? tiles : resident;
  hmc_dense_wide_kernel<V><<<(unsigned)blocks, threads, shared, stream>>>(*batch, scale, drift, q_work, p_work,
                                                                          grad_work);
  CUDA_CHECK_LAUNCH("hmc_dense_wide_kernel");
  return DS_OK;
}

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

extern "C" int hmc_launch_finish(const hmc_batch_t *batch, const float *q_work, float *p_work,
                                 const float *grad_work, const float *logp_work, const float *uniform,
                                 const double *h0, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_finish"));
  if (batch->n_chains == 0) return DS_OK;
  if (batch->metric_factor) {
    DS_TRY(launch_dense_step(batch, 0.5f, 0, NULL, p_work, grad_work, stream));
    if (batch->chees_center) DS_TRY(launch_dense_chees(batch, q_work, p_work, stream));
  }
  hmc_finish_kernel<<<blocks_for(batch->n_chains * GENERIC_LANES, 128), 128, 0, stream>>>(
      *batch, q_work, p_work, grad_work, logp_work, uniform, h0);
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
