#!/usr/bin/env bash
# The main job from a fresh clone: set-up, then tfdp's default job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -eq 0 ]; then
  set -- train
fi
exec .venv/bin/tfdp "$@"
