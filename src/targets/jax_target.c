/* jax_target.c: a target from a JAX bundle (jax_target.h). The bundle's programs take a fixed
 * block of rows, so a call walks its rows in blocks: whole blocks in place (on a GPU, views of
 * dsampler's own arrays, with the outputs written where the program was told to donate them),
 * the last one padded in scratch. Each row's result is the compiled program's on that row alone,
 * whatever the call's size or the row's place in its block, so draws do not change with the
 * number of ranks. */
#include "jax_target.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jax_bundle.h"
#include "jax_device.h"
#include "pjrt.h"
#include "status.h"
#include "target_args.h"

/* Frees the buffers of the last device-ordered call once the sampler's stream is past them,
 * and returns the first error a program left on its outputs (a queued run reports none on the
 * host). Where the wait itself fails the buffers are left unfreed: the device may still use them. */
static int release_retired(jax_target_t *jax) {
  if (jax->n_retired == 0) return DS_OK;
  int status = jax_device_mark_wait(jax->retired_mark);
  jax->retired_mark = NULL;
  if (status != DS_OK) {
    jax->n_retired = 0;
    return status;
  }
  for (int i = 0; i < jax->n_retired; ++i) {
    if (status == DS_OK && jax->retired_output[i])
      status = pjrt_buffer_status(jax->runtime, jax->retired[i], "a trajectory program's run");
    pjrt_buffer_free(jax->runtime, jax->retired[i]);
  }
  jax->n_retired = 0;
  return status;
}

/* Keeps `buffer` until release_retired; where the list cannot grow, waits for `stream` and
 * frees it at once. */
static int retire(jax_target_t *jax, PJRT_Buffer *buffer, int output, void *stream) {
  if (!buffer) return DS_OK;
  if (jax->n_retired == jax->retired_capacity) {
    const int capacity = jax->retired_capacity ? 2 * jax->retired_capacity : 64;
    PJRT_Buffer **grown = realloc(jax->retired, (size_t)capacity * sizeof *grown);
    if (grown) jax->retired = grown;
    unsigned char *flags = grown ? realloc(jax->retired_output, (size_t)capacity) : NULL;
    if (flags) jax->retired_output = flags;
    if (!grown || !flags) {
      const int synced = jax_device_sync(stream);
      if (synced == DS_OK) pjrt_buffer_free(jax->runtime, buffer);
      return synced == DS_OK ? DS_FAIL_ALLOC("the trajectory's buffer list", (size_t)capacity * sizeof *grown) : synced;
    }
    jax->retired_capacity = capacity;
  }
  jax->retired_output[jax->n_retired] = (unsigned char)output;
  jax->retired[jax->n_retired++] = buffer;
  return DS_OK;
}


/* ---- running the programs ---- */

/* The data buffers every call passes, made once. */
static int make_data_buffers(jax_target_t *jax) {
  for (int d = 0; d < jax->n_data; ++d) {
    jax_data_t *input = &jax->data[d];
    void *memory = input->host;
    if (jax->on_gpu) {
      DS_TRY(jax_device_alloc(&input->device, input->bytes));
      DS_TRY(jax_device_upload(input->device, input->host, input->bytes));
      memory = input->device;
    }
    DS_TRY(pjrt_view(jax->runtime, memory, input->dims, input->rank, input->type, &input->buffer));
  }
  return DS_OK;
}

/* Runs `program` on one block: x [block, dim] and, for logp_grad, the places lp [block] and
 * grad [block, dim] it may write its outputs to (donated); outputs land at outs[o] (copied
 * there when the plugin put them elsewhere) for the first `rows` rows. All pointers are in the
 * client's memory (device or aligned host). */
static int run_block(jax_target_t *jax, const jax_program_t *program, float *x, int64_t rows, float **outs,
                     const int64_t *widths, int n_outs, int donate) {
  PJRT_Buffer *args[3 + JAX_MAX_DATA] = {NULL};
  PJRT_Buffer *results[2] = {NULL, NULL};
  const int64_t x_dims[2] = {program->block, jax->dim};
  int n_args = 0;
  int status = pjrt_view(jax->runtime, x, x_dims, 2, PJRT_ELEMENT_F32, &args[n_args++]);
  for (int o = 0; donate && status == DS_OK && o < n_outs; ++o) {
    const int64_t dims[2] = {program->block, widths[o]};
    status = pjrt_view(jax->runtime, outs[o], dims, widths[o] ? 2 : 1, PJRT_ELEMENT_F32, &args[n_args++]);
  }
  for (int d = 0; d < jax->n_data; ++d) args[n_args++] = jax->data[d].buffer;
  if (status == DS_OK) status = pjrt_execute(jax->runtime, program->program, args, (size_t)n_args, results, (size_t)n_outs);
  for (int o = 0; status == DS_OK && o < n_outs; ++o) {
    void *memory = NULL;
    status = pjrt_buffer_memory(jax->runtime, results[o], &memory);
    if (status != DS_OK || memory == outs[o]) continue;
    const size_t bytes = (size_t)(rows * (widths[o] ? widths[o] : 1)) * sizeof(float);
    status = jax->on_gpu ? jax_device_copy(outs[o], memory, bytes)
                         : pjrt_buffer_to_host(jax->runtime, results[o], outs[o],
                                               (size_t)(program->block * (widths[o] ? widths[o] : 1)) * sizeof(float));
  }
  for (int o = 0; o < n_outs; ++o) pjrt_buffer_free(jax->runtime, results[o]);
  for (int a = 0; a < n_args - jax->n_data; ++a) pjrt_buffer_free(jax->runtime, args[a]);
  return status;
}

/* Rows [n, width] moved between caller memory and a block's scratch, on the client's side. */
static int copy_rows(const jax_target_t *jax, void *dst, const void *src, int64_t n, int64_t width) {
  const size_t bytes = (size_t)(n * width) * sizeof(float);
  if (jax->on_gpu) return jax_device_copy(dst, src, bytes);
  memcpy(dst, src, bytes);
  return DS_OK;
}

/* 1 when every pointer given may be viewed in place: XLA takes device buffers 16-byte aligned,
 * and the CPU plugin's views need JAX_ALIGN. */
static int aligned_rows(const jax_target_t *jax, const void *a, const void *b, const void *c, const void *d,
                        const void *e) {
  const uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e;
  return any % (jax->on_gpu ? 16 : JAX_ALIGN) == 0;
}

/* logp_grad over rows x [n, dim] in the client's memory, outputs there too. Whole blocks run
 * in place (on the CPU only when aligned); the rest through scratch (x_pad, lp_pad, grad_pad:
 * one block each). */
static int logp_grad_rows(jax_target_t *jax, const float *x, int64_t n, float *logp, float *grad, float *x_pad,
                          float *lp_pad, float *grad_pad) {
  const int64_t block = jax->logp_grad.block, dim = jax->dim;
  const int64_t widths[2] = {0, dim};
  for (int64_t first = 0; first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    float *x_rows = (float *)x + first * dim, *lp_rows = logp + first, *grad_rows = grad + first * dim;
    const int aligned = aligned_rows(jax, x_rows, lp_rows, grad_rows, NULL, NULL);
    if (rows == block && aligned) {
      float *outs[2] = {lp_rows, grad_rows};
      DS_TRY(run_block(jax, &jax->logp_grad, x_rows, rows, outs, widths, 2, 1));
      continue;
    }
    DS_TRY(copy_rows(jax, x_pad, x_rows, rows, dim));
    float *outs[2] = {lp_pad, grad_pad};
    DS_TRY(run_block(jax, &jax->logp_grad, x_pad, rows, outs, widths, 2, 1));
    DS_TRY(copy_rows(jax, lp_rows, lp_pad, rows, 1));
    DS_TRY(copy_rows(jax, grad_rows, grad_pad, rows, dim));
  }
  return DS_OK;
}

/* The host entry. On the CPU, from several threads at once, each with its own scratch; on a
 * GPU (for the host's own uses: checks of starts), staged through the device scratch. */
static int jax_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  jax_target_t *jax = self;
  const int64_t block = jax->logp_grad.block, dim = jax->dim;
  if (!jax->on_gpu) {
    float *x_pad = jax_aligned_zeroed((size_t)(block * dim) * sizeof(float));
    float *lp_pad = jax_aligned_zeroed((size_t)block * sizeof(float));
    float *grad_pad = jax_aligned_zeroed((size_t)(block * dim) * sizeof(float));
    int status = x_pad && lp_pad && grad_pad ? logp_grad_rows(jax, x, n, logp, grad, x_pad, lp_pad, grad_pad)
                                             : DS_FAIL_ALLOC("a block of rows", (size_t)(block * dim) * 8);
    free(x_pad);
    free(lp_pad);
    free(grad_pad);
    return status == DS_OK ? 0 : 1;
  }
  pthread_mutex_lock(&jax->lock);
  int status = DS_OK;
  for (int64_t first = 0; status == DS_OK && first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    status = jax_device_upload(jax->scratch_x, x + first * dim, (size_t)(rows * dim) * sizeof(float));
    float *outs[2] = {jax->scratch_lp, jax->scratch_grad};
    const int64_t widths[2] = {0, dim};
    if (status == DS_OK) status = run_block(jax, &jax->logp_grad, jax->scratch_x, rows, outs, widths, 2, 1);
    if (status == DS_OK) status = jax_device_download(logp + first, jax->scratch_lp, (size_t)rows * sizeof(float));
    if (status == DS_OK)
      status = jax_device_download(grad + first * dim, jax->scratch_grad, (size_t)(rows * dim) * sizeof(float));
  }
  pthread_mutex_unlock(&jax->lock);
  return status == DS_OK ? 0 : 1;
}

/* The device entry: x, logp and grad in GPU memory, ordered after `stream`'s work by a wait on
 * the host (the programs run on XLA's own stream and are done when this returns). */
static int jax_logp_grad_cuda(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream) {
  jax_target_t *jax = self;
  pthread_mutex_lock(&jax->lock);
  int status = jax_device_sync(stream);
  if (status == DS_OK)
    status = logp_grad_rows(jax, x, n, logp, grad, jax->scratch_x, jax->scratch_lp, jax->scratch_grad);
  pthread_mutex_unlock(&jax->lock);
  return status == DS_OK ? 0 : 1;
}

/* One block of a trajectory program: every pointer in device memory, [block] rows each (inv
 * [dim] when the metric is shared). The outputs land in q, p, grad and lp (donated; copied
 * there when XLA put them elsewhere). */
static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int trajectory_block(jax_target_t *jax, const jax_program_t *program, float *q, float *p, float *grad,
                            float *lp, float *eps, float *inv, int shared, int first, void *stream, int queued) {
  const double start = now_seconds();
  const int64_t block = program->block, dim = jax->dim;
  const int64_t rows_dims[2] = {block, dim}, inv_dims[2] = {block, dim}, shared_dims[1] = {dim};
  float *outs[4] = {q, p, grad, lp};
  PJRT_Buffer *args[7 + JAX_MAX_DATA] = {NULL};
  PJRT_Buffer *results[4] = {NULL};
  /* Queued: the views are defined on PJRT's stream once it reaches the sampler's work so far. */
  const intptr_t ready = queued ? jax->ready_stream : 0;
  int status = queued ? jax_device_stream_after((void *)ready, stream) : DS_OK, n_args = 0;
  for (int o = 0; o < 4 && status == DS_OK; ++o)
    status = pjrt_view_on(jax->runtime, outs[o], rows_dims, o < 3 ? 2 : 1, PJRT_ELEMENT_F32, ready, &args[n_args++]);
  if (status == DS_OK) status = pjrt_view_on(jax->runtime, eps, rows_dims, 1, PJRT_ELEMENT_F32, ready, &args[n_args++]);
  if (status == DS_OK)
    status = pjrt_view_on(jax->runtime, inv, shared ? shared_dims : inv_dims, shared ? 1 : 2, PJRT_ELEMENT_F32, ready,
                          &args[n_args++]);
  if (status == DS_OK)
    status = pjrt_view_on(jax->runtime, jax->first_device[first ? 0 : 1], NULL, 0, PJRT_ELEMENT_S32, ready,
                          &args[n_args++]);
  const int own = n_args;
  for (int d = 0; d < jax->n_data; ++d) args[n_args++] = jax->data[d].buffer;
  const double viewed = now_seconds();
  if (status == DS_OK)
    status = pjrt_execute_queued(jax->runtime, program->program, args, (size_t)n_args, results, 4, !queued);
  const double ran = now_seconds();
  jax->stat_views_s += viewed - start;
  jax->stat_run_s += ran - viewed;
  for (int o = 0; o < 4 && status == DS_OK; ++o) {
    /* Queued: the sampler's stream goes on once the program has defined the output. */
    if (queued) status = pjrt_wait_on_stream(jax->runtime, results[o], (intptr_t)stream);
    void *memory = NULL;
    if (status == DS_OK) status = pjrt_buffer_memory(jax->runtime, results[o], &memory);
    if (status == DS_OK && memory != outs[o]) {
      const size_t bytes = (size_t)(block * (o < 3 ? dim : 1)) * sizeof(float);
      status = queued ? jax_device_copy_on(outs[o], memory, bytes, stream) : jax_device_copy(outs[o], memory, bytes);
      jax->stat_moved_outputs++;
      jax->stat_moved_bytes += (int64_t)bytes;
    }
  }
  jax->stat_runs++;
  /* Queued, the buffers wait for release_retired (the programs may still use them). */
  for (int i = 0; i < 4 + own; ++i) {
    PJRT_Buffer *buffer = i < 4 ? results[i] : args[i - 4];
    if (!queued) {
      pjrt_buffer_free(jax->runtime, buffer);
      continue;
    }
    const int kept = retire(jax, buffer, i < 4, stream);
    if (status == DS_OK) status = kept;
  }
  jax->stat_views_s += now_seconds() - ran;
  return status;
}

/* The programs that make a trajectory of n_steps: the largest first (10 = 8 + 2), each
 * compiled when first needed. Fills order [JAX_TRAJECTORY_MAX * 64]; returns its length or -1. */
static int trajectory_plan(jax_target_t *jax, int metric, int n_steps, jax_trajectory_t **order, int capacity) {
  int count = 0;
  for (int k = jax->n_trajectory[metric] - 1; k >= 0 && n_steps > 0; --k) {
    jax_trajectory_t *program = &jax->trajectory[metric][k];
    while (n_steps >= program->steps) {
      if (count == capacity) return -1;
      if (!program->program.program &&
          pjrt_compile(jax->runtime, program->code, program->size, program->label, &program->program.program) != DS_OK)
        return -1;
      order[count++] = program;
      n_steps -= program->steps;
    }
  }
  return count;
}

/* backend.h's leapfrog_cuda: whole blocks in place, the last through the scratch. */
static int jax_leapfrog_cuda(void *self, float *q, float *p, float *grad, float *logp, const float *step_size,
                             const float *inv_metric, int shared_metric, int n_steps, int64_t n, void *stream) {
  jax_target_t *jax = self;
  const int metric = shared_metric ? 0 : 1;
  const int64_t block = jax->trajectory[metric][0].program.block, dim = jax->dim;
  jax_trajectory_t *order[JAX_TRAJECTORY_MAX * 64];
  pthread_mutex_lock(&jax->lock);
  const double start = now_seconds();
  /* Programs are compiled when first needed: their time is not the trajectory's. */
  const int calls = trajectory_plan(jax, metric, n_steps, order, JAX_TRAJECTORY_MAX * 64);
  const double planned = now_seconds();
  jax->stat_compile_s += planned - start;
  /* Ordered on the device when every block is whole and viewed in place (a staged block's
   * copies wait on the host). */
  int queued = jax->stream_order && n % block == 0;
  for (int64_t first = 0; queued && first < n; first += block)
    queued = aligned_rows(jax, q + first * dim, p + first * dim, grad + first * dim, logp + first,
                          (float *)step_size + first) &&
             aligned_rows(jax, (float *)inv_metric + (shared_metric ? 0 : first * dim), NULL, NULL, NULL, NULL);
  int status = release_retired(jax);
  if (status == DS_OK)
    status = calls < 0 ? ds_fail(DS_ERR_TARGET, "%s: no trajectory programs for %d steps", jax->what, n_steps)
                       : queued ? DS_OK : jax_device_sync(stream);
  jax->stat_sync_s += now_seconds() - planned;
  for (int64_t first = 0; status == DS_OK && first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    float *q_rows = q + first * dim, *p_rows = p + first * dim, *grad_rows = grad + first * dim;
    float *lp_rows = logp + first, *eps_rows = (float *)step_size + first;
    float *inv_rows = (float *)inv_metric + (shared_metric ? 0 : first * dim);
    float *state[4] = {q_rows, p_rows, grad_rows, lp_rows}, *eps = eps_rows, *inv = inv_rows;
    const int staged = rows < block || !aligned_rows(jax, q_rows, p_rows, grad_rows, lp_rows, eps_rows) ||
                       !aligned_rows(jax, inv_rows, NULL, NULL, NULL, NULL);
    if (staged) {
      jax->stat_staged_blocks++;
      state[0] = jax->scratch_x, state[1] = jax->scratch_p, state[2] = jax->scratch_grad, state[3] = jax->scratch_lp;
      eps = jax->scratch_eps;
      inv = shared_metric ? inv_rows : jax->scratch_inv;
      status = copy_rows(jax, state[0], q_rows, rows, dim);
      if (status == DS_OK) status = copy_rows(jax, state[1], p_rows, rows, dim);
      if (status == DS_OK) status = copy_rows(jax, state[2], grad_rows, rows, dim);
      if (status == DS_OK) status = copy_rows(jax, eps, eps_rows, rows, 1);
      if (status == DS_OK && !shared_metric) status = copy_rows(jax, inv, inv_rows, rows, dim);
    }
    for (int c = 0; c < calls && status == DS_OK; ++c)
      status = trajectory_block(jax, &order[c]->program, state[0], state[1], state[2], state[3], eps, inv,
                                shared_metric, c == 0, stream, queued);
    if (staged) {
      if (status == DS_OK) status = copy_rows(jax, q_rows, state[0], rows, dim);
      if (status == DS_OK) status = copy_rows(jax, p_rows, state[1], rows, dim);
      if (status == DS_OK) status = copy_rows(jax, grad_rows, state[2], rows, dim);
      if (status == DS_OK) status = copy_rows(jax, lp_rows, state[3], rows, 1);
    }
  }
  if (queued && jax->n_retired > 0) {
    /* Without a mark the host waits here, and the buffers may go at once. */
    const int marked = jax_device_mark(stream, &jax->retired_mark);
    if (marked != DS_OK && jax_device_sync(stream) == DS_OK) release_retired(jax);
    if (status == DS_OK) status = marked;
  }
  jax->stat_call_s += now_seconds() - planned;
  pthread_mutex_unlock(&jax->lock);
  return status == DS_OK ? 0 : 1;
}

/* The output variables of rows x [n, dim] (float64 from the sampler's float32 state, so exact
 * in float32), widened from the program's float32. */
static int jax_constrain(void *self, const double *x, int64_t n, const uint64_t *keys, double *out) {
  (void)keys; /* the programs draw no random numbers */
  jax_target_t *jax = self;
  const int64_t block = jax->constrain.block, dim = jax->dim, width = jax->constrained_dim;
  float *x_rows = jax_aligned_zeroed((size_t)(block * dim) * sizeof(float));
  float *values = jax_aligned_zeroed((size_t)(block * width) * sizeof(float));
  int status = x_rows && values ? DS_OK : DS_FAIL_ALLOC("a block of rows", (size_t)(block * (dim + width)) * 4);
  if (jax->on_gpu) pthread_mutex_lock(&jax->lock);
  for (int64_t first = 0; status == DS_OK && first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    for (int64_t e = 0; e < rows * dim; ++e) x_rows[e] = (float)x[first * dim + e];
    const int64_t widths[1] = {width};
    if (jax->on_gpu) {
      status = jax_device_upload(jax->scratch_x, x_rows, (size_t)(rows * dim) * sizeof(float));
      float *outs[1] = {jax->scratch_out};
      if (status == DS_OK) status = run_block(jax, &jax->constrain, jax->scratch_x, rows, outs, widths, 1, 0);
      if (status == DS_OK) status = jax_device_download(values, jax->scratch_out, (size_t)(rows * width) * 4);
    } else {
      float *outs[1] = {values};
      status = run_block(jax, &jax->constrain, x_rows, rows, outs, widths, 1, 0);
    }
    for (int64_t e = 0; status == DS_OK && e < rows * width; ++e) out[first * width + e] = (double)values[e];
  }
  if (jax->on_gpu) pthread_mutex_unlock(&jax->lock);
  free(x_rows);
  free(values);
  return status == DS_OK ? 0 : 1;
}

static void jax_destroy(void *self) {
  jax_target_t *jax = self;
  if (!jax) return;
  const char *stats = getenv("DSAMPLER_JAX_STATS");
  if (stats && stats[0] == '1' && jax->stat_runs > 0)
    fprintf(stderr, "%s: %lld trajectory program runs, %lld outputs not in place (%.3g GB copied back), %lld blocks "
            "staged; host ms a run: %.3f in the programs (dispatch to completion), %.3f views; ms in all: %.1f "
            "calls, %.1f waiting for the sampler's stream, %.1f compiling trajectory programs\n", jax->what,
            (long long)jax->stat_runs,
            (long long)jax->stat_moved_outputs, (double)jax->stat_moved_bytes / 1e9, (long long)jax->stat_staged_blocks,
            1e3 * jax->stat_run_s / (double)jax->stat_runs, 1e3 * jax->stat_views_s / (double)jax->stat_runs,
            1e3 * jax->stat_call_s, 1e3 * jax->stat_sync_s, 1e3 * jax->stat_compile_s);
  if (jax->runtime) {
    release_retired(jax);
    free(jax->retired);
    free(jax->retired_output);
    for (int d = 0; d < jax->n_data; ++d) pjrt_buffer_free(jax->runtime, jax->data[d].buffer);
    pjrt_program_free(jax->runtime, jax->logp_grad.program);
    pjrt_program_free(jax->runtime, jax->constrain.program);
    for (int m = 0; m < 2; ++m)
      for (int k = 0; k < jax->n_trajectory[m]; ++k) pjrt_program_free(jax->runtime, jax->trajectory[m][k].program.program);
    pjrt_close(jax->runtime);
  }
  for (int d = 0; d < jax->n_data; ++d) {
    free(jax->data[d].host);
    jax_device_free(jax->data[d].device);
  }
  jax_device_free(jax->scratch_x);
  jax_device_free(jax->scratch_lp);
  jax_device_free(jax->scratch_grad);
  jax_device_free(jax->scratch_out);
  jax_device_free(jax->scratch_p);
  jax_device_free(jax->scratch_eps);
  jax_device_free(jax->scratch_inv);
  jax_device_free(jax->first_device[0]);
  jax_device_free(jax->first_device[1]);
  for (int m = 0; m < 2; ++m)
    for (int k = 0; k < JAX_TRAJECTORY_MAX; ++k) free(jax->trajectory[m][k].code);
  for (int v = 0; jax->vars && v < jax->n_vars; ++v) free((char *)jax->vars[v].name);
  free(jax->vars);
  pthread_mutex_destroy(&jax->lock);
  free(jax);
}

/* ---- making the target ---- */

/* Scratch for a padded block (GPU clients only: CPU calls bring their own). */
static int make_scratch(jax_target_t *jax) {
  if (!jax->on_gpu) return DS_OK;
  const int64_t block = jax->logp_grad.block > jax->constrain.block ? jax->logp_grad.block : jax->constrain.block;
  DS_TRY(jax_device_alloc((void **)&jax->scratch_x, (size_t)(block * jax->dim) * sizeof(float)));
  DS_TRY(jax_device_alloc((void **)&jax->scratch_lp, (size_t)block * sizeof(float)));
  DS_TRY(jax_device_alloc((void **)&jax->scratch_grad, (size_t)(block * jax->dim) * sizeof(float)));
  DS_TRY(jax_device_alloc((void **)&jax->scratch_out,
                          (size_t)(jax->constrain.block * (jax->constrained_dim ? jax->constrained_dim : 1)) *
                              sizeof(float)));
  const int64_t trajectory = jax->n_trajectory[0] ? jax->trajectory[0][0].program.block : 0;
  if (trajectory > 0) {
    /* q, grad and logp of a padded block reuse the scratch above, grown to the trajectory's block. */
    if (trajectory > block) {
      jax_device_free(jax->scratch_x);
      jax_device_free(jax->scratch_lp);
      jax_device_free(jax->scratch_grad);
      jax->scratch_x = jax->scratch_lp = jax->scratch_grad = NULL;
      DS_TRY(jax_device_alloc((void **)&jax->scratch_x, (size_t)(trajectory * jax->dim) * sizeof(float)));
      DS_TRY(jax_device_alloc((void **)&jax->scratch_lp, (size_t)trajectory * sizeof(float)));
      DS_TRY(jax_device_alloc((void **)&jax->scratch_grad, (size_t)(trajectory * jax->dim) * sizeof(float)));
    }
    DS_TRY(jax_device_alloc((void **)&jax->scratch_p, (size_t)(trajectory * jax->dim) * sizeof(float)));
    DS_TRY(jax_device_alloc((void **)&jax->scratch_eps, (size_t)trajectory * sizeof(float)));
    DS_TRY(jax_device_alloc((void **)&jax->scratch_inv, (size_t)(trajectory * jax->dim) * sizeof(float)));
    /* Apart, each at an allocation's alignment: XLA refuses a buffer that is not 16-byte aligned. */
    for (int k = 0; k < 2; ++k) {
      const int32_t first = k == 0;
      DS_TRY(jax_device_alloc((void **)&jax->first_device[k], sizeof first));
      DS_TRY(jax_device_upload(jax->first_device[k], &first, sizeof first));
    }
    /* The default where PJRT has the stream extension (the same bits as the host-ordered
     * path, and 0.3-0.6 ms an iteration less at 2^20 chains: tests/bench/BENCHMARKS.md);
     * DSAMPLER_JAX_STREAM_ORDER=0 makes the host wait for each program instead. */
    const char *order = getenv("DSAMPLER_JAX_STREAM_ORDER");
    if (!(order && order[0] == '0') && pjrt_has_streams(jax->runtime)) {
      DS_TRY(pjrt_ready_stream(jax->runtime, &jax->ready_stream));
      jax->stream_order = 1;
    }
  }
  return DS_OK;
}

static int open_bundle(jax_target_t *jax, const char *folder, const char *args, MPI_Comm comm) {
  json_object *manifest = NULL;
  int status = jax_read_manifest(jax, folder, &manifest);
  if (status == DS_OK) status = jax_read_vars(jax, manifest);
  if (status == DS_OK) status = jax_read_data(jax, folder, manifest);
  char plugin[JAX_PATH_MAX];
  if (status == DS_OK) status = jax_find_plugin(jax, args, comm, plugin, sizeof plugin);
  if (status == DS_OK) status = pjrt_open(plugin, jax->on_gpu, jax->on_gpu ? jax->on_gpu - 1 : 0, jax->what,
                                          &jax->runtime);
  if (status == DS_OK && jax->on_gpu && strcmp(pjrt_platform(jax->runtime), "cpu") == 0)
    status = ds_fail(DS_ERR_INPUT, "%s: the plugin %s runs on the CPU, and this run's arrays are on a GPU (give the "
                     "CUDA plugin, or --backend cpu)", jax->what, plugin);
  if (status == DS_OK && !jax->on_gpu && strcmp(pjrt_platform(jax->runtime), "cpu") != 0)
    status = ds_fail(DS_ERR_INPUT, "%s: the plugin %s runs on '%s', and this run's arrays are on the CPU (give a CPU "
                     "plugin: %s, or --backend cuda)", jax->what, plugin, pjrt_platform(jax->runtime),
                     JAX_PLUGIN_HINT_CPU);
  if (status == DS_OK) status = jax_read_program(jax, folder, manifest, "logp_grad", &jax->logp_grad);
  if (status == DS_OK && jax->n_vars > 0) status = jax_read_program(jax, folder, manifest, "constrain", &jax->constrain);
  /* DSAMPLER_JAX_NO_TRAJECTORY=1: a gradient call per leapfrog step (for measurements). */
  const char *no_trajectory = getenv("DSAMPLER_JAX_NO_TRAJECTORY");
  if (status == DS_OK && jax->on_gpu && !(no_trajectory && no_trajectory[0] == '1'))
    status = jax_read_trajectories(jax, folder, manifest);
  if (status == DS_OK) status = make_data_buffers(jax);
  if (status == DS_OK) status = make_scratch(jax);
  json_object_put(manifest);
  return status;
}

/* One block of the logp_grad program at the origin: a bundle whose programs, block and data do
 * not agree fails here, naming the input, before anything is sampled. */
static int probe(jax_target_t *jax) {
  const int64_t rows = 1;
  float *x = calloc((size_t)jax->dim, sizeof *x), *grad = calloc((size_t)jax->dim, sizeof *grad), logp = 0.0f;
  int status = x && grad ? DS_OK : DS_FAIL_ALLOC("a probe row", (size_t)jax->dim * 8);
  if (status == DS_OK && jax_logp_grad(jax, x, rows, &logp, grad) != 0)
    status = ds_fail(DS_ERR_INPUT, "%s: the bundle's logp_grad program does not run on its inputs", jax->what);
  free(x);
  free(grad);
  return status;
}

int jax_target_create(const char *bundle, const char *args, const char *data_path, int device, MPI_Comm comm,
                      dsampler_target *out, target_extra_t *extra) {
  memset(out, 0, sizeof *out);
  memset(extra, 0, sizeof *extra);
  jax_target_t *jax = calloc(1, sizeof *jax);
  if (!jax) return DS_FAIL_ALLOC("a JAX target", sizeof *jax);
  pthread_mutex_init(&jax->lock, NULL);
  snprintf(jax->what, sizeof jax->what, "--target jax:%s", bundle);
  /* on_gpu holds the ordinal + 1, so that 0 means the CPU. */
  jax->on_gpu = device >= 0 ? device + 1 : 0;
  int status = DS_OK;
  if (data_path && data_path[0])
    status = ds_fail(DS_ERR_INPUT, "--data %s: a JAX bundle carries its data (export it again with dsampler-export "
                     "--data)", data_path);
  if (status == DS_OK && strlen(bundle) >= JAX_PATH_MAX)
    status = ds_fail(DS_ERR_INPUT, "--target jax:...: the bundle's path is longer than %d bytes", JAX_PATH_MAX - 1);
  static const char *const known[] = {"plugin", NULL};
  if (status == DS_OK) status = target_args_check(jax->what, args, known);
  if (status == DS_OK) status = open_bundle(jax, bundle, args, comm);
  if (status == DS_OK) status = probe(jax);
  if (status != DS_OK) {
    jax_destroy(jax);
    return status;
  }
  jax->on_gpu = jax->on_gpu ? 1 : 0;
  char folder[JAX_PATH_MAX];
  snprintf(folder, sizeof folder, "%s", bundle);
  while (strlen(folder) > 1 && folder[strlen(folder) - 1] == '/') folder[strlen(folder) - 1] = '\0';
  const char *base = strrchr(folder, '/') ? strrchr(folder, '/') + 1 : folder;
  snprintf(jax->name, sizeof jax->name, "jax:%.240s", base);

  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = jax->name;
  out->var_name = "x";
  out->dim = jax->dim;
  out->self = jax;
  out->logp_grad = jax_logp_grad;
  out->logp_grad_cuda = jax->on_gpu ? jax_logp_grad_cuda : NULL;
  /* Both metrics' programs, or neither: the backend picks by the metric of the moment. */
  extra->leapfrog_cuda = jax->n_trajectory[0] > 0 ? jax_leapfrog_cuda : NULL;
  extra->leapfrog_self = jax;
  out->destroy = jax_destroy;
  out->n_vars = jax->n_vars;
  out->vars = jax->vars;
  out->constrained_dim = jax->constrained_dim;
  out->constrain = jax->n_vars > 0 ? jax_constrain : NULL;
  /* A call costs a program's launch: whole blocks from one thread (XLA has its own). */
  extra->constrain_rows_per_call = jax->n_vars > 0 ? jax->constrain.block : 0;
  return DS_OK;
}
