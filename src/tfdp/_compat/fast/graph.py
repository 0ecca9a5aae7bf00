"""Speed tricks in calls and graphs, each with its public-API fallback (see :mod:`tfdp._compat`).

A ``tf.function`` call bound once, a tf.data map optimised lightly; each checks the switch
(:mod:`.switch`) when it is made, and, off, is what public TensorFlow does: the values are the
same either way.

Example:
    >>> import tensorflow as tf
    >>> call = bound_call(tf.function(lambda x: x + 1), tf.constant(41))
    >>> int(call())
    42
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tfdp._compat.fast.switch import trick_on


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
    arguments are kept alive with the call.

    Reaches into ``ConcreteFunction._call_flat`` and ``function_type.bind`` /
    ``unpack_inputs``. Fallback (``bound_call`` off, see :mod:`.switch`; and
    under ``tf.config.run_functions_eagerly(True)``): plainly ``fn(*args)``.

    Example:
        >>> import tensorflow as tf
        >>> it = iter(tf.data.Dataset.range(5))
        >>> step = tf.function(lambda iterator: next(iterator) * 10)
        >>> call = bound_call(step, it)
        >>> [int(call()) for _ in range(3)]
        [0, 10, 20]
    """
    import tensorflow as tf

    if not trick_on("bound_call") or tf.config.functions_run_eagerly():
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

    Reaches into tf.data's ``UnaryDataset`` / ``StructuredFunctionWrapper``,
    ``gen_dataset_ops.parallel_map_dataset_v2`` and the eager context's
    ``function_call_options``. Fallback (``lightly_optimized_map`` off, see
    :mod:`.switch`): ``dataset.map(fn, num_parallel_calls, deterministic)``.

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

    from tfdp._autograph import plain

    if not trick_on("lightly_optimized_map"):
        return dataset.map(
            plain(fn), num_parallel_calls=num_parallel_calls, deterministic=deterministic
        )
    from tensorflow.python.data.ops import dataset_ops, structured_function
    from tensorflow.python.ops import gen_dataset_ops

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
