/* test_gpu_philox.cu: the Philox words of rng.h, computed in a kernel, against the same
 * function on the host and against cuRAND's own Philox4_32_10 stream for
 * curand_init(seed, item, (iteration << 34) + 4 * block) (exact); and the uniform and
 * normal transforms on the device against the host (within a few ulps: the device's logf,
 * sinf and cosf are not glibc's). Exits 77 without a GPU. */
#include <curand_kernel.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "gpu_test.h"
#include "rng.h"

namespace {

constexpr int ITEMS = 1024, BLOCKS = 24, ITERATIONS = 5;
__constant__ uint32_t iterations_d[ITERATIONS] = {0u, 1u, 7u, 123456u, (1u << 30) - 1u};
const uint32_t iterations_h[ITERATIONS] = {0u, 1u, 7u, 123456u, (1u << 30) - 1u};

/* items include ids past 2^32, whose high word goes to the counter's last word */
__host__ __device__ uint64_t item_of(int i) { return i % 2 ? (uint64_t)i : (1ull << 32) + 977ull * (uint64_t)i; }

__global__ void philox_words_kernel(uint64_t seed, uint32_t *ours, uint32_t *curand_words, float *normals,
                                    float *uniforms) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= ITEMS * ITERATIONS) return;
  const int i = t % ITEMS, it = t / ITEMS;
  const uint64_t item = item_of(i);
  for (int block = 0; block < BLOCKS; ++block) {
    const size_t at = ((size_t)t * BLOCKS + block) * 4;
    const rng_words_t w = rng_block(seed, item, iterations_d[it], (uint32_t)block);
    curandStatePhilox4_32_10_t state;
    curand_init(seed, item, ((unsigned long long)iterations_d[it] << 34) + 4ull * (unsigned long long)block, &state);
    const uint4 c = curand4(&state);
    ours[at] = w.v[0]; ours[at + 1] = w.v[1]; ours[at + 2] = w.v[2]; ours[at + 3] = w.v[3];
    curand_words[at] = c.x; curand_words[at + 1] = c.y; curand_words[at + 2] = c.z; curand_words[at + 3] = c.w;
    rng_normal_pair(w.v[0], w.v[1], &normals[at], &normals[at + 1]);
    rng_normal_pair(w.v[2], w.v[3], &normals[at + 2], &normals[at + 3]);
    for (int e = 0; e < 4; ++e) uniforms[at + e] = rng_uniform(w.v[e]);
  }
}

int run() {
  const size_t words = (size_t)ITEMS * ITERATIONS * BLOCKS * 4;
  const uint64_t seed = 0x0123456789ABCDEFull;
  uint32_t *ours_d, *curand_d;
  float *normals_d, *uniforms_d;
  CUDA_CHECK(cudaMalloc(&ours_d, words * sizeof(uint32_t)));
  CUDA_CHECK(cudaMalloc(&curand_d, words * sizeof(uint32_t)));
  CUDA_CHECK(cudaMalloc(&normals_d, words * sizeof(float)));
  CUDA_CHECK(cudaMalloc(&uniforms_d, words * sizeof(float)));
  philox_words_kernel<<<(ITEMS * ITERATIONS + 127) / 128, 128>>>(seed, ours_d, curand_d, normals_d, uniforms_d);
  CUDA_CHECK_LAUNCH("philox_words_kernel");
  CUDA_CHECK(cudaDeviceSynchronize());
  uint32_t *ours = (uint32_t *)test_malloc(words * sizeof(uint32_t)), *cur = (uint32_t *)test_malloc(words * sizeof(uint32_t));
  float *normals = (float *)test_malloc(words * sizeof(float)), *uniforms = (float *)test_malloc(words * sizeof(float));
  CUDA_CHECK(cudaMemcpy(ours, ours_d, words * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(cur, curand_d, words * sizeof(uint32_t), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(normals, normals_d, words * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(uniforms, uniforms_d, words * sizeof(float), cudaMemcpyDeviceToHost));

  size_t host_mismatch = 0, curand_mismatch = 0, uniform_mismatch = 0;
  double normal_err = 0.0;
  for (int t = 0; t < ITEMS * ITERATIONS; ++t) {
    const int i = t % ITEMS, it = t / ITEMS;
    for (int block = 0; block < BLOCKS; ++block) {
      const size_t at = ((size_t)t * BLOCKS + block) * 4;
      const rng_words_t w = rng_block(seed, item_of(i), iterations_h[it], (uint32_t)block);
      float z[4];
      rng_normal_pair(w.v[0], w.v[1], &z[0], &z[1]);
      rng_normal_pair(w.v[2], w.v[3], &z[2], &z[3]);
      for (int e = 0; e < 4; ++e) {
        host_mismatch += ours[at + e] != w.v[e];
        curand_mismatch += cur[at + e] != w.v[e];
        uniform_mismatch += uniforms[at + e] != rng_uniform(w.v[e]);
        normal_err = fmax(normal_err, fabs((double)normals[at + e] - (double)z[e]) / fmax(1.0, fabs((double)z[e])));
      }
    }
  }
  printf("%zu words: device vs host mismatches %zu, device vs cuRAND mismatches %zu, uniform mismatches %zu, "
         "normal max rel err %.3g\n", words, host_mismatch, curand_mismatch, uniform_mismatch, normal_err);
  /* Words and uniforms: exact. Normals: 8 float ulps relative to max(1, |z|). */
  GPU_EXPECT(host_mismatch == 0, "device Philox words differ from the host's");
  GPU_EXPECT(curand_mismatch == 0, "rng_block differs from cuRAND's stream");
  GPU_EXPECT(uniform_mismatch == 0, "device uniforms differ from the host's");
  GPU_EXPECT(normal_err <= 8 * 1.1920929e-7, "device normals differ from the host's by %.3g", normal_err);
  free(ours); free(cur); free(normals); free(uniforms);
  CUDA_CHECK(cudaFree(ours_d));
  CUDA_CHECK(cudaFree(curand_d));
  CUDA_CHECK(cudaFree(normals_d));
  CUDA_CHECK(cudaFree(uniforms_d));
  return DS_OK;
}

} /* namespace */

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("no CUDA device: skipped\n");
    return GPU_TEST_SKIP;
  }
  GPU_TRY(run());
  printf("%s: %d failure(s)\n", gpu_test_failures ? "FAILED" : "passed", gpu_test_failures);
  return gpu_test_failures ? 1 : 0;
}
