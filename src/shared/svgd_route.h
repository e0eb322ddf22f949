/* svgd_route.h: which kernel family computes each SVGD operation on the GPU, by dimension and
 * architecture. This is the one routing table of the CUDA backend's SVGD kernels
 * (cuda/svgd/svgd_dispatch.cu asks it and nothing else), and with its columns the numerics
 * contract: the form of the squared distances, the precision of the products and how the result
 * agrees with the CPU backend or with float64. README.md's "What is computed" states the same in
 * words, with the measurements; tests/unit/test_svgd_route.c walks the table over d = 1..1100 on
 * sm_80, sm_90 and sm_90a builds.
 *
 *   operation  d          architecture              family      distances            agreement
 *   median     1-3        any                       direct      difference squares   bitwise the CPU's
 *   median     4-32       sm_80+                    mma f16     GEMM identity, fp16  exact for its D; D within 2e-6
 *   median     33-64      sm_90a build on cc 9.0    wgmma f16   GEMM identity, fp16  (same bits as mma f16)
 *   median     33-64      otherwise                 mma f16     GEMM identity, fp16  exact for its D; D within 2e-6
 *   median     65-128     any                       direct      difference squares   bitwise the CPU's
 *   median     129-       any                       gemm direct GEMM identity, fma   bitwise the CPU's
 *   phi        1-3        any                       direct      difference squares   float32, fixed order
 *   phi        4-32       sm_80+                    mma f16     GEMM identity, fp16  within 2e-6 of float64
 *   phi        33-64      sm_90a build on cc 9.0    wgmma f16   GEMM identity, fp16  within 2e-6 of float64
 *   phi        33-64      otherwise                 mma f16     GEMM identity, fp16  within 2e-6 of float64
 *   phi        65-128     any                       direct      difference squares   float32, fixed order
 *   phi        129-       any                       wide tf32   GEMM identity, 3xTF32 within 1e-5 of float64
 *   ksd (rbf)  33-64      sm_90a build on cc 9.0    wgmma f16   GEMM identity, fp16  within 2e-6 of float64
 *   ksd        otherwise  any                       direct      difference squares   u in double, within 1e-6
 *
 * Every family sums in an order fixed by global indices, so every row (and the median, and the
 * KSD) is the same bits on any number of ranks. Overrides (tests, benchmarks) choose the mma
 * family where wgmma would run, through svgd_route's `overrides`, never through globals. */
#ifndef DSAMPLER_SVGD_ROUTE_H
#define DSAMPLER_SVGD_ROUTE_H

#include "svgd_kernel_math.h" /* SVGD_KERNEL_FN, SVGD_KERNEL_RBF, SVGD_DIRECT_MAX_DIM */

typedef enum { SVGD_OP_MEDIAN = 0, SVGD_OP_PHI = 1, SVGD_OP_KSD = 2 } svgd_op_t;

typedef enum {
  SVGD_FAMILY_DIRECT = 0,      /* CUDA cores: sum_k (x_ik - x_jk)^2, fmaf, k ascending */
  SVGD_FAMILY_GEMM_DIRECT = 1, /* CUDA cores: the GEMM identity on centred rows, fma chains (svgd_kernel_math.h) */
  SVGD_FAMILY_MMA_F16 = 2,     /* tensor cores, mma.sync m16n8k16: fp16 hi + lo split products, float32 sums */
  SVGD_FAMILY_WGMMA_F16 = 3,   /* Hopper's warpgroup products (sm_90a): the same split products */
  SVGD_FAMILY_WIDE_TF32 = 4    /* tensor cores, mma.sync m16n8k8 in 3xTF32: GEMM-shaped tiles of K and K v */
} svgd_family_t;

typedef enum {
  SVGD_AGREE_BITWISE_CPU = 0,  /* the CPU backend's bits */
  SVGD_AGREE_FIXED_ORDER = 1,  /* float32 sums in an order fixed by global indices; not the CPU's bits */
  SVGD_AGREE_FLOAT64_1E6 = 2,  /* within 1e-6 (relative) of float64 */
  SVGD_AGREE_FLOAT64_2E6 = 3,  /* within 2e-6 (relative) of float64; the median exact for these distances */
  SVGD_AGREE_FLOAT64_1E5 = 4   /* within 1e-5 (relative) of float64 */
} svgd_agreement_t;

/* The device a route is for: its compute capability and whether the build holds sm_90a's code
 * (DSAMPLER_HAVE_WGMMA). */
typedef struct svgd_arch {
  int major, minor;
  int wgmma_built;
} svgd_arch_t;

/* 1: the mma f16 family where wgmma would run (0: the table's choice). */
typedef struct svgd_route_overrides {
  int median_mma, phi_mma, ksd_direct;
} svgd_route_overrides_t;

typedef struct svgd_route {
  svgd_family_t family;
  svgd_agreement_t agreement;
} svgd_route_t;

/* The tensor-core fp16 families' range: below 4 coordinates the GEMM identity's cancellation
 * costs more than 2e-6 and there is no product to speak of; past 64 the tiles do not hold a row. */
#define SVGD_F16_MIN_DIM 4
#define SVGD_F16_MAX_DIM 64
/* The warpgroup families take rows padded to 64 coordinates: 33 to 64. */
#define SVGD_WGMMA_MIN_DIM 33

SVGD_KERNEL_FN int svgd_route_wgmma_device(svgd_arch_t arch) {
  return arch.wgmma_built && arch.major == 9 && arch.minor == 0;
}

SVGD_KERNEL_FN svgd_route_t svgd_route(svgd_op_t op, long long dim, int kernel_kind, svgd_arch_t arch,
                                       svgd_route_overrides_t overrides) {
  svgd_route_t r;
  const int f16 = dim >= SVGD_F16_MIN_DIM && dim <= SVGD_F16_MAX_DIM;
  const int wgmma = dim >= SVGD_WGMMA_MIN_DIM && dim <= SVGD_F16_MAX_DIM && svgd_route_wgmma_device(arch);
  switch (op) {
    case SVGD_OP_MEDIAN:
      if (f16) {
        r.family = wgmma && !overrides.median_mma ? SVGD_FAMILY_WGMMA_F16 : SVGD_FAMILY_MMA_F16;
        r.agreement = SVGD_AGREE_FLOAT64_2E6;
      } else {
        r.family = dim > SVGD_DIRECT_MAX_DIM ? SVGD_FAMILY_GEMM_DIRECT : SVGD_FAMILY_DIRECT;
        r.agreement = SVGD_AGREE_BITWISE_CPU;
      }
      return r;
    case SVGD_OP_PHI:
      if (f16) {
        r.family = wgmma && !overrides.phi_mma ? SVGD_FAMILY_WGMMA_F16 : SVGD_FAMILY_MMA_F16;
        r.agreement = SVGD_AGREE_FLOAT64_2E6;
      } else if (dim > SVGD_DIRECT_MAX_DIM) {
        r.family = SVGD_FAMILY_WIDE_TF32;
        r.agreement = SVGD_AGREE_FLOAT64_1E5;
      } else {
        r.family = SVGD_FAMILY_DIRECT;
        r.agreement = SVGD_AGREE_FIXED_ORDER;
      }
      return r;
    default: /* SVGD_OP_KSD */
      if (kernel_kind == SVGD_KERNEL_RBF && wgmma && !overrides.ksd_direct) {
        r.family = SVGD_FAMILY_WGMMA_F16;
        r.agreement = SVGD_AGREE_FLOAT64_2E6;
      } else {
        r.family = SVGD_FAMILY_DIRECT;
        r.agreement = SVGD_AGREE_FLOAT64_1E6;
      }
      return r;
  }
}

#endif
