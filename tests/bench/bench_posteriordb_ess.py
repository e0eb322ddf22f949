"""ESS per gradient and per second on posteriordb posteriors (tests/posteriordb/): Stan's NUTS and
nutpie against dsampler's defaults.

  bench_posteriordb_ess.py stan [--out FILE] [NAME...]      Stan's NUTS, PyStan 3 (needs pystan)
  bench_posteriordb_ess.py nutpie [--low-rank] [--out FILE] [NAME...]
                                            nutpie (needs nutpie and arviz) on the model compiled by
                                            `dsampler stan` (DSAMPLER_BIN)
  bench_posteriordb_ess.py dsampler [--out FILE] [--from TEST.json] [NAME...]
                                            dsampler hmc, defaults, 64 chains, 2 ranks (--from: the
                                            results of an earlier test_posteriordb.py --json run)
  bench_posteriordb_ess.py table STAN.json DSAMPLER.json    the markdown table of result files (this
                                                            script's, or test_posteriordb.py --json's)

NAME defaults to the six posteriors below. Stan: PyStan 3 (`pip install pystan==3.10.0
httpstan==4.13.0`, the httpstan whose Stan dsampler's toolchain is built from), 4 chains, Stan's
defaults otherwise (NUTS, diagonal metric, 1000 warmup + 1000 draws, adapt_delta 0.8), a fixed
random_seed (20250601, or DSAMPLER_BENCH_SEED); the chains run as PyStan runs them (one process
per chain, as many at once as there are cores). The model's compile is not timed: wall seconds
are posterior.sample's. dsampler: tests/py/test_posteriordb.py --count-gradients (the same
defaults as the test: --chains 64 on 2 ranks, CPU backend), whose JSON it reads; its model is
compiled before the clock starts, too.

nutpie: `pip install nutpie` (0.16.8 measured), its defaults (NUTS with the mass matrix adapted
from draws and gradients, 400 tuning + 1000 draws, target acceptance 0.8) except 4 chains, as
Stan's, 2 at a time, seed 20250601; --low-rank adds its low-rank correction
(low_rank_modified_mass_matrix=True). Its log density and gradient are the compiled Stan model's
that dsampler samples (the library `dsampler stan MODEL` builds, called through its C entry
logp_grad_f64 from a Python function: nutpie's from_pyfunc, the same log density in float64 that
Stan's NUTS evaluates); its draws are mapped to the model's outputs by the library's constrain. The
Python call around each gradient costs nutpie time that a compiled model does not, so its per
second figures are low bounds; the gradients are counted in that function, every evaluation.

Measured for all, over the reference's elements (tests/posteriordb/NAME/reference.json): the
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
# DSAMPLER_BENCH_SEED replaces the seed of Stan's and nutpie's runs (one seed is one sample of
# their ESS: compare several where two samplers are close).
STAN_CHAINS, STAN_SEED = 4, int(os.environ.get("DSAMPLER_BENCH_SEED", "20250601"))


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


def smallest_ess(name, draws_of):
    """The smallest bulk and tail ESS (ArviZ) over NAME's reference elements, draws_of(element)
    giving [chain, draw], and the elements that have them ({"bulk": ..., "tail": ...})."""
    import arviz as az
    min_bulk = min_tail = float("inf")
    worst = {}
    for element in reference(name):
        x = draws_of(element)
        bulk = float(az.ess(x, method="bulk"))
        tail = float(az.ess(x, method="tail"))
        if bulk < min_bulk:
            worst["bulk"] = element
        if tail < min_tail:
            worst["tail"] = element
        min_bulk, min_tail = min(min_bulk, bulk), min(min_tail, tail)
    return min_bulk, min_tail, worst


def run_stan(name):
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
    min_bulk, min_tail, worst = smallest_ess(name, lambda element: draws[names.index(stan_column(element))][warmup:].T)
    return {"posterior": name, "sampler": f"Stan NUTS (PyStan {stan.__version__}, httpstan {httpstan.__version__})",
            "chains": STAN_CHAINS, "warmup": warmup, "draws": fit.num_samples, "seed": STAN_SEED,
            "min_ess_bulk": min_bulk, "min_ess_tail": min_tail, "min_bulk_element": worst.get("bulk"),
            "min_tail_element": worst.get("tail"), "gradients": gradients,
            "gradients_warmup": int(leapfrog[:warmup].sum()), "divergent": divergent, "wall_s": wall,
            "build_s": build_s}


class StanLibrary:
    """A Stan model compiled by `dsampler stan` (src/targets/stan/shim.cpp), through its C entry
    dsampler_target_create_v2 (src/shared/dsampler_target.h): log p and its gradient in float64 on
    the unconstrained scale, and the output variables of a draw."""

    def __init__(self, library, data, seed=STAN_SEED):
        import ctypes as c
        self.c = c
        logp_f64 = c.CFUNCTYPE(c.c_int, c.c_void_p, c.POINTER(c.c_double), c.c_int64, c.POINTER(c.c_double),
                               c.POINTER(c.c_double))
        constrain = c.CFUNCTYPE(c.c_int, c.c_void_p, c.POINTER(c.c_double), c.c_int64, c.POINTER(c.c_uint64),
                                c.POINTER(c.c_double))

        class Var(c.Structure):
            _fields_ = [("name", c.c_char_p), ("kind", c.c_int), ("rank", c.c_int), ("shape", c.c_int64 * 8)]

        class Target(c.Structure):
            _fields_ = [("abi_version", c.c_int), ("name", c.c_char_p), ("var_name", c.c_char_p),
                        ("dim", c.c_int64), ("self", c.c_void_p), ("logp_grad", c.c_void_p),
                        ("logp_grad_cuda", c.c_void_p), ("destroy", c.c_void_p), ("logp_grad_f64", logp_f64),
                        ("n_vars", c.c_int), ("vars", c.POINTER(Var)), ("constrained_dim", c.c_int64),
                        ("constrain", constrain), ("initial_point", c.c_void_p)]

        report = c.CFUNCTYPE(None, c.c_void_p, c.c_char_p)

        class Host(c.Structure):
            _fields_ = [("abi_version", c.c_int), ("args", c.c_char_p), ("data_path", c.c_char_p),
                        ("dim", c.c_int64), ("seed", c.c_uint64), ("comm", c.c_void_p),
                        ("report_error", report), ("context", c.c_void_p)]

        messages = []
        self._report = report(lambda context, message: messages.append(message.decode()))
        self.lib = c.CDLL(library)
        host = Host(2, b"", data.encode(), 0, seed, None, self._report, None)
        self.target = Target()
        if self.lib.dsampler_target_create_v2(c.byref(host), c.byref(self.target)) != 0:
            raise RuntimeError(f"{library}: {'; '.join(messages)}")
        t = self.target
        self.dim, self.width = t.dim, t.constrained_dim
        self.vars = [(t.vars[v].name.decode(), tuple(t.vars[v].shape[:t.vars[v].rank])) for v in range(t.n_vars)]

    def logp_grad(self, x):
        c = self.c
        x = np.ascontiguousarray(x, dtype=np.float64)
        logp, grad = c.c_double(), np.empty(self.dim)
        rc = self.target.logp_grad_f64(self.target.self, x.ctypes.data_as(c.POINTER(c.c_double)), 1, c.byref(logp),
                                       grad.ctypes.data_as(c.POINTER(c.c_double)))
        if rc != 0:
            raise RuntimeError("logp_grad_f64 failed")
        return logp.value, grad

    def outputs(self, x, key):
        c = self.c
        x = np.ascontiguousarray(x, dtype=np.float64)
        out, keys = np.empty(self.width), (c.c_uint64 * 1)(key)
        if self.target.constrain(self.target.self, x.ctypes.data_as(c.POINTER(c.c_double)), 1, keys,
                                 out.ctypes.data_as(c.POINTER(c.c_double))) != 0:
            raise RuntimeError("constrain failed")
        values, at = {}, 0
        for name, shape in self.vars:
            size = int(np.prod(shape)) if shape else 1
            values[name] = out[at:at + size].reshape(shape)
            at += size
        return values


def stan_library(name):
    """The library `dsampler stan` builds for NAME's model (or finds in its cache)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    binary = env.get("DSAMPLER_BIN", os.path.join(ROOT, "build", "dsampler"))
    out = subprocess.run([binary, "stan", os.path.join(PDB_DIR, name, "model.stan"), "--quiet"], env=env,
                         check=True, capture_output=True, text=True).stdout
    return out.strip().splitlines()[-1]


NUTPIE_CHAINS, NUTPIE_CORES = 4, 2


def element_draws(posterior, element):
    """[chain, draw] of a reference element (`beta[0]`, `Sigma[0,1]`, `sigma`) in an ArviZ posterior."""
    m = re.fullmatch(r"([^\[]+)(?:\[([0-9,]+)\])?", element)
    values = posterior[m.group(1)].values
    if m.group(2):
        values = values[(slice(None), slice(None), *[int(i) for i in m.group(2).split(",")])]
    return values


def run_nutpie(name, low_rank):
    import threading

    import nutpie
    from nutpie.compiled_pyfunc import from_pyfunc

    folder = os.path.join(PDB_DIR, name)
    model = StanLibrary(stan_library(name), os.path.join(folder, "data.json"))
    lock, count = threading.Lock(), [0]

    def make_logp_fn():
        def logp(x, **unused):
            with lock:
                count[0] += 1
            return model.logp_grad(x)
        return logp

    def make_expand_fn(seed1, seed2, chain):
        draw = [0]

        def expand(x, **unused):
            draw[0] += 1
            return model.outputs(x, (seed1 << 20) ^ (chain << 40) ^ draw[0])
        return expand

    names = [v for v, _ in model.vars]
    compiled = from_pyfunc(model.dim, make_logp_fn, make_expand_fn, [np.dtype("float64")] * len(names),
                           [shape for _, shape in model.vars], names)
    start = time.time()
    trace = nutpie.sample(compiled, chains=NUTPIE_CHAINS, cores=NUTPIE_CORES, seed=STAN_SEED, progress_bar=False,
                          save_warmup=True, low_rank_modified_mass_matrix=low_rank)
    wall = time.time() - start
    min_bulk, min_tail, worst = smallest_ess(name, lambda element: element_draws(trace.posterior, element))
    steps = trace.sample_stats.n_steps.values
    return {"posterior": name, "sampler": f"nutpie {nutpie.__version__}{' low-rank' if low_rank else ''}",
            "chains": NUTPIE_CHAINS, "warmup": int(trace.warmup_sample_stats.sizes["draw"]),
            "draws": int(trace.sample_stats.sizes["draw"]), "seed": STAN_SEED, "min_ess_bulk": min_bulk,
            "min_ess_tail": min_tail, "min_bulk_element": worst.get("bulk"), "min_tail_element": worst.get("tail"),
            "gradients": count[0], "gradients_recorded": int(steps.sum() + trace.warmup_sample_stats.n_steps.values.sum()),
            "divergent": int(trace.sample_stats.diverging.values.sum()), "wall_s": wall}


def nutpie_main(names, out, low_rank):
    import nutpie
    results = []
    for name in names:
        try:
            r = run_nutpie(name, low_rank)
        except Exception as err:  # a model nutpie cannot start, reported as a result
            r = {"posterior": name, "sampler": f"nutpie {nutpie.__version__}", "failed": str(err).splitlines()[0][:200]}
            print(f"{name}: failed: {r['failed']}", flush=True)
            results.append(r)
            continue
        print(f"{name}: bulk {r['min_ess_bulk']:.0f} tail {r['min_ess_tail']:.0f} gradients {r['gradients']} "
              f"wall {r['wall_s']:.1f} s", flush=True)
        results.append(r)
    doc = {"date": datetime.date.today().isoformat(), "machine": machine(),
           "settings": f"nutpie {nutpie.__version__}, {NUTPIE_CHAINS} chains on {NUTPIE_CORES} cores, defaults "
                       f"(400 tuning + 1000 draws, target acceptance 0.8)"
                       f"{', low_rank_modified_mass_matrix' if low_rank else ''}; seed {STAN_SEED}; the model "
                       f"dsampler compiles, called from Python",
           "results": results}
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(doc, f, indent=1)
    print(f"wrote {out}")


def stan_main(names, out):
    import httpstan
    results = []

    def write():
        doc = {"date": datetime.date.today().isoformat(), "machine": machine(),
               "stan": f"httpstan {httpstan.__version__}: Stan 2.35.0, Stan Math 4.9.0 (as shipped in that wheel)",
               "settings": f"{STAN_CHAINS} chains, NUTS defaults: 1000 warmup + 1000 draws, diag_e metric, "
                           f"adapt_delta 0.8, max_depth 10; random_seed {STAN_SEED}",
               "results": results}
        os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
        with open(out, "w") as f:
            json.dump(doc, f, indent=1)

    for name in names:
        r = run_stan(name)
        print(f"{name}: bulk {r['min_ess_bulk']:.0f} tail {r['min_ess_tail']:.0f} gradients {r['gradients']} "
              f"wall {r['wall_s']:.1f} s", flush=True)
        results.append(r)
        write()  # after each posterior, so that a long sweep cut short keeps what it measured
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
    # The first file's sampler against each other's: ratios of bulk ESS per gradient.
    print()
    for other in range(1, len(files)):
        ratios = []
        for name, rs in rows.items():
            if len(rs) > other and "failed" not in rs[0] and "failed" not in rs[other]:
                mine, theirs = (r["min_ess_bulk"] / r["gradients"] for r in (rs[0], rs[other]))
                ratios.append(mine / theirs)
        if ratios:
            print(f"bulk ESS per gradient, {os.path.basename(files[0])} / {os.path.basename(files[other])}: "
                  f"median {float(np.median(ratios)):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}, "
                  f">= 1 on {sum(x >= 1 for x in ratios)} of {len(ratios)}")


def main():
    argv = sys.argv[1:]
    if not argv or argv[0] not in ("stan", "nutpie", "dsampler", "table"):
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
    low_rank = "--low-rank" in rest
    if low_rank:
        rest.remove("--low-rank")
        if "--out" not in argv:
            out = os.path.join(RESULTS, "nutpie_low_rank_posteriordb.json")
    names = rest or SIX
    if names == ["all"]:
        names = sorted(n for n in os.listdir(PDB_DIR) if os.path.exists(os.path.join(PDB_DIR, n, "reference.json")))
    if mode == "stan":
        stan_main(names, out)
    elif mode == "nutpie":
        nutpie_main(names, out, low_rank)
    else:
        dsampler_main(names, out, from_json)


if __name__ == "__main__":
    main()
