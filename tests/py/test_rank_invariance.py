"""Same seed, any rank count: bitwise identical output datasets, HMC and SVGD (sgd and
adagrad), with chains or particles not divisible by the rank count and ranks owning none."""
import numpy as np

import dstest as t

RUNS = {
    "hmc": ["hmc", "--dim", 6, "--chains", 10, "--warmup", 5, "--draws", 40, "--steps", 5, "--step-size", 0.3,
            "--seed", 11],
    "hmc_few_chains": ["hmc", "--dim", 3, "--chains", 3, "--draws", 20, "--seed", 5],
    "svgd": ["svgd", "--dim", 4, "--particles", 23, "--iters", 15, "--step-size", 0.2, "--seed", 11],
    "svgd_adagrad": ["svgd", "--dim", 2, "--particles", 9, "--iters", 10, "--update", "adagrad", "--seed", 3],
    "svgd_few_particles": ["svgd", "--dim", 3, "--particles", 2, "--iters", 5, "--seed", 2],
}


def main():
    for name, args in RUNS.items():
        outputs = {}
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
        x = base["posterior/x"]
        t.check(np.all(np.isfinite(x)) and np.std(x) > 0, f"{name}: draws are finite and not constant")
    t.finish("rank_invariance")


if __name__ == "__main__":
    main()
