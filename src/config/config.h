/* config.h: the run's configuration: one table of options serves the command line, the
 * --config file (the same keys, read by config.c), --help, and the attributes stored in the
 * output, so the four never disagree. */
#ifndef DSAMPLER_CONFIG_H
#define DSAMPLER_CONFIG_H

#include <stdint.h>
#include <stdio.h>

typedef enum { ALGO_NONE = 0, ALGO_HMC, ALGO_SVGD } algorithm_t;

#define CONFIG_PATH_MAX 4096

/* The options that take one of a few words: each parsed once into its enum (the words in
 * config.c's option table, in the order of these values). */
typedef enum { CONFIG_ADAPT_PER_CHAIN, CONFIG_ADAPT_POOLED, CONFIG_ADAPT_NONE } config_adapt_t;
typedef enum { CONFIG_METRIC_DIAG, CONFIG_METRIC_UNIT, CONFIG_METRIC_DENSE, CONFIG_METRIC_AUTO } config_metric_t;
typedef enum { CONFIG_METRIC_FIT_VARIANCE, CONFIG_METRIC_FIT_FISHER } config_metric_fit_t;
typedef enum { CONFIG_STUCK_RESTART, CONFIG_STUCK_KEEP } config_stuck_t;
typedef enum { CONFIG_UPDATE_SGD, CONFIG_UPDATE_ADAGRAD, CONFIG_UPDATE_ADAM } config_update_t;
typedef enum { CONFIG_KERNEL_RBF, CONFIG_KERNEL_IMQ } config_kernel_t;
typedef enum { CONFIG_KSD_KERNEL_RUN, CONFIG_KSD_KERNEL_IMQ } config_ksd_kernel_t;
typedef enum { CONFIG_BACKEND_AUTO, CONFIG_BACKEND_CPU, CONFIG_BACKEND_CUDA } config_backend_t;
typedef enum { CONFIG_COMM_AUTO, CONFIG_COMM_NCCL, CONFIG_COMM_MPI } config_comm_t;

typedef struct config {
  algorithm_t algorithm;
  char target[256];
  char target_args[1024];
  int64_t dim;
  int64_t chains;      /* HMC */
  int64_t chains_per_start; /* HMC: chains c share the start of chain K floor(c / K) (default 1) */
  int64_t particles;   /* SVGD */
  int64_t warmup;      /* HMC iterations before draws are kept */
  int64_t draws;       /* HMC draws kept */
  int64_t iters;       /* SVGD iterations */
  int64_t steps;       /* HMC leapfrog steps L */
  double target_accept; /* HMC: dual averaging's delta; 0: auto (adapt.h) */
  config_adapt_t adapt;   /* HMC */
  config_metric_t metric; /* HMC */
  config_metric_fit_t metric_fit; /* HMC: the diagonal metric from the draws' variance or (fisher) draws and gradients */
  double jitter;       /* HMC: step size scaled by 1 + jitter * U(-1, 1) each iteration */
  int save_warmup;     /* HMC: write warmup_posterior and warmup_sample_stats */
  config_stuck_t stuck;   /* HMC: chains that never moved in the tail of warmup */
  int64_t thin;        /* HMC: keep sampling iterations 0, thin, 2 thin, ... (default 1) */
  int64_t output_chains; /* HMC: draws written for global chains [0, output_chains); 0: all */
  double step_size;
  uint64_t seed;
  config_update_t update; /* SVGD */
  char bandwidth[64];  /* SVGD: median | a positive number */
  int64_t batch_size;  /* SVGD: data rows per gradient (logistic), drawn each iteration; 0: all */
  double bandwidth_value; /* > 0 when fixed */
  config_kernel_t kernel; /* SVGD */
  double imq_c, imq_beta; /* SVGD: the IMQ kernel (c^2 + D / h)^beta */
  int64_t ksd_every;   /* SVGD: kernel Stein discrepancy every K iterations; 0: after the last only */
  config_ksd_kernel_t ksd_kernel; /* SVGD: the update's kernel, or IMQ at bandwidth 1 */
  int64_t save_every;  /* SVGD: particle snapshots every K iterations; 0: none */
  char init[CONFIG_PATH_MAX];
  char data[CONFIG_PATH_MAX]; /* the target's dataset (--data), passed to it as data=FILE */
  char out[CONFIG_PATH_MAX];
  config_backend_t backend;
  config_comm_t comm;
  char config_file[CONFIG_PATH_MAX];
  int quiet;
  int timing; /* --timing: timing.h's table at the end */
  int64_t checkpoint_every;  /* iterations between checkpoints; 0: only on a signal */
  char checkpoint_dir[CONFIG_PATH_MAX]; /* default: the output's name with .ckpt */
  int64_t keep;              /* checkpoints kept */
  double call_timeout;       /* seconds a call into a plugin or Stan model may take (target_deadline.h) */
} config_t;

/* Parses `dsampler <hmc|svgd> [options]` (argv[0] is the program, argv[1] the command) and
 * validates the result. Returns DS_OK, DS_HELP after printing help to `help_out` (may be NULL
 * on ranks that print nothing), or DS_ERR_INPUT with a message naming the input. */
int config_parse(config_t *cfg, int argc, char **argv, FILE *help_out);

/* Parses `dsampler resume WHERE [options]` over a checkpoint's configuration (the text of
 * config_write_checkpoint_text) for `algorithm`. Options that only extend the run or change where and how
 * it reports are allowed (--draws, --iters, --checkpoint-every, --checkpoint-dir, --keep,
 * --comm, --quiet, --timing, --call-timeout); any other would change the answer and is refused. */
int config_parse_resume(config_t *cfg, algorithm_t algorithm, const char *checkpoint_config, int argc, char **argv,
                        FILE *help_out);
algorithm_t config_algorithm_from_name(const char *name);

/* The options that apply to the algorithm as a checkpoint keeps them, into out[size]: "key =
 * value" lines, '%', newline and carriage return in a value written as %25, %0A and %0D, so
 * that every path reads back exactly. DS_ERR_INPUT when they do not fit. */
int config_write_checkpoint_text(const config_t *cfg, char *out, size_t size);
/* Calls visit(key, value) for each option that applies to the algorithm. */
void config_for_each(const config_t *cfg, void (*visit)(void *user, const char *key,
                                                          const char *value), void *user);

const char *config_algorithm_name(algorithm_t algorithm);
/* The words of --backend and --comm, as backend_create and comm_select_transport take them. */
const char *config_backend_name(config_backend_t backend);
const char *config_comm_name(config_comm_t comm);
int64_t config_items(const config_t *cfg); /* chains or particles */

#endif
