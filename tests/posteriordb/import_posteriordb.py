"""Copies posteriors of posteriordb (https://github.com/stan-dev/posteriordb) into this folder and
computes their reference summaries.

  python import_posteriordb.py POSTERIORDB_GIT_DIR NAME...

For each posterior NAME (posterior_database/posteriors/NAME.json) it writes NAME/model.stan (the
Stan model the posterior names), NAME/data.json (its data, unzipped) and NAME/reference.json: for
every scalar element of the reference posterior's draws (10 chains x 1000 draws, constrained
scale), mean, sd, mcse_mean, mcse_sd, ess_bulk, ess_tail and r_hat as ArviZ's `az.summary`
computes them (rank-normalised split R-hat and ESS, Vehtari et al. 2021), in float64, unrounded.
Element names are rewritten from posteriordb's 1-based `beta[1]`, `Sigma[1,2]` to dsampler's
0-based `beta[0]`, `Sigma[0,1]` (C order, as `dsampler summary` names them). Needs git, numpy and
arviz (the tests' venv has them: tests/py/requirements.txt)."""
import io
import json
import os
import re
import subprocess
import sys
import zipfile

import arviz as az
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def git(git_dir, *args):
    return subprocess.run(["git", "--git-dir", git_dir, *args], check=True, capture_output=True).stdout


def show(git_dir, path):
    return git(git_dir, "show", f"HEAD:{path}")


def unzip_one(blob):
    with zipfile.ZipFile(io.BytesIO(blob)) as z:
        names = z.namelist()
        assert len(names) == 1, names
        return z.read(names[0])


def zero_based(name):
    """beta[1] -> beta[0], Sigma[1,2] -> Sigma[0,1]."""
    m = re.fullmatch(r"([^\[]+)\[([0-9, ]+)\]", name)
    if not m:
        return name
    idx = [int(i) - 1 for i in m.group(2).split(",")]
    return f"{m.group(1)}[{','.join(str(i) for i in idx)}]"


def reference_summary(draws):
    """draws: posteriordb's list of chains, each {element: [draws]}."""
    names = list(draws[0])
    arrays = {zero_based(n): np.array([chain[n] for chain in draws], dtype=np.float64) for n in names}
    # Each element its own scalar variable, so the summary's rows are exactly these names.
    safe = {f"v{i}": a for i, a in enumerate(arrays.values())}
    table = az.summary(az.from_dict(posterior=safe), round_to="none", kind="all", hdi_prob=0.9)
    out = {}
    for i, name in enumerate(arrays):
        row = table.loc[f"v{i}"]
        out[name] = {k: float(row[k]) for k in ("mean", "sd", "mcse_mean", "mcse_sd", "ess_bulk", "ess_tail", "r_hat")}
    chains, n_draws = arrays[next(iter(arrays))].shape
    return out, int(chains), int(n_draws)


def import_one(git_dir, commit, name):
    post_path = f"posterior_database/posteriors/{name}.json"
    post = json.loads(show(git_dir, post_path))
    model_path = f"posterior_database/models/stan/{post['model_name']}.stan"
    data_path = f"posterior_database/data/data/{post['data_name']}.json.zip"
    ref_name = post["reference_posterior_name"]
    draws_path = f"posterior_database/reference_posteriors/draws/draws/{ref_name}.json.zip"
    info_path = f"posterior_database/reference_posteriors/draws/info/{ref_name}.info.json"
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "model.stan"), "wb") as f:
        f.write(show(git_dir, model_path))
    data = json.loads(unzip_one(show(git_dir, data_path)))
    with open(os.path.join(folder, "data.json"), "w") as f:
        json.dump(data, f)
    draws = json.loads(unzip_one(show(git_dir, draws_path)))
    params, chains, n_draws = reference_summary(draws)
    try:
        full = json.loads(show(git_dir, info_path))
        info = {"inference": full.get("inference"), "checks_made": full.get("checks_made"),
                "rstan_version": (full.get("versions") or {}).get("rstan_version"), "added_date": full.get("added_date")}
    except subprocess.CalledProcessError:
        info = None
    ref = {"posterior": name, "posteriordb_commit": commit,
           "sources": {"posterior": post_path, "model": model_path, "data": data_path, "draws": draws_path},
           "reference_info": info, "chains": chains, "draws": n_draws,
           "computed_with": f"arviz {az.__version__} az.summary (rank-normalised split R-hat, bulk/tail ESS, "
                            f"mcse_mean, mcse_sd), numpy {np.__version__}, float64",
           "params": params}
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    worst_rhat = max(p["r_hat"] for p in params.values())
    print(f"{name}: {len(params)} elements, {chains}x{n_draws} draws, max R-hat {worst_rhat:.4f}")


def main():
    git_dir, names = sys.argv[1], sys.argv[2:]
    commit = git(git_dir, "rev-parse", "HEAD").decode().strip()
    for name in names:
        import_one(git_dir, commit, name)


if __name__ == "__main__":
    main()
