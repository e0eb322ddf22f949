"""Hostile use, by family: every case must end with a clear error (one line, naming the input),
a non-zero exit on every rank within a timeout, no input changed and no output silently lost.
Families: data destroyed or lost (resume of files that are not this run's checkpoints, two runs
on one --out, --out equal to an input, summary --csv over its input or after a failure); hangs
(FIFOs, devices and directories as inputs, sizes declared in HDF5 metadata that overflow,
plugins that exit() on one rank or disagree on their dimension, a file-size limit while
writing); silent wrong answers (counts that wrap, over-long or repeated target-args, a
misspelled INI section, indented INI lines, INI keys of the other algorithm, numbers with
blanks before them, resume --draws recorded in the output); signals under mpirun through
jobs/dsampler-job.sh and in a run's first second; early path checks; HDF5's own error stacks never shown."""
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
SMALL = ["hmc", "--dim", 3, "--chains", 4, "--warmup", 10, "--draws", 20, "--backend", "cpu", "--quiet"]
TIMEOUT = 60


def inputs_of(paths):
    return {p: t.file_hash(p) for p in paths}


def refused(name, args, needle, protect=(), ranks=2, every_rank=True, one_line=True, mid_run=False, **kw):
    """Runs a case that must fail: bounded time, non-zero everywhere, one error line naming
    `needle`, no HDF5-DIAG, and the files in `protect` byte for byte unchanged. mid_run: the
    failure comes after work started (mpirun's usual teardown, not dstest.REFUSAL_ENV)."""
    before = inputs_of(protect)
    start = time.time()
    try:
        rc, codes, _, stderr = t.run_every_rank(ranks, *args, timeout=TIMEOUT, refusal=not mid_run, **kw)
    except subprocess.TimeoutExpired:
        t.check(False, f"{name}: hung (no exit within {TIMEOUT} s)")
        return ""
    lines = t.error_lines(stderr)
    t.check(rc != 0, f"{name}: mpirun exit {rc} != 0 ({time.time() - start:.1f} s)")
    if every_rank:
        t.check(all(c is not None and c != 0 for c in codes), f"{name}: every rank exits non-zero ({codes})")
    if one_line:
        t.check(len(lines) == 1 and needle in lines[0], f"{name}: one error line naming {needle!r} ({lines})")
    else:
        t.check(len(lines) >= 1 and all(needle in line for line in lines), f"{name}: errors reported ({lines})")
    t.check("HDF5-DIAG" not in stderr and "MPI_File" not in stderr, f"{name}: no HDF5/MPI-IO noise")
    after = inputs_of(protect)
    t.check(before == after, f"{name}: inputs unchanged ({[os.path.basename(p) for p in protect]})")
    return stderr


def make_run(name, *extra):
    out, ckpt = t.path(f"{name}.h5"), t.path(f"{name}.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(2, *SMALL, "--out", out, "--checkpoint-dir", ckpt, *extra)
    return out, ckpt


def data_destroyed():
    out, ckpt = make_run("rb_base", "--checkpoint-every", 10)
    # resume given the run's own output: refused, the output neither renamed nor changed.
    refused("resume_output", ["resume", out], "not a dsampler checkpoint", protect=[out])
    t.check(not glob.glob(t.path("*.unusable")), "resume_output: nothing renamed *.unusable")
    # A checkpoint of another format version as the newest (its version hashed into its own
    # checksum, which is then not format 6's): resume stops there, the file left in place.
    newest = sorted(glob.glob(os.path.join(ckpt, "ckpt-*.h5")), key=lambda p: int(p.split("-")[-1][:-3]))[-1]
    with h5py.File(newest, "r+") as f:
        checksum = f.attrs["meta_checksum"]
        f.attrs.modify("format_version", np.int32(99))
        f.attrs.modify("meta_checksum", np.uint64(int(checksum) ^ 0x5A5A))
    files = sorted(glob.glob(os.path.join(ckpt, "*")))
    v2_before = inputs_of(files)
    # Falling back to an older checkpoint would write over it at its iteration: resume stops.
    refused("resume_version", ["resume", ckpt, "--quiet"], "format version 99", protect=files + [out])
    t.check(inputs_of(files) == v2_before and sorted(glob.glob(os.path.join(ckpt, "*"))) == files,
            "version: the checkpoint directory is exactly as it was")
    # Only that one file: resume refuses and changes nothing.
    refused("resume_version_only", ["resume", newest], "format version 99", protect=[newest])
    # format_version alone damaged (the metadata's checksum still format 6's, so format 6 wrote
    # it): resume names it, passes over it to the older checkpoint and ends with the same draws.
    with h5py.File(newest, "r+") as f:
        f.attrs.modify("meta_checksum", checksum)
    draws_before = t.read(out, "posterior/x")
    rc, _, stderr = t.run(2, "resume", ckpt, "--quiet", expect_ok=False)
    t.check(rc == 0 and os.path.basename(newest) in stderr and "format_version reads 99" in stderr,
            f"damaged format_version: resume passes over the file, naming it (rc {rc}: {stderr[-400:]})")
    t.check(np.array_equal(t.read(out, "posterior/x"), draws_before),
            "damaged format_version: the resumed draws equal the uninterrupted run's")

    # Two runs on one --out: the second is refused while the first writes; the first, stopped
    # by SIGUSR1 afterwards, checkpoints (75) and resumes to a whole output of its own.
    out2, ckpt2 = t.path("rb_lock.h5"), t.path("rb_lock.ckpt")
    shutil.rmtree(ckpt2, ignore_errors=True)
    long_args = ["hmc", "--dim", 2, "--chains", 4, "--warmup", 100, "--draws", 10_000_000, "--backend", "cpu",
                 "--quiet", "--out", out2, "--checkpoint-dir", ckpt2]
    long_run = subprocess.Popen([t.MPIEXEC, t.NP_FLAG, "2", *t.PREFLAGS, t.DSAMPLER, *map(str, long_args)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (os.path.exists(out2) and os.path.getsize(out2) > 0):
        time.sleep(0.1)
    time.sleep(0.5)
    refused("second_writer", [*SMALL, "--out", out2, "--checkpoint-dir", t.path("rb_lock2.ckpt")],
            "another dsampler run is writing")
    long_run.send_signal(signal.SIGUSR1)
    _, first_err = long_run.communicate(timeout=120)
    t.check(long_run.returncode == 75, f"second_writer: the first run stops at a checkpoint ({long_run.returncode})")
    with h5py.File(out2, "r") as f:
        t.check(f["posterior/x"].shape[0] == 4 and f["posterior/x"].shape[2] == 2,
                f"second_writer: the output is the first run's ({f['posterior/x'].shape})")

    # --out equal to an input.
    init = t.write_init("rb_init.h5", np.full((4, 3), 0.25, np.float32))
    refused("out_is_init", [*SMALL, "--init", init, "--out", init], "is the input --init", protect=[init])
    data = t.path("rb_data.h5")
    with h5py.File(data, "w") as f:
        f.create_dataset("X", data=np.random.default_rng(1).normal(size=(20, 3)).astype(np.float32))
        f.create_dataset("y", data=(np.arange(20) % 2).astype(np.float32))
    refused("out_is_data", [*SMALL[:1], "--target", "logistic", *SMALL[3:], "--data", data, "--out", data],
            "is the input --data", protect=[data])
    cfg = t.path("rb_cfg.ini")
    with open(cfg, "w") as f:
        f.write("dim = 3\n")
    refused("out_is_config", ["hmc", "--config", cfg, "--backend", "cpu", "--out", cfg], "is the input --config",
            protect=[cfg])

    # summary --csv: never the input; an existing CSV survives a summary that fails.
    refused("csv_is_input", ["summary", out, "--csv", out], "is the input file", protect=[out])
    csv = t.path("rb_keep.csv")
    with open(csv, "w") as f:
        f.write("precious\n")
    refused("csv_after_failure", ["summary", out, "--var", "nosuch", "--csv", csv], "no variable posterior/nosuch",
            protect=[out, csv])
    rc, _, _ = t.run(2, "summary", out, "--csv", csv, expect_ok=False)
    t.check(rc == 0 and open(csv).readline().startswith("variable,"), "csv: a good summary replaces the CSV")
    t.check(not glob.glob(csv + ".partial-*"), "csv: no partial file left")
    return out


def hangs(out):
    fifo = t.path("rb_fifo")
    if not os.path.exists(fifo):
        os.mkfifo(fifo)
    refused("fifo_init", [*SMALL, "--init", fifo, "--out", t.path("rb_x.h5")], "rb_fifo: not a regular file")
    refused("fifo_config", ["hmc", "--config", fifo, "--out", t.path("rb_x.h5")], "rb_fifo: not a regular file")
    refused("dev_zero_config", ["hmc", "--config", "/dev/zero", "--out", t.path("rb_x.h5")], "/dev/zero: not a regular file")
    refused("fifo_summary", ["summary", fifo], "rb_fifo: not a regular file")
    refused("fifo_resume", ["resume", fifo], "rb_fifo: not a regular file")
    refused("dir_init", [*SMALL, "--init", t.path(""), "--out", t.path("rb_x.h5")], "is a directory")
    refused("dir_summary", ["summary", t.path("")], "is a directory")

    # Sizes from HDF5 metadata: a tiny file declaring X [2^31, 2^31] (never written).
    huge = t.path("rb_huge.h5")
    with h5py.File(huge, "w") as f:
        f.create_dataset("X", shape=(2 ** 31, 2 ** 31), dtype="f4", chunks=(1, 1024))
        f.create_dataset("y", shape=(2 ** 31,), dtype="f4", chunks=(1024,))
    t.check(os.path.getsize(huge) < 100_000, f"huge: the crafted file is small ({os.path.getsize(huge)} bytes)")
    refused("huge_data", ["hmc", "--target", "logistic", "--data", huge, "--chains", 2, "--draws", 5, "--warmup", 5,
                          "--backend", "cpu", "--out", t.path("rb_x.h5")], "overflows 64 bits", protect=[huge])
    posterior = t.path("rb_huge_posterior.h5")
    with h5py.File(posterior, "w") as f:
        f.create_dataset("posterior/x", shape=(2 ** 31, 2 ** 31, 2 ** 20), dtype="f4", chunks=(1, 1, 1024))
    refused("huge_summary", ["summary", posterior], "rb_huge_posterior.h5", protect=[posterior])
    unwritten = t.path("rb_unwritten.h5")
    with h5py.File(unwritten, "w") as f:
        f.create_dataset("X", shape=(1000, 3), dtype="f4", chunks=(10, 3))
        f.create_dataset("y", shape=(1000,), dtype="f4", chunks=(10,))
    refused("unwritten_data", ["hmc", "--target", "logistic", "--data", unwritten, "--chains", 2, "--draws", 5,
                               "--warmup", 5, "--backend", "cpu", "--out", t.path("rb_x.h5")], "holds no data",
            protect=[unwritten])

    # Misbehaving plugins.
    def plugin(kind):
        return "plugin:" + os.path.join(PLUGINS, f"broken_{kind}.so")
    base = ["hmc", "--chains", 4, "--warmup", 10, "--draws", 10, "--backend", "cpu", "--quiet"]
    refused("plugin_dim_by_rank", [*base, "--target", plugin("dim_by_rank"), "--out", t.path("rb_p1.h5")],
            "dimension must not depend on the rank")
    refused("plugin_huge_dim", [*base, "--target", plugin("huge_dim"), "--out", t.path("rb_p2.h5")],
            "overflows 64-bit sizes")
    # exit() on rank 1: every rank is ended by MPI_Abort, so only mpirun's code is seen.
    refused("plugin_exit", [*base, "--target", plugin("exit"), "--out", t.path("rb_p3.h5")], "exit() called",
            every_rank=False, mid_run=True)

    # A file-size limit while writing the output: an error naming the output, at once (no
    # watchdog: it is left at its 120 s, past this case's time limit), not SIGXFSZ, no crash.
    # RLIMIT_FSIZE stands in for a full disk (no tmpfs mount needed). It is set by dsampler
    # after MPI_Init (DSAMPLER_FAULT_FILE_SIZE_LIMIT): Open MPI's own shared-memory files
    # break under a limit set by the launcher. HDF5 cannot close a file whose write failed, and
    # its clean-up in MPI_Finalize would crash on it, so the ranks end through MPI_Abort.
    env = {"DSAMPLER_FAULT_FILE_SIZE_LIMIT": "20000"}
    stderr = refused("fsize_limit", ["hmc", "--dim", 50, "--chains", 40, "--warmup", 0, "--draws", 200, "--backend",
                                     "cpu", "--quiet", "--out", t.path("rb_fsize.h5"), "--checkpoint-dir",
                                     t.path("rb_fsize.ckpt")], "--out " + t.path("rb_fsize.h5"), every_rank=False,
                     env=env, one_line=False, mid_run=True)
    t.check("File size limit" not in stderr and "signal 25" not in stderr, "fsize_limit: no rank killed by SIGXFSZ")
    t.check("Segmentation fault" not in stderr and "Signal:" not in stderr, "fsize_limit: no rank crashes")


def wrong_answers():
    out = t.path("rb_x.h5")
    refused("warmup_huge", [*SMALL, "--warmup", 9223372036854775000, "--out", out], "--warmup")
    refused("keep_wraps", [*SMALL, "--keep", 4294967297, "--out", out], "--keep")
    refused("draws_huge", [*SMALL, "--draws", 2 ** 39, "--thin", 2 ** 30, "--out", out], "--draws")
    long_number = "1" + "0" * 199
    refused("target_args_long", [*SMALL, "--target-args", f"mean={long_number}", "--out", out], "mean")
    refused("target_args_twice", [*SMALL, "--target-args", "mean=1,mean=2", "--out", out], "'mean' is given twice")
    cfg = t.path("rb_section.ini")
    with open(cfg, "w") as f:
        f.write("[hcm]\ndim = 3\nchains = 4\n")
    refused("ini_section", ["hmc", "--config", cfg, "--out", out], "unknown section [hcm]", protect=[cfg])
    # An empty section name is no section: refused, not read as the keys of every algorithm.
    with open(cfg, "w") as f:
        f.write("dim = 3\n[]\nchains = 4\n")
    refused("ini_section_empty", ["hmc", "--config", cfg, "--out", out], "line 2: a section is written", protect=[cfg])
    # An indented line is not a continuation of the value above it (the output's name would
    # become "chains = 6"): the file is refused, naming the line.
    cfg = t.path("rb_indented.ini")
    with open(cfg, "w") as f:
        f.write("dim = 3\nout = rb_indented.h5\n  chains = 6\n")
    refused("ini_indented", ["hmc", "--config", cfg], "line 3 is indented", protect=[cfg])
    t.check(not os.path.exists("chains = 6") and not os.path.exists(t.path("chains = 6")),
            "ini_indented: no file named after the indented line")
    # A key of the other algorithm is refused in a file as it is on the command line.
    cfg = t.path("rb_other_algorithm.ini")
    with open(cfg, "w") as f:
        f.write("dim = 2\nthin = 2\n")
    refused("ini_other_algorithm", ["svgd", "--config", cfg, "--iters", 3, "--out", out, "--backend", "cpu"],
            "key 'thin': not an option of dsampler svgd", protect=[cfg])
    # Numbers with blanks before them: " -1" must not become 2^64 - 1.
    refused("seed_blank_negative", [*SMALL, "--seed", " -1", "--out", out], "--seed")
    refused("flag_with_value", [*SMALL, "--save-warmup=yes", "--out", out], "--save-warmup takes no value")
    # resume --draws N: the output's attributes record N.
    res_out, res_ckpt = make_run("rb_resume", "--checkpoint-every", 10)
    t.run(2, "resume", res_ckpt, "--draws", 40, "--quiet")
    with h5py.File(res_out, "r") as f:
        recorded = f.attrs["config_draws"]
        recorded = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
        shape = f["posterior/x"].shape
    t.check(recorded == "40" and shape[1] == 40, f"resume --draws 40: recorded {recorded}, {shape[1]} draws")


def odd_paths():
    """Paths of any legal length and with any bytes: a run on 2 ranks writes its output and
    checkpoints there, resume continues it (the checkpoint keeps each path exactly), summary
    reads it."""
    long_dir = t.path("rb_" + "d" * 120 + "/" + "e" * 150)
    cases = {"long": long_dir, "blank_semicolon": t.path("rb odd; dir "), "newline": t.path("rb_new\nline"),
             "percent": t.path("rb_100%25")}
    for name, folder in cases.items():
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        out, ckpt = os.path.join(folder, "run .h5"), os.path.join(folder, "ck pt ")
        rc, _, _, stderr = t.run_every_rank(2, *SMALL, "--out", out, "--checkpoint-dir", ckpt, "--checkpoint-every", 10,
                                            timeout=TIMEOUT)
        t.check(rc == 0 and os.path.exists(os.path.join(ckpt, "ckpt-30.h5")),
                f"path_{name}: a run writes its output and checkpoints (rc {rc}, {t.error_lines(stderr)})")
        rc, _, _, stderr = t.run_every_rank(2, "resume", ckpt, "--draws", 30, "--quiet", timeout=TIMEOUT)
        with h5py.File(out, "r") as f:
            draws = f["posterior/x"].shape[1]
            recorded = f.attrs["config_out"]
            recorded = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
        t.check(rc == 0 and draws == 30, f"path_{name}: resume continues it (rc {rc}, {draws} draws, "
                f"{t.error_lines(stderr)})")
        t.check(recorded == out, f"path_{name}: the output records its own path whole ({len(recorded)} of {len(out)} "
                "characters)")
        rc, _, stdout, _ = t.run_every_rank(2, "summary", out, timeout=TIMEOUT)
        t.check(rc == 0 and "x[0]" in stdout, f"path_{name}: summary reads it (rc {rc})")
    # --out may not be a file that a target argument names: the input would be overwritten.
    cov = t.path("rb_cov.h5")
    with h5py.File(cov, "w") as f:
        f["cov"] = np.eye(3)
    refused("out_is_target_arg", [*SMALL, "--target", "corr-gaussian", "--target-args", f"cov={cov}", "--out", cov],
            "is the file of --target-args cov=", protect=[cov])


def summary_outputs(out):
    """summary --csv through a link keeps the link (the file it names gets the CSV), to
    /dev/stdout follows the table, to a FIFO succeeds; summary of an output that a run is still
    writing is refused with a clear line, not called damaged."""
    real, link = t.path("rb_real.csv"), t.path("rb_link.csv")
    with open(real, "w") as f:
        f.write("old\n")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(real, link)
    rc, _, _ = t.run(1, "summary", out, "--csv", link, expect_ok=False)
    with open(real) as f:
        first = f.readline()
    t.check(rc == 0 and os.path.islink(link) and first.startswith("variable,"),
            f"csv_link: the link stays a link and its file gets the CSV (rc {rc}, {first.strip()!r})")
    stdout_file = t.path("rb_stdout.txt")
    with open(stdout_file, "w") as f:
        rc = subprocess.run([t.DSAMPLER, "summary", out, "--csv", "/dev/stdout"], stdout=f,
                            stderr=subprocess.PIPE, timeout=TIMEOUT).returncode
    with open(stdout_file) as f:
        text = f.read()
    t.check(rc == 0 and "mean" in text.split("variable,")[0] and "\nvariable," in text,
            f"csv_stdout: the CSV follows the table on stdout (rc {rc})")
    fifo = t.path("rb_csv_fifo")
    if os.path.exists(fifo):
        os.remove(fifo)
    os.mkfifo(fifo)
    # Nobody reads it: refused at once (opening it would wait for a reader forever).
    refused("csv_fifo_no_reader", ["summary", out, "--csv", fifo], "a FIFO that no process is reading", ranks=1)
    # Its reader open (this process, which reads once the summary ends: the CSV fits the pipe).
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    rc, _, stderr = t.run(1, "summary", out, "--csv", fifo, expect_ok=False)
    text = b""
    while True:
        try:
            chunk = os.read(reader, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        text += chunk
    os.close(reader)
    lines = text.decode().splitlines()
    t.check(rc == 0 and lines and lines[0].startswith("variable,"), f"csv_fifo: written, exit 0 (rc {rc}, {stderr!r})")
    # An output a run is writing.
    busy_out, busy_ckpt = t.path("rb_busy.h5"), t.path("rb_busy.ckpt")
    shutil.rmtree(busy_ckpt, ignore_errors=True)
    run = subprocess.Popen([t.MPIEXEC, t.NP_FLAG, "2", *t.PREFLAGS, t.DSAMPLER, "hmc", "--dim", "20", "--chains", "40",
                            "--warmup", "1000000", "--draws", "10", "--backend", "cpu", "--quiet", "--out", busy_out,
                            "--checkpoint-dir", busy_ckpt], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.0)
    refused("summary_busy", ["summary", busy_out], "a running dsampler is writing this file")
    run.send_signal(signal.SIGTERM)
    run.wait(timeout=TIMEOUT)


def checkpoint_dir_link():
    """A --checkpoint-dir that is a link to nothing is refused before the run, not at its first
    checkpoint."""
    link = t.path("rb_ckpt_link")
    if os.path.lexists(link):
        os.remove(link)
    os.symlink(t.path("rb_no_such_folder"), link)
    refused("ckpt_dir_dangling", [*SMALL, "--out", t.path("rb_x.h5"), "--checkpoint-dir", link, "--checkpoint-every", 5],
            "is a link to a folder that does not exist")


def shared_checkpoint_dir():
    """One checkpoint folder, one run: a second run on a folder in use is refused (its
    checkpoints would have the first one's names); pruning removes only the run's own
    checkpoints, never another file that is named like one."""
    folder = t.path("rb_shared_ckpt")
    shutil.rmtree(folder, ignore_errors=True)
    first = subprocess.Popen([t.MPIEXEC, t.NP_FLAG, "2", *t.PREFLAGS, t.DSAMPLER, "hmc", "--dim", "20", "--chains", "40",
                              "--warmup", "1000000", "--draws", "10", "--backend", "cpu", "--quiet", "--out",
                              t.path("rb_shared_a.h5"), "--checkpoint-dir", folder],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.0)
    refused("ckpt_dir_in_use", [*SMALL, "--out", t.path("rb_shared_b.h5"), "--checkpoint-dir", folder],
            "another dsampler run is using this folder")
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=TIMEOUT)
    # A user's file named like an old checkpoint, then a resume that prunes to --keep 1.
    mine = os.path.join(folder, "ckpt-1.h5")
    with open(mine, "w") as f:
        f.write("my own notes\n")
    proc = subprocess.Popen([t.MPIEXEC, t.NP_FLAG, "2", *t.PREFLAGS, t.DSAMPLER, "resume", folder, "--keep", "1",
                             "--checkpoint-every", "5", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(2.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=TIMEOUT)
    with open(mine) as f:
        text = f.read()
    own = [n for n in os.listdir(folder) if n.startswith("ckpt-") and n != "ckpt-1.h5"]
    t.check(text == "my own notes\n", "ckpt_prune: a file named like a checkpoint but not this run's is kept")
    t.check(len(own) == 1, f"ckpt_prune: the run keeps its newest checkpoint alone (--keep 1: {own})")


def changed_inputs():
    """Every file a run reads is fingerprinted into its checkpoints (and the output): a resume
    after --data changed is refused, naming the file; with the file as it was, it goes on."""
    data = t.path("rb_fp_data.h5")
    rng = np.random.default_rng(3)
    with h5py.File(data, "w") as f:
        f["X"] = rng.normal(size=(200, 3)).astype(np.float32)
        f["y"] = (rng.uniform(size=200) < 0.5).astype(np.float32)
    out, ckpt = t.path("rb_fp.h5"), t.path("rb_fp.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    t.run(2, "hmc", "--target", "logistic", "--data", data, "--chains", 4, "--warmup", 50, "--draws", 50,
          "--checkpoint-every", 50, "--backend", "cpu", "--quiet", "--out", out, "--checkpoint-dir", ckpt)
    with h5py.File(out, "r") as f:
        recorded = f.attrs["input_files"]
        recorded = recorded.decode() if isinstance(recorded, bytes) else str(recorded)
    t.check(recorded.startswith("--data\t") and data in recorded, f"inputs: the output records --data ({recorded!r})")
    with h5py.File(data, "r+") as f:
        y = f["y"][:]
        f["y"][:] = 1 - y
    refused("resume_data_changed", ["resume", ckpt, "--draws", 80, "--quiet"], "--data " + data + " changed",
            protect=[out])
    with h5py.File(data, "r+") as f:
        f["y"][:] = y
    rc, _, _, stderr = t.run_every_rank(2, "resume", ckpt, "--draws", 80, "--quiet", timeout=TIMEOUT)
    t.check(rc == 0, f"inputs: with the file as it was, resume goes on (rc {rc}, {t.error_lines(stderr)})")


def quiet_warnings():
    """--quiet hides the progress, not the warnings: every draw divergent is said on stderr."""
    rc, _, stderr = t.run(1, "hmc", "--dim", 2, "--chains", 4, "--warmup", 20, "--draws", 50, "--step-size", 50,
                          "--adapt", "none", "--backend", "cpu", "--quiet", "--out", t.path("rb_quiet.h5"))
    t.check(rc == 0 and "kept draws were divergent transitions" in stderr,
            f"quiet: the divergences are said ({stderr.strip()[-200:]!r})")


def small_disk(name, size, body):
    """Runs body(mount) on a tmpfs of `size` mounted for it; False (the case skipped) where tmpfs
    cannot be mounted (not root, or a container without the right)."""
    mount = t.path(name)
    os.makedirs(mount, exist_ok=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mount], capture_output=True).returncode != 0:
        print(f"skipped  {name}: cannot mount a tmpfs here")
        return False
    try:
        body(mount)
    finally:
        # A rank ended by MPI_Abort may still hold the file for a moment: retry, then detach.
        for _ in range(20):
            if subprocess.run(["umount", mount], capture_output=True).returncode == 0:
                break
            time.sleep(0.25)
        else:
            subprocess.run(["umount", "-l", mount], capture_output=True)
    return True


def full_disk():
    """A disk too small for the run's checkpoints beside its draws (a tmpfs of 11 MB for 8.8 MB
    of draws): the run ends within seconds with one line saying the disk is full, instead of
    waiting in a collective write until the error watchdog.

    Then the race the checks before each write cannot close: a disk filled by someone else
    between the check and the write (DSAMPLER_FAULT_SKIP_SPACE_CHECK=1 skips the checks, so the
    writes themselves fail with ENOSPC), once in the draws' growth and once in a checkpoint's
    collective writes on one rank. Each must end within seconds (the error watchdog would take
    120), saying the disk is full, and leave no partial checkpoint behind."""
    # The bound tells an end at the failed write from a stall until the error watchdog (100 or
    # 120 s); it includes the iterations before the disk fills: 0.4-1.4 s idle, 39 s at load 8.5 on
    # 2 cores, where 30 s failed.
    ENDS_WITHIN = 70

    def checked(mount):
        start = time.time()
        # After a failed write of the output the ranks end through MPI_Abort (main.c: HDF5's
        # clean-up of such a file in MPI_Finalize is not safe), so a rank may leave no exit code
        # of its own: mpirun's non-zero exit and the time bound are what is asserted.
        refused("disk_full", ["hmc", "--dim", 50, "--chains", 40, "--warmup", 600, "--draws", 1000,
                              "--checkpoint-every", 100, "--backend", "cpu", "--quiet", "--out",
                              os.path.join(mount, "run.h5")], "the disk is full", every_rank=False,
                one_line=False, mid_run=True)
        t.check(time.time() - start < ENDS_WITHIN, f"disk_full: ended in {time.time() - start:.1f} s (< {ENDS_WITHIN} s)")
    if not small_disk("rb_small_disk", "11m", checked):
        return
    race = {"DSAMPLER_FAULT_SKIP_SPACE_CHECK": "1", "DSAMPLER_ERROR_WATCHDOG_SECONDS": "100"}

    def draws_race(mount):
        start = time.time()
        run = ["hmc", "--dim", 50, "--chains", 40, "--warmup", 600, "--draws", 4000, "--checkpoint-every", 100,
               "--backend", "cpu", "--quiet"]
        refused("disk_full_race_draws", run + ["--out", os.path.join(mount, "run.h5")], "the disk is full",
                every_rank=False, one_line=False, mid_run=True, env=race)
        t.check(time.time() - start < ENDS_WITHIN, f"disk_full_race_draws: ended in {time.time() - start:.1f} s (< {ENDS_WITHIN} s)")
        # Room made (the file system grown): resume gives the uninterrupted run's draws, bit for bit.
        subprocess.run(["mount", "-o", "remount,size=80m", mount], capture_output=True, check=True)
        rc, _, stderr = t.run(2, "resume", os.path.join(mount, "run.ckpt"), "--quiet", expect_ok=False)
        t.check(rc == 0, f"disk_full_race_draws: resume after making room (rc {rc}, {t.error_lines(stderr)})")
        reference, reference_ckpt = t.path("rb_race_reference.h5"), t.path("rb_race_reference.ckpt")
        shutil.rmtree(reference_ckpt, ignore_errors=True)
        t.run(2, *run, "--out", reference, "--checkpoint-dir", reference_ckpt)
        ours, theirs = t.datasets(os.path.join(mount, "run.h5")), t.datasets(reference)
        same = [n for n in ("posterior/x", "sample_stats/lp", "sample_stats/energy")
                if n in ours and n in theirs and ours[n].tobytes() == theirs[n].tobytes()]
        t.check(len(same) == 3, f"disk_full_race_draws: the resumed output is bitwise the uninterrupted run's ({same})")
    small_disk("rb_small_disk", "11m", draws_race)

    def checkpoint_race(mount):
        start = time.time()
        ckpt = os.path.join(mount, "run.ckpt")
        refused("disk_full_race_checkpoint", ["hmc", "--dim", 50, "--chains", 8000, "--output-chains", 4, "--warmup",
                                              100, "--draws", 200, "--checkpoint-every", 50, "--backend", "cpu",
                                              "--quiet", "--out", os.path.join(mount, "run.h5"), "--checkpoint-dir",
                                              ckpt], "the disk is full", every_rank=False, one_line=False,
                mid_run=True, env=race)
        t.check(time.time() - start < ENDS_WITHIN, f"disk_full_race_checkpoint: ended in {time.time() - start:.1f} s (< {ENDS_WITHIN} s)")
        t.check(not glob.glob(os.path.join(ckpt, "*.tmp")),
                f"disk_full_race_checkpoint: no partial checkpoint left ({glob.glob(os.path.join(ckpt, '*'))})")
    small_disk("rb_small_disk", "11m", checkpoint_race)


def early_checks():
    # An unwritable --checkpoint-dir is refused before SVGD's iterations, not after them.
    blocker = t.path("rb_blocker")
    with open(blocker, "w") as f:
        f.write("x")
    start = time.time()
    refused("ckpt_dir_is_file", ["svgd", "--dim", 2, "--particles", 20, "--iters", 100000, "--backend", "cpu",
                                 "--quiet", "--out", t.path("rb_svgd.h5"), "--checkpoint-dir", blocker],
            f"--checkpoint-dir {blocker}: exists and is not a directory", protect=[blocker])
    t.check(time.time() - start < 30, "ckpt_dir_is_file: refused before the iterations")
    refused("out_dir_missing", [*SMALL, "--out", t.path("no_such_dir/run.h5")], "does not exist")


def job_signals():
    """jobs/dsampler-job.sh with DSAMPLER_LAUNCH=mpirun: SIGTERM to the job shell ends in 75."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "jobs", "dsampler-job.sh")
    out, ckpt = t.path("rb_job.h5"), t.path("rb_job.ckpt")
    shutil.rmtree(ckpt, ignore_errors=True)
    # Long enough to be running when the signal comes (minutes), with a small output.
    args = (f"hmc --dim 20 --chains 200 --warmup 1000 --draws 2000000 --thin 1000 --output-chains 4 --backend cpu "
            f"--quiet --out {out} --checkpoint-dir {ckpt}")
    env = {**os.environ, "DSAMPLER_BIN": t.DSAMPLER, "DSAMPLER_ARGS": args, "DSAMPLER_CKPT_DIR": ckpt,
           "DSAMPLER_LAUNCH": f"{t.MPIEXEC} {t.NP_FLAG} 2 {' '.join(t.PREFLAGS)}", "DSAMPLER_REQUEUE": "0"}
    job = subprocess.Popen(["bash", "-c", f"source {script}; dsampler_job_run"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)
    job.send_signal(signal.SIGTERM)
    stdout, stderr = job.communicate(timeout=120)
    t.check(job.returncode == 75, f"job: SIGTERM under mpirun ends in 75 ({job.returncode}; {stdout.strip()[-200:]!r})")
    t.check(bool(glob.glob(os.path.join(ckpt, "ckpt-*.h5"))), "job: a checkpoint was written")


def startup_signals():
    """SIGUSR1 in the first moments of a run (Slurm's --signal may come just after a requeue):
    the ranks never die of it; each run ends 75 with a checkpoint (or 0 where the signal reached
    mpirun before it had started the ranks). Signals sent to mpirun itself, from 0.3 s on (before
    that mpirun may not have its own handler yet); test_guards.py signals the ranks directly from
    the moment they exist."""
    # The run to resume is made once, in this test run (a folder left by an earlier one may hold
    # another version's checkpoints).
    shutil.rmtree(t.path("rb_sig_resume.ckpt"), ignore_errors=True)
    for command in ("hmc", "resume"):
        for delay in (0.3, 0.6, 1.0):
            name = f"signal_{command}_{delay}"
            out, ckpt = t.path(f"rb_sig_{command}.h5"), t.path(f"rb_sig_{command}.ckpt")
            if command == "hmc" or not os.path.isdir(ckpt):
                shutil.rmtree(ckpt, ignore_errors=True)
                args = ["hmc", "--dim", 20, "--chains", 40, "--warmup", 100000, "--draws", 100, "--backend", "cpu",
                        "--quiet", "--out", out, "--checkpoint-dir", ckpt]
                if command == "resume":   # a run to resume, stopped by a signal of its own
                    proc = subprocess.Popen([t.MPIEXEC, t.NP_FLAG, "2", *t.PREFLAGS, t.DSAMPLER, *map(str, args)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    time.sleep(2.0)
                    proc.send_signal(signal.SIGUSR1)
                    proc.wait(timeout=TIMEOUT)
            if command == "resume":
                args = ["resume", ckpt, "--quiet"]
            proc = subprocess.Popen([t.MPIEXEC, t.NP_FLAG, "2", *t.PREFLAGS, t.DSAMPLER, *map(str, args)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            # The delay counts from the ranks' start: mpirun has its handlers by then, however
            # loaded the machine (a signal to mpirun before that is Open MPI's to lose).
            pattern = f"dsampler(-bin)? resume {ckpt}" if command == "resume" else f"dsampler(-bin)? hmc .*--out {out}"
            deadline = time.time() + 30
            while time.time() < deadline and not [
                    p for p in subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
                    if int(p) != proc.pid]:
                time.sleep(0.005)
            time.sleep(delay)
            proc.send_signal(signal.SIGUSR1)
            try:
                _, stderr = proc.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                t.check(False, f"{name}: hung after the signal")
                continue
            checkpoints = glob.glob(os.path.join(ckpt, "ckpt-*.h5"))
            t.check(proc.returncode in (0, 75) and (proc.returncode == 0 or checkpoints),
                    f"{name}: ends 0 or 75 with a checkpoint (rc {proc.returncode}, {len(checkpoints)} checkpoints, "
                    f"{t.error_lines(stderr)})")


def main():
    out = data_destroyed()
    hangs(out)
    wrong_answers()
    odd_paths()
    summary_outputs(out)
    checkpoint_dir_link()
    shared_checkpoint_dir()
    changed_inputs()
    quiet_warnings()
    full_disk()
    early_checks()
    job_signals()
    startup_signals()
    t.finish("robustness")


if __name__ == "__main__":
    main()
