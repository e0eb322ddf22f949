"""HMC output options against the full output of the same seed: --thin K and --output-chains M
write exactly the slices [:M, ::K] of the full run's draws and statistics; the group `moments`
equals float64 numpy over the kept draws of every chain; a run extended by `resume --draws`
equals one that ran that long from the start (moments included)."""
import os
import shutil
import time

import numpy as np

import dstest as t

BASE = ["hmc", "--dim", 4, "--chains", 9, "--warmup", 60, "--steps", 4, "--seed", 21, "--target", "gaussian",
        "--target-args", "mean=0.5,scale=1.5", "--backend", "cpu", "--quiet", "--save-warmup"]


def moments_reference(draws):
    """draws [chains, n, dim] -> per-chain mean and var (ddof 1), pooled mean and var (ddof 1)."""
    x = np.asarray(draws, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1])
    return x.mean(axis=1), x.var(axis=1, ddof=1), flat.mean(axis=0), flat.var(axis=0, ddof=1)


def check_moments(label, out, draws):
    ref = moments_reference(draws)
    names = ("moments/chain_mean", "moments/chain_var", "moments/mean", "moments/var")
    for name, want in zip(names, ref):
        got = t.read(out, name)
        # Float32 Welford over n <= 80 draws of values O(1): tol + |ref| eps, tol 1e-4, eps 1e-4.
        err = np.max(np.abs(got - want) / (1e-4 + np.abs(want) * 1e-4)) if got.shape == want.shape else np.inf
        t.check(err <= 1.0, f"{label}: {name} vs float64 numpy (scaled error {err:.3g} <= 1)")


def main():
    full = t.path("output_full.h5")
    t.run(1, *BASE, "--draws", 50, "--out", full)
    ref = t.datasets(full)
    x_full = ref["posterior/x"]
    t.check(x_full.shape == (9, 50, 4), f"full output shape {x_full.shape}")
    check_moments("full", full, x_full)

    for ranks, thin, chains in ((1, 3, 9), (3, 3, 4), (2, 7, 1), (4, 1, 5)):
        out = t.path(f"output_thin{thin}_m{chains}_np{ranks}.h5")
        t.run(ranks, *BASE, "--draws", 50, "--thin", thin, "--output-chains", chains, "--out", out)
        got = t.datasets(out)
        for name in ("posterior/x", "sample_stats/lp", "sample_stats/acceptance_rate", "sample_stats/step_size",
                     "sample_stats/diverging", "sample_stats/energy", "warmup_posterior/x", "warmup_sample_stats/lp"):
            want = ref[name][:chains, ::thin]
            t.check(got[name].shape == want.shape and np.array_equal(got[name], want),
                    f"np{ranks} --thin {thin} --output-chains {chains}: {name} == full[:{chains}, ::{thin}]")
        t.check(np.array_equal(got["posterior/draw"], np.arange(len(range(0, 50, thin)))),
                f"np{ranks} thin {thin}: draw coordinate 0..{len(range(0, 50, thin)) - 1}")
        # Moments cover every chain, over the kept (thinned) draws.
        check_moments(f"np{ranks} thin {thin} chains {chains}", out, x_full[:, ::thin])

    # summary: every chain's classic R-hat from the moments, when the draws of only 4 are stored,
    # equal to float64 numpy over the full run's thinned draws; the same text on 1 and 3 ranks.
    subset = t.path("output_thin3_m4_np3.h5")
    texts = [t.run(ranks, "summary", subset)[1] for ranks in (1, 3)]
    t.check(texts[0] == texts[1], "summary with moments: the same text on 1 and 3 ranks")
    lines = texts[0].splitlines()
    head = [i for i, line in enumerate(lines) if line.split()[-1:] == ["r_hat_classic"]]
    t.check(len(head) == 1 and "all 9 chains" in texts[0], "summary names all 9 chains from their moments")
    x = x_full[:, ::3].astype(np.float64)
    n = x.shape[1]
    within = x.var(axis=1, ddof=1).mean(axis=0)
    between_n = x.mean(axis=1).var(axis=0, ddof=1)
    r_hat = np.sqrt(((n - 1) / n * within + between_n) / within)
    if head:
        got = np.array([float(line.split()[3]) for line in lines[head[0] + 1:head[0] + 5]])
        # Printed to 4 decimals; float32 moments: tol 1e-4 + |ref| 1e-5.
        err = np.max(np.abs(got - r_hat) - (1e-4 + np.abs(r_hat) * 1e-5))
        t.check(err <= 0, f"classic R-hat from moments {got} vs float64 numpy {np.round(r_hat, 5)}")

    # An output its file system cannot hold: refused before anything is allocated or created
    # (4e15 bytes asked: no disk here has them).
    huge = t.path("output_huge.h5")
    if os.path.exists(huge):
        os.remove(huge)
    start = time.time()
    rc, _, stderr = t.run(2, "hmc", "--dim", 1000, "--chains", 1000000, "--draws", 1000000, "--backend", "cpu",
                          "--out", huge, expect_ok=False)
    errors = [line for line in stderr.splitlines() if "error" in line]
    t.check(rc != 0 and len(errors) == 1 and f"--out {huge}" in errors[0] and "GB free" in errors[0],
            f"an output larger than the free space is refused naming --out ({errors})")
    t.check(not os.path.exists(huge) and time.time() - start < 30,
            f"... before the file is created, in {time.time() - start:.1f} s")

    # Extending a finished run by resume == running that long from the start, moments included.
    long_run = t.path("output_long.h5")
    t.run(1, *BASE, "--draws", 80, "--thin", 2, "--output-chains", 5, "--out", long_run)
    short_run = t.path("output_short.h5")
    ckpt = t.path("output_short.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(3, *BASE, "--draws", 50, "--thin", 2, "--output-chains", 5, "--out", short_run, "--checkpoint-every", 40,
          "--checkpoint-dir", ckpt)
    t.run(2, "resume", ckpt, "--draws", 80, "--quiet")
    a, b = t.datasets(long_run), t.datasets(short_run)
    for name in sorted(a):
        t.check(name in b and np.array_equal(a[name], b[name]), f"resume --draws 80 == direct run: {name}")
    t.finish("hmc.output")


if __name__ == "__main__":
    main()
