/* svgd.c: Stein variational gradient descent (DESIGN.md, SVGD), written once against the
 * backend interface. Each iteration: scores of the local particles, allgather of [x | s] so
 * every rank holds all N, the exact median bandwidth, phi for local rows in tiles, update. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "draw_writer.h"
#include "exactsum.h"
#include "median.h"
#include "svgd.h"
#include "status.h"
#include "target.h"

typedef struct svgd_state {
  float *x_all;      /* [n, dim] on the backend; this rank's rows are its particles */
  float *score_all;  /* [n, dim] */
  float *phi;        /* [rows, dim] */
  float *history;    /* the update's state: adagrad's g [rows, dim]; adam's m then v, [2][rows, dim] */
  float *logp;       /* [rows] */
} svgd_state_t;

/* The kernel Stein discrepancy's values so far: evaluation e took place after iteration
 * e * --ksd-every (before that iteration's update); the last one of a finished run after the
 * last iteration. Identical on every rank. */
typedef struct svgd_ksd_series {
  int64_t count, capacity;
  int64_t *iteration;
  double *ksd_squared, *bandwidth;
} svgd_ksd_series_t;

/* Particle snapshots (--save-every K): written to the output's `snapshots` group by the writer
 * thread from two host buffers in turn, while the iterations go on. */
typedef struct svgd_snapshots {
  draw_writer_t *writer;
  int group;
  float *buffer[2]; /* [rows, dim] host memory the backend copies to fastest */
  int64_t written;  /* snapshots started: iterations 0, K, 2K, ... */
} svgd_snapshots_t;

static svgd_update_t svgd_update_kind(const config_t *cfg) {
  return cfg->update == CONFIG_UPDATE_ADAM      ? SVGD_UPDATE_ADAM
         : cfg->update == CONFIG_UPDATE_ADAGRAD ? SVGD_UPDATE_ADAGRAD
                                                : SVGD_UPDATE_SGD;
}

/* The update's kernel at bandwidth h. */
static svgd_kernel_t svgd_update_kernel(const config_t *cfg, float h) {
  svgd_kernel_t kernel = {cfg->kernel == CONFIG_KERNEL_IMQ ? SVGD_KERNEL_IMQ : SVGD_KERNEL_RBF, h,
                          (float)(cfg->imq_c * cfg->imq_c), (float)cfg->imq_beta};
  return kernel;
}

/* The KSD's kernel: the update's at bandwidth h, or IMQ at bandwidth 1 (--ksd-kernel imq). */
static svgd_kernel_t svgd_ksd_kernel(const config_t *cfg, float h) {
  svgd_kernel_t kernel = svgd_update_kernel(cfg, h);
  if (cfg->ksd_kernel == CONFIG_KSD_KERNEL_IMQ) {
    kernel.kind = SVGD_KERNEL_IMQ;
    kernel.h = 1.0f;
  }
  return kernel;
}

static const char *svgd_kernel_name(const svgd_kernel_t *kernel) {
  return kernel->kind == SVGD_KERNEL_IMQ ? "imq" : "rbf";
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

/* KSD evaluations before iteration `completed`: after iterations 0, K, 2K, ... < completed. */
static int64_t svgd_ksd_count(const config_t *cfg, int64_t completed) {
  return cfg->ksd_every > 0 ? (completed + cfg->ksd_every - 1) / cfg->ksd_every : 0;
}

/* Snapshots written once `completed` iterations are done: iterations 0, K, 2K, ... <= completed. */
static int64_t svgd_snapshot_count(const config_t *cfg, int64_t completed) {
  return cfg->save_every > 0 ? completed / cfg->save_every + 1 : 0;
}

static int svgd_ksd_reserve(svgd_ksd_series_t *series, int64_t count) {
  if (count <= series->capacity) return DS_OK;
  int64_t capacity = series->capacity > 0 ? series->capacity : 16;
  while (capacity < count) capacity *= 2;
  int64_t *iteration = realloc(series->iteration, (size_t)capacity * sizeof *iteration);
  if (iteration) series->iteration = iteration;
  double *ksd_squared = realloc(series->ksd_squared, (size_t)capacity * sizeof *ksd_squared);
  if (ksd_squared) series->ksd_squared = ksd_squared;
  double *bandwidth = realloc(series->bandwidth, (size_t)capacity * sizeof *bandwidth);
  if (bandwidth) series->bandwidth = bandwidth;
  if (!iteration || !ksd_squared || !bandwidth) return DS_FAIL_ALLOC("the KSD series", (size_t)capacity * 24);
  series->capacity = capacity;
  return DS_OK;
}

static int svgd_ksd_append(svgd_ksd_series_t *series, int64_t iteration, double ksd_squared, double bandwidth) {
  DS_TRY(svgd_ksd_reserve(series, series->count + 1));
  series->iteration[series->count] = iteration;
  series->ksd_squared[series->count] = ksd_squared;
  series->bandwidth[series->count] = bandwidth;
  series->count++;
  return DS_OK;
}

static void svgd_ksd_free(svgd_ksd_series_t *series) {
  free(series->iteration);
  free(series->ksd_squared);
  free(series->bandwidth);
}

/* --timing's sections of an iteration (timing.h). */
enum { T_GATHER, T_MEDIAN, T_SCORES, T_KSD, T_PHI, T_UPDATE, T_SNAPSHOTS, T_PROGRESS, T_CHECKPOINT, T_SECTIONS };
static const char *const timing_sections[T_SECTIONS] = {
    "gather particles", "median", "scores", "KSD", "phi", "update", "snapshots", "progress", "checkpoints"};
static const char *const timing_phases[1] = {"svgd"};

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
  /* The median's first pass may keep its distances for this step's phi (backend.h). */
  if (run->backend->svgd_keep_distances) DS_TRY(run->backend->svgd_keep_distances(run->backend));
  DS_TRY(svgd_exact_median(run->comm, run->backend, s->x_all, n, run->target->dim, run->item_begin,
                           run->item_end, median_state, &median));
  DS_TRY(timing_lap(&run->timing, T_MEDIAN, 1));
  *median_out = median;
  double m = fmax((double)median, 1e-5);
  *h = (float)(m / fmax(log((double)n), 1.0));
  return DS_OK;
}

/* All particles on every rank, and their bandwidth. Collective. */
static int svgd_gather_positions(run_ctx_t *run, svgd_state_t *s, svgd_median_state_t *median_state, float *h) {
  const int64_t n = config_items(run->cfg);
  DS_TRY(comm_allgather_rows(run->comm, s->x_all, n, run->target->dim, run->backend->on_device));
  DS_TRY(timing_lap(&run->timing, T_GATHER, 1));
  float median;
  return svgd_bandwidth(run, s, median_state, n, h, &median);
}

/* Scores and log densities of the local particles, from the minibatch of `iteration` (batch_size
 * > 0) or from all the data; then the scores of all particles on every rank. Collective. */
static int svgd_gather_scores(run_ctx_t *run, svgd_state_t *s, int64_t batch_size, int64_t iteration) {
  backend_t *b = run->backend;
  const int64_t n = config_items(run->cfg), dim = run->target->dim;
  const int64_t rows = run->item_end - run->item_begin;
  int status = target_set_minibatch(run->target, batch_size, run->cfg->seed, iteration);
  if (status == DS_OK)
    status = b->logp_grad(b, run->target, s->x_all + run->item_begin * dim, rows, s->logp,
                          s->score_all + run->item_begin * dim);
  DS_TRY(comm_agree(run->comm, status));
  DS_TRY(comm_allgather_rows(run->comm, s->score_all, n, dim, b->on_device));
  return timing_lap(&run->timing, T_SCORES, 1);
}

/* KSD^2 = (1/n^2) sum_ij u_p(x_i, x_j) of the gathered particles and scores, appended to the
 * series as evaluated after `iteration` iterations. Exact sums: the same bits on any number of
 * ranks. Collective. */
static int svgd_ksd(run_ctx_t *run, svgd_state_t *s, float h, int64_t iteration, svgd_ksd_series_t *series) {
  backend_t *b = run->backend;
  const int64_t n = config_items(run->cfg), dim = run->target->dim;
  const svgd_kernel_t kernel = svgd_ksd_kernel(run->cfg, h);
  exact_sum_t sum;
  int status = b->svgd_stein_sum(b, s->x_all, s->score_all, n, dim, run->item_begin, run->item_end, &kernel, &sum);
  DS_TRY(comm_agree(run->comm, status));
  DS_TRY(exact_sum_allreduce(run->comm, &sum, 1));
  const double ksd_squared = exact_sum_value(&sum) / ((double)n * (double)n);
  DS_TRY(comm_agree(run->comm, svgd_ksd_append(series, iteration, ksd_squared, (double)kernel.h)));
  return timing_lap(&run->timing, T_KSD, 1);
}

/* One SVGD iteration; `iteration` counts from 0. With `evaluate`, the KSD of the particles
 * before the update goes to the series (from the scores of all the data). Collective. */
static int svgd_step(run_ctx_t *run, svgd_state_t *s, svgd_median_state_t *median_state, int64_t iteration,
                     int evaluate, svgd_ksd_series_t *series, float *h) {
  backend_t *b = run->backend;
  const int64_t n = config_items(run->cfg), dim = run->target->dim, batch_size = run->cfg->batch_size;
  const int64_t rows = run->item_end - run->item_begin;
  DS_TRY(svgd_gather_positions(run, s, median_state, h));
  /* A minibatch's scores are not the target's: the KSD takes the scores of all the data. */
  if (evaluate && batch_size > 0) {
    DS_TRY(svgd_gather_scores(run, s, 0, iteration));
    DS_TRY(svgd_ksd(run, s, *h, iteration, series));
  }
  DS_TRY(svgd_gather_scores(run, s, batch_size, iteration));
  if (evaluate && batch_size == 0) DS_TRY(svgd_ksd(run, s, *h, iteration, series));
  const svgd_kernel_t kernel = svgd_update_kernel(run->cfg, *h);
  int status = b->svgd_phi(b, s->x_all, s->score_all, n, dim, run->item_begin, run->item_end, &kernel, s->phi);
  if (status == DS_OK) status = timing_lap(&run->timing, T_PHI, 1);
  if (status == DS_OK) {
    status = b->svgd_update(b, s->x_all + run->item_begin * dim, s->phi, s->history, rows * dim,
                            svgd_update_kind(run->cfg), (float)run->cfg->step_size, iteration);
  }
  if (status == DS_OK) status = timing_lap(&run->timing, T_UPDATE, 1);
  return comm_agree(run->comm, status);
}

/* The output at the start: created, or reopened by a resumed run with its snapshots cut back to
 * the checkpoint's. Collective. */
static int svgd_open_output(run_ctx_t *run, int64_t completed, svgd_snapshots_t *snapshots, h5out_t **out) {
  const config_t *cfg = run->cfg;
  const int64_t n = config_items(cfg), dim = run->target->dim, rows = run->item_end - run->item_begin;
  /* Without snapshots the output holds nothing before the end but its attributes: a resumed
   * run whose output is gone (deleted, or never on disk) writes it afresh. */
  const int reopen = run->resume_path && !(cfg->save_every == 0 && run->output_created);
  int status = reopen ? run_reopen_output(run, out) : run_open_output(run, out);
  /* On disk at once: a run killed hard before its end leaves an output its resume can open. */
  if (status == DS_OK) status = comm_agree(run->comm, h5out_flush(*out));
  if (status != DS_OK) {
    if (*out) h5out_close(*out); /* opened, then failed: close it before MPI ends */
    *out = NULL;
    return status;
  }
  if (cfg->save_every == 0) return DS_OK;
  const h5out_var_t vars[] = {{run->target->var_name, H5OUT_FLOAT32, 1}};
  const h5out_axes_t axes = {"particle", "iteration", 0, cfg->save_every};
  if (run->resume_path)
    status = h5out_open_group_axes(*out, "snapshots", &axes, n, dim, vars, 1, svgd_snapshot_count(cfg, completed),
                                   &snapshots->group);
  else
    status = h5out_add_group_axes(*out, "snapshots", &axes, n, dim, 1, vars, 1, &snapshots->group);
  status = comm_agree(run->comm, status);
  /* A fresh run writes the starting particles as snapshot 0 next (svgd_run). */
  snapshots->written = run->resume_path ? svgd_snapshot_count(cfg, completed) : 0;
  if (status == DS_OK) status = draw_writer_create(&snapshots->writer, *out);
  for (int k = 0; k < 2 && status == DS_OK; ++k)
    status = run->backend->alloc_host(run->backend, (void **)&snapshots->buffer[k],
                                      (size_t)(rows * dim + 1) * sizeof(float));
  return comm_agree(run->comm, status);
}

/* Starts writing the particles as snapshot `snapshots->written` (after that many times K
 * iterations); the write runs while the next iterations do. Collective. */
static int svgd_snapshot(run_ctx_t *run, svgd_state_t *s, svgd_snapshots_t *snapshots) {
  backend_t *b = run->backend;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  /* The buffer written two snapshots ago: its write is over once the writer takes a new job,
   * which waits for the one in flight first; so wait before overwriting it. */
  float *buffer = snapshots->buffer[snapshots->written & 1];
  int status = draw_writer_wait(snapshots->writer);
  if (status == DS_OK)
    status = b->download(b, buffer, s->x_all + run->item_begin * dim, (size_t)(rows * dim) * sizeof(float));
  DS_TRY(comm_agree(run->comm, status));
  draw_writer_job_t job;
  memset(&job, 0, sizeof job);
  job.n_groups = 1;
  job.groups[0] = snapshots->group;
  job.n_vars[0] = 1;
  job.data[0][0] = buffer;
  job.chain_begin = run->item_begin;
  job.rows = rows;
  job.first_draw = snapshots->written;
  job.count = 1;
  job.buffer_draws = 1;
  DS_TRY(draw_writer_start(snapshots->writer, &job));
  snapshots->written++;
  return DS_OK;
}

/* Waits for the writes in flight and frees the snapshots' resources; the status of the last
 * write. */
static int svgd_snapshots_finish(backend_t *b, svgd_snapshots_t *snapshots) {
  int status = draw_writer_free(snapshots->writer);
  snapshots->writer = NULL;
  for (int k = 0; k < 2; ++k) b->release_host(b, snapshots->buffer[k]);
  memset(snapshots->buffer, 0, sizeof snapshots->buffer);
  return status;
}

/* The end of a run: scores of the final particles from all the data, their KSD, then
 * posterior (the particles as one chain of n draws), sample_stats (lp) and the ksd series. */
static int svgd_write_output(run_ctx_t *run, svgd_state_t *s, svgd_median_state_t *median_state, h5out_t *out,
                             svgd_ksd_series_t *series) {
  backend_t *b = run->backend;
  const int64_t n = config_items(run->cfg), dim = run->target->dim;
  const int64_t rows = run->item_end - run->item_begin;
  float h;
  DS_TRY(svgd_gather_positions(run, s, median_state, &h));
  DS_TRY(svgd_gather_scores(run, s, 0, 0));
  DS_TRY(svgd_ksd(run, s, h, run->cfg->iters, series));

  float *x_host = malloc((size_t)(rows * dim + 1) * sizeof *x_host);
  float *lp_host = malloc((size_t)(rows + 1) * sizeof *lp_host);
  int status = x_host && lp_host ? DS_OK : DS_FAIL_ALLOC("output rows", (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK) status = b->download(b, x_host, s->x_all + run->item_begin * dim, (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK) status = b->download(b, lp_host, s->logp, (size_t)rows * sizeof(float));
  int64_t non_finite = 0;
  for (int64_t e = 0; status == DS_OK && e < rows * dim; ++e) non_finite += !isfinite(x_host[e]);
  status = comm_agree(run->comm, status);

  if (status == DS_OK) {
    /* A resumed run that was extended writes these groups again. */
    const char *const written_at_end[] = {"posterior", "unconstrained_posterior", "sample_stats"};
    for (int g = 0; g < 3 && status == DS_OK; ++g) status = h5out_remove_group(out, written_at_end[g]);
    status = comm_agree(run->comm, status);
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
  }
  if (status == DS_OK) {
    double *ksd = malloc((size_t)series->count * sizeof *ksd + 1);
    status = ksd ? DS_OK : DS_FAIL_ALLOC("the KSD series", (size_t)series->count * sizeof(double));
    for (int64_t e = 0; ksd && e < series->count; ++e) ksd[e] = sqrt(fmax(series->ksd_squared[e], 0.0));
    status = comm_agree(run->comm, status);
    const char *names[] = {"ksd", "ksd_squared", "bandwidth"};
    const double *data[] = {ksd, series->ksd_squared, series->bandwidth};
    if (status == DS_OK) status = h5out_write_series(out, "ksd", "iteration", series->count, series->iteration, names, data, 3);
    free(ksd);
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

/* The checkpoint's global arrays: the KSD series so far (none when empty). */
static int svgd_checkpoint_globals(svgd_ksd_series_t *series, ckpt_global_t globals[2]) {
  if (series->count == 0) return 0;
  globals[0] = (ckpt_global_t){"ksd_squared", series->count, series->ksd_squared};
  globals[1] = (ckpt_global_t){"ksd_bandwidth", series->count, series->bandwidth};
  return 2;
}

/* A checkpoint holds this rank's particles, the update's state for them and the KSD series;
 * the snapshots written so far are made durable first. */
static int svgd_checkpoint(run_ctx_t *run, svgd_state_t *s, int64_t completed, int stopping, float *x_host,
                           float *state_host, svgd_snapshots_t *snapshots, h5out_t *out, svgd_ksd_series_t *series) {
  backend_t *b = run->backend;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  const size_t bytes = (size_t)(rows * dim) * sizeof(float);
  const int state_floats = svgd_update_state_floats(svgd_update_kind(run->cfg));
  int status = DS_OK;
  if (snapshots->writer) DS_TRY(comm_agree(run->comm, draw_writer_wait(snapshots->writer)));
  DS_TRY(comm_agree(run->comm, h5out_flush(out)));
  status = b->download(b, x_host, s->x_all + run->item_begin * dim, bytes);
  if (status == DS_OK && state_floats > 0)
    status = b->download(b, state_host, s->history, bytes * (size_t)state_floats);
  status = comm_agree(run->comm, status);
  ckpt_meta_t meta;
  if (status == DS_OK) status = run_checkpoint_meta(run, completed, snapshots->written, &meta);
  ckpt_array_t arrays[3];
  const int count = svgd_checkpoint_arrays(run->cfg, rows, dim, x_host, state_host, arrays);
  ckpt_global_t globals[2];
  const int n_globals = svgd_checkpoint_globals(series, globals);
  if (status == DS_OK) status = run_write_checkpoint(run, &meta, arrays, count, globals, n_globals, stopping);
  return status;
}

/* The starting state on the backend: the checkpoint's (particles, the update's state, the KSD
 * series) or fresh particles. Sets *first_iteration. Collective. */
static int svgd_start(run_ctx_t *run, svgd_state_t *s, float *x_host, float *history_host, svgd_ksd_series_t *series,
                      int64_t *first_iteration) {
  backend_t *b = run->backend;
  const config_t *cfg = run->cfg;
  const int64_t n = config_items(cfg), dim = run->target->dim, rows = run->item_end - run->item_begin;
  const size_t bytes = (size_t)(rows * dim) * sizeof(float);
  const size_t state_bytes = bytes * (size_t)svgd_update_state_floats(svgd_update_kind(cfg));
  *first_iteration = 0;
  if (!run->resume_path) {
    DS_TRY(run_initial_positions(run, n, x_host));
    return comm_agree(run->comm, b->upload(b, s->x_all + run->item_begin * dim, x_host, bytes));
  }
  DS_TRY(comm_agree(run->comm, run_check_resume_meta(run)));
  const int64_t completed = run->resume_meta->iteration;
  const int64_t evaluations = svgd_ksd_count(cfg, completed);
  DS_TRY(comm_agree(run->comm, svgd_ksd_reserve(series, evaluations)));
  series->count = evaluations;
  for (int64_t e = 0; e < evaluations; ++e) series->iteration[e] = e * cfg->ksd_every;
  ckpt_array_t arrays[3];
  const int count = svgd_checkpoint_arrays(cfg, rows, dim, x_host, history_host, arrays);
  ckpt_global_t globals[2];
  const int n_globals = svgd_checkpoint_globals(series, globals);
  int status = ckpt_read(run->comm->world, run->resume_path, arrays, count, globals, n_globals, run->item_begin,
                         run->item_end, n);
  DS_TRY(comm_agree(run->comm, status == DS_OK ? DS_OK : DS_ERR_CHECKPOINT));
  if (state_bytes > 0) DS_TRY(comm_agree(run->comm, b->upload(b, s->history, history_host, state_bytes)));
  *first_iteration = completed;
  return comm_agree(run->comm, b->upload(b, s->x_all + run->item_begin * dim, x_host, bytes));
}

/* The progress line's detail: bandwidth, the last KSD, how often the median's window held. */
static void svgd_progress_detail(const svgd_median_state_t *median_state, const svgd_ksd_series_t *series, float h,
                                 char *detail, size_t size) {
  int used = snprintf(detail, size, "h %.4g", (double)h);
  if (series->count > 0 && used > 0 && (size_t)used < size)
    used += snprintf(detail + used, size - (size_t)used, ", ksd %.4g",
                     sqrt(fmax(series->ksd_squared[series->count - 1], 0.0)));
  if (median_state->window_hits + median_state->window_misses > 0 && used > 0 && (size_t)used < size)
    snprintf(detail + used, size - (size_t)used, ", median window %lld/%lld", (long long)median_state->window_hits,
             (long long)(median_state->window_hits + median_state->window_misses));
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

  timing_init(&run->timing, b, cfg->timing && run->comm->rank == 0, timing_sections, T_SECTIONS, timing_phases, 1);
  svgd_state_t s;
  svgd_ksd_series_t series;
  svgd_snapshots_t snapshots;
  memset(&series, 0, sizeof series);
  memset(&snapshots, 0, sizeof snapshots);
  int status = svgd_state_alloc(b, &s, n, rows, dim, state_floats);
  const size_t bytes = (size_t)(rows * dim) * sizeof(float), state_bytes = bytes * (size_t)state_floats;
  float *x_host = malloc(bytes + sizeof(float)), *history_host = malloc(state_bytes + sizeof(float));
  if (status == DS_OK && (!x_host || !history_host)) status = DS_FAIL_ALLOC("particle buffers", bytes + state_bytes);
  status = comm_agree(run->comm, status);
  if (status == DS_OK) status = comm_agree(run->comm, run_check_checkpoint_dir(run));
  int64_t first_iteration = 0;
  if (status == DS_OK) status = svgd_start(run, &s, x_host, history_host, &series, &first_iteration);
  h5out_t *out = NULL;
  if (status == DS_OK) status = svgd_open_output(run, first_iteration, &snapshots, &out);
  if (status == DS_OK && snapshots.writer && !run->resume_path)
    status = svgd_snapshot(run, &s, &snapshots); /* the starting particles, iteration 0 */

  progress_init(&run->progress, run->comm->rank == 0 && !cfg->quiet, cfg->iters);
  run->progress.phase_first = first_iteration;
  int stopped = 0;
  /* A resumed run starts without a previous median: only where the window looks depends
   * on it, never the median, so the run continues bitwise as if never stopped. */
  svgd_median_state_t median_state;
  svgd_median_state_init(&median_state);
  for (int64_t it = first_iteration; it < cfg->iters && status == DS_OK; ++it) {
    float h = 0.0f;
    const int evaluate = cfg->ksd_every > 0 && it % cfg->ksd_every == 0;
    status = timing_begin(&run->timing, 0);
    if (status == DS_OK) status = svgd_step(run, &s, &median_state, it, evaluate, &series, &h);
    const int64_t completed = it + 1;
    const int snapshot = snapshots.writer && completed % cfg->save_every == 0;
    if (status == DS_OK && snapshot) status = svgd_snapshot(run, &s, &snapshots);
    if (status == DS_OK) status = timing_lap(&run->timing, T_SNAPSHOTS, snapshot);
    int stop = 0;
    if (status == DS_OK) status = run_stop_requested(run, &stop);
    if (status != DS_OK) break;
    char detail[160];
    svgd_progress_detail(&median_state, &series, h, detail, sizeof detail);
    progress_update(&run->progress, "svgd", completed, detail);
    status = timing_lap(&run->timing, T_PROGRESS, 1);
    stop = stop && completed < cfg->iters;
    const int scheduled = cfg->checkpoint_every > 0 && (completed % cfg->checkpoint_every == 0 || completed == cfg->iters);
    if (status == DS_OK && (stop || scheduled))
      status = svgd_checkpoint(run, &s, completed, stop, x_host, history_host, &snapshots, out, &series);
    if (status == DS_OK) status = timing_lap(&run->timing, T_CHECKPOINT, stop || scheduled);
    if (status == DS_OK) status = timing_end(&run->timing);
    if (status == DS_OK && stop) {
      stopped = 1;
      break;
    }
  }
  if (snapshots.writer) {
    const int written = svgd_snapshots_finish(b, &snapshots);
    if (status == DS_OK) status = written;
    status = comm_agree(run->comm, status);
  }
  if (status == DS_OK && !stopped) status = svgd_write_output(run, &s, &median_state, out, &series);
  if (out) {
    const int close_status = h5out_close_as(out, status != DS_OK && status != DS_INTERRUPTED);
    if (status == DS_OK) status = comm_agree(run->comm, close_status);
  }
  if (status == DS_OK && stopped) status = DS_INTERRUPTED;
  if (status == DS_OK) {
    char what[CONFIG_PATH_MAX + 256];
    const svgd_kernel_t kernel = svgd_ksd_kernel(cfg, (float)series.bandwidth[series.count - 1]);
    snprintf(what, sizeof what, "svgd: %lld iterations of %lld particles written to %s; KSD %.4g (%s kernel, h %.4g)",
             (long long)cfg->iters, (long long)n, cfg->out, sqrt(fmax(series.ksd_squared[series.count - 1], 0.0)),
             svgd_kernel_name(&kernel), series.bandwidth[series.count - 1]);
    progress_finish(&run->progress, what);
  }
  if (status == DS_OK || status == DS_INTERRUPTED) timing_report(&run->timing, stderr);
  svgd_state_free(b, &s);
  svgd_ksd_free(&series);
  free(x_host);
  free(history_host);
  return status;
}
