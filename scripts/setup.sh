#!/usr/bin/env bash
# Create .venv (once) and install tfdp with its development dependencies (CPU TensorFlow).
# Idempotent: reinstalls only when pyproject.toml changed. Used by run-main.sh, run-tests.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup: $*" >&2; }
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1) ..."
  "$PY" -m venv .venv
  say "upgrading pip in .venv ..."
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
stamp=.venv/.tfdp-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  say "installing tfdp and its development dependencies into .venv (tensorflow-cpu, keras," \
    "matplotlib, pytest, ...): a few minutes on a first install ..."
  start=$SECONDS
  .venv/bin/python -m pip install --quiet -e '.[dev]' 2>&1 | grep -v "is ignored: it is neither" || true
  say "checking the install (importing tfdp, tensorflow, keras) ..."
  .venv/bin/python -c "import tfdp, tensorflow, keras" # fail loudly if the install is broken
  echo "$want" > "$stamp"
  say "done in $((SECONDS - start)) s: run .venv/bin/tfdp, or 'source .venv/bin/activate' and tfdp"
fi
