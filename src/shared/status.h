/* status.h: the one error convention of dsampler. Library code returns an int status (0 on
 * success) and records a message once, where the failure is seen; main() reports it. */
#ifndef DSAMPLER_STATUS_H
#define DSAMPLER_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

enum {
  DS_OK = 0,
  DS_ERR_INPUT = 2,     /* bad option, file or data from the user: refused before work */
  DS_ERR_IO = 3,        /* HDF5 or file system */
  DS_ERR_MPI = 4,
  DS_ERR_GPU = 5,       /* CUDA, cuRAND, cuBLAS, NCCL */
  DS_ERR_MEMORY = 6,
  DS_ERR_TARGET = 7,    /* the target's log density or gradient failed */
  DS_ERR_INTERNAL = 8,
  DS_ERR_CHECKPOINT = 9, /* a checkpoint that cannot be used; resume tries an older one */
  DS_HELP = 64,         /* --help was asked for: not an error */
  DS_INTERRUPTED = 75   /* stopped by a signal after a checkpoint: resumable */
};

/* Records "message" (printf-style) as the current error and returns code. The first error
 * recorded wins until ds_error_clear(), so the root cause is the one reported. */
int ds_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* As ds_fail, prefixed with the failing call's text ("CALL failed: "); with the source location
 * too where the environment sets DSAMPLER_ERROR_LOCATIONS (for whoever debugs dsampler). */
int ds_fail_at(int code, const char *file, int line, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
const char *ds_error_message(void);
void ds_error_set_message(const char *message);
void ds_error_clear(void);
/* `hook(1)` runs when an error is first recorded, `hook(0)` when it is cleared (comm.c's
 * watchdog uses it). One hook; NULL removes it. */
void ds_error_set_hook(void (*hook)(int recorded));

#define DS_TRY(expr)                          \
  do {                                        \
    int ds_try_status_ = (expr);              \
    if (ds_try_status_ != DS_OK) return ds_try_status_; \
  } while (0)

/* For a failing allocation of `bytes` for `what`. */
#define DS_FAIL_ALLOC(what, bytes) \
  ds_fail(DS_ERR_MEMORY, "out of memory allocating %s (%zu bytes)", (what), (size_t)(bytes))

#ifdef __cplusplus
}
#endif
#endif
