"""What a run guards against, each at its cause: stop signals in a rank's first moments (the
`dsampler` launcher blocks them before the program's libraries load); an SVGD run killed hard
(SIGKILL) resumed to the same bits as an uninterrupted run, also with its output deleted; a
resume into another run's checkpoint folder refused; --config lines of any length (a long
comment is never read as a setting, a long path is a value); kernel parameters whose float32
arithmetic would overflow refused up front; --keep above 64 pruning; a plugin that changes the
working directory (refused) or the stop signals' handling (put back: a stop still checkpoints);
truncated or non-ELF shared objects refused before dlopen; JSON data nested past any Stan data's
depth refused before a model is built; 241 output variables (summary and --var on them); a
built-in's numeric --target-args value beside a file of that name; clear errors for --dim,
--call-timeout and axis-like variable names, and for an --init that a running run is still
writing. Each case: bounded time, a non-zero exit where it
fails, one error line naming the input, inputs unchanged."""
import glob
import os
import shutil
import signal
import subprocess
import time

import h5py
import numpy as np

import dstest as t

PLUGINS = os.environ.get("DSAMPLER_PLUGIN_DIR", "")
HOSTILE = os.path.join(PLUGINS, "hostile.so")
TIMEOUT = 120


def launch(ranks, *args, env=None, cwd=None):
    cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, t.DSAMPLER, *map(str, args)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, cwd=cwd)


def finish_within(proc, seconds=TIMEOUT):
    """(returncode, stdout, stderr), returncode None after killing a hang."""
    try:
        stdout, stderr = proc.communicate(timeout=seconds)
        return proc.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        return None, stdout, stderr


def refused(name, args, needle, ranks=2, protect=(), env=None, cwd=None, within=60):
    before = {p: t.file_hash(p) for p in protect}
    start = time.time()
    rc, _, stderr = finish_within(launch(ranks, *args, env={**(env or {}), **t.REFUSAL_ENV}, cwd=cwd), TIMEOUT)
    took = time.time() - start
    lines = t.error_lines(stderr)
    t.check(rc not in (None, 0) and took < within, f"{name}: refused (exit {rc}) within {within} s ({took:.1f} s)")
    t.check(len(lines) == 1 and needle in lines[0], f"{name}: one error line naming {needle!r} ({lines})")
    t.check("HDF5-DIAG" not in stderr, f"{name}: no HDF5 error stack")
    t.check(all(t.file_hash(p) == h for p, h in before.items()), f"{name}: inputs unchanged")
    return lines


def same_datasets(a, b):
    """Every dataset of a equals b's, bit for bit (both hold the same names)."""
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names_a, names_b = [], []
        fa.visit(lambda n: names_a.append(n) if isinstance(fa[n], h5py.Dataset) else None)
        fb.visit(lambda n: names_b.append(n) if isinstance(fb[n], h5py.Dataset) else None)
        if sorted(names_a) != sorted(names_b):
            return False, f"datasets differ: {sorted(set(names_a) ^ set(names_b))}"
        for n in names_a:
            x, y = fa[n][...], fb[n][...]
            if x.shape != y.shape or x.tobytes() != y.tobytes():
                return False, f"{n} differs"
        return True, f"{len(names_a)} datasets"


def rank_pids(proc, out, seconds=10):
    """The process ids of the ranks of `proc` (mpirun) writing `out`, as soon as they exist."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        found = subprocess.run(["pgrep", "-f", f"dsampler(-bin)? .*--out {out}"], capture_output=True,
                               text=True).stdout.split()
        found = [int(p) for p in found if int(p) != proc.pid]
        if found:
            return found
        time.sleep(0.002)
    return []


def blocks(pid, signum):
    """Whether process pid is dsampler (the launcher or the program it runs) and blocks or catches
    signum now (SigBlk, SigCgt in /proc), or has ended."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return True
    guarded = int(fields.get("SigBlk", "0"), 16) | int(fields.get("SigCgt", "0"), 16)
    return fields.get("Name", "").strip() in ("dsampler", "dsampler-bin") and bool(guarded >> (signum - 1) & 1)


def early_signals():
    """SIGUSR1 and SIGTERM to the ranks themselves (as Slurm sends them) the moment they have run
    their first instruction, and 0.05 to 0.25 s later (still in the dynamic loader, before main):
    every run ends 75 with a checkpoint and the line naming it; no rank is killed by the signal.

    "The moment": a rank is found by its command line, which the kernel shows from inside execve
    (and, before that, in mpiexec's forked child, which has mpiexec's); the signal goes once the
    process blocks (or catches) it, which the launcher's entry point does first thing
    (launcher.c). A signal between execve and that instruction finds the handlers execve reset,
    in any program."""
    for signum in (signal.SIGUSR1, signal.SIGTERM):
        for delay in (0.0, 0.05, 0.1, 0.25):
            name = f"early_{signal.Signals(signum).name}_{delay}"
            out, ckpt = t.path("g_early.h5"), t.path("g_early.ckpt")
            shutil.rmtree(ckpt, ignore_errors=True)
            proc = launch(2, "hmc", "--dim", 20, "--chains", 40, "--warmup", 100000, "--draws", 100,
                          "--backend", "cpu", "--quiet", "--out", out, "--checkpoint-dir", ckpt)
            pids = rank_pids(proc, out)
            time.sleep(delay)
            for pid in pids:
                wait_for(lambda: blocks(pid, signum), 2, every=0.0002)
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
            rc, _, stderr = finish_within(proc)
            checkpoints = glob.glob(os.path.join(ckpt, "ckpt-*.h5"))
            t.check(pids and rc == 75 and checkpoints and "stopped by a signal" in stderr,
                    f"{name}: ends 75 with a checkpoint ({len(pids)} ranks signalled, rc {rc}, "
                    f"{len(checkpoints)} checkpoints, {t.error_lines(stderr)[:2]})")


def svgd_hard_kill():
    """SIGKILL in the middle of an SVGD run (no snapshots): resume finishes it, equal bit for bit
    to the uninterrupted run; and again with the output deleted after the kill."""
    common = ["svgd", "--dim", 3, "--particles", 64, "--iters", 400, "--step-size", 0.05, "--seed", 4,
              "--backend", "cpu", "--quiet", "--checkpoint-every", 10]
    ref = t.path("g_svgd_ref.h5")
    shutil.rmtree(t.path("g_svgd_ref.ckpt"), ignore_errors=True)
    t.run(2, *common, "--out", ref, "--checkpoint-dir", t.path("g_svgd_ref.ckpt"))
    for delete in (False, True):
        name = "svgd_kill_delete" if delete else "svgd_kill"
        out, ckpt = t.path(f"g_{name}.h5"), t.path(f"g_{name}.ckpt")
        shutil.rmtree(ckpt, ignore_errors=True)
        if os.path.exists(out):
            os.remove(out)
        proc = launch(2, *common, "--out", out, "--checkpoint-dir", ckpt,
                      env={"DSAMPLER_FAULT_CHECKPOINT_DELAY": "1"})  # a second a checkpoint
        t.check(wait_for(lambda: len(glob.glob(os.path.join(ckpt, "ckpt-*.h5"))) >= 2, 60),
                f"{name}: checkpoints written")
        subprocess.run(["pkill", "-KILL", "-f", f"dsampler.* --out {out}"])
        finish_within(proc, 30)
        if delete and os.path.exists(out):
            os.remove(out)
        rc, _, stderr = t.run(2, "resume", ckpt, "--quiet", expect_ok=False)
        t.check(rc == 0, f"{name}: resume after SIGKILL ends 0 ({t.error_lines(stderr)})")
        if rc == 0:
            same, what = same_datasets(ref, out)
            t.check(same, f"{name}: resumed output equals the uninterrupted run ({what})")


def wait_for(predicate, seconds, every=0.05):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def foreign_checkpoint_dir():
    """resume A --checkpoint-dir B, B holding run B's checkpoints: refused, B unchanged; A can
    still be resumed."""
    runs = {}
    for name in ("A", "B"):
        out, ckpt = t.path(f"g_run{name}.h5"), t.path(f"g_run{name}.ckpt")
        shutil.rmtree(ckpt, ignore_errors=True)
        t.run(2, "hmc", "--dim", 2, "--chains", 8, "--warmup", 50, "--draws", 50, "--checkpoint-every", 25,
              "--backend", "cpu", "--quiet", "--out", out, "--checkpoint-dir", ckpt)
        runs[name] = (out, ckpt)
    # B's folder holds no lock file once B ended: the refused run must not leave one of its own.
    b_files = sorted(glob.glob(os.path.join(runs["B"][1], "*")))
    b_listing = sorted(os.listdir(runs["B"][1]))
    refused("resume_into_other_folder", ["resume", runs["A"][1], "--checkpoint-dir", runs["B"][1], "--draws", 80],
            "holds the checkpoints of another run", protect=[*b_files, runs["B"][0], runs["A"][0]])
    t.check(sorted(glob.glob(os.path.join(runs["B"][1], "*"))) == b_files, "resume_into_other_folder: B's folder as it was")
    t.check(sorted(os.listdir(runs["B"][1])) == b_listing,
            f"resume_into_other_folder: no lock file left in B ({sorted(os.listdir(runs['B'][1]))})")
    rc, _, stderr = t.run(2, "resume", runs["A"][1], "--draws", 80, "--quiet", expect_ok=False)
    t.check(rc == 0, f"resume_into_other_folder: A resumes into its own folder ({t.error_lines(stderr)})")


def checkpoint_name_taken():
    """A directory under the name of a checkpoint the run will write (ckpt-125.h5 for a resume
    that checkpoints at 125): refused before the run, naming it, no .tmp left; the resume runs
    once it is moved away."""
    out, ckpt = t.path("g_taken.h5"), t.path("g_taken.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(2, "hmc", "--dim", 2, "--chains", 8, "--warmup", 50, "--draws", 50, "--checkpoint-every", 25,
          "--backend", "cpu", "--quiet", "--out", out, "--checkpoint-dir", ckpt)
    taken = os.path.join(ckpt, "ckpt-125.h5")
    os.mkdir(taken)
    files = sorted(glob.glob(os.path.join(ckpt, "ckpt-*.h5")))
    refused("checkpoint_name_taken", ["resume", ckpt, "--draws", 80, "--quiet"], "ckpt-125.h5 is a directory",
            protect=[p for p in files if p != taken] + [out])
    t.check(sorted(os.listdir(ckpt)) == sorted(os.path.basename(p) for p in files),
            f"checkpoint_name_taken: the folder as it was, no .tmp ({sorted(os.listdir(ckpt))})")
    os.rmdir(taken)
    rc, _, stderr = t.run(2, "resume", ckpt, "--draws", 80, "--quiet", expect_ok=False)
    t.check(rc == 0 and os.path.isfile(taken), f"checkpoint_name_taken: resumes once it is moved ({t.error_lines(stderr)})")


def config_lines():
    """A 300-byte comment ending in 'dim = 3' sets nothing; a 260-byte path is a value; a line
    indented with a vertical tab is refused naming its line."""
    cfg = t.path("g_long.ini")
    long_out = t.path("o" * 200 + ".h5")
    with open(cfg, "w") as f:
        f.write("; " + "x" * 300 + " dim = 3\n")
        f.write(f"out = {long_out}\n")
        f.write("dim = 2\nchains = 4\nwarmup = 20\ndraws = 10\nbackend = cpu\n")
    rc, _, stderr = t.run(1, "hmc", "--config", cfg, "--quiet", expect_ok=False)
    t.check(rc == 0 and os.path.exists(long_out), f"config_long: a run with a 300-byte comment and a long path "
                                                    f"({t.error_lines(stderr)})")
    if rc == 0:
        shape = t.read(long_out, "posterior/x").shape
        t.check(shape[-1] == 2, f"config_long: dim 2 (the comment's dim = 3 not read): shape {shape}")
    vt = t.path("g_vt.ini")
    with open(vt, "w") as f:
        f.write("dim = 2\n\x0bchains = 5\n")
    refused("config_vertical_tab", ["hmc", "--config", vt, "--out", t.path("g_vt.h5")], "line 2 is indented",
            protect=[vt])


def kernel_ranges():
    base = ["svgd", "--dim", 2, "--particles", 8, "--iters", 5, "--backend", "cpu", "--out", t.path("g_k.h5")]
    for value in ("1e160", "1e-30", "1e7"):
        refused(f"imq_c_{value}", [*base, "--kernel", "imq", "--imq-c", value], "--imq-c: expected a number in")
    for value in ("1e-30", "1e30"):
        refused(f"bandwidth_{value}", [*base, "--bandwidth", value], "--bandwidth: expected a number in")
    rc, _, stderr = t.run(2, *base, "--kernel", "imq", "--imq-c", "1e5", "--quiet", expect_ok=False)
    t.check(rc == 0, f"imq_c_1e5: in range, runs ({t.error_lines(stderr)})")


def keep_many():
    """--keep 70 over 100 checkpoints: the newest 70 stay (the listing is not cut at 64)."""
    out, ckpt = t.path("g_keep.h5"), t.path("g_keep.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(1, "hmc", "--dim", 2, "--chains", 4, "--warmup", 50, "--draws", 50, "--checkpoint-every", 1,
          "--keep", 70, "--backend", "cpu", "--quiet", "--out", out, "--checkpoint-dir", ckpt)
    numbers = sorted(int(os.path.basename(p)[5:-3]) for p in glob.glob(os.path.join(ckpt, "ckpt-*.h5")))
    t.check(numbers == list(range(31, 101)), f"keep_70: checkpoints 31..100 kept ({len(numbers)}: "
                                             f"{numbers[:2]}..{numbers[-2:]})")


def plugin_process_state():
    if not os.path.exists(HOSTILE):
        t.check(False, f"the hostile plugin {HOSTILE} exists")
        return
    target = ["--target", f"plugin:{HOSTILE}"]
    work = t.path("g_chdir")
    os.makedirs(work, exist_ok=True)
    refused("plugin_chdir", ["hmc", *target, "--chains", 4, "--out", "chdir.h5", "--quiet"],
            "changed the working directory", env={"HOSTILE_MODE": "chdir"}, cwd=work)
    t.check(not os.path.exists("/chdir.h5"), "plugin_chdir: nothing written where the plugin moved to")
    out, ckpt = t.path("g_sig.h5"), t.path("g_sig.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    proc = launch(2, "hmc", *target, "--dim", 20, "--chains", 40, "--warmup", 1000000, "--draws", 10, "--out", out,
                  "--checkpoint-dir", ckpt, "--quiet", env={"HOSTILE_MODE": "ignore_signals"})
    time.sleep(2.0)
    proc.send_signal(signal.SIGUSR1)
    rc, _, stderr = finish_within(proc)
    t.check(rc == 75 and glob.glob(os.path.join(ckpt, "ckpt-*.h5")),
            f"plugin_signals: SIGUSR1 still stops the run with a checkpoint (rc {rc}, {t.error_lines(stderr)})")
    t.check("changed how SIGTERM is handled" in stderr, "plugin_signals: a warning names the changed signal")


def shared_objects():
    if not os.path.exists(HOSTILE):
        return
    cut = t.path("g_truncated.so")
    with open(HOSTILE, "rb") as f:
        data = f.read()
    with open(cut, "wb") as f:
        f.write(data[: len(data) // 2])
    refused("plugin_truncated", ["hmc", "--target", f"plugin:{cut}", "--chains", 4, "--out", t.path("g_so.h5")],
            "truncated or damaged", protect=[cut])
    text = t.path("g_text.so")
    with open(text, "w") as f:
        f.write("not a library\n")
    refused("plugin_not_elf", ["hmc", "--target", f"plugin:{text}", "--chains", 4, "--out", t.path("g_so.h5")],
            "not a shared library", protect=[text])


def deep_json():
    """JSON data 200000 levels deep for a Stan model: refused in seconds, before any build (the
    model file need not compile: the data are read first)."""
    model, data = t.path("g_model.stan"), t.path("g_deep.json")
    with open(model, "w") as f:
        f.write("parameters { real y; } model { y ~ normal(0, 1); }\n")
    with open(data, "w") as f:
        f.write('{"x": ' + "[" * 200000 + "]" * 200000 + "}")
    refused("json_deep", ["hmc", "--target", f"stan:{model}", "--data", data, "--chains", 4, "--out",
                          t.path("g_deep.h5")], "JSON nested more than 32 levels", protect=[data], within=30)


def many_variables():
    """241 output variables (v_k = (k + 1) x_(k mod dim)): written, summarised, --var on one."""
    if not os.path.exists(HOSTILE):
        return
    out = t.path("g_many.h5")
    rc, _, stderr = finish_within(launch(2, "hmc", "--target", f"plugin:{HOSTILE}", "--dim", 3, "--chains", 4,
                                         "--warmup", 20, "--draws", 10, "--backend", "cpu", "--quiet", "--out", out,
                                         env={"HOSTILE_MODE": "many_vars"}))
    t.check(rc == 0, f"many_vars: a plugin with 241 output variables runs ({t.error_lines(stderr)})")
    if rc != 0:
        return
    with h5py.File(out, "r") as f:
        names = [n for n in f["posterior"] if isinstance(f["posterior"][n], h5py.Dataset) and n.startswith("v")]
        values = {n: f["posterior"][n][...] for n in names}
    ok = len(names) == 241 and all(np.array_equal(values[f"v{k}"] / (k + 1), values[f"v{k % 3}"] / (k % 3 + 1))
                                   for k in range(241))
    t.check(ok, f"many_vars: 241 variables, v_k / (k + 1) = x_(k mod 3) ({len(names)} found)")
    csv = t.path("g_many.csv")
    rc, _, stderr = t.run(1, "summary", out, "--csv", csv, expect_ok=False)
    rows = t.read_csv(csv)[1] if rc == 0 else {}
    t.check(rc == 0 and len(rows) == 241, f"many_vars: summary of all 241 ({len(rows)} rows, {t.error_lines(stderr)})")
    rc, stdout, stderr = t.run(1, "summary", out, "--var", "v200", expect_ok=False)
    t.check(rc == 0 and "v200" in stdout, f"many_vars: summary --var v200 ({t.error_lines(stderr)})")


def numeric_args_beside_files():
    """gaussian scale=2 run from a folder holding a file named 2, which then changes: the resume
    goes on (2 is a number to the built-in, no input file)."""
    work = t.path("g_args")
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "2"), "w") as f:
        f.write("first\n")
    shutil.rmtree(os.path.join(work, "run.ckpt"), ignore_errors=True)
    args = ["hmc", "--dim", 2, "--target-args", "scale=2", "--chains", 4, "--warmup", 20, "--draws", 20,
            "--checkpoint-every", 10, "--backend", "cpu", "--quiet", "--out", "run.h5", "--checkpoint-dir", "run.ckpt"]
    rc, _, stderr = finish_within(launch(1, *args, cwd=work))
    t.check(rc == 0, f"args_file: the run ({t.error_lines(stderr)})")
    with open(os.path.join(work, "2"), "w") as f:
        f.write("changed\n")
    rc, _, stderr = finish_within(launch(1, "resume", "run.ckpt", "--draws", 30, "--quiet", cwd=work))
    t.check(rc == 0, f"args_file: resume after the file named 2 changed ({t.error_lines(stderr)})")


def clear_errors():
    base = ["hmc", "--chains", 4, "--out", t.path("g_e.h5")]
    refused("dim_2_40", [*base, "--dim", 2 ** 40], "takes a whole number of dimensions in [1, 1e12], got 1099511627776")
    refused("call_timeout_big", [*base, "--dim", 2, "--call-timeout", "1e12"],
            "at most 1000000000, about 31 years), got 1000000000000")


def input_being_written():
    """--init naming the output of a run still writing it: said so, not called damaged; that
    output truncated once the run stopped: its resume calls it damaged, not written by a running
    run (the lock it finds is the resume's own)."""
    out, ckpt = t.path("g_writing.h5"), t.path("g_writing.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    proc = launch(1, "hmc", "--dim", 2, "--chains", 8, "--warmup", 10000000, "--draws", 10, "--backend", "cpu",
                  "--quiet", "--out", out, "--checkpoint-dir", ckpt)
    try:
        t.check(wait_for(lambda: os.path.exists(out) and os.path.getsize(out) > 0, 30), "writing: the run started")
        time.sleep(1.0)
        refused("init_being_written", ["hmc", "--dim", 2, "--chains", 8, "--init", out, "--out", t.path("g_w2.h5")],
                "is being written by a running dsampler run")
    finally:
        proc.send_signal(signal.SIGUSR1)
        rc, _, stderr = finish_within(proc)
    t.check(rc == 75, f"writing: stopped with a checkpoint (exit {rc}, {t.error_lines(stderr)})")
    os.truncate(out, os.path.getsize(out) - 5)
    lines = refused("resume_truncated_output", ["resume", ckpt], "g_writing.h5: truncated or damaged", protect=[out])
    t.check(not any("being written" in line for line in lines), f"resume_truncated_output: no running run blamed ({lines})")


def main():
    early_signals()
    svgd_hard_kill()
    foreign_checkpoint_dir()
    checkpoint_name_taken()
    config_lines()
    kernel_ranges()
    keep_many()
    plugin_process_state()
    shared_objects()
    deep_json()
    many_variables()
    numeric_args_beside_files()
    clear_errors()
    input_being_written()
    t.finish("guards")


if __name__ == "__main__":
    main()
