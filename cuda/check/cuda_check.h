/* cuda_check.h: the checkers for the CUDA runtime, cuRAND and cuBLAS. Each records the
 * failing call's text (file and line where DSAMPLER_ERROR_LOCATIONS asks) with
 * ds_fail_at(DS_ERR_GPU, ...) and returns the status,
 * so library code can `return` it; only main() and tests decide to end the job. Plain C. */
#ifndef DSAMPLER_CUDA_CHECK_H
#define DSAMPLER_CUDA_CHECK_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <curand.h>

#include "status.h"

#ifdef __cplusplus
extern "C" {
#endif

int cuda_check_fail(cudaError_t err, const char *file, int line, const char *call);
int curand_check_fail(curandStatus_t status, const char *file, int line, const char *call);
int cublas_check_fail(cublasStatus_t status, const char *file, int line, const char *call);

#define CUDA_CHECK(call)                                                          \
  do {                                                                            \
    cudaError_t cuda_check_err_ = (call);                                         \
    if (cuda_check_err_ != cudaSuccess)                                           \
      return cuda_check_fail(cuda_check_err_, __FILE__, __LINE__, #call);         \
  } while (0)

/* For teardown paths that cannot return: records the first failure and carries on. */
#define CUDA_CHECK_NORETURN(call)                                                 \
  do {                                                                            \
    cudaError_t cuda_check_err_ = (call);                                         \
    if (cuda_check_err_ != cudaSuccess)                                           \
      (void)cuda_check_fail(cuda_check_err_, __FILE__, __LINE__, #call);          \
  } while (0)

/* After a kernel launch: launch-configuration errors, and earlier asynchronous faults. */
#define CUDA_CHECK_LAUNCH(kernel_name) CUDA_CHECK_LAUNCH_AT(kernel_name, __FILE__, __LINE__)
#define CUDA_CHECK_LAUNCH_AT(kernel_name, file, line)                             \
  do {                                                                            \
    cudaError_t cuda_check_err_ = cudaGetLastError();                             \
    if (cuda_check_err_ != cudaSuccess)                                           \
      return cuda_check_fail(cuda_check_err_, file, line, "launch of " kernel_name); \
  } while (0)

#define CURAND_CHECK(call)                                                        \
  do {                                                                            \
    curandStatus_t curand_check_status_ = (call);                                 \
    if (curand_check_status_ != CURAND_STATUS_SUCCESS)                            \
      return curand_check_fail(curand_check_status_, __FILE__, __LINE__, #call);  \
  } while (0)

#define CUBLAS_CHECK(call)                                                        \
  do {                                                                            \
    cublasStatus_t cublas_check_status_ = (call);                                 \
    if (cublas_check_status_ != CUBLAS_STATUS_SUCCESS)                            \
      return cublas_check_fail(cublas_check_status_, __FILE__, __LINE__, #call);  \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
