/* rng.h: Philox4x32-10 and the transforms from its raw 32-bit words to uniforms and normals,
 * shared verbatim by the CPU backend and the CUDA kernels so both draw the same numbers.
 *
 * Keying (DESIGN.md): key = seed; counter = (block, iteration, item_lo, item_hi), where item
 * is the global chain or particle id and block numbers the 4-word blocks drawn for that item in
 * that iteration. This is the stream cuRAND's curand_init(seed, item, (iteration << 34) +
 * 4 * block, &state) produces, so kernels may use either. */
#ifndef DSAMPLER_RNG_H
#define DSAMPLER_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define RNG_FN __host__ __device__ __forceinline__ static
#else
#define RNG_FN static inline
#endif

/* The iteration number reserved for drawing initial positions. */
#define RNG_ITERATION_INIT 0xFFFFFFFFu
/* The iteration number reserved for choosing the healthy chain a stuck chain restarts from. */
#define RNG_ITERATION_RESTART 0xFFFFFFFEu
/* The iteration number reserved for the keys of a target's output variables (a Stan model's
 * generated quantities): block = 2 draw + phase (0 warmup, 1 sampling), keyed by chain. */
#define RNG_ITERATION_OUTPUT 0xFFFFFFFDu

typedef struct { uint32_t v[4]; } rng_words_t;

RNG_FN uint32_t rng_mulhilo(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t product = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(product >> 32);
  return (uint32_t)product;
}

/* Philox4x32 with 10 rounds (Salmon et al., SC'11), as in Random123 and cuRAND. */
RNG_FN rng_words_t rng_philox4x32_10(rng_words_t counter, uint32_t key0, uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = rng_mulhilo(0xD2511F53u, counter.v[0], &hi0);
    uint32_t lo1 = rng_mulhilo(0xCD9E8D57u, counter.v[2], &hi1);
    rng_words_t next;
    next.v[0] = hi1 ^ counter.v[1] ^ key0;
    next.v[1] = lo1;
    next.v[2] = hi0 ^ counter.v[3] ^ key1;
    next.v[3] = lo0;
    counter = next;
    key0 += 0x9E3779B9u;
    key1 += 0xBB67AE85u;
  }
  return counter;
}

/* The 4 words of block `block` for (seed, item, iteration). */
RNG_FN rng_words_t rng_block(uint64_t seed, uint64_t item, uint32_t iteration, uint32_t block) {
  rng_words_t counter;
  counter.v[0] = block;
  counter.v[1] = iteration;
  counter.v[2] = (uint32_t)item;
  counter.v[3] = (uint32_t)(item >> 32);
  return rng_philox4x32_10(counter, (uint32_t)seed, (uint32_t)(seed >> 32));
}

/* Minibatches of a target's data (SVGD --batch-size): slot b of iteration t's batch is data row
 * floor(w n / 2^32), w the first word of item RNG_ITEM_DATA_BATCH + b's block 0 for iteration t:
 * rows drawn uniformly with replacement, the same on every rank and backend, above every chain
 * or particle id. */
#define RNG_ITEM_DATA_BATCH 0x8000000000000000ull
RNG_FN int64_t rng_batch_row(uint64_t seed, uint32_t iteration, int64_t slot, int64_t rows) {
  const rng_words_t words = rng_block(seed, RNG_ITEM_DATA_BATCH + (uint64_t)slot, iteration, 0);
  return (int64_t)(((uint64_t)words.v[0] * (uint64_t)rows) >> 32);
}

/* A uniform in (0, 1] from one word, as cuRAND's curand_uniform. */
RNG_FN float rng_uniform(uint32_t word) {
  return (float)word * 2.3283064e-10f + (2.3283064e-10f / 2.0f);
}

/* Two standard normals from two words by Box-Muller. */
RNG_FN void rng_normal_pair(uint32_t word0, uint32_t word1, float *z0, float *z1) {
  float radius = sqrtf(-2.0f * logf(rng_uniform(word0)));
  float angle = 6.2831853f * rng_uniform(word1);
  *z0 = radius * cosf(angle);
  *z1 = radius * sinf(angle);
}

/* Word layout of one HMC iteration for a chain of dimension dim: words [0, 2*ceil(dim/2))
 * give the momentum's normals in Box-Muller pairs, the next word the accept uniform. */
RNG_FN uint32_t rng_hmc_uniform_word(int64_t dim) { return (uint32_t)(2 * ((dim + 1) / 2)); }

/* The step used in one iteration: nominal * (1 + jitter * (2u - 1)), u from `word`; without
 * jitter, nominal. */
RNG_FN float rng_jitter_step(float nominal, float jitter, uint32_t word) {
  if (!(jitter > 0.0f)) return nominal;
  const float u = rng_uniform(word);
  return nominal * (float)(1.0 + (double)jitter * (2.0 * (double)u - 1.0));
}

/* The jitter's word is the one after the accept uniform, in the same block (the uniform's word
 * is even). */
RNG_FN float rng_hmc_jittered_step(uint64_t seed, uint64_t item, uint32_t iteration, int64_t dim, float nominal,
                                   float jitter) {
  if (!(jitter > 0.0f)) return nominal;
  const uint32_t word = rng_hmc_uniform_word(dim) + 1;
  const rng_words_t words = rng_block(seed, item, iteration, word / 4);
  return rng_jitter_step(nominal, jitter, words.v[word % 4]);
}

#endif
