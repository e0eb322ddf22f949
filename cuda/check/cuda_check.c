/* cuda_check.c: the messages behind CUDA_CHECK, CURAND_CHECK and CUBLAS_CHECK (host C, below the
 * comm layer: comm_cuda.c and the CUDA backend both report through it). */
#include "cuda_check.h"

int cuda_check_fail(cudaError_t err, const char *file, int line, const char *call) {
  return ds_fail_at(DS_ERR_GPU, file, line, call, "CUDA error %d (%s): %s", (int)err,
                    cudaGetErrorName(err), cudaGetErrorString(err));
}

static const char *curand_status_name(curandStatus_t status) {
  switch (status) {
    case CURAND_STATUS_SUCCESS: return "CURAND_STATUS_SUCCESS";
    case CURAND_STATUS_VERSION_MISMATCH: return "CURAND_STATUS_VERSION_MISMATCH";
    case CURAND_STATUS_NOT_INITIALIZED: return "CURAND_STATUS_NOT_INITIALIZED";
    case CURAND_STATUS_ALLOCATION_FAILED: return "CURAND_STATUS_ALLOCATION_FAILED";
    case CURAND_STATUS_TYPE_ERROR: return "CURAND_STATUS_TYPE_ERROR";
    case CURAND_STATUS_OUT_OF_RANGE: return "CURAND_STATUS_OUT_OF_RANGE";
    case CURAND_STATUS_LENGTH_NOT_MULTIPLE: return "CURAND_STATUS_LENGTH_NOT_MULTIPLE";
    case CURAND_STATUS_DOUBLE_PRECISION_REQUIRED: return "CURAND_STATUS_DOUBLE_PRECISION_REQUIRED";
    case CURAND_STATUS_LAUNCH_FAILURE: return "CURAND_STATUS_LAUNCH_FAILURE";
    case CURAND_STATUS_PREEXISTING_FAILURE: return "CURAND_STATUS_PREEXISTING_FAILURE";
    case CURAND_STATUS_INITIALIZATION_FAILED: return "CURAND_STATUS_INITIALIZATION_FAILED";
    case CURAND_STATUS_ARCH_MISMATCH: return "CURAND_STATUS_ARCH_MISMATCH";
    case CURAND_STATUS_INTERNAL_ERROR: return "CURAND_STATUS_INTERNAL_ERROR";
  }
  return "unknown cuRAND status";
}

int curand_check_fail(curandStatus_t status, const char *file, int line, const char *call) {
  return ds_fail_at(DS_ERR_GPU, file, line, call, "cuRAND error %d (%s)", (int)status,
                    curand_status_name(status));
}

int cublas_check_fail(cublasStatus_t status, const char *file, int line, const char *call) {
  return ds_fail_at(DS_ERR_GPU, file, line, call, "cuBLAS error %d (%s)", (int)status,
                    cublasGetStatusString(status));
}
