"""Datasets for targets (--data FILE.h5, X [n, D] and y [n]) are read collectively and checked
before any work: a missing file or dataset, a wrong shape, an empty dataset, a value that is not
finite, a label other than 0/1 and a --dim that disagrees with X are each refused on every rank
with one message naming the file, the dataset and what was expected, and no output is written.
jobs/csv_to_h5.py turns a Covertype-style CSV (features, then a class label 1..7) into that
layout, standardised and split, and dsampler runs on the result.
SVGD's --batch-size: minibatch runs bitwise the same on 1 and 3 ranks, near the full-data
posterior mean, and refused for targets without data, batches larger than the data and HMC."""
import os
import subprocess
import sys

import h5py
import numpy as np

import dstest as t

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "jobs")


def data_file(name, **datasets):
    p = t.path(f"data_{name}.h5")
    with h5py.File(p, "w") as f:
        for key, value in datasets.items():
            f.create_dataset(key, data=value)
    return p


def refused(name, args, needle):
    out = t.path(f"data_bad_{name}.h5")
    if os.path.exists(out):
        os.remove(out)
    rc, _, stderr = t.run(2, "hmc", "--chains", 4, "--draws", 5, "--out", out, "--quiet", "--backend", "cpu", *args,
                          expect_ok=False, timeout=60, refusal=True)
    t.check(rc != 0 and needle in stderr and stderr.count("dsampler: error") == 1,
            f"{name}: refused once naming the input ({needle!r} in {stderr.strip().splitlines()[0] if stderr.strip() else ''!r})")
    t.check(not os.path.exists(out), f"{name}: no output written")


def errors():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(10, 4)).astype(np.float32)
    y = (rng.uniform(size=10) < 0.5).astype(np.float32)
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    y_bad = y.copy()
    y_bad[4] = 2
    lg = ["--target", "logistic", "--data"]
    refused("missing_file", lg + [t.path("no_such_data.h5")], "no_such_data.h5: cannot open: No such file")
    refused("no_X", lg + [data_file("no_X", y=y)], "no dataset 'X' (expected X [n, D] and y [n])")
    refused("no_y", lg + [data_file("no_y", X=X)], "no dataset 'y'")
    refused("X_1d", lg + [data_file("X_1d", X=X[:, 0], y=y)], "dataset 'X' has shape [10], expected X [n, D] and y [n]")
    refused("y_short", lg + [data_file("y_short", X=X, y=y[:9])], "dataset 'y' has shape [9], expected [10]")
    refused("X_empty", lg + [data_file("X_empty", X=np.zeros((0, 4), np.float32), y=np.zeros(0, np.float32))],
            "dataset 'X' is empty")
    refused("X_nan", lg + [data_file("X_nan", X=X_nan, y=y)], "X[3, 1] is not finite")
    refused("y_label", lg + [data_file("y_label", X=X, y=y_bad)], "y[4] is 2; labels must be 0 or 1")
    refused("X_text", lg + [data_file("X_text", X=np.array([[b"a", b"b"]]), y=np.zeros(1, np.float32))],
            "dataset 'X' must hold numbers")
    good = data_file("good", X=X, y=y)
    refused("dim_mismatch", lg + [good, "--dim", 5], "X has 4 columns")
    refused("no_data", ["--target", "logistic"], "the logistic target needs a dataset")
    refused("data_for_gaussian", ["--target", "gaussian", "--dim", 2, "--data", good], "the gaussian target takes no dataset")
    refused("data_twice", lg + [good, "--target-args", f"data={good}"], "give the dataset once")
    refused("cov_not_spd", ["--target", "corr-gaussian", "--target-args",
                            f"cov={data_file('cov_bad', cov=np.array([[1.0, 2.0], [2.0, 1.0]]))}"], "not positive definite")
    out = t.path("data_good.h5.out")
    t.run(2, "hmc", *lg, good, "--chains", 3, "--draws", 5, "--out", out, "--quiet", "--backend", "cpu")
    t.check(t.read(out, "posterior/w").shape == (3, 5, 4), "a good file runs: posterior/w has shape [3, 5, 4]")


def converter():
    rng = np.random.default_rng(2)
    n = 400
    features = np.hstack([rng.normal(50, 10, size=(n, 3)), rng.integers(0, 2, size=(n, 2))])
    label = np.where(features[:, 0] + 10 * rng.normal(size=n) > 50, 2, rng.integers(3, 8, size=n))
    csv = t.path("covtype_like.csv")
    np.savetxt(csv, np.column_stack([features, label]), delimiter=",", fmt="%g")
    out = t.path("covtype_like.h5")
    proc = subprocess.run([sys.executable, os.path.join(JOBS, "csv_to_h5.py"), csv, "--out", out, "--seed", "1"],
                          capture_output=True, text=True)
    t.check(proc.returncode == 0, f"csv_to_h5 on a Covertype-style CSV: exit {proc.returncode} {proc.stderr.strip()}")
    with h5py.File(out, "r") as f:
        X, y, X_test = f["X"][...], f["y"][...], f["X_test"][...]
    t.check(X.shape == (320, 5) and X_test.shape == (80, 5) and X.dtype == np.float32,
            f"csv_to_h5: X {X.shape}, X_test {X_test.shape} (80/20 split of 400 rows, 5 features)")
    t.check(set(np.unique(y)) <= {0.0, 1.0} and abs(y.mean() - (label == 2).mean()) < 0.1,
            f"csv_to_h5: labels 0/1, {y.mean():.2f} positive (class 2 share {(label == 2).mean():.2f})")
    t.check(np.allclose(X.mean(axis=0), 0, atol=1e-5) and np.allclose(X.std(axis=0), 1, atol=1e-4),
            "csv_to_h5: training features standardised")
    run = t.path("covtype_like_run.h5")
    t.run(2, "svgd", "--target", "logistic", "--data", out, "--particles", 20, "--iters", 50, "--update", "adagrad",
          "--step-size", 0.05, "--out", run, "--quiet", "--backend", "cpu")
    acc = subprocess.run([sys.executable, os.path.join(JOBS, "logistic_accuracy.py"), run, out], capture_output=True,
                         text=True)
    t.check(acc.returncode == 0 and "test accuracy" in acc.stdout, f"logistic_accuracy: {acc.stdout.strip()}")


def minibatch():
    rng = np.random.default_rng(7)
    n, d = 4000, 4
    w_true = np.array([1.0, -0.5, 0.25, 0.0])
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ w_true)))).astype(np.float32)
    data = data_file("minibatch", X=X, y=y)
    common = ["svgd", "--target", "logistic", "--data", data, "--particles", 40, "--iters", 300, "--update",
              "adagrad", "--step-size", 0.05, "--quiet", "--backend", "cpu", "--seed", 5]
    outputs = {}
    for ranks, batch in ((1, 200), (3, 200), (1, 0)):
        out = t.path(f"minibatch_np{ranks}_b{batch}.h5")
        t.run(ranks, *common, "--batch-size", batch, "--out", out)
        with h5py.File(out, "r") as f:
            outputs[(ranks, batch)] = (f["posterior/w"][...], f["sample_stats/lp"][...])
    same = all(np.array_equal(a, b) for a, b in zip(outputs[(1, 200)], outputs[(3, 200)]))
    t.check(same, "--batch-size 200: particles and lp bitwise the same on 1 and 3 ranks")
    differs = not np.array_equal(outputs[(1, 200)][0], outputs[(1, 0)][0])
    t.check(differs, "--batch-size 200 runs on minibatches (particles differ from the full-data run)")
    mean_batch = outputs[(1, 200)][0].reshape(-1, d).mean(axis=0)
    mean_full = outputs[(1, 0)][0].reshape(-1, d).mean(axis=0)
    # Posterior sd here is about 1/sqrt(n * 0.2) ~ 0.035 per coefficient. With a constant step the
    # last minibatches' noise stays in the particles: their mean lies a few posterior sds (0.115 at
    # this seed) from the full-data run's, not on it. Within 0.15 = 4.3 sds.
    t.check(np.max(np.abs(mean_batch - mean_full)) < 0.15,
            f"minibatch particle mean {np.round(mean_batch, 3)} within 0.15 of the full-data mean "
            f"{np.round(mean_full, 3)}")
    for name, args, needle in (
            ("batch_no_data", ["svgd", "--target", "gaussian", "--dim", 2, "--batch-size", 5],
             "--batch-size: only the logistic target draws minibatches"),
            ("batch_too_big", ["svgd", "--target", "logistic", "--data", data, "--batch-size", n + 1],
             f"--batch-size {n + 1}: expected 1 to the {n} rows of --data"),
            ("batch_hmc", ["hmc", "--target", "logistic", "--data", data, "--batch-size", 5],
             "unknown option '--batch-size' for dsampler hmc"),
            ("batch_negative", ["svgd", "--target", "logistic", "--data", data, "--batch-size", -3],
             "--batch-size: expected a positive number of data rows, got -3")):
        out = t.path(f"minibatch_bad_{name}.h5")
        rc, _, stderr = t.run(2, *args, "--out", out, "--quiet", "--backend", "cpu", expect_ok=False, timeout=60)
        t.check(rc != 0 and needle in stderr and stderr.count("dsampler: error") == 1,
                f"{name}: refused once ({needle!r} in {stderr.strip().splitlines()[0] if stderr.strip() else ''!r})")
        t.check(not os.path.exists(out), f"{name}: no output written")


if __name__ == "__main__":
    errors()
    converter()
    minibatch()
    t.finish("targets_data")
