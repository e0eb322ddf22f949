# NumPyro version of hmm_example.stan (posteriordb hmm_example-hmm_example) for dsampler's
# --target jax: a two-state hidden Markov model with unit-variance normal emissions, the states summed
# out by the forward algorithm (jax.lax.scan); the same parameters, constraints (flat simplexes,
# positive_ordered mu), priors and likelihood as model.stan beside it (its generated quantities, a
# Viterbi path, are left out).
import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints


def model(N, K, y):
    y = jnp.asarray(y, dtype=jnp.result_type(float))
    theta1 = numpyro.sample("theta1", dist.ImproperUniform(constraints.simplex, (), (K,)))
    theta2 = numpyro.sample("theta2", dist.ImproperUniform(constraints.simplex, (), (K,)))
    mu = numpyro.sample("mu", dist.ImproperUniform(constraints.positive_ordered_vector, (), (K,)))
    numpyro.factor("mu_prior", dist.Normal(3.0, 1.0).log_prob(mu[0]) + dist.Normal(10.0, 1.0).log_prob(mu[1]))
    log_theta = jnp.log(jnp.stack([theta1, theta2]))  # [from j, to k]
    emission = dist.Normal(mu, 1.0).log_prob(y[:, None])  # [t, k]

    def forward(gamma_prev, emission_t):
        return logsumexp(gamma_prev[:, None] + log_theta, axis=0) + emission_t, None

    gamma_last, _ = jax.lax.scan(forward, emission[0], emission[1:])
    numpyro.factor("forward", logsumexp(gamma_last))
