# Plain JAX log densities -> the row functions of a bundle. The function already lives on an
# unconstrained space, so the coordinates are the example pytree's leaves (ravel_pytree order)
# and constrain just hands x back, leaf by leaf.

import numpy as np

from .bundle import ExportError, Model, coordinates_of, user_code


def build(logdensity, static, inputs, init, real=np.float32):
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree

    names = [n for n, _ in inputs]
    x0, unravel = ravel_pytree({k: jnp.asarray(v, real) for k, v in init.items()})
    coordinates = coordinates_of(init)

    def logp(x, *arrays):
        return jnp.asarray(logdensity(unravel(x), **static, **dict(zip(names, arrays))), real)

    with user_code("calling the log density", names):
        out = jax.eval_shape(logp, x0, *[jnp.asarray(a) for _, a in inputs])
    if out.shape != ():
        raise ExportError(f"the log density must return a scalar, got shape {out.shape}")

    variables = [{"name": c["name"], "kind": "parameter", "shape": c["shape"]}
                 for c in coordinates]

    def constrain(x, *arrays):
        del arrays  # identity: the vars are the coordinates, in the same order
        return x

    return Model(kind="jax", coordinates=coordinates, vars=variables, logp=logp,
                 constrain=constrain, x0=np.asarray(x0))
