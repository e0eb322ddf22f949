/* comm.h: MPI bootstrap, the rank/device mapping, the partition of global items over ranks,
 * and the few collectives the algorithms use. Collectives take buffers where the backend
 * keeps them (host, or device memory when `on_device`); the transport (MPI, or NCCL with the
 * CUDA backend when every rank has a GPU of its own) decides how they move. Every rank must
 * call every collective, also a rank that owns no items. */
#ifndef DSAMPLER_COMM_H
#define DSAMPLER_COMM_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { COMM_TRANSPORT_MPI = 0, COMM_TRANSPORT_NCCL = 1 } comm_transport_t;

typedef struct comm_ctx {
  MPI_Comm world;          /* a duplicate of MPI_COMM_WORLD owned by dsampler */
  int rank, size;
  int local_rank, local_size; /* among the ranks of this node */
  int node_first_rank;     /* the lowest rank of this node: names the node */
  char host[256];
  int device;              /* GPU ordinal used by this rank, -1 for the CPU backend */
  comm_transport_t transport;
  int mpi_cuda_aware;      /* every rank's MPI takes device buffers */
  void *nccl;              /* ncclComm_t when transport is NCCL */
  void *nccl_stream;       /* cudaStream_t the NCCL calls run on */
  void *compute_stream;    /* the backend's stream; NCCL waits on it through an event */
  void *staging;           /* pinned host buffer for device buffers over plain MPI */
  size_t staging_bytes;
  void *nccl_scratch;      /* device buffer of the padded allgather, grow-only */
  size_t nccl_scratch_bytes;
  double nccl_timeout_seconds; /* how long NCCL may take to join or to issue a collective */
} comm_ctx_t;

/* Initialises MPI (if not yet) and fills rank, size, local rank and host. */
int comm_init(comm_ctx_t *ctx, int *argc, char ***argv);
/* Chooses the transport once the backend is known: "auto", "mpi" or "nccl". Collective.
 * With the backend on a GPU, ctx->device must name it. NCCL needs a distinct physical GPU per
 * rank; which GPU a rank drives is told by the device's UUID (PCI address on its host where
 * the driver gives no UUID), exchanged between all ranks, not by how many devices each rank
 * sees: under per-task binding (CUDA_VISIBLE_DEVICES naming one device) every rank sees one
 * device, ordinal 0, and still has a GPU of its own. "auto" takes NCCL when every rank is on
 * the CUDA backend with a GPU no other rank drives, else MPI (rank 0 says which ranks share a
 * GPU); "nccl" refuses shared GPUs, naming the ranks. */
int comm_select_transport(comm_ctx_t *ctx, const char *requested, int backend_on_device,
                          void *compute_stream);
/* Releases the NCCL communicator and staging memory (before the backend's CUDA resources go).
 * Idempotent. */
void comm_release_transport(comm_ctx_t *ctx);
/* Releases the transport, then finalises MPI. */
void comm_free(comm_ctx_t *ctx);
/* Ends the job on every rank with `code`. */
void comm_abort(comm_ctx_t *ctx, int code) __attribute__((noreturn));

/* Rank r owns the global items [floor(r n / p), floor((r + 1) n / p)). */
void comm_partition(int64_t n, int size, int rank, int64_t *begin, int64_t *end);

/* What tells one physical GPU from another. */
#define COMM_GPU_KEY_BYTES 16
typedef struct comm_gpu_identity {
  int has_uuid;                          /* the driver gave a (non-zero) UUID */
  unsigned char uuid[COMM_GPU_KEY_BYTES]; /* cudaDeviceProp.uuid */
  int pci_domain, pci_bus, pci_device;   /* where the GPU sits on its host */
} comm_gpu_identity_t;

/* 16-byte keys that equal each other only for one GPU. comm_gpu_key: the UUID, or where the
 * driver gave none, the PCI key. comm_gpu_pci_key: "pci:", host_index (the lowest rank of the
 * GPU's node, so that equal PCI addresses of different nodes differ), PCI domain, bus and
 * device. comm_select_transport checks both: MIG instances of one GPU differ in UUID, not in
 * PCI address. */
void comm_gpu_key(const comm_gpu_identity_t *identity, int host_index, unsigned char key[COMM_GPU_KEY_BYTES]);
void comm_gpu_pci_key(const comm_gpu_identity_t *identity, int host_index, unsigned char key[COMM_GPU_KEY_BYTES]);
/* Pure: 1 when the size keys are pairwise distinct; 0 when some are equal, with (*first_a,
 * *first_b), first_a < first_b, the first such pair in (a, b) order; -1 when out of memory. */
int comm_gpus_distinct(const unsigned char (*keys)[COMM_GPU_KEY_BYTES], int size, int *first_a, int *first_b);
/* "GPU-xxxxxxxx" (the UUID's first 4 bytes, as nvidia-smi begins it) or "PCI dddd:bb:dd". */
void comm_gpu_name(const comm_gpu_identity_t *identity, char *name, size_t name_size);

/* In place: rank r's rows [begin_r, end_r) of buf (rows of row_floats floats) are sent to all;
 * on return every rank holds all n rows. */
int comm_allgather_rows(comm_ctx_t *ctx, float *buf, int64_t n, int64_t row_floats, int on_device);
/* One byte per global item: rank r's items [begin_r, end_r) of comm_partition(n, size), from
 * its `mine`, into every rank's all[n]. Host buffers. */
int comm_allgather_item_bytes(comm_ctx_t *ctx, const uint8_t *mine, int64_t n, uint8_t *all);
/* Rows of row_bytes bytes from every rank to every rank: send holds send_rows[r] rows for rank
 * r, ranks in order; recv receives recv_rows[r] rows from rank r, ranks in order. Host
 * buffers; the counts must be the ones the peers send (each rank's send_rows[r] is rank r's
 * recv_rows[this rank]). */
int comm_exchange_rows(comm_ctx_t *ctx, const void *send, const int64_t *send_rows, void *recv,
                       const int64_t *recv_rows, size_t row_bytes);
/* In place sums over all ranks; host buffers. */
int comm_allreduce_sum_u64(comm_ctx_t *ctx, uint64_t *buf, int64_t count);
/* Sums over all ranks of counts[count], which lie in the backend's memory (device memory when
 * on_device), into host_sums[count] on every rank. Over NCCL the sum is taken on the device, in
 * place (counts then holds the sums too), and copied to the host once; otherwise the counts
 * are copied to the host and MPI sums them there. */
int comm_allreduce_sum_u64_to_host(comm_ctx_t *ctx, uint64_t *counts, int64_t count, int on_device,
                                   uint64_t *host_sums);
int comm_allreduce_sum_double(comm_ctx_t *ctx, double *buf, int64_t count);
int comm_bcast(comm_ctx_t *ctx, void *buf, int64_t bytes, int root);

/* Agreement on a status after a step that may fail on some ranks: every rank gets the
 * status of the lowest failing rank (DS_OK when none failed), and that rank's error message
 * becomes every rank's message, prefixed with its rank and host when it is not rank 0. */
int comm_agree(comm_ctx_t *ctx, int status);
/* The same over any communicator (io/ works on the file's). When the agreement itself fails
 * the ranks cannot be trusted to meet again: every rank is ended with MPI_Abort. */
int comm_agree_on(MPI_Comm comm, const char *host, int status);

/* Starts a thread that ends every rank (MPI_Abort) when this rank is still running
 * DSAMPLER_ERROR_WATCHDOG_SECONDS (default COMM_WATCHDOG_DEFAULT_SECONDS; 0: off) after it
 * recorded an error: a failure must never leave ranks waiting forever. */
#define COMM_WATCHDOG_DEFAULT_SECONDS 120
int comm_watchdog_start(comm_ctx_t *ctx);

/* A bounded read. HDF5 1.10 can loop forever on some damaged files (a damaged size in a heap of
 * variable-length strings): reads that may meet one run between comm_deadline_begin (which
 * names what is read, printf-style) and comm_deadline_end. Past DSAMPLER_READ_DEADLINE_SECONDS
 * (default below; 0: off) the watchdog thread names it, calls it damaged and ends every rank.
 * Only where comm_watchdog_start ran. Nestable (on the main thread): the outermost begin names the
 * read, and its deadline holds until the matching end. */
#define COMM_READ_DEADLINE_DEFAULT_SECONDS 120
void comm_deadline_begin(const char *format, ...) __attribute__((format(printf, 1, 2)));
void comm_deadline_end(void);

/* NCCL's communicator is created non-blocking: it must form within DSAMPLER_NCCL_INIT_TIMEOUT
 * seconds (default below), and each later NCCL call be issued within as long (the first calls
 * connect the ranks), or the rank reports that it could not join, naming itself and its host,
 * instead of waiting forever for a peer that never comes. */
#define COMM_NCCL_TIMEOUT_DEFAULT_SECONDS 120

/* The MPI checker: records the call's text and MPI's own message. */
int comm_mpi_fail(int rc, const char *file, int line, const char *call);
#define MPI_CHECK(call)                                                   \
  do {                                                                    \
    int mpi_check_rc_ = (call);                                           \
    if (mpi_check_rc_ != MPI_SUCCESS)                                     \
      return comm_mpi_fail(mpi_check_rc_, __FILE__, __LINE__, #call);     \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
