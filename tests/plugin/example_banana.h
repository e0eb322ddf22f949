/* example_banana.h: the example plugin's parameters, shared by its host (example_banana.c)
 * and CUDA (example_banana.cu) halves. */
#ifndef EXAMPLE_BANANA_H
#define EXAMPLE_BANANA_H

#include <stdint.h>

typedef struct example_banana {
  int64_t dim;
  double a, b;
} example_banana_t;

#ifdef __cplusplus
extern "C" {
#endif
/* The CUDA entry (example_banana.cu): the same model on device arrays, in `stream`. */
int example_banana_logp_grad_cuda(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream);
#ifdef __cplusplus
}
#endif
#endif
