/* median.h: the exact lower median of all N^2 pairwise squared distances by a 16-bit radix
 * select over histograms summed across ranks (DESIGN.md, SVGD). Non-negative floats order as
 * their bit patterns do, so selecting on bits selects on values. Between SVGD iterations the
 * median moves little: given the last medians, one window pass usually finds it exactly
 * (backend.h, SVGD_MEDIAN_PASS_WINDOW), and the radix select runs only when it does not. */
#ifndef DSAMPLER_MEDIAN_H
#define DSAMPLER_MEDIAN_H

#include <stdint.h>

#include "backend.h"
#include "comm.h"

/* What the median keeps between iterations: the last two medians, which place the next
 * window, and how often the window held the median. Only where the window pass looks
 * depends on it, never the median found. */
typedef struct svgd_median_state {
  int medians_seen;          /* 0 (a fresh run or a resume), 1, or 2 and more */
  uint32_t last_bits;        /* bit pattern of the last median */
  uint32_t before_last_bits; /* and of the one before it */
  int64_t window_hits;       /* window passes that found the median */
  int64_t window_misses;     /* window passes followed by the radix select */
} svgd_median_state_t;

/* A state with no previous median: the next median takes the radix select. */
void svgd_median_state_init(svgd_median_state_t *state);
/* The window start of the next window pass: SVGD_WINDOW_FINE_BINS keys centred on the last
 * median moved on by its last change, clamped to the 32-bit keys. */
uint32_t svgd_median_window_start(const svgd_median_state_t *state);

/* Finds the bin holding the element of 0-based rank `rank` in hist: *bin, and the rank of
 * that element among the bin's elements. Returns 0, or -1 when the counts total <= rank. */
int median_locate(const uint64_t *hist, uint64_t rank, uint32_t *bin, uint64_t *rank_in_bin);

/* Collective. x_all [n, dim] on the backend, this rank's rows [row_begin, row_end).
 * *median = the value of rank floor((n^2 - 1) / 2) among all n^2 D_ij, diagonal included.
 * state may be NULL (always the two radix passes); otherwise it is read for the window and
 * updated with this median, identically on every rank. */
int svgd_exact_median(comm_ctx_t *comm, backend_t *backend, const float *x_all, int64_t n,
                      int64_t dim, int64_t row_begin, int64_t row_end, svgd_median_state_t *state,
                      float *median);

#endif
