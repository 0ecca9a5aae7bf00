"""The configuration of the timm / DeiT augmentations, checked before TensorFlow loads.

This module owns what :class:`~tfdp.augment.RandAugment`,
:class:`~tfdp.augment.ColorJitter`, :class:`~tfdp.augment.RandomErasing` and
:class:`~tfdp.augment.Mixup` are configured with -- one frozen dataclass
each, whose constructor checks every field (a :class:`tfdp.errors.ConfigError`
naming the argument and what would be valid) -- and the parser of timm's
RandAugment strings (:func:`parse_rand_augment`: ``"rand-m9-mstd0.5-inc1"``,
timm's ``rand_augment_transform`` grammar). Pure Python: importing it loads no
TensorFlow, so a command line can refuse a bad string before TensorFlow
starts. The stages take the same arguments and build these specs, so each
check exists once.

Where timm is silent or lenient the specs are strict, and say so: a
RandAugment section timm would ignore (no number: ``"rand-m9-foo"``) or an
unknown transform set (timm falls back to the default set) is refused, and
so is a magnitude above the bound timm clips it to.

Example:
    >>> spec = parse_rand_augment("rand-m9-mstd0.5-inc1")
    >>> spec.magnitude, spec.num_layers, spec.magnitude_std, spec.increasing, spec.prob
    (9, 2, 0.5, True, 0.5)
    >>> spec.ops[:5]
    ('AutoContrast', 'Equalize', 'Invert', 'Rotate', 'PosterizeIncreasing')
    >>> parse_rand_augment("rand-m9-x3")
    Traceback (most recent call last):
    ...
    tfdp.errors.ConfigError: auto_augment: 'rand-m9-x3': unknown section 'x3'; valid sections: \
m<int> (magnitude), n<int> (ops per image), p<float> (probability of each op), mstd<float> \
(magnitude noise), mmax<int> (magnitude bound), inc<0|1> (increasing ops), tweights \
(weighted op choice)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from tfdp.errors import ConfigError

#: timm's ``_LEVEL_DENOM``: magnitudes are levels out of 10 (and clipped to it, or to ``mmax``).
MAX_LEVEL = 10
#: timm's ``_RAND_TRANSFORMS``: the ops of ``rand-...`` (``inc0``), in timm's order.
RAND_OPS = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "Posterize",
    "Solarize",
    "SolarizeAdd",
    "Color",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateXRel",
    "TranslateYRel",
)
#: timm's ``_RAND_INCREASING_TRANSFORMS``: the ops of ``inc1`` (severity grows with magnitude).
RAND_INCREASING_OPS = (
    "AutoContrast",
    "Equalize",
    "Invert",
    "Rotate",
    "PosterizeIncreasing",
    "SolarizeIncreasing",
    "SolarizeAdd",
    "ColorIncreasing",
    "ContrastIncreasing",
    "BrightnessIncreasing",
    "SharpnessIncreasing",
    "ShearX",
    "ShearY",
    "TranslateXRel",
    "TranslateYRel",
)
#: timm's ``_RAND_WEIGHTED_0`` (``tweights``): op -> relative weight, chosen without replacement.
RAND_WEIGHTS = {
    "Rotate": 3.0,
    "ShearX": 2.0,
    "ShearY": 2.0,
    "TranslateXRel": 1.0,
    "TranslateYRel": 1.0,
    "ColorIncreasing": 0.25,
    "SharpnessIncreasing": 0.25,
    "AutoContrast": 0.25,
    "SolarizeIncreasing": 0.05,
    "SolarizeAdd": 0.05,
    "ContrastIncreasing": 0.05,
    "BrightnessIncreasing": 0.05,
    "Equalize": 0.05,
    "PosterizeIncreasing": 0.05,
    "Invert": 0.05,
}
_SECTIONS = (
    "m<int> (magnitude), n<int> (ops per image), p<float> (probability of each op), "
    "mstd<float> (magnitude noise), mmax<int> (magnitude bound), inc<0|1> (increasing ops), "
    "tweights (weighted op choice)"
)


def _number(value: Any, name: str, low: float, high: float = math.inf, *, open_low=False) -> float:
    """``value`` as a float in ``[low, high]`` (``(low, high]``: ``open_low``), else an error."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)
    if ok:
        ok = (value > low if open_low else value >= low) and value <= high
    if not ok:
        lo = "(" if open_low else "["
        bound = f"> {low}" if high == math.inf and open_low else f">= {low}"
        if high != math.inf:
            bound = f"in {lo}{low}, {high}]"
        raise ConfigError(f"must be a number {bound}, got {value!r}", argument=name)
    return float(value)


def _integer(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"must be an integer >= {low}, got {value!r}", argument=name)
    return int(value)


@dataclass(frozen=True)
class RandAugmentSpec:
    """RandAugment as timm configures it (``timm.data.auto_augment.rand_augment_transform``).

    Each image gets ``num_layers`` ops, chosen uniformly with replacement
    from :attr:`ops` (``weighted``: by :data:`RAND_WEIGHTS`, without
    replacement); each op is applied with probability ``prob``, at a magnitude
    drawn from ``N(magnitude, magnitude_std)`` (``magnitude_std = inf``:
    uniform in ``[0, magnitude]``; 0: exactly ``magnitude``) and clipped to
    ``[0, magnitude_max or 10]``.

    Args:
        magnitude: The level, in ``[0, magnitude_max or 10]`` (timm clips a
            larger one silently; refused here).
        num_layers: Ops per image, ``>= 1``.
        prob: Probability of applying each chosen op.
        magnitude_std: Standard deviation of the magnitude noise, ``>= 0``
            (``math.inf``: uniform).
        magnitude_max: The bound magnitudes are clipped to (timm's ``mmax``;
            default 10).
        increasing: timm's ``inc1``: the op set whose severity grows with the
            magnitude (:data:`RAND_INCREASING_OPS`).
        weighted: timm's ``tweights``: :data:`RAND_WEIGHTS`' ops and weights.

    Example:
        >>> RandAugmentSpec(magnitude=9, magnitude_std=0.5, increasing=True).ops[-1]
        'TranslateYRel'
        >>> RandAugmentSpec(magnitude=11)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: magnitude: must be a number in [0, 10], got 11
    """

    magnitude: float = MAX_LEVEL
    num_layers: int = 2
    prob: float = 0.5
    magnitude_std: float = 0.0
    magnitude_max: float | None = None
    increasing: bool = False
    weighted: bool = False

    def __post_init__(self) -> None:
        if self.magnitude_max is not None:
            _number(self.magnitude_max, "magnitude_max", 0, open_low=True)
        _number(self.magnitude, "magnitude", 0, self.bound)
        _integer(self.num_layers, "num_layers", 1)
        _number(self.prob, "prob", 0, 1)
        _number(self.magnitude_std, "magnitude_std", 0)
        if self.weighted and self.num_layers > len(RAND_WEIGHTS):
            raise ConfigError(
                f"must be at most {len(RAND_WEIGHTS)} with weighted=True (ops are "
                f"chosen without replacement), got {self.num_layers}",
                argument="num_layers",
            )

    @property
    def bound(self) -> float:
        """The largest magnitude: ``magnitude_max``, or 10."""
        return MAX_LEVEL if self.magnitude_max is None else float(self.magnitude_max)

    @property
    def ops(self) -> tuple[str, ...]:
        """The op names to choose from, in timm's order."""
        if self.weighted:
            return tuple(RAND_WEIGHTS)
        return RAND_INCREASING_OPS if self.increasing else RAND_OPS

    @property
    def weights(self) -> tuple[float, ...] | None:
        """Each op's choice probability for ``weighted`` (summing to 1), else None (uniform)."""
        if not self.weighted:
            return None
        total = sum(RAND_WEIGHTS.values())
        return tuple(w / total for w in RAND_WEIGHTS.values())


def parse_rand_augment(text: str, *, argument: str = "auto_augment") -> RandAugmentSpec:
    """Parse timm's RandAugment string (``"rand-m9-mstd0.5-inc1"``) into a :class:`RandAugmentSpec`.

    The grammar of ``timm.data.auto_augment.rand_augment_transform``: ``rand``
    then ``-``-separated sections in any order: ``m<int>`` magnitude (default
    10), ``n<int>`` ops per image (2), ``p<float>`` probability of each op
    (0.5), ``mstd<float>`` magnitude noise (0; above 100: uniform),
    ``mmax<int>`` magnitude bound (10), ``inc<0|1>`` increasing ops (0),
    ``t<name>`` op set (``tweights``). Stricter than timm: a section timm
    would ignore or misread, a section given twice, an unknown op set and a
    magnitude above its bound are errors.

    Args:
        text: The string.
        argument: The name the errors give the string (default timm's
            ``auto_augment``).

    Raises:
        ConfigError: naming the bad part and what is valid (``argument`` set).

    Example:
        >>> parse_rand_augment("rand-n3-m7-tweights").weighted
        True
        >>> parse_rand_augment("rand-m12")
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: auto_augment: 'rand-m12': magnitude 12 (section 'm12') is above \
its bound 10 (timm would clip it to 10); lower it, or raise the bound with mmax12
    """

    def bad(message: str) -> ConfigError:
        return ConfigError(f"{text!r}: {message}", argument=argument)

    if not isinstance(text, str):
        raise ConfigError(
            f"must be a string such as 'rand-m9-mstd0.5-inc1', got {text!r}",
            argument=argument,
        )
    parts = text.split("-")
    if parts[0] != "rand":
        raise bad(
            "only timm's RandAugment strings are supported: 'rand' then sections, e.g. "
            "'rand-m9-mstd0.5-inc1' (AutoAugment policies such as 'v0' or 'original', "
            "'augmix' and '3a' are not)"
        )
    values: dict[str, Any] = {}
    sections: dict[str, str] = {}
    for part in parts[1:]:
        if part.startswith("t"):
            key, value = "t", part[1:]
            if value != "weights":
                raise bad(f"unknown op set {part!r}; the supported one is tweights")
        else:
            match = re.fullmatch(r"(m|n|p|mstd|mmax|inc)(\d.*)", part)
            if match is None:
                raise bad(f"unknown section {part!r}; valid sections: {_SECTIONS}")
            key, value = match.groups()
        if key in sections:
            raise bad(f"section {key!r} given twice ({sections[key]!r}, {part!r})")
        sections[key] = part
        try:
            if key in ("m", "n", "mmax", "inc"):
                values[key] = int(value)
            elif key != "t":
                values[key] = float(value)
        except ValueError:
            kind = "an integer" if key in ("m", "n", "mmax", "inc") else "a number"
            raise bad(f"section {part!r}: {key} takes {kind}, got {value!r}") from None
    if values.get("inc", 0) not in (0, 1):
        raise bad(f"section {sections['inc']!r}: inc takes 0 or 1")
    if "n" in values and values["n"] < 1:
        raise bad(f"section {sections['n']!r}: n (ops per image) must be >= 1")
    if "p" in values and not 0 <= values["p"] <= 1:
        raise bad(f"section {sections['p']!r}: p (probability of each op) must be in [0, 1]")
    if "mmax" in values and values["mmax"] < 1:
        raise bad(f"section {sections['mmax']!r}: mmax must be >= 1")
    magnitude = values.get("m", MAX_LEVEL)
    bound = values.get("mmax", MAX_LEVEL)
    if magnitude > bound:
        where = f" (section {sections['m']!r})" if "m" in sections else ""
        raise bad(
            f"magnitude {magnitude}{where} is above its bound {bound} (timm would clip it to "
            f"{bound}); lower it, or raise the bound with mmax{magnitude}"
        )
    std = values.get("mstd", 0.0)
    return RandAugmentSpec(
        magnitude=magnitude,
        num_layers=values.get("n", 2),
        prob=values.get("p", 0.5),
        magnitude_std=math.inf if std > 100 else std,
        magnitude_max=values.get("mmax"),
        increasing=bool(values.get("inc", 0)),
        weighted="t" in sections,
    )


def _jitter_range(value: Any, name: str, center: float, bound: float | None) -> tuple[float, float]:
    """Torchvision's ``ColorJitter._check_input``: a number -> ``(center - v, center + v)``."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ConfigError(
                f"must be a number or a (min, max) pair, got {value!r}", argument=name
            )
        lo, hi = (_number(v, name, -math.inf) for v in value)
    else:
        v = _number(value, name, 0)
        lo, hi = center - v, center + v
        if bound is None:
            lo = max(lo, 0.0)
    limit = (0.0, math.inf) if bound is None else (-bound, bound)
    if not limit[0] <= lo <= hi <= limit[1]:
        raise ConfigError(
            f"must give a range within [{limit[0]}, {limit[1]}], got {value!r}",
            argument=name,
        )
    return lo, hi


@dataclass(frozen=True)
class ColorJitterSpec:
    """torchvision's ``ColorJitter`` as timm builds it: factor ranges, applied in a random order.

    A number ``v`` for brightness, contrast or saturation means a factor
    uniform in ``[max(0, 1 - v), 1 + v]``; for hue, a shift uniform in
    ``[-v, v]`` (``v <= 0.5``); a ``(min, max)`` pair gives the range itself.
    0 turns the adjustment off. timm turns a single ``color_jitter`` number into
    ``(v, v, v)`` (no hue): :meth:`from_timm`.

    Example:
        >>> ColorJitterSpec(0.4, 0.4, 0.4).brightness_range
        (0.6, 1.4)
        >>> ColorJitterSpec.from_timm(0.3).hue_range
        (0.0, 0.0)
    """

    brightness: Any = 0.0
    contrast: Any = 0.0
    saturation: Any = 0.0
    hue: Any = 0.0
    brightness_range: tuple[float, float] = field(init=False)
    contrast_range: tuple[float, float] = field(init=False)
    saturation_range: tuple[float, float] = field(init=False)
    hue_range: tuple[float, float] = field(init=False)

    def __post_init__(self) -> None:
        for name in ("brightness", "contrast", "saturation"):
            rng = _jitter_range(getattr(self, name), name, 1.0, None)
            object.__setattr__(self, f"{name}_range", rng)
        object.__setattr__(self, "hue_range", _jitter_range(self.hue, "hue", 0.0, 0.5))

    @classmethod
    def from_timm(cls, color_jitter: Any) -> ColorJitterSpec:
        """From timm's ``color_jitter`` argument: a number ``v`` is ``(v, v, v)``, or 3 or 4 values.

        Example:
            >>> ColorJitterSpec.from_timm((0.1, 0.2, 0.3, 0.1)).hue_range
            (-0.1, 0.1)
        """
        if isinstance(color_jitter, (tuple, list)):
            if len(color_jitter) not in (3, 4):
                raise ConfigError(
                    f"must be a number or 3 or 4 values (brightness, contrast, "
                    f"saturation[, hue]), got {color_jitter!r}",
                    argument="color_jitter",
                )
            return cls(*color_jitter)
        v = _number(color_jitter, "color_jitter", 0)
        return cls(v, v, v)

    @property
    def active(self) -> tuple[str, ...]:
        """The adjustments that change anything (a range other than the identity)."""
        identity = {"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0}
        return tuple(
            name
            for name, centre in identity.items()
            if getattr(self, f"{name}_range") != (centre, centre)
        )


def color_jitter_applies(auto_augment: str | None, force: bool = False) -> bool:
    """Whether timm's training transform applies colour jitter next to ``auto_augment``.

    timm's ``transforms_imagenet_train`` drops colour jitter when an
    auto-augment policy is set, unless forced (``force_color_jitter``) or the
    policy is a 3-Augment one: DeiT's defaults (``color_jitter=0.3`` with
    ``rand-m9-mstd0.5-inc1``) therefore train without colour jitter.

    Example:
        >>> color_jitter_applies("rand-m9-mstd0.5-inc1"), color_jitter_applies(None)
        (False, True)
    """
    return not auto_augment or bool(force) or "3a" in auto_augment


#: The erasing fill modes (timm's ``RandomErasing`` ``mode``).
ERASE_MODES = ("const", "rand", "pixel")


@dataclass(frozen=True)
class ErasingSpec:
    """timm's ``RandomErasing`` (``timm.data.random_erasing``), per sample.

    With probability ``probability`` an image gets a count of boxes uniform in
    ``[min_count, max_count]``; each box has area ``U(min_area, max_area) *
    area / count`` and log aspect ratio ``U(log min_aspect, log max_aspect)``,
    up to 10 attempts to fit, and is filled by ``mode``: ``"const"`` 0,
    ``"rand"`` one standard-normal value per channel, ``"pixel"`` one per
    pixel and channel (in normalised units: erasing comes after ``Normalize``).

    Args:
        probability: Probability that an image is erased.
        min_area: Minimum fraction of the image area erased.
        max_area: Maximum fraction.
        min_aspect: Minimum aspect ratio of a box.
        max_aspect: Maximum aspect ratio (default ``1 / min_aspect``).
        mode: ``"const"``, ``"rand"`` or ``"pixel"``.
        min_count: Minimum number of boxes.
        max_count: Maximum number of boxes (default ``min_count``).
        num_splits: timm's split of an AugMix batch into clean and augmented
            parts; 0 or 1 only (tfdp makes no split batches).

    Example:
        >>> ErasingSpec(0.25, mode="pixel").max_count
        1
    """

    probability: float = 0.5
    min_area: float = 0.02
    max_area: float = 1 / 3
    min_aspect: float = 0.3
    max_aspect: float | None = None
    mode: str = "const"
    min_count: int = 1
    max_count: int | None = None
    num_splits: int = 0

    def __post_init__(self) -> None:
        _number(self.probability, "probability", 0, 1)
        _number(self.min_area, "min_area", 0, 1, open_low=True)
        _number(self.max_area, "max_area", self.min_area, 1)
        _number(self.min_aspect, "min_aspect", 0, open_low=True)
        if self.max_aspect is None:
            object.__setattr__(self, "max_aspect", 1 / self.min_aspect)
        _number(self.max_aspect, "max_aspect", self.min_aspect)
        if self.mode not in ERASE_MODES:
            raise ConfigError(
                f"must be one of {ERASE_MODES} (timm's erasing modes), got {self.mode!r}",
                argument="mode",
            )
        _integer(self.min_count, "min_count", 1)
        if self.max_count is None:
            object.__setattr__(self, "max_count", self.min_count)
        _integer(self.max_count, "max_count", self.min_count)
        if isinstance(self.num_splits, bool) or self.num_splits not in (0, 1):
            raise ConfigError(
                "must be 0 or 1: timm's num_splits > 1 leaves the clean part of an "
                f"AugMix split batch unerased, and tfdp makes no split batches; got "
                f"{self.num_splits!r}",
                argument="num_splits",
            )


#: The Mixup / CutMix modes (timm's ``Mixup`` ``mode``).
MIX_MODES = ("batch", "pair", "elem")


@dataclass(frozen=True)
class MixupSpec:
    """timm's ``Mixup`` (``timm.data.mixup``): Mixup / CutMix of a batch, soft targets.

    Args:
        mixup_alpha: Beta(alpha, alpha) of Mixup's lambda; Mixup is on if > 0.
        cutmix_alpha: Beta(alpha, alpha) of CutMix's lambda; CutMix is on if > 0.
        cutmix_minmax: ``(min, max)`` fractions of the image side for CutMix's
            box instead of lambda's (then ``cutmix_alpha`` is 1, as timm forces).
        prob: Probability of mixing a batch (an element, a pair).
        switch_prob: Probability of CutMix rather than Mixup when both are on.
        mode: ``"batch"`` (one lambda per batch, DeiT's), ``"pair"`` or ``"elem"``.
        correct_lam: Recompute lambda from the box clipped by the image borders.
        label_smoothing: Smoothing of the one-hot targets, in ``[0, 1)``.
        num_classes: The number of classes (the soft targets are ``[B, num_classes]``).

    Example:
        >>> MixupSpec(0.8, 1.0, num_classes=10).label_smoothing
        0.1
        >>> MixupSpec(0.8, 1.0, label_smoothing=1.0, num_classes=10)
        Traceback (most recent call last):
        ...
        tfdp.errors.ConfigError: label_smoothing: must be in [0, 1), got 1.0
    """

    mixup_alpha: float = 1.0
    cutmix_alpha: float = 0.0
    cutmix_minmax: tuple[float, float] | None = None
    prob: float = 1.0
    switch_prob: float = 0.5
    mode: str = "batch"
    correct_lam: bool = True
    label_smoothing: float = 0.1
    num_classes: int | None = None

    def __post_init__(self) -> None:
        _number(self.mixup_alpha, "mixup_alpha", 0)
        _number(self.cutmix_alpha, "cutmix_alpha", 0)
        if self.cutmix_minmax is not None:
            minmax = self.cutmix_minmax
            if (
                not isinstance(minmax, (tuple, list))
                or len(minmax) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in minmax)
                or not 0 < minmax[0] < minmax[1] <= 1
            ):
                raise ConfigError(
                    f"must be None or (min, max) with 0 < min < max <= 1 "
                    f"(fractions of the image side), got {minmax!r}",
                    argument="cutmix_minmax",
                )
            object.__setattr__(self, "cutmix_minmax", (float(minmax[0]), float(minmax[1])))
            object.__setattr__(self, "cutmix_alpha", 1.0)  # timm forces it
        if not (self.mixup_alpha > 0 or self.cutmix_alpha > 0):
            raise ConfigError(
                "must be > 0, or {cutmix_alpha} (or cutmix_minmax set): with both 0 "
                "nothing is mixed; leave Mixup out instead",
                argument="mixup_alpha",
                mentions=["cutmix_alpha"],
            )
        _number(self.prob, "prob", 0, 1)
        _number(self.switch_prob, "switch_prob", 0, 1)
        if self.mode not in MIX_MODES:
            raise ConfigError(f"must be one of {MIX_MODES}, got {self.mode!r}", argument="mode")
        smoothing = self.label_smoothing
        if (
            isinstance(smoothing, bool)
            or not isinstance(smoothing, (int, float))
            or not 0 <= smoothing < 1
        ):
            raise ConfigError(f"must be in [0, 1), got {smoothing!r}", argument="label_smoothing")
        if self.num_classes is None:
            raise ConfigError(
                "must be given: Mixup turns class labels into soft targets [batch, num_classes]",
                argument="num_classes",
            )
        _integer(self.num_classes, "num_classes", 2)
