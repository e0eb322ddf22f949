/* signals.h: SIGTERM, SIGUSR1 and SIGINT ask the run to stop at the end of the current
 * iteration, after a checkpoint (exit 75: resumable). The handler only sets a flag; the
 * ranks agree on it collectively, so all stop at the same iteration. */
#ifndef DSAMPLER_SIGNALS_H
#define DSAMPLER_SIGNALS_H

/* Installs the flag-setting handler: main calls it first, before MPI starts, so that a stop
 * arriving at any moment (Slurm's --signal may come just after a requeue) is a request, never a
 * kill. */
void signals_install(void);
/* For the commands that are no sampling run (summary, stan, targets): the signals' default
 * actions back, and a stop that arrived since signals_install acted on now. */
void signals_restore_default(void);
/* The number of the first stop signal received, 0 if none. */
int signals_pending(void);
/* Whether the stop signals still reach the flag (and are not blocked): where code run in this
 * process (a plugin) replaced the handler, ignored a signal or blocked it, the handler is put
 * back; returns the name of the first signal that was changed, or NULL when none was. */
const char *signals_reinstate(void);

#endif
