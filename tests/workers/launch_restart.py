"""Launch test worker: worker 1 kills itself with SIGKILL on the first start (TFDP_RESTART=0).

Usage: launch_restart.py DIR

Every worker prints its TFDP_RESTART and TF_CONFIG. On the first start worker 1
waits until every other worker has printed (DIR/printed-<i>), then sends itself
SIGKILL, and the others sleep (until the launcher stops them); on a restart every
worker exits 0.
"""

import os
import signal
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
index = int(os.environ["TFDP_WORKER_INDEX"])
workers = int(os.environ["TFDP_NUM_WORKERS"])
restart = int(os.environ["TFDP_RESTART"])
print(f"worker {index} TFDP_RESTART={restart} TF_CONFIG={os.environ['TF_CONFIG']}", flush=True)
(out / f"printed-{index}-{restart}").write_text("printed")
if restart == 0:
    if index == 1:
        others = [out / f"printed-{i}-0" for i in range(workers) if i != index]
        deadline = time.monotonic() + 120
        while not all(p.exists() for p in others) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
    sys.exit(98)  # never stopped
print(f"worker {index} done", flush=True)
