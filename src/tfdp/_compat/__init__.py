"""Every reach into private or undocumented TensorFlow / Keras / CPython behaviour, named.

This package owns the places where tfdp depends on something TensorFlow, Keras or CPython do
not promise: an attribute with a leading underscore, the key format of object-based
checkpoints, the path Keras gives its seed generators' variables, a ``tf.__internal__``
function, the thread-locality of a strategy scope, CPython's exit sequence. Each is one
function, and ``tests/test_compat.py`` pins each to the versions it was checked on (its
``CHECKED_VERSIONS``): after an upgrade, a failing test there says which reach to re-check,
instead of a wrong number far away. Callers import each from its module (this package
gathers no names): ``tfdp._compat.keras``, ``tfdp._compat.fast.process``, ...

The reaches are of two kinds, kept apart:

* **Correctness** (:mod:`.keras`, :mod:`.graph`, :mod:`.process`, :mod:`.keras_hub`): what
  tfdp needs to be right -- exact resume, one all-reduce of the gradients, DDP's updates,
  the fit path's guard, a lost peer's clear error, keras-hub's layers. There is no public
  way to do these; they are always on, and a failure after an upgrade is a bug to fix here.
* **Speed** (:mod:`.fast`): what a trick buys over a public way to the same values. Each
  has that public fallback behind one switch, ``TFDP_SPEED_TRICKS`` (``0``: every
  fallback; :mod:`.fast.switch`), so that tfdp runs without any of them; a trick that
  gains under 5% in its benchmark is not kept (docs/architecture.md, "Rules").

Correctness:

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
optimizer_slot                ``optimizer._get_variable_index(variable)``: the index of a variable
                              (or a replica's component of a distributed one) in the lists of
                              slots an optimizer's ``build`` made, as Keras's own ``update_step``
                              finds them
DecaysInUpdateStep            Keras applies ``weight_decay`` in ``_apply_weight_decay`` before
                              ``update_step`` (a subclass overriding it turns that off)
weight_decay_applies          ``optimizer._use_weight_decay(variable)``: what
                              ``exclude_from_weight_decay`` excluded (a variable, a name pattern),
                              as Keras's own weight decay reads it
in_coordinated_job            ``context.context().coordination_service``: the eager context's
                              coordination-service configuration (None outside a multi-worker job)
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

Speed (:mod:`.fast`; in brackets the trick's name for the switch; each measured on and off,
alternated, in the benchmark named: docs/benchmarks.md, "Speed tricks", which also lists the
tricks measured and removed):

bound_call (``bound_call``, :mod:`.fast.graph`)
    Reaches into ``ConcreteFunction._call_flat`` and ``function_type.bind`` /
    ``unpack_inputs``: what ``tf.function`` runs per call after looking its trace up.
    Fallback: ``fn(*args)`` at every call. Gain (bench_train.py): the Trainer's steps/s
    1.54x with one step per call, 1.18x with 16.
lightly_optimized_map (``lightly_optimized_map``, :mod:`.fast.graph`)
    Reaches into tf.data's ``UnaryDataset`` and ``StructuredFunctionWrapper``: a map whose
    function carries ``experimental_ints_on_device`` is instantiated on the iterator's device
    alone, without Grappler; a call op's ``config_proto`` (from the eager context's
    ``function_call_options`` when traced) is the Grappler configuration of the called
    function. Fallback: ``dataset.map(fn, ...)``. Gain (bench_input.py ``--speed-tricks``,
    bench_images.py ``--speed-tricks-only``): a fresh dataset's first batch 1.09-2.66x as
    fast (1.02x in one of eight figures); images/s and CPU per image unchanged within noise.
release_in_background (``release_in_background``, :mod:`.fast.process`)
    No private API, but a TensorFlow 2.21 defect: tf.data's autotuning thread may miss its
    iterator's cancellation, and the iterator's destructor then waits to the end of its
    period (10 ms doubling to 60 s while the iterator lives). Fallback: the iterators dropped
    on the caller's thread. Gain (bench_iterator_release.py): the caller blocked 0.00 s
    instead of 2.1-11 s, 12-26% of its time.
end_process (``end_process``, :mod:`.fast.process`)
    Reaches into CPython's exit sequence, ``threading._shutdown()`` then
    ``atexit._run_exitfuncs()``, run by hand before ``os._exit``. Fallback:
    ``sys.exit(status)`` (TensorFlow's teardown, and the releases, waited for). Gain
    (bench_exit.py): 0.05 s instead of 1.2 s after the last line; a 2-epoch ``tfdp train``
    0.84x as long.
prefer_bfc_cpu_allocator (``bfc_cpu_allocator``, :mod:`.fast.process`)
    An environment setting, no code reach: ``TF_CPU_ALLOCATOR_USE_BFC=true``, which
    TensorFlow reads (undocumented) at its first host allocation, makes its host allocator a
    BFC allocator that keeps freed memory for reuse. Speed only (values never change).
    Fallback: the environment left alone (malloc; oneDNN's allocator where TensorFlow turns
    oneDNN on). Gain (bench_images.py ``--deit-only``): DeiT's input 1.30-1.36x less CPU per
    image, 1.12-1.24x the images/s.

Example:
    >>> from tfdp._compat.keras import checkpoint_value_key
    >>> checkpoint_value_key("step")
    'step/.ATTRIBUTES/VARIABLE_VALUE'
"""
