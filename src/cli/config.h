/* config.h: the run's configuration: one table of options serves the command line, the
 * --config file (the same keys, read with inih), --help, and the attributes stored in the
 * output, so the four never disagree. */
#ifndef DSAMPLER_CONFIG_H
#define DSAMPLER_CONFIG_H

#include <stdint.h>
#include <stdio.h>

typedef enum { ALGO_NONE = 0, ALGO_HMC, ALGO_SVGD } algorithm_t;

#define CONFIG_PATH_MAX 4096

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
  double target_accept; /* HMC: dual averaging's delta */
  char adapt[16];      /* HMC: per-chain | pooled | none */
  char metric[16];     /* HMC: diag | unit */
  double jitter;       /* HMC: step size scaled by 1 + jitter * U(-1, 1) each iteration */
  int save_warmup;     /* HMC: write warmup_posterior and warmup_sample_stats */
  char stuck[16];      /* HMC: restart | keep: chains that never moved in the tail of warmup */
  int64_t thin;        /* HMC: keep sampling iterations 0, thin, 2 thin, ... (default 1) */
  int64_t output_chains; /* HMC: draws written for global chains [0, output_chains); 0: all */
  double step_size;
  uint64_t seed;
  char update[16];     /* SVGD: sgd | adagrad | adam */
  char bandwidth[64];  /* SVGD: median | a positive number */
  int64_t batch_size;  /* SVGD: data rows per gradient (logistic), drawn each iteration; 0: all */
  double bandwidth_value; /* > 0 when fixed */
  char kernel[16];     /* SVGD: rbf | imq */
  double imq_c, imq_beta; /* SVGD: the IMQ kernel (c^2 + D / h)^beta */
  int64_t ksd_every;   /* SVGD: kernel Stein discrepancy every K iterations; 0: after the last only */
  char ksd_kernel[16]; /* SVGD: run (the update's kernel) | imq (bandwidth 1) */
  int64_t save_every;  /* SVGD: particle snapshots every K iterations; 0: none */
  char init[CONFIG_PATH_MAX];
  char data[CONFIG_PATH_MAX]; /* the target's dataset (--data), passed to it as data=FILE */
  char out[CONFIG_PATH_MAX];
  char backend[16];    /* auto | cpu | cuda */
  char comm[16];       /* auto | nccl | mpi */
  char config_file[CONFIG_PATH_MAX];
  int quiet;
  int64_t checkpoint_every;  /* iterations between checkpoints; 0: only on a signal */
  char checkpoint_dir[CONFIG_PATH_MAX]; /* default: the output's name with .ckpt */
  int64_t keep;              /* checkpoints kept */
} config_t;

/* Parses `dsampler <hmc|svgd> [options]` (argv[0] is the program, argv[1] the command) and
 * validates the result. Returns DS_OK, DS_HELP after printing help to `help_out` (may be NULL
 * on ranks that print nothing), or DS_ERR_INPUT with a message naming the input. */
int config_parse(config_t *cfg, int argc, char **argv, FILE *help_out);

/* Parses `dsampler resume WHERE [options]` over a checkpoint's configuration (the text of
 * config_write_checkpoint_text) for `algorithm`. Options that only extend the run or change where and how
 * it reports are allowed (--draws, --iters, --checkpoint-every, --checkpoint-dir, --keep,
 * --comm, --quiet); any other would change the answer and is refused. */
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
int64_t config_items(const config_t *cfg); /* chains or particles */

#endif
