/* backend.c: picks the backend for this rank. The CUDA backend exists only in builds that
 * found a CUDA compiler and NCCL. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm_cuda.h"
#include "status.h"
#ifdef DSAMPLER_HAVE_CUDA
#include "backend_cuda.h"
#endif

int backend_cuda_built(void) {
#ifdef DSAMPLER_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

int backend_create(const char *name, int device, backend_t **out) {
  *out = NULL;
  if (strcmp(name, "cpu") == 0) return backend_cpu_create(out);
  if (strcmp(name, "auto") == 0 && (!backend_cuda_built() || comm_cuda_device_count() == 0))
    return backend_cpu_create(out);
#ifdef DSAMPLER_HAVE_CUDA
  return backend_cuda_create(device, out);
#else
  (void)device;
  return ds_fail(DS_ERR_INPUT, "--backend cuda: this dsampler was built without CUDA "
                               "(reconfigure where nvcc and NCCL are found)");
#endif
}

void backend_destroy(backend_t *b) {
  if (b && b->destroy) b->destroy(b);
}
