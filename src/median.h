/* median.h: the exact lower median of all N^2 pairwise squared distances by a two-pass 16-bit
 * radix select over histograms summed across ranks (DESIGN.md, SVGD). Non-negative floats
 * order as their bit patterns do, so selecting on bits selects on values. */
#ifndef DSAMPLER_MEDIAN_H
#define DSAMPLER_MEDIAN_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"

/* Finds the bin holding the element of 0-based rank `rank` in hist: *bin, and the rank of
 * that element among the bin's elements. Returns 0, or -1 when the counts total <= rank. */
int median_locate(const uint64_t *hist, uint64_t rank, uint32_t *bin, uint64_t *rank_in_bin);

/* Collective. x_all [n, dim] on the backend, this rank's rows [row_begin, row_end).
 * *median = the value of rank floor((n^2 - 1) / 2) among all n^2 D_ij, diagonal included. */
int svgd_exact_median(comm_ctx_t *comm, backend_t *backend, const float *x_all, int64_t n,
                      int64_t dim, int64_t row_begin, int64_t row_end, float *median);

#endif
