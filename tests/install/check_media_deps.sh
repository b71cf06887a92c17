#!/usr/bin/env bash
# Fails when a built ELF file needs a media library (FFmpeg's libav*/libsw*, libsndfile): the
# direct dependencies from `readelf -d` (NEEDED) and the resolved transitive ones from `ldd`.
#   check_media_deps.sh FILE...            every FILE must be free of them
#   check_media_deps.sh --build-tree DIR   a build configured without media never looked for
#                                          FFmpeg or libsndfile (CMakeCache.txt) and links
#                                          neither (every link command under DIR)
# Prints one line per finding ("FILE needs LIB") and exits 1 if there is any.
set -euo pipefail
media='^lib(av[a-z_]*|sw[a-z_]*|sndfile)[.-]'
found=0

if [[ ${1:-} == --build-tree ]]; then
  dir=$2
  [[ -f $dir/CMakeCache.txt ]] || { echo "no CMakeCache.txt in $dir" >&2; exit 2; }
  if grep -nE '^(FFMPEG|SNDFILE|pkgcfg_lib_(FFMPEG|SNDFILE))_' "$dir/CMakeCache.txt"; then
    echo "$dir/CMakeCache.txt: the build looked for FFmpeg or libsndfile"; found=1
  fi
  while IFS= read -r -d '' link; do
    if grep -qE '(-l(av(format|codec|util|device|filter)|sw(scale|resample)|sndfile)\b)|lib(av(format|codec|util)|sw(scale|resample)|sndfile)\.so' "$link"; then
      echo "$link links a media library"; found=1
    fi
  done < <(find "$dir" -name link.txt -print0)
  [[ $found == 0 ]] && echo "ok: $dir never looked for FFmpeg or libsndfile and links neither"
  exit $found
fi

[[ $# -gt 0 ]] || { echo "usage: check_media_deps.sh FILE... | --build-tree DIR" >&2; exit 2; }
for f in "$@"; do
  [[ -f $f ]] || { echo "$f does not exist" >&2; exit 2; }
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  [[ -n $needed ]] || { echo "$f: readelf -d lists no NEEDED entries (not a dynamic ELF file?)" >&2; exit 2; }
  resolved=$(ldd "$f" 2>/dev/null | awk '{print $1}' || true)
  for lib in $(printf '%s\n%s\n' "$needed" "$resolved" | sort -u); do
    if [[ $(basename "$lib") =~ $media ]]; then
      echo "$f needs $(basename "$lib")"; found=1
    fi
  done
  [[ $found == 0 ]] && echo "ok: $f ($(echo "$needed" | wc -l) NEEDED, $(echo "$resolved" | grep -c .) resolved) needs no media library"
done
exit $found
