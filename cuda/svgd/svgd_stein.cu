/* svgd_stein.cu: the kernel Stein discrepancy's Stein sums, with their launchers: each local row's
 * sum of u_p over its pairs, on the CUDA cores (svgd_stein_sum_kernel) or on the warpgroup tiles
 * (svgd_wgmma_stein_kernel, rbf, 33 to 64 coordinates, sm_90a, with its terms, scales and splits;
 * stein_wgmma in svgd_dispatch.cu chooses); and exact_sum_values_kernel, which adds the rows' sums
 * into exact digits. Each kernel is described where it is defined. */

#include "svgd_internal.cuh"

namespace dsampler_svgd {

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

namespace {

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

#ifdef DSAMPLER_WGMMA_DEVICE
/* The 64 columns from c0 (modulo n) into s: y, v, w with the 128-byte swizzle, |y|^2 and the
 * column terms. */
__device__ __forceinline__ void wgmma_ksd_stage_tile(const wgmma_ksd_args &a, wgmma_ksd_stage &s, long long c0,
                                                     int tid) {
  constexpr int THREADS = 128 * KSD_WARPGROUPS, BN = KSD_BN, WORDS = 32;
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
}

/* The warp's rows r0 + g, r0 + g + 8: their A fragments in coordinate order (a[0] holds
 * coordinates 2t, 2t + 1) of y and s, |y|^2, row terms (zeros past n) and band spans (0 outside
 * the local rows). */
__device__ __forceinline__ void wgmma_ksd_rows(const wgmma_ksd_args &a, int r0, int g, int t, uint32_t (&y_hi)[4][4],
                                               uint32_t (&y_lo)[4][4], uint32_t (&s_hi)[4][4], uint32_t (&s_lo)[4][4],
                                               float (&row_square)[2], float (&rowterm)[2], int (&spans)[2]) {
  constexpr int KSTEPS = 4, WORDS = 32;
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
}

/* The tile's products, waited for: the distances' chain into dots, and the bracket's one chain
 * of [s | y] with [v | w] (lo hi, hi lo, then hi hi) into bracket, both from zero. */
__device__ __forceinline__ void wgmma_ksd_products(const wgmma_ksd_stage &s, const uint32_t (&y_hi)[4][4],
                                                   const uint32_t (&y_lo)[4][4], const uint32_t (&s_hi)[4][4],
                                                   const uint32_t (&s_lo)[4][4], float (&dots)[32],
                                                   float (&bracket)[32]) {
  constexpr int KSTEPS = 4;
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
}

/* u_p of the warp's pairs of the tile (columns from c0) that lie in its rows' bands, added in
 * float (columns ascending), each row's into its double sum. */
__device__ __forceinline__ void wgmma_ksd_tile_sum(const wgmma_ksd_args &a, const wgmma_ksd_stage &s, int c0, int r0,
                                                   int g, int t, int min_span, float minus_two_inv_scale2,
                                                   float d_factor, const float (&row_square)[2],
                                                   const float (&rowterm)[2], const int (&spans)[2],
                                                   const float (&dots)[32], const float (&bracket)[32],
                                                   double (&row_sum)[2]) {
  const int lowest = c0 - r0 - 15, highest = c0 + KSD_BN - 1 - r0;
  if (highest < 1 || lowest > a.half) return;              /* warp-uniform */
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
#endif

/* A block per 128 rows, aligned on multiples of 128 in the global numbering, walks all of its
 * rows' pairs (i, i + offset mod n), offset 1 .. span(i), in 64-column tiles in order (double
 * buffered, a block barrier a tile). Each thread adds its 16 pairs of a row in a tile in float
 * (columns ascending), that into its row's double sum; at the end the 4 threads of a row add
 * theirs in a fixed tree. A row's sum follows from i and n alone (the tiles are aligned globally
 * and a block takes a row tile whole), so it is the same on any number of ranks. */
__global__ void __launch_bounds__(128 * KSD_WARPGROUPS, 1) svgd_wgmma_stein_kernel(const wgmma_ksd_args a) {
#ifdef DSAMPLER_WGMMA_DEVICE
  constexpr int BN = KSD_BN, KSTEPS = 4;
  extern __shared__ float4 wgmma_shared_raw[];
  const uint32_t misalign = (uint32_t)__cvta_generic_to_shared(wgmma_shared_raw) & 1023u;
  wgmma_ksd_stage *stages =
      reinterpret_cast<wgmma_ksd_stage *>(reinterpret_cast<char *>(wgmma_shared_raw) + ((1024u - misalign) & 1023u));
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  const int tile0 = a.tile_row0 + blockIdx.x * KSD_BM;
  const int r0 = tile0 + 16 * warp; /* the warp's rows */
  const float minus_two_inv_scale2 = -2.0f * flash_inv_scale2(a.scales);
  const float d_factor = a.ksd->d_factor;
  auto first_column = [&](int col_tile) { return (long long)tile0 + 1 + (long long)col_tile * BN; };

  uint32_t y_hi[KSTEPS][4], y_lo[KSTEPS][4], s_hi[KSTEPS][4], s_lo[KSTEPS][4];
  float row_square[2], rowterm[2];
  int spans[2];
  wgmma_ksd_rows(a, r0, g, t, y_hi, y_lo, s_hi, s_lo, row_square, rowterm, spans);
  const int min_span = min(__shfl_sync(0xffffffffu, spans[0], 0), __shfl_sync(0xffffffffu, spans[1], 28));
  double row_sum[2] = {0.0, 0.0};
  float dots[32], bracket[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) dots[i] = bracket[i] = 0.0f;

  if (a.col_tiles > 0) wgmma_ksd_stage_tile(a, stages[0], first_column(0), tid);
  cp_async_wait_all();
  wgmma_fence_shared();
  __syncthreads();
  for (int col_tile = 0; col_tile < a.col_tiles; ++col_tile) {
    const int buffer = col_tile & 1;
    if (col_tile + 1 < a.col_tiles) wgmma_ksd_stage_tile(a, stages[buffer ^ 1], first_column(col_tile + 1), tid);
    const wgmma_ksd_stage &s = stages[buffer];
    wgmma_ksd_products(s, y_hi, y_lo, s_hi, s_lo, dots, bracket);
    wgmma_ksd_tile_sum(a, s, tile0 + 1 + col_tile * BN, r0, g, t, min_span, minus_two_inv_scale2, d_factor, row_square,
                       rowterm, spans, dots, bracket, row_sum);
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

} /* namespace */

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

namespace {

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

} /* namespace */

size_t stein_inputs_floats(long long n, long long dim) {
  return flash_inputs_floats(n, dim, false) + 6 * flash_split_words(n, 64) + 4 * (size_t)n + 2 * (size_t)n +
         sizeof(wgmma_ksd_scales) / sizeof(float) + 4 * 12;
}

namespace {

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

} /* namespace */

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

} /* namespace dsampler_svgd */
