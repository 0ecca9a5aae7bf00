#!/usr/bin/env bash
# The whole test suite from a fresh clone: set-up, lint, tests (doctests included).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
# Not -q: with -q and no terminal, pytest-xdist prints its placeholder status "bringing up
# nodes..." twice (at start-up and after collection); at normal verbosity it says
# "created: N/N workers" and "N workers [M items]" instead.
.venv/bin/python -m pytest -n auto --doctest-modules src tests "$@"
