"""In-memory array source: NumPy arrays (one, or a tuple or dict of them) by index.

This module owns :class:`ArraySource`. Lookup is a ``tf.gather`` inside the
graph on whole batches of indices: no per-sample Python.

Example:
    >>> import numpy as np
    >>> src = ArraySource((np.arange(12).reshape(6, 2), np.arange(6)))
    >>> src.num_examples
    6
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tfdp.errors import ConfigError


class ArraySource:
    """Random access to in-memory arrays sharing their first dimension.

    Args:
        arrays: A NumPy array, or a tuple/list or dict of them, all with the
            same length along axis 0 (the example axis).

    Raises:
        ValueError: for no arrays, arrays of rank 0, or lengths that differ
            (naming the offending entry).

    Example:
        >>> import numpy as np
        >>> src = ArraySource({"image": np.zeros((4, 8, 8, 1)), "label": np.arange(4)})
        >>> src.num_examples, sorted(src.element_spec)
        (4, ['image', 'label'])
    """

    streaming = False

    def __init__(self, arrays: Any) -> None:
        import tensorflow as tf

        if isinstance(arrays, dict):
            items = list(arrays.items())
        elif isinstance(arrays, (tuple, list)):
            items = [(f"arrays[{i}]", a) for i, a in enumerate(arrays)]
        else:
            items = [("arrays", arrays)]
        if not items:
            raise ConfigError("must hold at least one array", argument="arrays")
        lengths = {}
        for name, a in items:
            a = np.asarray(a)
            if a.ndim == 0:
                raise ConfigError(
                    f"{name} must have an example axis (rank >= 1), got a scalar",
                    argument="arrays",
                )
            lengths[name] = a.shape[0]
        if len(set(lengths.values())) != 1:
            raise ConfigError(
                "all must have the same number of examples (axis 0), got "
                + ", ".join(f"{k}: {v}" for k, v in lengths.items()),
                argument="arrays",
            )
        self.num_examples = int(next(iter(lengths.values())))
        if self.num_examples < 1:
            raise ConfigError("hold no example (length 0 along axis 0)", argument="arrays")
        with tf.device("/cpu:0"):
            tensors = [tf.convert_to_tensor(np.asarray(a)) for _, a in items]
        if isinstance(arrays, dict):
            self._tensors: Any = dict(zip(arrays.keys(), tensors, strict=True))
        elif isinstance(arrays, (tuple, list)):
            self._tensors = tuple(tensors)
        else:
            self._tensors = tensors[0]
        self.element_spec = tf.nest.map_structure(
            lambda t: tf.TensorSpec(t.shape[1:], t.dtype), self._tensors
        )

    def gather(self, indices: Any) -> Any:
        """The examples at ``indices`` (int64 ``[B]``), batched: a graph-compatible gather."""
        import tensorflow as tf

        return tf.nest.map_structure(lambda t: tf.gather(t, indices), self._tensors)

    def load(self, index: Any) -> Any:
        """The example at a scalar ``index``."""
        import tensorflow as tf

        return tf.nest.map_structure(lambda t: tf.gather(t, index), self._tensors)

    def numpy(self) -> Any:
        """The arrays, as NumPy, in the structure they were given.

        Example:
            >>> import numpy as np
            >>> ArraySource((np.arange(3), np.ones(3))).numpy()[0].tolist()
            [0, 1, 2]
        """
        import tensorflow as tf

        return tf.nest.map_structure(lambda t: t.numpy(), self._tensors)

    def __len__(self) -> int:
        return self.num_examples

    def __repr__(self) -> str:
        return f"ArraySource(num_examples={self.num_examples})"
