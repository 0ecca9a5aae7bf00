"""tfdp._compat: each private TensorFlow / Keras reach, checked against the real libraries.

Every test here exercises one reach on the installed TensorFlow and Keras. When one fails
after an upgrade, re-check that reach (and then CHECKED_VERSIONS). Each speed trick
(tfdp._compat.fast) is tested on and off (``TFDP_SPEED_TRICKS``): the trick's reach, and its
public-API fallback giving the same values.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from pathlib import Path  # noqa: E402

import tfdp._compat  # noqa: E402
from tfdp._compat.fast.graph import bound_call, lightly_optimized_map  # noqa: E402
from tfdp._compat.fast.process import RELEASE_THREAD_NAME, release_in_background  # noqa: E402
from tfdp._compat.fast.switch import (  # noqa: E402
    SPEED_TRICKS_ENV,
    TRICKS,
    trick_on,
    tricks_on,
)
from tfdp._compat.graph import call_outside_strategy, supports_no_merge_call  # noqa: E402
from tfdp._compat.keras import (  # noqa: E402
    DecaysInUpdateStep,
    attach_optimizer,
    backing_variable,
    checkpoint_value_key,
    compiled_metrics_container,
    fit_step_overrides,
    gradients_reduced,
    hold_untracked,
    seed_generator_states,
    weight_decay_applies,
)
from tfdp._compat.process import close_failed_reduce_pools, in_coordinated_job  # noqa: E402
from tfdp.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "tfdp"


@pytest.fixture(params=["on", "off"])
def tricks(request, monkeypatch) -> bool:
    """Each speed trick on (the default) and off (its fallback): True when on."""
    monkeypatch.setenv(SPEED_TRICKS_ENV, "1" if request.param == "on" else "0")
    return request.param == "on"


#: The TensorFlow and Keras versions (major.minor) every reach in tfdp/_compat/ was checked on.
CHECKED_VERSIONS = {"tensorflow": "2.21", "keras": "3.15"}
#: The keras-hub version (major.minor) tfdp/_compat/keras_hub.py's reaches were checked on.
CHECKED_KERAS_HUB = "0.32"
#: The sub-layers ``ViTEncoderBlock.build`` sets, in the order its ``call`` runs them.
BLOCK_SUBLAYERS = ("layer_norm_1", "mha", "dropout", "layer_norm_2", "mlp")


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def test_the_installed_versions_are_the_checked_ones():
    installed = {
        "tensorflow": _major_minor(tf.__version__),
        "keras": _major_minor(keras.__version__),
    }
    assert installed == CHECKED_VERSIONS, (
        "TensorFlow / Keras changed: run tests/test_compat.py, re-check every reach in "
        "tfdp/_compat/, then update CHECKED_VERSIONS"
    )


def test_compiled_metrics_container_builds_and_lists_the_users_metrics():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(loss="mse", metrics=["mae", keras.metrics.MeanSquaredError(name="m2")])
    container = compiled_metrics_container(model)
    assert container is not None and not container.built
    x, y = np.ones((4, 3), "float32"), np.zeros((4, 2), "float32")
    container.build(y, model(x, training=False))
    assert sorted(m.name for m in container.metrics) == ["m2", "mae"]
    bare = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    bare.compile(loss="mse")
    assert compiled_metrics_container(bare) is None


def test_checkpoint_value_key_is_the_key_tf_writes(tmp_path):
    step = tf.Variable(7, dtype=tf.int64)
    path = tf.train.Checkpoint(step=step).write(str(tmp_path / "ckpt"))
    reader = tf.train.load_checkpoint(path)
    key = checkpoint_value_key("step")
    assert key in reader.get_variable_to_shape_map()
    assert int(reader.get_tensor(key)) == 7


def test_seed_generator_states_are_found_and_not_saved_with_the_model(tmp_path):
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(1),
            keras.layers.Dropout(0.2),
        ]
    )
    states = seed_generator_states(model)
    assert len(states) == 2 and all(isinstance(s, tf.Variable) for s in states)
    # Why they are checkpointed on their own: tf.train.Checkpoint(model=...) leaves them out.
    path = tf.train.Checkpoint(model=model).write(str(tmp_path / "m"))
    saved = tf.train.load_checkpoint(path).get_variable_to_shape_map()
    assert not [k for k in saved if "seed_generator" in k]


def test_backing_variable_is_the_tf_variable_of_a_keras_variable():
    v = keras.Variable(np.float32(2.0))
    assert isinstance(backing_variable(v), tf.Variable)
    assert backing_variable(v) is v.value


def test_supports_no_merge_call_under_mirrored_strategy():
    """MirroredStrategy on TF 2.21 still needs a merge call (guard.py takes that path)."""
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])

    @tf.function
    def step():
        return strategy.run(lambda: tf.constant(supports_no_merge_call()))

    flags = strategy.experimental_local_results(step())
    assert [bool(f) for f in flags] == [False, False]


def test_call_outside_strategy_creates_plain_host_variables_and_reraises():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        inside = tf.Variable(1.0)
        outside = call_outside_strategy(lambda: tf.Variable(1.0))
    assert isinstance(inside, tf.distribute.DistributedValues)
    assert not isinstance(outside, tf.distribute.DistributedValues)
    assert strategy.extended.variable_created_in_scope(inside)
    with pytest.raises(KeyError, match="boom"):
        call_outside_strategy(lambda: {}["boom"])


def test_release_in_background_destroys_iterators_on_its_own_thread(tricks):
    """Iterators handed over die on the release thread, where TensorFlow's teardown may wait
    (tf.data's autotuning thread missing the cancellation), not on the caller's; off, they die
    on the caller's thread before the call returns."""
    import queue
    import threading
    import weakref

    ds = tf.data.Dataset.range(10**6).map(lambda x: x + 1, num_parallel_calls=tf.data.AUTOTUNE)
    held = [iter(ds.prefetch(tf.data.AUTOTUNE)) for _ in range(2)]
    died: queue.Queue[str] = queue.Queue()
    for it in held:
        assert int(next(it)) == 1  # each has started its pipeline (and its autotuning thread)
        weakref.finalize(it, lambda: died.put(threading.current_thread().name))
    del it
    release_in_background(held)
    assert held == []
    if not tricks:  # the fallback: destroyed by the caller, in the call
        assert died.qsize() == 2
    # A bound for liveness only (TensorFlow's teardown may wait up to a minute per iterator).
    names = [died.get(timeout=300), died.get(timeout=300)]
    here = threading.current_thread().name
    assert names == [RELEASE_THREAD_NAME if tricks else here] * 2


END_PROCESS = """
import atexit, sys, threading, time
from tfdp._compat.fast.process import end_process, release_in_background
class Slow:
    def __del__(self):  # a teardown that waits (a tf.data iterator's autotuning thread)
        time.sleep(2); print("RELEASED", flush=True)
release_in_background([Slow()])
def late():
    time.sleep(0.5); print("THREAD", flush=True)
threading.Thread(target=late).start()  # not a daemon: the exit waits for it
atexit.register(print, "ATEXIT")
sys.stdout.write("UNFLUSHED ")  # stdout is a pipe: block-buffered
end_process(5)
"""


def test_end_process_joins_threads_runs_atexit_flushes_and_skips_the_release_wait():
    """In a fresh process: the interpreter's exit sequence, minus the wait for a release; with
    the trick off (the release kept on), ``sys.exit``: the wait happens (the guard can fail)."""
    import os
    import subprocess
    import sys

    def run(switch: str) -> subprocess.CompletedProcess:
        env = {**os.environ, SPEED_TRICKS_ENV: switch}
        return subprocess.run([sys.executable, "-c", END_PROCESS], capture_output=True,
                              text=True, env=env, timeout=120)  # fmt: skip

    done = run("1")
    assert done.returncode == 5, done.stderr
    # The thread finished before the atexit handlers ran; the buffered write was not lost; the
    # object being released (its __del__ takes 2 s) was abandoned, not waited for.
    assert done.stdout.split() == ["UNFLUSHED", "THREAD", "ATEXIT"], done.stdout
    waited = run("release_in_background")  # end_process off: the interpreter's exit
    assert waited.returncode == 5, waited.stderr
    assert waited.stdout.split() == ["UNFLUSHED", "THREAD", "ATEXIT", "RELEASED"], waited.stdout


def test_close_failed_reduce_pools_closes_the_pool_a_failed_eager_all_reduce_left_open():
    """TensorFlow's eager all-reduce closes its ThreadPool only on success: a failed collective
    (a lost peer) leaves it open in the traceback, where the helper finds and closes it."""
    from multiprocessing.pool import Pool

    from tensorflow.python.distribute import cross_device_ops, values

    options = tf.distribute.experimental.CommunicationOptions()
    ops = cross_device_ops.CollectiveAllReduce(["/cpu:0"], 1, options)

    def lost_peer(*args, **kwargs):
        raise tf.errors.UnavailableError(None, None, "peer gone")

    ops._all_reduce = lost_peer  # the collective fails as it does when a peer is lost
    one = values.PerReplica([tf.constant(1.0)])
    with pytest.raises(tf.errors.UnavailableError) as caught:
        ops.reduce_implementation(tf.distribute.ReduceOp.SUM, one, "/cpu:0", options)
    pools, tb = set(), caught.value.__traceback__
    while tb is not None:
        pools |= {v for v in tb.tb_frame.f_locals.values() if isinstance(v, Pool)}
        tb = tb.tb_next
    assert len(pools) == 1 and [p._state for p in pools] == ["RUN"]  # left open by TensorFlow
    assert close_failed_reduce_pools(caught.value) == 1
    assert [p._state for p in pools] == ["CLOSE"]
    assert close_failed_reduce_pools(caught.value) == 0


def test_no_private_reach_outside_compat_in_the_modules_it_serves():
    files = [*(SRC / "checkpoint").glob("*.py"), *(SRC / "train").glob("*.py")]
    private = re.compile(
        r"_compile_metrics|\.ATTRIBUTES/|__internal__|\"seed_generator\"|_call_flat"
        r"|_all_reduce_sum_gradients|function_type"
        r"|\.train_function\b|model\.train_step\s*=[^=]|\.apply_gradients\s*=[^=]"
        r"|setattr\((model|optimizer)"
    )
    found = [
        f"{f.name}:{i}"
        for f in files
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if private.search(line)
    ]
    assert found == []


def test_speed_tricks_live_in_compat_fast_alone():
    """What the speed tricks reach into appears in no module of src/ but tfdp/_compat/fast/'s
    (its table aside): the switch turns every one off; and one module reads the switch."""
    tricky = re.compile(
        r"_call_flat|raw_ops\.(Empty|InplaceUpdate)|experimental_ints_on_device"
        r"|function_call_options|threading\._shutdown|_run_exitfuncs|os\._exit\("
        r"|TF_CPU_ALLOCATOR_USE_BFC"
    )
    fast = SRC / "_compat" / "fast"
    outside = [f for f in SRC.rglob("*.py") if fast not in f.parents]
    outside.remove(SRC / "_compat" / "__init__.py")  # the table of what each trick reaches
    found = [
        f"{f.relative_to(SRC)}:{i}"
        for f in outside
        for i, line in enumerate(f.read_text().splitlines(), 1)
        if tricky.search(line)
    ]
    assert found == []
    read = re.compile(rf'(\.get\(|\[)\s*(SPEED_TRICKS_ENV|"{SPEED_TRICKS_ENV}")')
    readers = [f.relative_to(SRC).as_posix() for f in SRC.rglob("*.py")
               if any(read.search(line) for line in f.read_text().splitlines()
                      if ">>>" not in line)]  # fmt: skip
    assert readers == ["_compat/fast/switch.py"]


def test_the_switch_takes_1_0_or_the_tricks_to_keep():
    assert tricks_on({}) == tricks_on({SPEED_TRICKS_ENV: "1"}) == frozenset(TRICKS)
    assert tricks_on({SPEED_TRICKS_ENV: "0"}) == frozenset()
    assert tricks_on({SPEED_TRICKS_ENV: " bound_call , end_process "}) == {
        "bound_call",
        "end_process",
    }
    assert trick_on("end_process", {SPEED_TRICKS_ENV: "bound_call"}) is False
    for bad in ("yes", "bound_call,warp_drive", ","):
        with pytest.raises(ConfigError, match=SPEED_TRICKS_ENV) as caught:
            tricks_on({SPEED_TRICKS_ENV: bad})
        assert all(name in str(caught.value) for name in TRICKS)
    # every trick is in the package's table, with its fallback, and in the guide
    guide = (ROOT / "docs" / "guide.md").read_text()
    for name in TRICKS:
        assert f"(``{name}``, :mod:" in " ".join(tfdp._compat.__doc__.split()), name
        assert f"`{name}`" in guide, name


def test_a_bad_switch_is_bad_input_to_the_command():
    """``tfdp`` says what the variable takes (exit 2, one line) and exits the plain way."""
    import os
    import subprocess
    import sys

    env = {**os.environ, SPEED_TRICKS_ENV: "fast", "PYTHONPATH": str(ROOT / "src")}
    argv = ["sampler", "--num-examples", "4", "--replicas", "2"]
    run = subprocess.run([sys.executable, "-m", "tfdp", *argv], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert run.returncode == 2 and run.stdout == "", (run.stdout, run.stderr)
    assert run.stderr.startswith(f"tfdp: error: {SPEED_TRICKS_ENV} must be 1"), run.stderr
    assert len(run.stderr.splitlines()) == 1, run.stderr


def test_attach_optimizer_is_read_by_callbacks_and_not_checkpointed(tmp_path):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(0.5)
    optimizer.build(model.trainable_variables)
    attach_optimizer(model, optimizer)
    assert model.optimizer is optimizer
    keys = [
        k
        for k, _ in tf.train.list_variables(
            tf.train.Checkpoint(model=model).write(str(tmp_path / "c"))
        )
    ]
    assert not [k for k in keys if "optimizer" in k]  # the model's checkpoint is unchanged
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    assert not loaded.compiled and getattr(loaded, "optimizer", None) is None
    for a, b in zip(loaded.weights, model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


class _Counted:
    """A ``tf.function``'s stand-in that counts the calls made through ``__call__``."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def get_concrete_function(self, *args):
        return self.fn.get_concrete_function(*args)

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def test_bound_call_runs_the_traced_function_on_the_same_distributed_iterator(mirrored_of, tricks):
    """What ``tf.function`` runs per call after its trace look-up, on a distributed iterator;
    off, each call is ``fn(*args)`` (the look-up included). The values are the same."""
    strategy = mirrored_of(2)
    ds = tf.data.Dataset.range(40).batch(4)
    iterator = iter(strategy.experimental_distribute_dataset(ds))

    @tf.function
    def step(it, scale):
        out = strategy.run(lambda x: tf.reduce_sum(x) * scale, args=(next(it),))
        return strategy.reduce("SUM", out, axis=None)

    scale = tf.constant(10, tf.int64)
    counted = _Counted(step)
    bound = bound_call(counted, iterator, scale)
    got = [int(bound()), int(step(iterator, scale)), int(bound()), int(bound())]
    assert got == [10 * sum(range(4 * i, 4 * i + 4)) for i in range(4)]  # one stream, in order
    assert step.experimental_get_tracing_count() == 1  # the same trace
    assert counted.calls == (0 if tricks else 3)  # on: no call through tf.function's __call__
    tf.config.run_functions_eagerly(True)
    try:
        assert int(bound_call(step, iterator, scale)()) == 10 * sum(range(16, 20))
    finally:
        tf.config.run_functions_eagerly(False)


def test_gradients_reduced_hands_the_optimizer_summed_gradients(mirrored_of):
    """Keras all-reduces replica-context gradients itself; inside, it takes them as given."""
    strategy = mirrored_of(2)
    with strategy.scope():
        v = keras.Variable(np.zeros(2, "float32"))
        opt = keras.optimizers.SGD(1.0)
        opt.build([v])

    def step(reduce_first: bool) -> None:
        def replica() -> None:
            g = tf.ones(2)  # every replica's part: 1
            if reduce_first:
                g = tf.distribute.get_replica_context().all_reduce("SUM", g)  # 2
            opt.apply_gradients([(g, v)])

        strategy.run(replica)

    tf.function(lambda: step(False))()
    np.testing.assert_array_equal(v.numpy(), [-2.0, -2.0])  # Keras summed the parts

    @tf.function
    def reduced_step():
        with gradients_reduced(opt):
            step(True)

    reduced_step()
    np.testing.assert_array_equal(v.numpy(), [-4.0, -4.0])  # the sum applied once, not twice
    assert "_all_reduce_sum_gradients" not in vars(opt)
    assert int(opt.iterations.numpy()) == 2
    with gradients_reduced(opt):  # re-entrant: set until the last one leaves
        with gradients_reduced(opt):
            pass
        assert "_all_reduce_sum_gradients" in vars(opt)
    assert "_all_reduce_sum_gradients" not in vars(opt)


def test_lightly_optimized_map_is_the_map_instantiated_on_one_device_with_light_rewrites(tricks):
    """The map's function carries the attribute that makes tf.data skip Grappler; its call of
    ``fn`` carries the light configuration; the values are ``Dataset.map``'s, in order. Off, it
    is ``Dataset.map`` itself."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    @tf.function(input_signature=[tf.TensorSpec([], tf.int64)], autograph=False)
    def fn(x):
        image = tf.cast(tf.fill([3, 4], x), tf.float32)
        return tf.reduce_sum(tf.image.flip_left_right(image[..., None])) + 0.5, x * x

    ds = tf.data.Dataset.range(50)
    light = lightly_optimized_map(ds, fn, tf.data.AUTOTUNE)
    want = list(ds.map(fn, tf.data.AUTOTUNE, deterministic=True).as_numpy_iterator())
    assert [tuple(map(float, v)) for v in light.as_numpy_iterator()] == [
        tuple(map(float, v)) for v in want
    ]
    assert light.element_spec == ds.map(fn).element_spec
    definition = light._functions()[0].function.function_def
    if not tricks:  # the fallback: tf.data's own map, fully optimised by each iterator
        assert "experimental_ints_on_device" not in definition.attr
        assert isinstance(light, type(ds.map(fn, tf.data.AUTOTUNE)))
        return

    assert definition.attr["experimental_ints_on_device"].b  # tf.data: no multi-device, no Grappler
    calls = ("PartitionedCall", "StatefulPartitionedCall")
    (call,) = [n for n in definition.node_def if n.op in calls]
    config = config_pb2.ConfigProto.FromString(call.attr["config_proto"].s)
    rewrites, toggle = config.graph_options.rewrite_options, rewriter_config_pb2.RewriterConfig
    assert rewrites.disable_tfg_optimizer and rewrites.memory_optimization == toggle.NO_MEM_OPT
    assert rewrites.function_optimization == toggle.ON
    assert rewrites.arithmetic_optimization == toggle.OFF
    assert rewrites.meta_optimizer_iterations == toggle.ONE
    # ... and only there: a call traced afterwards has the thread's usual configuration
    from tensorflow.python.eager import context

    after = context.context().function_call_options.config_proto_serialized
    assert not config_pb2.ConfigProto.FromString(
        after
    ).graph_options.rewrite_options.disable_tfg_optimizer


def test_fit_step_overrides_are_traced_by_model_fit_and_see_each_replicas_gradients(mirrored_of):
    """model.fit traces the instance's train_step; Keras's train_step calls the instance's
    apply_gradients once per replica, in its replica context, with that replica's own gradient;
    outside, fit traces the class's methods again."""
    strategy = mirrored_of(2)
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
        model.compile(keras.optimizers.SGD(0.0), "mse")
        calls = tf.Variable(
            0.0,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
        )
        grad_sum = tf.Variable(
            0.0,
            synchronization=tf.VariableSynchronization.ON_READ,
            aggregation=tf.VariableAggregation.SUM,
        )
    x = np.array([[1.0], [2.0]], "float32")  # one row per replica: distinct gradients
    y = np.zeros((2, 1), "float32")
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)  # a cached train function
    traced = []

    def step(original):
        def wrapped(data):
            traced.append("step")
            return original(data)

        return wrapped

    def apply(original):
        def wrapped(grads_and_vars, *args, **kwargs):
            grads_and_vars = list(grads_and_vars)
            assert not tf.distribute.in_cross_replica_context()  # a replica context
            calls.assign_add(1.0)
            grad_sum.assign_add(tf.reduce_sum(grads_and_vars[0][0]))
            return original(grads_and_vars, *args, **kwargs)

        return wrapped

    with fit_step_overrides(model, train_step=step, apply_gradients=apply):
        model.fit(x, y, batch_size=2, epochs=2, verbose=0, shuffle=False)
    assert traced == ["step", "step"]  # traced once, inside: once per replica
    assert float(calls.numpy()) == 2 * 2  # 2 replicas x 2 steps
    w = float(model.layers[0].kernel.numpy()[0, 0])  # lr 0: the kernel never moves
    # mse's gradient for the one row x of a replica: 2 * (w x - 0) * x, divided by the 2 replicas
    # (Keras scales a replica's mean loss so that the sum is the global mean); per step, the sum
    # of the two replicas' own gradients (not all-reduced: each is added once):
    per_step = sum(2 * w * v * v / 2 for v in (1.0, 2.0))
    np.testing.assert_allclose(float(grad_sum.numpy()), 2 * per_step, rtol=1e-5)
    assert "train_step" not in vars(model) and "apply_gradients" not in vars(model.optimizer)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0, shuffle=False)
    assert len(traced) == 2 and float(calls.numpy()) == 4  # outside: the class's methods


def test_configure_heartbeat_is_kept_by_the_multi_worker_strategy(tmp_path):
    """In a fresh process: the coordination service configured before MWMS is the one it uses."""
    import json
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "import json, tensorflow as tf\n"
        "from tensorflow.python.eager import context\n"
        "from tfdp._compat.process import configure_heartbeat\n"
        "cluster = json.loads(__import__('os').environ['TF_CONFIG'])['cluster']\n"
        "print('SET', configure_heartbeat(cluster, 'worker', 42.5))\n"
        "print('AGAIN', configure_heartbeat(cluster, 'worker', 1.0))\n"
        "tf.distribute.MultiWorkerMirroredStrategy()\n"
        "c = context.context().coordination_service\n"
        "print('CONFIG', c.heartbeat_timeout_in_ms, c.service_leader, c.service_type,\n"
        "      [(j.name, j.num_tasks) for j in c.coordinated_job_list])\n"
        "from tfdp._compat.fast.process import end_process, release_in_background\n"
        "from tfdp._compat.process import in_coordinated_job\n"
        "print('COORDINATED', in_coordinated_job())\n"
        "class Slow:\n"
        "    def __del__(self): __import__('time').sleep(1); print('RELEASED', flush=True)\n"
        "release_in_background([Slow()])\n"
        "end_process(7)  # a task of a job: the usual exit (it waits for the release)\n"
    )
    tf_config = {
        "cluster": {"worker": [f"127.0.0.1:{port}"]},
        "task": {"type": "worker", "index": 0},
    }
    env = {
        **os.environ,
        "TF_CONFIG": json.dumps(tf_config),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)  # fmt: skip
    out = run.stdout
    assert run.returncode == 7, run.stderr[-3000:]
    assert "SET True" in out and "AGAIN False" in out  # set once; a second call changes nothing
    assert "CONFIG 42500 /job:worker/replica:0/task:0 standalone [('worker', 1)]" in out, out
    assert "COORDINATED True" in out and "RELEASED" in out, out
    assert not in_coordinated_job()  # this process: one-process strategies only


def test_prefer_bfc_cpu_allocator_gives_tf_an_allocator_that_keeps_freed_memory():
    """In fresh processes: with the variable, TensorFlow's host allocator is a BFC one (it has
    memory stats, which malloc's lacks) and ten 64 MiB buffers in turn fault their pages in
    about once; without it, every buffer faults anew (the fault really happens)."""
    import os
    import subprocess
    import sys

    from tfdp._compat.fast.process import CPU_ALLOCATOR_ENV, prefer_bfc_cpu_allocator

    code = (
        "import resource, tensorflow as tf\n"
        "f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
        "for _ in range(10):\n"
        "    x = tf.fill([2**24], 1.0); float(x[-1]); del x\n"
        "print('PAGES', (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 2**14)\n"
        "try:\n"
        "    print('STATS', tf.config.experimental.get_memory_info('CPU:0')['peak'] >= 2**26)\n"
        "except ValueError:\n"
        "    print('STATS', False)\n"
    )
    out = {}
    for choice in ("bfc", "malloc"):
        env = {k: v for k, v in os.environ.items() if k != CPU_ALLOCATOR_ENV}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        # Where TensorFlow turns oneDNN on (CPUs with AVX-512), its CPU allocator keeps freed
        # memory whatever the variable says: compared with oneDNN off, the control faults anew.
        env["TF_ENABLE_ONEDNN_OPTS"] = "0"
        if choice == "bfc":
            prefer_bfc_cpu_allocator(env)
        text = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=300, check=True).stdout  # fmt: skip
        out[choice] = dict(
            line.split() for line in text.splitlines() if line[:5] in ("STATS", "PAGES")
        )
    assert out["bfc"]["STATS"] == "True" and out["malloc"]["STATS"] == "False", out
    assert float(out["bfc"]["PAGES"]) < 2.0 < 8.0 < float(out["malloc"]["PAGES"]), out
    # The trick off in the environment of the process to come: TensorFlow's own allocator.
    env = {SPEED_TRICKS_ENV: "end_process,bound_call"}
    prefer_bfc_cpu_allocator(env)
    assert env == {SPEED_TRICKS_ENV: "end_process,bound_call"}


def test_weight_decay_applies_reads_exclusions_on_a_replicas_component(mirrored_of):
    """What ``exclude_from_weight_decay`` set (variables, a name pattern), read for the
    mirrored variable and for each replica's component (what ``update_step`` is given)."""
    strategy = mirrored_of(2)
    with strategy.scope():
        w, b = keras.Variable([[1.0]], name="kernel"), keras.Variable([1.0], name="bias")
        norm = keras.Variable([1.0], name="norm_scale")
        opt = keras.optimizers.SGD(weight_decay=0.1)
        opt.exclude_from_weight_decay(var_list=[b], var_names=["norm"])
    for var, decays in ((w, True), (b, False), (norm, False)):
        assert weight_decay_applies(opt, var) is decays
        for component in strategy.experimental_local_results(var.value):
            assert weight_decay_applies(opt, component) is decays


def test_decays_in_update_step_turns_kerass_own_weight_decay_off():
    """Keras's SGD decays apart from its update (in ``_apply_weight_decay``); a subclass with
    the mixin first does not, and keeps ``weight_decay`` as its attribute and config."""

    class Own(DecaysInUpdateStep, keras.optimizers.SGD):
        pass

    out = []
    for kind in (keras.optimizers.SGD, Own):
        w = keras.Variable([[2.0]])
        opt = kind(0.5, weight_decay=0.1)
        opt.apply_gradients([(tf.zeros((1, 1)), w)])
        out.append(float(w.numpy()[0, 0]))
        assert opt.weight_decay == opt.get_config()["weight_decay"] == 0.1
    assert out == [pytest.approx(2.0 - 2.0 * 0.1 * 0.5), 2.0]


def test_hold_untracked_keeps_a_layer_out_of_weights_and_checkpoints(tmp_path):
    """A model holding another (a distillation teacher): assigned the usual way Keras tracks it
    (its weights, its checkpoint keys); through hold_untracked neither."""

    class Holder(keras.Model):
        def __init__(self, held, untracked):
            super().__init__()
            self.own = keras.layers.Dense(1, name="own")
            self.own.build((None, 2))
            if untracked:
                hold_untracked(self, "teacher", held)
            else:
                self.teacher = held

    for untracked in (False, True):
        held = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, name="held")])
        holder = Holder(held, untracked)
        assert holder.teacher is held
        assert len(holder.weights) == (2 if untracked else 4)
        path = tf.train.Checkpoint(model=holder).write(str(tmp_path / f"c{untracked}"))
        keys = [k for k, _ in tf.train.list_variables(path) if k.startswith("model/teacher")]
        assert bool(keys) is not untracked


def test_keras_hubs_vit_layers_are_where_and_what_tfdp_models_builds_on():
    from keras_hub import __version__ as version

    from tfdp._compat.keras_hub import CONFIG_ONLY_KEYS, vit_layers

    assert _major_minor(version) == CHECKED_KERAS_HUB
    patches, distilled, block_type = vit_layers()
    for cls, kwargs in [
        (patches, {"image_size": (32, 32), "patch_size": (16, 16), "hidden_dim": 8}),
        (distilled, {"image_size": (32, 32), "patch_size": (16, 16), "hidden_dim": 8}),
        (block_type, {"num_heads": 2, "hidden_dim": 8, "mlp_dim": 16}),
    ]:
        layer = cls(**kwargs)
        config = layer.get_config()
        extra = CONFIG_ONLY_KEYS[cls.__name__]
        assert set(extra) <= set(config)
        with pytest.raises(TypeError, match="Unrecognized keyword arguments"):
            cls.from_config(config)  # keras-hub's own config does not load back
        cls.from_config({k: v for k, v in config.items() if k not in extra})
    block = block_type(num_heads=2, hidden_dim=8, mlp_dim=16)
    block.build((None, 5, 8))
    assert all(isinstance(getattr(block, name), keras.layers.Layer) for name in BLOCK_SUBLAYERS)
    # tfdp.models.weights finds the attention's weights by these paths inside a block
    assert sorted(w.path.split("/", 1)[1] for w in block.weights) == sorted(
        [f"mha/{n}/{k}" for n in ("query", "key", "value", "attention_output")
         for k in ("kernel", "bias")]
        + [f"{n}/{k}" for n in ("ln_1", "ln_2") for k in ("gamma", "beta")]
        + [f"mlp/{n}/{k}" for n in ("dense_1", "dense_2") for k in ("kernel", "bias")]
    )  # fmt: skip


def test_the_window_path_with_mixup_gives_the_same_batches_with_the_tricks_off(
    tmp_path, monkeypatch
):
    """Where a trick is used in the input (the window loader's and the batch stages' lightly
    optimised maps), each input built and read with the switch on and off: the same batches,
    bit for bit; the graphs hold the trick's mark on, none off."""
    from tensorflow.core.framework import graph_pb2

    from photos import write_folder
    from tfdp import augment
    from tfdp.input import DistributedInput
    from tfdp.sources import ImageFolderSource

    root = write_folder(tmp_path / "photos", 12, classes=3, sizes=((30, 40), (41, 33)), seed=8)
    runs = {}
    for switch in ("1", "0"):
        monkeypatch.setenv(SPEED_TRICKS_ENV, switch)
        stages = [augment.RandomResizedCrop(16), augment.RandomFlip(), augment.ToFloat(1.0),
                  augment.Mixup(0.8, 1.0, num_classes=3)]  # fmt: skip
        inp = DistributedInput(None, ImageFolderSource(root), sampler="repeat_aug",
                               sampler_options={"num_repeats": 2, "selected_round": 0},
                               batch_size=4, augment=augment.Compose(stages), seed=3)  # fmt: skip
        assert type(inp.loader).__name__ == "WindowedBatches"
        ds = inp.epoch(1)
        graph = graph_pb2.GraphDef.FromString(ds._as_serialized_graph().numpy())
        functions = graph.library.function
        light = sum(f.attr["experimental_ints_on_device"].b for f in functions)
        assert light >= 1 if switch == "1" else light == 0
        runs[switch] = [[t.numpy() for t in tf.nest.flatten(batch)] for batch in ds]
    assert len(runs["1"]) == 3
    for on, off in zip(runs["1"], runs["0"], strict=True):
        for a, b in zip(on, off, strict=True):
            np.testing.assert_array_equal(a, b)
    targets = np.concatenate([batch[1] for batch in runs["1"]])
    assert (targets.max(1) < 0.99).any()  # Mixup mixed: its rows were written
