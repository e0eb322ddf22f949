/* comm.c: MPI bootstrap, rank-to-device mapping, partitioning and the collectives, over MPI
 * on host buffers or, through comm_cuda.c, over NCCL or staged MPI on device buffers. */
#include "comm.h"

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_cuda.h"
#include "status.h"

/* Open MPI declares MPIX_Query_cuda_support() here when it was built with CUDA support. */
#if defined(__has_include)
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif
#endif

/* 1 when this process's MPI reads and writes device buffers itself. */
static int mpi_is_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return 0;
#endif
}

int comm_mpi_fail(int rc, const char *file, int line, const char *call) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  return ds_fail_at(DS_ERR_MPI, file, line, call, "%s", text);
}

int comm_init(comm_ctx_t *ctx, int *argc, char ***argv) {
  memset(ctx, 0, sizeof *ctx);
  ctx->world = MPI_COMM_NULL;
  ctx->device = -1;
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  /* Threads: the output's writer runs its collectives beside the sampler's (draw_writer.h). */
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &ctx->world));
  /* Errors come back as codes, so every failure is reported where it happens. */
  MPI_CHECK(MPI_Comm_set_errhandler(ctx->world, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(ctx->world, &ctx->rank));
  MPI_CHECK(MPI_Comm_size(ctx->world, &ctx->size));
  MPI_Comm node;
  MPI_CHECK(MPI_Comm_split_type(ctx->world, MPI_COMM_TYPE_SHARED, ctx->rank, MPI_INFO_NULL, &node));
  MPI_CHECK(MPI_Comm_rank(node, &ctx->local_rank));
  MPI_CHECK(MPI_Comm_size(node, &ctx->local_size));
  MPI_CHECK(MPI_Comm_free(&node));
  if (gethostname(ctx->host, sizeof ctx->host - 1) != 0) snprintf(ctx->host, sizeof ctx->host, "unknown");
  return DS_OK;
}

int comm_select_transport(comm_ctx_t *ctx, const char *requested, int backend_on_device,
                          void *compute_stream) {
  ctx->compute_stream = compute_stream;
  if (strcmp(requested, "auto") != 0 && strcmp(requested, "mpi") != 0 && strcmp(requested, "nccl") != 0)
    return ds_fail(DS_ERR_INPUT, "--comm: expected auto, nccl or mpi, got '%s'", requested);
  /* NCCL needs one distinct GPU per rank: on one node that means local_size <= devices. */
  int distinct = 0;
  if (backend_on_device) {
    int devices = comm_cuda_device_count();
    int node_ok = devices > 0 && ctx->local_size <= devices;
    int all_ok = 0;
    MPI_CHECK(MPI_Allreduce(&node_ok, &all_ok, 1, MPI_INT, MPI_MIN, ctx->world));
    distinct = all_ok;
  }
  if (strcmp(requested, "nccl") == 0) {
    if (!backend_on_device)
      return ds_fail(DS_ERR_INPUT, "--comm nccl: needs the CUDA backend (--backend cuda)");
    if (!distinct)
      return ds_fail(DS_ERR_INPUT, "--comm nccl: NCCL needs one distinct GPU per rank, but some "
                                   "node runs more ranks than it has GPUs; use --comm mpi");
  }
  if (backend_on_device) {
    /* Device buffers go to MPI directly only when every rank's MPI takes them. */
    int aware = mpi_is_cuda_aware(), all_aware = 0;
    MPI_CHECK(MPI_Allreduce(&aware, &all_aware, 1, MPI_INT, MPI_MIN, ctx->world));
    ctx->mpi_cuda_aware = all_aware;
  }
  int use_nccl = backend_on_device && distinct && strcmp(requested, "mpi") != 0;
  if (use_nccl) {
    DS_TRY(comm_cuda_nccl_init(ctx));
    ctx->transport = COMM_TRANSPORT_NCCL;
  } else {
    ctx->transport = COMM_TRANSPORT_MPI;
  }
  return DS_OK;
}

void comm_release_transport(comm_ctx_t *ctx) {
  if (ctx->transport == COMM_TRANSPORT_NCCL) comm_cuda_nccl_free(ctx);
  ctx->transport = COMM_TRANSPORT_MPI;
  if (ctx->staging) comm_cuda_host_free(ctx->staging);
  ctx->staging = NULL;
  ctx->staging_bytes = 0;
}

void comm_free(comm_ctx_t *ctx) {
  comm_release_transport(ctx);
  if (ctx->world != MPI_COMM_NULL) MPI_Comm_free(&ctx->world);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void comm_abort(comm_ctx_t *ctx, int code) {
  fflush(stdout);
  fflush(stderr);
  MPI_Abort(ctx && ctx->world != MPI_COMM_NULL ? ctx->world : MPI_COMM_WORLD, code);
  exit(code);
}

void comm_partition(int64_t n, int size, int rank, int64_t *begin, int64_t *end) {
  /* n * rank can overflow int64 only past 2^63 / size items. */
  *begin = (int64_t)((__int128)n * rank / size);
  *end = (int64_t)((__int128)n * (rank + 1) / size);
}

static int ensure_staging(comm_ctx_t *ctx, size_t bytes) {
  if (ctx->staging_bytes >= bytes) return DS_OK;
  if (ctx->staging) comm_cuda_host_free(ctx->staging);
  ctx->staging = NULL;
  ctx->staging_bytes = 0;
  DS_TRY(comm_cuda_host_alloc(&ctx->staging, bytes));
  ctx->staging_bytes = bytes;
  return DS_OK;
}

/* MPI_Allgatherv of whole rows, counted in rows of a contiguous type so counts fit an int. */
static int mpi_allgather_rows(comm_ctx_t *ctx, float *buf, int64_t n, int64_t row_floats) {
  if (n > INT_MAX || row_floats > INT_MAX)
    return ds_fail(DS_ERR_INPUT, "allgather of %lld rows of %lld floats exceeds MPI's int counts",
                   (long long)n, (long long)row_floats);
  int *counts = malloc((size_t)ctx->size * sizeof *counts);
  int *displs = malloc((size_t)ctx->size * sizeof *displs);
  if (!counts || !displs) {
    free(counts);
    free(displs);
    return DS_FAIL_ALLOC("allgather counts", (size_t)ctx->size * sizeof(int));
  }
  for (int r = 0; r < ctx->size; ++r) {
    int64_t begin, end;
    comm_partition(n, ctx->size, r, &begin, &end);
    counts[r] = (int)(end - begin);
    displs[r] = (int)begin;
  }
  MPI_Datatype row;
  int rc = MPI_Type_contiguous((int)row_floats, MPI_FLOAT, &row);
  if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&row);
  if (rc == MPI_SUCCESS) {
    rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, row, ctx->world);
    MPI_Type_free(&row);
  }
  free(counts);
  free(displs);
  if (rc != MPI_SUCCESS) return comm_mpi_fail(rc, __FILE__, __LINE__, "MPI_Allgatherv(rows)");
  return DS_OK;
}

int comm_allgather_rows(comm_ctx_t *ctx, float *buf, int64_t n, int64_t row_floats, int on_device) {
  if (!on_device) return mpi_allgather_rows(ctx, buf, n, row_floats);
  if (ctx->transport == COMM_TRANSPORT_NCCL) return comm_cuda_nccl_allgather_rows(ctx, buf, n, row_floats);
  if (ctx->mpi_cuda_aware) return mpi_allgather_rows(ctx, buf, n, row_floats);
  /* Device buffers over an MPI that cannot read them: stage through pinned host memory. */
  size_t bytes = (size_t)(n * row_floats) * sizeof(float);
  /* Every rank reaches the allgather, or none does. */
  DS_TRY(comm_agree(ctx, ensure_staging(ctx, bytes)));
  int64_t begin, end;
  comm_partition(n, ctx->size, ctx->rank, &begin, &end);
  size_t offset = (size_t)(begin * row_floats) * sizeof(float);
  size_t mine = (size_t)((end - begin) * row_floats) * sizeof(float);
  char *staging = ctx->staging;
  DS_TRY(comm_cuda_copy(ctx, staging + offset, (char *)buf + offset, mine, 0));
  DS_TRY(mpi_allgather_rows(ctx, (float *)staging, n, row_floats));
  return comm_cuda_copy(ctx, buf, staging, bytes, 1);
}

/* MPI counts are int: long arrays go in pieces. */
static int mpi_allreduce_chunked(comm_ctx_t *ctx, void *buf, int64_t count, size_t elem,
                                 MPI_Datatype type, MPI_Op op) {
  const int64_t chunk = 1 << 28;
  for (int64_t done = 0; done < count; done += chunk) {
    int64_t part = count - done < chunk ? count - done : chunk;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, (char *)buf + (size_t)done * elem, (int)part, type, op, ctx->world));
  }
  return DS_OK;
}

int comm_allreduce_sum_u64(comm_ctx_t *ctx, uint64_t *buf, int64_t count) {
  return mpi_allreduce_chunked(ctx, buf, count, sizeof *buf, MPI_UINT64_T, MPI_SUM);
}

int comm_allreduce_sum_double(comm_ctx_t *ctx, double *buf, int64_t count) {
  return mpi_allreduce_chunked(ctx, buf, count, sizeof *buf, MPI_DOUBLE, MPI_SUM);
}

int comm_allreduce_max_double(comm_ctx_t *ctx, double *buf, int64_t count) {
  return mpi_allreduce_chunked(ctx, buf, count, sizeof *buf, MPI_DOUBLE, MPI_MAX);
}

int comm_barrier(comm_ctx_t *ctx) {
  MPI_CHECK(MPI_Barrier(ctx->world));
  return DS_OK;
}

int comm_bcast(comm_ctx_t *ctx, void *buf, int64_t bytes, int root) {
  if (bytes > INT_MAX) return ds_fail(DS_ERR_INTERNAL, "broadcast of %lld bytes is too large", (long long)bytes);
  MPI_CHECK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, ctx->world));
  return DS_OK;
}

/* Ranks that cannot even agree on a failure would be left waiting in the next collective:
 * the only way out that reaches every rank is MPI_Abort. */
static void agreement_broken(MPI_Comm comm, int rc, const char *call) {
  char text[MPI_MAX_ERROR_STRING] = "";
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  int rank = -1;
  MPI_Comm_rank(comm, &rank);
  fprintf(stderr, "dsampler: error: rank %d on %s: %s failed while the ranks agreed on a status (%s); "
                  "ending every rank\n", rank, host, call, text);
  fflush(stderr);
  MPI_Abort(comm, 1);
  _exit(1);
}

int comm_agree_on(MPI_Comm comm, const char *host, int status) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int mine = status != DS_OK ? rank : size, first = size;
  int rc = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (rc != MPI_SUCCESS) agreement_broken(comm, rc, "MPI_Allreduce");
  if (first == size) return DS_OK;
  struct { int code; char message[1800]; } report;
  memset(&report, 0, sizeof report);
  if (rank == first) {
    char own_host[256] = "unknown";
    if (!host) {
      gethostname(own_host, sizeof own_host - 1);
      host = own_host;
    }
    report.code = status;
    if (first == 0)
      snprintf(report.message, sizeof report.message, "%s", ds_error_message());
    else
      snprintf(report.message, sizeof report.message, "rank %d on %s: %s", rank, host, ds_error_message());
  }
  rc = MPI_Bcast(&report, (int)sizeof report, MPI_BYTE, first, comm);
  if (rc != MPI_SUCCESS) agreement_broken(comm, rc, "MPI_Bcast");
  ds_error_set_message(report.message);
  return report.code;
}

int comm_agree(comm_ctx_t *ctx, int status) { return comm_agree_on(ctx->world, ctx->host, status); }

/* The watchdog. A rank that recorded an error should reach the end of main within seconds;
 * one still running long after is stuck: in a collective the others left (HDF5 diverged
 * inside a flush after a failed write, say). Then MPI_Abort ends every rank, so no job
 * waits for its time limit. */
static atomic_llong watchdog_deadline; /* CLOCK_MONOTONIC seconds; 0: disarmed */
static long long watchdog_seconds;
static int watchdog_rank;
static char watchdog_host[256];

static long long monotonic_seconds(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (long long)now.tv_sec;
}

static void watchdog_arm(int recorded) {
  if (!recorded) {
    atomic_store(&watchdog_deadline, 0);
    return;
  }
  long long expected = 0;
  atomic_compare_exchange_strong(&watchdog_deadline, &expected, monotonic_seconds() + watchdog_seconds);
}

static void *watchdog_main(void *unused) {
  (void)unused;
  for (;;) {
    sleep(1);
    long long deadline = atomic_load(&watchdog_deadline);
    if (deadline == 0 || monotonic_seconds() < deadline) continue;
    fprintf(stderr, "dsampler: error: rank %d on %s: still running %lld s after its error (%s); ending every rank\n",
            watchdog_rank, watchdog_host, watchdog_seconds, ds_error_message());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
  }
  return NULL;
}

int comm_watchdog_start(comm_ctx_t *ctx) {
  const char *text = getenv("DSAMPLER_ERROR_WATCHDOG_SECONDS");
  watchdog_seconds = text ? atoll(text) : COMM_WATCHDOG_DEFAULT_SECONDS;
  if (watchdog_seconds <= 0) return DS_OK;
  watchdog_rank = ctx->rank;
  snprintf(watchdog_host, sizeof watchdog_host, "%s", ctx->host);
  pthread_t thread;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return ds_fail(DS_ERR_INTERNAL, "cannot start the error watchdog");
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&thread, &attr, watchdog_main, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) return ds_fail(DS_ERR_INTERNAL, "cannot start the error watchdog: %s", strerror(rc));
  ds_error_set_hook(watchdog_arm);
  return DS_OK;
}
