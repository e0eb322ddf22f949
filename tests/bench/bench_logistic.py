"""Bayesian logistic regression on the GPU, end to end: `dsampler hmc --target logistic` (wall
clock per iteration from the difference of two runs of different length, so start-up and data
loading cancel; median of repeats), the gradient kernel alone (bench_gpu --logistic), and a
batched PyTorch leapfrog of the same model in the same call.

Model and data: X [n, 54] ~ N(0, 1), w_true ~ N(0, 0.25 I), y ~ Bernoulli(sigmoid(X w_true)),
prior w ~ N(0, I). HMC: fixed 10 leapfrog steps of 1e-3, no adaptation, no jitter, identity
metric, every draw written.

Usage: python3 bench_logistic.py DSAMPLER BENCH_GPU WORKDIR [n:chains ...]
"""
import json
import os
import statistics
import subprocess
import sys
import time

import h5py
import numpy as np

L, EPS, D = 10, 1e-3, 54


def make_data(path, n):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, D)).astype(np.float32)
    w_true = rng.standard_normal(D).astype(np.float32) * 0.5
    y = (rng.random(n) < 1 / (1 + np.exp(-(x @ w_true)))).astype(np.float32)
    with h5py.File(path, "w") as f:
        f["X"] = x
        f["y"] = y
    return x, y


def dsampler_wall(binary, data, chains, draws, out):
    cmd = [binary, "hmc", "--backend", "cuda", "--quiet", "--target", "logistic", "--data", data, "--chains",
           str(chains), "--warmup", "0", "--adapt", "none", "--metric", "unit", "--steps", str(L), "--step-size",
           str(EPS), "--jitter", "0", "--draws", str(draws), "--seed", "1", "--out", out]
    subprocess.run(["sync"])
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def dsampler_ms(binary, data, chains, work, repeats=5, short=20, long=220):
    out = os.path.join(work, "bench_logistic_out.h5")
    samples = []
    for _ in range(repeats):
        a = dsampler_wall(binary, data, chains, short, out)
        b = dsampler_wall(binary, data, chains, long, out)
        samples.append((b - a) * 1e3 / (long - short))
    with h5py.File(out, "r") as f:
        accept = float(np.mean(f["sample_stats/acceptance_rate"][...]))
    return statistics.median(samples), samples, accept


def torch_ms(x, y, chains, iters=20, repeats=5):
    """A batched leapfrog as a PyTorch user writes it: grad and log p from one z = W X' per
    evaluation (the gradient at the start of an iteration reused from the last), fp32, TF32 off."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    xt, yt = torch.tensor(x, device="cuda"), torch.tensor(y, device="cuda")

    def logp_grad(w):
        z = w @ xt.T
        logp = (yt * z - torch.nn.functional.softplus(z)).sum(1) - 0.5 * (w * w).sum(1)
        return logp, (yt - torch.sigmoid(z)) @ xt - w

    def iteration(q, lp, g):
        p = torch.randn_like(q)
        h0 = lp - 0.5 * (p * p).sum(1)
        q1, p1, g1 = q, p + 0.5 * EPS * g, g
        for step in range(L):
            q1 = q1 + EPS * p1
            lp1, g1 = logp_grad(q1)
            p1 = p1 + (EPS if step < L - 1 else 0.5 * EPS) * g1
        accept = torch.log(torch.rand(q.shape[0], device="cuda")) < (lp1 - 0.5 * (p1 * p1).sum(1)) - h0
        keep = accept[:, None]
        return torch.where(keep, q1, q), torch.where(accept, lp1, lp), torch.where(keep, g1, g)

    q = torch.zeros(chains, D, device="cuda")
    lp, g = logp_grad(q)
    for _ in range(3):
        q, lp, g = iteration(q, lp, g)
    samples = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(iters):
            q, lp, g = iteration(q, lp, g)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3 / iters)
    del xt, yt
    torch.cuda.empty_cache()
    return statistics.median(samples), samples


def main():
    binary, bench_gpu, work = sys.argv[1:4]
    cases = [tuple(int(v) for v in c.split(":")) for c in (sys.argv[4:] or ["100000:1024", "581012:256"])]
    os.makedirs(work, exist_ok=True)
    for n, chains in cases:
        data = os.path.join(work, f"logistic_{n}.h5")
        x, y = make_data(data, n)
        kernel = subprocess.run([bench_gpu, "--logistic", data, str(chains)], capture_output=True, text=True)
        ms, samples, accept = dsampler_ms(binary, data, chains, work)
        row = {"n": n, "D": D, "chains": chains, "L": L, "dsampler_ms_per_iteration": round(ms, 3),
               "dsampler_samples": [round(v, 3) for v in samples], "dsampler_accept": round(accept, 3),
               "kernel": kernel.stdout.strip() or kernel.stderr.strip()[-300:],
               "flop_floor_ms": round(L * 4.0 * n * D * chains / 67e12 * 1e3, 3)}
        try:
            t_ms, t_samples = torch_ms(x, y, chains)
            row.update(torch_ms_per_iteration=round(t_ms, 3), torch_samples=[round(v, 3) for v in t_samples])
        except Exception as error:  # no torch here: dsampler's figures still stand
            row["torch"] = f"unavailable: {error}"
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
