"""What training tells: console lines, the progress bar, metrics.jsonl, TensorBoard, sample ids.

This module owns :class:`TrainLogs`, the chief's account of a run (every
other worker's is silent, so nothing is written twice):

- the console: a line per epoch on stdout (``verbose=1``); a Keras progress
  bar only when stderr is a terminal, and then on stderr (a redirected
  stdout gets no ANSI escapes or carriage returns); when it is not a
  terminal, with ``log_every=N``, a plain line every ``N`` optimizer steps
  (epoch, step, the loss and every scalar the step adds -- each the mean
  since the previous line, by its name --, learning rate, samples/s), as timm's
  ``--log-interval``;
- ``<run_dir>/metrics.jsonl``: one JSON record per completed epoch,
  truncated after a resume to the restored step;
- TensorBoard in Keras's layout: ``<run_dir>/tensorboard/train`` and
  ``.../validation`` with ``epoch_*`` tags at step = epoch (so the curves
  of both runs, and of a ``model.fit`` run, overlay), plus ``batch_<name>``
  scalars (the loss, every scalar the step adds, the learning rate,
  samples/s) at step = global step every ``log_every`` steps;
- ``record_samples``: the example ids each replica consumed, per step.

Example:
    >>> import io, json, tempfile
    >>> out = io.StringIO()
    >>> d = tempfile.mkdtemp()
    >>> logs = TrainLogs(d, log_every=2, progress=False, stream=out)
    >>> logs.epoch_begin(0, steps_per_epoch=4)
    >>> for step in (1, 2):
    ...     logs.steps_end(epoch=0, step=step, global_step=step, samples=8, lr=0.1,
    ...                    values={"loss": [0.5], "grad_norm": [float(step)]})
    >>> out.getvalue().split()[:10]
    ['epoch', '1', 'step', '2/4', 'global_step', '2', 'loss', '0.5000', 'grad_norm', '1.5']
    >>> logs.epoch_end({"epoch": 0, "step": 4, "global_step": 4, "time": 1.0, "loss": 0.5,
    ...                 "samples_per_s": 32.0, "lr": 0.1})
    >>> json.loads(open(d + "/metrics.jsonl").read())["loss"]
    0.5
    >>> logs.close()
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO, Any

import numpy as np

from tfdp._util import write_text_atomic

log = logging.getLogger("tfdp")

# Record keys that are bookkeeping, not measurements, in the console line and TensorBoard.
_POSITION = ("epoch", "step", "global_step")
_NOT_IN_LINE = (*_POSITION, "time", "samples_per_s", "lr")
# metrics.jsonl's name -> Keras's TensorBoard name.
_TB_NAMES = {"lr": "learning_rate"}


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is an interactive terminal (False for files, pipes, captures).

    Example:
        >>> import io
        >>> is_terminal(io.StringIO())
        False
    """
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _rate(per_s: float) -> str:
    """A rate as a line says it: whole numbers from 10 on, else two significant digits.

    Example:
        >>> _rate(1234.56), _rate(12.4), _rate(0.1673), _rate(0.0)
        ('1235', '12', '0.17', '0')
    """
    return f"{per_s:.0f}" if per_s >= 10 or per_s == 0 else f"{per_s:.2g}"


class TrainLogs:
    """The chief's console, progress bar, metrics.jsonl, TensorBoard and sample-id log.

    Args:
        run_dir: Where ``metrics.jsonl`` and ``tensorboard/`` go (None: no files).
        is_chief: Only the chief writes or prints anything.
        verbose: 1 prints a line per epoch (and the plain step lines); 0 is quiet.
        progress: Show a Keras progress bar when ``bar_stream`` is a terminal.
        log_every: Every this many optimizer steps, a plain line (when no
            bar is shown and ``verbose``) and ``batch_*`` TensorBoard scalars;
            0: neither.
        record_samples: A JSON-lines file receiving the ids of every step.
        accumulation_steps: Micro-batches per optimizer step (labels the id records).
        stream: Where lines go (default: ``sys.stdout`` at the time of writing).
        bar_stream: Where the bar goes, only if it is a terminal (default:
            ``sys.stderr``).

    Example:
        >>> TrainLogs(None, progress=False).tensorboard_dir is None
        True
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None,
        *,
        is_chief: bool = True,
        verbose: int = 1,
        progress: bool = True,
        log_every: int = 0,
        record_samples: str | os.PathLike[str] | None = None,
        accumulation_steps: int = 1,
        stream: IO[str] | None = None,
        bar_stream: IO[str] | None = None,
    ) -> None:
        self.run_dir = os.fspath(run_dir) if run_dir is not None else None
        self.is_chief = is_chief
        self.verbose = verbose if is_chief else 0
        self.progress = progress and is_chief
        self.log_every = log_every
        self.record_samples = os.fspath(record_samples) if record_samples is not None else None
        self.accumulation_steps = accumulation_steps
        self._stream = stream
        self._bar_stream = bar_stream
        self._writers: dict[str, Any] = {}
        self._bar: Any = None
        self._steps_per_epoch = 0
        self._interval: dict[str, list[float]] = {}
        self._interval_samples = 0
        self._interval_t0 = time.perf_counter()

    @property
    def tensorboard_dir(self) -> str | None:
        """``<run_dir>/tensorboard`` (its ``train`` and ``validation`` runs), or None."""
        return os.path.join(self.run_dir, "tensorboard") if self.run_dir is not None else None

    @property
    def stream(self) -> IO[str]:
        """Where lines go (``sys.stdout`` unless given)."""
        return self._stream if self._stream is not None else sys.stdout

    @property
    def bar_stream(self) -> IO[str]:
        """Where the bar goes when it is a terminal (``sys.stderr`` unless given)."""
        return self._bar_stream if self._bar_stream is not None else sys.stderr

    def print(self, text: str) -> None:
        """A line on the console (chief, ``verbose``)."""
        if self.verbose:
            print(text, file=self.stream, flush=True)

    # -- TensorBoard ---------------------------------------------------------------------
    def _writer(self, run: str) -> Any:
        if self.tensorboard_dir is None or not self.is_chief:
            return None
        if run not in self._writers:
            import tensorflow as tf

            self._writers[run] = tf.summary.create_file_writer(
                os.path.join(self.tensorboard_dir, run)
            )
        return self._writers[run]

    def _scalars(self, run: str, values: dict[str, float], step: int) -> None:
        writer = self._writer(run)
        if writer is None or not values:
            return
        import tensorflow as tf

        with writer.as_default(step=step):
            for name, value in values.items():
                tf.summary.scalar(name, value)
        writer.flush()

    # -- per epoch and per call ----------------------------------------------------------
    def epoch_begin(self, epoch: int, steps_per_epoch: int) -> None:
        """Start an epoch's bar (on a terminal) and its step-line interval."""
        self._steps_per_epoch = steps_per_epoch
        self._interval, self._interval_samples = {}, 0
        self._interval_t0 = time.perf_counter()
        self._bar = None
        if self.progress and is_terminal(self.bar_stream):
            import keras

            with contextlib.redirect_stdout(self.bar_stream):  # Keras's bar writes to stdout
                self._bar = keras.utils.Progbar(steps_per_epoch, stateful_metrics=["loss"])

    def steps_end(
        self,
        *,
        epoch: int,
        step: int,
        global_step: int,
        values: Mapping[str, Sequence[float]],
        samples: int,
        lr: float,
        epoch_loss: float | None = None,
    ) -> None:
        """After a compiled call: move the bar, or write the step line and scalars when due.

        Args:
            epoch: The (0-based) epoch.
            step: Optimizer steps done in the epoch after this call.
            global_step: Optimizer steps done in the run after this call.
            values: The call's applied steps' values by name -- ``loss`` and
                every scalar the step adds (already reduced over replicas and
                workers: no metric is read); each is told as the mean since
                the previous line, under its name.
            samples: Examples the call consumed, over all replicas.
            lr: The learning rate now.
            epoch_loss: The running mean of the epoch's step losses (the bar's value).
        """
        if not self.is_chief:
            return
        for name, vals in values.items():
            self._interval.setdefault(name, []).extend(vals)
        self._interval_samples += samples
        if self._bar is not None:
            value = epoch_loss if epoch_loss is not None else float("nan")
            with contextlib.redirect_stdout(self.bar_stream):
                self._bar.update(step, values=[("loss", value)])
        if not self.log_every or global_step % self.log_every:
            return
        elapsed = time.perf_counter() - self._interval_t0
        means = {"loss": float("nan")}
        means.update((k, sum(v) / len(v) if v else float("nan")) for k, v in self._interval.items())
        rate = self._interval_samples / max(elapsed, 1e-9)
        self._interval, self._interval_samples = {}, 0
        self._interval_t0 = time.perf_counter()
        if self._bar is None:
            told = "  ".join(
                f"{k} {v:.4f}" if k == "loss" else f"{k} {v:.4g}" for k, v in means.items()
            )
            self.print(
                f"epoch {epoch + 1}  step {step}/{self._steps_per_epoch}  "
                f"global_step {global_step}  {told}  lr {lr:.4g}  {_rate(rate)} samples/s"
            )
        scalars = {f"batch_{k}": v for k, v in means.items()}
        scalars.update(batch_learning_rate=lr, batch_samples_per_s=rate)
        self._scalars("train", scalars, global_step)

    def epoch_end(self, record: dict[str, Any]) -> None:
        """The epoch's line, its metrics.jsonl record and its TensorBoard scalars (chief)."""
        if not self.is_chief:
            return
        self._bar = None
        if self.verbose:
            parts = [f"epoch {record['epoch'] + 1}", f"{record['time']:.1f}s"]
            parts += [
                f"{k} {v:.4f}"
                for k, v in record.items()
                if k not in _NOT_IN_LINE and isinstance(v, float)
            ]
            parts.append(f"{_rate(record['samples_per_s'])} samples/s")
            self.print("  ".join(parts))
        if self.run_dir is not None:
            os.makedirs(self.run_dir, exist_ok=True)
            with open(os.path.join(self.run_dir, "metrics.jsonl"), "a") as f:
                f.write(json.dumps(record) + "\n")
        train: dict[str, float] = {}
        validation: dict[str, float] = {}
        for k, v in record.items():
            if k in _POSITION or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if k.startswith("val_"):
                validation[f"epoch_{k[4:]}"] = v
            else:
                train[f"epoch_{_TB_NAMES.get(k, k)}"] = v
        self._scalars("train", train, record["epoch"])
        self._scalars("validation", validation, record["epoch"])

    # -- metrics.jsonl after a resume ----------------------------------------------------
    def truncate(self, global_step: int) -> None:
        """Rewrite ``metrics.jsonl`` atomically without its lines past ``global_step`` (chief)."""
        if not self.is_chief or self.run_dir is None:
            return
        path = os.path.join(self.run_dir, "metrics.jsonl")
        if not os.path.exists(path):
            return
        with open(path) as f:
            lines = f.read().splitlines()
        kept = []
        for line in lines:
            try:
                record = json.loads(line)
            except ValueError:  # a line torn by a crash mid-write
                continue
            if isinstance(record, dict) and record.get("global_step", 0) <= global_step:
                kept.append(line)
        if len(kept) == len(lines):
            return
        log.warning(
            "tfdp: %s: dropped %d line(s) past the restored step %d (written before a crash)",
            path,
            len(lines) - len(kept),
            global_step,
        )
        write_text_atomic(path, "".join(line + "\n" for line in kept))

    # -- sample ids ----------------------------------------------------------------------
    def write_ids(self, ids: Any, epoch: int, first_step: int, world: int) -> None:
        """Append ``record_samples`` lines: per step, micro-batch and global rank (chief).

        ``ids`` is ``[steps, micro-batches, world * B]``, -1 where a batch is partial.
        """
        if not self.is_chief or self.record_samples is None:
            return
        arr = np.asarray(ids)
        n, k, total = arr.shape
        b = total // world
        with open(self.record_samples, "a") as f:
            for i in range(n):
                for m in range(k):
                    for r in range(world):
                        row = arr[i, m, r * b : (r + 1) * b]
                        rec = {
                            "epoch": epoch,
                            "step": first_step + i,
                            "rank": r,
                            "ids": row[row >= 0].tolist(),
                        }
                        if self.accumulation_steps > 1:
                            rec["micro_batch"] = m
                        f.write(json.dumps(rec) + "\n")

    def close(self) -> None:
        """Flush and close the TensorBoard writers (they reopen on the next write)."""
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()
        self._bar = None
