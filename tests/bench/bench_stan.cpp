/* bench_stan.cpp: the cost of a Stan model's gradient through dsampler's plugin (target ABI
 * version 2, as the CPU backend calls it) against Stan Math called directly, in one process.
 * bench_stan.sh compiles it with the toolchain's own compile command, with the model's C++
 * (stanc's output, which defines stan_model and new_model) included first, so the direct path
 * is stan::model::log_prob_grad<true, true> on the concrete model type, as Stan's samplers call it.
 *
 * Usage: bench_stan MODEL.so DATA.json [rounds]
 * Prints ns per gradient, median of the rounds, for: direct; the plugin's logp_grad_f64 one row
 * per call; 64 rows per call (the CPU backend's block of chains); the float32 entry, 64 rows. */
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <vector>

#include <stan/io/json/json_data.hpp>
#include <stan/model/log_prob_grad.hpp>

#include "dsampler_target.h"

namespace {

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void report(void *, const char *message) { std::fprintf(stderr, "plugin: %s\n", message); }

}  // namespace

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s MODEL.so DATA.json [rounds]\n", argv[0]);
    return 2;
  }
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 7;
  std::ifstream in(argv[2]);
  stan::json::json_data data(in);
  stan_model model(data, 0, nullptr);
  const size_t dim = model.num_params_r();

  void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    std::fprintf(stderr, "%s\n", dlerror());
    return 1;
  }
  auto create = reinterpret_cast<dsampler_target_create_v2_fn>(dlsym(library, "dsampler_target_create_v2"));
  /* comm: a value-initialised handle (the shim never uses it; MPI is not linked here). */
  dsampler_target_host host{DSAMPLER_TARGET_ABI_VERSION, "", argv[2], 0, 0, MPI_Comm{}, report, nullptr};
  dsampler_target target{};
  if (!create || create(&host, &target) != 0 || target.dim != static_cast<int64_t>(dim)) return 1;

  /* Points where chains are: uniform in (-2, 2) on the unconstrained scale, as they start. */
  const int points = 64;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> uniform(-2.0, 2.0);
  std::vector<double> x(points * dim), grad(points * dim), logp(points), grad_direct(dim);
  for (double &value : x) value = uniform(rng);
  std::vector<float> x32(x.begin(), x.end()), grad32(points * dim), logp32(points);
  std::vector<int> params_i;

  /* Each measure: enough repeats of all points to last ~0.2 s, ns per gradient. */
  const long repeats = std::max(1L, static_cast<long>(2e8 / (points * 2000.0 * (1 + dim / 10.0))));
  std::vector<double> direct, single, block, block32;
  double checksum = 0, mismatch = 0, scale = 0;
  for (int round = 0; round < rounds; ++round) {
    double start = now_ns();
    for (long r = 0; r < repeats; ++r)
      for (int p = 0; p < points; ++p) {
        std::vector<double> row(x.begin() + p * dim, x.begin() + (p + 1) * dim);
        checksum += stan::model::log_prob_grad<true, true>(model, row, params_i, grad_direct);
      }
    direct.push_back((now_ns() - start) / (repeats * points));
    start = now_ns();
    for (long r = 0; r < repeats; ++r)
      for (int p = 0; p < points; ++p)
        target.logp_grad_f64(target.self, x.data() + p * dim, 1, logp.data() + p, grad.data() + p * dim);
    single.push_back((now_ns() - start) / (repeats * points));
    start = now_ns();
    for (long r = 0; r < repeats; ++r) target.logp_grad_f64(target.self, x.data(), points, logp.data(), grad.data());
    block.push_back((now_ns() - start) / (repeats * points));
    start = now_ns();
    for (long r = 0; r < repeats; ++r) target.logp_grad(target.self, x32.data(), points, logp32.data(), grad32.data());
    block32.push_back((now_ns() - start) / (repeats * points));
  }
  /* The same numbers either way (the same model code, the same autodiff). */
  for (int p = 0; p < points; ++p) {
    std::vector<double> row(x.begin() + p * dim, x.begin() + (p + 1) * dim);
    const double value = stan::model::log_prob_grad<true, true>(model, row, params_i, grad_direct);
    mismatch = std::max(mismatch, std::abs(value - logp[p]));
    scale = std::max(scale, std::abs(value));
    for (size_t k = 0; k < dim; ++k) mismatch = std::max(mismatch, std::abs(grad_direct[k] - grad[p * dim + k]));
  }
  std::printf("dim %zu, %d points x %ld repeats, median of %d rounds (checksum %.6g, largest difference %.3g)\n",
              dim, points, repeats, rounds, checksum, mismatch);
  std::printf("%-44s %10.1f ns\n", "Stan Math direct (log_prob_grad<true, true>)", median(direct));
  std::printf("%-44s %10.1f ns  (%.3fx)\n", "plugin logp_grad_f64, 1 row per call", median(single),
              median(single) / median(direct));
  std::printf("%-44s %10.1f ns  (%.3fx)\n", "plugin logp_grad_f64, 64 rows per call", median(block),
              median(block) / median(direct));
  std::printf("%-44s %10.1f ns  (%.3fx)\n", "plugin logp_grad (float32), 64 rows per call", median(block32),
              median(block32) / median(direct));
  target.destroy(target.self);
  /* Same code path up to the container of the parameters: equal to rounding. */
  return mismatch <= 1e-12 * (1 + scale) ? 0 : 1;
}
