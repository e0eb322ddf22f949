#!/usr/bin/env python3
"""logistic_accuracy.py: test accuracy of a `logistic` run (HMC draws or SVGD particles) on the
held-out part of a jobs/csv_to_h5.py file: the predictive probability averaged over every draw
or particle, thresholded at 1/2. Where the file holds the generating weights (w_true), also the
generating model's accuracy on the same rows.

    python3 jobs/logistic_accuracy.py run.h5 covtype.h5

Needs numpy and h5py."""
import sys

import h5py
import numpy as np


def accuracy(run_path, data_path):
    with h5py.File(run_path, "r") as f:
        w = f["posterior/w"][...].reshape(-1, f["posterior/w"].shape[-1]).astype(np.float64)
    with h5py.File(data_path, "r") as f:
        X, y = f["X_test"][...].astype(np.float64), f["y_test"][...]
        w_true = f["w_true"][...] if "w_true" in f else None
    if len(y) == 0:
        sys.exit(f"{data_path} holds no test rows")
    prob = np.zeros(len(y))
    for start in range(0, len(w), 64):  # bounded memory for many draws
        z = X @ w[start:start + 64].T
        prob += (1.0 / (1.0 + np.exp(-z))).sum(axis=1)
    prob /= len(w)
    acc = float(np.mean((prob > 0.5) == (y > 0.5)))
    acc_true = float(np.mean(((X @ w_true) > 0) == (y > 0.5))) if w_true is not None else None
    return acc, acc_true


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    acc, acc_true = accuracy(sys.argv[1], sys.argv[2])
    print(f"test accuracy {acc:.4f}" + (f", generating model {acc_true:.4f}" if acc_true is not None else ""))


if __name__ == "__main__":
    main()
