/* jax_device.h: the GPU memory a JAX target handles itself (its data, the padded last block of
 * a call), so that jax_target.c stays free of CUDA headers: jax_device_cuda.c where the CUDA
 * backend is built, jax_device_none.c (every call an error) where it is not. All copies are
 * synchronous with the host. */
#ifndef DSAMPLER_JAX_DEVICE_H
#define DSAMPLER_JAX_DEVICE_H

#include <stddef.h>

/* 1 where this build can run programs on a GPU. */
int jax_device_available(void);
int jax_device_alloc(void **memory, size_t bytes);
void jax_device_free(void *memory);
int jax_device_upload(void *device, const void *host, size_t bytes);
int jax_device_download(void *host, const void *device, size_t bytes);
int jax_device_copy(void *dst, const void *src, size_t bytes);
/* Waits for the work queued on `stream` (a cudaStream_t), so a program reads what it wrote. */
int jax_device_sync(void *stream);
/* Stream order without the host waiting: `waiter` (a cudaStream_t) goes on once `signaller`
 * reaches the work queued on it now; a copy queued on `stream`; a mark recorded on `stream`,
 * and a wait on the host for it (which also lets it go; NULL: nothing to wait for). */
int jax_device_stream_after(void *waiter, void *signaller);
int jax_device_copy_on(void *dst, const void *src, size_t bytes, void *stream);
int jax_device_mark(void *stream, void **mark);
int jax_device_mark_wait(void *mark);

#endif
