/* main.c: dsampler's entry point: parse, run, and report the one error, ending every rank. */
#include <stdio.h>
#include <string.h>

#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "run.h"
#include "status.h"
#include "summary.h"
#include "targets_builtin.h"

/* Reports the run's outcome once and ends MPI: 0, 75 (stopped by a signal, resumable) or 1. */
static int finish(comm_ctx_t *comm, int status) {
  /* Errors reach here agreed by every rank (comm_agree): rank 0 reports once. */
  if (status != DS_OK && status != DS_INTERRUPTED && comm->rank == 0) {
    fprintf(stderr, "dsampler: error: %s\n", ds_error_message());
    fflush(stderr);
  }
  comm_free(comm);
  return status == DS_OK ? 0 : status == DS_INTERRUPTED ? DS_INTERRUPTED : 1;
}

/* `dsampler resume WHERE [options]`: the newest checkpoint that opens, validates and reads;
 * each one passed over is named. */
static int resume_main(comm_ctx_t *comm, int argc, char **argv) {
  if (argc < 3 || argv[2][0] == '-')
    return ds_fail(DS_ERR_INPUT, "resume: expected a checkpoint file or directory (dsampler resume DIR [options])");
  static char paths[CKPT_LIST_MAX][4096];
  int count = 0;
  DS_TRY(ckpt_list(comm->world, argv[2], paths, &count));
  static ckpt_meta_t meta;
  for (int i = 0; i < count; ++i) {
    config_t cfg;
    int status = ckpt_read_meta(comm->world, paths[i], &meta);
    if (status == DS_OK) {
      status = config_parse_resume(&cfg, config_algorithm_from_name(meta.algorithm), meta.config, argc, argv,
                                   comm->rank == 0 ? stdout : NULL);
      if (status == DS_HELP) return DS_OK;
      /* Bad options are the user's to fix, not a reason to try an older checkpoint. */
      if (status != DS_OK) return status;
      status = run_main(comm, &cfg, paths[i], &meta);
      if (status != DS_ERR_CHECKPOINT) return status;
    }
    /* Set aside, so the checkpoints written from here on do not count it among the newest. */
    if (comm->rank == 0) {
      char aside[4200];
      snprintf(aside, sizeof aside, "%.4095s.unusable", paths[i]);
      int moved = rename(paths[i], aside) == 0;
      fprintf(stderr, "dsampler: skipping checkpoint %s: %s%s%s\n", paths[i], ds_error_message(),
              moved ? " (renamed *.unusable)" : "", i + 1 < count ? "; trying the one before it" : "");
    }
    ds_error_clear();
  }
  return ds_fail(DS_ERR_INPUT, "resume %s: no usable checkpoint", argv[2]);
}

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
  if (argc >= 2 && strcmp(argv[1], "resume") == 0) {
    status = resume_main(&comm, argc, argv);
    return finish(&comm, status);
  }
  config_t cfg;
  /* Every rank parses the same arguments and so reaches the same verdict. */
  status = config_parse(&cfg, argc, argv, comm.rank == 0 ? stdout : NULL);
  if (status == DS_HELP) {
    comm_free(&comm);
    return 0;
  }
  if (status == DS_OK) status = run_main(&comm, &cfg, NULL, NULL);
  return finish(&comm, status);
}
