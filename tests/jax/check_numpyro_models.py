"""Checks the NumPyro versions of posteriordb's reference posteriors (tests/posteriordb/NAME/model.py,
the models `dsampler-export` turns into --target jax bundles) against the reference draws, with
NumPyro's own NUTS, independently of dsampler.

  check_numpyro_models.py [--chains 4] [--warmup 1000] [--draws 1000] [--seed 20250601]
                          [--chain-method sequential|vectorized|parallel] [--float32] [--json FILE]
                          NAME... | all

NAME/data.json is passed as `model(**data)` the way dsampler-export passes it: integer scalars as
Python ints, float scalars and arrays as jax arrays (float arrays float32, integer arrays int32). The
models compute in JAX's default float type: float64 here (jax_enable_x64) unless --float32. For every
element of NAME/reference.json's "params" (`theta[3]` is site `theta`, index 3, C order), from the
chains x draws of NUTS (target acceptance and mass matrix per posterior in SETTINGS):
  mean  |z| < 4, z = (mean - ref_mean) / sqrt(mcse_mean^2 + ref_mcse_mean^2)
  sd    0.85 < sd / ref_sd < 1.15
with sd (ddof 1), mcse_mean, ESS and R-hat computed as ArviZ 0.22's az.summary computes them (the
reference's were; Vehtari et al. 2021). R-hat, bulk ESS and divergences are reported, not judged.
Prints a table and `N passed, N failed`; exits 1 when any posterior fails. Needs jax, numpyro and
scipy."""
import argparse
import importlib.util
import json
import math
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PDB_DIR = os.path.normpath(os.path.join(HERE, "..", "posteriordb"))

# NUTS options other than NumPyro's defaults (target_accept_prob 0.8, diagonal mass matrix,
# max_tree_depth 10), per posterior.
SETTINGS = {
    "mcycle_gp-accel_gp": {"target_accept_prob": 0.99},
    "gp_pois_regr-gp_pois_regr": {"target_accept_prob": 0.95},
    "eight_schools-eight_schools_noncentered": {"target_accept_prob": 0.95},
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="+", help="posterior folders under tests/posteriordb, or all")
    p.add_argument("--chains", type=int, default=4)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--seed", type=int, default=20250601)
    p.add_argument("--chain-method", default="sequential", choices=("sequential", "vectorized", "parallel"))
    p.add_argument("--float32", action="store_true", help="leave jax_enable_x64 off (the models compute in float32)")
    p.add_argument("--json", help="write the results to this file")
    return p.parse_args()


args = parse_args()
if args.chain_method == "parallel":
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={args.chains}").strip()

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

import jax  # noqa: E402

if not args.float32:
    jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import MCMC, NUTS  # noqa: E402


# ---- ArviZ 0.22's diagnostics (arviz/stats/diagnostics.py), for one element's [chain, draw] array ----

def _autocov(x):
    n = x.shape[1]
    m = 1 << (2 * n - 1).bit_length()
    x = x - x.mean(axis=1, keepdims=True)
    f = np.fft.rfft(x, n=m, axis=1)
    return np.fft.irfft(f * np.conjugate(f), n=m, axis=1)[:, :n] / n


def _ess(x):
    x = np.asarray(x, dtype=float)
    if np.max(x) - np.min(x) < np.finfo(float).resolution:
        return float(x.size)
    n_chain, n_draw = x.shape
    acov = _autocov(x)
    chain_mean = x.mean(axis=1)
    mean_var = np.mean(acov[:, 0]) * n_draw / (n_draw - 1.0)
    var_plus = mean_var * (n_draw - 1.0) / n_draw
    if n_chain > 1:
        var_plus += np.var(chain_mean, ddof=1)
    rho = np.zeros(n_draw)
    rho_even, rho[0] = 1.0, 1.0
    rho_odd = 1.0 - (mean_var - np.mean(acov[:, 1])) / var_plus
    rho[1] = rho_odd
    t = 1
    while t < n_draw - 3 and rho_even + rho_odd > 0.0:
        rho_even = 1.0 - (mean_var - np.mean(acov[:, t + 1])) / var_plus
        rho_odd = 1.0 - (mean_var - np.mean(acov[:, t + 2])) / var_plus
        if rho_even + rho_odd >= 0:
            rho[t + 1], rho[t + 2] = rho_even, rho_odd
        t += 2
    max_t = t - 2
    if rho_even > 0:
        rho[max_t + 1] = rho_even
    t = 1
    while t <= max_t - 2:
        if rho[t + 1] + rho[t + 2] > rho[t - 1] + rho[t]:
            rho[t + 1] = rho[t + 2] = (rho[t - 1] + rho[t]) / 2.0
        t += 2
    ess = n_chain * n_draw
    tau = -1.0 + 2.0 * np.sum(rho[: max_t + 1]) + np.sum(rho[max_t + 1: max_t + 2])
    tau = max(tau, 1 / np.log10(ess))
    return float("nan") if np.isnan(rho).any() else ess / tau


def _split(x):
    half = x.shape[1] // 2
    return np.vstack((x[:, :half], x[:, -half:]))


def _z_scale(x):
    r = stats.rankdata(x, method="average", nan_policy="omit")
    return stats.norm.ppf((r - 3 / 8) / (r.size - 2 * 3 / 8 + 1)).reshape(x.shape)


def _rhat(x):
    n = x.shape[1]
    b = n * np.var(x.mean(axis=1), ddof=1)
    w = np.mean(np.var(x, axis=1, ddof=1))
    return math.sqrt((b / w + n - 1) / n)


def summarise(x):
    """mean, sd, mcse_mean, mcse_sd, ess_bulk, ess_tail, r_hat of x [chain, draw], as az.summary."""
    x = np.asarray(x, dtype=np.float64)
    c2 = (x - x.mean()) ** 2
    var = c2.sum() / (c2.size - 1)
    ess_mean = _ess(_split(x))
    evar = c2.mean()
    varvar = ((c2 ** 2).mean() - evar ** 2) / _ess(_split(c2))
    q05, q95 = np.quantile(x, [0.05, 0.95])
    ess_tail = min(_ess(_split((x <= q05).astype(float))), _ess(_split((x <= q95).astype(float))))
    z = _z_scale(_split(x))
    r_hat = max(_rhat(z), _rhat(_z_scale(_split(np.abs(x - np.median(x)))))) if x.shape[0] > 1 else float("nan")
    return {"mean": float(x.mean()), "sd": float(math.sqrt(var)), "mcse_mean": float(math.sqrt(var / ess_mean)),
            "mcse_sd": float(math.sqrt(varvar / evar / 4)), "ess_bulk": _ess(z), "ess_tail": ess_tail, "r_hat": r_hat}


# ---- models and data ----

def load_model(name):
    path = os.path.join(PDB_DIR, name, "model.py")
    spec = importlib.util.spec_from_file_location(f"pdb_model_{re.sub(r'[^0-9A-Za-z_]', '_', name)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.model


def load_data(name):
    """data.json as dsampler-export passes it: ints as Python ints, float scalars and arrays as jax
    arrays, float32 or int32."""
    with open(os.path.join(PDB_DIR, name, "data.json")) as f:
        raw = json.load(f)
    data = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            raise ValueError(f"{name}: {key} is a boolean")
        if isinstance(value, int):
            data[key] = value
        elif isinstance(value, float):
            data[key] = jnp.asarray(value, dtype=jnp.float32)
        else:
            a = np.asarray(value)
            data[key] = jnp.asarray(a, dtype=jnp.int32 if np.issubdtype(a.dtype, np.integer) else jnp.float32)
    return data


def element(samples, ref_name):
    """[chain, draw] draws of reference element `base[i,j]` from the sites' [chain, draw, ...]."""
    m = re.fullmatch(r"([^\[]+)(?:\[([0-9, ]+)\])?", ref_name)
    base, idx = m.group(1), m.group(2)
    if base not in samples:
        return None
    a = np.asarray(samples[base])
    if idx is None:
        return a if a.ndim == 2 else None
    ix = tuple(int(i) for i in idx.split(","))
    if a.ndim != 2 + len(ix):
        return None
    return a[(slice(None), slice(None)) + ix]


def check(name, opts):
    with open(os.path.join(PDB_DIR, name, "reference.json")) as f:
        ref = json.load(f)["params"]
    model, data = load_model(name), load_data(name)
    settings = SETTINGS.get(name, {})
    kernel = NUTS(model, **settings)
    mcmc = MCMC(kernel, num_warmup=opts.warmup, num_samples=opts.draws, num_chains=opts.chains,
                chain_method=opts.chain_method, progress_bar=False)
    start = time.time()
    mcmc.run(jax.random.PRNGKey(opts.seed), extra_fields=("diverging", "num_steps"), **data)
    samples = mcmc.get_samples(group_by_chain=True)
    wall = time.time() - start
    extra = mcmc.get_extra_fields(group_by_chain=True)
    divergent = int(np.asarray(extra["diverging"]).sum())
    steps = int(np.asarray(extra["num_steps"]).sum())
    worst_z, worst_ratio, max_rhat, min_bulk, min_tail = 0.0, 1.0, 0.0, math.inf, math.inf
    misses, rows = [], {}
    for var, r in ref.items():
        x = element(samples, var)
        if x is None:
            misses.append(f"{var}: no such site element")
            continue
        got = summarise(x)
        rows[var] = got
        z = (got["mean"] - r["mean"]) / math.sqrt(got["mcse_mean"] ** 2 + r["mcse_mean"] ** 2)
        ratio = got["sd"] / r["sd"]
        if not abs(z) < 4:
            misses.append(f"{var}: mean {got['mean']:.5g} vs {r['mean']:.5g}, z = {z:.2f}")
        if not 0.85 < ratio < 1.15:
            misses.append(f"{var}: sd {got['sd']:.5g} vs {r['sd']:.5g}, ratio {ratio:.3f}")
        worst_z = max(worst_z, abs(z)) if not math.isnan(z) else math.nan
        if not abs(ratio - 1) <= abs(worst_ratio - 1):
            worst_ratio = ratio
        max_rhat = max(max_rhat, got["r_hat"]) if not math.isnan(got["r_hat"]) else math.nan
        min_bulk, min_tail = min(min_bulk, got["ess_bulk"]), min(min_tail, got["ess_tail"])
    return {"posterior": name, "passed": not misses, "why": "; ".join(misses), "elements": len(ref),
            "worst_abs_z": worst_z, "worst_sd_ratio": worst_ratio, "max_r_hat": max_rhat, "min_ess_bulk": min_bulk,
            "min_ess_tail": min_tail, "divergent": divergent, "leapfrog_steps": steps, "wall_s": round(wall, 1),
            "settings": settings, "summary": rows}


def main():
    names = args.names
    if names == ["all"]:
        names = sorted(d for d in os.listdir(PDB_DIR)
                       if os.path.isfile(os.path.join(PDB_DIR, d, "model.py"))
                       and os.path.isfile(os.path.join(PDB_DIR, d, "reference.json")))
    print(f"jax {jax.__version__}, numpyro {numpyro.__version__}, {'float32' if args.float32 else 'float64'}, "
          f"{args.chains} chains x ({args.warmup} warmup + {args.draws} draws), {args.chain_method}, seed {args.seed}",
          flush=True)
    results = []
    for name in names:
        try:
            res = check(name, args)
        except Exception as e:  # a model that does not trace or run is a failure, reported
            res = {"posterior": name, "passed": False, "why": f"{type(e).__name__}: {e}"}
        results.append(res)
        if "worst_abs_z" in res:
            print(f"{name}: {'pass' if res['passed'] else 'FAIL'}  worst |z| {res['worst_abs_z']:.2f}  "
                  f"sd ratio {res['worst_sd_ratio']:.3f}  max R-hat {res['max_r_hat']:.4f}  "
                  f"min ESS bulk {res['min_ess_bulk']:.0f} tail {res['min_ess_tail']:.0f}  "
                  f"{res['divergent']} divergent  {res['wall_s']:.1f} s", flush=True)
        if not res["passed"]:
            print(f"  {res['why']}", flush=True)
    print()
    print("| posterior | result | elements | worst abs z | sd ratio | max R-hat | min bulk ESS | min tail ESS | "
          "leapfrog steps | divergent | s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if "worst_abs_z" not in r:
            print(f"| {r['posterior']} | FAIL | | | | | | | | | |")
            continue
        print(f"| {r['posterior']} | {'pass' if r['passed'] else 'FAIL'} | {r['elements']} | {r['worst_abs_z']:.2f} | "
              f"{r['worst_sd_ratio']:.3f} | {r['max_r_hat']:.4f} | {r['min_ess_bulk']:.0f} | {r['min_ess_tail']:.0f} | "
              f"{r['leapfrog_steps']} | {r['divergent']} | {r['wall_s']:.0f} |")
    passed = sum(r["passed"] for r in results)
    print(f"\n{passed} passed, {len(results) - passed} failed")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jax": jax.__version__, "numpyro": numpyro.__version__, "float32": args.float32,
                       "chains": args.chains, "warmup": args.warmup, "draws": args.draws, "seed": args.seed,
                       "chain_method": args.chain_method, "results": results}, f, indent=1)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
