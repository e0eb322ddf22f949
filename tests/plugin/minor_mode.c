/* minor_mode.c: a density with a minor mode, for the restarts of chains caught in one
 * (tests/py/test_minor_modes.py). Dimension 3: x1, x2 ~ N(0, 1) and x0 in a tilted double well,
 *   log p(x0) = -V(x0),  V(x) = 60 ((x - s)^2 - 1)^2 - 20 (x - s),  s = -1.5:
 * the major well at x0 = -0.5 and the minor one at -2.5, 40 nats above it in V (e^-40 of the
 * mass), with a barrier of about 60 nats between them near x0 = -1.42. A chain started left of
 * it (about 15% of starts uniform in (-2, 2)) stays in the minor well.
 *
 * Built a second time as minor_mode_most.so with s = 1 (MINOR_WELL_SHIFT): the wells at 0 and 2,
 * the barrier near 1.1, so that most of the starts fall into the minor well and the median chain
 * sits in it. */
#include "model_common.h"

enum { MINOR_DIM = 3 };

#ifndef MINOR_WELL_SHIFT
#define MINOR_WELL_SHIFT (-1.5)
#endif
#ifndef MINOR_NAME
#define MINOR_NAME "minor_mode"
#endif

static const double well_shift = MINOR_WELL_SHIFT, barrier = 60.0, tilt = 20.0;

static int minor_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  (void)self;
  for (int64_t i = 0; i < n; ++i) {
    const float *row = x + i * MINOR_DIM;
    float *g = grad + i * MINOR_DIM;
    const double y = (double)row[0] - well_shift, w = y * y - 1.0;
    double value = -(barrier * w * w - tilt * y);
    g[0] = (float)(-(4.0 * barrier * w * y - tilt));
    for (int k = 1; k < MINOR_DIM; ++k) {
      value -= 0.5 * (double)row[k] * row[k];
      g[k] = -row[k];
    }
    logp[i] = (float)value;
  }
  return 0;
}

int dsampler_target_create_v2(const dsampler_target_host *host, dsampler_target *out) {
  (void)host;
  model_describe(out, MINOR_NAME, MINOR_DIM, NULL, minor_logp_grad, NULL);
  return 0;
}
