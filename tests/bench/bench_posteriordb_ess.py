"""ESS per gradient and per second on posteriordb posteriors (tests/posteriordb/): Stan's NUTS
against dsampler's defaults.

  bench_posteriordb_ess.py stan [--out FILE] [NAME...]      Stan's NUTS, PyStan 3 (needs pystan)
  bench_posteriordb_ess.py dsampler [--out FILE] [--from TEST.json] [NAME...]
                                            dsampler hmc, defaults, 64 chains, 2 ranks (--from: the
                                            results of an earlier test_posteriordb.py --json run)
  bench_posteriordb_ess.py table STAN.json DSAMPLER.json    the markdown table of result files (this
                                                            script's, or test_posteriordb.py --json's)

NAME defaults to the six posteriors below. Stan: PyStan 3 (`pip install pystan==3.10.0
httpstan==4.13.0`, the httpstan whose Stan dsampler's toolchain is built from), 4 chains, Stan's
defaults otherwise (NUTS, diagonal metric, 1000 warmup + 1000 draws, adapt_delta 0.8), a fixed
random_seed; the chains run as PyStan runs them (one process per chain, as many at once as there
are cores). The model's compile is not timed: wall seconds are posterior.sample's. dsampler:
tests/py/test_posteriordb.py --count-gradients (the same defaults as the test: --chains 64 on 2
ranks, CPU backend), whose JSON it reads; its model is compiled before the clock starts, too.

Measured for both, over the reference's elements (tests/posteriordb/NAME/reference.json): the
smallest bulk and tail ESS (ArviZ 0.22, rank-normalised), the gradients (Stan: the sum of
n_leapfrog__ over warmup and sampling, every chain; dsampler: every row its target evaluated,
counted by tests/posteriordb/count_gradients.c, step-size search probes included) and the wall
seconds. The table gives bulk and tail ESS per 1000 gradients and per second.
Environment: DSAMPLER_BIN (default build/dsampler), MPIEXEC (default mpirun)."""
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
PDB_DIR = os.path.join(HERE, "..", "posteriordb")
RESULTS = os.path.join(HERE, "results")
SIX = ["eight_schools-eight_schools_noncentered", "kidiq-kidscore_interaction", "earnings-logearn_interaction",
       "kilpisjarvi_mod-kilpisjarvi", "gp_pois_regr-gp_pois_regr", "arK-arK"]
STAN_CHAINS, STAN_SEED = 4, 20250601


def reference(name):
    with open(os.path.join(PDB_DIR, name, "reference.json")) as f:
        return json.load(f)["params"]


def stan_column(element):
    """dsampler's 0-based `beta[0]`, `Sigma[0,1]` as PyStan's flat name `beta.1`, `Sigma.1.2`."""
    m = re.fullmatch(r"([^\[]+)\[([0-9,]+)\]", element)
    if not m:
        return element
    return m.group(1) + "".join(f".{int(i) + 1}" for i in m.group(2).split(","))


def machine():
    cpu = "x86"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()}-core {platform.machine()} VM ({cpu})"


def run_stan(name):
    import arviz as az
    import httpstan
    import stan

    folder = os.path.join(PDB_DIR, name)
    with open(os.path.join(folder, "model.stan")) as f:
        code = f.read()
    with open(os.path.join(folder, "data.json")) as f:
        data = json.load(f)
    start = time.time()
    posterior = stan.build(code, data=data, random_seed=STAN_SEED)
    build_s = time.time() - start
    start = time.time()
    fit = posterior.sample(num_chains=STAN_CHAINS, save_warmup=True)
    wall = time.time() - start
    names = list(fit.sample_and_sampler_param_names) + list(fit.constrained_param_names)
    draws = fit._draws  # [name, warmup + sampling draw, chain]
    warmup = fit.num_warmup
    leapfrog = draws[names.index("n_leapfrog__")]
    gradients = int(leapfrog.sum())
    divergent = int(draws[names.index("divergent__")][warmup:].sum())
    min_bulk = min_tail = float("inf")
    worst = {}
    for element in reference(name):
        x = draws[names.index(stan_column(element))][warmup:].T  # [chain, draw]
        bulk = float(az.ess(x, method="bulk"))
        tail = float(az.ess(x, method="tail"))
        if bulk < min_bulk:
            worst["bulk"] = element
        if tail < min_tail:
            worst["tail"] = element
        min_bulk, min_tail = min(min_bulk, bulk), min(min_tail, tail)
    return {"posterior": name, "sampler": f"Stan NUTS (PyStan {stan.__version__}, httpstan {httpstan.__version__})",
            "chains": STAN_CHAINS, "warmup": warmup, "draws": fit.num_samples, "seed": STAN_SEED,
            "min_ess_bulk": min_bulk, "min_ess_tail": min_tail, "min_bulk_element": worst.get("bulk"),
            "min_tail_element": worst.get("tail"), "gradients": gradients,
            "gradients_warmup": int(leapfrog[:warmup].sum()), "divergent": divergent, "wall_s": wall,
            "build_s": build_s}


def stan_main(names, out):
    import httpstan
    results = []
    for name in names:
        r = run_stan(name)
        print(f"{name}: bulk {r['min_ess_bulk']:.0f} tail {r['min_ess_tail']:.0f} gradients {r['gradients']} "
              f"wall {r['wall_s']:.1f} s", flush=True)
        results.append(r)
    doc = {"date": datetime.date.today().isoformat(), "machine": machine(),
           "stan": f"httpstan {httpstan.__version__}: Stan 2.35.0, Stan Math 4.9.0 (as shipped in that wheel)",
           "settings": f"{STAN_CHAINS} chains, NUTS defaults: 1000 warmup + 1000 draws, diag_e metric, "
                       f"adapt_delta 0.8, max_depth 10; random_seed {STAN_SEED}",
           "results": results}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out}")


def dsampler_main(names, out, from_json=None):
    env = dict(os.environ)
    env.setdefault("DSAMPLER_BIN", os.path.join(ROOT, "build", "dsampler"))
    env.setdefault("MPIEXEC", "mpirun")
    env.setdefault("MPIEXEC_PREFLAGS", "--oversubscribe")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("DSAMPLER_TEST_DIR", os.path.join(ROOT, "build", "bench-posteriordb"))
    env["PYTHONPATH"] = os.path.join(ROOT, "tests", "py")
    raw = from_json or out + ".test.json"
    if not from_json:
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "py", "test_posteriordb.py"), "--count-gradients",
                        "--json", raw, *names], env=env)
    with open(raw) as f:
        results = [r for r in from_test(json.load(f)) if r["posterior"] in names]
    doc = {"date": datetime.date.today().isoformat(), "machine": machine(), "results": results}
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out}")


def from_test(test_results):
    """test_posteriordb.py --json's records as this script's dsampler results."""
    results = []
    for r in test_results:
        if "min_ess_bulk" not in r:
            results.append({"posterior": r["posterior"], "sampler": "dsampler", "failed": r["why"]})
            continue
        results.append({"posterior": r["posterior"], "sampler": "dsampler hmc defaults (ChEES HMC)",
                        "chains": r["chains"], "ranks": r["ranks"], "draws": r["draws_per_chain"],
                        "min_ess_bulk": r["min_ess_bulk"], "min_ess_tail": r["min_ess_tail"],
                        "gradients": r.get("gradients_counted", r["gradients_recorded"]),
                        "gradients_recorded": r["gradients_recorded"], "divergent": r["divergent"],
                        "wall_s": r["wall_s"], "passed": r["passed"], "why": r["why"]})
    return results


def table(files):
    """Rows of the posteriors in the first file (the others' other posteriors are left out)."""
    rows, order = {}, None
    for path in files:
        with open(path) as f:
            doc = json.load(f)
        results = from_test(doc) if isinstance(doc, list) else doc["results"]
        if order is None:
            order = [r["posterior"] for r in results]
        for r in results:
            rows.setdefault(r["posterior"], []).append(r)
    rows = {name: rows[name] for name in order}
    print("| posterior | sampler | bulk ESS / 1000 grad | tail ESS / 1000 grad | bulk ESS / s | tail ESS / s |")
    print("|---|---|---|---|---|---|")
    for name, rs in rows.items():
        for r in rs:
            if "failed" in r:
                print(f"| {name} | {r['sampler']} | failed: {r['failed']} | | | |")
                continue
            g, s = r["gradients"] / 1000, r["wall_s"]
            label = r["sampler"].split(" (")[0] + (f", {r['chains']} chains")
            print(f"| {name} | {label} | {r['min_ess_bulk'] / g:.3f} | {r['min_ess_tail'] / g:.3f} | "
                  f"{r['min_ess_bulk'] / s:.1f} | {r['min_ess_tail'] / s:.1f} |")


def main():
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("stan", "dsampler", "table"):
        print(__doc__)
        sys.exit(2)
    mode, rest = argv[0], argv[1:]
    if mode == "table":
        table(rest)
        return
    out = os.path.join(RESULTS, f"{mode}_posteriordb.json")
    if "--out" in rest:
        i = rest.index("--out")
        out = rest[i + 1]
        del rest[i:i + 2]
    from_json = None
    if mode == "dsampler" and "--from" in rest:
        i = rest.index("--from")
        from_json = rest[i + 1]
        del rest[i:i + 2]
    names = rest or SIX
    if mode == "stan":
        stan_main(names, out)
    else:
        dsampler_main(names, out, from_json)


if __name__ == "__main__":
    main()
