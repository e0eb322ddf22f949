/* progress.h: the rank-0 progress line, on stderr: rewritten in place on a terminal, one line
 * every few seconds in a log. */
#ifndef DSAMPLER_PROGRESS_H
#define DSAMPLER_PROGRESS_H

#include <stdint.h>

typedef struct progress {
  int enabled;      /* rank 0 and not --quiet */
  int tty;
  double start, last_print, phase_start;
  int64_t total;    /* iterations in the whole run */
  int64_t phase_first;
  int printed_inline;
} progress_t;

double progress_now(void);
void progress_init(progress_t *p, int enabled, int64_t total);
/* Marks the start of a phase (warmup, sampling) at iteration `first`. */
void progress_phase(progress_t *p, int64_t first);
/* After iteration `done` (1-based count of iterations finished); `detail` is appended. */
void progress_update(progress_t *p, const char *phase, int64_t done, const char *detail);
/* Ends the in-place line, prints the closing line with wall time. */
void progress_finish(progress_t *p, const char *what);

#endif
