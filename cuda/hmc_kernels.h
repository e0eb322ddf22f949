/* hmc_kernels.h: launchers of the HMC kernels (cuda/hmc/), as plain C. The batch's
 * arrays are device memory. Randomness follows rng.h: the momentum's normals and the accept
 * uniform of chain c come from Philox blocks keyed by (seed, chain_begin + c, iteration). */
#ifndef DSAMPLER_HMC_KERNELS_H
#define DSAMPLER_HMC_KERNELS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "backend.h"
#include "targets_builtin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when hmc_launch_gaussian_fused takes chains of this dimension. */
int hmc_gaussian_fused_supported(int64_t dim);
/* Lanes per chain of the fused kernel: 4 or 16; 0 (the default) chooses by dimension. For
 * benchmarks. */
void hmc_cuda_set_lanes(int lanes);
/* The dense metric's kernel family (tests): 0 by dim and device; else one of these, where the
 * dim allows it (else the next one down). All compute the same bits. */
enum { HMC_DENSE_WIDE = 1, HMC_DENSE_TILED = 2, HMC_DENSE_ELEMENT = 3 };
void hmc_cuda_set_dense_family(int family);
/* The whole iteration for the built-in gaussian in one kernel: momenta, L leapfrog steps
 * with the gradient fused in, the Hamiltonian in double, the accept and the writes. */
int hmc_launch_gaussian_fused(const builtin_params_t *params, const hmc_batch_t *batch,
                              cudaStream_t stream);

/* The generic path, for any target: begin, then per leapfrog step a kick-drift and one
 * batched gradient of q_work, then finish. Work arrays are [n_chains, dim] (q, p, grad) and
 * [n_chains] (logp, uniform, h0). How begin treats the chains' state (q, grad, logp): */
typedef enum {
  HMC_STATE_READ = 0,     /* left where it is: the first kick-drift reads it and writes the work arrays */
  HMC_STATE_COPY = 1,     /* q and grad copied into q_work and grad_work, where the trajectory runs */
  HMC_STATE_IN_PLACE = 2  /* q, grad and logp copied into q_work, grad_work and logp_work, and the
                           * trajectory runs on the batch's own arrays: finish then restores the
                           * start of a rejected chain where an accepted one moves nothing */
} hmc_state_mode_t;
int hmc_launch_begin(const hmc_batch_t *batch, float *q_work, float *p_work, float *grad_work, float *logp_work,
                     float *uniform, double *h0, hmc_state_mode_t mode, cudaStream_t stream);
int hmc_launch_kick_drift(const hmc_batch_t *batch, int step, float *q_work, float *p_work,
                          const float *grad_work, cudaStream_t stream);
/* With a dense metric (batch->metric_factor), the kick-drift of hmc_launch_dense_kick_drift
 * replaces hmc_launch_kick_drift, and finish adds the last half kick and the ChEES terms in
 * kernels of their own. */
int hmc_launch_finish(const hmc_batch_t *batch, const float *q_work, float *p_work,
                      const float *grad_work, const float *logp_work, const float *uniform,
                      const double *h0, hmc_state_mode_t mode, cudaStream_t stream);
int hmc_launch_dense_kick_drift(const hmc_batch_t *batch, int step, float *q_work, float *p_work,
                                const float *grad_work, cudaStream_t stream);
/* backend.h's running_moments_add. */
int launch_running_moments(const float *x, float *mean, float *m2, int64_t rows, double n, cudaStream_t stream);
/* backend.h's key_histogram, into bins [2^bits + 1] in device memory (zeroed here). */
int launch_key_histogram(const float *values, int64_t rows, int clamp_zero, uint32_t prefix, int prefix_bits,
                         int shift, int bits, unsigned long long *bins, int sm_count, cudaStream_t stream);
/* Deferred covariance updates (backend_cuda.cu's covariance_add): up to
 * covariance_defer_capacity(dim) updates are kept as the centred states q - mean (centre), then
 * folded into m2 in order (fold: weights[t] = n_t / (n_t - 1)), with the bits of as many
 * launch_covariance_add calls. Capacity 1: no deferral at this dim. centred: [updates][rows][dim]. */
#define COV_DEFER_MAX 16
int covariance_defer_capacity(int64_t dim);
int launch_covariance_centre(const float *q, const float *mean, float *out, int64_t rows, int64_t dim,
                             cudaStream_t stream);
int launch_covariance_fold(const float *centred, int updates, const float *weights, float *m2, int64_t rows,
                           int64_t dim, cudaStream_t stream);
/* backend.h's covariance_add. */
int launch_covariance_add(const float *q, const float *mean, float *m2, int64_t rows, int64_t dim, double n,
                          cudaStream_t stream);

/* The batch's last transition summed: totals (device, 5 * EXACT_DIGITS + 2) receive the digits
 * of sum accept_prob, of sum step_size, of the three ChEES sums (backend.h's hmc_stats_t; zero
 * without chees_center), then the divergent count and the count of values out of the exact
 * sums' range. */
int hmc_launch_stats(const hmc_batch_t *batch, unsigned long long *totals, int sm_count, cudaStream_t stream);
/* Exact column sums of values [rows, cols] (backend.h's column_sums): totals (device,
 * cols * EXACT_DIGITS + 1) receive each column's digits, then the count of values out of range.
 * center: device [cols] or NULL. */
int launch_column_sums(const float *values, int64_t rows, int64_t cols, const double *center,
                       unsigned long long *totals, cudaStream_t stream);
int hmc_launch_record_draw(const hmc_batch_t *batch, const hmc_draw_block_t *block, int64_t slot,
                           cudaStream_t stream);
int launch_fill(float *dst, float value, int64_t count, cudaStream_t stream);
int launch_dual_average(double *state, const float *accept, float *step_out, int64_t rows,
                        const dual_average_step_t *step, cudaStream_t stream);
/* One trial of the step-size search (backend.h): counts (device, STEP_SEARCH_BINS + 1) receive
 * the chains not done, then the exponent histogram. */
int launch_step_search(const float *accept_prob, int8_t *direction, int8_t *exponent, float *step,
                       int64_t rows, unsigned long long *counts, cudaStream_t stream);
int launch_moments_to_metric(float *mean, float *m2, int64_t rows, int64_t dim, double n, float *inv_metric,
                             cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
