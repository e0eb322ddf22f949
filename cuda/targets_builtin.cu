// targets_builtin.cu: the built-in targets on the GPU. The small models run one warp per row
// (lanes across coordinates, the log density summed in double). logistic is two cuBLAS GEMMs
// per block of data rows: Z = W X' (every chain's linear predictor), then the residuals
// R = y - sigmoid(Z) in place, then G = R X. Chains go through in blocks of a fixed size,
// padded with zero rows, and data in blocks of fixed size, so every GEMM has the same shape
// whatever n is: a chain's result does not depend on how many chains a rank holds.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_check.h"
#include "status.h"
#include "targets_builtin.h"
#include "targets_builtin_cuda.h"

namespace {

constexpr int kLogisticChainBlock = 64;     // chains per GEMM (padded)
constexpr int64_t kLogisticRowBlock = 65536; // data rows per GEMM
constexpr int kThreads = 256;

// Device copies of a model's arrays, and logistic's work space.
struct builtin_device_state {
  int device;
  float *means, *inv_scale2s, *precision;
  float *data_x, *data_y;
  cublasHandle_t cublas;
  float *w_block;     // [chain block, dim]
  float *z_block;     // [chain block, row block]: Z, then R
  float *g_block;     // [chain block, dim]
  double *g_sum;      // [chain block, dim]
  double *logp_sum;   // [chain block]
};

// What the row kernel needs, by value: the parameters with device pointers.
struct builtin_view {
  builtin_kind_t kind;
  long long dim;
  float mean, inv_scale2;
  const float *means, *inv_scale2s;
  double rho, scale;
  const float *precision;
  double a, b, sigma;
};

__device__ double warp_sum(double value) {
  for (int width = 16; width >= 1; width /= 2) value += __shfl_xor_sync(0xffffffffu, value, width);
  return value;
}

// One warp per row. The arithmetic follows targets_builtin.c term by term; only the order of
// the log density's sum differs (lanes, then a butterfly).
__global__ void builtin_rows_kernel(builtin_view v, const float *x, long long n, float *logp, float *grad) {
  const long long row = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;  // whole warps leave together
  const long long dim = v.dim;
  const float *x_i = x + row * dim;
  float *g_i = grad + row * dim;
  double sum = 0.0;
  switch (v.kind) {
    case BUILTIN_GAUSSIAN:
      for (long long k = lane; k < dim; k += 32) {
        const float inv = v.inv_scale2s ? v.inv_scale2s[k] : v.inv_scale2;
        const float centred = __fsub_rn(x_i[k], v.means ? v.means[k] : v.mean);
        g_i[k] = __fmul_rn(-centred, inv);
        sum += (double)centred * (double)centred * (double)inv;
      }
      sum *= -0.5;
      break;
    case BUILTIN_CORR_GAUSSIAN: {
      const double c = 1.0 / (v.scale * v.scale * (1.0 - v.rho * v.rho));
      for (long long k = lane; k < dim; k += 32) {
        double qx = 0.0;
        if (v.precision) {
          const float *q_k = v.precision + k * dim;
          for (long long j = 0; j < dim; ++j) qx += (double)q_k[j] * (double)x_i[j];
        } else {
          const double diagonal = dim == 1 ? 1.0 - v.rho * v.rho : (k == 0 || k == dim - 1) ? 1.0 : 1.0 + v.rho * v.rho;
          double t = diagonal * x_i[k];
          if (k > 0) t -= v.rho * x_i[k - 1];
          if (k + 1 < dim) t -= v.rho * x_i[k + 1];
          qx = c * t;
        }
        g_i[k] = (float)-qx;
        sum += (double)x_i[k] * qx;
      }
      sum *= -0.5;
      break;
    }
    case BUILTIN_BANANA: {
      const double a2 = v.a * v.a;
      for (long long pair = lane; 2 * pair < dim; pair += 32) {
        const long long k = 2 * pair;
        const double u = x_i[k];
        if (k + 1 < dim) {
          const double w = x_i[k + 1];
          const double r = w - v.b * (u * u - a2);
          sum += -0.5 * u * u / a2 - 0.5 * r * r;
          g_i[k] = (float)(-u / a2 + 2.0 * v.b * u * r);
          g_i[k + 1] = (float)-r;
        } else {
          sum += -0.5 * u * u;
          g_i[k] = (float)-u;
        }
      }
      break;
    }
    case BUILTIN_MIXTURE1D: {
      const double log_w1 = log(1.0 / 3.0), log_w2 = log(2.0 / 3.0);
      for (long long k = lane; k < dim; k += 32) {
        const double left = (double)x_i[k] + 2.0, right = (double)x_i[k] - 2.0;
        const double a = log_w1 - 0.5 * left * left, b = log_w2 - 0.5 * right * right;
        const double m = a > b ? a : b;
        const double lse = m + log(exp(a - m) + exp(b - m));
        sum += lse;
        g_i[k] = (float)-(exp(a - lse) * left + exp(b - lse) * right);
      }
      break;
    }
    case BUILTIN_FUNNEL: {
      const double level = x_i[0], e = exp(-level);
      double squares = 0.0;
      for (long long k = 1 + lane; k < dim; k += 32) {
        squares += (double)x_i[k] * (double)x_i[k];
        g_i[k] = (float)(-(double)x_i[k] * e);
      }
      squares = warp_sum(squares);
      const double inv_var = 1.0 / (v.sigma * v.sigma), half_rest = 0.5 * (double)(dim - 1);
      if (lane == 0) {
        g_i[0] = (float)(-level * inv_var - half_rest + 0.5 * e * squares);
        logp[row] = (float)(-0.5 * level * level * inv_var - half_rest * level - 0.5 * e * squares);
      }
      return;
    }
    default:
      break;
  }
  sum = warp_sum(sum);
  if (lane == 0) logp[row] = (float)sum;
}

// One block per chain of the block: R = y - sigmoid(Z) in place over `rows` data rows, and the
// chain's sum of y z - log(1 + e^z) added to logp_sum in double (a fixed tree per block).
__global__ void logistic_residual_kernel(float *z_block, const float *y, long long rows, double *logp_sum) {
  __shared__ double partial[kThreads];
  float *z_c = z_block + (long long)blockIdx.x * rows;
  double sum = 0.0;
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) {
    const double z = z_c[r], label = y[r], e = exp(-fabs(z));
    const double softplus = (z > 0 ? z : 0.0) + log1p(e);
    const double sigmoid = z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    sum += label * z - softplus;
    z_c[r] = (float)(label - sigmoid);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if ((int)threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) logp_sum[blockIdx.x] += partial[0];
}

__global__ void add_to_double_kernel(double *sum, const float *value, long long count) {
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x; e < count; e += (long long)gridDim.x * blockDim.x)
    sum[e] += (double)value[e];
}

// One block per real chain: grad = G - w / sigma^2, logp = sum - |w|^2 / (2 sigma^2).
__global__ void logistic_finish_kernel(const float *w, const double *g_sum, const double *logp_sum, long long dim,
                                       double inv_var, float *logp, float *grad) {
  const long long c = blockIdx.x;
  const float *w_c = w + c * dim;
  for (long long k = threadIdx.x; k < dim; k += blockDim.x)
    grad[c * dim + k] = (float)(g_sum[c * dim + k] - (double)w_c[k] * inv_var);
  if (threadIdx.x == 0) {
    double norm2 = 0.0;
    for (long long k = 0; k < dim; ++k) norm2 += (double)w_c[k] * (double)w_c[k];
    logp[c] = (float)(logp_sum[c] - 0.5 * norm2 * inv_var);
  }
}

int grid_of(long long count, int threads) {
  long long blocks = (count + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535;
  return blocks < 1 ? 1 : (int)blocks;
}

void state_release(void *opaque) {
  builtin_device_state *s = static_cast<builtin_device_state *>(opaque);
  if (!s) return;
  int current = -1;
  CUDA_CHECK_NORETURN(cudaGetDevice(&current));
  if (current != s->device) CUDA_CHECK_NORETURN(cudaSetDevice(s->device));
  if (s->cublas) cublasDestroy(s->cublas);
  void *arrays[] = {s->means, s->inv_scale2s, s->precision, s->data_x, s->data_y,
                    s->w_block, s->z_block, s->g_block, s->g_sum, s->logp_sum};
  for (void *a : arrays)
    if (a) CUDA_CHECK_NORETURN(cudaFree(a));
  if (current >= 0 && current != s->device) CUDA_CHECK_NORETURN(cudaSetDevice(current));
  free(s);
}

int upload(float **dst, const float *src, size_t count) {
  if (!src) return DS_OK;
  CUDA_CHECK(cudaMalloc(dst, count * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(*dst, src, count * sizeof(float), cudaMemcpyHostToDevice));
  return DS_OK;
}

int state_fill(const builtin_params_t *p, builtin_device_state *s) {
  CUDA_CHECK(cudaGetDevice(&s->device));
  const size_t dim = (size_t)p->dim;
  DS_TRY(upload(&s->means, p->means, dim));
  DS_TRY(upload(&s->inv_scale2s, p->inv_scale2s, dim));
  DS_TRY(upload(&s->precision, p->precision, dim * dim));
  if (p->kind == BUILTIN_LOGISTIC) {
    DS_TRY(upload(&s->data_x, p->data_x, (size_t)p->n_data * dim));
    DS_TRY(upload(&s->data_y, p->data_y, (size_t)p->n_data));
    const size_t rows = (size_t)(p->n_data < kLogisticRowBlock ? p->n_data : kLogisticRowBlock);
    CUDA_CHECK(cudaMalloc(&s->w_block, kLogisticChainBlock * dim * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s->z_block, kLogisticChainBlock * rows * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s->g_block, kLogisticChainBlock * dim * sizeof(float)));
    CUDA_CHECK(cudaMalloc(&s->g_sum, kLogisticChainBlock * dim * sizeof(double)));
    CUDA_CHECK(cudaMalloc(&s->logp_sum, kLogisticChainBlock * sizeof(double)));
    CUBLAS_CHECK(cublasCreate(&s->cublas));
    // Full float32 arithmetic: no TF32 or other reduced-precision shortcuts.
    CUBLAS_CHECK(cublasSetMathMode(s->cublas, CUBLAS_PEDANTIC_MATH));
  }
  return DS_OK;
}

// The device state, made on first use and kept in the parameters until the target goes.
int state_get(const builtin_params_t *p, builtin_device_state **out) {
  if (p->device) {
    *out = static_cast<builtin_device_state *>(p->device);
    return DS_OK;
  }
  builtin_device_state *s = static_cast<builtin_device_state *>(calloc(1, sizeof *s));
  if (!s) return DS_FAIL_ALLOC("GPU target state", sizeof *s);
  int status = state_fill(p, s);
  if (status != DS_OK) {
    state_release(s);
    return status;
  }
  builtin_params_t *owner = const_cast<builtin_params_t *>(p);  // the target's own heap copy
  owner->device = s;
  owner->device_release = state_release;
  *out = s;
  return DS_OK;
}

int logistic_logp_grad(const builtin_params_t *p, builtin_device_state *s, const float *x, int64_t n, float *logp,
                       float *grad, cudaStream_t stream) {
  const long long dim = p->dim, block = kLogisticChainBlock;
  const float one = 1.0f, zero = 0.0f;
  CUBLAS_CHECK(cublasSetStream(s->cublas, stream));
  for (int64_t c0 = 0; c0 < n; c0 += block) {
    const long long count = n - c0 < block ? n - c0 : block;
    CUDA_CHECK(cudaMemcpyAsync(s->w_block, x + c0 * dim, (size_t)(count * dim) * sizeof(float),
                               cudaMemcpyDeviceToDevice, stream));
    if (count < block)
      CUDA_CHECK(cudaMemsetAsync(s->w_block + count * dim, 0, (size_t)((block - count) * dim) * sizeof(float), stream));
    CUDA_CHECK(cudaMemsetAsync(s->g_sum, 0, (size_t)(block * dim) * sizeof(double), stream));
    CUDA_CHECK(cudaMemsetAsync(s->logp_sum, 0, (size_t)block * sizeof(double), stream));
    for (int64_t r0 = 0; r0 < p->n_data; r0 += kLogisticRowBlock) {
      const int rows = (int)(p->n_data - r0 < kLogisticRowBlock ? p->n_data - r0 : kLogisticRowBlock);
      const float *x_rows = s->data_x + r0 * dim;
      // Column-major views: X rows are [dim, rows] with ld dim, W is [dim, block] with ld dim.
      // Z (col-major [rows, block]) = X_rows' W.
      CUBLAS_CHECK(cublasSgemm(s->cublas, CUBLAS_OP_T, CUBLAS_OP_N, rows, (int)block, (int)dim, &one, x_rows,
                               (int)dim, s->w_block, (int)dim, &zero, s->z_block, rows));
      logistic_residual_kernel<<<(unsigned)block, kThreads, 0, stream>>>(s->z_block, s->data_y + r0, rows,
                                                                          s->logp_sum);
      CUDA_CHECK_LAUNCH("logistic_residual_kernel");
      // G (col-major [dim, block]) = X_rows R.
      CUBLAS_CHECK(cublasSgemm(s->cublas, CUBLAS_OP_N, CUBLAS_OP_N, (int)dim, (int)block, rows, &one, x_rows,
                               (int)dim, s->z_block, rows, &zero, s->g_block, (int)dim));
      add_to_double_kernel<<<grid_of(block * dim, kThreads), kThreads, 0, stream>>>(s->g_sum, s->g_block, block * dim);
      CUDA_CHECK_LAUNCH("add_to_double_kernel");
    }
    const double inv_var = 1.0 / (p->prior_sigma * p->prior_sigma);
    logistic_finish_kernel<<<(unsigned)count, 128, 0, stream>>>(x + c0 * dim, s->g_sum, s->logp_sum, dim, inv_var,
                                                                logp + c0, grad + c0 * dim);
    CUDA_CHECK_LAUNCH("logistic_finish_kernel");
  }
  return DS_OK;
}

}  // namespace

extern "C" int cuda_builtin_logp_grad(const builtin_params_t *p, const float *x, int64_t n, float *logp,
                                      float *grad, void *stream_opaque) {
  if (!p || n < 0 || p->dim < 1 || p->kind == BUILTIN_NONE)
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_logp_grad: bad arguments (n=%lld)", (long long)n);
  if (n == 0) return DS_OK;
  if (p->kind == BUILTIN_LOGISTIC && (p->dim > 0x7FFFFFFF || p->n_data < 1))
    return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_logp_grad: logistic with dim %lld, %lld rows", (long long)p->dim,
                   (long long)p->n_data);
  cudaStream_t stream = static_cast<cudaStream_t>(stream_opaque);
  builtin_device_state *s = nullptr;
  DS_TRY(state_get(p, &s));
  if (p->kind == BUILTIN_LOGISTIC) return logistic_logp_grad(p, s, x, n, logp, grad, stream);

  builtin_view v;
  memset(&v, 0, sizeof v);
  v.kind = p->kind;
  v.dim = p->dim;
  v.mean = p->mean;
  v.inv_scale2 = p->inv_scale2;
  v.means = s->means;
  v.inv_scale2s = s->inv_scale2s;
  v.rho = p->rho;
  v.scale = p->scale;
  v.precision = s->precision;
  v.a = p->banana_a;
  v.b = p->banana_b;
  v.sigma = p->funnel_sigma;
  const long long rows_per_block = kThreads / 32, blocks = (n + rows_per_block - 1) / rows_per_block;
  if (blocks > 0x7FFFFFFF) return ds_fail(DS_ERR_INTERNAL, "cuda_builtin_logp_grad: n=%lld too large", (long long)n);
  builtin_rows_kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(v, x, n, logp, grad);
  CUDA_CHECK_LAUNCH("builtin_rows_kernel");
  return DS_OK;
}
