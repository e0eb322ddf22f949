/* status.c: the recorded error message behind ds_fail(). */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static char error_message[2048];
static int error_recorded;

static int record(int code, const char *prefix, const char *fmt, va_list ap) {
  if (error_recorded) return code;
  size_t used = 0;
  if (prefix) {
    snprintf(error_message, sizeof error_message, "%s", prefix);
    used = strlen(error_message);
  }
  vsnprintf(error_message + used, sizeof error_message - used, fmt, ap);
  error_recorded = 1;
  return code;
}

int ds_fail(int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(code, NULL, fmt, ap);
  va_end(ap);
  return code;
}

int ds_fail_at(int code, const char *file, int line, const char *call, const char *fmt, ...) {
  char prefix[512];
  snprintf(prefix, sizeof prefix, "%s:%d: %s: ", file, line, call);
  va_list ap;
  va_start(ap, fmt);
  record(code, prefix, fmt, ap);
  va_end(ap);
  return code;
}

const char *ds_error_message(void) { return error_recorded ? error_message : "no error recorded"; }

void ds_error_set_message(const char *message) {
  snprintf(error_message, sizeof error_message, "%s", message);
  error_recorded = 1;
}

void ds_error_clear(void) {
  error_recorded = 0;
  error_message[0] = '\0';
}
