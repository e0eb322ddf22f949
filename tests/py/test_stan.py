"""Stan models as targets (tests/stan/*.stan), end to end: `dsampler stan` and --target stan:.
Run as `test_stan.py PART`, one CTest test per part:
  compile    each model compiles (or comes from the cache: a second call is a cache hit, same
             library); the times are printed
  density    log p and gradient through the plugin's float64 entry against central finite
             differences (every model), against the hand-written plugin of the same model
             (eight schools, tests/plugin/model_hier.c: same unconstrained parameters, log p
             equal up to a constant), and the float32 entry against the float64 one
  models     `dsampler hmc` on 2 ranks with default adaptation: the named output (posterior/mu,
             posterior/theta [chain, draw, theta_dim_0], ...) against references computed here
             (conjugate formulas, quadrature): every mean within 4 MCSE (summary's mcse_mean),
             every sd within 10%, R-hat < 1.01; the constrained values obey their constraints;
             a log density offset by -1e8 (float32 spacing 8 there) samples as well
  invariance 1 rank with 2 OpenMP threads (the target called from both at once), 2 and 3 ranks:
             every dataset bitwise equal; a data file whose path holds commas; SVGD's particles
             as the model's variables, bitwise equal on 1 and 3 ranks
  restart    stopped by a signal on 2 ranks, resumed on 3: bitwise the uninterrupted run; a model
             edited before the resume is refused
  errors     bad input gets one line naming it before sampling: a syntax error (stanc's line
             and column), a missing data variable, a wrong shape, a file that is not JSON, no
             toolchain, no compiler, an impossible start, --backend cuda
Exit 77 (skipped) where the Stan toolchain is not installed (src/targets/stan/install-stan.sh)."""
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
from math import lgamma

import dstest as t
import models

HERE = os.path.dirname(os.path.abspath(__file__))
STAN_DIR = os.path.join(HERE, "..", "stan")
MODELS = ["normal_ig", "eight_schools", "simplex_bounded"]
RANKS, SEED = 2, 20261201


def model_path(name):
    return os.path.join(STAN_DIR, name + ".stan")


def library(name):
    _, out, _ = t.run(1, "stan", model_path(name), "--quiet", timeout=900)
    return out.strip().splitlines()[-1]


# --- data and references ----------------------------------------------------------------------------

NIG = {"m0": 1.0, "k0": 0.5, "a0": 3.0, "b0": 4.0}


def normal_ig_data(offset=0.0):
    rng = np.random.default_rng(11)
    y = rng.normal(2.0, 1.5, 25)
    data = {"N": len(y), "y": y.tolist(), **NIG, "lp_offset": offset}
    p = t.path(f"normal_ig_{'offset' if offset else 'plain'}.json")
    with open(p, "w") as f:
        json.dump(data, f)
    return p, y


def normal_ig_reference(y):
    """Normal-inverse-gamma: sigma2 ~ IG(an, bn), mu ~ t_{2an}(mn, bn / (an kn)), and
    E[sigma] = sqrt(bn) Gamma(an - 1/2) / Gamma(an)."""
    n, ybar = len(y), y.mean()
    kn = NIG["k0"] + n
    mn = (NIG["k0"] * NIG["m0"] + n * ybar) / kn
    an = NIG["a0"] + n / 2
    bn = NIG["b0"] + 0.5 * ((y - ybar) ** 2).sum() + NIG["k0"] * n * (ybar - NIG["m0"]) ** 2 / (2 * kn)
    sigma_mean = np.sqrt(bn) * np.exp(lgamma(an - 0.5) - lgamma(an))
    return {
        "mu": (mn, np.sqrt(bn / (kn * (an - 1)))),
        "sigma2": (bn / (an - 1), bn / ((an - 1) * np.sqrt(an - 2))),
        "sigma": (sigma_mean, np.sqrt(bn / (an - 1) - sigma_mean ** 2)),
    }


def eight_schools_reference():
    """Means and sds of mu, tau, eta_j and theta_j = mu + tau eta_j by quadrature over log tau, as
    models.hier_reference: given tau, mu and eta are jointly Gaussian (conjugate formulas), with
    Cov(mu, eta_j | tau) = -gain_j Var(mu | tau)."""
    y, s = models.SCHOOL_Y, models.SCHOOL_SIGMA
    log_tau = np.linspace(-30.0, 10.0, 20001)
    tau = np.exp(log_tau)
    var = s ** 2 + tau[:, None] ** 2
    cov = np.einsum("gj,jk->gjk", var, np.eye(8)) + models.MU_SD ** 2
    _, logdet = np.linalg.slogdet(cov)
    quad = np.einsum("j,gj->g", y, np.linalg.solve(cov, np.broadcast_to(y, var.shape)[..., None])[..., 0])
    log_post = -0.5 * (logdet + quad) - np.log1p((tau / models.TAU_SCALE) ** 2) + log_tau
    w = np.exp(log_post - log_post.max())
    w /= w.sum()
    mu_prec = 1.0 / models.MU_SD ** 2 + (1.0 / var).sum(1)
    mu_mean, mu_var = (y / var).sum(1) / mu_prec, 1.0 / mu_prec
    gain = tau[:, None] / var
    eta_mean = gain * (y - mu_mean[:, None])
    eta_var = s ** 2 / var + gain ** 2 * mu_var[:, None]
    theta_mean = mu_mean[:, None] + tau[:, None] * eta_mean
    theta_var = mu_var[:, None] + tau[:, None] ** 2 * eta_var - 2 * tau[:, None] * gain * mu_var[:, None]

    def moments(cond_mean, cond_var):
        mean = w @ cond_mean
        return mean, np.sqrt(w @ (cond_var + cond_mean ** 2) - mean ** 2)

    return {"mu": moments(mu_mean, mu_var), "tau": moments(tau, np.zeros_like(tau)),
            "eta": moments(eta_mean, eta_var), "theta": moments(theta_mean, theta_var)}


def simplex_bounded_reference():
    with open(os.path.join(STAN_DIR, "simplex_bounded.json")) as f:
        d = json.load(f)
    post = np.array(d["alpha"]) + np.array(d["counts"])
    m = post / post.sum()
    a, b = d["a"] + d["k"], d["b"] + d["n"] - d["k"]
    return {"theta": (m, np.sqrt(m * (1 - m) / (post.sum() + 1))),
            "p": (a / (a + b), np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1)))),
            "u": (0.5, 3.0 / np.sqrt(12.0))}


# --- the plugin through ctypes (ABI version 2), without MPI ----------------------------------------

REPORT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_char_p)
F64 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.c_int64,
                       ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double))


class Host(ctypes.Structure):
    """struct dsampler_target_host (Open MPI's MPI_Comm is a pointer)."""
    _fields_ = [("abi_version", ctypes.c_int), ("args", ctypes.c_char_p), ("data_path", ctypes.c_char_p),
                ("dim", ctypes.c_int64), ("seed", ctypes.c_uint64), ("comm", ctypes.c_void_p),
                ("report_error", REPORT), ("context", ctypes.c_void_p)]


class Target2(ctypes.Structure):
    """struct dsampler_target, version 2 fields included."""
    _fields_ = [("abi_version", ctypes.c_int), ("name", ctypes.c_char_p), ("var_name", ctypes.c_char_p),
                ("dim", ctypes.c_int64), ("self", ctypes.c_void_p), ("logp_grad", models.LOGP_GRAD),
                ("logp_grad_cuda", ctypes.c_void_p), ("destroy", ctypes.c_void_p), ("logp_grad_f64", F64),
                ("n_vars", ctypes.c_int), ("vars", ctypes.c_void_p), ("constrained_dim", ctypes.c_int64),
                ("constrain", ctypes.c_void_p), ("initial_point", ctypes.c_void_p)]


class StanPlugin:
    def __init__(self, path, data_path):
        self.lib = ctypes.CDLL(path)
        self.messages = []
        self.report = REPORT(lambda context, message: self.messages.append(message.decode()))
        host = Host(2, b"", data_path.encode(), 0, SEED, None, self.report, None)
        self.target = Target2()
        rc = self.lib.dsampler_target_create_v2(ctypes.byref(host), ctypes.byref(self.target))
        if rc != 0:
            raise RuntimeError(f"{path}: create failed: {self.messages}")
        self.dim = self.target.dim

    def f64(self, x):
        x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float64)
        logp, grad = np.empty(len(x)), np.empty_like(x)
        dp = ctypes.POINTER(ctypes.c_double)
        rc = self.target.logp_grad_f64(self.target.self, x.ctypes.data_as(dp), len(x), logp.ctypes.data_as(dp),
                                       grad.ctypes.data_as(dp))
        assert rc == 0, self.messages
        return logp, grad

    def f32(self, x):
        x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
        logp, grad = np.empty(len(x), dtype=np.float32), np.empty_like(x)
        fp = ctypes.POINTER(ctypes.c_float)
        rc = self.target.logp_grad(self.target.self, x.ctypes.data_as(fp), len(x), logp.ctypes.data_as(fp),
                                   grad.ctypes.data_as(fp))
        assert rc == 0, self.messages
        return logp, grad


# --- parts -------------------------------------------------------------------------------------------------

def part_compile():
    for name in MODELS:
        start = time.time()
        first = library(name)
        took = time.time() - start
        start = time.time()
        again = library(name)
        cached = time.time() - start
        t.check(os.path.isfile(first), f"{name}: compiled (or found in the cache) in {took:.1f} s: {first}")
        t.check(again == first and cached < 5, f"{name}: the second call finds it in the cache ({cached:.2f} s)")


def check_gradient(name, plugin, points):
    worst_fd, worst_f32 = 0.0, 0.0
    for x in points:
        logp, grad = plugin.f64(x)
        logp, grad = logp[0], grad[0]
        for k in range(plugin.dim):
            # Central differences: truncation O(h^2) (1e-6 relative allowed) and rounding ~1e-13 |log p| / h.
            h = 1e-5 * max(1.0, abs(x[k]))
            up, down = x.copy(), x.copy()
            up[k] += h
            down[k] -= h
            fd = (plugin.f64(up)[0][0] - plugin.f64(down)[0][0]) / (up[k] - down[k])
            bound = 1e-6 * abs(fd) + 1e-13 * (1.0 + abs(logp)) / h + 1e-9
            worst_fd = max(worst_fd, abs(grad[k] - fd) / bound)
        # float32 entry = the float64 density at the float32 point, rounded (2^-24 relative).
        x32 = x.astype(np.float32)
        logp64, grad64 = plugin.f64(x32.astype(np.float64))
        logp32, grad32 = plugin.f32(x32)
        ref = np.append(logp64, grad64)
        err = np.abs(np.append(logp32, grad32) - ref)
        worst_f32 = max(worst_f32, (err / (1e-30 + 2.0 ** -24 * np.abs(ref))).max())
    t.check(worst_fd <= 1, f"{name}: gradient vs central differences at {len(points)} points, "
                           f"worst |g - fd| / (1e-6 |fd| + 1e-13 (1 + |log p|) / h + 1e-9) = {worst_fd:.3g} <= 1")
    t.check(worst_f32 <= 1, f"{name}: float32 entry vs float64, worst error / (2^-24 |ref|) = {worst_f32:.3g} <= 1")


def part_density():
    rng = np.random.default_rng(3)
    nig_data, _ = normal_ig_data()
    data = {"normal_ig": nig_data, "eight_schools": os.path.join(STAN_DIR, "eight_schools.json"),
            "simplex_bounded": os.path.join(STAN_DIR, "simplex_bounded.json")}
    plugins = {}
    for name in MODELS:
        plugins[name] = StanPlugin(library(name), data[name])
        points = rng.uniform(-2, 2, (6, plugins[name].dim))
        check_gradient(name, plugins[name], points)
    # Eight schools against the hand-written plugin: x = [mu, log tau, eta] in both.
    stan = plugins["eight_schools"]
    hand = models.Plugin(os.environ["DSAMPLER_PLUGIN_DIR"], "model_hier")
    t.check(stan.dim == hand.dim == 10, f"eight_schools: dim {stan.dim} == model_hier's {hand.dim} == 10")
    mean, sd = models.hier_reference()
    points = np.vstack([rng.uniform(-2, 2, (4, 10)), mean + sd * rng.standard_normal((4, 10))])
    stan_logp, stan_grad = stan.f64(points)
    hand_out = [hand.logp_grad_f64(x) for x in points]
    hand_logp = np.array([o[0] for o in hand_out])
    hand_grad = np.array([o[1] for o in hand_out])
    # Stan drops the same constants (`~` statements), so log p agrees up to one constant: the
    # differences between points agree, to 1e-12 of the values.
    constant = stan_logp - hand_logp
    spread = np.abs(constant - constant[0]).max()
    scale = 1e-12 * (1 + np.abs(hand_logp).max())
    t.check(spread <= scale, f"eight_schools vs model_hier: log p differs by one constant "
                             f"({constant[0]:.6g}; spread {spread:.3g} <= {scale:.3g})")
    grad_err = (np.abs(stan_grad - hand_grad) / (1e-12 * (1 + np.abs(hand_grad)))).max()
    t.check(grad_err <= 1, f"eight_schools vs model_hier: gradients equal to 1e-12 (1 + |g|), worst {grad_err:.3g}")
    t.check(np.allclose(hand_logp, models.hier_logp(points), rtol=1e-12, atol=1e-9), "model_hier agrees with numpy")
    # A domain error (here the Dirichlet at a NaN point) is log p = -inf, as Stan rejects it.
    logp, grad = plugins["simplex_bounded"].f64(np.full(plugins["simplex_bounded"].dim, np.nan))
    t.check(np.isneginf(logp[0]) and np.all(grad == 0), f"a domain error gives log p = -inf ({logp[0]})")


def summary(out, name):
    csv_path = t.path(f"{name}_summary.csv")
    t.run(RANKS, "summary", out, "--csv", csv_path)
    _, rows = t.read_csv(csv_path)
    header, _ = t.read_csv(csv_path)
    return {k: dict(zip(header[1:], v)) for k, v in rows.items()}


def check_against(name, rows, reference):
    """Every row named var or var[i] against the reference (mean, sd) of var."""
    for var, (ref_mean, ref_sd) in reference.items():
        ref_mean, ref_sd = np.atleast_1d(ref_mean), np.atleast_1d(ref_sd)
        keys = [var] if ref_mean.size == 1 and var in rows else [f"{var}[{i}]" for i in range(ref_mean.size)]
        for key, m, s in zip(keys, ref_mean, ref_sd):
            row = rows.get(key)
            if row is None:
                t.check(False, f"{name}: summary has a row {key}")
                continue
            z = abs(row["mean"] - m) / row["mcse_mean"]
            t.check(z <= 4, f"{name}: {key} mean {row['mean']:.4g} vs {m:.4g}: {z:.2f} MCSE <= 4")
            t.check(abs(row["sd"] / s - 1) <= 0.10, f"{name}: {key} sd {row['sd']:.4g} vs {s:.4g} within 10%")
            t.check(row["r_hat"] < 1.01, f"{name}: {key} r_hat {row['r_hat']:.4f} < 1.01")


def sample(name, data, *extra, chains=16, ranks=RANKS, out_name=None):
    out = t.path(f"{out_name or name}.h5")
    if os.path.exists(out):
        os.remove(out)
    t.run(ranks, "hmc", "--target", f"stan:{model_path(name)}", "--data", data, "--chains", chains, "--seed", SEED,
          "--out", out, "--quiet", *extra, timeout=900)
    return out


def part_models():
    data, y = normal_ig_data()
    out = sample("normal_ig", data)
    d = t.datasets(out)
    t.check(d["posterior/mu"].shape == (16, 1000) and d["posterior/sigma2"].shape == (16, 1000),
            f"normal_ig: posterior/mu and sigma2 are [chain, draw] ({d['posterior/mu'].shape})")
    t.check(d["unconstrained_posterior/x"].shape == (16, 1000, 2), "normal_ig: unconstrained_posterior/x [16, 1000, 2]")
    t.check(np.allclose(d["posterior/sigma2"], np.exp(d["unconstrained_posterior/x"][..., 1].astype(np.float64))),
            "normal_ig: sigma2 = exp(x[1]), the lower bound's transform")
    t.check(np.array_equal(d["posterior/sigma"], np.sqrt(d["posterior/sigma2"])), "normal_ig: sigma = sqrt(sigma2)")
    ref = normal_ig_reference(y)
    check_against("normal_ig", summary(out, "normal_ig"), ref)
    accept_plain = d["sample_stats/acceptance_rate"].mean()
    # log p near -1e8: float32 would quantise the energy change to multiples of 8.
    data_offset, _ = normal_ig_data(-1e8)
    out = sample("normal_ig", data_offset, out_name="normal_ig_offset")
    rows = summary(out, "normal_ig_offset")
    check_against("normal_ig + log p offset -1e8", rows, ref)
    accept = t.datasets(out)["sample_stats/acceptance_rate"].mean()
    lp = t.datasets(out)["sample_stats/lp"]
    t.check(abs(accept - accept_plain) < 0.03 and lp.max() < -9.9e7,
            f"offset -1e8: mean acceptance {accept:.3f} as without ({accept_plain:.3f}); lp ~ {lp.mean():.4g}")

    out = sample("eight_schools", os.path.join(STAN_DIR, "eight_schools.json"), chains=32)
    d = t.datasets(out)
    t.check(d["posterior/theta"].shape == (32, 1000, 8) and d["posterior/theta_dim_0"].tolist() == list(range(8)),
            f"eight_schools: posterior/theta [chain, draw, theta_dim_0] ({d['posterior/theta'].shape})")
    t.check(d["posterior/y_rep"].shape == (32, 1000, 8), "eight_schools: generated y_rep [32, 1000, 8]")
    theta = d["posterior/mu"][..., None] + d["posterior/tau"][..., None] * d["posterior/eta"]
    t.check(np.allclose(theta, d["posterior/theta"], rtol=1e-12, atol=1e-12), "eight_schools: theta = mu + tau eta")
    t.check((d["posterior/tau"] > 0).all(), "eight_schools: tau > 0")
    check_against("eight_schools", summary(out, "eight_schools"), eight_schools_reference())
    divergent = d["sample_stats/diverging"].mean()
    t.check(divergent < 0.01, f"eight_schools: {100 * divergent:.2f}% divergent transitions < 1%")

    out = sample("simplex_bounded", os.path.join(STAN_DIR, "simplex_bounded.json"))
    d = t.datasets(out)
    theta, p, u = d["posterior/theta"], d["posterior/p"], d["posterior/u"]
    t.check(np.allclose(theta.sum(-1), 1, atol=1e-12) and (theta > 0).all(), "simplex_bounded: theta on the simplex")
    t.check(((p > 0) & (p < 1)).all() and ((u > -1) & (u < 2)).all(), "simplex_bounded: p in (0, 1), u in (-1, 2)")
    t.check(d["unconstrained_posterior/x"].shape[-1] == 5, "simplex_bounded: 3 + 1 + 1 unconstrained coordinates")
    table = d["posterior/table"]
    want = np.stack([theta, 10 * np.arange(1, 5) + p[..., None]], axis=2)
    # The generated quantities reject where p > 0.5: NaN there, as Stan writes a failed draw.
    rejected = p > 0.5
    t.check(table.shape == (16, 1000, 2, 4) and np.array_equal(table[~rejected], want[~rejected]),
            f"simplex_bounded: table [chain, draw, 2, 4] row-major, table[1, j] = 10 (j + 1) + p ({table.shape})")
    t.check(rejected.any() and np.isnan(table[rejected]).all() and not np.isnan(table[~rejected]).any(),
            f"simplex_bounded: a rejection in generated quantities is NaN in that draw only ({rejected.sum()} draws)")
    check_against("simplex_bounded", summary(out, "simplex_bounded"), simplex_bounded_reference())

    # A start whose log density is finite but whose gradient throws a domain error (the ODE's
    # sensitivities fail where its values did not): Stan's initialize gives up there; dsampler
    # rejects that start and draws another. posteriordb's lotka_volterra at seed 2 has one
    # (chain 43); the run used to stop before its first iteration.
    lotka = os.path.join(HERE, "..", "posteriordb", "hudson_lynx_hare-lotka_volterra")
    out = t.path("lotka_volterra.h5")
    if os.path.exists(out):
        os.remove(out)
    t.run(RANKS, "hmc", "--target", f"stan:{lotka}/model.stan", "--data", f"{lotka}/data.json", "--chains", 64,
          "--seed", 2, "--warmup", 40, "--draws", 20, "--out", out, "--quiet", timeout=900)
    lp = t.datasets(out)["sample_stats/lp"]
    t.check(lp.shape == (64, 20) and np.isfinite(lp).all(),
            f"lotka_volterra, seed 2: every chain starts and samples (lp finite, shape {lp.shape})")


def part_invariance():
    data = os.path.join(STAN_DIR, "eight_schools.json")
    # Paths with commas reach the model whole.
    comma_dir = t.path("data,dir")
    os.makedirs(comma_dir, exist_ok=True)
    comma_data = os.path.join(comma_dir, "eight,schools.json")
    shutil.copy(data, comma_data)
    args = ["hmc", "--target", f"stan:{model_path('eight_schools')}", "--data", comma_data, "--chains", 256,
            "--warmup", 150, "--draws", 60, "--seed", 7, "--quiet", "--save-warmup"]
    outs = {}
    for ranks, threads in ((1, 2), (2, 1), (3, 1)):
        out = t.path(f"invariance_{ranks}.h5")
        if os.path.exists(out):
            os.remove(out)
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, "-x", "OMP_NUM_THREADS", t.DSAMPLER,
               *[str(a) for a in args], "--out", out]
        import subprocess
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
        t.check(proc.returncode == 0, f"{ranks} rank(s), {threads} thread(s): runs ({proc.stderr.strip()[-300:]})")
        outs[(ranks, threads)] = t.datasets(out)
    # SVGD: the target's variables of each particle, the same on 1 and 3 ranks.
    svgd = ["svgd", "--target", f"stan:{model_path('simplex_bounded')}", "--data",
            os.path.join(STAN_DIR, "simplex_bounded.json"), "--particles", 90, "--iters", 40, "--step-size", 0.05,
            "--seed", 3, "--quiet"]
    particles = []
    for ranks in (1, 3):
        out = t.path(f"svgd_{ranks}.h5")
        if os.path.exists(out):
            os.remove(out)
        t.run(ranks, *svgd, "--out", out)
        particles.append(t.datasets(out))
    theta = particles[0]["posterior/theta"]
    t.check(theta.shape == (1, 90, 4) and np.allclose(theta.sum(-1), 1, atol=1e-12),
            f"svgd: posterior/theta [1, 90, 4] of particles on the simplex ({theta.shape})")
    t.check(particles[0]["unconstrained_posterior/x"].shape == (1, 90, 5), "svgd: unconstrained_posterior/x [1, 90, 5]")
    t.check(all(particles[0][n].tobytes() == particles[1][n].tobytes() for n in particles[0]),
            "svgd: every dataset bitwise equal on 1 and 3 ranks")
    base = outs[(1, 2)]
    names = [n for n in base if n.split("/")[0] in ("posterior", "unconstrained_posterior", "sample_stats",
                                                     "warmup_posterior", "warmup_unconstrained_posterior")]
    t.check(len(names) > 20, f"{len(names)} datasets compared")
    for key, other in outs.items():
        same = all(n in other and other[n].tobytes() == base[n].tobytes() for n in names)
        t.check(same, f"{key[0]} rank(s) x {key[1]} thread(s) bitwise equal to 1 rank x 2 threads")


def descendant_names(root):
    """The program names (/proc/PID/comm) of every process below pid `root`."""
    parent, name = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/comm") as f:
                name[int(entry)] = f.read().strip()
            parent[int(entry)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            pass
    found = []
    for pid in name:
        up, seen = parent.get(pid), 0
        while up and up != root and seen < 64:
            up, seen = parent.get(up), seen + 1
        if up == root:
            found.append(name[pid])
    return found


def part_restart():
    import test_restart as restart
    args = ["hmc", "--target", f"stan:{model_path('eight_schools')}", "--data", os.path.join(STAN_DIR, "eight_schools.json"),
            "--chains", 64, "--warmup", 200, "--draws", 1500, "--seed", 5, "--checkpoint-every", 50, "--save-warmup"]
    restart.COMPARE["stan"] = ["posterior/mu", "posterior/tau", "posterior/eta", "posterior/theta", "posterior/y_rep",
                               "warmup_posterior/theta", "unconstrained_posterior/x", "sample_stats/lp",
                               "sample_stats/energy", "sample_stats/step_size", "sample_stats/n_steps",
                               "unconstrained_moments/chain_mean"]
    restart.case("stan_other", "stan", args, "--draws", 2, 3, signal.SIGTERM)
    # A stop signal while the model compiles (a model new to the cache, so that it does): the
    # compiler runs in its own process group and finishes, and the run stops at its first
    # iteration with a checkpoint and exit 75, as after any stop. The cache knows a model by its
    # code, so a scale of its own makes it new.
    fresh = t.path("fresh.stan")
    with open(fresh, "w") as f:
        f.write(f"parameters {{ real a; }}\nmodel {{ a ~ normal(0, {1 + time.time_ns() % 10**9 * 1e-12!r}); }}\n")
    out, ckpt = t.path("fresh.h5"), t.path("fresh.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    proc = subprocess.Popen([t.MPIEXEC, t.NP_FLAG, "2", *t.PREFLAGS, t.DSAMPLER, "hmc", "--target", f"stan:{fresh}",
                             "--chains", "4", "--warmup", "50", "--draws", "50", "--quiet", "--out", out,
                             "--checkpoint-dir", ckpt], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The signal once a compiler runs below this mpirun (stanc, then the C++ compiler), so that
    # a slow start under load does not make it arrive before mpirun has started the ranks.
    compilers = {"stanc", "c++", "g++", "cc1plus", "collect2", "ld"}
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if compilers & set(descendant_names(proc.pid)):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=900)
    t.check(proc.returncode == 75 and os.listdir(ckpt),
            f"a stop during the compile: exit 75 with a checkpoint (rc {proc.returncode}, "
            f"{stderr.strip().splitlines()[-1] if stderr.strip() else ''!r})")
    # A model edited between the start and the resume compiles to another library: refused.
    edited = t.path("edited.stan")
    with open(edited, "w") as f:
        f.write("parameters { real a; }\nmodel { a ~ normal(0, 1); }\n")
    out, ckpt = t.path("edited.h5"), t.path("edited.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(2, "hmc", "--target", f"stan:{edited}", "--chains", 4, "--warmup", 50, "--draws", 50, "--seed", 1,
          "--checkpoint-every", 100, "--out", out, "--checkpoint-dir", ckpt, "--quiet", timeout=900)
    with open(edited, "w") as f:
        f.write("parameters { real a; }\nmodel { a ~ normal(1, 1); }\n")
    rc, _, stderr = t.run(2, "resume", ckpt, "--draws", 80, "--quiet", expect_ok=False, timeout=900)
    t.check(rc != 0 and "the model is not the one this run started with" in stderr,
            f"resume with an edited model: refused ({stderr.strip().splitlines()[-1] if stderr.strip() else ''!r})")


def part_errors():
    def refused(what, args, expect, env=None, ranks=2):
        cmd_env = t.refusal_env(env)
        import subprocess
        cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, *sum((["-x", k] for k in (env or {})), []), t.DSAMPLER,
               *[str(a) for a in args]]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=cmd_env, timeout=900)
        lines = [line for line in proc.stderr.splitlines() if line.startswith("dsampler: error:")]
        t.check(proc.returncode != 0 and len(lines) == 1 and expect in lines[0],
                f"{what}: refused in one line with '{expect}' (exit {proc.returncode}: {proc.stderr.strip()[-400:]!r})")

    bad = t.path("bad_syntax.stan")
    with open(bad, "w") as f:
        f.write("parameters {\n  real mu\n}\nmodel {\n  mu ~ normal(0, 1);\n}\n")
    refused("syntax error", ["stan", bad], "line 3, column 0")
    refused("syntax error in a run", ["hmc", "--target", f"stan:{bad}", "--out", t.path("e.h5")], "stanc cannot translate")
    model = f"stan:{model_path('eight_schools')}"
    missing = t.path("missing_J.json")
    with open(missing, "w") as f:
        json.dump({"y": [1] * 8, "sigma": [1] * 8}, f)
    refused("missing data variable", ["hmc", "--target", model, "--data", missing, "--out", t.path("e.h5")],
            "variable name=J")
    shape = t.path("wrong_shape.json")
    with open(shape, "w") as f:
        json.dump({"J": 8, "y": [1] * 7, "sigma": [1] * 8}, f)
    refused("wrong data shape", ["hmc", "--target", model, "--data", shape, "--out", t.path("e.h5")], "variable name=y")
    not_json = t.path("not.json")
    with open(not_json, "w") as f:
        f.write("J = 8\n")
    refused("not JSON", ["hmc", "--target", model, "--data", not_json, "--out", t.path("e.h5")], "not Stan's JSON")
    refused("no data", ["hmc", "--target", model, "--out", t.path("e.h5")], "no --data given")
    refused("missing model", ["hmc", "--target", "stan:" + t.path("nowhere.stan"), "--out", t.path("e.h5")],
            "cannot read the model")
    refused("no toolchain", ["stan", model_path("eight_schools")], "no Stan toolchain",
            env={"DSAMPLER_STAN_HOME": t.path("no_such_folder")})
    refused("no compiler", ["stan", model_path("eight_schools")], "need a C++ compiler",
            env={"DSAMPLER_STAN_CXX": "no-such-c++"})
    init = t.path("bad_init.json")
    with open(init, "w") as f:
        json.dump({"mu": 0.0, "tau": -1.0, "eta": [0.0] * 8}, f)
    refused("impossible start", ["hmc", "--target", model, "--data", os.path.join(STAN_DIR, "eight_schools.json"),
                                 "--target-args", f"init={init}", "--out", t.path("e.h5")], "no start for chain 0")
    refused("unknown argument", ["hmc", "--target", model, "--data", os.path.join(STAN_DIR, "eight_schools.json"),
                                 "--target-args", "radius=3", "--out", t.path("e.h5")], "takes init=FILE.json")
    refused("GPU backend", ["hmc", "--target", model, "--backend", "cuda", "--out", t.path("e.h5")],
            "Stan models run on the CPU backend only")
    # A model that never returns from its log density (a loop that does not end) on every rank:
    # --call-timeout ends the job, in one line naming the call.
    stall = t.path("stall.stan")
    with open(stall, "w") as f:
        f.write("parameters { real a; }\nmodel {\n  real s = 0;\n  while (1) { s += 1; if (s < 0) break; }\n"
                "  a ~ normal(s, 1);\n}\n")
    refused("a model that never returns", ["hmc", "--target", f"stan:{stall}", "--call-timeout", 3, "--out",
                                           t.path("e.h5")], "Stan model stall.stan: initial_point has not returned")


def main():
    t.stan_toolchain_or_skip()
    part = sys.argv[1]
    {"compile": part_compile, "density": part_density, "models": part_models, "invariance": part_invariance,
     "restart": part_restart, "errors": part_errors}[part]()
    t.finish(f"stan {part}")


if __name__ == "__main__":
    main()
