/* targets_builtin.h: the built-in targets (their registry is src/targets/targets_builtin.c, their
 * parameters and arithmetic model_math.h), visible to the backends so a GPU kernel can fuse a
 * built-in gradient into its own loop instead of calling through the ABI, and to
 * cuda/targets_builtin.cu, which evaluates every built-in on the GPU. */
#ifndef DSAMPLER_TARGETS_BUILTIN_H
#define DSAMPLER_TARGETS_BUILTIN_H

#include <stdio.h>

#include "dsampler_target.h"
#include "model_math.h" /* builtin_kind_t, builtin_params_t */

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *params and returns 1 when t is the built-in gaussian with one mean and one scale
 * for every dimension (the form the fused CUDA HMC kernel takes), else 0. */
int builtin_target_params(const dsampler_target *t, builtin_params_t *params);
/* The parameters of any built-in target, or NULL when t is not a built-in. */
const builtin_params_t *builtin_target_lookup(const dsampler_target *t);

/* Creates a built-in target by name; args as for plugins ("dim=64,mean=0,scale=1"). comm is
 * used to read data files collectively (every rank calls this with the same args). */
int builtin_target_create(const char *name, const char *args, MPI_Comm comm, dsampler_target *out);
/* Makes the logistic target's next evaluations use minibatch `iteration` of batch_size rows
 * (0: every row again). DS_ERR_INPUT, naming --batch-size, for any other target or a batch larger
 * than the data. */
int builtin_target_set_batch(const dsampler_target *t, int64_t batch_size, uint64_t seed, int64_t iteration);
/* Prints each built-in with its parameters (`dsampler targets`). */
void builtin_targets_print(FILE *out);

/* 1 when `name` is a built-in target, with *key its file argument ("cov", "data") or NULL. */
int builtin_target_file_key(const char *name, const char **key);
/* The destroy entry of every built-in: frees its parameters (and their device state). A target
 * is a built-in when this is its destroy. */
void builtin_params_free(void *self);

#ifdef __cplusplus
}
#endif
#endif
