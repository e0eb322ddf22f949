/* jax_bundle.h: the JAX target's state (jax_target.c) and the reading of its bundle
 * (jax_bundle.c): the manifest, the data inputs, the programs and the PJRT plugin. Internal to
 * src/targets. */
#ifndef DSAMPLER_JAX_BUNDLE_H
#define DSAMPLER_JAX_BUNDLE_H

#include <json-c/json.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>

#include "jax_target.h"
#include "pjrt.h"

#define JAX_BUNDLE_FORMAT "dsampler-jax-bundle"
#define JAX_BUNDLE_VERSION 1
#define JAX_MAX_DATA 256
#define JAX_PATH_MAX 4096
/* Host memory that the CPU plugin views must be aligned (XLA's CPU buffers are). */
#define JAX_ALIGN 64

/* One data input of the programs: its values on the host and, for a GPU client, on the device,
 * and the buffer every call passes (never donated). */
typedef struct {
  char name[128];
  pjrt_element_t type;
  int rank;
  int64_t dims[DSAMPLER_TARGET_MAX_RANK];
  size_t bytes;
  void *host, *device;
  PJRT_Buffer *buffer;
} jax_data_t;

/* A program and the rows it takes at once. */
typedef struct {
  pjrt_program_t *program;
  int64_t block;
} jax_program_t;

/* A trajectory program of `steps` leapfrog steps: its code until it is first run. */
#define JAX_TRAJECTORY_MAX 8
typedef struct {
  int steps;
  jax_program_t program;
  void *code;
  size_t size;
  char label[96];
} jax_trajectory_t;

typedef struct {
  char what[JAX_PATH_MAX + 32]; /* "--target jax:PATH", as messages name the input */
  char name[256];               /* the target's name: jax:<bundle folder's name> */
  pjrt_runtime_t *runtime;
  int on_gpu;
  int64_t dim, constrained_dim;
  jax_program_t logp_grad, constrain;
  /* HMC's trajectory (GPU only, optional), [0] for the metric shared by all chains, [1] for one
   * per chain: programs of 1, 2, 4, ... steps, compiled when first used. */
  jax_trajectory_t trajectory[2][JAX_TRAJECTORY_MAX];
  int n_trajectory[2];
  int n_data;
  jax_data_t data[JAX_MAX_DATA];
  int n_vars;
  dsampler_target_var *vars;
  /* GPU scratch for a padded block and for host calls, one call at a time (the lock). */
  pthread_mutex_t lock;
  float *scratch_x, *scratch_lp, *scratch_grad, *scratch_out;
  float *scratch_p, *scratch_eps, *scratch_inv; /* a trajectory's padded block */
  int32_t *first_device[2];                     /* int32 1 and 0: does a call begin the trajectory */
  /* What the trajectory calls cost around their programs (DSAMPLER_JAX_STATS=1 prints them when
   * the target closes): program runs, outputs XLA put elsewhere than the donated input (each
   * then copied back), and blocks staged through the scratch (padded or unaligned rows). */
  int64_t stat_runs, stat_moved_outputs, stat_moved_bytes, stat_staged_blocks;
  /* Host seconds in the trajectory calls: the wait for the sampler's stream, making and freeing
   * the views, the programs' run (dispatch to completion), and the call in all. */
  double stat_sync_s, stat_views_s, stat_run_s, stat_call_s, stat_compile_s;
  /* Trajectories ordered on the device (GPU with PJRT's stream extension, unless
   * DSAMPLER_JAX_STREAM_ORDER=0): the views are defined on PJRT's stream once it reaches the
   * sampler's work, the sampler's stream waits on the outputs, and the host waits for neither.
   * The buffers of a call are freed at the next call (or at close), once the mark recorded
   * after them is passed. */
  int stream_order;
  intptr_t ready_stream;
  PJRT_Buffer **retired;
  unsigned char *retired_output; /* 1 where a retired buffer is a program's output */
  int n_retired, retired_capacity;
  void *retired_mark;
} jax_target_t;

/* Zeroed host memory at JAX_ALIGN (NULL where out of memory); free() frees it. */
void *jax_aligned_zeroed(size_t bytes);

/* folder/manifest.json, checked (format, version, dtype) with dim and constrained_dim read into
 * jax; *out is the manifest (json_object_put it, also on failure). */
int jax_read_manifest(jax_target_t *jax, const char *folder, json_object **out);
/* The output variables (manifest "vars"). */
int jax_read_vars(jax_target_t *jax, json_object *manifest);
/* The data inputs, each checked against its shape, dtype and SHA-256. */
int jax_read_data(jax_target_t *jax, const char *folder, json_object *manifest);
/* Reads and compiles programs.NAME.<platform>. */
int jax_read_program(jax_target_t *jax, const char *folder, json_object *manifest, const char *name,
                     jax_program_t *out);
/* The trajectory programs the bundle has, read now and compiled when first used. */
int jax_read_trajectories(jax_target_t *jax, const char *folder, json_object *manifest);
/* The PJRT plugin's path, the same on every rank of comm. */
int jax_find_plugin(const jax_target_t *jax, const char *args, MPI_Comm comm, char *path, size_t size);

#endif
