/* draw_writer.c: the output's writer thread (see draw_writer.h). */
#include "draw_writer.h"

#include <mpi.h>
#include <pthread.h>
#include <stdlib.h>

#include "status.h"

struct draw_writer {
  h5out_t *file;
  int threaded;
  int busy;         /* a job started and not yet waited for */
  int status;       /* the last job's */
  pthread_t thread;
  draw_writer_job_t job;
};

static int run_job(h5out_t *file, const draw_writer_job_t *job) {
  const int64_t total = job->first_draw + job->count;
  for (int g = 0; g < job->n_groups; ++g)
    DS_TRY(h5out_write_block(file, job->groups[g], total, job->chain_begin, job->rows, job->first_draw, job->count,
                             job->buffer_draws, job->data[g]));
  h5out_start_writeback(file);
  return DS_OK;
}

static void *writer_main(void *user) {
  draw_writer_t *w = user;
  w->status = run_job(w->file, &w->job);
  return NULL;
}

int draw_writer_create(draw_writer_t **out, h5out_t *file) {
  *out = calloc(1, sizeof **out);
  if (!*out) return DS_FAIL_ALLOC("the output writer", sizeof **out);
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  (*out)->file = file;
  /* Every rank must decide alike: MPI gives all ranks of a job the same thread level. */
  (*out)->threaded = level == MPI_THREAD_MULTIPLE && getenv("DSAMPLER_SYNC_WRITES") == NULL;
  return DS_OK;
}

int draw_writer_wait(draw_writer_t *w) {
  if (!w || !w->busy) return w ? w->status : DS_OK;
  if (w->threaded && pthread_join(w->thread, NULL) != 0) w->status = ds_fail(DS_ERR_INTERNAL, "the writer thread is lost");
  w->busy = 0;
  return w->status;
}

int draw_writer_start(draw_writer_t *w, const draw_writer_job_t *job) {
  DS_TRY(draw_writer_wait(w));
  w->job = *job;
  w->busy = 1;
  if (!w->threaded || pthread_create(&w->thread, NULL, writer_main, w) != 0) {
    /* In the caller: the same collective calls, in the same order, on every rank. */
    w->threaded = 0;
    w->status = run_job(w->file, &w->job);
  }
  return DS_OK;
}

int draw_writer_free(draw_writer_t *w) {
  if (!w) return DS_OK;
  int status = draw_writer_wait(w);
  free(w);
  return status;
}
