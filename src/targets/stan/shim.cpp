/* shim.cpp: a Stan model as a dsampler target of ABI version 2 (src/shared/dsampler_target.h). It is
 * compiled once per toolchain (stan_build.c) and linked with each model's C++, which stanc
 * writes and which defines new_model(); the shim sees the model only through Stan's
 * stan::model::model_base, so one object serves every model.
 *
 * What it gives dsampler, as Stan's own samplers compute it:
 *   - log p and its gradient on the unconstrained scale, Jacobian included, constants of `~`
 *     statements dropped (stan::model::log_prob_grad<true, true>), by reverse-mode autodiff;
 *     a std::domain_error (a failed check, reject()) gives log p = -inf, as Stan rejects such a
 *     proposal; any other exception stops the run with its message;
 *   - the output variables: constrained parameters, transformed parameters and generated
 *     quantities (write_array), each in row-major order of its declared shape;
 *   - starts: stan::services::util::initialize (uniform in (-R, R) on the unconstrained scale,
 *     up to 100 tries for a finite log p and gradient; values from init=FILE.json first);
 *   - the data from --data, Stan's JSON format (as CmdStan reads it).
 * Threads: the CPU backend calls every entry from several OpenMP threads at once. Stan's
 * autodiff tape is thread-local under STAN_THREADS, but a thread that Stan did not start has
 * none until it makes one: each entry first touches this thread's ChainableStack. */
#include <stan/io/empty_var_context.hpp>
#include <stan/io/json/json_data.hpp>
#include <stan/model/model_header.hpp>
#include <stan/services/util/create_rng.hpp>
#include <stan/services/util/initialize.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dsampler_target.h"

/* Defined by the model's C++ (stanc's boilerplate). */
stan::model::model_base &new_model(stan::io::var_context &data_context, unsigned int seed, std::ostream *msg_stream);

namespace {

struct stan_target {
  stan::model::model_base *model = nullptr;
  std::string name;
  int64_t dim = 0, constrained_dim = 0;
  std::vector<std::string> var_names;
  std::vector<dsampler_target_var> vars;
  std::vector<int64_t> position; /* Stan's flat output index -> place in the row dsampler gets */
  std::unique_ptr<stan::io::var_context> init_values;
  double init_radius = 2.0;
  void (*report)(void *, const char *) = nullptr;
  void *context = nullptr;

  ~stan_target() { delete model; }
};

void report(const stan_target &target, const std::string &message) {
  if (target.report) target.report(target.context, message.c_str());
}

/* This thread's autodiff tape (see the file's comment). */
void touch_tape() {
  static thread_local stan::math::ChainableStack tape;
  (void)tape;
}

/* log p and gradient of one row, in double. */
int logp_grad_row(const stan_target &target, const double *x, double *logp, double *grad) {
  touch_tape();
  const int64_t dim = target.dim;
  try {
    Eigen::Matrix<stan::math::var, -1, 1> theta(dim);
    for (int64_t k = 0; k < dim; ++k) theta(k) = x[k];
    stan::math::var lp = target.model->log_prob_propto_jacobian(theta, nullptr);
    lp.grad();
    *logp = lp.val();
    for (int64_t k = 0; k < dim; ++k) grad[k] = theta(k).adj();
    stan::math::recover_memory();
    return 0;
  } catch (const std::domain_error &) {
    stan::math::recover_memory();
    *logp = -std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < dim; ++k) grad[k] = 0.0;
    return 0;
  } catch (const std::exception &error) {
    stan::math::recover_memory();
    report(target, std::string("the model's log density: ") + error.what());
    return 1;
  }
}

int logp_grad_f64(void *self, const double *x, int64_t n, double *logp, double *grad) {
  const stan_target &target = *static_cast<const stan_target *>(self);
  for (int64_t i = 0; i < n; ++i)
    if (logp_grad_row(target, x + i * target.dim, logp + i, grad + i * target.dim) != 0) return 1;
  return 0;
}

int logp_grad_f32(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const stan_target &target = *static_cast<const stan_target *>(self);
  const int64_t dim = target.dim;
  std::vector<double> row(dim), row_grad(dim);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < dim; ++k) row[k] = x[i * dim + k];
    double value = 0.0;
    if (logp_grad_row(target, row.data(), &value, row_grad.data()) != 0) return 1;
    logp[i] = static_cast<float>(value);
    for (int64_t k = 0; k < dim; ++k) grad[i * dim + k] = static_cast<float>(row_grad[k]);
  }
  return 0;
}

int constrain(void *self, const double *x, int64_t n, const uint64_t *keys, double *out) {
  const stan_target &target = *static_cast<const stan_target *>(self);
  touch_tape();
  const int64_t dim = target.dim, width = target.constrained_dim;
  Eigen::VectorXd params(dim), values;
  for (int64_t i = 0; i < n; ++i) {
    /* The key's 64 bits seed Stan's RNG (mixmax takes four 32-bit words); the first word keeps
     * these streams apart from the starts'. */
    stan::rng_t rng(0u, static_cast<uint32_t>(keys[i] >> 32), static_cast<uint32_t>(keys[i]), 1u);
    for (int64_t k = 0; k < dim; ++k) params(k) = x[i * dim + k];
    values.resize(0);
    try {
      target.model->write_array(rng, params, values, true, true, nullptr);
    } catch (const std::domain_error &) {
      /* As Stan's writer: what was computed stays, the rest is NaN. */
    } catch (const std::exception &error) {
      report(target, std::string("the model's generated quantities: ") + error.what());
      return 1;
    }
    double *row = out + i * width;
    for (int64_t j = 0; j < static_cast<int64_t>(target.position.size()); ++j)
      row[target.position[j]] = j < values.size() ? values(j) : std::numeric_limits<double>::quiet_NaN();
  }
  return 0;
}

/* Stan's messages during initialisation, kept for the error when no start is found. */
struct collecting_logger : public stan::callbacks::logger {
  std::string text;
  void add(const std::string &message) {
    if (message.empty()) return;
    if (text.size() > 4096) text.erase(0, text.size() - 2048);
    text += (text.empty() ? "" : " ") + message;
  }
  void info(const std::string &) override {}
  void info(const std::stringstream &) override {}
  void warn(const std::string &message) override { add(message); }
  void warn(const std::stringstream &message) override { add(message.str()); }
  void error(const std::string &message) override { add(message); }
  void error(const std::stringstream &message) override { add(message.str()); }
};

int initial_point(void *self, uint64_t seed, int64_t item, double *x) {
  const stan_target &target = *static_cast<const stan_target *>(self);
  touch_tape();
  stan::rng_t rng(2u, static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(static_cast<uint64_t>(item) >> 32),
                  static_cast<uint32_t>(seed), static_cast<uint32_t>(item));
  collecting_logger logger;
  stan::callbacks::writer init_writer;
  stan::io::empty_var_context empty;
  const stan::io::var_context &init = target.init_values ? *target.init_values : empty;
  /* Stan's initialize rejects a start whose log density throws a domain error and draws another,
   * but gives up at a start whose gradient throws one (an ODE whose sensitivities fail where its
   * values did not: lotka_volterra at seed 2, chain 43). Such a start is rejected here too, and the
   * draws go on from the same generator, so a chain's start is still a function of seed and chain
   * alone, and a start Stan's initialize accepts at once is unchanged. Its own "Initialization
   * failed." (every attempt rejected) and other errors end the search. */
  constexpr int max_calls = 100;
  for (int call = 0;; ++call) {
    try {
      std::vector<double> start = stan::services::util::initialize(*target.model, init, rng, target.init_radius,
                                                                   false, logger, init_writer);
      for (int64_t k = 0; k < target.dim; ++k) x[k] = start[k];
      return 0;
    } catch (const std::exception &error) {
      const bool rejected = dynamic_cast<const std::domain_error *>(&error) != nullptr &&
                            std::string(error.what()) != "Initialization failed.";
      if (rejected && call + 1 < max_calls && target.init_radius > 0) continue;
      report(target, "no start for chain " + std::to_string(item) + ": " + error.what() +
                         (logger.text.empty() ? "" : " (" + logger.text + ")"));
      return 1;
    }
  }
}

void destroy(void *self) { delete static_cast<stan_target *>(self); }

/* "init=FILE.json,init_radius=R" (each optional). */
bool parse_args(stan_target &target, const char *args, std::string &init_path, std::string &problem) {
  std::string text = args ? args : "";
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    begin = end + 1;
    const size_t equals = item.find('=');
    const std::string key = item.substr(0, equals), value = equals == std::string::npos ? "" : item.substr(equals + 1);
    if (key == "init" && !value.empty()) {
      init_path = value;
    } else if (key == "init_radius") {
      char *stop = nullptr;
      const double radius = std::strtod(value.c_str(), &stop);
      if (value.empty() || *stop != '\0' || !(radius >= 0) || !std::isfinite(radius)) {
        problem = "--target-args: init_radius must be a number >= 0, got '" + value + "'";
        return false;
      }
      target.init_radius = radius;
    } else {
      problem = "--target-args: a Stan model takes init=FILE.json and init_radius=R, got '" + item + "'";
      return false;
    }
  }
  return true;
}

/* A JSON file as Stan's var_context; what went wrong in problem. */
std::unique_ptr<stan::io::var_context> read_json(const std::string &what, const std::string &path,
                                                std::string &problem) {
  std::ifstream in(path);
  if (!in) {
    problem = what + " " + path + ": cannot open: " + std::strerror(errno);
    return nullptr;
  }
  try {
    return std::make_unique<stan::json::json_data>(in);
  } catch (const std::exception &error) {
    problem = what + " " + path + ": not Stan's JSON data format: " + error.what();
    return nullptr;
  }
}

/* The output variables and where Stan's flat values go. Stan writes each variable in column-
 * major order (first index fastest) and names each value name.i.j (1-based; complex values end
 * in .real or .imag, an axis of 2); the names give every value's place, so the row dsampler
 * gets holds each variable in row-major order, as its output dataset is laid out. */
bool describe_outputs(stan_target &target, std::string &problem) {
  const stan::model::model_base &model = *target.model;
  std::vector<std::string> names, parameters, transformed, flat;
  std::vector<std::vector<size_t>> dims;
  model.get_param_names(names, true, true);
  model.get_param_names(parameters, false, false);
  model.get_param_names(transformed, true, false);
  model.get_dims(dims, true, true);
  model.constrained_param_names(flat, true, true);
  if (dims.size() != names.size()) {
    problem = "the model reports " + std::to_string(names.size()) + " variables but " +
              std::to_string(dims.size()) + " shapes";
    return false;
  }
  target.var_names = names;
  target.position.assign(flat.size(), 0);
  size_t next = 0;
  int64_t offset = 0;
  for (size_t v = 0; v < names.size(); ++v) {
    const std::vector<size_t> &shape = dims[v];
    if (shape.size() > DSAMPLER_TARGET_MAX_RANK) {
      problem = "variable " + names[v] + " has " + std::to_string(shape.size()) + " axes (at most " +
                std::to_string(DSAMPLER_TARGET_MAX_RANK) + ")";
      return false;
    }
    int64_t size = 1;
    for (size_t extent : shape) size *= static_cast<int64_t>(extent);
    for (int64_t j = 0; j < size; ++j, ++next) {
      if (next >= flat.size()) {
        problem = "variable " + names[v] + ": the model names fewer values than its shapes hold";
        return false;
      }
      const std::string &value_name = flat[next];
      const std::string prefix = names[v] + ".";
      std::vector<int64_t> index;
      if (!(value_name == names[v] && shape.empty())) {
        if (value_name.compare(0, prefix.size(), prefix) != 0 || value_name.find(':') != std::string::npos) {
          problem = "variable " + names[v] + ": value '" + value_name +
                    "' is not of the form name.i.j (tuples are not supported)";
          return false;
        }
        std::stringstream parts(value_name.substr(prefix.size()));
        std::string part;
        while (std::getline(parts, part, '.'))
          index.push_back(part == "real" ? 1 : part == "imag" ? 2 : std::atoll(part.c_str()));
      }
      if (index.size() != shape.size()) {
        problem = "variable " + names[v] + ": value '" + value_name + "' does not match its shape";
        return false;
      }
      int64_t place = 0;
      for (size_t axis = 0; axis < shape.size(); ++axis) {
        if (index[axis] < 1 || index[axis] > static_cast<int64_t>(shape[axis])) {
          problem = "variable " + names[v] + ": value '" + value_name + "' lies outside its shape";
          return false;
        }
        place = place * static_cast<int64_t>(shape[axis]) + (index[axis] - 1);
      }
      target.position[next] = offset + place;
    }
    /* A variable of no values (vector[0]) has no dataset. */
    if (size > 0) {
      dsampler_target_var var{};
      var.kind = v < parameters.size() ? DSAMPLER_VAR_PARAMETER
                                       : v < transformed.size() ? DSAMPLER_VAR_TRANSFORMED : DSAMPLER_VAR_GENERATED;
      var.rank = static_cast<int>(shape.size());
      for (size_t axis = 0; axis < shape.size(); ++axis) var.shape[axis] = static_cast<int64_t>(shape[axis]);
      target.vars.push_back(var);
    }
    offset += size;
  }
  if (next != flat.size()) {
    problem = "the model names more values than its shapes hold";
    return false;
  }
  /* The names point into var_names, which no longer changes. */
  size_t kept = 0;
  for (size_t v = 0; v < names.size(); ++v) {
    int64_t size = 1;
    for (size_t extent : dims[v]) size *= static_cast<int64_t>(extent);
    if (size > 0) target.vars[kept++].name = target.var_names[v].c_str();
  }
  target.constrained_dim = offset;
  return true;
}

}  // namespace

/* The library's one exported symbol: everything else is compiled hidden (stan_build.c), so that
 * calls inside the library bind directly instead of through the PLT. */
extern "C" __attribute__((visibility("default"))) int dsampler_target_create_v2(const dsampler_target_host *host,
                                                                                 dsampler_target *out) {
  std::unique_ptr<stan_target> target;
  try {
    target = std::make_unique<stan_target>();
    target->report = host->report_error;
    target->context = host->context;
    std::string problem, init_path;
    if (!parse_args(*target, host->args, init_path, problem)) {
      report(*target, problem);
      return 1;
    }
    std::unique_ptr<stan::io::var_context> data;
    if (host->data_path && host->data_path[0]) {
      data = read_json("--data", host->data_path, problem);
    } else {
      data = std::make_unique<stan::io::empty_var_context>();
    }
    if (!data) {
      report(*target, problem);
      return 1;
    }
    if (!init_path.empty()) {
      target->init_values = read_json("--target-args init=", init_path, problem);
      if (!target->init_values) {
        report(*target, problem);
        return 1;
      }
    }
    touch_tape();
    std::stringstream messages;
    try {
      /* The seed of transformed data's random numbers: the run's, the same on every rank. */
      const unsigned int seed = static_cast<unsigned int>(host->seed ^ (host->seed >> 32));
      target->model = &new_model(*data, seed, &messages);
    } catch (const std::exception &error) {
      std::string where = host->data_path && host->data_path[0] ? std::string("--data ") + host->data_path
                                                                : std::string("the model's data (no --data given)");
      report(*target, where + ": " + error.what());
      return 1;
    }
    if (!describe_outputs(*target, problem)) {
      report(*target, problem);
      return 1;
    }
    target->name = target->model->model_name();
    target->dim = static_cast<int64_t>(target->model->num_params_r());
    if (target->dim == 0) {
      report(*target, "the model has no parameters to sample");
      return 1;
    }
  } catch (const std::exception &error) {
    if (host->report_error) host->report_error(host->context, error.what());
    return 1;
  }
  std::memset(out, 0, sizeof *out);
  stan_target *raw = target.release();
  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = raw->name.c_str();
  out->var_name = "x";
  out->dim = raw->dim;
  out->self = raw;
  out->logp_grad = logp_grad_f32;
  out->destroy = destroy;
  out->logp_grad_f64 = logp_grad_f64;
  out->n_vars = static_cast<int>(raw->vars.size());
  out->vars = raw->vars.data();
  out->constrained_dim = raw->constrained_dim;
  out->constrain = constrain;
  out->initial_point = initial_point;
  return 0;
}
