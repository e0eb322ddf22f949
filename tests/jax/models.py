# Small models for test_export.py: each exercises one part of the exporter (names and
# deterministic sites, linear algebra lowered to pure lax, refusals).

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def eight_schools(J, sigma, y=None):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("J", J):
        theta_tilde = numpyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
        theta = numpyro.deterministic("theta", mu + tau * theta_tilde)
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def mvn_lkj(N, K, Sigma, y):
    # cholesky (covariance_matrix) and triangular solves (scale_tril log density)
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0).expand([K]))
    scale = numpyro.sample("scale", dist.HalfNormal(2.0).expand([K]))
    L_omega = numpyro.sample("L_omega", dist.LKJCholesky(K, 2.0))
    numpyro.sample("z", dist.MultivariateNormal(jnp.zeros(K), covariance_matrix=Sigma))
    numpyro.deterministic("Omega", L_omega @ L_omega.T)
    with numpyro.plate("N", N):
        numpyro.sample("y", dist.MultivariateNormal(mu, scale_tril=scale[:, None] * L_omega),
                       obs=y)


def gp_regr(N, x, y, k=None):
    # posteriordb gp_pois_regr-gp_regr; k is in its data but unused
    rho = numpyro.sample("rho", dist.Gamma(25.0, 4.0))
    alpha = numpyro.sample("alpha", dist.HalfNormal(2.0))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    d = x[:, None] - x[None, :]
    cov = alpha**2 * jnp.exp(-0.5 * d**2 / rho**2) + sigma * jnp.eye(N)
    numpyro.sample("y", dist.MultivariateNormal(jnp.zeros(N), covariance_matrix=cov), obs=y)


def discrete(y):
    p = numpyro.sample("p", dist.Beta(1.0, 1.0))
    c = numpyro.sample("c", dist.Categorical(jnp.array([p, 1.0 - p])),
                       infer={"enumerate": "parallel"})
    numpyro.sample("y", dist.Normal(c * 1.0, 1.0), obs=y)


def with_lu(y):
    # a general solve is an LU factorization: a custom call the exporter does not replace
    a = numpyro.sample("a", dist.Normal(0.0, 1.0).expand([2]))
    m = jnp.array([[2.0, a[0]], [a[1], 3.0]])
    numpyro.factor("det", jnp.linalg.solve(m, jnp.ones(2)).sum())
    numpyro.sample("y", dist.Normal(a.sum(), 1.0), obs=y)


def dynamic(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    n = int(y.shape[0] if y.ndim == 0 else y.max())  # a size taken from data values
    numpyro.sample("obs", dist.Normal(mu, 1.0), obs=y[:n])


def bad_name(y):
    numpyro.sample("mu[0]", dist.Normal(0.0, 1.0))


def gaussian_logdensity(params, y, scale):
    # plain JAX: y ~ Normal(mu + beta . 1, exp(log_sigma)), flat priors but a N(0, scale) on beta
    mean = params["mu"] + jnp.sum(params["beta"])
    sigma = jnp.exp(params["log_sigma"])
    resid = (y - mean) / sigma
    return (-0.5 * jnp.sum(resid**2) - y.shape[0] * params["log_sigma"]
            - 0.5 * jnp.sum((params["beta"] / scale) ** 2))


def improper_logdensity(params):
    return jnp.log(params["a"])  # -inf at a = 0: warned, not refused
