"""SVGD at large dimension on the GPU, end to end: `dsampler svgd` per step (wall clock from the
difference of two runs of different length, so start-up cancels; exact median every step; median
of repeats), beside PyTorch's GEMM form of the same step (pairwise distances by the GEMM identity,
torch.median, the N x N kernel matrix stored) in the same call.

Target N(0, I_d); dsampler starts from its default U(-2, 2) and steps 0.1 (sgd).
Usage: python3 bench_svgd_wide.py DSAMPLER WORKDIR [d:N ...]
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time


def dsampler_wall(binary, dim, n, iters, out):
    cmd = [binary, "svgd", "--backend", "cuda", "--quiet", "--target", "gaussian", "--dim", str(dim), "--particles",
           str(n), "--iters", str(iters), "--seed", "3", "--out", out]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def dsampler_ms(binary, dim, n, work, repeats=3, short=2):
    """Runs of `short` and `long` steps, long chosen so the difference lasts about 5 s (start-up
    varies by a few hundred ms between runs)."""
    out = os.path.join(work, "bench_svgd_wide.h5")
    probe = (dsampler_wall(binary, dim, n, short + 20, out) - dsampler_wall(binary, dim, n, short, out)) / 20
    long = short + min(2000, max(20, int(5.0 / max(probe, 1e-3))))
    samples = []
    for _ in range(repeats):
        a = dsampler_wall(binary, dim, n, short, out)
        b = dsampler_wall(binary, dim, n, long, out)
        samples.append((b - a) * 1e3 / (long - short))
    return statistics.median(samples), samples, long - short


def torch_ms(dim, n, repeats=5):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = torch.rand(n, dim, device="cuda", generator=gen) * 4 - 2

    def step(x, lr=0.1):
        sq = (x * x).sum(1)
        d2 = (sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)).clamp_(min=0)
        d2.fill_diagonal_(0)
        med = torch.median(d2.view(-1)).clamp(min=1e-5)
        h = med / max(math.log(n), 1.0)
        k = torch.exp(-d2 / (2.0 * h))
        ks = k.sum(1, keepdim=True)
        phi = (k @ (-x) + (ks * x - k @ x) / h) / n
        return x + lr * phi

    for _ in range(2):
        x = step(x)
    times = []
    for _ in range(repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        x = step(x)
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times), times


def main():
    binary, work = sys.argv[1:3]
    cases = [tuple(int(v) for v in c.split(":")) for c in (sys.argv[3:] or ["256:8192", "256:16384", "1024:8192",
                                                                            "1024:16384"])]
    os.makedirs(work, exist_ok=True)
    for dim, n in cases:
        ms, samples, steps = dsampler_ms(binary, dim, n, work)
        row = {"d": dim, "N": n, "dsampler_ms_per_step": round(ms, 2), "dsampler_samples": [round(v, 2) for v in samples],
               "steps_differenced": steps}
        try:
            t_ms, t_samples = torch_ms(dim, n)
            row.update(torch_gemm_ms=round(t_ms, 2), torch_samples=[round(v, 2) for v in t_samples])
        except Exception as error:
            row["torch"] = f"unavailable: {str(error)[:120]}"
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
