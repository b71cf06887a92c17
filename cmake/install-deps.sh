#!/usr/bin/env bash
# Installs the Debian packages listed in cmake/debian-packages.txt that are missing.
# Idempotent: prints what it installs, or nothing to do. Needs root (or sudo) only when
# something is missing. --no-media: without the media component's packages (FFmpeg, libsndfile;
# the lines marked "# media"), for builds with -DPERCEIVER_WITH_MEDIA=OFF. Lines marked "# amd64"
# are for amd64 machines only (the arm64 cross compiler).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
skip='^$'
if [[ ${1:-} == --no-media ]]; then
  skip='#[[:space:]]*media'
fi
arch_only='^$'
if [[ $(dpkg --print-architecture) != amd64 ]]; then
  arch_only='#[[:space:]]*amd64'
fi
mapfile -t wanted < <(grep -v -e "$skip" -e "$arch_only" "$here/debian-packages.txt" | sed -e 's/#.*//' -e '/^[[:space:]]*$/d' \
  -e 's/[[:space:]]*$//')

missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#wanted[@]} Debian packages are present"
  exit 0
fi

echo "install-deps: installing ${#missing[@]} missing package(s): ${missing[*]}"
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "install-deps: not root and no sudo; install these as root: ${missing[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
echo "install-deps: done"
