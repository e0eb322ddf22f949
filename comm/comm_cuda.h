/* comm_cuda.h: the parts of comm/ that touch CUDA and NCCL. comm_cuda.c implements them when
 * the CUDA backend is built; comm_nocuda.c otherwise (they then report that CUDA is absent). */
#ifndef DSAMPLER_COMM_CUDA_H
#define DSAMPLER_COMM_CUDA_H

#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible CUDA devices; 0 without CUDA or without a driver. */
int comm_cuda_device_count(void);
/* The physical identity of visible device `device`: its UUID and PCI address. */
int comm_cuda_gpu_identity(int device, comm_gpu_identity_t *identity);
/* Creates the NCCL communicator over ctx->world (rank 0's unique id broadcast with MPI) and
 * its stream; sets ctx->nccl and ctx->nccl_stream. The communicator is non-blocking, so a
 * rank whose peers never join gives up after ctx->nccl_timeout_seconds (read here from
 * DSAMPLER_NCCL_INIT_TIMEOUT) instead of hanging. Collective over ctx->world; every rank
 * returns the same status (agreed), and on failure no rank keeps a communicator. */
int comm_cuda_nccl_init(comm_ctx_t *ctx);
/* Destroys the communicator, its stream and the allgather scratch. Idempotent. */
void comm_cuda_nccl_free(comm_ctx_t *ctx);
/* Allgather of row blocks on device memory over NCCL, ordered after ctx->compute_stream and
 * before its next work: one ncclAllGather in place when the blocks are even, else one over
 * blocks padded to ceil(n / size) rows in ctx->nccl_scratch, copied into place after. */
int comm_cuda_nccl_allgather_rows(comm_ctx_t *ctx, float *buf, int64_t n, int64_t row_floats);
/* Allreduce-sum of uint64 on device memory over NCCL, in place, ordered as the allgather. */
int comm_cuda_nccl_allreduce_sum_u64(comm_ctx_t *ctx, uint64_t *buf, int64_t count);
/* Copies between host and device memory (synchronous, on ctx->compute_stream). */
int comm_cuda_copy(comm_ctx_t *ctx, void *dst, const void *src, size_t bytes, int to_device);
/* Pinned host memory for staging device buffers through MPI. */
int comm_cuda_host_alloc(void **ptr, size_t bytes);
void comm_cuda_host_free(void *ptr);

#ifdef __cplusplus
}
#endif
#endif
