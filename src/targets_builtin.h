/* targets_builtin.h: the built-in targets' parameters, visible to the backends so a GPU
 * kernel can fuse a built-in gradient into its own loop instead of calling through the ABI. */
#ifndef DSAMPLER_TARGETS_BUILTIN_H
#define DSAMPLER_TARGETS_BUILTIN_H

#include <stdio.h>

#include "dsampler_target.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { BUILTIN_NONE = 0, BUILTIN_GAUSSIAN = 1 } builtin_kind_t;

/* gaussian: log p(x) = -1/2 sum_k ((x_k - mean) / scale)^2 (constants dropped),
 * grad_k = -(x_k - mean) * inv_scale2, with inv_scale2 = 1 / scale^2 in float. */
typedef struct builtin_params {
  builtin_kind_t kind;
  int64_t dim;
  float mean;
  float scale;
  float inv_scale2;
} builtin_params_t;

/* Fills *params and returns 1 when t is a built-in target with a fused form, else 0. */
int builtin_target_params(const dsampler_target *t, builtin_params_t *params);

/* Creates a built-in target by name; args as for plugins ("dim=64,mean=0,scale=1"). */
int builtin_target_create(const char *name, const char *args, MPI_Comm comm, dsampler_target *out);
/* Prints each built-in with its parameters (`dsampler targets`). */
void builtin_targets_print(FILE *out);
/* Names of the built-ins, NULL-terminated. */
extern const char *const builtin_target_names[];

#ifdef __cplusplus
}
#endif
#endif
