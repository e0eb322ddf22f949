/* main.c: dsampler's entry point: parse, run, and report the one error, ending every rank. */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "config.h"
#include "run.h"
#include "status.h"
#include "summary.h"
#include "targets_builtin.h"

int main(int argc, char **argv) {
  comm_ctx_t comm;
  int status = comm_init(&comm, &argc, &argv);
  if (status != DS_OK) {
    fprintf(stderr, "dsampler: error: %s\n", ds_error_message());
    return 1;
  }
  /* Commands that are not a sampling run. */
  if (argc >= 2 && strcmp(argv[1], "targets") == 0) {
    if (comm.rank == 0) builtin_targets_print(stdout);
    comm_free(&comm);
    return 0;
  }
  if (argc >= 2 && strcmp(argv[1], "summary") == 0) {
    status = summary_main(&comm, argc, argv);
    if (status != DS_OK && comm.rank == 0) fprintf(stderr, "dsampler: error: %s\n", ds_error_message());
    comm_free(&comm);
    return status == DS_OK ? 0 : 1;
  }
  config_t cfg;
  /* Every rank parses the same arguments and so reaches the same verdict. */
  status = config_parse(&cfg, argc, argv, comm.rank == 0 ? stdout : NULL);
  if (status == DS_HELP) {
    comm_free(&comm);
    return 0;
  }
  if (status == DS_OK) status = run_main(&comm, &cfg);
  if (status != DS_OK) {
    /* Errors reach here agreed by every rank (comm_agree): rank 0 reports once. */
    if (comm.rank == 0) {
      fprintf(stderr, "dsampler: error: %s\n", ds_error_message());
      fflush(stderr);
    }
    comm_free(&comm);
    return status == DS_INTERRUPTED ? DS_INTERRUPTED : 1;
  }
  comm_free(&comm);
  return 0;
}
