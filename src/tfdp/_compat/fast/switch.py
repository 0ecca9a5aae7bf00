"""The one switch of the speed tricks: ``TFDP_SPEED_TRICKS``, read here and nowhere else.

Unset or ``1``: every trick of :mod:`tfdp._compat.fast` is on (the default). ``0``: none is;
each runs its public-API fallback, with the same values. A comma-separated list of trick
names (:data:`TRICKS`): those on, the others off -- to measure one trick against its fallback,
or to find which one a new TensorFlow broke. The variable is read at each use (a process that
changes it changes what it builds next), and a child process inherits it (the launcher's
workers, the CLI's helpers).

Example:
    >>> trick_on("bound_call", {})
    True
    >>> trick_on("bound_call", {"TFDP_SPEED_TRICKS": "0"})
    False
    >>> sorted(tricks_on({"TFDP_SPEED_TRICKS": "end_process, bound_call"}))
    ['bound_call', 'end_process']
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from tfdp.errors import ConfigError

#: The environment variable that turns the speed tricks on (the default) or off.
SPEED_TRICKS_ENV = "TFDP_SPEED_TRICKS"

#: Every speed trick, by the name the switch takes (a row of :mod:`tfdp._compat`'s table each).
TRICKS = (
    "bound_call",
    "lightly_optimized_map",
    "release_in_background",
    "end_process",
    "bfc_cpu_allocator",
)


def tricks_on(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The speed tricks ``environ`` (default: ``os.environ``) leaves on.

    Example:
        >>> tricks_on({"TFDP_SPEED_TRICKS": "0"})
        frozenset()
        >>> try:
        ...     tricks_on({"TFDP_SPEED_TRICKS": "fast"})
        ... except ConfigError as exc:
        ...     print(str(exc)[:42], "...", str(exc)[-10:])
        TFDP_SPEED_TRICKS must be 1 (every speed ... got 'fast'
    """
    value = (os.environ if environ is None else environ).get(SPEED_TRICKS_ENV, "1").strip()
    if value in ("", "1"):
        return frozenset(TRICKS)
    if value == "0":
        return frozenset()
    names = frozenset(name.strip() for name in value.split(",") if name.strip())
    if not names or not names <= set(TRICKS):
        raise ConfigError(
            f"{SPEED_TRICKS_ENV} must be 1 (every speed trick, the default), 0 (none: each "
            "trick's public-API fallback) or a comma-separated list of the tricks to keep on "
            f"({', '.join(TRICKS)}), got {value!r}"
        )
    return names


def trick_on(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the speed trick ``name`` (one of :data:`TRICKS`) is on.

    Example:
        >>> trick_on("end_process", {"TFDP_SPEED_TRICKS": "bound_call"})
        False
    """
    return name in tricks_on(environ)
