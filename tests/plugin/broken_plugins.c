/* broken_plugins.c: plugins that go wrong in one way each, built from this one file with a
 * different BROKEN_* definition, for the loader's error tests (tests/py/test_targets_plugin.py):
 *   BROKEN_NO_ENTRY     exports no dsampler_target_create
 *   BROKEN_ABI          reports another ABI version
 *   BROKEN_CREATE       dsampler_target_create returns 5
 *   BROKEN_CALL         logp_grad returns 7 from its third call, on rank 1 only
 *   BROKEN_EXIT         logp_grad calls exit(0) from its third call, on rank 1 only (the
 *                       other ranks wait in a collective: the run must still end everywhere)
 *   BROKEN_DIM_BY_RANK  reports dimension 3 + rank (ranks disagree)
 *   BROKEN_HUGE_DIM     reports dimension 2^62 (sizes would wrap 64 bits)
 * The model itself is N(0, I). */
#include <stdlib.h>
#include <string.h>

#include "dsampler_target.h"

typedef struct broken {
  int64_t dim;
  int rank;
  int calls;
} broken_t;

__attribute__((unused)) static int normal_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  broken_t *model = self;
#ifdef BROKEN_CALL
  if (model->rank == 1 && ++model->calls >= 3) return 7;
#endif
#ifdef BROKEN_EXIT
  if (model->rank == 1 && ++model->calls >= 3) exit(0);
#endif
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t k = 0; k < model->dim; ++k) {
      float value = x[i * model->dim + k];
      grad[i * model->dim + k] = -value;
      sum += (double)value * value;
    }
    logp[i] = (float)(-0.5 * sum);
  }
  return 0;
}

__attribute__((unused)) static void broken_destroy(void *self) { free(self); }

#ifdef BROKEN_NO_ENTRY
int dsampler_target_make(const char *args, MPI_Comm comm, dsampler_target *out);
int dsampler_target_make(const char *args, MPI_Comm comm, dsampler_target *out) {
#else
int dsampler_target_create(const char *args, MPI_Comm comm, dsampler_target *out) {
#endif
  (void)args;
#ifdef BROKEN_CREATE
  (void)comm;
  (void)out;
  return 5;
#else
  broken_t *model = calloc(1, sizeof *model);
  if (!model) return 2;
  model->dim = 3;
  if (comm != MPI_COMM_NULL) MPI_Comm_rank(comm, &model->rank);
#ifdef BROKEN_DIM_BY_RANK
  model->dim = 3 + model->rank;
#endif
#ifdef BROKEN_HUGE_DIM
  model->dim = (int64_t)1 << 62;
#endif
  memset(out, 0, sizeof *out);
#ifdef BROKEN_ABI
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION + 98;
#else
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
#endif
  out->name = "broken";
  out->dim = model->dim;
  out->self = model;
  out->logp_grad = normal_logp_grad;
  out->destroy = broken_destroy;
  return 0;
#endif
}
