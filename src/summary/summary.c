/* summary.c: the `summary` command and its table; summary_read.c reads. The posterior of a
 * run.h5 is read with collective parallel HDF5, the parameters (the trailing axis of each
 * variable) split over the ranks as items are everywhere else, diagnostics.c's columns computed
 * per parameter and gathered on rank 0, which prints an aligned table (and, with --csv, the same
 * columns at full precision). Nothing printed depends on the rank count: each parameter is
 * computed whole by one rank. When the chains form superchains (`hmc --chains-per-start K`
 * records K as config_chains_per_start, or --superchain-size K), a last column r_hat_nested is
 * added; without, the table has none. */
#define _XOPEN_SOURCE 700 /* realpath */
#include "summary.h"
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

#include "diagnostics.h"
#include "exactsum.h"
#include "h5out.h"
#include "h5util.h"
#include "lp_outliers.h"
#include "status.h"

/* --- printing (rank 0) -------------------------------------------------------------------- */

/* name, name[i] or name[i,j,...] (0-based, as ArviZ names them). */
static void row_name(const summary_result_t *result, int64_t row, char *buf, size_t size) {
  for (int v = 0; v < result->n_vars; ++v) {
    const summary_var_t *var = &result->vars[v];
    if (row < var->n_params) {
      int used = snprintf(buf, size, "%s", var->name);
      int64_t index[SUMMARY_MAX_AXES], rest = row;
      for (int axis = var->n_axes - 1; axis >= 0; --axis) {
        index[axis] = rest % var->shape[axis];
        rest /= var->shape[axis];
      }
      for (int axis = 0; axis < var->n_axes && used < (int)size; ++axis)
        used += snprintf(buf + used, size - (size_t)used, "%s%lld", axis == 0 ? "[" : ",", (long long)index[axis]);
      if (var->n_axes > 0 && used < (int)size) snprintf(buf + used, size - (size_t)used, "]");
      return;
    }
    row -= result->vars[v].n_params;
  }
  snprintf(buf, size, "?");
}

/* NaN always as "nan" (printf may write "-nan"). */
static void format_number(char *buf, size_t size, const char *format, double value) {
  if (isnan(value))
    snprintf(buf, size, "nan");
  else if (isinf(value))
    snprintf(buf, size, value > 0 ? "inf" : "-inf");
  else
    snprintf(buf, size, format, value);
}

/* Table formats: 4 significant digits for location and scale, 3 for MCSE, whole ESS. */
static const char *const table_formats[DIAG_N_STATS] = {"%.4g", "%.4g", "%.3g", "%.3g", "%.4g", "%.4g",
                                                        "%.4g", "%.0f", "%.0f", "%.3f", "%.3f"};

/* Columns printed and written: r_hat_nested (the last) only with superchains, so that a table
 * without them reads exactly as it did before the column existed. */
static int summary_columns(const summary_result_t *result) {
  return result->superchain_size > 0 ? DIAG_N_STATS : DIAG_STAT_R_HAT_NESTED;
}

/* All chains from their moments, when the output holds the draws of fewer of them. */
static void print_moments(const summary_result_t *result, FILE *out, int max_rows) {
  const summary_moments_t *m = &result->moments;
  if (m->frozen > 0) {
    fprintf(out, "warning: %lld chain%s never moved (variance 0 in every coordinate, from the moments):",
            (long long)m->frozen, m->frozen == 1 ? "" : "s");
    for (int i = 0; i < SUMMARY_FROZEN_NAMED && m->frozen_ids[i] >= 0; ++i)
      fprintf(out, "%s %lld", i ? "," : "", (long long)m->frozen_ids[i]);
    fprintf(out, "%s; their draws are one point\n", m->frozen > SUMMARY_FROZEN_NAMED ? ", ..." : "");
  }
  if (m->chains <= result->chains || !m->r_hat) return;
  int64_t worst = 0, high = 0;
  for (int64_t k = 0; k < result->n_rows; ++k) {
    if (m->r_hat[k] > m->r_hat[worst]) worst = k;
    high += m->r_hat[k] > SUMMARY_RHAT_WARN;
  }
  char name[SUMMARY_NAME_LEN + 32];
  row_name(result, worst, name, sizeof name);
  fprintf(out, "all %lld chains, from their moments over %lld draws each (the table above: the %lld chains whose "
               "draws are written): classic R-hat (not split, not rank-normalised) max %.4f (%s), > %.2f for %lld of "
               "%lld parameters\n",
          (long long)m->chains, (long long)result->draws, (long long)result->chains, m->r_hat[worst], name,
          SUMMARY_RHAT_WARN, (long long)high, (long long)result->n_rows);
  const int64_t shown = max_rows > 0 && max_rows < result->n_rows ? max_rows : result->n_rows;
  fprintf(out, "%-16s  %10s  %10s  %12s\n", "", "mean", "sd", "r_hat_classic");
  for (int64_t k = 0; k < shown; ++k) {
    row_name(result, k, name, sizeof name);
    fprintf(out, "%-16s  %10.4g  %10.4g  %12.4f\n", name, m->mean[k], m->sd[k], m->r_hat[k]);
  }
}

/* The columns of an SVGD table: mean, sd and the quantiles (no MCSE, ESS or R-hat: particles
 * are not a Markov chain). */
static int column_shown(const summary_result_t *result, int c) {
  return !result->svgd || c == DIAG_STAT_MEAN || c == DIAG_STAT_SD || c == DIAG_STAT_Q5 || c == DIAG_STAT_Q50 ||
         c == DIAG_STAT_Q95;
}

/* The warning naming chains whose lp sits far below the others' (lp_outliers.h), if any. */
static void print_lp_outliers(const summary_lp_outliers_t *lp, FILE *out) {
  if (lp->count <= 0) return;
  fprintf(out, "warning: %lld chain%s log density sits far below the others' (mean lp of chain", (long long)lp->count,
          lp->count == 1 ? "'s" : "s'");
  for (int i = 0; i < SUMMARY_FROZEN_NAMED && lp->ids[i] >= 0; ++i)
    fprintf(out, "%s %lld at %.4g", i ? "," : "", (long long)lp->ids[i], lp->means[i]);
  char where[160];
  lp_outliers_describe(&lp->rule, where, sizeof where);
  fprintf(out, "%s; %s): a minor mode; those chains' draws are not the posterior's\n",
          lp->count > SUMMARY_FROZEN_NAMED ? ", ..." : "", where);
}

static void print_table(const summary_result_t *result, const char *path, FILE *out, int max_rows) {
  int64_t shown = max_rows > 0 && result->n_rows > max_rows ? max_rows : result->n_rows;
  int64_t total_draws = result->chains * result->draws;
  if (result->svgd)
    fprintf(out, "%s: SVGD, %lld particles\n", path, (long long)total_draws);
  else
    fprintf(out, "%s: %lld chains x %lld draws (%lld draws)", path, (long long)result->chains,
            (long long)result->draws, (long long)total_draws);
  if (result->svgd)
    ;
  else if (result->divergent >= 0)
    fprintf(out, ", %lld divergent (%.2f%%)\n", (long long)result->divergent,
            100.0 * (double)result->divergent / (double)total_draws);
  else
    fprintf(out, ", divergences not recorded\n");

  if (result->superchain_size > 0)
    fprintf(out, "r_hat_nested: %lld superchains of %lld chains (%s)\n",
            (long long)(result->chains / result->superchain_size), (long long)result->superchain_size,
            result->superchain_source);

  enum { CELL = 64 };
  const int columns = summary_columns(result);
  int width[DIAG_N_STATS + 1];
  width[0] = 0;
  for (int c = 0; c < columns; ++c) width[c + 1] = (int)strlen(diag_stat_names[c]);
  char cell[CELL];
  for (int64_t row = 0; row < shown; ++row) {
    row_name(result, row, cell, sizeof cell);
    if ((int)strlen(cell) > width[0]) width[0] = (int)strlen(cell);
    for (int c = 0; c < columns; ++c) {
      format_number(cell, sizeof cell, table_formats[c], result->stats[row * DIAG_N_STATS + c]);
      if ((int)strlen(cell) > width[c + 1]) width[c + 1] = (int)strlen(cell);
    }
  }
  fprintf(out, "%-*s", width[0], "");
  for (int c = 0; c < columns; ++c)
    if (column_shown(result, c)) fprintf(out, "  %*s", width[c + 1], diag_stat_names[c]);
  fputc('\n', out);
  for (int64_t row = 0; row < shown; ++row) {
    row_name(result, row, cell, sizeof cell);
    fprintf(out, "%-*s", width[0], cell);
    for (int c = 0; c < columns; ++c) {
      if (!column_shown(result, c)) continue;
      format_number(cell, sizeof cell, table_formats[c], result->stats[row * DIAG_N_STATS + c]);
      fprintf(out, "  %*s", width[c + 1], cell);
    }
    fputc('\n', out);
  }
  if (shown < result->n_rows)
    fprintf(out, "... %lld more; dsampler summary %s for all\n", (long long)(result->n_rows - shown), path);

  if (result->svgd) {
    fprintf(out, "kernel Stein discrepancy: %.4g after %lld iterations (bandwidth %.4g)", result->ksd_last,
            (long long)result->ksd_last_iteration, result->ksd_last_bandwidth);
    if (result->ksd_count > 1)
      fprintf(out, "; %.4g after %lld (%lld values in ksd/ksd)", result->ksd_first,
              (long long)result->ksd_first_iteration, (long long)result->ksd_count);
    fprintf(out, "\nnote: SVGD particles are not a Markov chain: no MCSE, ESS or R-hat\n");
    return;
  }
  /* Over every row, also those not shown. NaN (too few draws or chains) warns of nothing. */
  int64_t high_rhat = 0, high_nested = 0, low_ess = 0;
  for (int64_t row = 0; row < result->n_rows; ++row) {
    diag_stats_t stats;
    memcpy(&stats, result->stats + row * DIAG_N_STATS, sizeof stats);
    high_rhat += stats.r_hat > SUMMARY_RHAT_WARN;
    high_nested += result->superchain_size > 0 && stats.r_hat_nested > SUMMARY_RHAT_WARN;
    low_ess += stats.ess_bulk < SUMMARY_ESS_WARN || stats.ess_tail < SUMMARY_ESS_WARN;
  }
  if (high_rhat)
    fprintf(out, "warning: r_hat > %.2f for %lld of %lld parameters: the chains disagree; do not trust them yet\n",
            SUMMARY_RHAT_WARN, (long long)high_rhat, (long long)result->n_rows);
  if (high_nested)
    fprintf(out, "warning: r_hat_nested > %.2f for %lld of %lld parameters: the superchains disagree (their starts "
                 "are not yet forgotten)\n",
            SUMMARY_RHAT_WARN, (long long)high_nested, (long long)result->n_rows);
  if (result->file_chains_per_start > 0)
    fprintf(out, "note: no r_hat_nested: the run started %lld chains per start, but the posterior's %lld chains are "
                 "not whole superchains (--superchain-size K chooses others)\n",
            (long long)result->file_chains_per_start, (long long)result->chains);
  if (low_ess)
    fprintf(out, "warning: ess_bulk or ess_tail < %.0f for %lld of %lld parameters: too few effective draws\n",
            SUMMARY_ESS_WARN, (long long)low_ess, (long long)result->n_rows);
  print_lp_outliers(&result->lp_outliers, out);
  print_moments(result, out, max_rows);
  if (result->draws < 4)
    fprintf(out, "note: fewer than 4 draws per chain: no MCSE, ESS or R-hat\n");
  else if (result->chains < 2)
    fprintf(out, "note: one chain: no R-hat\n");
}

static int write_csv(const summary_result_t *result, FILE *csv) {
  const int columns = summary_columns(result);
  fprintf(csv, "variable");
  for (int c = 0; c < columns; ++c) fprintf(csv, ",%s", diag_stat_names[c]);
  fputc('\n', csv);
  char cell[SUMMARY_NAME_LEN + 64];
  for (int64_t row = 0; row < result->n_rows; ++row) {
    row_name(result, row, cell, sizeof cell);
    /* A name of several indices holds commas (table[0,1]): quoted, as RFC 4180 has it. */
    fprintf(csv, strchr(cell, ',') ? "\"%s\"" : "%s", cell);
    for (int c = 0; c < columns; ++c) {
      format_number(cell, sizeof cell, "%.17g", result->stats[row * DIAG_N_STATS + c]);
      fprintf(csv, ",%s", cell);
    }
    fputc('\n', csv);
  }
  return ferror(csv) ? DS_ERR_IO : DS_OK;
}

/* --- the command -------------------------------------------------------------------------- */

/* Rank 0 opens the CSV before the work, so a bad path fails at once. A regular file (or a
 * new one) is written beside its final name and renamed over it only once complete, so a
 * summary that fails leaves an existing CSV as it was; through a symbolic link, beside the
 * file it names (the link stays a link); a FIFO or device is written in place, and so is
 * anything reached through /dev or /proc (/dev/stdout names the caller's own descriptor,
 * which a rename would not reach). The input is never the CSV: that would truncate it before
 * reading. `final` gets the name the CSV ends under. */
static int open_csv(const summary_options_t *options, FILE **csv, char *partial, size_t partial_size, char *final,
                    size_t final_size) {
  const char *path = options->csv_path;
  partial[0] = '\0';
  snprintf(final, final_size, "%s", path);
  if (h5util_same_file(path, options->path))
    return ds_fail(DS_ERR_INPUT, "summary --csv %s: is the input file %s; give another name", path, options->path);
  struct stat st, link;
  int exists = stat(path, &st) == 0;
  const int is_link = lstat(path, &link) == 0 && S_ISLNK(link.st_mode);
  if (exists && S_ISDIR(st.st_mode)) return ds_fail(DS_ERR_INPUT, "summary --csv %s: is a directory", path);
  const int system_path = strncmp(path, "/dev/", 5) == 0 || strncmp(path, "/proc/", 6) == 0;
  if (is_link && !exists && !system_path)
    return ds_fail(DS_ERR_INPUT, "summary --csv %s: is a link to a file that does not exist; give the file's own name",
                   path);
  struct stat out_st;
  if (exists && fstat(STDOUT_FILENO, &out_st) == 0 && out_st.st_dev == st.st_dev && out_st.st_ino == st.st_ino) {
    *csv = stdout; /* /dev/stdout, or the file stdout goes to: after the table, not over it */
    return DS_OK;
  }
  if (exists && S_ISFIFO(st.st_mode)) {
    /* Opened without waiting: a FIFO nobody reads would hold the open (and the job) forever. */
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENXIO)
      return ds_fail(DS_ERR_INPUT, "summary --csv %s: a FIFO that no process is reading (start its reader first)",
                     path);
    if (fd < 0) return ds_fail(DS_ERR_INPUT, "summary --csv %s: %s", path, strerror(errno));
    const int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0 || !(*csv = fdopen(fd, "w"))) {
      const int error = errno;
      close(fd);
      return ds_fail(DS_ERR_IO, "summary --csv %s: %s", path, strerror(error));
    }
    return DS_OK;
  }
  if ((exists && !S_ISREG(st.st_mode)) || system_path) {
    *csv = fopen(path, "w");
    if (!*csv) return ds_fail(DS_ERR_INPUT, "summary --csv %s: %s", path, strerror(errno));
    return DS_OK;
  }
  if (is_link) {
    char *target = realpath(path, NULL);
    if (!target) return ds_fail(DS_ERR_INPUT, "summary --csv %s: cannot follow the link: %s", path, strerror(errno));
    const int fits = strlen(target) < final_size;
    if (fits) snprintf(final, final_size, "%s", target);
    free(target);
    if (!fits) return ds_fail(DS_ERR_INPUT, "summary --csv %s: the file it links to has too long a name", path);
  }
  snprintf(partial, partial_size, "%s.partial-XXXXXX", final);
  int fd = mkstemp(partial);
  if (fd < 0) {
    int error = errno;
    partial[0] = '\0';
    return ds_fail(DS_ERR_INPUT, "summary --csv %s: cannot write beside it: %s", path, strerror(error));
  }
  *csv = fdopen(fd, "w");
  if (!*csv) {
    close(fd);
    unlink(partial);
    partial[0] = '\0';
    return ds_fail(DS_ERR_IO, "summary --csv %s: %s", path, strerror(errno));
  }
  return DS_OK;
}

/* Rank 0: refuses an output that a running dsampler holds (run.c locks it with flock while it
 * writes): its draws are not all there, and its HDF5 metadata may be in flux. */
static int check_not_being_written(const char *path) {
  /* Non-blocking: a FIFO must not hold the open (the read that follows refuses it). */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return DS_OK; /* the read that follows names the problem */
  int status = DS_OK;
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK)
    status = ds_fail(DS_ERR_INPUT, "summary %s: a running dsampler is writing this file; summarise it once that "
                     "run has ended or stopped", path);
  close(fd);
  return status;
}

static int summary_run(comm_ctx_t *comm, const summary_options_t *options, FILE *out) {
  FILE *csv = NULL;
  char partial[4200] = "", final[4200] = "";
  int status = DS_OK;
  if (options->csv_path && comm->rank == 0)
    status = open_csv(options, &csv, partial, sizeof partial, final, sizeof final);
  status = comm_agree(comm, status);
  summary_result_t *result = NULL;
  if (status == DS_OK) {
    result = calloc(1, sizeof *result);
    status = comm_agree(comm, result ? DS_OK : DS_FAIL_ALLOC("summary", sizeof *result));
  }
  if (status == DS_OK) status = summary_compute(comm, options, result);
  if (status == DS_OK && comm->rank == 0) {
    if (out) {
      print_table(result, options->path, out, options->max_rows);
      fflush(out);
    }
    if (csv) {
      int csv_status = write_csv(result, csv);
      /* fsync only the new file that replaces the old: a pipe or a terminal has no disk. */
      if (fflush(csv) != 0 || (partial[0] && fsync(fileno(csv)) != 0)) csv_status = DS_ERR_IO;
      if (csv != stdout && fclose(csv) != 0) csv_status = DS_ERR_IO;
      csv = NULL;
      if (csv_status == DS_OK && partial[0]) {
        /* mkstemp made it 0600; a CSV is read like any other file. */
        mode_t mask = umask(0);
        umask(mask);
        chmod(partial, 0666 & ~mask);
        if (rename(partial, final) != 0) csv_status = DS_ERR_IO;
        else partial[0] = '\0';
      }
      if (csv_status != DS_OK)
        status = ds_fail(DS_ERR_IO, "summary --csv %s: write failed: %s", options->csv_path, strerror(errno));
    }
  }
  if (csv && csv != stdout) fclose(csv);
  if (partial[0]) unlink(partial);
  if (result) {
    free(result->stats);
    free(result->moments.mean);
    free(result->moments.sd);
    free(result->moments.r_hat);
  }
  free(result);
  return comm_agree(comm, status);
}

int summary_print_file(comm_ctx_t *comm, const char *path, FILE *out, int max_rows) {
  summary_options_t options = {path, NULL, NULL, max_rows, 0};
  return summary_run(comm, &options, out);
}

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: dsampler summary FILE.h5 [options]\n\n"
          "Per parameter of the posterior: mean, sd, MCSE of the mean and of the sd, the 5%%, 50%%\n"
          "and 95%% quantiles, bulk and tail ESS and rank-normalised split R-hat, as ArviZ computes\n"
          "them; and the number of divergent transitions. Runs on any number of MPI ranks.\n"
          "When the chains form superchains (groups of chains from one start: hmc --chains-per-start),\n"
          "also r_hat_nested, the nested R-hat of Margossian et al. (2024) over the superchains.\n\n"
          "options:\n"
          "  %-20s %s\n  %-20s %s\n  %-20s %s\n  %-20s %s\n  %-20s %s\n",
          "--csv FILE", "also write the table as CSV, full precision", "--var NAME",
          "only posterior variable NAME (default: all)", "--max-rows N", "print at most N rows (default: all)",
          "--superchain-size K", "chains cK..cK+K-1 form a superchain (default: the run's --chains-per-start)",
          "--help", "this text");
}

int summary_main(comm_ctx_t *comm, int argc, char **argv) {
  summary_options_t options = {NULL, NULL, NULL, 0, 0};
  for (int i = 2; i < argc; ++i) {
    const char *arg = argv[i];
    const char *names[4] = {"--csv", "--var", "--max-rows", "--superchain-size"};
    int which = -1;
    const char *value = NULL;
    for (int k = 0; k < 4; ++k) {
      size_t len = strlen(names[k]);
      if (strncmp(arg, names[k], len) == 0 && (arg[len] == '\0' || arg[len] == '=')) {
        which = k;
        if (arg[len] == '=') {
          value = arg + len + 1;
        } else if (i + 1 < argc) {
          value = argv[++i];
        } else {
          return ds_fail(DS_ERR_INPUT, "summary: %s needs a value (see dsampler summary --help)", names[k]);
        }
      }
    }
    if (which == 0) {
      options.csv_path = value;
    } else if (which == 1) {
      options.var_name = value;
    } else if (which == 2) {
      char *end = NULL;
      long rows = strtol(value, &end, 10);
      if (!*value || *end || rows < 0 || rows > INT32_MAX)
        return ds_fail(DS_ERR_INPUT, "summary: --max-rows %s: expected a whole number >= 0", value);
      options.max_rows = (int)rows;
    } else if (which == 3) {
      char *end = NULL;
      errno = 0;
      long long size = strtoll(value, &end, 10);
      if (!*value || *end || errno != 0 || size < 1)
        return ds_fail(DS_ERR_INPUT, "summary: --superchain-size %s: expected a whole number >= 1", value);
      options.superchain_size = size;
    } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
      if (comm->rank == 0) print_usage(stdout);
      return DS_OK;
    } else if (arg[0] == '-' && arg[1] != '\0') {
      return ds_fail(DS_ERR_INPUT, "summary: unknown option '%s' (see dsampler summary --help)", arg);
    } else if (options.path) {
      return ds_fail(DS_ERR_INPUT, "summary: one file expected, got '%s' and '%s'", options.path, arg);
    } else {
      options.path = arg;
    }
  }
  if (!options.path) return ds_fail(DS_ERR_INPUT, "summary: no file given (usage: dsampler summary FILE.h5 [--csv FILE] [--var NAME])");
  /* The command, not a run's own closing summary (summary_print_file), which holds the lock. */
  DS_TRY(comm_agree(comm, comm->rank == 0 ? check_not_being_written(options.path) : DS_OK));
  return summary_run(comm, &options, comm->rank == 0 ? stdout : NULL);
}
