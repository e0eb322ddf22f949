/* status.c: the recorded error message behind ds_fail(). Failures can be recorded from OpenMP
 * threads (a target's logp_grad fails inside a parallel loop), so the first recorder claims the
 * buffer atomically; the others leave it alone, as "the first error wins" says. */
#include "status.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MESSAGE_FREE = 0, MESSAGE_WRITING = 1, MESSAGE_RECORDED = 2 };

static char error_message[2048];
static atomic_int error_state = MESSAGE_FREE;
static void (*_Atomic error_hook)(int recorded);

void ds_error_set_hook(void (*hook)(int recorded)) { atomic_store(&error_hook, hook); }

static void call_hook(int recorded) {
  void (*hook)(int) = atomic_load(&error_hook);
  if (hook) hook(recorded);
}

/* One line per error: a message that spans lines breaks `grep` over job logs and the tests'
 * "one line naming the input" rule, so line breaks inside a message become spaces. */
static void flatten(char *text) {
  for (char *c = text; *c; ++c)
    if (*c == '\n' || *c == '\r') *c = ' ';
}

static int record(int code, const char *prefix, const char *fmt, va_list ap) {
  int expected = MESSAGE_FREE;
  if (!atomic_compare_exchange_strong(&error_state, &expected, MESSAGE_WRITING)) return code;
  size_t used = 0;
  if (prefix) {
    snprintf(error_message, sizeof error_message, "%s", prefix);
    used = strlen(error_message);
  }
  vsnprintf(error_message + used, sizeof error_message - used, fmt, ap);
  flatten(error_message);
  atomic_store(&error_state, MESSAGE_RECORDED);
  call_hook(1);
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
  const char *locations = getenv("DSAMPLER_ERROR_LOCATIONS");
  if (locations && locations[0] && strcmp(locations, "0") != 0)
    snprintf(prefix, sizeof prefix, "%s:%d: %s: ", file, line, call);
  else
    snprintf(prefix, sizeof prefix, "%s failed: ", call);
  va_list ap;
  va_start(ap, fmt);
  record(code, prefix, fmt, ap);
  va_end(ap);
  return code;
}

const char *ds_error_message(void) {
  return atomic_load(&error_state) == MESSAGE_RECORDED ? error_message : "no error recorded";
}

/* Called on the main thread only (after an agreement), outside any parallel region. */
void ds_error_set_message(const char *message) {
  atomic_store(&error_state, MESSAGE_WRITING);
  snprintf(error_message, sizeof error_message, "%s", message);
  flatten(error_message);
  atomic_store(&error_state, MESSAGE_RECORDED);
}

void ds_error_clear(void) {
  atomic_store(&error_state, MESSAGE_WRITING);
  error_message[0] = '\0';
  atomic_store(&error_state, MESSAGE_FREE);
  call_hook(0);
}
