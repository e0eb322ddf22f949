/* run.h: what a running algorithm holds: the communicator, this rank's backend, the target,
 * the configuration, and the progress line; and the steps both algorithms share. */
#ifndef DSAMPLER_RUN_H
#define DSAMPLER_RUN_H

#include "backend.h"
#include "comm.h"
#include "config.h"
#include "dsampler_target.h"
#include "h5out.h"
#include "progress.h"

typedef struct run_ctx {
  comm_ctx_t *comm;
  backend_t *backend;
  const config_t *cfg;
  const dsampler_target *target;
  progress_t progress;
  int64_t item_begin, item_end; /* this rank's global items */
} run_ctx_t;

/* Runs the configured algorithm end to end. Collective. */
int run_main(comm_ctx_t *comm, const config_t *cfg);

/* Starting positions of this rank's items into host x_local [rows, dim]: from --init, or
 * uniform on (-2, 2] keyed by global item id. Non-finite values are an input error on every
 * rank. Collective. */
int run_initial_positions(run_ctx_t *run, int64_t n_total, float *x_local);
/* Creates the output file with the run's attributes. Collective. */
int run_open_output(run_ctx_t *run, h5out_t **out);

int svgd_run(run_ctx_t *run);
int hmc_run(run_ctx_t *run);

#endif
