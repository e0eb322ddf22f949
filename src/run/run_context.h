/* run_context.h: what a running algorithm holds (the communicator, this rank's backend, the
 * target, the configuration, the progress line) and the steps both algorithms share. */
#ifndef DSAMPLER_RUN_CONTEXT_H
#define DSAMPLER_RUN_CONTEXT_H

#include "backend.h"
#include "ckpt.h"
#include "comm.h"
#include "config.h"
#include "dsampler_target.h"
#include "h5out.h"
#include "progress.h"
#include "timing.h"
#include "target.h"

typedef struct run_ctx {
  comm_ctx_t *comm;
  backend_t *backend;
  const config_t *cfg;
  const dsampler_target *target;
  target_extra_t target_extra;  /* what the target offers beyond the plugin ABI (target.h) */
  progress_t progress;
  timing_t timing;              /* --timing (timing.h) */
  int64_t item_begin, item_end; /* this rank's global items */
  const char *resume_path;      /* the checkpoint to continue from, or NULL */
  const ckpt_meta_t *resume_meta;
  char run_id[64];              /* made at a fresh start, kept across resumes */
  int output_created;           /* the output did not exist before this run (rank 0 decides) */
  char inputs[CKPT_INPUTS_MAX]; /* fingerprints of the files the run reads: "what\tsize\thash\tpath"
                                 * lines (rank 0's, the same on every rank); checkpoints and the
                                 * output keep them, and a resume must find the same */
  char start_dir[4096];         /* rank 0's working folder at the run's start (checkpoints keep it) */
  char stan_model[64];          /* a Stan target's cache entry, model-<hash> ("" otherwise): the
                                 * output records it, and a resume must find the same */
} run_ctx_t;

/* Collective: 1 when any rank received a stop signal. */
int run_stop_requested(run_ctx_t *run, int *stop);
/* Collective: refuses a fresh run whose checkpoint directory holds checkpoints already. */
int run_check_checkpoint_dir(run_ctx_t *run);
/* Fills the metadata every checkpoint of this run carries. */
int run_checkpoint_meta(run_ctx_t *run, int64_t iteration, int64_t draws_written, ckpt_meta_t *meta);
/* Writes a checkpoint; rank 0 says where when the run is stopping. Collective. */
int run_write_checkpoint(run_ctx_t *run, const ckpt_meta_t *meta, const ckpt_array_t *arrays, int n_arrays,
                         const ckpt_global_t *globals, int n_globals, int stopping);
/* Reopens the output of a resumed run, checking it belongs to the checkpoint's run. */
int run_reopen_output(run_ctx_t *run, h5out_t **out);
/* Checks a checkpoint's metadata against this run; DS_ERR_CHECKPOINT when it does not fit. */
int run_check_resume_meta(run_ctx_t *run);

/* Starting positions of this rank's items into host x_local [rows, dim]: from --init, or the
 * target's initial_point, or uniform on (-2, 2] keyed by global item id (HMC with
 * --chains-per-start K: by the first chain id of the item's superchain, floor(c / K) K). A drawn
 * start whose log p or gradient (as the backend computes them) is not finite is drawn again, as
 * Stan's initialisation does, up to 100 draws keyed by (seed, item, attempt); the error names the
 * items left without one. A given start is never drawn again; non-finite values in it are an
 * input error on every rank. Collective. */
int run_initial_positions(run_ctx_t *run, int64_t n_total, float *x_local);
/* Creates the output file with the run's attributes. Collective. */
int run_open_output(run_ctx_t *run, h5out_t **out);
/* The target's output variables as the output declares them: float64, their own shapes
 * (vars and shapes [n_vars]). */
void run_output_vars(const run_ctx_t *run, h5out_var_t *vars, h5out_shape_t *shapes);
/* Writes SVGD's n particles as draws of one chain, this rank's x_host [rows, dim] at draws
 * [item_begin, + rows): to posterior/<var_name>, or, for a target with output variables, its
 * variables of each particle to posterior (keyed as HMC's draws: chain 0, draw = particle) and
 * the particles to unconstrained_posterior. The groups must not exist (svgd.c removes those of
 * an earlier end of an extended run). Collective. */
int run_write_particles(run_ctx_t *run, h5out_t *out, int64_t n, const float *x_host, int64_t rows);

#endif
