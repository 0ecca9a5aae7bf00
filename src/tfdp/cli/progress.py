"""A progress bar for long data commands: on stderr, and only when stderr is a terminal.

This module owns :class:`Progress` (tqdm when installed, else a plain
counter rewritten in place). A redirected stderr -- a batch job's log --
gets no progress output at all, and stdout never does.

Example:
    >>> bar = Progress(3, "converting", enabled=False)
    >>> bar.update(2); bar.done
    2
"""

from __future__ import annotations

import sys
import threading
from typing import Any


class Progress:
    """A thread-safe progress bar on stderr (tqdm when installed, else a plain counter).

    Shown only when ``enabled`` and stderr is a terminal; counting works either way.

    Example:
        >>> bar = Progress(10, "reading", enabled=False)
        >>> bar.update(4); bar.close(); bar.done
        4
    """

    def __init__(self, total: int, desc: str, enabled: bool = True) -> None:
        self.total = total
        self.done = 0
        self._lock = threading.Lock()
        self._bar: Any = None
        self._kind = "off"
        self._desc = desc
        self._shown = -1
        self.enabled = enabled and sys.stderr.isatty()
        if not self.enabled:
            return
        try:
            from tqdm.auto import tqdm
        except ImportError:
            self._kind = "plain"
            return
        self._bar = tqdm(total=total, desc=desc, unit="ex", file=sys.stderr, leave=True)
        self._kind = "tqdm"

    def update(self, n: int = 1) -> None:
        """Count ``n`` more items done."""
        with self._lock:
            self.done += n
            if self._kind == "tqdm":
                self._bar.update(n)
            elif self._kind == "plain":
                pct = 100 * self.done // max(self.total, 1)
                if pct != self._shown:
                    self._shown = pct
                    line = f"\r{self._desc}: {self.done}/{self.total} ({pct}%)"
                    print(line, end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        """End the bar (closing twice is harmless)."""
        kind, self._kind = self._kind, "off"
        if kind == "tqdm":
            self._bar.close()
        elif kind == "plain":
            print(file=sys.stderr, flush=True)
