/* target.h: making the run's target from --target and --target-args: a built-in by name, or
 * a user plugin as "plugin:path/to/lib.so". */
#ifndef DSAMPLER_TARGET_LOAD_H
#define DSAMPLER_TARGET_LOAD_H

#include "dsampler_target.h"

typedef struct target_handle {
  dsampler_target target;
  void *library; /* dlopen handle of a plugin, NULL for a built-in */
} target_handle_t;

/* Collective over comm. data_path is --data ("" when not given), passed to the target as
 * data=<path> before its own args; dim is --dim (0 when not given), passed as dim=<d>. On
 * success the target's dim is known and positive. */
int target_open(const char *spec, const char *args, const char *data_path, int64_t dim, MPI_Comm comm,
                target_handle_t *out);
void target_close(target_handle_t *handle);

/* Minibatch gradients (SVGD --batch-size): the target's next evaluations use minibatch
 * `iteration` of batch_size data rows (0: all the data). Only data targets take one (the built-in
 * logistic); others refuse a positive batch_size with DS_ERR_INPUT naming --batch-size. */
int target_set_minibatch(const dsampler_target *t, int64_t batch_size, uint64_t seed, int64_t iteration);

/* Finds `key` in "key=value,key=value" and copies its value; returns 1 when found. */
int target_args_get(const char *args, const char *key, char *value, size_t value_size);
/* Returns DS_ERR_INPUT naming the first key of args not in the NULL-terminated `known`. */
int target_args_check(const char *target_name, const char *args, const char *const *known);

#endif
