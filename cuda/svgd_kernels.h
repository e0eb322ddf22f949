/* svgd_kernels.h: launchers of the SVGD kernels (cuda/svgd/) and of the fused built-in
 * gradient, as plain C. Every array is device memory; every launcher checks its sizes, runs
 * on `stream` and checks the launch. Semantics are those of backend.h. */
#ifndef DSAMPLER_SVGD_KERNELS_H
#define DSAMPLER_SVGD_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "targets_builtin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel variant, chosen by measurement (tests/bench/BENCHMARKS.md); settable for benchmarks.
 * The family fields are the overrides of the routing table (src/shared/svgd_route.h), which the
 * dispatch asks for every choice of family: they take effect only where the table allows.
 * hist_chunk: coordinates staged per step of the histogram kernel (16 or 32; 0, the default:
 * 16 for direct differences, 32 for the GEMM identity, the faster of each on the H200).
 * wide_slab: columns per kernel slab of phi for dim > 128 (a multiple of 128; 0, the default:
 * sized by memory). Results do not depend on it (tested).
 * phi_family: phi's kernels from 33 to 64 coordinates (0, the default: Hopper's warpgroup
 * products where the build and the device have them; 1: mma.sync tiles; 2: the warpgroup
 * products, the same as 0 where they apply). The two agree within phi's tolerance, not bit for
 * bit. median_family: the same for the median's passes, whose distances are the same bits in
 * both families. ksd_family: the KSD's Stein sum (rbf) from 33 to 64 coordinates (0, the
 * default: the warpgroup products where they apply; 1: the CUDA cores in double, as other
 * dimensions and imq take it; 2: as 0). window_flush: tiles between the warpgroup window
 * pass's flushes of its 32-bit block counters (0, the default: the most that keeps them below
 * 2^32; smaller for tests, the counts are the same). */
typedef struct svgd_cuda_tuning {
  int hist_chunk;
  int wide_slab;
  int phi_family;
  int median_family;
  int ksd_family;
  int window_flush;
} svgd_cuda_tuning_t;
void svgd_cuda_set_tuning(svgd_cuda_tuning_t tuning);
svgd_cuda_tuning_t svgd_cuda_get_tuning(void);

/* Floats of device scratch svgd_launch_pair_histogram needs: the centred rows and their
 * squares when the distances are the GEMM identity's (dim > 128, svgd_kernel_math.h), else 0. */
size_t svgd_pair_histogram_scratch_floats(int64_t n, int64_t dim);
/* Pairs of rows [row_begin, row_end) with their next floor(n/2) columns (backend.h), counted
 * with weight 2 into hist_dev[SVGD_HIST_BINS], or [SVGD_WINDOW_COUNTS] for the window pass
 * (added to what is there). scratch: svgd_pair_histogram_scratch_floats() floats. sm_count
 * sizes the persistent grid. */
int svgd_launch_pair_histogram(const float *x_all, int64_t n, int64_t dim, int64_t row_begin,
                               int64_t row_end, int pass, uint32_t select_bits,
                               unsigned long long *hist_dev, float *scratch, float *dist, int sm_count,
                               cudaStream_t stream);
/* Whether the GPU's squared distances are the tensor cores' (dim <= 64: the GEMM identity on
 * centred rows in 3xTF32, the same in the median's passes and in phi; cuda/svgd/). */
int svgd_distances_on_tensor_cores(int64_t dim);
/* D [row_end - row_begin][n] of those rows against every column, as the median and phi take
 * them (diagonal entries included, as computed): for tests. scratch: the floats
 * svgd_pair_distances_scratch_floats() says. */
size_t svgd_pair_distances_scratch_floats(int64_t n, int64_t dim);
int svgd_launch_pair_distances(const float *x_all, int64_t n, int64_t dim, int64_t row_begin, int64_t row_end,
                               float *dist, float *scratch, cudaStream_t stream);
/* Whether a median pass can keep its distances for phi (dist above): the GEMM identity's
 * (dim > 128) and n x svgd_kept_distances_ld(n) floats within phi's slab budget (512 MB), so
 * phi's K then comes from the median's own D (rank count aside: the rule depends on n and dim).
 * dist: [row_end - row_begin][svgd_kept_distances_ld(n)] floats; the pass writes D_ij of every
 * local row and j != i, its band's pairs (both ways round where both rows are local) and, when
 * the rows are not all n, a second pass for the rest. */
int svgd_keeps_distances(int64_t n, int64_t dim);
int64_t svgd_kept_distances_ld(int64_t n);

/* Floats of device scratch svgd_launch_phi needs for these sizes. */
size_t svgd_phi_scratch_floats(int64_t n, int64_t dim, int64_t rows);
/* phi [row_end - row_begin, dim] with the kernel; scratch of svgd_phi_scratch_floats() floats;
 * dist: distances a median pass kept for these rows (svgd_keeps_distances), or NULL. */
int svgd_launch_phi(const float *x_all, const float *score_all, int64_t n, int64_t dim,
                    int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel, float *phi, float *scratch,
                    const float *dist, cudaStream_t stream);
/* backend.h's svgd_stein_sum: row_sums [row_end - row_begin] doubles of scratch, and scratch
 * of svgd_stein_scratch_floats() floats beside them (the warpgroup tiles' inputs: rbf, 33 to 64
 * coordinates on sm_90a; elsewhere 0, the CUDA cores in double); totals (EXACT_DIGITS + 1)
 * receive the exact digits of the sum and, last, how many rows fell outside the exact sums'
 * range. */
size_t svgd_stein_scratch_floats(int64_t n, int64_t dim, const svgd_kernel_t *kernel);
int svgd_launch_stein_sum(const float *x_all, const float *score_all, int64_t n, int64_t dim,
                          int64_t row_begin, int64_t row_end, const svgd_kernel_t *kernel,
                          double *row_sums, float *scratch, unsigned long long *totals, cudaStream_t stream);

/* kind: 0 sgd, 1 adagrad, 2 adam (svgd_update_t); correction1, correction2: adam's bias
 * corrections (svgd_adam_bias). */
int svgd_launch_update(float *x, const float *phi, float *g, int64_t count, int kind, float step, int64_t iteration,
                       float correction1, float correction2, cudaStream_t stream);

/* The built-in gaussian's logp [n] and grad [n, dim] at x [n, dim]. */
int gaussian_launch_logp_grad(const builtin_params_t *params, const float *x, int64_t n,
                              float *logp, float *grad, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
