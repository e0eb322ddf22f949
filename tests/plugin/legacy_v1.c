/* legacy_v1.c: a plugin as one built against target ABI version 1 is: its own copy of that
 * version's struct (fields up to destroy), abi_version 1, the entry dsampler_target_create.
 * dsampler must still load it (tests/py/test_targets_plugin.py). The model is N(0, I) of
 * dimension --dim (default 3), with the arithmetic of broken_plugins.c. */
#include <mpi.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Version 1 of struct dsampler_target, as that header declared it. */
typedef struct legacy_target {
  int abi_version;
  const char *name;
  const char *var_name;
  int64_t dim;
  void *self;
  int (*logp_grad)(void *self, const float *x, int64_t n, float *logp, float *grad);
  int (*logp_grad_cuda)(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream);
  void (*destroy)(void *self);
} legacy_target;

int dsampler_target_create(const char *args, MPI_Comm comm, legacy_target *out);

static int64_t legacy_dim = 3;

static int legacy_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  (void)self;
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t k = 0; k < legacy_dim; ++k) {
      const float value = x[i * legacy_dim + k];
      grad[i * legacy_dim + k] = -value;
      sum += (double)value * value;
    }
    logp[i] = (float)(-0.5 * sum);
  }
  return 0;
}

int dsampler_target_create(const char *args, MPI_Comm comm, legacy_target *out) {
  (void)comm;
  const char *dim = args ? strstr(args, "dim=") : NULL;
  if (dim) legacy_dim = strtoll(dim + 4, NULL, 10);
  if (legacy_dim < 1) return 1;
  memset(out, 0, sizeof *out);
  out->abi_version = 1;
  out->name = "legacy_v1";
  out->dim = legacy_dim;
  out->logp_grad = legacy_logp_grad;
  return 0;
}
