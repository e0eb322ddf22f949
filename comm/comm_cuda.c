/* comm_cuda.c: the CUDA and NCCL half of comm/: the GPUs' physical identities, the NCCL communicator
 * (rank 0's unique id broadcast over MPI), collectives on device buffers on NCCL's own stream
 * ordered after the compute stream by events, and pinned staging memory. NCCL calls are
 * followed by polling ncclCommGetAsyncError while waiting, so a failed peer ends in
 * ncclCommAbort and an error status, never a hang. */
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "comm_cuda.h"
#include "cuda_check.h"
#include "status.h"

static int nccl_check_fail(ncclResult_t rc, const char *file, int line, const char *call) {
  return ds_fail_at(DS_ERR_GPU, file, line, call, "NCCL error %d: %s", (int)rc, ncclGetErrorString(rc));
}

#define NCCL_CHECK(call)                                                        \
  do {                                                                          \
    ncclResult_t nccl_check_rc_ = (call);                                       \
    if (nccl_check_rc_ != ncclSuccess)                                          \
      return nccl_check_fail(nccl_check_rc_, __FILE__, __LINE__, #call);        \
  } while (0)

int comm_cuda_device_count(void) {
  int count = 0;
  /* No driver or no device is not an error here: it means zero GPUs. */
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

int comm_cuda_set_device(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  return DS_OK;
}

int comm_cuda_gpu_identity(int device, comm_gpu_identity_t *identity) {
  memset(identity, 0, sizeof *identity);
  struct cudaDeviceProp properties;
  CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  memcpy(identity->uuid, properties.uuid.bytes, COMM_GPU_KEY_BYTES);
  /* A driver that reports no UUID leaves zeros: then the PCI address tells the GPU. */
  for (int b = 0; b < COMM_GPU_KEY_BYTES; ++b) identity->has_uuid |= identity->uuid[b] != 0;
  identity->pci_domain = properties.pciDomainID;
  identity->pci_bus = properties.pciBusID;
  identity->pci_device = properties.pciDeviceID;
  return DS_OK;
}

/* Every rank learns whether rank 0 got an id, so no rank waits on a failed one. */
typedef struct nccl_bootstrap {
  int status;
  ncclUniqueId id;
} nccl_bootstrap_t;

int comm_cuda_nccl_init(comm_ctx_t *ctx) {
  nccl_bootstrap_t boot;
  memset(&boot, 0, sizeof boot);
  if (ctx->rank == 0) {
    ncclResult_t rc = ncclGetUniqueId(&boot.id);
    boot.status = rc == ncclSuccess ? DS_OK : nccl_check_fail(rc, __FILE__, __LINE__, "ncclGetUniqueId(&boot.id)");
  }
  MPI_CHECK(MPI_Bcast(&boot, (int)sizeof boot, MPI_BYTE, 0, ctx->world));
  if (boot.status != DS_OK)
    return ctx->rank == 0 ? boot.status : ds_fail(DS_ERR_GPU, "NCCL: rank 0 could not create the unique id");

  cudaStream_t stream = NULL;
  int status = DS_OK;
  cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (err != cudaSuccess) status = cuda_check_fail(err, __FILE__, __LINE__, "cudaStreamCreateWithFlags(&stream)");
  int worst = status;
  MPI_CHECK(MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, ctx->world));
  if (worst != DS_OK) {
    if (stream) CUDA_CHECK_NORETURN(cudaStreamDestroy(stream));
    return status != DS_OK ? status : ds_fail(DS_ERR_GPU, "NCCL: another rank could not create its stream");
  }

  ncclComm_t comm = NULL;
  ncclResult_t rc = ncclCommInitRank(&comm, ctx->size, boot.id, ctx->rank);
  if (rc != ncclSuccess) {
    CUDA_CHECK_NORETURN(cudaStreamDestroy(stream));
    return nccl_check_fail(rc, __FILE__, __LINE__, "ncclCommInitRank(&comm, size, id, rank)");
  }
  ctx->nccl = comm;
  ctx->nccl_stream = stream;
  return DS_OK;
}

void comm_cuda_nccl_free(comm_ctx_t *ctx) {
  if (ctx->nccl) {
    ncclResult_t rc = ncclCommDestroy((ncclComm_t)ctx->nccl);
    if (rc != ncclSuccess) (void)nccl_check_fail(rc, __FILE__, __LINE__, "ncclCommDestroy(ctx->nccl)");
    ctx->nccl = NULL;
  }
  if (ctx->nccl_stream) {
    CUDA_CHECK_NORETURN(cudaStreamDestroy((cudaStream_t)ctx->nccl_stream));
    ctx->nccl_stream = NULL;
  }
}

/* Makes NCCL's stream wait for the work queued so far on the compute stream. */
static int nccl_after_compute(comm_ctx_t *ctx) {
  cudaEvent_t ready;
  CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(ready, (cudaStream_t)ctx->compute_stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent((cudaStream_t)ctx->nccl_stream, ready, 0);
  CUDA_CHECK_NORETURN(cudaEventDestroy(ready));
  if (err != cudaSuccess) return cuda_check_fail(err, __FILE__, __LINE__, "ordering NCCL after the compute stream");
  return DS_OK;
}

/* Orders the compute stream after the NCCL work just queued, then waits for it while
 * polling the communicator: an asynchronous NCCL error aborts the communicator. */
static int nccl_finish(comm_ctx_t *ctx) {
  cudaEvent_t done;
  CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  cudaError_t err = cudaEventRecord(done, (cudaStream_t)ctx->nccl_stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent((cudaStream_t)ctx->compute_stream, done, 0);
  int status = DS_OK;
  if (err != cudaSuccess) status = cuda_check_fail(err, __FILE__, __LINE__, "ordering compute after NCCL");
  while (status == DS_OK) {
    err = cudaEventQuery(done);
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) {
      status = cuda_check_fail(err, __FILE__, __LINE__, "cudaEventQuery(done)");
      break;
    }
    ncclResult_t async_rc = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError((ncclComm_t)ctx->nccl, &async_rc);
    if (rc != ncclSuccess) {
      status = nccl_check_fail(rc, __FILE__, __LINE__, "ncclCommGetAsyncError(ctx->nccl, &async_rc)");
    } else if (async_rc != ncclSuccess && async_rc != ncclInProgress) {
      status = nccl_check_fail(async_rc, __FILE__, __LINE__, "asynchronous NCCL error");
    }
    if (status != DS_OK) {
      /* Peers may be waiting inside the collective: abort the communicator, then the job, so
       * no rank is left hanging (DESIGN.md). */
      (void)ncclCommAbort((ncclComm_t)ctx->nccl);
      ctx->nccl = NULL;
      fprintf(stderr, "dsampler: error: rank %d on %s: %s\n", ctx->rank, ctx->host, ds_error_message());
      comm_abort(ctx, 1);
    }
    sched_yield();
  }
  CUDA_CHECK_NORETURN(cudaEventDestroy(done));
  return status;
}

int comm_cuda_nccl_allgather_rows(comm_ctx_t *ctx, float *buf, int64_t n, int64_t row_floats) {
  if (!ctx->nccl) return ds_fail(DS_ERR_GPU, "NCCL: the communicator is not (or no longer) open");
  DS_TRY(nccl_after_compute(ctx));
  NCCL_CHECK(ncclGroupStart());
  for (int root = 0; root < ctx->size; ++root) {
    int64_t begin, end;
    comm_partition(n, ctx->size, root, &begin, &end);
    const size_t count = (size_t)((end - begin) * row_floats);
    if (count == 0) continue; /* the same on every rank, so the group matches */
    float *block = buf + begin * row_floats;
    ncclResult_t rc = ncclBroadcast(block, block, count, ncclFloat, root, (ncclComm_t)ctx->nccl,
                                    (cudaStream_t)ctx->nccl_stream);
    if (rc != ncclSuccess) {
      (void)ncclGroupEnd();
      return nccl_check_fail(rc, __FILE__, __LINE__, "ncclBroadcast(block, block, count, ncclFloat, root)");
    }
  }
  NCCL_CHECK(ncclGroupEnd());
  return nccl_finish(ctx);
}

int comm_cuda_nccl_allreduce_sum_u64(comm_ctx_t *ctx, uint64_t *buf, int64_t count) {
  if (!ctx->nccl) return ds_fail(DS_ERR_GPU, "NCCL: the communicator is not (or no longer) open");
  if (count <= 0) return DS_OK;
  DS_TRY(nccl_after_compute(ctx));
  NCCL_CHECK(ncclAllReduce(buf, buf, (size_t)count, ncclUint64, ncclSum, (ncclComm_t)ctx->nccl,
                           (cudaStream_t)ctx->nccl_stream));
  return nccl_finish(ctx);
}

int comm_cuda_copy(comm_ctx_t *ctx, void *dst, const void *src, size_t bytes, int to_device) {
  if (bytes == 0) return DS_OK;
  cudaStream_t stream = (cudaStream_t)ctx->compute_stream;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return DS_OK;
}

int comm_cuda_host_alloc(void **ptr, size_t bytes) {
  *ptr = NULL;
  if (bytes == 0) return DS_OK;
  CUDA_CHECK(cudaMallocHost(ptr, bytes));
  return DS_OK;
}

void comm_cuda_host_free(void *ptr) {
  if (ptr) CUDA_CHECK_NORETURN(cudaFreeHost(ptr));
}
