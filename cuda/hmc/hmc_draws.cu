/* hmc_draws.cu: the draws and their sums: a transition's state and statistics into a block of
 * stored draws (hmc_record_draw_kernel), exact column sums of stored values (column_sums_kernel,
 * backend.h's column_sums), and a fill. */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

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

} /* namespace dsampler_hmc */
