"""Strategy selection, TF_CONFIG validation and worker facts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import tensorflow as tf

from tfdp.distribute import make_strategy, parse_tf_config, worker_info
from tfdp.errors import ConfigError

GOOD = {
    "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
    "task": {"type": "worker", "index": 1},
}


def test_parse_good_and_unset():
    assert parse_tf_config(json.dumps(GOOD))["task"]["index"] == 1
    assert parse_tf_config("") is None


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        (json.dumps({"task": GOOD["task"]}), r"\['cluster'\] is missing"),
        (json.dumps({"cluster": GOOD["cluster"]}), r"\['task'\] is missing"),
        (json.dumps({**GOOD, "task": {"type": "worker", "index": 2}}), r"out of range.*0\.\.1"),
        (json.dumps({**GOOD, "task": {"type": "ps", "index": 0}}), r"'ps', not a task type"),
        (json.dumps({**GOOD, "task": {"type": "worker", "index": "0"}}), "must be an integer"),
        (
            json.dumps(
                {
                    "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2222"]},
                    "task": {"type": "worker", "index": 0},
                }
            ),
            r"duplicates .*\[0\]",
        ),
        (
            json.dumps(
                {"cluster": {"worker": ["localhost"]}, "task": {"type": "worker", "index": 0}}
            ),
            "must be 'host:port'",
        ),
        (
            json.dumps(
                {"cluster": {"worker": ["h:99999"]}, "task": {"type": "worker", "index": 0}}
            ),
            "invalid port",
        ),
        (
            json.dumps({"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}),
            "non-empty list",
        ),
    ],
)
def test_bad_tf_config_names_the_field(cfg, match):
    with pytest.raises(ValueError, match=match):
        parse_tf_config(cfg)


def test_worker_info_single_process(mirrored4):
    info = worker_info(mirrored4)
    assert (info.num_replicas, info.num_workers, info.replicas_per_worker, info.is_chief) == (
        4,
        1,
        4,
        True,
    )
    assert worker_info(tf.distribute.OneDeviceStrategy("/cpu:0")).num_replicas == 1


def test_make_strategy_kinds(mirrored4):
    assert make_strategy("one_device").num_replicas_in_sync == 1
    assert make_strategy("cpu", cpu_replicas=4).num_replicas_in_sync == 4  # already configured: 4
    with pytest.raises(ValueError, match="already initialised"):
        make_strategy("cpu", cpu_replicas=3)
    with pytest.raises(ValueError, match="kind: must be one of"):
        make_strategy("horovod")
    with pytest.raises(ValueError, match="needs TF_CONFIG"):
        make_strategy("multi_worker")
    with pytest.raises(ConfigError, match=r"bytes_per_pack: must be an integer >= 0") as bad:
        make_strategy("multi_worker", bytes_per_pack=-1)  # refused before the cluster is read
    assert bad.value.argument == "bytes_per_pack"
    with pytest.raises(ConfigError, match=r"heartbeat_timeout: must be a number of seconds > 0"):
        make_strategy("multi_worker", heartbeat_timeout=0)


def test_a_bad_heartbeat_timeout_from_the_environment_is_named(monkeypatch):
    monkeypatch.setenv("TFDP_HEARTBEAT_TIMEOUT", "soon")
    with pytest.raises(ConfigError, match=r"TFDP_HEARTBEAT_TIMEOUT must be a number .* 'soon'"):
        make_strategy("multi_worker")


def test_make_strategy_cpu_replicas_fresh_process():
    code = (
        "import tfdp.distribute as d; s = d.make_strategy(cpu_replicas=3); "
        "print(type(s).__name__, s.num_replicas_in_sync)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split()[-2:] == ["MirroredStrategy", "3"]


def test_auto_with_bad_tf_config_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({**GOOD, "task": {"type": "worker", "index": 5}}))
    with pytest.raises(ValueError, match="out of range"):
        make_strategy()


def test_one_local_mirrored_strategy_per_device_set(mirrored4):
    """A second request reuses the strategy: a second one would restart its collective keys
    at the first one's and abort every collective of the process on a shape mismatch."""
    import tensorflow as tf

    from tfdp.distribute import make_strategy

    again = make_strategy("cpu", cpu_replicas=4)
    assert again is mirrored4
    w = []
    for width in (3, 5):  # collectives of two shapes, one after the other, both sum right
        with again.scope():
            v = tf.Variable(tf.zeros([width]))

        @tf.function
        def step(v=v):
            def replica():
                ctx = tf.distribute.get_replica_context()
                return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.ones_like(v))

            return again.run(replica)

        w.append(again.experimental_local_results(step())[0].numpy().tolist())
    assert w == [[4.0] * 3, [4.0] * 5]
