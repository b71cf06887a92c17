#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds and runs a consumer project with
# find_package(perceiver) and checks the pkg-config file and the installed presets. Usage:
# check_install.sh BUILD_DIR SRC_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
cmake --build "$work/consumer" > "$work/build.log"
"$work/consumer/consumer"
pc_dir=$(dirname "$(find "$work/prefix" -name perceiver.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs perceiver)
echo "pkg-config: $flags"
[[ "$flags" == *"-lperceiver"* ]] || { echo "pkg-config file lacks -lperceiver" >&2; exit 1; }
# The presets and main.yaml are installed, and an installed tool finds them beside itself when
# run from any folder (here: one outside the source and build trees).
for f in tiny small demo kinetics700 main; do
  [[ -f "$work/prefix/share/perceiver/configs/$f.yaml" ]] || { echo "configs/$f.yaml is not installed" >&2; exit 1; }
done
bench=$(cd "$work" && LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$work/prefix/bin/perceiver-bench" --config tiny --steps 1 --warmup 0 --threads 1)
echo "$bench" | head -1
[[ "$bench" == *"config=tiny ($work/prefix/share/perceiver/configs/tiny.yaml)"* ]] || {
  echo "the installed perceiver-bench did not use the installed tiny preset" >&2; exit 1; }
