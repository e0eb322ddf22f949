/* model_regression.c: a test model, linear regression whose noise is tiny next to the data:
 *
 *   y_i ~ N(x_i' beta, sigma),  i = 1..50,  beta in R^3,  sigma = exp(log_sigma)
 *   flat prior on beta, p(sigma) proportional to 1/sigma (flat in log_sigma); posterior proper.
 *
 * Parameters (dim 4): [beta_0, beta_1, beta_2, log_sigma]. The data are made here, from an
 * integer recipe that tests/py/test_models.py repeats to build its reference:
 *
 *   s_0 = 20240607, s_{k+1} = (1664525 s_k + 1013904223) mod 2^32, u_k = floor(s_k / 256) / 2^24
 *   for k = 1, 2, ...; X (50 x 3, row-major) = 20 u_1..u_150 - 10;
 *   z_i = u_{151+12i} + ... + u_{162+12i} - 6 (i = 0..49, near N(0, 1));
 *   y_i = X_i . (8, -5, 3) + 0.001 z_i.
 *
 * The posterior sd of sigma is about 1e-4 and of beta about 3e-5, while a start uniform in
 * (-2, 2) has sigma in (0.14, 7.4) and beta far from (8, -5, 3): log p there is about -1e5
 * (median) down to -1e7. The float64 density is exported as model_regression_logp_grad_f64. */
#include <stdint.h>

#include "model_common.h"

#define REG_ROWS 50
#define REG_COLS 3
#define REG_DIM (REG_COLS + 1)

typedef struct {
  double X[REG_ROWS][REG_COLS];
  double y[REG_ROWS];
} model_regression_t;

static const double reg_beta_true[REG_COLS] = {8.0, -5.0, 3.0};
static const double reg_sigma_true = 1e-3;

double model_regression_logp_grad_f64(const void *self, const double *x, double *grad);

/* The next uniform of the recipe above: exact in double (24 bits). */
static double reg_uniform(uint32_t *state) {
  *state = 1664525u * *state + 1013904223u;
  return (double)(*state >> 8) / 16777216.0;
}

static void reg_make_data(model_regression_t *data) {
  uint32_t state = 20240607u;
  for (int i = 0; i < REG_ROWS; ++i)
    for (int k = 0; k < REG_COLS; ++k) data->X[i][k] = 20.0 * reg_uniform(&state) - 10.0;
  for (int i = 0; i < REG_ROWS; ++i) {
    double z = -6.0;
    for (int m = 0; m < 12; ++m) z += reg_uniform(&state);
    double mean = 0.0;
    for (int k = 0; k < REG_COLS; ++k) mean += data->X[i][k] * reg_beta_true[k];
    data->y[i] = mean + reg_sigma_true * z;
  }
}

/* log p = -n log_sigma - RSS / (2 sigma^2): the likelihood times a prior flat in beta and
 * log_sigma. */
double model_regression_logp_grad_f64(const void *self, const double *x, double *grad) {
  const model_regression_t *data = self;
  const double log_sigma = x[REG_COLS], inv_var = exp(-2.0 * log_sigma);
  double rss = 0.0, xt_residual[REG_COLS] = {0.0};
  for (int i = 0; i < REG_ROWS; ++i) {
    double residual = data->y[i];
    for (int k = 0; k < REG_COLS; ++k) residual -= data->X[i][k] * x[k];
    rss += residual * residual;
    for (int k = 0; k < REG_COLS; ++k) xt_residual[k] += data->X[i][k] * residual;
  }
  for (int k = 0; k < REG_COLS; ++k) grad[k] = inv_var * xt_residual[k];
  grad[REG_COLS] = -REG_ROWS + rss * inv_var;
  return -REG_ROWS * log_sigma - 0.5 * rss * inv_var;
}

static int regression_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  return model_logp_grad_rows(model_regression_logp_grad_f64, self, REG_DIM, x, n, logp, grad);
}

static void regression_destroy(void *self) { free(self); }

int dsampler_target_create(const char *args, MPI_Comm comm, dsampler_target *out) {
  if (model_check_args("model_regression", args, REG_DIM, model_rank(comm)) != 0) return 1;
  model_regression_t *data = malloc(sizeof *data);
  if (!data) return 2;
  reg_make_data(data);
  model_describe(out, "model_regression", REG_DIM, data, regression_logp_grad, regression_destroy);
  return 0;
}
