/* h5init.c: reads --init starting positions collectively. */
#include "h5init.h"

#include <hdf5.h>
#include <stdio.h>

#include "h5util.h"
#include "status.h"

int h5init_read(MPI_Comm comm, const char *path, int64_t n, int64_t dim, int64_t row_begin, int64_t row_end,
                float *x_local) {
  hid_t file;
  h5util_set_context("--init %s", path);
  DS_TRY(h5util_open_read(comm, "--init", path, &file));
  int status = DS_OK;
  hid_t dataset;
  H5E_BEGIN_TRY { dataset = H5Dopen2(file, "x", H5P_DEFAULT); }
  H5E_END_TRY;
  hid_t space = H5I_INVALID_HID;
  if (dataset < 0) {
    status = ds_fail(DS_ERR_INPUT, "--init %s: no dataset 'x' (expected x with shape [%lld, %lld])", path,
                     (long long)n, (long long)dim);
  } else {
    space = H5Dget_space(dataset);
    int rank = H5Sget_simple_extent_ndims(space);
    hsize_t dims[8] = {0};
    if (rank > 0 && rank <= 8) H5Sget_simple_extent_dims(space, dims, NULL);
    hid_t type = H5Dget_type(dataset);
    H5T_class_t type_class = H5Tget_class(type);
    H5Tclose(type);
    if (rank != 2 || dims[0] != (hsize_t)n || dims[1] != (hsize_t)dim) {
      char shape[128] = "";
      int used = 0;
      for (int r = 0; r < rank && r < 8; ++r)
        used += snprintf(shape + used, sizeof shape - (size_t)used, "%s%llu", r ? ", " : "", (unsigned long long)dims[r]);
      status = ds_fail(DS_ERR_INPUT, "--init %s: dataset x has shape [%s], expected [%lld, %lld] (items, dim)", path,
                       shape, (long long)n, (long long)dim);
    } else if (type_class != H5T_FLOAT && type_class != H5T_INTEGER) {
      status = ds_fail(DS_ERR_INPUT, "--init %s: dataset x must hold numbers", path);
    }
  }
  /* The shape checks read metadata every rank sees alike; agreeing costs little and keeps a
   * rank that failed otherwise out of the collective read below. */
  status = h5util_agree(comm, status);
  if (status == DS_OK) {
    hsize_t start[2] = {(hsize_t)row_begin, 0}, count[2] = {(hsize_t)(row_end - row_begin), (hsize_t)dim};
    hsize_t elements = count[0] * count[1];
    hid_t mem_space = H5Screate_simple(1, elements ? &elements : (hsize_t[]){1}, NULL);
    hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
    herr_t rc = mem_space < 0 || xfer < 0 ? -1 : H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
    if (rc >= 0 && elements) {
      rc = H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
    } else if (rc >= 0) {
      rc = H5Sselect_none(space);
      if (rc >= 0) rc = H5Sselect_none(mem_space);
    }
    char what[4200];
    snprintf(what, sizeof what, "--init %s: cannot select this rank's rows of dataset x", path);
    if (rc < 0) status = h5util_fail(DS_ERR_IO, what);
    /* The read is collective: every rank reaches it, or none does. */
    status = h5util_agree(comm, status);
    float placeholder;
    snprintf(what, sizeof what, "--init %s: reading dataset x failed", path);
    if (status == DS_OK && H5Dread(dataset, H5T_NATIVE_FLOAT, mem_space, space, xfer, elements ? x_local : &placeholder) < 0)
      status = h5util_fail(DS_ERR_INPUT, what);
    if (xfer >= 0) H5Pclose(xfer);
    if (mem_space >= 0) H5Sclose(mem_space);
  }
  if (space >= 0) H5Sclose(space);
  if (dataset >= 0) H5Dclose(dataset);
  H5Fclose(file);
  return h5util_agree(comm, status);
}
