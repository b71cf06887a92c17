#!/usr/bin/env bash
# SGEMM rates of OpenBLAS's kernel sets on this CPU, to check the set that
# threads::use_fastest_cpu_kernels chooses from the CPU's features (libperceiver/src/backend/cpu/README.md).
#
#   bench/run_blas_cores.sh [--threads N] [--bin PATH] [--cores "SkylakeX Haswell ..."] [--rounds R]
#
# Runs bench_ops' SGEMM rows (the 2048³ ceilings, the latent projection 784×512×512 and the
# encoder K/V projection) once with the set our selection ends up with ("chosen"), then once per
# named set through OPENBLAS_CORETYPE; R rounds alternate the sets and the best round counts.
# Prints one row per set: the set OpenBLAS reports, then GFLOP/s per op, by wall-clock time and
# by CPU time (the second holds up on a shared machine at 1 thread). Builds nothing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
threads=1 bin="$here/../build/bin/bench_ops" cores="" rounds=2
while [[ $# -gt 0 ]]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --cores) cores=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run_blas_cores.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$bin" ]] || { echo "run_blas_cores.sh: no bench_ops at '$bin'" >&2; exit 2; }
if [[ -z "$cores" ]]; then
  if grep -qw avx512bw /proc/cpuinfo; then cores="SkylakeX Haswell Zen"
  elif grep -qw avx2 /proc/cpuinfo; then cores="Haswell Zen Sandybridge"
  else cores="Sandybridge Nehalem"; fi
fi
out=$(mktemp -d /tmp/perceiver-blas-cores.XXXXXX)
filter='^(ceiling_sgemm|ceiling_sgemm_blas|gemm_latent_proj|gemm_kv_proj)/'
for round in $(seq 1 "$rounds"); do
  for core in chosen $cores; do
    if [[ $core == chosen ]]; then
      env -u OPENBLAS_CORETYPE "$bin" --threads "$threads" --benchmark_filter="$filter" \
        --benchmark_out="$out/$core.$round.json" --benchmark_out_format=json > /dev/null 2>&1
    else
      OPENBLAS_CORETYPE=$core "$bin" --threads "$threads" --benchmark_filter="$filter" \
        --benchmark_out="$out/$core.$round.json" --benchmark_out_format=json > /dev/null 2>&1
    fi
  done
done
/usr/bin/python3 - "$out" "$threads" chosen $cores <<'EOF'
import glob, json, sys
out, threads, sets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ops = ["ceiling_sgemm", "ceiling_sgemm_blas", "gemm_latent_proj", "gemm_kv_proj"]
# Wall-clock rates, and rates per second of CPU time over the threads: on a shared machine the
# second ignores the time other processes held the cores (exact at 1 thread; at N threads it also
# counts OpenMP's spin-waiting as work).
for clock in ("wall", "cpu"):
    print(f"threads {threads}; GFLOP/s by {clock} time, best of the rounds\n")
    print("| set | OpenBLAS runs | " + " | ".join(ops) + " |")
    print("|---|---|" + "---:|" * len(ops))
    for s in sets:
        best, ran = {}, "?"
        for path in sorted(glob.glob(f"{out}/{s}.*.json")):
            data = json.load(open(path))
            ran = data["context"].get("openblas_core", "?")
            for b in data["benchmarks"]:
                op = b["run_name"].split("/")[0]
                rate = b.get("GFLOP", 0.0)
                if clock == "cpu":
                    rate *= b["real_time"] * threads / b["cpu_time"]
                best[op] = max(best.get(op, 0.0), rate)
        print(f"| {s} | {ran} | " + " | ".join(f"{best.get(o, float('nan')):.1f}" for o in ops) + " |")
    print()
EOF
