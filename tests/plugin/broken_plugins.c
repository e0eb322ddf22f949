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
 *   BROKEN_REPORT_CREATE  (ABI version 2) create reports why it fails, then returns 3
 *   BROKEN_REPORT_CALL    (ABI version 2) logp_grad reports why it fails from its third call
 *                         on rank 1, then returns 7
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

#if defined(BROKEN_REPORT_CREATE) || defined(BROKEN_REPORT_CALL)
/* Version 2: errors in words, through the host's report_error (kept with the model). */
typedef struct reporting {
  broken_t model;
  void (*report_error)(void *context, const char *message);
  void *context;
} reporting_t;

__attribute__((unused)) static int reporting_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  reporting_t *r = self;
  if (r->model.rank == 1 && ++r->model.calls >= 3) {
    r->report_error(r->context, "the likelihood overflowed at row 2 (x = 1e39)");
    return 7;
  }
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t k = 0; k < r->model.dim; ++k) {
      grad[i * r->model.dim + k] = -x[i * r->model.dim + k];
      sum += (double)x[i * r->model.dim + k] * x[i * r->model.dim + k];
    }
    logp[i] = (float)(-0.5 * sum);
  }
  return 0;
}

int dsampler_target_create_v2(const dsampler_target_host *host, dsampler_target *out) {
#ifdef BROKEN_REPORT_CREATE
  (void)out;
  host->report_error(host->context, "cannot open the model's table 'weights.csv'");
  return 3;
#else
  reporting_t *r = calloc(1, sizeof *r);
  if (!r) return 2;
  r->model.dim = 3;
  r->report_error = host->report_error;
  r->context = host->context;
  if (host->comm != MPI_COMM_NULL) MPI_Comm_rank(host->comm, &r->model.rank);
  memset(out, 0, sizeof *out);
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = "reporting";
  out->dim = 3;
  out->self = r;
  out->logp_grad = reporting_logp_grad;
  out->destroy = broken_destroy;
  return 0;
#endif
}
#else /* version 1 */
#if defined(BROKEN_NO_ENTRY)
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
  out->abi_version = 99;
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
#endif /* version 1 */
