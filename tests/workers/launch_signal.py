"""Launch test worker: report SIGINT / SIGTERM and exit 0; write DIR/ready-<i> once set up.

Usage: launch_signal.py DIR
"""

import os
import signal
import sys
import time
from pathlib import Path

out = Path(sys.argv[1])
index = int(os.environ["TFDP_WORKER_INDEX"])
(out / f"pid-{index}").write_text(str(os.getpid()))


def on_signal(signum, frame):
    print(f"worker {index} got {signal.Signals(signum).name}", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
(out / f"ready-{index}").write_text("ready")
time.sleep(600)
sys.exit(98)  # never signalled
