/* hmc.c: Hamiltonian Monte Carlo over many independent chains (DESIGN.md, HMC), written once
 * against the backend interface. Draws are buffered on the host and written in blocks, each
 * rank its own chains' hyperslab. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "signals.h"
#include "status.h"

/* Host memory for buffered draws, per rank, before a collective write. */
#define HMC_DRAW_BUFFER_BYTES ((size_t)64 << 20)

typedef struct hmc_state {
  hmc_batch_t batch;       /* backend arrays */
} hmc_state_t;

typedef struct hmc_draw_buffer {
  int64_t capacity;        /* draws per block */
  int64_t first_draw, count;
  float *x;                /* [chains, capacity, dim] */
  float *lp, *accept, *step, *energy;  /* [chains, capacity] */
  uint8_t *diverging;
  int32_t *n_steps;
  /* this iteration's per-chain values, downloaded */
  float *it_lp, *it_accept, *it_energy;
  uint8_t *it_diverging;
} hmc_draw_buffer_t;

static void hmc_state_free(backend_t *b, hmc_batch_t *m) {
  b->release(b, m->q);
  b->release(b, m->logp);
  b->release(b, m->grad);
  b->release(b, (void *)m->step_size);
  b->release(b, (void *)m->inv_metric);
  b->release(b, m->accept_prob);
  b->release(b, m->energy);
  b->release(b, m->diverging);
  b->release(b, m->accepted);
}

static int hmc_state_alloc(backend_t *b, hmc_batch_t *m, int64_t rows, int64_t dim) {
  size_t vec = (size_t)rows * sizeof(float), mat = (size_t)(rows * dim) * sizeof(float);
  DS_TRY(b->alloc(b, (void **)&m->q, mat));
  DS_TRY(b->alloc(b, (void **)&m->logp, vec));
  DS_TRY(b->alloc(b, (void **)&m->grad, mat));
  DS_TRY(b->alloc(b, (void **)&m->step_size, vec));
  DS_TRY(b->alloc(b, (void **)&m->inv_metric, mat));
  DS_TRY(b->alloc(b, (void **)&m->accept_prob, vec));
  DS_TRY(b->alloc(b, (void **)&m->energy, vec));
  DS_TRY(b->alloc(b, (void **)&m->diverging, (size_t)rows));
  DS_TRY(b->alloc(b, (void **)&m->accepted, (size_t)rows));
  return DS_OK;
}

static void draw_buffer_free(hmc_draw_buffer_t *d) {
  free(d->x); free(d->lp); free(d->accept); free(d->step); free(d->energy);
  free(d->diverging); free(d->n_steps);
  free(d->it_lp); free(d->it_accept); free(d->it_energy); free(d->it_diverging);
}

static int draw_buffer_alloc(hmc_draw_buffer_t *d, int64_t rows, int64_t dim, int64_t draws) {
  memset(d, 0, sizeof *d);
  size_t per_draw = (size_t)(rows * dim) * sizeof(float) + 1;
  int64_t capacity = (int64_t)(HMC_DRAW_BUFFER_BYTES / per_draw);
  if (capacity < 1) capacity = 1;
  if (capacity > draws) capacity = draws > 0 ? draws : 1;
  d->capacity = capacity;
  size_t cells = (size_t)(rows * capacity) + 1;
  d->x = malloc(cells * (size_t)dim * sizeof *d->x);
  d->lp = malloc(cells * sizeof *d->lp);
  d->accept = malloc(cells * sizeof *d->accept);
  d->step = malloc(cells * sizeof *d->step);
  d->energy = malloc(cells * sizeof *d->energy);
  d->diverging = malloc(cells);
  d->n_steps = malloc(cells * sizeof *d->n_steps);
  size_t one = (size_t)rows + 1;
  d->it_lp = malloc(one * sizeof(float));
  d->it_accept = malloc(one * sizeof(float));
  d->it_energy = malloc(one * sizeof(float));
  d->it_diverging = malloc(one);
  if (!d->x || !d->lp || !d->accept || !d->step || !d->energy || !d->diverging || !d->n_steps ||
      !d->it_lp || !d->it_accept || !d->it_energy || !d->it_diverging)
    return DS_FAIL_ALLOC("the draw buffer", cells * (size_t)dim * sizeof(float));
  return DS_OK;
}

/* Downloads this iteration's per-chain statistics (always: progress needs them). */
static int fetch_iteration_stats(backend_t *b, const hmc_batch_t *m, hmc_draw_buffer_t *d, int64_t rows) {
  DS_TRY(b->download(b, d->it_lp, m->logp, (size_t)rows * sizeof(float)));
  DS_TRY(b->download(b, d->it_accept, m->accept_prob, (size_t)rows * sizeof(float)));
  DS_TRY(b->download(b, d->it_energy, m->energy, (size_t)rows * sizeof(float)));
  DS_TRY(b->download(b, d->it_diverging, m->diverging, (size_t)rows));
  return DS_OK;
}

/* Copies the current state into slot d->count of the block, [chain][draw] order. */
static int buffer_draw(backend_t *b, const hmc_batch_t *m, hmc_draw_buffer_t *d, int64_t rows,
                       int64_t dim, float step_size, int n_steps, float *q_host) {
  DS_TRY(b->download(b, q_host, m->q, (size_t)(rows * dim) * sizeof(float)));
  const int64_t t = d->count, cap = d->capacity;
  for (int64_t c = 0; c < rows; ++c) {
    memcpy(d->x + (c * cap + t) * dim, q_host + c * dim, (size_t)dim * sizeof(float));
    d->lp[c * cap + t] = d->it_lp[c];
    d->accept[c * cap + t] = d->it_accept[c];
    d->step[c * cap + t] = step_size;
    d->energy[c * cap + t] = d->it_energy[c];
    d->diverging[c * cap + t] = d->it_diverging[c];
    d->n_steps[c * cap + t] = n_steps;
  }
  d->count++;
  return DS_OK;
}

/* Writes the buffered block; the buffer rows hold `capacity` draws, of which `count` are
 * filled, so the data are repacked to [chain, count] first when count < capacity. */
static int flush_draws(run_ctx_t *run, h5out_t *out, int g_posterior, int g_stats,
                       hmc_draw_buffer_t *d, int64_t rows, int64_t dim) {
  if (d->count < d->capacity) {
    for (int64_t c = 1; c < rows; ++c) {
      memmove(d->x + c * d->count * dim, d->x + c * d->capacity * dim, (size_t)(d->count * dim) * sizeof(float));
      memmove(d->lp + c * d->count, d->lp + c * d->capacity, (size_t)d->count * sizeof(float));
      memmove(d->accept + c * d->count, d->accept + c * d->capacity, (size_t)d->count * sizeof(float));
      memmove(d->step + c * d->count, d->step + c * d->capacity, (size_t)d->count * sizeof(float));
      memmove(d->energy + c * d->count, d->energy + c * d->capacity, (size_t)d->count * sizeof(float));
      memmove(d->diverging + c * d->count, d->diverging + c * d->capacity, (size_t)d->count);
      memmove(d->n_steps + c * d->count, d->n_steps + c * d->capacity, (size_t)d->count * sizeof(int32_t));
    }
  }
  const int64_t total = d->first_draw + d->count;
  const void *posterior[] = {d->x};
  const void *stats[] = {d->lp, d->accept, d->step, d->diverging, d->energy, d->n_steps};
  DS_TRY(h5out_write(out, g_posterior, total, run->item_begin, rows, d->first_draw, d->count, posterior));
  DS_TRY(h5out_write(out, g_stats, total, run->item_begin, rows, d->first_draw, d->count, stats));
  d->first_draw = total;
  d->count = 0;
  return DS_OK;
}

static int hmc_init_state(run_ctx_t *run, hmc_batch_t *m, int64_t rows, int64_t dim) {
  backend_t *b = run->backend;
  size_t mat = (size_t)(rows * dim);
  float *host = malloc((mat + (size_t)rows + 1) * sizeof *host);
  if (!host) return comm_agree(run->comm, DS_FAIL_ALLOC("initial chains", mat * sizeof(float)));
  int status = run_initial_positions(run, config_items(run->cfg), host);
  if (status == DS_OK) status = b->upload(b, m->q, host, mat * sizeof(float));
  if (status == DS_OK) {
    for (size_t e = 0; e < mat; ++e) host[e] = 1.0f; /* identity metric */
    status = b->upload(b, (void *)m->inv_metric, host, mat * sizeof(float));
  }
  if (status == DS_OK) {
    for (int64_t c = 0; c < rows; ++c) host[c] = (float)run->cfg->step_size;
    status = b->upload(b, (void *)m->step_size, host, (size_t)rows * sizeof(float));
  }
  if (status == DS_OK) status = b->logp_grad(b, run->target, m->q, rows, m->logp, m->grad);
  /* A start where log p is not finite cannot move: refuse it. */
  if (status == DS_OK) status = b->download(b, host, m->logp, (size_t)rows * sizeof(float));
  for (int64_t c = 0; status == DS_OK && c < rows; ++c)
    if (!isfinite(host[c]))
      status = ds_fail(DS_ERR_INPUT, "chain %lld starts where log p is not finite (%g)%s%s",
                       (long long)(run->item_begin + c), (double)host[c],
                       run->cfg->init[0] ? "; check --init " : "", run->cfg->init);
  free(host);
  return comm_agree(run->comm, status);
}

/* The state a checkpoint carries: per-chain arrays and the progress totals. */
typedef struct hmc_saved {
  float *q, *logp, *grad, *step_size, *inv_metric; /* host, this rank's rows */
  double divergences;
} hmc_saved_t;

static int hmc_checkpoint_arrays(hmc_saved_t *saved, int64_t dim, ckpt_array_t arrays[5]) {
  arrays[0] = (ckpt_array_t){"q", CKPT_FLOAT32, dim, saved->q};
  arrays[1] = (ckpt_array_t){"logp", CKPT_FLOAT32, 1, saved->logp};
  arrays[2] = (ckpt_array_t){"grad", CKPT_FLOAT32, dim, saved->grad};
  arrays[3] = (ckpt_array_t){"step_size", CKPT_FLOAT32, 1, saved->step_size};
  arrays[4] = (ckpt_array_t){"inv_metric", CKPT_FLOAT32, dim, saved->inv_metric};
  return 5;
}

static int hmc_saved_alloc(hmc_saved_t *saved, int64_t rows, int64_t dim) {
  size_t mat = (size_t)(rows * dim + 1) * sizeof(float), vec = (size_t)(rows + 1) * sizeof(float);
  saved->q = malloc(mat);
  saved->grad = malloc(mat);
  saved->inv_metric = malloc(mat);
  saved->logp = malloc(vec);
  saved->step_size = malloc(vec);
  if (!saved->q || !saved->grad || !saved->inv_metric || !saved->logp || !saved->step_size)
    return DS_FAIL_ALLOC("checkpoint buffers", 3 * mat);
  return DS_OK;
}

static void hmc_saved_free(hmc_saved_t *saved) {
  free(saved->q); free(saved->grad); free(saved->inv_metric); free(saved->logp); free(saved->step_size);
}

/* Backend state <-> host copies. */
static int hmc_state_transfer(backend_t *b, hmc_batch_t *m, hmc_saved_t *saved, int64_t rows, int64_t dim, int upload) {
  size_t mat = (size_t)(rows * dim) * sizeof(float), vec = (size_t)rows * sizeof(float);
  if (upload) {
    DS_TRY(b->upload(b, m->q, saved->q, mat));
    DS_TRY(b->upload(b, m->logp, saved->logp, vec));
    DS_TRY(b->upload(b, m->grad, saved->grad, mat));
    DS_TRY(b->upload(b, (void *)m->step_size, saved->step_size, vec));
    DS_TRY(b->upload(b, (void *)m->inv_metric, saved->inv_metric, mat));
  } else {
    DS_TRY(b->download(b, saved->q, m->q, mat));
    DS_TRY(b->download(b, saved->logp, m->logp, vec));
    DS_TRY(b->download(b, saved->grad, m->grad, mat));
    DS_TRY(b->download(b, saved->step_size, m->step_size, vec));
    DS_TRY(b->download(b, saved->inv_metric, m->inv_metric, mat));
  }
  return DS_OK;
}

static const h5out_var_t hmc_posterior_vars_template[] = {{"x", H5OUT_FLOAT32, 1}};
static const h5out_var_t hmc_stats_vars[] = {{"lp", H5OUT_FLOAT32, 0},        {"acceptance_rate", H5OUT_FLOAT32, 0},
                                             {"step_size", H5OUT_FLOAT32, 0}, {"diverging", H5OUT_BOOL, 0},
                                             {"energy", H5OUT_FLOAT32, 0},    {"n_steps", H5OUT_INT32, 0}};

/* Creates the output (fresh run) or reopens it truncated to the checkpoint's draws (resume). */
static int hmc_open_output(run_ctx_t *run, h5out_t **out, int *g_posterior, int *g_stats) {
  const int64_t chains = config_items(run->cfg), dim = run->target->dim;
  h5out_var_t posterior[1] = {hmc_posterior_vars_template[0]};
  posterior[0].name = run->target->var_name;
  if (!run->resume_path) {
    DS_TRY(run_open_output(run, out));
    int status = h5out_add_group(*out, "posterior", chains, dim, posterior, 1, g_posterior);
    if (status == DS_OK) status = h5out_add_group(*out, "sample_stats", chains, dim, hmc_stats_vars, 6, g_stats);
    return comm_agree(run->comm, status);
  }
  int status = run_reopen_output(run, out);
  if (status == DS_OK)
    status = h5out_open_group(*out, "posterior", chains, dim, posterior, 1, run->resume_meta->draws_written, g_posterior);
  if (status == DS_OK)
    status = h5out_open_group(*out, "sample_stats", chains, dim, hmc_stats_vars, 6, run->resume_meta->draws_written,
                              g_stats);
  return comm_agree(run->comm, status);
}

int hmc_run(run_ctx_t *run) {
  backend_t *b = run->backend;
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  const int64_t total_iterations = cfg->warmup + cfg->draws;
  if (total_iterations >= (int64_t)UINT32_MAX)
    return ds_fail(DS_ERR_INPUT, "--warmup + --draws: at most %u iterations", UINT32_MAX - 1);

  hmc_batch_t m;
  memset(&m, 0, sizeof m);
  hmc_draw_buffer_t d;
  memset(&d, 0, sizeof d);
  hmc_saved_t saved;
  memset(&saved, 0, sizeof saved);
  ckpt_array_t arrays[5];
  ckpt_global_t globals[1] = {{"divergences", 1, &saved.divergences}};
  float *q_host = malloc((size_t)(rows * dim + 1) * sizeof *q_host);
  int status = hmc_state_alloc(b, &m, rows, dim);
  if (status == DS_OK) status = draw_buffer_alloc(&d, rows, dim, cfg->draws);
  if (status == DS_OK) status = hmc_saved_alloc(&saved, rows, dim);
  const int n_arrays = hmc_checkpoint_arrays(&saved, dim, arrays); /* after the allocation */
  if (status == DS_OK && !q_host) status = DS_FAIL_ALLOC("a draw", (size_t)(rows * dim) * sizeof(float));
  status = comm_agree(run->comm, status);
  if (status == DS_OK) status = comm_agree(run->comm, run_check_checkpoint_dir(run));

  int64_t first_iteration = 0;
  if (status == DS_OK && run->resume_path) {
    status = comm_agree(run->comm, run_check_resume_meta(run));
    if (status == DS_OK) {
      status = ckpt_read(run->comm->world, run->resume_path, arrays, n_arrays, globals, 1, run->item_begin,
                         run->item_end, config_items(cfg));
      status = comm_agree(run->comm, status == DS_OK ? DS_OK : DS_ERR_CHECKPOINT);
    }
    if (status == DS_OK) status = comm_agree(run->comm, hmc_state_transfer(b, &m, &saved, rows, dim, 1));
    first_iteration = run->resume_meta->iteration;
    d.first_draw = run->resume_meta->draws_written;
  } else if (status == DS_OK) {
    status = hmc_init_state(run, &m, rows, dim);
  }

  h5out_t *out = NULL;
  int g_posterior = -1, g_stats = -1;
  if (status == DS_OK) status = hmc_open_output(run, &out, &g_posterior, &g_stats);

  m.n_chains = rows;
  m.chain_begin = run->item_begin;
  m.dim = dim;
  m.seed = cfg->seed;
  m.n_leapfrog = (int)cfg->steps;
  double divergences = saved.divergences;
  progress_init(&run->progress, run->comm->rank == 0 && !cfg->quiet, total_iterations);
  run->progress.phase_first = first_iteration;
  int stopped = 0;
  for (int64_t it = first_iteration; it < total_iterations && status == DS_OK; ++it) {
    const int sampling = it >= cfg->warmup;
    if (it == cfg->warmup) progress_phase(&run->progress, it);
    m.iteration = (uint32_t)it;
    status = b->hmc_transition(b, run->target, &m);
    if (status == DS_OK) status = fetch_iteration_stats(b, &m, &d, rows);
    if (status == DS_OK && sampling)
      status = buffer_draw(b, &m, &d, rows, dim, (float)cfg->step_size, (int)cfg->steps, q_host);
    status = comm_agree(run->comm, status);
    if (status != DS_OK) break;
    if (sampling && (d.count == d.capacity || it + 1 == total_iterations))
      status = comm_agree(run->comm, flush_draws(run, out, g_posterior, g_stats, &d, rows, dim));
    /* Progress statistics over all chains, and any stop signal: every rank takes part. */
    double sums[3] = {0, 0, signals_pending() != 0};
    for (int64_t c = 0; c < rows; ++c) {
      sums[0] += d.it_accept[c];
      sums[1] += d.it_diverging[c];
    }
    if (status == DS_OK) status = comm_allreduce_sum_double(run->comm, sums, 3);
    if (status != DS_OK) break;
    divergences += sums[1];
    char detail[160];
    snprintf(detail, sizeof detail, "accept %.3f  step %.3g  divergences %.0f",
             sums[0] / (double)config_items(cfg), cfg->step_size, divergences);
    progress_update(&run->progress, sampling ? "sampling" : "warmup", it + 1, detail);

    const int64_t completed = it + 1;
    const int stop = sums[2] > 0 && completed < total_iterations;
    const int scheduled = cfg->checkpoint_every > 0 &&
                          (completed % cfg->checkpoint_every == 0 || completed == total_iterations);
    if (stop || scheduled) {
      /* The output must hold every draw the checkpoint counts, durably, before it exists. */
      if (d.count > 0) status = comm_agree(run->comm, flush_draws(run, out, g_posterior, g_stats, &d, rows, dim));
      if (status == DS_OK) status = comm_agree(run->comm, h5out_flush(out));
      ckpt_meta_t meta;
      if (status == DS_OK) status = run_checkpoint_meta(run, completed, d.first_draw, &meta);
      if (status == DS_OK) status = comm_agree(run->comm, hmc_state_transfer(b, &m, &saved, rows, dim, 0));
      saved.divergences = divergences;
      if (status == DS_OK) status = run_write_checkpoint(run, &meta, arrays, n_arrays, globals, 1, stop);
      if (status == DS_OK && stop) {
        stopped = 1;
        break;
      }
    }
  }
  if (out) {
    int close_status = comm_agree(run->comm, h5out_close(out));
    if (status == DS_OK) status = close_status;
  }
  if (status == DS_OK && stopped) status = DS_INTERRUPTED;
  if (status == DS_OK) {
    char what[CONFIG_PATH_MAX + 256];
    snprintf(what, sizeof what, "hmc: %lld draws of %lld chains written to %s (%.0f divergences)",
             (long long)cfg->draws, (long long)config_items(cfg), cfg->out, divergences);
    progress_finish(&run->progress, what);
  }
  hmc_state_free(b, &m);
  draw_buffer_free(&d);
  hmc_saved_free(&saved);
  free(q_host);
  return status;
}
