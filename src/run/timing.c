/* timing.c: --timing (timing.h). */
#include "timing.h"

#include <string.h>

#include "progress.h"
#include "status.h"

void timing_init(timing_t *t, backend_t *b, int enabled, const char *const *sections, int n_sections,
                 const char *const *phases, int n_phases) {
  memset(t, 0, sizeof *t);
  t->enabled = enabled && b && b->timer_mark && b->timer_elapsed;
  t->backend = b;
  t->sections = sections;
  t->n_sections = n_sections < TIMING_MAX_SECTIONS ? n_sections : TIMING_MAX_SECTIONS;
  t->phases = phases;
  t->n_phases = n_phases < TIMING_MAX_PHASES ? n_phases : TIMING_MAX_PHASES;
  t->run_start = progress_now();
}

int timing_begin(timing_t *t, int phase) {
  if (!t->enabled) return DS_OK;
  if (t->loop_start == 0.0) t->loop_start = progress_now();
  t->phase = phase;
  t->laps = 0;
  t->active = 1;
  t->iteration_start = progress_now();
  return t->backend->timer_mark(t->backend, 0);
}

int timing_lap(timing_t *t, int section, int happened) {
  if (!t->enabled || !t->active || !happened || section < 0 || section >= t->n_sections) return DS_OK;
  if (t->laps + 1 >= BACKEND_TIMER_SLOTS) return ds_fail(DS_ERR_INTERNAL, "timing: more than %d sections in an iteration", BACKEND_TIMER_SLOTS - 1);
  t->lap_section[++t->laps] = section;
  return t->backend->timer_mark(t->backend, t->laps);
}

int timing_end(timing_t *t) {
  if (!t->enabled || !t->active) return DS_OK;
  t->active = 0;
  for (int k = 1; k <= t->laps; ++k) {
    double ms = 0.0;
    DS_TRY(t->backend->timer_elapsed(t->backend, k - 1, k, &ms));
    t->ms[t->phase][t->lap_section[k]] += ms;
    t->times[t->phase][t->lap_section[k]] += 1;
  }
  const double now = progress_now();
  t->wall[t->phase] += now - t->iteration_start;
  t->iterations[t->phase] += 1;
  t->loop_end = now;
  return DS_OK;
}

void timing_report(const timing_t *t, FILE *f) {
  if (!t->enabled) return;
  const double end = progress_now();
  fprintf(f, "timing (rank 0; ms; %s):\n",
          t->backend->on_device ? "the GPU stream's time between CUDA events" : "the clock between sections");
  if (t->loop_start > 0.0)
    fprintf(f, "  before the first iteration %.1f ms, after the last %.1f ms\n", 1e3 * (t->loop_start - t->run_start),
            1e3 * (end - t->loop_end));
  for (int p = 0; p < t->n_phases; ++p) {
    const int64_t n = t->iterations[p];
    if (n == 0) continue;
    double sum = 0.0;
    for (int s = 0; s < t->n_sections; ++s) sum += t->ms[p][s];
    fprintf(f, "  %s: %lld iterations, %.1f ms wall, %.4f ms an iteration (sections %.4f)\n", t->phases[p],
            (long long)n, 1e3 * t->wall[p], 1e3 * t->wall[p] / (double)n, sum / (double)n);
    fprintf(f, "    %-24s %12s %8s %12s %14s\n", "section", "total", "times", "each", "an iteration");
    for (int s = 0; s < t->n_sections; ++s) {
      if (t->times[p][s] == 0) continue;
      fprintf(f, "    %-24s %12.3f %8lld %12.4f %14.4f\n", t->sections[s], t->ms[p][s], (long long)t->times[p][s],
              t->ms[p][s] / (double)t->times[p][s], t->ms[p][s] / (double)n);
    }
  }
  fflush(f);
}
