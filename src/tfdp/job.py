"""The main job, kept under its old name: :mod:`tfdp.recipe` is where it lives now.

Everything ``tfdp.job`` offered is re-exported from :mod:`tfdp.recipe`.

Example:
    >>> from tfdp.job import TrainConfig
    >>> TrainConfig(batch_size=32).batch_size
    32
"""

from __future__ import annotations

from tfdp.recipe import *  # noqa: F403
from tfdp.recipe import __all__ as __all__
from tfdp.recipe.data import check_one_step as _check_one_step  # noqa: F401 (old private name)
