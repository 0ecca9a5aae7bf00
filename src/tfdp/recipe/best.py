"""``model_best.keras``: the model of the best held-out epoch so far, by ``--eval-metric``.

This module owns :class:`BestModel`, a Keras callback the training job hands
to :meth:`tfdp.train.Trainer.fit`: after every epoch's exact evaluation it
compares the chosen ``val_*`` metric with the best so far (higher is better,
lower for a loss) and, on the chief, saves the model as
``RUN_DIR/model_best.keras`` and the record as ``RUN_DIR/model_best.json``
(both written atomically), which a resumed run reads back so that "best"
spans the whole run, as timm's ``CheckpointSaver`` keeps its best.

Example:
    >>> import tempfile, keras
    >>> m = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    >>> run = tempfile.mkdtemp()
    >>> best = BestModel(run, "val_loss", is_chief=True); best.set_model(m)
    >>> best.on_epoch_end(0, {"val_loss": 2.0}); best.on_epoch_end(1, {"val_loss": 3.0})
    >>> BestModel(run, "val_loss", is_chief=True).best  # read back by a resumed run
    {'metric': 'val_loss', 'value': 2.0, 'epoch': 1}
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import keras

#: The best model's file in the run directory, and its record.
BEST_FILE = "model_best.keras"
_RECORD = "model_best.json"


class BestModel(keras.callbacks.Callback):
    """Saves the model when ``metric`` (a ``val_*`` key of the epoch's logs) is the best yet.

    Args:
        run_dir: The run directory.
        metric: The key, e.g. ``"val_sparse_categorical_accuracy"``; a name
            ending in ``loss`` is better lower.
        is_chief: Only the chief writes (every worker compares alike).
    """

    def __init__(self, run_dir: str, metric: str, *, is_chief: bool) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.metric = metric
        self.is_chief = is_chief
        self.lower = metric.endswith("loss")
        self.best: dict[str, Any] | None = None
        path = os.path.join(run_dir, _RECORD)
        if os.path.isfile(path):
            try:
                with open(path, encoding="utf-8") as f:
                    record = json.load(f)
            except (OSError, ValueError):  # unreadable: the run's later epochs decide again
                record = None
            if isinstance(record, dict) and record.get("metric") == metric:
                self.best = record

    def _better(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        if self.best is None:
            return True
        old = float(self.best["value"])
        return value < old if self.lower else value > old

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        """Save the model if this epoch's ``metric`` beats the best so far."""
        value = (logs or {}).get(self.metric)
        if value is None or not self._better(float(value)):
            return
        self.best = {"metric": self.metric, "value": float(value), "epoch": epoch + 1}
        if not self.is_chief:
            return
        from tfdp.recipe.model import save_model
        from tfdp.recipe.rundir import write_json_atomic

        save_model(self.model, self.run_dir, BEST_FILE)
        write_json_atomic(os.path.join(self.run_dir, _RECORD), self.best)
