/* svgd_flash.cu: the tensor-core pair tiles on the fp16 mma.sync products (mma_f16.cuh): the
 * scales and splits of their inputs, phi (svgd_flash_phi_kernel) and the median's passes
 * (svgd_flash_histogram_kernel), with their launchers. Their shared pieces (flash_dims,
 * flash_load_rows, flash_dot_tiles, ...) are in svgd_internal.cuh; the warpgroup tiles of the
 * same formula are svgd_wgmma.cu's.
 *
 * Up to FLASH_MAX_DIM coordinates every pair's distance is taken on the fp16 tensor cores
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

#include "svgd_internal.cuh"

namespace dsampler_svgd {

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

namespace {

template <int DP>
struct flash_phi_stage {
  uint32_t y_hi[FLASH_BN * flash_dims<DP>::Y_STRIDE], y_lo[FLASH_BN * flash_dims<DP>::Y_STRIDE];
  uint32_t v_hi[DP * flash_dims<DP>::V_STRIDE], v_lo[DP * flash_dims<DP>::V_STRIDE];
  float squares[FLASH_BN];
};

/* Two blocks an SM (128 registers a thread): four warps a scheduler hide the products' latency
 * that two could not (N = 32768, d = 64: 7.3 -> 5.0 ms a step end to end), and 16-column
 * subtiles keep the registers within that budget. */
constexpr int FLASH_PHI_MIN_BLOCKS = 2;
constexpr int FLASH_PHI_SUB = 16;
constexpr int FLASH_PHI_NT = FLASH_PHI_SUB / 8;
static_assert(FLASH_PHI_SUB % 16 == 0 && FLASH_BN % FLASH_PHI_SUB == 0, "whole k16 column steps per subtile");

/* Column tile `tile` into s (cp.async): y hi and lo, v hi and lo, the squares. Columns past n
 * read the split arrays' padding rows and are masked. */
template <int DP>
__device__ __forceinline__ void flash_phi_stage_tile(const flash_phi_args &a, flash_phi_stage<DP> &s, long long tile,
                                                     int tid) {
  constexpr int WORDS = flash_dims<DP>::WORDS, Y_STRIDE = flash_dims<DP>::Y_STRIDE;
  constexpr int V_STRIDE = flash_dims<DP>::V_STRIDE, Y_CHUNKS = WORDS / 4, V_CHUNKS = FLASH_BN / 8;
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
}

/* k: the dot products of the warp's rows with the subtile's columns n0 .. n0 + 15 of the tile at
 * c0, turned into their K, zero where masked (past n, the diagonal); sum_k[h] += the thread's K
 * of row g + 8 h in column order, most[h] = the larger of most[h] and their largest. */
__device__ __forceinline__ void flash_phi_weights(const flash_phi_args &a, const float *squares, int n0, long long c0,
                                                  long long r0, bool masked, int g, int t,
                                                  const float (&row_square)[2], float (&k)[FLASH_PHI_NT][4],
                                                  float (&sum_k)[2], float (&most)[2]) {
#pragma unroll
  for (int jn = 0; jn < FLASH_PHI_NT; ++jn) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int cl = n0 + 8 * jn + 2 * t + (e & 1);
      k[jn][e] = pair_weight(a.weight, svgd_gemm_distance(row_square[e >> 1], squares[cl], k[jn][e]));
      if (masked && (c0 + cl >= a.n || c0 + cl == r0 + g + 8 * (e >> 1))) k[jn][e] = 0.0f;
    }
    sum_k[0] = __fadd_rn(__fadd_rn(sum_k[0], k[jn][0]), k[jn][1]);
    sum_k[1] = __fadd_rn(__fadd_rn(sum_k[1], k[jn][2]), k[jn][3]);
    most[0] = fmaxf(most[0], fmaxf(k[jn][0], k[jn][1]));
    most[1] = fmaxf(most[1], fmaxf(k[jn][2], k[jn][3]));
  }
}

/* A fragments of K 2^sr for K v, 16 columns each: tiles 2q and 2q + 1 of the C layout, packed,
 * split hi + lo. */
__device__ __forceinline__ void flash_phi_pack(const float (&k)[FLASH_PHI_NT][4], const float (&row_scale)[2],
                                               uint32_t (&p_hi)[FLASH_PHI_NT / 2][4],
                                               uint32_t (&p_lo)[FLASH_PHI_NT / 2][4]) {
#pragma unroll
  for (int q = 0; q < FLASH_PHI_NT / 2; ++q) {
    f16_split2(__fmul_rn(k[2 * q][0], row_scale[0]), __fmul_rn(k[2 * q][1], row_scale[0]), &p_hi[q][0], &p_lo[q][0]);
    f16_split2(__fmul_rn(k[2 * q][2], row_scale[1]), __fmul_rn(k[2 * q][3], row_scale[1]), &p_hi[q][1], &p_lo[q][1]);
    f16_split2(__fmul_rn(k[2 * q + 1][0], row_scale[0]), __fmul_rn(k[2 * q + 1][1], row_scale[0]), &p_hi[q][2],
               &p_lo[q][2]);
    f16_split2(__fmul_rn(k[2 * q + 1][2], row_scale[1]), __fmul_rn(k[2 * q + 1][3], row_scale[1]), &p_hi[q][3],
               &p_lo[q][3]);
  }
}

/* acc += subtile sub's K v: part[c] from zero, column steps ascending, CT chains in flight, then
 * added to acc rounded to nearest. */
template <int DP>
__device__ __forceinline__ void flash_phi_kv(const flash_phi_stage<DP> &s, int sub, int g, int t,
                                             const uint32_t (&p_hi)[FLASH_PHI_NT / 2][4],
                                             const uint32_t (&p_lo)[FLASH_PHI_NT / 2][4], float (&acc)[DP / 8][4]) {
  constexpr int V_STRIDE = flash_dims<DP>::V_STRIDE, CT = DP / 8;
  float part[CT][4];
#pragma unroll
  for (int c = 0; c < CT; ++c)
#pragma unroll
    for (int e = 0; e < 4; ++e) part[c][e] = 0.0f;
#pragma unroll
  for (int q = 0; q < FLASH_PHI_NT / 2; ++q)
#pragma unroll
    for (int c = 0; c < CT; ++c) {
      const int at = (8 * c + g) * V_STRIDE + sub * (FLASH_PHI_SUB / 2) + 8 * q + 2 * t;
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

/* grid (row blocks, splits), FLASH_THREADS, 2 stages dynamic. Column tiles of the split
 * tiles * split / splits .. ascending; the diagonal and columns past n weigh 0. */
template <int DP>
__global__ void __launch_bounds__(FLASH_THREADS, FLASH_PHI_MIN_BLOCKS) svgd_flash_phi_kernel(const flash_phi_args a) {
  constexpr int KSTEPS = flash_dims<DP>::KSTEPS, Y_STRIDE = flash_dims<DP>::Y_STRIDE, CT = DP / 8;
  constexpr int PHI_SUB = FLASH_PHI_SUB, NT = FLASH_PHI_NT;
  extern __shared__ float4 flash_shared_raw[];
  flash_phi_stage<DP> *stages = reinterpret_cast<flash_phi_stage<DP> *>(flash_shared_raw);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const long long r0 = a.row_begin + (long long)blockIdx.x * FLASH_BM + 16 * warp; /* the warp's rows */
  const int split = blockIdx.y;
  const long long tiles = (a.n + FLASH_BN - 1) / FLASH_BN;
  const long long tile_begin = tiles * split / a.splits, tile_end = tiles * (split + 1) / a.splits;
  const float inv_scale2 = flash_inv_scale2(a.scales);

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

  if (tile_begin < tile_end) flash_phi_stage_tile<DP>(a, stages[0], tile_begin, tid);
  cp_async_wait_all();
  __syncthreads();
  for (long long tile = tile_begin; tile < tile_end; ++tile) {
    const int buffer = (int)((tile - tile_begin) & 1);
    if (tile + 1 < tile_end) flash_phi_stage_tile<DP>(a, stages[buffer ^ 1], tile + 1, tid);
    const flash_phi_stage<DP> &s = stages[buffer];
    const long long c0 = tile * FLASH_BN;
    const bool masked = c0 + FLASH_BN > a.n || (c0 < r0 + 16 && r0 < c0 + FLASH_BN);
#pragma unroll
    for (int sub = 0; sub < FLASH_BN / PHI_SUB; ++sub) {
      float k[NT][4];
      flash_dot_tiles<DP, NT>(a_hi, a_lo, s.y_hi, s.y_lo, Y_STRIDE, sub * PHI_SUB, inv_scale2, g, t, k);
      float most[2] = {0.0f, 0.0f};
      flash_phi_weights(a, s.squares, sub * PHI_SUB, c0, r0, masked, g, t, row_square, k, sum_k, most);
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
      uint32_t p_hi[NT / 2][4], p_lo[NT / 2][4];
      flash_phi_pack(k, row_scale, p_hi, p_lo);
      flash_phi_kv<DP>(s, sub, g, t, p_hi, p_lo, acc);
    }
    cp_async_wait_all();
    __syncthreads();
  }

  flash_phi_write<CT>(a, split, r0, g, t, sum_k, row_exp, &acc[0][0]);
}

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

/* The first virtual column (row + offset, not reduced modulo n) of an item's tile. */
__device__ __forceinline__ int flash_hist_first_column(const flash_hist_args &a, long long item) {
  const int row_tile = (int)(item / a.col_tiles), col_tile = (int)(item - (long long)row_tile * a.col_tiles);
  return a.row_begin + row_tile * FLASH_BM + 1 + col_tile * FLASH_BN;
}

/* The columns c0 .. c0 + 63 (modulo n) into s (cp.async): y hi and lo, the squares. */
template <int DP>
__device__ __forceinline__ void flash_hist_stage_item(const flash_hist_args &a, flash_hist_stage<DP> &s, int c0,
                                                      int tid) {
  constexpr int WORDS = flash_dims<DP>::WORDS, Y_STRIDE = flash_dims<DP>::Y_STRIDE, Y_CHUNKS = WORDS / 4;
  for (int f = tid; f < FLASH_BN * Y_CHUNKS; f += FLASH_THREADS) {
    const int cc = f / Y_CHUNKS, kk = 4 * (f % Y_CHUNKS);
    const size_t at = (size_t)((c0 + cc) % a.n) * WORDS + kk;
    cp_async_f32x4(reinterpret_cast<float *>(&s.y_hi[cc * Y_STRIDE + kk]), reinterpret_cast<const float *>(a.y_hi + at), true);
    cp_async_f32x4(reinterpret_cast<float *>(&s.y_lo[cc * Y_STRIDE + kk]), reinterpret_cast<const float *>(a.y_lo + at), true);
  }
  if (tid < FLASH_BN) cp_async_f32(&s.squares[tid], a.squares + (c0 + tid) % a.n, true);
}

/* The warp's rows r0 + g + 8 h of a row tile: their A fragments, squares and spans (the last
 * offset each row counts). */
template <int DP>
__device__ __forceinline__ void flash_hist_load_rows(const flash_hist_args &a, int r0, int g, int t,
                                                     uint32_t (&a_hi)[flash_dims<DP>::KSTEPS][4],
                                                     uint32_t (&a_lo)[flash_dims<DP>::KSTEPS][4],
                                                     float (&row_square)[2], int (&spans)[2]) {
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

/* The band's pairs of the warp's rows and the subtile's columns n0 .. n0 + 31 (the tile's first
 * virtual column c0) counted into hist_s; the window pass adds the keys below and above it. */
template <int DP, int PASS>
__device__ __forceinline__ void flash_hist_count_subtile(const flash_hist_args &a, const flash_hist_stage<DP> &s,
                                                         uint32_t *hist_s, int c0, int r0, int n0, int g, int t,
                                                         const uint32_t (&a_hi)[flash_dims<DP>::KSTEPS][4],
                                                         const uint32_t (&a_lo)[flash_dims<DP>::KSTEPS][4],
                                                         const float (&row_square)[2], const int (&spans)[2],
                                                         float inv_scale2, unsigned long long &below,
                                                         unsigned long long &above) {
  float dot[4][4];
  flash_dot_tiles<DP, 4>(a_hi, a_lo, s.y_hi, s.y_lo, flash_dims<DP>::Y_STRIDE, n0, inv_scale2, g, t, dot);
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

/* A persistent grid over (128-row tile, 64-column tile) of the band, row-tile major: rows
 * [row_begin, row_end), a row i's pairs (i, i + offset mod n) for offset 1 .. span(i). */
template <int DP, int PASS>
__global__ void __launch_bounds__(FLASH_THREADS, PASS == SVGD_MEDIAN_PASS_WINDOW ? 2 : 1)
    svgd_flash_histogram_kernel(const flash_hist_args a) {
  constexpr int KSTEPS = flash_dims<DP>::KSTEPS, H_WORDS = flash_hist_words<PASS>();
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
  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  float row_square[2] = {0.0f, 0.0f};
  int spans[2] = {0, 0};
  int loaded_row_tile = -1;
  unsigned long long below = 0ull, above = 0ull;
  if (item_begin < item_end) flash_hist_stage_item<DP>(a, stages[0], flash_hist_first_column(a, item_begin), tid);
  cp_async_wait_all();
  __syncthreads();
  for (long long item = item_begin; item < item_end; ++item) {
    const int buffer = (int)((item - item_begin) & 1);
    if (item + 1 < item_end)
      flash_hist_stage_item<DP>(a, stages[buffer ^ 1], flash_hist_first_column(a, item + 1), tid);
    const int row_tile = (int)(item / a.col_tiles);
    const int r0 = a.row_begin + row_tile * FLASH_BM + 16 * warp;
    if (row_tile != loaded_row_tile) {
      loaded_row_tile = row_tile;
      flash_hist_load_rows<DP>(a, r0, g, t, a_hi, a_lo, row_square, spans);
    }
    const flash_hist_stage<DP> &s = stages[buffer];
    const int c0 = flash_hist_first_column(a, item);
#pragma unroll
    for (int sub = 0; sub < FLASH_BN / FLASH_SUB; ++sub) {
      const int n0 = sub * FLASH_SUB;
      /* Offsets of this subtile's pairs lie in [c0 + n0 - r0 - 15, c0 + n0 + 31 - r0]. */
      const int lowest = c0 + n0 - r0 - 15, highest = c0 + n0 + FLASH_SUB - 1 - r0;
      if (highest < 1 || lowest > a.half) continue; /* warp-uniform */
      flash_hist_count_subtile<DP, PASS>(a, s, hist_s, c0, r0, n0, g, t, a_hi, a_lo, row_square, spans, inv_scale2,
                                         below, above);
    }
    cp_async_wait_all();
    __syncthreads();
  }

  flash_hist_flush<PASS>(hist_s, H_WORDS, FLASH_THREADS, below, above, outside_s, a.hist);
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

} /* namespace */

template <int DP>
int launch_flash_histogram_pass(const flash_hist_args &a, int pass, long long blocks, cudaStream_t stream) {
  if (pass == SVGD_MEDIAN_PASS_HIGH) return launch_flash_histogram_kernel<DP, SVGD_MEDIAN_PASS_HIGH>(a, blocks, stream);
  if (pass == SVGD_MEDIAN_PASS_LOW) return launch_flash_histogram_kernel<DP, SVGD_MEDIAN_PASS_LOW>(a, blocks, stream);
  return launch_flash_histogram_kernel<DP, SVGD_MEDIAN_PASS_WINDOW>(a, blocks, stream);
}

template int launch_flash_histogram_pass<16>(const flash_hist_args &a, int pass, long long blocks, cudaStream_t stream);
template int launch_flash_histogram_pass<32>(const flash_hist_args &a, int pass, long long blocks, cudaStream_t stream);
template int launch_flash_histogram_pass<64>(const flash_hist_args &a, int pass, long long blocks, cudaStream_t stream);

template <int DP>
int launch_flash_phi_kernel(const flash_phi_args &a, long long row_blocks, cudaStream_t stream) {
  const size_t smem = 2 * sizeof(flash_phi_stage<DP>);
  CUDA_CHECK(cudaFuncSetAttribute(svgd_flash_phi_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  svgd_flash_phi_kernel<DP><<<dim3((unsigned)row_blocks, (unsigned)a.splits), FLASH_THREADS, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_flash_phi_kernel");
  return DS_OK;
}

template int launch_flash_phi_kernel<16>(const flash_phi_args &a, long long row_blocks, cudaStream_t stream);
template int launch_flash_phi_kernel<32>(const flash_phi_args &a, long long row_blocks, cudaStream_t stream);
template int launch_flash_phi_kernel<64>(const flash_phi_args &a, long long row_blocks, cudaStream_t stream);

} /* namespace dsampler_svgd */
