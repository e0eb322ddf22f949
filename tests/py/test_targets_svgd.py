"""The SVGD paper's two classic runs, scaled down, on the CPU backend.

1-D mixture toy: 100 particles from N(-10, 1), adagrad, step 0.1, 1000 iterations, on
1/3 N(-2, 1) + 2/3 N(2, 1). Bounds: the share of particles above 0 within 0.08 of the target's
mass there (0.659); the particles below 0 average within 0.3 of -2, those above within 0.3 of 2;
the particle mean within 0.3 of 2/3 and the variance within 20% of 41/9.

Bayesian logistic regression: a Covertype-shaped synthetic set from jobs/csv_to_h5.py
(12500 x 54 from a known weight vector, 20% held out), 100 particles, adagrad, step 0.05,
300 iterations, N(0, 1) prior. The test accuracy from jobs/logistic_accuracy.py (predictive
probability averaged over particles) is within 0.01 of the generating model's on the same rows,
and better than the starting particles'. The particles are bitwise the same on 1 and 3 ranks."""
import os
import subprocess
import sys

import numpy as np

import dstest as t

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "jobs")
sys.path.insert(0, JOBS)
import logistic_accuracy  # noqa: E402


def mixture():
    x0 = np.random.default_rng(0).normal(-10.0, 1.0, size=(100, 1))
    init = t.write_init("svgd_mixture_init.h5", x0)
    out = t.path("svgd_mixture.h5")
    t.run(2, "svgd", "--target", "mixture1d", "--particles", 100, "--iters", 1000, "--update", "adagrad",
          "--step-size", 0.1, "--init", init, "--seed", 1, "--out", out, "--quiet", "--backend", "cpu")
    x = t.read(out, "posterior/x")[0, :, 0].astype(np.float64)
    share = (x > 0).mean()
    mass = 1 / 3 * 0.0227501 + 2 / 3 * 0.9772499
    t.check(abs(share - mass) <= 0.08, f"mixture1d: {share:.2f} of particles above 0, target mass {mass:.3f} (bound 0.08)")
    left, right = x[x < 0].mean(), x[x > 0].mean()
    t.check(abs(left + 2) <= 0.3 and abs(right - 2) <= 0.3,
            f"mixture1d: particles below 0 average {left:.2f}, above 0 {right:.2f} (modes -2 and 2, bound 0.3)")
    t.check(abs(x.mean() - 2 / 3) <= 0.3, f"mixture1d: particle mean {x.mean():.3f}, target 0.667 (bound 0.3)")
    t.check(abs(x.var() / (41 / 9) - 1) <= 0.2, f"mixture1d: particle variance {x.var():.3f}, target 4.556 (bound 20%)")


def logistic():
    data = t.path("svgd_logistic.h5")
    subprocess.run([sys.executable, os.path.join(JOBS, "csv_to_h5.py"), "--synthetic", "12500", "54", "--seed", "3",
                    "--out", data], check=True, capture_output=True)
    args = ["svgd", "--target", "logistic", "--data", data, "--particles", 100, "--update", "adagrad",
            "--step-size", 0.05, "--seed", 1, "--quiet", "--backend", "cpu"]
    start = t.path("svgd_logistic_start.h5")
    t.run(2, *args, "--iters", 0, "--out", start)
    out = t.path("svgd_logistic.h5.out")
    t.run(2, *args, "--iters", 300, "--out", out, timeout=600)
    acc_start, _ = logistic_accuracy.accuracy(start, data)
    acc, acc_true = logistic_accuracy.accuracy(out, data)
    t.check(abs(acc - acc_true) <= 0.01,
            f"logistic: SVGD test accuracy {acc:.4f}, generating model {acc_true:.4f} (bound 0.01; start {acc_start:.4f})")
    t.check(acc > acc_start + 0.05, f"logistic: accuracy rose from {acc_start:.4f} to {acc:.4f}")
    outputs = []
    for ranks in (1, 3):
        o = t.path(f"svgd_logistic_np{ranks}.h5")
        t.run(ranks, *args, "--iters", 15, "--out", o)
        outputs.append(t.datasets(o))
    same = outputs[0].keys() == outputs[1].keys() and all(
        outputs[0][k].tobytes() == outputs[1][k].tobytes() for k in outputs[0])
    t.check(same, f"logistic SVGD: 3 ranks bitwise equal to 1 rank ({len(outputs[0])} datasets)")


if __name__ == "__main__":
    mixture()
    logistic()
    t.finish("targets_svgd")
