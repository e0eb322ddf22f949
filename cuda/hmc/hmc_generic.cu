/* hmc_generic.cu: the generic HMC path's kernels, for any target: begin (momenta drawn from the
 * chain's Philox blocks, the step, the accept uniform and H0), the kick-drift of a leapfrog step
 * with a diagonal metric, and finish (the last half kick, the Hamiltonian, the ChEES terms, the
 * accept, the writes and the running moments).
 *
 * The generic path (any target) follows backend_cpu.c step for step, with the target's
 * batched gradient between kernels. */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

/* Generic path, GENERIC_LANES lanes per chain so a chain's coordinates are read and written
 * together (coalesced): momenta, the step, the uniform and H0, as backend_cpu.c's hmc_draw;
 * lane g draws Philox blocks g, g + GENERIC_LANES, ... (coordinates 4 block .. + 3). */
__global__ void hmc_begin_kernel(const hmc_batch_t b, float *p_work, float *uniform_out, double *h0_out,
                                 float *logp_save) {
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
  if (logp_save) logp_save[chain] = b.logp[chain];
}

/* A block's rows (threadIdx.y) are chains, its columns (threadIdx.x) a chain's coordinates: no
 * division by dim. The first step reads the chain's state from the batch (q, grad), so begin
 * need not copy it into the work arrays. */
__global__ void hmc_kick_drift_kernel(const hmc_batch_t b, int step, float *q_work, float *p_work,
                                      const float *grad_work) {
  const long long dim = b.dim;
  const float *q_in = step == 0 ? b.q : q_work, *grad_in = step == 0 ? b.grad : grad_work;
  for (long long chain = (long long)blockIdx.x * blockDim.y + threadIdx.y; chain < b.n_chains;
       chain += (long long)gridDim.x * blockDim.y) {
    const float eps = b.step_size[chain];
    const float kick = step == 0 ? 0.5f * eps : eps;
    const long long row = chain * dim;
    const float *m_inv = b.inv_metric + (b.shared_metric ? 0 : row);
    for (long long k = threadIdx.x; k < dim; k += blockDim.x) {
      const long long e = row + k;
      const float p = __fadd_rn(p_work[e], __fmul_rn(kick, grad_in[e]));
      p_work[e] = p;
      q_work[e] = __fadd_rn(q_in[e], __fmul_rn(__fmul_rn(eps, m_inv[k]), p));
    }
  }
}

/* in_place: the trajectory ran on the batch's own state (b.q, b.grad, b.logp hold the proposal)
 * and q_work, grad_work, logp_work hold the start, which a rejected chain (and a probe) gets back;
 * otherwise the proposal is in the work arrays and an accepted chain takes it. The same bits
 * either way; in place, an accepted chain (most of them) writes nothing. */
__global__ void hmc_finish_kernel(const hmc_batch_t b, const float *q_work, float *p_work,
                                  const float *grad_work, const float *logp_work,
                                  const float *uniform, const double *h0, int in_place) {
  const long long thread = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long chain = thread / GENERIC_LANES;
  const int lane = threadIdx.x % GENERIC_LANES;
  const bool active = chain < b.n_chains;
  if (!active) chain = b.n_chains - 1;
  const long long dim = b.dim, row = chain * dim;
  const float half_eps = 0.5f * b.step_size[chain];
  const float *q_new = in_place ? b.q : q_work, *q_start = in_place ? q_work : b.q;
  const float *grad_new = in_place ? b.grad : grad_work, *logp_new = in_place ? b.logp : logp_work;
  double kinetic = 0.0, change = 0.0, along = 0.0;
  /* Read before the lanes' shuffles: in place, lane 0 restores a rejected chain's logp below. */
  const float lp_new = logp_new[chain];
  /* A dense metric's last half kick and ChEES terms come from their own kernels. */
  const bool dense = b.metric_factor != NULL;
  for (long long k = lane; k < dim; k += GENERIC_LANES) {
    const float p = dense ? p_work[row + k] : __fadd_rn(p_work[row + k], __fmul_rn(half_eps, grad_new[row + k]));
    const double m_inv = dense ? 1.0 : (double)b.inv_metric[(b.shared_metric ? 0 : row) + k];
    kinetic = __dadd_rn(kinetic, __dmul_rn(__dmul_rn(m_inv, (double)p), (double)p));
    if (b.chees_center && !dense) {
      const double m = (double)b.chees_center[k], d1 = __dsub_rn((double)q_new[row + k], m),
                   d0 = __dsub_rn((double)q_start[row + k], m);
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
  const double h1 = -(double)lp_new + 0.5 * kinetic;
  const hmc_verdict v = hmc_decide(h0[chain], h1, uniform[chain]);
  if (!active) return;
  const bool keep = v.accept && !b.probe; /* the chain moves to the proposal */
  if (lane == 0) {
    write_verdict(b, chain, v, lp_new);
    if (in_place && !keep) b.logp[chain] = logp_work[chain];
  }
  const float n = (float)b.moment_count;
  const bool moments = b.moment_mean && chain < b.moment_rows;
  for (long long k = lane; k < dim; k += GENERIC_LANES) {
    if (in_place ? keep : !keep) {
      if (moments) welford_add(b.moment_mean + row + k, b.moment_m2 + row + k, b.q[row + k], n);
      continue;
    }
    const float q = q_work[row + k];
    b.q[row + k] = q;
    b.grad[row + k] = grad_work[row + k];
    if (moments) welford_add(b.moment_mean + row + k, b.moment_m2 + row + k, q, n);
  }
}

} /* namespace dsampler_hmc */
