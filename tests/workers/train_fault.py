"""`tfdp train` as a worker, with an injected fault on its first run (test helper).

Usage: train_fault.py FAULT STEP -- <tfdp train flags>. FAULT is "none", "kill" (SIGKILL
itself) or "term" (SIGTERM itself); the fault hits worker 1 at global step STEP, only on the
first run of the group (TFDP_RESTART=0), and is announced on stdout first. Exits with
`tfdp train`'s status (0, 3, 4 a peer lost, 130 / 143), after a RESULT line.
"""

import json
import os
import signal
import sys

from tfdp.cli import build_parser
from tfdp.cli.train import train, train_request


def main() -> int:
    fault, step = sys.argv[1], int(sys.argv[2])
    args = build_parser().parse_args(["train", *sys.argv[4:]])
    first_run = os.environ.get("TFDP_RESTART", "0") == "0"
    me = int(os.environ.get("TFDP_WORKER_INDEX", "0"))

    cfg, _ = train_request(args)
    lock = os.path.join(cfg.run_dir or "", ".tfdp.lock")
    shown = []

    def on_step(state):
        if not shown:  # which process holds the run directory's lock: the chief's
            shown.append(True)
            holder = None
            if os.path.exists(lock):
                with open(lock) as fh:
                    holder = json.load(fh)["pid"]
            print(f"LOCK holder {holder} is me {holder == os.getpid()}", flush=True)
        if fault != "none" and first_run and me == 1 and state.global_step == step:
            print(f"FAULT {fault} worker {me} at step {state.global_step}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGTERM)

    # As `tfdp train`: SIGTERM saves and stops (130 / 143), a lost peer is one error line (4).
    status, result = train(cfg, on_step=on_step)
    if not result:  # 3 diverged, 4 a peer lost: the command printed its error, nothing returned
        print(f"RESULT status={status}", flush=True)
        return status
    print(
        f"RESULT stopped_early={result['stopped_early']} reason={result['stop_reason']} "
        f"step={result['global_step']}",
        flush=True,
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
