"""The whole program on the GPU: `dsampler --backend cuda` on 1 rank (NCCL transport for SVGD; HMC
takes MPI) and on 2
ranks sharing the one GPU (MPI transport, staged through host memory) gives bitwise the same
output, for HMC (fixed step, and pooled adaptation) and SVGD (also past 128 coordinates); against the CPU backend, one HMC
iteration makes the same accept decision on >= 99.9% of chains with positions within 1e-5
relative, and one SVGD step agrees within 1e-5 relative, its KSD within 2e-6. Exits 77 where no GPU can be used."""
import subprocess
import sys

try:
    import numpy as np

    import dstest as t
except ImportError as missing:  # run with the system python3, which may lack numpy or h5py
    print(f"skipped: {missing}")
    sys.exit(77)

DATASETS = ["posterior/x", "sample_stats/lp"]
# SVGD runs also compare their kernel Stein discrepancy (rbf at 33 to 64 coordinates: the warpgroup tiles).
SVGD_DATASETS = DATASETS + ["ksd/ksd"]


def gpu_available():
    out = t.path("gpu_probe.h5")
    rc, _, stderr = t.run(1, "svgd", "--dim", 2, "--particles", 4, "--iters", 1, "--backend", "cuda", "--out", out,
                          "--quiet", expect_ok=False, timeout=120)
    return rc == 0, stderr


def same(a, b, names):
    da, db = t.datasets(a), t.datasets(b)
    return all(n in da and n in db and da[n].tobytes() == db[n].tobytes() for n in names)


def main():
    ok, why = gpu_available()
    if not ok:
        print(f"skip: no usable GPU ({why.strip().splitlines()[-1] if why.strip() else 'unknown'})")
        sys.exit(77)
    runs = {
        "hmc_fixed": (["hmc", "--dim", 64, "--chains", 4096, "--warmup", 0, "--adapt", "none", "--jitter", 0, "--draws", 20,
                       "--steps", 10, "--step-size", 0.1, "--seed", 5], DATASETS + ["sample_stats/energy"]),
        "hmc_pooled": (["hmc", "--dim", 16, "--chains", 2048, "--warmup", 200, "--adapt", "pooled", "--draws", 50,
                        "--seed", 6], DATASETS + ["sample_stats/step_size"]),
        "hmc_banana": (["hmc", "--target", "banana", "--chains", 512, "--warmup", 100, "--draws", 20, "--seed", 7],
                       DATASETS),
        # The dense metric (chosen by --metric auto on a correlated target), with the minor-mode checks.
        "hmc_dense": (["hmc", "--target", "corr-gaussian", "--target-args", "rho=0.9", "--dim", 12, "--chains", 1024,
                       "--warmup", 300, "--draws", 200, "--seed", 8], DATASETS + ["sample_stats/step_size"]),
        # Each chain its own dense metric (--adapt per-chain --metric dense: the element kernels).
        "hmc_dense_per_chain": (["hmc", "--target", "corr-gaussian", "--target-args", "rho=0.9", "--dim", 12,
                                 "--chains", 1024, "--warmup", 300, "--draws", 200, "--adapt", "per-chain", "--metric",
                                 "dense", "--seed", 8], DATASETS + ["sample_stats/step_size"]),
        "svgd": (["svgd", "--dim", 64, "--particles", 3000, "--iters", 10, "--step-size", 0.05, "--seed", 5], SVGD_DATASETS),
        # 33 to 64 coordinates on sm_90a: the warpgroup tiles; odd n, imq's two phi passes.
        "svgd_imq_40": (["svgd", "--dim", 40, "--particles", 2001, "--iters", 5, "--kernel", "imq", "--seed", 10],
                        SVGD_DATASETS),
        # Past 128 coordinates phi takes the distances the median kept: on 2 ranks each keeps its
        # rows' band and computes the rest, on 1 the band holds every pair (odd n, then even).
        "svgd_wide": (["svgd", "--dim", 200, "--particles", 1001, "--iters", 6, "--step-size", 0.05, "--seed", 8],
                      SVGD_DATASETS),
        "svgd_wide_even": (["svgd", "--dim", 257, "--particles", 998, "--iters", 4, "--kernel", "imq", "--seed", 9],
                           SVGD_DATASETS),
    }
    for name, (args, names) in runs.items():
        one, two = t.path(f"gpu_{name}_np1.h5"), t.path(f"gpu_{name}_np2.h5")
        _, out1, _ = t.run(1, *args, "--backend", "cuda", "--out", one)
        _, out2, _ = t.run(2, *args, "--backend", "cuda", "--comm", "mpi", "--out", two)
        # HMC has no collective on the GPU: --comm auto takes MPI for it (no NCCL start-up).
        first = "mpi" if name.startswith("hmc") else "nccl"
        t.check(f"transport {first}" in out1 and "transport mpi" in out2,
                f"{name}: 1 rank on {first}, 2 ranks on one GPU over MPI")
        t.check(same(one, two, names), f"{name}: 1 rank (NCCL) and 2 ranks (MPI) bitwise equal")
        if name.startswith("hmc_dense"):
            # AR(1) covariance rho^|i-j|: every sd 1, lag-one correlation 0.9.
            x = t.read(one, "posterior/x").astype(np.float64).reshape(-1, 12)
            sds, lag1 = x.std(axis=0), np.mean([np.corrcoef(x[:, k], x[:, k + 1])[0, 1] for k in range(11)])
            used = t.attr(one, "metric_used")
            t.check(used == "dense" and np.all(np.abs(x.mean(axis=0)) < 0.05) and np.all(np.abs(sds - 1) < 0.05)
                    and abs(lag1 - 0.9) < 0.01,
                    f"{name} on the GPU: metric {used}, means within 0.05 of 0, sds within 5% of 1 "
                    f"({sds.min():.3f}..{sds.max():.3f}), lag-one correlation {lag1:.4f} (0.9)")

    # One HMC iteration, GPU against CPU, from the same start.
    rng = np.random.default_rng(11)
    x0 = rng.normal(0, 1.2, size=(20000, 64)).astype(np.float32)
    init = t.write_init("gpu_hmc_init.h5", x0)
    common = ["hmc", "--dim", 64, "--chains", 20000, "--warmup", 0, "--adapt", "none", "--jitter", 0, "--draws", 1, "--steps", 10,
              "--step-size", 0.25, "--seed", 9, "--init", init, "--quiet"]
    cpu, gpu = t.path("gpu_hmc_cpu.h5"), t.path("gpu_hmc_gpu.h5")
    t.run(2, *common, "--backend", "cpu", "--out", cpu)
    t.run(1, *common, "--backend", "cuda", "--out", gpu)
    xc, xg = t.read(cpu, "posterior/x")[:, 0], t.read(gpu, "posterior/x")[:, 0]
    moved_c, moved_g = np.any(xc != x0, axis=1), np.any(xg != x0, axis=1)
    agree = np.mean(moved_c == moved_g)
    t.check(agree >= 0.999, f"hmc: GPU and CPU accept decisions agree on {agree:.5f} of chains (>= 0.999); "
                            f"{moved_c.mean():.3f} accepted")
    both = moved_c & moved_g
    err = t.rel_err(xg[both], xc[both])
    t.check(err <= 1e-5, f"hmc: positions of chains both accepted: rel err {err:.2e} <= 1e-5")

    x0 = rng.normal(1.0, 2.0, size=(4096, 64)).astype(np.float32)
    init = t.write_init("gpu_svgd_init.h5", x0)
    common = ["svgd", "--dim", 64, "--particles", 4096, "--iters", 1, "--step-size", 0.05, "--init", init, "--quiet"]
    t.run(2, *common, "--backend", "cpu", "--out", cpu)
    t.run(1, *common, "--backend", "cuda", "--out", gpu)
    err = t.rel_err(t.read(gpu, "posterior/x"), t.read(cpu, "posterior/x"))
    t.check(err <= 1e-5, f"svgd: one step, GPU against CPU: rel err {err:.2e} <= 1e-5")
    # The KSD of the same particles (no step; the warpgroup tiles on sm_90a): within 2e-6 of the CPU's.
    ksd_args = ["svgd", "--dim", 64, "--particles", 4096, "--iters", 0, "--init", init, "--quiet"]
    t.run(2, *ksd_args, "--backend", "cpu", "--out", cpu)
    t.run(1, *ksd_args, "--backend", "cuda", "--out", gpu)
    ksd_c, ksd_g = t.read(cpu, "ksd/ksd_squared")[-1], t.read(gpu, "ksd/ksd_squared")[-1]
    err = abs(float(ksd_g) - float(ksd_c)) / abs(float(ksd_c))
    t.check(err <= 2e-6, f"svgd: KSD^2 GPU {float(ksd_g):.9g} against CPU {float(ksd_c):.9g}: rel err {err:.2e} <= 2e-6")
    t.finish("gpu_e2e")


if __name__ == "__main__":
    main()
