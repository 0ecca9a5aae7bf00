"""Launch test worker: output that arrives late, or from processes the worker leaves behind.

Usage: launch_drain.py MODE DIR

* ``burst``: worker 1 prints 1000 lines of 100 bytes and exits 0 at once; worker 0 prints
  200 lines 0.5 s later, then exits 0.
* ``child``: the worker starts a child in its process group that prints a line 1 s later;
  the worker exits 0 at once.
* ``linger``: the worker starts a child in its process group that sleeps (pid in
  DIR/child-<i>); the worker exits 0 at once.
* ``escape``: the worker starts a process in a new session (outside its process group) that
  holds its output and sleeps (pid in DIR/escaped-<i>); the worker exits 0 at once.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

mode, out = sys.argv[1], Path(sys.argv[2])
index = int(os.environ["TFDP_WORKER_INDEX"])
if mode == "burst":
    if index == 1:
        for k in range(1000):
            print(f"burst {k:04d} " + "x" * 88, flush=True)
    else:
        time.sleep(0.5)
        for k in range(200):
            print(f"late {k:03d}", flush=True)
elif mode == "child":
    code = "import time; time.sleep(1); print('child line', flush=True)"
    subprocess.Popen([sys.executable, "-c", code])
elif mode == "linger":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (out / f"child-{index}").write_text(str(child.pid))
elif mode == "escape":
    code = "import time; time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    (out / f"escaped-{index}").write_text(str(child.pid))
print(f"worker {index} exits", flush=True)
