/* svgd_phi.cu: phi on the CUDA cores up to PHI_MAX_DIM (128) coordinates, with its launcher; the
 * columns' vectors v and the finish of every phi family; the particles' update.
 *
 * - svgd_phi_kernel: phi for a block of 128 rows against streamed 64-column tiles, in the
 *   manner of FlashAttention: sum_j K_ij and sum_j K_ij v_j stay in registers, K_ij is formed
 *   tile by tile in shared memory and never leaves the chip. Columns can be split over
 *   blocks for small n; the split depends on n alone and the partial sums are added in a
 *   fixed order, so a row's result does not depend on how rows are spread over ranks.
 *   Up to 128 coordinates: beyond, sum_j K_ij v_j no longer fits in a block's registers.
 *
 * svgd_v_kernel forms v; svgd_phi_finish_kernel and svgd_phi_finish_imq_kernel add the splits'
 * partial sums and the diagonal into phi, for this file's kernel and the other families alike;
 * svgd_update_kernel moves the particles along phi (sgd, adagrad, adam). */

#include "svgd_internal.cuh"

namespace dsampler_svgd {

namespace {

template <int DP>
constexpr size_t phi_smem_bytes() {
  return sizeof(float) * ((size_t)DP * PHI_ROW_STRIDE + (size_t)DP * PHI_COL_STRIDE +
                          (size_t)PHI_BN * (DP + 8) + (size_t)PHI_BN * PHI_K_STRIDE);
}

} /* namespace */

__global__ void svgd_v_kernel(const float *x, const float *score, long long count, float h, float *v) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count;
       e += (long long)gridDim.x * blockDim.x)
    v[e] = __fsub_rn(score[e], __fdiv_rn(x[e], h));
}

namespace {

/* Stages x of the block's rows, transposed to [coordinate][row]; rows past row_end and
 * coordinates past dim are zero-filled. */
template <int DP>
__device__ __forceinline__ void phi_stage_rows(const phi_args &a, long long r0, int tid, float *rows_s) {
  for (int f = tid; f < PHI_BM * DP; f += PHI_THREADS) {
    const int rr = f / DP, k = f % DP;
    const long long row = r0 + rr;
    const bool valid = row < a.row_end && k < a.dim;
    cp_async_f32(rows_s + k * PHI_ROW_STRIDE + rr, valid ? a.x + row * a.dim + k : a.x, valid);
  }
}

/* Stages x of a tile's columns, transposed to [coordinate][column]: this thread's coordinate
 * k_load of columns lead + l * LOAD_COLUMNS, zero-filled past n and dim. */
template <int DP>
__device__ __forceinline__ void phi_stage_x(const phi_args &a, long long tile, int k_load, int lead, bool k_valid,
                                            float *cols_s) {
  constexpr int LOAD_COLUMNS = PHI_THREADS / DP; /* columns one sweep of the block stages */
#pragma unroll
  for (int l = 0; l < PHI_BN / LOAD_COLUMNS; ++l) {
    const int cc = lead + l * LOAD_COLUMNS;
    const long long column = tile * PHI_BN + cc;
    const bool valid = k_valid && column < a.n;
    cp_async_f32(cols_s + k_load * PHI_COL_STRIDE + cc, valid ? a.x + column * a.dim + k_load : a.x, valid);
  }
}

/* Stages v of a tile's columns as [column][coordinate], the same elements per thread as phi_stage_x. */
template <int DP>
__device__ __forceinline__ void phi_stage_v(const phi_args &a, long long tile, int k_load, int lead, bool k_valid,
                                            float *v_s) {
  constexpr int V_STRIDE = DP + 8;
  constexpr int LOAD_COLUMNS = PHI_THREADS / DP;
#pragma unroll
  for (int l = 0; l < PHI_BN / LOAD_COLUMNS; ++l) {
    const int cc = lead + l * LOAD_COLUMNS;
    const long long column = tile * PHI_BN + cc;
    const bool valid = k_valid && column < a.n;
    cp_async_f32(v_s + cc * V_STRIDE + k_load, valid ? a.v + column * a.dim + k_load : a.v, valid);
  }
}

/* Zeroes the thread's sums: sum_j K_ij v_j in acc, sum_j K_ij in sum_k. */
template <int ACC>
__device__ __forceinline__ void phi_zero_sums(float (&acc)[ACC], float (&sum_k)[8]) {
#pragma unroll
  for (int e = 0; e < ACC; ++e) acc[e] = 0.0f;
#pragma unroll
  for (int r = 0; r < 8; ++r) sum_k[r] = 0.0f;
}

/* Phase 2's v of one column: the thread's DPT coordinates, in the widest loads their count allows. */
template <int DPT>
__device__ __forceinline__ void phi_load_v(const float *v_row, float (&vv)[DPT]) {
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
}

/* Writes the block's partial sums of this split: sum_k per row, sum_kv per row and coordinate. */
template <int DP>
__device__ __forceinline__ void phi_write_partials(const phi_args &a, long long r0, int split, int tx, int ty,
                                                   float (&sum_k)[8], const float (&acc)[8 * (DP / 16)]) {
  constexpr int DPT = DP / 16;
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

  phi_stage_rows<DP>(a, r0, tid, rows_s);

  /* acc[r * DPT + e]: sum_kv of row ty*8+r, coordinate tx*DPT+e. */
  constexpr int ACC = 8 * DPT;
  float acc[ACC];
  float sum_k[8];
  phi_zero_sums(acc, sum_k);

  if (tile_begin < tile_end) phi_stage_x<DP>(a, tile_begin, k_load, lead, k_valid, cols_s);
  cp_async_wait_all();
  __syncthreads();

  for (long long tile = tile_begin; tile < tile_end; ++tile) {
    phi_stage_v<DP>(a, tile, k_load, lead, k_valid, v_s); /* lands during phase 1 */

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

    if (tile + 1 < tile_end) phi_stage_x<DP>(a, tile + 1, k_load, lead, k_valid, cols_s); /* lands during phase 2 */

    /* Phase 2: sum_kv += K[rows, tile] @ v[tile, coordinates]. */
#pragma unroll 4
    for (int j = 0; j < PHI_BN; ++j) {
      const float4 k0 = *reinterpret_cast<const float4 *>(kernel_s + j * PHI_K_STRIDE + ty * 8);
      const float4 k1 = *reinterpret_cast<const float4 *>(kernel_s + j * PHI_K_STRIDE + ty * 8 + 4);
      const float kv[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
      float vv[DPT];
      phi_load_v(v_s + j * V_STRIDE + tx * DPT, vv);
#pragma unroll
      for (int r = 0; r < 8; ++r)
#pragma unroll
        for (int e = 0; e < DPT; ++e) acc[r * DPT + e] = __fmaf_rn(kv[r], vv[e], acc[r * DPT + e]);
    }
    cp_async_wait_all();
    __syncthreads();
  }

  phi_write_partials<DP>(a, r0, split, tx, ty, sum_k, acc);
}

} /* namespace */

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

template <int DP>
int launch_phi_tiled(const phi_args &a, long long row_blocks, cudaStream_t stream) {
  const size_t smem = phi_smem_bytes<DP>();
  CUDA_CHECK(cudaFuncSetAttribute(svgd_phi_kernel<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  dim3 grid((unsigned)row_blocks, (unsigned)a.splits);
  svgd_phi_kernel<DP><<<grid, PHI_THREADS, smem, stream>>>(a);
  CUDA_CHECK_LAUNCH("svgd_phi_kernel");
  return DS_OK;
}

template int launch_phi_tiled<16>(const phi_args &a, long long row_blocks, cudaStream_t stream);
template int launch_phi_tiled<32>(const phi_args &a, long long row_blocks, cudaStream_t stream);
template int launch_phi_tiled<64>(const phi_args &a, long long row_blocks, cudaStream_t stream);
template int launch_phi_tiled<128>(const phi_args &a, long long row_blocks, cudaStream_t stream);

} /* namespace dsampler_svgd */
