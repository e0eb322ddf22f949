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
}

void signals_restore_default(void) {
  signal(SIGTERM, SIG_DFL);
  signal(SIGUSR1, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  if (stop_signal) raise(stop_signal);
}

int signals_pending(void) { return stop_signal; }
