/* target.h: making the run's target from --target and --target-args: a built-in by name, a
 * user plugin as "plugin:path/to/lib.so" (target ABI version 1 or 2), a Stan model as
 * "stan:path/to/model.stan" (compiled into a version 2 plugin by stan_build.h), or a JAX
 * bundle as "jax:path/to/model.dsj" (jax/jax_target.h); and the
 * helpers for what version 2 adds (output variables, starts, float64 densities). */
#ifndef DSAMPLER_TARGET_LOAD_H
#define DSAMPLER_TARGET_LOAD_H

#include "backend.h"
#include "config.h"
#include "dsampler_target.h"
#include "target_args.h" /* target_args_get for the run's --data check */

/* Output variables a version 2 target may report (each is a dataset of the output). */
#define TARGET_MAX_OUTPUT_VARS 4096

/* What a target of dsampler's own (a JAX bundle's) offers beyond the plugin ABI, kept out of
 * dsampler_target so that the ABI's struct does not grow. */
typedef struct target_extra {
  /* Rows per call of constrain: 0, a few rows a call from several threads; positive, calls of
   * up to this many rows from one thread (each call has a fixed cost: a program's launch). */
  int64_t constrain_rows_per_call;
  /* HMC's leapfrog steps on the device in one call (backend.h's hmc_batch_t.leapfrog_cuda). */
  hmc_leapfrog_fn leapfrog_cuda;
  void *leapfrog_self;
} target_extra_t;

/* The entries of a plugin or Stan model that run under --call-timeout (target_deadline.h). */
typedef enum {
  TARGET_CALL_CREATE, TARGET_CALL_LOGP_GRAD, TARGET_CALL_LOGP_GRAD_CUDA, TARGET_CALL_LOGP_GRAD_F64,
  TARGET_CALL_CONSTRAIN, TARGET_CALL_INITIAL_POINT, TARGET_CALL_DESTROY, TARGET_CALL_COUNT
} target_call_t;

typedef struct target_handle {
  /* What the run calls. For a plugin or Stan model, its entries behind deadlines (self is this
   * handle); for a built-in, the built-in itself. */
  dsampler_target target;
  dsampler_target plugin; /* a plugin's own entries, as its create filled them */
  int watched;            /* target holds the deadline wrappers of plugin */
  void *library;  /* dlopen handle of a plugin, NULL for a built-in */
  char spec[512]; /* --target, for the messages a version 2 target reports */
  /* What each watched call is, as a deadline's message names it: "plugin libfoo.so: logp_grad". */
  char calls[TARGET_CALL_COUNT][320];
  /* A Stan model's compiled library in the cache, model-<hash>/<name>.so ("" otherwise): which
   * model a run was made with. */
  char stan_library[CONFIG_PATH_MAX];
  /* What dsampler's own JAX target offers beyond the plugin ABI (zero for every other target). */
  target_extra_t extra;
} target_handle_t;

/* Collective over comm. data_path is --data ("" when not given): a version 2 plugin receives
 * it as is, a built-in or version 1 plugin as data=<path> before its own args; dim is --dim
 * (0 when not given), likewise (dim=<d>); seed is --seed; device is the GPU ordinal where the
 * run's arrays live, -1 on the CPU (a JAX bundle runs its programs there). A "stan:" spec is compiled first (on
 * rank 0, or found in the cache). On success the target's dim is known and positive, and what
 * a version 2 target reports (its variables, their sizes) has been checked. The handle must
 * stay where it is until target_close: a version 2 target reports its errors through it, and a
 * plugin's calls go through it (each one watched by target_deadline.h). */
int target_open(const char *spec, const char *args, const char *data_path, int64_t dim, uint64_t seed, int device,
                MPI_Comm comm, target_handle_t *out);
void target_close(target_handle_t *handle);

/* A target's message as one line of at most size - 1 bytes: newline, carriage return and tab
 * written as \n, \r and \t, other control bytes as \xNN (a terminal is not told to do
 * anything), and " [...]" where it was cut. */
#define TARGET_MESSAGE_MAX 1536
void target_escape_message(const char *message, char *out, size_t size);

/* 1 when --target names a Stan model ("stan:..."). */
int target_is_stan(const char *spec);
/* 1 when --target names a JAX bundle ("jax:..."). */
int target_is_jax(const char *spec);
/* 1 when the target writes output variables (version 2, n_vars > 0): posterior then holds
 * them, and the unconstrained draws go to unconstrained_posterior. */
int target_has_outputs(const dsampler_target *t);
/* The key of the random numbers of chain `chain`'s kept draw `draw` in `phase` (0 warmup, 1
 * sampling): a function of (seed, chain, phase, draw) only. */
uint64_t target_output_key(uint64_t seed, int64_t chain, int phase, int64_t draw);
/* Output variables of rows x [n, dim] (float32, as the sampler keeps them) into out
 * [n, constrained_dim], keys [n] as target_output_key gives them; rows spread over OpenMP
 * threads, or in calls of rows_per_call from this thread when it is positive
 * (target_extra_t). DS_ERR_TARGET naming the target when it fails. */
int target_constrain(const dsampler_target *t, const float *x, int64_t n, const uint64_t *keys, double *out,
                     int64_t rows_per_call);
/* Values in output variable v: the product of its shape (1 for a scalar). */
int64_t target_var_size(const dsampler_target_var *v);
/* Lays out target_constrain's rows ([rows count, constrained_dim], row r count + slot) per
 * output variable, as the output's writes take them: variable v's values of row r, slot s at
 * values + rows capacity offset_v + (r capacity + s) size_v, with offset_v the sum of the sizes
 * before v; data[v] (n_vars) receives each variable's start. */
void target_unpack_outputs(const dsampler_target *t, const double *packed, int64_t rows, int64_t count,
                           int64_t capacity, double *values, const void **data);
/* Starts from the target (version 2 initial_point) for items [item_begin, + rows) into x
 * [rows, dim] (float32); item r starts from the point of item start_item(r) = item - item %
 * per_start (superchains share a start); with redo [rows] not NULL, only the rows it marks.
 * Returns DS_OK, or DS_ERR_TARGET. Rows spread over OpenMP threads. */
int target_initial_points(const dsampler_target *t, uint64_t seed, int64_t item_begin, int64_t rows,
                          int64_t per_start, const uint8_t *redo, float *x);

/* Minibatch gradients (SVGD --batch-size): the target's next evaluations use minibatch
 * `iteration` of batch_size data rows (0: all the data). Only data targets take one (the built-in
 * logistic); others refuse a positive batch_size with DS_ERR_INPUT naming --batch-size. */
int target_set_minibatch(const dsampler_target *t, int64_t batch_size, uint64_t seed, int64_t iteration);

#endif
