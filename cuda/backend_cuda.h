/* backend_cuda.h: the CUDA backend (backend_cuda.cu), seen from C. */
#ifndef DSAMPLER_BACKEND_CUDA_H
#define DSAMPLER_BACKEND_CUDA_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA backend on GPU `device` (made current for this thread), with its own
 * compute stream (backend_t.stream). On failure *out is NULL. */
int backend_cuda_create(int device, backend_t **out);
/* Whether covariance_add may defer its updates (on by default; the results are the same bits).
 * For tests. */
void backend_cuda_covariance_defer(backend_t *b, int on);
/* Whether HMC runs a row-walk built-in's trajectory in one kernel (on by default; the same bits
 * as the step-by-step generic path). For tests. */
void backend_cuda_builtin_trajectory(backend_t *b, int on);

#ifdef __cplusplus
}
#endif
#endif
