/* builtin_params.c: what the backends may ask of any target about the built-ins (is it one,
 * and with which parameters), and the built-ins' destroy entry. Part of dsampler_base, with
 * status.c: the CUDA backend needs these and nothing else of the host code, so it links no
 * further. The built-ins themselves (their registry, creation and host entries) are
 * targets_builtin.c. */
#include <stdlib.h>

#include "targets_builtin.h"

void builtin_params_free(void *self) {
  builtin_params_t *p = self;
  if (!p) return;
  if (p->device_release) p->device_release(p->device);
  free((void *)p->means);
  free((void *)p->inv_scale2s);
  free((void *)p->precision);
  free((void *)p->data_x);
  free((void *)p->data_y);
  free(p);
}

/* Every built-in, whichever registry row made it, is destroyed by builtin_params_free, and no
 * plugin can be: that entry marks a target whose self is a builtin_params_t. */
const builtin_params_t *builtin_target_lookup(const dsampler_target *t) {
  if (!t || t->destroy != builtin_params_free || !t->self) return NULL;
  return t->self;
}

int builtin_target_params(const dsampler_target *t, builtin_params_t *params) {
  const builtin_params_t *p = builtin_target_lookup(t);
  if (!p || p->kind != BUILTIN_GAUSSIAN || p->means) return 0;
  *params = *p;
  return 1;
}
