"""Resuming a run: its ``config.json`` read, merged with the options given, and checked.

This module owns a run directory's ``config.json`` (the options of the run
and the history of its starts and resumes: :func:`read_run_config`,
:func:`write_run_config`) and the resume policy (:func:`resolve_resume`):
an option not given takes the run's value; a given one either changes
(recorded in the history) or is refused, naming it, when the checkpoints or
the data order depend on it (see ``RESUME_POLICIES`` in
:mod:`tfdp.recipe.options`). Loads no TensorFlow.

Example:
    >>> import tempfile
    >>> has_checkpoints(tempfile.mkdtemp())
    False
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdp.errors import ConfigError, StateError
from tfdp.recipe.config import TrainConfig, coerce, flag

#: The format of a run's ``config.json``, recorded as its ``"format"`` and in every history
#: entry: 2 since ``adam`` / ``adamw`` train with torch's update (:mod:`tfdp.optim`). A file
#: without it (nor in its first entry) is format 1: its adam / adamw were Keras's, and such a
#: run is not resumed.
RUN_FORMAT = 2


def has_checkpoints(run_dir: str) -> bool:
    """Whether ``run_dir/checkpoints`` holds a checkpoint (an index file)."""
    folder = Path(run_dir, "checkpoints")
    return folder.is_dir() and any(folder.glob("ckpt-*.index"))


def read_run_config(path: str) -> tuple[dict[str, Any], list[Any]]:
    """The options saved in a run's ``config.json`` (type-checked) and its history."""
    from tfdp.recipe.rundir import read_json_object

    raw = read_json_object(path, "run config")
    fields = TrainConfig.fields()
    options = {k: coerce(k, v, f"run config {path}") for k, v in raw.items() if k in fields}
    history = raw.get("history")
    return options, history if isinstance(history, list) else []


def run_format(path: str) -> int:
    """The format of the run whose ``config.json`` is ``path``: its own, or its first entry's."""
    from tfdp.recipe.rundir import read_json_object

    raw = read_json_object(path, "run config")
    history = raw.get("history")
    first = history[0] if isinstance(history, list) and history else {}
    version = raw.get("format", first.get("format", 1) if isinstance(first, dict) else 1)
    return version if isinstance(version, int) else 1


def write_run_config(run_dir: str, cfg: TrainConfig, history: list[Any]) -> None:
    """Write ``run_dir/config.json`` (atomically): the options and the history of events."""
    from tfdp.recipe.rundir import write_json_atomic

    first = history[0] if history and isinstance(history[0], dict) else {}
    version = first.get("format", 1) if first else RUN_FORMAT  # the run's: its start's
    config = {"format": version, **cfg.to_dict(), "history": history}
    write_json_atomic(os.path.join(run_dir, "config.json"), config)


def now() -> str:
    """The local time, as ``config.json``'s history records it."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


@dataclass
class Resumed:
    """What :func:`resolve_resume` found: the run's options, and what changed.

    Attributes:
        config: The options to resume with: ``config.json``'s, with the given ones applied.
        changed: ``{option: (the run's value, the new value)}`` for allowed changes.
        history: ``config.json``'s history so far.
        rebuilt: True when ``config.json`` was missing (the options given rebuild it).
    """

    config: TrainConfig
    changed: dict[str, tuple[Any, Any]]
    history: list[Any]
    rebuilt: bool = False


def resolve_resume(
    run_dir: str, cfg: TrainConfig, given: set[str] | frozenset[str] | None = None
) -> Resumed:
    """The options of a resumed run: ``config.json``'s, with the ``given`` ones applied.

    An option not in ``given`` takes the run's value (its default when
    ``config.json`` predates the option). A given option that
    differs from the run's either changes (options whose ``resume`` policy is
    ``"record"``: learning rate, epochs, schedule, ...; the change goes into
    ``config.json``'s history) or is refused, naming it (``"refuse"``: the
    data, the model, the optimizer, the batch size, the sampler, ... -- what
    the checkpoint's state or the data order depends on). ``given=None``
    treats every option of ``cfg`` as given (the Python API).

    Raises:
        ConfigError: naming every refused option with both values; for a
            ``config.json`` that is not a JSON object of options (naming the
            file); for a run directory with neither ``config.json`` nor a checkpoint.

    Example:
        >>> import tempfile, json, os
        >>> run = tempfile.mkdtemp()
        >>> _ = open(os.path.join(run, "config.json"), "w").write(json.dumps({"lr": 0.1, "epochs": 15}))
        >>> r = resolve_resume(run, TrainConfig(lr=0.01, epochs=20), given={"lr"})
        >>> r.config.lr, r.config.epochs, r.config.batch_size, r.changed
        (0.01, 15, 64, {'lr': (0.1, 0.01)})
        >>> resolve_resume(run, TrainConfig(optimizer="sgd"), given={"optimizer"})
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: resume: --optimizer (the run has 'adam', now 'sgd') cannot change on resume: the run's checkpoints, data order and model depend on it. Leave it out (the run's value is used) or start a new run in another --run-dir
    """  # noqa: E501
    path = os.path.join(run_dir, "config.json")
    if not os.path.exists(path):
        if not has_checkpoints(run_dir):
            raise StateError(
                f"--resume: {run_dir!r} holds no run (no config.json and no checkpoint); start "
                "it without --resume"
            )
        return Resumed(cfg, {}, [], rebuilt=True)
    saved, history = read_run_config(path)
    _refuse_other_update(run_dir, saved, run_format(path))
    merged: dict[str, Any] = {}
    refused: list[str] = []
    changed: dict[str, tuple[Any, Any]] = {}
    for name, f in TrainConfig.fields().items():
        now = getattr(cfg, name)
        explicit = given is None or name in given
        policy = f.metadata["resume"]
        if policy == "locate":  # where the run is, not what it is
            merged[name] = now
            continue
        # An option newer than the run's config.json: the run had its default.
        old = saved.get(name, f.default)
        if not explicit or old == now:
            merged[name] = old
            continue
        if policy == "refuse":
            refused.append(f"{flag(name)} (the run has {old!r}, now {now!r})")
            continue
        changed[name] = (old, now)
        merged[name] = now
    if refused:
        one = len(refused) == 1
        raise ConfigError(
            "; ".join(refused)
            + (" cannot change" if one else ": these cannot change")
            + " on resume: the run's checkpoints, data order and model depend on "
            + (
                "it. Leave it out (the run's value is used)"
                if one
                else "them. Leave them out (the run's values are used)"
            )
            + " or start a new run in another --run-dir",
            argument="resume",
        )
    merged["resume"] = True
    return Resumed(TrainConfig(**merged), changed, history)


def _refuse_other_update(run_dir: str, saved: dict[str, Any], version: int) -> None:
    """Refuse a run of format 1 whose optimizer tfdp now updates otherwise (adam, adamw)."""
    optimizer = saved.get("optimizer")
    if version != RUN_FORMAT and optimizer in ("adam", "adamw"):
        keras_name = {"adam": "Adam", "adamw": "AdamW"}[optimizer]
        raise StateError(
            f"--resume: {run_dir!r} was started by an earlier tfdp (config.json format "
            f"{version}; this tfdp resumes format {RUN_FORMAT}), whose --optimizer {optimizer} "
            f"was Keras's {keras_name}; tfdp's {optimizer} is now torch's update "
            f"(tfdp.optim.Torch{keras_name}), under which its checkpoints would continue "
            "another run. Finish it with the tfdp that started it, or start a new run "
            f"(--optimizer keras-{optimizer} trains with Keras's {keras_name})"
        )


def refuse_existing_run(run_dir: str) -> None:
    """Refuse to start a new run in a directory that holds one (with checkpoints)."""
    if has_checkpoints(run_dir):
        raise StateError(
            f"--run-dir: {run_dir!r} already holds a run with checkpoints: pass --resume to "
            "continue it (its config.json supplies the options you do not give), or choose "
            "another --run-dir (or --name)"
        )
