"""The window path: decode only the window of an image that a sample's augmentation keeps.

An image folder of JPEGs augmented by a stage that cuts one window per image
(:class:`tfdp.augment.RandomResizedCrop`, :class:`tfdp.augment.CenterCrop`)
need not decode whole images: the window is planned from the file header's
shape and the sample's seed, and libjpeg decodes only it. This package owns
that path, from the augmentation's plan to the replicas' batches, with the
same values bit for bit as decoding whole images and augmenting them
(``tests/test_windows.py``).

=================  ==========================================================================
module             owns
=================  ==========================================================================
``contract``       the Protocols the parts meet through: :class:`WindowPlan` (augmentation
                   side), :class:`WindowSource` (a source that decodes windows),
                   :class:`EpochEntries` (the input layer's side); no TensorFlow
``plan``           :func:`split_window`, :class:`WindowPipeline`, :class:`WindowRequest`:
                   an augmentation split into window / per-image / batch stages, every
                   draw made at once (on the host with NumPy, the same bits)
``decode``         :func:`decode_windows` (each file read and decoded once, over its
                   windows only), :func:`encoded_windows` / :func:`encoded_request`
                   (a batch of encoded images through a window stage / a whole plan)
``loader``         :class:`WindowedBatches` (chunks of a step across the local
                   replicas, one read per file) and :func:`window_loader`, the one
                   factory :class:`tfdp.DistributedInput` calls (None: not this path)
``parallelism``    every threading knob of the loader and the decoding, and why
=================  ==========================================================================

Dependencies point one way: ``contract`` <- ``decode`` <- :mod:`tfdp.augment`
(a window stage on encoded images) <- ``plan`` <- ``loader`` <- :mod:`tfdp.input`;
a source (:mod:`tfdp.sources.image_folder`) uses ``contract`` and ``decode``
only, and neither the sources nor the augmentations import each other. This
package module imports nothing: import the module that owns a name
(``from tfdp.windows.plan import split_window``).

Example:
    >>> from tfdp import augment
    >>> from tfdp.windows.plan import split_window
    >>> pipe = split_window(augment.Compose([augment.CenterCrop(8), augment.ToFloat()]))
    >>> pipe.output_size, [type(s).__name__ for _, s in pipe.image_stages]
    ((8, 8), ['ToFloat'])
"""
