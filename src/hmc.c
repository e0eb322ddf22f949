/* hmc.c: Hamiltonian Monte Carlo over many independent chains (DESIGN.md, HMC), written once
 * against the backend interface: warmup with adaptation (adapt.c), then sampling. Draws are
 * buffered on the host and written in blocks, each rank its own chains' hyperslab; the state
 * is checkpointed on a schedule and when a stop signal arrives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "rng.h"
#include "run.h"
#include "signals.h"
#include "status.h"
#include "summary.h"

/* Host memory for buffered draws, per rank and phase, before a collective write; the
 * environment variable DSAMPLER_DRAW_BUFFER_BYTES overrides it. */
#define HMC_DRAW_BUFFER_BYTES ((size_t)64 << 20)
/* Above this many values (chains x draws x dim) a run does not print the summary itself. */
#define HMC_SUMMARY_MAX_VALUES 2.5e7

/* Host copies of the chains' state and of one iteration's statistics. */
typedef struct hmc_host {
  float *q, *logp, *grad;        /* state: for checkpoints and adaptation */
  float *step_nominal;           /* the adapted (or given) step size per chain */
  float *step_used;              /* this iteration's, after jitter */
  float *inv_metric;
  float *accept, *energy;        /* this iteration's statistics */
  uint8_t *diverging;
  double divergences[2];         /* divergent transitions so far: in warmup, in sampling */
} hmc_host_t;

/* One phase's output (warmup or sampling): its groups and a block of buffered draws. */
typedef struct hmc_phase_out {
  int g_posterior, g_stats;
  int64_t capacity, first_draw, count;
  float *x;                      /* [chains, capacity, dim] */
  float *lp, *accept, *step, *energy; /* [chains, capacity] */
  uint8_t *diverging;
  int32_t *n_steps;
} hmc_phase_out_t;

static const h5out_var_t hmc_stats_vars[] = {{"lp", H5OUT_FLOAT32, 0},        {"acceptance_rate", H5OUT_FLOAT32, 0},
                                             {"step_size", H5OUT_FLOAT32, 0}, {"diverging", H5OUT_BOOL, 0},
                                             {"energy", H5OUT_FLOAT32, 0},    {"n_steps", H5OUT_INT32, 0}};
enum { HMC_N_STATS = 6 };

static void device_free(backend_t *b, hmc_batch_t *m) {
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

/* Floats of the device's inverse metric: one row when every chain shares it. */
static size_t metric_bytes(const hmc_batch_t *m, int64_t rows, int64_t dim) {
  return (size_t)((m->shared_metric ? 1 : rows) * dim) * sizeof(float);
}

static int device_alloc(backend_t *b, hmc_batch_t *m, int64_t rows, int64_t dim) {
  size_t vec = (size_t)rows * sizeof(float), mat = (size_t)(rows * dim) * sizeof(float);
  DS_TRY(b->alloc(b, (void **)&m->q, mat));
  DS_TRY(b->alloc(b, (void **)&m->logp, vec));
  DS_TRY(b->alloc(b, (void **)&m->grad, mat));
  DS_TRY(b->alloc(b, (void **)&m->step_size, vec));
  DS_TRY(b->alloc(b, (void **)&m->inv_metric, metric_bytes(m, rows, dim)));
  DS_TRY(b->alloc(b, (void **)&m->accept_prob, vec));
  DS_TRY(b->alloc(b, (void **)&m->energy, vec));
  DS_TRY(b->alloc(b, (void **)&m->diverging, (size_t)rows));
  DS_TRY(b->alloc(b, (void **)&m->accepted, (size_t)rows));
  return DS_OK;
}

static void host_free(hmc_host_t *h) {
  free(h->q); free(h->logp); free(h->grad); free(h->step_nominal); free(h->step_used);
  free(h->inv_metric); free(h->accept); free(h->energy); free(h->diverging);
}

static int host_alloc(hmc_host_t *h, int64_t rows, int64_t dim) {
  size_t mat = (size_t)((rows > 0 ? rows : 1) * dim) * sizeof(float), vec = (size_t)(rows + 1) * sizeof(float);
  h->q = malloc(mat);
  h->grad = malloc(mat);
  h->inv_metric = malloc(mat);
  h->logp = malloc(vec);
  h->step_nominal = malloc(vec);
  h->step_used = malloc(vec);
  h->accept = malloc(vec);
  h->energy = malloc(vec);
  h->diverging = malloc((size_t)rows + 1);
  if (!h->q || !h->grad || !h->inv_metric || !h->logp || !h->step_nominal || !h->step_used || !h->accept ||
      !h->energy || !h->diverging)
    return DS_FAIL_ALLOC("host copies of the chains", 3 * mat);
  return DS_OK;
}

static void phase_free(hmc_phase_out_t *p) {
  free(p->x); free(p->lp); free(p->accept); free(p->step); free(p->energy); free(p->diverging); free(p->n_steps);
}

/* Draws per block. Every rank must flush at the same iterations (the writes are collective),
 * so the block is sized for the largest rank's share, not this rank's. */
static int64_t phase_capacity(int64_t rows_max, int64_t dim, int64_t draws) {
  size_t budget = HMC_DRAW_BUFFER_BYTES;
  const char *text = getenv("DSAMPLER_DRAW_BUFFER_BYTES");
  if (text && atoll(text) > 0) budget = (size_t)atoll(text);
  int64_t capacity = (int64_t)(budget / ((size_t)(rows_max * dim) * sizeof(float) + 1));
  if (capacity < 1) capacity = 1;
  if (capacity > draws) capacity = draws > 0 ? draws : 1;
  return capacity;
}

static int phase_alloc(hmc_phase_out_t *p, int64_t rows, int64_t rows_max, int64_t dim, int64_t draws) {
  int64_t capacity = phase_capacity(rows_max, dim, draws);
  p->capacity = capacity;
  size_t cells = (size_t)(rows * capacity) + 1;
  p->x = malloc(cells * (size_t)dim * sizeof *p->x);
  p->lp = malloc(cells * sizeof *p->lp);
  p->accept = malloc(cells * sizeof *p->accept);
  p->step = malloc(cells * sizeof *p->step);
  p->energy = malloc(cells * sizeof *p->energy);
  p->diverging = malloc(cells);
  p->n_steps = malloc(cells * sizeof *p->n_steps);
  if (!p->x || !p->lp || !p->accept || !p->step || !p->energy || !p->diverging || !p->n_steps)
    return DS_FAIL_ALLOC("the draw buffer", cells * (size_t)dim * sizeof(float));
  return DS_OK;
}

/* Copies this iteration's state (host copies) into slot p->count of the block. */
static void phase_add_draw(hmc_phase_out_t *p, const hmc_host_t *h, int64_t rows, int64_t dim, int n_steps) {
  const int64_t t = p->count, cap = p->capacity;
  for (int64_t c = 0; c < rows; ++c) {
    memcpy(p->x + (c * cap + t) * dim, h->q + c * dim, (size_t)dim * sizeof(float));
    p->lp[c * cap + t] = h->logp[c];
    p->accept[c * cap + t] = h->accept[c];
    p->step[c * cap + t] = h->step_used[c];
    p->energy[c * cap + t] = h->energy[c];
    p->diverging[c * cap + t] = h->diverging[c];
    p->n_steps[c * cap + t] = n_steps;
  }
  p->count++;
}

/* Writes the buffered block (repacked to [chain, count] when not full). Collective. */
static int phase_flush(run_ctx_t *run, h5out_t *out, hmc_phase_out_t *p, int64_t rows, int64_t dim) {
  if (p->count < p->capacity) {
    for (int64_t c = 1; c < rows; ++c) {
      memmove(p->x + c * p->count * dim, p->x + c * p->capacity * dim, (size_t)(p->count * dim) * sizeof(float));
      memmove(p->lp + c * p->count, p->lp + c * p->capacity, (size_t)p->count * sizeof(float));
      memmove(p->accept + c * p->count, p->accept + c * p->capacity, (size_t)p->count * sizeof(float));
      memmove(p->step + c * p->count, p->step + c * p->capacity, (size_t)p->count * sizeof(float));
      memmove(p->energy + c * p->count, p->energy + c * p->capacity, (size_t)p->count * sizeof(float));
      memmove(p->diverging + c * p->count, p->diverging + c * p->capacity, (size_t)p->count);
      memmove(p->n_steps + c * p->count, p->n_steps + c * p->capacity, (size_t)p->count * sizeof(int32_t));
    }
  }
  const int64_t total = p->first_draw + p->count;
  const void *posterior[] = {p->x};
  const void *stats[] = {p->lp, p->accept, p->step, p->diverging, p->energy, p->n_steps};
  DS_TRY(h5out_write(out, p->g_posterior, total, run->item_begin, rows, p->first_draw, p->count, posterior));
  DS_TRY(h5out_write(out, p->g_stats, total, run->item_begin, rows, p->first_draw, p->count, stats));
  p->first_draw = total;
  p->count = 0;
  return DS_OK;
}

/* Device state <-> host copies of q, logp, grad. */
static int state_download(backend_t *b, const hmc_batch_t *m, hmc_host_t *h, int64_t rows, int64_t dim) {
  DS_TRY(b->download(b, h->q, m->q, (size_t)(rows * dim) * sizeof(float)));
  DS_TRY(b->download(b, h->logp, m->logp, (size_t)rows * sizeof(float)));
  DS_TRY(b->download(b, h->grad, m->grad, (size_t)(rows * dim) * sizeof(float)));
  return DS_OK;
}

static int state_upload(backend_t *b, hmc_batch_t *m, const hmc_host_t *h, int64_t rows, int64_t dim) {
  DS_TRY(b->upload(b, m->q, h->q, (size_t)(rows * dim) * sizeof(float)));
  DS_TRY(b->upload(b, m->logp, h->logp, (size_t)rows * sizeof(float)));
  DS_TRY(b->upload(b, m->grad, h->grad, (size_t)(rows * dim) * sizeof(float)));
  DS_TRY(b->upload(b, (void *)m->inv_metric, h->inv_metric, metric_bytes(m, rows, dim)));
  return DS_OK;
}

/* This iteration's step sizes: the nominal ones, each scaled by 1 + jitter * (2u - 1) with u
 * drawn for (chain, iteration) just after the accept uniform. */
static void jitter_steps(const run_ctx_t *run, hmc_host_t *h, int64_t rows, int64_t dim, uint32_t iteration) {
  const double jitter = run->cfg->jitter;
  const uint32_t word = rng_hmc_uniform_word(dim) + 1;
  for (int64_t c = 0; c < rows; ++c) {
    float factor = 1.0f;
    if (jitter > 0) {
      rng_words_t w = rng_block(run->cfg->seed, (uint64_t)(run->item_begin + c), iteration, word / 4);
      factor = (float)(1.0 + jitter * (2.0 * (double)rng_uniform(w.v[word % 4]) - 1.0));
    }
    h->step_used[c] = h->step_nominal[c] * factor;
  }
}

static int fresh_state(run_ctx_t *run, hmc_batch_t *m, hmc_host_t *h, int64_t rows, int64_t dim) {
  backend_t *b = run->backend;
  int status = run_initial_positions(run, config_items(run->cfg), h->q);
  if (status != DS_OK) return status;
  for (int64_t e = 0; e < rows * dim; ++e) h->inv_metric[e] = 1.0f;
  for (int64_t c = 0; c < rows; ++c) h->step_nominal[c] = (float)run->cfg->step_size;
  status = b->upload(b, m->q, h->q, (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK) status = b->upload(b, (void *)m->inv_metric, h->inv_metric, metric_bytes(m, rows, dim));
  if (status == DS_OK) status = b->logp_grad(b, run->target, m->q, rows, m->logp, m->grad);
  if (status == DS_OK) status = b->download(b, h->logp, m->logp, (size_t)rows * sizeof(float));
  /* A start where log p is not finite cannot move: refuse it. */
  for (int64_t c = 0; status == DS_OK && c < rows; ++c)
    if (!isfinite(h->logp[c]))
      status = ds_fail(DS_ERR_INPUT, "chain %lld starts where log p is not finite (%g)%s%s",
                       (long long)(run->item_begin + c), (double)h->logp[c],
                       run->cfg->init[0] ? "; check --init " : "", run->cfg->init);
  return comm_agree(run->comm, status);
}

/* The checkpoint's contents: the chains' state, the adaptation's, and the run's totals. */
typedef struct hmc_ckpt_items {
  ckpt_array_t arrays[8];
  ckpt_global_t globals[4];
  int n_arrays, n_globals;
} hmc_ckpt_items_t;

static void ckpt_items(hmc_host_t *h, adapt_t *adapt, int64_t dim, hmc_ckpt_items_t *items) {
  items->arrays[0] = (ckpt_array_t){"q", CKPT_FLOAT32, dim, h->q};
  items->arrays[1] = (ckpt_array_t){"logp", CKPT_FLOAT32, 1, h->logp};
  items->arrays[2] = (ckpt_array_t){"grad", CKPT_FLOAT32, dim, h->grad};
  items->arrays[3] = (ckpt_array_t){"step_size", CKPT_FLOAT32, 1, h->step_nominal};
  items->arrays[4] = (ckpt_array_t){"inv_metric", CKPT_FLOAT32, dim, h->inv_metric};
  items->globals[0] = (ckpt_global_t){"divergences", 2, h->divergences};
  int n_arrays = 0, n_globals = 0;
  if (adapt) adapt_checkpoint_items(adapt, items->arrays + 5, &n_arrays, items->globals + 1, &n_globals);
  items->n_arrays = 5 + n_arrays;
  items->n_globals = 1 + n_globals;
}

/* Opens the output: created (fresh run) or reopened and truncated to the checkpoint (resume). */
static int open_output(run_ctx_t *run, h5out_t **out, hmc_phase_out_t *warmup, hmc_phase_out_t *sampling) {
  const config_t *cfg = run->cfg;
  const int64_t chains = config_items(cfg), dim = run->target->dim;
  const h5out_var_t posterior[] = {{run->target->var_name, H5OUT_FLOAT32, 1}};
  int status;
  if (!run->resume_path) {
    DS_TRY(run_open_output(run, out));
    status = h5out_add_group(*out, "posterior", chains, dim, sampling->capacity, posterior, 1, &sampling->g_posterior);
    if (status == DS_OK)
      status = h5out_add_group(*out, "sample_stats", chains, dim, sampling->capacity, hmc_stats_vars, HMC_N_STATS,
                               &sampling->g_stats);
    if (status == DS_OK && cfg->save_warmup)
      status = h5out_add_group(*out, "warmup_posterior", chains, dim, warmup->capacity, posterior, 1,
                               &warmup->g_posterior);
    if (status == DS_OK && cfg->save_warmup)
      status = h5out_add_group(*out, "warmup_sample_stats", chains, dim, warmup->capacity, hmc_stats_vars,
                               HMC_N_STATS, &warmup->g_stats);
    return comm_agree(run->comm, status);
  }
  DS_TRY(run_reopen_output(run, out));
  const int64_t done = run->resume_meta->iteration;
  sampling->first_draw = run->resume_meta->draws_written;
  warmup->first_draw = done < cfg->warmup ? done : cfg->warmup;
  status = h5out_open_group(*out, "posterior", chains, dim, posterior, 1, sampling->first_draw, &sampling->g_posterior);
  if (status == DS_OK)
    status = h5out_open_group(*out, "sample_stats", chains, dim, hmc_stats_vars, HMC_N_STATS, sampling->first_draw,
                              &sampling->g_stats);
  if (status == DS_OK && cfg->save_warmup)
    status = h5out_open_group(*out, "warmup_posterior", chains, dim, posterior, 1, warmup->first_draw,
                              &warmup->g_posterior);
  if (status == DS_OK && cfg->save_warmup)
    status = h5out_open_group(*out, "warmup_sample_stats", chains, dim, hmc_stats_vars, HMC_N_STATS,
                              warmup->first_draw, &warmup->g_stats);
  return comm_agree(run->comm, status);
}

static adapt_mode_t adapt_mode(const config_t *cfg) {
  if (cfg->warmup == 0 || strcmp(cfg->adapt, "none") == 0) return ADAPT_NONE;
  return strcmp(cfg->adapt, "pooled") == 0 ? ADAPT_POOLED : ADAPT_PER_CHAIN;
}

int hmc_run(run_ctx_t *run) {
  backend_t *b = run->backend;
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  const int64_t total_iterations = cfg->warmup + cfg->draws;
  if (total_iterations >= ((int64_t)1 << 30))
    return ds_fail(DS_ERR_INPUT, "--warmup + --draws: at most 2^30 - 1 iterations");

  hmc_batch_t m;
  hmc_host_t h;
  hmc_phase_out_t warmup, sampling;
  memset(&m, 0, sizeof m);
  memset(&h, 0, sizeof h);
  memset(&warmup, 0, sizeof warmup);
  memset(&sampling, 0, sizeof sampling);
  adapt_t *adapt = NULL;
  const adapt_settings_t settings = {adapt_mode(cfg), strcmp(cfg->metric, "diag") == 0, cfg->warmup,
                                     cfg->target_accept, cfg->step_size, rows, dim, config_items(cfg)};
  /* Unless each chain adapts its own metric, all chains share one: read once, not per chain. */
  m.shared_metric = !(settings.mode == ADAPT_PER_CHAIN && settings.diag_metric);
  int status = device_alloc(b, &m, rows, dim);
  if (status == DS_OK) status = host_alloc(&h, rows, dim);
  const int64_t rows_max = (config_items(cfg) + run->comm->size - 1) / run->comm->size;
  if (status == DS_OK) status = phase_alloc(&sampling, rows, rows_max, dim, cfg->draws);
  if (status == DS_OK && cfg->save_warmup) status = phase_alloc(&warmup, rows, rows_max, dim, cfg->warmup);
  if (status == DS_OK && settings.mode != ADAPT_NONE) status = adapt_create(&adapt, run->comm, &settings);
  status = comm_agree(run->comm, status);
  if (status == DS_OK) status = comm_agree(run->comm, run_check_checkpoint_dir(run));
  hmc_ckpt_items_t items;
  ckpt_items(&h, adapt, dim, &items);

  int64_t first_iteration = 0;
  if (status == DS_OK && run->resume_path) {
    status = comm_agree(run->comm, run_check_resume_meta(run));
    if (status == DS_OK) {
      status = ckpt_read(run->comm->world, run->resume_path, items.arrays, items.n_arrays, items.globals,
                         items.n_globals, run->item_begin, run->item_end, config_items(cfg));
      status = comm_agree(run->comm, status == DS_OK ? DS_OK : DS_ERR_CHECKPOINT);
    }
    if (status == DS_OK) status = comm_agree(run->comm, state_upload(b, &m, &h, rows, dim));
    first_iteration = run->resume_meta->iteration;
  } else if (status == DS_OK) {
    status = fresh_state(run, &m, &h, rows, dim);
  }

  h5out_t *out = NULL;
  if (status == DS_OK) status = open_output(run, &out, &warmup, &sampling);

  m.n_chains = rows;
  m.chain_begin = run->item_begin;
  m.dim = dim;
  m.seed = cfg->seed;
  m.n_leapfrog = (int)cfg->steps;
  progress_init(&run->progress, run->comm->rank == 0 && !cfg->quiet, total_iterations);
  run->progress.phase_first = first_iteration;
  int stopped = 0, steps_changed = 1;
  for (int64_t it = first_iteration; it < total_iterations && status == DS_OK; ++it) {
    const int in_warmup = it < cfg->warmup;
    if (it == cfg->warmup) progress_phase(&run->progress, it);
    m.iteration = (uint32_t)it;
    /* Step sizes change in warmup and with jitter: upload them only when they did. */
    jitter_steps(run, &h, rows, dim, m.iteration);
    if (steps_changed || cfg->jitter > 0) status = b->upload(b, (void *)m.step_size, h.step_used, (size_t)rows * sizeof(float));
    steps_changed = 0;
    if (status == DS_OK) status = b->hmc_transition(b, run->target, &m);
    if (status == DS_OK) status = b->download(b, h.accept, m.accept_prob, (size_t)rows * sizeof(float));
    if (status == DS_OK) status = b->download(b, h.energy, m.energy, (size_t)rows * sizeof(float));
    if (status == DS_OK) status = b->download(b, h.diverging, m.diverging, (size_t)rows);
    const int keep_draw = !in_warmup || cfg->save_warmup;
    if (status == DS_OK && (keep_draw || adapt)) {
      status = b->download(b, h.q, m.q, (size_t)(rows * dim) * sizeof(float));
      if (status == DS_OK) status = b->download(b, h.logp, m.logp, (size_t)rows * sizeof(float));
    }
    status = comm_agree(run->comm, status);
    if (status != DS_OK) break;
    hmc_phase_out_t *phase = in_warmup ? &warmup : &sampling;
    if (keep_draw) phase_add_draw(phase, &h, rows, dim, (int)cfg->steps);
    const int phase_ends = it + 1 == cfg->warmup || it + 1 == total_iterations;
    if (keep_draw && (phase->count == phase->capacity || phase_ends))
      status = comm_agree(run->comm, phase_flush(run, out, phase, rows, dim));
    if (status == DS_OK && in_warmup && adapt) {
      int metric_changed = 0;
      status = adapt_after_iteration(adapt, it, h.accept, h.q, h.step_nominal, h.inv_metric, &metric_changed);
      steps_changed = 1;
      if (status == DS_OK && metric_changed)
        status = b->upload(b, (void *)m.inv_metric, h.inv_metric, metric_bytes(&m, rows, dim));
      status = comm_agree(run->comm, status);
    }
    if (status != DS_OK) break;

    /* Progress over all chains, and any stop signal: every rank takes part. */
    double sums[4] = {0, 0, 0, signals_pending() != 0};
    for (int64_t c = 0; c < rows; ++c) {
      sums[0] += h.accept[c];
      sums[1] += h.diverging[c];
      sums[2] += h.step_used[c];
    }
    status = comm_allreduce_sum_double(run->comm, sums, 4);
    if (status != DS_OK) break;
    h.divergences[in_warmup ? 0 : 1] += sums[1];
    char detail[160];
    const double chains = (double)config_items(cfg);
    snprintf(detail, sizeof detail, "accept %.3f  step %.3g  divergences %.0f", sums[0] / chains, sums[2] / chains,
             h.divergences[in_warmup ? 0 : 1]);
    progress_update(&run->progress, in_warmup ? "warmup" : "sampling", it + 1, detail);

    const int64_t completed = it + 1;
    const int stop = sums[3] > 0 && completed < total_iterations;
    const int scheduled = cfg->checkpoint_every > 0 &&
                          (completed % cfg->checkpoint_every == 0 || completed == total_iterations);
    if (stop || scheduled) {
      /* The output must hold every draw the checkpoint counts, durably, before it exists. */
      if (warmup.count > 0) status = comm_agree(run->comm, phase_flush(run, out, &warmup, rows, dim));
      if (status == DS_OK && sampling.count > 0)
        status = comm_agree(run->comm, phase_flush(run, out, &sampling, rows, dim));
      if (status == DS_OK) status = comm_agree(run->comm, h5out_flush(out));
      if (status == DS_OK) status = comm_agree(run->comm, state_download(b, &m, &h, rows, dim));
      ckpt_meta_t meta;
      if (status == DS_OK) status = run_checkpoint_meta(run, completed, sampling.first_draw, &meta);
      if (status == DS_OK)
        status = run_write_checkpoint(run, &meta, items.arrays, items.n_arrays, items.globals, items.n_globals, stop);
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
    snprintf(what, sizeof what, "hmc: %lld draws of %lld chains written to %s (%.0f divergent draws; %.0f divergent "
             "transitions in warmup)", (long long)cfg->draws, (long long)config_items(cfg), cfg->out, h.divergences[1],
             h.divergences[0]);
    progress_finish(&run->progress, what);
    /* The closing table, unless the draws are too many to summarise in a few seconds (ranking
     * and FFTs over every draw of every parameter): then say how to get it. */
    const double values = (double)config_items(cfg) * (double)cfg->draws * (double)dim;
    if (!cfg->quiet && cfg->draws >= 4 && values <= HMC_SUMMARY_MAX_VALUES)
      status = summary_print_file(run->comm, cfg->out, run->comm->rank == 0 ? stdout : NULL, 20);
    else if (!cfg->quiet && cfg->draws >= 4 && run->comm->rank == 0)
      printf("%.3g draws x parameters: for R-hat, ESS and MCSE run `dsampler summary %s` (in parallel under "
             "mpirun)\n", values, cfg->out);
  }
  device_free(b, &m);
  host_free(&h);
  phase_free(&warmup);
  phase_free(&sampling);
  adapt_free(adapt);
  return status;
}
