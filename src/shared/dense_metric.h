/* dense_metric.h: the dense metric's products (backend.h's metric_factor), one output element
 * at a time, compiled for the host and the GPU so both backends sum in the same order. L is
 * [dim, dim] row-major, lower triangular; M^-1 = L L^T. */
#ifndef DSAMPLER_DENSE_METRIC_H
#define DSAMPLER_DENSE_METRIC_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define DENSE_FN __host__ __device__ __forceinline__ static
#else
#define DENSE_FN static inline
#endif

/* (L^T g)_k = sum_{i >= k} L_ik g_i, fmaf in increasing i: a kick's whitened force. */
DENSE_FN float dense_lt_dot(const float *L, int64_t dim, const float *g, int64_t k) {
  float sum = 0.0f;
  for (int64_t i = k; i < dim; ++i) sum = fmaf(L[i * dim + k], g[i], sum);
  return sum;
}

/* (L r)_i = sum_{k <= i} L_ik r_k, fmaf in increasing k: a drift's velocity. */
DENSE_FN float dense_l_dot(const float *L, int64_t dim, const float *r, int64_t i) {
  float sum = 0.0f;
  for (int64_t k = 0; k <= i; ++k) sum = fmaf(L[i * dim + k], r[k], sum);
  return sum;
}

/* u_i = (L^-1 (x - m))_i = sum_{k <= i} Linv_ik (x_k - m_k), in double, k increasing. */
DENSE_FN double dense_whiten_one(const float *Linv, int64_t dim, const float *x, const float *m, int64_t i) {
  double sum = 0.0;
  for (int64_t k = 0; k <= i; ++k) sum += (double)Linv[i * dim + k] * ((double)x[k] - (double)m[k]);
  return sum;
}

/* |L^-1 (x - m)|^2, and (L^-1 (x - m)) . r when r is not NULL (in *along). */
DENSE_FN double dense_whiten(const float *Linv, int64_t dim, const float *x, const float *m, const float *r,
                             double *along) {
  double norm = 0.0, dot = 0.0;
  for (int64_t i = 0; i < dim; ++i) {
    const double u = dense_whiten_one(Linv, dim, x, m, i);
    norm += u * u;
    if (r) dot += u * (double)r[i];
  }
  if (along) *along = dot;
  return norm;
}

/* Entries of the lower triangle of a dim x dim matrix. */
DENSE_FN int64_t dense_triangle(int64_t dim) { return dim * (dim + 1) / 2; }

#endif
