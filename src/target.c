/* target.c: opens the run's target, built-in or plugin, and checks what it reports. */
#include "target.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "targets_builtin.h"

int target_args_get(const char *args, const char *key, char *value, size_t value_size) {
  /* The last occurrence wins, as on the command line (target_open refuses a key the user
   * gives twice; "dim=" and "data=" from --dim and --data come first). */
  size_t key_length = strlen(key);
  const char *p = args, *found = NULL;
  size_t found_length = 0;
  while (p && *p) {
    const char *end = strchr(p, ',');
    size_t length = end ? (size_t)(end - p) : strlen(p);
    if (length > key_length && strncmp(p, key, key_length) == 0 && p[key_length] == '=') {
      found = p + key_length + 1;
      found_length = length - key_length - 1;
    }
    p = end ? end + 1 : NULL;
  }
  if (!found) return 0;
  if (found_length < value_size) {
    memcpy(value, found, found_length);
    value[found_length] = '\0';
  } else if (value_size > 4) {
    /* Too long for the caller's buffer: never a silently shortened number or path. The
     * marker makes any parse fail, with the value's start in the message. */
    memcpy(value, found, value_size - 4);
    memcpy(value + value_size - 4, "...", 4);
  } else if (value_size > 0) {
    value[0] = '\0';
  }
  return 1;
}

/* A key given twice in the user's --target-args: ambiguous, refused. */
static int check_duplicate_keys(const char *args) {
  for (const char *p = args; p && *p;) {
    const char *end = strchr(p, ',');
    size_t length = end ? (size_t)(end - p) : strlen(p);
    const char *equals = memchr(p, '=', length);
    size_t key_length = equals ? (size_t)(equals - p) : length;
    for (const char *q = end ? end + 1 : NULL; q && *q;) {
      const char *q_end = strchr(q, ',');
      size_t q_length = q_end ? (size_t)(q_end - q) : strlen(q);
      const char *q_equals = memchr(q, '=', q_length);
      size_t q_key_length = q_equals ? (size_t)(q_equals - q) : q_length;
      if (q_key_length == key_length && strncmp(p, q, key_length) == 0)
        return ds_fail(DS_ERR_INPUT, "--target-args: '%.*s' is given twice; give each parameter once", (int)key_length, p);
      q = q_end ? q_end + 1 : NULL;
    }
    p = end ? end + 1 : NULL;
  }
  return DS_OK;
}

int target_args_check(const char *target_name, const char *args, const char *const *known) {
  const char *p = args;
  while (p && *p) {
    const char *end = strchr(p, ',');
    size_t length = end ? (size_t)(end - p) : strlen(p);
    const char *equals = memchr(p, '=', length);
    if (!equals)
      return ds_fail(DS_ERR_INPUT, "--target-args: expected key=value, got '%.*s'", (int)length, p);
    size_t key_length = (size_t)(equals - p);
    int found = 0;
    for (const char *const *k = known; *k; ++k)
      if (strlen(*k) == key_length && strncmp(*k, p, key_length) == 0) found = 1;
    if (!found) {
      char list[512] = "";
      for (const char *const *k = known; *k; ++k) {
        if (strcmp(*k, "dim") == 0) continue;
        strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, *k, sizeof list - strlen(list) - 1);
      }
      return ds_fail(DS_ERR_INPUT, "--target-args: target '%s' has no parameter '%.*s' (it takes: %s)",
                     target_name, (int)key_length, p, list[0] ? list : "none");
    }
    p = end ? end + 1 : NULL;
  }
  return DS_OK;
}

static int check_reported(const char *spec, const dsampler_target *t, int64_t dim) {
  if (t->abi_version != DSAMPLER_TARGET_ABI_VERSION)
    return ds_fail(DS_ERR_INPUT, "--target %s: ABI version %d, this dsampler speaks version %d",
                   spec, t->abi_version, DSAMPLER_TARGET_ABI_VERSION);
  if (!t->logp_grad)
    return ds_fail(DS_ERR_INPUT, "--target %s: provides no logp_grad (the host entry is required)", spec);
  if (t->dim <= 0)
    return ds_fail(DS_ERR_INPUT, "--target %s: dimension %lld; give a positive --dim", spec, (long long)t->dim);
  if (dim > 0 && t->dim != dim)
    return ds_fail(DS_ERR_INPUT, "--target %s: has dimension %lld but --dim is %lld", spec,
                   (long long)t->dim, (long long)dim);
  return DS_OK;
}

int target_open(const char *spec, const char *args, const char *data_path, int64_t dim, MPI_Comm comm,
                target_handle_t *out) {
  memset(out, 0, sizeof *out);
  if (!data_path) data_path = "";
  DS_TRY(check_duplicate_keys(args));
  if (strchr(data_path, ','))
    return ds_fail(DS_ERR_INPUT, "--data %s: the path may not contain a comma", data_path);
  char data_text[8];
  if (data_path[0] && target_args_get(args, "data", data_text, sizeof data_text))
    return ds_fail(DS_ERR_INPUT, "--data and --target-args data=...: give the dataset once");
  size_t full_size = strlen(args) + strlen(data_path) + 64;
  char *full_args = malloc(full_size);
  if (!full_args) return DS_FAIL_ALLOC("target arguments", full_size);
  /* "dim=D,data=FILE,<args>", each part only when given. */
  int used = 0;
  full_args[0] = '\0';
  if (dim > 0) used += snprintf(full_args + used, full_size - (size_t)used, "dim=%lld", (long long)dim);
  if (data_path[0])
    used += snprintf(full_args + used, full_size - (size_t)used, "%sdata=%s", used ? "," : "", data_path);
  if (args[0]) snprintf(full_args + used, full_size - (size_t)used, "%s%s", used ? "," : "", args);

  int status;
  if (strncmp(spec, "plugin:", 7) == 0) {
    const char *path = spec + 7;
    out->library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!out->library) {
      free(full_args);
      return ds_fail(DS_ERR_INPUT, "--target %s: cannot load the plugin: %s", spec, dlerror());
    }
    dsampler_target_create_fn create;
    *(void **)&create = dlsym(out->library, "dsampler_target_create");
    if (!create) {
      char why[512];
      const char *error = dlerror(); /* valid only until the dlclose below */
      snprintf(why, sizeof why, "%s", error ? error : "symbol not found");
      free(full_args);
      dlclose(out->library);
      out->library = NULL;
      return ds_fail(DS_ERR_INPUT,
                     "--target %s: the plugin exports no dsampler_target_create (%s); define it with C linkage "
                     "as in src/dsampler_target.h",
                     spec, why);
    }
    int rc = create(full_args, comm, &out->target);
    if (rc != 0) {
      /* A plugin that fails cleans up after itself: nothing it returned is trusted. */
      memset(&out->target, 0, sizeof out->target);
      status = ds_fail(DS_ERR_INPUT, "--target %s: dsampler_target_create(\"%s\") failed (returned %d)", spec,
                       full_args, rc);
    } else if (out->target.abi_version != DSAMPLER_TARGET_ABI_VERSION) {
      /* Another ABI's struct layout: not even its destroy can be called safely. */
      status = ds_fail(DS_ERR_INPUT, "--target %s: the plugin was built for target ABI version %d; this dsampler "
                       "speaks version %d (rebuild it against this dsampler_target.h)",
                       spec, out->target.abi_version, DSAMPLER_TARGET_ABI_VERSION);
      memset(&out->target, 0, sizeof out->target);
    } else {
      status = DS_OK;
    }
  } else {
    status = builtin_target_create(spec, full_args, comm, &out->target);
  }
  free(full_args);
  if (status == DS_OK) status = check_reported(spec, &out->target, dim);
  if (status == DS_OK && !out->target.name) out->target.name = spec;
  if (status == DS_OK && !out->target.var_name) out->target.var_name = "x";
  if (status != DS_OK) target_close(out);
  return status;
}

void target_close(target_handle_t *handle) {
  if (handle->target.destroy) handle->target.destroy(handle->target.self);
  handle->target.destroy = NULL;
  if (handle->library) dlclose(handle->library);
  handle->library = NULL;
}

int target_set_minibatch(const dsampler_target *t, int64_t batch_size, uint64_t seed, int64_t iteration) {
  return builtin_target_set_batch(t, batch_size, seed, iteration);
}
