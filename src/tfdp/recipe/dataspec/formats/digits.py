"""The bundled UCI digits as a data format: the spec ``"digits"``, its fixed held-out split.

This module owns :class:`Digits`: 1,797 grey 8x8 images (levels 0..16: scale
1/16) of 10 named classes, from :func:`tfdp.recipe.digits.load_digits`, held out
by the digits' own fixed split (the last 360 of a seeded shuffle), whatever the
fraction asked for. tfdp writes no data in this format.

Example:
    >>> data = Digits().open("digits", OpenRequest())
    >>> data.kind, data.num_examples, data.image_shape, data.scale
    ('digits', 1797, (8, 8, 1), 0.0625)
"""

from __future__ import annotations

from typing import Literal

from tfdp.errors import ConfigError, DataError
from tfdp.recipe.dataspec.arrays import arrays_data
from tfdp.recipe.dataspec.checks import check_class_names
from tfdp.recipe.dataspec.contract import HeldOut, OpenRequest, WriteRequest
from tfdp.recipe.dataspec.opened import OpenedData


class Digits:
    """The bundled UCI digits (see the module docstring); meets :class:`DataFormat`.

    Example:
        >>> Digits().recognise("digits"), Digits().recognise("digits.npz")
        (True, False)
    """

    name = "digits"
    about = "'digits' (bundled)"
    channels_chosen = False
    writes: Literal["file", "directory"] | None = None
    suffix = None
    write_options: frozenset[str] = frozenset()

    def recognise(self, spec: str) -> bool:
        """The name ``"digits"`` (a name, never a path)."""
        return spec == "digits"

    def open(self, spec: str, request: OpenRequest) -> OpenedData:
        """All 1,797 digits, 10 classes named ``"0"``..``"9"``."""
        from tfdp.recipe.digits import load_digits

        images, labels = load_digits("all")
        data = arrays_data(
            "digits", "bundled UCI digits", images, labels, [str(k) for k in range(10)], 1 / 16
        )
        data.details.append("pixel levels: 0..16 (not 0..255)")
        check_class_names("the digits", data.classes, request.class_names)
        if request.num_classes is not None and request.num_classes != 10:
            raise DataError(
                f"the digits have 10 classes, but {request.num_classes} are expected",
                argument="num_classes",
            )
        return data

    def split(
        self, data: OpenedData, *, eval_fraction: float, seed: int, image_size: int | None
    ) -> HeldOut:
        """The digits' fixed split (:func:`tfdp.recipe.digits.load_digits`), whatever the fraction.

        Example:
            >>> digits = Digits()
            >>> part = digits.split(digits.open("digits", OpenRequest()), eval_fraction=0.5,
            ...                     seed=0, image_size=None)
            >>> part.train.num_examples, part.eval.num_examples, part.how
            (1437, 360, "the digits' fixed held-out split of 360")
        """
        from tfdp.recipe.digits import DIGITS_HELD_OUT, load_digits
        from tfdp.sources import ArraySource

        (x, y), (xt, yt) = load_digits()
        return HeldOut(
            ArraySource((x, y)),
            ArraySource((xt, yt)),
            f"the digits' fixed held-out split of {DIGITS_HELD_OUT}",
            by_fraction=False,
        )

    def write(self, data: OpenedData, dst: str, request: WriteRequest) -> tuple[int, list[str]]:
        """Refused: the digits are bundled with tfdp, no data set is written as them."""
        raise ConfigError("the digits are bundled with tfdp: no data set is written as digits")
