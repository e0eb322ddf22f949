/* exactsum.h: exact sums of doubles in fixed point, so a total over all chains of all ranks
 * is the same bits whatever the rank count and the order of the additions (pooled adaptation
 * must not depend on how chains are split). Inputs: floats, squares of floats, and values in
 * [0, 1]: anything whose bits lie between 2^-360 and 2^370. */
#ifndef DSAMPLER_EXACTSUM_H
#define DSAMPLER_EXACTSUM_H

#include <stdint.h>

#include "comm.h"
#include "exactsum_core.h"

void exact_sum_clear(exact_sum_t *s);
/* Adds v exactly; v must be finite and 0 or within the range above (returns -1 if not). */
int exact_sum_add(exact_sum_t *s, double v);
/* into += from, exactly (from is left as it was). */
void exact_sum_merge(exact_sum_t *into, const exact_sum_t *from);
/* Brings every digit into [0, 2^32) (the top one keeps the sign): a canonical form. */
void exact_sum_normalize(exact_sum_t *s);
/* The sum rounded to a double (deterministic: computed from the canonical form). */
double exact_sum_value(exact_sum_t *s);
/* Sums `count` accumulators over all ranks, in place. Collective. */
int exact_sum_allreduce(comm_ctx_t *comm, exact_sum_t *sums, int64_t count);

#endif
