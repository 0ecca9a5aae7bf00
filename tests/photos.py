"""Photo-like JPEG test images made locally (no network): smooth fields, edges, texture.

A helper for the tests and ``benchmarks/bench_images.py``. Each image is a
sum of random colour fields at octaves from the whole image down to a few
pixels (amplitude falling by 0.72 per octave, roughly the 1/f spectrum of
photos), a dozen flat-coloured rectangles and ellipses (sharp edges), and
pixel noise; encoded by Pillow at the requested quality (default 90, chroma
4:2:0). At 375x500 and quality 90 a file is about 90 KB, like an ImageNet
photo of that size.
"""

from __future__ import annotations

import io
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

#: ImageNet's typical sizes (height, width): landscape 4:3 and 3:2, their portrait twins.
IMAGENET_SIZES = ((375, 500), (500, 375), (333, 500), (500, 333), (375, 500), (400, 500))


def photo(height: int, width: int, rng: np.random.Generator) -> np.ndarray:
    """A photo-like uint8 RGB image ``[height, width, 3]``."""
    image = np.zeros((height, width, 3), np.float32)
    amplitude, longest = 1.0, max(height, width)
    for octave in range(9):
        cells = 2 ** (octave + 1)
        grid_h, grid_w = 2 + cells * height // longest, 2 + cells * width // longest
        grid = rng.standard_normal((grid_h, grid_w, 3)).astype(np.float32)
        grid = 0.6 * grid[..., :1] + 0.4 * grid  # colours correlated, like real scenes
        layer = np.stack(
            [
                np.asarray(Image.fromarray(grid[..., c]).resize((width, height), Image.BICUBIC))
                for c in range(3)
            ],
            axis=-1,
        )
        image += amplitude * layer
        amplitude *= 0.72
    image = (image - image.mean()) / (image.std() + 1e-6)
    pil = Image.fromarray(np.clip(128 + 45 * image, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(pil)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, width)), int(rng.integers(0, height))
        x1 = x0 + int(rng.integers(2, max(3, width // 2)))
        y1 = y0 + int(rng.integers(2, max(3, height // 2)))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=colour)
    out = np.asarray(pil).astype(np.float32)
    noise = 0.5 * rng.standard_normal((height, width, 3)) + rng.standard_normal((height, width, 1))
    out += 12 * noise.astype(np.float32)
    return np.clip(out, 0, 255).astype(np.uint8)


def encode(image: np.ndarray, fmt: str = "JPEG", quality: int = 90) -> bytes:
    """The image encoded by Pillow (``fmt`` JPEG or PNG)."""
    buf = io.BytesIO()
    mode = "L" if image.ndim == 2 else None
    Image.fromarray(image, mode).save(buf, fmt, quality=quality)
    return buf.getvalue()


def write_folder(
    root: str | os.PathLike[str],
    count: int,
    *,
    classes: int = 4,
    sizes: Sequence[tuple[int, int]] = IMAGENET_SIZES,
    quality: int = 90,
    seed: int = 0,
    extension: str = ".JPEG",
    first_index: int = 0,
) -> Path:
    """Write ``count`` photo-like JPEGs as ``root/c<k>/img<i><extension>`` (ImageNet layout).

    Image ``i`` (from ``first_index`` on) is of class ``i % classes`` and size
    ``sizes[i % len(sizes)]``.
    """
    root = Path(root)
    rng = np.random.default_rng(seed)
    for i in range(first_index, first_index + count):
        folder = root / f"c{i % classes:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        height, width = sizes[i % len(sizes)]
        (folder / f"img{i:05d}{extension}").write_bytes(
            encode(photo(height, width, rng), quality=quality)
        )
    return root
