/* test_median.c: the distributed radix-select median equals the lower median of a sort of all
 * N^2 squared distances, on random inputs, with ties, with N not divisible by the rank count,
 * and with fewer particles than ranks. Run under mpirun with any rank count. */
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

/* The reference: every ordered pair, the same difference-square sum, then a full sort. */
static float sorted_lower_median(const float *x, int64_t n, int64_t dim) {
  float *all = malloc((size_t)(n * n) * sizeof *all);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < dim; ++k) {
        float diff = x[i * dim + k] - x[j * dim + k];
        acc = fmaf(diff, diff, acc);
      }
      all[i * n + j] = acc;
    }
  qsort(all, (size_t)(n * n), sizeof *all, compare_float);
  float median = all[(n * n - 1) / 2];
  free(all);
  return median;
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
      {128, 2, 4}, {257, 5, 0}, {300, 1, 5}, {513, 16, 0}, {64, 64, 0}};
  int failures = 0;
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
    int64_t n = cases[c].n, dim = cases[c].dim;
    float *x = malloc((size_t)(n * dim) * sizeof *x);
    fill(x, n, dim, 1000 + c, cases[c].levels);
    int64_t begin, end;
    comm_partition(n, comm.size, comm.rank, &begin, &end);
    float median = -1.0f;
    int status = svgd_exact_median(&comm, cpu, x, n, dim, begin, end, &median);
    float want = sorted_lower_median(x, n, dim);
    /* Exact: the select works on bit patterns, so the value must be the same float. */
    int ok = status == DS_OK && memcmp(&median, &want, sizeof want) == 0;
    if (!ok) {
      printf("FAIL rank %d: n=%lld dim=%lld levels=%d: median %.9g, sorted reference %.9g (status %d: %s)\n",
             comm.rank, (long long)n, (long long)dim, cases[c].levels, (double)median, (double)want, status,
             status ? ds_error_message() : "");
      failures++;
    }
    free(x);
  }
  int all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_INT, MPI_SUM, comm.world);
  if (comm.rank == 0)
    printf("median on %d ranks: %zu cases, %d failures\n", comm.size, sizeof cases / sizeof cases[0], all_failures);
  backend_destroy(cpu);
  comm_free(&comm);
  return all_failures ? 1 : 0;
}
