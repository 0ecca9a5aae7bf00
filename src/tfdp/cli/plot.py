"""``tfdp plot``: a run's loss, accuracy and throughput curves, from its ``metrics.jsonl``.

This module owns the ``plot`` command: :func:`add_parser`, :func:`run`, and
the functions behind it, :func:`read_metrics` (``RUN_DIR/metrics.jsonl``,
checked line by line) and :func:`plot_metrics` (three panels in one image);
and :func:`image_format`, the image format of a file name's extension
(shared with ``tfdp sampler --png``). matplotlib loads only when drawing; a
missing matplotlib names the extra that installs it.

Example:
    $ tfdp plot runs/digits                 # runs/digits/curves.png
    $ tfdp plot runs/digits --out curves.svg
"""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any

from tfdp._util import replaced_atomically
from tfdp.cli.args import import_extra
from tfdp.errors import ConfigError, DataError

#: Size of :func:`plot_metrics`' figure in inches, and its resolution: 1500 x 450 pixels.
PLOT_FIGSIZE = (15.0, 4.5)
PLOT_DPI = 100
#: Image formats by extension (matplotlib's Agg canvas writes all of them).
IMAGE_FORMATS = ("eps", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg", "svgz",
                 "tif", "tiff", "webp")  # fmt: skip


def image_format(path: str, argument: str = "out") -> str:
    """The image format of ``path``, from its extension.

    Raises:
        ConfigError: no extension, or one no image format has (``argument``: ``path``'s).

    Example:
        >>> image_format("curves.svg")
        'svg'
        >>> image_format("curves")
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: out: 'curves': the image format comes from the extension; use .png, .svg, .pdf or another of .eps, .jpeg, .jpg, .pdf, .pgf, .png, .ps, .raw, .rgba, .svg, .svgz, .tif, .tiff, .webp
    """  # noqa: E501
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext not in IMAGE_FORMATS:
        raise ConfigError(
            f"{os.fspath(path)!r}: the image format comes from the extension; use "
            ".png, .svg, .pdf or another of " + ", ".join(f".{e}" for e in IMAGE_FORMATS),
            argument=argument,
        )
    return ext


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    r"""Read a ``metrics.jsonl`` file: one JSON object per line, in file order.

    Args:
        path: The file (``RUN_DIR/metrics.jsonl`` as written by ``tfdp train``).

    Returns:
        The records, one dict per line.

    Raises:
        FileNotFoundError: the file does not exist.
        DataError: the file is empty, or a line is empty, not JSON, or not a
            JSON object (the message names the file and the line number).

    Example:
        >>> import os, tempfile
        >>> p = os.path.join(tempfile.mkdtemp(), "metrics.jsonl")
        >>> _ = open(p, "w").write('{"epoch": 0, "loss": 2.3}\n{"epoch": 1, "loss": 1.1}\n')
        >>> [r["loss"] for r in read_metrics(p)]
        [2.3, 1.1]
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().splitlines()
    if not lines:
        raise DataError(f"{path} is empty: no epoch has been logged yet")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise DataError(f"{path}, line {number}: empty line (expected one JSON object)")
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}, line {number}: not valid JSON ({err.msg})") from None
        if not isinstance(record, dict):
            raise DataError(
                f"{path}, line {number}: expected a JSON object, got {type(record).__name__}"
            )
        records.append(record)
    return records


def _number(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return math.nan
    return float(value)


def _series(records: list[dict[str, Any]], path: str) -> tuple[list[float], dict[str, list[float]]]:
    """The 1-based epochs, and the values of every key per epoch (last record wins)."""
    by_epoch: dict[Any, dict[str, Any]] = {}
    for number, record in enumerate(records, start=1):
        epoch = record.get("epoch", number - 1)
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float)):
            raise DataError(f"{path}, line {number}: 'epoch' must be a number, got {epoch!r}")
        by_epoch[epoch] = record  # a resumed run may log an epoch again: keep the last
    epochs = sorted(by_epoch)
    keys: list[str] = []
    for epoch in epochs:
        keys += [k for k in by_epoch[epoch] if k not in keys]
    values = {k: [_number(by_epoch[e].get(k)) for e in epochs] for k in keys}
    return [e + 1 for e in epochs], values


def _train_first(keys: list[str]) -> list[str]:
    return sorted(keys, key=lambda k: (k.startswith("val_"), k))


def metrics_figure(records: list[dict[str, Any]], title: str = "", where: str = "metrics") -> Any:
    r"""The figure :func:`plot_metrics` draws: loss, accuracy and samples/s per epoch.

    Every panel's x axis spans the same epochs (1-based) with integer ticks
    only, also when a panel has a single point.

    Args:
        records: ``metrics.jsonl``'s records (:func:`read_metrics`).
        title: The figure's title.
        where: What the records came from, for error messages.

    Returns:
        A ``matplotlib.figure.Figure`` (on an Agg canvas).

    Raises:
        DataError: nothing to plot, or a record's ``epoch`` is not a number.

    Example:
        >>> fig = metrics_figure([{"epoch": 0, "loss": 2.0}, {"epoch": 1, "loss": 1.0}])
        >>> [t.get_text() for t in fig.axes[0].get_xticklabels()] != []
        True
    """
    x, values = _series(records, where)
    speed_note = ""
    if "samples_per_s" in values and len(x) > 1:  # epoch 1 includes tracing the step functions
        values["samples_per_s"] = [math.nan, *values["samples_per_s"][1:]]
        speed_note = " (epoch 1 left out: it includes tracing)"

    def present(keys: list[str]) -> list[str]:
        return [k for k in keys if any(not math.isnan(v) for v in values[k])]

    losses = present(_train_first([k for k in values if k.endswith("loss")]))
    accuracies = present(_train_first([k for k in values if k.endswith("accuracy")]))
    speed = present(["samples_per_s"] if "samples_per_s" in values else [])
    if not (losses or accuracies or speed):
        raise DataError(
            f"{where}: no loss, accuracy or samples_per_s values to plot (keys: {sorted(values)})"
        )

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=PLOT_FIGSIZE, dpi=PLOT_DPI)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 3)
    marker = "o" if len(x) <= 50 else None
    panels = [(axes[0], "loss", losses), (axes[1], "accuracy", accuracies)]
    panels.append((axes[2], "samples/s" + speed_note, speed))
    for ax, name, keys in panels:
        ax.set_title(name)
        ax.set_xlabel("epoch")
        # Whole epochs only, on every panel alike (one point would get ticks 1.9 .. 2.1).
        ax.set_xlim(x[0] - 0.5, x[-1] + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.grid(True, alpha=0.3)
        if not keys:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
            continue
        for key in keys:
            style = "--" if key.startswith("val_") else "-"
            ax.plot(x, values[key], style, marker=marker, markersize=3, label=key)
        ax.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_metrics(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> str:
    r"""Draw a run's loss, accuracy and samples/s per epoch into one image.

    Three panels side by side, :data:`PLOT_FIGSIZE` at :data:`PLOT_DPI`
    (1500 x 450 pixels for a PNG): every key ending in ``loss`` (train and
    ``val_``), every key ending in ``accuracy``, and ``samples_per_s``. The x
    axis is the 1-based epoch, with integer ticks; when a resumed run logged an
    epoch twice, the last record wins. The first epoch's samples/s is left
    out when later epochs exist (it includes tracing and compiling the step
    functions), and the panel says so. The format comes from the extension
    of ``out`` (``.png``, ``.svg``, ``.pdf``, ...). The file is written under
    a temporary name and renamed, so a failure never leaves a half-written image.

    Args:
        run_dir: A run directory written by ``tfdp train`` (holds ``metrics.jsonl``).
        out: The image to write; default ``run_dir/curves.png``.

    Returns:
        The path written.

    Raises:
        FileNotFoundError: ``run_dir``, its ``metrics.jsonl`` or the folder of
            ``out`` does not exist.
        DataError: a malformed line (see :func:`read_metrics`); nothing to plot.
        ConfigError: ``run_dir`` is not a directory; ``out`` has no image extension.

    Example:
        >>> import os, tempfile
        >>> run = tempfile.mkdtemp()
        >>> with open(os.path.join(run, "metrics.jsonl"), "w") as fh:
        ...     _ = fh.write('{"epoch": 0, "loss": 2.0, "val_loss": 2.1, "samples_per_s": 900}\n')
        >>> os.path.basename(plot_metrics(run))
        'curves.png'
    """
    run = os.fspath(run_dir)
    if not os.path.exists(run):
        raise FileNotFoundError(f"RUN_DIR {run!r} does not exist")
    if not os.path.isdir(run):
        raise ConfigError(f"{run!r} is not a directory", argument="run_dir")
    metrics_path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(metrics_path):
        raise FileNotFoundError(
            f"{metrics_path} does not exist: is RUN_DIR a run directory written by tfdp train "
            "(with at least one finished epoch)?"
        )
    target = os.fspath(out) if out is not None else os.path.join(run, "curves.png")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"--out {target!r}: folder {folder!r} does not exist")
    if os.path.isdir(target):
        raise ConfigError(f"{target!r} is a directory; give a file name", argument="out")
    fmt = image_format(target)
    import_extra("matplotlib", "plot", "tfdp plot")
    fig = metrics_figure(
        read_metrics(metrics_path),
        title=os.path.basename(os.path.normpath(os.path.abspath(run))),
        where=metrics_path,
    )
    with replaced_atomically(target) as tmp:
        fig.savefig(tmp, format=fmt, dpi=PLOT_DPI)
    return target


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tfdp plot`` to a ``tfdp`` sub-command set; returns its parser."""
    pp = subparsers.add_parser(
        "plot",
        help="draw a run's loss, accuracy and samples/s curves into an image",
        description="Read RUN_DIR/metrics.jsonl (written by tfdp train) and draw loss (train "
        "and val), accuracy (every key ending in 'accuracy') and samples/s per epoch into one "
        "image (the first epoch's samples/s is left out: it includes tracing). The format "
        "comes from the extension of --out (.png, .svg, .pdf, ...). Prints the path written.",
    )
    pp.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by tfdp train")
    pp.add_argument(
        "--out", metavar="PATH", default=None, help="image to write (default: RUN_DIR/curves.png)"
    )
    pp.set_defaults(func=run, argument_words={"run_dir": "RUN_DIR"})
    return pp


def run(args: argparse.Namespace) -> int:
    """Run ``tfdp plot`` from parsed arguments; returns the exit status."""
    print(plot_metrics(args.run_dir, args.out))
    return 0
