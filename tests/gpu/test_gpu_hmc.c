/* test_gpu_hmc.c: the CUDA backend's HMC transition against the CPU backend through
 * backend.h, over several iterations from the same state: the fused gaussian kernel
 * (dim a multiple of 4 and not), the generic path with the GPU gaussian gradient (dim too
 * large to fuse), and the generic path through host staging (a target with a host gradient
 * only). Momenta and uniforms come from the same Philox words on both, so accept decisions
 * must agree on >= 99.9% of chains and positions within 1e-5 relative; the jittered steps bit
 * for bit; the running moments close. Also the entries around the transition: exact column sums
 * bitwise equal to the CPU backend's, per-chain dual averaging. Exits 77 without a GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "order_key.h"
#include "exactsum.h"
#include "backend_cuda.h"
#include "comm_cuda.h"
#include "gpu_test.h"
#include "hmc_kernels.h"
#include "targets_builtin.h"
#include "targets_builtin_cuda.h"

static backend_t *cpu, *gpu;

/* The built-in gaussian behind a different function pointer: not recognised as built-in,
 * so the CUDA backend must take its generic path and stage through the host. */
static const dsampler_target *wrapped_target;
static int wrapped_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  (void)self; /* the wrapped target's own */
  return wrapped_target->logp_grad(wrapped_target->self, x, n, logp, grad);
}

typedef struct chain_arrays {
  float *q, *logp, *grad, *step_size, *step_used, *inv_metric, *accept_prob, *energy, *moment_mean, *moment_m2;
  float *chees_center, *chees;
  uint8_t *diverging, *accepted;
  hmc_batch_t stats;       /* the sample statistics' arrays (hmc_stats.h); the four above alias them */
} chain_arrays_t;

static void arrays_alloc(backend_t *b, chain_arrays_t *a, int64_t n, int64_t dim) {
  size_t nd = (size_t)(n * dim) * sizeof(float), n4 = (size_t)n * sizeof(float);
  GPU_TRY(b->alloc(b, (void **)&a->q, nd));
  GPU_TRY(b->alloc(b, (void **)&a->grad, nd));
  GPU_TRY(b->alloc(b, (void **)&a->inv_metric, nd));
  GPU_TRY(b->alloc(b, (void **)&a->logp, n4));
  GPU_TRY(b->alloc(b, (void **)&a->step_size, n4));
  GPU_TRY(b->alloc(b, (void **)&a->moment_mean, nd));
  GPU_TRY(b->alloc(b, (void **)&a->moment_m2, nd));
  GPU_TRY(b->fill(b, a->moment_mean, 0.0f, n * dim));
  GPU_TRY(b->fill(b, a->moment_m2, 0.0f, n * dim));
  a->stats = (hmc_batch_t){.n_chains = n};
  GPU_TRY(hmc_batch_alloc_stats(b, &a->stats));
  a->step_used = a->stats.step_size;
  a->accept_prob = a->stats.accept_prob;
  a->energy = a->stats.energy;
  a->diverging = a->stats.diverging;
  GPU_TRY(b->alloc(b, (void **)&a->accepted, (size_t)n));
  GPU_TRY(b->alloc(b, (void **)&a->chees_center, (size_t)dim * sizeof(float)));
  GPU_TRY(b->alloc(b, (void **)&a->chees, 2 * n4));
}

static void arrays_free(backend_t *b, chain_arrays_t *a) {
  b->release(b, a->q); b->release(b, a->grad); b->release(b, a->inv_metric); b->release(b, a->logp);
  b->release(b, a->step_size); b->release(b, a->moment_mean); b->release(b, a->moment_m2);
  hmc_batch_release_stats(b, &a->stats);
  b->release(b, a->accepted);
  b->release(b, a->chees_center); b->release(b, a->chees);
}

static hmc_batch_t batch_of(chain_arrays_t *a, int64_t n, int64_t dim, int64_t chain_begin, uint32_t iteration) {
  hmc_batch_t batch = {.n_chains = n, .chain_begin = chain_begin, .dim = dim, .seed = 0x5eed0123456789abull,
                       .iteration = iteration, .n_leapfrog = 10, .q = a->q, .logp = a->logp, .grad = a->grad,
                       .step_nominal = a->step_size, .inv_metric = a->inv_metric, .accepted = a->accepted,
                       .jitter = 0.3f, .moment_mean = a->moment_mean, .moment_m2 = a->moment_m2,
                       .moment_count = (int64_t)iteration - 99};
  hmc_batch_share_stats(&batch, &a->stats);
  return batch;
}

/* With dense set, a dense metric: L lower triangular, diagonal 0.5..1.5, below it +-0.1. */
/* backend.h's metric_factor: L [dim, dim] followed by L^T; fills the second half from the first. */
static void transpose_after(float *factor, int64_t dim) {
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t k = 0; k < dim; ++k) factor[dim * dim + i * dim + k] = factor[k * dim + i];
}

static void test_hmc_case_metric(const char *label, int64_t n, int64_t dim, int wrap, int iterations, int dense);
static void test_hmc_case(const char *label, int64_t n, int64_t dim, int wrap, int iterations) {
  test_hmc_case_metric(label, n, dim, wrap, iterations, 0);
}

static void test_hmc_case_metric(const char *label, int64_t n, int64_t dim, int wrap, int iterations, int dense) {
  char args[64];
  snprintf(args, sizeof args, "dim=%lld,mean=-0.5,scale=1.25", (long long)dim);
  dsampler_target target;
  GPU_TRY(builtin_target_create("gaussian", args, MPI_COMM_NULL, &target));
  dsampler_target used = target;
  if (wrap) { /* 1: host gradient only; 2: the target's own device gradient (logp_grad_cuda) */
    wrapped_target = &target;
    used.logp_grad = wrapped_logp_grad;
    if (wrap == 1) {
      used.self = NULL;
      used.logp_grad_cuda = NULL;
    }
  }
  const int64_t nd = n * dim, chain_begin = 1000003;
  float *q0 = test_malloc((size_t)nd * sizeof(float)), *inv_metric = test_malloc((size_t)nd * sizeof(float));
  float *grad0 = test_malloc((size_t)nd * sizeof(float)), *logp0 = test_malloc((size_t)n * sizeof(float));
  float *step = test_malloc((size_t)n * sizeof(float)), *center = test_malloc((size_t)dim * sizeof(float));
  float *chees_gpu = test_malloc((size_t)(2 * n) * sizeof(float));
  uint64_t state = 4242 + (uint64_t)dim;
  for (int64_t k = 0; k < dim; ++k) center[k] = (float)(test_rng_uniform(&state) - 0.5);
  test_fill_normal(q0, nd, 1.3, state);
  for (int64_t e = 0; e < nd; ++e) inv_metric[e] = (float)(0.5 + test_rng_uniform(&state));
  /* Step sizes 0.05..0.15, and 1% of chains at 3.5, unstable: divergences must match too. */
  for (int64_t c = 0; c < n; ++c) step[c] = c % 100 == 17 ? 3.5f : (float)(0.05 + 0.1 * test_rng_uniform(&state));
  GPU_TRY(cpu->logp_grad(cpu, &target, q0, n, logp0, grad0));

  chain_arrays_t host, dev;
  arrays_alloc(cpu, &host, n, dim);
  arrays_alloc(gpu, &dev, n, dim);
  memcpy(host.q, q0, (size_t)nd * sizeof(float));
  memcpy(host.grad, grad0, (size_t)nd * sizeof(float));
  memcpy(host.logp, logp0, (size_t)n * sizeof(float));
  memcpy(host.inv_metric, inv_metric, (size_t)nd * sizeof(float));
  memcpy(host.step_size, step, (size_t)n * sizeof(float));
  GPU_TRY(gpu->upload(gpu, dev.q, q0, (size_t)nd * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, dev.grad, grad0, (size_t)nd * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, dev.logp, logp0, (size_t)n * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, dev.inv_metric, inv_metric, (size_t)nd * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, dev.step_size, step, (size_t)n * sizeof(float)));
  memcpy(host.chees_center, center, (size_t)dim * sizeof(float));
  GPU_TRY(gpu->upload(gpu, dev.chees_center, center, (size_t)dim * sizeof(float)));
  float *factor = NULL, *factor_dev = NULL, *factor_inv = NULL, *factor_inv_dev = NULL;
  if (dense) {
    factor = test_malloc((size_t)(2 * dim * dim) * sizeof(float)); /* L, then L^T (backend.h) */
    for (int64_t i = 0; i < dim; ++i)
      for (int64_t j = 0; j < dim; ++j)
        factor[i * dim + j] = j > i ? 0.0f : j == i ? (float)(0.5 + test_rng_uniform(&state))
                                                    : (float)(0.2 * (test_rng_uniform(&state) - 0.5));
    transpose_after(factor, dim);
    /* L^-1 by solving L X = I column by column, in double. */
    factor_inv = test_malloc((size_t)(dim * dim) * sizeof(float));
    double *column = test_malloc((size_t)dim * sizeof(double));
    for (int64_t j = 0; j < dim; ++j) {
      for (int64_t i = 0; i < dim; ++i) {
        double v = i == j ? 1.0 : 0.0;
        for (int64_t k = 0; k < i; ++k) v -= (double)factor[i * dim + k] * column[k];
        column[i] = v / (double)factor[i * dim + i];
      }
      for (int64_t i = 0; i < dim; ++i) factor_inv[i * dim + j] = (float)column[i];
    }
    free(column);
    if (dense == 2) {
      /* One factor a chain (backend.h's factor_per_chain): chain c's L = a_c L, L^-1 / a_c. */
      const int64_t square = dim * dim;
      float *all = test_malloc((size_t)(n * 2 * square) * sizeof(float));
      float *all_inv = test_malloc((size_t)(n * square) * sizeof(float));
      for (int64_t c = 0; c < n; ++c) {
        const float a = (float)(0.6 + 0.8 * test_rng_uniform(&state));
        for (int64_t e = 0; e < 2 * square; ++e) all[c * 2 * square + e] = a * factor[e];
        for (int64_t e = 0; e < square; ++e) all_inv[c * square + e] = factor_inv[e] / a;
      }
      free(factor);
      free(factor_inv);
      factor = all;
      factor_inv = all_inv;
    }
    const int64_t copies = dense == 2 ? n : 1;
    GPU_TRY(gpu->alloc(gpu, (void **)&factor_dev, (size_t)(copies * 2 * dim * dim) * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, factor_dev, factor, (size_t)(copies * 2 * dim * dim) * sizeof(float)));
    GPU_TRY(gpu->alloc(gpu, (void **)&factor_inv_dev, (size_t)(copies * dim * dim) * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, factor_inv_dev, factor_inv, (size_t)(copies * dim * dim) * sizeof(float)));
  }

  float *q_gpu = test_malloc((size_t)nd * sizeof(float)), *energy_gpu = test_malloc((size_t)n * sizeof(float));
  float *prob_gpu = test_malloc((size_t)n * sizeof(float));
  uint8_t *acc_gpu = test_malloc((size_t)n), *div_gpu = test_malloc((size_t)n);
  uint8_t *same_history = test_malloc((size_t)n);
  memset(same_history, 1, (size_t)n);
  float *moments_gpu = test_malloc((size_t)nd * sizeof(float));
  float *q_match_gpu = test_malloc((size_t)nd * sizeof(float)), *q_match_cpu = test_malloc((size_t)nd * sizeof(float));
  unsigned char *poison = test_malloc((size_t)n * sizeof(float));
  memset(poison, 0xFF, (size_t)n * sizeof(float)); /* NaN as float, 255 as a flag */
  printf("  %s: %lld chains, d=%lld, L=10\n", label, (long long)n, (long long)dim);
  for (int it = 0; it < iterations; ++it) {
    const uint32_t iteration = 100 + (uint32_t)it;
    hmc_batch_t batch_cpu = batch_of(&host, n, dim, chain_begin, iteration);
    hmc_batch_t batch_gpu = batch_of(&dev, n, dim, chain_begin, iteration);
    batch_cpu.metric_factor = factor;
    batch_gpu.metric_factor = factor_dev;
    batch_cpu.metric_factor_inv = factor_inv;
    batch_gpu.metric_factor_inv = factor_inv_dev;
    batch_cpu.factor_per_chain = batch_gpu.factor_per_chain = dense == 2;
    /* ChEES terms on odd iterations (and their moments on the first of them: both variants). */
    const int chees = it % 2 == 1;
    if (chees) {
      batch_cpu.chees_center = host.chees_center;
      batch_cpu.chees = host.chees;
      batch_gpu.chees_center = dev.chees_center;
      batch_gpu.chees = dev.chees;
      if (it > 1) batch_cpu.moment_mean = batch_cpu.moment_m2 = batch_gpu.moment_mean = batch_gpu.moment_m2 = NULL;
    }
    /* Poison the GPU's outputs: every chain's must be written. */
    GPU_TRY(gpu->upload(gpu, dev.accepted, poison, (size_t)n));
    GPU_TRY(gpu->upload(gpu, dev.diverging, poison, (size_t)n));
    GPU_TRY(gpu->upload(gpu, dev.energy, poison, (size_t)n * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, dev.accept_prob, poison, (size_t)n * sizeof(float)));
    GPU_TRY(cpu->hmc_transition(cpu, &used, &batch_cpu));
    GPU_TRY(gpu->hmc_transition(gpu, &used, &batch_gpu));
    GPU_TRY(gpu->download(gpu, q_gpu, dev.q, (size_t)nd * sizeof(float)));
    GPU_TRY(gpu->download(gpu, acc_gpu, dev.accepted, (size_t)n));
    GPU_TRY(gpu->download(gpu, div_gpu, dev.diverging, (size_t)n));
    GPU_TRY(gpu->download(gpu, energy_gpu, dev.energy, (size_t)n * sizeof(float)));
    GPU_TRY(gpu->download(gpu, prob_gpu, dev.accept_prob, (size_t)n * sizeof(float)));
    /* The jittered steps: the same double arithmetic on the same Philox word, bit for bit. */
    GPU_TRY(gpu->download(gpu, energy_gpu, dev.step_used, (size_t)n * sizeof(float)));
    GPU_EXPECT(memcmp(energy_gpu, host.step_used, (size_t)n * sizeof(float)) == 0, "%s it %d: jittered steps differ",
               label, it);
    GPU_TRY(gpu->download(gpu, energy_gpu, dev.energy, (size_t)n * sizeof(float)));
    int64_t same_decision = 0, divergent = 0, accepted = 0, matched = 0;
    double prob_err = 0.0, energy_err = 0.0;
    for (int64_t c = 0; c < n; ++c) {
      int same = acc_gpu[c] == host.accepted[c] && div_gpu[c] == host.diverging[c];
      same_decision += same;
      divergent += host.diverging[c];
      accepted += host.accepted[c];
      if (!same) same_history[c] = 0;
      if (same_history[c]) {
        memcpy(q_match_gpu + matched * dim, q_gpu + c * dim, (size_t)dim * sizeof(float));
        memcpy(q_match_cpu + matched * dim, host.q + c * dim, (size_t)dim * sizeof(float));
        ++matched;
        prob_err = fmax(prob_err, fabs((double)prob_gpu[c] - (double)host.accept_prob[c]));
        double scale = fmax(1.0, fabs((double)host.energy[c]));
        energy_err = fmax(energy_err, fabs((double)energy_gpu[c] - (double)host.energy[c]) / scale);
      }
    }
    double q_err = test_rel_err(q_match_gpu, q_match_cpu, matched * dim);
    if (chees) {
      /* The ChEES terms of chains that decided alike: sums of dim terms of positions equal to 1e-5
       * relative, in double, rounded to float: 1e-4 (dim + |value|). The stats' sums of them: 1e-3. */
      GPU_TRY(gpu->download(gpu, chees_gpu, dev.chees, (size_t)(2 * n) * sizeof(float)));
      double chees_err = 0.0;
      for (int64_t c = 0; c < n; ++c) {
        if (!same_history[c]) continue;
        for (int e = 0; e < 2; ++e) {
          const double want = (double)host.chees[2 * c + e], got = (double)chees_gpu[2 * c + e];
          chees_err = fmax(chees_err, fabs(got - want) / (1e-4 * ((double)dim + fabs(want))));
        }
      }
      GPU_EXPECT(chees_err <= 1, "%s it %d: ChEES terms differ (scaled %.3g)", label, it, chees_err);
      hmc_stats_t stats_cpu, stats_gpu;
      GPU_TRY(cpu->hmc_stats(cpu, &batch_cpu, &stats_cpu));
      GPU_TRY(gpu->hmc_stats(gpu, &batch_gpu, &stats_gpu));
      exact_sum_t *pairs[3][2] = {{&stats_cpu.chees_slope, &stats_gpu.chees_slope},
                                  {&stats_cpu.chees_value, &stats_gpu.chees_value},
                                  {&stats_cpu.chees_weight, &stats_gpu.chees_weight}};
      /* Scales: the sums of the terms' magnitudes (the slope's terms have either sign). */
      double scale[3] = {0.0, 0.0, 0.0};
      for (int64_t c = 0; c < n; ++c) {
        const double a = (double)host.accept_prob[c], d = (double)host.chees[2 * c], b = (double)host.chees[2 * c + 1];
        scale[0] += fabs(a * d * b);
        scale[1] += a * 0.25 * d * d;
        scale[2] += a;
      }
      for (int i = 0; i < 3; ++i) {
        const double want = exact_sum_value(pairs[i][0]), got = exact_sum_value(pairs[i][1]);
        GPU_EXPECT(scale[i] > 0.0 && fabs(got - want) <= 1e-3 * scale[i], "%s it %d: ChEES sum %d: GPU %.9g, CPU %.9g "
                   "(scale %.3g)", label, it, i, got, want, scale[i]);
      }
      printf("    ChEES terms: worst scaled error %.3g; slope sum %.6g\n", chees_err, exact_sum_value(&stats_cpu.chees_slope));
    }
    /* The running moments of chains with the same history: float Welford of close positions. */
    GPU_TRY(gpu->download(gpu, moments_gpu, dev.moment_mean, (size_t)nd * sizeof(float)));
    double moment_err = 0.0;
    for (int64_t c = 0; c < n; ++c)
      for (int64_t k = 0; same_history[c] && k < dim; ++k)
        moment_err = fmax(moment_err, fabs((double)moments_gpu[c * dim + k] - (double)host.moment_mean[c * dim + k]) /
                                          (1e-3 + fabs((double)host.moment_mean[c * dim + k])));
    /* tol 1e-3 absolute + 1e-4 relative: positions agree to 1e-5 relative, a few updates. */
    GPU_EXPECT(moment_err <= 0.1, "%s it %d: moment means differ (scaled %.3g)", label, it, moment_err);

    double agree = (double)same_decision / (double)n, history = (double)matched / (double)n;
    printf("    iteration %d: accepted %lld, divergent %lld, same decision %.5f, same history %.5f, "
           "q rel err %.2e, max |dprob| %.2e, max energy rel err %.2e\n",
           it, (long long)accepted, (long long)divergent, agree, history, q_err, prob_err, energy_err);
    /* Decisions: >= 99.9% of chains agree, every iteration and over the whole history. */
    GPU_EXPECT(agree >= 0.999, "%s it %d: decisions agree on %.5f < 0.999", label, it, agree);
    GPU_EXPECT(history >= 0.999, "%s it %d: histories agree on %.5f < 0.999", label, it, history);
    /* Positions of chains with the same history: 1e-5 relative. */
    GPU_EXPECT(q_err <= 1e-5, "%s it %d: q rel err %.3g > 1e-5", label, it, q_err);
    /* accept_prob in [0, 1]: 1e-4 absolute; energy (float of a double): 1e-5 relative. */
    GPU_EXPECT(prob_err <= 1e-4, "%s it %d: accept_prob err %.3g > 1e-4", label, it, prob_err);
    GPU_EXPECT(energy_err <= 1e-5, "%s it %d: energy rel err %.3g > 1e-5", label, it, energy_err);
    GPU_EXPECT(divergent >= n / 100, "%s it %d: expected >= %lld divergent chains, got %lld", label, it,
               (long long)(n / 100), (long long)divergent);
    /* Continue both from their own states for chains that disagree: only matched ones are compared. */
  }
  free(factor);
  free(factor_inv);
  if (factor_dev) gpu->release(gpu, factor_dev);
  if (factor_inv_dev) gpu->release(gpu, factor_inv_dev);
  free(poison);
  free(moments_gpu);
  free(center);
  free(chees_gpu);
  free(q0); free(inv_metric); free(grad0); free(logp0); free(step); free(q_gpu); free(energy_gpu);
  free(prob_gpu); free(acc_gpu); free(div_gpu); free(same_history); free(q_match_gpu); free(q_match_cpu);
  arrays_free(cpu, &host);
  arrays_free(gpu, &dev);
  if (target.destroy) target.destroy(target.self);
}

/* The dense metric's kernel families (hmc_kernels.h: wide, tiled, one element a thread) compute
 * the same bits: two transitions with the ChEES terms (and the last half kick) from the same
 * state under each, every output compared bit for bit. */
static void test_dense_families(int64_t n, int64_t dim) {
  char args[64];
  snprintf(args, sizeof args, "dim=%lld,mean=0.25,scale=0.8", (long long)dim);
  dsampler_target target;
  GPU_TRY(builtin_target_create("gaussian", args, MPI_COMM_NULL, &target));
  const int64_t nd = n * dim;
  float *q0 = test_malloc((size_t)nd * sizeof(float)), *grad0 = test_malloc((size_t)nd * sizeof(float));
  float *logp0 = test_malloc((size_t)n * sizeof(float)), *step = test_malloc((size_t)n * sizeof(float));
  float *center = test_malloc((size_t)dim * sizeof(float)), *factor = test_malloc((size_t)(2 * dim * dim) * sizeof(float));
  float *factor_inv = test_malloc((size_t)(dim * dim) * sizeof(float));
  uint64_t state = 77 + (uint64_t)dim;
  test_fill_normal(q0, nd, 1.0, state);
  for (int64_t k = 0; k < dim; ++k) center[k] = (float)(test_rng_uniform(&state) - 0.5);
  for (int64_t c = 0; c < n; ++c) step[c] = c % 50 == 3 ? 4.0f : (float)(0.1 + 0.2 * test_rng_uniform(&state));
  for (int64_t i = 0; i < dim; ++i)
    for (int64_t j = 0; j < dim; ++j) {
      factor[i * dim + j] = j > i ? 0.0f : j == i ? (float)(0.5 + test_rng_uniform(&state))
                                                  : (float)(0.2 * (test_rng_uniform(&state) - 0.5));
      factor_inv[i * dim + j] = j > i ? 0.0f : (float)(test_rng_uniform(&state) - 0.5); /* any lower triangle */
    }
  transpose_after(factor, dim);
  GPU_TRY(cpu->logp_grad(cpu, &target, q0, n, logp0, grad0));
  float *factor_dev = NULL, *factor_inv_dev = NULL;
  GPU_TRY(gpu->alloc(gpu, (void **)&factor_dev, (size_t)(2 * dim * dim) * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&factor_inv_dev, (size_t)(dim * dim) * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, factor_dev, factor, (size_t)(2 * dim * dim) * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, factor_inv_dev, factor_inv, (size_t)(dim * dim) * sizeof(float)));
  /* Per family: q, grad, moment means (nd each), logp, energy, accept_prob, chees (2n), accepted. */
  const size_t out_bytes = (size_t)(3 * nd + 5 * n) * sizeof(float) + (size_t)n;
  unsigned char *out[3];
  const int families[3] = {HMC_DENSE_WIDE, HMC_DENSE_TILED, HMC_DENSE_ELEMENT};
  const char *names[3] = {"wide", "tiled", "one element a thread"};
  for (int f = 0; f < 3; ++f) {
    hmc_cuda_set_dense_family(families[f]);
    chain_arrays_t dev;
    arrays_alloc(gpu, &dev, n, dim);
    GPU_TRY(gpu->upload(gpu, dev.q, q0, (size_t)nd * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, dev.grad, grad0, (size_t)nd * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, dev.logp, logp0, (size_t)n * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, dev.step_size, step, (size_t)n * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, dev.chees_center, center, (size_t)dim * sizeof(float)));
    for (uint32_t it = 100; it < 102; ++it) {
      hmc_batch_t batch = batch_of(&dev, n, dim, 12345, it);
      batch.metric_factor = factor_dev;
      batch.metric_factor_inv = factor_inv_dev;
      batch.chees_center = dev.chees_center;
      batch.chees = dev.chees;
      GPU_TRY(gpu->hmc_transition(gpu, &target, &batch));
    }
    out[f] = test_malloc(out_bytes);
    unsigned char *o = out[f];
    GPU_TRY(gpu->download(gpu, o, dev.q, (size_t)nd * sizeof(float))); o += (size_t)nd * sizeof(float);
    GPU_TRY(gpu->download(gpu, o, dev.grad, (size_t)nd * sizeof(float))); o += (size_t)nd * sizeof(float);
    GPU_TRY(gpu->download(gpu, o, dev.moment_mean, (size_t)nd * sizeof(float))); o += (size_t)nd * sizeof(float);
    GPU_TRY(gpu->download(gpu, o, dev.logp, (size_t)n * sizeof(float))); o += (size_t)n * sizeof(float);
    GPU_TRY(gpu->download(gpu, o, dev.energy, (size_t)n * sizeof(float))); o += (size_t)n * sizeof(float);
    GPU_TRY(gpu->download(gpu, o, dev.accept_prob, (size_t)n * sizeof(float))); o += (size_t)n * sizeof(float);
    GPU_TRY(gpu->download(gpu, o, dev.chees, (size_t)(2 * n) * sizeof(float))); o += (size_t)(2 * n) * sizeof(float);
    GPU_TRY(gpu->download(gpu, o, dev.accepted, (size_t)n));
    arrays_free(gpu, &dev);
  }
  hmc_cuda_set_dense_family(0);
  int64_t accepted = 0;
  for (int64_t c = 0; c < n; ++c) accepted += out[0][out_bytes - (size_t)n + (size_t)c];
  for (int f = 1; f < 3; ++f)
    GPU_EXPECT(memcmp(out[0], out[f], out_bytes) == 0, "dense d=%lld: the %s kernels differ from the wide ones",
               (long long)dim, names[f]);
  GPU_EXPECT(accepted > 0 && accepted < n, "dense d=%lld: %lld of %lld accepted (a trivial case)", (long long)dim,
             (long long)accepted, (long long)n);
  printf("  dense kernels d=%lld, %lld chains: wide = tiled = one element a thread, bit for bit (%lld accepted)\n",
         (long long)dim, (long long)n, (long long)accepted);
  for (int f = 0; f < 3; ++f) free(out[f]);
  gpu->release(gpu, factor_dev);
  gpu->release(gpu, factor_inv_dev);
  free(q0); free(grad0); free(logp0); free(step); free(center); free(factor); free(factor_inv);
  if (target.destroy) target.destroy(target.self);
}

/* covariance_add deferred (the CUDA backend folds its updates together) and one at a time: the
 * same bits, with a read and a fill of m2 between updates, and a second m2 interleaved. */
static void test_covariance_deferred(int64_t rows, int64_t dim) {
  const int64_t tri = dim * (dim + 1) / 2, nd = rows * dim;
  float *q = test_malloc((size_t)nd * sizeof(float)), *mean = test_malloc((size_t)nd * sizeof(float));
  float *got[2], *other[2];
  float *q_dev, *mean_dev, *m2_dev, *m2b_dev;
  GPU_TRY(gpu->alloc(gpu, (void **)&q_dev, (size_t)nd * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&mean_dev, (size_t)nd * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&m2_dev, (size_t)(rows * tri) * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&m2b_dev, (size_t)(rows * tri) * sizeof(float)));
  for (int defer = 0; defer < 2; ++defer) {
    backend_cuda_covariance_defer(gpu, defer);
    got[defer] = test_malloc((size_t)(rows * tri) * sizeof(float));
    other[defer] = test_malloc((size_t)(rows * tri) * sizeof(float));
    GPU_TRY(gpu->fill(gpu, m2_dev, 0.0f, rows * tri));
    GPU_TRY(gpu->fill(gpu, m2b_dev, 0.0f, rows * tri));
    for (int t = 1; t <= 40; ++t) {
      test_fill_normal(q, nd, 1.5, 1000 + (uint64_t)t);
      test_fill_normal(mean, nd, 0.5, 2000 + (uint64_t)t);
      GPU_TRY(gpu->upload(gpu, q_dev, q, (size_t)nd * sizeof(float)));
      GPU_TRY(gpu->upload(gpu, mean_dev, mean, (size_t)nd * sizeof(float)));
      GPU_TRY(gpu->covariance_add(gpu, q_dev, mean_dev, (t >= 24 && t <= 29) ? m2b_dev : m2_dev, rows, dim, (double)t));
      if (t == 23) GPU_TRY(gpu->download(gpu, got[defer], m2_dev + tri, sizeof(float))); /* one entry: a read */
      if (t == 30) GPU_TRY(gpu->fill(gpu, m2b_dev, 0.0f, rows * tri));
    }
    GPU_TRY(gpu->download(gpu, got[defer], m2_dev, (size_t)(rows * tri) * sizeof(float)));
    GPU_TRY(gpu->download(gpu, other[defer], m2b_dev, (size_t)(rows * tri) * sizeof(float)));
  }
  backend_cuda_covariance_defer(gpu, 1);
  GPU_EXPECT(memcmp(got[0], got[1], (size_t)(rows * tri) * sizeof(float)) == 0 &&
                 memcmp(other[0], other[1], (size_t)(rows * tri) * sizeof(float)) == 0,
             "covariance_add %lld x %lld: deferred differs from one update at a time", (long long)rows, (long long)dim);
  double norm = 0.0;
  for (int64_t e = 0; e < rows * tri; ++e) norm += fabs((double)got[1][e]);
  GPU_EXPECT(norm > 0.0, "covariance_add: nothing accumulated");
  printf("  covariance_add %lld x %lld, 40 updates deferred (capacity %d) = one at a time, bit for bit\n",
         (long long)rows, (long long)dim, covariance_defer_capacity(dim));
  gpu->release(gpu, q_dev); gpu->release(gpu, mean_dev); gpu->release(gpu, m2_dev); gpu->release(gpu, m2b_dev);
  for (int d = 0; d < 2; ++d) free(got[d]), free(other[d]);
  free(q); free(mean);
}

/* The backend entries around the transition, on the same inputs: exact sums and the draw copy
 * bit for bit; dual averaging to 1e-12 (CUDA's exp/log/pow against glibc's). */
static void test_device_entries(void) {
  const int64_t rows = 100003, cols = 7;
  float *values = test_malloc((size_t)(rows * cols) * sizeof(float)), *values_dev = NULL;
  test_fill_normal(values, rows * cols, 3.0, 99);
  for (int64_t e = 0; e < rows * cols; e += 97) values[e] *= 1e20f; /* a wide range of exponents */
  for (int64_t e = 5; e < rows * cols; e += 89) values[e] *= 1e-20f;
  GPU_TRY(gpu->alloc(gpu, (void **)&values_dev, (size_t)(rows * cols) * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, values_dev, values, (size_t)(rows * cols) * sizeof(float)));
  exact_sum_t cpu_sums[7], gpu_sums[7];
  const double center[7] = {0.5, -1, 2, 0, 1e3, -3, 7};
  for (int centred = 0; centred < 2; ++centred) {
    GPU_TRY(cpu->column_sums(cpu, values, rows, cols, centred ? center : NULL, cpu_sums));
    GPU_TRY(gpu->column_sums(gpu, values_dev, rows, cols, centred ? center : NULL, gpu_sums));
    int same = 1;
    for (int k = 0; k < cols; ++k) {
      exact_sum_normalize(&cpu_sums[k]);
      exact_sum_normalize(&gpu_sums[k]);
      same &= memcmp(cpu_sums[k].digit, gpu_sums[k].digit, sizeof cpu_sums[k].digit) == 0;
    }
    GPU_EXPECT(same, "column sums (%s): GPU digits differ from the CPU's", centred ? "centred" : "plain");
    printf("  column sums (%s), %lld x %lld: %s\n", centred ? "centred" : "plain", (long long)rows, (long long)cols,
           same ? "bitwise equal" : "DIFFER");
  }
  /* The order keys' histograms (the minor-mode check's order statistics): the same counts, at
   * each level, clamped or not, with non-finite values and both zeros among the values. */
  values[3] = INFINITY;
  values[11] = -INFINITY;
  values[20] = NAN;
  values[30] = -0.0f;
  values[31] = 0.0f;
  GPU_TRY(gpu->upload(gpu, values_dev, values, (size_t)(rows * cols) * sizeof(float)));
  uint64_t bins_cpu[(1 << ORDER_KEY_MAX_BITS) + 1], bins_gpu[(1 << ORDER_KEY_MAX_BITS) + 1];
  int histograms_same = 1, histograms = 0;
  for (int clamp = 0; clamp < 2; ++clamp)
    for (int level = 0; level < ORDER_KEY_LEVELS; ++level) {
      const int shift = order_key_shift(level), bits = order_key_bits(level), prefix_bits = 32 - shift - bits;
      /* The prefix of a value's key, so that the level has values to count. */
      const float chosen = clamp ? fmaxf(values[7 * level + 1], 0.0f) : values[7 * level + 1];
      const uint32_t prefix = prefix_bits ? order_key(chosen) >> (32 - prefix_bits) : 0u;
      GPU_TRY(cpu->key_histogram(cpu, values, rows * cols, clamp, prefix, prefix_bits, shift, bits, bins_cpu));
      GPU_TRY(gpu->key_histogram(gpu, values_dev, rows * cols, clamp, prefix, prefix_bits, shift, bits, bins_gpu));
      uint64_t counted = 0;
      for (int i = 0; i <= 1 << bits; ++i) counted += bins_cpu[i];
      histograms_same &= memcmp(bins_cpu, bins_gpu, ((size_t)(1 << bits) + 1) * sizeof *bins_cpu) == 0 && counted > 0;
      histograms++;
    }
  GPU_EXPECT(histograms_same, "key histograms: GPU counts differ from the CPU's");
  printf("  order key histograms, %d of them over %lld values: %s\n", histograms, (long long)(rows * cols),
         histograms_same ? "equal" : "DIFFER");

  /* Dual averaging, per chain, from the same states and acceptance statistics. */
  const int64_t chains = 5000;
  double *state = test_malloc((size_t)chains * DUAL_FIELDS * sizeof(double)), *state_dev = NULL;
  float *accept = test_malloc((size_t)chains * sizeof(float)), *accept_dev = NULL, *step_dev = NULL;
  float *step_cpu = test_malloc((size_t)chains * sizeof(float)), *step_gpu = test_malloc((size_t)chains * sizeof(float));
  uint64_t rng = 5;
  for (int64_t c = 0; c < chains; ++c) {
    dual_restart(state + c * DUAL_FIELDS, 0.01 + test_rng_uniform(&rng));
    accept[c] = (float)test_rng_uniform(&rng);
  }
  GPU_TRY(gpu->alloc(gpu, (void **)&state_dev, (size_t)chains * DUAL_FIELDS * sizeof(double)));
  GPU_TRY(gpu->alloc(gpu, (void **)&accept_dev, (size_t)chains * sizeof(float)));
  GPU_TRY(gpu->alloc(gpu, (void **)&step_dev, (size_t)chains * sizeof(float)));
  GPU_TRY(gpu->upload(gpu, state_dev, state, (size_t)chains * DUAL_FIELDS * sizeof(double)));
  GPU_TRY(gpu->upload(gpu, accept_dev, accept, (size_t)chains * sizeof(float)));
  dual_average_step_t step = {.target_accept = 0.8, .gamma = 0.05, .kappa = 0.75, .t0 = 10.0, .counter = 3.0, .restart = 1};
  GPU_TRY(cpu->dual_average(cpu, state, accept, step_cpu, chains, &step));
  GPU_TRY(gpu->dual_average(gpu, state_dev, accept_dev, step_dev, chains, &step));
  GPU_TRY(gpu->download(gpu, step_gpu, step_dev, (size_t)chains * sizeof(float)));
  double step_err = 0.0;
  for (int64_t c = 0; c < chains; ++c)
    step_err = fmax(step_err, fabs((double)step_gpu[c] - (double)step_cpu[c]) / (double)step_cpu[c]);
  /* Both round a double to float: equal, or one float ulp apart (6e-8) where CUDA's exp differs. */
  GPU_EXPECT(step_err <= 1.2e-7, "dual averaging: steps differ by %.3g relative", step_err);
  printf("  per-chain dual averaging, %lld chains: max relative step difference %.2e\n", (long long)chains, step_err);
  /* The dense metric's running covariances and the lp moments: float arithmetic of the same
   * order on both, equal to 1e-6 relative of the entries' scale (fused multiply-adds may differ). */
  for (int64_t cdim = 9; cdim <= 160; cdim += 151) { /* the table kernel, then the plain one */
    const int64_t crow = cdim < 100 ? 3001 : 301, tri = cdim * (cdim + 1) / 2;
    float *q = test_malloc((size_t)(crow * cdim) * sizeof(float)), *mean = test_malloc((size_t)(crow * cdim) * sizeof(float));
    float *m2 = test_malloc((size_t)(crow * tri) * sizeof(float)), *m2_gpu = test_malloc((size_t)(crow * tri) * sizeof(float));
    float *q_dev = NULL, *mean_dev = NULL, *m2_dev = NULL;
    test_fill_normal(q, crow * cdim, 2.0, 7);
    test_fill_normal(mean, crow * cdim, 1.0, 8);
    test_fill_normal(m2, crow * tri, 1.0, 9);
    GPU_TRY(gpu->alloc(gpu, (void **)&q_dev, (size_t)(crow * cdim) * sizeof(float)));
    GPU_TRY(gpu->alloc(gpu, (void **)&mean_dev, (size_t)(crow * cdim) * sizeof(float)));
    GPU_TRY(gpu->alloc(gpu, (void **)&m2_dev, (size_t)(crow * tri) * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, q_dev, q, (size_t)(crow * cdim) * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, mean_dev, mean, (size_t)(crow * cdim) * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, m2_dev, m2, (size_t)(crow * tri) * sizeof(float)));
    GPU_TRY(cpu->covariance_add(cpu, q, mean, m2, crow, cdim, 7.0));
    GPU_TRY(gpu->covariance_add(gpu, q_dev, mean_dev, m2_dev, crow, cdim, 7.0));
    GPU_TRY(gpu->download(gpu, m2_gpu, m2_dev, (size_t)(crow * tri) * sizeof(float)));
    double cov_err = 0.0;
    for (int64_t e = 0; e < crow * tri; ++e) cov_err = fmax(cov_err, fabs((double)m2_gpu[e] - (double)m2[e]) / (1.0 + fabs((double)m2[e])));
    GPU_EXPECT(cov_err <= 1e-6, "covariance_add: GPU differs from the CPU by %.3g", cov_err);
    GPU_TRY(cpu->running_moments_add(cpu, q, mean, m2, crow, 3.0));
    GPU_TRY(gpu->running_moments_add(gpu, q_dev, mean_dev, m2_dev, crow, 3.0));
    GPU_TRY(gpu->download(gpu, m2_gpu, mean_dev, (size_t)crow * sizeof(float)));
    double lp_err = 0.0;
    for (int64_t r = 0; r < crow; ++r) lp_err = fmax(lp_err, fabs((double)m2_gpu[r] - (double)mean[r]) / (1.0 + fabs((double)mean[r])));
    GPU_EXPECT(lp_err <= 1e-6, "running_moments_add: GPU differs from the CPU by %.3g", lp_err);
    printf("  covariance_add %lld x %lld: max scaled difference %.2e; running moments %.2e\n", (long long)crow,
           (long long)cdim, cov_err, lp_err);
    gpu->release(gpu, q_dev); gpu->release(gpu, mean_dev); gpu->release(gpu, m2_dev);
    free(q); free(mean); free(m2); free(m2_gpu);
  }
  gpu->release(gpu, values_dev); gpu->release(gpu, state_dev); gpu->release(gpu, accept_dev); gpu->release(gpu, step_dev);
  free(values); free(state); free(accept); free(step_cpu); free(step_gpu);
}

/* A row-walk built-in's trajectory in one kernel (targets_builtin_cuda.h) against the generic
 * step-by-step path on the same GPU: every output the same bits, iteration after iteration (with
 * the window's moments and a per-chain metric, then a shared one), and the accept decisions as
 * the CPU's for nearly every chain. */
static void test_builtin_trajectory(const char *name, const char *args, int64_t n, int64_t dim, int iterations) {
  dsampler_target target;
  GPU_TRY(builtin_target_create(name, args, MPI_COMM_NULL, &target));
  /* The fused trajectory must apply here, or the comparison below would be of one path with itself. */
  GPU_EXPECT(cuda_builtin_leapfrog_fits(builtin_target_lookup(&target), dim), "%s (%s): no fused trajectory", name, args);
  const int64_t nd = n * dim, chain_begin = 77;
  float *q0 = test_malloc((size_t)nd * sizeof(float)), *grad0 = test_malloc((size_t)nd * sizeof(float));
  float *logp0 = test_malloc((size_t)n * sizeof(float)), *inv_metric = test_malloc((size_t)nd * sizeof(float));
  float *step = test_malloc((size_t)n * sizeof(float));
  uint64_t state = 99 + (uint64_t)dim;
  test_fill_normal(q0, nd, 1.0, state);
  for (int64_t e = 0; e < nd; ++e) inv_metric[e] = (float)(0.5 + test_rng_uniform(&state));
  for (int64_t c = 0; c < n; ++c) step[c] = c % 50 == 7 ? 4.0f : (float)(0.05 + 0.2 * test_rng_uniform(&state));
  GPU_TRY(cpu->logp_grad(cpu, &target, q0, n, logp0, grad0));
  chain_arrays_t host, fused, steps;
  arrays_alloc(cpu, &host, n, dim);
  arrays_alloc(gpu, &fused, n, dim);
  arrays_alloc(gpu, &steps, n, dim);
  memcpy(host.q, q0, (size_t)nd * sizeof(float));
  memcpy(host.grad, grad0, (size_t)nd * sizeof(float));
  memcpy(host.logp, logp0, (size_t)n * sizeof(float));
  memcpy(host.inv_metric, inv_metric, (size_t)nd * sizeof(float));
  memcpy(host.step_size, step, (size_t)n * sizeof(float));
  chain_arrays_t *both[2] = {&fused, &steps};
  for (int w = 0; w < 2; ++w) {
    GPU_TRY(gpu->upload(gpu, both[w]->q, q0, (size_t)nd * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, both[w]->grad, grad0, (size_t)nd * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, both[w]->logp, logp0, (size_t)n * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, both[w]->inv_metric, inv_metric, (size_t)nd * sizeof(float)));
    GPU_TRY(gpu->upload(gpu, both[w]->step_size, step, (size_t)n * sizeof(float)));
  }
  const size_t sizes[] = {(size_t)nd * 4, (size_t)nd * 4, (size_t)n * 4, (size_t)n, (size_t)n * 4, (size_t)n * 4,
                          (size_t)nd * 4, (size_t)nd * 4};
  unsigned char *a = test_malloc((size_t)nd * 4), *b = test_malloc((size_t)nd * 4);
  int same = 1;
  int64_t agree = 0, decisions = 0;
  for (int it = 0; it < iterations; ++it) {
    const uint32_t iteration = 100 + (uint32_t)it;
    hmc_batch_t batch[2], batch_cpu = batch_of(&host, n, dim, chain_begin, iteration);
    for (int w = 0; w < 2; ++w) {
      batch[w] = batch_of(both[w], n, dim, chain_begin, iteration);
      batch[w].shared_metric = it >= iterations / 2; /* then row 0 of inv_metric for every chain */
      batch[w].n_leapfrog = 3 + it;
    }
    batch_cpu.shared_metric = batch[0].shared_metric;
    batch_cpu.n_leapfrog = batch[0].n_leapfrog;
    backend_cuda_builtin_trajectory(gpu, 1);
    GPU_TRY(gpu->hmc_transition(gpu, &target, &batch[0]));
    backend_cuda_builtin_trajectory(gpu, 0);
    GPU_TRY(gpu->hmc_transition(gpu, &target, &batch[1]));
    backend_cuda_builtin_trajectory(gpu, 1);
    GPU_TRY(cpu->hmc_transition(cpu, &target, &batch_cpu));
    const void *outputs[2][8] = {
        {fused.q, fused.grad, fused.logp, fused.accepted, fused.energy, fused.accept_prob, fused.moment_mean, fused.moment_m2},
        {steps.q, steps.grad, steps.logp, steps.accepted, steps.energy, steps.accept_prob, steps.moment_mean, steps.moment_m2}};
    for (int o = 0; o < 8; ++o) {
      GPU_TRY(gpu->download(gpu, a, outputs[0][o], sizes[o]));
      GPU_TRY(gpu->download(gpu, b, outputs[1][o], sizes[o]));
      if (memcmp(a, b, sizes[o]) != 0) {
        same = 0;
        printf("    %s it %d: output %d differs between the fused and step-by-step trajectories\n", name, it, o);
      }
      if (o == 3)
        for (int64_t c = 0; c < n; ++c) agree += a[c] == host.accepted[c], decisions++;
    }
  }
  GPU_EXPECT(same, "%s: the fused trajectory is not the step-by-step path's bits", name);
  const double agreement = (double)agree / (double)decisions;
  GPU_EXPECT(agreement >= 0.98, "%s: accept decisions as the CPU's for %.4f of chain-iterations", name, agreement);
  printf("  %s (%s), %lld chains, d=%lld: fused trajectory %s the step-by-step path; decisions as the CPU's %.4f\n",
         name, args, (long long)n, (long long)dim, same ? "bitwise equal to" : "DIFFERS from", agreement);
  arrays_free(cpu, &host);
  arrays_free(gpu, &fused);
  arrays_free(gpu, &steps);
  free(q0); free(grad0); free(logp0); free(inv_metric); free(step); free(a); free(b);
  target.destroy(target.self);
}

static void section_entries(void) {
  printf("Backend entries, GPU vs CPU:\n");
  test_device_entries();
}

static void section_fused(void) {
  printf("HMC, GPU vs CPU:\n");
  hmc_cuda_set_lanes(16);
  test_hmc_case("fused gaussian, 16 lanes per chain", 16384, 64, 0, 4);
  hmc_cuda_set_lanes(0);
  test_hmc_case("fused gaussian", 16384, 64, 0, 4);
  test_hmc_case("fused gaussian, odd dim", 4000, 37, 0, 3);
  test_hmc_case("fused gaussian, dim 130", 2000, 130, 0, 3);
}

static void section_generic(void) {
  test_hmc_case("generic, GPU gradient", 2000, 300, 0, 3);
  test_hmc_case("generic, host-staged gradient", 2000, 64, 1, 3);
}

static void section_trajectories(void) {
  test_builtin_trajectory("corr-gaussian", "dim=64,rho=0.5", 3001, 64, 4);
  test_builtin_trajectory("corr-gaussian", "dim=37,rho=-0.8,scale=2", 1000, 37, 4);
  test_builtin_trajectory("corr-gaussian", "dim=200,rho=0.9", 500, 200, 4);
  test_builtin_trajectory("banana", "dim=64", 2000, 64, 4);
  test_builtin_trajectory("banana", "dim=33,a=2,b=0.3", 1000, 33, 4);
  test_builtin_trajectory("mixture1d", "dim=5", 1000, 5, 4);
  test_builtin_trajectory("gaussian", "dim=24,mean=1:2:3:4:5:6:7:8:9:10:11:12:13:14:15:16:17:18:19:20:21:22:23:24", 1000, 24, 4);
  test_hmc_case("generic, the target's logp_grad_cuda", 2000, 64, 2, 3);
}

static void section_dense(void) {
  test_hmc_case_metric("dense metric, built-in gaussian (generic path)", 4000, 24, 0, 4, 1);
  test_hmc_case_metric("dense metric, odd dim, host-staged gradient", 2000, 37, 1, 3, 1);
  test_hmc_case_metric("dense metric, dim 100 (shared memory past 48 KiB)", 1000, 100, 0, 3, 1);
  test_hmc_case_metric("dense metric, dim 150 (past the tiled kernels)", 500, 150, 0, 3, 1);
  test_hmc_case_metric("dense metric, one factor a chain", 1000, 24, 0, 4, 2);
  test_hmc_case_metric("dense metric, one factor a chain, odd dim", 501, 37, 0, 3, 2);
}

static void section_dense_families(void) {
  test_dense_families(3001, 24);
  test_dense_families(1000, 37);
  test_dense_families(2000, 64);
  test_dense_families(700, 100);
}

static void section_covariance(void) {
  test_covariance_deferred(1001, 64);
  test_covariance_deferred(333, 13);
  test_covariance_deferred(101, 100);
}

int main(int argc, char **argv) {
  if (comm_cuda_device_count() == 0) {
    printf("no CUDA device: skipped\n");
    return GPU_TEST_SKIP;
  }
  GPU_TRY(backend_cpu_create(&cpu));
  GPU_TRY(backend_cuda_create(0, &gpu));
  static const gpu_test_section_t sections[] = {
      {"entries", section_entries},
      {"fused", section_fused},
      {"generic", section_generic},
      {"trajectories", section_trajectories},
      {"dense", section_dense},
      {"dense_families", section_dense_families},
      {"covariance", section_covariance},
  };
  const int status = gpu_test_run_sections(sections, (int)(sizeof sections / sizeof sections[0]), argc, argv);
  backend_destroy(gpu);
  backend_destroy(cpu);
  return status;
}
