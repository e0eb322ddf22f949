# NumPyro version of nes.stan (posteriordb nes2000-nes) for dsampler's --target jax: a linear regression
# of party identification with age as a factor and flat priors, the same parameters, constraints and
# likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, partyid7, real_ideo, race_adj, educ1, gender, income, age_discrete, **unused):
    real = jnp.result_type(float)
    partyid7, real_ideo, race_adj, educ1, gender, income = (
        jnp.asarray(a, dtype=real) for a in (partyid7, real_ideo, race_adj, educ1, gender, income))
    age30_44 = (age_discrete == 2).astype(real)
    age45_64 = (age_discrete == 3).astype(real)
    age65up = (age_discrete == 4).astype(real)
    beta = numpyro.sample("beta", dist.ImproperUniform(constraints.real_vector, (), (9,)))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    mu = (beta[0] + beta[1] * real_ideo + beta[2] * race_adj + beta[3] * age30_44 + beta[4] * age45_64
          + beta[5] * age65up + beta[6] * educ1 + beta[7] * gender + beta[8] * income)
    numpyro.sample("partyid7", dist.Normal(mu, sigma), obs=partyid7)
