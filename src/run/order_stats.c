/* order_stats.c: see order_stats.h. */
#include "order_stats.h"

#include <math.h>

#include "lp_outliers.h"
#include "order_key.h"
#include "status.h"

enum { BINS_MAX = (1 << ORDER_KEY_MAX_BITS) + 1 };

/* Level `level`'s histogram over all ranks, of the values whose key starts with `prefix` (the
 * digits of the levels before). */
static int level_histogram(comm_ctx_t *comm, backend_t *b, const float *values, int64_t rows, int clamp_zero,
                           uint32_t prefix, int level, uint64_t *bins) {
  const int shift = order_key_shift(level), bits = order_key_bits(level);
  DS_TRY(comm_agree(comm, b->key_histogram(b, values, rows, clamp_zero, prefix, 32 - shift - bits, shift, bits, bins)));
  return comm_allreduce_sum_u64(comm, bins, (int64_t)(1 << bits) + 1);
}

int order_select(comm_ctx_t *comm, backend_t *b, const float *values, int64_t rows, int clamp_zero, int64_t k,
                 float *out, int64_t *nonfinite) {
  uint64_t bins[BINS_MAX];
  uint32_t prefix = 0;
  *out = NAN;
  *nonfinite = 0;
  uint64_t rank = k < 0 ? UINT64_MAX : (uint64_t)k;
  for (int level = 0; level < ORDER_KEY_LEVELS; ++level) {
    const int bits = order_key_bits(level);
    DS_TRY(level_histogram(comm, b, values, rows, clamp_zero, prefix, level, bins));
    if (level == 0) {
      *nonfinite = (int64_t)bins[1 << bits];
      uint64_t finite = 0;
      for (int i = 0; i < 1 << bits; ++i) finite += bins[i];
      if (*nonfinite > 0 || rank >= finite) return DS_OK;
    }
    int digit = 0;
    while (rank >= bins[digit]) rank -= bins[digit++];
    prefix = (prefix << bits) | (uint32_t)digit;
  }
  *out = order_key_value(prefix);
  return DS_OK;
}

int order_count_below(comm_ctx_t *comm, backend_t *b, const float *values, int64_t rows, float bound,
                      int64_t *count) {
  *count = 0;
  if (isnan(bound)) return ds_fail(DS_ERR_INTERNAL, "order_count_below: the bound is NaN");
  uint64_t bins[BINS_MAX], below = 0;
  if (bound == INFINITY) {
    DS_TRY(level_histogram(comm, b, values, rows, 0, 0, 0, bins));
    for (int i = 0; i < 1 << order_key_bits(0); ++i) below += bins[i];
  } else if (bound != -INFINITY) {
    const uint32_t key = order_key(bound);
    for (int level = 0; level < ORDER_KEY_LEVELS; ++level) {
      const int shift = order_key_shift(level), bits = order_key_bits(level);
      const uint32_t prefix = level == 0 ? 0u : key >> (shift + bits);
      DS_TRY(level_histogram(comm, b, values, rows, 0, prefix, level, bins));
      const uint32_t digit = (key >> shift) & ((1u << bits) - 1u);
      for (uint32_t i = 0; i < digit; ++i) below += bins[i];
    }
  }
  *count = (int64_t)below;
  return DS_OK;
}

int lp_outliers_count(comm_ctx_t *comm, backend_t *b, const float *mean, const float *m2, int64_t rows,
                      int64_t total, double samples, int64_t *count, int *gap_possible) {
  *count = 0;
  *gap_possible = 0;
  if (total < LP_OUTLIER_MIN_CHAINS) return DS_OK;
  /* As lp_outliers: the median and upper quartile of the means, the median of the sds; sd is
   * a non-decreasing function of max(m2, 0), so the median sd is that of the median clamped m2.
   * Any non-finite mean or sd (sd is only for m2 = +inf: fmaxf takes NaN to 0): no outliers. */
  float median_mean, q75_mean, median_m2, lowest, top;
  int64_t bad_mean, bad_m2;
  DS_TRY(order_select(comm, b, mean, rows, 0, total / 2, &median_mean, &bad_mean));
  if (bad_mean > 0) return DS_OK;
  DS_TRY(order_select(comm, b, mean, rows, 0, (3 * total) / 4, &q75_mean, &bad_mean));
  DS_TRY(order_select(comm, b, m2, rows, 1, total / 2, &median_m2, &bad_m2));
  if (bad_m2 > 0) return DS_OK;
  const float median_sd = sqrtf(median_m2 / (float)(samples - 1.0));
  if (!isfinite(median_sd)) return DS_OK;
  /* The gap rule's necessary condition, from two more order statistics (the same doubles as
   * lp_outliers forms; a difference of doubles is monotone in its terms, so no wide gap is missed). */
  DS_TRY(order_select(comm, b, mean, rows, 0, 0, &lowest, &bad_mean));
  DS_TRY(order_select(comm, b, mean, rows, 0, total - lp_outlier_top(total), &top, &bad_mean));
  *gap_possible = (double)top - (double)lowest > LP_OUTLIER_SPREADS * fmax((double)median_sd, 1.0);
  const double median = (double)median_mean;
  const double spread = fmax(fmax((double)median_sd, ((double)q75_mean - median) / 0.6745), 1.0);
  const double threshold = median - LP_OUTLIER_SPREADS * spread;
  /* mean < threshold (in double) for a float mean: mean <= the largest float below threshold. */
  float largest = (float)threshold;
  if (!((double)largest < threshold)) largest = nextafterf(largest, -INFINITY);
  if (largest == -INFINITY) return DS_OK;
  return order_count_below(comm, b, mean, rows, nextafterf(largest, INFINITY), count);
}
