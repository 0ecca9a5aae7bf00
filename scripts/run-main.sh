#!/usr/bin/env bash
# The main job from a fresh clone: set-up, then tfdp's default job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# No arguments, or only options: the training job (`tfdp train`); otherwise any tfdp command.
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  set -- train "$@"
fi
echo "run-main: .venv/bin/tfdp $* (TensorFlow loads first: a few seconds)" >&2
exec .venv/bin/tfdp "$@"
