#!/usr/bin/env bash
# perceiver-bench --device cuda against HuggingFace's PerceiverForMultimodalAutoencoding in
# PyTorch (bench/hf_gpu_model.py), one after the other on the same GPU, at the kinetics700 config
# with 512 + 512 + 1 output points: batch 1 and 8, fp32 (TF32 off on both sides) and bf16
# (PyTorch autocast); then the largest kinetics700 batch whose training step fits in 24 GB
# (the A10G of G5 nodes) for each side and precision.
#   bench/run_gpu.sh [--bin build/bin] [--python python3] [--steps 5] [--batches "1 8"] [--budget_gb 24]
#                    [--no-compile] [--no-largest]
# HF runs eager and under torch.compile (--no-compile: eager only); the ratios are against the
# faster of the two. --no-largest skips the largest-batch search.
# Targets (issue 12): ours/HF examples/s >= 2 in fp32 and >= 1.5 in bf16; peak memory <= 0.5x HF's.
#
# Peak memory on both sides is what the framework allocated for tensors (our backend's
# MemoryStats, torch.cuda.max_memory_allocated): neither counts the CUDA context (~0.5 GB, the
# same for both). The largest batch for the budget: peak(B) is measured at two batch sizes, the
# straight line through them gives a candidate (budget − 1 GiB for the context and libraries),
# and the candidate is run to confirm it stays under, one smaller at a time if not.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../build/bin" python=python3 steps=5 batches="1 8" budget_gb=24 compile=1 largest=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --python) python=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --budget_gb) budget_gb=$2; shift 2 ;;
    --no-compile) compile=0; shift ;;
    --no-largest) largest=0; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "run_gpu.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$bin/perceiver-bench" ]] || { echo "run_gpu.sh: $bin/perceiver-bench not built (make build with nvcc)" >&2; exit 2; }
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p" <<< "$2"; }
ours() {  # precision batch [steps] -> the result line
  "$bin/perceiver-bench" --config kinetics700 --device cuda --precision "$1" --batch_size "$2" --steps "${3:-$steps}" \
    | tee -a /dev/stderr | tail -1
}
theirs() {  # precision batch [steps [--compile]] -> the result line ("" if it failed, e.g. out of memory)
  "$python" "$here/hf_gpu_model.py" --config kinetics700 --precision "$1" --batch_size "$2" --steps "${3:-$steps}" \
    ${4:-} | tee -a /dev/stderr | tail -1 || true
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
faster() { awk -v a="$1" -v b="$2" 'BEGIN { print (b + 0 > a + 0) ? "compile" : "eager" }'; }

declare -A peak  # side:precision:batch -> MB
header=$(printf '%-5s %5s %10s %10s %10s %8s %9s %10s %10s %8s' prec batch "ours ex/s" "HF eager" "HF compile" ratio \
  "vs" "ours MB" "HF MB" ratio)
table=""
for precision in fp32 bf16; do
  for b in $batches; do
    o=$(ours "$precision" "$b") t=$(theirs "$precision" "$b") tc=""
    [[ $compile == 1 ]] && tc=$(theirs "$precision" "$b" "$steps" --compile)
    oe=$(field examples_per_s "$o") te=$(field examples_per_s "$t") tce=$(field examples_per_s "$tc")
    om=$(field peak_device_mb "$o") tm=$(field peak_device_mb "$t") tcm=$(field peak_device_mb "$tc")
    best=$(faster "$te" "$tce")
    [[ $best == compile ]] && be=$tce bm=$tcm || be=$te bm=$tm
    peak[ours:$precision:$b]=$om peak[hf:$precision:$b]=$tm
    row=$(printf '%-5s %5s %10s %10s %10s %8s %9s %10s %10s %8s' "$precision" "$b" "$oe" "${te:--}" "${tce:--}" \
      "$(ratio "$oe" "$be")" "$best" "$om" "${bm:--}" "$(ratio "$om" "$bm")")
    table+=$row$'\n'
    echo "row: $row"  # each row as soon as it is measured
  done
done

# Largest batch within the budget: the line through the first and last measured batch, confirmed.
largest() {  # side precision -> batch
  local side=$1 precision=$2 b0 b1 m0 m1 cand line mb
  b0=$(awk '{print $1}' <<< "$batches") b1=$(awk '{print $NF}' <<< "$batches")
  m0=${peak[$side:$precision:$b0]} m1=${peak[$side:$precision:$b1]}
  cand=$(awk -v b0="$b0" -v b1="$b1" -v m0="$m0" -v m1="$m1" -v g="$budget_gb" \
    'BEGIN { s = (m1 - m0) / (b1 - b0); c = int((g * 1024 - 1024 - (m0 - s * b0)) / s); print (c < 1 ? 1 : c) }')
  while (( cand >= 1 )); do
    if [[ $side == ours ]]; then line=$(ours "$precision" "$cand" 1 2> /dev/null || true)
    else line=$(theirs "$precision" "$cand" 1 2> /dev/null || true); fi
    mb=$(field peak_device_mb "$line")
    if [[ -n "$mb" ]] && awk -v m="$mb" -v g="$budget_gb" 'BEGIN { exit !(m <= g * 1024 - 1024) }'; then
      echo "$cand ($mb MB)"; return
    fi
    cand=$((cand - 1))
  done
  echo "none"
}

echo
"$python" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
echo "$header"
printf '%s' "$table"
echo "(ratios against the faster HF mode; targets: ex/s ratio >= 2 fp32, >= 1.5 bf16; MB ratio <= 0.5)"
[[ $largest == 1 ]] || exit 0
for precision in fp32 bf16; do
  echo "largest kinetics700 batch in ${budget_gb} GB, $precision: ours $(largest ours "$precision"), HF $(largest hf "$precision")"
done
