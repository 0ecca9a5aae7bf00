"""The errors tfdp raises for input or state a user can fix: the argument at fault as data.

This module owns the :class:`TfdpError` family. A command line reports exactly
this family as "bad input" (exit 2); any other exception is a bug to report.

An error names the Python argument at fault in ``argument`` (``port_base``)
and says, in ``message``, what is wrong and what would be valid, without
repeating the argument's name: ``str(exc)`` puts them together for a Python
caller (``port_base: must be in 1..65535, got 0``), and a caller that names
its arguments otherwise says them its own way from the same data
(:meth:`TfdpError.said`: ``tfdp launch`` prints ``--port-base: must be ...``).
A message that names other arguments holds them as ``{name}`` placeholders
listed in ``mentions``, filled by whoever says the error; a caller that knows
an argument under another name (the training job's ``data`` for a data
opener's ``spec``) renames it (:meth:`TfdpError.renamed`, :func:`renaming`).
No message text is searched or rewritten.

Saved state that does not match what it is restored into
(:class:`StateError`) and data that cannot be used as given
(:class:`DataError`) name the file or the field in their message, mostly
without an ``argument``: a field of a file is no argument of a call.

Example:
    >>> err = ConfigError("must be in 1..65535, got 0", argument="port_base")
    >>> str(err), err.message
    ('port_base: must be in 1..65535, got 0', 'must be in 1..65535, got 0')
    >>> err.said(str.upper)  # a caller's words for its arguments
    'PORT_BASE: must be in 1..65535, got 0'
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TypeVar

__all__ = [
    "CheckpointError",
    "ConfigError",
    "ConfigTypeError",
    "DataError",
    "StateError",
    "TfdpError",
    "renaming",
]

_E = TypeVar("_E", bound="TfdpError")


def _as_named(name: str) -> str:
    return name


class TfdpError(ValueError):
    """Input or state a user can fix: the argument at fault, and what is wrong with it.

    A ``ValueError`` (so ``except ValueError`` keeps working); a command line
    maps exactly this family to "bad input".

    Args:
        message: What is wrong and what would be valid, without the name of
            ``argument`` (``"must be >= 1, got 0"``). Other arguments it names
            are written ``{name}`` and listed in ``mentions``.
        argument: The Python argument at fault (``"batch_size"``), or ``None``
            when the message names what is at fault (a file, a field of saved
            state).
        mentions: The arguments the message names as ``{name}`` placeholders.

    Attributes:
        argument: As given (or as :meth:`renamed`).
        mentions: As given (or as :meth:`renamed`).

    Example:
        >>> try:
        ...     raise ConfigError("must be >= 1, got 0", argument="batch_size")
        ... except TfdpError as exc:
        ...     print(type(exc).__name__, isinstance(exc, ValueError), exc.argument, "|", exc)
        ConfigError True batch_size | batch_size: must be >= 1, got 0
        >>> err = ConfigError("gives no step with {num_replicas}=4", argument="drop_last",
        ...                   mentions=["num_replicas"])
        >>> str(err)
        'drop_last: gives no step with num_replicas=4'
        >>> err  # as constructed
        ConfigError('gives no step with {num_replicas}=4', argument='drop_last', mentions=('num_replicas',))
    """  # noqa: E501

    def __init__(
        self, message: str, *, argument: str | None = None, mentions: Iterable[str] = ()
    ) -> None:
        super().__init__(message)  # args: (message,), placeholders kept (pickling, copies)
        self.argument = argument
        self.mentions = tuple(mentions)

    @property
    def message(self) -> str:
        """What is wrong and what would be valid, each mentioned argument by its name.

        Example:
            >>> ConfigError("give {num_classes}", argument="labels",
            ...             mentions=["num_classes"]).message
            'give num_classes'
        """
        return self._filled(_as_named)

    def said(self, say: Callable[[str], str] = _as_named) -> str:
        """The error in a caller's words: ``say(argument): message``, each mention ``say(name)``.

        ``str(exc)`` is ``exc.said()`` (the Python names); a command line
        passes its flags (``port_base`` -> ``--port-base``). An argument said
        as ``""`` is left out (the message names what to fix).

        Example:
            >>> err = DataError("labels 3, 9 occur: give {num_classes}", argument="spec",
            ...                 mentions=["num_classes"])
            >>> err.said({"spec": "SRC", "num_classes": "K"}.__getitem__)
            'SRC: labels 3, 9 occur: give K'
        """
        text = self._filled(say)
        who = say(self.argument) if self.argument else ""
        return f"{who}: {text}" if who else text

    def renamed(self: _E, names: Mapping[str, str]) -> _E:
        """A copy whose argument and mentions are called as ``names`` says (the others kept).

        For a caller that knows an argument under its own name: the training
        job's ``data`` is the ``spec`` of the data opener it calls. The type,
        the message and any other attribute stay.

        Example:
            >>> err = DataError("'x.npz' does not exist", argument="spec")
            >>> moved = err.renamed({"spec": "eval_data"})
            >>> type(moved).__name__, moved.argument, str(moved)
            ('DataError', 'eval_data', "eval_data: 'x.npz' does not exist")
        """
        out = copy.copy(self)
        out.args = (self._filled(lambda name: "{" + names.get(name, name) + "}"),)
        if self.argument is not None:
            out.argument = names.get(self.argument, self.argument)
        out.mentions = tuple(names.get(name, name) for name in self.mentions)
        return out

    def _filled(self, say: Callable[[str], str]) -> str:
        text = str(self.args[0]) if self.args else ""
        for name in self.mentions:
            text = text.replace("{" + name + "}", say(name))
        return text

    def __str__(self) -> str:
        return self.said()

    def __repr__(self) -> str:
        data = "".join(
            f", {k}={v!r}"
            for k, v in (("argument", self.argument), ("mentions", self.mentions))
            if v
        )
        return f"{type(self).__name__}({self.args[0] if self.args else ''!r}{data})"


class ConfigError(TfdpError):
    """An option or argument that is out of range or inconsistent with another.

    Example:
        >>> issubclass(ConfigError, TfdpError)
        True
    """


class ConfigTypeError(ConfigError, TypeError):
    """An argument of the wrong kind (a source that is no source, a float where ints belong).

    Also a ``TypeError``, so that ``except TypeError`` keeps catching what
    Python's convention raises for a value of the wrong type.

    Example:
        >>> err = ConfigTypeError("must be a tfdp source, got int", argument="source")
        >>> isinstance(err, ConfigError), isinstance(err, TypeError), str(err)
        (True, True, 'source: must be a tfdp source, got int')
    """


class DataError(TfdpError):
    """Data that cannot be used as given: a missing file, a bad label, a short shard.

    Example:
        >>> str(DataError("digits.npz: key 'y' holds float labels (2.5)"))
        "digits.npz: key 'y' holds float labels (2.5)"
    """


class StateError(TfdpError):
    """Saved state that does not match what it is restored into (run, checkpoint, sampler).

    The message names the field and the file: no ``argument``.

    Example:
        >>> isinstance(StateError("sampler state: num_replicas saved 2, now 3"), ValueError)
        True
    """


class CheckpointError(StateError):
    """No checkpoint could be read, or the checkpoint directory is unusable.

    The message names the directory (or each checkpoint tried and why it
    could not be read) and what to do: delete or restore the directory, fix
    its permissions.

    Example:
        >>> issubclass(CheckpointError, StateError)
        True
    """


@contextmanager
def renaming(names: Mapping[str, str]) -> Iterator[None]:
    """Errors raised inside, their arguments renamed as ``names`` says (:meth:`TfdpError.renamed`).

    Around a call whose arguments the caller knows under its own names: the
    training job opens its ``eval_data`` with a data opener whose argument is
    ``spec``.

    Example:
        >>> with renaming({"spec": "eval_data"}):
        ...     raise DataError("'x.npz' does not exist", argument="spec")
        Traceback (most recent call last):
        ...
        tfdp.errors.DataError: eval_data: 'x.npz' does not exist
    """
    try:
        yield
    except TfdpError as exc:
        raise exc.renamed(names) from exc
