/* svgd_dispatch.cu: the extern "C" entry points of the SVGD kernels (svgd_kernels.h) and the
 * routing behind them: which family takes an operation at a dimension and on a device
 * (flash_dims_apply, median_gemm_direct, phi_wide, flash_phi_wgmma, flash_median_wgmma, stein_wgmma:
 * each asks src/shared/svgd_route.h's table, and nothing else routes; launch_flash_histogram), the column splits, the scratch layout of the tensor-core tiles and the
 * tuning of svgd_cuda_set_tuning. The families are the other files of cuda/svgd/:
 *   svgd_pair_histogram.cu  the median's pair histogram on the CUDA cores
 *   svgd_phi.cu             phi on the CUDA cores up to 128 coordinates, v, the finish, the update
 *   svgd_wide.cu            phi past 128 coordinates in 3xTF32, centred rows and squares, phi_pass
 *   svgd_flash.cu           fp16 mma.sync tiles up to 64 coordinates: phi and the median's passes
 *   svgd_wgmma.cu           warpgroup (sm_90a) tiles: phi, the median's passes, flash_phi_pass
 *   svgd_stein.cu           the KSD's Stein sums
 * phi_pass and flash_phi_pass route too, but launch template kernels and so live beside them
 * (svgd_internal.cuh); svgd_flash_distances_kernel, a template launched from an entry point
 * here, is defined in this file for the same reason. */

#include "svgd_internal.cuh"
#include "svgd_route.h"

namespace dsampler_svgd {

svgd_cuda_tuning_t svgd_tuning = {0, 0, 0, 0, 0, 0};

int grid_for(long long count, int threads) {
  long long blocks = (count + threads - 1) / threads;
  if (blocks > 65536) blocks = 65536;
  return blocks < 1 ? 1 : (int)blocks;
}

int flash_padded_dim(long long dim) { return dim <= 16 ? 16 : dim <= 32 ? 32 : 64; }
/* Rows of the split arrays: n rounded up to whole column tiles, so whole tiles can be read. */
long long flash_padded_rows(long long n) { return (n + FLASH_BN - 1) / FLASH_BN * FLASH_BN; }

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

namespace {

/* Column splits: a function of n alone (never of the local rows), so sums run in the same
 * order on any number of ranks. Small n gets more blocks to fill the device. */
int phi_splits(long long n) {
  const long long tiles = (n + PHI_BN - 1) / PHI_BN;
  long long splits = 32768 / (n > 0 ? n : 1);
  if (splits > PHI_MAX_SPLITS) splits = PHI_MAX_SPLITS;
  if (splits > tiles) splits = tiles;
  return splits < 1 ? 1 : (int)splits;
}

/* The routing table (src/shared/svgd_route.h) for this device: every choice of family below asks
 * it, the tests' and benchmarks' family choices (svgd_cuda_set_tuning) go in as its overrides. */
static svgd_arch_t device_arch() {
  svgd_arch_t arch = {0, 0, 0};
#ifdef DSAMPLER_HAVE_WGMMA
  arch.wgmma_built = 1;
#endif
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&arch.major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&arch.minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    arch.major = arch.minor = 0;
  }
  return arch;
}

static svgd_family_t route_family(svgd_op_t op, long long dim, int kernel_kind) {
  const svgd_route_overrides_t overrides = {svgd_tuning.median_family == 1, svgd_tuning.phi_family == 1,
                                            svgd_tuning.ksd_family == 1};
  return svgd_route(op, dim, kernel_kind, device_arch(), overrides).family;
}

/* Whether the distances are the tensor cores' (svgd_flash_* and svgd_wgmma_* kernels): the same
 * range for the median and phi. */
bool flash_dims_apply(long long dim) {
  const svgd_family_t family = svgd_route(SVGD_OP_MEDIAN, dim, SVGD_KERNEL_RBF, svgd_arch_t{0, 0, 0},
                                          svgd_route_overrides_t{0, 0, 0}).family;
  return family == SVGD_FAMILY_MMA_F16 || family == SVGD_FAMILY_WGMMA_F16;
}

/* Whether the median's passes are the GEMM identity on the CUDA cores (past 128 coordinates). */
bool median_gemm_direct(long long dim) {
  return svgd_route(SVGD_OP_MEDIAN, dim, SVGD_KERNEL_RBF, svgd_arch_t{0, 0, 0}, svgd_route_overrides_t{0, 0, 0})
             .family == SVGD_FAMILY_GEMM_DIRECT;
}

/* Whether phi is the wide 3xTF32 family (past 128 coordinates). */
bool phi_wide(long long dim) {
  return svgd_route(SVGD_OP_PHI, dim, SVGD_KERNEL_RBF, svgd_arch_t{0, 0, 0}, svgd_route_overrides_t{0, 0, 0})
             .family == SVGD_FAMILY_WIDE_TF32;
}

bool flash_phi_wgmma(long long dim) { return route_family(SVGD_OP_PHI, dim, SVGD_KERNEL_RBF) == SVGD_FAMILY_WGMMA_F16; }

bool flash_median_wgmma(long long dim) {
  return route_family(SVGD_OP_MEDIAN, dim, SVGD_KERNEL_RBF) == SVGD_FAMILY_WGMMA_F16;
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

/* The tensor-core tiles' distances for tests (svgd_launch_pair_distances): defined here, beside
 * their one launch, as a template kernel must be (svgd_internal.cuh). */

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

/* Whether the KSD's Stein sum takes the warpgroup tiles. */
bool stein_wgmma(long long dim, const svgd_kernel_t *kernel) {
  return route_family(SVGD_OP_KSD, dim, kernel->kind) == SVGD_FAMILY_WGMMA_F16;
}

} /* namespace */

} /* namespace dsampler_svgd */

using namespace dsampler_svgd;

/* The centred rows [n][dim] and their squares [n] for the GEMM identity (dim > 128); up to
 * FLASH_MAX_DIM coordinates those and their TF32 splits (the tensor cores' distances). */
extern "C" size_t svgd_pair_histogram_scratch_floats(int64_t n, int64_t dim) {
  if (flash_dims_apply(dim)) return flash_inputs_floats(n, dim, false);
  return median_gemm_direct(dim) ? (size_t)n * (size_t)dim + (size_t)n : 0;
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
  return median_gemm_direct(dim) && n >= 2 && (double)n * (double)svgd_kept_distances_ld(n) <= (double)WIDE_SLAB_FLOATS;
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
  const bool gemm = median_gemm_direct(dim);
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
  const int splits = !phi_wide(dim) ? phi_splits(n) : 1;
  size_t floats = 2 * (size_t)splits * (size_t)rows * (size_t)(dim + 1) + (size_t)n * (size_t)dim;
  if (!phi_wide(dim)) floats += 4 + (size_t)n * (size_t)dim; /* the centred rows, on 16 bytes */
  if (phi_wide(dim)) {
    const long long slab = wide_slab_columns(n, rows);
    /* 12: the alignment of v, of the slab and of the centred rows */
    floats += 12 + (size_t)rows * (size_t)(slab + slab / WIDE_BN) + (size_t)n + (size_t)n * (size_t)dim;
  }
  return floats;
}

/* svgd_launch_phi on the tensor-core tiles (flash_dims_apply), a its arguments with x the
 * particles: the partial sums at scratch, imq's second set set_floats further on, the split
 * inputs after both sets. */
static int phi_flash(phi_args a, const svgd_kernel_t *kernel, float *phi, float *scratch, size_t set_floats,
                     long long rows, long long row_blocks, cudaStream_t stream) {
  const long long n = a.n, dim = a.dim;
  /* Centred rows stand for x from here on (phi depends on differences only), in the
   * distances, in v and in the finish. */
  const flash_inputs in = flash_layout(scratch + 2 * set_floats, n, dim, true);
  const bool wgmma = flash_phi_wgmma(dim);
  DS_TRY(flash_prepare_rows(a.x, n, (int)dim, in, stream, wgmma));
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
  a.splits = flash ? flash_splits(n) : !phi_wide(dim) ? phi_splits(n) : 1;
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
  if (phi_wide(dim)) /* v on 16 bytes, for 16-byte copies */
    v_all = reinterpret_cast<float *>((reinterpret_cast<uintptr_t>(v_all) + 15) & ~static_cast<uintptr_t>(15));
  const long long row_blocks = (rows + PHI_BM - 1) / PHI_BM;
  if (row_blocks > 0x7FFFFFFF) return ds_fail(DS_ERR_INTERNAL, "svgd_launch_phi: too many rows (%lld)", rows);
  if (flash) return phi_flash(a, kernel, phi, scratch, set_floats, rows, row_blocks, stream);
  float *k_slab = NULL, *k_tile_sums = NULL, *squares = NULL;
  if (phi_wide(dim)) {
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
  if (!phi_wide(dim)) {
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
