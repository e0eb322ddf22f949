/* comm_cuda.c: the CUDA and NCCL half of comm/: the GPUs' physical identities, the NCCL
 * communicator (rank 0's unique id broadcast over MPI), collectives on device buffers on NCCL's
 * own stream ordered after the compute stream by events, and pinned staging memory.
 *
 * The communicator is non-blocking (config.blocking = 0), so that joining it can time out:
 * a peer that never arrives ends in an error naming the rank, not in a hang. NCCL's rule for
 * such a communicator is that a call answering ncclInProgress is polled
 * (ncclCommGetAsyncError) until it is issued before anything else touches the communicator or
 * its stream; every call below does so. While a collective runs the communicator is polled
 * too. Once the peers may be inside a collective, any failure of this rank (NCCL's, or CUDA's
 * around it) would leave them waiting there: it ends in ncclCommAbort and MPI_Abort. */
#include <nccl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_cuda.h"
#include "cuda_check.h"
#include "status.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "dsampler needs NCCL 2.14 or newer (non-blocking communicators, ncclCommInitRankConfig)"
#endif

/* The NCCL checker: records the failing call's text and NCCL's message. Calls on the
 * communicator are checked by NCCL_ISSUE (below), which also waits for them to be issued. */
static int nccl_check_fail(ncclResult_t rc, const char *file, int line, const char *call) {
  return ds_fail_at(DS_ERR_GPU, file, line, call, "NCCL error %d: %s", (int)rc, ncclGetErrorString(rc));
}

static double monotonic_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

int comm_cuda_device_count(void) {
  int count = 0;
  /* No driver or no device is not an error here: it means zero GPUs. */
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
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

/* DSAMPLER_NCCL_INIT_TIMEOUT, seconds, or COMM_NCCL_TIMEOUT_DEFAULT_SECONDS when unset. */
static int nccl_timeout_from_env(double *seconds) {
  *seconds = COMM_NCCL_TIMEOUT_DEFAULT_SECONDS;
  const char *text = getenv("DSAMPLER_NCCL_INIT_TIMEOUT");
  if (!text || !text[0]) return DS_OK;
  char *end = NULL;
  double value = strtod(text, &end);
  /* The comparison also refuses NaN and infinity. */
  if (end == text || *end != '\0' || !(value > 0.0 && value <= 1e9))
    return ds_fail(DS_ERR_INPUT, "DSAMPLER_NCCL_INIT_TIMEOUT=%s: expected a positive number of seconds", text);
  *seconds = value;
  return DS_OK;
}

/* Polls the communicator's state until it leaves ncclInProgress: ncclSuccess or an error, or
 * still ncclInProgress once timeout_seconds have passed. Joining takes seconds, so that poll
 * sleeps between queries; issuing a collective takes microseconds, so that one only yields. */
static ncclResult_t nccl_poll_until_ready(ncclComm_t comm, double timeout_seconds, int sleep_between) {
  const double deadline = monotonic_seconds() + timeout_seconds;
  for (;;) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return rc;
    if (state != ncclInProgress) return state;
    if (monotonic_seconds() >= deadline) return ncclInProgress;
    if (sleep_between) {
      const struct timespec pause = {0, 1000000};
      nanosleep(&pause, NULL);
    } else {
      sched_yield();
    }
  }
}

/* Every rank learns whether rank 0 got an id, so no rank waits on a failed one. */
typedef struct nccl_bootstrap {
  int status;
  ncclUniqueId id;
} nccl_bootstrap_t;

/* This rank's part of joining: the communicator, or an error naming why it could not join.
 * comm_agree names a failing rank other than 0 with its host; rank 0 names itself. */
static int nccl_join(comm_ctx_t *ctx, const ncclUniqueId *id, ncclComm_t *joined) {
  *joined = NULL;
  ncclComm_t comm = NULL;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, ctx->size, *id, ctx->rank, &config);
  if ((rc == ncclSuccess || rc == ncclInProgress) && comm)
    rc = nccl_poll_until_ready(comm, ctx->nccl_timeout_seconds, 1);
  else if (rc == ncclSuccess)
    rc = ncclInternalError; /* success without a communicator: not NCCL's contract */
  if (rc == ncclSuccess) {
    *joined = comm;
    return DS_OK;
  }
  char self[300] = "";
  if (ctx->rank == 0) snprintf(self, sizeof self, "rank 0 on %s: ", ctx->host);
  int status;
  if (rc == ncclInProgress)
    status = ds_fail(DS_ERR_GPU, "%sNCCL could not join the communicator within %g s: not every rank arrived (one "
                                 "stopped, or the network between nodes blocks NCCL; NCCL_DEBUG=INFO tells more; "
                                 "DSAMPLER_NCCL_INIT_TIMEOUT sets the wait)",
                     self, ctx->nccl_timeout_seconds);
  else
    status = ds_fail(DS_ERR_GPU, "%sNCCL could not join the communicator: NCCL error %d: %s (%s)", self, (int)rc,
                     ncclGetErrorString(rc), ncclGetLastError(comm));
  /* Abort, not destroy: a communicator that has not formed cannot be torn down in order. */
  if (comm) (void)ncclCommAbort(comm);
  return status;
}

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
  int status = nccl_timeout_from_env(&ctx->nccl_timeout_seconds);
  if (status == DS_OK) {
    cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (err != cudaSuccess) status = cuda_check_fail(err, __FILE__, __LINE__, "cudaStreamCreateWithFlags(&stream)");
  }
  status = comm_agree(ctx, status);
  if (status != DS_OK) {
    if (stream) CUDA_CHECK_NORETURN(cudaStreamDestroy(stream));
    return status;
  }

  ncclComm_t comm = NULL;
  status = comm_agree(ctx, nccl_join(ctx, &boot.id, &comm));
  if (status != DS_OK) {
    /* This rank joined but another did not: the communicator lacks a member. */
    if (comm) (void)ncclCommAbort(comm);
    CUDA_CHECK_NORETURN(cudaStreamDestroy(stream));
    return status;
  }
  ctx->nccl = comm;
  ctx->nccl_stream = stream;
  return DS_OK;
}

void comm_cuda_nccl_free(comm_ctx_t *ctx) {
  if (ctx->nccl) {
    /* ncclCommDestroy blocks whatever the communicator's mode, and waits for this rank's own
     * work only. */
    ncclResult_t rc = ncclCommDestroy((ncclComm_t)ctx->nccl);
    if (rc != ncclSuccess) (void)nccl_check_fail(rc, __FILE__, __LINE__, "ncclCommDestroy(ctx->nccl)");
    ctx->nccl = NULL;
  }
  if (ctx->nccl_scratch) {
    CUDA_CHECK_NORETURN(cudaFree(ctx->nccl_scratch));
    ctx->nccl_scratch = NULL;
    ctx->nccl_scratch_bytes = 0;
  }
  if (ctx->nccl_stream) {
    CUDA_CHECK_NORETURN(cudaStreamDestroy((cudaStream_t)ctx->nccl_stream));
    ctx->nccl_stream = NULL;
  }
}

/* This rank failed where its peers may be waiting for it inside a collective: abort the
 * communicator, then the job (DESIGN.md: never a hang). The error is recorded already. */
static void nccl_fatal(comm_ctx_t *ctx) __attribute__((noreturn));
static void nccl_fatal(comm_ctx_t *ctx) {
  if (ctx->nccl) (void)ncclCommAbort((ncclComm_t)ctx->nccl);
  ctx->nccl = NULL;
  fprintf(stderr, "dsampler: error: rank %d on %s: %s\n", ctx->rank, ctx->host, ds_error_message());
  comm_abort(ctx, 1);
}

/* After an NCCL call on the communicator: returns once the call is issued (ncclSuccess, or
 * ncclInProgress polled until the state is ncclSuccess); ends the job otherwise. The first
 * calls of a kind connect the ranks, so an absent peer shows here: hence the timeout. */
static void nccl_issued(comm_ctx_t *ctx, ncclResult_t rc, const char *file, int line, const char *call) {
  if (rc == ncclInProgress) rc = nccl_poll_until_ready((ncclComm_t)ctx->nccl, ctx->nccl_timeout_seconds, 0);
  if (rc == ncclSuccess) return;
  if (rc == ncclInProgress)
    (void)ds_fail_at(DS_ERR_GPU, file, line, call, "NCCL could not issue the call within %g s: a peer rank "
                                                  "stopped or cannot be reached (DSAMPLER_NCCL_INIT_TIMEOUT sets the wait)",
                     ctx->nccl_timeout_seconds);
  else
    (void)nccl_check_fail(rc, file, line, call);
  nccl_fatal(ctx);
}
#define NCCL_ISSUE(ctx, call) nccl_issued((ctx), (call), __FILE__, __LINE__, #call)

/* Makes NCCL's stream wait for the work queued so far on the compute stream. The peers are
 * about to enter the collective: a failure here ends the job. */
static void nccl_after_compute(comm_ctx_t *ctx) {
  cudaEvent_t ready;
  cudaError_t err = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (err == cudaSuccess) {
    err = cudaEventRecord(ready, (cudaStream_t)ctx->compute_stream);
    if (err == cudaSuccess) err = cudaStreamWaitEvent((cudaStream_t)ctx->nccl_stream, ready, 0);
    CUDA_CHECK_NORETURN(cudaEventDestroy(ready));
  }
  if (err != cudaSuccess) {
    (void)cuda_check_fail(err, __FILE__, __LINE__, "ordering NCCL after the compute stream");
    nccl_fatal(ctx);
  }
}

/* Orders the compute stream after the NCCL work just queued, then waits for it while
 * polling the communicator: an asynchronous NCCL error ends the job. */
static int nccl_finish(comm_ctx_t *ctx) {
  cudaEvent_t done;
  cudaError_t err = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (err != cudaSuccess) {
    (void)cuda_check_fail(err, __FILE__, __LINE__, "cudaEventCreateWithFlags(&done)");
    nccl_fatal(ctx);
  }
  err = cudaEventRecord(done, (cudaStream_t)ctx->nccl_stream);
  if (err == cudaSuccess) err = cudaStreamWaitEvent((cudaStream_t)ctx->compute_stream, done, 0);
  if (err != cudaSuccess) {
    (void)cuda_check_fail(err, __FILE__, __LINE__, "ordering compute after NCCL");
    nccl_fatal(ctx);
  }
  for (;;) {
    err = cudaEventQuery(done);
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) {
      (void)cuda_check_fail(err, __FILE__, __LINE__, "cudaEventQuery(done)");
      nccl_fatal(ctx);
    }
    ncclResult_t async_rc = ncclSuccess;
    ncclResult_t rc = ncclCommGetAsyncError((ncclComm_t)ctx->nccl, &async_rc);
    if (rc != ncclSuccess) {
      (void)nccl_check_fail(rc, __FILE__, __LINE__, "ncclCommGetAsyncError(ctx->nccl, &async_rc)");
      nccl_fatal(ctx);
    }
    if (async_rc != ncclSuccess && async_rc != ncclInProgress) {
      (void)nccl_check_fail(async_rc, __FILE__, __LINE__, "asynchronous NCCL error");
      nccl_fatal(ctx);
    }
    sched_yield();
  }
  CUDA_CHECK_NORETURN(cudaEventDestroy(done));
  return DS_OK;
}

/* Grow-only: the padded allgather needs size * ceil(n / size) rows. */
static int ensure_nccl_scratch(comm_ctx_t *ctx, size_t bytes) {
  if (ctx->nccl_scratch_bytes >= bytes) return DS_OK;
  if (ctx->nccl_scratch) {
    void *old = ctx->nccl_scratch;
    ctx->nccl_scratch = NULL;
    ctx->nccl_scratch_bytes = 0;
    CUDA_CHECK(cudaFree(old));
  }
  cudaError_t err = cudaMalloc(&ctx->nccl_scratch, bytes);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    ctx->nccl_scratch = NULL;
    if (err == cudaErrorMemoryAllocation) return DS_FAIL_ALLOC("the NCCL allgather's padded blocks", bytes);
    return cuda_check_fail(err, __FILE__, __LINE__, "cudaMalloc(&ctx->nccl_scratch, bytes)");
  }
  ctx->nccl_scratch_bytes = bytes;
  return DS_OK;
}

int comm_cuda_nccl_allgather_rows(comm_ctx_t *ctx, float *buf, int64_t n, int64_t row_floats) {
  if (!ctx->nccl) return ds_fail(DS_ERR_GPU, "NCCL: the communicator is not (or no longer) open");
  if (n <= 0 || row_floats <= 0) return DS_OK; /* the same on every rank: nothing moves */
  /* ncclAllGather takes one count from every rank; comm_partition's blocks differ by a row
   * when size does not divide n. Then each block travels padded to the longest one,
   * ceil(n / size) rows, in the scratch buffer, and is copied into place after. */
  const int64_t block_rows = (n + ctx->size - 1) / ctx->size;
  const size_t block_floats = (size_t)(block_rows * row_floats);
  const int padded = n % ctx->size != 0;
  float *gathered = buf;
  if (padded) {
    const size_t bytes = (size_t)ctx->size * block_floats * sizeof(float);
    /* Every rank's scratch has grown through the same sizes, so all ranks take this branch
     * together, and agree on its outcome before any enters the allgather. */
    if (ctx->nccl_scratch_bytes < bytes) DS_TRY(comm_agree(ctx, ensure_nccl_scratch(ctx, bytes)));
    gathered = ctx->nccl_scratch;
  }
  cudaStream_t stream = (cudaStream_t)ctx->nccl_stream;
  int64_t begin, end;
  comm_partition(n, ctx->size, ctx->rank, &begin, &end);
  float *mine = gathered + (size_t)ctx->rank * block_floats;
  nccl_after_compute(ctx);
  if (padded && end > begin) {
    cudaError_t err = cudaMemcpyAsync(mine, buf + begin * row_floats, (size_t)((end - begin) * row_floats) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) {
      (void)cuda_check_fail(err, __FILE__, __LINE__, "cudaMemcpyAsync(my block into the padded blocks)");
      nccl_fatal(ctx);
    }
  }
  /* In place: this rank's block already sits at its offset of the result. */
  NCCL_ISSUE(ctx, ncclAllGather(mine, gathered, block_floats, ncclFloat, (ncclComm_t)ctx->nccl, stream));
  for (int r = 0; padded && r < ctx->size; ++r) {
    int64_t r_begin, r_end;
    comm_partition(n, ctx->size, r, &r_begin, &r_end);
    if (r == ctx->rank || r_end == r_begin) continue;
    cudaError_t err = cudaMemcpyAsync(buf + r_begin * row_floats, gathered + (size_t)r * block_floats,
                                      (size_t)((r_end - r_begin) * row_floats) * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream);
    if (err != cudaSuccess) {
      (void)cuda_check_fail(err, __FILE__, __LINE__, "cudaMemcpyAsync(a gathered block into place)");
      nccl_fatal(ctx);
    }
  }
  return nccl_finish(ctx);
}

int comm_cuda_nccl_allreduce_sum_u64(comm_ctx_t *ctx, uint64_t *buf, int64_t count) {
  if (!ctx->nccl) return ds_fail(DS_ERR_GPU, "NCCL: the communicator is not (or no longer) open");
  if (count <= 0) return DS_OK;
  nccl_after_compute(ctx);
  NCCL_ISSUE(ctx, ncclAllReduce(buf, buf, (size_t)count, ncclUint64, ncclSum, (ncclComm_t)ctx->nccl,
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
