"""--target-accept auto (the default): the step's target acceptance starts at 0.8 and is raised
where divergences persist late in warmup.

The rule (src/hmc/adapt.h), recomputed here from the run's own warmup statistics: at the end of
each metric window in warmup's second half, a window whose transitions (all chains) diverged more
often than 0.1% halves 1 - target, once more for each further factor of 4 in that rate, up to
0.95. The window schedule is recomputed too (Stan's 75 / 25 / 50 with doubling windows, capped at
max(100, 6400 / chains) iterations under pooled adaptation).
- Neal's funnel (d = 20, 64 chains, 2 ranks): the target_accept attribute states the target, the
  number of raises, the iteration of the last and its window's rate exactly as recomputed from
  warmup_sample_stats/diverging; the rule fired; the sampling's mean acceptance is above that of
  the same run with --target-accept 0.8 given, whose attribute says 0.8 and which never changed.
- The same funnel on 1 and 3 ranks: bitwise the same draws.
- A Gaussian (no divergent transition): auto gives bitwise the draws of --target-accept 0.8.
- --target-accept 0 is refused (auto is how to ask for the rule)."""
import re

import h5py
import numpy as np

import dstest as t

START, THRESHOLD, CAP = 0.8, 0.001, 0.95


def window_ends(warmup, chains):
    """The iterations at which Stan's windows end, with pooled adaptation's cap (adapt.c)."""
    init, term, base = 75, 50, 25
    if init + base + term > warmup:
        init, term = int(0.15 * warmup), int(0.1 * warmup)
        base = warmup - (init + term)
    cap = max(100, -(-6400 // chains))
    last = warmup - term - 1
    ends, size, end = [], base, init + base - 1
    while True:
        ends.append(end)
        if end == last:
            return ends, init
        size *= 2
        capped = size >= cap
        if capped:
            size = cap
        nxt = end + size
        if nxt != last and nxt + (size if capped else 2 * size) >= warmup - term:
            nxt = last
        end = nxt


def expected_target(diverging, warmup, chains):
    """(target, raises, last raise's iteration, its window's rate) from the per-iteration counts."""
    per_iteration = diverging.sum(axis=0)
    ends, start = window_ends(warmup, chains)
    target, raises, raised_at, raised_rate = START, 0, 0, 0.0
    for end in ends:
        rate = per_iteration[start:end + 1].sum() / ((end + 1 - start) * chains)
        start = end + 1
        if 2 * end < warmup or not rate > THRESHOLD or target >= CAP:
            continue
        miss, bound = 0.5 * (1.0 - target), 4 * THRESHOLD
        while rate > bound:
            miss *= 0.5
            bound *= 4
        target = min(CAP, 1.0 - miss)
        raises, raised_at, raised_rate = raises + 1, end + 1, rate
    return target, raises, raised_at, raised_rate


def funnel(ranks, name, *extra):
    out = t.path(f"target_{name}.h5")
    t.run(ranks, "hmc", "--target", "funnel", "--dim", 20, "--chains", 64, "--warmup", 1000, "--draws", 200, "--seed",
          11, "--save-warmup", "--backend", "cpu", "--quiet", "--out", out, *extra)
    return out


def main():
    chains, warmup = 64, 1000
    auto = funnel(2, "auto")
    with h5py.File(auto) as f:
        diverging = f["warmup_sample_stats/diverging"][...].astype(np.int64)
        accept_auto = f["sample_stats/acceptance_rate"][...].mean()
    text = t.attr(auto, "target_accept")
    target, raises, raised_at, rate = expected_target(diverging, warmup, chains)
    t.check(raises > 0, f"funnel: the rule fires ({raises} raises; window rates from warmup_sample_stats)")
    match = re.match(r"([0-9.]+) \(auto: raised from 0.8 (\d+) times?, last after warmup iteration (\d+), "
                     r"([0-9.e+-]+)% divergent", text or "")
    t.check(match is not None, f"funnel: target_accept says how auto raised it ({text!r})")
    if match:
        got = (float(match[1]), int(match[2]), int(match[3]), float(match[4]) / 100)
        t.check(abs(got[0] - target) < 1e-3 and got[1:3] == (raises, raised_at) and abs(got[3] - rate) <= 0.006 * rate + 1e-12,
                f"funnel: attribute {got} against the rule recomputed from the draws "
                f"({target:.4g}, {raises}, {raised_at}, {rate:.3g})")

    given = funnel(2, "given", "--target-accept", 0.8)
    t.check(t.attr(given, "target_accept") == "0.8", f"--target-accept 0.8: kept ({t.attr(given, 'target_accept')!r})")
    accept_given = t.read(given, "sample_stats/acceptance_rate").mean()
    t.check(accept_auto > accept_given + 0.03,
            f"funnel: mean acceptance {accept_auto:.3f} under the raised target, {accept_given:.3f} at 0.8")

    draws = t.read(auto, "posterior/x")
    for ranks in (1, 3):
        other = t.read(funnel(ranks, f"auto_{ranks}"), "posterior/x")
        t.check(other.tobytes() == draws.tobytes(), f"funnel, auto: {ranks} ranks bitwise equal to 2")

    outs = []
    for name, extra in (("gauss_auto", []), ("gauss_given", ["--target-accept", 0.8])):
        out = t.path(f"target_{name}.h5")
        t.run(2, "hmc", "--dim", 6, "--chains", 64, "--seed", 3, "--backend", "cpu", "--quiet", "--out", out, *extra)
        outs.append(out)
    same = all(t.read(outs[0], d).tobytes() == t.read(outs[1], d).tobytes()
               for d in ("posterior/x", "sample_stats/step_size", "sample_stats/n_steps"))
    t.check(same and t.read(outs[0], "sample_stats/diverging").sum() == 0,
            f"gaussian: no divergences, auto bitwise equal to 0.8 ({t.attr(outs[0], 'target_accept')!r})")

    rc, _, err = t.run(1, "hmc", "--target-accept", 0, "--out", t.path("target_zero.h5"), expect_ok=False)
    t.check(rc != 0 and "--target-accept" in err and "auto" in err, f"--target-accept 0 refused ({err.strip()!r})")
    t.finish("adaptive target")


if __name__ == "__main__":
    main()
