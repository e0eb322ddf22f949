# The dsampler-export command line. Refusals print one line, "dsampler-export: <message>", and
# exit with code 2; DSAMPLER_EXPORT_TRACEBACK=1 adds the traceback behind a refusal.

import argparse
import os
import sys
import traceback

EPILOG = """\
kinds:
  numpyro  NAME is a NumPyro model, called as NAME(**data) (the default without --init)
  jax      NAME is logdensity(params, **data) -> scalar on an unconstrained space; --init gives
           an example params dict (JSON name -> number/list, or .npz) (the default with --init)

Integer scalars in the data are baked into the programs; every other entry becomes a program
input (float32, float64 with --compute float64, or int32 for integer arrays) written to
OUT/data/.

--compute float64 computes the log density and its gradient in float64 (the data kept in
float64) from dsampler's float32 state, and hands them back in float32, as a Stan model's are:
for models whose arithmetic needs it (a Cholesky factor with a small jitter). It is the
default when the model's module enables jax_enable_x64. On a GPU float64 runs slower.

environment:
  DSAMPLER_EXPORT_TRACEBACK=1  print the traceback behind a refusal
"""


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="dsampler-export", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Export a NumPyro model or a JAX log density as a dsampler JAX bundle.")
    p.add_argument("source", metavar="MODULE.py:NAME", help="the model or log density")
    p.add_argument("--data", required=True, metavar="DATA.json", help="Stan-style JSON data")
    p.add_argument("--out", required=True, metavar="OUT.dsj", help="bundle directory to write")
    p.add_argument("--kind", choices=("numpyro", "jax"))
    p.add_argument("--init", metavar="INIT.json|.npz", help="example parameters (kind jax)")
    p.add_argument("--block-cpu", type=int, default=64, metavar="B",
                   help="rows per call of the cpu programs (default 64)")
    p.add_argument("--block-cuda", type=int, default=65536, metavar="B",
                   help="rows per call of the cuda programs (default 65536)")
    p.add_argument("--platforms", default="cpu,cuda", metavar="LIST",
                   help="comma-separated platforms to export for (default cpu,cuda)")
    p.add_argument("--compute", choices=("float32", "float64"),
                   help="the log density's arithmetic (default float32, or float64 where the "
                        "module enables jax_enable_x64)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # Exporting only traces and lowers: it needs no accelerator, and keeping jax on the CPU
    # spares a GPU node's memory (jax would otherwise preallocate most of it).
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    from .bundle import ExportError, export_bundle

    platforms = [p.strip() for p in args.platforms.split(",") if p.strip()]
    try:
        manifest = export_bundle(
            args.source, args.data, args.out, kind=args.kind, init=args.init,
            blocks={"cpu": args.block_cpu, "cuda": args.block_cuda}, platforms=platforms,
            compute=args.compute)
    except ExportError as err:
        if os.environ.get("DSAMPLER_EXPORT_TRACEBACK") == "1":
            traceback.print_exc()
        print(f"dsampler-export: {err}", file=sys.stderr)
        return 2
    print(f"dsampler-export: wrote {args.out} ({manifest['kind']}, dim {manifest['dim']}, "
          f"{manifest['constrained_dim']} constrained values, "
          f"platforms {', '.join(platforms)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
