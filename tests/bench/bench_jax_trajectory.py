"""Where a JAX model's HMC trajectory spends its time on the GPU: the exporter's trajectory
programs alone (no dsampler around them), jitted from Python with the state donated, 2^20
chains, ms per call (median and minimum of 15). For L = 10 as dsampler calls them (8 + 2): as
XLA loops and written out, with the state carried chains-major ("aos", dsampler's rows) and
chains-minor ("soa"); one vmapped value-and-gradient; a BlackJAX-style velocity Verlet loop
(scalar step, identity metric). Set against `dsampler hmc --target jax:... --timing`, the
difference is what the C path around the programs costs.
Usage: bench_jax_trajectory.py [CASE] (tests/bench/jax_models.py: gaussian (d = 64, the
default), schools). Prints one JSON line."""
import os, sys, time, json
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "export"))
sys.path.insert(0, HERE)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax, jax.numpy as jnp
from jax import lax
from jax.flatten_util import ravel_pytree
from dsampler_export.trajectory import trajectory_program
from jax_models import CASES

case = sys.argv[1] if len(sys.argv) > 1 else "gaussian"
fn, data, init = CASES[case]
data = {k: jnp.asarray(v) for k, v in data().items()}
flat, unravel = ravel_pytree({k: jnp.asarray(v) for k, v in init.items()})
logp = lambda x: fn(unravel(x), **data)
N, D = int(os.environ.get("CHAINS", 1 << 20)), flat.shape[0]


def med(f, reps=15):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); jax.block_until_ready(f()); ts.append(time.perf_counter() - t0)
    ts.sort(); return round(ts[len(ts) // 2] * 1e3, 3), round(ts[0] * 1e3, 3)


def timed(jitted, state, *rest):
    """Median and minimum ms of calls that feed each call's outputs to the next."""
    box = [list(state)]
    def call():
        out = jitted(*box[0], *rest); box[0] = list(out[:len(state)]); return out
    call(); call()
    return med(call)


key = jax.random.PRNGKey(0)
q = 0.5 * jax.random.normal(key, (N, D), jnp.float32); p = jax.random.normal(key, (N, D), jnp.float32)
g = jax.vmap(jax.grad(logp))(q); lp = jnp.zeros((N,), jnp.float32)
eps = jnp.full((N,), 0.02, jnp.float32); inv = jnp.ones((D,), jnp.float32)
res = {"case": case, "dim": D, "chains": N, "device": jax.devices()[0].device_kind}
with jax.default_matmul_precision("highest"):
    for layout in ("aos", "soa"):
        for unroll in (False, True):
            f8 = jax.jit(trajectory_program(logp, 0, True, 8, layout, unroll), donate_argnums=(0, 1, 2, 3))
            f2 = jax.jit(trajectory_program(logp, 0, True, 2, layout, unroll), donate_argnums=(0, 1, 2, 3))
            def t82(q, p, g, lp):
                return f2(*f8(q, p, g, lp, eps, inv, jnp.int32(1)), eps, inv, jnp.int32(0))
            res[f"traj_8+2_{layout}" + ("_unrolled" if unroll else "")] = timed(t82, [q + 0, p + 0, g + 0, lp + 0])
    vg = jax.jit(jax.vmap(jax.value_and_grad(logp)))
    vg(q); res["value_and_grad"] = med(lambda: vg(q))
    gr = jax.jit(jax.vmap(jax.grad(logp)))
    gr(q); res["grad"] = med(lambda: gr(q))

    def bj(q, p, g):
        def step(i, s):
            q, p, g = s
            p = p + 0.01 * g; q = q + 0.02 * p; g = jax.vmap(jax.grad(logp))(q); p = p + 0.01 * g
            return q, p, g
        return lax.fori_loop(0, 10, step, (q, p, g))
    res["blackjax_style_10"] = timed(jax.jit(bj, donate_argnums=(0, 1, 2)), [q + 0, p + 0, g + 0])
print(json.dumps(res))
