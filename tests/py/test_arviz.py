"""Outputs open in ArviZ: arviz.from_netcdf(path, engine="h5netcdf") gives the posterior and
sample_stats groups with dims (chain, draw, x_dim_0), coordinates, and the values h5py reads."""
import arviz as az
import numpy as np

import dstest as t


def main():
    hmc = t.path("arviz_hmc.h5")
    t.run(3, "hmc", "--dim", 3, "--chains", 4, "--draws", 50, "--seed", 1, "--out", hmc, "--quiet")
    idata = az.from_netcdf(hmc, engine="h5netcdf")
    groups = set(idata.groups())
    t.check({"posterior", "sample_stats"} <= groups, f"hmc: groups {sorted(groups)}")
    post = idata.posterior
    t.check(dict(post["x"].sizes) == {"chain": 4, "draw": 50, "x_dim_0": 3}, f"hmc: posterior x sizes {dict(post['x'].sizes)}")
    t.check(np.array_equal(post["x"].values, t.read(hmc, "posterior/x")), "hmc: posterior values equal h5py's")
    t.check(np.array_equal(post["draw"].values, np.arange(50)), "hmc: draw coordinate 0..49")
    stats = idata.sample_stats
    for name in ("lp", "acceptance_rate", "step_size", "diverging", "energy", "n_steps"):
        t.check(name in stats and dict(stats[name].sizes) == {"chain": 4, "draw": 50}, f"hmc: sample_stats.{name} [chain, draw]")
    t.check(stats["diverging"].dtype == bool, f"hmc: diverging is boolean ({stats['diverging'].dtype})")
    t.check(post.attrs.get("inference_library") == "dsampler", f"hmc: attrs {dict(post.attrs)}")
    summary = az.summary(idata, var_names=["x"])
    t.check(summary.shape[0] == 3 and np.all(np.isfinite(summary["r_hat"])), "hmc: az.summary runs")

    svgd = t.path("arviz_svgd.h5")
    t.run(2, "svgd", "--dim", 2, "--particles", 30, "--iters", 5, "--ksd-every", 2, "--save-every", 2, "--out", svgd,
          "--quiet")
    idata = az.from_netcdf(svgd, engine="h5netcdf")
    t.check(dict(idata.posterior["x"].sizes) == {"chain": 1, "draw": 30, "x_dim_0": 2},
            f"svgd: particles as chain 1, draw 30: {dict(idata.posterior['x'].sizes)}")
    ksd, snapshots = idata["ksd"], idata["snapshots"]
    t.check(list(ksd["iteration"].values) == [0, 2, 4, 5] and dict(ksd["ksd"].sizes) == {"iteration": 4},
            f"svgd: ksd series over iterations {list(ksd['iteration'].values)}")
    t.check(dict(snapshots["x"].sizes) == {"particle": 30, "iteration": 3, "x_dim_0": 2} and
            list(snapshots["iteration"].values) == [0, 2, 4],
            f"svgd: snapshots {dict(snapshots['x'].sizes)} at iterations {list(snapshots['iteration'].values)}")
    last = snapshots["x"].sel(iteration=4).values
    t.check(last.shape == (30, 2) and np.all(np.isfinite(last)), "svgd: a snapshot selected by its iteration")
    t.finish("arviz")


if __name__ == "__main__":
    main()
