"""Restart equivalence: a run of T iterations equals a run stopped by a signal part-way and
resumed, bitwise, for HMC and SVGD (sgd, adagrad and adam), resumed on the same and on a different
rank count (from one rank, whose output the POSIX driver wrote, to two; in warmup: with the dense metric pooled and per chain, ChEES, and a target acceptance auto raised); SVGD with the IMQ kernel, a KSD series and snapshots; SVGD on minibatches of a dataset (--batch-size) too; a scheduled-checkpoint run
resumed with more draws equals a longer run."""
import glob
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

import dstest as t

COMPARE = {
    "hmc": ["posterior/x", "posterior/draw", "sample_stats/lp", "sample_stats/energy", "sample_stats/acceptance_rate",
            "sample_stats/diverging", "sample_stats/n_steps", "sample_stats/step_size"],
    "svgd": ["posterior/x", "sample_stats/lp"],
    "svgd_logistic": ["posterior/w", "sample_stats/lp"],
    "svgd_ksd": ["posterior/x", "sample_stats/lp", "ksd/iteration", "ksd/ksd_squared", "ksd/bandwidth", "snapshots/x",
                 "snapshots/iteration"],
}


def launch(ranks, args):
    cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, t.DSAMPLER, *[str(a) for a in args]]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def signal_ranks(out_name, signum):
    """Sends signum to the dsampler processes of the run writing out_name (not to mpiexec)."""
    procs = subprocess.run(["pgrep", "-f", f"^{t.DSAMPLER} .*{out_name}"], capture_output=True, text=True).stdout.split()
    for pid in procs:
        try:
            os.kill(int(pid), signum)
        except ProcessLookupError:
            pass
    return len(procs)


def stop_part_way(ranks, args, out, ckpt_dir, signum):
    """Starts the run, waits for its first scheduled checkpoint, then signals its ranks."""
    proc = launch(ranks, args)
    deadline = time.time() + 120
    while time.time() < deadline and not glob.glob(os.path.join(ckpt_dir, "ckpt-*.h5")) and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(0.2)
    signal_ranks(os.path.basename(out), signum)
    stdout, stderr = proc.communicate(timeout=120)
    return proc.returncode, stderr


def equal(a, b, names):
    da, db = t.datasets(a), t.datasets(b)
    return all(n in da and n in db and da[n].shape == db[n].shape and da[n].tobytes() == db[n].tobytes() for n in names)


def case(name, algo, args, total_flag, ranks_first, ranks_resume, signum):
    full = t.path(f"restart_{name}_full.h5")
    part = t.path(f"restart_{name}_part.h5")
    full_dir, part_dir = t.path(f"restart_{name}_full.ckpt"), t.path(f"restart_{name}_part.ckpt")
    for d in (full_dir, part_dir):
        shutil.rmtree(d, ignore_errors=True)
    t.run(ranks_first, *args, "--out", full, "--checkpoint-dir", full_dir, "--quiet")
    rc, stderr = stop_part_way(ranks_first, [*args, "--out", part, "--checkpoint-dir", part_dir], part, part_dir, signum)
    stopped_at = [int(os.path.basename(p)[5:-3]) for p in glob.glob(os.path.join(part_dir, "ckpt-*.h5"))]
    t.check(rc == 75, f"{name}: stopped run exits 75 (got {rc}; stderr {stderr.strip()[-300:]!r})")
    t.check("dsampler resume" in stderr, f"{name}: the stop message says how to resume")
    total = int(args[args.index(total_flag) + 1]) + (int(args[args.index("--warmup") + 1]) if "--warmup" in args else 0)
    t.check(stopped_at and max(stopped_at) < total, f"{name}: stopped part-way (checkpoints {sorted(stopped_at)} of {total})")
    t.run(ranks_resume, "resume", part_dir, "--quiet")
    t.check(equal(full, part, COMPARE[algo]),
            f"{name}: {ranks_first} ranks stopped at {max(stopped_at or [0])}, resumed on {ranks_resume}: bitwise equal")
    if name != "hmc_target_raised":  # its attributes are read after the case
        t.discard(full, part, full_dir, part_dir)


def main():
    hmc = ["hmc", "--dim", 64, "--chains", 1024, "--warmup", 20, "--draws", 1500, "--steps", 10, "--step-size", 0.1,
           "--seed", 9, "--checkpoint-every", 100, "--backend", "cpu"]
    case("hmc_same", "hmc", hmc, "--draws", 2, 2, signal.SIGTERM)
    case("hmc_other", "hmc", hmc, "--draws", 2, 3, signal.SIGUSR1)
    # Started on one rank (the output written by the POSIX driver), stopped in warmup before any
    # draw, resumed on two (MPI-IO, collective writes): every chunk of the draws' coordinate, the
    # second too (past 4096 draws), allocated where the parallel writes need it.
    one = ["hmc", "--dim", 4, "--chains", 16, "--warmup", 300, "--draws", 4500, "--seed", 4, "--checkpoint-every", 50,
           "--backend", "cpu"]
    case("hmc_one_to_two", "hmc", one, "--draws", 1, 2, signal.SIGTERM)
    # Stopped in warmup: the adaptation's state (pooled exact totals, dual averaging) resumes too.
    warm = ["hmc", "--dim", 32, "--chains", 512, "--warmup", 600, "--draws", 100, "--steps", 10, "--seed", 5,
            "--adapt", "pooled", "--save-warmup", "--checkpoint-every", 40, "--backend", "cpu"]
    case("hmc_pooled_warmup", "hmc", warm, "--draws", 2, 3, signal.SIGTERM)
    warm_chain = [*warm[:warm.index("pooled")], "per-chain", *warm[warm.index("pooled") + 1:]]
    case("hmc_per_chain_warmup", "hmc", warm_chain, "--draws", 3, 2, signal.SIGTERM)
    # ChEES trajectory lengths (--steps auto, the default): its state resumes too.
    warm_chees = [a for i, a in enumerate(warm) if a != "--steps" and (i == 0 or warm[i - 1] != "--steps")]
    case("hmc_chees_warmup", "hmc", warm_chees, "--draws", 2, 3, signal.SIGTERM)
    # The Fisher diagonal: the gradients' running moments in the window resume too.
    fisher = [*warm[:warm.index("--seed")], "--seed", 7, "--metric-fit", "fisher", "--target", "banana",
              *warm[warm.index("--seed") + 2:]]
    case("hmc_fisher_warmup", "hmc", fisher, "--draws", 3, 2, signal.SIGTERM)
    # The dense metric chosen by --metric auto, stopped inside a window after the first dense one:
    # the chains' running covariances and the factor resume too.
    dense = ["hmc", "--target", "corr-gaussian", "--target-args", "rho=0.9", "--dim", 16, "--chains", 8192, "--warmup",
             600, "--draws", 100, "--seed", 6, "--save-warmup", "--checkpoint-every", 120, "--backend", "cpu"]
    case("hmc_dense_warmup", "hmc", dense, "--draws", 2, 3, signal.SIGTERM)
    # --adapt per-chain --metric dense, stopped inside a window after the first: every chain's
    # own factor resumes too.
    pc_dense = ["hmc", "--target", "corr-gaussian", "--target-args", "rho=0.9", "--dim", 16, "--chains", 2048,
                "--warmup", 600, "--draws", 100, "--adapt", "per-chain", "--metric", "dense", "--seed", 6,
                "--save-warmup", "--checkpoint-every", 120, "--backend", "cpu"]
    case("hmc_per_chain_dense_warmup", "hmc", pc_dense, "--draws", 3, 2, signal.SIGTERM)
    # --target-accept auto (the default) raised in warmup (after iteration 550 here), stopped in
    # the window after: the raised target and the window's divergence count resume too.
    raised = ["hmc", "--target", "funnel", "--dim", 20, "--chains", 1024, "--warmup", 1000, "--draws", 600, "--seed",
              11, "--save-warmup", "--checkpoint-every", 600, "--backend", "cpu"]
    case("hmc_target_raised", "hmc", raised, "--draws", 2, 3, signal.SIGTERM)
    attrs = [t.attr(t.path(f"restart_hmc_target_raised_{k}.h5"), "target_accept") for k in ("full", "part")]
    t.check(attrs[0] == attrs[1] and "raised" in (attrs[0] or ""), f"target raised: resumed run says the same ({attrs})")
    t.discard(*(t.path(f"restart_hmc_target_raised_{k}{ext}") for k in ("full", "part") for ext in (".h5", ".ckpt")))
    svgd = ["svgd", "--dim", 8, "--particles", 600, "--iters", 400, "--step-size", 0.05, "--seed", 9,
            "--checkpoint-every", 20, "--backend", "cpu"]
    case("svgd_same", "svgd", svgd, "--iters", 2, 2, signal.SIGTERM)
    case("svgd_adagrad_other", "svgd", [*svgd, "--update", "adagrad"], "--iters", 3, 1, signal.SIGINT)
    case("svgd_adam_other", "svgd", [*svgd, "--update", "adam"], "--iters", 2, 3, signal.SIGTERM)
    # The KSD series and the snapshots written before the stop carry over; snapshots written
    # after the checkpoint are cut and written again.
    case("svgd_ksd_imq_other", "svgd_ksd", [*svgd, "--kernel", "imq", "--ksd-every", 7, "--save-every", 9], "--iters", 3,
         2, signal.SIGTERM)
    # Minibatches are keyed by (seed, iteration): a resumed run draws the batches it would have.
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 4)).astype(np.float32)
    y = (rng.uniform(size=3000) < 1 / (1 + np.exp(-(X @ np.array([1.0, -1.0, 0.5, 0.0]))))).astype(np.float32)
    data = t.path("restart_minibatch_data.h5")
    with h5py.File(data, "w") as f:
        f["X"], f["y"] = X, y
    minibatch = ["svgd", "--target", "logistic", "--data", data, "--particles", 400, "--iters", 400, "--batch-size",
                 100, "--update", "adagrad", "--step-size", 0.05, "--seed", 3, "--checkpoint-every", 20,
                 "--backend", "cpu"]
    case("svgd_minibatch_other", "svgd_logistic", minibatch, "--iters", 2, 3, signal.SIGTERM)

    # More draws after a finished run: resume its final checkpoint with a larger --draws.
    short = t.path("restart_extend.h5")
    longer = t.path("restart_extend_long.h5")
    base = ["hmc", "--dim", 4, "--chains", 6, "--warmup", 10, "--steps", 5, "--seed", 2, "--quiet", "--backend", "cpu"]
    shutil.rmtree(t.path("restart_extend.ckpt"), ignore_errors=True)
    shutil.rmtree(t.path("restart_extend_long.ckpt"), ignore_errors=True)
    t.run(2, *base, "--draws", 40, "--checkpoint-every", 25, "--out", short)
    t.run(3, "resume", t.path("restart_extend.ckpt"), "--draws", 90, "--quiet")
    t.run(1, *base, "--draws", 90, "--out", longer)
    t.check(equal(short, longer, COMPARE["hmc"]), "hmc: 40 draws resumed to 90 equal a run of 90")
    rc, _, stderr = t.run(2, "resume", t.path("restart_extend.ckpt"), "--dim", 5, expect_ok=False)
    t.check(rc != 0 and "--dim would change the answer" in stderr, f"resume refuses --dim ({stderr.strip()!r})")
    t.finish("restart")


if __name__ == "__main__":
    main()
