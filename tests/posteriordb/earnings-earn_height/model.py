# NumPyro version of earn_height.stan (posteriordb earnings-earn_height) for dsampler's --target jax: a
# linear regression with flat priors, the same parameters, constraints and likelihood as model.stan
# beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, earn, height, **unused):
    real = jnp.result_type(float)
    earn, height = jnp.asarray(earn, dtype=real), jnp.asarray(height, dtype=real)
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real_vector, (), (2,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    numpyro.sample("earn", dist.Normal(beta[0] + beta[1] * height, sigma), obs=earn)
