"""`tfdp train`'s 2 replicas in the test session (test helper).

``make_strategy(cpu_replicas=2)`` makes 2 logical CPU devices, which TensorFlow allows only
before it initialises: a test session, whose TensorFlow runs on 4 (tests/conftest.py), answers
it with ``mirrored_of(2)``, a MirroredStrategy over 2 of its 4. So a `tfdp train` command, or a
script's ``make_strategy(cpu_replicas=2)``, runs in the test's process instead of a new Python +
TensorFlow process (seconds each) where the process is not the point.
"""

from __future__ import annotations

from typing import Any


def answer_two_replicas(monkeypatch: Any, mirrored_of: Any) -> list[str]:
    """``tfdp.distribute.make_strategy(kind, cpu_replicas=2)`` (kind "auto" or "cpu", `tfdp
    train`'s default) answered by ``mirrored_of(2)`` for the test; other requests go to the real
    function. Returns the list of the kinds answered, for the test to check."""
    import tfdp.distribute
    from tfdp.distribute.strategy import make_strategy as real

    answered: list[str] = []

    def make_strategy(kind: str = "auto", **kwargs: Any) -> Any:
        if kind in ("auto", "cpu") and kwargs == {"cpu_replicas": 2}:
            answered.append(kind)
            return mirrored_of(2)
        return real(kind, **kwargs)

    monkeypatch.setattr(tfdp.distribute, "make_strategy", make_strategy)
    return answered
