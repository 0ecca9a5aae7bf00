"""The training job's student and teacher: ``--finetune``'s weights, the teacher, its record.

This module owns what :mod:`tfdp.recipe.model_options`' options do once a
run builds its model: :func:`read_model_files` (the ``--finetune`` and
timm-format ``--teacher-path`` state dicts, read before TensorFlow loads --
a ``.pth`` with torch), :func:`student_and_teacher` (the student's start from
``--finetune``, as DeiT's ``main.py``: position embeddings interpolated,
a head of another class count re-initialised; the teacher loaded and checked
-- its inputs the data's, one logit per class -- and both wrapped in a
:class:`tfdp.models.Distiller`), :func:`teacher_record` /
:func:`check_teacher` (which teacher a run was distilled from, in
``config.json``'s start entry: its options and the SHA-256 of its weights;
a resume with other weights is refused) and :func:`start_notes` (what the
start line says of them). Importing it loads no TensorFlow.

Example:
    >>> from tfdp.recipe.config import TrainConfig
    >>> files = read_model_files(TrainConfig(), fresh=True)
    >>> files.finetune is None and files.teacher is None
    True
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfdp.errors import ConfigError, StateError, TfdpError, renaming
from tfdp.models.names import is_model_name
from tfdp.recipe.model_options import distilling, keras_teacher


@dataclass
class ModelFiles:
    """The state dicts a run's model starts from, and what building it did with them.

    ``finetune``: ``--finetune``'s state dict (a new run's); ``teacher``:
    ``--teacher-path``'s when it is a timm / DeiT checkpoint; ``notes``: what
    fine-tuning adapted (filled when the model is built).
    """

    finetune: dict[str, Any] | None = None
    teacher: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)


def read_model_files(cfg: Any, *, fresh: bool) -> ModelFiles:
    """Read ``--finetune`` (a new run's) and a timm-format ``--teacher-path`` (NumPy arrays).

    Before TensorFlow loads: a ``.pth`` file is read with torch.

    Raises:
        tfdp.errors.TfdpError: a file that cannot be read, naming its option.

    Example:
        See the module's.
    """
    from tfdp.models.weights import read_state_dict

    out = ModelFiles()
    named = [("finetune", cfg.finetune if fresh else None)]
    if distilling(cfg) and cfg.teacher_path and not cfg.teacher_path.endswith(".weights.h5"):
        named.append(("teacher_path", cfg.teacher_path))
    for name, path in named:
        if path is None:
            continue
        with renaming({"path": name}):
            state = read_state_dict(path)
        setattr(out, "finetune" if name == "finetune" else "teacher", state)
    return out


#: The model builders' arguments as a teacher's options say them.
_TEACHER_OPTIONS = {"model": "teacher_model", "input_shape": "image_size"}


def _refused(exc: Exception, ref: str) -> ConfigError:
    """Keras's refusal of the teacher ``ref`` (a file, its weights, a factory), one line."""
    detail = " ".join(str(exc).split())
    return ConfigError(f"{ref!r}: {detail}", argument="teacher_model")


def _load_teacher(cfg: Any, shape: Sequence[int], num_classes: int, files: ModelFiles) -> Any:
    """The teacher, built or loaded inside the strategy's scope, its weights set."""
    ref = cfg.teacher_model
    try:
        with renaming(_TEACHER_OPTIONS):  # the builders' and loaders' arguments, as the options
            teacher = _built_teacher(cfg, shape, num_classes, files)
    except TfdpError:
        raise
    except Exception as exc:  # Keras's errors of a file, a mismatched weights file, a factory
        raise _refused(exc, ref) from None
    inputs = tuple(getattr(teacher, "input_shape", ())[1:])
    if inputs and inputs != tuple(shape):
        raise ConfigError(
            f"{ref!r} takes inputs of shape {inputs}; the run's images are {tuple(shape)} "
            "(--image-size): give a teacher of the run's input shape",
            argument="teacher_model",
        )
    width = getattr(teacher, "output_shape", None)
    if not isinstance(width, tuple) or width[-1] != num_classes:
        raise ConfigError(
            f"{ref!r} outputs {width}, the data has {num_classes} classes: the teacher must give "
            "one logit per class",
            argument="teacher_model",
        )
    teacher.trainable = False
    return teacher


def _built_teacher(cfg: Any, shape: Sequence[int], num_classes: int, files: ModelFiles) -> Any:
    """The teacher of ``--teacher-model``, its weights from ``--teacher-path``."""
    import keras

    ref, path = cfg.teacher_model, cfg.teacher_path
    if keras_teacher(cfg):
        if importlib.util.find_spec("keras_hub") is not None:  # tfdp's layers, registered
            import tfdp.models.vit  # noqa: F401
        return keras.models.load_model(ref, compile=False)
    if is_model_name(ref):
        from tfdp.models.vit import vision_transformer
        from tfdp.models.weights import load_timm_weights

        teacher = vision_transformer(ref, tuple(shape), num_classes, init=False)
        if files.teacher is not None:
            load_timm_weights(teacher, files.teacher, source=f"--teacher-path {path!r}")
        else:
            teacher.load_weights(path)
        return teacher
    from tfdp.recipe.networks import build_model

    teacher = build_model(ref, tuple(shape), num_classes)
    teacher.load_weights(path)
    return teacher


def student_and_teacher(
    cfg: Any, model: Any, shape: Sequence[int], num_classes: int, files: ModelFiles | None
) -> Any:
    """``model`` started from ``--finetune``, and wrapped with its teacher when distilling.

    With ``files`` None (a checkpoint read back, an evaluation) a distilling
    run's model is a :class:`tfdp.models.Distiller` without teacher: the same
    variables, the student's inference.

    Raises:
        DataError: a state dict that does not fit (its first such key named).
        ConfigError: a teacher that cannot be loaded or does not fit the data,
            a student without distillation head.
    """
    if files is not None and files.finetune is not None:
        from tfdp.models.weights import load_timm_weights

        files.notes += load_timm_weights(
            model, files.finetune, finetune=True, source=f"--finetune {cfg.finetune!r}"
        )
    if not distilling(cfg):
        return model
    from tfdp.models.distill import Distiller

    teacher = _load_teacher(cfg, shape, num_classes, files) if files is not None else None
    with renaming({"student": "model", "teacher": "teacher_model"}):
        return Distiller(model, teacher)


def teacher_record(cfg: Any, model: Any, fingerprint: Callable[[Any], str]) -> dict[str, Any]:
    """Which teacher ``model`` (a :class:`~tfdp.models.Distiller`) has: options and weights hash.

    Empty when the run does not distil.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> teacher_record(TrainConfig(), None, str)
        {}
    """
    teacher = getattr(model, "teacher", None)
    if not distilling(cfg) or teacher is None:
        return {}
    return {"model": cfg.teacher_model, "path": cfg.teacher_path, "sha256": fingerprint(teacher)}


def check_teacher(record: Mapping[str, Any], history: Sequence[Any]) -> None:
    """Refuse a resume whose teacher's weights are not the ones the run was distilled from.

    ``history`` is ``config.json``'s; its start entry holds the run's teacher
    (a run without one there, or without distillation, is not checked).

    Raises:
        StateError: naming both teachers and their weights' hashes.

    Example:
        >>> old = [{"event": "start", "teacher": {"model": "t.keras", "path": None,
        ...                                      "sha256": "aa"}}]
        >>> check_teacher({"model": "t.keras", "path": None, "sha256": "aa"}, old)
        >>> check_teacher({"model": "u.keras", "path": None, "sha256": "bb"}, old)
        Traceback (most recent call last):
        ...
        tfdp.errors.StateError: the teacher now (--teacher-model 'u.keras', weights sha256 bb) is not the run's (--teacher-model 't.keras', weights sha256 aa): resume with the run's teacher, or start a new run
    """  # noqa: E501
    start = history[0] if history and isinstance(history[0], Mapping) else {}
    saved = start.get("teacher")
    if not record or not isinstance(saved, Mapping) or saved.get("sha256") == record["sha256"]:
        return

    def said(r: Mapping[str, Any]) -> str:
        path = f", --teacher-path {r['path']!r}" if r.get("path") else ""
        return f"--teacher-model {r.get('model')!r}{path}, weights sha256 {r.get('sha256')}"

    raise StateError(
        f"the teacher now ({said(record)}) is not the run's ({said(saved)}): resume with the "
        "run's teacher, or start a new run"
    )


def start_notes(cfg: Any, files: ModelFiles, record: Mapping[str, Any]) -> list[str]:
    """What a new run's start line says of ``--finetune`` and the teacher.

    Example:
        >>> from tfdp.recipe.config import TrainConfig
        >>> cfg = TrainConfig(model="deit_tiny_patch16_224", finetune="deit.pth")
        >>> start_notes(cfg, ModelFiles(notes=["head re-initialised"]), {})
        ["fine-tuning from 'deit.pth': head re-initialised"]
    """
    out = []
    if cfg.finetune:
        out.append(f"fine-tuning from {cfg.finetune!r}: " + ("; ".join(files.notes) or "as is"))
    if record:
        out.append(
            f"distilling ({cfg.distillation_type}, alpha {cfg.distillation_alpha:g}"
            + (f", tau {cfg.distillation_tau:g}" if cfg.distillation_type == "soft" else "")
            + f") from teacher {record['model']!r} (weights sha256 {record['sha256']})"
        )
    return out
