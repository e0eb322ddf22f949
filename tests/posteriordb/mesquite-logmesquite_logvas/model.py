# NumPyro version of logmesquite_logvas.stan (posteriordb mesquite-logmesquite_logvas) for dsampler's
# --target jax: a linear regression on log canopy volume, area and shape and other log predictors with
# flat priors, the same parameters, constraints and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, weight, diam1, diam2, canopy_height, total_height, density, group):
    real = jnp.result_type(float)
    weight, diam1, diam2, canopy_height, total_height, density, group = (
        jnp.asarray(a, dtype=real) for a in (weight, diam1, diam2, canopy_height, total_height, density, group))
    log_canopy_volume = jnp.log(diam1 * diam2 * canopy_height)
    log_canopy_area = jnp.log(diam1 * diam2)
    log_canopy_shape = jnp.log(diam1 / diam2)
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real_vector, (), (7,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    mu = (beta[0] + beta[1] * log_canopy_volume + beta[2] * log_canopy_area + beta[3] * log_canopy_shape
          + beta[4] * jnp.log(total_height) + beta[5] * jnp.log(density) + beta[6] * group)
    numpyro.sample("log_weight", dist.Normal(mu, sigma), obs=jnp.log(weight))
