/* metric_dense.c: Cholesky factor and correlation condition number (see metric_dense.h). */
#include "metric_dense.h"

#include <math.h>
#include <string.h>

int dense_cholesky(const double *cov, int64_t dim, double *L) {
  memset(L, 0, (size_t)(dim * dim) * sizeof *L);
  for (int64_t i = 0; i < dim; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      double sum = cov[i * dim + j];
      for (int64_t k = 0; k < j; ++k) sum -= L[i * dim + k] * L[j * dim + k];
      if (i == j) {
        if (!(sum > 0.0) || !isfinite(sum)) return -1;
        L[i * dim + i] = sqrt(sum);
      } else {
        L[i * dim + j] = sum / L[j * dim + j];
      }
    }
  }
  return 0;
}

void dense_lower_inverse(const double *L, int64_t dim, double *inverse) {
  memset(inverse, 0, (size_t)(dim * dim) * sizeof *inverse);
  for (int64_t j = 0; j < dim; ++j) {
    inverse[j * dim + j] = 1.0 / L[j * dim + j];
    for (int64_t i = j + 1; i < dim; ++i) {
      double sum = 0.0;
      for (int64_t k = j; k < i; ++k) sum += L[i * dim + k] * inverse[k * dim + j];
      inverse[i * dim + j] = -sum / L[i * dim + i];
    }
  }
}

double dense_correlation_condition(const double *cov, int64_t dim, double *work) {
  double *a = work, *scale = work + dim * dim;
  for (int64_t i = 0; i < dim; ++i) {
    if (!(cov[i * dim + i] > 0.0) || !isfinite(cov[i * dim + i])) return INFINITY;
    scale[i] = 1.0 / sqrt(cov[i * dim + i]);
  }
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < dim; ++j) a[i * dim + j] = cov[i * dim + j] * scale[i] * scale[j];
  /* Cyclic Jacobi: rotations zero each off-diagonal entry in turn until they are negligible. */
  for (int sweep = 0; sweep < 60; ++sweep) {
    double off = 0.0;
    for (int64_t p = 0; p < dim; ++p)
      for (int64_t q = p + 1; q < dim; ++q) off += a[p * dim + q] * a[p * dim + q];
    if (off < 1e-22 * (double)dim) break;
    for (int64_t p = 0; p < dim; ++p)
      for (int64_t q = p + 1; q < dim; ++q) {
        const double apq = a[p * dim + q];
        if (fabs(apq) < 1e-300) continue;
        const double theta = (a[q * dim + q] - a[p * dim + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + sqrt(theta * theta + 1.0));
        const double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
        for (int64_t k = 0; k < dim; ++k) {
          const double akp = a[k * dim + p], akq = a[k * dim + q];
          a[k * dim + p] = c * akp - s * akq;
          a[k * dim + q] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < dim; ++k) {
          const double apk = a[p * dim + k], aqk = a[q * dim + k];
          a[p * dim + k] = c * apk - s * aqk;
          a[q * dim + k] = s * apk + c * aqk;
        }
      }
  }
  double low = INFINITY, high = 0.0;
  for (int64_t i = 0; i < dim; ++i) {
    low = fmin(low, a[i * dim + i]);
    high = fmax(high, a[i * dim + i]);
  }
  return low > 0.0 ? high / low : INFINITY;
}
