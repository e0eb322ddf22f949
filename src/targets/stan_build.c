/* stan_build.c: Stan models into target plugins (see stan_build.h): finding the toolchain,
 * running stanc and the C++ compiler with their output in a log, and the cache.
 *
 * Cache layout (DSAMPLER_STAN_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/dsampler/stan):
 *   tool-<key>/   what every model shares: Stan Math's headers precompiled (stan_pch.hpp.gch),
 *                 the shim's object (shim.o), libtbb.so.2 (the libraries' rpath), the compile
 *                 command (compile-command.txt); key = hash of the compiler's version, flags,
 *                 toolchain and the shim's text
 *   model-<key>/  <name>.so with model.cpp (stanc's C++) and build.log; key = hash of the
 *                 tool key and stanc's C++
 *   failed-build.log  the log of the last compile or link that failed (its folder is removed)
 * Entries are built in a tmp- folder and renamed into place, under a lock on .lock, so runs
 * that start together build once and never see half a library. */
/* nftw (X/Open) for clearing a failed build's folder. */
#define _XOPEN_SOURCE 700
#include "stan_build.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "config.h"
#include "shared_object.h"
#include "status.h"

extern char **environ;

#define STAN_HTTPSTAN_VERSION "4.13.0"
/* Compiler flags of every Stan translation unit, as httpstan builds its models (STAN_THREADS:
 * the autodiff tape per thread, which the CPU backend's OpenMP threads need; the old C++ ABI
 * of the manylinux libraries the wheel ships), warnings off (Eigen's fill screens); and two for
 * speed inside a shared library. The autodiff stack is reached through a thread-local pointer at
 * every operation: the default TLS model of a -fPIC library makes each access a call to
 * __tls_get_addr, initial-exec a load (eight schools' gradient: 1.31x the cost of Stan Math
 * called from an executable, then 1.05x; tests/bench/BENCHMARKS.md). Hidden symbols bind calls
 * inside the library directly; the shim exports its entry alone. */
static const char *const stan_cxx_flags[] = {"-std=c++17", "-O3", "-fPIC", "-ftls-model=initial-exec",
                                             "-fvisibility=hidden", "-fvisibility-inlines-hidden",
                                             "-DSTAN_THREADS", "-D_REENTRANT", "-DBOOST_DISABLE_ASSERTS",
                                             "-DBOOST_PHOENIX_NO_VARIADIC_EXPRESSION", "-D_GLIBCXX_USE_CXX11_ABI=0",
                                             "-w", NULL};
/* The headers the precompiled header holds: everything a model includes, and Stan's JSON
 * reader for the shim. */
static const char stan_pch_text[] =
    "/* Stan Math and Stan's model headers, precompiled once per toolchain. */\n"
    "#include <stan/model/model_header.hpp>\n"
    "#include <stan/io/json/json_data.hpp>\n";

/* Where this dsampler's MPI keeps mpi.h (dsampler_target.h names MPI_Comm), from CMake. */
#ifndef DSAMPLER_MPI_INCLUDE_FLAGS
#define DSAMPLER_MPI_INCLUDE_FLAGS ""
#endif

enum { STAN_MAX_ARGS = 80, STAN_MAX_EXTRA_FLAGS = 32 };
/* The toolchain's and the cache's folders are at most this long (longer ones are refused), so
 * the paths made from them fit CONFIG_PATH_MAX. */
#define STAN_DIR_MAX 1024

typedef struct stan_toolchain {
  char home[STAN_DIR_MAX];      /* the httpstan package folder: stanc, include/, lib/ */
  char compiler[256];
  char compiler_version[512];
  char extra_flags[1024];       /* DSAMPLER_STAN_CXXFLAGS */
  char cache[STAN_DIR_MAX];
  char tool_dir[STAN_DIR_MAX + 64];
  char key[33];
} stan_toolchain_t;

/* ---- content hash: FNV-1a, 128 bits (a cache key over trusted inputs, not a signature) ---- */

typedef unsigned __int128 stan_hash_t;

static stan_hash_t hash_start(void) {
  return ((stan_hash_t)0x6c62272e07bb0142ull << 64) | 0x62b821756295c58dull;
}

static stan_hash_t hash_add(stan_hash_t hash, const void *data, size_t size) {
  const stan_hash_t prime = ((stan_hash_t)1 << 88) | 0x13b;
  const unsigned char *bytes = data;
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= prime;
  }
  /* A separator, so that ("ab", "c") and ("a", "bc") differ. */
  hash ^= 0xff;
  return hash * prime;
}

static stan_hash_t hash_text(stan_hash_t hash, const char *text) { return hash_add(hash, text, strlen(text)); }

static void hash_hex(stan_hash_t hash, char out[33]) {
  snprintf(out, 33, "%016llx%016llx", (unsigned long long)(hash >> 64), (unsigned long long)hash);
}

/* ---- files ----------------------------------------------------------------------------------- */

static int read_text(const char *path, char **text) {
  *text = NULL;
  FILE *file = fopen(path, "rb");
  if (!file) return ds_fail(DS_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
  size_t capacity = 1 << 16, used = 0;
  char *buffer = malloc(capacity);
  while (buffer) {
    used += fread(buffer + used, 1, capacity - used - 1, file);
    if (used < capacity - 1) break;
    char *grown = realloc(buffer, capacity * 2);
    if (!grown) free(buffer);
    buffer = grown;
    capacity *= 2;
  }
  const int failed = ferror(file);
  fclose(file);
  if (!buffer) return DS_FAIL_ALLOC(path, capacity);
  if (failed) {
    free(buffer);
    return ds_fail(DS_ERR_IO, "%s: read error", path);
  }
  buffer[used] = '\0';
  *text = buffer;
  return DS_OK;
}

static int write_text(const char *path, const char *text) {
  FILE *file = fopen(path, "wb");
  if (!file) return ds_fail(DS_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
  const size_t size = strlen(text);
  const int ok = fwrite(text, 1, size, file) == size;
  if (fclose(file) != 0 || !ok) return ds_fail(DS_ERR_IO, "%s: write error: %s", path, strerror(errno));
  return DS_OK;
}

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = in ? fopen(to, "wb") : NULL;
  int status = in && out ? DS_OK : ds_fail(DS_ERR_IO, "copying %s to %s: %s", from, to, strerror(errno));
  char buffer[1 << 16];
  size_t n;
  while (status == DS_OK && (n = fread(buffer, 1, sizeof buffer, in)) > 0)
    if (fwrite(buffer, 1, n, out) != n) status = ds_fail(DS_ERR_IO, "copying %s to %s: write error", from, to);
  if (in) fclose(in);
  if (out && fclose(out) != 0 && status == DS_OK) status = ds_fail(DS_ERR_IO, "copying %s to %s: write error", from, to);
  return status;
}

static int is_file(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int mkdir_parents(const char *path) {
  char partial[CONFIG_PATH_MAX];
  snprintf(partial, sizeof partial, "%s", path);
  for (char *slash = partial + 1; *slash; ++slash) {
    if (*slash != '/') continue;
    *slash = '\0';
    if (mkdir(partial, 0777) != 0 && errno != EEXIST)
      return ds_fail(DS_ERR_IO, "the Stan cache %s: cannot create %s: %s", path, partial, strerror(errno));
    *slash = '/';
  }
  if (mkdir(partial, 0777) != 0 && errno != EEXIST)
    return ds_fail(DS_ERR_IO, "the Stan cache %s: cannot create it: %s (set DSAMPLER_STAN_CACHE to a writable folder)",
                   path, strerror(errno));
  return DS_OK;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  remove(path);
  return 0;
}

static void remove_tree(const char *path) { nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* ---- commands ---------------------------------------------------------------------------------- */

/* Runs argv with stdout and stderr appended to log_path (or to *captured, up to size, when
 * log_path is NULL); *exit_code is its exit status, -1 when it could not start. */
static int run_command(char *const argv[], const char *log_path, int *exit_code) {
  *exit_code = -1;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  FILE *log = fopen(log_path, "a");
  if (log) {
    fprintf(log, "$");
    for (int i = 0; argv[i]; ++i) fprintf(log, " %s", argv[i]);
    fprintf(log, "\n");
    fclose(log);
  }
  /* A process group of its own: mpirun and Slurm forward a stop signal (SIGUSR1, SIGTERM) to
   * the ranks' process groups, and a compiler killed by it would end the run with an error
   * instead of the checkpoint and exit 75 the signal asks for (signals.h: the run acts on it
   * after the compile). */
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid;
  int rc = posix_spawnp(&pid, argv[0], &actions, &attributes, argv, environ);
  posix_spawnattr_destroy(&attributes);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return DS_OK; /* *exit_code -1: the caller names the program */
  int wait_status = 0;
  while (waitpid(pid, &wait_status, 0) < 0)
    if (errno != EINTR) return ds_fail(DS_ERR_INTERNAL, "waiting for %s: %s", argv[0], strerror(errno));
  *exit_code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  return DS_OK;
}

/* The log's text after its last command line ("$ ..."), for a message. */
static void log_tail(const char *log_path, char *out, size_t size) {
  char *text = NULL;
  out[0] = '\0';
  if (read_text(log_path, &text) != DS_OK) {
    ds_error_clear();
    return;
  }
  char *start = text, *at = text;
  while ((at = strstr(at, "$ ")) != NULL) {
    if (at == text || at[-1] == '\n') start = at;
    at += 2;
  }
  char *newline = strchr(start, '\n');
  start = newline ? newline + 1 : start + strlen(start);
  snprintf(out, size, "%s", start);
  free(text);
}

/* stanc's message without its excerpt of the program (numbered lines, rules and carets), which
 * says nothing once the message is one line: "Syntax error in 'm.stan', line 2, column 20 to
 * column 21, parsing error: Expected ";" after "real mu"." */
static void stanc_message(const char *log, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  const char *line = log;
  while (*line && used + 1 < size) {
    const char *end = strchr(line, '\n');
    const size_t length = end ? (size_t)(end - line) : strlen(line);
    size_t lead = 0;
    while (lead < length && line[lead] == ' ') ++lead;
    const char *body = line + lead;
    const size_t body_length = length - lead;
    int excerpt = body_length == 0 || body[0] == '-' || body[0] == '^';
    if (!excerpt && body[0] >= '0' && body[0] <= '9') {
      size_t digits = 0;
      while (digits < body_length && body[digits] >= '0' && body[digits] <= '9') ++digits;
      excerpt = digits < body_length && body[digits] == ':';
    }
    if (!excerpt) used += (size_t)snprintf(out + used, size - used, "%s%.*s", used ? " " : "", (int)body_length, body);
    if (!end) break;
    line = end + 1;
  }
}

/* The first line of the compiler's output that says "error", else its last line. */
static void compiler_message(const char *log, char *out, size_t size) {
  const char *found = strstr(log, "error");
  const char *line = found ? found : log + strlen(log);
  while (line > log && line[-1] != '\n') --line;
  if (!found) {
    const char *end = log + strlen(log);
    while (end > log && end[-1] == '\n') --end;
    line = end;
    while (line > log && line[-1] != '\n') --line;
  }
  const char *end = strchr(line, '\n');
  snprintf(out, size, "%.*s", (int)(end ? (size_t)(end - line) : strlen(line)), line);
}

static double seconds_since(const struct timespec *start) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

/* ---- the toolchain ------------------------------------------------------------------------------ */

static int toolchain_home(stan_toolchain_t *tool) {
  const char *given = getenv("DSAMPLER_STAN_HOME");
  char looked[STAN_DIR_MAX + 32];
  if (given && strlen(given) >= STAN_DIR_MAX - 64)
    return ds_fail(DS_ERR_INPUT, "DSAMPLER_STAN_HOME: longer than %d characters", STAN_DIR_MAX - 64);
  if (given && given[0]) {
    snprintf(tool->home, sizeof tool->home, "%s", given);
    snprintf(looked, sizeof looked, "DSAMPLER_STAN_HOME=%s", given);
  } else {
    const char *data = getenv("XDG_DATA_HOME"), *home = getenv("HOME");
    if ((data && strlen(data) >= STAN_DIR_MAX - 64) || (home && strlen(home) >= STAN_DIR_MAX - 64))
      return ds_fail(DS_ERR_INPUT, "the Stan toolchain: XDG_DATA_HOME or HOME is longer than %d characters",
                     STAN_DIR_MAX - 64);
    if (data && data[0])
      snprintf(tool->home, sizeof tool->home, "%s/dsampler/stan/httpstan", data);
    else
      snprintf(tool->home, sizeof tool->home, "%s/.local/share/dsampler/stan/httpstan", home ? home : "");
    snprintf(looked, sizeof looked, "%s", tool->home);
  }
  char stanc[CONFIG_PATH_MAX + 16], version[CONFIG_PATH_MAX + 64];
  snprintf(stanc, sizeof stanc, "%s/stanc", tool->home);
  snprintf(version, sizeof version, "%s/include/stan/version.hpp", tool->home);
  if (access(stanc, X_OK) != 0 || !is_file(version))
    return ds_fail(DS_ERR_INPUT, "no Stan toolchain (stanc and Stan Math) at %s: install it with `bash "
                   "src/targets/stan/install-stan.sh` (httpstan %s from PyPI), or set DSAMPLER_STAN_HOME to an httpstan "
                   "package folder", looked, STAN_HTTPSTAN_VERSION);
  return DS_OK;
}

static int toolchain_compiler(stan_toolchain_t *tool, const char *scratch_log) {
  const char *given = getenv("DSAMPLER_STAN_CXX");
  snprintf(tool->compiler, sizeof tool->compiler, "%s", given && given[0] ? given : "c++");
  char *argv[] = {tool->compiler, "--version", NULL};
  int exit_code = -1;
  remove(scratch_log);
  DS_TRY(run_command(argv, scratch_log, &exit_code));
  if (exit_code != 0)
    return ds_fail(DS_ERR_INPUT, "Stan models need a C++ compiler: '%s --version' %s (install g++, or set "
                   "DSAMPLER_STAN_CXX)", tool->compiler, exit_code < 0 ? "does not run" : "fails");
  log_tail(scratch_log, tool->compiler_version, sizeof tool->compiler_version);
  remove(scratch_log);
  const char *extra = getenv("DSAMPLER_STAN_CXXFLAGS");
  snprintf(tool->extra_flags, sizeof tool->extra_flags, "%s", extra ? extra : "");
  return DS_OK;
}

static int toolchain_cache(stan_toolchain_t *tool) {
  const char *given = getenv("DSAMPLER_STAN_CACHE"), *cache = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
  const size_t longest = STAN_DIR_MAX - 64;
  if ((given && strlen(given) >= longest) || (cache && strlen(cache) >= longest) || (home && strlen(home) >= longest))
    return ds_fail(DS_ERR_INPUT, "the Stan cache: DSAMPLER_STAN_CACHE, XDG_CACHE_HOME or HOME is longer than %zu "
                   "characters", longest);
  if (given && given[0])
    snprintf(tool->cache, sizeof tool->cache, "%s", given);
  else if (cache && cache[0])
    snprintf(tool->cache, sizeof tool->cache, "%s/dsampler/stan", cache);
  else
    snprintf(tool->cache, sizeof tool->cache, "%s/.cache/dsampler/stan", home ? home : ".");
  return mkdir_parents(tool->cache);
}

/* argv of a compile: compiler, the flags, MPI's include flags and DSAMPLER_STAN_CXXFLAGS split
 * at spaces (extra_copy holds their text), -I the headers, then `tail` (NULL-terminated). */
static int compile_argv(stan_toolchain_t *tool, char *extra_copy, char *include_flag, char **argv, char *const *tail) {
  int n = 0;
  argv[n++] = tool->compiler;
  for (int i = 0; stan_cxx_flags[i]; ++i) argv[n++] = (char *)stan_cxx_flags[i];
  snprintf(extra_copy, sizeof tool->extra_flags + sizeof DSAMPLER_MPI_INCLUDE_FLAGS + 1, "%s %s",
           DSAMPLER_MPI_INCLUDE_FLAGS, tool->extra_flags);
  int extras = 0;
  for (char *word = strtok(extra_copy, " \t"); word; word = strtok(NULL, " \t")) {
    if (++extras > STAN_MAX_EXTRA_FLAGS)
      return ds_fail(DS_ERR_INPUT, "DSAMPLER_STAN_CXXFLAGS: more than %d flags", STAN_MAX_EXTRA_FLAGS);
    argv[n++] = word;
  }
  snprintf(include_flag, CONFIG_PATH_MAX + 16, "-I%s/include", tool->home);
  argv[n++] = include_flag;
  for (int i = 0; tail[i]; ++i) argv[n++] = tail[i];
  argv[n] = NULL;
  return DS_OK;
}

/* Runs a compile (or link) step; on failure the message names the step and the log. */
static int compile_step(stan_toolchain_t *tool, const char *what, char *const *tail, const char *log_path,
                        int with_flags) {
  char extra_copy[sizeof tool->extra_flags + sizeof DSAMPLER_MPI_INCLUDE_FLAGS + 1], include_flag[CONFIG_PATH_MAX + 16];
  char *argv[STAN_MAX_ARGS];
  if (with_flags) {
    DS_TRY(compile_argv(tool, extra_copy, include_flag, argv, tail));
  } else {
    int n = 0;
    argv[n++] = tool->compiler;
    for (int i = 0; tail[i]; ++i) argv[n++] = tail[i];
    argv[n] = NULL;
  }
  int exit_code = -1;
  DS_TRY(run_command(argv, log_path, &exit_code));
  if (exit_code == 0) return DS_OK;
  char log[8192], message[1024];
  log_tail(log_path, log, sizeof log);
  compiler_message(log, message, sizeof message);
  /* The build's folder is removed after a failure: keep its log where the message says. */
  char kept[CONFIG_PATH_MAX + 32];
  snprintf(kept, sizeof kept, "%s/failed-build.log", tool->cache);
  const char *shown = rename(log_path, kept) == 0 ? kept : log_path;
  return ds_fail(DS_ERR_INPUT, "Stan: %s failed (%s, exit %d): %s (the whole log: %s)", what, tool->compiler,
                 exit_code, message, shown);
}

static int toolchain_key(stan_toolchain_t *tool) {
  char *version = NULL, path[CONFIG_PATH_MAX + 64];
  snprintf(path, sizeof path, "%s/include/stan/version.hpp", tool->home);
  DS_TRY(read_text(path, &version));
  stan_hash_t hash = hash_text(hash_start(), "dsampler stan toolchain 1");
  hash = hash_text(hash, tool->home);
  hash = hash_text(hash, version);
  hash = hash_text(hash, tool->compiler);
  hash = hash_text(hash, tool->compiler_version);
  for (int i = 0; stan_cxx_flags[i]; ++i) hash = hash_text(hash, stan_cxx_flags[i]);
  hash = hash_text(hash, tool->extra_flags);
  hash = hash_text(hash, DSAMPLER_MPI_INCLUDE_FLAGS);
  hash = hash_text(hash, stan_pch_text);
  hash = hash_text(hash, stan_shim_source);
  hash = hash_text(hash, stan_target_header);
  free(version);
  hash_hex(hash, tool->key);
  snprintf(tool->tool_dir, sizeof tool->tool_dir, "%s/tool-%s", tool->cache, tool->key);
  return DS_OK;
}

/* Builds tool-<key>/ when it is not there: the precompiled header, the shim's object, libtbb.
 * Called under the cache's lock. */
static int toolchain_build(stan_toolchain_t *tool, int verbose) {
  char done[CONFIG_PATH_MAX + 32];
  snprintf(done, sizeof done, "%s/shim.o", tool->tool_dir);
  if (is_file(done)) return DS_OK;
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  if (verbose) {
    fprintf(stderr, "dsampler: building the Stan toolchain in %s (once: Stan Math's headers precompiled and the "
                    "shim, about a minute)\n", tool->tool_dir);
    fflush(stderr);
  }
  char tmp[STAN_DIR_MAX + 32];
  snprintf(tmp, sizeof tmp, "%s/tmp-XXXXXX", tool->cache);
  if (!mkdtemp(tmp)) return ds_fail(DS_ERR_IO, "the Stan cache %s: cannot create a folder: %s", tool->cache, strerror(errno));
  char pch[sizeof tmp + 32], gch[sizeof tmp + 32], shim[sizeof tmp + 32], header[sizeof tmp + 32];
  char object[sizeof tmp + 32], log[sizeof tmp + 32], tbb_from[CONFIG_PATH_MAX + 32], tbb_to[sizeof tmp + 32];
  char command_file[sizeof tmp + 32];
  snprintf(pch, sizeof pch, "%s/stan_pch.hpp", tmp);
  snprintf(gch, sizeof gch, "%s/stan_pch.hpp.gch", tmp);
  snprintf(shim, sizeof shim, "%s/shim.cpp", tmp);
  snprintf(header, sizeof header, "%s/dsampler_target.h", tmp);
  snprintf(object, sizeof object, "%s/shim.o", tmp);
  snprintf(log, sizeof log, "%s/build.log", tmp);
  snprintf(tbb_from, sizeof tbb_from, "%s/lib/libtbb.so.2", tool->home);
  snprintf(tbb_to, sizeof tbb_to, "%s/libtbb.so.2", tmp);
  snprintf(command_file, sizeof command_file, "%s/compile-command.txt", tmp);
  int status = write_text(pch, stan_pch_text);
  if (status == DS_OK) status = write_text(shim, stan_shim_source);
  if (status == DS_OK) status = write_text(header, stan_target_header);
  if (status == DS_OK) status = copy_file(tbb_from, tbb_to);
  if (status == DS_OK) {
    char *tail[] = {"-x", "c++-header", pch, "-o", gch, NULL};
    status = compile_step(tool, "precompiling Stan Math's headers", tail, log, 1);
  }
  /* The shim, and every model after it, include the precompiled header by the name it will
   * have in tool-<key>/: GCC takes a .gch from wherever its header is found. */
  char final_pch[CONFIG_PATH_MAX + 32];
  snprintf(final_pch, sizeof final_pch, "%s/stan_pch.hpp", tool->tool_dir);
  if (status == DS_OK) {
    char include_tmp[sizeof tmp + 8];
    snprintf(include_tmp, sizeof include_tmp, "-I%s", tmp);
    char *tail[] = {"-include", pch, include_tmp, "-c", shim, "-o", object, NULL};
    status = compile_step(tool, "compiling the Stan shim", tail, log, 1);
  }
  if (status == DS_OK) {
    /* The command a model's C++ compiles with, for the benchmark that calls Stan directly. */
    char text[8192];
    size_t used = (size_t)snprintf(text, sizeof text, "%s", tool->compiler);
    for (int i = 0; stan_cxx_flags[i]; ++i) used += (size_t)snprintf(text + used, sizeof text - used, " %s", stan_cxx_flags[i]);
    snprintf(text + used, sizeof text - used, " %s %s -I%s/include -include %s\n", DSAMPLER_MPI_INCLUDE_FLAGS,
             tool->extra_flags, tool->home, final_pch);
    status = write_text(command_file, text);
  }
  /* mkdtemp made it private; the toolchain is readable like any compiler's output. */
  if (status == DS_OK) chmod(tmp, 0755);
  if (status == DS_OK && rename(tmp, tool->tool_dir) != 0 && !is_file(done))
    status = ds_fail(DS_ERR_IO, "the Stan cache: cannot rename %s to %s: %s", tmp, tool->tool_dir, strerror(errno));
  remove_tree(tmp);
  if (status == DS_OK && verbose) {
    fprintf(stderr, "dsampler: Stan toolchain built in %.1f s\n", seconds_since(&start));
    fflush(stderr);
  }
  return status;
}

/* ---- a model ------------------------------------------------------------------------------------- */

/* The C++ class name stanc gives the model: the file's name, letters, digits and _ only. */
static void model_class_name(const char *path, char *name, size_t size) {
  char copy[CONFIG_PATH_MAX];
  snprintf(copy, sizeof copy, "%s", path);
  char *base = basename(copy);
  char *dot = strrchr(base, '.');
  if (dot && dot != base) *dot = '\0';
  size_t used = 0;
  if (!(base[0] >= 'a' && base[0] <= 'z') && !(base[0] >= 'A' && base[0] <= 'Z')) name[used++] = 'm';
  for (const char *c = base; *c && used + 8 < size; ++c) {
    const int keep = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') || *c == '_';
    name[used++] = keep ? *c : '_';
  }
  snprintf(name + used, size - used, "_model");
}

static int check_model_file(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return ds_fail(DS_ERR_INPUT, "--target stan:%s: cannot open: %s", path, strerror(errno));
  if (!S_ISREG(st.st_mode)) return ds_fail(DS_ERR_INPUT, "--target stan:%s: not a regular file", path);
  if (access(path, R_OK) != 0) return ds_fail(DS_ERR_INPUT, "--target stan:%s: cannot read: %s", path, strerror(errno));
  return DS_OK;
}

/* stanc into tmp/model.cpp; its warnings go to stderr when verbose. */
static int run_stanc(stan_toolchain_t *tool, const char *model_path, const char *tmp, const char *class_name,
                     int verbose) {
  char stanc[CONFIG_PATH_MAX + 16], out[CONFIG_PATH_MAX + 32], log[CONFIG_PATH_MAX + 32];
  char name_flag[300], include_flag[CONFIG_PATH_MAX + 32], model_dir[CONFIG_PATH_MAX];
  snprintf(stanc, sizeof stanc, "%s/stanc", tool->home);
  snprintf(out, sizeof out, "--o=%s/model.cpp", tmp);
  snprintf(log, sizeof log, "%s/stanc.log", tmp);
  snprintf(name_flag, sizeof name_flag, "--name=%s", class_name);
  snprintf(model_dir, sizeof model_dir, "%s", model_path);
  /* #include "file.stan" resolves beside the model, as with CmdStan. */
  snprintf(include_flag, sizeof include_flag, "--include-paths=%s", dirname(model_dir));
  char *argv[] = {stanc, name_flag, include_flag, out, (char *)model_path, NULL};
  int exit_code = -1;
  DS_TRY(run_command(argv, log, &exit_code));
  char text[8192], message[4096];
  log_tail(log, text, sizeof text);
  if (exit_code != 0) {
    stanc_message(text, message, sizeof message);
    return ds_fail(DS_ERR_INPUT, "--target stan:%s: stanc cannot translate the model: %s", model_path,
                   message[0] ? message : exit_code < 0 ? "stanc does not run" : "(no message)");
  }
  if (verbose && text[0]) {
    fprintf(stderr, "%s", text);
    fflush(stderr);
  }
  return DS_OK;
}

/* LIBRARY.sha256: the library's SHA-256, written beside it when it is built. */
static int write_library_checksum(const char *library) {
  char hex[65], path[CONFIG_PATH_MAX + 340];
  DS_TRY(shared_object_sha256(library, hex));
  snprintf(path, sizeof path, "%s.sha256", library);
  FILE *file = fopen(path, "w");
  if (!file || fprintf(file, "%s\n", hex) < 0 || fclose(file) != 0)
    return ds_fail(DS_ERR_IO, "the Stan cache: cannot write %s: %s", path, strerror(errno));
  return DS_OK;
}

/* A cached library is used only when whole: its ELF structure inside the file and its SHA-256
 * the one recorded when it was built (a cache from before the checksums gets one now). */
static int cached_library_intact(const char *library) {
  if (shared_object_check("the cached Stan library", library) != DS_OK) {
    ds_error_clear();
    return 0;
  }
  char path[CONFIG_PATH_MAX + 340], recorded[80] = "", hex[65];
  snprintf(path, sizeof path, "%s.sha256", library);
  FILE *file = fopen(path, "r");
  if (!file) return write_library_checksum(library) == DS_OK || (ds_error_clear(), 1);
  const int read = fgets(recorded, sizeof recorded, file) != NULL;
  fclose(file);
  recorded[strcspn(recorded, "\n")] = '\0';
  if (!read || shared_object_sha256(library, hex) != DS_OK) {
    ds_error_clear();
    return 0;
  }
  return strcmp(recorded, hex) == 0;
}

/* Under the lock: tmp/model.cpp (stanc's) into model-<key>/<class>.so, unless it is there. */
static int build_model(stan_toolchain_t *tool, const char *model_path, const char *tmp, const char *class_name,
                       int verbose, char *library, size_t size) {
  char cpp[CONFIG_PATH_MAX + 32];
  snprintf(cpp, sizeof cpp, "%s/model.cpp", tmp);
  char *text = NULL;
  DS_TRY(read_text(cpp, &text));
  stan_hash_t hash = hash_text(hash_start(), "dsampler stan model 1");
  hash = hash_text(hash, tool->key);
  hash = hash_text(hash, text);
  free(text);
  char key[33], model_dir[STAN_DIR_MAX + 48], path[STAN_DIR_MAX + 320];
  hash_hex(hash, key);
  snprintf(model_dir, sizeof model_dir, "%s/model-%s", tool->cache, key);
  if ((size_t)snprintf(path, sizeof path, "%s/%s.so", model_dir, class_name) >= size)
    return ds_fail(DS_ERR_INPUT, "the Stan cache %s: its path is too long (set DSAMPLER_STAN_CACHE)", tool->cache);
  snprintf(library, size, "%s", path);
  if (is_file(library)) {
    if (cached_library_intact(library)) return DS_OK;
    /* Damaged (cut short, altered): set aside for a look, and built again. */
    char aside[sizeof model_dir + 48];
    snprintf(aside, sizeof aside, "%s.damaged-%ld", model_dir, (long)getpid());
    if (rename(model_dir, aside) != 0)
      return ds_fail(DS_ERR_IO, "the Stan cache: %s is damaged and cannot be moved aside: %s", library, strerror(errno));
    fprintf(stderr, "dsampler: the cached Stan library %s was damaged (its checksum or size is wrong); moved to %s and "
            "compiled again\n", library, aside);
  }

  DS_TRY(toolchain_build(tool, verbose));
  struct timespec start;
  clock_gettime(CLOCK_MONOTONIC, &start);
  if (verbose) {
    fprintf(stderr, "dsampler: compiling Stan model %s (once; cached in %s)\n", model_path, model_dir);
    fflush(stderr);
  }
  char object[CONFIG_PATH_MAX + 32], log[CONFIG_PATH_MAX + 32], shared[CONFIG_PATH_MAX + 300];
  char pch[CONFIG_PATH_MAX + 32], shim_object[CONFIG_PATH_MAX + 32], lib_dir[CONFIG_PATH_MAX + 32];
  char rpath[CONFIG_PATH_MAX + 32];
  snprintf(object, sizeof object, "%s/model.o", tmp);
  snprintf(log, sizeof log, "%s/build.log", tmp);
  snprintf(shared, sizeof shared, "%s/%s.so", tmp, class_name);
  snprintf(pch, sizeof pch, "%s/stan_pch.hpp", tool->tool_dir);
  snprintf(shim_object, sizeof shim_object, "%s/shim.o", tool->tool_dir);
  snprintf(lib_dir, sizeof lib_dir, "-L%s/lib", tool->home);
  snprintf(rpath, sizeof rpath, "-Wl,-rpath,%s", tool->tool_dir);
  char *compile_tail[] = {"-include", pch, "-c", cpp, "-o", object, NULL};
  DS_TRY(compile_step(tool, "compiling the model's C++", compile_tail, log, 1));
  char *link_tail[] = {"-shared", "-o", shared, object, shim_object, lib_dir, "-lsundials_cvodes",
                       "-lsundials_idas", "-lsundials_kinsol", "-lsundials_nvecserial", "-ltbb", rpath, NULL};
  DS_TRY(compile_step(tool, "linking the model", link_tail, log, 0));
  remove(object);
  DS_TRY(write_library_checksum(shared));
  chmod(tmp, 0755);
  if (rename(tmp, model_dir) != 0 && !is_file(library))
    return ds_fail(DS_ERR_IO, "the Stan cache: cannot rename %s to %s: %s", tmp, model_dir, strerror(errno));
  if (verbose) {
    fprintf(stderr, "dsampler: compiled %s in %.1f s\n", model_path, seconds_since(&start));
    fflush(stderr);
  }
  return DS_OK;
}

/* Rank 0's part of stan_build_library. */
static int build_library_local(const char *model_path, int verbose, char *library, size_t size) {
  stan_toolchain_t *tool = calloc(1, sizeof *tool);
  if (!tool) return DS_FAIL_ALLOC("the Stan toolchain", sizeof *tool);
  int status = check_model_file(model_path);
  if (status == DS_OK) status = toolchain_home(tool);
  if (status == DS_OK) status = toolchain_cache(tool);
  char tmp[STAN_DIR_MAX + 32] = "", scratch[STAN_DIR_MAX + 64];
  if (status == DS_OK) {
    snprintf(tmp, sizeof tmp, "%s/tmp-XXXXXX", tool->cache);
    if (!mkdtemp(tmp)) {
      status = ds_fail(DS_ERR_IO, "the Stan cache %s: cannot create a folder: %s", tool->cache, strerror(errno));
      tmp[0] = '\0';
    }
  }
  snprintf(scratch, sizeof scratch, "%s/compiler.log", tmp);
  if (status == DS_OK) status = toolchain_compiler(tool, scratch);
  if (status == DS_OK) status = toolchain_key(tool);
  char class_name[256];
  model_class_name(model_path, class_name, sizeof class_name);
  if (status == DS_OK) status = run_stanc(tool, model_path, tmp, class_name, verbose);
  int lock_fd = -1;
  if (status == DS_OK) {
    char lock_path[CONFIG_PATH_MAX + 16];
    snprintf(lock_path, sizeof lock_path, "%s/.lock", tool->cache);
    lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0)
      status = ds_fail(DS_ERR_IO, "the Stan cache %s: cannot lock: %s", lock_path, strerror(errno));
  }
  if (status == DS_OK) status = build_model(tool, model_path, tmp, class_name, verbose, library, size);
  if (lock_fd >= 0) close(lock_fd);
  if (tmp[0]) remove_tree(tmp); /* gone already when it became the model's folder */
  free(tool);
  return status;
}

int stan_build_library(const char *model_path, MPI_Comm comm, int verbose, char *library, size_t size) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  char path[CONFIG_PATH_MAX] = "";
  int status = rank == 0 ? build_library_local(model_path, verbose, path, sizeof path) : DS_OK;
  status = comm_agree_on(comm, NULL, status);
  if (status != DS_OK) return status;
  if (MPI_Bcast(path, sizeof path, MPI_CHAR, 0, comm) != MPI_SUCCESS)
    return ds_fail(DS_ERR_MPI, "MPI_Bcast(the Stan library's path) failed");
  /* Every rank loads it: a cache on a file system the other nodes do not see fails here. */
  status = is_file(path) ? DS_OK
                         : ds_fail(DS_ERR_INPUT, "--target stan:%s: the compiled model %s is not visible on this node: "
                                   "set DSAMPLER_STAN_CACHE to a folder every node shares", model_path, path);
  snprintf(library, size, "%s", path);
  return comm_agree_on(comm, NULL, status);
}

int stan_main(MPI_Comm comm, int argc, char **argv) {
  int rank = 0, quiet = 0;
  MPI_Comm_rank(comm, &rank);
  const char *model = NULL;
  for (int i = 2; i < argc; ++i) {
    if (strcmp(argv[i], "--quiet") == 0) {
      quiet = 1;
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      if (rank == 0)
        printf("usage: dsampler stan MODEL.stan [--quiet]\n\n"
               "compiles a Stan model into a target plugin (or finds it in the cache) and prints the library's path;\n"
               "run it with --target stan:MODEL.stan (compiles as needed) or --target plugin:PATH.\n"
               "environment: DSAMPLER_STAN_HOME (the httpstan folder with stanc and Stan Math), DSAMPLER_STAN_CACHE,\n"
               "DSAMPLER_STAN_CXX (default c++), DSAMPLER_STAN_CXXFLAGS (added to the compile, e.g. -march=native)\n");
      return DS_HELP;
    } else if (argv[i][0] == '-' || model) {
      return ds_fail(DS_ERR_INPUT, "stan: unexpected argument '%s' (usage: dsampler stan MODEL.stan [--quiet])", argv[i]);
    } else {
      model = argv[i];
    }
  }
  if (!model) return ds_fail(DS_ERR_INPUT, "stan: expected a model file (usage: dsampler stan MODEL.stan [--quiet])");
  char library[CONFIG_PATH_MAX];
  DS_TRY(stan_build_library(model, comm, !quiet, library, sizeof library));
  if (rank == 0) printf("%s\n", library);
  return DS_OK;
}
