/* pjrt.c: PJRT C API calls behind dsampler's status convention (pjrt.h). Structs are sized by
 * the vendored header (API 0.81); plugins accept callers of older minor versions, and every
 * entry used here predates it. */
#include "pjrt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "shared_object.h"

/* Oldest plugin API whose calls and structs this file relies on. */
#define PJRT_OLDEST_MINOR 40

/* PJRT's stream extension (xla/pjrt/c/pjrt_c_api_stream_extension.h, version 0): the plugin's
 * stream for external readiness and a device-side wait on a buffer. Its layout is ABI. */
typedef struct {
  size_t struct_size;
  PJRT_Device *device;
  intptr_t stream; /* out */
} stream_get_args_t;
typedef struct {
  size_t struct_size;
  intptr_t stream;
  PJRT_Buffer *buffer;
} stream_wait_args_t;
typedef struct {
  PJRT_Extension_Base base;
  PJRT_Error *(*get_stream)(stream_get_args_t *args);
  PJRT_Error *(*wait_stream)(stream_wait_args_t *args);
} stream_extension_t;

struct pjrt_runtime {
  void *library;
  const stream_extension_t *streams; /* NULL where the plugin has none (the CPU plugin) */
  const PJRT_Api *api;
  PJRT_Client *client;
  PJRT_Device *device;
  PJRT_Memory *memory; /* the device's default memory, where views live */
  char what[320];      /* the input messages name */
  char version[32];
  char platform[32];
};

struct pjrt_program {
  PJRT_LoadedExecutable *executable;
  size_t outputs;
  char name[64];
};

/* PJRT's message for `error` (then destroyed) into `text`. */
static void error_text(const PJRT_Api *api, PJRT_Error *error, char *text, size_t size) {
  PJRT_Error_Message_Args message = {.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE, .error = error};
  api->PJRT_Error_Message(&message);
  snprintf(text, size, "%.*s", (int)(message.message_size < 1200 ? message.message_size : 1200), message.message);
  for (char *c = text; *c; ++c)
    if (*c == '\n' || *c == '\r') *c = ' ';
  PJRT_Error_Destroy_Args destroy = {.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE, .error = error};
  api->PJRT_Error_Destroy(&destroy);
}

/* Records a failed call: "WHAT: CALL: PJRT's message". */
static int fail_pjrt(const pjrt_runtime_t *runtime, int code, PJRT_Error *error, const char *call) {
  char text[1280];
  error_text(runtime->api, error, text, sizeof text);
  return ds_fail(code, "%s: %s: %s", runtime->what, call, text);
}

#define PJRT_TRY(runtime, code, expr, call)                                     \
  do {                                                                          \
    PJRT_Error *pjrt_error_ = (expr);                                           \
    if (pjrt_error_) return fail_pjrt((runtime), (code), pjrt_error_, (call)); \
  } while (0)

/* PJRT_Plugin_Initialize once per plugin in the process (a second client of the same plugin,
 * as tests make, must not initialize it again). */
static pthread_mutex_t initialized_lock = PTHREAD_MUTEX_INITIALIZER;
static const PJRT_Api *initialized[8];

static int initialize_once(pjrt_runtime_t *runtime) {
  pthread_mutex_lock(&initialized_lock);
  int known = 0, slot = -1;
  for (int i = 0; i < 8; ++i) {
    if (initialized[i] == runtime->api) known = 1;
    if (!initialized[i] && slot < 0) slot = i;
  }
  PJRT_Error *error = NULL;
  if (!known) {
    PJRT_Plugin_Initialize_Args args = {.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE};
    error = runtime->api->PJRT_Plugin_Initialize(&args);
    if (!error && slot >= 0) initialized[slot] = runtime->api;
  }
  pthread_mutex_unlock(&initialized_lock);
  if (error) return fail_pjrt(runtime, DS_ERR_INPUT, error, "PJRT_Plugin_Initialize");
  return DS_OK;
}

static int load_plugin(const char *plugin_path, pjrt_runtime_t *runtime) {
  char what[512];
  snprintf(what, sizeof what, "%s: the PJRT plugin", runtime->what);
  DS_TRY(shared_object_check(what, plugin_path));
  runtime->library = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
  if (!runtime->library) {
    const char *why = dlerror();
    return ds_fail(DS_ERR_INPUT, "%s: cannot load the PJRT plugin %s: %s", runtime->what, plugin_path,
                   why ? why : "unknown error");
  }
  const PJRT_Api *(*get_api)(void);
  *(void **)&get_api = dlsym(runtime->library, "GetPjrtApi");
  if (!get_api)
    return ds_fail(DS_ERR_INPUT, "%s: %s is not a PJRT plugin (it exports no GetPjrtApi)", runtime->what,
                   plugin_path);
  runtime->api = get_api();
  if (!runtime->api)
    return ds_fail(DS_ERR_INPUT, "%s: the PJRT plugin %s returned no API", runtime->what, plugin_path);
  const PJRT_Api_Version *version = &runtime->api->pjrt_api_version;
  snprintf(runtime->version, sizeof runtime->version, "%d.%d", version->major_version, version->minor_version);
  /* The table must reach the last entry this file calls. */
  const size_t needed = offsetof(PJRT_Api, PJRT_Client_CreateViewOfDeviceBuffer) + sizeof(void *);
  if (version->major_version != PJRT_API_MAJOR || version->minor_version < PJRT_OLDEST_MINOR ||
      runtime->api->struct_size < needed)
    return ds_fail(DS_ERR_INPUT, "%s: the PJRT plugin %s speaks PJRT API %s; dsampler needs %d.%d or later in "
                   "major version %d (install a current jax plugin: pip install -U \"jax[cuda13]\", or the CPU "
                   "plugin lammps-jax-pjrt-cpu)", runtime->what, plugin_path, runtime->version, PJRT_API_MAJOR,
                   PJRT_OLDEST_MINOR, PJRT_API_MAJOR);
  return initialize_once(runtime);
}

static int make_client(pjrt_runtime_t *runtime, int on_gpu, int device_ordinal) {
  const int64_t visible[1] = {device_ordinal};
  PJRT_NamedValue options[2];
  memset(options, 0, sizeof options);
  size_t count = 0;
  if (on_gpu) {
    /* One client per rank on that rank's GPU, allocating as the programs need (XLA would
     * otherwise take 75% of the memory at once, beside dsampler's arrays). */
    options[count++] = (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = "visible_devices",
                                         .name_size = strlen("visible_devices"), .type = PJRT_NamedValue_kInt64List,
                                         .int64_array_value = visible, .value_size = 1};
    options[count++] = (PJRT_NamedValue){.struct_size = PJRT_NamedValue_STRUCT_SIZE, .name = "preallocate",
                                         .name_size = strlen("preallocate"), .type = PJRT_NamedValue_kBool,
                                         .bool_value = false, .value_size = 1};
  }
  PJRT_Client_Create_Args create = {.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE,
                                    .create_options = options, .num_options = count};
  PJRT_TRY(runtime, DS_ERR_INPUT, runtime->api->PJRT_Client_Create(&create), "PJRT_Client_Create");
  runtime->client = create.client;

  PJRT_Client_PlatformName_Args name = {.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE,
                                        .client = runtime->client};
  PJRT_TRY(runtime, DS_ERR_INPUT, runtime->api->PJRT_Client_PlatformName(&name), "PJRT_Client_PlatformName");
  snprintf(runtime->platform, sizeof runtime->platform, "%.*s", (int)name.platform_name_size, name.platform_name);

  PJRT_Client_AddressableDevices_Args devices = {.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE,
                                                 .client = runtime->client};
  PJRT_TRY(runtime, DS_ERR_INPUT, runtime->api->PJRT_Client_AddressableDevices(&devices),
           "PJRT_Client_AddressableDevices");
  if (devices.num_addressable_devices < 1)
    return ds_fail(DS_ERR_INPUT, "%s: the PJRT plugin's %s client has no device", runtime->what, runtime->platform);
  runtime->device = devices.addressable_devices[0];
  PJRT_Device_DefaultMemory_Args memory = {.struct_size = PJRT_Device_DefaultMemory_Args_STRUCT_SIZE,
                                           .device = runtime->device};
  PJRT_TRY(runtime, DS_ERR_INPUT, runtime->api->PJRT_Device_DefaultMemory(&memory), "PJRT_Device_DefaultMemory");
  runtime->memory = memory.memory;
  for (const PJRT_Extension_Base *e = runtime->api->extension_start; e; e = e->next)
    if (e->type == PJRT_Extension_Type_Stream && e->struct_size >= sizeof(stream_extension_t))
      runtime->streams = (const stream_extension_t *)e;
  return DS_OK;
}

int pjrt_open(const char *plugin_path, int on_gpu, int device_ordinal, const char *what, pjrt_runtime_t **out) {
  *out = NULL;
  pjrt_runtime_t *runtime = calloc(1, sizeof *runtime);
  if (!runtime) return DS_FAIL_ALLOC("a PJRT client", sizeof *runtime);
  snprintf(runtime->what, sizeof runtime->what, "%s", what);
  int status = load_plugin(plugin_path, runtime);
  if (status == DS_OK) status = make_client(runtime, on_gpu, device_ordinal);
  if (status != DS_OK) {
    pjrt_close(runtime);
    return status;
  }
  *out = runtime;
  return DS_OK;
}

void pjrt_close(pjrt_runtime_t *runtime) {
  if (!runtime) return;
  if (runtime->client) {
    PJRT_Client_Destroy_Args destroy = {.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE,
                                        .client = runtime->client};
    PJRT_Error *error = runtime->api->PJRT_Client_Destroy(&destroy);
    if (error) {
      char text[256];
      error_text(runtime->api, error, text, sizeof text);
    }
  }
  /* The plugin stays loaded: XLA keeps threads and static state that a dlclose would pull out
   * from under them. */
  free(runtime);
}

const char *pjrt_version(const pjrt_runtime_t *runtime) { return runtime->version; }
const char *pjrt_platform(const pjrt_runtime_t *runtime) { return runtime->platform; }

/* CompileOptionsProto{executable_build_options{device_ordinal: -1, num_replicas: 1,
 * num_partitions: 1}}, encoded by hand: one device, the client's default, and no protobuf
 * library needed. (Empty options abort the process inside XLA.) */
static const unsigned char compile_options[] = {0x1a, 0x0f, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                                0xff, 0xff, 0xff, 0x01, 0x20, 0x01, 0x28, 0x01};

int pjrt_compile(pjrt_runtime_t *runtime, const void *code, size_t size, const char *name, pjrt_program_t **out) {
  *out = NULL;
  pjrt_program_t *program = calloc(1, sizeof *program);
  if (!program) return DS_FAIL_ALLOC("a program", sizeof *program);
  snprintf(program->name, sizeof program->name, "%s", name);
  PJRT_Program source = {.struct_size = PJRT_Program_STRUCT_SIZE, .code = (char *)code, .code_size = size,
                         .format = "mlir", .format_size = 4};
  PJRT_Client_Compile_Args compile = {.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE, .client = runtime->client,
                                      .program = &source, .compile_options = (const char *)compile_options,
                                      .compile_options_size = sizeof compile_options};
  PJRT_Error *error = runtime->api->PJRT_Client_Compile(&compile);
  if (error) {
    char call[128];
    snprintf(call, sizeof call, "compiling %s", name);
    free(program);
    return fail_pjrt(runtime, DS_ERR_INPUT, error, call);
  }
  program->executable = compile.executable;

  PJRT_LoadedExecutable_GetExecutable_Args get = {.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE,
                                                   .loaded_executable = program->executable};
  error = runtime->api->PJRT_LoadedExecutable_GetExecutable(&get);
  if (!error) {
    PJRT_Executable_NumOutputs_Args outputs = {.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE,
                                               .executable = get.executable};
    error = runtime->api->PJRT_Executable_NumOutputs(&outputs);
    program->outputs = outputs.num_outputs;
    PJRT_Executable_Destroy_Args destroy = {.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE,
                                            .executable = get.executable};
    PJRT_Error *destroyed = runtime->api->PJRT_Executable_Destroy(&destroy);
    if (destroyed && !error) error = destroyed;
  }
  if (error) {
    pjrt_program_free(runtime, program);
    return fail_pjrt(runtime, DS_ERR_INPUT, error, "PJRT_Executable_NumOutputs");
  }
  *out = program;
  return DS_OK;
}

size_t pjrt_program_outputs(const pjrt_program_t *program) { return program->outputs; }

void pjrt_program_free(pjrt_runtime_t *runtime, pjrt_program_t *program) {
  if (!program) return;
  if (program->executable) {
    PJRT_LoadedExecutable_Destroy_Args destroy = {.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE,
                                                  .executable = program->executable};
    PJRT_Error *error = runtime->api->PJRT_LoadedExecutable_Destroy(&destroy);
    if (error) {
      char text[256];
      error_text(runtime->api, error, text, sizeof text);
    }
  }
  free(program);
}

/* A view's memory stays ours: PJRT calls this when it lets go, and there is nothing to free.
 * (Without a callback the CPU plugin aborts when a view is donated.) */
static void keep_memory(void *memory, void *arg) {
  (void)memory;
  (void)arg;
}

int pjrt_view_on(pjrt_runtime_t *runtime, void *memory, const int64_t *dims, int rank, pjrt_element_t type,
                 intptr_t stream, PJRT_Buffer **out) {
  PJRT_Client_CreateViewOfDeviceBuffer_Args view = {
      .struct_size = PJRT_Client_CreateViewOfDeviceBuffer_Args_STRUCT_SIZE, .client = runtime->client,
      .device_buffer_ptr = memory, .dims = dims, .num_dims = (size_t)rank,
      .element_type = type == PJRT_ELEMENT_F32   ? PJRT_Buffer_Type_F32
                      : type == PJRT_ELEMENT_F64 ? PJRT_Buffer_Type_F64
                                                 : PJRT_Buffer_Type_S32,
      .device = runtime->device, .on_delete_callback = keep_memory, .memory = runtime->memory, .stream = stream};
  PJRT_TRY(runtime, DS_ERR_TARGET, runtime->api->PJRT_Client_CreateViewOfDeviceBuffer(&view),
           "PJRT_Client_CreateViewOfDeviceBuffer");
  *out = view.buffer;
  return DS_OK;
}

int pjrt_view(pjrt_runtime_t *runtime, void *memory, const int64_t *dims, int rank, pjrt_element_t type,
              PJRT_Buffer **out) {
  return pjrt_view_on(runtime, memory, dims, rank, type, 0, out);
}

int pjrt_has_streams(const pjrt_runtime_t *runtime) { return runtime->streams != NULL; }

int pjrt_ready_stream(pjrt_runtime_t *runtime, intptr_t *stream) {
  if (!runtime->streams) return ds_fail(DS_ERR_TARGET, "%s: the PJRT plugin has no stream extension", runtime->what);
  stream_get_args_t get = {.struct_size = sizeof get, .device = runtime->device};
  PJRT_TRY(runtime, DS_ERR_TARGET, runtime->streams->get_stream(&get), "PJRT_Get_Stream_For_External_Ready_Events");
  *stream = get.stream;
  return DS_OK;
}

int pjrt_wait_on_stream(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, intptr_t stream) {
  if (!runtime->streams) return ds_fail(DS_ERR_TARGET, "%s: the PJRT plugin has no stream extension", runtime->what);
  stream_wait_args_t wait = {.struct_size = sizeof wait, .stream = stream, .buffer = buffer};
  PJRT_TRY(runtime, DS_ERR_TARGET, runtime->streams->wait_stream(&wait), "PJRT_Wait_Until_Buffer_Ready_On_Stream");
  return DS_OK;
}

void pjrt_buffer_free(pjrt_runtime_t *runtime, PJRT_Buffer *buffer) {
  if (!buffer) return;
  PJRT_Buffer_Destroy_Args destroy = {.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE, .buffer = buffer};
  PJRT_Error *error = runtime->api->PJRT_Buffer_Destroy(&destroy);
  if (error) {
    char text[256];
    error_text(runtime->api, error, text, sizeof text);
  }
}

int pjrt_buffer_memory(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, void **memory) {
  PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args pointer = {
      .struct_size = PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args_STRUCT_SIZE, .buffer = buffer};
  PJRT_TRY(runtime, DS_ERR_TARGET, runtime->api->PJRT_Buffer_OpaqueDeviceMemoryDataPointer(&pointer),
           "PJRT_Buffer_OpaqueDeviceMemoryDataPointer");
  *memory = pointer.device_memory_ptr;
  return DS_OK;
}

/* Waits for `event`, destroys it, and returns its error as a status. */
static int await_event(pjrt_runtime_t *runtime, PJRT_Event *event, const char *call) {
  PJRT_Event_Await_Args await = {.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE, .event = event};
  PJRT_Error *error = runtime->api->PJRT_Event_Await(&await);
  PJRT_Event_Destroy_Args destroy = {.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = event};
  PJRT_Error *destroyed = runtime->api->PJRT_Event_Destroy(&destroy);
  if (destroyed) {
    char text[256];
    error_text(runtime->api, destroyed, text, sizeof text);
  }
  if (error) return fail_pjrt(runtime, DS_ERR_TARGET, error, call);
  return DS_OK;
}

int pjrt_buffer_status(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, const char *what) {
  PJRT_Buffer_ReadyEvent_Args ready = {.struct_size = PJRT_Buffer_ReadyEvent_Args_STRUCT_SIZE, .buffer = buffer};
  PJRT_TRY(runtime, DS_ERR_TARGET, runtime->api->PJRT_Buffer_ReadyEvent(&ready), "PJRT_Buffer_ReadyEvent");
  return ready.event ? await_event(runtime, ready.event, what) : DS_OK;
}

int pjrt_buffer_to_host(pjrt_runtime_t *runtime, PJRT_Buffer *buffer, void *dst, size_t bytes) {
  PJRT_Buffer_ToHostBuffer_Args copy = {.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE, .src = buffer,
                                        .dst = dst, .dst_size = bytes};
  PJRT_TRY(runtime, DS_ERR_TARGET, runtime->api->PJRT_Buffer_ToHostBuffer(&copy), "PJRT_Buffer_ToHostBuffer");
  return copy.event ? await_event(runtime, copy.event, "PJRT_Buffer_ToHostBuffer") : DS_OK;
}

int pjrt_execute(pjrt_runtime_t *runtime, pjrt_program_t *program, PJRT_Buffer *const *args, size_t n_args,
                 PJRT_Buffer **outputs, size_t n_outputs) {
  return pjrt_execute_queued(runtime, program, args, n_args, outputs, n_outputs, 1);
}

int pjrt_execute_queued(pjrt_runtime_t *runtime, pjrt_program_t *program, PJRT_Buffer *const *args, size_t n_args,
                        PJRT_Buffer **outputs, size_t n_outputs, int await) {
  if (n_outputs != program->outputs)
    return ds_fail(DS_ERR_TARGET, "%s: program %s returns %zu outputs, not %zu", runtime->what, program->name,
                   program->outputs, n_outputs);
  for (size_t o = 0; o < n_outputs; ++o) outputs[o] = NULL;
  PJRT_ExecuteOptions options = {.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE};
  PJRT_Buffer *const *argument_lists[1] = {args};
  PJRT_Buffer **output_lists[1] = {outputs};
  PJRT_Event *done[1] = {NULL};
  PJRT_LoadedExecutable_Execute_Args execute = {
      .struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE, .executable = program->executable,
      .options = &options, .argument_lists = argument_lists, .num_devices = 1, .num_args = n_args,
      .output_lists = output_lists, .device_complete_events = await ? done : NULL};
  char call[96];
  snprintf(call, sizeof call, "running %s", program->name);
  PJRT_TRY(runtime, DS_ERR_TARGET, runtime->api->PJRT_LoadedExecutable_Execute(&execute), call);
  int status = done[0] ? await_event(runtime, done[0], call) : DS_OK;
  if (status != DS_OK)
    for (size_t o = 0; o < n_outputs; ++o) {
      pjrt_buffer_free(runtime, outputs[o]);
      outputs[o] = NULL;
    }
  return status;
}
