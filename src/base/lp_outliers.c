/* lp_outliers.c: see lp_outliers.h. */
#include "lp_outliers.h"

#include <math.h>
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

int64_t lp_outliers(const double *mean, const double *sd, int64_t n, uint8_t *flags, double *median, double *spread,
                    double *scratch) {
  memset(flags, 0, (size_t)(n > 0 ? n : 0));
  *median = NAN;
  *spread = NAN;
  if (n < LP_OUTLIER_MIN_CHAINS) return 0;
  double *means = scratch, *sds = scratch + n;
  for (int64_t c = 0; c < n; ++c) {
    if (!isfinite(mean[c]) || !isfinite(sd[c])) return 0;
    means[c] = mean[c];
    sds[c] = sd[c];
  }
  *median = select_kth(means, n, n / 2);
  const double q75 = select_kth(means, n, (3 * n) / 4);
  *spread = fmax(fmax(select_kth(sds, n, n / 2), (q75 - *median) / 0.6745), 1.0);
  int64_t count = 0;
  for (int64_t c = 0; c < n; ++c) {
    flags[c] = mean[c] < *median - LP_OUTLIER_SPREADS * *spread;
    count += flags[c];
  }
  return count;
}
