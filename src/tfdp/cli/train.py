"""``tfdp train``: the main job from flags and config files, with Ctrl-C / SIGTERM handling.

This module owns the ``train`` command: :func:`add_parser` (one flag per
option of :class:`tfdp.recipe.TrainConfig`, plus ``--config FILE``),
:func:`train_request` (config file + flags, flags win, and which options were
given), :func:`stop_on_signals` (the first SIGINT / SIGTERM saves a
checkpoint and stops; a second ends the process at once), :func:`train`
(the job with its messages printed) and :func:`run`. Bad options, a bad
config file and a data path that does not exist are reported before
TensorFlow loads.

Exit status: 0 done; 2 bad input; 3 training diverged (non-finite loss or
gradient); 4 a peer was lost (another worker crashed, was killed or stopped, or
the network to it failed: the message names it and the checkpoint kept, and
TensorFlow's own records of the aborted collective are held back:
:mod:`tfdp.cli.tf_log`); 130
stopped by SIGINT, 143 by SIGTERM (a checkpoint was saved; ``tfdp train
--resume --run-dir R`` continues).

Example:
    $ tfdp train --epochs 2 --name quickstart
    $ tfdp train --resume --run-dir runs/quickstart --epochs 4
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shlex
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from tfdp.cli.args import quiet_tf, require
from tfdp.errors import ConfigError
from tfdp.recipe.augment_options import AugmentOptions
from tfdp.recipe.config import (
    ALIASES,
    TrainConfig,
    coerce,
    default_help,
    flag,
    load_config_file,
)
from tfdp.recipe.lr_rule import LrRuleOptions

PREFIX = "tfdp train"
#: Exit status when another worker of a multi-worker job was lost (see PeerLostError).
PEER_LOST_STATUS = 4
_EXCLUSIVE = ("batch_size", "batch_size_per_replica")
#: The library's arguments the job leaves in an error (its options are said as their flags).
_WORDS = {"num_shards": "tfdp data convert --shards N"}
#: Flags that set ``--mixed-precision`` (timm's ``--amp``, float16 by default as timm's).
_PRECISION_ALIASES = {"--amp": "mixed_float16", "--bf16": "mixed_bfloat16"}
_DESCRIPTION = (
    "Train with Repeated Augmentation on MirroredStrategy (logical CPU replicas without a "
    "GPU), evaluating exactly on a held-out split after every epoch: --eval-data, else a "
    "deterministic part of --data (see --eval-fraction). Every option can also come from "
    "--config FILE (YAML, TOML or JSON, e.g. a run's config.json); flags win. --batch-size is "
    "global (all replicas together); --batch-size-per-replica is the per-process batch of "
    "timm / torch scripts. One run writes a run directory at a time (a lock file holds its pid "
    "and host). Ctrl-C saves a checkpoint and stops; a second Ctrl-C exits at once without "
    "saving. At the end the model is saved as RUN_DIR/model.keras."
)


def _arg_type(type_name: str) -> Any:
    def convert(text: str) -> Any:
        if text.lower() in ("none", "null") and "None" in type_name:
            return None
        try:
            if type_name.startswith("int"):
                return int(text)
            if type_name.startswith("float"):
                return float(text)
        except ValueError:
            kind = "an integer" if type_name.startswith("int") else "a number"
            raise argparse.ArgumentTypeError(f"expected {kind}, got {text!r}") from None
        return text

    convert.__name__ = type_name.split(" ")[0]
    return convert


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``tfdp train`` to a ``tfdp`` sub-command set; returns its parser."""
    p = subparsers.add_parser(
        "train",
        help="train a model (default: a small CNN on the bundled digits)",
        description=_DESCRIPTION,
    )
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="YAML, TOML or JSON file of options (flags given here win)",
    )
    batch = p.add_mutually_exclusive_group()
    augmentation = p.add_argument_group(
        "DeiT's / timm's transforms (their main.py / train.py names): augmentations (all off by "
        "default), normalisation and the held-out crop"
    )
    rule = p.add_argument_group("the learning-rate rule (DeiT's, timm's)")
    precision = p.add_mutually_exclusive_group()
    aliases = {name: flag(alias) for alias, name in ALIASES.items()}
    groups = {f.name: augmentation for f in dataclasses.fields(AugmentOptions)}
    groups.update({f.name: rule for f in dataclasses.fields(LrRuleOptions)})
    for name, f in TrainConfig.fields().items():
        strings = [flag(name), *([aliases[name]] if name in aliases else [])]
        type_name = str(f.type).replace("'", "")
        shown = default_help(name)  # the value, or how a None default is computed
        help_text = f.metadata["help"] + (f" (default: {shown})" if shown is not None else "")
        target = batch if name in _EXCLUSIVE else p
        target = groups.get(name, target)
        target = precision if name == "mixed_precision" else target
        if type_name.startswith("bool"):
            target.add_argument(
                *strings,
                dest=name,
                default=None,
                action=argparse.BooleanOptionalAction,
                help=help_text,
            )
            continue
        choices = f.metadata.get("choices")
        if type_name.startswith("tuple[float"):  # timm's --mean / --std: one or more numbers
            target.add_argument(
                *strings,
                dest=name,
                default=None,
                nargs="+",
                type=_arg_type("float"),
                metavar=name.upper(),
                help=help_text,
            )
            continue
        target.add_argument(
            *strings,
            dest=name,
            default=None,
            type=_arg_type(type_name),
            metavar=name.upper()
            if choices is None
            else "{" + ",".join(str(c) for c in choices) + "}",
            help=help_text,
        )
    for alias, value in _PRECISION_ALIASES.items():  # timm's --amp, and a bf16 twin
        precision.add_argument(
            alias,
            dest="mixed_precision",
            action="store_const",
            const=value,
            default=None,
            help=f"= --mixed-precision {value}",
        )
    p.set_defaults(func=run, argument_words=_WORDS)
    return p


def train_request(args: argparse.Namespace) -> tuple[TrainConfig, frozenset[str]]:
    """The job's options from ``--config`` and the flags (flags win), and which were given.

    ``--batch-size`` and ``--batch-size-per-replica`` exclude each other: a
    flag replaces the other one's value from the config file; a config file
    giving both is refused.

    Raises:
        ConfigError: a bad config file or value, naming it.
    """
    values: dict[str, Any] = {}
    if getattr(args, "config", None):
        values.update(load_config_file(args.config))
        if all(values.get(name) is not None for name in _EXCLUSIVE):  # config.json has both
            raise ConfigError(
                f"config file {args.config!r} gives both batch_size and batch_size_per_replica: "
                "give one of them"
            )
    for name in TrainConfig.fields():
        given = getattr(args, name, None)
        if given is not None:
            values[name] = coerce(name, given, flag(name))
            if name in _EXCLUSIVE:
                values.pop(_EXCLUSIVE[1 - _EXCLUSIVE.index(name)], None)
    return TrainConfig(**values), frozenset(values)


def _say(level: str, message: str) -> None:
    if level == "warning":
        text = message if message.startswith("warning") else f"warning: {message}"
        print(f"{PREFIX}: {text}", file=sys.stderr, flush=True)
    else:
        print(f"{PREFIX}: {message}", flush=True)


class _SignalHandlers:
    """SIGINT / SIGTERM handlers that call ``stop(name)`` once; a second signal ends the process."""

    handled = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, stop: Any) -> None:
        self.stop = stop
        self.previous: dict[int, Any] | None = None
        self.fired = False

    def on_signal(self, signum: int, frame: Any) -> None:
        self.fired = True
        for s in self.handled:  # a second signal takes the default action: the process ends
            signal.signal(s, signal.SIG_DFL)
        name = signal.Signals(signum).name
        again = "Ctrl-C" if signum == signal.SIGINT else name
        print(
            f"{PREFIX}: {name}: saving a checkpoint and stopping "
            f"({again} again to exit now without saving)",
            file=sys.stderr,
            flush=True,
        )
        self.stop(name)

    def install(self) -> None:
        """Install (again: TensorFlow's runtime may have set its own handlers meanwhile)."""
        if threading.current_thread() is not threading.main_thread() or self.fired:
            return
        if self.previous is None:
            self.previous = {s: signal.getsignal(s) for s in self.handled}
        for s in self.handled:
            signal.signal(s, self.on_signal)

    def restore(self) -> None:
        """Put the handlers found by the first :meth:`install` back."""
        for s, handler in (self.previous or {}).items():
            signal.signal(s, handler)


@contextlib.contextmanager
def stop_on_signals(stop: Any) -> Iterator[Callable[[], None]]:
    """While inside, SIGINT / SIGTERM call ``stop(name)`` once; a second signal ends the process.

    The first signal prints what happens and asks the run to save a
    checkpoint and stop; the handlers are then reset to the default action, so
    a second signal ends the process at once, saving nothing more. The
    previous handlers come back on exit. Off the main thread, nothing is
    installed (Python delivers signals to the main thread only). Yields a
    function that installs the handlers again, for after TensorFlow's runtime
    has started (it may install its own).

    Example:
        >>> with stop_on_signals(print):
        ...     signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        True
    """
    handlers = _SignalHandlers(stop)
    handlers.install()
    try:
        yield handlers.install
    finally:
        handlers.restore()


def _resume_hint(run_dir: str) -> str:
    return f"tfdp train --resume --run-dir {shlex.quote(run_dir)}"


def train(
    cfg: TrainConfig, *, given: frozenset[str] | None = None, on_step: Any = None
) -> tuple[int, dict[str, Any]]:
    """Run the job with the command's messages and signal handling; returns (status, result).

    Status: 0 done, 3 diverged, 4 a peer lost (:data:`PEER_LOST_STATUS`), 130
    stopped by SIGINT, 143 by SIGTERM (or a peer's stop). Bad input raises
    :class:`tfdp.errors.TfdpError`.
    """
    from tfdp.recipe.config import check_config, check_paths

    check_config(cfg)  # cheap checks first: bad input is reported before TensorFlow loads
    if not cfg.resume:
        check_paths(cfg)
    require("tensorflow", "cpu|gpu", "tfdp train")
    quiet_tf()
    if _one_of_several_workers():  # a lost peer is said in one line: TF's own records held back
        from tfdp.cli.tf_log import hold_back

        hold_back()
    from tfdp.recipe.run import StopRelay, run_train

    reinstall: list[Callable[[], None]] = []
    stop = StopRelay(on_attach=lambda: [f() for f in reinstall])
    try:
        with stop_on_signals(stop) as install:
            reinstall.append(install)
            result = run_train(cfg, given=given, on_step=on_step, stop=stop, report=_say)
    except Exception as exc:
        if _peer_lost(exc):
            from tfdp.recipe.config import default_run_dir

            hint = _resume_hint(default_run_dir(cfg))
            print(f"{PREFIX}: error: {exc}. Resume with: {hint}", file=sys.stderr, flush=True)
            return PEER_LOST_STATUS, {}
        if not _diverged(exc):
            raise
        print(f"{PREFIX}: error: {exc}", file=sys.stderr, flush=True)
        return 3, {}
    _print_outcome(result, cfg.model)
    # A stop by Ctrl-C / SIGTERM (or a peer's) saved a checkpoint: exit with the conventional
    # status so that a launcher or scheduler knows the job is unfinished and can restart it.
    reason = result.get("stop_reason")
    if result.get("stopped_early") and reason:
        return (130 if reason == "SIGINT" else 143), result
    return 0, result


def _one_of_several_workers() -> bool:
    """Whether this process may be one worker of a multi-worker job (TF_CONFIG, or Slurm's)."""
    if os.environ.get("TF_CONFIG", "").strip():
        return True
    tasks = os.environ.get("SLURM_STEP_NUM_TASKS") or os.environ.get("SLURM_NTASKS") or "1"
    return "SLURM_JOB_ID" in os.environ and tasks.strip() not in ("", "0", "1")


def _peer_lost(exc: Exception) -> bool:
    """Whether ``exc`` says another worker of the job was lost mid-training."""
    if "tfdp.train" not in sys.modules:
        return False
    from tfdp.train import PeerLostError

    return isinstance(exc, PeerLostError)


def _diverged(exc: Exception) -> bool:
    """Whether ``exc`` says training diverged (a non-finite loss, gradient or checkpoint)."""
    if "tfdp.train" not in sys.modules:  # not loaded yet: the error cannot be the loop's
        return False
    from tfdp.checkpoint import NonFiniteCheckpointError
    from tfdp.train import NonFiniteError

    return isinstance(exc, (NonFiniteError, NonFiniteCheckpointError))


def _print_outcome(result: dict[str, Any], model: str) -> None:
    if result["num_workers"] > 1:  # every worker: the proof that all hold the same weights
        _say(
            "info",
            f"worker {result['worker_index']} weights sha256 {result['weights_sha256']} "
            f"at step {result['global_step']}",
        )
    if not result["is_chief"]:
        return
    if result["stopped_early"]:
        # Epochs are counted from 1, as in the epoch lines of the log.
        where = (
            f"after epoch {result['epoch']} of {result['epochs']}"
            if result["step"] == 0
            else f"in epoch {result['epoch'] + 1} of {result['epochs']}, after its step "
            f"{result['step']}"
        )
        _say(
            "info",
            f"stopped {where} (global step {result['global_step']}); checkpoint saved. "
            f"Resume with: {_resume_hint(result['run_dir'])}",
        )
    elif not result["trained"]:
        _say(
            "info",
            f"nothing to train: the run has done {result['epoch']} epoch(s) of --epochs "
            f"{result['epochs']} (give a larger --epochs to train more)",
        )
    else:
        accuracy = result.get("val_sparse_categorical_accuracy", float("nan"))
        ema = result.get("val_ema_sparse_categorical_accuracy")
        also = f" (EMA weights: {ema:.4f})" if ema is not None else ""
        _say("info", f"done in {result['seconds']:.1f}s: held-out accuracy {accuracy:.4f}{also}")
    if result.get("model_path"):
        from tfdp.models.names import is_model_name

        # A ViT / DeiT's file names tfdp's layers: registered once tfdp.models.vit is imported.
        reader = "tfdp.models.load_model" if is_model_name(model) else "keras.models.load_model"
        _say("info", f"model saved to {result['model_path']} ({reader} reads it)")


def run(args: argparse.Namespace) -> int:
    """Run ``tfdp train`` from parsed arguments; returns the exit status."""
    cfg, given = train_request(args)
    return train(cfg, given=given)[0]
