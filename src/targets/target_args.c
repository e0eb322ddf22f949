/* target_args.c: reading --target-args ("key=value,..."), for target.c and the built-ins. */
#include "target_args.h"

#include <string.h>

#include "status.h"

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

/* A key given twice in the user's --target-args is ambiguous. */
int target_args_check_duplicates(const char *args) {
  for (const char *p = args; p && *p;) {
    const char *end = strchr(p, ',');
    size_t length = end ? (size_t)(end - p) : strlen(p);
    const char *equals = memchr(p, '=', length);
    size_t key_length = equals ? (size_t)(equals - p) : length;
    if (key_length == 0)
      return ds_fail(DS_ERR_INPUT, "--target-args %s: an empty item or a value without its key (expected "
                     "key=value,key=value)", args);
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

const char *target_args_next(const char *item, char *key, size_t key_size, char *value, size_t value_size) {
  const char *end = strchr(item, ',');
  const size_t length = end ? (size_t)(end - item) : strlen(item);
  const char *equals = memchr(item, '=', length);
  key[0] = value[0] = '\0';
  const size_t key_length = equals ? (size_t)(equals - item) : 0, value_length = equals ? length - key_length - 1 : 0;
  if (equals && key_length < key_size && value_length < value_size) {
    memcpy(key, item, key_length);
    key[key_length] = '\0';
    memcpy(value, equals + 1, value_length);
    value[value_length] = '\0';
  }
  return end ? end + 1 : NULL;
}
