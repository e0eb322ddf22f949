/* draw_writer.h: writes blocks of draws to the output while the sampler goes on: each block's
 * collective writes run on a thread of their own (the output has its own communicator), and
 * the caller waits for them before it reuses the buffers or touches HDF5 itself. Where MPI
 * was not given MPI_THREAD_MULTIPLE the writes run in the caller. */
#ifndef DSAMPLER_DRAW_WRITER_H
#define DSAMPLER_DRAW_WRITER_H

#include <stdint.h>

#include "h5out.h"

/* Groups a job writes (posterior, sample_stats, and unconstrained_posterior for a target with
 * output variables) and the variables of each (a Stan model's outputs are one each). */
enum { DRAW_WRITER_MAX_GROUPS = 3, DRAW_WRITER_MAX_VARS = 4096 };

/* One block: draws [first_draw, first_draw + count) of chains [chain_begin, + rows), from
 * buffers holding buffer_draws draws per chain; each group's variables in its order. */
typedef struct draw_writer_job {
  int n_groups;           /* groups written: groups[0 .. n_groups) */
  int groups[DRAW_WRITER_MAX_GROUPS];
  int n_vars[DRAW_WRITER_MAX_GROUPS];
  const void *data[DRAW_WRITER_MAX_GROUPS][DRAW_WRITER_MAX_VARS];
  int64_t chain_begin, rows, first_draw, count, buffer_draws;
} draw_writer_job_t;

typedef struct draw_writer draw_writer_t;

int draw_writer_create(draw_writer_t **out, h5out_t *file);
/* Starts the job (waiting for the one before). Collective: every rank starts every job. */
int draw_writer_start(draw_writer_t *w, const draw_writer_job_t *job);
/* Waits for the job in flight; its status, the same on every rank. */
int draw_writer_wait(draw_writer_t *w);
/* Waits, then frees. */
int draw_writer_free(draw_writer_t *w);

#endif
