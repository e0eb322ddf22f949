/* moments.c: pooling per-chain moments exactly (see moments.h). */
#include "moments.h"

#include <stdlib.h>

#include "exactsum.h"
#include "status.h"

/* out[k] = the exact column sums of values over all ranks, rounded once. */
static int pooled_column_sums(comm_ctx_t *comm, backend_t *b, const float *values, int64_t rows, int64_t dim,
                              const double *center, exact_sum_t *sums, double *out) {
  DS_TRY(comm_agree(comm, b->column_sums(b, values, rows, dim, center, sums)));
  DS_TRY(exact_sum_allreduce(comm, sums, dim));
  for (int64_t k = 0; k < dim; ++k) out[k] = exact_sum_value(&sums[k]);
  return DS_OK;
}

int moments_pool(comm_ctx_t *comm, backend_t *backend, const float *mean, const float *m2, int64_t rows,
                 int64_t dim, int64_t chains_total, double *grand_mean, double *within, double *between) {
  exact_sum_t *sums = malloc((size_t)dim * sizeof *sums);
  int status = comm_agree(comm, sums ? DS_OK : DS_FAIL_ALLOC("moment totals", (size_t)dim * sizeof *sums));
  if (status == DS_OK) status = pooled_column_sums(comm, backend, mean, rows, dim, NULL, sums, grand_mean);
  for (int64_t k = 0; status == DS_OK && k < dim; ++k) grand_mean[k] /= (double)chains_total;
  if (status == DS_OK) status = pooled_column_sums(comm, backend, mean, rows, dim, grand_mean, sums, between);
  if (status == DS_OK) status = pooled_column_sums(comm, backend, m2, rows, dim, NULL, sums, within);
  free(sums);
  return status;
}

int moments_column_mean(comm_ctx_t *comm, backend_t *backend, const float *values, int64_t rows, int64_t dim,
                        int64_t chains_total, double *mean) {
  exact_sum_t *sums = malloc((size_t)dim * sizeof *sums);
  int status = comm_agree(comm, sums ? DS_OK : DS_FAIL_ALLOC("column totals", (size_t)dim * sizeof *sums));
  if (status == DS_OK) status = pooled_column_sums(comm, backend, values, rows, dim, NULL, sums, mean);
  for (int64_t k = 0; status == DS_OK && k < dim; ++k) mean[k] /= (double)chains_total;
  free(sums);
  return status;
}

int moments_column_variance(comm_ctx_t *comm, backend_t *backend, const float *values, int64_t rows, int64_t dim,
                            int64_t chains_total, double *variance) {
  exact_sum_t *sums = malloc((size_t)dim * sizeof *sums);
  double *mean = malloc((size_t)dim * sizeof *mean);
  int status = comm_agree(comm, sums && mean ? DS_OK : DS_FAIL_ALLOC("column totals", (size_t)dim * sizeof *sums));
  if (status == DS_OK) status = moments_column_mean(comm, backend, values, rows, dim, chains_total, mean);
  if (status == DS_OK) status = pooled_column_sums(comm, backend, values, rows, dim, mean, sums, variance);
  for (int64_t k = 0; status == DS_OK && k < dim; ++k) variance[k] /= (double)chains_total;
  free(sums);
  free(mean);
  return status;
}
