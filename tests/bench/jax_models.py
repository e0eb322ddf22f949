"""JAX log densities for bench_jax.py: the same Python function is exported for dsampler
(dsampler-export --kind jax) and handed to BlackJAX and NumPyro, so every sampler runs the same
model. Each takes an unconstrained params dict and the data as keywords.

  gaussian   standard Gaussian, x in R^64 (BlackJAX's and dsampler's fused built-in row)
  schools    eight schools, non-centred: mu, log_tau, theta_tilde[8] (tau ~ HalfCauchy(5), with
             the log-Jacobian of tau = exp(log_tau))
  logistic   Bayesian logistic regression, beta ~ N(0, 1), X [n, 54] synthetic
"""
import jax
import jax.numpy as jnp
import numpy as np

LOG_2PI = float(np.log(2.0 * np.pi))


def gaussian(params):
    x = params["x"]
    return -0.5 * jnp.sum(x * x)


def _normal(x, mu, sigma):
    z = (x - mu) / sigma
    return -0.5 * z * z - jnp.log(sigma) - 0.5 * LOG_2PI


def schools(params, y, sigma):
    mu, log_tau, theta_tilde = params["mu"], params["log_tau"], params["theta_tilde"]
    tau = jnp.exp(log_tau)
    lp = _normal(mu, 0.0, 5.0)
    lp += jnp.log(2.0 / (jnp.pi * 5.0)) - jnp.log1p((tau / 5.0) ** 2) + log_tau  # HalfCauchy + Jacobian
    lp += jnp.sum(_normal(theta_tilde, 0.0, 1.0))
    lp += jnp.sum(_normal(y, mu + tau * theta_tilde, sigma))
    return lp


def logistic(params, X, y):
    beta = params["beta"]
    z = X @ beta
    return jnp.sum(y * z - jax.nn.softplus(z)) - 0.5 * jnp.sum(beta * beta)


SCHOOLS_DATA = {"y": [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0],
                "sigma": [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0]}


def logistic_data(n, dim=54, seed=0):
    """The synthetic data of shared/gpu/baselines_hmc_logistic.py: X ~ N(0, 1), true weights
    N(0, 0.25), y Bernoulli."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, dim)).astype(np.float32)
    w = rng.standard_normal(dim).astype(np.float32) * 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ w))).astype(np.float32)
    return {"X": X, "y": y}


CASES = {
    "gaussian": (gaussian, lambda: {}, {"x": np.zeros(64, np.float32)}),
    "schools": (schools, lambda: SCHOOLS_DATA,
                {"mu": np.float32(0), "log_tau": np.float32(0), "theta_tilde": np.zeros(8, np.float32)}),
    "logistic": (logistic, lambda: logistic_data(100000), {"beta": np.zeros(54, np.float32)}),
}
