/* svgd_internal.cuh: what the SVGD kernel families of cuda/svgd/ share, private to them: the
 * constants, argument structs and small device helpers used by more than one family, and the
 * declarations of what one file defines and another calls (launchers, kernels launched from
 * svgd_dispatch.cu, host helpers). The extern "C" entry points are svgd_kernels.h's, all in
 * svgd_dispatch.cu.
 *
 * A kernel that is a template is launched only from the file that defines it: nvcc's
 * whole-program mode (-rdc=false) gives a __global__ template's launch stub internal linkage
 * (-static-global-template-stub, on by default), so its launchers live beside it. */
#ifndef DSAMPLER_SVGD_INTERNAL_CUH
#define DSAMPLER_SVGD_INTERNAL_CUH

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

namespace dsampler_svgd {

/* svgd_cuda_set_tuning's settings (svgd_kernels.h), defined in svgd_dispatch.cu. */
extern svgd_cuda_tuning_t svgd_tuning;

/* ------------------------------------------------------------------------------------- cp.async */

/* 4-byte asynchronous copy global -> shared; zeros when !valid (nothing is read then). */
__device__ __forceinline__ void cp_async_f32(float *shared_dst, const float *global_src, bool valid) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/* 16-byte asynchronous copy global -> shared (both 16-byte aligned); zeros when !valid. */
__device__ __forceinline__ void cp_async_f32x4(float *shared_dst, const float *global_src, bool valid) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(shared_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(global_src),
               "r"(valid ? 16 : 0));
}

/* ------------------------------------------------------ pair histogram (svgd_pair_histogram.cu) */

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
static __device__ __noinline__ void hist_settle_wrap(unsigned long long *hist, uint32_t bin, uint32_t old) {
  atomicAdd(&hist[bin], 2ull * 65536ull);
  if ((bin & 1u) == 0) {
    atomicAdd(&hist[bin + 1], ~1ull); /* -2 modulo 2^64 */
    if (old == 0xFFFFFFFFu) atomicAdd(&hist[bin + 1], 2ull * 65536ull);
  }
}

/* ---------------------------------------- phi (svgd_phi.cu) and the weights of every phi kernel */

constexpr int PHI_THREADS = 256;
constexpr int PHI_BM = 128;                  /* rows per block: 16 thread rows x 8 */
constexpr int PHI_BN = 64;                   /* columns per tile: 16 thread columns x 4 */
constexpr int PHI_ROW_STRIDE = PHI_BM + 4;   /* rows_s [DP][BM + 4] */
constexpr int PHI_K_STRIDE = PHI_BM + 8;     /* kernel_s [BN][BM + 8]: conflict-free MMA reads */
constexpr int PHI_COL_STRIDE = PHI_BN + 4;   /* cols_s [DP][BN + 4] */
constexpr int PHI_MAX_DIM = 128;             /* larger dims take svgd_phi_generic_kernel */
constexpr int PHI_MAX_SPLITS = 8;

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

/* ---------------------------------------- wide 3xTF32 kernels, dim > PHI_MAX_DIM (svgd_wide.cu) */

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

/* ----------------------------- tensor-core pair tiles, dim <= 64 (svgd_flash.cu, svgd_wgmma.cu) */

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

/* The columns' vectors v of a phi pass: s - y / h (rbf, as svgd_v_kernel), s, or y. */
enum { FLASH_V_RBF = 0, FLASH_V_SCORE = 1, FLASH_V_CENTRED = 2 };
__device__ __forceinline__ float flash_v_value(const float *score, const float *centred, long long at, int mode,
                                               float h) {
  return mode == FLASH_V_RBF ? __fsub_rn(score[at], __fdiv_rn(centred[at], h))
         : mode == FLASH_V_SCORE ? score[at] : centred[at];
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

/* The warpgroup tiles (svgd_wgmma.cu): columns a tile, warpgroups of 64 rows a block. */
constexpr int WGMMA_PHI_BN = 64, WGMMA_WARPGROUPS = 3;

/* ----------------------------------------------------- kernel Stein discrepancy (svgd_stein.cu) */

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

/* ------------------------------------------ scratch of the tensor-core tiles (svgd_dispatch.cu) */

/* The flash kernels' inputs in scratch, each on 16 bytes: centred rows y [n][dim], |y|^2 [n],
 * the scales, y hi and lo [padded rows][DP / 2 words]; with_v: v hi and lo the same size. */
struct flash_inputs {
  float *centred, *squares;
  flash_scales *scales;
  uint32_t *y_hi, *y_lo, *v_hi, *v_lo;
};

/* --------------------------------------------------------- defined in one file, used in another */

/* svgd_dispatch.cu */
int grid_for(long long count, int threads);
int flash_padded_dim(long long dim);
long long flash_padded_rows(long long n);
float *align16(float *p);
size_t flash_split_words(long long n, long long dim);
size_t flash_inputs_floats(long long n, long long dim, bool with_v);
flash_inputs flash_layout(float *scratch, long long n, long long dim, bool with_v);
/* natural takes its default, false, at the definition, for the callers in svgd_dispatch.cu. */
int flash_prepare_rows(const float *x, long long n, int dim, const flash_inputs &in, cudaStream_t stream,
                       bool natural);

/* svgd_pair_histogram.cu: KC 16 or 32. */
template <int KC, bool GEMM>
int launch_pair_histogram(const pair_histogram_args &a, int pass, long long blocks, cudaStream_t stream);

/* svgd_phi.cu: DP 16, 32, 64 or 128. */
__global__ void svgd_v_kernel(const float *x, const float *score, long long count, float h, float *v);
__global__ void svgd_phi_finish_kernel(const phi_args a, float *phi);
__global__ void svgd_phi_finish_imq_kernel(const phi_args value, const phi_args weight, float diagonal, float *phi);
__global__ void svgd_update_kernel(float *x, const float *phi, float *g, long long count, int kind,
                                   float step, int first_iteration, float correction1, float correction2);
template <int DP>
int launch_phi_tiled(const phi_args &a, long long row_blocks, cudaStream_t stream);

/* svgd_wide.cu */
long long wide_slab_columns(long long n, long long rows);
int launch_centred_rows(const float *x, long long n, int dim, float *y, float *squares, cudaStream_t stream);
int phi_pass(const phi_args &a, float *k_slab, float *k_tile_sums, const float *squares, const float *dist,
             long long row_blocks, cudaStream_t stream);

/* svgd_flash.cu: DP 16, 32 or 64. */
__global__ void svgd_flash_max_abs_kernel(const float *src, long long count, uint32_t *max_bits);
__global__ void svgd_flash_split_kernel(const float *src, long long n, long long padded_rows, int dim, int dp,
                                        bool natural, const flash_scales *scales, uint32_t *hi, uint32_t *lo);
__global__ void svgd_flash_v_max_kernel(const float *score, const float *centred, long long n, int dim, int mode,
                                        float h, uint32_t *v_max);
__global__ void svgd_flash_v_split_kernel(const float *score, const float *centred, long long n, long long padded_rows,
                                          int dim, int dp, int mode, float h, bool natural, const flash_scales *scales,
                                          uint32_t *hi, uint32_t *lo);
template <int DP>
int launch_flash_histogram_pass(const flash_hist_args &a, int pass, long long blocks, cudaStream_t stream);
template <int DP>
int launch_flash_phi_kernel(const flash_phi_args &a, long long row_blocks, cudaStream_t stream);

/* svgd_wgmma.cu: PASS one of SVGD_MEDIAN_PASS_*. */
template <int PASS>
int launch_wgmma_histogram_kernel(const flash_hist_args &a, long long blocks, cudaStream_t stream);
int flash_phi_pass(const phi_args &p, const flash_inputs &in, int v_mode, long long row_blocks, bool wgmma,
                   cudaStream_t stream);

/* svgd_stein.cu */
__global__ void svgd_stein_sum_kernel(const stein_args a);
__global__ void exact_sum_values_kernel(const double *values, long long count, unsigned long long *totals);
size_t stein_inputs_floats(long long n, long long dim);
int launch_wgmma_stein(const float *x_all, const float *score_all, long long n, int dim, long long row_begin,
                       long long row_end, const svgd_kernel_t *kernel, double *row_sums, float *scratch,
                       cudaStream_t stream);

} /* namespace dsampler_svgd */

#endif
