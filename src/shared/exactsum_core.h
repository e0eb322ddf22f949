/* exactsum_core.h: the fixed-point accumulator behind exact sums (exactsum.h), as inline
 * functions compiled for the host and the GPU, so a sum taken by a kernel and one taken by the
 * CPU backend are the same digits. Digits are 32-bit values held in int64, least significant
 * first; digit i weighs 2^(32 i - 360). Adding a double spreads its 53-bit mantissa over three
 * digits; integer additions commute, so the total does not depend on the order. */
#ifndef DSAMPLER_EXACTSUM_CORE_H
#define DSAMPLER_EXACTSUM_CORE_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define EXACT_FN __host__ __device__ __forceinline__ static
#else
#define EXACT_FN static inline
#endif

#define EXACT_DIGITS 24
#define EXACT_LSB_EXPONENT (-360)

typedef struct exact_sum {
  int64_t digit[EXACT_DIGITS];
  int64_t pending; /* additions since the last normalisation */
} exact_sum_t;

/* Adds v to digits[0 .. EXACT_DIGITS) exactly; returns -1 (adding nothing) when v is not
 * finite or outside [2^-307, 2^370). Each digit grows by less than 2^32. */
EXACT_FN int exact_digits_add(int64_t *digits, double v) {
  if (v == 0.0) return 0;
  if (!isfinite(v)) return -1;
  int exponent;
  const double fraction = frexp(fabs(v), &exponent); /* |v| = fraction 2^exponent, fraction in [0.5, 1) */
  const int64_t mantissa = (int64_t)ldexp(fraction, 53); /* exact: 53 bits */
  const int shift = exponent - 53 - EXACT_LSB_EXPONENT;   /* bit position of the mantissa's LSB */
  if (shift < 0 || shift + 53 > 32 * (EXACT_DIGITS - 1)) return -1;
  const int index = shift / 32, offset = shift % 32;
  /* The mantissa shifted by offset (<= 84 bits) over three 32-bit digits. */
  const uint64_t low = (uint64_t)mantissa << offset;
  const uint64_t high = offset ? (uint64_t)mantissa >> (64 - offset) : 0;
  const int64_t sign = v < 0 ? -1 : 1;
  digits[index] += sign * (int64_t)(low & 0xFFFFFFFFu);
  digits[index + 1] += sign * (int64_t)(low >> 32);
  if (index + 2 < EXACT_DIGITS) digits[index + 2] += sign * (int64_t)high;
  return 0;
}

#endif
