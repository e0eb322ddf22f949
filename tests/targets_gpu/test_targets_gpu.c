/* test_targets_gpu.c: every built-in target on the GPU (cuda/targets_builtin.cu, reached through
 * the built-ins' logp_grad_cuda entry) against central finite differences of the independent
 * float64 reference (tests/unit/target_reference.h) and against the host built-in; each row's
 * result bitwise the same alone, in a batch, or shifted to another place in logistic's fixed
 * chain blocks; logistic at scale on both of its GPU paths (fused kernel, cuBLAS) against the host
 * and against float64; and the example plugin's CUDA entry against its host entry. Exits 77 without a GPU.
 * Usage: test_targets_gpu WORK_DIR EXAMPLE_PLUGIN.so */
#include <cuda_runtime_api.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "comm_cuda.h"
#include "status.h"
#include "target.h"
#include "target_reference.h"
#include "targets_builtin.h"
#include "targets_builtin_cuda.h"

#define ROWS 300

static int failures;

#define EXPECT(cond, ...)                                                  \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
      fprintf(stderr, __VA_ARGS__);                                        \
      fprintf(stderr, "\n");                                               \
      ++failures;                                                          \
    }                                                                      \
  } while (0)

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    if (err_ != cudaSuccess) {                                                         \
      fprintf(stderr, "FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* logp [n] and grad [n, dim] on the GPU for host rows x [n, dim]. */
static int gpu_eval(const dsampler_target *t, const float *x, int64_t n, float *logp, float *grad) {
  float *d_x, *d_logp, *d_grad;
  size_t nd = (size_t)(n * t->dim) * sizeof(float);
  CUDA_OK(cudaMalloc((void **)&d_x, nd));
  CUDA_OK(cudaMalloc((void **)&d_grad, nd));
  CUDA_OK(cudaMalloc((void **)&d_logp, (size_t)n * sizeof(float)));
  CUDA_OK(cudaMemcpy(d_x, x, nd, cudaMemcpyHostToDevice));
  int rc = t->logp_grad_cuda(t->self, d_x, n, d_logp, d_grad, NULL);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(grad, d_grad, nd, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(logp, d_logp, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(d_x);
  cudaFree(d_grad);
  cudaFree(d_logp);
  return rc;
}

/* max over rows of ||a_i - b_i|| / ||b_i||, in double. */
static double max_row_rel_err(const float *a, const float *b, int64_t n, int64_t dim) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double num = 0.0, den = 0.0;
    for (int64_t k = 0; k < dim; ++k) {
      double d = (double)a[i * dim + k] - (double)b[i * dim + k];
      num += d * d;
      den += (double)b[i * dim + k] * b[i * dim + k];
    }
    double err = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
    if (err > worst) worst = err;
  }
  return worst;
}

/* Rows alone, and the batch shifted by `shift` rows, give bitwise the batch's rows. */
static void check_row_independence(const char *label, const dsampler_target *t, const float *x, int64_t n,
                                   const float *logp, const float *grad) {
  const int64_t d = t->dim, shift = 5;
  float *logp_s = malloc((size_t)n * sizeof(float)), *grad_s = malloc((size_t)(n * d) * sizeof(float));
  EXPECT(gpu_eval(t, x + shift * d, n - shift, logp_s, grad_s) == 0, "%s: shifted call failed", label);
  int same = memcmp(logp_s, logp + shift, (size_t)(n - shift) * sizeof(float)) == 0 &&
             memcmp(grad_s, grad + shift * d, (size_t)((n - shift) * d) * sizeof(float)) == 0;
  const int64_t rows[] = {0, 63, 64, n - 1};
  for (int r = 0; r < 4; ++r) {
    float logp_1, grad_1[4096];
    if (rows[r] >= n || d > 4096) continue;
    EXPECT(gpu_eval(t, x + rows[r] * d, 1, &logp_1, grad_1) == 0, "%s: one-row call failed", label);
    same = same && logp_1 == logp[rows[r]] && memcmp(grad_1, grad + rows[r] * d, (size_t)d * sizeof(float)) == 0;
  }
  EXPECT(same, "%s: a row's GPU result depends on the rows called with it", label);
  free(logp_s);
  free(grad_s);
}

static void test_case(int index, const ref_data_t *data) {
  const ref_case_t *c = &ref_cases[index];
  char args[1024];
  ref_case_args(c, data, args, sizeof args);
  dsampler_target t;
  if (builtin_target_create(c->name, args, MPI_COMM_WORLD, &t) != DS_OK) {
    EXPECT(0, "%s: create failed: %s", c->label, ds_error_message());
    return;
  }
  EXPECT(t.logp_grad_cuda != NULL, "%s: no CUDA entry", c->label);
  if (!t.logp_grad_cuda) return;
  const int64_t d = c->dim;
  float *x = malloc(sizeof(float) * ROWS * d), *grad = malloc(sizeof(float) * ROWS * d);
  float *grad_host = malloc(sizeof(float) * ROWS * d), logp[ROWS], logp_host[ROWS];
  ref_points(c, index, ROWS, x);
  EXPECT(gpu_eval(&t, x, ROWS, logp, grad) == 0, "%s: GPU call failed: %s", c->label, ds_error_message());
  EXPECT(t.logp_grad(t.self, x, ROWS, logp_host, grad_host) == 0, "%s: host call failed", c->label);

  /* Against finite differences: the same bound as the host test, 2e-6 |g_fd| + 1e-6. */
  double worst_fd = 0.0;
  for (int i = 0; i < ROWS; i += 7) {
    double xd[REF_MAX_DIM], g_fd[REF_MAX_DIM], num = 0.0, den = 0.0;
    for (int64_t k = 0; k < d; ++k) xd[k] = x[i * d + k];
    ref_grad_fd(c, data, xd, g_fd);
    for (int64_t k = 0; k < d; ++k) {
      num += ((double)grad[i * d + k] - g_fd[k]) * ((double)grad[i * d + k] - g_fd[k]);
      den += g_fd[k] * g_fd[k];
    }
    double rel = sqrt(num) / sqrt(den);
    if (rel > worst_fd) worst_fd = rel;
    EXPECT(sqrt(num) <= 2e-6 * sqrt(den) + 1e-6, "%s: point %d: |g - g_fd| = %.3g, |g_fd| = %.3g", c->label, i,
           sqrt(num), sqrt(den));
  }
  /* Against the host built-in: gradients 1e-6 relative per row, log p 1e-6 |log p| + 1e-5. */
  double worst_host = max_row_rel_err(grad, grad_host, ROWS, d), worst_logp = 0.0;
  for (int i = 0; i < ROWS; ++i) {
    double err = fabs((double)logp[i] - logp_host[i]) / (1e-6 * fabs((double)logp_host[i]) + 1e-5);
    if (err > worst_logp) worst_logp = err;
  }
  EXPECT(worst_host <= 1e-6, "%s: GPU vs host gradient rel err %.3g", c->label, worst_host);
  EXPECT(worst_logp <= 1.0, "%s: GPU vs host log p error / tol %.3g", c->label, worst_logp);
  printf("%-30s GPU grad vs finite differences: max rel err %.1e; vs host: %.1e; log p err/tol %.3f\n", c->label,
         worst_fd, worst_host, worst_logp);
  check_row_independence(c->label, &t, x, ROWS, logp, grad);
  free(x);
  free(grad);
  free(grad_host);
  t.destroy(t.self);
}

/* logistic at scale: n data rows of d coefficients and `chains` chains, against the host
 * built-in and against float64 sums computed here. d <= 64 runs the fused kernel (several row
 * chunks, several chain groups), d > 64 the cuBLAS path (several GEMM row blocks). */
static void test_logistic_large(const char *dir, int64_t n, int64_t d, int64_t chains) {
  char path[600], label[64];
  snprintf(path, sizeof path, "%s/targets_gpu_logistic_%lld.h5", dir, (long long)d);
  snprintf(label, sizeof label, "logistic %lld x %lld, %lld chains", (long long)n, (long long)d, (long long)chains);
  double *xs = malloc(sizeof(double) * n * d), *ys = malloc(sizeof(double) * n), *w_true = malloc(sizeof(double) * d);
  uint64_t state = 5 + (uint64_t)d;
  for (int64_t k = 0; k < d; ++k) w_true[k] = 1.5 * ref_normal(&state) / sqrt((double)d);
  for (int64_t i = 0; i < n; ++i) {
    double z = 0.0;
    for (int64_t k = 0; k < d; ++k) {
      xs[i * d + k] = (double)(float)ref_normal(&state);
      z += xs[i * d + k] * w_true[k];
    }
    ys[i] = ref_uniform(&state) < 1.0 / (1.0 + exp(-z)) ? 1.0 : 0.0;
  }
  hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  EXPECT(file >= 0 && ref_write_2d(file, "X", xs, (hsize_t)n, (hsize_t)d, 2) && ref_write_2d(file, "y", ys, (hsize_t)n, 1, 1),
         "cannot write %s", path);
  H5Fclose(file);
  const double sigma = 3.0;
  char args[700];
  snprintf(args, sizeof args, "sigma=%g,data=%s", sigma, path);
  dsampler_target t;
  if (builtin_target_create("logistic", args, MPI_COMM_WORLD, &t) != DS_OK) {
    EXPECT(0, "%s: create failed: %s", label, ds_error_message());
    return;
  }
  float *x = malloc(sizeof(float) * chains * d), *grad = malloc(sizeof(float) * chains * d);
  float *grad_host = malloc(sizeof(float) * chains * d), *logp = malloc(sizeof(float) * chains);
  float *logp_host = malloc(sizeof(float) * chains);
  double *grad_ref = malloc(sizeof(double) * chains * d), *logp_ref = malloc(sizeof(double) * chains);
  for (int64_t e = 0; e < chains * d; ++e) x[e] = (float)(w_true[e % d] + 0.05 * ref_normal(&state));
  EXPECT(gpu_eval(&t, x, chains, logp, grad) == 0, "%s: GPU call failed: %s", label, ds_error_message());
  EXPECT(t.logp_grad(t.self, x, chains, logp_host, grad_host) == 0, "%s: host call failed", label);
  /* float64 reference: direct sums over the rows, log(1 + e^z) by log1p. */
  for (int64_t c = 0; c < chains; ++c) {
    const float *w = x + c * d;
    double lp = 0.0, norm2 = 0.0;
    for (int64_t k = 0; k < d; ++k) grad_ref[c * d + k] = -(double)w[k] / (sigma * sigma);
    for (int64_t i = 0; i < n; ++i) {
      double z = 0.0;
      for (int64_t k = 0; k < d; ++k) z += xs[i * d + k] * (double)w[k];
      lp += ys[i] * z - (z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)));
      const double residual = ys[i] - 1.0 / (1.0 + exp(-z));
      for (int64_t k = 0; k < d; ++k) grad_ref[c * d + k] += xs[i * d + k] * residual;
    }
    for (int64_t k = 0; k < d; ++k) norm2 += (double)w[k] * (double)w[k];
    logp_ref[c] = lp - 0.5 * norm2 / (sigma * sigma);
  }
  float *grad_ref_f = malloc(sizeof(float) * chains * d);
  for (int64_t e = 0; e < chains * d; ++e) grad_ref_f[e] = (float)grad_ref[e];
  /* Sums of n float products in different orders: 1e-5 relative per row, against the host and
   * against float64; log p 1e-6 relative. */
  double worst = max_row_rel_err(grad, grad_host, chains, d), worst_ref = max_row_rel_err(grad, grad_ref_f, chains, d);
  double worst_logp = 0.0, worst_logp_ref = 0.0;
  for (int64_t i = 0; i < chains; ++i) {
    double err = fabs((double)logp[i] - logp_host[i]) / fabs((double)logp_host[i]);
    double err_ref = fabs((double)logp[i] - logp_ref[i]) / fabs(logp_ref[i]);
    if (err > worst_logp) worst_logp = err;
    if (err_ref > worst_logp_ref) worst_logp_ref = err_ref;
  }
  EXPECT(worst <= 1e-5, "%s: GPU vs host gradient rel err %.3g", label, worst);
  EXPECT(worst_ref <= 1e-5, "%s: GPU vs float64 gradient rel err %.3g", label, worst_ref);
  EXPECT(worst_logp <= 1e-6, "%s: GPU vs host log p rel err %.3g", label, worst_logp);
  EXPECT(worst_logp_ref <= 1e-6, "%s: GPU vs float64 log p rel err %.3g", label, worst_logp_ref);
  printf("%s GPU: grad max rel err vs host %.1e, vs float64 %.1e; log p vs host %.1e, vs float64 %.1e\n", label,
         worst, worst_ref, worst_logp, worst_logp_ref);
  check_row_independence(label, &t, x, chains, logp, grad);
  /* A minibatch (SVGD --batch-size): the GPU gathers the same rows as the host. */
  const int64_t batch = n / 30 + 7;
  EXPECT(builtin_target_set_batch(&t, batch, 9, 3) == DS_OK, "%s: set_batch failed: %s", label, ds_error_message());
  EXPECT(gpu_eval(&t, x, chains, logp, grad) == 0, "%s: GPU minibatch call failed: %s", label, ds_error_message());
  EXPECT(t.logp_grad(t.self, x, chains, logp_host, grad_host) == 0, "%s: host minibatch call failed", label);
  const double batch_err = max_row_rel_err(grad, grad_host, chains, d);
  double batch_logp_err = 0.0;
  for (int64_t i = 0; i < chains; ++i) {
    const double err = fabs((double)logp[i] - logp_host[i]) / fabs((double)logp_host[i]);
    if (err > batch_logp_err) batch_logp_err = err;
  }
  EXPECT(batch_err <= 1e-5, "%s: minibatch of %lld: GPU vs host gradient rel err %.3g", label, (long long)batch, batch_err);
  EXPECT(batch_logp_err <= 1e-6, "%s: minibatch: GPU vs host log p rel err %.3g", label, batch_logp_err);
  printf("%s minibatch of %lld rows GPU vs host: grad %.1e, log p %.1e\n", label, (long long)batch, batch_err,
         batch_logp_err);
  builtin_target_set_batch(&t, 0, 0, 0);
  t.destroy(t.self);
  free(xs); free(ys); free(w_true); free(x); free(grad); free(grad_host); free(logp); free(logp_host);
  free(grad_ref); free(grad_ref_f); free(logp_ref);
}

static void test_plugin(const char *plugin_path) {
  char spec[700];
  snprintf(spec, sizeof spec, "plugin:%s", plugin_path);
  target_handle_t handle;
  if (target_open(spec, "a=1.5,b=1", "", 5, 0, -1, MPI_COMM_WORLD, &handle) != DS_OK) {
    EXPECT(0, "plugin: %s", ds_error_message());
    return;
  }
  const dsampler_target *t = &handle.target;
  EXPECT(t->logp_grad_cuda != NULL, "the example plugin was built without its CUDA entry");
  if (t->logp_grad_cuda) {
    const ref_case_t banana = {"banana", "banana", "dim=5,a=1.5,b=1", 5, 1.0};
    float x[ROWS * 5], grad[ROWS * 5], grad_host[ROWS * 5], logp[ROWS], logp_host[ROWS];
    ref_points(&banana, 42, ROWS, x);
    EXPECT(gpu_eval(t, x, ROWS, logp, grad) == 0, "plugin: CUDA entry failed");
    t->logp_grad(t->self, x, ROWS, logp_host, grad_host);
    double err = max_row_rel_err(grad, grad_host, ROWS, 5);
    EXPECT(err <= 1e-6, "plugin: CUDA vs host entry gradient rel err %.3g", err);
    printf("example plugin CUDA entry vs host entry: grad max rel err %.1e\n", err);
  }
  target_close(&handle);
}

int main(int argc, char **argv) {
  if (comm_cuda_device_count() == 0) {
    printf("no GPU: skipped\n");
    return 77;
  }
  MPI_Init(&argc, &argv);
  const char *dir = argc > 1 ? argv[1] : ".";
  mkdir(dir, 0755); /* the build makes it; a build copied without its work folders does not have it */
  CUDA_OK(cudaSetDevice(0));
  static ref_data_t data;
  if (!ref_data_make(&data, dir, 1)) {
    fprintf(stderr, "FAIL: cannot write test data under %s\n", dir);
    return 1;
  }
  for (int i = 0; i < REF_CASE_COUNT; ++i) test_case(i, &data);
  test_logistic_large(dir, 150000, 10, 200);  /* fused: 147 row chunks, 2 chain groups */
  test_logistic_large(dir, 20000, 54, 300);   /* fused at the benchmark's width, 3 chain groups */
  test_logistic_large(dir, 70000, 80, 70);    /* cuBLAS: 2 row blocks, 2 chain blocks */
  if (argc > 2) test_plugin(argv[2]);
  printf("targets_gpu: %s\n", failures ? "FAILED" : "all checks passed");
  MPI_Finalize();
  return failures ? 1 : 0;
}
