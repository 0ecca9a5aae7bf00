"""Every reach into private or undocumented TensorFlow / Keras behaviour, behind a named function.

This package owns the places where tfdp depends on something TensorFlow or
Keras do not promise: an attribute with a leading underscore, the key format
of object-based checkpoints, the path Keras gives its seed generators'
variables, a ``tf.__internal__`` function, the thread-locality of a strategy
scope, CPython's exit sequence. Each is one function here (in :mod:`.keras`,
:mod:`.graph`, :mod:`.process` or :mod:`.keras_hub`, by what it reaches into), and
``tests/test_compat.py`` pins each to the versions it was checked on
(:data:`CHECKED_VERSIONS`): after an upgrade, a failing test there says which
reach to re-check, instead of a wrong number far away.

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
hold_untracked                likewise for any attribute of a Keras layer (a distillation
                              teacher: neither trained, saved nor checkpointed with the student)
vit_layers                    (:mod:`.keras_hub`, imported by its path: keras-hub is optional)
                              keras-hub's ViT / DeiT layers, which ``keras_hub`` does not export
                              (``keras_hub.src.models.vit`` / ``deit``), their sub-layers'
                              attribute names, and the ``get_config`` keys their ``__init__``
                              does not take
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
DecaysInUpdateStep            Keras applies ``weight_decay`` in ``_apply_weight_decay`` before
                              ``update_step`` (a subclass overriding it turns that off)
weight_decay_applies          ``optimizer._use_weight_decay(variable)``: what
                              ``exclude_from_weight_decay`` excluded (a variable, a name pattern),
                              as Keras's own weight decay reads it
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

from tfdp._compat.graph import (
    RowsInPlace,
    bound_call,
    call_outside_strategy,
    lightly_optimized_map,
    supports_no_merge_call,
)
from tfdp._compat.keras import (
    DecaysInUpdateStep,
    attach_optimizer,
    backing_variable,
    checkpoint_value_key,
    compiled_metrics_container,
    fit_step_overrides,
    gradients_reduced,
    hold_untracked,
    optimizer_slot,
    seed_generator_states,
    weight_decay_applies,
)
from tfdp._compat.process import (
    CPU_ALLOCATOR_ENV,
    RELEASE_THREAD_NAME,
    close_failed_reduce_pools,
    configure_heartbeat,
    end_process,
    in_coordinated_job,
    prefer_bfc_cpu_allocator,
    release_in_background,
    wait_for_releases,
)

__all__ = [
    "CHECKED_VERSIONS",
    "CPU_ALLOCATOR_ENV",
    "RELEASE_THREAD_NAME",
    "DecaysInUpdateStep",
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
    "hold_untracked",
    "in_coordinated_job",
    "lightly_optimized_map",
    "optimizer_slot",
    "prefer_bfc_cpu_allocator",
    "release_in_background",
    "seed_generator_states",
    "supports_no_merge_call",
    "wait_for_releases",
    "weight_decay_applies",
]

#: The TensorFlow and Keras versions (major.minor) every function here was checked on.
CHECKED_VERSIONS = {"tensorflow": "2.21", "keras": "3.15"}
