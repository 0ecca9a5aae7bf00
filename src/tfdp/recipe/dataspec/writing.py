"""What the writers of directory formats share: a staging directory, published whole.

This module owns :func:`staging_dir` (a fresh directory beside the
destination, under a temporary name) and :func:`publish_dir` (the finished
directory renamed to the destination): a writer that fails removes its
staging directory, so an error never leaves a half-written destination.

Example:
    >>> import os, tempfile
    >>> dst = os.path.join(tempfile.mkdtemp(), "out")
    >>> tmp = staging_dir(dst)
    >>> open(os.path.join(tmp, "a.txt"), "w").close()
    >>> publish_dir(tmp, dst); os.listdir(dst)
    ['a.txt']
"""

from __future__ import annotations

import os

from tfdp._util import temp_name


def staging_dir(dst: str) -> str:
    """A new, empty directory beside ``dst`` under a temporary name (its parents made)."""
    parent = os.path.dirname(os.path.abspath(dst))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, temp_name("." + os.path.basename(os.path.abspath(dst))))
    os.makedirs(tmp)
    return tmp


def publish_dir(tmp: str, dst: str) -> None:
    """Move the finished ``tmp`` directory to ``dst`` (which is absent or an empty directory)."""
    if os.path.isdir(dst):
        os.rmdir(dst)  # empty (checked before); fails, leaving dst alone, if it filled up since
    os.rename(tmp, dst)
