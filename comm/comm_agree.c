/* comm_agree.c: what every part of dsampler needs of MPI beneath the transports: the ranks'
 * agreement on a status (the first failing rank's message reaches all), the checker behind
 * MPI_CHECK, the end of the job on every rank, and the partition of items into contiguous
 * blocks. comm.c and comm_cuda.c both build on it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "status.h"

int comm_mpi_fail(int rc, const char *file, int line, const char *call) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  /* The call and MPI's reason; the source location only where DSAMPLER_ERROR_LOCATIONS asks. */
  const char *locations = getenv("DSAMPLER_ERROR_LOCATIONS");
  if (locations && locations[0] && strcmp(locations, "0") != 0)
    return ds_fail_at(DS_ERR_MPI, file, line, call, "%s", text);
  return ds_fail(DS_ERR_MPI, "MPI could not complete %s: %s", call, text);
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
