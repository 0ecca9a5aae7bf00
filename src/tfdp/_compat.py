"""Every reach into private or undocumented TensorFlow / Keras behaviour, behind a named function.

This module owns the places where tfdp depends on something TensorFlow or
Keras do not promise: an attribute with a leading underscore, the key format
of object-based checkpoints, the path Keras gives its seed generators'
variables, a ``tf.__internal__`` function, the thread-locality of a strategy
scope. Each is one function here, and ``tests/test_compat.py`` pins each to
the versions it was checked on (:data:`CHECKED_VERSIONS`): after an upgrade,
a failing test there says which reach to re-check, instead of a wrong
number far away.

============================  ===================================================================
function                      what it relies on
============================  ===================================================================
compiled_metrics_container    ``model._compile_metrics``: Keras 3's container of compiled metrics
checkpoint_value_key          ``<name>/.ATTRIBUTES/VARIABLE_VALUE``: a variable's key in a
                              ``tf.train.Checkpoint`` (object-graph checkpoints)
seed_generator_states         Keras ``SeedGenerator`` state variables have ``seed_generator`` in
                              their ``path``, and are not saved with the model
backing_variable              ``KerasVariable.value`` is the backing ``tf.Variable``
attach_optimizer              an attribute set with ``object.__setattr__`` on a Keras model is
                              not tracked (not in its checkpoints or saved weights)
supports_no_merge_call        ``tf.__internal__.distribute.strategy_supports_no_merge_call()``
call_outside_strategy         a strategy scope (its variable creator) is thread-local: a fresh
                              thread creates plain host variables
gradients_reduced             Keras's TensorFlow optimizer all-reduces the gradients it gets in a
                              replica context in ``_all_reduce_sum_gradients`` (an instance
                              attribute of that name replaces it)
fit_step_overrides            ``model.fit`` traces ``model.train_step`` (an instance attribute
                              shadows the method) once, into ``model.train_function`` (None: traced
                              again); Keras's ``train_step`` hands ``optimizer.apply_gradients``
                              (likewise) each replica's own gradients, in the replica context
bound_call                    ``ConcreteFunction._call_flat`` and ``function_type.bind`` /
                              ``unpack_inputs``: what ``tf.function`` itself runs per call, after
                              looking the trace up
lightly_optimized_map         tf.data instantiates a function with ``experimental_ints_on_device``
                              on the iterator's device alone, without Grappler (the attribute its
                              prefetch-to-device functions carry); a call op's ``config_proto``
                              (set from the thread's ``function_call_options`` when it is traced)
                              is the Grappler configuration of the called function
optimizer_slot                ``optimizer._get_variable_index(variable)``: the index of a variable
                              (or a replica's component of a distributed one) in the lists of
                              slots an optimizer's ``build`` made, as Keras's own ``update_step``
                              finds them
rows_in_place                 ``tf.raw_ops.Empty(init=False)`` allocates a buffer it does not
                              fill, and ``tf.raw_ops.InplaceUpdate`` writes rows into its input's
                              own memory (its output aliases the input: no copy)
prefer_bfc_cpu_allocator      ``TF_CPU_ALLOCATOR_USE_BFC=true`` (an environment variable read when
                              TensorFlow first allocates host memory) makes its CPU allocator a
                              BFC allocator that keeps freed memory for reuse
release_in_background         tf.data's autotuning thread (one per iterator) does not always see
                              its iterator's cancellation: destroying the iterator then waits to
                              the end of that thread's optimisation period (it doubles from 10 ms
                              to 60 s while the iterator lives)
in_coordinated_job            ``context.context().coordination_service``: the eager context's
                              coordination-service configuration (None outside a multi-worker job)
end_process                   CPython's exit sequence, ``threading._shutdown()`` then
                              ``atexit._run_exitfuncs()``, run by hand before ``os._exit``
close_failed_reduce_pools     an eager all-reduce of ``CollectiveAllReduce`` runs its devices on a
                              ``multiprocessing.pool.ThreadPool`` it closes only on success: a
                              failed collective leaves it open, a local of a frame in the error's
                              traceback (finalised at interpreter exit, its pipe may be closed:
                              "Exception ignored in Pool.__del__ ... Bad file descriptor")
configure_heartbeat           ``context.configure_coordination_service`` before
                              MultiWorkerMirroredStrategy is built: the strategy then keeps it
                              (it configures its own only when none is set); its
                              ``heartbeat_timeout_in_ms`` is when a silent task is declared lost
============================  ===================================================================

Example:
    >>> checkpoint_value_key("step")
    'step/.ATTRIBUTES/VARIABLE_VALUE'
"""

from __future__ import annotations

import atexit
import os
import queue
import sys
import threading
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import contextmanager, suppress
from typing import Any, NoReturn, TypeVar

from tfdp.errors import ConfigTypeError

__all__ = [
    "CHECKED_VERSIONS",
    "RowsInPlace",
    "attach_optimizer",
    "backing_variable",
    "bound_call",
    "call_outside_strategy",
    "checkpoint_value_key",
    "close_failed_reduce_pools",
    "compiled_metrics_container",
    "configure_heartbeat",
    "end_process",
    "fit_step_overrides",
    "gradients_reduced",
    "in_coordinated_job",
    "lightly_optimized_map",
    "optimizer_slot",
    "prefer_bfc_cpu_allocator",
    "release_in_background",
    "seed_generator_states",
    "supports_no_merge_call",
    "wait_for_releases",
]

#: The TensorFlow and Keras versions (major.minor) every function here was checked on.
CHECKED_VERSIONS = {"tensorflow": "2.21", "keras": "3.15"}

T = TypeVar("T")


def compiled_metrics_container(model: Any) -> Any | None:
    """Keras 3's container of a compiled model's metrics (``model._compile_metrics``), or None.

    It has ``built``, ``build(y_true, y_pred)`` and ``metrics``; ``None`` when
    the model was compiled without metrics.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> m.compile(loss="mse", metrics=["mae"])
        >>> compiled_metrics_container(m).built
        False
    """
    return getattr(model, "_compile_metrics", None)


def optimizer_slot(optimizer: Any, slots: list[Any], variable: Any) -> Any:
    """The slot of ``variable`` in ``slots`` (a list ``optimizer.build`` made in variable order).

    Inside ``update_step`` under a strategy ``variable`` is a replica's
    component; Keras's ``_get_variable_index`` maps it to its index as Keras's
    own optimizers do.

    Example:
        >>> import keras
        >>> v = keras.Variable([1.0, 2.0]); opt = keras.optimizers.SGD(momentum=0.9)
        >>> opt.build([v])
        >>> optimizer_slot(opt, opt.momentums, v) is opt.momentums[0]
        True
    """
    return slots[optimizer._get_variable_index(variable)]


def checkpoint_value_key(name: str) -> str:
    """The key of the variable tracked as ``name`` on a ``tf.train.Checkpoint``, in its files.

    What ``tf.train.load_checkpoint(path).get_tensor(key)`` takes.

    Example:
        >>> checkpoint_value_key("data_position")
        'data_position/.ATTRIBUTES/VARIABLE_VALUE'
    """
    return f"{name}/.ATTRIBUTES/VARIABLE_VALUE"


def backing_variable(variable: Any) -> Any:
    """The ``tf.Variable`` behind a Keras variable (``variable.value``); others as they are.

    Only for Keras variables and plain tensors: a ``tf.Variable`` has a
    ``value`` *method*, which this returns as is (as the call sites always did).

    Example:
        >>> import keras, tensorflow as tf
        >>> isinstance(backing_variable(keras.Variable(1.0)), tf.Variable)
        True
    """
    return getattr(variable, "value", variable)


def attach_optimizer(model: Any, optimizer: Any) -> None:
    """Makes ``model.optimizer`` the optimizer a custom loop trains it with, untracked.

    Keras callbacks (``TensorBoard``'s learning-rate scalar,
    ``ReduceLROnPlateau``, ``LearningRateScheduler``) read ``model.optimizer``,
    which only ``compile`` sets. Set as Keras would (``model.optimizer = ...``)
    it would become a checkpoint dependency of the model and move the
    optimizer's keys under ``model/optimizer/``; set with
    ``object.__setattr__`` the model's checkpoints and saved files stay as they
    are (tfdp checkpoints the optimizer beside the model).

    Example:
        >>> import tempfile, keras, tensorflow as tf
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> attach_optimizer(model, keras.optimizers.SGD(0.25))
        >>> float(model.optimizer.learning_rate)
        0.25
        >>> path = tf.train.Checkpoint(model=model).write(tempfile.mkdtemp() + "/c")
        >>> [key for key, _ in tf.train.list_variables(path) if "optimizer" in key]
        []
    """
    object.__setattr__(model, "optimizer", optimizer)


def seed_generator_states(model: Any) -> list[Any]:
    """The state variables of a Keras model's ``SeedGenerator`` objects (dropout, random layers).

    ``tf.train.Checkpoint(model=...)`` does not save them: an exact resume
    must. Found by the ``seed_generator`` in their variable path.

    Example:
        >>> import keras
        >>> m = keras.Sequential([keras.Input((2,)), keras.layers.Dropout(0.5)])
        >>> len(seed_generator_states(m))
        1
    """
    return [backing_variable(v) for v in model.variables if "seed_generator" in v.path]


def supports_no_merge_call() -> bool:
    """Whether the current strategy can all-reduce in a replica context without a merge call.

    Example:
        >>> supports_no_merge_call() in (True, False)
        True
    """
    import tensorflow as tf

    return bool(tf.__internal__.distribute.strategy_supports_no_merge_call())


def call_outside_strategy(fn: Callable[[], T]) -> T:
    """Call ``fn()`` in a fresh thread: no ``strategy.scope()``, device or variable creator.

    A strategy scope (and its variable creator) is thread-local in TensorFlow,
    and there is no public way to leave one temporarily; variables created in
    a fresh thread are plain ``ResourceVariable`` objects on the host. An
    exception of ``fn`` is re-raised in the caller's thread.

    Example:
        >>> call_outside_strategy(lambda: 6 * 7)
        42
    """
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = fn()
        except BaseException as e:  # re-raised in the caller's thread
            result["error"] = e

    thread = threading.Thread(target=run, name="tfdp-outside-strategy")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


_RELEASE_QUEUE: queue.Queue[list[Any]] = queue.Queue()
_RELEASE_LOCK = threading.Lock()
_RELEASE_STARTED: list[bool] = []  # one release thread per process, started at the first use
#: The name of the thread on which :func:`release_in_background` drops what it is handed.
RELEASE_THREAD_NAME = "tfdp-release"


def release_in_background(held: list[Any]) -> None:
    """Drop the objects of ``held`` (emptied in place) on a daemon thread, not the caller's.

    In TensorFlow 2.21, destroying a ``tf.data`` iterator waits for the
    iterator's autotuning thread, and that thread does not always see the
    cancellation: it then sleeps to the end of its optimisation period, which
    doubles from 10 ms up to 60 s while the iterator lives. An iterator read
    for 3 s took about 2 s to destroy in 1 to 6 of 8 drops, depending on the run
    (``benchmarks/bench_iterator_release.py``); the wait grows with the
    iterator's age. A training loop that
    drops its training stream at the end of ``fit`` and its evaluation
    iterator after every evaluation would wait that long each time; handed
    here, they are destroyed on one daemon thread while the caller goes on.
    The caller must keep no other reference to them. A process waits at its
    exit for what it handed over to be released.

    Example:
        >>> import tensorflow as tf
        >>> held = [iter(tf.data.Dataset.range(3))]
        >>> release_in_background(held); held
        []
    """
    with _RELEASE_LOCK:
        if not _RELEASE_STARTED:
            # A daemon thread still inside TensorFlow's teardown when the interpreter finalises
            # is unwound by force, and the process aborts ("FATAL: exception not rethrown"):
            # at exit, what was handed over is released first.
            atexit.register(wait_for_releases)
            threading.Thread(target=_release_forever, name=RELEASE_THREAD_NAME, daemon=True).start()
            _RELEASE_STARTED.append(True)
    _RELEASE_QUEUE.put(list(held))
    held.clear()


def _release_forever() -> None:
    """The release thread: drop each list of objects handed over, one list at a time."""
    while True:
        batch = _RELEASE_QUEUE.get()
        batch.clear()  # the objects' last references: they are destroyed here
        del batch
        _RELEASE_QUEUE.task_done()


def wait_for_releases() -> None:
    """Return once everything handed to :func:`release_in_background` so far is dropped.

    Example:
        >>> import weakref
        >>> class Box: pass
        >>> held = [Box()]; alive = weakref.ref(held[0])
        >>> release_in_background(held); wait_for_releases(); alive() is None
        True
    """
    _RELEASE_QUEUE.join()


def in_coordinated_job() -> bool:
    """Whether this process is a task of a multi-worker job (TensorFlow's coordination service).

    Reads whether the eager context has a coordination service configured (as
    ``MultiWorkerMirroredStrategy`` or :func:`configure_heartbeat` do); False,
    without importing TensorFlow, in a process that has not imported it.

    Example:
        >>> in_coordinated_job()  # a one-process run
        False
    """
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context

    return context.context().coordination_service is not None


def end_process(status: int) -> NoReturn:
    """End the process with ``status`` as the interpreter would, but skip TensorFlow's teardown.

    The interpreter's exit first joins the threads that are not daemons and
    runs the ``atexit`` handlers; then it finalises every module and object,
    and TensorFlow's C++ runtime tears down. That teardown takes about a
    second, and what :func:`release_in_background` was handed must be released
    first (:func:`wait_for_releases`): a ``tf.data`` iterator whose
    autotuning thread sleeps waits out its period -- seconds after a short
    run, up to a minute after a long one -- after the work is done. Here the
    threads are joined and every ``atexit`` handler but that wait runs (the
    interpreter's own order, so a user's handlers, logging's flush and
    ``concurrent.futures``' joins still run), the standard streams are flushed,
    and the process ends (``os._exit``): the iterators' memory goes with it.

    A task of a multi-worker job (:func:`in_coordinated_job`) exits the usual
    way instead: its teardown tells the job's coordination service that it
    ended, which the other tasks wait for.

    Args:
        status: The process's exit status.

    Example:
        >>> import subprocess, sys
        >>> code = ("import atexit; from tfdp._compat import end_process; "
        ...         "atexit.register(print, 'atexit ran'); print('done'); end_process(3)")
        >>> run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        >>> run.returncode, run.stdout.split()
        (3, ['done', 'atexit', 'ran'])
    """
    if in_coordinated_job():
        sys.exit(status)
    threading._shutdown()  # type: ignore[attr-defined]  # what Py_FinalizeEx does first
    atexit.unregister(wait_for_releases)
    atexit._run_exitfuncs()  # type: ignore[attr-defined]  # then the atexit handlers
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()
    os._exit(status)


def close_failed_reduce_pools(error: BaseException) -> int:
    """Close the thread pools a failed eager all-reduce left open; return how many were open.

    TensorFlow 2.21's ``CollectiveAllReduce`` runs an eager all-reduce (a
    sync-on-read metric read, ``strategy.reduce``) on a fresh
    ``multiprocessing.pool.ThreadPool`` that it closes only when every device
    succeeded. When a peer is lost mid-collective, the pool stays open, held by
    a frame of ``error``'s traceback; finalised at interpreter exit, after its
    pipe may be closed, it prints "Exception ignored in ... Pool.__del__ ...
    Bad file descriptor". Closing it when the error is handled keeps the exit
    clean. Closing never blocks (the pool's threads are not joined).

    Example:
        >>> from multiprocessing.pool import ThreadPool
        >>> def failing_reduce():
        ...     pool = ThreadPool(1)
        ...     raise ConnectionError("a peer was lost mid-collective")
        >>> try:
        ...     failing_reduce()
        ... except ConnectionError as err:
        ...     print(close_failed_reduce_pools(err), close_failed_reduce_pools(err))
        1 0
    """
    from multiprocessing.pool import RUN, Pool

    closed, tb = 0, error.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            if isinstance(value, Pool) and value._state == RUN:
                value.close()
                closed += 1
        tb = tb.tb_next
    return closed


_REDUCED_LOCK = threading.Lock()
_REDUCED_DEPTH: dict[int, int] = {}


@contextmanager
def gradients_reduced(optimizer: Any) -> Iterator[None]:
    """Inside, ``optimizer.apply_gradients`` takes gradients that are already all-reduced.

    Keras's TensorFlow optimizer all-reduces (sums over the replicas) the
    gradients it is given in a replica context, in ``_all_reduce_sum_gradients``,
    before its merge call applies them. A step that has summed its gradients
    already (to check them, clip them, or fold other values into the same
    collective) sets that method to the identity on the optimizer instance
    while it traces the update, and only then: any other update (a custom
    train step's ``optimizer.apply``) is reduced by Keras as always. Nothing
    else of the update changes: learning rate, weight decay, iteration count,
    EMA, constraints. Re-entrant: the replica threads of a
    ``call_for_each_replica`` may each enter it around their own part of one
    update (they run one at a time, and each calls the method before its first
    merge call); the method comes back when the last one leaves.

    Example:
        >>> import keras
        >>> opt = keras.optimizers.SGD(0.5)
        >>> with gradients_reduced(opt):
        ...     opt._all_reduce_sum_gradients([(1.0, None)])
        [(1.0, None)]
        >>> "_all_reduce_sum_gradients" in vars(opt)
        False
    """
    name = "_all_reduce_sum_gradients"
    if not hasattr(optimizer, name):  # not Keras's TensorFlow optimizer: nothing to replace
        raise ConfigTypeError(
            f"optimizer must be a Keras optimizer of the TensorFlow backend "
            f"(keras.optimizers.*), got a {type(optimizer).__name__} without {name}: tfdp "
            "cannot hand it gradients it has all-reduced",
            argument="optimizer",
        )
    key = id(optimizer)
    with _REDUCED_LOCK:
        _REDUCED_DEPTH[key] = _REDUCED_DEPTH.get(key, 0) + 1
        if _REDUCED_DEPTH[key] == 1:
            object.__setattr__(optimizer, name, list)
    try:
        yield
    finally:
        with _REDUCED_LOCK:
            _REDUCED_DEPTH[key] -= 1
            if not _REDUCED_DEPTH[key]:
                del _REDUCED_DEPTH[key]
                object.__delattr__(optimizer, name)


#: A wrapper of a method: ``wrap(original) -> replacement``.
Wrapper = Callable[[Callable[..., Any]], Callable[..., Any]]


@contextmanager
def fit_step_overrides(
    model: Any, *, train_step: Wrapper | None = None, apply_gradients: Wrapper | None = None
) -> Iterator[None]:
    """Inside, ``model.fit`` runs a step that ``train_step`` / ``apply_gradients`` wrap.

    Keras 3 (TensorFlow backend) traces ``model.train_step`` into
    ``model.train_function`` the first time ``fit`` needs it, and its
    ``train_step`` updates through ``model.optimizer.apply_gradients``, handing
    it the replica's own gradients (in the replica context; the optimizer
    all-reduces them itself). Each wrapper gets the original method and returns
    its replacement, set on the instance; the cached train function is dropped
    on entry and on exit, so that ``fit`` traces the step with the replacements
    inside and without them afterwards. A custom ``train_step`` that updates
    through ``optimizer.apply`` does not reach ``apply_gradients``.

    Example:
        >>> import keras, numpy as np
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> model.compile("sgd", "mse")
        >>> calls = []
        >>> def counted(original):
        ...     def step(data):
        ...         calls.append("traced")
        ...         return original(data)
        ...     return step
        >>> with fit_step_overrides(model, train_step=counted):
        ...     _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2, verbose=0)
        >>> calls, "train_step" in vars(model), model.train_function is None
        (['traced'], False, True)
    """
    installed: list[tuple[Any, str]] = []
    for obj, name, wrap in (
        (model, "train_step", train_step),
        (model.optimizer, "apply_gradients", apply_gradients),
    ):
        if wrap is not None:
            setattr(obj, name, wrap(getattr(obj, name)))
            installed.append((obj, name))
    model.train_function = None  # traced again, with the replacements
    try:
        yield
    finally:
        for obj, name in reversed(installed):
            delattr(obj, name)  # the class's method again
        model.train_function = None


def bound_call(fn: Any, *args: Any) -> Callable[[], Any]:
    """A call of the ``tf.function`` ``fn`` on ``args``, bound once: ``() -> fn(*args)``.

    ``fn(*args)`` looks its trace up on every call: it computes the trace type
    of every argument, which for a distributed iterator means building its
    whole type spec in Python (about as long as a small training step on a
    CPU). The arguments of a training loop's call never change (the same
    iterator, the same step count), so this looks the trace up and flattens
    the arguments once, and each call then runs what ``fn(*args)`` runs after
    its look-up (TensorFlow's ``tracing_compilation.call_function``): the
    concrete function on the flat inputs and the current captures. The
    arguments are kept alive with the call. Under
    ``tf.config.run_functions_eagerly(True)`` it is plainly ``fn(*args)``.

    Example:
        >>> import tensorflow as tf
        >>> it = iter(tf.data.Dataset.range(5))
        >>> step = tf.function(lambda iterator: next(iterator) * 10)
        >>> call = bound_call(step, it)
        >>> [int(call()) for _ in range(3)]
        [0, 10, 20]
    """
    import tensorflow as tf

    if tf.config.functions_run_eagerly():
        return lambda: fn(*args)
    concrete = fn.get_concrete_function(*args)
    function_type = concrete.function_type
    flat = function_type.unpack_inputs(function_type.bind(*args))
    call_flat = concrete._call_flat

    def call() -> Any:
        return call_flat(flat, captured_inputs=concrete.captured_inputs)

    call.args = args  # type: ignore[attr-defined]  # the arguments live as long as the call
    return call


#: Grappler's passes kept for a :func:`lightly_optimized_map`'s function, one round: inlining
#: the calls, then dropping the Identity / NoOp nodes and control edges that inlining leaves.
_LIGHT_PASSES = ("function_optimization", "dependency_optimization")


@contextmanager
def _calls_optimized_lightly() -> Iterator[None]:
    """Function calls traced inside have Grappler run only :data:`_LIGHT_PASSES` on the callee."""
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
    from tensorflow.python.eager import context

    ctx = context.context()
    before = ctx.function_call_options
    config = config_pb2.ConfigProto.FromString(before.config_proto_serialized)
    rewrites = config.graph_options.rewrite_options
    toggle = rewriter_config_pb2.RewriterConfig
    for field in rewrites.DESCRIPTOR.fields:
        if field.enum_type is not None and field.enum_type.name == "Toggle":
            setattr(rewrites, field.name, toggle.ON if field.name in _LIGHT_PASSES else toggle.OFF)
    rewrites.disable_tfg_optimizer = True
    rewrites.memory_optimization = toggle.NO_MEM_OPT
    rewrites.meta_optimizer_iterations = toggle.ONE
    ctx.function_call_options = context.FunctionCallOptions(
        executor_type=before.executor_type, config_proto=config
    )
    try:
        yield
    finally:
        ctx.function_call_options = before


def lightly_optimized_map(
    dataset: Any, fn: Any, num_parallel_calls: int, deterministic: bool = True
) -> Any:
    """``dataset.map(fn, num_parallel_calls, deterministic)``, optimised lightly by each iterator.

    Every new iterator of a ``tf.data`` map instantiates the map's function
    as a multi-device function and runs the whole of Grappler over it: for a
    large function (tfdp's chunk loader, about 800 nodes once its calls are
    inlined) some 150 ms per iterator, most of it passes that do not speed it
    up (the MLIR ``tfg`` passes, the memory optimiser's static memory
    inference, arithmetic rewrites). Here the map's own function is a thin
    call of ``fn`` (a ``tf.function``), marked ``experimental_ints_on_device``
    -- as tf.data marks its own prefetch-to-device functions -- so that
    tf.data instantiates it on the iterator's device alone, without Grappler;
    the call instantiates ``fn`` when it first runs, with only Grappler's
    function inlining and dependency optimiser, one round (which keep its
    speed). The values are the map's.

    Args:
        dataset: The input dataset.
        fn: A ``tf.function`` taking an element's components (as ``Dataset.map``
            passes them).
        num_parallel_calls: As for ``Dataset.map`` (``tf.data.AUTOTUNE``; ``None``: one call
            at a time).
        deterministic: As for ``Dataset.map``.

    Example:
        >>> import tensorflow as tf
        >>> double = tf.function(lambda x: x * 2, autograph=False)
        >>> ds = lightly_optimized_map(tf.data.Dataset.range(4), double, tf.data.AUTOTUNE)
        >>> [int(v) for v in ds]
        [0, 2, 4, 6]
    """
    import tensorflow as tf
    from tensorflow.python.data.ops import dataset_ops, structured_function
    from tensorflow.python.ops import gen_dataset_ops

    from tfdp._autograph import plain

    class _LightMapDataset(dataset_ops.UnaryDataset):
        def __init__(self) -> None:
            self._name = None
            with _calls_optimized_lightly():
                self._map_func = structured_function.StructuredFunctionWrapper(
                    plain(fn),
                    "Dataset.map()",
                    dataset=dataset,
                    defun_kwargs={"experimental_ints_on_device": True},
                )
            variant = gen_dataset_ops.parallel_map_dataset_v2(
                dataset._variant_tensor,
                self._map_func.function.captured_inputs,
                f=self._map_func.function,
                num_parallel_calls=tf.convert_to_tensor(num_parallel_calls or 1, tf.int64),
                deterministic="true" if deterministic else "false",
                preserve_cardinality=True,
                **self._common_args,
            )
            super().__init__(dataset, variant)

        def _functions(self) -> list[Any]:
            return [self._map_func]

        @property
        def element_spec(self) -> Any:
            return self._map_func.output_structure

    return _LightMapDataset()


class RowsInPlace:
    """A batch ``[n, *row_shape]`` filled row by row in its own memory: no stack, no copy.

    What a loop that makes ``n`` rows one at a time would otherwise gather in
    a ``tf.TensorArray`` and ``stack`` (every row kept alive as a tensor of its
    own, then all copied into the batch). Here the batch is allocated once,
    uninitialised (``tf.raw_ops.Empty(init=False)``), and each row is written
    into it where it belongs (``tf.raw_ops.InplaceUpdate``, whose output is its
    input's buffer), so a row's tensor is freed as soon as it is written and
    its memory reused by the next row. For a batch of 224x224 float images
    that halved the page faults (and the system time) of tfdp's window path
    (bench_images). The values are those of a stack either way: if a
    TensorFlow version copied instead, only the speed would change. Every row
    must be written before the batch is read, and the batch threaded through
    the writes (each write's result is the next write's ``batch``).

    Example:
        >>> import tensorflow as tf
        >>> rows = RowsInPlace(2, [3], tf.float32)
        >>> batch = rows.write(rows.batch, 1, tf.constant([4.0, 5.0, 6.0]))
        >>> batch = rows.write(batch, 0, tf.constant([1.0, 2.0, 3.0]))
        >>> batch.numpy().tolist()
        [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    """

    def __init__(self, n: Any, row_shape: Any, dtype: Any) -> None:
        import tensorflow as tf

        shape = tf.concat([tf.reshape(tf.cast(n, tf.int32), [1]), tf.cast(row_shape, tf.int32)], 0)
        #: The batch to thread through :meth:`write`.
        self.batch = tf.raw_ops.Empty(shape=shape, dtype=dtype, init=False)

    @staticmethod
    def write(batch: Any, j: Any, row: Any) -> Any:
        """``batch`` with row ``j`` set to ``row``, written in ``batch``'s memory."""
        import tensorflow as tf

        return tf.raw_ops.InplaceUpdate(
            x=batch, i=tf.reshape(tf.cast(j, tf.int32), [1]), v=row[tf.newaxis]
        )


def configure_heartbeat(cluster: dict[str, Any], task_type: str, timeout: float) -> bool:
    """Set the coordination service's heartbeat timeout for the MultiWorkerMirroredStrategy to come.

    TensorFlow declares a task lost when the job's coordination service (hosted
    by the chief, else worker 0) hears no heartbeat from it for this long (its
    own default: 10 s), and then aborts every collective of the job. Call before
    the strategy is built: it configures the service the way the strategy would
    (standalone, the same leader and coordinated jobs), with this timeout.
    Returns False, changing nothing, for a task the service does not coordinate
    (not ``chief`` or ``worker``) or when the service is configured already.

    Example:
        >>> configure_heartbeat({"ps": ["h:1"]}, "ps", 30.0)  # not coordinated: nothing set
        False
    """
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2
    from tensorflow.python.eager import context

    jobs = [j for j in ("chief", "worker") if cluster.get(j)]
    ctx = context.context()
    if task_type not in jobs or ctx.coordination_service is not None:
        return False
    leader = "chief" if "chief" in jobs else "worker"
    ctx.configure_coordination_service(
        service_type="standalone",
        service_leader=f"/job:{leader}/replica:0/task:0",
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=j, num_tasks=len(cluster[j])) for j in jobs
        ],
        heartbeat_timeout_in_ms=int(timeout * 1000),
    )
    return True


#: TensorFlow's switch to a BFC allocator for host memory (read once, at its first allocation).
CPU_ALLOCATOR_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


def prefer_bfc_cpu_allocator(environ: MutableMapping[str, str]) -> None:
    """Ask the TensorFlow of a process not yet started (``environ``) for its BFC host allocator.

    TensorFlow's default host allocator is ``malloc``, and glibc maps every
    buffer of 32 MiB or more afresh (``mmap``) and unmaps it when freed: a
    DeiT batch of 64 224x224 float32 images (38.5 MB) faults its pages in
    anew at every step. The BFC allocator (growing as needed, up to
    ``TF_CPU_BFC_MEM_LIMIT_IN_MB``, 64 GiB by default) keeps freed memory for
    the next buffer: ``benchmarks/bench_images.py --deit-only`` measured 35
    instead of 1,900-2,600 page faults per image and about 1.5x the images/s.
    Values never change. An environment that sets the variable already
    keeps it (``TF_CPU_ALLOCATOR_USE_BFC=false``: malloc); it must be set before
    TensorFlow's first host allocation (the CLI and the launcher's workers).
    Where TensorFlow turns oneDNN on (CPUs with AVX-512), its host allocator
    keeps freed memory already, whatever the variable says.

    Example:
        >>> env = {}
        >>> prefer_bfc_cpu_allocator(env); env
        {'TF_CPU_ALLOCATOR_USE_BFC': 'true'}
        >>> env = {"TF_CPU_ALLOCATOR_USE_BFC": "false"}
        >>> prefer_bfc_cpu_allocator(env); env["TF_CPU_ALLOCATOR_USE_BFC"]
        'false'
    """
    environ.setdefault(CPU_ALLOCATOR_ENV, "true")
