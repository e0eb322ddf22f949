#!/usr/bin/env python3
"""h5_same.py A.h5 B.h5: exit 0 when two HDF5 files hold the same groups, datasets (shape,
dtype and every byte) and attributes, and 1 with the first differences listed otherwise. Left
out: the attributes created_at and run_id (they differ from run to run), a checkpoint's
meta_checksum (it covers the run id) and stan_model (the build cache key, which covers the
shim's text). Dimension scales are compared by the names of the scales on each axis, not by
their object references."""
import sys

import h5py
import numpy as np

IGNORED_ATTRIBUTES = {"created_at", "run_id", "meta_checksum", "stan_model", "DIMENSION_LIST", "REFERENCE_LIST"}


def attributes(obj):
    return {k: obj.attrs[k] for k in obj.attrs if k not in IGNORED_ATTRIBUTES}


def scales(dataset):
    return [[scale.name for scale in axis.values()] for axis in dataset.dims]


def same_value(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return a.tobytes() == b.tobytes()   # bitwise: NaN payloads and signed zeros count
    return bool(np.array_equal(a, b))


def compare(a, b, path, out):
    for name, value in attributes(a).items():
        other = attributes(b)
        if name not in other or not same_value(value, other[name]):
            out.append(f"{path}: attribute {name} differs")
    for name in attributes(b):
        if name not in attributes(a):
            out.append(f"{path}: attribute {name} only in the second file")
    if isinstance(a, h5py.Dataset):
        if not isinstance(b, h5py.Dataset):
            out.append(f"{path}: a dataset in the first file only")
        elif not same_value(a[()], b[()]):
            out.append(f"{path}: values differ (shapes {a.shape} and {b.shape})")
        elif scales(a) != scales(b):
            out.append(f"{path}: dimension scales differ: {scales(a)} and {scales(b)}")
        return
    names_a, names_b = set(a.keys()), set(b.keys())
    for name in sorted(names_a ^ names_b):
        out.append(f"{path}/{name}: in one file only")
    for name in sorted(names_a & names_b):
        compare(a[name], b[name], f"{path}/{name}", out)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: h5_same.py A.h5 B.h5")
    differences = []
    with h5py.File(sys.argv[1], "r") as a, h5py.File(sys.argv[2], "r") as b:
        compare(a, b, "", differences)
    for line in differences[:20]:
        print(line)
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
