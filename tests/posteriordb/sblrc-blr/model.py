# NumPyro version of blr.stan (posteriordb sblrc-blr) for dsampler's --target jax: a Bayesian linear
# regression, the same parameters, constraints, priors and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(N, D, X, y):
    real = jnp.result_type(float)
    X, y = jnp.asarray(X, dtype=real), jnp.asarray(y, dtype=real)
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([D]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(10.0))  # real<lower=0>, normal_lpdf(sigma | 0, 10)
    numpyro.sample("y", dist.Normal(X @ beta, sigma), obs=y)
