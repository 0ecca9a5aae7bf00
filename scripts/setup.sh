#!/usr/bin/env bash
# Create .venv (once) and install tfdp with its development dependencies (CPU TensorFlow).
#   setup.sh           tfdp + tensorflow-cpu + the dev tools (the main job, ruff, pytest)
#   setup.sh --tests   the same + the reference stack the cross-checks compare with: torch,
#                      torchvision and timm pinned (tfdp[reference]) and keras-hub (tfdp[models])
# Idempotent: reinstalls only when pyproject.toml or this script changed. Used by run-main.sh,
# run-tests.sh (--tests) and CI.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "setup: $*" >&2; }
pipq() { .venv/bin/python -m pip install --quiet "$@" 2>&1 | grep -v "is ignored: it is neither" || true; }
level=dev
if [ "${1:-}" = "--tests" ]; then level=tests; fi
if [ ! -x .venv/bin/python ]; then
  say "creating .venv with $("$PY" --version 2>&1) ..."
  "$PY" -m venv .venv
  say "upgrading pip in .venv ..."
  .venv/bin/python -m pip install --quiet --upgrade pip
fi
want=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)
stamp=.venv/.tfdp-installed-$level
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
start=$SECONDS
if [ "$level" = dev ]; then
  say "installing tfdp and its development dependencies into .venv (tensorflow-cpu, keras," \
    "matplotlib, pytest, ...): a few minutes on a first install ..."
  pipq -e '.[dev]'
else
  say "installing tfdp, its development dependencies and the reference stack into .venv" \
    "(tensorflow-cpu, keras, torch, torchvision, timm, keras-hub, ...): a few minutes on a first install ..."
  pipq -e '.[dev,reference]'
  # keras-hub (tfdp[models]) without its tensorflow-text requirement: tensorflow-text requires
  # the full `tensorflow` wheel, which would replace tensorflow-cpu; tfdp uses keras-hub's
  # vision models only, which import without it. Its other requirements as keras-hub 0.32 lists them.
  pipq --no-deps 'keras-hub==0.32.0'
  pipq 'kagglehub!=1.0.1' 'kagglesdk==0.1.28' absl-py packaging regex rich sentencepiece tokenizers
  # triton (torch.compile's GPU compiler, pulled by torch's CUDA build) is never used on a CPU,
  # and importing it after TensorFlow kills the process (SIGSEGV in triton/knobs.py, through
  # `import timm` -> torchvision -> torch._dynamo): the cross-checks run without it.
  .venv/bin/python -m pip uninstall --quiet --yes triton 2>/dev/null || true
fi
say "checking the install (importing tfdp, tensorflow, keras) ..."
check="import tfdp, tensorflow, keras"
if [ "$level" = tests ]; then check="$check, torch, torchvision, timm, keras_hub"; fi
# fail loudly if the install is broken (TensorFlow's start-up notices shown only then)
if ! out=$(.venv/bin/python -c "$check" 2>&1); then
  echo "$out" >&2
  say "the install is broken: '$check' failed"
  exit 1
fi
echo "$want" > "$stamp"
if [ "$level" = tests ]; then echo "$want" > .venv/.tfdp-installed-dev; fi
say "done in $((SECONDS - start)) s: run .venv/bin/tfdp, or 'source .venv/bin/activate' and tfdp"
