/* comm.c: MPI bootstrap, rank-to-device mapping, partitioning and the collectives, over MPI
 * on host buffers or, through comm_cuda.c, over NCCL or staged MPI on device buffers. */
#include "comm.h"

#include <limits.h>
#include <stdarg.h>
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

int comm_init(comm_ctx_t *ctx, int *argc, char ***argv) {
  memset(ctx, 0, sizeof *ctx);
  ctx->world = MPI_COMM_NULL;
  ctx->device = -1;
  int initialized = 0;
  MPI_CHECK(MPI_Initialized(&initialized));
  /* Threads: the output's writer runs its collectives beside the sampler's (draw_writer.h). */
  int provided = MPI_THREAD_SINGLE;
  /* Open MPI's MPI-IO picks a shared-file-pointer component at every collective open, HDF5's
   * too, although dsampler never uses a shared file pointer; its `lockedfile` component
   * formats a lock file's name from the path into a fixed buffer and aborts the process
   * (glibc's buffer overflow check) once the path passes about 245 characters. Excluding it
   * (unless the user chose the components) leaves `sm` and `individual`, which take any
   * path. */
  if (!initialized) setenv("OMPI_MCA_sharedfp", "^lockedfile", 0);
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
  MPI_CHECK(MPI_Allreduce(&ctx->rank, &ctx->node_first_rank, 1, MPI_INT, MPI_MIN, node));
  MPI_CHECK(MPI_Comm_free(&node));
  if (gethostname(ctx->host, sizeof ctx->host - 1) != 0) snprintf(ctx->host, sizeof ctx->host, "unknown");
  return DS_OK;
}

void comm_gpu_key(const comm_gpu_identity_t *identity, int host_index, unsigned char key[COMM_GPU_KEY_BYTES]) {
  if (identity->has_uuid) {
    memcpy(key, identity->uuid, COMM_GPU_KEY_BYTES);
    return;
  }
  comm_gpu_pci_key(identity, host_index, key);
}

void comm_gpu_pci_key(const comm_gpu_identity_t *identity, int host_index, unsigned char key[COMM_GPU_KEY_BYTES]) {
  /* "pci:", then host index, domain, bus and device, little-endian: 4 + 4 + 4 + 2 + 2 bytes. */
  const uint32_t host = (uint32_t)host_index, domain = (uint32_t)identity->pci_domain;
  const uint16_t bus = (uint16_t)identity->pci_bus, device = (uint16_t)identity->pci_device;
  memcpy(key, "pci:", 4);
  for (int b = 0; b < 4; ++b) key[4 + b] = (unsigned char)(host >> (8 * b));
  for (int b = 0; b < 4; ++b) key[8 + b] = (unsigned char)(domain >> (8 * b));
  for (int b = 0; b < 2; ++b) key[12 + b] = (unsigned char)(bus >> (8 * b));
  for (int b = 0; b < 2; ++b) key[14 + b] = (unsigned char)(device >> (8 * b));
}

typedef struct keyed_rank {
  unsigned char key[COMM_GPU_KEY_BYTES];
  int rank;
} keyed_rank_t;

/* By key, then by rank: equal keys end up adjacent, lowest rank first. */
static int compare_keyed_ranks(const void *left, const void *right) {
  const keyed_rank_t *a = left, *b = right;
  int by_key = memcmp(a->key, b->key, COMM_GPU_KEY_BYTES);
  if (by_key != 0) return by_key;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

int comm_gpus_distinct(const unsigned char (*keys)[COMM_GPU_KEY_BYTES], int size, int *first_a, int *first_b) {
  *first_a = *first_b = -1;
  if (size < 2) return 1;
  /* Sorting, not comparing every pair: thousands of ranks would make P^2 / 2 comparisons. */
  keyed_rank_t *sorted = malloc((size_t)size * sizeof *sorted);
  if (!sorted) return -1;
  for (int r = 0; r < size; ++r) {
    memcpy(sorted[r].key, keys[r], COMM_GPU_KEY_BYTES);
    sorted[r].rank = r;
  }
  qsort(sorted, (size_t)size, sizeof *sorted, compare_keyed_ranks);
  /* The first pair in (a, b) order: a is the lowest rank of a group of equal keys, b the
   * next rank of its group, and of all groups the one whose lowest rank is lowest. */
  for (int i = 1; i < size; ++i) {
    const int same_as_previous = memcmp(sorted[i - 1].key, sorted[i].key, COMM_GPU_KEY_BYTES) == 0;
    const int previous_starts_group = i == 1 || memcmp(sorted[i - 2].key, sorted[i - 1].key, COMM_GPU_KEY_BYTES) != 0;
    if (same_as_previous && previous_starts_group && (*first_a < 0 || sorted[i - 1].rank < *first_a)) {
      *first_a = sorted[i - 1].rank;
      *first_b = sorted[i].rank;
    }
  }
  free(sorted);
  return *first_a < 0;
}

void comm_gpu_name(const comm_gpu_identity_t *identity, char *name, size_t name_size) {
  if (identity->has_uuid)
    snprintf(name, name_size, "GPU-%02x%02x%02x%02x", identity->uuid[0], identity->uuid[1], identity->uuid[2],
             identity->uuid[3]);
  else
    snprintf(name, name_size, "PCI %04x:%02x:%02x", (unsigned)identity->pci_domain, (unsigned)identity->pci_bus,
             (unsigned)identity->pci_device);
}

/* What every rank tells the others about its GPU. */
typedef struct gpu_record {
  int on_device;                /* 0: this rank runs the CPU backend */
  int node_first_rank;          /* names its node (comm_ctx_t) */
  comm_gpu_identity_t identity; /* when on_device */
  char host[256];
} gpu_record_t;

/* Which GPUs the ranks drive, in one exchange. *all_on_device: every rank runs on a GPU;
 * then *distinct: no two of them drive one physical GPU, else `sharing` says which first two
 * do. Two ranks share a GPU when their UUIDs are equal, or when their node and PCI address
 * are: the UUID finds one GPU seen from containers that name the host differently, the PCI
 * address finds MIG instances of one GPU (distinct UUIDs), which NCCL refuses as it refuses
 * one GPU twice. Collective; every rank reaches the same answer. */
static int survey_gpus(comm_ctx_t *ctx, int backend_on_device, int *all_on_device, int *distinct, char *sharing,
                       size_t sharing_size) {
  *all_on_device = *distinct = 0;
  sharing[0] = '\0';
  gpu_record_t mine;
  memset(&mine, 0, sizeof mine);
  mine.on_device = backend_on_device;
  mine.node_first_rank = ctx->node_first_rank;
  snprintf(mine.host, sizeof mine.host, "%s", ctx->host);
  int status = backend_on_device ? comm_cuda_gpu_identity(ctx->device, &mine.identity) : DS_OK;
  gpu_record_t *records = malloc((size_t)ctx->size * sizeof *records);
  unsigned char(*uuid_keys)[COMM_GPU_KEY_BYTES] = malloc((size_t)ctx->size * sizeof *uuid_keys);
  unsigned char(*pci_keys)[COMM_GPU_KEY_BYTES] = malloc((size_t)ctx->size * sizeof *pci_keys);
  if (status == DS_OK && (!records || !uuid_keys || !pci_keys))
    status = DS_FAIL_ALLOC("the ranks' GPU identities", (size_t)ctx->size * sizeof *records);
  status = comm_agree(ctx, status);
  if (status == DS_OK) {
    int rc = MPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, records, (int)sizeof mine, MPI_BYTE, ctx->world);
    if (rc != MPI_SUCCESS) status = comm_mpi_fail(rc, __FILE__, __LINE__, "MPI_Allgather(gpu records)");
  }
  if (status == DS_OK) {
    *all_on_device = 1;
    for (int r = 0; r < ctx->size; ++r) *all_on_device = *all_on_device && records[r].on_device;
  }
  if (status == DS_OK && *all_on_device) {
    for (int r = 0; r < ctx->size; ++r) {
      comm_gpu_key(&records[r].identity, records[r].node_first_rank, uuid_keys[r]);
      comm_gpu_pci_key(&records[r].identity, records[r].node_first_rank, pci_keys[r]);
    }
    int a = -1, b = -1;
    int by_uuid = comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])uuid_keys, ctx->size, &a, &b);
    int by_pci = by_uuid == 1 ? comm_gpus_distinct((const unsigned char(*)[COMM_GPU_KEY_BYTES])pci_keys, ctx->size, &a, &b)
                              : by_uuid;
    if (by_uuid < 0 || by_pci < 0) status = DS_FAIL_ALLOC("sorting the ranks' GPUs", (size_t)ctx->size * 24);
    *distinct = by_uuid == 1 && by_pci == 1;
    if (status == DS_OK && !*distinct) {
      char gpu[32];
      comm_gpu_name(&records[a].identity, gpu, sizeof gpu);
      snprintf(sharing, sharing_size, "ranks %d and %d share GPU %s on host %s", a, b, gpu, records[a].host);
    }
  }
  free(records);
  free(uuid_keys);
  free(pci_keys);
  /* The exchange or the sort may have failed on some ranks only. */
  return comm_agree(ctx, status);
}

int comm_select_transport(comm_ctx_t *ctx, const char *requested, int backend_on_device,
                          void *compute_stream) {
  ctx->compute_stream = compute_stream;
  if (strcmp(requested, "auto") != 0 && strcmp(requested, "mpi") != 0 && strcmp(requested, "nccl") != 0)
    return ds_fail(DS_ERR_INPUT, "--comm: expected auto, nccl or mpi, got '%s'", requested);
  /* Every rank takes part, on whatever backend: with --backend auto a rank that sees no GPU
   * runs on the CPU beside ranks on GPUs. */
  int all_on_device = 0, distinct = 0;
  char sharing[512];
  DS_TRY(survey_gpus(ctx, backend_on_device, &all_on_device, &distinct, sharing, sizeof sharing));
  if (strcmp(requested, "nccl") == 0) {
    if (!all_on_device)
      return ds_fail(DS_ERR_INPUT, "--comm nccl: needs the CUDA backend on every rank (--backend cuda, and a "
                                   "GPU visible to each rank)");
    if (!distinct)
      return ds_fail(DS_ERR_INPUT, "--comm nccl: %s, and NCCL needs a GPU of its own for every rank; use --comm "
                                   "mpi, or run at most as many ranks on a node as it has GPUs", sharing);
  }
  /* Device buffers go to MPI directly only when every rank's MPI takes them. */
  int aware = backend_on_device && mpi_is_cuda_aware(), all_aware = 0;
  MPI_CHECK(MPI_Allreduce(&aware, &all_aware, 1, MPI_INT, MPI_MIN, ctx->world));
  ctx->mpi_cuda_aware = all_aware;
  const int use_nccl = all_on_device && distinct && strcmp(requested, "mpi") != 0;
  if (strcmp(requested, "auto") == 0 && all_on_device && !distinct && ctx->rank == 0) {
    fprintf(stderr, "dsampler: note: %s: using MPI transport\n", sharing);
    fflush(stderr);
  }
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

static int allgatherv_bytes(comm_ctx_t *ctx, const uint8_t *mine, uint8_t *all, const int *counts,
                            const int *displs) {
  MPI_CHECK(MPI_Allgatherv(mine, counts[ctx->rank], MPI_UINT8_T, all, counts, displs, MPI_UINT8_T, ctx->world));
  return DS_OK;
}

int comm_allgather_item_bytes(comm_ctx_t *ctx, const uint8_t *mine, int64_t n, uint8_t *all) {
  if (n > INT_MAX) return comm_agree(ctx, ds_fail(DS_ERR_INPUT, "allgather of %lld items: at most %d", (long long)n, INT_MAX));
  int *counts = malloc((size_t)ctx->size * 2 * sizeof *counts);
  DS_TRY(comm_agree(ctx, counts ? DS_OK : DS_FAIL_ALLOC("allgather counts", (size_t)ctx->size * 2 * sizeof *counts)));
  int *displs = counts + ctx->size;
  for (int r = 0; r < ctx->size; ++r) {
    int64_t begin, end;
    comm_partition(n, ctx->size, r, &begin, &end);
    counts[r] = (int)(end - begin);
    displs[r] = (int)begin;
  }
  const int status = allgatherv_bytes(ctx, mine, all, counts, displs);
  free(counts);
  return status;
}

/* Byte counts and displacements of rows, rank by rank, for MPI's int arguments. */
static int rows_to_bytes(const int64_t *rows, int size, size_t row_bytes, int *bytes, int *displs) {
  int64_t offset = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t count = rows[r] * (int64_t)row_bytes;
    if (rows[r] < 0 || count > INT_MAX || offset + count > INT_MAX)
      return ds_fail(DS_ERR_INTERNAL, "exchange of rows: %lld rows of %zu bytes do not fit an MPI count",
                     (long long)rows[r], row_bytes);
    bytes[r] = (int)count;
    displs[r] = (int)offset;
    offset += count;
  }
  return DS_OK;
}

static int alltoallv_bytes(comm_ctx_t *ctx, const void *send, const int *send_bytes, const int *send_displs,
                           void *recv, const int *recv_bytes, const int *recv_displs) {
  MPI_CHECK(MPI_Alltoallv(send, send_bytes, send_displs, MPI_BYTE, recv, recv_bytes, recv_displs, MPI_BYTE,
                          ctx->world));
  return DS_OK;
}

int comm_exchange_rows(comm_ctx_t *ctx, const void *send, const int64_t *send_rows, void *recv,
                       const int64_t *recv_rows, size_t row_bytes) {
  const int size = ctx->size;
  int *counts = malloc((size_t)size * 4 * sizeof *counts);
  int status = counts ? DS_OK : DS_FAIL_ALLOC("exchange counts", (size_t)size * 4 * sizeof *counts);
  if (status == DS_OK) {
    int *send_displs = counts + size, *recv_bytes = counts + 2 * size, *recv_displs = counts + 3 * size;
    status = rows_to_bytes(send_rows, size, row_bytes, counts, send_displs);
    if (status == DS_OK) status = rows_to_bytes(recv_rows, size, row_bytes, recv_bytes, recv_displs);
    status = comm_agree(ctx, status);
    if (status == DS_OK) status = alltoallv_bytes(ctx, send, counts, send_displs, recv, recv_bytes, recv_displs);
  } else {
    status = comm_agree(ctx, status);
  }
  free(counts);
  return status;
}

int comm_allreduce_sum_u64_to_host(comm_ctx_t *ctx, uint64_t *counts, int64_t count, int on_device,
                                   uint64_t *host_sums) {
  const size_t bytes = (size_t)count * sizeof *counts;
  if (!on_device) {
    memcpy(host_sums, counts, bytes);
    return comm_allreduce_sum_u64(ctx, host_sums, count);
  }
  if (ctx->transport == COMM_TRANSPORT_NCCL) {
    DS_TRY(comm_cuda_nccl_allreduce_sum_u64(ctx, counts, count));
    /* The copy is each rank's own; agreeing on it keeps a failed rank from leaving the others
     * alone in the next collective. */
    return comm_agree(ctx, comm_cuda_copy(ctx, host_sums, counts, bytes, 0));
  }
  DS_TRY(comm_agree(ctx, comm_cuda_copy(ctx, host_sums, counts, bytes, 0)));
  return comm_allreduce_sum_u64(ctx, host_sums, count);
}

int comm_allreduce_sum_double(comm_ctx_t *ctx, double *buf, int64_t count) {
  return mpi_allreduce_chunked(ctx, buf, count, sizeof *buf, MPI_DOUBLE, MPI_SUM);
}

int comm_bcast(comm_ctx_t *ctx, void *buf, int64_t bytes, int root) {
  if (bytes > INT_MAX) return ds_fail(DS_ERR_INTERNAL, "broadcast of %lld bytes is too large", (long long)bytes);
  MPI_CHECK(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, ctx->world));
  return DS_OK;
}

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

/* The read deadline (comm_deadline_begin): 0 when none is armed; the message is written before
 * the deadline is stored, and read after it is loaded. */
static atomic_llong read_deadline;
static long long read_seconds;
static char read_what[4400];

static void *watchdog_main(void *unused) {
  (void)unused;
  for (;;) {
    sleep(1);
    long long now = monotonic_seconds(), reading = atomic_load(&read_deadline);
    if (reading != 0 && now >= reading) {
      fprintf(stderr,
              "dsampler: error: rank %d on %s: %s has not finished in %lld s: the file is most likely damaged "
              "(HDF5 can loop forever on some damaged files); move it away and try again "
              "(DSAMPLER_READ_DEADLINE_SECONDS sets the limit); ending every rank\n",
              watchdog_rank, watchdog_host, read_what, read_seconds);
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
      _exit(1);
    }
    long long deadline = atomic_load(&watchdog_deadline);
    if (deadline == 0 || now < deadline) continue;
    fprintf(stderr, "dsampler: error: rank %d on %s: still running %lld s after its error (%s); ending every rank\n",
            watchdog_rank, watchdog_host, watchdog_seconds, ds_error_message());
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    _exit(1);
  }
  return NULL;
}

static long long env_seconds(const char *name, long long fallback) {
  const char *text = getenv(name);
  return text ? atoll(text) : fallback;
}

int comm_watchdog_start(comm_ctx_t *ctx) {
  watchdog_seconds = env_seconds("DSAMPLER_ERROR_WATCHDOG_SECONDS", COMM_WATCHDOG_DEFAULT_SECONDS);
  read_seconds = env_seconds("DSAMPLER_READ_DEADLINE_SECONDS", COMM_READ_DEADLINE_DEFAULT_SECONDS);
  if (watchdog_seconds <= 0 && read_seconds <= 0) return DS_OK;
  watchdog_rank = ctx->rank;
  snprintf(watchdog_host, sizeof watchdog_host, "%s", ctx->host);
  pthread_t thread;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return ds_fail(DS_ERR_INTERNAL, "cannot start the error watchdog");
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&thread, &attr, watchdog_main, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) return ds_fail(DS_ERR_INTERNAL, "cannot start the error watchdog: %s", strerror(rc));
  if (watchdog_seconds > 0) ds_error_set_hook(watchdog_arm);
  return DS_OK;
}

/* Nesting depth of comm_deadline_begin (the main thread's): the outermost read's name and
 * deadline hold until its end. */
static int read_depth;

void comm_deadline_begin(const char *format, ...) {
  if (read_seconds <= 0 || read_depth++ > 0) return;
  va_list args;
  va_start(args, format);
  vsnprintf(read_what, sizeof read_what, format, args);
  va_end(args);
  atomic_store(&read_deadline, monotonic_seconds() + read_seconds);
}

void comm_deadline_end(void) {
  if (read_seconds <= 0 || read_depth == 0 || --read_depth > 0) return;
  atomic_store(&read_deadline, 0);
}
