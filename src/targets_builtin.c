/* targets_builtin.c: the built-in targets, with analytic gradients. */
#include "targets_builtin.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "target.h"

const char *const builtin_target_names[] = {"gaussian", NULL};

static int parse_number(const char *target, const char *key, const char *text, double *value) {
  char *end = NULL;
  errno = 0;
  double parsed = strtod(text, &end);
  if (errno != 0 || end == text || *end != '\0' || !isfinite(parsed))
    return ds_fail(DS_ERR_INPUT, "--target-args: %s's %s must be a finite number, got '%s'", target, key, text);
  *value = parsed;
  return DS_OK;
}

static int get_number(const char *target, const char *args, const char *key, double fallback, double *value) {
  char text[128];
  *value = fallback;
  if (!target_args_get(args, key, text, sizeof text)) return DS_OK;
  return parse_number(target, key, text, value);
}

/* gaussian: N(mean, scale^2 I). */
static int gaussian_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const builtin_params_t *p = self;
  const int64_t dim = p->dim;
  for (int64_t i = 0; i < n; ++i) {
    const float *x_i = x + i * dim;
    float *g_i = grad + i * dim;
    double sum = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      float centred = x_i[k] - p->mean;
      g_i[k] = -centred * p->inv_scale2;
      sum += (double)centred * (double)centred;
    }
    logp[i] = (float)(-0.5 * sum * (double)p->inv_scale2);
  }
  return 0;
}

static void builtin_destroy(void *self) { free(self); }

int builtin_target_params(const dsampler_target *t, builtin_params_t *params) {
  if (t->logp_grad != gaussian_logp_grad) return 0;
  *params = *(const builtin_params_t *)t->self;
  return 1;
}

static int gaussian_create(const char *args, dsampler_target *out) {
  static const char *const known[] = {"dim", "mean", "scale", NULL};
  DS_TRY(target_args_check("gaussian", args, known));
  double dim = 0, mean = 0, scale = 1;
  DS_TRY(get_number("gaussian", args, "dim", 0, &dim));
  DS_TRY(get_number("gaussian", args, "mean", 0, &mean));
  DS_TRY(get_number("gaussian", args, "scale", 1, &scale));
  if (dim < 1 || dim != floor(dim))
    return ds_fail(DS_ERR_INPUT, "--dim: the gaussian target needs a positive integer dimension");
  if (!(scale > 0)) return ds_fail(DS_ERR_INPUT, "--target-args: gaussian's scale must be > 0, got %g", scale);
  builtin_params_t *params = calloc(1, sizeof *params);
  if (!params) return DS_FAIL_ALLOC("target parameters", sizeof *params);
  params->kind = BUILTIN_GAUSSIAN;
  params->dim = (int64_t)dim;
  params->mean = (float)mean;
  params->scale = (float)scale;
  params->inv_scale2 = 1.0f / ((float)scale * (float)scale);
  memset(out, 0, sizeof *out);
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = "gaussian";
  out->var_name = "x";
  out->dim = params->dim;
  out->self = params;
  out->logp_grad = gaussian_logp_grad;
  out->destroy = builtin_destroy;
  return DS_OK;
}

int builtin_target_create(const char *name, const char *args, MPI_Comm comm, dsampler_target *out) {
  (void)comm;
  if (strcmp(name, "gaussian") == 0) return gaussian_create(args, out);
  char list[256] = "";
  for (const char *const *n = builtin_target_names; *n; ++n) {
    strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
    strncat(list, *n, sizeof list - strlen(list) - 1);
  }
  return ds_fail(DS_ERR_INPUT, "--target: unknown target '%s' (built-ins: %s; or plugin:path/to/lib.so)",
                 name, list);
}

void builtin_targets_print(FILE *out) {
  fprintf(out, "built-in targets (--target NAME --target-args K=V,...):\n");
  fprintf(out, "  gaussian   N(mean, scale^2 I): mean=0, scale=1\n");
  fprintf(out, "plugins: --target plugin:path/to/lib.so (see dsampler_target.h)\n");
}
