"""Launch test worker: print numbered lines to stdout and stderr, some very long, then exit 0.

Every line is ``<worker index>:<line number>:<text>``; the last one has no newline.
The first line carries the worker's TF_CONFIG and TFDP_* variables as JSON.
"""

import json
import os
import sys

index = int(os.environ["TFDP_WORKER_INDEX"])
lines = int(sys.argv[1])
long_chars = int(sys.argv[2])
seen = {k: v for k, v in os.environ.items() if k.startswith("TFDP_")}
seen["TF_CONFIG"] = json.loads(os.environ["TF_CONFIG"])
print(f"{index}:0:{json.dumps(seen)}")
for k in range(1, lines):
    stream = sys.stdout if k % 2 else sys.stderr
    text = str(index) * long_chars if k % 50 == 0 else f"line {k}"
    print(f"{index}:{k}:{text}", file=stream, flush=True)
sys.stdout.write(f"{index}:{lines}:no newline at the end")
