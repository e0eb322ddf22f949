"""HMC with default options on three test models with reference posteriors (tests/plugin/model_*.c,
references in tests/py/models.py):
  model_hier        eight schools, non-centred (dim 10), reference by quadrature over log_tau;
  model_regression  linear regression, noise sd 1e-3 against data of scale 10-50 (dim 4): starts
                    uniform in (-2, 2) have log p around -1e5 and down to -1e7; conjugate reference;
  model_corr        2-D Gaussian, sds 1 and 10, correlation -0.99 (dim 2); exact reference.
First each plugin's density is checked: its float64 gradient against central finite differences,
its log p against the numpy model, and its float32 ABI entry against its float64 density. Then
`dsampler hmc` runs each model with default options (adaptation, step size, leapfrog steps,
warmup, draws, starts) except --chains 64, --seed and --backend cpu, and the draws must show, for
every parameter: mean within 4 MCSE of the reference (summary's mcse_mean), sd within 10% of the
reference, R-hat < 1.01 (summary's r_hat); and no stuck chain (every chain's mean acceptance over
sampling > 0.05, no parameter constant within a chain). These bars are the yardstick for the
defaults: a model that fails them says the defaults do not work on it, and the test fails."""
import csv
import os
import sys

import h5py

import numpy as np

import dstest as t
import models

PLUGIN_DIR = os.environ["DSAMPLER_PLUGIN_DIR"]
CHAINS, SEED, RANKS = 64, 20260611, 2


def check_density(name):
    """The plugin's density: gradient against central differences in float64, log p against the
    numpy model, the float32 entry against the float64 one."""
    dim, numpy_logp, reference, _ = models.MODELS[name]
    plugin = models.Plugin(PLUGIN_DIR, name)
    t.check(plugin.dim == dim, f"{name}: dim {plugin.dim} == {dim}")
    mean, sd = reference()
    rng = np.random.default_rng(5)
    points = np.vstack([rng.uniform(-2, 2, (3, dim)),                        # where chains start
                        mean + sd * rng.standard_normal((3, dim))])           # in the posterior
    worst_fd, worst_np, worst_f32 = 0.0, 0.0, 0.0
    for x in points:
        logp, grad = plugin.logp_grad_f64(x)
        for k in range(dim):
            # Central differences: truncation O(h^2) (1e-6 relative allowed) and the rounding of
            # a log density summed from terms that cancel, ~1e-11 |log p| / h.
            h = 1e-5 * max(1.0, abs(x[k]))
            up, down = x.copy(), x.copy()
            up[k] += h
            down[k] -= h
            fd = (plugin.logp_grad_f64(up)[0] - plugin.logp_grad_f64(down)[0]) / (up[k] - down[k])
            bound = 1e-6 * abs(fd) + 1e-11 * (1.0 + abs(logp)) / h
            worst_fd = max(worst_fd, abs(grad[k] - fd) / bound)
        # log p against numpy: tolerance 1e-10 (1 + |log p|).
        worst_np = max(worst_np, abs(logp - numpy_logp(x)[0]) / (1e-10 * (1.0 + abs(logp))))
        # The float32 entry is the float64 density at the float32 point, rounded: 2^-24 relative.
        x32 = x.astype(np.float32)
        logp64, grad64 = plugin.logp_grad_f64(x32.astype(np.float64))
        logp32, grad32 = plugin.logp_grad_f32(x32)
        err = np.abs(np.append(logp32, grad32) - np.append(logp64, grad64))
        bound = 1e-30 + 2.0 ** -24 * np.abs(np.append(logp64, grad64))
        worst_f32 = max(worst_f32, (err / bound).max())
    t.check(worst_fd <= 1, f"{name}: gradient vs central differences at {len(points)} points, "
                           f"worst |g - fd| / (1e-6 |fd| + 1e-11 (1 + |log p|) / h) = {worst_fd:.3g} <= 1")
    t.check(worst_np <= 1, f"{name}: log p vs numpy, worst |diff| / (1e-10 (1 + |log p|)) = {worst_np:.3g} <= 1")
    t.check(worst_f32 <= 1, f"{name}: float32 entry vs float64 density, worst error / (2^-24 |ref|) = {worst_f32:.3g} <= 1")


def summary_rows(out, name):
    csv_path = t.path(f"{name}_summary.csv")
    t.run(RANKS, "summary", out, "--csv", csv_path)
    with open(csv_path) as f:
        return list(csv.DictReader(f))


def check_sampling(name):
    dim, numpy_logp, reference, names = models.MODELS[name]
    ref_mean, ref_sd = reference()
    out = t.path(f"{name}.h5")
    if os.path.exists(out):
        os.remove(out)
    _, stdout, stderr = t.run(RANKS, "hmc", "--target", f"plugin:{os.path.join(PLUGIN_DIR, name + '.so')}",
                              "--chains", CHAINS, "--seed", SEED, "--backend", "cpu", "--out", out, "--quiet",
                              timeout=900)
    with h5py.File(out, "r") as f:
        draws = f["posterior/x"][...]
        accept = f["sample_stats/acceptance_rate"][...]
        diverging = f["sample_stats/diverging"][...]
        lp = f["sample_stats/lp"][...]
        step = f["sample_stats/step_size"][...]
        config = {k: f.attrs[k] for k in f.attrs if k.startswith("config_")}
    print(f"--- {name}: {draws.shape[0]} chains x {draws.shape[1]} draws, dim {draws.shape[2]}, "
          f"steps {config.get('config_steps')}, warmup {config.get('config_warmup')}, adapt {config.get('config_adapt')}; "
          f"step size {np.median(step):.3g} (median), acceptance {accept.mean():.3f}, "
          f"{int(diverging.sum())} divergent of {diverging.size}")

    # The output's log p is the plugin's, at the stored draws (a check of the run's bookkeeping).
    chain0 = draws[0].astype(np.float64)
    lp_err = np.abs(lp[0] - numpy_logp(chain0)) / (1e-5 * (1.0 + np.abs(lp[0])))
    t.check(lp_err.max() <= 1, f"{name}: sample_stats/lp of chain 0 = numpy log p at its draws "
                               f"(worst / (1e-5 (1 + |lp|)) {lp_err.max():.3g})")

    rows = summary_rows(out, name)
    t.check(len(rows) == dim, f"{name}: summary has {len(rows)} rows for dim {dim}")
    for k, row in enumerate(rows[:dim]):
        label = f"{name} x[{k}] ({names[k]})"
        mean, sd, mcse = float(row["mean"]), float(row["sd"]), float(row["mcse_mean"])
        rhat, ess_bulk = float(row["r_hat"]), float(row["ess_bulk"])
        z = abs(mean - ref_mean[k]) / mcse if mcse > 0 else np.inf
        t.check(z < 4, f"{label}: mean {mean:.6g} vs reference {ref_mean[k]:.6g}: |diff| / mcse {z:.2f} < 4 "
                       f"(mcse {mcse:.3g}, ess_bulk {ess_bulk:.0f})")
        ratio = sd / ref_sd[k]
        t.check(abs(ratio - 1) <= 0.1, f"{label}: sd {sd:.6g} vs reference {ref_sd[k]:.6g}: ratio {ratio:.3f} within 10%")
        t.check(rhat < 1.01, f"{label}: R-hat {rhat:.4f} < 1.01")

    # Not a bar, a description for the reader: where the chains sit against the reference.
    chain_z = np.abs(draws.mean(axis=1) - ref_mean) / ref_sd                 # [chain, dim]
    near = int((chain_z.max(axis=1) < 3).sum())
    worst = int(chain_z.max(axis=1).argmax())
    print(f"info {name}: {near} of {draws.shape[0]} chains have every parameter's chain mean within 3 reference sds "
          f"of the reference mean; the farthest, chain {worst}, has means {np.array2string(draws[worst].mean(axis=0), precision=4)} "
          f"(median lp {np.median(lp[worst]):.4g} against {np.median(lp):.4g} over all chains)")

    chain_accept = accept.mean(axis=1)
    low = np.flatnonzero(chain_accept <= 0.05)
    t.check(low.size == 0, f"{name}: every chain's mean acceptance > 0.05 (min {chain_accept.min():.3f}; "
                           f"{low.size} chain(s) at or below: {low[:10].tolist()})")
    constant = np.flatnonzero((draws.std(axis=1) == 0).any(axis=1))
    t.check(constant.size == 0, f"{name}: no chain with a constant parameter ({constant.size} chain(s): "
                                f"{constant[:10].tolist()})")


def check_starts_far_out():
    """model_regression is meant to start far out, as in the issue it stands for: log p at starts
    uniform in (-2, 2) (a numpy draw of them, the model's property, not the sampler's)."""
    starts = np.random.default_rng(7).uniform(-2, 2, (CHAINS, 4))
    logp = models.regression_logp(starts)
    q10, q50, q90 = np.percentile(logp, [10, 50, 90])
    t.check(q50 < -1e4 and q10 < -1e5, f"model_regression: log p at uniform(-2, 2) starts: 10/50/90% "
                                       f"{q10:.3g} / {q50:.3g} / {q90:.3g} (posterior ~ {models.regression_logp(models.regression_reference()[0])[0]:.3g})")


def check_frozen_report():
    """A run that leaves chains stuck (the far-out regression with a fixed step, no warmup) names
    them: the closing warning's count and ids are those of the chains whose draws never change."""
    out = t.path("frozen.h5")
    if os.path.exists(out):
        os.remove(out)
    _, stdout, _ = t.run(RANKS, "hmc", "--target", f"plugin:{os.path.join(PLUGIN_DIR, 'model_regression.so')}",
                         "--chains", CHAINS, "--seed", SEED, "--backend", "cpu", "--out", out, "--adapt", "none",
                         "--warmup", 0, "--step-size", 1e-3, "--draws", 50)
    draws = t.read(out, "posterior/x")
    frozen = [c for c in range(draws.shape[0]) if np.all(draws[c] == draws[c, 0])]
    line = [x for x in stdout.splitlines() if "never moved" in x]
    named = []
    if line:
        inside = line[0].split("(stuck: ")[1].split(")")[0]
        named = [int(x) for x in inside.replace(", ...", "").split(", ")]
    t.check(len(frozen) > 0, f"frozen report: the fixed-step run leaves chains stuck ({frozen})")
    t.check(bool(line) and line[0].startswith(f"warning: {len(frozen)} chain"),
            f"frozen report: the warning counts {len(frozen)} stuck chains ({line[:1]})")
    t.check(named == frozen[:8], f"frozen report: it names {named}, the stuck chains are {frozen[:8]}")
    # dsampler summary names them too, from the moments, on any rank count.
    for ranks in (1, 3):
        text = t.run(ranks, "summary", out)[1]
        found = [x for x in text.splitlines() if "never moved" in x]
        ids = []
        if found:
            ids = [int(x) for x in found[0].split("moments):")[1].split(";")[0].replace(", ...", "").split(",")]
        t.check(len(found) == 1 and found[0].startswith(f"warning: {len(frozen)} chain") and ids == frozen[:8],
                f"frozen report: summary on {ranks} rank(s) names {ids} ({found[:1]})")


def check_stuck_restart():
    """A short warmup on the far-out regression leaves chains that never move at its end: they
    are named and restarted from healthy chains' states (positions no longer their stuck ones),
    and the run is bitwise the same on 1 and 3 ranks."""
    outs = {}
    for ranks in (1, 3):
        out = t.path(f"stuck_np{ranks}.h5")
        if os.path.exists(out):
            os.remove(out)
        _, stdout, stderr = t.run(ranks, "hmc", "--target", f"plugin:{os.path.join(PLUGIN_DIR, 'model_regression.so')}",
                                  "--chains", CHAINS, "--seed", SEED, "--backend", "cpu", "--out", out, "--warmup", 30,
                                  "--draws", 20, "--save-warmup")
        outs[ranks] = (out, stderr)
    out, stderr = outs[1]
    line = [x for x in stderr.splitlines() if "never moved in the last warmup" in x]
    t.check(len(line) == 1, f"stuck restart: one line names the stuck chains ({line})")
    if not line:
        return
    count = int(line[0].split("dsampler: ")[1].split(" chain")[0])
    named = [int(x) for x in line[0].split("(")[1].split(")")[0].replace(", ...", "").split(", ")]
    warm = t.read(out, "warmup_posterior/x")
    draws = t.read(out, "posterior/x")
    # Warmup 30: Stan's short-warmup windows leave a tail of its last 3 iterations.
    tail_frozen = [c for c in range(warm.shape[0]) if np.all(warm[c, -3:] == warm[c, -1])]
    t.check(count == len(tail_frozen) and named == tail_frozen[:8],
            f"stuck restart: {count} named {named}, chains frozen in the tail {tail_frozen}")
    moved = [c for c in tail_frozen if not np.all(draws[c, 0] == warm[c, -1])]
    t.check(moved == tail_frozen, f"stuck restart: every restarted chain starts sampling elsewhere ({moved})")
    a, b = t.datasets(outs[1][0]), t.datasets(outs[3][0])
    t.check(sorted(a) == sorted(b) and all(np.array_equal(a[k], b[k]) for k in a),
            "stuck restart: 1 and 3 ranks bitwise equal")


def main():
    # argv: the models to sample (default all); the densities of all are checked every time.
    chosen = sys.argv[1:] or list(models.MODELS)
    check_starts_far_out()
    for name in models.MODELS:
        check_density(name)
    for name in chosen:
        check_sampling(name)
    check_frozen_report()
    check_stuck_restart()
    t.finish("models " + " ".join(chosen))


if __name__ == "__main__":
    main()
