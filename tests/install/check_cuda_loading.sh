#!/usr/bin/env bash
# The CUDA backend is loaded only for --device cuda: a CPU step of perceiver-bench loads none of
# the CUDA libraries (the dynamic loader's own record, LD_DEBUG=files) and libperceiver.so needs
# none of them (readelf -d); --device cuda loads libperceiver_cuda, which then either opens a GPU
# or stops with the one-line "no usable NVIDIA GPU" error, never a loader error.
#   check_cuda_loading.sh LIBPERCEIVER PERCEIVER_BENCH [--with-cuda]
# Prints what it found; exits 1 on any failure.
set -uo pipefail
lib=$1 bench=$2 with_cuda=${3:-}
cuda_libs='lib(cudart|cublas|cublasLt|nccl|cuda|perceiver_cuda)\.so'
status=0
fail() { echo "FAIL: $*"; status=1; }

if readelf -d "$lib" | grep -E "NEEDED.*$cuda_libs"; then fail "$lib needs a CUDA library (above)"; fi

log=$(mktemp); trap 'rm -f "$log"' EXIT
LD_DEBUG=files LD_DEBUG_OUTPUT=$log "$bench" --config tiny --batch_size 1 --steps 1 --warmup 0 --threads 1 > /dev/null ||
  fail "perceiver-bench --device cpu failed"
loaded=$(grep -ohE "file=[^ ]*$cuda_libs[^ ]*" "$log".* | sort -u)
rm -f "$log".*
if [[ -n $loaded ]]; then fail "a CPU run loaded: $loaded"; else echo "cpu run: no CUDA library loaded"; fi

if [[ $with_cuda == --with-cuda ]]; then
  out=$(LD_DEBUG=files LD_DEBUG_OUTPUT=$log "$bench" --config tiny --batch_size 1 --steps 1 --warmup 0 --threads 1 \
        --device cuda 2>&1); rc=$?
  grep -qhE "file=[^ ]*libperceiver_cuda\.so" "$log".* || fail "--device cuda did not load libperceiver_cuda"
  rm -f "$log".*
  if [[ $rc -ne 0 ]]; then
    grep -q "no usable NVIDIA GPU" <<< "$out" || fail "--device cuda without a GPU: unexpected error: $out"
    echo "cuda run: libperceiver_cuda loaded; no GPU here: $(tail -1 <<< "$out" | cut -c1-120)..."
  else
    echo "cuda run: libperceiver_cuda loaded and trained a step"
  fi
fi
exit $status
