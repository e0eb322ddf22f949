"""dstest: shared helpers for dsampler's end-to-end tests: run the binary under mpiexec, write
--init files, read outputs. Paths and the launcher come from the environment set by CTest."""
import csv
import os
import shlex
import shutil
import subprocess
import sys

import h5py
import numpy as np

DSAMPLER = os.environ.get("DSAMPLER_BIN", "dsampler")
MPIEXEC = os.environ.get("MPIEXEC", "mpiexec")
NP_FLAG = os.environ.get("MPIEXEC_NUMPROC_FLAG", "-n")
PREFLAGS = shlex.split(os.environ.get("MPIEXEC_PREFLAGS", ""))
WORKDIR = os.environ.get("DSAMPLER_TEST_DIR", os.getcwd())
TIMEOUT = float(os.environ.get("DSAMPLER_TEST_TIMEOUT", "300"))

failures = []

# For runs that must be refused: when a rank exits non-zero, Open MPI's mpirun sends the job
# SIGTERM and waits odls_base_sigkill_timeout (1 s) before SIGKILL, which costs 1-2 s a refusal
# even when every rank has already exited. A refusal has nothing to save, so the tests of
# refusals end at once; no run that is stopped by a signal uses this.
REFUSAL_ENV = {"OMPI_MCA_odls_base_sigkill_timeout": "0"}


def refusal_env(env=None):
    """os.environ with env and REFUSAL_ENV on top, for a run that must be refused."""
    return {**os.environ, **(env or {}), **REFUSAL_ENV}


def path(name):
    os.makedirs(WORKDIR, exist_ok=True)
    return os.path.join(WORKDIR, name)


def run(np_ranks, *args, expect_ok=True, timeout=None, refusal=False):
    """Runs `dsampler args...` on np_ranks ranks; returns (returncode, stdout, stderr). With
    refusal, the run must be refused before work starts (see REFUSAL_ENV)."""
    cmd = [MPIEXEC, NP_FLAG, str(np_ranks), *PREFLAGS, DSAMPLER, *[str(a) for a in args]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout or TIMEOUT,
                          env=refusal_env() if refusal else None)
    if expect_ok and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.returncode, proc.stdout, proc.stderr


def write_init(name, x):
    p = path(name)
    with h5py.File(p, "w") as f:
        f.create_dataset("x", data=np.asarray(x, dtype=np.float32))
    return p


def read(p, dataset):
    with h5py.File(p, "r") as f:
        return f[dataset][...]


def read_csv(p):
    """A `dsampler summary --csv` file: (header, {variable: [numbers]})."""
    with open(p, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        return header, {r[0]: [float(v) for v in r[1:]] for r in reader}


def stan_toolchain_or_skip():
    """Exits 77 (skipped) where the Stan toolchain is not installed."""
    home = os.environ.get("DSAMPLER_STAN_HOME") or os.path.join(
        os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "dsampler", "stan", "httpstan")
    if not os.access(os.path.join(home, "stanc"), os.X_OK):
        print(f"skipped: no Stan toolchain at {home} (bash src/targets/stan/install-stan.sh installs it)")
        sys.exit(77)


def attr(p, key):
    """The output's root attribute key as text (None when absent)."""
    with h5py.File(p, "r") as f:
        value = f.attrs.get(key)
    return value.decode() if isinstance(value, bytes) else value


def datasets(p):
    """All datasets of the file as {name: array}."""
    out = {}
    with h5py.File(p, "r") as f:
        f.visititems(lambda name, obj: out.__setitem__(name, obj[...]) if isinstance(obj, h5py.Dataset) else None)
    return out


def check(condition, message):
    """Records a failed assertion; the test reports all of them before exiting."""
    status = "ok  " if condition else "FAIL"
    print(f"{status} {message}", flush=True)
    if not condition:
        failures.append(message)


def discard(*paths):
    """Removes a passed case's outputs and checkpoint folders, so that the suite's big files do not
    pile up on the disk it shares with the tests beside it; kept once any check has failed, for the
    evidence."""
    if failures:
        return
    for p in paths:
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.remove(p)


def finish(name):
    if failures:
        print(f"{name}: {len(failures)} check(s) failed")
        sys.exit(1)
    print(f"{name}: all checks passed")
    sys.exit(0)


def rel_err(got, ref):
    got = np.asarray(got, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    denom = np.linalg.norm(ref)
    return np.linalg.norm(got - ref) / (denom if denom > 0 else 1.0)


# --- an independent Philox4x32-10 (numpy, vectorised over counters) ---------------------------
M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)


def philox(c0, c1, c2, c3, k0, k1):
    c = [np.asarray(v, dtype=np.uint32).copy() for v in (c0, c1, c2, c3)]
    k0 = np.uint32(k0)
    k1 = np.uint32(k1)
    mask = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = M0 * c[0].astype(np.uint64)
        p1 = M1 * c[2].astype(np.uint64)
        hi0, lo0 = (p0 >> np.uint64(32)).astype(np.uint32), (p0 & mask).astype(np.uint32)
        hi1, lo1 = (p1 >> np.uint64(32)).astype(np.uint32), (p1 & mask).astype(np.uint32)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        with np.errstate(over="ignore"):
            k0 = np.uint32(k0 + W0)
            k1 = np.uint32(k1 + W1)
    return c


def words(seed, item, iteration, n_words):
    """Words 0..n_words-1 drawn for (seed, item, iteration): shape [len(item), n_words]."""
    item = np.asarray(item, dtype=np.uint64)
    blocks = (n_words + 3) // 4
    out = np.empty((item.size, blocks * 4), dtype=np.uint32)
    for b in range(blocks):
        w = philox(np.full(item.size, b), np.full(item.size, iteration),
                   (item & np.uint64(0xFFFFFFFF)).astype(np.uint32), (item >> np.uint64(32)).astype(np.uint32),
                   seed & 0xFFFFFFFF, seed >> 32)
        for lane in range(4):
            out[:, 4 * b + lane] = w[lane]
    return out[:, :n_words]


def uniform(w):
    return w.astype(np.float64) * 2.0 ** -32 + 2.0 ** -33


def hmc_momenta_and_uniform(seed, chains, iteration, dim):
    """Standard-normal momenta [chains, dim] and the accept uniform [chains], in float64."""
    pairs = (dim + 1) // 2
    w = words(seed, chains, iteration, 2 * pairs + 1)
    u1, u2 = uniform(w[:, 0:2 * pairs:2]), uniform(w[:, 1:2 * pairs:2])
    radius = np.sqrt(-2.0 * np.log(u1))
    z = np.empty((len(chains), 2 * pairs))
    z[:, 0::2] = radius * np.cos(2 * np.pi * u2)
    z[:, 1::2] = radius * np.sin(2 * np.pi * u2)
    return z[:, :dim], uniform(w[:, 2 * pairs])


# --- hostile-input helpers (test_robustness.py) -----------------------------------------------
def file_hash(p):
    """sha256 of a file's bytes, or None when it does not exist."""
    import hashlib
    if not os.path.exists(p):
        return None
    with open(p, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def error_lines(stderr):
    """dsampler's own error lines (mpirun's banners are not dsampler's)."""
    return [line for line in stderr.splitlines() if line.startswith("dsampler: error")]


def run_every_rank(np_ranks, *args, timeout=60, env=None, preexec_fn=None, refusal=False):
    """Runs `dsampler args...` with each rank's exit code recorded (Open MPI told not to end the
    job at the first non-zero exit, so every rank's own code is seen). Returns (mpirun's code,
    [code of rank 0, 1, ...] with None for a rank that recorded none, stdout, stderr); raises
    subprocess.TimeoutExpired on a hang."""
    import tempfile
    rc_dir = tempfile.mkdtemp(dir=path(""))
    wrapper = ('"$0" "$@"; code=$?; '
               f'echo $code > {shlex.quote(rc_dir)}/rc.${{OMPI_COMM_WORLD_RANK:-${{PMI_RANK:-0}}}}; exit $code')
    cmd = [MPIEXEC, "--mca", "orte_abort_on_non_zero_status", "0", NP_FLAG, str(np_ranks), *PREFLAGS,
           "sh", "-c", wrapper, DSAMPLER, *[str(a) for a in args]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=refusal_env(env) if refusal else {**os.environ, **(env or {})}, preexec_fn=preexec_fn)
    codes = []
    for r in range(np_ranks):
        p = os.path.join(rc_dir, f"rc.{r}")
        # A rank ended by MPI_Abort while its wrapper wrote the file leaves it empty: no code.
        text = open(p).read().strip() if os.path.exists(p) else ""
        codes.append(int(text) if text else None)
    # With the abort at the first non-zero exit off, mpirun's own code is 0 whatever the
    # ranks did; what a plain mpirun would return is the first non-zero rank's code.
    overall = proc.returncode or next((c for c in codes if c), 0)
    return overall, codes, proc.stdout, proc.stderr
