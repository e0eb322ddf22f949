"""Checkpoint faults: a rank killed (SIGKILL) while a checkpoint is being written leaves the
previous one intact and `resume` uses it; a truncated, corrupted or header-damaged newest
checkpoint (a damaged run id too, which must not pass for another run's) is passed over, saying
so, for the one before it; a second signal during a checkpoint does not spoil it;
an output overwritten by another run, a checkpoint of another dimension, and a missing
directory each give a clear error. Every resumed run must equal an uninterrupted one. A checkpoint
of the older format 5 (variable-length strings) whose string heap is damaged so that HDF5 loops
forever ends the job by the read deadline with a message naming it, every file as it was."""
import glob
import os
import struct
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

import dstest as t

ARGS = ["hmc", "--dim", 32, "--chains", 512, "--warmup", 10, "--draws", 600, "--steps", 10, "--step-size", 0.15,
        "--seed", 21, "--backend", "cpu", "--quiet"]
NAMES = ["posterior/x", "sample_stats/lp", "sample_stats/energy", "sample_stats/acceptance_rate"]


def launch(ranks, args, env=None):
    cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, t.DSAMPLER, *[str(a) for a in args]]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})


def rank_pids(out_name):
    found = subprocess.run(["pgrep", "-f", f"^{t.DSAMPLER} .*{out_name}"], capture_output=True, text=True).stdout
    return [int(p) for p in found.split()]


def wait_for(pattern, proc, seconds=120):
    deadline = time.time() + seconds
    while time.time() < deadline and proc.poll() is None:
        if glob.glob(pattern):
            return True
        time.sleep(0.02)
    return bool(glob.glob(pattern))


def equal(a, b):
    da, db = t.datasets(a), t.datasets(b)
    return all(da[n].shape == db[n].shape and da[n].tobytes() == db[n].tobytes() for n in NAMES)


def fresh(name):
    out, ckpt = t.path(f"fault_{name}.h5"), t.path(f"fault_{name}.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    return out, ckpt


def as_format_5_with_looping_heap(path):
    """Rewrites checkpoint `path` as format 5 wrote its strings (variable-length, in a global heap),
    then lengthens the heap's last string by 64 bytes: HDF5 1.10's walk of the heap then lands in
    the zeroed free space and reads objects of size 0 forever. The checksums are left: the loop
    comes first."""
    with h5py.File(path, "r+") as f:
        for key in ("algorithm", "target", "run_id", "config", "inputs", "start_dir"):
            if key in f.attrs:
                value = f.attrs[key]
                value = value.decode() if isinstance(value, bytes) else str(value)
                del f.attrs[key]
                f.attrs.create(key, value, dtype=h5py.string_dtype("ascii"))
        f.attrs.modify("format_version", np.int32(5))
    data = bytearray(open(path, "rb").read())
    heap = data.find(b"GCOL\x01")
    end = heap + struct.unpack("<Q", data[heap + 8:heap + 16])[0]
    at, last = heap + 16, None
    while at + 16 <= end:
        index, size = struct.unpack("<H", data[at:at + 2])[0], struct.unpack("<Q", data[at + 8:at + 16])[0]
        if index == 0:
            break
        last, at = at, at + 16 + (size + 7) // 8 * 8
    assert heap >= 0 and last is not None and end - at > 200, "the heap is not as expected"
    data[last + 8:last + 16] = struct.pack("<Q", struct.unpack("<Q", data[last + 8:last + 16])[0] + 64)
    open(path, "wb").write(data)


def main():
    full, full_ckpt = fresh("full")
    t.run(2, *ARGS, "--out", full, "--checkpoint-dir", full_ckpt)

    # 1. SIGKILL of one rank while checkpoint 200's .tmp is complete but not yet renamed.
    out, ckpt = fresh("kill")
    proc = launch(2, [*ARGS, "--out", out, "--checkpoint-dir", ckpt, "--checkpoint-every", 100],
                  env={"DSAMPLER_FAULT_CHECKPOINT_DELAY": "3"})
    saw_tmp = wait_for(os.path.join(ckpt, "ckpt-200.h5.tmp"), proc)
    pids = rank_pids(os.path.basename(out))
    if pids:
        os.kill(pids[-1], signal.SIGKILL)
    proc.communicate(timeout=120)
    t.check(saw_tmp and proc.returncode != 0, f"kill: a rank killed during checkpoint 200 (rc {proc.returncode})")
    t.check(os.path.exists(os.path.join(ckpt, "ckpt-100.h5")) and not os.path.exists(os.path.join(ckpt, "ckpt-200.h5")),
            f"kill: checkpoint 100 intact, 200 never appeared ({sorted(os.listdir(ckpt))})")
    rc, _, stderr = t.run(3, "resume", ckpt, "--quiet", "--checkpoint-every", 0, expect_ok=False)
    t.check(rc == 0 and equal(full, out), f"kill: resumed from 100 on 3 ranks equals the uninterrupted run (rc {rc})")

    # 2. and 3. A truncated, then a corrupted newest checkpoint: fall back to the previous one.
    for damage in ("truncated", "corrupted", "header", "run_id"):
        out, ckpt = fresh(damage)
        t.run(2, *ARGS, "--out", out, "--checkpoint-dir", ckpt, "--checkpoint-every", 150, "--keep", 3)
        newest = os.path.join(ckpt, "ckpt-600.h5")
        size = os.path.getsize(newest)
        if damage == "truncated":
            os.truncate(newest, size // 2)
        elif damage == "header":  # a plausible but wrong iteration in the metadata
            with h5py.File(newest, "r+") as f:
                f.attrs.modify("iteration", np.int64(590))
        elif damage == "run_id":  # one character of the run id: damage, not another run's checkpoint
            with h5py.File(newest, "r+") as f:
                run_id = f.attrs["run_id"]
                run_id = run_id.decode() if isinstance(run_id, bytes) else run_id
                f.attrs.modify("run_id", ("1" if run_id[0] != "1" else "2") + run_id[1:])
        else:
            with open(newest, "r+b") as f:  # overwrite a stretch of the particle data
                f.seek(int(size * 0.5))
                f.write(os.urandom(4096))
        # A finished run resumed from its last good checkpoint must rewrite the same draws.
        os.remove(os.path.join(ckpt, "ckpt-610.h5"))  # the final checkpoint; 600 is now the newest
        rc, _, stderr = t.run(2, "resume", ckpt, "--quiet", "--checkpoint-every", 0, expect_ok=False)
        t.check(rc == 0 and "skipping checkpoint" in stderr and "ckpt-600.h5" in stderr,
                f"{damage}: newest passed over, saying so ({stderr.strip().splitlines()[0] if stderr.strip() else ''!r})")
        t.check(equal(full, out), f"{damage}: resumed from 450 equals the uninterrupted run")

    # 4. A second signal while the checkpoint is being written.
    out, ckpt = fresh("twice")
    twice_args = [*ARGS[:ARGS.index("--draws") + 1], 6000, *ARGS[ARGS.index("--draws") + 2:]]
    twice_full, twice_full_ckpt = fresh("twice_full")
    t.run(2, *twice_args, "--out", twice_full, "--checkpoint-dir", twice_full_ckpt)
    if os.path.exists(out):
        os.remove(out)
    proc = launch(2, [*twice_args, "--out", out, "--checkpoint-dir", ckpt], env={"DSAMPLER_FAULT_CHECKPOINT_DELAY": "2"})
    # The first signal once the run has started (its output exists), not after a fixed delay: a
    # faster build would finish first.
    wait_for(out, proc, 60)
    time.sleep(0.2)
    for pid in rank_pids(os.path.basename(out)):
        os.kill(pid, signal.SIGTERM)
    wait_for(os.path.join(ckpt, "*.tmp"), proc, 60)
    for pid in rank_pids(os.path.basename(out)):
        os.kill(pid, signal.SIGTERM)
    proc.communicate(timeout=120)
    t.check(proc.returncode == 75, f"twice: exit 75 after two signals (rc {proc.returncode})")
    rc, _, _ = t.run(2, "resume", ckpt, "--quiet", expect_ok=False)
    t.check(rc == 0 and equal(twice_full, out), "twice: the checkpoint resumes to the uninterrupted result")
    t.discard(out, ckpt, twice_full, twice_full_ckpt)

    # 5. The output overwritten by another run of another dimension: refused, clearly.
    out, ckpt = fresh("other")
    t.run(2, *ARGS[:2], 32, *ARGS[3:], "--draws", 50, "--out", out, "--checkpoint-dir", ckpt, "--checkpoint-every", 20)
    other_ckpt = t.path("fault_other_b.ckpt")
    shutil.rmtree(other_ckpt, ignore_errors=True)
    t.run(2, "hmc", "--dim", 8, "--chains", 4, "--warmup", 0, "--draws", 10, "--out", out, "--checkpoint-dir", other_ckpt,
          "--quiet")
    rc, _, stderr = t.run(2, "resume", ckpt, expect_ok=False)
    t.check(rc != 0 and "belongs to another run" in stderr, f"other: refused ({stderr.strip().splitlines()[0]!r})")

    # 6. A checkpoint of another dimension dropped into the directory as the newest.
    out, ckpt = fresh("dim")
    t.run(2, "hmc", "--dim", 4, "--chains", 8, "--warmup", 0, "--draws", 30, "--out", out, "--checkpoint-dir", ckpt,
          "--checkpoint-every", 10, "--quiet")
    alien_out, alien_ckpt = fresh("dim_alien")
    t.run(2, "hmc", "--dim", 6, "--chains", 8, "--warmup", 0, "--draws", 60, "--out", alien_out, "--checkpoint-dir", alien_ckpt,
          "--checkpoint-every", 50, "--quiet")
    shutil.copy(os.path.join(alien_ckpt, "ckpt-50.h5"), os.path.join(ckpt, "ckpt-50.h5"))
    os.remove(alien_out)
    rc, _, stderr = t.run(2, "resume", ckpt, expect_ok=False)
    t.check(rc != 0 and "fault_dim_alien.h5" in stderr, f"dim: the foreign checkpoint is not continued wrongly ({stderr.strip().splitlines()[0]!r})")

    # 7. A missing directory.
    rc, _, stderr = t.run(2, "resume", t.path("no_such.ckpt"), expect_ok=False)
    t.check(rc != 0 and "no such file or directory" in stderr, f"missing: clear error ({stderr.strip().splitlines()[0]!r})")

    # 8. A format-5 checkpoint whose string heap makes HDF5 loop: the read deadline ends every
    # rank, naming the file; nothing is changed.
    out, ckpt = fresh("heap")
    t.run(2, *ARGS, "--out", out, "--checkpoint-dir", ckpt, "--checkpoint-every", 150, "--keep", 3)
    os.remove(os.path.join(ckpt, "ckpt-610.h5"))
    newest = os.path.join(ckpt, "ckpt-600.h5")
    as_format_5_with_looping_heap(newest)
    before = {p: open(p, "rb").read() for p in [out, *glob.glob(os.path.join(ckpt, "*"))]}
    started = time.time()
    proc = launch(2, ["resume", ckpt, "--quiet"], env={"DSAMPLER_READ_DEADLINE_SECONDS": "5"})
    try:
        _, stderr = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
    took = time.time() - started
    t.check(proc.returncode != 0 and took < 100 and "has not finished in 5 s" in stderr and newest in stderr,
            f"heap: a looping read ends by the deadline, naming the file (rc {proc.returncode}, {took:.0f} s, "
            f"{[l for l in stderr.splitlines() if 'dsampler' in l][:1]!r})")
    t.check(all(open(p, "rb").read() == b for p, b in before.items()) and
            sorted(before) == sorted([out, *glob.glob(os.path.join(ckpt, "*"))]), "heap: every file as it was")
    t.discard(*glob.glob(t.path("fault_*")))
    t.finish("checkpoint_faults")


if __name__ == "__main__":
    main()
