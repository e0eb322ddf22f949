/* wgmma_f16.cuh: Hopper's warpgroup products (wgmma.mma_async, sm_90a) for the fp16 split
 * tiles of mma_f16.cuh: A from registers, B from shared memory, float32 accumulators.
 *
 * A warpgroup is 4 consecutive warps (128 threads); an m64nNk16 product takes 64 rows, warp w
 * of the group rows 16 w .. 16 w + 15 with the A fragment of mma.sync.m16n8k16 (mma_f16.cuh:
 * a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9],
 * a[3] = A[g+8][2t+8, 2t+9]), and its accumulators as N / 8 C tiles of mma.sync side by side:
 * d[4 i + e] = D[g + 8 (e / 2)][8 i + 2 t + e % 2] (PTX ISA, "Register fragment" of wgmma).
 *
 * B is K-major in shared memory with the 128-byte swizzle: row r of N (64 fp16 = 128 bytes of
 * K) at byte 128 r, its 16-byte chunk q at chunk q ^ (r % 8), the tile on 1024 bytes; the
 * descriptor's stride between 8-row groups is 1024 bytes, and the k16 step s starts 32 s bytes
 * in (the hardware applies the swizzle to the address). Products run asynchronously: issue,
 * wgmma_commit(), then wgmma_wait() before the accumulators are read; wgmma_fence() orders
 * register writes before the products that read them. */
#ifndef DSAMPLER_WGMMA_F16_CUH
#define DSAMPLER_WGMMA_F16_CUH

#include <stdint.h>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSAMPLER_WGMMA_DEVICE 1
#endif

/* Byte offset of element (r, k) of a 128-byte-swizzled K-major tile of 64 fp16 columns of K. */
__host__ __device__ __forceinline__ int wgmma_swizzle128(int r, int byte_in_row) {
  return 128 * r + ((((byte_in_row >> 4) ^ (r & 7)) << 4) | (byte_in_row & 15));
}

/* The descriptor of a 128-byte-swizzled K-major tile at smem (1024-byte aligned), k16 step 0. */
__device__ __forceinline__ uint64_t wgmma_desc128(const void *smem) {
  const uint32_t a = (uint32_t)__cvta_generic_to_shared(smem);
  return (uint64_t)((a & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The descriptor of k16 step s of that tile. */
__device__ __forceinline__ uint64_t wgmma_desc_step(uint64_t desc, int s) { return desc + (uint64_t)(2 * s); }

#ifdef DSAMPLER_WGMMA_DEVICE
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
/* Generic-proxy writes to shared memory (cp.async, st.shared) made visible to wgmma's reads. */
__device__ __forceinline__ void wgmma_fence_shared() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Shared-memory barriers (mbarrier) for a pipeline of staged tiles: a stage is full when every
 * thread's copies into it have landed, empty when every thread is done reading it. */
__device__ __forceinline__ void mbar_init(uint64_t *bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(
                   (uint32_t)__cvta_generic_to_shared(bar))
               : "memory");
}
/* The calling thread's arrival, once its cp.async copies issued so far have landed. */
__device__ __forceinline__ void mbar_arrive_copies(uint64_t *bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar))
               : "memory");
}
/* Waits until the phase of the given parity has completed. */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n}\n" ::"r"((uint32_t)__cvta_generic_to_shared(bar)),
      "r"(parity)
      : "memory");
}

/* Keeps the compiler from moving reads or writes of r across an asynchronous product. */
template <int COUNT>
__device__ __forceinline__ void wgmma_fence_operands(float (&r)[COUNT]) {
#pragma unroll
  for (int i = 0; i < COUNT; ++i) asm volatile("" : "+f"(r[i])::"memory");
}

/* d = (accumulate ? d : 0) + A B on an m64n64k16 tile, A in registers, B by descriptor. */
__device__ __forceinline__ void wgmma_m64n64k16(float (&d)[32], const uint32_t a[4], uint64_t desc_b, int accumulate) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));
}

/* d = lo.hi, then + hi.lo, then + hi.hi over the 4 k16 steps of a 64-wide K: the one product
 * chain of an fp16 hi/lo split (A fragments a_hi, a_lo; B tiles at hi_desc, lo_desc), from 0. */
__device__ __forceinline__ void wgmma_split_chain(float (&d)[32], const uint32_t a_hi[4][4], const uint32_t a_lo[4][4],
                                                  uint64_t hi_desc, uint64_t lo_desc) {
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16(d, a_lo[ks], wgmma_desc_step(hi_desc, ks), ks > 0);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16(d, a_hi[ks], wgmma_desc_step(lo_desc, ks), 1);
#pragma unroll
  for (int ks = 0; ks < 4; ++ks) wgmma_m64n64k16(d, a_hi[ks], wgmma_desc_step(hi_desc, ks), 1);
}

#endif

#endif
