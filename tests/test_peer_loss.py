"""A lost peer, below the whole run: TensorFlow's texts read, the save at the fault.

The texts are the ones TensorFlow 2.21 printed on simulated machines (tests/simnet.py) when a
link was cut, a node stopped or killed; the save at the fault is compared, tensor by tensor,
with an ordinary save of the same state.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from tfdp import ArraySource, DistributedInput
from tfdp.checkpoint import keras_trackables
from tfdp.distribute.faults import Peer, coordination_leader, is_peer_failure, lost_peers
from tfdp.train import PeerLostError, Trainer, TrainState
from tfdp.train.assemble import epoch_metric_states
from tfdp.train.peer_loss import PeerLossWatch, save_at_fault

CLUSTER = {"worker": ["10.231.0.1:2222", "10.231.0.2:2222"]}

# What the chief (the coordination service's leader) says when worker 1 is cut off or stopped.
LEADER = (
    "{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/"
    "replica:0/task:0/device:CPU:0}} Collective ops is aborted by: Error reported from "
    "/job:worker/task:1: The following tasks are unhealthy (stopped sending heartbeats):\n"
    "/job:worker/replica:0/task:1\nThe tasks have crashed. Check the task logs for an earlier "
    "error, or scheduler events (e.g. preemption, eviction) to debug further.\nThe error could "
    "be from a previous operation. Restart your program to reset. [Op:CollectiveReduceV2]"
)
# What worker 1 says when its heartbeats to the leader time out (the link cut, worker 0 stopped).
HEARTBEAT = (
    "{{function_node __wrapped__CollectiveReduceV2_Nordering_token_1_device_/job:worker/"
    "replica:0/task:1/device:CPU:0}} Collective ops is aborted by: Deadline Exceeded\n\n"
    "RPC: /tensorflow.CoordinationService/Heartbeat\nThe error could be from a previous "
    "operation. Restart your program to reset. [Op:CollectiveReduceV2]"
)
# What worker 1 says when worker 0's process is killed.
RESET = (
    "Collective ops is aborted by: recvmsg:Connection reset by peer\nAdditional GRPC error "
    "information from remote target /job:worker/replica:0/task:0 while calling "
    "/tensorflow.WorkerService/RecvBuf:\n:UNKNOWN:Error received from peer  {grpc_status:14, "
    'grpc_message:"recvmsg:Connection reset by peer"}'
)


def test_the_leader_names_the_task_whose_heartbeats_stopped():
    peers, cause = lost_peers(LEADER, CLUSTER, me=("worker", 0))
    assert peers == [Peer("worker", 1, "10.231.0.2:2222")]  # not task 0 of the device name
    assert cause == "it stopped sending heartbeats"


def test_a_worker_whose_heartbeats_time_out_lost_the_leader():
    peers, cause = lost_peers(HEARTBEAT, CLUSTER, me=("worker", 1))
    assert peers == [Peer("worker", 0, "10.231.0.1:2222")]
    assert "coordination service" in cause
    with_chief = {"chief": ["10.0.0.9:1"], "worker": ["10.0.0.1:1"]}
    peers, _ = lost_peers(HEARTBEAT, with_chief, me=("worker", 0))
    assert peers == [Peer("chief", 0, "10.0.0.9:1")]


def test_a_reset_connection_names_the_remote_target():
    peers, cause = lost_peers(RESET, CLUSTER, me=("worker", 1))
    assert peers == [Peer("worker", 0, "10.231.0.1:2222")]
    assert cause == "its connection closed"


def test_a_text_that_names_no_peer_gives_none_and_a_cause():
    assert lost_peers("Socket closed", CLUSTER, me=("worker", 0)) == ([], "its connection closed")
    assert lost_peers("", CLUSTER) == ([], "it stopped answering")


@given(
    workers=st.integers(1, 6),
    chief=st.booleans(),
    data=st.data(),
)
def test_the_lost_task_and_its_address_come_from_the_cluster(workers, chief, data):
    cluster = {"worker": [f"10.0.1.{i}:{2000 + i}" for i in range(workers)]}
    if chief:
        cluster["chief"] = ["10.0.0.1:1999"]
    tasks = [("worker", i) for i in range(workers)] + ([("chief", 0)] if chief else [])
    lost = data.draw(st.sampled_from(tasks))
    me = data.draw(st.sampled_from(tasks))
    text = (
        f"Error reported from /job:{me[0]}/task:{me[1]}: The following tasks are unhealthy "
        f"(stopped sending heartbeats):\n/job:{lost[0]}/replica:0/task:{lost[1]}\n"
    )
    peers, _ = lost_peers(text, cluster, me=me)
    expected = [] if lost == me else [Peer(*lost, cluster[lost[0]][lost[1]])]
    assert peers == expected  # the reporter named first is not the lost one; never me
    assert coordination_leader(cluster) == (("chief", 0) if chief else ("worker", 0))


def test_only_the_types_of_a_failed_collective_count_and_only_with_peers():
    for name in ("UnavailableError", "DeadlineExceededError", "AbortedError", "CancelledError"):
        assert is_peer_failure(name, 2)
        assert hasattr(tf.errors, name)  # real TensorFlow error types
    assert not is_peer_failure("InvalidArgumentError", 2)  # a peer's bad file: its own error
    assert not is_peer_failure("UnavailableError", 1)


def test_the_error_says_how_far_behind_the_kept_checkpoint_is():
    err = PeerLostError(
        peers=[], cause="its connection closed", epoch=0, step=7, steps_per_epoch=10,
        global_step=7, kept="r/ckpt-5", kept_step=5, saved_now=False, note="only the chief",
    )  # fmt: skip
    assert "lost a peer after optimizer step 7 (epoch 1, step 7 of 10)" in str(err)
    assert "Kept: the latest checkpoint, r/ckpt-5 (2 step(s) behind this worker); only" in str(err)


def test_the_watch_counts_the_steps_a_failed_call_applied():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.1)
    opt.build(model.trainable_variables)
    grads = [tf.ones_like(v) for v in model.trainable_variables]
    state = TrainState(global_step=4, skipped_steps=1)
    watch = PeerLossWatch.start(opt, state)
    for _ in range(3):  # three calls seen complete, one of them a skipped step (not applied)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
    state.global_step, state.skipped_steps = 8, 2
    assert watch.unseen_steps(opt, state) == 0
    opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))  # a call that failed
    assert watch.unseen_steps(opt, state) == 1


def test_the_save_at_the_fault_equals_an_ordinary_save_of_the_same_state(mirrored4, tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(512, 5)).astype("float32"), np.arange(512) % 3
    inp = DistributedInput(mirrored4, ArraySource((x, y)), batch_size=8)  # per replica: 16 steps
    trainer = Trainer(
        mirrored4,
        lambda: keras.Sequential(
            [keras.Input((5,)), keras.layers.Dropout(0.2), keras.layers.Dense(3)]
        ),
        lambda: keras.optimizers.Adam(0.01),
        "sparse_categorical_crossentropy_from_logits",
        metrics=["sparse_categorical_accuracy"],
        run_dir=tmp_path / "a",
        progress=False,
        verbose=0,
    )
    trainer.fit(inp, epochs=1, max_steps=3)  # stops mid-epoch: saves ckpt-3 the ordinary way
    assert trainer.state.step == 3 and float(trainer.train_step.train_loss.count.numpy()) > 0
    fault = save_at_fault(
        str(tmp_path / "b"),
        strategy=mirrored4,
        trackables=keras_trackables(trainer.model, trainer.optimizer),
        metric_states=epoch_metric_states(trainer.train_step),
        position=trainer._resume.position(inp, 0, 3),
        global_step=3,
        max_to_keep=3,
    )
    ordinary = tf.train.load_checkpoint(str(tmp_path / "a" / "checkpoints" / "ckpt-3"))
    saved = tf.train.load_checkpoint(fault)
    keys = set(ordinary.get_variable_to_shape_map())
    assert keys == set(saved.get_variable_to_shape_map())
    assert any("metric_states" in k for k in keys) and any("optimizer" in k for k in keys)
    for key in keys - {"save_counter/.ATTRIBUTES/VARIABLE_VALUE", "_CHECKPOINTABLE_OBJECT_GRAPH"}:
        a, b = ordinary.get_tensor(key), saved.get_tensor(key)
        assert np.array_equal(a, b), key  # bit-identical: every replica is local here
