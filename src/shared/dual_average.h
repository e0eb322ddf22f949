/* dual_average.h: Stan's dual averaging of the step size (stepsize_adaptation), as inline
 * functions for the host and the GPU, so pooled adaptation (on the host, one state) and
 * per-chain adaptation (in the backend, a state per chain) run the same arithmetic. */
#ifndef DSAMPLER_DUAL_AVERAGE_H
#define DSAMPLER_DUAL_AVERAGE_H

#include <math.h>

#ifdef __CUDACC__
#define DUAL_FN __host__ __device__ __forceinline__ static
#else
#define DUAL_FN static inline
#endif

/* The step-size search stops at 2^+-STEP_SEARCH_LIMIT times its first step. */
enum { STEP_SEARCH_LIMIT = 60 };

/* A state's fields, in this order in the per-chain arrays [rows, DUAL_FIELDS]. */
enum { DUAL_MU = 0, DUAL_S_BAR, DUAL_X_BAR, DUAL_LOG_EPS, DUAL_FIELDS };

/* One iteration's work on a state: learn from the acceptance statistic at (restarted) count
 * `counter`; then, if restart, start again from the current step (a new metric); then the next
 * iteration's step: the latest iterate, or the average when `final`. */
typedef struct dual_average_step {
  double target_accept, gamma, kappa, t0;
  double counter;
  int restart, final;
  int restart_only;      /* no learning: restart from the step given (a new initial step) */
  int scale_only;        /* no learning: the step is the one searched (mu) times exp(log_scale) */
  double log_scale;
} dual_average_step_t;

/* Stan restarts with mu = log(10 eps), trying larger steps at first: its initial step comes from
 * one leapfrog step and NUTS shortens trajectories that fail. Here the step was searched over
 * whole fixed-length trajectories and a too-large step diverges on every one of them, so mu is
 * the step found. */
DUAL_FN void dual_restart(double *state, double step) {
  state[DUAL_MU] = log(step);
  state[DUAL_S_BAR] = 0.0;
  state[DUAL_X_BAR] = 0.0;
  state[DUAL_LOG_EPS] = log(step);
}

DUAL_FN void dual_learn(double *state, const dual_average_step_t *s, double accept_stat) {
  const double stat = accept_stat > 1.0 ? 1.0 : accept_stat;
  const double eta = 1.0 / (s->counter + s->t0);
  state[DUAL_S_BAR] = (1.0 - eta) * state[DUAL_S_BAR] + eta * (s->target_accept - stat);
  const double x = state[DUAL_MU] - state[DUAL_S_BAR] * sqrt(s->counter) / s->gamma;
  const double x_eta = pow(s->counter, -s->kappa);
  state[DUAL_X_BAR] = (1.0 - x_eta) * state[DUAL_X_BAR] + x_eta * x;
  state[DUAL_LOG_EPS] = x;
}

/* The whole iteration's update; returns the next step size. With restart_only, the state
 * restarts from `step` and step is returned. */
DUAL_FN float dual_apply(double *state, const dual_average_step_t *s, double accept_stat, float step) {
  if (s->restart_only) {
    dual_restart(state, (double)step);
    return step;
  }
  if (s->scale_only) return (float)exp(state[DUAL_MU] + s->log_scale);
  dual_learn(state, s, accept_stat);
  if (s->restart) dual_restart(state, exp(state[DUAL_LOG_EPS]));
  return (float)exp(s->final ? state[DUAL_X_BAR] : state[DUAL_LOG_EPS]);
}

DUAL_FN float dual_iterate(double *state, const dual_average_step_t *s, double accept_stat) {
  dual_learn(state, s, accept_stat);
  if (s->restart) dual_restart(state, exp(state[DUAL_LOG_EPS]));
  return (float)exp(s->final ? state[DUAL_X_BAR] : state[DUAL_LOG_EPS]);
}

/* One trial of the initial step-size search for one chain (backend.h's step_search). */
DUAL_FN void step_search_trial(float accept_prob, signed char *direction, signed char *exponent, float *step) {
  const int above = accept_prob > 0.8f, below = accept_prob < 0.8f;
  if (*direction == 0) {
    *direction = above ? 1 : -1;
  } else if (*direction == 1) {
    if (above && *exponent < STEP_SEARCH_LIMIT) {
      *step *= 2.0f;
      ++*exponent;
    } else {
      /* Back to the last step that passed (Stan keeps the first that failed: with a fixed
       * number of leapfrog steps, that can be past the stability limit). */
      if (!above && *exponent > -STEP_SEARCH_LIMIT) {
        *step *= 0.5f;
        --*exponent;
      }
      *direction = 2;
    }
  } else if (*direction == -1) {
    if (below && *exponent > -STEP_SEARCH_LIMIT) {
      *step *= 0.5f;
      --*exponent;
    } else {
      *direction = 2;
    }
  }
}

/* Stan's regularised variance from a window of n samples with sum of squared deviations m2,
 * (n / (n + 5)) var + 1e-3 scale (5 / (n + 5)), where Stan has scale = 1. Here scale is the
 * typical variance of the window (dual_variance_scale): a posterior whose scales are far from 1
 * (sds of 1e-5 are common with scale parameters and large data) is not pulled toward unit scale,
 * which for such a posterior makes the metric orders of magnitude too wide and the step tiny. */
DUAL_FN float dual_regularised_variance(double m2, double n, double scale) {
  const double var = n > 1 ? m2 / (n - 1.0) : 1.0;
  return (float)((n / (n + 5.0)) * var + 1e-3 * scale * (5.0 / (n + 5.0)));
}

/* The typical variance of a window: the geometric mean of its positive variances
 * (sums[k] / divisor, k < dim), or 1 when none is (a chain that never moved, or one sample). */
DUAL_FN double dual_variance_scale(const float *sums, long long dim, double divisor) {
  double log_sum = 0.0;
  long long positive = 0;
  for (long long k = 0; k < dim; ++k) {
    const double v = (double)sums[k];
    if (v > 0.0 && divisor > 0.0) {
      log_sum += log(v / divisor);
      ++positive;
    }
  }
  return positive > 0 ? exp(log_sum / (double)positive) : 1.0;
}

#endif
