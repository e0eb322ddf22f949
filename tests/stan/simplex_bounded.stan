// Transforms: a simplex (Dirichlet-multinomial, posterior Dirichlet(alpha + counts)), a
// parameter bounded on both sides (beta-binomial, posterior Beta(a + k, b + n - k)) and a
// uniform on (-1, 2) with no data; a matrix-valued generated quantity for the output's layout,
// rejected (a domain error: NaN in that draw, as Stan writes it) where p > 0.5 (3% of draws).
data {
  int<lower=1> K;
  vector<lower=0>[K] alpha;
  array[K] int<lower=0> counts;
  int<lower=0> n;
  int<lower=0, upper=n> k;
  real<lower=0> a;
  real<lower=0> b;
}
parameters {
  simplex[K] theta;
  real<lower=0, upper=1> p;
  real<lower=-1, upper=2> u;
}
model {
  theta ~ dirichlet(alpha);
  counts ~ multinomial(theta);
  p ~ beta(a, b);
  k ~ binomial(n, p);
}
generated quantities {
  matrix[2, K] table;
  for (j in 1:K) {
    table[1, j] = theta[j];
    table[2, j] = 10 * j + p;
  }
  if (p > 0.5) reject("p = ", p, " is above 1/2");
}
