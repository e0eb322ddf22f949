/* model_corr.c: a test model, a strongly correlated 2-D Gaussian with unequal scales:
 *
 *   x ~ N(0, Sigma),  sd(x_0) = 1, sd(x_1) = 10, corr(x_0, x_1) = -0.99.
 *
 * A diagonal metric can match the scales but not the correlation: the whitened density still
 * has a condition number near 200, so a fixed-length HMC moves slowly along the long axis.
 * Reference: exact (means 0, sds 1 and 10). Used by tests/py/test_models.py and
 * tests/bench/bench_models.py; the float64 density is exported as model_corr_logp_grad_f64
 * for their gradient checks. */
#include "model_common.h"

#define CORR_DIM 2

static const double corr_sd[CORR_DIM] = {1.0, 10.0};
static const double corr_rho = -0.99;

double model_corr_logp_grad_f64(const void *self, const double *x, double *grad);

/* log p = -1/2 x' Sigma^-1 x, with Sigma^-1 written out for the 2 x 2 case. */
double model_corr_logp_grad_f64(const void *self, const double *x, double *grad) {
  (void)self;
  const double z0 = x[0] / corr_sd[0], z1 = x[1] / corr_sd[1];
  const double one_minus_rho2 = 1.0 - corr_rho * corr_rho;
  const double quad = (z0 * z0 - 2.0 * corr_rho * z0 * z1 + z1 * z1) / one_minus_rho2;
  grad[0] = -(z0 - corr_rho * z1) / (one_minus_rho2 * corr_sd[0]);
  grad[1] = -(z1 - corr_rho * z0) / (one_minus_rho2 * corr_sd[1]);
  return -0.5 * quad;
}

static int corr_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  return model_logp_grad_rows(model_corr_logp_grad_f64, self, CORR_DIM, x, n, logp, grad);
}

int dsampler_target_create(const char *args, MPI_Comm comm, dsampler_target *out) {
  if (model_check_args("model_corr", args, CORR_DIM, model_rank(comm)) != 0) return 1;
  model_describe(out, "model_corr", CORR_DIM, NULL, corr_logp_grad, NULL);
  return 0;
}
