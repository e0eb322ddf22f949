"""The example plugin (tests/plugin/example_banana.so, the banana density written as a user
model) gives bitwise the same output as the built-in `banana` on the CPU backend: HMC draws and
statistics, SVGD particles, on 1 and 3 ranks. The loader's errors: a missing file, a library
without an entry point, another ABI version, a failing create and a failing call (on one rank
only) each end the run on every rank with one message naming the plugin (a version 2 plugin's
own words, through report_error). A plugin built for version 1 still loads."""
import os

import dstest as t

PLUGIN_DIR = os.environ["DSAMPLER_PLUGIN_DIR"]


def plugin(name):
    return f"plugin:{os.path.join(PLUGIN_DIR, name + '.so')}"


def same_datasets(a, b):
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a)


def bitwise():
    runs = {
        "hmc": ["hmc", "--dim", 5, "--chains", 7, "--warmup", 10, "--draws", 30, "--steps", 8, "--step-size", 0.2,
                "--seed", 3],
        "svgd": ["svgd", "--dim", 5, "--particles", 13, "--iters", 20, "--step-size", 0.05, "--seed", 3],
    }
    for name, args in runs.items():
        for ranks in (1, 3):
            outputs = {}
            for target in ("banana", plugin("example_banana")):
                out = t.path(f"plugin_{name}_{ranks}_{'plugin' if 'plugin' in target else 'builtin'}.h5")
                t.run(ranks, *args, "--target", target, "--target-args", "a=1.5,b=1", "--out", out, "--quiet",
                      "--backend", "cpu")
                outputs[target] = t.datasets(out)
            a, b = outputs.values()
            t.check(len(a) >= 4 and same_datasets(a, b),
                    f"{name}, {ranks} rank(s): plugin output bitwise equal to the built-in's ({len(a)} datasets)")


def refused(label, target, needle, extra=()):
    out = t.path(f"plugin_bad_{label}.h5")
    rc, _, stderr = t.run(2, "hmc", "--target", target, "--chains", 4, "--draws", 5, "--out", out, "--quiet",
                          "--backend", "cpu", *extra, expect_ok=False, timeout=60, refusal=True)
    t.check(rc != 0 and needle in stderr and stderr.count("dsampler: error") == 1,
            f"{label}: exit {rc}, one message containing {needle!r} ({stderr.strip().splitlines()[0] if stderr.strip() else ''!r})")


def errors():
    refused("missing_file", "plugin:" + os.path.join(PLUGIN_DIR, "no_such_plugin.so"), "cannot load the plugin")
    refused("no_entry", plugin("broken_no_entry"), "exports neither dsampler_target_create_v2 nor dsampler_target_create")
    refused("abi", plugin("broken_abi"), "target ABI version 99; this dsampler speaks versions 1 and 2")
    refused("create", plugin("broken_create"), "dsampler_target_create(\"\") failed (returned 5)")
    refused("call", plugin("broken_call"), "rank 1 on")
    refused("call_message", plugin("broken_call"), "logp_grad failed (returned 7)")
    # No step search: the failing call is in a sampling iteration, whose agreement rides in the
    # statistics' allreduce.
    refused("call_in_iteration", plugin("broken_call"), "rank 1 on", ("--warmup", 0, "--adapt", "none", "--steps", 10,
                                                                      "--step-size", 0.1))
    refused("bad_args", plugin("example_banana"), "failed (returned 1)", ("--target-args", "c=2"))
    # Version 2 targets say why, in their own words, through report_error.
    refused("report_create", plugin("broken_report_create"), "cannot open the model's table 'weights.csv'")
    refused("report_call", plugin("broken_report_call"), "the likelihood overflowed at row 2 (x = 1e39)")


def legacy():
    """A plugin built for version 1 (abi_version 1, the version 1 struct) still runs, and gives the
    built-in gaussian's draws (the same float arithmetic), bitwise."""
    args = ["hmc", "--dim", 3, "--chains", 5, "--warmup", 20, "--draws", 20, "--seed", 4, "--backend", "cpu", "--quiet"]
    outputs = []
    for target in ("gaussian", plugin("legacy_v1")):
        out = t.path(f"legacy_{'builtin' if target == 'gaussian' else 'plugin'}.h5")
        t.run(2, *args, "--target", target, "--out", out)
        outputs.append(t.datasets(out))
    names = ["posterior/x", "sample_stats/lp", "sample_stats/acceptance_rate"]
    t.check(all(outputs[0][n].tobytes() == outputs[1][n].tobytes() for n in names),
            "a version 1 plugin runs, bitwise as the built-in gaussian")


if __name__ == "__main__":
    bitwise()
    errors()
    legacy()
    t.finish("targets_plugin")
