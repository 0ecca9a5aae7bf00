"""The ``tfdp`` command line: one module per command, shared argument helpers, one entry point.

This package owns the command line; the library knows nothing of it. Each
command's module exposes ``add_parser(subparsers)`` and a handler:

* :mod:`tfdp.cli.train` -- ``tfdp train`` (flags from :class:`tfdp.recipe.TrainConfig`,
  Ctrl-C / SIGTERM handling, exit statuses);
* :mod:`tfdp.cli.evaluate` -- ``tfdp evaluate RUN_DIR``;
* :mod:`tfdp.cli.launch` -- ``tfdp launch`` (the library half is :mod:`tfdp.launch`);
* :mod:`tfdp.cli.plot` -- ``tfdp plot RUN_DIR``;
* :mod:`tfdp.cli.data` -- ``tfdp data convert | inspect`` (:mod:`tfdp.cli.convert`,
  :mod:`tfdp.cli.inspect`, :mod:`tfdp.cli.progress`);
* :mod:`tfdp.cli.sampler` -- ``tfdp sampler``;
* :mod:`tfdp.cli.models` -- ``tfdp models import | list`` (timm's / DeiT's weights into a
  Keras model file);
* :mod:`tfdp.cli.args` -- the parser class and converters every command shares;
* :mod:`tfdp.cli.tf_log` -- TensorFlow's C++ records of a lost peer held back from
  ``tfdp train``'s stderr (a filter process);
* :mod:`tfdp.cli.app` -- :func:`main`: the parser assembled, exceptions turned into statuses.

``tfdp`` (the console script), ``python -m tfdp`` and ``python -m tfdp.cli``
all run :func:`tfdp.cli.app.run`: :func:`main`, then the process's end. Importing the
package loads no TensorFlow.

Example:
    >>> main(["sampler", "--num-examples", "4", "--replicas", "2", "--sampler", "eval"])
    ... # doctest: +NORMALIZE_WHITESPACE +ELLIPSIS
    DistributedEvalSampler(num_examples=4, num_replicas=2, ...)
    step  rank 0  rank 1
    0     0       1
    1     2       3
    0
"""

from __future__ import annotations

from tfdp.cli.app import build_parser, main
from tfdp.cli.sampler import sampler_table
from tfdp.cli.train import train_request

__all__ = ["build_parser", "main", "sampler_table", "train_request"]
