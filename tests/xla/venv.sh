#!/usr/bin/env bash
# Makes, once, the virtual environment of the XLA tests: pinned jax/jaxlib from PyPI (jaxlib's
# XLA is the compiler that proves the captured graphs). A later run finds it ready and returns at
# once. Without PyPI it writes the reason to VENV.unavailable (the XLA tests then report a SKIP
# that names it) and exits 0: this step did what it could; the library never needs Python.
#   venv.sh VENV
set -u
venv="$1"
pins="jax==0.10.2 jaxlib==0.10.2"
stamp="$venv/.perceiver-pins"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$pins" ] && "$venv/bin/python" -c "import jax, jaxlib" 2>/dev/null; then
  echo "xla venv: $venv has $pins"
  exit 0
fi
rm -rf "$venv" "$venv.unavailable"
mkdir -p "$(dirname "$venv")"
log="$venv.log"
unavailable() {
  echo "$1" > "$venv.unavailable"
  rm -rf "$venv"
  echo "xla venv: not available: $1"
  exit 0
}
/usr/bin/python3 -m venv "$venv" > "$log" 2>&1 || unavailable "python3 -m venv failed (is python3-venv installed?): $(tail -1 "$log")"
"$venv/bin/pip" install --disable-pip-version-check --no-input -q $pins >> "$log" 2>&1 ||
  unavailable "pip could not install $pins (PyPI unreachable?): $(tail -1 "$log")"
echo "$pins" > "$stamp"
echo "xla venv: installed $pins into $venv"
