// example_banana.cu: the CUDA entry of the example plugin: the same banana density on device
// arrays, one thread per row. dsampler calls it with device pointers and its compute stream.
#include <cuda_runtime.h>

#include "example_banana.h"

__global__ void example_banana_kernel(example_banana_t model, const float *x, long long n, float *logp,
                                      float *grad) {
  const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const long long dim = model.dim;
  const double a2 = model.a * model.a, b = model.b;
  const float *x_i = x + i * dim;
  float *g_i = grad + i * dim;
  double sum = 0.0;
  long long k = 0;
  for (; k + 1 < dim; k += 2) {
    const double u = x_i[k], v = x_i[k + 1];
    const double r = v - b * (u * u - a2);
    sum += -0.5 * u * u / a2 - 0.5 * r * r;
    g_i[k] = (float)(-u / a2 + 2.0 * b * u * r);
    g_i[k + 1] = (float)-r;
  }
  if (k < dim) {
    const double u = x_i[k];
    sum += -0.5 * u * u;
    g_i[k] = (float)-u;
  }
  logp[i] = (float)sum;
}

extern "C" int example_banana_logp_grad_cuda(void *self, const float *x, int64_t n, float *logp, float *grad,
                                             void *stream) {
  if (n <= 0) return 0;
  const example_banana_t model = *static_cast<const example_banana_t *>(self);  // host memory, passed by value
  const int threads = 128;
  const long long blocks = (n + threads - 1) / threads;
  example_banana_kernel<<<(unsigned)blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(model, x, n, logp, grad);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
