/* dsampler_target.h: the C ABI between dsampler and a target density, used by the built-in
 * models and by user plugins alike. A plugin is a shared library exporting
 * dsampler_target_create_v2() (ABI version 2) or dsampler_target_create() (version 1, still
 * loaded); this header is all it needs.
 *
 * Conventions: x is row-major [n, dim] on the unconstrained scale; logp is [n]; grad is
 * [n, dim] and receives d log p / dx. log p may omit constants (it must include any Jacobian
 * of a change of variables: dsampler samples x). A call returns 0 on success; on failure
 * non-zero, and the run stops with the target's name and, in version 2, the message the target
 * reported. logp_grad is called on host memory in float32; logp_grad_cuda, if not NULL, on
 * device memory in the given cudaStream_t; logp_grad_f64 (version 2) on host memory in float64.
 *
 * Versions: a plugin built against this header clears and fills the whole struct below, so it
 * runs on a dsampler of this version or later (one speaking version 1 only would refuse it, or,
 * by its version 1 entry, see the struct overrun); a version 1 plugin, built against that
 * header, runs here unchanged.
 *
 * Threads (the contract every entry below keeps): the CPU backend calls logp_grad,
 * logp_grad_f64, constrain and initial_point from several OpenMP threads at once, with the
 * same self and distinct rows. Keep no scratch space in self without a lock (use the stack,
 * or per-thread storage: C11 _Thread_local, C++ thread_local); self is read-only to them.
 * Each row's result must depend on that row alone (and, for constrain and initial_point, on
 * the key or seed given), never on n or on the other rows: the draws then do not change with
 * the number of ranks or threads. dim must be the same on every rank. Report a failure by
 * returning non-zero, never by exit() (the other ranks would wait for this one), and make no
 * MPI calls from any entry but create. */
#ifndef DSAMPLER_TARGET_H
#define DSAMPLER_TARGET_H

/* A C++ plugin needs MPI's C interface only: without the C++ bindings it does not have to be
 * linked with libmpi_cxx. */
#if defined(__cplusplus) && !defined(OMPI_SKIP_MPICXX)
#define OMPI_SKIP_MPICXX 1
#endif
#if defined(__cplusplus) && !defined(MPICH_SKIP_MPICXX)
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSAMPLER_TARGET_ABI_VERSION 2

/* What an output variable is, as in a Stan program's blocks. */
enum {
  DSAMPLER_VAR_PARAMETER = 0,   /* a parameter, constrained */
  DSAMPLER_VAR_TRANSFORMED = 1, /* a transformed parameter */
  DSAMPLER_VAR_GENERATED = 2    /* a generated quantity */
};

/* An output variable (version 2): written as posterior/<name> [chain, draw, shape...] with
 * axes <name>_dim_0, <name>_dim_1, ... At most DSAMPLER_TARGET_MAX_RANK axes. */
#define DSAMPLER_TARGET_MAX_RANK 8
typedef struct dsampler_target_var {
  const char *name;
  int kind;             /* DSAMPLER_VAR_* */
  int rank;             /* 0: a scalar */
  int64_t shape[DSAMPLER_TARGET_MAX_RANK];
} dsampler_target_var;

typedef struct dsampler_target {
  /* ---- version 1 ---- */
  int abi_version;      /* 1 or 2: DSAMPLER_TARGET_ABI_VERSION for a plugin built against this header */
  const char *name;     /* e.g. "gaussian" */
  const char *var_name; /* the unconstrained variable's name in the output, e.g. "x" */
  int64_t dim;          /* unconstrained dimension */
  void *self;
  int (*logp_grad)(void *self, const float *x, int64_t n, float *logp, float *grad);
  int (*logp_grad_cuda)(void *self, const float *x, int64_t n, float *logp, float *grad,
                        void *stream);
  void (*destroy)(void *self);

  /* ---- version 2: every field optional (zero: absent). A version 1 plugin leaves them zero
   * (dsampler clears the whole struct before create). ---- */

  /* Log density and gradient in float64, x widened exactly from dsampler's float32 state. With
   * it, the CPU backend keeps log p in float64 for HMC's acceptance test, so a log density of
   * 1e7 does not lose its last digits to float32 (whose spacing there is 1). logp_grad (the
   * float32 entry, still required: SVGD and the CUDA backend take it) should round this one. */
  int (*logp_grad_f64)(void *self, const double *x, int64_t n, double *logp, double *grad);

  /* The output variables, in order: with them, posterior holds these instead of the
   * unconstrained draws, which move to group unconstrained_posterior. constrained_dim is the
   * sum of the variables' sizes (products of their shapes; 1 for a scalar). */
  int n_vars;
  const dsampler_target_var *vars;
  int64_t constrained_dim;
  /* Writes the output variables of rows x [n, dim] (unconstrained) into out
   * [n, constrained_dim]: each row the variables one after another, each in C (row-major)
   * order of its shape. keys [n] seed any random numbers a row needs (Stan's generated
   * quantities): dsampler derives them from --seed, the chain and the draw, so the same run
   * gives the same output on any rank count and after a resume. A value that cannot be
   * computed may be NaN (returning 0); non-zero stops the run. Required with n_vars > 0. */
  int (*constrain)(void *self, const double *x, int64_t n, const uint64_t *keys, double *out);

  /* A start for item (chain or particle) `item`: x [dim] unconstrained, a function of (seed,
   * item) alone. Used unless --init is given; without it items start uniform in (-2, 2). */
  int (*initial_point)(void *self, uint64_t seed, int64_t item, double *x);

} dsampler_target;

/* What dsampler gives a version 2 plugin's create. It lives only during the call: copy what
 * you keep (report_error and its context stay valid until destroy). */
typedef struct dsampler_target_host {
  int abi_version;        /* the version dsampler speaks: DSAMPLER_TARGET_ABI_VERSION */
  const char *args;       /* --target-args, "key=value,..." ("" when none) */
  const char *data_path;  /* --data ("" when none): any file name, commas included */
  int64_t dim;            /* --dim, 0 when not given */
  uint64_t seed;          /* --seed: for random numbers drawn while the target is made (Stan's
                           * transformed data), the same on every rank */
  MPI_Comm comm;          /* the run's communicator, for reading data collectively */
  /* Says why create or a call failed, in one line (copied; the first report of a failure is
   * kept). Safe from any thread. Call it, then return non-zero. */
  void (*report_error)(void *context, const char *message);
  void *context;
} dsampler_target_host;

/* The plugin entry points. Version 2: fill *out (abi_version 2) and return 0, or report_error
 * and return non-zero. Every rank calls it with the same host values. */
typedef int (*dsampler_target_create_v2_fn)(const dsampler_target_host *host, dsampler_target *out);
int dsampler_target_create_v2(const dsampler_target_host *host, dsampler_target *out);

/* Version 1. args is "key=value,..." : the user's --target-args, preceded by "dim=<d>" when
 * --dim was given and "data=<file>" when --data was (a file name with a comma is refused for
 * these plugins). comm is the run's communicator (for reading data collectively); every rank
 * calls this with the same args. */
typedef int (*dsampler_target_create_fn)(const char *args, MPI_Comm comm, dsampler_target *out);
int dsampler_target_create(const char *args, MPI_Comm comm, dsampler_target *out);

#ifdef __cplusplus
}
#endif
#endif
