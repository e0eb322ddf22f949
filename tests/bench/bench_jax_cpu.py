"""One posteriordb posterior as a JAX target and as a Stan target on the CPU backend: the cost of
a gradient each way. Prints one JSON line per measurement and a last line with the medians.

  bench_jax_cpu.py BIN NAME [REPEATS]

NAME is a folder of tests/posteriordb with model.stan and model.py. The NumPyro model is exported
to a CPU bundle (dsampler-export's API, as test_posteriordb.py --jax does), the Stan model
compiled (`dsampler stan`). Each target then runs `dsampler hmc` on 2 ranks with a fixed
trajectory: --warmup 0 --adapt none --metric unit --steps 10 --step-size 0.01, 64 chains, the
same seed; once with 20 draws and once with 2020. The gradient's cost is the difference of the two
walls over the 2000 x 10 x 64 extra gradient evaluations (start-up, compilation and output cancel
out), in microseconds of wall a gradient of one chain (two ranks at once on two cores). Run with
the tests' jax venv python (tests/jax/requirements.txt: jax, numpyro and the CPU PJRT plugin)."""
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "src", "export"))
PDB = os.path.join(ROOT, "tests", "posteriordb")
CHAINS, STEPS, SHORT, LONG = 64, 10, 20, 2020
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")


def emit(**record):
    record["date"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    print(json.dumps(record), flush=True)


def wall(binary, target, data, draws, out):
    args = [MPIEXEC, "-n", "2", binary, "hmc", "--target", target, "--backend", "cpu", "--chains", str(CHAINS),
            "--warmup", "0", "--adapt", "none", "--metric", "unit", "--steps", str(STEPS), "--step-size", "0.01",
            "--draws", str(draws), "--seed", "1", "--quiet", "--out", out]
    if data:
        args[7:7] = ["--data", data]
    start = time.perf_counter()
    proc = subprocess.run(args, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return seconds


def main():
    binary, name = sys.argv[1], sys.argv[2]
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    folder = os.path.join(PDB, name)
    work = os.path.join("/tmp", f"bench_jax_cpu_{name}")
    os.makedirs(work, exist_ok=True)
    from dsampler_export.bundle import export_bundle
    bundle = os.path.join(work, "model.dsj")
    options = {}  # the model's own export options (its arithmetic), as test_posteriordb.py reads them
    if os.path.isfile(os.path.join(folder, "export.json")):
        with open(os.path.join(folder, "export.json")) as f:
            options = json.load(f)
    export_bundle(f"{folder}/model.py:model", os.path.join(folder, "data.json"), bundle, kind="numpyro",
                  blocks={"cpu": 64}, platforms=["cpu"], **options)
    subprocess.run([binary, "stan", os.path.join(folder, "model.stan"), "--quiet"], check=True, capture_output=True)
    targets = {"jax": (f"jax:{bundle}", None), "stan": (f"stan:{os.path.join(folder, 'model.stan')}",
                                                         os.path.join(folder, "data.json"))}
    per = {k: [] for k in targets}
    for r in range(repeats):
        for kind, (target, data) in targets.items():
            short = wall(binary, target, data, SHORT, os.path.join(work, f"{kind}_short.h5"))
            long = wall(binary, target, data, LONG, os.path.join(work, f"{kind}_long.h5"))
            us = (long - short) / ((LONG - SHORT) * STEPS * CHAINS) * 1e6
            per[kind].append(us)
            emit(what="per-gradient", posterior=name, target=kind, repeat=r, us_per_gradient=round(us, 3),
                 wall_short=round(short, 2), wall_long=round(long, 2))
    medians = {k: round(statistics.median(v), 3) for k, v in per.items()}
    emit(what="median", posterior=name, ranks=2, chains=CHAINS, us_per_gradient=medians,
         jax_over_stan=round(medians["jax"] / medians["stan"], 3))


if __name__ == "__main__":
    main()
