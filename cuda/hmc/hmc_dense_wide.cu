/* hmc_dense_wide.cu: the dense metric's register-tiled family (HMC_DENSE_WIDE, hmc_kernels.h):
 * the kick and drift (hmc_dense_wide_kernel, persistent, with its launcher) and the ChEES terms
 * (hmc_dense_chees_wide_kernel), each described where it is defined. The family is chosen in
 * hmc_dispatch.cu. */

#include "hmc_internal.cuh"

namespace dsampler_hmc {

namespace {

/* The register-tiled dense kick and drift (the "wide" kernels), for the dims whose L, L^T and a
 * tile of chains fit in shared memory (wide_step_shared). A warp computes one group of
 * WIDE_GROUP consecutive coordinates for WIDE_SLAB chains: each lane 4 chains (lane + 32 j) x 8
 * coordinates in registers, and per term it reads the 4 chains' values (the tile transposed with
 * an odd stride: no bank conflicts) and 8 entries of L (one address for the warp), for 32
 * multiply-adds. A block is wide_groups(dim) x wide_slabs(dim) warps.
 *
 * Each output is the sum of dense_lt_dot (the kick: terms i >= k) or dense_l_dot (the drift:
 * terms k <= i), fmaf in the same increasing order from 0, so the results are those of the
 * kernels below bit for bit: a warp's loop starts (kick) or stops (drift) at its group, and the
 * 8 x 8 block on the diagonal takes only the terms its outputs include. The updates (r += kick
 * sum, q += eps sum) go through the tile, so that global memory is read and written coalesced. */

/* A thread's walk over the (chain, coordinate) cells of a tile in row-major order, from cell
 * `start` in steps of `step` cells: one division at the start, none per cell. */
struct tile_cursor {
  int c, k, step_c, step_k, dim;
  __device__ __forceinline__ tile_cursor(int dim_, int start, int step) : dim(dim_) {
    c = start / dim;
    k = start % dim;
    step_c = step / dim;
    step_k = step % dim;
  }
  __device__ __forceinline__ explicit tile_cursor(int dim_) : tile_cursor(dim_, (int)threadIdx.x, (int)blockDim.x) {}
  __device__ __forceinline__ void next() {
    c += step_c;
    k += step_k;
    if (k >= dim) {
      k -= dim;
      ++c;
    }
  }
};

/* A tile's cells are one contiguous run of global memory (its chains' rows): cell e of the tile
 * is src[e], chain e / dim, coordinate e % dim. A thread takes V consecutive cells at a time (V
 * = 4, one float4, when dim is a multiple of 4, so that the 4 share a chain), WIDE_STAGE such
 * groups loaded before any is handed on, so that that many loads are in flight per thread (a
 * loop of load then use waits for each). Cells at or past `cells` (past the tile's chains) read
 * as 0; visit(c, k, x, e) is called for the groups below `limit`. */
constexpr int WIDE_STAGE = 4;

template <int V>
struct cells_t {
  float v[V];
};

template <int V>
__device__ __forceinline__ cells_t<V> load_cells(const float *src, int e) {
  cells_t<V> out;
  if constexpr (V == 4) {
    const float4 x = *reinterpret_cast<const float4 *>(src + e);
    out.v[0] = x.x, out.v[1] = x.y, out.v[2] = x.z, out.v[3] = x.w;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out.v[j] = src[e + j];
  }
  return out;
}

template <int V>
__device__ __forceinline__ void store_cells(float *dst, int e, const cells_t<V> &x) {
  if constexpr (V == 4) {
    *reinterpret_cast<float4 *>(dst + e) = make_float4(x.v[0], x.v[1], x.v[2], x.v[3]);
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) dst[e + j] = x.v[j];
  }
}

template <int V, typename Visit>
__device__ __forceinline__ void tile_cells(const float *src, int dim, int cells, int limit, Visit visit) {
  const int step = V * (int)blockDim.x;
  tile_cursor at(dim, V * (int)threadIdx.x, step);
  for (int e0 = V * (int)threadIdx.x; e0 < limit; e0 += WIDE_STAGE * step) {
    cells_t<V> x[WIDE_STAGE];
    int c[WIDE_STAGE], k[WIDE_STAGE];
#pragma unroll
    for (int u = 0; u < WIDE_STAGE; ++u) {
      const int e = e0 + u * step;
      c[u] = at.c;
      k[u] = at.k;
      if (e < cells) {
        x[u] = load_cells<V>(src, e);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) x[u].v[j] = 0.0f;
      }
      at.next();
    }
#pragma unroll
    for (int u = 0; u < WIDE_STAGE; ++u)
      if (e0 + u * step < limit) visit(c[u], k[u], x[u], e0 + u * step);
  }
}

/* One term for the warp's outputs m in [lo, hi]: acc[j][m] = fmaf(row[m], T_col[c + 32 j], acc). */
__device__ __forceinline__ void wide_term(float (&acc)[WIDE_CHAINS][WIDE_GROUP], const float *row,
                                          const float *column, int c, int lo, int hi) {
  const float4 a = *reinterpret_cast<const float4 *>(row), z = *reinterpret_cast<const float4 *>(row + 4);
  const float l[WIDE_GROUP] = {a.x, a.y, a.z, a.w, z.x, z.y, z.z, z.w};
  float v[WIDE_CHAINS];
#pragma unroll
  for (int j = 0; j < WIDE_CHAINS; ++j) v[j] = column[c + 32 * j];
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m)
#pragma unroll
    for (int j = 0; j < WIDE_CHAINS; ++j)
      if (m >= lo && m <= hi) acc[j][m] = fmaf(l[m], v[j], acc[j][m]);
}

/* The warp's sums into the tile, T[k0 + m][c + 32 j], for the coordinates below dim. */
__device__ __forceinline__ void wide_store(float *T, int stride, int c, int k0, int dim,
                                           const float (&acc)[WIDE_CHAINS][WIDE_GROUP]) {
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m)
    if (k0 + m < dim)
#pragma unroll
      for (int j = 0; j < WIDE_CHAINS; ++j) T[(k0 + m) * stride + c + 32 * j] = acc[j][m];
}

__device__ __forceinline__ void wide_zero(float (&acc)[WIDE_CHAINS][WIDE_GROUP]) {
#pragma unroll
  for (int j = 0; j < WIDE_CHAINS; ++j)
#pragma unroll
    for (int m = 0; m < WIDE_GROUP; ++m) acc[j][m] = 0.0f;
}

/* Persistent: a block loads L and L^T once and takes tiles blockIdx.x, + gridDim.x, ... */
template <int V>
__global__ void __launch_bounds__(32 * WIDE_MAX_WARPS) hmc_dense_wide_kernel(const hmc_batch_t b, float scale,
                                                                            int drift, float *q_work,
                                                                            float *p_work, const float *grad_work) {
  extern __shared__ float shared[];
  const int dim = (int)b.dim, padded = wide_padded(dim), groups = wide_groups(dim), tile = wide_tile(dim);
  const int stride = tile + 1;
  float *L = shared, *LT = L + dim * padded, *T = LT + dim * padded, *eps = T + dim * stride;
  /* L and L^T (backend.h: metric_factor holds both), rows padded with zeros, read coalesced. */
  const float *factor_t = b.metric_factor + dim * dim;
  for (int e = threadIdx.x; e < dim * padded; e += blockDim.x) {
    const int i = e / padded, k = e % padded;
    L[e] = k < dim ? b.metric_factor[i * dim + k] : 0.0f; /* L[i][k] */
    LT[e] = k < dim ? factor_t[i * dim + k] : 0.0f;      /* LT[i][k] = L[k][i] */
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = WIDE_GROUP * (warp % groups), c = WIDE_SLAB * (warp / groups) + lane;
  const int block_end = k0 + WIDE_GROUP < dim ? k0 + WIDE_GROUP : dim;
  const long long tiles = (b.n_chains + tile - 1) / tile;
  for (long long t = blockIdx.x; t < tiles; t += gridDim.x) {
    const long long first = t * tile;
    const int chains = b.n_chains - first < tile ? (int)(b.n_chains - first) : tile, cells = chains * dim;
    float *p_tile = p_work + first * dim, *q_tile = q_work + first * dim;
    __syncthreads(); /* the last tile's T and eps are read */
    for (int cc = threadIdx.x; cc < chains; cc += blockDim.x) eps[cc] = b.step_size[first + cc];
    tile_cells<V>(grad_work + first * dim, dim, cells, tile * dim, [&](int cc, int k, const cells_t<V> &g, int) {
#pragma unroll
      for (int j = 0; j < V; ++j) T[(k + j) * stride + cc] = g.v[j];
    });
    __syncthreads();
    float acc[WIDE_CHAINS][WIDE_GROUP];
    wide_zero(acc);
    /* The kick: output k0 + m takes the terms i >= k0 + m. */
    for (int i = k0; i < block_end; ++i) wide_term(acc, L + i * padded + k0, T + i * stride, c, 0, i - k0);
    for (int i = block_end; i < dim; ++i) wide_term(acc, L + i * padded + k0, T + i * stride, c, 0, WIDE_GROUP - 1);
    __syncthreads();
    wide_store(T, stride, c, k0, dim, acc);
    __syncthreads();
    /* r += kick sum through the tile: its cells past the chains become 0. */
    tile_cells<V>(p_tile, dim, cells, tile * dim, [&](int cc, int k, const cells_t<V> &p, int e) {
      cells_t<V> r;
#pragma unroll
      for (int j = 0; j < V; ++j)
        r.v[j] = e < cells ? __fadd_rn(p.v[j], __fmul_rn(__fmul_rn(scale, eps[cc]), T[(k + j) * stride + cc])) : 0.0f;
      if (e < cells) store_cells<V>(p_tile, e, r);
#pragma unroll
      for (int j = 0; j < V; ++j) T[(k + j) * stride + cc] = r.v[j];
    });
    if (!drift) continue;
    __syncthreads();
    /* The drift: output k0 + m takes the terms k <= k0 + m, L_ik = LT[k][i]. */
    wide_zero(acc);
    for (int k = 0; k < k0; ++k) wide_term(acc, LT + k * padded + k0, T + k * stride, c, 0, WIDE_GROUP - 1);
    for (int k = k0; k < block_end; ++k) wide_term(acc, LT + k * padded + k0, T + k * stride, c, k - k0, WIDE_GROUP - 1);
    __syncthreads();
    wide_store(T, stride, c, k0, dim, acc);
    __syncthreads();
    tile_cells<V>(q_tile, dim, cells, cells, [&](int cc, int k, const cells_t<V> &q, int e) {
      cells_t<V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = __fadd_rn(q.v[j], __fmul_rn(eps[cc], T[(k + j) * stride + cc]));
      store_cells<V>(q_tile, e, out);
    });
  }
}

} /* namespace */

/* The dense ChEES terms, register-tiled as the wide kernels: a block of WIDE_CHEES_CHAINS (32)
 * chains, a warp per group of 8 coordinates, a lane per chain: u' and u (proposal, start) for
 * its 8 coordinates in double registers, each the sum of dense_whiten_one (k increasing, the
 * same expression), from the centred positions (double) and L^-1 transposed (double) in shared
 * memory. Then u'^2, u^2 and u' r' per entry into shared memory (over the positions) and one
 * thread per chain sums them over the coordinates in order, as hmc_dense_chees_kernel: the same
 * bits. */
__global__ void __launch_bounds__(32 * WIDE_MAX_WARPS) hmc_dense_chees_wide_kernel(const hmc_batch_t b,
                                                                                  const float *q_work,
                                                                                  const float *p_work) {
  extern __shared__ double shared_d[];
  const int dim = (int)b.dim, padded = wide_padded(dim), S = WIDE_CHEES_STRIDE;
  double *X1 = shared_d, *X0 = X1 + dim * S, *X2 = X0 + dim * S, *W = X2 + dim * S;
  float *R = reinterpret_cast<float *>(W + dim * padded);
  for (int e = threadIdx.x; e < dim * padded; e += blockDim.x) {
    const int k = e / padded, i = e % padded;
    W[e] = i < dim ? (double)b.metric_factor_inv[i * dim + k] : 0.0; /* W[k][i] = Linv[i][k] */
  }
  const long long first = (long long)blockIdx.x * WIDE_CHEES_CHAINS;
  const int chains = b.n_chains - first < WIDE_CHEES_CHAINS ? (int)(b.n_chains - first) : WIDE_CHEES_CHAINS;
  for (tile_cursor cell(dim); cell.c < WIDE_CHEES_CHAINS; cell.next()) {
    const int c = cell.c, k = cell.k;
    const bool in = c < chains;
    const long long at = (first + c) * dim + k;
    const double mk = (double)b.chees_center[k];
    X1[k * S + c] = in ? (double)q_work[at] - mk : 0.0;
    X0[k * S + c] = in ? (double)b.q[at] - mk : 0.0;
    R[k * S + c] = in ? p_work[at] : 0.0f;
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, c = threadIdx.x % 32, i0 = WIDE_GROUP * warp;
  const int block_end = i0 + WIDE_GROUP < dim ? i0 + WIDE_GROUP : dim;
  double u1[WIDE_GROUP], u0[WIDE_GROUP];
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m) u1[m] = u0[m] = 0.0;
  for (int k = 0; k < block_end; ++k) {
    const double a = X1[k * S + c], z = X0[k * S + c];
    const double *w = W + k * padded + i0;
    const int lo = k - i0;
#pragma unroll
    for (int m = 0; m < WIDE_GROUP; ++m)
      if (m >= lo) {
        u1[m] += w[m] * a;
        u0[m] += w[m] * z;
      }
  }
  __syncthreads();
#pragma unroll
  for (int m = 0; m < WIDE_GROUP; ++m)
    if (i0 + m < dim) {
      const int at = (i0 + m) * S + c;
      X2[at] = u1[m] * (double)R[at];
      X1[at] = u1[m] * u1[m];
      X0[at] = u0[m] * u0[m];
    }
  __syncthreads();
  if (threadIdx.x < chains) chees_chain_sums(b, first + c, X1 + c, X0 + c, X2 + c, dim, S);
}

/* The persistent wide kernel: as many blocks as the device holds at once, at most a tile each. */
template <int V>
int launch_dense_wide(const hmc_batch_t *batch, float scale, int drift, float *q_work, float *p_work,
                             const float *grad_work, cudaStream_t stream) {
  static size_t opted = 0;
  static int resident_dim = -1, resident = 0;
  const int dim = (int)batch->dim, threads = 32 * wide_groups(dim) * wide_slabs(dim);
  const size_t shared = wide_step_shared(dim);
  DS_TRY(allow_shared((const void *)hmc_dense_wide_kernel<V>, shared, &opted));
  if (resident_dim != dim) {
    int device = 0, sms = 0, per_sm = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, hmc_dense_wide_kernel<V>, threads, shared));
    resident = (per_sm > 0 ? per_sm : 1) * (sms > 0 ? sms : 1);
    resident_dim = dim;
  }
  const long long tiles = (batch->n_chains + wide_tile(dim) - 1) / wide_tile(dim);
  const long long blocks = tiles < resident ? tiles : resident;
  hmc_dense_wide_kernel<V><<<(unsigned)blocks, threads, shared, stream>>>(*batch, scale, drift, q_work, p_work,
                                                                          grad_work);
  CUDA_CHECK_LAUNCH("hmc_dense_wide_kernel");
  return DS_OK;
}

template int launch_dense_wide<1>(const hmc_batch_t *batch, float scale, int drift, float *q_work, float *p_work,
                                  const float *grad_work, cudaStream_t stream);
template int launch_dense_wide<4>(const hmc_batch_t *batch, float scale, int drift, float *q_work, float *p_work,
                                  const float *grad_work, cudaStream_t stream);

} /* namespace dsampler_hmc */
