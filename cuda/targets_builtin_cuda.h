/* targets_builtin_cuda.h: the built-in targets on the GPU (targets_builtin.cu), as plain C.
 * The built-ins' logp_grad_cuda entry calls this; a backend may also call it directly with
 * the parameters of builtin_target_lookup(). */
#ifndef DSAMPLER_TARGETS_BUILTIN_CUDA_H
#define DSAMPLER_TARGETS_BUILTIN_CUDA_H

#include <stdint.h>

#include "targets_builtin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* logp [n] and grad [n, dim] at x [n, dim], all device memory of the current device, in
 * `stream` (a cudaStream_t; NULL for the legacy default stream). Asynchronous: the results
 * are ready when the stream is. On first use it uploads the model's arrays (means, the
 * precision matrix, X and y) and, for logistic, makes a cuBLAS handle and work space; they
 * live in p->device until the target is destroyed, so the first call must be made on the
 * device that later calls use. Each row's result does not depend on n or on the row's
 * position (logistic pads chains to fixed blocks so every GEMM has the same shape). Returns
 * DS_OK or a DS_* status with the failing CUDA or cuBLAS call recorded. */
int cuda_builtin_logp_grad(const builtin_params_t *p, const float *x, int64_t n, float *logp, float *grad,
                           void *stream);

#ifdef __cplusplus
}
#endif
#endif
