"""``python -m tfdp.cli``: the ``tfdp`` command."""

from tfdp.cli.app import run

run()
