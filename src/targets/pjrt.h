/* pjrt.h: the few PJRT C API calls a JAX target needs (pjrt_c_api.h, vendored from OpenXLA),
 * behind dsampler's status convention: load a plugin (XLA's CPU plugin or the CUDA plugin that
 * a jax[cuda] install carries), make a client on one device, compile StableHLO, wrap memory we
 * own as buffers without copying, and run a program to completion. Every failure is recorded
 * with ds_fail (DS_ERR_INPUT while loading and compiling, DS_ERR_TARGET while running) and
 * carries PJRT's own message. */
#ifndef DSAMPLER_PJRT_H
#define DSAMPLER_PJRT_H

#include <stddef.h>
#include <stdint.h>

#include "pjrt_c_api.h"

typedef struct pjrt_runtime pjrt_runtime_t;
typedef struct pjrt_program pjrt_program_t;

/* Element types of the buffers a bundle's programs take. */
typedef enum { PJRT_ELEMENT_F32, PJRT_ELEMENT_S32, PJRT_ELEMENT_F64 } pjrt_element_t;

/* Loads the plugin at `plugin_path` (dlopen'd from where it lies, so that its RPATH finds the
 * CUDA libraries installed beside it) and makes a client on one device: for a GPU plugin
 * (on_gpu) the one with CUDA ordinal `device_ordinal`, without preallocation, so that XLA
 * takes only what the programs need beside dsampler's own arrays. `what` names the input in
 * messages ("--target jax:model.dsj"). */
int pjrt_open(const char *plugin_path, int on_gpu, int device_ordinal, const char *what, pjrt_runtime_t **out);
void pjrt_close(pjrt_runtime_t *runtime);
/* The plugin's PJRT API version, e.g. "0.115", and its platform name ("cpu", "cuda"). */
const char *pjrt_version(const pjrt_runtime_t *runtime);
const char *pjrt_platform(const pjrt_runtime_t *runtime);

/* Compiles a StableHLO module (portable artifact bytes or MLIR text). `name` names the program
 * in messages. */
int pjrt_compile(pjrt_runtime_t *runtime, const void *code, size_t size, const char *name, pjrt_program_t **out);
void pjrt_program_free(pjrt_runtime_t *runtime, pjrt_program_t *program);

/* A buffer over memory the caller owns (device memory for a GPU client, host memory aligned
 * to 64 bytes for the CPU client), C-order dims. The memory must outlive the buffer. */
int pjrt_view(pjrt_runtime_t *runtime, void *memory, const int64_t *dims, int rank, pjrt_element_t type,
              PJRT_Buffer **out);
/* The same, defined once `stream` (the plugin's stream for external readiness, from
 * pjrt_ready_stream; 0: at once) reaches the point where the view is made. */
int pjrt_view_on(pjrt_runtime_t *runtime, void *memory, const int64_t *dims, int rank, pjrt_element_t type,
                 intptr_t stream, PJRT_Buffer **out);
/* PJRT's stream extension (the CUDA plugin has it, the CPU plugin not): whether there is one;
 * the plugin's stream for external readiness (a cudaStream_t); a wait queued on `stream` (a
 * cudaStream_t) for `buffer` to be defined, the host not waiting. */
int pjrt_has_streams(const pjrt_runtime_t *runtime);
int pjrt_ready_stream(pjrt_runtime_t *runtime, intptr_t *stream);
int pjrt_wait_on_stream(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, intptr_t stream);
void pjrt_buffer_free(pjrt_runtime_t *runtime, PJRT_Buffer *buffer);
/* Where a buffer's values are (device or host memory, as the client is). */
int pjrt_buffer_memory(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, void **memory);
/* Copies a buffer's `bytes` bytes to host memory `dst`, waiting for it. */
int pjrt_buffer_to_host(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, void *dst, size_t bytes);

/* Runs `program` on arguments args [n_args] and waits until it is done; outputs [n_outputs]
 * receive new buffers (the caller frees them). Safe from several threads at once. */
int pjrt_execute(pjrt_runtime_t *runtime, pjrt_program_t *program, PJRT_Buffer *const *args, size_t n_args,
                 PJRT_Buffer **outputs, size_t n_outputs);
/* pjrt_execute, returning once the program is queued when `await` is 0 (its outputs are defined
 * when it ends: order work after them with pjrt_wait_on_stream, and free them after that). */
int pjrt_execute_queued(pjrt_runtime_t *runtime, pjrt_program_t *program, PJRT_Buffer *const *args, size_t n_args,
                        PJRT_Buffer **outputs, size_t n_outputs, int await);
/* The error a queued program left on its output `buffer` (DS_OK when it ran; waits for it). */
int pjrt_buffer_status(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, const char *what);
/* The number of outputs a program returns. */
size_t pjrt_program_outputs(const pjrt_program_t *program);

#endif
