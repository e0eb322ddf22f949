# HMC's leapfrog trajectory as one program (dsampler_target.h's leapfrog_cuda): XLA fuses each
# step's kick, drift and gradient into a few kernels and runs the steps in one launch, where a
# call per step would pay PJRT's per-call cost and read the state back from memory between our
# kick-drift kernel and XLA's gradient. dsampler keeps the momentum draw, the last half kick,
# the energy and the acceptance.
#
# The arithmetic is that of dsampler's own kernels (cuda/hmc/hmc_generic.cu, hmc_kick_drift_kernel):
# kick p + k g with k = eps / 2 on the first step and eps after, drift q + (eps m) p.
#
# Layout: "aos" (the default) keeps dsampler's rows; "soa" carries the state chains-minor ([dim, block]) inside the loop, transposing once
# at entry and exit; XLA's gradient of a vmapped row density writes a chains-major gradient as a
# concatenation along the 64-wide minor axis, which measured 1.7x slower than chains-minor for
# one gradient call; inside a trajectory the two measured alike (aos 7.4-8.1 ms, soa 8.6-9.1 ms
# an iteration of 10 steps, d = 64, 2^20 chains, H200).
#
# TRAJECTORY_STEPS: the programs exported, of 1, 2, 4, ... steps.

import jax
import jax.numpy as jnp
from jax import lax

TRAJECTORY_STEPS = (1, 2, 4, 8, 16)


def trajectory_program(logp, n_data, shared_metric, steps, layout="aos", unroll=False):
    """-> f(q, p, grad, lp_buf, eps, inv_metric, first, *data) -> (q, p, grad, lp): `steps`
    leapfrog steps of rows [block, dim] (eps [block]; inv_metric [dim] when shared, else
    [block, dim]; first an int32 scalar, non-zero when these steps begin the trajectory, whose
    first kick is a half one). q, p, grad and lp_buf are meant to be donated.

    The step count is fixed in the program: XLA then knows the loop's trip count and runs it
    without reading a predicate back to the host every step. dsampler makes a trajectory of L
    steps from programs of 1, 2, 4, ... steps (L = 10: 8 + 2). Only the last step computes the
    log density; the steps before it take the gradient alone.

    unroll: the steps written out one after another rather than as an XLA loop, so that XLA can
    fuse across steps (a density whose gradient is elementwise becomes one pass over memory for
    the whole program); compile time grows with the steps (unroll_steps decides)."""
    value_and_grad = jax.value_and_grad(logp)
    data_axes = (None,) * n_data
    chains_minor = layout == "soa"
    # Rows are columns when the state is carried chains-minor.
    in_axes = ((1 if chains_minor else 0),) + data_axes
    out_axis = 1 if chains_minor else 0
    rows = jax.vmap(value_and_grad, in_axes=in_axes, out_axes=(0, out_axis))
    grads = jax.vmap(jax.grad(logp), in_axes=in_axes, out_axes=out_axis)
    axis = 0 if chains_minor else 1  # where a per-row scalar broadcasts

    def run(q, p, grad, lp_buf, eps, inv_metric, first, *data):
        if chains_minor:
            q, p, grad = q.T, p.T, grad.T
            metric = inv_metric[:, None] if shared_metric else inv_metric.T
        else:
            metric = inv_metric[None, :] if shared_metric else inv_metric
        eps_b = jnp.expand_dims(eps, axis)
        scale = eps_b * metric

        def kick_drift(i, q, p, grad):
            kick = jnp.where((i == 0) & (first != 0), 0.5 * eps_b, eps_b)
            p = p + kick * grad
            return q + scale * p, p

        def step(i, state):
            q, p = kick_drift(i, *state)
            return q, p, grads(q, *data)

        state = (q, p, grad)
        if unroll:
            for i in range(steps - 1):
                state = step(i, state)
        elif steps > 1:
            state = lax.fori_loop(0, steps - 1, step, state)
        q, p = kick_drift(steps - 1, *state)
        lp, grad = rows(q, *data)
        if chains_minor:
            q, p, grad = q.T, p.T, grad.T
        return q, p, grad, lp
    return run


# The gradient's operations (jaxpr equations, value and gradient) up to which trajectory programs
# are written out (unrolled). Measured on an H100 (2^20 chains, 10 steps as 8 + 2, the GPU time
# of the programs an iteration): the d = 64 Gaussian (8 operations), whose written-out steps XLA
# fuses into a few passes over memory, 1.81 ms against 6.64 ms as loops; eight schools (83
# operations, sums over the schools in every step) 2.79 ms against 2.50 ms as loops; logistic
# regression (50 operations, a product with the [n, 54] data in every step), written out, 10.1-11.6
# ms an iteration at 1024 chains and n = 100000 (BlackJAX 11.8 ms in the same call).
UNROLL_MAX_EQUATIONS = 64


def unroll_steps(logp, example_row, data):
    """Whether to write out logp's trajectory programs (every program of one model is written
    out or none): where its value and gradient take at most UNROLL_MAX_EQUATIONS operations."""
    jaxpr = jax.make_jaxpr(jax.value_and_grad(logp))(example_row, *data)
    return _count_equations(jaxpr.jaxpr) <= UNROLL_MAX_EQUATIONS


def _count_equations(jaxpr):
    count = 0
    for eqn in jaxpr.eqns:
        count += 1
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None:
                count += _count_equations(getattr(inner, "jaxpr", inner))
    return count
