# NumPyro version of low_dim_gauss_mix.stan (posteriordb low_dim_gauss_mix-low_dim_gauss_mix) for
# dsampler's --target jax: a two-component normal mixture (components summed out, as log_mix does)
# with the same parameters, constraints (ordered mu), priors and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, y):
    y = jnp.asarray(y, dtype=jnp.result_type(float))
    mu = numpyro.sample("mu", dist.ImproperUniform(constraints.ordered_vector, (), (2,)))
    numpyro.factor("mu_prior", jnp.sum(dist.Normal(0.0, 2.0).log_prob(mu)))
    sigma = numpyro.sample("sigma", dist.HalfNormal(2.0).expand([2]).to_event(1))  # real<lower=0> ~ normal(0, 2)
    theta = numpyro.sample("theta", dist.Beta(5.0, 5.0))
    # log_mix(theta, normal_lpdf(y | mu[1], sigma[1]), normal_lpdf(y | mu[2], sigma[2])), summed over y
    lp1 = jnp.log(theta) + dist.Normal(mu[0], sigma[0]).log_prob(y)
    lp2 = jnp.log1p(-theta) + dist.Normal(mu[1], sigma[1]).log_prob(y)
    numpyro.factor("y", jnp.sum(jnp.logaddexp(lp1, lp2)))
