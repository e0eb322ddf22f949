#!/usr/bin/env python3
"""hostile_campaign.py: a campaign of hostile invocations of dsampler (odd option combinations,
odd files, resume oddities, signals at random times, misbehaving plugins, summary on odd files),
each bounded by a timeout, with the files it reads checksummed before and after and the outputs
of earlier runs checked to be still there. Every case is judged into one of: ok, crash (a rank
killed by a signal, glibc's or Open MPI's crash reports), hang (past its timeout), input changed,
output lost, silent wrong answer (success where an error was due, or a result that is not the
one asked for), unclear error (not exactly one error line, not naming the input, a source
location or a control byte in it).

usage: hostile_campaign.py --bin build/dsampler --plugins build/tests/plugin [--work DIR]
                           [--only NAME,...] [--seed S] [--json FILE]
Needs numpy and h5py (the tests' virtual environment has them) and mpiexec on PATH. Exits 0
when every case is ok, 1 otherwise."""
import argparse
import glob
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

VERDICTS = ["ok", "crash", "hang", "input changed", "output lost", "silent wrong answer", "unclear error"]
CRASH_TEXT = re.compile(r"\*\*\* (buffer overflow|stack smashing|Process received signal)|Segmentation fault|"
                        r"core dumped|Floating point exception|Aborted \(core")
SOURCE_LOCATION = re.compile(r"\b[\w/.-]+\.(c|cpp|cu|h):[0-9]+")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def sha(path):
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Campaign:
    def __init__(self, args):
        self.bin = os.path.abspath(args.bin)
        self.plugins = os.path.abspath(args.plugins)
        self.work = os.path.abspath(args.work)
        self.rng = random.Random(args.seed)
        self.only = set(args.only.split(",")) if args.only else None
        self.results = []
        shutil.rmtree(self.work, ignore_errors=True)
        os.makedirs(self.work)
        self.env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                    "OMPI_MCA_rmaps_base_oversubscribe": "yes", "OMP_NUM_THREADS": "1"}

    def path(self, *parts):
        return os.path.join(self.work, *parts)

    # --- running ---------------------------------------------------------------------------

    def launch(self, ranks, args, env=None, cwd=None):
        cmd = ["mpiexec", "-n", str(ranks), self.bin, *map(str, args)]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                env={**self.env, **(env or {})}, cwd=cwd or self.work, start_new_session=True)

    def wait(self, proc, timeout):
        try:
            out, err = proc.communicate(timeout=timeout)
            return proc.returncode, out, err
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return None, out, err

    def run(self, ranks, args, env=None, cwd=None, timeout=60, signals=()):
        """(returncode or None on a hang, stdout, stderr, seconds); signals: (delay, signal) pairs
        sent to mpiexec, delays from the start."""
        start = time.time()
        proc = self.launch(ranks, args, env, cwd)
        for delay, number in signals:
            time.sleep(max(0.0, start + delay - time.time()))
            if proc.poll() is None:
                proc.send_signal(number)
        rc, out, err = self.wait(proc, timeout)
        return rc, out, err, time.time() - start

    # --- judging -----------------------------------------------------------------------------

    def case(self, name, args, expect="error", needle=None, ranks=2, env=None, cwd=None, timeout=60, signals=(),
             protect=(), keep=(), check=None, crash_ok=False):
        """expect: 'ok' (exit 0), 'error' (non-zero, one error line containing needle), 'stop' (75),
        'ends' (any exit, within the timeout). protect: inputs that must stay byte for byte; keep:
        files of earlier runs that must still be there unchanged; check(rc, out, err) -> message
        of a silent wrong answer, or None."""
        if self.only and name not in self.only:
            return None
        before = {p: sha(p) for p in list(protect) + list(keep)}
        rc, out, err, took = self.run(ranks, args, env, cwd, timeout, signals)
        lines = [line for line in err.splitlines() if line.startswith("dsampler: error")]
        verdict, why = "ok", ""
        crashed = rc is not None and (rc < 0 or rc in (134, 136, 137, 139) or CRASH_TEXT.search(err))
        if rc is None:
            verdict, why = "hang", f"no exit within {timeout} s"
        elif crashed and not crash_ok:
            verdict, why = "crash", f"exit {rc}: {(CRASH_TEXT.search(err) or [''])[0] or err.strip()[-200:]}"
        elif any(sha(p) != before[p] for p in protect):
            verdict, why = "input changed", ", ".join(os.path.basename(p) for p in protect if sha(p) != before[p])
        elif any(sha(p) != before[p] for p in keep):
            verdict, why = "output lost", ", ".join(os.path.basename(p) for p in keep if sha(p) != before[p])
        elif expect == "ok" and rc != 0:
            verdict, why = "unclear error" if lines else "silent wrong answer", f"exit {rc}: {lines[:2]}"
        elif expect == "stop" and rc != 75:
            verdict, why = "silent wrong answer", f"exit {rc} where a stop ends 75: {lines[:2]}"
        elif expect == "error" and rc == 0:
            verdict, why = "silent wrong answer", "exit 0 where an error was due"
        elif expect == "error" and (len(lines) != 1 or (needle and needle not in lines[0])):
            verdict, why = "unclear error", f"{len(lines)} error lines, wanted one naming {needle!r}: " \
                                            f"{[line[:200] for line in lines[:3]]}"
        elif lines and (SOURCE_LOCATION.search("\n".join(lines)) or CONTROL.search("\n".join(lines))):
            verdict, why = "unclear error", f"a source location or control byte: {lines[:2]}"
        if verdict == "ok" and check:
            problem = check(rc, out, err)
            if problem:
                verdict, why = "silent wrong answer", problem
        self.results.append({"name": name, "verdict": verdict, "why": why, "rc": rc, "seconds": round(took, 1)})
        print(f"{verdict:20s} {name:32s} rc={rc} {took:5.1f}s {why[:300]}", flush=True)
        return rc, out, err

    # --- inputs ------------------------------------------------------------------------------

    def h5(self, name, **datasets):
        p = self.path(name)
        with h5py.File(p, "w") as f:
            for key, value in datasets.items():
                f[key.replace("__", "/")] = value
        return p

    def text(self, name, content, mode="w"):
        p = self.path(name)
        with open(p, mode) as f:
            f.write(content)
        return p

    def base_run(self, name, *extra, ranks=2, algorithm="hmc"):
        """A finished run with checkpoints: (output, checkpoint folder)."""
        out, ckpt = self.path(f"{name}.h5"), self.path(f"{name}.ckpt")
        counts = ["--chains", 4, "--warmup", 30, "--draws", 30] if algorithm == "hmc" else ["--particles", 16,
                                                                                                "--iters", 30]
        rc, _, err, _ = self.run(ranks, [algorithm, "--dim", 3, *counts, "--checkpoint-every", 10, "--backend", "cpu",
                                         "--quiet", "--out", out, "--checkpoint-dir", ckpt, *extra])
        if rc != 0:
            raise RuntimeError(f"base run {name} failed: {err}")
        return out, ckpt


def shape_check(path, dataset, shape):
    def check(rc, out, err):
        with h5py.File(path, "r") as f:
            got = f[dataset].shape if dataset in f else None
        return None if got == shape else f"{dataset} has shape {got}, expected {shape}"
    return check


def campaign(c):
    small = ["--dim", 3, "--chains", 4, "--warmup", 20, "--draws", 20, "--backend", "cpu", "--quiet"]
    svgd_small = ["--dim", 3, "--particles", 16, "--iters", 20, "--backend", "cpu", "--quiet"]
    out = c.path("o.h5")
    hostile = f"plugin:{os.path.join(c.plugins, 'hostile.so')}"

    # Options: odd values and combinations.
    c.case("thin_zero", ["hmc", *small, "--thin", 0, "--out", out], needle="--thin")
    c.case("output_chains_past", ["hmc", *small, "--output-chains", 5, "--out", out], needle="--output-chains")
    c.case("chains_per_start_odd", ["hmc", *small, "--chains-per-start", 3, "--out", out], needle="--chains-per-start")
    c.case("bandwidth_negative", ["svgd", *svgd_small, "--bandwidth", -1, "--out", out], needle="--bandwidth")
    c.case("bandwidth_nan", ["svgd", *svgd_small, "--bandwidth", "nan", "--out", out], needle="--bandwidth")
    c.case("imq_beta_zero", ["svgd", *svgd_small, "--imq-beta", 0, "--out", out], needle="--imq-beta")
    c.case("steps_zero", ["hmc", *small, "--steps", 0, "--out", out], needle="--steps")
    c.case("target_accept_one", ["hmc", *small, "--target-accept", 1, "--out", out], needle="--target-accept")
    c.case("jitter_one", ["hmc", *small, "--jitter", 1, "--out", out], needle="--jitter")
    c.case("seed_max", ["hmc", *small, "--seed", 2 ** 64 - 1, "--out", out], expect="ok")
    c.case("seed_past_max", ["hmc", *small, "--seed", 2 ** 64, "--out", out], needle="--seed")
    c.case("keep_zero", ["hmc", *small, "--keep", 0, "--out", out], needle="--keep")
    c.case("checkpoint_every_negative", ["hmc", *small, "--checkpoint-every", -5, "--out", out],
           needle="--checkpoint-every")
    c.case("out_empty", ["hmc", *small, "--out", ""], needle="--out")
    c.case("out_trailing_slash", ["hmc", *small, "--out", c.path("somedir") + "/"], needle="--out")
    c.case("out_dev_null", ["hmc", *small, "--out", "/dev/null"], needle="--out /dev/null")
    c.case("no_arguments", [], needle="no command")
    c.case("positional_extra", ["hmc", *small, "--out", out, "extra"], needle="'extra'")
    c.case("warmup_zero_draws_zero", ["hmc", "--dim", 3, "--chains", 4, "--warmup", 0, "--draws", 0, "--backend",
                                      "cpu", "--quiet", "--out", c.path("zero.h5")], expect="ok")
    c.case("summary_zero_draws", ["summary", c.path("zero.h5")], expect="ends")
    c.case("svgd_iters_zero", ["svgd", *svgd_small[:4], "--iters", 0, "--backend", "cpu", "--quiet", "--out", out],
           expect="ok")
    c.case("one_chain_one_dim", ["hmc", "--dim", 1, "--chains", 1, "--warmup", 20, "--draws", 20, "--backend", "cpu",
                                 "--quiet", "--out", out], expect="ok")
    thinned = c.path("thinned.h5")
    c.case("thin_output_chains_warmup", ["hmc", *small[:6], "--warmup", 10, "--draws", 20, "--thin", 3,
                                         "--output-chains", 2, "--save-warmup", "--backend", "cpu", "--quiet",
                                         "--out", thinned], expect="ok",
           check=shape_check(thinned, "posterior/x", (2, 7, 3)))
    c.case("more_ranks_than_chains", ["hmc", *small[:2], "--chains", 2, "--warmup", 20, "--draws", 20,
                                      "--backend", "cpu", "--quiet", "--out", out], ranks=3, expect="ok")
    c.case("backend_cuda_no_gpu", ["hmc", *small[:-3], "--backend", "cuda", "--quiet", "--out", out],
           needle="cuda")
    c.case("comm_nccl_cpu", ["hmc", *small, "--comm", "nccl", "--out", out], needle="--comm nccl")
    c.case("call_timeout_tiny_builtin", ["hmc", *small, "--call-timeout", "0.000001", "--out", out], expect="ok")

    # --config files.
    c.case("config_missing", ["hmc", "--config", c.path("nowhere.ini"), "--out", out], needle="nowhere.ini")
    c.case("config_directory", ["hmc", "--config", c.work, "--out", out], needle="--config")
    c.case("config_duplicate_key", ["hmc", "--config", c.text("dup.ini", "dim = 2\ndim = 3\n"), "--warmup", 5,
                                    "--draws", 5, "--backend", "cpu", "--quiet", "--out", out], needle="dim")
    c.case("config_bom", ["hmc", "--config", c.text("bom.ini", "\ufeffdim = 2\n"), "--warmup", 5, "--draws", 5,
                          "--backend", "cpu", "--quiet", "--out", out], expect="ok",
           check=shape_check(out, "posterior/x", (4, 5, 2)))
    c.case("config_upper_section", ["hmc", "--config", c.text("upper.ini", "[HMC]\ndim = 2\n"), "--out", out],
           needle="[HMC]")
    c.case("config_empty_value", ["hmc", "--config", c.text("empty.ini", "dim =\n"), "--out", out], needle="dim")
    c.case("config_flag_maybe", ["hmc", "--config", c.text("maybe.ini", "quiet = maybe\n"), "--dim", 2, "--out", out],
           needle="quiet")
    c.case("config_out_overridden", ["hmc", "--config", c.text("outcfg.ini", f"out = {c.path('from_ini.h5')}\n"),
                                     *small, "--out", c.path("from_cli.h5")], expect="ok",
           check=lambda rc, o, e: None if os.path.exists(c.path("from_cli.h5")) and not
           os.path.exists(c.path("from_ini.h5")) else "the command line's --out did not win")

    # --target and --target-args.
    c.case("target_unknown", ["hmc", *small, "--target", "gauss", "--out", out], needle="unknown target 'gauss'")
    c.case("plugin_missing", ["hmc", *small, "--target", "plugin:" + c.path("none.so"), "--out", out],
           needle="none.so")
    c.case("plugin_empty", ["hmc", *small, "--target", "plugin:", "--out", out], needle="--target plugin:")
    c.case("plugin_not_elf", ["hmc", *small, "--target", "plugin:" + c.text("fake.so", "not a library\n"),
                              "--out", out], needle="fake.so", protect=[c.path("fake.so")])
    c.case("stan_empty", ["hmc", *small, "--target", "stan:", "--out", out], needle="--target stan:")
    c.case("target_args_commas", ["hmc", *small, "--target-args", ",,,", "--out", out], needle="an empty item")
    c.case("target_args_no_equals", ["hmc", *small, "--target-args", "scale", "--out", out], needle="scale")
    c.case("target_args_long", ["hmc", *small, "--target-args", "scale=" + "1" * 2000, "--out", out],
           needle="--target-args")
    c.case("target_args_unknown_key", ["hmc", *small, "--target-args", "sigma=2", "--out", out], needle="sigma")
    c.case("mean_list_wrong_length", ["hmc", *small, "--target-args", "mean=1:2", "--out", out], needle="mean")

    # Odd input files.
    init_shape = c.h5("init_shape.h5", x=np.zeros((3, 3), np.float32))
    c.case("init_wrong_rows", ["hmc", *small, "--init", init_shape, "--out", out], needle=init_shape,
           protect=[init_shape])
    init_nan = c.h5("init_nan.h5", x=np.full((4, 3), np.nan, np.float32))
    c.case("init_nan", ["hmc", *small, "--init", init_nan, "--out", out], needle=init_nan, protect=[init_nan])
    init_empty = c.text("init_empty.h5", "")
    c.case("init_zero_bytes", ["hmc", *small, "--init", init_empty, "--out", out], needle=init_empty,
           protect=[init_empty])
    init_text = c.text("init_text.h5", "x = 1\n")
    c.case("init_text", ["hmc", *small, "--init", init_text, "--out", out], needle=init_text, protect=[init_text])
    init_int = c.h5("init_int.h5", x=np.ones((4, 3), np.int64))
    c.case("init_integers", ["hmc", *small, "--init", init_int, "--out", out], expect="ends", protect=[init_int])
    init_3d = c.h5("init_3d.h5", x=np.ones((4, 3, 1), np.float32))
    c.case("init_three_axes", ["hmc", *small, "--init", init_3d, "--out", out], needle=init_3d, protect=[init_3d])
    rng = np.random.default_rng(1)
    data_len = c.h5("data_len.h5", X=rng.normal(size=(20, 3)).astype(np.float32), y=np.zeros(19, np.float32))
    c.case("data_y_short", ["hmc", "--target", "logistic", "--data", data_len, *small[2:], "--out", out],
           needle=data_len, protect=[data_len])
    data_inf = c.h5("data_inf.h5", X=np.full((20, 3), np.inf, np.float32), y=np.zeros(20, np.float32))
    c.case("data_x_inf", ["hmc", "--target", "logistic", "--data", data_inf, *small[2:], "--out", out],
           needle=data_inf, protect=[data_inf])
    data_two = c.h5("data_two.h5", X=rng.normal(size=(20, 3)).astype(np.float32), y=np.full(20, 2, np.float32))
    c.case("data_y_two", ["hmc", "--target", "logistic", "--data", data_two, *small[2:], "--out", out],
           needle=data_two, protect=[data_two])
    c.case("data_for_gaussian", ["hmc", *small, "--data", data_two, "--out", out], needle="--data",
           protect=[data_two])

    # Outputs and checkpoints of earlier runs.
    base_out, base_ckpt = c.base_run("base")
    base_files = sorted(glob.glob(os.path.join(base_ckpt, "ckpt-*.h5"))) + [base_out]
    newest = sorted(glob.glob(os.path.join(base_ckpt, "ckpt-*.h5")), key=lambda p: int(p.split("-")[-1][:-3]))[-1]
    c.case("out_is_checkpoint", ["hmc", *small, "--out", newest, "--checkpoint-dir", c.path("x.ckpt")],
           needle=newest, keep=base_files)
    c.case("checkpoint_dir_is_output", ["hmc", *small, "--out", out, "--checkpoint-dir", base_out],
           needle="--checkpoint-dir", keep=base_files)
    c.case("checkpoint_dir_equals_out", ["hmc", *small, "--out", c.path("same.h5"), "--checkpoint-dir",
                                         c.path("same.h5")], needle="same.h5")
    c.case("out_into_checkpoint_dir", ["hmc", *small, "--out", os.path.join(base_ckpt, "ckpt-99999.h5"),
                                       "--checkpoint-dir", c.path("y.ckpt")], needle="ckpt-99999.h5", keep=base_files)
    os.makedirs(c.path("empty_dir"))
    c.case("resume_empty_dir", ["resume", c.path("empty_dir")], needle="empty_dir")
    tmp_only = c.path("tmp_only")
    os.makedirs(tmp_only)
    shutil.copy(newest, os.path.join(tmp_only, "ckpt-30.h5.tmp"))
    c.case("resume_tmp_only", ["resume", tmp_only], needle="tmp_only")
    c.case("resume_changes_seed", ["resume", base_ckpt, "--seed", 3], needle="--seed", keep=base_files)
    c.case("resume_fewer_draws", ["resume", base_ckpt, "--draws", 5], needle="--draws", keep=base_files)
    c.case("resume_svgd_output", ["resume", c.base_run("svgd_base", algorithm="svgd")[0]], needle="svgd_base.h5")
    lost_out, lost_ckpt = c.base_run("lost")
    os.remove(lost_out)
    c.case("resume_output_deleted", ["resume", lost_ckpt, "--draws", 40], needle="lost.h5")
    other_out, other_ckpt = c.base_run("other")
    swap_out, swap_ckpt = c.base_run("swap")
    shutil.copy(other_out, swap_out)
    c.case("resume_output_of_another_run", ["resume", swap_ckpt, "--draws", 40], needle="swap.h5",
           keep=[swap_out, other_out])
    cut_out, cut_ckpt = c.base_run("cut")
    cut_list = sorted(glob.glob(os.path.join(cut_ckpt, "ckpt-*.h5")), key=lambda p: int(p.split("-")[-1][:-3]))
    with open(cut_list[-1], "r+b") as f:
        f.truncate(os.path.getsize(cut_list[-1]) // 2)
    c.case("resume_newest_truncated", ["resume", cut_ckpt, "--draws", 40], expect="ok",
           check=shape_check(cut_out, "posterior/x", (4, 40, 3)))
    flip_out, flip_ckpt = c.base_run("flip")
    flip_list = sorted(glob.glob(os.path.join(flip_ckpt, "ckpt-*.h5")), key=lambda p: int(p.split("-")[-1][:-3]))
    with h5py.File(flip_list[-1], "r") as f:
        arrays = [f[k] for k in f if isinstance(f[k], h5py.Dataset) and f[k].size > 2]
        offset = arrays[0].id.get_offset() if arrays else None
    if offset is not None:
        with open(flip_list[-1], "r+b") as f:
            f.seek(offset + 4)
            byte = f.read(1)
            f.seek(offset + 4)
            f.write(bytes([byte[0] ^ 0x40]))
    c.case("resume_newest_bit_flipped", ["resume", flip_ckpt, "--draws", 40], expect="ok",
           check=shape_check(flip_out, "posterior/x", (4, 40, 3)))

    c.case("resume_checkpoint_dir_is_file", ["resume", base_ckpt, "--checkpoint-dir", base_out, "--draws", 40],
           needle="--checkpoint-dir", keep=base_files)
    svgd_out, svgd_ckpt = c.base_run("svgd_more", algorithm="svgd")
    c.case("resume_svgd_more_iters", ["resume", svgd_ckpt, "--iters", 45, "--quiet"], expect="ok",
           check=shape_check(svgd_out, "posterior/x", (1, 16, 3)))
    busy_out, busy_ckpt = c.path("busy.h5"), c.path("busy.ckpt")
    busy = c.launch(2, ["hmc", "--dim", 3, "--chains", 4, "--warmup", 10_000_000, "--draws", 10, "--backend", "cpu",
                        "--quiet", "--checkpoint-every", 100000, "--out", busy_out, "--checkpoint-dir", busy_ckpt])
    deadline = time.time() + 30
    while time.time() < deadline and not glob.glob(os.path.join(busy_ckpt, "ckpt-*.h5")):
        time.sleep(0.1)
    c.case("resume_while_running", ["resume", busy_ckpt, "--quiet"], needle="another dsampler run")
    c.case("summary_while_running", ["summary", busy_out], needle="busy.h5")
    busy.send_signal(signal.SIGUSR1)
    c.wait(busy, 60)

    # Odd paths.
    loop = c.path("loop.h5")
    os.symlink(loop, loop)
    c.case("init_symlink_loop", ["hmc", *small, "--init", loop, "--out", out], needle="loop.h5")
    c.case("data_directory", ["hmc", "--target", "logistic", "--data", c.work, *small[2:], "--out", out],
           needle="--data")
    readonly = c.path("readonly")
    os.makedirs(readonly)
    os.chmod(readonly, 0o555)
    c.case("out_readonly_folder", ["hmc", *small, "--out", os.path.join(readonly, "o.h5")],
           needle="readonly" if os.geteuid() != 0 else None, expect="error" if os.geteuid() != 0 else "ends")
    init_more = c.h5("init_more.h5", x=np.zeros((9, 3), np.float32))
    c.case("init_more_rows", ["hmc", *small, "--init", init_more, "--out", out], needle=init_more,
           protect=[init_more])
    c.case("plugin_directory", ["hmc", *small, "--target", "plugin:" + c.work, "--out", out], needle="--target")
    c.case("csv_dev_full", ["summary", base_out, "--csv", "/dev/full"], expect="ends", keep=base_files)

    # summary on odd files.
    c.case("summary_missing", ["summary", c.path("nothing.h5")], needle="nothing.h5")
    c.case("summary_checkpoint", ["summary", newest], needle=newest, keep=base_files)
    c.case("summary_unknown_var", ["summary", base_out, "--var", "nosuch"], needle="nosuch", keep=base_files)
    c.case("summary_max_rows_zero", ["summary", base_out, "--max-rows", 0], expect="ends", keep=base_files)
    c.case("summary_csv_no_dir", ["summary", base_out, "--csv", c.path("no_dir", "s.csv")], needle="no_dir",
           keep=base_files)
    c.case("summary_superchain_odd", ["summary", base_out, "--superchain-size", 3], needle="3", keep=base_files)
    one_draw = c.h5("one_draw.h5", posterior__x=np.ones((2, 1, 2), np.float32))
    c.case("summary_one_draw", ["summary", one_draw], expect="ends", protect=[one_draw])
    nan_draws = c.h5("nan_draws.h5", posterior__x=np.full((2, 10, 2), np.nan, np.float32))
    c.case("summary_nan_draws", ["summary", nan_draws], expect="ends", protect=[nan_draws])
    huge_chains = c.h5("flat.h5", posterior__x=np.ones((1, 50, 1), np.float32))
    c.case("summary_constant_draws", ["summary", huge_chains], expect="ends", protect=[huge_chains])
    scalar = c.h5("scalar.h5", posterior__x=np.float32(3))
    c.case("summary_scalar_variable", ["summary", scalar], needle="scalar.h5", protect=[scalar])

    # Signals at random times: a stop ends 75 with a checkpoint, and its resume is the run never stopped.
    long_args = ["--dim", 4, "--chains", 6, "--warmup", 1000000, "--draws", 5000, "--seed", 11, "--backend", "cpu",
                 "--quiet", "--checkpoint-every", 50000]
    reference = c.path("sig_reference.h5")
    c.case("signal_reference", ["hmc", *long_args, "--out", reference, "--checkpoint-dir", c.path("sig_ref.ckpt")],
           expect="ok", timeout=120)
    for index in range(3):
        delay = round(c.rng.uniform(0.4, 2.5), 2)
        sig_out, sig_ckpt = c.path(f"sig_{index}.h5"), c.path(f"sig_{index}.ckpt")
        rc, _, _ = c.case(f"signal_{index}_at_{delay}s", ["hmc", *long_args, "--out", sig_out, "--checkpoint-dir",
                                                           sig_ckpt], expect="ends", timeout=120,
                          signals=[(delay, signal.SIGUSR1)]) or (None, None, None)
        if rc == 75:
            def same_as_reference(rc, o, e, sig_out=sig_out):
                with h5py.File(sig_out, "r") as a, h5py.File(reference, "r") as b:
                    for key in ("posterior/x", "sample_stats/lp", "sample_stats/step_size"):
                        if a[key].shape != b[key].shape or a[key][...].tobytes() != b[key][...].tobytes():
                            return f"{key} differs from the run never stopped"
                return None
            c.case(f"signal_{index}_resume", ["resume", sig_ckpt, "--quiet"], expect="ok", timeout=120,
                   check=same_as_reference)
    c.case("signal_twice", ["svgd", *svgd_small[:4], "--iters", 100000, "--backend", "cpu", "--quiet", "--out",
                            c.path("twice.h5")], expect="stop", timeout=60,
           signals=[(1.5, signal.SIGUSR1), (1.55, signal.SIGUSR1)])
    c.case("signal_svgd_no_checkpoint_every", ["svgd", *svgd_small[:4], "--iters", 100000, "--backend", "cpu",
                                                "--quiet", "--out", c.path("svgd_sig.h5")], expect="stop",
           timeout=60, signals=[(round(c.rng.uniform(0.5, 2.0), 2), signal.SIGUSR1)])
    c.case("signal_int", ["hmc", *long_args, "--out", c.path("sigint.h5"), "--checkpoint-dir",
                          c.path("sigint.ckpt")], expect="ends", timeout=60, signals=[(1.0, signal.SIGINT)])

    # Misbehaving plugins.
    plugin_args = ["--target", hostile, "--dim", 2, "--backend", "cpu", "--quiet", "--out", out]
    c.case("plugin_nan_logp", ["hmc", *plugin_args, "--chains", 4], needle="log p is nan", env={"HOSTILE_MODE":
                                                                                               "nan_logp"})
    c.case("plugin_crash_rank1", ["hmc", *plugin_args, "--chains", 4], expect="ends", crash_ok=True,
           env={"HOSTILE_MODE": "crash", "HOSTILE_RANK": "1"}, timeout=60)
    c.case("plugin_stall_svgd", ["svgd", *plugin_args, "--particles", 8, "--call-timeout", 1], needle="logp_grad",
           env={"HOSTILE_MODE": "stall", "HOSTILE_RANK": "1"}, timeout=30)
    c.case("plugin_stall_all_ranks", ["hmc", *plugin_args, "--chains", 4, "--call-timeout", 1],
           needle="rank 0 on", env={"HOSTILE_MODE": "stall", "HOSTILE_RANK": "-1"}, timeout=30)
    c.case("plugin_stall_init_rank1", ["hmc", *plugin_args, "--chains", 4, "--call-timeout", 1],
           needle="initial_point", env={"HOSTILE_MODE": "stall_init", "HOSTILE_RANK": "1"}, timeout=30)
    c.case("plugin_multiline_svgd", ["svgd", *plugin_args, "--particles", 8], needle="failed:\\n",
           env={"HOSTILE_MODE": "multiline_call"})
    c.case("plugin_zero_axis_three_ranks", ["hmc", *plugin_args, "--chains", 4], needle="theta", ranks=3,
           env={"HOSTILE_MODE": "zero_axis"})
    c.case("plugin_stall_then_stop", ["hmc", *plugin_args, "--chains", 4], expect="ends", timeout=60,
           env={"HOSTILE_MODE": "stall", "HOSTILE_RANK": "0"}, signals=[(2.0, signal.SIGUSR1)],
           check=lambda rc, o, e: None if rc not in (0, 75) else f"exit {rc} without a checkpoint")
    c.case("plugin_long_message_one_rank", ["hmc", *plugin_args, "--chains", 4], needle="[...]", ranks=1,
           env={"HOSTILE_MODE": "long_message"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", required=True)
    parser.add_argument("--plugins", required=True)
    parser.add_argument("--work", default="/tmp/dsampler-campaign")
    parser.add_argument("--only", default="")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--json", default="")
    c = Campaign(parser.parse_args())
    campaign(c)
    counts = {v: sum(r["verdict"] == v for r in c.results) for v in VERDICTS}
    print(f"\n{len(c.results)} cases: " + ", ".join(f"{n} {v}" for v, n in counts.items()))
    for r in c.results:
        if r["verdict"] != "ok":
            print(f"  {r['verdict']}: {r['name']}: {r['why'][:300]}")
    if parser.parse_args().json:
        with open(parser.parse_args().json, "w") as f:
            json.dump({"counts": counts, "results": c.results}, f, indent=1)
    sys.exit(0 if counts["ok"] == len(c.results) else 1)


if __name__ == "__main__":
    main()
