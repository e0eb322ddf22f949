"""Writes reference.json (and model.stan, data.json) for mcycle_gp-accel_gp from posteriordb's
summaries of its reference draws; the draws themselves
(posterior_database/reference_posteriors/draws/draws/mcycle_gp-accel_gp.json.zip, a large file) were
absent from the copy of posteriordb this was made from, so import_posteriordb.py cannot read them.

  python make_reference.py POSTERIORDB_GIT_DIR

- mean, mcse_mean: summary_statistics/mean_value (the draws' mean and its MCSE)
- sd: sqrt((mean_squared_value - mean^2) n / (n - 1)), n = 10000 draws (ddof 1, as az.summary);
  mean_squared_value is stored to about 10 significant digits, so sd is good to about 1e-5 here
- ess_bulk, ess_tail, r_hat: the draws' diagnostics in summary_statistics/mean_value/info
- mcse_sd: sd / sqrt(2 ess_bulk), the normal-theory value (az.summary's needs the draws' fourth
  moment, which the summaries lack); an approximation, marked as such in computed_with
Checked on the 22 other posteriors, whose draws are present: mean, mcse_mean and the ESS agree with
az.summary's to 1e-12, r_hat to 1e-5, sd to 1e-5 where mean^2 / sd^2 < 1000 (here it is below 30)
and to 2% at worst (sblrc-blr, mean^2 / sd^2 about 1e6); mcse_sd is within a factor of 2 of
az.summary's. Element names as import_posteriordb.py writes them (zgp_1[1] -> zgp_1[0]). Needs git
only."""
import io
import json
import math
import os
import re
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "mcycle_gp-accel_gp"
STATS = "posterior_database/reference_posteriors/summary_statistics"


def show(git_dir, path):
    return subprocess.run(["git", "--git-dir", git_dir, "show", f"HEAD:{path}"], check=True,
                          capture_output=True).stdout


def zero_based(name):
    m = re.fullmatch(r"([^\[]+)\[([0-9, ]+)\]", name)
    return name if not m else f"{m.group(1)}[{','.join(str(int(i) - 1) for i in m.group(2).split(','))}]"


def main():
    git_dir = sys.argv[1]
    commit = subprocess.run(["git", "--git-dir", git_dir, "rev-parse", "HEAD"], check=True,
                            capture_output=True, text=True).stdout.strip()
    post_path = f"posterior_database/posteriors/{NAME}.json"
    post = json.loads(show(git_dir, post_path))
    model_path = f"posterior_database/models/stan/{post['model_name']}.stan"
    data_path = f"posterior_database/data/data/{post['data_name']}.json.zip"
    mean_path = f"{STATS}/mean_value/mean_value/{NAME}.json"
    msq_path = f"{STATS}/mean_squared_value/mean_squared_value/{NAME}.json"
    info_path = f"{STATS}/mean_value/info/{NAME}.info.json"
    with open(os.path.join(HERE, "model.stan"), "wb") as f:
        f.write(show(git_dir, model_path))
    with zipfile.ZipFile(io.BytesIO(show(git_dir, data_path))) as z:
        data = json.loads(z.read(z.namelist()[0]))
    with open(os.path.join(HERE, "data.json"), "w") as f:
        json.dump(data, f)
    mean, msq, full = (json.loads(show(git_dir, p)) for p in (mean_path, msq_path, info_path))
    diag = full["diagnostics"]
    n, chains = diag["ndraws"], diag["nchains"]
    names = diag["diagnostic_information"]["names"]
    params = {}
    for i, name in enumerate(mean["names"]):
        j, k = msq["names"].index(name), names.index(name)
        m1, m2 = mean["mean_value"][i], msq["mean_squared_value"][j]
        sd = math.sqrt((m2 - m1 * m1) * n / (n - 1))
        ess_bulk = diag["effective_sample_size_bulk"][k]
        params[zero_based(name)] = {"mean": m1, "sd": sd, "mcse_mean": mean["mcse_mean"][i],
                                    "mcse_sd": sd / math.sqrt(2 * ess_bulk), "ess_bulk": ess_bulk,
                                    "ess_tail": diag["effective_sample_size_tail"][k], "r_hat": diag["r_hat"][k]}
    info = {"inference": full.get("inference"), "checks_made": full.get("checks_made"),
            "rstan_version": (full.get("versions") or {}).get("rstan_version"), "added_date": full.get("added_date")}
    ref = {"posterior": NAME, "posteriordb_commit": commit,
           "sources": {"posterior": post_path, "model": model_path, "data": data_path, "mean": mean_path,
                       "mean_squared": msq_path, "diagnostics": info_path},
           "reference_info": info, "chains": chains, "draws": n // chains,
           "computed_with": "make_reference.py from posteriordb's summaries of the reference draws (not the draws): "
                            "mean and mcse_mean from mean_value; sd from mean_squared_value (ddof 1); ess_bulk, "
                            "ess_tail and r_hat from the draws' diagnostics; mcse_sd approximate, sd / sqrt(2 ess_bulk)",
           "params": params}
    with open(os.path.join(HERE, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    print(f"{NAME}: {len(params)} elements, {chains}x{n // chains} draws, "
          f"max R-hat {max(p['r_hat'] for p in params.values()):.4f}")


if __name__ == "__main__":
    main()
