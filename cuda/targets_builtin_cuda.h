/* targets_builtin_cuda.h: the built-in targets on the GPU (targets_builtin.cu), as plain C: the
 * registry's device entries (src/targets/targets_builtin.c), and the row walk's launcher for a
 * caller whose parameters are already on the device. */
#ifndef DSAMPLER_TARGETS_BUILTIN_CUDA_H
#define DSAMPLER_TARGETS_BUILTIN_CUDA_H

#include <stdint.h>

#include "targets_builtin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device entries (logp_grad_cuda, self a builtin_params_t): logp [n] and grad [n, dim] at
 * x [n, dim], all device memory of the current device, in `stream` (a cudaStream_t; NULL for
 * the legacy default stream). Asynchronous: the results are ready when the stream is. On first
 * use they upload the model's arrays (means, the precision matrix, X and y) and, for logistic,
 * make a cuBLAS handle and work space; these live in the parameters' device state until the
 * target is destroyed, so the first call must be made on the device that later calls use. Each
 * row's result does not depend on n or on the row's position (logistic pads chains to fixed
 * blocks so every GEMM has the same shape). Return DS_OK or a DS_* status with the failing
 * CUDA or cuBLAS call recorded. */
int cuda_builtin_rows_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream);
int cuda_builtin_logistic_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream);

/* model_math.h's row walk (every model but logistic) for params whose arrays, if any, are
 * device memory: the kernel takes *params by value. As above otherwise. */
int cuda_builtin_rows_launch(const builtin_params_t *params, const float *x, int64_t n, float *logp, float *grad,
                             void *stream);

/* HMC's L leapfrog steps in one kernel for the row-walk models (gaussian, corr-gaussian AR(1),
 * banana, mixture1d; up to 256 coordinates, banana 512): from q_in, grad_in and momentum (the
 * first kick's), to q_out, momentum, grad_out and logp after the last step, with the bits of
 * the generic path's kick-drift kernels and row walks step by step. fits: 1 where it applies to
 * self (a builtin_params_t) at dim. */
int cuda_builtin_leapfrog_fits(const void *self, int64_t dim);
int cuda_builtin_leapfrog(void *self, const float *q_in, const float *grad_in, float *q_out, float *momentum,
                          float *grad_out, float *logp, const float *step_size, const float *inv_metric,
                          int shared_metric, int n_steps, int64_t n, void *stream);

#ifdef __cplusplus
}
#endif
#endif
