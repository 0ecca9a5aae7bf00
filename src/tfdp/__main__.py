"""``python -m tfdp``: the ``tfdp`` command (see :mod:`tfdp.cli`)."""

import sys

from tfdp.cli import main

sys.exit(main())
