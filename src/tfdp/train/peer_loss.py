"""A peer lost mid-training: one clear error, and this worker's last completed step kept.

This module owns what :class:`tfdp.train.Trainer` does when a collective fails
because another worker is gone -- its machine died, its process was killed or
stopped (SIGSTOP), or the network to it was cut. TensorFlow's coordination
service notices within about ten seconds (missed heartbeats) and aborts every
collective of the job; the loop then raises :class:`PeerLostError`, which names
the lost peer and its address, says what was kept and how to continue.

What is kept. Synchronous replicas hold identical weights after every
completed step, and saving a model and optimizer under
MultiWorkerMirroredStrategy needs no collective (reading the epoch's
sync-on-read metric accumulators does: those are estimated, see below). So the
chief, when it survives, saves its state after its last completed step at the
fault (:func:`save_at_fault`) -- no completed step is lost. When it cannot (the
chief itself was lost, a call of several steps had applied part of them, a
fault inside the epoch-end work of ``on_nonfinite="ignore"``), the latest
periodic checkpoint is what is kept: at most ``checkpoint_every`` steps behind.
The error says which.

The epoch's training-metric accumulators (the running loss and metrics of the
interrupted epoch's line, not the weights) sum over every worker's replicas; a
lone chief knows its own replicas' sums only, so the saved accumulators are
those scaled to the whole job (``num_replicas / local replicas``). The resumed
epoch's *training* line is then an estimate; weights, optimizer state, data
position, and validation are exact.

Example:
    >>> from tfdp.distribute.faults import Peer
    >>> err = PeerLostError(peers=[Peer("worker", 1, "10.0.0.2:2222")],
    ...                     cause="it stopped sending heartbeats", epoch=2, step=5,
    ...                     steps_per_epoch=22, global_step=49, kept="run/checkpoints/ckpt-49",
    ...                     kept_step=49, saved_now=True)
    >>> print(err)  # doctest: +NORMALIZE_WHITESPACE
    lost worker 1 at 10.0.0.2:2222 after optimizer step 49 (epoch 3, step 5 of 22): it stopped
    sending heartbeats; it crashed, was killed or stopped, or the network to it failed. Kept:
    run/checkpoints/ckpt-49, saved by this worker at the fault (no completed step lost). To
    continue, resume from the run directory on every worker once the peer is back, or on the
    remaining workers (the global batch and the interrupted epoch's samples stay)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from tfdp._compat.graph import call_outside_strategy
from tfdp._compat.process import close_failed_reduce_pools
from tfdp.checkpoint.files import checkpoint_number
from tfdp.checkpoint.manager import CheckpointManager
from tfdp.checkpoint.trackables import keras_trackables
from tfdp.distribute import worker_info
from tfdp.distribute.faults import Peer, is_peer_failure, lost_peers
from tfdp.train.assemble import epoch_metric_states

if TYPE_CHECKING:
    from tfdp.train.parts import StepRunner
    from tfdp.train.resume import RunCheckpoints


class PeerLostError(RuntimeError):
    """Another worker was lost mid-training (crashed, killed, stopped, or cut off).

    Attributes:
        peers: The lost tasks (:class:`tfdp.distribute.faults.Peer`, with addresses);
            empty when TensorFlow's error named none.
        cause: What happened to them, as TensorFlow saw it.
        global_step: The optimizer steps this worker completed before the fault.
        kept: The checkpoint a resume starts from (``None``: none).
        kept_step: Its global step (``global_step - kept_step`` steps are lost).
        saved_now: Whether ``kept`` was saved at the fault by this worker.

    Example:
        >>> issubclass(PeerLostError, RuntimeError)
        True
    """

    def __init__(
        self,
        *,
        peers: list[Peer],
        cause: str,
        epoch: int,
        step: int,
        steps_per_epoch: int,
        global_step: int,
        kept: str | None,
        kept_step: int | None,
        saved_now: bool,
        note: str = "",
    ) -> None:
        self.peers, self.cause = list(peers), cause
        self.epoch, self.step, self.global_step = epoch, step, global_step
        self.kept, self.kept_step, self.saved_now = kept, kept_step, saved_now
        who = ", ".join(map(str, peers)) if peers else "a peer"
        if saved_now:
            what = f"{kept}, saved by this worker at the fault (no completed step lost)"
            if note:
                what += f"; {note}"
        elif kept is None:
            what = "nothing (no checkpoint)" if not note else f"nothing ({note})"
        else:
            lost = global_step - (kept_step or 0)
            what = f"the latest checkpoint, {kept} ({lost} step(s) behind this worker)"
            if note:
                what += f"; {note}"
        super().__init__(
            f"lost {who} after optimizer step {global_step} (epoch {epoch + 1}, step {step} of "
            f"{steps_per_epoch}): {cause}; it crashed, was killed or stopped, or the network to "
            f"it failed. Kept: {what}. To continue, resume from the run directory on every "
            "worker once the peer is back, or on the remaining workers (the global batch and the "
            "interrupted epoch's samples stay)"
        )


@dataclass(frozen=True)
class PeerLossWatch:
    """Counts at the start of ``fit``: whether the weights still match the loop's state later.

    Every applied optimizer step adds one to ``optimizer.iterations``; the loop
    counts the steps it saw applied. When the two agree at a fault, the failed
    call applied none of its steps and the weights are those of the loop's
    ``global_step``.
    """

    iterations: int
    global_step: int
    skipped: int

    @classmethod
    def start(cls, optimizer: Any, state: Any) -> PeerLossWatch:
        """The watch for a ``fit`` starting now (``state``: the trainer's ``TrainState``)."""
        return cls(int(optimizer.iterations.numpy()), state.global_step, state.skipped_steps)

    def unseen_steps(self, optimizer: Any, state: Any) -> int:
        """Optimizer steps applied that the loop did not count (those of a call that failed)."""
        applied = int(optimizer.iterations.numpy()) - self.iterations
        return applied - (
            state.global_step - self.global_step - (state.skipped_steps - self.skipped)
        )


def _estimated(strategy: Any, variable: Any, scale: float, zero: bool) -> Any:
    """A job-wide value of a sync-on-read accumulator from this worker's replicas alone."""
    local = strategy.experimental_local_results(variable)
    value = tf.add_n([tf.convert_to_tensor(v) for v in local])
    aggregation = getattr(variable, "aggregation", tf.VariableAggregation.SUM)
    if aggregation == tf.VariableAggregation.SUM:
        value = value * tf.cast(scale, value.dtype) if value.dtype.is_floating else value
    elif aggregation == tf.VariableAggregation.MEAN:
        value = value / len(local)
    else:  # ONLY_FIRST_REPLICA, NONE
        value = tf.convert_to_tensor(local[0])
    return tf.zeros_like(value) if zero else value


def save_at_fault(
    directory: str,
    *,
    strategy: Any,
    trackables: dict[str, Any],
    metric_states: list[Any],
    position: Any,
    global_step: int,
    max_to_keep: int,
    zero_metrics: bool = False,
) -> str:
    """Save this worker's state as ``ckpt-<global_step>`` without a collective; its path.

    ``trackables`` (model, optimizer, RNG states) are mirrored variables, saved
    from this worker's copy; the ``metric_states`` (sync-on-read accumulators)
    are replaced by plain variables holding their job-wide estimate (this
    worker's replicas scaled to the whole job), or zeros with ``zero_metrics``
    (a position at an epoch start). The checkpoint reads back like any other.
    """
    scale = strategy.num_replicas_in_sync / max(1, len(strategy.extended.worker_devices))
    values = [_estimated(strategy, v, scale, zero_metrics) for v in metric_states]

    def plain() -> list[tf.Variable]:
        return [tf.Variable(v, trainable=False) for v in values]

    manager = CheckpointManager(
        directory,
        strategy=strategy,
        max_to_keep=max_to_keep,
        **trackables,
        metric_states=call_outside_strategy(plain),
    )
    return manager.save(position, global_step)


class PeerLoss:
    """A :class:`tfdp.train.Trainer`'s answer to a failed collective: who was lost, what is kept.

    Built by the Trainer from its parts: the step (its strategy, model,
    optimizer, epoch metrics and ``on_nonfinite``), the run's checkpoints as
    the loop saves them (:class:`~tfdp.train.resume.RunCheckpoints`: the data
    position a save stores) and where training stands. ``fit`` takes a
    :meth:`watch` as it starts and hands a failed call's error to
    :meth:`lost`.

    Args:
        step: The Trainer's step part (:class:`tfdp.train.parts.StepRunner`).
        resume: The run's checkpoints (a save at the fault needs tfdp's
            :class:`~tfdp.checkpoint.CheckpointManager` as the checkpoints part).
        state: Where training stands (the Trainer's ``TrainState``).
        accumulation_steps: Micro-batches per optimizer step.

    Example:
        See :class:`tfdp.train.Trainer`, which builds one.
    """

    def __init__(
        self, step: StepRunner, resume: RunCheckpoints, state: Any, accumulation_steps: int
    ) -> None:
        self.step, self.resume, self.state = step, resume, state
        self.accumulation_steps = accumulation_steps
        self.info = worker_info(step.strategy)

    def watch(self) -> PeerLossWatch:
        """The watch for a ``fit`` starting now."""
        return PeerLossWatch.start(self.step.optimizer, self.state)

    def _refusal(self, manager: Any, unseen: int) -> str | None:
        """Why this worker may not save at the fault, or None."""
        if not self.info.is_chief:
            return (
                "only the chief writes checkpoints: it saves its last completed step if it survives"
            )
        if self.step.on_nonfinite == "ignore":
            return "with on_nonfinite='ignore' a failed step may have updated part of the variables"
        if unseen:
            return (
                f"the failed call had applied {unseen} step(s) the loop did not see complete, "
                "so the weights match no recorded data position"
            )
        if not isinstance(manager, CheckpointManager):
            return (
                "a save at the fault needs tfdp's CheckpointManager as the checkpoints part, "
                f"not {type(manager).__name__}"
            )
        return None

    def lost(
        self, train_input: Any, error: BaseException, watch: PeerLossWatch
    ) -> PeerLostError | None:
        """The :class:`PeerLostError` for ``error``, saving at the fault when it can; None if not.

        Called by ``fit`` when a call fails with a TensorFlow error: returns
        None unless the error means a lost peer (see
        :func:`tfdp.distribute.faults.is_peer_failure`).
        """
        info, strategy = self.info, self.step.strategy
        if not isinstance(error, tf.errors.OpError) or not is_peer_failure(
            type(error).__name__, info.num_workers
        ):
            return None
        close_failed_reduce_pools(error)  # else finalised at exit, printing a traceback
        resolver = strategy.cluster_resolver
        cluster = resolver.cluster_spec().as_dict()
        me = (resolver.task_type, int(resolver.task_id or 0))
        peers, cause = lost_peers(error.message or str(error), cluster, me)
        state, k = self.state, self.accumulation_steps
        full, tail = divmod(train_input.epoch_steps(state.epoch), k)
        steps_per_epoch = full + (1 if tail else 0)
        unseen = watch.unseen_steps(self.step.optimizer, state)
        epoch_end = state.step >= steps_per_epoch  # the fault came in the epoch-end work
        manager = self.resume.checkpoints
        kept = manager.latest if manager is not None else None
        kept_step = None if kept is None else checkpoint_number(kept)
        saved_now, note = False, ""
        if manager is not None:
            refused = self._refusal(manager, unseen)
            if refused is not None:
                note = refused
            elif kept_step != state.global_step:
                epoch, step = (state.epoch + 1, 0) if epoch_end else (state.epoch, state.step)
                try:
                    kept = save_at_fault(
                        manager.directory,
                        strategy=strategy,
                        trackables=keras_trackables(self.step.model, self.step.optimizer),
                        metric_states=epoch_metric_states(self.step),
                        position=self.resume.position(train_input, epoch, step),
                        global_step=state.global_step,
                        max_to_keep=manager.max_to_keep,
                        zero_metrics=epoch_end or step == 0,
                    )
                    kept_step, saved_now = state.global_step, True
                    if epoch_end:
                        note = (
                            f"the fault came in epoch {state.epoch + 1}'s end (its validation): "
                            "a resume starts the next epoch, without that epoch's line"
                        )
                except Exception as exc:  # a full disk, non-finite weights: the older one stands
                    note = f"the save at the fault failed ({type(exc).__name__}: {exc})"
                    kept = manager.latest
                    kept_step = None if kept is None else checkpoint_number(kept)
        return PeerLostError(
            peers=peers,
            cause=cause,
            epoch=state.epoch,
            step=min(state.step, steps_per_epoch),
            steps_per_epoch=steps_per_epoch,
            global_step=state.global_step,
            kept=kept,
            kept_step=kept_step,
            saved_now=saved_now,
            note=note,
        )
