# NumPyro version of gp_pois_regr.stan (posteriordb gp_pois_regr-gp_pois_regr) for dsampler's
# --target jax: a latent Gaussian process (non-centred through the covariance's Cholesky factor) with
# a Poisson likelihood; the same parameters, constraints, priors and likelihood as model.stan beside
# it; f, a transformed parameter there, is a deterministic site.
#
# Needs float64: with 1e-10 on the diagonal, as model.stan has it, float32's Cholesky factorisation
# fails (NaN) for rho above about 5, in the bulk of the posterior (mean 5.7). A float32-sized
# jitter (1e-6 alpha^2) keeps it finite, yet NumPyro's NUTS in float32 then adapts step sizes of
# about 1e-5 and no chain moves.
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def model(N, x, k, **unused):
    x = jnp.asarray(x, dtype=jnp.result_type(float))
    rho = numpyro.sample("rho", dist.Gamma(25.0, 4.0))
    alpha = numpyro.sample("alpha", dist.HalfNormal(2.0))  # real<lower=0> ~ normal(0, 2)
    f_tilde = numpyro.sample("f_tilde", dist.Normal(0.0, 1.0).expand([N]).to_event(1))
    # gp_exp_quad_cov(x, alpha, rho) + 1e-10 on the diagonal
    d2 = jnp.square(x[:, None] - x[None, :])
    cov = jnp.square(alpha) * jnp.exp(-0.5 * d2 / jnp.square(rho)) + 1e-10 * jnp.eye(N)
    f = numpyro.deterministic("f", jnp.linalg.cholesky(cov) @ f_tilde)
    numpyro.sample("k", dist.Poisson(jnp.exp(f)), obs=k)  # poisson_log(f)
