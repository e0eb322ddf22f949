// Bayesian logistic regression (N rows, D features): a benchmark model of realistic size.
data {
  int<lower=1> N;
  int<lower=1> D;
  matrix[N, D] X;
  array[N] int<lower=0, upper=1> y;
}
parameters {
  real alpha;
  vector[D] beta;
}
model {
  alpha ~ normal(0, 2);
  beta ~ normal(0, 1);
  y ~ bernoulli_logit(alpha + X * beta);
}
