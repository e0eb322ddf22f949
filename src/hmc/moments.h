/* moments.h: per-chain running moments (Welford: the mean and the sum of squared deviations
 * m2 of n samples, kept by the backend) pooled over all chains of all ranks with exact sums,
 * so the pooled values are the same bits on any rank count. */
#ifndef DSAMPLER_MOMENTS_H
#define DSAMPLER_MOMENTS_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"

/* For each of dim coordinates, over the chains_total chains ([rows, dim] here, backend memory):
 * grand_mean = sum_c mean_c / chains_total, within = sum_c m2_c and
 * between = sum_c (mean_c - grand_mean)^2. Each chain's n samples then have the total sum of
 * squared deviations within + n between. Host outputs [dim]. Collective. */
int moments_pool(comm_ctx_t *comm, backend_t *backend, const float *mean, const float *m2, int64_t rows,
                 int64_t dim, int64_t chains_total, double *grand_mean, double *within, double *between);

/* mean[k] = sum over all chains of values[c, k] / chains_total ([rows, dim] here, backend
 * memory), exact before its one rounding. Collective. */
int moments_column_mean(comm_ctx_t *comm, backend_t *backend, const float *values, int64_t rows, int64_t dim,
                        int64_t chains_total, double *mean);

/* variance[k] = sum over all chains of (values[c, k] - mean_k)^2 / chains_total, mean_k the column
 * mean (moments_column_mean), each sum exact before its one rounding. Collective. */
int moments_column_variance(comm_ctx_t *comm, backend_t *backend, const float *values, int64_t rows, int64_t dim,
                            int64_t chains_total, double *variance);

#endif
