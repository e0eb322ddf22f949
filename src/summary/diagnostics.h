/* diagnostics.h: convergence diagnostics of MCMC draws, computed as ArviZ 0.22 computes them, so
 * that `dsampler summary` and `arviz.summary` agree to rounding: rank-normalised split R-hat
 * (Vehtari et al. 2021), bulk and tail ESS (FFT autocovariance, Geyer's initial monotone
 * sequence), MCSE of the mean and of the sd, and quantiles; and, when the chains form
 * superchains (groups started from one point), nested R-hat (Margossian et al. 2024). One
 * parameter at a time, from its draws laid out [chain][draw] in double. */
#ifndef DSAMPLER_DIAGNOSTICS_H
#define DSAMPLER_DIAGNOSTICS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The columns of the summary, in print order. NaN where ArviZ gives NaN (too few draws or
 * chains, a NaN among the draws, a constant parameter where a variance is divided by). */
typedef struct diag_stats {
  double mean, sd;           /* sd with ddof = 1 */
  double mcse_mean, mcse_sd;
  double q5, q50, q95;       /* numpy's default (linear) quantiles over all draws */
  double ess_bulk, ess_tail;
  double r_hat;              /* max of rank-normalised split R-hat, bulk and folded */
  double r_hat_nested;       /* plain nested R-hat over superchains; NaN without superchains */
} diag_stats_t;

/* diag_stats_t as an array of doubles; r_hat_nested is the last, so a table without
 * superchains is the first DIAG_N_STATS - 1 columns. */
enum {
  DIAG_N_STATS = 11,
  DIAG_STAT_MEAN = 0,
  DIAG_STAT_SD = 1,
  DIAG_STAT_Q5 = 4,
  DIAG_STAT_Q50 = 5,
  DIAG_STAT_Q95 = 6,
  DIAG_STAT_R_HAT_NESTED = 10
};
extern const char *const diag_stat_names[DIAG_N_STATS];

/* Scratch memory and FFT plans for parameters of one shape; reused across parameters. */
typedef struct diag_workspace diag_workspace_t;

/* chains >= 1, draws >= 1. superchain_size: chains per superchain (chains c of superchain
 * floor(c / superchain_size)), dividing chains; 0 for no superchains (r_hat_nested NaN).
 * Returns a status (DS_ERR_MEMORY when it cannot allocate). */
int diag_workspace_create(diag_workspace_t **ws, int64_t chains, int64_t draws, int64_t superchain_size);
void diag_workspace_free(diag_workspace_t *ws);

/* All columns for one parameter; draws[chain * n_draws + draw]. */
void diag_summarize(diag_workspace_t *ws, const double *draws, diag_stats_t *out);

/* The standard normal quantile function (Wichura's AS 241, relative error about 1e-16):
 * -inf at 0, +inf at 1, NaN outside [0, 1]. */
double diag_normal_quantile(double p);

/* numpy.quantile(x, q) with the default linear method, of n values sorted ascending. */
double diag_quantile_sorted(const double *sorted, int64_t n, double q);

#ifdef __cplusplus
}
#endif
#endif
