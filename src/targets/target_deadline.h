/* target_deadline.h: deadlines on the calls into a plugin or Stan model (--call-timeout). A
 * call that never returns would leave its rank, and every rank waiting for it in the next
 * collective, hanging until the job's time limit; a thread of its own watches the calls in
 * flight and ends the job on every rank (MPI_Abort: the stuck call cannot be unwound) with one
 * line naming the rank, the call and how long it has run. */
#ifndef DSAMPLER_TARGET_DEADLINE_H
#define DSAMPLER_TARGET_DEADLINE_H

/* After a stop request (SIGTERM, SIGUSR1, SIGINT) a call in flight has at most this long to
 * return before the job is ended: the run can only checkpoint once the call is back, and a
 * scheduler's warning before the time limit is a few minutes at most. */
#define TARGET_DEADLINE_STOP_GRACE_SECONDS 30.0

/* Starts the watching thread (once per process; later calls change the deadline). A call that
 * runs past `seconds`, or past the stop grace after stop_pending() turned non-zero, ends the
 * job; rank and host name this process in the message. */
int target_deadline_start(double seconds, int rank, const char *host, int (*stop_pending)(void));

/* Marks the calling thread as inside `call` ("plugin libfoo.so: logp_grad", a string that
 * lives as long as the target) until target_deadline_end(token). Safe from any thread. */
int target_deadline_begin(const char *call);
void target_deadline_end(int token);

#endif
