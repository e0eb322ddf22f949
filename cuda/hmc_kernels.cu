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

/* LANES lanes per chain; lane g owns Philox blocks g, g + LANES, ... (MB of them), i.e.
 * coordinates 4 block .. 4 block + 3: each lane draws its momenta from whole blocks and a
 * chain's lanes read contiguous 16-byte pieces. Fewer lanes per chain spread the per-chain
 * work (accept uniform, log and exp in double, shuffles) over more chains per warp.
 *
 * The leapfrog for the gaussian, g = (q - mean) (-1/scale^2), is fused as
 * p = fma(kick (-1/scale^2), q - mean, p) and q = fma(eps m_inv, p, q): three operations per
 * coordinate per step. This rounds differently from the CPU's separate multiply and add
 * (within float rounding: the tests hold positions to 1e-5 relative). */
template <int LANES, int MB, bool VEC4>
__global__ void __launch_bounds__(HMC_THREADS)
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
  const float eps = b.step_size[chain];
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
  const uint64_t item = (uint64_t)(b.chain_begin + chain);
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

  float uniform = 0.0f;
  if (lane == 0) {
    const uint32_t word = rng_hmc_uniform_word(b.dim);
    const rng_words_t words = rng_block(b.seed, item, b.iteration, word / 4);
    uniform = rng_uniform(word % 4 == 0 ? words.v[0] : words.v[2]); /* the word is even */
  }
  uniform = __shfl_sync(0xffffffffu, uniform, 0, LANES);
  const hmc_verdict v = hmc_decide(h0, h1, uniform);
  if (!active) return;

  if (lane == 0) {
    b.diverging[chain] = (uint8_t)v.divergent;
    b.accepted[chain] = (uint8_t)v.accept;
    b.accept_prob[chain] = v.accept_prob;
    b.energy[chain] = v.energy;
    if (v.accept) b.logp[chain] = logp1;
  }
  if (!v.accept) return;
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

/* Generic path: momenta, uniform and H0 of each chain, as backend_cpu.c's hmc_draw. */
__global__ void hmc_begin_kernel(const hmc_batch_t b, float *p_work, float *uniform_out, double *h0_out) {
  const long long chain = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (chain >= b.n_chains) return;
  const long long dim = b.dim;
  const float *inv_metric = b.inv_metric + (b.shared_metric ? 0 : chain * dim);
  float *p = p_work + chain * dim;
  const uint64_t item = (uint64_t)(b.chain_begin + chain);
  const uint32_t uniform_word = rng_hmc_uniform_word(dim);
  rng_words_t words = {{0u, 0u, 0u, 0u}};
  for (uint32_t word = 0; word <= uniform_word; word += 2) {
    if (word % 4 == 0) words = rng_block(b.seed, item, b.iteration, word / 4);
    const uint32_t w0 = words.v[word % 4], w1 = words.v[word % 4 + 1];
    if (word == uniform_word) {
      uniform_out[chain] = rng_uniform(w0);
      break;
    }
    float z0, z1;
    rng_normal_pair(w0, w1, &z0, &z1);
    p[word] = __fdiv_rn(z0, __fsqrt_rn(inv_metric[word]));
    if (word + 1 < dim) p[word + 1] = __fdiv_rn(z1, __fsqrt_rn(inv_metric[word + 1]));
  }
  double kinetic = 0.0;
  for (long long k = 0; k < dim; ++k)
    kinetic = __dadd_rn(kinetic, __dmul_rn(__dmul_rn((double)inv_metric[k], (double)p[k]), (double)p[k]));
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

__global__ void hmc_finish_kernel(const hmc_batch_t b, const float *q_work, float *p_work,
                                  const float *grad_work, const float *logp_work,
                                  const float *uniform, const double *h0) {
  const long long chain = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (chain >= b.n_chains) return;
  const long long dim = b.dim, row = chain * dim;
  const float half_eps = 0.5f * b.step_size[chain];
  double kinetic = 0.0;
  for (long long k = 0; k < dim; ++k) {
    const float p = __fadd_rn(p_work[row + k], __fmul_rn(half_eps, grad_work[row + k]));
    p_work[row + k] = p;
    const double m_inv = (double)b.inv_metric[(b.shared_metric ? 0 : row) + k];
    kinetic = __dadd_rn(kinetic, __dmul_rn(__dmul_rn(m_inv, (double)p), (double)p));
  }
  const double h1 = -(double)logp_work[chain] + 0.5 * kinetic;
  const hmc_verdict v = hmc_decide(h0[chain], h1, uniform[chain]);
  b.diverging[chain] = (uint8_t)v.divergent;
  b.accepted[chain] = (uint8_t)v.accept;
  b.accept_prob[chain] = v.accept_prob;
  b.energy[chain] = v.energy;
  if (v.accept) {
    for (long long k = 0; k < dim; ++k) {
      b.q[row + k] = q_work[row + k];
      b.grad[row + k] = grad_work[row + k];
    }
    b.logp[chain] = logp_work[chain];
  }
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
  if (vec4)
    hmc_gaussian_kernel<LANES, MB, true><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
  else
    hmc_gaussian_kernel<LANES, MB, false><<<blocks, HMC_THREADS, 0, stream>>>(params, b);
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
  hmc_begin_kernel<<<blocks_for(batch->n_chains, 128), 128, 0, stream>>>(*batch, p_work, uniform, h0);
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

extern "C" int hmc_launch_finish(const hmc_batch_t *batch, const float *q_work, float *p_work,
                                 const float *grad_work, const float *logp_work, const float *uniform,
                                 const double *h0, cudaStream_t stream) {
  DS_TRY(check_batch(batch, "hmc_launch_finish"));
  if (batch->n_chains == 0) return DS_OK;
  hmc_finish_kernel<<<blocks_for(batch->n_chains, 128), 128, 0, stream>>>(*batch, q_work, p_work, grad_work,
                                                                           logp_work, uniform, h0);
  CUDA_CHECK_LAUNCH("hmc_finish_kernel");
  return DS_OK;
}
