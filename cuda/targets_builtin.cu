// targets_builtin.cu: the built-in targets on the GPU, their arithmetic from model_math.h (the
// host's source too). The small models run model_math.h's row walk, one warp per row (lanes
// across coordinates, the log density summed in double).
//
// logistic, up to kFusedDimMax coefficients, is one fused kernel shaped like two GEMMs: a block
// takes kFusedChains chains and a chunk of kFusedChunkRows data rows, and for each tile of
// kFusedTileRows rows computes Z = X_tile W (every chain's linear predictor), the residuals
// R = y - sigmoid(Z) and log-likelihood terms in registers, then accumulates G += X_tile' R, all
// in shared memory and registers; only each chunk's float partial sums reach global memory, and
// a finishing kernel adds the chunks in order in double. Both products run on the tensor cores
// in 3xTF32 (mma_tf32.cuh): float32 accuracy from three TF32 products per multiply-add. The data
// live on the device as tiles laid out for the kernel (X' of the tile, zero-padded, then y), so
// the next tile streams into shared memory (cp.async) while the current one is in use. Every
// chain's sums run in an order fixed by the data alone (coefficients in steps of 8 ascending for
// z, rows in steps of 8 ascending within a chunk, chunks ascending; an mma output depends on its
// own row and column only), so a chain's result is bitwise the same whatever chains share its
// call: draws do not depend on the rank count. Wider models take two cuBLAS GEMMs per block of
// rows, in fixed-shape blocks for the same reason.
#include <cublas_v2.h>
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "mma_tf32.cuh"
#include "model_math.h"
#include "rng.h"
#include "status.h"
#include "targets_builtin.h"
#include "targets_builtin_cuda.h"

namespace {

constexpr int kLogisticChainBlock = 64;     // chains per GEMM (padded)
constexpr int64_t kLogisticRowBlock = 65536; // data rows per GEMM
constexpr int kThreads = 256;

// The fused logistic kernel's tiling: 64 chains and 64-row tiles per block, eight warps of
// 16 x 32 outputs on the tensor cores (see fused_logistic_kernel).
constexpr int kFusedChains = 64;
constexpr int kFusedTileRows = 64;
constexpr int kFusedDimMax = 64;
constexpr int kFusedChunkRows = 1024;  // fixed: the partial sums must not depend on the call
constexpr int kFusedThreads = 256;
constexpr int kFusedStride = 64 + 8;  // shared rows of 64 padded to 8 mod 32 banks: see fused_logistic_shared
constexpr int kFusedTileFloats = (kFusedDimMax + 1) * kFusedTileRows;  // a device tile: X' [64][64], y [64]
constexpr size_t kFusedPartialBytes = size_t(256) << 20;  // chains go in slices whose partials fit

// Device copies of a model's arrays, and logistic's work space.
struct builtin_device_state {
  int device;
  float *means, *inv_scale2s, *precision;
  float *data_x, *data_y;
  cublasHandle_t cublas;
  float *w_block;     // [chain block, dim]
  float *z_block;     // [chain block, row block]: Z, then R
  float *g_block;     // [chain block, dim]
  double *g_sum;      // [chain block, dim]
  double *logp_sum;   // [chain block]
  float *data_tiles;  // fused: [tiles][kFusedDimMax + 1][kFusedTileRows]: X' of each tile, then y
  float *g_chunks;    // fused: [chunks, chains, dim] partial gradients, grow-only
  double *logp_chunks;  // fused: [chunks, chains] partial log-likelihoods
  size_t chunk_chains;  // chains the two arrays above hold room for
  float *batch_data;    // a minibatch: tiles (fused) or rows X then y (cuBLAS), grow-only
  size_t batch_floats;
};

__device__ double warp_sum(double value) {
  for (int width = 16; width >= 1; width /= 2) value += __shfl_xor_sync(0xffffffffu, value, width);
  return value;
}

// One warp per row, lanes across coordinates: model_math.h's row walk, each lane's share of the
// log density summed by a butterfly. p holds device pointers to its arrays.
__global__ void builtin_rows_kernel(builtin_params_t p, const float *x, long long n, float *logp, float *grad) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  const float *x_i = x + row * p.dim;
  float *g_i = grad + row * p.dim;
  const double sum = warp_sum(model_row_share(&p, x_i, g_i, lane, 32));
  if (lane == 0) logp[row] = (float)model_row_finish(&p, x_i, g_i, sum);
}

// One block per chain of the block: R = y - sigmoid(Z) in place over `rows` data rows, and the
// chain's sum of y z - log(1 + e^z) added to logp_sum in double (a fixed tree per block).
__global__ void logistic_residual_kernel(float *z_block, const float *y, long long rows, double *logp_sum) {
  __shared__ double partial[kThreads];
  float *z_c = z_block + (long long)blockIdx.x * rows;
  double sum = 0.0;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
    const double z = z_c[r], label = y[r], e = exp(-fabs(z));
    const double softplus = (z > 0 ? z : 0.0) + log1p(e);
    const double sigmoid = z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    sum += label * z - softplus;
    z_c[r] = (float)(label - sigmoid);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if ((int)threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) logp_sum[blockIdx.x] += partial[0];
}

__global__ void add_to_double_kernel(double *sum, const float *value, long long count) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (long long)gridDim.x * blockDim.x)
    sum[e] += (double)value[e];
}

// One thread per element of the device tiles: tile t holds rows 64t..64t+63 transposed (row k
// of the tile is coefficient k of its 64 data rows), zero past dim and past the data, then y.
__global__ void logistic_tiles_kernel(const float *data_x, const float *data_y, long long rows, int dim,
                                      long long tiles, float *data_tiles) {
  const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= tiles * kFusedTileFloats) return;
  const long long tile = e / kFusedTileFloats;
  const int within = (int)(e % kFusedTileFloats), k = within / kFusedTileRows, r = within % kFusedTileRows;
  const long long row = tile * kFusedTileRows + r;
  float value = 0.0f;
  if (row < rows) value = k < dim ? data_x[row * dim + k] : k == kFusedDimMax ? data_y[row] : 0.0f;
  data_tiles[e] = value;
}

// A minibatch as device tiles, one thread per slot (its row drawn once): slot b (tile b / 64,
// column b % 64) is data row rng_batch_row(b), copied from the full tiles; slots past the batch
// are zero.
__global__ void logistic_batch_tiles_kernel(const float *data_tiles, long long rows, uint64_t seed, uint32_t iteration,
                                            long long batch, long long slots, float *batch_tiles) {
  const long long slot = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (slot >= slots) return;
  float *target = batch_tiles + slot / kFusedTileRows * kFusedTileFloats + slot % kFusedTileRows;
  if (slot >= batch) {
    for (int k = 0; k <= kFusedDimMax; ++k) target[k * kFusedTileRows] = 0.0f;
    return;
  }
  const long long row = rng_batch_row(seed, iteration, slot, rows);
  const float *source = data_tiles + row / kFusedTileRows * kFusedTileFloats + row % kFusedTileRows;
  for (int k = 0; k <= kFusedDimMax; ++k) target[k * kFusedTileRows] = source[k * kFusedTileRows];
}

// A minibatch as rows for the cuBLAS path, one thread per slot: X [batch, dim] then y [batch].
__global__ void logistic_batch_rows_kernel(const float *data_x, const float *data_y, long long rows, int dim,
                                           uint64_t seed, uint32_t iteration, long long batch, float *batch_x,
                                           float *batch_y) {
  const long long slot = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (slot >= batch) return;
  const long long row = rng_batch_row(seed, iteration, slot, rows);
  for (int k = 0; k < dim; ++k) batch_x[slot * dim + k] = data_x[row * dim + k];
  batch_y[slot] = data_y[row];
}

// Shared memory of the fused kernel (dynamic: more than the static 48 KB). A tile's element
// (coefficient c, row r) sits at tile[c][r ^ (c & 4)]: with the row stride of 8 mod 32 banks,
// the fragments of X (for Z) and of X' (for G) both load without bank conflicts. The chains'
// coefficients and the residuals are kept split for the tensor cores (hi + lo, mma_tf32.cuh).
struct fused_logistic_shared {
  float w_hi[kFusedDimMax][kFusedStride], w_lo[kFusedDimMax][kFusedStride];  // coefficient-major
  float tile[2][kFusedDimMax + 1][kFusedStride];  // X' and y, double-buffered, swizzled
  float r_hi[kFusedTileRows][kFusedStride], r_lo[kFusedTileRows][kFusedStride];  // R; at the end log-lik partials
};

__device__ __forceinline__ int fused_swizzle(int coefficient, int row) { return row ^ (coefficient & 4); }

// Starts copying device tile `tile` into shared buffer `buffer` (16 bytes per cp.async; a
// 4-row piece stays whole under the swizzle).
__device__ void fused_tile_fetch(fused_logistic_shared &sm, int buffer, const float *data_tiles, long long tile) {
  const float *source = data_tiles + tile * kFusedTileFloats;
  constexpr int kPieces = kFusedTileFloats / 4, kPiecesPerRow = kFusedTileRows / 4;
  for (int piece = threadIdx.x; piece < kPieces; piece += kFusedThreads) {
    const int c = piece / kPiecesPerRow, r = 4 * (piece % kPiecesPerRow);
    __pipeline_memcpy_async(&sm.tile[buffer][c][fused_swizzle(c, r)], source + 4 * piece, 16);
  }
  __pipeline_commit();
}

// The B fragment of split values at rows k, k + 4 of column c.
__device__ __forceinline__ tf32_frag_b fused_frag_b(const float (*hi)[kFusedStride], const float (*lo)[kFusedStride],
                                                    int k, int c) {
  tf32_frag_b b;
  b.hi[0] = __float_as_uint(hi[k][c]);
  b.lo[0] = __float_as_uint(lo[k][c]);
  b.hi[1] = __float_as_uint(hi[k + 4][c]);
  b.lo[1] = __float_as_uint(lo[k + 4][c]);
  return b;
}

// Chains chain0 .. + kFusedChains - 1 of w into shared memory, split (0 past dim and chains).
__device__ __forceinline__ void fused_w_fetch(fused_logistic_shared &sm, const float *w_all, long long chains,
                                              long long chain0, int dim) {
  for (int e = threadIdx.x; e < kFusedDimMax * kFusedChains; e += kFusedThreads) {
    const int c = e / kFusedDimMax, k = e % kFusedDimMax;
    uint32_t hi, lo;
    tf32_split((k < dim && chain0 + c < chains) ? w_all[(chain0 + c) * dim + k] : 0.0f, &hi, &lo);
    sm.w_hi[k][c] = __uint_as_float(hi);
    sm.w_lo[k][c] = __uint_as_float(lo);
  }
}

// Z = X W for the warp's 16 rows x 32 chains (rows m, m + 8), coefficients in steps of 8 ascending.
__device__ __forceinline__ void fused_tile_z(const fused_logistic_shared &sm, const float (*x_t)[kFusedStride],
                                             int k_steps, int m, int g, int t, int warp_chain0, float (&z)[4][4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) z[j][e] = 0.0f;
  for (int step = 0; step < k_steps; ++step) {
    const int k = 8 * step + t;  // coefficients k and k + 4 (swizzled: k & 4 == 0)
    const tf32_frag_a a = tf32_frag_a_of(x_t[k][m], x_t[k][m + 8], x_t[k + 4][m ^ 4], x_t[k + 4][(m + 8) ^ 4]);
#pragma unroll
    for (int j = 0; j < 4; ++j) mma_3xtf32(z[j], a, fused_frag_b(sm.w_hi, sm.w_lo, k, warp_chain0 + 8 * j + g));
  }
}

// Residuals (stored split) and log-likelihood terms where the accumulators lie: rows m, m + 8,
// chains c, c + 1.
__device__ __forceinline__ void fused_residuals(fused_logistic_shared &sm, const float (*x_t)[kFusedStride], int m,
                                                int t, int warp_chain0, int tile_rows, const float (&z)[4][4],
                                                float (&loglik)[4][2]) {
#pragma unroll
  for (int half_row = 0; half_row < 2; ++half_row) {
    const int r = m + 8 * half_row;
    const float label = x_t[kFusedDimMax][r];  // kFusedDimMax & 4 == 0: not swizzled
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      uint32_t hi[2], lo[2];
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float residual;
        const float term = model_logistic_row(z[j][2 * half_row + e], label, &residual);
        if (r < tile_rows) loglik[j][e] += term;  // padded rows: x = 0, so their residuals add nothing
        tf32_split(residual, &hi[e], &lo[e]);
      }
      const int c = warp_chain0 + 8 * j + 2 * t;
      *reinterpret_cast<float2 *>(&sm.r_hi[r][c]) = make_float2(__uint_as_float(hi[0]), __uint_as_float(hi[1]));
      *reinterpret_cast<float2 *>(&sm.r_lo[r][c]) = make_float2(__uint_as_float(lo[0]), __uint_as_float(lo[1]));
    }
  }
}

// G += X' R for the warp's 16 coefficients x 32 chains (coefficients m, m + 8): the tile's product
// from zero, rows in steps of 8 ascending (a short mma chain, mma_tf32.cuh), then added into G rounded.
__device__ __forceinline__ void fused_tile_g(const fused_logistic_shared &sm, const float (*x_t)[kFusedStride], int m,
                                             int g, int t, int warp_chain0, float (&g_acc)[4][4]) {
  float tile_g[4][4];
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) tile_g[j][e] = 0.0f;
  const int flip = g & 4;  // coefficient m's swizzle: (m & 4) == (g & 4)
#pragma unroll 2
  for (int step = 0; step < kFusedTileRows / 8; ++step) {
    const int r = 8 * step + t;  // rows r and r + 4
    const tf32_frag_a a =
        tf32_frag_a_of(x_t[m][r ^ flip], x_t[m + 8][r ^ flip], x_t[m][(r + 4) ^ flip], x_t[m + 8][(r + 4) ^ flip]);
#pragma unroll
    for (int j = 0; j < 4; ++j) mma_3xtf32(tile_g[j], a, fused_frag_b(sm.r_hi, sm.r_lo, r, warp_chain0 + 8 * j + g));
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) g_acc[j][e] = __fadd_rn(g_acc[j][e], tile_g[j][e]);
}

// Each chain's log-likelihood of the chunk into logp_chunks: per chain, the 32 partials of (row quarter,
// g), through shared memory, added in that order in double.
__device__ __forceinline__ void fused_loglik_store(fused_logistic_shared &sm, const float (&loglik)[4][2], int quarter,
                                                   int g, int t, int warp_chain0, long long chain0, long long chains,
                                                   long long chunk, double *logp_chunks) {
  __syncthreads();
#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) sm.r_hi[8 * quarter + g][warp_chain0 + 8 * j + 2 * t + e] = loglik[j][e];
  __syncthreads();
  const int tid = threadIdx.x;
  if (tid < kFusedChains && chain0 + tid < chains) {
    double sum = 0.0;
    for (int p = 0; p < 32; ++p) sum += (double)sm.r_hi[p][tid];
    logp_chunks[chunk * chains + chain0 + tid] = sum;
  }
}

// A one-dimensional grid of chunks x chain groups, the groups of a chunk adjacent (they share its
// tiles in L2). See the file's opening comment. Eight warps; warp w takes chains 32 (w / 4) ..
// + 31 and, in Z, rows 16 (w % 4) .. + 15 of the tile, in G coefficients 16 (w % 4) .. + 15:
// 1 x 4 tiles of m16n8k8 per step, in 3xTF32 (mma_tf32.cuh).
__global__ void __launch_bounds__(kFusedThreads, 2)
    fused_logistic_kernel(const float *w_all, long long chains, const float *data_tiles, long long rows_total,
                          int dim, int groups, float *g_chunks, double *logp_chunks) {
  extern __shared__ float4 shared_raw[];
  fused_logistic_shared &sm = *reinterpret_cast<fused_logistic_shared *>(shared_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int quarter = warp % 4, warp_chain0 = 32 * (warp / 4);
  const long long chunk = blockIdx.x / groups;
  const long long chain0 = (long long)(blockIdx.x % groups) * kFusedChains;
  const long long row_begin = chunk * kFusedChunkRows;
  const long long row_end = min(row_begin + kFusedChunkRows, rows_total);
  const long long tile_begin = row_begin / kFusedTileRows;
  const int tile_count = (int)((row_end - row_begin + kFusedTileRows - 1) / kFusedTileRows);
  const int k_steps = (dim + 7) / 8;
  // G's 16 coefficients of this warp hold one below dim (else the warp has no G work).
  const bool has_coefficients = 16 * quarter < dim;

  fused_tile_fetch(sm, 0, data_tiles, tile_begin);
  fused_w_fetch(sm, w_all, chains, chain0, dim);

  float g_acc[4][4], loglik[4][2];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    loglik[j][0] = loglik[j][1] = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) g_acc[j][e] = 0.0f;
  }

  for (int tt = 0; tt < tile_count; ++tt) {
    const int buffer = tt & 1;
    const long long tile0 = row_begin + (long long)tt * kFusedTileRows;
    const int tile_rows = (int)min((long long)kFusedTileRows, row_end - tile0);
    __pipeline_wait_prior(0);
    __syncthreads();  // tile tt is in; every thread is done with tile tt - 1 and its residuals
    if (tt + 1 < tile_count) fused_tile_fetch(sm, buffer ^ 1, data_tiles, tile_begin + tt + 1);
    const float(*x_t)[kFusedStride] = sm.tile[buffer];

    const int m = 16 * quarter + g;  // rows m, m + 8 in Z; coefficients m, m + 8 in G
    float z[4][4];
    fused_tile_z(sm, x_t, k_steps, m, g, t, warp_chain0, z);
    fused_residuals(sm, x_t, m, t, warp_chain0, tile_rows, z, loglik);
    __syncthreads();
    if (has_coefficients) fused_tile_g(sm, x_t, m, g, t, warp_chain0, g_acc);
  }

#pragma unroll
  for (int j = 0; j < 4; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int k = 16 * quarter + g + 8 * (e / 2);
      const long long chain = chain0 + warp_chain0 + 8 * j + 2 * t + e % 2;
      if (k < dim && chain < chains) g_chunks[(chunk * chains + chain) * dim + k] = g_acc[j][e];
    }
  fused_loglik_store(sm, loglik, quarter, g, t, warp_chain0, chain0, chains, chunk, logp_chunks);
}

// The chunks' partials of each (chain, coefficient), then the prior; and each chain's log
// density. A block takes kFinishElements consecutive elements (chain * dim + coefficient, then
// chains * dim + chain for the log densities) with kFinishParts threads each: part p adds the
// chunks of its fixed quarter in order in double, and part 0 adds the quarters in order. The
// order depends on the number of chunks alone; many loads are in flight at once.
constexpr int kFinishParts = 4, kFinishElements = kThreads / kFinishParts;
__global__ void fused_logistic_finish_kernel(const float *w, long long chains, int dim, long long chunks,
                                             const float *g_chunks, const double *logp_chunks, double data_scale,
                                             double inv_var, float *logp, float *grad) {
  __shared__ double part_sums[kFinishParts][kFinishElements];
  const int part = threadIdx.x / kFinishElements, slot = threadIdx.x % kFinishElements;
  const long long e = (long long)blockIdx.x * kFinishElements + slot, elements = chains * dim;
  const long long quarter = (chunks + kFinishParts - 1) / kFinishParts;
  const long long first = part * quarter, last = min(chunks, first + quarter);
  double sum = 0.0;
  if (e < elements) {
#pragma unroll 4
    for (long long chunk = first; chunk < last; ++chunk) sum += (double)g_chunks[chunk * elements + e];
  } else if (e < elements + chains) {
#pragma unroll 4
    for (long long chunk = first; chunk < last; ++chunk) sum += logp_chunks[chunk * chains + (e - elements)];
  }
  part_sums[part][slot] = sum;
  __syncthreads();
  if (part != 0) return;
  for (int p = 1; p < kFinishParts; ++p) sum += part_sums[p][slot];
  if (e < elements) {
    grad[e] = (float)(data_scale * sum - (double)w[e] * inv_var);
  } else if (e < elements + chains) {
    const long long chain = e - elements;
    double norm2 = 0.0;
    for (int k = 0; k < dim; ++k) norm2 += (double)w[chain * dim + k] * (double)w[chain * dim + k];
    logp[chain] = (float)(data_scale * sum - 0.5 * norm2 * inv_var);
  }
}

// One block per real chain: grad = G - w / sigma^2, logp = sum - |w|^2 / (2 sigma^2).
__global__ void logistic_finish_kernel(const float *w, const double *g_sum, const double *logp_sum, long long dim,
                                       double data_scale, double inv_var, float *logp, float *grad) {
  const long long c = blockIdx.x;
  const float *w_c = w + c * dim;
  for (long long k = threadIdx.x; k < dim; k += blockDim.x)
    grad[c * dim + k] = (float)(data_scale * g_sum[c * dim + k] - (double)w_c[k] * inv_var);
  if (threadIdx.x == 0) {
    double norm2 = 0.0;
    for (long long k = 0; k < dim; ++k) norm2 += (double)w_c[k] * (double)w_c[k];
    logp[c] = (float)(data_scale * logp_sum[c] - 0.5 * norm2 * inv_var);
  }
}

int grid_of(long long count, int threads) {
  long long blocks = (count + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535;
  return blocks < 1 ? 1 : (int)blocks;
}

void state_release(void *opaque) {
  builtin_device_state *s = static_cast<builtin_device_state *>(opaque);
  if (!s) return;
  int current = -1;
  CUDA_CHECK_NORETURN(cudaGetDevice(&current));
  if (current != s->device) CUDA_CHECK_NORETURN(cudaSetDevice(s->device));
  if (s->cublas) cublasDestroy(s->cublas);
  void *arrays[] = {s->means, s->inv_scale2s, s->precision, s->data_x, s->data_y, s->w_block,
                    s->z_block, s->g_block, s->g_sum, s->logp_sum, s->data_tiles, s->g_chunks, s->logp_chunks,
                    s->batch_data};
  for (void *a : arrays)
    if (a) CUDA_CHECK_NORETURN(cudaFree(a));
  if (current >= 0 && current != s->device) CUDA_CHECK_NORETURN(cudaSetDevice(current));
  free(s);
}

int upload(float **dst, const float *src, size_t count) {
  if (!src) return DS_OK;
  CUDA_CHECK(cudaMalloc(dst, count * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(*dst, src, count * sizeof(float), cudaMemcpyHostToDevice));
  return DS_OK;
}

int state_fill(const builtin_params_t *p, builtin_device_state *s) {
  CUDA_CHECK(cudaGetDevice(&s->device));
  const size_t dim = (size_t)p->dim;
  DS_TRY(upload(&s->means, p->means, dim));
  DS_TRY(upload(&s->inv_scale2s, p->inv_scale2s, dim));
  DS_TRY(upload(&s->precision, p->precision, dim * dim));
  if (p->kind == BUILTIN_LOGISTIC) {
    DS_TRY(upload(&s->data_x, p->data_x, (size_t)p->n_data * dim));
    DS_TRY(upload(&s->data_y, p->data_y, (size_t)p->n_data));
    if (p->dim <= kFusedDimMax) {
      // The fused kernel reads the data as tiles only; its other work space comes with the first call.
      const long long tiles = (p->n_data + kFusedTileRows - 1) / kFusedTileRows, floats = tiles * kFusedTileFloats;
      CUDA_CHECK(cudaMalloc(&s->data_tiles, (size_t)floats * sizeof(float)));
      logistic_tiles_kernel<<<(unsigned)((floats + kThreads - 1) / kThreads), kThreads>>>(s->data_x, s->data_y, p->n_data,
                                                                                       (int)dim, tiles, s->data_tiles);
      CUDA_CHECK_LAUNCH("logistic_tiles_kernel");
      CUDA_CHECK(cudaDeviceSynchronize());
      CUDA_CHECK(cudaFuncSetAttribute(fused_logistic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)sizeof(fused_logistic_shared)));
      CUDA_CHECK(cudaFree(s->data_x));
      CUDA_CHECK(cudaFree(s->data_y));
      s->data_x = s->data_y = nullptr;
      return DS_OK;
    }
    const size_t rows = (size_t)(p->n_data < kLogisticRowBlock ? p->n_data : kLogisticRowBlock);
    CUDA_CHECK(cudaMalloc(&s->w_block, kLogisticChainBlock * dim * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s->z_block, kLogisticChainBlock * rows * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s->g_block, kLogisticChainBlock * dim * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s->g_sum, kLogisticChainBlock * dim * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&s->logp_sum, kLogisticChainBlock * sizeof(double)));
    CUBLAS_CHECK(cublasCreate(&s->cublas));
    // Full float32 arithmetic: no TF32 or other reduced-precision shortcuts.
    CUBLAS_CHECK(cublasSetMathMode(s->cublas, CUBLAS_PEDANTIC_MATH));
  }
  return DS_OK;
}

// The device state, made on first use and kept in the parameters until the target goes.
int state_get(const builtin_params_t *p, builtin_device_state **out) {
  if (p->device) {
    *out = static_cast<builtin_device_state *>(p->device);
    return DS_OK;
  }
  builtin_device_state *s = static_cast<builtin_device_state *>(calloc(1, sizeof *s));
  if (!s) return DS_FAIL_ALLOC("GPU target state", sizeof *s);
  int status = state_fill(p, s);
  if (status != DS_OK) {
    state_release(s);
    return status;
  }
  builtin_params_t *owner = const_cast<builtin_params_t *>(p);  // the target's own heap copy
  owner->device = s;
  owner->device_release = state_release;
  *out = s;
  return DS_OK;
}

// The parameters as a kernel takes them: their arrays' device copies in place of the host's.
int params_on_device(const builtin_params_t *p, builtin_params_t *on_device) {
  builtin_device_state *s = nullptr;
  DS_TRY(state_get(p, &s));
  *on_device = *p;
  on_device->means = s->means;
  on_device->inv_scale2s = s->inv_scale2s;
  on_device->precision = s->precision;
  return DS_OK;
}

// The fused path over `rows` data rows laid out as tiles (all the data, or a minibatch), the
// likelihood scaled by data_scale.
int fused_logistic_logp_grad(const builtin_params_t *p, builtin_device_state *s, const float *x, int64_t n,
                             float *logp, float *grad, cudaStream_t stream, const float *tiles, long long rows,
                             double data_scale) {
  const long long dim = p->dim, chunks = (rows + kFusedChunkRows - 1) / kFusedChunkRows;
  // Chains in slices (whole groups) so the partial sums stay within kFusedPartialBytes; a
  // chain's arithmetic is the same in any slice.
  const long long per_chain = chunks * (dim * (long long)sizeof(float) + (long long)sizeof(double));
  long long slice = (long long)(kFusedPartialBytes / (size_t)per_chain) / kFusedChains * kFusedChains;
  if (slice < kFusedChains) slice = kFusedChains;
  if (slice > n) slice = n;
  if (chunks * ((slice + kFusedChains - 1) / kFusedChains) > 0x7FFFFFFF)
    return ds_fail(DS_ERR_INTERNAL, "logistic: %lld data rows exceed the GPU grid", rows);
  if ((size_t)slice > s->chunk_chains) {
    if (s->g_chunks) CUDA_CHECK(cudaFree(s->g_chunks));
    if (s->logp_chunks) CUDA_CHECK(cudaFree(s->logp_chunks));
    s->g_chunks = nullptr;
    s->logp_chunks = nullptr;
    s->chunk_chains = 0;
    CUDA_CHECK(cudaMalloc(&s->g_chunks, (size_t)(chunks * slice * dim) * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s->logp_chunks, (size_t)(chunks * slice) * sizeof(double)));
    s->chunk_chains = (size_t)slice;
  }
  const int shared_bytes = (int)sizeof(fused_logistic_shared);
  const double inv_var = 1.0 / (p->prior_sigma * p->prior_sigma);
  for (long long c0 = 0; c0 < n; c0 += slice) {
    const long long count = n - c0 < slice ? n - c0 : slice;
    const unsigned groups = (unsigned)((count + kFusedChains - 1) / kFusedChains);
    fused_logistic_kernel<<<(unsigned)(chunks * groups), kFusedThreads, shared_bytes, stream>>>(
        x + c0 * dim, count, tiles, rows, (int)dim, (int)groups, s->g_chunks, s->logp_chunks);
    CUDA_CHECK_LAUNCH("fused_logistic_kernel");
    const long long elements = count * dim + count;
    fused_logistic_finish_kernel<<<(unsigned)((elements + kFinishElements - 1) / kFinishElements), kThreads, 0,
                                   stream>>>(
        x + c0 * dim, count, (int)dim, chunks, s->g_chunks, s->logp_chunks, data_scale, inv_var, logp + c0,
        grad + c0 * dim);
    CUDA_CHECK_LAUNCH("fused_logistic_finish_kernel");
  }
  return DS_OK;
}

int logistic_logp_grad(const builtin_params_t *p, builtin_device_state *s, const float *x, int64_t n, float *logp,
                       float *grad, cudaStream_t stream) {
  // A minibatch is gathered first (rows drawn on the device from the batch's key).
  const long long batch = p->batch_size > 0 ? p->batch_size : 0, rows = batch > 0 ? batch : p->n_data;
  const double data_scale = batch > 0 ? (double)p->n_data / (double)batch : 1.0;
  const float *data_x = s->data_x, *data_y = s->data_y, *tiles = s->data_tiles;
  if (batch > 0) {
    const long long batch_tiles = (batch + kFusedTileRows - 1) / kFusedTileRows;
    const size_t floats = p->dim <= kFusedDimMax ? (size_t)(batch_tiles * kFusedTileFloats) : (size_t)(batch * (p->dim + 1));
    if (floats > s->batch_floats) {
      if (s->batch_data) CUDA_CHECK(cudaFree(s->batch_data));
      s->batch_data = nullptr;
      s->batch_floats = 0;
      CUDA_CHECK(cudaMalloc(&s->batch_data, floats * sizeof(float)));
      s->batch_floats = floats;
    }
    if (p->dim <= kFusedDimMax) {
      const long long slots = batch_tiles * kFusedTileRows;
      logistic_batch_tiles_kernel<<<(unsigned)((slots + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
          s->data_tiles, p->n_data, p->batch_seed, p->batch_iteration, batch, slots, s->batch_data);
      CUDA_CHECK_LAUNCH("logistic_batch_tiles_kernel");
      tiles = s->batch_data;
    } else {
      logistic_batch_rows_kernel<<<(unsigned)((batch + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
          s->data_x, s->data_y, p->n_data, (int)p->dim, p->batch_seed, p->batch_iteration, batch, s->batch_data,
          s->batch_data + batch * p->dim);
      CUDA_CHECK_LAUNCH("logistic_batch_rows_kernel");
      data_x = s->batch_data;
      data_y = s->batch_data + batch * p->dim;
    }
  }
  if (p->dim <= kFusedDimMax)
    return fused_logistic_logp_grad(p, s, x, n, logp, grad, stream, tiles, rows, data_scale);
  const long long dim = p->dim, block = kLogisticChainBlock;
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSetStream(s->cublas, stream));
  for (int64_t c0 = 0; c0 < n; c0 += block) {
    const long long count = n - c0 < block ? n - c0 : block;
    CUDA_CHECK(cudaMemcpyAsync(s->w_block, x + c0 * dim, (size_t)(count * dim) * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream));
    if (count < block)
      CUDA_CHECK(cudaMemsetAsync(s->w_block + count * dim, 0, (size_t)((block - count) * dim) * sizeof(float), stream));
    CUDA_CHECK(cudaMemsetAsync(s->g_sum, 0, (size_t)(block * dim) * sizeof(double), stream));
    CUDA_CHECK(cudaMemsetAsync(s->logp_sum, 0, (size_t)block * sizeof(double), stream));
    for (int64_t r0 = 0; r0 < rows; r0 += kLogisticRowBlock) {
      const int block_rows = (int)(rows - r0 < kLogisticRowBlock ? rows - r0 : kLogisticRowBlock);
      const float *x_rows = data_x + r0 * dim;
      // Column-major views: X rows are [dim, rows] with ld dim, W is [dim, block] with ld dim.
      // Z (col-major [rows, block]) = X_rows' W.
      CUBLAS_CHECK(cublasSgemm(s->cublas, CUBLAS_OP_T, CUBLAS_OP_N, block_rows, (int)block, (int)dim, &one,
                               x_rows, (int)dim, s->w_block, (int)dim, &zero, s->z_block, block_rows));
      logistic_residual_kernel<<<(unsigned)block, kThreads, 0, stream>>>(s->z_block, data_y + r0, block_rows,
                                                                          s->logp_sum);
      CUDA_CHECK_LAUNCH("logistic_residual_kernel");
      // G (col-major [dim, block]) = X_rows R.
      CUBLAS_CHECK(cublasSgemm(s->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)dim, (int)block, block_rows, &one, x_rows,
                               (int)dim, s->z_block, block_rows, &zero, s->g_block, (int)dim));
      add_to_double_kernel<<<grid_of(block * dim, kThreads), kThreads, 0, stream>>>(s->g_sum, s->g_block, block * dim);
      CUDA_CHECK_LAUNCH("add_to_double_kernel");
    }
    const double inv_var = 1.0 / (p->prior_sigma * p->prior_sigma);
    logistic_finish_kernel<<<(unsigned)count, 128, 0, stream>>>(x + c0 * dim, s->g_sum, s->logp_sum, dim, data_scale,
                                                                inv_var, logp + c0, grad + c0 * dim);
    CUDA_CHECK_LAUNCH("logistic_finish_kernel");
  }
  return DS_OK;
}


// ---- the fused trajectory of the row-walk models --------------------------------------------
//
// HMC's leapfrog steps for gaussian, corr-gaussian (AR(1)), banana and mixture1d in one kernel,
// the chain's position, momentum and gradient in registers from the first step to the last: one
// warp a chain, lane l holding units l, l + 32, ... (a coordinate; banana's pair), as
// builtin_rows_kernel walks them. Each step is the generic path's, operation for operation: the
// kick p += (eps/2 at the first step, eps after) g and drift q += (eps m_inv) p of
// hmc_kick_drift_kernel, then the gradient of model_math.h's row walk at the new position, and
// the log density (its lanes' shares in the same order, the same butterfly) after the last. So
// the trajectory has the bits of the step-by-step path, with one pass over memory for all L
// steps instead of two a step.
template <int KIND, int UNITS>
struct row_model {
  static constexpr int WIDTH = KIND == BUILTIN_BANANA ? 2 : 1;  // coordinates a unit
  static constexpr int PER = UNITS * WIDTH;                     // coordinates a lane
  __device__ static long long coord(int lane, int r) { return (long long)WIDTH * (lane + 32 * (r / WIDTH)) + r % WIDTH; }

  // The gradient at x into g; returns the lane's share of the log density (model_row_share's).
  __device__ static double gradient(const builtin_params_t &p, int lane, long long dim, const float *x, float *g) {
    double sum = 0.0;
    if constexpr (KIND == BUILTIN_GAUSSIAN) {
#pragma unroll
      for (int r = 0; r < PER; ++r) {
        const long long k = coord(lane, r);
        if (k >= dim) continue;
        if (p.means) {
          const float inv = p.inv_scale2s[k];
          const float centred = model_gaussian_coord(x[r], p.means[k], inv, &g[r]);
          sum += (double)centred * (double)centred * (double)inv;
        } else {
          const float centred = model_gaussian_coord(x[r], p.mean, p.inv_scale2, &g[r]);
          sum += (double)centred * (double)centred;
        }
      }
      return p.means ? -0.5 * sum : sum;
    } else if constexpr (KIND == BUILTIN_CORR_GAUSSIAN) {
      const double rho = p.rho, scale = p.scale;
      const double c = 1.0 / (scale * scale * (1.0 - rho * rho));
#pragma unroll
      for (int r = 0; r < PER; ++r) {
        // x_{k-1}: lane - 1's same unit, or lane 31's unit before; x_{k+1}: lane + 1's, or lane 0's after.
        const float up = __shfl_up_sync(0xffffffffu, x[r], 1), wrap_left = __shfl_sync(0xffffffffu, r > 0 ? x[r - 1] : 0.0f, 31);
        const float down = __shfl_down_sync(0xffffffffu, x[r], 1),
                    wrap_right = __shfl_sync(0xffffffffu, r + 1 < PER ? x[r + 1] : 0.0f, 0);
        const long long k = coord(lane, r);
        if (k >= dim) continue;
        const float left = lane > 0 ? up : wrap_left, right = lane < 31 ? down : wrap_right;
        const double qx = model_ar1_precision_row(x[r], k > 0 ? left : 0.0, k + 1 < dim ? right : 0.0, k, dim, rho, c);
        g[r] = (float)-qx;
        sum += (double)x[r] * qx;
      }
      return -0.5 * sum;
    } else if constexpr (KIND == BUILTIN_BANANA) {
      const double a2 = p.banana_a * p.banana_a, b = p.banana_b;
#pragma unroll
      for (int u = 0; u < UNITS; ++u) {
        const long long k = coord(lane, 2 * u);
        if (k >= dim) continue;
        if (k + 1 < dim)
          sum += model_banana_pair(x[2 * u], x[2 * u + 1], a2, b, &g[2 * u], &g[2 * u + 1]);
        else
          sum += model_banana_single(x[2 * u], &g[2 * u]);
      }
      return sum;
    } else {  // mixture1d
#pragma unroll
      for (int r = 0; r < PER; ++r) {
        if (coord(lane, r) >= dim) continue;
        sum += model_mixture1d_coord(x[r], &g[r]);
      }
      return sum;
    }
  }
};

template <int KIND, int UNITS>
__global__ void builtin_leapfrog_kernel(builtin_params_t p, const float *q_in, const float *grad_in, float *q_out,
                                        float *momentum, float *grad_out, float *logp, const float *step_size,
                                        const float *inv_metric, int shared_metric, int n_steps, long long n) {
  using model = row_model<KIND, UNITS>;
  constexpr int PER = model::PER;
  const long long chain = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (chain >= n) return;  // whole warps leave together
  const long long dim = p.dim, row = chain * dim;
  const float eps = step_size[chain];
  float x[PER], m[PER], g[PER], eps_m[PER];
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    const long long k = model::coord(lane, r);
    const bool valid = k < dim;
    x[r] = valid ? q_in[row + k] : 0.0f;
    m[r] = valid ? momentum[row + k] : 0.0f;
    g[r] = valid ? grad_in[row + k] : 0.0f;
    eps_m[r] = valid ? __fmul_rn(eps, inv_metric[(shared_metric ? 0 : row) + k]) : 0.0f;
  }
  double share = 0.0;
  for (int step = 0; step < n_steps; ++step) {
    const float kick = step == 0 ? 0.5f * eps : eps;
#pragma unroll
    for (int r = 0; r < PER; ++r) {
      m[r] = __fadd_rn(m[r], __fmul_rn(kick, g[r]));
      x[r] = __fadd_rn(x[r], __fmul_rn(eps_m[r], m[r]));
    }
    share = model::gradient(p, lane, dim, x, g);
  }
  const double sum = warp_sum(share);
#pragma unroll
  for (int r = 0; r < PER; ++r) {
    const long long k = model::coord(lane, r);
    if (k >= dim) continue;
    q_out[row + k] = x[r];
    momentum[row + k] = m[r];
    grad_out[row + k] = g[r];
  }
  if (lane == 0) logp[chain] = (float)(KIND == BUILTIN_GAUSSIAN && !p.means ? -0.5 * sum * (double)p.inv_scale2 : sum);
}

template <int KIND>
int launch_leapfrog_kind(const builtin_params_t &p, const float *q_in, const float *grad_in, float *q_out, float *momentum,
                         float *grad_out, float *logp, const float *step_size, const float *inv_metric,
                         int shared_metric, int n_steps, long long n, cudaStream_t stream) {
  constexpr int width = KIND == BUILTIN_BANANA ? 2 : 1;
  const long long units = (p.dim + width - 1) / width;
  const long long blocks = (n * 32 + kThreads - 1) / kThreads;
#define DSAMPLER_LEAPFROG(U)                                                                                          \
  builtin_leapfrog_kernel<KIND, U><<<(unsigned)blocks, kThreads, 0, stream>>>(                                     \
      p, q_in, grad_in, q_out, momentum, grad_out, logp, step_size, inv_metric, shared_metric, n_steps, n)
  if (units <= 32) DSAMPLER_LEAPFROG(1);
  else if (units <= 64) DSAMPLER_LEAPFROG(2);
  else if (units <= 128) DSAMPLER_LEAPFROG(4);
  else DSAMPLER_LEAPFROG(8);
#undef DSAMPLER_LEAPFROG
  CUDA_CHECK_LAUNCH("builtin_leapfrog_kernel");
  return DS_OK;
}
}  // namespace

extern "C" int cuda_builtin_rows_launch(const builtin_params_t *p, const float *x, int64_t n, float *logp,
                                       float *grad, void *stream) {
  if (!p || n < 0 || p->dim < 1 || p->kind == BUILTIN_NONE || p->kind == BUILTIN_LOGISTIC)
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_rows_launch: bad arguments (n=%lld)", (long long)n);
  if (n == 0) return DS_OK;
  const long long rows_per_block = kThreads / 32, blocks = (n + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7FFFFFFF) return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_rows_launch: n=%lld too large", (long long)n);
  builtin_rows_kernel<<<(unsigned)blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(*p, x, n, logp, grad);
  CUDA_CHECK_LAUNCH("builtin_rows_kernel");
  return DS_OK;
}

extern "C" int cuda_builtin_rows_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad,
                                           void *stream) {
  const builtin_params_t *p = static_cast<const builtin_params_t *>(self);
  if (!p || n < 0 || p->dim < 1 || p->kind == BUILTIN_NONE || p->kind == BUILTIN_LOGISTIC)
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_rows_logp_grad: bad arguments (n=%lld)", (long long)n);
  if (n == 0) return DS_OK;
  builtin_params_t on_device;
  DS_TRY(params_on_device(p, &on_device));
  return cuda_builtin_rows_launch(&on_device, x, n, logp, grad, stream);
}

extern "C" int cuda_builtin_logistic_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad,
                                               void *stream) {
  const builtin_params_t *p = static_cast<const builtin_params_t *>(self);
  if (!p || n < 0 || p->kind != BUILTIN_LOGISTIC)
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_logistic_logp_grad: bad arguments (n=%lld)", (long long)n);
  if (n == 0) return DS_OK;
  if (p->dim < 1 || p->dim > 0x7FFFFFFF || p->n_data < 1)
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_logistic_logp_grad: logistic with dim %lld, %lld rows",
                   (long long)p->dim, (long long)p->n_data);
  builtin_device_state *s = nullptr;
  DS_TRY(state_get(p, &s));
  return logistic_logp_grad(p, s, x, n, logp, grad, static_cast<cudaStream_t>(stream));
}

extern "C" int cuda_builtin_leapfrog_fits(const void *self, int64_t dim) {
  const builtin_params_t *p = static_cast<const builtin_params_t *>(self);
  if (!p || p->dim != dim || dim < 1) return 0;
  const long long units = p->kind == BUILTIN_BANANA ? (dim + 1) / 2 : dim;
  if (units > 256) return 0;
  return p->kind == BUILTIN_GAUSSIAN || p->kind == BUILTIN_BANANA || p->kind == BUILTIN_MIXTURE1D ||
         (p->kind == BUILTIN_CORR_GAUSSIAN && p->precision == NULL);
}

extern "C" int cuda_builtin_leapfrog(void *self, const float *q_in, const float *grad_in, float *q_out,
                                     float *momentum, float *grad_out, float *logp, const float *step_size,
                                     const float *inv_metric, int shared_metric, int n_steps, int64_t n, void *stream) {
  const builtin_params_t *p = static_cast<const builtin_params_t *>(self);
  if (!cuda_builtin_leapfrog_fits(self, p ? p->dim : 0) || n < 0 || n_steps < 1)
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_leapfrog: not a fused model (n=%lld, steps %d)", (long long)n, n_steps);
  if (n == 0) return DS_OK;
  if ((n * 32 + kThreads - 1) / kThreads > 0x7FFFFFFF)
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_leapfrog: n=%lld too large", (long long)n);
  builtin_params_t on_device;
  DS_TRY(params_on_device(p, &on_device));
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  switch (p->kind) {
    case BUILTIN_GAUSSIAN:
      return launch_leapfrog_kind<BUILTIN_GAUSSIAN>(on_device, q_in, grad_in, q_out, momentum, grad_out, logp, step_size,
                                                    inv_metric, shared_metric, n_steps, n, st);
    case BUILTIN_CORR_GAUSSIAN:
      return launch_leapfrog_kind<BUILTIN_CORR_GAUSSIAN>(on_device, q_in, grad_in, q_out, momentum, grad_out, logp,
                                                         step_size, inv_metric, shared_metric, n_steps, n, st);
    case BUILTIN_BANANA:
      return launch_leapfrog_kind<BUILTIN_BANANA>(on_device, q_in, grad_in, q_out, momentum, grad_out, logp, step_size,
                                                  inv_metric, shared_metric, n_steps, n, st);
    default:
      return launch_leapfrog_kind<BUILTIN_MIXTURE1D>(on_device, q_in, grad_in, q_out, momentum, grad_out, logp, step_size,
                                                     inv_metric, shared_metric, n_steps, n, st);
  }
}
