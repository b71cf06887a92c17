#!/usr/bin/env bash
# deploy/neuron/compile-neffs.sh with a FAKE neuronx-cc (fixtures/fake-neuronx-cc; the real
# compiler cannot run here) and `cp` for the StableHLO -> HloModuleProto step (checked for real
# by neuron.hlo_proto, label xla): what gets compiled with which arguments, the cache keyed by
# module hash + target + compiler version + flags, failures cache nothing, a missing compiler is
# one line.   check_compile_neffs.sh SOURCE_DIR WORK_DIR
set -u
src=$1
work=$2
script=$src/deploy/neuron/compile-neffs.sh
rm -rf "$work" && mkdir -p "$work/export" "$work/bin" || exit 1
cp "$src/tests/deploy/fixtures/fake-neuronx-cc" "$work/bin/neuronx-cc"
for h in 00000000000000aa 00000000000000bb; do echo "module @m_$h {}" > "$work/export/$h.mlir"; done
echo '{"modules": [{"hash": "00000000000000aa"}, {"hash": "00000000000000bb"}]}' > "$work/export/manifest.json"
neff=$work/neff
export FAKE_CC_LOG=$work/cc.log PERCEIVER_TO_HLO=cp PERCEIVER_PYTHON=${PERCEIVER_PYTHON:-python3}
failures=0
check() {  # check "what" command...
  local what=$1; shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; failures=$((failures + 1)); fi
}
compiles() { [ -f "$FAKE_CC_LOG" ] && wc -l < "$FAKE_CC_LOG" || echo 0; }
run() { PATH=$work/bin:$PATH "$script" "$work/export" "$neff" > "$work/out.log" 2>&1; }

out=$(PATH=/usr/bin:/bin "$script" "$work/export" "$neff" 2>&1); rc=$?
check "no neuronx-cc: exit 2 and one line naming it and where it comes from" \
  test $rc -eq 2 -a "$(echo "$out" | wc -l)" -eq 1 -a -n "$(echo "$out" | grep 'neuronx-cc.*Neuron SDK')"

run; rc=$?
check "first run compiles both modules (exit $rc)" test $rc -eq 0 -a "$(compiles)" -eq 2
check "NEFFs named by module hash" test -s "$neff/00000000000000aa.neff" -a -s "$neff/00000000000000bb.neff"
check "neuronx-cc gets the HloModuleProto, XLA, trn1, fp32 and the output" \
  grep -qx "compile $work/export/00000000000000aa.hlo.pb --framework XLA --target trn1 --auto-cast none --output $neff/.00000000000000aa.[0-9]*.neff" "$FAKE_CC_LOG"
check "the cache key names target, compiler version and flags" \
  grep -qx "target=trn1 compiler=NeuronX Compiler version 0.0.0-fake flags=--auto-cast none" "$neff/00000000000000aa.neff.key"

run
check "second run: both cached, nothing compiled" test "$(compiles)" -eq 2 -a "$(grep -c '^cached' "$work/out.log")" -eq 2

FAKE_CC_VERSION=0.0.1-fake run
check "a new compiler version compiles again" test "$(compiles)" -eq 4

rm -f "$neff/00000000000000bb.neff"
FAKE_CC_VERSION=0.0.1-fake FAKE_CC_FAIL=bb run; rc=$?
check "a failed compile: exit 1, nothing cached for it, its log kept (exit $rc)" \
  test $rc -eq 1 -a ! -e "$neff/00000000000000bb.neff" -a -s "$neff/00000000000000bb.neff.failed.log"
check "the failure line names the module and the compiler's last line" \
  grep -q "^FAILED   00000000000000bb: ERROR: fake compile failure" "$work/out.log"
check "no half-written NEFF is left behind" test -z "$(ls -A "$neff" | grep '^\.')"

FAKE_CC_VERSION=0.0.1-fake run; rc=$?
check "the next run compiles the failed module (no cached failure) (exit $rc)" \
  test $rc -eq 0 -a -s "$neff/00000000000000bb.neff" -a ! -e "$neff/00000000000000bb.neff.failed.log"

echo "$failures failure(s)"
[ $failures -eq 0 ]
