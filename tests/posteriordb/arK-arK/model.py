# NumPyro version of arK.stan (posteriordb arK-arK) for dsampler's --target jax: an AR(K) model with
# the same parameters, constraints, priors and likelihood as model.stan beside it.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(K, T, y):
    y = jnp.asarray(y, dtype=jnp.result_type(float))
    alpha = numpyro.sample("alpha", dist.Normal(0.0, 10.0))
    beta = numpyro.sample("beta", dist.Normal(0.0, 10.0).expand([K]).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))  # real<lower=0> ~ cauchy(0, 2.5)
    # mu[t] = alpha + sum_k beta[k] y[t - k] for t = K..T-1 (0-based): lags[t - K, k - 1] = y[t - k].
    lags = y[jnp.arange(K, T)[:, None] - jnp.arange(1, K + 1)[None, :]]
    mu = alpha + lags @ beta
    numpyro.sample("y", dist.Normal(mu, sigma), obs=y[K:])
