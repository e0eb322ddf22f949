/* timing.h: --timing, where an iteration's time goes. Each iteration is cut into sections by
 * marks the backend makes when the work queued before them is done (CUDA events on the GPU's
 * stream, the clock on the CPU), so a section's time is the stream's time from one mark to the
 * next: its kernels, and any wait for the host between them. At the end rank 0 prints, for each
 * phase, each section's total, its count and its mean, beside the phase's wall time. Off (the
 * default) it does nothing: no marks, no waits. */
#ifndef DSAMPLER_TIMING_H
#define DSAMPLER_TIMING_H

#include <stdint.h>
#include <stdio.h>

#include "backend.h"

enum { TIMING_MAX_SECTIONS = 14, TIMING_MAX_PHASES = 2 };

typedef struct timing {
  int enabled;
  backend_t *backend;
  int n_sections, n_phases;
  const char *const *sections; /* names, [n_sections] */
  const char *const *phases;   /* names, [n_phases] */
  int active;                  /* between timing_begin and timing_end */
  int phase, laps;             /* the current iteration's phase and marks after its first */
  int lap_section[BACKEND_TIMER_SLOTS];
  double ms[TIMING_MAX_PHASES][TIMING_MAX_SECTIONS];
  int64_t times[TIMING_MAX_PHASES][TIMING_MAX_SECTIONS];
  int64_t iterations[TIMING_MAX_PHASES];
  double wall[TIMING_MAX_PHASES]; /* host seconds from each iteration's start to its end */
  double iteration_start;
  double run_start, loop_start, loop_end; /* host clock: before setup, first and last iteration */
} timing_t;

void timing_init(timing_t *t, backend_t *b, int enabled, const char *const *sections, int n_sections,
                 const char *const *phases, int n_phases);
/* The start of an iteration of `phase`. */
int timing_begin(timing_t *t, int phase);
/* The end of `section`, when it ran (happened = 0: no mark, and the section is not counted).
 * Outside an iteration it does nothing. */
int timing_lap(timing_t *t, int section, int happened);
/* The end of the iteration: waits for its last mark and adds its sections up. */
int timing_end(timing_t *t);
/* Rank 0's table (sections that never ran are left out). */
void timing_report(const timing_t *t, FILE *f);

#endif
