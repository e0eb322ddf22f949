/* h5out.h: the run's output file in ArviZ's InferenceData layout (DESIGN.md, I/O): one HDF5
 * group per InferenceData group, variables [chain, draw(, <var>_dim_0)], every axis a
 * coordinate dataset made a dimension scale. All calls are collective over the file's
 * communicator; each rank writes its own box of (chain, draw), possibly empty. */
#ifndef DSAMPLER_H5OUT_H
#define DSAMPLER_H5OUT_H

#include <mpi.h>
#include <stdint.h>

typedef enum { H5OUT_FLOAT32 = 0, H5OUT_INT32 = 1, H5OUT_BOOL = 2, H5OUT_FLOAT64 = 3 } h5out_dtype_t;

/* Trailing axes a variable may have. */
#define H5OUT_MAX_AXES 8

typedef struct h5out_var {
  const char *name;
  h5out_dtype_t dtype;
  int has_dim;         /* 1: a trailing axis of the group's dim, named <name>_dim_0 */
} h5out_var_t;

/* Trailing axes of a variable's own (h5out_add_group_shaped), named <name>_dim_0,
 * <name>_dim_1, ...; its data are laid out [chain, draw, extent...] in C order. */
typedef struct h5out_shape {
  int n_axes;          /* 0: as h5out_var_t says (has_dim) */
  int64_t extent[H5OUT_MAX_AXES];
} h5out_shape_t;

typedef struct h5out_attr {
  const char *key;
  const char *value;
} h5out_attr_t;

typedef struct h5out h5out_t;

/* A group's axis names and its draw coordinate's values, draw_first + draw_step * index (the
 * usual chain, draw, 0, 1 is h5out_default_axes; SVGD's snapshots are particle, iteration,
 * 0, K). */
typedef struct h5out_axes {
  const char *chain, *draw;
  int64_t draw_first, draw_step;
} h5out_axes_t;
extern const h5out_axes_t h5out_default_axes;

/* Creates (truncates) path; attrs go on the root group as strings, beside created_at,
 * inference_library and inference_library_version. */
int h5out_create(h5out_t **out, MPI_Comm comm, const char *path, const h5out_attr_t *attrs, int n_attrs);
/* Adds a group of n_vars variables with n_chains chains, 0 draws (they grow with writes),
 * and trailing axis `dim` for variables that have it. draws_per_write: how many draws each
 * write will add (the same on every rank); the chunks are shaped for it. */
int h5out_add_group(h5out_t *f, const char *name, int64_t n_chains, int64_t dim, int64_t draws_per_write,
                    const h5out_var_t *vars, int n_vars, int *group_id);
/* As h5out_add_group, with the given axes. */
int h5out_add_group_axes(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                         int64_t draws_per_write, const h5out_var_t *vars, int n_vars, int *group_id);
/* As h5out_add_group, where shapes[v].n_axes > 0 gives variable v (has_dim 0) axes of its own
 * (shapes may be NULL: none has). */
int h5out_add_group_shaped(h5out_t *f, const char *name, int64_t n_chains, int64_t dim, int64_t draws_per_write,
                           const h5out_var_t *vars, const h5out_shape_t *shapes, int n_vars, int *group_id);
/* Grows the group to `total_draws` draws if it has fewer, then writes, for each variable v,
 * data[v] laid out [chain_count, draw_count(, dim)] into chains [chain_begin, +chain_count)
 * and draws [draw_begin, +draw_count). */
int h5out_write(h5out_t *f, int group_id, int64_t total_draws, int64_t chain_begin,
                int64_t chain_count, int64_t draw_begin, int64_t draw_count, const void *const *data);
/* As h5out_write, from buffers that hold buffer_draws >= draw_count draws per chain
 * ([chain_count, buffer_draws(, dim)]), of which the first draw_count are written. */
int h5out_write_block(h5out_t *f, int group_id, int64_t total_draws, int64_t chain_begin, int64_t chain_count,
                      int64_t draw_begin, int64_t draw_count, int64_t buffer_draws, const void *const *data);
/* Writes (or rewrites) group `name` of per-chain summaries without a draw axis: for each of
 * n_chain_vars variables, [n_chains, dim] float32 from this rank's rows chain_data[v]
 * ([chain_count, dim] for chains [chain_begin, +chain_count)); for each of n_global_vars, [dim]
 * float64 from rank 0's global_data[v]. The axes are `chain` and dim_name. Collective. */
int h5out_write_summary_group(h5out_t *f, const char *name, const char *dim_name, int64_t n_chains, int64_t dim,
                              int64_t chain_begin, int64_t chain_count, const char *const *chain_vars,
                              const float *const *chain_data, int n_chain_vars, const char *const *global_vars,
                              const double *const *global_data, int n_global_vars);
/* Opens an existing output file for appending (resume). Collective. */
int h5out_open(h5out_t **out, MPI_Comm comm, const char *path);
/* Opens group `name` of an opened file, made by h5out_add_group_shaped with these shapes: its
 * variables must exist with n_chains chains (and the trailing axis dim); the group is
 * truncated to `keep_draws` draws, which it must hold. */
int h5out_open_group_shaped(h5out_t *f, const char *name, int64_t n_chains, int64_t dim, const h5out_var_t *vars,
                            const h5out_shape_t *shapes, int n_vars, int64_t keep_draws, int *group_id);
/* As h5out_open_group_shaped, with the given axes and the variables' default shapes. */
int h5out_open_group_axes(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                          const h5out_var_t *vars, int n_vars, int64_t keep_draws, int *group_id);
/* Removes group `name` (and everything in it) when it exists. Collective. */
int h5out_remove_group(h5out_t *f, const char *name);
/* Writes (or rewrites) group `name` of n_vars float64 series [count] along axis `axis`, whose
 * coordinate takes the int64 values `coordinates`; rank 0's data are written. Collective. */
int h5out_write_series(h5out_t *f, const char *name, const char *axis, int64_t count, const int64_t *coordinates,
                       const char *const *vars, const double *const *data, int n_vars);
/* Reads root attribute `key` (a string) into value; DS_ERR_INPUT when absent. Collective. */
int h5out_read_attr(h5out_t *f, const char *key, char *value, size_t size);
/* Writes (or replaces) the file's string attribute key = value. Collective, the same value on
 * every rank. */
int h5out_set_attr(h5out_t *f, const char *key, const char *value);
/* Starts the disk writing what this rank has written to the file so far, without waiting for
 * it (Linux sync_file_range; elsewhere nothing). Otherwise the page cache holds gigabytes of a
 * large output until the file is closed and only then writes them, after the run's work is
 * done; started early, the disk writes while the run goes on. Local, no communication.
 * DSAMPLER_H5_EARLY_WRITEBACK=0 turns it off (for comparison). */
void h5out_start_writeback(h5out_t *f);
/* Makes everything written so far durable. Collective. */
int h5out_flush(h5out_t *f);
/* Flushes and closes; f is freed whatever the result. */
int h5out_close(h5out_t *f);
/* As h5out_close; with failed (agreed on every rank) the file is left to the end of the
 * program (h5util_left_open): HDF5 cannot close a file whose write failed. */
int h5out_close_as(h5out_t *f, int failed);

/* The HDF5 checker: HDF5 calls return negative values on failure. */
int h5_fail(const char *file, int line, const char *call);
#define H5_CHECK(call)                                         \
  do {                                                         \
    if ((call) < 0) return h5_fail(__FILE__, __LINE__, #call); \
  } while (0)

#endif
