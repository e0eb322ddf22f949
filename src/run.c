/* run.c: the run driver: backend and transport set-up, the target, the initial positions,
 * the output file; then the algorithm. */
#include "run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm_cuda.h"
#include "h5init.h"
#include "rng.h"
#include "signals.h"
#include "status.h"
#include "target.h"

int run_initial_positions(run_ctx_t *run, int64_t n_total, float *x_local) {
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  int status = DS_OK;
  if (cfg->init[0]) {
    status = h5init_read(run->comm->world, cfg->init, n_total, dim, run->item_begin, run->item_end, x_local);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      rng_words_t block = {{0, 0, 0, 0}};
      for (int64_t k = 0; k < dim; ++k) {
        if (k % 4 == 0)
          block = rng_block(cfg->seed, (uint64_t)(run->item_begin + r), RNG_ITERATION_INIT, (uint32_t)(k / 4));
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
  list->attrs[list->count].key = "run_id";
  list->attrs[list->count].value = run->run_id;
  list->count++;
  int status = h5out_create(out, run->comm->world, run->cfg->out, list->attrs, list->count);
  free(list);
  return comm_agree(run->comm, status);
}

int run_stop_requested(run_ctx_t *run, int *stop) {
  int mine = signals_pending() != 0, any = 0;
  MPI_CHECK(MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, run->comm->world));
  *stop = any;
  return DS_OK;
}

int run_check_checkpoint_dir(run_ctx_t *run) {
  if (run->resume_path || !ckpt_dir_has_checkpoints(run->comm->world, run->cfg->checkpoint_dir)) return DS_OK;
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

int run_reopen_output(run_ctx_t *run, h5out_t **out) {
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
  signals_install();

  /* The node-local rank picks the GPU (local rank mod the GPUs visible), whatever
   * CUDA_VISIBLE_DEVICES says; ranks beyond the GPU count share them (over MPI, not NCCL). */
  backend_t *backend = NULL;
  const int devices = comm_cuda_device_count();
  int status = backend_create(cfg->backend, devices > 0 ? comm->local_rank % devices : 0, &backend);
  status = comm_agree(comm, status);
  if (status != DS_OK) {
    backend_destroy(backend);
    return status;
  }
  comm->device = backend->device;
  status = comm_agree(comm, comm_select_transport(comm, cfg->comm, backend->on_device, backend->stream));

  target_handle_t target;
  memset(&target, 0, sizeof target);
  if (status == DS_OK) status = comm_agree(comm, target_open(cfg->target, cfg->target_args, cfg->data, cfg->dim, comm->world, &target));
  if (status == DS_OK) {
    run.backend = backend;
    run.target = &target.target;
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
  return status;
}
