/* run.c: the run driver: backend and transport set-up, the target, the initial positions,
 * the output file; then the algorithm. */
#include "run.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm_cuda.h"
#include "h5init.h"
#include "h5util.h"
#include "rng.h"
#include "signals.h"
#include "status.h"
#include "target.h"

int run_initial_positions(run_ctx_t *run, int64_t n_total, float *x_local) {
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  int status = DS_OK;
  const int64_t per_start = cfg->algorithm == ALGO_HMC && cfg->chains_per_start > 1 ? cfg->chains_per_start : 1;
  if (cfg->init[0]) {
    status = h5init_read(run->comm->world, cfg->init, n_total, dim, run->item_begin, run->item_end, x_local);
  } else if (run->target->abi_version >= 2 && run->target->initial_point) {
    /* The model's own starts (a Stan model's: uniform in (-2, 2), tried until log p is finite). */
    status = target_initial_points(run->target, cfg->seed, run->item_begin, rows, per_start, x_local);
  } else {
    /* Chains of one superchain (--chains-per-start K) share the start drawn for its first
     * chain, so that they differ only through their own streams, as nested R-hat assumes; with
     * K = 1 every chain keys its own start, as before the option existed. */
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t item = run->item_begin + r, start_key = item - item % per_start;
      rng_words_t block = {{0, 0, 0, 0}};
      for (int64_t k = 0; k < dim; ++k) {
        if (k % 4 == 0)
          block = rng_block(cfg->seed, (uint64_t)start_key, RNG_ITERATION_INIT, (uint32_t)(k / 4));
        x_local[r * dim + k] = -2.0f + 4.0f * rng_uniform(block.v[k % 4]);
      }
    }
  }
  status = comm_agree(run->comm, status);
  if (status != DS_OK) return status;
  for (int64_t e = 0; e < rows * dim && status == DS_OK; ++e)
    if (!isfinite(x_local[e]))
      status = ds_fail(DS_ERR_INPUT, "--init %s: row %lld, column %lld is not finite (%g)", cfg->init,
                       (long long)(run->item_begin + e / dim), (long long)(e % dim), (double)x_local[e]);
  return comm_agree(run->comm, status);
}

typedef struct attr_list {
  h5out_attr_t attrs[64];
  char storage[64][2][256];
  int count;
} attr_list_t;

static void add_attr(void *user, const char *key, const char *value) {
  attr_list_t *list = user;
  if (list->count >= 64) return;
  /* 64 slots hold today's options with room to spare; a new option past them must be seen. */
  char(*slot)[256] = list->storage[list->count];
  snprintf(slot[0], sizeof slot[0], "config_%s", key);
  snprintf(slot[1], sizeof slot[1], "%s", value);
  for (char *c = slot[0]; *c; ++c)
    if (*c == '-') *c = '_';
  list->attrs[list->count].key = slot[0];
  list->attrs[list->count].value = slot[1];
  list->count++;
}

int run_open_output(run_ctx_t *run, h5out_t **out) {
  attr_list_t *list = calloc(1, sizeof *list);
  if (!list) return DS_FAIL_ALLOC("output attributes", sizeof *list);
  add_attr(list, "algorithm", config_algorithm_name(run->cfg->algorithm));
  config_for_each(run->cfg, add_attr, list);
  char ranks[32];
  snprintf(ranks, sizeof ranks, "%d", run->comm->size);
  add_attr(list, "ranks", ranks);
  /* Attributes are written collectively: every rank must give the same value, rank 0's. */
  char backend_used[16];
  snprintf(backend_used, sizeof backend_used, "%s", run->backend->name);
  MPI_Bcast(backend_used, sizeof backend_used, MPI_CHAR, 0, run->comm->world);
  add_attr(list, "backend_used", backend_used);
  /* The transport is the same on every rank (comm_select_transport decides it together). */
  add_attr(list, "transport_used", run->comm->transport == COMM_TRANSPORT_NCCL ? "nccl" : "mpi");
  list->attrs[list->count].key = "run_id";
  list->attrs[list->count].value = run->run_id;
  list->count++;
  if (run->stan_model[0]) {
    list->attrs[list->count].key = "stan_model";
    list->attrs[list->count].value = run->stan_model;
    list->count++;
  }
  int status = h5out_create(out, run->comm->world, run->cfg->out, list->attrs, list->count);
  free(list);
  return comm_agree(run->comm, status);
}

void run_output_vars(const run_ctx_t *run, h5out_var_t *vars, h5out_shape_t *shapes) {
  const dsampler_target *t = run->target;
  for (int v = 0; v < t->n_vars; ++v) {
    vars[v] = (h5out_var_t){t->vars[v].name, H5OUT_FLOAT64, 0};
    shapes[v].n_axes = t->vars[v].rank;
    for (int axis = 0; axis < t->vars[v].rank; ++axis) shapes[v].extent[axis] = t->vars[v].shape[axis];
  }
}

int run_write_particles(run_ctx_t *run, h5out_t *out, int64_t n, const float *x_host, int64_t rows) {
  const dsampler_target *t = run->target;
  const int64_t dim = t->dim, chains = rows > 0 ? 1 : 0;
  const h5out_var_t particles[] = {{t->var_name, H5OUT_FLOAT32, 1}};
  const void *x_data[] = {x_host};
  int group = 0;
  if (!target_has_outputs(t)) {
    DS_TRY(h5out_add_group(out, "posterior", 1, dim, n, particles, 1, &group));
    return h5out_write(out, group, n, 0, chains, run->item_begin, rows, x_data);
  }
  const int64_t width = t->constrained_dim, cells = rows > 0 ? rows : 1;
  h5out_var_t *vars = calloc((size_t)t->n_vars, sizeof *vars);
  h5out_shape_t *shapes = calloc((size_t)t->n_vars, sizeof *shapes);
  const void **data = calloc((size_t)t->n_vars, sizeof *data);
  uint64_t *keys = malloc((size_t)cells * sizeof *keys);
  double *packed = malloc((size_t)(cells * width) * sizeof *packed), *values = malloc((size_t)(cells * width) * sizeof *values);
  int status = vars && shapes && data && keys && packed && values
                   ? DS_OK : DS_FAIL_ALLOC("the particles' variables", (size_t)(cells * width) * 16);
  for (int64_t r = 0; status == DS_OK && r < rows; ++r) keys[r] = target_output_key(run->cfg->seed, 0, 1, run->item_begin + r);
  if (status == DS_OK && rows > 0) status = target_constrain(t, x_host, rows, keys, packed);
  /* Each particle is one draw of one chain: slots of one. */
  if (status == DS_OK) {
    run_output_vars(run, vars, shapes);
    target_unpack_outputs(t, packed, rows, 1, 1, values, data);
  }
  status = comm_agree(run->comm, status);
  if (status == DS_OK) status = h5out_add_group_shaped(out, "posterior", 1, dim, n, vars, shapes, t->n_vars, &group);
  if (status == DS_OK) status = h5out_write(out, group, n, 0, chains, run->item_begin, rows, data);
  if (status == DS_OK) status = h5out_add_group(out, "unconstrained_posterior", 1, dim, n, particles, 1, &group);
  if (status == DS_OK) status = h5out_write(out, group, n, 0, chains, run->item_begin, rows, x_data);
  free(vars);
  free(shapes);
  free(data);
  free(keys);
  free(packed);
  free(values);
  return status;
}

int run_stop_requested(run_ctx_t *run, int *stop) {
  int mine = signals_pending() != 0, any = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, run->comm->world));
  *stop = any;
  return DS_OK;
}

int run_check_checkpoint_dir(run_ctx_t *run) {
  int found = 0;
  if (run->resume_path) return DS_OK;
  DS_TRY(ckpt_dir_has_checkpoints(run->comm->world, run->cfg->checkpoint_dir, &found));
  if (!found) return DS_OK;
  return ds_fail(DS_ERR_INPUT,
                 "--checkpoint-dir %s already holds checkpoints: continue that run with `dsampler resume %s`, "
                 "or give another --checkpoint-dir (or remove them)",
                 run->cfg->checkpoint_dir, run->cfg->checkpoint_dir);
}

int run_checkpoint_meta(run_ctx_t *run, int64_t iteration, int64_t draws_written, ckpt_meta_t *meta) {
  memset(meta, 0, sizeof *meta);
  snprintf(meta->algorithm, sizeof meta->algorithm, "%s", config_algorithm_name(run->cfg->algorithm));
  meta->iteration = iteration;
  meta->draws_written = draws_written;
  meta->n_items = config_items(run->cfg);
  meta->dim = run->target->dim;
  meta->seed = run->cfg->seed;
  snprintf(meta->target, sizeof meta->target, "%s", run->cfg->target);
  snprintf(meta->run_id, sizeof meta->run_id, "%s", run->run_id);
  FILE *text = fmemopen(meta->config, sizeof meta->config - 1, "w");
  if (!text) return ds_fail(DS_ERR_INTERNAL, "cannot format the configuration");
  config_write_ini(run->cfg, text);
  fclose(text);
  return DS_OK;
}

int run_write_checkpoint(run_ctx_t *run, const ckpt_meta_t *meta, const ckpt_array_t *arrays, int n_arrays,
                         const ckpt_global_t *globals, int n_globals, int stopping) {
  int status = ckpt_write(run->comm->world, run->cfg->checkpoint_dir, meta, arrays, n_arrays, globals, n_globals,
                          run->item_begin, run->item_end, (int)run->cfg->keep);
  status = comm_agree(run->comm, status);
  if (status == DS_OK && stopping && run->comm->rank == 0) {
    if (run->progress.printed_inline) fprintf(stderr, "\n");
    fprintf(stderr, "dsampler: stopped by a signal after iteration %lld; checkpoint %s/ckpt-%lld.h5; continue with "
                    "`dsampler resume %s`\n",
            (long long)meta->iteration, run->cfg->checkpoint_dir, (long long)meta->iteration, run->cfg->checkpoint_dir);
  }
  return status;
}

/* The output's config_* attributes say what the run was asked for; a resume may extend it
 * (--draws, --iters) or change where it reports, so they are rewritten from this run's
 * configuration, and only once the file is known to be this run's. */
static int update_output_config(run_ctx_t *run) {
  char run_id[64] = "";
  DS_TRY(h5util_read_root_attr(run->comm->world, "output", run->cfg->out, "run_id", run_id, sizeof run_id));
  if (strcmp(run_id, run->run_id) != 0)
    return ds_fail(DS_ERR_INPUT, "output %s belongs to another run than checkpoint %s (run ids %s and %s): was it "
                                 "overwritten? Refusing to append to it",
                   run->cfg->out, run->resume_path, run_id, run->run_id);
  attr_list_t *list = calloc(1, sizeof *list);
  if (!list) return comm_agree(run->comm, DS_FAIL_ALLOC("output attributes", sizeof *list));
  config_for_each(run->cfg, add_attr, list);
  char ranks[32];
  snprintf(ranks, sizeof ranks, "%d", run->comm->size);
  add_attr(list, "ranks", ranks);
  const char *keys[64], *values[64];
  for (int i = 0; i < list->count; ++i) {
    keys[i] = list->attrs[i].key;
    values[i] = list->attrs[i].value;
  }
  int status = h5util_set_root_attrs(run->comm->world, "output", run->cfg->out, keys, values, list->count);
  free(list);
  return status;
}

int run_reopen_output(run_ctx_t *run, h5out_t **out) {
  DS_TRY(comm_agree(run->comm, update_output_config(run)));
  int status = comm_agree(run->comm, h5out_open(out, run->comm->world, run->cfg->out));
  if (status != DS_OK) return status;
  char run_id[64] = "";
  status = h5out_read_attr(*out, "run_id", run_id, sizeof run_id);
  if (status == DS_OK && strcmp(run_id, run->run_id) != 0)
    status = ds_fail(DS_ERR_INPUT, "output %s belongs to another run than checkpoint %s (run ids %s and %s): was it "
                                   "overwritten? Refusing to append to it",
                     run->cfg->out, run->resume_path, run_id, run->run_id);
  /* A Stan model is compiled from its file's content: a file edited since the run started
   * compiles to another library, which must not continue the run's chains. */
  char stan_model[64] = "";
  if (status == DS_OK && run->stan_model[0]) status = h5out_read_attr(*out, "stan_model", stan_model, sizeof stan_model);
  if (status == DS_OK && run->stan_model[0] && strcmp(stan_model, run->stan_model) != 0)
    status = ds_fail(DS_ERR_INPUT, "--target %s: the model is not the one this run started with (it compiles to %s, "
                     "the run's was %s): resume with the model file as it was", run->cfg->target, run->stan_model,
                     stan_model);
  return comm_agree(run->comm, status);
}

int run_check_resume_meta(run_ctx_t *run) {
  const ckpt_meta_t *m = run->resume_meta;
  if (strcmp(m->algorithm, config_algorithm_name(run->cfg->algorithm)) != 0 || m->n_items != config_items(run->cfg) ||
      m->dim != run->target->dim || m->seed != run->cfg->seed || strcmp(m->target, run->cfg->target) != 0)
    return ds_fail(DS_ERR_CHECKPOINT, "checkpoint %s: its metadata (%s, %s, %lld items of dim %lld) disagree with "
                                      "its own configuration: damaged?",
                   run->resume_path, m->algorithm, m->target, (long long)m->n_items, (long long)m->dim);
  return DS_OK;
}

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

int run_check_paths(run_ctx_t *run) {
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
  if (status == DS_OK) status = check_checkpoint_dir(cfg->checkpoint_dir);
  /* The output is truncated when a fresh run starts: it must not be one of the run's inputs. */
  const struct { const char *option, *path; } inputs[] = {
      {"--init", cfg->init},           {"--data", cfg->data},         {"--target-args data", args_data},
      {"--config", cfg->config_file}, {"--target plugin", plugin},   {"the checkpoint", run->resume_path}};
  for (size_t i = 0; status == DS_OK && i < sizeof inputs / sizeof inputs[0]; ++i)
    if (inputs[i].path && h5util_same_file(cfg->out, inputs[i].path))
      status = ds_fail(DS_ERR_INPUT, "--out %s: is the input %s %s; writing the output would destroy it", cfg->out,
                       inputs[i].option, inputs[i].path);
  return comm_agree(run->comm, status);
}

int run_lock_output(run_ctx_t *run, int *lock_fd) {
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
  return comm_agree(run->comm, status);
}

void run_unlock_output(run_ctx_t *run, int lock_fd, int status) {
  if (lock_fd < 0) return;
  /* A run that failed before writing anything leaves no empty file of its own making. */
  struct stat st;
  if (status != DS_OK && run->output_created && fstat(lock_fd, &st) == 0 && st.st_size == 0) unlink(run->cfg->out);
  close(lock_fd);
}

int run_check_target(run_ctx_t *run) {
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

int run_main(comm_ctx_t *comm, const config_t *cfg, const char *resume_path, const ckpt_meta_t *resume_meta) {
  run_ctx_t run;
  memset(&run, 0, sizeof run);
  run.comm = comm;
  run.cfg = cfg;
  run.resume_path = resume_path;
  run.resume_meta = resume_meta;
  if (resume_meta) {
    snprintf(run.run_id, sizeof run.run_id, "%s", resume_meta->run_id);
  } else {
    /* Rank 0's clock and process id name the run; every rank uses its id. */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    snprintf(run.run_id, sizeof run.run_id, "%016llx-%08x", (unsigned long long)now.tv_sec * 1000000000ull + (unsigned long long)now.tv_nsec,
             (unsigned)getpid());
    MPI_Bcast(run.run_id, sizeof run.run_id, MPI_CHAR, 0, comm->world);
  }
  /* Before the output exists: a stop signal from then on is a checkpoint, not a kill. */
  signals_install();
  int lock_fd = -1;
  int status = run_check_paths(&run);
  if (status == DS_OK) status = run_lock_output(&run, &lock_fd);
  if (status != DS_OK) return status;

  /* The node-local rank picks the GPU: local rank mod the GPUs this rank sees. Where every
   * rank sees all of its node's GPUs, the ranks of a node get distinct ones (ranks beyond
   * the GPU count share them); under per-task binding (CUDA_VISIBLE_DEVICES naming one
   * device) each rank takes ordinal 0, its own GPU. Whether GPUs are shared is decided by
   * their UUIDs in comm_select_transport, not from these counts. */
  backend_t *backend = NULL;
  const int devices = comm_cuda_device_count();
  /* A Stan model runs on the CPU: its gradient is C++ autodiff on the host. `auto` takes the
   * CPU for it; an explicit `cuda` is refused, before anything is compiled or loaded. */
  const char *backend_name = target_is_stan(cfg->target) && strcmp(cfg->backend, "auto") == 0 ? "cpu" : cfg->backend;
  if (target_is_stan(cfg->target) && strcmp(cfg->backend, "cuda") == 0)
    status = ds_fail(DS_ERR_INPUT, "--target %s --backend cuda: Stan models run on the CPU backend only (their "
                     "gradients are Stan Math's autodiff on the host); give --backend cpu or auto", cfg->target);
  if (status == DS_OK) status = backend_create(backend_name, devices > 0 ? comm->local_rank % devices : 0, &backend);
  status = comm_agree(comm, status);
  if (status != DS_OK) {
    backend_destroy(backend);
    run_unlock_output(&run, lock_fd, status);
    return status;
  }
  comm->device = backend->device;
  /* HMC's collectives are a few sums on the host per iteration: NCCL would add its start-up
   * (0.7 s on one H200) and nothing else, so `auto` takes MPI for HMC. */
  const char *transport = cfg->algorithm == ALGO_HMC && strcmp(cfg->comm, "auto") == 0 ? "mpi" : cfg->comm;
  status = comm_agree(comm, comm_select_transport(comm, transport, backend->on_device, backend->stream));

  target_handle_t target;
  memset(&target, 0, sizeof target);
  if (status == DS_OK) status = comm_agree(comm, target_open(cfg->target, cfg->target_args, cfg->data, cfg->dim, cfg->seed, comm->world, &target));
  if (status == DS_OK) {
    run.target = &target.target;
    status = comm_agree(comm, run_check_target(&run));
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
    if (comm->rank == 0 && !cfg->quiet && resume_path)
      printf("dsampler %s: resuming from %s after iteration %lld\n", DSAMPLER_VERSION, resume_path,
             (long long)resume_meta->iteration);
    if (comm->rank == 0 && !cfg->quiet) {
      printf("dsampler %s: %s, target %s (dim %lld), %lld %s on %d rank%s, backend %s, transport %s\n",
             DSAMPLER_VERSION, config_algorithm_name(cfg->algorithm), target.target.name,
             (long long)target.target.dim, (long long)config_items(cfg),
             cfg->algorithm == ALGO_HMC ? "chains" : "particles", comm->size, comm->size == 1 ? "" : "s",
             backend->name, comm->transport == COMM_TRANSPORT_NCCL ? "nccl" : "mpi");
      fflush(stdout);
    }
    status = cfg->algorithm == ALGO_HMC ? hmc_run(&run) : svgd_run(&run);
  }
  target_close(&target);
  comm_release_transport(comm); /* NCCL goes before the CUDA resources it used */
  backend_destroy(backend);
  run_unlock_output(&run, lock_fd, status);
  return status;
}
