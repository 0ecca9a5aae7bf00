"""``python -m tfdp``: the ``tfdp`` command (see :mod:`tfdp.cli`)."""

from tfdp.cli.app import run

run()
