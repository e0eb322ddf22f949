/* hmc.c: Hamiltonian Monte Carlo over many independent chains (DESIGN.md, HMC), written once
 * against the backend interface: warmup with adaptation (adapt.c), then sampling.
 *
 * The chains' state, the step sizes, the metric and the adaptation live in the backend's
 * memory; an iteration sends nothing to the host but its summed statistics (a few hundred
 * bytes). Kept draws are copied into a block on the backend, and a full block goes to the
 * host in one copy and is written by the writer thread (draw_writer.h) while the chains go on.
 * Each chain's running moments over its kept draws are written at the end (group `moments`),
 * so a run that stores the draws of a few chains still summarises all of them.
 *
 * A target with output variables (target ABI version 2: a Stan model's parameters, transformed
 * parameters and generated quantities) has each kept draw constrained on the host as its block
 * is written: posterior then holds those variables, unconstrained_posterior the sampler's own
 * draws, and the moments (of the unconstrained draws) go to unconstrained_moments. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "rng.h"
#include "draw_writer.h"
#include "exactsum.h"
#include "moments.h"
#include "h5util.h"
#include "hmc.h"
#include "hmc_chains.h"
#include "restarts.h"
#include "lp_outliers.h"
#include "order_stats.h"
#include "signals.h"
#include "status.h"
#include "summary.h"
#include "target.h"

/* Memory for a block of kept draws, per rank and phase (on the backend, and again on the host);
 * DSAMPLER_DRAW_BUFFER_BYTES on rank 0 overrides it for every rank. */
#define HMC_DRAW_BUFFER_BYTES ((size_t)256 << 20)
/* Above this many values (chains x draws x dim) a run does not print the summary itself. */
#define HMC_SUMMARY_MAX_VALUES 2.5e7

/* Leapfrog steps: fixed when neither --steps nor ChEES sets them; ChEES's most. */
enum { HMC_DEFAULT_STEPS = 10, HMC_CHEES_MAX_STEPS = 1024 };
/* The group sample_stats: hmc_stats.h's list. */
#define STAT_VAR(name, type, dtype, source, member) {#name, H5OUT_##dtype, 0},
static const h5out_var_t hmc_stats_vars[HMC_N_STATS] = {HMC_SAMPLE_STATS(STAT_VAR)};
#undef STAT_VAR


/* One phase's output (warmup or sampling): its groups and a block of kept draws. */
typedef struct hmc_phase_out {
  int enabled;
  int g_posterior, g_stats, g_unconstrained;
  int64_t first_draw, count;          /* draws written before the block; draws in it */
  hmc_draw_block_t block;             /* on the backend */
  hmc_draw_block_t host;              /* the block's host copy, written by the writer thread */
  /* With output variables (target_has_outputs), the host's work for a block of rows x count
   * draws: the kept draws gathered [rows count, dim], their keys, the target's values [rows
   * count, constrained_dim], and the same values per variable, each [rows, capacity, size]
   * from its offset, as the writer takes them. */
  float *gathered;
  uint64_t *keys;
  double *packed, *values;
} hmc_phase_out_t;

typedef struct hmc_output {
  h5out_t *file;
  draw_writer_t *writer;
  int64_t rows;                       /* this rank's chains whose draws are written */
  hmc_phase_out_t phase[2];           /* 0: warmup, 1: sampling */
} hmc_output_t;

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
/* Values of the target's output variables in a kept draw (0 without them). */
static int64_t output_width(const dsampler_target *t) { return target_has_outputs(t) ? t->constrained_dim : 0; }
/* Whether HMC keeps log p in float64 (the target gives it, the backend keeps it). */
static int wide_logp(const run_ctx_t *run) {
  return run->target->abi_version >= 2 && run->target->logp_grad_f64 && !run->backend->on_device;
}
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Leapfrog steps when they are not adapted: --steps, or 10 when it asks for ChEES (--steps
 * auto, 0) but warmup does not adapt. */
static int hmc_fixed_steps(const config_t *cfg) { return cfg->steps > 0 ? (int)cfg->steps : HMC_DEFAULT_STEPS; }

/* Draws kept in a phase of `iterations` iterations: iterations 0, thin, 2 thin, ... */
static int64_t kept_draws(int64_t iterations, int64_t thin) { return (iterations + thin - 1) / thin; }

/* ---- The chains ------------------------------------------------------------------------ */

/* Registers a backend array of [rows, width] for checkpoints, allocating it and its mirror. */
static int chains_array(hmc_chains_t *chains, backend_t *b, const char *name, int64_t width, size_t element,
                        int64_t rows, int64_t backend_rows, void **backend_copy) {
  adapt_array_t *entry = &chains->state[chains->n_state++];
  chains->n_owned = chains->n_state;
  const size_t bytes = (size_t)(rows * width) * element;
  DS_TRY(b->alloc(b, backend_copy, (size_t)(backend_rows * width) * element));
  entry->backend_copy = *backend_copy;
  entry->bytes = (size_t)(backend_rows * width) * element;
  entry->array = (ckpt_array_t){name, element == sizeof(double) ? CKPT_FLOAT64 : CKPT_FLOAT32, width,
                                malloc(bytes + element)};
  if (!entry->array.local) return DS_FAIL_ALLOC(name, bytes);
  return DS_OK;
}

static int chains_alloc(hmc_chains_t *chains, backend_t *b, adapt_t *adapt, int64_t rows, int64_t dim, int wide) {
  hmc_batch_t *batch = &chains->batch;
  const size_t f = sizeof(float);
  /* Unless each chain adapts its own metric, all chains share one: one row on the backend. */
  const int64_t metric_rows = batch->shared_metric ? 1 : rows;
  DS_TRY(chains_array(chains, b, "q", dim, f, rows, rows, (void **)&batch->q));
  DS_TRY(chains_array(chains, b, "logp", 1, f, rows, rows, (void **)&batch->logp));
  DS_TRY(chains_array(chains, b, "grad", dim, f, rows, rows, (void **)&batch->grad));
  DS_TRY(chains_array(chains, b, "step_size", 1, f, rows, rows, (void **)&chains->step_nominal));
  DS_TRY(chains_array(chains, b, "inv_metric", dim, f, rows, metric_rows, (void **)&chains->inv_metric));
  DS_TRY(chains_array(chains, b, "moment_mean", dim, f, rows, rows, (void **)&chains->moment_mean));
  DS_TRY(chains_array(chains, b, "moment_m2", dim, f, rows, rows, (void **)&chains->moment_m2));
  chains->moment_mean_host = chains->state[chains->n_state - 2].array.local;
  chains->moment_m2_host = chains->state[chains->n_state - 1].array.local;
  if (wide) DS_TRY(chains_array(chains, b, "logp_wide", 1, sizeof(double), rows, rows, (void **)&batch->logp_wide));
  DS_TRY(chains_array(chains, b, "lp_window_mean", 1, f, rows, rows, (void **)&chains->lp_mean));
  DS_TRY(chains_array(chains, b, "lp_window_m2", 1, f, rows, rows, (void **)&chains->lp_m2));
  DS_TRY(b->fill(b, chains->lp_mean, 0.0f, rows));
  DS_TRY(b->fill(b, chains->lp_m2, 0.0f, rows));
  batch->step_nominal = chains->step_nominal;
  batch->inv_metric = chains->inv_metric;
  DS_TRY(hmc_batch_alloc_stats(b, batch));
  DS_TRY(b->alloc(b, (void **)&batch->accepted, (size_t)rows));
  DS_TRY(b->alloc(b, (void **)&chains->search, (size_t)((2 * rows + 3) / 4 * 4)));
  DS_TRY(b->fill(b, chains->moment_mean, 0.0f, rows * dim));
  DS_TRY(b->fill(b, chains->moment_m2, 0.0f, rows * dim));
  chains->globals[chains->n_globals++] = (ckpt_global_t){"totals", HMC_TOTALS, chains->totals.values};
  if (adapt) {
    int n_arrays = 0, n_globals = 0;
    adapt_checkpoint_items(adapt, chains->state + chains->n_state, &n_arrays, chains->globals + chains->n_globals,
                           &n_globals);
    chains->n_state += n_arrays;
    chains->n_globals += n_globals;
  }
  return DS_OK;
}

static void chains_free(hmc_chains_t *chains, backend_t *b) {
  for (int i = 0; i < chains->n_owned; ++i) {
    b->release(b, chains->state[i].backend_copy);
    free(chains->state[i].array.local);
  }
  b->release(b, chains->search);
  hmc_batch_release_stats(b, &chains->batch);
  b->release(b, chains->batch.accepted);
}

/* Backend -> host mirrors (for a checkpoint), or back (after reading one). A shared metric is
 * one row on the backend and a row per chain in checkpoints. */
int hmc_chains_sync(hmc_chains_t *chains, backend_t *b, int64_t rows, int to_host) {
  for (int i = 0; i < chains->n_state; ++i) {
    adapt_array_t *entry = &chains->state[i];
    if (to_host) {
      DS_TRY(b->download(b, entry->array.local, entry->backend_copy, entry->bytes));
      if (entry->backend_copy == (void *)chains->inv_metric && chains->batch.shared_metric)
        for (int64_t r = 1; r < rows; ++r)
          memcpy((char *)entry->array.local + (size_t)r * entry->bytes, entry->array.local, entry->bytes);
    } else if (rows > 0) {
      DS_TRY(b->upload(b, entry->backend_copy, entry->array.local, entry->bytes));
    }
  }
  return DS_OK;
}

/* log p of the starts in float64 (batch->logp_wide), from the target's float64 entry on the host
 * positions q_host; the float log p the backend computed is its rounding. */
static int fresh_wide_logp(run_ctx_t *run, hmc_chains_t *chains, int64_t rows, int64_t dim, const float *q_host) {
  const dsampler_target *t = run->target;
  if (rows == 0) return DS_OK;
  double *x = malloc((size_t)(rows * (2 * dim + 1)) * sizeof *x);
  if (!x) return DS_FAIL_ALLOC("the starts in float64", (size_t)(rows * (2 * dim + 1)) * sizeof *x);
  double *grad = x + rows * dim, *logp = grad + rows * dim;
  for (int64_t e = 0; e < rows * dim; ++e) x[e] = (double)q_host[e];
  int rc = t->logp_grad_f64(t->self, x, rows, logp, grad);
  int status = rc == 0 ? DS_OK : ds_fail(DS_ERR_TARGET, "target '%s': logp_grad_f64 failed (returned %d)", t->name, rc);
  if (status == DS_OK) status = run->backend->upload(run->backend, chains->batch.logp_wide, logp, (size_t)rows * sizeof *logp);
  free(x);
  return status;
}

static int fresh_state(run_ctx_t *run, hmc_chains_t *chains, int64_t rows, int64_t dim) {
  backend_t *b = run->backend;
  hmc_batch_t *batch = &chains->batch;
  float *q_host = chains->state[0].array.local, *logp_host = chains->state[1].array.local;
  int status = run_initial_positions(run, config_items(run->cfg), q_host);
  if (status != DS_OK) return status;
  status = b->upload(b, batch->q, q_host, (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK) status = b->fill(b, chains->inv_metric, 1.0f, (batch->shared_metric ? 1 : rows) * dim);
  if (status == DS_OK) status = b->fill(b, chains->step_nominal, (float)run->cfg->step_size, rows);
  if (status == DS_OK) status = b->logp_grad(b, run->target, batch->q, rows, batch->logp, batch->grad);
  if (status == DS_OK) status = b->download(b, logp_host, batch->logp, (size_t)rows * sizeof(float));
  if (status == DS_OK && batch->logp_wide) status = fresh_wide_logp(run, chains, rows, dim, q_host);
  /* A start where log p is not finite cannot move: refuse it. */
  for (int64_t c = 0; status == DS_OK && c < rows; ++c)
    if (!isfinite(logp_host[c]))
      status = ds_fail(DS_ERR_INPUT, "chain %lld starts where log p is not finite (%g)%s%s",
                       (long long)(run->item_begin + c), (double)logp_host[c],
                       run->cfg->init[0] ? "; check --init " : "", run->cfg->init);
  return comm_agree(run->comm, status);
}

static int resume_state(run_ctx_t *run, hmc_chains_t *chains, int64_t rows) {
  DS_TRY(comm_agree(run->comm, run_check_resume_meta(run)));
  ckpt_array_t arrays[HMC_MAX_STATE];
  for (int i = 0; i < chains->n_state; ++i) arrays[i] = chains->state[i].array;
  int status = ckpt_read(run->comm->world, run->resume_path, arrays, chains->n_state, chains->globals,
                         chains->n_globals, run->item_begin, run->item_end, config_items(run->cfg));
  DS_TRY(comm_agree(run->comm, status == DS_OK ? DS_OK : DS_ERR_CHECKPOINT));
  return comm_agree(run->comm, hmc_chains_sync(chains, run->backend, rows, 0));
}

/* Stan's init_stepsize for every chain at once (backend.h's step_search), before warmup
 * iteration `iteration`: probe iterations from each chain's state, which they leave as it is,
 * with fresh momenta keyed by (seed, chain, search round and trial), every chain from one start.
 * Each chain keeps its own step, or, when steps are pooled, every chain takes the median of the
 * chains' (exactly: the steps are the common start times powers of two, counted by exponent);
 * that median is also the next search's start. The dual averaging then restarts from there.
 * Collective. */
static int search_initial_steps(run_ctx_t *run, hmc_chains_t *chains, adapt_t *adapt, int64_t iteration) {
  backend_t *b = run->backend;
  const int64_t rows = chains->batch.n_chains, round = adapt_next_search(adapt);
  const float start = adapt_search_start(adapt);
  /* A probe is an iteration as the run makes them (its leapfrog steps and jitter): the step must
   * hold over the whole trajectory, not one leapfrog step as in Stan's NUTS. */
  DS_TRY(adapt_metric_factor(adapt, &chains->batch.metric_factor, &chains->batch.metric_factor_inv));
  hmc_batch_t probe = chains->batch;
  probe.probe = 1;
  probe.n_leapfrog = adapt_probe_steps(adapt, hmc_fixed_steps(run->cfg));
  probe.moment_mean = probe.moment_m2 = NULL;
  int8_t *direction = chains->search, *exponent = chains->search + rows;
  /* A chain whose search is done reads no more probes: the backend may leave it out. */
  probe.probe_direction = direction;
  /* Zero bytes: a float 0 is four of them. */
  DS_TRY(comm_agree(run->comm, b->fill(b, (float *)chains->search, 0.0f, (2 * rows + 3) / 4)));
  DS_TRY(comm_agree(run->comm, b->fill(b, chains->step_nominal, start, rows)));
  step_search_counts_t counts;
  memset(&counts, 0, sizeof counts);
  for (int trial = 0; trial < STEP_SEARCH_LIMIT + 2; ++trial) {
    probe.iteration = 0x80000000u + (uint32_t)(round * 256 + trial);
    int status = b->hmc_transition(b, run->target, &probe);
    if (status == DS_OK) status = b->step_search(b, probe.accept_prob, direction, exponent, chains->step_nominal, rows, &counts);
    DS_TRY(comm_agree(run->comm, status));
    DS_TRY(comm_allreduce_sum_u64(run->comm, (uint64_t *)&counts, 1 + STEP_SEARCH_BINS));
    if (counts.open == 0) break;
  }
  /* The lower median over all chains of the exponent. */
  const int64_t rank = (config_items(run->cfg) - 1) / 2;
  int64_t below = 0;
  int bin = 0;
  while (bin < STEP_SEARCH_BINS - 1 && below + counts.exponent[bin] <= rank) below += counts.exponent[bin++];
  const float median = ldexpf(start, bin - STEP_SEARCH_LIMIT);
  return comm_agree(run->comm, adapt_restart_steps(adapt, iteration, chains->step_nominal, median));
}

/* ---- The output ------------------------------------------------------------------------ */

/* Draws per block. Every rank must flush at the same iterations (the writes are collective),
 * so the block is sized for the largest rank's share of written chains, from rank 0's budget. */
static int block_capacity(run_ctx_t *run, int64_t output_chains, int64_t dim, int64_t draws, int64_t *capacity) {
  /* The host's work for output variables: gathered draws, keys, the values twice. */
  const int64_t width = output_width(run->target);
  const int64_t output_bytes = width > 0 ? dim * (int64_t)sizeof(float) + 8 + 16 * width : 0;
  int64_t budget = (int64_t)HMC_DRAW_BUFFER_BYTES;
  const char *text = getenv("DSAMPLER_DRAW_BUFFER_BYTES");
  int status = DS_OK;
  if (run->comm->rank == 0 && text) {
    char *end = NULL;
    errno = 0;
    const long long parsed = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || parsed < 1 || parsed > ((long long)1 << 40))
      status = ds_fail(DS_ERR_INPUT, "DSAMPLER_DRAW_BUFFER_BYTES: expected a number of bytes in [1, 2^40], got '%s'",
                       text);
    else
      budget = parsed;
  }
  DS_TRY(comm_agree(run->comm, status));
  DS_TRY(comm_bcast(run->comm, &budget, sizeof budget, 0));
  int64_t rows_max = 0;
  for (int r = 0; r < run->comm->size; ++r) {
    int64_t begin, end;
    comm_partition(config_items(run->cfg), run->comm->size, r, &begin, &end);
    rows_max = max64(rows_max, min64(end, output_chains) - min64(begin, output_chains));
  }
  const int64_t per_draw = max64(rows_max, 1) * (dim * (int64_t)sizeof(float) + HMC_STATS_BYTES_PER_DRAW + output_bytes);
  *capacity = min64(max64(budget / per_draw, 1), max64(draws, 1));
  return DS_OK;
}

static int phase_alloc(backend_t *b, hmc_phase_out_t *phase, int64_t rows, int64_t capacity, int64_t dim,
                       int64_t width) {
  phase->enabled = 1;
  DS_TRY(hmc_draw_block_alloc(b, &phase->block, 0, rows, capacity, dim));
  DS_TRY(hmc_draw_block_alloc(b, &phase->host, 1, rows, capacity, dim));
  const size_t cells = (size_t)(max64(rows, 1) * capacity);
  if (width > 0) {
    phase->gathered = malloc(cells * (size_t)dim * sizeof *phase->gathered);
    phase->keys = malloc(cells * sizeof *phase->keys);
    phase->packed = malloc(cells * (size_t)width * sizeof *phase->packed);
    phase->values = malloc(cells * (size_t)width * sizeof *phase->values);
    if (!phase->gathered || !phase->keys || !phase->packed || !phase->values)
      return DS_FAIL_ALLOC("the output variables' block", cells * (size_t)(dim * 4 + 8 + 16 * width));
  }
  return DS_OK;
}

static void phase_free(backend_t *b, hmc_phase_out_t *phase) {
  if (!phase->enabled) return;
  hmc_draw_block_release(b, &phase->block, 0);
  hmc_draw_block_release(b, &phase->host, 1);
  free(phase->gathered);
  free(phase->keys);
  free(phase->packed);
  free(phase->values);
}

/* The target's output variables of the block's kept draws (host copy): keyed by (seed, chain,
 * phase, draw), constrained on the host's threads, then laid out per variable ([rows, capacity,
 * size] each) for the writer, whose pointers go to data. A partly filled block is gathered
 * first. Local. */
static int constrain_block(run_ctx_t *run, hmc_output_t *output, hmc_phase_out_t *phase, int sampling,
                           const void **data) {
  const dsampler_target *t = run->target;
  const hmc_draw_block_t *host = &phase->host;
  const int64_t dim = t->dim, rows = output->rows, count = phase->count;
  const int64_t capacity = host->capacity;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t slot = 0; slot < count; ++slot) {
      if (count < capacity)
        memcpy(phase->gathered + (r * count + slot) * dim, host->q + (r * capacity + slot) * dim,
               (size_t)dim * sizeof(float));
      phase->keys[r * count + slot] = target_output_key(run->cfg->seed, run->item_begin + r, sampling, phase->first_draw + slot);
    }
  const float *points = count < capacity ? phase->gathered : host->q;
  DS_TRY(target_constrain(t, points, rows * count, phase->keys, phase->packed,
                          run->target_extra.constrain_rows_per_call));
  target_unpack_outputs(t, phase->packed, rows, count, capacity, phase->values, data);
  return DS_OK;
}

/* Sends the block to the host and hands it to the writer. Collective. */
static int phase_flush(run_ctx_t *run, hmc_output_t *output, hmc_phase_out_t *phase) {
  if (phase->count == 0) return DS_OK;
  /* The host copy is the writer's until its job is done. */
  draw_writer_job_t job;
  memset(&job, 0, sizeof job);
  int status = draw_writer_wait(output->writer);
  if (status == DS_OK) status = hmc_draw_block_download(run->backend, &phase->host, &phase->block);
  const int outputs = target_has_outputs(run->target);
  if (status == DS_OK && outputs) status = constrain_block(run, output, phase, phase == &output->phase[1], job.data[0]);
  DS_TRY(comm_agree(run->comm, status));
  const hmc_draw_block_t *host = &phase->host;
  job.n_groups = outputs ? 3 : 2;
  job.groups[0] = phase->g_posterior;
  job.groups[1] = phase->g_stats;
  job.groups[2] = phase->g_unconstrained;
  job.n_vars[1] = HMC_N_STATS;
  int n_stats = 0;
#define STAT_DATA(name, type, dtype, source, member) job.data[1][n_stats++] = host->name;
  HMC_SAMPLE_STATS(STAT_DATA)
#undef STAT_DATA
  if (outputs) {
    job.n_vars[0] = run->target->n_vars; /* data[0]: constrain_block's */
    job.n_vars[2] = 1;
    job.data[2][0] = host->q;
  } else {
    job.n_vars[0] = 1;
    job.data[0][0] = host->q;
  }
  job.chain_begin = run->item_begin;
  job.rows = output->rows;
  job.first_draw = phase->first_draw;
  job.count = phase->count;
  job.buffer_draws = host->capacity;
  DS_TRY(draw_writer_start(output->writer, &job));
  phase->first_draw += phase->count;
  phase->count = 0;
  return DS_OK;
}

/* Everything kept so far written and durable (before a checkpoint counts it). Collective. */
static int output_settle(run_ctx_t *run, hmc_output_t *output) {
  for (int p = 0; p < 2; ++p)
    if (output->phase[p].enabled) DS_TRY(phase_flush(run, output, &output->phase[p]));
  DS_TRY(comm_agree(run->comm, draw_writer_wait(output->writer)));
  return comm_agree(run->comm, h5out_flush(output->file));
}

/* The bytes this run still writes, checked against the output's file system before work. */
static int check_output_space(run_ctx_t *run, int64_t output_chains, int64_t draws_left, int64_t warmup_left) {
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, chains = config_items(cfg);
  const double per_draw = (double)output_chains * (double)(dim * 4 + HMC_STATS_BYTES_PER_DRAW + 8 * output_width(run->target));
  const double bytes = per_draw * (double)(draws_left + warmup_left) + (double)chains * (double)dim * 16.0;
  char dir[CONFIG_PATH_MAX];
  int status = DS_OK;
  if (run->comm->rank == 0) {
    const double free_bytes = h5util_free_bytes(cfg->out, 0, dir, sizeof dir);
    if (free_bytes >= 0 && bytes > free_bytes && !h5util_space_check_skipped())
      status = ds_fail(DS_ERR_INPUT, "--out %s: this run writes %.3g GB of draws but %s has %.3g GB free; write "
                                     "fewer with --output-chains M or --thin K, or choose another --out",
                       cfg->out, bytes / 1e9, dir, free_bytes / 1e9);
    else if (!cfg->quiet)
      printf("output: %.3g GB to %s (%lld of %lld chains' draws, every %lld%s)%s\n", bytes / 1e9, cfg->out,
             (long long)output_chains, (long long)chains, (long long)cfg->thin,
             cfg->thin == 1 ? "" : cfg->thin % 10 == 1 && cfg->thin % 100 != 11 ? "st" : "th",
             free_bytes >= 0 ? "" : "; free space unknown");
    fflush(stdout);
  }
  return comm_agree(run->comm, status);
}

/* Creates the output (fresh run) or reopens it truncated to the checkpoint (resume). */
static int output_open(run_ctx_t *run, hmc_output_t *output, int64_t output_chains) {
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim;
  const dsampler_target *t = run->target;
  const int outputs = target_has_outputs(t);
  const h5out_var_t unconstrained[] = {{t->var_name, H5OUT_FLOAT32, 1}};
  /* posterior: the target's own variables (float64, their shapes), else the draws themselves. */
  const int n_posterior = outputs ? t->n_vars : 1;
  h5out_var_t *posterior = calloc((size_t)n_posterior, sizeof *posterior);
  h5out_shape_t *shapes = calloc((size_t)n_posterior, sizeof *shapes);
  if (!posterior || !shapes) {
    free(posterior);
    free(shapes);
    return comm_agree(run->comm, DS_FAIL_ALLOC("the output's variables", sizeof *shapes * (size_t)n_posterior));
  }
  if (outputs) {
    run_output_vars(run, posterior, shapes);
  } else {
    posterior[0] = unconstrained[0];
  }
  static const char *const names[2][3] = {{"warmup_posterior", "warmup_sample_stats", "warmup_unconstrained_posterior"},
                                          {"posterior", "sample_stats", "unconstrained_posterior"}};
  const int64_t warmup_done = run->resume_path ? min64(run->resume_meta->iteration, cfg->warmup) : 0;
  const int64_t first[2] = {kept_draws(warmup_done, cfg->thin), run->resume_path ? run->resume_meta->draws_written : 0};
  int status = run->resume_path ? run_reopen_output(run, &output->file) : run_open_output(run, &output->file);
  for (int p = 0; p < 2 && status == DS_OK; ++p) {
    hmc_phase_out_t *phase = &output->phase[p];
    if (!phase->enabled) continue;
    phase->first_draw = first[p];
    for (int g = 0; g < (outputs ? 3 : 2) && status == DS_OK; ++g) {
      const h5out_var_t *vars = g == 0 ? posterior : g == 1 ? hmc_stats_vars : unconstrained;
      const int n_vars = g == 0 ? n_posterior : g == 1 ? HMC_N_STATS : 1;
      const h5out_shape_t *own = g == 0 && outputs ? shapes : NULL;
      int *group = g == 0 ? &phase->g_posterior : g == 1 ? &phase->g_stats : &phase->g_unconstrained;
      status = run->resume_path ? h5out_open_group_shaped(output->file, names[p][g], output_chains, dim, vars, own,
                                                          n_vars, first[p], group)
                                : h5out_add_group_shaped(output->file, names[p][g], output_chains, dim,
                                                         phase->block.capacity, vars, own, n_vars, group);
    }
  }
  free(posterior);
  free(shapes);
  DS_TRY(comm_agree(run->comm, status));
  return comm_agree(run->comm, draw_writer_create(&output->writer, output->file));
}

/* Chains whose kept draws never changed (every coordinate's m2 exactly 0): a chain that never
 * accepted a move. Counted over all ranks, the first few named. Collective. */
static int find_frozen_chains(run_ctx_t *run, hmc_chains_t *chains, const float *m2, int64_t rows, int64_t dim) {
  int64_t local[1 + HMC_FROZEN_NAMED];
  local[0] = 0;
  for (int i = 0; i < HMC_FROZEN_NAMED; ++i) local[1 + i] = -1;
  for (int64_t c = 0; c < rows; ++c) {
    int64_t k = 0;
    while (k < dim && m2[c * dim + k] == 0.0f) ++k;
    if (k < dim) continue;
    if (local[0] < HMC_FROZEN_NAMED) local[1 + local[0]] = run->item_begin + c;
    local[0]++;
  }
  int64_t *all = malloc((size_t)run->comm->size * sizeof local);
  int status = comm_agree(run->comm, all ? DS_OK : DS_FAIL_ALLOC("frozen chains", sizeof local));
  if (status == DS_OK)
    MPI_CHECK(MPI_Allgather(local, 1 + HMC_FROZEN_NAMED, MPI_INT64_T, all, 1 + HMC_FROZEN_NAMED, MPI_INT64_T,
                            run->comm->world));
  chains->frozen = 0;
  for (int i = 0; i < HMC_FROZEN_NAMED; ++i) chains->frozen_ids[i] = -1;
  int named = 0;
  for (int r = 0; status == DS_OK && r < run->comm->size; ++r) {
    const int64_t *theirs = all + r * (1 + HMC_FROZEN_NAMED);
    chains->frozen += theirs[0];
    for (int i = 0; i < HMC_FROZEN_NAMED && theirs[1 + i] >= 0 && named < HMC_FROZEN_NAMED; ++i)
      chains->frozen_ids[named++] = theirs[1 + i];
  }
  free(all);
  return status;
}

/* The group `moments`: each chain's mean and variance (ddof 1) over its kept draws, and the
 * mean and variance over all chains and draws, pooled exactly. Collective. */
static int output_moments(run_ctx_t *run, hmc_output_t *output, hmc_chains_t *chains, int64_t rows) {
  const int64_t dim = run->target->dim, n = (int64_t)chains->totals.moment_draws;
  if (n < 1) return DS_OK;
  backend_t *b = run->backend;
  /* The per-chain values in float32, as accumulated, in the moments' checkpoint mirrors (no
   * checkpoint follows the end of the run). */
  float *chain_mean = chains->moment_mean_host, *chain_var = chains->moment_m2_host;
  double *pooled = malloc((size_t)(4 * dim) * sizeof(double));
  int status = pooled ? DS_OK : DS_FAIL_ALLOC("the moments", (size_t)(4 * dim) * sizeof(double));
  if (status == DS_OK) status = b->download(b, chain_mean, chains->moment_mean, (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK) status = b->download(b, chain_var, chains->moment_m2, (size_t)(rows * dim) * sizeof(float));
  if (status == DS_OK && n > 1) status = find_frozen_chains(run, chains, chain_var, rows, dim);
  for (size_t e = 0; status == DS_OK && e < (size_t)(rows * dim); ++e)
    chain_var[e] = n > 1 ? (float)((double)chain_var[e] / (double)(n - 1)) : NAN;
  status = comm_agree(run->comm, status);
  double *mean = pooled, *within = pooled + dim, *between = pooled + 2 * dim, *var = pooled + 3 * dim;
  const double chains_total = (double)config_items(run->cfg), total = chains_total * (double)n;
  if (status == DS_OK)
    status = moments_pool(run->comm, b, chains->moment_mean, chains->moment_m2, rows, dim, config_items(run->cfg),
                          mean, within, between);
  for (int64_t k = 0; status == DS_OK && k < dim; ++k)
    var[k] = total > 1 ? (within[k] + (double)n * between[k]) / (total - 1.0) : NAN;
  if (status == DS_OK) {
    static const char *const chain_names[] = {"chain_mean", "chain_var"}, *const global_names[] = {"mean", "var"};
    const float *chain_data[] = {chain_mean, chain_var};
    const double *global_data[] = {mean, var};
    char dim_name[300];
    snprintf(dim_name, sizeof dim_name, "%s_dim_0", run->target->var_name);
    /* Of the unconstrained draws: beside a target's own variables they get a name of their own, so
     * that nothing reads them as the posterior's. */
    const char *group = target_has_outputs(run->target) ? "unconstrained_moments" : "moments";
    status = h5out_write_summary_group(output->file, group, dim_name, config_items(run->cfg), dim,
                                       run->item_begin, rows, chain_names, chain_data, 2, global_names, global_data, 2);
  }
  free(pooled);
  return comm_agree(run->comm, status);
}

/* The metric the sampling used, as attributes: metric_used (unit, diag or dense) and, where
 * --metric auto weighed it, metric_condition (the condition number of the last window's pooled
 * correlation matrix, against ADAPT_DENSE_CONDITION, and where auto dropped the dense metric);
 * and target_accept. Collective. */
static int output_metric(run_ctx_t *run, hmc_output_t *output, const adapt_t *adapt) {
  double condition = NAN, drop_rate = 0.0;
  int64_t dropped = 0;
  const char *used = adapt_metric_used(adapt, &condition, &dropped, &drop_rate);
  int status = comm_agree(run->comm, h5out_set_attr(output->file, "metric_used", used));
  if (status == DS_OK && !isnan(condition)) {
    char text[160];
    int length = snprintf(text, sizeof text, "%.6g (dense above %g)", condition, ADAPT_DENSE_CONDITION);
    if (dropped > 0)
      snprintf(text + length, sizeof text - (size_t)length, "; dense dropped after warmup iteration %lld (%.2g%% "
               "divergent transitions in its window)", (long long)dropped, 100.0 * drop_rate);
    status = comm_agree(run->comm, h5out_set_attr(output->file, "metric_condition", text));
  }
  /* target_accept: the acceptance rate the step was adapted to, and under auto whether and
   * where it was raised. */
  int raises = 0;
  int64_t raised_at = 0;
  double raise_rate = 0.0;
  const double target = adapt_target_accept(adapt, &raises, &raised_at, &raise_rate);
  if (status == DS_OK && adapt && !isnan(target)) {
    char text[200];
    int length = snprintf(text, sizeof text, "%.4g", target);
    if (run->cfg->target_accept == 0.0) {
      if (raises > 0)
        snprintf(text + length, sizeof text - (size_t)length, " (auto: raised from %g %d time%s, last after warmup "
                 "iteration %lld, %.3g%% divergent transitions in its window)", ADAPT_ACCEPT_AUTO_START, raises,
                 raises == 1 ? "" : "s", (long long)raised_at, 100.0 * raise_rate);
      else
        snprintf(text + length, sizeof text - (size_t)length, " (auto)");
    }
    status = comm_agree(run->comm, h5out_set_attr(output->file, "target_accept", text));
  }
  return status;
}

/* ---- The iteration --------------------------------------------------------------------- */

/* This rank's sums of the iteration's statistics (stats, from the backend) summed over all
 * ranks, with any rank's stop signal and the agreement on the iteration's status (this rank's:
 * status), in one allreduce. */
static int iteration_stats(run_ctx_t *run, int status, hmc_stats_t *stats, int *stop) {
  enum { SUMS = 5, PACKED = SUMS * EXACT_DIGITS + 3 };
  exact_sum_t *sums[SUMS] = {&stats->accept, &stats->step, &stats->chees_slope, &stats->chees_value,
                             &stats->chees_weight};
  uint64_t packed[PACKED];
  for (int s = 0; s < SUMS; ++s) {
    exact_sum_normalize(sums[s]);
    for (int i = 0; i < EXACT_DIGITS; ++i) packed[s * EXACT_DIGITS + i] = (uint64_t)sums[s]->digit[i];
  }
  packed[SUMS * EXACT_DIGITS] = (uint64_t)stats->divergent;
  packed[SUMS * EXACT_DIGITS + 1] = signals_pending() != 0;
  packed[SUMS * EXACT_DIGITS + 2] = status != DS_OK;
  DS_TRY(comm_allreduce_sum_u64(run->comm, packed, PACKED));
  /* A rank that failed: every rank now knows, and the agreement names the first one's error. */
  if (packed[SUMS * EXACT_DIGITS + 2] != 0) return comm_agree(run->comm, status);
  for (int s = 0; s < SUMS; ++s) {
    for (int i = 0; i < EXACT_DIGITS; ++i) sums[s]->digit[i] = (int64_t)packed[s * EXACT_DIGITS + i];
    exact_sum_normalize(sums[s]);
  }
  stats->divergent = (int64_t)packed[SUMS * EXACT_DIGITS];
  *stop = packed[SUMS * EXACT_DIGITS + 1] != 0;
  return DS_OK;
}

static void report_progress(run_ctx_t *run, hmc_chains_t *chains, hmc_stats_t *stats, int in_warmup, int64_t done) {
  const double n = (double)config_items(run->cfg);
  char detail[160];
  snprintf(detail, sizeof detail, "accept %.3f  step %.3g  leapfrog %d  divergences %.0f",
           exact_sum_value(&stats->accept) / n, exact_sum_value(&stats->step) / n, chains->batch.n_leapfrog,
           in_warmup ? chains->totals.divergent_warmup : chains->totals.divergent_sampling);
  progress_update(&run->progress, in_warmup ? "warmup" : "sampling", done, detail);
}

static int write_checkpoint(run_ctx_t *run, hmc_output_t *output, hmc_chains_t *chains, int64_t rows,
                            int64_t completed, int stopping) {
  DS_TRY(output_settle(run, output));
  DS_TRY(comm_agree(run->comm, hmc_chains_sync(chains, run->backend, rows, 1)));
  ckpt_meta_t meta;
  DS_TRY(run_checkpoint_meta(run, completed, output->phase[1].first_draw, &meta));
  ckpt_array_t arrays[HMC_MAX_STATE];
  for (int i = 0; i < chains->n_state; ++i) arrays[i] = chains->state[i].array;
  return run_write_checkpoint(run, &meta, arrays, chains->n_state, chains->globals, chains->n_globals, stopping);
}

static adapt_mode_t adapt_mode(const config_t *cfg) {
  if (cfg->warmup == 0 || cfg->adapt == CONFIG_ADAPT_NONE) return ADAPT_NONE;
  return cfg->adapt == CONFIG_ADAPT_POOLED ? ADAPT_POOLED : ADAPT_PER_CHAIN;
}

/* --timing's sections of an iteration (timing.h), in order. */
enum {
  T_BEFORE, T_TRANSITION, T_STATS, T_LP, T_MINOR, T_ADAPT, T_WINDOW, T_SEARCH, T_STUCK, T_PROGRESS, T_OUTPUT,
  T_CHECKPOINT, T_SECTIONS
};
static const char *const timing_sections[T_SECTIONS] = {
    "metric, trajectory", "transition", "draw, statistics", "lp moments", "minor-mode checks", "adaptation",
    "window ends", "step searches", "stuck chains", "progress", "output", "checkpoints"};
static const char *const timing_phases[2] = {"warmup", "sampling"};

/* The iterations from `first` on; *stopped when a signal ended them after a checkpoint. */
static int iterate(run_ctx_t *run, hmc_chains_t *chains, adapt_t *adapt, hmc_output_t *output, int64_t first,
                   int *stopped) {
  const config_t *cfg = run->cfg;
  backend_t *b = run->backend;
  timing_t *timing = &run->timing;
  hmc_batch_t *batch = &chains->batch;
  const int64_t rows = batch->n_chains, total_iterations = cfg->warmup + cfg->draws;
  int status = DS_OK;
  for (int64_t it = first; it < total_iterations && status == DS_OK; ++it) {
    const int in_warmup = it < cfg->warmup;
    const int64_t phase_iteration = in_warmup ? it : it - cfg->warmup;
    hmc_phase_out_t *phase = &output->phase[in_warmup ? 0 : 1];
    const int keep = phase->enabled && phase_iteration % cfg->thin == 0;
    if (it == cfg->warmup) progress_phase(&run->progress, it);
    DS_TRY(timing_begin(timing, in_warmup ? 0 : 1));
    batch->iteration = (uint32_t)it;
    batch->moment_mean = batch->moment_m2 = NULL;
    /* Counted apart from the pointers, which are NULL on a rank without chains. */
    const int add_moments = !in_warmup && phase_iteration % cfg->thin == 0;
    if (in_warmup) {
      adapt_before_iteration(adapt, batch);
    } else if (add_moments) {
      batch->moment_mean = chains->moment_mean;
      batch->moment_m2 = chains->moment_m2;
      batch->moment_count = (int64_t)chains->totals.moment_draws + 1;
      batch->moment_rows = batch->n_chains;
    }
    batch->n_leapfrog = adapt_leapfrog_steps(adapt, it, cfg->warmup, hmc_fixed_steps(cfg));
    DS_TRY(adapt_metric_factor(adapt, &batch->metric_factor, &batch->metric_factor_inv));
    if (in_warmup && adapt_chees(adapt)) DS_TRY(adapt_chees_prepare(adapt, batch, batch->q, it));
    DS_TRY(timing_lap(timing, T_BEFORE, 1));
    hmc_stats_t stats;
    memset(&stats, 0, sizeof stats);
    int stop = 0;
    /* The transition, the draw's copy and the local sums, then one allreduce of the sums that
     * is also the agreement on all three. */
    status = b->hmc_transition(b, run->target, batch);
    if (status == DS_OK) status = timing_lap(timing, T_TRANSITION, 1);
    if (status == DS_OK && keep && output->rows > 0) status = b->hmc_record_draw(b, batch, &phase->block, phase->count);
    if (status == DS_OK) status = b->hmc_stats(b, batch, &stats);
    batch->chees_center = NULL;
    batch->chees = NULL;
    DS_TRY(iteration_stats(run, status, &stats, &stop));
    DS_TRY(timing_lap(timing, T_STATS, 1));
    if (add_moments) chains->totals.moment_draws += 1.0;
    if (in_warmup && minor_modes_followed(run, adapt)) {
      chains->totals.lp_samples += 1.0;
      DS_TRY(comm_agree(run->comm, b->running_moments_add(b, batch->logp, chains->lp_mean, chains->lp_m2, rows,
                                                          chains->totals.lp_samples)));
      DS_TRY(timing_lap(timing, T_LP, 1));
    }
    *(in_warmup ? &chains->totals.divergent_warmup : &chains->totals.divergent_sampling) += (double)stats.divergent;
    if (in_warmup && adapt) {
      int search = 0;
      /* Chains in minor modes restart before the window's metric is made, so that their moments
       * (a chain wandering in a flat region has huge ones) do not reach it. */
      if (minor_modes_followed(run, adapt) &&
          ((it + 1) % MINOR_MODE_CHECK_EVERY == 0 || adapt_window_ends_next(adapt) || it + 1 == cfg->warmup)) {
        DS_TRY(restart_minor_modes(run, chains, adapt, it));
        DS_TRY(timing_lap(timing, T_MINOR, 1));
      }
      const int window_end = adapt_window_ends_next(adapt);
      DS_TRY(comm_agree(run->comm, adapt_after_iteration(adapt, it, &stats, batch, chains->step_nominal,
                                                         chains->inv_metric, &search)));
      DS_TRY(timing_lap(timing, window_end ? T_WINDOW : T_ADAPT, 1));
      if (search) DS_TRY(search_initial_steps(run, chains, adapt, it + 1));
      DS_TRY(timing_lap(timing, T_SEARCH, search));
      const int last = it + 1 == cfg->warmup && cfg->stuck == CONFIG_STUCK_RESTART;
      if (last) DS_TRY(restart_stuck_chains(run, chains, adapt));
      DS_TRY(timing_lap(timing, T_STUCK, last));
    }
    report_progress(run, chains, &stats, in_warmup, it + 1);
    DS_TRY(timing_lap(timing, T_PROGRESS, 1));

    if (keep) phase->count++;
    const int phase_ends = it + 1 == cfg->warmup || it + 1 == total_iterations;
    const int flush = keep && (phase->count == phase->block.capacity || phase_ends);
    if (flush) DS_TRY(phase_flush(run, output, phase));
    DS_TRY(timing_lap(timing, T_OUTPUT, flush));
    const int64_t completed = it + 1;
    stop = stop && completed < total_iterations;
    const int scheduled = cfg->checkpoint_every > 0 &&
                          (completed % cfg->checkpoint_every == 0 || completed == total_iterations);
    if (stop || scheduled) DS_TRY(write_checkpoint(run, output, chains, rows, completed, stop));
    DS_TRY(timing_lap(timing, T_CHECKPOINT, stop || scheduled));
    DS_TRY(timing_end(timing));
    if (stop) {
      *stopped = 1;
      break;
    }
  }
  return status;
}

static void report_end(run_ctx_t *run, hmc_chains_t *chains, int64_t output_chains) {
  const config_t *cfg = run->cfg;
  const int64_t kept = kept_draws(cfg->draws, cfg->thin);
  char what[CONFIG_PATH_MAX + 256];
  snprintf(what, sizeof what, "hmc: %lld draws of %lld chains written to %s, moments of all %lld (%.0f divergent "
           "draws; %.0f divergent transitions in warmup)", (long long)kept, (long long)output_chains, cfg->out,
           (long long)config_items(cfg), chains->totals.divergent_sampling, chains->totals.divergent_warmup);
  progress_finish(&run->progress, what);
  /* --quiet hides the progress, never a warning: divergent draws are said on stderr. */
  if (cfg->quiet && run->comm->rank == 0 && chains->totals.divergent_sampling > 0)
    fprintf(stderr, "dsampler: warning: %.0f of %lld kept draws were divergent transitions (%s)\n",
            chains->totals.divergent_sampling, (long long)(kept * (int64_t)config_items(cfg)), cfg->out);
  if (chains->frozen > 0 && run->comm->rank == 0) {
    char ids[256] = "";
    size_t used = 0;
    for (int i = 0; i < HMC_FROZEN_NAMED && chains->frozen_ids[i] >= 0 && used < sizeof ids; ++i)
      used += (size_t)snprintf(ids + used, sizeof ids - used, "%s%lld", i ? ", " : "", (long long)chains->frozen_ids[i]);
    fprintf(cfg->quiet ? stderr : stdout,
            "%swarning: %lld chain%s never moved over the kept draws (stuck: %s%s); their draws are one point\n",
            cfg->quiet ? "dsampler: " : "", (long long)chains->frozen, chains->frozen == 1 ? "" : "s", ids,
            chains->frozen > HMC_FROZEN_NAMED ? ", ..." : "");
  }
}

static int print_summary(run_ctx_t *run, int64_t output_chains) {
  const config_t *cfg = run->cfg;
  const int64_t kept = kept_draws(cfg->draws, cfg->thin);
  /* The closing table, unless the draws are too many to summarise in a few seconds (ranking
   * and FFTs over every draw of every parameter): then say how to get it. */
  const int64_t width = target_has_outputs(run->target) ? run->target->constrained_dim : run->target->dim;
  const double values = (double)output_chains * (double)kept * (double)width;
  if (cfg->quiet || kept < 4) return DS_OK;
  if (values <= HMC_SUMMARY_MAX_VALUES)
    return summary_print_file(run->comm, cfg->out, run->comm->rank == 0 ? stdout : NULL, 20);
  if (run->comm->rank == 0)
    printf("%.3g draws x parameters: for R-hat, ESS and MCSE run `dsampler summary %s` (in parallel under "
           "mpirun)\n", values, cfg->out);
  return DS_OK;
}

int hmc_run(run_ctx_t *run) {
  backend_t *b = run->backend;
  const config_t *cfg = run->cfg;
  const int64_t dim = run->target->dim, rows = run->item_end - run->item_begin;
  const int64_t total_iterations = cfg->warmup + cfg->draws;
  if (cfg->warmup >= ((int64_t)1 << 30) || cfg->draws >= ((int64_t)1 << 30) || total_iterations >= ((int64_t)1 << 30))
    return ds_fail(DS_ERR_INPUT, "--warmup + --draws: at most 2^30 - 1 iterations");
  const int64_t output_chains = cfg->output_chains > 0 ? cfg->output_chains : config_items(cfg);

  timing_init(&run->timing, b, cfg->timing && run->comm->rank == 0, timing_sections, T_SECTIONS, timing_phases, 2);
  hmc_chains_t chains;
  hmc_output_t output;
  memset(&chains, 0, sizeof chains);
  memset(&output, 0, sizeof output);
  adapt_t *adapt = NULL;
  const adapt_metric_t metric = cfg->metric == CONFIG_METRIC_DENSE ? ADAPT_METRIC_DENSE
                                : cfg->metric == CONFIG_METRIC_AUTO  ? ADAPT_METRIC_AUTO
                                                                     : ADAPT_METRIC_DIAG;
  const adapt_settings_t settings = {adapt_mode(cfg), cfg->metric != CONFIG_METRIC_UNIT, cfg->warmup,
                                     cfg->target_accept, cfg->step_size, rows, dim, config_items(cfg),
                                     cfg->steps == 0, HMC_CHEES_MAX_STEPS, metric,
                                     cfg->metric_fit == CONFIG_METRIC_FIT_FISHER, run->item_begin};
  hmc_batch_t *batch = &chains.batch;
  batch->shared_metric = !(settings.mode == ADAPT_PER_CHAIN && settings.diag_metric);
  batch->n_chains = rows;
  batch->chain_begin = run->item_begin;
  batch->dim = dim;
  batch->seed = cfg->seed;
  batch->leapfrog_cuda = run->target_extra.leapfrog_cuda;
  batch->leapfrog_self = run->target_extra.leapfrog_self;
  batch->n_leapfrog = hmc_fixed_steps(cfg);
  batch->jitter = (float)cfg->jitter;
  output.rows = max64(0, min64(run->item_end, output_chains) - run->item_begin);
  output.phase[0].enabled = cfg->save_warmup && cfg->warmup > 0;
  output.phase[1].enabled = 1;

  /* The output's size against its file system first, before anything is allocated. */
  const int64_t first_iteration = run->resume_path ? run->resume_meta->iteration : 0;
  const int64_t phase_draws[2] = {kept_draws(cfg->warmup, cfg->thin), kept_draws(cfg->draws, cfg->thin)};
  const int64_t warmup_left =
      output.phase[0].enabled ? phase_draws[0] - kept_draws(min64(first_iteration, cfg->warmup), cfg->thin) : 0;
  const int64_t draws_left = phase_draws[1] - (run->resume_path ? run->resume_meta->draws_written : 0);
  int status = check_output_space(run, output_chains, draws_left, warmup_left);
  if (status == DS_OK && settings.mode != ADAPT_NONE) status = adapt_create(&adapt, run->comm, b, &settings);
  batch->factor_per_chain = adapt_factor_per_chain(adapt);
  if (status == DS_OK) status = chains_alloc(&chains, b, adapt, rows, dim, wide_logp(run));
  int64_t capacity[2] = {1, 1};
  for (int p = 0; p < 2 && status == DS_OK; ++p)
    if (output.phase[p].enabled) {
      status = block_capacity(run, output_chains, dim, phase_draws[p], &capacity[p]);
      if (status == DS_OK)
        status = phase_alloc(b, &output.phase[p], output.rows, capacity[p], dim, output_width(run->target));
    }
  status = comm_agree(run->comm, status);
  if (status == DS_OK) status = comm_agree(run->comm, run_check_checkpoint_dir(run));

  if (status == DS_OK) status = run->resume_path ? resume_state(run, &chains, rows) : fresh_state(run, &chains, rows, dim);
  if (status == DS_OK && !run->resume_path && adapt) status = adapt_initial_metric(adapt, batch->q, batch->grad, chains.inv_metric);
  if (status == DS_OK && !run->resume_path && adapt) status = search_initial_steps(run, &chains, adapt, 0);
  if (status == DS_OK) status = output_open(run, &output, output_chains);

  progress_init(&run->progress, run->comm->rank == 0 && !cfg->quiet, total_iterations);
  run->progress.phase_first = first_iteration;
  int stopped = 0;
  if (status == DS_OK) status = iterate(run, &chains, adapt, &output, first_iteration, &stopped);
  if (status == DS_OK && !stopped) status = output_settle(run, &output);
  if (status == DS_OK && !stopped) status = output_moments(run, &output, &chains, rows);
  if (status == DS_OK && !stopped && output.file) status = output_metric(run, &output, adapt);
  int writer_status = comm_agree(run->comm, draw_writer_free(output.writer));
  if (status == DS_OK) status = writer_status;
  if (output.file) {
    int close_status = comm_agree(run->comm, h5out_close_as(output.file, status != DS_OK && status != DS_INTERRUPTED));
    if (status == DS_OK) status = close_status;
  }
  if (status == DS_OK && stopped) status = DS_INTERRUPTED;
  if (status == DS_OK) {
    report_end(run, &chains, output_chains);
    status = print_summary(run, output_chains);
  }
  if (status == DS_OK || status == DS_INTERRUPTED) timing_report(&run->timing, stderr);
  chains_free(&chains, b);
  for (int p = 0; p < 2; ++p) phase_free(b, &output.phase[p]);
  adapt_free(adapt);
  return status;
}
