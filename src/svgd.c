/* svgd.c: Stein variational gradient descent (DESIGN.md, SVGD), written once against the
 * backend interface. Each iteration: scores of the local particles, allgather of [x | s] so
 * every rank holds all N, the exact median bandwidth, phi for local rows in tiles, update. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "median.h"
#include "run.h"
#include "status.h"
#include "target.h"

typedef struct svgd_state {
  float *x_all;      /* [n, dim] on the backend; this rank's rows are its particles */
  float *score_all;  /* [n, dim] */
  float *phi;        /* [rows, dim] */
  float *history;    /* the update's state: adagrad's g [rows, dim]; adam's m then v, [2][rows, dim] */
  float *logp;       /* [rows] */
} svgd_state_t;

static svgd_update_t svgd_update_kind(const config_t *cfg) {
  return strcmp(cfg->update, "adam") == 0      ? SVGD_UPDATE_ADAM
         : strcmp(cfg->update, "adagrad") == 0 ? SVGD_UPDATE_ADAGRAD
                                               : SVGD_UPDATE_SGD;
}

static void svgd_state_free(backend_t *b, svgd_state_t *s) {
  b->release(b, s->x_all);
  b->release(b, s->score_all);
  b->release(b, s->phi);
  b->release(b, s->history);
  b->release(b, s->logp);
}

static int svgd_state_alloc(backend_t *b, svgd_state_t *s, int64_t n, int64_t rows, int64_t dim, int state_floats) {
  memset(s, 0, sizeof *s);
  size_t all = (size_t)(n * dim) * sizeof(float), local = (size_t)(rows * dim) * sizeof(float);
  DS_TRY(b->alloc(b, (void **)&s->x_all, all));
  DS_TRY(b->alloc(b, (void **)&s->score_all, all));
  DS_TRY(b->alloc(b, (void **)&s->phi, local));
  if (state_floats > 0) DS_TRY(b->alloc(b, (void **)&s->history, local * (size_t)state_floats));
  DS_TRY(b->alloc(b, (void **)&s->logp, (size_t)rows * sizeof(float)));
  return DS_OK;
}

/* The bandwidth h: fixed, or m / max(log n, 1) with m the exact lower median (>= 1e-5). The
 * median state carries the last medians from step to step (median.h). */
static int svgd_bandwidth(run_ctx_t *run, svgd_state_t *s, svgd_median_state_t *median_state, int64_t n,
                          float *h, float *median_out) {
  const config_t *cfg = run->cfg;
  if (cfg->bandwidth_value > 0) {
    *h = (float)cfg->bandwidth_value;
    *median_out = NAN;
    return DS_OK;
  }
  float median;
  DS_TRY(svgd_exact_median(run->comm, run->backend, s->x_all, n, run->target->dim, run->item_begin,
                           run->item_end, median_state, &median));
  *median_out = median;
  double m = fmax((double)median, 1e-5);
  *h = (float)(m / fmax(log((double)n), 1.0));
  return DS_OK;
}

/* One SVGD iteration; `iteration` counts from 0. Collective. */
static int svgd_step(run_ctx_t *run, svgd_state_t *s, svgd_median_state_t *median_state, int64_t iteration,
                     float *h) {
  backend_t *b = run->backend;
  const int64_t n = config_items(run->cfg), dim = run->target->dim;
  const int64_t rows = run->item_end - run->item_begin;
  float *x_local = s->x_all + run->item_begin * dim;
  float *score_local = s->score_all + run->item_begin * dim;

  /* --batch-size: the scores from this iteration's minibatch of the data (every rank the same). */
  int status = target_set_minibatch(run->target, run->cfg->batch_size, run->cfg->seed, iteration);
  if (status == DS_OK) status = b->logp_grad(b, run->target, x_local, rows, s->logp, score_local);
  DS_TRY(comm_agree(run->comm, status));
  DS_TRY(comm_allgather_rows(run->comm, s->x_all, n, dim, b->on_device));
  DS_TRY(comm_allgather_rows(run->comm, s->score_all, n, dim, b->on_device));
  float median;
  DS_TRY(svgd_bandwidth(run, s, median_state, n, h, &median));
  status = b->svgd_phi(b, s->x_all, s->score_all, n, dim, run->item_begin, run->item_end, *h, s->phi);
  if (status == DS_OK) {
    status = b->svgd_update(b, x_local, s->phi, s->history, rows * dim, svgd_update_kind(run->cfg),
                            (float)run->cfg->step_size, iteration);
  }
  return comm_agree(run->comm, status);
}

static int svgd_write_output(run_ctx_t *run, svgd_state_t *s) {
  backend_t *b = run->backend;
  const int64_t n = config_items(run->cfg), dim = run->target->dim;
  const int64_t rows = run->item_end - run->item_begin;
  float *x_local = s->x_all + run->item_begin * dim;
  /* lp of the final particles: one more target call, over all the data. */
  int status = target_set_minibatch(run->target, 0, 0, 0);
  if (status == DS_OK) status = b->logp_grad(b, run->target, x_local, rows, s->logp, s->score_all + run->item_begin * dim);
  DS_TRY(comm_agree(run->comm, status));

  float *x_host = malloc((size_t)(rows * dim + 1) * sizeof *x_host);
  float *lp_host = malloc((size_t)(rows + 1) * sizeof *lp_host);
  status = x_host && lp_host ? DS_OK : DS_FAIL_ALLOC("output rows", (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK) status = b->download(b, x_host, x_local, (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK) status = b->download(b, lp_host, s->logp, (size_t)rows * sizeof(float));
  int64_t non_finite = 0;
  for (int64_t e = 0; status == DS_OK && e < rows * dim; ++e) non_finite += !isfinite(x_host[e]);
  status = comm_agree(run->comm, status);

  h5out_t *out = NULL;
  if (status == DS_OK) {
    status = run_open_output(run, &out);
    if (status != DS_OK && out) h5out_close(out); /* created, then failed: close it before MPI ends */
  }
  if (status == DS_OK) {
    /* Particles are one chain of n draws: this rank's particles are draws [begin, end). */
    const h5out_var_t stats[] = {{"lp", H5OUT_FLOAT32, 0}};
    int g_stats;
    /* posterior: the particles, or the target's own variables of them (run.h). */
    status = run_write_particles(run, out, n, x_host, rows);
    if (status == DS_OK) status = h5out_add_group(out, "sample_stats", 1, dim, n, stats, 1, &g_stats);
    const int64_t chains = rows > 0 ? 1 : 0;
    const void *lp_data[] = {lp_host};
    if (status == DS_OK) status = h5out_write(out, g_stats, n, 0, chains, run->item_begin, rows, lp_data);
    int close_status = h5out_close(out);
    if (status == DS_OK) status = close_status;
  }
  status = comm_agree(run->comm, status);
  double bad = (double)non_finite;
  if (status == DS_OK) status = comm_allreduce_sum_double(run->comm, &bad, 1);
  if (status == DS_OK && bad > 0 && run->comm->rank == 0)
    fprintf(stderr, "dsampler: warning: %.0f particle coordinates are not finite; the step size "
                    "may be too large\n", bad);
  free(x_host);
  free(lp_host);
  return status;
}

/* The checkpoint's per-particle arrays: x, then the update's state (adagrad: history; adam:
 * adam_m, adam_v), each [rows, dim]. Returns how many. */
static int svgd_checkpoint_arrays(const config_t *cfg, int64_t rows, int64_t dim, float *x_host, float *state_host,
                                  ckpt_array_t arrays[3]) {
  const svgd_update_t kind = svgd_update_kind(cfg);
  arrays[0] = (ckpt_array_t){"x", CKPT_FLOAT32, dim, x_host};
  if (kind == SVGD_UPDATE_ADAGRAD) {
    arrays[1] = (ckpt_array_t){"history", CKPT_FLOAT32, dim, state_host};
    return 2;
  }
  if (kind == SVGD_UPDATE_ADAM) {
    arrays[1] = (ckpt_array_t){"adam_m", CKPT_FLOAT32, dim, state_host};
    arrays[2] = (ckpt_array_t){"adam_v", CKPT_FLOAT32, dim, state_host + rows * dim};
    return 3;
  }
  return 1;
}

/* A checkpoint holds this rank's particles and the update's state for them. */
static int svgd_checkpoint(run_ctx_t *run, svgd_state_t *s, int64_t completed, int stopping, float *x_host,
                           float *state_host) {
  backend_t *b = run->backend;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  const size_t bytes = (size_t)(rows * dim) * sizeof(float);
  const int state_floats = svgd_update_state_floats(svgd_update_kind(run->cfg));
  int status = b->download(b, x_host, s->x_all + run->item_begin * dim, bytes);
  if (status == DS_OK && state_floats > 0)
    status = b->download(b, state_host, s->history, bytes * (size_t)state_floats);
  status = comm_agree(run->comm, status);
  ckpt_meta_t meta;
  if (status == DS_OK) status = run_checkpoint_meta(run, completed, 0, &meta);
  ckpt_array_t arrays[3];
  const int count = svgd_checkpoint_arrays(run->cfg, rows, dim, x_host, state_host, arrays);
  if (status == DS_OK) status = run_write_checkpoint(run, &meta, arrays, count, NULL, 0, stopping);
  return status;
}

int svgd_run(run_ctx_t *run) {
  backend_t *b = run->backend;
  const config_t *cfg = run->cfg;
  const int64_t n = config_items(cfg), dim = run->target->dim;
  const int64_t rows = run->item_end - run->item_begin;
  const int state_floats = svgd_update_state_floats(svgd_update_kind(cfg));
  if (n >= ((int64_t)1 << 32))
    return ds_fail(DS_ERR_INPUT, "--particles: at most 2^32 - 1 particles (the median counts N^2 pairs)");

  /* A --batch-size the target cannot take is refused before any work. */
  DS_TRY(comm_agree(run->comm, target_set_minibatch(run->target, cfg->batch_size, cfg->seed, 0)));

  svgd_state_t s;
  int status = svgd_state_alloc(b, &s, n, rows, dim, state_floats);
  const size_t bytes = (size_t)(rows * dim) * sizeof(float), state_bytes = bytes * (size_t)state_floats;
  float *x_host = malloc(bytes + sizeof(float)), *history_host = malloc(state_bytes + sizeof(float));
  if (status == DS_OK && (!x_host || !history_host)) status = DS_FAIL_ALLOC("particle buffers", bytes + state_bytes);
  status = comm_agree(run->comm, status);
  if (status == DS_OK) status = comm_agree(run->comm, run_check_checkpoint_dir(run));

  int64_t first_iteration = 0;
  if (status == DS_OK && run->resume_path) {
    status = comm_agree(run->comm, run_check_resume_meta(run));
    ckpt_array_t arrays[3];
    const int count = svgd_checkpoint_arrays(cfg, rows, dim, x_host, history_host, arrays);
    if (status == DS_OK) {
      status = ckpt_read(run->comm->world, run->resume_path, arrays, count, NULL, 0, run->item_begin, run->item_end, n);
      status = comm_agree(run->comm, status == DS_OK ? DS_OK : DS_ERR_CHECKPOINT);
    }
    if (status == DS_OK && state_floats > 0)
      status = comm_agree(run->comm, b->upload(b, s.history, history_host, state_bytes));
    first_iteration = run->resume_meta->iteration;
  } else if (status == DS_OK) {
    status = run_initial_positions(run, n, x_host);
  }
  if (status == DS_OK)
    status = comm_agree(run->comm, b->upload(b, s.x_all + run->item_begin * dim, x_host, bytes));

  progress_init(&run->progress, run->comm->rank == 0 && !cfg->quiet, cfg->iters);
  run->progress.phase_first = first_iteration;
  int stopped = 0;
  /* A resumed run starts without a previous median: only where the window looks depends
   * on it, never the median, so the run continues bitwise as if never stopped. */
  svgd_median_state_t median_state;
  svgd_median_state_init(&median_state);
  for (int64_t it = first_iteration; it < cfg->iters && status == DS_OK; ++it) {
    float h = 0.0f;
    status = svgd_step(run, &s, &median_state, it, &h);
    int stop = 0;
    if (status == DS_OK) status = run_stop_requested(run, &stop);
    if (status != DS_OK) break;
    char detail[96];
    if (median_state.window_hits + median_state.window_misses > 0)
      snprintf(detail, sizeof detail, "h %.4g, median window %lld/%lld", (double)h,
               (long long)median_state.window_hits,
               (long long)(median_state.window_hits + median_state.window_misses));
    else
      snprintf(detail, sizeof detail, "h %.4g", (double)h);
    progress_update(&run->progress, "svgd", it + 1, detail);
    const int64_t completed = it + 1;
    stop = stop && completed < cfg->iters;
    const int scheduled = cfg->checkpoint_every > 0 && (completed % cfg->checkpoint_every == 0 || completed == cfg->iters);
    if (stop || scheduled) status = svgd_checkpoint(run, &s, completed, stop, x_host, history_host);
    if (status == DS_OK && stop) {
      stopped = 1;
      break;
    }
  }
  if (status == DS_OK && !stopped) status = svgd_write_output(run, &s);
  if (status == DS_OK && stopped) status = DS_INTERRUPTED;
  if (status == DS_OK) {
    char what[CONFIG_PATH_MAX + 256];
    snprintf(what, sizeof what, "svgd: %lld iterations of %lld particles written to %s",
             (long long)cfg->iters, (long long)n, cfg->out);
    progress_finish(&run->progress, what);
  }
  svgd_state_free(b, &s);
  free(x_host);
  free(history_host);
  return status;
}
