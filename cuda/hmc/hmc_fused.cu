/* hmc_fused.cu: the fused iteration of the built-in gaussian, and its launcher.
 *
 * hmc_gaussian_kernel runs a whole iteration of the built-in gaussian with 4 (dim <= 64) or
 * 16 lanes per chain: momenta drawn in-kernel from the chain's Philox blocks with rng.h's
 * transforms, L leapfrog steps with the gradient fused in, the two sums of the Hamiltonian
 * as shuffle trees in double, the accept, and the writes on accept. */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

namespace {

/* A lane's start: coordinates 4 (lane + LANES m) .. + 3 for m < MB of q and the inverse metric
 * (0 past dim), and which of them lie below dim. */
template <int LANES, int MB, bool VEC4>
__device__ __forceinline__ void load_lane(const hmc_batch_t &b, int lane, int dim, long long row, long long metric_row,
                                          float (&q)[4 * MB], float (&inv_metric)[4 * MB], bool (&valid)[4 * MB]) {
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
}

/* The standard normals of Philox block `block` of the chain's stream, for coordinates 4 block .. + 3
 * below dim (z is left as it is past them). */
__device__ __forceinline__ void draw_normals(const hmc_batch_t &b, uint64_t item, int block, int dim, float (&z)[4]) {
  if (4 * block < dim) {
    const rng_words_t words = rng_block(b.seed, item, b.iteration, (uint32_t)block);
    rng_normal_pair(words.v[0], words.v[1], &z[0], &z[1]);
    if (4 * block + 2 < dim) rng_normal_pair(words.v[2], words.v[3], &z[2], &z[3]);
  }
}

/* One leapfrog step past the first: a kick, then a drift. */
template <int PER>
__device__ __forceinline__ void leapfrog_step(float kick, float mean, const float (&eps_metric)[PER], float (&q)[PER],
                                              float (&p)[PER]) {
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    p[r] = __fmaf_rn(kick, __fsub_rn(q[r], mean), p[r]);
    q[r] = __fmaf_rn(eps_metric[r], p[r], q[r]);
  }
}

/* backend.h's ChEES term of the chain, the start read again (it is written only after this). */
template <int LANES, int PER>
__device__ __forceinline__ void chees_term(const hmc_batch_t &b, long long chain, long long row, int lane, bool active,
                                           const float (&q)[PER], const float (&p)[PER],
                                           const float (&inv_metric)[PER], const bool (&valid)[PER]) {
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

/* The state kept, the proposal or the start read again, into the chain's moments. */
template <int LANES, int MB, bool VEC4>
__device__ __forceinline__ void keep_moments(const hmc_batch_t &b, long long row, int lane, bool accept,
                                             float (&q)[4 * MB], const bool (&valid)[4 * MB]) {
  if (!accept) {
#pragma unroll
    for (int r = 0; r < 4 * MB; ++r) {
      const int k = 4 * (lane + LANES * (r / 4)) + r % 4;
      q[r] = valid[r] ? b.q[row + k] : 0.0f;
    }
  }
  add_moments<MB, VEC4>(b, row, lane * 4, LANES * 4, q, valid);
}

/* The accepted proposal's q and gradient over the lane's coordinates. */
template <int LANES, int MB, bool VEC4>
__device__ __forceinline__ void write_state(const hmc_batch_t &b, int lane, int dim, long long row,
                                            const float (&q)[4 * MB], const float (&grad)[4 * MB],
                                            const bool (&valid)[4 * MB]) {
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    const int base = 4 * (lane + LANES * m);
    if (VEC4 && base < dim) {
      *reinterpret_cast<float4 *>(b.q + row + base) = make_float4(q[4 * m], q[4 * m + 1], q[4 * m + 2], q[4 * m + 3]);
      *reinterpret_cast<float4 *>(b.grad + row + base) =
          make_float4(grad[4 * m], grad[4 * m + 1], grad[4 * m + 2], grad[4 * m + 3]);
    } else if (!VEC4) {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (valid[4 * m + e]) {
          b.q[row + base + e] = q[4 * m + e];
          b.grad[row + base + e] = grad[4 * m + e];
        }
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
  float eps = 0.0f, uniform = 0.0f;
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
  load_lane<LANES, MB, VEC4>(b, lane, dim, row, metric_row, q, inv_metric, valid);

  /* Momenta p = z / sqrt(m_inv): block `block` of the chain's Philox stream gives
   * coordinates 4 block .. + 3. */
  double kinetic = 0.0;
#pragma unroll
  for (int m = 0; m < MB; ++m) {
    const int block = lane + LANES * m;
    float z[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    draw_normals(b, item, block, dim, z);
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
  for (int step = 1; step < b.n_leapfrog; ++step) leapfrog_step<PER>(kick, mean, eps_metric, q, p);
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
  if (CHEES && b.chees_center) chees_term<LANES, PER>(b, chain, row, lane, active, q, p, inv_metric, valid);
  if (!active) return;

  if (lane == 0) {
    write_verdict(b, chain, v, logp1);
    b.step_size[chain] = eps;
  }
  if (MOMENTS && (!CHEES || b.moment_mean) && chain < b.moment_rows) keep_moments<LANES, MB, VEC4>(b, row, lane, v.accept, q, valid);
  if (!v.accept || b.probe) return;
  float grad[PER]; /* at the proposal: -(q - mean) / scale^2 */
#pragma unroll
  for (int r = 0; r < PER; ++r) grad[r] = __fmul_rn(-centred[r], params.inv_scale2);
  write_state<LANES, MB, VEC4>(b, lane, dim, row, q, grad, valid);
}

} /* namespace */

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

template int launch_gaussian<4, 1>(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream);
template int launch_gaussian<4, 2>(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream);
template int launch_gaussian<4, 4>(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream);
template int launch_gaussian<16, 1>(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream);
template int launch_gaussian<16, 2>(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream);
template int launch_gaussian<16, 4>(const builtin_params_t &params, const hmc_batch_t &b, cudaStream_t stream);

} /* namespace dsampler_hmc */
