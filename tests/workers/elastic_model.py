"""A tiny model for the elastic-resume CLI test: ``--model elastic_model:tiny``.

With ``TFDP_ELASTIC_SLOW=1`` every forward pass sleeps 100 ms, so that a test can stop the group
by SIGTERM in the middle of a run on any machine.
"""

from __future__ import annotations

import os
import time

import keras
import numpy as np
import tensorflow as tf


def _sleep(x: np.ndarray) -> np.ndarray:
    time.sleep(0.1)
    return x


def tiny(input_shape, num_classes):
    inputs = keras.Input(input_shape)
    x = inputs
    if os.environ.get("TFDP_ELASTIC_SLOW"):

        def slow(t):
            out = tf.numpy_function(_sleep, [t], t.dtype, stateful=True)
            out.set_shape(t.shape)
            return out

        x = keras.layers.Lambda(slow)(x)
    x = keras.layers.Flatten()(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x))
