# NumPyro version of logearn_interaction_z.stan (posteriordb earnings-logearn_interaction_z) for
# dsampler's --target jax: a linear regression of log earnings on standardised height, sex and their
# interaction with flat priors, the same parameters, constraints and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, earn, height, male):
    real = jnp.result_type(float)
    earn, height, male = (jnp.asarray(a, dtype=real) for a in (earn, height, male))
    log_earn = jnp.log(earn)
    z_height = (height - jnp.mean(height)) / jnp.std(height, ddof=1)  # Stan's sd: N - 1
    inter = z_height * male
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real_vector, (), (4,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    mu = beta[0] + beta[1] * z_height + beta[2] * male + beta[3] * inter
    numpyro.sample("log_earn", dist.Normal(mu, sigma), obs=log_earn)
