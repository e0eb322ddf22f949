"""Statistical checks. HMC on N(0, I_64), fixed step 0.1 (no adaptation), L = 10, 2048 chains: per-dimension means
within 5 Monte Carlo standard errors of 0 (MCSE from the spread of independent chains' means)
and variances within 0.05 of 1. SVGD on N(0, I_2) from particles started around (4, -3) with
spread 0.3: the mean moves to within 0.15 of 0 and the covariance to within 0.25 of I
(entrywise), from a start 5 and 0.9 away."""
import numpy as np

import dstest as t


def hmc():
    out = t.path("stats_hmc.h5")
    t.run(2, "hmc", "--dim", 64, "--chains", 2048, "--warmup", 100, "--adapt", "none", "--jitter", 0, "--draws", 200, "--steps", 10,
          "--step-size", 0.1, "--seed", 7, "--out", out, "--quiet", "--backend", "cpu", timeout=900)
    x = t.read(out, "posterior/x").astype(np.float64)  # [chain, draw, dim]
    chain_means = x.mean(axis=1)
    mean = chain_means.mean(axis=0)
    mcse = chain_means.std(axis=0, ddof=1) / np.sqrt(x.shape[0])
    z = np.abs(mean) / mcse
    t.check(np.all(z < 5), f"hmc: all 64 means within 5 MCSE of 0 (max |mean|/MCSE {z.max():.2f})")
    var = x.reshape(-1, 64).var(axis=0)
    t.check(np.all(np.abs(var - 1) < 0.05), f"hmc: variances in [0.95, 1.05] (range {var.min():.3f}..{var.max():.3f})")
    acc = t.read(out, "sample_stats/acceptance_rate")
    t.check(0.9 < acc.mean() <= 1.0, f"hmc: mean acceptance {acc.mean():.3f} in (0.9, 1] for step 0.1")


def svgd():
    rng = np.random.default_rng(3)
    x0 = (np.array([4.0, -3.0]) + 0.3 * rng.normal(size=(200, 2))).astype(np.float32)
    init = t.write_init("stats_svgd_init.h5", x0)
    out = t.path("stats_svgd.h5")
    t.run(2, "svgd", "--dim", 2, "--particles", 200, "--iters", 1000, "--step-size", 0.1, "--init", init,
          "--seed", 1, "--out", out, "--quiet", "--backend", "cpu")
    x = t.read(out, "posterior/x")[0].astype(np.float64)
    mean, cov = x.mean(axis=0), np.cov(x.T)
    start_cov = np.cov(x0.T.astype(np.float64))
    t.check(np.linalg.norm(mean) < 0.15, f"svgd: |mean| {np.linalg.norm(mean):.3f} < 0.15 (start {np.linalg.norm(x0.mean(0)):.2f})")
    err = np.abs(cov - np.eye(2)).max()
    t.check(err < 0.25, f"svgd: max |cov - I| {err:.3f} < 0.25 (start {np.abs(start_cov - np.eye(2)).max():.2f})")


if __name__ == "__main__":
    hmc()
    svgd()
    t.finish("statistics")
