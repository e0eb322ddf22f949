/* ckpt.c: writing, listing and reading checkpoints (see ckpt.h). */
#include "ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "h5out.h"
#include "h5util.h"
#include "status.h"

/* FNV-1a over a row's global index and bytes; rows' hashes are summed (mod 2^64), so the
 * checksum does not depend on how rows are split over ranks. */
static uint64_t row_hash(int64_t row, const void *bytes, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  const unsigned char *index = (const unsigned char *)&row;
  for (size_t i = 0; i < sizeof row; ++i) hash = (hash ^ index[i]) * 1099511628211ull;
  const unsigned char *p = bytes;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

/* A hash of the metadata, so a damaged header is refused like damaged arrays are. */
static uint64_t meta_hash(const ckpt_meta_t *meta, int version) {
  char head[1024];
  int length = snprintf(head, sizeof head, "v%d|%s|%lld|%lld|%lld|%lld|%llu|%s|%s|", version,
                        meta->algorithm, (long long)meta->iteration, (long long)meta->draws_written,
                        (long long)meta->n_items, (long long)meta->dim, (unsigned long long)meta->seed, meta->target,
                        meta->run_id);
  uint64_t hash = row_hash(0, head, (size_t)(length < (int)sizeof head ? length : (int)sizeof head - 1));
  hash ^= row_hash(1, meta->config, strlen(meta->config));
  /* The inputs came later to the format, as an optional attribute: absent, they hash to nothing. */
  if (meta->inputs[0]) hash ^= row_hash(2, meta->inputs, strlen(meta->inputs));
  /* So did the start folder. */
  return meta->start_dir[0] ? hash ^ row_hash(3, meta->start_dir, strlen(meta->start_dir)) : hash;
}

uint64_t ckpt_meta_checksum(const ckpt_meta_t *meta, int version) { return meta_hash(meta, version); }

/* The lowest failing rank's status and message, on every rank (h5util_agree). */
static int agree(MPI_Comm comm, int status) { return h5util_agree(comm, status); }

static size_t dtype_size(ckpt_dtype_t dtype) { return dtype == CKPT_FLOAT64 ? 8 : 4; }
static hid_t dtype_memory(ckpt_dtype_t dtype) { return dtype == CKPT_FLOAT64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT; }
static hid_t dtype_file(ckpt_dtype_t dtype) { return dtype == CKPT_FLOAT64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE; }

static int local_checksum(MPI_Comm comm, const ckpt_array_t *a, int64_t row_begin, int64_t row_end, uint64_t *sum) {
  uint64_t local = 0;
  size_t row_bytes = (size_t)a->width * dtype_size(a->dtype);
  for (int64_t r = row_begin; r < row_end; ++r)
    local += row_hash(r, (const char *)a->local + (size_t)(r - row_begin) * row_bytes, row_bytes);
  MPI_CHECK(MPI_Allreduce(&local, sum, 1, MPI_UINT64_T, MPI_SUM, comm));
  return DS_OK;
}

static int write_attr(hid_t object, const char *name, hid_t type, const void *value) {
  hid_t space = H5Screate(H5S_SCALAR);
  H5_CHECK(space);
  hid_t attr = H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  H5_CHECK(H5Awrite(attr, type, value));
  H5Aclose(attr);
  H5Sclose(space);
  return DS_OK;
}

static int read_attr(hid_t object, const char *name, hid_t type, void *value) {
  int ok;
  H5E_BEGIN_TRY {
    hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
    ok = attr >= 0 && H5Aread(attr, type, value) >= 0;
    if (attr >= 0) H5Aclose(attr);
  }
  H5E_END_TRY;
  return ok ? DS_OK : DS_ERR_IO;
}

/* Strings are fixed-length attributes (format 6 on): stored inside the attribute itself, with
 * no global heap. A damaged size field in a heap of variable-length strings (format 5) can send
 * HDF5 1.10 into an endless loop in H5Aread; a damaged fixed-length string is only wrong bytes,
 * which the metadata checksum refuses. */
static int write_string(hid_t object, const char *name, const char *value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5_CHECK(type);
  H5_CHECK(H5Tset_size(type, strlen(value) + 1));
  H5_CHECK(H5Tset_strpad(type, H5T_STR_NULLTERM));
  int status = write_attr(object, name, type, value);
  H5Tclose(type);
  return status;
}

/* Reads a string attribute of either kind: fixed-length (format 6) or variable-length (format 5,
 * read under the read deadline of ckpt_read_meta's callers). One longer than `size` is refused. */
static int read_string(hid_t object, const char *name, char *out, size_t size) {
  return h5util_read_string_attr(object, name, out, size, "a checkpoint");
}

/* Selects this rank's rows [row_begin, row_end) of a [n, width] dataset, or none. */
static int select_rows(hid_t file_space, hid_t *mem_space, int64_t row_begin, int64_t row_end, int64_t width) {
  hsize_t elements = (hsize_t)((row_end - row_begin) * width);
  hsize_t one = 1;
  *mem_space = H5Screate_simple(1, elements ? &elements : &one, NULL);
  H5_CHECK(*mem_space);
  if (elements) {
    hsize_t start[2] = {(hsize_t)row_begin, 0}, count[2] = {(hsize_t)(row_end - row_begin), (hsize_t)width};
    H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL));
  } else {
    H5_CHECK(H5Sselect_none(file_space));
    H5_CHECK(H5Sselect_none(*mem_space));
  }
  return DS_OK;
}

static int write_contents(MPI_Comm comm, int rank, hid_t file, const ckpt_meta_t *meta, const ckpt_array_t *arrays,
                          int n_arrays, const ckpt_global_t *globals, int n_globals, int64_t row_begin,
                          int64_t row_end) {
  const int version = CKPT_FORMAT_VERSION;
  const uint64_t header_checksum = meta_hash(meta, version);
  int status = write_attr(file, "format_version", H5T_NATIVE_INT, &version);
  if (status == DS_OK) status = write_string(file, "algorithm", meta->algorithm);
  if (status == DS_OK) status = write_attr(file, "iteration", H5T_NATIVE_INT64, &meta->iteration);
  if (status == DS_OK) status = write_attr(file, "draws_written", H5T_NATIVE_INT64, &meta->draws_written);
  if (status == DS_OK) status = write_attr(file, "n_items", H5T_NATIVE_INT64, &meta->n_items);
  if (status == DS_OK) status = write_attr(file, "dim", H5T_NATIVE_INT64, &meta->dim);
  if (status == DS_OK) status = write_attr(file, "seed", H5T_NATIVE_UINT64, &meta->seed);
  if (status == DS_OK) status = write_string(file, "target", meta->target);
  if (status == DS_OK) status = write_string(file, "run_id", meta->run_id);
  if (status == DS_OK && meta->inputs[0]) status = write_string(file, "inputs", meta->inputs);
  if (status == DS_OK && meta->start_dir[0]) status = write_string(file, "start_dir", meta->start_dir);
  if (status == DS_OK) status = write_string(file, "config", meta->config);
  if (status == DS_OK) status = write_attr(file, "meta_checksum", H5T_NATIVE_UINT64, &header_checksum);
  /* The ranks stop together (before the next collective) if any one failed. */
  DS_TRY(agree(comm, status));
  hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
  if (xfer < 0 || H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE) < 0)
    status = h5util_fail(DS_ERR_IO, "checkpoint: cannot set up collective writes");
  status = agree(comm, status);
  for (int a = 0; a < n_arrays && status == DS_OK; ++a) {
    uint64_t checksum = 0;
    status = local_checksum(comm, &arrays[a], row_begin, row_end, &checksum);
    if (status != DS_OK) break;
    hsize_t dims[2] = {(hsize_t)meta->n_items, (hsize_t)arrays[a].width};
    hid_t space = H5Screate_simple(2, dims, NULL), mem_space = H5I_INVALID_HID;
    hid_t dataset = H5Dcreate2(file, arrays[a].name, dtype_file(arrays[a].dtype), space, H5P_DEFAULT, H5P_DEFAULT,
                               H5P_DEFAULT);
    if (space < 0 || dataset < 0) status = h5_fail(__FILE__, __LINE__, "H5Dcreate2(checkpoint array)");
    if (status == DS_OK) status = select_rows(space, &mem_space, row_begin, row_end, arrays[a].width);
    double placeholder = 0;
    if (status == DS_OK &&
        H5Dwrite(dataset, dtype_memory(arrays[a].dtype), mem_space, space, xfer,
                 row_end > row_begin ? arrays[a].local : &placeholder) < 0)
      status = h5_fail(__FILE__, __LINE__, "H5Dwrite(checkpoint array)");
    /* Agreed before the attribute: a write failed on one rank alone (a disk filled meanwhile)
     * must not leave the others creating metadata that the file's collective close then waits
     * for on every rank. */
    status = agree(comm, status);
    if (status == DS_OK) status = write_attr(dataset, "checksum", H5T_NATIVE_UINT64, &checksum);
    if (mem_space >= 0) H5Sclose(mem_space);
    if (dataset >= 0) H5Dclose(dataset);
    if (space >= 0) H5Sclose(space);
    status = agree(comm, status);
  }
  for (int g = 0; g < n_globals && status == DS_OK; ++g) {
    uint64_t checksum = row_hash(0, globals[g].values, (size_t)globals[g].count * sizeof(double));
    hsize_t count = (hsize_t)globals[g].count;
    hid_t space = H5Screate_simple(1, &count, NULL), mem_space = H5Screate_simple(1, &count, NULL);
    hid_t dataset = H5Dcreate2(file, globals[g].name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (space < 0 || mem_space < 0 || dataset < 0) status = h5_fail(__FILE__, __LINE__, "H5Dcreate2(checkpoint global)");
    if (status == DS_OK && rank != 0) {
      H5Sselect_none(space);
      H5Sselect_none(mem_space);
    }
    if (status == DS_OK && H5Dwrite(dataset, H5T_NATIVE_DOUBLE, mem_space, space, xfer, globals[g].values) < 0)
      status = h5_fail(__FILE__, __LINE__, "H5Dwrite(checkpoint global)");
    status = agree(comm, status); /* before the attribute, as for the arrays */
    if (status == DS_OK) status = write_attr(dataset, "checksum", H5T_NATIVE_UINT64, &checksum);
    if (dataset >= 0) H5Dclose(dataset);
    if (mem_space >= 0) H5Sclose(mem_space);
    if (space >= 0) H5Sclose(space);
    status = agree(comm, status);
  }
  if (xfer >= 0) H5Pclose(xfer);
  return status;
}

static int sync_path(const char *path, int directory) {
  int fd = open(path, directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

/* Iteration number of a file named ckpt-<n>.h5, or -1. */
static long long checkpoint_number(const char *name) {
  long long number;
  int used = 0;
  if (sscanf(name, "ckpt-%lld.h5%n", &number, &used) == 1 && name[used] == '\0') return number;
  return -1;
}

int ckpt_is_checkpoint_path(const char *path) {
  const char *slash = strrchr(path, '/');
  const char *name = slash ? slash + 1 : path;
  long long number;
  int used = 0;
  if (sscanf(name, "ckpt-%lld.h5%n", &number, &used) == 1 && (name[used] == '\0' || strcmp(name + used, ".tmp") == 0))
    return 1;
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  int found = 0;
  H5E_BEGIN_TRY {
    hid_t file = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : H5I_INVALID_HID;
    if (file >= 0) {
      found = H5Aexists(file, "format_version") > 0 && H5Aexists(file, "meta_checksum") > 0;
      H5Fclose(file);
    }
  }
  H5E_END_TRY;
  return found;
}

typedef struct { long long number; char name[256]; } entry_t;

static int compare_newest_first(const void *a, const void *b) {
  long long x = ((const entry_t *)a)->number, y = ((const entry_t *)b)->number;
  return (x < y) - (x > y);
}

/* Rank 0: every checkpoint in the directory, newest first, into *entries (allocated; free it). */
static int scan_dir(const char *dir, entry_t **entries, int *count) {
  *entries = NULL;
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) return ds_fail(DS_ERR_INPUT, "checkpoint directory %s: cannot open: %s", dir, strerror(errno));
  struct dirent *e;
  int n = 0, capacity = 0, status = DS_OK;
  entry_t *all = NULL;
  while ((e = readdir(d)) != NULL) {
    long long number = checkpoint_number(e->d_name);
    if (number < 0) continue;
    if (n == capacity) {
      capacity = capacity ? 2 * capacity : 64;
      entry_t *grown = realloc(all, (size_t)capacity * sizeof *all);
      if (!grown) {
        status = DS_FAIL_ALLOC("the checkpoint listing", (size_t)capacity * sizeof *all);
        break;
      }
      all = grown;
    }
    all[n].number = number;
    snprintf(all[n].name, sizeof all[n].name, "%s", e->d_name);
    n++;
  }
  closedir(d);
  if (status != DS_OK) {
    free(all);
    return status;
  }
  if (n > 0) qsort(all, (size_t)n, sizeof *all, compare_newest_first);
  *entries = all;
  *count = n;
  return DS_OK;
}

/* Reads a checkpoint's metadata attributes into meta: DS_OK, or DS_ERR_IO where a required one
 * is missing or unreadable. Whether they are intact is meta_intact's question. */
static int read_meta_fields(hid_t file, ckpt_meta_t *meta) {
  if (read_string(file, "algorithm", meta->algorithm, sizeof meta->algorithm) != DS_OK ||
      read_attr(file, "iteration", H5T_NATIVE_INT64, &meta->iteration) != DS_OK ||
      read_attr(file, "draws_written", H5T_NATIVE_INT64, &meta->draws_written) != DS_OK ||
      read_attr(file, "n_items", H5T_NATIVE_INT64, &meta->n_items) != DS_OK ||
      read_attr(file, "dim", H5T_NATIVE_INT64, &meta->dim) != DS_OK ||
      read_attr(file, "seed", H5T_NATIVE_UINT64, &meta->seed) != DS_OK ||
      read_string(file, "target", meta->target, sizeof meta->target) != DS_OK ||
      read_string(file, "run_id", meta->run_id, sizeof meta->run_id) != DS_OK ||
      read_string(file, "config", meta->config, sizeof meta->config) != DS_OK)
    return DS_ERR_IO;
  /* Optional: older checkpoints lack them, and meta_hash then leaves them out. */
  meta->inputs[0] = '\0';
  if (read_string(file, "inputs", meta->inputs, sizeof meta->inputs) != DS_OK) meta->inputs[0] = '\0';
  meta->start_dir[0] = '\0';
  if (read_string(file, "start_dir", meta->start_dir, sizeof meta->start_dir) != DS_OK) meta->start_dir[0] = '\0';
  return DS_OK;
}

/* Format 5 differs from 6 only in its strings (variable-length), which read_string reads too. */
static int readable_version(int version) { return version == CKPT_FORMAT_VERSION || version == 5; }

/* Whether meta, as read from file, matches the checksum stored beside it. */
static int meta_intact(hid_t file, const ckpt_meta_t *meta, int version) {
  uint64_t stored = 0;
  return read_attr(file, "meta_checksum", H5T_NATIVE_UINT64, &stored) == DS_OK && stored == meta_hash(meta, version);
}

/* The readable format whose metadata checksum the file's metadata match, or 0: a file whose
 * format_version is missing or unknown but whose checksum is that of version 5 or 6 was written
 * as one (the checksum hashes the version), and its version attribute is damaged. */
static int checksum_version(hid_t file, ckpt_meta_t *meta) {
  int found = 0;
  H5E_BEGIN_TRY {
    if (read_meta_fields(file, meta) == DS_OK)
      for (int v = CKPT_FORMAT_VERSION; v >= 5 && !found; --v)
        if (readable_version(v) && meta_intact(file, meta, v)) found = v;
  }
  H5E_END_TRY;
  memset(meta, 0, sizeof *meta);
  return found;
}

/* Rank 0: the run id of the checkpoint at `path` into id (read serially); 0 where the file is no
 * readable checkpoint (a user's own file of that name, a damaged one). A checkpoint of this
 * format whose metadata fail their checksum is damaged, and its run id (perhaps the damaged
 * part) says nothing: it must not make a resume's folder look like another run's, nor be pruned
 * as this run's; resume already names it and passes over it. */
static int checkpoint_run_id(const char *path, char *id, size_t size) {
  hid_t file;
  id[0] = '\0';
  /* Only a regular file can be one (opening a FIFO of that name would wait for a writer). */
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  comm_deadline_begin("reading checkpoint %s", path);
  H5E_BEGIN_TRY { file = H5Fis_hdf5(path) > 0 ? H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT) : H5I_INVALID_HID; }
  H5E_END_TRY;
  if (file < 0) {
    comm_deadline_end();
    return 0;
  }
  ckpt_meta_t *meta = calloc(1, sizeof *meta);
  int version = 0, read = 0;
  H5E_BEGIN_TRY {
    if (meta && read_attr(file, "format_version", H5T_NATIVE_INT, &version) == DS_OK && readable_version(version)) {
      read = read_meta_fields(file, meta) == DS_OK && meta->run_id[0] && meta_intact(file, meta, version);
      if (read) snprintf(id, size, "%s", meta->run_id);
    } else if (meta) {
      /* Another format's checksum is not this one's to check: its run id is taken as written. */
      read = read_string(file, "run_id", id, size) == DS_OK && id[0];
    }
  }
  H5E_END_TRY;
  free(meta);
  H5Fclose(file);
  comm_deadline_end();
  return read;
}

/* Rank 0: whether `path` is a checkpoint of the run `run_id` (anything else, a user's own file of
 * that name or another run's checkpoint, is not). */
static int is_checkpoint_of_run(const char *path, const char *run_id) {
  char id[sizeof ((ckpt_meta_t *)0)->run_id];
  return checkpoint_run_id(path, id, sizeof id) && strcmp(id, run_id) == 0;
}

/* Rank 0: refuses to start a checkpoint that the free space in `dir` cannot hold, before any
 * rank enters the collective writes a full disk would leave the others waiting in. */
static int check_room(const char *dir, const ckpt_meta_t *meta, const ckpt_array_t *arrays, int n_arrays,
                      const ckpt_global_t *globals, int n_globals) {
  if (h5util_space_check_skipped()) return DS_OK;
  double bytes = (double)strlen(meta->config) + (double)strlen(meta->inputs);
  for (int i = 0; i < n_arrays; ++i)
    bytes += (double)meta->n_items * (double)arrays[i].width * (arrays[i].dtype == CKPT_FLOAT64 ? 8.0 : 4.0);
  for (int i = 0; i < n_globals; ++i) bytes += 8.0 * (double)globals[i].count;
  char folder[4200];
  const double free_bytes = h5util_free_bytes(dir, 1, folder, sizeof folder);
  if (free_bytes >= 0 && free_bytes < bytes + H5UTIL_FREE_SPACE_MARGIN)
    return ds_fail(DS_ERR_IO, "checkpoint %s/ckpt-%lld.h5: the disk is full (%.1f MB free in %s; the checkpoint needs "
                   "%.1f MB and %.0f MB beside it): the earlier checkpoints and the output are kept; make room and "
                   "resume", dir, (long long)meta->iteration, free_bytes / 1e6, dir, bytes / 1e6,
                   H5UTIL_FREE_SPACE_MARGIN / 1e6);
  return DS_OK;
}

int ckpt_write(MPI_Comm comm, const char *dir, const ckpt_meta_t *meta, const ckpt_array_t *arrays, int n_arrays,
               const ckpt_global_t *globals, int n_globals, int64_t row_begin, int64_t row_end, int keep) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  int status = DS_OK;
  if (rank == 0 && mkdir(dir, 0777) != 0 && errno != EEXIST)
    status = ds_fail(DS_ERR_IO, "--checkpoint-dir %s: cannot create: %s", dir, strerror(errno));
  if (rank == 0 && status == DS_OK) status = check_room(dir, meta, arrays, n_arrays, globals, n_globals);
  MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT, 0, comm));
  if (status != DS_OK)
    return rank == 0 ? status : ds_fail(status, "--checkpoint-dir %s: rank 0 cannot write the checkpoint", dir);
  char tmp[4300], final_path[4200];
  snprintf(final_path, sizeof final_path, "%s/ckpt-%lld.h5", dir, (long long)meta->iteration);
  snprintf(tmp, sizeof tmp, "%s.tmp", final_path);
  /* Something that is not a file under the checkpoint's name (made since the run began) would
   * fail the rename at the end: refused before writing. */
  struct stat in_place;
  if (rank == 0 && lstat(final_path, &in_place) == 0 && !S_ISREG(in_place.st_mode))
    status = ds_fail(DS_ERR_IO, "checkpoint %s: something that is not a file has its name; move it away", final_path);
  MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT, 0, comm));
  if (status != DS_OK) return rank == 0 ? status : ds_fail(status, "checkpoint %s: rank 0 cannot write it", final_path);
  h5util_set_context("checkpoint %s", tmp);
  h5util_set_write_path(tmp);
  hid_t file;
  DS_TRY(h5util_create(comm, "checkpoint", tmp, &file));
  status = agree(comm, write_contents(comm, rank, file, meta, arrays, n_arrays, globals, n_globals, row_begin,
                                      row_end));
  /* Fault injection for tests: a pause in the middle of writing, the .tmp not yet closed. */
  const char *delay = getenv("DSAMPLER_FAULT_CHECKPOINT_DELAY");
  if (delay) sleep((unsigned)atoi(delay));
  if (status != DS_OK) {
    /* A write failed on some rank (a disk filled since check_room): HDF5's collective close
     * would then flush and truncate differently on the ranks and wait forever. The file stays
     * open (h5util_left_open) and the program ends without MPI_Finalize; a partial .tmp is
     * never a checkpoint, so it goes. */
    h5util_left_open();
    if (rank == 0) unlink(tmp);
    return status;
  }
  if (H5Fclose(file) < 0) {
    char what[4400];
    snprintf(what, sizeof what, "checkpoint %s: closing failed", tmp);
    status = h5util_fail(DS_ERR_IO, what);
  }
  /* Every rank's part is on disk before the rename makes the checkpoint visible. */
  status = agree(comm, status);
  if (status != DS_OK) {
    /* A partial .tmp is never a checkpoint; leave no debris that looks like one. */
    if (rank == 0) unlink(tmp);
    return status;
  }
  if (rank == 0) {
    if (sync_path(tmp, 0) != 0 || rename(tmp, final_path) != 0 || sync_path(dir, 1) != 0) {
      status = ds_fail(DS_ERR_IO, "checkpoint %s: rename or sync failed: %s", final_path, strerror(errno));
      unlink(tmp); /* gone where the rename failed; no effect where it was done */
    }
    entry_t *entries = NULL;
    int count = 0;
    /* Only this run's checkpoints older than this one count and go: a newer number is one a
     * resume passed over (damaged, another version), left for the user, and it must not push
     * this run's good checkpoints out of the newest `keep`; a file of another run, or one that
     * is no checkpoint at all, is never removed. */
    if (status == DS_OK && keep > 0 && scan_dir(dir, &entries, &count) == DS_OK) {
      int kept = 0;
      for (int i = 0; i < count; ++i) {
        if (entries[i].number > (long long)meta->iteration) continue;
        char old[4400];
        snprintf(old, sizeof old, "%s/%s", dir, entries[i].name);
        if (!is_checkpoint_of_run(old, meta->run_id)) continue;
        if (++kept <= keep) continue;
        unlink(old);
      }
    }
    free(entries);
  }
  MPI_CHECK(MPI_Bcast(&status, 1, MPI_INT, 0, comm));
  if (status != DS_OK && rank != 0) return ds_fail(status, "checkpoint %s: rank 0 could not rename it", final_path);
  return status;
}

int ckpt_dir_checkpoints(MPI_Comm comm, const char *dir, const char *run_id, int *found, char *other,
                         size_t other_size) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  struct { int found; char other[64]; } head = {0, ""};
  int status = DS_OK;
  if (rank == 0) {
    entry_t *entries = NULL;
    int count = 0;
    DIR *d = opendir(dir);
    if (d) {
      closedir(d);
      if (scan_dir(dir, &entries, &count) == DS_OK) head.found = count > 0;
    }
    char path[4400], id[sizeof head.other];
    for (int i = 0; i < count && status == DS_OK; ++i) {
      snprintf(path, sizeof path, "%s/%s", dir, entries[i].name);
      /* Something under a checkpoint's name that is not a file: that checkpoint could not be written. */
      struct stat st;
      if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        status = ds_fail(DS_ERR_INPUT, "--checkpoint-dir %s: %s is a %s, not a checkpoint, and a checkpoint of that "
                         "name could not be written; move it away", dir, entries[i].name,
                         S_ISDIR(st.st_mode) ? "directory" : S_ISLNK(st.st_mode) ? "symbolic link" : "special file");
      else if (run_id && !head.other[0] && checkpoint_run_id(path, id, sizeof id) && strcmp(id, run_id) != 0)
        snprintf(head.other, sizeof head.other, "%s", id);
    }
    free(entries);
  }
  MPI_CHECK(MPI_Bcast(&head, (int)sizeof head, MPI_BYTE, 0, comm));
  *found = head.found;
  if (other) snprintf(other, other_size, "%s", head.other);
  return agree(comm, status);
}

int ckpt_list(MPI_Comm comm, const char *where, char paths[][4096], int *count) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  struct { int status, count; char message[1024]; } head = {DS_OK, 0, ""};
  if (rank == 0) {
    struct stat st;
    if (stat(where, &st) != 0) {
      head.status = ds_fail(DS_ERR_INPUT, "resume %s: no such file or directory", where);
    } else if (S_ISDIR(st.st_mode)) {
      entry_t *entries = NULL;
      head.status = scan_dir(where, &entries, &head.count);
      /* The newest CKPT_LIST_MAX: resume tries them in turn. */
      if (head.count > CKPT_LIST_MAX) head.count = CKPT_LIST_MAX;
      for (int i = 0; i < head.count; ++i) snprintf(paths[i], 4096, "%s/%s", where, entries[i].name);
      free(entries);
      if (head.status == DS_OK && head.count == 0)
        head.status = ds_fail(DS_ERR_INPUT, "resume %s: the directory holds no checkpoint (ckpt-<iteration>.h5)", where);
    } else if (h5util_check_input("resume", where, 0) == DS_OK) {
      snprintf(paths[0], 4096, "%s", where);
      head.count = 1;
    } else {
      head.status = DS_ERR_INPUT;
    }
    if (head.status != DS_OK) snprintf(head.message, sizeof head.message, "%s", ds_error_message());
  }
  MPI_CHECK(MPI_Bcast(&head, (int)sizeof head, MPI_BYTE, 0, comm));
  if (head.status != DS_OK) {
    ds_error_set_message(head.message);
    return head.status;
  }
  for (int i = 0; i < head.count; ++i) MPI_CHECK(MPI_Bcast(paths[i], 4096, MPI_CHAR, 0, comm));
  *count = head.count;
  return DS_OK;
}

int ckpt_read_meta(MPI_Comm comm, const char *path, ckpt_meta_t *meta) {
  memset(meta, 0, sizeof *meta);
  hid_t file;
  comm_deadline_begin("reading checkpoint %s", path);
  int opened = h5util_open_read(comm, "checkpoint", path, &file);
  /* A file that does not open as HDF5 in a checkpoint's place is taken as a damaged one. */
  if (opened != DS_OK) {
    comm_deadline_end();
    return opened == DS_ERR_INPUT ? DS_ERR_CHECKPOINT : opened;
  }
  /* An HDF5 file that is not this version's checkpoint is someone else's file (the run's
   * output, a newer dsampler's checkpoint): DS_ERR_INPUT, and resume stops there, since
   * continuing from an older checkpoint would later write over it. Damage below is
   * DS_ERR_CHECKPOINT: resume passes over it to an older checkpoint of the run. */
  int version = 0, status = DS_OK, foreign = 0;
  const int has_version = read_attr(file, "format_version", H5T_NATIVE_INT, &version) == DS_OK;
  if (!has_version || !readable_version(version)) {
    /* Unless the metadata's checksum says a readable format wrote the file: then the version
     * attribute itself (its value or its name) is what is damaged. */
    const int written_as = checksum_version(file, meta);
    if (written_as && has_version)
      status = ds_fail(DS_ERR_INPUT, "checkpoint %s: format_version reads %d but the metadata's checksum is format "
                                     "%d's (the file is damaged)", path, version, written_as);
    else if (written_as)
      status = ds_fail(DS_ERR_INPUT, "checkpoint %s: no format_version, but the metadata's checksum is format %d's "
                                     "(the file is damaged)", path, written_as);
    else if (!has_version)
      status = ds_fail(DS_ERR_INPUT, "checkpoint %s: no format_version: not a dsampler checkpoint", path);
    else
      status = ds_fail(DS_ERR_INPUT, "checkpoint %s: format version %d, this dsampler reads versions 5 to %d (use the "
                                     "dsampler that wrote it, or move the file away to resume from an older checkpoint)",
                       path, version, CKPT_FORMAT_VERSION);
    foreign = !written_as;
  }
  if (status == DS_OK && read_meta_fields(file, meta) != DS_OK)
    status = ds_fail(DS_ERR_INPUT, "checkpoint %s: metadata missing or unreadable", path);
  if (status == DS_OK && !meta_intact(file, meta, version))
    status = ds_fail(DS_ERR_INPUT, "checkpoint %s: the metadata do not match their checksum (the file is damaged)", path);
  /* A checkpoint's name carries its iteration too. */
  const char *name = strrchr(path, '/');
  long long named = checkpoint_number(name ? name + 1 : path);
  if (status == DS_OK && named >= 0 && named != meta->iteration)
    status = ds_fail(DS_ERR_INPUT, "checkpoint %s: holds iteration %lld, its name says %lld", path,
                     (long long)meta->iteration, named);
  H5Fclose(file);
  comm_deadline_end();
  if (status != DS_OK && !foreign) status = DS_ERR_CHECKPOINT;
  return agree(comm, status);
}

int ckpt_read(MPI_Comm comm, const char *path, const ckpt_array_t *arrays, int n_arrays, ckpt_global_t *globals,
              int n_globals, int64_t row_begin, int64_t row_end, int64_t n_items) {
  hid_t file;
  h5util_set_context("checkpoint %s", path);
  DS_TRY(h5util_open_read(comm, "checkpoint", path, &file));
  hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
  int status = DS_OK;
  if (xfer < 0 || H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE) < 0) {
    char what[4200];
    snprintf(what, sizeof what, "checkpoint %s: cannot set up collective reads", path);
    status = h5util_fail(DS_ERR_IO, what);
  }
  status = agree(comm, status);
  for (int a = 0; a < n_arrays && status == DS_OK; ++a) {
    hid_t dataset, space = H5I_INVALID_HID, mem_space = H5I_INVALID_HID;
    H5E_BEGIN_TRY { dataset = H5Dopen2(file, arrays[a].name, H5P_DEFAULT); }
    H5E_END_TRY;
    hsize_t dims[2] = {0, 0};
    if (dataset >= 0) {
      space = H5Dget_space(dataset);
      if (H5Sget_simple_extent_ndims(space) == 2) H5Sget_simple_extent_dims(space, dims, NULL);
    }
    if (dataset < 0 || dims[0] != (hsize_t)n_items || dims[1] != (hsize_t)arrays[a].width) {
      status = ds_fail(DS_ERR_INPUT, "checkpoint %s: array '%s' missing or not [%lld, %lld]", path, arrays[a].name,
                       (long long)n_items, (long long)arrays[a].width);
    } else {
      double placeholder;
      status = select_rows(space, &mem_space, row_begin, row_end, arrays[a].width);
      herr_t rc = -1;
      if (status == DS_OK) {
        H5E_BEGIN_TRY {
          rc = H5Dread(dataset, dtype_memory(arrays[a].dtype), mem_space, space, xfer,
                       row_end > row_begin ? arrays[a].local : &placeholder);
        }
        H5E_END_TRY;
      }
      uint64_t stored = 0, computed = 0;
      if (status == DS_OK && rc < 0) status = ds_fail(DS_ERR_INPUT, "checkpoint %s: reading '%s' failed", path, arrays[a].name);
      /* Every rank takes part in the checksum's allreduce, whatever happened before. */
      status = agree(comm, status);
      if (status == DS_OK && read_attr(dataset, "checksum", H5T_NATIVE_UINT64, &stored) != DS_OK)
        status = ds_fail(DS_ERR_INPUT, "checkpoint %s: array '%s' has no checksum", path, arrays[a].name);
      if (status == DS_OK) status = local_checksum(comm, &arrays[a], row_begin, row_end, &computed);
      if (status == DS_OK && stored != computed)
        status = ds_fail(DS_ERR_INPUT, "checkpoint %s: array '%s' fails its checksum (the file is damaged)", path,
                         arrays[a].name);
    }
    if (mem_space >= 0) H5Sclose(mem_space);
    if (space >= 0) H5Sclose(space);
    if (dataset >= 0) H5Dclose(dataset);
  }
  for (int g = 0; g < n_globals && status == DS_OK; ++g) {
    hid_t dataset;
    H5E_BEGIN_TRY { dataset = H5Dopen2(file, globals[g].name, H5P_DEFAULT); }
    H5E_END_TRY;
    uint64_t stored = 0;
    int ok = dataset >= 0;
    if (ok) {
      hid_t space = H5Dget_space(dataset);
      ok = H5Sget_simple_extent_npoints(space) == globals[g].count;
      H5Sclose(space);
    }
    if (ok) {
      H5E_BEGIN_TRY { ok = H5Dread(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, xfer, globals[g].values) >= 0; }
      H5E_END_TRY;
    }
    ok = ok && read_attr(dataset, "checksum", H5T_NATIVE_UINT64, &stored) == DS_OK &&
         stored == row_hash(0, globals[g].values, (size_t)globals[g].count * sizeof(double));
    if (!ok) status = ds_fail(DS_ERR_INPUT, "checkpoint %s: value '%s' missing, misshapen or damaged", path, globals[g].name);
    if (dataset >= 0) H5Dclose(dataset);
    status = agree(comm, status);
  }
  if (xfer >= 0) H5Pclose(xfer);
  H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
  return agree(comm, status);
}
