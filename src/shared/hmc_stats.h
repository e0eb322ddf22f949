/* hmc_stats.h: the one list of HMC's per-draw sample statistics (the output's sample_stats
 * group, in its order). Everything that handles them expands this list: the transition's output
 * arrays in hmc_batch_t, the draw block's arrays in hmc_draw_block_t, their allocation and
 * download (backend.h), the record step of both backends, the writer's groups and the output's
 * size (hmc.c). A new statistic is a row here plus the code that computes it.
 *
 * HMC_SAMPLE_STATS(X) calls X(name, type, dtype, source, member) once per statistic:
 *   name    the output variable, and the member of hmc_draw_block_t holding it ([rows, capacity]);
 *   type    its C type in the block and in the output file;
 *   dtype   its file type, as h5out's H5OUT_<dtype>;
 *   source  where chain c's value is in hmc_batch_t after a transition:
 *             OUTPUT  batch.member[c], an [n_chains] output of the transition, declared and
 *                     allocated from this list (hmc_batch_alloc_stats);
 *             STATE   batch.member[c], part of the chains' state, declared and kept apart;
 *             SCALAR  batch.member, one value for every chain;
 *   member  that member of hmc_batch_t.
 * The OUTPUT members are, per chain: accept_prob min(1, exp(H0 - H1)), 0 when divergent;
 * step_size the step used; diverging 1 when divergent; energy the Hamiltonian at the state kept. */
#ifndef DSAMPLER_HMC_STATS_H
#define DSAMPLER_HMC_STATS_H

#include <stdint.h>

#define HMC_SAMPLE_STATS(X)                                         \
  X(lp, float, FLOAT32, STATE, logp)                                \
  X(acceptance_rate, float, FLOAT32, OUTPUT, accept_prob)           \
  X(step_size, float, FLOAT32, OUTPUT, step_size)                   \
  X(diverging, uint8_t, BOOL, OUTPUT, diverging)                    \
  X(energy, float, FLOAT32, OUTPUT, energy)                         \
  X(n_steps, int32_t, INT32, SCALAR, n_leapfrog)

/* Chain `chain`'s value of a statistic read from `source` `member` of the batch `batch` (a
 * struct, not a pointer). */
#define HMC_STAT_READ(source, batch, member, chain) HMC_STAT_READ_##source(batch, member, chain)
#define HMC_STAT_READ_OUTPUT(batch, member, chain) ((batch).member[chain])
#define HMC_STAT_READ_STATE(batch, member, chain) ((batch).member[chain])
#define HMC_STAT_READ_SCALAR(batch, member, chain) ((batch).member)

/* Member declarations: the block's array of each statistic, the batch's OUTPUT arrays. */
#define HMC_STAT_BLOCK_MEMBER(name, type, dtype, source, member) type *name;
#define HMC_STAT_BATCH_MEMBER(name, type, dtype, source, member) HMC_STAT_BATCH_MEMBER_##source(type, member)
#define HMC_STAT_BATCH_MEMBER_OUTPUT(type, member) type *member;
#define HMC_STAT_BATCH_MEMBER_STATE(type, member)
#define HMC_STAT_BATCH_MEMBER_SCALAR(type, member)

/* 1 for a statistic whose source is one of the batch's OUTPUT arrays. */
#define HMC_STAT_IS_OUTPUT(source) HMC_STAT_IS_OUTPUT_##source
#define HMC_STAT_IS_OUTPUT_OUTPUT 1
#define HMC_STAT_IS_OUTPUT_STATE 0
#define HMC_STAT_IS_OUTPUT_SCALAR 0

#define HMC_STAT_COUNT_ONE(name, type, dtype, source, member) +1
#define HMC_STAT_BYTES_ONE(name, type, dtype, source, member) +(int)sizeof(type)
enum {
  HMC_N_STATS = 0 HMC_SAMPLE_STATS(HMC_STAT_COUNT_ONE),
  /* Bytes a kept draw of one chain takes in the output besides its position. */
  HMC_STATS_BYTES_PER_DRAW = 0 HMC_SAMPLE_STATS(HMC_STAT_BYTES_ONE)
};

#endif
