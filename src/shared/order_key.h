/* order_key.h: a float as an unsigned key in the float's order (radix selection: order_stats.h,
 * and the backends' key_histogram). -0 takes +0's key (they compare equal); keys of NaN and
 * infinities are never binned (the histograms count them apart). Host and device. */
#ifndef DSAMPLER_ORDER_KEY_H
#define DSAMPLER_ORDER_KEY_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define ORDER_KEY_FN __host__ __device__ static inline
#else
#define ORDER_KEY_FN static inline
#endif

/* The three levels of a radix selection: key bits [21, 32), [10, 21), [0, 10). */
#define ORDER_KEY_LEVELS 3
#define ORDER_KEY_MAX_BITS 11
ORDER_KEY_FN int order_key_shift(int level) { return level == 0 ? 21 : level == 1 ? 10 : 0; }
ORDER_KEY_FN int order_key_bits(int level) { return level == 2 ? 10 : 11; }

ORDER_KEY_FN uint32_t order_key_of_bits(uint32_t u) {
  if (u == 0x80000000u) u = 0u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
ORDER_KEY_FN int order_bits_finite(uint32_t u) { return (u & 0x7f800000u) != 0x7f800000u; }
ORDER_KEY_FN uint32_t order_float_bits(float v) {
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}
ORDER_KEY_FN uint32_t order_key(float v) { return order_key_of_bits(order_float_bits(v)); }
ORDER_KEY_FN float order_key_value(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) ? (key & 0x7fffffffu) : ~key;
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
}

#endif
