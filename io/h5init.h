/* h5init.h: starting positions from a user's HDF5 file (--init): dataset "x", [n, dim]
 * float, read collectively, each rank its own rows. */
#ifndef DSAMPLER_H5INIT_H
#define DSAMPLER_H5INIT_H

#include <mpi.h>
#include <stdint.h>

/* Reads rows [row_begin, row_end) of dataset "x" into x_local [row_end - row_begin, dim].
 * A missing file or dataset, or a shape other than [n, dim], is an input error naming the
 * file and what was expected. Collective. */
int h5init_read(MPI_Comm comm, const char *path, int64_t n, int64_t dim, int64_t row_begin,
                int64_t row_end, float *x_local);

#endif
