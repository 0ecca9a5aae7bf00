"""Multi-node launch test worker (no TensorFlow): report the environment, fail, or wait.

Usage: node_worker.py MODE DIR

Every worker first prints ``ENV <json>`` (its TF_CONFIG and the launcher's variables) and
writes DIR/ready-<restart>-<rank>. Then, by MODE:

* ``env``: exit 0.
* ``fail-once``: on the first start (TFDP_RESTART=0) the last rank waits until every rank
  is ready, then exits 3; the others sleep until stopped. On a restart: exit 0.
* ``wait-once``: on the first start every worker sleeps until stopped (SIGTERM: it prints
  ``got SIGTERM`` and exits 143); on a restart: exit 0.
* ``wait``: every worker sleeps until stopped, on every start.
* ``release``: every worker waits until DIR/release-<rank> exists, then exits 0.

``ENV`` also says whether the worker sees TFDP_RDZV_SECRET (``secret_seen``): it must not.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path

mode, out = sys.argv[1], Path(sys.argv[2])
NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
         "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TFDP_WORKER_INDEX",
         "TFDP_NUM_WORKERS", "TFDP_RESTART", "TFDP_HEARTBEAT_TIMEOUT")  # fmt: skip
env = {k: os.environ[k] for k in NAMES}
env["TF_CONFIG"] = json.loads(os.environ["TF_CONFIG"])
env["pid"] = os.getpid()
env["secret_seen"] = "TFDP_RDZV_SECRET" in os.environ
rank, world, restart = int(env["RANK"]), int(env["WORLD_SIZE"]), int(env["TFDP_RESTART"])


def on_term(signum, frame):
    print(f"rank {rank} got {signal.Signals(signum).name}", flush=True)
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, on_term)
print("ENV " + json.dumps(env), flush=True)
(out / f"ready-{restart}-{rank}").write_text(str(os.getpid()))
if mode == "env" or (mode in ("fail-once", "wait-once") and restart > 0):
    sys.exit(0)
if mode == "release":
    deadline = time.monotonic() + 120
    while not (out / f"release-{rank}").exists():
        if time.monotonic() > deadline:
            sys.exit(99)
        time.sleep(0.05)
    print(f"rank {rank} released", flush=True)
    sys.exit(0)
if mode == "fail-once" and rank == world - 1:
    deadline = time.monotonic() + 120
    while not all((out / f"ready-0-{r}").exists() for r in range(world)):
        if time.monotonic() > deadline:
            sys.exit(99)
        time.sleep(0.05)
    print(f"rank {rank} failing", flush=True)
    sys.exit(3)
time.sleep(600)
sys.exit(98)
