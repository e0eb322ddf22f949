/* summary.h: `dsampler summary run.h5`: per-parameter mean, sd, MCSE, quantiles, R-hat and
 * ESS of an output file, and the same table at the end of a run. */
#ifndef DSAMPLER_SUMMARY_H
#define DSAMPLER_SUMMARY_H

#include <stdio.h>

#include "comm.h"

/* The `summary` command; argv[1] is "summary". Collective. */
int summary_main(comm_ctx_t *comm, int argc, char **argv);

/* Prints the summary table of every posterior variable of `path` to `out` (used on rank 0
 * only; other ranks may pass NULL), at most max_rows parameter rows (all when max_rows <= 0),
 * followed by a line saying how many were left out. Collective: the parameters are split over
 * the ranks, which read their draws with collective parallel HDF5. */
int summary_print_file(comm_ctx_t *comm, const char *path, FILE *out, int max_rows);

#endif
