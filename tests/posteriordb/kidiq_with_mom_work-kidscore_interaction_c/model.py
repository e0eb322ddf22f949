# NumPyro version of kidscore_interaction_c.stan (posteriordb kidiq_with_mom_work-kidscore_interaction_c)
# for dsampler's --target jax: a linear regression on centred predictors and their interaction with
# flat priors, the same parameters, constraints and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, kid_score, mom_hs, mom_iq, **unused):
    real = jnp.result_type(float)
    kid_score, mom_hs, mom_iq = (jnp.asarray(a, dtype=real) for a in (kid_score, mom_hs, mom_iq))
    c_mom_hs = mom_hs - jnp.mean(mom_hs)
    c_mom_iq = mom_iq - jnp.mean(mom_iq)
    inter = c_mom_hs * c_mom_iq
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real_vector, (), (4,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    mu = beta[0] + beta[1] * c_mom_hs + beta[2] * c_mom_iq + beta[3] * inter
    numpyro.sample("kid_score", dist.Normal(mu, sigma), obs=kid_score)
