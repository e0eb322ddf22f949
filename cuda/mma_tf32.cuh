/* mma_tf32.cuh: float32 products on the tensor cores by split precision (3xTF32), for the
 * GEMM-shaped kernels (the fused logistic kernel, SVGD beyond 128 coordinates).
 *
 * A float a is split into a_hi + a_lo, each a TF32 value (10 + 1 mantissa bits), and b the same
 * way; a * b is taken as a_lo b_hi + a_hi b_lo + a_hi b_hi, small terms first, into a float
 * accumulator. The dropped a_lo b_lo and the cut of a_lo and b_lo leave about 2^-21 of |a b| per
 * product, near float32's 2^-24.
 *
 * The tensor cores add into the accumulator with truncation, not round to nearest: over a long
 * chain of mma steps the error grows with the number of steps and one-sidedly. Callers keep the
 * mma chains short (a tile of 64 or so) and add each tile's result into a float sum with
 * ordinary rounded additions.
 *
 * Fragments are those of mma.sync.m16n8k8 with .tf32 operands (PTX ISA, "Matrix fragments for
 * mma.m16n8k8"): with g = lane / 4 and t = lane % 4,
 *   A (16 x 8, row major): a[0] = A[g][t], a[1] = A[g + 8][t], a[2] = A[g][t + 4], a[3] = A[g + 8][t + 4]
 *   B (8 x 8, column major): b[0] = B[t][g], b[1] = B[t + 4][g]
 *   C (16 x 8): c[0] = C[g][2t], c[1] = C[g][2t + 1], c[2] = C[g + 8][2t], c[3] = C[g + 8][2t + 1]
 * An output element depends only on its row of A, its column of B and its own accumulator, so
 * a result does not depend on what else shares the tile. */
#ifndef DSAMPLER_MMA_TF32_CUH
#define DSAMPLER_MMA_TF32_CUH

#include <stdint.h>

struct tf32_frag_a {
  uint32_t hi[4], lo[4];
};
struct tf32_frag_b {
  uint32_t hi[2], lo[2];
};

/* x = hi + lo + (a rest below 2^-22 |x|): hi is x rounded to 11 significant bits (half away
 * from zero, by integer arithmetic on the bits), lo = x - hi (exact) cut to 11 bits toward zero.
 * Both leave the 13 low bits clear, exactly the values the tensor cores use. */
__device__ __forceinline__ void tf32_split(float x, uint32_t *hi, uint32_t *lo) {
  *hi = (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
  *lo = __float_as_uint(__fsub_rn(x, __uint_as_float(*hi))) & 0xffffe000u;
}

/* An A fragment from its four floats a[0..3] (layout above), split. */
__device__ __forceinline__ tf32_frag_a tf32_frag_a_of(float a0, float a1, float a2, float a3) {
  tf32_frag_a a;
  tf32_split(a0, &a.hi[0], &a.lo[0]);
  tf32_split(a1, &a.hi[1], &a.lo[1]);
  tf32_split(a2, &a.hi[2], &a.lo[2]);
  tf32_split(a3, &a.hi[3], &a.lo[3]);
  return a;
}

/* A B fragment from its two floats b[0], b[1], split. */
__device__ __forceinline__ tf32_frag_b tf32_frag_b_of(float b0, float b1) {
  tf32_frag_b b;
  tf32_split(b0, &b.hi[0], &b.lo[0]);
  tf32_split(b1, &b.hi[1], &b.lo[1]);
  return b;
}

/* c += A B on one m16n8k8 tile, operands already in tf32. */
__device__ __forceinline__ void mma_tf32_m16n8k8(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* c += A B in 3xTF32: the two cross terms, then the large one. */
__device__ __forceinline__ void mma_3xtf32(float c[4], const tf32_frag_a &a, const tf32_frag_b &b) {
  mma_tf32_m16n8k8(c, a.lo, b.hi);
  mma_tf32_m16n8k8(c, a.hi, b.lo);
  mma_tf32_m16n8k8(c, a.hi, b.hi);
}

#endif
