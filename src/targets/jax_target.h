/* jax_target.h: a target from a JAX bundle (`--target jax:MODEL.dsj`), a NumPyro model or JAX
 * log density exported by dsampler-export (src/export/) as StableHLO programs and run through
 * a PJRT plugin: XLA's CPU plugin for the CPU backend, the CUDA plugin of the user's jax[cuda]
 * install for the CUDA backend. The bundle's format is in README.md ("Your own model"). */
#ifndef DSAMPLER_JAX_TARGET_H
#define DSAMPLER_JAX_TARGET_H

#include <stdint.h>

#include "dsampler_target.h"
#include "target.h"

/* Collective over comm (rank 0 looks for the plugin when none is named; every rank then
 * compiles the programs on its own client). bundle is the path after "jax:"; args are
 * --target-args (plugin=PATH names the PJRT plugin; the environment's DSAMPLER_PJRT_PLUGIN does
 * too); device is the GPU ordinal where the run's arrays live, -1 for the CPU backend; dim is
 * --dim (0: not given). Fills a version 2 target (logp_grad, logp_grad_cuda on a GPU, the
 * model's output variables and constrain) and what it offers beyond the plugin ABI (extra: the
 * rows per constrain call, the GPU trajectory). A failure is DS_ERR_INPUT, naming the input. */
int jax_target_create(const char *bundle, const char *args, const char *data_path, int device, MPI_Comm comm,
                      dsampler_target *out, target_extra_t *extra);

/* Where the bundle's format says a PJRT plugin lives in a Python install, for messages. */
#define JAX_PLUGIN_HINT_GPU "pip install \"jax[cuda13]\" (or jax[cuda12])"
#define JAX_PLUGIN_HINT_CPU "pip install lammps-jax-pjrt-cpu (or xla-cpu-pjrt)"

#endif
