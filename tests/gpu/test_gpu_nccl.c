/* test_gpu_nccl.c: comm/'s NCCL transport on device buffers: the allgather of uneven row
 * blocks (grouped broadcasts) and the uint64 allreduce, with seeded values whose results are
 * exactly predictable, run on every rank (one GPU per rank). Ranks agree on pass/fail with
 * MPI_Allreduce(MIN). Exits 77 without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "comm.h"
#include "comm_cuda.h"
#include "gpu_test.h"

static float value_at(int64_t row, int64_t col) { return (float)(row * 1000 + col) * 0.5f + 0.25f; }

int main(int argc, char **argv) {
  if (comm_cuda_device_count() == 0) {
    printf("no CUDA device: skipped\n");
    return GPU_TEST_SKIP;
  }
  comm_ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  GPU_TRY(comm_init(&ctx, &argc, &argv));
  backend_t *gpu = NULL;
  int status = backend_cuda_create(ctx.local_rank % comm_cuda_device_count(), &gpu);
  if (status != DS_OK) {
    fprintf(stderr, "rank %d: %s\n", ctx.rank, ds_error_message());
    comm_abort(&ctx, 1);
  }
  ctx.device = gpu->device;
  status = comm_select_transport(&ctx, "nccl", 1, gpu->stream);
  if (status != DS_OK) {
    fprintf(stderr, "rank %d: %s\n", ctx.rank, ds_error_message());
    comm_abort(&ctx, 1);
  }
  GPU_EXPECT(ctx.transport == COMM_TRANSPORT_NCCL, "transport is not NCCL");

  /* n chosen so that blocks are uneven for most rank counts, and one with fewer rows than ranks. */
  const int64_t sizes[][2] = {{1001, 7}, {2, 3}, {65536, 129}};
  for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; ++c) {
    const int64_t n = sizes[c][0], cols = sizes[c][1], count = n * cols;
    int64_t begin, end;
    comm_partition(n, ctx.size, ctx.rank, &begin, &end);
    float *host = test_malloc((size_t)count * sizeof *host);
    for (int64_t e = 0; e < count; ++e) host[e] = -1.0f; /* poison: rows not mine */
    for (int64_t r = begin; r < end; ++r)
      for (int64_t k = 0; k < cols; ++k) host[r * cols + k] = value_at(r, k);
    float *dev = NULL;
    GPU_TRY(gpu->alloc(gpu, (void **)&dev, (size_t)count * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, dev, host, (size_t)count * sizeof(float)));
    GPU_TRY(comm_allgather_rows(&ctx, dev, n, cols, 1));
    GPU_TRY(gpu->download(gpu, host, dev, (size_t)count * sizeof(float)));
    int64_t wrong = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t k = 0; k < cols; ++k) wrong += host[r * cols + k] != value_at(r, k);
    /* Exact: every element. */
    GPU_EXPECT(wrong == 0, "allgather n=%lld cols=%lld: %lld wrong elements", (long long)n, (long long)cols, (long long)wrong);
    if (ctx.rank == 0)
      printf("allgather_rows n=%lld cols=%lld over %d rank(s): %lld wrong\n", (long long)n, (long long)cols, ctx.size,
             (long long)wrong);
    gpu->release(gpu, dev);
    free(host);
  }

  { /* allreduce: rank r contributes (r + 1) * (bin + 2^33); the sum is exact in uint64. */
    const int64_t count = 65536;
    uint64_t *host = test_malloc((size_t)count * sizeof *host), *dev = NULL;
    for (int64_t b = 0; b < count; ++b) host[b] = (uint64_t)(ctx.rank + 1) * ((uint64_t)b + (1ull << 33));
    GPU_TRY(gpu->alloc(gpu, (void **)&dev, (size_t)count * sizeof(uint64_t)));
    GPU_TRY(gpu->upload(gpu, dev, host, (size_t)count * sizeof(uint64_t)));
    GPU_TRY(comm_cuda_nccl_allreduce_sum_u64(&ctx, dev, count));
    GPU_TRY(gpu->download(gpu, host, dev, (size_t)count * sizeof(uint64_t)));
    const uint64_t ranks_sum = (uint64_t)ctx.size * (uint64_t)(ctx.size + 1) / 2;
    int64_t wrong = 0;
    for (int64_t b = 0; b < count; ++b) wrong += host[b] != ranks_sum * ((uint64_t)b + (1ull << 33));
    GPU_EXPECT(wrong == 0, "allreduce u64: %lld wrong bins", (long long)wrong);
    if (ctx.rank == 0) printf("allreduce_sum_u64 of %lld over %d rank(s): %lld wrong\n", (long long)count, ctx.size, (long long)wrong);
    gpu->release(gpu, dev);
    free(host);
  }

  int ok = gpu_test_failures == 0, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, ctx.world);
  /* Teardown: NCCL communicator, then CUDA, then MPI. */
  comm_cuda_nccl_free(&ctx);
  backend_destroy(gpu);
  comm_free(&ctx);
  if (ctx.rank == 0) printf("%s\n", all_ok ? "passed" : "FAILED");
  return all_ok ? 0 : 1;
}
