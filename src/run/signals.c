/* signals.c: the stop-request flag behind signals.h. */
#include "signals.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int number) {
  /* A second signal changes nothing: the checkpoint in progress completes. */
  if (!stop_signal) stop_signal = number;
}

void signals_install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGUSR1, &action, NULL);
  sigaction(SIGINT, &action, NULL);
  /* The `dsampler` launcher (launcher.c) blocked them before this program was loaded: one sent
   * meanwhile is pending and arrives now, as a stop request like any later one. */
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGTERM);
  sigaddset(&stops, SIGUSR1);
  sigaddset(&stops, SIGINT);
  sigprocmask(SIG_UNBLOCK, &stops, NULL);
}

void signals_restore_default(void) {
  signal(SIGTERM, SIG_DFL);
  signal(SIGUSR1, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  if (stop_signal) raise(stop_signal);
}

int signals_pending(void) { return stop_signal; }

const char *signals_reinstate(void) {
  static const struct { int number; const char *name; } stops[] = {{SIGTERM, "SIGTERM"}, {SIGUSR1, "SIGUSR1"},
                                                                   {SIGINT, "SIGINT"}};
  const char *changed = NULL;
  sigset_t blocked;
  sigprocmask(SIG_BLOCK, NULL, &blocked);
  for (size_t i = 0; i < sizeof stops / sizeof stops[0]; ++i) {
    struct sigaction now;
    if (sigaction(stops[i].number, NULL, &now) != 0) continue;
    if ((now.sa_handler != on_stop_signal || sigismember(&blocked, stops[i].number) == 1) && !changed)
      changed = stops[i].name;
  }
  if (changed) signals_install();
  return changed;
}
