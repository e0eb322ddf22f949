/* test_gpu_nccl.c: comm/'s NCCL transport on device buffers: the allgather of even and uneven
 * row blocks (one ncclAllGather, padded when uneven) and the uint64 sums on the device, with
 * seeded values whose results are exactly predictable, and the exact median with its counts
 * summed on the device against the CPU backend's, run on every rank (one GPU per rank).
 * Ranks agree on pass/fail with MPI_Allreduce(MIN). Exits 77 without a GPU, or on a node with
 * fewer GPUs than ranks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "comm.h"
#include "comm_cuda.h"
#include "gpu_test.h"
#include "median.h"

static float value_at(int64_t row, int64_t col) { return (float)(row * 1000 + col) * 0.5f + 0.25f; }

int main(int argc, char **argv) {
  if (comm_cuda_device_count() == 0) {
    printf("no CUDA device: skipped\n");
    return GPU_TEST_SKIP;
  }
  comm_ctx_t ctx;
  memset(&ctx, 0, sizeof ctx);
  GPU_TRY(comm_init(&ctx, &argc, &argv));
  /* NCCL needs a GPU of its own for each rank: every rank of a node must see enough. */
  int enough = comm_cuda_device_count() >= ctx.local_size, all_enough = 0;
  MPI_Allreduce(&enough, &all_enough, 1, MPI_INT, MPI_MIN, ctx.world);
  if (!all_enough) {
    if (ctx.rank == 0) printf("a node runs more ranks than it has GPUs: skipped\n");
    comm_free(&ctx);
    return GPU_TEST_SKIP;
  }
  backend_t *gpu = NULL;
  int status = backend_cuda_create(ctx.local_rank % comm_cuda_device_count(), &gpu);
  if (status != DS_OK) {
    fprintf(stderr, "rank %d: %s\n", ctx.rank, ds_error_message());
    comm_abort(&ctx, 1);
  }
  ctx.device = gpu->device;
  /* "auto" must find the GPUs distinct and take NCCL, as "nccl" requires. */
  status = comm_select_transport(&ctx, "auto", 1, gpu->stream);
  if (status != DS_OK) {
    fprintf(stderr, "rank %d: %s\n", ctx.rank, ds_error_message());
    comm_abort(&ctx, 1);
  }
  GPU_EXPECT(ctx.transport == COMM_TRANSPORT_NCCL, "transport is not NCCL");

  /* n chosen so that blocks are uneven for most rank counts (the padded gather), even (in
   * place), and fewer rows than ranks (ranks with empty blocks); then larger sizes after
   * smaller ones, so the padded blocks' scratch grows. */
  const int64_t sizes[][2] = {{1001, 7}, {2, 3}, {1, 5}, {65536, 129}, {3, 4}, {65537, 131}};
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

  { /* comm's sum to the host, as the median takes it: rank r contributes (r + 1) * (bin + 2^40). */
    const int64_t count = 65538;
    uint64_t *host = test_malloc((size_t)count * sizeof *host), *sums = test_malloc((size_t)count * sizeof *sums);
    uint64_t *dev = NULL;
    for (int64_t b = 0; b < count; ++b) host[b] = (uint64_t)(ctx.rank + 1) * ((uint64_t)b + (1ull << 40));
    GPU_TRY(gpu->alloc(gpu, (void **)&dev, (size_t)count * sizeof(uint64_t)));
    GPU_TRY(gpu->upload(gpu, dev, host, (size_t)count * sizeof(uint64_t)));
    GPU_TRY(comm_allreduce_sum_u64_to_host(&ctx, dev, count, 1, sums));
    const uint64_t ranks_sum = (uint64_t)ctx.size * (uint64_t)(ctx.size + 1) / 2;
    int64_t wrong = 0;
    for (int64_t b = 0; b < count; ++b) wrong += sums[b] != ranks_sum * ((uint64_t)b + (1ull << 40));
    GPU_EXPECT(wrong == 0, "allreduce u64 to the host: %lld wrong bins", (long long)wrong);
    if (ctx.rank == 0)
      printf("allreduce_sum_u64_to_host of %lld over %d rank(s): %lld wrong\n", (long long)count, ctx.size, (long long)wrong);
    gpu->release(gpu, dev);
    free(host);
    free(sums);
  }

  { /* The exact median with the counts summed on the device (over NCCL) is the CPU backend's
     * (summed on the host by MPI) bit for bit: the radix select, then window passes started at
     * its result. n odd, so two ranks own uneven blocks. dim 3: below 4 coordinates both backends
     * compute the same distances (from 4 to 64 the GPU's are the tensor cores', whose median
     * gpu.svgd checks against the GPU's own distances). */
    const int64_t n = 3001, dim = 3;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x), *x_dev = NULL;
    test_fill_normal(x, n * dim, 1.5, 20261212);
    backend_t *cpu = NULL;
    GPU_TRY(backend_cpu_create(&cpu));
    GPU_TRY(gpu->alloc(gpu, (void **)&x_dev, (size_t)(n * dim) * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, x_dev, x, (size_t)(n * dim) * sizeof(float)));
    int64_t begin, end;
    comm_partition(n, ctx.size, ctx.rank, &begin, &end);
    svgd_median_state_t state_cpu, state_gpu;
    svgd_median_state_init(&state_cpu);
    svgd_median_state_init(&state_gpu);
    for (int round = 0; round < 3; ++round) {
      float median_cpu = 0.0f, median_gpu = 0.0f;
      GPU_TRY(svgd_exact_median(&ctx, cpu, x, n, dim, begin, end, &state_cpu, &median_cpu));
      GPU_TRY(svgd_exact_median(&ctx, gpu, x_dev, n, dim, begin, end, &state_gpu, &median_gpu));
      /* Exact: the same bits. */
      GPU_EXPECT(memcmp(&median_cpu, &median_gpu, sizeof median_cpu) == 0,
                 "median round %d: GPU over NCCL %.9g, CPU over MPI %.9g", round, (double)median_gpu,
                 (double)median_cpu);
      if (ctx.rank == 0)
        printf("exact median of %lld particles over %d rank(s), round %d: GPU %.9g, CPU %.9g\n", (long long)n,
               ctx.size, round, (double)median_gpu, (double)median_cpu);
    }
    GPU_EXPECT(state_gpu.window_hits == 2, "the window pass found the unchanged median %lld of 2 times",
               (long long)state_gpu.window_hits);
    gpu->release(gpu, x_dev);
    backend_destroy(cpu);
    free(x);
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
  /* Teardown: NCCL communicator (and its scratch), then CUDA, then MPI. */
  comm_release_transport(&ctx);
  backend_destroy(gpu);
  comm_free(&ctx);
  if (ctx.rank == 0) printf("%s\n", all_ok ? "passed" : "FAILED");
  return all_ok ? 0 : 1;
}
