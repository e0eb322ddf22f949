/* test_order_stats.c: the distributed exact order statistics (order_stats.h) against a sort of
 * all values, and lp_outliers_count against lp_outliers on the gathered values, on the CPU
 * backend, each rank holding its comm_partition share. Values with ties, both zeros, denormals,
 * huge magnitudes and non-finite ones; k at the ends and quartiles; bounds on values, a float
 * off them and at infinities; outliers planted at the rule's threshold and one float either side.
 * Run under mpirun with any rank count. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#include "lp_outliers.h"
#include "order_stats.h"
#include "rng.h"
#include "status.h"

static int compare_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

static float draw(uint64_t seed, int64_t i, int kind) {
  rng_words_t w = rng_block(seed, (uint64_t)i, 11, 0);
  const float u = rng_uniform(w.v[0]), v = rng_uniform(w.v[1]);
  switch (kind) {
    case 0: return 200.0f * u - 100.0f;
    case 1: return floorf(u * 5.0f) - 2.0f;                      /* ties, and -2..2 */
    case 2: return (v < 0.5f ? -1.0f : 1.0f) * ldexpf(u, (int)(v * 250.0f) - 140); /* denormals to 1e35 */
    case 3: return v < 0.3f ? -0.0f : v < 0.6f ? 0.0f : u - 0.5f;  /* both zeros */
    default: return u;
  }
}

/* Sorted finite values (clamped), their count in *finite. */
static float *sorted_finite(const float *x, int64_t n, int clamp, int64_t *finite) {
  float *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
  *finite = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = clamp ? fmaxf(x[i], 0.0f) : x[i];
    if (isfinite(v)) s[(*finite)++] = v;
  }
  qsort(s, (size_t)*finite, sizeof *s, compare_float);
  return s;
}

static int check_case(comm_ctx_t *comm, backend_t *cpu, const float *x, int64_t n, int clamp, const char *label) {
  int64_t begin, end, finite;
  comm_partition(n, comm->size, comm->rank, &begin, &end);
  float *sorted = sorted_finite(x, n, clamp, &finite);
  int failures = 0;
  const int64_t ks[] = {0, n / 4, n / 2, (3 * n) / 4, n - 1, n};
  for (size_t c = 0; c < sizeof ks / sizeof ks[0]; ++c) {
    float got = 0.0f;
    int64_t nonfinite = -1;
    int status = order_select(comm, cpu, x + begin, end - begin, clamp, ks[c], &got, &nonfinite);
    const int expect_value = nonfinite == 0 && ks[c] < finite;
    const int ok = status == DS_OK && nonfinite == n - finite &&
                   (expect_value ? got == sorted[ks[c]] && (got != 0.0f || !signbit(got)) : isnan(got));
    if (!ok) {
      printf("FAIL rank %d: %s n=%lld clamp %d: k=%lld gave %.9g (non-finite %lld), sorted %.9g (non-finite %lld)\n",
             comm->rank, label, (long long)n, clamp, (long long)ks[c], (double)got, (long long)nonfinite,
             ks[c] < finite ? (double)sorted[ks[c]] : NAN, (long long)(n - finite));
      failures++;
    }
  }
  if (!clamp) {
    float bounds[16];
    int nb = 0;
    bounds[nb++] = INFINITY;
    bounds[nb++] = -INFINITY;
    bounds[nb++] = 0.0f;
    bounds[nb++] = -0.0f;
    for (int64_t c = 0; c < 4 && finite > 0; ++c) {
      const float v = sorted[(c * (finite - 1)) / 3];
      bounds[nb++] = v;
      bounds[nb++] = nextafterf(v, INFINITY);
      bounds[nb++] = nextafterf(v, -INFINITY);
    }
    for (int i = 0; i < nb; ++i) {
      int64_t want = 0, got = -1;
      for (int64_t j = 0; j < finite; ++j) want += sorted[j] < bounds[i];
      int status = order_count_below(comm, cpu, x + begin, end - begin, bounds[i], &got);
      if (status != DS_OK || got != want) {
        printf("FAIL rank %d: %s n=%lld: below %.9g counted %lld, want %lld\n", comm->rank, label, (long long)n,
               (double)bounds[i], (long long)got, (long long)want);
        failures++;
      }
    }
  }
  free(sorted);
  return failures;
}

/* lp_outliers on the gathered values, as HMC's warmup forms them. */
static int64_t host_count(const float *mean, const float *m2, int64_t n, double samples, lp_outlier_rule_t *rule) {
  double *values = malloc((size_t)(4 * n) * sizeof *values);
  uint8_t *flags = malloc((size_t)n);
  for (int64_t c = 0; c < n; ++c) {
    values[c] = (double)mean[c];
    values[n + c] = (double)sqrtf(fmaxf(m2[c], 0.0f) / (float)(samples - 1.0));
  }
  const int64_t count = lp_outliers(values, values + n, n, flags, rule, values + 2 * n);
  free(values);
  free(flags);
  return count;
}

/* The device count against lp_outliers: the median rule's count and the gap rule's necessary
 * condition equal; expect (>= 0) the flagged chains, expect_top (>= 0) the gap rule's top group. */
static int check_lp(comm_ctx_t *comm, backend_t *cpu, const float *mean, const float *m2, int64_t n, double samples,
                    const char *label, int64_t expect, int64_t expect_top) {
  int64_t begin, end, got = -1;
  int possible = -1;
  comm_partition(n, comm->size, comm->rank, &begin, &end);
  lp_outlier_rule_t rule;
  const int64_t want = host_count(mean, m2, n, samples, &rule);
  int status = lp_outliers_count(comm, cpu, mean + begin, m2 + begin, end - begin, n, samples, &got, &possible);
  if (status != DS_OK || got != rule.below_median || possible != rule.gap_possible || (rule.top > 0 && !possible) ||
      (expect >= 0 && want != expect) || (expect_top >= 0 && rule.top != expect_top)) {
    printf("FAIL rank %d: lp %s n=%lld: %lld below the median rule (lp_outliers %lld), gap possible %d (%d), "
           "flagged %lld (planted %lld), top %lld (planted %lld) (status %d)\n", comm->rank, label, (long long)n,
           (long long)got, (long long)rule.below_median, possible, rule.gap_possible, (long long)want,
           (long long)expect, (long long)rule.top, (long long)expect_top, status);
    return 1;
  }
  return 0;
}

static int lp_cases(comm_ctx_t *comm, backend_t *cpu) {
  int failures = 0;
  const int64_t sizes[] = {5, 8, 9, 100, 1001, 20000};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
    const int64_t n = sizes[s];
    float *mean = malloc((size_t)n * sizeof *mean), *m2 = malloc((size_t)n * sizeof *m2);
    for (int64_t c = 0; c < n; ++c) {
      mean[c] = -50.0f + 3.0f * draw(40 + s, c, 4);
      m2[c] = 9.0f * 30.0f * draw(50 + s, c, 4) * draw(60 + s, c, 4);
    }
    const double samples = 10.0 + (double)s;
    failures += check_lp(comm, cpu, mean, m2, n, samples, "no outliers", 0, 0);
    /* Planted far below: outliers. Then at the threshold and a float either side. */
    const int64_t planted = n / 10 > 3 ? 3 : n / 10;
    for (int64_t p = 0; p < planted; ++p) mean[p * 7 % n] = -5000.0f;
    failures += check_lp(comm, cpu, mean, m2, n, samples, "far below", n >= LP_OUTLIER_MIN_CHAINS ? planted : 0, -1);
    lp_outlier_rule_t rule;
    host_count(mean, m2, n, samples, &rule);
    const float at = (float)(rule.median - LP_OUTLIER_SPREADS * rule.spread);
    const float near[3] = {at, nextafterf(at, -INFINITY), nextafterf(at, INFINITY)};
    int64_t below = 0;
    for (int64_t p = 0; p < planted; ++p) {
      mean[p * 7 % n] = near[p];
      below += (double)near[p] < rule.median - LP_OUTLIER_SPREADS * rule.spread;
    }
    /* The float nearest the threshold is an outlier where it rounded below it (and no gap: the
     * planted three sit some 20 spreads below, but the gap rule's spread is the same or more). */
    failures += check_lp(comm, cpu, mean, m2, n, samples, "at the threshold",
                         n >= LP_OUTLIER_MIN_CHAINS && planted == 3 ? below : -1, -1);
    /* A minor mode holding most chains: the top `top` chains 300 nats up (their spread and the
     * sds as above, within 20 spreads of 300); the gap rule flags the rest where the top group is
     * at least lp_outlier_top(n), the median rule none of them. */
    for (int64_t c = 0; c < n; ++c) mean[c] = -50.0f + 3.0f * draw(40 + s, c, 4);
    const int64_t tops[] = {lp_outlier_top(n) - 1, lp_outlier_top(n), n / 3};
    for (int t = 0; t < 3; ++t) {
      const int64_t top = tops[t];
      if (top < 1 || top >= n) continue;
      for (int64_t c = 0; c < n; ++c)
        mean[c] = -50.0f + 3.0f * draw(40 + s, c, 4) + (c % 3 == 0 && c / 3 < top ? 300.0f : 0.0f);
      int64_t placed = 0;
      for (int64_t c = 0; c < n; ++c) placed += c % 3 == 0 && c / 3 < top;
      const int found = n >= LP_OUTLIER_MIN_CHAINS && placed >= lp_outlier_top(n);
      failures += check_lp(comm, cpu, mean, m2, n, samples, "a minor mode below most", found ? n - placed : 0,
                           found ? placed : 0);
    }
    /* m2: NaN and negative count as 0 (finite sd); +inf makes no outliers; a NaN mean too. */
    if (n > 20) {
      m2[1] = NAN;
      m2[2] = -3.0f;
      failures += check_lp(comm, cpu, mean, m2, n, samples, "NaN m2", -1, -1);
      m2[3] = INFINITY;
      failures += check_lp(comm, cpu, mean, m2, n, samples, "infinite m2", 0, 0);
      m2[3] = 1.0f;
      mean[4] = NAN;
      failures += check_lp(comm, cpu, mean, m2, n, samples, "NaN mean", 0, 0);
    }
    free(mean);
    free(m2);
  }
  return failures;
}

int main(int argc, char **argv) {
  comm_ctx_t comm;
  if (comm_init(&comm, &argc, &argv) != DS_OK) return 1;
  backend_t *cpu = NULL;
  if (backend_cpu_create(&cpu) != DS_OK) return 1;
  int failures = 0, cases = 0;
  const int64_t sizes[] = {1, 2, 7, 100, 1000, 65537};
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s)
    for (int kind = 0; kind < 4; ++kind)
      for (int planted = 0; planted < 2; ++planted) {
        const int64_t n = sizes[s];
        float *x = malloc((size_t)n * sizeof *x);
        for (int64_t i = 0; i < n; ++i) x[i] = draw(1000 * s + 10 * kind, i, kind);
        if (planted && n >= 7) {
          x[n / 3] = INFINITY;
          x[n / 2] = -INFINITY;
          x[n - 1] = NAN;
        }
        char label[64];
        snprintf(label, sizeof label, "kind %d%s", kind, planted ? " non-finite" : "");
        for (int clamp = 0; clamp < 2; ++clamp) failures += check_case(&comm, cpu, x, n, clamp, label), cases++;
        free(x);
      }
  failures += lp_cases(&comm, cpu);
  if (comm.rank == 0) printf("%d value cases and the lp rule on %d ranks: %d failures\n", cases, comm.size, failures);
  backend_destroy(cpu);
  comm_free(&comm);
  return failures ? 1 : 0;
}
