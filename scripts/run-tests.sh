#!/usr/bin/env bash
# The whole test suite from a fresh clone: set-up, lint, tests (doctests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q -n auto --doctest-modules src tests "$@"
