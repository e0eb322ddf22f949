/* targets_builtin.h: the built-in targets' parameters, visible to the backends so a GPU
 * kernel can fuse a built-in gradient into its own loop instead of calling through the ABI,
 * and to cuda/targets_builtin.cu, which evaluates every built-in on the GPU. */
#ifndef DSAMPLER_TARGETS_BUILTIN_H
#define DSAMPLER_TARGETS_BUILTIN_H

#include <stdio.h>

#include "dsampler_target.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  BUILTIN_NONE = 0,
  BUILTIN_GAUSSIAN = 1,
  BUILTIN_CORR_GAUSSIAN = 2,
  BUILTIN_BANANA = 3,
  BUILTIN_MIXTURE1D = 4,
  BUILTIN_FUNNEL = 5,
  BUILTIN_LOGISTIC = 6
} builtin_kind_t;

/* Every log density below drops its normalising constant.
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
typedef struct builtin_params {
  builtin_kind_t kind;
  int64_t dim;
  /* gaussian */
  float mean;
  float scale;
  float inv_scale2;
  const float *means;       /* [dim] host, NULL when uniform */
  const float *inv_scale2s; /* [dim] host, NULL when uniform */
  /* corr-gaussian */
  float rho;                /* AR(1) correlation; scale above is the marginal sd */
  const float *precision;   /* [dim, dim] host, NULL for AR(1) */
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

/* Fills *params and returns 1 when t is the built-in gaussian with one mean and one scale
 * for every dimension (the form the fused CUDA HMC kernel takes), else 0. */
int builtin_target_params(const dsampler_target *t, builtin_params_t *params);
/* The parameters of any built-in target, or NULL when t is not a built-in. */
const builtin_params_t *builtin_target_lookup(const dsampler_target *t);

/* Creates a built-in target by name; args as for plugins ("dim=64,mean=0,scale=1"). comm is
 * used to read data files collectively (every rank calls this with the same args). */
int builtin_target_create(const char *name, const char *args, MPI_Comm comm, dsampler_target *out);
/* Makes the logistic target's next evaluations use minibatch `iteration` of batch_size rows
 * (0: every row again). DS_ERR_INPUT, naming --batch-size, for any other target or a batch larger
 * than the data. */
int builtin_target_set_batch(const dsampler_target *t, int64_t batch_size, uint64_t seed, int64_t iteration);
/* Prints each built-in with its parameters (`dsampler targets`). */
void builtin_targets_print(FILE *out);
/* Names of the built-ins, NULL-terminated. */
extern const char *const builtin_target_names[];

#ifdef __cplusplus
}
#endif
#endif
