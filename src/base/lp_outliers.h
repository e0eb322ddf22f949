/* lp_outliers.h: chains whose log density sits far below the others' (a minor mode), by one
 * rule that HMC's warmup (which restarts them) and `summary` (which names them) share. */
#ifndef DSAMPLER_LP_OUTLIERS_H
#define DSAMPLER_LP_OUTLIERS_H

#include <stddef.h>
#include <stdint.h>

/* Chain c (of n) is an outlier by either of two rules on the chains' mean lp (mean[c]) and sd of
 * lp (sd[c]):
 * - below the median: mean[c] lies below the median of the means by more than
 *   LP_OUTLIER_SPREADS spreads, the spread being the largest of the median of the chains' sds of
 *   lp, the spread of the upper half of the means ((q75 - median) / 0.6745, an sd for normal
 *   means, blind to the low outliers however many of them short of half) and 1 nat. A funnel's
 *   mouth or a heavy tail puts a chain a few spreads below the rest; a minor mode the chains
 *   cannot leave, hundreds.
 * - below a gap: a minor mode can hold most of the chains (the median then sits in it). With the
 *   means sorted, s[0] <= ... <= s[n-1], a split k leaves a top group s[k..n-1] of at least
 *   T = lp_outlier_top(n) = max(LP_OUTLIER_MIN_CHAINS, n / 8) chains; its gap s[k] - s[k-1] is wide when
 *   it exceeds LP_OUTLIER_SPREADS gap spreads, the largest of the median of the chains' sds of lp,
 *   the top group's own spread (s[k + 3m/4] - s[k + m/4]) / 1.349 for its m = n - k chains (an sd
 *   for normal means) and 1 nat. At the highest wide split, every chain below it is an outlier.
 *   The gap rule can fire only where s[n - T] - s[0] exceeds LP_OUTLIER_SPREADS
 *   times the larger of the median sd and 1 (what lp_outliers_count tests from order statistics).
 * flags [n] receive 1 for outliers; returns their count, 0 when n < LP_OUTLIER_MIN_CHAINS or a
 * value is not finite. rule receives both rules' numbers. scratch: 2 n doubles. */
#define LP_OUTLIER_SPREADS 20.0
#define LP_OUTLIER_MIN_CHAINS 8

typedef struct lp_outlier_rule {
  double median, spread;    /* the median rule's reference and spread */
  int64_t below_median;     /* the chains it flags */
  int gap_possible;         /* the gap rule's necessary condition held */
  int64_t top;              /* the gap rule: the chains above the highest wide gap, 0 where none */
  double top_floor, gap, gap_spread; /* the top group's lowest mean, the gap below it, its spread */
} lp_outlier_rule_t;

/* The top group's least size for n chains. */
static inline int64_t lp_outlier_top(int64_t n) {
  return n / 8 > LP_OUTLIER_MIN_CHAINS ? n / 8 : LP_OUTLIER_MIN_CHAINS;
}

int64_t lp_outliers(const double *mean, const double *sd, int64_t n, uint8_t *flags, lp_outlier_rule_t *rule,
                    double *scratch);

/* The rule's numbers for a message: "median M, spread S" and, where the gap rule found a top
 * group, "; the top N chains at lp >= F, G nats above the rest (gap spread S)". */
void lp_outliers_describe(const lp_outlier_rule_t *rule, char *text, size_t size);

#endif
