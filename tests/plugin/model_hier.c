/* model_hier.c: a test model, eight schools (Rubin 1981; Gelman et al., BDA3 section 5.5),
 * non-centred, with a funnel between the scale and the school effects:
 *
 *   y_j ~ N(theta_j, sigma_j),  theta_j = mu + tau eta_j,  eta_j ~ N(0, 1),  j = 1..8
 *   mu ~ N(0, 5),  tau ~ half-Cauchy(0, 5),  tau = exp(log_tau)  (Jacobian: + log_tau)
 *
 * Parameters (dim 10): x = [mu, log_tau, eta_1, ..., eta_8]. The reference posterior is
 * computed in tests/py/test_models.py by quadrature over log_tau (given tau, mu and the
 * theta_j are jointly Gaussian). The float64 density is exported as model_hier_logp_grad_f64
 * for the tests' gradient checks. */
#include "model_common.h"

#define HIER_SCHOOLS 8
#define HIER_DIM (2 + HIER_SCHOOLS)

static const double hier_y[HIER_SCHOOLS] = {28, 8, -3, 7, -1, 1, 18, 12};
static const double hier_sigma[HIER_SCHOOLS] = {15, 10, 16, 11, 9, 11, 10, 18};
static const double hier_mu_sd = 5.0, hier_tau_scale = 5.0;

double model_hier_logp_grad_f64(const void *self, const double *x, double *grad);

double model_hier_logp_grad_f64(const void *self, const double *x, double *grad) {
  (void)self;
  const double mu = x[0], log_tau = x[1], tau = exp(log_tau);
  const double tau_ratio2 = (tau / hier_tau_scale) * (tau / hier_tau_scale);
  /* log prior: N(mu; 0, 5), half-Cauchy(tau; 0, 5) times the Jacobian tau, N(eta_j; 0, 1). */
  double logp = -0.5 * mu * mu / (hier_mu_sd * hier_mu_sd) - log1p(tau_ratio2) + log_tau;
  double grad_mu = -mu / (hier_mu_sd * hier_mu_sd);
  double grad_log_tau = 1.0 - 2.0 * tau_ratio2 / (1.0 + tau_ratio2);
  for (int j = 0; j < HIER_SCHOOLS; ++j) {
    const double eta = x[2 + j];
    const double scaled_residual = (hier_y[j] - mu - tau * eta) / hier_sigma[j]; /* in sds */
    const double residual_over_var = scaled_residual / hier_sigma[j];            /* d/dtheta_j */
    logp += -0.5 * eta * eta - 0.5 * scaled_residual * scaled_residual;
    grad_mu += residual_over_var;
    grad_log_tau += tau * eta * residual_over_var;
    grad[2 + j] = -eta + tau * residual_over_var;
  }
  grad[0] = grad_mu;
  grad[1] = grad_log_tau;
  return logp;
}

static int hier_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  return model_logp_grad_rows(model_hier_logp_grad_f64, self, HIER_DIM, x, n, logp, grad);
}

int dsampler_target_create(const char *args, MPI_Comm comm, dsampler_target *out) {
  if (model_check_args("model_hier", args, HIER_DIM, model_rank(comm)) != 0) return 1;
  model_describe(out, "model_hier", HIER_DIM, NULL, hier_logp_grad, NULL);
  return 0;
}
