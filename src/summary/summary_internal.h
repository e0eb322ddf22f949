/* summary_internal.h: what summary.c (the table and the command) and summary_read.c (reading an
 * output file and computing its columns, collectively) share: the result of a file's summary. */
#ifndef DSAMPLER_SUMMARY_INTERNAL_H
#define DSAMPLER_SUMMARY_INTERNAL_H

#include <stdint.h>

#include "comm.h"
#include "diagnostics.h"
#include "lp_outliers.h"

/* Vehtari et al. (2021): trust R-hat below 1.01 and ESS above 400. */
#define SUMMARY_RHAT_WARN 1.01
#define SUMMARY_ESS_WARN 400.0
#define SUMMARY_MAX_VARS 4096
/* Rows travel and print as arrays of DIAG_N_STATS doubles. */
_Static_assert(sizeof(diag_stats_t) == DIAG_N_STATS * sizeof(double), "diag_stats_t is DIAG_N_STATS doubles");
#define SUMMARY_NAME_LEN 256

/* Axes a variable may have after chain and draw (a Stan model's matrix: 2, its arrays more). */
#define SUMMARY_MAX_AXES 8

typedef struct summary_var {
  char name[SUMMARY_NAME_LEN];
  int has_dim;       /* [chain, draw, dim...] rather than [chain, draw] */
  int n_axes;        /* axes after chain and draw */
  int64_t shape[SUMMARY_MAX_AXES];
  int64_t n_params;  /* the product of shape, or 1; the ranks share them in C order */
} summary_var_t;

/* Every chain's moments (group `moments`, written by HMC runs): a classic R-hat over all
 * chains, also those whose draws the output does not hold (--output-chains). */
enum { SUMMARY_FROZEN_NAMED = 8 };

typedef struct summary_moments {
  int64_t chains;       /* 0: the file has no moments */
  double *mean, *sd, *r_hat; /* rank 0: [n_rows] */
  int64_t frozen;       /* chains whose draws never changed (variance 0 in every coordinate) */
  int64_t frozen_ids[SUMMARY_FROZEN_NAMED]; /* the first of them, -1 past the count */
} summary_moments_t;

/* Chains whose lp (sample_stats/lp) sits far below the others' (lp_outliers.h). */
typedef struct summary_lp_outliers {
  int64_t count;
  int64_t ids[SUMMARY_FROZEN_NAMED];     /* the first of them, -1 past the count */
  double means[SUMMARY_FROZEN_NAMED];    /* their mean lp */
  lp_outlier_rule_t rule;
} summary_lp_outliers_t;

typedef struct summary_result {
  int64_t chains, draws;
  summary_lp_outliers_t lp_outliers;
  summary_moments_t moments;
  int64_t divergent;    /* -1: the file records none (no sample_stats/diverging) */
  int n_vars;
  summary_var_t vars[SUMMARY_MAX_VARS];
  int64_t n_rows;
  double *stats;        /* rank 0: [n_rows][DIAG_N_STATS] */
  int64_t superchain_size;   /* chains per superchain; 0: none, and no r_hat_nested column */
  const char *superchain_source; /* what set it: the file's attribute or the option */
  int64_t file_chains_per_start; /* config_chains_per_start > 1 that does not fit the posterior */
  /* SVGD output (a `ksd` group): its particles are no Markov chain; the table then shows their
   * moments and quantiles, and the kernel Stein discrepancy's first and last values. */
  int svgd;
  int64_t ksd_count, ksd_first_iteration, ksd_last_iteration;
  double ksd_first, ksd_last, ksd_last_bandwidth;
} summary_result_t;

typedef struct summary_options {
  const char *path;
  const char *csv_path;
  const char *var_name;
  int max_rows;
  int64_t superchain_size; /* --superchain-size; 0: from the file's config_chains_per_start */
} summary_options_t;

/* Reads OPTIONS->path and computes every column, gathered on rank 0 (RESULT's arrays there).
 * Collective. */
int summary_compute(comm_ctx_t *comm, const summary_options_t *options, summary_result_t *result);

#endif
