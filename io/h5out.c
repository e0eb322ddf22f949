/* h5out.c: collective writes of the ArviZ-layout output (see h5out.h). Groups, datasets,
 * dimension scales and attributes are created identically on every rank with collective
 * metadata writes; each rank then writes its (chain, draw) box in one collective transfer,
 * as in HDF5's ph5_hyperslab_by_row example. */
#ifdef __linux__
#define _GNU_SOURCE /* sync_file_range */
#endif
#include "h5out.h"
#include "comm.h"

#include <fcntl.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "h5util.h"
#include "status.h"

#define H5OUT_MAX_GROUPS 8
/* Variables per group: a Stan model's outputs are one each (target.h allows 4096). */
#define H5OUT_MAX_VARS 4096
/* Elements per chunk: about 1 MiB of float32. */
#define H5OUT_CHUNK_ELEMENTS ((hsize_t)1 << 18)

typedef struct h5out_group {
  hid_t group, chain_scale, draw_scale, dim_scale;
  int64_t n_chains, dim, n_draws;
  int64_t draw_first, draw_step; /* the draw coordinate's values: first + step * index */
  int n_vars;
  hid_t datasets[H5OUT_MAX_VARS];
  h5out_var_t vars[H5OUT_MAX_VARS];
  h5out_shape_t shapes[H5OUT_MAX_VARS]; /* the vars' own axes (h5out_add_group_shaped), n_axes 0: none */
} h5out_group_t;

struct h5out {
  MPI_Comm comm;
  int rank;
  int serial;  /* one rank: the POSIX driver, no MPI-IO (output_driver_serial) */
  int writeback_fd; /* h5out_start_writeback's descriptor: -1 not yet opened, -2 not used */
  char path[4096];
  hid_t file, xfer, bool_type;
  char created_at[64];
  int n_groups;
  h5out_group_t groups[H5OUT_MAX_GROUPS];
};

/* What a failed call was doing, in a user's words, from the checked expression's text. */
static const char *call_in_words(const char *call) {
  static const struct { const char *text, *words; } known[] = {
      {"H5Dwrite", "write a dataset"},        {"H5Dread", "read a dataset"},
      {"H5Dset_extent", "grow a dataset"},    {"H5Dcreate", "create a dataset"},
      {"datasets", "create a dataset"},       {"H5Dopen", "open a dataset"},
      {"H5DS", "make a coordinate"},          {"scale", "make a coordinate"},
      {"coordinate", "make a coordinate"},    {"H5Aread", "read an attribute"},
      {"H5Aopen", "read an attribute"},       {"H5Awrite", "write an attribute"},
      {"attr", "write an attribute"},         {"H5Gopen", "open a group"},
      {"H5Ldelete", "remove a group"},        {"H5Literate", "list the variables"},
      {"group", "create a group"},            {"root", "create a group"},
      {"H5Fflush", "flush the file"},         {"H5S", "select the rows to write or read"},
      {"space", "select the rows to write or read"}};
  for (size_t i = 0; i < sizeof known / sizeof known[0]; ++i)
    if (strstr(call, known[i].text)) return known[i].words;
  return "set up a transfer";
}

int h5_fail(const char *file, int line, const char *call) {
  /* The file and the step in the user's words, and HDF5's own reason (h5util_fail); the call's
   * source location only where DSAMPLER_ERROR_LOCATIONS asks for it. */
  char what[1600];
  const int used = snprintf(what, sizeof what, "%s: HDF5 could not %s", h5util_context(), call_in_words(call));
  const char *locations = getenv("DSAMPLER_ERROR_LOCATIONS");
  if (locations && locations[0] && strcmp(locations, "0") != 0 && used > 0 && (size_t)used < sizeof what)
    snprintf(what + used, sizeof what - (size_t)used, " [%s:%d: %s]", file, line, call);
  return h5util_fail(DS_ERR_IO, what);
}

/* A failed step of writing the output, in one line naming the file (and HDF5's reason). */
static int output_fail(const h5out_t *f, const char *step) {
  char what[4200];
  snprintf(what, sizeof what, "--out %s: %s failed", f->path, step);
  return h5util_fail(DS_ERR_IO, what);
}

/* What a failed HDF5 call of this output names (h5util_set_context). */
static void output_context(const h5out_t *f) {
  h5util_set_context("--out %s", f->path);
  h5util_set_write_path(f->path);
}

static int write_string_attr(hid_t object, const char *key, const char *value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5_CHECK(type);
  H5_CHECK(H5Tset_size(type, H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8));
  hid_t space = H5Screate(H5S_SCALAR);
  H5_CHECK(space);
  hid_t attr = H5Acreate2(object, key, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  H5_CHECK(H5Awrite(attr, type, &value));
  H5_CHECK(H5Aclose(attr));
  H5_CHECK(H5Sclose(space));
  H5_CHECK(H5Tclose(type));
  return DS_OK;
}

static int write_library_attrs(h5out_t *f, hid_t object) {
  DS_TRY(write_string_attr(object, "created_at", f->created_at));
  DS_TRY(write_string_attr(object, "inference_library", "dsampler"));
  DS_TRY(write_string_attr(object, "inference_library_version", DSAMPLER_VERSION));
  return DS_OK;
}

static int writer_setup(h5out_t *f);

/* A file written by one rank goes through HDF5's POSIX driver: MPI-IO's collective path buys
 * nothing there and costs its aggregation copies (the full-output benchmark). Several ranks
 * take MPI-IO. DSAMPLER_H5_DRIVER=mpio keeps MPI-IO for one rank too (for comparison). The
 * datasets are the same either way. */
static int output_driver_serial(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const char *driver = getenv("DSAMPLER_H5_DRIVER");
  return size == 1 && !(driver && strcmp(driver, "mpio") == 0);
}

/* The file access list for the output: POSIX for one rank, MPI-IO with collective metadata
 * otherwise. */
static hid_t output_fapl(MPI_Comm comm, int serial) {
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  if (fapl < 0) return fapl;
  /* HDF5's own lock on the file would collide with the one run.c holds on it for the whole run
   * (run_lock_output), which already keeps other runs out. */
  herr_t rc = serial ? (H5Pset_fapl_sec2(fapl) < 0 || H5Pset_file_locking(fapl, 0, 1) < 0 ? -1 : 0)
                     : (H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL) < 0 || H5Pset_all_coll_metadata_ops(fapl, 1) < 0 ||
                        H5Pset_coll_metadata_write(fapl, 1) < 0)
                           ? -1
                           : 0;
  if (rc < 0) {
    H5Pclose(fapl);
    return -1;
  }
  return fapl;
}

int h5out_create(h5out_t **out, MPI_Comm comm, const char *path, const h5out_attr_t *attrs, int n_attrs) {
  h5util_set_context("--out %s", path);
  h5util_set_write_path(path);
  *out = NULL;
  h5out_t *f = calloc(1, sizeof *f);
  if (f) f->writeback_fd = -1;
  if (!f) return DS_FAIL_ALLOC("the output writer", sizeof *f);
  f->file = f->xfer = f->bool_type = H5I_INVALID_HID;
  /* The file's own communicator: its collectives may run on a writer thread while the
   * caller's run on theirs. */
  if (MPI_Comm_dup(comm, &f->comm) != MPI_SUCCESS) {
    free(f);
    return ds_fail(DS_ERR_MPI, "--out %s: MPI_Comm_dup failed", path);
  }
  comm = f->comm;
  MPI_Comm_rank(comm, &f->rank);
  snprintf(f->path, sizeof f->path, "%s", path);
  /* Every rank must write the same attribute value: rank 0's clock decides. */
  if (f->rank == 0) {
    time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(f->created_at, sizeof f->created_at, "%Y-%m-%dT%H:%M:%S+00:00", &utc);
  }
  if (MPI_Bcast(f->created_at, sizeof f->created_at, MPI_CHAR, 0, comm) != MPI_SUCCESS) {
    MPI_Comm_free(&f->comm);
    free(f);
    return ds_fail(DS_ERR_MPI, "--out %s: MPI_Bcast(the creation time) failed", path);
  }

  f->serial = output_driver_serial(comm);
  hid_t fapl = output_fapl(comm, f->serial);
  H5_CHECK(fapl);
  H5E_BEGIN_TRY { f->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl); }
  H5E_END_TRY;
  H5Pclose(fapl);
  if (f->file < 0) {
    MPI_Comm_free(&f->comm);
    free(f);
    return ds_fail(DS_ERR_IO, "--out %s: cannot create the file (does its directory exist and is it writable?)", path);
  }
  *out = f;
  DS_TRY(writer_setup(f));

  hid_t root = H5Gopen2(f->file, "/", H5P_DEFAULT);
  H5_CHECK(root);
  DS_TRY(write_library_attrs(f, root));
  for (int i = 0; i < n_attrs; ++i) DS_TRY(write_string_attr(root, attrs[i].key, attrs[i].value));
  H5_CHECK(H5Gclose(root));
  return DS_OK;
}

/* Writes `count` int64 values at [offset, offset+count) of a 1-D dataset: given[0 .. count)
 * when given, else first + step * i, i = offset, offset + 1, ...; rank 0 writes, the others take
 * part with empty selections. */
static int write_coordinate_range(h5out_t *f, hid_t dataset, int64_t offset, int64_t count, int64_t first,
                                  int64_t step, const int64_t *given) {
  int64_t *values = malloc((size_t)(count > 0 ? count : 1) * sizeof *values);
  if (!values) return DS_FAIL_ALLOC("coordinate values", (size_t)count * sizeof(int64_t));
  for (int64_t i = 0; i < count; ++i) values[i] = given ? given[i] : first + step * (offset + i);
  hid_t file_space = H5Dget_space(dataset);
  hsize_t start = (hsize_t)offset, n = (hsize_t)(count > 0 ? count : 1);
  hid_t mem_space = H5Screate_simple(1, &n, NULL);
  int status = DS_OK;
  if (file_space < 0 || mem_space < 0) status = h5_fail(__FILE__, __LINE__, "H5Dget_space/H5Screate_simple");
  if (status == DS_OK) {
    if (f->rank == 0 && count > 0) {
      hsize_t c = (hsize_t)count;
      if (H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &start, NULL, &c, NULL) < 0)
        status = h5_fail(__FILE__, __LINE__, "H5Sselect_hyperslab");
    } else {
      H5Sselect_none(file_space);
      H5Sselect_none(mem_space);
    }
  }
  if (status == DS_OK && H5Dwrite(dataset, H5T_NATIVE_INT64, mem_space, file_space, f->xfer, values) < 0)
    status = output_fail(f, "writing a coordinate");
  if (mem_space >= 0) H5Sclose(mem_space);
  if (file_space >= 0) H5Sclose(file_space);
  free(values);
  return status;
}

/* A coordinate dataset of `size` values: given's, else 0, 1, ... (growable: extended later). */
static hid_t create_coordinate(h5out_t *f, hid_t group, const char *name, int64_t size, int growable,
                               const int64_t *given) {
  hsize_t dims = (hsize_t)size, max_dims = growable ? H5S_UNLIMITED : (hsize_t)size;
  hid_t space = H5Screate_simple(1, &dims, &max_dims);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (growable) {
    hsize_t chunk = 4096;
    H5Pset_chunk(dcpl, 1, &chunk);
    /* Space at creation or extension, as the variables': a file made on one rank (the POSIX
     * driver, whose default allocates at the first write) is written collectively when resumed
     * on several, and parallel HDF5 cannot allocate a chunk there (pwritev: Invalid argument). */
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  }
  hid_t dataset = H5Dcreate2(group, name, H5T_STD_I64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  H5Pclose(dcpl);
  H5Sclose(space);
  if (dataset < 0) return dataset;
  if (H5DSset_scale(dataset, name) < 0 ||
      (size > 0 && write_coordinate_range(f, dataset, 0, size, 0, 1, given) != DS_OK)) {
    H5Dclose(dataset);
    return H5I_INVALID_HID;
  }
  return dataset;
}

static hid_t file_type(const h5out_t *f, h5out_dtype_t dtype) {
  return dtype == H5OUT_FLOAT32 ? H5T_IEEE_F32LE
         : dtype == H5OUT_FLOAT64 ? H5T_IEEE_F64LE
         : dtype == H5OUT_INT32   ? H5T_STD_I32LE
                                  : f->bool_type;
}

static hid_t memory_type(const h5out_t *f, h5out_dtype_t dtype) {
  return dtype == H5OUT_FLOAT32 ? H5T_NATIVE_FLOAT
         : dtype == H5OUT_FLOAT64 ? H5T_NATIVE_DOUBLE
         : dtype == H5OUT_INT32   ? H5T_NATIVE_INT32
                                  : f->bool_type;
}

/* Copies var (and its own axes, when shapes is not NULL) into the group's slot v. */
static int store_var(h5out_group_t *g, int v, const h5out_var_t *var, const h5out_shape_t *shapes) {
  memset(&g->shapes[v], 0, sizeof g->shapes[v]);
  if (shapes) g->shapes[v] = shapes[v];
  const int n_axes = g->shapes[v].n_axes;
  if (n_axes < 0 || n_axes > H5OUT_MAX_AXES || (n_axes > 0 && var->has_dim))
    return ds_fail(DS_ERR_INTERNAL, "h5out: variable %s has a bad shape", var->name);
  g->vars[v] = *var;
  return DS_OK;
}

/* Variable v's trailing axes (after chain and draw) into trailing; returns how many. */
static int var_trailing(const h5out_group_t *g, int v, hsize_t *trailing) {
  if (g->vars[v].has_dim) {
    trailing[0] = (hsize_t)g->dim;
    return 1;
  }
  for (int axis = 0; axis < g->shapes[v].n_axes; ++axis) trailing[axis] = (hsize_t)g->shapes[v].extent[axis];
  return g->shapes[v].n_axes;
}

const h5out_axes_t h5out_default_axes = {"chain", "draw", 0, 1};

static int add_group(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                     int64_t draws_per_write, const h5out_var_t *vars, const h5out_shape_t *shapes, int n_vars,
                     int *group_id);

int h5out_add_group(h5out_t *f, const char *name, int64_t n_chains, int64_t dim, int64_t draws_per_write,
                    const h5out_var_t *vars, int n_vars, int *group_id) {
  output_context(f);
  return add_group(f, name, &h5out_default_axes, n_chains, dim, draws_per_write, vars, NULL, n_vars, group_id);
}

int h5out_add_group_axes(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                         int64_t draws_per_write, const h5out_var_t *vars, int n_vars, int *group_id) {
  output_context(f);
  return add_group(f, name, axes, n_chains, dim, draws_per_write, vars, NULL, n_vars, group_id);
}

int h5out_add_group_shaped(h5out_t *f, const char *name, int64_t n_chains, int64_t dim, int64_t draws_per_write,
                           const h5out_var_t *vars, const h5out_shape_t *shapes, int n_vars, int *group_id) {
  output_context(f);
  return add_group(f, name, &h5out_default_axes, n_chains, dim, draws_per_write, vars, shapes, n_vars, group_id);
}

static int add_group(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                     int64_t draws_per_write, const h5out_var_t *vars, const h5out_shape_t *shapes, int n_vars,
                     int *group_id) {
  if (f->n_groups >= H5OUT_MAX_GROUPS || n_vars > H5OUT_MAX_VARS)
    return ds_fail(DS_ERR_INTERNAL, "h5out: too many groups or variables");
  h5out_group_t *g = &f->groups[f->n_groups];
  memset(g, 0, sizeof *g);
  g->n_chains = n_chains;
  g->dim = dim;
  g->n_vars = n_vars;
  g->draw_first = axes->draw_first;
  g->draw_step = axes->draw_step;
  /* Links in creation order, so that readers (dsampler summary) list a model's variables in
   * the order it declares them, not by name. */
  hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE);
  H5_CHECK(gcpl);
  if (H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0) {
    H5Pclose(gcpl);
    return h5_fail(__FILE__, __LINE__, "H5Pset_link_creation_order");
  }
  g->group = H5Gcreate2(f->file, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
  H5Pclose(gcpl);
  H5_CHECK(g->group);
  DS_TRY(write_library_attrs(f, g->group));
  g->chain_scale = create_coordinate(f, g->group, axes->chain, n_chains, 0, NULL);
  H5_CHECK(g->chain_scale);
  g->draw_scale = create_coordinate(f, g->group, axes->draw, 0, 1, NULL);
  H5_CHECK(g->draw_scale);
  g->dim_scale = H5I_INVALID_HID;
  for (int v = 0; v < n_vars; ++v) {
    DS_TRY(store_var(g, v, &vars[v], shapes));
    if (vars[v].has_dim && g->dim_scale < 0) {
      char dim_name[256];
      snprintf(dim_name, sizeof dim_name, "%s_dim_0", vars[v].name);
      g->dim_scale = create_coordinate(f, g->group, dim_name, dim, 0, NULL);
      H5_CHECK(g->dim_scale);
    }
    hsize_t extent[H5OUT_MAX_AXES];
    const int n_axes = var_trailing(g, v, extent);
    const int rank = 2 + n_axes;
    hsize_t dims[2 + H5OUT_MAX_AXES] = {(hsize_t)n_chains, 0};
    hsize_t max_dims[2 + H5OUT_MAX_AXES] = {(hsize_t)n_chains, H5S_UNLIMITED};
    hsize_t trailing = 1;
    for (int axis = 0; axis < n_axes; ++axis) {
      dims[2 + axis] = max_dims[2 + axis] = extent[axis];
      trailing *= extent[axis];
    }
    /* Chunks span exactly the draws of one write, so each write fills whole chunks (no
     * read-modify-write of partly written chunks) and no space is allocated for draws never
     * written; chains fill the chunk up to about 1 MiB. */
    hsize_t chunk_draws = draws_per_write < 1 ? 1 : draws_per_write > 4096 ? 4096 : (hsize_t)draws_per_write;
    hsize_t chunk_elements = H5OUT_CHUNK_ELEMENTS;
    const char *chunk_text = getenv("DSAMPLER_H5_CHUNK_ELEMENTS");
    if (chunk_text && atoll(chunk_text) > 0) chunk_elements = (hsize_t)atoll(chunk_text);
    hsize_t chunk_chains = chunk_elements / (chunk_draws * trailing);
    if (chunk_chains < 1) chunk_chains = 1;
    if (chunk_chains > (hsize_t)n_chains) chunk_chains = (hsize_t)n_chains;
    hsize_t chunk[2 + H5OUT_MAX_AXES] = {chunk_chains, chunk_draws};
    for (int axis = 0; axis < n_axes; ++axis) chunk[2 + axis] = extent[axis];
    hid_t space = H5Screate_simple(rank, dims, max_dims);
    H5_CHECK(space);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5_CHECK(dcpl);
    H5_CHECK(H5Pset_chunk(dcpl, rank, chunk));
    /* Collective writes need space allocated at creation or extension. */
    H5_CHECK(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY));
    g->datasets[v] = H5Dcreate2(g->group, vars[v].name, file_type(f, vars[v].dtype), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5_CHECK(g->datasets[v]);
    H5_CHECK(H5DSattach_scale(g->datasets[v], g->chain_scale, 0));
    H5_CHECK(H5DSattach_scale(g->datasets[v], g->draw_scale, 1));
    if (vars[v].has_dim) H5_CHECK(H5DSattach_scale(g->datasets[v], g->dim_scale, 2));
    for (int axis = 0; axis < g->shapes[v].n_axes; ++axis) {
      char dim_name[300];
      snprintf(dim_name, sizeof dim_name, "%s_dim_%d", vars[v].name, axis);
      hid_t scale = create_coordinate(f, g->group, dim_name, (int64_t)extent[axis], 0, NULL);
      H5_CHECK(scale);
      herr_t attached = H5DSattach_scale(g->datasets[v], scale, (unsigned)(2 + axis));
      H5Dclose(scale);
      H5_CHECK(attached);
    }
  }
  *group_id = f->n_groups++;
  return DS_OK;
}


/* The worst status over the file's ranks, so all of them stop together before the next
 * collective call when any one failed. */
static int h5out_agree(h5out_t *f, int status) {
  int worst = status;
  if (MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, f->comm) != MPI_SUCCESS) return DS_ERR_MPI;
  if (worst != DS_OK && status == DS_OK) return ds_fail(worst, "output %s: another rank failed writing it", f->path);
  return worst;
}

/* This rank's selections for variable v: its box, or none. Local, no communication. */
static int select_box(const h5out_group_t *g, int v, int64_t chain_begin, int64_t chain_count, int64_t draw_begin,
                      int64_t draw_count, int64_t buffer_draws, hid_t *file_space, hid_t *mem_space) {
  const int empty = chain_count <= 0 || draw_count <= 0;
  hsize_t axes[H5OUT_MAX_AXES];
  const int n_axes = var_trailing(g, v, axes);
  const int rank = 2 + n_axes;
  hsize_t start[2 + H5OUT_MAX_AXES] = {(hsize_t)chain_begin, (hsize_t)draw_begin};
  hsize_t count[2 + H5OUT_MAX_AXES] = {(hsize_t)chain_count, (hsize_t)draw_count};
  /* The buffer holds buffer_draws draws per chain, of which the first draw_count are written. */
  hsize_t buffer_dims[2 + H5OUT_MAX_AXES] = {empty ? 1 : (hsize_t)chain_count, empty ? 1 : (hsize_t)buffer_draws};
  for (int axis = 0; axis < n_axes; ++axis) {
    start[2 + axis] = 0;
    count[2 + axis] = buffer_dims[2 + axis] = axes[axis];
  }
  *file_space = H5Dget_space(g->datasets[v]);
  H5_CHECK(*file_space);
  *mem_space = H5Screate_simple(rank, buffer_dims, NULL);
  H5_CHECK(*mem_space);
  if (empty) {
    H5_CHECK(H5Sselect_none(*file_space));
    H5_CHECK(H5Sselect_none(*mem_space));
  } else {
    H5_CHECK(H5Sselect_hyperslab(*file_space, H5S_SELECT_SET, start, NULL, count, NULL));
    if (buffer_draws != draw_count) {
      const hsize_t origin[2 + H5OUT_MAX_AXES] = {0};
      H5_CHECK(H5Sselect_hyperslab(*mem_space, H5S_SELECT_SET, origin, NULL, count, NULL));
    }
  }
  return DS_OK;
}

int h5out_write(h5out_t *f, int group_id, int64_t total_draws, int64_t chain_begin, int64_t chain_count,
                int64_t draw_begin, int64_t draw_count, const void *const *data) {
  output_context(f);
  return h5out_write_block(f, group_id, total_draws, chain_begin, chain_count, draw_begin, draw_count, draw_count, data);
}

/* Rank 0, before the draws grow to total_draws: parallel HDF5 allocates a chunked dataset's
 * space when it grows, a collective step that a full disk would leave the other ranks waiting
 * in. Checked first, the ranks stop together with the file as it was. */
static int check_room_to_grow(const h5out_t *f, const h5out_group_t *g, int64_t total_draws) {
  if (f->rank != 0 || h5util_space_check_skipped()) return DS_OK;
  double bytes = 0;
  for (int v = 0; v < g->n_vars; ++v) {
    hsize_t axes[H5OUT_MAX_AXES];
    const int n_axes = var_trailing(g, v, axes);
    double values = (double)g->n_chains * (double)(total_draws - g->n_draws);
    for (int axis = 0; axis < n_axes; ++axis) values *= (double)axes[axis];
    const int dtype = g->vars[v].dtype;
    bytes += values * (dtype == H5OUT_FLOAT64 ? 8 : dtype == H5OUT_BOOL ? 1 : 4);
  }
  char dir[sizeof f->path];
  const double free_bytes = h5util_free_bytes(f->path, 0, dir, sizeof dir);
  if (free_bytes >= 0 && free_bytes < bytes + H5UTIL_FREE_SPACE_MARGIN)
    return ds_fail(DS_ERR_IO, "--out %s: the disk is full (%.1f MB free in %s; the next %lld draws need %.1f MB and "
                   "%.0f MB beside them): every draw written so far and the checkpoints are kept; make room and "
                   "resume", f->path, free_bytes / 1e6, dir, (long long)(total_draws - g->n_draws), bytes / 1e6,
                   H5UTIL_FREE_SPACE_MARGIN / 1e6);
  return DS_OK;
}

int h5out_write_block(h5out_t *f, int group_id, int64_t total_draws, int64_t chain_begin, int64_t chain_count,
                      int64_t draw_begin, int64_t draw_count, int64_t buffer_draws, const void *const *data) {
  output_context(f);
  h5out_group_t *g = &f->groups[group_id];
  if (total_draws > g->n_draws) {
    DS_TRY(h5out_agree(f, check_room_to_grow(f, g, total_draws)));
    int status = DS_OK;
    for (int v = 0; v < g->n_vars && status == DS_OK; ++v) {
      hsize_t dims[2 + H5OUT_MAX_AXES] = {(hsize_t)g->n_chains, (hsize_t)total_draws};
      const int n_axes = var_trailing(g, v, dims + 2);
      (void)n_axes;
      if (H5Dset_extent(g->datasets[v], dims) < 0) status = output_fail(f, "growing the draws (H5Dset_extent)");
    }
    hsize_t draws = (hsize_t)total_draws;
    if (status == DS_OK && H5Dset_extent(g->draw_scale, &draws) < 0)
      status = output_fail(f, "growing the draw coordinate (H5Dset_extent)");
    DS_TRY(h5out_agree(f, status));
    DS_TRY(h5out_agree(f, write_coordinate_range(f, g->draw_scale, g->n_draws, total_draws - g->n_draws,
                                                 g->draw_first, g->draw_step, NULL)));
    g->n_draws = total_draws;
  }
  const int empty = chain_count <= 0 || draw_count <= 0;
  for (int v = 0; v < g->n_vars; ++v) {
    hid_t file_space = H5I_INVALID_HID, mem_space = H5I_INVALID_HID;
    int status = h5out_agree(f, select_box(g, v, chain_begin, chain_count, draw_begin, draw_count, buffer_draws,
                                           &file_space, &mem_space));
    static const int64_t placeholder[1] = {0};
    const void *buffer = empty ? (const void *)placeholder : data[v];
    /* Every rank calls the collective write, or (after a failure anywhere) none does. */
    if (status == DS_OK && H5Dwrite(g->datasets[v], memory_type(f, g->vars[v].dtype), mem_space, file_space, f->xfer,
                                    buffer) < 0)
      status = output_fail(f, "writing draws (H5Dwrite)");
    if (mem_space >= 0) H5Sclose(mem_space);
    if (file_space >= 0) H5Sclose(file_space);
    DS_TRY(h5out_agree(f, status));
  }
  return DS_OK;
}

static hid_t open_output_rdwr(MPI_Comm comm, const char *path, int serial) {
  hid_t fapl = output_fapl(comm, serial);
  if (fapl < 0) return -1;
  hid_t file;
  H5E_BEGIN_TRY { file = H5Fopen(path, H5F_ACC_RDWR, fapl); }
  H5E_END_TRY;
  H5Pclose(fapl);
  return file;
}

/* The transfer property list and the boolean type: an int8 enum {FALSE = 0, TRUE = 1}, as
 * h5py and netCDF readers expect. */
static int writer_setup(h5out_t *f) {
  f->xfer = H5Pcreate(H5P_DATASET_XFER);
  H5_CHECK(f->xfer);
  if (!f->serial) {
    H5_CHECK(H5Pset_dxpl_mpio(f->xfer, H5FD_MPIO_COLLECTIVE));
    const char *io = getenv("DSAMPLER_H5_IO");
    if (io && strcmp(io, "individual") == 0)
      H5_CHECK(H5Pset_dxpl_mpio_collective_opt(f->xfer, H5FD_MPIO_INDIVIDUAL_IO));
  }
  f->bool_type = H5Tenum_create(H5T_NATIVE_INT8);
  H5_CHECK(f->bool_type);
  int8_t false_value = 0, true_value = 1;
  H5_CHECK(H5Tenum_insert(f->bool_type, "FALSE", &false_value));
  H5_CHECK(H5Tenum_insert(f->bool_type, "TRUE", &true_value));
  return DS_OK;
}

int h5out_open(h5out_t **out, MPI_Comm comm, const char *path) {
  h5util_set_context("--out %s", path);
  h5util_set_write_path(path);
  *out = NULL;
  h5out_t *f = calloc(1, sizeof *f);
  if (f) f->writeback_fd = -1;
  if (!f) return DS_FAIL_ALLOC("the output writer", sizeof *f);
  f->xfer = f->bool_type = H5I_INVALID_HID;
  if (MPI_Comm_dup(comm, &f->comm) != MPI_SUCCESS) {
    free(f);
    return ds_fail(DS_ERR_MPI, "output %s: MPI_Comm_dup failed", path);
  }
  comm = f->comm;
  MPI_Comm_rank(comm, &f->rank);
  snprintf(f->path, sizeof f->path, "%s", path);
  f->serial = output_driver_serial(comm);
  f->file = open_output_rdwr(comm, path, f->serial);
  if (f->file < 0) {
    MPI_Comm_free(&f->comm);
    free(f);
    return ds_fail(DS_ERR_INPUT, "output %s: cannot open for appending (missing or damaged)", path);
  }
  *out = f;
  return writer_setup(f);
}

int h5out_set_attr(h5out_t *f, const char *key, const char *value) {
  output_context(f);
  int status = DS_OK;
  htri_t exists = H5Aexists(f->file, key);
  if (exists < 0) status = output_fail(f, "checking an attribute");
  if (status == DS_OK && exists > 0 && H5Adelete(f->file, key) < 0) status = output_fail(f, "replacing an attribute");
  if (status == DS_OK && write_string_attr(f->file, key, value) != DS_OK) status = output_fail(f, "writing an attribute");
  return status;
}

int h5out_read_attr(h5out_t *f, const char *key, char *value, size_t size) {
  output_context(f);
  char what[4200];
  snprintf(what, sizeof what, "output %s", f->path);
  if (h5util_read_string_attr(f->file, key, value, size, what) != DS_OK)
    return ds_fail(DS_ERR_INPUT, "output %s: no attribute %s", f->path, key);
  return DS_OK;
}

static int open_group(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                      const h5out_var_t *vars, const h5out_shape_t *shapes, int n_vars, int64_t keep_draws,
                      int *group_id);

int h5out_open_group_axes(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                          const h5out_var_t *vars, int n_vars, int64_t keep_draws, int *group_id) {
  output_context(f);
  return open_group(f, name, axes, n_chains, dim, vars, NULL, n_vars, keep_draws, group_id);
}

int h5out_open_group_shaped(h5out_t *f, const char *name, int64_t n_chains, int64_t dim, const h5out_var_t *vars,
                            const h5out_shape_t *shapes, int n_vars, int64_t keep_draws, int *group_id) {
  output_context(f);
  return open_group(f, name, &h5out_default_axes, n_chains, dim, vars, shapes, n_vars, keep_draws, group_id);
}

static int open_group(h5out_t *f, const char *name, const h5out_axes_t *axes, int64_t n_chains, int64_t dim,
                      const h5out_var_t *vars, const h5out_shape_t *shapes, int n_vars, int64_t keep_draws,
                      int *group_id) {
  if (f->n_groups >= H5OUT_MAX_GROUPS || n_vars > H5OUT_MAX_VARS)
    return ds_fail(DS_ERR_INTERNAL, "h5out: too many groups or variables");
  h5out_group_t *g = &f->groups[f->n_groups];
  memset(g, 0, sizeof *g);
  g->n_chains = n_chains;
  g->dim = dim;
  g->draw_first = axes->draw_first;
  g->draw_step = axes->draw_step;
  g->dim_scale = g->chain_scale = g->draw_scale = H5I_INVALID_HID;
  H5E_BEGIN_TRY { g->group = H5Gopen2(f->file, name, H5P_DEFAULT); }
  H5E_END_TRY;
  if (g->group < 0) return ds_fail(DS_ERR_INPUT, "output %s: no group %s", f->path, name);
  f->n_groups++; /* closed by h5out_close from here on */
  H5E_BEGIN_TRY {
    g->chain_scale = H5Dopen2(g->group, axes->chain, H5P_DEFAULT);
    g->draw_scale = H5Dopen2(g->group, axes->draw, H5P_DEFAULT);
  }
  H5E_END_TRY;
  if (g->chain_scale < 0 || g->draw_scale < 0)
    return ds_fail(DS_ERR_INPUT, "output %s: group %s lacks its %s or %s coordinate", f->path, name, axes->chain,
                     axes->draw);
  for (int v = 0; v < n_vars; ++v) {
    g->datasets[v] = H5I_INVALID_HID;
    g->n_vars = v + 1;
    DS_TRY(store_var(g, v, &vars[v], shapes));
    H5E_BEGIN_TRY { g->datasets[v] = H5Dopen2(g->group, vars[v].name, H5P_DEFAULT); }
    H5E_END_TRY;
    if (g->datasets[v] < 0) return ds_fail(DS_ERR_INPUT, "output %s: no variable %s/%s", f->path, name, vars[v].name);
    hid_t space = H5Dget_space(g->datasets[v]);
    hsize_t dims[2 + H5OUT_MAX_AXES] = {0}, extent[H5OUT_MAX_AXES];
    int rank = H5Sget_simple_extent_ndims(space);
    if (rank >= 1 && rank <= 2 + H5OUT_MAX_AXES) H5Sget_simple_extent_dims(space, dims, NULL);
    H5Sclose(space);
    const int n_axes = var_trailing(g, v, extent), want_rank = 2 + n_axes;
    int same_shape = rank == want_rank && dims[0] == (hsize_t)n_chains;
    for (int axis = 0; same_shape && axis < n_axes; ++axis) same_shape = dims[2 + axis] == extent[axis];
    if (!same_shape)
      return ds_fail(DS_ERR_INPUT, "output %s: %s/%s does not have %lld chains%s of this run: another run's file?",
                     f->path, name, vars[v].name, (long long)n_chains, n_axes > 0 ? " and its shape" : "");
    if (dims[1] < (hsize_t)keep_draws)
      return ds_fail(DS_ERR_INPUT, "output %s: %s/%s holds %llu draws, the checkpoint counts %lld", f->path, name,
                     vars[v].name, (unsigned long long)dims[1], (long long)keep_draws);
    if (vars[v].has_dim && g->dim_scale < 0) {
      char dim_name[256];
      snprintf(dim_name, sizeof dim_name, "%s_dim_0", vars[v].name);
      H5E_BEGIN_TRY { g->dim_scale = H5Dopen2(g->group, dim_name, H5P_DEFAULT); }
      H5E_END_TRY;
    }
    /* Draws past the checkpoint are dropped: the resumed run writes them again. */
    dims[1] = (hsize_t)keep_draws;
    H5_CHECK(H5Dset_extent(g->datasets[v], dims));
  }
  hsize_t draws = (hsize_t)keep_draws;
  H5_CHECK(H5Dset_extent(g->draw_scale, &draws));
  g->n_draws = keep_draws;
  /* Shrinking fills the kept part of edge chunks' cut-off tail; flush those chunks now, or a
   * rank's cached copy can land later over draws another rank writes into the same chunk. */
  H5_CHECK(H5Fflush(f->file, H5F_SCOPE_GLOBAL));
  *group_id = f->n_groups - 1;
  return DS_OK;
}

void h5out_start_writeback(h5out_t *f) {
#ifdef SYNC_FILE_RANGE_WRITE
  if (f->writeback_fd == -2) return;
  if (f->writeback_fd == -1) {
    const char *flag = getenv("DSAMPLER_H5_EARLY_WRITEBACK");
    f->writeback_fd = flag && strcmp(flag, "0") == 0 ? -2 : open(f->path, O_WRONLY | O_CLOEXEC);
    if (f->writeback_fd < 0) {
      f->writeback_fd = -2; /* only a help to the page cache: the run does not need it */
      return;
    }
  }
  (void)sync_file_range(f->writeback_fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#else
  (void)f;
#endif
}

int h5out_flush(h5out_t *f) {
  output_context(f);
  if (H5Fflush(f->file, H5F_SCOPE_GLOBAL) < 0) return output_fail(f, "flushing (H5Fflush)");
  return DS_OK;
}

int h5out_close(h5out_t *f) { return h5out_close_as(f, 0); }

int h5out_close_as(h5out_t *f, int failed) {
  if (!f) return DS_OK;
  output_context(f);
  int status = DS_OK;
  for (int i = 0; i < f->n_groups; ++i) {
    h5out_group_t *g = &f->groups[i];
    for (int v = 0; v < g->n_vars; ++v)
      if (g->datasets[v] >= 0) H5Dclose(g->datasets[v]);
    if (g->dim_scale >= 0) H5Dclose(g->dim_scale);
    if (g->draw_scale >= 0) H5Dclose(g->draw_scale);
    if (g->chain_scale >= 0) H5Dclose(g->chain_scale);
    if (g->group >= 0) H5Gclose(g->group);
  }
  /* After a failure agreed by every rank, no flush: HDF5's collective state may differ between
   * ranks (a write that failed on one), and what was flushed before stays valid. */
  if (!failed && f->file >= 0 && H5Fflush(f->file, H5F_SCOPE_GLOBAL) < 0)
    status = output_fail(f, "flushing (H5Fflush)");
  if (f->bool_type >= 0) H5Tclose(f->bool_type);
  if (f->xfer >= 0) H5Pclose(f->xfer);
  if (f->writeback_fd >= 0) close(f->writeback_fd);
  int closed = f->file < 0 || (!failed && H5Fclose(f->file) >= 0);
  if (!closed && status == DS_OK) status = ds_fail(DS_ERR_IO, "--out %s: closing the file failed", f->path);
  /* After a failed write HDF5 cannot close the file cleanly, and its own clean-up in
   * MPI_Finalize would crash on it: it stays open, and the program ends without that
   * (h5util_unclosed). */
  if (closed) MPI_Comm_free(&f->comm);
  else h5util_left_open();
  free(f);
  return status;
}

/* One float64 dataset of the summary group: dims (rank 1 or 2), the given axes attached; each
 * rank writes `rows` rows from row `row_begin` (none when rows == 0). */
static int write_summary_dataset(h5out_t *f, hid_t group, const char *name, int rank, const hsize_t *dims,
                                 const hid_t *scales, int64_t row_begin, int64_t rows, const void *data,
                                 int single) {
  hid_t space = H5Screate_simple(rank, dims, NULL);
  H5_CHECK(space);
  hid_t dataset = H5Dcreate2(group, name, single ? H5T_IEEE_F32LE : H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                             H5P_DEFAULT);
  H5Sclose(space);
  H5_CHECK(dataset);
  int status = DS_OK;
  for (int axis = 0; axis < rank && status == DS_OK; ++axis)
    if (H5DSattach_scale(dataset, scales[axis], (unsigned)axis) < 0) status = h5_fail(__FILE__, __LINE__, "H5DSattach_scale");
  hid_t file_space = H5Dget_space(dataset);
  const hsize_t row_width = rank == 2 ? dims[1] : 1;
  hsize_t count[2] = {(hsize_t)(rows > 0 ? rows : 1), dims[1]}, start[2] = {(hsize_t)row_begin, 0};
  if (rank == 1) count[0] = dims[0];
  hsize_t elements = count[0] * row_width;
  hid_t mem_space = H5Screate_simple(1, &elements, NULL);
  if (file_space < 0 || mem_space < 0) status = h5_fail(__FILE__, __LINE__, "H5Dget_space/H5Screate_simple");
  if (status == DS_OK) {
    if (rows > 0) {
      if (H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, NULL, count, NULL) < 0)
        status = h5_fail(__FILE__, __LINE__, "H5Sselect_hyperslab");
    } else {
      H5Sselect_none(file_space);
      H5Sselect_none(mem_space);
    }
  }
  static const double placeholder[1] = {0};
  status = h5out_agree(f, status);
  if (status == DS_OK &&
      H5Dwrite(dataset, single ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE, mem_space, file_space, f->xfer,
               rows > 0 ? data : placeholder) < 0)
    status = output_fail(f, "writing the moments (H5Dwrite)");
  if (mem_space >= 0) H5Sclose(mem_space);
  if (file_space >= 0) H5Sclose(file_space);
  H5Dclose(dataset);
  return h5out_agree(f, status);
}

int h5out_write_summary_group(h5out_t *f, const char *name, const char *dim_name, int64_t n_chains, int64_t dim,
                              int64_t chain_begin, int64_t chain_count, const char *const *chain_vars,
                              const float *const *chain_data, int n_chain_vars, const char *const *global_vars,
                              const double *const *global_data, int n_global_vars) {
  output_context(f);
  /* A rewrite (a resumed run that was extended) replaces the group. */
  htri_t exists;
  H5E_BEGIN_TRY { exists = H5Lexists(f->file, name, H5P_DEFAULT); }
  H5E_END_TRY;
  if (exists > 0) H5_CHECK(H5Ldelete(f->file, name, H5P_DEFAULT));
  hid_t group = H5Gcreate2(f->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(group);
  int status = write_library_attrs(f, group);
  hid_t scales[2] = {H5I_INVALID_HID, H5I_INVALID_HID};
  if (status == DS_OK) scales[0] = create_coordinate(f, group, "chain", n_chains, 0, NULL);
  if (status == DS_OK) scales[1] = create_coordinate(f, group, dim_name, dim, 0, NULL);
  if (status == DS_OK && (scales[0] < 0 || scales[1] < 0)) status = h5_fail(__FILE__, __LINE__, "create_coordinate");
  status = h5out_agree(f, status);
  const hsize_t chain_dims[2] = {(hsize_t)n_chains, (hsize_t)dim}, global_dims[1] = {(hsize_t)dim};
  for (int v = 0; v < n_chain_vars && status == DS_OK; ++v)
    status = write_summary_dataset(f, group, chain_vars[v], 2, chain_dims, scales, chain_begin, chain_count,
                                   chain_data[v], 1);
  for (int v = 0; v < n_global_vars && status == DS_OK; ++v)
    status = write_summary_dataset(f, group, global_vars[v], 1, global_dims, scales + 1, 0, f->rank == 0 ? 1 : 0,
                                   global_data[v], 0);
  for (int axis = 0; axis < 2; ++axis)
    if (scales[axis] >= 0) H5Dclose(scales[axis]);
  H5Gclose(group);
  return status;
}

int h5out_remove_group(h5out_t *f, const char *name) {
  output_context(f);
  htri_t exists;
  H5E_BEGIN_TRY { exists = H5Lexists(f->file, name, H5P_DEFAULT); }
  H5E_END_TRY;
  if (exists > 0) H5_CHECK(H5Ldelete(f->file, name, H5P_DEFAULT));
  return DS_OK;
}

int h5out_write_series(h5out_t *f, const char *name, const char *axis, int64_t count, const int64_t *coordinates,
                       const char *const *vars, const double *const *data, int n_vars) {
  output_context(f);
  DS_TRY(h5out_remove_group(f, name));
  hid_t group = H5Gcreate2(f->file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(group);
  int status = write_library_attrs(f, group);
  hid_t scale = H5I_INVALID_HID;
  if (status == DS_OK) {
    scale = create_coordinate(f, group, axis, count, 0, coordinates);
    if (scale < 0) status = h5_fail(__FILE__, __LINE__, "creating the series coordinate");
  }
  status = h5out_agree(f, status);
  const hsize_t dims[1] = {(hsize_t)count};
  for (int v = 0; v < n_vars && status == DS_OK && count > 0; ++v)
    status = write_summary_dataset(f, group, vars[v], 1, dims, &scale, 0, f->rank == 0 ? 1 : 0, data[v], 0);
  if (scale >= 0) H5Dclose(scale);
  H5Gclose(group);
  return status;
}
