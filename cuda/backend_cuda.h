/* backend_cuda.h: the CUDA backend (backend_cuda.cu), seen from C. */
#ifndef DSAMPLER_BACKEND_CUDA_H
#define DSAMPLER_BACKEND_CUDA_H

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Creates the CUDA backend on GPU `device` (made current for this thread), with its own
 * compute stream (backend_t.stream) and cuBLAS handle. On failure *out is NULL. */
int backend_cuda_create(int device, backend_t **out);

/* The backend's cuBLAS handle (a cublasHandle_t bound to its stream), for GPU targets whose
 * gradients are matrix products. */
void *backend_cuda_cublas_handle(backend_t *b);

#ifdef __cplusplus
}
#endif
#endif
