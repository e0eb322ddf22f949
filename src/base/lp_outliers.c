/* lp_outliers.c: see lp_outliers.h. */
#include "lp_outliers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The k-th smallest of values [n] (reordered): quickselect with the middle element as pivot. */
static double select_kth(double *values, int64_t n, int64_t k) {
  int64_t low = 0, high = n - 1;
  while (low < high) {
    const double pivot = values[low + (high - low) / 2];
    int64_t i = low, j = high;
    while (i <= j) {
      while (values[i] < pivot) ++i;
      while (values[j] > pivot) --j;
      if (i <= j) {
        const double swap = values[i];
        values[i++] = values[j];
        values[j--] = swap;
      }
    }
    if (k <= j) high = j;
    else if (k >= i) low = i;
    else return values[k];
  }
  return values[k];
}

static int compare_doubles(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int64_t lp_outliers(const double *mean, const double *sd, int64_t n, uint8_t *flags, lp_outlier_rule_t *rule,
                    double *scratch) {
  memset(flags, 0, (size_t)(n > 0 ? n : 0));
  *rule = (lp_outlier_rule_t){.median = NAN, .spread = NAN, .top_floor = NAN, .gap = NAN, .gap_spread = NAN};
  if (n < LP_OUTLIER_MIN_CHAINS) return 0;
  /* The means sorted (the median rule's order statistics and the gap rule's splits), the sds
   * for their median. */
  double *sorted = scratch, *sds = scratch + n;
  for (int64_t c = 0; c < n; ++c) {
    if (!isfinite(mean[c]) || !isfinite(sd[c])) return 0;
    sorted[c] = mean[c];
    sds[c] = sd[c];
  }
  qsort(sorted, (size_t)n, sizeof *sorted, compare_doubles);
  const double median_sd = select_kth(sds, n, n / 2);
  rule->median = sorted[n / 2];
  rule->spread = fmax(fmax(median_sd, (sorted[(3 * n) / 4] - rule->median) / 0.6745), 1.0);
  const double threshold = rule->median - LP_OUTLIER_SPREADS * rule->spread;
  /* The gap rule: the highest wide split, top groups of at least lp_outlier_top(n) chains. */
  const double floor_spread = fmax(median_sd, 1.0);
  const int64_t highest = n - lp_outlier_top(n);
  rule->gap_possible = sorted[highest] - sorted[0] > LP_OUTLIER_SPREADS * floor_spread;
  for (int64_t k = highest; rule->gap_possible && k >= 1; --k) {
    const int64_t m = n - k;
    const double gap = sorted[k] - sorted[k - 1];
    const double spread = fmax(floor_spread, (sorted[k + (3 * m) / 4] - sorted[k + m / 4]) / 1.349);
    if (gap > LP_OUTLIER_SPREADS * spread) {
      rule->top = m;
      rule->top_floor = sorted[k];
      rule->gap = gap;
      rule->gap_spread = spread;
      break;
    }
  }
  int64_t count = 0;
  for (int64_t c = 0; c < n; ++c) {
    const int below_median = mean[c] < threshold;
    rule->below_median += below_median;
    flags[c] = below_median || (rule->top > 0 && mean[c] < rule->top_floor);
    count += flags[c];
  }
  return count;
}

void lp_outliers_describe(const lp_outlier_rule_t *rule, char *text, size_t size) {
  int n = snprintf(text, size, "median %.4g, spread %.3g", rule->median, rule->spread);
  if (rule->top > 0 && n >= 0 && (size_t)n < size)
    snprintf(text + n, size - (size_t)n,
             "; the top %lld chains at lp >= %.4g, %.3g nats above the rest (gap spread %.3g)", (long long)rule->top,
             rule->top_floor, rule->gap, rule->gap_spread);
}
