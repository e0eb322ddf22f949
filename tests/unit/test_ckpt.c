/* test_ckpt.c: the checkpoint format (io/ckpt.c, DESIGN.md "I/O") through its own API and
 * through the plain HDF5 API. Writers of 1, 2 and 3 ranks (sub-communicators of the world, rows
 * split as comm_partition splits them, a rank with no rows among them) and readers of 1 to 3
 * ranks (rows split unevenly another way) must see every metadata field and every array element
 * bitwise as written, special values (-0.0, subnormals, infinities, NaN payloads) included. On
 * disk: ckpt-<iteration>.h5 and no .tmp, the metadata as typed root attributes, each array a 2-D
 * [n_items, width] dataset of its type and each global a 1-D float64 dataset, each carrying a
 * checksum equal to one recomputed here from ckpt.c's stated definition (FNV-1a of a row's index
 * and bytes, summed over rows, so independent of the split). `keep` leaves the newest of this
 * run and never another run's. Truncated, byte-damaged and edited files, files missing a
 * dataset, an attribute or a checksum, misnamed ones and non-HDF5 files are refused with an
 * error on every rank, and a good file reads afterwards. Usage: test_ckpt [work dir], under
 * mpirun with any number of ranks (3 exercises everything); every rank agrees on the verdict. */
#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt.h"
#include "comm.h"
#include "h5util.h"
#include "status.h"

static int failures, checks;
static int world_rank, world_size;

#define EXPECT(cond, ...)                                                               \
  do {                                                                                  \
    ++checks;                                                                           \
    if (!(cond)) {                                                                      \
      fprintf(stderr, "FAIL rank %d line %d: %s: ", world_rank, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                                     \
      fprintf(stderr, "\n");                                                            \
      ++failures;                                                                       \
    }                                                                                   \
  } while (0)

/* --- what is written: every value a function of (array, global row, column) ------------------ */

typedef struct array_spec {
  const char *name;
  ckpt_dtype_t dtype;
  int64_t width;
} array_spec_t;

enum { N_ARRAYS = 4, N_GLOBALS = 3 };
static const array_spec_t array_specs[N_ARRAYS] = {
    {"q", CKPT_FLOAT32, 5}, {"grad", CKPT_FLOAT64, 5}, {"step_size", CKPT_FLOAT32, 1}, {"metric", CKPT_FLOAT64, 3}};
static const struct {
  const char *name;
  int64_t count;
} global_specs[N_GLOBALS] = {{"adapt_scalars", 6}, {"totals", 3}, {"ksd_squared", 1}};

static size_t dtype_bytes(ckpt_dtype_t dtype) { return dtype == CKPT_FLOAT64 ? 8 : 4; }
static size_t row_bytes(const array_spec_t *a) { return (size_t)a->width * dtype_bytes(a->dtype); }

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* A value spread over many binades, never all zeros. */
static double seeded_value(uint64_t salt, int64_t row, int64_t col) {
  const uint64_t bits = splitmix64(salt * 0x100000001B3ull ^ splitmix64((uint64_t)row * 1315423911u + (uint64_t)col));
  const double unit = (double)(bits >> 11) * 0x1.0p-53 - 0.5;
  return ldexp(unit, (int)(bits & 31) - 12);
}

/* Row `row` of array `a` as bytes; special values at fixed places so the file must keep bits. */
static void expected_row(int array, int64_t row, unsigned char *out) {
  const array_spec_t *a = &array_specs[array];
  for (int64_t col = 0; col < a->width; ++col) {
    const double value = seeded_value((uint64_t)array + 1, row, col);
    const int special = (int)((row * 7 + col) % 11);
    if (a->dtype == CKPT_FLOAT64) {
      uint64_t bits;
      memcpy(&bits, &value, 8);
      if (special == 0) bits = 0x8000000000000000ull;      /* -0.0 */
      else if (special == 1) bits = 0x0000000000000001ull; /* smallest subnormal */
      else if (special == 2) bits = 0x7FF0000000000000ull; /* +inf */
      else if (special == 3) bits = 0x7FF80000DEADBEEFull; /* a NaN with a payload */
      else if (special == 4) bits = 0xFFF0000000000000ull; /* -inf */
      memcpy(out + (size_t)col * 8, &bits, 8);
    } else {
      const float single = (float)value;
      uint32_t bits;
      memcpy(&bits, &single, 4);
      if (special == 0) bits = 0x80000000u;
      else if (special == 1) bits = 0x00000001u;
      else if (special == 2) bits = 0x7F800000u;
      else if (special == 3) bits = 0x7FC0BEEFu;
      else if (special == 4) bits = 0xFF800000u;
      memcpy(out + (size_t)col * 4, &bits, 4);
    }
  }
}

static double expected_global(int global, int64_t index) {
  if (global == 0 && index == 2) return -0.0;
  if (global == 1 && index == 1) return 1e308;
  return seeded_value(100 + (uint64_t)global, index, 0);
}

/* A long multi-line config, to exercise variable-length strings well past a few hundred bytes. */
static void make_meta(ckpt_meta_t *meta, int64_t iteration, int64_t n_items, int with_optional, const char *run_id) {
  memset(meta, 0, sizeof *meta);
  snprintf(meta->algorithm, sizeof meta->algorithm, "hmc");
  meta->iteration = iteration;
  meta->draws_written = 1000 + 3 * iteration;
  meta->n_items = n_items;
  meta->dim = 5;
  meta->seed = 0xFEEDFACECAFEBEEFull + (uint64_t)iteration; /* above 2^63: unsigned all the way */
  snprintf(meta->target, sizeof meta->target, "gaussian:scales=1,2,3,4,5;mean=0.5");
  snprintf(meta->run_id, sizeof meta->run_id, "%s", run_id);
  size_t used = 0;
  for (int line = 0; used + 80 < 12000; ++line)
    used += (size_t)snprintf(meta->config + used, sizeof meta->config - used, "option_%03d = value %d, \"quoted\" = %.17g\n",
                             line, line * line, seeded_value(7, line, 0));
  if (with_optional) {
    snprintf(meta->inputs, sizeof meta->inputs, "data.h5 sha256:%064d\nplugin.so sha256:%064d\n", 1, 2);
    snprintf(meta->start_dir, sizeof meta->start_dir, "/work/a folder/with spaces/%lld", (long long)iteration);
  }
}

/* ckpt.c's checksum as its comment defines it: FNV-1a over the row's global index (8 bytes,
 * little-endian int64) then the row's bytes, summed over rows mod 2^64; a global is "row" 0. */
static uint64_t fnv1a(uint64_t hash, const void *bytes, size_t size) {
  const unsigned char *p = bytes;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

static uint64_t row_checksum(int64_t row, const void *bytes, size_t size) {
  unsigned char index[8];
  for (int i = 0; i < 8; ++i) index[i] = (unsigned char)((uint64_t)row >> (8 * i));
  return fnv1a(fnv1a(1469598103934665603ull, index, 8), bytes, size);
}

static uint64_t expected_array_checksum(int array, int64_t n_items) {
  unsigned char row[64];
  uint64_t sum = 0;
  for (int64_t r = 0; r < n_items; ++r) {
    expected_row(array, r, row);
    sum += row_checksum(r, row, row_bytes(&array_specs[array]));
  }
  return sum;
}

static uint64_t expected_global_checksum(int global) {
  double values[16];
  for (int64_t i = 0; i < global_specs[global].count; ++i) values[i] = expected_global(global, i);
  return row_checksum(0, values, (size_t)global_specs[global].count * sizeof(double));
}

/* --- writing and reading through the API -------------------------------------------------------- */

/* The rows a reader rank takes: a split unlike comm_partition's (rank r of p: the rows from
 * floor(n r^2 / p^2) on), so reading never relies on the writer's split. */
static void reader_rows(int64_t n, int size, int rank, int64_t *begin, int64_t *end) {
  *begin = n * rank * rank / ((int64_t)size * size);
  *end = n * (rank + 1) * (rank + 1) / ((int64_t)size * size);
}

static int write_checkpoint(MPI_Comm comm, const char *dir, const ckpt_meta_t *meta, int keep) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int64_t begin, end;
  comm_partition(meta->n_items, size, rank, &begin, &end);
  ckpt_array_t arrays[N_ARRAYS];
  for (int a = 0; a < N_ARRAYS; ++a) {
    unsigned char *local = malloc(row_bytes(&array_specs[a]) * (size_t)(end - begin) + 1);
    for (int64_t r = begin; r < end; ++r) expected_row(a, r, local + (size_t)(r - begin) * row_bytes(&array_specs[a]));
    arrays[a] = (ckpt_array_t){array_specs[a].name, array_specs[a].dtype, array_specs[a].width, local};
  }
  ckpt_global_t globals[N_GLOBALS];
  double values[N_GLOBALS][16];
  for (int g = 0; g < N_GLOBALS; ++g) {
    for (int64_t i = 0; i < global_specs[g].count; ++i) values[g][i] = expected_global(g, i);
    globals[g] = (ckpt_global_t){global_specs[g].name, global_specs[g].count, values[g]};
  }
  const int status = ckpt_write(comm, dir, meta, arrays, N_ARRAYS, globals, N_GLOBALS, begin, end, keep);
  for (int a = 0; a < N_ARRAYS; ++a) free(arrays[a].local);
  return status;
}

/* Every rank of comm returns the same status: the min and max over ranks agree. */
static int statuses_agree(MPI_Comm comm, int status) {
  int low, high;
  MPI_Allreduce(&status, &low, 1, MPI_INT, MPI_MIN, comm);
  MPI_Allreduce(&status, &high, 1, MPI_INT, MPI_MAX, comm);
  return low == high;
}

static void expect_meta_equal(const ckpt_meta_t *got, const ckpt_meta_t *want, const char *label) {
  EXPECT(strcmp(got->algorithm, want->algorithm) == 0, "%s: algorithm '%s'", label, got->algorithm);
  EXPECT(got->iteration == want->iteration, "%s: iteration %lld", label, (long long)got->iteration);
  EXPECT(got->draws_written == want->draws_written, "%s: draws_written %lld", label, (long long)got->draws_written);
  EXPECT(got->n_items == want->n_items, "%s: n_items %lld", label, (long long)got->n_items);
  EXPECT(got->dim == want->dim, "%s: dim %lld", label, (long long)got->dim);
  EXPECT(got->seed == want->seed, "%s: seed %llx, wrote %llx", label, (unsigned long long)got->seed,
         (unsigned long long)want->seed);
  EXPECT(strcmp(got->target, want->target) == 0, "%s: target '%s'", label, got->target);
  EXPECT(strcmp(got->run_id, want->run_id) == 0, "%s: run_id '%s'", label, got->run_id);
  EXPECT(strcmp(got->config, want->config) == 0, "%s: config differs (%zu bytes, wrote %zu)", label,
         strlen(got->config), strlen(want->config));
  EXPECT(strcmp(got->inputs, want->inputs) == 0, "%s: inputs '%.60s'", label, got->inputs);
  EXPECT(strcmp(got->start_dir, want->start_dir) == 0, "%s: start_dir '%s'", label, got->start_dir);
}

/* Reads `path` on comm (its rows by reader_rows) and compares everything bitwise. */
static void read_and_compare(MPI_Comm comm, const char *path, const ckpt_meta_t *want, const char *label) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  static ckpt_meta_t got;
  ds_error_clear();
  int status = ckpt_read_meta(comm, path, &got);
  EXPECT(status == DS_OK, "%s: ckpt_read_meta: %s", label, ds_error_message());
  if (status != DS_OK) return;
  expect_meta_equal(&got, want, label);
  const int64_t n = want->n_items;
  int64_t begin, end;
  reader_rows(n, size, rank, &begin, &end);
  ckpt_array_t arrays[N_ARRAYS];
  for (int a = 0; a < N_ARRAYS; ++a) {
    const size_t bytes = row_bytes(&array_specs[a]) * (size_t)(end - begin);
    void *local = malloc(bytes + 1);
    memset(local, 0xA5, bytes + 1); /* not what any element is */
    arrays[a] = (ckpt_array_t){array_specs[a].name, array_specs[a].dtype, array_specs[a].width, local};
  }
  ckpt_global_t globals[N_GLOBALS];
  double values[N_GLOBALS][16];
  memset(values, 0xA5, sizeof values);
  for (int g = 0; g < N_GLOBALS; ++g) globals[g] = (ckpt_global_t){global_specs[g].name, global_specs[g].count, values[g]};
  status = ckpt_read(comm, path, arrays, N_ARRAYS, globals, N_GLOBALS, begin, end, n);
  EXPECT(status == DS_OK, "%s: ckpt_read: %s", label, ds_error_message());
  if (status == DS_OK) {
    unsigned char row[64];
    for (int a = 0; a < N_ARRAYS; ++a) {
      int64_t differing = 0, first = -1;
      for (int64_t r = begin; r < end; ++r) {
        expected_row(a, r, row);
        if (memcmp(row, (unsigned char *)arrays[a].local + (size_t)(r - begin) * row_bytes(&array_specs[a]),
                   row_bytes(&array_specs[a])) != 0) {
          if (first < 0) first = r;
          ++differing;
        }
      }
      EXPECT(differing == 0, "%s: array %s: %lld of rows [%lld, %lld) differ bitwise, the first %lld", label,
             array_specs[a].name, (long long)differing, (long long)begin, (long long)end, (long long)first);
      /* The byte past this rank's rows is untouched: nothing was written beyond them. */
      EXPECT(((unsigned char *)arrays[a].local)[row_bytes(&array_specs[a]) * (size_t)(end - begin)] == 0xA5,
             "%s: array %s: written past the rank's rows", label, array_specs[a].name);
    }
    for (int g = 0; g < N_GLOBALS; ++g) {
      double want_values[16];
      for (int64_t i = 0; i < global_specs[g].count; ++i) want_values[i] = expected_global(g, i);
      EXPECT(memcmp(want_values, values[g], (size_t)global_specs[g].count * sizeof(double)) == 0,
             "%s: global %s differs bitwise", label, global_specs[g].name);
    }
  }
  for (int a = 0; a < N_ARRAYS; ++a) free(arrays[a].local);
}

/* --- the file on disk, through the plain HDF5 API (rank 0) ---------------------------------- */

/* A fixed-length, null-terminated string attribute of exactly strlen + 1 bytes (format 6: no
 * variable-length strings, whose heap a damaged byte can make HDF5 loop on); its text in out. */
static int read_string_attr(hid_t object, const char *name, char *out, size_t size) {
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  hid_t file_type = H5Aget_type(attr);
  const size_t length = H5Tget_size(file_type);
  int ok = H5Tget_class(file_type) == H5T_STRING && H5Tis_variable_str(file_type) == 0 &&
           H5Tget_strpad(file_type) == H5T_STR_NULLTERM && length > 0 && length <= size;
  if (ok) ok = H5Aread(attr, file_type, out) >= 0 && strlen(out) + 1 == length;
  H5Tclose(file_type);
  H5Aclose(attr);
  return ok ? 0 : -1;
}

/* Rewrites checkpoint `path` as format 5 wrote it: its string attributes variable-length, its
 * format_version 5 and meta_checksum that format's. Serial; 0 on success. */
static int forge_format_5(const char *path, const ckpt_meta_t *meta) {
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return -1;
  const char *names[] = {"algorithm", "target", "run_id", "config", "inputs", "start_dir"};
  const char *values[] = {meta->algorithm, meta->target, meta->run_id, meta->config, meta->inputs, meta->start_dir};
  int ok = 1;
  hid_t space = H5Screate(H5S_SCALAR), type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  for (int i = 0; i < 6 && ok; ++i) {
    if (!values[i][0]) continue;
    ok = H5Adelete(file, names[i]) >= 0;
    hid_t attr = ok ? H5Acreate2(file, names[i], type, space, H5P_DEFAULT, H5P_DEFAULT) : H5I_INVALID_HID;
    ok = attr >= 0 && H5Awrite(attr, type, &values[i]) >= 0;
    if (attr >= 0) H5Aclose(attr);
  }
  const int version = 5;
  const uint64_t checksum = ckpt_meta_checksum(meta, 5);
  hid_t attr = H5Aopen(file, "format_version", H5P_DEFAULT);
  ok = ok && attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT, &version) >= 0;
  if (attr >= 0) H5Aclose(attr);
  attr = H5Aopen(file, "meta_checksum", H5P_DEFAULT);
  ok = ok && attr >= 0 && H5Awrite(attr, H5T_NATIVE_UINT64, &checksum) >= 0;
  if (attr >= 0) H5Aclose(attr);
  H5Tclose(type);
  H5Sclose(space);
  return H5Fclose(file) >= 0 && ok ? 0 : -1;
}

/* An integer attribute of `bytes` bytes and `sign`, scalar; its value in *value. */
static int read_int_attr(hid_t object, const char *name, size_t bytes, H5T_sign_t sign, void *value) {
  hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return -1;
  hid_t type = H5Aget_type(attr), space = H5Aget_space(attr);
  int ok = H5Tget_class(type) == H5T_INTEGER && H5Tget_size(type) == bytes && H5Tget_sign(type) == sign &&
           H5Sget_simple_extent_type(space) == H5S_SCALAR;
  hid_t memory = bytes == 4 ? H5T_NATIVE_INT : (sign == H5T_SGN_NONE ? H5T_NATIVE_UINT64 : H5T_NATIVE_INT64);
  ok = ok && H5Aread(attr, memory, value) >= 0;
  H5Sclose(space);
  H5Tclose(type);
  H5Aclose(attr);
  return ok ? 0 : -1;
}

/* DESIGN.md's and ckpt.h's layout, checked on the file as written; the arrays' stored checksums
 * into checksums[N_ARRAYS + N_GLOBALS]. */
static void check_layout(const char *dir, const ckpt_meta_t *want, int with_optional, uint64_t *checksums,
                         const char *label) {
  char path[4600], tmp[4700];
  snprintf(path, sizeof path, "%s/ckpt-%lld.h5", dir, (long long)want->iteration);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  struct stat st;
  EXPECT(stat(path, &st) == 0 && S_ISREG(st.st_mode), "%s: %s is not there", label, path);
  EXPECT(stat(tmp, &st) != 0, "%s: %s was left behind", label, tmp);
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT(file >= 0, "%s: plain H5Fopen(%s) failed", label, path);
  if (file < 0) return;

  /* Root attributes: exactly these, typed so. */
  const char *strings[] = {"algorithm", "target", "run_id", "config", "inputs", "start_dir"};
  const char *wanted_strings[] = {want->algorithm, want->target, want->run_id, want->config, want->inputs,
                                  want->start_dir};
  const int n_strings = with_optional ? 6 : 4;
  static char text[CKPT_INPUTS_MAX];
  for (int i = 0; i < n_strings; ++i) {
    const int read = read_string_attr(file, strings[i], text, sizeof text);
    EXPECT(read == 0 && strcmp(text, wanted_strings[i]) == 0, "%s: root attribute %s missing, not a fixed-length "
           "null-terminated string of its length, or '%.40s'", label, strings[i], read == 0 ? text : "");
  }
  if (!with_optional)
    EXPECT(H5Aexists(file, "inputs") == 0 && H5Aexists(file, "start_dir") == 0,
           "%s: empty inputs/start_dir were written as attributes", label);
  int version = -1;
  EXPECT(read_int_attr(file, "format_version", 4, H5T_SGN_2, &version) == 0 && version == CKPT_FORMAT_VERSION,
         "%s: format_version %d, not a 4-byte signed %d", label, version, CKPT_FORMAT_VERSION);
  const struct {
    const char *name;
    int64_t value;
  } integers[] = {{"iteration", want->iteration}, {"draws_written", want->draws_written},
                  {"n_items", want->n_items}, {"dim", want->dim}};
  for (size_t i = 0; i < sizeof integers / sizeof integers[0]; ++i) {
    int64_t value = -1;
    EXPECT(read_int_attr(file, integers[i].name, 8, H5T_SGN_2, &value) == 0 && value == integers[i].value,
           "%s: root attribute %s = %lld, not an int64 %lld", label, integers[i].name, (long long)value,
           (long long)integers[i].value);
  }
  uint64_t seed = 0, meta_checksum = 0;
  EXPECT(read_int_attr(file, "seed", 8, H5T_SGN_NONE, &seed) == 0 && seed == want->seed,
         "%s: seed %llx, not a uint64 %llx", label, (unsigned long long)seed, (unsigned long long)want->seed);
  EXPECT(read_int_attr(file, "meta_checksum", 8, H5T_SGN_NONE, &meta_checksum) == 0,
         "%s: meta_checksum missing or not a uint64", label);
  H5O_info_t info;
  EXPECT(H5Oget_info2(file, &info, H5O_INFO_NUM_ATTRS) >= 0 && info.num_attrs == (hsize_t)(n_strings + 7),
         "%s: the root has %llu attributes, expected %d", label, (unsigned long long)info.num_attrs, n_strings + 7);

  /* Datasets: the arrays and the globals at the root, nothing else. */
  H5G_info_t group;
  EXPECT(H5Gget_info(file, &group) >= 0 && group.nlinks == N_ARRAYS + N_GLOBALS, "%s: %llu objects at the root, "
         "expected %d", label, (unsigned long long)group.nlinks, N_ARRAYS + N_GLOBALS);
  for (int a = 0; a < N_ARRAYS + N_GLOBALS; ++a) {
    const int is_array = a < N_ARRAYS;
    const char *name = is_array ? array_specs[a].name : global_specs[a - N_ARRAYS].name;
    hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
    EXPECT(dataset >= 0, "%s: dataset %s missing", label, name);
    if (dataset < 0) continue;
    hid_t type = H5Dget_type(dataset), space = H5Dget_space(dataset);
    hsize_t dims[2] = {0, 0};
    const int ndims = H5Sget_simple_extent_ndims(space);
    H5Sget_simple_extent_dims(space, dims, NULL);
    const hid_t want_type = is_array && array_specs[a].dtype == CKPT_FLOAT32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
    EXPECT(H5Tequal(type, want_type) > 0, "%s: %s is not %s", label, name,
           want_type == H5T_IEEE_F32LE ? "IEEE float32 LE" : "IEEE float64 LE");
    if (is_array)
      EXPECT(ndims == 2 && dims[0] == (hsize_t)want->n_items && dims[1] == (hsize_t)array_specs[a].width,
             "%s: %s is %d-D [%llu, %llu], expected [%lld, %lld]", label, name, ndims, (unsigned long long)dims[0],
             (unsigned long long)dims[1], (long long)want->n_items, (long long)array_specs[a].width);
    else
      EXPECT(ndims == 1 && dims[0] == (hsize_t)global_specs[a - N_ARRAYS].count, "%s: %s is %d-D [%llu]", label, name,
             ndims, (unsigned long long)dims[0]);
    /* The whole contents, read plainly, bitwise. */
    const size_t elem = H5Tget_size(type), total = (size_t)H5Sget_simple_extent_npoints(space);
    unsigned char *all = malloc(elem * total + 1), row[64];
    EXPECT(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, all) >= 0, "%s: plain read of %s failed", label, name);
    int64_t differing = 0;
    if (is_array) {
      for (int64_t r = 0; r < want->n_items; ++r) {
        expected_row(a, r, row);
        differing += memcmp(row, all + (size_t)r * row_bytes(&array_specs[a]), row_bytes(&array_specs[a])) != 0;
      }
    } else {
      for (int64_t i = 0; i < global_specs[a - N_ARRAYS].count; ++i) {
        const double value = expected_global(a - N_ARRAYS, i);
        differing += memcmp(&value, all + (size_t)i * 8, 8) != 0;
      }
    }
    EXPECT(differing == 0, "%s: %s on disk: %lld rows differ from what was written", label, name, (long long)differing);
    free(all);
    uint64_t stored = 0;
    EXPECT(read_int_attr(dataset, "checksum", 8, H5T_SGN_NONE, &stored) == 0, "%s: %s has no uint64 checksum", label,
           name);
    const uint64_t recomputed = is_array ? expected_array_checksum(a, want->n_items) : expected_global_checksum(a - N_ARRAYS);
    EXPECT(stored == recomputed, "%s: %s checksum %016llx, recomputed %016llx", label, name,
           (unsigned long long)stored, (unsigned long long)recomputed);
    H5O_info_t dataset_info;
    EXPECT(H5Oget_info2(dataset, &dataset_info, H5O_INFO_NUM_ATTRS) >= 0 && dataset_info.num_attrs == 1,
           "%s: %s has %llu attributes, expected 1 (checksum)", label, name, (unsigned long long)dataset_info.num_attrs);
    checksums[a] = stored;
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(dataset);
  }
  H5Fclose(file);
}

/* --- damaged files ---------------------------------------------------------------------------- */

static int copy_file(const char *from, const char *to) {
  FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
  int ok = in && out;
  char buffer[65536];
  size_t n;
  while (ok && (n = fread(buffer, 1, sizeof buffer, in)) > 0) ok = fwrite(buffer, 1, n, out) == n;
  if (in) fclose(in);
  if (out && fclose(out) != 0) ok = 0;
  return ok ? 0 : -1;
}

/* Flips the bits of one byte at `offset` bytes into dataset `name`'s raw data. */
static int flip_data_byte(const char *path, const char *name, haddr_t offset) {
  hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) return -1;
  hid_t dataset = H5Dopen2(file, name, H5P_DEFAULT);
  const haddr_t start = dataset >= 0 ? H5Dget_offset(dataset) : HADDR_UNDEF;
  if (dataset >= 0) H5Dclose(dataset);
  H5Fclose(file);
  if (start == HADDR_UNDEF) return -1;
  FILE *f = fopen(path, "r+b");
  if (!f) return -1;
  int ok = fseek(f, (long)(start + offset), SEEK_SET) == 0;
  int byte = ok ? fgetc(f) : EOF;
  ok = ok && byte != EOF && fseek(f, (long)(start + offset), SEEK_SET) == 0 && fputc(byte ^ 0xFF, f) != EOF;
  if (fclose(f) != 0) ok = 0;
  return ok ? 0 : -1;
}

typedef enum {
  DAMAGE_TRUNCATE_HALF,
  DAMAGE_TRUNCATE_HEAD,
  DAMAGE_EMPTY,
  DAMAGE_SIGNATURE,
  DAMAGE_TEXT,
  DAMAGE_ARRAY_BYTE,
  DAMAGE_FLOAT32_BYTE,
  DAMAGE_GLOBAL_BYTE,
  DAMAGE_SEED_EDITED,
  DAMAGE_CONFIG_EDITED,
  DAMAGE_NO_ITERATION,
  DAMAGE_NO_META_CHECKSUM,
  DAMAGE_NO_ARRAY,
  DAMAGE_NO_GLOBAL,
  DAMAGE_NO_ARRAY_CHECKSUM,
  DAMAGE_ARRAY_RESHAPED,
  DAMAGE_VERSION,
  DAMAGE_NO_VERSION,
  DAMAGE_FOREIGN_VERSION,
  DAMAGE_MISNAMED,
  DAMAGE_MISSING_FILE,
  DAMAGE_COUNT
} damage_t;

static const char *const damage_names[DAMAGE_COUNT] = {
    "truncated to half its size", "truncated to its first 512 bytes", "empty file", "HDF5 signature overwritten",
    "a text file", "a byte of array 'grad' flipped", "a byte of float32 array 'q' flipped",
    "a byte of global 'totals' flipped", "attribute seed edited", "attribute config edited",
    "attribute iteration deleted", "attribute meta_checksum deleted", "dataset 'grad' deleted",
    "dataset 'totals' deleted", "checksum of 'metric' deleted", "'metric' replaced by a [n, 4] dataset",
    "format_version 4 (the checksum format 6's)", "attribute format_version deleted",
    "format_version 7 with format 7's checksum (another format's file)", "copied to another iteration's name",
    "no such file"};

/* Where the damage shows: 1 when ckpt_read_meta should refuse it, 0 when only ckpt_read. */
static int damage_in_meta(damage_t damage) {
  switch (damage) {
    case DAMAGE_ARRAY_BYTE:
    case DAMAGE_FLOAT32_BYTE:
    case DAMAGE_GLOBAL_BYTE:
    case DAMAGE_NO_ARRAY:
    case DAMAGE_NO_GLOBAL:
    case DAMAGE_NO_ARRAY_CHECKSUM:
    case DAMAGE_ARRAY_RESHAPED:
      return 0;
    default:
      return 1;
  }
}

/* Rank 0: a damaged copy of `good` at `path` (a directory of its own for the misnamed case). */
static int make_damaged(const char *good, const ckpt_meta_t *meta, const char *dir, damage_t damage, char *path,
                        size_t size) {
  snprintf(path, size, "%s/damaged-%d.h5", dir, (int)damage);
  if (damage == DAMAGE_MISNAMED) snprintf(path, size, "%s/ckpt-13.h5", dir); /* good is ckpt-12.h5 */
  if (damage == DAMAGE_MISSING_FILE) {
    snprintf(path, size, "%s/no-such-checkpoint.h5", dir);
    return 0;
  }
  if (damage == DAMAGE_TEXT) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "format_version = 5\nthis is not an HDF5 file\n");
    return fclose(f);
  }
  if (copy_file(good, path) != 0) return -1;
  if (damage == DAMAGE_MISNAMED) return 0;
  struct stat st;
  if (stat(path, &st) != 0) return -1;
  switch (damage) {
    case DAMAGE_TRUNCATE_HALF: return truncate(path, st.st_size / 2);
    case DAMAGE_TRUNCATE_HEAD: return truncate(path, 512);
    case DAMAGE_EMPTY: return truncate(path, 0);
    case DAMAGE_SIGNATURE: {
      FILE *f = fopen(path, "r+b");
      if (!f) return -1;
      fwrite("NOTHDF5!", 1, 8, f);
      return fclose(f);
    }
    case DAMAGE_ARRAY_BYTE: return flip_data_byte(path, "grad", 8 * 5 * 3 + 2); /* row 3, column 0 */
    case DAMAGE_FLOAT32_BYTE: return flip_data_byte(path, "q", 4 * 5 * 6 + 4 * 4 + 1);
    case DAMAGE_GLOBAL_BYTE: return flip_data_byte(path, "totals", 8 + 7);
    default: break;
  }
  hid_t file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
  if (file < 0) return -1;
  herr_t rc = -1;
  if (damage == DAMAGE_SEED_EDITED) {
    hid_t attr = H5Aopen(file, "seed", H5P_DEFAULT);
    uint64_t seed = 0;
    if (attr >= 0 && H5Aread(attr, H5T_NATIVE_UINT64, &seed) >= 0) {
      seed ^= 1;
      rc = H5Awrite(attr, H5T_NATIVE_UINT64, &seed);
    }
    if (attr >= 0) H5Aclose(attr);
  } else if (damage == DAMAGE_CONFIG_EDITED || damage == DAMAGE_VERSION) {
    const char *name = damage == DAMAGE_VERSION ? "format_version" : "config";
    if (H5Adelete(file, name) >= 0) {
      hid_t space = H5Screate(H5S_SCALAR), type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, H5T_VARIABLE);
      const int version = 4;
      const char *config = "option_000 = something else\n";
      hid_t attr = H5Acreate2(file, name, damage == DAMAGE_VERSION ? H5T_NATIVE_INT : type, space, H5P_DEFAULT,
                              H5P_DEFAULT);
      if (attr >= 0) {
        rc = damage == DAMAGE_VERSION ? H5Awrite(attr, H5T_NATIVE_INT, &version) : H5Awrite(attr, type, &config);
        H5Aclose(attr);
      }
      H5Tclose(type);
      H5Sclose(space);
    }
  } else if (damage == DAMAGE_NO_VERSION) {
    rc = H5Adelete(file, "format_version");
  } else if (damage == DAMAGE_FOREIGN_VERSION) {
    /* What a later format would write: its own version, hashed into its own checksum. */
    const int version = CKPT_FORMAT_VERSION + 1;
    const uint64_t checksum = ckpt_meta_checksum(meta, version);
    hid_t attr = H5Aopen(file, "format_version", H5P_DEFAULT);
    rc = attr >= 0 ? H5Awrite(attr, H5T_NATIVE_INT, &version) : -1;
    if (attr >= 0) H5Aclose(attr);
    attr = H5Aopen(file, "meta_checksum", H5P_DEFAULT);
    if (rc >= 0) rc = attr >= 0 ? H5Awrite(attr, H5T_NATIVE_UINT64, &checksum) : -1;
    if (attr >= 0) H5Aclose(attr);
  } else if (damage == DAMAGE_NO_ITERATION) {
    rc = H5Adelete(file, "iteration");
  } else if (damage == DAMAGE_NO_META_CHECKSUM) {
    rc = H5Adelete(file, "meta_checksum");
  } else if (damage == DAMAGE_NO_ARRAY) {
    rc = H5Ldelete(file, "grad", H5P_DEFAULT);
  } else if (damage == DAMAGE_NO_GLOBAL) {
    rc = H5Ldelete(file, "totals", H5P_DEFAULT);
  } else if (damage == DAMAGE_NO_ARRAY_CHECKSUM) {
    rc = H5Adelete_by_name(file, "metric", "checksum", H5P_DEFAULT);
  } else if (damage == DAMAGE_ARRAY_RESHAPED) {
    /* Same name, one column more, the old checksum attribute kept: the shape must be checked. */
    hid_t old = H5Dopen2(file, "metric", H5P_DEFAULT), old_space = old >= 0 ? H5Dget_space(old) : H5I_INVALID_HID;
    uint64_t checksum = 0;
    hsize_t dims[2] = {0, 0};
    const int readable = old >= 0 && read_int_attr(old, "checksum", 8, H5T_SGN_NONE, &checksum) == 0 &&
                         H5Sget_simple_extent_dims(old_space, dims, NULL) == 2;
    if (old_space >= 0) H5Sclose(old_space);
    if (old >= 0) H5Dclose(old);
    dims[1] += 1;
    if (readable && H5Ldelete(file, "metric", H5P_DEFAULT) >= 0) {
      hid_t space = H5Screate_simple(2, dims, NULL), scalar = H5Screate(H5S_SCALAR);
      hid_t dataset = H5Dcreate2(file, "metric", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      double *filler = calloc((size_t)(dims[0] * dims[1]) + 1, sizeof *filler);
      hid_t attr = dataset >= 0 ? H5Acreate2(dataset, "checksum", H5T_NATIVE_UINT64, scalar, H5P_DEFAULT, H5P_DEFAULT)
                                : H5I_INVALID_HID;
      if (attr >= 0 && H5Dwrite(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, filler) >= 0)
        rc = H5Awrite(attr, H5T_NATIVE_UINT64, &checksum);
      free(filler);
      if (attr >= 0) H5Aclose(attr);
      if (dataset >= 0) H5Dclose(dataset);
      H5Sclose(scalar);
      H5Sclose(space);
    }
  }
  if (H5Fclose(file) < 0) rc = -1;
  return rc < 0 ? -1 : 0;
}

static void test_damaged(MPI_Comm comm, const char *dir, const char *good, const ckpt_meta_t *want) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  for (int d = 0; d < DAMAGE_COUNT; ++d) {
    char path[4600];
    int made = 0;
    if (rank == 0) made = make_damaged(good, want, dir, (damage_t)d, path, sizeof path);
    MPI_Bcast(&made, 1, MPI_INT, 0, comm);
    MPI_Bcast(path, sizeof path, MPI_CHAR, 0, comm);
    EXPECT(made == 0, "could not make the damaged file (%s)", damage_names[d]);
    if (made != 0) continue;
    static ckpt_meta_t meta;
    ds_error_clear();
    int meta_status = ckpt_read_meta(comm, path, &meta);
    const int in_meta = damage_in_meta((damage_t)d);
    EXPECT(statuses_agree(comm, meta_status), "%s: ranks disagree on ckpt_read_meta", damage_names[d]);
    if (in_meta) {
      EXPECT(meta_status != DS_OK && ds_error_message()[0], "%s: ckpt_read_meta accepted it (status %d)",
             damage_names[d], meta_status);
      /* Damage is DS_ERR_CHECKPOINT (resume tries an older one), a damaged format_version too
       * (the checksum says which format wrote the file); another format's file, or no file, is
       * DS_ERR_INPUT (resume stops there: a newer dsampler's file must not be overwritten). */
      const int want_status = d == DAMAGE_FOREIGN_VERSION ? DS_ERR_INPUT : DS_ERR_CHECKPOINT;
      if (d != DAMAGE_MISSING_FILE)
        EXPECT(meta_status == want_status, "%s: ckpt_read_meta status %d, expected %d (%s)", damage_names[d],
               meta_status, want_status, ds_error_message());
    } else {
      EXPECT(meta_status == DS_OK, "%s: ckpt_read_meta refused intact metadata: %s", damage_names[d],
             ds_error_message());
    }
    if (rank == 0 && meta_status != DS_OK) printf("  refused (%s): %s\n", damage_names[d], ds_error_message());
    /* The arrays: every damage is refused by ckpt_read too, whatever the meta said. */
    int size;
    MPI_Comm_size(comm, &size);
    int64_t begin, end;
    reader_rows(want->n_items, size, rank, &begin, &end);
    ckpt_array_t arrays[N_ARRAYS];
    for (int a = 0; a < N_ARRAYS; ++a)
      arrays[a] = (ckpt_array_t){array_specs[a].name, array_specs[a].dtype, array_specs[a].width,
                                 malloc(row_bytes(&array_specs[a]) * (size_t)(end - begin) + 1)};
    ckpt_global_t globals[N_GLOBALS];
    double values[N_GLOBALS][16];
    for (int g = 0; g < N_GLOBALS; ++g) globals[g] = (ckpt_global_t){global_specs[g].name, global_specs[g].count, values[g]};
    ds_error_clear();
    const int read_status = ckpt_read(comm, path, arrays, N_ARRAYS, globals, N_GLOBALS, begin, end, want->n_items);
    EXPECT(statuses_agree(comm, read_status), "%s: ranks disagree on ckpt_read", damage_names[d]);
    /* What only the metadata carry (seed, config, iteration, meta_checksum, version, the name)
     * is ckpt_read_meta's to refuse; the rest must fail ckpt_read. */
    const int meta_only = d == DAMAGE_SEED_EDITED || d == DAMAGE_CONFIG_EDITED || d == DAMAGE_NO_ITERATION ||
                          d == DAMAGE_NO_META_CHECKSUM || d == DAMAGE_VERSION || d == DAMAGE_NO_VERSION ||
                          d == DAMAGE_FOREIGN_VERSION || d == DAMAGE_MISNAMED;
    if (!meta_only)
      EXPECT(read_status != DS_OK && ds_error_message()[0], "%s: ckpt_read accepted it", damage_names[d]);
    if (rank == 0 && read_status != DS_OK && !in_meta) printf("  refused (%s): %s\n", damage_names[d], ds_error_message());
    for (int a = 0; a < N_ARRAYS; ++a) free(arrays[a].local);
    ds_error_clear();
  }
  int size;
  MPI_Comm_size(comm, &size);
  int64_t begin, end;
  reader_rows(want->n_items, size, rank, &begin, &end);
  /* Wrong expectations on a good file: an array's width, the item count, a global's count, an
   * array's type (float64 'grad' read as float32, converted by HDF5: the checksum must catch it). */
  for (int variant = 0; variant < 4; ++variant) {
    ckpt_array_t arrays[N_ARRAYS];
    for (int a = 0; a < N_ARRAYS; ++a)
      arrays[a] = (ckpt_array_t){array_specs[a].name,
                                 variant == 3 && a == 1 ? CKPT_FLOAT32 : array_specs[a].dtype,
                                 array_specs[a].width + (variant == 0 && a == 1),
                                 malloc(8 * 8 * (size_t)(end - begin + 1))};
    ckpt_global_t globals[N_GLOBALS];
    double values[N_GLOBALS][16];
    for (int g = 0; g < N_GLOBALS; ++g)
      globals[g] = (ckpt_global_t){global_specs[g].name, global_specs[g].count + (variant == 2 && g == 1), values[g]};
    const int64_t n_items = want->n_items + (variant == 1);
    int64_t b = begin, e = end;
    if (variant == 1) reader_rows(n_items, size, rank, &b, &e);
    ds_error_clear();
    const int status = ckpt_read(comm, good, arrays, N_ARRAYS, globals, N_GLOBALS, b, e, n_items);
    const int agreed = statuses_agree(comm, status);
    const char *what[4] = {"grad read as width 6", "n_items one more", "totals read as 4 values",
                           "float64 grad read as float32"};
    EXPECT(status != DS_OK && agreed, "%s: ckpt_read accepted it, or the ranks disagree", what[variant]);
    if (rank == 0 && status != DS_OK) printf("  refused (%s): %s\n", what[variant], ds_error_message());
    for (int a = 0; a < N_ARRAYS; ++a) free(arrays[a].local);
  }
  ds_error_clear();
  /* After all that, the good file still reads. */
  read_and_compare(comm, good, want, "good file after the refusals");
}

/* --- keep, listing, and failing writes --------------------------------------------------------- */

static int count_entries(const char *dir, const char *suffix, char names[][256], int max) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    const size_t length = strlen(e->d_name), tail = strlen(suffix);
    if (length >= tail && strcmp(e->d_name + length - tail, suffix) == 0) {
      if (n < max) snprintf(names[n], 256, "%s", e->d_name);
      ++n;
    }
  }
  closedir(d);
  return n;
}

static void test_keep_and_list(MPI_Comm comm, const char *dir) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  static ckpt_meta_t meta;
  /* Another run's checkpoint first: never removed by this run's keep. */
  make_meta(&meta, 1, 4, 1, "other-run");
  EXPECT(write_checkpoint(comm, dir, &meta, 2) == DS_OK, "keep: writing the other run's checkpoint: %s",
         ds_error_message());
  for (int64_t it = 2; it <= 5; ++it) {
    make_meta(&meta, it, 4, 1, "this-run");
    EXPECT(write_checkpoint(comm, dir, &meta, 2) == DS_OK, "keep: writing iteration %lld: %s", (long long)it,
           ds_error_message());
  }
  if (rank == 0) {
    char names[16][256];
    const int n = count_entries(dir, ".h5", names, 16);
    char path[4600];
    int present[6] = {0};
    for (int i = 1; i <= 5; ++i) {
      snprintf(path, sizeof path, "%s/ckpt-%d.h5", dir, i);
      present[i] = access(path, F_OK) == 0;
    }
    EXPECT(n == 3 && present[1] && !present[2] && !present[3] && present[4] && present[5],
           "keep 2: %d files; ckpt-1..5 present %d%d%d%d%d, expected 1 (other run), 4 and 5", n, present[1],
           present[2], present[3], present[4], present[5]);
    EXPECT(count_entries(dir, ".tmp", names, 16) == 0, "keep: a .tmp was left");
  }
  /* A write that died before its rename leaves ckpt-N.h5.tmp: never listed as a checkpoint. */
  if (rank == 0) {
    char leftover[4600];
    snprintf(leftover, sizeof leftover, "%s/ckpt-9.h5.tmp", dir);
    FILE *f = fopen(leftover, "w");
    if (f) fclose(f);
  }
  MPI_Barrier(comm);
  static char paths[CKPT_LIST_MAX][4096];
  int count = 0;
  EXPECT(ckpt_list(comm, dir, paths, &count) == DS_OK, "ckpt_list: %s", ds_error_message());
  const char *wanted[3] = {"ckpt-5.h5", "ckpt-4.h5", "ckpt-1.h5"};
  int ordered = count == 3;
  for (int i = 0; ordered && i < 3; ++i) {
    const char *slash = strrchr(paths[i], '/');
    ordered = slash && strcmp(slash + 1, wanted[i]) == 0;
  }
  EXPECT(ordered, "ckpt_list: %d paths, first '%s', expected ckpt-5, ckpt-4, ckpt-1 newest first", count,
         count > 0 ? paths[0] : "");
  int found = 0;
  char other[64] = "";
  EXPECT(ckpt_dir_checkpoints(comm, dir, "this-run", &found, other, sizeof other) == DS_OK && found &&
             strcmp(other, "other-run") == 0,
         "ckpt_dir_checkpoints: found %d, other '%s', expected 1 and other-run", found, other);
  char path[4600];
  snprintf(path, sizeof path, "%s/ckpt-5.h5", dir);
  EXPECT(ckpt_is_checkpoint_path(path) == 1, "ckpt_is_checkpoint_path(%s) = 0", path);
  if (rank == 0) {
    /* Recognised by content under another name; a plain HDF5 file is no checkpoint. */
    char renamed[4600], plain[4600];
    snprintf(renamed, sizeof renamed, "%s/state.h5", dir);
    snprintf(plain, sizeof plain, "%s/plain.h5", dir);
    EXPECT(copy_file(path, renamed) == 0 && ckpt_is_checkpoint_path(renamed) == 1,
           "ckpt_is_checkpoint_path: a checkpoint named state.h5 not recognised");
    hid_t file = H5Fcreate(plain, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (file >= 0) H5Fclose(file);
    EXPECT(file >= 0 && ckpt_is_checkpoint_path(plain) == 0, "ckpt_is_checkpoint_path: a plain HDF5 file taken "
           "for a checkpoint");
  }
}

static void test_failing_writes(MPI_Comm comm, const char *dir) {
  int rank;
  MPI_Comm_rank(comm, &rank);
  char file_path[4600], under_file[4700];
  snprintf(file_path, sizeof file_path, "%s/a-file", dir);
  snprintf(under_file, sizeof under_file, "%s/sub", file_path);
  if (rank == 0) {
    FILE *f = fopen(file_path, "w");
    if (f) fclose(f);
  }
  MPI_Barrier(comm);
  static ckpt_meta_t meta;
  make_meta(&meta, 3, 5, 1, "this-run");
  const char *targets[2] = {file_path, under_file};
  for (int t = 0; t < 2; ++t) {
    ds_error_clear();
    const int status = write_checkpoint(comm, targets[t], &meta, 2);
    const int agreed = statuses_agree(comm, status);
    EXPECT(status != DS_OK && agreed && ds_error_message()[0],
           "ckpt_write into %s (a regular file's place) succeeded or disagreed", targets[t]);
    if (rank == 0 && status != DS_OK) printf("  refused (write into %s): %s\n", t ? "a path under a file" : "a file",
                                             ds_error_message());
  }
  ds_error_clear();
}

/* --- main ------------------------------------------------------------------------------------- */

static void remove_tree(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *e;
  char path[4700];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) remove_tree(path);
    else unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  h5util_init();
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const double started = MPI_Wtime();
  char root[4096] = "";
  if (world_rank == 0) {
    snprintf(root, sizeof root, "%s/ckpt-test-XXXXXX", argc > 1 ? argv[1] : "/tmp");
    if (!mkdtemp(root)) {
      fprintf(stderr, "FAIL: mkdtemp(%s): %s\n", root, strerror(errno));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }
  MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);

  /* Writers of 1, 2, ... ranks (the first w of the world), item counts that leave ranks uneven
   * (7 over 3: 2, 2, 3) or empty (2 over 3); readers of every size up to the world's. */
  const int64_t item_counts[] = {7, 2, 301};
  static ckpt_meta_t metas[3][3];
  uint64_t checksums[3][3][N_ARRAYS + N_GLOBALS];
  memset(checksums, 0, sizeof checksums);
  const int max_writers = world_size < 3 ? world_size : 3;
  for (int w = 1; w <= max_writers; ++w) {
    MPI_Comm writers;
    MPI_Comm_split(MPI_COMM_WORLD, world_rank < w ? 0 : MPI_UNDEFINED, world_rank, &writers);
    for (int c = 0; c < 3; ++c) {
      const int with_optional = w != 2; /* the 2-rank writer leaves inputs and start_dir empty */
      char dir[4200];
      snprintf(dir, sizeof dir, "%s/w%d-n%lld", root, w, (long long)item_counts[c]);
      make_meta(&metas[w - 1][c], 10 + w, item_counts[c], with_optional, "this-run");
      if (writers != MPI_COMM_NULL) {
        ds_error_clear();
        const int status = write_checkpoint(writers, dir, &metas[w - 1][c], 2);
        const int agreed = statuses_agree(writers, status);
        EXPECT(status == DS_OK && agreed, "write on %d ranks, %lld items: %s", w,
               (long long)item_counts[c], ds_error_message());
      }
      MPI_Barrier(MPI_COMM_WORLD);
      char label[256];
      snprintf(label, sizeof label, "layout: %d writers, %lld items", w, (long long)item_counts[c]);
      if (world_rank == 0) check_layout(dir, &metas[w - 1][c], with_optional, checksums[w - 1][c], label);
      MPI_Barrier(MPI_COMM_WORLD);
      for (int r = 1; r <= world_size; ++r) {
        MPI_Comm readers;
        MPI_Comm_split(MPI_COMM_WORLD, world_rank < r ? 0 : MPI_UNDEFINED, world_rank, &readers);
        if (readers != MPI_COMM_NULL) {
          char path[4300];
          snprintf(path, sizeof path, "%s/ckpt-%lld.h5", dir, (long long)metas[w - 1][c].iteration);
          snprintf(label, sizeof label, "written on %d, read on %d ranks, %lld items", w, r,
                   (long long)item_counts[c]);
          read_and_compare(readers, path, &metas[w - 1][c], label);
          MPI_Comm_free(&readers);
        }
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    if (writers != MPI_COMM_NULL) MPI_Comm_free(&writers);
  }
  /* The checksums do not depend on how many ranks wrote (ckpt.c: rows' hashes are summed). */
  if (world_rank == 0)
    for (int w = 2; w <= max_writers; ++w)
      for (int c = 0; c < 3; ++c)
        EXPECT(memcmp(checksums[w - 1][c], checksums[0][c], sizeof checksums[0][c]) == 0,
               "checksums written by %d ranks differ from 1 rank's (%lld items)", w, (long long)item_counts[c]);
  if (world_rank == 0) printf("write/read: writers 1..%d x readers 1..%d x %d item counts\n", max_writers, world_size, 3);

  /* Damaged copies of a good 7-item checkpoint written by the whole world (ckpt-12.h5; its
   * misnamed copy is ckpt-13.h5), read by the whole world. */
  {
    static ckpt_meta_t good_meta;
    char dir[4200], good[4300], damaged_dir[4200];
    snprintf(dir, sizeof dir, "%s/good", root);
    snprintf(good, sizeof good, "%s/ckpt-12.h5", dir);
    snprintf(damaged_dir, sizeof damaged_dir, "%s/damaged", root);
    make_meta(&good_meta, 12, 7, 1, "this-run");
    ds_error_clear();
    EXPECT(write_checkpoint(MPI_COMM_WORLD, dir, &good_meta, 2) == DS_OK, "writing ckpt-12: %s", ds_error_message());
    if (world_rank == 0) mkdir(damaged_dir, 0777);
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank == 0) printf("damaged files (read on %d ranks):\n", world_size);
    test_damaged(MPI_COMM_WORLD, damaged_dir, good, &good_meta);

    /* A checkpoint of format 5 (variable-length strings) still reads back as written. */
    char old_dir[4200], old[4300];
    snprintf(old_dir, sizeof old_dir, "%s/format5", root);
    snprintf(old, sizeof old, "%s/ckpt-12.h5", old_dir);
    ds_error_clear();
    EXPECT(write_checkpoint(MPI_COMM_WORLD, old_dir, &good_meta, 2) == DS_OK, "writing format5/ckpt-12: %s",
           ds_error_message());
    if (world_rank == 0) EXPECT(forge_format_5(old, &good_meta) == 0, "rewriting %s as format 5", old);
    MPI_Barrier(MPI_COMM_WORLD);
    read_and_compare(MPI_COMM_WORLD, old, &good_meta, "format 5 (variable-length strings), read by format 6");
    if (world_rank == 0) printf("format 5 read back\n");
  }
  {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/keep", root);
    test_keep_and_list(MPI_COMM_WORLD, dir);
    test_failing_writes(MPI_COMM_WORLD, root);
  }

  int total_failures = 0, total_checks = 0;
  MPI_Allreduce(&failures, &total_failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(&checks, &total_checks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0) {
    printf("checkpoints on %d ranks: %d checks, %d failures, %.2f s\n", world_size, total_checks, total_failures,
           MPI_Wtime() - started);
    if (total_failures == 0) remove_tree(root);
    else printf("files kept in %s\n", root);
  }
  MPI_Finalize();
  return total_failures ? 1 : 0;
}
