"""Where a run is in its data: :class:`DataPosition`, and the input configuration it must match.

This module owns what a checkpoint stores of the data (format version 2, the
only one read): the sampler epoch, the step within it, the sampler's state
at that point (rank 0's; every rank shares epoch and position, and the state
holds the global position reached, so another world size continues it), and
:func:`input_config`, the fingerprint of the input -- world size, batch sizes,
steps per epoch, the sampler's kind and configuration -- a resume compares
(:func:`check_input_config`).
Pure Python and NumPy.

Example:
    >>> p = DataPosition(epoch=2, step=17, config={"num_replicas": 4, "batch_size": 32})
    >>> DataPosition.from_json(p.to_json()) == p
    True
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from tfdp._util import config_diffs
from tfdp.errors import ConfigError, ConfigTypeError, StateError

_FORMAT = "tfdp.DataPosition"
_VERSION = 2  # sampler states with a global position; configs with global_batch_size
# Configuration fields that follow the world size: an elastic resume lets them change (the
# global batch must not); a stream's epoch length (sampler.num_examples) does too.
_WORLD_FIELDS = frozenset({"num_replicas", "batch_size", "steps_per_epoch", "sampler.num_replicas"})
_STREAM_WORLD_FIELDS = frozenset({"sampler.num_examples"})


def json_plain(value: Any, what: str) -> Any:
    """``value`` after a JSON round trip (tuples become lists); refuses what JSON cannot hold."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ConfigError(
            f"must be JSON-serialisable (dicts, lists, str, finite numbers, bools, None): {e}",
            argument=what,
        ) from e


def check_count(name: str, value: Any) -> int:
    """A Python int >= 0 from an int, NumPy integer, or integer scalar tensor or variable."""
    array = np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    if array.ndim != 0 or array.dtype.kind not in "iu" or int(array) < 0:
        raise ConfigError(f"must be an integer >= 0, got {value!r}", argument=name)
    return int(array)


@dataclasses.dataclass(frozen=True)
class DataPosition:
    """Where a run is in its data, and what the data configuration was.

    Attributes:
        epoch: The sampler epoch in progress.
        step: Steps already done within ``epoch`` (the resumed run starts at
            this step: ``inp.epoch(epoch, start_step=step)``).
        sampler: A :meth:`tfdp.Sampler.state_dict` at this position, or None.
        config: A fingerprint of everything that must match on resume (world
            size, per-replica batch size, sampler configuration, ...); see
            :func:`input_config`. Stored after a JSON round trip, so tuples
            become lists.

    Example:
        >>> p = DataPosition(epoch=2, step=17, config={"num_replicas": 4, "batch_size": 32})
        >>> DataPosition.from_json(p.to_json()) == p
        True
    """

    epoch: int
    step: int
    sampler: dict[str, Any] | None = None
    config: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epoch", check_count("epoch", self.epoch))
        object.__setattr__(self, "step", check_count("step", self.step))
        if self.sampler is not None and not isinstance(self.sampler, Mapping):
            raise ConfigTypeError(
                f"must be a Sampler.state_dict() or None, got {type(self.sampler).__name__}",
                argument="sampler",
            )
        if not isinstance(self.config, Mapping):
            raise ConfigTypeError(
                f"must be a dict, got {type(self.config).__name__}", argument="config"
            )
        if self.sampler is not None:
            object.__setattr__(self, "sampler", json_plain(dict(self.sampler), "sampler"))
        object.__setattr__(self, "config", json_plain(dict(self.config), "config"))

    def to_json(self) -> str:
        """This position as a JSON string (keys sorted: equal positions give equal strings).

        Example:
            >>> DataPosition(1, 2).to_json()[:40]
            '{"config": {}, "epoch": 1, "format": "tf'
        """
        return json.dumps(
            {
                "format": _FORMAT,
                "version": _VERSION,
                "epoch": self.epoch,
                "step": self.step,
                "sampler": self.sampler,
                "config": self.config,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> DataPosition:
        """Parse :meth:`to_json`'s output.

        Raises:
            tfdp.errors.StateError: for text that is not a tfdp data position of a known
                version.

        Example:
            >>> DataPosition.from_json(DataPosition(3, 0).to_json()).epoch
            3
        """
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise StateError(
                f"data position is not valid JSON (a tfdp.DataPosition.to_json() text): {e}"
            ) from e
        if not isinstance(obj, dict) or obj.get("format") != _FORMAT:
            raise StateError(
                f"not a tfdp data position (a JSON object with format {_FORMAT!r}): {text[:80]!r}"
            )
        if obj.get("version") != _VERSION:
            raise StateError(
                f"data position version {obj.get('version')!r} is not supported "
                f"(this tfdp reads version {_VERSION})"
            )
        return cls(
            epoch=obj["epoch"], step=obj["step"], sampler=obj["sampler"], config=obj["config"]
        )

    @classmethod
    def from_input(cls, inp: Any, epoch: int, step: int, **extra_config: Any) -> DataPosition:
        """The position after ``step`` steps of ``epoch`` of a :class:`tfdp.DistributedInput`.

        A ``step`` of ``inp.epoch_steps(epoch)`` or more rolls over into the
        next epoch(s), so the end of epoch ``e`` is stored as ``(e + 1, 0)``.
        The sampler state is rank 0's, ``step * batch_size`` entries into the
        epoch (every rank shares epoch and position; in an epoch resumed from
        another world size, rank 0's share of the dealt rest).

        Args:
            inp: A ``DistributedInput`` (anything with ``sampler``,
                ``batch_size``, ``num_replicas`` and ``steps_per_epoch``).
            epoch: The sampler epoch.
            step: Steps done within ``epoch``.
            **extra_config: More fields for :attr:`config` (e.g. a dataset name).

        Example:
            >>> import numpy as np
            >>> from tfdp.input import DistributedInput
            >>> from tfdp.sources import ArraySource
            >>> inp = DistributedInput(None, ArraySource((np.zeros((40, 1), "float32"),)),
            ...                        batch_size=8)
            >>> p = DataPosition.from_input(inp, 0, 5)  # 5 steps of 5: epoch 0 done
            >>> (p.epoch, p.step, p.sampler["epoch"], p.sampler["position"])
            (1, 0, 1, 0)
        """
        epoch, step = check_count("epoch", epoch), check_count("step", step)
        while step >= inp.epoch_steps(epoch) != inp.steps_per_epoch:  # an elastic epoch
            epoch, step = epoch + 1, step - inp.epoch_steps(epoch)
        steps_per_epoch = int(inp.steps_per_epoch)
        epoch, step = epoch + step // steps_per_epoch, step % steps_per_epoch
        sampler = inp.rank_sampler(0, epoch)
        state = sampler.state_dict(position=min(step * int(inp.batch_size), len(sampler)))
        return cls(epoch, step, state, input_config(inp, **extra_config))


def input_config(inp: Any, **extra: Any) -> dict[str, Any]:
    """The configuration of a :class:`tfdp.DistributedInput` that must match on resume.

    World size, per-replica and global batch size, steps per epoch, whether
    the source streams, and the sampler's kind and configuration (number of
    examples, seed, repeats, ...), plus ``extra``.

    Example:
        >>> import numpy as np
        >>> from tfdp.input import DistributedInput
        >>> from tfdp.sources import ArraySource
        >>> inp = DistributedInput(None, ArraySource((np.zeros((40, 1), "float32"),)),
        ...                        batch_size=8)
        >>> cfg = input_config(inp, run="demo")
        >>> cfg["num_replicas"], cfg["batch_size"], cfg["sampler"]["kind"], cfg["run"]
        (1, 8, 'DistributedSampler', 'demo')
    """
    state = inp.sampler.state_dict(position=0)
    config: dict[str, Any] = {
        "num_replicas": int(inp.num_replicas),
        "batch_size": int(inp.batch_size),
        "steps_per_epoch": int(inp.steps_per_epoch),
        "global_batch_size": int(inp.batch_size) * int(inp.num_replicas),
        "streaming": bool(inp.streaming),
        "sampler": {"kind": state["sampler"], **state["config"]},
    }
    config.update(extra)
    return json_plain(config, "config")


def check_input_config(
    path: str, saved: Mapping[str, Any], expected: Mapping[str, Any], elastic: bool = False
) -> None:
    """Refuse a checkpoint (``path``) whose data configuration differs from this run's.

    With ``elastic``, the fields that follow the world size may differ when the
    world size does (the global batch must not).

    Raises:
        tfdp.errors.StateError: naming each field, saved vs now, and what to do
            (with ``elastic``, the replica counts that divide the global batch).

    Example:
        >>> check_input_config("ckpt-3", {"num_replicas": 2, "batch_size": 4},
        ...                    {"num_replicas": 4, "batch_size": 2}, elastic=True)
        >>> check_input_config("ckpt-3", {"seed": 1}, {"seed": 2})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        tfdp.errors.StateError: checkpoint ckpt-3 was saved with another data configuration:
          seed: saved 1, now 2
        ...
    """
    expected = json_plain(dict(expected), "expected_config")
    world: frozenset[str] = frozenset()
    if elastic and saved.get("num_replicas") != expected.get("num_replicas"):
        world = _WORLD_FIELDS | (_STREAM_WORLD_FIELDS if expected.get("streaming") else set())
    diffs = config_diffs(dict(saved), expected, ignore=world)
    if not diffs:
        return
    hint = (
        "Resume with the same world size, per-replica batch size and sampler settings, or "
        "start a new run in a new checkpoint directory."
    )
    batch = saved.get("global_batch_size")
    if elastic and isinstance(batch, int) and batch > 0:
        counts = ", ".join(str(w) for w in range(1, batch + 1) if batch % w == 0)
        hint = (
            f"The global batch size is kept when the world size changes: resume with a "
            f"global batch of {batch} (per replica: {batch} / the replica count) on a "
            f"replica count that divides it ({counts}) and the same sampler settings, or "
            "start a new run in a new checkpoint directory."
        )
    raise StateError(
        f"checkpoint {path} was saved with another data configuration:\n  "
        + "\n  ".join(diffs)
        + "\nResuming would not continue the same data order. "
        + hint
    )
