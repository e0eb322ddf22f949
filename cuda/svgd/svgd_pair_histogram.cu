/* svgd_pair_histogram.cu: the exact median's pair histogram on the CUDA cores, and its launchers.
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
 *
 * Squared distances are summed exactly as the CPU backend does (d = x_ik - x_jk,
 * acc = fma(d, d, acc), k ascending from acc = 0) with __fsub_rn/__fmaf_rn, so the median is
 * bitwise the CPU's. Zero padding of coordinates adds fma(0, 0, acc) = acc and changes
 * nothing. */

#include "svgd_internal.cuh"

namespace dsampler_svgd {

namespace {

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

/* Zeroes the shared histogram and the window pass's two counters of keys outside the window. */
__device__ __forceinline__ void hist_clear(uint32_t *hist_s, unsigned long long *outside_s, int tid) {
  for (int w = tid; w < HIST_WORDS / 4; w += HIST_THREADS)
    reinterpret_cast<uint4 *>(hist_s)[w] = make_uint4(0u, 0u, 0u, 0u);
  if (tid < 2) outside_s[tid] = 0ull;
}

/* The block's share of the (tile, chunk) steps: returns their number, sets at to the first step,
 * stages it if there is one, and leaves next at the step after it. */
template <int KC>
__device__ __forceinline__ long long hist_begin(const pair_histogram_args &a, int tid, float *rows_s, float *cols_s,
                                                hist_cursor &at, hist_cursor &next) {
  const long long tile_begin = a.total_tiles * blockIdx.x / gridDim.x;
  const long long tile_end = a.total_tiles * (blockIdx.x + 1) / gridDim.x;
  const long long steps = (tile_end - tile_begin) * a.chunks;
  at.row_tile = (int)(tile_begin / a.col_tiles);
  at.col_tile = (int)(tile_begin - (long long)at.row_tile * a.col_tiles);
  at.chunk = 0;
  next = at;
  if (steps > 0) {
    hist_stage<KC>(a, next, tid, rows_s, cols_s);
    next.advance(a);
  }
  return steps;
}

/* Zeroes the thread's 8 x 8 block of distances. */
__device__ __forceinline__ void hist_zero(float (&acc)[8][8]) {
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = 0.0f;
}

/* One coordinate of the thread's 8 rows av and 8 columns bv into its 8 x 8 block: a squared
 * difference, or a product (GEMM). */
template <bool GEMM>
__device__ __forceinline__ void hist_accumulate_pairs(const float (&av)[8], const float (&bv)[8], float (&acc)[8][8]) {
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

/* GEMM: |y_j|^2 of the thread's columns j and, with KEEP, the columns, reduced modulo n. */
template <bool KEEP>
__device__ __forceinline__ void hist_gemm_columns(const pair_histogram_args &a, const hist_cursor &at, int tx,
                                                  float (&column_squares)[8], int (&columns)[8]) {
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
}

/* GEMM: turns the thread's dot products into D = |y_i|^2 + |y_j|^2 - 2 y_i . y_j. */
__device__ __forceinline__ void hist_gemm_rows(const pair_histogram_args &a, int r0, int ty,
                                               const float (&column_squares)[8], float (&acc)[8][8]) {
#pragma unroll
  for (int r = 0; r < 8; ++r) {
    const int i = r0 + ty * 8 + r;
    const float row_square = i < a.row_end ? a.squares[i] : 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) acc[r][c] = svgd_gemm_distance(row_square, column_squares[c], acc[r][c]);
  }
}

/* D of pair (i, j) kept for phi, both ways round where both rows are local. */
template <int PASS>
__device__ __forceinline__ void hist_keep_distance(const pair_histogram_args &a, int i, int j, uint32_t bits) {
  const float d = __uint_as_float(bits);
  a.dist[(long long)(i - a.row_begin) * a.dist_ld + j] = d;
  if (PASS != PASS_COMPLEMENT && j >= a.row_begin && j < a.row_end)
    a.dist[(long long)(j - a.row_begin) * a.dist_ld + i] = d;
}

/* Adds the block's shared counts into the 64-bit global histogram, each pair counting 2, and for
 * the window pass the block's keys below and above the window. */
template <int PASS>
__device__ __forceinline__ void hist_flush(const pair_histogram_args &a, const uint32_t *hist_s,
                                           unsigned long long *outside_s, int tid, unsigned long long below,
                                           unsigned long long above) {
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

  hist_clear(hist_s, outside_s, tid);

  hist_cursor at, next;
  const long long steps = hist_begin<KC>(a, tid, rows_s, cols_s, at, next);
  cp_async_wait_all();
  __syncthreads();

  const int span_min = (a.n % 2 == 0) ? a.half - 1 : a.half;
  float acc[8][8];
  hist_zero(acc);
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
      hist_accumulate_pairs<GEMM>(av, bv, acc);
    }

    if (at.chunk == a.chunks - 1) { /* the tile's distances are complete */
      const int r0 = at.r0(a);
      const int first_offset = at.c0(a) - r0; /* offset of (row r0, column c0) */
      const bool full = PASS != PASS_COMPLEMENT && r0 + HIST_BM <= a.row_end && first_offset - (HIST_BM - 1) >= 1 &&
                        first_offset + HIST_BN - 1 <= span_min;
      int columns[8]; /* the thread's columns j, reduced modulo n */
      uint32_t tile_below = 0u, tile_above = 0u;
      if (GEMM) { /* acc holds dot products */
        float column_squares[8];
        hist_gemm_columns<KEEP>(a, at, tx, column_squares, columns);
        hist_gemm_rows(a, r0, ty, column_squares, acc);
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
          if (KEEP) hist_keep_distance<PASS>(a, i, columns[c], bits);
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

  hist_flush<PASS>(a, hist_s, outside_s, tid, below, above);
}

template <int KC, int PASS, bool GEMM, bool KEEP>
int launch_pair_histogram_kernel(const pair_histogram_args &a, long long blocks, cudaStream_t stream) {
  CUDA_CHECK(cudaFuncSetAttribute(svgd_pair_histogram_kernel<KC, PASS, GEMM, KEEP>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)hist_smem_bytes(KC)));
  svgd_pair_histogram_kernel<KC, PASS, GEMM, KEEP><<<(unsigned)blocks, HIST_THREADS, hist_smem_bytes(KC), stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_pair_histogram_kernel");
  return DS_OK;
}

} /* namespace */

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

template int launch_pair_histogram<16, false>(const pair_histogram_args &a, int pass, long long blocks, cudaStream_t stream);
template int launch_pair_histogram<16, true>(const pair_histogram_args &a, int pass, long long blocks, cudaStream_t stream);
template int launch_pair_histogram<32, false>(const pair_histogram_args &a, int pass, long long blocks, cudaStream_t stream);
template int launch_pair_histogram<32, true>(const pair_histogram_args &a, int pass, long long blocks, cudaStream_t stream);

} /* namespace dsampler_svgd */
