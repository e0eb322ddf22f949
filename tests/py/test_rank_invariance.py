"""Same seed, any rank count: bitwise identical output datasets, HMC (fixed step; warmup
adaptation per chain and pooled; jitter; ChEES trajectory lengths; the dense metric, forced and
chosen by --metric auto; the Fisher diagonal; more chains than the windows keep; the opt-in first
metrics of DSAMPLER_METRIC_INIT and DSAMPLER_FISHER_FIRST) and SVGD (sgd, adagrad and adam), with chains or particles
not divisible by the rank count and ranks owning none."""
import os

import numpy as np

import dstest as t

RUNS = {
    "hmc": ["hmc", "--dim", 6, "--chains", 10, "--warmup", 5, "--adapt", "none", "--draws", 40, "--steps", 5,
            "--step-size", 0.3, "--seed", 11],
    "hmc_adapt_pooled": ["hmc", "--dim", 6, "--chains", 10, "--warmup", 150, "--adapt", "pooled", "--draws", 30,
                         "--steps", 5, "--seed", 12, "--save-warmup"],
    "hmc_adapt_per_chain_jitter": ["hmc", "--dim", 4, "--chains", 7, "--warmup", 120, "--adapt", "per-chain",
                                   "--jitter", 0.3, "--draws", 30, "--steps", 5, "--seed", 13],
    "hmc_few_chains": ["hmc", "--dim", 3, "--chains", 3, "--draws", 20, "--seed", 5],
    # ChEES trajectory lengths (the default --steps auto) through metric windows and the tail.
    "hmc_chees_pooled": ["hmc", "--dim", 6, "--chains", 10, "--warmup", 150, "--draws", 30, "--seed", 16,
                         "--save-warmup"],
    "hmc_chees_per_chain": ["hmc", "--dim", 5, "--chains", 9, "--warmup", 120, "--adapt", "per-chain", "--draws",
                            30, "--seed", 17],
    # The dense metric (forced, and chosen by --metric auto on a correlated target), with ChEES.
    "hmc_dense": ["hmc", "--target", "corr-gaussian", "--target-args", "rho=0.95", "--dim", 5, "--chains", 10,
                  "--warmup", 150, "--draws", 30, "--metric", "dense", "--seed", 18, "--save-warmup"],
    "hmc_auto_dense": ["hmc", "--target", "corr-gaussian", "--target-args", "rho=0.9", "--dim", 4, "--chains", 9,
                       "--warmup", 150, "--draws", 30, "--seed", 19],
    # The Fisher diagonal (--metric-fit fisher): the gradients' window moments pooled too.
    "hmc_fisher": ["hmc", "--target", "banana", "--dim", 4, "--chains", 10, "--warmup", 150, "--draws", 30,
                   "--metric-fit", "fisher", "--seed", 20, "--save-warmup"],
    # More chains than pooled adaptation's windows keep (adapt.h's ADAPT_WINDOW_CHAINS, 16384): the
    # windows' moments, the dense covariances, ChEES's centre and the Fisher fit's gradient moments
    # over the chains of global index below it, a set that ends inside a rank's block on 3 and 4 ranks.
    "hmc_window_subset_dense": ["hmc", "--target", "corr-gaussian", "--target-args", "rho=0.9", "--dim", 3,
                                "--chains", 17000, "--warmup", 150, "--draws", 10, "--metric", "dense",
                                "--output-chains", 8, "--seed", 22],
    "hmc_window_subset_fisher": ["hmc", "--target", "banana", "--dim", 3, "--chains", 17000, "--warmup", 150,
                                 "--draws", 10, "--metric-fit", "fisher", "--output-chains", 8, "--seed", 23],
    "svgd": ["svgd", "--dim", 4, "--particles", 23, "--iters", 15, "--step-size", 0.2, "--seed", 11],
    "svgd_adagrad": ["svgd", "--dim", 2, "--particles", 9, "--iters", 10, "--update", "adagrad", "--seed", 3],
    "svgd_adam": ["svgd", "--dim", 3, "--particles", 11, "--iters", 10, "--update", "adam", "--seed", 3],
    "svgd_few_particles": ["svgd", "--dim", 3, "--particles", 2, "--iters", 5, "--seed", 2],
}


# Tiny draw buffers: many collective block writes, with chains split unevenly over ranks.
SMALL_BUFFER = {"hmc_small_blocks": 3000, "hmc_thin_subset": 2000}
RUNS["hmc_small_blocks"] = ["hmc", "--dim", 5, "--chains", 11, "--warmup", 30, "--draws", 45, "--save-warmup",
                            "--seed", 14]


# Thinned draws of a subset of chains, and every chain's moments, in small uneven blocks.
RUNS["hmc_thin_subset"] = ["hmc", "--dim", 5, "--chains", 11, "--warmup", 40, "--draws", 47, "--thin", 3,
                           "--output-chains", 6, "--save-warmup", "--adapt", "per-chain", "--seed", 15]


# The first diagonal from the starts' gradients (DSAMPLER_METRIC_INIT=gradient, adapt.h's
# adapt_initial_metric, not yet a default): its variances pooled over all chains too.
# The Fisher fit for the first window only (DSAMPLER_FISHER_FIRST=1, adapt.h; opt-in too).
ENV = {"hmc_metric_init_gradient": {"DSAMPLER_METRIC_INIT": "gradient"},
       "hmc_fisher_first": {"DSAMPLER_FISHER_FIRST": "1"}}
RUNS["hmc_metric_init_gradient"] = ["hmc", "--target", "banana", "--dim", 4, "--chains", 10, "--warmup", 150,
                                    "--draws", 30, "--seed", 24, "--save-warmup"]
RUNS["hmc_fisher_first"] = ["hmc", "--target", "banana", "--dim", 4, "--chains", 10, "--warmup", 150,
                            "--draws", 30, "--metric", "diag", "--seed", 25, "--save-warmup"]
ENV_KEYS = sorted({key for env in ENV.values() for key in env})


def main():
    for name, args in RUNS.items():
        outputs = {}
        if name in SMALL_BUFFER:
            os.environ["DSAMPLER_DRAW_BUFFER_BYTES"] = str(SMALL_BUFFER[name])
        else:
            os.environ.pop("DSAMPLER_DRAW_BUFFER_BYTES", None)
        for key in ENV_KEYS:
            os.environ.pop(key, None)
        if name in ENV:
            plain = t.path(f"ranks_{name}_plain.h5")
            t.run(1, *args, "--out", plain, "--quiet", "--backend", "cpu")
            os.environ.update(ENV[name])
        for ranks in (1, 2, 3, 4):
            out = t.path(f"ranks_{name}_{ranks}.h5")
            t.run(ranks, *args, "--out", out, "--quiet", "--backend", "cpu")
            outputs[ranks] = t.datasets(out)
        base = outputs[1]
        t.check(len(base) >= 4, f"{name}: output has {len(base)} datasets")
        for ranks in (2, 3, 4):
            same = base.keys() == outputs[ranks].keys() and all(
                base[k].dtype == outputs[ranks][k].dtype and base[k].tobytes() == outputs[ranks][k].tobytes()
                for k in base)
            t.check(same, f"{name}: {ranks} ranks bitwise equal to 1 rank ({len(base)} datasets)")
        if name.endswith("dense"):
            used = t.attr(t.path(f"ranks_{name}_1.h5"), "metric_used")
            t.check(used == "dense", f"{name}: the sampling used the dense metric ({used})")
        if name in ENV:
            # The first metric (the starts', or the first window's after iteration 99) changes
            # the steps from there on.
            at = 0 if name == "hmc_metric_init_gradient" else 100
            steps = t.datasets(plain)["warmup_sample_stats/step_size"][:, at:]
            t.check(not np.array_equal(steps, base["warmup_sample_stats/step_size"][:, at:]),
                    f"{name}: the steps from iteration {at} on differ from the run without it (its metric was used)")
        x = base["posterior/x"]
        t.check(np.all(np.isfinite(x)) and np.std(x) > 0, f"{name}: draws are finite and not constant")
    for key in ENV_KEYS:
        os.environ.pop(key, None)
    t.finish("rank_invariance")


if __name__ == "__main__":
    main()
