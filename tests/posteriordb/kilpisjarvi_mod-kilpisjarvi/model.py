# NumPyro version of kilpisjarvi.stan (posteriordb kilpisjarvi_mod-kilpisjarvi) for dsampler's
# --target jax: a linear regression with normal priors set by the data and a flat prior on sigma, the
# same parameters, constraints, priors and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(N, x, y, pmualpha, psalpha, pmubeta, psbeta, **unused):
    real = jnp.result_type(float)
    x, y = jnp.asarray(x, dtype=real), jnp.asarray(y, dtype=real)
    pmualpha, psalpha, pmubeta, psbeta = (jnp.asarray(a, dtype=real) for a in (pmualpha, psalpha, pmubeta, psbeta))
    alpha = numpyro.sample("alpha", dist.Normal(pmualpha, psalpha))
    beta = numpyro.sample("beta", dist.Normal(pmubeta, psbeta))
    sigma = numpyro.sample("sigma", dist.ImproperUniform(constraints.positive, (), ()))
    numpyro.sample("y", dist.Normal(alpha + beta * x, sigma), obs=y)
