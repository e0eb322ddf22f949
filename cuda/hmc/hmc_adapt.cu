/* hmc_adapt.cu: the step size's and the metric's adaptation between iterations: dual averaging
 * (dual_average.h), the diagonal metric from the running moments, and a trial of the step-size
 * search (backend.h). */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

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

} /* namespace dsampler_hmc */
