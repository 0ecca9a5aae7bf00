"""DeiT's distillation: the distilled model's two heads, the teacher beside it, DeiT's loss.

This module owns:

- :class:`DistilledHeads`: DeiT's class head on the class token and
  distillation head on the distillation token; at inference (and in training
  unless distillation asks for both) their average, as timm's
  ``VisionTransformerDistilled`` and DeiT's ``DistilledVisionTransformer``;
- :class:`Distiller`: a distilled student with a frozen teacher held
  *untracked* (neither trained, saved nor checkpointed: the run records which
  teacher instead). In training it returns ``[B, 3, K]``: the class head's,
  the distillation head's and the teacher's logits, the teacher run in
  inference mode, without gradients, on the same (mixed) images; at inference
  the student's averaged ``[B, K]``. Saving it saves the student;
- :func:`distillation_loss`: DeiT's ``DistillationLoss`` (``losses.py``) as
  tfdp's per-example loss over that output;
- :class:`ClassHead`: a training metric read on the class head.

The loss, per example ``i`` of a batch of ``B`` with ``K`` classes::

    base_i * (1 - alpha) + alpha * distill_i
    soft: distill_i = tau**2 / K * sum_k p_t(k) (log p_t(k) - log p_s(k))
          (log p = log_softmax(logits / tau): the student's distillation head, the teacher)
    hard: distill_i = cross-entropy(distillation head, argmax of the teacher)

DeiT sums the soft term over the whole batch and divides by
``outputs_kd.numel() = B * K``; the mean of ``distill_i`` over the batch is
exactly that, and the mean of ``base_i`` is DeiT's base criterion (a mean
over the batch). tfdp divides each replica's sum by the global batch
(``tf.nn.compute_average_loss``), so the loss and gradient are the mean of
the replicas' DeiT losses: what DDP's average of the ranks' gradients gives.

Example:
    >>> import numpy as np
    >>> loss = distillation_loss(lambda y, z: np.zeros(len(y), "float32"), "hard", 0.5, 1.0)
    >>> pred = np.array([[[0.0, 0.0], [0.0, 0.0], [5.0, 0.0]]], "float32")  # cls, dist, teacher
    >>> round(float(loss(np.array([1]), pred)[0]), 4)  # 0.5 * -log(1/2)
    0.3466
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import tensorflow as tf

from tfdp._compat.keras import hold_untracked
from tfdp.errors import ConfigError
from tfdp.models.names import DISTILLATION_TYPES


@keras.saving.register_keras_serializable(package="tfdp")
class DistilledHeads(keras.layers.Layer):
    """DeiT's two heads on tokens ``[B, T, D]``: ``head`` on token 0, ``head_dist`` on token 1.

    Returns the average of their logits ``[B, K]`` (float32), or, in training
    with ``distilled_training`` set (:class:`Distiller` sets it: timm's
    ``set_distilled_training``), both stacked ``[B, 2, K]``.

    Args:
        num_classes: Each head's width.
        **kwargs: ``keras.layers.Layer``'s.

    Example:
        >>> import numpy as np
        >>> heads = DistilledHeads(3)
        >>> tokens = np.random.default_rng(0).normal(size=(2, 5, 4)).astype("float32")
        >>> avg = heads(tokens)
        >>> heads.distilled_training = True
        >>> both = heads(tokens, training=True)
        >>> tuple(avg.shape), tuple(both.shape), bool(np.allclose(avg, both.numpy().mean(1)))
        ((2, 3), (2, 2, 3), True)
    """

    def __init__(self, num_classes: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.num_classes = int(num_classes)
        self.head = keras.layers.Dense(self.num_classes, dtype="float32", name="head")
        self.head_dist = keras.layers.Dense(self.num_classes, dtype="float32", name="head_dist")
        self.distilled_training = False

    def build(self, input_shape: Any) -> None:
        """Build both heads for features of the tokens' width."""
        features = (None, input_shape[-1])
        self.head.build(features)
        self.head_dist.build(features)
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """``[B, K]`` (the heads' average), or ``[B, 2, K]`` (see the class)."""
        cls = self.head(inputs[:, 0])
        dist = self.head_dist(inputs[:, 1])
        if training and self.distilled_training:
            return tf.stack([cls, dist], axis=1)
        return (cls + dist) / 2

    def compute_output_shape(self, input_shape: Any) -> Any:
        """``(B, K)``: the inference output."""
        return (input_shape[0], self.num_classes)

    def get_config(self) -> dict[str, Any]:
        """Keras's configuration and ``num_classes``."""
        return {**super().get_config(), "num_classes": self.num_classes}


def distilled_heads(model: Any) -> DistilledHeads | None:
    """The :class:`DistilledHeads` layer of ``model`` (a layer of its top level), or None.

    Example:
        >>> from tfdp.models import ViTSpec, vision_transformer
        >>> spec = ViTSpec("demo", width=16, depth=1, heads=2, distilled=True)
        >>> distilled_heads(vision_transformer(spec, (16, 16, 3), 4)).name
        'heads'
    """
    for layer in getattr(model, "layers", ()):
        if isinstance(layer, DistilledHeads):
            return layer
    return None


@keras.saving.register_keras_serializable(package="tfdp")
class Distiller(keras.Model):
    """A distilled student and its teacher, trained as DeiT's ``main.py`` trains them.

    ``call(x, training=True)``: ``[B, 3, K]``, the student's class and
    distillation logits and the teacher's (run with ``training=False`` and
    no gradient, on the same ``x``); ``call(x)``: the student's inference
    output, the two heads averaged. The student is tracked (trained, saved,
    checkpointed under ``student``); the teacher is not (it may be ``None``
    where only the student's inference is needed: a checkpoint read back,
    an evaluation). :meth:`save` saves the student. Trains under
    :class:`tfdp.train.Trainer` with :func:`distillation_loss` and
    :class:`ClassHead` metrics; ``compile`` (``model.fit``) is refused.

    Args:
        student: A model with :class:`DistilledHeads` (``deit_*_distilled_*``).
        teacher: A Keras model of the same inputs and class count, or None.
        **kwargs: ``keras.Model``'s (``name``).

    Raises:
        ConfigError: a student without distillation head (``argument="student"``),
            a teacher of another class count (``argument="teacher"``).

    Example:
        >>> import numpy as np, keras
        >>> from tfdp.models import ViTSpec, vision_transformer
        >>> spec = ViTSpec("demo", width=16, depth=1, heads=2, distilled=True)
        >>> student = vision_transformer(spec, (16, 16, 3), 4)
        >>> teacher = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(),
        ...                             keras.layers.Dense(4)])
        >>> model = Distiller(student, teacher)
        >>> x = np.zeros((2, 16, 16, 3), "float32")
        >>> tuple(model(x, training=True).shape), tuple(model(x).shape)
        ((2, 3, 4), (2, 4))
        >>> len(model.weights) == len(student.weights)  # the teacher is not the model's
        True
    """

    def __init__(self, student: keras.Model, teacher: keras.Model | None = None, **kwargs: Any):
        kwargs.setdefault("name", f"{student.name}_distiller")
        super().__init__(**kwargs)
        heads = distilled_heads(student)
        if heads is None:
            raise ConfigError(
                f"{student.name!r} has no distillation head: DeiT's distillation trains "
                "a distilled model (deit_*_distilled_patch16_224), whose distillation token's "
                "head learns from the teacher",
                argument="student",
            )
        width = getattr(teacher, "output_shape", None) if teacher is not None else None
        if teacher is not None and (not isinstance(width, tuple) or width[-1] != heads.num_classes):
            raise ConfigError(
                f"{teacher.name!r} outputs {width}, the student {heads.num_classes} "
                "classes: the teacher must give one logit per class of the data",
                argument="teacher",
            )
        heads.distilled_training = True
        self.student = student
        hold_untracked(self, "teacher", teacher)
        self.built = True

    def call(self, inputs: Any, training: bool | None = None) -> Any:
        """``[B, 3, K]`` in training (class, distillation, teacher), else ``[B, K]``."""
        if not training:
            return self.student(inputs, training=False)
        if self.teacher is None:
            raise ConfigError(
                f"model {self.name!r} has no teacher: give one to train it", argument="teacher"
            )
        heads = self.student(inputs, training=True)
        taught = tf.stop_gradient(tf.cast(self.teacher(inputs, training=False), heads.dtype))
        return tf.concat([heads, taught[:, None]], axis=1)

    def save(self, filepath: Any, *args: Any, **kwargs: Any) -> Any:
        """Save the student (``keras.Model.save``): its output averages the two heads."""
        return self.student.save(filepath, *args, **kwargs)

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """Refused: ``model.fit`` would read the ``[B, 3, K]`` training output as the prediction."""
        raise ConfigError(
            f"{self.name!r} is a Distiller: train it with tfdp.train.Trainer and "
            "distillation_loss (model.fit's compiled metrics and held-out loss would read its "
            "stacked training output as one prediction)",
            argument="model",
        )

    def get_config(self) -> dict[str, Any]:
        """The student's configuration (the teacher is no part of the model)."""
        return {"student": keras.saving.serialize_keras_object(self.student), "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Distiller:
        """A Distiller of the saved student, without teacher."""
        student = keras.saving.deserialize_keras_object(config["student"])
        return cls(student, None, name=config.get("name"))


def distillation_loss(
    base: Callable[[Any, Any], Any], kind: str, alpha: float, tau: float
) -> Callable[[Any, Any], Any]:
    """DeiT's ``DistillationLoss`` per example, over a :class:`Distiller`'s ``[B, 3, K]`` output.

    Args:
        base: The base criterion per example, ``(y_true, class logits) -> [B]``
            (cross-entropy, label-smoothed, or soft-target under Mixup: DeiT's).
        kind: ``"soft"`` or ``"hard"``.
        alpha: The distillation term's weight, in ``[0, 1]``.
        tau: The soft term's temperature, ``> 0``.

    Returns:
        ``loss(y_true, y_pred) -> [B]`` (float32); its mean over a batch is DeiT's
        loss of that batch (see the module's text).

    Raises:
        ConfigError: a kind, alpha or tau out of range, naming it.

    Example:
        >>> import numpy as np
        >>> zero = lambda y, z: np.zeros(len(y), "float32")
        >>> same = np.zeros((1, 3, 4), "float32")
        >>> float(distillation_loss(zero, "soft", 0.5, 2.0)(np.array([0]), same)[0])
        0.0
        >>> distillation_loss(zero, "none", 0.5, 1.0)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: kind: must be 'soft' or 'hard', got 'none'
    """
    if kind not in DISTILLATION_TYPES:
        raise ConfigError(f"must be 'soft' or 'hard', got {kind!r}", argument="kind")
    if not 0 <= alpha <= 1:
        raise ConfigError(f"must be in [0, 1], got {alpha!r}", argument="alpha")
    if not tau > 0:
        raise ConfigError(f"must be > 0, got {tau!r}", argument="tau")

    def loss(y_true: Any, y_pred: Any) -> Any:
        pred = tf.cast(y_pred, tf.float32)
        cls, dist, teacher = pred[:, 0], pred[:, 1], pred[:, 2]
        base_loss = tf.cast(base(y_true, cls), tf.float32)
        if kind == "soft":
            log_s = tf.nn.log_softmax(dist / tau, axis=-1)
            log_t = tf.nn.log_softmax(teacher / tau, axis=-1)
            kl = tf.reduce_sum(tf.exp(log_t) * (log_t - log_s), axis=-1)  # F.kl_div, log_target
            distill = kl * (tau * tau) / tf.cast(tf.shape(dist)[-1], tf.float32)
        else:
            target = tf.argmax(teacher, axis=-1)
            distill = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=target, logits=dist)
        return base_loss * (1 - alpha) + distill * alpha

    loss.__name__ = f"deit_{kind}_distillation"
    return loss


@keras.saving.register_keras_serializable(package="tfdp")
class ClassHead(keras.metrics.Metric):
    """``metric`` read on the class head of a :class:`Distiller`'s training output.

    A ``[B, 3, K]`` prediction (training) is read as its ``[:, 0]``, the class
    head's logits, as DeiT's ``train_one_epoch`` reads ``outputs``; a ``[B, K]``
    one (inference) as it is. Named as ``metric``.

    Example:
        >>> import numpy as np
        >>> m = ClassHead(keras.metrics.SparseCategoricalAccuracy())
        >>> m.update_state(np.array([1]), np.array([[[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]]]))
        >>> m.name, float(m.result())
        ('sparse_categorical_accuracy', 1.0)
    """

    def __init__(self, metric: Any, **kwargs: Any) -> None:
        metric = keras.metrics.get(metric) if isinstance(metric, (str, dict)) else metric
        kwargs.setdefault("name", metric.name)
        super().__init__(**kwargs)
        self.metric = metric

    def update_state(self, y_true: Any, y_pred: Any, sample_weight: Any = None) -> Any:
        """Update ``metric`` with the class head's logits."""
        if len(y_pred.shape) == 3:
            y_pred = y_pred[:, 0]
        return self.metric.update_state(y_true, y_pred, sample_weight=sample_weight)

    def result(self) -> Any:
        """``metric``'s result."""
        return self.metric.result()

    def reset_state(self) -> None:
        """Reset ``metric``."""
        self.metric.reset_state()

    def get_config(self) -> dict[str, Any]:
        """``metric`` serialised, and the name."""
        return {"metric": keras.metrics.serialize(self.metric), "name": self.name}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ClassHead:
        """A ClassHead of the saved metric (a fresh one: :class:`tfdp.train.Evaluator` clones)."""
        return cls(keras.metrics.deserialize(config["metric"]), name=config.get("name"))
