/* signals.h: SIGTERM, SIGUSR1 and SIGINT ask the run to stop at the end of the current
 * iteration, after a checkpoint (exit 75: resumable). The handler only sets a flag; the
 * ranks agree on it collectively, so all stop at the same iteration. */
#ifndef DSAMPLER_SIGNALS_H
#define DSAMPLER_SIGNALS_H

void signals_install(void);
/* The number of the first stop signal received, 0 if none. */
int signals_pending(void);

#endif
