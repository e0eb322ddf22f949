/* targets_builtin.c: the built-in targets, with analytic gradients, on the host. The same
 * models on the GPU are in cuda/targets_builtin.cu, reached through logp_grad_cuda; the
 * arithmetic of each term is shared with it through model_math.h.
 *
 * Each chain's result depends only on its own row of x, never on how many rows come in one
 * call, so draws do not change with the rank count: per-row sums run in one fixed order. */
#include "targets_builtin.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "h5data.h"
#include "model_math.h"
#include "rng.h"
#include "status.h"
#include "target.h"
#ifdef DSAMPLER_HAVE_CUDA
#include "targets_builtin_cuda.h"
#endif

const char *const builtin_target_names[] = {"gaussian", "corr-gaussian", "banana", "mixture1d",
                                            "funnel", "logistic", NULL};

/* ---- parameters from "key=value,..." ------------------------------------------------------ */

static int parse_number(const char *target, const char *key, const char *text, double *value) {
  char *end = NULL;
  errno = 0;
  double parsed = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !isfinite(parsed))
    return ds_fail(DS_ERR_INPUT, "--target-args: %s's %s must be a finite number, got '%s'", target, key, text);
  *value = parsed;
  return DS_OK;
}

static int get_number(const char *target, const char *args, const char *key, double fallback, double *value) {
  char text[128];
  *value = fallback;
  if (!target_args_get(args, key, text, sizeof text)) return DS_OK;
  return parse_number(target, key, text, value);
}

/* The dimension from "dim=" (set from --dim), or default_dim when absent (0: required). */
static int get_dim(const char *target, const char *args, int64_t default_dim, int64_t *dim) {
  double value = 0;
  DS_TRY(get_number(target, args, "dim", (double)default_dim, &value));
  if (value < 1 || value != floor(value) || value > 1e12)
    return ds_fail(DS_ERR_INPUT, "--dim: the %s target needs a positive integer dimension", target);
  *dim = (int64_t)value;
  return DS_OK;
}

/* A number, or a colon-separated list of dim numbers ("mean=0:1:2"), into values [dim]. */
static int get_list(const char *target, const char *args, const char *key, double fallback, int64_t dim,
                    double *values) {
  size_t size = (size_t)dim * 32 + 64;
  char *text = malloc(size);
  if (!text) return DS_FAIL_ALLOC("a parameter list", size);
  int status = DS_OK;
  if (!target_args_get(args, key, text, size)) {
    for (int64_t k = 0; k < dim; ++k) values[k] = fallback;
  } else if (!strchr(text, ':')) {
    status = parse_number(target, key, text, &values[0]);
    for (int64_t k = 1; k < dim && status == DS_OK; ++k) values[k] = values[0];
  } else {
    int64_t count = 0;
    char *item = text;
    while (item && status == DS_OK) {
      char *next = strchr(item, ':');
      if (next) *next++ = '\0';
      if (count < dim) status = parse_number(target, key, item, &values[count]);
      ++count;
      item = next;
    }
    if (status == DS_OK && count != dim)
      status = ds_fail(DS_ERR_INPUT, "--target-args: %s's %s lists %lld values; the dimension is %lld", target,
                       key, (long long)count, (long long)dim);
  }
  free(text);
  return status;
}

/* --data goes to the targets that read data; others refuse it by name. */
static int refuse_data(const char *target, const char *args) {
  char path[8];
  if (target_args_get(args, "data", path, sizeof path))
    return ds_fail(DS_ERR_INPUT, "--data: the %s target takes no dataset (logistic does)", target);
  return DS_OK;
}

/* ---- the models, one row at a time --------------------------------------------------------- */

/* gaussian, one mean and scale: float as the fused CUDA kernel computes it. */
static int gaussian_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim;
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    double sum = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      const float centred = model_gaussian_coord(x_i[k], p->mean, p->inv_scale2, &g_i[k]);
      sum += (double)centred * (double)centred;
    }
    logp[i] = (float)(-0.5 * sum * (double)p->inv_scale2);
  }
  return 0;
}

/* gaussian, a mean and a scale per dimension: the same arithmetic, per-dimension values. */
static int gaussian_dims_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim;
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    double sum = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      const float centred = model_gaussian_coord(x_i[k], p->means[k], p->inv_scale2s[k], &g_i[k]);
      sum += (double)centred * (double)centred * (double)p->inv_scale2s[k];
    }
    logp[i] = (float)(-0.5 * sum);
  }
  return 0;
}

/* corr-gaussian: grad = -Q x, log p = 1/2 x . grad, in double. */
static int corr_gaussian_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim;
  const double rho = p->rho, scale = p->scale;
  const double c = 1.0 / (scale * scale * (1.0 - rho * rho));
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    double quad = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      double qx = 0.0;
      if (p->precision) {
        const float *q_k = p->precision + k * dim;
        for (int64_t j = 0; j < dim; ++j) qx += (double)q_k[j] * (double)x_i[j];
      } else {
        qx = model_ar1_precision_row(x_i[k], k > 0 ? x_i[k - 1] : 0.0, k + 1 < dim ? x_i[k + 1] : 0.0, k, dim, rho, c);
      }
      g_i[k] = (float)-qx;
      quad += (double)x_i[k] * qx;
    }
    logp[i] = (float)(-0.5 * quad);
  }
  return 0;
}

static int banana_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim;
  const double a2 = p->banana_a * p->banana_a, b = p->banana_b;
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    double sum = 0.0;
    int64_t k = 0;
    for (; k + 1 < dim; k += 2) sum += model_banana_pair(x_i[k], x_i[k + 1], a2, b, &g_i[k], &g_i[k + 1]);
    if (k < dim) sum += model_banana_single(x_i[k], &g_i[k]);
    logp[i] = (float)sum;
  }
  return 0;
}

static int mixture1d_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim;
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    double sum = 0.0;
    for (int64_t k = 0; k < dim; ++k) sum += model_mixture1d_coord(x_i[k], &g_i[k]);
    logp[i] = (float)sum;
  }
  return 0;
}

static int funnel_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim;
  const double inv_var_v = 1.0 / (p->funnel_sigma * p->funnel_sigma);
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    const double e = exp(-(double)x_i[0]);
    double squares = 0.0;
    for (int64_t k = 1; k < dim; ++k) {
      squares += (double)x_i[k] * (double)x_i[k];
      g_i[k] = model_funnel_coord_grad(x_i[k], e);
    }
    logp[i] = (float)model_funnel_level(x_i[0], squares, inv_var_v, dim, &g_i[0]);
  }
  return 0;
}

/* logistic: chains in tiles of LOGISTIC_TILE, data in blocks of LOGISTIC_ROWS rows. z for a
 * tile is computed with the chains across vector lanes (each lane sums over k in order), the
 * gradient with k across lanes (each lane sums over the rows of a block in order); a block's
 * float partial sums are added into double accumulators. Rows of X are read once per tile.
 * Every lane does the same arithmetic whatever the tile's fill, so a chain's result is the
 * same in a call of 1 row or 1000. */
#define LOGISTIC_TILE 8
#define LOGISTIC_ROWS 256

static void logistic_tile(const builtin_params_t *p, const float *w, int count, float *logp, float *grad,
                          float *w_t, float *grad_block, double *grad_sum) {
  const int64_t dim = p->dim;
  double logp_sum[LOGISTIC_TILE] = {0};
  for (int64_t k = 0; k < dim; ++k)
    for (int c = 0; c < LOGISTIC_TILE; ++c) w_t[k * LOGISTIC_TILE + c] = c < count ? w[c * dim + k] : 0.0f;
  memset(grad_sum, 0, (size_t)(LOGISTIC_TILE * dim) * sizeof *grad_sum);
  /* Minibatch: slot b holds data row rng_batch_row(b); the likelihood is scaled to n rows. */
  const int64_t slots = p->batch_size > 0 ? p->batch_size : p->n_data;
  const double data_scale = p->batch_size > 0 ? (double)p->n_data / (double)p->batch_size : 1.0;
  for (int64_t row0 = 0; row0 < slots; row0 += LOGISTIC_ROWS) {
    const int64_t row_end = row0 + LOGISTIC_ROWS < slots ? row0 + LOGISTIC_ROWS : slots;
    memset(grad_block, 0, (size_t)(LOGISTIC_TILE * dim) * sizeof *grad_block);
    for (int64_t slot = row0; slot < row_end; ++slot) {
      const int64_t row =
          p->batch_size > 0 ? rng_batch_row(p->batch_seed, p->batch_iteration, slot, p->n_data) : slot;
      const float *x_row = p->data_x + row * dim;
      const float y = p->data_y[row];
      float z[LOGISTIC_TILE] = {0};
      for (int64_t k = 0; k < dim; ++k) {
        const float x_k = x_row[k];
        const float *w_k = w_t + k * LOGISTIC_TILE;
        for (int c = 0; c < LOGISTIC_TILE; ++c) z[c] += x_k * w_k[c];
      }
      float residual[LOGISTIC_TILE];
      for (int c = 0; c < LOGISTIC_TILE; ++c) logp_sum[c] += model_logistic_row(z[c], y, &residual[c]);
      for (int c = 0; c < count; ++c) {
        float *g = grad_block + c * dim;
        const float r = residual[c];
        for (int64_t k = 0; k < dim; ++k) g[k] += r * x_row[k];
      }
    }
    for (int64_t e = 0; e < count * dim; ++e) grad_sum[e] += grad_block[e];
  }
  const double inv_var = 1.0 / (p->prior_sigma * p->prior_sigma);
  for (int c = 0; c < count; ++c) {
    double norm2 = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      const double w_k = w[c * dim + k];
      norm2 += w_k * w_k;
      grad[c * dim + k] = (float)(data_scale * grad_sum[c * dim + k] - w_k * inv_var);
    }
    logp[c] = (float)(data_scale * logp_sum[c] - 0.5 * norm2 * inv_var);
  }
}

static int logistic_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim, tiles = (n + LOGISTIC_TILE - 1) / LOGISTIC_TILE;
  int failed = 0;
  /* Inside an HMC worker thread this runs on that thread alone (no nested parallelism). */
#pragma omp parallel
  {
    const size_t floats = (size_t)(LOGISTIC_TILE * dim);
    float *w_t = malloc(floats * sizeof *w_t), *grad_block = malloc(floats * sizeof *grad_block);
    double *grad_sum = malloc(floats * sizeof *grad_sum);
    if (!w_t || !grad_block || !grad_sum) {
#pragma omp atomic write
      failed = 1;
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t tile = 0; tile < tiles; ++tile) {
      if (!w_t || !grad_block || !grad_sum) continue;
      const int64_t i0 = tile * LOGISTIC_TILE;
      const int count = (int)(n - i0 < LOGISTIC_TILE ? n - i0 : LOGISTIC_TILE);
      logistic_tile(p, x + i0 * dim, count, logp + i0, grad + i0 * dim, w_t, grad_block, grad_sum);
    }
    free(w_t);
    free(grad_block);
    free(grad_sum);
  }
  if (failed) {
    ds_fail(DS_ERR_MEMORY, "logistic: out of memory for %lld-dimensional work space", (long long)dim);
    return DS_ERR_MEMORY;
  }
  return 0;
}

/* ---- the table of built-ins ---------------------------------------------------------------- */

typedef int (*host_logp_grad_fn)(void *, const float *, int64_t, float *, float *);

static host_logp_grad_fn host_entry(const builtin_params_t *p) {
  switch (p->kind) {
    case BUILTIN_GAUSSIAN: return p->means ? gaussian_dims_logp_grad : gaussian_logp_grad;
    case BUILTIN_CORR_GAUSSIAN: return corr_gaussian_logp_grad;
    case BUILTIN_BANANA: return banana_logp_grad;
    case BUILTIN_MIXTURE1D: return mixture1d_logp_grad;
    case BUILTIN_FUNNEL: return funnel_logp_grad;
    case BUILTIN_LOGISTIC: return logistic_logp_grad;
    case BUILTIN_NONE: break;
  }
  return NULL;
}

static void builtin_destroy(void *self) {
  builtin_params_t *p = self;
  if (!p) return;
  if (p->device_release) p->device_release(p->device);
  free((void *)p->means);
  free((void *)p->inv_scale2s);
  free((void *)p->precision);
  free((void *)p->data_x);
  free((void *)p->data_y);
  free(p);
}

const builtin_params_t *builtin_target_lookup(const dsampler_target *t) {
  if (!t || t->destroy != builtin_destroy || !t->self) return NULL;
  const builtin_params_t *p = t->self;
  return t->logp_grad == host_entry(p) ? p : NULL;
}

int builtin_target_set_batch(const dsampler_target *t, int64_t batch_size, uint64_t seed, int64_t iteration) {
  builtin_params_t *p = (builtin_params_t *)builtin_target_lookup(t);
  if (batch_size == 0) {
    if (p) p->batch_size = 0;
    return DS_OK;
  }
  if (!p || p->kind != BUILTIN_LOGISTIC)
    return ds_fail(DS_ERR_INPUT, "--batch-size: only the logistic target draws minibatches of its data");
  if (batch_size < 0 || batch_size > p->n_data || p->n_data > 0xFFFFFFFFll)
    return ds_fail(DS_ERR_INPUT, "--batch-size %lld: expected 1 to the %lld rows of --data", (long long)batch_size,
                   (long long)p->n_data);
  p->batch_size = batch_size;
  p->batch_seed = seed;
  p->batch_iteration = (uint32_t)iteration;
  return DS_OK;
}

int builtin_target_params(const dsampler_target *t, builtin_params_t *params) {
  if (t->logp_grad != gaussian_logp_grad || !builtin_target_lookup(t)) return 0;
  *params = *(const builtin_params_t *)t->self;
  return 1;
}

#ifdef DSAMPLER_HAVE_CUDA
static int builtin_logp_grad_cuda(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream) {
  return cuda_builtin_logp_grad(self, x, n, logp, grad, stream);
}
#endif

static int params_new(builtin_kind_t kind, int64_t dim, builtin_params_t **out) {
  *out = calloc(1, sizeof **out);
  if (!*out) return DS_FAIL_ALLOC("target parameters", sizeof **out);
  (*out)->kind = kind;
  (*out)->dim = dim;
  (*out)->scale = 1.0f;
  (*out)->inv_scale2 = 1.0f;
  return DS_OK;
}

static void target_fill(dsampler_target *out, const char *name, builtin_params_t *params) {
  memset(out, 0, sizeof *out);
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = name;
  out->var_name = params->kind == BUILTIN_LOGISTIC ? "w" : "x";
  out->dim = params->dim;
  out->self = params;
  out->logp_grad = host_entry(params);
#ifdef DSAMPLER_HAVE_CUDA
  out->logp_grad_cuda = builtin_logp_grad_cuda;
#endif
  out->destroy = builtin_destroy;
}

/* ---- creation, one function per model ------------------------------------------------------ */

static int gaussian_create(const char *args, builtin_params_t **out) {
  static const char *const known[] = {"dim", "mean", "scale", NULL};
  DS_TRY(refuse_data("gaussian", args));
  DS_TRY(target_args_check("gaussian", args, known));
  int64_t dim;
  DS_TRY(get_dim("gaussian", args, 0, &dim));
  double *mean = malloc((size_t)dim * sizeof *mean), *scale = malloc((size_t)dim * sizeof *scale);
  int status = mean && scale ? DS_OK : DS_FAIL_ALLOC("gaussian parameters", (size_t)dim * 2 * sizeof(double));
  if (status == DS_OK) status = get_list("gaussian", args, "mean", 0.0, dim, mean);
  if (status == DS_OK) status = get_list("gaussian", args, "scale", 1.0, dim, scale);
  int uniform = 1;
  for (int64_t k = 0; k < dim && status == DS_OK; ++k) {
    if (!(scale[k] > 0))
      status = ds_fail(DS_ERR_INPUT, "--target-args: gaussian's scale must be > 0, got %g", scale[k]);
    if (mean[k] != mean[0] || scale[k] != scale[0]) uniform = 0;
  }
  builtin_params_t *p = NULL;
  if (status == DS_OK) status = params_new(BUILTIN_GAUSSIAN, dim, &p);
  if (status == DS_OK) {
    p->mean = (float)mean[0];
    p->scale = (float)scale[0];
    p->inv_scale2 = 1.0f / ((float)scale[0] * (float)scale[0]);
    if (!uniform) {
      float *means = malloc((size_t)dim * sizeof *means), *inv_scale2s = malloc((size_t)dim * sizeof *inv_scale2s);
      p->means = means;
      p->inv_scale2s = inv_scale2s;
      if (!means || !inv_scale2s) {
        status = DS_FAIL_ALLOC("gaussian parameters", (size_t)dim * 2 * sizeof(float));
      } else {
        for (int64_t k = 0; k < dim; ++k) {
          means[k] = (float)mean[k];
          inv_scale2s[k] = 1.0f / ((float)scale[k] * (float)scale[k]);
        }
      }
    }
  }
  free(mean);
  free(scale);
  if (status != DS_OK) {
    builtin_destroy(p);
    return status;
  }
  *out = p;
  return DS_OK;
}

/* Q = Sigma^-1 through the Cholesky factor, in double; DS_ERR_INPUT when Sigma is not
 * symmetric positive definite. */
static int precision_from_covariance(const char *path, const double *cov, int64_t dim, float *precision) {
  if (dim < 1 || dim > 1000000) return ds_fail(DS_ERR_INPUT, "corr-gaussian cov %s: dimension %lld", path, (long long)dim);
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < i; ++j)
      if (fabs(cov[i * dim + j] - cov[j * dim + i]) > 1e-10 * (fabs(cov[i * dim + i]) + fabs(cov[j * dim + j])))
        return ds_fail(DS_ERR_INPUT, "corr-gaussian cov %s: cov is not symmetric (cov[%lld, %lld] = %g, cov[%lld, %lld] = %g)",
                       path, (long long)i, (long long)j, cov[i * dim + j], (long long)j, (long long)i,
                       cov[j * dim + i]);
  double *lower = calloc((size_t)(dim * dim), sizeof *lower), *inverse = calloc((size_t)(dim * dim), sizeof *inverse);
  if (!lower || !inverse) {
    free(lower);
    free(inverse);
    return DS_FAIL_ALLOC("a Cholesky factor", (size_t)(dim * dim) * sizeof(double));
  }
  int status = DS_OK;
  for (int64_t j = 0; j < dim && status == DS_OK; ++j) {
    double diagonal = cov[j * dim + j];
    for (int64_t k = 0; k < j; ++k) diagonal -= lower[j * dim + k] * lower[j * dim + k];
    if (!(diagonal > 0)) {
      status = ds_fail(DS_ERR_INPUT, "corr-gaussian cov %s: cov is not positive definite (pivot %lld is %g)", path,
                       (long long)j, diagonal);
      break;
    }
    lower[j * dim + j] = sqrt(diagonal);
    for (int64_t i = j + 1; i < dim; ++i) {
      double sum = cov[i * dim + j];
      for (int64_t k = 0; k < j; ++k) sum -= lower[i * dim + k] * lower[j * dim + k];
      lower[i * dim + j] = sum / lower[j * dim + j];
    }
  }
  if (status == DS_OK) {
    /* Solve L L' Q = I column by column. */
    double *column = calloc((size_t)dim, sizeof *column);
    if (!column) status = DS_FAIL_ALLOC("a Cholesky solve", (size_t)dim * sizeof(double));
    for (int64_t c = 0; c < dim && status == DS_OK; ++c) {
      for (int64_t i = 0; i < dim; ++i) {
        double sum = i == c ? 1.0 : 0.0;
        for (int64_t k = 0; k < i; ++k) sum -= lower[i * dim + k] * column[k];
        column[i] = sum / lower[i * dim + i];
      }
      for (int64_t i = dim - 1; i >= 0; --i) {
        double sum = column[i];
        for (int64_t k = i + 1; k < dim; ++k) sum -= lower[k * dim + i] * inverse[k * dim + c];
        inverse[i * dim + c] = sum / lower[i * dim + i];
      }
    }
    free(column);
    for (int64_t i = 0; i < dim && status == DS_OK; ++i)
      for (int64_t j = 0; j < dim; ++j)
        precision[i * dim + j] = (float)(0.5 * (inverse[i * dim + j] + inverse[j * dim + i]));
  }
  free(lower);
  free(inverse);
  return status;
}

static int corr_gaussian_create(const char *args, MPI_Comm comm, builtin_params_t **out) {
  static const char *const known[] = {"dim", "rho", "scale", "cov", NULL};
  DS_TRY(refuse_data("corr-gaussian", args));
  DS_TRY(target_args_check("corr-gaussian", args, known));
  char path[4096];
  if (target_args_get(args, "cov", path, sizeof path)) {
    char other[8];
    if (target_args_get(args, "rho", other, sizeof other) || target_args_get(args, "scale", other, sizeof other))
      return ds_fail(DS_ERR_INPUT, "--target-args: corr-gaussian takes either cov=FILE.h5 or rho/scale, not both");
    if (comm == MPI_COMM_NULL) return ds_fail(DS_ERR_INTERNAL, "corr-gaussian: reading cov needs a communicator");
    int64_t rows = 0, cols = 0;
    double *cov = NULL;
    DS_TRY(h5data_read_matrix(comm, path, "corr-gaussian cov", "cov", &rows, &cols, &cov));
    if (rows != cols) {
      free(cov);
      return ds_fail(DS_ERR_INPUT, "corr-gaussian cov %s: dataset 'cov' has shape [%lld, %lld], expected a square [D, D]",
                     path, (long long)rows, (long long)cols);
    }
    builtin_params_t *p = NULL;
    float *precision = malloc((size_t)(rows * rows) * sizeof *precision);
    int status = precision ? DS_OK : DS_FAIL_ALLOC("a precision matrix", (size_t)(rows * rows) * sizeof(float));
    if (status == DS_OK) status = precision_from_covariance(path, cov, rows, precision);
    free(cov);
    if (status == DS_OK) status = params_new(BUILTIN_CORR_GAUSSIAN, rows, &p);
    if (status != DS_OK) {
      free(precision);
      return status;
    }
    p->precision = precision;
    *out = p;
    return DS_OK;
  }
  int64_t dim;
  double rho, scale;
  DS_TRY(get_dim("corr-gaussian", args, 0, &dim));
  DS_TRY(get_number("corr-gaussian", args, "rho", 0.5, &rho));
  DS_TRY(get_number("corr-gaussian", args, "scale", 1.0, &scale));
  if (!(rho > -1 && rho < 1))
    return ds_fail(DS_ERR_INPUT, "--target-args: corr-gaussian's rho must be in (-1, 1), got %g", rho);
  if (!(scale > 0)) return ds_fail(DS_ERR_INPUT, "--target-args: corr-gaussian's scale must be > 0, got %g", scale);
  DS_TRY(params_new(BUILTIN_CORR_GAUSSIAN, dim, out));
  (*out)->rho = (float)rho;
  (*out)->scale = (float)scale;
  (*out)->inv_scale2 = 1.0f / ((float)scale * (float)scale);
  return DS_OK;
}

static int banana_create(const char *args, builtin_params_t **out) {
  static const char *const known[] = {"dim", "a", "b", NULL};
  DS_TRY(refuse_data("banana", args));
  DS_TRY(target_args_check("banana", args, known));
  int64_t dim;
  double a, b;
  DS_TRY(get_dim("banana", args, 2, &dim));
  DS_TRY(get_number("banana", args, "a", 1.0, &a));
  DS_TRY(get_number("banana", args, "b", 0.5, &b));
  if (!(a > 0)) return ds_fail(DS_ERR_INPUT, "--target-args: banana's a must be > 0, got %g", a);
  DS_TRY(params_new(BUILTIN_BANANA, dim, out));
  (*out)->banana_a = a;
  (*out)->banana_b = b;
  return DS_OK;
}

static int mixture1d_create(const char *args, builtin_params_t **out) {
  static const char *const known[] = {"dim", NULL};
  DS_TRY(refuse_data("mixture1d", args));
  DS_TRY(target_args_check("mixture1d", args, known));
  int64_t dim;
  DS_TRY(get_dim("mixture1d", args, 1, &dim));
  return params_new(BUILTIN_MIXTURE1D, dim, out);
}

static int funnel_create(const char *args, builtin_params_t **out) {
  static const char *const known[] = {"dim", "sigma", NULL};
  DS_TRY(refuse_data("funnel", args));
  DS_TRY(target_args_check("funnel", args, known));
  int64_t dim;
  double sigma;
  DS_TRY(get_dim("funnel", args, 10, &dim));
  DS_TRY(get_number("funnel", args, "sigma", 3.0, &sigma));
  if (dim < 2) return ds_fail(DS_ERR_INPUT, "--dim: the funnel target needs dim >= 2 (v and at least one x)");
  if (!(sigma > 0)) return ds_fail(DS_ERR_INPUT, "--target-args: funnel's sigma must be > 0, got %g", sigma);
  DS_TRY(params_new(BUILTIN_FUNNEL, dim, out));
  (*out)->funnel_sigma = sigma;
  return DS_OK;
}

static int logistic_create(const char *args, MPI_Comm comm, builtin_params_t **out) {
  static const char *const known[] = {"dim", "sigma", "data", NULL};
  DS_TRY(target_args_check("logistic", args, known));
  double sigma;
  DS_TRY(get_number("logistic", args, "sigma", 1.0, &sigma));
  if (!(sigma > 0)) return ds_fail(DS_ERR_INPUT, "--target-args: logistic's sigma must be > 0, got %g", sigma);
  char path[4096];
  if (!target_args_get(args, "data", path, sizeof path) || !path[0])
    return ds_fail(DS_ERR_INPUT, "--data: the logistic target needs a dataset (--data FILE.h5 with X [n, D] and y [n])");
  if (comm == MPI_COMM_NULL) return ds_fail(DS_ERR_INTERNAL, "logistic: reading --data needs a communicator");
  h5data_xy_t data;
  DS_TRY(h5data_read_xy(comm, path, "--data", 1, &data));
  char dim_text[32];
  if (target_args_get(args, "dim", dim_text, sizeof dim_text) && strtoll(dim_text, NULL, 10) != data.dim) {
    int status = ds_fail(DS_ERR_INPUT, "--dim %s: the logistic target's dimension is that of --data %s (X has %lld columns)",
                         dim_text, path, (long long)data.dim);
    h5data_xy_free(&data);
    return status;
  }
  int status = params_new(BUILTIN_LOGISTIC, data.dim, out);
  if (status != DS_OK) {
    h5data_xy_free(&data);
    return status;
  }
  (*out)->n_data = data.n;
  (*out)->data_x = data.x;
  (*out)->data_y = data.y;
  (*out)->prior_sigma = sigma;
  return DS_OK;
}

int builtin_target_create(const char *name, const char *args, MPI_Comm comm, dsampler_target *out) {
  builtin_params_t *params = NULL;
  int status;
  if (strcmp(name, "gaussian") == 0)
    status = gaussian_create(args, &params);
  else if (strcmp(name, "corr-gaussian") == 0)
    status = corr_gaussian_create(args, comm, &params);
  else if (strcmp(name, "banana") == 0)
    status = banana_create(args, &params);
  else if (strcmp(name, "mixture1d") == 0)
    status = mixture1d_create(args, &params);
  else if (strcmp(name, "funnel") == 0)
    status = funnel_create(args, &params);
  else if (strcmp(name, "logistic") == 0)
    status = logistic_create(args, comm, &params);
  else {
    char list[256] = "";
    for (const char *const *n = builtin_target_names; *n; ++n) {
      strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
      strncat(list, *n, sizeof list - strlen(list) - 1);
    }
    return ds_fail(DS_ERR_INPUT, "--target: unknown target '%s' (built-ins: %s; or plugin:path/to/lib.so)",
                   name, list);
  }
  if (status != DS_OK) return status;
  for (const char *const *n = builtin_target_names; *n; ++n)
    if (strcmp(*n, name) == 0) target_fill(out, *n, params);
  return DS_OK;
}

void builtin_targets_print(FILE *out) {
  fprintf(out,
          "built-in targets (--target NAME --target-args K=V,...; a per-dimension value is a list a:b:c):\n"
          "  gaussian       N(mean, diag(scale^2)); --dim required\n"
          "                   mean=0, scale=1 (each a number or a list of dim numbers)\n"
          "  corr-gaussian  N(0, Sigma); AR(1) Sigma_ij = scale^2 rho^|i-j| (--dim required),\n"
          "                 or Sigma from dataset 'cov' [D, D] of an HDF5 file\n"
          "                   rho=0.5, scale=1, or cov=FILE.h5\n"
          "  banana         pairs (u, v): u ~ N(0, a^2), v | u ~ N(b (u^2 - a^2), 1); dim 2 unless --dim\n"
          "                   a=1, b=0.5\n"
          "  mixture1d      each coordinate 1/3 N(-2, 1) + 2/3 N(2, 1) (the SVGD paper's toy); dim 1 unless --dim\n"
          "  funnel         Neal's funnel: v ~ N(0, sigma^2), x_k | v ~ N(0, e^v); dim 10 unless --dim\n"
          "                   sigma=3\n"
          "  logistic       Bayesian logistic regression, y ~ Bernoulli(sigmoid(X w)), w ~ N(0, sigma^2 I);\n"
          "                 X [n, D] and y [n] (0/1) from --data FILE.h5; dim = D\n"
          "                   sigma=1\n"
          "plugins: --target plugin:path/to/lib.so (the model's own --target-args; see dsampler_target.h)\n");
}
