"""dsampler summary: every number of the table against ArviZ 0.22 and numpy, computed in float64
from the same float32 draws: arviz.rhat(method="rank"), arviz.ess(method="bulk"/"tail"),
arviz.mcse(method="mean"/"sd"), numpy's mean, std(ddof=1) and linear quantiles; and az.summary
itself where its shortcuts give the same numbers (even draw counts). Synthetic run.h5 files in
dsampler's layout cover iid and AR(1) chains, chains that disagree, a stuck chain, a constant
parameter, ties, odd and tiny draw counts, one chain, many parameters over uneven rank shares,
variables of two and three axes (rows A[i,j]), and a file written by `dsampler hmc`. The CSV must be byte-identical on 1 and 3 ranks."""
import math
import os

import arviz as az
import h5py
import numpy as np

import dstest as t

COLUMNS = ["mean", "sd", "mcse_mean", "mcse_sd", "q5", "q50", "q95", "ess_bulk", "ess_tail", "r_hat"]
# Same algorithm, same float64 inputs: only the FFT (FFTW vs pocketfft), the normal quantile
# (AS 241 vs Cephes) and summation order differ, each at ~1e-15 relative.
RTOL = 1e-6
ATOL = 1e-12


def write_run(name, posterior, diverging=None):
    """A run.h5 as dsampler writes it: posterior/<var> [chain, draw(, dim)] with coordinate
    datasets made dimension scales, and optionally sample_stats/diverging [chain, draw] bool."""
    p = t.path(name)
    with h5py.File(p, "w") as f:
        f.attrs["inference_library"] = "dsampler"
        group = f.create_group("posterior")
        first = next(iter(posterior.values()))
        chain = group.create_dataset("chain", data=np.arange(first.shape[0], dtype=np.int64))
        draw = group.create_dataset("draw", data=np.arange(first.shape[1], dtype=np.int64))
        chain.make_scale("chain")
        draw.make_scale("draw")
        for var, values in posterior.items():
            dataset = group.create_dataset(var, data=values, chunks=True)
            dataset.dims[0].attach_scale(chain)
            dataset.dims[1].attach_scale(draw)
            for axis in range(2, values.ndim):
                coord = group.create_dataset(f"{var}_dim_{axis - 2}", data=np.arange(values.shape[axis], dtype=np.int64))
                coord.make_scale(f"{var}_dim_{axis - 2}")
                dataset.dims[axis].attach_scale(coord)
        if diverging is not None:
            stats = f.create_group("sample_stats")
            stats.create_dataset("diverging", data=np.asarray(diverging, dtype=bool))
    return p


def reference(posterior):
    """{row name: [10 float64 values]} from ArviZ and numpy."""
    rows = {}
    for var, values in posterior.items():
        values = np.asarray(values, dtype=np.float64)
        # name[i,j,...] in C order of the trailing axes, as the summary names them.
        params = [(f"{var}[{','.join(map(str, index))}]", values[(slice(None), slice(None)) + index])
                  for index in np.ndindex(values.shape[2:])] if values.ndim > 2 else [(var, values)]
        for row, a in params:
            with np.errstate(all="ignore"):
                q5, q50, q95 = np.quantile(a, [0.05, 0.5, 0.95])
                rows[row] = [a.mean(), a.std(ddof=1), az.mcse(a, method="mean"), az.mcse(a, method="sd"), q5, q50, q95,
                             az.ess(a, method="bulk"), az.ess(a, method="tail"), az.rhat(a, method="rank")]
    return rows


def same_number(got, ref):
    """NaN where the reference is NaN, the same infinity, else within ATOL + RTOL |ref|."""
    got, ref = float(got), float(ref)
    if math.isnan(ref) or math.isnan(got):
        return math.isnan(ref) and math.isnan(got)
    if math.isinf(ref) or math.isinf(got):
        return got == ref
    return abs(got - ref) <= ATOL + RTOL * abs(ref)


def compare(case, rows, ref):
    t.check(sorted(rows) == sorted(ref), f"{case}: rows {sorted(rows)[:4]}... are the parameters {sorted(ref)[:4]}...")
    worst = (0.0, "-")
    bad = []
    for row, want in ref.items():
        got = rows.get(row)
        if got is None:
            continue
        for column, g, r in zip(COLUMNS, got, want):
            if not same_number(g, r):
                bad.append(f"{row}.{column}: got {g!r}, ArviZ/numpy {r!r}")
            elif math.isfinite(r) and r != 0:
                worst = max(worst, (abs(g - r) / abs(r), f"{row}.{column}"))
    # tol: |got - ref| <= 1e-12 + 1e-6 |ref|, NaN and inf exactly as ArviZ gives them
    t.check(not bad, f"{case}: every column within 1e-12 + 1e-6|ref| of ArviZ/numpy "
                     f"(largest relative difference {worst[0]:.2e} at {worst[1]}){': ' + '; '.join(bad[:6]) if bad else ''}")


def run_case(case, posterior, diverging=None, ranks=(1, 3), read_values=None):
    """Writes the file, runs the summary on each rank count, compares; returns rank 1's stdout.
    read_values: DSAMPLER_SUMMARY_READ_VALUES for the runs (draws read per rank and round)."""
    p = write_run(f"{case}.h5", posterior, diverging)
    ref = reference(posterior)
    texts, stdout = [], None
    for np_ranks in ranks:
        out = t.path(f"{case}.np{np_ranks}.csv")
        if read_values is not None:
            os.environ["DSAMPLER_SUMMARY_READ_VALUES"] = str(read_values)
        try:
            _, stdout_r, _ = t.run(np_ranks, "summary", p, "--csv", out)
        finally:
            os.environ.pop("DSAMPLER_SUMMARY_READ_VALUES", None)
        stdout = stdout if stdout is not None else stdout_r
        header, rows = t.read_csv(out)
        t.check(header == ["variable"] + COLUMNS, f"{case} np{np_ranks}: CSV header {header}")
        compare(f"{case} np{np_ranks}", rows, ref)
        with open(out) as f:
            texts.append(f.read())
    t.check(all(text == texts[0] for text in texts), f"{case}: CSV byte-identical on {' and '.join(map(str, ranks))} ranks")
    if diverging is not None:
        n = int(np.sum(diverging))
        t.check(f" {n} divergent" in stdout, f"{case}: table reports {n} divergent transitions")
    return stdout, ref


def ar1(rng, chains, draws, dims, rho, mean=0.0):
    x = np.empty((chains, draws, dims))
    x[:, 0] = rng.standard_normal((chains, dims))
    noise = rng.standard_normal((chains, draws, dims)) * math.sqrt(1 - rho * rho)
    for d in range(1, draws):
        x[:, d] = rho * x[:, d - 1] + noise[:, d]
    return (x + mean).astype(np.float32)


def main():
    rng = np.random.default_rng(20240611)
    f32 = np.float32

    # iid normal, different locations and scales; divergences recorded.
    iid = (rng.standard_normal((4, 1000, 3)) * [1.0, 0.01, 30.0] + [0.0, 5.0, -100.0]).astype(f32)
    diverging = rng.random((4, 1000)) < 0.01
    stdout, ref = run_case("iid", {"x": iid}, diverging)
    t.check("x[0]" in stdout and "ess_bulk" in stdout and "r_hat" in stdout, "iid: the table has rows and columns")
    t.check(all(0.99 < ref[f"x[{j}]"][9] < 1.01 for j in range(3)), "iid: R-hat near 1 (sanity of the case)")

    # AR(1) with rho = 0.95: ESS far below the draw count.
    ar = ar1(rng, 4, 2000, 2, 0.95)
    _, ref = run_case("ar1", {"x": ar})
    t.check(all(ref[f"x[{j}]"][7] < 1000 for j in range(2)), "ar1: bulk ESS well below 8000 draws (sanity)")

    # Chains that disagree: R-hat large, and the warning says so.
    means = (rng.standard_normal((4, 500, 2)) + np.array([0.0, 0.0, 3.0, 3.0])[:, None, None]).astype(f32)
    stdout, ref = run_case("means", {"x": means})
    t.check(ref["x[0]"][9] > 1.5, f"means: R-hat {ref['x[0]'][9]:.3f} large (sanity)")
    t.check("warning: r_hat > 1.01" in stdout, "means: the table warns about R-hat")

    # A stuck chain (x[0], chain 2 constant) and a parameter constant everywhere (x[1]): no
    # crash, and NaN/finite exactly where ArviZ has them.
    stuck = rng.standard_normal((4, 400, 3)).astype(f32)
    stuck[2, :, 0] = 0.25
    stuck[:, :, 1] = 2.0
    run_case("stuck", {"x": stuck})

    # Ties everywhere (small integers): average ranks and quantile thresholds on data values.
    ties = rng.poisson(2.0, (4, 300, 2)).astype(f32)
    run_case("ties", {"x": ties})

    # Odd draws (the split drops the middle draw), few draws, fewer than 4, one chain.
    run_case("odd", {"x": ar1(rng, 4, 101, 2, 0.5, mean=1.0)})
    run_case("few", {"x": rng.standard_normal((3, 10, 3)).astype(f32)})
    run_case("tiny", {"x": rng.standard_normal((2, 3, 2)).astype(f32)})
    run_case("onechain", {"x": ar1(rng, 1, 200, 2, 0.3)})

    # Many parameters over uneven rank shares, a scalar variable, a float64 variable, and a
    # variable with fewer parameters than ranks (one rank reads nothing).
    # Variables of several axes (a Stan model's matrix, an array of vectors) beside a scalar, the
    # ranks sharing their parameters in C order: rows A[i,j] and B[i,j,k].
    run_case("axes", {"A": ar1(rng, 4, 60, 6, 0.3).reshape(4, 60, 3, 2), "s": ar1(rng, 4, 60, 1, 0.1)[..., 0],
                      "B": ar1(rng, 4, 60, 8, 0.0).reshape(4, 60, 2, 2, 2)}, ranks=(1, 2, 3))
    # Reads of a few parameters a round (3 of 4 x 60 draws), so a rank's share of a [5, 7] matrix
    # takes several rounds whose ranges start and end inside rows: each read is a union of boxes.
    run_case("rounds", {"A": ar1(rng, 4, 60, 35, 0.3).reshape(4, 60, 5, 7),
                        "C": ar1(rng, 4, 60, 24, 0.1).reshape(4, 60, 2, 3, 4), "v": ar1(rng, 4, 60, 13, 0.5)},
             ranks=(1, 2, 3), read_values=3 * 4 * 60)
    run_case("many", {"x": ar1(rng, 5, 50, 37, 0.2), "sigma": np.exp(rng.standard_normal((5, 50))).astype(f32),
                      "w": rng.standard_normal((5, 50, 2)), "z": rng.standard_normal((5, 50, 1)).astype(f32)})

    # az.summary agrees (even draws: its shortcuts equal the individual functions).
    idata = az.from_dict(posterior={"x": ar.astype(np.float64)})
    table = az.summary(idata, round_to="none")
    _, rows = t.read_csv(t.path("ar1.np3.csv"))
    bad = [f"{row}.{c}" for row in table.index for c in ("mean", "sd", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat")
           if not same_number(rows[row][COLUMNS.index(c)], table.loc[row, c])]
    # tol: |got - ref| <= 1e-12 + 1e-6 |ref|
    t.check(not bad, f"ar1: az.summary's columns within 1e-12 + 1e-6|ref| {bad}")

    # A file written by dsampler hmc, summarised on 3 ranks.
    hmc = t.path("summary_hmc.h5")
    t.run(2, "hmc", "--dim", 3, "--chains", 4, "--draws", 200, "--warmup", 50, "--seed", 3, "--out", hmc, "--quiet")
    with h5py.File(hmc, "r") as f:
        draws = f["posterior/x"][...]
        n_divergent = int(np.sum(f["sample_stats/diverging"][...]))
    out = t.path("summary_hmc.csv")
    _, stdout, _ = t.run(3, "summary", hmc, "--csv", out)
    compare("hmc file", t.read_csv(out)[1], reference({"x": draws}))
    t.check(f" {n_divergent} divergent" in stdout, f"hmc file: {n_divergent} divergent reported")

    # --var, --max-rows.
    p = t.path("many.h5")
    _, stdout, _ = t.run(3, "summary", p, "--var", "sigma", "--csv", t.path("sigma.csv"))
    t.check(list(t.read_csv(t.path("sigma.csv"))[1]) == ["sigma"], "--var sigma: one row")
    _, stdout, _ = t.run(2, "summary", p, "--max-rows", 5)
    body = [line for line in stdout.splitlines() if line.startswith(("x[", "w[", "z[", "sigma"))]
    t.check(len(body) == 5 and "... 36 more; dsampler summary" in stdout, f"--max-rows 5: 5 rows, then '... 36 more' ({len(body)} rows)")

    # Bad input: one clear message from rank 0, non-zero exit on every rank.
    no_posterior = t.path("no_posterior.h5")
    with h5py.File(no_posterior, "w") as f:
        f.create_group("sample_stats").create_dataset("lp", data=np.zeros((2, 5), np.float32))
    wrong_shape = t.path("wrong_shape.h5")
    with h5py.File(wrong_shape, "w") as f:
        f.create_group("posterior").create_dataset("x", data=np.zeros((2, 5) + (1,) * 9, np.float32))
    not_hdf5 = t.path("not_hdf5.h5")
    with open(not_hdf5, "w") as f:
        f.write("not an HDF5 file\n")
    cases = [
        (["summary", t.path("missing.h5")], "missing.h5: cannot open: No such file"),
        (["summary", not_hdf5], "not_hdf5.h5: not an HDF5 file"),
        (["summary", no_posterior], "no group 'posterior'"),
        (["summary", wrong_shape], "posterior/x has shape [2, 5, 1, 1, 1, 1, 1, 1, 1, 1, 1]; expected [chain, draw] or "
                                   "[chain, draw, dim, ...] (at most 8 axes after draw)"),
        (["summary", p, "--var", "nope"], "no variable posterior/nope (variables:"),
        (["summary", p, "--bogus"], "unknown option '--bogus'"),
        (["summary"], "no file given"),
    ]
    for args, message in cases:
        rc, _, stderr = t.run(3, *args, expect_ok=False)
        t.check(rc != 0 and message in stderr and stderr.count("dsampler: error") == 1,
                f"{' '.join(map(str, args[1:])) or '(no file)'}: exit {rc}, one error naming the problem ('{message}')")

    t.finish("summary")


if __name__ == "__main__":
    main()
