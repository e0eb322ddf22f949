/* h5data.h: datasets for targets, read collectively from HDF5: every rank reads the whole
 * of each array (a target needs all the data for the chains or particles it owns). Shapes,
 * types and values are checked, and the verdict is the same on every rank. */
#ifndef DSAMPLER_H5DATA_H
#define DSAMPLER_H5DATA_H

#include <mpi.h>
#include <stdint.h>

/* A regression dataset: X [n, dim] float32 row-major, y [n] float32. */
typedef struct h5data_xy {
  int64_t n;
  int64_t dim;
  float *x;
  float *y;
} h5data_xy_t;

/* Reads datasets "X" [n, D] and "y" [n] of `path`. `option` names the input in messages
 * (e.g. "--data"). A missing file or dataset, a shape other than [n, D] and [n], n or D of
 * 0, a value that is not finite in float32, or (when binary_labels) a label other than 0
 * or 1 is DS_ERR_INPUT with a message naming the file, the dataset and what was expected.
 * Collective over comm: every rank returns the same status. */
int h5data_read_xy(MPI_Comm comm, const char *path, const char *option, int binary_labels,
                   h5data_xy_t *out);
void h5data_xy_free(h5data_xy_t *data);

/* Reads the 2-D dataset `name` of `path` into a new float64 array [rows, cols] (*values,
 * freed with free()). Checks as above: present, 2-D, finite. Collective. */
int h5data_read_matrix(MPI_Comm comm, const char *path, const char *option, const char *name,
                       int64_t *rows, int64_t *cols, double **values);

#endif
