#!/usr/bin/env bash
# One XLA proof: capture and reference (xla_dump), then compile and compare (check_xla.py).
# Exit 77 (a ctest SKIP, with the reason) when jaxlib could not be installed.
#   run_check.sh VENV XLA_DUMP OUT_DIR [xla_dump options...]
set -u
venv="$1" dump="$2" out="$3"
shift 3
if [ ! -x "$venv/bin/python" ]; then
  echo "SKIP: jaxlib is not available: $(cat "$venv.unavailable" 2>/dev/null || echo "the xla.venv test has not made $venv")"
  exit 77
fi
rm -rf "$out"
"$dump" --out "$out" "$@" || exit 1
exec "$venv/bin/python" "$(dirname "$0")/check_xla.py" "$out"
