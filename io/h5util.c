/* h5util.c: parallel HDF5 opens, checked inputs and one-line HDF5 errors (see h5util.h). */
#include "h5util.h"

#include <errno.h>
#include <sys/file.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "comm.h"
#include "status.h"

void h5util_init(void) {
  /* H5open registers HDF5's atexit handler now, so handlers registered after this one run
   * before it (main.c relies on that order). */
  H5open();
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

typedef struct error_walk {
  char api[128];       /* the API call the user's code made (outermost entry) */
  char innermost[512]; /* the most specific reason (innermost entry) */
} error_walk_t;

static herr_t walk_entry(unsigned n, const H5E_error2_t *entry, void *user) {
  error_walk_t *walk = user;
  if (n == 0 && entry->func_name) snprintf(walk->api, sizeof walk->api, "%s", entry->func_name);
  if (entry->desc && entry->desc[0]) snprintf(walk->innermost, sizeof walk->innermost, "%s", entry->desc);
  return 0;
}

/* HDF5's POSIX driver describes a failed write as "file write failed: time = ..., filename =
 * ..., file descriptor = 19, errno = 27, error message = 'File too large', buf = 0x..., ...":
 * the reason alone ("file write failed: File too large") says it to a user. */
static void shorten_driver_message(char *message) {
  char *details = strstr(message, ": time = ");
  if (!details) return;
  char reason[128] = "";
  const char *quoted = strstr(details, "error message = '");
  if (quoted) {
    quoted += strlen("error message = '");
    const char *end = strchr(quoted, '\'');
    snprintf(reason, sizeof reason, "%.*s", end ? (int)(end - quoted) : 100, quoted);
  }
  if (reason[0]) snprintf(details, 2 + strlen(reason) + 1, ": %s", reason);
  else *details = '\0';
}

static _Thread_local char thread_context[1024];
static _Thread_local char thread_write_path[4096];

/* ": the disk is full (...)" where the file the calling thread writes sits on a file system
 * with (almost) no space left: a write that failed there failed for that, whatever HDF5 says
 * (a disk filled by someone else between the check before a write and the write). */
static void disk_full_suffix(char *suffix, size_t size) {
  suffix[0] = '\0';
  if (!thread_write_path[0]) return;
  char folder[sizeof thread_write_path];
  const double free_bytes = h5util_free_bytes(thread_write_path, 0, folder, sizeof folder);
  if (free_bytes >= 0 && free_bytes < H5UTIL_DISK_FULL_BYTES)
    snprintf(suffix, size, ": the disk is full (%.1f MB free in %s); make room and resume", free_bytes / 1e6, folder);
}

int h5util_fail(int code, const char *what) {
  error_walk_t walk = {"", ""};
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_entry, &walk);
  H5Eclear2(H5E_DEFAULT);
  shorten_driver_message(walk.innermost);
  char full[4400];
  disk_full_suffix(full, sizeof full);
  if (walk.innermost[0])
    return ds_fail(code, "%s (%s%s%s)%s", what, walk.api, walk.api[0] ? ": " : "", walk.innermost, full);
  return ds_fail(code, "%s%s", what, full);
}

void h5util_set_context(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(thread_context, sizeof thread_context, fmt, ap);
  va_end(ap);
  thread_write_path[0] = '\0';
}

void h5util_set_write_path(const char *path) { snprintf(thread_write_path, sizeof thread_write_path, "%s", path); }

static int unclosed_files = 0;

void h5util_left_open(void) { unclosed_files++; }

int h5util_unclosed(void) { return unclosed_files; }

int h5util_space_check_skipped(void) {
  const char *skip = getenv("DSAMPLER_FAULT_SKIP_SPACE_CHECK");
  return skip && strcmp(skip, "1") == 0;
}

const char *h5util_context(void) { return thread_context[0] ? thread_context : "an HDF5 file"; }

double h5util_free_bytes(const char *path, int is_folder, char *folder, size_t size) {
  snprintf(folder, size, "%s", path);
  char *slash = is_folder ? NULL : strrchr(folder, '/');
  if (slash) *(slash == folder ? slash + 1 : slash) = '\0';
  else if (!is_folder) snprintf(folder, size, ".");
  struct statvfs fs;
  return statvfs(folder, &fs) == 0 ? (double)fs.f_bavail * (double)fs.f_frsize : -1.0;
}

int h5util_check_input(const char *option, const char *path, int64_t max_bytes) {
  if (!path || !path[0]) return ds_fail(DS_ERR_INPUT, "%s: expected a file name", option);
  struct stat st;
  /* stat, never open: opening a FIFO for reading blocks until a writer comes. */
  if (stat(path, &st) != 0) return ds_fail(DS_ERR_INPUT, "%s %s: cannot open: %s", option, path, strerror(errno));
  if (S_ISDIR(st.st_mode)) return ds_fail(DS_ERR_INPUT, "%s %s: is a directory, expected a file", option, path);
  if (!S_ISREG(st.st_mode))
    return ds_fail(DS_ERR_INPUT, "%s %s: not a regular file (a FIFO, socket or device cannot be read as one)", option,
                   path);
  if (access(path, R_OK) != 0) return ds_fail(DS_ERR_INPUT, "%s %s: cannot open: %s", option, path, strerror(errno));
  if (max_bytes > 0 && st.st_size > max_bytes)
    return ds_fail(DS_ERR_INPUT, "%s %s: %lld bytes, more than the %lld this input may have", option, path,
                   (long long)st.st_size, (long long)max_bytes);
  return DS_OK;
}

int h5util_agree(MPI_Comm comm, int status) { return comm_agree_on(comm, NULL, status); }

static hid_t parallel_fapl(MPI_Comm comm) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return fapl;
  if (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0 || H5Pset_all_coll_metadata_ops(fapl, 1) < 0 ||
      H5Pset_coll_metadata_write(fapl, 1) < 0) {
    H5Pclose(fapl);
    return H5I_INVALID_HID;
  }
  return fapl;
}

/* Every rank's verdict on opening *file; a file opened where another rank failed is closed. */
static int agree_or_close(MPI_Comm comm, int status, hid_t *file) {
  status = h5util_agree(comm, status);
  if (status != DS_OK && *file >= 0) {
    H5Fclose(*file);
    *file = H5I_INVALID_HID;
  }
  return status;
}

static char locked_output[4096];

void h5util_set_locked_output(const char *path) { snprintf(locked_output, sizeof locked_output, "%s", path ? path : ""); }

/* Whether `path` is the output this run holds the lock on (the same file, however named). */
static int is_locked_output(const char *path) {
  struct stat mine, theirs;
  return locked_output[0] && stat(locked_output, &mine) == 0 && stat(path, &theirs) == 0 &&
         mine.st_dev == theirs.st_dev && mine.st_ino == theirs.st_ino;
}

/* Whether another process holds an exclusive lock on `path`, as a running dsampler run holds one
 * on its output (run.c): a file mid-write, not a damaged one. This run's own output is never
 * asked about: flock locks belong to an open file, so the probe's new descriptor would find this
 * run's lock in its way and blame another run. */
static int held_by_a_run(const char *path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const int held = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd); /* releases the shared lock, if it was taken */
  return held;
}

int h5util_open_read(MPI_Comm comm, const char *option, const char *path, hid_t *file) {
  *file = H5I_INVALID_HID;
  DS_TRY(h5util_agree(comm, h5util_check_input(option, path, 0)));
  char what[4300];
  int status = DS_OK;
  hid_t fapl = parallel_fapl(comm);
  if (fapl < 0) {
    snprintf(what, sizeof what, "%s %s: cannot set up parallel access", option, path);
    status = h5util_fail(DS_ERR_IO, what);
  } else {
    /* H5Fopen is collective: every rank reaches it, having agreed the path is a file. */
    *file = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (*file < 0) {
      snprintf(what, sizeof what, "%s %s: %s", option, path,
               is_locked_output(path)
                   ? "truncated or damaged since the run wrote it (HDF5 cannot open it; no other run is writing it: "
                     "this run holds its lock): put back an intact copy of it to continue (the draws so far are only "
                     "in this file; the checkpoints hold the sampler's state, not the draws)"
               : held_by_a_run(path) ? "is being written by a running dsampler run (it holds the file's lock): read it "
                                       "once that run has ended"
                                     : "not an HDF5 file (or a truncated or damaged one)");
      status = h5util_fail(DS_ERR_INPUT, what);
    }
  }
  return agree_or_close(comm, status, file);
}

int h5util_create(MPI_Comm comm, const char *option, const char *path, hid_t *file) {
  *file = H5I_INVALID_HID;
  char what[4300];
  int status = DS_OK;
  hid_t fapl = parallel_fapl(comm);
  if (fapl < 0) {
    snprintf(what, sizeof what, "%s %s: cannot set up parallel access", option, path);
    status = h5util_fail(DS_ERR_IO, what);
  }
  status = h5util_agree(comm, status);
  if (status != DS_OK) return status;
  *file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  if (*file < 0) {
    snprintf(what, sizeof what, "%s %s: cannot create the file", option, path);
    status = h5util_fail(DS_ERR_IO, what);
  }
  return agree_or_close(comm, status, file);
}

int h5util_checked_bytes(const char *option, const char *path, const char *dataset, int ndims, const hsize_t *dims,
                         size_t elem_size, size_t *bytes) {
  size_t total = elem_size;
  int overflow = 0;
  for (int d = 0; d < ndims; ++d) overflow |= __builtin_mul_overflow(total, (size_t)dims[d], &total);
  char shape[160] = "[";
  for (int d = 0, used = 1; d < ndims && used < (int)sizeof shape; ++d)
    used += snprintf(shape + used, sizeof shape - (size_t)used, "%s%llu", d ? ", " : "", (unsigned long long)dims[d]);
  strncat(shape, "]", sizeof shape - strlen(shape) - 1);
  if (overflow)
    return ds_fail(DS_ERR_INPUT, "%s %s: dataset '%s' declares shape %s, whose size in bytes overflows 64 bits", option,
                   path, dataset, shape);
  long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page_size > 0 && total / (size_t)page_size > (size_t)pages)
    return ds_fail(DS_ERR_INPUT, "%s %s: dataset '%s' declares shape %s (%zu bytes), more than this node's memory (%zu "
                                 "bytes)", option, path, dataset, shape, total, (size_t)pages * (size_t)page_size);
  *bytes = total;
  return DS_OK;
}

int h5util_same_file(const char *a, const char *b) {
  struct stat sa, sb;
  if (!a || !b || !a[0] || !b[0] || stat(a, &sa) != 0 || stat(b, &sb) != 0) return 0;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int h5util_match_cset(hid_t attr, hid_t type) {
  hid_t stored = H5Aget_type(attr);
  if (stored < 0) return -1;
  H5T_cset_t cset = H5Tget_class(stored) == H5T_STRING ? H5Tget_cset(stored) : H5T_CSET_ERROR;
  H5Tclose(stored);
  return cset == H5T_CSET_ERROR || H5Tset_cset(type, cset) < 0 ? -1 : 0;
}

/* Replaces one root attribute; collective (metadata writes are collective on this file). */
static int set_root_attr(hid_t file, const char *key, const char *value) {
  hid_t type = H5Tcopy(H5T_C_S1), space = H5Screate(H5S_SCALAR), attr = H5I_INVALID_HID;
  int ok = type >= 0 && space >= 0 && H5Tset_size(type, H5T_VARIABLE) >= 0 && H5Tset_cset(type, H5T_CSET_UTF8) >= 0;
  if (ok) {
    htri_t exists = H5Aexists(file, key);
    ok = exists >= 0 && (exists == 0 || H5Adelete(file, key) >= 0);
  }
  if (ok) ok = (attr = H5Acreate2(file, key, type, space, H5P_DEFAULT, H5P_DEFAULT)) >= 0;
  if (ok) ok = H5Awrite(attr, type, &value) >= 0;
  if (attr >= 0) ok = H5Aclose(attr) >= 0 && ok;
  if (space >= 0) H5Sclose(space);
  if (type >= 0) H5Tclose(type);
  return ok ? DS_OK : DS_ERR_IO;
}

int h5util_set_root_attrs(MPI_Comm comm, const char *option, const char *path, const char *const *keys,
                          const char *const *values, int count) {
  int status = h5util_agree(comm, h5util_check_input(option, path, 0));
  if (status != DS_OK) return status;
  hid_t fapl = parallel_fapl(comm), file = H5I_INVALID_HID;
  char what[4300];
  if (fapl >= 0) {
    file = H5Fopen(path, H5F_ACC_RDWR, fapl);
    H5Pclose(fapl);
  }
  if (file < 0) {
    snprintf(what, sizeof what, "%s %s: cannot open for writing", option, path);
    status = h5util_fail(DS_ERR_IO, what);
  }
  status = h5util_agree(comm, status);
  if (status != DS_OK) return status;
  for (int i = 0; i < count && status == DS_OK; ++i) {
    if (set_root_attr(file, keys[i], values[i]) != DS_OK) {
      snprintf(what, sizeof what, "%s %s: cannot update attribute %s", option, path, keys[i]);
      status = h5util_fail(DS_ERR_IO, what);
    }
    status = h5util_agree(comm, status);
  }
  if (H5Fclose(file) < 0 && status == DS_OK) {
    snprintf(what, sizeof what, "%s %s: closing failed", option, path);
    status = h5util_fail(DS_ERR_IO, what);
  }
  return h5util_agree(comm, status);
}

int h5util_read_string_attr(hid_t object, const char *name, char *out, size_t size, const char *what) {
  int status = DS_ERR_IO;
  out[0] = '\0';
  H5E_BEGIN_TRY {
    hid_t attr = H5Aexists(object, name) > 0 ? H5Aopen(object, name, H5P_DEFAULT) : H5I_INVALID_HID;
    hid_t stored = attr >= 0 ? H5Aget_type(attr) : H5I_INVALID_HID;
    htri_t variable = stored >= 0 && H5Tget_class(stored) == H5T_STRING ? H5Tis_variable_str(stored) : -1;
    hid_t type = variable >= 0 ? H5Tcopy(H5T_C_S1) : H5I_INVALID_HID;
    if (variable > 0 && type >= 0 && H5Tset_size(type, H5T_VARIABLE) >= 0 && h5util_match_cset(attr, type) >= 0) {
      char *value = NULL;
      /* A damaged heap of variable-length strings can make H5Aread loop (comm_deadline_begin). */
      comm_deadline_begin("reading attribute %s of %s", name, what);
      const herr_t read = H5Aread(attr, type, &value);
      comm_deadline_end();
      if (read >= 0 && value && strlen(value) < size) {
        memcpy(out, value, strlen(value) + 1);
        status = DS_OK;
      }
      if (value) H5free_memory(value);
    } else if (variable == 0 && type >= 0) {
      const size_t length = H5Tget_size(stored);
      if (length > 0 && length <= size && H5Tset_size(type, length) >= 0 && h5util_match_cset(attr, type) >= 0 &&
          H5Tset_strpad(type, H5T_STR_NULLTERM) >= 0 && H5Aread(attr, type, out) >= 0) {
        out[length - 1] = '\0';
        status = DS_OK;
      }
    }
    if (type >= 0) H5Tclose(type);
    if (stored >= 0) H5Tclose(stored);
    if (attr >= 0) H5Aclose(attr);
  }
  H5E_END_TRY;
  if (status != DS_OK) out[0] = '\0';
  return status;
}

int h5util_read_root_attr(MPI_Comm comm, const char *option, const char *path, const char *key, char *value,
                          size_t size) {
  value[0] = '\0';
  hid_t file;
  DS_TRY(h5util_open_read(comm, option, path, &file));
  char what[4200];
  snprintf(what, sizeof what, "%s %s", option, path);
  int status = DS_OK;
  if (h5util_read_string_attr(file, key, value, size, what) != DS_OK)
    status = ds_fail(DS_ERR_INPUT, "%s %s: no readable string attribute '%s' (not a dsampler output?)", option, path, key);
  H5Fclose(file);
  return h5util_agree(comm, status);
}
