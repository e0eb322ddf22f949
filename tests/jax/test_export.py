#!/usr/bin/env python3
# Tests of the bundle exporter (src/export, dsampler-export): the manifest against the models'
# sites, the data files, the refusals, that no custom call is left, and that the exported CPU
# programs, compiled from the bundle's bytes and run on the bundle's data files, agree with the
# original NumPyro (or JAX) log density, gradient and constrained values computed in float64.
# Plain python, no GPU: `python tests/jax/test_export.py` (needs jax and numpyro). Prints
# "N passed, N failed" and exits non-zero on a failure.

import hashlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
EXPORT_SRC = ROOT / "src" / "export"
MODELS = HERE / "models.py"
POSTERIORDB = ROOT / "tests" / "posteriordb"
sys.path.insert(0, str(EXPORT_SRC))
sys.path.insert(0, str(HERE))

# Tolerances, float32 programs against float64 references; the worst errors measured over the
# test points are printed as "max err" lines (lp 2.7e-6 for mvn_lkj, whose log density sums
# terms much larger than itself; gradients 2e-6; constrained values 1e-7). The GP's covariance
# can be badly conditioned: at 1024 random points NumPyro's own float32 evaluation (LAPACK
# Cholesky) was off by 7.5e-6 in lp and 4.9e-5 in the gradient, the exported program by 6.6e-6
# and 6.3e-5, hence the margin.
LP_RTOL = 2e-5       # |lp - ref| <= LP_RTOL * max(1, |ref|)
GRAD_RTOL = 1e-4     # max_i |g_i - ref_i| <= GRAD_RTOL * max(1, max_i |ref_i|), per row
OUT_RTOL = 1e-6      # constrained values, same form, per row
CHOL_RTOL = 2e-6     # pure-lax Cholesky / triangular solves in float32 vs numpy float64,
SOLVE_RTOL = 2e-5    #   max error over max |ref|, per matrix
EXACT_RTOL = 1e-12   # the same algorithms run in float64
F64_RTOL = 1e-7      # compute="float64": the float32 outputs' rounding of float64 results

PASSED, FAILED = [], []


def check(name, ok, detail=""):
    (PASSED if ok else FAILED).append(name)
    print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail and not ok else ""))


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def cli(*args):
    env = dict(os.environ, PYTHONPATH=str(EXPORT_SRC))
    p = subprocess.run([sys.executable, "-m", "dsampler_export", *map(str, args)],
                       capture_output=True, text=True, env=env)
    return p.returncode, p.stdout, p.stderr


def rel_err(a, ref):
    """Per row: max abs error over max(1, max |ref|)."""
    a, ref = np.atleast_2d(a), np.atleast_2d(ref)
    scale = np.maximum(1.0, np.max(np.abs(ref), axis=1))
    return np.max(np.abs(a - ref), axis=1) / scale


# ------------------------------------------------------------ float64 reference (subprocess)

def reference_data(path):
    """The JSON data as the model sees it in float64: ints static, the rest arrays."""
    import jax.numpy as jnp
    raw = json.loads(Path(path).read_text())
    return {k: v if isinstance(v, int) else jnp.asarray(np.array(v)) for k, v in raw.items()}


def reference_main(jobs_path):
    """Runs with JAX_ENABLE_X64=1: each job's log density, gradient and constrained values
    from the original model (NumPyro's own LAPACK linear algebra), in float64."""
    import jax
    import jax.numpy as jnp
    import models
    from numpyro.infer.util import constrain_fn, potential_energy
    from dsampler_export import linalg

    assert jax.config.jax_enable_x64
    for job in json.loads(Path(jobs_path).read_text()):
        res = {}
        if job["kind"] == "linalg":
            z = np.load(job["inputs"])
            res["chol"] = linalg.cholesky(jnp.asarray(z["spd"]))
            for i, flags in enumerate(job["solves"]):
                res[f"solve{i}"] = linalg.triangular_solve(
                    jnp.asarray(z[f"a{i}"]), jnp.asarray(z[f"b{i}"]), **flags)
            np.savez(job["out"], **{k: np.asarray(v) for k, v in res.items()})
            continue
        fn = getattr(models, job["name"])
        data = reference_data(job["data"])
        x = jnp.asarray(np.load(job["x"]), jnp.float64)

        def unravel(row):
            return {c["name"]: row[c["offset"]:c["offset"] + c["size"]].reshape(c["shape"])
                    for c in job["coordinates"]}

        if job["kind"] == "numpyro":
            def logp(row):
                return -potential_energy(fn, (), data, unravel(row))

            def constrain(row):
                v = constrain_fn(fn, (), data, unravel(row), return_deterministic=True)
                return jnp.concatenate([jnp.ravel(v[var["name"]]) for var in job["vars"]])
        else:
            def logp(row):
                return fn(unravel(row), **data)

            def constrain(row):
                return row
        lp, g = jax.jit(jax.vmap(jax.value_and_grad(logp)))(x)
        out = jax.jit(jax.vmap(constrain))(x)
        np.savez(job["out"], lp=np.asarray(lp), grad=np.asarray(g), out=np.asarray(out))


# ------------------------------------------------------------ running a bundle's CPU programs

class Bundle:
    def __init__(self, path):
        self.path = Path(path)
        self.m = json.loads((self.path / "manifest.json").read_text())
        self.data = []
        for d in self.m["data"]:
            raw = (self.path / d["file"]).read_bytes()
            dt = {"float32": "<f4", "float64": "<f8", "int32": "<i4"}[d["dtype"]]
            self.data.append(np.frombuffer(raw, dtype=dt).reshape(d["shape"]))

    def run(self, prog, x):
        """Compile the program file's bytes on jax's CPU client, as the C runtime would through
        PJRT, and run it on x and the data files."""
        import jax
        import jax.extend.backend as jeb
        from jax._src.lib import xla_client as xc
        entry = self.m["programs"][prog]["cpu"]
        blob = (self.path / entry["file"]).read_bytes()
        backend = jeb.get_backend("cpu")
        exe = backend.compile_and_load(blob, backend.devices()[:1], xc.CompileOptions())
        b, d = x.shape
        args = [x.astype(np.float32)]
        if prog == "logp_grad":
            args += [np.zeros(b, np.float32), np.zeros((b, d), np.float32)]
        args += list(self.data)
        dev = backend.devices()[0]
        # float64 data inputs stay float64 only where jax allows them (compute float64)
        x64 = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
        try:
            outs = exe.execute([jax.device_put(a, dev) for a in args])
        finally:
            jax.config.update("jax_enable_x64", x64)
        return [np.asarray(o) for o in outs]


def program_texts(bundle):
    """The MLIR text of every program file (the portable artifacts deserialized)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir.dialects import hlo
    ctx = mlir.make_ir_context()
    for prog, per in bundle.m["programs"].items():
        for platform, entry in per.items():
            blob = (bundle.path / entry["file"]).read_bytes()
            yield f"{prog}.{platform}", str(hlo.deserialize_portable_artifact(ctx, blob))


# ------------------------------------------------------------ the tests

def check_eight_schools(tmp):
    data = POSTERIORDB / "eight_schools-eight_schools_noncentered" / "data.json"
    out = tmp / "schools.dsj"
    rc, stdout, stderr = cli(f"{MODELS}:eight_schools", "--data", data, "--out", out)
    check("eight schools: CLI exits 0", rc == 0, stderr)
    if rc:
        return None
    b = Bundle(out)
    m = b.m
    check("manifest: format, version, kind, dtype, precision",
          (m["format"], m["version"], m["kind"], m["dtype"], m["precision"]) ==
          ("dsampler-jax-bundle", 1, "numpyro", "float32", "highest"), str(m)[:300])
    import jax
    import numpyro
    check("manifest: versions", m["jax_version"] == jax.__version__ and
          m["numpyro_version"] == numpyro.__version__ and m["exporter_version"] == "0.1.0")
    check("manifest: source", m["source"] == f"{MODELS}:eight_schools", m["source"])
    check("manifest: dim 10", m["dim"] == 10, m["dim"])
    check("manifest: coordinates (sorted sites, offsets)", m["coordinates"] == [
        {"name": "mu", "shape": [], "offset": 0, "size": 1},
        {"name": "tau", "shape": [], "offset": 1, "size": 1},
        {"name": "theta_tilde", "shape": [8], "offset": 2, "size": 8}], m["coordinates"])
    check("manifest: vars (latents, then deterministic theta)", m["vars"] == [
        {"name": "mu", "kind": "parameter", "shape": []},
        {"name": "tau", "kind": "parameter", "shape": []},
        {"name": "theta_tilde", "kind": "parameter", "shape": [8]},
        {"name": "theta", "kind": "transformed", "shape": [8]}], m["vars"])
    check("manifest: constrained_dim 18", m["constrained_dim"] == 18)
    check("manifest: static J", m["static"] == {"J": 8}, m["static"])
    raw = json.loads(data.read_text())
    check("manifest: data entries", [(d["name"], d["dtype"], d["shape"], d["file"])
                                     for d in m["data"]] ==
          [("y", "int32", [8], "data/y.bin"), ("sigma", "int32", [8], "data/sigma.bin")],
          m["data"])
    for d, arr in zip(m["data"], b.data):
        f = out / d["file"]
        check(f"data file {d['file']}: size, sha256, values",
              f.stat().st_size == 32 and sha256(f) == d["sha256"] and
              np.array_equal(arr, np.array(raw[d["name"]])))
    progs = m["programs"]
    ok = True
    for prog in ("logp_grad", "constrain"):
        for p, block in (("cpu", 64), ("cuda", 65536)):
            e = progs.get(prog, {}).get(p, {})
            ok = ok and e.get("file") == f"{prog}.{p}.mlir" and e.get("block") == block
    # every program listed (the spec's two and any later additions) has its file and hash
    ok = ok and all((out / e["file"]).is_file() and e["sha256"] == sha256(out / e["file"])
                    for per in progs.values() for e in per.values())
    check("manifest: programs (files, blocks, sha256)", ok, progs)
    texts = dict(program_texts(b))
    sig = texts["logp_grad.cuda"].split("func.func public @main", 1)[1].split("{\n", 1)[0]
    check("logp_grad signature: x, donated lp and grad bufs, data",
          sig.count("tensor<65536x10xf32>") == 3 and sig.count("tf.aliasing_output") == 2 and
          sig.count("tensor<8xi32>") == 2 and "tensor<65536xf32>" in sig, sig)
    sig = texts["constrain.cpu"].split("func.func public @main", 1)[1].split("{\n", 1)[0]
    check("constrain signature: x, data -> out[B, C]",
          "tensor<64x10xf32>" in sig and sig.count("tensor<8xi32>") == 2 and
          "tensor<64x18xf32>" in sig, sig)
    return b


def check_no_custom_calls(name, b):
    bad = [f"{k}: {t.count('custom_call')}" for k, t in program_texts(b) if "custom_call" in t]
    check(f"{name}: no custom_call in any program file", not bad, ", ".join(bad))


def check_lowering_restored():
    """Outside the exporter, jax lowers cholesky to LAPACK/cuSOLVER again (and inside, the
    programs above are free of them: so the pure lowerings are what removed them)."""
    import jax
    import jax.numpy as jnp
    from jax import export
    from dsampler_export import linalg
    spec = jax.ShapeDtypeStruct((4, 3, 3), jnp.float32)

    def f(a):
        return jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(a), a, lower=True)

    def calls(p):
        return "custom_call" in export.export(jax.jit(f), platforms=[p])(spec).mlir_module()
    before = calls("cpu"), calls("cuda")
    with linalg.pure_lowerings():
        inside = calls("cpu"), calls("cuda")
    after = calls("cpu"), calls("cuda")
    check("pure lowerings apply inside only and are restored",
          before == (True, True) and inside == (False, False) and after == (True, True),
          f"{before} {inside} {after}")


def check_trajectory():
    """The trajectory programs (the GPU's; here jitted on the CPU): written out for a small
    gradient and as a loop for a large one (unroll_steps), and both forms against leapfrog steps
    in float64 (numpy, the analytic gradient) of a Gaussian with scales s: kick p + k g (k = eps/2
    on the first step of a trajectory, eps after), drift q + eps m p, per-row eps."""
    import jax
    import jax.numpy as jnp
    from dsampler_export.trajectory import trajectory_program, unroll_steps
    d, rows = 5, 16
    s = np.linspace(0.5, 2.0, d)

    def logp(x):
        return -0.5 * jnp.sum((x / s.astype(np.float32)) ** 2)

    def wide(x):  # the same density through many more operations than UNROLL_MAX_EQUATIONS
        total = 0.0
        for i in range(d):
            for _ in range(20):
                total = total + 0.0 * jnp.sin(x[i])
        return total + logp(x)
    row = jax.ShapeDtypeStruct((d,), np.float32)
    check("trajectory: a small gradient's programs are written out", unroll_steps(logp, row, []))
    check("trajectory: a large gradient's programs stay loops", not unroll_steps(wide, row, []))
    rng = np.random.default_rng(5)
    q0 = rng.standard_normal((rows, d)).astype(np.float32)
    p0 = rng.standard_normal((rows, d)).astype(np.float32)
    eps = rng.uniform(0.05, 0.3, rows).astype(np.float32)
    inv = rng.uniform(0.5, 1.5, d).astype(np.float32)
    g0 = (-q0 / s ** 2).astype(np.float32)
    for steps, first in ((1, 1), (4, 1), (4, 0)):
        q, p, g = q0.astype(np.float64), p0.astype(np.float64), g0.astype(np.float64)
        for i in range(steps):
            k = (0.5 if i == 0 and first else 1.0) * eps[:, None].astype(np.float64)
            p = p + k * g
            q = q + eps[:, None] * inv[None, :] * p
            g = -q / s ** 2
        lp = -0.5 * np.sum((q / s) ** 2, axis=1)
        for unroll in (False, True):
            f = jax.jit(trajectory_program(logp, 0, True, steps, "aos", unroll))
            out = [np.asarray(a, np.float64) for a in f(q0, p0, g0, np.zeros(rows, np.float32), eps, inv,
                                                          np.int32(first))]
            err = max(float(np.max(np.abs(a - b) / (1e-3 + np.abs(b)))) for a, b in zip(out, (q, p, g, lp)))
            check(f"trajectory {steps} steps (first {first}, {'written out' if unroll else 'loop'}) against float64",
                  err < 2e-5, f"relative error {err:.3g}")


def check_refusals(tmp):
    schools = json.loads((POSTERIORDB / "eight_schools-eight_schools_noncentered" /
                          "data.json").read_text())
    bad_key = tmp / "bad_key.json"
    bad_key.write_text(json.dumps({**schools, "foo": [1.0, 2.0]}))
    y3 = tmp / "y3.json"
    y3.write_text(json.dumps({"y": [0.5, 1.5, -0.2]}))
    cases = [
        ("bad data key", "eight_schools", bad_key,
         "data key 'foo' is not an argument of the model"),
        ("discrete latent", "discrete", y3, "site 'c' is a discrete latent variable"),
        ("LU custom call", "with_lu", y3,
         "needs custom calls the PJRT runtime cannot run: lapack_sgetrf_ffi"),
        ("dynamic shapes", "dynamic", y3,
         "shapes or control flow depend on the values of data 'y'"),
        ("site name", "bad_name", y3, "site name 'mu[0]' is not valid"),
    ]
    for what, name, data, expect in cases:
        out = tmp / f"refused_{name}.dsj"
        rc, stdout, stderr = cli(f"{MODELS}:{name}", "--data", data, "--out", out)
        lines = stderr.strip().splitlines()
        check(f"refusal, {what}: exit 2, one line naming it",
              rc == 2 and len(lines) == 1 and lines[0].startswith("dsampler-export: ") and
              expect in lines[0] and not out.exists(), f"rc={rc} stderr={stderr!r}")


def check_warning(tmp):
    init = tmp / "a0.json"
    init.write_text(json.dumps({"a": 0.0}))
    empty = tmp / "empty.json"
    empty.write_text("{}")
    out = tmp / "improper.dsj"
    rc, stdout, stderr = cli(f"{MODELS}:improper_logdensity", "--data", empty, "--init", init,
                             "--out", out, "--platforms", "cpu")
    check("non-finite log density at the initial point: warned, exported",
          rc == 0 and "warning: the log density is not finite at the initial point" in stderr
          and (out / "manifest.json").is_file() and
          set(json.loads((out / "manifest.json").read_text())["programs"]["logp_grad"]) ==
          {"cpu"}, f"rc={rc} stderr={stderr!r}")
    # A module that enables float64 is exported computing in float64, unless --compute says not.
    module = tmp / "x64_model.py"
    module.write_text("import jax\nimport jax.numpy as jnp\njax.config.update('jax_enable_x64', True)\n\n\n"
                      "def logdensity(p, y):\n    return -0.5 * jnp.sum((p['a'] - y) ** 2)\n")
    y = tmp / "y.json"
    y.write_text(json.dumps({"y": [1.0, 2.0]}))
    for flags, want, warned in (((), "float64", False), (("--compute", "float32"), "float32", True)):
        out = tmp / f"x64_{want}.dsj"
        rc, stdout, stderr = cli(f"{module}:logdensity", "--data", y, "--init", init, "--out", out,
                                 "--platforms", "cpu", *flags)
        m = json.loads((out / "manifest.json").read_text()) if rc == 0 else {}
        check(f"module enabling jax_enable_x64, {' '.join(flags) or 'no --compute'}: computes in {want}",
              rc == 0 and m.get("compute") == want and
              [d["dtype"] for d in m["data"]] == [want] and
              ("enabled float64 (jax_enable_x64); computing in float32" in stderr) == warned,
              f"rc={rc} stderr={stderr!r}")


def check_linalg(tmp, jobs, n):
    """Pure-lax Cholesky and triangular solves against numpy.linalg in float64 (batched), for
    an n the loops unroll (n <= linalg.UNROLL_MAX_N) or not."""
    import jax.numpy as jnp
    from dsampler_export import linalg
    rng = np.random.default_rng(n)
    tag = f"n={n} ({'unrolled' if n <= linalg.UNROLL_MAX_N else 'rolled'})"
    a = rng.standard_normal((3, 4, n, n))
    spd = a @ np.swapaxes(a, -1, -2) + n * np.eye(n)
    ref = np.linalg.cholesky(spd)
    got = np.asarray(linalg.cholesky(jnp.asarray(spd, jnp.float32)))
    err = np.max(np.abs(got - ref), axis=(-2, -1)) / np.max(np.abs(ref), axis=(-2, -1))
    check(f"cholesky float32, batched 3x4, {tag} (tol {CHOL_RTOL})",
          np.all(err <= CHOL_RTOL) and np.all(np.triu(got, 1) == 0), f"max err {err.max():.2e}")
    print(f"  max err cholesky float32 {tag}: {err.max():.2e}")
    bad = spd.copy()
    bad[1, 2, n // 2, n // 2] = -1.0
    got = np.asarray(linalg.cholesky(jnp.asarray(bad, jnp.float32)))
    check(f"cholesky of a non-SPD matrix is all NaN, the others untouched, {tag}",
          np.all(np.isnan(got[1, 2])) and np.all(np.isfinite(np.delete(
              got.reshape(12, n, n), 6, axis=0))))

    inputs = {"spd": spd}
    solves, worst = [], 0.0
    eye = np.eye(n, dtype=bool)
    for left, lower, transpose_a, unit in itertools.product((True, False), repeat=4):
        i = len(solves)
        tri = ref if lower else np.swapaxes(ref, -1, -2)    # well-conditioned factors
        keep = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
        if unit:  # rescaled to a unit diagonal, so the reference system stays well conditioned
            d = np.diagonal(tri, axis1=-2, axis2=-1)
            tri = tri / (d[..., :, None] if lower else d[..., None, :])
        # what the solve must ignore: the other triangle, and a unit_diagonal's diagonal
        amat = np.where(keep, tri, 7.0) + (3.0 * eye if unit else 0.0)
        op = np.where(keep, tri, 0.0)
        op = np.where(eye, 1.0, op) if unit else op
        op = np.swapaxes(op, -1, -2) if transpose_a else op
        b = rng.standard_normal((3, 4, n, 5) if left else (3, 4, 5, n))
        # x op = b  <=>  op^T x^T = b^T
        want = np.linalg.solve(op, b) if left else np.swapaxes(
            np.linalg.solve(np.swapaxes(op, -1, -2), np.swapaxes(b, -1, -2)), -1, -2)
        flags = dict(left_side=left, lower=lower, transpose_a=transpose_a, unit_diagonal=unit)
        got = np.asarray(linalg.triangular_solve(
            jnp.asarray(amat, jnp.float32), jnp.asarray(b, jnp.float32), **flags))
        worst = max(worst, np.max(np.abs(got - want)) / np.max(np.abs(want)))
        solves.append(flags)
        inputs[f"a{i}"], inputs[f"b{i}"], inputs[f"want{i}"] = amat, b, want
    check(f"triangular_solve float32, all 16 flag combinations, batched, {tag} "
          f"(tol {SOLVE_RTOL})", worst <= SOLVE_RTOL, f"max err {worst:.2e}")
    print(f"  max err triangular_solve float32 {tag}: {worst:.2e}")
    np.savez(tmp / f"linalg{n}_in.npz", **inputs)
    jobs.append({"kind": "linalg", "inputs": str(tmp / f"linalg{n}_in.npz"), "solves": solves,
                 "out": str(tmp / f"linalg{n}_ref.npz")})

    def compare_f64():
        r = np.load(tmp / f"linalg{n}_ref.npz")
        e = np.max(np.abs(r["chol"] - ref)) / np.max(np.abs(ref))
        es = max(np.max(np.abs(r[f"solve{i}"] - inputs[f"want{i}"])) /
                 np.max(np.abs(inputs[f"want{i}"])) for i in range(len(solves)))
        check(f"cholesky and triangular_solve in float64 match numpy, {tag} "
              f"(tol {EXACT_RTOL})", e <= EXACT_RTOL and es <= EXACT_RTOL, f"{e:.2e} {es:.2e}")
    return compare_f64


def numeric_job(tmp, name, b, model_name, data, rows, tolerances=(LP_RTOL, GRAD_RTOL, OUT_RTOL)):
    """Runs the bundle's CPU programs on rows and registers a float64 reference job."""
    lp_rtol, grad_rtol, out_rtol = tolerances
    x = np.random.default_rng(len(name)).uniform(-2, 2, (b.m["programs"]["logp_grad"]["cpu"]
                                                         ["block"], b.m["dim"]))
    x = x.astype(np.float32)[:rows] if rows else x.astype(np.float32)
    lp, g = b.run("logp_grad", x)
    out, = b.run("constrain", x)
    # rows are independent: changing the other rows leaves row 0's bits alone
    x2 = x.copy()
    x2[1:] = -x2[1:]
    lp2, g2 = b.run("logp_grad", x2)
    check(f"{name}: row 0 independent of the other rows",
          lp2[0] == lp[0] and np.array_equal(g2[0], g[0]))
    np.save(tmp / f"{name}_x.npy", x.astype(np.float64))
    job = {"kind": b.m["kind"], "name": model_name, "data": str(data),
           "x": str(tmp / f"{name}_x.npy"), "coordinates": b.m["coordinates"],
           "vars": b.m["vars"], "out": str(tmp / f"{name}_ref.npz")}

    def compare():
        r = np.load(job["out"])
        e_lp = np.abs(lp - r["lp"]) / np.maximum(1.0, np.abs(r["lp"]))
        e_g, e_out = rel_err(g, r["grad"]), rel_err(out, r["out"])
        finite = np.isfinite(r["lp"])
        print(f"  {name}: max err lp {e_lp[finite].max():.2e}, grad {e_g[finite].max():.2e}, "
              f"constrained {e_out.max():.2e} ({int(finite.sum())} rows)")
        check(f"{name}: log density, gradient, constrained values vs float64 reference "
              f"(tol {lp_rtol}, {grad_rtol}, {out_rtol})",
              finite.sum() >= len(finite) // 2 and np.all(np.isfinite(lp[finite])) and
              e_lp[finite].max() <= lp_rtol and e_g[finite].max() <= grad_rtol and
              e_out.max() <= out_rtol, f"{e_lp.max():.2e} {e_g.max():.2e} {e_out.max():.2e}")
    return job, compare


def main():
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ["JAX_ENABLE_X64"] = "0"
    from dsampler_export import ExportError, export_bundle  # noqa: F401

    tmp = Path(tempfile.mkdtemp(prefix="dsampler-export-test."))
    jobs, compares = [], []

    b = check_eight_schools(tmp)
    if b:
        data = POSTERIORDB / "eight_schools-eight_schools_noncentered" / "data.json"
        check_no_custom_calls("eight schools", b)
        job, cmp = numeric_job(tmp, "eight_schools", b, "eight_schools", data, 0)
        jobs.append(job)
        compares.append(cmp)

    # MultivariateNormal (covariance and scale_tril) with LKJ, and the posteriordb GP
    rng = np.random.default_rng(1)
    k = 3
    a = rng.standard_normal((k, k))
    sigma = a @ a.T + k * np.eye(k)
    mvn_data = tmp / "mvn.json"
    mvn_data.write_text(json.dumps({
        "N": 20, "K": k, "Sigma": sigma.tolist(),
        "y": rng.multivariate_normal([1.0, -1.0, 0.5], sigma, size=20).tolist()}))
    gp_data = POSTERIORDB / "gp_pois_regr-gp_regr" / "data.json"
    init = tmp / "init.json"
    init.write_text(json.dumps({"mu": 0.5, "log_sigma": 0.1, "beta": [0.0, 0.2, -0.3]}))
    lin_data = tmp / "lin.json"
    lin_data.write_text(json.dumps({"y": rng.normal(1.0, 2.0, 30).tolist(), "scale": 2.5}))
    for name, model, data, extra in [
            ("mvn_lkj", "mvn_lkj", mvn_data, {}),
            ("gp_regr", "gp_regr", gp_data, {}),
            ("gp_regr_f64", "gp_regr", gp_data, {"compute": "float64"}),
            ("jax_fn", "gaussian_logdensity", lin_data, {"init": str(init)})]:
        out = tmp / f"{name}.dsj"
        try:
            export_bundle(f"{MODELS}:{model}", data, out, blocks={"cpu": 16, "cuda": 1024},
                          **extra)
        except ExportError as err:
            check(f"{name}: exports", False, str(err))
            continue
        check(f"{name}: exports", True)
        b = Bundle(out)
        check_no_custom_calls(name, b)
        # float64 arithmetic behind float32 rows: only the outputs' rounding is left (half an
        # ulp, 6e-8 relative: 4.0e-8 and 4.2e-8 measured), where float32 arithmetic is off by
        # 1.7e-7 in lp and 5.5e-7 in the gradient at the same rows.
        job, cmp = numeric_job(tmp, name, b, model, data, 0,
                               (F64_RTOL,) * 3 if name.endswith("_f64") else
                               (LP_RTOL, GRAD_RTOL, OUT_RTOL))
        jobs.append(job)
        compares.append(cmp)
        check(f"{name}: manifest compute",
              b.m.get("compute") == extra.get("compute", "float32") and b.m["dtype"] == "float32",
              f"{b.m.get('compute')} {b.m['dtype']}")
        if name == "gp_regr_f64":
            check("gp_regr_f64: real data inputs in float64, int32 kept",
                  [(d["name"], d["dtype"]) for d in b.m["data"]] ==
                  [("x", "int32"), ("y", "float64"), ("k", "int32")], f"{b.m['data']}")
            import jax
            check("export leaves the caller's jax_enable_x64 as it was",
                  not jax.config.jax_enable_x64)
        if name == "mvn_lkj":
            check("mvn_lkj: LKJ coordinates (3 free values) and vars", [
                (c["name"], c["shape"], c["offset"]) for c in b.m["coordinates"]] == [
                ("L_omega", [3], 0), ("mu", [3], 3), ("scale", [3], 6), ("z", [3], 9)] and [
                (v["name"], v["kind"], v["shape"]) for v in b.m["vars"]] == [
                ("mu", "parameter", [3]), ("scale", "parameter", [3]),
                ("L_omega", "parameter", [3, 3]), ("z", "parameter", [3]),
                ("Omega", "transformed", [3, 3])] and b.m["constrained_dim"] == 27,
                f"{b.m['coordinates']} {b.m['vars']}")
        if name == "gp_regr":
            check("gp_regr: int32 data inputs (x, k), N static",
                  [(d["name"], d["dtype"]) for d in b.m["data"]] ==
                  [("x", "int32"), ("y", "float32"), ("k", "int32")] and
                  b.m["static"] == {"N": 11}, f"{b.m['data']} {b.m['static']}")
        if name == "jax_fn":
            check("jax kind: manifest", b.m["kind"] == "jax" and b.m["numpyro_version"] is None
                  and b.m["dim"] == 5 and b.m["coordinates"] == [
                      {"name": "beta", "shape": [3], "offset": 0, "size": 3},
                      {"name": "log_sigma", "shape": [], "offset": 3, "size": 1},
                      {"name": "mu", "shape": [], "offset": 4, "size": 1}] and
                  b.m["vars"] == [{"name": c["name"], "kind": "parameter", "shape": c["shape"]}
                                  for c in b.m["coordinates"]] and
                  [(d["name"], d["dtype"], d["shape"]) for d in b.m["data"]] ==
                  [("y", "float32", [30]), ("scale", "float32", [])], str(b.m)[:400])

    # A caller with jax_enable_x64 on gets float64 arithmetic by default, and keeps its setting.
    import jax
    jax.config.update("jax_enable_x64", True)
    try:
        m = export_bundle(f"{MODELS}:gaussian_logdensity", lin_data, tmp / "caller_x64.dsj",
                          init=str(init), platforms=["cpu"])
        check("caller with jax_enable_x64 on: computes in float64, its setting kept",
              m["compute"] == "float64" and jax.config.jax_enable_x64, f"{m['compute']}")
    finally:
        jax.config.update("jax_enable_x64", False)

    check_lowering_restored()
    for n in (6, 20):
        compares.append(check_linalg(tmp, jobs, n))
    check_refusals(tmp)
    check_warning(tmp)
    check_trajectory()

    (tmp / "jobs.json").write_text(json.dumps(jobs))
    env = dict(os.environ, JAX_ENABLE_X64="1", JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, __file__, "--reference", str(tmp / "jobs.json")],
                       env=env, capture_output=True, text=True)
    check("float64 reference subprocess", p.returncode == 0, p.stderr[-2000:])
    if p.returncode == 0:
        for cmp in compares:
            cmp()

    print(f"{len(PASSED)} passed, {len(FAILED)} failed")
    if not FAILED:
        import shutil
        shutil.rmtree(tmp)
    else:
        print(f"kept {tmp}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--reference":
        reference_main(sys.argv[2])
    else:
        sys.exit(main())
