"""Keras callbacks, step logs and TensorBoard of the Trainer and the fit path (issue 12).

Callbacks under a real 2-replica MirroredStrategy (and 2 real worker processes for the stop
agreement): EarlyStopping on ``val_loss``, CSVLogger and a custom callback see the exact
validation, checked against a plain NumPy cross-entropy over the held-out set.
"""

from __future__ import annotations

import csv
import json
import re
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdp import ArraySource, DistributedInput
from tfdp.train import Trainer, fit

N, NE = 256, 37  # training rows; held-out rows (prime: the eval sampler pads)
RNG = np.random.default_rng(3)
X = RNG.normal(size=(N + NE, 6)).astype("float32")
Y = (X[:, 0] - 0.5 * X[:, 2] > 0).astype("int64")
XE, YE = X[N:], Y[N:]
X, Y = X[:N], Y[:N]
METRIC = "sparse_categorical_accuracy"


def make_model() -> keras.Model:
    keras.utils.set_random_seed(4)
    return keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(2)]
    )


def quiet_trainer(strategy, **options) -> Trainer:
    """The tests' Trainer: make_model, SGD(0.2), cross-entropy from logits, no bar, no lines."""
    return Trainer(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(0.2),
        "sparse_categorical_crossentropy_from_logits",
        progress=False,
        verbose=0,
        **options,
    )


def numpy_val_loss(model: keras.Model) -> float:
    """The held-out mean cross-entropy, computed in NumPy over every row once (the reference)."""
    logits = np.asarray(model(XE, training=False), dtype="float64")
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(NE), YE].mean())


def inputs(strategy):
    train = DistributedInput(strategy, ArraySource((X, Y)), batch_size=8)  # 16 steps per epoch
    held_out = DistributedInput(strategy, ArraySource((XE, YE)), sampler="eval", batch_size=4)
    return train, held_out


class Recorder(keras.callbacks.Callback):
    """Records every hook call; at each epoch end checks val_loss against the NumPy reference."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple] = []
        self.val_errors: list[float] = []

    def on_train_begin(self, logs=None):
        self.events.append(("train_begin",))

    def on_epoch_begin(self, epoch, logs=None):
        self.events.append(("epoch_begin", epoch))

    def on_train_batch_end(self, batch, logs=None):
        self.events.append(("batch_end", batch, sorted(logs or {})))

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.events.append(("epoch_end", epoch, sorted(logs)))
        if "val_loss" in logs:
            self.val_errors.append(abs(logs["val_loss"] - numpy_val_loss(self.model)))

    def on_train_end(self, logs=None):
        self.events.append(("train_end",))


def early_stopping() -> keras.callbacks.EarlyStopping:
    # min_delta=10: epoch 0 sets the best, epoch 1 cannot improve on it -> stop after epoch 1.
    return keras.callbacks.EarlyStopping(monitor="val_loss", patience=1, min_delta=10.0)


def check_csv(path: Path, epochs: int) -> list[dict[str, str]]:
    with open(path) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == epochs
    assert {"val_loss", f"val_{METRIC}", "loss", METRIC} <= set(rows[0])
    assert all("NA" not in row.values() for row in rows), rows
    return rows


def test_trainer_callbacks_see_exact_validation_and_stop(mirrored_of, tmp_path):
    strategy = mirrored_of(2)
    train, held_out = inputs(strategy)
    tr = Trainer(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(0.2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),  # as compile takes it
        metrics=[METRIC],
        steps_per_call=3,
        progress=False,
        verbose=0,
    )
    rec = Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hist = tr.fit(
            train,
            5,
            eval_input=held_out,
            callbacks=[early_stopping(), keras.callbacks.CSVLogger(tmp_path / "log.csv"), rec],
        )
    assert not [w for w in caught if "val_loss" in str(w.message)]  # EarlyStopping found it
    # EarlyStopping stopped after epoch 1 (of 5), and the Trainer says why.
    assert isinstance(hist, keras.callbacks.History) and hist.epoch == [0, 1]
    assert tr.state.epoch == 2 and tr.state.stopped_early and tr.state.stop_reason == "callback"
    assert hist.history["val_loss"] == [r["val_loss"] for r in tr.state.history]
    assert hist.history["loss"] == [r["loss"] for r in tr.state.history]
    # The exact validation was in the logs, equal to a NumPy pass over the held-out rows.
    assert len(rec.val_errors) == 2 and max(rec.val_errors) < 1e-5
    rows = check_csv(tmp_path / "log.csv", 2)
    assert [float(r["val_loss"]) for r in rows] == pytest.approx(hist.history["val_loss"])
    # Hooks: once per compiled call (3 steps each: batches 2, 5, ..., 14, then 15).
    calls = [2, 5, 8, 11, 14, 15]
    keys = ["loss", METRIC, "val_loss", f"val_{METRIC}"]
    assert rec.events == [
        ("train_begin",),
        *[
            e
            for epoch in (0, 1)
            for e in (
                ("epoch_begin", epoch),
                *[("batch_end", b, ["loss"]) for b in calls],
                ("epoch_end", epoch, sorted(keys)),
            )
        ],
        ("train_end",),
    ]


def test_trainer_callback_stop_mid_epoch_saves_and_resumes(mirrored_of, tmp_path):
    strategy = mirrored_of(2)
    train, _ = inputs(strategy)

    class StopAtStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 5:
                self.model.stop_training = True

    def make(run_dir):
        return quiet_trainer(strategy, steps_per_call=3, run_dir=run_dir)

    cut = make(tmp_path / "cut")
    hist = cut.fit(train, 2, callbacks=[StopAtStep()])
    assert hist.epoch == [] and (cut.state.epoch, cut.state.step) == (0, 6)
    assert cut.state.stop_reason == "callback" and cut.state.stopped_early
    assert tf.train.latest_checkpoint(str(tmp_path / "cut" / "checkpoints")).endswith("ckpt-6")
    resumed = make(tmp_path / "cut")
    assert resumed.fit(train, 2).epoch == [0, 1]
    full = make(None)
    full.fit(train, 2)
    for a, b in zip(full.model.weights, resumed.model.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6)


def test_fit_path_callbacks_see_exact_validation(mirrored_of, tmp_path):
    strategy = mirrored_of(2)
    train, held_out = inputs(strategy)
    with strategy.scope():
        model = make_model()
        model.compile(
            keras.optimizers.SGD(0.2),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=[METRIC],
        )
    rec = Recorder()
    tb = tmp_path / "tb"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hist = fit(
            model,
            train,
            5,
            eval_input=held_out,
            verbose=0,
            callbacks=[
                early_stopping(),
                keras.callbacks.CSVLogger(tmp_path / "log.csv"),
                keras.callbacks.TensorBoard(tb),
                rec,
            ],
        )
    assert not [w for w in caught if "val_loss" in str(w.message)]
    assert isinstance(hist, keras.callbacks.History) and hist.epoch == [0, 1]
    assert model.history is hist
    assert len(rec.val_errors) == 2 and max(rec.val_errors) < 1e-5
    rows = check_csv(tmp_path / "log.csv", 2)
    assert [float(r["val_loss"]) for r in rows] == pytest.approx(hist.history["val_loss"])
    assert list((tb / "validation").glob("events.out.tfevents.*"))  # Keras wrote val_* there


# Two workers stop together when one callback asks: tests/test_multiworker.py (one pair of
# worker processes runs it with the other MultiWorkerMirroredStrategy checks).


# -- step lines, progress bar, TensorBoard --------------------------------------------------------


def test_log_every_lines_and_no_escapes_when_redirected(mirrored_of, tmp_path, capfd):
    """Step lines every 5 steps (no escapes off a terminal), TensorBoard and metrics.jsonl; a
    quantity a step adds to its outputs -- tfdp's ``grad_norm`` when clipping, and ``rows`` of
    a step subclass, written in that one class -- is told by name in all three: the line and
    ``batch_<name>`` the mean since the previous line, the record the epoch's mean."""
    from tfdp.train.assemble import default_parts
    from tfdp.train.step import TrainStep

    class RowsStep(TrainStep):
        def replica_step(self, batches, with_ids=False, record_width=0):
            out = super().replica_step(batches, with_ids, record_width)
            out["rows"] = tf.cast(self.step_rows(batches), self.dtype)
            return out

    strategy = mirrored_of(2)
    train, held_out = inputs(strategy)
    parts = default_parts(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(0.2),
        "sparse_categorical_crossentropy_from_logits",
        metrics=[METRIC],
        clip_global_norm=100.0,  # never clips here: the step reports the norm
        log_every=5,
        run_dir=tmp_path,
        progress=True,  # asked for, but stderr is not a terminal: no bar
        verbose=1,
    )
    built = parts.step
    parts.step = RowsStep(
        strategy,
        built.model,
        built.optimizer,
        built.loss,
        built.train_loss,
        built.metrics,
        clip_global_norm=100.0,
    )
    tr = Trainer.from_parts(parts, steps_per_call=3)
    seen: list[int] = []
    losses: list[float] = []  # each step's loss (a call of 3 steps gives 3)
    norms: list[float] = []

    def on_step(state) -> None:
        seen.append(state.global_step)
        losses.extend(state.step_losses)
        norms.extend(state.outputs.scalars["grad_norm"].tolist())

    tr.fit(train, 2, eval_input=held_out, on_step=on_step)
    out, err = capfd.readouterr()
    for text in (out, err):
        assert "\x1b" not in text and "\r" not in text and "\b" not in text
    lines = [line for line in out.splitlines() if "global_step" in line]
    assert [int(re.search(r"global_step (\d+)", x).group(1)) for x in lines] == [
        5,
        10,
        15,
        20,
        25,
        30,
    ]
    assert re.fullmatch(
        r"epoch 1  step 5/16  global_step 5  loss \d\.\d{4}  grad_norm \S+  rows 16  lr 0\.2  "
        r"\d+ samples/s",
        lines[0],
    )
    assert {5, 10, 15, 20, 25, 30} <= set(seen)  # calls were cut to land on the log steps
    assert "epoch 2" in out and "val_loss" in out
    events = read_events(tmp_path / "tensorboard")
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert sorted(events["train"]["batch_loss"]) == [5, 10, 15, 20, 25, 30]
    # Keras's layout: epoch_* tags at step = epoch, validation in its own run
    assert events["train"]["epoch_loss"] == {
        0: pytest.approx(records[0]["loss"]),
        1: pytest.approx(records[1]["loss"]),
    }
    assert events["validation"]["epoch_loss"] == {
        0: pytest.approx(records[0]["val_loss"]),
        1: pytest.approx(records[1]["val_loss"]),
    }
    assert set(events["validation"]) == {"epoch_loss", f"epoch_{METRIC}"}
    assert events["train"]["epoch_learning_rate"][1] == pytest.approx(0.2)
    # a step line's loss is the mean of its 5 steps' losses; so is its grad_norm
    assert len(losses) == len(norms) == 32
    first = float(re.search(r"loss (\d\.\d{4})", lines[0]).group(1))
    assert first == pytest.approx(np.mean(losses[:5]), abs=6e-5)
    assert events["train"]["batch_grad_norm"][5] == pytest.approx(np.mean(norms[:5]), rel=1e-5)
    assert events["train"]["batch_rows"] == {g: 16.0 for g in (5, 10, 15, 20, 25, 30)}
    # the epoch's record: each added quantity's mean over the epoch's steps
    assert [r["grad_norm"] for r in records] == [
        pytest.approx(np.mean(norms[:16]), rel=1e-6),
        pytest.approx(np.mean(norms[16:]), rel=1e-6),
    ]
    assert [r["rows"] for r in records] == [16.0, 16.0]
    assert events["train"]["epoch_grad_norm"][1] == pytest.approx(records[1]["grad_norm"])
    assert len(set(norms)) > 10  # the norms are the steps' own, not one value


def read_events(root: Path) -> dict[str, dict[str, dict[int, float]]]:
    """``{run: {tag: {step: value}}}`` from the TensorBoard event files under ``root``."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for run_dir in root.iterdir():
        tags = out.setdefault(run_dir.name, {})
        for path in sorted(run_dir.glob("events.out.tfevents.*")):
            for event in tf.compat.v1.train.summary_iterator(str(path)):
                for value in event.summary.value:
                    array = tf.make_ndarray(value.tensor)
                    if array.dtype.kind in "OSU":  # Keras's model-config text summary
                        continue
                    tags.setdefault(value.tag, {})[int(event.step)] = float(array)
    return out


class _Terminal:
    """A stream that says it is a terminal (the bar's destination in the test)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def isatty(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_bar_goes_to_a_terminal_stderr_only(capsys):
    import io

    from tfdp.train.logs import TrainLogs

    terminal, lines = _Terminal(), io.StringIO()
    logs = TrainLogs(None, log_every=2, stream=lines, bar_stream=terminal)
    logs.epoch_begin(0, 4)
    for step in range(1, 5):
        logs.steps_end(
            epoch=0,
            step=step,
            global_step=step,
            values={"loss": [1.0]},
            samples=4,
            lr=0.1,
            epoch_loss=1.0,
        )
    assert "4/4" in "".join(terminal.parts)  # the Keras bar, on the terminal
    assert lines.getvalue() == ""  # no plain lines while a bar is shown
    assert capsys.readouterr().out == ""  # and nothing on stdout
    redirected = io.StringIO()  # not a terminal: no bar, plain lines every 2 steps
    logs = TrainLogs(None, log_every=2, stream=lines, bar_stream=redirected)
    logs.epoch_begin(0, 4)
    for step in range(1, 5):
        logs.steps_end(
            epoch=0, step=step, global_step=step, values={"loss": [1.0]}, samples=4, lr=0.1
        )
    assert redirected.getvalue() == ""
    assert [x.split("  ")[1] for x in lines.getvalue().splitlines()] == ["step 2/4", "step 4/4"]


def test_fit_path_auto_verbosity_writes_no_escapes_when_redirected(mirrored_of, capfd):
    strategy = mirrored_of(2)
    train, held_out = inputs(strategy)
    with strategy.scope():
        model = make_model()
        model.compile(
            keras.optimizers.SGD(0.2),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    fit(model, train, 1, eval_input=held_out)  # verbose="auto", stdout captured: not a terminal
    out = capfd.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\b" not in out
    assert re.search(r"16/16 - .* - loss: \d\.\d{4} - val_loss: \d\.\d{4}", out)  # one plain line


def test_fit_path_resumed_mid_epoch_is_one_training_for_callbacks(mirrored_of, tmp_path):
    """A cut at step 21 (inside epoch 1): no on_epoch_end for the cut epoch; the resumed run
    (two model.fit calls inside) sends on_train_begin / on_train_end once, every epoch end
    with the exact val_*, and the CSV holds each epoch once."""
    strategy = mirrored_of(2)
    train, held_out = inputs(strategy)

    def compiled() -> keras.Model:
        with strategy.scope():
            model = make_model()
            model.compile(
                keras.optimizers.SGD(0.2),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=[METRIC],
            )
        return model

    csv_path = tmp_path / "log.csv"
    cut_rec = Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hist = fit(
            compiled(),
            train,
            3,
            eval_input=held_out,
            run_dir=tmp_path / "run",
            max_steps=21,
            verbose=0,
            callbacks=[cut_rec, early_stopping(), keras.callbacks.CSVLogger(csv_path)],
        )
    assert not [w for w in caught if "val_loss" in str(w.message)]
    assert hist.epoch == [0]
    kinds = [e[0] for e in cut_rec.events]
    assert kinds.count("train_begin") == kinds.count("train_end") == 1
    assert [e[1] for e in cut_rec.events if e[0] == "epoch_end"] == [0]  # not the cut epoch 1
    assert kinds.count("batch_end") == 21

    rec = Recorder()
    tb = tmp_path / "tb"
    csv_logger = keras.callbacks.CSVLogger(csv_path, append=True)
    model = compiled()
    hist = fit(
        model,
        train,
        3,
        eval_input=held_out,
        run_dir=tmp_path / "run",
        verbose=0,
        callbacks=[rec, csv_logger, keras.callbacks.TensorBoard(tb)],
    )
    assert hist.epoch == [1, 2]
    kinds = [e[0] for e in rec.events]
    assert kinds[0] == "train_begin" and kinds[-1] == "train_end"
    assert kinds.count("train_begin") == kinds.count("train_end") == 1
    ends = [e for e in rec.events if e[0] == "epoch_end"]
    assert [e[1] for e in ends] == [1, 2] and all("val_loss" in e[2] for e in ends)
    assert len(rec.val_errors) == 2 and max(rec.val_errors) < 1e-5
    assert kinds.count("batch_end") == 16 - 5 + 16
    assert [int(r["epoch"]) for r in check_csv(csv_path, 3)] == [0, 1, 2]
    events = read_events(tb)
    assert sorted(events["validation"]["epoch_loss"]) == [1, 2]  # one writer for both calls
    assert events["validation"]["epoch_loss"][2] == pytest.approx(hist.history["val_loss"][1])


def test_keras_tensorboard_callback_with_the_trainer(mirrored_of, tmp_path):
    """Keras's own TensorBoard callback on the Trainer: train / validation runs, epoch_* tags,
    the exact val_loss as the validation run's epoch_loss."""
    strategy = mirrored_of(2)
    train, held_out = inputs(strategy)
    trainer = Trainer(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(0.2),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[METRIC],
        progress=False,
        verbose=0,
    )
    tb = tmp_path / "tb"
    hist = trainer.fit(
        train, 2, eval_input=held_out, callbacks=[keras.callbacks.TensorBoard(tb, update_freq=4)]
    )
    events = read_events(tb)
    assert set(events) == {"train", "validation"}
    assert events["train"]["epoch_loss"] == pytest.approx(dict(enumerate(hist.history["loss"])))
    assert events["validation"]["epoch_loss"] == pytest.approx(
        dict(enumerate(hist.history["val_loss"]))
    )
    assert events["validation"][f"epoch_{METRIC}"][1] == pytest.approx(
        hist.history[f"val_{METRIC}"][1]
    )
    assert "batch_loss" in events["train"]  # update_freq: per-step scalars from batch logs


def test_batch_hooks_under_an_alias_or_set_on_the_instance_are_called(mirrored_of):
    """The Trainer calls batch hooks only when a callback has one: one under Keras's alias
    (on_batch_begin), or set on the instance, counts (once per compiled call)."""
    strategy = mirrored_of(2)
    train, _ = inputs(strategy)

    class AliasOnly(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.begins: list[int] = []

        def on_batch_begin(self, batch, logs=None):
            self.begins.append(batch)

    alias, assigned = AliasOnly(), keras.callbacks.Callback()
    ends: list[int] = []
    assigned.on_train_batch_end = lambda batch, logs=None: ends.append(batch)
    trainer = quiet_trainer(strategy, steps_per_call=8)
    trainer.fit(train, 1, callbacks=[alias])
    assert alias.begins == [0, 8]
    trainer.fit(train, 2, callbacks=[assigned])
    assert ends == [7, 15]


# -- one convention for epoch numbers ----------------------------------------------------------


def test_epoch_numbers_follow_keras_console_from_1_records_from_0(mirrored_of, tmp_path, capfd):
    """Keras's convention: what is printed counts epochs from 1; what is recorded (History,
    callbacks, metrics.jsonl, TensorBoard steps) holds the 0-based index. A resume says the
    epoch it continues as the epoch lines that follow it do."""
    strategy = mirrored_of(2)
    train, _ = inputs(strategy)
    first = quiet_trainer(strategy, run_dir=tmp_path, checkpoint_every=4, steps_per_call=4)
    first.fit(train, 2, max_steps=20)  # stopped in the second epoch, after its step 4
    capfd.readouterr()
    rec = Recorder()
    again = Trainer(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(0.2),
        "sparse_categorical_crossentropy_from_logits",
        run_dir=tmp_path,
        steps_per_call=4,
        log_every=8,
        progress=False,
        verbose=1,
    )
    history = again.fit(train, 3, callbacks=[rec])
    out = capfd.readouterr().out.splitlines()
    resumed = next(line for line in out if line.startswith("resumed from"))
    assert resumed.endswith("ckpt-20: in epoch 2, after its step 4 (global step 20)"), resumed
    step_lines = [line.split("  ")[0] for line in out if "global_step" in line]
    epoch_lines = [line.split("  ")[0] for line in out if re.match(r"epoch \d+  \d", line)]
    assert step_lines == ["epoch 2", "epoch 2", "epoch 3", "epoch 3"]  # global steps 24 .. 48
    assert epoch_lines == ["epoch 2", "epoch 3"]
    assert history.epoch == [1, 2]
    assert [e[1] for e in rec.events if e[0] == "epoch_end"] == [1, 2]
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in records] == [0, 1, 2]
    assert sorted(read_events(tmp_path / "tensorboard")["train"]["epoch_loss"]) == [0, 1, 2]


def test_step_lines_read_the_learning_rate_without_numpy_warnings(mirrored_of, capfd):
    """The learning rate of the step lines is read as a tensor: np.array of a Keras Variable
    warns under NumPy 2 (the warning pytest's configuration hides for Keras's own callbacks)."""
    strategy = mirrored_of(2)
    train, _ = inputs(strategy)
    tr = Trainer(
        strategy,
        make_model,
        lambda: keras.optimizers.SGD(0.2),
        "sparse_categorical_crossentropy_from_logits",
        log_every=8,
        progress=False,
        verbose=1,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tr.fit(train, 1)
    assert [str(w.message) for w in caught if "copy keyword" in str(w.message)] == []
    lines = [line for line in capfd.readouterr().out.splitlines() if "global_step" in line]
    assert len(lines) == 2 and all("  lr 0.2  " in line for line in lines), lines
