#!/usr/bin/env bash
# Installs the built tree into a scratch prefix, then builds and runs a consumer project of the
# core with find_package(perceiver), and one of the media component with
# find_package(perceiver COMPONENTS media) (without media: checks that find_package refuses the
# component with the reason), and checks the pkg-config files and the installed presets. Usage:
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
# The core consumer needs no media library (its only perceiver dependency is the core).
"$src/tests/install/check_media_deps.sh" "$work/consumer/consumer"

media=$(sed -n 's/^PERCEIVER_WITH_MEDIA:BOOL=//p' "$build/CMakeCache.txt")
if [[ $media == ON ]]; then
  cmake -S "$src/tests/install/media_consumer" -B "$work/media_consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DCMAKE_BUILD_TYPE=Release > "$work/media_configure.log"
  cmake --build "$work/media_consumer" > "$work/media_build.log"
  "$work/media_consumer/media_consumer" "$work"
  [[ -f "$work/prefix/include/perceiver/media.h" ]] || { echo "perceiver/media.h is not installed" >&2; exit 1; }
else
  [[ ! -e "$work/prefix/include/perceiver/media.h" ]] || { echo "media.h installed without media" >&2; exit 1; }
  if cmake -S "$src/tests/install/media_consumer" -B "$work/media_consumer" -DCMAKE_PREFIX_PATH="$work/prefix" \
       > "$work/media_configure.log" 2>&1; then
    echo "find_package(perceiver COMPONENTS media) succeeded on a build without media" >&2; exit 1
  fi
  grep -q "built without the media component" "$work/media_configure.log" || {
    echo "find_package(perceiver COMPONENTS media) failed without saying why:" >&2; cat "$work/media_configure.log" >&2; exit 1; }
  echo "find_package(perceiver COMPONENTS media) on a build without media: refused with the reason"
fi
pc_dir=$(dirname "$(find "$work/prefix" -name perceiver.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --cflags --libs perceiver)
echo "pkg-config: $flags"
[[ "$flags" == *"-lperceiver"* ]] || { echo "pkg-config file lacks -lperceiver" >&2; exit 1; }
if [[ $media == ON ]]; then
  flags=$(PKG_CONFIG_PATH="$pc_dir" pkg-config --libs perceiver-media)
  echo "pkg-config perceiver-media: $flags"
  [[ "$flags" == *"-lperceiver_media"*"-lperceiver"* ]] || { echo "perceiver-media.pc is wrong" >&2; exit 1; }
fi
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
# With CUDA, the installed core opens the installed libperceiver_cuda (beside it) for --device
# cuda: a GPU, or the one-line no-GPU error, never a loader error.
if [[ $(sed -n 's/^PERCEIVER_WITH_CUDA:BOOL=//p' "$build/CMakeCache.txt") == ON ]]; then
  plugin=$(find "$work/prefix" -name 'libperceiver_cuda.so.*' | head -1)
  [[ -n $plugin ]] || { echo "libperceiver_cuda.so is not installed" >&2; exit 1; }
  out=$(cd "$work" && LD_DEBUG=files LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$work/prefix/bin/perceiver-bench" --config tiny --steps 1 --warmup 0 --threads 1 --device cuda 2>&1) || true
  grep -q "file=$work/prefix/lib[0-9]*/libperceiver_cuda.so" <<< "$out" || {
    echo "the installed perceiver-bench did not open the installed libperceiver_cuda:" >&2; grep -v "^ *[0-9]*:" <<< "$out" >&2; exit 1; }
  grep -qE "no usable NVIDIA GPU|^examples_per_s=" <<< "$out" || {
    echo "--device cuda from the install prefix:" >&2; grep -v "^ *[0-9]*:" <<< "$out" >&2; exit 1; }
  echo "installed --device cuda: opened $plugin"
fi
