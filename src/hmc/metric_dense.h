/* metric_dense.h: the host's linear algebra for the dense metric (adapt.c), in double, the same
 * operations in the same order on every rank. */
#ifndef DSAMPLER_METRIC_DENSE_H
#define DSAMPLER_METRIC_DENSE_H

#include <stdint.h>

/* The lower Cholesky factor L of cov [dim, dim] (row-major, symmetric), cov = L L^T, into L
 * (zeros above the diagonal). Returns 0, or -1 when cov is not positive definite. */
int dense_cholesky(const double *cov, int64_t dim, double *L);

/* The inverse of a lower triangular L [dim, dim] (nonzero diagonal), also lower triangular, by
 * forward substitution column by column. */
void dense_lower_inverse(const double *L, int64_t dim, double *inverse);

/* The condition number of the correlation matrix of cov (largest over smallest eigenvalue, by
 * cyclic Jacobi rotations): how far a diagonal metric is from whitening cov. work: 2 dim^2
 * doubles. Infinity when a variance is not positive or an eigenvalue is not. */
double dense_correlation_condition(const double *cov, int64_t dim, double *work);

#endif
