"""--timing: the end-of-run table (timing.h) counts what the run did, section by section, and its
sections add up to the phases' wall time; off, the run prints nothing of it; the answer does not
change with it; a resume may turn it on."""
import os
import re
import shutil

import numpy as np

import dstest as t


def parse(stderr):
    """{phase: (iterations, wall ms, sections ms, {section: (total ms, times)})}"""
    phases, current = {}, None
    for line in stderr.splitlines():
        m = re.match(r"\s+(\w+): (\d+) iterations, ([\d.]+) ms wall, [\d.]+ ms an iteration \(sections ([\d.]+)\)", line)
        if m:
            current = m.group(1)
            phases[current] = (int(m.group(2)), float(m.group(3)), float(m.group(4)) * int(m.group(2)), {})
            continue
        m = re.match(r"\s{4}(\S.*?)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)$", line)
        if m and current and m.group(1) != "section":
            phases[current][3][m.group(1)] = (float(m.group(2)), int(m.group(3)))
    return phases


def sections_cover_wall(phases, label):
    for name, (n, wall, sections, _) in phases.items():
        # The sections run from the iteration's first mark to its last, the wall from just before
        # the first to just after the last: the same time but for microseconds an iteration.
        t.check(0.8 * wall - 1.0 <= sections <= wall + 0.01 * n,
                f"{label} {name}: sections {sections:.2f} ms within the wall {wall:.2f} ms")


def fresh(name):
    """The output's path, with no output or checkpoints of an earlier run of this test."""
    p = t.path(name)
    for old in (p, p[:-3] + ".ckpt"):
        if os.path.isdir(old):
            shutil.rmtree(old)
        elif os.path.exists(old):
            os.remove(old)
    return p


def main():
    common = ["--dim", 3, "--chains", 16, "--seed", 5, "--backend", "cpu", "--quiet"]
    plain = fresh("timing_off.h5")
    _, _, err_off = t.run(2, "hmc", *common, "--warmup", 60, "--draws", 40, "--checkpoint-every", 50, "--out", plain)
    t.check("timing" not in err_off, "without --timing no table is printed")
    out = fresh("timing_hmc.h5")
    _, _, err = t.run(2, "hmc", *common, "--warmup", 60, "--draws", 40, "--checkpoint-every", 50, "--timing",
                      "--out", out)
    t.check(err.count("timing (rank 0") == 1, "one table, from rank 0")
    phases = parse(err)
    t.check(set(phases) == {"warmup", "sampling"}, f"both phases reported ({sorted(phases)})")
    if set(phases) == {"warmup", "sampling"}:
        warm, samp = phases["warmup"][3], phases["sampling"][3]
        t.check(phases["warmup"][0] == 60 and phases["sampling"][0] == 40, "60 warmup and 40 sampling iterations")
        t.check(warm.get("transition", (0, 0))[1] == 60 and samp.get("transition", (0, 0))[1] == 40,
                "a transition every iteration")
        t.check(warm.get("checkpoints", (0, 0))[1] == 1 and samp.get("checkpoints", (0, 0))[1] == 1,
                "checkpoints after iterations 50 and 100, one in each phase")
        t.check(warm.get("step searches", (0, 0))[1] >= 1, "warmup's step searches counted")
        t.check(warm.get("window ends", (0, 0))[1] >= 1 and "window ends" not in samp, "window ends only in warmup")
        t.check(samp.get("output", (0, 0))[1] >= 1 and "adaptation" not in samp, "sampling writes, adapts nothing")
        sections_cover_wall(phases, "hmc")
    same = all(np.array_equal(t.read(plain, d), t.read(out, d)) for d in ("posterior/x", "sample_stats/lp"))
    t.check(same, "the draws are the same bits with and without --timing")

    svgd = fresh("timing_svgd.h5")
    _, _, err = t.run(2, "svgd", "--dim", 2, "--particles", 50, "--iters", 30, "--ksd-every", 10, "--backend", "cpu",
                      "--quiet", "--timing", "--out", svgd)
    phases = parse(err)
    t.check(set(phases) == {"svgd"}, f"svgd's phase reported ({sorted(phases)})")
    if "svgd" in phases:
        s = phases["svgd"][3]
        t.check(phases["svgd"][0] == 30 and s.get("phi", (0, 0))[1] == 30, "30 iterations, phi in each")
        t.check(s.get("KSD", (0, 0))[1] == 3, f"the KSD in iterations 0, 10 and 20 ({s.get('KSD')})")
        t.check(s.get("median", (0, 0))[1] == 30, "a median every iteration")
        sections_cover_wall(phases, "svgd")

    # A resume may ask for the table.
    ckpt = fresh("timing_resume.h5")
    t.run(2, "hmc", *common, "--warmup", 20, "--draws", 10, "--checkpoint-every", 20, "--out", ckpt)
    _, _, err = t.run(2, "resume", ckpt[:-3] + ".ckpt", "--draws", 30, "--timing", "--quiet")
    phases = parse(err)
    t.check(phases.get("sampling", (0,))[0] == 20, "a resume with --timing reports its own 20 iterations")
    t.finish("timing")


if __name__ == "__main__":
    main()
