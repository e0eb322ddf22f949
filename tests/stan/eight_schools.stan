// Eight schools (Rubin 1981; BDA3 section 5.5), non-centred, as tests/plugin/model_hier.c writes
// it by hand: the same unconstrained parameters [mu, log tau, eta], the same log density.
data {
  int<lower=0> J;
  vector[J] y;
  vector<lower=0>[J] sigma;
}
parameters {
  real mu;
  real<lower=0> tau;
  vector[J] eta;
}
transformed parameters {
  vector[J] theta = mu + tau * eta;
}
model {
  mu ~ normal(0, 5);
  tau ~ cauchy(0, 5);
  eta ~ std_normal();
  y ~ normal(theta, sigma);
}
generated quantities {
  array[J] real y_rep = normal_rng(theta, sigma);
}
