# NumPyro version of kidscore_interaction.stan (posteriordb kidiq-kidscore_interaction) for dsampler's
# --target jax: a linear regression with an interaction, flat priors on beta and a half-Cauchy on
# sigma, the same parameters, constraints, priors and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, kid_score, mom_iq, mom_hs, **unused):
    real = jnp.result_type(float)
    kid_score, mom_iq, mom_hs = (jnp.asarray(a, dtype=real) for a in (kid_score, mom_iq, mom_hs))
    inter = mom_hs * mom_iq
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real_vector, (), (4,)))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))  # real<lower=0> ~ cauchy(0, 2.5)
    mu = beta[0] + beta[1] * mom_hs + beta[2] * mom_iq + beta[3] * inter
    numpyro.sample("kid_score", dist.Normal(mu, sigma), obs=kid_score)
