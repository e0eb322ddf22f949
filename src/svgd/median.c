/* median.c: the selection behind SVGD's median heuristic, common to every backend. The
 * window pass and the radix select count the same keys exactly (integers, summed across
 * ranks), so whichever finds the median finds the same bits. */
#include "median.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

void svgd_median_state_init(svgd_median_state_t *state) { memset(state, 0, sizeof *state); }

uint32_t svgd_median_window_start(const svgd_median_state_t *state) {
  int64_t centre = state->last_bits;
  /* A median drifting one way keeps drifting (particles spreading out or settling): aim
   * where the last step points. */
  if (state->medians_seen >= 2) centre += (int64_t)state->last_bits - (int64_t)state->before_last_bits;
  int64_t start = centre - SVGD_WINDOW_FINE_BINS / 2;
  const int64_t last_start = ((int64_t)1 << 32) - SVGD_WINDOW_FINE_BINS;
  if (start < 0) start = 0;
  if (start > last_start) start = last_start;
  return (uint32_t)start;
}

int median_locate(const uint64_t *hist, uint64_t rank, uint32_t *bin, uint64_t *rank_in_bin) {
  uint64_t below = 0;
  for (uint32_t b = 0; b < SVGD_HIST_BINS; ++b) {
    if (rank < below + hist[b]) {
      *bin = b;
      *rank_in_bin = rank - below;
      return 0;
    }
    below += hist[b];
  }
  return -1;
}

/* One pass on every rank, its counts summed across ranks into the host's hist. The counts
 * stay in backend memory until summed (on the GPU when the transport allows), so only the
 * sums cross to the host. The ranks agree on the pass before any enters the sum. */
static int counted_pass(comm_ctx_t *comm, backend_t *backend, const float *x_all, int64_t n, int64_t dim,
                        int64_t row_begin, int64_t row_end, int pass, uint32_t select_bits, uint64_t *hist) {
  const int counts = pass == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_COUNTS : SVGD_HIST_BINS;
  uint64_t *rank_counts = NULL;
  int status = backend->svgd_pair_counts(backend, x_all, n, dim, row_begin, row_end, pass, select_bits, &rank_counts);
  DS_TRY(comm_agree(comm, status));
  return comm_allreduce_sum_u64_to_host(comm, rank_counts, counts, backend->on_device, hist);
}

/* The radix select: PASS_HIGH, then PASS_LOW. The diagonal's n zeros are key 0: high bin 0,
 * low bin 0. */
static int radix_select(comm_ctx_t *comm, backend_t *backend, const float *x_all, int64_t n, int64_t dim,
                        int64_t row_begin, int64_t row_end, uint32_t *high, uint64_t *rank,
                        uint64_t *hist, uint32_t *bits) {
  for (int pass = SVGD_MEDIAN_PASS_HIGH; pass <= SVGD_MEDIAN_PASS_LOW; ++pass) {
    DS_TRY(counted_pass(comm, backend, x_all, n, dim, row_begin, row_end, pass, *high, hist));
    if (pass == SVGD_MEDIAN_PASS_HIGH || *high == 0) hist[0] += (uint64_t)n;
    uint32_t bin;
    uint64_t rank_in_bin;
    if (median_locate(hist, *rank, &bin, &rank_in_bin) != 0)
      return ds_fail(DS_ERR_INTERNAL, "median pass %d: histogram counts fewer than %llu values", pass,
                     (unsigned long long)*rank + 1);
    if (pass == SVGD_MEDIAN_PASS_HIGH) *high = bin; else *bits = (*high << 16) | bin;
    *rank = rank_in_bin;
  }
  return DS_OK;
}

/* The window pass: *found = 1 and *bits when the median's key lies in the window. */
static int window_select(comm_ctx_t *comm, backend_t *backend, const float *x_all, int64_t n, int64_t dim,
                         int64_t row_begin, int64_t row_end, uint32_t start, uint64_t rank, uint64_t *hist,
                         int *found, uint32_t *bits) {
  *found = 0;
  DS_TRY(counted_pass(comm, backend, x_all, n, dim, row_begin, row_end, SVGD_MEDIAN_PASS_WINDOW, start, hist));
  hist[start == 0 ? SVGD_WINDOW_FINE : SVGD_WINDOW_BELOW] += (uint64_t)n;
  uint64_t in_window = 0;
  for (int b = 0; b < SVGD_WINDOW_FINE_BINS; ++b) in_window += hist[SVGD_WINDOW_FINE + b];
  const uint64_t below = hist[SVGD_WINDOW_BELOW], above = hist[SVGD_WINDOW_ABOVE];
  const uint64_t total = (uint64_t)n * (uint64_t)n;
  if (below + in_window + above != total)
    return ds_fail(DS_ERR_INTERNAL, "median window pass: %llu + %llu + %llu counts, expected %llu",
                   (unsigned long long)below, (unsigned long long)in_window, (unsigned long long)above,
                   (unsigned long long)total);
  if (below <= rank && rank < below + in_window) {
    /* Fine bins hold one key each: the bin is the median. */
    uint32_t bin;
    uint64_t rank_in_bin;
    if (median_locate(hist + SVGD_WINDOW_FINE, rank - below, &bin, &rank_in_bin) != 0)
      return ds_fail(DS_ERR_INTERNAL, "median window pass: the window counts fewer than its rank");
    *bits = start + bin;
    *found = 1;
  }
  return DS_OK;
}

int svgd_exact_median(comm_ctx_t *comm, backend_t *backend, const float *x_all, int64_t n, int64_t dim,
                      int64_t row_begin, int64_t row_end, svgd_median_state_t *state, float *median) {
  uint64_t *hist = malloc(SVGD_WINDOW_COUNTS * sizeof *hist);
  if (!hist) return DS_FAIL_ALLOC("the median histogram", SVGD_WINDOW_COUNTS * sizeof *hist);
  /* n^2 - 1 fits in 64 bits for n < 2^32. */
  uint64_t rank = ((uint64_t)n * (uint64_t)n - 1) / 2;
  uint32_t bits = 0, high = 0;
  int found = 0, status = DS_OK;
  if (state && state->medians_seen > 0) {
    status = window_select(comm, backend, x_all, n, dim, row_begin, row_end, svgd_median_window_start(state), rank,
                           hist, &found, &bits);
    if (status == DS_OK) {
      if (found) ++state->window_hits; else ++state->window_misses;
    }
  }
  if (status == DS_OK && !found)
    status = radix_select(comm, backend, x_all, n, dim, row_begin, row_end, &high, &rank, hist, &bits);
  free(hist);
  if (status != DS_OK) return status;
  if (state) {
    state->before_last_bits = state->medians_seen > 0 ? state->last_bits : bits;
    state->last_bits = bits;
    if (state->medians_seen < 2) ++state->medians_seen;
  }
  memcpy(median, &bits, sizeof *median);
  return DS_OK;
}
