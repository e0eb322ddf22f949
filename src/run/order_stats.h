/* order_stats.h: exact order statistics of a float array spread over ranks ([rows] on each rank,
 * in backend memory), by radix selection on the values' order keys (order_key.h): three passes of
 * the backend's key_histogram, each summed over ranks, so every rank gets the same answer and no
 * rank gathers the values. Collective. */
#ifndef DSAMPLER_ORDER_STATS_H
#define DSAMPLER_ORDER_STATS_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"

/* The k-th smallest (from 0) of the finite values (of fmaxf(v, 0) with clamp_zero), in *out, and
 * the count of non-finite ones in *nonfinite; with any non-finite value, or k not below the finite
 * count, *out is NaN. */
int order_select(comm_ctx_t *comm, backend_t *b, const float *values, int64_t rows, int clamp_zero, int64_t k,
                 float *out, int64_t *nonfinite);
/* The count of finite values below `bound` (as floats compare: -0 equals +0). */
int order_count_below(comm_ctx_t *comm, backend_t *b, const float *values, int64_t rows, float bound,
                      int64_t *count);

/* What lp_outliers (lp_outliers.h) would find for the chains' running lp moments mean [rows] and
 * m2 [rows] over `samples` iterations (sd = sqrt(max(m2, 0) / (samples - 1)) in float, as HMC
 * forms it), of `total` chains over all ranks, from order statistics, without gathering the
 * chains' values: *count, the median rule's count (its below_median), and *gap_possible, 0 where
 * the gap rule cannot fire (its necessary condition fails) and 1 where it may. */
int lp_outliers_count(comm_ctx_t *comm, backend_t *b, const float *mean, const float *m2, int64_t rows,
                      int64_t total, double samples, int64_t *count, int *gap_possible);

#endif
