/* model_common.h: what the test-model plugins (model_hier.c, model_regression.c, model_corr.c)
 * share: the float32 ABI entry written once over each model's float64 density, and the check
 * of --target-args. Each model keeps its arithmetic in double and rounds at the ABI only, so
 * the tests can compare the float32 entry with the exported float64 one. */
#ifndef MODEL_COMMON_H
#define MODEL_COMMON_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsampler_target.h"

/* Small models only: one row lives on the stack of the calling thread (the CPU backend calls
 * from several threads with the same self, so nothing per call may live in self). */
#define MODEL_MAX_DIM 16

/* A model's density: log p at x [dim] in double, its gradient into grad [dim]. */
typedef double (*model_logp_grad_f64_fn)(const void *self, const double *x, double *grad);

/* The ABI's host entry for a model: each row widened to double, evaluated, rounded back. */
static inline int model_logp_grad_rows(model_logp_grad_f64_fn logp_grad_f64, const void *self, int64_t dim,
                                       const float *x, int64_t n, float *logp, float *grad) {
  if (dim > MODEL_MAX_DIM) return 3;
  for (int64_t i = 0; i < n; ++i) {
    double row[MODEL_MAX_DIM], row_grad[MODEL_MAX_DIM];
    for (int64_t k = 0; k < dim; ++k) row[k] = x[i * dim + k];
    logp[i] = (float)logp_grad_f64(self, row, row_grad);
    for (int64_t k = 0; k < dim; ++k) grad[i * dim + k] = (float)row_grad[k];
  }
  return 0;
}

/* The rank for messages; 0 when MPI is not running (the tests load the plugins with ctypes to
 * check their gradients, without MPI). */
static inline int model_rank(MPI_Comm comm) {
  int initialized = 0, rank = 0;
  MPI_Initialized(&initialized);
  if (initialized && comm != MPI_COMM_NULL) MPI_Comm_rank(comm, &rank);
  return rank;
}

/* These models take no parameters: args must be empty or "dim=<their dimension>" (what
 * dsampler passes when --dim is given). Returns 0, or 1 after a message on rank 0. */
static inline int model_check_args(const char *name, const char *args, int64_t dim, int rank) {
  if (!args || !*args) return 0;
  char expected[64];
  snprintf(expected, sizeof expected, "dim=%lld", (long long)dim);
  if (strcmp(args, expected) == 0) return 0;
  if (rank == 0) fprintf(stderr, "%s: takes no parameters and dim %lld only, got '%s'\n", name, (long long)dim, args);
  return 1;
}

/* Fills the ABI's description of a model (variable "x"). */
static inline void model_describe(dsampler_target *out, const char *name, int64_t dim, void *self,
                                  int (*logp_grad)(void *, const float *, int64_t, float *, float *),
                                  void (*destroy)(void *)) {
  memset(out, 0, sizeof *out);
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = name;
  out->var_name = "x";
  out->dim = dim;
  out->self = self;
  out->logp_grad = logp_grad;
  out->destroy = destroy;
}

#endif
