/* mma_f16.cuh: float32-class products on the fp16 tensor cores by split precision, with
 * power-of-two scaling (SVGD's pair tiles up to 64 coordinates).
 *
 * A float x, first scaled by an exact power of two into fp16's range, is split into
 * hi = fp16(x) and lo = fp16(x - hi) (x - hi is exact in float): 11 + 11 significant bits, as
 * TF32's split, wherever hi and lo are normal fp16 numbers. a * b is taken as
 * a_lo b_hi + a_hi b_lo + a_hi b_hi (each product exact in the float accumulator). An
 * m16n8k16 step does twice the multiply-adds of TF32's m16n8k8 in one instruction, and a
 * fragment takes half the registers.
 *
 * Scaling: the caller maps its largest magnitude to [2^14, 2^15) (fp16 ends at 65504), so that
 * values down to 2^-28 of the largest stay normal and nothing overflows; the results are
 * scaled back by the inverse power of two, which is exact.
 *
 * Fragments are those of mma.sync.m16n8k16 with .f16 operands and .f32 accumulators (PTX
 * ISA, "Matrix fragments for mma.m16n8k16 with floating point type"): with g = lane / 4 and
 * t = lane % 4, each register two fp16 values, the lower index in the low half,
 *   A (16 x 16, row major): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
 *                           a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
 *   B (16 x 8, column major): b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
 *   C (16 x 8): c[0] = C[g][2t], c[1] = C[g][2t + 1], c[2] = C[g + 8][2t], c[3] = C[g + 8][2t + 1]
 * so a C tile pair of 8 columns each is, packed, the A fragment of 16 columns. An output element
 * depends only on its row of A, its column of B and its own accumulator. */
#ifndef DSAMPLER_MMA_F16_CUH
#define DSAMPLER_MMA_F16_CUH

#include <cuda_fp16.h>
#include <stdint.h>

/* 2^e as a float, e in [-126, 127]. */
__device__ __forceinline__ float pow2_exact(int e) { return __int_as_float((127 + e) << 23); }

/* floor(log2 |x|) of a float's bits for normal x; -127 for 0 and subnormals, 128 for inf, NaN. */
__device__ __forceinline__ int float_exponent_of_bits(uint32_t bits) { return (int)((bits >> 23) & 0xffu) - 127; }

/* The power-of-two exponent that maps a largest magnitude of exponent e into [2^14, 2^15),
 * kept within [-limit, limit] (limit 56 where the scale's square must invert to a normal float,
 * 126 where the scale itself must). */
__device__ __forceinline__ int f16_scale_exponent(int e, int limit) {
  const int s = 14 - e;
  return s < -limit ? -limit : s > limit ? limit : s;
}

/* hi and lo of two floats, packed (a in the low halves). */
__device__ __forceinline__ void f16_split2(float a, float b, uint32_t *hi, uint32_t *lo) {
  const __half2 h = __floats2half2_rn(a, b);
  const float2 back = __half22float2(h);
  const __half2 l = __floats2half2_rn(__fsub_rn(a, back.x), __fsub_rn(b, back.y));
  *hi = *reinterpret_cast<const uint32_t *>(&h);
  *lo = *reinterpret_cast<const uint32_t *>(&l);
}

/* c += A B on one m16n8k16 tile. */
__device__ __forceinline__ void mma_f16_m16n8k16(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

#endif
