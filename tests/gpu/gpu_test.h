/* gpu_test.h: small helpers shared by the GPU tests: seeded inputs, norms, and a check macro
 * that prints the measured value next to its tolerance. Header-only; each test is one file. */
#ifndef DSAMPLER_GPU_TEST_H
#define DSAMPLER_GPU_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

#define GPU_TEST_SKIP 77

static int gpu_test_failures;

/* A test program's cases in named sections, each its own CTest test (tests/gpu/CMakeLists.txt):
 * `program SECTION` runs one, `program` all of them; an unknown name is an error (exit 2). */
typedef struct gpu_test_section {
  const char *name;
  void (*run)(void);
} gpu_test_section_t;

static inline int gpu_test_run_sections(const gpu_test_section_t *sections, int count, int argc, char **argv) {
  int ran = 0;
  for (int i = 0; i < count; ++i) {
    if (argc > 1 && strcmp(argv[1], sections[i].name) != 0) continue;
    printf("[%s]\n", sections[i].name);
    sections[i].run();
    ++ran;
  }
  if (ran == 0) {
    fprintf(stderr, "no section named '%s'\n", argc > 1 ? argv[1] : "");
    return 2;
  }
  printf("%s: %d failure(s)\n", gpu_test_failures ? "FAILED" : "passed", gpu_test_failures);
  return gpu_test_failures ? 1 : 0;
}

/* A failed check is reported and counted; the test goes on so one run shows every failure. */
#define GPU_EXPECT(cond, ...)                                                  \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);          \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
      ++gpu_test_failures;                                                     \
    }                                                                          \
  } while (0)

/* A library call that must succeed: reports the recorded error and ends the test. */
#define GPU_TRY(call)                                                          \
  do {                                                                         \
    int gpu_try_status_ = (call);                                              \
    if (gpu_try_status_ != DS_OK) {                                            \
      fprintf(stderr, "FAIL %s:%d: %s returned %d: %s\n", __FILE__, __LINE__,  \
              #call, gpu_try_status_, ds_error_message());                     \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* splitmix64: seeded, reproducible test inputs. */
static inline uint64_t test_rng_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double test_rng_uniform(uint64_t *state) {
  return ((double)(test_rng_next(state) >> 11) + 0.5) * 0x1p-53;
}
static inline double test_rng_normal(uint64_t *state) {
  double u = test_rng_uniform(state), v = test_rng_uniform(state);
  return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
static inline void test_fill_normal(float *x, int64_t count, double scale, uint64_t seed) {
  uint64_t state = seed;
  for (int64_t e = 0; e < count; ++e) x[e] = (float)(scale * test_rng_normal(&state));
}

/* ||a - b|| / ||b|| in double. */
static inline double test_rel_err(const float *a, const float *b, int64_t count) {
  double num = 0.0, den = 0.0;
  for (int64_t e = 0; e < count; ++e) {
    double d = (double)a[e] - (double)b[e];
    num += d * d;
    den += (double)b[e] * (double)b[e];
  }
  return den > 0.0 ? sqrt(num / den) : sqrt(num);
}

static inline void *test_malloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "FAIL: out of host memory (%zu bytes)\n", bytes);
    exit(1);
  }
  return p;
}

#endif
