# NumPyro version of dogs.stan (posteriordb dogs-dogs) for dsampler's --target jax: a logistic
# regression of each dog's avoidance on its earlier avoidances and shocks, the same parameters,
# priors and likelihood as model.stan beside it (its transformed parameters n_avoid, n_shock and p
# are computed but not recorded).
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(n_dogs, n_trials, y):
    real = jnp.result_type(float)
    yr = jnp.asarray(y, dtype=real)
    beta = numpyro.sample("beta", dist.Normal(0.0, 100.0).expand([3]).to_event(1))
    # n_shock[j, t] = sum of y[j, s] over s < t, n_avoid[j, t] = t - n_shock[j, t] (0-based t)
    n_shock = jnp.cumsum(yr, axis=1) - yr
    n_avoid = jnp.arange(n_trials, dtype=real)[None, :] - n_shock
    p = beta[0] + beta[1] * n_avoid + beta[2] * n_shock
    numpyro.sample("y", dist.Bernoulli(logits=p), obs=y)
