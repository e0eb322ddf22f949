"""JAX bundles as targets (--target jax:BUNDLE, exported by src/export's dsampler_export, run
through a PJRT CPU plugin), end to end. Run as `test_jax_target.py PART`, one CTest test per part:
  export     the CLI (python -m dsampler_export) writes a bundle whose manifest names the model's
             sites, coordinates, data and programs; a model with a discrete latent site is
             refused with exit 2 and one line "dsampler-export: ..."
  density    through dsampler's own loader (tests/unit/jax_eval.c, env DSAMPLER_JAX_EVAL) on 1
             and 2 ranks, at 101 random unconstrained rows (not a multiple of the block 64): log p,
             gradient and constrained values of a NumPyro eight-schools (non-centred) model and of
             a plain JAX log density with data, against float64 closed forms in numpy
  names      `dsampler hmc` on 2 ranks: the posterior group holds exactly the model's sites with
             [chain, draw, ...] shapes, tau = exp(x_tau) (the coordinate from the manifest),
             theta = mu + tau theta_tilde, lp the closed form at the draws; ArviZ opens it
  invariance HMC with default options on 1, 2 and 3 ranks: outputs bitwise equal (h5_same.py)
  restart    a run stopped by SIGTERM after its first checkpoint and resumed equals the
             uninterrupted run bit for bit (2 ranks)
  svgd       SVGD on a bundle of -0.5 sum((x/s)^2) against the built-in gaussian with scale=s,
             same seed, start and iterations: equal to float32 rounding
  errors     bad input is refused on 2 ranks with one error line naming it, a non-zero exit on
             every rank, within 60 s, an existing --out left byte for byte: --dim other than the
             bundle's, a changed block, a missing plugin, a plugin of PJRT API major version 1 and
             one without GetPjrtApi (built here with cc), a truncated data file, a data input
             whose manifest dtype says int32, a log density that is NaN everywhere, a truncated
             program, a truncated manifest, --data with a bundle, a bundle that does not exist
The models live in this file (written to the work folder as jax_models.py). Needs jax, numpyro and
a PJRT CPU plugin in this Python (tests/jax/requirements.txt); exits 77 (skipped) without them.
The plugin: DSAMPLER_PJRT_PLUGIN when set, else dsampler asks this interpreter (DSAMPLER_PYTHON)."""
import glob
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

if __name__ == "__main__" and sys.argv[1:] == ["gpu"]:
    # The GPU part runs under the system python3, which may lack what the rest of this file needs.
    _missing = [m for m in ("numpy", "h5py", "jax", "numpyro") if importlib.util.find_spec(m) is None]
    if _missing:
        print(f"skipped: {sys.executable} lacks {', '.join(_missing)}")
        sys.exit(77)

import numpy as np

import dstest as t

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
EXPORT_SRC = os.path.join(ROOT, "src", "export")
H5_SAME = os.path.join(ROOT, "tests", "tools", "h5_same.py")
PJRT_HEADER_DIR = os.path.join(ROOT, "src", "targets", "xla")
JAX_EVAL = os.environ.get("DSAMPLER_JAX_EVAL") or os.path.join(os.path.dirname(t.DSAMPLER), "tests", "jax_eval")
ERROR_TIMEOUT = 60

# Eight schools (posteriordb's data), as float data: y and sigma are float32 program inputs.
SCHOOLS = {"J": 8, "y": [28.39, 7.94, -2.75, 6.82, -0.64, 0.63, 18.01, 12.16],
           "sigma": [14.9, 10.2, 16.3, 11.0, 9.4, 11.4, 10.4, 17.6]}
SVGD_SCALES = [0.5, 1.0, 2.0, 3.0]

MODELS_SOURCE = '''\
# Test models of tests/py/test_jax_target.py (written by it; edit them there).
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist


def eight_schools(J, sigma, y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 5.0))
    tau = numpyro.sample("tau", dist.HalfCauchy(5.0))
    with numpyro.plate("J", J):
        theta_tilde = numpyro.sample("theta_tilde", dist.Normal(0.0, 1.0))
        theta = numpyro.deterministic("theta", mu + tau * theta_tilde)
        numpyro.sample("obs", dist.Normal(theta, sigma), obs=y)


def gaussian_logdensity(params, y, scale):
    # y ~ Normal(mu + sum(beta), exp(log_sigma)), flat priors but N(0, scale) on beta
    mean = params["mu"] + jnp.sum(params["beta"])
    sigma = jnp.exp(params["log_sigma"])
    resid = (y - mean) / sigma
    return (-0.5 * jnp.sum(resid**2) - y.shape[0] * params["log_sigma"]
            - 0.5 * jnp.sum((params["beta"] / scale) ** 2))


def scaled_gaussian(params, s):
    return -0.5 * jnp.sum((params["x"] / s) ** 2)


def nan_everywhere(params, s):
    return jnp.sum(params["x"] / s) * jnp.nan


def discrete(y):
    p = numpyro.sample("p", dist.Beta(1.0, 1.0))
    c = numpyro.sample("c", dist.Categorical(jnp.array([p, 1.0 - p])),
                       infer={"enumerate": "parallel"})
    numpyro.sample("y", dist.Normal(c * 1.0, 1.0), obs=y)
'''


# --- set-up ---------------------------------------------------------------------------------------

def require_jax():
    """Exits 77 where this Python cannot export or no CPU plugin is found; else points dsampler
    at the plugin (this interpreter's, unless DSAMPLER_PJRT_PLUGIN says otherwise)."""
    missing = [m for m in ("jax", "numpyro") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"skipped: {sys.executable} lacks {', '.join(missing)} (tests/jax/requirements.txt)")
        sys.exit(77)
    if not os.environ.get("DSAMPLER_PJRT_PLUGIN"):
        if importlib.util.find_spec("lammps_jax_pjrt_cpu") is None:
            print(f"skipped: no PJRT CPU plugin (lammps-jax-pjrt-cpu) in {sys.executable}")
            sys.exit(77)
        os.environ.setdefault("DSAMPLER_PYTHON", sys.executable)
    if EXPORT_SRC not in sys.path:
        sys.path.insert(0, EXPORT_SRC)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (EXPORT_SRC, os.environ.get("PYTHONPATH")) if p)


def models_file():
    p = t.path("jax_models.py")
    with open(p, "w") as f:
        f.write(MODELS_SOURCE)
    return p


def write_json(name, value):
    p = t.path(name)
    with open(p, "w") as f:
        json.dump(value, f)
    return p


def export(name, function, data, kind=None, init=None, compute=None):
    """Exports jax_models.py:function with `data` into WORKDIR/name.dsj (CPU programs, block 64)
    through dsampler_export's API; returns (bundle path, manifest)."""
    from dsampler_export.bundle import export_bundle
    start = time.time()
    out = t.path(f"{name}.dsj")
    data_path = write_json(f"{name}.data.json", data)
    init_path = write_json(f"{name}.init.json", init) if init is not None else None
    manifest = export_bundle(f"{models_file()}:{function}", data_path, out, kind=kind, init=init_path,
                             blocks={"cpu": 64, "cuda": 65536}, platforms=["cpu"], compute=compute)
    print(f"exported {function} to {out} (dim {manifest['dim']}, {time.time() - start:.1f} s)", flush=True)
    return out, manifest


def export_schools():
    return export("schools", "eight_schools", SCHOOLS)


def gaussian_data():
    rng = np.random.default_rng(3)
    return {"y": np.round(rng.normal(1.5, 2.0, 20), 3).tolist(), "scale": [1.0, 2.0, 0.5]}


def export_gaussian():
    return export("gaussian", "gaussian_logdensity", gaussian_data(), kind="jax",
                  init={"mu": 0.0, "beta": [0.0, 0.0, 0.0], "log_sigma": 0.0})


def coordinate(manifest, name):
    c = next(c for c in manifest["coordinates"] if c["name"] == name)
    return slice(c["offset"], c["offset"] + c["size"])


# --- float64 references (numpy, closed forms) -----------------------------------------------------

def schools_reference(x):
    """NumPyro's eight schools on its unconstrained space, x = [mu, log tau, theta_tilde (8)]:
    log p (with the Jacobian of tau = exp(x_tau)), its gradient, the constrained values [mu, tau,
    theta_tilde, theta] and the scale sum |theta terms| of theta = mu + tau theta_tilde."""
    x = np.asarray(x, dtype=np.float64)
    y, sigma = np.array(SCHOOLS["y"]), np.array(SCHOOLS["sigma"])
    mu, a, tt = x[:, 0], x[:, 1], x[:, 2:10]
    tau = np.exp(a)
    theta = mu[:, None] + tau[:, None] * tt
    half_log_2pi = 0.5 * np.log(2 * np.pi)
    lp = (-0.5 * (mu / 5) ** 2 - np.log(5) - half_log_2pi                                # mu ~ N(0, 5)
          + np.log(2 / (np.pi * 5)) - np.log1p((tau / 5) ** 2) + a                       # HalfCauchy(5), Jacobian
          + np.sum(-0.5 * tt ** 2 - half_log_2pi, axis=1)                                 # theta_tilde ~ N(0, 1)
          + np.sum(-0.5 * ((y - theta) / sigma) ** 2 - np.log(sigma) - half_log_2pi, axis=1))
    r = (y - theta) / sigma ** 2
    grad = np.empty_like(x)
    grad[:, 0] = -mu / 25 + r.sum(axis=1)
    grad[:, 1] = tau * (-2 * tau / 25 / (1 + (tau / 5) ** 2) + np.sum(r * tt, axis=1)) + 1
    grad[:, 2:10] = -tt + r * tau[:, None]
    constrained = np.concatenate([mu[:, None], tau[:, None], tt, theta], axis=1)
    theta_scale = np.abs(mu)[:, None] + np.abs(tau[:, None] * tt)
    return lp, grad, constrained, theta_scale


def gaussian_reference(x, data, real=np.float32):
    """gaussian_logdensity at x = [beta (3), log_sigma, mu] (ravel_pytree order: sorted keys), the
    data as the bundle holds them (`real`)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.array(data["y"], dtype=real).astype(np.float64)
    scale = np.array(data["scale"], dtype=real).astype(np.float64)
    beta, ls, mu = x[:, 0:3], x[:, 3], x[:, 4]
    sigma = np.exp(ls)
    resid = (y[None, :] - (mu + beta.sum(axis=1))[:, None]) / sigma[:, None]
    lp = -0.5 * np.sum(resid ** 2, axis=1) - len(y) * ls - 0.5 * np.sum((beta / scale) ** 2, axis=1)
    grad = np.empty_like(x)
    common = resid.sum(axis=1) / sigma
    grad[:, 0:3] = common[:, None] - beta / scale ** 2
    grad[:, 3] = np.sum(resid ** 2, axis=1) - len(y)
    grad[:, 4] = common
    return lp, grad


# --- running dsampler -----------------------------------------------------------------------------

def launch(ranks, args, cwd=None, env=None):
    cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, t.DSAMPLER, *[str(a) for a in args]]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                            env={**os.environ, **(env or {})})


def run_in(folder, ranks, args, timeout=300):
    """dsampler args... on `ranks` ranks with `folder` (made afresh) as the working directory."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    proc = launch(ranks, args, cwd=folder)
    stdout, stderr = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"dsampler {' '.join(map(str, args))} on {ranks} ranks exited {proc.returncode}:\n{stderr}")
    return stdout, stderr


def h5_same(a, b, allowed=()):
    """h5_same.py's differences of a and b, less the lines in `allowed`: [] when the same."""
    proc = subprocess.run([sys.executable, H5_SAME, a, b], capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line not in allowed]
    if proc.returncode not in (0, 1):
        lines.append(f"h5_same.py failed: {proc.stderr.strip()[-300:]}")
    return lines


def same_datasets(a, b):
    da, db = t.datasets(a), t.datasets(b)
    return da.keys() == db.keys() and all(da[k].dtype == db[k].dtype and da[k].tobytes() == db[k].tobytes()
                                          for k in da), len(da)


# --- parts ----------------------------------------------------------------------------------------

def part_export():
    """The CLI: a bundle whose manifest matches the model; a discrete latent refused."""
    data = write_json("export_schools.json", SCHOOLS)
    out = t.path("export_schools.dsj")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "dsampler_export", f"{models_file()}:eight_schools", "--data", data, "--out", out,
           "--platforms", "cpu"]
    start = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    print(f"$ {' '.join(cmd)}  ({time.time() - start:.1f} s)\n{proc.stdout}{proc.stderr}", end="", flush=True)
    t.check(proc.returncode == 0, f"export: the CLI exits 0 ({proc.returncode})")
    t.check(f"wrote {out}" in proc.stdout, f"export: it says what it wrote ({proc.stdout.strip()!r})")
    manifest_path = os.path.join(out, "manifest.json")
    t.check(os.path.isfile(manifest_path), "export: manifest.json written")
    if not os.path.isfile(manifest_path):
        return
    with open(manifest_path) as f:
        m = json.load(f)
    t.check(m.get("format") == "dsampler-jax-bundle" and m.get("version") == 1 and m.get("kind") == "numpyro"
            and m.get("dtype") == "float32", f"export: format, version, kind, dtype ({m.get('format')}, "
            f"{m.get('version')}, {m.get('kind')}, {m.get('dtype')})")
    coords = [(c["name"], c["shape"], c["offset"], c["size"]) for c in m.get("coordinates", [])]
    t.check(coords == [("mu", [], 0, 1), ("tau", [], 1, 1), ("theta_tilde", [8], 2, 8)],
            f"export: coordinates mu, tau, theta_tilde[8] in sorted order ({coords})")
    t.check(m.get("dim") == 10, f"export: dim 10 ({m.get('dim')})")
    variables = [(v["name"], v["kind"], v["shape"]) for v in m.get("vars", [])]
    t.check(variables == [("mu", "parameter", []), ("tau", "parameter", []), ("theta_tilde", "parameter", [8]),
                          ("theta", "transformed", [8])],
            f"export: vars are the latent sites, then the deterministic theta ({variables})")
    t.check(m.get("constrained_dim") == 18, f"export: constrained_dim 18 ({m.get('constrained_dim')})")
    inputs = [(d["name"], d["dtype"], d["shape"]) for d in m.get("data", [])]
    t.check(sorted(inputs) == [("sigma", "float32", [8]), ("y", "float32", [8])] and m.get("static") == {"J": 8},
            f"export: data y, sigma float32 [8], static J = 8 ({inputs}, {m.get('static')})")
    for d in m.get("data", []):
        raw = open(os.path.join(out, d["file"]), "rb").read()
        t.check(raw == np.asarray(SCHOOLS[d["name"]], dtype="<f4").tobytes(),
                f"export: {d['file']} holds {d['name']} as little-endian float32")
    for program in ("logp_grad", "constrain"):
        entry = m.get("programs", {}).get(program, {})
        cpu = entry.get("cpu", {})
        program_file = os.path.join(out, cpu.get("file", "?"))
        t.check(set(entry) == {"cpu"} and cpu.get("block") == 64 and os.path.isfile(program_file),
                f"export: programs.{program} has the cpu program only, block 64 ({entry})")
        t.check(os.path.isfile(program_file) and cpu.get("sha256") == t.file_hash(program_file),
                f"export: programs.{program}.cpu.sha256 is {cpu.get('file')}'s")
    t.check(str(m.get("source", "")).endswith("jax_models.py:eight_schools"), f"export: source ({m.get('source')})")
    # A discrete latent site: refused, exit 2, one line.
    data = write_json("export_discrete.json", {"y": [0.3, 1.2, -0.4]})
    bad_out = t.path("export_discrete.dsj")
    shutil.rmtree(bad_out, ignore_errors=True)
    proc = subprocess.run([sys.executable, "-m", "dsampler_export", f"{models_file()}:discrete", "--data", data,
                           "--out", bad_out, "--platforms", "cpu"], capture_output=True, text=True, timeout=300)
    lines = proc.stderr.strip().splitlines()
    print(f"discrete: exit {proc.returncode}, stderr {proc.stderr.strip()!r}")
    t.check(proc.returncode == 2, f"discrete: exit 2 ({proc.returncode})")
    t.check(len(lines) == 1 and lines[0].startswith("dsampler-export: ") and "'c'" in lines[0]
            and "discrete" in lines[0], f"discrete: one line 'dsampler-export: ...' naming site 'c' ({lines})")
    t.check(not os.path.exists(bad_out), "discrete: no bundle written")


def jax_eval(bundle, x, ranks, tag):
    """Rows x through jax_eval on `ranks` ranks: (exit code, stderr, logp, grad, constrained)."""
    n, dim = x.shape
    rows, out = t.path(f"density_{tag}_rows.bin"), t.path(f"density_{tag}_{ranks}.out")
    with open(rows, "wb") as f:
        np.array([n, dim], dtype=np.int64).tofile(f)
        np.asarray(x, dtype=np.float32).tofile(f)
    if os.path.exists(out):
        os.remove(out)
    cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, JAX_EVAL, bundle, rows, out]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not os.path.exists(out):
        return proc.returncode or 1, proc.stderr, None, None, None
    with open(out, "rb") as f:
        n_out, dim_out, width = np.fromfile(f, dtype=np.int64, count=3)
        logp = np.fromfile(f, dtype=np.float32, count=n_out)
        grad = np.fromfile(f, dtype=np.float32, count=n_out * dim_out).reshape(n_out, dim_out)
        constrained = np.fromfile(f, dtype=np.float64, count=n_out * width).reshape(n_out, width)
    return proc.returncode, proc.stderr, logp, grad, constrained


def worst(got, ref, scale):
    """max |got - ref| / scale, and where."""
    ratio = np.abs(np.asarray(got, np.float64) - ref) / scale
    return float(ratio.max()), tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))


def part_density():
    """log p, gradient and constrained values through dsampler's loader against float64."""
    if not os.access(JAX_EVAL, os.X_OK):
        t.check(False, f"jax_eval not found at {JAX_EVAL} (set DSAMPLER_JAX_EVAL)")
        return
    schools, sm = export_schools()
    gaussian, gm = export_gaussian()
    rng = np.random.default_rng(20261204)
    n = 101   # one whole block of 64 and a padded one of 37
    # Rows where the density is far from flat: tau from e^-3 to e^3, theta_tilde well into the tails.
    x = np.empty((n, 10), dtype=np.float32)
    x[:, coordinate(sm, "mu")] = rng.normal(0, 5, (n, 1))
    x[:, coordinate(sm, "tau")] = rng.uniform(-3, 3, (n, 1))
    x[:, coordinate(sm, "theta_tilde")] = rng.normal(0, 1.5, (n, 8))
    t.check([c["name"] for c in sm["coordinates"]] == ["mu", "tau", "theta_tilde"] and sm["dim"] == 10,
            f"schools: coordinates mu, tau, theta_tilde ({[c['name'] for c in sm['coordinates']]})")
    lp_ref, grad_ref, out_ref, theta_scale = schools_reference(x)
    results = {}
    for ranks in (1, 2):
        rc, stderr, lp, grad, out = jax_eval(schools, x, ranks, "schools")
        results[ranks] = (lp, grad, out)
        # jax_eval's own check: every row the same bits alone, in a whole call and in uneven
        # pieces from 4 threads at once.
        t.check(rc == 0, f"schools, {ranks} rank(s): jax_eval exits 0 (rows the same whole, alone and "
                f"threaded) ({rc}: {stderr.strip()[-400:]!r})")
        if rc != 0:
            continue
        # float32 programs: log p sums ~20 terms each rounded to ~1 ulp (6e-8 relative) of at most
        # |log p| in size; 1e-5 * (1 + |ref|) leaves a margin of ~10x over what float32 rounding
        # gives (worst measured: printed), and a wrong term (a missing Jacobian x_tau, a wrong scale)
        # is off by O(1).
        err, at = worst(lp, lp_ref, 1 + np.abs(lp_ref))
        t.check(err <= 1e-5, f"schools, {ranks} rank(s): log p within 1e-5 * (1 + |ref|) of float64 "
                f"(worst {err:.2e} at row {at[0]}: {lp[at]:.7g} vs {lp_ref[at]:.7g})")
        # The gradient, entry by entry, the same bound: each entry is a sum of a few float32 terms
        # of size <= the largest |ref| term.
        err, at = worst(grad, grad_ref, 1 + np.abs(grad_ref))
        t.check(err <= 1e-5, f"schools, {ranks} rank(s): gradient within 1e-5 * (1 + |ref|) per entry "
                f"(worst {err:.2e} at {at}: {grad[at]:.7g} vs {grad_ref[at]:.7g})")
        # Constrained: [mu, tau, theta_tilde, theta]. mu and theta_tilde pass unchanged (identity
        # transforms: bitwise); tau = exp(x_tau) to a few float32 ulps (1e-6 relative); theta =
        # mu + tau theta_tilde rounded twice in float32: 1e-6 * (1 + |mu| + |tau theta_tilde|).
        t.check(out.shape == (n, 18), f"schools, {ranks} rank(s): 18 constrained values a row ({out.shape})")
        if out.shape != (n, 18):
            continue
        identity = np.r_[0, 2:10]
        t.check(np.array_equal(out[:, identity], x[:, identity].astype(np.float64)),
                f"schools, {ranks} rank(s): constrained mu and theta_tilde are x's own values")
        err, at = worst(out[:, 1], out_ref[:, 1], np.abs(out_ref[:, 1]))
        t.check(err <= 1e-6, f"schools, {ranks} rank(s): tau = exp(x_tau) within 1e-6 relative "
                f"(worst {err:.2e} at row {at[0]})")
        err, at = worst(out[:, 10:18], out_ref[:, 10:18], 1 + theta_scale)
        t.check(err <= 1e-6, f"schools, {ranks} rank(s): theta = mu + tau theta_tilde within 1e-6 * (1 + |mu| + "
                f"|tau theta_tilde|) (worst {err:.2e} at {at})")
    if all(results[r][0] is not None for r in (1, 2)):
        t.check(all(a.tobytes() == b.tobytes() for a, b in zip(results[1], results[2])),
                "schools: 1 and 2 ranks give the same bits")

    data = gaussian_data()
    coords = [(c["name"], c["offset"], c["size"]) for c in gm["coordinates"]]
    t.check(coords == [("beta", 0, 3), ("log_sigma", 3, 1), ("mu", 4, 1)],
            f"gaussian: coordinates beta[3], log_sigma, mu (ravel_pytree's sorted order) ({coords})")
    x = np.empty((n, 5), dtype=np.float32)
    x[:, 0:3] = rng.normal(0, 1.5, (n, 3))
    x[:, 3] = rng.uniform(-1.5, 1.5, n)
    x[:, 4] = rng.normal(1.5, 2.0, n)
    lp_ref, grad_ref = gaussian_reference(x, data)
    results = {}
    for ranks in (1, 2):
        rc, stderr, lp, grad, out = jax_eval(gaussian, x, ranks, "gaussian")
        results[ranks] = (lp, grad, out)
        t.check(rc == 0, f"gaussian, {ranks} rank(s): jax_eval exits 0 ({rc}: {stderr.strip()[-400:]!r})")
        if rc != 0:
            continue
        # log p = -0.5 sum of 20 squared residuals (up to ~1e3 at sigma = e^-1.5) - 20 log sigma - ...:
        # float32 sums of 20 terms, relative error ~20 ulp at most; 1e-5 * (1 + |ref|) as above.
        err, at = worst(lp, lp_ref, 1 + np.abs(lp_ref))
        t.check(err <= 1e-5, f"gaussian, {ranks} rank(s): log p within 1e-5 * (1 + |ref|) "
                f"(worst {err:.2e} at row {at[0]}: {lp[at]:.7g} vs {lp_ref[at]:.7g})")
        # Gradient entries are sums of 20 residual terms, d/dlog_sigma = sum resid^2 - 20 the
        # largest (up to ~1e3 before the cancellation): float32 leaves ~1e-6 * (1 + |ref|) there
        # (the worst measured, 1.4e-6, is printed); 1e-5 keeps a margin of ~7x, and a wrong term
        # (a missing 20 log sigma, a wrong scale on beta) is off by O(1).
        err, at = worst(grad, grad_ref, 1 + np.abs(grad_ref))
        t.check(err <= 1e-5, f"gaussian, {ranks} rank(s): gradient within 1e-5 * (1 + |ref|) per entry "
                f"(worst {err:.2e} at {at}: {grad[at]:.7g} vs {grad_ref[at]:.7g})")
        # A plain JAX density's variables are its coordinates: constrain hands x back bitwise.
        t.check(out.shape == (n, 5) and np.array_equal(out, x.astype(np.float64)),
                f"gaussian, {ranks} rank(s): constrained values are x itself ({out.shape})")
    if all(results[r][0] is not None for r in (1, 2)):
        t.check(all(a.tobytes() == b.tobytes() for a, b in zip(results[1], results[2])),
                "gaussian: 1 and 2 ranks give the same bits")

    # Computed in float64 (the data kept in float64) behind the float32 rows: what is left is the
    # outputs' rounding to float32, 2^-24 (6e-8) relative at most, where float32 arithmetic left
    # 1.4e-6 above.
    gaussian64, gm64 = export("gaussian64", "gaussian_logdensity", data, kind="jax",
                              init={"mu": 0.0, "beta": [0.0, 0.0, 0.0], "log_sigma": 0.0}, compute="float64")
    t.check(gm64.get("compute") == "float64" and [d["dtype"] for d in gm64["data"]] == ["float64", "float64"],
            f"gaussian, float64: the manifest says so, the data in float64 ({gm64.get('compute')}, {gm64['data']})")
    lp_ref, grad_ref = gaussian_reference(x, data, np.float64)
    rc, stderr, lp, grad, out = jax_eval(gaussian64, x, 2, "gaussian64")
    t.check(rc == 0, f"gaussian, float64, 2 ranks: jax_eval exits 0 ({rc}: {stderr.strip()[-400:]!r})")
    if rc == 0:
        err_lp, _ = worst(lp, lp_ref, 1 + np.abs(lp_ref))
        err_grad, _ = worst(grad, grad_ref, 1 + np.abs(grad_ref))
        t.check(err_lp <= 1e-7 and err_grad <= 1e-7, f"gaussian, float64: log p and gradient within 1e-7 * (1 + |ref|) "
                f"(worst {err_lp:.2e}, {err_grad:.2e})")


def part_names():
    """The output names the model's sites; tau and theta are their formulas of the draws."""
    import arviz as az
    schools, manifest = export_schools()
    out = t.path("names.h5")
    chains, draws = 8, 200
    start = time.time()
    _, _, stderr = t.run(2, "hmc", "--target", f"jax:{schools}", "--chains", chains, "--warmup", 200, "--draws", draws,
                         "--seed", 4, "--out", out, "--quiet", "--backend", "cpu")
    print(f"hmc on 2 ranks: {time.time() - start:.1f} s; stderr {stderr.strip()!r}")
    d = t.datasets(out)
    post = {k.split("/", 1)[1]: v for k, v in d.items() if k.startswith("posterior/")}
    coords = {k for k in post if k in ("chain", "draw") or k.endswith("_dim_0") or k.endswith("_dim_1")}
    variables = set(post) - coords
    t.check(variables == {"mu", "tau", "theta_tilde", "theta"},
            f"posterior holds exactly mu, tau, theta_tilde, theta ({sorted(variables)}; coordinates {sorted(coords)})")
    shapes = {k: post[k].shape for k in variables}
    want = {"mu": (chains, draws), "tau": (chains, draws), "theta_tilde": (chains, draws, 8),
            "theta": (chains, draws, 8)}
    t.check(shapes == want, f"posterior shapes [chain, draw, ...] ({shapes})")
    x = d.get("unconstrained_posterior/x")
    t.check(x is not None and x.shape == (chains, draws, manifest["dim"]),
            f"unconstrained_posterior/x is [chain, draw, {manifest['dim']}] ({None if x is None else x.shape})")
    if x is None or shapes != want:
        return
    x64 = x.astype(np.float64)
    tau_x = x64[..., coordinate(manifest, "tau")][..., 0]
    mu_x = x64[..., coordinate(manifest, "mu")][..., 0]
    tt_x = x64[..., coordinate(manifest, "theta_tilde")]
    t.check(np.array_equal(post["mu"], mu_x) and np.array_equal(post["theta_tilde"], tt_x),
            "posterior mu and theta_tilde are their unconstrained coordinates bitwise (identity transforms)")
    # tau = exp(x_tau) by the float32 program: within a few ulps, 1e-6 relative.
    err = float(np.max(np.abs(post["tau"] - np.exp(tau_x)) / np.exp(tau_x)))
    t.check(err <= 1e-6, f"posterior tau = exp(x[..., {coordinate(manifest, 'tau').start}]) within 1e-6 relative "
            f"(worst {err:.2e})")
    t.check(np.array_equal(post["tau"], post["tau"].astype(np.float32).astype(np.float64)),
            "posterior tau holds float32 values (the program's)")
    # theta = mu + tau theta_tilde from the written values, rounded twice in float32.
    scale = 1 + np.abs(post["mu"])[..., None] + np.abs(post["tau"][..., None] * post["theta_tilde"])
    err = float(np.max(np.abs(post["theta"] - (post["mu"][..., None] + post["tau"][..., None] * post["theta_tilde"]))
                       / scale))
    t.check(err <= 1e-6, f"posterior theta = mu + tau theta_tilde within 1e-6 * (1 + |mu| + |tau theta_tilde|) "
            f"(worst {err:.2e})")
    # sample_stats/lp is the log density (float32) at the draws: the closed form, as in density.
    lp = d.get("sample_stats/lp")
    lp_ref = schools_reference(x.reshape(-1, manifest["dim"]))[0].reshape(chains, draws)
    err = float(np.max(np.abs(lp - lp_ref) / (1 + np.abs(lp_ref)))) if lp is not None else np.inf
    t.check(err <= 1e-5, f"sample_stats/lp is log p at the draws within 1e-5 * (1 + |ref|) (worst {err:.2e})")
    t.check(float(np.std(post["mu"])) > 0.5 and 0 < float(np.median(post["tau"])) < 30,
            f"the draws moved (sd mu {np.std(post['mu']):.2f}, median tau {np.median(post['tau']):.2f})")
    t.check(str(t.attr(out, "config_target")) == f"jax:{schools}", f"config_target ({t.attr(out, 'config_target')})")

    idata = az.from_netcdf(out, engine="h5netcdf")
    t.check(set(idata.posterior.data_vars) == {"mu", "tau", "theta_tilde", "theta"},
            f"arviz: posterior variables {sorted(idata.posterior.data_vars)}")
    sizes = dict(idata.posterior["theta"].sizes)
    t.check(sizes == {"chain": chains, "draw": draws, "theta_dim_0": 8}, f"arviz: theta sizes {sizes}")
    t.check(np.array_equal(idata.posterior["tau"].values, post["tau"]), "arviz: tau's values are h5py's")
    summary = az.summary(idata, var_names=["mu", "tau", "theta"])
    t.check(summary.shape[0] == 10 and np.all(np.isfinite(summary["r_hat"])), f"arviz: az.summary has 10 rows "
            f"({summary.shape[0]})")


def part_invariance():
    """HMC with default options: the same bits on 1, 2 and 3 ranks."""
    schools, _ = export_schools()
    args = ["hmc", "--target", f"jax:{schools}", "--chains", 6, "--warmup", 150, "--draws", 100, "--out", "run.h5",
            "--quiet", "--backend", "cpu"]
    outputs = {}
    for ranks in (1, 2, 3):
        folder = t.path(f"invariance_{ranks}")
        start = time.time()
        run_in(folder, ranks, args)
        print(f"{ranks} rank(s): {time.time() - start:.1f} s", flush=True)
        outputs[ranks] = os.path.join(folder, "run.h5")
    x = t.read(outputs[1], "unconstrained_posterior/x")
    t.check(x.shape == (6, 100, 10) and np.all(np.isfinite(x)) and np.std(x) > 0,
            f"1 rank: finite draws that move ({x.shape})")
    for ranks in (2, 3):
        diff = h5_same(outputs[1], outputs[ranks], allowed=(": attribute config_ranks differs",))
        same, count = same_datasets(outputs[1], outputs[ranks])
        t.check(not diff and same, f"{ranks} ranks bitwise equal to 1 rank ({count} datasets; h5_same.py: {diff})")


def signal_ranks(pattern, signum):
    """Sends signum to the dsampler ranks whose command line matches pattern (not to mpiexec)."""
    pids = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signum)
        except ProcessLookupError:
            pass
    return len(pids)


def part_restart():
    """Stopped by SIGTERM after the first checkpoint, resumed: the uninterrupted run's bits."""
    schools, _ = export_schools()
    name = "jax_restart_run.h5"
    args = ["hmc", "--target", f"jax:{schools}", "--chains", 8, "--warmup", 150, "--draws", 2500, "--seed", 21,
            "--checkpoint-every", 100, "--out", name, "--quiet", "--backend", "cpu"]
    full_dir, part_dir = t.path("restart_full"), t.path("restart_part")
    start = time.time()
    run_in(full_dir, 2, args)
    print(f"uninterrupted run: {time.time() - start:.1f} s", flush=True)
    shutil.rmtree(part_dir, ignore_errors=True)
    os.makedirs(part_dir)
    ckpt = os.path.join(part_dir, name[:-3] + ".ckpt")
    proc = launch(2, args, cwd=part_dir)
    deadline = time.time() + 120
    while time.time() < deadline and not glob.glob(os.path.join(ckpt, "ckpt-*.h5")) and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)
    signalled = signal_ranks(f"^{t.DSAMPLER} hmc .*--out {name}", signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    stopped_at = sorted(int(os.path.basename(p)[5:-3]) for p in glob.glob(os.path.join(ckpt, "ckpt-*.h5")))
    print(f"signalled {signalled} rank(s); exit {proc.returncode}; checkpoints {stopped_at}; "
          f"stderr {stderr.strip()[-300:]!r}")
    t.check(proc.returncode == 75, f"the stopped run exits 75 ({proc.returncode})")
    t.check(bool(stopped_at) and max(stopped_at) < 2650, f"stopped part-way (checkpoints {stopped_at} of 2650)")
    resume = launch(2, ["resume", os.path.basename(ckpt), "--quiet"], cwd=part_dir)
    _, stderr = resume.communicate(timeout=300)
    t.check(resume.returncode == 0, f"resumed on 2 ranks: exit 0 ({resume.returncode}: {stderr.strip()[-300:]!r})")
    a, b = os.path.join(full_dir, name), os.path.join(part_dir, name)
    same, count = same_datasets(a, b) if os.path.exists(b) else (False, 0)
    diff = h5_same(a, b) if os.path.exists(b) else ["no output"]
    t.check(same and not diff, f"stopped at {max(stopped_at or [0])}, resumed: bitwise the uninterrupted run "
            f"({count} datasets; h5_same.py: {diff})")


def part_svgd():
    """SVGD on a bundle of -0.5 sum((x/s)^2) against the built-in gaussian with scale=s."""
    bundle, manifest = export("scaled", "scaled_gaussian", {"s": SVGD_SCALES}, kind="jax",
                              init={"x": [0.0] * len(SVGD_SCALES)})
    dim, particles, iters = len(SVGD_SCALES), 64, 200
    rng = np.random.default_rng(8)
    init = t.write_init("svgd_init.h5", rng.normal(0, 1, (particles, dim)) * 2 + 0.5)
    common = ["svgd", "--particles", particles, "--iters", iters, "--step-size", 0.05, "--seed", 6, "--init", init,
              "--quiet", "--backend", "cpu"]
    jax_out, builtin_out = t.path("svgd_jax.h5"), t.path("svgd_builtin.h5")
    start = time.time()
    t.run(2, *common, "--target", f"jax:{bundle}", "--out", jax_out)
    print(f"svgd on the bundle: {time.time() - start:.1f} s", flush=True)
    t.run(2, *common, "--target", "gaussian", "--dim", dim, "--target-args",
          "scale=" + ":".join(str(s) for s in SVGD_SCALES), "--out", builtin_out)
    a = t.read(jax_out, "unconstrained_posterior/x")
    b = t.read(builtin_out, "posterior/x")
    t.check(a.shape == b.shape == (1, particles, dim), f"particles [1, {particles}, {dim}] ({a.shape}, {b.shape})")
    if a.shape != b.shape:
        return
    start_x = t.read(init, "x")
    moved = float(np.max(np.abs(b[0] - start_x)))
    t.check(moved > 0.1, f"the particles moved from their start (max |dx| {moved:.3f})")
    # The two differ only in the float32 rounding of the gradient -x/s^2 (XLA's (x/s)/s against
    # the built-in's own form): ~1 ulp per entry, carried through 200 steps of a flow that
    # contracts towards the target (measured: 2.4e-7 = 4e-8 * max |x|). 1e-5 * max |x| leaves
    # a margin of ~200x and is far below any real difference (a wrong scale, a gradient off by
    # 1e-4 relative, moves the particles by much more).
    diff = float(np.max(np.abs(a.astype(np.float64) - b)))
    bound = 1e-5 * float(np.max(np.abs(b)))
    t.check(diff <= bound, f"bundle and built-in particles agree: max |dx| {diff:.2e} <= 1e-5 * max |x| = {bound:.2e}")
    # Their log densities (the same function, no constant: measured 1e-6 apart, float32 sums of 4
    # terms) and the final KSD (a mean over all pairs: 1e-7 relative apart), as closely.
    lp_a, lp_b = t.read(jax_out, "sample_stats/lp"), t.read(builtin_out, "sample_stats/lp")
    err = float(np.max(np.abs(lp_a.astype(np.float64) - lp_b) / (1 + np.abs(lp_b))))
    t.check(err <= 1e-5, f"sample_stats/lp agree within 1e-5 * (1 + |lp|) (worst {err:.2e})")
    ksd_a, ksd_b = t.read(jax_out, "ksd/ksd"), t.read(builtin_out, "ksd/ksd")
    t.check(ksd_a.shape == ksd_b.shape and np.allclose(ksd_a, ksd_b, rtol=1e-5, atol=0),
            f"the final KSD agrees within 1e-5 relative ({ksd_a} vs {ksd_b})")
    # The spread follows the scales (sanity: each coordinate's sd grows with s).
    sd = a[0].std(axis=0)
    t.check(np.all(np.diff(sd) > 0), f"the particles' spread grows with s ({np.round(sd, 3)})")
    post = t.read(jax_out, "posterior/x")
    t.check(post.shape == a.shape and np.array_equal(post, a.astype(np.float64)),
            "the bundle's posterior/x (its variable) is the particles' own values")


# --- errors ---------------------------------------------------------------------------------------

def refused(name, args, needles, env=None):
    """A run that must fail: within ERROR_TIMEOUT, non-zero on every rank, one error line holding
    every needle, and an existing --out left byte for byte."""
    out = t.path(f"err_{name}.h5")
    with open(out, "wb") as f:
        f.write(f"an existing file that the failed run {name} must leave alone\n".encode())
    before = t.file_hash(out)
    start = time.time()
    try:
        rc, codes, _, stderr = t.run_every_rank(2, *args, "--out", out, "--quiet", "--backend", "cpu",
                                                timeout=ERROR_TIMEOUT, env=env, refusal=True)
    except subprocess.TimeoutExpired:
        t.check(False, f"{name}: hung (no exit within {ERROR_TIMEOUT} s)")
        return
    lines = t.error_lines(stderr)
    print(f"{name}: exit {rc} {codes} in {time.time() - start:.1f} s: {lines or stderr.strip()[-400:]!r}", flush=True)
    t.check(rc != 0 and all(c != 0 for c in codes), f"{name}: non-zero exit on every rank ({rc}, {codes})")
    named = lambda line, n: bool(n.search(line)) if isinstance(n, re.Pattern) else n in line
    t.check(len(lines) == 1 and all(named(lines[0], n) for n in needles),
            f"{name}: one error line naming {[getattr(n, 'pattern', n) for n in needles]} ({len(lines)} line(s))")
    t.check(t.file_hash(out) == before, f"{name}: the existing --out is left byte for byte")


def bundle_copy(src, name, edit=None):
    """A copy of the bundle src at WORKDIR/name.dsj, with edit(folder) applied."""
    dst = t.path(f"{name}.dsj")
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    if edit:
        edit(dst)
    return dst


def edit_manifest(change):
    def edit(folder):
        p = os.path.join(folder, "manifest.json")
        with open(p) as f:
            m = json.load(f)
        change(m)
        with open(p, "w") as f:
            json.dump(m, f, indent=2)
    return edit


def truncate(relative):
    def edit(folder):
        p = os.path.join(folder, relative)
        size = os.path.getsize(p)
        with open(p, "r+b") as f:
            f.truncate(size // 2)
    return edit


def wrong_plugins():
    """Two shared objects that are not usable PJRT plugins: one whose GetPjrtApi says API major
    version 1, one without GetPjrtApi. [] where no C compiler is found."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        print("no C compiler: the wrong-plugin cases are skipped")
        return []
    sources = {
        "plugin_v1": '#include "pjrt_c_api.h"\n'
                     'static PJRT_Api api;\n'
                     'const PJRT_Api *GetPjrtApi(void) {\n'
                     '  api.struct_size = PJRT_Api_STRUCT_SIZE;\n'
                     '  api.pjrt_api_version.struct_size = PJRT_Api_Version_STRUCT_SIZE;\n'
                     '  api.pjrt_api_version.major_version = 1;\n'
                     '  api.pjrt_api_version.minor_version = PJRT_API_MINOR;\n'
                     '  return &api;\n}\n',
        "plugin_no_entry": "int not_a_pjrt_plugin(void) { return 42; }\n",
    }
    built = []
    for name, text in sources.items():
        c, so = t.path(f"{name}.c"), t.path(f"{name}.so")
        with open(c, "w") as f:
            f.write(text)
        proc = subprocess.run([cc, "-shared", "-fPIC", "-I", PJRT_HEADER_DIR, "-o", so, c], capture_output=True,
                              text=True)
        t.check(proc.returncode == 0, f"{name}.so builds ({proc.stderr.strip()[-300:]!r})")
        built.append(so)
    return built


def part_errors():
    schools, _ = export_schools()
    nan_bundle, _ = export("nan", "nan_everywhere", {"s": [1.0, 2.0, 3.0]}, kind="jax", init={"x": [0.0, 0.0, 0.0]})
    hmc = ["hmc", "--chains", 4, "--warmup", 20, "--draws", 20]
    target = lambda b: ["--target", f"jax:{b}"]

    refused("dim", [*hmc, *target(schools), "--dim", 5], [f"jax:{schools}", "--dim", "10"])

    block = bundle_copy(schools, "err_block", edit_manifest(
        lambda m: m["programs"]["logp_grad"]["cpu"].__setitem__("block", 32)))
    refused("block", [*hmc, *target(block)], [f"jax:{block}", "logp_grad"])

    missing = t.path("no_such_plugin.so")
    refused("plugin_missing", [*hmc, *target(schools)], [f"jax:{schools}", missing],
            env={"DSAMPLER_PJRT_PLUGIN": missing})
    plugins = wrong_plugins()
    if plugins:
        v1, no_entry = plugins
        refused("plugin_version", [*hmc, *target(schools), "--target-args", f"plugin={v1}"],
                [f"jax:{schools}", v1, "1."])
        refused("plugin_no_entry", [*hmc, *target(schools)], [f"jax:{schools}", no_entry, "GetPjrtApi"],
                env={"DSAMPLER_PJRT_PLUGIN": no_entry})

    short_data = bundle_copy(schools, "err_data_size", truncate("data/y.bin"))
    refused("data_size", [*hmc, *target(short_data)], [f"jax:{short_data}", "data/y.bin"])

    int_data = bundle_copy(schools, "err_data_dtype", edit_manifest(
        lambda m: next(d for d in m["data"] if d["name"] == "y").__setitem__("dtype", "int32")))
    # The data file still holds y's float32 bytes: the run must not go on with a manifest that
    # says the program takes int32 (the CPU plugin checks a buffer's size, not its type).
    refused("data_dtype", [*hmc, *target(int_data)], [f"jax:{int_data}", re.compile(r"\by\b"), "int32"])

    refused("nan_density", [*hmc, *target(nan_bundle)], [f"jax:{nan_bundle}"])

    short_program = bundle_copy(schools, "err_program", truncate("logp_grad.cpu.mlir"))
    refused("program_truncated", [*hmc, *target(short_program)], [f"jax:{short_program}", "logp_grad.cpu.mlir"])

    short_manifest = bundle_copy(schools, "err_manifest", truncate("manifest.json"))
    refused("manifest_truncated", [*hmc, *target(short_manifest)], [f"jax:{short_manifest}", "manifest.json"])

    data = write_json("err_schools_data.json", SCHOOLS)
    refused("data_option", [*hmc, *target(schools), "--data", data], ["--data", data])

    nowhere = t.path("no_such_bundle.dsj")
    shutil.rmtree(nowhere, ignore_errors=True)
    refused("no_bundle", [*hmc, *target(nowhere)], [nowhere])


def gpu_usable():
    """(ok, why): dsampler's CUDA backend runs here, and this Python has jax's CUDA plugin."""
    if importlib.util.find_spec("jax_plugins") is None or not any(
            importlib.util.find_spec(f"jax_plugins.{m}") for m in ("xla_cuda13", "xla_cuda12")):
        return False, f"{sys.executable} has no jax CUDA plugin (jax[cuda13])"
    rc, _, stderr = t.run(1, "svgd", "--dim", 2, "--particles", 4, "--iters", 1, "--backend", "cuda", "--out",
                          t.path("gpu_probe.h5"), "--quiet", expect_ok=False, timeout=120)
    return rc == 0, (stderr.strip().splitlines() or ["no GPU"])[-1]


def schools_against_reference(out, tag, names):
    """mu, tau and theta of a run against posteriordb's reference draws: |z| < 4 with both MCSEs
    (tests/posteriordb/README.md's criterion), R-hat < 1.01."""
    with open(os.path.join(HERE, "..", "posteriordb", "eight_schools-eight_schools_noncentered",
                           "reference.json")) as f:
        ref = json.load(f)["params"]
    csv = t.path(f"{tag}_summary.csv")
    t.run(1, "summary", out, "--csv", csv)
    _, rows = t.read_csv(csv)
    header, _ = t.read_csv(csv)
    col = {name: i for i, name in enumerate(header[1:])}
    for name in names:
        got, r = rows.get(name), ref[name]
        if got is None:
            t.check(False, f"{tag}: {name} in the summary")
            continue
        mean, mcse, rhat = got[col["mean"]], got[col["mcse_mean"]], got[col["r_hat"]]
        z = (mean - r["mean"]) / np.sqrt(mcse ** 2 + r["mcse_mean"] ** 2)
        t.check(abs(z) < 4 and rhat < 1.01, f"{tag}: {name} mean {mean:.4g} vs {r['mean']:.4g} (|z| {abs(z):.2f} < 4), "
                                            f"R-hat {rhat:.4f} < 1.01")


def part_gpu():
    """The CUDA plugin on the GPU: eight schools with the defaults (the trajectory programs for a
    shared metric), per chain (one metric a chain) and with a dense metric (a gradient call a
    step) against posteriordb's reference; the same bits on 1 and 2 ranks sharing the GPU; SVGD
    on a bundle against the built-in on the GPU."""
    ok, why = gpu_usable()
    if not ok:
        print(f"skipped: {why}")
        sys.exit(77)
    from dsampler_export.bundle import export_bundle
    out = t.path("schools_gpu.dsj")
    # Blocks of 1024 chains: runs of 1500 and 2500 chains walk whole blocks and a padded one.
    # posteriordb's data (integer y), so that its reference draws apply.
    data = os.path.join(HERE, "..", "posteriordb", "eight_schools-eight_schools_noncentered", "data.json")
    export_bundle(f"{models_file()}:eight_schools", data, out,
                  kind="numpyro", blocks={"cpu": 64, "cuda": 1024}, platforms=["cuda"])
    names = ["mu", "tau"] + [f"theta[{k}]" for k in range(8)]
    base = ["hmc", "--target", f"jax:{out}", "--backend", "cuda", "--seed", 11, "--quiet"]
    # R-hat over many chains measures the draws each chain has: for chains that all sample the
    # posterior, split R-hat is about 1 + 1 / (2 ESS per half chain), so R-hat < 1.01 needs a bulk
    # ESS of about 100 a chain. Per-chain adaptation's ChEES trajectories give tau about 52 per
    # 1000 draws (the CPU on the same posterior through Stan, 1500 chains, seed 11: R-hat 1.015
    # at 1000 draws, 1.005 at 3000), the pooled defaults about 104 (1.009): each case draws
    # enough for the criterion to tell a chain that has not mixed from one that has few draws.
    for tag, extra in (("gpu_defaults", ["--chains", 2500, "--draws", 2000]),
                       ("gpu_per_chain", ["--chains", 1500, "--adapt", "per-chain", "--draws", 3000]),
                       ("gpu_dense", ["--chains", 1500, "--metric", "dense", "--draws", 2000])):
        h5 = t.path(f"{tag}.h5")
        t.run(1, *base, *extra, "--out", h5, timeout=600)
        schools_against_reference(h5, tag, names)
    one, two = t.path("gpu_np1.h5"), t.path("gpu_np2.h5")
    small = [*base, "--chains", 1500, "--warmup", 200, "--draws", 100]
    t.run(1, *small, "--out", one, timeout=600)
    t.run(2, *small, "--out", two, timeout=600)
    # The rank count and the two paths this test gave differ by design; everything else must not.
    diff = h5_same(one, two, allowed=(": attribute config_ranks differs", ": attribute config_out differs",
                                      ": attribute config_checkpoint_dir differs"))
    same, count = same_datasets(one, two)
    t.check(not diff and same, f"GPU: 1 and 2 ranks (one GPU, two clients) give the same bits ({count} datasets; {diff})")
    bundle, _ = export("scaled_gpu", "scaled_gaussian", {"s": SVGD_SCALES}, kind="jax",
                       init={"x": [0.0] * len(SVGD_SCALES)})
    from dsampler_export.bundle import export_bundle as again
    again(f"{models_file()}:scaled_gaussian", t.path("scaled_gpu.data.json"), bundle, kind="jax",
          init=t.path("scaled_gpu.init.json"), blocks={"cpu": 64, "cuda": 256}, platforms=["cuda"])
    common = ["svgd", "--particles", 300, "--iters", 100, "--step-size", 0.05, "--seed", 6, "--quiet", "--backend", "cuda"]
    a_out, b_out = t.path("svgd_gpu_jax.h5"), t.path("svgd_gpu_builtin.h5")
    t.run(1, *common, "--target", f"jax:{bundle}", "--out", a_out)
    t.run(1, *common, "--target", "gaussian", "--dim", len(SVGD_SCALES), "--target-args",
          "scale=" + ":".join(str(v) for v in SVGD_SCALES), "--out", b_out)
    a, b = t.read(a_out, "unconstrained_posterior/x"), t.read(b_out, "posterior/x")
    # The same as part svgd's bound (the gradients differ in float32 rounding only).
    diff, bound = float(np.max(np.abs(a.astype(np.float64) - b))), 1e-5 * float(np.max(np.abs(b)))
    t.check(a.shape == b.shape and diff <= bound, f"GPU SVGD: bundle and built-in agree, max |dx| {diff:.2e} <= {bound:.2e}")


PARTS = {"export": part_export, "density": part_density, "names": part_names, "invariance": part_invariance,
         "restart": part_restart, "svgd": part_svgd, "errors": part_errors, "gpu": part_gpu}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in PARTS:
        sys.exit(f"usage: test_jax_target.py {'|'.join(PARTS)}")
    part = sys.argv[1]
    if part == "gpu":
        # The GPU machine's own Python (jax with its CUDA plugin) runs this part: no CPU plugin needed.
        if importlib.util.find_spec("jax") is None or importlib.util.find_spec("numpyro") is None:
            print(f"skipped: {sys.executable} lacks jax or numpyro")
            sys.exit(77)
        os.environ.setdefault("DSAMPLER_PYTHON", sys.executable)
        sys.path.insert(0, EXPORT_SRC)
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (EXPORT_SRC, os.environ.get("PYTHONPATH")) if p)
    else:
        require_jax()
    began = time.time()
    PARTS[part]()
    print(f"jax {part}: {time.time() - began:.1f} s")
    t.finish(f"jax {part}")
