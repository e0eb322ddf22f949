/* target_reference.h: the built-in targets written again, independently, in double precision
 * (full log densities from their definitions: normal pdfs, an explicit covariance solved by
 * Gaussian elimination, the Bernoulli likelihood), with central finite differences, the
 * seeded test cases and the data files they read. Shared by the host test
 * (tests/unit/test_target_grad.c) and the GPU test (tests/targets_gpu). Header-only. */
#ifndef DSAMPLER_TARGET_REFERENCE_H
#define DSAMPLER_TARGET_REFERENCE_H

#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REF_PI 3.14159265358979323846
#define REF_MAX_DIM 16
#define REF_DATA_ROWS 300
#define REF_DATA_DIM 6

typedef struct ref_case {
  const char *label;
  const char *name;   /* built-in */
  const char *args;   /* its --target-args, data= and cov= filled in by ref_case_args */
  int64_t dim;
  double spread;      /* test points ~ N(0, spread^2) per coordinate */
} ref_case_t;

/* The data the file-backed cases read, kept for the reference. */
typedef struct ref_data {
  double x[REF_DATA_ROWS * REF_DATA_DIM];
  double y[REF_DATA_ROWS];
  double cov[4 * 4];
  char logistic_path[512];
  char cov_path[512];
} ref_data_t;

static const ref_case_t ref_cases[] = {
    {"gaussian N(0, I)", "gaussian", "dim=5", 5, 1.5},
    {"gaussian mean 1.5, scale 2", "gaussian", "dim=3,mean=1.5,scale=2", 3, 2.0},
    {"gaussian per-dimension", "gaussian", "dim=4,mean=1:-1:0.5:2,scale=0.5:1:2:1.5", 4, 1.5},
    {"corr-gaussian AR(1) rho 0.7", "corr-gaussian", "dim=6,rho=0.7,scale=1.3", 6, 1.0},
    {"corr-gaussian AR(1) dim 1", "corr-gaussian", "dim=1,rho=-0.4,scale=0.8", 1, 1.0},
    {"corr-gaussian from a file", "corr-gaussian", "cov=", 4, 1.0},
    {"banana a 1, b 0.5", "banana", "dim=2", 2, 1.2},
    {"banana dim 5, a 1.5, b 1", "banana", "dim=5,a=1.5,b=1", 5, 1.0},
    {"mixture1d", "mixture1d", "dim=1", 1, 3.0},
    {"mixture1d dim 3", "mixture1d", "dim=3", 3, 2.5},
    {"funnel sigma 1.5", "funnel", "dim=6,sigma=1.5", 6, 1.0},
    {"funnel default", "funnel", "dim=10", 10, 1.0},
    {"logistic", "logistic", "sigma=2,data=", REF_DATA_DIM, 0.5},
};
#define REF_CASE_COUNT ((int)(sizeof ref_cases / sizeof ref_cases[0]))

/* splitmix64 and Box-Muller: seeded inputs. */
static inline uint64_t ref_next(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline double ref_uniform(uint64_t *state) { return ((double)(ref_next(state) >> 11) + 0.5) * 0x1p-53; }
static inline double ref_normal(uint64_t *state) {
  double u = ref_uniform(state), v = ref_uniform(state);
  return sqrt(-2.0 * log(u)) * cos(2.0 * REF_PI * v);
}

static inline double ref_log_normal_pdf(double x, double mean, double sd) {
  double z = (x - mean) / sd;
  return -0.5 * z * z - log(sd) - 0.5 * log(2.0 * REF_PI);
}

/* Solves A u = b (A [d, d], copied) by Gaussian elimination with partial pivoting. */
static inline void ref_solve(const double *a_in, const double *b, int64_t d, double *u) {
  double a[REF_MAX_DIM * REF_MAX_DIM], r[REF_MAX_DIM];
  memcpy(a, a_in, (size_t)(d * d) * sizeof(double));
  memcpy(r, b, (size_t)d * sizeof(double));
  for (int64_t c = 0; c < d; ++c) {
    int64_t pivot = c;
    for (int64_t i = c + 1; i < d; ++i)
      if (fabs(a[i * d + c]) > fabs(a[pivot * d + c])) pivot = i;
    for (int64_t j = 0; j < d; ++j) {
      double t = a[c * d + j];
      a[c * d + j] = a[pivot * d + j];
      a[pivot * d + j] = t;
    }
    double t = r[c];
    r[c] = r[pivot];
    r[pivot] = t;
    for (int64_t i = c + 1; i < d; ++i) {
      double f = a[i * d + c] / a[c * d + c];
      for (int64_t j = c; j < d; ++j) a[i * d + j] -= f * a[c * d + j];
      r[i] -= f * r[c];
    }
  }
  for (int64_t i = d - 1; i >= 0; --i) {
    double s = r[i];
    for (int64_t j = i + 1; j < d; ++j) s -= a[i * d + j] * u[j];
    u[i] = s / a[i * d + i];
  }
}

static inline double ref_mvn_logpdf(const double *x, const double *cov, int64_t d) {
  double u[REF_MAX_DIM];
  ref_solve(cov, x, d, u);
  double q = 0.0;
  for (int64_t k = 0; k < d; ++k) q += x[k] * u[k];
  return -0.5 * q;  /* up to the constant -1/2 log det(2 pi Sigma) */
}

static inline double ref_parse(const char *args, const char *key, double fallback) {
  char pattern[32];
  snprintf(pattern, sizeof pattern, "%s=", key);
  const char *p = args;
  while ((p = strstr(p, pattern)) != NULL) {
    if (p == args || p[-1] == ',') return strtod(p + strlen(pattern), NULL);
    ++p;
  }
  return fallback;
}

/* Per-dimension value k of "key=a:b:c", or the one value of "key=a". */
static inline double ref_parse_list(const char *args, const char *key, int64_t k, double fallback) {
  char pattern[32];
  snprintf(pattern, sizeof pattern, "%s=", key);
  const char *p = strstr(args, pattern);
  if (!p) return fallback;
  p += strlen(pattern);
  const char *end = strchr(p, ',');
  if (!end) end = p + strlen(p);
  for (int64_t i = 0; i < k; ++i) {
    const char *colon = memchr(p, ':', (size_t)(end - p));
    if (!colon) break;
    p = colon + 1;
  }
  return strtod(p, NULL);
}

/* The reference log density, up to a constant, at x [dim]. */
static inline double ref_logp(const ref_case_t *c, const ref_data_t *data, const double *x) {
  const int64_t d = c->dim;
  double sum = 0.0;
  if (strcmp(c->name, "gaussian") == 0) {
    for (int64_t k = 0; k < d; ++k)
      sum += ref_log_normal_pdf(x[k], ref_parse_list(c->args, "mean", k, 0.0), ref_parse_list(c->args, "scale", k, 1.0));
  } else if (strcmp(c->name, "corr-gaussian") == 0) {
    double cov[REF_MAX_DIM * REF_MAX_DIM];
    if (strstr(c->args, "cov=")) {
      memcpy(cov, data->cov, sizeof data->cov);
    } else {
      double rho = ref_parse(c->args, "rho", 0.5), scale = ref_parse(c->args, "scale", 1.0);
      for (int64_t i = 0; i < d; ++i)
        for (int64_t j = 0; j < d; ++j) cov[i * d + j] = scale * scale * pow(rho, (double)llabs(i - j));
    }
    sum = ref_mvn_logpdf(x, cov, d);
  } else if (strcmp(c->name, "banana") == 0) {
    double a = ref_parse(c->args, "a", 1.0), b = ref_parse(c->args, "b", 0.5);
    int64_t k = 0;
    for (; k + 1 < d; k += 2)
      sum += ref_log_normal_pdf(x[k], 0.0, a) + ref_log_normal_pdf(x[k + 1], b * (x[k] * x[k] - a * a), 1.0);
    if (k < d) sum += ref_log_normal_pdf(x[k], 0.0, 1.0);
  } else if (strcmp(c->name, "mixture1d") == 0) {
    for (int64_t k = 0; k < d; ++k)
      sum += log(exp(ref_log_normal_pdf(x[k], -2.0, 1.0)) / 3.0 + 2.0 * exp(ref_log_normal_pdf(x[k], 2.0, 1.0)) / 3.0);
  } else if (strcmp(c->name, "funnel") == 0) {
    double sigma = ref_parse(c->args, "sigma", 3.0);
    sum = ref_log_normal_pdf(x[0], 0.0, sigma);
    for (int64_t k = 1; k < d; ++k) sum += ref_log_normal_pdf(x[k], 0.0, exp(0.5 * x[0]));
  } else if (strcmp(c->name, "logistic") == 0) {
    double sigma = ref_parse(c->args, "sigma", 1.0);
    for (int64_t k = 0; k < d; ++k) sum += ref_log_normal_pdf(x[k], 0.0, sigma);
    for (int64_t i = 0; i < REF_DATA_ROWS; ++i) {
      double z = 0.0;
      for (int64_t k = 0; k < d; ++k) z += data->x[i * d + k] * x[k];
      double p = 1.0 / (1.0 + exp(-z));
      sum += data->y[i] > 0.5 ? log(p) : log(1.0 - p);
    }
  }
  return sum;
}

/* Central differences of ref_logp, step 1e-5 * max(1, |x_k|) (truncation ~1e-10, rounding
 * ~1e-11 * |log p| relative). */
static inline void ref_grad_fd(const ref_case_t *c, const ref_data_t *data, const double *x, double *grad) {
  double point[REF_MAX_DIM];
  memcpy(point, x, (size_t)c->dim * sizeof(double));
  for (int64_t k = 0; k < c->dim; ++k) {
    double h = 1e-5 * fmax(1.0, fabs(x[k]));
    point[k] = x[k] + h;
    double up = ref_logp(c, data, point);
    point[k] = x[k] - h;
    double down = ref_logp(c, data, point);
    point[k] = x[k];
    grad[k] = (up - down) / (2.0 * h);
  }
}

/* Test points for a case: rows [n, dim] of N(0, spread^2), seeded by the case's index. */
static inline void ref_points(const ref_case_t *c, int index, int64_t n, float *x) {
  uint64_t state = 1234567 + 7919 * (uint64_t)index;
  for (int64_t e = 0; e < n * c->dim; ++e) x[e] = (float)(c->spread * ref_normal(&state));
}

static inline int ref_write_2d(hid_t file, const char *name, const double *values, hsize_t rows, hsize_t cols, int rank) {
  hsize_t dims[2] = {rows, cols};
  hid_t space = H5Screate_simple(rank, dims, NULL);
  hid_t set = H5Dcreate2(file, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int ok = set >= 0 && H5Dwrite(set, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0;
  if (set >= 0) H5Dclose(set);
  H5Sclose(space);
  return ok;
}

/* Makes the seeded data; with write != 0 also writes the two files under dir. 1 on success. */
static inline int ref_data_make(ref_data_t *data, const char *dir, int write) {
  uint64_t state = 99;
  double w_true[REF_DATA_DIM];
  for (int k = 0; k < REF_DATA_DIM; ++k) w_true[k] = ref_normal(&state);
  for (int i = 0; i < REF_DATA_ROWS; ++i) {
    double z = 0.0;
    for (int k = 0; k < REF_DATA_DIM; ++k) {
      data->x[i * REF_DATA_DIM + k] = (double)(float)ref_normal(&state);  /* exact in float */
      z += data->x[i * REF_DATA_DIM + k] * w_true[k];
    }
    data->y[i] = ref_uniform(&state) < 1.0 / (1.0 + exp(-z)) ? 1.0 : 0.0;
  }
  double a[16];
  for (int e = 0; e < 16; ++e) a[e] = ref_normal(&state);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      double s = i == j ? 0.5 : 0.0;
      for (int k = 0; k < 4; ++k) s += a[i * 4 + k] * a[j * 4 + k];
      data->cov[i * 4 + j] = (double)(float)s;
    }
  snprintf(data->logistic_path, sizeof data->logistic_path, "%s/target_ref_logistic.h5", dir);
  snprintf(data->cov_path, sizeof data->cov_path, "%s/target_ref_cov.h5", dir);
  if (!write) return 1;
  hid_t file = H5Fcreate(data->logistic_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) return 0;
  int ok = ref_write_2d(file, "X", data->x, REF_DATA_ROWS, REF_DATA_DIM, 2) &&
           ref_write_2d(file, "y", data->y, REF_DATA_ROWS, 1, 1);
  H5Fclose(file);
  file = H5Fcreate(data->cov_path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) return 0;
  ok = ok && ref_write_2d(file, "cov", data->cov, 4, 4, 2);
  H5Fclose(file);
  return ok;
}

/* The case's args with the file paths filled in. */
static inline void ref_case_args(const ref_case_t *c, const ref_data_t *data, char *out, size_t size) {
  if (strstr(c->args, "data="))
    snprintf(out, size, "%s%s", c->args, data->logistic_path);
  else if (strstr(c->args, "cov="))
    snprintf(out, size, "%s%s", c->args, data->cov_path);
  else
    snprintf(out, size, "%s", c->args);
}

#endif
