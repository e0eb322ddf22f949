"""models: the test models of tests/plugin/model_*.c written again in numpy, their reference
posteriors in float64, and a ctypes view of the plugins' entry points. Shared by
tests/py/test_models.py and tests/bench/bench_models.py; needs numpy only."""
import ctypes
import os

import numpy as np

# --- eight schools, non-centred: x = [mu, log_tau, eta_1..8] ------------------------------------
SCHOOL_Y = np.array([28, 8, -3, 7, -1, 1, 18, 12], dtype=np.float64)
SCHOOL_SIGMA = np.array([15, 10, 16, 11, 9, 11, 10, 18], dtype=np.float64)
MU_SD, TAU_SCALE = 5.0, 5.0


def hier_logp(x):
    """log p of model_hier at rows x [n, 10], the same constants dropped as the plugin."""
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    mu, log_tau, eta = x[:, 0], x[:, 1], x[:, 2:]
    tau = np.exp(log_tau)
    theta = mu[:, None] + tau[:, None] * eta
    return (-0.5 * (mu / MU_SD) ** 2 - np.log1p((tau / TAU_SCALE) ** 2) + log_tau
            - 0.5 * (eta ** 2).sum(1) - 0.5 * (((SCHOOL_Y - theta) / SCHOOL_SIGMA) ** 2).sum(1))


def hier_reference():
    """Posterior means and sds of [mu, log_tau, eta_1..8], by quadrature over log_tau: given
    tau, y ~ N(0, diag(sigma^2 + tau^2) + 25 * 1 1') (mu integrated out, solved directly per grid
    point), and mu, eta are Gaussian given tau and y (conjugate formulas)."""
    log_tau = np.linspace(-30.0, 10.0, 20001)
    tau = np.exp(log_tau)
    var = SCHOOL_SIGMA ** 2 + tau[:, None] ** 2                       # [grid, J]
    cov = np.einsum("gj,jk->gjk", var, np.eye(8)) + MU_SD ** 2        # marginal covariance of y
    _, logdet = np.linalg.slogdet(cov)
    quad = np.einsum("j,gj->g", SCHOOL_Y, np.linalg.solve(cov, np.broadcast_to(SCHOOL_Y, var.shape)[..., None])[..., 0])
    log_post = -0.5 * (logdet + quad) - np.log1p((tau / TAU_SCALE) ** 2) + log_tau
    weight = np.exp(log_post - log_post.max())
    weight /= weight.sum()
    mu_precision = 1.0 / MU_SD ** 2 + (1.0 / var).sum(1)
    mu_mean = (SCHOOL_Y / var).sum(1) / mu_precision
    mu_var = 1.0 / mu_precision
    gain = tau[:, None] / var                                         # d eta_j / d (y_j - mu)
    eta_mean = gain * (SCHOOL_Y - mu_mean[:, None])
    eta_var = SCHOOL_SIGMA ** 2 / var + gain ** 2 * mu_var[:, None]
    cond_mean = np.column_stack([mu_mean, log_tau, eta_mean])
    cond_var = np.column_stack([mu_var, np.zeros_like(log_tau), eta_var])
    mean = weight @ cond_mean
    sd = np.sqrt(weight @ (cond_var + cond_mean ** 2) - mean ** 2)
    return mean, sd


# --- regression with tiny noise: x = [beta_0, beta_1, beta_2, log_sigma] ----------------------------
REG_ROWS, REG_COLS = 50, 3
REG_BETA_TRUE = np.array([8.0, -5.0, 3.0])
REG_SIGMA_TRUE = 1e-3


def regression_data():
    """The data of model_regression.c, from the same integer recipe (see that file)."""
    state = 20240607
    uniforms = []
    for _ in range(REG_ROWS * REG_COLS + 12 * REG_ROWS):
        state = (1664525 * state + 1013904223) % 2 ** 32
        uniforms.append((state >> 8) / 2.0 ** 24)
    uniforms = np.array(uniforms)
    X = (20.0 * uniforms[:REG_ROWS * REG_COLS] - 10.0).reshape(REG_ROWS, REG_COLS)
    z = uniforms[REG_ROWS * REG_COLS:].reshape(REG_ROWS, 12).sum(1) - 6.0
    return X, X @ REG_BETA_TRUE + REG_SIGMA_TRUE * z


def regression_logp(x):
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    X, y = regression_data()
    log_sigma = x[:, REG_COLS]
    rss = ((y[None, :] - x[:, :REG_COLS] @ X.T) ** 2).sum(1)
    return -REG_ROWS * log_sigma - 0.5 * rss * np.exp(-2.0 * log_sigma)


def regression_reference():
    """Flat prior on beta and log_sigma: beta | sigma ~ N(beta_hat, sigma^2 (X'X)^-1) and
    p(log_sigma | y) proportional to sigma^-(n-D) exp(-RSS / (2 sigma^2)), RSS at beta_hat.
    Moments of log_sigma and E[sigma^2] by quadrature over log_sigma; beta's mean is beta_hat,
    its variance E[sigma^2] diag((X'X)^-1)."""
    X, y = regression_data()
    xtx = X.T @ X
    beta_hat = np.linalg.solve(xtx, X.T @ y)
    rss = ((y - X @ beta_hat) ** 2).sum()
    dof = REG_ROWS - REG_COLS
    mode = 0.5 * np.log(rss / dof)
    log_sigma = np.linspace(mode - 3.0, mode + 3.0, 60001)            # sd of log_sigma ~ 0.1
    log_post = -dof * log_sigma - 0.5 * rss * np.exp(-2.0 * log_sigma)
    weight = np.exp(log_post - log_post.max())
    weight /= weight.sum()
    ls_mean = weight @ log_sigma
    ls_sd = np.sqrt(weight @ (log_sigma - ls_mean) ** 2)
    sigma2_mean = weight @ np.exp(2.0 * log_sigma)
    beta_sd = np.sqrt(sigma2_mean * np.diag(np.linalg.inv(xtx)))
    # E[sigma^2] has a closed form (inverse gamma): RSS / (n - D - 2); the grid must agree.
    assert abs(sigma2_mean / (rss / (dof - 2)) - 1) < 1e-9, (sigma2_mean, rss / (dof - 2))
    return np.append(beta_hat, ls_mean), np.append(beta_sd, ls_sd)


# --- correlated 2-D Gaussian ---------------------------------------------------------------------
CORR_SD = np.array([1.0, 10.0])
CORR_RHO = -0.99
CORR_COV = np.array([[1.0, CORR_RHO], [CORR_RHO, 1.0]]) * np.outer(CORR_SD, CORR_SD)


def corr_logp(x):
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    return -0.5 * np.einsum("ni,ni->n", x, np.linalg.solve(CORR_COV, x.T).T)


def corr_reference():
    return np.zeros(2), CORR_SD.copy()


MODELS = {
    # name: (dim, numpy log p, reference, parameter names)
    "model_hier": (10, hier_logp, hier_reference, ["mu", "log_tau"] + [f"eta_{j}" for j in range(1, 9)]),
    "model_regression": (4, regression_logp, regression_reference, ["beta_0", "beta_1", "beta_2", "log_sigma"]),
    "model_corr": (2, corr_logp, corr_reference, ["x_0", "x_1"]),
}


# --- the plugins through ctypes, without MPI ---------------------------------------------------------
LOGP_GRAD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_float), ctypes.c_int64,
                             ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_float))


class Target(ctypes.Structure):
    """struct dsampler_target of src/shared/dsampler_target.h, all of it (ABI version 2): a plugin built
    against that header clears the whole struct, so the caller's must be as large."""
    _fields_ = [("abi_version", ctypes.c_int), ("name", ctypes.c_char_p), ("var_name", ctypes.c_char_p),
                ("dim", ctypes.c_int64), ("self", ctypes.c_void_p), ("logp_grad", LOGP_GRAD),
                ("logp_grad_cuda", ctypes.c_void_p), ("destroy", ctypes.c_void_p),
                ("logp_grad_f64", ctypes.c_void_p), ("n_vars", ctypes.c_int), ("vars", ctypes.c_void_p),
                ("constrained_dim", ctypes.c_int64), ("constrain", ctypes.c_void_p), ("initial_point", ctypes.c_void_p)]


class Plugin:
    """A model plugin loaded with ctypes: its float32 ABI entry and its exported float64 density.
    The plugins' create does not touch MPI when MPI is not initialised, so NULL is a fine comm."""

    def __init__(self, plugin_dir, name):
        self.lib = ctypes.CDLL(os.path.join(plugin_dir, name + ".so"))
        self.target = Target()
        rc = self.lib.dsampler_target_create(b"", None, ctypes.byref(self.target))
        if rc != 0:
            raise RuntimeError(f"{name}: dsampler_target_create returned {rc}")
        self.dim = self.target.dim
        self.f64 = getattr(self.lib, f"{name}_logp_grad_f64")
        self.f64.restype = ctypes.c_double
        self.f64.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]

    def logp_grad_f64(self, x):
        x = np.ascontiguousarray(x, dtype=np.float64)
        grad = np.empty(self.dim)
        logp = self.f64(self.target.self, x.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
                        grad.ctypes.data_as(ctypes.POINTER(ctypes.c_double)))
        return logp, grad

    def logp_grad_f32(self, x):
        """The ABI's host entry on rows x [n, dim] float32."""
        x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
        n = x.shape[0]
        logp = np.empty(n, dtype=np.float32)
        grad = np.empty((n, self.dim), dtype=np.float32)
        f = ctypes.POINTER(ctypes.c_float)
        rc = self.target.logp_grad(self.target.self, x.ctypes.data_as(f), n, logp.ctypes.data_as(f),
                                   grad.ctypes.data_as(f))
        if rc != 0:
            raise RuntimeError(f"{self.target.name}: logp_grad returned {rc}")
        return logp, grad
