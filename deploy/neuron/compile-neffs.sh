#!/usr/bin/env bash
# Compiles the modules perceiver-export wrote into NEFFs for `perceiver-train --device neuron`,
# into a cache directory shared by every node (FSx), keyed by module hash: NEFF_DIR/<hash>.neff
# is what a run with PERCEIVER_NEFF_DIR=NEFF_DIR loads. Run it where the Neuron SDK's compiler is
# installed (any x86_64 host with neuronx-cc: a trn1 node, or an init step with the Neuron SDK).
#
#   deploy/neuron/compile-neffs.sh EXPORT_DIR NEFF_DIR
#
# For each module of EXPORT_DIR/manifest.json:
#   1. EXPORT_DIR/<hash>.mlir (StableHLO) -> EXPORT_DIR/<hash>.hlo.pb (XLA HloModuleProto) with
#      deploy/neuron/stablehlo_to_hlo.py (jaxlib; $PERCEIVER_PYTHON, default python3);
#   2. neuronx-cc compile <hash>.hlo.pb --framework XLA --target $NEURON_TARGET --output ... with
#      $NEURONX_CC_FLAGS (default --auto-cast none: fp32 as the trainer; see README.md for bf16).
# A NEFF is cached together with <hash>.neff.key (target, compiler version, flags); it is
# compiled again only when that key changes. Compiles of one module by several nodes at once
# are serialised by flock(1) on <hash>.lock (mount FSx with the flock option); a NEFF appears by
# an atomic rename, so a reader never sees half of one. A failed compile caches nothing (the log
# stays as <hash>.neff.failed.log) and the script exits 1 after trying every module.
#
# Environment: NEURONX_CC (default neuronx-cc), NEURON_TARGET (default trn1), NEURONX_CC_FLAGS,
# PERCEIVER_PYTHON, PERCEIVER_TO_HLO (a command "CMD IN.mlir OUT.hlo.pb" replacing step 1).
set -u
usage() { echo "usage: $0 EXPORT_DIR NEFF_DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
export_dir=$1
neff_dir=$2
here=$(cd "$(dirname "$0")" && pwd)
cc=${NEURONX_CC:-neuronx-cc}
target=${NEURON_TARGET:-trn1}
flags=${NEURONX_CC_FLAGS:---auto-cast none}
python=${PERCEIVER_PYTHON:-python3}
to_hlo=${PERCEIVER_TO_HLO:-$python $here/stablehlo_to_hlo.py}

manifest=$export_dir/manifest.json
[ -f "$manifest" ] || { echo "compile-neffs: $manifest does not exist; HINT: perceiver-export --out $export_dir <the run's perceiver-train flags>" >&2; exit 2; }
command -v "$cc" > /dev/null || {
  echo "compile-neffs: '$cc' not found: the Neuron compiler (neuronx-cc, from the Neuron SDK's pip repository https://pip.repos.neuron.amazonaws.com) is not installed here; run this on a host with the Neuron SDK, or set NEURONX_CC" >&2
  exit 2
}
command -v flock > /dev/null || { echo "compile-neffs: flock (util-linux) not found" >&2; exit 2; }
version=$("$cc" --version 2>&1 | head -n 1)
[ -n "$version" ] || { echo "compile-neffs: '$cc --version' printed nothing" >&2; exit 2; }
hashes=$("$python" -c 'import json, sys; print(" ".join(m["hash"] for m in json.load(open(sys.argv[1]))["modules"]))' "$manifest") ||
  { echo "compile-neffs: cannot read the module list of $manifest" >&2; exit 2; }
mkdir -p "$neff_dir" || exit 2
key="target=$target compiler=$version flags=$flags"

# compile_one HASH: prints "cached", "compiled" or "FAILED" and the module; returns 1 on failure.
compile_one() {
  local h=$1 neff=$neff_dir/$1.neff
  if [ -f "$neff" ] && [ "$(cat "$neff.key" 2>/dev/null)" = "$key" ]; then echo "cached   $h"; return 0; fi
  local tmp=$neff_dir/.$h.$$.neff log=$neff_dir/$h.neff.failed.log
  if $to_hlo "$export_dir/$h.mlir" "$export_dir/$h.hlo.pb" > "$log" 2>&1 &&
     "$cc" compile "$export_dir/$h.hlo.pb" --framework XLA --target "$target" $flags --output "$tmp" >> "$log" 2>&1 &&
     [ -s "$tmp" ]; then
    echo "$key" > "$neff.key.tmp" && mv -f "$tmp" "$neff" && mv -f "$neff.key.tmp" "$neff.key" && rm -f "$log"
    echo "compiled $h"
    return 0
  fi
  rm -f "$tmp"
  echo "FAILED   $h: $(tail -n 1 "$log") (log: $log)"
  return 1
}

failed=0
for h in $hashes; do
  # One compile per module at a time across nodes; the second waiter then finds it cached.
  ( flock 9 && compile_one "$h" ) 9> "$neff_dir/$h.lock" || failed=1
done
[ $failed -eq 0 ] || { echo "compile-neffs: some modules failed to compile; nothing was cached for them" >&2; exit 1; }
echo "compile-neffs: every module of $manifest is in $neff_dir ($key); run with PERCEIVER_NEFF_DIR=$neff_dir"
