/* lp_outliers.h: chains whose log density sits far below the others' (a minor mode), by one
 * rule that HMC's warmup (which restarts them) and `summary` (which names them) share. */
#ifndef DSAMPLER_LP_OUTLIERS_H
#define DSAMPLER_LP_OUTLIERS_H

#include <stdint.h>

/* Chain c (of n) is an outlier when its mean lp, mean[c], lies below the median of the means
 * by more than LP_OUTLIER_SPREADS spreads, the spread being the largest of the median of the
 * chains' sds of lp (sd[c]), the spread of the upper half of the means ((q75 - median) / 0.6745,
 * an sd for normal means, blind to the low outliers however many of them short of half) and 1
 * nat. A
 * funnel's mouth or a heavy tail puts a chain a few spreads below the rest; a minor mode the
 * chains cannot leave, hundreds. flags [n] receive 1 for outliers; returns their count, 0 when
 * n < LP_OUTLIER_MIN_CHAINS or a value is not finite. scratch: 2 n doubles. */
#define LP_OUTLIER_SPREADS 20.0
#define LP_OUTLIER_MIN_CHAINS 8
int64_t lp_outliers(const double *mean, const double *sd, int64_t n, uint8_t *flags, double *median, double *spread,
                    double *scratch);

#endif
