"""One SVGD step from a given --init equals a direct float64 evaluation of DESIGN.md's formulas
(D as a full N x N matrix, the lower median by sorting, K, phi, the update) within 1e-5
relative: ||x_new - x_ref|| / ||x_ref||. Adam also over three steps (its moments and bias
corrections carried from step to step)."""
import numpy as np

import dstest as t


def reference_phi(x, bandwidth=None):
    n = x.shape[0]
    score = -x  # N(0, I)
    diff = x[:, None, :] - x[None, :, :]
    dist = (diff ** 2).sum(-1)
    if bandwidth is None:
        m = np.sort(dist.ravel())[(n * n - 1) // 2]  # torch.median's lower median
        h = max(m, 1e-5) / max(np.log(n), 1.0)
    else:
        h = bandwidth
    k = np.exp(-dist / (2 * h))
    return (k @ score + (x * k.sum(1, keepdims=True) - k @ x) / h) / n


def reference_adam(x, step, iters):
    """Adam (beta1 0.9, beta2 0.999, eps 1e-8, bias-corrected) ascending phi, in float64."""
    x = x.astype(np.float64)
    m, v = np.zeros_like(x), np.zeros_like(x)
    for t in range(1, iters + 1):
        phi = reference_phi(x)
        m = 0.9 * m + 0.1 * phi
        v = 0.999 * v + 0.001 * phi ** 2
        x = x + step * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.999 ** t)) + 1e-8)
    return x


def reference_step(x, step, update="sgd", bandwidth=None):
    x = x.astype(np.float64)
    phi = reference_phi(x, bandwidth)
    if update == "sgd":
        return x + step * phi
    g = phi ** 2  # adagrad, first iteration
    return x + step * phi / (1e-6 + np.sqrt(g))


def main():
    rng = np.random.default_rng(20261129)
    tol = 1e-5
    cases = [(n, d) for n in (1, 2, 7, 1000) for d in (1, 3, 64)]
    for n, d in cases:
        x0 = rng.normal(1.0, 2.0, size=(n, d)).astype(np.float32)
        init = t.write_init(f"svgd_step_init_{n}_{d}.h5", x0)
        out = t.path(f"svgd_step_{n}_{d}.h5")
        ranks = 3 if n >= 3 else 2
        t.run(ranks, "svgd", "--dim", d, "--particles", n, "--iters", 1, "--step-size", 0.05, "--init", init,
              "--out", out, "--quiet", "--backend", "cpu")
        got = t.read(out, "posterior/x")[0]
        err = t.rel_err(got, reference_step(x0, 0.05))
        t.check(err <= tol, f"sgd step N={n} d={d} on {ranks} ranks: rel err {err:.2e} <= {tol:g}")
    # adagrad and a fixed bandwidth, once each
    x0 = rng.normal(0.0, 1.5, size=(200, 5)).astype(np.float32)
    init = t.write_init("svgd_step_init_adagrad.h5", x0)
    for extra, ref in ((["--update", "adagrad"], reference_step(x0, 0.05, "adagrad")),
                       (["--bandwidth", "0.7"], reference_step(x0, 0.05, bandwidth=0.7))):
        out = t.path("svgd_step_variant.h5")
        t.run(2, "svgd", "--dim", 5, "--particles", 200, "--iters", 1, "--step-size", 0.05, "--init", init,
              "--out", out, "--quiet", "--backend", "cpu", *extra)
        err = t.rel_err(t.read(out, "posterior/x")[0], ref)
        t.check(err <= tol, f"step with {' '.join(extra)}: rel err {err:.2e} <= {tol:g}")
    for iters in (1, 3):
        out = t.path(f"svgd_step_adam_{iters}.h5")
        t.run(3, "svgd", "--dim", 5, "--particles", 200, "--iters", iters, "--step-size", 0.05, "--init", init,
              "--out", out, "--quiet", "--backend", "cpu", "--update", "adam")
        err = t.rel_err(t.read(out, "posterior/x")[0], reference_adam(x0, 0.05, iters))
        t.check(err <= tol, f"adam, {iters} step(s) on 3 ranks: rel err {err:.2e} <= {tol:g}")
    t.finish("svgd_step")


if __name__ == "__main__":
    main()
