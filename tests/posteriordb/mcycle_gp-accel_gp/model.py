# NumPyro version of accel_gp.stan (posteriordb mcycle_gp-accel_gp; brms 2.10.0) for dsampler's
# --target jax: motorcycle acceleration as a normal with mean and log sd each an intercept plus an
# approximate (basis-function) Gaussian process, the GP weights non-centred (zgp ~ normal(0, 1)
# scaled by the spectral density); the same 66 parameters, constraints, priors and likelihood as
# model.stan beside it.
import math

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def _gpa(X, sdgp, lscale, zgp, slambda):
    """model.stan's gpa: X (diag_spd .* zgp), diag_spd = sqrt(spd_cov_exp_quad(slambda, sdgp, lscale))
    for one length scale (isotropic)."""
    D = slambda.shape[1]
    spd = (jnp.square(sdgp) * (math.sqrt(2 * math.pi) * lscale) ** D
           * jnp.exp(-0.5 * jnp.square(lscale) * jnp.sum(jnp.square(slambda), axis=1)))
    return X @ (jnp.sqrt(spd) * zgp)


def model(N, Y, Kgp_1, Dgp_1, NBgp_1, Xgp_1, slambda_1, Kgp_sigma_1, Dgp_sigma_1, NBgp_sigma_1, Xgp_sigma_1,
          slambda_sigma_1, prior_only, **unused):
    real = jnp.result_type(float)
    Y, Xgp_1, slambda_1, Xgp_sigma_1, slambda_sigma_1 = (
        jnp.asarray(a, dtype=real) for a in (Y, Xgp_1, slambda_1, Xgp_sigma_1, slambda_sigma_1))
    half_t = dist.FoldedDistribution(dist.StudentT(3.0, 0.0, 36.0))  # student_t(3, 0, 36) on (0, inf), normalised
    Intercept = numpyro.sample("Intercept", dist.StudentT(3.0, -13.0, 36.0))
    sdgp_1 = numpyro.sample("sdgp_1", half_t)
    lscale_1 = numpyro.sample("lscale_1", dist.InverseGamma(1.124909, 0.0177))
    zgp_1 = numpyro.sample("zgp_1", dist.Normal(0.0, 1.0).expand([NBgp_1]).to_event(1))
    Intercept_sigma = numpyro.sample("Intercept_sigma", dist.StudentT(3.0, 0.0, 10.0))
    sdgp_sigma_1 = numpyro.sample("sdgp_sigma_1", half_t)
    lscale_sigma_1 = numpyro.sample("lscale_sigma_1", dist.InverseGamma(1.124909, 0.0177))
    zgp_sigma_1 = numpyro.sample("zgp_sigma_1", dist.Normal(0.0, 1.0).expand([NBgp_sigma_1]).to_event(1))
    mu = Intercept + _gpa(Xgp_1, sdgp_1, lscale_1, zgp_1, slambda_1)
    sigma = jnp.exp(Intercept_sigma + _gpa(Xgp_sigma_1, sdgp_sigma_1, lscale_sigma_1, zgp_sigma_1, slambda_sigma_1))
    # if (!prior_only): prior_only is an integer scalar of the data
    numpyro.factor("Y", (1 - prior_only) * jnp.sum(dist.Normal(mu, sigma).log_prob(Y)))
