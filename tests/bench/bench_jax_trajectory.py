"""Where a JAX model's HMC trajectory spends its time on the GPU, the exporter's trajectory
program alone (no dsampler around it): jitted from Python with the state donated, d = 64
standard Gaussian, 2^20 chains, ms per call (median and minimum of 15) for programs of 1, 2, 8
and 10 leapfrog steps (as XLA loops, and 8, 10 and 16 written out), 8 + 2 as dsampler calls them for L = 10, one vmapped value-and-gradient,
a BlackJAX-style velocity Verlet loop (scalar step, identity metric) and dsampler's kick-drift
form with a scalar step. Set against `dsampler hmc --target jax:... --timing`, the difference is
what the C path around the programs costs. Usage: bench_jax_trajectory.py [HLO_OUT]
(the 10-step program's optimized HLO is written to HLO_OUT, default /tmp/traj10_hlo.txt). Prints
one JSON line."""
import os, sys, time, json, re
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "export"))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import jax, jax.numpy as jnp
from jax import lax
from dsampler_export.trajectory import trajectory_program
N, D = 1 << 20, 64
def logp(x): return -0.5 * jnp.sum(x * x)
def med(f, reps=15):
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); jax.block_until_ready(f()); ts.append(time.perf_counter() - t0)
    ts.sort(); return round(ts[len(ts) // 2] * 1e3, 3), round(ts[0] * 1e3, 3)
key = jax.random.PRNGKey(0)
q = jax.random.normal(key, (N, D), jnp.float32); p = jax.random.normal(key, (N, D), jnp.float32)
g = -q; lp = jnp.zeros((N,), jnp.float32); eps = jnp.full((N,), 0.1, jnp.float32); inv = jnp.ones((D,), jnp.float32)
first = jnp.int32(1)
res = {}
with jax.default_matmul_precision("highest"):
    for steps, unroll in ((1, False), (2, False), (8, False), (10, False), (8, True), (10, True), (16, True)):
        f = jax.jit(trajectory_program(logp, 0, True, steps, "aos", unroll), donate_argnums=(0, 1, 2, 3))
        state = [q + 0, p + 0, g + 0, lp + 0]
        def call():
            global state
            out = f(*state, eps, inv, first)
            state = list(out)
            return out
        call(); call()
        res[f"traj_{steps}" + ("_unrolled" if unroll else "")] = med(call)
        if steps == 10 and not unroll:
            txt = f.lower(q, p, g, lp, eps, inv, first).compile().as_text()
            open(sys.argv[1] if len(sys.argv) > 1 else "/tmp/traj10_hlo.txt", "w").write(txt)
            res["traj10_fusions"] = len(re.findall(r"^\s*%?\S*fusion\S* = .*kind=k", txt, re.M))
    # 8 + 2 as dsampler calls them, as loops and written out
    for unroll in (False, True):
        f8 = jax.jit(trajectory_program(logp, 0, True, 8, "aos", unroll), donate_argnums=(0, 1, 2, 3))
        f2 = jax.jit(trajectory_program(logp, 0, True, 2, "aos", unroll), donate_argnums=(0, 1, 2, 3))
        state = [q + 0, p + 0, g + 0, lp + 0]
        def call82():
            global state
            out = f8(*state, eps, inv, jnp.int32(1)); out = f2(*out, eps, inv, jnp.int32(0)); state = list(out); return out
        call82(); res["traj_8+2" + ("_unrolled" if unroll else "")] = med(call82)
    # value and grad alone
    vg = jax.jit(jax.vmap(jax.value_and_grad(logp)))
    vg(q); res["value_and_grad"] = med(lambda: vg(q))
    # BlackJAX-style: scalar step, identity metric, fori_loop of velocity Verlet (kick half, drift, kick half)
    def bj(q, p, g):
        def step(i, s):
            q, p, g = s
            p = p + 0.05 * g; q = q + 0.1 * p; l, g = jax.vmap(jax.value_and_grad(logp))(q); p = p + 0.05 * g
            return q, p, g
        return lax.fori_loop(0, 10, step, (q, p, g))
    fbj = jax.jit(bj, donate_argnums=(0, 1, 2))
    st = [q + 0, p + 0, g + 0]
    def callbj():
        global st
        out = fbj(*st); st = list(out); return out
    callbj(); res["blackjax_style_10"] = med(callbj)
    # our form with a scalar eps (no per-row broadcast)
    def ours_scalar(q, p, g):
        def step(i, s):
            q, p, g = s
            p = p + jnp.where(i == 0, 0.05, 0.1) * g; q = q + 0.1 * p; l, g = jax.vmap(jax.value_and_grad(logp))(q)
            return q, p, g
        return lax.fori_loop(0, 10, step, (q, p, g))
    fos = jax.jit(ours_scalar, donate_argnums=(0, 1, 2))
    st = [q + 0, p + 0, g + 0]
    def callos():
        global st
        out = fos(*st); st = list(out); return out
    callos(); res["ours_scalar_eps_10"] = med(callos)
print(json.dumps(res))
