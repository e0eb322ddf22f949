# NumPyro version of arma11.stan (posteriordb arma-arma11) for dsampler's --target jax: ARMA(1, 1)
# with the same parameters, constraints, priors and likelihood as model.stan beside it.
import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(T, y):
    y = jnp.asarray(y, dtype=jnp.result_type(float))
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    phi = numpyro.sample("phi", dist.Normal(0.0, 2.0))
    theta = numpyro.sample("theta", dist.Normal(0.0, 2.0))
    sigma = numpyro.sample("sigma", dist.HalfCauchy(2.5))  # real<lower=0> ~ cauchy(0, 2.5)

    err0 = y[0] - (mu + phi * mu)  # assumes err[0] == 0 before the first observation

    def step(err_prev, ys):
        y_t, y_prev = ys
        err_t = y_t - (mu + phi * y_prev + theta * err_prev)
        return err_t, err_t

    _, errs = jax.lax.scan(step, err0, (y[1:], y[:-1]))
    err = jnp.concatenate([err0[None], errs])
    # err is y minus a function of earlier y: a unit-Jacobian map, so this is y's likelihood.
    numpyro.sample("err", dist.Normal(0.0, sigma), obs=err)
