/* test_philox.c: rng.h's Philox4x32-10 against the published known-answer vectors (Random123's
 * kat_vectors), and the keying of rng_block. */
#include <stdio.h>
#include <string.h>

#include "rng.h"

static int failures;

static void expect_words(const char *what, rng_words_t got, const uint32_t want[4]) {
  if (memcmp(got.v, want, sizeof got.v) != 0) {
    printf("FAIL %s: got %08x %08x %08x %08x, want %08x %08x %08x %08x\n", what, got.v[0], got.v[1], got.v[2],
           got.v[3], want[0], want[1], want[2], want[3]);
    failures++;
  }
}

int main(void) {
  /* philox4x32 10 rounds, from Random123 1.09 kat_vectors. */
  struct { uint32_t ctr[4], key[2], out[4]; } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (size_t i = 0; i < sizeof kat / sizeof kat[0]; ++i) {
    rng_words_t counter;
    memcpy(counter.v, kat[i].ctr, sizeof counter.v);
    char what[32];
    snprintf(what, sizeof what, "kat %zu", i);
    expect_words(what, rng_philox4x32_10(counter, kat[i].key[0], kat[i].key[1]), kat[i].out);
  }
  /* rng_block places (block, iteration, item) in the counter and the seed in the key. */
  rng_words_t counter = {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
  rng_words_t want = rng_philox4x32_10(counter, 0xa4093822, 0x299f31d0);
  expect_words("rng_block keying",
               rng_block(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3, 0x243f6a88), want.v);

  /* Uniforms lie in (0, 1]; normals from extreme words stay finite. */
  float u_low = rng_uniform(0), u_high = rng_uniform(0xffffffffu);
  if (!(u_low > 0.0f && u_low < 1e-9f && u_high <= 1.0f)) {
    printf("FAIL uniform range: %g %g\n", (double)u_low, (double)u_high);
    failures++;
  }
  float z0, z1;
  rng_normal_pair(0, 0x40000000u, &z0, &z1);
  if (!(isfinite(z0) && isfinite(z1) && fabsf(z0) < 7.0f)) {
    printf("FAIL normal from the smallest word: %g %g\n", (double)z0, (double)z1);
    failures++;
  }
  printf("%s\n", failures ? "philox: FAILED" : "philox: all checks passed");
  return failures ? 1 : 0;
}
