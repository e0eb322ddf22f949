/* h5data.c: reads target datasets (X and y, a covariance) collectively, every rank the whole
 * array, and checks them before any work starts. */
#include "h5data.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5out.h"
#include "h5util.h"
#include "status.h"

/* Every rank leaves with the status and message of the lowest failing rank, so a failure
 * seen on one rank (memory, a read) never leaves the others in the next collective. */
static int h5data_agree(MPI_Comm comm, int status) { return h5util_agree(comm, status); }

static void format_shape(char *out, size_t size, int rank, const hsize_t *dims) {
  int used = snprintf(out, size, "[");
  for (int r = 0; r < rank && used < (int)size; ++r)
    used += snprintf(out + used, size - (size_t)used, "%s%llu", r ? ", " : "", (unsigned long long)dims[r]);
  if (used < (int)size) snprintf(out + used, size - (size_t)used, "]");
}

static hid_t open_file(MPI_Comm comm, const char *path, const char *option, int *status) {
  hid_t file = H5I_INVALID_HID;
  h5util_set_context("%s %s", option, path);
  *status = h5util_open_read(comm, option, path, &file);
  return file;
}

/* Opens dataset `name` and checks it is numeric with `want_rank` axes; dims receives its
 * shape. `expected` describes the layout for messages. */
static hid_t open_dataset(hid_t file, const char *path, const char *option, const char *name, int want_rank,
                          const char *expected, hsize_t dims[2], int *status) {
  hid_t dataset;
  H5E_BEGIN_TRY { dataset = H5Dopen2(file, name, H5P_DEFAULT); }
  H5E_END_TRY;
  if (dataset < 0) {
    *status = ds_fail(DS_ERR_INPUT, "%s %s: no dataset '%s' (expected %s)", option, path, name, expected);
    return dataset;
  }
  hid_t space = H5Dget_space(dataset);
  int rank = H5Sget_simple_extent_ndims(space);
  hsize_t all_dims[H5S_MAX_RANK] = {0};
  if (rank > 0) H5Sget_simple_extent_dims(space, all_dims, NULL);
  H5Sclose(space);
  hid_t type = H5Dget_type(dataset);
  H5T_class_t type_class = H5Tget_class(type);
  H5Tclose(type);
  char shape[128];
  format_shape(shape, sizeof shape, rank, all_dims);
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER)
    *status = ds_fail(DS_ERR_INPUT, "%s %s: dataset '%s' must hold numbers (expected %s)", option, path, name,
                      expected);
  else if (rank != want_rank)
    *status = ds_fail(DS_ERR_INPUT, "%s %s: dataset '%s' has shape %s, expected %s", option, path, name, shape,
                      expected);
  else
    for (int r = 0; r < rank; ++r)
      if (all_dims[r] == 0)
        *status = ds_fail(DS_ERR_INPUT, "%s %s: dataset '%s' is empty (shape %s, expected %s)", option, path,
                          name, shape, expected);
  dims[0] = all_dims[0];
  dims[1] = want_rank > 1 ? all_dims[1] : 1;
  return dataset;
}

/* The whole dataset on every rank, converted to mem_type, in one collective read. */
static int read_all(MPI_Comm comm, hid_t dataset, hid_t mem_type, size_t bytes, const char *option, const char *path,
                    const char *name, void **buffer) {
  char what[4400];
  snprintf(what, sizeof what, "%s %s: reading dataset '%s' failed", option, path, name);
  /* A dataset whose storage was never written reads back as fill values: a crafted file
   * declares a shape it does not hold. */
  if (bytes > 0 && H5Dget_storage_size(dataset) == 0) {
    *buffer = NULL;
    return h5data_agree(comm, ds_fail(DS_ERR_INPUT, "%s %s: dataset '%s' declares %zu bytes but holds no data", option,
                                      path, name, bytes));
  }
  *buffer = malloc(bytes ? bytes : 1);
  int status = *buffer ? DS_OK : DS_FAIL_ALLOC(what, bytes);
  status = h5data_agree(comm, status);
  if (status != DS_OK) return status;
  hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
  if (xfer < 0 || H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE) < 0)
    status = h5_fail(__FILE__, __LINE__, "H5Pset_dxpl_mpio");
  else if (H5Dread(dataset, mem_type, H5S_ALL, H5S_ALL, xfer, *buffer) < 0)
    status = h5util_fail(DS_ERR_INPUT, what);
  if (xfer >= 0) H5Pclose(xfer);
  return h5data_agree(comm, status);
}

static int first_non_finite_float(const float *values, size_t count, size_t *where) {
  for (size_t e = 0; e < count; ++e)
    if (!isfinite(values[e])) {
      *where = e;
      return 1;
    }
  return 0;
}

int h5data_read_xy(MPI_Comm comm, const char *path, const char *option, int binary_labels, h5data_xy_t *out) {
  memset(out, 0, sizeof *out);
  static const char expected[] = "X [n, D] and y [n]";
  int status = DS_OK;
  hid_t file = open_file(comm, path, option, &status);
  hid_t x_set = H5I_INVALID_HID, y_set = H5I_INVALID_HID;
  hsize_t x_dims[2] = {0, 0}, y_dims[2] = {0, 0};
  if (status == DS_OK) x_set = open_dataset(file, path, option, "X", 2, expected, x_dims, &status);
  if (status == DS_OK) y_set = open_dataset(file, path, option, "y", 1, expected, y_dims, &status);
  if (status == DS_OK && y_dims[0] != x_dims[0])
    status = ds_fail(DS_ERR_INPUT, "%s %s: dataset 'y' has shape [%llu], expected [%llu] (one label per row of X [%llu, %llu])",
                     option, path, (unsigned long long)y_dims[0], (unsigned long long)x_dims[0],
                     (unsigned long long)x_dims[0], (unsigned long long)x_dims[1]);
  /* The checks so far read only metadata, which every rank sees alike. */
  status = h5data_agree(comm, status);
  /* Sizes come from the file: a few bytes of metadata can declare any shape. */
  size_t x_bytes = 0, y_bytes = 0;
  if (status == DS_OK) status = h5util_checked_bytes(option, path, "X", 2, x_dims, sizeof(float), &x_bytes);
  if (status == DS_OK) status = h5util_checked_bytes(option, path, "y", 1, y_dims, sizeof(float), &y_bytes);
  if (status == DS_OK && x_dims[1] > (hsize_t)INT32_MAX)
    status = ds_fail(DS_ERR_INPUT, "%s %s: dataset 'X' has %llu columns; at most %d", option, path,
                     (unsigned long long)x_dims[1], INT32_MAX);
  status = h5data_agree(comm, status);
  if (status == DS_OK) {
    out->n = (int64_t)x_dims[0];
    out->dim = (int64_t)x_dims[1];
    status = read_all(comm, x_set, H5T_NATIVE_FLOAT, x_bytes, option, path, "X", (void **)&out->x);
  }
  if (status == DS_OK) status = read_all(comm, y_set, H5T_NATIVE_FLOAT, y_bytes, option, path, "y", (void **)&out->y);
  if (status == DS_OK) {
    size_t where;
    if (first_non_finite_float(out->x, (size_t)(out->n * out->dim), &where))
      status = ds_fail(DS_ERR_INPUT, "%s %s: X[%zu, %zu] is not finite in float32 (%g)", option, path,
                       where / (size_t)out->dim, where % (size_t)out->dim, (double)out->x[where]);
    else if (first_non_finite_float(out->y, (size_t)out->n, &where))
      status = ds_fail(DS_ERR_INPUT, "%s %s: y[%zu] is not finite in float32 (%g)", option, path, where,
                       (double)out->y[where]);
    else if (binary_labels)
      for (int64_t i = 0; i < out->n && status == DS_OK; ++i)
        if (out->y[i] != 0.0f && out->y[i] != 1.0f)
          status = ds_fail(DS_ERR_INPUT, "%s %s: y[%lld] is %g; labels must be 0 or 1", option, path,
                           (long long)i, (double)out->y[i]);
  }
  if (y_set >= 0) H5Dclose(y_set);
  if (x_set >= 0) H5Dclose(x_set);
  if (file >= 0) H5Fclose(file);
  if (status != DS_OK) h5data_xy_free(out);
  return status;
}

void h5data_xy_free(h5data_xy_t *data) {
  free(data->x);
  free(data->y);
  memset(data, 0, sizeof *data);
}

int h5data_read_matrix(MPI_Comm comm, const char *path, const char *option, const char *name, int64_t *rows,
                       int64_t *cols, double **values) {
  *values = NULL;
  *rows = *cols = 0;
  char expected[96];
  snprintf(expected, sizeof expected, "%s [rows, columns]", name);
  int status = DS_OK;
  hid_t file = open_file(comm, path, option, &status);
  hid_t set = H5I_INVALID_HID;
  hsize_t dims[2] = {0, 0};
  if (status == DS_OK) set = open_dataset(file, path, option, name, 2, expected, dims, &status);
  size_t bytes = 0;
  if (status == DS_OK) status = h5util_checked_bytes(option, path, name, 2, dims, sizeof(double), &bytes);
  status = h5data_agree(comm, status);
  if (status == DS_OK) status = read_all(comm, set, H5T_NATIVE_DOUBLE, bytes, option, path, name, (void **)values);
  if (status == DS_OK)
    for (size_t e = 0; e < dims[0] * dims[1] && status == DS_OK; ++e)
      if (!isfinite((*values)[e]))
        status = ds_fail(DS_ERR_INPUT, "%s %s: %s[%zu, %zu] is not finite (%g)", option, path, name,
                         e / (size_t)dims[1], e % (size_t)dims[1], (*values)[e]);
  if (set >= 0) H5Dclose(set);
  if (file >= 0) H5Fclose(file);
  if (status != DS_OK) {
    free(*values);
    *values = NULL;
  } else {
    *rows = (int64_t)dims[0];
    *cols = (int64_t)dims[1];
  }
  return status;
}
