/* summary_read.c: the reading half of `summary` (summary.c prints): the posterior of a run.h5
 * read with collective parallel HDF5, the parameters (the trailing axis of each variable) split
 * over the ranks as items are everywhere else, diagnostics.c's columns computed per parameter and
 * gathered on rank 0; the moments group's R-hat over every chain, frozen chains, lp outliers,
 * divergences and an SVGD run's KSD. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "summary_internal.h"


#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <hdf5_hl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm.h"
#include "diagnostics.h"
#include "exactsum.h"
#include "h5out.h"
#include "h5util.h"
#include "lp_outliers.h"
#include "status.h"

/* Draws read per rank and round, in doubles (128 MiB): a round covers as many parameters as
 * fit, so memory stays bounded whatever the number of chains and parameters. */
#define SUMMARY_READ_VALUES ((int64_t)1 << 24)
/* SUMMARY_READ_VALUES, or DSAMPLER_SUMMARY_READ_VALUES where set to a positive count (nodes short
 * of memory; the tests, to make a variable take many rounds). At least one parameter's draws
 * are read at a time whatever it says. */
static int64_t summary_read_values(void) {
  const char *text = getenv("DSAMPLER_SUMMARY_READ_VALUES");
  char *end = NULL;
  long long value = text ? strtoll(text, &end, 10) : 0;
  return text && end != text && *end == '\0' && value > 0 ? (int64_t)value : SUMMARY_READ_VALUES;
}

/* --- reading the file (collective) -------------------------------------------------------- */

static void format_shape(char *buf, size_t size, int ndims, const hsize_t *dims) {
  int used = snprintf(buf, size, "[");
  for (int d = 0; d < ndims && used < (int)size; ++d)
    used += snprintf(buf + used, size - (size_t)used, "%s%llu", d ? ", " : "", (unsigned long long)dims[d]);
  if (used < (int)size) snprintf(buf + used, size - (size_t)used, "]");
}

typedef struct {
  summary_result_t *result;
  hid_t group;
  int status;
  const char *path;
  const char *only; /* --var: list that variable alone (any number of others may be there) */
} list_context_t;

/* H5Literate callback: every dataset of /posterior that is not a coordinate is a variable. */
static herr_t list_variable(hid_t group, const char *name, const H5L_info_t *info, void *data) {
  (void)info;
  list_context_t *ctx = data;
  hid_t dataset;
  H5E_BEGIN_TRY { dataset = H5Oopen(group, name, H5P_DEFAULT); }
  H5E_END_TRY;
  if (dataset < 0) return 0;
  if (H5Iget_type(dataset) != H5I_DATASET) {
    H5Oclose(dataset);
    return 0;
  }
  hid_t space = H5Dget_space(dataset);
  int ndims = H5Sget_simple_extent_ndims(space);
  int is_scale = H5DSis_scale(dataset) > 0;
  H5Sclose(space);
  H5Oclose(dataset);
  if (is_scale || ndims < 2) return 0; /* coordinates: chain, draw, x_dim_0 */
  if (ctx->only && strcmp(name, ctx->only) != 0) return 0;
  if (ctx->result->n_vars == SUMMARY_MAX_VARS) {
    ctx->status = ds_fail(DS_ERR_INPUT, "summary %s: more than %d posterior variables; pick one with --var",
                          ctx->path, SUMMARY_MAX_VARS);
    return 1;
  }
  summary_var_t *var = &ctx->result->vars[ctx->result->n_vars++];
  snprintf(var->name, sizeof var->name, "%s", name);
  return 0;
}

/* Lists the variables, in creation order where the file tracks it, else by name. */
static int list_variables(hid_t posterior, const char *path, const char *only, summary_result_t *result) {
  list_context_t ctx = {result, posterior, DS_OK, path, only};
  herr_t rc;
  H5E_BEGIN_TRY { rc = H5Literate(posterior, H5_INDEX_CRT_ORDER, H5_ITER_INC, NULL, list_variable, &ctx); }
  H5E_END_TRY;
  if (rc < 0 && ctx.status == DS_OK) {
    result->n_vars = 0;
    rc = H5Literate(posterior, H5_INDEX_NAME, H5_ITER_INC, NULL, list_variable, &ctx);
    if (rc < 0 && ctx.status == DS_OK) return h5_fail(__FILE__, __LINE__, "H5Literate(posterior)");
  }
  return ctx.status;
}

/* Checks one variable's shape and type against [chain, draw(, dim)] and the other variables. */
static int check_variable(hid_t posterior, const char *path, summary_result_t *result, summary_var_t *var) {
  hid_t dataset;
  H5E_BEGIN_TRY { dataset = H5Dopen2(posterior, var->name, H5P_DEFAULT); }
  H5E_END_TRY;
  if (dataset < 0) return ds_fail(DS_ERR_INPUT, "summary %s: no variable posterior/%s", path, var->name);
  hid_t space = H5Dget_space(dataset);
  hid_t type = H5Dget_type(dataset);
  int ndims = H5Sget_simple_extent_ndims(space);
  hsize_t dims[H5S_MAX_RANK] = {0};
  if (ndims > 0) H5Sget_simple_extent_dims(space, dims, NULL);
  H5T_class_t type_class = H5Tget_class(type);
  H5Tclose(type);
  H5Sclose(space);
  H5Dclose(dataset);
  char shape[160];
  format_shape(shape, sizeof shape, ndims, dims);
  if (ndims < 2 || ndims > 2 + SUMMARY_MAX_AXES)
    return ds_fail(DS_ERR_INPUT, "summary %s: posterior/%s has shape %s; expected [chain, draw] or [chain, draw, dim, "
                   "...] (at most %d axes after draw)", path, var->name, shape, SUMMARY_MAX_AXES);
  if (type_class != H5T_FLOAT && type_class != H5T_INTEGER)
    return ds_fail(DS_ERR_INPUT, "summary %s: posterior/%s does not hold numbers", path, var->name);
  if (dims[0] == 0 || dims[1] == 0)
    return ds_fail(DS_ERR_INPUT, "summary %s: posterior/%s has shape %s: no draws", path, var->name, shape);
  if (result->chains == 0) {
    result->chains = (int64_t)dims[0];
    result->draws = (int64_t)dims[1];
  } else if ((int64_t)dims[0] != result->chains || (int64_t)dims[1] != result->draws) {
    return ds_fail(DS_ERR_INPUT,
                   "summary %s: posterior/%s has shape %s, but posterior/%s has %lld chains x %lld draws",
                   path, var->name, shape, result->vars[0].name, (long long)result->chains, (long long)result->draws);
  }
  /* The shape comes from the file: a few bytes can declare sizes whose products wrap. One
   * parameter's draws (chains x draws doubles) must fit in memory, as must the table. */
  size_t bytes = 0;
  DS_TRY(h5util_checked_bytes("summary", path, var->name, 2, dims, sizeof(double), &bytes));
  var->has_dim = ndims >= 3;
  var->n_axes = ndims - 2;
  var->n_params = 1;
  for (int axis = 0; axis < var->n_axes; ++axis) {
    var->shape[axis] = (int64_t)dims[2 + axis];
    if (__builtin_mul_overflow(var->n_params, var->shape[axis], &var->n_params) || var->n_params > ((int64_t)1 << 40))
      return ds_fail(DS_ERR_INPUT, "summary %s: posterior/%s has shape %s: too many parameters", path, var->name, shape);
  }
  if (var->n_params == 0)
    return ds_fail(DS_ERR_INPUT, "summary %s: posterior/%s has shape %s: no parameters", path, var->name, shape);
  if (ndims >= 3) {
    hsize_t table[2] = {(hsize_t)var->n_params, DIAG_N_STATS};
    DS_TRY(h5util_checked_bytes("summary", path, var->name, 2, table, sizeof(double), &bytes));
  }
  return DS_OK;
}

/* Root attribute `key` as a whole number: a string (dsampler writes its config as strings) or an
 * integer. *found = 0 when absent. Every rank reads the same metadata and reaches the same
 * verdict; no collective call. */
static int read_count_attr(hid_t file, const char *path, const char *key, int *found, int64_t *value) {
  *found = 0;
  *value = 0;
  htri_t exists;
  H5E_BEGIN_TRY { exists = H5Aexists(file, key); }
  H5E_END_TRY;
  if (exists <= 0) return DS_OK;
  int status = DS_OK;
  hid_t attr = H5Aopen(file, key, H5P_DEFAULT);
  hid_t file_type = attr >= 0 ? H5Aget_type(attr) : H5I_INVALID_HID;
  hid_t space = attr >= 0 ? H5Aget_space(attr) : H5I_INVALID_HID;
  if (attr < 0 || file_type < 0 || space < 0) status = h5_fail(__FILE__, __LINE__, "H5Aopen/H5Aget_type");
  if (status == DS_OK && H5Sget_simple_extent_npoints(space) != 1)
    status = ds_fail(DS_ERR_INPUT, "summary %s: attribute %s is not one value", path, key);
  char text[64] = "";
  if (status == DS_OK && H5Tget_class(file_type) == H5T_INTEGER) {
    long long number = 0;
    if (H5Aread(attr, H5T_NATIVE_LLONG, &number) < 0) status = h5_fail(__FILE__, __LINE__, "H5Aread");
    snprintf(text, sizeof text, "%lld", number);
  } else if (status == DS_OK && H5Tget_class(file_type) == H5T_STRING) {
    if (h5util_read_string_attr(file, key, text, sizeof text, path) != DS_OK)
      status = ds_fail(DS_ERR_INPUT, "summary %s: attribute %s cannot be read as a number", path, key);
  } else if (status == DS_OK) {
    status = ds_fail(DS_ERR_INPUT, "summary %s: attribute %s is neither a string nor an integer", path, key);
  }
  char *end = NULL;
  errno = 0;
  long long parsed = status == DS_OK ? strtoll(text, &end, 10) : 0;
  if (status == DS_OK && (errno != 0 || end == text || *end != '\0'))
    status = ds_fail(DS_ERR_INPUT, "summary %s: attribute %s is '%s', not a whole number", path, key, text);
  if (space >= 0) H5Sclose(space);
  if (file_type >= 0) H5Tclose(file_type);
  if (attr >= 0) H5Aclose(attr);
  if (status == DS_OK) {
    *found = 1;
    *value = parsed;
  }
  return status;
}

/* Chooses the superchains: --superchain-size K (which must divide the chains), else the run's
 * config_chains_per_start when it is > 1 and the posterior holds whole superchains (with
 * --output-chains it may hold a part of one: then no column, and a note says why). */
static int choose_superchains(hid_t file, const summary_options_t *options, summary_result_t *result) {
  if (options->superchain_size > 0) {
    if (result->chains % options->superchain_size != 0)
      return ds_fail(DS_ERR_INPUT, "summary --superchain-size %lld: does not divide the posterior's %lld chains",
                     (long long)options->superchain_size, (long long)result->chains);
    result->superchain_size = options->superchain_size;
    result->superchain_source = "--superchain-size";
    return DS_OK;
  }
  int found = 0;
  int64_t per_start = 0;
  DS_TRY(read_count_attr(file, options->path, "config_chains_per_start", &found, &per_start));
  if (!found || per_start <= 1) return DS_OK;
  if (result->chains % per_start != 0) {
    result->file_chains_per_start = per_start;
    return DS_OK;
  }
  result->superchain_size = per_start;
  result->superchain_source = "config_chains_per_start";
  return DS_OK;
}

static int open_file(comm_ctx_t *comm, const char *path, hid_t *file) {
  h5util_set_context("summary %s", path);
  return h5util_open_read(comm->world, "summary", path, file);
}

/* Finds the variables to summarise and checks their shapes; every rank reaches the same
 * verdict from the same metadata. */
static int inspect_posterior(hid_t file, const summary_options_t *options, summary_result_t *result) {
  const char *path = options->path;
  htri_t exists;
  H5E_BEGIN_TRY { exists = H5Lexists(file, "posterior", H5P_DEFAULT); }
  H5E_END_TRY;
  if (exists <= 0)
    return ds_fail(DS_ERR_INPUT, "summary %s: no group 'posterior' (expected posterior/<variable> with shape "
                   "[chain, draw, dim], as dsampler hmc writes)", path);
  hid_t posterior = H5Gopen2(file, "posterior", H5P_DEFAULT);
  if (posterior < 0) return ds_fail(DS_ERR_INPUT, "summary %s: 'posterior' is not a group", path);
  int status = list_variables(posterior, path, options->var_name, result);
  if (status == DS_OK && options->var_name) {
    const int found = result->n_vars == 1 ? 0 : -1;
    /* Not there: the others, for the message (at most SUMMARY_MAX_VARS of them are read). */
    if (found < 0 && list_variables(posterior, path, NULL, result) != DS_OK) ds_error_clear();
    if (found < 0) {
      char names[512] = "";
      for (int v = 0, used = 0; v < result->n_vars && used < (int)sizeof names; ++v)
        used += snprintf(names + used, sizeof names - (size_t)used, "%s%s", v ? ", " : "", result->vars[v].name);
      status = ds_fail(DS_ERR_INPUT, "summary %s: no variable posterior/%s (variables: %s)", path,
                       options->var_name, result->n_vars ? names : "none");
    } else {
      result->vars[0] = result->vars[found];
      result->n_vars = 1;
    }
  }
  if (status == DS_OK && result->n_vars == 0)
    status = ds_fail(DS_ERR_INPUT, "summary %s: group posterior holds no variables of shape [chain, draw(, dim)]", path);
  for (int v = 0; status == DS_OK && v < result->n_vars; ++v)
    status = check_variable(posterior, path, result, &result->vars[v]);
  H5Gclose(posterior);
  result->n_rows = 0;
  for (int v = 0; status == DS_OK && v < result->n_vars; ++v) result->n_rows += result->vars[v].n_params;
  return status;
}

/* `elements` values of a dataset into values, as mem_type, the file's elements chosen by
 * select(space, ctx) in the file's (C) order; a rank with none selects nothing. Collective. */
static int read_selected(hid_t dataset, hsize_t elements, herr_t (*select)(hid_t space, const void *ctx),
                         const void *ctx, hid_t mem_type, void *values, const char *what) {
  int status = DS_OK;
  hsize_t mem_elements = elements ? elements : 1;
  hid_t file_space = H5Dget_space(dataset);
  hid_t mem_space = H5Screate_simple(1, &mem_elements, NULL);
  hid_t xfer = H5Pcreate(H5P_DATASET_XFER);
  if (file_space < 0 || mem_space < 0 || xfer < 0) status = h5_fail(__FILE__, __LINE__, "H5Dget_space/H5Screate/H5Pcreate");
  if (status == DS_OK) {
    herr_t rc = elements ? select(file_space, ctx) : H5Sselect_none(file_space);
    if (rc >= 0 && !elements) rc = H5Sselect_none(mem_space);
    if (rc >= 0) rc = H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
    if (rc >= 0) rc = H5Dread(dataset, mem_type, mem_space, file_space, xfer, values);
    if (rc < 0) status = h5_fail(__FILE__, __LINE__, what);
  }
  if (xfer >= 0) H5Pclose(xfer);
  if (mem_space >= 0) H5Sclose(mem_space);
  if (file_space >= 0) H5Sclose(file_space);
  return status;
}

typedef struct box {
  const hsize_t *start, *count;
} box_t;

static herr_t select_box(hid_t space, const void *ctx) {
  const box_t *box = ctx;
  return H5Sselect_hyperslab(space, H5S_SELECT_SET, box->start, NULL, box->count, NULL);
}

/* Box start[] + count[] (ndims axes) of a dataset into values, as mem_type; a rank with an empty
 * box reads nothing. Collective. */
static int read_box(hid_t dataset, int ndims, const hsize_t *start, const hsize_t *count, hid_t mem_type,
                    void *values, const char *what) {
  hsize_t elements = 1;
  for (int d = 0; d < ndims; ++d) elements *= count[d];
  const box_t box = {start, count};
  return read_selected(dataset, elements, select_box, &box, mem_type, values, what);
}

/* Selects in `space` ([chain, draw, axes...]) every chain's and draw's parameters [a, b) of the
 * variable, in C order of its axes: at most 2 n_axes boxes, each the largest run of whole
 * sub-blocks that starts where the last ended. */
static herr_t select_params(hid_t space, const summary_var_t *var, int64_t chains, int64_t draws, int64_t a,
                            int64_t b) {
  const int m = var->n_axes;
  hsize_t start[2 + SUMMARY_MAX_AXES] = {0, 0}, count[2 + SUMMARY_MAX_AXES] = {(hsize_t)chains, (hsize_t)draws};
  if (m == 0) return H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, count, NULL);
  int64_t block[SUMMARY_MAX_AXES]; /* parameters one index of axis k spans */
  block[m - 1] = 1;
  for (int k = m - 2; k >= 0; --k) block[k] = block[k + 1] * var->shape[k + 1];
  H5S_seloper_t op = H5S_SELECT_SET;
  while (a < b) {
    int k = m - 1;
    while (k > 0 && a % block[k - 1] == 0 && a + block[k - 1] <= b) --k;
    int64_t steps = (b - a) / block[k], left = var->shape[k] - (a / block[k]) % var->shape[k];
    if (steps > left) steps = left;
    for (int d = 0; d < m; ++d) {
      start[2 + d] = (hsize_t)((a / block[d]) % var->shape[d]);
      count[2 + d] = d < k ? 1 : d == k ? (hsize_t)steps : (hsize_t)var->shape[d];
    }
    if (H5Sselect_hyperslab(space, op, start, NULL, count, NULL) < 0) return -1;
    op = H5S_SELECT_OR;
    a += steps * block[k];
  }
  return 0;
}

typedef struct param_range {
  const summary_var_t *var;
  int64_t chains, draws, first, end;
} param_range_t;

static herr_t select_param_range(hid_t space, const void *ctx) {
  const param_range_t *range = ctx;
  return select_params(space, range->var, range->chains, range->draws, range->first, range->end);
}

/* Parameters [first, + n) of the variable into values[chain][draw][n] (n may be 0: the rank
 * selects nothing). Collective. */
static int read_params(hid_t dataset, const summary_var_t *var, int64_t chains, int64_t draws, int64_t first,
                       int64_t n, double *values) {
  const param_range_t range = {var, chains, draws, first, first + n};
  return read_selected(dataset, (hsize_t)(chains * draws * n), select_param_range, &range, H5T_NATIVE_DOUBLE, values,
                       "H5Dread(posterior)");
}

/* Summarises this rank's share of one variable's parameters into stats_local
 * [param_end - param_begin][DIAG_N_STATS]. Every rank makes the same number of collective
 * reads, ranks past their share reading nothing. */
static int summarize_variable(comm_ctx_t *comm, hid_t posterior, const summary_var_t *var, int64_t chains,
                              int64_t draws, diag_workspace_t *ws, double *stats_local) {
  int64_t param_begin, param_end;
  comm_partition(var->n_params, comm->size, comm->rank, &param_begin, &param_end);
  const int64_t per_param = chains * draws;
  int64_t batch = summary_read_values() / per_param;
  if (batch < 1) batch = 1;
  const int64_t largest_share = (var->n_params + comm->size - 1) / comm->size;
  const int64_t rounds = (largest_share + batch - 1) / batch;
  const int64_t local = param_end - param_begin;
  const int64_t buffer_params = local < batch ? local : batch;

  int status = DS_OK;
  hid_t dataset = H5Dopen2(posterior, var->name, H5P_DEFAULT);
  if (dataset < 0) status = h5_fail(__FILE__, __LINE__, "H5Dopen2(posterior variable)");
  double placeholder = 0.0;
  double *values = buffer_params > 0 ? malloc((size_t)(per_param * buffer_params) * sizeof(double)) : &placeholder;
  double *one = buffer_params > 0 ? malloc((size_t)per_param * sizeof(double)) : &placeholder;
  if (status == DS_OK && (!values || !one))
    status = DS_FAIL_ALLOC("posterior draws", (size_t)(per_param * (buffer_params + 1)) * sizeof(double));
  status = comm_agree(comm, status);

  for (int64_t round = 0; round < rounds && status == DS_OK; ++round) {
    const int64_t first = param_begin + round * batch;
    const int64_t count = first < param_end ? (param_end - first < batch ? param_end - first : batch) : 0;
    status = comm_agree(comm, read_params(dataset, var, chains, draws, first, count, values));
    for (int64_t j = 0; j < count && status == DS_OK; ++j) {
      for (int64_t i = 0; i < per_param; ++i) one[i] = values[i * count + j];
      diag_stats_t stats;
      diag_summarize(ws, one, &stats);
      memcpy(stats_local + (first - param_begin + j) * DIAG_N_STATS, &stats, sizeof stats);
    }
  }
  if (buffer_params > 0) {
    free(one);
    free(values);
  }
  if (dataset >= 0) H5Dclose(dataset);
  return status;
}

/* sample_stats/NAME opened into *dataset, or *dataset < 0 when the file has none. Collective
 * on failure. */
/* The name a file was opened with, for messages (a static buffer: one message at a time). */
static const char *file_name(hid_t object) {
  static char name[4096];
  if (H5Fget_name(object, name, sizeof name) < 0) snprintf(name, sizeof name, "(the file)");
  return name;
}

static int open_sample_stat(comm_ctx_t *comm, hid_t file, const char *name, hid_t *dataset) {
  char path[64];
  snprintf(path, sizeof path, "sample_stats/%s", name);
  *dataset = H5I_INVALID_HID;
  htri_t exists;
  H5E_BEGIN_TRY {
    exists = H5Lexists(file, "sample_stats", H5P_DEFAULT);
    if (exists > 0) exists = H5Lexists(file, path, H5P_DEFAULT);
  }
  H5E_END_TRY;
  if (exists <= 0) return DS_OK;
  *dataset = H5Dopen2(file, path, H5P_DEFAULT);
  if (*dataset < 0) {
    char what[128];
    snprintf(what, sizeof what, "summary: %s cannot be opened", path);
    return comm_agree(comm, h5util_fail(DS_ERR_INPUT, what));
  }
  return DS_OK;
}

/* Sum of sample_stats/diverging, each rank reading its chains; -1 when there is none. */
static int count_divergent(comm_ctx_t *comm, hid_t file, int64_t *divergent) {
  *divergent = -1;
  hid_t dataset;
  DS_TRY(open_sample_stat(comm, file, "diverging", &dataset));
  if (dataset < 0) return DS_OK;
  hid_t file_space = H5Dget_space(dataset);
  int ndims = H5Sget_simple_extent_ndims(file_space);
  hsize_t dims[H5S_MAX_RANK] = {0};
  if (ndims > 0) H5Sget_simple_extent_dims(file_space, dims, NULL);
  hid_t file_type = H5Dget_type(dataset);
  H5T_class_t type_class = H5Tget_class(file_type);
  int status = DS_OK;
  if (ndims != 2 || !(type_class == H5T_ENUM || type_class == H5T_INTEGER || type_class == H5T_FLOAT))
    status = ds_fail(DS_ERR_INPUT, "summary %s: sample_stats/diverging must be booleans of shape [chain, draw]", file_name(file));
  /* Booleans are stored as an integer enum: read them raw in their native integer type. */
  hid_t mem_type = type_class == H5T_FLOAT ? H5Tcopy(H5T_NATIVE_DOUBLE) : H5Tget_native_type(file_type, H5T_DIR_ASCEND);
  size_t element_size = mem_type >= 0 ? H5Tget_size(mem_type) : 0;
  int64_t chain_begin = 0, chain_end = 0;
  size_t bytes = 0;
  if (status == DS_OK)
    status = h5util_checked_bytes("summary", "sample_stats", "diverging", 2, dims, element_size ? element_size : 1, &bytes);
  if (status == DS_OK && dims[0] > (hsize_t)INT64_MAX) status = ds_fail(DS_ERR_INPUT, "summary %s: sample_stats/diverging has too many chains", file_name(file));
  if (status == DS_OK) comm_partition((int64_t)dims[0], comm->size, comm->rank, &chain_begin, &chain_end);
  hsize_t elements = (hsize_t)(chain_end - chain_begin) * dims[1];
  unsigned char *buffer = malloc((size_t)(elements ? elements : 1) * (element_size ? element_size : 1));
  if (status == DS_OK && (mem_type < 0 || !buffer)) status = DS_FAIL_ALLOC("sample_stats/diverging", elements);
  if (status == DS_OK) {
    const hsize_t start[2] = {(hsize_t)chain_begin, 0}, count[2] = {(hsize_t)(chain_end - chain_begin), dims[1]};
    status = read_box(dataset, 2, start, count, mem_type, buffer, "H5Dread(sample_stats/diverging)");
  }
  uint64_t count_local = 0;
  for (hsize_t i = 0; status == DS_OK && i < elements; ++i) {
    const unsigned char *element = buffer + i * element_size;
    if (type_class == H5T_FLOAT) {
      double value;
      memcpy(&value, element, sizeof value);
      count_local += value != 0.0;
    } else {
      int nonzero = 0;
      for (size_t b = 0; b < element_size; ++b) nonzero |= element[b];
      count_local += nonzero != 0;
    }
  }
  free(buffer);
  if (mem_type >= 0) H5Tclose(mem_type);
  H5Tclose(file_type);
  H5Sclose(file_space);
  H5Dclose(dataset);
  status = comm_agree(comm, status);
  if (status != DS_OK) return status;
  DS_TRY(comm_allreduce_sum_u64(comm, &count_local, 1));
  *divergent = (int64_t)count_local;
  return DS_OK;
}

/* Chains whose mean lp over their draws sits far below the others' (lp_outliers.h), from
 * sample_stats/lp [chain, draw], each rank reading its chains. Nothing without it. Collective. */
static int find_lp_outliers(comm_ctx_t *comm, hid_t file, summary_result_t *result) {
  summary_lp_outliers_t *out = &result->lp_outliers;
  out->count = 0;
  for (int i = 0; i < SUMMARY_FROZEN_NAMED; ++i) out->ids[i] = -1;
  hid_t dataset;
  DS_TRY(open_sample_stat(comm, file, "lp", &dataset));
  if (dataset < 0) return DS_OK;
  hid_t file_space = H5Dget_space(dataset);
  const int ndims = H5Sget_simple_extent_ndims(file_space);
  hsize_t dims[H5S_MAX_RANK] = {0};
  if (ndims > 0) H5Sget_simple_extent_dims(file_space, dims, NULL);
  H5Sclose(file_space);
  int status = DS_OK;
  size_t bytes = 0;
  if (ndims != 2) status = ds_fail(DS_ERR_INPUT, "summary %s: sample_stats/lp must have shape [chain, draw]", file_name(file));
  if (status == DS_OK) status = h5util_checked_bytes("summary", "sample_stats", "lp", 2, dims, sizeof(float), &bytes);
  const int64_t chains = status == DS_OK ? (int64_t)dims[0] : 0, draws = status == DS_OK ? (int64_t)dims[1] : 0;
  int64_t begin = 0, end = 0;
  comm_partition(chains, comm->size, comm->rank, &begin, &end);
  float *lp = malloc((size_t)((end - begin) * draws + 1) * sizeof *lp);
  float *moments = malloc((size_t)(2 * chains + 1) * sizeof *moments);
  if (status == DS_OK && !(lp && moments)) status = DS_FAIL_ALLOC("sample_stats/lp", bytes);
  if (status == DS_OK) {
    const hsize_t start[2] = {(hsize_t)begin, 0}, count[2] = {(hsize_t)(end - begin), (hsize_t)draws};
    status = read_box(dataset, 2, start, count, H5T_NATIVE_FLOAT, lp, "H5Dread(sample_stats/lp)");
  }
  H5Dclose(dataset);
  for (int64_t c = begin; status == DS_OK && c < end; ++c) {
    double sum = 0.0, squares = 0.0;
    for (int64_t d = 0; d < draws; ++d) sum += lp[(c - begin) * draws + d];
    const double mean = draws > 0 ? sum / (double)draws : NAN;
    for (int64_t d = 0; d < draws; ++d) squares += (lp[(c - begin) * draws + d] - mean) * (lp[(c - begin) * draws + d] - mean);
    moments[2 * c] = (float)mean;
    moments[2 * c + 1] = draws > 1 ? (float)sqrt(squares / (double)(draws - 1)) : NAN;
  }
  free(lp);
  status = comm_agree(comm, status);
  if (status == DS_OK && draws > 1) status = comm_agree(comm, comm_allgather_rows(comm, moments, chains, 2, 0));
  if (status == DS_OK && draws > 1 && chains >= LP_OUTLIER_MIN_CHAINS) {
    double *values = malloc((size_t)(4 * chains) * sizeof *values);
    uint8_t *flags = malloc((size_t)chains);
    if (values && flags) {
      for (int64_t c = 0; c < chains; ++c) {
        values[c] = moments[2 * c];
        values[chains + c] = moments[2 * c + 1];
      }
      out->count = lp_outliers(values, values + chains, chains, flags, &out->rule, values + 2 * chains);
      for (int64_t c = 0, named = 0; c < chains && named < SUMMARY_FROZEN_NAMED; ++c)
        if (flags[c]) {
          out->ids[named] = c;
          out->means[named++] = moments[2 * c];
        }
    } else {
      status = DS_FAIL_ALLOC("sample_stats/lp", (size_t)chains * 33);
    }
    free(values);
    free(flags);
    status = comm_agree(comm, status);
  }
  free(moments);
  return status;
}

/* Reads and summarises the file; on return rank 0 holds every row's stats. Collective. */
/* Rows [row_begin, + rows) of a float [n, dim] dataset into values (collective; rows may be 0). */
static int read_rows(hid_t dataset, int64_t row_begin, int64_t rows, int64_t dim, float *values) {
  const hsize_t start[2] = {(hsize_t)row_begin, 0}, count[2] = {(hsize_t)rows, (hsize_t)dim};
  return read_box(dataset, 2, start, count, H5T_NATIVE_FLOAT, values, "H5Dread(moments)");
}

/* Classic (not split, not rank-normalised) R-hat of Gelman and Rubin for each parameter from
 * every chain's mean and variance over n draws: W = mean of the chain variances, B / n = the
 * variance of the chain means, R = sqrt(((n - 1) / n W + B / n) / W). Chains are split over the
 * ranks and summed exactly, so the result does not depend on the rank count. Collective. */
/* The frozen chains of every rank (FROZEN: this rank's count, then its first ids), in rank order
 * (chains in increasing id), into M's count and first ids. Collective. */
static int gather_frozen(comm_ctx_t *comm, const int64_t *frozen, summary_moments_t *m) {
  const int per_rank = 1 + SUMMARY_FROZEN_NAMED;
  int64_t *all_frozen = malloc((size_t)comm->size * per_rank * sizeof(int64_t));
  int status = comm_agree(comm, all_frozen ? DS_OK : DS_FAIL_ALLOC("frozen chains", (size_t)per_rank * sizeof(int64_t)));
  if (status == DS_OK &&
      MPI_Allgather(frozen, per_rank, MPI_INT64_T, all_frozen, per_rank, MPI_INT64_T, comm->world) != MPI_SUCCESS)
    status = comm_agree(comm, ds_fail(DS_ERR_MPI, "summary: MPI_Allgather(frozen chains) failed"));
  if (status == DS_OK) {
    int named = 0;
    for (int i = 0; i < SUMMARY_FROZEN_NAMED; ++i) m->frozen_ids[i] = -1;
    for (int r = 0; r < comm->size; ++r) {
      const int64_t *theirs = all_frozen + r * per_rank;
      m->frozen += theirs[0];
      for (int i = 0; i < SUMMARY_FROZEN_NAMED && theirs[1 + i] >= 0 && named < SUMMARY_FROZEN_NAMED; ++i)
        m->frozen_ids[named++] = theirs[1 + i];
    }
  }
  free(all_frozen);
  return status;
}

static int summarize_moments(comm_ctx_t *comm, hid_t file, summary_result_t *result) {
  htri_t exists;
  H5E_BEGIN_TRY { exists = H5Lexists(file, "moments", H5P_DEFAULT) > 0 && H5Lexists(file, "moments/chain_mean", H5P_DEFAULT) > 0 &&
                           H5Lexists(file, "moments/chain_var", H5P_DEFAULT) > 0; }
  H5E_END_TRY;
  if (exists <= 0 || result->n_vars != 1 || result->draws < 2) return DS_OK;
  const int64_t dim = result->n_rows, n = result->draws;
  hid_t datasets[2] = {H5Dopen2(file, "moments/chain_mean", H5P_DEFAULT), H5Dopen2(file, "moments/chain_var", H5P_DEFAULT)};
  hsize_t dims[2] = {0, 0};
  int status = DS_OK;
  if (datasets[0] < 0 || datasets[1] < 0) {
    char what[4200];
    snprintf(what, sizeof what, "summary %s: moments cannot be opened", file_name(file));
    status = h5util_fail(DS_ERR_INPUT, what);
  }
  if (status == DS_OK) {
    hid_t space = H5Dget_space(datasets[0]);
    if (H5Sget_simple_extent_ndims(space) != 2 || H5Sget_simple_extent_dims(space, dims, NULL) < 0 ||
        dims[1] != (hsize_t)dim || dims[0] < 2)
      status = ds_fail(DS_ERR_INPUT, "summary %s: moments/chain_mean is not [chains >= 2, %lld]", file_name(file), (long long)dim);
    H5Sclose(space);
  }
  status = comm_agree(comm, status);
  const int64_t chains = (int64_t)dims[0];
  int64_t begin = 0, end = 0;
  comm_partition(chains, comm->size, comm->rank, &begin, &end);
  /* Blocks of chains bound the memory; every rank makes the same number of collective reads. */
  const int64_t block = dim > 0 ? (((int64_t)1 << 22) / dim > 0 ? ((int64_t)1 << 22) / dim : 1) : 1;
  const int64_t rows_max = (chains + comm->size - 1) / comm->size, rounds = (rows_max + block - 1) / block;
  int64_t frozen[1 + SUMMARY_FROZEN_NAMED];
  frozen[0] = 0;
  for (int i = 0; i < SUMMARY_FROZEN_NAMED; ++i) frozen[1 + i] = -1;
  float *values = malloc((size_t)(block * dim) * sizeof(float));
  exact_sum_t *sums = calloc((size_t)(3 * dim), sizeof(exact_sum_t)); /* sum mean, sum var, sum (mean - gm)^2 */
  double *grand_mean = malloc((size_t)dim * sizeof(double));
  if (status == DS_OK) status = comm_agree(comm, values && sums && grand_mean ? DS_OK : DS_FAIL_ALLOC("moments", (size_t)(block * dim) * 4));
  for (int pass = 0; pass < 2 && status == DS_OK; ++pass) {
    for (int v = pass; v < 2 && status == DS_OK; v += 1 + pass) { /* pass 0: means, variances; pass 1: means */
      for (int64_t round = 0; round < rounds && status == DS_OK; ++round) {
        const int64_t row = begin + round * block, rows = row < end ? (end - row < block ? end - row : block) : 0;
        status = comm_agree(comm, read_rows(datasets[pass == 1 ? 0 : v], row, rows, dim, values));
        for (int64_t e = 0; status == DS_OK && e < rows * dim; ++e) {
          const int64_t k = e % dim;
          double x = values[e];
          if (pass == 1) x = (x - grand_mean[k]) * (x - grand_mean[k]);
          exact_sum_add(&sums[(pass == 1 ? 2 : v) * dim + k], x);
        }
        /* A chain whose variance is 0 in every coordinate never moved. */
        for (int64_t r = 0; status == DS_OK && pass == 0 && v == 1 && r < rows; ++r) {
          int64_t k = 0;
          while (k < dim && values[r * dim + k] == 0.0f) ++k;
          if (k < dim) continue;
          if (frozen[0] < SUMMARY_FROZEN_NAMED) frozen[1 + frozen[0]] = row + r;
          frozen[0]++;
        }
      }
    }
    if (status == DS_OK) status = exact_sum_allreduce(comm, sums + (pass == 0 ? 0 : 2 * dim), pass == 0 ? 2 * dim : dim);
    for (int64_t k = 0; status == DS_OK && pass == 0 && k < dim; ++k) grand_mean[k] = exact_sum_value(&sums[k]) / (double)chains;
  }
  if (status == DS_OK) status = gather_frozen(comm, frozen, &result->moments);
  if (status == DS_OK && comm->rank == 0) {
    summary_moments_t *m = &result->moments;
    m->mean = malloc((size_t)dim * sizeof(double));
    m->sd = malloc((size_t)dim * sizeof(double));
    m->r_hat = malloc((size_t)dim * sizeof(double));
    if (!m->mean || !m->sd || !m->r_hat) status = DS_FAIL_ALLOC("moments", (size_t)dim * 24);
    for (int64_t k = 0; status == DS_OK && k < dim; ++k) {
      const double within = exact_sum_value(&sums[dim + k]) / (double)chains;
      const double between_n = exact_sum_value(&sums[2 * dim + k]) / (double)(chains - 1); /* B / n */
      const double var_plus = (double)(n - 1) / (double)n * within + between_n;
      m->mean[k] = grand_mean[k];
      /* The variance over all chains' draws: within-chain sums of squares plus between. */
      m->sd[k] = sqrt(((double)(n - 1) * within * (double)chains + (double)n * between_n * (double)(chains - 1)) /
                      ((double)n * (double)chains - 1.0));
      m->r_hat[k] = within > 0 ? sqrt(var_plus / within) : NAN;
    }
    if (status == DS_OK) m->chains = chains;
  }
  free(values);
  free(sums);
  free(grand_mean);
  for (int d = 0; d < 2; ++d)
    if (datasets[d] >= 0) H5Dclose(datasets[d]);
  return comm_agree(comm, status);
}

/* The `ksd` group of an SVGD output, when there is one (every rank reads it: it is small). */
static int read_ksd(hid_t file, const char *path, summary_result_t *result) {
  htri_t exists;
  H5E_BEGIN_TRY { exists = H5Lexists(file, "ksd", H5P_DEFAULT) > 0 && H5Lexists(file, "ksd/ksd", H5P_DEFAULT) > 0; }
  H5E_END_TRY;
  if (exists <= 0) return DS_OK;
  result->svgd = 1;
  const char *names[] = {"ksd/ksd", "ksd/iteration", "ksd/bandwidth"};
  hid_t types[] = {H5T_NATIVE_DOUBLE, H5T_NATIVE_INT64, H5T_NATIVE_DOUBLE};
  double *ksd = NULL, *bandwidth = NULL;
  int64_t *iteration = NULL;
  void **targets[] = {(void **)&ksd, (void **)&iteration, (void **)&bandwidth};
  int status = DS_OK;
  for (int v = 0; v < 3 && status == DS_OK; ++v) {
    hid_t dataset = H5Dopen2(file, names[v], H5P_DEFAULT);
    hid_t space = dataset < 0 ? H5I_INVALID_HID : H5Dget_space(dataset);
    hsize_t count = 0;
    if (space < 0 || H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, &count, NULL) < 0 ||
        (result->ksd_count && (int64_t)count != result->ksd_count) || count == 0)
      status = ds_fail(DS_ERR_INPUT, "summary %s: %s is not a series of the other ksd variables' length", path,
                       names[v]);
    result->ksd_count = (int64_t)count;
    if (status == DS_OK) {
      *targets[v] = malloc((size_t)count * 8);
      if (!*targets[v]) status = DS_FAIL_ALLOC("the KSD series", (size_t)count * 8);
    }
    if (status == DS_OK && H5Dread(dataset, types[v], H5S_ALL, H5S_ALL, H5P_DEFAULT, *targets[v]) < 0)
      status = h5_fail(__FILE__, __LINE__, "H5Dread(ksd)");
    if (space >= 0) H5Sclose(space);
    if (dataset >= 0) H5Dclose(dataset);
  }
  if (status == DS_OK) {
    const int64_t last = result->ksd_count - 1;
    result->ksd_first = ksd[0];
    result->ksd_first_iteration = iteration[0];
    result->ksd_last = ksd[last];
    result->ksd_last_iteration = iteration[last];
    result->ksd_last_bandwidth = bandwidth[last];
  }
  free(ksd);
  free(iteration);
  free(bandwidth);
  return status;
}

int summary_compute(comm_ctx_t *comm, const summary_options_t *options, summary_result_t *result) {
  memset(result, 0, sizeof *result);
  result->divergent = -1;
  hid_t file;
  int status = comm_agree(comm, open_file(comm, options->path, &file));
  if (status != DS_OK) return status;
  status = comm_agree(comm, inspect_posterior(file, options, result));
  if (status == DS_OK) status = comm_agree(comm, choose_superchains(file, options, result));
  if (status == DS_OK) status = comm_agree(comm, read_ksd(file, options->path, result));
  if (status == DS_OK) status = find_lp_outliers(comm, file, result);
  diag_workspace_t *ws = NULL;
  if (status == DS_OK)
    status = comm_agree(comm, diag_workspace_create(&ws, result->chains, result->draws, result->superchain_size));
  hid_t posterior = H5I_INVALID_HID;
  if (status == DS_OK) {
    posterior = H5Gopen2(file, "posterior", H5P_DEFAULT);
    status = comm_agree(comm, posterior < 0 ? h5_fail(__FILE__, __LINE__, "H5Gopen2(posterior)") : DS_OK);
  }
  if (status == DS_OK && comm->rank == 0) {
    result->stats = malloc((size_t)result->n_rows * DIAG_N_STATS * sizeof(double));
    if (!result->stats) status = DS_FAIL_ALLOC("summary table", (size_t)result->n_rows * DIAG_N_STATS * sizeof(double));
  }
  /* Unconditionally: a failure on rank 0 alone must still meet the other ranks here. */
  status = comm_agree(comm, status);
  int *counts = NULL, *displs = NULL;
  if (status == DS_OK) {
    counts = malloc((size_t)comm->size * sizeof(int));
    displs = malloc((size_t)comm->size * sizeof(int));
    status = comm_agree(comm, counts && displs ? DS_OK : DS_FAIL_ALLOC("gather counts", 2 * sizeof(int) * comm->size));
  }
  int64_t row_offset = 0;
  for (int v = 0; v < result->n_vars && status == DS_OK; ++v) {
    const summary_var_t *var = &result->vars[v];
    if ((int64_t)var->n_params * DIAG_N_STATS > INT32_MAX) {
      status = comm_agree(comm, ds_fail(DS_ERR_INPUT, "summary %s: posterior/%s has too many parameters (%lld)",
                                        options->path, var->name, (long long)var->n_params));
      break;
    }
    int64_t begin, end;
    comm_partition(var->n_params, comm->size, comm->rank, &begin, &end);
    double *stats_local = malloc((size_t)((end - begin) > 0 ? end - begin : 1) * DIAG_N_STATS * sizeof(double));
    status = comm_agree(comm, stats_local ? DS_OK
                                          : DS_FAIL_ALLOC("summary rows", (size_t)(end - begin) * DIAG_N_STATS * sizeof(double)));
    if (status == DS_OK)
      status = summarize_variable(comm, posterior, var, result->chains, result->draws, ws, stats_local);
    if (status == DS_OK) {
      for (int r = 0; r < comm->size; ++r) {
        int64_t rb, re;
        comm_partition(var->n_params, comm->size, r, &rb, &re);
        counts[r] = (int)((re - rb) * DIAG_N_STATS);
        displs[r] = (int)(rb * DIAG_N_STATS);
      }
      int rc = MPI_Gatherv(stats_local, (int)((end - begin) * DIAG_N_STATS), MPI_DOUBLE,
                           comm->rank == 0 ? result->stats + row_offset * DIAG_N_STATS : NULL, counts, displs,
                           MPI_DOUBLE, 0, comm->world);
      if (rc != MPI_SUCCESS) status = comm_mpi_fail(rc, __FILE__, __LINE__, "MPI_Gatherv(summary rows)");
    }
    free(stats_local);
    row_offset += var->n_params;
  }
  free(counts);
  free(displs);
  if (status == DS_OK) status = count_divergent(comm, file, &result->divergent);
  if (status == DS_OK) status = summarize_moments(comm, file, result);
  diag_workspace_free(ws);
  if (posterior >= 0) H5Gclose(posterior);
  H5Fclose(file);
  if (status != DS_OK) {
    free(result->stats);
    result->stats = NULL;
  }
  return status;
}
