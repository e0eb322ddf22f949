/* svgd_kernels.cu: the SVGD kernels of the CUDA backend and their launchers.
 *
 * - svgd_pair_histogram_kernel: one pass of the exact median (a radix pass or the window
 *   pass, backend.h) over this rank's share of unordered pairs. Blocks own 256-row x
 *   128-column tiles of the (row, row + offset) band; each thread keeps an 8 x 8 block of
 *   squared distances in registers while coordinate chunks stream through shared memory.
 *   Counts go to a shared-memory histogram of 65536 16-bit counters (two per 32-bit word,
 *   128 KB), whose wrap-arounds are caught exactly and settled in the 64-bit global
 *   histogram, so any number of pairs per block is counted right. The window pass lays its
 *   fine and high bins out in those 65536 counters and counts keys below and above the
 *   window in per-thread registers, summed per block into two 64-bit counters.
 * - svgd_phi_kernel: phi for a block of 128 rows against streamed 64-column tiles, in the
 *   manner of FlashAttention: sum_j K_ij and sum_j K_ij v_j stay in registers, K_ij is formed
 *   tile by tile in shared memory and never leaves the chip. Columns can be split over
 *   blocks for small n; the split depends on n alone and the partial sums are added in a
 *   fixed order, so a row's result does not depend on how rows are spread over ranks.
 *   Up to 128 coordinates: beyond, sum_j K_ij v_j no longer fits in a block's registers.
 * - dim > 128, two GEMM-shaped kernels per slab of columns, both on the tensor cores in 3xTF32
 *   (mma_tf32.cuh: three TF32 products per multiply-add, float32 accuracy): 128 x 128 block
 *   tiles, eight warps of 64 x 32 in m16n8k8 tiles, operands streamed through shared memory in
 *   stages of 32 (cp.async, double buffered). svgd_wide_kernel_tile_kernel forms K for
 *   (rows x slab) with the distances by the GEMM identity |x_i|^2 + |x_j|^2 - 2 x_i . x_j (the
 *   median's exact selection still runs on the direct differences below), and writes K to a
 *   slab buffer (rows x slab, never n x n) with each tile's row sums;
 *   svgd_wide_accumulate_kernel adds K_slab @ v_slab to sum_kv in 128 x 128 output tiles. Each
 *   stage's products are summed on the tensor cores from zero, k8 steps ascending, and added
 *   to the output in float32 (round to nearest), stages ascending and continued across slabs:
 *   an output depends on its own row and column alone, in an order fixed by the data, so the
 *   result is bitwise the same for any slab width and any row range.
 *
 * Squared distances are summed exactly as the CPU backend does (d = x_ik - x_jk,
 * acc = fma(d, d, acc), k ascending from acc = 0) with __fsub_rn/__fmaf_rn, so the median is
 * bitwise the CPU's. Zero padding of coordinates adds fma(0, 0, acc) = acc and changes
 * nothing. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "backend.h"
#include "cuda_check.h"
#include "exactsum_core.h"
#include "mma_f16.cuh"
#include "mma_tf32.cuh"
#include "wgmma_f16.cuh"
#include "svgd_kernel_math.h"
#include "svgd_kernels.h"
#include "targets_builtin_cuda.h"

namespace {

svgd_cuda_tuning_t svgd_tuning = {0, 0, 0, 0, 0, 0};

/* ---------------------------------------------------------------- pair histogram */

/* 4-byte asynchronous copy global -> shared; zeros when !valid (nothing is read then). */
__device__ __forceinline__ void cp_async_f32(float *shared_dst, const float *global_src, bool valid) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

constexpr int HIST_THREADS = 512;
constexpr int HIST_BM = 256;                       /* rows per tile: 32 thread rows x 8 */
constexpr int HIST_BN = 128;                       /* columns per tile: 16 threads x (4 + 4) */
constexpr int HIST_ROW_STRIDE = HIST_BM + 4;
constexpr int HIST_COL_STRIDE = HIST_BN + 4;
constexpr int HIST_WORDS = SVGD_HIST_BINS / 2;     /* two 16-bit counters per word */
/* KC: coordinates per staged chunk (two chunks in flight). */
constexpr size_t hist_smem_bytes(int KC) {
  return sizeof(uint32_t) * HIST_WORDS + sizeof(float) * 2 * KC * (HIST_ROW_STRIDE + HIST_COL_STRIDE);
}
constexpr long long HIST_MAX_N = 1ll << 30;        /* int offsets inside the kernel */

struct pair_histogram_args {
  const float *x;
  int n, half, row_begin, row_end, dim, chunks, col_tiles, row_tiles;
  int col_step;             /* (HIST_THREADS / KC) mod n: hist_stage's step between columns */
  long long total_tiles;
  uint32_t select_bits;     /* PASS_LOW: the top 16 bits; PASS_WINDOW: the window start */
  unsigned long long *hist; /* SVGD_HIST_BINS, or SVGD_WINDOW_COUNTS for PASS_WINDOW */
  const float *squares;     /* GEMM: |y_j|^2 of the centred rows (svgd_kernel_math.h) */
  int band_lo;              /* a row's first column offset: 1 (median passes), half (PASS_COMPLEMENT) */
  float *dist;              /* GEMM: D kept for phi at [i - row_begin][j] (svgd_keeps_distances); NULL: not kept */
  long long dist_ld;
};

/* Not a median pass: the pairs (i, j) of local rows i whose j lies outside i's band (the pairs
 * other ranks' rows hold), D written to a.dist, nothing counted. */
constexpr int PASS_COMPLEMENT = 4;

/* A 16-bit counter wrapped (old was 0xFFFF in its half): settle 65536 counts in the global
 * histogram. A wrap of the low counter also carried one into the high counter of the word,
 * which is taken back globally; when that carry wrapped the high counter too (old was
 * 0xFFFFFFFF) the high counter's 65536 are settled as well. Every count has weight 2. */
__device__ __noinline__ void hist_settle_wrap(unsigned long long *hist, uint32_t bin, uint32_t old) {
  atomicAdd(&hist[bin], 2ull * 65536ull);
  if ((bin & 1u) == 0) {
    atomicAdd(&hist[bin + 1], ~1ull); /* -2 modulo 2^64 */
    if (old == 0xFFFFFFFFu) atomicAdd(&hist[bin + 1], 2ull * 65536ull);
  }
}

__device__ __forceinline__ void hist_count(uint32_t *hist_shared, unsigned long long *hist, uint32_t bin) {
  const uint32_t shift = (bin & 1u) << 4;
  const uint32_t old = atomicAdd(&hist_shared[bin >> 1], 1u << shift);
  if (((old >> shift) & 0xFFFFu) == 0xFFFFu) hist_settle_wrap(hist, bin, old);
}

/* Position in the block's walk over (tile, coordinate chunk); tiles run row-tile major. */
struct hist_cursor {
  int row_tile, col_tile, chunk;
  __device__ __forceinline__ void advance(const pair_histogram_args &a) {
    if (++chunk == a.chunks) {
      chunk = 0;
      if (++col_tile == a.col_tiles) {
        col_tile = 0;
        ++row_tile;
      }
    }
  }
  __device__ __forceinline__ int r0(const pair_histogram_args &a) const { return a.row_begin + row_tile * HIST_BM; }
  /* First virtual column: row + offset, not yet reduced modulo n. */
  __device__ __forceinline__ int c0(const pair_histogram_args &a) const {
    return r0(a) + a.band_lo + col_tile * HIST_BN;
  }
};

/* Stages one chunk: rows r0 + lead + L l and columns c0 + lead + L l (mod n), L = HIST_THREADS / KC,
 * coordinate chunk KC + kk, each thread one element per row, transposed to [k][row] in shared
 * memory. Addresses step by L rows (columns: by col_step = L mod n, wrapped once), so a copy
 * costs a few instructions; a tile whose rows are all in range skips the row checks. */
template <int KC>
__device__ __forceinline__ void hist_stage(const pair_histogram_args &a, const hist_cursor &at, int tid,
                                           float *rows_s, float *cols_s) {
  constexpr int HIST_LOAD_ROWS = HIST_THREADS / KC; /* rows (or columns) one sweep stages */
  const int kk = tid % KC, lead = tid / KC, k = at.chunk * KC + kk;
  const bool k_valid = k < a.dim;
  const int r0 = at.r0(a);
  const size_t step = (size_t)HIST_LOAD_ROWS * (size_t)a.dim;
  const float *row_src = a.x + ((size_t)(r0 + lead) * (size_t)a.dim + (size_t)k);
  float *row_dst = rows_s + kk * HIST_ROW_STRIDE + lead;
  if (k_valid && r0 + HIST_BM <= a.row_end) {
#pragma unroll
    for (int l = 0; l < HIST_BM / HIST_LOAD_ROWS; ++l)
      cp_async_f32(row_dst + l * HIST_LOAD_ROWS, row_src + l * step, true);
  } else {
#pragma unroll
    for (int l = 0; l < HIST_BM / HIST_LOAD_ROWS; ++l) {
      const bool valid = k_valid && r0 + lead + l * HIST_LOAD_ROWS < a.row_end;
      cp_async_f32(row_dst + l * HIST_LOAD_ROWS, valid ? row_src + l * step : a.x, valid);
    }
  }
  int column = at.c0(a) + lead;
  if (column >= a.n) column -= a.n;
  if (column >= a.n) column %= a.n;
  const float *x_k = a.x + (k_valid ? k : 0);
  float *col_dst = cols_s + kk * HIST_COL_STRIDE + lead;
#pragma unroll
  for (int l = 0; l < HIST_BN / HIST_LOAD_ROWS; ++l) {
    cp_async_f32(col_dst + l * HIST_LOAD_ROWS, x_k + (size_t)column * (size_t)a.dim, k_valid);
    column += a.col_step;
    if (column >= a.n) column -= a.n;
  }
}

/* PASS is a template argument, one kernel per pass: with the pass chosen at run time in the
 * epilogue, the radix passes measured 3-5% slower once the window pass was added (H200,
 * N = 32768 and 65536). GEMM: a.x holds the centred rows and the distances are the GEMM
 * identity's (svgd_kernel_math.h), one fma per pair and coordinate instead of two instructions. */
template <int KC, int PASS, bool GEMM, bool KEEP>
__global__ void __launch_bounds__(HIST_THREADS, 1)
svgd_pair_histogram_kernel(const pair_histogram_args a) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint32_t *hist_s = reinterpret_cast<uint32_t *>(smem_raw);
  float *rows_s = reinterpret_cast<float *>(hist_s + HIST_WORDS);     /* [2][KC][BM + 4] */
  float *cols_s = rows_s + 2 * KC * HIST_ROW_STRIDE;             /* [2][KC][BN + 4] */
  __shared__ unsigned long long outside_s[2]; /* PASS_WINDOW: keys below, above the window */
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;

  for (int w = tid; w < HIST_WORDS / 4; w += HIST_THREADS)
    reinterpret_cast<uint4 *>(hist_s)[w] = make_uint4(0u, 0u, 0u, 0u);
  if (tid < 2) outside_s[tid] = 0ull;

  const long long tile_begin = a.total_tiles * blockIdx.x / gridDim.x;
  const long long tile_end = a.total_tiles * (blockIdx.x + 1) / gridDim.x;
  const long long steps = (tile_end - tile_begin) * a.chunks;
  hist_cursor at;
  at.row_tile = (int)(tile_begin / a.col_tiles);
  at.col_tile = (int)(tile_begin - (long long)at.row_tile * a.col_tiles);
  at.chunk = 0;
  hist_cursor next = at;
  if (steps > 0) {
    hist_stage<KC>(a, next, tid, rows_s, cols_s);
    next.advance(a);
  }
  cp_async_wait_all();
  __syncthreads();

  const int span_min = (a.n % 2 == 0) ? a.half - 1 : a.half;
  float acc[8][8];
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.0f;
  unsigned long long below = 0ull, above = 0ull;

  for (long long step = 0; step < steps; ++step) {
    const int buffer = (int)(step & 1);
    if (step + 1 < steps) {
      hist_stage<KC>(a, next, tid, rows_s + (buffer ^ 1) * KC * HIST_ROW_STRIDE,
                     cols_s + (buffer ^ 1) * KC * HIST_COL_STRIDE);
      next.advance(a);
    }

    const float *rs = rows_s + buffer * KC * HIST_ROW_STRIDE + ty * 8;
    const float *cs = cols_s + buffer * KC * HIST_COL_STRIDE + tx * 4;
#pragma unroll
    for (int kk = 0; kk < KC; ++kk) {
      const float4 a0 = *reinterpret_cast<const float4 *>(rs + kk * HIST_ROW_STRIDE);
      const float4 a1 = *reinterpret_cast<const float4 *>(rs + kk * HIST_ROW_STRIDE + 4);
      const float4 b0 = *reinterpret_cast<const float4 *>(cs + kk * HIST_COL_STRIDE);
      const float4 b1 = *reinterpret_cast<const float4 *>(cs + kk * HIST_COL_STRIDE + 64);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          if (GEMM) {
            acc[r][c] = __fmaf_rn(av[r], bv[c], acc[r][c]);
          } else {
            const float diff = __fsub_rn(av[r], bv[c]);
            acc[r][c] = __fmaf_rn(diff, diff, acc[r][c]);
          }
        }
    }

    if (at.chunk == a.chunks - 1) { /* the tile's distances are complete */
      const int r0 = at.r0(a);
      const int first_offset = at.c0(a) - r0; /* offset of (row r0, column c0) */
      const bool full = PASS != PASS_COMPLEMENT && r0 + HIST_BM <= a.row_end && first_offset - (HIST_BM - 1) >= 1 &&
                        first_offset + HIST_BN - 1 <= span_min;
      int columns[8]; /* the thread's columns j, reduced modulo n */
      uint32_t tile_below = 0u, tile_above = 0u;
      if (GEMM) { /* acc holds dot products: D = |y_i|^2 + |y_j|^2 - 2 y_i . y_j */
        float column_squares[8];
        int column = at.c0(a) + tx * 4;
        if (column >= a.n) column -= a.n;
        if (column >= a.n) column %= a.n;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          int j = column + (c & 3) + (c >> 2) * 64;
          if (j >= a.n) j -= a.n;
          if (j >= a.n) j %= a.n;
          if (KEEP) columns[c] = j;
          column_squares[c] = a.squares[j];
        }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int i = r0 + ty * 8 + r;
          const float row_square = i < a.row_end ? a.squares[i] : 0.0f;
#pragma unroll
          for (int c = 0; c < 8; ++c) acc[r][c] = svgd_gemm_distance(row_square, column_squares[c], acc[r][c]);
        }
      }
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        const int i = r0 + ty * 8 + r;
        const int span = (a.n % 2 == 0 && i >= a.half) ? a.half - 1 : a.half;
        const bool row_valid = i < a.row_end;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          const int offset = first_offset + tx * 4 + (c & 3) + (c >> 2) * 64 - ty * 8 - r;
          const bool counted = PASS == PASS_COMPLEMENT ? row_valid && offset > span && offset < a.n
                                                       : full || (row_valid && offset >= 1 && offset <= span);
          const uint32_t bits = __float_as_uint(acc[r][c]);
          acc[r][c] = 0.0f;
          if (!counted) continue;
          if (KEEP) { /* D kept for phi, both ways round where both rows are local */
            const int j = columns[c];
            const float d = __uint_as_float(bits);
            a.dist[(long long)(i - a.row_begin) * a.dist_ld + j] = d;
            if (PASS != PASS_COMPLEMENT && j >= a.row_begin && j < a.row_end)
              a.dist[(long long)(j - a.row_begin) * a.dist_ld + i] = d;
          }
          if (PASS == PASS_COMPLEMENT) continue;
          if (PASS == SVGD_MEDIAN_PASS_HIGH) {
            hist_count(hist_s, a.hist, bits >> 16);
          } else if (PASS == SVGD_MEDIAN_PASS_LOW) {
            if ((bits >> 16) == a.select_bits) hist_count(hist_s, a.hist, bits & 0xFFFFu);
          } else {
            const uint32_t offset = bits - a.select_bits; /* wraps for keys below the window */
            if (offset < SVGD_WINDOW_FINE_BINS)
              hist_count(hist_s, a.hist, SVGD_WINDOW_FINE + offset);
            else if (bits < a.select_bits)
              ++tile_below;
            else
              ++tile_above;
          }
        }
      }
      if (PASS == SVGD_MEDIAN_PASS_WINDOW) {
        below += tile_below;
        above += tile_above;
      }
    }
    at.advance(a);
    cp_async_wait_all();
    __syncthreads();
  }

  for (int w = tid; w < HIST_WORDS; w += HIST_THREADS) {
    const uint32_t counts = hist_s[w];
    if (counts & 0xFFFFu) atomicAdd(&a.hist[2 * w], 2ull * (counts & 0xFFFFu));
    if (counts >> 16) atomicAdd(&a.hist[2 * w + 1], 2ull * (counts >> 16));
  }
  if (PASS == SVGD_MEDIAN_PASS_WINDOW) {
#pragma unroll
    for (int lane_offset = 16; lane_offset > 0; lane_offset >>= 1) {
      below += __shfl_down_sync(0xFFFFFFFFu, below, lane_offset);
      above += __shfl_down_sync(0xFFFFFFFFu, above, lane_offset);
    }
    if (tid % 32 == 0) {
      atomicAdd(&outside_s[0], below);
      atomicAdd(&outside_s[1], above);
    }
    __syncthreads();
    if (tid == 0) {
      if (outside_s[0]) atomicAdd(&a.hist[SVGD_WINDOW_BELOW], 2ull * outside_s[0]);
      if (outside_s[1]) atomicAdd(&a.hist[SVGD_WINDOW_ABOVE], 2ull * outside_s[1]);
    }
  }
}

/* ---------------------------------------------------------------- phi */

constexpr int PHI_THREADS = 256;
constexpr int PHI_BM = 128;                  /* rows per block: 16 thread rows x 8 */
constexpr int PHI_BN = 64;                   /* columns per tile: 16 thread columns x 4 */
constexpr int PHI_ROW_STRIDE = PHI_BM + 4;   /* rows_s [DP][BM + 4] */
constexpr int PHI_K_STRIDE = PHI_BM + 8;     /* kernel_s [BN][BM + 8]: conflict-free MMA reads */
constexpr int PHI_COL_STRIDE = PHI_BN + 4;   /* cols_s [DP][BN + 4] */
constexpr int PHI_MAX_DIM = 128;             /* larger dims take svgd_phi_generic_kernel */
constexpr int PHI_MAX_SPLITS = 8;

template <int DP>
constexpr size_t phi_smem_bytes() {
  return sizeof(float) * ((size_t)DP * PHI_ROW_STRIDE + (size_t)DP * PHI_COL_STRIDE +
                          (size_t)PHI_BN * (DP + 8) + (size_t)PHI_BN * PHI_K_STRIDE);
}

/* Column splits: a function of n alone (never of the local rows), so sums run in the same
 * order on any number of ranks. Small n gets more blocks to fill the device. */
int phi_splits(long long n) {
  const long long tiles = (n + PHI_BN - 1) / PHI_BN;
  long long splits = 32768 / (n > 0 ? n : 1);
  if (splits > PHI_MAX_SPLITS) splits = PHI_MAX_SPLITS;
  if (splits > tiles) splits = tiles;
  return splits < 1 ? 1 : (int)splits;
}

/* What a pass of the phi kernels weighs the columns' vectors with (backend.h's svgd_kernel_t):
 * rbf K = exp2(D exp2_scale) against v_j = s_j - x_j / h; for imq two passes, k = q^beta
 * against s_j and w = coef k / q against x_j, q = c2 + D / h, coef = -2 beta / h. The
 * warpgroup kernels (pair_weight_of) take q = c2 + D (1/h) (one fma), and for the default
 * beta = -1/2 k = rsqrt(q) and k / q = k^3 (a few ulp from the quotients and the root, which
 * took most of a pair's work: imq phi at d = 64, N = 65536 from 49.3 to 30.5 ms); other beta
 * powf and the correctly rounded reciprocal of q. The kernels that branch on the mode at run
 * time keep the quotients (pair_weight): the shorter form cost the rbf branch of the mma.sync
 * kernels registers (d = 16: 124 to 128, phi 4% slower). */
enum { PHI_WEIGHT_RBF = 0, PHI_WEIGHT_IMQ_VALUE = 1, PHI_WEIGHT_IMQ_WEIGHT = 2 };
struct pair_weight_t {
  int mode;
  float exp2_scale, h, c2, beta, coef;
};

/* Used by the sm_90a kernels only (empty in the compute_90 pass). */
[[maybe_unused]] __device__ __forceinline__ float imq_pair_weight(const pair_weight_t &w, float dist, bool value) {
  const float q = __fmaf_rn(dist, __frcp_rn(w.h), w.c2); /* 1/h: loop-invariant, hoisted */
  if (w.beta == -0.5f) {
    const float k = rsqrtf(q);
    return value ? k : __fmul_rn(w.coef, __fmul_rn(__fmul_rn(k, k), k));
  }
  const float k = powf(q, w.beta);
  return value ? k : __fmul_rn(w.coef, __fmul_rn(k, __frcp_rn(q)));
}

__device__ __forceinline__ float pair_weight(const pair_weight_t &w, float dist) {
  if (w.mode == PHI_WEIGHT_RBF) return exp2f(__fmul_rn(dist, w.exp2_scale));
  const float q = w.c2 + dist / w.h;
  const float k = svgd_imq_power(q, w.beta);
  return w.mode == PHI_WEIGHT_IMQ_VALUE ? k : w.coef * (k / q);
}

/* pair_weight for a mode known at compile time: no branch on the mode per pair. */
template <int MODE>
__device__ __forceinline__ float pair_weight_of(const pair_weight_t &w, float dist) {
  if (MODE == PHI_WEIGHT_RBF) return exp2f(__fmul_rn(dist, w.exp2_scale));
  return imq_pair_weight(w, dist, MODE == PHI_WEIGHT_IMQ_VALUE);
}

struct phi_args {
  const float *x, *score;
  const float *v;       /* [n, dim] the columns' vectors: v_j = s_j - x_j / h (rbf), s_j or x_j (imq) */
  long long n, row_begin, row_end;
  int dim, splits;
  float h, exp2_scale;  /* K = exp2(D * exp2_scale), exp2_scale = -log2(e) / (2h) */
  pair_weight_t weight;
  float *partial_sums;  /* [splits][rows][dim] sum_{j != i} K_ij v_j */
  float *partial_k;     /* [splits][rows] sum_{j != i} K_ij */
};

__global__ void svgd_v_kernel(const float *x, const float *score, long long count, float h, float *v) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x)
    v[e] = __fsub_rn(score[e], __fdiv_rn(x[e], h));
}

/* Per 64-column tile: x of the tile is staged (cp.async) during phase 2 of the previous tile,
 * v of the tile during its phase 1, so each copy hides behind a whole phase and a block
 * needs one buffer of each. The diagonal j = i is left out of both sums, as the CPU backend
 * does: its term is s_i exactly, added at the end, where through v it would cancel x_i / h
 * against itself.
 * Each thread holds an 8 x 4 block of distances in phase 1 and 8 rows x DP/16 coordinates of
 * sum_j K_ij v_j in phase 2. (A 3xTF32 tensor-core phase 2 was tried: slower here, and its
 * accumulation drifted to 4e-4 relative at n = 65536.) */
template <int DP>
__global__ void __launch_bounds__(PHI_THREADS, DP <= 64 ? 2 : 1)
svgd_phi_kernel(const phi_args a) {
  constexpr int DPT = DP / 16;                /* output coordinates per thread */
  constexpr int V_STRIDE = DP + 8;
  constexpr int LOAD_COLUMNS = PHI_THREADS / DP; /* columns one sweep of the block stages */
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float *rows_s = reinterpret_cast<float *>(smem_raw);       /* [DP][BM + 4] x of the rows */
  float *cols_s = rows_s + DP * PHI_ROW_STRIDE;              /* [DP][BN + 4] x of the columns */
  float *v_s = cols_s + DP * PHI_COL_STRIDE;                 /* [BN][DP + 8] v of the columns */
  float *kernel_s = v_s + PHI_BN * V_STRIDE;                 /* [BN][BM + 8] K of the tile */
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const long long r0 = a.row_begin + (long long)blockIdx.x * PHI_BM;
  const int split = blockIdx.y;
  const long long tiles = (a.n + PHI_BN - 1) / PHI_BN;
  const long long tile_begin = tiles * split / a.splits, tile_end = tiles * (split + 1) / a.splits;
  const int k_load = tid % DP, lead = tid / DP;  /* this thread stages coordinate k_load */
  const bool k_valid = k_load < a.dim;

  for (int f = tid; f < PHI_BM * DP; f += PHI_THREADS) {
    const int rr = f / DP, k = f % DP;
    const long long row = r0 + rr;
    const bool valid = row < a.row_end && k < a.dim;
    cp_async_f32(rows_s + k * PHI_ROW_STRIDE + rr, valid ? a.x + row * a.dim + k : a.x, valid);
  }
  auto stage_x = [&](long long tile) {
#pragma unroll
    for (int l = 0; l < PHI_BN / LOAD_COLUMNS; ++l) {
      const int cc = lead + l * LOAD_COLUMNS;
      const long long column = tile * PHI_BN + cc;
      const bool valid = k_valid && column < a.n;
      cp_async_f32(cols_s + k_load * PHI_COL_STRIDE + cc, valid ? a.x + column * a.dim + k_load : a.x, valid);
    }
  };
  auto stage_v = [&](long long tile) {
#pragma unroll
    for (int l = 0; l < PHI_BN / LOAD_COLUMNS; ++l) {
      const int cc = lead + l * LOAD_COLUMNS;
      const long long column = tile * PHI_BN + cc;
      const bool valid = k_valid && column < a.n;
      cp_async_f32(v_s + cc * V_STRIDE + k_load, valid ? a.v + column * a.dim + k_load : a.v, valid);
    }
  };

  /* acc[r * DPT + e]: sum_kv of row ty*8+r, coordinate tx*DPT+e. */
  constexpr int ACC = 8 * DPT;
  float acc[ACC];
  float sum_k[8];
#pragma unroll
  for (int e = 0; e < ACC; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int r = 0; r < 8; ++r) sum_k[r] = 0.0f;

  if (tile_begin < tile_end) stage_x(tile_begin);
  cp_async_wait_all();
  __syncthreads();

  for (long long tile = tile_begin; tile < tile_end; ++tile) {
    stage_v(tile); /* lands during phase 1 */

    /* Phase 1: an 8 x 4 block of distances, then K into shared memory. */
    float dist[8][4];
#pragma unroll
    for (int r = 0; r < 8; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) dist[r][c] = 0.0f;
#pragma unroll 8
    for (int k = 0; k < DP; ++k) {
      const float4 a0 = *reinterpret_cast<const float4 *>(rows_s + k * PHI_ROW_STRIDE + ty * 8);
      const float4 a1 = *reinterpret_cast<const float4 *>(rows_s + k * PHI_ROW_STRIDE + ty * 8 + 4);
      const float4 b = *reinterpret_cast<const float4 *>(cols_s + k * PHI_COL_STRIDE + tx * 4);
      const float av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
      const float bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float diff = __fsub_rn(av[r], bv[c]);
          dist[r][c] = __fmaf_rn(diff, diff, dist[r][c]);
        }
    }
    /* Only tiles that reach past n or cross the diagonal need per-pair masks. */
    const long long c0 = tile * PHI_BN;
    const bool masked = c0 + PHI_BN > a.n || (c0 < r0 + PHI_BM && r0 < c0 + PHI_BN);
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const long long column = c0 + tx * 4 + c;
      float kv[8];
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        kv[r] = pair_weight(a.weight, dist[r][c]);
        if (masked && (column >= a.n || column == r0 + ty * 8 + r)) kv[r] = 0.0f;
        sum_k[r] += kv[r];
      }
      float *dst = kernel_s + (tx * 4 + c) * PHI_K_STRIDE + ty * 8;
      *reinterpret_cast<float4 *>(dst) = make_float4(kv[0], kv[1], kv[2], kv[3]);
      *reinterpret_cast<float4 *>(dst + 4) = make_float4(kv[4], kv[5], kv[6], kv[7]);
    }
    cp_async_wait_all();
    __syncthreads();

    if (tile + 1 < tile_end) stage_x(tile + 1); /* lands during phase 2 */

    {
      /* Phase 2: sum_kv += K[rows, tile] @ v[tile, coordinates]. */
#pragma unroll 4
      for (int j = 0; j < PHI_BN; ++j) {
        const float4 k0 = *reinterpret_cast<const float4 *>(kernel_s + j * PHI_K_STRIDE + ty * 8);
        const float4 k1 = *reinterpret_cast<const float4 *>(kernel_s + j * PHI_K_STRIDE + ty * 8 + 4);
        const float kv[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
        float vv[DPT];
        const float *v_row = v_s + j * V_STRIDE + tx * DPT;
        if constexpr (DPT % 4 == 0) {
#pragma unroll
          for (int e = 0; e < DPT; e += 4) {
            const float4 v4 = *reinterpret_cast<const float4 *>(v_row + e);
            vv[e] = v4.x; vv[e + 1] = v4.y; vv[e + 2] = v4.z; vv[e + 3] = v4.w;
          }
        } else if constexpr (DPT == 2) {
          const float2 v2 = *reinterpret_cast<const float2 *>(v_row);
          vv[0] = v2.x; vv[1] = v2.y;
        } else {
#pragma unroll
          for (int e = 0; e < DPT; ++e) vv[e] = v_row[e];
        }
#pragma unroll
        for (int r = 0; r < 8; ++r)
#pragma unroll
          for (int e = 0; e < DPT; ++e) acc[r * DPT + e] = __fmaf_rn(kv[r], vv[e], acc[r * DPT + e]);
      }
    }
    cp_async_wait_all();
    __syncthreads();
  }

  /* sum_k: each thread holds its columns' share; add the 16 shares of a row in a fixed tree. */
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int width = 8; width >= 1; width /= 2) sum_k[r] += __shfl_xor_sync(0xffffffffu, sum_k[r], width);

  const long long rows = a.row_end - a.row_begin;
  if (tx == 0) {
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const long long row = r0 + ty * 8 + r;
      if (row < a.row_end) a.partial_k[(long long)split * rows + (row - a.row_begin)] = sum_k[r];
    }
  }
  {
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const long long row = r0 + ty * 8 + r;
      if (row >= a.row_end) continue;
      float *out = a.partial_sums + ((long long)split * rows + (row - a.row_begin)) * a.dim;
#pragma unroll
      for (int e = 0; e < DPT; ++e) {
        const int k = tx * DPT + e;
        if (k < a.dim) out[k] = acc[r * DPT + e];
      }
    }
  }
}

/* dim > PHI_MAX_DIM: see the file's opening comment. */
constexpr int WIDE_THREADS = 256;  /* 8 warps: 2 (rows) x 4 (columns or coordinates) of 64 x 32 */
constexpr int WIDE_BM = 128;       /* rows per block */
constexpr int WIDE_BN = 128;       /* kernel columns per tile */
constexpr int WIDE_BC = 128;       /* output coordinates per block */
constexpr int WIDE_KC = 32;        /* coordinates (kernel tiles) or columns (accumulation) per stage */
constexpr int WIDE_WM = 64;        /* a warp's rows: 4 tiles of m16 */
constexpr int WIDE_WN = 32;        /* a warp's columns or coordinates: 4 tiles of n8 */
constexpr int WIDE_MT = WIDE_WM / 16, WIDE_NT = WIDE_WN / 8;
constexpr int WIDE_COL_WARPS = WIDE_BN / WIDE_WN;
constexpr int WIDE_K_STRIDE = WIDE_KC + 8;  /* [row][k] arrays: 40 = 8 mod 32 */
constexpr int WIDE_V_STRIDE = WIDE_BC + 4;  /* [k][coordinate] array: 132 = 4 mod 32 */
constexpr long long WIDE_SLAB_FLOATS = 1ll << 27;  /* the K slab's budget: 512 MB */

struct wide_args {
  const float *x, *v;
  const float *squares;  /* [n] |x_j|^2 */
  long long n, row_begin, row_end;
  int dim;
  float exp2_scale;
  pair_weight_t weight;
  long long slab0;     /* first column of the slab */
  int slab_cols;       /* a multiple of WIDE_BN */
  float *k_slab;       /* [rows][slab_cols] */
  float *k_tile_sums;  /* [rows][slab_cols / WIDE_BN] */
  float *sum_kv;       /* [rows][dim] */
  float *sum_k;        /* [rows] */
};

static_assert(WIDE_BN == WIDE_BC && WIDE_BM == WIDE_BN, "both wide kernels share one 128 x 128 block tile");
static_assert(WIDE_BM == PHI_BM, "phi_pass takes PHI_BM row blocks");
static_assert(WIDE_BM == 2 * WIDE_WM && WIDE_BN == WIDE_COL_WARPS * WIDE_WN &&
              WIDE_THREADS == 32 * 2 * WIDE_COL_WARPS, "8 warps of 64 x 32");
static_assert(WIDE_BN % WIDE_KC == 0 && WIDE_KC % 8 == 0, "stages of whole k8 steps, within a column tile");

/* Shared memory of the kernel tiles: x of the rows and of the columns, [row][coordinate], and
 * each column warp's part of the tile's row sums. */
struct wide_tile_shared {
  float rows[2][WIDE_BM][WIDE_K_STRIDE];
  float cols[2][WIDE_BN][WIDE_K_STRIDE];
  float row_sums[WIDE_COL_WARPS][WIDE_BM];
};
/* Shared memory of the accumulation: K of the stage [row][column], v of the stage
 * [column][coordinate]. */
struct wide_accumulate_shared {
  float k[2][WIDE_BM][WIDE_K_STRIDE];
  float v[2][WIDE_KC][WIDE_V_STRIDE];
};

/* 16-byte asynchronous copy global -> shared (both 16-byte aligned); zeros when !valid. */
__device__ __forceinline__ void cp_async_f32x4(float *shared_dst, const float *global_src, bool valid) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 16 : 0));
}

/* Fragments of one k8 step at k0 (mma_tf32.cuh), slot s holding k0 + 2s for s < 4 and
 * k0 + 2 (s - 4) + 1 for s >= 4, in A and B alike: the step still sums over k0 .. k0 + 7, and a
 * thread's two k of a row are adjacent, one 8-byte load.
 * A, rows m0 .. m0 + 15 of a [row][k] array: word (m0 + g) 40 + k0 + 2t, banks 8g + 2t (+ 1)
 * mod 32, distinct within each half warp. */
__device__ __forceinline__ tf32_frag_a wide_frag_a(const float (*s)[WIDE_K_STRIDE], int m0, int k0, int g, int t) {
  const float2 top = *reinterpret_cast<const float2 *>(&s[m0 + g][k0 + 2 * t]);
  const float2 bottom = *reinterpret_cast<const float2 *>(&s[m0 + g + 8][k0 + 2 * t]);
  return tf32_frag_a_of(top.x, bottom.x, top.y, bottom.y);
}
/* B (k x n), columns n0 .. n0 + 7, from a [n][k] array: as A, banks 8g + 2t (+ 1). */
__device__ __forceinline__ tf32_frag_b wide_frag_b_nk(const float (*s)[WIDE_K_STRIDE], int n0, int k0, int g, int t) {
  const float2 pair = *reinterpret_cast<const float2 *>(&s[n0 + g][k0 + 2 * t]);
  return tf32_frag_b_of(pair.x, pair.y);
}
/* B from a [k][n] array: words (k0 + 2t) 132 + n0 + g and 132 further, banks 8t + g (+ 4) mod 32,
 * distinct over the warp. */
__device__ __forceinline__ tf32_frag_b wide_frag_b_kn(const float (*s)[WIDE_V_STRIDE], int n0, int k0, int g, int t) {
  return tf32_frag_b_of(s[k0 + 2 * t][n0 + g], s[k0 + 2 * t + 1][n0 + g]);
}

/* One stage of both wide kernels on a warp's 64 x 32 tile: part = A B over the stage's k,
 * k8 steps ascending from part = 0; then acc += part, rounded to nearest. The tensor cores'
 * own accumulation is not float32's round to nearest and drifts over long sums (see
 * mma_tf32.cuh); summed apart by stage it runs over 12 mma at most, the sums over stages
 * are float32's. */
template <typename load_b_t>
__device__ __forceinline__ void wide_stage_mma(const float (*a_s)[WIDE_K_STRIDE], int m0, int g, int t,
                                               const load_b_t &load_b, float acc[WIDE_MT][WIDE_NT][4]) {
  float part[WIDE_MT][WIDE_NT][4];
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[i][j][e] = 0.0f;
#pragma unroll
  for (int k0 = 0; k0 < WIDE_KC; k0 += 8) {
    tf32_frag_b b[WIDE_NT];
#pragma unroll
    for (int j = 0; j < WIDE_NT; ++j) b[j] = load_b(j, k0);
#pragma unroll
    for (int i = 0; i < WIDE_MT; ++i) {
      const tf32_frag_a a = wide_frag_a(a_s, m0 + 16 * i, k0, g, t);
#pragma unroll
      for (int j = 0; j < WIDE_NT; ++j) mma_3xtf32(part[i][j], a, b[j]);
    }
  }
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = __fadd_rn(acc[i][j][e], part[i][j][e]);
}

/* |x_j|^2 for every particle: fma chain, k ascending. A warp takes a row: its lanes read 256
 * coordinates at a time, coalesced, and every lane runs the chain over them through shuffles
 * (zeros past dim add nothing). */
constexpr int SQUARES_THREADS = 256;

__global__ void __launch_bounds__(SQUARES_THREADS) svgd_squares_kernel(const float *x, long long n, int dim,
                                                                       float *squares) {
  const int lane = threadIdx.x % 32;
  const long long warps = (long long)gridDim.x * (SQUARES_THREADS / 32);
  for (long long j = (long long)blockIdx.x * (SQUARES_THREADS / 32) + threadIdx.x / 32; j < n; j += warps) {
    const float *x_j = x + j * dim;
    float sum = 0.0f;
    for (int k0 = 0; k0 < dim; k0 += 256) {
      float v[8];
#pragma unroll
      for (int c = 0; c < 8; ++c) {
        const int k = k0 + 32 * c + lane;
        v[c] = k < dim ? x_j[k] : 0.0f;
      }
#pragma unroll
      for (int c = 0; c < 8; ++c)
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const float value = __shfl_sync(0xFFFFFFFFu, v[c], i);
          sum = __fmaf_rn(value, value, sum);
        }
    }
    if (lane == 0) squares[j] = sum;
  }
}

int squares_grid(long long n) {
  const long long blocks = (n + SQUARES_THREADS / 32 - 1) / (SQUARES_THREADS / 32);
  return blocks > 65536 ? 65536 : blocks < 1 ? 1 : (int)blocks;
}

/* grid (row blocks, column tiles of the slab), WIDE_THREADS, sizeof(wide_tile_shared) dynamic.
 * D = max(|x_i|^2 + |x_j|^2 - 2 x_i . x_j, 0), the dot product in 3xTF32 by stages of WIDE_KC
 * coordinates ascending (wide_stage_mma), K = exp2(D exp2_scale), zero on the diagonal and past
 * n; each tile's row sums in a fixed order. VEC4: dim % 4 == 0 and x on 16 bytes, copies of 16
 * bytes. */
template <bool VEC4>
__global__ void __launch_bounds__(WIDE_THREADS, 1) svgd_wide_kernel_tile_kernel(const wide_args a) {
  extern __shared__ float4 wide_shared_raw[];
  wide_tile_shared &sm = *reinterpret_cast<wide_tile_shared *>(wide_shared_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int wm = WIDE_WM * (warp / WIDE_COL_WARPS), col_warp = warp % WIDE_COL_WARPS, wn = WIDE_WN * col_warp;
  const long long r0 = a.row_begin + (long long)blockIdx.x * WIDE_BM;
  const long long c0 = a.slab0 + (long long)blockIdx.y * WIDE_BN;
  const int chunks = (a.dim + WIDE_KC - 1) / WIDE_KC;
  /* Row (and column) rr, coordinates k .. k + 3 (VEC4) or k, of the chunk; zeros past the
   * rows, n and dim. */
  auto stage = [&](int chunk, int buffer) {
    constexpr int WIDTH = VEC4 ? 4 : 1;
    for (int f = tid; f < WIDE_BM * WIDE_KC / WIDTH; f += WIDE_THREADS) {
      const int rr = f / (WIDE_KC / WIDTH), kk = WIDTH * (f % (WIDE_KC / WIDTH)), k = chunk * WIDE_KC + kk;
      const long long row = r0 + rr, column = c0 + rr;
      const bool row_valid = row < a.row_end && k < a.dim, column_valid = column < a.n && k < a.dim;
      const float *row_src = row_valid ? a.x + row * a.dim + k : a.x;
      const float *column_src = column_valid ? a.x + column * a.dim + k : a.x;
      if (VEC4) {
        cp_async_f32x4(&sm.rows[buffer][rr][kk], row_src, row_valid);
        cp_async_f32x4(&sm.cols[buffer][rr][kk], column_src, column_valid);
      } else {
        cp_async_f32(&sm.rows[buffer][rr][kk], row_src, row_valid);
        cp_async_f32(&sm.cols[buffer][rr][kk], column_src, column_valid);
      }
    }
  };
  float dot[WIDE_MT][WIDE_NT][4];
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dot[i][j][e] = 0.0f;
  stage(0, 0);
  cp_async_wait_all();
  __syncthreads();
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int buffer = chunk & 1;
    if (chunk + 1 < chunks) stage(chunk + 1, buffer ^ 1);
    const float(*cols_s)[WIDE_K_STRIDE] = sm.cols[buffer];
    wide_stage_mma(sm.rows[buffer], wm, g, t,
                   [&](int j, int k0) { return wide_frag_b_nk(cols_s, wn + 8 * j, k0, g, t); }, dot);
    cp_async_wait_all();
    __syncthreads();
  }
  /* The thread's elements: rows wm + 16 i + g + 8 h, columns wn + 8 j + 2 t + e, in dot[i][j][2 h + e]. */
  float row_squares[WIDE_MT][2], column_squares[WIDE_NT][2];
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const long long row = r0 + wm + 16 * i + g + 8 * h;
      row_squares[i][h] = row < a.row_end ? a.squares[row] : 0.0f;
    }
#pragma unroll
  for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const long long column = c0 + wn + 8 * j + 2 * t + e;
      column_squares[j][e] = column < a.n ? a.squares[column] : 0.0f;
    }
  const int tiles_in_slab = a.slab_cols / WIDE_BN;
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int rr = wm + 16 * i + g + 8 * h;
      const long long row = r0 + rr;
      float kv[WIDE_NT][2];
#pragma unroll
      for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const long long column = c0 + wn + 8 * j + 2 * t + e;
          const float dist = svgd_gemm_distance(row_squares[i][h], column_squares[j][e], dot[i][j][2 * h + e]);
          kv[j][e] = pair_weight(a.weight, dist);
          if (column >= a.n || column == row) kv[j][e] = 0.0f;
        }
      /* The row's sum over the warp's 32 columns: the thread's 8 in order, then across t. */
      float part = 0.0f;
#pragma unroll
      for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) part = __fadd_rn(part, kv[j][e]);
      part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, 1));
      part = __fadd_rn(part, __shfl_xor_sync(0xffffffffu, part, 2));
      if (t == 0) sm.row_sums[col_warp][rr] = part;
      if (row < a.row_end) {
        float *k_row = a.k_slab + (row - a.row_begin) * a.slab_cols + (c0 - a.slab0) + wn + 2 * t;
#pragma unroll
        for (int j = 0; j < WIDE_NT; ++j)
          *reinterpret_cast<float2 *>(k_row + 8 * j) = make_float2(kv[j][0], kv[j][1]);
      }
    }
  __syncthreads();
  if (tid < WIDE_BM && r0 + tid < a.row_end) {
    float tile_sum = sm.row_sums[0][tid];
#pragma unroll
    for (int w = 1; w < WIDE_COL_WARPS; ++w) tile_sum = __fadd_rn(tile_sum, sm.row_sums[w][tid]);
    a.k_tile_sums[(r0 + tid - a.row_begin) * tiles_in_slab + blockIdx.y] = tile_sum;
  }
}

/* grid (row blocks, coordinate blocks), WIDE_THREADS, sizeof(wide_accumulate_shared) dynamic:
 * sum_kv[rows, coordinates] += K_slab @ v[slab, coordinates] in 3xTF32 by stages of WIDE_KC
 * columns ascending (wide_stage_mma), each output continued from the last slab (first_slab:
 * from 0). Blocks of the first coordinate block also add the slab's tile sums to sum_k, in tile
 * order. VEC4: dim % 4 == 0 and v on 16 bytes, 16-byte copies of v (K's rows are always). */
template <bool VEC4>
__global__ void __launch_bounds__(WIDE_THREADS, 1) svgd_wide_accumulate_kernel(const wide_args a, int first_slab) {
  extern __shared__ float4 wide_shared_raw[];
  wide_accumulate_shared &sm = *reinterpret_cast<wide_accumulate_shared *>(wide_shared_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int wm = WIDE_WM * (warp / WIDE_COL_WARPS), wn = WIDE_WN * (warp % WIDE_COL_WARPS);
  const long long rows = a.row_end - a.row_begin;
  const long long local0 = (long long)blockIdx.x * WIDE_BM;
  const int coord0 = blockIdx.y * WIDE_BC;
  const int stages = a.slab_cols / WIDE_KC;
  /* K: row rr, columns jj .. jj + 3 of the stage. v: column jj, coordinates cc .. cc + 3 (VEC4)
   * or cc. Zeros past the rows, n and dim. */
  auto stage = [&](int step, int buffer) {
    const int j0 = step * WIDE_KC;
    for (int f = tid; f < WIDE_BM * WIDE_KC / 4; f += WIDE_THREADS) {
      const int rr = f / (WIDE_KC / 4), jj = 4 * (f % (WIDE_KC / 4));
      const long long local = local0 + rr;
      const bool valid = local < rows;
      cp_async_f32x4(&sm.k[buffer][rr][jj], valid ? a.k_slab + local * a.slab_cols + j0 + jj : a.k_slab, valid);
    }
    constexpr int WIDTH = VEC4 ? 4 : 1;
    for (int f = tid; f < WIDE_KC * WIDE_BC / WIDTH; f += WIDE_THREADS) {
      const int jj = f / (WIDE_BC / WIDTH), cc = WIDTH * (f % (WIDE_BC / WIDTH));
      const long long column = a.slab0 + j0 + jj;
      const bool valid = column < a.n && coord0 + cc < a.dim;
      const float *src = valid ? a.v + column * a.dim + coord0 + cc : a.v;
      if (VEC4)
        cp_async_f32x4(&sm.v[buffer][jj][cc], src, valid);
      else
        cp_async_f32(&sm.v[buffer][jj][cc], src, valid);
    }
  };
  /* The thread's outputs: rows wm + 16 i + g + 8 h, coordinates wn + 8 j + 2 t + e, in
   * acc[i][j][2 h + e]. */
  float acc[WIDE_MT][WIDE_NT][4];
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long local = local0 + wm + 16 * i + g + 8 * (e / 2);
        const int k = coord0 + wn + 8 * j + 2 * t + e % 2;
        acc[i][j][e] = (!first_slab && local < rows && k < a.dim) ? a.sum_kv[local * a.dim + k] : 0.0f;
      }
  stage(0, 0);
  cp_async_wait_all();
  __syncthreads();
  for (int step = 0; step < stages; ++step) {
    const int buffer = step & 1;
    if (step + 1 < stages) stage(step + 1, buffer ^ 1);
    const float(*v_s)[WIDE_V_STRIDE] = sm.v[buffer];
    wide_stage_mma(sm.k[buffer], wm, g, t,
                   [&](int j, int k0) { return wide_frag_b_kn(v_s, wn + 8 * j, k0, g, t); }, acc);
    cp_async_wait_all();
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const long long local = local0 + wm + 16 * i + g + 8 * (e / 2);
        const int k = coord0 + wn + 8 * j + 2 * t + e % 2;
        if (local < rows && k < a.dim) a.sum_kv[local * a.dim + k] = acc[i][j][e];
      }
  if (blockIdx.y == 0 && tid < WIDE_BM && local0 + tid < rows) {
    const long long local = local0 + tid;
    const int tiles_in_slab = a.slab_cols / WIDE_BN;
    float sum = first_slab ? 0.0f : a.sum_k[local];
    for (int tile = 0; tile < tiles_in_slab; ++tile) sum = __fadd_rn(sum, a.k_tile_sums[local * tiles_in_slab + tile]);
    a.sum_k[local] = sum;
  }
}

/* The slab's K and its tile row sums from distances the median pass kept (svgd_keeps_distances):
 * what svgd_wide_kernel_tile_kernel writes, with D_ij the median's own. A warp takes a row's
 * 128-column tile, a lane 4 adjacent columns; the tile's sum adds the lanes' sums in a fixed
 * tree. grid_for(rows * tiles, 8 warps). */
__global__ void svgd_wide_kernel_from_distances_kernel(const wide_args a, const float *dist, long long dist_ld) {
  const int lane = threadIdx.x % 32;
  const long long rows = a.row_end - a.row_begin;
  const int tiles = a.slab_cols / WIDE_BN;
  for (long long item = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; item < rows * tiles;
       item += (long long)gridDim.x * blockDim.x / 32) {
    const long long local = item / tiles, row = a.row_begin + local;
    const int tile = (int)(item - local * tiles);
    const long long column0 = a.slab0 + (long long)tile * WIDE_BN + 4 * lane;
    const float4 d = *reinterpret_cast<const float4 *>(dist + local * dist_ld + column0);
    const float dv[4] = {d.x, d.y, d.z, d.w};
    float kv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const long long column = column0 + e;
      kv[e] = (column >= a.n || column == row) ? 0.0f : pair_weight(a.weight, dv[e]);
    }
    *reinterpret_cast<float4 *>(a.k_slab + local * a.slab_cols + (long long)tile * WIDE_BN + 4 * lane) =
        make_float4(kv[0], kv[1], kv[2], kv[3]);
    float part = __fadd_rn(__fadd_rn(__fadd_rn(kv[0], kv[1]), kv[2]), kv[3]);
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) part = __fadd_rn(part, __shfl_xor_sync(0xFFFFFFFFu, part, offset));
    if (lane == 0) a.k_tile_sums[local * tiles + tile] = part;
  }
}

/* Columns per slab: the tuning's, else as many as WIDE_SLAB_FLOATS holds for these rows. */
long long wide_slab_columns(long long n, long long rows) {
  const long long all = (n + WIDE_BN - 1) / WIDE_BN * WIDE_BN;
  long long slab = svgd_tuning.wide_slab > 0 ? svgd_tuning.wide_slab : WIDE_SLAB_FLOATS / (rows > 0 ? rows : 1);
  slab = slab / WIDE_BN * WIDE_BN;
  if (slab < WIDE_BN) slab = WIDE_BN;
  if (slab > 65535ll * WIDE_BN) slab = 65535ll * WIDE_BN;
  return slab < all ? slab : all;
}

/* phi_i = (s_i + sum over splits of sum_kv + x_i * (sum over splits of sum_k) / h) / n, the
 * splits added in order, the terms in the order of the CPU backend. */
__global__ void svgd_phi_finish_kernel(const phi_args a, float *phi) {
  const long long rows = a.row_end - a.row_begin;
  const long long count = rows * a.dim;
  const float inv_n = 1.0f / (float)a.n;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long local = e / a.dim;
    float sum_kv = a.partial_sums[e], sum_k = a.partial_k[local];
    for (int s = 1; s < a.splits; ++s) {
      sum_kv = __fadd_rn(sum_kv, a.partial_sums[(long long)s * count + e]);
      sum_k = __fadd_rn(sum_k, a.partial_k[(long long)s * rows + local]);
    }
    const float x_ik = a.x[a.row_begin * a.dim + e], s_ik = a.score[a.row_begin * a.dim + e];
    phi[e] = __fmul_rn(__fadd_rn(__fadd_rn(s_ik, sum_kv), __fdiv_rn(__fmul_rn(x_ik, sum_k), a.h)), inv_n);
  }
}

/* imq: phi_i = (c2^beta s_i + sum_ks - sum_wx + x_i sum_w) / n, each sum over splits in order;
 * value holds sum_ks and sum_k (unused), weight sum_wx and sum_w. */
__global__ void svgd_phi_finish_imq_kernel(const phi_args value, const phi_args weight, float diagonal, float *phi) {
  const long long rows = value.row_end - value.row_begin;
  const long long count = rows * value.dim;
  const float inv_n = 1.0f / (float)value.n;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const long long local = e / value.dim;
    float sum_ks = value.partial_sums[e], sum_wx = weight.partial_sums[e], sum_w = weight.partial_k[local];
    for (int s = 1; s < value.splits; ++s) {
      sum_ks = __fadd_rn(sum_ks, value.partial_sums[(long long)s * count + e]);
      sum_wx = __fadd_rn(sum_wx, weight.partial_sums[(long long)s * count + e]);
      sum_w = __fadd_rn(sum_w, weight.partial_k[(long long)s * rows + local]);
    }
    const float x_ik = value.x[value.row_begin * value.dim + e], s_ik = value.score[value.row_begin * value.dim + e];
    phi[e] = __fmul_rn(__fadd_rn(__fadd_rn(__fmul_rn(diagonal, s_ik), __fsub_rn(sum_ks, sum_wx)), __fmul_rn(x_ik, sum_w)),
                       inv_n);
  }
}

/* ---------------------------------------------------------------- tensor-core pair tiles (dim <= 64) */

/* Up to FLASH_MAX_DIM coordinates every pair's distance is taken on the fp16 tensor cores
 * (mma_f16.cuh), the same way in the median's passes and in phi, so the median is exact for
 * the distances phi uses:
 *   y = x - x_0 (centred rows), |y_j|^2 an fma chain (svgd_squares_kernel); y times 2^sy, one
 *   power of two for all coordinates (its largest magnitude into [2^14, 2^15)), split into
 *   fp16 hi + lo and zero-padded to DP coordinates;
 *   dot_ij = (hh + (lh + hl)) 2^-2sy, three m16n8k16 chains from zero over the k16 steps
 *   ascending: hh of hi_i hi_j, lh of lo_i hi_j, hl of hi_i lo_j. Position p of each 16 holds
 *   coordinate flash_slot(p), in rows and columns alike, so every product is the same value
 *   whichever particle is the row: hh_ij = hh_ji and lh_ij = hl_ji bitwise, and D is
 *   symmetric, as the median's one count per unordered pair needs. The large hh chain runs
 *   apart from the small ones: the tensor cores truncate as they add.
 *   D_ij = svgd_gemm_distance(|y_i|^2, |y_j|^2, dot_ij).
 * phi (svgd_flash_phi_kernel): a block of 128 rows, a warp's 16 rows' A fragments in registers
 * for the whole pass, 64-column tiles of [y hi | y lo] and of the columns' vectors v (hi | lo,
 * [coordinate][column], each coordinate times its own power of two 2^sv_k) streamed through
 * shared memory (cp.async, double buffered). A warp takes FLASH_PHI_SUB columns at a time: D
 * and K in registers; sum_j K in float, a thread's columns in order, then its quad in a fixed
 * tree (K unscaled, as computed). For K v each row keeps a power of two 2^sr: at a subtile whose
 * largest K (of that row) has a higher exponent than any before, sr is lowered so that it maps
 * into [2^14, 2^15) and the row's sums so far are scaled by the (exact) ratio, as
 * FlashAttention's running maximum; K 2^sr is split hi + lo, packed from the C layout into the
 * A fragment of K v, and sum_j K v taken in 3 products, each subtile's part from zero, then
 * added in float32 round to nearest, parts in column order. The sums leave the kernel times
 * 2^-sr 2^-sv_k. K never leaves the registers. The scales depend on n and the data alone, so
 * the sums are the same on any number of ranks.
 * Median (svgd_flash_histogram_kernel): the same distances over the band of pairs, counted as
 * svgd_pair_histogram_kernel counts them. */
constexpr int FLASH_MAX_DIM = 64;
constexpr int FLASH_THREADS = 256; /* 8 warps of 16 rows */
constexpr int FLASH_BM = 128;
constexpr int FLASH_BN = 64;       /* columns per staged tile */
constexpr int FLASH_SUB = 32;      /* columns a histogram warp counts at once: 4 n8 tiles */
constexpr int FLASH_MAX_SPLITS = 8;
static_assert(FLASH_BM == 16 * (FLASH_THREADS / 32), "a warp per 16 rows");
static_assert(FLASH_BN % FLASH_SUB == 0 && FLASH_SUB == 32, "4 n8 tiles per warp step");

template <int DP>
struct flash_dims {
  static constexpr int KSTEPS = DP / 16; /* k16 steps */
  static constexpr int WORDS = DP / 2;   /* 32-bit words (two fp16) of a particle's coordinates */
  /* [column][k] words, read 8 bytes at (n0 + g) stride + 8 ks + 2t: the stride is 8 mod 32
   * words (or 24), so banks 8g + 2t (+ 1) are distinct within each half warp. */
  static constexpr int Y_STRIDE = DP == 16 ? 24 : WORDS + 8;
  /* [coordinate][column] words, read 8 bytes at (8 c + g) stride + 8 q + 2t: the same banks. */
  static constexpr int V_STRIDE = FLASH_BN / 2 + 8;
};

/* The limits of the scales' exponents: y's scale enters the distances squared; v's only once,
 * so that scores up to float's largest still fit fp16 (1e30 scales by 2^-86). */
constexpr int FLASH_Y_SCALE_LIMIT = 56, FLASH_V_SCALE_LIMIT = 126;

/* The scales of a pass, in device memory: the largest |y| and each coordinate's largest |v|,
 * as float bits (unsigned order is magnitude order). */
struct flash_scales {
  uint32_t y_max;
  uint32_t v_max[FLASH_MAX_DIM];
};

int flash_padded_dim(long long dim) { return dim <= 16 ? 16 : dim <= 32 ? 32 : 64; }
/* Rows of the split arrays: n rounded up to whole column tiles, so whole tiles can be read. */
long long flash_padded_rows(long long n) { return (n + FLASH_BN - 1) / FLASH_BN * FLASH_BN; }

/* The coordinate (or column) at position p: in each 16, positions 4t .. 4t + 3 hold 2t, 2t + 1,
 * 2t + 8, 2t + 9, so that a thread's two registers of a fragment (mma_f16.cuh) are adjacent. */
__host__ __device__ __forceinline__ long long flash_slot(long long p) {
  const int r = (int)(p & 15), t = r >> 2, q = r & 3;
  return (p & ~15ll) + 2 * t + ((q & 2) << 2) + (q & 1);
}

/* The exponent of the power of two a row's K is scaled by when its largest K so far has
 * exponent e (-1000: none yet). */
__device__ __forceinline__ int flash_row_shift(int e) { return 14 - e > 126 ? 126 : 14 - e; }

/* The A fragments of rows row0 .. row0 + 15; zeros past row_end. */
template <int DP>
__device__ __forceinline__ void flash_load_rows(const uint32_t *hi, const uint32_t *lo, long long row0,
                                                long long row_end, int g, int t,
                                                uint32_t a_hi[flash_dims<DP>::KSTEPS][4],
                                                uint32_t a_lo[flash_dims<DP>::KSTEPS][4]) {
  constexpr int WORDS = flash_dims<DP>::WORDS;
  const long long top = row0 + g, bottom = row0 + g + 8;
  const bool top_valid = top < row_end, bottom_valid = bottom < row_end;
#pragma unroll
  for (int ks = 0; ks < flash_dims<DP>::KSTEPS; ++ks) {
    const int w = 8 * ks + 2 * t;
    const uint2 th = top_valid ? *reinterpret_cast<const uint2 *>(hi + top * WORDS + w) : make_uint2(0u, 0u);
    const uint2 tl = top_valid ? *reinterpret_cast<const uint2 *>(lo + top * WORDS + w) : make_uint2(0u, 0u);
    const uint2 bh = bottom_valid ? *reinterpret_cast<const uint2 *>(hi + bottom * WORDS + w) : make_uint2(0u, 0u);
    const uint2 bl = bottom_valid ? *reinterpret_cast<const uint2 *>(lo + bottom * WORDS + w) : make_uint2(0u, 0u);
    a_hi[ks][0] = th.x; a_hi[ks][1] = bh.x; a_hi[ks][2] = th.y; a_hi[ks][3] = bh.y;
    a_lo[ks][0] = tl.x; a_lo[ks][1] = bl.x; a_lo[ks][2] = tl.y; a_lo[ks][3] = bl.y;
  }
}

/* dot of the warp's 16 rows with columns n0 + 8 j .. n0 + 8 j + 7, j < NT, of [column][k] word
 * arrays cols_hi, cols_lo (stride words a column), times inv_scale2 = 2^-2sy: C layout. The one
 * formula of the GPU's distances up to FLASH_MAX_DIM: each of the 3 NT chains takes its k16
 * steps in ascending order, so a result does not depend on NT or on the tiles beside it. */
template <int DP, int NT>
__device__ __forceinline__ void flash_dot_tiles(const uint32_t a_hi[flash_dims<DP>::KSTEPS][4],
                                                const uint32_t a_lo[flash_dims<DP>::KSTEPS][4],
                                                const uint32_t *cols_hi, const uint32_t *cols_lo, int stride, int n0,
                                                float inv_scale2, int g, int t, float dot[NT][4]) {
  float hh[NT][4], lh[NT][4], hl[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) hh[j][e] = lh[j][e] = hl[j][e] = 0.0f;
#pragma unroll
  for (int ks = 0; ks < flash_dims<DP>::KSTEPS; ++ks)
#pragma unroll
    for (int j = 0; j < NT; ++j) {
      const int at = (n0 + 8 * j + g) * stride + 8 * ks + 2 * t;
      const uint2 bh = *reinterpret_cast<const uint2 *>(cols_hi + at);
      const uint2 bl = *reinterpret_cast<const uint2 *>(cols_lo + at);
      const uint32_t b_hi[2] = {bh.x, bh.y}, b_lo[2] = {bl.x, bl.y};
      mma_f16_m16n8k16(lh[j], a_lo[ks], b_hi);
      mma_f16_m16n8k16(hl[j], a_hi[ks], b_lo);
      mma_f16_m16n8k16(hh[j], a_hi[ks], b_hi);
    }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dot[j][e] = __fmul_rn(__fadd_rn(hh[j][e], __fadd_rn(lh[j][e], hl[j][e])), inv_scale2);
}

/* 2^-2sy of the scales. */
__device__ __forceinline__ float flash_inv_scale2(const flash_scales *scales) {
  return pow2_exact(-2 * f16_scale_exponent(float_exponent_of_bits(scales->y_max), FLASH_Y_SCALE_LIMIT));
}

/* max_bits = max(max_bits, the bits of |src[e]|), e < count. */
__global__ void svgd_flash_max_abs_kernel(const float *src, long long count, uint32_t *max_bits) {
  uint32_t m = 0u;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x)
    m = max(m, __float_as_uint(src[e]) & 0x7fffffffu);
  for (int offset = 16; offset > 0; offset >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, offset));
  if (threadIdx.x % 32 == 0 && m) atomicMax(max_bits, m);
}

/* hi, lo [padded rows][dp / 2 words] of src [n][dim] times 2^sy, positions flash_slot (or in
 * coordinate order where natural, for the wgmma tiles): zeros
 * past dim and past n (a padding row's weight is 0, and 0 times a stale NaN would not be). */
__global__ void svgd_flash_split_kernel(const float *src, long long n, long long padded_rows, int dim, int dp,
                                        bool natural, const flash_scales *scales, uint32_t *hi, uint32_t *lo) {
  const float scale = pow2_exact(f16_scale_exponent(float_exponent_of_bits(scales->y_max), FLASH_Y_SCALE_LIMIT));
  const int words = dp / 2;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < padded_rows * words;
       e += (long long)gridDim.x * blockDim.x) {
    const long long j = e / words;
    const int k = natural ? (int)(2 * (e - j * words)) : (int)flash_slot(2 * (e - j * words));
    const bool row = j < n;
    const float a = row && k < dim ? __fmul_rn(src[j * dim + k], scale) : 0.0f;
    const float b = row && k + 1 < dim ? __fmul_rn(src[j * dim + k + 1], scale) : 0.0f;
    f16_split2(a, b, &hi[e], &lo[e]);
  }
}

/* The columns' vectors v of a phi pass: s - y / h (rbf, as svgd_v_kernel), s, or y. */
enum { FLASH_V_RBF = 0, FLASH_V_SCORE = 1, FLASH_V_CENTRED = 2 };
__device__ __forceinline__ float flash_v_value(const float *score, const float *centred, long long at, int mode,
                                               float h) {
  return mode == FLASH_V_RBF ? __fsub_rn(score[at], __fdiv_rn(centred[at], h))
         : mode == FLASH_V_SCORE ? score[at] : centred[at];
}

/* v_max[k] = max(v_max[k], the bits of |v_jk|) over the rows j; blocks (64, 4). */
__global__ void svgd_flash_v_max_kernel(const float *score, const float *centred, long long n, int dim, int mode,
                                        float h, uint32_t *v_max) {
  const int k = threadIdx.x;
  if (k >= dim) return;
  uint32_t m = 0u;
  for (long long j = (long long)blockIdx.x * blockDim.y + threadIdx.y; j < n; j += (long long)gridDim.x * blockDim.y)
    m = max(m, __float_as_uint(flash_v_value(score, centred, j * dim + k, mode, h)) & 0x7fffffffu);
  if (m) atomicMax(&v_max[k], m);
}

/* v times 2^sv_k, split: hi, lo [dp][padded rows / 2 words], columns at positions flash_slot
 * (in order where natural). */
__global__ void svgd_flash_v_split_kernel(const float *score, const float *centred, long long n, long long padded_rows,
                                          int dim, int dp, int mode, float h, bool natural, const flash_scales *scales,
                                          uint32_t *hi, uint32_t *lo) {
  const long long words = padded_rows / 2;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < (long long)dp * words;
       e += (long long)gridDim.x * blockDim.x) {
    const int k = (int)(e / words);
    const long long j = natural ? 2 * (e - k * words) : flash_slot(2 * (e - k * words));
    float a = 0.0f, b = 0.0f;
    if (k < dim) {
      const float scale = pow2_exact(f16_scale_exponent(float_exponent_of_bits(scales->v_max[k]), FLASH_V_SCALE_LIMIT));
      if (j < n) a = __fmul_rn(flash_v_value(score, centred, j * dim + k, mode, h), scale);
      if (j + 1 < n) b = __fmul_rn(flash_v_value(score, centred, (j + 1) * dim + k, mode, h), scale);
    }
    f16_split2(a, b, &hi[e], &lo[e]);
  }
}

struct flash_phi_args {
  const uint32_t *y_hi, *y_lo; /* [padded rows][DP / 2] */
  const uint32_t *v_hi, *v_lo; /* [DP][padded rows / 2] */
  const float *squares;        /* [n] |y_j|^2 */
  const flash_scales *scales;
  long long n, row_begin, row_end, v_words; /* v_words: padded rows / 2 */
  int dim, splits;
  pair_weight_t weight;
  float *partial_sums; /* [splits][rows][dim] */
  float *partial_k;    /* [splits][rows] */
};

/* The rows' running scales after a subtile in which this thread's largest K of row g + 8 h is
 * most[h]: the quad's largest, and where its exponent is above any before, a lower sr. Warp-wide:
 * returns whether any row of the warp grew, with ratio[h] the exact factor of the row's sums so
 * far (1 where the row did not grow). */
__device__ __forceinline__ bool flash_row_rescale(float most[2], int row_exp[2], float row_scale[2], float ratio[2]) {
  bool grows = false;
  int exps[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    most[h] = fmaxf(most[h], __shfl_xor_sync(0xffffffffu, most[h], 1));
    most[h] = fmaxf(most[h], __shfl_xor_sync(0xffffffffu, most[h], 2));
    exps[h] = most[h] > 0.0f ? float_exponent_of_bits(__float_as_uint(most[h])) : -1000;
    grows |= exps[h] > row_exp[h];
  }
  if (!__any_sync(0xffffffffu, grows)) return false;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int e_new = exps[h] > row_exp[h] ? exps[h] : row_exp[h];
    const int drop = flash_row_shift(e_new) - flash_row_shift(row_exp[h]); /* <= 0 */
    ratio[h] = drop < -126 ? 0.0f : pow2_exact(drop);
    row_exp[h] = e_new;
    row_scale[h] = pow2_exact(flash_row_shift(e_new));
  }
  return true;
}

/* A warp's rows r0 + g, r0 + g + 8 of a phi pass into the split's partial sums: sum_k summed over
 * the quad in a fixed tree, and acc[4 c + 2 h + e] (coordinate 8 c + 2 t + e of row g + 8 h,
 * c < CT) times 2^-sr 2^-sv_k. */
template <int CT>
__device__ __forceinline__ void flash_phi_write(const flash_phi_args &a, int split, long long r0, int g, int t,
                                                float sum_k[2], const int row_exp[2], const float *acc) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    sum_k[h] = __fadd_rn(sum_k[h], __shfl_xor_sync(0xffffffffu, sum_k[h], 1));
    sum_k[h] = __fadd_rn(sum_k[h], __shfl_xor_sync(0xffffffffu, sum_k[h], 2));
  }
  const long long rows = a.row_end - a.row_begin;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const long long row = r0 + g + 8 * h;
    if (row >= a.row_end) continue;
    const long long local = (long long)split * rows + (row - a.row_begin);
    if (t == 0) a.partial_k[local] = sum_k[h];
    float *out = a.partial_sums + local * a.dim;
    const float unscale_row = pow2_exact(-flash_row_shift(row_exp[h]));
#pragma unroll
    for (int c = 0; c < CT; ++c)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int k = 8 * c + 2 * t + e;
        if (k < a.dim) {
          const int v_shift = f16_scale_exponent(float_exponent_of_bits(a.scales->v_max[k]), FLASH_V_SCALE_LIMIT);
          out[k] = __fmul_rn(__fmul_rn(acc[4 * c + 2 * h + e], pow2_exact(-v_shift)), unscale_row);
        }
      }
  }
}

template <int DP>
struct flash_phi_stage {
  uint32_t y_hi[FLASH_BN * flash_dims<DP>::Y_STRIDE], y_lo[FLASH_BN * flash_dims<DP>::Y_STRIDE];
  uint32_t v_hi[DP * flash_dims<DP>::V_STRIDE], v_lo[DP * flash_dims<DP>::V_STRIDE];
  float squares[FLASH_BN];
};

/* grid (row blocks, splits), FLASH_THREADS, 2 stages dynamic. Column tiles of the split
 * tiles * split / splits .. ascending; the diagonal and columns past n weigh 0. */
/* Two blocks an SM (128 registers a thread): four warps a scheduler hide the products' latency
 * that two could not (N = 32768, d = 64: 7.3 -> 5.0 ms a step end to end), and 16-column
 * subtiles keep the registers within that budget. */
constexpr int FLASH_PHI_MIN_BLOCKS = 2;
constexpr int FLASH_PHI_SUB = 16;
template <int DP>
__global__ void __launch_bounds__(FLASH_THREADS, FLASH_PHI_MIN_BLOCKS) svgd_flash_phi_kernel(const flash_phi_args a) {
  constexpr int KSTEPS = flash_dims<DP>::KSTEPS, WORDS = flash_dims<DP>::WORDS;
  constexpr int Y_STRIDE = flash_dims<DP>::Y_STRIDE, V_STRIDE = flash_dims<DP>::V_STRIDE;
  constexpr int Y_CHUNKS = WORDS / 4, V_CHUNKS = FLASH_BN / 8, CT = DP / 8;
  constexpr int PHI_SUB = FLASH_PHI_SUB, NT = PHI_SUB / 8;
  static_assert(PHI_SUB % 16 == 0 && FLASH_BN % PHI_SUB == 0, "whole k16 column steps per subtile");
  extern __shared__ float4 flash_shared_raw[];
  flash_phi_stage<DP> *stages = reinterpret_cast<flash_phi_stage<DP> *>(flash_shared_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const long long r0 = a.row_begin + (long long)blockIdx.x * FLASH_BM + 16 * warp; /* the warp's rows */
  const int split = blockIdx.y;
  const long long tiles = (a.n + FLASH_BN - 1) / FLASH_BN;
  const long long tile_begin = tiles * split / a.splits, tile_end = tiles * (split + 1) / a.splits;
  const float inv_scale2 = flash_inv_scale2(a.scales);

  /* Columns past n read the split arrays' padding rows and are masked. */
  auto stage = [&](long long tile, int buffer) {
    flash_phi_stage<DP> &s = stages[buffer];
    for (int f = tid; f < FLASH_BN * Y_CHUNKS; f += FLASH_THREADS) {
      const int cc = f / Y_CHUNKS, kk = 4 * (f % Y_CHUNKS);
      const size_t at = (size_t)(tile * FLASH_BN + cc) * WORDS + kk;
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_hi[cc * Y_STRIDE + kk]), reinterpret_cast<const float *>(a.y_hi + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_lo[cc * Y_STRIDE + kk]), reinterpret_cast<const float *>(a.y_lo + at), true);
    }
    for (int f = tid; f < DP * V_CHUNKS; f += FLASH_THREADS) {
      const int c = f / V_CHUNKS, ww = 4 * (f % V_CHUNKS);
      const size_t at = (size_t)c * a.v_words + (size_t)tile * (FLASH_BN / 2) + ww;
      cp_async_f32x4(reinterpret_cast<float *>(&s.v_hi[c * V_STRIDE + ww]), reinterpret_cast<const float *>(a.v_hi + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.v_lo[c * V_STRIDE + ww]), reinterpret_cast<const float *>(a.v_lo + at), true);
    }
    if (tid < FLASH_BN) {
      const long long column = tile * FLASH_BN + tid;
      cp_async_f32(&s.squares[tid], a.squares + (column < a.n ? column : 0), column < a.n);
    }
  };

  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  flash_load_rows<DP>(a.y_hi, a.y_lo, r0, a.row_end, g, t, a_hi, a_lo);
  const float row_square[2] = {r0 + g < a.row_end ? a.squares[r0 + g] : 0.0f,
                               r0 + g + 8 < a.row_end ? a.squares[r0 + g + 8] : 0.0f};
  /* acc[c][e]: sum_j K 2^sr v 2^sv of row g + 8 (e / 2), coordinate 8 c + 2 t + e % 2. */
  float acc[CT][4];
#pragma unroll
  for (int c = 0; c < CT; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[c][e] = 0.0f;
  float sum_k[2] = {0.0f, 0.0f};
  int row_exp[2] = {-1000, -1000};  /* the exponent of the row's largest K so far */
  float row_scale[2] = {pow2_exact(flash_row_shift(-1000)), pow2_exact(flash_row_shift(-1000))};

  if (tile_begin < tile_end) stage(tile_begin, 0);
  cp_async_wait_all();
  __syncthreads();
  for (long long tile = tile_begin; tile < tile_end; ++tile) {
    const int buffer = (int)((tile - tile_begin) & 1);
    if (tile + 1 < tile_end) stage(tile + 1, buffer ^ 1);
    const flash_phi_stage<DP> &s = stages[buffer];
    const long long c0 = tile * FLASH_BN;
    const bool masked = c0 + FLASH_BN > a.n || (c0 < r0 + 16 && r0 < c0 + FLASH_BN);
#pragma unroll
    for (int sub = 0; sub < FLASH_BN / PHI_SUB; ++sub) {
      float k[NT][4];
      flash_dot_tiles<DP, NT>(a_hi, a_lo, s.y_hi, s.y_lo, Y_STRIDE, sub * PHI_SUB, inv_scale2, g, t, k);
      float most[2] = {0.0f, 0.0f};
#pragma unroll
      for (int jn = 0; jn < NT; ++jn) {
        const int n0 = sub * PHI_SUB + 8 * jn;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int cl = n0 + 2 * t + (e & 1);
          k[jn][e] = pair_weight(a.weight, svgd_gemm_distance(row_square[e >> 1], s.squares[cl], k[jn][e]));
          if (masked && (c0 + cl >= a.n || c0 + cl == r0 + g + 8 * (e >> 1))) k[jn][e] = 0.0f;
        }
        sum_k[0] = __fadd_rn(__fadd_rn(sum_k[0], k[jn][0]), k[jn][1]);
        sum_k[1] = __fadd_rn(__fadd_rn(sum_k[1], k[jn][2]), k[jn][3]);
        most[0] = fmaxf(most[0], fmaxf(k[jn][0], k[jn][1]));
        most[1] = fmaxf(most[1], fmaxf(k[jn][2], k[jn][3]));
      }
      /* The rows' scales: a larger K than any before lowers sr, and the sums follow. */
      float ratio[2];
      if (flash_row_rescale(most, row_exp, row_scale, ratio)) {
#pragma unroll
        for (int c = 0; c < CT; ++c) {
          acc[c][0] = __fmul_rn(acc[c][0], ratio[0]);
          acc[c][1] = __fmul_rn(acc[c][1], ratio[0]);
          acc[c][2] = __fmul_rn(acc[c][2], ratio[1]);
          acc[c][3] = __fmul_rn(acc[c][3], ratio[1]);
        }
      }
      /* A fragments of K v, 16 columns each: tiles 2q and 2q + 1 of the C layout, packed. */
      uint32_t p_hi[NT / 2][4], p_lo[NT / 2][4];
#pragma unroll
      for (int q = 0; q < NT / 2; ++q) {
        f16_split2(__fmul_rn(k[2 * q][0], row_scale[0]), __fmul_rn(k[2 * q][1], row_scale[0]), &p_hi[q][0], &p_lo[q][0]);
        f16_split2(__fmul_rn(k[2 * q][2], row_scale[1]), __fmul_rn(k[2 * q][3], row_scale[1]), &p_hi[q][1], &p_lo[q][1]);
        f16_split2(__fmul_rn(k[2 * q + 1][0], row_scale[0]), __fmul_rn(k[2 * q + 1][1], row_scale[0]), &p_hi[q][2],
                   &p_lo[q][2]);
        f16_split2(__fmul_rn(k[2 * q + 1][2], row_scale[1]), __fmul_rn(k[2 * q + 1][3], row_scale[1]), &p_hi[q][3],
                   &p_lo[q][3]);
      }
      /* part[c]: this subtile's K v from zero, column steps ascending; CT chains in flight. */
      float part[CT][4];
#pragma unroll
      for (int c = 0; c < CT; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) part[c][e] = 0.0f;
#pragma unroll
      for (int q = 0; q < NT / 2; ++q)
#pragma unroll
        for (int c = 0; c < CT; ++c) {
          const int at = (8 * c + g) * V_STRIDE + sub * (PHI_SUB / 2) + 8 * q + 2 * t;
          const uint2 bh = *reinterpret_cast<const uint2 *>(&s.v_hi[at]);
          const uint2 bl = *reinterpret_cast<const uint2 *>(&s.v_lo[at]);
          const uint32_t b_hi[2] = {bh.x, bh.y}, b_lo[2] = {bl.x, bl.y};
          mma_f16_m16n8k16(part[c], p_lo[q], b_hi);
          mma_f16_m16n8k16(part[c], p_hi[q], b_lo);
          mma_f16_m16n8k16(part[c], p_hi[q], b_hi);
        }
#pragma unroll
      for (int c = 0; c < CT; ++c)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[c][e] = __fadd_rn(acc[c][e], part[c][e]);
    }
    cp_async_wait_all();
    __syncthreads();
  }

  flash_phi_write<CT>(a, split, r0, g, t, sum_k, row_exp, &acc[0][0]);
}

/* phi on Hopper's warpgroup products (svgd_wgmma_phi_kernel, 64 padded coordinates, sm_90a):
 * the formula of svgd_flash_phi_kernel with 64-column tiles as whole m64n64k16 products. A
 * block is WGMMA_WARPGROUPS warpgroups of 64 rows (a warp's 16 rows and their A fragments as there, y
 * split in coordinate order); each column tile's [y hi | y lo] and v (hi | lo,
 * [coordinate][column]) are staged in shared memory with the 128-byte swizzle (wgmma_f16.cuh),
 * WGMMA_STAGES of them behind mbarriers. Per tile: dot = 2^-2sy times one chain from zero of
 * lo_i hi_j, hi_i lo_j, then hi_i hi_j, each over the k16 steps ascending (phi needs no
 * symmetric D: the median's kernels keep their own formula); the mode of K a template
 * argument; D, K, sum_j K, the rows' running scales, and K 2^sr split into the A fragments of
 * K v, as there; K v's tile part from zero (lo hi, then hi lo, then hi hi, column steps
 * ascending), added to the row's sums in float32. Each row's result depends on its own data and
 * the columns alone, in the same order on any number of ranks. Three warpgroups a block
 * (192 rows) measured faster than two (tests/bench/BENCHMARKS.md). */
constexpr int WGMMA_PHI_BN = 64, WGMMA_WARPGROUPS = 3;

struct wgmma_phi_stage { /* each array 8192 bytes, on 1024 */
  uint32_t y_hi[2048], y_lo[2048], v_hi[2048], v_lo[2048];
  float squares[WGMMA_PHI_BN];
  uint32_t pad[256 - WGMMA_PHI_BN];
};
static_assert(sizeof(wgmma_phi_stage) % 1024 == 0, "stages on 1024 bytes");
/* Stages in flight: tile j + WGMMA_PREFETCH is loaded while tile j is computed, into the stage
 * tile j + WGMMA_PREFETCH - WGMMA_STAGES left, so a warpgroup may run up to
 * WGMMA_STAGES - WGMMA_PREFETCH tiles ahead of the slowest (no block-wide barrier a tile). */
constexpr int WGMMA_STAGES = 4, WGMMA_PREFETCH = 2;
static_assert(WGMMA_PREFETCH >= 1 && WGMMA_PREFETCH < WGMMA_STAGES, "a stage free while others load");
constexpr size_t WGMMA_PHI_SMEM = WGMMA_STAGES * sizeof(wgmma_phi_stage) + 1024;

template <int MODE>
__global__ void __launch_bounds__(128 * WGMMA_WARPGROUPS, 1) svgd_wgmma_phi_kernel(const flash_phi_args a) {
#ifdef DSAMPLER_WGMMA_DEVICE
  constexpr int WGMMA_PHI_THREADS = 128 * WGMMA_WARPGROUPS, BM = 64 * WGMMA_WARPGROUPS;
  constexpr int KSTEPS = 4, WORDS = 32;
  extern __shared__ float4 wgmma_shared_raw[];
  /* On 1024 bytes, by an offset into the shared array (so the compiler keeps shared loads). */
  const uint32_t misalign = (uint32_t)__cvta_generic_to_shared(wgmma_shared_raw) & 1023u;
  wgmma_phi_stage *stages =
      reinterpret_cast<wgmma_phi_stage *>(reinterpret_cast<char *>(wgmma_shared_raw) + ((1024u - misalign) & 1023u));
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const long long r0 = a.row_begin + (long long)blockIdx.x * BM + 16 * warp; /* the warp's rows */
  const int split = blockIdx.y;
  const long long tiles = (a.n + WGMMA_PHI_BN - 1) / WGMMA_PHI_BN;
  const long long tile_begin = tiles * split / a.splits, tile_end = tiles * (split + 1) / a.splits;
  const float minus_two_inv_scale2 = -2.0f * flash_inv_scale2(a.scales);

  /* 16-byte chunks into the swizzled tiles; columns past n read the padding rows. */
  auto stage = [&](long long tile, int buffer) {
    wgmma_phi_stage &s = stages[buffer];
    for (int f = tid; f < 512; f += WGMMA_PHI_THREADS) {
      const int r = f / 8, q = f % 8, dst = wgmma_swizzle128(r, 16 * q) / 4;
      const size_t y_at = (size_t)(tile * WGMMA_PHI_BN + r) * WORDS + 4 * q;
      const size_t v_at = (size_t)r * a.v_words + (size_t)tile * (WGMMA_PHI_BN / 2) + 4 * q;
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_hi[dst]), reinterpret_cast<const float *>(a.y_hi + y_at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_lo[dst]), reinterpret_cast<const float *>(a.y_lo + y_at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.v_hi[dst]), reinterpret_cast<const float *>(a.v_hi + v_at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.v_lo[dst]), reinterpret_cast<const float *>(a.v_lo + v_at), true);
    }
    if (tid < WGMMA_PHI_BN) {
      const long long column = tile * WGMMA_PHI_BN + tid;
      cp_async_f32(&s.squares[tid], a.squares + (column < a.n ? column : 0), column < a.n);
    }
  };

  /* The rows' A fragments, y in coordinate order: a[0] holds coordinates 2t, 2t + 1. */
  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  {
    const long long top = r0 + g, bottom = r0 + g + 8;
    const bool top_valid = top < a.row_end, bottom_valid = bottom < a.row_end;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int w = 8 * ks + 4 * half + t;
        a_hi[ks][2 * half] = top_valid ? a.y_hi[top * WORDS + w] : 0u;
        a_hi[ks][2 * half + 1] = bottom_valid ? a.y_hi[bottom * WORDS + w] : 0u;
        a_lo[ks][2 * half] = top_valid ? a.y_lo[top * WORDS + w] : 0u;
        a_lo[ks][2 * half + 1] = bottom_valid ? a.y_lo[bottom * WORDS + w] : 0u;
      }
  }
  const float row_square[2] = {r0 + g < a.row_end ? a.squares[r0 + g] : 0.0f,
                               r0 + g + 8 < a.row_end ? a.squares[r0 + g + 8] : 0.0f};
  /* acc[4 c + e]: sum_j K 2^sr v 2^sv of row g + 8 (e / 2), coordinate 8 c + 2 t + e % 2. */
  float acc[32], dots[32], part[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) acc[i] = dots[i] = part[i] = 0.0f;
  float sum_k[2] = {0.0f, 0.0f};
  int row_exp[2] = {-1000, -1000};
  float row_scale[2] = {pow2_exact(flash_row_shift(-1000)), pow2_exact(flash_row_shift(-1000))};

  __shared__ uint64_t full[WGMMA_STAGES], empty[WGMMA_STAGES];
  if (tid < WGMMA_STAGES) {
    mbar_init(&full[tid], WGMMA_PHI_THREADS);
    mbar_init(&empty[tid], WGMMA_PHI_THREADS);
  }
  __syncthreads();
  for (long long tile = tile_begin; tile < tile_begin + WGMMA_PREFETCH && tile < tile_end; ++tile) {
    const int local = (int)(tile - tile_begin);
    stage(tile, local);
    mbar_arrive_copies(&full[local]);
  }
  /* Loads tile + WGMMA_PREFETCH into the stage its predecessor there has left. */
  auto produce = [&](long long tile) {
    if (tile + WGMMA_PREFETCH >= tile_end) return;
    const long long ahead = tile - tile_begin + WGMMA_PREFETCH;
    const int ahead_buffer = (int)(ahead % WGMMA_STAGES);
    if (ahead >= WGMMA_STAGES) mbar_wait(&empty[ahead_buffer], (uint32_t)((ahead / WGMMA_STAGES - 1) & 1));
    stage(tile + WGMMA_PREFETCH, ahead_buffer);
    mbar_arrive_copies(&full[ahead_buffer]);
  };
  auto buffer_of = [&](long long tile) { return (int)((tile - tile_begin) % WGMMA_STAGES); };
  /* Waits for the tile's stage, then issues its distance products into dots (not waited). */
  auto issue_dots = [&](long long tile) {
    const long long local = tile - tile_begin;
    const int buffer = buffer_of(tile);
    mbar_wait(&full[buffer], (uint32_t)((local / WGMMA_STAGES) & 1));
    wgmma_fence_shared();
    const uint64_t y_hi_desc = wgmma_desc128(stages[buffer].y_hi), y_lo_desc = wgmma_desc128(stages[buffer].y_lo);
    wgmma_fence();
    wgmma_split_chain(dots, a_hi, a_lo, y_hi_desc, y_lo_desc);
    wgmma_commit();
  };
  /* K from the tile's finished dots, K v into the rows' sums; the stage is released. */
  auto finish_tile = [&](long long tile) {
    const int buffer = buffer_of(tile);
    const wgmma_phi_stage &s = stages[buffer];
    const long long c0 = tile * WGMMA_PHI_BN;
    const bool masked = c0 + WGMMA_PHI_BN > a.n || (c0 < r0 + 16 && r0 < c0 + WGMMA_PHI_BN);
    /* In a masked tile: the columns that exist, and the rows' own columns (local indices). */
    const int columns = (int)(a.n - c0 < WGMMA_PHI_BN ? a.n - c0 : WGMMA_PHI_BN);
    const int own_column = masked ? (int)(r0 + g - c0) : -1000;
    const uint64_t v_hi_desc = wgmma_desc128(s.v_hi), v_lo_desc = wgmma_desc128(s.v_lo);
    float k[32];
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int cl = 8 * i + 2 * t + (e & 1), h = e >> 1;
        /* svgd_gemm_distance with the scale 2^-2sy folded into its multiply (exact but for
         * subnormal products) */
        const float d = __fmaf_rn(dots[4 * i + e], minus_two_inv_scale2, __fadd_rn(row_square[h], s.squares[cl]));
        k[4 * i + e] = pair_weight_of<MODE>(a.weight, (d > 0.0f || d != d) ? d : 0.0f);
      }
    if (masked) /* the diagonal and columns past n weigh 0 */
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int cl = 8 * i + 2 * t + (e & 1);
          if (cl >= columns || cl == own_column + 8 * (e >> 1)) k[4 * i + e] = 0.0f;
        }
    float most[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sum_k[e >> 1] = __fadd_rn(sum_k[e >> 1], k[4 * i + e]);
        most[e >> 1] = fmaxf(most[e >> 1], k[4 * i + e]);
      }
    float ratio[2];
    if (flash_row_rescale(most, row_exp, row_scale, ratio))
#pragma unroll
      for (int i = 0; i < 32; ++i) acc[i] = __fmul_rn(acc[i], ratio[(i >> 1) & 1]);
    /* K v's A fragments, k16 step q = C tiles 2q and 2q + 1. */
    uint32_t p_hi[4][4], p_lo[4][4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int at = 8 * q + 2 * r; /* r: (tile 2q, row g), (2q, g + 8), (2q + 1, g), (2q + 1, g + 8) */
        const float scale = row_scale[r & 1];
        f16_split2(__fmul_rn(k[at], scale), __fmul_rn(k[at + 1], scale), &p_hi[q][r], &p_lo[q][r]);
      }
    wgmma_fence();
    wgmma_split_chain(part, p_hi, p_lo, v_hi_desc, v_lo_desc);
    wgmma_commit();
    wgmma_wait();
    wgmma_fence_operands(part);
    mbar_arrive(&empty[buffer]);
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = __fadd_rn(acc[i], part[i]);
  };
  for (long long tile = tile_begin; tile < tile_end; ++tile) {
    produce(tile);
    issue_dots(tile);
    wgmma_wait();
    wgmma_fence_operands(dots);
    finish_tile(tile);
  }
  cp_async_wait_all();

  flash_phi_write<8>(a, split, r0, g, t, sum_k, row_exp, acc);
#endif
}

struct flash_hist_args {
  const uint32_t *y_hi, *y_lo; /* [padded rows][DP / 2] */
  const float *squares;
  const flash_scales *scales;
  int n, half, row_begin, row_end, col_tiles;
  long long total_tiles;
  long long window_flush; /* the warpgroup window pass: tiles between flushes of its counters */
  uint32_t select_bits;
  unsigned long long *hist;
};

template <int DP>
struct flash_hist_stage {
  uint32_t y_hi[FLASH_BN * flash_dims<DP>::Y_STRIDE], y_lo[FLASH_BN * flash_dims<DP>::Y_STRIDE];
  float squares[FLASH_BN];
};

/* The window pass counts its fine bins only (backend.h). */
template <int PASS>
constexpr int flash_hist_words() {
  return PASS == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_FINE_BINS / 2 : HIST_WORDS;
}

template <int DP, int PASS>
constexpr size_t flash_hist_smem_bytes() {
  return sizeof(uint32_t) * flash_hist_words<PASS>() + 2 * sizeof(flash_hist_stage<DP>);
}

/* The end of a median pass's block (after a barrier that follows every count): the shared
 * counts into the global histogram with weight 2, and for the window pass the keys below and
 * above it, each thread's below and above summed per warp, then per block. */
template <int PASS>
__device__ __forceinline__ void flash_hist_flush(const uint32_t *hist_s, int words, int threads,
                                                 unsigned long long below, unsigned long long above,
                                                 unsigned long long outside_s[2], unsigned long long *hist) {
  const int tid = threadIdx.x, lane = tid % 32;
  for (int w = tid; w < words; w += threads) {
    const uint32_t counts = hist_s[w];
    if (counts & 0xFFFFu) atomicAdd(&hist[2 * w], 2ull * (counts & 0xFFFFu));
    if (counts >> 16) atomicAdd(&hist[2 * w + 1], 2ull * (counts >> 16));
  }
  if (PASS == SVGD_MEDIAN_PASS_WINDOW) {
#pragma unroll
    for (int lane_offset = 16; lane_offset > 0; lane_offset >>= 1) {
      below += __shfl_down_sync(0xFFFFFFFFu, below, lane_offset);
      above += __shfl_down_sync(0xFFFFFFFFu, above, lane_offset);
    }
    if (lane == 0) {
      atomicAdd(&outside_s[0], below);
      atomicAdd(&outside_s[1], above);
    }
    __syncthreads();
    if (tid == 0) {
      if (outside_s[0]) atomicAdd(&hist[SVGD_WINDOW_BELOW], 2ull * outside_s[0]);
      if (outside_s[1]) atomicAdd(&hist[SVGD_WINDOW_ABOVE], 2ull * outside_s[1]);
    }
  }
}

/* A persistent grid over (128-row tile, 64-column tile) of the band, row-tile major: rows
 * [row_begin, row_end), a row i's pairs (i, i + offset mod n) for offset 1 .. span(i). */
template <int DP, int PASS>
__global__ void __launch_bounds__(FLASH_THREADS, PASS == SVGD_MEDIAN_PASS_WINDOW ? 2 : 1)
    svgd_flash_histogram_kernel(const flash_hist_args a) {
  constexpr int KSTEPS = flash_dims<DP>::KSTEPS, WORDS = flash_dims<DP>::WORDS;
  constexpr int Y_STRIDE = flash_dims<DP>::Y_STRIDE, Y_CHUNKS = WORDS / 4, H_WORDS = flash_hist_words<PASS>();
  extern __shared__ float4 flash_shared_raw[];
  uint32_t *hist_s = reinterpret_cast<uint32_t *>(flash_shared_raw);
  flash_hist_stage<DP> *stages = reinterpret_cast<flash_hist_stage<DP> *>(hist_s + H_WORDS);
  __shared__ unsigned long long outside_s[2];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  for (int w = tid; w < H_WORDS / 4; w += FLASH_THREADS)
    reinterpret_cast<uint4 *>(hist_s)[w] = make_uint4(0u, 0u, 0u, 0u);
  if (tid < 2) outside_s[tid] = 0ull;
  const float inv_scale2 = flash_inv_scale2(a.scales);

  const long long item_begin = a.total_tiles * blockIdx.x / gridDim.x;
  const long long item_end = a.total_tiles * (blockIdx.x + 1) / gridDim.x;
  /* The first virtual column (row + offset, not reduced modulo n) of an item's tile. */
  auto first_column = [&](long long item) {
    const int row_tile = (int)(item / a.col_tiles), col_tile = (int)(item - (long long)row_tile * a.col_tiles);
    return a.row_begin + row_tile * FLASH_BM + 1 + col_tile * FLASH_BN;
  };
  auto stage = [&](long long item, int buffer) {
    flash_hist_stage<DP> &s = stages[buffer];
    const int c0 = first_column(item);
    for (int f = tid; f < FLASH_BN * Y_CHUNKS; f += FLASH_THREADS) {
      const int cc = f / Y_CHUNKS, kk = 4 * (f % Y_CHUNKS);
      const size_t at = (size_t)((c0 + cc) % a.n) * WORDS + kk;
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_hi[cc * Y_STRIDE + kk]), reinterpret_cast<const float *>(a.y_hi + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_lo[cc * Y_STRIDE + kk]), reinterpret_cast<const float *>(a.y_lo + at), true);
    }
    if (tid < FLASH_BN) cp_async_f32(&s.squares[tid], a.squares + (c0 + tid) % a.n, true);
  };

  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  float row_square[2] = {0.0f, 0.0f};
  int spans[2] = {0, 0};
  int loaded_row_tile = -1;
  unsigned long long below = 0ull, above = 0ull;
  if (item_begin < item_end) stage(item_begin, 0);
  cp_async_wait_all();
  __syncthreads();
  for (long long item = item_begin; item < item_end; ++item) {
    const int buffer = (int)((item - item_begin) & 1);
    if (item + 1 < item_end) stage(item + 1, buffer ^ 1);
    const int row_tile = (int)(item / a.col_tiles);
    const int r0 = a.row_begin + row_tile * FLASH_BM + 16 * warp;
    if (row_tile != loaded_row_tile) {
      loaded_row_tile = row_tile;
      flash_load_rows<DP>(a.y_hi, a.y_lo, r0, a.row_end, g, t, a_hi, a_lo);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = r0 + g + 8 * h;
        row_square[h] = i < a.row_end ? a.squares[i] : 0.0f;
        /* The pair at distance n / 2 (even n) belongs to the row below half; rows past the
         * range count nothing. */
        spans[h] = i >= a.row_end ? 0 : (a.n % 2 == 0 && i >= a.half) ? a.half - 1 : a.half;
      }
    }
    const flash_hist_stage<DP> &s = stages[buffer];
    const int c0 = first_column(item);
#pragma unroll
    for (int sub = 0; sub < FLASH_BN / FLASH_SUB; ++sub) {
      const int n0 = sub * FLASH_SUB;
      /* Offsets of this subtile's pairs lie in [c0 + n0 - r0 - 15, c0 + n0 + 31 - r0]. */
      const int lowest = c0 + n0 - r0 - 15, highest = c0 + n0 + FLASH_SUB - 1 - r0;
      if (highest < 1 || lowest > a.half) continue; /* warp-uniform */
      float dot[4][4];
      flash_dot_tiles<DP, 4>(a_hi, a_lo, s.y_hi, s.y_lo, Y_STRIDE, n0, inv_scale2, g, t, dot);
      /* The 16 pairs' bins first, then their shared-memory counts issued back to back, then the
       * rare wrap-arounds: no count waits on the one before. */
      uint32_t bins[16];
      bool counted[16];
#pragma unroll
      for (int jn = 0; jn < 4; ++jn)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int p = 4 * jn + e, h = e >> 1, cl = n0 + 8 * jn + 2 * t + (e & 1);
          const int offset = c0 + cl - (r0 + g + 8 * h);
          const bool in_band = offset >= 1 && offset <= spans[h];
          const uint32_t bits = __float_as_uint(svgd_gemm_distance(row_square[h], s.squares[cl], dot[jn][e]));
          if (PASS == SVGD_MEDIAN_PASS_HIGH) {
            counted[p] = in_band;
            bins[p] = bits >> 16;
          } else if (PASS == SVGD_MEDIAN_PASS_LOW) {
            counted[p] = in_band && (bits >> 16) == a.select_bits;
            bins[p] = bits & 0xFFFFu;
          } else {
            const uint32_t window_offset = bits - a.select_bits; /* wraps for keys below the window */
            counted[p] = in_band && window_offset < SVGD_WINDOW_FINE_BINS;
            bins[p] = SVGD_WINDOW_FINE + window_offset;
            below += in_band && window_offset >= SVGD_WINDOW_FINE_BINS && bits < a.select_bits;
            above += in_band && window_offset >= SVGD_WINDOW_FINE_BINS && bits >= a.select_bits;
          }
        }
      uint32_t olds[16];
#pragma unroll
      for (int p = 0; p < 16; ++p)
        olds[p] = counted[p] ? atomicAdd(&hist_s[bins[p] >> 1], 1u << ((bins[p] & 1u) << 4)) : 0u;
#pragma unroll
      for (int p = 0; p < 16; ++p)
        if (counted[p] && ((olds[p] >> ((bins[p] & 1u) << 4)) & 0xFFFFu) == 0xFFFFu)
          hist_settle_wrap(a.hist, bins[p], olds[p]);
    }
    cp_async_wait_all();
    __syncthreads();
  }

  flash_hist_flush<PASS>(hist_s, H_WORDS, FLASH_THREADS, below, above, outside_s, a.hist);
}

/* The median's passes on Hopper's warpgroup products (svgd_wgmma_histogram_kernel, 64 padded
 * coordinates, sm_90a): svgd_flash_histogram_kernel's walk and counts with row tiles of 64 per
 * warpgroup, each item's 64 columns staged with the 128-byte swizzle, y split in coordinate
 * order. The distances are flash_dot_tiles' formula: hh, lh and hl three chains from zero over
 * the k16 steps ascending, dot = (hh + (lh + hl)) 2^-2sy, so D stays symmetric bitwise. */
struct wgmma_hist_stage { /* each array 8192 bytes, on 1024 */
  uint32_t y_hi[2048], y_lo[2048];
  float squares[WGMMA_PHI_BN];
  uint32_t pad[256 - WGMMA_PHI_BN];
};
static_assert(sizeof(wgmma_hist_stage) % 1024 == 0, "stages on 1024 bytes");

/* The warpgroup window pass keeps one 32-bit counter a fine bin (128 KB), added to without
 * reading it back: a block's counters go to the global histogram every window_flush tiles
 * (svgd_cuda_tuning_t.window_flush; by default as many as keep every counter below 2^32). The
 * radix passes keep two 16-bit counters a word whose wrap-arounds are caught (hist_count). */
template <int PASS>
constexpr int wgmma_hist_words() {
  return PASS == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_FINE_BINS : HIST_WORDS;
}
static_assert(SVGD_WINDOW_FINE == 0, "the window's counters are indexed by their bins");

template <int PASS>
constexpr size_t wgmma_hist_smem_bytes() {
  return 1024 + 2 * sizeof(wgmma_hist_stage) + sizeof(uint32_t) * wgmma_hist_words<PASS>();
}

/* The window pass's 32-bit counters into the global histogram with weight 2, cleared; between
 * block barriers. */
/* Used by the sm_90a kernels only (empty in the compute_90 pass). */
[[maybe_unused]] __device__ __forceinline__ void wgmma_window_flush(uint32_t *hist_s, int threads, unsigned long long *hist) {
  for (int w = threadIdx.x; w < SVGD_WINDOW_FINE_BINS; w += threads) {
    const uint32_t count = hist_s[w];
    if (count) {
      atomicAdd(&hist[w], 2ull * count);
      hist_s[w] = 0u;
    }
  }
}

template <int PASS>
__global__ void __launch_bounds__(128 * WGMMA_WARPGROUPS, 1) svgd_wgmma_histogram_kernel(const flash_hist_args a) {
#ifdef DSAMPLER_WGMMA_DEVICE
  constexpr int THREADS = 128 * WGMMA_WARPGROUPS, BM = 64 * WGMMA_WARPGROUPS, BN = WGMMA_PHI_BN;
  constexpr int KSTEPS = 4, WORDS = 32, H_WORDS = wgmma_hist_words<PASS>();
  constexpr bool WINDOW = PASS == SVGD_MEDIAN_PASS_WINDOW;
  extern __shared__ float4 wgmma_shared_raw[];
  const uint32_t misalign = (uint32_t)__cvta_generic_to_shared(wgmma_shared_raw) & 1023u;
  wgmma_hist_stage *stages =
      reinterpret_cast<wgmma_hist_stage *>(reinterpret_cast<char *>(wgmma_shared_raw) + ((1024u - misalign) & 1023u));
  uint32_t *hist_s = reinterpret_cast<uint32_t *>(stages + 2);
  __shared__ unsigned long long outside_s[2];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  for (int w = tid; w < H_WORDS / 4; w += THREADS) reinterpret_cast<uint4 *>(hist_s)[w] = make_uint4(0u, 0u, 0u, 0u);
  if (tid < 2) outside_s[tid] = 0ull;
  const float inv_scale2 = flash_inv_scale2(a.scales);

  const long long item_begin = a.total_tiles * blockIdx.x / gridDim.x;
  const long long item_end = a.total_tiles * (blockIdx.x + 1) / gridDim.x;
  auto first_column = [&](long long item) {
    const int row_tile = (int)(item / a.col_tiles), col_tile = (int)(item - (long long)row_tile * a.col_tiles);
    return a.row_begin + row_tile * BM + 1 + col_tile * BN;
  };
  auto stage = [&](long long item, int buffer) {
    wgmma_hist_stage &s = stages[buffer];
    const int c0 = first_column(item);
    for (int f = tid; f < 512; f += THREADS) {
      const int r = f / 8, q = f % 8, dst = wgmma_swizzle128(r, 16 * q) / 4;
      const size_t at = (size_t)((c0 + r) % a.n) * WORDS + 4 * q;
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_hi[dst]), reinterpret_cast<const float *>(a.y_hi + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_lo[dst]), reinterpret_cast<const float *>(a.y_lo + at), true);
    }
    if (tid < BN) cp_async_f32(&s.squares[tid], a.squares + (c0 + tid) % a.n, true);
  };

  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  float row_square[2] = {0.0f, 0.0f};
  int spans[2] = {0, 0};
  int loaded_row_tile = -1;
  unsigned long long below = 0ull, above = 0ull;
  float hh[32], lh[32], hl[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) hh[i] = lh[i] = hl[i] = 0.0f;
  if (item_begin < item_end) stage(item_begin, 0);
  cp_async_wait_all();
  wgmma_fence_shared();
  __syncthreads();
  for (long long item = item_begin; item < item_end; ++item) {
    const int buffer = (int)((item - item_begin) & 1);
    if (item + 1 < item_end) stage(item + 1, buffer ^ 1);
    const int row_tile = (int)(item / a.col_tiles);
    const int r0 = a.row_begin + row_tile * BM + 16 * warp;
    if (row_tile != loaded_row_tile) {
      loaded_row_tile = row_tile;
      const int top = r0 + g, bottom = r0 + g + 8;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int w = 8 * ks + 4 * half + t;
          a_hi[ks][2 * half] = top < a.row_end ? a.y_hi[(size_t)top * WORDS + w] : 0u;
          a_hi[ks][2 * half + 1] = bottom < a.row_end ? a.y_hi[(size_t)bottom * WORDS + w] : 0u;
          a_lo[ks][2 * half] = top < a.row_end ? a.y_lo[(size_t)top * WORDS + w] : 0u;
          a_lo[ks][2 * half + 1] = bottom < a.row_end ? a.y_lo[(size_t)bottom * WORDS + w] : 0u;
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = r0 + g + 8 * h;
        row_square[h] = i < a.row_end ? a.squares[i] : 0.0f;
        spans[h] = i >= a.row_end ? 0 : (a.n % 2 == 0 && i >= a.half) ? a.half - 1 : a.half;
      }
    }
    const wgmma_hist_stage &s = stages[buffer];
    const int c0 = first_column(item);
    /* The whole warpgroup takes the products; a warp whose pairs all lie outside its band
     * counts nothing. Offsets of the warp's pairs lie in [c0 - r0 - 15, c0 + 63 - r0]. */
    const uint64_t hi_desc = wgmma_desc128(s.y_hi), lo_desc = wgmma_desc128(s.y_lo);
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(lh, a_lo[ks], wgmma_desc_step(hi_desc, ks), ks > 0);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(hl, a_hi[ks], wgmma_desc_step(lo_desc, ks), ks > 0);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(hh, a_hi[ks], wgmma_desc_step(hi_desc, ks), ks > 0);
    wgmma_commit();
    wgmma_wait();
    wgmma_fence_operands(lh);
    wgmma_fence_operands(hl);
    wgmma_fence_operands(hh);
    const int lowest = c0 - r0 - 15, highest = c0 + BN - 1 - r0;
    const int min_span = min(__shfl_sync(0xffffffffu, spans[0], 0), __shfl_sync(0xffffffffu, spans[1], 28));
    if (highest >= 1 && lowest <= a.half) { /* warp-uniform */
      /* Wholly inside every row's band: no offset checks. */
      const bool inside = lowest >= 1 && highest <= min_span && r0 + 16 <= a.row_end;
      unsigned below_item = 0u, above_item = 0u;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        uint32_t bins[4];
        bool counted[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int at = 4 * i + e, h = e >> 1, cl = 8 * i + 2 * t + (e & 1);
          const float dot = __fmul_rn(__fadd_rn(hh[at], __fadd_rn(lh[at], hl[at])), inv_scale2);
          const uint32_t bits = __float_as_uint(svgd_gemm_distance(row_square[h], s.squares[cl], dot));
          bool in_band = true;
          if (!inside) {
            const int offset = c0 + cl - (r0 + g + 8 * h);
            in_band = offset >= 1 && offset <= spans[h];
          }
          if (PASS == SVGD_MEDIAN_PASS_HIGH) {
            counted[e] = in_band;
            bins[e] = bits >> 16;
          } else if (PASS == SVGD_MEDIAN_PASS_LOW) {
            counted[e] = in_band && (bits >> 16) == a.select_bits;
            bins[e] = bits & 0xFFFFu;
          } else {
            const uint32_t window_offset = bits - a.select_bits; /* wraps for keys below the window */
            counted[e] = in_band && window_offset < SVGD_WINDOW_FINE_BINS;
            bins[e] = SVGD_WINDOW_FINE + window_offset;
            const bool outside = in_band && window_offset >= SVGD_WINDOW_FINE_BINS;
            below_item += outside && bits < a.select_bits;
            above_item += outside && bits >= a.select_bits;
          }
        }
        if (WINDOW) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (counted[e]) atomicAdd(&hist_s[bins[e]], 1u);
        } else {
          uint32_t olds[4];
#pragma unroll
          for (int e = 0; e < 4; ++e)
            olds[e] = counted[e] ? atomicAdd(&hist_s[bins[e] >> 1], 1u << ((bins[e] & 1u) << 4)) : 0u;
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (counted[e] && ((olds[e] >> ((bins[e] & 1u) << 4)) & 0xFFFFu) == 0xFFFFu)
              hist_settle_wrap(a.hist, bins[e], olds[e]);
        }
      }
      below += below_item;
      above += above_item;
    }
    cp_async_wait_all();
    wgmma_fence_shared();
    __syncthreads();
    if (WINDOW && (item - item_begin + 1) % a.window_flush == 0) {
      wgmma_window_flush(hist_s, THREADS, a.hist);
      __syncthreads();
    }
  }

  if (WINDOW) {
    wgmma_window_flush(hist_s, THREADS, a.hist);
    flash_hist_flush<PASS>(hist_s, 0, THREADS, below, above, outside_s, a.hist);
  } else {
    flash_hist_flush<PASS>(hist_s, H_WORDS, THREADS, below, above, outside_s, a.hist);
  }
#endif
}

/* D [rows][n] of rows row_begin .. as the two kernels above take them (flash_dot_tiles on the
 * same split values, columns read from global memory): for tests. A warp per 16 x 8 tile. */
template <int DP>
__global__ void svgd_flash_distances_kernel(const uint32_t *y_hi, const uint32_t *y_lo, const float *squares,
                                            const flash_scales *scales, long long n, long long row_begin,
                                            long long row_end, float *dist) {
  constexpr int KSTEPS = flash_dims<DP>::KSTEPS, WORDS = flash_dims<DP>::WORDS;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const long long r0 = row_begin + 16ll * blockIdx.x;
  const long long n0 = 8ll * ((long long)blockIdx.y * (blockDim.x / 32) + warp);
  if (n0 >= n) return; /* whole warps */
  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  flash_load_rows<DP>(y_hi, y_lo, r0, row_end, g, t, a_hi, a_lo);
  float dot[1][4];
  flash_dot_tiles<DP, 1>(a_hi, a_lo, y_hi + n0 * WORDS, y_lo + n0 * WORDS, WORDS, 0, flash_inv_scale2(scales), g, t,
                         dot);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const long long i = r0 + g + 8 * (e >> 1), j = n0 + 2 * t + (e & 1);
    if (i < row_end && j < n) dist[(i - row_begin) * n + j] = svgd_gemm_distance(squares[i], squares[j], dot[0][e]);
  }
}

/* ---------------------------------------------------------------- kernel Stein discrepancy */

constexpr int STEIN_THREADS = 256;
constexpr int STEIN_BM = 64;  /* rows per block: 16 thread rows x 4 */
constexpr int STEIN_BN = 64;  /* columns per tile: 16 thread columns x 4 */
constexpr int STEIN_KC = 16;  /* coordinates per stage */
constexpr int STEIN_STRIDE = 64 + 4;
static_assert(STEIN_BM == STEIN_BN, "the stage loop loads a row and a column per index");

struct stein_args {
  const float *x, *s;
  long long n, half, row_begin, row_end;
  long long tile_row0;  /* the first block's first row: row_begin rounded down to STEIN_BM */
  int dim, chunks, col_tiles;
  svgd_kernel_t kernel;
  double *row_sums;     /* [row_end - row_begin] */
};

/* One block per 64 rows, aligned on multiples of 64 in the global numbering, walks all of its
 * rows' pairs (i, i + k mod n), k = 1 .. span(i), in 64-column tiles: D, A and S of a 4 x 4
 * block of pairs per thread, coordinates streamed through shared memory (cp.async, double
 * buffered), fma chains k ascending as the CPU's. u_p of each pair is added in double to its
 * thread's row sum; at the end the 16 threads of a row add theirs in a fixed tree. A pair's
 * thread and the order of its row's additions follow from i and n alone (the tiles are aligned
 * globally and a block takes a row tile whole), so the sums are the same on any number of ranks. */
__global__ void __launch_bounds__(STEIN_THREADS, 2) svgd_stein_sum_kernel(const stein_args a) {
  __shared__ __align__(16) float rows_x[2][STEIN_KC][STEIN_STRIDE], rows_s[2][STEIN_KC][STEIN_STRIDE];
  __shared__ __align__(16) float cols_x[2][STEIN_KC][STEIN_STRIDE], cols_s[2][STEIN_KC][STEIN_STRIDE];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const long long r0 = a.tile_row0 + (long long)blockIdx.x * STEIN_BM;
  const long long steps = (long long)a.col_tiles * a.chunks;
  auto stage = [&](long long step, int buffer) {
    const int col_tile = (int)(step / a.chunks), chunk = (int)(step % a.chunks);
    const long long c0 = r0 + 1 + (long long)col_tile * STEIN_BN;
    for (int f = tid; f < STEIN_BM * STEIN_KC; f += STEIN_THREADS) {
      const int rr = f / STEIN_KC, kk = f % STEIN_KC, k = chunk * STEIN_KC + kk;
      const long long row = r0 + rr;
      const bool valid = row < a.n && k < a.dim;
      const size_t at = valid ? (size_t)row * a.dim + k : 0;
      cp_async_f32(&rows_x[buffer][kk][rr], a.x + at, valid);
      cp_async_f32(&rows_s[buffer][kk][rr], a.s + at, valid);
      long long column = c0 + rr;
      if (column >= a.n) column -= a.n;
      if (column >= a.n) column %= a.n;
      const bool column_valid = k < a.dim;
      const size_t column_at = column_valid ? (size_t)column * a.dim + k : 0;
      cp_async_f32(&cols_x[buffer][kk][rr], a.x + column_at, column_valid);
      cp_async_f32(&cols_s[buffer][kk][rr], a.s + column_at, column_valid);
    }
  };
  float distance[4][4], along[4][4], scores[4][4];
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int c = 0; c < 4; ++c) distance[r][c] = along[r][c] = scores[r][c] = 0.0f;
  double row_sum[4] = {0.0, 0.0, 0.0, 0.0};
  const double dim = (double)a.dim;

  if (steps > 0) stage(0, 0);
  cp_async_wait_all();
  __syncthreads();
  for (long long step = 0; step < steps; ++step) {
    const int buffer = (int)(step & 1);
    if (step + 1 < steps) stage(step + 1, buffer ^ 1);
#pragma unroll
    for (int kk = 0; kk < STEIN_KC; ++kk) {
      const float4 xr4 = *reinterpret_cast<const float4 *>(&rows_x[buffer][kk][ty * 4]);
      const float4 sr4 = *reinterpret_cast<const float4 *>(&rows_s[buffer][kk][ty * 4]);
      const float4 xc4 = *reinterpret_cast<const float4 *>(&cols_x[buffer][kk][tx * 4]);
      const float4 sc4 = *reinterpret_cast<const float4 *>(&cols_s[buffer][kk][tx * 4]);
      const float xr[4] = {xr4.x, xr4.y, xr4.z, xr4.w}, sr[4] = {sr4.x, sr4.y, sr4.z, sr4.w};
      const float xc[4] = {xc4.x, xc4.y, xc4.z, xc4.w}, sc[4] = {sc4.x, sc4.y, sc4.z, sc4.w};
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float rd = __fsub_rn(xr[r], xc[c]), td = __fsub_rn(sr[r], sc[c]);
          distance[r][c] = __fmaf_rn(rd, rd, distance[r][c]);
          along[r][c] = __fmaf_rn(td, rd, along[r][c]);
          scores[r][c] = __fmaf_rn(sr[r], sc[c], scores[r][c]);
        }
    }
    if ((int)(step % a.chunks) == a.chunks - 1) { /* the tile's sums are complete */
      const long long first_offset = 1 + (step / a.chunks) * STEIN_BN + tx * 4 - ty * 4;
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const long long i = r0 + ty * 4 + r;
        const long long span = (a.n % 2 == 0 && i >= a.half) ? a.half - 1 : a.half;
        const bool row_valid = i >= a.row_begin && i < a.row_end;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const long long offset = first_offset + c - r;
          if (row_valid && offset >= 1 && offset <= span)
            row_sum[r] += svgd_stein_pair(&a.kernel, dim, distance[r][c], along[r][c], scores[r][c]);
          distance[r][c] = along[r][c] = scores[r][c] = 0.0f;
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int width = 8; width >= 1; width /= 2) row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], width);
  if (tx == 0) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const long long i = r0 + ty * 4 + r;
      if (i < a.row_begin || i >= a.row_end) continue;
      const float *s_i = a.s + i * a.dim;
      float square = 0.0f;
      for (int k = 0; k < a.dim; ++k) square = __fmaf_rn(s_i[k], s_i[k], square);
      a.row_sums[i - a.row_begin] = svgd_stein_diagonal(&a.kernel, dim, square) + 2.0 * row_sum[r];
    }
  }
}


/* The KSD's Stein sum on the warpgroup tiles (rbf, 33 to 64 coordinates, sm_90a). With
 * y = x - x_0, v = s - y / h and w = -s / h,
 *   S + A / h = s_i.s_j + (s_i - s_j).(y_i - y_j) / h = s_i.v_j + y_i.w_j + c_i + c_j,
 * c_i = s_i.y_i / h, so that u_ij = k_ij (s_i.v_j + y_i.w_j + c_i + c_j + d / h - D_ij / h^2)
 * takes one product of the rows' [s_i | y_i] with the columns' [v_j | w_j] (k = 128) beside
 * the distances' y_i.y_j. Every operand is an fp16 hi/lo split (3 products, as the distances)
 * under a power of two: the rows' s by 2^p and y by 2^sy (the distances' split), the columns'
 * v by 2^(c - p) and w by 2^(c - sy), so the one float chain holds 2^c (s_i.v_j + y_i.w_j);
 * c is the largest that keeps every column operand within fp16 and 2^c times the bracket's
 * other terms within float (wgmma_ksd_scales). The row and column terms come scaled the same:
 * rowterm_i = 2^c (c_i + d / h), colterm_j = 2^c c_j, and 2^c / h^2 multiplies D. */
struct wgmma_ksd_scales {
  uint32_t s_max, v_max, w_max, c_max; /* the largest |s|, |v|, |w|, |c_j| as float bits */
  int p, cv, cw, c;                    /* the exponents above */
  float d_factor;                      /* 2^c / h^2 */
};

/* 2^e x for e <= 254 (two exact steps where 2^e is no normal float; below 2^-252, 0 x, which
 * keeps inf and NaN). */
__device__ __forceinline__ float scale_pow2(float x, int e) {
  if (e >= -126 && e <= 127) return __fmul_rn(x, pow2_exact(e));
  if (e < -252) return __fmul_rn(x, 0.0f);
  const int first = e / 2;
  return __fmul_rn(__fmul_rn(x, pow2_exact(first)), pow2_exact(e - first));
}

/* A warp per particle j: c_j = s_j.y_j / h and |s_j|^2 in double, the largest |v|, |w| and |c|. */
__global__ void svgd_ksd_terms_kernel(const float *score, const float *centred, long long n, int dim, float h,
                                      double *c_terms, double *score_squares, wgmma_ksd_scales *ks) {
  const int lane = threadIdx.x % 32;
  uint32_t v_max = 0u, w_max = 0u, c_max = 0u;
  for (long long j = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32; j < n;
       j += (long long)gridDim.x * blockDim.x / 32) {
    double sy = 0.0, ss = 0.0;
    for (int k = lane; k < dim; k += 32) {
      const float s = score[j * dim + k], y = centred[j * dim + k];
      sy += (double)s * (double)y;
      ss += (double)s * (double)s;
      v_max = max(v_max, __float_as_uint(flash_v_value(score, centred, j * dim + k, FLASH_V_RBF, h)) & 0x7fffffffu);
      w_max = max(w_max, __float_as_uint(__fdiv_rn(s, h)) & 0x7fffffffu);
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      sy += __shfl_xor_sync(0xffffffffu, sy, offset);
      ss += __shfl_xor_sync(0xffffffffu, ss, offset);
    }
    if (lane == 0) {
      c_terms[j] = sy / (double)h;
      score_squares[j] = ss;
      c_max = max(c_max, __float_as_uint((float)fabs(sy / (double)h)) & 0x7fffffffu);
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    v_max = max(v_max, __shfl_xor_sync(0xffffffffu, v_max, offset));
    w_max = max(w_max, __shfl_xor_sync(0xffffffffu, w_max, offset));
    c_max = max(c_max, __shfl_xor_sync(0xffffffffu, c_max, offset));
  }
  if (lane == 0) {
    if (v_max) atomicMax(&ks->v_max, v_max);
    if (w_max) atomicMax(&ks->w_max, w_max);
    if (c_max) atomicMax(&ks->c_max, c_max);
  }
}

/* The exponents of wgmma_ksd_scales from the largest magnitudes (one thread). */
__global__ void svgd_ksd_scales_kernel(const flash_scales *fs, wgmma_ksd_scales *ks, float h, int dim) {
  const int sy = f16_scale_exponent(float_exponent_of_bits(fs->y_max), FLASH_Y_SCALE_LIMIT);
  const int p = f16_scale_exponent(float_exponent_of_bits(ks->s_max), 126);
  const int rv = f16_scale_exponent(float_exponent_of_bits(ks->v_max), 126);
  const int rw = f16_scale_exponent(float_exponent_of_bits(ks->w_max), 126);
  /* A bound of the bracket's other terms: |c_i| + |c_j| + d / h + D / h^2, D <= 4 max |y|^2. */
  const double y_max = (double)__uint_as_float(fs->y_max), c_max = (double)__uint_as_float(ks->c_max);
  const double hd = (double)h;
  const double bound = 2.0 * c_max + (double)dim / hd + 4.0 * y_max * y_max / (hd * hd);
  const int cap = bound > 0.0 && bound < 1e300 ? 100 - ilogb(bound) : 0;
  /* p + rv >= -226 for float data, so the floor only binds where the cap does: terms past 2^350,
   * which then overflow and are reported, never wrong. */
  const int c = max(-250, min(min(p + rv, sy + rw), cap));
  ks->p = p;
  ks->c = c;
  ks->cv = c - p;
  ks->cw = c - sy;
  ks->d_factor = (float)fmin(ldexp(1.0 / (hd * hd), c), 3.0e38);
}

/* hi, lo [padded rows][32 words] in coordinate order, zeros past dim and n, of s 2^p (mode 0),
 * v 2^cv (1) or w 2^cw (2); with mode 0 also rowterm and colterm [n]. */
__global__ void svgd_ksd_split_kernel(const float *score, const float *centred, const double *c_terms, long long n,
                                      long long padded_rows, int dim, float h, int mode, const wgmma_ksd_scales *ks,
                                      uint32_t *hi, uint32_t *lo, float *rowterm, float *colterm) {
  const int e = mode == 0 ? ks->p : mode == 1 ? ks->cv : ks->cw;
  auto value = [&](long long j, int k) {
    if (j >= n || k >= dim) return 0.0f;
    const float s = score[j * dim + k];
    const float v = mode == 0 ? s : mode == 1 ? flash_v_value(score, centred, j * dim + k, FLASH_V_RBF, h) : -__fdiv_rn(s, h);
    return scale_pow2(v, e);
  };
  for (long long f = (long long)blockIdx.x * blockDim.x + threadIdx.x; f < padded_rows * 32;
       f += (long long)gridDim.x * blockDim.x) {
    const long long j = f / 32;
    const int k = (int)(2 * (f - j * 32));
    f16_split2(value(j, k), value(j, k + 1), &hi[f], &lo[f]);
    if (mode == 0 && k == 0 && j < n) {
      rowterm[j] = (float)ldexp(c_terms[j] + (double)dim / (double)h, ks->c);
      colterm[j] = (float)ldexp(c_terms[j], ks->c);
    }
  }
}

constexpr int KSD_WARPGROUPS = 2, KSD_BM = 64 * KSD_WARPGROUPS, KSD_BN = 64;

struct wgmma_ksd_stage { /* each array 8192 bytes, on 1024 */
  uint32_t y_hi[2048], y_lo[2048], v_hi[2048], v_lo[2048], w_hi[2048], w_lo[2048];
  float squares[KSD_BN], colterm[KSD_BN];
  uint32_t pad[256 - 2 * KSD_BN];
};
static_assert(sizeof(wgmma_ksd_stage) % 1024 == 0, "stages on 1024 bytes");
constexpr size_t WGMMA_KSD_SMEM = 1024 + 2 * sizeof(wgmma_ksd_stage);

struct wgmma_ksd_args {
  const uint32_t *y_hi, *y_lo, *s_hi, *s_lo, *v_hi, *v_lo, *w_hi, *w_lo; /* [padded rows][32] */
  const float *squares, *rowterm, *colterm;                               /* [n] */
  const double *score_squares;                                            /* [n] |s_j|^2 */
  const flash_scales *scales;
  const wgmma_ksd_scales *ksd;
  int n, half, row_begin, row_end, tile_row0, col_tiles;
  float exp2_scale; /* -log2(e) / (2h) */
  double diagonal;  /* d / h: u_ii = |s_i|^2 + d / h */
  double *row_sums; /* [row_end - row_begin] */
};

/* A block per 128 rows, aligned on multiples of 128 in the global numbering, walks all of its
 * rows' pairs (i, i + offset mod n), offset 1 .. span(i), in 64-column tiles in order (double
 * buffered, a block barrier a tile). Each thread adds its 16 pairs of a row in a tile in float
 * (columns ascending), that into its row's double sum; at the end the 4 threads of a row add
 * theirs in a fixed tree. A row's sum follows from i and n alone (the tiles are aligned globally
 * and a block takes a row tile whole), so it is the same on any number of ranks. */
__global__ void __launch_bounds__(128 * KSD_WARPGROUPS, 1) svgd_wgmma_stein_kernel(const wgmma_ksd_args a) {
#ifdef DSAMPLER_WGMMA_DEVICE
  constexpr int THREADS = 128 * KSD_WARPGROUPS, BN = KSD_BN, KSTEPS = 4, WORDS = 32;
  extern __shared__ float4 wgmma_shared_raw[];
  const uint32_t misalign = (uint32_t)__cvta_generic_to_shared(wgmma_shared_raw) & 1023u;
  wgmma_ksd_stage *stages =
      reinterpret_cast<wgmma_ksd_stage *>(reinterpret_cast<char *>(wgmma_shared_raw) + ((1024u - misalign) & 1023u));
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int tile0 = a.tile_row0 + blockIdx.x * KSD_BM;
  const int r0 = tile0 + 16 * warp; /* the warp's rows */
  const float minus_two_inv_scale2 = -2.0f * flash_inv_scale2(a.scales);
  const float d_factor = a.ksd->d_factor;

  auto stage = [&](int col_tile, int buffer) {
    wgmma_ksd_stage &s = stages[buffer];
    const long long c0 = (long long)tile0 + 1 + (long long)col_tile * BN;
    for (int f = tid; f < 512; f += THREADS) {
      const int r = f / 8, q = f % 8, dst = wgmma_swizzle128(r, 16 * q) / 4;
      const size_t at = (size_t)((c0 + r) % a.n) * WORDS + 4 * q;
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_hi[dst]), reinterpret_cast<const float *>(a.y_hi + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.y_lo[dst]), reinterpret_cast<const float *>(a.y_lo + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.v_hi[dst]), reinterpret_cast<const float *>(a.v_hi + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.v_lo[dst]), reinterpret_cast<const float *>(a.v_lo + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.w_hi[dst]), reinterpret_cast<const float *>(a.w_hi + at), true);
      cp_async_f32x4(reinterpret_cast<float *>(&s.w_lo[dst]), reinterpret_cast<const float *>(a.w_lo + at), true);
    }
    if (tid < BN) {
      const size_t column = (size_t)((c0 + tid) % a.n);
      cp_async_f32(&s.squares[tid], a.squares + column, true);
      cp_async_f32(&s.colterm[tid], a.colterm + column, true);
    }
  };

  /* The rows' A fragments in coordinate order (a[0] holds coordinates 2t, 2t + 1): y and s. */
  uint32_t y_hi[KSTEPS][4], y_lo[KSTEPS][4], s_hi[KSTEPS][4], s_lo[KSTEPS][4];
  float row_square[2], rowterm[2];
  int spans[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = r0 + g + 8 * h;
    const bool exists = i < a.n;
    row_square[h] = exists ? a.squares[i] : 0.0f;
    rowterm[h] = exists ? a.rowterm[i] : 0.0f;
    spans[h] = i < a.row_begin || i >= a.row_end ? 0 : (a.n % 2 == 0 && i >= a.half) ? a.half - 1 : a.half;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const size_t at = (size_t)i * WORDS + 8 * ks + 4 * half + t;
        y_hi[ks][2 * half + h] = exists ? a.y_hi[at] : 0u;
        y_lo[ks][2 * half + h] = exists ? a.y_lo[at] : 0u;
        s_hi[ks][2 * half + h] = exists ? a.s_hi[at] : 0u;
        s_lo[ks][2 * half + h] = exists ? a.s_lo[at] : 0u;
      }
  }
  const int min_span = min(__shfl_sync(0xffffffffu, spans[0], 0), __shfl_sync(0xffffffffu, spans[1], 28));
  double row_sum[2] = {0.0, 0.0};
  float dots[32], bracket[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) dots[i] = bracket[i] = 0.0f;

  if (a.col_tiles > 0) stage(0, 0);
  cp_async_wait_all();
  wgmma_fence_shared();
  __syncthreads();
  for (int col_tile = 0; col_tile < a.col_tiles; ++col_tile) {
    const int buffer = col_tile & 1;
    if (col_tile + 1 < a.col_tiles) stage(col_tile + 1, buffer ^ 1);
    const wgmma_ksd_stage &s = stages[buffer];
    const uint64_t yh = wgmma_desc128(s.y_hi), yl = wgmma_desc128(s.y_lo);
    const uint64_t vh = wgmma_desc128(s.v_hi), vl = wgmma_desc128(s.v_lo);
    const uint64_t wh = wgmma_desc128(s.w_hi), wl = wgmma_desc128(s.w_lo);
    wgmma_fence();
    wgmma_split_chain(dots, y_hi, y_lo, yh, yl);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(bracket, s_lo[ks], wgmma_desc_step(vh, ks), ks > 0);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(bracket, y_lo[ks], wgmma_desc_step(wh, ks), 1);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(bracket, s_hi[ks], wgmma_desc_step(vl, ks), 1);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(bracket, y_hi[ks], wgmma_desc_step(wl, ks), 1);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(bracket, s_hi[ks], wgmma_desc_step(vh, ks), 1);
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) wgmma_m64n64k16(bracket, y_hi[ks], wgmma_desc_step(wh, ks), 1);
    wgmma_commit();
    wgmma_wait();
    wgmma_fence_operands(dots);
    wgmma_fence_operands(bracket);
    const int c0 = tile0 + 1 + col_tile * BN;
    const int lowest = c0 - r0 - 15, highest = c0 + BN - 1 - r0;
    if (highest >= 1 && lowest <= a.half) { /* warp-uniform */
      const bool inside = lowest >= 1 && highest <= min_span; /* wholly inside every row's band */
      float part[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 8; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int at = 4 * i + e, h = e >> 1, cl = 8 * i + 2 * t + (e & 1);
          float d = __fmaf_rn(dots[at], minus_two_inv_scale2, __fadd_rn(row_square[h], s.squares[cl]));
          d = (d > 0.0f || d != d) ? d : 0.0f;
          const float k = exp2f(__fmul_rn(d, a.exp2_scale));
          const float b = __fmaf_rn(-d, d_factor, __fadd_rn(bracket[at], __fadd_rn(rowterm[h], s.colterm[cl])));
          const float u = __fmul_rn(k, b);
          bool in_band = true;
          if (!inside) {
            const int offset = c0 + cl - (r0 + g + 8 * h);
            in_band = offset >= 1 && offset <= spans[h];
          }
          part[h] = __fadd_rn(part[h], in_band ? u : 0.0f);
        }
      row_sum[0] += (double)part[0];
      row_sum[1] += (double)part[1];
    }
    cp_async_wait_all();
    wgmma_fence_shared();
    __syncthreads();
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 1);
    row_sum[h] += __shfl_xor_sync(0xffffffffu, row_sum[h], 2);
    const int i = r0 + g + 8 * h;
    if (t == 0 && i >= a.row_begin && i < a.row_end)
      a.row_sums[i - a.row_begin] = a.score_squares[i] + a.diagonal + 2.0 * ldexp(row_sum[h], -a.ksd->c);
  }
#endif
}
/* totals[0 .. EXACT_DIGITS) += the exact digits of values[0 .. count), totals[EXACT_DIGITS] counts
 * values out of the exact sums' range (values below 1e-300 count as 0). */
__global__ void exact_sum_values_kernel(const double *values, long long count, unsigned long long *totals) {
  int64_t digits[EXACT_DIGITS];
  for (int d = 0; d < EXACT_DIGITS; ++d) digits[d] = 0;
  unsigned long long failed = 0;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    double v = values[e];
    if (fabs(v) < 1e-300) v = 0.0;
    failed += exact_digits_add(digits, v) != 0;
  }
  for (int d = 0; d < EXACT_DIGITS; ++d) {
    long long value = digits[d];
    for (int width = 16; width >= 1; width /= 2) value += __shfl_down_sync(0xffffffffu, value, width);
    if (threadIdx.x % 32 == 0 && value) atomicAdd(totals + d, (unsigned long long)value);
  }
  for (int width = 16; width >= 1; width /= 2) failed += __shfl_down_sync(0xffffffffu, failed, width);
  if (threadIdx.x % 32 == 0 && failed) atomicAdd(totals + EXACT_DIGITS, failed);
}

/* ---------------------------------------------------------------- update, gaussian */

/* The update of backend.h, operation for operation as the CPU backend (no contraction). */
__global__ void svgd_update_kernel(float *x, const float *phi, float *g, long long count, int kind,
                                   float step, int first_iteration, float correction1, float correction2) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x) {
    const float phi_e = phi[e];
    if (kind == SVGD_UPDATE_SGD) {
      x[e] = __fadd_rn(x[e], __fmul_rn(step, phi_e));
    } else if (kind == SVGD_UPDATE_ADAM) {
      float *m = g, *v = g + count;
      const float m_old = first_iteration ? 0.0f : m[e], v_old = first_iteration ? 0.0f : v[e];
      const float m_new = __fadd_rn(__fmul_rn(0.9f, m_old), __fmul_rn(0.1f, phi_e));
      const float v_new = __fadd_rn(__fmul_rn(0.999f, v_old), __fmul_rn(0.001f, __fmul_rn(phi_e, phi_e)));
      m[e] = m_new;
      v[e] = v_new;
      const float denominator = __fadd_rn(__fsqrt_rn(__fdiv_rn(v_new, correction2)), 1e-8f);
      x[e] = __fadd_rn(x[e], __fdiv_rn(__fmul_rn(step, __fdiv_rn(m_new, correction1)), denominator));
    } else {
      const float phi2 = __fmul_rn(phi_e, phi_e);
      const float g_e = first_iteration ? phi2 : __fadd_rn(__fmul_rn(0.9f, g[e]), __fmul_rn(0.1f, phi2));
      g[e] = g_e;
      x[e] = __fadd_rn(x[e], __fdiv_rn(__fmul_rn(step, phi_e), __fadd_rn(1e-6f, sqrtf(g_e))));
    }
  }
}

int grid_for(long long count, int threads) {
  long long blocks = (count + threads - 1) / threads;
  if (blocks > 65536) blocks = 65536;
  return blocks < 1 ? 1 : (int)blocks;
}

template <int DP>
int launch_phi_tiled(const phi_args &a, long long row_blocks, cudaStream_t stream) {
  const size_t smem = phi_smem_bytes<DP>();
  CUDA_CHECK(cudaFuncSetAttribute(svgd_phi_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  dim3 grid((unsigned)row_blocks, (unsigned)a.splits);
  svgd_phi_kernel<DP><<<grid, PHI_THREADS, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_phi_kernel");
  return DS_OK;
}

template <int KC, int PASS, bool GEMM, bool KEEP>
int launch_pair_histogram_kernel(const pair_histogram_args &a, long long blocks, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(svgd_pair_histogram_kernel<KC, PASS, GEMM, KEEP>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)hist_smem_bytes(KC)));
  svgd_pair_histogram_kernel<KC, PASS, GEMM, KEEP><<<(unsigned)blocks, HIST_THREADS, hist_smem_bytes(KC), stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_pair_histogram_kernel");
  return DS_OK;
}

template <int KC, bool GEMM>
int launch_pair_histogram(const pair_histogram_args &a, int pass, long long blocks, cudaStream_t stream) {
  /* Keeping the distances is a kernel of its own: the writes cost the others registers (the
   * window pass at d = 1024, N = 16384 measured 8.9 ms with them compiled in, 7.3 without). */
  if (GEMM && a.dist) {
    if (pass == PASS_COMPLEMENT) return launch_pair_histogram_kernel<KC, PASS_COMPLEMENT, true, true>(a, blocks, stream);
    if (pass == SVGD_MEDIAN_PASS_HIGH) return launch_pair_histogram_kernel<KC, SVGD_MEDIAN_PASS_HIGH, true, true>(a, blocks, stream);
    if (pass == SVGD_MEDIAN_PASS_LOW) return launch_pair_histogram_kernel<KC, SVGD_MEDIAN_PASS_LOW, true, true>(a, blocks, stream);
    return launch_pair_histogram_kernel<KC, SVGD_MEDIAN_PASS_WINDOW, true, true>(a, blocks, stream);
  }
  if (pass == SVGD_MEDIAN_PASS_HIGH) return launch_pair_histogram_kernel<KC, SVGD_MEDIAN_PASS_HIGH, GEMM, false>(a, blocks, stream);
  if (pass == SVGD_MEDIAN_PASS_LOW) return launch_pair_histogram_kernel<KC, SVGD_MEDIAN_PASS_LOW, GEMM, false>(a, blocks, stream);
  return launch_pair_histogram_kernel<KC, SVGD_MEDIAN_PASS_WINDOW, GEMM, false>(a, blocks, stream);
}

/* y_j = x_j - x_0 (svgd_kernel_math.h's centring); blocks over rows. */
__global__ void svgd_centre_kernel(const float *x, long long n, int dim, float *y) {
  for (long long j = blockIdx.x; j < n; j += gridDim.x)
    for (int k = threadIdx.x; k < dim; k += blockDim.x) y[j * dim + k] = __fsub_rn(x[j * dim + k], x[k]);
}

/* The centred rows y [n][dim] of x and, unless squares is NULL, |y_j|^2 [n]: the GEMM identity's
 * inputs, for the median's passes and for phi. */
int launch_centred_rows(const float *x, long long n, int dim, float *y, float *squares, cudaStream_t stream) {
  svgd_centre_kernel<<<grid_for(n, 1), 256, 0, stream>>>(x, n, dim, y);
  CUDA_CHECK_LAUNCH("svgd_centre_kernel");
  if (squares) {
    svgd_squares_kernel<<<squares_grid(n), SQUARES_THREADS, 0, stream>>>(y, n, dim, squares);
    CUDA_CHECK_LAUNCH("svgd_squares_kernel");
  }
  return DS_OK;
}

/* Whether the distances are the tensor cores' (svgd_flash_* kernels). */
/* Below FLASH_MIN_DIM coordinates the GEMM identity's cancellation (|y|^2 against D) costs more
 * than 2e-6 of phi (d = 1: 3.5e-6 measured) and there is no product to speak of: direct
 * differences on the CUDA cores, as before, bitwise the CPU's. */
constexpr int FLASH_MIN_DIM = 4;
bool flash_dims_apply(long long dim) { return dim >= FLASH_MIN_DIM && dim <= FLASH_MAX_DIM; }

/* Whether the build has sm_90a's code and the device is of compute capability 9.0; phi takes the
 * warpgroup products there at 64 padded coordinates (svgd_cuda_tuning_t.phi_family may choose). */
bool wgmma_device() {
#ifdef DSAMPLER_HAVE_WGMMA
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;
#else
  return false;
#endif
}

bool flash_phi_wgmma(long long dim) {
  return flash_padded_dim(dim) == 64 && svgd_tuning.phi_family != 1 && wgmma_device();
}

/* The same for the median's passes (svgd_cuda_tuning_t.median_family). */
bool flash_median_wgmma(long long dim) {
  return flash_padded_dim(dim) == 64 && svgd_tuning.median_family != 1 && wgmma_device();
}

/* Column splits of the flash phi: a function of n alone (never of the local rows), so sums run
 * in the same order on any number of ranks; small n gets more blocks to fill the device. */
int flash_splits(long long n) {
  const long long tiles = (n + FLASH_BN - 1) / FLASH_BN;
  long long splits = 65536 / (n > 0 ? n : 1);
  if (splits > FLASH_MAX_SPLITS) splits = FLASH_MAX_SPLITS;
  if (splits > tiles) splits = tiles;
  return splits < 1 ? 1 : (int)splits;
}

/* The flash kernels' inputs in scratch, each on 16 bytes: centred rows y [n][dim], |y|^2 [n],
 * the scales, y hi and lo [padded rows][DP / 2 words]; with_v: v hi and lo the same size. */
struct flash_inputs {
  float *centred, *squares;
  flash_scales *scales;
  uint32_t *y_hi, *y_lo, *v_hi, *v_lo;
};

float *align16(float *p) {
  return reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(p) + 15) & ~static_cast<uintptr_t>(15));
}

size_t flash_split_words(long long n, long long dim) {
  return (size_t)flash_padded_rows(n) * (size_t)flash_padded_dim(dim) / 2;
}

size_t flash_inputs_floats(long long n, long long dim, bool with_v) {
  return (size_t)n * (size_t)dim + (size_t)n + sizeof(flash_scales) / sizeof(float) +
         (with_v ? 4 : 2) * flash_split_words(n, dim) + 4 * 7;
}

flash_inputs flash_layout(float *scratch, long long n, long long dim, bool with_v) {
  const size_t split = flash_split_words(n, dim);
  flash_inputs in;
  in.centred = align16(scratch);
  in.squares = align16(in.centred + (size_t)n * (size_t)dim);
  in.scales = reinterpret_cast<flash_scales *>(align16(in.squares + n));
  in.y_hi = reinterpret_cast<uint32_t *>(align16(reinterpret_cast<float *>(in.scales + 1)));
  in.y_lo = reinterpret_cast<uint32_t *>(align16(reinterpret_cast<float *>(in.y_hi + split)));
  in.v_hi = with_v ? reinterpret_cast<uint32_t *>(align16(reinterpret_cast<float *>(in.y_lo + split))) : NULL;
  in.v_lo = with_v ? reinterpret_cast<uint32_t *>(align16(reinterpret_cast<float *>(in.v_hi + split))) : NULL;
  return in;
}

/* y, |y|^2, the largest |y| and y split, from x. */
int flash_prepare_rows(const float *x, long long n, int dim, const flash_inputs &in, cudaStream_t stream,
                       bool natural = false) {
  DS_TRY(launch_centred_rows(x, n, dim, in.centred, in.squares, stream));
  CUDA_CHECK(cudaMemsetAsync(in.scales, 0, sizeof(flash_scales), stream));
  svgd_flash_max_abs_kernel<<<grid_for(n * dim, 256) < 1024 ? grid_for(n * dim, 256) : 1024, 256, 0, stream>>>(
      in.centred, n * dim, &in.scales->y_max);
  CUDA_CHECK_LAUNCH("svgd_flash_max_abs_kernel");
  const int dp = flash_padded_dim(dim);
  const long long padded = flash_padded_rows(n);
  svgd_flash_split_kernel<<<grid_for(padded * dp / 2, 256), 256, 0, stream>>>(in.centred, n, padded, dim, dp, natural,
                                                                              in.scales, in.y_hi, in.y_lo);
  CUDA_CHECK_LAUNCH("svgd_flash_split_kernel");
  return DS_OK;
}

template <int DP, int PASS>
int launch_flash_histogram_kernel(const flash_hist_args &a, long long blocks, cudaStream_t stream) {
  const size_t smem = flash_hist_smem_bytes<DP, PASS>();
  CUDA_CHECK(cudaFuncSetAttribute(svgd_flash_histogram_kernel<DP, PASS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)smem));
  /* A persistent grid of as many blocks as fit (the counts are integers: any grid sums them
   * the same). */
  int per_sm = 1;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, svgd_flash_histogram_kernel<DP, PASS>,
                                                           FLASH_THREADS, smem));
  if (per_sm > 1) blocks *= per_sm;
  if (blocks > a.total_tiles) blocks = a.total_tiles;
  svgd_flash_histogram_kernel<DP, PASS><<<(unsigned)blocks, FLASH_THREADS, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_flash_histogram_kernel");
  return DS_OK;
}

template <int DP>
int launch_flash_histogram_pass(const flash_hist_args &a, int pass, long long blocks, cudaStream_t stream) {
  if (pass == SVGD_MEDIAN_PASS_HIGH) return launch_flash_histogram_kernel<DP, SVGD_MEDIAN_PASS_HIGH>(a, blocks, stream);
  if (pass == SVGD_MEDIAN_PASS_LOW) return launch_flash_histogram_kernel<DP, SVGD_MEDIAN_PASS_LOW>(a, blocks, stream);
  return launch_flash_histogram_kernel<DP, SVGD_MEDIAN_PASS_WINDOW>(a, blocks, stream);
}

template <int PASS>
int launch_wgmma_histogram_kernel(const flash_hist_args &a, long long blocks, cudaStream_t stream) {
  const size_t smem = wgmma_hist_smem_bytes<PASS>();
  auto kernel = svgd_wgmma_histogram_kernel<PASS>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  int per_sm = 1;
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 128 * WGMMA_WARPGROUPS, smem));
  if (per_sm > 1) blocks *= per_sm;
  if (blocks > a.total_tiles) blocks = a.total_tiles;
  kernel<<<(unsigned)blocks, 128 * WGMMA_WARPGROUPS, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_wgmma_histogram_kernel");
  return DS_OK;
}

int launch_flash_histogram(const float *x_all, long long n, int dim, long long row_begin, long long row_end, int pass,
                           uint32_t select_bits, unsigned long long *hist, float *scratch, int sm_count,
                           cudaStream_t stream) {
  const flash_inputs in = flash_layout(scratch, n, dim, false);
  const bool wgmma = flash_median_wgmma(dim);
  DS_TRY(flash_prepare_rows(x_all, n, dim, in, stream, wgmma));
  flash_hist_args a;
  a.y_hi = in.y_hi;
  a.y_lo = in.y_lo;
  a.squares = in.squares;
  a.scales = in.scales;
  a.n = (int)n;
  a.half = (int)(n / 2);
  a.row_begin = (int)row_begin;
  a.row_end = (int)row_end;
  /* Offsets up to half for rows up to FLASH_BM - 1 below a tile's first row. */
  a.col_tiles = (int)((FLASH_BM - 1 + a.half + FLASH_BN - 1) / FLASH_BN);
  a.total_tiles = (row_end - row_begin + FLASH_BM - 1) / FLASH_BM * (long long)a.col_tiles;
  a.select_bits = select_bits;
  a.hist = hist;
  long long blocks = sm_count > 0 ? sm_count : 1;
  if (wgmma) {
    const int bm = 64 * WGMMA_WARPGROUPS;
    /* Each tile adds at most bm x 64 to a window counter. */
    const long long most = 0xFFFFFFFFll / (bm * WGMMA_PHI_BN);
    a.window_flush = svgd_tuning.window_flush > 0 && svgd_tuning.window_flush < most ? svgd_tuning.window_flush : most;
    a.col_tiles = (int)((bm - 1 + a.half + WGMMA_PHI_BN - 1) / WGMMA_PHI_BN);
    a.total_tiles = (row_end - row_begin + bm - 1) / bm * (long long)a.col_tiles;
    if (blocks > a.total_tiles) blocks = a.total_tiles;
    if (pass == SVGD_MEDIAN_PASS_HIGH) return launch_wgmma_histogram_kernel<SVGD_MEDIAN_PASS_HIGH>(a, blocks, stream);
    if (pass == SVGD_MEDIAN_PASS_LOW) return launch_wgmma_histogram_kernel<SVGD_MEDIAN_PASS_LOW>(a, blocks, stream);
    return launch_wgmma_histogram_kernel<SVGD_MEDIAN_PASS_WINDOW>(a, blocks, stream);
  }
  if (blocks > a.total_tiles) blocks = a.total_tiles;
  switch (flash_padded_dim(dim)) {
    case 16: return launch_flash_histogram_pass<16>(a, pass, blocks, stream);
    case 32: return launch_flash_histogram_pass<32>(a, pass, blocks, stream);
    default: return launch_flash_histogram_pass<64>(a, pass, blocks, stream);
  }
}

template <int DP>
int launch_flash_phi_kernel(const flash_phi_args &a, long long row_blocks, cudaStream_t stream) {
  const size_t smem = 2 * sizeof(flash_phi_stage<DP>);
  CUDA_CHECK(cudaFuncSetAttribute(svgd_flash_phi_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  svgd_flash_phi_kernel<DP><<<dim3((unsigned)row_blocks, (unsigned)a.splits), FLASH_THREADS, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_flash_phi_kernel");
  return DS_OK;
}


/* One phi pass on the tensor cores: the columns' v (mode), their largest magnitudes and their
 * split, then the pair kernel into partial_sums, partial_k. wgmma: the warpgroup kernel, y and
 * v split in coordinate and column order. */
int flash_phi_pass(const phi_args &p, const flash_inputs &in, int v_mode, long long row_blocks, bool wgmma,
                   cudaStream_t stream) {
  const int dp = flash_padded_dim(p.dim);
  const long long padded = flash_padded_rows(p.n);
  CUDA_CHECK(cudaMemsetAsync(in.scales->v_max, 0, sizeof in.scales->v_max, stream));
  const long long max_blocks = (p.n + 3) / 4;
  svgd_flash_v_max_kernel<<<(unsigned)(max_blocks < 1024 ? (max_blocks > 0 ? max_blocks : 1) : 1024), dim3(64, 4), 0,
                            stream>>>(p.score, in.centred, p.n, p.dim, v_mode, p.h, in.scales->v_max);
  CUDA_CHECK_LAUNCH("svgd_flash_v_max_kernel");
  svgd_flash_v_split_kernel<<<grid_for(padded * dp / 2, 256), 256, 0, stream>>>(
      p.score, in.centred, p.n, padded, p.dim, dp, v_mode, p.h, wgmma, in.scales, in.v_hi, in.v_lo);
  CUDA_CHECK_LAUNCH("svgd_flash_v_split_kernel");
  flash_phi_args a;
  a.y_hi = in.y_hi;
  a.y_lo = in.y_lo;
  a.v_hi = in.v_hi;
  a.v_lo = in.v_lo;
  a.squares = in.squares;
  a.scales = in.scales;
  a.n = p.n;
  a.row_begin = p.row_begin;
  a.row_end = p.row_end;
  a.v_words = padded / 2;
  a.dim = p.dim;
  a.splits = p.splits;
  a.weight = p.weight;
  a.partial_sums = p.partial_sums;
  a.partial_k = p.partial_k;
  if (wgmma) {
    auto kernel = a.weight.mode == PHI_WEIGHT_RBF          ? svgd_wgmma_phi_kernel<PHI_WEIGHT_RBF>
                  : a.weight.mode == PHI_WEIGHT_IMQ_VALUE ? svgd_wgmma_phi_kernel<PHI_WEIGHT_IMQ_VALUE>
                                                           : svgd_wgmma_phi_kernel<PHI_WEIGHT_IMQ_WEIGHT>;
    const long long rows_a_block = 64 * WGMMA_WARPGROUPS;
    const long long blocks = (a.row_end - a.row_begin + rows_a_block - 1) / rows_a_block;
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)WGMMA_PHI_SMEM));
    kernel<<<dim3((unsigned)blocks, (unsigned)a.splits), 128 * WGMMA_WARPGROUPS, WGMMA_PHI_SMEM, stream>>>(a);
    CUDA_CHECK_LAUNCH("svgd_wgmma_phi_kernel");
    return DS_OK;
  }
  switch (dp) {
    case 16: return launch_flash_phi_kernel<16>(a, row_blocks, stream);
    case 32: return launch_flash_phi_kernel<32>(a, row_blocks, stream);
    default: return launch_flash_phi_kernel<64>(a, row_blocks, stream);
  }
}

} /* namespace */

/* The centred rows [n][dim] and their squares [n] for the GEMM identity (dim > 128); up to
 * FLASH_MAX_DIM coordinates those and their TF32 splits (the tensor cores' distances). */
extern "C" size_t svgd_pair_histogram_scratch_floats(int64_t n, int64_t dim) {
  if (flash_dims_apply(dim)) return flash_inputs_floats(n, dim, false);
  return svgd_median_by_gemm(dim) ? (size_t)n * (size_t)dim + (size_t)n : 0;
}

extern "C" int svgd_distances_on_tensor_cores(int64_t dim) { return flash_dims_apply(dim); }

extern "C" size_t svgd_pair_distances_scratch_floats(int64_t n, int64_t dim) {
  return flash_dims_apply(dim) ? flash_inputs_floats(n, dim, false) : 0;
}

extern "C" int svgd_launch_pair_distances(const float *x_all, int64_t n, int64_t dim, int64_t row_begin,
                                          int64_t row_end, float *dist, float *scratch, cudaStream_t stream) {
  if (!flash_dims_apply(dim) || n < 1 || row_begin < 0 || row_end > n || row_begin > row_end || !scratch)
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_pair_distances: bad sizes n=%lld dim=%lld rows [%lld, %lld)",
                   (long long)n, (long long)dim, (long long)row_begin, (long long)row_end);
  if (row_end == row_begin) return DS_OK;
  const flash_inputs in = flash_layout(scratch, n, dim, false);
  DS_TRY(flash_prepare_rows(x_all, n, (int)dim, in, stream));
  const dim3 grid((unsigned)((row_end - row_begin + 15) / 16), (unsigned)((n + 31) / 32));
  switch (flash_padded_dim(dim)) {
    case 16: svgd_flash_distances_kernel<16><<<grid, 128, 0, stream>>>(in.y_hi, in.y_lo, in.squares, in.scales, n, row_begin, row_end, dist); break;
    case 32: svgd_flash_distances_kernel<32><<<grid, 128, 0, stream>>>(in.y_hi, in.y_lo, in.squares, in.scales, n, row_begin, row_end, dist); break;
    default: svgd_flash_distances_kernel<64><<<grid, 128, 0, stream>>>(in.y_hi, in.y_lo, in.squares, in.scales, n, row_begin, row_end, dist); break;
  }
  CUDA_CHECK_LAUNCH("svgd_flash_distances_kernel");
  return DS_OK;
}

extern "C" int svgd_keeps_distances(int64_t n, int64_t dim) {
  return svgd_median_by_gemm(dim) && n >= 2 && (double)n * (double)svgd_kept_distances_ld(n) <= (double)WIDE_SLAB_FLOATS;
}

extern "C" int64_t svgd_kept_distances_ld(int64_t n) { return (n + WIDE_BN - 1) / WIDE_BN * WIDE_BN; }

extern "C" int svgd_launch_pair_histogram(const float *x_all, int64_t n, int64_t dim,
                                          int64_t row_begin, int64_t row_end, int pass,
                                          uint32_t select_bits, unsigned long long *hist_dev, float *scratch,
                                          float *dist, int sm_count, cudaStream_t stream) {
  if (dim < 1 || dim > INT32_MAX || n < 0 || row_begin < 0 || row_end > n || row_begin > row_end)
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_pair_histogram: bad sizes n=%lld dim=%lld rows [%lld, %lld)",
                   (long long)n, (long long)dim, (long long)row_begin, (long long)row_end);
  if (pass != SVGD_MEDIAN_PASS_HIGH && pass != SVGD_MEDIAN_PASS_LOW && pass != SVGD_MEDIAN_PASS_WINDOW)
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_pair_histogram: bad pass %d", pass);
  if (n > HIST_MAX_N)
    return ds_fail(DS_ERR_INPUT, "the CUDA median takes at most %lld particles, got %lld", HIST_MAX_N, (long long)n);
  if (n < 2 || row_end == row_begin) return DS_OK;
  if (flash_dims_apply(dim)) {
    if (dist) return ds_fail(DS_ERR_INTERNAL, "svgd_launch_pair_histogram: distances kept at dim %lld", (long long)dim);
    if (!scratch) return ds_fail(DS_ERR_INTERNAL, "svgd_launch_pair_histogram: no scratch for dim %lld", (long long)dim);
    return launch_flash_histogram(x_all, n, (int)dim, row_begin, row_end, pass, select_bits, hist_dev, scratch, sm_count,
                                  stream);
  }
  pair_histogram_args a;
  a.x = x_all;
  a.n = (int)n;
  a.half = (int)(n / 2);
  a.row_begin = (int)row_begin;
  a.row_end = (int)row_end;
  a.dim = (int)dim;
  const bool gemm = svgd_median_by_gemm(dim);
  const int chunk = svgd_tuning.hist_chunk == 0 ? (gemm ? 32 : 16) : svgd_tuning.hist_chunk == 32 ? 32 : 16;
  a.chunks = (int)((dim + chunk - 1) / chunk);
  a.col_step = (HIST_THREADS / chunk) % a.n;
  a.col_tiles = (int)((HIST_BM - 1 + a.half + HIST_BN - 1) / HIST_BN);
  a.row_tiles = (int)((row_end - row_begin + HIST_BM - 1) / HIST_BM);
  a.total_tiles = (long long)a.row_tiles * a.col_tiles;
  a.select_bits = select_bits;
  a.hist = hist_dev;
  a.squares = NULL;
  a.band_lo = 1;
  if (dist && !svgd_keeps_distances(n, dim))
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_pair_histogram: distances kept for n=%lld dim=%lld", (long long)n,
                   (long long)dim);
  a.dist = dist;
  a.dist_ld = svgd_kept_distances_ld(n);
  if (gemm) { /* the centred rows and their squares, [n x dim][n] */
    if (!scratch) return ds_fail(DS_ERR_INTERNAL, "svgd_launch_pair_histogram: no scratch for dim %lld", (long long)dim);
    DS_TRY(launch_centred_rows(x_all, n, a.dim, scratch, scratch + n * dim, stream));
    a.x = scratch;
    a.squares = scratch + n * dim;
  }
  long long blocks = sm_count > 0 ? sm_count : 1;
  if (blocks > a.total_tiles) blocks = a.total_tiles;
  const int launched = chunk == 32 ? (gemm ? launch_pair_histogram<32, true>(a, pass, blocks, stream)
                                          : launch_pair_histogram<32, false>(a, pass, blocks, stream))
                                   : (gemm ? launch_pair_histogram<16, true>(a, pass, blocks, stream)
                                          : launch_pair_histogram<16, false>(a, pass, blocks, stream));
  if (launched != DS_OK) return launched;
  if (!dist || (row_begin == 0 && row_end == n)) return DS_OK; /* one rank's band holds every pair */
  /* The rest of the local rows' pairs: offsets half .. n - 1 past each row's span. */
  a.band_lo = a.half;
  a.col_tiles = (int)((HIST_BM - 1 + (n - a.half) + HIST_BN - 1) / HIST_BN);
  a.total_tiles = (long long)a.row_tiles * a.col_tiles;
  blocks = sm_count > 0 ? sm_count : 1;
  if (blocks > a.total_tiles) blocks = a.total_tiles;
  return chunk == 32 ? launch_pair_histogram<32, true>(a, PASS_COMPLEMENT, blocks, stream)
                     : launch_pair_histogram<16, true>(a, PASS_COMPLEMENT, blocks, stream);
}

/* Scratch: [2 sets of splits x rows x (dim + 1) partial sums] [v: n x dim] [dim > 128: slab, tile
 * sums, squares]. The second set takes imq's second pass. */
extern "C" size_t svgd_phi_scratch_floats(int64_t n, int64_t dim, int64_t rows) {
  if (flash_dims_apply(dim))
    return 2 * (size_t)flash_splits(n) * (size_t)rows * (size_t)(dim + 1) + flash_inputs_floats(n, dim, true);
  const int splits = dim <= PHI_MAX_DIM ? phi_splits(n) : 1;
  size_t floats = 2 * (size_t)splits * (size_t)rows * (size_t)(dim + 1) + (size_t)n * (size_t)dim;
  if (dim <= PHI_MAX_DIM) floats += 4 + (size_t)n * (size_t)dim; /* the centred rows, on 16 bytes */
  if (dim > PHI_MAX_DIM) {
    const long long slab = wide_slab_columns(n, rows);
    /* 12: the alignment of v, of the slab and of the centred rows */
    floats += 12 + (size_t)rows * (size_t)(slab + slab / WIDE_BN) + (size_t)n + (size_t)n * (size_t)dim;
  }
  return floats;
}

namespace {

/* One pass of the phi kernels: a.partial_sums, a.partial_k = the weighted sums of a.v over the
 * columns, by a.weight. wide: the slab buffer, its tile sums and |x_j|^2 (dim > 128). */
int phi_pass(const phi_args &a, float *k_slab, float *k_tile_sums, const float *squares, const float *dist,
             long long row_blocks, cudaStream_t stream) {
  if (a.dim <= 16) return launch_phi_tiled<16>(a, row_blocks, stream);
  if (a.dim <= 32) return launch_phi_tiled<32>(a, row_blocks, stream);
  if (a.dim <= 64) return launch_phi_tiled<64>(a, row_blocks, stream);
  if (a.dim <= PHI_MAX_DIM) return launch_phi_tiled<128>(a, row_blocks, stream);
  const long long rows = a.row_end - a.row_begin;
  wide_args w;
  w.x = a.x;
  w.v = a.v;
  w.n = a.n;
  w.row_begin = a.row_begin;
  w.row_end = a.row_end;
  w.dim = a.dim;
  w.exp2_scale = a.exp2_scale;
  w.weight = a.weight;
  w.sum_kv = a.partial_sums;
  w.sum_k = a.partial_k;
  w.k_slab = k_slab;
  w.k_tile_sums = k_tile_sums;
  w.squares = squares;
  const long long slab = wide_slab_columns(a.n, rows);
  const unsigned coordinate_blocks = (unsigned)((a.dim + WIDE_BC - 1) / WIDE_BC);
  if (row_blocks > 0x7FFFFFFF || coordinate_blocks > 65535)
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_phi: %lld rows of %d coordinates exceed the grid", rows, a.dim);
  /* 16-byte copies of x and v where each row starts on 16 bytes. */
  const bool x_vec4 = a.dim % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const bool v_vec4 = a.dim % 4 == 0 && reinterpret_cast<uintptr_t>(a.v) % 16 == 0;
  auto tile_kernel = x_vec4 ? svgd_wide_kernel_tile_kernel<true> : svgd_wide_kernel_tile_kernel<false>;
  auto accumulate_kernel = v_vec4 ? svgd_wide_accumulate_kernel<true> : svgd_wide_accumulate_kernel<false>;
  const size_t tile_smem = sizeof(wide_tile_shared), accumulate_smem = sizeof(wide_accumulate_shared);
  CUDA_CHECK(cudaFuncSetAttribute(tile_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)tile_smem));
  CUDA_CHECK(cudaFuncSetAttribute(accumulate_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)accumulate_smem));
  for (long long slab0 = 0; slab0 < a.n; slab0 += slab) {
    const long long left = (a.n - slab0 + WIDE_BN - 1) / WIDE_BN * WIDE_BN;
    w.slab0 = slab0;
    w.slab_cols = (int)(left < slab ? left : slab);
    if (dist) {
      const long long items = rows * (w.slab_cols / WIDE_BN);
      svgd_wide_kernel_from_distances_kernel<<<grid_for(items * 32, 256), 256, 0, stream>>>(
          w, dist, svgd_kept_distances_ld(a.n));
      CUDA_CHECK_LAUNCH("svgd_wide_kernel_from_distances_kernel");
    } else {
      tile_kernel<<<dim3((unsigned)row_blocks, (unsigned)(w.slab_cols / WIDE_BN)), WIDE_THREADS, tile_smem, stream>>>(w);
      CUDA_CHECK_LAUNCH("svgd_wide_kernel_tile_kernel");
    }
    accumulate_kernel<<<dim3((unsigned)row_blocks, coordinate_blocks), WIDE_THREADS, accumulate_smem, stream>>>(
        w, slab0 == 0);
    CUDA_CHECK_LAUNCH("svgd_wide_accumulate_kernel");
  }
  return DS_OK;
}

/* Whether the KSD's Stein sum takes the warpgroup tiles (svgd_cuda_tuning_t.ksd_family). */
bool stein_wgmma(long long dim, const svgd_kernel_t *kernel) {
  return kernel->kind == SVGD_KERNEL_RBF && dim > 32 && dim <= FLASH_MAX_DIM && svgd_tuning.ksd_family != 1 &&
         wgmma_device();
}

/* The warpgroup KSD's inputs in scratch after the flash inputs (y split in coordinate order):
 * s, v, w hi and lo [padded rows][32 words], c_j and |s_j|^2 [n] doubles, the row and column
 * terms [n] and the scales. */
struct stein_inputs {
  flash_inputs rows;
  uint32_t *s_hi, *s_lo, *v_hi, *v_lo, *w_hi, *w_lo;
  double *c_terms, *score_squares;
  float *rowterm, *colterm;
  wgmma_ksd_scales *scales;
};

size_t stein_inputs_floats(long long n, long long dim) {
  return flash_inputs_floats(n, dim, false) + 6 * flash_split_words(n, 64) + 4 * (size_t)n + 2 * (size_t)n +
         sizeof(wgmma_ksd_scales) / sizeof(float) + 4 * 12;
}

stein_inputs stein_layout(float *scratch, long long n, long long dim) {
  stein_inputs in;
  in.rows = flash_layout(scratch, n, dim, false);
  const size_t split = flash_split_words(n, 64);
  uint32_t **arrays[6] = {&in.s_hi, &in.s_lo, &in.v_hi, &in.v_lo, &in.w_hi, &in.w_lo};
  float *at = reinterpret_cast<float *>(in.rows.y_lo + split);
  for (int k = 0; k < 6; ++k) {
    *arrays[k] = reinterpret_cast<uint32_t *>(align16(at));
    at = reinterpret_cast<float *>(*arrays[k] + split);
  }
  in.c_terms = reinterpret_cast<double *>(align16(at));
  in.score_squares = reinterpret_cast<double *>(align16(reinterpret_cast<float *>(in.c_terms + n)));
  in.rowterm = align16(reinterpret_cast<float *>(in.score_squares + n));
  in.colterm = align16(in.rowterm + n);
  in.scales = reinterpret_cast<wgmma_ksd_scales *>(align16(in.colterm + n));
  return in;
}

int launch_wgmma_stein(const float *x_all, const float *score_all, long long n, int dim, long long row_begin,
                       long long row_end, const svgd_kernel_t *kernel, double *row_sums, float *scratch,
                       cudaStream_t stream) {
  const stein_inputs in = stein_layout(scratch, n, dim);
  DS_TRY(flash_prepare_rows(x_all, n, dim, in.rows, stream, true));
  CUDA_CHECK(cudaMemsetAsync(in.scales, 0, sizeof(wgmma_ksd_scales), stream));
  const int max_blocks = grid_for(n * dim, 256) < 1024 ? grid_for(n * dim, 256) : 1024;
  svgd_flash_max_abs_kernel<<<max_blocks, 256, 0, stream>>>(score_all, n * dim, &in.scales->s_max);
  CUDA_CHECK_LAUNCH("svgd_flash_max_abs_kernel");
  const int term_blocks = grid_for(n * 32, 256) < 2048 ? grid_for(n * 32, 256) : 2048;
  svgd_ksd_terms_kernel<<<term_blocks, 256, 0, stream>>>(score_all, in.rows.centred, n, dim, kernel->h, in.c_terms,
                                                         in.score_squares, in.scales);
  CUDA_CHECK_LAUNCH("svgd_ksd_terms_kernel");
  svgd_ksd_scales_kernel<<<1, 1, 0, stream>>>(in.rows.scales, in.scales, kernel->h, dim);
  CUDA_CHECK_LAUNCH("svgd_ksd_scales_kernel");
  const long long padded = flash_padded_rows(n);
  uint32_t *his[3] = {in.s_hi, in.v_hi, in.w_hi}, *los[3] = {in.s_lo, in.v_lo, in.w_lo};
  for (int mode = 0; mode < 3; ++mode) {
    svgd_ksd_split_kernel<<<grid_for(padded * 32, 256), 256, 0, stream>>>(score_all, in.rows.centred, in.c_terms, n,
                                                                          padded, dim, kernel->h, mode, in.scales,
                                                                          his[mode], los[mode], in.rowterm, in.colterm);
    CUDA_CHECK_LAUNCH("svgd_ksd_split_kernel");
  }
  wgmma_ksd_args a;
  a.y_hi = in.rows.y_hi;
  a.y_lo = in.rows.y_lo;
  a.s_hi = in.s_hi;
  a.s_lo = in.s_lo;
  a.v_hi = in.v_hi;
  a.v_lo = in.v_lo;
  a.w_hi = in.w_hi;
  a.w_lo = in.w_lo;
  a.squares = in.rows.squares;
  a.rowterm = in.rowterm;
  a.colterm = in.colterm;
  a.score_squares = in.score_squares;
  a.scales = in.rows.scales;
  a.ksd = in.scales;
  a.n = (int)n;
  a.half = (int)(n / 2);
  a.row_begin = (int)row_begin;
  a.row_end = (int)row_end;
  a.tile_row0 = (int)(row_begin / KSD_BM * KSD_BM);
  /* Offsets up to half for rows up to KSD_BM - 1 below a tile's first. */
  a.col_tiles = n >= 2 ? (int)((KSD_BM - 1 + a.half + KSD_BN - 1) / KSD_BN) : 0;
  a.exp2_scale = (float)(-1.4426950408889634 / (2.0 * (double)kernel->h));
  a.diagonal = (double)dim / (double)kernel->h;
  a.row_sums = row_sums;
  const long long blocks = (row_end - a.tile_row0 + KSD_BM - 1) / KSD_BM;
  CUDA_CHECK(cudaFuncSetAttribute(svgd_wgmma_stein_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)WGMMA_KSD_SMEM));
  svgd_wgmma_stein_kernel<<<(unsigned)blocks, 128 * KSD_WARPGROUPS, WGMMA_KSD_SMEM, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_wgmma_stein_kernel");
  return DS_OK;
}
} /* namespace */

extern "C" int svgd_launch_phi(const float *x_all, const float *score_all, int64_t n, int64_t dim,
                               int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, float *phi,
                               float *scratch, const float *dist, cudaStream_t stream) {
  if (dim < 1 || dim > INT32_MAX || n < 1 || row_begin < 0 || row_end > n || row_begin > row_end)
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_phi: bad sizes n=%lld dim=%lld rows [%lld, %lld)",
                   (long long)n, (long long)dim, (long long)row_begin, (long long)row_end);
  const float h = kernel->h;
  if (!(h > 0.0f)) return ds_fail(DS_ERR_INTERNAL, "svgd_launch_phi: bandwidth h=%g is not positive", (double)h);
  const long long rows = row_end - row_begin;
  if (rows == 0) return DS_OK;
  if (dist && !svgd_keeps_distances(n, dim))
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_phi: kept distances for n=%lld dim=%lld", (long long)n, (long long)dim);
  phi_args a;
  a.x = x_all;
  a.score = score_all;
  a.n = n;
  a.row_begin = row_begin;
  a.row_end = row_end;
  a.dim = (int)dim;
  const bool flash = flash_dims_apply(dim);
  a.splits = flash ? flash_splits(n) : dim <= PHI_MAX_DIM ? phi_splits(n) : 1;
  a.h = h;
  a.exp2_scale = (float)(-1.4426950408889634 / (2.0 * (double)h));
  a.weight.mode = PHI_WEIGHT_RBF;
  a.weight.exp2_scale = a.exp2_scale;
  a.weight.h = h;
  a.weight.c2 = kernel->c2;
  a.weight.beta = kernel->beta;
  a.weight.coef = -2.0f * kernel->beta / h;
  const size_t set_floats = (size_t)a.splits * (size_t)rows * (size_t)(dim + 1);
  a.partial_sums = scratch;
  a.partial_k = scratch + (size_t)a.splits * (size_t)rows * (size_t)dim;
  float *v_all = scratch + 2 * set_floats;
  if (dim > PHI_MAX_DIM) /* v on 16 bytes, for 16-byte copies */
    v_all = reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(v_all) + 15) & ~static_cast<uintptr_t>(15));
  const long long row_blocks = (rows + PHI_BM - 1) / PHI_BM;
  if (row_blocks > 0x7FFFFFFF) return ds_fail(DS_ERR_INTERNAL, "svgd_launch_phi: too many rows (%lld)", rows);
  if (flash) {
    /* Centred rows stand for x from here on (phi depends on differences only), in the
     * distances, in v and in the finish. */
    const flash_inputs in = flash_layout(scratch + 2 * set_floats, n, dim, true);
    const bool wgmma = flash_phi_wgmma(dim);
    DS_TRY(flash_prepare_rows(x_all, n, (int)dim, in, stream, wgmma));
    a.x = in.centred;
    if (kernel->kind == SVGD_KERNEL_RBF) {
      DS_TRY(flash_phi_pass(a, in, FLASH_V_RBF, row_blocks, wgmma, stream));
      svgd_phi_finish_kernel<<<grid_for(rows * dim, 256), 256, 0, stream>>>(a, phi);
      CUDA_CHECK_LAUNCH("svgd_phi_finish_kernel");
      return DS_OK;
    }
    phi_args weight = a;
    a.weight.mode = PHI_WEIGHT_IMQ_VALUE;
    DS_TRY(flash_phi_pass(a, in, FLASH_V_SCORE, row_blocks, wgmma, stream));
    weight.weight.mode = PHI_WEIGHT_IMQ_WEIGHT;
    weight.partial_sums = scratch + set_floats;
    weight.partial_k = weight.partial_sums + (size_t)a.splits * (size_t)rows * (size_t)dim;
    DS_TRY(flash_phi_pass(weight, in, FLASH_V_CENTRED, row_blocks, wgmma, stream));
    svgd_phi_finish_imq_kernel<<<grid_for(rows * dim, 256), 256, 0, stream>>>(a, weight, svgd_kernel_diagonal(kernel),
                                                                             phi);
    CUDA_CHECK_LAUNCH("svgd_phi_finish_imq_kernel");
    return DS_OK;
  }
  float *k_slab = NULL, *k_tile_sums = NULL, *squares = NULL;
  if (dim > PHI_MAX_DIM) {
    const long long slab = wide_slab_columns(n, rows);
    /* The slab is written as float4: start it on 16 bytes. */
    const uintptr_t after_v = reinterpret_cast<uintptr_t>(v_all + (size_t)n * (size_t)dim);
    k_slab = reinterpret_cast<float *>((after_v + 15) & ~static_cast<uintptr_t>(15));
    k_tile_sums = k_slab + (size_t)rows * (size_t)slab;
    squares = k_tile_sums + (size_t)rows * (size_t)(slab / WIDE_BN);
    /* Centred rows y = x - x_0 stand for x from here on: phi depends on differences only, and
     * the GEMM identity's |y|^2 stays on the scale of the distances however far the cloud is
     * from the origin (a cloud at 20 with spread 1 in d = 300 kept |x|^2 / D near 140). */
    float *centred = reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(squares + n) + 15) &
                                               ~static_cast<uintptr_t>(15));
    /* The tile kernel's GEMM identity needs the squares; kept distances do not. */
    DS_TRY(launch_centred_rows(x_all, n, (int)dim, centred, dist ? NULL : squares, stream));
    x_all = centred;
    a.x = centred;
  }
  /* The vectors the kernel weighs and the finish take the centred rows y = x - x_0 (dim > 128:
   * x_all already is): sum_j K_ij (x_i - x_j) is then formed from values on the scale of the
   * cloud's spread, not of its distance from the origin (a cloud at -1000 in d = 3 lost 4e-4
   * relative to the cancellation of x_i sum K and sum K x_j). The distances still take x. */
  const float *vector_x = x_all;
  if (dim <= PHI_MAX_DIM) {
    float *centred = align16(v_all + (size_t)n * (size_t)dim);
    DS_TRY(launch_centred_rows(x_all, n, (int)dim, centred, NULL, stream));
    vector_x = centred;
  }
  if (kernel->kind == SVGD_KERNEL_RBF) {
    a.v = v_all;
    svgd_v_kernel<<<grid_for(n * dim, 256), 256, 0, stream>>>(vector_x, score_all, n * dim, h, v_all);
    CUDA_CHECK_LAUNCH("svgd_v_kernel");
    DS_TRY(phi_pass(a, k_slab, k_tile_sums, squares, dist, row_blocks, stream));
    phi_args finish = a;
    finish.x = vector_x;
    svgd_phi_finish_kernel<<<grid_for(rows * dim, 256), 256, 0, stream>>>(finish, phi);
    CUDA_CHECK_LAUNCH("svgd_phi_finish_kernel");
    return DS_OK;
  }
  /* imq: sum_j k_ij s_j, then sum_j w_ij y_j and sum_j w_ij into the second set. */
  phi_args weight = a;
  a.v = score_all;
  a.weight.mode = PHI_WEIGHT_IMQ_VALUE;
  DS_TRY(phi_pass(a, k_slab, k_tile_sums, squares, dist, row_blocks, stream));
  a.x = vector_x; /* for the finish */
  weight.v = vector_x;
  weight.weight.mode = PHI_WEIGHT_IMQ_WEIGHT;
  weight.partial_sums = scratch + set_floats;
  weight.partial_k = weight.partial_sums + (size_t)a.splits * (size_t)rows * (size_t)dim;
  DS_TRY(phi_pass(weight, k_slab, k_tile_sums, squares, dist, row_blocks, stream));
  svgd_phi_finish_imq_kernel<<<grid_for(rows * dim, 256), 256, 0, stream>>>(a, weight, svgd_kernel_diagonal(kernel),
                                                                           phi);
  CUDA_CHECK_LAUNCH("svgd_phi_finish_imq_kernel");
  return DS_OK;
}

extern "C" size_t svgd_stein_scratch_floats(int64_t n, int64_t dim, const svgd_kernel_t *kernel) {
  return stein_wgmma(dim, kernel) ? stein_inputs_floats(n, dim) : 0;
}

extern "C" int svgd_launch_stein_sum(const float *x_all, const float *score_all, int64_t n, int64_t dim,
                                     int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel,
                                     double *row_sums, float *scratch, unsigned long long *totals,
                                     cudaStream_t stream) {
  if (dim < 1 || dim > INT32_MAX || n < 1 || row_begin < 0 || row_end > n || row_begin > row_end)
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_stein_sum: bad sizes n=%lld dim=%lld rows [%lld, %lld)",
                   (long long)n, (long long)dim, (long long)row_begin, (long long)row_end);
  if (!(kernel->h > 0.0f))
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_stein_sum: bandwidth h=%g is not positive", (double)kernel->h);
  CUDA_CHECK(cudaMemsetAsync(totals, 0, (EXACT_DIGITS + 1) * sizeof *totals, stream));
  const long long rows = row_end - row_begin;
  if (rows == 0) return DS_OK;
  long long sum_blocks = (rows + 255) / 256;
  if (sum_blocks > 264) sum_blocks = 264;
  if (stein_wgmma(dim, kernel)) {
    if (!scratch || n > HIST_MAX_N)
      return ds_fail(DS_ERR_INTERNAL, "svgd_launch_stein_sum: no scratch or n=%lld too large", (long long)n);
    DS_TRY(launch_wgmma_stein(x_all, score_all, n, (int)dim, row_begin, row_end, kernel, row_sums, scratch, stream));
    exact_sum_values_kernel<<<(unsigned)sum_blocks, 256, 0, stream>>>(row_sums, rows, totals);
    CUDA_CHECK_LAUNCH("exact_sum_values_kernel");
    return DS_OK;
  }
  stein_args a;
  a.x = x_all;
  a.s = score_all;
  a.n = n;
  a.half = n / 2;
  a.row_begin = row_begin;
  a.row_end = row_end;
  a.tile_row0 = row_begin / STEIN_BM * STEIN_BM;
  a.dim = (int)dim;
  a.chunks = (int)((dim + STEIN_KC - 1) / STEIN_KC);
  /* Offsets up to half for rows up to 63 below a tile's first: columns r0 + 1 .. r0 + 63 + half. */
  a.col_tiles = n >= 2 ? (int)((STEIN_BM - 1 + a.half + STEIN_BN - 1) / STEIN_BN) : 0;
  a.kernel = *kernel;
  a.row_sums = row_sums;
  const long long blocks = (row_end - a.tile_row0 + STEIN_BM - 1) / STEIN_BM;
  if (blocks > 0x7FFFFFFF) return ds_fail(DS_ERR_INTERNAL, "svgd_launch_stein_sum: too many rows (%lld)", rows);
  svgd_stein_sum_kernel<<<(unsigned)blocks, STEIN_THREADS, 0, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_stein_sum_kernel");
  exact_sum_values_kernel<<<(unsigned)sum_blocks, 256, 0, stream>>>(row_sums, rows, totals);
  CUDA_CHECK_LAUNCH("exact_sum_values_kernel");
  return DS_OK;
}

extern "C" int svgd_launch_update(float *x, const float *phi, float *g, int64_t count, int kind, float step,
                                  int64_t iteration, float correction1, float correction2, cudaStream_t stream) {
  if (count < 0 || (kind != SVGD_UPDATE_SGD && kind != SVGD_UPDATE_ADAGRAD && kind != SVGD_UPDATE_ADAM))
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_update: bad count %lld or kind %d", (long long)count, kind);
  if (kind != SVGD_UPDATE_SGD && !g && count > 0)
    return ds_fail(DS_ERR_INTERNAL, "svgd_launch_update: the %s update needs its state array",
                   kind == SVGD_UPDATE_ADAM ? "adam" : "adagrad");
  if (count == 0) return DS_OK;
  svgd_update_kernel<<<grid_for(count, 256), 256, 0, stream>>>(x, phi, g, count, kind, step, iteration == 0,
                                                               correction1, correction2);
  CUDA_CHECK_LAUNCH("svgd_update_kernel");
  return DS_OK;
}

extern "C" int gaussian_launch_logp_grad(const builtin_params_t *params, const float *x, int64_t n,
                                         float *logp, float *grad, cudaStream_t stream) {
  if (n < 0 || params->dim < 1 || params->kind != BUILTIN_GAUSSIAN)
    return ds_fail(DS_ERR_INTERNAL, "gaussian_launch_logp_grad: bad sizes n=%lld dim=%lld",
                   (long long)n, (long long)params->dim);
  return cuda_builtin_rows_launch(params, x, n, logp, grad, stream); /* the built-ins' own GPU row walk */
}

extern "C" void svgd_cuda_set_tuning(svgd_cuda_tuning_t tuning) { svgd_tuning = tuning; }
extern "C" svgd_cuda_tuning_t svgd_cuda_get_tuning(void) { return svgd_tuning; }
