/* run.c: the run driver: backend and transport set-up, the checks of paths and target, the
 * target itself; then the algorithm (hmc_run or svgd_run). */
#include "run.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm_cuda.h"
#include "h5util.h"
#include "hmc.h"
#include "run_context.h"
#include "signals.h"
#include "status.h"
#include "svgd.h"
#include "target.h"
#include "target_args.h"
#include "target_deadline.h"
#include "targets_builtin.h"

/* Local: `path` as something this run will write: an existing regular, writable file, or a
 * new name in an existing, writable directory. */
static int check_output_path(const char *option, const char *path) {
  struct stat st;
  if (stat(path, &st) == 0) {
    if (S_ISDIR(st.st_mode)) return ds_fail(DS_ERR_INPUT, "%s %s: is a directory, expected a file name", option, path);
    if (!S_ISREG(st.st_mode)) return ds_fail(DS_ERR_INPUT, "%s %s: exists and is not a regular file", option, path);
    if (access(path, W_OK) != 0) return ds_fail(DS_ERR_INPUT, "%s %s: cannot write: %s", option, path, strerror(errno));
    return DS_OK;
  }
  if (errno != ENOENT) return ds_fail(DS_ERR_INPUT, "%s %s: %s", option, path, strerror(errno));
  char copy[CONFIG_PATH_MAX];
  snprintf(copy, sizeof copy, "%s", path);
  const char *parent = dirname(copy);
  if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
    return ds_fail(DS_ERR_INPUT, "%s %s: directory %s does not exist", option, path, parent);
  if (access(parent, W_OK | X_OK) != 0)
    return ds_fail(DS_ERR_INPUT, "%s %s: cannot create files in %s: %s", option, path, parent, strerror(errno));
  return DS_OK;
}

/* Local: the checkpoint directory exists writable, or can be made in a writable parent. */
static int check_checkpoint_dir(const char *dir) {
  struct stat st;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s: exists and is not a directory", dir);
    if (access(dir, W_OK | X_OK) != 0)
      return ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s: cannot write: %s", dir, strerror(errno));
    return DS_OK;
  }
  /* A link to nothing: the folder could not be made there at the first checkpoint. */
  if (lstat(dir, &st) == 0)
    return ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s: is a link to a folder that does not exist; make that folder "
                   "or give another", dir);
  return check_output_path("--checkpoint-dir", dir);
}

/* Local: dlopen of a FIFO blocks and of a directory says little; refuse both first (and the
 * same for a Stan model's file). */
static int check_plugin_path(const char *spec, const char *path) {
  struct stat st;
  const char *what = target_is_stan(spec) ? "cannot read the model" : "cannot load the plugin";
  if (stat(path, &st) != 0) return ds_fail(DS_ERR_INPUT, "--target %s: %s: %s", spec, what, strerror(errno));
  if (!S_ISREG(st.st_mode)) return ds_fail(DS_ERR_INPUT, "--target %s: %s: not a regular file", spec, what);
  return DS_OK;
}

/* Local: --out is no file that a --target-args value names (corr-gaussian's cov=FILE.h5, a
 * Stan model's init=FILE.json, a plugin's own files): any value naming an existing file. */
static int check_out_not_target_arg(const config_t *cfg) {
  char key[256], value[CONFIG_PATH_MAX];
  for (const char *item = cfg->target_args; item && *item;) {
    item = target_args_next(item, key, sizeof key, value, sizeof value);
    if (value[0] && h5util_same_file(cfg->out, value))
      return ds_fail(DS_ERR_INPUT, "--out %s: is the file of --target-args %s=%s; writing the output would destroy it",
                     cfg->out, key, value);
  }
  return DS_OK;
}

/* Local: appends "what\tsize\thash\tpath\n" for the file at `path` to `out` (FNV-1a 64 of its
 * bytes: a changed byte changes it). */
static int fingerprint_file(const char *what, const char *path, char *out, size_t size) {
  FILE *file = fopen(path, "rb");
  if (!file) return ds_fail(DS_ERR_INPUT, "%s %s: cannot open: %s", what, path, strerror(errno));
  uint64_t hash = 1469598103934665603ull;
  long long bytes = 0;
  unsigned char buffer[1 << 16];
  size_t got;
  while ((got = fread(buffer, 1, sizeof buffer, file)) > 0) {
    for (size_t i = 0; i < got; ++i) hash = (hash ^ buffer[i]) * 1099511628211ull;
    bytes += (long long)got;
  }
  const int failed = ferror(file);
  fclose(file);
  if (failed) return ds_fail(DS_ERR_INPUT, "%s %s: read failed", what, path);
  const size_t used = strlen(out);
  const int length = snprintf(out + used, size - used, "%s\t%lld\t%016llx\t%s\n", what, bytes,
                              (unsigned long long)hash, path);
  if (length < 0 || (size_t)length >= size - used)
    return ds_fail(DS_ERR_INPUT, "%s %s: the run's input files have too long names to record", what, path);
  return DS_OK;
}

/* Local: fingerprints a JAX bundle's manifest, which holds the sha256 of each of its programs
 * and data files, and those files themselves (a file swapped under an unchanged manifest would
 * otherwise pass). */
static int fingerprint_bundle(const char *bundle, char *out, size_t size) {
  char path[CONFIG_PATH_MAX + 320];
  struct stat folder_st;
  if (stat(bundle, &folder_st) != 0 || !S_ISDIR(folder_st.st_mode))
    return ds_fail(DS_ERR_INPUT, "--target jax:%s: no such bundle folder (make one with dsampler-export)", bundle);
  snprintf(path, sizeof path, "%s/manifest.json", bundle);
  if (stat(path, &folder_st) != 0)
    return ds_fail(DS_ERR_INPUT, "--target jax:%s: the folder has no manifest.json (not a bundle: make one with "
                   "dsampler-export)", bundle);
  DS_TRY(fingerprint_file("--target", path, out, size));
  static const char *const folders[] = {"", "/data"};
  for (int f = 0; f < 2; ++f) {
    char folder[CONFIG_PATH_MAX + 16];
    snprintf(folder, sizeof folder, "%s%s", bundle, folders[f]);
    struct dirent **entries = NULL;
    const int count = scandir(folder, &entries, NULL, alphasort);
    int status = DS_OK;
    for (int e = 0; e < count; ++e) {
      struct stat st;
      snprintf(path, sizeof path, "%s/%s", folder, entries[e]->d_name);
      if (status == DS_OK && strcmp(entries[e]->d_name, "manifest.json") != 0 && stat(path, &st) == 0 &&
          S_ISREG(st.st_mode))
        status = fingerprint_file("--target", path, out, size);
      free(entries[e]);
    }
    free(entries);
    DS_TRY(status);
  }
  return DS_OK;
}

/* Collective: rank 0 fingerprints every file the run reads (--init, --data, the plugin, files
 * a --target-args value names) into run->inputs, and every rank gets them.
 * A resumed run must find each file as the run found it at its start: a changed --data would
 * join two posteriors in one output. */
static int fingerprint_inputs(run_ctx_t *run) {
  const config_t *cfg = run->cfg;
  int status = DS_OK;
  run->inputs[0] = '\0';
  if (run->comm->rank == 0) {
    char *out = run->inputs;
    const size_t size = sizeof run->inputs;
    if (cfg->init[0]) status = fingerprint_file("--init", cfg->init, out, size);
    if (status == DS_OK && cfg->data[0]) status = fingerprint_file("--data", cfg->data, out, size);
    /* A plugin by its bytes; a Stan model by what it compiles to (run->stan_model, checked by
     * run_reopen_output), so that an edited comment does not stop a resume. */
    const char *plugin = strncmp(cfg->target, "plugin:", 7) == 0 ? cfg->target + 7 : NULL;
    if (status == DS_OK && plugin) status = fingerprint_file("--target", plugin, out, size);
    if (status == DS_OK && target_is_jax(cfg->target)) status = fingerprint_bundle(cfg->target + 4, out, size);
    char key[256], value[CONFIG_PATH_MAX], what[sizeof key + 32];
    for (const char *item = cfg->target_args; item && *item && status == DS_OK;) {
      item = target_args_next(item, key, sizeof key, value, sizeof value);
      struct stat st;
      snprintf(what, sizeof what, "--target-args %s", key);
      /* A JAX bundle's plugin runs the programs the bundle fixes: another build of it may run
       * a resume (and it is hundreds of megabytes to read). */
      const int runtime_only = target_is_jax(cfg->target) && strcmp(key, "plugin") == 0;
      /* A built-in reads the one file argument it declares (scale=2 beside a file named 2 is a
       * number); a plugin's arguments are its own, so any that names a file counts. */
      const char *file_key = NULL;
      const int builtin = builtin_target_file_key(cfg->target, &file_key);
      const int file_arg = builtin ? file_key && strcmp(key, file_key) == 0 : !runtime_only;
      if (value[0] && file_arg && stat(value, &st) == 0 && S_ISREG(st.st_mode))
        status = fingerprint_file(what, value, out, size);
    }
  }
  status = comm_agree(run->comm, status);
  if (status == DS_OK) status = comm_bcast(run->comm, run->inputs, sizeof run->inputs, 0);
  return status;
}

/* Collective: a resumed run's input files are those its checkpoint recorded (size and content),
 * line by line; the first that differs is named. Checkpoints from before the fingerprints
 * (none recorded) pass. */
static int check_inputs_unchanged(run_ctx_t *run) {
  const char *recorded = run->resume_meta ? run->resume_meta->inputs : "";
  if (!recorded[0] || strcmp(recorded, run->inputs) == 0) return DS_OK;
  for (const char *line = recorded; *line;) {
    const char *newline = strchr(line, '\n');
    const size_t length = newline ? (size_t)(newline - line) : strlen(line);
    /* The same line, whole, among this start's fingerprints? */
    int same = 0;
    for (const char *at = run->inputs; *at && !same;) {
      const char *next = strchr(at, '\n');
      const size_t at_length = next ? (size_t)(next - at) : strlen(at);
      same = at_length == length && strncmp(at, line, length) == 0;
      at = next ? next + 1 : at + at_length;
    }
    if (!same) {
      /* "what\tsize\thash\tpath": name the option and the path. */
      const char *fields[4] = {line, NULL, NULL, NULL};
      for (int f = 1; f < 4 && fields[f - 1]; ++f) {
        const char *tab = memchr(fields[f - 1], '\t', (size_t)(line + length - fields[f - 1]));
        fields[f] = tab ? tab + 1 : NULL;
      }
      const int what_length = fields[1] ? (int)(fields[1] - line - 1) : (int)length;
      const int path_length = fields[3] ? (int)(line + length - fields[3]) : 0;
      return ds_fail(DS_ERR_INPUT, "resume: %.*s %.*s changed since the run started (its size or content differs); "
                     "resume with the file as it was, or start a new run", what_length, line, path_length,
                     fields[3] ? fields[3] : "");
    }
    line = newline ? newline + 1 : line + length;
  }
  return ds_fail(DS_ERR_INPUT, "resume: the run reads files now that it did not read at its start");
}

/* Collective, before any work: inputs are regular readable files, --out and --checkpoint-dir
 * can be written, the output is none of the inputs, and the options fit in a checkpoint.
 * Agreed. */
static int check_paths(run_ctx_t *run) {
  const config_t *cfg = run->cfg;
  int status = DS_OK;
  /* Inputs: regular files only (a FIFO would block the open, a directory gives MPI-IO noise). */
  if (cfg->init[0]) status = h5util_check_input("--init", cfg->init, 0);
  if (status == DS_OK && cfg->data[0]) status = h5util_check_input("--data", cfg->data, 0);
  const char *plugin = strncmp(cfg->target, "plugin:", 7) == 0 ? cfg->target + 7
                       : target_is_stan(cfg->target)        ? cfg->target + 5
                                                             : NULL;
  if (status == DS_OK && plugin) status = check_plugin_path(cfg->target, plugin);
  char args_data[CONFIG_PATH_MAX] = "";
  if (status == DS_OK && target_args_get(cfg->target_args, "data", args_data, sizeof args_data) && args_data[0])
    status = h5util_check_input("--target-args data", args_data, 0);
  /* A resumed HMC run appends to its output: it must be there (the lock would create it).
   * SVGD writes its output only at the end. */
  if (status == DS_OK && run->resume_path && cfg->algorithm == ALGO_HMC && access(cfg->out, F_OK) != 0)
    status = ds_fail(DS_ERR_INPUT, "output %s of checkpoint %s: cannot open: %s", cfg->out, run->resume_path,
                     strerror(errno));
  if (status == DS_OK) status = check_output_path("--out", cfg->out);
  /* resume would take an output named or made like a checkpoint for one (and stop at it), and
   * writing over a checkpoint would lose it. */
  if (status == DS_OK && run->comm->rank == 0 && ckpt_is_checkpoint_path(cfg->out))
    status = ds_fail(DS_ERR_INPUT, "--out %s: is a checkpoint's name or a checkpoint; writing the output there would "
                     "destroy it or be taken for one by resume: give another name", cfg->out);
  if (status == DS_OK) status = check_checkpoint_dir(cfg->checkpoint_dir);
  /* The output is truncated when a fresh run starts: it must not be one of the run's inputs. */
  const struct { const char *option, *path; } inputs[] = {
      {"--init", cfg->init},           {"--data", cfg->data},         {"--target-args data", args_data},
      {"--config", cfg->config_file}, {"--target plugin", plugin},   {"the checkpoint", run->resume_path}};
  for (size_t i = 0; status == DS_OK && i < sizeof inputs / sizeof inputs[0]; ++i)
    if (inputs[i].path && h5util_same_file(cfg->out, inputs[i].path))
      status = ds_fail(DS_ERR_INPUT, "--out %s: is the input %s %s; writing the output would destroy it", cfg->out,
                       inputs[i].option, inputs[i].path);
  if (status == DS_OK) status = check_out_not_target_arg(cfg);
  if (status == DS_OK) {
    char *text = malloc(CKPT_CONFIG_MAX);
    status = text ? config_write_checkpoint_text(cfg, text, CKPT_CONFIG_MAX) : DS_FAIL_ALLOC("options", CKPT_CONFIG_MAX);
    free(text);
  }
  return comm_agree(run->comm, status);
}

/* Collective: rank 0 takes an advisory lock on the output (held in *lock_fd until
 * unlock_output); a second run writing the same file is refused. Agreed. */
static int lock_output(run_ctx_t *run, int *lock_fd) {
  *lock_fd = -1;
  int status = DS_OK;
  if (run->comm->rank == 0) {
    /* flock on the output itself: advisory, released by the kernel however the run ends,
     * and the file's content is not touched (no O_TRUNC). HDF5's MPI-IO driver takes no lock
     * of its own, so this one does not get in its way. */
    int created = 1;
    int fd = open(run->cfg->out, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno == EEXIST) {
      created = 0;
      fd = open(run->cfg->out, O_RDWR | O_CLOEXEC);
    }
    if (fd < 0) {
      status = ds_fail(DS_ERR_INPUT, "--out %s: cannot open: %s", run->cfg->out, strerror(errno));
    } else if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      status = errno == EWOULDBLOCK
                   ? ds_fail(DS_ERR_INPUT, "--out %s: another dsampler run is writing this file; give another --out "
                                           "or wait for that run to end", run->cfg->out)
                   : ds_fail(DS_ERR_IO, "--out %s: cannot lock: %s", run->cfg->out, strerror(errno));
      close(fd);
      if (created) unlink(run->cfg->out);
    } else {
      *lock_fd = fd;
      run->output_created = created;
    }
  }
  DS_TRY(comm_agree(run->comm, status));
  h5util_set_locked_output(run->cfg->out);
  /* Every rank knows whether the output is new (a resumed SVGD run decides on it together). */
  return comm_bcast(run->comm, &run->output_created, sizeof run->output_created, 0);
}

static void unlock_output(run_ctx_t *run, int lock_fd, int status) {
  h5util_set_locked_output(NULL);
  if (lock_fd < 0) return;
  /* A run that failed before writing anything leaves no empty file of its own making. */
  struct stat st;
  if (status != DS_OK && run->output_created && fstat(lock_fd, &st) == 0 && st.st_size == 0) unlink(run->cfg->out);
  close(lock_fd);
}

/* The lock file in a checkpoint folder: one run at a time uses the folder (two runs on one
 * folder would write the same ckpt-N.h5 names, and resume could not tell their checkpoints
 * apart). */
#define RUN_CHECKPOINT_LOCK ".dsampler-lock"

/* DIR/.dsampler-lock, allocated (NULL without memory). */
static char *checkpoint_lock_path(const char *dir) {
  const size_t size = strlen(dir) + sizeof RUN_CHECKPOINT_LOCK + 1;
  char *path = malloc(size);
  if (path) snprintf(path, size, "%s/%s", dir, RUN_CHECKPOINT_LOCK);
  return path;
}

/* Collective: rank 0 creates the checkpoint folder if need be and takes an advisory lock in
 * it, held in *lock_fd until unlock_checkpoint_dir; a second run on the folder is refused.
 * *created says whether the folder was made here. Agreed. */
static int lock_checkpoint_dir(run_ctx_t *run, int *lock_fd, int *created, int *lock_made) {
  *lock_fd = -1;
  *created = 0;
  *lock_made = 0;
  int status = DS_OK;
  const char *dir = run->cfg->checkpoint_dir;
  if (run->comm->rank == 0) {
    if (mkdir(dir, 0777) == 0) *created = 1;
    else if (errno != EEXIST)
      status = ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s: cannot create: %s", dir, strerror(errno));
    char *path = status == DS_OK ? checkpoint_lock_path(dir) : NULL;
    if (status == DS_OK && !path) status = DS_FAIL_ALLOC("the checkpoint lock's name", strlen(dir) + 32);
    /* Made here (O_EXCL) or found: a run refused later removes the lock file it made, so that a
     * refused run leaves nothing in a folder (perhaps another run's). */
    int fd = status == DS_OK ? open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666) : -1;
    if (fd >= 0) *lock_made = 1;
    else if (status == DS_OK && errno == EEXIST) fd = open(path, O_RDWR | O_CLOEXEC);
    if (status == DS_OK && fd < 0)
      status = ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s: cannot write in it: %s", dir, strerror(errno));
    if (status == DS_OK && flock(fd, LOCK_EX | LOCK_NB) != 0)
      status = errno == EWOULDBLOCK
                   ? ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s: another dsampler run is using this folder; give "
                             "each run a checkpoint folder of its own", dir)
                   : ds_fail(DS_ERR_IO, "--checkpoint-dir %s: cannot lock %s: %s", dir, path, strerror(errno));
    if (status == DS_OK) *lock_fd = fd;
    else if (fd >= 0) close(fd);
    if (status != DS_OK && *lock_made && fd >= 0) unlink(path);
    free(path);
    if (status != DS_OK && *created) rmdir(dir);
  }
  return comm_agree(run->comm, status);
}

/* Releases the checkpoint folder; a folder this run made and left without a checkpoint goes
 * (lock file and all), so a run that never checkpointed leaves nothing behind; a failed run
 * removes the lock file it made in a folder that was there (the lock still held: a run waiting
 * for it then holds a file no longer named, and a new one is made by the next). */
static void unlock_checkpoint_dir(run_ctx_t *run, int lock_fd, int created, int lock_made, int status) {
  if (lock_fd < 0) return;
  if (created || (lock_made && status != DS_OK)) {
    char *path = checkpoint_lock_path(run->cfg->checkpoint_dir);
    if (path) {
      unlink(path);
      if (created) rmdir(run->cfg->checkpoint_dir); /* fails, as it should, where checkpoints are */
      free(path);
    }
  }
  close(lock_fd);
}

/* Local, after the target is loaded: what a plugin (or a library it loads) may change in the
 * process and dsampler relies on. The working directory anchors every relative path the run
 * writes: a change is undone and refused. The stop signals' handler: put back, with a warning,
 * so that a stop still checkpoints. */
static int check_process_state(run_ctx_t *run, const char *cwd) {
  char now[CONFIG_PATH_MAX] = "";
  if (cwd[0] && getcwd(now, sizeof now) && strcmp(now, cwd) != 0) {
    const int back = chdir(cwd);
    return ds_fail(DS_ERR_INPUT, "--target %s: changed the working directory (from %s to %s) while loading%s; "
                   "relative paths (--out, --checkpoint-dir) would move with it: a target must not chdir",
                   run->cfg->target, cwd, now, back == 0 ? "" : " (and it could not be changed back)");
  }
  const char *changed = signals_reinstate();
  if (changed && run->comm->rank == 0)
    fprintf(stderr, "dsampler: warning: --target %s: changed how %s is handled (a handler of its own, ignored or "
            "blocked) while loading; dsampler's handler is back, so a stop signal still ends the run with a "
            "checkpoint\n", run->cfg->target, changed);
  return DS_OK;
}

/* Collective: the target's dimension is the same on every rank and the run's sizes do not
 * overflow. */
static int check_target(run_ctx_t *run) {
  const int64_t dim = run->target->dim, items = config_items(run->cfg);
  /* A plugin computes its dimension on each rank: they must agree before any buffer is sized. */
  int64_t low = dim, high = dim;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_INT64_T, MPI_MIN, run->comm->world));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_INT64_T, MPI_MAX, run->comm->world));
  if (low != high)
    return ds_fail(DS_ERR_INPUT, "--target %s: reports dimension %lld on some ranks and %lld on others; a target's "
                                 "dimension must not depend on the rank", run->cfg->target, (long long)low, (long long)high);
  /* Buffers are items x dim values of up to 8 bytes, a few of them: the products must not
   * wrap (a plugin can report any int64). */
  int64_t bytes = 0;
  if (__builtin_mul_overflow(items, dim, &bytes) || __builtin_mul_overflow(bytes, (int64_t)64, &bytes))
    return ds_fail(DS_ERR_INPUT, "--target %s: dimension %lld times %lld items overflows 64-bit sizes",
                   run->cfg->target, (long long)dim, (long long)items);
  return DS_OK;
}

/* The run's id and the folder its relative paths are from: the checkpoint's on a resume, else
 * rank 0's clock, process id and working folder, the same on every rank. */
static int name_run(run_ctx_t *run) {
  comm_ctx_t *comm = run->comm;
  if (run->resume_meta) {
    snprintf(run->run_id, sizeof run->run_id, "%s", run->resume_meta->run_id);
    snprintf(run->start_dir, sizeof run->start_dir, "%s", run->resume_meta->start_dir);
    return DS_OK;
  }
  /* Relative paths in the options are from here; a resume elsewhere comes back (main.c). */
  if (comm->rank == 0 && !getcwd(run->start_dir, sizeof run->start_dir)) run->start_dir[0] = '\0';
  DS_TRY(comm_bcast(comm, run->start_dir, sizeof run->start_dir, 0));
  /* Rank 0's clock and process id name the run; every rank uses its id. */
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  snprintf(run->run_id, sizeof run->run_id, "%016llx-%08x",
           (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec, (unsigned)getpid());
  return comm_bcast(comm, run->run_id, sizeof run->run_id, 0);
}

/* Rank 0's first lines: the resume point, then what runs where. */
static void print_banner(const run_ctx_t *run) {
  const config_t *cfg = run->cfg;
  const comm_ctx_t *comm = run->comm;
  if (comm->rank != 0 || cfg->quiet) return;
  if (run->resume_path)
    printf("dsampler %s: resuming from %s after iteration %lld\n", DSAMPLER_VERSION, run->resume_path,
           (long long)run->resume_meta->iteration);
  printf("dsampler %s: %s, target %s (dim %lld), %lld %s on %d rank%s, backend %s, transport %s\n",
         DSAMPLER_VERSION, config_algorithm_name(cfg->algorithm), run->target->name, (long long)run->target->dim,
         (long long)config_items(cfg), cfg->algorithm == ALGO_HMC ? "chains" : "particles", comm->size,
         comm->size == 1 ? "" : "s", run->backend->name, comm->transport == COMM_TRANSPORT_NCCL ? "nccl" : "mpi");
  fflush(stdout);
}

int run_main(comm_ctx_t *comm, const config_t *cfg, const char *resume_path, const ckpt_meta_t *resume_meta) {
  run_ctx_t run;
  memset(&run, 0, sizeof run);
  run.comm = comm;
  run.cfg = cfg;
  run.resume_path = resume_path;
  run.resume_meta = resume_meta;
  DS_TRY(name_run(&run));
  int lock_fd = -1;
  int status = check_paths(&run);
  if (status == DS_OK) status = lock_output(&run, &lock_fd);
  if (status != DS_OK) return status;
  int ckpt_lock_fd = -1, ckpt_dir_created = 0, ckpt_lock_made = 0;
  status = fingerprint_inputs(&run);
  if (status == DS_OK) status = comm_agree(comm, check_inputs_unchanged(&run));
  if (status == DS_OK) status = lock_checkpoint_dir(&run, &ckpt_lock_fd, &ckpt_dir_created, &ckpt_lock_made);
  if (status != DS_OK) {
    unlock_output(&run, lock_fd, status);
    return status;
  }

  /* The node-local rank picks the GPU: local rank mod the GPUs this rank sees. Where every
   * rank sees all of its node's GPUs, the ranks of a node get distinct ones (ranks beyond
   * the GPU count share them); under per-task binding (CUDA_VISIBLE_DEVICES naming one
   * device) each rank takes ordinal 0, its own GPU. Whether GPUs are shared is decided by
   * their UUIDs in comm_select_transport, not from these counts. */
  backend_t *backend = NULL;
  const int devices = comm_cuda_device_count();
  /* A Stan model runs on the CPU: its gradient is C++ autodiff on the host. `auto` takes the
   * CPU for it; an explicit `cuda` is refused, before anything is compiled or loaded. */
  const char *backend_name = target_is_stan(cfg->target) && cfg->backend == CONFIG_BACKEND_AUTO
                                 ? "cpu"
                                 : config_backend_name(cfg->backend);
  if (target_is_stan(cfg->target) && cfg->backend == CONFIG_BACKEND_CUDA)
    status = ds_fail(DS_ERR_INPUT, "--target %s --backend cuda: Stan models run on the CPU backend only (their "
                     "gradients are Stan Math's autodiff on the host); give --backend cpu or auto", cfg->target);
  if (status == DS_OK) status = backend_create(backend_name, devices > 0 ? comm->local_rank % devices : 0, &backend);
  status = comm_agree(comm, status);
  if (status != DS_OK) {
    backend_destroy(backend);
    unlock_checkpoint_dir(&run, ckpt_lock_fd, ckpt_dir_created, ckpt_lock_made, status);
    unlock_output(&run, lock_fd, status);
    return status;
  }
  comm->device = backend->device;
  /* HMC's collectives are a few sums on the host per iteration: NCCL would add its start-up
   * (0.7 s on one H200) and nothing else, so `auto` takes MPI for HMC. */
  const char *transport =
      cfg->algorithm == ALGO_HMC && cfg->comm == CONFIG_COMM_AUTO ? "mpi" : config_comm_name(cfg->comm);
  status = comm_agree(comm, comm_select_transport(comm, transport, backend->on_device, backend->stream));

  target_handle_t target;
  memset(&target, 0, sizeof target);
  /* From here on a call into the target that never returns ends the job instead of hanging it. */
  if (status == DS_OK)
    status = comm_agree(comm, target_deadline_start(cfg->call_timeout, comm->rank, comm->host, signals_pending));
  /* What the backend's libraries changed (CUDA, NCCL) is put back quietly here, so that the
   * check after loading names only what the target changed. */
  (void)signals_reinstate();
  char cwd[CONFIG_PATH_MAX] = "";
  if (!getcwd(cwd, sizeof cwd)) cwd[0] = '\0';
  if (status == DS_OK) status = comm_agree(comm, target_open(cfg->target, cfg->target_args, cfg->data, cfg->dim, cfg->seed, backend->on_device ? backend->device : -1, comm->world, &target));
  if (status == DS_OK) status = comm_agree(comm, check_process_state(&run, cwd));
  if (status == DS_OK) {
    run.target = &target.target;
    run.target_extra = target.extra;
    status = comm_agree(comm, check_target(&run));
  }
  if (status == DS_OK && target.stan_library[0]) {
    /* model-<hash>, the folder of the library (rank 0's path, the same on every rank). */
    char folder[CONFIG_PATH_MAX];
    snprintf(folder, sizeof folder, "%s", target.stan_library);
    snprintf(run.stan_model, sizeof run.stan_model, "%s", basename(dirname(folder)));
  }
  if (status == DS_OK) {
    run.backend = backend;
    comm_partition(config_items(cfg), comm->size, comm->rank, &run.item_begin, &run.item_end);
    print_banner(&run);
    status = cfg->algorithm == ALGO_HMC ? hmc_run(&run) : svgd_run(&run);
  }
  target_close(&target);
  comm_release_transport(comm); /* NCCL goes before the CUDA resources it used */
  backend_destroy(backend);
  unlock_checkpoint_dir(&run, ckpt_lock_fd, ckpt_dir_created, ckpt_lock_made, status);
  unlock_output(&run, lock_fd, status);
  return status;
}
