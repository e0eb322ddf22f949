"""posteriordb's reference posteriors (tests/posteriordb/NAME/: the Stan model, its data and a
summary of the reference draws) sampled by `dsampler hmc` with default options.

  test_posteriordb.py [--json FILE] [--count-gradients] [--jax] NAME... | all

--jax samples NAME/model.py instead, the same posterior written as a NumPyro model, exported by
dsampler-export into a CPU bundle (`--target jax:`, the export's time standing for compile_s);
`all` then means every posterior with a model.py.

Each posterior runs on 2 ranks with the defaults only: `--chains 64 --backend cpu --seed S`
(plus `--save-warmup`, which only writes the warmup's draws and statistics, `--quiet` and
`--out`). The model is compiled first (`dsampler stan`), so the wall time is the sampling run's
alone. For every scalar element of the reference (tests/posteriordb/NAME/reference.json, computed
by tests/posteriordb/import_posteriordb.py with ArviZ from posteriordb's 10 x 1000 draws):
  mean   |z| < 4, z = (mean - ref_mean) / sqrt(mcse_mean^2 + ref_mcse_mean^2)
  sd     within 10% of the reference's (0.9 < sd / ref_sd < 1.1) where the combined MCSE of the
         sds, s = sqrt(mcse_sd^2 + ref_mcse_sd^2), makes a 10% miss a more than 3-sigma event
         (0.1 ref_sd > 3 s); otherwise |sd - ref_sd| < 4 s
  R-hat  < 1.01 (summary's rank-normalised split R-hat)
A posterior passes when every element passes all three; the test fails when any posterior fails.
A run longer than DSAMPLER_PDB_RUN_LIMIT seconds (default 600) is stopped and counted a failure.
DSAMPLER_PDB_ARGS adds options to every run (for benchmarks of other settings, e.g.
`--metric-fit fisher`; the test sets none); DSAMPLER_PDB_SEED replaces the seed S (20250601).

Reported per posterior: the worst |z|, the sd ratio farthest from 1, the largest R-hat, the
smallest bulk and tail ESS (over the reference's elements), the gradients (leapfrog steps, warmup
included: the sum over chains and iterations of warmup_sample_stats/n_steps and
sample_stats/n_steps), ESS per 1000 gradients, divergences and wall seconds. The recorded
n_steps leave out the step-size searches' probe trajectories (made before warmup and again
during it); --count-gradients (or DSAMPLER_PDB_COUNT_GRADIENTS=1) runs the same model through
tests/posteriordb/count_gradients.c, a plugin that forwards to the compiled Stan library and
counts every row it evaluates, and reports that count too (the draws are those of
`--target stan:`: the same functions are called). --json FILE writes the results.
Exit 77 (skipped) where the Stan toolchain is not installed."""
import json
import math
import os
import shutil
import shlex
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

import dstest as t

HERE = os.path.dirname(os.path.abspath(__file__))
PDB_DIR = os.path.normpath(os.path.join(HERE, "..", "posteriordb"))
SRC_SHARED = os.path.normpath(os.path.join(HERE, "..", "..", "src", "shared"))
CHAINS, RANKS = 64, 2
SEED = int(os.environ.get("DSAMPLER_PDB_SEED", "20250601"))
RUN_LIMIT = float(os.environ.get("DSAMPLER_PDB_RUN_LIMIT", "600"))
# Options added to every run (benchmarks of non-default settings; the test itself sets none).
EXTRA_ARGS = shlex.split(os.environ.get("DSAMPLER_PDB_ARGS", ""))


def all_posteriors():
    return sorted(d for d in os.listdir(PDB_DIR) if os.path.isfile(os.path.join(PDB_DIR, d, "reference.json")))


def compile_model(model):
    """The compiled library's path (built now, or found in the cache)."""
    _, out, _ = t.run(1, "stan", model, "--quiet", timeout=1800)
    return out.strip().splitlines()[-1]


def counting_plugin():
    """tests/posteriordb/count_gradients.c built into the work folder (mpicc), or None."""
    mpicc = shutil.which("mpicc")
    if not mpicc:
        return None
    lib = t.path("count_gradients.so")
    src = os.path.join(PDB_DIR, "count_gradients.c")
    if not os.path.exists(lib) or os.path.getmtime(lib) < os.path.getmtime(src):
        subprocess.run([mpicc, "-O2", "-shared", "-fPIC", "-o", lib, src, "-I", SRC_SHARED, "-ldl"], check=True)
    return lib


def run_limited(args, env=None):
    """dsampler on RANKS ranks in its own process group, stopped (the whole group) after RUN_LIMIT
    seconds. Returns (returncode or None when stopped, stdout, stderr, wall seconds)."""
    cmd = [t.MPIEXEC, t.NP_FLAG, str(RANKS), *t.PREFLAGS, t.DSAMPLER, *[str(a) for a in args]]
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, **(env or {})})
    try:
        out, err = proc.communicate(timeout=RUN_LIMIT)
        return proc.returncode, out, err, time.time() - start
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return None, out, err, time.time() - start


def summary_rows(out, name):
    csv_path = t.path(f"{name}_summary.csv")
    t.run(RANKS, "summary", out, "--csv", csv_path, timeout=600)
    header, rows = t.read_csv(csv_path)
    cols = header[1:]
    return {var: dict(zip(cols, values)) for var, values in rows.items()}


def recorded_gradients(out):
    """Sum over chains and iterations of n_steps, warmup and sampling; and the divergences."""
    with h5py.File(out, "r") as f:
        grads = 0
        for group in ("warmup_sample_stats", "sample_stats"):
            steps = f[f"{group}/n_steps"][...].astype(np.int64)
            grads += int(steps.sum())
        divergent = int(f["sample_stats/diverging"][...].sum())
        warmup_divergent = int(f["warmup_sample_stats/diverging"][...].sum())
        chains, draws = f["sample_stats/n_steps"].shape
    return grads, divergent, warmup_divergent, chains, draws


def export_bundle(name):
    """NAME/model.py (the posterior as a NumPyro model) exported with NAME/data.json into the work
    folder as a CPU bundle (dsampler-export's API); its path. NAME/export.json, where there is
    one, holds the model's own export options (its arithmetic: {"compute": "float64"})."""
    from dsampler_export.bundle import export_bundle as export
    folder = os.path.join(PDB_DIR, name)
    bundle = t.path(f"{name}.dsj")
    options = {}
    if os.path.isfile(os.path.join(folder, "export.json")):
        with open(os.path.join(folder, "export.json")) as f:
            options = json.load(f)
    export(f"{folder}/model.py:model", os.path.join(folder, "data.json"), bundle, kind="numpyro",
           platforms=["cpu"], **options)
    return bundle


def jax_posteriors():
    return [n for n in all_posteriors() if os.path.isfile(os.path.join(PDB_DIR, n, "model.py"))]


def check_posterior(name, count_lib, jax=False):
    folder = os.path.join(PDB_DIR, name)
    model, data = os.path.join(folder, "model.stan"), os.path.join(folder, "data.json")
    with open(os.path.join(folder, "reference.json")) as f:
        ref = json.load(f)["params"]
    start = time.time()
    try:
        library = export_bundle(name) if jax else compile_model(model)
    except Exception as err:  # the exporter's refusal, or a model that does not build
        t.check(False, f"{name}: {'export' if jax else 'compile'} failed: {(str(err) or repr(err)).splitlines()[0][:300]}")
        return {"posterior": name, "passed": False, "why": f"export failed: {(str(err) or repr(err)).splitlines()[0][:200]}",
                "wall_s": 0.0, "target": "jax" if jax else "stan"}
    compile_s = time.time() - start
    out = t.path(f"{name}{'_jax' if jax else ''}.h5")
    if os.path.exists(out):
        os.remove(out)
    args = ["hmc", "--data", data, "--chains", CHAINS, "--backend", "cpu", "--seed", SEED,
            "--save-warmup", "--quiet", "--out", out, *EXTRA_ARGS]
    env, counts = None, None
    if jax:
        args = ["hmc", "--target", f"jax:{library}", *args[3:]]
    elif count_lib:
        counts = t.path(f"{name}_counts.txt")
        if os.path.exists(counts):
            os.remove(counts)
        env = {"DSAMPLER_COUNT_TARGET": library, "DSAMPLER_COUNT_OUT": counts}
        args = ["hmc", "--target", f"plugin:{count_lib}", *args[1:]]
    else:
        args = ["hmc", "--target", f"stan:{model}", *args[1:]]
    rc, stdout, stderr, wall = run_limited(args, env)
    result = {"posterior": name, "compile_s": round(compile_s, 1), "wall_s": round(wall, 1), "chains": CHAINS,
              "ranks": RANKS, "seed": SEED, "target": "jax" if jax else "stan"}
    if rc is None:
        result.update(passed=False, why=f"stopped after {RUN_LIMIT:.0f} s")
        t.check(False, f"{name}: the run ends within {RUN_LIMIT:.0f} s")
        return result
    if rc != 0:
        # dsampler's own error lines; mpiexec's trailer after them says only that a rank failed.
        lines = (stderr or "").strip().splitlines()
        tail = "\n".join([l for l in lines if l.startswith("dsampler:")][-3:] or lines[-5:])
        result.update(passed=False, why=f"dsampler exited {rc}: {tail}")
        t.check(False, f"{name}: dsampler exited {rc}\n{tail}")
        return result
    rows = summary_rows(out, name)
    grads, divergent, warmup_divergent, chains, draws = recorded_gradients(out)
    worst_z, worst_ratio, worst_ratio_off, max_rhat = 0.0, 1.0, 0.0, 0.0
    min_bulk, min_tail = math.inf, math.inf
    misses = []
    for var, r in ref.items():
        got = rows.get(var)
        if got is None:
            misses.append(f"{var}: not in the output")
            continue
        z = (got["mean"] - r["mean"]) / math.sqrt(got["mcse_mean"] ** 2 + r["mcse_mean"] ** 2)
        ratio = got["sd"] / r["sd"]
        se_sd = math.sqrt(got["mcse_sd"] ** 2 + r["mcse_sd"] ** 2)
        if 0.1 * r["sd"] > 3 * se_sd:
            sd_ok, sd_bar = 0.9 < ratio < 1.1, "0.9-1.1"
        else:
            sd_ok, sd_bar = abs(got["sd"] - r["sd"]) < 4 * se_sd, f"4 mcse ({4 * se_sd / r['sd']:.3f} relative)"
        rhat = got["r_hat"]
        if not abs(z) < 4:
            misses.append(f"{var}: mean {got['mean']:.5g} vs {r['mean']:.5g}, z = {z:.2f}")
        if not sd_ok:
            misses.append(f"{var}: sd {got['sd']:.5g} vs {r['sd']:.5g}, ratio {ratio:.3f} (bar {sd_bar})")
        if not rhat < 1.01:
            misses.append(f"{var}: R-hat {rhat:.4f}")
        worst_z = max(worst_z, abs(z)) if not math.isnan(z) else math.nan
        if abs(ratio - 1) > worst_ratio_off or math.isnan(ratio):
            worst_ratio, worst_ratio_off = ratio, abs(ratio - 1)
        max_rhat = max(max_rhat, rhat) if not math.isnan(rhat) else math.nan
        min_bulk, min_tail = min(min_bulk, got["ess_bulk"]), min(min_tail, got["ess_tail"])
    result.update(passed=not misses, why="; ".join(misses), worst_abs_z=worst_z, worst_sd_ratio=worst_ratio,
                  max_r_hat=max_rhat, min_ess_bulk=min_bulk, min_ess_tail=min_tail, gradients_recorded=grads,
                  bulk_per_1000_grad=1000 * min_bulk / grads, tail_per_1000_grad=1000 * min_tail / grads,
                  bulk_per_s=min_bulk / wall, tail_per_s=min_tail / wall, divergent=divergent,
                  warmup_divergent=warmup_divergent, draws_per_chain=draws)
    if counts:
        with open(counts) as f:
            lines = [list(map(int, line.split())) for line in f if line.strip()]
        # Rows of either entry (HMC takes the float64 one; the starts' check the float32 one).
        counted = sum(f32 + f64 for _, f32, f64 in lines)
        result.update(gradients_counted=counted, count_ranks=len(lines),
                      bulk_per_1000_grad_counted=1000 * min_bulk / counted,
                      tail_per_1000_grad_counted=1000 * min_tail / counted)
    for m in misses:
        t.check(False, f"{name}: {m}")
    t.check(not misses, f"{name}: worst |z| {worst_z:.2f}, sd ratio {worst_ratio:.3f}, max R-hat {max_rhat:.4f}, "
                        f"min ESS bulk {min_bulk:.0f} tail {min_tail:.0f}, {grads} gradients recorded"
                        + (f" ({result['gradients_counted']} counted)" if counts else "")
                        + f", {result['bulk_per_1000_grad']:.3f} bulk ESS / 1000 gradients, {divergent} divergent, "
                          f"{wall:.1f} s (compile {compile_s:.1f} s)")
    return result


def table(results):
    lines = ["| posterior | result | worst abs z | sd ratio | max R-hat | min bulk ESS | min tail ESS | gradients | "
             "bulk ESS / 1000 grad | tail ESS / 1000 grad | divergent | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "min_ess_bulk" not in r:
            lines.append(f"| {r['posterior']} | FAIL ({r['why']}) | | | | | | | | | | {r['wall_s']:.0f} |")
            continue
        grads = r.get("gradients_counted", r["gradients_recorded"])
        lines.append(f"| {r['posterior']} | {'pass' if r['passed'] else 'FAIL'} | {r['worst_abs_z']:.2f} | "
                     f"{r['worst_sd_ratio']:.3f} | {r['max_r_hat']:.4f} | {r['min_ess_bulk']:.0f} | "
                     f"{r['min_ess_tail']:.0f} | {grads / 1e6:.2f}M | {1000 * r['min_ess_bulk'] / grads:.3f} | "
                     f"{1000 * r['min_ess_tail'] / grads:.3f} | {r['divergent']} | {r['wall_s']:.0f} |")
    return "\n".join(lines)


def main():
    argv = sys.argv[1:]
    json_path, count = None, os.environ.get("DSAMPLER_PDB_COUNT_GRADIENTS") == "1"
    if "--json" in argv:
        i = argv.index("--json")
        json_path = argv[i + 1]
        del argv[i:i + 2]
    if "--count-gradients" in argv:
        argv.remove("--count-gradients")
        count = True
    jax = "--jax" in argv
    if jax:
        argv.remove("--jax")
    known = jax_posteriors() if jax else all_posteriors()
    names = known if argv in ([], ["all"]) else argv
    for name in names:
        if name not in known:
            print(f"unknown posterior {name}; known: {' '.join(known)}")
            sys.exit(2)
    if jax:
        try:
            import dsampler_export  # noqa: F401
            import numpyro  # noqa: F401
        except ImportError as err:
            print(f"skipped: {err} (the JAX tests' environment, tests/jax/requirements.txt, has it)")
            sys.exit(77)
        # dsampler finds the CPU plugin in this interpreter's installation.
        if not os.environ.get("DSAMPLER_PJRT_PLUGIN"):
            os.environ.setdefault("DSAMPLER_PYTHON", sys.executable)
    else:
        t.stan_toolchain_or_skip()
    count_lib = counting_plugin() if count and not jax else None
    if count and not count_lib:
        print("note: no mpicc or a JAX target, so the gradients are the recorded n_steps only")
    results = []
    for name in names:
        results.append(check_posterior(name, count_lib, jax))
        if json_path:
            with open(json_path, "w") as f:
                json.dump(results, f, indent=1)
    print(table(results))
    passed = sum(r["passed"] for r in results)
    print(f"posteriordb: {passed} of {len(results)} posteriors pass")
    t.finish("posteriordb")


if __name__ == "__main__":
    main()
