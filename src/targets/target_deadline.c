/* target_deadline.c: the watch over calls into a target (target_deadline.h). Each thread that
 * calls the target owns a slot holding when its call began and what it is; the watching thread
 * looks at every slot ten times a second. A slot costs its thread two clock reads and two
 * atomic stores per call, nothing shared is locked. */
#include "target_deadline.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "status.h"

/* Threads watched per process; a thread past them runs its calls unwatched (OpenMP threads of
 * one rank are far fewer). */
#define DEADLINE_SLOTS 1024
#define DEADLINE_POLL_NS 100000000L

typedef struct deadline_slot {
  _Atomic int64_t started_ns; /* CLOCK_MONOTONIC; 0: no call in flight */
  _Atomic(const char *) call;
} deadline_slot_t;

static deadline_slot_t slots[DEADLINE_SLOTS];
static atomic_int slots_claimed;
static _Thread_local int thread_slot = -1;

static _Atomic int64_t timeout_ns;
static atomic_int watching;
static int watch_rank;
static char watch_host[256];
static int (*watch_stop_pending)(void);

static int64_t monotonic_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

int target_deadline_begin(const char *call) {
  if (thread_slot < 0) thread_slot = atomic_fetch_add(&slots_claimed, 1);
  if (thread_slot >= DEADLINE_SLOTS) return -1;
  deadline_slot_t *slot = &slots[thread_slot];
  atomic_store(&slot->call, call);
  atomic_store(&slot->started_ns, monotonic_ns());
  return thread_slot;
}

void target_deadline_end(int token) {
  if (token >= 0 && token < DEADLINE_SLOTS) atomic_store(&slots[token].started_ns, 0);
}

/* The call cannot be unwound and the other ranks may be waiting for this one in a collective:
 * MPI_Abort is the one way out that reaches them all. */
static void end_job(const char *call, double elapsed, double since_stop) {
  /* Where every rank is stuck (a model that loops forever), rank 0's report and MPI_Abort
   * usually come first and end the others: one line instead of one per rank. */
  if (watch_rank != 0) sleep(3);
  if (since_stop >= 0)
    fprintf(stderr, "dsampler: error: rank %d on %s: %s has not returned after %.1f s, %.1f s after the stop "
                    "request; ending every rank without a new checkpoint\n",
            watch_rank, watch_host, call, elapsed, since_stop);
  else
    fprintf(stderr, "dsampler: error: rank %d on %s: %s has not returned after %.1f s (--call-timeout %g); "
                    "ending every rank\n",
            watch_rank, watch_host, call, elapsed, (double)atomic_load(&timeout_ns) / 1e9);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  _exit(1);
}

static void *watch_main(void *unused) {
  (void)unused;
  const int64_t grace_ns = (int64_t)(TARGET_DEADLINE_STOP_GRACE_SECONDS * 1e9);
  int64_t stop_seen_ns = 0;
  for (;;) {
    const struct timespec pause = {0, DEADLINE_POLL_NS};
    nanosleep(&pause, NULL);
    const int64_t now = monotonic_ns(), limit = atomic_load(&timeout_ns);
    if (!stop_seen_ns && watch_stop_pending && watch_stop_pending()) stop_seen_ns = now;
    int claimed = atomic_load(&slots_claimed);
    if (claimed > DEADLINE_SLOTS) claimed = DEADLINE_SLOTS;
    for (int s = 0; s < claimed; ++s) {
      const int64_t started = atomic_load(&slots[s].started_ns);
      if (!started) continue;
      const char *call = atomic_load(&slots[s].call);
      if (now - started > limit) end_job(call, (double)(now - started) / 1e9, -1);
      /* A call that began after the stop request counts from its own start. */
      const int64_t waited_from = started > stop_seen_ns ? started : stop_seen_ns;
      if (stop_seen_ns && now - waited_from > grace_ns)
        end_job(call, (double)(now - started) / 1e9, (double)(now - stop_seen_ns) / 1e9);
    }
  }
  return NULL;
}

int target_deadline_start(double seconds, int rank, const char *host, int (*stop_pending)(void)) {
  atomic_store(&timeout_ns, (int64_t)(seconds * 1e9));
  if (atomic_exchange(&watching, 1)) return DS_OK;
  watch_rank = rank;
  snprintf(watch_host, sizeof watch_host, "%s", host);
  watch_stop_pending = stop_pending;
  pthread_t thread;
  pthread_attr_t attr;
  if (pthread_attr_init(&attr) != 0) return ds_fail(DS_ERR_INTERNAL, "cannot start the watch over target calls");
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  const int rc = pthread_create(&thread, &attr, watch_main, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    atomic_store(&watching, 0);
    return ds_fail(DS_ERR_INTERNAL, "cannot start the watch over target calls: %s", strerror(rc));
  }
  return DS_OK;
}
