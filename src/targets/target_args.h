/* target_args.h: --target-args, "key=value,key=value": finding a key's value, refusing keys a
 * target does not take or a key given twice. Used by target.c (which builds the arguments) and
 * by the built-ins (which read them), so neither needs the other for it. */
#ifndef DSAMPLER_TARGET_ARGS_H
#define DSAMPLER_TARGET_ARGS_H

#include <stddef.h>

/* Finds `key` in "key=value,key=value" and copies its value; returns 1 when found. */
int target_args_get(const char *args, const char *key, char *value, size_t value_size);
/* Returns DS_ERR_INPUT naming the first key of args not in the NULL-terminated `known`. */
int target_args_check(const char *target_name, const char *args, const char *const *known);
/* The key=value item of args at `item` into key and value ("" where it has no '=' or a part
 * is too long); returns the next item, or NULL after the last. */
const char *target_args_next(const char *item, char *key, size_t key_size, char *value, size_t value_size);
/* Returns DS_ERR_INPUT naming a key that args gives twice. */
int target_args_check_duplicates(const char *args);

#endif
