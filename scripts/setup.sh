#!/usr/bin/env bash
# Create .venv (once) and install tfdp with its development dependencies (CPU TensorFlow).
# Idempotent: reinstalls only when pyproject.toml changed. Used by run-main.sh, run-tests.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
stamp=.venv/.tfdp-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install --quiet -e '.[dev]' 2>&1 | grep -v "is ignored: it is neither" || true
  .venv/bin/python -c "import tfdp, tensorflow, keras" # fail loudly if the install is broken
  echo "$want" > "$stamp"
fi
