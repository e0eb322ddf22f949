# dsampler-export: turns a NumPyro model or a plain JAX log density into a dsampler JAX bundle
# (StableHLO programs + data + manifest.json) that `dsampler --target jax:BUNDLE` runs through
# the PJRT C API, with no Python at run time.

__version__ = "0.1.0"

from .bundle import ExportError, export_bundle  # noqa: E402  (after __version__: bundle reads it)

__all__ = ["ExportError", "export_bundle", "__version__"]
