/* config.c: options from the command line and from a --config file (INI: key = value), one table. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "status.h"

/* --call-timeout: ten minutes by default (a call into a target takes milliseconds to seconds);
 * at most about 31 years, so that its nanoseconds fit 64 bits. */
#define CONFIG_CALL_TIMEOUT_DEFAULT 600.0
#define CONFIG_CALL_TIMEOUT_MAX 1e9

/* How config_set's messages name an option read back from a checkpoint. */
#define CHECKPOINT_OPTION_WHERE "the checkpoint's option"

typedef enum { OPT_STRING, OPT_INT, OPT_UINT, OPT_DOUBLE, OPT_FLAG, OPT_CHOICE } option_type_t;
enum { FOR_HMC = 1, FOR_SVGD = 2, FOR_BOTH = 3 };

typedef struct option_spec {
  const char *name;
  option_type_t type;
  size_t offset;
  size_t size;        /* of a string field */
  const char *const *choices; /* OPT_CHOICE: the words, NULL-ended, in the order of the field's enum */
  int applies;        /* FOR_* */
  const char *value_name;
  const char *help;
} option_spec_t;

#define STR(field) OPT_STRING, offsetof(config_t, field), sizeof(((config_t *)0)->field), NULL
#define NUM(kind, field) kind, offsetof(config_t, field), 0, NULL
#define CHOICE(field, words) OPT_CHOICE, offsetof(config_t, field), sizeof(((config_t *)0)->field), words

static const char *const adapt_words[] = {"per-chain", "pooled", "none", NULL};
static const char *const metric_words[] = {"diag", "unit", "dense", "auto", NULL};
static const char *const metric_fit_words[] = {"variance", "fisher", NULL};
static const char *const stuck_words[] = {"restart", "keep", NULL};
static const char *const update_words[] = {"sgd", "adagrad", "adam", NULL};
static const char *const kernel_words[] = {"rbf", "imq", NULL};
static const char *const ksd_kernel_words[] = {"run", "imq", NULL};
static const char *const backend_words[] = {"auto", "cpu", "cuda", NULL};
static const char *const comm_words[] = {"auto", "nccl", "mpi", NULL};

static const option_spec_t option_table[] = {
    {"target", STR(target), FOR_BOTH, "NAME",
     "target density: a built-in (dsampler targets lists them), plugin:path/to/lib.so or stan:path/to/model.stan"},
    {"target-args", STR(target_args), FOR_BOTH, "K=V,...",
     "target parameters, e.g. mean=1,scale=2 (a Stan model's: init=FILE.json, init_radius=R)"},
    {"dim", NUM(OPT_INT, dim), FOR_BOTH, "D", "dimension of the target"},
    {"chains", NUM(OPT_INT, chains), FOR_HMC, "N", "number of chains (default 4)"},
    {"chains-per-start", NUM(OPT_INT, chains_per_start), FOR_HMC, "K",
     "chains cK..cK+K-1 share one start: superchains for summary's r_hat_nested (default 1; with --init, "
     "row c of the file is still chain c's start)"},
    {"particles", NUM(OPT_INT, particles), FOR_SVGD, "N", "number of particles (default 100)"},
    {"warmup", NUM(OPT_INT, warmup), FOR_HMC, "W", "warmup iterations, adapting step size and metric (default 1000)"},
    {"draws", NUM(OPT_INT, draws), FOR_HMC, "D", "draws kept per chain (default 1000)"},
    {"iters", NUM(OPT_INT, iters), FOR_SVGD, "T", "SVGD iterations (default 500)"},
    {"steps", NUM(OPT_INT, steps), FOR_HMC, "L", "leapfrog steps per iteration, or auto (default): adapted in warmup by ChEES (10 when warmup does not adapt)"},
    {"step-size", NUM(OPT_DOUBLE, step_size), FOR_BOTH, "EPS",
     "SVGD step; HMC leapfrog step (the initial one when warmup adapts it) (default 0.1)"},
    {"target-accept", NUM(OPT_DOUBLE, target_accept), FOR_HMC, "A", "acceptance rate warmup aims at, or auto (default): 0.8, raised where divergences persist late in warmup"},
    {"adapt", CHOICE(adapt, adapt_words), FOR_HMC, "MODE", "pooled (default: one step size and metric for all chains), per-chain or none"},
    {"metric", CHOICE(metric, metric_words), FOR_HMC, "M", "auto (default: dense where the warmup shows strong correlation, else diag), diag, dense or unit"},
    {"metric-fit", CHOICE(metric_fit, metric_fit_words), FOR_HMC, "F",
     "how warmup fits the diagonal metric: variance (default: the draws' variance, as Stan) or fisher (sqrt(Var x / "
     "Var grad), from the draws and their gradients, as nutpie; pooled adaptation)"},
    {"jitter", NUM(OPT_DOUBLE, jitter), FOR_HMC, "J", "step size jitter: times 1 + J * U(-1, 1) (default 0.3 with a fixed --steps, 0 with auto)"},
    {"save-warmup", NUM(OPT_FLAG, save_warmup), FOR_HMC, NULL, "also write the warmup draws (warmup_* groups)"},
    {"stuck", CHOICE(stuck, stuck_words), FOR_HMC, "MODE",
     "restart (default): chains that never moved in the last warmup iterations, and chains whose log density "
     "sits far below the others' in warmup (a minor mode), take a random healthy chain's state; keep: leave them"},
    {"thin", NUM(OPT_INT, thin), FOR_HMC, "K", "keep every K-th draw: sampling iterations 0, K, 2K, ... (default 1)"},
    {"output-chains", NUM(OPT_INT, output_chains), FOR_HMC, "M",
     "write draws of chains 0..M-1 only (default: all); moments cover every chain"},
    {"update", CHOICE(update, update_words), FOR_SVGD, "KIND", "SVGD update: sgd (default), adagrad or adam (0.9, 0.999, 1e-8)"},
    {"bandwidth", STR(bandwidth), FOR_SVGD, "H", "median (default) or a fixed bandwidth in [1e-12, 1e12]"},
    {"kernel", CHOICE(kernel, kernel_words), FOR_SVGD, "K",
     "SVGD kernel: rbf (default), exp(-D / 2h), or imq, (c^2 + D / h)^beta; D the squared distance, h the bandwidth"},
    {"imq-c", NUM(OPT_DOUBLE, imq_c), FOR_SVGD, "C", "the IMQ kernel's c, in [1e-6, 1e6] (default 1)"},
    {"imq-beta", NUM(OPT_DOUBLE, imq_beta), FOR_SVGD, "BETA", "the IMQ kernel's exponent, in (-1, 0) (default -0.5)"},
    {"ksd-every", NUM(OPT_INT, ksd_every), FOR_SVGD, "K",
     "kernel Stein discrepancy of the particles every K iterations (default 0: only after the last)"},
    {"ksd-kernel", CHOICE(ksd_kernel, ksd_kernel_words), FOR_SVGD, "K",
     "the KSD's kernel: run (default: the update's kernel and bandwidth) or imq ((c^2 + D)^beta with --imq-c, "
     "--imq-beta: Gorham and Mackey's)"},
    {"save-every", NUM(OPT_INT, save_every), FOR_SVGD, "K",
     "write the particles every K iterations (iteration 0 included) to the output's snapshots group (default 0: "
     "never)"},
    {"batch-size", NUM(OPT_INT, batch_size), FOR_SVGD, "B",
     "minibatch gradients: B data rows per iteration, drawn with replacement, keyed by (seed, iteration) "
     "(logistic; default 0: all rows)"},
    {"seed", NUM(OPT_UINT, seed), FOR_BOTH, "S", "random seed (default 0)"},
    {"init", STR(init), FOR_BOTH, "FILE.h5", "start from dataset x [N, dim] of this file"},
    {"data", STR(data), FOR_BOTH, "FILE",
     "the target's data: a Stan model's JSON data (as CmdStan reads it), HDF5 with X [n, D] and y [n] for logistic, "
     "or the file a plugin reads"},
    {"out", STR(out), FOR_BOTH, "FILE.h5", "output file (default run.h5)"},
    {"backend", CHOICE(backend, backend_words), FOR_BOTH, "B", "auto (default), cpu or cuda"},
    {"comm", CHOICE(comm, comm_words), FOR_BOTH, "C", "auto (default), nccl or mpi"},
    {"config", STR(config_file), FOR_BOTH, "FILE", "read options from an INI file (key = value)"},
    {"checkpoint-every", NUM(OPT_INT, checkpoint_every), FOR_BOTH, "N",
     "checkpoint every N iterations (default 0: only when stopped by a signal)"},
    {"checkpoint-dir", STR(checkpoint_dir), FOR_BOTH, "DIR", "where checkpoints go (default: OUT with .ckpt)"},
    {"keep", NUM(OPT_INT, keep), FOR_BOTH, "K", "newest checkpoints kept (default 2)"},
    {"quiet", NUM(OPT_FLAG, quiet), FOR_BOTH, NULL, "no progress output"},
    {"timing", NUM(OPT_FLAG, timing), FOR_BOTH, NULL,
     "at the end, where each phase's iterations spent their time, section by section (rank 0, stderr; on the GPU "
     "from CUDA events)"},
    {"call-timeout", NUM(OPT_DOUBLE, call_timeout), FOR_BOTH, "SECONDS",
     "end the job (every rank, exit 1) when a call into a plugin or Stan model has not returned after this long "
     "(default 600)"},
};
#define OPTION_COUNT ((int)(sizeof option_table / sizeof option_table[0]))

const char *config_algorithm_name(algorithm_t algorithm) {
  return algorithm == ALGO_HMC ? "hmc" : algorithm == ALGO_SVGD ? "svgd" : "none";
}

const char *config_backend_name(config_backend_t backend) { return backend_words[backend]; }
const char *config_comm_name(config_comm_t comm) { return comm_words[comm]; }

int64_t config_items(const config_t *cfg) { return cfg->algorithm == ALGO_HMC ? cfg->chains : cfg->particles; }

static void config_defaults(config_t *cfg, algorithm_t algorithm) {
  memset(cfg, 0, sizeof *cfg);
  cfg->algorithm = algorithm;
  strcpy(cfg->target, "gaussian");
  cfg->chains = 4;
  cfg->chains_per_start = 1;
  cfg->particles = 100;
  cfg->warmup = 1000;
  cfg->draws = 1000;
  cfg->target_accept = 0.0; /* auto */
  cfg->adapt = CONFIG_ADAPT_POOLED;
  cfg->jitter = -1.0; /* resolved by config_validate */
  cfg->metric = CONFIG_METRIC_AUTO;
  cfg->iters = 500;
  cfg->steps = 0;     /* auto */
  cfg->step_size = 0.1;
  cfg->update = CONFIG_UPDATE_SGD;
  strcpy(cfg->bandwidth, "median");
  cfg->kernel = CONFIG_KERNEL_RBF;
  cfg->imq_c = 1.0;
  cfg->imq_beta = -0.5;
  cfg->ksd_kernel = CONFIG_KSD_KERNEL_RUN;
  strcpy(cfg->out, "run.h5");
  cfg->backend = CONFIG_BACKEND_AUTO;
  cfg->comm = CONFIG_COMM_AUTO;
  cfg->keep = 2;
  cfg->thin = 1;
  cfg->stuck = CONFIG_STUCK_RESTART;
  cfg->call_timeout = CONFIG_CALL_TIMEOUT_DEFAULT;
}

algorithm_t config_algorithm_from_name(const char *name) {
  return strcmp(name, "hmc") == 0 ? ALGO_HMC : strcmp(name, "svgd") == 0 ? ALGO_SVGD : ALGO_NONE;
}

static const option_spec_t *find_option(const char *name) {
  for (int i = 0; i < OPTION_COUNT; ++i)
    if (strcmp(option_table[i].name, name) == 0) return &option_table[i];
  return NULL;
}

/* Sets one option from text; `where` names the source for messages ("--dim", "cfg.ini:3"). */
static int config_set(config_t *cfg, const option_spec_t *spec, const char *value, const char *where) {
  char *field = (char *)cfg + spec->offset;
  char *end = NULL;
  errno = 0;
  /* strtoll and strtod skip leading blanks, and strtoull takes " -1" as 2^64 - 1: a number is
   * its digits alone. */
  if (spec->type != OPT_STRING && spec->type != OPT_FLAG && value && isspace((unsigned char)value[0]))
    return ds_fail(DS_ERR_INPUT, "%s: expected a number without leading blanks, got '%s'", where, value);
  switch (spec->type) {
    case OPT_STRING:
      if (strlen(value) >= spec->size)
        return ds_fail(DS_ERR_INPUT, "%s: value is too long (at most %zu characters)", where, spec->size - 1);
      strcpy(field, value);
      return DS_OK;
    case OPT_INT: {
      if (strcmp(spec->name, "steps") == 0 && strcmp(value, "auto") == 0) {
        *(int64_t *)field = 0;
        return DS_OK;
      }
      /* 0 is how the field (and a checkpoint's text) holds auto; from a user it is a mistake. */
      if (strcmp(spec->name, "steps") == 0 && strcmp(value, "0") == 0 &&
          strncmp(where, CHECKPOINT_OPTION_WHERE, strlen(CHECKPOINT_OPTION_WHERE)) != 0)
        return ds_fail(DS_ERR_INPUT, "%s: expected auto or an integer in [1, 1000000], got 0", where);
      long long parsed = strtoll(value, &end, 10);
      if (errno != 0 || end == value || *end != '\0')
        return ds_fail(DS_ERR_INPUT, "%s: expected an integer, got '%s'", where, value);
      *(int64_t *)field = parsed;
      return DS_OK;
    }
    case OPT_UINT: {
      unsigned long long parsed = strtoull(value, &end, 10);
      if (errno != 0 || end == value || *end != '\0' || value[0] == '-')
        return ds_fail(DS_ERR_INPUT, "%s: expected a non-negative integer, got '%s'", where, value);
      *(uint64_t *)field = parsed;
      return DS_OK;
    }
    case OPT_DOUBLE: {
      /* 0 is how the field holds --target-accept auto (and writes it back as auto). */
      if (strcmp(spec->name, "target-accept") == 0 && strcmp(value, "auto") == 0) {
        *(double *)field = 0.0;
        return DS_OK;
      }
      double parsed = strtod(value, &end);
      if (errno != 0 || end == value || *end != '\0' || !isfinite(parsed))
        return ds_fail(DS_ERR_INPUT, "%s: expected a finite number, got '%s'", where, value);
      if (strcmp(spec->name, "target-accept") == 0 && parsed == 0.0)
        return ds_fail(DS_ERR_INPUT, "%s: expected auto or a number in (0, 1), got '%s'", where, value);
      *(double *)field = parsed;
      return DS_OK;
    }
    case OPT_CHOICE: {
      int count = 0;
      for (; spec->choices[count]; ++count)
        if (strcmp(value, spec->choices[count]) == 0) {
          *(int *)field = count;
          return DS_OK;
        }
      char expected[256] = "";
      for (int i = 0; i < count; ++i)
        snprintf(expected + strlen(expected), sizeof expected - strlen(expected), "%s%s",
                 i == 0 ? "" : i + 1 == count ? " or " : ", ", spec->choices[i]);
      return ds_fail(DS_ERR_INPUT, "%s: expected %s, got '%s'", where, expected, value);
    }
    case OPT_FLAG:
      if (value == NULL || strcmp(value, "1") == 0 || strcmp(value, "true") == 0 || strcmp(value, "yes") == 0)
        *(int *)field = 1;
      else if (strcmp(value, "0") == 0 || strcmp(value, "false") == 0 || strcmp(value, "no") == 0)
        *(int *)field = 0;
      else
        return ds_fail(DS_ERR_INPUT, "%s: expected true or false, got '%s'", where, value);
      return DS_OK;
  }
  return DS_OK;
}

/* Larger than any configuration a person writes; a bound so a wrong file fails at once. */
#define CONFIG_FILE_MAX_BYTES ((int64_t)1 << 20)
/* Counts (items, iterations, draws, dim) beyond this are surely mistakes; with it, sums and
 * the products in the run's sizes cannot wrap 64 bits unnoticed. */
#define CONFIG_COUNT_MAX ((int64_t)1 << 40)
/* A fixed --bandwidth and --imq-c: where the kernels' float32 arithmetic stays finite and normal
 * (1/h^2 for h; c^2 to c^-6 for c, beta in (-1, 0)). */
#define CONFIG_BANDWIDTH_MIN 1e-12
#define CONFIG_BANDWIDTH_MAX 1e12
#define CONFIG_IMQ_C_MIN 1e-6
#define CONFIG_IMQ_C_MAX 1e6
/* Checkpoints kept: ckpt_write's int, and a directory listing of that many is already huge. */
#define CONFIG_KEEP_MAX 1000000

typedef struct ini_context {
  config_t *cfg;
  const char *path;
  int status;
  /* Keys already set: outside any section, in [hmc], in [svgd] (a key given twice in one
   * place would silently keep the last). */
  unsigned char seen[3][OPTION_COUNT];
} ini_context_t;

static int config_ini_entry(void *user, const char *section, const char *name, const char *value) {
  ini_context_t *ctx = user;
  char where[CONFIG_PATH_MAX + 64];
  snprintf(where, sizeof where, "--config %s, key '%s'", ctx->path, name);
  /* [hmc] and [svgd] hold one algorithm's keys; any other section is a typo whose keys
   * would otherwise be dropped without a word. */
  if (section[0] && config_algorithm_from_name(section) == ALGO_NONE) {
    ctx->status = ds_fail(DS_ERR_INPUT, "--config %s: unknown section [%s] (expected [hmc], [svgd] or none)", ctx->path,
                          section);
    return 0;
  }
  if (section[0] && strcmp(section, config_algorithm_name(ctx->cfg->algorithm)) != 0)
    return 1; /* another algorithm's section */
  const option_spec_t *spec = find_option(name);
  if (!spec || strcmp(name, "config") == 0) {
    ctx->status = ds_fail(DS_ERR_INPUT, "%s: unknown key (keys are the long options, e.g. dim = 64)", where);
    return 0;
  }
  /* As on the command line: a key of the other algorithm is refused, not ignored. */
  if (!(spec->applies & (ctx->cfg->algorithm == ALGO_HMC ? FOR_HMC : FOR_SVGD))) {
    ctx->status = ds_fail(DS_ERR_INPUT, "%s: not an option of dsampler %s (it is %s's; keys of one algorithm go in "
                          "an [hmc] or [svgd] section)", where, config_algorithm_name(ctx->cfg->algorithm),
                          config_algorithm_name(ctx->cfg->algorithm == ALGO_HMC ? ALGO_SVGD : ALGO_HMC));
    return 0;
  }
  unsigned char *seen = &ctx->seen[section[0] ? config_algorithm_from_name(section) : 0][spec - option_table];
  if (*seen) {
    ctx->status = ds_fail(DS_ERR_INPUT, "%s: given twice%s%s%s; give each key once", where, section[0] ? " in [" : "",
                          section, section[0] ? "]" : "");
    return 0;
  }
  *seen = 1;
  ctx->status = config_set(ctx->cfg, spec, value, where);
  return ctx->status == DS_OK;
}

/* The INI text, read whole (it is at most CONFIG_FILE_MAX_BYTES): lines of any length, so a long
 * path is a value like any other and no tail of a long comment is ever read as a key.
 *   key = value        (or key: value); spaces around key and value are dropped
 *   [hmc] / [svgd]     the keys below it apply to that algorithm only
 *   ; or # at the start of a line, or ; after a space: a comment
 * An indented line, a NUL byte or a line of neither form is an error naming its line. */
static int config_parse_text(ini_context_t *ctx, char *text, size_t length) {
  const char *path = ctx->path;
  if (memchr(text, '\0', length))
    return ds_fail(DS_ERR_INPUT, "--config %s: holds a NUL byte at offset %zu (not a text file)", path,
                   (size_t)((char *)memchr(text, '\0', length) - text));
  char section[64] = "";
  char *line = text;
  if (length >= 3 && memcmp(line, "\xEF\xBB\xBF", 3) == 0) line += 3; /* a UTF-8 byte order mark */
  for (int number = 1; line && *line; ++number) {
    char *next = strchr(line, '\n');
    if (next) *next++ = '\0';
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r') line[--n] = '\0';
    if (isspace((unsigned char)line[0])) {
      char *rest = line;
      while (isspace((unsigned char)*rest)) ++rest;
      if (*rest && *rest != ';' && *rest != '#')
        return ds_fail(DS_ERR_INPUT, "--config %s: line %d is indented; give each key = value at the start of "
                       "its line (continuation lines are not read)", path, number);
      line = next;
      continue;
    }
    if (line[0] == '\0' || line[0] == ';' || line[0] == '#') {
      line = next;
      continue;
    }
    /* An inline comment: ';' after a space or tab. */
    for (char *c = line + 1; *c; ++c)
      if (*c == ';' && (c[-1] == ' ' || c[-1] == '\t')) {
        *c = '\0';
        break;
      }
    n = strlen(line);
    while (n && isspace((unsigned char)line[n - 1])) line[--n] = '\0';
    if (line[0] == '[') {
      if (line[n - 1] != ']' || n < 3 || n - 2 >= sizeof section)
        return ds_fail(DS_ERR_INPUT, "--config %s: line %d: a section is written [hmc] or [svgd]", path, number);
      memcpy(section, line + 1, n - 2);
      section[n - 2] = '\0';
      line = next;
      continue;
    }
    char *sep = line + strcspn(line, "=:");
    if (!*sep || sep == line)
      return ds_fail(DS_ERR_INPUT, "--config %s: syntax error on line %d (expected key = value)", path, number);
    char *value = sep + 1;
    *sep = '\0';
    for (size_t k = strlen(line); k && isspace((unsigned char)line[k - 1]);) line[--k] = '\0';
    while (isspace((unsigned char)*value)) ++value;
    if (!config_ini_entry(ctx, section, line, value)) return ctx->status;
    line = next;
  }
  return DS_OK;
}

static int config_read_file(config_t *cfg, const char *path) {
  ini_context_t ctx = {cfg, path, DS_OK, {{0}}};
  /* A regular file of sane size: /dev/zero or a FIFO would never end. */
  DS_TRY(h5util_check_input("--config", path, CONFIG_FILE_MAX_BYTES));
  FILE *file = fopen(path, "rb");
  if (!file) return ds_fail(DS_ERR_INPUT, "--config %s: cannot open: %s", path, strerror(errno));
  char *text = malloc((size_t)CONFIG_FILE_MAX_BYTES + 1);
  if (!text) {
    fclose(file);
    return ds_fail(DS_ERR_MEMORY, "--config %s: out of memory", path);
  }
  size_t length = fread(text, 1, (size_t)CONFIG_FILE_MAX_BYTES + 1, file);
  const int failed = ferror(file);
  fclose(file);
  int status = DS_OK;
  if (failed) status = ds_fail(DS_ERR_INPUT, "--config %s: cannot read: %s", path, strerror(errno));
  else if (length > (size_t)CONFIG_FILE_MAX_BYTES)
    status = ds_fail(DS_ERR_INPUT, "--config %s: larger than %lld bytes", path, (long long)CONFIG_FILE_MAX_BYTES);
  if (status == DS_OK) {
    text[length] = '\0';
    status = config_parse_text(&ctx, text, length);
  }
  free(text);
  return status;
}

static void print_help(FILE *out, algorithm_t algorithm) {
  if (!out) return;
  if (algorithm == ALGO_NONE) {
    fprintf(out,
            "usage: dsampler <command> [options]\n\n"
            "commands:\n"
            "  hmc      Hamiltonian Monte Carlo over many chains\n"
            "  svgd     Stein variational gradient descent over many particles\n"
            "  resume   continue a run from its checkpoints: dsampler resume DIR|FILE [options]\n"
            "  summary  mean, sd, MCSE, quantiles, R-hat and ESS of an output: dsampler summary FILE\n"
            "  stan     compile a Stan model into a target (once; cached): dsampler stan MODEL.stan\n"
            "  targets  the built-in targets and their parameters\n\n"
            "run under mpirun/srun to spread the chains or particles over ranks;\n"
            "`dsampler <command> --help` lists the command's options.\n");
    return;
  }
  fprintf(out, "usage: dsampler %s [options]\n\noptions:\n", config_algorithm_name(algorithm));
  int mask = algorithm == ALGO_HMC ? FOR_HMC : FOR_SVGD;
  for (int i = 0; i < OPTION_COUNT; ++i) {
    const option_spec_t *o = &option_table[i];
    if (!(o->applies & mask)) continue;
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", o->name, o->value_name ? " " : "", o->value_name ? o->value_name : "");
    fprintf(out, "  %-26s %s\n", left, o->help);
  }
  fprintf(out, "  %-26s %s\n", "--help", "this text");
}

static int config_validate(config_t *cfg) {
  const int hmc = cfg->algorithm == ALGO_HMC;
  const struct { const char *name; int64_t value; } counts[] = {
      {"dim", cfg->dim},     {"chains", cfg->chains}, {"particles", cfg->particles}, {"warmup", cfg->warmup},
      {"draws", cfg->draws}, {"iters", cfg->iters},   {"thin", cfg->thin},           {"checkpoint-every", cfg->checkpoint_every},
      {"output-chains", cfg->output_chains}, {"batch-size", cfg->batch_size},
      {"ksd-every", cfg->ksd_every}, {"save-every", cfg->save_every}};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; ++i)
    if (counts[i].value > CONFIG_COUNT_MAX)
      return ds_fail(DS_ERR_INPUT, "--%s: %lld is more than this dsampler handles (at most 2^40)", counts[i].name,
                     (long long)counts[i].value);
  if (cfg->dim < 0) return ds_fail(DS_ERR_INPUT, "--dim: expected a positive integer, got %lld", (long long)cfg->dim);
  /* --dim 0 (absent) is for the target to judge: some take their dimension from data. */
  if (hmc && cfg->chains <= 0)
    return ds_fail(DS_ERR_INPUT, "--chains: expected a positive integer, got %lld", (long long)cfg->chains);
  /* Superchains must be whole: nested R-hat (Margossian et al. 2024) takes K superchains of
   * equally many chains. */
  if (hmc && cfg->chains_per_start < 1)
    return ds_fail(DS_ERR_INPUT, "--chains-per-start: expected a positive integer, got %lld",
                   (long long)cfg->chains_per_start);
  if (hmc && cfg->chains % cfg->chains_per_start != 0)
    return ds_fail(DS_ERR_INPUT, "--chains-per-start %lld does not divide --chains %lld: every start needs the same "
                   "number of chains", (long long)cfg->chains_per_start, (long long)cfg->chains);
  if (!hmc && cfg->particles <= 0)
    return ds_fail(DS_ERR_INPUT, "--particles: expected a positive integer, got %lld", (long long)cfg->particles);
  if (hmc && cfg->warmup < 0) return ds_fail(DS_ERR_INPUT, "--warmup: expected >= 0, got %lld", (long long)cfg->warmup);
  if (hmc && cfg->draws < 0) return ds_fail(DS_ERR_INPUT, "--draws: expected >= 0, got %lld", (long long)cfg->draws);
  if (!hmc && cfg->iters < 0) return ds_fail(DS_ERR_INPUT, "--iters: expected >= 0, got %lld", (long long)cfg->iters);
  if (hmc && (cfg->steps < 0 || cfg->steps > 1000000))
    return ds_fail(DS_ERR_INPUT, "--steps: expected auto or an integer in [1, 1000000], got %lld", (long long)cfg->steps);
  if (!(cfg->step_size > 0)) return ds_fail(DS_ERR_INPUT, "--step-size: expected a positive number, got %g", cfg->step_size);
  if (hmc && cfg->target_accept != 0.0 && !(cfg->target_accept > 0 && cfg->target_accept < 1))
    return ds_fail(DS_ERR_INPUT, "--target-accept: expected auto or a number in (0, 1), got %g", cfg->target_accept);
  if (cfg->batch_size < 0)
    return ds_fail(DS_ERR_INPUT, "--batch-size: expected a positive number of data rows, got %lld",
                   (long long)cfg->batch_size);
  if (hmc && cfg->thin < 1)
    return ds_fail(DS_ERR_INPUT, "--thin: expected a positive integer, got %lld", (long long)cfg->thin);
  if (hmc && (cfg->output_chains < 0 || cfg->output_chains > cfg->chains))
    return ds_fail(DS_ERR_INPUT, "--output-chains: expected 0 (all) up to --chains %lld, got %lld",
                   (long long)cfg->chains, (long long)cfg->output_chains);
  /* The step's jitter by default: none where ChEES jitters the trajectory's length. */
  if (hmc && cfg->metric_fit == CONFIG_METRIC_FIT_FISHER && cfg->adapt != CONFIG_ADAPT_POOLED)
    return ds_fail(DS_ERR_INPUT, "--metric-fit fisher: needs --adapt pooled (the default)");
  if (hmc && cfg->metric_fit == CONFIG_METRIC_FIT_FISHER && !(cfg->metric == CONFIG_METRIC_DIAG || cfg->metric == CONFIG_METRIC_AUTO))
    return ds_fail(DS_ERR_INPUT, "--metric-fit fisher: fits a diagonal metric; needs --metric diag or auto, not %s",
                   metric_words[cfg->metric]);
  if (hmc && cfg->jitter == -1.0)
    cfg->jitter = cfg->steps == 0 && cfg->warmup > 0 && cfg->adapt != CONFIG_ADAPT_NONE ? 0.0 : 0.3;
  if (hmc && !(cfg->jitter >= 0 && cfg->jitter < 1))
    return ds_fail(DS_ERR_INPUT, "--jitter: expected a number in [0, 1), got %g", cfg->jitter);
  cfg->bandwidth_value = 0;
  if (strcmp(cfg->bandwidth, "median") != 0) {
    char *end = NULL;
    double h = strtod(cfg->bandwidth, &end);
    if (end == cfg->bandwidth || *end != '\0' || !(h > 0) || !isfinite(h))
      return ds_fail(DS_ERR_INPUT, "--bandwidth: expected median or a positive number, got '%s'", cfg->bandwidth);
    /* The kernels take 1 / h and 1 / h^2 in float32: outside this range they overflow or vanish. */
    if (!(h >= CONFIG_BANDWIDTH_MIN && h <= CONFIG_BANDWIDTH_MAX))
      return ds_fail(DS_ERR_INPUT, "--bandwidth: expected a number in [%.0e, %.0e] (1/h^2 must be a normal float32), "
                     "got %s; rescale the target instead", CONFIG_BANDWIDTH_MIN, CONFIG_BANDWIDTH_MAX, cfg->bandwidth);
    cfg->bandwidth_value = h;
  }
  /* The IMQ kernel takes c^2 and c^(2 (beta - 2)) in float32: beyond this range they overflow to
   * infinity or vanish, and the KSD would read 0. */
  if (!(cfg->imq_c >= CONFIG_IMQ_C_MIN && cfg->imq_c <= CONFIG_IMQ_C_MAX))
    return ds_fail(DS_ERR_INPUT, "--imq-c: expected a number in [%.0e, %.0e] (c^2 and its powers must be normal "
                   "float32 numbers), got %.17g", CONFIG_IMQ_C_MIN, CONFIG_IMQ_C_MAX, cfg->imq_c);
  /* Gorham and Mackey: KSD with the IMQ kernel detects non-convergence for beta in (-1, 0). */
  if (!(cfg->imq_beta > -1 && cfg->imq_beta < 0))
    return ds_fail(DS_ERR_INPUT, "--imq-beta: expected a number in (-1, 0), got %g", cfg->imq_beta);
  if (cfg->ksd_every < 0)
    return ds_fail(DS_ERR_INPUT, "--ksd-every: expected >= 0 iterations, got %lld", (long long)cfg->ksd_every);
  if (cfg->save_every < 0)
    return ds_fail(DS_ERR_INPUT, "--save-every: expected >= 0 iterations, got %lld", (long long)cfg->save_every);
  if (!cfg->out[0]) return ds_fail(DS_ERR_INPUT, "--out: expected a file name");
  if (cfg->out[strlen(cfg->out) - 1] == '/')
    return ds_fail(DS_ERR_INPUT, "--out %s: ends with /, which names a folder; expected a file name", cfg->out);
  if (cfg->checkpoint_every < 0)
    return ds_fail(DS_ERR_INPUT, "--checkpoint-every: expected >= 0, got %lld", (long long)cfg->checkpoint_every);
  if (cfg->keep < 1 || cfg->keep > CONFIG_KEEP_MAX)
    return ds_fail(DS_ERR_INPUT, "--keep: expected an integer in [1, %d], got %lld", CONFIG_KEEP_MAX, (long long)cfg->keep);
  if (!(cfg->call_timeout > 0 && cfg->call_timeout <= CONFIG_CALL_TIMEOUT_MAX))
    return ds_fail(DS_ERR_INPUT, "--call-timeout: expected a positive number of seconds (at most %.0f, about 31 "
                   "years), got %.17g", CONFIG_CALL_TIMEOUT_MAX, cfg->call_timeout);
  if (!cfg->checkpoint_dir[0]) {
    size_t length = strlen(cfg->out);
    if (length > 3 && strcmp(cfg->out + length - 3, ".h5") == 0) length -= 3;
    if (length + 6 >= sizeof cfg->checkpoint_dir) return ds_fail(DS_ERR_INPUT, "--out: the name is too long");
    memcpy(cfg->checkpoint_dir, cfg->out, length);
    strcpy(cfg->checkpoint_dir + length, ".ckpt");
  }
  return DS_OK;
}

/* Applies argv[skip + 1 ..] (argv[skip] stands in for the program name) in two passes: a
 * --config file first, then the command line over it. With `resume`, options that would
 * change the answer are refused. */
/* The error for a long option given by a prefix of its name (`--output` for --output-chains). */
static int abbreviated_option(const char *given, size_t length, const struct option *options, const char *command) {
  char names[512] = "";
  size_t used = 0;
  for (const struct option *o = options; o->name && used + 64 < sizeof names; ++o)
    if (strncmp(o->name, given + 2, length) == 0 || (strlen(o->name) < length && strncmp(o->name, given + 2, strlen(o->name)) == 0))
      used += (size_t)snprintf(names + used, sizeof names - used, "%s--%s", used ? ", " : "", o->name);
  return ds_fail(DS_ERR_INPUT, "unknown option '%.*s' for dsampler %s: options are named in full (did you mean %s?)",
                 (int)(length + 2), given, command, names);
}

static int apply_command_line(config_t *cfg, int argc, char **argv, int skip, int resume, FILE *help_out) {
  const algorithm_t algorithm = cfg->algorithm;
  const int mask = algorithm == ALGO_HMC ? FOR_HMC : FOR_SVGD;
  static const char *const resume_allowed[] = {"draws", "iters", "checkpoint-every", "checkpoint-dir", "keep",
                                               "comm", "quiet", "timing", "call-timeout", NULL};
  const char *command = resume ? "resume" : argv[1];

  struct option long_options[OPTION_COUNT + 2];
  int n_long = 0;
  for (int i = 0; i < OPTION_COUNT; ++i) {
    if (!(option_table[i].applies & mask)) continue;
    long_options[n_long++] = (struct option){option_table[i].name,
                                             option_table[i].type == OPT_FLAG ? no_argument : required_argument,
                                             NULL, 1000 + i};
  }
  long_options[n_long++] = (struct option){"help", no_argument, NULL, 'h'};
  long_options[n_long] = (struct option){NULL, 0, NULL, 0};

  for (int pass = 0; pass < 2; ++pass) {
    optind = 0; /* glibc: 0 restarts the scan */
    opterr = 0;
    int c, before = optind;
    while ((c = getopt_long(argc - skip, argv + skip, "+h", long_options, NULL)) != -1) {
      /* getopt_long takes any unambiguous prefix: `--output run.h5` would set --output-chains. An
       * option is named in full, or refused with the names it could mean. */
      const char *given = argv[skip + (before > 0 ? before : 1)];
      before = optind;
      if (c != '?' && c != ':' && given && strncmp(given, "--", 2) == 0) {
        const char *name = c == 'h' ? "help" : option_table[c - 1000].name;
        const size_t length = strcspn(given + 2, "=");
        if (length != strlen(name) || strncmp(given + 2, name, length) != 0)
          return abbreviated_option(given, length, long_options, command);
      }
      if (c == 'h') {
        print_help(help_out, algorithm);
        return DS_HELP;
      }
      if (c == '?' || c == ':') {
        const char *bad = argv[skip + optind - 1];
        if (optopt && optopt >= 1000 && option_table[optopt - 1000].type == OPT_FLAG)
          return ds_fail(DS_ERR_INPUT, "--%s takes no value (give --%s alone, or %s = true in a --config file)",
                         option_table[optopt - 1000].name, option_table[optopt - 1000].name,
                         option_table[optopt - 1000].name);
        if (optopt && optopt >= 1000)
          return ds_fail(DS_ERR_INPUT, "--%s: needs a value", option_table[optopt - 1000].name);
        return ds_fail(DS_ERR_INPUT, "unknown option '%s' for dsampler %s (see dsampler %s --help)",
                       bad ? bad : "?", command, config_algorithm_name(algorithm));
      }
      const option_spec_t *spec = &option_table[c - 1000];
      const int is_config = strcmp(spec->name, "config") == 0;
      if (resume && pass == 1) {
        int allowed = 0;
        for (const char *const *a = resume_allowed; *a; ++a) allowed |= strcmp(*a, spec->name) == 0;
        if (!allowed)
          return ds_fail(DS_ERR_INPUT,
                         "resume: --%s would change the answer; a resumed run keeps the checkpoint's settings "
                         "(allowed: --draws, --iters, --checkpoint-every, --checkpoint-dir, --keep, --comm, --quiet, "
                         "--timing, --call-timeout)",
                         spec->name);
      }
      if (pass == 0 && is_config) {
        DS_TRY(config_set(cfg, spec, optarg, "--config"));
        DS_TRY(config_read_file(cfg, cfg->config_file));
      } else if (pass == 1 && !is_config) {
        char where[80];
        snprintf(where, sizeof where, "--%s", spec->name);
        DS_TRY(config_set(cfg, spec, optarg, where));
      }
    }
    if (optind < argc - skip)
      return ds_fail(DS_ERR_INPUT, "unexpected argument '%s' (options start with --)", argv[skip + optind]);
  }
  return DS_OK;
}

/* A checkpoint's options are "key = value" lines, each value as it was but for three bytes
 * written as %XX: '%', newline and carriage return. No INI reader is involved, so a path keeps
 * its blanks, semicolons and newlines exactly. */
static const char checkpoint_escaped[] = "%\n\r";
static void format_value(const config_t *cfg, const option_spec_t *o, char *out, size_t size);

static int append_text(char *out, size_t size, size_t *used, const char *text, size_t length) {
  if (*used + length >= size) return 0;
  memcpy(out + *used, text, length);
  *used += length;
  out[*used] = '\0';
  return 1;
}

int config_write_checkpoint_text(const config_t *cfg, char *out, size_t size) {
  const int mask = cfg->algorithm == ALGO_HMC ? FOR_HMC : FOR_SVGD;
  size_t used = 0;
  int fits = size > 0;
  if (fits) out[0] = '\0';
  for (int i = 0; i < OPTION_COUNT && fits; ++i) {
    const option_spec_t *o = &option_table[i];
    if (!(o->applies & mask) || strcmp(o->name, "config") == 0) continue;
    char value[CONFIG_PATH_MAX];
    format_value(cfg, o, value, sizeof value);
    fits = append_text(out, size, &used, o->name, strlen(o->name)) && append_text(out, size, &used, " = ", 3);
    for (const char *c = value; *c && fits; ++c) {
      char escaped[4];
      if (strchr(checkpoint_escaped, *c)) snprintf(escaped, sizeof escaped, "%%%02X", (unsigned char)*c);
      else escaped[0] = *c, escaped[1] = '\0';
      fits = append_text(out, size, &used, escaped, strlen(escaped));
    }
    fits = fits && append_text(out, size, &used, "\n", 1);
  }
  if (!fits)
    return ds_fail(DS_ERR_INPUT, "the run's options take more than the %zu bytes a checkpoint keeps for them "
                   "(paths and --target-args of several thousand characters?)", size - 1);
  return DS_OK;
}

static int read_checkpoint_text(config_t *cfg, const char *text) {
  int line_number = 0;
  for (const char *line = text; *line; ) {
    ++line_number;
    const char *end = strchr(line, '\n');
    const size_t length = end ? (size_t)(end - line) : strlen(line);
    const char *separator = memchr(line, '=', length);
    char key[64], value[CONFIG_PATH_MAX];
    size_t key_length = separator ? (size_t)(separator - line) : 0;
    while (key_length > 0 && line[key_length - 1] == ' ') --key_length;
    size_t used = 0;
    int ok = separator && key_length > 0 && key_length < sizeof key && separator + 1 < line + length &&
             separator[1] == ' ';
    for (const char *c = ok ? separator + 2 : line + length; c < line + length && ok; ++c) {
      unsigned byte = (unsigned char)*c;
      if (*c == '%') {
        ok = line + length - c >= 3 && isxdigit((unsigned char)c[1]) && isxdigit((unsigned char)c[2]);
        if (ok) {
          const char hex[3] = {c[1], c[2], '\0'};
          byte = (unsigned)strtoul(hex, NULL, 16);
          c += 2;
        }
      }
      ok = ok && used + 1 < sizeof value;
      if (ok) value[used++] = (char)byte;
    }
    if (!ok) return ds_fail(DS_ERR_INPUT, "resume: the checkpoint's configuration does not parse (line %d)", line_number);
    value[used] = '\0';
    memcpy(key, line, key_length);
    key[key_length] = '\0';
    const option_spec_t *spec = find_option(key);
    if (!spec || !(spec->applies & (cfg->algorithm == ALGO_HMC ? FOR_HMC : FOR_SVGD)))
      return ds_fail(DS_ERR_INPUT, "resume: the checkpoint's configuration names an unknown option '%s' (line %d)",
                     key, line_number);
    char where[96];
    snprintf(where, sizeof where, CHECKPOINT_OPTION_WHERE " '%s'", key);
    DS_TRY(config_set(cfg, spec, value, where));
    line = end ? end + 1 : line + length;
  }
  return DS_OK;
}

int config_parse_resume(config_t *cfg, algorithm_t algorithm, const char *checkpoint_config, int argc, char **argv,
                        FILE *help_out) {
  config_defaults(cfg, algorithm);
  DS_TRY(read_checkpoint_text(cfg, checkpoint_config));
  const config_t saved = *cfg;
  DS_TRY(apply_command_line(cfg, argc, argv, 2, 1, help_out));
  if (cfg->algorithm == ALGO_HMC && cfg->draws < saved.draws)
    return ds_fail(DS_ERR_INPUT, "resume: --draws %lld is fewer than the run's %lld", (long long)cfg->draws,
                   (long long)saved.draws);
  if (cfg->algorithm == ALGO_SVGD && cfg->iters < saved.iters)
    return ds_fail(DS_ERR_INPUT, "resume: --iters %lld is fewer than the run's %lld", (long long)cfg->iters,
                   (long long)saved.iters);
  return config_validate(cfg);
}

int config_parse(config_t *cfg, int argc, char **argv, FILE *help_out) {
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
    config_defaults(cfg, ALGO_NONE);
    print_help(help_out, ALGO_NONE);
    return argc < 2 ? ds_fail(DS_ERR_INPUT, "no command given (hmc or svgd)") : DS_HELP;
  }
  algorithm_t algorithm = config_algorithm_from_name(argv[1]);
  if (algorithm == ALGO_NONE)
    return ds_fail(DS_ERR_INPUT, "unknown command '%s' (expected hmc or svgd; see dsampler --help)", argv[1]);
  config_defaults(cfg, algorithm);
  DS_TRY(apply_command_line(cfg, argc, argv, 1, 0, help_out));
  return config_validate(cfg);
}

static void format_value(const config_t *cfg, const option_spec_t *o, char *out, size_t size) {
  const char *field = (const char *)cfg + o->offset;
  switch (o->type) {
    case OPT_STRING: snprintf(out, size, "%s", field); break;
    case OPT_INT: snprintf(out, size, "%lld", (long long)*(const int64_t *)field); break;
    case OPT_UINT: snprintf(out, size, "%llu", (unsigned long long)*(const uint64_t *)field); break;
    case OPT_DOUBLE:
      if (strcmp(o->name, "target-accept") == 0 && *(const double *)field == 0.0)
        snprintf(out, size, "auto");
      else
        snprintf(out, size, "%.17g", *(const double *)field);
      break;
    case OPT_FLAG: snprintf(out, size, "%s", *(const int *)field ? "true" : "false"); break;
    case OPT_CHOICE: snprintf(out, size, "%s", o->choices[*(const int *)field]); break;
  }
}

void config_for_each(const config_t *cfg, void (*visit)(void *, const char *, const char *), void *user) {
  const int mask = cfg->algorithm == ALGO_HMC ? FOR_HMC : FOR_SVGD;
  for (int i = 0; i < OPTION_COUNT; ++i) {
    const option_spec_t *o = &option_table[i];
    if (!(o->applies & mask) || strcmp(o->name, "config") == 0) continue;
    char value[CONFIG_PATH_MAX];
    format_value(cfg, o, value, sizeof value);
    visit(user, o->name, value);
  }
}

