/* jax_device_none.c: jax_device.h for builds without CUDA: no GPU, and any use is an error. */
#include "jax_device.h"

#include "status.h"

static int no_cuda(void) { return ds_fail(DS_ERR_INPUT, "this dsampler was built without CUDA"); }

int jax_device_available(void) { return 0; }
int jax_device_alloc(void **memory, size_t bytes) { (void)bytes; *memory = NULL; return no_cuda(); }
void jax_device_free(void *memory) { (void)memory; }
int jax_device_upload(void *device, const void *host, size_t bytes) { (void)device; (void)host; (void)bytes; return no_cuda(); }
int jax_device_download(void *host, const void *device, size_t bytes) { (void)host; (void)device; (void)bytes; return no_cuda(); }
int jax_device_copy(void *dst, const void *src, size_t bytes) { (void)dst; (void)src; (void)bytes; return no_cuda(); }
int jax_device_sync(void *stream) { (void)stream; return no_cuda(); }
int jax_device_stream_after(void *waiter, void *signaller) { (void)waiter; (void)signaller; return no_cuda(); }
int jax_device_copy_on(void *dst, const void *src, size_t bytes, void *stream) { (void)dst; (void)src; (void)bytes; (void)stream; return no_cuda(); }
int jax_device_mark(void *stream, void **mark) { (void)stream; *mark = NULL; return no_cuda(); }
int jax_device_mark_wait(void *mark) { (void)mark; return DS_OK; }
