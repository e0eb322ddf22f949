/* test_gpu_svgd.c: the CUDA backend's SVGD entries against the CPU backend (the reference
 * implementation) through backend.h: median histograms bin for bin (so the medians agree
 * bitwise; the window pass's fine and high bins and its below/above counts too), phi and one update step within stated tolerances, phi against a float64 direct
 * sum, and phi of a row range equal bitwise to the same rows of a full launch (what makes
 * results independent of the rank count); the KSD's Stein sums against the CPU and float64, and
 * phi with the IMQ kernel against the CPU. Exits 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "exactsum.h"
#include "comm_cuda.h"
#include "gpu_test.h"
#include "median.h"
#include "svgd_kernels.h"
#include "targets_builtin.h"

static backend_t *cpu, *gpu;

static int compare_floats(const void *a, const void *b) {
  const float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static float *device_copy(const float *host, int64_t floats) {
  void *dev = NULL;
  GPU_TRY(gpu->alloc(gpu, &dev, (size_t)floats * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, dev, host, (size_t)floats * sizeof(float)));
  return dev;
}

static uint64_t pair_total(int64_t n, int64_t rows_begin, int64_t rows_end) {
  uint64_t total = 0;
  for (int64_t i = rows_begin; i < rows_end; ++i)
    total += (uint64_t)((n % 2 == 0 && i >= n / 2) ? n / 2 - 1 : n / 2);
  return 2 * total;
}

/* The GPU's own distances D [rows][n] of rows [row_begin, row_end), as its median and phi take
 * them, where they are the tensor cores' (svgd_kernels.h). */
static float *gpu_distances(const float *x_dev, int64_t n, int64_t dim, int64_t row_begin, int64_t row_end) {
  const int64_t rows = row_end - row_begin;
  float *dist_dev = NULL, *scratch = NULL, *dist = test_malloc((size_t)(rows * n) * sizeof *dist);
  GPU_TRY(gpu->alloc(gpu, (void **)&dist_dev, (size_t)(rows * n) * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&scratch, svgd_pair_distances_scratch_floats(n, dim) * sizeof(float)));
  GPU_TRY(svgd_launch_pair_distances(x_dev, n, dim, row_begin, row_end, dist_dev, scratch, 0));
  GPU_EXPECT(cudaDeviceSynchronize() == cudaSuccess, "svgd_launch_pair_distances failed");
  GPU_TRY(gpu->download(gpu, dist, dist_dev, (size_t)(rows * n) * sizeof(float)));
  gpu->release(gpu, dist_dev);
  gpu->release(gpu, scratch);
  return dist;
}

/* backend.h's counting rule for one key, weight 2. */
static void count_key(uint32_t bits, int pass, uint32_t select_bits, uint64_t *hist) {
  if (pass == SVGD_MEDIAN_PASS_HIGH) {
    hist[bits >> 16] += 2;
  } else if (pass == SVGD_MEDIAN_PASS_LOW) {
    if ((bits >> 16) == select_bits) hist[bits & 0xFFFFu] += 2;
  } else {
    const uint32_t offset = bits - select_bits;
    if (offset < SVGD_WINDOW_FINE_BINS)
      hist[SVGD_WINDOW_FINE + offset] += 2;
    else
      hist[bits < select_bits ? SVGD_WINDOW_BELOW : SVGD_WINDOW_ABOVE] += 2;
  }
}

/* A pass counted on the host from distances D [rows][n] of rows [row_begin, row_end): each
 * row's pairs (i, i + offset mod n), offset 1 .. span(i) (backend.h). */
static void histogram_of_distances(const float *dist, int64_t n, int64_t row_begin, int64_t row_end, int pass,
                                   uint32_t select_bits, uint64_t *hist) {
  for (int64_t i = row_begin; i < row_end; ++i) {
    const int64_t span = (n % 2 == 0 && i >= n / 2) ? n / 2 - 1 : n / 2;
    for (int64_t offset = 1; offset <= span; ++offset) {
      uint32_t bits;
      memcpy(&bits, &dist[(i - row_begin) * n + (i + offset) % n], sizeof bits);
      count_key(bits, pass, select_bits, hist);
    }
  }
}

/* One pass on both backends over rows [row_begin, row_end): bins must agree exactly.
 * Where the GPU's distances are the tensor cores' (dim <= 64), its bins must equal instead
 * those of its own distances counted on the host (the median is exact for the distances the
 * GPU computes; the CPU's differ from them by rounding, see check_median_case).
 * select_bits: PASS_LOW's top 16 bits, PASS_WINDOW's window start. */
static void check_pass(const char *label, const float *x, const float *x_dev, int64_t n, int64_t dim,
                       int64_t row_begin, int64_t row_end, int pass, uint32_t select_bits) {
  const int counts = pass == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_COUNTS : SVGD_HIST_BINS;
  uint64_t *hist_cpu = calloc((size_t)counts, sizeof *hist_cpu);
  uint64_t *hist_gpu = calloc((size_t)counts, sizeof *hist_gpu);
  if (!hist_cpu || !hist_gpu) exit(1);
  if (svgd_distances_on_tensor_cores(dim)) {
    float *dist = gpu_distances(x_dev, n, dim, row_begin, row_end);
    histogram_of_distances(dist, n, row_begin, row_end, pass, select_bits, hist_cpu);
    free(dist);
  } else {
    GPU_TRY(cpu->svgd_pair_histogram(cpu, x, n, dim, row_begin, row_end, pass, select_bits, hist_cpu));
  }
  GPU_TRY(gpu->svgd_pair_histogram(gpu, x_dev, n, dim, row_begin, row_end, pass, select_bits, hist_gpu));
  int64_t differing = 0;
  uint64_t total_gpu = 0;
  for (int bin = 0; bin < counts; ++bin) differing += hist_cpu[bin] != hist_gpu[bin];
  /* PASS_WINDOW's total: its fine bins and the keys below and above them. */
  const int total_bins = pass == SVGD_MEDIAN_PASS_WINDOW ? SVGD_WINDOW_FINE_BINS : SVGD_HIST_BINS;
  for (int bin = 0; bin < total_bins; ++bin) total_gpu += hist_gpu[bin];
  if (pass == SVGD_MEDIAN_PASS_WINDOW) total_gpu += hist_gpu[SVGD_WINDOW_BELOW] + hist_gpu[SVGD_WINDOW_ABOVE];
  /* Exact: tolerance 0 bins. */
  GPU_EXPECT(differing == 0, "%s pass %d: %lld bins differ from the CPU", label, pass, (long long)differing);
  GPU_EXPECT(pass != SVGD_MEDIAN_PASS_WINDOW ||
                 (hist_cpu[SVGD_WINDOW_BELOW] == hist_gpu[SVGD_WINDOW_BELOW] &&
                  hist_cpu[SVGD_WINDOW_ABOVE] == hist_gpu[SVGD_WINDOW_ABOVE]),
             "%s window 0x%08x: below/above %llu/%llu, CPU %llu/%llu", label, select_bits,
             (unsigned long long)hist_gpu[SVGD_WINDOW_BELOW], (unsigned long long)hist_gpu[SVGD_WINDOW_ABOVE],
             (unsigned long long)hist_cpu[SVGD_WINDOW_BELOW], (unsigned long long)hist_cpu[SVGD_WINDOW_ABOVE]);
  if (pass != SVGD_MEDIAN_PASS_LOW)
    GPU_EXPECT(total_gpu == pair_total(n, row_begin, row_end), "%s: %llu counts, expected %llu", label,
               (unsigned long long)total_gpu, (unsigned long long)pair_total(n, row_begin, row_end));
  if (pass == SVGD_MEDIAN_PASS_WINDOW)
    printf("  %-34s rows [%lld, %lld) window 0x%08x: %lld differing bins, %llu counts, below %llu above %llu\n",
           label, (long long)row_begin, (long long)row_end, select_bits, (long long)differing,
           (unsigned long long)total_gpu, (unsigned long long)hist_gpu[SVGD_WINDOW_BELOW],
           (unsigned long long)hist_gpu[SVGD_WINDOW_ABOVE]);
  else
    printf("  %-34s rows [%lld, %lld) pass %d: %lld differing bins, %llu counts\n", label, (long long)row_begin,
           (long long)row_end, pass, (long long)differing, (unsigned long long)total_gpu);
  free(hist_cpu);
  free(hist_gpu);
}

/* Window passes around a median: holding it (centred, at either edge), just past it, far
 * off, at key 0 and at the last window start. */
static void check_windows(const char *label, const float *x, const float *x_dev, int64_t n, int64_t dim,
                          int64_t row_begin, int64_t row_end, float median) {
  uint32_t m;
  memcpy(&m, &median, sizeof m);
  const int64_t half = SVGD_WINDOW_FINE_BINS / 2, last = 0x100000000ll - SVGD_WINDOW_FINE_BINS;
  const int64_t starts[] = {(int64_t)m - half, (int64_t)m, (int64_t)m - SVGD_WINDOW_FINE_BINS + 1, (int64_t)m + 1,
                            (int64_t)m - 3000000, 0, last};
  for (size_t w = 0; w < sizeof starts / sizeof starts[0]; ++w) {
    int64_t start = starts[w] < 0 ? 0 : starts[w] > last ? last : starts[w];
    check_pass(label, x, x_dev, n, dim, row_begin, row_end, SVGD_MEDIAN_PASS_WINDOW, (uint32_t)start);
  }
}

/* The exact median through one backend's histograms (one rank), as median.c computes it. */
static float backend_median(backend_t *b, const float *x, int64_t n, int64_t dim, uint32_t *high_out) {
  uint64_t *hist = test_malloc(SVGD_HIST_BINS * sizeof *hist);
  uint64_t rank = ((uint64_t)n * (uint64_t)n - 1) / 2, rank_in_bin = rank;
  uint32_t high = 0, low = 0;
  for (int pass = SVGD_MEDIAN_PASS_HIGH; pass <= SVGD_MEDIAN_PASS_LOW; ++pass) {
    memset(hist, 0, SVGD_HIST_BINS * sizeof *hist);
    GPU_TRY(b->svgd_pair_histogram(b, x, n, dim, 0, n, pass, high, hist));
    if (pass == SVGD_MEDIAN_PASS_HIGH || high == 0) hist[0] += (uint64_t)n;
    uint32_t bin = 0;
    uint64_t next = 0;
    if (median_locate(hist, rank_in_bin, &bin, &next) != 0) {
      fprintf(stderr, "FAIL: median_locate found too few counts\n");
      exit(1);
    }
    if (pass == SVGD_MEDIAN_PASS_HIGH) high = bin; else low = bin;
    rank_in_bin = next;
  }
  free(hist);
  if (high_out) *high_out = high;
  uint32_t bits = (high << 16) | low;
  float median;
  memcpy(&median, &bits, sizeof median);
  return median;
}

static void check_median_case(const char *label, const float *x, int64_t n, int64_t dim) {
  float *x_dev = device_copy(x, n * dim);
  uint32_t high = 0;
  float median_cpu = n >= 1 ? backend_median(cpu, x, n, dim, &high) : 0.0f;
  float median_gpu = n >= 1 ? backend_median(gpu, x_dev, n, dim, NULL) : 0.0f;
  check_pass(label, x, x_dev, n, dim, 0, n, SVGD_MEDIAN_PASS_HIGH, 0);
  check_pass(label, x, x_dev, n, dim, 0, n, SVGD_MEDIAN_PASS_LOW, high);
  check_windows(label, x, x_dev, n, dim, 0, n, median_cpu);
  if (svgd_distances_on_tensor_cores(dim) && n >= 2) {
    /* The GPU's distances: symmetric bitwise (one count per unordered pair stands for both),
     * within 2e-6 (|y_i|^2 + |y_j|^2) of float64 (y = x - x_0, the GEMM identity's scale) plus
     * 1e-30; the GPU's median the exact lower median of its n^2 distances (diagonal 0), sorted. */
    float *dist = gpu_distances(x_dev, n, dim, 0, n);
    float *values = test_malloc((size_t)(n * n) * sizeof *values);
    int64_t asymmetric = 0;
    double worst = 0.0, scale_sum = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float d = i == j ? 0.0f : dist[i * n + j];
        values[i * n + j] = d;
        if (i == j) continue;
        asymmetric += memcmp(&dist[i * n + j], &dist[j * n + i], sizeof(float)) != 0;
        double exact = 0.0, scale = 0.0;
        for (int64_t k = 0; k < dim; ++k) {
          const double yi = (double)x[i * dim + k] - (double)x[k], yj = (double)x[j * dim + k] - (double)x[k];
          exact += (yi - yj) * (yi - yj);
          scale += yi * yi + yj * yj;
        }
        const double err = fabs((double)d - exact) / (scale + 1e-30);
        scale_sum += scale;
        if (err > worst) worst = err;
      }
    qsort(values, (size_t)(n * n), sizeof *values, compare_floats);
    const float median_exact = values[(n * n - 1) / 2];
    GPU_EXPECT(asymmetric == 0, "%s: %lld GPU distances differ from their transposes", label, (long long)asymmetric);
    GPU_EXPECT(worst <= 2e-6, "%s: GPU distance error %.3g of the pair's scale > 2e-6", label, worst);
    /* Exact: the same bits. */
    GPU_EXPECT(memcmp(&median_exact, &median_gpu, sizeof median_gpu) == 0, "%s: median gpu %.9g, of its distances %.9g",
               label, (double)median_gpu, (double)median_exact);
    /* Against the CPU's (direct differences): 1e-5 relative plus the distances' error bound,
     * 2e-6 of the mean pair scale (coincident particles are 0 on the CPU, a few ulps of |y|^2
     * by the GEMM identity). */
    const double mean_scale = scale_sum / ((double)n * (double)(n - 1));
    GPU_EXPECT(fabs((double)median_gpu - (double)median_cpu) <= 1e-5 * fabs((double)median_cpu) + 2e-6 * mean_scale,
               "%s: median gpu %.9g cpu %.9g", label, (double)median_gpu, (double)median_cpu);
    printf("  %-34s GPU distances: symmetric %s, worst error %.2e of scale, median = its distances' %s\n", label,
           asymmetric ? "NO" : "yes", worst, memcmp(&median_exact, &median_gpu, sizeof median_gpu) ? "NO" : "yes");
    free(values);
    free(dist);
  } else {
    /* Exact: the same bits. */
    GPU_EXPECT(memcmp(&median_cpu, &median_gpu, sizeof median_cpu) == 0, "%s: median gpu %.9g cpu %.9g", label,
               (double)median_gpu, (double)median_cpu);
  }
  printf("  %-34s median gpu %.9g cpu %.9g\n", label, (double)median_gpu, (double)median_cpu);
  gpu->release(gpu, x_dev);
}

static void test_medians(void) {
  printf("median histograms, GPU vs CPU (exact):\n");
  const int64_t sizes[][2] = {{2, 64}, {3, 64}, {7, 64}, {4096, 64}, {4097, 64}, {1000, 5}, {999, 200}, {300, 1},
                              {2, 129}, {4097, 256}, {1500, 1024}};
  for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; ++c) {
    int64_t n = sizes[c][0], dim = sizes[c][1];
    float *x = test_malloc((size_t)(n * dim) * sizeof *x);
    test_fill_normal(x, n * dim, 1.0, 1000 + c);
    char label[64];
    snprintf(label, sizeof label, "normal n=%lld d=%lld", (long long)n, (long long)dim);
    check_median_case(label, x, n, dim);
    free(x);
  }
  /* Identical particles: every distance is 0, so 16-bit shared counters wrap many times (at 40
   * coordinates, padded to 64, on the warpgroup tiles where they apply). */
  for (int64_t dim = 8; dim <= 40; dim += 32) {
    const int64_t n = 3001;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x);
    float row[40];
    test_fill_normal(row, dim, 1.0, dim == 8 ? 77 : 79);
    for (int64_t i = 0; i < n; ++i) memcpy(x + i * dim, row, (size_t)dim * sizeof(float));
    char label[64];
    snprintf(label, sizeof label, "identical n=3001 d=%lld", (long long)dim);
    check_median_case(label, x, n, dim);
    free(x);
  }
  /* Two alternating points: two distinct distances, wraps in both halves of a word. */
  for (int64_t dim = 16; dim <= 64; dim += 48) {
    const int64_t n = 4096;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x);
    float rows[2][64];
    test_fill_normal(&rows[0][0], 2 * 64, 1.0, 78);
    for (int64_t i = 0; i < n; ++i) memcpy(x + i * dim, rows[i % 2], (size_t)dim * sizeof(float));
    char label[64];
    snprintf(label, sizeof label, "two points n=4096 d=%lld", (long long)dim);
    check_median_case(label, x, n, dim);
    free(x);
  }
  { /* The warpgroup window pass flushing its block counters every tile and every 7 tiles
     * (svgd_cuda_tuning_t.window_flush; by default only past 349525 tiles a block): the same
     * counts, on a cloud and on identical particles (one counter takes every pair). */
    const int64_t n = 4097, dim = 64;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x);
    for (int same = 0; same <= 1; ++same) {
      test_fill_normal(x, n * dim, 1.0, same ? 91 : 90);
      if (same)
        for (int64_t i = 1; i < n; ++i) memcpy(x + i * dim, x, (size_t)dim * sizeof(float));
      float *x_dev = device_copy(x, n * dim);
      const float median = backend_median(cpu, x, n, dim, NULL);
      for (int flush = 1; flush <= 7; flush += 6) {
        svgd_cuda_tuning_t tuning = svgd_cuda_get_tuning();
        tuning.window_flush = flush;
        svgd_cuda_set_tuning(tuning);
        char label[64];
        snprintf(label, sizeof label, "%s n=%lld d=%lld flush %d", same ? "identical" : "normal", (long long)n,
                 (long long)dim, flush);
        check_windows(label, x, x_dev, n, dim, 0, n, median);
        check_windows(label, x, x_dev, n, dim, 1000, 3001, median);
        tuning.window_flush = 0;
        svgd_cuda_set_tuning(tuning);
      }
      gpu->release(gpu, x_dev);
    }
    free(x);
  }
  { /* Rows split as 3 ranks would hold them, and row ranges of a large n at both ends. */
    const int64_t n = 4096, dim = 64;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x);
    test_fill_normal(x, n * dim, 1.0, 79);
    float *x_dev = device_copy(x, n * dim);
    const float median = backend_median(cpu, x, n, dim, NULL);
    for (int r = 0; r < 3; ++r) {
      check_pass("rank share of 3, n=4096", x, x_dev, n, dim, r * n / 3, (r + 1) * n / 3, SVGD_MEDIAN_PASS_HIGH, 0);
      check_windows("rank share of 3, n=4096", x, x_dev, n, dim, r * n / 3, (r + 1) * n / 3, median);
    }
    gpu->release(gpu, x_dev);
    free(x);
  }
  { /* Past 128 coordinates (the GEMM identity), a cloud away from the origin, rows as 3 ranks
     * hold them; and identical particles there (every distance exactly 0). */
    const int64_t n = 3001, dim = 300;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x);
    test_fill_normal(x, n * dim, 1.0, 81);
    for (int64_t e = 0; e < n * dim; ++e) x[e] += 50.0f;
    check_median_case("offset 50 n=3001 d=300", x, n, dim);
    float *x_dev = device_copy(x, n * dim);
    const float median = backend_median(cpu, x, n, dim, NULL);
    for (int r = 0; r < 3; ++r)
      check_windows("rank share of 3, n=3001 d=300", x, x_dev, n, dim, r * n / 3, (r + 1) * n / 3, median);
    gpu->release(gpu, x_dev);
    for (int64_t i = 1; i < n; ++i) memcpy(x + i * dim, x, (size_t)dim * sizeof *x);
    check_median_case("identical n=3001 d=300", x, n, dim);
    free(x);
  }
  {
    const int64_t n = 65536, dim = 64;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x);
    test_fill_normal(x, n * dim, 1.0, 80);
    float *x_dev = device_copy(x, n * dim);
    uint32_t high = 0;
    float median = backend_median(gpu, x_dev, n, dim, &high);
    printf("  n=65536 d=64 GPU median %.9g (high bin 0x%04x)\n", (double)median, high);
    check_pass("n=65536 d=64", x, x_dev, n, dim, 0, 512, SVGD_MEDIAN_PASS_HIGH, 0);
    check_pass("n=65536 d=64", x, x_dev, n, dim, 0, 512, SVGD_MEDIAN_PASS_LOW, high);
    check_pass("n=65536 d=64", x, x_dev, n, dim, n - 700, n, SVGD_MEDIAN_PASS_HIGH, 0);
    check_pass("n=65536 d=64", x, x_dev, n, dim, n - 700, n, SVGD_MEDIAN_PASS_LOW, high);
    check_windows("n=65536 d=64", x, x_dev, n, dim, 0, 512, median);
    check_windows("n=65536 d=64", x, x_dev, n, dim, n - 700, n, median);
    gpu->release(gpu, x_dev);
    free(x);
  }
}

/* phi in float64, straight from the definition, for rows [row_begin, row_end). */
static void phi_reference(const float *x, const float *s, int64_t n, int64_t dim, int64_t row_begin,
                          int64_t row_end, double h, double *phi) {
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t i = row_begin; i < row_end; ++i) {
    double *out = phi + (i - row_begin) * dim;
    for (int64_t k = 0; k < dim; ++k) out[k] = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      double dist = 0.0;
      for (int64_t k = 0; k < dim; ++k) {
        double diff = (double)x[i * dim + k] - (double)x[j * dim + k];
        dist += diff * diff;
      }
      double kernel = exp(-dist / (2.0 * h));
      for (int64_t k = 0; k < dim; ++k)
        out[k] += kernel * ((double)s[j * dim + k] + ((double)x[i * dim + k] - (double)x[j * dim + k]) / h);
    }
    for (int64_t k = 0; k < dim; ++k) out[k] /= (double)n;
  }
}

/* phi (rbf, the GPU's median bandwidth) within 2e-6 relative of a float64 direct sum, on every
 * row: x ~ N(offset, 1), scores N(0, 1) times score_scale (the range cases: a cloud far
 * from the origin, scores of 1e30 and 1e-30 scale). */
static void test_phi_accuracy(int64_t n, int64_t dim, float offset, float score_scale) {
  const int64_t count = n * dim;
  float *x = test_malloc((size_t)count * sizeof *x), *s = test_malloc((size_t)count * sizeof *s);
  float *phi = test_malloc((size_t)count * sizeof *phi);
  double *ref = test_malloc((size_t)count * sizeof *ref);
  test_fill_normal(x, count, 1.0, 8100 + (uint64_t)n * 7 + (uint64_t)dim);
  test_fill_normal(s, count, 1.0, 8200 + (uint64_t)n * 7 + (uint64_t)dim);
  for (int64_t e = 0; e < count; ++e) {
    x[e] += offset;
    s[e] *= score_scale;
  }
  float *x_dev = device_copy(x, count), *s_dev = device_copy(s, count), *phi_dev = NULL;
  GPU_TRY(gpu->alloc(gpu, (void **)&phi_dev, (size_t)count * sizeof(float)));
  float median = backend_median(gpu, x_dev, n, dim, NULL);
  if (median < 1e-5f) median = 1e-5f;
  const float h = median / fmaxf(logf((float)n), 1.0f);
  GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 0, n, &(svgd_kernel_t){SVGD_KERNEL_RBF, h, 0.0f, 0.0f}, phi_dev));
  GPU_TRY(gpu->download(gpu, phi, phi_dev, (size_t)count * sizeof(float)));
  phi_reference(x, s, n, dim, 0, n, (double)h, ref);
  double num = 0.0, den = 0.0;
  int64_t not_finite = 0;
  for (int64_t e = 0; e < count; ++e) {
    not_finite += !isfinite(phi[e]);
    num += ((double)phi[e] - ref[e]) * ((double)phi[e] - ref[e]);
    den += ref[e] * ref[e];
  }
  const double err = sqrt(num / den);
  /* float32-class: 2e-6 relative to float64 (issue 24). */
  GPU_EXPECT(not_finite == 0 && err <= 2e-6, "phi n=%lld d=%lld offset %g scores x%g: rel err vs float64 %.3g > 2e-6",
             (long long)n, (long long)dim, (double)offset, (double)score_scale, err);
  printf("  n=%-5lld d=%-4lld offset %-6g scores x%-6g h=%-10.5g phi vs float64 %.2e%s\n", (long long)n, (long long)dim,
         (double)offset, (double)score_scale, (double)h, err, svgd_distances_on_tensor_cores(dim) ? " (tensor cores)" : "");
  gpu->release(gpu, x_dev); gpu->release(gpu, s_dev); gpu->release(gpu, phi_dev);
  free(x); free(s); free(phi); free(ref);
}

/* phi from the distances a median pass kept (backend.h's svgd_keep_distances, dim > 128): within
 * 1e-5 of float64 and of the CPU; rows split as 3 ranks would hold them, each share keeping its
 * own distances in one pass (its band, then the rest), give bitwise the rows of the full launch;
 * and the rbf and imq kernels both take them. */
static void test_phi_kept(int64_t n, int64_t dim, float offset) {
  const int64_t count = n * dim;
  float *x = test_malloc((size_t)count * sizeof *x), *s = test_malloc((size_t)count * sizeof *s);
  test_fill_normal(x, count, 1.2, 7000 + (uint64_t)n + (uint64_t)dim);
  test_fill_normal(s, count, 1.0, 7100 + (uint64_t)n + (uint64_t)dim);
  for (int64_t e = 0; e < count; ++e) x[e] += offset;
  float *x_dev = device_copy(x, count), *s_dev = device_copy(s, count), *phi_dev = NULL;
  GPU_TRY(gpu->alloc(gpu, (void **)&phi_dev, (size_t)count * sizeof(float)));
  float *phi_full = test_malloc((size_t)count * sizeof *phi_full), *phi_part = test_malloc((size_t)count * sizeof *phi_part);
  float *phi_fresh = test_malloc((size_t)count * sizeof *phi_fresh), *phi_cpu = test_malloc((size_t)count * sizeof *phi_cpu);
  GPU_EXPECT(gpu->svgd_keep_distances != NULL, "the CUDA backend keeps distances");
  for (int kind = SVGD_KERNEL_RBF; kind <= SVGD_KERNEL_IMQ; ++kind) {
    GPU_TRY(gpu->svgd_keep_distances(gpu));
    float median = backend_median(gpu, x_dev, n, dim, NULL);
    if (median < 1e-5f) median = 1e-5f;
    const svgd_kernel_t kernel = {kind, median / fmaxf(logf((float)n), 1.0f), 1.0f, -0.5f};
    GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 0, n, &kernel, phi_dev));
    GPU_TRY(gpu->download(gpu, phi_full, phi_dev, (size_t)count * sizeof(float)));
    /* The same call again keeps nothing: the distances are computed afresh (tensor cores). */
    GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 0, n, &kernel, phi_dev));
    GPU_TRY(gpu->download(gpu, phi_fresh, phi_dev, (size_t)count * sizeof(float)));
    GPU_TRY(cpu->svgd_phi(cpu, x, s, n, dim, 0, n, &kernel, phi_cpu));
    const double cpu_err = test_rel_err(phi_full, phi_cpu, count), fresh_err = test_rel_err(phi_full, phi_fresh, count);
    GPU_EXPECT(cpu_err <= 1e-5, "kept n=%lld d=%lld kind %d: phi rel err vs CPU %.3g > 1e-5", (long long)n,
               (long long)dim, kind, cpu_err);
    GPU_EXPECT(fresh_err <= 1e-5, "kept n=%lld d=%lld kind %d: phi rel err vs fresh distances %.3g > 1e-5",
               (long long)n, (long long)dim, kind, fresh_err);
    double ref_err = -1.0;
    if (kind == SVGD_KERNEL_RBF) {
      double *ref = test_malloc((size_t)count * sizeof *ref), num = 0.0, den = 0.0;
      phi_reference(x, s, n, dim, 0, n, (double)kernel.h, ref);
      for (int64_t e = 0; e < count; ++e) {
        num += ((double)phi_full[e] - ref[e]) * ((double)phi_full[e] - ref[e]);
        den += ref[e] * ref[e];
      }
      ref_err = sqrt(num / den);
      GPU_EXPECT(ref_err <= 1e-5, "kept n=%lld d=%lld: phi rel err vs float64 %.3g > 1e-5", (long long)n,
                 (long long)dim, ref_err);
      free(ref);
    }
    int same = 1;
    for (int r = 0; r < 3; ++r) {
      const int64_t rb = r * n / 3, re = (r + 1) * n / 3;
      if (re == rb) continue;
      GPU_TRY(gpu->svgd_keep_distances(gpu));
      uint64_t *counts = NULL;
      /* Any pass keeps them: the window pass for one share, the radix pass for the others. */
      GPU_TRY(gpu->svgd_pair_counts(gpu, x_dev, n, dim, rb, re, r == 1 ? SVGD_MEDIAN_PASS_WINDOW : SVGD_MEDIAN_PASS_HIGH,
                                    0, &counts));
      GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, rb, re, &kernel, phi_dev));
      GPU_TRY(gpu->download(gpu, phi_part, phi_dev, (size_t)((re - rb) * dim) * sizeof(float)));
      same = same && memcmp(phi_part, phi_full + rb * dim, (size_t)((re - rb) * dim) * sizeof(float)) == 0;
    }
    GPU_EXPECT(same, "kept n=%lld d=%lld kind %d: phi of 3 rank shares differs from the full launch", (long long)n,
               (long long)dim, kind);
    printf("  kept distances n=%-5lld d=%-4lld offset %-3g %s: phi vs cpu %.2e, vs fresh %.2e, vs f64 %s%.2e; "
           "3 rank shares %s\n", (long long)n, (long long)dim, (double)offset, kind == SVGD_KERNEL_RBF ? "rbf" : "imq",
           cpu_err, fresh_err, ref_err < 0 ? "(n/a) " : "", ref_err < 0 ? 0.0 : ref_err, same ? "bitwise equal" : "DIFFER");
  }
  gpu->release(gpu, phi_dev);
  gpu->release(gpu, x_dev);
  gpu->release(gpu, s_dev);
  free(x);
  free(s);
  free(phi_full);
  free(phi_part);
  free(phi_fresh);
  free(phi_cpu);
}

/* offset: particles (and the target's mean) moved that far from the origin along every axis. */
static void test_phi_case(int64_t n, int64_t dim, int64_t check_rows, int with_reference, float offset) {
  char args[96];
  snprintf(args, sizeof args, "dim=%lld,mean=%g,scale=1.5", (long long)dim, 0.25 + (double)offset);
  dsampler_target target;
  GPU_TRY(builtin_target_create("gaussian", args, MPI_COMM_NULL, &target));
  const int64_t count = n * dim, rows = check_rows < n ? check_rows : n;
  float *x = test_malloc((size_t)count * sizeof *x), *s = test_malloc((size_t)count * sizeof *s);
  float *logp = test_malloc((size_t)n * sizeof *logp), *s_gpu = test_malloc((size_t)count * sizeof *s_gpu);
  float *logp_gpu = test_malloc((size_t)n * sizeof *logp_gpu);
  test_fill_normal(x, count, 1.2, 5000 + (uint64_t)n * 131 + (uint64_t)dim);
  for (int64_t e = 0; e < count; ++e) x[e] += offset;
  GPU_TRY(cpu->logp_grad(cpu, &target, x, n, logp, s));

  float *x_dev = device_copy(x, count), *s_dev = NULL, *logp_dev = NULL, *phi_dev = NULL, *g_dev = NULL;
  GPU_TRY(gpu->alloc(gpu, (void **)&s_dev, (size_t)count * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&logp_dev, (size_t)n * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&phi_dev, (size_t)count * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&g_dev, (size_t)(2 * count) * sizeof(float)));
  GPU_TRY(gpu->logp_grad(gpu, &target, x_dev, n, logp_dev, s_dev));
  GPU_TRY(gpu->download(gpu, s_gpu, s_dev, (size_t)count * sizeof(float)));
  GPU_TRY(gpu->download(gpu, logp_gpu, logp_dev, (size_t)n * sizeof(float)));
  /* The gaussian's gradient is the same float operations on both: exact. Its logp sums in
   * double in another order: rounded to float, within 1e-6 relative. */
  GPU_EXPECT(memcmp(s, s_gpu, (size_t)count * sizeof *s) == 0, "n=%lld d=%lld: gaussian gradient differs", (long long)n, (long long)dim);
  double logp_err = test_rel_err(logp_gpu, logp, n);
  GPU_EXPECT(logp_err <= 1e-6, "gaussian logp rel err %.3g > 1e-6", logp_err);

  float median = n >= 2 ? backend_median(gpu, x_dev, n, dim, NULL) : 0.0f;
  if (median < 1e-5f) median = 1e-5f;
  const float h = median / fmaxf(logf((float)n), 1.0f);

  float *phi_cpu = test_malloc((size_t)(rows * dim) * sizeof *phi_cpu);
  float *phi_gpu = test_malloc((size_t)count * sizeof *phi_gpu);
  GPU_TRY(cpu->svgd_phi(cpu, x, s, n, dim, 0, rows, &(svgd_kernel_t){SVGD_KERNEL_RBF, h, 0.0f, 0.0f}, phi_cpu));
  GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 0, n, &(svgd_kernel_t){SVGD_KERNEL_RBF, h, 0.0f, 0.0f}, phi_dev));
  GPU_TRY(gpu->download(gpu, phi_gpu, phi_dev, (size_t)count * sizeof(float)));
  double phi_err = test_rel_err(phi_gpu, phi_cpu, rows * dim);
  /* float32 sums over n terms in different orders and exp vs exp2: 1e-5 relative. */
  GPU_EXPECT(phi_err <= 1e-5, "n=%lld d=%lld: phi rel err vs CPU %.3g > 1e-5", (long long)n, (long long)dim, phi_err);
  double ref_err = -1.0;
  if (with_reference) {
    double *ref = test_malloc((size_t)(rows * dim) * sizeof *ref);
    float *ref_f = test_malloc((size_t)(rows * dim) * sizeof *ref_f);
    phi_reference(x, s, n, dim, 0, rows, (double)h, ref);
    double num = 0.0, den = 0.0;
    for (int64_t e = 0; e < rows * dim; ++e) {
      num += ((double)phi_gpu[e] - ref[e]) * ((double)phi_gpu[e] - ref[e]);
      den += ref[e] * ref[e];
    }
    ref_err = sqrt(num / den);
    /* float32 against float64: 1e-5 relative. */
    GPU_EXPECT(ref_err <= 1e-5, "n=%lld d=%lld: phi rel err vs float64 %.3g > 1e-5", (long long)n, (long long)dim, ref_err);
    free(ref);
    free(ref_f);
  }

  /* A row range alone gives bitwise the rows of the full launch. */
  if (n >= 8) {
    const int64_t r0 = n / 3, r1 = n - n / 5;
    float *phi_part = test_malloc((size_t)((r1 - r0) * dim) * sizeof *phi_part);
    GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, r0, r1, &(svgd_kernel_t){SVGD_KERNEL_RBF, h, 0.0f, 0.0f}, phi_dev));
    GPU_TRY(gpu->download(gpu, phi_part, phi_dev, (size_t)((r1 - r0) * dim) * sizeof(float)));
    GPU_EXPECT(memcmp(phi_part, phi_gpu + r0 * dim, (size_t)((r1 - r0) * dim) * sizeof(float)) == 0,
               "n=%lld d=%lld: phi of rows [%lld, %lld) differs from the full launch", (long long)n,
               (long long)dim, (long long)r0, (long long)r1);
    GPU_TRY(gpu->upload(gpu, phi_dev, phi_gpu, (size_t)count * sizeof(float)));
    free(phi_part);
  }

  /* One step, sgd; two adagrad steps; two adam steps, on the checked rows. */
  float *x_cpu = test_malloc((size_t)(rows * dim) * sizeof *x_cpu), *x_gpu = test_malloc((size_t)(rows * dim) * sizeof *x_gpu);
  float *g_cpu = test_malloc((size_t)(2 * rows * dim) * sizeof *g_cpu);
  double step_err[5];
  for (int variant = 0; variant < 5; ++variant) {
    svgd_update_t kind = variant == 0 ? SVGD_UPDATE_SGD : variant <= 2 ? SVGD_UPDATE_ADAGRAD : SVGD_UPDATE_ADAM;
    const int64_t iteration = variant == 1 || variant == 3 ? 0 : 1;
    if (variant <= 1 || variant == 3) {
      memcpy(x_cpu, x, (size_t)(rows * dim) * sizeof *x_cpu);
      GPU_TRY(gpu->upload(gpu, x_dev, x, (size_t)(rows * dim) * sizeof(float)));
    }
    GPU_TRY(cpu->svgd_update(cpu, x_cpu, phi_cpu, g_cpu, rows * dim, kind, 0.1f, iteration));
    GPU_TRY(gpu->svgd_update(gpu, x_dev, phi_dev, g_dev, rows * dim, kind, 0.1f, iteration));
    GPU_TRY(gpu->download(gpu, x_gpu, x_dev, (size_t)(rows * dim) * sizeof(float)));
    step_err[variant] = test_rel_err(x_gpu, x_cpu, rows * dim);
    /* The step ||x_gpu - x_cpu|| / ||x_cpu||: 1e-5 for sgd. Adagrad divides each coordinate
     * by its own |phi|, so a near-zero coordinate carries phi's relative rounding (~1e-6)
     * into the step at full size: 1e-4 there. */
    const double step_tol = kind == SVGD_UPDATE_SGD ? 1e-5 : 1e-4;  /* adam: as adagrad */
    GPU_EXPECT(step_err[variant] <= step_tol, "n=%lld d=%lld: step %d rel err %.3g > %.0e", (long long)n,
               (long long)dim, variant, step_err[variant], step_tol);
  }
  /* The same phi into both updates: x and the optimiser state bitwise equal (the float
   * operations are the same, in the same order, on both backends). */
  int same_update = 1;
  for (int kind = SVGD_UPDATE_ADAGRAD; kind <= SVGD_UPDATE_ADAM; ++kind) {
    const int64_t state = (int64_t)svgd_update_state_floats((svgd_update_t)kind) * rows * dim;
    float *g_gpu = test_malloc((size_t)state * sizeof *g_gpu);
    GPU_TRY(gpu->upload(gpu, phi_dev, phi_cpu, (size_t)(rows * dim) * sizeof(float)));
    for (int64_t iteration = 0; iteration < 3; ++iteration) {
      if (iteration == 0) {
        memcpy(x_cpu, x, (size_t)(rows * dim) * sizeof *x_cpu);
        GPU_TRY(gpu->upload(gpu, x_dev, x, (size_t)(rows * dim) * sizeof(float)));
      }
      GPU_TRY(cpu->svgd_update(cpu, x_cpu, phi_cpu, g_cpu, rows * dim, (svgd_update_t)kind, 0.1f, iteration));
      GPU_TRY(gpu->svgd_update(gpu, x_dev, phi_dev, g_dev, rows * dim, (svgd_update_t)kind, 0.1f, iteration));
    }
    GPU_TRY(gpu->download(gpu, x_gpu, x_dev, (size_t)(rows * dim) * sizeof(float)));
    GPU_TRY(gpu->download(gpu, g_gpu, g_dev, (size_t)state * sizeof(float)));
    const int same = memcmp(x_gpu, x_cpu, (size_t)(rows * dim) * sizeof(float)) == 0 &&
                     memcmp(g_gpu, g_cpu, (size_t)state * sizeof(float)) == 0;
    GPU_EXPECT(same, "n=%lld d=%lld: %s update on the same phi differs between the backends", (long long)n,
               (long long)dim, kind == SVGD_UPDATE_ADAM ? "adam" : "adagrad");
    same_update = same_update && same;
    free(g_gpu);
  }
  printf("  n=%-6lld d=%-4lld offset %-3g rows %-6lld h=%-10.5g phi vs cpu %.2e  vs f64 %s%.2e  step sgd %.2e adagrad %.2e %.2e "
         "adam %.2e %.2e; same phi, 3 steps: %s\n",
         (long long)n, (long long)dim, (double)offset, (long long)rows, (double)h, phi_err, ref_err < 0 ? "(n/a) " : "", ref_err < 0 ? 0.0 : ref_err,
         step_err[0], step_err[1], step_err[2], step_err[3], step_err[4], same_update ? "bitwise equal" : "DIFFER");

  free(x_cpu); free(x_gpu); free(g_cpu); free(phi_cpu); free(phi_gpu);
  free(x); free(s); free(logp); free(s_gpu); free(logp_gpu);
  gpu->release(gpu, x_dev); gpu->release(gpu, s_dev); gpu->release(gpu, logp_dev);
  gpu->release(gpu, phi_dev); gpu->release(gpu, g_dev);
  if (target.destroy) target.destroy(target.self);
}

/* sum_ij u_p(x_i, x_j) in float64 over all ordered pairs (svgd_kernel_math.h's closed forms),
 * rows [row_begin, row_end) against every column. */
static double stein_reference(const float *x, const float *s, int64_t n, int64_t dim, int64_t row_begin, int64_t row_end,
                              const svgd_kernel_t *kernel) {
  const double h = kernel->h, c2 = kernel->c2, beta = kernel->beta;
  double total = 0.0;
#pragma omp parallel for schedule(dynamic, 4) reduction(+ : total)
  for (int64_t i = row_begin; i < row_end; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double D = 0.0, A = 0.0, S = 0.0;
      for (int64_t k = 0; k < dim; ++k) {
        const double r = (double)x[i * dim + k] - (double)x[j * dim + k];
        D += r * r;
        A += ((double)s[i * dim + k] - (double)s[j * dim + k]) * r;
        S += (double)s[i * dim + k] * (double)s[j * dim + k];
      }
      if (kernel->kind == SVGD_KERNEL_RBF) {
        total += exp(-D / (2 * h)) * (S + A / h + (double)dim / h - D / (h * h));
      } else {
        const double q = c2 + D / h;
        total += pow(q, beta) * S - 2 * beta / h * pow(q, beta - 1) * (A + (double)dim) -
                 4 * beta * (beta - 1) * D / (h * h) * pow(q, beta - 2);
      }
    }
  return total;
}

/* The KSD's Stein sum of a cloud N(shift, 1) with scores N(0, 0.8) times score_scale: GPU
 * against float64 and the CPU, and rows split in two give the same exact sum bitwise (what makes
 * it rank-count independent). family (svgd_cuda_tuning_t.ksd_family): 1 the CUDA cores in
 * double, bitwise the CPU's per pair, within 1e-6; 2 the warpgroup tiles where they apply (rbf,
 * 33 to 64 coordinates, sm_90a; else as 1), within 2e-6 of float64 and of the CPU. Scores too
 * large for float's S (CPU and CUDA cores: not finite) are checked against float64 only. */
static void test_stein_case(int64_t n, int64_t dim, int64_t rows, const svgd_kernel_t *kernel, int family,
                            double shift, double score_scale) {
  const int64_t count = n * dim;
  rows = rows < n ? rows : n;
  svgd_cuda_tuning_t tuning = svgd_cuda_get_tuning();
  tuning.ksd_family = family;
  svgd_cuda_set_tuning(tuning);
  float *x = test_malloc((size_t)count * sizeof *x), *s = test_malloc((size_t)count * sizeof *s);
  test_fill_normal(x, count, 1.0, 7000 + (uint64_t)n * 17 + (uint64_t)dim);
  test_fill_normal(s, count, 0.8, 9000 + (uint64_t)n * 17 + (uint64_t)dim);
  for (int64_t e = 0; e < count; ++e) {
    x[e] = (float)((double)x[e] + shift);
    s[e] = (float)((double)s[e] * score_scale);
  }
  const int huge = score_scale > 1e10;
  const double tol = family == 2 ? 2e-6 : 1e-6;
  float *x_dev = device_copy(x, count), *s_dev = device_copy(s, count);
  exact_sum_t cpu_sum, gpu_sum, first, second;
  if (!huge) GPU_TRY(cpu->svgd_stein_sum(cpu, x, s, n, dim, 0, rows, kernel, &cpu_sum));
  GPU_TRY(gpu->svgd_stein_sum(gpu, x_dev, s_dev, n, dim, 0, rows, kernel, &gpu_sum));
  const int64_t split = rows / 3 + 1 < rows ? rows / 3 + 1 : rows;
  GPU_TRY(gpu->svgd_stein_sum(gpu, x_dev, s_dev, n, dim, 0, split, kernel, &first));
  GPU_TRY(gpu->svgd_stein_sum(gpu, x_dev, s_dev, n, dim, split, rows, kernel, &second));
  exact_sum_merge(&first, &second);
  exact_sum_normalize(&first);
  exact_sum_normalize(&gpu_sum);
  const int split_equal = memcmp(first.digit, gpu_sum.digit, sizeof first.digit) == 0;
  GPU_EXPECT(split_equal, "stein n=%lld d=%lld: rows [0, %lld) + [%lld, %lld) differ from one launch", (long long)n,
             (long long)dim, (long long)split, (long long)split, (long long)rows);
  const double got_gpu = exact_sum_value(&gpu_sum);
  double err_cpu = -1.0;
  if (!huge) {
    const double got_cpu = exact_sum_value(&cpu_sum);
    err_cpu = fabs(got_gpu - got_cpu) / fabs(got_cpu);
    GPU_EXPECT(err_cpu <= tol, "stein n=%lld d=%lld family %d: GPU %.12g vs CPU %.12g (rel %.3g > %g)", (long long)n,
               (long long)dim, family, got_gpu, got_cpu, err_cpu, tol);
  }
  double err_ref = -1.0;
  if (rows == n) { /* all rows: the unordered pairs sum to the full double sum */
    const double ref = stein_reference(x, s, n, dim, 0, n, kernel);
    err_ref = fabs(got_gpu - ref) / fabs(ref);
    GPU_EXPECT(err_ref <= tol, "stein n=%lld d=%lld family %d: GPU %.12g vs float64 %.12g (rel %.3g > %g)",
               (long long)n, (long long)dim, family, got_gpu, ref, err_ref, tol);
  }
  printf("  %s family %d n=%-6lld d=%-4lld h=%-7.4g rows %-6lld cloud at %g, scores x %g: GPU vs CPU %.2e, vs "
         "float64 %.2e, split rows bitwise %s\n",
         kernel->kind == SVGD_KERNEL_RBF ? "rbf" : "imq", family, (long long)n, (long long)dim, (double)kernel->h,
         (long long)rows, shift, score_scale, err_cpu, err_ref, split_equal ? "yes" : "NO");
  tuning.ksd_family = 0;
  svgd_cuda_set_tuning(tuning);
  gpu->release(gpu, x_dev);
  gpu->release(gpu, s_dev);
  free(x);
  free(s);
}

/* phi with the IMQ kernel: GPU vs CPU within 1e-5 relative (two weighted sums per row). */
static void test_imq_phi_case(int64_t n, int64_t dim, int64_t rows) {
  const int64_t count = n * dim;
  rows = rows < n ? rows : n;
  float *x = test_malloc((size_t)count * sizeof *x), *s = test_malloc((size_t)count * sizeof *s);
  float *phi_cpu = test_malloc((size_t)(rows * dim) * sizeof *phi_cpu), *phi_gpu = test_malloc((size_t)(rows * dim) * sizeof *phi_gpu);
  test_fill_normal(x, count, 1.5, 3100 + (uint64_t)n + (uint64_t)dim);
  test_fill_normal(s, count, 1.0, 3200 + (uint64_t)n + (uint64_t)dim);
  float *x_dev = device_copy(x, count), *s_dev = device_copy(s, count), *phi_dev = NULL;
  GPU_TRY(gpu->alloc(gpu, (void **)&phi_dev, (size_t)(rows * dim) * sizeof(float)));
  const svgd_kernel_t kernel = {SVGD_KERNEL_IMQ, 0.37f * (float)dim, 0.64f, -0.6f};
  GPU_TRY(cpu->svgd_phi(cpu, x, s, n, dim, 0, rows, &kernel, phi_cpu));
  GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 0, rows, &kernel, phi_dev));
  GPU_TRY(gpu->download(gpu, phi_gpu, phi_dev, (size_t)(rows * dim) * sizeof(float)));
  const double err = test_rel_err(phi_gpu, phi_cpu, rows * dim);
  GPU_EXPECT(err <= 1e-5, "imq phi n=%lld d=%lld: rel err vs CPU %.3g > 1e-5", (long long)n, (long long)dim, err);
  printf("  imq phi n=%-6lld d=%-4lld GPU vs CPU %.2e\n", (long long)n, (long long)dim, err);
  gpu->release(gpu, x_dev); gpu->release(gpu, s_dev); gpu->release(gpu, phi_dev);
  free(x); free(s); free(phi_cpu); free(phi_gpu);
}

/* phi's rows split as 3 ranks would hold them give bitwise the rows of the full launch (the
 * column order is fixed by global indices), for the kernel family set now. */
static void test_phi_rows_split(int64_t n, int64_t dim, const svgd_kernel_t *kernel) {
  const int64_t count = n * dim;
  float *x = test_malloc((size_t)count * sizeof *x), *s = test_malloc((size_t)count * sizeof *s);
  float *full = test_malloc((size_t)count * sizeof *full), *parts = test_malloc((size_t)count * sizeof *parts);
  test_fill_normal(x, count, 1.0, 9100 + (uint64_t)n + (uint64_t)dim);
  test_fill_normal(s, count, 1.0, 9200 + (uint64_t)n + (uint64_t)dim);
  float *x_dev = device_copy(x, count), *s_dev = device_copy(s, count), *phi_dev = NULL;
  GPU_TRY(gpu->alloc(gpu, (void **)&phi_dev, (size_t)count * sizeof(float)));
  GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 0, n, kernel, phi_dev));
  GPU_TRY(gpu->download(gpu, full, phi_dev, (size_t)count * sizeof(float)));
  for (int r = 0; r < 3; ++r) {
    const int64_t begin = n * r / 3, end = n * (r + 1) / 3;
    GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, begin, end, kernel, phi_dev));
    GPU_TRY(gpu->download(gpu, parts + begin * dim, phi_dev, (size_t)((end - begin) * dim) * sizeof(float)));
  }
  const int same = memcmp(full, parts, (size_t)count * sizeof(float)) == 0;
  GPU_EXPECT(same, "phi n=%lld d=%lld kernel %d: rows in 3 shares differ from the full launch", (long long)n,
             (long long)dim, (int)kernel->kind);
  printf("  n=%-5lld d=%-4lld %s: rows in 3 shares bitwise equal to the full launch: %s\n", (long long)n, (long long)dim,
         kernel->kind == SVGD_KERNEL_RBF ? "rbf" : "imq", same ? "yes" : "NO");
  gpu->release(gpu, x_dev); gpu->release(gpu, s_dev); gpu->release(gpu, phi_dev);
  free(x); free(s); free(full); free(parts);
}

static void section_medians(void) {
  /* DSAMPLER_TEST_SKIP_MEDIANS=1 leaves the median histograms out (a quick run of the rest). */
  const char *skip_medians = getenv("DSAMPLER_TEST_SKIP_MEDIANS");
  /* Two variants: the histogram's stage of 16 coordinates with the mma.sync tiles from 4 to 64
   * coordinates, and of 32 with the default tiles there (the warpgroup products on sm_90a). */
  for (int chunk = 16; chunk <= 32 && !(skip_medians && strcmp(skip_medians, "1") == 0); chunk += 16) {
    svgd_cuda_tuning_t tuning = svgd_cuda_get_tuning();
    tuning.hist_chunk = chunk;
    tuning.median_family = chunk == 16 ? 1 : 0;
    svgd_cuda_set_tuning(tuning);
    printf("[histogram chunk %d, %s tiles to 64 coordinates]\n", chunk, chunk == 16 ? "mma.sync" : "default");
    test_medians();
  }
  svgd_cuda_tuning_t tuning = svgd_cuda_get_tuning();
  tuning.hist_chunk = 0;
  tuning.median_family = 0;
  svgd_cuda_set_tuning(tuning);
}

static void section_phi_cpu(void) {
  printf("phi and one step, GPU vs CPU (tolerance 1e-5 relative):\n");
  test_phi_case(1, 64, 1, 1, 0.0f);
  test_phi_case(7, 64, 7, 1, 0.0f);
  test_phi_case(4096, 64, 4096, 1, 0.0f);
  test_phi_case(65536, 64, 512, 1, 0.0f);
  test_phi_case(1000, 3, 1000, 1, 0.0f);
  test_phi_case(1000, 30, 1000, 1, 0.0f);
  test_phi_case(1000, 100, 1000, 1, 0.0f);
  test_phi_case(300, 200, 300, 1, 0.0f);
  test_phi_case(2000, 300, 300, 1, 0.0f);
  test_phi_case(2000, 300, 300, 1, 20.0f); /* a cloud far from the origin (dim > 128: centred) */
  test_phi_case(1100, 1030, 130, 1, 0.0f);
}

static void section_phi_accuracy(void) {
  printf("phi against float64, 2e-6 relative:\n");
  {
    const int64_t dims[] = {1, 2, 3, 5, 8, 13, 16, 31, 32, 33, 48, 64, 100, 128, 129, 300, 1024};
    for (size_t c = 0; c < sizeof dims / sizeof dims[0]; ++c) {
      test_phi_accuracy(dims[c] > 128 ? 1500 : 2048, dims[c], 0.0f, 1.0f); /* even n */
      test_phi_accuracy(dims[c] > 128 ? 1501 : 2001, dims[c], 0.0f, 1.0f); /* odd n */
    }
    test_phi_accuracy(2001, 64, 1000.0f, 1.0f); /* a cloud far from the origin */
    test_phi_accuracy(2001, 3, -1000.0f, 1.0f);
    test_phi_accuracy(1501, 300, 1000.0f, 1.0f);
    test_phi_accuracy(2048, 64, 0.0f, 1e30f); /* scores of 1e30 and 1e-30 scale */
    test_phi_accuracy(2048, 64, 0.0f, 1e-30f);
    test_phi_accuracy(2001, 16, 0.0f, 1e30f);
    test_phi_accuracy(1500, 1024, 0.0f, 1e30f);
    test_phi_accuracy(1500, 1024, 0.0f, 1e-30f);
    test_phi_accuracy(16384, 64, 0.0f, 1.0f);
  }
}

static void section_phi_families(void) {
  /* From 33 to 64 coordinates phi has two kernel families (svgd_cuda_tuning_t.phi_family): the
   * mma.sync tiles and, on sm_90a, the warpgroup products (the default there). Both are held to
   * the same bounds. */
  for (int family = 1; family <= 2; ++family) {
    svgd_cuda_tuning_t phis = svgd_cuda_get_tuning();
    phis.phi_family = family;
    svgd_cuda_set_tuning(phis);
    printf("phi kernel family %d (%s) from 33 to 64 coordinates:\n", family, family == 1 ? "mma.sync" : "wgmma where built");
    test_phi_accuracy(2048, 64, 0.0f, 1.0f);
    test_phi_accuracy(2001, 64, 0.0f, 1.0f);
    test_phi_accuracy(2001, 33, 0.0f, 1.0f);
    test_phi_accuracy(2048, 48, 0.0f, 1.0f);
    test_phi_accuracy(2001, 64, 1000.0f, 1.0f);
    test_phi_accuracy(2048, 64, 0.0f, 1e30f);
    test_phi_accuracy(2048, 64, 0.0f, 1e-30f);
    test_phi_accuracy(9001, 64, 0.0f, 1.0f);
    test_phi_rows_split(3001, 64, &(svgd_kernel_t){SVGD_KERNEL_RBF, 9.0f, 0.0f, 0.0f});
    test_phi_rows_split(3001, 40, &(svgd_kernel_t){SVGD_KERNEL_IMQ, 20.0f, 1.0f, -0.5f});
    test_imq_phi_case(3000, 64, 3000);
    test_phi_case(4096, 64, 4096, 1, 0.0f);
    phis.phi_family = 0;
    svgd_cuda_set_tuning(phis);
  }
}

static void section_phi_kept(void) {
  test_phi_kept(1000, 200, 0.0f);  /* even n */
  test_phi_kept(1537, 300, 20.0f); /* odd n, a cloud far from the origin */
  test_phi_kept(5, 129, 0.0f);     /* fewer rows than a tile */
  /* dim > 128 goes by slabs of columns: any slab width gives bitwise the same phi. 260: 16-byte
   * copies of x and v; 261: 4-byte copies. */
  for (int64_t dim = 260; dim <= 261; ++dim) {
    const int64_t n = 1500;
    float *x = test_malloc((size_t)(n * dim) * sizeof *x), *s = test_malloc((size_t)(n * dim) * sizeof *s);
    float *phi_auto = test_malloc((size_t)(n * dim) * sizeof *phi_auto), *phi_slab = test_malloc((size_t)(n * dim) * sizeof *phi_slab);
    test_fill_normal(x, n * dim, 1.0, 4242);
    test_fill_normal(s, n * dim, 1.0, 4343);
    float *x_dev = device_copy(x, n * dim), *s_dev = device_copy(s, n * dim), *phi_dev = NULL;
    GPU_TRY(gpu->alloc(gpu, (void **)&phi_dev, (size_t)(n * dim) * sizeof(float)));
    GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 100, n, &(svgd_kernel_t){SVGD_KERNEL_RBF, 7.5f, 0.0f, 0.0f}, phi_dev));
    GPU_TRY(gpu->download(gpu, phi_auto, phi_dev, (size_t)((n - 100) * dim) * sizeof(float)));
    svgd_cuda_tuning_t slabs = svgd_cuda_get_tuning();
    slabs.wide_slab = 256;
    svgd_cuda_set_tuning(slabs);
    GPU_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, dim, 100, n, &(svgd_kernel_t){SVGD_KERNEL_RBF, 7.5f, 0.0f, 0.0f}, phi_dev));
    GPU_TRY(gpu->download(gpu, phi_slab, phi_dev, (size_t)((n - 100) * dim) * sizeof(float)));
    slabs.wide_slab = 0;
    svgd_cuda_set_tuning(slabs);
    GPU_EXPECT(memcmp(phi_auto, phi_slab, (size_t)((n - 100) * dim) * sizeof(float)) == 0,
               "n=%lld d=%lld: phi with 256-column slabs differs from one slab", (long long)n, (long long)dim);
    printf("  n=%lld d=%lld: phi with 256-column slabs (6 slabs) bitwise equal to one slab: %s\n", (long long)n,
           (long long)dim, memcmp(phi_auto, phi_slab, (size_t)((n - 100) * dim) * sizeof(float)) == 0 ? "yes" : "NO");
    gpu->release(gpu, x_dev); gpu->release(gpu, s_dev); gpu->release(gpu, phi_dev);
    free(x); free(s); free(phi_auto); free(phi_slab);
  }
}

static void section_stein(void) {
  printf("kernel Stein discrepancy sums, GPU vs CPU and float64 (1e-6 relative on the CUDA cores, 2e-6 on the warpgroup tiles):\n");
  const svgd_kernel_t rbf = {SVGD_KERNEL_RBF, 2.5f, 1.0f, -0.5f}, imq = {SVGD_KERNEL_IMQ, 1.0f, 1.0f, -0.5f};
  const svgd_kernel_t imq_wide = {SVGD_KERNEL_IMQ, 40.0f, 2.25f, -0.3f};
  const int64_t stein_cases[][2] = {{1, 3}, {2, 5}, {3, 1}, {64, 7}, {65, 16}, {1000, 17}, {4097, 64}, {2048, 130}};
  for (size_t c = 0; c < sizeof stein_cases / sizeof stein_cases[0]; ++c)
    for (int family = 1; family <= 2; ++family) {
      test_stein_case(stein_cases[c][0], stein_cases[c][1], stein_cases[c][0], &rbf, family, 0.0, 1.0);
      test_stein_case(stein_cases[c][0], stein_cases[c][1], stein_cases[c][0],
                      stein_cases[c][1] > 100 ? &imq_wide : &imq, family, 0.0, 1.0);
    }
  for (int family = 1; family <= 2; ++family) test_stein_case(65536, 64, 300, &rbf, family, 0.0, 1.0);
}

static void section_stein_tiles(void) {
  /* The warpgroup tiles (rbf, 33 to 64 coordinates) at the median-like bandwidth 2 d / log n,
   * where most pairs weigh: odd and even n, a cloud far from the origin, scores of 1e30 and
   * 1e-30 scale (float64 alone for 1e30: S overflows float on the CPU and the CUDA cores); and
   * just outside them (32, 65, 130 coordinates: the CUDA cores whatever the family), where a
   * short bandwidth would hide a wrong off-diagonal sum behind the diagonal. */
  const int64_t tile_cases[][2] = {{4097, 64}, {2000, 33}, {3001, 48}, {9001, 64}, {130, 40},
                                   {2001, 32}, {2000, 65}, {1500, 130}};
  for (size_t c = 0; c < sizeof tile_cases / sizeof tile_cases[0]; ++c) {
    const int64_t n = tile_cases[c][0], dim = tile_cases[c][1];
    const svgd_kernel_t median_like = {SVGD_KERNEL_RBF, (float)(2.0 * (double)dim / log((double)n)), 1.0f, -0.5f};
    test_stein_case(n, dim, n, &median_like, 2, 0.0, 1.0);
    test_stein_case(n, dim, n, &median_like, 1, 0.0, 1.0);
  }
  const svgd_kernel_t tiles_64 = {SVGD_KERNEL_RBF, (float)(2.0 * 64.0 / log(4097.0)), 1.0f, -0.5f};
  test_stein_case(4097, 64, 4097, &tiles_64, 2, 1000.0, 1.0);
  test_stein_case(4097, 64, 4097, &tiles_64, 2, 0.0, 1e30);
  test_stein_case(4097, 64, 4097, &tiles_64, 2, 0.0, 1e-30);
  test_stein_case(4097, 64, 4097, &tiles_64, 2, -300.0, 1e-30);
}

static void section_imq(void) {
  printf("phi with the IMQ kernel, GPU vs CPU:\n");
  test_imq_phi_case(7, 5, 7);
  test_imq_phi_case(3000, 64, 3000);
  test_imq_phi_case(1200, 300, 400);
}

int main(int argc, char **argv) {
  if (comm_cuda_device_count() == 0) {
    printf("no CUDA device: skipped\n");
    return GPU_TEST_SKIP;
  }
  GPU_TRY(backend_cpu_create(&cpu));
  GPU_TRY(backend_cuda_create(0, &gpu));
  static const gpu_test_section_t sections[] = {
      {"medians", section_medians},
      {"phi_cpu", section_phi_cpu},
      {"phi_accuracy", section_phi_accuracy},
      {"phi_families", section_phi_families},
      {"phi_kept", section_phi_kept},
      {"stein", section_stein},
      {"stein_tiles", section_stein_tiles},
      {"imq", section_imq},
  };
  const int status = gpu_test_run_sections(sections, (int)(sizeof sections / sizeof sections[0]), argc, argv);
  backend_destroy(gpu);
  backend_destroy(cpu);
  return status;
}
