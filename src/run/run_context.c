/* run_context.c: the steps both algorithms share: initial positions, the output file and its
 * particles, checkpoints, stop requests and the checks of a resumed run. */
#include "run_context.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5init.h"
#include "h5util.h"
#include "rng.h"
#include "signals.h"
#include "status.h"
#include "target.h"

/* Starts are redrawn, as Stan's initialisation does, up to this many draws per item. */
enum { INIT_MAX_DRAWS = 100, INIT_NAMED = 8, INIT_CHUNK_ROWS = 65536 };

/* The seed a target's initial_point takes for draw `attempt` of every item: the run's seed for
 * the first, then one of its own for each later draw (the target keys by item itself). */
static uint64_t init_attempt_seed(uint64_t seed, int attempt) {
  if (attempt == 0) return seed;
  const rng_words_t w = rng_block(seed, 0, RNG_ITERATION_INIT, 0xFFFF0000u + (uint32_t)attempt);
  return ((uint64_t)w.v[0] << 32) | w.v[1];
}

/* Draw `attempt` of the rows marked in redo (all when NULL): the target's initial_point, or
 * uniform on (-2, 2] from blocks attempt * ceil(dim / 4) + k / 4 of (seed, start item,
 * RNG_ITERATION_INIT), so that draw 0 is the plain start. */
static int draw_starts(run_ctx_t *run, int64_t per_start, int attempt, const uint8_t *redo, float *x_local) {
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  if (run->target->abi_version >= 2 && run->target->initial_point)
    /* The model's own starts (a Stan model's: uniform in (-2, 2), tried until log p is finite). */
    return target_initial_points(run->target, init_attempt_seed(cfg->seed, attempt), run->item_begin, rows,
                                 per_start, redo, x_local);
  /* Chains of one superchain (--chains-per-start K) share the start drawn for its first chain,
   * so that they differ only through their own streams, as nested R-hat assumes; with K = 1
   * every chain keys its own start. */
  const uint32_t blocks = (uint32_t)((dim + 3) / 4);
  for (int64_t r = 0; r < rows; ++r) {
    if (redo && !redo[r]) continue;
    const int64_t item = run->item_begin + r, start_key = item - item % per_start;
    rng_words_t block = {{0, 0, 0, 0}};
    for (int64_t k = 0; k < dim; ++k) {
      if (k % 4 == 0)
        block = rng_block(cfg->seed, (uint64_t)start_key, RNG_ITERATION_INIT,
                          (uint32_t)attempt * blocks + (uint32_t)(k / 4));
      x_local[r * dim + k] = -2.0f + 4.0f * rng_uniform(block.v[k % 4]);
    }
  }
  return DS_OK;
}

/* Why each marked row's start cannot be used (log p or a gradient coordinate not finite, as the
 * backend computes them): reason[r] = 0 when it can, 1 + k for gradient coordinate k, and -1
 * for log p, whose value goes to value[r]. Rows in chunks through backend buffers. */
static int check_starts(run_ctx_t *run, const float *x_local, const uint8_t *redo, int64_t *reason, float *value) {
  backend_t *b = run->backend;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  const int64_t chunk = rows < INIT_CHUNK_ROWS ? (rows > 0 ? rows : 1) : INIT_CHUNK_ROWS;
  float *host = malloc((size_t)(chunk * (2 * dim + 1)) * sizeof *host);
  int64_t *index = malloc((size_t)chunk * sizeof *index);
  float *x = NULL, *logp = NULL, *grad = NULL;
  int status = host && index ? DS_OK : DS_FAIL_ALLOC("the starts' check", (size_t)(chunk * (2 * dim + 1)) * sizeof *host);
  if (status == DS_OK) status = b->alloc(b, (void **)&x, (size_t)(chunk * dim) * sizeof(float));
  if (status == DS_OK) status = b->alloc(b, (void **)&grad, (size_t)(chunk * dim) * sizeof(float));
  if (status == DS_OK) status = b->alloc(b, (void **)&logp, (size_t)chunk * sizeof(float));
  float *host_grad = host + chunk * dim, *host_logp = host_grad + chunk * dim;
  for (int64_t r = 0; status == DS_OK && r < rows;) {
    int64_t n = 0;
    for (; r < rows && n < chunk; ++r) {
      reason[r] = 0;
      if (redo && !redo[r]) continue;
      memcpy(host + n * dim, x_local + r * dim, (size_t)dim * sizeof(float));
      index[n++] = r;
    }
    if (n == 0) continue;
    status = b->upload(b, x, host, (size_t)(n * dim) * sizeof(float));
    if (status == DS_OK) status = b->logp_grad(b, run->target, x, n, logp, grad);
    if (status == DS_OK) status = b->download(b, host_logp, logp, (size_t)n * sizeof(float));
    if (status == DS_OK) status = b->download(b, host_grad, grad, (size_t)(n * dim) * sizeof(float));
    for (int64_t i = 0; status == DS_OK && i < n; ++i) {
      const int64_t row = index[i];
      value[row] = host_logp[i];
      if (!isfinite(host_logp[i])) {
        reason[row] = -1;
        continue;
      }
      for (int64_t k = 0; k < dim; ++k)
        if (!isfinite(host_grad[i * dim + k])) {
          reason[row] = 1 + k;
          value[row] = host_grad[i * dim + k];
          break;
        }
    }
  }
  if (x) b->release(b, x);
  if (grad) b->release(b, grad);
  if (logp) b->release(b, logp);
  free(host);
  free(index);
  return status;
}

/* The error for the rows never given a usable start: the first INIT_NAMED of them (all ranks)
 * and the last reason for the first. */
static int no_start_error(run_ctx_t *run, const int64_t *reason, const float *value, const uint8_t *fixed,
                          int64_t failed_total) {
  const int64_t rows = run->item_end - run->item_begin;
  int64_t named[INIT_NAMED], all[INIT_NAMED];
  int count = 0;
  for (int64_t r = 0; r < rows && count < INIT_NAMED; ++r)
    if (reason[r] != 0) named[count++] = run->item_begin + r;
  for (int i = count; i < INIT_NAMED; ++i) named[i] = INT64_MAX;
  /* Every rank's first chains, the smallest ids overall. */
  for (int i = 0; i < INIT_NAMED; ++i) all[i] = INT64_MAX;
  int status = DS_OK;
  for (int source = 0; source < run->comm->size && status == DS_OK; ++source) {
    int64_t theirs[INIT_NAMED];
    memcpy(theirs, named, sizeof theirs);
    status = comm_bcast(run->comm, theirs, (int64_t)sizeof theirs, source);
    for (int i = 0; i < INIT_NAMED; ++i)
      for (int j = 0; j < INIT_NAMED; ++j)
        if (theirs[i] < all[j]) {
          memmove(all + j + 1, all + j, (size_t)(INIT_NAMED - 1 - j) * sizeof *all);
          all[j] = theirs[i];
          break;
        }
  }
  DS_TRY(comm_agree(run->comm, status));
  char list[256] = "";
  for (int i = 0; i < INIT_NAMED && all[i] != INT64_MAX; ++i) {
    const size_t used = strlen(list);
    snprintf(list + used, sizeof list - used, "%s%lld", i ? ", " : "", (long long)all[i]);
  }
  const char *item = run->cfg->algorithm == ALGO_HMC ? "chain" : "particle";
  /* The rank holding the first of them says why. */
  status = DS_OK;
  if (all[0] >= run->item_begin && all[0] < run->item_end) {
    const int64_t r = all[0] - run->item_begin;
    char why[160];
    if (reason[r] < 0)
      snprintf(why, sizeof why, "log p is %g", (double)value[r]);
    else
      snprintf(why, sizeof why, "the gradient's coordinate %lld is %g", (long long)(reason[r] - 1), (double)value[r]);
    /* Where the target was given arguments, they may be what makes the density overflow. */
    char args[sizeof run->cfg->target_args + 96] = "";
    if (run->cfg->target_args[0])
      snprintf(args, sizeof args, " (with --target-args %s: do they give a finite density in float32?)",
               run->cfg->target_args);
    status = ds_fail(DS_ERR_INPUT, "--target %s: no start with a finite log density and gradient for %lld %s%s "
                     "(%s%s) after %s; at %s %lld's last start %s%s", run->cfg->target, (long long)failed_total, item,
                     failed_total == 1 ? "" : "s", list, failed_total > INIT_NAMED ? ", ..." : "",
                     fixed[r] ? "its start does not change with the seed (given by the target's arguments)"
                              : "100 draws each",
                     item, (long long)all[0], why, args);
  }
  return comm_agree(run->comm, status);
}

int run_initial_positions(run_ctx_t *run, int64_t n_total, float *x_local) {
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  int status = DS_OK;
  const int64_t per_start = cfg->algorithm == ALGO_HMC && cfg->chains_per_start > 1 ? cfg->chains_per_start : 1;
  if (cfg->init[0]) {
    status = comm_agree(run->comm, h5init_read(run->comm->world, cfg->init, n_total, dim, run->item_begin,
                                               run->item_end, x_local));
    for (int64_t e = 0; e < rows * dim && status == DS_OK; ++e)
      if (!isfinite(x_local[e]))
        status = ds_fail(DS_ERR_INPUT, "--init %s: row %lld, column %lld is not finite (%g)", cfg->init,
                         (long long)(run->item_begin + e / dim), (long long)(e % dim), (double)x_local[e]);
    return comm_agree(run->comm, status);
  }
  /* Drawn starts: each row whose log p or gradient is not finite is drawn again (up to
   * INIT_MAX_DRAWS draws), each draw keyed by (seed, item, attempt), so any rank count finds
   * the same starts. A start that stays the same for a new seed (the target's given one) is not
   * drawn again. */
  const size_t n = (size_t)(rows > 0 ? rows : 1);
  uint8_t *redo = malloc(n * 2), *fixed = redo ? redo + n : NULL;
  int64_t *reason = malloc(n * sizeof *reason);
  float *value = malloc(n * sizeof *value), *before = malloc(n * (size_t)dim * sizeof *before);
  if (!(redo && reason && value && before)) status = DS_FAIL_ALLOC("the starts' redraws", n * (size_t)dim * sizeof(float));
  if (status == DS_OK) memset(redo, 0, 2 * n);
  int64_t failed = 0;
  for (int attempt = 0; status == DS_OK && attempt < INIT_MAX_DRAWS; ++attempt) {
    if (attempt > 0) memcpy(before, x_local, (size_t)(rows * dim) * sizeof(float));
    status = comm_agree(run->comm, draw_starts(run, per_start, attempt, attempt ? redo : NULL, x_local));
    for (int64_t e = 0; e < rows * dim && status == DS_OK; ++e)
      if (!isfinite(x_local[e]))
        status = ds_fail(DS_ERR_INPUT, "--target %s: the target's initial_point gave a non-finite start (%g) for "
                         "item %lld, coordinate %lld", cfg->target, (double)x_local[e],
                         (long long)(run->item_begin + e / dim), (long long)(e % dim));
    for (int64_t r = 0; status == DS_OK && attempt > 0 && r < rows; ++r)
      if (redo[r] && !memcmp(before + r * dim, x_local + r * dim, (size_t)dim * sizeof(float))) fixed[r] = 1;
    status = comm_agree(run->comm, status);
    if (status != DS_OK) break;
    status = comm_agree(run->comm, check_starts(run, x_local, attempt ? redo : NULL, reason, value));
    uint64_t counts[2] = {0, 0};
    for (int64_t r = 0; status == DS_OK && r < rows; ++r) {
      redo[r] = reason[r] != 0 && !fixed[r];
      counts[0] += reason[r] != 0;
      counts[1] += redo[r];
    }
    if (status == DS_OK) status = comm_agree(run->comm, comm_allreduce_sum_u64(run->comm, counts, 2));
    failed = (int64_t)counts[0];
    if (status != DS_OK || counts[1] == 0) break;
  }
  if (status == DS_OK && failed > 0) status = no_start_error(run, reason, value, fixed, failed);
  free(redo);
  free(reason);
  free(value);
  free(before);
  return comm_agree(run->comm, status);
}

typedef struct attr_list {
  h5out_attr_t attrs[64];
  struct { char key[64], value[CONFIG_PATH_MAX]; } storage[64]; /* a value: an option's, paths whole */
  int count;
} attr_list_t;

static void add_attr(void *user, const char *key, const char *value) {
  attr_list_t *list = user;
  if (list->count >= 64) return;
  /* 64 slots hold today's options with room to spare; a new option past them must be seen. */
  char *slot_key = list->storage[list->count].key, *slot_value = list->storage[list->count].value;
  snprintf(slot_key, sizeof list->storage[0].key, "config_%s", key);
  snprintf(slot_value, sizeof list->storage[0].value, "%s", value);
  for (char *c = slot_key; *c; ++c)
    if (*c == '-') *c = '_';
  list->attrs[list->count].key = slot_key;
  list->attrs[list->count].value = slot_value;
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
  int status = comm_bcast(run->comm, backend_used, sizeof backend_used, 0);
  if (status != DS_OK) {
    free(list);
    return status;
  }
  add_attr(list, "backend_used", backend_used);
  /* The transport is the same on every rank (comm_select_transport decides it together). */
  add_attr(list, "transport_used", run->comm->transport == COMM_TRANSPORT_NCCL ? "nccl" : "mpi");
  list->attrs[list->count].key = "run_id";
  list->attrs[list->count].value = run->run_id;
  list->count++;
  if (run->inputs[0]) {
    list->attrs[list->count].key = "input_files";
    list->attrs[list->count].value = run->inputs;
    list->count++;
  }
  if (run->stan_model[0]) {
    list->attrs[list->count].key = "stan_model";
    list->attrs[list->count].value = run->stan_model;
    list->count++;
  }
  status = h5out_create(out, run->comm->world, run->cfg->out, list->attrs, list->count);
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
  if (status == DS_OK && rows > 0) status = target_constrain(t, x_host, rows, keys, packed, run->target_extra.constrain_rows_per_call);
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
  char other[64] = "";
  DS_TRY(ckpt_dir_checkpoints(run->comm->world, run->cfg->checkpoint_dir, run->run_id, &found, other, sizeof other));
  /* A resume writes its checkpoints beside its own run's only: in another run's folder the next
   * `resume` of that folder would continue this run under the other's name. */
  if (run->resume_path && other[0])
    return ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s holds the checkpoints of another run (run id %s; this run's is "
                   "%s): resume each run into its own folder (leave out --checkpoint-dir to keep this run's)",
                   run->cfg->checkpoint_dir, other, run->run_id);
  if (run->resume_path || !found) return DS_OK;
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
  snprintf(meta->inputs, sizeof meta->inputs, "%s", run->inputs);
  snprintf(meta->start_dir, sizeof meta->start_dir, "%s", run->start_dir);
  return config_write_checkpoint_text(run->cfg, meta->config, sizeof meta->config);
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
  /* A Stan model is compiled from its file's content: a file edited since the run started
   * compiles to another library, which must not continue the run's chains. Checked before
   * anything is written, so that a refused resume leaves the output as it was. */
  char stan_model[64] = "";
  if (run->stan_model[0])
    DS_TRY(h5util_read_root_attr(run->comm->world, "output", run->cfg->out, "stan_model", stan_model, sizeof stan_model));
  if (run->stan_model[0] && strcmp(stan_model, run->stan_model) != 0)
    return ds_fail(DS_ERR_INPUT, "--target %s: the model is not the one this run started with (it compiles to %s, "
                   "the run's was %s): resume with the model file as it was", run->cfg->target, run->stan_model,
                   stan_model);
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
