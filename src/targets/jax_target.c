/* jax_target.c: a target from a JAX bundle (jax_target.h). The bundle's programs take a fixed
 * block of rows, so a call walks its rows in blocks: whole blocks in place (on a GPU, views of
 * dsampler's own arrays, with the outputs written where the program was told to donate them),
 * the last one padded in scratch. Each row's result is the compiled program's on that row alone,
 * whatever the call's size or the row's place in its block, so draws do not change with the
 * number of ranks. */
#include "jax_target.h"

#include <errno.h>
#include <json-c/json.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>

#include "jax_device.h"
#include "pjrt.h"
#include "status.h"
#include "target_args.h"

#define JAX_BUNDLE_FORMAT "dsampler-jax-bundle"
#define JAX_BUNDLE_VERSION 1
#define JAX_MAX_DATA 256
#define JAX_PATH_MAX 4096
/* Host memory that the CPU plugin views must be aligned (XLA's CPU buffers are). */
#define JAX_ALIGN 64

/* One data input of the programs: its values on the host and, for a GPU client, on the device,
 * and the buffer every call passes (never donated). */
typedef struct {
  char name[128];
  pjrt_element_t type;
  int rank;
  int64_t dims[DSAMPLER_TARGET_MAX_RANK];
  size_t bytes;
  void *host, *device;
  PJRT_Buffer *buffer;
} jax_data_t;

/* A program and the rows it takes at once. */
typedef struct {
  pjrt_program_t *program;
  int64_t block;
} jax_program_t;

/* A trajectory program of `steps` leapfrog steps: its code until it is first run. */
#define JAX_TRAJECTORY_MAX 8
typedef struct {
  int steps;
  jax_program_t program;
  void *code;
  size_t size;
  char label[96];
} jax_trajectory_t;

typedef struct {
  char what[JAX_PATH_MAX + 32]; /* "--target jax:PATH", as messages name the input */
  char name[256];               /* the target's name: jax:<bundle folder's name> */
  pjrt_runtime_t *runtime;
  int on_gpu;
  int64_t dim, constrained_dim;
  jax_program_t logp_grad, constrain;
  /* HMC's trajectory (GPU only, optional), [0] for the metric shared by all chains, [1] for one
   * per chain: programs of 1, 2, 4, ... steps, compiled when first used. */
  jax_trajectory_t trajectory[2][JAX_TRAJECTORY_MAX];
  int n_trajectory[2];
  int n_data;
  jax_data_t data[JAX_MAX_DATA];
  int n_vars;
  dsampler_target_var *vars;
  /* GPU scratch for a padded block and for host calls, one call at a time (the lock). */
  pthread_mutex_t lock;
  float *scratch_x, *scratch_lp, *scratch_grad, *scratch_out;
  float *scratch_p, *scratch_eps, *scratch_inv; /* a trajectory's padded block */
  int32_t *first_device[2];                     /* int32 1 and 0: does a call begin the trajectory */
  /* What the trajectory calls cost around their programs (DSAMPLER_JAX_STATS=1 prints them when
   * the target closes): program runs, outputs XLA put elsewhere than the donated input (each
   * then copied back), and blocks staged through the scratch (padded or unaligned rows). */
  int64_t stat_runs, stat_moved_outputs, stat_moved_bytes, stat_staged_blocks;
  /* Host seconds in the trajectory calls: the wait for the sampler's stream, making and freeing
   * the views, the programs' run (dispatch to completion), and the call in all. */
  double stat_sync_s, stat_views_s, stat_run_s, stat_call_s, stat_compile_s;
  /* Trajectories ordered on the device (DSAMPLER_JAX_STREAM_ORDER=1, GPU with PJRT's stream
   * extension): the views are defined on PJRT's stream once it reaches the sampler's work,
   * the sampler's stream waits on the outputs, and the host waits for neither. The buffers of
   * a call are freed at the next call (or at close), once the mark recorded after them is
   * passed. */
  int stream_order;
  intptr_t ready_stream;
  PJRT_Buffer **retired;
  unsigned char *retired_output; /* 1 where a retired buffer is a program's output */
  int n_retired, retired_capacity;
  void *retired_mark;
} jax_target_t;

/* Frees the buffers of the last device-ordered call once the sampler's stream is past them,
 * and returns the first error a program left on its outputs (a queued run reports none on the
 * host). Where the wait itself fails the buffers are left unfreed: the device may still use them. */
static int release_retired(jax_target_t *jax) {
  if (jax->n_retired == 0) return DS_OK;
  int status = jax_device_mark_wait(jax->retired_mark);
  jax->retired_mark = NULL;
  if (status != DS_OK) {
    jax->n_retired = 0;
    return status;
  }
  for (int i = 0; i < jax->n_retired; ++i) {
    if (status == DS_OK && jax->retired_output[i])
      status = pjrt_buffer_status(jax->runtime, jax->retired[i], "a trajectory program's run");
    pjrt_buffer_free(jax->runtime, jax->retired[i]);
  }
  jax->n_retired = 0;
  return status;
}

/* Keeps `buffer` until release_retired; where the list cannot grow, waits for `stream` and
 * frees it at once. */
static int retire(jax_target_t *jax, PJRT_Buffer *buffer, int output, void *stream) {
  if (!buffer) return DS_OK;
  if (jax->n_retired == jax->retired_capacity) {
    const int capacity = jax->retired_capacity ? 2 * jax->retired_capacity : 64;
    PJRT_Buffer **grown = realloc(jax->retired, (size_t)capacity * sizeof *grown);
    if (grown) jax->retired = grown;
    unsigned char *flags = grown ? realloc(jax->retired_output, (size_t)capacity) : NULL;
    if (flags) jax->retired_output = flags;
    if (!grown || !flags) {
      const int synced = jax_device_sync(stream);
      if (synced == DS_OK) pjrt_buffer_free(jax->runtime, buffer);
      return synced == DS_OK ? DS_FAIL_ALLOC("the trajectory's buffer list", (size_t)capacity * sizeof *grown) : synced;
    }
    jax->retired_capacity = capacity;
  }
  jax->retired_output[jax->n_retired] = (unsigned char)output;
  jax->retired[jax->n_retired++] = buffer;
  return DS_OK;
}

static void *aligned_zeroed(size_t bytes) {
  const size_t rounded = (bytes + JAX_ALIGN - 1) / JAX_ALIGN * JAX_ALIGN;
  void *memory = aligned_alloc(JAX_ALIGN, rounded ? rounded : JAX_ALIGN);
  if (memory) memset(memory, 0, rounded ? rounded : JAX_ALIGN);
  return memory;
}

/* ---- reading the bundle ---- */

/* The whole file at folder/name into *bytes (malloc'd), or DS_ERR_INPUT naming it. */
static int read_bundle_file(const jax_target_t *jax, const char *folder, const char *name, void **bytes,
                            size_t *size) {
  *bytes = NULL;
  *size = 0;
  if (!name[0] || strstr(name, "..") || name[0] == '/')
    return ds_fail(DS_ERR_INPUT, "%s: the manifest names the file '%s' (expected a path inside the bundle)",
                   jax->what, name);
  char path[JAX_PATH_MAX * 2];
  snprintf(path, sizeof path, "%s/%s", folder, name);
  FILE *file = fopen(path, "rb");
  if (!file) return ds_fail(DS_ERR_INPUT, "%s: cannot open %s: %s", jax->what, path, strerror(errno));
  struct stat info;
  if (fstat(fileno(file), &info) != 0 || !S_ISREG(info.st_mode)) {
    fclose(file);
    return ds_fail(DS_ERR_INPUT, "%s: %s is not a regular file", jax->what, path);
  }
  *size = (size_t)info.st_size;
  *bytes = aligned_zeroed(*size);
  if (!*bytes) {
    fclose(file);
    return DS_FAIL_ALLOC(path, *size);
  }
  const size_t got = fread(*bytes, 1, *size, file);
  fclose(file);
  if (got != *size) {
    free(*bytes);
    *bytes = NULL;
    return ds_fail(DS_ERR_INPUT, "%s: reading %s: got %zu of %zu bytes", jax->what, path, got, *size);
  }
  return DS_OK;
}

static json_object *member(json_object *object, const char *key) {
  json_object *value = NULL;
  return object && json_object_object_get_ex(object, key, &value) ? value : NULL;
}

/* A manifest integer: DS_ERR_INPUT naming the field where it is absent or not an integer. */
static int manifest_int(const jax_target_t *jax, json_object *object, const char *key, int64_t *value) {
  json_object *field = member(object, key);
  if (!field || !json_object_is_type(field, json_type_int))
    return ds_fail(DS_ERR_INPUT, "%s: manifest.json: '%s' is missing or not an integer", jax->what, key);
  *value = json_object_get_int64(field);
  return DS_OK;
}

static const char *manifest_string(json_object *object, const char *key) {
  json_object *field = member(object, key);
  return field && json_object_is_type(field, json_type_string) ? json_object_get_string(field) : NULL;
}

/* A shape: a list of at most DSAMPLER_TARGET_MAX_RANK non-negative integers. */
static int manifest_shape(const jax_target_t *jax, json_object *shape, const char *of, int *rank, int64_t *dims) {
  if (!shape || !json_object_is_type(shape, json_type_array) ||
      json_object_array_length(shape) > DSAMPLER_TARGET_MAX_RANK)
    return ds_fail(DS_ERR_INPUT, "%s: manifest.json: the shape of %s is missing or has more than %d axes", jax->what,
                   of, DSAMPLER_TARGET_MAX_RANK);
  *rank = (int)json_object_array_length(shape);
  for (int axis = 0; axis < *rank; ++axis) {
    json_object *length = json_object_array_get_idx(shape, (size_t)axis);
    if (!json_object_is_type(length, json_type_int) || json_object_get_int64(length) < 0)
      return ds_fail(DS_ERR_INPUT, "%s: manifest.json: the shape of %s has a bad axis %d", jax->what, of, axis);
    dims[axis] = json_object_get_int64(length);
  }
  return DS_OK;
}

static int read_vars(jax_target_t *jax, json_object *manifest) {
  json_object *vars = member(manifest, "vars");
  if (!vars || !json_object_is_type(vars, json_type_array))
    return ds_fail(DS_ERR_INPUT, "%s: manifest.json: 'vars' is missing or not a list", jax->what);
  jax->n_vars = (int)json_object_array_length(vars);
  jax->vars = calloc((size_t)(jax->n_vars ? jax->n_vars : 1), sizeof *jax->vars);
  if (!jax->vars) return DS_FAIL_ALLOC("the output variables", sizeof *jax->vars);
  for (int v = 0; v < jax->n_vars; ++v) {
    json_object *var = json_object_array_get_idx(vars, (size_t)v);
    const char *name = manifest_string(var, "name"), *kind = manifest_string(var, "kind");
    if (!name || !kind)
      return ds_fail(DS_ERR_INPUT, "%s: manifest.json: output variable %d has no name or kind", jax->what, v);
    dsampler_target_var *out = &jax->vars[v];
    out->name = strdup(name);
    if (!out->name) return DS_FAIL_ALLOC("a variable's name", strlen(name));
    if (strcmp(kind, "parameter") == 0) out->kind = DSAMPLER_VAR_PARAMETER;
    else if (strcmp(kind, "transformed") == 0) out->kind = DSAMPLER_VAR_TRANSFORMED;
    else if (strcmp(kind, "generated") == 0) out->kind = DSAMPLER_VAR_GENERATED;
    else
      return ds_fail(DS_ERR_INPUT, "%s: manifest.json: output variable %s has kind '%s' (expected parameter, "
                     "transformed or generated)", jax->what, name, kind);
    char of[160];
    snprintf(of, sizeof of, "output variable %.120s", name);
    DS_TRY(manifest_shape(jax, member(var, "shape"), of, &out->rank, out->shape));
  }
  return DS_OK;
}

static int read_checked_file(const jax_target_t *jax, const char *folder, json_object *entry, const char *what,
                             void **bytes, size_t *size);

/* The data inputs: each file's size must be its shape's, in float32 or int32. */
static int read_data(jax_target_t *jax, const char *folder, json_object *manifest) {
  json_object *data = member(manifest, "data");
  if (!data || !json_object_is_type(data, json_type_array))
    return ds_fail(DS_ERR_INPUT, "%s: manifest.json: 'data' is missing or not a list", jax->what);
  if (json_object_array_length(data) > JAX_MAX_DATA)
    return ds_fail(DS_ERR_INPUT, "%s: the bundle has %zu data inputs (at most %d)", jax->what,
                   json_object_array_length(data), JAX_MAX_DATA);
  jax->n_data = (int)json_object_array_length(data);
  for (int d = 0; d < jax->n_data; ++d) {
    json_object *entry = json_object_array_get_idx(data, (size_t)d);
    jax_data_t *input = &jax->data[d];
    const char *name = manifest_string(entry, "name"), *dtype = manifest_string(entry, "dtype");
    const char *file = manifest_string(entry, "file");
    if (!name || !dtype || !file)
      return ds_fail(DS_ERR_INPUT, "%s: manifest.json: data input %d lacks a name, dtype or file", jax->what, d);
    snprintf(input->name, sizeof input->name, "%s", name);
    if (strcmp(dtype, "float32") == 0) input->type = PJRT_ELEMENT_F32;
    else if (strcmp(dtype, "int32") == 0) input->type = PJRT_ELEMENT_S32;
    else
      return ds_fail(DS_ERR_INPUT, "%s: data input %s has dtype '%s' (expected float32 or int32)", jax->what, name,
                     dtype);
    char of[160];
    snprintf(of, sizeof of, "data input %.120s", name);
    DS_TRY(manifest_shape(jax, member(entry, "shape"), of, &input->rank, input->dims));
    size_t expected = 4;
    for (int axis = 0; axis < input->rank; ++axis) expected *= (size_t)input->dims[axis];
    size_t size;
    char what[160];
    snprintf(what, sizeof what, "data input %.120s", name);
    DS_TRY(read_checked_file(jax, folder, entry, what, &input->host, &size));
    if (size != expected)
      return ds_fail(DS_ERR_INPUT, "%s: data input %s: %s holds %zu bytes, but its shape and dtype make %zu "
                     "(a truncated or replaced file? export the bundle again)", jax->what, name, file, size, expected);
    input->bytes = size;
  }
  return DS_OK;
}

/* The hex SHA-256 of `size` bytes into hex [65]. */
static void sha256_hex(const void *bytes, size_t size, char *hex) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(bytes, size, digest);
  for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}

/* A file the manifest describes ({"file", "sha256"}), read whole and checked against its
 * recorded SHA-256: a truncated, damaged or swapped file is refused before anything runs. */
static int read_checked_file(const jax_target_t *jax, const char *folder, json_object *entry, const char *what,
                             void **bytes, size_t *size) {
  const char *file = manifest_string(entry, "file"), *sha256 = manifest_string(entry, "sha256");
  if (!file) return ds_fail(DS_ERR_INPUT, "%s: manifest.json: %s has no file", jax->what, what);
  DS_TRY(read_bundle_file(jax, folder, file, bytes, size));
  if (!sha256) return DS_OK;
  char hex[2 * SHA256_DIGEST_LENGTH + 1];
  sha256_hex(*bytes, *size, hex);
  if (strcmp(hex, sha256) == 0) return DS_OK;
  free(*bytes);
  *bytes = NULL;
  return ds_fail(DS_ERR_INPUT, "%s: %s (%s) is not the file the bundle was exported with (its SHA-256 differs: "
                 "truncated, damaged or replaced; export the bundle again)", jax->what, file, what);
}

/* The program's inputs as the exporter recorded them ("inputs": [{"dtype", "shape"}, ...]) must
 * end with the data inputs as the bundle holds them, and begin with rows [block, dim] float32:
 * a manifest edited after the export (a data input's dtype or shape) is refused here, since a
 * plugin may check only a buffer's size. */
static int check_program_inputs(const jax_target_t *jax, json_object *entry, const char *name, int64_t block) {
  json_object *inputs = member(entry, "inputs");
  if (!inputs || !json_object_is_type(inputs, json_type_array) ||
      json_object_array_length(inputs) < (size_t)jax->n_data + 1)
    return ds_fail(DS_ERR_INPUT, "%s: manifest.json: the %s program's inputs are missing or too few (export the "
                   "bundle again)", jax->what, name);
  const size_t first_data = json_object_array_length(inputs) - (size_t)jax->n_data;
  for (size_t i = 0; i < json_object_array_length(inputs); ++i) {
    json_object *input = json_object_array_get_idx(inputs, i);
    const char *dtype = manifest_string(input, "dtype");
    int rank = 0;
    int64_t dims[DSAMPLER_TARGET_MAX_RANK];
    char of[160];
    snprintf(of, sizeof of, "the %s program's input %zu", name, i);
    DS_TRY(manifest_shape(jax, member(input, "shape"), of, &rank, dims));
    if (i == 0 && (!dtype || strcmp(dtype, "float32") != 0 || rank != 2 || dims[0] != block || dims[1] != jax->dim))
      return ds_fail(DS_ERR_INPUT, "%s: the %s program takes rows other than float32 [%lld, %lld] (its block and the "
                     "bundle's dim disagree; export the bundle again)", jax->what, name, (long long)block,
                     (long long)jax->dim);
    if (i < first_data) continue;
    const jax_data_t *data = &jax->data[i - first_data];
    const char *want = data->type == PJRT_ELEMENT_F32 ? "float32" : "int32";
    int same = dtype && strcmp(dtype, want) == 0 && rank == data->rank;
    for (int axis = 0; same && axis < rank; ++axis) same = dims[axis] == data->dims[axis];
    if (!same)
      return ds_fail(DS_ERR_INPUT, "%s: data input %s is %s of rank %d in the manifest, but the %s program takes %s "
                     "(the manifest was edited after the export? export the bundle again)", jax->what, data->name,
                     want, data->rank, name, dtype ? dtype : "another shape");
  }
  return DS_OK;
}

/* programs.NAME.<platform> of the manifest: its code and block. DS_OK with *code NULL when an
 * optional program is absent. */
static int read_program_code(jax_target_t *jax, const char *folder, json_object *manifest, const char *name,
                             int optional, void **code, size_t *size, int64_t *block) {
  *code = NULL;
  const char *platform = jax->on_gpu ? "cuda" : "cpu";
  json_object *entry = member(member(member(manifest, "programs"), name), platform);
  if (!entry && optional) return DS_OK;
  if (!entry)
    return ds_fail(DS_ERR_INPUT, "%s: the bundle has no %s program for the %s (export it with --platforms cpu,cuda)",
                   jax->what, name, jax->on_gpu ? "GPU" : "CPU");
  DS_TRY(manifest_int(jax, entry, "block", block));
  if (*block < 1 || *block > ((int64_t)1 << 30))
    return ds_fail(DS_ERR_INPUT, "%s: the %s program's block is %lld", jax->what, name, (long long)*block);
  DS_TRY(check_program_inputs(jax, entry, name, *block));
  char what[96];
  snprintf(what, sizeof what, "the %s program", name);
  return read_checked_file(jax, folder, entry, what, code, size);
}

/* Reads and compiles programs.NAME.<platform>. */
static int read_program(jax_target_t *jax, const char *folder, json_object *manifest, const char *name,
                        jax_program_t *out) {
  void *code;
  size_t size;
  DS_TRY(read_program_code(jax, folder, manifest, name, 0, &code, &size, &out->block));
  const int status = pjrt_compile(jax->runtime, code, size, name, &out->program);
  free(code);
  return status;
}

/* The trajectory programs trajectory_<metric>_<steps> the bundle has (steps 1, 2, 4, ...), read
 * now and compiled when first used; all of one block. */
static int read_trajectories(jax_target_t *jax, const char *folder, json_object *manifest) {
  static const char *const metrics[2] = {"trajectory_shared", "trajectory_chain"};
  for (int m = 0; m < 2; ++m)
    for (int steps = 1; steps <= 1 << 12 && jax->n_trajectory[m] < JAX_TRAJECTORY_MAX; steps *= 2) {
      jax_trajectory_t *program = &jax->trajectory[m][jax->n_trajectory[m]];
      char name[64];
      snprintf(name, sizeof name, "%s_%d", metrics[m], steps);
      DS_TRY(read_program_code(jax, folder, manifest, name, 1, &program->code, &program->size,
                               &program->program.block));
      if (!program->code) continue;
      if (program->program.block != jax->trajectory[0][0].program.block)
        return ds_fail(DS_ERR_INPUT, "%s: the trajectory programs have different blocks", jax->what);
      program->steps = steps;
      snprintf(program->label, sizeof program->label, "%s", name);
      jax->n_trajectory[m]++;
    }
  /* Both metrics from one step up, or none: the backend asks for either at any time. */
  if (jax->n_trajectory[0] != jax->n_trajectory[1] || (jax->n_trajectory[0] && jax->trajectory[0][0].steps != 1))
    jax->n_trajectory[0] = jax->n_trajectory[1] = 0;
  return DS_OK;
}

/* ---- finding the plugin ---- */

/* The plugin a Python install carries, asked of `python` without importing jax: the first of
 * `candidates` ("module/file.so" pairs) that exists. "" when none. */
static void plugin_from_python(const char *python, int on_gpu, char *path, size_t size) {
  path[0] = '\0';
  const char *modules = on_gpu ? "[('jax_plugins.xla_cuda13','xla_cuda_plugin.so'),"
                                 "('jax_plugins.xla_cuda12','xla_cuda_plugin.so')]"
                               : "[('lammps_jax_pjrt_cpu','pjrt_c_api_cpu_plugin.so'),"
                                 "('xla_plugins.xla_cpu_pjrt','xla_cpu_pjrt.so')]";
  char command[1024];
  snprintf(command, sizeof command,
           "'%s' -c \"import importlib.util as u, os\n"
           "for m, f in %s:\n"
           "  try:\n"
           "    s = u.find_spec(m)\n"
           "  except Exception:\n"
           "    s = None\n"
           "  if s and s.submodule_search_locations:\n"
           "    p = os.path.join(list(s.submodule_search_locations)[0], f)\n"
           "    if os.path.isfile(p):\n"
           "      print(p); break\" 2>/dev/null",
           python, modules);
  FILE *pipe = popen(command, "r");
  if (!pipe) return;
  if (!fgets(path, (int)size, pipe)) path[0] = '\0';
  pclose(pipe);
  path[strcspn(path, "\n")] = '\0';
}

/* The plugin's path, the same on every rank: --target-args plugin=, else DSAMPLER_PJRT_PLUGIN,
 * else what rank 0's Python install carries. */
static int find_plugin(const jax_target_t *jax, const char *args, MPI_Comm comm, char *path, size_t size) {
  path[0] = '\0';
  if (target_args_get(args, "plugin", path, size)) return DS_OK;
  const char *env = getenv("DSAMPLER_PJRT_PLUGIN");
  if (env && env[0]) {
    snprintf(path, size, "%s", env);
    return DS_OK;
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char found[JAX_PATH_MAX] = "";
  const char *python = getenv("DSAMPLER_PYTHON") && getenv("DSAMPLER_PYTHON")[0] ? getenv("DSAMPLER_PYTHON")
                                                                                    : "python3";
  if (rank == 0 && !strchr(python, '\'')) plugin_from_python(python, jax->on_gpu, found, sizeof found);
  MPI_Bcast(found, sizeof found, MPI_CHAR, 0, comm);
  if (!found[0])
    return ds_fail(DS_ERR_INPUT, "%s: no PJRT %s plugin found (%s has none installed); install one with %s, or give "
                   "its path with --target-args plugin=PATH or DSAMPLER_PJRT_PLUGIN", jax->what,
                   jax->on_gpu ? "CUDA" : "CPU", python, jax->on_gpu ? JAX_PLUGIN_HINT_GPU : JAX_PLUGIN_HINT_CPU);
  snprintf(path, size, "%s", found);
  return DS_OK;
}

/* ---- running the programs ---- */

/* The data buffers every call passes, made once. */
static int make_data_buffers(jax_target_t *jax) {
  for (int d = 0; d < jax->n_data; ++d) {
    jax_data_t *input = &jax->data[d];
    void *memory = input->host;
    if (jax->on_gpu) {
      DS_TRY(jax_device_alloc(&input->device, input->bytes));
      DS_TRY(jax_device_upload(input->device, input->host, input->bytes));
      memory = input->device;
    }
    DS_TRY(pjrt_view(jax->runtime, memory, input->dims, input->rank, input->type, &input->buffer));
  }
  return DS_OK;
}

/* Runs `program` on one block: x [block, dim] and, for logp_grad, the places lp [block] and
 * grad [block, dim] it may write its outputs to (donated); outputs land at outs[o] (copied
 * there when the plugin put them elsewhere) for the first `rows` rows. All pointers are in the
 * client's memory (device or aligned host). */
static int run_block(jax_target_t *jax, const jax_program_t *program, float *x, int64_t rows, float **outs,
                     const int64_t *widths, int n_outs, int donate) {
  PJRT_Buffer *args[3 + JAX_MAX_DATA] = {NULL};
  PJRT_Buffer *results[2] = {NULL, NULL};
  const int64_t x_dims[2] = {program->block, jax->dim};
  int n_args = 0;
  int status = pjrt_view(jax->runtime, x, x_dims, 2, PJRT_ELEMENT_F32, &args[n_args++]);
  for (int o = 0; donate && status == DS_OK && o < n_outs; ++o) {
    const int64_t dims[2] = {program->block, widths[o]};
    status = pjrt_view(jax->runtime, outs[o], dims, widths[o] ? 2 : 1, PJRT_ELEMENT_F32, &args[n_args++]);
  }
  for (int d = 0; d < jax->n_data; ++d) args[n_args++] = jax->data[d].buffer;
  if (status == DS_OK) status = pjrt_execute(jax->runtime, program->program, args, (size_t)n_args, results, (size_t)n_outs);
  for (int o = 0; status == DS_OK && o < n_outs; ++o) {
    void *memory = NULL;
    status = pjrt_buffer_memory(jax->runtime, results[o], &memory);
    if (status != DS_OK || memory == outs[o]) continue;
    const size_t bytes = (size_t)(rows * (widths[o] ? widths[o] : 1)) * sizeof(float);
    status = jax->on_gpu ? jax_device_copy(outs[o], memory, bytes)
                         : pjrt_buffer_to_host(jax->runtime, results[o], outs[o],
                                               (size_t)(program->block * (widths[o] ? widths[o] : 1)) * sizeof(float));
  }
  for (int o = 0; o < n_outs; ++o) pjrt_buffer_free(jax->runtime, results[o]);
  for (int a = 0; a < n_args - jax->n_data; ++a) pjrt_buffer_free(jax->runtime, args[a]);
  return status;
}

/* Rows [n, width] moved between caller memory and a block's scratch, on the client's side. */
static int copy_rows(const jax_target_t *jax, void *dst, const void *src, int64_t n, int64_t width) {
  const size_t bytes = (size_t)(n * width) * sizeof(float);
  if (jax->on_gpu) return jax_device_copy(dst, src, bytes);
  memcpy(dst, src, bytes);
  return DS_OK;
}

/* 1 when every pointer given may be viewed in place: XLA takes device buffers 16-byte aligned,
 * and the CPU plugin's views need JAX_ALIGN. */
static int aligned_rows(const jax_target_t *jax, const void *a, const void *b, const void *c, const void *d,
                        const void *e) {
  const uintptr_t any = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e;
  return any % (jax->on_gpu ? 16 : JAX_ALIGN) == 0;
}

/* logp_grad over rows x [n, dim] in the client's memory, outputs there too. Whole blocks run
 * in place (on the CPU only when aligned); the rest through scratch (x_pad, lp_pad, grad_pad:
 * one block each). */
static int logp_grad_rows(jax_target_t *jax, const float *x, int64_t n, float *logp, float *grad, float *x_pad,
                          float *lp_pad, float *grad_pad) {
  const int64_t block = jax->logp_grad.block, dim = jax->dim;
  const int64_t widths[2] = {0, dim};
  for (int64_t first = 0; first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    float *x_rows = (float *)x + first * dim, *lp_rows = logp + first, *grad_rows = grad + first * dim;
    const int aligned = aligned_rows(jax, x_rows, lp_rows, grad_rows, NULL, NULL);
    if (rows == block && aligned) {
      float *outs[2] = {lp_rows, grad_rows};
      DS_TRY(run_block(jax, &jax->logp_grad, x_rows, rows, outs, widths, 2, 1));
      continue;
    }
    DS_TRY(copy_rows(jax, x_pad, x_rows, rows, dim));
    float *outs[2] = {lp_pad, grad_pad};
    DS_TRY(run_block(jax, &jax->logp_grad, x_pad, rows, outs, widths, 2, 1));
    DS_TRY(copy_rows(jax, lp_rows, lp_pad, rows, 1));
    DS_TRY(copy_rows(jax, grad_rows, grad_pad, rows, dim));
  }
  return DS_OK;
}

/* The host entry. On the CPU, from several threads at once, each with its own scratch; on a
 * GPU (for the host's own uses: checks of starts), staged through the device scratch. */
static int jax_logp_grad(void *self, const float *x, int64_t n, float *logp, float *grad) {
  jax_target_t *jax = self;
  const int64_t block = jax->logp_grad.block, dim = jax->dim;
  if (!jax->on_gpu) {
    float *x_pad = aligned_zeroed((size_t)(block * dim) * sizeof(float));
    float *lp_pad = aligned_zeroed((size_t)block * sizeof(float));
    float *grad_pad = aligned_zeroed((size_t)(block * dim) * sizeof(float));
    int status = x_pad && lp_pad && grad_pad ? logp_grad_rows(jax, x, n, logp, grad, x_pad, lp_pad, grad_pad)
                                             : DS_FAIL_ALLOC("a block of rows", (size_t)(block * dim) * 8);
    free(x_pad);
    free(lp_pad);
    free(grad_pad);
    return status == DS_OK ? 0 : 1;
  }
  pthread_mutex_lock(&jax->lock);
  int status = DS_OK;
  for (int64_t first = 0; status == DS_OK && first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    status = jax_device_upload(jax->scratch_x, x + first * dim, (size_t)(rows * dim) * sizeof(float));
    float *outs[2] = {jax->scratch_lp, jax->scratch_grad};
    const int64_t widths[2] = {0, dim};
    if (status == DS_OK) status = run_block(jax, &jax->logp_grad, jax->scratch_x, rows, outs, widths, 2, 1);
    if (status == DS_OK) status = jax_device_download(logp + first, jax->scratch_lp, (size_t)rows * sizeof(float));
    if (status == DS_OK)
      status = jax_device_download(grad + first * dim, jax->scratch_grad, (size_t)(rows * dim) * sizeof(float));
  }
  pthread_mutex_unlock(&jax->lock);
  return status == DS_OK ? 0 : 1;
}

/* The device entry: x, logp and grad in GPU memory, ordered after `stream`'s work by a wait on
 * the host (the programs run on XLA's own stream and are done when this returns). */
static int jax_logp_grad_cuda(void *self, const float *x, int64_t n, float *logp, float *grad, void *stream) {
  jax_target_t *jax = self;
  pthread_mutex_lock(&jax->lock);
  int status = jax_device_sync(stream);
  if (status == DS_OK)
    status = logp_grad_rows(jax, x, n, logp, grad, jax->scratch_x, jax->scratch_lp, jax->scratch_grad);
  pthread_mutex_unlock(&jax->lock);
  return status == DS_OK ? 0 : 1;
}

/* One block of a trajectory program: every pointer in device memory, [block] rows each (inv
 * [dim] when the metric is shared). The outputs land in q, p, grad and lp (donated; copied
 * there when XLA put them elsewhere). */
static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int trajectory_block(jax_target_t *jax, const jax_program_t *program, float *q, float *p, float *grad,
                            float *lp, float *eps, float *inv, int shared, int first, void *stream, int queued) {
  const double start = now_seconds();
  const int64_t block = program->block, dim = jax->dim;
  const int64_t rows_dims[2] = {block, dim}, inv_dims[2] = {block, dim}, shared_dims[1] = {dim};
  float *outs[4] = {q, p, grad, lp};
  PJRT_Buffer *args[7 + JAX_MAX_DATA] = {NULL};
  PJRT_Buffer *results[4] = {NULL};
  /* Queued: the views are defined on PJRT's stream once it reaches the sampler's work so far. */
  const intptr_t ready = queued ? jax->ready_stream : 0;
  int status = queued ? jax_device_stream_after((void *)ready, stream) : DS_OK, n_args = 0;
  for (int o = 0; o < 4 && status == DS_OK; ++o)
    status = pjrt_view_on(jax->runtime, outs[o], rows_dims, o < 3 ? 2 : 1, PJRT_ELEMENT_F32, ready, &args[n_args++]);
  if (status == DS_OK) status = pjrt_view_on(jax->runtime, eps, rows_dims, 1, PJRT_ELEMENT_F32, ready, &args[n_args++]);
  if (status == DS_OK)
    status = pjrt_view_on(jax->runtime, inv, shared ? shared_dims : inv_dims, shared ? 1 : 2, PJRT_ELEMENT_F32, ready,
                          &args[n_args++]);
  if (status == DS_OK)
    status = pjrt_view_on(jax->runtime, jax->first_device[first ? 0 : 1], NULL, 0, PJRT_ELEMENT_S32, ready,
                          &args[n_args++]);
  const int own = n_args;
  for (int d = 0; d < jax->n_data; ++d) args[n_args++] = jax->data[d].buffer;
  const double viewed = now_seconds();
  if (status == DS_OK)
    status = pjrt_execute_queued(jax->runtime, program->program, args, (size_t)n_args, results, 4, !queued);
  const double ran = now_seconds();
  jax->stat_views_s += viewed - start;
  jax->stat_run_s += ran - viewed;
  for (int o = 0; o < 4 && status == DS_OK; ++o) {
    /* Queued: the sampler's stream goes on once the program has defined the output. */
    if (queued) status = pjrt_wait_on_stream(jax->runtime, results[o], (intptr_t)stream);
    void *memory = NULL;
    if (status == DS_OK) status = pjrt_buffer_memory(jax->runtime, results[o], &memory);
    if (status == DS_OK && memory != outs[o]) {
      const size_t bytes = (size_t)(block * (o < 3 ? dim : 1)) * sizeof(float);
      status = queued ? jax_device_copy_on(outs[o], memory, bytes, stream) : jax_device_copy(outs[o], memory, bytes);
      jax->stat_moved_outputs++;
      jax->stat_moved_bytes += (int64_t)bytes;
    }
  }
  jax->stat_runs++;
  /* Queued, the buffers wait for release_retired (the programs may still use them). */
  for (int i = 0; i < 4 + own; ++i) {
    PJRT_Buffer *buffer = i < 4 ? results[i] : args[i - 4];
    if (!queued) {
      pjrt_buffer_free(jax->runtime, buffer);
      continue;
    }
    const int kept = retire(jax, buffer, i < 4, stream);
    if (status == DS_OK) status = kept;
  }
  jax->stat_views_s += now_seconds() - ran;
  return status;
}

/* The programs that make a trajectory of n_steps: the largest first (10 = 8 + 2), each
 * compiled when first needed. Fills order [JAX_TRAJECTORY_MAX * 64]; returns its length or -1. */
static int trajectory_plan(jax_target_t *jax, int metric, int n_steps, jax_trajectory_t **order, int capacity) {
  int count = 0;
  for (int k = jax->n_trajectory[metric] - 1; k >= 0 && n_steps > 0; --k) {
    jax_trajectory_t *program = &jax->trajectory[metric][k];
    while (n_steps >= program->steps) {
      if (count == capacity) return -1;
      if (!program->program.program &&
          pjrt_compile(jax->runtime, program->code, program->size, program->label, &program->program.program) != DS_OK)
        return -1;
      order[count++] = program;
      n_steps -= program->steps;
    }
  }
  return count;
}

/* backend.h's leapfrog_cuda: whole blocks in place, the last through the scratch. */
static int jax_leapfrog_cuda(void *self, float *q, float *p, float *grad, float *logp, const float *step_size,
                             const float *inv_metric, int shared_metric, int n_steps, int64_t n, void *stream) {
  jax_target_t *jax = self;
  const int metric = shared_metric ? 0 : 1;
  const int64_t block = jax->trajectory[metric][0].program.block, dim = jax->dim;
  jax_trajectory_t *order[JAX_TRAJECTORY_MAX * 64];
  pthread_mutex_lock(&jax->lock);
  const double start = now_seconds();
  /* Programs are compiled when first needed: their time is not the trajectory's. */
  const int calls = trajectory_plan(jax, metric, n_steps, order, JAX_TRAJECTORY_MAX * 64);
  const double planned = now_seconds();
  jax->stat_compile_s += planned - start;
  /* Ordered on the device when every block is whole and viewed in place (a staged block's
   * copies wait on the host). */
  int queued = jax->stream_order && n % block == 0;
  for (int64_t first = 0; queued && first < n; first += block)
    queued = aligned_rows(jax, q + first * dim, p + first * dim, grad + first * dim, logp + first,
                          (float *)step_size + first) &&
             aligned_rows(jax, (float *)inv_metric + (shared_metric ? 0 : first * dim), NULL, NULL, NULL, NULL);
  int status = release_retired(jax);
  if (status == DS_OK)
    status = calls < 0 ? ds_fail(DS_ERR_TARGET, "%s: no trajectory programs for %d steps", jax->what, n_steps)
                       : queued ? DS_OK : jax_device_sync(stream);
  jax->stat_sync_s += now_seconds() - planned;
  for (int64_t first = 0; status == DS_OK && first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    float *q_rows = q + first * dim, *p_rows = p + first * dim, *grad_rows = grad + first * dim;
    float *lp_rows = logp + first, *eps_rows = (float *)step_size + first;
    float *inv_rows = (float *)inv_metric + (shared_metric ? 0 : first * dim);
    float *state[4] = {q_rows, p_rows, grad_rows, lp_rows}, *eps = eps_rows, *inv = inv_rows;
    const int staged = rows < block || !aligned_rows(jax, q_rows, p_rows, grad_rows, lp_rows, eps_rows) ||
                       !aligned_rows(jax, inv_rows, NULL, NULL, NULL, NULL);
    if (staged) {
      jax->stat_staged_blocks++;
      state[0] = jax->scratch_x, state[1] = jax->scratch_p, state[2] = jax->scratch_grad, state[3] = jax->scratch_lp;
      eps = jax->scratch_eps;
      inv = shared_metric ? inv_rows : jax->scratch_inv;
      status = copy_rows(jax, state[0], q_rows, rows, dim);
      if (status == DS_OK) status = copy_rows(jax, state[1], p_rows, rows, dim);
      if (status == DS_OK) status = copy_rows(jax, state[2], grad_rows, rows, dim);
      if (status == DS_OK) status = copy_rows(jax, eps, eps_rows, rows, 1);
      if (status == DS_OK && !shared_metric) status = copy_rows(jax, inv, inv_rows, rows, dim);
    }
    for (int c = 0; c < calls && status == DS_OK; ++c)
      status = trajectory_block(jax, &order[c]->program, state[0], state[1], state[2], state[3], eps, inv,
                                shared_metric, c == 0, stream, queued);
    if (staged) {
      if (status == DS_OK) status = copy_rows(jax, q_rows, state[0], rows, dim);
      if (status == DS_OK) status = copy_rows(jax, p_rows, state[1], rows, dim);
      if (status == DS_OK) status = copy_rows(jax, grad_rows, state[2], rows, dim);
      if (status == DS_OK) status = copy_rows(jax, lp_rows, state[3], rows, 1);
    }
  }
  if (queued && jax->n_retired > 0) {
    /* Without a mark the host waits here, and the buffers may go at once. */
    const int marked = jax_device_mark(stream, &jax->retired_mark);
    if (marked != DS_OK && jax_device_sync(stream) == DS_OK) release_retired(jax);
    if (status == DS_OK) status = marked;
  }
  jax->stat_call_s += now_seconds() - planned;
  pthread_mutex_unlock(&jax->lock);
  return status == DS_OK ? 0 : 1;
}

/* The output variables of rows x [n, dim] (float64 from the sampler's float32 state, so exact
 * in float32), widened from the program's float32. */
static int jax_constrain(void *self, const double *x, int64_t n, const uint64_t *keys, double *out) {
  (void)keys; /* the programs draw no random numbers */
  jax_target_t *jax = self;
  const int64_t block = jax->constrain.block, dim = jax->dim, width = jax->constrained_dim;
  float *x_rows = aligned_zeroed((size_t)(block * dim) * sizeof(float));
  float *values = aligned_zeroed((size_t)(block * width) * sizeof(float));
  int status = x_rows && values ? DS_OK : DS_FAIL_ALLOC("a block of rows", (size_t)(block * (dim + width)) * 4);
  if (jax->on_gpu) pthread_mutex_lock(&jax->lock);
  for (int64_t first = 0; status == DS_OK && first < n; first += block) {
    const int64_t rows = n - first < block ? n - first : block;
    for (int64_t e = 0; e < rows * dim; ++e) x_rows[e] = (float)x[first * dim + e];
    const int64_t widths[1] = {width};
    if (jax->on_gpu) {
      status = jax_device_upload(jax->scratch_x, x_rows, (size_t)(rows * dim) * sizeof(float));
      float *outs[1] = {jax->scratch_out};
      if (status == DS_OK) status = run_block(jax, &jax->constrain, jax->scratch_x, rows, outs, widths, 1, 0);
      if (status == DS_OK) status = jax_device_download(values, jax->scratch_out, (size_t)(rows * width) * 4);
    } else {
      float *outs[1] = {values};
      status = run_block(jax, &jax->constrain, x_rows, rows, outs, widths, 1, 0);
    }
    for (int64_t e = 0; status == DS_OK && e < rows * width; ++e) out[first * width + e] = (double)values[e];
  }
  if (jax->on_gpu) pthread_mutex_unlock(&jax->lock);
  free(x_rows);
  free(values);
  return status == DS_OK ? 0 : 1;
}

static void jax_destroy(void *self) {
  jax_target_t *jax = self;
  if (!jax) return;
  const char *stats = getenv("DSAMPLER_JAX_STATS");
  if (stats && stats[0] == '1' && jax->stat_runs > 0)
    fprintf(stderr, "%s: %lld trajectory program runs, %lld outputs not in place (%.3g GB copied back), %lld blocks "
            "staged; host ms a run: %.3f in the programs (dispatch to completion), %.3f views; ms in all: %.1f "
            "calls, %.1f waiting for the sampler's stream, %.1f compiling trajectory programs\n", jax->what,
            (long long)jax->stat_runs,
            (long long)jax->stat_moved_outputs, (double)jax->stat_moved_bytes / 1e9, (long long)jax->stat_staged_blocks,
            1e3 * jax->stat_run_s / (double)jax->stat_runs, 1e3 * jax->stat_views_s / (double)jax->stat_runs,
            1e3 * jax->stat_call_s, 1e3 * jax->stat_sync_s, 1e3 * jax->stat_compile_s);
  if (jax->runtime) {
    release_retired(jax);
    free(jax->retired);
    free(jax->retired_output);
    for (int d = 0; d < jax->n_data; ++d) pjrt_buffer_free(jax->runtime, jax->data[d].buffer);
    pjrt_program_free(jax->runtime, jax->logp_grad.program);
    pjrt_program_free(jax->runtime, jax->constrain.program);
    for (int m = 0; m < 2; ++m)
      for (int k = 0; k < jax->n_trajectory[m]; ++k) pjrt_program_free(jax->runtime, jax->trajectory[m][k].program.program);
    pjrt_close(jax->runtime);
  }
  for (int d = 0; d < jax->n_data; ++d) {
    free(jax->data[d].host);
    jax_device_free(jax->data[d].device);
  }
  jax_device_free(jax->scratch_x);
  jax_device_free(jax->scratch_lp);
  jax_device_free(jax->scratch_grad);
  jax_device_free(jax->scratch_out);
  jax_device_free(jax->scratch_p);
  jax_device_free(jax->scratch_eps);
  jax_device_free(jax->scratch_inv);
  jax_device_free(jax->first_device[0]);
  jax_device_free(jax->first_device[1]);
  for (int m = 0; m < 2; ++m)
    for (int k = 0; k < JAX_TRAJECTORY_MAX; ++k) free(jax->trajectory[m][k].code);
  for (int v = 0; jax->vars && v < jax->n_vars; ++v) free((char *)jax->vars[v].name);
  free(jax->vars);
  pthread_mutex_destroy(&jax->lock);
  free(jax);
}

/* ---- making the target ---- */

static int read_manifest(jax_target_t *jax, const char *folder, json_object **out) {
  char path[JAX_PATH_MAX * 2];
  snprintf(path, sizeof path, "%s/manifest.json", folder);
  struct stat info;
  if (stat(folder, &info) != 0 || !S_ISDIR(info.st_mode))
    return ds_fail(DS_ERR_INPUT, "%s: no such bundle folder (make one with dsampler-export)", jax->what);
  json_object *manifest = json_object_from_file(path);
  if (!manifest)
    return ds_fail(DS_ERR_INPUT, "%s: %s is not valid JSON (truncated or damaged? export the bundle again)",
                   jax->what, path);
  *out = manifest;
  const char *format = manifest_string(manifest, "format");
  if (!format || strcmp(format, JAX_BUNDLE_FORMAT) != 0)
    return ds_fail(DS_ERR_INPUT, "%s: %s is not a dsampler JAX bundle's manifest (format '%s')", jax->what, path,
                   format ? format : "missing");
  int64_t version = 0;
  DS_TRY(manifest_int(jax, manifest, "version", &version));
  if (version != JAX_BUNDLE_VERSION)
    return ds_fail(DS_ERR_INPUT, "%s: bundle format version %lld; this dsampler reads version %d (export it again "
                   "with this dsampler's dsampler-export)", jax->what, (long long)version, JAX_BUNDLE_VERSION);
  const char *dtype = manifest_string(manifest, "dtype");
  if (!dtype || strcmp(dtype, "float32") != 0)
    return ds_fail(DS_ERR_INPUT, "%s: the bundle's dtype is '%s' (dsampler runs float32 programs)", jax->what,
                   dtype ? dtype : "missing");
  DS_TRY(manifest_int(jax, manifest, "dim", &jax->dim));
  if (jax->dim < 1 || jax->dim > ((int64_t)1 << 24))
    return ds_fail(DS_ERR_INPUT, "%s: the bundle's dim is %lld", jax->what, (long long)jax->dim);
  DS_TRY(manifest_int(jax, manifest, "constrained_dim", &jax->constrained_dim));
  return DS_OK;
}

/* Scratch for a padded block (GPU clients only: CPU calls bring their own). */
static int make_scratch(jax_target_t *jax) {
  if (!jax->on_gpu) return DS_OK;
  const int64_t block = jax->logp_grad.block > jax->constrain.block ? jax->logp_grad.block : jax->constrain.block;
  DS_TRY(jax_device_alloc((void **)&jax->scratch_x, (size_t)(block * jax->dim) * sizeof(float)));
  DS_TRY(jax_device_alloc((void **)&jax->scratch_lp, (size_t)block * sizeof(float)));
  DS_TRY(jax_device_alloc((void **)&jax->scratch_grad, (size_t)(block * jax->dim) * sizeof(float)));
  DS_TRY(jax_device_alloc((void **)&jax->scratch_out,
                          (size_t)(jax->constrain.block * (jax->constrained_dim ? jax->constrained_dim : 1)) *
                              sizeof(float)));
  const int64_t trajectory = jax->n_trajectory[0] ? jax->trajectory[0][0].program.block : 0;
  if (trajectory > 0) {
    /* q, grad and logp of a padded block reuse the scratch above, grown to the trajectory's block. */
    if (trajectory > block) {
      jax_device_free(jax->scratch_x);
      jax_device_free(jax->scratch_lp);
      jax_device_free(jax->scratch_grad);
      jax->scratch_x = jax->scratch_lp = jax->scratch_grad = NULL;
      DS_TRY(jax_device_alloc((void **)&jax->scratch_x, (size_t)(trajectory * jax->dim) * sizeof(float)));
      DS_TRY(jax_device_alloc((void **)&jax->scratch_lp, (size_t)trajectory * sizeof(float)));
      DS_TRY(jax_device_alloc((void **)&jax->scratch_grad, (size_t)(trajectory * jax->dim) * sizeof(float)));
    }
    DS_TRY(jax_device_alloc((void **)&jax->scratch_p, (size_t)(trajectory * jax->dim) * sizeof(float)));
    DS_TRY(jax_device_alloc((void **)&jax->scratch_eps, (size_t)trajectory * sizeof(float)));
    DS_TRY(jax_device_alloc((void **)&jax->scratch_inv, (size_t)(trajectory * jax->dim) * sizeof(float)));
    /* Apart, each at an allocation's alignment: XLA refuses a buffer that is not 16-byte aligned. */
    for (int k = 0; k < 2; ++k) {
      const int32_t first = k == 0;
      DS_TRY(jax_device_alloc((void **)&jax->first_device[k], sizeof first));
      DS_TRY(jax_device_upload(jax->first_device[k], &first, sizeof first));
    }
    /* Not yet the default: measured on no GPU so far. */
    const char *order = getenv("DSAMPLER_JAX_STREAM_ORDER");
    if (order && order[0] == '1' && pjrt_has_streams(jax->runtime)) {
      DS_TRY(pjrt_ready_stream(jax->runtime, &jax->ready_stream));
      jax->stream_order = 1;
    }
  }
  return DS_OK;
}

static int open_bundle(jax_target_t *jax, const char *folder, const char *args, MPI_Comm comm) {
  json_object *manifest = NULL;
  int status = read_manifest(jax, folder, &manifest);
  if (status == DS_OK) status = read_vars(jax, manifest);
  if (status == DS_OK) status = read_data(jax, folder, manifest);
  char plugin[JAX_PATH_MAX];
  if (status == DS_OK) status = find_plugin(jax, args, comm, plugin, sizeof plugin);
  if (status == DS_OK) status = pjrt_open(plugin, jax->on_gpu, jax->on_gpu ? jax->on_gpu - 1 : 0, jax->what,
                                          &jax->runtime);
  if (status == DS_OK && jax->on_gpu && strcmp(pjrt_platform(jax->runtime), "cpu") == 0)
    status = ds_fail(DS_ERR_INPUT, "%s: the plugin %s runs on the CPU, and this run's arrays are on a GPU (give the "
                     "CUDA plugin, or --backend cpu)", jax->what, plugin);
  if (status == DS_OK && !jax->on_gpu && strcmp(pjrt_platform(jax->runtime), "cpu") != 0)
    status = ds_fail(DS_ERR_INPUT, "%s: the plugin %s runs on '%s', and this run's arrays are on the CPU (give a CPU "
                     "plugin: %s, or --backend cuda)", jax->what, plugin, pjrt_platform(jax->runtime),
                     JAX_PLUGIN_HINT_CPU);
  if (status == DS_OK) status = read_program(jax, folder, manifest, "logp_grad", &jax->logp_grad);
  if (status == DS_OK && jax->n_vars > 0) status = read_program(jax, folder, manifest, "constrain", &jax->constrain);
  /* DSAMPLER_JAX_NO_TRAJECTORY=1: a gradient call per leapfrog step (for measurements). */
  const char *no_trajectory = getenv("DSAMPLER_JAX_NO_TRAJECTORY");
  if (status == DS_OK && jax->on_gpu && !(no_trajectory && no_trajectory[0] == '1'))
    status = read_trajectories(jax, folder, manifest);
  if (status == DS_OK) status = make_data_buffers(jax);
  if (status == DS_OK) status = make_scratch(jax);
  json_object_put(manifest);
  return status;
}

/* One block of the logp_grad program at the origin: a bundle whose programs, block and data do
 * not agree fails here, naming the input, before anything is sampled. */
static int probe(jax_target_t *jax) {
  const int64_t rows = 1;
  float *x = calloc((size_t)jax->dim, sizeof *x), *grad = calloc((size_t)jax->dim, sizeof *grad), logp = 0.0f;
  int status = x && grad ? DS_OK : DS_FAIL_ALLOC("a probe row", (size_t)jax->dim * 8);
  if (status == DS_OK && jax_logp_grad(jax, x, rows, &logp, grad) != 0)
    status = ds_fail(DS_ERR_INPUT, "%s: the bundle's logp_grad program does not run on its inputs", jax->what);
  free(x);
  free(grad);
  return status;
}

int jax_target_create(const char *bundle, const char *args, const char *data_path, int device, MPI_Comm comm,
                      dsampler_target *out, target_extra_t *extra) {
  memset(out, 0, sizeof *out);
  memset(extra, 0, sizeof *extra);
  jax_target_t *jax = calloc(1, sizeof *jax);
  if (!jax) return DS_FAIL_ALLOC("a JAX target", sizeof *jax);
  pthread_mutex_init(&jax->lock, NULL);
  snprintf(jax->what, sizeof jax->what, "--target jax:%s", bundle);
  /* on_gpu holds the ordinal + 1, so that 0 means the CPU. */
  jax->on_gpu = device >= 0 ? device + 1 : 0;
  int status = DS_OK;
  if (data_path && data_path[0])
    status = ds_fail(DS_ERR_INPUT, "--data %s: a JAX bundle carries its data (export it again with dsampler-export "
                     "--data)", data_path);
  if (status == DS_OK && strlen(bundle) >= JAX_PATH_MAX)
    status = ds_fail(DS_ERR_INPUT, "--target jax:...: the bundle's path is longer than %d bytes", JAX_PATH_MAX - 1);
  static const char *const known[] = {"plugin", NULL};
  if (status == DS_OK) status = target_args_check(jax->what, args, known);
  if (status == DS_OK) status = open_bundle(jax, bundle, args, comm);
  if (status == DS_OK) status = probe(jax);
  if (status != DS_OK) {
    jax_destroy(jax);
    return status;
  }
  jax->on_gpu = jax->on_gpu ? 1 : 0;
  char folder[JAX_PATH_MAX];
  snprintf(folder, sizeof folder, "%s", bundle);
  while (strlen(folder) > 1 && folder[strlen(folder) - 1] == '/') folder[strlen(folder) - 1] = '\0';
  const char *base = strrchr(folder, '/') ? strrchr(folder, '/') + 1 : folder;
  snprintf(jax->name, sizeof jax->name, "jax:%.240s", base);

  out->abi_version = DSAMPLER_TARGET_ABI_VERSION;
  out->name = jax->name;
  out->var_name = "x";
  out->dim = jax->dim;
  out->self = jax;
  out->logp_grad = jax_logp_grad;
  out->logp_grad_cuda = jax->on_gpu ? jax_logp_grad_cuda : NULL;
  /* Both metrics' programs, or neither: the backend picks by the metric of the moment. */
  extra->leapfrog_cuda = jax->n_trajectory[0] > 0 ? jax_leapfrog_cuda : NULL;
  extra->leapfrog_self = jax;
  out->destroy = jax_destroy;
  out->n_vars = jax->n_vars;
  out->vars = jax->vars;
  out->constrained_dim = jax->constrained_dim;
  out->constrain = jax->n_vars > 0 ? jax_constrain : NULL;
  /* A call costs a program's launch: whole blocks from one thread (XLA has its own). */
  extra->constrain_rows_per_call = jax->n_vars > 0 ? jax->constrain.block : 0;
  return DS_OK;
}
