/* test_median.c: the distributed exact median equals the lower median of a sort of all N^2
 * squared distances, on random inputs, with ties, with N not divisible by the rank count, and
 * with fewer particles than ranks: through the radix select alone, and through the window
 * pass given previous medians that hold the median (exactly, at the window's edges) or miss
 * it (a little, a lot, zero, huge), and over a drifting sequence of steps as SVGD makes.
 * Every window pass must hit exactly when the median's key lies in its window. Run under
 * mpirun with any rank count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "median.h"
#include "rng.h"
#include "status.h"

static int compare_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* One squared distance as DESIGN.md defines it: the difference-square sum up to 128
 * coordinates; past 128 the GEMM identity on coordinates centred at particle 0, each sum an fma
 * chain from 0 with k ascending, clamped at +0. Written out here, apart from the backends. */
static float reference_distance(const float *x, int64_t dim, int64_t i, int64_t j) {
  float acc = 0.0f;
  if (dim <= 128) {
    for (int64_t k = 0; k < dim; ++k) {
      float diff = x[i * dim + k] - x[j * dim + k];
      acc = fmaf(diff, diff, acc);
    }
    return acc;
  }
  if (i == j) return 0.0f;
  float square_i = 0.0f, square_j = 0.0f;
  for (int64_t k = 0; k < dim; ++k) {
    const float yi = x[i * dim + k] - x[k], yj = x[j * dim + k] - x[k];
    square_i = fmaf(yi, yi, square_i);
    square_j = fmaf(yj, yj, square_j);
    acc = fmaf(yi, yj, acc);
  }
  const float d = fmaf(-2.0f, acc, square_i + square_j);
  return d > 0.0f ? d : 0.0f;
}

/* The reference: every ordered pair by reference_distance, then a full sort. */
static float sorted_lower_median(const float *x, int64_t n, int64_t dim) {
  float *all = malloc((size_t)(n * n) * sizeof *all);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) all[i * n + j] = reference_distance(x, dim, i, j);
  qsort(all, (size_t)(n * n), sizeof *all, compare_float);
  float median = all[(n * n - 1) / 2];
  free(all);
  return median;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The lower median of the exact squared distances, in float64. */
static double float64_lower_median(const float *x, int64_t n, int64_t dim) {
  double *all = malloc((size_t)(n * n) * sizeof *all);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < dim; ++k) {
        double diff = (double)x[i * dim + k] - (double)x[j * dim + k];
        acc += diff * diff;
      }
      all[i * n + j] = acc;
    }
  qsort(all, (size_t)(n * n), sizeof *all, compare_double);
  double median = all[(n * n - 1) / 2];
  free(all);
  return median;
}

static uint32_t bits_of(float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  return bits;
}

/* One median through `state` (NULL: the radix select alone) against the reference `want`.
 * With a state, the window pass must have hit exactly when want's key lies in the window
 * the state placed. Returns the number of failures (0 or 1). */
static int check_median(comm_ctx_t *comm, backend_t *cpu, const float *x, int64_t n, int64_t dim,
                        svgd_median_state_t *state, float want, const char *label) {
  int64_t begin, end;
  comm_partition(n, comm->size, comm->rank, &begin, &end);
  int expect_window = 0, expect_hit = 0;
  int64_t hits_before = 0, misses_before = 0;
  if (state) {
    expect_window = state->medians_seen > 0;
    uint32_t start = svgd_median_window_start(state);
    expect_hit = expect_window && bits_of(want) - start < (uint32_t)SVGD_WINDOW_FINE_BINS;
    hits_before = state->window_hits;
    misses_before = state->window_misses;
  }
  float median = -1.0f;
  int status = svgd_exact_median(comm, cpu, x, n, dim, begin, end, state, &median);
  /* Exact: the select works on bit patterns, so the value must be the same float. */
  int ok = status == DS_OK && memcmp(&median, &want, sizeof want) == 0;
  if (ok && state) {
    int64_t hits = state->window_hits - hits_before, misses = state->window_misses - misses_before;
    ok = hits == (expect_window && expect_hit) && misses == (expect_window && !expect_hit) &&
         state->last_bits == bits_of(want);
  }
  if (!ok) {
    printf("FAIL rank %d: %s n=%lld dim=%lld: median %.9g, sorted reference %.9g, window %s (status %d: %s)\n",
           comm->rank, label, (long long)n, (long long)dim, (double)median, (double)want,
           !expect_window ? "unused" : expect_hit ? "should hit" : "should miss", status,
           status ? ds_error_message() : "");
    return 1;
  }
  return 0;
}

/* A state whose last median has bit pattern `last` (and, when seen = 2, `before_last`). */
static svgd_median_state_t state_after(uint32_t last, uint32_t before_last, int seen) {
  svgd_median_state_t state;
  svgd_median_state_init(&state);
  state.medians_seen = seen;
  state.last_bits = last;
  state.before_last_bits = before_last;
  return state;
}

/* Previous medians around the true one: inside the window, on both edges, just outside,
 * far off, zero, huge, and a last step that points the wrong way. */
static int check_windows(comm_ctx_t *comm, backend_t *cpu, const float *x, int64_t n, int64_t dim, float want,
                         int64_t *hits, int64_t *misses) {
  const int64_t m = bits_of(want), half = SVGD_WINDOW_FINE_BINS / 2;
  const int64_t guesses[] = {m, m + 1, m - 1, m + 1000, m - 1000, m + half, m + half + 1, m - half + 1,
                             m - half, m + 40000, m - 40000, m + 5000000, m / 2, 0, 0x7F7FFFFF, 0xFFFFFFFF};
  int failures = 0;
  for (size_t g = 0; g < sizeof guesses / sizeof guesses[0]; ++g) {
    if (guesses[g] < 0 || guesses[g] > 0xFFFFFFFFll) continue;
    svgd_median_state_t state = state_after((uint32_t)guesses[g], 0, 1);
    char label[64];
    snprintf(label, sizeof label, "last median bits %lld", (long long)guesses[g]);
    failures += check_median(comm, cpu, x, n, dim, &state, want, label);
    *hits += state.window_hits;
    *misses += state.window_misses;
  }
  /* Two medians: the window moves on by their difference. */
  const int64_t pairs[][2] = {{m - 20000, m - 40000}, {m + 20000, m}, {m, m + 30000}, {m + 1, m + 2}};
  for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; ++p) {
    if (pairs[p][0] < 0 || pairs[p][1] < 0 || pairs[p][0] > 0xFFFFFFFFll || pairs[p][1] > 0xFFFFFFFFll) continue;
    svgd_median_state_t state = state_after((uint32_t)pairs[p][0], (uint32_t)pairs[p][1], 2);
    failures += check_median(comm, cpu, x, n, dim, &state, want, "two last medians");
    *hits += state.window_hits;
    *misses += state.window_misses;
  }
  return failures;
}

/* Seeded positions; `levels` > 0 rounds them to few values so many distances tie. */
static void fill(float *x, int64_t n, int64_t dim, uint64_t seed, int levels) {
  for (int64_t e = 0; e < n * dim; ++e) {
    rng_words_t w = rng_block(seed, (uint64_t)e, 7, 0);
    float u = rng_uniform(w.v[0]);
    x[e] = levels > 0 ? floorf(u * (float)levels) : 6.0f * u - 3.0f;
  }
}

int main(int argc, char **argv) {
  comm_ctx_t comm;
  if (comm_init(&comm, &argc, &argv) != DS_OK) return 1;
  backend_t *cpu = NULL;
  if (backend_cpu_create(&cpu) != DS_OK) return 1;
  struct { int64_t n, dim; int levels; } cases[] = {
      {1, 3, 0}, {2, 1, 0}, {3, 2, 0}, {5, 4, 0}, {7, 1, 3}, {10, 2, 2}, {64, 3, 0}, {101, 8, 0},
      {128, 2, 4}, {257, 5, 0}, {300, 1, 5}, {513, 16, 0}, {64, 64, 0},
      /* past 128 coordinates: the GEMM identity */
      {64, 128, 0}, {101, 129, 0}, {3, 200, 0}, {64, 200, 3}, {257, 300, 0}};
  int failures = 0;
  int64_t hits = 0, misses = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    int64_t n = cases[c].n, dim = cases[c].dim;
    float *x = malloc((size_t)(n * dim) * sizeof *x);
    fill(x, n, dim, 1000 + c, cases[c].levels);
    float want = sorted_lower_median(x, n, dim);
    failures += check_median(&comm, cpu, x, n, dim, NULL, want, "radix select");
    failures += check_windows(&comm, cpu, x, n, dim, want, &hits, &misses);
    free(x);
  }

  /* Past 128 coordinates, the median of the GEMM identity's distances against the exact one
   * (float64, direct differences), on clouds far from the origin: the centring at particle 0
   * keeps it within 1e-5 relative. Uncentred, |x|^2 / D would be about 1e4 here. */
  for (int c = 0; c < 3; ++c) {
    const int64_t n = 200, dim = c == 0 ? 129 : c == 1 ? 512 : 1024;
    const float offset = c == 0 ? 0.0f : c == 1 ? 100.0f : -300.0f;
    float *x = malloc((size_t)(n * dim) * sizeof *x);
    fill(x, n, dim, 9000 + (uint64_t)c, 0);
    for (int64_t e = 0; e < n * dim; ++e) x[e] += offset;
    const float want = sorted_lower_median(x, n, dim);
    failures += check_median(&comm, cpu, x, n, dim, NULL, want, "offset cloud");
    const double exact = float64_lower_median(x, n, dim);
    const double error = fabs((double)want - exact) / exact;
    if (comm.rank == 0) printf("d=%lld offset %g: median %.9g, float64 %.9g, relative error %.2e\n", (long long)dim,
                               (double)offset, (double)want, exact, error);
    if (!(error <= 1e-5)) {
      if (comm.rank == 0) printf("FAIL: d=%lld offset %g: median off by %.2e relative\n", (long long)dim, (double)offset, error);
      failures++;
    }
    free(x);
  }

  /* Infinite coordinates: inf - inf makes NaN distances, whose keys may reach 2^31 and past
   * the window pass's high bins (a sign-bit NaN on x86). No float order holds there, so the
   * reference is the radix select alone, which orders keys as unsigned integers. */
  for (int quarters = 1; quarters <= 3; quarters += 2) { /* NaN keys a few, or most */
    const int64_t n = 40, dim = 3;
    float *x = malloc((size_t)(n * dim) * sizeof *x);
    fill(x, n, dim, 777, 0);
    for (int64_t i = 0; i < quarters * n / 4; ++i) x[i * dim + 1] = INFINITY;
    int64_t begin, end;
    comm_partition(n, comm.size, comm.rank, &begin, &end);
    float want = 0.0f;
    int status = svgd_exact_median(&comm, cpu, x, n, dim, begin, end, NULL, &want);
    if (status != DS_OK) {
      printf("FAIL rank %d: infinite coordinates: status %d: %s\n", comm.rank, status, ds_error_message());
      failures++;
    } else {
      failures += check_windows(&comm, cpu, x, n, dim, want, &hits, &misses);
      if (comm.rank == 0) printf("infinite coordinates: median key 0x%08x\n", (unsigned)bits_of(want));
    }
    free(x);
  }

  /* A sequence of steps as SVGD makes them: positions spread out 0.3% per step, then settle
   * and jitter, then jump; one state carries the medians along, as svgd.c keeps it. */
  int64_t steps = 0;
  for (int dim = 1; dim <= 256; dim *= 16) {
    const int64_t n = 203;
    float *x = malloc((size_t)(n * dim) * sizeof *x), *jitter = malloc((size_t)(n * dim) * sizeof *jitter);
    fill(x, n, dim, 4242 + (uint64_t)dim, 0);
    fill(jitter, n, dim, 4343 + (uint64_t)dim, 0);
    svgd_median_state_t state;
    svgd_median_state_init(&state);
    for (int step = 0; step < 30; ++step) {
      const float scale = step < 12 ? 1.003f : step == 24 ? 1.5f : 1.0f;
      for (int64_t e = 0; e < n * dim; ++e) x[e] = x[e] * scale + (step >= 12 ? 1e-5f * jitter[(e + step) % (n * dim)] : 0.0f);
      char label[64];
      snprintf(label, sizeof label, "sequence step %d", step);
      failures += check_median(&comm, cpu, x, n, dim, &state, sorted_lower_median(x, n, dim), label);
      ++steps;
    }
    hits += state.window_hits;
    misses += state.window_misses;
    free(x);
    free(jitter);
  }

  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, comm.world);
  if (comm.rank == 0)
    printf("median on %d ranks: %zu cases, each also after 20 previous medians; %lld sequence steps; "
           "window passes %lld hits, %lld misses; %d failures\n", comm.size, sizeof cases / sizeof cases[0],
           (long long)steps, (long long)hits, (long long)misses, all_failures);
  backend_destroy(cpu);
  comm_free(&comm);
  return all_failures ? 1 : 0;
}
