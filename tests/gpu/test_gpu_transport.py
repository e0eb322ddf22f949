"""The transport between GPU ranks, end to end: `dsampler --backend cuda` on two ranks.

`two` (label gpu2, needs 2 GPUs): SVGD (uneven and even particle blocks, sgd and adagrad) and HMC
(fixed steps, pooled adaptation, the banana and funnel targets) over NCCL on 2 ranks are bitwise
equal to 1 rank and to the MPI transport on 2 ranks; under per-task binding (each rank sees one
GPU, its own, through CUDA_VISIBLE_DEVICES: bind_one_gpu.sh) `--comm auto` takes NCCL and gives
the same output.

`shared` (label gpu, needs 1 GPU): two ranks that see one GPU only: `--comm auto` takes MPI and
rank 0 alone says which ranks share which GPU; `--comm nccl` is refused naming them.

The transport used is read from the run's first line ("transport nccl") and from the output's
config_transport_used attribute. Exits 77 where too few GPUs are visible (nvidia-smi -L,
narrowed by CUDA_VISIBLE_DEVICES), or without numpy and h5py."""
import os
import shutil
import subprocess
import sys

try:
    import h5py

    import dstest as t
except ImportError as missing:  # run with the system python3, which may lack numpy or h5py
    print(f"skipped: {missing}")
    sys.exit(77)

BIND_ONE_GPU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bind_one_gpu.sh")

RUNS = {
    # 3001 particles: blocks of 1500 and 1501 rows, the padded allgather; 2048: even blocks.
    "svgd_uneven": ["svgd", "--dim", 64, "--particles", 3001, "--iters", 10, "--step-size", 0.05, "--seed", 5],
    "svgd_even_adagrad": ["svgd", "--dim", 33, "--particles", 2048, "--iters", 8, "--step-size", 0.05,
                          "--update", "adagrad", "--seed", 8],
    "svgd_banana": ["svgd", "--target", "banana", "--particles", 1001, "--iters", 12, "--step-size", 0.05,
                    "--seed", 9],
    "hmc_fixed": ["hmc", "--dim", 64, "--chains", 4097, "--warmup", 0, "--adapt", "none", "--jitter", 0, "--draws", 20,
                  "--steps", 10, "--step-size", 0.1, "--seed", 5],
    "hmc_pooled": ["hmc", "--dim", 16, "--chains", 2047, "--warmup", 200, "--adapt", "pooled", "--draws", 50,
                   "--seed", 6],
    "hmc_banana": ["hmc", "--target", "banana", "--chains", 513, "--warmup", 100, "--draws", 20, "--seed", 7],
    "hmc_funnel": ["hmc", "--target", "funnel", "--dim", 10, "--chains", 1025, "--warmup", 150, "--draws", 30,
                   "--seed", 10],
}
# Runs repeated under per-task binding.
BOUND_RUNS = ["svgd_uneven", "hmc_pooled"]


def visible_gpus():
    """GPUs this test may use: nvidia-smi's list, narrowed by CUDA_VISIBLE_DEVICES when set."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        proc = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if proc.returncode != 0:
        return 0
    count = sum(1 for line in proc.stdout.splitlines() if line.startswith("GPU "))
    narrowed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if narrowed is not None:
        count = min(count, len([d for d in narrowed.split(",") if d.strip()]))
    return count


def run(ranks, args, env=None, wrapper=None, expect_ok=True):
    """`dsampler args...` on `ranks` ranks, each started through `wrapper` when given, with
    `env` added to the environment mpiexec passes on. Returns (returncode, stdout, stderr)."""
    cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, *([wrapper] if wrapper else []), t.DSAMPLER,
           *[str(a) for a in args]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=t.TIMEOUT, env={**os.environ, **(env or {})})
    if expect_ok and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.returncode, proc.stdout, proc.stderr


def transport_attr(path):
    with h5py.File(path, "r") as f:
        value = f.attrs.get("config_transport_used")
    return value.decode() if isinstance(value, bytes) else value


def bitwise_equal(a, b):
    """Every dataset of both outputs, bit for bit (as test_rank_invariance.py compares)."""
    da, db = t.datasets(a), t.datasets(b)
    return len(da) >= 2 and da.keys() == db.keys() and all(
        da[k].dtype == db[k].dtype and da[k].tobytes() == db[k].tobytes() for k in da)


def two_gpus():
    for name, args in RUNS.items():
        one, nccl, mpi = (t.path(f"{name}_{kind}.h5") for kind in ("np1", "np2_nccl", "np2_mpi"))
        run(1, [*args, "--backend", "cuda", "--out", one])
        _, out_nccl, _ = run(2, [*args, "--backend", "cuda", "--comm", "nccl", "--out", nccl])
        _, out_mpi, _ = run(2, [*args, "--backend", "cuda", "--comm", "mpi", "--out", mpi])
        t.check("transport nccl" in out_nccl and transport_attr(nccl) == "nccl",
                f"{name}: --comm nccl on 2 ranks runs over NCCL ({transport_attr(nccl)})")
        t.check("transport mpi" in out_mpi and transport_attr(mpi) == "mpi",
                f"{name}: --comm mpi on 2 ranks runs over MPI ({transport_attr(mpi)})")
        t.check(bitwise_equal(one, nccl), f"{name}: 2 ranks over NCCL bitwise equal to 1 rank")
        t.check(bitwise_equal(nccl, mpi), f"{name}: 2 ranks over NCCL bitwise equal to 2 ranks over MPI")

    # Every rank sees both GPUs and takes local rank % 2; then each rank sees its own GPU only,
    # as device 0, as under Slurm's per-task binding: both are distinct GPUs, so auto is NCCL
    # for SVGD (HMC has no collective on the GPU: auto takes MPI for it).
    for name in BOUND_RUNS:
        expected = "mpi" if name.startswith("hmc") else "nccl"
        one = t.path(f"{name}_np1.h5")
        for label, wrapper in (("all GPUs visible", None), ("per-task binding", BIND_ONE_GPU)):
            out = t.path(f"{name}_np2_auto_{'bound' if wrapper else 'all'}.h5")
            _, stdout, stderr = run(2, [*RUNS[name], "--backend", "cuda", "--comm", "auto", "--out", out],
                                    wrapper=wrapper)
            t.check(f"transport {expected}" in stdout and transport_attr(out) == expected and "share GPU" not in stderr,
                    f"{name}, {label}: --comm auto takes {expected} ({transport_attr(out)})")
            t.check(bitwise_equal(one, out), f"{name}, {label}: bitwise equal to 1 rank")


def shared_gpu():
    # Both ranks see the same one GPU (the first visible), as a wrong binding would leave them.
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    env = {"CUDA_VISIBLE_DEVICES": first}
    args = RUNS["svgd_uneven"]
    one = t.path("shared_np1.h5")
    run(1, [*args, "--backend", "cuda", "--out", one], env=env)
    out = t.path("shared_np2_auto.h5")
    _, stdout, stderr = run(2, [*args, "--backend", "cuda", "--comm", "auto", "--out", out], env=env)
    notes = [line for line in stderr.splitlines() if "share GPU" in line]
    t.check("transport mpi" in stdout and transport_attr(out) == "mpi",
            f"two ranks on one GPU: --comm auto takes MPI ({transport_attr(out)})")
    t.check(len(notes) == 1 and "ranks 0 and 1 share GPU GPU-" in notes[0] and "using MPI transport" in notes[0],
            f"two ranks on one GPU: rank 0 alone says so: {notes}")
    t.check(bitwise_equal(one, out), "two ranks on one GPU over MPI: bitwise equal to 1 rank")
    refused = t.path("shared_np2_nccl.h5")
    rc, _, stderr = run(2, [*args, "--backend", "cuda", "--comm", "nccl", "--out", refused], env=env,
                        expect_ok=False)
    errors = t.error_lines(stderr)
    t.check(rc != 0 and any("--comm nccl: ranks 0 and 1 share GPU GPU-" in line for line in errors),
            f"two ranks on one GPU: --comm nccl refused naming the ranks (exit {rc}): {errors}")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in ("two", "shared"):
        print("usage: test_gpu_transport.py two|shared", file=sys.stderr)
        sys.exit(2)
    needed = 2 if mode == "two" else 1
    gpus = visible_gpus()
    if gpus < needed:
        print(f"skipped: {gpus} GPU(s) visible, {needed} needed")
        sys.exit(77)
    if mode == "two":
        two_gpus()
    else:
        shared_gpu()
    t.finish(f"gpu_transport_{mode}")


if __name__ == "__main__":
    main()
