"""Seeded, stateless, per-sample image augmentations that run on whole batches.

This package owns tfdp's batched augmentations, one per module, and the
contracts an augmentation meets. An augmentation is a callable
``aug(example, seeds)``:

* ``example`` is a *batch*: a tuple/list whose first element is the image
  batch ``[B, H, W, C]``, a dict holding the images under ``image_key``
  (default ``"image"``), or a bare image tensor;
* ``seeds`` is an integer tensor ``[B, 2]`` (cast to int64), one stateless
  seed per sample, conventionally ``[epoch_key, position]``, handed in by the
  input layer (:mod:`tfdp.random`: where the numbers come from).

It returns the example with the same structure and the images replaced, and
carries the class attribute ``batched = True``. Every random decision for
sample ``b`` is a function of ``seeds[b]`` only, never of the batch size or of
the other samples: augmenting a batch equals augmenting each sample alone as a
batch of one. All work is vectorised over the batch (gathers on per-sample
index grids, per-sample selects, per-sample windows); there is no per-example
``tf.map_fn`` or ``tf.while_loop`` but for the windows' resize. Everything
runs eagerly, inside ``tf.function`` and inside ``tf.data.Dataset.map`` with
unknown (``None``) batch and image sizes.

Every built-in stage separates its random *draws* from their *application*:
``aug.augment(images, seeds) == aug.apply(images, aug.draw(seeds))``, where
``draw`` is vectorised over the whole batch of seeds and ``apply`` acts on
images with the drawn parameters (row ``b`` for sample ``b``). A loader can
therefore draw for many samples at once and apply sample by sample.

===========================  ===================================================================
module                       owns
===========================  ===================================================================
``contract``                 the Protocols the input layer dispatches on:
                             :class:`BatchedAugmentation`, :class:`PerExampleAugmentation`
``base``                     :class:`Augmentation`: example structure, seeds, draw / apply
``compose``                  :class:`Compose`: stages in order, stage ``i`` seeded
                             ``fold_in(seeds, i)``
``crop``, ``shift``,         :class:`RandomCrop`, :class:`RandomShift`, :class:`RandomFlip`,
``flip``, ``brightness``     :class:`RandomBrightness` (data-moving stages keep the dtype)
``to_float``, ``normalize``  :class:`ToFloat`, :class:`Normalize` (deterministic, float32)
``window``                   :class:`WindowAugmentation`: one window per image, cut and resized
                             (float32); where it lies is the stage's geometry
                             (:mod:`tfdp.windows.geometry`)
``resized_crop``,            :class:`RandomResizedCrop`, :class:`CenterCrop`,
``center_crop``,             :class:`ResizeCenterCrop` (DeiT's held-out transform: torchvision's
``resize_center_crop``       sampling, a placed window): their arguments, draws and geometry
``rand_augment``,            timm's / DeiT's training stages, with PIL's 8-bit values:
``color_jitter``,            :class:`RandAugment`, :class:`ColorJitter`, :class:`RandomErasing`,
``random_erasing``,          :class:`Mixup` (CutMix too: a batch stage, each replica's batch;
``mixup``                    :class:`MixParams`, its draws)
``spec``                     their configuration, timm's RandAugment strings
                             (:func:`parse_rand_augment`); pure Python
``_rand_ops``,               RandAugment's ops (timm's tables), PIL's colour operations and
``_pil_ops``, ``_affine``,   affine transform, a stage whose samples take different ops run
``_each``                    one sample at a time
``_args``, ``_padded``,      shared argument checks; padded windows by gathers; the kernel and
``_fast``                    graph tricks that give the same values faster (the why is there)
===========================  ===================================================================

A stage of one's own subclasses :class:`Augmentation` (``draw_count`` and
``apply``, or ``augment``) in a module of its own. A window stage lets a
window-decoding source decode only the window it keeps: :mod:`tfdp.windows`
splits an augmentation that starts with one (the stages after it are applied
per image, and from the first callable that is not an :class:`Augmentation`
on -- a stage that mixes the samples of a batch -- to each replica's assembled
batch).

Importing the package loads no TensorFlow: its names are imported on first
use (``from tfdp.augment import RandomFlip``), and :mod:`tfdp.augment.spec`
(the configuration of the timm / DeiT stages, with timm's RandAugment
strings) and :mod:`tfdp.augment.contract` are pure Python.

Example:
    >>> import tensorflow as tf
    >>> from tfdp.augment import Compose, RandomCrop, RandomFlip, ToFloat
    >>> aug = Compose([ToFloat(), RandomCrop(32, padding=4), RandomFlip()])
    >>> images = tf.zeros([8, 32, 32, 3], tf.uint8)
    >>> labels = tf.range(8)
    >>> seeds = tf.stack([tf.zeros([8], tf.int64), tf.range(8, dtype=tf.int64)], axis=1)
    >>> out_images, out_labels = aug((images, labels), seeds)
    >>> tuple(out_images.shape), out_images.dtype.name
    ((8, 32, 32, 3), 'float32')
"""

from __future__ import annotations

from tfdp._lazy import lazy_names

#: Public name -> the module that owns it (imported on first use).
_EXPORTS = {
    "Augmentation": "tfdp.augment.base",
    "AugmentationFn": "tfdp.augment.contract",
    "BatchedAugmentation": "tfdp.augment.contract",
    "CenterCrop": "tfdp.augment.center_crop",
    "ColorJitter": "tfdp.augment.color_jitter",
    "Compose": "tfdp.augment.compose",
    "MixParams": "tfdp.augment.mixup",
    "Mixup": "tfdp.augment.mixup",
    "Normalize": "tfdp.augment.normalize",
    "PerExampleAugmentation": "tfdp.augment.contract",
    "RandAugment": "tfdp.augment.rand_augment",
    "RandomBrightness": "tfdp.augment.brightness",
    "RandomCrop": "tfdp.augment.crop",
    "RandomErasing": "tfdp.augment.random_erasing",
    "RandomFlip": "tfdp.augment.flip",
    "RandomResizedCrop": "tfdp.augment.resized_crop",
    "RandomShift": "tfdp.augment.shift",
    "ResizeCenterCrop": "tfdp.augment.resize_center_crop",
    "ToFloat": "tfdp.augment.to_float",
    "WindowAugmentation": "tfdp.augment.window",
    "fold_in": "tfdp.random",
    "is_batched_augmentation": "tfdp.augment.contract",
    "parse_rand_augment": "tfdp.augment.spec",
    "per_sample_uniform": "tfdp.random",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
