/* hmc_moments.cu: running moments: of one value per row (running_moments_kernel, backend.h's
 * running_moments_add) and the dense metric windows' running covariances (backend.h's
 * covariance_add), added at once (covariance_add_kernel, covariance_add_plain_kernel) or deferred
 * and folded (covariance_centre_kernel, covariance_fold_kernel). */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

/* COV_CHAINS chains a block, one lower-triangle entry (i, j) a thread, consecutive entries in
 * consecutive threads, (i, j) from a table in shared memory: m2_ij += (weight (x_i - mu_i))
 * (x_j - mu_j), as backend_cpu.c. Shared memory: dim (dim + 1) / 2 pairs of uint16. */
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

/* backend.h's key_histogram: a block's counts in shared memory (32 bits: a block sees fewer than
 * 2^32 rows), then added to bins [2^bits + 1] in global memory. */
__global__ void key_histogram_kernel(const float *values, long long rows, int clamp_zero, unsigned prefix,
                                     int prefix_bits, int shift, int bits, unsigned long long *bins) {
  __shared__ unsigned counts[(1 << ORDER_KEY_MAX_BITS) + 1];
  const int n_bins = (1 << bits) + 1;
  const unsigned mask = (1u << bits) - 1u;
  for (int i = threadIdx.x; i < n_bins; i += blockDim.x) counts[i] = 0u;
  __syncthreads();
  for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x; r < rows; r += (long long)gridDim.x * blockDim.x) {
    const unsigned u = __float_as_uint(clamp_zero ? fmaxf(values[r], 0.0f) : values[r]);
    if (!order_bits_finite(u)) {
      if (prefix_bits == 0) atomicAdd(&counts[n_bins - 1], 1u);
      continue;
    }
    const unsigned key = order_key_of_bits(u);
    if (prefix_bits > 0 && (key >> (32 - prefix_bits)) != prefix) continue;
    atomicAdd(&counts[(key >> shift) & mask], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n_bins; i += blockDim.x)
    if (counts[i]) atomicAdd(&bins[i], (unsigned long long)counts[i]);
}

} /* namespace dsampler_hmc */
