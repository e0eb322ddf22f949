/* example_banana.c: an example dsampler target plugin, to copy for your own model. It is the
 * banana density of the built-in `banana`, written here as a user would, against
 * src/shared/dsampler_target.h alone:
 *
 *   coordinates in pairs (u, v): u ~ N(0, a^2), v | u ~ N(b (u^2 - a^2), 1); an odd last
 *   coordinate N(0, 1). Parameters: dim (default 2), a (1), b (0.5).
 *
 * Build: cc -O2 -std=c11 -shared -fPIC -I path/to/dsampler/src example_banana.c -o example_banana.so \
 *          $(mpicc -showme:compile)
 * (CMake builds it as tests/plugin/example_banana.so, with the CUDA entry where CUDA is on).
 * Run:   dsampler hmc --target plugin:./example_banana.so --target-args dim=4,b=1 ...
 *
 * Conventions (see dsampler_target.h): x is [n, dim] row-major float; fill logp [n] and
 * grad [n, dim]; return 0, or non-zero to stop the run with an error. Each row's result
 * must depend on that row alone, so the draws do not change with the number of ranks. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsampler_target.h"
#include "example_banana.h"

/* The host entry. Arithmetic in double, rounded to float at the end. */
static int banana_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const example_banana_t *model = self;
  const int64_t dim = model->dim;
  const double a2 = model->a * model->a, b = model->b;
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    double sum = 0.0;
    int64_t k = 0;
    for (; k + 1 < dim; k += 2) {
      const double u = x_i[k], v = x_i[k + 1];
      const double r = v - b * (u * u - a2);
      sum += -0.5 * u * u / a2 - 0.5 * r * r;
      g_i[k] = (float)(-u / a2 + 2.0 * b * u * r);
      g_i[k + 1] = (float)-r;
    }
    if (k < dim) {
      const double u = x_i[k];
      sum += -0.5 * u * u;
      g_i[k] = (float)-u;
    }
    logp[i] = (float)sum;
  }
  return 0;
}

static void banana_destroy(void *self) { free(self); }

/* Reads "key=value,key=value": dim, a, b. Reports a bad parameter on rank 0 only. */
static int parse_args(const char *args, example_banana_t *model, int rank) {
  model->dim = 2;
  model->a = 1.0;
  model->b = 0.5;
  const char *p = args;
  while (p && *p) {
    const char *end = strchr(p, ',');
    size_t length = end ? (size_t)(end - p) : strlen(p);
    char item[256];
    if (length >= sizeof item) length = sizeof item - 1;
    memcpy(item, p, length);
    item[length] = '\0';
    char *equals = strchr(item, '=');
    char *stop = NULL;
    double value = 0.0;
    errno = 0;
    if (equals) value = strtod(equals + 1, &stop);
    if (!equals || stop == equals + 1 || *stop != '\0' || errno != 0 || !isfinite(value)) {
      if (rank == 0) fprintf(stderr, "example_banana: expected key=number, got '%s'\n", item);
      return 1;
    }
    *equals = '\0';
    if (strcmp(item, "dim") == 0 && value >= 1 && value == floor(value)) {
      model->dim = (int64_t)value;
    } else if (strcmp(item, "a") == 0 && value > 0) {
      model->a = value;
    } else if (strcmp(item, "b") == 0) {
      model->b = value;
    } else {
      if (rank == 0) fprintf(stderr, "example_banana: bad parameter %s=%s (takes dim >= 1, a > 0, b)\n", item, equals + 1);
      return 1;
    }
    p = end ? end + 1 : NULL;
  }
  return 0;
}

/* The one symbol dsampler looks up. */
int dsampler_target_create(const char *args, MPI_Comm comm, dsampler_target *out) {
  int rank = 0;
  if (comm != MPI_COMM_NULL) MPI_Comm_rank(comm, &rank);
  example_banana_t *model = malloc(sizeof *model);
  if (!model) return 2;
  if (parse_args(args, model, rank) != 0) {
    free(model);
    return 1;
  }
  memset(out, 0, sizeof *out);
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = "example_banana";
  out->var_name = "x";
  out->dim = model->dim;
  out->self = model;
  out->logp_grad = banana_logp_grad;
#ifdef EXAMPLE_BANANA_CUDA
  out->logp_grad_cuda = example_banana_logp_grad_cuda; /* NULL would mean: stage through the host */
#endif
  out->destroy = banana_destroy;
  return 0;
}
