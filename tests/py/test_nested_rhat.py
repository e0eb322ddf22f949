"""Nested R-hat (Margossian, Hoffman, Sountsov, Riou-Durand, Vehtari, Gelman, Bayesian Analysis
2024) in `dsampler summary`, and `dsampler hmc --chains-per-start K`, which makes the superchains
it is computed over.

- r_hat_nested against a float64 numpy implementation written here from the paper's formulas,
  on outputs of real runs (summaries on 1 and 3 ranks byte-identical) and on crafted files where
  the superchains disagree, agree, have one draw per chain, or one chain per superchain; the
  other columns unchanged by its presence; no column without superchains.
- --chains-per-start: after one step of 1e-9 the positions are the starts; chains of one
  superchain share the start an independent Philox draws for its first chain; K = 1 is the run
  without the option, bit for bit; bad values refused with one error line naming the option;
  `resume` keeps K and refuses to change it."""
import math
import os
import shutil

import h5py
import numpy as np

import dstest as t

COLUMNS = ["mean", "sd", "mcse_mean", "mcse_sd", "q5", "q50", "q95", "ess_bulk", "ess_tail", "r_hat"]
# Same formulas on the same float64 values; only summation order differs (~1e-15 relative).
RTOL = 1e-6
ATOL = 1e-12
RNG_ITERATION_INIT = 0xFFFFFFFF


def nested_rhat(x, per_superchain):
    """Nested R-hat of draws x [chain, draw], chains c of superchain c // per_superchain: the
    paper's equations 4-8 (no split, no rank normalisation), in float64."""
    x = np.asarray(x, dtype=np.float64)
    chains, n = x.shape
    k = chains // per_superchain
    y = x.reshape(k, per_superchain, n)
    chain_mean = y.mean(axis=2)                 # theta_.mk
    superchain_mean = y.mean(axis=(1, 2))       # theta_..k
    overall = superchain_mean.mean()            # theta_...
    b_nu = np.sum((superchain_mean - overall) ** 2) / (k - 1)
    if per_superchain > 1:
        b_tilde = np.sum((chain_mean - superchain_mean[:, None]) ** 2, axis=1) / (per_superchain - 1)
    else:
        b_tilde = np.zeros(k)
    w_tilde = y.var(axis=2, ddof=1).mean(axis=1) if n > 1 else np.zeros(k)
    w_nu = np.mean(b_tilde + w_tilde)
    with np.errstate(all="ignore"):
        return float(np.sqrt(1.0 + b_nu / w_nu))


def reference(draws, per_superchain):
    """{row name: nested R-hat} of a [chain, draw, dim] array."""
    return {f"x[{j}]": nested_rhat(draws[:, :, j], per_superchain) for j in range(draws.shape[2])}


def write_run(name, x, chains_per_start=None):
    """A run.h5 in dsampler's layout (as tests/py/test_summary.py writes it): posterior/x
    [chain, draw, dim] with coordinates made dimension scales; chains_per_start, when given, as
    the root attribute config_chains_per_start (a string, as dsampler writes it, or an int)."""
    p = t.path(name)
    with h5py.File(p, "w") as f:
        f.attrs["inference_library"] = "dsampler"
        if chains_per_start is not None:
            f.attrs["config_chains_per_start"] = chains_per_start
        group = f.create_group("posterior")
        chain = group.create_dataset("chain", data=np.arange(x.shape[0], dtype=np.int64))
        draw = group.create_dataset("draw", data=np.arange(x.shape[1], dtype=np.int64))
        coord = group.create_dataset("x_dim_0", data=np.arange(x.shape[2], dtype=np.int64))
        for scale, label in ((chain, "chain"), (draw, "draw"), (coord, "x_dim_0")):
            scale.make_scale(label)
        dataset = group.create_dataset("x", data=x, chunks=True)
        for axis, scale in enumerate((chain, draw, coord)):
            dataset.dims[axis].attach_scale(scale)
    return p


def same_number(got, ref):
    if math.isnan(ref) or math.isnan(got):
        return math.isnan(ref) and math.isnan(got)
    if math.isinf(ref) or math.isinf(got):
        return got == ref
    return abs(got - ref) <= ATOL + RTOL * abs(ref)


def summarize(case, p, ref, extra=(), ranks=(1, 3)):
    """Summaries of p on each rank count: the header has r_hat_nested last, every row's value
    is within tolerance of ref, the CSVs are byte-identical. Returns (rows, stdout)."""
    texts, rows, stdout = [], None, None
    for np_ranks in ranks:
        out = t.path(f"{case}.np{np_ranks}.csv")
        _, stdout_r, _ = t.run(np_ranks, "summary", p, "--csv", out, *extra)
        stdout = stdout if stdout is not None else stdout_r
        header, rows_r = t.read_csv(out)
        rows = rows if rows is not None else rows_r
        t.check(header == ["variable"] + COLUMNS + ["r_hat_nested"], f"{case} np{np_ranks}: header ends in r_hat_nested")
        bad = [f"{row}: got {rows_r[row][-1]!r}, numpy {want!r}" for row, want in ref.items()
               if row not in rows_r or not same_number(rows_r[row][-1], want)]
        worst = max([abs(rows_r[r][-1] - w) / abs(w) for r, w in ref.items()
                     if r in rows_r and math.isfinite(w) and w != 0] or [0.0])
        # tol: |got - ref| <= 1e-12 + 1e-6 |ref|; NaN and inf exactly where numpy has them
        t.check(not bad, f"{case} np{np_ranks}: r_hat_nested within 1e-12 + 1e-6|ref| of numpy "
                         f"(largest relative difference {worst:.2e}){': ' + '; '.join(bad[:4]) if bad else ''}")
        with open(out) as f:
            texts.append(f.read())
    t.check(all(text == texts[0] for text in texts), f"{case}: CSV byte-identical on {' and '.join(map(str, ranks))} ranks")
    return rows, stdout


def strip_attr(src, name):
    """A copy of src without config_chains_per_start."""
    p = t.path(name)
    shutil.copyfile(src, p)
    with h5py.File(p, "r+") as f:
        if "config_chains_per_start" in f.attrs:
            del f.attrs["config_chains_per_start"]
    return p


def test_real_runs():
    # 6 superchains of 4 chains, 30 draws each: the short-chain regime nested R-hat is made for.
    run = t.path("nested_hmc.h5")
    t.run(2, "hmc", "--chains", 24, "--chains-per-start", 4, "--draws", 30, "--warmup", 50, "--dim", 3, "--seed", 11,
          "--out", run, "--quiet")
    with h5py.File(run, "r") as f:
        draws = f["posterior/x"][...]
        attr = f.attrs["config_chains_per_start"]
    attr = attr.decode() if isinstance(attr, bytes) else attr
    t.check(attr == "4", f"hmc output records config_chains_per_start = 4 (got {attr!r})")
    rows, stdout = summarize("hmc24x4", run, reference(draws, 4))
    t.check("r_hat_nested" in stdout and "6 superchains of 4 chains" in stdout,
            "hmc24x4: the table prints r_hat_nested and says 6 superchains of 4 chains")

    # The other columns are those of the same file summarised without superchains, to the byte.
    plain = strip_attr(run, "nested_hmc_plain.h5")
    out = t.path("hmc24x4.plain.csv")
    _, stdout, _ = t.run(3, "summary", plain, "--csv", out)
    header, plain_rows = t.read_csv(out)
    t.check(header == ["variable"] + COLUMNS and "r_hat_nested" not in stdout,
            "without config_chains_per_start: no r_hat_nested column, in the CSV or the table")
    with open(out) as f:
        plain_text = f.read().splitlines()
    with open(t.path("hmc24x4.np3.csv")) as f:
        nested_text = [line.rsplit(",", 1)[0] for line in f.read().splitlines()]
    t.check(plain_text == nested_text, "the ten other columns are byte-identical with and without r_hat_nested")

    # --superchain-size overrides the file: 12 superchains of 2, and 24 of 1.
    summarize("hmc24x2", run, reference(draws, 2), extra=("--superchain-size", 2))
    summarize("hmc24x1", run, reference(draws, 1), extra=("--superchain-size", 1), ranks=(3,))
    summarize("hmc24x2.plain", plain, reference(draws, 2), extra=("--superchain-size", 2), ranks=(2,))

    # A second run on 3 ranks with an odd dimension and more superchains.
    run = t.path("nested_hmc_b.h5")
    t.run(3, "hmc", "--chains", 30, "--chains-per-start", 3, "--draws", 12, "--warmup", 40, "--dim", 5, "--seed", 4,
          "--target", "banana", "--out", run, "--quiet")
    summarize("banana30x3", run, reference(t.read(run, "posterior/x"), 3))


def test_crafted():
    rng = np.random.default_rng(20260301)
    # Superchains that disagree: 4 superchains of 5 chains, each shifted as if still near its
    # start. x[0] shifted by 0, 0.5, 1, 1.5; x[1] not shifted.
    shift = np.repeat([0.0, 0.5, 1.0, 1.5], 5)
    x = rng.standard_normal((20, 25, 2))
    x[:, :, 0] += shift[:, None]
    x = x.astype(np.float32)
    p = write_run("disagree.h5", x, "5")
    ref = reference(x, 5)
    t.check(ref["x[0]"] > 1.1, f"disagree: numpy's nested R-hat {ref['x[0]']:.4f} > 1.1 (sanity of the case)")
    rows, stdout = summarize("disagree", p, ref)
    t.check(rows["x[0]"][-1] > 1.01, f"disagree: r_hat_nested {rows['x[0]'][-1]:.4f} > 1.01")
    t.check("warning: r_hat_nested > 1.01 for 1 of 2 parameters" in stdout, "disagree: the table warns about r_hat_nested")

    # Superchains that agree (iid draws, many per superchain), a constant parameter (0/0: NaN),
    # and the attribute stored as an integer.
    x = rng.standard_normal((16, 400, 3)).astype(np.float32)
    x[:, :, 2] = 1.5
    p = write_run("agree.h5", x, np.int64(4))
    ref = reference(x, 4)
    rows, stdout = summarize("agree", p, ref)
    t.check(all(1.0 <= rows[f"x[{j}]"][-1] < 1.01 for j in range(2)),
            f"agree: r_hat_nested {[round(rows[f'x[{j}]'][-1], 5) for j in range(2)]} in [1, 1.01)")
    t.check(math.isnan(rows["x[2]"][-1]) and "warning: r_hat_nested" not in stdout,
            "agree: a constant parameter gives NaN, and no warning")

    # One draw per chain (many short chains, the paper's extreme): W~ = 0, the spread between
    # the chains of a superchain is all there is. ESS and R-hat are NaN here; nested R-hat is not.
    x = rng.standard_normal((40, 1, 2)).astype(np.float32)
    x[:20, 0, 1] += 3.0
    p = write_run("onedraw.h5", x, "10")
    rows, _ = summarize("onedraw", p, reference(x, 10))
    t.check(math.isnan(rows["x[0]"][9]) and rows["x[1]"][-1] > 1.5,
            f"onedraw: r_hat NaN, r_hat_nested finite and large for the shifted parameter ({rows['x[1]'][-1]:.3f})")

    # A NaN among one parameter's draws: NaN for it, the others as usual.
    x = rng.standard_normal((6, 50, 2)).astype(np.float32)
    x[3, 7, 0] = np.nan
    p = write_run("nan.h5", x, "2")
    summarize("nan", p, reference(x, 2), ranks=(2,))

    # The posterior is not whole superchains (e.g. --output-chains): no column, a note says why.
    x = rng.standard_normal((6, 20, 2)).astype(np.float32)
    p = write_run("partial.h5", x, "4")
    out = t.path("partial.csv")
    _, stdout, _ = t.run(2, "summary", p, "--csv", out)
    t.check(t.read_csv(out)[0] == ["variable"] + COLUMNS and "note: no r_hat_nested" in stdout,
            "6 chains with config_chains_per_start = 4: no column, and a note")
    # config_chains_per_start = 1: every chain its own start; no column.
    p = write_run("one.h5", x, "1")
    _, stdout, _ = t.run(1, "summary", p, "--csv", out)
    t.check(t.read_csv(out)[0] == ["variable"] + COLUMNS and "r_hat_nested" not in stdout,
            "config_chains_per_start = 1: no column")

    # --superchain-size that does not divide the chains, or is not a positive integer.
    for value in ("4", "0", "-2", "two"):
        rc, _, stderr = t.run(2, "summary", p, "--superchain-size", value, expect_ok=False)
        lines = t.error_lines(stderr)
        t.check(rc != 0 and len(lines) == 1 and "--superchain-size" in lines[0],
                f"summary --superchain-size {value} on 6 chains refused with one error line naming it: {lines}")


def starts_reference(seed, chains, per_start, dim):
    """Starts [chains, dim] from an independent Philox: uniform(-2, 2) keyed by the first chain
    of each chain's superchain."""
    keys = (np.arange(chains) // per_start) * per_start
    u = t.uniform(t.words(seed, keys, RNG_ITERATION_INIT, dim))
    return -2.0 + 4.0 * u


def test_chains_per_start():
    seed, chains, dim = 7, 12, 5
    tiny = ("--warmup", 0, "--draws", 1, "--steps", 1, "--step-size", "1e-9", "--adapt", "none", "--dim", dim,
            "--seed", seed, "--chains", chains, "--quiet")
    for per_start in (3, 1):
        out = t.path(f"starts{per_start}.h5")
        t.run(3, "hmc", *tiny, "--chains-per-start", per_start, "--out", out)
        q = t.read(out, "posterior/x")[:, 0, :].astype(np.float64)
        ref = starts_reference(seed, chains, per_start, dim)
        err = np.max(np.abs(q - ref))
        # tol: 1e-5 absolute: float32 rounding of the start (~2.4e-7) and one leapfrog step of
        # size 1e-9 (momenta |p| < 10: moves < 1e-8)
        t.check(err < 1e-5, f"--chains-per-start {per_start}: positions after one 1e-9 step are the independent "
                            f"Philox starts of each superchain's first chain (max |diff| {err:.2e} < 1e-5)")
        groups = q.reshape(chains // per_start, per_start, dim)
        spread_within = np.max(np.abs(groups - groups[:, :1, :]))
        spread_between = np.min(np.abs(np.diff(groups[:, 0, 0])))
        t.check(spread_within < 1e-5 and spread_between > 1e-4,
                f"--chains-per-start {per_start}: chains of a superchain start together (spread {spread_within:.1e}), "
                f"superchains apart (closest {spread_between:.1e})")

    # K = 1 is the run without the option, bit for bit, on different rank counts.
    common = ("--chains", 6, "--draws", 20, "--warmup", 30, "--dim", 3, "--seed", 5, "--quiet")
    a, b = t.path("k1_absent.h5"), t.path("k1_given.h5")
    t.run(2, "hmc", *common, "--out", a)
    t.run(3, "hmc", *common, "--chains-per-start", 1, "--out", b)
    da, db = t.datasets(a), t.datasets(b)
    same = sorted(da) == sorted(db) and all(np.array_equal(da[k], db[k], equal_nan=da[k].dtype.kind == "f")
                                            for k in da)
    t.check(same and "posterior/x" in da, f"--chains-per-start 1: every dataset ({len(da)}) bitwise as without the option")
    # and K > 1 changes the starts, hence the draws.
    c = t.path("k3.h5")
    t.run(2, "hmc", *common, "--chains-per-start", 3, "--out", c)
    t.check(not np.array_equal(t.read(a, "posterior/x"), t.read(c, "posterior/x")), "--chains-per-start 3 changes the draws")

    # Bad values: one error line naming the option (and --chains when K does not divide it).
    bad = t.path("bad.h5")
    for value, names in (("0", ["--chains-per-start"]), ("-3", ["--chains-per-start"]),
                         ("5", ["--chains-per-start", "--chains 12"]), ("x", ["--chains-per-start"])):
        rc, _, stderr = t.run(2, "hmc", "--chains", 12, "--chains-per-start", value, "--quiet", "--out", bad,
                              expect_ok=False)
        lines = t.error_lines(stderr)
        t.check(rc != 0 and len(lines) == 1 and all(n in lines[0] for n in names) and not os.path.exists(bad),
                f"--chains-per-start {value} with --chains 12 refused with one error line naming {names}: {lines}")
    ini = t.path("bad.ini")
    with open(ini, "w") as f:
        f.write("chains = 10\nchains-per-start = 4\n")
    rc, _, stderr = t.run(1, "hmc", "--config", ini, "--quiet", "--out", bad, expect_ok=False)
    lines = t.error_lines(stderr)
    t.check(rc != 0 and len(lines) == 1 and "--chains-per-start 4" in lines[0],
            f"chains-per-start = 4 in a --config file with chains = 10 refused: {lines}")
    rc, _, stderr = t.run(1, "svgd", "--particles", 8, "--chains-per-start", 2, "--quiet", "--out", bad, expect_ok=False)
    t.check(rc != 0 and any("--chains-per-start" in line for line in t.error_lines(stderr)),
            "svgd refuses --chains-per-start (HMC only)")

    # resume keeps K and refuses to change it.
    out, ckpt = t.path("resume.h5"), t.path("resume.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)  # a fresh run refuses a directory holding checkpoints
    t.run(2, "hmc", "--chains", 8, "--chains-per-start", 2, "--warmup", 10, "--draws", 10, "--dim", 2,
          "--checkpoint-every", 5, "--checkpoint-dir", ckpt, "--out", out, "--quiet")
    rc, _, stderr = t.run(2, "resume", ckpt, "--chains-per-start", 1, expect_ok=False)
    lines = t.error_lines(stderr)
    t.check(rc != 0 and len(lines) == 1 and "--chains-per-start would change the answer" in lines[0],
            f"resume --chains-per-start 1 refused: {lines}")
    t.run(2, "resume", ckpt, "--draws", 15, "--quiet")
    with h5py.File(out, "r") as f:
        attr = f.attrs["config_chains_per_start"]
        n_draws = f["posterior/x"].shape[1]
    attr = attr.decode() if isinstance(attr, bytes) else attr
    t.check(attr == "2" and n_draws == 15, f"resumed run keeps config_chains_per_start = 2 ({attr!r}, {n_draws} draws)")


def main():
    test_real_runs()
    test_crafted()
    test_chains_per_start()
    t.finish("test_nested_rhat")


if __name__ == "__main__":
    main()
