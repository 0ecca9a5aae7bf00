"""`tfdp train` killed by SIGKILL at a chosen point inside a checkpoint save (test helper).

Usage: save_fault.py POINT NUMBER -- <tfdp train flags>. POINT is where, inside the save of
checkpoint ckpt-NUMBER, the process kills itself (announced on stdout first):

* ``shards``: the shard files are written to ``ckpt-N_temp/``, before they are merged;
* ``merged``: ckpt-N.index / .data are complete, the state file does not name them yet;
* ``state``: the state file names ckpt-N, the oldest checkpoint is not deleted yet;
* ``sweep``: half-way through deleting the oldest checkpoint (its index gone, its data not);
* ``none``: no fault.

The patches wrap TensorFlow's own functions (the merge op, the state-file update, the file
deletion); the real save runs until the kill. At the end it prints ``RESULT <weights sha>``.
"""

import os
import re
import signal
import sys

from tensorflow.python.checkpoint import checkpoint_management
from tensorflow.python.ops import gen_io_ops

from tfdp._compat.fast.process import end_process
from tfdp.cli import build_parser, train_request
from tfdp.recipe import run_train

POINT, NUMBER = sys.argv[1], int(sys.argv[2])
TARGET = f"ckpt-{NUMBER}"
state = {"saving": False, "deleted": 0}


def die(where: str) -> None:
    print(f"FAULT {POINT} {where}", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


merge = gen_io_ops.merge_v2_checkpoints


def merge_v2_checkpoints(checkpoint_prefixes, destination_prefix, *args, **kwargs):
    ours = os.path.basename(str(destination_prefix.numpy().decode())) == TARGET
    if ours and POINT == "shards":
        die(f"before merging {TARGET}")
    out = merge(checkpoint_prefixes, destination_prefix, *args, **kwargs)
    state["saving"] = ours
    return out


update = checkpoint_management.update_checkpoint_state_internal


def update_checkpoint_state_internal(*args, **kwargs):
    if state["saving"] and POINT == "merged":
        die(f"after merging {TARGET}, before the state file")
    out = update(*args, **kwargs)
    if state["saving"] and POINT == "state":
        die(f"after the state file names {TARGET}")
    return out


delete = checkpoint_management._delete_file_if_exists


def _delete_file_if_exists(filespec):
    out = delete(filespec)
    if state["saving"] and POINT == "sweep" and re.search(r"ckpt-\d+\.index$", filespec):
        die(f"after deleting {os.path.basename(filespec)} while saving {TARGET}")
    return out


gen_io_ops.merge_v2_checkpoints = merge_v2_checkpoints
checkpoint_management.update_checkpoint_state_internal = update_checkpoint_state_internal
checkpoint_management._delete_file_if_exists = _delete_file_if_exists


def main() -> int:
    args = build_parser().parse_args(["train", *sys.argv[4:]])
    cfg, given = train_request(args)
    result = run_train(cfg, given=given)
    print(f"RESULT {result['weights_sha256']} step {result['global_step']}", flush=True)
    return 0


if __name__ == "__main__":
    end_process(main())  # as the tfdp process ends (tfdp.cli.app.run)
