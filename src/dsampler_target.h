/* dsampler_target.h: the C ABI between dsampler and a target density, used by the built-in
 * models and by user plugins alike. A plugin is a shared library exporting
 * dsampler_target_create(); this header is all it needs.
 *
 * Conventions: x is row-major [n, dim] float32; logp is [n]; grad is [n, dim] and receives
 * d log p / dx. log p may omit constants. A call returns 0 on success; on failure non-zero,
 * and the run stops with the target's name in the message. logp_grad is called on host
 * memory; logp_grad_cuda, if not NULL, on device memory in the given cudaStream_t.
 *
 * Threads: the CPU backend calls logp_grad from several OpenMP threads at once, with the same
 * self and distinct rows: keep no scratch space in self without a lock (use the stack or
 * per-thread buffers). dim must be the same on every rank. Report a failure by returning
 * non-zero, never by exit() (the other ranks would wait for this one), and make no MPI calls
 * from logp_grad. */
#ifndef DSAMPLER_TARGET_H
#define DSAMPLER_TARGET_H

#include <mpi.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSAMPLER_TARGET_ABI_VERSION 1

typedef struct dsampler_target {
  int abi_version;      /* DSAMPLER_TARGET_ABI_VERSION */
  const char *name;     /* e.g. "gaussian" */
  const char *var_name; /* the posterior variable's name in the output, e.g. "x" */
  int64_t dim;
  void *self;
  int (*logp_grad)(void *self, const float *x, int64_t n, float *logp, float *grad);
  int (*logp_grad_cuda)(void *self, const float *x, int64_t n, float *logp, float *grad,
                        void *stream);
  void (*destroy)(void *self);
} dsampler_target;

/* The plugin entry point. args is "key=value,..." : the user's --target-args, preceded by
 * "dim=<d>" when --dim was given. comm is the run's communicator (for reading data
 * collectively); every rank calls this with the same args. */
typedef int (*dsampler_target_create_fn)(const char *args, MPI_Comm comm, dsampler_target *out);
int dsampler_target_create(const char *args, MPI_Comm comm, dsampler_target *out);

#ifdef __cplusplus
}
#endif
#endif
