"""Argument helpers shared by every ``tfdp`` command (one copy of each).

This module owns the pieces of argparse the commands have in common: the
:class:`Parser` (no silent abbreviations, "did you mean" for a mistyped flag,
a sub-command's flags included), the number converters (:func:`int_at_least`,
:func:`seconds`, :func:`port`), :func:`quiet_tf` (TensorFlow's C++ log level,
set before TensorFlow loads) and :func:`require` (an optional dependency,
named with the ``pip install`` extra that brings it). Importing it loads no
TensorFlow.

Example:
    >>> parser = Parser(prog="demo")
    >>> _ = parser.add_argument("--workers", type=int_at_least(1))
    >>> parser.parse_args(["--workers", "2"]).workers
    2
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """Help that shows every option's default as the parser holds it: ``(default: X)``.

    Generated from the code, so help and behaviour agree. An option whose
    help already says ``(default...`` (a default computed at run time, e.g.
    ``(default: the run's)``) keeps its words; a ``None`` default that the
    help does not describe, and the ``False`` of an on/off flag, show nothing.

    Example:
        >>> p = Parser(prog="demo")
        >>> _ = p.add_argument("--workers", type=int, default=4, help="how many")
        >>> " ".join(p.format_help().split()).endswith("--workers WORKERS how many (default: 4)")
        True
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help
        if text is None or "(default" in text or "%(default)" in text:
            return text
        default = action.default
        if default is None or default is argparse.SUPPRESS or action.nargs == 0:
            return text
        return f"{text} (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse with "did you mean" for unknown flags, and no silent abbreviations.

    Help shows every default from the code (:class:`DefaultsHelpFormatter`).

    Example:
        >>> p = Parser(prog="tfdp")
        >>> _ = p.add_argument("--epochs", type=int)
        >>> p.suggest("--epoch")
        '--epochs'
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", DefaultsHelpFormatter)
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}
        self.argv: Sequence[str] = ()

    def add_subparsers(self, **kwargs: Any) -> Any:  # type: ignore[override]
        """Add sub-commands (with this class as their parser); remembers them by name."""
        kwargs.setdefault("parser_class", Parser)
        action = super().add_subparsers(**kwargs)
        self.commands = action.choices  # name -> parser, filled as commands are added
        return action

    def flags(self) -> list[str]:
        """Option strings of this parser, and of the sub-command named in ``argv``."""
        found = [s for action in self._actions for s in action.option_strings]
        chosen = next((a for a in self.argv if a in self.commands), None)
        if chosen is not None:
            sub = self.commands[chosen]
            if isinstance(sub, Parser):
                sub.argv = self.argv[list(self.argv).index(chosen) + 1 :]
                found += sub.flags()
        return sorted(set(found))

    def suggest(self, flag: str) -> str | None:
        """The known flag closest to ``flag``, if any is close."""
        close = difflib.get_close_matches(flag, self.flags(), n=1)
        return close[0] if close else None

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """Parse, remembering ``args`` for the suggestions of :meth:`error`."""
        if args is not None:
            self.argv = list(args)
        return super().parse_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        """Print ``prog: error: message`` (with suggestions) and exit with status 2."""
        if "unrecognized arguments:" in message:
            hints = []
            for arg in message.split("unrecognized arguments:", 1)[1].split():
                flag = arg.split("=", 1)[0]
                close = self.suggest(flag) if flag.startswith("-") else None
                if close:
                    hints.append(f"{flag} -> did you mean {close}?")
            if hints:
                message += " (" + "; ".join(hints) + ")"
        self.exit(2, f"{self.prog}: error: {message}\n")


def int_at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: an integer ``>= low``, else a message saying so.

    Example:
        >>> int_at_least(1)("3")
        3
        >>> int_at_least(1)("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: expected an integer >= 1, got 0
    """

    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {low}, got {text!r}"
            ) from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    convert.__name__ = "int"
    return convert


def seconds(text: str) -> float:
    """An argparse ``type``: a number of seconds ``>= 0``.

    Example:
        >>> seconds("2.5")
        2.5
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}") from None
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text}")
    return value


def port(text: str) -> int:
    """An argparse ``type``: a TCP port, 1..65535.

    Example:
        >>> port("29500")
        29500
    """
    value = int_at_least(0)(text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {value}")
    return value


def quiet_tf() -> None:
    """Keep TensorFlow's C++ start-up chatter off the terminal (call before it loads).

    Example:
        >>> quiet_tf(); os.environ["TF_CPP_MIN_LOG_LEVEL"] in ("1", "2", "3")
        True
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the ``pip install`` extra.

    Example:
        >>> str(MissingExtraError("matplotlib", "plot", "drawing"))
        "drawing needs matplotlib, which is not installed: pip install 'tfdp[plot]'"
    """

    def __init__(self, module: str, extra: str, what: str) -> None:
        first, *others = extra.split("|")
        alternatives = "".join(f" (or 'tfdp[{e}]')" for e in others)
        super().__init__(
            f"{what} needs {module}, which is not installed: pip install 'tfdp[{first}]'"
            + alternatives,
            name=module,
        )
        self.extra = first


def require(module: str, extra: str, what: str) -> None:
    """Refuse early, naming the extra, when ``module`` is not installed (it is not imported).

    Args:
        module: The top-level module, e.g. ``"matplotlib"``.
        extra: tfdp's extra that installs it, e.g. ``"plot"``; alternatives
            separated by ``|`` (``"cpu|gpu"``).
        what: What needs it, for the message, e.g. ``"tfdp plot"``.

    Raises:
        MissingExtraError: ``module`` cannot be found.

    Example:
        >>> require("json", "none", "reading")  # installed: nothing happens
        >>> require("no_such_module_xyz", "plot", "tfdp plot")
        Traceback (most recent call last):
        ...
        tfdp.cli.args.MissingExtraError: tfdp plot needs no_such_module_xyz, which is not installed: pip install 'tfdp[plot]'
    """  # noqa: E501
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(module, extra, what)


def import_extra(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module``, or raise :class:`MissingExtraError` naming the extra.

    Example:
        >>> import_extra("json", "none", "reading").__name__
        'json'
    """
    require(module.split(".")[0], extra, what)
    return importlib.import_module(module)
