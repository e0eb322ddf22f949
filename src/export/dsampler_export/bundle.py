# Builds a dsampler JAX bundle: reads the data, asks numpyro_model or jax_fn for the row
# functions, exports them with jax.export for each platform and writes the programs, the data
# files and manifest.json (bundle format version 1: fixed block sizes, float32 rows, "highest"
# matmul precision, no custom calls, data as program inputs rather than constants). With
# compute="float64" the log density and its gradient are computed in float64 from the float32
# rows (the data kept in float64) and handed back in float32, as a Stan target's are.

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import itertools
import json
import math
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from . import __version__

FORMAT = "dsampler-jax-bundle"
FORMAT_VERSION = 1
NAME_RE = re.compile(r"^[A-Za-z0-9_.]+$")
INT32 = np.iinfo(np.int32)
# Stan's JSON spells the non-finite reals as strings.
SPECIAL_FLOATS = {"NaN": math.nan, "Inf": math.inf, "-Inf": -math.inf,
                  "Infinity": math.inf, "-Infinity": -math.inf}


class ExportError(Exception):
    """A refusal: printed as one line, exit code 2."""


def warn(message):
    print(f"dsampler-export: warning: {message}", file=sys.stderr)


def check_name(name, what):
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ExportError(f"{what} name {name!r} is not valid: use letters, digits, _ and . only")


@dataclasses.dataclass
class Model:
    """What a model kind hands to the exporter; logp and constrain work on one row."""
    kind: str
    coordinates: list      # [{"name", "shape", "offset", "size"}] in ravel_pytree order
    vars: list             # [{"name", "kind", "shape"}] in output order
    logp: object           # (x [D], *data) -> [] in the compute type (float32 unless float64)
    constrain: object      # (x [D], *data) -> [C], likewise
    x0: np.ndarray         # an initial point, [D]
    numpyro_version: str | None = None

    @property
    def dim(self):
        return sum(c["size"] for c in self.coordinates)

    @property
    def constrained_dim(self):
        return sum(math.prod(v["shape"]) for v in self.vars)


# ---------------------------------------------------------------- loading

def load_object(source):
    """MODULE.py:NAME (a file) or package.module:NAME (importable) -> the object."""
    module_ref, sep, name = source.rpartition(":")
    if not sep or not module_ref or not name:
        raise ExportError(f"expected MODULE.py:NAME, got {source!r}")
    if module_ref.endswith(".py") or os.path.sep in module_ref:
        path = Path(module_ref)
        if not path.is_file():
            raise ExportError(f"no such file: {module_ref}")
        # The model's own directory goes first so that its sibling imports resolve.
        sys.path.insert(0, str(path.resolve().parent))
        # A private module name: a model file called e.g. jax.py must not replace jax.
        modname = f"_dsampler_model_{path.stem}"
        spec = importlib.util.spec_from_file_location(modname, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[modname] = module
        with user_code(f"importing {module_ref}"):
            spec.loader.exec_module(module)
    else:
        with user_code(f"importing {module_ref}"):
            module = importlib.import_module(module_ref)
    if not hasattr(module, name):
        raise ExportError(f"{module_ref} has no attribute {name!r}")
    return getattr(module, name)


def _float_leaf(v, name):
    if isinstance(v, str):
        if v not in SPECIAL_FLOATS:
            raise ExportError(f"data {name!r}: string {v!r} is not a number")
        return SPECIAL_FLOATS[v]
    if v is None or isinstance(v, dict):
        raise ExportError(f"data {name!r}: {type(v).__name__} values are not supported")
    return v


def convert_data(raw, real=np.float32):
    """Stan-style JSON object -> (static ints, [(name, array)] program inputs, in file order).

    Integer scalars stay Python ints so that the model may use them as sizes; everything else
    becomes an int32 array or a real one (of type `real`) fed to the programs at run time."""
    if not isinstance(raw, dict):
        raise ExportError("the data file must hold a JSON object")
    static, inputs = {}, []
    for name, value in raw.items():
        check_name(name, "data")
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, int):
            static[name] = value
            continue
        try:
            arr = np.array(value)
        except ValueError:
            raise ExportError(f"data {name!r} is a ragged nested list") from None
        if arr.dtype == object or arr.dtype.kind in "US":
            try:
                arr = np.array(np.vectorize(lambda v: _float_leaf(v, name), otypes=[float])(arr))
            except ValueError:
                raise ExportError(f"data {name!r} is a ragged nested list") from None
        if arr.dtype.kind in "biu" and arr.size:
            if arr.min() < INT32.min or arr.max() > INT32.max:
                raise ExportError(f"data {name!r} does not fit int32")
            arr = arr.astype(np.int32)
        elif arr.dtype.kind in "f" or arr.size == 0:
            arr = arr.astype(real)
        else:
            raise ExportError(f"data {name!r} has unsupported type {arr.dtype}")
        inputs.append((name, arr.copy(order="C")))  # (ascontiguousarray makes scalars 1-d)
    return static, inputs


def check_arguments(fn, keys, what, skip_first=False):
    """Refuse data keys fn cannot take, and required arguments the data lack."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return  # no signature to check against; the call will tell
    if skip_first:
        if not params or params[0].kind not in (params[0].POSITIONAL_ONLY,
                                                params[0].POSITIONAL_OR_KEYWORD):
            raise ExportError(f"{what} must take the parameters as its first positional argument")
        first, params = params[0], params[1:]
        if first.name in keys:
            raise ExportError(f"data key {first.name!r} is {what}'s parameter argument")
    named = {p.name: p for p in params
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        for key in keys:
            if key not in named:
                raise ExportError(f"data key {key!r} is not an argument of {what}")
    for p in params:
        if p.default is p.empty and p.name not in keys and p.kind in (
                p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY, p.POSITIONAL_ONLY):
            raise ExportError(f"argument {p.name!r} of {what} has no default and is not in the data")


def coordinates_of(pytree):
    """Coordinates in ravel_pytree order (the order jax flattens the pytree in)."""
    import jax
    coords, offset = [], 0
    for path, leaf in jax.tree_util.tree_flatten_with_path(pytree)[0]:
        name = ".".join(str(getattr(k, "key", getattr(k, "idx", k))) for k in path)
        shape = [int(s) for s in np.shape(leaf)]
        size = math.prod(shape)
        coords.append({"name": name, "shape": shape, "offset": offset, "size": size})
        offset += size
    return coords


# ---------------------------------------------------------------- export

def first_line(err):
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


@contextlib.contextmanager
def user_code(what, data_names=()):
    """Turn exceptions raised in the user's code into one refusal line. jax's 'concrete value
    needed' errors, raised while the data are tracers, say which input was at fault."""
    import jax
    try:
        yield
    except ExportError:
        raise
    except (jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError,
            jax.errors.TracerBoolConversionError, jax.errors.TracerArrayConversionError,
            jax.errors.NonConcreteBooleanIndexError) as err:
        # Every wrapper here takes (x, *data), so jax names the culprit x or <varargs>[i].
        m = re.search(r"argument (\w+)(?:\[(\d+)\])?", str(err))
        if m and m.group(2) is not None and int(m.group(2)) < len(data_names):
            cause = f"the values of data {data_names[int(m.group(2))]!r}"
        elif m and m.group(1) == "x":
            cause = "parameter values (use jnp.where or lax.cond, not Python if/int())"
        else:
            cause = "traced values"
        raise ExportError(f"the model's shapes or control flow depend on {cause}; a bundle "
                          "needs static shapes (sizes as integer scalars in the data)") from err
    except Exception as err:
        raise ExportError(f"{what} failed: {first_line(err)}") from err


CUSTOM_CALL_RE = re.compile(r'custom_call\s*@([\w.$-]+)|call_target_name\s*=\s*"([^"]+)"')


# What users call that ends in each LAPACK/cuSOLVER routine, for the refusal message.
CUSTOM_CALL_HINTS = {"getrf": "LU: jnp.linalg.solve, inv, det", "syevd": "eigh",
                     "gesdd": "SVD", "gesvd": "SVD", "geqrf": "QR", "orgqr": "QR"}


def custom_call_targets(mlir_text):
    return sorted({a or b for a, b in CUSTOM_CALL_RE.findall(mlir_text)})


def _describe_calls(calls):
    out = []
    for call in calls:
        hint = next((h for k, h in CUSTOM_CALL_HINTS.items() if k in call), None)
        out.append(f"{call} ({hint})" if hint else call)
    return ", ".join(out)


def float32_rows(model):
    """The model computed in float64 behind float32 rows: x widened on the way in, log p and
    the constrained values rounded on the way out (the gradient follows: its cotangent is
    widened, the gradient rounded)."""
    import jax.numpy as jnp

    def logp(x, *data):
        return model.logp(x.astype(jnp.float64), *data).astype(jnp.float32)

    def constrain(x, *data):
        return model.constrain(x.astype(jnp.float64), *data).astype(jnp.float32)

    return dataclasses.replace(model, logp=logp, constrain=constrain, x0=np.asarray(model.x0, np.float32))


def row_programs(model, n_data):
    """The two block programs of the spec, vmapped over rows."""
    import jax
    axes = (0,) + (None,) * n_data
    value_and_grad = jax.vmap(jax.value_and_grad(model.logp), in_axes=axes)

    def logp_grad(x, lp_buf, grad_buf, *data):
        del lp_buf, grad_buf  # donated only, so that the outputs may land in them
        return value_and_grad(x, *data)

    def constrain(x, *data):
        return jax.vmap(model.constrain, in_axes=axes)(x, *data)

    return logp_grad, constrain


def export_programs(model, inputs, platforms, blocks, trajectory_layout="aos", trajectory_unroll="auto"):
    """-> {program: {platform: (bytes, block, inputs)}}, refusing custom calls."""
    import jax
    from jax import export
    from . import linalg

    f32 = np.float32
    data_specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for _, a in inputs]
    data_names = [n for n, _ in inputs]
    d, c = model.dim, model.constrained_dim
    logp_grad, constrain = row_programs(model, len(inputs))
    out = {"logp_grad": {}, "constrain": {}}
    with jax.default_matmul_precision("highest"), linalg.pure_lowerings():
        for p in platforms:
            b = blocks[p]
            x = jax.ShapeDtypeStruct((b, d), f32)
            programs = {
                "logp_grad": (jax.jit(logp_grad, donate_argnums=(1, 2), keep_unused=True),
                              [x, jax.ShapeDtypeStruct((b,), f32), x] + data_specs,
                              [(b,), (b, d)]),
                "constrain": (jax.jit(constrain, keep_unused=True), [x] + data_specs, [(b, c)]),
            }
            if p == "cuda":
                # HMC's whole trajectory for the GPU (dsampler_target.h's leapfrog_cuda), for
                # the metric shared by every chain and for one per chain.
                from .trajectory import TRAJECTORY_STEPS, trajectory_program, unroll_steps
                tb = blocks.get("trajectory", b)
                rows = jax.ShapeDtypeStruct((tb, d), f32)
                unroll = {"0": False, "1": True}.get(trajectory_unroll)
                if unroll is None:
                    unroll = unroll_steps(model.logp, jax.ShapeDtypeStruct((d,), f32), data_specs)
                for (name, shared), steps in itertools.product(
                        (("trajectory_shared", True), ("trajectory_chain", False)), TRAJECTORY_STEPS):
                    metric = jax.ShapeDtypeStruct((d,) if shared else (tb, d), f32)
                    fn = trajectory_program(model.logp, len(inputs), shared, steps, trajectory_layout, unroll)
                    programs[f"{name}_{steps}"] = (
                        jax.jit(fn, donate_argnums=(0, 1, 2, 3), keep_unused=True),
                        [rows, rows, rows, jax.ShapeDtypeStruct((tb,), f32), jax.ShapeDtypeStruct((tb,), f32),
                         metric, jax.ShapeDtypeStruct((), np.int32)] + data_specs,
                        [(tb, d), (tb, d), (tb, d), (tb,)])
            for prog, (fn, specs, want) in programs.items():
                with user_code(f"exporting {prog} for {p}", data_names):
                    exp = export.export(fn, platforms=[p])(*specs)
                got = [tuple(a.shape) for a in exp.out_avals]
                if got != want or any(a.dtype != f32 for a in exp.out_avals):
                    raise ExportError(f"{prog} gives {exp.out_avals}, expected float32 {want}")
                if len(exp.module_kept_var_idx) != len(specs):
                    raise ExportError(f"{prog}: jax dropped unused inputs despite keep_unused")
                calls = custom_call_targets(exp.mlir_module())
                if calls:
                    raise ExportError(
                        f"{prog} for {p} needs custom calls the PJRT runtime cannot run: "
                        f"{_describe_calls(calls)}; of the linear algebra only Cholesky and "
                        "triangular solves are rewritten")
                # The inputs as exported, for the runtime to hold the data against.
                signature = [{"dtype": str(a.dtype), "shape": list(a.shape)} for a in exp.in_avals]
                out.setdefault(prog, {})[p] = (exp.mlir_module_serialized, want[0][0], signature)
    return out


def check_initial_point(model, inputs):
    """Warn (only) when the log density or its gradient is not finite at model.x0."""
    import jax
    with jax.default_matmul_precision("highest"), \
            user_code("evaluating the log density", [n for n, _ in inputs]):
        lp, g = jax.jit(jax.value_and_grad(model.logp))(model.x0, *[a for _, a in inputs])
    lp, g = float(lp), np.asarray(g)
    if not np.isfinite(lp) or not np.all(np.isfinite(g)):
        warn(f"the log density is not finite at the initial point (log p = {lp}, "
             f"{int(np.sum(~np.isfinite(g)))} non-finite gradient entries)")


# ---------------------------------------------------------------- writing

def _sha256(data):
    return hashlib.sha256(data).hexdigest()


def _replace_dir(tmp, out):
    """Move the finished bundle into place; never remove a directory that is not a bundle."""
    if out.exists():
        if not (out / "manifest.json").is_file():
            raise ExportError(f"{out} exists and is not a bundle; not overwriting it")
        shutil.rmtree(out)
    os.replace(tmp, out)


def write_bundle(out, model, source, static, inputs, programs, compute="float32"):
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would hide the bundle from other users
    try:
        (tmp / "data").mkdir()
        data = []
        for name, arr in inputs:
            raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes(order="C")
            (tmp / "data" / f"{name}.bin").write_bytes(raw)
            data.append({"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape),
                         "file": f"data/{name}.bin", "sha256": _sha256(raw)})
        progs = {}
        for prog, per_platform in programs.items():
            progs[prog] = {}
            for p, (blob, block, signature) in per_platform.items():
                fname = f"{prog}.{p}.mlir"
                (tmp / fname).write_bytes(blob)
                progs[prog][p] = {"file": fname, "block": block, "sha256": _sha256(blob), "inputs": signature}
        import jax
        manifest = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "jax_version": jax.__version__,
            "numpyro_version": model.numpyro_version,
            "exporter_version": __version__,
            "source": source,
            "kind": model.kind,
            "dim": model.dim,
            "dtype": "float32",
            "compute": compute,
            "precision": "highest",
            "coordinates": model.coordinates,
            "vars": model.vars,
            "constrained_dim": model.constrained_dim,
            "data": data,
            "static": static,
            "programs": progs,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        _replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return manifest


# ---------------------------------------------------------------- entry point

def load_init(path):
    """--init: a JSON object or an .npz of name -> array, as float32 (the bundle's dtype)."""
    path = Path(path)
    try:
        if path.suffix == ".npz":
            with np.load(path) as z:
                raw = {k: z[k] for k in z.files}
        else:
            raw = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ExportError(f"cannot read --init {path}: {err}") from None
    if not isinstance(raw, dict):
        raise ExportError(f"{path}: --init must hold a JSON object of name -> number/list")
    init = {}
    for name, value in raw.items():
        check_name(name, "parameter")
        try:
            arr = np.asarray(value, dtype=np.float32)
        except (TypeError, ValueError):
            raise ExportError(f"--init {name!r} is not a number or a (rectangular) list") from None
        init[name] = arr
    if not init:
        raise ExportError(f"{path}: --init has no parameters")
    return init


def export_bundle(source, data_path, out, kind=None, init=None,
                  blocks=None, platforms=("cpu", "cuda"), compute=None):
    """Export source (MODULE.py:NAME) with the data at data_path into the bundle directory out.

    kind: "numpyro" or "jax"; by default "jax" when init is given, else "numpyro".
    compute: "float32" or "float64", the arithmetic of the log density and its gradient (the
    rows stay float32); by default float64 when the caller has jax_enable_x64 on or the model's
    module turns it on as it is imported (a package module imported earlier in the same process
    is not imported again: its setting counts only through the caller's).
    Returns the manifest (a dict). The caller's jax_enable_x64 is put back afterwards."""
    import jax
    if compute not in (None, "float32", "float64"):
        raise ExportError(f"unknown compute type {compute!r} (float32, float64)")
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", False)
    try:
        return _export_bundle(source, data_path, out, kind, init, blocks, platforms, compute, x64)
    finally:
        jax.config.update("jax_enable_x64", x64)


def _export_bundle(source, data_path, out, kind, init, blocks, platforms, compute, caller_x64):
    import jax
    blocks = {p: int(b) for p, b in {"cpu": 64, "cuda": 65536, **(blocks or {})}.items()}
    blocks.setdefault("trajectory", blocks["cuda"])
    platforms = list(dict.fromkeys(platforms))
    if not platforms:
        raise ExportError("no platform to export for (cpu, cuda)")
    for p in platforms:
        if p not in ("cpu", "cuda"):
            raise ExportError(f"unknown platform {p!r} (cpu, cuda)")
        if blocks[p] < 1:
            raise ExportError(f"block size for {p} must be >= 1")
    kind = kind or ("jax" if init is not None else "numpyro")

    try:
        raw = json.loads(Path(data_path).read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ExportError(f"cannot read data {data_path}: {err}") from None
    fn = load_object(source)
    if not callable(fn):
        raise ExportError(f"{source} is not callable")
    wants_x64 = caller_x64 or jax.config.jax_enable_x64
    if compute is None:
        compute = "float64" if wants_x64 else "float32"
    elif compute == "float32" and wants_x64:
        warn("the model's module enabled float64 (jax_enable_x64); computing in float32 as --compute asks")
    jax.config.update("jax_enable_x64", compute == "float64")
    real = np.float64 if compute == "float64" else np.float32
    static, inputs = convert_data(raw, real)

    if kind == "numpyro":
        if init is not None:
            raise ExportError("--init is for --kind jax (NumPyro models initialize themselves)")
        from . import numpyro_model
        check_arguments(fn, list(raw), "the model")
        model = numpyro_model.build(fn, static, inputs, real)
    elif kind == "jax":
        if init is None:
            raise ExportError("--kind jax needs --init (an example parameter pytree)")
        from . import jax_fn
        check_arguments(fn, list(raw), "the log density", skip_first=True)
        model = jax_fn.build(fn, static, inputs, load_init(init), real)
    else:
        raise ExportError(f"unknown kind {kind!r} (numpyro, jax)")
    if compute == "float64":
        model = float32_rows(model)

    check_initial_point(model, inputs)
    programs = export_programs(model, inputs, platforms, blocks,
                               os.environ.get("DSAMPLER_EXPORT_TRAJECTORY_LAYOUT", "aos"),
                               os.environ.get("DSAMPLER_EXPORT_TRAJECTORY_UNROLL", "auto"))
    return write_bundle(out, model, source, static, inputs, programs, compute)
