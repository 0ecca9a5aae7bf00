"""One option of the training job: a dataclass field with its help, choices and resume policy.

This module owns :func:`option` (the field every option of
:class:`tfdp.recipe.config.TrainConfig` is declared with, in
:mod:`tfdp.recipe.config` and :mod:`tfdp.recipe.augment_options` alike) and
:data:`RESUME_POLICIES`. Pure Python: it loads no TensorFlow.

Example:
    >>> from dataclasses import dataclass, fields
    >>> @dataclass
    ... class Demo:
    ...     epochs: int = option(3, "epochs to train", resume="record")
    >>> f = fields(Demo)[0]
    >>> Demo().epochs, f.metadata["help"], f.metadata["resume"]
    (3, 'epochs to train', 'record')
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

#: What an option may do when a run is resumed: "refuse" a change (it is the run's identity:
#: the data, the model, the optimizer's state...), "record" a change in config.json's history,
#: or nothing for the options that only locate the run.
RESUME_POLICIES = ("refuse", "record", "locate")


def option(
    default: Any,
    help: str,
    choices: tuple[Any, ...] | None = None,
    *,
    resume: str = "refuse",
    computed: str | None = None,
) -> Any:
    """An option: its default, help, choices, resume policy, and how a ``None`` default is computed.

    ``computed`` says in words what a ``None`` default becomes (help shows it as the default).

    Example:
        >>> option(1, "x", resume="forget")
        Traceback (most recent call last):
        ...
        ValueError: resume policy must be one of ('refuse', 'record', 'locate'), got 'forget'
    """
    if resume not in RESUME_POLICIES:
        raise ValueError(f"resume policy must be one of {RESUME_POLICIES}, got {resume!r}")
    if computed is not None and default is not None:
        raise ValueError("only a None default is computed")
    metadata = {"help": help, "choices": choices, "resume": resume, "computed": computed}
    return field(default=default, metadata=metadata)
