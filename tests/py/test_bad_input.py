"""Bad input is refused before work starts: a clear message naming the input, a non-zero exit
on every rank, no hang (each run is bounded by a timeout), and no output file written."""
import os

import numpy as np

import dstest as t


def expect_refused(name, args, needle, ranks=2):
    out = t.path(f"bad_{name}.h5")
    if os.path.exists(out):
        os.remove(out)
    try:
        rc, stdout, stderr = t.run(ranks, *args, "--out", out, expect_ok=False, timeout=60, refusal=True)
    except Exception as e:  # a timeout is a hang
        t.check(False, f"{name}: did not finish ({e})")
        return
    t.check(rc != 0, f"{name}: exit code {rc} != 0")
    t.check(needle in stderr, f"{name}: message names the input ({needle!r} in {stderr.strip()!r})")
    t.check(stderr.count("dsampler: error") == 1, f"{name}: reported once, not once per rank")


def main():
    good_init = t.write_init("bad_shape_init.h5", np.zeros((5, 3), dtype=np.float32) + 0.5)
    nan_x = np.ones((6, 2), dtype=np.float32)
    nan_x[4, 1] = np.nan
    nan_init = t.write_init("bad_nan_init.h5", nan_x)
    cases = [
        ("unknown_target", ["hmc", "--target", "nosuch", "--dim", 2], "unknown target 'nosuch'"),
        ("unknown_option", ["svgd", "--dim", 2, "--partcles", 10], "--partcles"),
        ("unknown_command", ["mcmc", "--dim", 2], "unknown command 'mcmc'"),
        # A prefix of an option's name is not taken for it (getopt's abbreviations would make
        # `--output run.h5` set --output-chains): refused, naming what it could mean.
        ("abbreviated_option", ["hmc", "--dim", 2, "--output", "x.h5"],
         "unknown option '--output' for dsampler hmc: options are named in full (did you mean --output-chains, --out?)"),
        ("abbreviated_option_value", ["hmc", "--dim", 2, "--draw=5"], "unknown option '--draw' for dsampler hmc"),
        ("dim_zero", ["hmc", "--dim", 0], "--dim"),
        ("dim_negative", ["svgd", "--dim", -3], "--dim"),
        ("dim_not_a_number", ["svgd", "--dim", "abc"], "--dim: expected an integer, got 'abc'"),
        ("chains_zero", ["hmc", "--dim", 2, "--chains", 0], "--chains"),
        ("step_negative", ["hmc", "--dim", 2, "--step-size", -1], "--step-size"),
        ("bad_update", ["svgd", "--dim", 2, "--update", "rmsprop"], "--update: expected sgd, adagrad or adam, got 'rmsprop'"),
        ("bad_bandwidth", ["svgd", "--dim", 2, "--bandwidth", "-1"], "--bandwidth"),
        ("bad_kernel", ["svgd", "--dim", 2, "--kernel", "laplace"], "--kernel: expected rbf or imq, got 'laplace'"),
        ("bad_imq_beta", ["svgd", "--dim", 2, "--kernel", "imq", "--imq-beta", "0.5"], "--imq-beta: expected a number in (-1, 0)"),
        ("bad_imq_c", ["svgd", "--dim", 2, "--imq-c", "0"], "--imq-c: expected a number in [1e-06, 1e+06]"),
        ("bad_ksd_every", ["svgd", "--dim", 2, "--ksd-every", "-3"], "--ksd-every: expected >= 0"),
        ("bad_ksd_kernel", ["svgd", "--dim", 2, "--ksd-kernel", "rbf"], "--ksd-kernel: expected run or imq"),
        ("bad_save_every", ["svgd", "--dim", 2, "--save-every", "-1"], "--save-every: expected >= 0"),
        ("bad_backend", ["svgd", "--dim", 2, "--backend", "tpu"], "--backend"),
        ("bad_comm", ["svgd", "--dim", 2, "--comm", "gloo"], "--comm"),
        ("nccl_on_cpu", ["svgd", "--dim", 2, "--backend", "cpu", "--comm", "nccl"],
         "--comm nccl: needs the CUDA backend on every rank"),
        ("bad_metric_fit", ["hmc", "--dim", 2, "--metric-fit", "hessian"], "--metric-fit: expected variance or fisher"),
        ("fisher_per_chain", ["hmc", "--dim", 2, "--metric-fit", "fisher", "--adapt", "per-chain"],
         "--metric-fit fisher: needs --adapt pooled"),
        ("fisher_dense", ["hmc", "--dim", 2, "--metric-fit", "fisher", "--metric", "dense"],
         "--metric-fit fisher: fits a diagonal metric; needs --metric diag or auto, not dense"),
        ("bad_target_arg", ["hmc", "--dim", 2, "--target-args", "sigma=2"], "no parameter 'sigma'"),
        ("init_wrong_shape", ["svgd", "--dim", 3, "--particles", 6, "--init", good_init],
         "has shape [5, 3], expected [6, 3]"),
        ("init_wrong_dim", ["hmc", "--dim", 4, "--chains", 5, "--init", good_init], "expected [5, 4]"),
        ("init_missing", ["hmc", "--dim", 3, "--chains", 5, "--init", t.path("no_such_file.h5")], "cannot open"),
        ("init_not_finite", ["hmc", "--dim", 2, "--chains", 6, "--init", nan_init], "row 4, column 1 is not finite"),
        ("init_not_finite_svgd", ["svgd", "--dim", 2, "--particles", 6, "--init", nan_init], "not finite"),
        ("out_unwritable", ["hmc", "--dim", 2, "--out", "/nonexistent/dir/run.h5"], "/nonexistent/dir/run.h5"),
    ]
    for name, args, needle in cases:
        if name == "out_unwritable":
            rc, _, stderr = t.run(2, *args, expect_ok=False, timeout=60, refusal=True)
            t.check(rc != 0 and needle in stderr, f"{name}: refused naming the path ({stderr.strip()!r})")
            continue
        expect_refused(name, args, needle)
        t.check(not os.path.exists(t.path(f"bad_{name}.h5")), f"{name}: no output written")
    # A config file: unknown keys are refused too; known keys work.
    cfg = t.path("bad.ini")
    with open(cfg, "w") as f:
        f.write("dim = 2\nchanis = 4\n")
    expect_refused("config_unknown_key", ["hmc", "--config", cfg], "chanis")
    t.finish("bad_input")


if __name__ == "__main__":
    main()
