# NumPyro version of eight_schools_noncentered.stan (posteriordb eight_schools-eight_schools_noncentered)
# for dsampler's --target jax: the same parameters, constraints, priors and likelihood as model.stan
# beside it; theta, a transformed parameter there, is a deterministic site.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(J, y, sigma):
    y = jnp.asarray(y, dtype=jnp.result_type(float))
    sigma = jnp.asarray(sigma, dtype=jnp.result_type(float))
    theta_trans = numpyro.sample("theta_trans", dist.Normal(0.0, 1.0).expand([J]).to_event(1))
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))  # real<lower=0> ~ cauchy(0, 5)
    theta = numpyro.deterministic("theta", theta_trans * tau + mu)
    numpyro.sample("y", dist.Normal(theta, sigma), obs=y)
