/* progress.c: the progress line. */
#include "progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

double progress_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_init(progress_t *p, int enabled, int64_t total) {
  p->enabled = enabled;
  /* Progress goes to stderr, so stdout stays clean for results; under mpirun a rank's stdout
   * is a pseudo-terminal even when the job's output goes to a file, stderr is not. */
  p->tty = isatty(STDERR_FILENO);
  p->start = p->phase_start = progress_now();
  p->last_print = 0;
  p->total = total;
  p->phase_first = 0;
  p->printed_inline = 0;
}

void progress_phase(progress_t *p, int64_t first) {
  p->phase_start = progress_now();
  p->phase_first = first;
}

static void format_seconds(double seconds, char *out, size_t size) {
  long s = (long)(seconds + 0.5);
  if (s >= 3600)
    snprintf(out, size, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    snprintf(out, size, "%ld:%02ld", s / 60, s % 60);
}

void progress_update(progress_t *p, const char *phase, int64_t done, const char *detail) {
  if (!p->enabled) return;
  double now = progress_now();
  int last = done >= p->total;
  double interval = p->tty ? 0.2 : 5.0;
  if (!last && now - p->last_print < interval) return;
  p->last_print = now;
  double elapsed = now - p->phase_start;
  double rate = elapsed > 0 ? (double)(done - p->phase_first) / elapsed : 0.0;
  char eta[32];
  format_seconds(rate > 0 ? (double)(p->total - done) / rate : 0.0, eta, sizeof eta);
  char line[512];
  snprintf(line, sizeof line, "%-8s %lld/%lld  %.1f it/s  ETA %s  %s", phase, (long long)done,
           (long long)p->total, rate, eta, detail ? detail : "");
  if (p->tty) {
    fprintf(stderr, "\r\033[K%s", line);
    p->printed_inline = 1;
  } else {
    fprintf(stderr, "%s\n", line);
  }
  fflush(stderr);
}

void progress_finish(progress_t *p, const char *what) {
  if (!p->enabled) return;
  if (p->printed_inline) fprintf(stderr, "\n");
  char wall[32];
  format_seconds(progress_now() - p->start, wall, sizeof wall);
  printf("%s in %s (%.2f s wall)\n", what, wall, progress_now() - p->start);
  fflush(stdout);
}
