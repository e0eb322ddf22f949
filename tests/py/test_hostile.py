"""Hostile use, round three: calls into a plugin that never return (--call-timeout, and a stop
signal while one is stalled), a plugin's multi-line messages, HDF5 failures told without source
locations, a resume from another working directory with relative paths, a plugin's output
variable with a zero-length axis, target arguments that make log p -inf. Every case: bounded
time, a non-zero exit where it fails, one error line naming the input, inputs unchanged."""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

import dstest as t

PLUGINS = os.environ.get("DSAMPLER_PLUGIN_DIR", "")
HOSTILE = os.path.join(PLUGINS, "hostile.so")
TIMEOUT = 60


def launch(ranks, *args, env=None, cwd=None):
    """dsampler on `ranks` ranks in the background, output captured."""
    cmd = [t.MPIEXEC, t.NP_FLAG, str(ranks), *t.PREFLAGS, t.DSAMPLER, *map(str, args)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, cwd=cwd)


def finish_within(proc, seconds):
    """(returncode, stderr, seconds taken), or (None, stderr so far, seconds) after killing a hang."""
    start = time.time()
    try:
        _, stderr = proc.communicate(timeout=seconds)
        return proc.returncode, stderr, time.time() - start
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
        return None, stderr, time.time() - start


def wait_for(predicate, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def refused(name, args, needle, ranks=2, protect=(), env=None, cwd=None, mid_run=False):
    """A case that must fail: within TIMEOUT, non-zero, one error line naming `needle`, no
    source location (file.c:123) and no HDF5 error stack, `protect` unchanged. Returns the line.
    mid_run: the failure comes after work started (mpirun's usual teardown, not REFUSAL_ENV)."""
    before = {p: t.file_hash(p) for p in protect}
    env = env if mid_run else {**(env or {}), **t.REFUSAL_ENV}
    rc, stderr, took = finish_within(launch(ranks, *args, env=env, cwd=cwd), TIMEOUT)
    lines = t.error_lines(stderr)
    t.check(rc is not None, f"{name}: ends within {TIMEOUT} s")
    t.check(rc not in (None, 0), f"{name}: exit {rc} != 0 ({took:.1f} s)")
    t.check(len(lines) == 1 and needle in lines[0], f"{name}: one error line naming {needle!r} ({[line[:300] for line in lines]})")
    t.check(not re.search(r"\.(c|cpp|cu|h):[0-9]", "\n".join(lines)), f"{name}: no source location")
    t.check("HDF5-DIAG" not in stderr, f"{name}: no HDF5 error stack")
    t.check({p: t.file_hash(p) for p in protect} == before, f"{name}: inputs unchanged")
    return lines[0] if lines else ""


# --- 1. deadlines on target calls ---------------------------------------------------------------

def stalled_call(name, ranks, stalling_rank, mode="stall", call="logp_grad", checkpoint_first=False):
    """A plugin call that never returns on one rank, --call-timeout 2: the job ends on every rank
    within 20 s with one line naming the rank, the call and the time; a checkpoint written before
    the stall is still there, and the run resumes from it."""
    out, ckpt = t.path(f"hs_{name}.h5"), t.path(f"hs_{name}.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    for stale in (out, t.path(f"hs_{name}.mark")):
        if os.path.exists(stale):
            os.remove(stale)
    env = {"HOSTILE_MODE": mode, "HOSTILE_RANK": str(stalling_rank), "HOSTILE_MARK": t.path(f"hs_{name}.mark")}
    # With checkpoint_first the plugin stalls once the first checkpoint exists (iteration 100), so
    # the resume has 210 iterations left: a 2-rank run's collectives on a loaded machine can take
    # tens of milliseconds each.
    if checkpoint_first:
        env["HOSTILE_WHEN"] = os.path.join(ckpt, "ckpt-100.h5")
    proc = launch(ranks, "hmc", "--target", f"plugin:{HOSTILE}", "--dim", 2, "--chains", 4,
                  "--warmup", 300 if checkpoint_first else 5000, "--draws", 10, "--steps", 3, "--backend", "cpu",
                  "--quiet", "--call-timeout", 2, "--checkpoint-every", 100, "--out", out, "--checkpoint-dir", ckpt,
                  env=env)
    t.check(wait_for(lambda: os.path.exists(env["HOSTILE_MARK"]), 30), f"{name}: the plugin stalls")
    before = [env["HOSTILE_WHEN"]] if checkpoint_first else []
    rc, stderr, took = finish_within(proc, 20)
    lines = t.error_lines(stderr)
    t.check(rc is not None and rc != 0, f"{name}: ends non-zero within 20 s of the stall (rc {rc}, {took:.1f} s)")
    t.check(len(lines) == 1 and f"rank {stalling_rank} " in lines[0]
            and f"plugin hostile.so: {call} has not returned after" in lines[0] and "--call-timeout 2" in lines[0],
            f"{name}: one line naming the rank, the call and the time ({lines})")
    elapsed = re.search(r"after ([0-9.]+) s", lines[0]) if lines else None
    t.check(elapsed is not None and 2.0 <= float(elapsed.group(1)) < 5.0, f"{name}: the time is the timeout's")
    if checkpoint_first:
        kept = [p for p in before if os.path.exists(p)]
        t.check(len(kept) >= 1, f"{name}: checkpoints of before the stall are still there ({before})")
        # The same run, its plugin well-behaved now, goes on from the newest of them.
        rc, _, stderr = t.run(ranks, "resume", ckpt, "--quiet", expect_ok=False, timeout=TIMEOUT)
        t.check(rc == 0, f"{name}: resume after the stall ends 0 ({t.error_lines(stderr)})")
        with h5py.File(out, "r") as f:
            t.check(f["posterior/x"].shape == (4, 10, 2), f"{name}: the resumed output is whole")


def stop_while_stalled():
    """SIGUSR1 while a call is stalled, with the default --call-timeout (600 s): the run cannot
    checkpoint, and the job ends within the stop grace (30 s) instead of waiting for the call."""
    out = t.path("hs_stop.h5")
    mark = t.path("hs_stop.mark")
    if os.path.exists(mark):
        os.remove(mark)
    shutil.rmtree(t.path("hs_stop.ckpt"), ignore_errors=True)
    proc = launch(2, "hmc", "--target", f"plugin:{HOSTILE}", "--dim", 2, "--chains", 4, "--warmup", 100,
                  "--draws", 10, "--backend", "cpu", "--quiet", "--out", out,
                  env={"HOSTILE_MODE": "stall", "HOSTILE_RANK": "1", "HOSTILE_MARK": mark})
    t.check(wait_for(lambda: os.path.exists(mark), 30), "stop_stalled: the plugin stalls")
    time.sleep(0.5)
    proc.send_signal(signal.SIGUSR1)
    rc, stderr, took = finish_within(proc, 60)
    lines = t.error_lines(stderr)
    t.check(rc is not None and rc != 0 and rc != 75, f"stop_stalled: ends non-zero, not 75 ({rc}, {took:.1f} s)")
    t.check(took < 45, f"stop_stalled: within the stop grace ({took:.1f} s < 45 s)")
    t.check(len(lines) == 1 and "logp_grad has not returned" in lines[0] and "after the stop request" in lines[0],
            f"stop_stalled: one line naming the call and the stop ({lines})")


def call_timeout_option():
    """--call-timeout: a positive finite number of seconds, also as an INI key; a checkpoint keeps
    it, and resume may give another."""
    small = ["hmc", "--dim", 2, "--chains", 2, "--warmup", 5, "--draws", 5, "--backend", "cpu", "--quiet"]
    for value, needle in (("0", "positive number of seconds"), ("-3", "positive number of seconds"),
                          ("abc", "finite number"), ("inf", "finite number"), ("1e12", "at most")):
        refused(f"call_timeout_{value}", [*small, "--call-timeout", value, "--out", t.path("hs_ct.h5")],
                f"--call-timeout: expected a {needle}" if needle != "at most" else needle, ranks=1)
    ini = t.path("hs_ct.ini")
    with open(ini, "w") as f:
        f.write("call-timeout = -1\n")
    refused("call_timeout_ini", [*small, "--config", ini, "--out", t.path("hs_ct.h5")], "--call-timeout: expected a positive", ranks=1)
    out, ckpt = t.path("hs_ct_kept.h5"), t.path("hs_ct_kept.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(1, *small, "--call-timeout", 7.5, "--checkpoint-every", 5, "--out", out, "--checkpoint-dir", ckpt)
    newest = sorted(glob.glob(os.path.join(ckpt, "ckpt-*.h5")))[-1]
    with h5py.File(newest, "r") as f:
        config = f.attrs["config"]
        config = config.decode() if isinstance(config, bytes) else str(config)
    t.check("call-timeout = 7.5\n" in config, "call_timeout: the checkpoint keeps it")
    t.check(t.attr(out, "config_call_timeout") == "7.5", "call_timeout: the output records it")
    rc, _, stderr = t.run(1, "resume", ckpt, "--draws", 8, "--call-timeout", 9, "--quiet", expect_ok=False)
    t.check(rc == 0, f"call_timeout: resume takes another ({t.error_lines(stderr)})")


# --- 2. a plugin's messages stay one line -----------------------------------------------------

def plugin_messages():
    """A plugin's message with newlines, a tab and a terminal escape, from create and from
    logp_grad: one line, the control bytes written as \\n, \\t, \\x1b; a message of 100000
    characters is cut, and says so."""
    small = ["hmc", "--target", f"plugin:{HOSTILE}", "--dim", 2, "--chains", 4, "--warmup", 20, "--draws", 20,
             "--backend", "cpu", "--quiet", "--out", t.path("hs_msg.h5")]
    line = refused("multiline_create", small, "cannot read the table:\\nline 1: bad\\r\\nline 2:\\tworse",
                   env={"HOSTILE_MODE": "multiline"})
    t.check("\\x1b[31mred\\x1b[0m" in line and "\x1b" not in line, f"multiline_create: the escape byte escaped ({line!r})")
    refused("multiline_call", small, "the likelihood failed:\\n  row 2 overflowed\\n  row 3\\tunderflowed",
            env={"HOSTILE_MODE": "multiline_call"}, mid_run=True)
    line = refused("long_message", small, "mmmm", env={"HOSTILE_MODE": "long_message"}, mid_run=True)
    t.check(line.endswith(" [...]") and len(line) < 2100, f"long_message: cut, and says so ({len(line)} characters)")


# --- 3. HDF5 failures in the user's words ---------------------------------------------------------

def hdf5_words():
    """A failed HDF5 call names the file and what was being done, never a source location: summary
    of an output whose sample_stats/lp holds strings (H5Dread cannot convert them), an output that
    reaches a file-size limit on one rank (the POSIX driver's errno text, not its buffer dump)."""
    odd = t.path("hs_lp_strings.h5")
    with h5py.File(odd, "w") as f:
        f["posterior/x"] = np.arange(24, dtype=np.float32).reshape(2, 6, 2)
        f["sample_stats/lp"] = np.array([[b"x"] * 6] * 2)
    line = refused("summary_lp_strings", ["summary", odd], f"summary {odd}: HDF5 could not read a dataset",
                   protect=[odd])
    t.check("HDF5 call failed" not in line, "summary_lp_strings: in words")
    out = t.path("hs_fsize.h5")
    line = refused("fsize_one_rank", ["hmc", "--dim", 30, "--chains", 40, "--warmup", 50, "--draws", 2000,
                                      "--backend", "cpu", "--quiet", "--out", out], f"--out {out}: ", ranks=1,
                   env={"DSAMPLER_FAULT_FILE_SIZE_LIMIT": "300000"}, mid_run=True)
    t.check("File too large" in line and "buf = 0x" not in line, f"fsize_one_rank: the reason alone ({line!r})")
    line = refused("fsize_two_ranks", ["hmc", "--dim", 30, "--chains", 40, "--warmup", 50, "--draws", 2000,
                                       "--backend", "cpu", "--quiet", "--out", out], f"--out {out}: ", ranks=2,
                   env={"DSAMPLER_FAULT_FILE_SIZE_LIMIT": "300000"}, mid_run=True)


# --- 4. relative paths, resumed from another folder ---------------------------------------------

H5_SAME = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "h5_same.py")


def relative_run(folder):
    """A fresh folder with a --init file and a corr-gaussian cov= file, given by relative names."""
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    with h5py.File(os.path.join(folder, "init.h5"), "w") as f:
        f["x"] = np.linspace(-1, 1, 1024 * 3, dtype=np.float32).reshape(1024, 3)
    with h5py.File(os.path.join(folder, "cov.h5"), "w") as f:
        f["cov"] = np.array([[1.0, 0.3, 0.0], [0.3, 2.0, 0.1], [0.0, 0.1, 0.5]])
    # 8000 iterations of 1024 chains, the first checkpoint at 200: 2.2 s on 2 idle cores, so the
    # stop comes well after it; few enough iterations for the 120 s limits on a machine running
    # other tests beside it, where each of an iteration's agreements between the 2 ranks can wait
    # milliseconds for a core (62,000 iterations of 8 chains, 1.4 s idle, took over 120 s so).
    return ["hmc", "--target", "corr-gaussian", "--target-args", "cov=cov.h5", "--init", "init.h5", "--chains", 1024,
            "--warmup", 6000, "--draws", 2000, "--seed", 5, "--backend", "cpu", "--quiet", "--out", "run.h5",
            "--checkpoint-dir", "ck", "--checkpoint-every", 200]


def stopped_in(folder):
    """The relative run started in `folder`, stopped by SIGUSR1 after its first checkpoint: 75."""
    args = relative_run(folder)
    proc = launch(2, *args, cwd=folder)
    wait_for(lambda: glob.glob(os.path.join(folder, "ck", "ckpt-*.h5")), 30)
    proc.send_signal(signal.SIGUSR1)
    rc, stderr, _ = finish_within(proc, TIMEOUT)
    return rc, stderr


def resume_elsewhere():
    """Run in folder A with relative --out, --checkpoint-dir, --init and cov=, stopped; resumed
    from folder B: it goes on in A and ends bitwise equal to the run never stopped; nothing is
    written in B. With A moved whole, the resume goes on in its new place, bitwise the same; with
    its output gone too, it is refused naming the file."""
    reference = t.path("hs_rel_ref")
    args = relative_run(reference)
    rc, stderr, _ = finish_within(launch(2, *args, cwd=reference), 120)
    t.check(rc == 0, f"relative: the uninterrupted run ({rc}, {t.error_lines(stderr)})")
    a, b = t.path("hs_rel_A"), t.path("hs_rel_B")
    rc, stderr = stopped_in(a)
    t.check(rc == 75, f"relative: stopped by the signal, 75 ({rc}, {t.error_lines(stderr)})")
    shutil.rmtree(b, ignore_errors=True)
    os.makedirs(b)
    inputs = [os.path.join(a, "init.h5"), os.path.join(a, "cov.h5")]
    before = {p: t.file_hash(p) for p in inputs}
    rc, stderr, _ = finish_within(launch(2, "resume", "../hs_rel_A/ck", "--quiet", cwd=b), 120)
    t.check(rc == 0, f"relative: resumed from another folder, 0 ({rc}, {t.error_lines(stderr)})")
    t.check(os.listdir(b) == [], f"relative: nothing written in the folder resumed from ({os.listdir(b)})")
    t.check({p: t.file_hash(p) for p in inputs} == before, "relative: inputs unchanged")
    same = subprocess.run([sys.executable, H5_SAME, os.path.join(a, "run.h5"), os.path.join(reference, "run.h5")],
                          capture_output=True, text=True)
    t.check(same.returncode == 0, f"relative: the output is bitwise the uninterrupted run's ({same.stdout.strip()[:300]})")
    # A resume given its own relative --checkpoint-dir writes it where the resume was started.
    rc, stderr = stopped_in(a)
    rc, stderr, _ = finish_within(launch(2, "resume", "../hs_rel_A/ck", "--checkpoint-dir", "ck_b", "--quiet",
                                         cwd=b), 120)
    t.check(rc == 0 and os.path.isdir(os.path.join(b, "ck_b")) and not os.path.exists(os.path.join(a, "ck_b")),
            f"relative: a resume's own --checkpoint-dir is from its folder ({rc}, {t.error_lines(stderr)})")
    # The start folder gone: its relative output cannot be found from B; the error names it.
    rc, stderr = stopped_in(a)
    moved = t.path("hs_rel_moved")
    shutil.rmtree(moved, ignore_errors=True)
    os.rename(a, moved)
    rc, stderr, _ = finish_within(launch(2, "resume", "../hs_rel_moved/ck", "--quiet", cwd=b), TIMEOUT)
    lines = t.error_lines(stderr)
    # The folder moved whole (its output beside its checkpoint folder): the run goes on there.
    t.check(rc == 0 and f"the run started in {a}, which is not there; its output and checkpoints are in {moved}" in stderr,
            f"relative_moved: resumed in the moved folder, with a note naming both ({rc}, {lines})")
    same = subprocess.run([sys.executable, H5_SAME, os.path.join(moved, "run.h5"), os.path.join(reference, "run.h5")],
                          capture_output=True, text=True)
    t.check(rc == 0 and same.returncode == 0,
            f"relative_moved: the output is bitwise the uninterrupted run's ({same.stdout.strip()[:300]})")
    t.check(os.listdir(b) == ["ck_b"], f"relative_moved: nothing new written in the folder resumed from ({os.listdir(b)})")
    # Its output gone too: the relative paths are taken from the current folder, and the error
    # names the missing file and the note the folder the run started in.
    rc, stderr = stopped_in(a)
    shutil.rmtree(moved, ignore_errors=True)
    os.rename(a, moved)
    os.remove(os.path.join(moved, "run.h5"))
    rc, stderr, _ = finish_within(launch(2, "resume", "../hs_rel_moved/ck", "--quiet", cwd=b), TIMEOUT)
    lines = t.error_lines(stderr)
    t.check(rc not in (0, None) and len(lines) == 1 and "cannot open" in lines[0]
            and f"the run started in {a}, which is not there" in stderr and "is not beside its checkpoint folder" in stderr,
            f"relative_moved_no_output: refused, naming the file and the folder the run started in ({rc}, {lines})")


# --- 5. an output variable with a zero-length axis ----------------------------------------------

def zero_axis():
    """A plugin declaring output variable theta of shape [3, 0] (it crashed with SIGFPE): refused
    before any work, naming the plugin and the variable."""
    for algorithm, count in (("hmc", "--chains"), ("svgd", "--particles")):
        refused(f"zero_axis_{algorithm}", [algorithm, "--target", f"plugin:{HOSTILE}", "--dim", 2, count, 4,
                                           "--backend", "cpu", "--quiet", "--out", t.path("hs_zero.h5")],
                f"--target plugin:{HOSTILE}: output variable theta has an axis of length 0",
                env={"HOSTILE_MODE": "zero_axis"})


# --- 6. target arguments that make log p -inf, and other unclear errors ----------------------------

def target_arguments():
    """Target arguments the models' float32 arithmetic cannot take are refused up front, naming the
    argument; a start that is -inf anyway names the arguments; --save-warmup=yes and a
    --checkpoint-dir that is a file are told plainly."""
    def run_args(target, args, *extra):
        return ["hmc", "--target", target, "--target-args", args, *extra, "--chains", 4, "--warmup", 10,
                "--draws", 10, "--backend", "cpu", "--quiet", "--out", t.path("hs_args.h5")]
    for args, needle in (("scale=1e-30", "gaussian's scale=1e-30 is out of float32's reach"),
                         ("scale=1e20", "gaussian's scale=1e+20 is out of float32's reach"),
                         ("scale=1:1e-30:1", "gaussian's scale=1e-30 is out of float32's reach"),
                         ("mean=1e39", "gaussian's mean=1e+39 is larger than float32 holds")):
        refused(f"gaussian_{args}", run_args("gaussian", args, "--dim", 3), needle)
    refused("corr_rho", run_args("corr-gaussian", "rho=0.99999999", "--dim", 3),
            "corr-gaussian's rho=0.99999998999999995 is -1 or 1 in float32")
    refused("corr_rho_scale", run_args("corr-gaussian", "rho=0.9999999,scale=1e-16", "--dim", 3),
            "corr-gaussian's rho=0.999999881 with scale=1e-16 make a precision")
    refused("banana_a", run_args("banana", "a=1e-25"), "banana's a=1e-25 is out of float32's reach")
    covs = {"singular": np.array([[1.0, 1.0], [1.0, 1.0]]), "near": np.array([[1.0, 1 - 1e-15], [1 - 1e-15, 1.0]]),
            "nan": np.array([[1.0, np.nan], [np.nan, 1.0]])}
    needles = {"singular": "cov is not positive definite (pivot 1 is 0)", "near": "cov is singular",
               "nan": "cov[0, 1] is not finite"}
    for name, cov in covs.items():
        path = t.path(f"hs_cov_{name}.h5")
        with h5py.File(path, "w") as f:
            f["cov"] = cov
        refused(f"cov_{name}", run_args("corr-gaussian", f"cov={path}"), needles[name], protect=[path])
        line = refused(f"cov_{name}_named", run_args("corr-gaussian", f"cov={path}"), path)
        t.check("--target-args cov" in line, f"cov_{name}: names the target argument ({line!r})")
    # Accepted, but log p overflows float32 at every start: the error names the arguments.
    refused("start_names_args", run_args("gaussian", "scale=1e-19", "--dim", 64),
            "log p is -inf (with --target-args scale=1e-19")
    refused("save_warmup_value", ["hmc", "--save-warmup=yes", "--out", t.path("hs_args.h5")],
            "--save-warmup takes no value (give --save-warmup alone, or save-warmup = true in a --config file)")
    # A --checkpoint-dir that is a file: fault.robustness (early_checks).


# --- 7. what tests/tools/hostile_campaign.py found ------------------------------------------------

def campaign_findings():
    """--out over a checkpoint (it was destroyed) or named like one (resume then stopped at it, the
    run's folder unusable); --steps 0 taken as auto; a key given twice in a --config file (the last
    silently kept); --out ending with / (blamed on the checkpoint folder); --target-args ',,'."""
    small = ["hmc", "--dim", 3, "--chains", 4, "--warmup", 10, "--draws", 10, "--backend", "cpu", "--quiet"]
    out, ckpt = t.path("hs_cf.h5"), t.path("hs_cf.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(2, *small, "--checkpoint-every", 5, "--out", out, "--checkpoint-dir", ckpt)
    checkpoints = sorted(glob.glob(os.path.join(ckpt, "ckpt-*.h5")))
    renamed = t.path("hs_cf_copy.h5")
    shutil.copy(checkpoints[-1], renamed)
    for name, target in (("over_checkpoint", checkpoints[-1]), ("named_like_one", os.path.join(ckpt, "ckpt-777.h5")),
                         ("a_checkpoint_renamed", renamed)):
        refused(f"out_{name}", [*small, "--out", target, "--checkpoint-dir", t.path("hs_cf_other.ckpt")],
                f"--out {target}: is a checkpoint's name or a checkpoint", protect=checkpoints + [renamed])
    t.check(not os.path.exists(os.path.join(ckpt, "ckpt-777.h5")), "out_named_like_one: nothing written")
    rc, _, stderr = t.run(2, "resume", ckpt, "--draws", 12, "--quiet", expect_ok=False)
    t.check(rc == 0, f"campaign: the checkpoints still resume ({t.error_lines(stderr)})")
    refused("steps_zero", [*small, "--steps", 0, "--out", out], "--steps: expected auto or an integer")
    ini = t.path("hs_cf.ini")
    with open(ini, "w") as f:
        f.write("dim = 2\n[hmc]\nchains = 4\nchains = 6\n")
    refused("ini_twice", ["hmc", "--config", ini, "--out", out], "key 'chains': given twice in [hmc]")
    refused("out_slash", [*small, "--out", t.path("hs_cf_dir") + "/"], "ends with /, which names a folder")
    refused("args_empty_item", [*small, "--target-args", ",,", "--out", out], "an empty item")


def main():
    if not os.path.exists(HOSTILE):
        print(f"no plugin at {HOSTILE} (DSAMPLER_PLUGIN_DIR)")
        t.finish("hostile")
    parts = {
        "stalls": lambda: (stalled_call("stall_np2", 2, 1, checkpoint_first=True), stalled_call("stall_np1", 1, 0),
                           stalled_call("stall_init", 2, 0, mode="stall_init", call="initial_point"),
                           stalled_call("stall_create", 2, 1, mode="stall_create", call="create")),
        "stop": stop_while_stalled,
        "call_timeout": call_timeout_option,
        "messages": plugin_messages,
        "hdf5": hdf5_words,
        "relative": resume_elsewhere,
        "zero_axis": zero_axis,
        "target_args": target_arguments,
        "campaign": campaign_findings,
    }
    # Parts by name (all without arguments), for running one while working on it.
    for name in sys.argv[1:] or parts:
        parts[name]()
    t.finish("hostile")


if __name__ == "__main__":
    main()
