"""`tfdp train` as a worker, with faults injected on chosen runs of the group (test helper).

Usage: train_fault.py PLAN -- <tfdp train flags>. PLAN is "none" or a comma-separated list of
KIND:STEP, its i-th entry for the group's i-th run (TFDP_RESTART=i): KIND "kill" (worker 1
SIGKILLs itself) or "term" (worker 1 SIGTERMs itself) at global step STEP, announced on stdout
first. "term:4,kill:7": SIGTERM at step 4 on the first run, SIGKILL at step 7 on the first
restart, no fault after. Exits with `tfdp train`'s status (0, 3, 4 a peer lost, 130 / 143),
after a RESULT line.
"""

import json
import os
import signal
import sys

from tfdp.cli import build_parser
from tfdp.cli.train import train, train_request


def main() -> int:
    plan = [] if sys.argv[1] == "none" else [f.split(":") for f in sys.argv[1].split(",")]
    args = build_parser().parse_args(["train", *sys.argv[3:]])
    run = int(os.environ.get("TFDP_RESTART", "0"))
    fault, step = (plan[run][0], int(plan[run][1])) if run < len(plan) else ("none", 0)
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
        if fault != "none" and me == 1 and state.global_step == step:
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
