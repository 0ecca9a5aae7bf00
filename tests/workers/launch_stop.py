"""Launch test worker: one worker fails, the others wait to be stopped.

Usage: launch_stop.py DIR FAILING_INDEX EXIT_CODE [--ignore-term] [--grandchild]

Every worker writes DIR/pid-<i>. The others install a SIGTERM handler that writes
DIR/sigterm-<i> (or, with --ignore-term, ignore SIGTERM), optionally start a
grandchild that ignores SIGTERM (its pid in DIR/grandchild-<i>), write
DIR/ready-<i>, and sleep. The failing worker (FAILING_INDEX; -1: none) waits for
every other ready file, then exits with EXIT_CODE.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
failing = int(sys.argv[2])
code = int(sys.argv[3])
ignore_term = "--ignore-term" in sys.argv
grandchild = "--grandchild" in sys.argv
index = int(os.environ["TFDP_WORKER_INDEX"])
workers = int(os.environ["TFDP_NUM_WORKERS"])
(out / f"pid-{index}").write_text(str(os.getpid()))


def on_term(signum, frame):
    (out / f"sigterm-{index}").write_text("got SIGTERM")
    print(f"worker {index} got SIGTERM", flush=True)
    sys.exit(0)


if index == failing:
    others = [out / f"ready-{i}" for i in range(workers) if i != index]
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in others):
        if time.monotonic() > deadline:
            sys.exit(99)
        time.sleep(0.05)
    print(f"worker {index} failing with {code}", flush=True)
    sys.exit(code)

if ignore_term:
    signal.signal(
        signal.SIGTERM, lambda s, f: print(f"worker {index} ignoring SIGTERM", flush=True)
    )
else:
    signal.signal(signal.SIGTERM, on_term)
if grandchild:
    # The grandchild ignores SIGTERM and outlives its parent: only the launcher's
    # SIGKILL to the worker's process group can end it.
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    child = subprocess.Popen([sys.executable, "-c", code])
    (out / f"grandchild-{index}").write_text(str(child.pid))
(out / f"ready-{index}").write_text("ready")
print(f"worker {index} ready", flush=True)
time.sleep(600)
sys.exit(98)  # never stopped
