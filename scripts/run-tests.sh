#!/usr/bin/env bash
# The whole test suite from a fresh clone: set-up (the reference stack included), lint, tests
# (doctests included). Every cross-check against torch / timm / keras-hub runs: one whose
# library is missing fails (tests/reference_stack.py).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --tests
export TFDP_REQUIRE_REFERENCE=1
.venv/bin/ruff check .
# Not -q: with -q and no terminal, pytest-xdist prints its placeholder status "bringing up
# nodes..." twice (at start-up and after collection); at normal verbosity it says
# "created: N/N workers" and "N workers [M items]" instead.
# --dist loadgroup: the tests marked xdist_group("name") run on one worker, so a module fixture
# they share (a whole training run) runs once, not once per worker; the others go one by one.
# (pytest < 9.2, pyproject.toml: with 9.2's node ids loadgroup stops grouping, pytest-xdist#1386.)
.venv/bin/python -m pytest -n auto --dist loadgroup --doctest-modules src tests "$@"
