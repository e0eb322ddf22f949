/* median.c: the radix select behind SVGD's median heuristic, common to every backend. */
#include "median.h"

#include <stdlib.h>
#include <string.h>

#include "status.h"

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

int svgd_exact_median(comm_ctx_t *comm, backend_t *backend, const float *x_all, int64_t n,
                      int64_t dim, int64_t row_begin, int64_t row_end, float *median) {
  uint64_t *hist = malloc(SVGD_HIST_BINS * sizeof *hist);
  if (!hist) return DS_FAIL_ALLOC("the median histogram", SVGD_HIST_BINS * sizeof *hist);
  /* n^2 - 1 fits in 64 bits for n < 2^32. */
  const uint64_t rank = ((uint64_t)n * (uint64_t)n - 1) / 2;
  uint32_t high = 0, low = 0;
  uint64_t rank_in_bin = rank;
  int status = DS_OK;
  for (int pass = SVGD_MEDIAN_PASS_HIGH; pass <= SVGD_MEDIAN_PASS_LOW && status == DS_OK; ++pass) {
    memset(hist, 0, SVGD_HIST_BINS * sizeof *hist);
    status = backend->svgd_pair_histogram(backend, x_all, n, dim, row_begin, row_end, pass, high, hist);
    /* Every rank reaches the allreduce, a failed one too, so none waits forever; the
     * failure is shared right after. */
    status = comm_agree(comm, status);
    if (status != DS_OK) break;
    status = comm_allreduce_sum_u64(comm, hist, SVGD_HIST_BINS);
    if (status != DS_OK) break;
    /* The diagonal's n zeros: bit pattern 0, so high bin 0 and, within it, low bin 0. */
    if (pass == SVGD_MEDIAN_PASS_HIGH || high == 0) hist[0] += (uint64_t)n;
    uint32_t bin;
    uint64_t next_rank;
    if (median_locate(hist, rank_in_bin, &bin, &next_rank) != 0) {
      status = ds_fail(DS_ERR_INTERNAL, "median pass %d: histogram counts fewer than %llu values",
                       pass, (unsigned long long)rank_in_bin + 1);
      break;
    }
    if (pass == SVGD_MEDIAN_PASS_HIGH) high = bin; else low = bin;
    rank_in_bin = next_rank;
  }
  free(hist);
  if (status != DS_OK) return status;
  uint32_t bits = (high << 16) | low;
  memcpy(median, &bits, sizeof *median);
  return DS_OK;
}
