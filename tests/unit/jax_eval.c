/* jax_eval.c: evaluates a JAX bundle's target through dsampler's own loader (target_open, the
 * CPU plugin) on rows from a file, for tests/py/test_jax_target.py to compare with float64
 * references. It checks here what needs no reference: the rows give the same bits whether
 * evaluated all at once, one at a time, or in uneven pieces from several threads at once (so
 * neither the padding of a block nor a row's place in it changes its value).
 *
 *   jax_eval BUNDLE IN OUT [--target-args ARGS]
 *   IN:  int64 n, int64 dim, float32 x[n, dim]
 *   OUT: int64 n, int64 dim, int64 constrained_dim, float32 logp[n], float32 grad[n, dim],
 *        float64 constrained[n, constrained_dim]
 * Exit 0 when the evaluations agree, 1 otherwise (with the first difference on stderr). */
#include <mpi.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "target.h"

static int read_rows(const char *path, int64_t *n, int64_t *dim, float **x) {
  FILE *file = fopen(path, "rb");
  if (!file) return 1;
  int bad = fread(n, 8, 1, file) != 1 || fread(dim, 8, 1, file) != 1 || *n < 1 || *dim < 1;
  if (!bad) {
    *x = malloc((size_t)(*n * *dim) * sizeof **x);
    bad = !*x || fread(*x, sizeof **x, (size_t)(*n * *dim), file) != (size_t)(*n * *dim);
  }
  fclose(file);
  return bad;
}

/* Rows [first, first + count) of x through logp_grad, into logp and grad at the same rows. */
static int evaluate(const dsampler_target *t, const float *x, int64_t first, int64_t count, float *logp, float *grad) {
  return t->logp_grad(t->self, x + first * t->dim, count, logp + first, grad + first * t->dim);
}

static int same(const char *what, const float *a, const float *b, int64_t count) {
  if (memcmp(a, b, (size_t)count * sizeof *a) == 0) return 1;
  for (int64_t i = 0; i < count; ++i)
    if (memcmp(&a[i], &b[i], sizeof *a) != 0) {
      fprintf(stderr, "jax_eval: %s differs at %lld: %.9g vs %.9g\n", what, (long long)i, a[i], b[i]);
      break;
    }
  return 0;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  if (argc < 4) {
    fprintf(stderr, "usage: jax_eval BUNDLE IN OUT [--target-args ARGS]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char *args = argc > 5 && strcmp(argv[4], "--target-args") == 0 ? argv[5] : "";
  char spec[4096];
  snprintf(spec, sizeof spec, "jax:%s", argv[1]);
  int64_t n = 0, dim = 0;
  float *x = NULL;
  if (read_rows(argv[2], &n, &dim, &x)) {
    fprintf(stderr, "jax_eval: cannot read %s\n", argv[2]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  target_handle_t handle;
  if (target_open(spec, args, "", 0, 0, -1, MPI_COMM_WORLD, &handle) != DS_OK) {
    fprintf(stderr, "jax_eval: %s\n", ds_error_message());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const dsampler_target *t = &handle.target;
  if (t->dim != dim) {
    fprintf(stderr, "jax_eval: the bundle has dim %lld, the rows %lld\n", (long long)t->dim, (long long)dim);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const size_t rows = (size_t)n, cells = (size_t)(n * dim);
  float *logp[3], *grad[3];
  for (int k = 0; k < 3; ++k) {
    logp[k] = calloc(rows, sizeof(float));
    grad[k] = calloc(cells, sizeof(float));
  }
  int failed = evaluate(t, x, 0, n, logp[0], grad[0]) != 0;
  for (int64_t r = 0; r < n && !failed; ++r) failed = evaluate(t, x, r, 1, logp[1], grad[1]) != 0;
  /* Uneven pieces (1, 2, 3, ... rows) spread over threads, several calls in flight at once. */
  int64_t starts[512];
  int pieces = 0;
  for (int64_t first = 0, size = 1; first < n && pieces < 511; first += size, ++size) starts[pieces++] = first;
  starts[pieces] = n;
  int piece_failed = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(4) reduction(| : piece_failed)
  for (int piece = 0; piece < pieces; ++piece)
    piece_failed |= evaluate(t, x, starts[piece], starts[piece + 1] - starts[piece], logp[2], grad[2]) != 0;
  failed |= piece_failed;
  if (failed) fprintf(stderr, "jax_eval: logp_grad failed: %s\n", ds_error_message());
  for (int k = 1; k < 3 && !failed; ++k)
    failed = !same(k == 1 ? "logp (one row a call)" : "logp (threads)", logp[0], logp[k], n) ||
             !same(k == 1 ? "grad (one row a call)" : "grad (threads)", grad[0], grad[k], n * dim);

  const int64_t width = t->n_vars > 0 ? t->constrained_dim : 0;
  double *constrained = calloc((size_t)(n * (width ? width : 1)), sizeof(double));
  uint64_t *keys = calloc(rows, sizeof *keys);
  if (!failed && width && target_constrain(t, x, n, keys, constrained, handle.extra.constrain_rows_per_call) != DS_OK) {
    fprintf(stderr, "jax_eval: constrain failed: %s\n", ds_error_message());
    failed = 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!failed && rank == 0) {
    FILE *out = fopen(argv[3], "wb");
    failed = !out || fwrite(&n, 8, 1, out) != 1 || fwrite(&dim, 8, 1, out) != 1 || fwrite(&width, 8, 1, out) != 1 ||
             fwrite(logp[0], sizeof(float), rows, out) != rows || fwrite(grad[0], sizeof(float), cells, out) != cells ||
             fwrite(constrained, sizeof(double), (size_t)(n * width), out) != (size_t)(n * width);
    if (out) fclose(out);
  }
  target_close(&handle);
  int any = failed;
  MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any ? 1 : 0;
}
