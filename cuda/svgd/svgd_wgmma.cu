/* svgd_wgmma.cu: the tensor-core pair tiles on Hopper's warpgroup products (wgmma_f16.cuh,
 * sm_90a), 64 padded coordinates: phi (svgd_wgmma_phi_kernel) and the median's passes
 * (svgd_wgmma_histogram_kernel), each described where it is defined, with their launchers; and
 * flash_phi_pass, the phi pass of both tensor-core families (it launches the warpgroup kernel, a
 * template, so it lives beside it). The kernels' bodies are compiled where DSAMPLER_WGMMA_DEVICE
 * is defined (wgmma_f16.cuh: sm_90a's code) and are empty in the compute_90 pass. */

#include "svgd_internal.cuh"

namespace dsampler_svgd {

namespace {

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

#ifdef DSAMPLER_WGMMA_DEVICE
/* The A fragments of rows top and top + 8 (zeros for a row not valid), y in coordinate order:
 * a[0] holds coordinates 2t, 2t + 1. */
__device__ __forceinline__ void wgmma_row_fragments(const uint32_t *y_hi, const uint32_t *y_lo, long long top,
                                                    bool top_valid, bool bottom_valid, int t, uint32_t (&a_hi)[4][4],
                                                    uint32_t (&a_lo)[4][4]) {
  constexpr int KSTEPS = 4, WORDS = 32;
  const long long bottom = top + 8;
#pragma unroll
  for (int ks = 0; ks < KSTEPS; ++ks)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int w = 8 * ks + 4 * half + t;
      a_hi[ks][2 * half] = top_valid ? y_hi[top * WORDS + w] : 0u;
      a_hi[ks][2 * half + 1] = bottom_valid ? y_hi[bottom * WORDS + w] : 0u;
      a_lo[ks][2 * half] = top_valid ? y_lo[top * WORDS + w] : 0u;
      a_lo[ks][2 * half + 1] = bottom_valid ? y_lo[bottom * WORDS + w] : 0u;
    }
}

/* Column tile `tile` into s: 16-byte chunks into the swizzled tiles; columns past n read the
 * padding rows. */
__device__ __forceinline__ void wgmma_phi_stage_tile(const flash_phi_args &a, wgmma_phi_stage &s, long long tile,
                                                     int tid) {
  constexpr int WGMMA_PHI_THREADS = 128 * WGMMA_WARPGROUPS, WORDS = 32;
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
}

/* K of the warp's pairs of a tile from its finished dots; in a masked tile, columns from
 * `columns` on and the rows' own columns (own_column, + 8 for row g + 8) weigh 0. */
template <int MODE>
__device__ __forceinline__ void wgmma_phi_weights(const flash_phi_args &a, const wgmma_phi_stage &s, bool masked,
                                                  int columns, int own_column, int t, float minus_two_inv_scale2,
                                                  const float (&row_square)[2], const float (&dots)[32],
                                                  float (&k)[32]) {
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
}

/* A tile's K into the rows' sum_k and running scales (acc rescaled where a row's scale drops),
 * then K 2^sr split into K v's A fragments: k16 step q = C tiles 2q and 2q + 1. */
__device__ __forceinline__ void wgmma_phi_k_fragments(const float (&k)[32], float (&sum_k)[2], int (&row_exp)[2],
                                                      float (&row_scale)[2], float (&acc)[32],
                                                      uint32_t (&p_hi)[4][4], uint32_t (&p_lo)[4][4]) {
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
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int at = 8 * q + 2 * r; /* r: (tile 2q, row g), (2q, g + 8), (2q + 1, g), (2q + 1, g + 8) */
      const float scale = row_scale[r & 1];
      f16_split2(__fmul_rn(k[at], scale), __fmul_rn(k[at + 1], scale), &p_hi[q][r], &p_lo[q][r]);
    }
}
#endif

template <int MODE>
__global__ void __launch_bounds__(128 * WGMMA_WARPGROUPS, 1) svgd_wgmma_phi_kernel(const flash_phi_args a) {
#ifdef DSAMPLER_WGMMA_DEVICE
  constexpr int WGMMA_PHI_THREADS = 128 * WGMMA_WARPGROUPS, BM = 64 * WGMMA_WARPGROUPS;
  constexpr int KSTEPS = 4;
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

  /* The rows' A fragments, y in coordinate order. */
  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  wgmma_row_fragments(a.y_hi, a.y_lo, r0 + g, r0 + g < a.row_end, r0 + g + 8 < a.row_end, t, a_hi, a_lo);
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
    wgmma_phi_stage_tile(a, stages[local], tile, tid);
    mbar_arrive_copies(&full[local]);
  }
  /* Loads tile + WGMMA_PREFETCH into the stage its predecessor there has left. */
  auto produce = [&](long long tile) {
    if (tile + WGMMA_PREFETCH >= tile_end) return;
    const long long ahead = tile - tile_begin + WGMMA_PREFETCH;
    const int ahead_buffer = (int)(ahead % WGMMA_STAGES);
    if (ahead >= WGMMA_STAGES) mbar_wait(&empty[ahead_buffer], (uint32_t)((ahead / WGMMA_STAGES - 1) & 1));
    wgmma_phi_stage_tile(a, stages[ahead_buffer], tile + WGMMA_PREFETCH, tid);
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
    wgmma_phi_weights<MODE>(a, s, masked, columns, own_column, t, minus_two_inv_scale2, row_square, dots, k);
    uint32_t p_hi[4][4], p_lo[4][4];
    wgmma_phi_k_fragments(k, sum_k, row_exp, row_scale, acc, p_hi, p_lo);
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

#ifdef DSAMPLER_WGMMA_DEVICE
/* The item's 64 columns from c0 (modulo n) into s, with the 128-byte swizzle. */
__device__ __forceinline__ void wgmma_hist_stage_tile(const flash_hist_args &a, wgmma_hist_stage &s, int c0, int tid) {
  constexpr int THREADS = 128 * WGMMA_WARPGROUPS, BN = WGMMA_PHI_BN, WORDS = 32;
  for (int f = tid; f < 512; f += THREADS) {
    const int r = f / 8, q = f % 8, dst = wgmma_swizzle128(r, 16 * q) / 4;
    const size_t at = (size_t)((c0 + r) % a.n) * WORDS + 4 * q;
    cp_async_f32x4(reinterpret_cast<float *>(&s.y_hi[dst]), reinterpret_cast<const float *>(a.y_hi + at), true);
    cp_async_f32x4(reinterpret_cast<float *>(&s.y_lo[dst]), reinterpret_cast<const float *>(a.y_lo + at), true);
  }
  if (tid < BN) cp_async_f32(&s.squares[tid], a.squares + (c0 + tid) % a.n, true);
}

/* The warp's rows r0 + g, r0 + g + 8 of a row tile: their A fragments, |y|^2 and band spans
 * (zeros past the local rows). */
__device__ __forceinline__ void wgmma_hist_rows(const flash_hist_args &a, int r0, int g, int t, uint32_t (&a_hi)[4][4],
                                                uint32_t (&a_lo)[4][4], float (&row_square)[2], int (&spans)[2]) {
  const int top = r0 + g, bottom = r0 + g + 8;
  wgmma_row_fragments(a.y_hi, a.y_lo, top, top < a.row_end, bottom < a.row_end, t, a_hi, a_lo);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int i = r0 + g + 8 * h;
    row_square[h] = i < a.row_end ? a.squares[i] : 0.0f;
    spans[h] = i >= a.row_end ? 0 : (a.n % 2 == 0 && i >= a.half) ? a.half - 1 : a.half;
  }
}

/* The tile's three chains lh, hl, hh from zero over the k16 steps ascending, waited for. */
__device__ __forceinline__ void wgmma_hist_products(const wgmma_hist_stage &s, const uint32_t (&a_hi)[4][4],
                                                    const uint32_t (&a_lo)[4][4], float (&hh)[32], float (&lh)[32],
                                                    float (&hl)[32]) {
  constexpr int KSTEPS = 4;
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
}

/* Four keys' bins into the shared counters, where counted: the window's 32-bit counters, or the
 * radix passes' 16-bit halves with their wrap-arounds settled. */
template <int PASS>
__device__ __forceinline__ void wgmma_hist_add(const flash_hist_args &a, uint32_t *hist_s, const uint32_t (&bins)[4],
                                               const bool (&counted)[4]) {
  if (PASS == SVGD_MEDIAN_PASS_WINDOW) {
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

/* Counts the warp's pairs of the tile (columns from c0) that lie in its rows' bands; the window
 * pass adds the keys below and above the window to below and above. */
template <int PASS>
__device__ __forceinline__ void wgmma_hist_count(const flash_hist_args &a, const wgmma_hist_stage &s, int c0, int r0,
                                                 int g, int t, float inv_scale2, const float (&hh)[32],
                                                 const float (&lh)[32], const float (&hl)[32],
                                                 const float (&row_square)[2], const int (&spans)[2], uint32_t *hist_s,
                                                 unsigned long long &below, unsigned long long &above) {
  /* Offsets of the warp's pairs lie in [c0 - r0 - 15, c0 + 63 - r0]. */
  const int lowest = c0 - r0 - 15, highest = c0 + WGMMA_PHI_BN - 1 - r0;
  const int min_span = min(__shfl_sync(0xffffffffu, spans[0], 0), __shfl_sync(0xffffffffu, spans[1], 28));
  if (highest < 1 || lowest > a.half) return; /* warp-uniform */
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
    wgmma_hist_add<PASS>(a, hist_s, bins, counted);
  }
  below += below_item;
  above += above_item;
}
#endif

template <int PASS>
__global__ void __launch_bounds__(128 * WGMMA_WARPGROUPS, 1) svgd_wgmma_histogram_kernel(const flash_hist_args a) {
#ifdef DSAMPLER_WGMMA_DEVICE
  constexpr int THREADS = 128 * WGMMA_WARPGROUPS, BM = 64 * WGMMA_WARPGROUPS, BN = WGMMA_PHI_BN;
  constexpr int KSTEPS = 4, H_WORDS = wgmma_hist_words<PASS>();
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

  uint32_t a_hi[KSTEPS][4], a_lo[KSTEPS][4];
  float row_square[2] = {0.0f, 0.0f};
  int spans[2] = {0, 0};
  int loaded_row_tile = -1;
  unsigned long long below = 0ull, above = 0ull;
  float hh[32], lh[32], hl[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) hh[i] = lh[i] = hl[i] = 0.0f;
  if (item_begin < item_end) wgmma_hist_stage_tile(a, stages[0], first_column(item_begin), tid);
  cp_async_wait_all();
  wgmma_fence_shared();
  __syncthreads();
  for (long long item = item_begin; item < item_end; ++item) {
    const int buffer = (int)((item - item_begin) & 1);
    if (item + 1 < item_end) wgmma_hist_stage_tile(a, stages[buffer ^ 1], first_column(item + 1), tid);
    const int row_tile = (int)(item / a.col_tiles);
    const int r0 = a.row_begin + row_tile * BM + 16 * warp;
    if (row_tile != loaded_row_tile) {
      loaded_row_tile = row_tile;
      wgmma_hist_rows(a, r0, g, t, a_hi, a_lo, row_square, spans);
    }
    const wgmma_hist_stage &s = stages[buffer];
    /* The whole warpgroup takes the products; a warp whose pairs all lie outside its band
     * counts nothing. */
    wgmma_hist_products(s, a_hi, a_lo, hh, lh, hl);
    wgmma_hist_count<PASS>(a, s, first_column(item), r0, g, t, inv_scale2, hh, lh, hl, row_square, spans, hist_s,
                           below, above);
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

} /* namespace */

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

template int launch_wgmma_histogram_kernel<SVGD_MEDIAN_PASS_HIGH>(const flash_hist_args &a, long long blocks, cudaStream_t stream);
template int launch_wgmma_histogram_kernel<SVGD_MEDIAN_PASS_LOW>(const flash_hist_args &a, long long blocks, cudaStream_t stream);
template int launch_wgmma_histogram_kernel<SVGD_MEDIAN_PASS_WINDOW>(const flash_hist_args &a, long long blocks, cudaStream_t stream);

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

} /* namespace dsampler_svgd */
