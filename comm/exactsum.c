/* exactsum.c: fixed-point exact summation (see exactsum.h). */
#include "exactsum.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

void exact_sum_clear(exact_sum_t *s) { memset(s, 0, sizeof *s); }

void exact_sum_normalize(exact_sum_t *s) {
  int64_t carry = 0;
  for (int i = 0; i < EXACT_DIGITS - 1; ++i) {
    int64_t value = s->digit[i] + carry;
    /* Floor division by 2^32, so the digit left is in [0, 2^32). */
    carry = value >> 32;
    s->digit[i] = value - carry * ((int64_t)1 << 32);
  }
  s->digit[EXACT_DIGITS - 1] += carry;
  s->pending = 0;
}

int exact_sum_add(exact_sum_t *s, double v) {
  if (exact_digits_add(s->digit, v) != 0) return -1;
  /* Each digit grows by < 2^32 per addition: normalise long before int64 could overflow. */
  if (++s->pending >= ((int64_t)1 << 29)) exact_sum_normalize(s);
  return 0;
}

void exact_sum_merge(exact_sum_t *into, const exact_sum_t *from) {
  exact_sum_t addend = *from;
  exact_sum_normalize(&addend);
  exact_sum_normalize(into);
  for (int i = 0; i < EXACT_DIGITS; ++i) into->digit[i] += addend.digit[i];
  into->pending = 1;
}

double exact_sum_value(exact_sum_t *s) {
  exact_sum_normalize(s);
  /* From the most significant digit down; the canonical digits make this deterministic. */
  double value = 0.0;
  for (int i = EXACT_DIGITS - 1; i >= 0; --i) value += ldexp((double)s->digit[i], 32 * i + EXACT_LSB_EXPONENT);
  return value;
}

int exact_sum_allreduce(comm_ctx_t *comm, exact_sum_t *sums, int64_t count) {
  if (count == 0) return DS_OK;
  int64_t *digits = malloc((size_t)(count * EXACT_DIGITS) * sizeof *digits);
  if (!digits) return DS_FAIL_ALLOC("exact sums", (size_t)(count * EXACT_DIGITS) * sizeof(int64_t));
  for (int64_t c = 0; c < count; ++c) {
    exact_sum_normalize(&sums[c]);
    memcpy(digits + c * EXACT_DIGITS, sums[c].digit, sizeof sums[c].digit);
  }
  /* Normalised digits are < 2^32, so a sum over fewer than 2^31 ranks fits an int64. */
  int rc = MPI_Allreduce(MPI_IN_PLACE, digits, (int)(count * EXACT_DIGITS), MPI_INT64_T, MPI_SUM, comm->world);
  if (rc == MPI_SUCCESS)
    for (int64_t c = 0; c < count; ++c) {
      memcpy(sums[c].digit, digits + c * EXACT_DIGITS, sizeof sums[c].digit);
      exact_sum_normalize(&sums[c]);
    }
  free(digits);
  if (rc != MPI_SUCCESS) return comm_mpi_fail(rc, __FILE__, __LINE__, "MPI_Allreduce(exact sums)");
  return DS_OK;
}
