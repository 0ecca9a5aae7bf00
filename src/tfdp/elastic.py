"""Elastic resume: which global list an epoch follows when a run resumes on another world size.

This module owns the policy of continuing a checkpoint's epoch on another number of replicas
or workers (the arithmetic is the samplers': :meth:`tfdp.Sampler.follow`). Every sampler's
rank streams are strided slices of one global list, and the global batch ``B`` is kept across
world sizes, so a checkpoint after step ``s`` means global position ``s * B`` of its epoch's
list. :func:`epoch_plan` gives the sampler (at the saved world size) whose list the rest of
that epoch deals over the new ranks -- every remaining entry exactly once, the epoch keeping
that list's number of steps (:func:`plan_steps`) -- or None when the epoch simply continues
(the same world size, or nothing of the epoch consumed: it follows the new world size's plan).
Importing it imports NumPy only.

Example:
    >>> from tfdp.samplers import DistributedSampler
    >>> plan = DistributedSampler(100, 4, 0, drop_last=True)  # 100 entries; 25 per rank
    >>> plan_steps(plan, global_batch_size=8, drop_remainder=True)
    12
"""

from __future__ import annotations

from typing import Any

from tfdp.errors import StateError
from tfdp.samplers import Sampler

__all__ = ["epoch_plan", "plan_steps"]


def plan_steps(plan: Sampler, global_batch_size: int, drop_remainder: bool) -> int:
    """Steps of an epoch that follows ``plan``'s global list at a global batch size.

    The run that made the plan took ``global_length // B`` whole steps (or
    ``ceil(global_length / B)`` with a last partial one): so does any world
    size that continues it.

    Example:
        >>> from tfdp.samplers import RepeatAugSampler
        >>> plan = RepeatAugSampler(46, 4, 0, num_repeats=2, selected_round=0)
        >>> plan.global_length, plan_steps(plan, 8, True), plan_steps(plan, 8, False)
        (48, 6, 6)
    """
    total, b = plan.global_length, int(global_batch_size)
    return total // b if drop_remainder else -(-total // b)


def epoch_plan(
    sampler: Sampler,
    state: dict[str, Any] | None,
    step: int,
    *,
    global_batch_size: int,
    drop_remainder: bool,
    stream: object | None = None,
) -> Sampler | None:
    """The sampler whose list the epoch of ``state`` follows on ``sampler``, or None (its own).

    ``sampler`` is an input's (any rank's: its world size and configuration
    count), which takes ``global_batch_size`` entries a step (``drop_remainder``:
    whole steps only); ``stream`` is the streaming source the input reads, None
    for a random-access one. ``state`` is a checkpoint's sampler state
    (:class:`tfdp.checkpoint.DataPosition`'s ``sampler``) after ``step`` steps
    of its epoch. Saved at ``sampler``'s world size, or with nothing of the
    epoch consumed: None (the epoch continues, or starts, as ``sampler``'s
    own). Saved at another world size with the same global batch: the rank-0
    sampler of the world size whose global list the epoch follows, loaded with
    ``allow_world_size_change=True``.

    Raises:
        StateError: for a state of another sampler configuration, a step that
            is not the state's global position, a streaming source stopped
            mid-epoch on another world size (naming the alternatives), or
            (``drop_remainder=False``) a last step too small to give every
            replica a sample.

    Example:
        >>> from tfdp.samplers import DistributedSampler
        >>> new = DistributedSampler(64, 1, 0)  # one replica now, a global batch of 8
        >>> old = DistributedSampler(64, 2, 0)  # saved on two, after one step (4 each)
        >>> args = dict(global_batch_size=8, drop_remainder=True)
        >>> epoch_plan(new, old.state_dict(position=4), step=1, **args).num_replicas
        2
        >>> epoch_plan(new, old.state_dict(position=0), step=0, **args) is None
        True
    """
    if state is None:
        return None
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    epoch, position = state.get("epoch"), state.get("global_position", state.get("position"))
    num_replicas = sampler.num_replicas
    if stream is not None:
        if config.get("num_replicas") == num_replicas or position == 0 or step == 0:
            return None  # the same world size, or nothing consumed: the stream as before
        raise StateError(
            f"a streaming source ({type(stream).__name__}) cannot change the world size "
            f"in the middle of an epoch (its epoch's stream depends on it): the checkpoint "
            f"stopped after step {step} of epoch {epoch + 1} on {config.get('num_replicas')} "
            "replica(s). Resume on that world size until the epoch ends (a checkpoint is saved "
            "at every epoch end), then on the new one; or convert the records to a "
            "random-access source (arrays, an image folder, ArrayRecord), which can change it "
            "at any step"
        )
    saved = sampler.with_rank(0)
    saved.load_state_dict(dict(state), allow_world_size_change=True)
    plan = saved.plan
    if plan is None:
        return None
    reached = saved.state_dict(position=0)["global_position"]
    if reached != step * global_batch_size:
        raise StateError(
            f"the sampler state is at global position {reached} of epoch {epoch + 1}, not at step "
            f"{step} of {global_batch_size} (the global batch): a state saved with another "
            "global batch size cannot continue here"
        )
    if not drop_remainder:
        last = plan.global_length - (plan_steps(plan, global_batch_size, False) - 1) * (
            global_batch_size
        )
        if last < num_replicas:
            raise StateError(
                f"the last step of epoch {epoch + 1} holds {last} sample(s), fewer than the "
                f"{num_replicas} replicas: resume on at most {last} replica(s) until the "
                "epoch ends, or use drop_remainder=True"
            )
    return plan
