"""The window path: which pixels of which file to decode, and how they map to a stage's output.

An image folder of JPEGs augmented by a stage that cuts one window per image
(:class:`tfdp.augment.RandomResizedCrop`, :class:`tfdp.augment.CenterCrop`,
:class:`tfdp.augment.ResizeCenterCrop`) need not decode whole images: the
window is planned from the file header's shape and the sample's seed, and
libjpeg decodes only it. This package owns that path, from the stages'
geometry to the replicas' batches, with the same values bit for bit as
decoding whole images and augmenting them (``tests/test_windows.py``);
:mod:`tfdp.augment` keeps each stage's draw and apply.

=================  ==========================================================================
module             owns
=================  ==========================================================================
``contract``       the Protocols the parts meet through: :class:`WindowGeometry` (a stage's
                   windows and placements), :class:`WindowStage` (a window stage),
                   :class:`WindowPlan` (the augmentation side for ``N`` entries),
                   :class:`WindowSource` (a source that decodes windows),
                   :class:`EpochEntries` / :class:`ElementFinisher` (the input layer's
                   side); no TensorFlow
``geometry``       each stage's geometry (:class:`RandomAreaWindows`,
                   :class:`CentredWindows`, :class:`ResizedCropWindows`: the window of
                   each image, a placed stage's placement in it, TensorFlow or NumPy
                   alike) and :class:`StageWindows` (a stage's windows for ``N`` samples,
                   in the graph or on the host, and its output from each)
``plan``           :func:`split_window`, :class:`WindowPipeline`, :class:`WindowRequest`:
                   an augmentation split into window / per-image / batch stages, every
                   draw made at once (on the host with NumPy, the same bits)
``decode``         :func:`decode_windows` (each file read and decoded once, over its
                   windows only), :func:`encoded_windows` / :func:`encoded_request`
                   (a batch of encoded images through a window stage / a whole plan)
``loader``         :class:`WindowedBatches`: the window path's loader of
                   :class:`tfdp.DistributedInput` (chunks of a step across the local
                   replicas, one read per file; picked by
                   :func:`tfdp.input.pipeline.make_loader`)
``parallelism``    every threading knob of the loader and the decoding, and why
=================  ==========================================================================

Dependencies point one way: ``contract`` <- ``geometry`` <- ``decode`` <-
:mod:`tfdp.augment` (a window stage holds its geometry and decodes encoded
images through it) <- ``plan`` <- ``loader`` <- :mod:`tfdp.input`; a source
(:mod:`tfdp.sources.image_folder`) uses ``contract`` and ``decode`` only, and
neither the sources nor the augmentations import each other. This package
module imports nothing: import the module that owns a name
(``from tfdp.windows.plan import split_window``).

Example:
    >>> from tfdp import augment
    >>> from tfdp.windows.plan import split_window
    >>> pipe = split_window(augment.Compose([augment.CenterCrop(8), augment.ToFloat()]))
    >>> pipe.output_size, [type(s).__name__ for _, s in pipe.image_stages]
    ((8, 8), ['ToFloat'])
"""
