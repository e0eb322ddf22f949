# NumPyro version of garch11.stan (posteriordb garch-garch11) for dsampler's --target jax: GARCH(1, 1)
# with the same parameters, constraints (beta1's upper bound 1 - alpha1 included), flat priors and
# likelihood as model.stan beside it.
import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints


def model(T, y, sigma1):
    y = jnp.asarray(y, dtype=jnp.result_type(float))
    sigma1 = jnp.asarray(sigma1, dtype=jnp.result_type(float))
    mu = numpyro.sample("mu", dist.ImproperUniform(constraints.real, (), ()))
    alpha0 = numpyro.sample("alpha0", dist.ImproperUniform(constraints.positive, (), ()))
    alpha1 = numpyro.sample("alpha1", dist.ImproperUniform(constraints.interval(0.0, 1.0), (), ()))
    # real<lower=0, upper=(1 - alpha1)> beta1, flat: Uniform's support gives the bound (and NumPyro
    # replays the model for it when it maps draws back; an ImproperUniform wrapping the same interval
    # would be mapped with the first trace's bound), and the factor cancels its log density -log(1 - alpha1).
    beta1 = numpyro.sample("beta1", dist.Uniform(0.0, 1.0 - alpha1))
    numpyro.factor("beta1_flat", jnp.log1p(-alpha1))

    def step(sigma_prev, y_prev):
        sigma_t = jnp.sqrt(alpha0 + alpha1 * jnp.square(y_prev - mu) + beta1 * jnp.square(sigma_prev))
        return sigma_t, sigma_t

    _, sigmas = jax.lax.scan(step, sigma1, y[:-1])
    sigma = jnp.concatenate([sigma1[None], sigmas])
    numpyro.sample("y", dist.Normal(mu, sigma), obs=y)
