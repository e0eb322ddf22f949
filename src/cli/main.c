/* main.c: dsampler's entry point: parse, run, and report the one error, ending every rank. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "h5util.h"
#include "h5out.h"
#include "run.h"
#include "signals.h"
#include "stan_build.h"
#include "status.h"
#include "summary.h"
#include "targets_builtin.h"

static int guard_rank = -1;
static char guard_host[256] = "unknown";

/* Runs at exit() before HDF5's own handler (registered later, so it runs first). A process
 * that exits while MPI is still up did not come through main's end: a plugin called exit(),
 * say. HDF5's handler would then close open files collectively and wait forever for the
 * other ranks, so this ends every rank instead. */
static void exit_guard(void) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  fprintf(stderr, "dsampler: error: rank %d on %s: exit() called outside dsampler (by the target plugin?) "
                  "during the run; ending every rank\n", guard_rank, guard_host);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

/* Reports the run's outcome once and ends MPI: 0, 75 (stopped by a signal, resumable) or 1. */
static int finish(comm_ctx_t *comm, int status) {
  /* Errors reach here agreed by every rank (comm_agree): rank 0 reports once. */
  if (status != DS_OK && status != DS_INTERRUPTED && comm->rank == 0) {
    fprintf(stderr, "dsampler: error: %s\n", ds_error_message());
    fflush(stderr);
  }
  /* After an MPI failure the ranks may not meet in MPI_Finalize, and after a failed write of the
   * output or a checkpoint HDF5's clean-up in MPI_Finalize would crash or wait on the file left
   * open: end them all. */
  if (status == DS_ERR_MPI || h5util_unclosed()) {
    /* An agreed error was said by rank 0 already; an MPI failure may not have been agreed. */
    if (comm->rank != 0 && status == DS_ERR_MPI)
      fprintf(stderr, "dsampler: error: rank %d on %s: %s\n", comm->rank, comm->host, ds_error_message());
    comm_abort(comm, 1);
  }
  comm_free(comm);
  return status == DS_OK ? 0 : status == DS_INTERRUPTED ? DS_INTERRUPTED : 1;
}

/* `path` made absolute from the current folder, in place (size bytes); DS_ERR_INPUT when too long. */
static int make_absolute(char *path, size_t size, const char *what) {
  if (path[0] == '/' || !path[0]) return DS_OK;
  char here[4096];
  if (!getcwd(here, sizeof here)) return ds_fail(DS_ERR_INPUT, "resume: cannot tell the current folder: %s", strerror(errno));
  const size_t length = strlen(here) + 1 + strlen(path);
  if (length >= size) return ds_fail(DS_ERR_INPUT, "%s %s: the path from / is too long", what, path);
  memmove(path + strlen(here) + 1, path, strlen(path) + 1);
  memcpy(path, here, strlen(here));
  path[strlen(here)] = '/';
  return DS_OK;
}

/* A relative --checkpoint-dir given to resume, made absolute in argv: it is from the folder
 * resume is started in, not the one the run goes on in (enter_start_dir). Local. */
static int absolute_checkpoint_dir_option(int argc, char **argv) {
  static char absolute[4096], option[4096 + 20];
  for (int a = 3; a < argc; ++a) {
    const int separate = strcmp(argv[a], "--checkpoint-dir") == 0 && a + 1 < argc;
    const int joined = strncmp(argv[a], "--checkpoint-dir=", 17) == 0;
    if (separate) ++a;
    const char *value = separate ? argv[a] : joined ? argv[a] + 17 : NULL;
    if (!value || value[0] == '/' || !value[0]) continue;
    snprintf(absolute, sizeof absolute, "%s", value);
    DS_TRY(make_absolute(absolute, sizeof absolute, "--checkpoint-dir"));
    if (separate) {
      argv[a] = absolute;
    } else {
      snprintf(option, sizeof option, "--checkpoint-dir=%s", absolute);
      argv[a] = option;
    }
  }
  return DS_OK;
}

/* The run's relative paths (--out, --checkpoint-dir, --init, --data, the target and its files)
 * are from the folder it started in: a resume works there, whatever folder it is started from,
 * when that folder is there on every rank; else from the current one, and rank 0 says so.
 * The resume's own paths (the checkpoints found, a --checkpoint-dir given to it) were made
 * absolute before. Collective. */
/* The run's --out as its checkpoint recorded it (checkpoint_escaped: %XX for '%', newline and
 * carriage return), into out; "" where absent. */
static void recorded_out(const char *config, char *out, size_t size) {
  out[0] = '\0';
  const char *line = strstr(config, "\nout = ");
  if (!line && strncmp(config, "out = ", 6) == 0) line = config - 1;
  if (!line) return;
  size_t used = 0;
  for (const char *c = line + 7; *c && *c != '\n' && used + 1 < size; ++c) {
    unsigned code;
    if (c[0] == '%' && c[1] && c[2] && sscanf(c + 1, "%2x", &code) == 1) {
      out[used++] = (char)code;
      c += 2;
    } else {
      out[used++] = *c;
    }
  }
  out[used] = '\0';
}

/* Where the run's start folder is gone, the folder that holds the checkpoint folder, when the
 * run's relative output is there: the run's folder moved whole, checkpoints and all. */
static int moved_start_dir(const char *checkpoint, const ckpt_meta_t *meta, char *folder, size_t size) {
  char out[4096];
  recorded_out(meta->config, out, sizeof out);
  if (!out[0] || out[0] == '/') return 0;
  char copy[4096];
  snprintf(copy, sizeof copy, "%s", checkpoint);
  char *slash = strrchr(copy, '/'); /* .../FOLDER/CKPT_DIR/ckpt-N.h5 */
  if (!slash) return 0;
  *slash = '\0';
  slash = strrchr(copy, '/');
  if (!slash) return 0;
  *slash = '\0';
  char candidate[8300];
  snprintf(candidate, sizeof candidate, "%s/%s", copy[0] ? copy : "/", out);
  struct stat st;
  if (stat(candidate, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  char resolved[PATH_MAX];
  snprintf(folder, size, "%s", realpath(copy[0] ? copy : "/", resolved) ? resolved : copy[0] ? copy : "/");
  return 1;
}

/* Collective: into the folder the run started in, so that its relative paths mean what they
 * meant. Where that folder is gone, the checkpoints' parent folder when the run's output is
 * there (the folder was moved or renamed), else the current folder, with a note either way. */
static int enter_start_dir(comm_ctx_t *comm, const ckpt_meta_t *meta, const char *checkpoint) {
  char here[4096] = "";
  if (!meta->start_dir[0] || (getcwd(here, sizeof here) && strcmp(here, meta->start_dir) == 0)) return DS_OK;
  struct stat st;
  int usable = stat(meta->start_dir, &st) == 0 && S_ISDIR(st.st_mode) && access(meta->start_dir, X_OK) == 0, all = 0;
  MPI_CHECK(MPI_Allreduce(&usable, &all, 1, MPI_INT, MPI_MIN, comm->world));
  const char *folder = meta->start_dir;
  char moved[4096] = "";
  if (!all) {
    int found = moved_start_dir(checkpoint, meta, moved, sizeof moved), everywhere = 0;
    MPI_CHECK(MPI_Allreduce(&found, &everywhere, 1, MPI_INT, MPI_MIN, comm->world));
    if (!everywhere) {
      char out[4096];
      recorded_out(meta->config, out, sizeof out);
      if (comm->rank == 0)
        fprintf(stderr, "dsampler: note: the run started in %s, which is not there%s, and its output %s is not "
                "beside its checkpoint folder; its relative paths are taken from %s\n", meta->start_dir,
                comm->size > 1 ? " on every rank" : "", out[0] ? out : "(none recorded)", here);
      return DS_OK;
    }
    if (comm->rank == 0)
      fprintf(stderr, "dsampler: note: the run started in %s, which is not there; its output and checkpoints are in "
              "%s, so its relative paths are taken from there\n", meta->start_dir, moved);
    folder = moved;
  }
  int status = chdir(folder) == 0 ? DS_OK
               : ds_fail(DS_ERR_INPUT, "resume: cannot enter %s, where the run started: %s", folder, strerror(errno));
  return comm_agree(comm, status);
}

/* `dsampler resume WHERE [options]`: the newest checkpoint that opens, validates and reads;
 * each one passed over is named. Resume only reads what it is given: a file that is not a
 * usable checkpoint is reported and left as it is (never renamed or removed), so a job
 * script's next attempt finds it again and stops with the same error instead of starting a
 * fresh run over the output. */
static int resume_main(comm_ctx_t *comm, int argc, char **argv) {
  if (argc < 3 || argv[2][0] == '-')
    return ds_fail(DS_ERR_INPUT, "resume: expected a checkpoint file or directory (dsampler resume DIR [options])");
  static char paths[CKPT_LIST_MAX][4096];
  int count = 0;
  DS_TRY(ckpt_list(comm->world, argv[2], paths, &count));
  /* The resume's own paths are from here: the run may go on in the folder it started in. */
  for (int i = 0; i < count; ++i) DS_TRY(comm_agree(comm, make_absolute(paths[i], sizeof paths[i], "checkpoint")));
  DS_TRY(comm_agree(comm, absolute_checkpoint_dir_option(argc, argv)));
  static ckpt_meta_t meta;
  char newest_reason[1500] = "";
  for (int i = 0; i < count; ++i) {
    config_t cfg;
    int status = ckpt_read_meta(comm->world, paths[i], &meta);
    /* Not a checkpoint of this format: stop, whatever older checkpoints there are. */
    if (status != DS_OK && status != DS_ERR_CHECKPOINT) return status;
    if (status == DS_OK) DS_TRY(enter_start_dir(comm, &meta, paths[i]));
    if (status == DS_OK) {
      status = config_parse_resume(&cfg, config_algorithm_from_name(meta.algorithm), meta.config, argc, argv,
                                   comm->rank == 0 ? stdout : NULL);
      if (status == DS_HELP) return DS_OK;
      /* Bad options are the user's to fix, not a reason to try an older checkpoint. */
      if (status != DS_OK) return status;
      status = run_main(comm, &cfg, paths[i], &meta);
      if (status != DS_ERR_CHECKPOINT) return status;
    }
    if (i == 0) snprintf(newest_reason, sizeof newest_reason, "%s", ds_error_message());
    if (comm->rank == 0 && count > 1)
      fprintf(stderr, "dsampler: skipping checkpoint %s: %s%s\n", paths[i], ds_error_message(),
              i + 1 < count ? "; trying the one before it" : "");
    ds_error_clear();
  }
  if (count == 1) return ds_fail(DS_ERR_INPUT, "resume: %s", newest_reason);
  return ds_fail(DS_ERR_INPUT, "resume %s: none of its %d checkpoints is usable (the newest: %s)", argv[2], count,
                 newest_reason);
}

int main(int argc, char **argv) {
  /* First of all: a stop signal from here on is a request the run acts on (signals.h). */
  signals_install();
  comm_ctx_t comm;
  int status = comm_init(&comm, &argc, &argv);
  if (status != DS_OK) {
    fprintf(stderr, "dsampler: error: %s\n", ds_error_message());
    return 1;
  }
  /* MPI_Init may take the stop signals over (Open MPI 4.1.6 started without mpiexec does, on
   * Ubuntu 24.04): the run's handler is put back, so that a stop still checkpoints. */
  (void)signals_reinstate();
  /* HDF5 first (its atexit handler), then the guard, which therefore runs before it. */
  h5util_init();
  guard_rank = comm.rank;
  snprintf(guard_host, sizeof guard_host, "%s", comm.host);
  atexit(exit_guard);
  status = comm_watchdog_start(&comm);
  if (status != DS_OK) {
    fprintf(stderr, "dsampler: error: %s\n", ds_error_message());
    comm_abort(&comm, 1);
  }
  /* Past a file-size limit (ulimit -f, a quota) a write should fail with EFBIG and be
   * reported, not kill the rank with SIGXFSZ and leave the others waiting. */
  signal(SIGXFSZ, SIG_IGN);
  /* Fault injection for tests: a file-size limit set after MPI_Init, which itself writes
   * shared-memory files a limit set by the launcher would break. */
  const char *fsize_limit = getenv("DSAMPLER_FAULT_FILE_SIZE_LIMIT");
  if (fsize_limit) {
    struct rlimit limit = {(rlim_t)strtoull(fsize_limit, NULL, 10), (rlim_t)strtoull(fsize_limit, NULL, 10)};
    setrlimit(RLIMIT_FSIZE, &limit);
  }
  /* Commands that are not a sampling run: a stop signal ends them as it would any program. */
  const int sampling = argc < 2 || (strcmp(argv[1], "targets") != 0 && strcmp(argv[1], "summary") != 0 &&
                                    strcmp(argv[1], "stan") != 0);
  if (!sampling) signals_restore_default();
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
  if (argc >= 2 && strcmp(argv[1], "stan") == 0) {
    status = stan_main(comm.world, argc, argv);
    if (status == DS_HELP) status = DS_OK;
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
