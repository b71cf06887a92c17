#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds and runs a consumer project with
# find_package(perceiver) and checks the pkg-config file. Usage: check_install.sh BUILD_DIR SRC_DIR
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
