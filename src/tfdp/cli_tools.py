"""The data and plot tools under their old module name (they live in :mod:`tfdp.cli` now).

Example:
    >>> from tfdp.cli_tools import convert_data, inspect_data, plot_metrics
    >>> plot_metrics.__module__
    'tfdp.cli.plot'
"""

from __future__ import annotations

from tfdp.cli.app import main
from tfdp.cli.convert import convert_data
from tfdp.cli.inspect import inspect_data
from tfdp.cli.plot import PLOT_DPI, PLOT_FIGSIZE, plot_metrics, read_metrics
from tfdp.recipe.dataspec import MANIFEST_SUFFIX

__all__ = [
    "MANIFEST_SUFFIX",
    "PLOT_DPI",
    "PLOT_FIGSIZE",
    "convert_data",
    "inspect_data",
    "main",
    "plot_metrics",
    "read_metrics",
]
