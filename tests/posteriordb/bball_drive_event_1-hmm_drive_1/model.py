# NumPyro version of hmm_drive_1.stan (posteriordb bball_drive_event_1-hmm_drive_1) for dsampler's
# --target jax: a two-state hidden Markov model with normal emissions, the states summed out by the
# forward algorithm (jax.lax.scan); the same parameters, constraints, priors and likelihood as
# model.stan beside it (its generated quantities, a Viterbi path, are left out).
import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from numpyro.distributions import constraints


def model(K, N, u, v, alpha, tau, rho):
    real = jnp.result_type(float)
    u, v, alpha = jnp.asarray(u, dtype=real), jnp.asarray(v, dtype=real), jnp.asarray(alpha, dtype=real)
    tau, rho = jnp.asarray(tau, dtype=real), jnp.asarray(rho, dtype=real)
    theta1 = numpyro.sample("theta1", dist.Dirichlet(alpha[0]))
    theta2 = numpyro.sample("theta2", dist.Dirichlet(alpha[1]))
    phi = numpyro.sample("phi", dist.ImproperUniform(constraints.ordered_vector, (), (K,)))
    lam = numpyro.sample("lambda", dist.ImproperUniform(constraints.ordered_vector, (), (K,)))
    numpyro.factor("phi_prior", dist.Normal(0.0, 1.0).log_prob(phi[0]) + dist.Normal(3.0, 1.0).log_prob(phi[1]))
    numpyro.factor("lambda_prior",
                   dist.Normal(0.0, 1.0).log_prob(lam[0]) + dist.Normal(3.0, 1.0).log_prob(lam[1]))
    log_theta = jnp.log(jnp.stack([theta1, theta2]))  # [from j, to k]
    # emission[t, k] = normal_lpdf(u[t] | phi[k], tau) + normal_lpdf(v[t] | lambda[k], rho)
    emission = dist.Normal(phi, tau).log_prob(u[:, None]) + dist.Normal(lam, rho).log_prob(v[:, None])

    def forward(gamma_prev, emission_t):
        return logsumexp(gamma_prev[:, None] + log_theta, axis=0) + emission_t, None

    gamma_last, _ = jax.lax.scan(forward, emission[0], emission[1:])
    numpyro.factor("forward", logsumexp(gamma_last))
