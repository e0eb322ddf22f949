/* svgd_wide.cu: phi past PHI_MAX_DIM coordinates on the tensor cores in 3xTF32, the centred
 * rows and their squares (the GEMM identity's inputs, for the median's passes and for phi), and
 * phi_pass, the phi pass of the CUDA-core families (it launches the wide kernels, templates, so
 * it lives beside them).
 *
 * - dim > 128, two GEMM-shaped kernels per slab of columns, both on the tensor cores in 3xTF32
 *   (mma_tf32.cuh: three TF32 products per multiply-add, float32 accuracy): 128 x 128 block
 *   tiles, eight warps of 64 x 32 in m16n8k8 tiles, operands streamed through shared memory in
 *   stages of 32 (cp.async, double buffered). svgd_wide_kernel_tile_kernel forms K for
 *   (rows x slab) with the distances by the GEMM identity |x_i|^2 + |x_j|^2 - 2 x_i . x_j (the
 *   median's exact selection still runs on the direct differences of svgd_pair_histogram.cu),
 *   and writes K to a slab buffer (rows x slab, never n x n) with each tile's row sums;
 *   svgd_wide_accumulate_kernel adds K_slab @ v_slab to sum_kv in 128 x 128 output tiles. Each
 *   stage's products are summed on the tensor cores from zero, k8 steps ascending, and added
 *   to the output in float32 (round to nearest), stages ascending and continued across slabs:
 *   an output depends on its own row and column alone, in an order fixed by the data, so the
 *   result is bitwise the same for any slab width and any row range.
 */

#include "svgd_internal.cuh"

namespace dsampler_svgd {

namespace {

/* dim > PHI_MAX_DIM: see the file's opening comment. */
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

/* Chunk `chunk` of the kernel tile's operands into buffer (cp.async): the block's rows r0 .. and
 * columns c0 .. ; row (and column) rr, coordinates k .. k + 3 (VEC4) or k, of the chunk; zeros
 * past the rows, n and dim. */
template <bool VEC4>
__device__ __forceinline__ void wide_tile_stage(const wide_args &a, wide_tile_shared &sm, long long r0, long long c0,
                                                int chunk, int buffer, int tid) {
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
  float dot[WIDE_MT][WIDE_NT][4];
#pragma unroll
  for (int i = 0; i < WIDE_MT; ++i)
#pragma unroll
    for (int j = 0; j < WIDE_NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) dot[i][j][e] = 0.0f;
  wide_tile_stage<VEC4>(a, sm, r0, c0, 0, 0, tid);
  cp_async_wait_all();
  __syncthreads();
  for (int chunk = 0; chunk < chunks; ++chunk) {
    const int buffer = chunk & 1;
    if (chunk + 1 < chunks) wide_tile_stage<VEC4>(a, sm, r0, c0, chunk + 1, buffer ^ 1, tid);
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

} /* namespace */

/* Columns per slab: the tuning's, else as many as WIDE_SLAB_FLOATS holds for these rows. */
long long wide_slab_columns(long long n, long long rows) {
  const long long all = (n + WIDE_BN - 1) / WIDE_BN * WIDE_BN;
  long long slab = svgd_tuning.wide_slab > 0 ? svgd_tuning.wide_slab : WIDE_SLAB_FLOATS / (rows > 0 ? rows : 1);
  slab = slab / WIDE_BN * WIDE_BN;
  if (slab < WIDE_BN) slab = WIDE_BN;
  if (slab > 65535ll * WIDE_BN) slab = 65535ll * WIDE_BN;
  return slab < all ? slab : all;
}

namespace {

/* y_j = x_j - x_0 (svgd_kernel_math.h's centring); blocks over rows. */
__global__ void svgd_centre_kernel(const float *x, long long n, int dim, float *y) {
  for (long long j = blockIdx.x; j < n; j += gridDim.x)
    for (int k = threadIdx.x; k < dim; k += blockDim.x) y[j * dim + k] = __fsub_rn(x[j * dim + k], x[k]);
}

} /* namespace */

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

} /* namespace dsampler_svgd */
