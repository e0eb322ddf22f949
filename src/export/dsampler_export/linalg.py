# Pure-lax Cholesky and triangular solves, swapped in for jax's LAPACK/cuSOLVER lowerings while
# a bundle is exported: the bare PJRT plugins the C runtime loads have no handlers for those
# custom calls (lapack_spotrf_ffi, cusolver_potrf_ffi, lapack_strsm_ffi, ...).
#
# The swap happens at MLIR lowering, after differentiation and vmap have already produced their
# cholesky/triangular_solve primitives, so these functions only have to compute values (no
# derivative rules) and must accept any leading batch dimensions. They are meant for the small
# matrices of per-chain models (n up to a few hundred): one loop step per column or row.

import contextlib

import jax
import jax.numpy as jnp
from jax import lax
from jax._src.interpreters import mlir
from jax._src.lax import linalg as lax_linalg

PLATFORMS = ("cpu", "cuda")
# Matrices up to this size have their loops fully unrolled. A rolled XLA while loop costs a
# kernel launch and a predicate check per step, which dominates a small factorization on the
# GPU (a GP with n = 11, 65536 rows on an H200: 2.1-3.4 ms a logp_grad call unrolled, 3.6-3.7
# rolled); unrolled, compile time grows with n (CPU, n = 100 unrolled by 32: 13 s, rolled 1.6 s).
UNROLL_MAX_N = 16


def _unroll(n):
    return n if 1 <= n <= UNROLL_MAX_N else 1


def _real_only(x, what):
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise NotImplementedError(f"dsampler-export: complex {what} is not supported")


def cholesky(a):
    """Lower Cholesky factor of a[..., n, n], reading only its lower triangle.

    Rows whose matrix is not positive definite come back all NaN, as jax's LAPACK lowering
    returns them, so a failed factorization cannot pass for a finite log density."""
    _real_only(a, "cholesky")
    n = a.shape[-1]
    rows = jnp.arange(n)

    def column(j, l):
        # Columns j.. of l are still zero, so the full row product is the sum over k < j.
        lj = lax.dynamic_slice_in_dim(l, j, 1, axis=-2)            # [..., 1, n]: row j of l
        aj = lax.dynamic_slice_in_dim(a, j, 1, axis=-1)[..., 0]    # [..., n]: column j of a
        v = aj - jnp.sum(l * lj, axis=-1)                          # [..., n]
        d = jnp.sqrt(lax.dynamic_index_in_dim(v, j, axis=-1, keepdims=True))
        col = jnp.where(rows > j, v / d, jnp.where(rows == j, d, jnp.zeros_like(v)))
        return lax.dynamic_update_slice_in_dim(l, col[..., None], j, axis=-1)

    l = lax.fori_loop(0, n, column, jnp.zeros_like(a), unroll=_unroll(n))
    diag = jnp.diagonal(l, axis1=-2, axis2=-1)
    ok = jnp.all(diag > 0, axis=-1)          # False also for NaN pivots
    return jnp.where(ok[..., None, None], l, jnp.full_like(l, jnp.nan))


def _substitute(m, b, lower):
    """Solve m x = b for triangular m[..., k, k] (only its triangle read), b[..., k, r]."""
    k = m.shape[-1]
    keep = jnp.tril(jnp.ones((k, k), bool)) if lower else jnp.triu(jnp.ones((k, k), bool))
    # Zero the ignored triangle: its entries may be anything (even inf), and the row product
    # below runs over the whole row.
    m = jnp.where(keep, m, jnp.zeros_like(m))

    def row(t, x):
        i = t if lower else k - 1 - t
        mi = lax.dynamic_index_in_dim(m, i, axis=-2, keepdims=False)        # [..., k]
        bi = lax.dynamic_index_in_dim(b, i, axis=-2, keepdims=False)        # [..., r]
        # Rows of x not yet solved are zero, so this is the sum over the solved ones.
        s = jnp.sum(mi[..., :, None] * x, axis=-2)                           # [..., r]
        mii = lax.dynamic_index_in_dim(mi, i, axis=-1, keepdims=True)        # [..., 1]
        return lax.dynamic_update_index_in_dim(x, (bi - s) / mii, i, axis=-2)

    return lax.fori_loop(0, k, row, jnp.zeros_like(b), unroll=_unroll(k))


def triangular_solve(a, b, *, left_side=False, lower=False, transpose_a=False,
                     conjugate_a=False, unit_diagonal=False):
    """lax.linalg.triangular_solve's contract: op(a) x = b (left_side) or x op(a) = b,
    op(a) = a, a^T, conj(a) or a^H, batched over leading dimensions."""
    _real_only(a, "triangular_solve")
    del conjugate_a  # a is real
    if unit_diagonal:
        eye = jnp.eye(a.shape[-1], dtype=bool)
        a = jnp.where(eye, jnp.ones_like(a), a)
    m, m_lower = a, lower
    if transpose_a:
        m, m_lower = jnp.swapaxes(m, -1, -2), not m_lower
    if left_side:
        return _substitute(m, b, m_lower)
    # x m = b  <=>  m^T x^T = b^T
    xt = _substitute(jnp.swapaxes(m, -1, -2), jnp.swapaxes(b, -1, -2), not m_lower)
    return jnp.swapaxes(xt, -1, -2)


def _rules():
    return {
        lax_linalg.cholesky_p: mlir.lower_fun(cholesky, multiple_results=False),
        lax_linalg.triangular_solve_p: mlir.lower_fun(triangular_solve, multiple_results=False),
    }


@contextlib.contextmanager
def pure_lowerings(platforms=PLATFORMS):
    """Lower cholesky and triangular_solve through the functions above while inside."""
    table = mlir._platform_specific_lowerings
    saved = {(p, prim): table[p].get(prim) for p in platforms for prim in _rules()}
    # jax caches lowered computations; drop them on both sides so that neither the LAPACK nor
    # the pure form leaks across the switch.
    jax.clear_caches()
    try:
        for p in platforms:
            for prim, rule in _rules().items():
                mlir.register_lowering(prim, rule, platform=p)
        yield
    finally:
        for (p, prim), entry in saved.items():
            if entry is None:
                table[p].pop(prim, None)
            else:
                table[p][prim] = entry
        jax.clear_caches()
