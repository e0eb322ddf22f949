/* summary.h: `dsampler summary run.h5`: per-parameter mean, sd, MCSE, quantiles, R-hat and
 * ESS of an output file, and the same table at the end of a run. */
#ifndef DSAMPLER_SUMMARY_H
#define DSAMPLER_SUMMARY_H

#include "comm.h"

/* The `summary` command; argv[1] is "summary". Collective. */
int summary_main(comm_ctx_t *comm, int argc, char **argv);

#endif
