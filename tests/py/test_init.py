"""Starts as Stan's initialisation makes them: a drawn start whose log density or gradient is
not finite is drawn again, up to 100 draws, draw a of item i keyed by (seed, i, a).

The target (tests/plugin/init_region.so) is N(0, I) in dimension 3 with log p = -inf where
x0 > 1 and a NaN gradient where x1 < -1.5, so about 34% of the first draws cannot be used.
- HMC: after one step of 1e-30 the positions are the starts; they are, on 1 and 3 ranks, the
  first usable draw of an independent Philox (draw a from blocks a of (seed, chain,
  RNG_ITERATION_INIT)), and some chains needed several draws.
- SVGD particles start the same way (one step of 1e-30).
- No start anywhere (nowhere=1): one error naming the chains and the 100 draws, every rank ends.
- A given start (--init) is never drawn again: a bad row is an error naming it."""
import os

import numpy as np

import dstest as t

PLUGIN = "plugin:" + os.path.join(os.environ["DSAMPLER_PLUGIN_DIR"], "init_region.so")
RNG_ITERATION_INIT = 0xFFFFFFFF
DIM = 3


def reference_starts(seed, items):
    """The first usable draw of each item, float32 as the sampler computes it, and how many
    draws each took."""
    starts = np.empty((items, DIM), dtype=np.float32)
    draws = np.zeros(items, dtype=int)
    ids = np.arange(items, dtype=np.uint64)
    open_rows = np.ones(items, dtype=bool)
    for attempt in range(100):
        w = t.philox(np.full(items, attempt), np.full(items, RNG_ITERATION_INIT),
                     (ids & np.uint64(0xFFFFFFFF)).astype(np.uint32), (ids >> np.uint64(32)).astype(np.uint32),
                     seed & 0xFFFFFFFF, seed >> 32)
        u = np.stack([w[k].astype(np.float32) * np.float32(2.3283064e-10) + np.float32(2.3283064e-10 / 2.0)
                      for k in range(DIM)], axis=1).astype(np.float32)
        x = (np.float32(-2.0) + np.float32(4.0) * u).astype(np.float32)
        good = (x[:, 0] <= 1.0) & (x[:, 1] >= -1.5)
        take = open_rows & good
        starts[take] = x[take]
        draws[take] = attempt + 1
        open_rows &= ~good
        if not open_rows.any():
            break
    return starts, draws


def test_hmc_starts():
    seed, chains = 11, 40
    ref, draws = reference_starts(seed, chains)
    t.check((draws > 1).sum() >= 8 and draws.max() >= 3,
            f"the target forces redraws: {(draws > 1).sum()} of {chains} chains need more than one draw, "
            f"at most {draws.max()}")
    tiny = ("--target", PLUGIN, "--warmup", 0, "--draws", 1, "--steps", 1, "--step-size", "1e-30", "--adapt",
            "none", "--seed", seed, "--chains", chains, "--quiet", "--backend", "cpu")
    for ranks in (1, 3):
        out = t.path(f"init_hmc_{ranks}.h5")
        t.run(ranks, "hmc", *tiny, "--out", out)
        q = t.read(out, "posterior/x")[:, 0, :]
        # tol: a step of 1e-30 moves nothing a float32 can hold near |x| > 1e-6; the starts
        # themselves are the same float32 operations: equal bit for bit.
        t.check(np.array_equal(q, ref), f"HMC on {ranks} rank(s): every chain starts at the first usable draw of "
                                        f"an independent Philox ({chains} chains)")


def test_svgd_starts():
    seed, particles = 5, 30
    ref, draws = reference_starts(seed, particles)
    out = t.path("init_svgd.h5")
    t.run(2, "svgd", "--target", PLUGIN, "--particles", particles, "--iters", 1, "--step-size", "1e-30",
          "--seed", seed, "--quiet", "--backend", "cpu", "--out", out)
    x = t.read(out, "posterior/x")[0]
    t.check(np.array_equal(x, ref) and (draws > 1).any(),
            f"SVGD: every particle starts at its first usable draw ({(draws > 1).sum()} redrawn)")


def test_no_start():
    out = t.path("init_nowhere.h5")
    _, codes, _, stderr = t.run_every_rank(3, "hmc", "--target", PLUGIN, "--target-args", "nowhere=1", "--chains", 20,
                                     "--out", out, "--quiet", "--backend", "cpu", timeout=120)
    lines = t.error_lines(stderr)
    t.check(all(c != 0 for c in codes) and len(lines) == 1 and "chains (0, 1, 2, 3, 4, 5, 6, 7, ...)" in lines[0]
            and "20 chains" in lines[0] and "after 100 draws" in lines[0] and "log p is -inf" in lines[0],
            f"no usable start: every rank ends ({codes}), one message naming the chains and the draws: {lines}")


def test_given_start_not_redrawn():
    x = np.zeros((4, DIM), dtype=np.float32)
    x[2, 0] = 1.5  # log p = -inf there
    init = t.write_init("init_bad_row.h5", x)
    out = t.path("init_given.h5")
    rc, _, stderr = t.run(2, "hmc", "--target", PLUGIN, "--chains", 4, "--init", init, "--out", out, "--quiet",
                          "--backend", "cpu", expect_ok=False, timeout=60)
    lines = t.error_lines(stderr)
    t.check(rc != 0 and len(lines) == 1 and "chain 2" in lines[0] and "--init" in lines[0],
            f"a given start is not drawn again: a bad row is one error naming chain 2 and --init: {lines}")


if __name__ == "__main__":
    test_hmc_starts()
    test_svgd_starts()
    test_no_start()
    test_given_start_not_redrawn()
    t.finish("init")
