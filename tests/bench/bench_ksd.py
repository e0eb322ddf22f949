"""What the kernel Stein discrepancy costs a run, end to end: `dsampler svgd` per iteration
without and with --ksd-every K (wall clock from the difference of two runs of different length,
so start-up and the KSD after the last iteration cancel; runs interleaved, median of repeats),
and --save-every beside them.

Target N(0, I_d); starts from the default U(-2, 2), steps 0.1 (sgd).
Usage: python3 bench_ksd.py DSAMPLER WORKDIR DIM N [K ...]
"""
import os
import statistics
import subprocess
import sys
import time


def wall(binary, dim, n, iters, out, extra):
    cmd = [binary, "svgd", "--backend", "cuda", "--quiet", "--target", "gaussian", "--dim", str(dim), "--particles",
           str(n), "--iters", str(iters), "--seed", "3", "--out", out, *extra]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    binary, work, dim, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    every = [int(k) for k in sys.argv[5:]] or [10]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "bench_ksd.h5")
    configs = [("plain", [])] + [(f"--ksd-every {k}", ["--ksd-every", str(k)]) for k in every]
    configs.append(("--save-every 10", ["--save-every", "10"]))
    short = 10
    probe = (wall(binary, dim, n, short + 20, out, []) - wall(binary, dim, n, short, out, [])) / 20
    long = short + min(2000, max(40, int(4.0 / max(probe, 1e-3))) // 10 * 10)
    samples = {name: [] for name, _ in configs}
    for _ in range(3):
        for name, extra in configs:
            a = wall(binary, dim, n, short, out, extra)
            b = wall(binary, dim, n, long, out, extra)
            samples[name].append((b - a) * 1e3 / (long - short))
    base = statistics.median(samples["plain"])
    print(f"SVGD N={n} d={dim}, ms per iteration end to end over {long - short} iterations, median of 3 (interleaved)")
    print("| run | ms/iteration | vs plain | samples |\n|---|---|---|---|")
    for name, _ in configs:
        med = statistics.median(samples[name])
        print(f"| {name} | {med:.3f} | {med / base:.3f}x | {', '.join(f'{v:.2f}' for v in samples[name])} |")


if __name__ == "__main__":
    main()
