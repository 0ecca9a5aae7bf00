#!/usr/bin/env bash
# The main job from a fresh clone: set-up, then tfdp's default job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ "$#" -eq 0 ]; then
  set -- sampler --num-examples 12 --replicas 4 --repeats 3 --selected-round 0
fi
exec .venv/bin/tfdp "$@"
