/* model_math.h: the built-in models, their parameters and their arithmetic, compiled for the
 * host (src/targets/targets_builtin.c) and the GPU (cuda/targets_builtin.cu) from this one
 * source, as rng.h is for Philox: a term (one coordinate, pair or data row), and the walk of a
 * whole row of x built from the terms. The backends differ only in how they split a row's
 * coordinates (the host walks them all in order; a GPU warp gives each lane every 32nd) and so
 * in the order of the log density's sum; every operation on the way is the same code.
 *
 * Each term returns its share of the log density (normalising constants dropped) and writes the
 * matching gradient component(s). */
#ifndef DSAMPLER_MODEL_MATH_H
#define DSAMPLER_MODEL_MATH_H

#include <math.h>
#include <stdint.h>

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

/* ---- the models and their parameters -------------------------------------------------------
 *
 * Every log density below drops its normalising constant.
 *
 * gaussian: log p(x) = -1/2 sum_k (x_k - mean_k)^2 inv_scale2_k,
 *   grad_k = -(x_k - mean_k) * inv_scale2_k in float, with inv_scale2 = 1 / scale^2 in float.
 *   mean, scale, inv_scale2 hold the common value when every dimension shares it (then
 *   means and inv_scale2s are NULL); otherwise they hold dimension 0's and the arrays [dim]
 *   hold all of them.
 * corr-gaussian: N(mean 0, Sigma), log p = -1/2 x' Q x with Q = Sigma^-1, grad = -Q x.
 *   AR(1) when precision is NULL: Sigma_ij = scale^2 rho^|i-j|, Q tridiagonal. Otherwise
 *   precision is Q [dim, dim] (row-major, from the user's covariance file).
 * banana: coordinates in pairs (u, v) = (x_2j, x_2j+1), u ~ N(0, a^2), v | u ~ N(b (u^2 - a^2), 1);
 *   an odd last coordinate is N(0, 1). Mean 0; Var u = a^2, Var v = 1 + 2 a^4 b^2.
 * mixture1d: each coordinate independently 1/3 N(-2, 1) + 2/3 N(2, 1).
 * funnel (Neal): v = x_0 ~ N(0, sigma^2), x_k | v ~ N(0, e^v) for k >= 1.
 * logistic: w = x, y_i ~ Bernoulli(sigmoid(X_i . w)), w ~ N(0, sigma^2 I):
 *   log p = sum_i [y_i z_i - log(1 + e^z_i)] - |w|^2 / (2 sigma^2), z = X w,
 *   grad = X' (y - sigmoid(z)) - w / sigma^2. */
typedef enum {
  BUILTIN_NONE = 0,
  BUILTIN_GAUSSIAN = 1,
  BUILTIN_CORR_GAUSSIAN = 2,
  BUILTIN_BANANA = 3,
  BUILTIN_MIXTURE1D = 4,
  BUILTIN_FUNNEL = 5,
  BUILTIN_LOGISTIC = 6
} builtin_kind_t;

/* A built-in's parameters. The host's copy owns host arrays; the GPU entry passes a copy by
 * value to its kernel with the arrays' device copies in their place, so a new field reaches the
 * GPU with no code of its own. */
typedef struct builtin_params {
  builtin_kind_t kind;
  int64_t dim;
  /* gaussian */
  float mean;
  float scale;
  float inv_scale2;
  const float *means;       /* [dim], NULL when uniform */
  const float *inv_scale2s; /* [dim], NULL when uniform */
  /* corr-gaussian */
  float rho;                /* AR(1) correlation; scale above is the marginal sd */
  const float *precision;   /* [dim, dim], NULL for AR(1) */
  /* banana */
  double banana_a, banana_b;
  /* funnel */
  double funnel_sigma;
  /* logistic */
  int64_t n_data;
  const float *data_x;      /* [n_data, dim] host */
  const float *data_y;      /* [n_data] host, 0 or 1 */
  double prior_sigma;
  /* Minibatch (builtin_target_set_batch): batch_size > 0 rows drawn by rng_batch_row for
   * (batch_seed, batch_iteration), the likelihood scaled by n_data / batch_size; 0: all rows. */
  int64_t batch_size;
  uint64_t batch_seed;
  uint32_t batch_iteration;
  /* State of the GPU path (device copies of the arrays above, a cuBLAS handle, work space),
   * made by cuda/targets_builtin.cu on first use and released through device_release. */
  void *device;
  void (*device_release)(void *device);
} builtin_params_t;

/* ---- terms --------------------------------------------------------------------------------- */

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

/* ---- the row walk ----------------------------------------------------------------------------
 *
 * The log density and gradient of one row x_i [dim] of every model but logistic (whose rows of
 * data make it a product of matrices: its own code on each backend). model_row_share walks the
 * coordinates first, first + step, ... (the host: 0, 1; a GPU lane: lane, 32), writes their
 * gradient and returns their share of the log density; model_row_finish turns the sum of every
 * share (in the host's order, or the warp's butterfly) into the row's log density, writing any
 * gradient that needs the whole row. A share is scaled where the scale is exact (-1/2), a sum
 * where it is not, as each backend has always rounded. */

/* gaussian: with per-dimension values sum (x - mean)^2 inv_scale2 and halve each share; with
 * one scale sum (x - mean)^2 and scale the whole sum. */
MODEL_FN double model_gaussian_share(const builtin_params_t *p, const float *x_i, float *g_i, long long first,
                                     long long step) {
  double sum = 0.0;
  if (p->means) {
    for (long long k = first; k < p->dim; k += step) {
      const float inv = p->inv_scale2s[k];
      const float centred = model_gaussian_coord(x_i[k], p->means[k], inv, &g_i[k]);
      sum += (double)centred * (double)centred * (double)inv;
    }
    return -0.5 * sum;
  }
  for (long long k = first; k < p->dim; k += step) {
    const float centred = model_gaussian_coord(x_i[k], p->mean, p->inv_scale2, &g_i[k]);
    sum += (double)centred * (double)centred;
  }
  return sum;
}

/* corr-gaussian: grad = -Q x, log p = 1/2 x . grad, in double. */
MODEL_FN double model_corr_gaussian_share(const builtin_params_t *p, const float *x_i, float *g_i, long long first,
                                          long long step) {
  const long long dim = p->dim;
  const double rho = p->rho, scale = p->scale;
  const double c = 1.0 / (scale * scale * (1.0 - rho * rho));
  double sum = 0.0;
  for (long long k = first; k < dim; k += step) {
    double qx = 0.0;
    if (p->precision) {
      const float *q_k = p->precision + k * dim;
      for (long long j = 0; j < dim; ++j) qx += (double)q_k[j] * (double)x_i[j];
    } else {
      qx = model_ar1_precision_row(x_i[k], k > 0 ? x_i[k - 1] : 0.0, k + 1 < dim ? x_i[k + 1] : 0.0, k, dim, rho, c);
    }
    g_i[k] = (float)-qx;
    sum += (double)x_i[k] * qx;
  }
  return -0.5 * sum;
}

/* banana: pair j is coordinates 2j, 2j + 1; an odd last coordinate stands alone. */
MODEL_FN double model_banana_share(const builtin_params_t *p, const float *x_i, float *g_i, long long first,
                                   long long step) {
  const double a2 = p->banana_a * p->banana_a, b = p->banana_b;
  double sum = 0.0;
  for (long long pair = first; 2 * pair < p->dim; pair += step) {
    const long long k = 2 * pair;
    if (k + 1 < p->dim)
      sum += model_banana_pair(x_i[k], x_i[k + 1], a2, b, &g_i[k], &g_i[k + 1]);
    else
      sum += model_banana_single(x_i[k], &g_i[k]);
  }
  return sum;
}

MODEL_FN double model_mixture1d_share(const builtin_params_t *p, const float *x_i, float *g_i, long long first,
                                      long long step) {
  double sum = 0.0;
  for (long long k = first; k < p->dim; k += step) sum += model_mixture1d_coord(x_i[k], &g_i[k]);
  return sum;
}

/* funnel: the share is sum x_k^2 over the walked k >= 1; the level v = x_0 comes at the finish. */
MODEL_FN double model_funnel_share(const builtin_params_t *p, const float *x_i, float *g_i, long long first,
                                   long long step) {
  const double e = exp(-(double)x_i[0]);
  double squares = 0.0;
  for (long long k = 1 + first; k < p->dim; k += step) {
    squares += (double)x_i[k] * (double)x_i[k];
    g_i[k] = model_funnel_coord_grad(x_i[k], e);
  }
  return squares;
}

MODEL_FN double model_row_share(const builtin_params_t *p, const float *x_i, float *g_i, long long first,
                                long long step) {
  switch (p->kind) {
    case BUILTIN_GAUSSIAN: return model_gaussian_share(p, x_i, g_i, first, step);
    case BUILTIN_CORR_GAUSSIAN: return model_corr_gaussian_share(p, x_i, g_i, first, step);
    case BUILTIN_BANANA: return model_banana_share(p, x_i, g_i, first, step);
    case BUILTIN_MIXTURE1D: return model_mixture1d_share(p, x_i, g_i, first, step);
    case BUILTIN_FUNNEL: return model_funnel_share(p, x_i, g_i, first, step);
    default: return 0.0;
  }
}

MODEL_FN double model_row_finish(const builtin_params_t *p, const float *x_i, float *g_i, double sum) {
  switch (p->kind) {
    case BUILTIN_GAUSSIAN: return p->means ? sum : -0.5 * sum * (double)p->inv_scale2;
    case BUILTIN_FUNNEL:
      return model_funnel_level(x_i[0], sum, 1.0 / (p->funnel_sigma * p->funnel_sigma), p->dim, &g_i[0]);
    default: return sum;
  }
}

#endif
