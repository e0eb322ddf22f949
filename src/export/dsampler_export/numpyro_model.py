# NumPyro models -> the row functions of a bundle. The unconstrained space is NumPyro's own
# (initialize_model's z, flattened by ravel_pytree), so log p is -potential_energy with its
# bijector Jacobians, and constrain is constrain_fn's values: what NumPyro's MCMC would report.

import numpy as np

from .bundle import ExportError, Model, check_name, coordinates_of, first_line, user_code, warn


def _is_discrete_latent(site):
    if site["type"] != "sample" or site["is_observed"]:
        return False
    support = getattr(site["fn"], "support", None)
    return bool(getattr(support, "is_discrete", False) or site.get("infer", {}).get("enumerate"))


def build(model, static, inputs, real=np.float32):
    import jax
    import jax.numpy as jnp
    import numpyro
    from jax.flatten_util import ravel_pytree
    from numpyro import handlers
    from numpyro.infer.initialization import init_to_uniform
    from numpyro.infer.util import (constrain_fn, initialize_model, potential_energy,
                                    unconstrain_fn)

    names = [n for n, _ in inputs]

    def kwargs(arrays):
        # Rebuilt from the program inputs on every call, so the data stay inputs, not constants.
        return {**static, **dict(zip(names, arrays))}

    concrete = [jnp.asarray(a) for _, a in inputs]
    # The first trace takes each latent site's value from init_to_uniform rather than a draw:
    # improper priors (ImproperUniform, Stan's flat priors) cannot be sampled.
    with user_code("running the model", names), numpyro.validation_enabled(False):
        tr = handlers.trace(handlers.substitute(handlers.seed(model, 0), substitute_fn=init_to_uniform)
                            ).get_trace(**kwargs(concrete))

    for name, site in tr.items():
        if site["type"] in ("sample", "deterministic", "param"):
            check_name(name, "site")
        if _is_discrete_latent(site):
            raise ExportError(
                f"site {name!r} is a discrete latent variable ({type(site['fn']).__name__}); "
                "dsampler samples continuous parameters only: marginalize it out")
    if not any(s["type"] == "sample" and not s["is_observed"] for s in tr.values()):
        raise ExportError("the model has no latent sample sites (for a plain JAX log density "
                          "use --kind jax with --init)")

    with user_code("initializing the model", names):
        try:
            z = initialize_model(jax.random.PRNGKey(0), model,
                                 model_kwargs=kwargs(concrete)).param_info.z
        except RuntimeError as err:
            # initialize_model found no point with a finite log density; the layout is still
            # known from a prior draw, and dsampler picks its own initial points anyway.
            warn(f"NumPyro found no valid initial point ({first_line(err)}); using a prior draw")
            latent = {k: s["value"] for k, s in tr.items()
                      if s["type"] == "sample" and not s["is_observed"]}
            z = unconstrain_fn(model, (), kwargs(concrete), latent)

    z = {k: jnp.asarray(v, real) for k, v in z.items()}
    x0, unravel = ravel_pytree(z)
    coordinates = coordinates_of(z)

    # NumPyro validates distribution arguments when it builds them (on by default). Traced,
    # the checks compute nothing that is used, but they stay in the program: a covariance
    # matrix's positive_definite check alone leaves an eigh, a LAPACK custom call.
    def logp(x, *arrays):
        with numpyro.validation_enabled(False):
            return -potential_energy(model, (), kwargs(arrays), unravel(x))

    def constrained(x, *arrays):
        with numpyro.validation_enabled(False):
            return constrain_fn(model, (), kwargs(arrays), unravel(x),
                                return_deterministic=True)

    # Output order: latent sites as the model declares them, then its deterministic sites.
    with user_code("constraining the initial point", names):
        shapes = jax.eval_shape(constrained, x0, *concrete)
    order = [k for k in tr if k in z] + [k for k, s in tr.items() if s["type"] == "deterministic"]
    missing = [k for k in order if k not in shapes]
    if missing or len(order) != len(shapes):
        raise ExportError(f"the model's sites change between runs ({', '.join(missing)})")
    variables = [{"name": k, "kind": "parameter" if k in z else "transformed",
                  "shape": [int(s) for s in shapes[k].shape]} for k in order]

    def constrain(x, *arrays):
        values = constrained(x, *arrays)
        return jnp.concatenate([jnp.ravel(values[k]).astype(real) for k in order])

    return Model(kind="numpyro", coordinates=coordinates, vars=variables, logp=logp,
                 constrain=constrain, x0=np.asarray(x0), numpyro_version=numpyro.__version__)
