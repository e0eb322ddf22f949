"""SVGD at d = 64 on the GPU, end to end: `dsampler svgd` wall clock per step (the difference of a
short and a long run of the same start, so start-up cancels; exact median every step; median of
repeats), for the sizes of issue 24. PyTorch's flash-attention phi (../shared/gpu's
baselines_svgd_flash.py) is run beside it in the same call by the caller.

Target N(0, I_d); dsampler starts from its default U(-2, 2) and steps 0.1 (sgd).
Usage: python3 bench_svgd_flash.py DSAMPLER WORKDIR N:STEPS[:REPEATS] ... [--dim D]
  STEPS: steps the long run adds to the 1-step short run.
"""
import json
import os
import statistics
import subprocess
import sys
import time


def wall(binary, dim, n, iters, out):
    cmd = [binary, "svgd", "--backend", "cuda", "--quiet", "--target", "gaussian", "--dim", str(dim), "--particles",
           str(n), "--iters", str(iters), "--seed", "3", "--out", out]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main():
    args = sys.argv[1:]
    dim = 64
    if "--dim" in args:
        at = args.index("--dim")
        dim = int(args[at + 1])
        del args[at:at + 2]
    binary, work = args[:2]
    os.makedirs(work, exist_ok=True)
    out = os.path.join(work, "bench_svgd_flash.h5")
    for case in args[2:]:
        parts = [int(v) for v in case.split(":")]
        n, steps = parts[0], parts[1]
        repeats = parts[2] if len(parts) > 2 else 3
        samples = []
        for _ in range(repeats):
            short = wall(binary, dim, n, 1, out)
            long = wall(binary, dim, n, 1 + steps, out)
            samples.append((long - short) * 1e3 / steps)
        print(json.dumps({"d": dim, "N": n, "dsampler_ms_per_step": round(statistics.median(samples), 3),
                          "samples": [round(v, 3) for v in samples], "steps_differenced": steps,
                          "short_run_s": round(short, 2)}), flush=True)


if __name__ == "__main__":
    main()
