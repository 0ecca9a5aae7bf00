"""The files of an image folder ``root/<class>/<image>``, listed in torchvision's order.

This module owns the listing :class:`~tfdp.sources.image_folder.ImageFolderSource`
is built on: classes are the sorted sub-folder names of ``root`` (hidden ones
included, as in ``torchvision``); files are collected per class, the class
folder walked recursively (symlinks followed, a symlink cycle walked once),
directories in sorted path order and files sorted by name within each; an
extension matches case-insensitively. Index ``i`` of the listing is therefore
``torchvision.datasets.ImageFolder(root).samples[i]``. Pure Python and NumPy.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> for name in ("b/2.png", "b/1.PNG", "a/x/3.jpg", "a/0.txt"):
    ...     os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
    ...     open(os.path.join(root, name), "w").close()
    >>> listing = list_folder(root, (".png", ".jpg"))
    >>> listing.classes, [p.decode() for p in listing.relative_paths], listing.counts
    (['a', 'b'], ['a/x/3.jpg', 'b/1.PNG', 'b/2.png'], [1, 2])
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable

from tfdp.errors import ConfigError

_MAX_LISTED = 5


def normalise_extensions(extensions: str | Iterable[str]) -> tuple[str, ...]:
    """``extensions`` as a tuple of lower-case endings; a ConfigError for none or a non-string.

    Example:
        >>> normalise_extensions(".JPG")
        ('.jpg',)
    """
    exts = (extensions,) if isinstance(extensions, str) else tuple(extensions)
    if not exts or not all(isinstance(e, str) and e for e in exts):
        raise ConfigError(
            f"must be one or more non-empty strings (e.g. '.jpg'), got {extensions!r}",
            argument="extensions",
        )
    return tuple(e.lower() for e in exts)


def _list_class(class_dir: str, exts: tuple[str, ...]) -> list[str]:
    """Image files under ``class_dir``, in torchvision's order, as full paths."""
    found: list[tuple[str, list[str]]] = []
    stack = [class_dir]
    st = os.stat(class_dir)
    seen = {(st.st_dev, st.st_ino)}
    while stack:
        directory = stack.pop()
        names = []
        with os.scandir(directory) as it:
            for entry in it:
                try:
                    is_dir = entry.is_dir()
                except OSError:
                    is_dir = False
                if is_dir:
                    st = entry.stat()
                    key = (st.st_dev, st.st_ino)
                    if key not in seen:  # a symlink cycle would never end
                        seen.add(key)
                        stack.append(entry.path)
                elif entry.name.lower().endswith(exts):
                    names.append(entry.name)
        found.append((directory, names))
    found.sort(key=lambda item: item[0])
    return [os.path.join(d, name) for d, names in found for name in sorted(names)]


@dataclasses.dataclass(frozen=True)
class FolderListing:
    """An image folder's files.

    Attributes:
        root: The folder, absolute.
        classes: Sorted class folder names; ``classes[k]`` has label ``k``.
        relative_paths: Every file's path below ``root``, as bytes, class by class.
        counts: Files per class, in ``classes`` order.
    """

    root: str
    classes: list[str]
    relative_paths: list[bytes]
    counts: list[int]


def list_folder(root: str | os.PathLike[str], extensions: tuple[str, ...]) -> FolderListing:
    """The files of ``root/<class>/...`` ending in ``extensions``, in torchvision's order.

    Raises:
        FileNotFoundError: ``root`` does not exist; it has no class folder; a
            class folder has no image (the empty ones are named).
        tfdp.errors.ConfigError: ``root`` is not a directory.
    """
    root_str = os.path.abspath(os.path.expanduser(os.fspath(root)))
    if not os.path.exists(root_str):
        raise FileNotFoundError(f"ImageFolderSource: root {root_str!r} does not exist")
    if not os.path.isdir(root_str):
        raise ConfigError(
            f"{root_str!r} is not a directory (ImageFolderSource takes the folder holding "
            "one sub-folder per class)",
            argument="root",
        )
    with os.scandir(root_str) as it:
        classes = sorted(e.name for e in it if e.is_dir())
    if not classes:
        raise FileNotFoundError(
            f"ImageFolderSource: no class folder in {root_str!r} "
            "(expected the layout root/<class>/<image>)"
        )
    rel: list[bytes] = []
    counts: list[int] = []
    empty: list[str] = []
    cut = len(root_str) + len(os.sep)
    for cls in classes:
        files = _list_class(os.path.join(root_str, cls), extensions)
        if not files:
            empty.append(cls)
        counts.append(len(files))
        rel.extend(os.fsencode(f[cut:]) for f in files)
    if empty:
        listed = ", ".join(repr(c) for c in empty[:_MAX_LISTED])
        more = f" and {len(empty) - _MAX_LISTED} more" if len(empty) > _MAX_LISTED else ""
        raise FileNotFoundError(
            f"ImageFolderSource: {len(empty)} class folder(s) of {root_str!r} hold no image "
            f"with extension {'/'.join(extensions)}: {listed}{more}"
        )
    return FolderListing(root_str, classes, rel, counts)
