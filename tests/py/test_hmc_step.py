"""One HMC iteration equals a float64 reference of DESIGN.md's leapfrog and accept rule, on the
same momenta and uniforms (drawn here by an independent numpy Philox4x32-10 + Box-Muller)."""
import numpy as np

import dstest as t


def reference(x0, seed, eps, steps, mean=0.0, scale=1.0):
    x0 = x0.astype(np.float64)
    chains, dim = x0.shape

    def logp_grad(q):
        c = (q - mean) / scale
        return -0.5 * (c ** 2).sum(1), -(q - mean) / scale ** 2

    z, u = dstest_draws(seed, chains, dim)
    p = z.copy()
    lp0, g = logp_grad(x0)
    h0 = -lp0 + 0.5 * (p ** 2).sum(1)
    q = x0.copy()
    p = p + 0.5 * eps * g
    for step in range(steps - 1):
        q = q + eps * p
        _, g = logp_grad(q)
        p = p + eps * g
    q = q + eps * p
    lp1, g = logp_grad(q)
    p = p + 0.5 * eps * g
    h1 = -lp1 + 0.5 * (p ** 2).sum(1)
    log_u = np.log(np.maximum(u, 1e-10))
    accept = log_u < h0 - h1
    x1 = np.where(accept[:, None], q, x0)
    return x1, accept, np.minimum(1.0, np.exp(h0 - h1)), np.where(accept, h1, h0), np.where(accept, lp1, lp0), log_u - (h0 - h1)


def dstest_draws(seed, chains, dim):
    return t.hmc_momenta_and_uniform(seed, np.arange(chains), 0, dim)


def main():
    rng = np.random.default_rng(7)
    for chains, dim, eps, steps, args in ((64, 5, 0.45, 10, ""), (33, 64, 0.12, 7, ""),
                                          (40, 3, 1.7, 4, "mean=1.5,scale=2")):
        mean, scale = (1.5, 2.0) if args else (0.0, 1.0)
        x0 = rng.normal(mean, 1.3 * scale, size=(chains, dim)).astype(np.float32)
        init = t.write_init(f"hmc_step_init_{dim}.h5", x0)
        out = t.path(f"hmc_step_{dim}.h5")
        seed = 123456789012345
        extra = ["--target-args", args] if args else []
        t.run(3, "hmc", "--dim", dim, "--chains", chains, "--warmup", 0, "--jitter", 0, "--draws", 1, "--steps", steps, "--step-size", eps,
              "--seed", seed, "--init", init, "--out", out, "--quiet", "--backend", "cpu", *extra)
        x1, accept, accept_prob, energy, lp, margin = reference(x0, seed, eps, steps, mean, scale)
        got = t.read(out, "posterior/x")[:, 0, :]
        got_accept = t.read(out, "sample_stats/acceptance_rate")[:, 0]
        # A decision can differ from float64 only where log u is within rounding of H0 - H1.
        decided = np.abs(margin) > 1e-4
        moved = np.any(got != x0, axis=1)
        t.check(np.array_equal(moved[decided], accept[decided]),
                f"dim={dim}: accept decisions match on all {decided.sum()} clear-cut chains "
                f"({accept.sum()} accepted, {(~accept).sum()} rejected)")
        err = t.rel_err(got[decided], x1[decided])
        t.check(err <= 1e-5, f"dim={dim}: positions rel err {err:.2e} <= 1e-5")
        err = np.max(np.abs(got_accept - accept_prob) / np.maximum(accept_prob, 1e-3))
        t.check(err <= 1e-4, f"dim={dim}: acceptance_rate rel err {err:.2e} <= 1e-4")
        got_energy = t.read(out, "sample_stats/energy")[:, 0]
        err = t.rel_err(got_energy[decided], energy[decided])
        t.check(err <= 1e-5, f"dim={dim}: energy rel err {err:.2e} <= 1e-5")
        err = t.rel_err(t.read(out, "sample_stats/lp")[:, 0][decided], lp[decided])
        t.check(err <= 1e-5, f"dim={dim}: lp rel err {err:.2e} <= 1e-5")
        t.check(0 < accept.sum() < chains or dim == 64, f"dim={dim}: the case exercises both accept and reject")
    t.finish("hmc_step")


if __name__ == "__main__":
    main()
