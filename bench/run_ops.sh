#!/usr/bin/env bash
# Runs bench_ops (ours) and torch_ops.py (PyTorch) with the same thread count, one after the
# other, and prints one Markdown table (bench/ops_table.py). Builds nothing.
#
#   bench/run_ops.sh [--threads N] [--precision fp32|bf16] [--bin PATH] [--isa LEVEL] [--repetitions R]
#                    [--min-time S] [--filter REGEX] [--out DIR] [--wait-idle SECONDS] [--clock wall|cpu]
#                    [--python PATH]
#
#   --threads N       compute threads for both sides (default: physical cores)
#   --precision bf16  the products only (GEMMs, attention), ours with bf16 operands and float32
#                     accumulation against PyTorch under bf16 autocast (default fp32: every op)
#   --bin PATH        the bench_ops binary (default: build/bin/bench_ops)
#   --isa LEVEL       our vector kernels' level: baseline, v3 or v4 (PERCEIVER_CPU_ISA;
#                     default: the best this CPU runs)
#   --repetitions R   R rounds, each running ours then PyTorch; best round per op (default 1)
#   --min-time S      seconds per run of an op (default 0.3; big ops run once)
#   --filter REGEX    only ops whose "id/shape" matches (both sides)
#   --out DIR         keep ours.R.json, torch.R.json and table.md there (default: a temp dir)
#   --wait-idle S     before each side, wait up to S seconds for the machine to go quiet
#   --clock cpu       compare CPU times instead of wall-clock times (needs --threads 1): on a
#                     busy machine this leaves out the time other processes held the core
#   --python PATH     the Python whose torch is the reference (default /usr/bin/python3, Debian's
#                     python3-torch; e.g. a venv with current torch from PyPI)
#
# PyTorch gets the OpenBLAS kernel set bench_ops ended up with (OPENBLAS_CORETYPE), unless you set
# one. The last lines say how much CPU other processes took during each side; above a few percent
# the numbers are low and noisy (a shared machine), so rerun.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
python=/usr/bin/python3  # Debian's, which has python3-torch (a pyenv python3 may not)

threads=$(lscpu -p=core 2>/dev/null | grep -v '^#' | sort -u | wc -l || true)
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || threads=$(nproc)
bin="$repo/build/bin/bench_ops"
repetitions=1
min_time=0.3
filter=""
out=""
wait_idle=0
clock=wall
precision=fp32

usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "run_ops.sh: $*" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads=${2:?--threads needs a value}; shift 2 ;;
    --bin) bin=${2:?--bin needs a path}; shift 2 ;;
    --isa) export PERCEIVER_CPU_ISA=${2:?--isa needs a level}; shift 2 ;;
    --repetitions) repetitions=${2:?--repetitions needs a value}; shift 2 ;;
    --min-time) min_time=${2:?--min-time needs a value}; shift 2 ;;
    --filter) filter=${2:?--filter needs a regex}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --wait-idle) wait_idle=${2:?--wait-idle needs seconds}; shift 2 ;;
    --clock) clock=${2:?--clock needs wall or cpu}; shift 2 ;;
    --precision) precision=${2:?--precision needs fp32 or bf16}; shift 2 ;;
    --python) python=${2:?--python needs a path}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "--threads: bad value '$threads'"
[[ "$repetitions" =~ ^[1-9][0-9]*$ ]] || die "--repetitions: bad value '$repetitions'"
[[ "$clock" == wall || ( "$clock" == cpu && "$threads" == 1 ) ]] || \
  die "--clock: 'wall', or 'cpu' with --threads 1 (a process's CPU time counts every thread's spinning)"
[[ "$precision" == fp32 || "$precision" == bf16 ]] || die "--precision: 'fp32' or 'bf16', not '$precision'"
[[ -x "$bin" ]] || die "no bench_ops at '$bin'; HINT: cmake --build build --target bench_ops, or pass --bin"
[[ -x "$python" ]] || die "$python not found; HINT: apt-get install python3-torch, or pass --python"

if [[ -z "$out" ]]; then
  out=$(mktemp -d /tmp/perceiver-bench-ops.XXXXXX)
fi
mkdir -p "$out"

# CPU jiffies from /proc/stat: "busy total".
cpu_jiffies() {
  local c
  read -r -a c < <(grep '^cpu ' /proc/stat)
  echo "$(( c[1] + c[2] + c[3] + c[6] + c[7] + c[8] )) $(( c[1] + c[2] + c[3] + c[4] + c[5] + c[6] + c[7] + c[8] ))"
}
# Busy share of all CPUs over one second (other tenants skew every number).
busy_percent() {
  local a b
  read -r -a a < <(cpu_jiffies)
  sleep 1
  read -r -a b < <(cpu_jiffies)
  local total=$(( b[1] - a[1] ))
  echo $(( total > 0 ? 100 * (b[0] - a[0]) / total : 0 ))
}
wait_for_quiet() {
  local busy waited=0
  busy=$(busy_percent)
  while (( busy > 10 && waited < wait_idle )); do
    sleep 4
    waited=$(( waited + 5 ))
    busy=$(busy_percent)
  done
  if (( busy > 10 )); then
    echo "run_ops.sh: warning: the machine is ${busy}% busy; numbers will be low and noisy" >&2
  fi
}
# run_measured LABEL CMD...: runs CMD and appends to $out/load.txt the share of the machine that
# other processes used meanwhile (all busy CPU time minus CMD's own user+system time).
run_measured() {
  local label=$1 a b
  shift
  read -r -a a < <(cpu_jiffies)
  /usr/bin/time -f "%U %S" -o "$out/cputime.txt" "$@"
  read -r -a b < <(cpu_jiffies)
  local hz
  hz=$(getconf CLK_TCK)
  awk -v busy=$(( b[0] - a[0] )) -v total=$(( b[1] - a[1] )) -v hz="$hz" -v label="$label" \
    '{ own = ($1 + $2) * hz; other = busy - own; if (other < 0) other = 0;
       printf "other processes used %.0f%% of the machine during %s\n", (total > 0 ? 100 * other / total : 0), label }' \
    "$out/cputime.txt" >> "$out/load.txt"
}

: > "$out/load.txt"
# Rounds alternate the two sides, so a burst of load from other processes tends to hit both, and
# the best of R rounds (per op, per side) is what the table shows.
ours_files=() torch_files=()
for round in $(seq 1 "$repetitions"); do
  wait_for_quiet
  echo "run_ops.sh: round $round/$repetitions: ours (threads $threads) -> $out/ours.$round.json" >&2
  run_measured "ours (round $round)" "$bin" --threads "$threads" --precision "$precision" \
    --benchmark_min_time="$min_time" \
    ${filter:+--benchmark_filter="$filter"} \
    --benchmark_out="$out/ours.$round.json" --benchmark_out_format=json >&2
  ours_files+=("$out/ours.$round.json")
  if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
    # bench_ops re-executes itself with the OpenBLAS kernels the CPU's features call for
    # (threads::use_fastest_cpu_kernels, as the apps do); give PyTorch, which calls the same
    # OpenBLAS, the same kernels so the table compares ops, not kernel sets. OpenBLAS 0.3.21
    # does not accept OPENBLAS_CORETYPE=Cooperlake or SapphireRapids; their SGEMM kernels are
    # SkylakeX's.
    core=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["context"].get("openblas_core", ""))' \
      "$out/ours.$round.json")
    case "$core" in
      Cooperlake|SapphireRapids) core=SkylakeX ;;
    esac
    if [[ -n "$core" && "$core" != "unknown" ]]; then export OPENBLAS_CORETYPE="$core"; fi
  fi
  wait_for_quiet
  echo "run_ops.sh: round $round/$repetitions: PyTorch (threads $threads) -> $out/torch.$round.json" >&2
  run_measured "PyTorch (round $round)" "$python" "$here/torch_ops.py" --threads "$threads" \
    --min-time "$min_time" --clock "$clock" --precision "$precision" ${filter:+--filter "$filter"} \
    > "$out/torch.$round.json"
  torch_files+=("$out/torch.$round.json")
done

{
  "$python" "$here/ops_table.py" --clock "$clock" --ours "${ours_files[@]}" --torch "${torch_files[@]}"
  cat "$out/load.txt"
} | tee "$out/table.md"
