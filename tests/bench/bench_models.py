#!/usr/bin/env python3
"""ESS per gradient evaluation on the test models (tests/plugin/model_*.c, tests/py/models.py):
dsampler's HMC with default options against NumPyro's NUTS on the same density and data.

dsampler: `dsampler hmc --backend cpu` with default options (64 chains here, as the
stats.models test); gradient evaluations of sampling = the sum of sample_stats/n_steps (the
leapfrog steps of every kept draw: ChEES varies them by iteration). NumPyro: NUTS (its defaults: target acceptance 0.8, diagonal mass
matrix, max tree depth 10) on a potential written in jax.numpy on the same unconstrained
parameters, 4 chains from uniform(-2, 2) starts (as dsampler's), 1000 warmup, 1000 draws,
float64; gradient evaluations of sampling = the sum of its extra field num_steps.
Both samplers' draws go through `dsampler summary` (ArviZ's rank-normalised bulk and tail ESS
and R-hat), so the ESS is computed the same way for both. ESS per gradient = min over the
parameters of the ESS / the sampling's gradient evaluations (warmup not counted).

Usage: python bench_models.py DSAMPLER PLUGIN_DIR [WORKDIR]   (needs numpy, h5py, jax, numpyro;
       mpiexec on PATH or in $MPIEXEC; prints a markdown table)"""
import csv
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "py"))
import models  # noqa: E402

CHAINS_DSAMPLER, CHAINS_NUTS, WARMUP, DRAWS, SEED = 64, 4, 1000, 1000, 20260611
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
RANKS = int(os.environ.get("BENCH_RANKS", "2"))
ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
       "OMPI_MCA_rmaps_base_oversubscribe": "yes"}


def summarise(dsampler, path, name):
    """min bulk ESS, min tail ESS, max R-hat over the parameters, from `dsampler summary --csv`, and
    the largest |mean - reference mean| / reference sd (an ESS means little if the answer is wrong)."""
    csv_path = path + ".csv"
    subprocess.run([MPIEXEC, "-n", str(RANKS), dsampler, "summary", path, "--csv", csv_path], check=True,
                   capture_output=True, env=ENV)
    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    ref_mean, ref_sd = models.MODELS[name][2]()
    error = np.abs(np.array([float(r["mean"]) for r in rows]) - ref_mean) / ref_sd
    return (min(float(r["ess_bulk"]) for r in rows), min(float(r["ess_tail"]) for r in rows),
            max(float(r["r_hat"]) for r in rows), error.max())


def run_dsampler(dsampler, plugin_dir, name, work):
    out = os.path.join(work, f"dsampler_{name}.h5")
    if os.path.exists(out):
        os.remove(out)
    start = time.time()
    subprocess.run([MPIEXEC, "-n", str(RANKS), dsampler, "hmc", "--target",
                    f"plugin:{os.path.join(plugin_dir, name + '.so')}", "--chains", str(CHAINS_DSAMPLER),
                    "--seed", str(SEED), "--backend", "cpu", "--out", out, "--quiet"], check=True,
                   capture_output=True, env={**ENV, "OMP_NUM_THREADS": "1"})
    wall = time.time() - start
    with h5py.File(out, "r") as f:
        chains, draws, _ = f["posterior/x"].shape
        grads = int(f["sample_stats/n_steps"][...].astype(np.int64).sum())
        divergent = int(f["sample_stats/diverging"][...].sum())
    return dict(chains=chains, grads=grads, divergent=divergent, wall=wall,
                summary=summarise(dsampler, out, name))


def jax_logp(name):
    """The model's log density in jax.numpy, the same formulas as tests/py/models.py."""
    import jax.numpy as jnp
    if name == "model_hier":
        y, s = jnp.asarray(models.SCHOOL_Y), jnp.asarray(models.SCHOOL_SIGMA)

        def logp(x):
            mu, log_tau, eta = x[0], x[1], x[2:]
            tau = jnp.exp(log_tau)
            return (-0.5 * (mu / models.MU_SD) ** 2 - jnp.log1p((tau / models.TAU_SCALE) ** 2) + log_tau
                    - 0.5 * jnp.sum(eta ** 2) - 0.5 * jnp.sum(((y - mu - tau * eta) / s) ** 2))
        return logp
    if name == "model_regression":
        X, y = (jnp.asarray(a) for a in models.regression_data())

        def logp(x):
            log_sigma = x[models.REG_COLS]
            rss = jnp.sum((y - X @ x[:models.REG_COLS]) ** 2)
            return -models.REG_ROWS * log_sigma - 0.5 * rss * jnp.exp(-2.0 * log_sigma)
        return logp
    precision = jnp.asarray(np.linalg.inv(models.CORR_COV))
    return lambda x: -0.5 * x @ precision @ x


def run_nuts(dsampler, name, work):
    import jax
    jax.config.update("jax_enable_x64", True)
    from numpyro.infer import MCMC, NUTS
    dim = models.MODELS[name][0]
    logp = jax_logp(name)
    init = np.random.default_rng(SEED).uniform(-2, 2, (CHAINS_NUTS, dim))
    mcmc = MCMC(NUTS(potential_fn=lambda x: -logp(x)), num_warmup=WARMUP, num_samples=DRAWS,
                num_chains=CHAINS_NUTS, chain_method="sequential", progress_bar=False)
    start = time.time()
    mcmc.run(jax.random.PRNGKey(SEED % 2 ** 31), init_params=jax.numpy.asarray(init),
             extra_fields=("num_steps", "diverging"))
    wall = time.time() - start
    draws = np.asarray(mcmc.get_samples(group_by_chain=True))                     # [chain, draw, dim]
    extra = mcmc.get_extra_fields(group_by_chain=True)
    num_steps = np.asarray(extra["num_steps"], dtype=np.int64)
    diverging = np.asarray(extra["diverging"])
    # dsampler's output layout, so that `dsampler summary` computes the ESS of these draws too.
    out = os.path.join(work, f"nuts_{name}.h5")
    with h5py.File(out, "w") as f:
        f.create_dataset("posterior/x", data=draws.astype(np.float32))
        f.create_dataset("sample_stats/diverging", data=diverging.astype(np.int8))
    return dict(chains=CHAINS_NUTS, grads=int(num_steps.sum()), divergent=int(diverging.sum()), wall=wall,
                summary=summarise(dsampler, out, name))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    dsampler, plugin_dir = sys.argv[1], sys.argv[2]
    work = sys.argv[3] if len(sys.argv) > 3 else "/tmp/dsampler-bench-models"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    lines = ["| model | sampler | chains | grad evals (sampling) | min bulk ESS | min tail ESS | bulk ESS / grad "
             "| tail ESS / grad | max R-hat | max mean error / ref sd | divergent | wall s |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in models.MODELS:
        for sampler, result in (("dsampler HMC (defaults, float32)", run_dsampler(dsampler, plugin_dir, name, work)),
                                ("NumPyro NUTS (float64)", run_nuts(dsampler, name, work))):
            bulk, tail, rhat, error = result["summary"]
            lines.append(f"| {name} | {sampler} | {result['chains']} | {result['grads']} | {bulk:.0f} | {tail:.0f} | "
                         f"{bulk / result['grads']:.2e} | {tail / result['grads']:.2e} | {rhat:.3f} | {error:.3g} | "
                         f"{result['divergent']} | {result['wall']:.1f} |")
            print(lines[-1], file=sys.stderr, flush=True)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
