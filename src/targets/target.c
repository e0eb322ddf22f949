/* target.c: opens the run's target, built-in, plugin or Stan model, and checks what it reports;
 * the row-parallel calls of a version 2 target's outputs and starts. */
#include "target.h"

#include <ctype.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "jax_target.h"
#include "rng.h"
#include "shared_object.h"
#include "stan_build.h"
#include "status.h"
#include "target_args.h"
#include "target_deadline.h"
#include "targets_builtin.h"

/* Versions this dsampler loads: 1 (no names, no starts) and 2; both share the version 1 fields. */
#define TARGET_ABI_OLDEST 1

void target_escape_message(const char *message, char *out, size_t size) {
  static const char ellipsis[] = " [...]";
  if (size == 0) return;
  size_t used = 0;
  const unsigned char *c = (const unsigned char *)message;
  for (; *c && size > sizeof ellipsis + 5; ++c) {
    char piece[5];
    if (*c == '\n') snprintf(piece, sizeof piece, "\\n");
    else if (*c == '\r') snprintf(piece, sizeof piece, "\\r");
    else if (*c == '\t') snprintf(piece, sizeof piece, "\\t");
    else if (*c < 0x20 || *c == 0x7f) snprintf(piece, sizeof piece, "\\x%02x", *c);
    else piece[0] = (char)*c, piece[1] = '\0';
    const size_t length = strlen(piece);
    if (used + length + sizeof ellipsis > size) break;
    memcpy(out + used, piece, length);
    used += length;
  }
  out[used] = '\0';
  if (*c && size > sizeof ellipsis + 5) memcpy(out + used, ellipsis, sizeof ellipsis);
}

/* Where a version 2 target's report_error lands: the run's error, naming the target. The first
 * recorded error wins (status.c), so the target's own words come before dsampler's "failed
 * (returned n)". Called from any thread. */
static void target_report_error(void *context, const char *message) {
  const target_handle_t *handle = context;
  char text[TARGET_MESSAGE_MAX];
  target_escape_message(message && message[0] ? message : "failed (no message)", text, sizeof text);
  ds_fail(DS_ERR_TARGET, "--target %s: %s", handle->spec, text);
}

/* A name an output variable can have: a dataset name beside the coordinates chain and draw,
 * usable as <name>_dim_k, printable in a summary. */
static int valid_var_name(const char *name) {
  if (!name || !name[0] || strlen(name) > 200) return 0;
  for (const char *c = name; *c; ++c)
    if (!(isalnum((unsigned char)*c) || *c == '_' || *c == '.')) return 0;
  return strcmp(name, "chain") != 0 && strcmp(name, "draw") != 0;
}

/* What a version 2 target adds, checked before anything is sized from it. */
static int check_outputs(const char *spec, const dsampler_target *t) {
  if (t->n_vars < 0 || t->n_vars > TARGET_MAX_OUTPUT_VARS)
    return ds_fail(DS_ERR_INPUT, "--target %s: reports %d output variables (at most %d)", spec, t->n_vars,
                   TARGET_MAX_OUTPUT_VARS);
  if (t->n_vars == 0) return DS_OK;
  if (!t->vars || !t->constrain)
    return ds_fail(DS_ERR_INPUT, "--target %s: reports %d output variables but no %s", spec, t->n_vars,
                   t->vars ? "constrain entry" : "list of them");
  int64_t total = 0;
  for (int v = 0; v < t->n_vars; ++v) {
    const dsampler_target_var *var = &t->vars[v];
    if (!valid_var_name(var->name))
      return ds_fail(DS_ERR_INPUT, "--target %s: output variable %d has the name '%s' (expected letters, digits, _ "
                     "or ., and not chain or draw)", spec, v, var->name ? var->name : "(null)");
    for (int w = 0; w < v; ++w)
      if (strcmp(t->vars[w].name, var->name) == 0)
        return ds_fail(DS_ERR_INPUT, "--target %s: two output variables are named '%s'", spec, var->name);
    /* Each variable's axes are datasets named <name>_dim_<k> beside it: no variable may take
     * one of those names. */
    for (int w = 0; w < t->n_vars; ++w) {
      const size_t length = strlen(t->vars[w].name);
      if (w == v || strncmp(var->name, t->vars[w].name, length) != 0 || strncmp(var->name + length, "_dim_", 5) != 0)
        continue;
      const char *digits = var->name + length + 5;
      if (*digits && strspn(digits, "0123456789") == strlen(digits))
        return ds_fail(DS_ERR_INPUT, "--target %s: output variable '%s' has the name of an axis of variable '%s' "
                       "(%s_dim_<k> names its axes in the output): rename it", spec, var->name, t->vars[w].name,
                       t->vars[w].name);
    }
    if (var->rank < 0 || var->rank > DSAMPLER_TARGET_MAX_RANK)
      return ds_fail(DS_ERR_INPUT, "--target %s: output variable %s has %d axes (at most %d)", spec, var->name,
                     var->rank, DSAMPLER_TARGET_MAX_RANK);
    int64_t size = 1;
    for (int axis = 0; axis < var->rank; ++axis) {
      if (var->shape[axis] < 0 || __builtin_mul_overflow(size, var->shape[axis], &size))
        return ds_fail(DS_ERR_INPUT, "--target %s: output variable %s has a bad shape (axis %d: %lld)", spec,
                       var->name, axis, (long long)var->shape[axis]);
      /* An empty variable has no values to write: its chunks would be empty, which HDF5 refuses
       * (and the chunk sizes would divide by zero). */
      if (var->shape[axis] == 0)
        return ds_fail(DS_ERR_INPUT, "--target %s: output variable %s has an axis of length 0 (axis %d); every "
                       "output variable must hold at least one value (leave empty ones out of vars)", spec, var->name,
                       axis);
    }
    if (__builtin_add_overflow(total, size, &total) || total > ((int64_t)1 << 40))
      return ds_fail(DS_ERR_INPUT, "--target %s: the output variables are too large", spec);
  }
  if (total != t->constrained_dim)
    return ds_fail(DS_ERR_INPUT, "--target %s: its output variables hold %lld values but it reports constrained_dim "
                   "%lld", spec, (long long)total, (long long)t->constrained_dim);
  return DS_OK;
}

/* What a target reports (its ABI version is checked where a plugin is loaded). */
static int check_reported(const char *spec, const dsampler_target *t, int64_t dim) {
  if (!t->logp_grad)
    return ds_fail(DS_ERR_INPUT, "--target %s: provides no logp_grad (the host entry is required)", spec);
  if (t->dim <= 0)
    return ds_fail(DS_ERR_INPUT, "--target %s: dimension %lld; give a positive --dim", spec, (long long)t->dim);
  if (dim > 0 && t->dim != dim)
    return ds_fail(DS_ERR_INPUT, "--target %s: has dimension %lld but --dim is %lld", spec,
                   (long long)t->dim, (long long)dim);
  if (t->abi_version >= 2) DS_TRY(check_outputs(spec, t));
  return DS_OK;
}

/* Stan's JSON reader recurses once per level and its time grows with the square of the depth:
 * a file nested deeper than any Stan data can be (arrays of a few dimensions, in objects of one
 * level) is refused after one linear pass, before the reader meets it. */
#define TARGET_JSON_DEPTH_MAX 32

static int check_json_nesting(const char *what, const char *path) {
  FILE *file = fopen(path, "rb");
  if (!file) return DS_OK; /* the reader says why */
  int depth = 0, deepest = 0, in_string = 0, escaped = 0, c;
  long long at = 0;
  while ((c = getc(file)) != EOF && deepest <= TARGET_JSON_DEPTH_MAX) {
    ++at;
    if (in_string) {
      if (escaped) escaped = 0;
      else if (c == '\\') escaped = 1;
      else if (c == '"') in_string = 0;
    } else if (c == '"') {
      in_string = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  fclose(file);
  if (deepest > TARGET_JSON_DEPTH_MAX)
    return ds_fail(DS_ERR_INPUT, "%s %s: JSON nested more than %d levels deep (at byte %lld); Stan data are arrays of "
                   "a few dimensions in one object", what, path, TARGET_JSON_DEPTH_MAX, at);
  return DS_OK;
}

/* dlopen's handle of a plugin library, or DS_ERR_INPUT naming it. */
static int load_library(const char *spec, const char *path, target_handle_t *out) {
  char what[CONFIG_PATH_MAX + 32];
  snprintf(what, sizeof what, "--target %.*s", (int)(strchr(spec, ':') ? strchr(spec, ':') - spec + 1 : 0), spec);
  DS_TRY(shared_object_check(target_is_stan(spec) ? "--target stan: the compiled library" : what, path));
  out->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (out->library) return DS_OK;
  const char *why = dlerror();
  /* Stan models use initial-exec thread-locals (stan_build.c), which need a little of the
   * process's spare static TLS; a process that has spent it can compile without. */
  const int tls = target_is_stan(spec) && why && strstr(why, "static TLS");
  return ds_fail(DS_ERR_INPUT, "--target %s: cannot load the plugin: %s%s", spec, why ? why : "unknown error",
                 tls ? " (compile the model with DSAMPLER_STAN_CXXFLAGS=-ftls-model=global-dynamic)" : "");
}

/* The calls a deadline watches, named for its message: "plugin libfoo.so: logp_grad" or
 * "Stan model eight.stan: logp_grad_f64". */
static void name_calls(const char *spec, target_handle_t *handle) {
  static const char *const entries[TARGET_CALL_COUNT] = {
      [TARGET_CALL_CREATE] = "create", [TARGET_CALL_LOGP_GRAD] = "logp_grad",
      [TARGET_CALL_LOGP_GRAD_CUDA] = "logp_grad_cuda", [TARGET_CALL_LOGP_GRAD_F64] = "logp_grad_f64",
      [TARGET_CALL_CONSTRAIN] = "constrain", [TARGET_CALL_INITIAL_POINT] = "initial_point",
      [TARGET_CALL_DESTROY] = "destroy"};
  const char *path = strchr(spec, ':') ? strchr(spec, ':') + 1 : spec;
  const char *file = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  const char *kind = target_is_stan(spec) ? "Stan model" : "plugin";
  for (int c = 0; c < TARGET_CALL_COUNT; ++c)
    snprintf(handle->calls[c], sizeof handle->calls[c], "%s %.240s: %s", kind, file, entries[c]);
}

/* The plugin's entries, each between target_deadline_begin and _end; self is the handle. */
static int watched_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  const target_handle_t *handle = self;
  const int token = target_deadline_begin(handle->calls[TARGET_CALL_LOGP_GRAD]);
  const int rc = handle->plugin.logp_grad(handle->plugin.self, x, n, logp, grad);
  target_deadline_end(token);
  return rc;
}

static int watched_logp_grad_cuda(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream) {
  const target_handle_t *handle = self;
  const int token = target_deadline_begin(handle->calls[TARGET_CALL_LOGP_GRAD_CUDA]);
  const int rc = handle->plugin.logp_grad_cuda(handle->plugin.self, x, n, logp, grad, stream);
  target_deadline_end(token);
  return rc;
}

static int watched_logp_grad_f64(void *self, const double *x, int64_t n, double *logp, double *grad) {
  const target_handle_t *handle = self;
  const int token = target_deadline_begin(handle->calls[TARGET_CALL_LOGP_GRAD_F64]);
  const int rc = handle->plugin.logp_grad_f64(handle->plugin.self, x, n, logp, grad);
  target_deadline_end(token);
  return rc;
}

static int watched_constrain(void *self, const double *x, int64_t n, const uint64_t *keys, double *out) {
  const target_handle_t *handle = self;
  const int token = target_deadline_begin(handle->calls[TARGET_CALL_CONSTRAIN]);
  const int rc = handle->plugin.constrain(handle->plugin.self, x, n, keys, out);
  target_deadline_end(token);
  return rc;
}

static int watched_initial_point(void *self, uint64_t seed, int64_t item, double *x) {
  const target_handle_t *handle = self;
  const int token = target_deadline_begin(handle->calls[TARGET_CALL_INITIAL_POINT]);
  const int rc = handle->plugin.initial_point(handle->plugin.self, seed, item, x);
  target_deadline_end(token);
  return rc;
}

/* target becomes the plugin's entries behind deadlines; what was absent stays absent (the
 * run tells what a target offers by which entries are NULL). */
static void watch_plugin(target_handle_t *handle) {
  handle->plugin = handle->target;
  dsampler_target *t = &handle->target;
  t->self = handle;
  t->logp_grad = watched_logp_grad;
  if (t->logp_grad_cuda) t->logp_grad_cuda = watched_logp_grad_cuda;
  if (t->abi_version >= 2) {
    if (t->logp_grad_f64) t->logp_grad_f64 = watched_logp_grad_f64;
    if (t->constrain) t->constrain = watched_constrain;
    if (t->initial_point) t->initial_point = watched_initial_point;
  }
  t->destroy = NULL; /* target_close destroys the plugin's own */
  handle->watched = 1;
}

/* Makes the target of a loaded plugin: by its version 2 entry when it has one, else by the
 * version 1 entry with args_v1 (dim= and data= in front). */
static int create_from_plugin(const char *spec, const char *args, const char *args_v1, const char *data_path,
                              int64_t dim, uint64_t seed, MPI_Comm comm, target_handle_t *out) {
  dsampler_target_create_v2_fn create_v2;
  *(void **)&create_v2 = dlsym(out->library, "dsampler_target_create_v2");
  if (create_v2) {
    const dsampler_target_host host = {DSAMPLER_TARGET_ABI_VERSION, args, data_path, dim, seed, comm,
                                       target_report_error, out};
    const int token = target_deadline_begin(out->calls[TARGET_CALL_CREATE]);
    int rc = create_v2(&host, &out->target);
    target_deadline_end(token);
    if (rc != 0) {
      memset(&out->target, 0, sizeof out->target);
      return ds_fail(DS_ERR_INPUT, "--target %s: dsampler_target_create_v2 failed (returned %d)", spec, rc);
    }
    return DS_OK;
  }
  dsampler_target_create_fn create;
  *(void **)&create = dlsym(out->library, "dsampler_target_create");
  if (!create) {
    char why[512];
    const char *error = dlerror(); /* valid only until the dlclose in target_close */
    snprintf(why, sizeof why, "%s", error ? error : "symbol not found");
    return ds_fail(DS_ERR_INPUT,
                   "--target %s: the plugin exports neither dsampler_target_create_v2 nor dsampler_target_create "
                   "(%s); define one with C linkage as in src/shared/dsampler_target.h",
                   spec, why);
  }
  /* A version 1 plugin takes its dataset as data=FILE among its arguments. */
  if (strchr(data_path, ','))
    return ds_fail(DS_ERR_INPUT, "--data %s: this plugin (target ABI version 1) takes the file name among its "
                   "comma-separated arguments, so it may not contain a comma", data_path);
  const int token = target_deadline_begin(out->calls[TARGET_CALL_CREATE]);
  int rc = create(args_v1, comm, &out->target);
  target_deadline_end(token);
  if (rc != 0) {
    /* A plugin that fails cleans up after itself: nothing it returned is trusted. */
    memset(&out->target, 0, sizeof out->target);
    return ds_fail(DS_ERR_INPUT, "--target %s: dsampler_target_create(\"%s\") failed (returned %d)", spec, args_v1, rc);
  }
  return DS_OK;
}

int target_is_stan(const char *spec) { return strncmp(spec, "stan:", 5) == 0; }

int target_is_jax(const char *spec) { return strncmp(spec, "jax:", 4) == 0; }

int target_open(const char *spec, const char *args, const char *data_path, int64_t dim, uint64_t seed, int device,
                MPI_Comm comm, target_handle_t *out) {
  memset(out, 0, sizeof *out);
  snprintf(out->spec, sizeof out->spec, "%s", spec);
  if (!data_path) data_path = "";
  DS_TRY(target_args_check_duplicates(args));
  char data_text[8];
  if (data_path[0] && target_args_get(args, "data", data_text, sizeof data_text))
    return ds_fail(DS_ERR_INPUT, "--data and --target-args data=...: give the dataset once");
  size_t full_size = strlen(args) + strlen(data_path) + 64;
  char *full_args = malloc(full_size);
  if (!full_args) return DS_FAIL_ALLOC("target arguments", full_size);
  /* "dim=D,data=FILE,<args>", each part only when given: the arguments of a built-in or a
   * version 1 plugin. */
  int used = 0;
  full_args[0] = '\0';
  if (dim > 0) used += snprintf(full_args + used, full_size - (size_t)used, "dim=%lld", (long long)dim);
  if (data_path[0])
    used += snprintf(full_args + used, full_size - (size_t)used, "%sdata=%s", used ? "," : "", data_path);
  if (args[0]) snprintf(full_args + used, full_size - (size_t)used, "%s%s", used ? "," : "", args);

  int status;
  if (strncmp(spec, "plugin:", 7) == 0 || target_is_stan(spec)) {
    char library[CONFIG_PATH_MAX];
    if (target_is_stan(spec)) {
      char init[CONFIG_PATH_MAX] = "";
      status = data_path[0] ? check_json_nesting("--data", data_path) : DS_OK;
      if (status == DS_OK && target_args_get(args, "init", init, sizeof init) && init[0])
        status = check_json_nesting("--target-args init", init);
      if (status == DS_OK) status = stan_build_library(spec + 5, comm, 1, library, sizeof library);
      if (status == DS_OK) snprintf(out->stan_library, sizeof out->stan_library, "%s", library);
    } else {
      snprintf(library, sizeof library, "%s", spec + 7);
      status = DS_OK;
    }
    name_calls(spec, out);
    if (status == DS_OK) status = load_library(spec, library, out);
    if (status == DS_OK) status = create_from_plugin(spec, args, full_args, data_path, dim, seed, comm, out);
    if (status == DS_OK && (out->target.abi_version < TARGET_ABI_OLDEST ||
                            out->target.abi_version > DSAMPLER_TARGET_ABI_VERSION)) {
      /* Another ABI's struct layout: not even its destroy can be called safely. */
      status = ds_fail(DS_ERR_INPUT, "--target %s: the plugin was built for target ABI version %d; this dsampler "
                       "speaks versions %d and %d (rebuild it against this dsampler_target.h)",
                       spec, out->target.abi_version, TARGET_ABI_OLDEST, DSAMPLER_TARGET_ABI_VERSION);
      memset(&out->target, 0, sizeof out->target);
    }
  } else if (target_is_jax(spec)) {
    status = jax_target_create(spec + 4, args, data_path, device, comm, &out->target, &out->extra);
  } else {
    if (strchr(data_path, ','))
      status = ds_fail(DS_ERR_INPUT, "--data %s: the built-in targets take a file name without a comma", data_path);
    else
      status = builtin_target_create(spec, full_args, comm, &out->target);
  }
  free(full_args);
  if (status == DS_OK) status = check_reported(spec, &out->target, dim);
  if (status == DS_OK && !out->target.name) out->target.name = spec;
  if (status == DS_OK && !out->target.var_name) out->target.var_name = "x";
  if (status == DS_OK && out->library) watch_plugin(out);
  if (status != DS_OK) target_close(out);
  return status;
}

void target_close(target_handle_t *handle) {
  dsampler_target *own = handle->watched ? &handle->plugin : &handle->target;
  if (own->destroy) {
    const int token = handle->library ? target_deadline_begin(handle->calls[TARGET_CALL_DESTROY]) : -1;
    own->destroy(own->self);
    target_deadline_end(token);
  }
  own->destroy = NULL;
  handle->target.destroy = NULL;
  if (handle->library) dlclose(handle->library);
  handle->library = NULL;
}

int target_set_minibatch(const dsampler_target *t, int64_t batch_size, uint64_t seed, int64_t iteration) {
  return builtin_target_set_batch(t, batch_size, seed, iteration);
}

int target_has_outputs(const dsampler_target *t) { return t->abi_version >= 2 && t->n_vars > 0; }

int64_t target_var_size(const dsampler_target_var *v) {
  int64_t size = 1;
  for (int axis = 0; axis < v->rank; ++axis) size *= v->shape[axis];
  return size;
}

void target_unpack_outputs(const dsampler_target *t, const double *packed, int64_t rows, int64_t count,
                           int64_t capacity, double *values, const void **data) {
  const int64_t width = t->constrained_dim;
  int64_t offset = 0;
  for (int v = 0; v < t->n_vars; ++v) {
    const int64_t size = target_var_size(&t->vars[v]);
    double *block = values + rows * capacity * offset;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t slot = 0; slot < count; ++slot)
        memcpy(block + (r * capacity + slot) * size, packed + (r * count + slot) * width + offset,
               (size_t)size * sizeof(double));
    if (data) data[v] = block;
    offset += size;
  }
}

uint64_t target_output_key(uint64_t seed, int64_t chain, int phase, int64_t draw) {
  const rng_words_t words = rng_block(seed, (uint64_t)chain, RNG_ITERATION_OUTPUT, (uint32_t)(2 * draw + phase));
  return (uint64_t)words.v[0] << 32 | words.v[1];
}

/* Rows per call of a target's row-wise host entries from one thread: enough to amortise the
 * call, few enough that the threads share the work. */
#define TARGET_ROWS_PER_CALL 8

/* constrain in calls of `per_call` rows from this thread (target_extra_t). */
static int constrain_serial(const dsampler_target *t, const float *x, int64_t n, const uint64_t *keys, double *out,
                            int64_t per_call) {
  const int64_t dim = t->dim, width = t->constrained_dim;
  const int64_t rows_max = n < per_call ? n : per_call;
  double *rows = malloc((size_t)((rows_max ? rows_max : 1) * dim) * sizeof *rows);
  if (!rows) return DS_FAIL_ALLOC("the rows to constrain", (size_t)(rows_max * dim) * sizeof *rows);
  int status = DS_OK;
  for (int64_t first = 0; first < n && status == DS_OK; first += per_call) {
    const int64_t count = n - first < per_call ? n - first : per_call;
    for (int64_t e = 0; e < count * dim; ++e) rows[e] = (double)x[first * dim + e];
    if (t->constrain(t->self, rows, count, keys + first, out + first * width) != 0)
      status = ds_fail(DS_ERR_TARGET, "target '%s': constrain failed", t->name);
  }
  free(rows);
  return status;
}

int target_constrain(const dsampler_target *t, const float *x, int64_t n, const uint64_t *keys, double *out,
                     int64_t rows_per_call) {
  const int64_t dim = t->dim, width = t->constrained_dim;
  if (rows_per_call > 0) return constrain_serial(t, x, n, keys, out, rows_per_call);
  int status = DS_OK;
#pragma omp parallel if (n > TARGET_ROWS_PER_CALL)
  {
    double *rows = malloc((size_t)(TARGET_ROWS_PER_CALL * dim) * sizeof *rows);
    int local = rows ? DS_OK : DS_FAIL_ALLOC("the rows to constrain", (size_t)(TARGET_ROWS_PER_CALL * dim) * 8);
#pragma omp for schedule(dynamic, 1)
    for (int64_t first = 0; first < n; first += TARGET_ROWS_PER_CALL) {
      if (local != DS_OK) continue;
      const int64_t count = n - first < TARGET_ROWS_PER_CALL ? n - first : TARGET_ROWS_PER_CALL;
      for (int64_t e = 0; e < count * dim; ++e) rows[e] = (double)x[first * dim + e];
      int rc = t->constrain(t->self, rows, count, keys + first, out + first * width);
      if (rc != 0) local = ds_fail(DS_ERR_TARGET, "target '%s': constrain failed (returned %d)", t->name, rc);
    }
    free(rows);
    if (local != DS_OK) {
#pragma omp critical
      if (status == DS_OK) status = local;
    }
  }
  return status;
}

int target_initial_points(const dsampler_target *t, uint64_t seed, int64_t item_begin, int64_t rows,
                          int64_t per_start, const uint8_t *redo, float *x) {
  const int64_t dim = t->dim;
  int status = DS_OK;
#pragma omp parallel if (rows > 1)
  {
    double *point = malloc((size_t)dim * sizeof *point);
    int local = point ? DS_OK : DS_FAIL_ALLOC("a start", (size_t)dim * sizeof(double));
#pragma omp for schedule(dynamic, 1)
    for (int64_t r = 0; r < rows; ++r) {
      if (local != DS_OK || (redo && !redo[r])) continue;
      const int64_t item = item_begin + r, start = item - item % per_start;
      int rc = t->initial_point(t->self, seed, start, point);
      if (rc != 0) {
        local = ds_fail(DS_ERR_TARGET, "target '%s': initial_point failed for chain %lld (returned %d)", t->name,
                        (long long)start, rc);
        continue;
      }
      for (int64_t k = 0; k < dim; ++k) x[r * dim + k] = (float)point[k];
    }
    free(point);
    if (local != DS_OK) {
#pragma omp critical
      if (status == DS_OK) status = local;
    }
  }
  return status;
}
