"""A package's lazy names: imported from the module that owns them on first use (PEP 562).

This module owns the one ``__getattr__`` / ``__dir__`` pair of tfdp's packages
whose names live in modules that import TensorFlow or keras-hub (``tfdp``,
``tfdp.augment``, ``tfdp.sources``, ``tfdp.distribute``, ``tfdp.models``):
importing the package loads none of them (``import tfdp`` loads no
TensorFlow). A package states its lazy names in one table, name -> the module
that owns it. The first access imports that module and stores the value in the
package, so every later access is a plain attribute read; a submodule named in
``submodules`` is imported on first access (the import binds it). ``dir()`` is
the package's public names, loaded or not: its ``__all__`` and those submodules
(as scientific-python's ``lazy_loader`` does).

Example:
    >>> import sys, types
    >>> demo = sys.modules["lazy_demo"] = types.ModuleType("lazy_demo")
    >>> demo.__all__ = ["sqrt"]
    >>> demo.__getattr__, demo.__dir__ = lazy_names("lazy_demo", {"sqrt": "math"})
    >>> dir(demo), "sqrt" in vars(demo)
    (['sqrt'], False)
    >>> demo.sqrt(4.0), "sqrt" in vars(demo)  # loaded once, then an attribute of the package
    (2.0, True)
    >>> demo.cbrt
    Traceback (most recent call last):
    ...
    AttributeError: module 'lazy_demo' has no attribute 'cbrt'
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_names(
    package: str, owners: Mapping[str, str], submodules: Iterable[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose names ``owners`` maps lazily.

    Args:
        package: The package's ``__name__``; its ``__all__`` lists its public names.
        owners: Each lazy name -> the module it is imported from (under the same name).
        submodules: Submodules of ``package`` reachable as attributes before they are
            imported (``tfdp.augment`` after ``import tfdp``).

    Returns:
        ``(__getattr__, __dir__)``, to assign in the package
        (``__getattr__, __dir__ = lazy_names(__name__, {...})``).

    Example:
        >>> import sys, types
        >>> pkg = sys.modules["lazy_pkg"] = types.ModuleType("lazy_pkg")
        >>> pkg.__all__ = ["dumps"]
        >>> pkg.__getattr__, pkg.__dir__ = lazy_names("lazy_pkg", {"dumps": "json"}, ["more"])
        >>> dir(pkg), pkg.dumps([1])
        (['dumps', 'more'], '[1]')
    """
    owners, submodules = dict(owners), frozenset(submodules)

    def lazy_getattr(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")  # the import binds it
        owner = owners.get(name)
        if owner is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(owner), name)
        setattr(sys.modules[package], name, value)
        return value

    def lazy_dir() -> list[str]:
        return sorted({*sys.modules[package].__all__, *submodules})

    return lazy_getattr, lazy_dir
