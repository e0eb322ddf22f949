/* count_gradients.c: a target plugin that forwards everything to another plugin (a compiled
 * Stan model's library, as `dsampler stan MODEL` prints its path) and counts the rows its log
 * density and gradient are evaluated at: every gradient the sampler spends, the step-size
 * searches' probe trajectories and the starts' checks included, which the output's
 * sample_stats/n_steps does not record. Sampling is unchanged (the same functions are called
 * with the same arguments), so a run through it gives the draws of `--target stan:MODEL`.
 *
 *   DSAMPLER_COUNT_TARGET=/path/to/model.so DSAMPLER_COUNT_OUT=counts.txt \
 *     mpirun -n 2 dsampler hmc --target plugin:count_gradients.so --data data.json ...
 *
 * At the end of the run each rank appends one line "pid f32_rows f64_rows" to DSAMPLER_COUNT_OUT;
 * the run's gradients are the sum over the lines. Build: mpicc -O2 -shared -fPIC -o
 * count_gradients.so count_gradients.c -I src/shared -ldl */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsampler_target.h"

typedef struct counter {
  void *library;
  dsampler_target inner;
  atomic_llong rows_f32, rows_f64;
} counter_t;

static int count_f32(void *self, const float *x, int64_t n, float *logp, float *grad) {
  counter_t *c = self;
  atomic_fetch_add(&c->rows_f32, (long long)n);
  return c->inner.logp_grad(c->inner.self, x, n, logp, grad);
}

static int count_f64(void *self, const double *x, int64_t n, double *logp, double *grad) {
  counter_t *c = self;
  atomic_fetch_add(&c->rows_f64, (long long)n);
  return c->inner.logp_grad_f64(c->inner.self, x, n, logp, grad);
}

static int forward_constrain(void *self, const double *x, int64_t n, const uint64_t *keys, double *out) {
  counter_t *c = self;
  return c->inner.constrain(c->inner.self, x, n, keys, out);
}

static int forward_initial_point(void *self, uint64_t seed, int64_t item, double *x) {
  counter_t *c = self;
  return c->inner.initial_point(c->inner.self, seed, item, x);
}

static void destroy(void *self) {
  counter_t *c = self;
  const char *path = getenv("DSAMPLER_COUNT_OUT");
  if (path && path[0]) {
    char line[128];
    int len = snprintf(line, sizeof line, "%ld %lld %lld\n", (long)getpid(), (long long)atomic_load(&c->rows_f32),
                       (long long)atomic_load(&c->rows_f64));
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      if (write(fd, line, (size_t)len) != len) perror("count_gradients: write");
      close(fd);
    }
  }
  if (c->inner.destroy) c->inner.destroy(c->inner.self);
  /* The Stan library stays loaded: its thread-locals may outlive this call. */
  free(c);
}

int dsampler_target_create_v2(const dsampler_target_host *host, dsampler_target *out) {
  const char *path = getenv("DSAMPLER_COUNT_TARGET");
  if (!path || !path[0]) {
    host->report_error(host->context, "count_gradients: set DSAMPLER_COUNT_TARGET to the library to forward to");
    return 1;
  }
  counter_t *c = calloc(1, sizeof *c);
  if (!c) return 1;
  c->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  dsampler_target_create_v2_fn create = NULL;
  if (c->library) *(void **)&create = dlsym(c->library, "dsampler_target_create_v2");
  if (!create) {
    char why[600];
    snprintf(why, sizeof why, "count_gradients: cannot load %s: %s", path, dlerror());
    host->report_error(host->context, why);
    free(c);
    return 1;
  }
  int rc = create(host, &c->inner);
  if (rc != 0) {
    free(c);
    return rc;
  }
  *out = c->inner;
  out->self = c;
  out->logp_grad = count_f32;
  out->logp_grad_cuda = NULL;
  out->logp_grad_f64 = c->inner.logp_grad_f64 ? count_f64 : NULL;
  out->constrain = c->inner.constrain ? forward_constrain : NULL;
  out->initial_point = c->inner.initial_point ? forward_initial_point : NULL;
  out->destroy = destroy;
  return 0;
}
