#!/usr/bin/env bash
# Training throughput and peak memory of libperceiver against the PyTorch reference, in one run,
# on the same config, batch, output points and threads, next to the machine's measured FMA peak.
#   bench/run_model.sh [--config small] [--batch_size 4] [--steps 5] [--threads 2] [--bin build/bin]
# Prints both result lines, the ratios (ours / PyTorch; > 1 is better for speed, < 1 for memory),
# the FMA peak (bench_fma_peak, same threads) and each side's step GFLOP/s as a share of it.
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
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "run_model.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
for tool in perceiver-bench bench_fma_peak; do
  [[ -x "$bin/$tool" ]] || { echo "run_model.sh: $bin/$tool not built (make build)" >&2; exit 2; }
done

peak=$("$bin/bench_fma_peak" --threads "$threads" | tee >(cat >&2) | sed -n 's/.*fma_peak_gflops=\([0-9.]*\).*/\1/p')
ours_log=$("$bin/perceiver-bench" --config "$config" --batch_size "$batch" --steps "$steps" --threads "$threads" | tee >(cat >&2))
ours=$(tail -1 <<< "$ours_log")
# PyTorch calls the same OpenBLAS: give it the kernel set perceiver-bench chose from the CPU's
# features (threads::use_fastest_cpu_kernels), unless the user set one. OpenBLAS 0.3.21 does not
# accept OPENBLAS_CORETYPE=Cooperlake or SapphireRapids; their SGEMM kernels are SkylakeX's.
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  core=$(sed -n 's/^OpenBLAS kernels \([A-Za-z0-9]*\).*/\1/p' <<< "$ours_log")
  case "$core" in
    Cooperlake|SapphireRapids) core=SkylakeX ;;
  esac
  if [[ -n "$core" ]]; then export OPENBLAS_CORETYPE="$core"; fi
fi
gflops=$(sed -n 's/.*gflops=\([0-9.]*\).*/\1/p' <<< "$ours")
eps=$(sed -n 's/.*examples_per_s=\([0-9.]*\).*/\1/p' <<< "$ours")
# Work per step, so PyTorch's GFLOP/s counts exactly the same FLOPs.
flops_per_step=$(awk -v g="$gflops" -v e="$eps" -v b="$batch" 'BEGIN { printf "%.6g", g * 1e9 * b / e }')
theirs=$(OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS="$threads" /usr/bin/python3 "$here/torch_model.py" \
  --config "$config" --batch_size "$batch" --steps "$steps" --threads "$threads" --flops_per_step "$flops_per_step" \
  | tee >(cat >&2) | tail -1)
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }
echo
printf '%-14s %14s %14s %10s\n' "" "libperceiver" "PyTorch" "ratio"
for f in examples_per_s gflops peak_rss_mb; do
  a=$(field $f "$ours") b=$(field $f "$theirs")
  printf '%-14s %14s %14s %10s\n' "$f" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2f", a / b }')"
done
printf '%-14s %14s %14s\n' "% FMA peak" \
  "$(awk -v g="$gflops" -v p="$peak" 'BEGIN { printf "%.1f%%", 100 * g / p }')" \
  "$(awk -v g="$(field gflops "$theirs")" -v p="$peak" 'BEGIN { printf "%.1f%%", 100 * g / p }')"
echo "config=$config batch=$batch steps=$steps threads=$threads fma_peak_gflops=$peak"
