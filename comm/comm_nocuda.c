/* comm_nocuda.c: comm_cuda.h for builds without CUDA: no devices, and any use is an error. */
#include <string.h>

#include "comm_cuda.h"
#include "status.h"

static int no_cuda(void) { return ds_fail(DS_ERR_INPUT, "this dsampler was built without CUDA"); }

int comm_cuda_device_count(void) { return 0; }
int comm_cuda_gpu_identity(int device, comm_gpu_identity_t *identity) {
  (void)device;
  memset(identity, 0, sizeof *identity);
  return no_cuda();
}
int comm_cuda_nccl_init(comm_ctx_t *ctx) { (void)ctx; return no_cuda(); }
void comm_cuda_nccl_free(comm_ctx_t *ctx) { (void)ctx; }
int comm_cuda_nccl_allgather_rows(comm_ctx_t *ctx, float *buf, int64_t n, int64_t row_floats) {
  (void)ctx; (void)buf; (void)n; (void)row_floats;
  return no_cuda();
}
int comm_cuda_nccl_allreduce_sum_u64(comm_ctx_t *ctx, uint64_t *buf, int64_t count) {
  (void)ctx; (void)buf; (void)count;
  return no_cuda();
}
int comm_cuda_copy(comm_ctx_t *ctx, void *dst, const void *src, size_t bytes, int to_device) {
  (void)ctx; (void)dst; (void)src; (void)bytes; (void)to_device;
  return no_cuda();
}
int comm_cuda_host_alloc(void **ptr, size_t bytes) { (void)ptr; (void)bytes; return no_cuda(); }
void comm_cuda_host_free(void *ptr) { (void)ptr; }
