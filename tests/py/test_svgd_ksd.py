"""SVGD's kernel Stein discrepancy, IMQ kernel and snapshots against float64 numpy.

- The Stein kernel's closed forms (rbf and imq) equal its definition evaluated by central
  differences of the kernel itself, so the reference below is checked, not assumed.
- KSD^2 = (1/N^2) sum_ij u_p(x_i, x_j) of dsampler (--iters 0: the given particles) within 1e-6
  relative of float64, for the update's rbf and imq kernels and --ksd-kernel imq, odd and even N;
  bitwise equal on 1-4 ranks.
- A run with --ksd-every 1 --save-every 1: each snapshot is the particles the series' value at
  that iteration was computed from (within 1e-6), and the last snapshot is the posterior.
- `dsampler summary` of an SVGD output shows the last KSD and no chain diagnostics.
- One SVGD step with --kernel imq equals float64 phi within 1e-5 relative.
- KSD falls as SVGD converges on a shifted Gaussian; for particles stuck in one mode of
  mixture1d it stays well above that of exact draws from the mixture.
- Stopped at 5 iterations on 3 ranks and extended to 10 on 2: KSD series, snapshots and
  particles bitwise equal to one run of 10."""
import shutil

import numpy as np

import dstest as t

MEAN, SCALE = 0.5, 1.5


def stein_terms(x, s):
    diff = x[:, None, :] - x[None, :, :]
    D = (diff ** 2).sum(-1)
    A = ((s[:, None, :] - s[None, :, :]) * diff).sum(-1)
    return D, A, s @ s.T


def stein_matrix(x, s, kind, h, c2=1.0, beta=-0.5):
    """u_p(x_i, x_j) by the closed forms (svgd_kernel_math.h), float64."""
    d = x.shape[1]
    D, A, S = stein_terms(x, s)
    if kind == "rbf":
        k = np.exp(-D / (2 * h))
        return k * (S + A / h + d / h - D / h ** 2)
    q = c2 + D / h
    return q ** beta * S - 2 * beta / h * q ** (beta - 1) * (A + d) - 4 * beta * (beta - 1) * D / h ** 2 * q ** (beta - 2)


def stein_by_differences(x, s, kind, h, c2=1.0, beta=-0.5, eps=1e-4):
    """u_p from its definition s_x.s_y k + s_x.grad_y k + s_y.grad_x k + tr(grad_x grad_y k), the
    derivatives of k by central differences."""
    def k(a, b):
        dist = ((a - b) ** 2).sum()
        return np.exp(-dist / (2 * h)) if kind == "rbf" else (c2 + dist / h) ** beta

    n, d = x.shape
    u = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            a, b = x[i], x[j]
            grad_a, grad_b, trace = np.zeros(d), np.zeros(d), 0.0
            for l in range(d):
                e = np.zeros(d)
                e[l] = eps
                grad_a[l] = (k(a + e, b) - k(a - e, b)) / (2 * eps)
                grad_b[l] = (k(a, b + e) - k(a, b - e)) / (2 * eps)
                trace += (k(a + e, b + e) - k(a + e, b - e) - k(a - e, b + e) + k(a - e, b - e)) / (4 * eps ** 2)
            u[i, j] = s[i] @ s[j] * k(a, b) + s[i] @ grad_b + s[j] @ grad_a + trace
    return u


def score(x):
    return -(x.astype(np.float64) - MEAN) / SCALE ** 2


def gaussian(d):
    return ["--target", "gaussian", "--dim", d, "--target-args", f"mean={MEAN},scale={SCALE}"]


def ksd_run(ranks, x0, name, extra):
    init = t.write_init(f"ksd_{name}_init.h5", x0)
    out = t.path(f"ksd_{name}_r{ranks}.h5")
    t.run(ranks, "svgd", *gaussian(x0.shape[1]), "--particles", x0.shape[0], "--iters", 0, "--init", init, "--out", out,
          "--backend", "cpu", "--quiet", *extra)
    return t.read(out, "ksd/ksd_squared"), t.read(out, "ksd/bandwidth")


def check_formula(rng):
    x = rng.normal(size=(6, 3))
    s = rng.normal(size=(6, 3))
    for kind, h, c2, beta in (("rbf", 0.7, 1.0, -0.5), ("imq", 0.7, 1.0, -0.5), ("imq", 1.3, 2.25, -0.3)):
        closed = stein_matrix(x, s, kind, h, c2, beta)
        direct = stein_by_differences(x, s, kind, h, c2, beta)
        err = np.abs(closed - direct).max() / np.abs(direct).max()
        t.check(err < 1e-6, f"Stein kernel {kind} (h {h}, c2 {c2}, beta {beta}): closed form = definition by "
                            f"differences (max rel err {err:.2e} < 1e-6)")


def check_values(rng):
    configs = {"rbf": ([], "rbf", None), "imq": (["--kernel", "imq", "--imq-c", 1.5, "--imq-beta", -0.4], "imq", None),
               "ksd_imq": (["--ksd-kernel", "imq", "--imq-beta", -0.5], "imq", 1.0)}
    for n in (37, 40):
        for d in (1, 5):
            x0 = rng.normal(0.3, 1.2, size=(n, d)).astype(np.float32)
            for name, (extra, kind, fixed_h) in configs.items():
                c2 = 2.25 if name == "imq" else 1.0
                beta = -0.4 if name == "imq" else -0.5
                by_rank = {}
                for ranks in (1, 2, 3, 4) if d == 5 else (1, 3):
                    by_rank[ranks] = ksd_run(ranks, x0, f"{name}_{n}_{d}", extra)
                got, h = by_rank[1]
                t.check(fixed_h is None or h[-1] == fixed_h, f"{name}: KSD bandwidth {h[-1]} (expected {fixed_h})")
                x = x0.astype(np.float64)
                ref = stein_matrix(x, score(x0), kind, h[-1], c2, beta).mean()
                err = abs(got[-1] - ref) / abs(ref)
                t.check(err < 1e-6, f"KSD^2 {name}, N {n}, d {d}: {got[-1]:.9g} vs float64 {ref:.9g} "
                                    f"(rel err {err:.2e} < 1e-6)")
                same = all(v[0].tobytes() == got.tobytes() for v in by_rank.values())
                t.check(same, f"KSD^2 {name}, N {n}, d {d}: bitwise equal on ranks {sorted(by_rank)}")


def check_series():
    rng = np.random.default_rng(5)
    n, d = 50, 3
    x0 = rng.normal(-1.0, 1.0, size=(n, d)).astype(np.float32)
    init = t.write_init("ksd_series_init.h5", x0)
    out = t.path("ksd_series.h5")
    t.run(2, "svgd", *gaussian(d), "--particles", n, "--iters", 4, "--step-size", 0.3, "--init", init,
          "--ksd-every", 1, "--save-every", 1, "--out", out, "--backend", "cpu", "--quiet")
    iterations, ksd2, h = t.read(out, "ksd/iteration"), t.read(out, "ksd/ksd_squared"), t.read(out, "ksd/bandwidth")
    ksd = t.read(out, "ksd/ksd")
    snaps, snap_its = t.read(out, "snapshots/x"), t.read(out, "snapshots/iteration")
    t.check(list(iterations) == [0, 1, 2, 3, 4], f"ksd iterations {list(iterations)} = 0..4")
    t.check(list(snap_its) == [0, 1, 2, 3, 4] and snaps.shape == (n, 5, d),
            f"snapshots: iterations {list(snap_its)}, shape {snaps.shape} = ({n}, 5, {d})")
    t.check(np.array_equal(snaps[:, 0, :], x0), "snapshot 0 is the starting particles")
    t.check(snaps[:, 4, :].tobytes() == t.read(out, "posterior/x")[0].tobytes(), "the last snapshot is the posterior")
    t.check(np.allclose(ksd, np.sqrt(ksd2)), "ksd = sqrt(ksd_squared)")
    for e in range(5):
        x = snaps[:, e, :]
        ref = stein_matrix(x.astype(np.float64), score(x), "rbf", h[e]).mean()
        err = abs(ksd2[e] - ref) / abs(ref)
        t.check(err < 1e-6, f"series: KSD^2 after {e} iterations {ksd2[e]:.9g} vs float64 of the snapshot {ref:.9g} "
                            f"(rel err {err:.2e})")
    t.check(ksd2[4] < ksd2[0], f"series: KSD^2 falls over 4 steps ({ksd2[0]:.4g} -> {ksd2[4]:.4g})")
    _, text, _ = t.run(1, "summary", out)
    line = f"kernel Stein discrepancy: {ksd[4]:.4g} after 4 iterations"
    header = text.splitlines()[1].split()
    t.check(line in text and header == ["mean", "sd", "q5", "q50", "q95"],
            f"summary of an SVGD output: columns {header}, and '{line}' in it")


def imq_phi(x, h, c2, beta):
    n = x.shape[0]
    s = score(x)
    D = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    q = c2 + D / h
    k = q ** beta
    w = -2 * beta / h * q ** (beta - 1)
    return (k @ s + x * w.sum(1, keepdims=True) - w @ x) / n


def check_imq_step(rng):
    for n, d in ((7, 3), (300, 3), (64, 20)):
        x0 = rng.normal(0.0, 2.0, size=(n, d)).astype(np.float32)
        init = t.write_init(f"imq_step_{n}_{d}.h5", x0)
        out = t.path(f"imq_step_{n}_{d}_out.h5")
        t.run(3, "svgd", *gaussian(d), "--particles", n, "--iters", 1, "--step-size", 0.5, "--kernel", "imq",
              "--imq-c", 0.8, "--imq-beta", -0.6, "--init", init, "--out", out, "--backend", "cpu", "--quiet",
              "--ksd-every", 1)
        h = t.read(out, "ksd/bandwidth")[0]  # the update's bandwidth of iteration 0 (--ksd-kernel run)
        x = x0.astype(np.float64)
        ref = x + 0.5 * imq_phi(x, h, 0.64, -0.6)
        got = t.read(out, "posterior/x")[0]
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        t.check(err < 1e-5, f"imq step N {n} d {d}: rel err {err:.2e} < 1e-5 against float64 phi")


def check_convergence():
    out = t.path("ksd_converge.h5")
    t.run(2, "svgd", "--target", "gaussian", "--dim", 2, "--target-args", "mean=3", "--particles", 200, "--iters", 300,
          "--step-size", 0.3, "--ksd-every", 50, "--ksd-kernel", "imq", "--seed", 2,
          "--out", out, "--backend", "cpu", "--quiet")
    ksd = t.read(out, "ksd/ksd")
    t.check(ksd[-1] < ksd[0] / 5, f"KSD falls as SVGD converges: {ksd[0]:.4g} -> {ksd[-1]:.4g} (< 1/5 of the start)")
    t.check(all(b < a * 1.05 for a, b in zip(ksd, ksd[1:])), f"KSD does not rise along the run: {np.round(ksd, 4)}")


def check_stuck_mode():
    """The modes of mixture1d overlap enough for SVGD (sgd, step 0.1) started in the right mode to
    leak only slowly into the left: after 300 iterations its particles are still stuck, while
    the same run started from exact draws of the mixture keeps its weights."""
    rng = np.random.default_rng(11)
    n = 400
    stuck_init = t.write_init("ksd_stuck_init.h5", rng.normal(2.0, 1.0, size=(n, 1)).astype(np.float32))
    left = rng.uniform(size=n) < 1 / 3
    exact = np.where(left, rng.normal(-2.0, 1.0, size=n), rng.normal(2.0, 1.0, size=n))
    exact_init = t.write_init("ksd_exact_init.h5", exact[:, None].astype(np.float32))
    common = ["svgd", "--target", "mixture1d", "--dim", 1, "--particles", n, "--iters", 300, "--step-size", 0.1,
              "--ksd-kernel", "imq", "--backend", "cpu", "--quiet"]
    stuck_out, exact_out = t.path("ksd_stuck.h5"), t.path("ksd_exact.h5")
    t.run(2, *common, "--init", stuck_init, "--out", stuck_out)
    t.run(2, *common, "--init", exact_init, "--out", exact_out)
    stuck_left = (t.read(stuck_out, "posterior/x").ravel() < 0).mean()
    exact_left = (t.read(exact_out, "posterior/x").ravel() < 0).mean()
    stuck, good = t.read(stuck_out, "ksd/ksd")[-1], t.read(exact_out, "ksd/ksd")[-1]
    t.check(stuck_left < 0.15 and abs(exact_left - 1 / 3) < 0.06,
            f"mixture1d: {stuck_left:.3f} of the particles started in the right mode reached the left one (< 0.15), "
            f"{exact_left:.3f} of those started from exact draws are there (1/3)")
    t.check(stuck > 3 * good, f"mixture1d: KSD of the particles stuck in one mode {stuck:.4g} > 3 x that of the run "
                              f"started from exact draws {good:.4g}")


def check_extension_resume():
    args = ["svgd", *gaussian(4), "--particles", 90, "--step-size", 0.2, "--update", "adam", "--ksd-every", 2,
            "--save-every", 3, "--seed", 8, "--backend", "cpu", "--quiet"]
    full, part = t.path("ksd_resume_full.h5"), t.path("ksd_resume_part.h5")
    part_dir = t.path("ksd_resume_part.ckpt")
    shutil.rmtree(part_dir, ignore_errors=True)
    t.run(2, *args, "--iters", 10, "--out", full, "--checkpoint-dir", t.path("ksd_resume_full.ckpt"))
    t.run(3, *args, "--iters", 5, "--checkpoint-every", 5, "--out", part, "--checkpoint-dir", part_dir)
    t.run(2, "resume", part_dir, "--iters", 10, "--quiet")
    a, b = t.datasets(full), t.datasets(part)
    for name in ("posterior/x", "ksd/iteration", "ksd/ksd_squared", "ksd/bandwidth", "snapshots/x",
                 "snapshots/iteration"):
        t.check(name in a and name in b and a[name].shape == b[name].shape and a[name].tobytes() == b[name].tobytes(),
                f"resume: {name} after 5 iterations on 3 ranks, extended to 10 on 2, bitwise equal to one run")
    t.check(list(b["ksd/iteration"]) == [0, 2, 4, 6, 8, 10], f"resume: ksd iterations {list(b['ksd/iteration'])}")


def main():
    rng = np.random.default_rng(20261201)
    check_formula(rng)
    check_values(rng)
    check_series()
    check_imq_step(rng)
    check_convergence()
    check_stuck_mode()
    check_extension_resume()
    t.finish("svgd ksd")


if __name__ == "__main__":
    main()
