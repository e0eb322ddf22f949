/* test_target_grad.c: every built-in target's host gradient against central finite
 * differences of an independent double-precision log density (target_reference.h), at seeded
 * random points; its log density against the reference up to the constant the target drops;
 * each row's result the same bitwise whether the row comes alone or with others (what keeps
 * draws independent of the rank count); and bad parameters refused with a message naming them.
 * Runs on any number of ranks (data files are read collectively); all ranks agree on the
 * verdict. Usage: test_target_grad [work dir]. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "status.h"
#include "target_reference.h"
#include "targets_builtin.h"

#define POINTS 9

static int failures;
static int rank;

#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "FAIL rank %d %s:%d: %s: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

static void test_case(int index, const ref_data_t *data) {
  const ref_case_t *c = &ref_cases[index];
  char args[1024];
  ref_case_args(c, data, args, sizeof args);
  dsampler_target t;
  int status = builtin_target_create(c->name, args, MPI_COMM_WORLD, &t);
  EXPECT(status == DS_OK, "%s: create(\"%s\") failed: %s", c->label, args, ds_error_message());
  if (status != DS_OK) return;
  EXPECT(t.dim == c->dim, "%s: dim %lld, expected %lld", c->label, (long long)t.dim, (long long)c->dim);
  EXPECT(builtin_target_lookup(&t) != NULL, "%s: not recognised as a built-in", c->label);
  builtin_params_t params;
  int fused = builtin_target_params(&t, &params);
  int uniform_gaussian = strcmp(c->name, "gaussian") == 0 && !strchr(c->args, ':');
  EXPECT(fused == uniform_gaussian, "%s: builtin_target_params says %d", c->label, fused);

  const int64_t d = c->dim;
  float x[POINTS * REF_MAX_DIM], logp[POINTS], grad[POINTS * REF_MAX_DIM];
  float logp_one[POINTS], grad_one[POINTS * REF_MAX_DIM];
  ref_points(c, index, POINTS, x);
  EXPECT(t.logp_grad(t.self, x, POINTS, logp, grad) == 0, "%s: logp_grad failed", c->label);
  for (int i = 0; i < POINTS; ++i)
    EXPECT(t.logp_grad(t.self, x + i * d, 1, logp_one + i, grad_one + i * d) == 0, "%s: logp_grad failed", c->label);
  EXPECT(memcmp(logp, logp_one, sizeof(float) * POINTS) == 0 &&
             memcmp(grad, grad_one, sizeof(float) * (size_t)(POINTS * d)) == 0,
         "%s: a row's result depends on the rows called with it", c->label);

  /* Gradient: ||g - g_fd|| <= tol_rel * ||g_fd|| + tol_abs per point. The target computes
   * in double and rounds to float (6e-8), except gaussian (float arithmetic) and logistic
   * (float products, summed per block of rows): 2e-6 relative covers both with margin. */
  const double tol_rel = 2e-6, tol_abs = 1e-6;
  double worst_grad = 0.0, worst_logp = 0.0, worst_rel = 0.0;
  double ref0 = 0.0;
  for (int i = 0; i < POINTS; ++i) {
    double xd[REF_MAX_DIM], g_fd[REF_MAX_DIM];
    for (int64_t k = 0; k < d; ++k) xd[k] = x[i * d + k];
    ref_grad_fd(c, data, xd, g_fd);
    double num = 0.0, den = 0.0;
    for (int64_t k = 0; k < d; ++k) {
      double diff = (double)grad[i * d + k] - g_fd[k];
      num += diff * diff;
      den += g_fd[k] * g_fd[k];
    }
    double err = sqrt(num) / (tol_rel * sqrt(den) + tol_abs);
    if (err > worst_grad) worst_grad = err;
    if (sqrt(num) / sqrt(den) > worst_rel) worst_rel = sqrt(num) / sqrt(den);
    EXPECT(err <= 1.0, "%s: point %d: |g - g_fd| = %.3g, |g_fd| = %.3g (tol %.1e |g_fd| + %.1e)", c->label, i,
           sqrt(num), sqrt(den), tol_rel, tol_abs);
    /* log p up to a constant: compare differences from point 0, tolerance 1e-6 |ref| + 1e-5. */
    double ref = ref_logp(c, data, xd);
    if (i == 0) {
      ref0 = ref;
      continue;
    }
    double got = (double)logp[i] - (double)logp[0], want = ref - ref0;
    double tol = 1e-6 * (fabs(ref) + fabs(ref0)) + 1e-5;
    double err_logp = fabs(got - want) / tol;
    if (err_logp > worst_logp) worst_logp = err_logp;
    EXPECT(err_logp <= 1.0, "%s: log p(x_%d) - log p(x_0) = %.9g, reference %.9g (tol %.2e)", c->label, i, got, want, tol);
  }
  if (rank == 0)
    printf("%-30s grad: max |g - g_fd| / |g_fd| = %.1e, max error / tol = %.3f; log p: max error / tol = %.3f\n",
           c->label, worst_rel, worst_grad, worst_logp);
  t.destroy(t.self);
}

/* logistic's minibatches (SVGD --batch-size): a batch's gradient against float64 over the rows
 * rng_batch_row draws, scaled by n / B; the mean over many batches against the full gradient
 * (unbiased: within 4 standard errors); batch 0 gives the full result back bitwise; other targets
 * and oversized batches refused. */
static void test_minibatch(const ref_data_t *data) {
  char args[700];
  snprintf(args, sizeof args, "sigma=2,data=%s", data->logistic_path);
  dsampler_target t;
  if (builtin_target_create("logistic", args, MPI_COMM_WORLD, &t) != DS_OK) {
    EXPECT(0, "minibatch: create failed: %s", ds_error_message());
    return;
  }
  enum { D = REF_DATA_DIM, N = REF_DATA_ROWS, B = 30, ROWS = 4, T = 4000 };
  float x[ROWS * D], grad[ROWS * D], grad_full[ROWS * D], grad_again[ROWS * D], logp[ROWS], logp_full[ROWS];
  uint64_t state = 99;
  for (int e = 0; e < ROWS * D; ++e) x[e] = (float)(0.5 * ref_normal(&state));
  EXPECT(t.logp_grad(t.self, x, ROWS, logp_full, grad_full) == 0, "minibatch: full call failed");

  /* One batch against float64. */
  const uint64_t seed = 11;
  EXPECT(builtin_target_set_batch(&t, B, seed, 5) == DS_OK, "minibatch: set_batch failed: %s", ds_error_message());
  EXPECT(t.logp_grad(t.self, x, ROWS, logp, grad) == 0, "minibatch: batch call failed");
  double worst_batch = 0.0;
  for (int i = 0; i < ROWS; ++i) {
    double ref[D], lp = 0.0, num = 0.0, den = 0.0, norm2 = 0.0;
    for (int k = 0; k < D; ++k) ref[k] = 0.0;
    for (int b = 0; b < B; ++b) {
      const int64_t row = rng_batch_row(seed, 5, b, N);
      double z = 0.0;
      for (int k = 0; k < D; ++k) z += data->x[row * D + k] * (double)x[i * D + k];
      lp += data->y[row] * z - (z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)));
      for (int k = 0; k < D; ++k) ref[k] += data->x[row * D + k] * (data->y[row] - 1.0 / (1.0 + exp(-z)));
    }
    for (int k = 0; k < D; ++k) {
      const double g = (double)N / B * ref[k] - (double)x[i * D + k] / 4.0;
      num += (grad[i * D + k] - g) * (grad[i * D + k] - g);
      den += g * g;
      norm2 += (double)x[i * D + k] * x[i * D + k];
    }
    const double lp_ref = (double)N / B * lp - norm2 / 8.0;
    if (sqrt(num / den) > worst_batch) worst_batch = sqrt(num / den);
    /* float arithmetic over 30 rows: 1e-5 relative. */
    EXPECT(sqrt(num) <= 1e-5 * sqrt(den), "minibatch: point %d: gradient rel err %.3g vs float64", i, sqrt(num / den));
    EXPECT(fabs(logp[i] - lp_ref) <= 1e-5 * fabs(lp_ref) + 1e-5, "minibatch: point %d: log p %.6g vs float64 %.6g", i,
           (double)logp[i], lp_ref);
  }

  /* Unbiased: the mean of T batches' gradients is the full gradient within 4 standard errors. */
  double sum[ROWS * D] = {0}, sum2[ROWS * D] = {0};
  for (int it = 0; it < T; ++it) {
    builtin_target_set_batch(&t, B, seed, it);
    t.logp_grad(t.self, x, ROWS, logp, grad);
    for (int e = 0; e < ROWS * D; ++e) {
      sum[e] += grad[e];
      sum2[e] += (double)grad[e] * grad[e];
    }
  }
  double worst_z = 0.0;
  for (int e = 0; e < ROWS * D; ++e) {
    const double mean = sum[e] / T, var = sum2[e] / T - mean * mean, se = sqrt(var > 0 ? var / T : 0.0);
    const double z = fabs(mean - grad_full[e]) / (se + 1e-6 * fabs(grad_full[e]) + 1e-9);
    if (z > worst_z) worst_z = z;
  }
  EXPECT(worst_z <= 4.0, "minibatch: mean of %d batch gradients is %.2f standard errors from the full gradient", T,
         worst_z);

  /* Batch 0: the full data again, bitwise. */
  EXPECT(builtin_target_set_batch(&t, 0, 0, 0) == DS_OK, "minibatch: reset failed");
  t.logp_grad(t.self, x, ROWS, logp, grad_again);
  EXPECT(memcmp(grad_again, grad_full, sizeof grad_full) == 0, "minibatch: batch 0 does not give the full gradient");
  ds_error_clear();
  EXPECT(builtin_target_set_batch(&t, N + 1, seed, 0) == DS_ERR_INPUT && strstr(ds_error_message(), "--batch-size"),
         "minibatch: a batch larger than the data was not refused: '%s'", ds_error_message());
  ds_error_clear();
  dsampler_target g;
  if (builtin_target_create("gaussian", "dim=2", MPI_COMM_WORLD, &g) == DS_OK) {
    EXPECT(builtin_target_set_batch(&g, 5, seed, 0) == DS_ERR_INPUT &&
               strstr(ds_error_message(), "only the logistic target"),
           "minibatch: gaussian took a batch: '%s'", ds_error_message());
    g.destroy(g.self);
  }
  ds_error_clear();
  if (rank == 0)
    printf("minibatch: batch gradient vs float64 max rel err %.1e; mean of %d batches %.2f standard errors from full\n",
           worst_batch, T, worst_z);
  t.destroy(t.self);
}

static void expect_refused(const char *name, const char *args, const char *needle) {
  dsampler_target t;
  ds_error_clear();
  int status = builtin_target_create(name, args, MPI_COMM_WORLD, &t);
  EXPECT(status == DS_ERR_INPUT && strstr(ds_error_message(), needle),
         "%s \"%s\": status %d, message '%s' (expected '%s')", name, args, status, ds_error_message(), needle);
  if (status == DS_OK) t.destroy(t.self);
  ds_error_clear();
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char *dir = argc > 1 ? argv[1] : ".";
  static ref_data_t data;
  int written = ref_data_make(&data, dir, rank == 0);
  MPI_Bcast(&written, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (!written) {
    if (rank == 0) fprintf(stderr, "FAIL: cannot write the test data under %s\n", dir);
    MPI_Finalize();
    return 1;
  }
  for (int i = 0; i < REF_CASE_COUNT; ++i) test_case(i, &data);
  test_minibatch(&data);

  char args[1024];
  expect_refused("gaussian", "", "--dim");
  expect_refused("gaussian", "dim=3,mean=1:2", "lists 2 values; the dimension is 3");
  expect_refused("gaussian", "dim=2,scale=0", "scale must be > 0");
  expect_refused("gaussian", "dim=2,data=x.h5", "--data: the gaussian target takes no dataset");
  expect_refused("corr-gaussian", "dim=3,rho=1", "rho must be in (-1, 1)");
  expect_refused("funnel", "dim=1", "dim >= 2");
  expect_refused("banana", "dim=2,c=1", "no parameter 'c'");
  expect_refused("logistic", "sigma=1", "needs a dataset");
  snprintf(args, sizeof args, "data=%s/no_such_file.h5", dir);
  expect_refused("logistic", args, "cannot open");
  snprintf(args, sizeof args, "data=%s", data.cov_path);
  expect_refused("logistic", args, "no dataset 'X'");
  snprintf(args, sizeof args, "dim=5,data=%s", data.logistic_path);
  expect_refused("logistic", args, "X has 6 columns");
  snprintf(args, sizeof args, "cov=%s", data.logistic_path);
  expect_refused("corr-gaussian", args, "no dataset 'cov'");

  int pass = failures == 0, all_pass = 0;
  MPI_Allreduce(&pass, &all_pass, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("target_grad: %s\n", all_pass ? "all checks passed" : "FAILED");
  MPI_Finalize();
  return all_pass ? 0 : 1;
}
