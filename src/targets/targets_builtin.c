/* targets_builtin.c: the built-in targets' registry, one row per model (its name, parameters
 * with their defaults, help, creation, host entry and GPU entry), and their host evaluation.
 * A row's parameters land in builtin_params_t, whose fields and row walk are model_math.h,
 * shared with the GPU (cuda/targets_builtin.cu); a new model is a row here and its math there.
 *
 * Each chain's result depends only on its own row of x, never on how many rows come in one
 * call, so draws do not change with the rank count: per-row sums run in one fixed order. */
#include "targets_builtin.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "h5data.h"
#include "model_math.h"
#include "rng.h"
#include "status.h"
#include "target_args.h"
#ifdef DSAMPLER_HAVE_CUDA
#include "targets_builtin_cuda.h"
#endif

/* ---- the registry's rows ------------------------------------------------------------------- */

typedef int (*host_logp_grad_fn)(void *self, const float *x, int64_t n, float *logp, float *grad);
typedef int (*device_logp_grad_fn)(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream);

/* What a parameter must satisfy; the messages name the target and the key. */
typedef enum { PARAM_ANY, PARAM_POSITIVE, PARAM_CORRELATION } param_range_t;

typedef struct builtin_param {
  const char *key;
  double fallback;
  size_t offset, size; /* the builtin_params_t field it sets, a float or a double; size 0: per_dim */
  param_range_t range;
  int per_dim;         /* a number or a list of dim numbers, read by the row's create */
} builtin_param_t;

#define PARAM(key, fallback, field, range) \
  {key, fallback, offsetof(builtin_params_t, field), sizeof(((builtin_params_t *)0)->field), range, 0}
#define PARAM_PER_DIM(key, fallback, range) {key, fallback, 0, 0, range, 1}
#define BUILTIN_MAX_PARAMS 4

typedef struct builtin_row builtin_row_t;
struct builtin_row {
  const char *name;
  builtin_kind_t kind;
  const char *var_name;        /* the output's name of the coordinates */
  int64_t default_dim;         /* without --dim; 0: --dim required; -1: the model's create sets it */
  int64_t min_dim;             /* 0: any positive dim */
  const char *min_dim_why;
  builtin_param_t params[BUILTIN_MAX_PARAMS + 1]; /* ends with key NULL */
  const char *file_key;        /* a file argument besides the parameters ("cov", "data"), or NULL */
  const char *help;            /* `dsampler targets`: what it is; then its parameters' defaults, */
  const char *params_help;     /* followed by this */
  /* The model's own steps after its arguments are checked (lists, files, derived values): it
   * reads the parameters, by builtin_read_params or itself. NULL: builtin_read_params alone. */
  int (*create)(const builtin_row_t *row, const char *args, MPI_Comm comm, builtin_params_t *p);
  host_logp_grad_fn host;
  device_logp_grad_fn device;  /* NULL without the CUDA backend */
};

#ifdef DSAMPLER_HAVE_CUDA
#define DEVICE_ENTRY(entry) entry
#else
#define DEVICE_ENTRY(entry) NULL
#endif

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
  if (value == 0 && default_dim == 0)
    return ds_fail(DS_ERR_INPUT, "--dim: the %s target needs its dimension: give --dim D", target);
  if (value < 1 || value != floor(value) || value > 1e12)
    return ds_fail(DS_ERR_INPUT, "--dim: the %s target takes a whole number of dimensions in [1, 1e12], got %.17g",
                   target, value);
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

/* 1 when the models' float32 arithmetic holds a scale-like x: x, x^2 and 1 / x^2 finite and
 * positive in float (about 5.4e-20 to 1.8e19), as the densities divide by the square. */
static int float_scale_ok(double value) {
  volatile float x = (float)value;
  volatile float square = x * x;
  volatile float inverse = 1.0f / square;
  return isfinite(x) && x > 0 && isfinite(square) && square > 0 && isfinite(inverse) && inverse > 0;
}

/* The range of parameter `param` of `row`, checked on the value as parsed and as the models'
 * float32 arithmetic takes it: a value that passes gives a finite log density near the mode. */
static int check_range(const builtin_row_t *row, const builtin_param_t *param, double value) {
  if (param->range == PARAM_POSITIVE && !(value > 0))
    return ds_fail(DS_ERR_INPUT, "--target-args: %s's %s must be > 0, got %g", row->name, param->key, value);
  if (param->range == PARAM_POSITIVE && !float_scale_ok(value))
    return ds_fail(DS_ERR_INPUT, "--target-args: %s's %s=%g is out of float32's reach: the model divides by its "
                   "square, which must be a float32 number (give a value between 5.5e-20 and 1.8e19, or rescale the "
                   "problem)", row->name, param->key, value);
  if (!isfinite((float)value))
    return ds_fail(DS_ERR_INPUT, "--target-args: %s's %s=%g is larger than float32 holds (about 3.4e38)", row->name,
                   param->key, value);
  if (param->range == PARAM_CORRELATION && !(value > -1 && value < 1))
    return ds_fail(DS_ERR_INPUT, "--target-args: %s's %s must be in (-1, 1), got %g", row->name, param->key, value);
  if (param->range == PARAM_CORRELATION && !((float)value > -1.0f && (float)value < 1.0f))
    return ds_fail(DS_ERR_INPUT, "--target-args: %s's %s=%.17g is -1 or 1 in float32, where the correlation matrix "
                   "is singular; give a value further inside (-1, 1)", row->name, param->key, value);
  return DS_OK;
}

/* The dimension (unless the model's create sets it) and every scalar parameter into p, then
 * the dimension's and the parameters' ranges in the row's order. */
static int builtin_read_params(const builtin_row_t *row, const char *args, builtin_params_t *p) {
  double values[BUILTIN_MAX_PARAMS];
  if (row->default_dim >= 0) DS_TRY(get_dim(row->name, args, row->default_dim, &p->dim));
  for (int j = 0; row->params[j].key; ++j) {
    const builtin_param_t *param = &row->params[j];
    if (param->per_dim) continue;
    DS_TRY(get_number(row->name, args, param->key, param->fallback, &values[j]));
    char *field = (char *)p + param->offset;
    if (param->size == sizeof(float))
      *(float *)field = (float)values[j];
    else
      *(double *)field = values[j];
  }
  if (row->min_dim > 0 && p->dim < row->min_dim)
    return ds_fail(DS_ERR_INPUT, "--dim: the %s target needs dim >= %lld (%s)", row->name, (long long)row->min_dim,
                   row->min_dim_why);
  for (int j = 0; row->params[j].key; ++j)
    if (!row->params[j].per_dim) DS_TRY(check_range(row, &row->params[j], values[j]));
  return DS_OK;
}

static const builtin_param_t *param_of(const builtin_row_t *row, const char *key) {
  for (const builtin_param_t *param = row->params; param->key; ++param)
    if (strcmp(param->key, key) == 0) return param;
  return NULL;
}

/* --data goes to the targets that read data; others refuse it by name. */
static int refuse_data(const char *target, const char *args) {
  char path[8];
  if (target_args_get(args, "data", path, sizeof path))
    return ds_fail(DS_ERR_INPUT, "--data: the %s target takes no dataset (logistic does)", target);
  return DS_OK;
}

/* ---- host entries ---------------------------------------------------------------------------- */

/* Every model but logistic: model_math.h's row walk, each row's coordinates in order. */
static int rows_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * p->dim;
    float *g_i = grad + i * p->dim;
    logp[i] = (float)model_row_finish(p, x_i, g_i, model_row_share(p, x_i, g_i, 0, 1));
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

/* ---- the models' own steps of creation ------------------------------------------------------ */

/* gaussian: mean and scale, each one number or a list of dim numbers. */
static int gaussian_create(const builtin_row_t *row, const char *args, MPI_Comm comm, builtin_params_t *p) {
  (void)comm;
  DS_TRY(builtin_read_params(row, args, p));
  const builtin_param_t *mean_param = param_of(row, "mean"), *scale_param = param_of(row, "scale");
  const int64_t dim = p->dim;
  double *mean = malloc((size_t)dim * sizeof *mean), *scale = malloc((size_t)dim * sizeof *scale);
  int status = mean && scale ? DS_OK : DS_FAIL_ALLOC("gaussian parameters", (size_t)dim * 2 * sizeof(double));
  if (status == DS_OK) status = get_list(row->name, args, mean_param->key, mean_param->fallback, dim, mean);
  if (status == DS_OK) status = get_list(row->name, args, scale_param->key, scale_param->fallback, dim, scale);
  int uniform = 1;
  for (int64_t k = 0; k < dim && status == DS_OK; ++k) {
    status = check_range(row, scale_param, scale[k]);
    if (status == DS_OK) status = check_range(row, mean_param, mean[k]);
    if (mean[k] != mean[0] || scale[k] != scale[0]) uniform = 0;
  }
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
  return status;
}

/* Q = Sigma^-1 through the Cholesky factor, in double; DS_ERR_INPUT when Sigma is not
 * symmetric positive definite. */
static int precision_from_covariance(const char *path, const double *cov, int64_t dim, float *precision) {
  if (dim < 1 || dim > 1000000)
    return ds_fail(DS_ERR_INPUT, "--target-args cov=%s: dimension %lld", path, (long long)dim);
  for (int64_t e = 0; e < dim * dim; ++e)
    if (!isfinite(cov[e]))
      return ds_fail(DS_ERR_INPUT, "--target-args cov=%s: cov[%lld, %lld] is %g, not a finite number", path,
                     (long long)(e / dim), (long long)(e % dim), cov[e]);
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < i; ++j)
      if (fabs(cov[i * dim + j] - cov[j * dim + i]) > 1e-10 * (fabs(cov[i * dim + i]) + fabs(cov[j * dim + j])))
        return ds_fail(DS_ERR_INPUT, "--target-args cov=%s: cov is not symmetric (cov[%lld, %lld] = %g, cov[%lld, %lld] = %g)",
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
      status = ds_fail(DS_ERR_INPUT, "--target-args cov=%s: cov is not positive definite (pivot %lld is %g)", path,
                       (long long)j, diagonal);
      break;
    }
    /* Positive only by rounding: the covariance is singular as double precision sees it, and
     * its inverse is noise. */
    if (diagonal <= 1e-13 * cov[j * dim + j]) {
      status = ds_fail(DS_ERR_INPUT, "--target-args cov=%s: cov is singular (not positive definite: pivot %lld is %g, "
                       "%.1e of its diagonal; a row is a combination of others)", path, (long long)j, diagonal,
                       diagonal / cov[j * dim + j]);
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
      for (int64_t j = 0; j < dim && status == DS_OK; ++j) {
        precision[i * dim + j] = (float)(0.5 * (inverse[i * dim + j] + inverse[j * dim + i]));
        if (!(fabsf(precision[i * dim + j]) < FLT_MAX / 8))
          status = ds_fail(DS_ERR_INPUT, "--target-args cov=%s: the inverse of cov has an entry of %g at [%lld, %lld], "
                           "beyond float32 (the gradient would overflow): cov is nearly singular or badly scaled",
                           path, 0.5 * (inverse[i * dim + j] + inverse[j * dim + i]), (long long)i, (long long)j);
      }
  }
  free(lower);
  free(inverse);
  return status;
}

/* corr-gaussian: AR(1) from rho and scale, or the precision of the covariance in cov=FILE. */
static int corr_gaussian_create(const builtin_row_t *row, const char *args, MPI_Comm comm, builtin_params_t *p) {
  char path[4096];
  if (!target_args_get(args, row->file_key, path, sizeof path)) {
    DS_TRY(builtin_read_params(row, args, p));
    p->inv_scale2 = 1.0f / (p->scale * p->scale);
    /* The precision's entries, about 1 / (scale^2 (1 - rho^2)), go into float gradients. */
    const double rho = p->rho, scale = p->scale, c = 1.0 / (scale * scale * (1.0 - rho * rho));
    if (!(8.0 * c < FLT_MAX))
      return ds_fail(DS_ERR_INPUT, "--target-args: corr-gaussian's rho=%.9g with scale=%g make a precision of %g, "
                     "beyond float32 (the gradient would overflow); give a rho further from -1 and 1 or a larger scale",
                     rho, scale, c);
    return DS_OK;
  }
  char other[8];
  if (target_args_get(args, "rho", other, sizeof other) || target_args_get(args, "scale", other, sizeof other))
    return ds_fail(DS_ERR_INPUT, "--target-args: corr-gaussian takes either cov=FILE.h5 or rho/scale, not both");
  if (comm == MPI_COMM_NULL) return ds_fail(DS_ERR_INTERNAL, "corr-gaussian: reading cov needs a communicator");
  int64_t rows = 0, cols = 0;
  double *cov = NULL;
  DS_TRY(h5data_read_matrix(comm, path, "--target-args cov", "cov", &rows, &cols, &cov));
  if (rows != cols) {
    free(cov);
    return ds_fail(DS_ERR_INPUT, "--target-args cov=%s: dataset 'cov' has shape [%lld, %lld], expected a square [D, D]",
                   path, (long long)rows, (long long)cols);
  }
  float *precision = malloc((size_t)(rows * rows) * sizeof *precision);
  int status = precision ? DS_OK : DS_FAIL_ALLOC("a precision matrix", (size_t)(rows * rows) * sizeof(float));
  if (status == DS_OK) status = precision_from_covariance(path, cov, rows, precision);
  free(cov);
  p->precision = precision;
  p->dim = rows;
  return status;
}

/* logistic: sigma, then X and y from --data; the dimension is X's. */
static int logistic_create(const builtin_row_t *row, const char *args, MPI_Comm comm, builtin_params_t *p) {
  DS_TRY(builtin_read_params(row, args, p));
  char path[4096];
  if (!target_args_get(args, row->file_key, path, sizeof path) || !path[0])
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
  p->dim = data.dim;
  p->n_data = data.n;
  p->data_x = data.x;
  p->data_y = data.y;
  return DS_OK;
}

/* ---- the registry ------------------------------------------------------------------------------ */

static const builtin_row_t builtin_rows[] = {
    {.name = "gaussian", .kind = BUILTIN_GAUSSIAN, .var_name = "x", .default_dim = 0,
     .params = {PARAM_PER_DIM("mean", 0.0, PARAM_ANY), PARAM_PER_DIM("scale", 1.0, PARAM_POSITIVE)},
     .help = "N(mean, diag(scale^2)); --dim required",
     .params_help = " (each a number or a list of dim numbers)",
     .create = gaussian_create, .host = rows_logp_grad, .device = DEVICE_ENTRY(cuda_builtin_rows_logp_grad)},
    {.name = "corr-gaussian", .kind = BUILTIN_CORR_GAUSSIAN, .var_name = "x", .default_dim = 0,
     .params = {PARAM("rho", 0.5, rho, PARAM_CORRELATION), PARAM("scale", 1.0, scale, PARAM_POSITIVE)},
     .file_key = "cov",
     .help = "N(0, Sigma); AR(1) Sigma_ij = scale^2 rho^|i-j| (--dim required),\n"
             "                 or Sigma from dataset 'cov' [D, D] of an HDF5 file",
     .params_help = ", or cov=FILE.h5",
     .create = corr_gaussian_create, .host = rows_logp_grad, .device = DEVICE_ENTRY(cuda_builtin_rows_logp_grad)},
    {.name = "banana", .kind = BUILTIN_BANANA, .var_name = "x", .default_dim = 2,
     .params = {PARAM("a", 1.0, banana_a, PARAM_POSITIVE), PARAM("b", 0.5, banana_b, PARAM_ANY)},
     .help = "pairs (u, v): u ~ N(0, a^2), v | u ~ N(b (u^2 - a^2), 1); dim 2 unless --dim",
     .host = rows_logp_grad, .device = DEVICE_ENTRY(cuda_builtin_rows_logp_grad)},
    {.name = "mixture1d", .kind = BUILTIN_MIXTURE1D, .var_name = "x", .default_dim = 1,
     .help = "each coordinate 1/3 N(-2, 1) + 2/3 N(2, 1) (the SVGD paper's toy); dim 1 unless --dim",
     .host = rows_logp_grad, .device = DEVICE_ENTRY(cuda_builtin_rows_logp_grad)},
    {.name = "funnel", .kind = BUILTIN_FUNNEL, .var_name = "x", .default_dim = 10,
     .min_dim = 2, .min_dim_why = "v and at least one x",
     .params = {PARAM("sigma", 3.0, funnel_sigma, PARAM_POSITIVE)},
     .help = "Neal's funnel: v ~ N(0, sigma^2), x_k | v ~ N(0, e^v); dim 10 unless --dim",
     .host = rows_logp_grad, .device = DEVICE_ENTRY(cuda_builtin_rows_logp_grad)},
    {.name = "logistic", .kind = BUILTIN_LOGISTIC, .var_name = "w", .default_dim = -1,
     .params = {PARAM("sigma", 1.0, prior_sigma, PARAM_POSITIVE)},
     .file_key = "data",
     .help = "Bayesian logistic regression, y ~ Bernoulli(sigmoid(X w)), w ~ N(0, sigma^2 I);\n"
             "                 X [n, D] and y [n] (0/1) from --data FILE.h5; dim = D",
     .create = logistic_create, .host = logistic_logp_grad, .device = DEVICE_ENTRY(cuda_builtin_logistic_logp_grad)},
};
#define BUILTIN_ROW_COUNT ((int)(sizeof builtin_rows / sizeof builtin_rows[0]))

static const builtin_row_t *builtin_row_named(const char *name) {
  for (int r = 0; r < BUILTIN_ROW_COUNT; ++r)
    if (strcmp(builtin_rows[r].name, name) == 0) return &builtin_rows[r];
  return NULL;
}

/* ---- creation, the steps every model shares ------------------------------------------------- */

int builtin_target_file_key(const char *name, const char **key) {
  const builtin_row_t *row = builtin_row_named(name);
  *key = row ? row->file_key : NULL;
  return row != NULL;
}

static int unknown_target(const char *name) {
  char list[256] = "";
  for (int r = 0; r < BUILTIN_ROW_COUNT; ++r) {
    strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, builtin_rows[r].name, sizeof list - strlen(list) - 1);
  }
  return ds_fail(DS_ERR_INPUT, "--target: unknown target '%s' (built-ins: %s; or plugin:path/to/lib.so)", name, list);
}

/* The keys a row takes: dim, its parameters, its file. */
static int row_args_check(const builtin_row_t *row, const char *args) {
  const char *known[BUILTIN_MAX_PARAMS + 3];
  int count = 0;
  known[count++] = "dim";
  for (const builtin_param_t *param = row->params; param->key; ++param) known[count++] = param->key;
  if (row->file_key) known[count++] = row->file_key;
  known[count] = NULL;
  return target_args_check(row->name, args, known);
}

int builtin_target_create(const char *name, const char *args, MPI_Comm comm, dsampler_target *out) {
  const builtin_row_t *row = builtin_row_named(name);
  if (!row) return unknown_target(name);
  if (!row->file_key || strcmp(row->file_key, "data") != 0) DS_TRY(refuse_data(row->name, args));
  DS_TRY(row_args_check(row, args));
  builtin_params_t *p = calloc(1, sizeof *p);
  if (!p) return DS_FAIL_ALLOC("target parameters", sizeof *p);
  p->kind = row->kind;
  p->scale = 1.0f;
  p->inv_scale2 = 1.0f;
  int status = row->create ? row->create(row, args, comm, p) : builtin_read_params(row, args, p);
  if (status != DS_OK) {
    builtin_params_free(p);
    return status;
  }
  memset(out, 0, sizeof *out);
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = row->name;
  out->var_name = row->var_name;
  out->dim = p->dim;
  out->self = p;
  out->logp_grad = row->host;
  out->logp_grad_cuda = row->device;
  out->destroy = builtin_params_free;
  return DS_OK;
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

void builtin_targets_print(FILE *out) {
  fprintf(out, "built-in targets (--target NAME --target-args K=V,...; a per-dimension value is a list a:b:c):\n");
  for (int r = 0; r < BUILTIN_ROW_COUNT; ++r) {
    const builtin_row_t *row = &builtin_rows[r];
    fprintf(out, "  %-15s%s\n", row->name, row->help);
    if (!row->params[0].key) continue;
    fprintf(out, "                  ");
    for (const builtin_param_t *param = row->params; param->key; ++param)
      fprintf(out, "%s %s=%g", param == row->params ? "" : ",", param->key, param->fallback);
    fprintf(out, "%s\n", row->params_help ? row->params_help : "");
  }
  fprintf(out, "plugins: --target plugin:path/to/lib.so (the model's own --target-args; see dsampler_target.h)\n");
}
