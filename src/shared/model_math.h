/* model_math.h: the built-in models' arithmetic, one coordinate, pair or data row at a time,
 * compiled for the host (src/targets/targets_builtin.c) and the GPU (cuda/targets_builtin.cu) from this
 * one source, as rng.h is for Philox. The backends differ only in how they walk rows and
 * coordinates and in the order of the log density's sum; every term below is the same code.
 *
 * Each function returns its term of the log density (normalising constants dropped) and writes
 * the matching gradient component(s). Formulas: targets_builtin.h. */
#ifndef DSAMPLER_MODEL_MATH_H
#define DSAMPLER_MODEL_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define MODEL_FN __host__ __device__ __forceinline__ static
#else
#define MODEL_FN static inline
#endif

/* Float products and differences rounded as written, never contracted into an fma, so the
 * gaussian's gradient is the same bits on both backends as in the fused CUDA kernel. */
#ifdef __CUDA_ARCH__
#define MODEL_FSUB(a, b) __fsub_rn((a), (b))
#define MODEL_FMUL(a, b) __fmul_rn((a), (b))
#else
#define MODEL_FSUB(a, b) ((float)((a) - (b)))
#define MODEL_FMUL(a, b) ((float)((a) * (b)))
#endif

/* The logistic term runs for every data row and chain of every gradient: on the GPU it takes the
 * hardware's exp, log and division (MUFU; a few float ulps, well inside the term's own float
 * rounding for the sums it enters, tested against float64), on the host the C library's. */
#ifdef __CUDA_ARCH__
#define MODEL_EXP_FAST(x) __expf(x)
#define MODEL_LOG1P_FAST(x) __logf(1.0f + (x))
#define MODEL_DIV_FAST(a, b) __fdividef((a), (b))
#else
#define MODEL_EXP_FAST(x) expf(x)
#define MODEL_LOG1P_FAST(x) log1pf(x)
#define MODEL_DIV_FAST(a, b) ((a) / (b))
#endif

/* gaussian, one coordinate: returns x - mean and writes grad = -(x - mean) inv_scale2, in float.
 * The caller sums (x - mean)^2 (times inv_scale2 per coordinate when the scales differ) in
 * double and scales by -1/2. */
MODEL_FN float model_gaussian_coord(float x, float mean, float inv_scale2, float *grad) {
  const float centred = MODEL_FSUB(x, mean);
  *grad = MODEL_FMUL(-centred, inv_scale2);
  return centred;
}

/* corr-gaussian AR(1), coordinate k of Q x with Q = c tridiag(-rho, [1, 1 + rho^2, ..., 1], -rho),
 * c = 1 / (scale^2 (1 - rho^2)); left/right are x_{k-1}, x_{k+1} (ignored at the ends). */
MODEL_FN double model_ar1_precision_row(double x, double left, double right, long long k, long long dim, double rho,
                                        double c) {
  const double diagonal = dim == 1 ? 1.0 - rho * rho : (k == 0 || k == dim - 1) ? 1.0 : 1.0 + rho * rho;
  double t = diagonal * x;
  if (k > 0) t -= rho * left;
  if (k + 1 < dim) t -= rho * right;
  return c * t;
}

/* banana, one pair (u, v): u ~ N(0, a^2), v | u ~ N(b (u^2 - a^2), 1). a2 = a^2. */
MODEL_FN double model_banana_pair(double u, double v, double a2, double b, float *grad_u, float *grad_v) {
  const double r = v - b * (u * u - a2);
  *grad_u = (float)(-u / a2 + 2.0 * b * u * r);
  *grad_v = (float)-r;
  return -0.5 * u * u / a2 - 0.5 * r * r;
}

/* banana, an odd last coordinate: N(0, 1). */
MODEL_FN double model_banana_single(double u, float *grad_u) {
  *grad_u = (float)-u;
  return -0.5 * u * u;
}

/* mixture1d, one coordinate: 1/3 N(-2, 1) + 2/3 N(2, 1), by a stable log-sum-exp. */
MODEL_FN double model_mixture1d_coord(double x, float *grad) {
  const double log_w1 = -1.0986122886681098, log_w2 = -0.40546510810816438; /* log 1/3, log 2/3 */
  const double left = x + 2.0, right = x - 2.0;
  const double a = log_w1 - 0.5 * left * left, b = log_w2 - 0.5 * right * right;
  const double m = a > b ? a : b;
  const double lse = m + log(exp(a - m) + exp(b - m));
  *grad = (float)-(exp(a - lse) * left + exp(b - lse) * right);
  return lse;
}

/* funnel, a coordinate k >= 1 given e = exp(-v): its gradient; its share of the log density
 * is x^2 (summed into `squares` by the caller). */
MODEL_FN float model_funnel_coord_grad(double x, double e) { return (float)(-x * e); }

/* funnel, the level v = x_0 once sum_{k>=1} x_k^2 is known: returns log p, writes grad_0. */
MODEL_FN double model_funnel_level(double v, double squares, double inv_var, long long dim, float *grad_v) {
  const double e = exp(-v), half_rest = 0.5 * (double)(dim - 1);
  *grad_v = (float)(-v * inv_var - half_rest + 0.5 * e * squares);
  return -0.5 * v * v * inv_var - half_rest * v - 0.5 * e * squares;
}

/* logistic, one data row and one chain, given z = X_i . w: returns y z - log(1 + e^z) and writes
 * the residual y - sigmoid(z). The term is written as -(y log(1 + e^-z) + (1 - y) log(1 + e^z))
 * and both softplus and sigmoid come from one e^-|z|, so nothing cancels for any z or label in
 * [0, 1]. In float, each term exact to a few float ulps (absolute, for log(1 + e) on the GPU). */
MODEL_FN float model_logistic_row(float z, float y, float *residual) {
  const float e = MODEL_EXP_FAST(-fabsf(z)), log1p_e = MODEL_LOG1P_FAST(e);
  const float softplus = fmaxf(z, 0.0f) + log1p_e, softplus_neg = fmaxf(-z, 0.0f) + log1p_e;
  const float sigmoid = MODEL_DIV_FAST(z >= 0.0f ? 1.0f : e, 1.0f + e);
  *residual = y - sigmoid;
  return -(y * softplus_neg + (1.0f - y) * softplus);
}

#endif
