#!/usr/bin/env bash
# End-to-end HMC benchmark: the wall clock of `dsampler hmc` itself, per iteration, from the
# difference of two runs of different length (start-up cancels), median of repeats; and a run
# that writes every draw, beside the disk's raw write speed measured in the same call.
# Usage: bench_e2e.sh DSAMPLER [WORKDIR] [REPEATS]   (on a GPU machine: --backend cuda)
set -uo pipefail
bin=${1:?usage: bench_e2e.sh DSAMPLER [WORKDIR] [REPEATS]}
work=${2:-/tmp/dsampler-bench}
repeats=${3:-3}
backend=${DSAMPLER_BENCH_BACKEND:-cuda}
mkdir -p "$work"

now() { date +%s.%N; }
calc() { awk "BEGIN { printf \"%.9g\", $1 }"; }

# wall SECONDS of one run
# (the page cache is written back first, so no run pays for the one before; with
# DURABLE=1 the time includes writing the output back to disk, as dd's fdatasync does)
wall() {
  local start end
  sync
  start=$(now)
  "$bin" hmc --backend "$backend" --quiet --out "$work/bench.h5" "$@" >/dev/null 2>"$work/err.txt" || {
    echo "run failed: $* : $(tail -3 "$work/err.txt")" >&2; echo nan; return; }
  [ "${DURABLE:-0}" = 1 ] && sync
  end=$(now)
  calc "$end - $start"
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# per_iteration LABEL N_SHORT N_LONG WHICH(warmup|draws) ARGS...: ms per iteration
per_iteration() {
  local label=$1 short=$2 long=$3 which=$4; shift 4
  local samples=()
  for r in $(seq "$repeats"); do
    local a b
    a=$(wall --"$which" "$short" "$@")
    b=$(wall --"$which" "$long" "$@")
    samples+=("$(calc "($b - $a) * 1000 / ($long - $short)")")
  done
  printf '%-58s %8.3f ms/iteration  (samples: %s)\n' "$label" "$(median "${samples[@]}")" \
    "$(printf '%.3f ' "${samples[@]}")"
}

echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  host: $(hostname)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
C20=1048576
if [ -z "${DSAMPLER_BENCH_ONLY_FULL:-}" ]; then
# Fixed L = 10 (the kernel's benchmark) unless the row says ChEES (--steps auto, the default).
per_iteration "2^20 chains d=64 gaussian warmup, pooled" 200 2200 warmup --dim 64 --chains $C20 --draws 0 --adapt pooled --steps 10
per_iteration "2^20 chains d=64 gaussian warmup, per-chain" 200 2200 warmup --dim 64 --chains $C20 --draws 0 --adapt per-chain --steps 10
per_iteration "2^20 chains d=64 gaussian warmup, pooled, ChEES L (defaults)" 200 2200 warmup --dim 64 --chains $C20 --draws 0
per_iteration "2^20 chains d=64 gaussian sampling, --output-chains 1024 --thin 10" 200 3200 draws --dim 64 --chains $C20 \
  --warmup 0 --adapt none --output-chains 1024 --thin 10 --steps 10
per_iteration "65536 chains d=64 gaussian warmup, pooled" 200 20200 warmup --dim 64 --chains 65536 --draws 0 --steps 10
if [ -z "${DSAMPLER_BENCH_SKIP_GENERIC:-}" ]; then
per_iteration "65536 chains d=64 banana warmup, pooled (generic path)" 200 3200 warmup --target banana --dim 64 \
  --chains 65536 --draws 0 --steps 10
per_iteration "2^20 chains d=64 banana warmup, pooled (generic path)" 100 400 warmup --target banana --dim 64 \
  --chains $C20 --draws 0 --steps 10
per_iteration "2^20 chains d=64 banana sampling, --output-chains 1024 --thin 10" 100 400 draws --target banana \
  --dim 64 --chains $C20 --warmup 0 --adapt none --output-chains 1024 --thin 10 --steps 10
fi
fi  # DSAMPLER_BENCH_ONLY_FULL: only the full-output rows below

# Full output: every draw of 65536 chains, against the disk's raw speed (dd, fdatasync) measured
# just before each run, and the same run writing one chain's draws (start-up and sampling
# without the output).
draws=${DSAMPLER_BENCH_FULL_DRAWS:-600}
bytes=$(( draws * 65536 * (64 * 4 + 21) ))
# dd_rate: the disk's raw write speed now (the same bytes, 16 MiB blocks, fdatasync).
measure_dd() {
  sync
  local start end
  start=$(now)
  dd if=/dev/zero of="$work/dd.bin" bs=16M count=$(( bytes / 16777216 + 1 )) conv=fdatasync status=none
  end=$(now)
  rm -f "$work/dd.bin"
  sync
  dd_rate=$(calc "($bytes) / ($end - $start)")
}
full_args=(--dim 64 --chains 65536 --warmup 0 --adapt none --draws "$draws" --steps 10)
base=$(wall "${full_args[@]}" --output-chains 1)
printf '%-58s %8.2f s wall (start-up and sampling, no output)\n' "65536 chains d=64, $draws draws, 1 chain written" "$base"
# The disk's speed moves by a third between minutes: each run is paired with a dd just before it.
for variant in ${DSAMPLER_BENCH_IO_VARIANTS:-default}; do
  measure_dd
  case $variant in
    default) env_args=() ;;
    *) env_args=("$variant") ;;
  esac
  full=$(env "${env_args[@]}" DURABLE=1 bash -c "$(declare -f now calc wall); bin='$bin' work='$work' backend='$backend'; wall ${full_args[*]}")
  printf '%-58s %8.2f s wall for %.3g GB; disk (dd) %.1f MB/s -> %.2f s; ratio %.2f  [%s]\n' \
    "65536 chains d=64 full output, $draws draws" "$full" "$(calc "$bytes / 1e9")" \
    "$(calc "$dd_rate / 1e6")" "$(calc "$bytes / $dd_rate")" "$(calc "$full * $dd_rate / $bytes")" "$variant"
done
rm -f "$work/bench.h5"
