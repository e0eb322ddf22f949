/* jax_device_cuda.c: jax_device.h on the CUDA runtime (builds with the CUDA backend).
 *
 * Every copy is complete when its call returns. cudaMemcpy alone does not promise that for a
 * copy between device buffers (nor for one from pageable host memory), and neither the backend's
 * stream (non-blocking) nor XLA's waits for the legacy stream it runs on: a trajectory's staged
 * rows copied back could still be in flight when the backend's next kernel read them. */
#include "jax_device.h"

#include "cuda_check.h"

int jax_device_available(void) { return 1; }

int jax_device_alloc(void **memory, size_t bytes) {
  *memory = NULL;
  CUDA_CHECK(cudaMalloc(memory, bytes ? bytes : 1));
  return DS_OK;
}

void jax_device_free(void *memory) {
  if (memory) CUDA_CHECK_NORETURN(cudaFree(memory));
}

int jax_device_upload(void *device, const void *host, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaStreamSynchronize(0));
  return DS_OK;
}

int jax_device_download(void *host, const void *device, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
  return DS_OK;
}

int jax_device_copy(void *dst, const void *src, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
  CUDA_CHECK(cudaStreamSynchronize(0));
  return DS_OK;
}

int jax_device_sync(void *stream) {
  CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
  return DS_OK;
}

int jax_device_stream_after(void *waiter, void *signaller) {
  cudaEvent_t event;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  cudaError_t error = cudaEventRecord(event, (cudaStream_t)signaller);
  if (error == cudaSuccess) error = cudaStreamWaitEvent((cudaStream_t)waiter, event, 0);
  CUDA_CHECK_NORETURN(cudaEventDestroy(event));
  CUDA_CHECK(error);
  return DS_OK;
}

int jax_device_copy_on(void *dst, const void *src, size_t bytes, void *stream) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
  return DS_OK;
}

int jax_device_mark(void *stream, void **mark) {
  cudaEvent_t event;
  *mark = NULL;
  CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  const cudaError_t error = cudaEventRecord(event, (cudaStream_t)stream);
  if (error != cudaSuccess) CUDA_CHECK_NORETURN(cudaEventDestroy(event));
  CUDA_CHECK(error);
  *mark = event;
  return DS_OK;
}

int jax_device_mark_wait(void *mark) {
  if (!mark) return DS_OK;
  const cudaError_t error = cudaEventSynchronize((cudaEvent_t)mark);
  CUDA_CHECK_NORETURN(cudaEventDestroy((cudaEvent_t)mark));
  CUDA_CHECK(error);
  return DS_OK;
}
