/* bench_gpu.c: timings of the CUDA backend on one GPU, through backend.h as the run driver
 * uses it: the SVGD step (score, the two exact-median histogram passes, phi, update) and the
 * HMC iteration, each timed with CUDA events around the region, a warm-up first, the median
 * of several repeats reported. Then SVGD steps in sequence as a run makes them, the median
 * through svgd_exact_median with the last medians kept (the window pass, median.h): its hit
 * rate and per-step times, each median checked equal to the radix select's. Also phi's
 * accuracy against a float64 direct sum. Prints tables. Exits 77 without a GPU.
 * Modes: --logistic FILE CHAINS, --svgd-dim D N,N,..., --ksd D N,N,... (the KSD pass beside phi),
 * --generic D CHAINS (the generic HMC path's begin and finish kernels). */
#include <cuda_runtime_api.h>
#include <curand.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_cuda.h"
#include "comm_cuda.h"
#include "cuda_check.h"
#include "hmc_kernels.h"
#include "median.h"
#include "svgd_kernels.h"
#include "status.h"
#include "targets_builtin.h"

#define BENCH_TRY(call)                                                                      \
  do {                                                                                       \
    int bench_status_ = (call);                                                              \
    if (bench_status_ != DS_OK) {                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, ds_error_message()); \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

static int64_t bench_dim = 64; /* coordinates of the benchmarks' particles and chains */

static backend_t *gpu;
static comm_ctx_t comm;
static cudaStream_t stream;
static cudaEvent_t marks[8];

static int compare_floats(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}
static float median_of(float *values, int count) {
  qsort(values, (size_t)count, sizeof *values, compare_floats);
  return values[count / 2];
}

/* cuRAND's Philox on the benchmarks' stream: seeded inputs. */
static int bench_generator(unsigned long long seed, curandGenerator_t *generator) {
  CURAND_CHECK(curandCreateGenerator(generator, CURAND_RNG_PSEUDO_PHILOX4_32_10));
  CURAND_CHECK(curandSetPseudoRandomGeneratorSeed(*generator, seed));
  CURAND_CHECK(curandSetStream(*generator, stream));
  return DS_OK;
}

static int fill_normal(curandGenerator_t generator, float *dev, size_t count, float stddev) {
  CURAND_CHECK(curandGenerateNormal(generator, dev, count, 0.0f, stddev));
  return DS_OK;
}

static int fill_uniform(curandGenerator_t generator, float *dev, size_t count) {
  CURAND_CHECK(curandGenerateUniform(generator, dev, count));
  return DS_OK;
}

static int record(int mark) {
  CUDA_CHECK(cudaEventRecord(marks[mark], stream));
  return DS_OK;
}
static float between(int from, int to) {
  float ms = 0.0f;
  BENCH_TRY(cudaEventSynchronize(marks[to]) == cudaSuccess ? DS_OK : ds_fail(DS_ERR_GPU, "event"));
  BENCH_TRY(cudaEventElapsedTime(&ms, marks[from], marks[to]) == cudaSuccess ? DS_OK : ds_fail(DS_ERR_GPU, "elapsed"));
  return ms;
}

/* One median pass and where it puts the rank (one rank holds every row). */
static void median_pass(const float *x, int64_t n, int pass, uint32_t *high, uint64_t *rank_in_bin, uint32_t *bin,
                        uint64_t *hist) {
  memset(hist, 0, SVGD_HIST_BINS * sizeof *hist);
  BENCH_TRY(gpu->svgd_pair_histogram(gpu, x, n, bench_dim, 0, n, pass, *high, hist));
  if (pass == SVGD_MEDIAN_PASS_HIGH || *high == 0) hist[0] += (uint64_t)n;
  uint64_t next = 0;
  if (median_locate(hist, *rank_in_bin, bin, &next) != 0) BENCH_TRY(ds_fail(DS_ERR_INTERNAL, "median_locate"));
  *rank_in_bin = next;
  if (pass == SVGD_MEDIAN_PASS_HIGH) *high = *bin;
}

typedef struct svgd_row {
  int64_t n;
  float step_ms, pass1_ms, pass2_ms, phi_ms, rest_ms;
  float window_ms; /* one window pass around this median, not part of step_ms */
} svgd_row_t;

static svgd_row_t bench_svgd(curandGenerator_t generator, const dsampler_target *target, int64_t n, int repeats) {
  const size_t count = (size_t)n * bench_dim;
  float *x, *score, *logp, *phi;
  BENCH_TRY(gpu->alloc(gpu, (void **)&x, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&score, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&phi, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&logp, (size_t)n * sizeof(float)));
  BENCH_TRY(fill_normal(generator, x, count, 1.0f));
  uint64_t *hist = malloc(SVGD_HIST_BINS * sizeof *hist);
  float *step_ms = calloc((size_t)repeats, sizeof(float)), *pass1 = calloc((size_t)repeats, sizeof(float));
  float *pass2 = calloc((size_t)repeats, sizeof(float)), *phi_ms = calloc((size_t)repeats, sizeof(float));
  float *rest = calloc((size_t)repeats, sizeof(float)), *window = calloc((size_t)repeats, sizeof(float));
  uint64_t *window_counts = malloc(SVGD_WINDOW_COUNTS * sizeof *window_counts);
  if (!hist || !step_ms || !pass1 || !pass2 || !phi_ms || !rest || !window || !window_counts) exit(1);
  for (int r = -1; r < repeats; ++r) { /* r = -1: warm-up */
    BENCH_TRY(record(0));
    BENCH_TRY(gpu->logp_grad(gpu, target, x, n, logp, score));
    BENCH_TRY(record(1));
    uint32_t high = 0, bin = 0;
    uint64_t rank = ((uint64_t)n * (uint64_t)n - 1) / 2;
    median_pass(x, n, SVGD_MEDIAN_PASS_HIGH, &high, &rank, &bin, hist);
    BENCH_TRY(record(2));
    median_pass(x, n, SVGD_MEDIAN_PASS_LOW, &high, &rank, &bin, hist);
    BENCH_TRY(record(3));
    uint32_t bits = (high << 16) | bin;
    float median;
    memcpy(&median, &bits, sizeof median);
    if (median < 1e-5f) median = 1e-5f;
    const float h = median / fmaxf(logf((float)n), 1.0f);
    BENCH_TRY(gpu->svgd_phi(gpu, x, score, n, bench_dim, 0, n, &(svgd_kernel_t){SVGD_KERNEL_RBF, h, 0.0f, 0.0f}, phi));
    BENCH_TRY(record(4));
    BENCH_TRY(gpu->svgd_update(gpu, x, phi, NULL, (int64_t)count, SVGD_UPDATE_SGD, 0.01f, 1));
    BENCH_TRY(record(5));
    /* The window pass a run makes next, centred on this median (untimed in step_ms). */
    memset(window_counts, 0, SVGD_WINDOW_COUNTS * sizeof *window_counts);
    const uint32_t start = bits > SVGD_WINDOW_FINE_BINS / 2 ? bits - SVGD_WINDOW_FINE_BINS / 2 : 0;
    BENCH_TRY(record(6));
    BENCH_TRY(gpu->svgd_pair_histogram(gpu, x, n, bench_dim, 0, n, SVGD_MEDIAN_PASS_WINDOW, start, window_counts));
    BENCH_TRY(record(7));
    if (r < 0) {
      BENCH_TRY(gpu->synchronize(gpu));
      continue;
    }
    step_ms[r] = between(0, 5);
    pass1[r] = between(1, 2);
    pass2[r] = between(2, 3);
    phi_ms[r] = between(3, 4);
    rest[r] = between(0, 1) + between(4, 5);
    window[r] = between(6, 7);
  }
  svgd_row_t row = {n, median_of(step_ms, repeats), median_of(pass1, repeats), median_of(pass2, repeats),
                    median_of(phi_ms, repeats), median_of(rest, repeats), median_of(window, repeats)};
  free(hist); free(step_ms); free(pass1); free(pass2); free(phi_ms); free(rest); free(window); free(window_counts);
  gpu->release(gpu, x); gpu->release(gpu, score); gpu->release(gpu, phi); gpu->release(gpu, logp);
  return row;
}

typedef struct sequence_row {
  int64_t n;
  int steps;                     /* steps after the first, which has no previous median */
  int64_t hits, misses;
  float first_step_ms, first_median_ms;
  float step_ms, median_ms;      /* medians over the later steps */
  float hit_median_ms, miss_median_ms;
  int mismatches;                /* medians differing from the radix select's */
} sequence_row_t;

/* `steps` SVGD steps (sgd, step size `step`) from x drawn N(0, 1) (spread < 0) or U(-spread,
 * spread) as dsampler's default init, after one warm-up step. Each step's median goes through
 * one svgd_median_state_t, as svgd.c keeps it; before each step, untimed, the radix select
 * alone computes the median of the same particles for the check. */
static sequence_row_t bench_svgd_sequence(curandGenerator_t generator, const dsampler_target *target, int64_t n,
                                          int steps, float step, float spread) {
  const size_t count = (size_t)n * bench_dim;
  float *x, *score, *logp, *phi;
  BENCH_TRY(gpu->alloc(gpu, (void **)&x, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&score, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&phi, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&logp, (size_t)n * sizeof(float)));
  if (spread < 0) {
    BENCH_TRY(fill_normal(generator, x, count, 1.0f));
  } else {
    BENCH_TRY(fill_uniform(generator, x, count));
    float *host = malloc(count * sizeof *host);
    if (!host) exit(1);
    BENCH_TRY(gpu->download(gpu, host, x, count * sizeof(float)));
    for (size_t e = 0; e < count; ++e) host[e] = spread * (2.0f * host[e] - 1.0f);
    BENCH_TRY(gpu->upload(gpu, x, host, count * sizeof(float)));
    free(host);
  }
  float *step_ms = calloc((size_t)steps + 1, sizeof(float)), *median_ms = calloc((size_t)steps + 1, sizeof(float));
  float *hit_ms = calloc((size_t)steps + 1, sizeof(float)), *miss_ms = calloc((size_t)steps + 1, sizeof(float));
  if (!step_ms || !median_ms || !hit_ms || !miss_ms) exit(1);
  sequence_row_t row = {n, steps, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  svgd_median_state_t state;
  svgd_median_state_init(&state);
  int n_hit = 0, n_miss = 0;
  for (int t = -1; t <= steps; ++t) { /* t = -1: warm-up; t = 0: no previous median */
    if (t == 0) svgd_median_state_init(&state);
    float reference;
    BENCH_TRY(svgd_exact_median(&comm, gpu, x, n, bench_dim, 0, n, NULL, &reference));
    const int64_t hits_before = state.window_hits;
    BENCH_TRY(record(0));
    BENCH_TRY(gpu->logp_grad(gpu, target, x, n, logp, score));
    BENCH_TRY(record(1));
    float median;
    BENCH_TRY(svgd_exact_median(&comm, gpu, x, n, bench_dim, 0, n, &state, &median));
    BENCH_TRY(record(2));
    row.mismatches += memcmp(&median, &reference, sizeof median) != 0;
    const float h = fmaxf(median, 1e-5f) / fmaxf(logf((float)n), 1.0f);
    BENCH_TRY(gpu->svgd_phi(gpu, x, score, n, bench_dim, 0, n, &(svgd_kernel_t){SVGD_KERNEL_RBF, h, 0.0f, 0.0f}, phi));
    BENCH_TRY(gpu->svgd_update(gpu, x, phi, NULL, (int64_t)count, SVGD_UPDATE_SGD, step, 1));
    BENCH_TRY(record(3));
    if (t < 0) {
      BENCH_TRY(gpu->synchronize(gpu));
      continue;
    }
    step_ms[t] = between(0, 3);
    median_ms[t] = between(1, 2);
    if (t == 0) continue;
    if (state.window_hits > hits_before) hit_ms[n_hit++] = median_ms[t]; else miss_ms[n_miss++] = median_ms[t];
  }
  row.first_step_ms = step_ms[0];
  row.first_median_ms = median_ms[0];
  row.step_ms = median_of(step_ms + 1, steps);
  row.median_ms = median_of(median_ms + 1, steps);
  row.hits = state.window_hits;
  row.misses = state.window_misses;
  row.hit_median_ms = n_hit ? median_of(hit_ms, n_hit) : NAN;
  row.miss_median_ms = n_miss ? median_of(miss_ms, n_miss) : NAN;
  free(step_ms); free(median_ms); free(hit_ms); free(miss_ms);
  gpu->release(gpu, x); gpu->release(gpu, score); gpu->release(gpu, phi); gpu->release(gpu, logp);
  return row;
}

typedef struct hmc_row {
  int64_t chains;
  int shared_metric;
  float iteration_ms;
  double accept_rate, gbytes_per_s;
} hmc_row_t;

/* 1: each transition also adds the state to per-chain running moments (the warmup window's, or
 * the sampling moments), as dsampler does in adaptation windows and on kept draws. */
static int bench_moments = 0;
/* 1: after each transition, the statistics summed exactly (hmc_stats, with its copy to the host). */
static int bench_stats = 0;

/* shared_metric: one inverse metric for all chains (--adapt pooled or none), else one per chain. */
static hmc_row_t bench_hmc(curandGenerator_t generator, const dsampler_target *target, int64_t chains, int repeats,
                           int shared_metric) {
  const size_t count = (size_t)chains * bench_dim;
  float *q, *grad, *inv_metric, *logp, *step;
  uint8_t *accepted;
  BENCH_TRY(gpu->alloc(gpu, (void **)&q, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&grad, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&inv_metric, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&logp, (size_t)chains * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&step, (size_t)chains * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&accepted, (size_t)chains));
  BENCH_TRY(fill_normal(generator, q, count, 1.0f));
  float *ones = malloc(count * sizeof(float));
  uint8_t *flags = malloc((size_t)chains);
  if (!ones || !flags) exit(1);
  for (size_t e = 0; e < count; ++e) ones[e] = 1.0f;
  BENCH_TRY(gpu->upload(gpu, inv_metric, ones, count * sizeof(float)));
  for (int64_t c = 0; c < chains; ++c) ones[c] = 0.1f;
  BENCH_TRY(gpu->upload(gpu, step, ones, (size_t)chains * sizeof(float)));
  BENCH_TRY(gpu->logp_grad(gpu, target, q, chains, logp, grad));
  hmc_batch_t batch = {.n_chains = chains, .chain_begin = 0, .dim = bench_dim, .seed = 2024, .iteration = 0,
                       .n_leapfrog = 10, .q = q, .logp = logp, .grad = grad, .step_nominal = step,
                       .inv_metric = inv_metric, .accepted = accepted, .shared_metric = shared_metric};
  BENCH_TRY(hmc_batch_alloc_stats(gpu, &batch));
  float *moment_mean = NULL, *moment_m2 = NULL;
  if (bench_moments) {
    BENCH_TRY(gpu->alloc(gpu, (void **)&moment_mean, count * sizeof(float)));
    BENCH_TRY(gpu->alloc(gpu, (void **)&moment_m2, count * sizeof(float)));
    BENCH_TRY(gpu->fill(gpu, moment_mean, 0.0f, (int64_t)count));
    BENCH_TRY(gpu->fill(gpu, moment_m2, 0.0f, (int64_t)count));
    batch.moment_mean = moment_mean;
    batch.moment_m2 = moment_m2;
  }
  float *ms = calloc((size_t)repeats, sizeof(float));
  if (!ms) exit(1);
  for (int r = -3; r < repeats; ++r) {
    batch.iteration = (uint32_t)(r + 3);
    batch.moment_count = r + 4;
    BENCH_TRY(record(0));
    BENCH_TRY(gpu->hmc_transition(gpu, target, &batch));
    if (bench_stats) {
      hmc_stats_t stats;
      BENCH_TRY(gpu->hmc_stats(gpu, &batch, &stats));
    }
    BENCH_TRY(record(1));
    if (r >= 0) ms[r] = between(0, 1);
  }
  BENCH_TRY(gpu->download(gpu, flags, accepted, (size_t)chains));
  int64_t n_accepted = 0;
  for (int64_t c = 0; c < chains; ++c) n_accepted += flags[c];
  hmc_row_t row = {chains, shared_metric, median_of(ms, repeats), (double)n_accepted / (double)chains, 0.0};
  /* Bytes that must move: q and the metric (per chain, unless shared) read, step size and logp
   * read; on accept q, grad and logp written; four outputs per chain. */
  double bytes = (double)chains * ((shared_metric ? 1.0 : 2.0) * bench_dim * 4 + 8 + 10) +
                 (double)n_accepted * (2.0 * bench_dim * 4 + 4);
  row.gbytes_per_s = bytes / (row.iteration_ms * 1e-3) / 1e9;
  free(ms); free(ones); free(flags);
  gpu->release(gpu, q); gpu->release(gpu, grad); gpu->release(gpu, inv_metric); gpu->release(gpu, logp);
  gpu->release(gpu, step); gpu->release(gpu, moment_mean); gpu->release(gpu, moment_m2);
  hmc_batch_release_stats(gpu, &batch); gpu->release(gpu, accepted);
  return row;
}

/* ||phi - phi_f64|| / ||phi_f64|| at a small n, the float64 sum straight from the definition. */
static double phi_accuracy(const dsampler_target *target, int64_t n) {
  const size_t count = (size_t)n * bench_dim;
  float *x = malloc(count * sizeof *x), *s = malloc(count * sizeof *s), *logp = malloc((size_t)n * sizeof *logp);
  float *phi = malloc(count * sizeof *phi);
  double *ref = calloc(count, sizeof *ref);
  if (!x || !s || !logp || !phi || !ref) exit(1);
  uint64_t state = 12345;
  for (size_t e = 0; e < count; ++e) { /* Box-Muller from an LCG: seeded, not zeros */
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double u = ((double)(state >> 11) + 0.5) * 0x1p-53;
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    double v = ((double)(state >> 11) + 0.5) * 0x1p-53;
    x[e] = (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
  }
  backend_t *cpu = NULL;
  BENCH_TRY(backend_cpu_create(&cpu));
  BENCH_TRY(cpu->logp_grad(cpu, target, x, n, logp, s));
  backend_destroy(cpu);
  float *x_dev, *s_dev, *phi_dev;
  BENCH_TRY(gpu->alloc(gpu, (void **)&x_dev, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&s_dev, count * sizeof(float)));
  BENCH_TRY(gpu->alloc(gpu, (void **)&phi_dev, count * sizeof(float)));
  BENCH_TRY(gpu->upload(gpu, x_dev, x, count * sizeof(float)));
  BENCH_TRY(gpu->upload(gpu, s_dev, s, count * sizeof(float)));
  const float h = 1.7f;
  BENCH_TRY(gpu->svgd_phi(gpu, x_dev, s_dev, n, bench_dim, 0, n, &(svgd_kernel_t){SVGD_KERNEL_RBF, h, 0.0f, 0.0f}, phi_dev));
  BENCH_TRY(gpu->download(gpu, phi, phi_dev, count * sizeof(float)));
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double dist = 0.0;
      for (int k = 0; k < bench_dim; ++k) {
        double diff = (double)x[i * bench_dim + k] - (double)x[j * bench_dim + k];
        dist += diff * diff;
      }
      double kernel = exp(-dist / (2.0 * (double)h));
      for (int k = 0; k < bench_dim; ++k)
        ref[i * bench_dim + k] += kernel * ((double)s[j * bench_dim + k] + ((double)x[i * bench_dim + k] - (double)x[j * bench_dim + k]) / (double)h);
    }
    for (int k = 0; k < bench_dim; ++k) ref[i * bench_dim + k] /= (double)n;
  }
  double num = 0.0, den = 0.0;
  for (size_t e = 0; e < count; ++e) {
    num += ((double)phi[e] - ref[e]) * ((double)phi[e] - ref[e]);
    den += ref[e] * ref[e];
  }
  free(x); free(s); free(logp); free(phi); free(ref);
  gpu->release(gpu, x_dev); gpu->release(gpu, s_dev); gpu->release(gpu, phi_dev);
  return sqrt(num / den);
}

/* One SVGD step at N=32768 and one HMC iteration at 2^20 chains, for a profiler. */
static int run_quick(curandGenerator_t generator, const dsampler_target *target) {
  (void)bench_svgd(generator, target, 32768, 1);
  (void)bench_hmc(generator, target, 1048576, 1, 1);
  return DS_OK;
}

/* The HMC transition alone and with what a dsampler iteration adds on the device: the moments
 * (adaptation windows, kept draws) and the summed statistics (with their copy to the host). */
static int run_hmc_only(curandGenerator_t generator, const dsampler_target *target, const char *gpu_name) {
  printf("%s: d=64, L=10, eps=0.1, shared metric; CUDA events, median of 21\n", gpu_name);
  printf("| HMC chains | transition ms | + moments ms | + moments + stats ms |\n|---|---|---|---|\n");
  const int64_t sizes[] = {65536, 1048576};
  for (int c = 0; c < 2; ++c) {
    bench_moments = bench_stats = 0;
    const hmc_row_t plain = bench_hmc(generator, target, sizes[c], 21, 1);
    bench_moments = 1;
    const hmc_row_t moments = bench_hmc(generator, target, sizes[c], 21, 1);
    bench_stats = 1;
    const hmc_row_t both = bench_hmc(generator, target, sizes[c], 21, 1);
    printf("| %10lld | %13.4f | %12.4f | %20.4f |\n", (long long)sizes[c], plain.iteration_ms, moments.iteration_ms,
           both.iteration_ms);
  }
  return DS_OK;
}

/* The generic path's begin and finish kernels alone (hmc_kernels.h), the parts of an iteration
 * that a target's own trajectory (leapfrog_cuda: a JAX model's programs) does not do: CUDA
 * events around each launch, median of 21 after 3 warm-ups, beside a device-to-device copy of
 * one [chains, dim] array (the bandwidth they are held to). Rows: begin with and without its
 * copies of q and grad into the work arrays; finish alone, with the sampling moments and with
 * ChEES's terms (warmup); finish for a trajectory that ran in place (HMC_STATE_IN_PLACE: rejected
 * chains restored, the accepted ones, about half here, left). */
static int run_generic(int64_t dim, int64_t chains, const char *gpu_name) {
  const size_t count = (size_t)(chains * dim), n = (size_t)chains;
  float *q, *grad, *inv, *logp, *step_nominal, *q_work, *p_work, *grad_work, *logp_work, *uniform, *mean, *m2;
  float *center, *chees;
  double *h0, *h0_begin; /* begin writes its own H0: finish's stays as set below */
  uint8_t *accepted;
  float **arrays[] = {&q, &grad, &q_work, &p_work, &grad_work, &mean, &m2};
  for (int a = 0; a < 7; ++a) CUDA_CHECK(cudaMalloc((void **)arrays[a], count * sizeof(float)));
  float **rows[] = {&logp, &step_nominal, &logp_work, &uniform};
  for (int a = 0; a < 4; ++a) CUDA_CHECK(cudaMalloc((void **)rows[a], n * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&inv, (size_t)dim * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&center, (size_t)dim * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&chees, 2 * n * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&h0, n * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void **)&h0_begin, n * sizeof(double)));
  CUDA_CHECK(cudaMalloc((void **)&accepted, n));
  curandGenerator_t generator;
  BENCH_TRY(bench_generator(7, &generator));
  for (int a = 0; a < 7; ++a) BENCH_TRY(fill_normal(generator, *arrays[a], count, 1.0f));
  BENCH_TRY(fill_normal(generator, logp, n, 1.0f));
  BENCH_TRY(fill_normal(generator, logp_work, n, 1.0f));
  BENCH_TRY(fill_uniform(generator, uniform, n));
  BENCH_TRY(launch_fill(inv, 1.0f, dim, stream));
  BENCH_TRY(launch_fill(center, 0.0f, dim, stream));
  BENCH_TRY(launch_fill(step_nominal, 0.1f, chains, stream));
  /* H0 that accepts 4 chains in 5 (H0 - H1 near +50) and rejects the fifth (near -50), as a run at
   * the default target acceptance does. */
  double *h0_host = malloc(n * sizeof(double));
  if (!h0_host) exit(1);
  for (size_t c = 0; c < n; ++c) h0_host[c] = c % 5 == 4 ? -50.0 : 50.0;
  CUDA_CHECK(cudaMemcpy(h0, h0_host, n * sizeof(double), cudaMemcpyHostToDevice));
  free(h0_host);
  hmc_batch_t batch = {.n_chains = chains, .chain_begin = 0, .dim = dim, .seed = 2024, .iteration = 0,
                       .n_leapfrog = 10, .q = q, .logp = logp, .grad = grad, .step_nominal = step_nominal,
                       .inv_metric = inv, .accepted = accepted, .shared_metric = 1};
  BENCH_TRY(hmc_batch_alloc_stats(gpu, &batch));
  enum { COPY, BEGIN_COPY, BEGIN, FINISH, FINISH_IN_PLACE, FINISH_MOMENTS, FINISH_CHEES, CASES };
  static const char *const names[CASES] = {"copy of one [chains, dim] array", "begin, with its copies of q and grad",
                                           "begin, no copies", "finish", "finish, trajectory in place",
                                           "finish + sampling moments", "finish + ChEES terms (warmup)"};
  float ms[CASES][21];
  for (int r = -3; r < 21; ++r) {
    batch.iteration = (uint32_t)(r + 3);
    for (int c = 0; c < CASES; ++c) {
      batch.moment_mean = c == FINISH_MOMENTS ? mean : NULL;
      batch.moment_m2 = c == FINISH_MOMENTS ? m2 : NULL;
      batch.moment_rows = c == FINISH_MOMENTS ? chains : 0;
      batch.moment_count = r + 4;
      batch.chees_center = c == FINISH_CHEES ? center : NULL;
      batch.chees = c == FINISH_CHEES ? chees : NULL;
      BENCH_TRY(record(0));
      if (c == COPY) CUDA_CHECK(cudaMemcpyAsync(q_work, q, count * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      if (c == BEGIN_COPY || c == BEGIN)
        BENCH_TRY(hmc_launch_begin(&batch, q_work, p_work, grad_work, logp_work, uniform, h0_begin,
                                   c == BEGIN_COPY ? HMC_STATE_COPY : HMC_STATE_READ, stream));
      if (c >= FINISH)
        BENCH_TRY(hmc_launch_finish(&batch, q_work, p_work, grad_work, logp_work, uniform, h0,
                                    c == FINISH_IN_PLACE ? HMC_STATE_IN_PLACE : HMC_STATE_COPY, stream));
      BENCH_TRY(record(1));
      const float t = between(0, 1);
      if (r >= 0) ms[c][r] = t;
    }
  }
  printf("%s: generic path kernels, dim %lld, %lld chains, shared metric, 4 in 5 accepted; CUDA events, median of 21\n", gpu_name,
         (long long)dim, (long long)chains);
  printf("| kernel | ms | GB/s of one array's read + write |\n|---|---|---|\n");
  for (int c = 0; c < CASES; ++c) {
    const float med = median_of(ms[c], 21);
    printf("| %s | %.4f | %.0f |\n", names[c], med, 2.0 * (double)count * 4.0 / (med * 1e-3) / 1e9);
  }
  CURAND_CHECK(curandDestroyGenerator(generator));
  hmc_batch_release_stats(gpu, &batch);
  for (int a = 0; a < 7; ++a) CUDA_CHECK(cudaFree(*arrays[a]));
  for (int a = 0; a < 4; ++a) CUDA_CHECK(cudaFree(*rows[a]));
  CUDA_CHECK(cudaFree(inv));
  CUDA_CHECK(cudaFree(center));
  CUDA_CHECK(cudaFree(chees));
  CUDA_CHECK(cudaFree(h0));
  CUDA_CHECK(cudaFree(h0_begin));
  CUDA_CHECK(cudaFree(accepted));
  return DS_OK;
}

/* One gradient of the logistic target (X, y from `data`) for `chains` chains drawn near 0: the
 * kernel alone, CUDA events, median of 21 after a warm-up. 4 n D C flops per gradient (two
 * products of n x D by D x C). */
static int run_logistic(const char *data, int64_t chains, const char *gpu_name) {
  char args[1024];
  snprintf(args, sizeof args, "data=%s", data);
  dsampler_target target;
  BENCH_TRY(builtin_target_create("logistic", args, MPI_COMM_WORLD, &target));
  const builtin_params_t *params = builtin_target_lookup(&target);
  const int64_t dim = target.dim, rows = params->n_data;
  float *x, *logp, *grad;
  CUDA_CHECK(cudaMalloc((void **)&x, (size_t)(chains * dim) * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&grad, (size_t)(chains * dim) * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&logp, (size_t)chains * sizeof(float)));
  curandGenerator_t generator;
  BENCH_TRY(bench_generator(0ull, &generator)); /* cuRAND's default seed */
  BENCH_TRY(fill_normal(generator, x, (size_t)(chains * dim), 0.1f));
  float times[21];
  BENCH_TRY(target.logp_grad_cuda(target.self, x, chains, logp, grad, stream));
  for (int r = 0; r < 21; ++r) {
    BENCH_TRY(record(0));
    BENCH_TRY(target.logp_grad_cuda(target.self, x, chains, logp, grad, stream));
    BENCH_TRY(record(1));
    times[r] = between(0, 1);
  }
  const float ms = median_of(times, 21);
  printf("%s: logistic gradient, n = %lld, D = %lld, %lld chains: %.4f ms (median of 21), %.1f TFLOP/s\n", gpu_name,
         (long long)rows, (long long)dim, (long long)chains, ms, 4.0 * rows * dim * chains / (ms * 1e-3) / 1e12);
  CURAND_CHECK(curandDestroyGenerator(generator));
  cudaFree(x);
  cudaFree(grad);
  cudaFree(logp);
  target.destroy(target.self);
  return DS_OK;
}

/* SVGD steps at dimension `dim` for each N (target N(0, I)): the kernels of one step, CUDA
 * events, median of 5 after a warm-up. A step in a run takes the window pass in place of the two
 * radix passes (src/svgd/median.h). */
static int run_svgd_dim(int64_t dim, const char *sizes, const char *gpu_name) {
  bench_dim = dim;
  const char *chunk = getenv("DSAMPLER_BENCH_HIST_CHUNK"); /* 16 or 32: the histogram's stage */
  if (chunk) {
    svgd_cuda_tuning_t tuning = svgd_cuda_get_tuning();
    tuning.hist_chunk = atoi(chunk);
    svgd_cuda_set_tuning(tuning);
  }
  /* From 33 to 64 coordinates, 1: the mma.sync tiles, 2: the warpgroup products (svgd_kernels.h). */
  const char *phi_family = getenv("DSAMPLER_BENCH_PHI_FAMILY"), *median_family = getenv("DSAMPLER_BENCH_MEDIAN_FAMILY");
  if (phi_family || median_family) {
    svgd_cuda_tuning_t tuning = svgd_cuda_get_tuning();
    if (phi_family) tuning.phi_family = atoi(phi_family);
    if (median_family) tuning.median_family = atoi(median_family);
    svgd_cuda_set_tuning(tuning);
  }
  char args[64];
  snprintf(args, sizeof args, "dim=%lld", (long long)dim);
  dsampler_target target;
  BENCH_TRY(builtin_target_create("gaussian", args, MPI_COMM_NULL, &target));
  curandGenerator_t generator;
  BENCH_TRY(bench_generator(20261201ull, &generator));
  printf("%s: SVGD d=%lld, fp32, CUDA events, median of 5\n", gpu_name, (long long)dim);
  printf("| N | step ms (window median) | step ms (two passes) | pass 1 ms | pass 2 ms | window pass ms | phi ms | score+update ms |\n");
  printf("|---|---|---|---|---|---|---|---|\n");
  for (const char *item = sizes; item && *item;) {
    const int64_t n = atoll(item);
    const svgd_row_t row = bench_svgd(generator, &target, n, 5);
    printf("| %lld | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |\n", (long long)n,
           row.window_ms + row.phi_ms + row.rest_ms, row.step_ms, row.pass1_ms, row.pass2_ms, row.window_ms,
           row.phi_ms, row.rest_ms);
    item = strchr(item, ',');
    if (item) ++item;
  }
  CURAND_CHECK(curandDestroyGenerator(generator));
  if (target.destroy) target.destroy(target.self);
  return DS_OK;
}

/* The KSD's cost beside phi's, at bandwidth h = median-like 2 dim / log N: phi (rbf), the Stein
 * sum (rbf and imq) and phi with the imq kernel, CUDA events, median of 5 after a warm-up. */
static int run_ksd(int64_t dim, const char *sizes, const char *gpu_name) {
  bench_dim = dim;
  const char *ksd_family = getenv("DSAMPLER_BENCH_KSD_FAMILY"); /* 1: the CUDA cores, 2: the warpgroup tiles */
  if (ksd_family) {
    svgd_cuda_tuning_t tuning = svgd_cuda_get_tuning();
    tuning.ksd_family = atoi(ksd_family);
    svgd_cuda_set_tuning(tuning);
  }
  curandGenerator_t generator;
  BENCH_TRY(bench_generator(20261201ull, &generator));
  printf("%s: KSD pass vs phi pass, d=%lld, fp32, CUDA events, median of 5\n", gpu_name, (long long)dim);
  printf("| N | phi rbf ms | KSD rbf ms | KSD / phi | KSD imq ms | phi imq ms |\n|---|---|---|---|---|---|\n");
  for (const char *item = sizes; item && *item;) {
    const int64_t n = atoll(item);
    float *x = NULL, *score = NULL, *phi = NULL;
    BENCH_TRY(gpu->alloc(gpu, (void **)&x, (size_t)(n * dim) * sizeof(float)));
    BENCH_TRY(gpu->alloc(gpu, (void **)&score, (size_t)(n * dim) * sizeof(float)));
    BENCH_TRY(gpu->alloc(gpu, (void **)&phi, (size_t)(n * dim) * sizeof(float)));
    BENCH_TRY(fill_normal(generator, x, (size_t)(n * dim), 1.0f));
    BENCH_TRY(fill_normal(generator, score, (size_t)(n * dim), 1.0f));
    const float h = (float)(2.0 * (double)dim / log((double)n));
    const svgd_kernel_t rbf = {SVGD_KERNEL_RBF, h, 1.0f, -0.5f}, imq = {SVGD_KERNEL_IMQ, h, 1.0f, -0.5f};
    float times[4][5];
    exact_sum_t sum;
    for (int rep = -1; rep < 5; ++rep) {
      BENCH_TRY(record(0));
      BENCH_TRY(gpu->svgd_phi(gpu, x, score, n, dim, 0, n, &rbf, phi));
      BENCH_TRY(record(1));
      BENCH_TRY(gpu->svgd_stein_sum(gpu, x, score, n, dim, 0, n, &rbf, &sum));
      BENCH_TRY(record(2));
      BENCH_TRY(gpu->svgd_stein_sum(gpu, x, score, n, dim, 0, n, &imq, &sum));
      BENCH_TRY(record(3));
      BENCH_TRY(gpu->svgd_phi(gpu, x, score, n, dim, 0, n, &imq, phi));
      BENCH_TRY(record(4));
      if (rep < 0) continue;
      for (int k = 0; k < 4; ++k) times[k][rep] = between(k, k + 1);
    }
    float med[4];
    for (int k = 0; k < 4; ++k) med[k] = median_of(times[k], 5);
    printf("| %lld | %.3f | %.3f | %.2f | %.3f | %.3f |\n", (long long)n, med[0], med[1], med[1] / med[0], med[2],
           med[3]);
    gpu->release(gpu, x);
    gpu->release(gpu, score);
    gpu->release(gpu, phi);
    item = strchr(item, ',');
    if (item) ++item;
  }
  CURAND_CHECK(curandDestroyGenerator(generator));
  return DS_OK;
}

/* mode: 0 everything, 1 one SVGD step and one HMC iteration (for a profiler), 2 HMC alone. */
static int run(int mode) {
  struct cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  BENCH_TRY(backend_cuda_create(0, &gpu));
  stream = (cudaStream_t)gpu->stream;
  /* The transport a one-rank run takes (NCCL): the median's counts are summed where a run
   * sums them, and comm's device copies run on the backend's stream. */
  comm.device = gpu->device;
  BENCH_TRY(comm_select_transport(&comm, "auto", 1, gpu->stream));
  for (int m = 0; m < 8; ++m) CUDA_CHECK(cudaEventCreate(&marks[m]));
  curandGenerator_t generator;
  BENCH_TRY(bench_generator(20261129ull, &generator));
  dsampler_target target;
  BENCH_TRY(builtin_target_create("gaussian", "dim=64", MPI_COMM_NULL, &target));
  if (mode == 1) return run_quick(generator, &target);
  if (mode == 2) return run_hmc_only(generator, &target, prop.name);

  /* Variants first (svgd_kernels.h, hmc_kernels.h); the table uses the fastest of each. */
  printf("variants at N=65536 (median of 5): histogram chunk -> pass 1 ms, pass 2 ms\n");
  svgd_cuda_tuning_t best = {16, 0, 0, 0, 0, 0};
  float best_pass = 1e30f;
  for (int chunk = 16; chunk <= 32; chunk += 16) {
    svgd_cuda_tuning_t tuning = {chunk, 0, 0, 0, 0, 0};
    svgd_cuda_set_tuning(tuning);
    svgd_row_t row = bench_svgd(generator, &target, 65536, 5);
    printf("  chunk %2d -> %8.3f %8.3f\n", chunk, row.pass1_ms, row.pass2_ms);
    if (row.pass1_ms + row.pass2_ms < best_pass) {
      best_pass = row.pass1_ms + row.pass2_ms;
      best.hist_chunk = chunk;
    }
  }
  svgd_cuda_set_tuning(best);
  printf("chosen: histogram chunk %d\n", best.hist_chunk);
  for (int lanes = 4; lanes <= 16; lanes += 12) {
    hmc_cuda_set_lanes(lanes);
    hmc_row_t row = bench_hmc(generator, &target, 1048576, 21, 0);
    printf("HMC 1048576 chains, %2d lanes per chain: %.4f ms\n", lanes, row.iteration_ms);
  }
  hmc_cuda_set_lanes(0);

  const int64_t svgd_sizes[] = {4096, 32768, 65536, 262144};
  svgd_row_t svgd[4];
  for (int c = 0; c < 4; ++c) svgd[c] = bench_svgd(generator, &target, svgd_sizes[c], svgd_sizes[c] >= 262144 ? 3 : 9);
  const int64_t hmc_sizes[] = {2048, 1048576};
  hmc_row_t hmc[4];
  for (int c = 0; c < 4; ++c) hmc[c] = bench_hmc(generator, &target, hmc_sizes[c % 2], 21, c / 2);
  const double accuracy = phi_accuracy(&target, 2048);
  /* Runs: at the target (N(0, 1) start, step 0.01, as the table above), and from dsampler's
   * default start U(-2, 2) with its default step 0.1. */
  const int64_t sequence_sizes[] = {4096, 32768, 65536, 262144};
  const int sequence_steps[] = {30, 30, 30, 5};
  const char *sequence_start[] = {"N(0,1), step 0.01", "U(-2,2), step 0.1"};
  sequence_row_t sequence[2][4];
  for (int scenario = 0; scenario < 2; ++scenario)
    for (int c = 0; c < 4; ++c)
      sequence[scenario][c] = bench_svgd_sequence(generator, &target, sequence_sizes[c], sequence_steps[c],
                                                  scenario == 0 ? 0.01f : 0.1f, scenario == 0 ? -1.0f : 2.0f);

  printf("\n%s, %d SMs; d=64, fp32; CUDA events, median of repeats after a warm-up\n", prop.name,
         prop.multiProcessorCount);
  printf("| SVGD N  | step ms (two passes) | median pass 1 ms | median pass 2 ms | phi ms | score+update ms | phi Gpair/s "
         "| window pass ms |\n");
  printf("|---------|----------------------|------------------|------------------|--------|-----------------|-------------"
         "|----------------|\n");
  for (int c = 0; c < 4; ++c)
    printf("| %7lld | %20.3f | %16.3f | %16.3f | %6.3f | %15.3f | %11.1f | %14.3f |\n", (long long)svgd[c].n,
           svgd[c].step_ms, svgd[c].pass1_ms, svgd[c].pass2_ms, svgd[c].phi_ms, svgd[c].rest_ms,
           (double)svgd[c].n * (double)svgd[c].n / (svgd[c].phi_ms * 1e-3) / 1e9, svgd[c].window_ms);
  printf("| HMC chains | metric    | iteration ms (L=10, eps=0.1) | accept rate | GB/s moved |\n");
  printf("|------------|-----------|------------------------------|-------------|------------|\n");
  for (int c = 0; c < 4; ++c)
    printf("| %10lld | %-9s | %28.4f | %11.3f | %10.0f |\n", (long long)hmc[c].chains,
           hmc[c].shared_metric ? "shared" : "per chain", hmc[c].iteration_ms, hmc[c].accept_rate, hmc[c].gbytes_per_s);
  printf("phi accuracy at N=2048, d=64: ||phi - phi_f64|| / ||phi_f64|| = %.3e\n", accuracy);
  printf("\nSVGD steps in sequence, each median after the last (window pass, radix select on a miss); medians "
         "over the steps after the first\n");
  printf("| start, step         | N       | steps | window hits | step ms | median ms | hit ms | miss ms | first step ms "
         "| first median ms | medians != radix select |\n");
  printf("|---------------------|---------|-------|-------------|---------|-----------|--------|---------|---------------"
         "|-----------------|-------------------------|\n");
  for (int scenario = 0; scenario < 2; ++scenario)
    for (int c = 0; c < 4; ++c) {
      const sequence_row_t *q = &sequence[scenario][c];
      printf("| %-19s | %7lld | %5d | %5lld/%-5lld | %7.3f | %9.3f | %6.3f | %7.3f | %13.3f | %15.3f | %23d |\n",
             sequence_start[scenario], (long long)q->n, q->steps, (long long)q->hits,
             (long long)(q->hits + q->misses), q->step_ms, q->median_ms, (double)q->hit_median_ms,
             (double)q->miss_median_ms, q->first_step_ms, q->first_median_ms, q->mismatches);
    }

  CURAND_CHECK(curandDestroyGenerator(generator));
  for (int m = 0; m < 8; ++m) CUDA_CHECK(cudaEventDestroy(marks[m]));
  if (target.destroy) target.destroy(target.self);
  comm_release_transport(&comm); /* NCCL before the CUDA resources it used */
  backend_destroy(gpu);
  return DS_OK;
}

int main(int argc, char **argv) {
  if (comm_cuda_device_count() == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  /* One rank: svgd_exact_median's collectives are then local. */
  BENCH_TRY(comm_init(&comm, &argc, &argv));
  const char *mode = argc > 1 ? argv[1] : "";
  if ((strcmp(mode, "--logistic") == 0 || strcmp(mode, "--svgd-dim") == 0 || strcmp(mode, "--ksd") == 0 ||
       strcmp(mode, "--generic") == 0) && argc > 3) {
    struct cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    BENCH_TRY(backend_cuda_create(0, &gpu));
    stream = (cudaStream_t)gpu->stream;
    for (int m = 0; m < 8; ++m) CUDA_CHECK(cudaEventCreate(&marks[m]));
    if (strcmp(mode, "--logistic") == 0)
      BENCH_TRY(run_logistic(argv[2], atoll(argv[3]), prop.name));
    else if (strcmp(mode, "--ksd") == 0)
      BENCH_TRY(run_ksd(atoll(argv[2]), argv[3], prop.name));
    else if (strcmp(mode, "--generic") == 0)
      BENCH_TRY(run_generic(atoll(argv[2]), atoll(argv[3]), prop.name));
    else
      BENCH_TRY(run_svgd_dim(atoll(argv[2]), argv[3], prop.name));
    backend_destroy(gpu);
  } else {
    BENCH_TRY(run(strcmp(mode, "--quick") == 0 ? 1 : strcmp(mode, "--hmc") == 0 ? 2 : 0));
  }
  comm_free(&comm);
  return 0;
}
