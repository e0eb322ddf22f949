"""JAX targets on the GPU beside BlackJAX and NumPyro on the same log density (tests/bench/
jax_models.py), each sampler in its own process so that none holds the GPU's memory while
another runs. Prints one JSON line per measurement.

  bench_jax.py export CASE OUT.dsj [BLOCK]        the bundle (dsampler-export's API, cuda only)
  bench_jax.py dsampler-iter BIN BUNDLE CHAINS    fixed L = 10, step 0.1: ms per iteration from
                                                  the walls of 50- and 250-draw runs
  bench_jax.py dsampler-run BIN BUNDLE CHAINS     defaults (warmup 1000 + 1000 draws): wall s
  bench_jax.py blackjax-iter CASE CHAINS          fixed L = 10, step 0.1: ms per iteration (the
                                                  walls of 20- and 220-iteration scans, compiled)
  bench_jax.py blackjax-run CASE CHAINS           ChEES warmup 1000 + dynamic HMC 1000 draws:
                                                  wall s, compile included (exit 3: out of memory)
  bench_jax.py blackjax-run-max CASE CHAINS       the same at the most chains that fit (CHAINS,
                                                  halved after each run out of memory)
  bench_jax.py numpyro-iter CASE CHAINS           NumPyro HMC, vectorized chains, L = 10
"""
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "src", "export"))
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def emit(**record):
    record["date"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(json.dumps(record), flush=True)


def export(case, out, block=65536):
    import numpy as np
    from dsampler_export.bundle import export_bundle
    from jax_models import CASES
    _, data, init = CASES[case]
    folder = out + ".inputs"
    os.makedirs(folder, exist_ok=True)
    data_path, init_path = os.path.join(folder, "data.json"), os.path.join(folder, "init.json")
    with open(data_path, "w") as f:
        json.dump({k: np.asarray(v).tolist() for k, v in data().items()}, f)
    with open(init_path, "w") as f:
        json.dump({k: np.asarray(v).tolist() for k, v in init.items()}, f)
    start = time.perf_counter()
    manifest = export_bundle(f"{HERE}/jax_models.py:{case}", data_path, out, kind="jax", init=init_path,
                             blocks={"cpu": 64, "cuda": int(block)}, platforms=["cuda"])
    emit(what="export", case=case, dim=manifest["dim"], block=int(block), seconds=round(time.perf_counter() - start, 2))


def dsampler_wall(binary, args):
    start = time.perf_counter()
    proc = subprocess.run([binary, "hmc", *args], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"dsampler failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return wall, proc.stdout, proc.stderr


def _sampling_wall_ms(out):
    """The sampling phase's wall from --timing's report (ms)."""
    m = re.search(r"sampling: \d+ iterations, ([0-9.]+) ms wall", out)
    if not m:
        raise SystemExit(f"no sampling line in dsampler's --timing report: {out[-2000:]}")
    return float(m.group(1))


def dsampler_iter(binary, bundle, chains, *extra):
    """ms a sampling iteration: the walls of runs of 50 and 1050 draws differenced over 1000,
    the process's wall and --timing's sampling phase (the difference cancels start-up, and the
    programs' compilation on first use, 0.2-0.8 s and varying, is a tenth of a ms an iteration
    at most over 1000)."""
    common = ["--target", bundle, *extra, "--backend", "cuda", "--chains", chains, "--warmup", "0", "--adapt", "none",
              "--steps", "10", "--step-size", "0.1", "--output-chains", "16", "--quiet", "--timing", "--seed", "1"]
    walls, phase = {}, {}
    for draws in (50, 1050):
        walls[draws], _, err = dsampler_wall(binary, common + ["--draws", str(draws), "--out", f"/tmp/bench_jax_{draws}.h5"])
        phase[draws] = _sampling_wall_ms(err)
    emit(what="dsampler-iter", bundle=bundle, chains=int(chains),
         ms_per_iter=round((walls[1050] - walls[50]) / 1000 * 1e3, 3),
         ms_per_iter_sampling_phase=round((phase[1050] - phase[50]) / 1000, 3), wall_50=round(walls[50], 2))


def dsampler_run(binary, bundle, chains):
    wall, out, _ = dsampler_wall(binary, ["--target", bundle, "--backend", "cuda", "--chains", chains,
                                       "--output-chains", "16", "--seed", "1", "--out", "/tmp/bench_jax_run.h5"])
    emit(what="dsampler-run", bundle=bundle, chains=int(chains), wall_s=round(wall, 2),
         summary=out.strip().splitlines()[-1][:200])


def _flat(case):
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree
    from jax_models import CASES
    fn, data, init = CASES[case]
    data = {k: jnp.asarray(v) for k, v in data().items()}
    flat, unravel = ravel_pytree({k: jnp.asarray(v) for k, v in init.items()})
    return jax, jnp, (lambda x: fn(unravel(x), **data)), flat.shape[0]


def blackjax_iter(case, chains):
    jax, jnp, logdensity, dim = _flat(case)
    import blackjax
    chains = int(chains)
    with jax.default_matmul_precision("highest"):
        hmc = blackjax.hmc(logdensity, step_size=0.1, inverse_mass_matrix=jnp.ones(dim), num_integration_steps=10)
        key = jax.random.PRNGKey(0)
        states = jax.vmap(hmc.init)(jax.random.uniform(key, (chains, dim), minval=-2, maxval=2))

        def run(states, key, n):
            def one(st, k):
                st, info = jax.vmap(hmc.step)(jax.random.split(k, chains), st)
                return st, info.acceptance_rate.mean()
            return jax.lax.scan(one, states, jax.random.split(key, n))
        runj = jax.jit(run, static_argnums=2)
        walls = {}
        for n in (20, 220):
            jax.block_until_ready(runj(states, key, n))
        for n in (20, 220):
            start = time.perf_counter()
            jax.block_until_ready(runj(states, key, n))
            walls[n] = time.perf_counter() - start
    emit(what="blackjax-iter", case=case, chains=chains, ms_per_iter=round((walls[220] - walls[20]) / 200 * 1e3, 3),
         blackjax=blackjax.__version__, jax=jax.__version__)


def blackjax_run(case, chains):
    """One attempt at CHAINS chains; exit 3 when it runs out of the GPU's memory."""
    jax, jnp, logdensity, dim = _flat(case)
    import blackjax
    import optax
    chains = int(chains)
    try:
        start = time.perf_counter()
        with jax.default_matmul_precision("highest"):
            key = jax.random.PRNGKey(0)
            x0 = jax.random.uniform(key, (chains, dim), minval=-2, maxval=2)
            warm = blackjax.chees_adaptation(logdensity, num_chains=chains)
            (last, params), _ = warm.run(key, x0, step_size=0.1, optim=optax.adam(0.025), num_steps=1000)
            kernel = blackjax.dynamic_hmc(logdensity, **params)

            def draws(states, key):
                def one(st, k):
                    st, info = jax.vmap(kernel.step)(jax.random.split(k, chains), st)
                    return st, info.acceptance_rate.mean()
                return jax.lax.scan(one, states, jax.random.split(key, 1000))
            states, accept = jax.jit(draws)(last, key)
            jax.block_until_ready(states)
        emit(what="blackjax-run", case=case, chains=chains, wall_s=round(time.perf_counter() - start, 2),
             accept=float(accept.mean()), step=float(params["step_size"]))
    except Exception as err:  # XLA's RESOURCE_EXHAUSTED
        if "RESOURCE_EXHAUSTED" not in str(err) and "out of memory" not in str(err).lower():
            raise
        emit(what="blackjax-run", case=case, chains=chains, failed="out of memory")
        sys.exit(3)


def blackjax_run_max(case, chains):
    """blackjax-run at CHAINS, halved after each attempt that runs out of memory, each attempt
    in a fresh process (a process that ran out keeps its allocator's state)."""
    chains = int(chains)
    while chains >= 1024:
        proc = subprocess.run([sys.executable, __file__, "blackjax-run", case, str(chains)], capture_output=True,
                              text=True)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                print(line, flush=True)
        if proc.returncode != 3:
            return
        chains //= 2


def numpyro_iter(case, chains):
    jax, jnp, logdensity, dim = _flat(case)
    from numpyro.infer import HMC, MCMC
    chains = int(chains)

    def run(n):
        kernel = HMC(potential_fn=lambda x: -logdensity(x), step_size=0.1, num_steps=10, adapt_step_size=False,
                     adapt_mass_matrix=False)
        mcmc = MCMC(kernel, num_warmup=0, num_samples=n, num_chains=chains, chain_method="vectorized",
                    progress_bar=False)
        start = time.perf_counter()
        mcmc.run(jax.random.PRNGKey(0), init_params=jnp.zeros((chains, dim)))
        jax.block_until_ready(mcmc.get_samples())
        return time.perf_counter() - start
    with jax.default_matmul_precision("highest"):
        run(2)
        small, big = run(2), run(22)
    emit(what="numpyro-iter", case=case, chains=chains, ms_per_iter=round((big - small) / 20 * 1e3, 3))


if __name__ == "__main__":
    verb, args = sys.argv[1], sys.argv[2:]
    {"export": export, "dsampler-iter": dsampler_iter, "dsampler-run": dsampler_run, "blackjax-iter": blackjax_iter,
     "blackjax-run": blackjax_run, "blackjax-run-max": blackjax_run_max, "numpyro-iter": numpyro_iter}[verb](*args)
