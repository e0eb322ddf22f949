"""Chains caught in a minor mode during warmup restart from healthy chains' states; `summary`
names chains whose log density sits far below the rest.

The target (tests/plugin/minor_mode.so): x1, x2 ~ N(0, 1) and x0 in a tilted double well whose
minor well holds e^-40 of the mass behind a barrier of about 60 nats; about 15% of the starts
fall into it and cannot leave.
- Defaults on 2 ranks: the run says which chains it restarted (some), and the draws match the
  posterior (x0's mean and sd from quadrature in float64: |z| < 4 with the MCSE, sd within 5%),
  R-hat < 1.01; summary warns of nothing. 1 and 3 ranks: bitwise the same output.
- The same with the minor well catching most of the starts (minor_mode_most.so): the gap
  rule restarts the majority from the chains above the gap, the draws match the posterior, 3
  ranks bitwise 2 ranks'; with --stuck keep, summary names the caught majority.
- --stuck keep: the caught chains stay; summary names them (and R-hat shows it).
- Neal's funnel (d = 10 and 40, 64 chains), where the chains' lp spreads widely: nothing
  restarted for a minor mode, and summary names no chain."""
import os

import numpy as np

import dstest as t

PLUGIN = "plugin:" + os.path.join(os.environ["DSAMPLER_PLUGIN_DIR"], "minor_mode.so")
PLUGIN_MOST = "plugin:" + os.path.join(os.environ["DSAMPLER_PLUGIN_DIR"], "minor_mode_most.so")
RESTARTED = "sat far below the others' log density"
NAMED = "log density sits far below the others'"


def reference_x0(shift=-1.5):
    """Mean and sd of x0 under exp(-V), V(x) = 60 ((x - s)^2 - 1)^2 - 20 (x - s), by the
    trapezoid rule on a fine grid in float64."""
    x = np.linspace(shift - 2.5, shift + 3.0, 2_000_001)
    y = x - shift
    log_p = -(60.0 * (y * y - 1.0) ** 2 - 20.0 * y)
    w = np.exp(log_p - log_p.max())
    mass = np.trapezoid(w, x)
    mean = np.trapezoid(w * x, x) / mass
    sd = np.sqrt(np.trapezoid(w * (x - mean) ** 2, x) / mass)
    return mean, sd


def summary_text(out):
    _, stdout, _ = t.run(1, "summary", out)
    return stdout


def column(text, row, name):
    lines = text.splitlines()
    header = next(line for line in lines if "r_hat" in line).split()
    values = next(line for line in lines if line.startswith(row)).split()
    return float(values[1 + header.index(name)])


def test_restarted(plugin=PLUGIN, shift=-1.5, name="minor", rank_counts=(2, 1, 3), needle=""):
    mean, sd = reference_x0(shift)
    outputs = {}
    for ranks in rank_counts:
        out = t.path(f"{name}_{ranks}.h5")
        _, _, stderr = t.run(ranks, "hmc", "--target", plugin, "--chains", 64, "--seed", 1, "--out", out, "--quiet")
        outputs[ranks] = t.datasets(out)
        if ranks == 2:
            lines = [line for line in stderr.splitlines() if RESTARTED in line]
            t.check(lines and "restarted from healthy chains' states" in lines[0] and needle in lines[0],
                    f"{name}: the run says which chains it restarted: {lines[:2]}")
            x0 = outputs[2]["posterior/x"][:, :, 0].astype(np.float64)
            text = summary_text(out)
            mcse = column(text, "x[0]", "mcse_mean")
            z = (x0.mean() - mean) / mcse
            t.check(abs(z) < 4 and abs(x0.std() / sd - 1.0) < 0.05 and column(text, "x[0]", "r_hat") < 1.01,
                    f"{name}: after the restarts the draws are the posterior's: x0 mean {x0.mean():.5f} (reference "
                    f"{mean:.5f}, z {z:.2f}), sd {x0.std():.5f} (reference {sd:.5f}), r_hat "
                    f"{column(text, 'x[0]', 'r_hat')}")
            t.check(NAMED not in text, f"{name}: summary names no chain after the restarts")
    for ranks in rank_counts[1:]:
        same = outputs[2].keys() == outputs[ranks].keys() and all(
            outputs[2][k].tobytes() == outputs[ranks][k].tobytes() for k in outputs[2])
        t.check(same, f"{name}: {ranks} rank(s): bitwise the output of 2 ranks, restarts included")


def test_most():
    """The minor well catching most of the starts (minor_mode_most.so): the median chain sits in
    it, so the median rule sees nothing; the gap rule restarts them from the top group. With
    --stuck keep, summary names the caught majority (the gap rule)."""
    test_restarted(PLUGIN_MOST, 1.0, "minor_most", (2, 3), "the top ")
    out = t.path("minor_most_keep.h5")
    t.run(2, "hmc", "--target", PLUGIN_MOST, "--chains", 64, "--seed", 1, "--stuck", "keep", "--out", out, "--quiet")
    x0 = t.read(out, "posterior/x")[:, :, 0]
    caught = np.where(x0.mean(axis=1) < 1.0)[0]
    line = next((line for line in summary_text(out).splitlines() if NAMED in line), "")
    t.check(len(caught) > 32 and f"{len(caught)} chains" in line and "the top " in line,
            f"minor_most, --stuck keep: {len(caught)} of 64 chains stay in the minor well; summary names them: {line!r}")


def test_kept():
    out = t.path("minor_keep.h5")
    _, _, stderr = t.run(2, "hmc", "--target", PLUGIN, "--chains", 64, "--seed", 1, "--stuck", "keep", "--out", out,
                         "--quiet")
    x0 = t.read(out, "posterior/x")[:, :, 0]
    caught = np.where(x0.mean(axis=1) < -1.5)[0]
    text = summary_text(out)
    line = next((line for line in text.splitlines() if NAMED in line), "")
    named_first = [c for c in caught[:8] if f" {c} at " in line]
    t.check(RESTARTED not in stderr and len(caught) > 0 and f"{len(caught)} chains" in line
            and len(named_first) == min(8, len(caught)) and column(text, "x[0]", "r_hat") > 1.1,
            f"--stuck keep: {len(caught)} chains stay in the minor well; summary names them: {line!r}")


def test_funnel():
    for dim in (10, 40):
        out = t.path(f"minor_funnel_{dim}.h5")
        _, _, stderr = t.run(2, "hmc", "--target", "funnel", "--dim", dim, "--chains", 64, "--seed", 2, "--out", out,
                             "--quiet")
        text = summary_text(out)
        t.check(RESTARTED not in stderr and NAMED not in text,
                f"funnel, dim {dim}: no chain restarted for a minor mode, none named by summary")


if __name__ == "__main__":
    test_restarted()
    test_most()
    test_kept()
    test_funnel()
    t.finish("minor_modes")
