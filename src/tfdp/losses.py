"""The loss and the accuracy that soft targets (Mixup / CutMix, label smoothing) need.

:class:`tfdp.augment.Mixup` turns class labels into timm's soft targets
``[B, num_classes]``. This module says what to train them with, as Keras
objects configured for tfdp's training step:

* :func:`soft_target_cross_entropy` -- timm's ``SoftTargetCrossEntropy``
  (``sum(-target * log_softmax(logits))`` per sample) is Keras'
  ``CategoricalCrossentropy(from_logits=True)``; with ``reduction="none"``
  it returns one loss per sample, which the step scales with
  ``tf.nn.compute_average_loss`` (a mean-reduced Keras loss would also divide
  by the number of replicas). ``dtype`` is the type it computes in (Keras's
  losses default to float32 whatever the model's): the Trainer rebuilds it
  in a float64 model's type itself; for ``model.fit`` build it with
  ``dtype="float64"`` (see :mod:`tfdp.train.dtypes`).
* :func:`soft_target_accuracy` -- Keras' ``CategoricalAccuracy``: the
  prediction's argmax against the soft target's. Under Mixup that is the
  class with the larger weight (the sample's own when ``lam >= 0.5``), so
  the training accuracy measures agreement with the dominant class: lower
  than, and not comparable with, an unmixed run's. DeiT reports no training
  accuracy; evaluate on unmixed data (hard labels) for the number to report.

Example:
    >>> import tensorflow as tf
    >>> loss = soft_target_cross_entropy()
    >>> logits = tf.constant([[2.0, 0.0], [0.0, 2.0]])
    >>> targets = tf.constant([[0.75, 0.25], [0.5, 0.5]])
    >>> [round(v, 4) for v in loss(targets, logits).numpy().tolist()]
    [0.6269, 1.1269]
"""

from __future__ import annotations

from typing import Any

__all__ = ["soft_target_accuracy", "soft_target_cross_entropy"]


def soft_target_cross_entropy(
    from_logits: bool = True,
    reduction: str | None = "none",
    name: str = "soft_target_ce",
    dtype: str | None = None,
) -> Any:
    """The ``SoftTargetCrossEntropy`` of timm, per sample: ``keras.losses.CategoricalCrossentropy``.

    Args:
        from_logits: The model outputs logits (DeiT's heads do).
        reduction: ``"none"`` (one loss per sample, for ``tf.nn.compute_average_loss``).
        name: The loss' name.
        dtype: The type it computes in (None: ``keras.config.floatx()``; ``"float64"``
            for a float64 model on the ``model.fit`` path).

    Example:
        >>> loss = soft_target_cross_entropy(dtype="float64")
        >>> type(loss).__name__, loss([[0.5, 0.5]], [[0.0, 0.0]]).dtype.name
        ('CategoricalCrossentropy', 'float64')
    """
    import keras

    return keras.losses.CategoricalCrossentropy(
        from_logits=from_logits, reduction=reduction, name=name, dtype=dtype
    )


def soft_target_accuracy(name: str = "accuracy") -> Any:
    """Accuracy against the soft target's argmax: ``keras.metrics.CategoricalAccuracy``.

    Example:
        >>> import tensorflow as tf
        >>> acc = soft_target_accuracy()
        >>> acc.update_state(tf.constant([[0.6, 0.4], [0.3, 0.7]]), tf.constant([[1.0, 0.0],
        ...                  [1.0, 0.0]]))
        >>> float(acc.result())
        0.5
    """
    import keras

    return keras.metrics.CategoricalAccuracy(name=name)
