# NumPyro version of gp_regr.stan (posteriordb gp_pois_regr-gp_regr) for dsampler's --target jax: a
# Gaussian process regression, y multivariate normal with the Cholesky factor of the squared-exponential
# covariance plus sigma (not sigma^2, as in model.stan) on the diagonal; the same parameters,
# constraints, priors and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(N, x, y, **unused):
    x = jnp.asarray(x, dtype=jnp.result_type(float))
    y = jnp.asarray(y, dtype=jnp.result_type(float))
    rho = numpyro.sample("rho", dist.Gamma(25.0, 4.0))
    alpha = numpyro.sample("alpha", dist.HalfNormal(2.0))  # real<lower=0> ~ normal(0, 2)
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))  # real<lower=0> ~ normal(0, 1)
    d2 = jnp.square(x[:, None] - x[None, :])
    cov = jnp.square(alpha) * jnp.exp(-0.5 * d2 / jnp.square(rho)) + sigma * jnp.eye(N)
    L_cov = jnp.linalg.cholesky(cov)
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(N), scale_tril=L_cov), obs=y)
