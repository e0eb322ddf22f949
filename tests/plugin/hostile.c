/* hostile.c: a plugin (ABI version 2, N(0, I), dim from --dim or 2) that misbehaves as the
 * environment variable HOSTILE_MODE says, for tests/py/test_hostile.py and
 * tests/tools/hostile_campaign.py:
 *   stall            logp_grad never returns (on the ranks HOSTILE_RANK names: one rank, or
 *                    -1 for every rank; default 0), once the file HOSTILE_WHEN exists (at once
 *                    without it); the file HOSTILE_MARK is created when it starts stalling
 *   stall_init       initial_point never returns (same ranks)
 *   stall_create     create never returns (same ranks)
 *   multiline        create reports an error of three lines, with a tab and an escape byte
 *   multiline_call   logp_grad reports a two-line error from its third call on
 *   zero_axis        declares an output variable "theta" of shape [3, 0]
 *   nan_logp         log p is NaN everywhere
 *   crash            logp_grad dereferences NULL from its third call (on HOSTILE_RANK)
 *   long_message     create reports an error of 100000 characters
 *   chdir            create changes the working directory to /
 *   ignore_signals   create ignores SIGTERM and blocks SIGUSR1
 *   many_vars        declares HOSTILE_VARS (default 241) scalar output variables v0, v1, ...
 * Anything else (or none): a well-behaved N(0, I). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsampler_target.h"

typedef struct hostile {
  int64_t dim;
  int rank;
  const char *mode;
  atomic_int calls;
  void (*report_error)(void *context, const char *message);
  void *context;
  dsampler_target_var var;
  dsampler_target_var *many;   /* many_vars: n_many scalars v0, v1, ... */
  char (*many_names)[16];
  int n_many;
} hostile_t;

static int mode_is(const hostile_t *h, const char *mode) { return h->mode && strcmp(h->mode, mode) == 0; }

static int on_this_rank(int rank) {
  const char *which = getenv("HOSTILE_RANK");
  const int chosen = which ? atoi(which) : 0;
  return chosen < 0 || chosen == rank;
}

/* Never returns once HOSTILE_WHEN exists (checked each call until then). */
static void maybe_stall(int rank) {
  if (!on_this_rank(rank)) return;
  const char *when = getenv("HOSTILE_WHEN");
  if (when && access(when, F_OK) != 0) return;
  const char *mark = getenv("HOSTILE_MARK");
  if (mark) {
    FILE *file = fopen(mark, "w");
    if (file) fclose(file);
  }
  for (;;) sleep(1000); /* a signal ends one sleep, not the stall */
}

static int hostile_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  hostile_t *h = self;
  const int call = atomic_fetch_add(&h->calls, 1) + 1;
  if (mode_is(h, "stall")) maybe_stall(h->rank);
  if (mode_is(h, "multiline_call") && call >= 3) {
    h->report_error(h->context, "the likelihood failed:\n  row 2 overflowed\n  row 3\tunderflowed");
    return 5;
  }
  if (mode_is(h, "crash") && call >= 3 && on_this_rank(h->rank)) {
    volatile int *nowhere = NULL;
    *nowhere = 1;
  }
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int64_t k = 0; k < h->dim; ++k) {
      const float value = x[i * h->dim + k];
      grad[i * h->dim + k] = -value;
      sum += (double)value * value;
    }
    logp[i] = mode_is(h, "nan_logp") ? NAN : (float)(-0.5 * sum);
  }
  return 0;
}

static int hostile_initial_point(void *self, uint64_t seed, int64_t item, double *x) {
  hostile_t *h = self;
  if (mode_is(h, "stall_init")) maybe_stall(h->rank);
  for (int64_t k = 0; k < h->dim; ++k) x[k] = 0.1 * (double)((seed + (uint64_t)item + (uint64_t)k) % 7) - 0.3;
  return 0;
}

static int hostile_constrain(void *self, const double *x, int64_t n, const uint64_t *keys, double *out) {
  hostile_t *h = self;
  (void)keys;
  /* many_vars: v_k = (k + 1) x_(k mod dim) */
  for (int64_t i = 0; i < n && h->n_many; ++i)
    for (int k = 0; k < h->n_many; ++k) out[i * h->n_many + k] = (k + 1) * x[i * h->dim + k % h->dim];
  return 0;
}

static void hostile_destroy(void *self) {
  hostile_t *h = self;
  free(h->many);
  free(h->many_names);
  free(h);
}

int dsampler_target_create_v2(const dsampler_target_host *host, dsampler_target *out) {
  hostile_t *h = calloc(1, sizeof *h);
  if (!h) return 2;
  h->dim = host->dim > 0 ? host->dim : 2;
  h->mode = getenv("HOSTILE_MODE");
  h->report_error = host->report_error;
  h->context = host->context;
  MPI_Comm_rank(host->comm, &h->rank);
  if (mode_is(h, "stall_create")) maybe_stall(h->rank);
  if (mode_is(h, "multiline")) {
    host->report_error(host->context, "cannot read the table:\nline 1: bad\r\nline 2:\tworse \x1b[31mred\x1b[0m");
    free(h);
    return 3;
  }
  if (mode_is(h, "long_message")) {
    char *text = malloc(100001);
    if (text) {
      memset(text, 'm', 100000);
      text[100000] = '\0';
      host->report_error(host->context, text);
      free(text);
    }
    free(h);
    return 3;
  }
  if (mode_is(h, "chdir") && chdir("/") != 0) {
    free(h);
    return 3;
  }
  if (mode_is(h, "ignore_signals")) {
    signal(SIGTERM, SIG_IGN);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
  }
  memset(out, 0, sizeof *out);
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = "hostile";
  out->var_name = "x";
  out->dim = h->dim;
  out->self = h;
  out->logp_grad = hostile_logp_grad;
  out->destroy = hostile_destroy;
  out->initial_point = hostile_initial_point;
  if (mode_is(h, "zero_axis")) {
    h->var.name = "theta";
    h->var.kind = DSAMPLER_VAR_PARAMETER;
    h->var.rank = 2;
    h->var.shape[0] = 3;
    h->var.shape[1] = 0;
    out->n_vars = 1;
    out->vars = &h->var;
    out->constrained_dim = 0;
    out->constrain = hostile_constrain;
  }
  if (mode_is(h, "many_vars")) {
    const char *count = getenv("HOSTILE_VARS");
    h->n_many = count ? atoi(count) : 241;
    h->many = calloc((size_t)h->n_many, sizeof *h->many);
    h->many_names = calloc((size_t)h->n_many, sizeof *h->many_names);
    if (!h->many || !h->many_names) return 2;
    for (int k = 0; k < h->n_many; ++k) {
      snprintf(h->many_names[k], sizeof h->many_names[k], "v%d", k);
      h->many[k].name = h->many_names[k];
      h->many[k].kind = DSAMPLER_VAR_PARAMETER;
    }
    out->n_vars = h->n_many;
    out->vars = h->many;
    out->constrained_dim = h->n_many;
    out->constrain = hostile_constrain;
  }
  return 0;
}
