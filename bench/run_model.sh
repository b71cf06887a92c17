#!/usr/bin/env bash
# Training throughput and peak memory of libperceiver against the PyTorch reference, in one run,
# on the same config, batch, output points and threads, next to the machine's measured FMA peak.
#   bench/run_model.sh [--config small] [--batch_size 4] [--steps 5] [--threads 2] [--bin build/bin]
#                      [--precision fp32|bf16] [--python /usr/bin/python3]... [--rounds 1]
# --precision bf16: ours with bf16 products (and ours in fp32 for the bf16/fp32 ratio, once more
# in one process with the two taking turns step by step), PyTorch under its CPU autocast.
# --python may be given more than once (Debian's torch, a current one from PyPI in a virtual
# environment); each runs eager, and torch.compile where it has it.
# --rounds N runs every row N times, the rows in turn each round, and keeps each row's fastest
# run: on a shared VM, whose speed drifts by tens of percent within minutes, the rows' best runs
# compare like with like where single runs may not. The table then gives each row's range too.
# Prints every result line, the ratios (ours / PyTorch; > 1 is better for speed, < 1 for
# memory), the FMA peak and our float32 SGEMM ceiling (bench_fma_peak, same threads, the larger
# of a reading before and one after our runs) and each step's GFLOP/s as a share of both; and,
# where the CPU has them, its bf16 peaks (AVX512-BF16's dot product, AMX's tiles) against the FMA
# peak and our bf16 products' ceiling against the SGEMM one.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
config=small batch=4 steps=5 threads=$(nproc) bin="$here/../build/bin" precision=fp32 pythons=() rounds=1
while [[ $# -gt 0 ]]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --batch_size) batch=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --precision) precision=$2; shift 2 ;;
    --python) pythons+=("$2"); shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "run_model.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ $precision == fp32 || $precision == bf16 ]] || { echo "run_model.sh: --precision fp32|bf16" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "run_model.sh: --rounds '$rounds': expected a whole number >= 1" >&2; exit 2; }
[[ ${#pythons[@]} -gt 0 ]] || pythons=(/usr/bin/python3)
for tool in perceiver-bench bench_fma_peak; do
  [[ -x "$bin/$tool" ]] || { echo "run_model.sh: $bin/$tool not built (make build)" >&2; exit 2; }
done
field() { sed -n "s/.*[[:space:]]$1=\([0-9.]*\).*/\1/p" <<< " $2"; }  # key=value; gflops is not run_gflops

peaks() { "$bin/bench_fma_peak" --threads "$threads" | tee >(cat >&2); }
peak_before=$(peaks)
bench() { "$bin/perceiver-bench" --config "$config" --batch_size "$batch" --steps "$steps" --threads "$threads" "$@"; }
# Row i's result: its fastest run so far (results[i]) and its slowest run's examples/s.
results=() slowest=()
keep() {
  local i=$1 line=$2 e
  e=$(field examples_per_s "$line")
  if [[ -z ${results[$i]:-} ]] || awk -v a="$e" -v b="$(field examples_per_s "${results[$i]}")" 'BEGIN { exit !(a > b) }'; then
    results[$i]=$line
  fi
  slowest[$i]=$(awk -v a="$e" -v b="${slowest[$i]:-$e}" 'BEGIN { print (a < b ? a : b) }')
}
# The PyTorch rows: each install's version, eager and (where it has it) torch.compile.
torch_py=() torch_mode=() torch_name=()
for py in "${pythons[@]}"; do
  version=$("$py" -c 'import torch; print(torch.__version__)')
  modes=(eager)
  if "$py" -c 'import sys, torch; sys.exit(0 if hasattr(torch, "compile") else 1)'; then modes+=(compile); fi
  for mode in "${modes[@]}"; do torch_py+=("$py") torch_mode+=("$mode") torch_name+=("torch $version $mode"); done
done
names=("libperceiver $precision")
[[ $precision == bf16 ]] && names+=("libperceiver fp32")
first_torch=${#names[@]}
names+=("${torch_name[@]}")
torch_row() {  # torch_row(j): one run of PyTorch row j; prints its result line
  local extra=()
  [[ ${torch_mode[$1]} == compile ]] && extra=(--compile)
  OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS="$threads" "${torch_py[$1]}" "$here/torch_model.py" --config "$config" \
    --batch_size "$batch" --steps "$steps" --threads "$threads" --flops_per_step "$flops_per_step" \
    --precision "$precision" "${extra[@]}" | tee >(cat >&2) | tail -1
}
for ((round = 1; round <= rounds; ++round)); do
  [[ $rounds -gt 1 ]] && echo "== round $round of $rounds" >&2
  ours_log=$(bench --precision "$precision" | tee >(cat >&2))
  ours_line=$(tail -1 <<< "$ours_log")
  keep 0 "$ours_line"
  [[ $precision == bf16 ]] && keep 1 "$(bench --precision fp32 | tee >(cat >&2) | tail -1)"
  if [[ $round == 1 ]]; then
    # PyTorch calls the same OpenBLAS: give it the kernel set perceiver-bench chose from the CPU's
    # features (threads::use_fastest_cpu_kernels), unless the user set one. OpenBLAS 0.3.21 does not
    # accept OPENBLAS_CORETYPE=Cooperlake or SapphireRapids; their SGEMM kernels are SkylakeX's.
    if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
      # perceiver-bench's "device: cpu: ...; OpenBLAS kernels SkylakeX, chosen from ..." line
      core=$(sed -n 's/.*OpenBLAS kernels \([A-Za-z0-9]*\).*/\1/p' <<< "$ours_log" | head -1)
      case "$core" in
        Cooperlake|SapphireRapids) core=SkylakeX ;;
      esac
      if [[ -n "$core" ]]; then export OPENBLAS_CORETYPE="$core"; fi
    fi
    # Work per step, so PyTorch's GFLOP/s counts exactly the same FLOPs.
    flops_per_step=$(awk -v g="$(field gflops "$ours_line")" -v e="$(field examples_per_s "$ours_line")" -v b="$batch" \
      'BEGIN { printf "%.6g", g * 1e9 * b / e }')
  fi
  for j in "${!torch_py[@]}"; do
    line=$(torch_row "$j") || { echo "${torch_name[$j]} failed" >&2; continue; }
    keep $((first_torch + j)) "$line"
  done
done
ours=${results[0]}
# bf16 against fp32 once more in one process, the two nets taking turns step by step
# (perceiver-bench --against): the rows above come from separate runs minutes apart, whose ratio a
# drifting VM skews; this one it does not. At least 6 steps each.
interleaved="" interleaved_steps=$((steps > 6 ? steps : 6))
if [[ $precision == bf16 ]]; then
  echo "== bf16 and fp32 step by step in one process" >&2
  interleaved=$("$bin/perceiver-bench" --config "$config" --batch_size "$batch" --steps "$interleaved_steps" \
    --threads "$threads" --precision bf16 --against fp32 | tee >(cat >&2) | tail -1)
fi
# The peaks again after our runs, and the larger of each: on a shared VM a reading taken while a
# neighbour loads the host comes out low (seen: FMA peak 195 and 329 GFLOP/s minutes apart), and a
# low peak would flatter every share of it.
peak_after=$(peaks)
larger() { awk -v a="$(field "$1" "$peak_before")" -v b="$(field "$1" "$peak_after")" \
  'BEGIN { if (a == "" && b == "") exit; printf "%s", (a + 0 >= b + 0 ? a : b) }'; }
peak_line=""
for key in fma_peak_gflops sgemm_gflops bf16_gemm_gflops bf16_dot_peak_gflops amx_peak_gflops; do
  value=$(larger "$key")
  if [[ -n "$value" ]]; then peak_line+=" $key=$value"; fi
done
peak=$(field fma_peak_gflops "$peak_line") sgemm=$(field sgemm_gflops "$peak_line")

echo
share() {  # the FLOPs a result line ran, as a share of $2 GFLOP/s
  awk -v g="$(field run_gflops "$1")" -v m="$(field gflops "$1")" -v p="$2" \
    'BEGIN { if (g == "") g = m; printf "%.1f%%", 100 * g / p }'
}
# One table row; the runs' range column only with --rounds above 1.
row() {
  local fmt='%-30s %14s %12s %12s %12s %10s %10s'
  if [[ $rounds -gt 1 ]]; then printf "$fmt %16s\n" "$@"; else printf "$fmt\n" "${@:1:7}"; fi
}
row "" "examples/s" "GFLOP/s" "% FMA peak" "% SGEMM" "RSS MB" "ours/this" "runs' range"
for i in "${!names[@]}"; do
  r=${results[$i]:-}
  [[ -n $r ]] || continue  # a PyTorch row whose every run failed
  row "${names[$i]}" "$(field examples_per_s "$r")" "$(field gflops "$r")" "$(share "$r" "$peak")" "$(share "$r" "$sgemm")" \
    "$(field peak_rss_mb "$r")" \
    "$(awk -v a="$(field examples_per_s "$ours")" -v b="$(field examples_per_s "$r")" 'BEGIN { printf "%.2fx", a / b }')" \
    "$(awk -v a="${slowest[$i]}" -v b="$(field examples_per_s "$r")" \
      'function f(x) { return x >= 1000 ? sprintf("%.0f", x) : sprintf("%.4g", x) } BEGIN { print f(a) "-" f(b) }')"
done
if [[ $rounds -gt 1 ]]; then
  echo "(each row: the fastest of its $rounds runs, the rows taken in turn each round; runs' range: their examples/s)"
fi
echo "(ours/this: libperceiver $precision examples/s over that row's; GFLOP/s: the model's FLOPs per second,"
echo " the same count for every row; % FMA peak: the FLOPs each row ran, ours fewer where it folds the K/V projections;"
echo " % SGEMM: the same FLOPs against our float32 GEMM on a 2048^3 square, where a step of such products alone would run)"
echo "config=$config batch=$batch steps=$steps threads=$threads precision=$precision fma_peak_gflops=$peak" \
  "sgemm_gflops=$sgemm ($(awk -v s="$sgemm" -v p="$peak" 'BEGIN { printf "%.0f%%", 100 * s / p }') of the FMA peak)"
echo "peaks: the larger of two readings, before our runs (FMA $(field fma_peak_gflops "$peak_before"), SGEMM" \
  "$(field sgemm_gflops "$peak_before")) and after them (FMA $(field fma_peak_gflops "$peak_after"), SGEMM" \
  "$(field sgemm_gflops "$peak_after"))"
if [[ -n $interleaved ]]; then
  echo "bf16 / fp32 step by step in one process: $(field against_ratio "$interleaved")x" \
    "(bf16 $(field examples_per_s "$interleaved"), fp32 $(field against_examples_per_s "$interleaved") examples/s," \
    "$interleaved_steps steps each, taking turns)"
fi
# The bf16 peaks where the CPU has them (bench_fma_peak): what --precision bf16 could gain here.
dot=$(field bf16_dot_peak_gflops "$peak_line") amx=$(field amx_peak_gflops "$peak_line")
if [[ -n "$dot$amx" ]]; then
  ratio() { awk -v x="$1" -v p="$peak" 'BEGIN { printf "%.2fx", x / p }'; }
  line="bf16 peaks on this CPU:"
  [[ -n "$dot" ]] && line+=" AVX512-BF16 dot product $dot GFLOP/s ($(ratio "$dot") the FMA peak)"
  [[ -n "$dot" && -n "$amx" ]] && line+=","
  [[ -n "$amx" ]] && line+=" AMX tiles $amx GFLOP/s ($(ratio "$amx") the FMA peak)"
  echo "$line"
fi
# Our bf16 products' ceiling where they run here: the most a bf16 step of products alone could
# gain over fp32 is its ratio to the SGEMM ceiling.
bf16_gemm=$(field bf16_gemm_gflops "$peak_line")
if [[ -n "$bf16_gemm" ]]; then
  line="bf16 GEMM ceiling: $bf16_gemm GFLOP/s, our bf16 products on a 2048^3 square"
  line+=" ($(awk -v x="$bf16_gemm" -v s="$sgemm" 'BEGIN { printf "%.2fx", x / s }') the SGEMM ceiling)"
  [[ $precision == bf16 ]] && line+="; libperceiver bf16 runs its FLOPs at $(share "$ours" "$bf16_gemm") of it"
  echo "$line"
fi
if [[ ${PERCEIVER_CPU_BF16_GEMM:-} == emulated ]]; then
  echo "note: PERCEIVER_CPU_BF16_GEMM=emulated: the bf16 products are emulated in float32, so the bf16 figures" \
    "above say nothing about this CPU's bf16 speed"
fi
