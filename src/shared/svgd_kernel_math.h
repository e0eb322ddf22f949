/* svgd_kernel_math.h: the SVGD kernels' per-pair values (backend.h's svgd_kernel_t) and the
 * Stein kernel of the kernel Stein discrepancy, as inline functions compiled for the host and
 * the GPU, so both backends evaluate one formula (as rng.h does for Philox).
 *
 * Stein kernel (Liu, Lee & Jordan 2016; Gorham & Mackey 2017) of a kernel k(x, y) of
 * D = |x - y|^2, with scores s_x, s_y, dimension d, r = x - y:
 *   u_p(x, y) = s_x.s_y k + s_x.grad_y k + s_y.grad_x k + trace(grad_x grad_y k).
 * With A = (s_x - s_y).r and S = s_x.s_y:
 *   rbf, k = exp(-D / 2h):       u = k (S + A / h + d / h - D / h^2)
 *   imq, k = q^beta, q = c2 + D / h:
 *        u = q^beta S - 2 beta / h q^(beta-1) A - 2 beta d / h q^(beta-1) - 4 beta (beta-1) D / h^2 q^(beta-2).
 * On the diagonal (D = A = 0) these are |s|^2 + d / h and c2^beta |s|^2 - 2 beta d / h c2^(beta-1).
 * The kernel value is taken in float (expf, powf), the rest in double. */
#ifndef DSAMPLER_SVGD_KERNEL_MATH_H
#define DSAMPLER_SVGD_KERNEL_MATH_H

#include <math.h>

#include "backend.h"

#ifdef __CUDACC__
#define SVGD_KERNEL_FN __host__ __device__ __forceinline__ static
#else
#define SVGD_KERNEL_FN static inline
#endif

/* q^beta for the IMQ kernel: the default beta = -1/2 by one square root (powf costs the GPU
 * about three times as much per pair). */
SVGD_KERNEL_FN float svgd_imq_power(float q, float beta) {
  return beta == -0.5f ? 1.0f / sqrtf(q) : powf(q, beta);
}

/* The median's squared distances on the CPU backend (DESIGN.md). Up to SVGD_DIRECT_MAX_DIM
 * coordinates the difference-square sum. Beyond, the GEMM identity on coordinates centred at
 * particle 0, y_j = x_j - x_0 (one subtraction each, so |y| is on the scale of the distances and
 * the identity cancels little): D_ij = |y_i|^2 + |y_j|^2 - 2 y_i . y_j, each of |y|^2 and
 * y_i . y_j an fma chain from 0, k ascending, and D clamped at +0 (a negative or -0 result is +0;
 * NaN stays NaN). The GPU uses these forms for some dimensions and tensor-core forms for others,
 * so the backends' medians agree bit for bit only where both use the same form: README.md's
 * "What is computed" says which, and is the one statement of it. */
#define SVGD_DIRECT_MAX_DIM 128
SVGD_KERNEL_FN int svgd_median_by_gemm(long long dim) { return dim > SVGD_DIRECT_MAX_DIM; }

SVGD_KERNEL_FN float svgd_gemm_distance(float square_i, float square_j, float dot) {
#ifdef __CUDA_ARCH__
  const float d = __fmaf_rn(-2.0f, dot, __fadd_rn(square_i, square_j));
#else
  const float d = fmaf(-2.0f, dot, square_i + square_j);
#endif
  return (d > 0.0f || d != d) ? d : 0.0f;
}

/* The update's kernel value k and weight w (backend.h) of one pair at squared distance D. */
SVGD_KERNEL_FN void svgd_kernel_pair(const svgd_kernel_t *kernel, float D, float *k, float *w) {
  if (kernel->kind == SVGD_KERNEL_RBF) {
    *k = expf(D * (-0.5f / kernel->h));
    *w = *k / kernel->h;
  } else {
    const float q = kernel->c2 + D / kernel->h;
    *k = svgd_imq_power(q, kernel->beta);
    *w = (-2.0f * kernel->beta / kernel->h) * (*k / q);
  }
}

/* The kernel's value at D = 0: 1 for rbf, c2^beta for imq. */
SVGD_KERNEL_FN float svgd_kernel_diagonal(const svgd_kernel_t *kernel) {
  return kernel->kind == SVGD_KERNEL_RBF ? 1.0f : svgd_imq_power(kernel->c2, kernel->beta);
}

/* u_p of one pair from its float sums D, A, S (above). */
SVGD_KERNEL_FN double svgd_stein_pair(const svgd_kernel_t *kernel, double dim, float D, float A, float S) {
  const double h = (double)kernel->h;
  if (kernel->kind == SVGD_KERNEL_RBF) {
    const double k = (double)expf(D * (-0.5f / kernel->h));
    return k * ((double)S + ((double)A + dim - (double)D / h) / h);
  }
  const double beta = (double)kernel->beta;
  const double q = (double)kernel->c2 + (double)D / h;
  const double k = (double)svgd_imq_power((float)q, kernel->beta);
  const double k1 = k / q, k2 = k1 / q;
  return k * (double)S - 2.0 * beta / h * k1 * ((double)A + dim) - 4.0 * beta * (beta - 1.0) * (double)D / (h * h) * k2;
}

/* u_p(x_i, x_i) from S = |s_i|^2. */
SVGD_KERNEL_FN double svgd_stein_diagonal(const svgd_kernel_t *kernel, double dim, float S) {
  return svgd_stein_pair(kernel, dim, 0.0f, 0.0f, S);
}

#endif
