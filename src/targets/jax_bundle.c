/* jax_bundle.c: reading a JAX bundle (jax_bundle.h): the manifest, checked field by field,
 * the data inputs and programs, each checked against its recorded SHA-256, and the PJRT plugin
 * to run them. Every failure names the input and says how to mend it. */
#include "jax_bundle.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "status.h"
#include "target_args.h"

void *jax_aligned_zeroed(size_t bytes) {
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
  *bytes = jax_aligned_zeroed(*size);
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

int jax_read_vars(jax_target_t *jax, json_object *manifest) {
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

/* The data inputs: each file's size must be its shape's, in float32, float64 (a bundle that
 * computes in float64) or int32. */
int jax_read_data(jax_target_t *jax, const char *folder, json_object *manifest) {
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
    else if (strcmp(dtype, "float64") == 0) input->type = PJRT_ELEMENT_F64;
    else if (strcmp(dtype, "int32") == 0) input->type = PJRT_ELEMENT_S32;
    else
      return ds_fail(DS_ERR_INPUT, "%s: data input %s has dtype '%s' (expected float32, float64 or int32)", jax->what,
                     name, dtype);
    char of[160];
    snprintf(of, sizeof of, "data input %.120s", name);
    DS_TRY(manifest_shape(jax, member(entry, "shape"), of, &input->rank, input->dims));
    size_t expected = input->type == PJRT_ELEMENT_F64 ? 8 : 4;
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
    const char *want = data->type == PJRT_ELEMENT_F32   ? "float32"
                       : data->type == PJRT_ELEMENT_F64 ? "float64"
                                                        : "int32";
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
int jax_read_program(jax_target_t *jax, const char *folder, json_object *manifest, const char *name,
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
int jax_read_trajectories(jax_target_t *jax, const char *folder, json_object *manifest) {
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
int jax_find_plugin(const jax_target_t *jax, const char *args, MPI_Comm comm, char *path, size_t size) {
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

int jax_read_manifest(jax_target_t *jax, const char *folder, json_object **out) {
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

