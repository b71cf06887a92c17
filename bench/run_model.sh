#!/usr/bin/env bash
# Training throughput and peak memory of libperceiver against the PyTorch reference, in one run,
# on the same config, batch, output points and threads.
#   bench/run_model.sh [--config small] [--batch_size 4] [--steps 5] [--threads 2] [--bin build/bin]
# Prints both result lines and the ratios (ours / PyTorch; > 1 is better for speed, < 1 for memory).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
config=small batch=4 steps=5 threads=$(nproc) bin="$here/../build/bin"
while [[ $# -gt 0 ]]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --batch_size) batch=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
    *) echo "run_model.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
# Both sides use the same OpenBLAS kernels (Debian's 0.3.21 misdetects some Xeons; see
# perceiver::threads::use_fastest_cpu_kernels).
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
[[ -x "$bin/perceiver-bench" ]] || { echo "run_model.sh: $bin/perceiver-bench not built (make build)" >&2; exit 2; }

ours=$("$bin/perceiver-bench" --config "$config" --batch_size "$batch" --steps "$steps" --threads "$threads" | tee /dev/stderr | tail -1)
gflops=$(sed -n 's/.*gflops=\([0-9.]*\).*/\1/p' <<< "$ours")
eps=$(sed -n 's/.*examples_per_s=\([0-9.]*\).*/\1/p' <<< "$ours")
# Work per step, so PyTorch's GFLOP/s counts exactly the same FLOPs.
flops_per_step=$(awk -v g="$gflops" -v e="$eps" -v b="$batch" 'BEGIN { printf "%.6g", g * 1e9 * b / e }')
theirs=$(OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 "$here/torch_model.py" \
  --config "$config" --batch_size "$batch" --steps "$steps" --threads "$threads" --flops_per_step "$flops_per_step" \
  | tee /dev/stderr | tail -1)
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }
echo
printf '%-14s %14s %14s %10s\n' "" "libperceiver" "PyTorch" "ratio"
for f in examples_per_s gflops peak_rss_mb; do
  a=$(field $f "$ours") b=$(field $f "$theirs")
  printf '%-14s %14s %14s %10s\n' "$f" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
done
echo "config=$config batch=$batch steps=$steps threads=$threads"
