/* init_region.c: a target defined only on part of the start box, for the redraws of starts
 * (tests/py/test_init.py). N(0, I) in dimension 3, except: log p = -inf where x0 > 1 (a start
 * uniform in (-2, 2) lands there with probability 1/4) and the gradient is NaN where x1 < -1.5
 * (1/8). With args "nowhere=1", log p is -inf everywhere: no start can be found. */
#include "model_common.h"

enum { REGION_DIM = 3 };

typedef struct region {
  int nowhere;
} region_t;

static int region_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const region_t *r = self;
  for (int64_t i = 0; i < n; ++i) {
    const float *row = x + i * REGION_DIM;
    float *g = grad + i * REGION_DIM;
    double sum = 0.0;
    for (int k = 0; k < REGION_DIM; ++k) {
      g[k] = -row[k];
      sum += (double)row[k] * row[k];
    }
    logp[i] = (float)(-0.5 * sum);
    if (r->nowhere || row[0] > 1.0f) logp[i] = -INFINITY;
    if (row[1] < -1.5f) g[1] = NAN;
  }
  return 0;
}

static void region_destroy(void *self) { free(self); }

int dsampler_target_create_v2(const dsampler_target_host *host, dsampler_target *out) {
  region_t *r = calloc(1, sizeof *r);
  if (!r) return 2;
  r->nowhere = host->args && strstr(host->args, "nowhere=1") != NULL;
  model_describe(out, "init_region", REGION_DIM, r, region_logp_grad, region_destroy);
  return 0;
}
