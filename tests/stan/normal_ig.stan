// Conjugate normal with unknown mean and variance (normal-inverse-gamma prior): the posterior is
// known in closed form (tests/py/test_stan.py). lp_offset adds a constant to log p, to show that
// a log density far from 0 (-1e8, where float32 values lie 8 apart) samples as well as one near 0.
data {
  int<lower=1> N;
  vector[N] y;
  real m0;
  real<lower=0> k0;
  real<lower=0> a0;
  real<lower=0> b0;
  real lp_offset;
}
parameters {
  real mu;
  real<lower=0> sigma2;
}
model {
  sigma2 ~ inv_gamma(a0, b0);
  mu ~ normal(m0, sqrt(sigma2 / k0));
  y ~ normal(mu, sqrt(sigma2));
  target += lp_offset;
}
generated quantities {
  real sigma = sqrt(sigma2);
}
