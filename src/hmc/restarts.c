/* restarts.c: chains restarted from healthy chains' states in warmup: chains stuck over the tail
 * of warmup, and chains in minor modes (restarts.h). */
#include "restarts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lp_outliers.h"
#include "order_stats.h"
#include "rng.h"
#include "status.h"

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* ---- Stuck chains --------------------------------------------------------------------- */

/* Chains that never moved over the tail of warmup (adapt_tail_m2) start sampling from the state
 * of a healthy chain drawn for each, keyed by the seed and the stuck chain's id (so any rank
 * count draws the same), with all it carries: position, gradient, step size, metric and
 * adaptation state. In three steps: the plan (the same on every rank), the exchange of the
 * donors' rows between ranks (comm_exchange_rows), and their copy over the stuck chains. */
typedef struct restart_plan {
  int64_t n_stuck, n_healthy;
  uint8_t *stuck;                 /* [total]: 1 for a stuck chain */
  int64_t *donor;                 /* [total]: the donor of each stuck chain, -1 for the others */
  int64_t *begins;                /* [size + 1]: each rank's first chain, then total */
  int64_t *send_rows, *recv_rows; /* [size] each: this rank's donor rows for, and from, each rank */
  int64_t *next_recv;             /* [size]: the next row received from each rank, within recv */
} restart_plan_t;

static void restart_plan_free(restart_plan_t *plan) {
  free(plan->stuck);
  free(plan->donor);
  free(plan->begins);
  free(plan->send_rows);
}

/* The rank that owns global chain c. */
static int restart_owner(const restart_plan_t *plan, int64_t c) {
  int rank = 0;
  while (c >= plan->begins[rank + 1]) ++rank;
  return rank;
}

/* mine[c] = 1 for this rank's chains whose every coordinate has m2 exactly 0 over the tail. */
static int local_stuck_flags(run_ctx_t *run, const float *tail_m2, int64_t rows, uint8_t *mine) {
  const int64_t dim = run->target->dim;
  float *m2 = malloc((size_t)(max64(rows, 1) * dim) * sizeof *m2);
  if (!m2) return DS_FAIL_ALLOC("stuck chains' moments", (size_t)(max64(rows, 1) * dim) * sizeof *m2);
  int status = run->backend->download(run->backend, m2, tail_m2, (size_t)(rows * dim) * sizeof(float));
  for (int64_t c = 0; status == DS_OK && c < rows; ++c) {
    int64_t k = 0;
    while (k < dim && m2[c * dim + k] == 0.0f) ++k;
    mine[c] = k == dim;
  }
  free(m2);
  return status;
}

/* Each stuck chain's donor, drawn among the healthy chains in increasing id, keyed by the seed,
 * the chain and the round (0 for the stuck chains at the end of warmup, 1 + k for the k-th
 * check for minor modes). */
static int restart_draw_donors(run_ctx_t *run, restart_plan_t *plan, int64_t total, uint32_t round) {
  int64_t *healthy = malloc((size_t)total * sizeof *healthy);
  if (!healthy) return DS_FAIL_ALLOC("healthy chains", (size_t)total * sizeof *healthy);
  for (int64_t c = 0; c < total; ++c) {
    if (plan->stuck[c]) plan->n_stuck++;
    else healthy[plan->n_healthy++] = c;
  }
  const double n_healthy = (double)plan->n_healthy;
  for (int64_t c = 0; c < total; ++c) {
    plan->donor[c] = -1;
    if (!plan->stuck[c] || plan->n_healthy == 0) continue;
    const double u = (double)rng_uniform(rng_block(run->cfg->seed, (uint64_t)c, RNG_ITERATION_RESTART, round).v[0]);
    plan->donor[c] = healthy[min64(plan->n_healthy - 1, (int64_t)(u * n_healthy))];
  }
  free(healthy);
  return DS_OK;
}

/* The plan: which chains are stuck (this rank's flags `mine`, over all ranks), their donors,
 * and the rows each rank sends and receives. Collective. */
static int restart_plan_make(run_ctx_t *run, const uint8_t *mine, uint32_t round, restart_plan_t *plan) {
  comm_ctx_t *comm = run->comm;
  const int64_t total = config_items(run->cfg);
  const int size = comm->size;
  memset(plan, 0, sizeof *plan);
  plan->stuck = malloc((size_t)total);
  plan->donor = malloc((size_t)total * sizeof *plan->donor);
  plan->begins = malloc((size_t)(size + 1) * sizeof *plan->begins);
  plan->send_rows = calloc((size_t)size * 3, sizeof *plan->send_rows);
  int status = plan->stuck && plan->donor && plan->begins && plan->send_rows
                   ? DS_OK : DS_FAIL_ALLOC("stuck chains", (size_t)total * 9);
  status = comm_agree(comm, status);
  if (status == DS_OK) status = comm_allgather_item_bytes(comm, mine, total, plan->stuck);
  if (status == DS_OK) status = comm_agree(comm, restart_draw_donors(run, plan, total, round));
  if (status != DS_OK) return status;
  plan->recv_rows = plan->send_rows + size;
  plan->next_recv = plan->send_rows + 2 * size;
  for (int r = 0; r < size; ++r) {
    int64_t end;
    comm_partition(total, size, r, &plan->begins[r], &end);
  }
  plan->begins[size] = total;
  for (int64_t c = 0; plan->n_healthy > 0 && c < total; ++c) {
    if (!plan->stuck[c]) continue;
    const int owner = restart_owner(plan, c), donor_rank = restart_owner(plan, plan->donor[c]);
    if (donor_rank == comm->rank) plan->send_rows[owner]++;
    if (owner == comm->rank) plan->recv_rows[donor_rank]++;
  }
  for (int r = 1; r < size; ++r) plan->next_recv[r] = plan->next_recv[r - 1] + plan->recv_rows[r - 1];
  return DS_OK;
}

/* Bytes of a chain's row of a checkpointed array. */
static size_t array_row_bytes(const ckpt_array_t *a) { return (size_t)a->width * (a->dtype == CKPT_FLOAT64 ? 8 : 4); }

/* Bytes of a chain's row of every checkpointed array together. */
static size_t state_row_bytes(const hmc_chains_t *chains) {
  size_t bytes = 0;
  for (int i = 0; i < chains->n_state; ++i) bytes += array_row_bytes(&chains->state[i].array);
  return bytes;
}

/* Local chain `row`'s rows of every checkpointed array (host mirrors), to packed one after
 * another (to_packed) or back from it. */
static void state_row_copy(hmc_chains_t *chains, int64_t row, uint8_t *packed, int to_packed) {
  for (int i = 0; i < chains->n_state; ++i) {
    const ckpt_array_t *a = &chains->state[i].array;
    const size_t bytes = array_row_bytes(a);
    uint8_t *local = (uint8_t *)a->local + (size_t)row * bytes;
    if (to_packed) memcpy(packed, local, bytes);
    else memcpy(local, packed, bytes);
    packed += bytes;
  }
}

/* The donor rows this rank owns, by destination rank and, for each, in increasing stuck chain
 * id: that is increasing stuck chain id over all, the order in which the receivers read them. */
static void restart_pack(run_ctx_t *run, hmc_chains_t *chains, const restart_plan_t *plan, uint8_t *send) {
  const size_t row_bytes = state_row_bytes(chains);
  for (int64_t c = 0; c < config_items(run->cfg); ++c) {
    const int64_t donor = plan->donor[c];
    if (!plan->stuck[c] || donor < run->item_begin || donor >= run->item_end) continue;
    state_row_copy(chains, donor - run->item_begin, send, 1);
    send += row_bytes;
  }
}

/* The rows received over this rank's stuck chains. */
static void restart_apply(run_ctx_t *run, hmc_chains_t *chains, restart_plan_t *plan, uint8_t *recv) {
  const size_t row_bytes = state_row_bytes(chains);
  for (int64_t c = run->item_begin; c < run->item_end; ++c) {
    if (!plan->stuck[c]) continue;
    const int donor_rank = restart_owner(plan, plan->donor[c]);
    state_row_copy(chains, c - run->item_begin, recv + (size_t)plan->next_recv[donor_rank]++ * row_bytes, 0);
  }
}

/* Backend -> host mirrors, the exchange, the copy, host -> backend. Collective. */
static int restart_from_donors(run_ctx_t *run, hmc_chains_t *chains, adapt_t *adapt, restart_plan_t *plan) {
  comm_ctx_t *comm = run->comm;
  const int64_t rows = chains->batch.n_chains;
  const size_t row_bytes = state_row_bytes(chains);
  int64_t sends = 0, recvs = 0;
  for (int r = 0; r < comm->size; ++r) {
    sends += plan->send_rows[r];
    recvs += plan->recv_rows[r];
  }
  uint8_t *send = malloc((size_t)max64(sends, 1) * row_bytes), *recv = malloc((size_t)max64(recvs, 1) * row_bytes);
  int status = comm_agree(comm, send && recv ? DS_OK : DS_FAIL_ALLOC("stuck chains' rows", (size_t)(sends + recvs) * row_bytes));
  if (status == DS_OK) status = comm_agree(comm, hmc_chains_sync(chains, run->backend, rows, 1));
  if (status == DS_OK) {
    restart_pack(run, chains, plan, send);
    status = comm_exchange_rows(comm, send, plan->send_rows, recv, plan->recv_rows, row_bytes);
  }
  if (status == DS_OK) {
    restart_apply(run, chains, plan, recv);
    status = comm_agree(comm, hmc_chains_sync(chains, run->backend, rows, 0));
    adapt_factors_changed(adapt); /* per-chain dense factors moved with their chains */
  }
  free(send);
  free(recv);
  return status;
}

static void report_restarted(run_ctx_t *run, const restart_plan_t *plan) {
  if (run->comm->rank != 0) return; /* a warning: said under --quiet too */
  char ids[160] = "";
  size_t used = 0;
  int named = 0;
  for (int64_t c = 0; c < config_items(run->cfg) && named < 8 && used < sizeof ids; ++c)
    if (plan->stuck[c]) used += (size_t)snprintf(ids + used, sizeof ids - used, "%s%lld", named++ ? ", " : "", (long long)c);
  if (run->progress.printed_inline) fprintf(stderr, "\n");
  fprintf(stderr, "dsampler: %lld chain%s never moved in the last warmup iterations (%s%s): restarted from "
                  "healthy chains' states (--stuck keep leaves them)\n",
          (long long)plan->n_stuck, plan->n_stuck == 1 ? "" : "s", ids, plan->n_stuck > 8 ? ", ..." : "");
}

/* Collective. */
int restart_stuck_chains(run_ctx_t *run, hmc_chains_t *chains, adapt_t *adapt) {
  double samples = 0;
  const float *tail_m2 = adapt_tail_m2(adapt, &samples);
  if (samples < 2) return DS_OK;
  const int64_t rows = chains->batch.n_chains, dim = run->target->dim;
  /* A stuck chain has dim zeros among the tail's m2: with fewer zeros over all ranks (counted on
   * the devices, nothing downloaded) no chain is, and the rows are not read. */
  int64_t below_zero = 0, up_to_zero = 0;
  DS_TRY(order_count_below(run->comm, run->backend, tail_m2, rows * dim, 0.0f, &below_zero));
  DS_TRY(order_count_below(run->comm, run->backend, tail_m2, rows * dim, nextafterf(0.0f, 1.0f), &up_to_zero));
  if (up_to_zero - below_zero < dim) return DS_OK;
  uint8_t *mine = malloc((size_t)max64(rows, 1));
  int status = comm_agree(run->comm, mine ? local_stuck_flags(run, tail_m2, rows, mine)
                                          : DS_FAIL_ALLOC("stuck chains", (size_t)max64(rows, 1)));
  if (status != DS_OK) {
    free(mine);
    return status;
  }
  restart_plan_t plan;
  status = restart_plan_make(run, mine, 0, &plan);
  free(mine);
  const int restart = status == DS_OK && plan.n_stuck > 0 && plan.n_healthy > 0;
  if (restart) status = restart_from_donors(run, chains, adapt, &plan);
  if (restart && status == DS_OK) report_restarted(run, &plan);
  restart_plan_free(&plan);
  return status;
}

/* ---- Chains in minor modes ------------------------------------------------------------ */

/* During warmup each chain's log density is followed: its running mean and variance since the
 * last check (lp_mean, lp_m2). Every MINOR_MODE_CHECK_EVERY iterations, at the end of each metric
 * window (before its metric is made) and at the end of warmup, the chains whose
 * mean lp sits far below the others' (lp_outliers.h: a minor mode) restart from healthy chains'
 * states, as stuck chains do. The rule reads every chain's two numbers on every rank, so every
 * rank count restarts the same chains. */
enum { MINOR_MODE_MIN_SAMPLES = 10 };

int minor_modes_followed(const run_ctx_t *run, const adapt_t *adapt) {
  return adapt && run->cfg->stuck == CONFIG_STUCK_RESTART && config_items(run->cfg) >= LP_OUTLIER_MIN_CHAINS;
}

static void report_minor_modes(run_ctx_t *run, const restart_plan_t *plan, int64_t iteration, const float *all,
                               const lp_outlier_rule_t *rule) {
  if (run->comm->rank != 0) return;
  char ids[200] = "";
  size_t used = 0;
  int named = 0;
  for (int64_t c = 0; c < config_items(run->cfg) && named < 8 && used < sizeof ids; ++c)
    if (plan->stuck[c])
      used += (size_t)snprintf(ids + used, sizeof ids - used, "%s%lld at %.4g", named++ ? ", " : "", (long long)c,
                               (double)all[2 * c]);
  if (run->progress.printed_inline) fprintf(stderr, "\n");
  char where[160];
  lp_outliers_describe(rule, where, sizeof where);
  fprintf(stderr, "dsampler: %lld chain%s sat far below the others' log density by warmup iteration %lld (mean lp of "
                  "chain %s%s; %s): restarted from healthy chains' states (--stuck keep leaves them)\n",
          (long long)plan->n_stuck, plan->n_stuck == 1 ? "" : "s", (long long)(iteration + 1), ids,
          plan->n_stuck > 8 ? ", ..." : "", where);
}

/* The check after warmup iteration `iteration`; the lp moments then start again. Collective. */
int restart_minor_modes(run_ctx_t *run, hmc_chains_t *chains, adapt_t *adapt, int64_t iteration) {
  backend_t *b = run->backend;
  const int64_t total = config_items(run->cfg), rows = chains->batch.n_chains;
  const double n = chains->totals.lp_samples;
  int status = DS_OK;
  /* First the count alone, from order statistics on the devices (nothing gathered): at 2^20 chains
   * the gather and host selection below cost 20 iterations' time. Only where it finds outliers,
   * or where a wide gap may hide a minor mode holding most chains, are every chain's values
   * gathered, to find which (the same rules, the median rule's count checked). */
  int64_t outliers = 0;
  int gap_possible = 0;
  if (n >= MINOR_MODE_MIN_SAMPLES)
    status = lp_outliers_count(run->comm, b, chains->lp_mean, chains->lp_m2, rows, total, n, &outliers, &gap_possible);
  if (status == DS_OK && (outliers > 0 || gap_possible)) {
    /* Every chain's (mean, sd) of lp, gathered to every rank, [total, 2]; this rank's moments
     * after them; the rule's values and scratch in doubles. */
    float *all = malloc((size_t)(2 * total + 2 * max64(rows, 1)) * sizeof *all);
    double *values = malloc((size_t)(4 * total) * sizeof *values);
    uint8_t *flags = malloc((size_t)total);
    status = all && values && flags ? DS_OK : DS_FAIL_ALLOC("the chains' lp", (size_t)total * 41);
    float *host_mean = all ? all + 2 * total : NULL, *host_m2 = host_mean ? host_mean + max64(rows, 1) : NULL;
    if (status == DS_OK) status = b->download(b, host_mean, chains->lp_mean, (size_t)rows * sizeof(float));
    if (status == DS_OK) status = b->download(b, host_m2, chains->lp_m2, (size_t)rows * sizeof(float));
    for (int64_t r = 0; status == DS_OK && r < rows; ++r) {
      all[2 * (run->item_begin + r)] = host_mean[r];
      all[2 * (run->item_begin + r) + 1] = sqrtf(fmaxf(host_m2[r], 0.0f) / (float)(n - 1.0));
    }
    status = comm_agree(run->comm, status);
    if (status == DS_OK) status = comm_agree(run->comm, comm_allgather_rows(run->comm, all, total, 2, 0));
    lp_outlier_rule_t rule;
    uint64_t flagged = 0;
    if (status == DS_OK) {
      for (int64_t c = 0; c < total; ++c) {
        values[c] = (double)all[2 * c];
        values[total + c] = (double)all[2 * c + 1];
      }
      /* The same values on every rank: the same flags. */
      flagged = (uint64_t)lp_outliers(values, values + total, total, flags, &rule, values + 2 * total);
      if (rule.below_median != outliers || (rule.top > 0 && !gap_possible))
        status = ds_fail(DS_ERR_INTERNAL, "minor modes: %lld outliers counted on the devices, %lld on the host (a gap "
                         "%s)", (long long)outliers, (long long)rule.below_median,
                         gap_possible ? "possible" : "ruled out, but found");
    }
    if (status == DS_OK && flagged > 0) {
      restart_plan_t plan;
      status = restart_plan_make(run, flags + run->item_begin, (uint32_t)(1 + chains->totals.minor_checks), &plan);
      const int restart = status == DS_OK && plan.n_stuck > 0 && plan.n_healthy > 0;
      if (restart) status = restart_from_donors(run, chains, adapt, &plan);
      if (restart && status == DS_OK) report_minor_modes(run, &plan, iteration, all, &rule);
      restart_plan_free(&plan);
    }
    free(all);
    free(values);
    free(flags);
  }
  chains->totals.minor_checks += 1.0;
  chains->totals.lp_samples = 0.0;
  if (status == DS_OK) status = b->fill(b, chains->lp_mean, 0.0f, rows);
  if (status == DS_OK) status = b->fill(b, chains->lp_m2, 0.0f, rows);
  return comm_agree(run->comm, status);
}
