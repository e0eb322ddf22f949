#!/usr/bin/env python3
"""The benchmark gate: re-measures the README's headline HMC and SVGD rows on this machine's GPU
and fails (exit 1) where one is more than 15% slower than the figure recorded beside it below.
Run it before changing a README figure, and change the figure here with the README's.

Each row runs `dsampler ... --timing` REPEATS times (default 3) and takes the median of the
phase's wall time an iteration (the table's "ms an iteration" of its wall: iterations only,
start-up excluded). With --method diff, as the README's figures were first measured: the wall
clock of whole runs without --timing, of the row's length and of a quarter of it, their
difference over the difference in iterations. The README quotes each recorded figure; a row whose figure the README no
longer holds is an error too, so the two cannot drift apart.

Usage: gate.py DSAMPLER [--repeats N] [--only NAME,...] [--slack 0.15] [--method timing|diff] [--list]
              [--check-readme]
Exit: 0 all rows within the slack, 1 a row slower (or failed), 77 no GPU."""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
README = os.path.join(HERE, "..", "..", "README.md")

HMC = ["hmc", "--backend", "cuda", "--dim", "64", "--seed", "1", "--quiet", "--timing"]
SVGD = ["svgd", "--backend", "cuda", "--dim", "64", "--seed", "1", "--quiet", "--timing"]
MILLION = ["--chains", "1048576"]

# name, arguments, phase, recorded ms an iteration (H200), the README's words for it
ROWS = [
    ("hmc.warmup.2^20", HMC + MILLION + ["--output-chains", "16", "--steps", "10", "--warmup", "400", "--draws", "4"],
     "warmup", 0.928, "chains with pooled adaptation took 0.920-0.928 ms"),
    ("hmc.sampling.2^20", HMC + MILLION + ["--output-chains", "1024", "--thin", "10", "--warmup", "0", "--adapt",
                                          "none", "--steps", "10", "--draws", "400"],
     "sampling", 0.610, "1024 chains' draws every 10th iteration 0.600-0.610 ms"),
    ("hmc.warmup.65536", HMC + ["--chains", "65536", "--output-chains", "16", "--steps", "10", "--warmup", "1000",
                                "--draws", "4"],
     "warmup", 0.147, "a warmup iteration of 65536 chains\n  0.138-0.147 ms"),
    ("hmc.warmup.chees.2^20", HMC + MILLION + ["--output-chains", "16", "--warmup", "400", "--draws", "4"],
     "warmup", 1.164, "took 1.160-1.164 ms"),
    ("svgd.32768", SVGD + ["--particles", "32768", "--iters", "60"], "svgd", 3.684, "(3.65-3.68 and 13.06-13.10 ms"),
    ("svgd.65536", SVGD + ["--particles", "65536", "--iters", "40"], "svgd", 13.104, "and 13.06-13.10 ms as `--timing`'s wall"),
]


def phase_ms(stderr, phase):
    m = re.search(rf"^\s+{re.escape(phase)}: \d+ iterations, [\d.]+ ms wall, ([\d.]+) ms an iteration", stderr, re.M)
    return float(m.group(1)) if m else None


def iterations_flag(argv, phase):
    """The flag that sets the phase's length in argv, and its value."""
    flag = {"warmup": "--warmup", "sampling": "--draws", "svgd": "--iters"}[phase]
    return flag, int(argv[argv.index(flag) + 1])


def with_length(argv, flag, value):
    out = list(argv)
    out[out.index(flag) + 1] = str(value)
    return [a for a in out if a != "--timing"]


def wall(cmd):
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return time.perf_counter() - start if proc.returncode == 0 else None, proc


def readme_text():
    with open(README) as f:
        return re.sub(r"\s+", " ", f.read())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dsampler", nargs="?", default="dsampler")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="")
    parser.add_argument("--slack", type=float, default=0.15)
    parser.add_argument("--method", choices=("timing", "diff"), default="timing")
    parser.add_argument("--list", action="store_true", help="print the rows and exit")
    parser.add_argument("--check-readme", action="store_true", help="only check that the README quotes every row")
    args = parser.parse_args()
    rows = [r for r in ROWS if not args.only or r[0] in args.only.split(",")]
    text = readme_text()
    stale = [r[0] for r in rows if re.sub(r"\s+", " ", r[4]) not in text]
    if args.list:
        for name, argv, phase, recorded, words in rows:
            print(f"{name}: {recorded} ms ({phase}): dsampler {' '.join(argv)}")
        return 0
    if stale:
        print(f"gate: the README no longer quotes the figure of {', '.join(stale)}: update the rows here with it")
        return 1
    if args.check_readme:
        print(f"gate: the README quotes all {len(rows)} rows' figures")
        return 0
    if shutil.which("nvidia-smi") is None or subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode != 0:
        print("gate: no GPU: skipped")
        return 77
    work = tempfile.mkdtemp(prefix="dsampler-gate-")
    failed = 0
    print(f"{'row':24} {'recorded':>9} {'median':>9} {'ratio':>6}  runs (ms an iteration)")
    for name, argv, phase, recorded, _ in rows:
        samples = []
        for r in range(args.repeats):
            out = os.path.join(work, f"{name}.{r}.h5")
            if args.method == "timing":
                proc = subprocess.run([args.dsampler, *argv, "--out", out], capture_output=True, text=True)
                ms = phase_ms(proc.stderr, phase) if proc.returncode == 0 else None
            else:
                flag, n_long = iterations_flag(argv, phase)
                n_short = max(n_long // 4, 1)
                walls = []
                for n in (n_short, n_long):
                    seconds, proc = wall([args.dsampler, *with_length(argv, flag, n), "--out", out])
                    walls.append(seconds)
                    for leftover in (out, out[:-3] + ".ckpt"):
                        shutil.rmtree(leftover, ignore_errors=True) if os.path.isdir(leftover) else (
                            os.path.exists(leftover) and os.remove(leftover))
                ms = None if None in walls else 1e3 * (walls[1] - walls[0]) / (n_long - n_short)
            if ms is None:
                print(f"{name}: run failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")
                break
            samples.append(ms)
            for leftover in (out, out[:-3] + ".ckpt"):
                shutil.rmtree(leftover, ignore_errors=True) if os.path.isdir(leftover) else (
                    os.path.exists(leftover) and os.remove(leftover))
        if len(samples) < args.repeats:
            failed += 1
            continue
        median = statistics.median(samples)
        ratio = median / recorded
        verdict = "ok" if ratio <= 1.0 + args.slack else "SLOWER"
        failed += verdict != "ok"
        print(f"{name:24} {recorded:9.3f} {median:9.3f} {ratio:6.2f}  {' '.join(f'{s:.3f}' for s in samples)}  {verdict}")
    shutil.rmtree(work, ignore_errors=True)
    print(f"gate ({args.method}): {len(rows) - failed} of {len(rows)} rows within {100 * args.slack:.0f}% of the recorded figures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
