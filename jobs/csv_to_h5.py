#!/usr/bin/env python3
"""csv_to_h5.py: makes a dataset file for dsampler's `logistic` target (--data FILE.h5).

Writes X [n_train, D] float32 and y [n_train] float32 (0/1), the training part that the target
reads, and X_test, y_test, the held-out part that jobs/logistic_accuracy.py scores. Features are
standardised with the training part's mean and sd (constant columns are left centred).

From a CSV whose rows are features then a label (the label column is the last unless
--label-column says otherwise); labels equal to --positive become 1, all others 0. For the UCI
Covertype file (covtype.data or covtype.data.gz: 581012 rows, 54 features, cover type 1..7 last)
the default --positive 2 (Lodgepole Pine, the largest class) gives its usual binary task:

    python3 jobs/csv_to_h5.py covtype.data.gz --out covtype.h5

Without a file, --synthetic N D draws a dataset of that shape from a known weight vector
(stored as w_true): rows X ~ N(0, I), y ~ Bernoulli(sigmoid(X w_true)), |w_true| = --norm:

    python3 jobs/csv_to_h5.py --synthetic 581012 54 --out covtype_synthetic.h5

Needs numpy and h5py."""
import argparse
import sys

import h5py
import numpy as np


def read_csv(path, label_column, positive, skip_header):
    try:
        table = np.loadtxt(path, delimiter=",", dtype=np.float64, skiprows=skip_header, ndmin=2)
    except (OSError, ValueError) as e:
        sys.exit(f"csv_to_h5: cannot read {path} as numeric CSV: {e}")
    if table.shape[1] < 2:
        sys.exit(f"csv_to_h5: {path} has {table.shape[1]} column(s); expected features and a label")
    labels = table[:, label_column]
    features = np.delete(table, label_column % table.shape[1], axis=1)
    if not np.all(np.isfinite(features)):
        row, col = np.argwhere(~np.isfinite(features))[0]
        sys.exit(f"csv_to_h5: {path}: row {row}, feature {col} is not finite")
    return features, (labels == positive).astype(np.float32)


def synthetic(n, d, norm, rng):
    w_true = rng.normal(size=d)
    w_true *= norm / np.linalg.norm(w_true)
    X = rng.normal(size=(n, d))
    y = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-X @ w_true))).astype(np.float32)
    return X, y, w_true


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", nargs="?", help="input CSV (may be .gz)")
    parser.add_argument("--out", required=True, help="output HDF5 file")
    parser.add_argument("--synthetic", nargs=2, type=int, metavar=("N", "D"), help="draw N rows of D features instead")
    parser.add_argument("--norm", type=float, default=2.0, help="|w_true| for --synthetic (default 2)")
    parser.add_argument("--label-column", type=int, default=-1, help="column of the label (default: last)")
    parser.add_argument("--positive", type=float, default=2, help="label value that becomes y = 1 (default 2)")
    parser.add_argument("--skip-header", type=int, default=0, help="header lines to skip")
    parser.add_argument("--test-fraction", type=float, default=0.2, help="held-out share (default 0.2)")
    parser.add_argument("--intercept", action="store_true", help="append a column of ones to X")
    parser.add_argument("--seed", type=int, default=0, help="seed of the split and of --synthetic")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    w_true = None
    if args.synthetic:
        n, d = args.synthetic
        if n < 2 or d < 1:
            sys.exit("csv_to_h5: --synthetic needs N >= 2 and D >= 1")
        X, y, w_true = synthetic(n, d, args.norm, rng)
    elif args.csv:
        X, y = read_csv(args.csv, args.label_column, args.positive, args.skip_header)
    else:
        sys.exit("csv_to_h5: give a CSV file or --synthetic N D")
    if not 0 <= args.test_fraction < 1:
        sys.exit("csv_to_h5: --test-fraction must be in [0, 1)")

    order = rng.permutation(len(y))
    n_test = int(round(args.test_fraction * len(y)))
    test, train = order[:n_test], order[n_test:]
    if not args.synthetic:  # synthetic features are already standard
        mean, sd = X[train].mean(axis=0), X[train].std(axis=0)
        sd[sd == 0] = 1.0
        X = (X - mean) / sd
    if args.intercept:
        X = np.hstack([X, np.ones((len(y), 1))])
        if w_true is not None:
            w_true = np.append(w_true, 0.0)
    with h5py.File(args.out, "w") as f:
        f.create_dataset("X", data=X[train].astype(np.float32), chunks=True)
        f.create_dataset("y", data=y[train])
        f.create_dataset("X_test", data=X[test].astype(np.float32), chunks=True if n_test else None)
        f.create_dataset("y_test", data=y[test])
        if w_true is not None:
            f.create_dataset("w_true", data=w_true)
        f.attrs["source"] = f"synthetic {args.synthetic[0]} x {args.synthetic[1]}" if args.synthetic else str(args.csv)
        f.attrs["positive_share"] = float(y.mean())
    print(f"{args.out}: X {X[train].shape}, X_test {X[test].shape}, {100 * y.mean():.1f}% positive")


if __name__ == "__main__":
    main()
